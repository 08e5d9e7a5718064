//! Files in places other users may reach: log directories, payloads, the
//! run history next to the logs, the tracking store and its lock. On a
//! shared cluster these live in scratch or project directories that other
//! users can write, so every such file is made here, one way:
//!
//! - a directory daisy writes into is created `0700`, and one that exists
//!   must be a real directory (not a symbolic link) owned by this user and
//!   writable by nobody else; its parent must not let others rename it
//!   away (writable by others only with the sticky bit, as `/tmp`), so
//!   nobody can slip a directory of their own in its place;
//! - a file is opened with `O_NOFOLLOW` (a planted symbolic link is an
//!   error, never followed into the victim's `~/.bashrc`) and must be a
//!   regular file owned by this user; a new one is created `0600`, and one
//!   that must be new (a payload) is created `O_EXCL` under a temporary
//!   name and renamed into place;
//! - a payload is read back through the same checks and compared with the
//!   SHA-256 its reader was given through its secret context
//!   ([`read_payload`]), so a payload changed while a job was queued is
//!   refused, never unpickled.
//!
//! A check that fails is a refusal naming the path, what is wrong and the
//! command that fixes it: [`DaisyError::Unsafe`] once [`to_daisy`] made it
//! the core's error (Python: `PermissionError`); inside an `io::Error`
//! until then, so that every other failure keeps its errno.

use crate::error::DaisyError;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of a directory daisy creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of a file daisy creates.
pub const FILE_MODE: u32 = 0o600;

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory
    unsafe { libc::geteuid() }
}

/// A refusal of this module, carried inside an `io::Error` (kind
/// `PermissionDenied`) so that callers speaking `io` keep the errno of
/// every other failure (a start that failed for want of descriptors is
/// retried: `policy::spawn_error_is_transient`).
#[derive(Debug)]
struct UnsafePath(String);

impl std::fmt::Display for UnsafePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnsafePath {}

fn unsafe_path(path: &Path, why: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        UnsafePath(format!("{}: {why}", path.display())),
    )
}

/// An error of this module on `path` as the core reports it: a refusal as
/// [`DaisyError::Unsafe`], anything else as [`DaisyError::Io`] naming the
/// path.
pub fn to_daisy(path: &Path, e: std::io::Error) -> DaisyError {
    match e.get_ref().and_then(|r| r.downcast_ref::<UnsafePath>()) {
        Some(refusal) => DaisyError::Unsafe(refusal.0.clone()),
        None => DaisyError::Io(format!("{}: {e}", path.display())),
    }
}

/// The owner of `meta`, in words.
fn owner(meta: &fs::Metadata) -> String {
    format!("uid {}", meta.uid())
}

/// Create `dir` (and any missing parents, `0700`) or check the one there:
/// a directory of this user's that nobody else can write, in a parent
/// nobody else can rename it out of.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)?;
    }
    let meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_path(
            dir,
            "is a symbolic link; daisy writes only into a real directory of yours (give a \
             path without links)",
        ));
    }
    if !meta.is_dir() {
        return Err(unsafe_path(dir, "is not a directory"));
    }
    if meta.uid() != euid() {
        return Err(unsafe_path(
            dir,
            format!(
                "is owned by {} (another user), not by you (uid {}): they could swap what \
                 daisy writes there. Give daisy a directory of your own",
                owner(&meta),
                euid()
            ),
        ));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_path(
            dir,
            format!(
                "is writable by its group or by others (mode {mode:04o}): they could swap what \
                 daisy writes there. Make it private: chmod go-w {}",
                dir.display()
            ),
        ));
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        let pm = fs::metadata(parent)?;
        let pmode = pm.permissions().mode() & 0o7777;
        let others_write = pmode & 0o022 != 0;
        let sticky = pmode & 0o1000 != 0;
        if pm.uid() != euid() && pm.uid() != 0 && !sticky {
            return Err(unsafe_path(
                parent,
                format!(
                    "is owned by {} (another user), who could put a directory of their own in \
                     place of {}. Give daisy a directory under one of yours",
                    owner(&pm),
                    dir.display()
                ),
            ));
        }
        if others_write && !sticky {
            return Err(unsafe_path(
                parent,
                format!(
                    "is writable by its group or by others (mode {pmode:04o}) without the \
                     sticky bit: they could put a directory of their own in place of {}. Make \
                     it private (chmod go-w {}) or sticky (chmod +t {})",
                    dir.display(),
                    parent.display(),
                    parent.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Check an open file: a regular file of this user's.
fn check_open(path: &Path, file: &File) -> std::io::Result<()> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(unsafe_path(path, "is not a regular file"));
    }
    if meta.uid() != euid() {
        return Err(unsafe_path(
            path,
            format!("is owned by {} (another user), not by you", owner(&meta)),
        ));
    }
    Ok(())
}

/// An error from an `O_NOFOLLOW` open, in words.
fn open_error(path: &Path, e: std::io::Error) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return unsafe_path(
            path,
            "is a symbolic link (someone planted it?); daisy never follows one there. Remove it",
        );
    }
    e
}

/// Open `path` for appending (created `0600` if missing) in a private
/// directory (see [`private_dir`]), never through a symbolic link: worker
/// logs and the run history next to them.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    open_private(path, OpenOptions::new().append(true))
}

/// Open `path` for reading and writing (created `0600` if missing, never
/// truncated), never through a symbolic link: the tracking store's lock.
pub fn open_rw(path: &Path) -> std::io::Result<File> {
    open_private(path, OpenOptions::new().write(true).truncate(false))
}

/// Open `path` with `options` and reading, created `0600` if missing,
/// never through a symbolic link, and only if it is a regular file of
/// this user's.
fn open_private(path: &Path, options: &mut OpenOptions) -> std::io::Result<File> {
    let file = options
        .create(true)
        .read(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    check_open(path, &file)?;
    Ok(file)
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Write `bytes` to `path` as a new private file (`0600`, created
/// exclusively under a temporary name in a private directory, then renamed
/// over whatever was there); the SHA-256 of the bytes, for the reader's
/// context.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<String, DaisyError> {
    write_private_io(path, bytes).map_err(|e| to_daisy(path, e))
}

fn write_private_io(path: &Path, bytes: &[u8]) -> std::io::Result<String> {
    let dir = path
        .parent()
        .ok_or_else(|| unsafe_path(path, "has no directory"))?;
    private_dir(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| unsafe_path(path, "has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| open_error(&tmp, e))?;
    file.write_all(bytes).and_then(|()| file.sync_all())?;
    fs::rename(&tmp, path)?;
    Ok(sha256_hex(bytes))
}

/// Read a payload written by [`write_private`], refusing one that is not
/// a regular file of this user's, sits in a directory others can write, or
/// whose SHA-256 is not `expected` (it changed after it was written).
pub fn read_payload(path: &Path, expected: &str) -> Result<Vec<u8>, DaisyError> {
    read_payload_io(path, expected).map_err(|e| to_daisy(path, e))
}

fn read_payload_io(path: &Path, expected: &str) -> std::io::Result<Vec<u8>> {
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    check_open(path, &file)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let found = sha256_hex(&bytes);
    if !found.eq_ignore_ascii_case(expected.trim()) {
        return Err(unsafe_path(
            path,
            format!(
                "the payload's SHA-256 is {found}, not the {expected} its run wrote: it was \
                 changed after the run wrote it, and is not loaded"
            ),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("daisy-private-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn a_private_dir_is_made_0700_and_a_shared_one_refused() {
        let base = tmp("dirs");
        let dir = base.join("logs/task");
        private_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o770)).unwrap();
        let e = private_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("writable by its group"), "{e}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        let parent = base.join("logs");
        fs::set_permissions(&parent, fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("without the sticky bit"), "{e}");
        fs::set_permissions(&parent, fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&dir).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(
            private_dir(&link)
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_planted_link_is_never_followed() {
        let base = tmp("links");
        private_dir(&base).unwrap();
        let victim = base.join("bashrc");
        fs::write(&victim, "precious\n").unwrap();
        let log = base.join("worker_0.out");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        assert!(
            open_append(&log)
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        assert!(open_rw(&log).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_payload_is_private_and_checked_when_read() {
        let base = tmp("payload");
        let path = base.join("task/payload.pkl");
        let digest = write_private(&path, b"pickle").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read_payload(&path, &digest).unwrap(), b"pickle");
        fs::write(&path, b"evil").unwrap();
        let e = read_payload(&path, &digest).unwrap_err().to_string();
        assert!(e.contains("SHA-256"), "{e}");
        // written again: replaces the old one
        let digest = write_private(&path, b"pickle 2").unwrap();
        assert_eq!(read_payload(&path, &digest).unwrap(), b"pickle 2");
        fs::remove_dir_all(&base).unwrap();
    }
}
