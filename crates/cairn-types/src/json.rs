//! Measuring JSON that enters the host: its length as journaled and its
//! nesting depth, without building it.

/// The length of a value's JSON (an entry's journal line without its
/// newline, a payload), counted without building it; `u64::MAX` when it does
/// not serialize.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    let mut counter = ByteCounter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => u64::MAX,
    }
}

/// A value's JSON when it is at most `max` bytes, built once (an emit's
/// payload: measured for its limits, then written into its journal line);
/// `Err(len)` — its whole length, counted without building it — when it is
/// longer, or `Err(u64::MAX)` when it does not serialize.
pub fn json_within<T: serde::Serialize + ?Sized>(value: &T, max: u64) -> Result<String, u64> {
    let mut out = Bounded {
        buf: Vec::with_capacity(256),
        max,
    };
    match serde_json::to_writer(&mut out, value) {
        Ok(()) => String::from_utf8(out.buf).map_err(|_| u64::MAX),
        Err(_) => Err(json_len(value)),
    }
}

/// A buffer that refuses to grow past `max` bytes.
struct Bounded {
    buf: Vec<u8>,
    max: u64,
}

impl std::io::Write for Bounded {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }
    // What serde_json calls for every piece it writes: one check and one
    // copy, not `write`'s loop.
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if (self.buf.len() + buf.len()) as u64 > self.max {
            return Err(std::io::Error::other("past the limit"));
        }
        self.buf.extend_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How deep a JSON value that enters the host may nest (a guest's emit, a
/// decision's value and details, an HTTP body). A journal line wraps a
/// value in a few levels of its own, and every reader parses with a
/// recursion limit of 128: bounded here, every line written stays readable.
pub const MAX_JSON_DEPTH: usize = 64;

/// The nesting depth of a value (a scalar is 0, `[]` is 1, `[[1]]` is 2).
pub fn json_depth(value: &serde_json::Value) -> usize {
    // Iterative, so no value can exhaust the stack measuring it.
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            serde_json::Value::Array(items) => {
                deepest = deepest.max(depth + 1);
                stack.extend(items.iter().map(|i| (i, depth + 1)));
            }
            serde_json::Value::Object(map) => {
                deepest = deepest.max(depth + 1);
                stack.extend(map.values().map(|i| (i, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Refuse a value nested deeper than [`MAX_JSON_DEPTH`], naming `what`.
pub fn check_json_depth(what: &str, value: &serde_json::Value) -> Result<(), String> {
    match json_depth(value) {
        d if d > MAX_JSON_DEPTH => Err(format!(
            "{what} nests {d} levels deep; at most {MAX_JSON_DEPTH} are accepted"
        )),
        _ => Ok(()),
    }
}

struct ByteCounter(u64);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
