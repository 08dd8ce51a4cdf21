//! The file helpers the engine needs: a directory made owner-only, and a
//! preopen path that names an open handle (never a renameable name).

use cap_std::fs::DirBuilderExt;
use cap_std::fs::{Dir, DirBuilder};
use std::io;

/// Owner-only directories (0700).
pub const DIR_MODE: u32 = 0o700;

/// Create `name` inside `dir` owner-only (failing when it exists) and open it.
pub fn create_dir_new(dir: &Dir, name: &str) -> io::Result<Dir> {
    make_dir(dir, name)?;
    dir.open_dir(name)
}

/// Create `name` inside `dir` owner-only (failing when it exists), without
/// opening it.
pub fn make_dir(dir: &Dir, name: &str) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.mode(DIR_MODE);
    dir.create_dir_with(name, &builder)
}

/// A path that names exactly the directory `dir` holds: the kernel's link
/// for the descriptor, which resolves to the open directory itself, not by
/// name. wasmtime-wasi takes a preopen by path; this is how a handle is
/// handed to it without a name anyone can rename.
pub fn handle_path(dir: &cap_std::fs::Dir) -> Result<std::path::PathBuf, String> {
    use std::os::fd::AsRawFd;
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    // Without procfs there is no way to name the handle: refuse the loan
    // rather than fall back to a path.
    if !std::path::Path::new("/proc/self/fd").is_dir() {
        return Err("the loaned scope cannot be handed over: /proc is not mounted".into());
    }
    Ok(path)
}
