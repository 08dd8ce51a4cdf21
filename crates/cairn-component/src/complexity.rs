//! The compile budget: a component is measured before it is compiled, and
//! refused past validated complexity limits, so no upload can hold a
//! compiler thread for minutes (the compile itself cannot be interrupted).
//! Cranelift's time grows faster than linearly with a function's size and
//! its locals; these caps sit far above what real controllers need (the
//! examples: at most a few thousand locals in one function) and far below
//! what stalls a compile.

use super::ComponentError;

/// Functions, all core modules together.
pub const MAX_FUNCTIONS: u64 = 100_000;
/// Locals of one function.
pub const MAX_LOCALS: u64 = 5_000;
/// Bytes of one function's body.
pub const MAX_FUNCTION_BYTES: u64 = 1 << 20;
/// Bytes of code, all core modules together.
pub const MAX_CODE_BYTES: u64 = 48 << 20;

/// What a component holds, as the budget counts it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Complexity {
    /// Functions with bodies.
    pub functions: u64,
    /// The most locals of one function.
    pub max_locals: u64,
    /// The largest function body, in bytes.
    pub max_function_bytes: u64,
    /// All code, in bytes.
    pub code_bytes: u64,
}

/// Measure `bytes` (every nested core module), refusing at the first limit
/// crossed with a message that names it.
pub fn check(bytes: &[u8]) -> Result<Complexity, ComponentError> {
    let refuse = |what: String| {
        ComponentError::TooComplex(format!(
            "{what}; cairn refuses to compile it (limits: {MAX_FUNCTIONS} functions, {MAX_LOCALS} locals per function, {MAX_FUNCTION_BYTES} bytes per function, {MAX_CODE_BYTES} bytes of code)"
        ))
    };
    let mut c = Complexity::default();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| ComponentError::NotAComponent(e.to_string()))?;
        let wasmparser::Payload::CodeSectionEntry(body) = payload else {
            continue;
        };
        c.functions += 1;
        let size = body.range().len() as u64;
        c.code_bytes += size;
        c.max_function_bytes = c.max_function_bytes.max(size);
        let mut locals = 0u64;
        let reader = body
            .get_locals_reader()
            .map_err(|e| ComponentError::NotAComponent(e.to_string()))?;
        for local in reader {
            let (count, _) = local.map_err(|e| ComponentError::NotAComponent(e.to_string()))?;
            locals += u64::from(count);
        }
        c.max_locals = c.max_locals.max(locals);
        if locals > MAX_LOCALS {
            return Err(refuse(format!(
                "function {} declares {locals} locals",
                c.functions - 1
            )));
        }
        if size > MAX_FUNCTION_BYTES {
            return Err(refuse(format!(
                "function {} is {size} bytes",
                c.functions - 1
            )));
        }
        if c.functions > MAX_FUNCTIONS {
            return Err(refuse(format!(
                "it has more than {MAX_FUNCTIONS} functions"
            )));
        }
        if c.code_bytes > MAX_CODE_BYTES {
            return Err(refuse(format!(
                "it holds more than {MAX_CODE_BYTES} bytes of code"
            )));
        }
    }
    Ok(c)
}
