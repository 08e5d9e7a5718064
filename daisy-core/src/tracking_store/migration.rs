//! Growing a tracking store to a larger `total_roi`, crash-safe as a whole.
//!
//! Every array of the store gets a new shape, and the group metadata a new
//! layout: several files, which no single rename can replace together. So
//! a migration keeps a journal, the staging directory [`STAGING`] inside
//! the store:
//!
//! 1. **stage**: every new array is written into `<store>/.daisy-migration/`
//!    and synced; the old store is untouched, and a crash here leaves it
//!    intact (the next open deletes the uncommitted staging directory);
//! 2. **commit**: the new group metadata is written into the staging
//!    directory (one atomic rename: from now on the migration *will* end);
//! 3. **swap**: each staged array replaces its old one, then the staged
//!    group metadata replaces the old, then the staging directory goes.
//!
//! [`recover`] runs under the store's lock before every open: a committed
//! staging directory is swapped in to the end (an array still staged means
//! the one in the store is the old one), an uncommitted one is deleted.
//! So whatever step a killed driver stopped at, the next run sees either
//! the old store or the new one, never a mix; the fault points
//! (`crate::fault`) between the steps let a test kill a real driver there.

use super::arrays::{DONE, FAILURES, STAGING, STATS};
use super::layout::{Layout, growth_shift, mismatch};
use super::zarr_array::{ArrayKind, chunk_path, filled, io_err, read_elements, write_array};
use super::{array_grid, write_group};
use crate::block_grid::BlockGrid;
use crate::error::DaisyError;
use crate::fault;
use crate::geometry::{Coord, GridIndexer};
use crate::task_spec::TaskSpec;
use std::fs;
use std::path::Path;

/// Every array kind a store may hold.
fn all_kinds() -> impl Iterator<Item = ArrayKind> {
    [DONE, FAILURES].into_iter().chain(STATS)
}

/// Sync a file or directory to disk, so that a rename that follows is not
/// reordered before its contents by a power cut.
fn sync(path: &Path) -> Result<(), DaisyError> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(path, e))
}

/// Grow the store at `path` from the `old` layout to `new` (same block
/// grid, larger total ROI), keeping every mark of a block that is still
/// the same block. `task_id` is recorded in the new group metadata.
pub fn migrate(
    path: &Path,
    old: &Layout,
    new: &Layout,
    task_id: &str,
    new_hash: &str,
    old_hash: &str,
) -> Result<(), DaisyError> {
    let Some(shift) = growth_shift(old, new) else {
        let why = if new.total.contains_roi(&old.total) {
            "the block shape, read context or fit changed"
        } else {
            "total_roi shrank or moved off the old block grid"
        };
        let reason = format!("{why} ({})", super::layout::changes(old, new));
        return Err(mismatch(path, new_hash, old_hash, &reason));
    };
    let spec_of =
        |l: &Layout| TaskSpec::new("migrate", l.total, l.read, l.write, l.fit, true, 0, vec![]);
    let old_spec = spec_of(old)?;
    let new_spec = spec_of(new)?;
    let (old_shape, old_anchor) = array_grid(&old_spec);
    let (new_shape, _) = array_grid(&new_spec);
    let old_cells = GridIndexer::new(old_shape);
    let new_cells = GridIndexer::new(new_shape);
    // a block whose write region the old border cut is not the same block
    let old_grid = BlockGrid::new(0, &old_spec);
    let old_write_end = old_spec.total_write_roi().end();

    let kinds = all_kinds().filter(|k| path.join(k.name).join("zarr.json").is_file());
    let mut arrays = Vec::new();
    for kind in kinds {
        let size = kind.dtype.size();
        let mut out = filled(&kind, new_shape.product());
        if old_shape.product() > 0 {
            let chunk = chunk_path(&path.join(kind.name), old_shape.dims());
            let bytes = read_elements(&chunk, &kind, &old_shape)?.map_err(|what| {
                DaisyError::Io(format!(
                    "{}: {what}; the tracking store is damaged",
                    chunk.display()
                ))
            })?;
            for i in 0..old_cells.len() {
                let pos = old_cells.unflat(i);
                let start = i as usize * size;
                let Some(src) = bytes.get(start..start + size) else {
                    break;
                };
                let mut value = src;
                if kind.name == DONE.name {
                    let placement = pos.sub(&old_anchor);
                    let cut = old_grid.indexer().contains(&placement)
                        && (0..placement.dims()).any(|d| {
                            old_grid.block_at(placement).requested_write_roi.end()[d]
                                > old_write_end[d]
                        });
                    if cut {
                        value = &kind.fill[..size];
                    }
                }
                let new_pos = pos.add(&shift);
                if new_cells.contains(&new_pos) {
                    let dst = new_cells.flat(&new_pos) as usize * size;
                    out[dst..dst + size].copy_from_slice(value);
                }
            }
        }
        arrays.push((kind, out));
    }
    replace(path, &arrays, &new_shape, new, task_id)?;
    tracing::info!(
        "tracking store {} migrated to the grown total ROI {} (every done block kept)",
        path.display(),
        new.total
    );
    Ok(())
}

/// Steps 1 to 3 for new contents of the store's arrays (`arrays`, each of
/// `shape`) and its new group metadata: staged, committed, swapped in.
fn replace(
    path: &Path,
    arrays: &[(ArrayKind, Vec<u8>)],
    shape: &Coord,
    layout: &Layout,
    task_id: &str,
) -> Result<(), DaisyError> {
    let staging = path.join(STAGING);
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| io_err(&staging, e))?;
    }
    fs::create_dir(&staging).map_err(|e| io_err(&staging, e))?;
    for (i, (kind, out)) in arrays.iter().enumerate() {
        write_array(&staging, kind, shape, out)?;
        let dir = staging.join(kind.name);
        if shape.product() > 0 {
            sync(&chunk_path(&dir, shape.dims()))?;
        }
        sync(&dir.join("zarr.json"))?;
        if i == 0 {
            fault::point("migration-staging")?;
        }
    }
    sync(&staging)?;
    fault::point("migration-staged")?;
    // the commit point: a staging directory with group metadata is a
    // migration that will be finished, whatever happens next
    write_group(&staging, layout, task_id)?;
    sync(&staging)?;
    fault::point("migration-committed")?;
    swap_in(path, &staging)
}

/// The shape of a daisy 2.0.0 store's arrays for `spec`: the total ROI in
/// write-ROI strides, rounded up, on every axis.
fn v200_shape(spec: &TaskSpec) -> Coord {
    let total = spec.total_roi.shape();
    let write = spec.write_roi.shape();
    let axes: Vec<i64> = (0..total.dims())
        .map(|d| (total[d] + write[d] - 1) / write[d].max(1))
        .collect();
    Coord::new(&axes).unwrap_or(total)
}

/// The shape and element type an array's metadata gives, if readable.
/// The shape an array's metadata at `path` records, if it is of `kind`'s
/// data type.
pub(super) fn array_shape(path: &Path, kind: &ArrayKind) -> Option<Vec<i64>> {
    let text = fs::read_to_string(path.join(kind.name).join("zarr.json")).ok()?;
    let meta: serde_json::Value = serde_json::from_str(&text).ok()?;
    if meta["data_type"].as_str() != Some(kind.dtype.zarr_name()) {
        return None;
    }
    meta["shape"]
        .as_array()?
        .iter()
        .map(serde_json::Value::as_i64)
        .collect()
}

/// True if the group attributes `attrs` and the arrays at `path` are a
/// store daisy 2.0.0 wrote for `spec`'s layout: a layout hash alone (2.0.0
/// records no layout description and no task id), and `done` (with
/// `failures`, if there) of 2.0.0's shape for this task. Its hash cannot
/// be recomputed, so the shape is what is checked.
pub fn is_v200_store(path: &Path, attrs: &serde_json::Value, spec: &TaskSpec) -> bool {
    let only_hash = attrs.as_object().is_some_and(|a| {
        a.len() == 1
            && a.get("daisy_task_hash")
                .and_then(|h| h.as_str())
                .is_some_and(|h| h.len() == 64)
    });
    let shape = v200_shape(spec);
    let fits = |kind: &ArrayKind| array_shape(path, kind).as_deref() == Some(shape.as_slice());
    only_hash
        && fits(&DONE)
        && (!path.join(FAILURES.name).join("zarr.json").exists() || fits(&FAILURES))
}

/// Take over the done marks and failure counts of a store daisy 2.0.0
/// wrote for `spec` (see [`is_v200_store`]), crash-safe as a migration:
/// its arrays are cut to this version's shape (2.0.0's are as large or
/// larger, anchored at the same cell; the cells cut off hold no block) and
/// the group gets this version's metadata. 2.0.0's resource-tracking
/// arrays are left out: its figures have no "never measured" value.
pub fn from_v200(path: &Path, spec: &TaskSpec) -> Result<u64, DaisyError> {
    let old_shape = v200_shape(spec);
    let (new_shape, _) = array_grid(spec);
    let old_cells = GridIndexer::new(old_shape);
    let new_cells = GridIndexer::new(new_shape);
    let mut arrays = Vec::new();
    let mut done = 0u64;
    for kind in [DONE, FAILURES] {
        let size = kind.dtype.size();
        let mut out = filled(&kind, new_shape.product());
        let chunk = chunk_path(&path.join(kind.name), old_shape.dims());
        if old_shape.product() > 0 && chunk.is_file() {
            let bytes = fs::read(&chunk).map_err(|e| io_err(&chunk, e))?;
            for i in 0..new_cells.len() {
                let pos = new_cells.unflat(i);
                if !old_cells.contains(&pos) {
                    continue;
                }
                let src = old_cells.flat(&pos) as usize * size;
                let Some(value) = bytes.get(src..src + size) else {
                    continue;
                };
                if kind == DONE && value[0] != 0 {
                    done += 1;
                }
                let dst = i as usize * size;
                out[dst..dst + size].copy_from_slice(value);
            }
        }
        arrays.push((kind, out));
    }
    // its figures first (disposable, and of a shape this version's
    // arrays do not have): then the swap
    for kind in STATS {
        let dir = path.join(kind.name);
        if dir.exists() && array_shape(path, &kind).is_some_and(|s| s == old_shape.as_slice()) {
            fs::remove_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        }
    }
    replace(path, &arrays, &new_shape, &Layout::of(spec), &spec.task_id)?;
    tracing::warn!(
        "tracking store {} was written by daisy 2.0.0: its {done} done marks and its failure \
         counts are taken over (its layout hash cannot be checked, only the shape of its arrays; \
         its per-block figures are left out)",
        path.display()
    );
    Ok(done)
}

/// Step 3: move every staged array over its old one, then the staged group
/// metadata over the old, then remove the staging directory. Safe to run
/// again after a crash at any point of it.
fn swap_in(path: &Path, staging: &Path) -> Result<(), DaisyError> {
    let mut swapped = 0;
    for kind in all_kinds() {
        let staged = staging.join(kind.name);
        if !staged.is_dir() {
            continue; // not staged, or swapped in already
        }
        let current = path.join(kind.name);
        if current.exists() {
            // still staged: what lies in the store is the old array
            fs::remove_dir_all(&current).map_err(|e| io_err(&current, e))?;
        }
        fs::rename(&staged, &current).map_err(|e| io_err(&current, e))?;
        swapped += 1;
        if swapped == 1 {
            fault::point("migration-swapping")?;
        }
    }
    let meta = staging.join("zarr.json");
    if meta.is_file() {
        let target = path.join("zarr.json");
        fs::rename(&meta, &target).map_err(|e| io_err(&target, e))?;
    }
    sync(path)?;
    fault::point("migration-swapped")?;
    fs::remove_dir_all(staging).map_err(|e| io_err(staging, e))
}

/// Bring a store whose migration was cut short to a consistent state
/// (under its lock, before it is opened): finish a committed migration,
/// drop an uncommitted one. Nothing to do (the common case) is one
/// `stat`.
pub fn recover(path: &Path) -> Result<(), DaisyError> {
    let staging = path.join(STAGING);
    if !staging.is_dir() {
        return Ok(());
    }
    if staging.join("zarr.json").is_file() {
        tracing::warn!(
            "tracking store {}: finishing a migration an earlier run began and did not end",
            path.display()
        );
        swap_in(path, &staging)
    } else {
        let has_arrays = all_kinds().any(|k| staging.join(k.name).exists());
        if has_arrays {
            tracing::warn!(
                "tracking store {}: an earlier run's migration was cut short before it \
                 committed; the store is as it was before it",
                path.display()
            );
        }
        fs::remove_dir_all(&staging).map_err(|e| io_err(&staging, e))
    }
}
