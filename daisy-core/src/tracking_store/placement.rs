//! Where tracking stores lie: which places a store may take, and finding
//! the stores (and run histories) below a directory.
//!
//! A store belongs to one task and holds that task's marks; `reset`
//! deletes the whole directory. So two stores must never share a
//! directory, and one must never lie inside another: resetting the outer
//! task would delete the inner task's marks, and a Zarr reader of the
//! outer group would list the inner one as its child. Task ids may nest
//! (`a` and `a/b`, see [`crate::task_id`]), so these rules are checked
//! twice: among the stores of one run ([`check_distinct`], before
//! anything is opened) and against what earlier runs left on disk
//! ([`check_on_disk`], before a store is made or opened for writing).
//!
//! Finding stores ([`find`]) walks a base directory the way task ids nest
//! into it: into plain directories, never into a store (its children are
//! its own arrays) and never into a user's array or container (a
//! directory holding Zarr or N5 metadata: a segmentation of 10^6 chunk
//! directories is not walked to find nothing). The walk goes at most
//! [`MAX_DEPTH`] levels down and never follows a symbolic link.

use crate::error::DaisyError;
use serde_json::Value;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::arrays::{RUNS_FILE, is_own_entry};

/// How many directory levels below its start [`find`] looks. A task id
/// nests a level per `/`; ids of dataset paths (`predict/0/val/raw`) have
/// a handful, and 32 levels is far beyond any seen while it still bounds
/// a walk through a plain directory tree that holds no store at all.
pub const MAX_DEPTH: usize = 32;

/// Files that make a directory a Zarr (v2 or v3) or N5 node: a user's
/// array or container, which [`find`] never walks into (a daisy store is
/// recognised before this is asked).
const ARRAY_MARKERS: [&str; 5] = [
    "zarr.json",
    ".zarray",
    ".zgroup",
    ".zattrs",
    "attributes.json",
];

/// The attributes of the daisy tracking store at `dir` (this version's or
/// daisy 2.0.0's: a Zarr v3 group with `daisy_task_hash`), or None when
/// `dir` holds no such store.
fn store_attributes(dir: &Path) -> Option<Value> {
    let text = fs::read_to_string(dir.join("zarr.json")).ok()?;
    let group: Value = serde_json::from_str(&text).ok()?;
    let attrs = group.get("attributes")?;
    attrs.get("daisy_task_hash")?;
    Some(attrs.clone())
}

/// Whether `dir` holds a daisy tracking store.
pub fn is_store(dir: &Path) -> bool {
    store_attributes(dir).is_some()
}

/// The store at `dir` in words: its path and the task it records.
fn described(dir: &Path) -> String {
    match store_attributes(dir)
        .as_ref()
        .and_then(|a| a.get("daisy_task_id"))
        .and_then(Value::as_str)
    {
        Some(task) => format!("{} (task {task:?})", dir.display()),
        None => dir.display().to_string(),
    }
}

/// `path` made absolute and resolved as far as it exists (symbolic links
/// and `..` of its existing part followed, as the kernel would), the rest
/// appended as written: two spellings of one place compare equal before
/// either directory exists.
pub fn resolved(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.as_path();
    let mut rest: Vec<Component<'_>> = Vec::new();
    loop {
        if let Ok(real) = fs::canonicalize(existing) {
            let mut out = real;
            for c in rest.iter().rev() {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// The rule among one run's stores: no two tasks on one store, none
/// inside another's. `stores` pairs each tracked task's id with its store.
pub fn check_distinct(stores: &[(&str, &Path)]) -> Result<(), DaisyError> {
    let places: Vec<(&str, PathBuf)> = stores
        .iter()
        .map(|(task, path)| (*task, resolved(path)))
        .collect();
    for (i, (a, pa)) in places.iter().enumerate() {
        for (b, pb) in &places[i + 1..] {
            if pa == pb {
                return Err(DaisyError::invalid(
                    "tracking_path",
                    format!(
                        "tasks {a:?} and {b:?} resolve to the same tracking store {}; give each \
                         task its own tracking_path",
                        pa.display()
                    ),
                ));
            }
            let (inner, pi, outer, po) = if pb.starts_with(pa) {
                (b, pb, a, pa)
            } else if pa.starts_with(pb) {
                (a, pa, b, pb)
            } else {
                continue;
            };
            return Err(DaisyError::invalid(
                "tracking_path",
                format!(
                    "the tracking store of task {inner:?} ({}) would lie inside the store of \
                     task {outer:?} ({}): resetting {outer:?} would delete {inner:?}'s marks. \
                     Give one of them another task id (ids nest: {inner:?} is inside \
                     {outer:?}) or its own tracking_path",
                    pi.display(),
                    po.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The rule against earlier runs: the store of `task_id` at `path` may
/// not lie inside a store already on disk, nor hold one. Checked before a
/// store is made or opened for a run; nothing is written.
pub fn check_on_disk(path: &Path, task_id: &str) -> Result<(), DaisyError> {
    let place = resolved(path);
    if let Some(outer) = place.ancestors().skip(1).find(|a| is_store(a)) {
        return Err(DaisyError::invalid(
            "tracking_path",
            format!(
                "the tracking store of task {task_id:?} at {} would lie inside the tracking \
                 store {}, which an earlier run made: resetting that task would delete this \
                 one's marks. Give task {task_id:?} another id or its own tracking_path \
                 outside it",
                path.display(),
                described(outer)
            ),
        ));
    }
    if place.is_dir() {
        let mut inner = Vec::new();
        let others = children(&place)
            .into_iter()
            .filter(|c| c.file_name().is_some_and(|n| !is_own_entry(n)));
        for child in others {
            walk(&child, 1, &mut |dir, store| {
                if store {
                    inner.push(dir.to_path_buf());
                }
            });
            if !inner.is_empty() {
                break;
            }
        }
        if let Some(inner) = inner.first() {
            return Err(DaisyError::invalid(
                "tracking_path",
                format!(
                    "the tracking store of task {task_id:?} at {} would hold the tracking store \
                     {}, which an earlier run made: resetting task {task_id:?} would delete its \
                     marks. Give task {task_id:?} another id or its own tracking_path",
                    path.display(),
                    described(inner)
                ),
            ));
        }
    }
    Ok(())
}

/// The subdirectories of `dir` (no symbolic links), in name order.
fn children(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Visit `dir` and what lies below it as task ids nest: `visit(dir,
/// true)` for a store (not walked into), `visit(dir, false)` for a plain
/// directory holding a run history (`runs.jsonl`, a log directory's),
/// nothing for a user's array (not walked into either).
fn walk(dir: &Path, depth: usize, visit: &mut dyn FnMut(&Path, bool)) {
    if is_store(dir) {
        visit(dir, true);
        return;
    }
    if ARRAY_MARKERS.iter().any(|m| dir.join(m).exists()) {
        return;
    }
    if dir.join(RUNS_FILE).is_file() {
        visit(dir, false);
    }
    if depth >= MAX_DEPTH {
        return;
    }
    for child in children(dir) {
        walk(&child, depth + 1, visit);
    }
}

/// What [`find`] found below a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Tracking stores, in path order.
    pub stores: Vec<PathBuf>,
    /// Run histories (`runs.jsonl`): those of the stores and those of log
    /// directories (untracked tasks'), in path order.
    pub histories: Vec<PathBuf>,
}

/// The stores and run histories at `path`: the store itself or the
/// history in it when `path` is one, else everything below it as task ids
/// nest (see the module's doc).
pub fn find(path: &Path) -> Found {
    let mut found = Found::default();
    walk(path, 0, &mut |dir, store| {
        if store {
            found.stores.push(dir.to_path_buf());
        }
        let history = dir.join(RUNS_FILE);
        if history.is_file() {
            found.histories.push(history);
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("daisy-placement-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn make_store(dir: &Path, task: &str) {
        fs::create_dir_all(dir.join("done")).unwrap();
        fs::write(dir.join("done/zarr.json"), "{}").unwrap();
        fs::write(
            dir.join("zarr.json"),
            format!(
                r#"{{"attributes": {{"daisy_task_hash": "00", "daisy_task_id": "{task}"}}, "node_type": "group", "zarr_format": 3}}"#
            ),
        )
        .unwrap();
        fs::write(dir.join(RUNS_FILE), "").unwrap();
    }

    #[test]
    fn nested_stores_are_found_and_user_arrays_are_not_walked() {
        let base = scratch("find");
        make_store(&base.join("predict/0/val"), "predict/0/val");
        make_store(&base.join("plain"), "plain");
        fs::create_dir_all(base.join("logs/untracked")).unwrap();
        fs::write(base.join("logs/untracked").join(RUNS_FILE), "").unwrap();
        for (container, marker) in [
            ("seg.zarr", ".zarray"),
            ("raw.zarr", "zarr.json"),
            ("v.n5", "attributes.json"),
        ] {
            let root = base.join("out").join(container);
            fs::create_dir_all(&root).unwrap();
            fs::write(root.join(marker), "{}").unwrap();
            make_store(&root.join("s0/decoy"), "decoy");
        }
        let found = find(&base);
        assert_eq!(
            found.stores,
            vec![base.join("plain"), base.join("predict/0/val")]
        );
        assert_eq!(
            found.histories,
            vec![
                base.join("logs/untracked").join(RUNS_FILE),
                base.join("plain").join(RUNS_FILE),
                base.join("predict/0/val").join(RUNS_FILE)
            ]
        );
        // a store given itself is found as itself
        assert_eq!(find(&base.join("plain")).stores, vec![base.join("plain")]);
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn stores_of_one_run_may_neither_coincide_nor_nest() {
        let base = scratch("distinct");
        let a = base.join("a");
        let ab = base.join("a/b");
        let ab2 = base.join("a/./c/../b");
        let abc = base.join("abc");
        assert!(check_distinct(&[("a", &a), ("abc", &abc)]).is_ok());
        let e = check_distinct(&[("a", &a), ("a/b", &ab)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"a/b\"") && e.contains("inside the store of task \"a\""),
            "{e}"
        );
        let e = check_distinct(&[("a/b", &ab), ("a", &a)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("inside the store of task \"a\""), "{e}");
        let e = check_distinct(&[("x", &ab), ("y", &ab2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("same tracking store"), "{e}");
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn a_store_may_not_go_inside_or_around_one_an_earlier_run_made() {
        let base = scratch("disk");
        make_store(&base.join("r"), "r");
        let e = check_on_disk(&base.join("r/s"), "r/s")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("would lie inside the tracking store") && e.contains("(task \"r\")"),
            "{e}"
        );
        make_store(&base.join("u/v"), "u/v");
        let e = check_on_disk(&base.join("u"), "u").unwrap_err().to_string();
        assert!(
            e.contains("would hold the tracking store") && e.contains("(task \"u/v\")"),
            "{e}"
        );
        // the stores themselves, a sibling and a fresh place are fine
        for (p, t) in [
            ("r", "r"),
            ("u/v", "u/v"),
            ("u/w", "u/w"),
            ("new/x", "new/x"),
        ] {
            assert!(check_on_disk(&base.join(p), t).is_ok(), "{p}");
        }
        let _ = fs::remove_dir_all(&base);
    }
}
