//! Whether a tracking store is whole: what shows it held marks, and the
//! refusals for one that lost a file daisy cannot make again without
//! losing them (a scratch purge deletes small old files first). Opening a
//! store asks here before it maps an array or reads the group (`read_group`,
//! `open_array`); nothing here writes.

use super::arrays::{DONE, FAILURES, RESET_MARKER, RUNS_FILE, is_own_entry};
use super::layout::mismatch;
use super::zarr_array::{
    ArrayKind, ChunkFormat, MappedArray, chunk_path, io_err, map_array, read_elements,
};
use crate::error::DaisyError;
use crate::geometry::Coord;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use zarrs_metadata::v3::NodeMetadataV3;

/// True if every element of the chunk `file` of an array of `kind` and
/// `shape` is the fill value (a chunk that holds no mark); a chunk of
/// another size counts as not blank. A plain chunk is read in pieces; a
/// shard (resource tracking) is decoded whole.
fn chunk_is_blank(file: &Path, kind: &ArrayKind, shape: &Coord) -> Result<bool, DaisyError> {
    let len = fs::metadata(file).map_err(|e| io_err(file, e))?.len();
    match ChunkFormat::of_file(kind, shape, len) {
        Some(ChunkFormat::Plain) => plain_chunk_is_blank(file, kind),
        Some(ChunkFormat::Sharded { .. }) => {
            Ok(read_elements(file, kind, shape)?.is_ok_and(|bytes| {
                let size = kind.dtype.size();
                bytes.chunks_exact(size).all(|e| e == &kind.fill[..size])
            }))
        }
        None => Ok(false),
    }
}

/// True if every byte of `file` is `kind`'s fill value, read in pieces:
/// only a damaged store's chunks are read whole.
fn plain_chunk_is_blank(file: &Path, kind: &ArrayKind) -> Result<bool, DaisyError> {
    use std::io::Read;
    let size = kind.dtype.size();
    let fill = &kind.fill[..size];
    let mut f = fs::File::open(file).map_err(|e| io_err(file, e))?;
    let mut buf = vec![0u8; size * 65536];
    let mut offset = 0usize;
    loop {
        let n = f.read(&mut buf).map_err(|e| io_err(file, e))?;
        if n == 0 {
            return Ok(true);
        }
        for (i, b) in buf[..n].iter().enumerate() {
            if *b != fill[(offset + i) % size] {
                return Ok(false);
            }
        }
        offset += n;
    }
}

/// What shows that the directory at `store` held the marks of earlier runs
/// (a run history, or a done or failures chunk that is not blank); None
/// where nothing would be lost by making the store again.
fn earlier_marks(store: &Path) -> Result<Option<String>, DaisyError> {
    if store.join(RESET_MARKER).exists() {
        return Ok(None);
    }
    for kind in [DONE, FAILURES] {
        let Ok(entries) = walk_chunks(&store.join(kind.name)) else {
            continue;
        };
        for chunk in entries {
            if !plain_chunk_is_blank(&chunk, &kind)? {
                return Ok(Some(format!("{} holds marks", chunk.display())));
            }
        }
    }
    let runs = store.join(RUNS_FILE);
    if let Ok(text) = fs::read_to_string(&runs) {
        let last = text.lines().rev().find(|l| !l.trim().is_empty());
        let reset_last = last
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .is_some_and(|v| v.get("reset_at").is_some() && v.get("task_id").is_none());
        if last.is_some() && !reset_last {
            return Ok(Some(format!("{} records earlier runs", runs.display())));
        }
    }
    Ok(None)
}

/// The chunk files under an array directory (`c/0/../0`, any depth).
fn walk_chunks(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.join("c")];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_none() {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// A store that held marks and lost a file daisy cannot make again
/// without losing them (a scratch purge deletes small old files first).
fn damaged(store: &Path, missing: &Path, evidence: &str) -> DaisyError {
    DaisyError::StoreDamaged(format!(
        "tracking store {store} is damaged: {missing} is missing, but {evidence}. Something \
         deleted the file (scratch purge policies delete small old files first); daisy will \
         not make a new store over the marks. Restore the file from a backup; or, if this \
         task has the total_roi, read_roi, write_roi and fit of the runs that wrote the \
         store, call task.adopt_tracking_store() to write the metadata again (every mark is \
         kept); or task.reset() to start afresh",
        store = store.display(),
        missing = missing.display(),
    ))
}

/// A store whose directory of done marks is gone while it held marks:
/// unlike lost metadata, nothing can write them again.
fn marks_lost(store: &Path, missing: &Path, evidence: &str) -> DaisyError {
    DaisyError::StoreDamaged(format!(
        "tracking store {store} is damaged: {missing} is missing, but {evidence}. Something \
         deleted the directory (a scratch purge?), and the marks of those runs went with it; \
         daisy will not make it again and redo every block without a word. Restore \
         {missing} from a backup to resume; or call task.reset() once to start afresh (every \
         block runs again; the run history is kept)",
        store = store.display(),
        missing = missing.display(),
    ))
}

/// The attributes of the store's group, None where there is no store yet,
/// or an error (naming `expected`, this task's layout hash) for a
/// directory that is not a daisy store, and for a store that lost its
/// group metadata while it held marks.
pub(super) fn read_group(store: &Path, expected: &str) -> Result<Option<Value>, DaisyError> {
    let meta_path = store.join("zarr.json");
    if !store.exists() {
        return Ok(None);
    }
    if !meta_path.is_file() {
        // The group's zarr.json is written last when a store is made (and
        // removed first by a reset), so a directory holding nothing but
        // daisy's own files is no store yet, or one a reset emptied; it is
        // made again if nothing in it is a mark. Anything else is someone
        // else's and is left alone.
        let leftovers = fs::read_dir(store)
            .map_err(|e| io_err(store, e))?
            .filter_map(Result::ok)
            .all(|entry| is_own_entry(&entry.file_name()));
        if leftovers {
            if let Some(evidence) = earlier_marks(store)? {
                return Err(damaged(store, &meta_path, &evidence));
            }
            return Ok(None);
        }
        return Err(mismatch(
            store,
            expected,
            "(none)",
            "the directory exists but is not a daisy tracking store (no zarr.json)",
        ));
    }
    let text = fs::read_to_string(&meta_path).map_err(|e| io_err(&meta_path, e))?;
    let node: NodeMetadataV3 = serde_json::from_str(&text).map_err(|_| {
        mismatch(
            store,
            expected,
            "(unreadable)",
            "its zarr.json is not Zarr v3 metadata (an older daisy wrote a different layout)",
        )
    })?;
    match node {
        NodeMetadataV3::Array(_) => Err(mismatch(
            store,
            expected,
            "(array)",
            "it is a bare Zarr array written by an older daisy, not a tracking group",
        )),
        NodeMetadataV3::Group(g) => Ok(Some(Value::Object(g.attributes))),
    }
}

/// Map one array of a store, creating it where it was never made. Its
/// metadata gone beside a chunk that holds anything but the fill value,
/// or the chunk of done marks or failure counts gone beside its metadata,
/// is a damaged store: refused, never made again over the marks. So is
/// the whole directory of done marks gone from a store whose history (or
/// failure counts) records earlier runs: its marks are lost, and making it
/// again would redo every block without a word. (A lost directory of
/// failure counts is made again: the counts are lost, no block is redone.)
pub(super) fn open_array(
    store: &Path,
    kind: ArrayKind,
    shape: &Coord,
) -> Result<MappedArray, DaisyError> {
    if shape.product() > 0 {
        let dir = store.join(kind.name);
        let meta = dir.join("zarr.json");
        let chunk = chunk_path(&dir, shape.dims());
        let holds_marks = kind == DONE || kind == FAILURES;
        if kind == DONE
            && !dir.exists()
            && let Some(evidence) = earlier_marks(store)?
        {
            return Err(marks_lost(store, &dir, &evidence));
        }
        match (meta.is_file(), chunk.is_file()) {
            (false, true) if !chunk_is_blank(&chunk, &kind, shape)? => {
                let evidence = format!("its chunk {} holds marks", chunk.display());
                return Err(damaged(store, &meta, &evidence));
            }
            (true, false) if holds_marks => {
                let evidence = format!(
                    "its metadata {} is there: the {} of earlier runs are lost",
                    meta.display(),
                    kind.name
                );
                return Err(damaged(store, &chunk, &evidence));
            }
            _ => {}
        }
    }
    map_array(store, kind, shape)
}
