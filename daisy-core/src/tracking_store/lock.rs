//! One owner per tracking store: [`StoreLock`], an exclusive `flock` on
//! `<store>/daisy.lock`, held by the run (or `reset`) that opened the
//! store for as long as it has it open.
//!
//! Two drivers on one store would each hand out the blocks the other has
//! not marked yet and process them twice; the second one is therefore
//! refused at once, before any block runs, with the holder's pid and host
//! (written into the lock file by the holder). `flock` locks belong to the
//! open file, so the kernel releases a dead holder's lock with its last
//! descriptor: a crashed run never blocks the next one. The lock file is
//! created inside the store's directory, which makes two drivers that
//! start together on a fresh store meet here, before either creates the
//! arrays. Readers (the CLI, `task.block_record`) do not lock.

use crate::error::DaisyError;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Name of the lock file inside a store (not a Zarr node: Zarr readers
/// list only directories with a `zarr.json`).
pub const LOCK_FILE: &str = "daisy.lock";

/// An exclusive lock on a tracking store, released when dropped.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Take the store's lock (creating its directory), or fail at once,
    /// naming the holder, if another open file holds it.
    pub fn acquire(store: &Path) -> Result<Self, DaisyError> {
        // a store another user could reach is refused: a directory of
        // theirs, one they can write, a lock file that is a planted link
        use crate::private_files::{open_rw, private_dir, to_daisy};
        private_dir(store).map_err(|e| to_daisy(store, e))?;
        let path = store.join(LOCK_FILE);
        let mut file = open_rw(&path).map_err(|e| to_daisy(&path, e))?;
        if !try_lock(&file) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(DaisyError::StoreInUse(format!(
                "tracking store {} is in use by another run ({}); two runs on one store would \
                 process blocks twice. Wait for that run to end, or give this task another \
                 tracking_path",
                store.display(),
                if holder.is_empty() {
                    "holder unknown"
                } else {
                    holder
                }
            )));
        }
        // say who holds it, for the next one to be refused
        let me = format!(
            "pid {} on host {}",
            std::process::id(),
            host_name().unwrap_or_else(|| "?".into())
        );
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(me.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("could not note the holder in {}: {e}", path.display());
        }
        Ok(Self { _file: file })
    }
}

fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this File owns; no memory is shared.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("daisy-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let first = StoreLock::acquire(&dir).unwrap();
        let e = StoreLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains("in use by another run"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        let again = StoreLock::acquire(&dir);
        assert!(again.is_ok(), "released with its file");
        drop(again);
        fs::remove_dir_all(&dir).unwrap();
    }
}
