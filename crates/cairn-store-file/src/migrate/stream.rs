//! Legacy segments and traces read as streams: a line at a time (at most
//! [`MAX_LINE_BYTES`] each), never a whole file in memory, and copied into
//! the target a chunk at a time from the very file that was checked. A
//! digest of the checked bytes is compared while copying, so a source that
//! changed in between fails the worker instead of carrying unchecked bytes.

use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::FileExt;

/// The longest journal or trace line read from a legacy tree.
pub const MAX_LINE_BYTES: u64 = 64 << 20;
/// What one read or write moves.
const CHUNK: usize = 1 << 20;

/// A source file to copy: opened once (a regular file, no link followed),
/// the length of its complete lines and their digest.
#[derive(Debug)]
pub struct SourceFile {
    file: File,
    /// The bytes to copy: the complete lines (a crash-truncated final line
    /// left out).
    pub len: u64,
    digest: [u8; 32],
    shown: String,
}

/// Reads a file by position from the start (no shared cursor).
struct At<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// What a stream of lines held.
pub struct Lines {
    /// The length of its complete lines.
    pub good_len: u64,
    /// The number of a final line without its newline (a write a crash
    /// cut short), left out.
    pub truncated_line: Option<usize>,
    /// The file, to copy.
    pub source: SourceFile,
}

/// Give each complete line of `file` (without its newline) and its number
/// to `each`; a line longer than [`MAX_LINE_BYTES`] is refused.
pub fn lines(
    file: File,
    shown: &str,
    mut each: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> Result<Lines, String> {
    let mut digest = Sha256::new();
    let (mut good_len, mut number, mut truncated_line) = (0u64, 0usize, None);
    {
        let mut reader = io::BufReader::with_capacity(
            CHUNK,
            At {
                file: &file,
                pos: 0,
            },
        );
        let mut line = Vec::new();
        loop {
            line.clear();
            let got = (&mut reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("cannot read {shown}: {e}"))?;
            if got == 0 {
                break;
            }
            number += 1;
            if line.last() != Some(&b'\n') {
                if got as u64 > MAX_LINE_BYTES {
                    return Err(format!(
                        "{shown}:{number}: a line longer than {MAX_LINE_BYTES} bytes: refused"
                    ));
                }
                truncated_line = Some(number);
                break;
            }
            each(number, &line[..line.len() - 1])?;
            digest.update(&line);
            good_len += line.len() as u64;
        }
    }
    Ok(Lines {
        good_len,
        truncated_line,
        source: SourceFile {
            file,
            len: good_len,
            digest: digest.finalize().into(),
            shown: shown.to_string(),
        },
    })
}

impl SourceFile {
    /// The file's whole length now.
    pub fn file_len(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(self.len)
    }

    /// Copy the checked bytes into `out`, a chunk at a time; an error when
    /// the source no longer holds them.
    pub fn copy_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut digest = Sha256::new();
        let mut buf = vec![0u8; CHUNK.min(self.len as usize)];
        let mut at = 0u64;
        while at < self.len {
            let n = (self.len - at).min(CHUNK as u64) as usize;
            self.file.read_exact_at(&mut buf[..n], at)?;
            digest.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
        if <[u8; 32]>::from(digest.finalize()) != self.digest {
            return Err(io::Error::other(format!(
                "{} changed while it was migrated",
                self.shown
            )));
        }
        Ok(())
    }

    /// Whether `held` holds exactly the checked bytes.
    pub fn same_as(&self, held: &File) -> io::Result<bool> {
        if held.metadata()?.len() != self.len {
            return Ok(false);
        }
        let mut digest = Sha256::new();
        let mut buf = vec![0u8; CHUNK.min(self.len as usize)];
        let mut at = 0u64;
        while at < self.len {
            let n = (self.len - at).min(CHUNK as u64) as usize;
            held.read_exact_at(&mut buf[..n], at)?;
            digest.update(&buf[..n]);
            at += n as u64;
        }
        Ok(<[u8; 32]>::from(digest.finalize()) == self.digest)
    }
}
