//! What a component imports, checked before it is compiled: an import the
//! host does not provide would fail the link only after the compile (43 to
//! 72 s for a `componentize-js` build), and with a message about the world.
//! Here it is refused in the time a parse takes, naming every missing
//! import and what to do. The exports the world asks for are checked once
//! it is compiled.

use super::ComponentError;

/// The interfaces the host links, by `namespace:package/` prefix (any
/// version the linker matches): WASI 0.2's CLI, clocks, filesystem, I/O,
/// random and sockets (sockets are linked, and every address is denied),
/// HTTP's types and outgoing handler,
/// the controller world, and the capabilities.
pub const PROVIDED: &[&str] = &[
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:http/types@",
    "wasi:http/outgoing-handler@",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
    "cairn:controller/",
    "cairn:model/",
    "cairn:tools/",
];

/// What to do about an import of `name` this host does not provide.
fn advice(name: &str) -> &'static str {
    if name.starts_with("wasi:http/") {
        "this host provides wasi:http's types and outgoing-handler only (a controller sends requests; it serves none)"
    } else if name.starts_with("cairn:") {
        "this host is older than the controller's SDK; upgrade cairn"
    } else {
        "a controller may import only WASI 0.2 (cli, clocks, filesystem, http, io, random, sockets), cairn:controller and cairn's capabilities"
    }
}

/// The component's own imports (not those of the components nested in
/// it), by name.
pub fn imports(bytes: &[u8]) -> Result<Vec<String>, ComponentError> {
    let mut depth = 0u32;
    let mut names = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| ComponentError::NotAComponent(e.to_string()))?;
        match payload {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    let import =
                        import.map_err(|e| ComponentError::NotAComponent(e.to_string()))?;
                    names.push(import.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// Refuse a component that imports anything the host does not provide.
pub fn check(bytes: &[u8]) -> Result<(), ComponentError> {
    // Interfaces are named `namespace:package/…`; a plain name is one of
    // the world's own types (`info`, `start`, `outcome`).
    let missing: Vec<String> = imports(bytes)?
        .into_iter()
        .filter(|name| name.contains(':'))
        .filter(|name| !PROVIDED.iter().any(|p| name.starts_with(p)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = missing
        .iter()
        .map(|name| format!("{name} ({})", advice(name)))
        .collect();
    Err(ComponentError::Unprovided(lines.join("; ")))
}

fn is_component(bytes: &[u8]) -> bool {
    // Magic, then the layer/version word: components are layer 1.
    bytes.len() >= 8 && bytes.starts_with(b"\0asm") && bytes[6..8] == [1, 0]
}

/// What is checked of a component before it is compiled, in the time a
/// parse takes: that it is a component (not a core module), that it
/// imports only what this host provides, and that it fits the compile
/// budget. An upload answers these at once, the compile following.
pub fn precheck(bytes: &[u8]) -> Result<(), ComponentError> {
    if !is_component(bytes) {
        return Err(ComponentError::NotAComponent(
            if bytes.starts_with(b"\0asm") {
                "it is a core WebAssembly module; build with --target wasm32-wasip2 to get a component".into()
            } else {
                "it does not start with the WebAssembly magic bytes".into()
            },
        ));
    }
    check(bytes)?;
    super::complexity::check(bytes).map(|_| ())
}

/// The exports the world asks for (`describe` and `run`), checked once the
/// component is compiled; what is missing is named, with what it exports.
pub(crate) fn check_exports(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
) -> Result<(), ComponentError> {
    use wasmtime::component::types::ComponentItem;
    let ty = component.component_type();
    let mut missing = Vec::new();
    let exports: Vec<(String, ComponentItem)> = ty
        .exports(engine)
        .map(|(n, item)| (n.to_string(), item.ty))
        .collect();
    for name in ["describe", "run"] {
        match exports.iter().find(|(n, _)| n == name) {
            Some((_, ComponentItem::ComponentFunc(_))) => {}
            Some(_) => missing.push(format!("`{name}` is exported but is not a function")),
            None => missing.push(format!("missing export `{name}`")),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        let exported: Vec<String> = exports.iter().map(|(n, _)| format!("`{n}`")).collect();
        Err(ComponentError::WrongWorld(format!(
            "{} (it exports {})",
            missing.join(", "),
            if exported.is_empty() {
                "nothing".to_string()
            } else {
                exported.join(", ")
            }
        )))
    }
}
