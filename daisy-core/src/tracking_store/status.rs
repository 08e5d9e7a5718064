//! Where a tracking store stands, for a reader outside any run (`daisy
//! status`, the header of `daisy report`): its task, how many of its blocks
//! are done of how many, how many are not done but failed an attempt, and
//! whether a run holds it now.
//!
//! Nothing here writes, locks or maps: the counts are read from the chunk
//! files in pieces of [`PIECE`] bytes (a store of 10^9 blocks is never read
//! whole), and whether a run holds the store is read from the kernel's
//! table of locks (`/proc/locks`), never by trying the lock, which could
//! make a run starting at that moment fail.

use super::arrays::{DONE, FAILURES};
use super::layout::Layout;
use super::lock::LOCK_FILE;
use super::zarr_array::{chunk_path, io_err};
use crate::block_grid::BlockGrid;
use crate::error::DaisyError;
use crate::task_spec::TaskSpec;
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::Path;

/// Bytes of a done chunk read at once.
const PIECE: usize = 1 << 20;

/// Where a tracking store stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStatus {
    /// The task it was made for (`daisy_task_id`), if it names one.
    pub task_id: Option<String>,
    /// Its task's blocks, from the layout it records; None for a layout
    /// this version does not read.
    pub total: Option<u64>,
    /// Blocks marked done.
    pub done: u64,
    /// Blocks not done that failed at least one attempt.
    pub failed: u64,
    /// Who holds its lock now ("pid 123 on host node7"), as the holder
    /// wrote it, when this machine's kernel says the lock is held; None
    /// when it is free here.
    pub held_by: Option<String>,
}

/// The group attributes of the store at `path` (`{}` without any); an
/// error naming a path that is no tracking store.
fn group_attributes(path: &Path) -> Result<Value, DaisyError> {
    let meta = path.join("zarr.json");
    let text = fs::read_to_string(&meta).map_err(|e| {
        DaisyError::Io(format!(
            "{}: no tracking store there ({e}); give a store's directory (the task's \
             tracking_path)",
            path.display()
        ))
    })?;
    let mut group: Value = serde_json::from_str(&text)
        .map_err(|e| DaisyError::Io(format!("{}: not JSON ({e})", meta.display())))?;
    Ok(group["attributes"].take())
}

/// Where the store at `path` stands; an error for a path that is no
/// tracking store.
pub fn store_status(path: &Path) -> Result<StoreStatus, DaisyError> {
    let attrs = &group_attributes(path)?;
    let task_id = attrs["daisy_task_id"].as_str().map(str::to_string);
    let total = Layout::from_json(&attrs["daisy_layout"]).and_then(|l| {
        let spec = TaskSpec::new("status", l.total, l.read, l.write, l.fit, true, 0, vec![]);
        spec.ok().map(|s| BlockGrid::new(0, &s).num_blocks())
    });
    let dims = attrs["daisy_layout"]["total_shape"]
        .as_array()
        .map_or(0, Vec::len);
    let (done, failed) = count_marks(path, dims)?;
    Ok(StoreStatus {
        task_id,
        total,
        done,
        failed,
        held_by: holder(path),
    })
}

/// The task spec a store was made for, from the layout it records (its
/// task id, or the directory's name): what a reader outside any run (`daisy
/// forecast PATH`) needs to walk its blocks. Read-write conflicts are
/// assumed, as a task's default; an error names a path that is no store or
/// a layout this version does not read.
pub fn store_spec(path: &Path) -> Result<TaskSpec, DaisyError> {
    let attrs = &group_attributes(path)?;
    let layout = Layout::from_json(&attrs["daisy_layout"]).ok_or_else(|| {
        DaisyError::Io(format!(
            "{}: its layout is not one this version of daisy reads",
            path.join("zarr.json").display()
        ))
    })?;
    let task_id = attrs["daisy_task_id"]
        .as_str()
        .map(str::to_string)
        .or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "task".to_string());
    TaskSpec::new(
        task_id,
        layout.total,
        layout.read,
        layout.write,
        layout.fit,
        true,
        0,
        vec![],
    )
}

/// Done marks, and failure counts of blocks not done, read in pieces.
fn count_marks(store: &Path, dims: usize) -> Result<(u64, u64), DaisyError> {
    let done_path = chunk_path(&store.join(DONE.name), dims);
    let failures_path = chunk_path(&store.join(FAILURES.name), dims);
    let Ok(mut done) = fs::File::open(&done_path) else {
        return Ok((0, 0));
    };
    let mut failures = fs::File::open(&failures_path).ok();
    let (mut marks, mut failed) = (0u64, 0u64);
    let mut piece = vec![0u8; PIECE];
    let mut counts = vec![0u8; PIECE * 4];
    loop {
        let n = read_full(&mut done, &mut piece).map_err(|e| io_err(&done_path, e))?;
        if n == 0 {
            return Ok((marks, failed));
        }
        let piece = &piece[..n];
        marks += piece.iter().filter(|&&d| d != 0).count() as u64;
        if let Some(f) = failures.as_mut() {
            let m = read_full(f, &mut counts[..n * 4]).map_err(|e| io_err(&failures_path, e))?;
            failed += piece
                .iter()
                .zip(counts[..m].chunks_exact(4))
                .filter(|(d, c)| **d == 0 && c.iter().any(|&b| b != 0))
                .count() as u64;
        }
    }
}

/// Read until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// The holder of the store's lock, as it wrote itself, when this machine's
/// kernel lists a lock on the lock file (`/proc/locks`: `flock` locks by
/// device and inode); None when it lists none.
fn holder(store: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let lock = store.join(LOCK_FILE);
    let meta = fs::metadata(&lock).ok()?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let wanted = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let held = locks.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"FLOCK") && fields.get(5).is_some_and(|id| same_file(id, &wanted))
    });
    if !held {
        return None;
    }
    let text = fs::read_to_string(&lock).unwrap_or_default();
    Some(if text.trim().is_empty() {
        "a run (holder unknown)".into()
    } else {
        text.trim().to_string()
    })
}

/// Whether `/proc/locks`' `MAJ:MIN:INODE` names the same file as `wanted`
/// (the kernel writes the major and minor in hex, at least two digits).
fn same_file(id: &str, wanted: &str) -> bool {
    let parse = |s: &str| -> Option<(u64, u64, u64)> {
        let mut it = s.split(':');
        let major = u64::from_str_radix(it.next()?, 16).ok()?;
        let minor = u64::from_str_radix(it.next()?, 16).ok()?;
        let inode = it.next()?.parse().ok()?;
        Some((major, minor, inode))
    };
    parse(id).is_some_and(|a| Some(a) == parse(wanted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Roi;
    use crate::task_spec::Fit;
    use crate::tracking_store::TrackingStore;

    #[test]
    fn a_store_says_done_of_total_failed_and_who_holds_it() {
        let path = std::env::temp_dir().join(format!("daisy-status-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        let unit = Roi::from_slices(&[0, 0], &[10, 10]).unwrap();
        let spec = TaskSpec::new(
            "seg",
            Roi::from_slices(&[0, 0], &[80, 50]).unwrap(),
            unit,
            unit,
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let grid = BlockGrid::new(0, &spec);
        {
            let mut store = TrackingStore::open(&path, &spec, false).unwrap();
            for i in 0..7 {
                store.mark_done(&grid.block(i));
            }
            store.add_failure(&grid.block(3)); // failed once, then done
            store.add_failure(&grid.block(9));
            store.add_failure(&grid.block(9));
            store.add_failure(&grid.block(12));
            let held = store_status(&path).unwrap();
            assert_eq!(held.task_id.as_deref(), Some("seg"));
            assert_eq!((held.total, held.done, held.failed), (Some(40), 7, 2));
            let me = format!("pid {}", std::process::id());
            assert!(
                held.held_by.is_some_and(|h| h.contains(&me)),
                "held while open"
            );
        }
        let free = store_status(&path).unwrap();
        assert_eq!((free.done, free.held_by), (7, None));
        assert!(store_status(&path.join("nothing")).is_err());
        fs::remove_dir_all(&path).unwrap();
    }
}
