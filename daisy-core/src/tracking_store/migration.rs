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

use super::layout::{Layout, growth_shift, mismatch};
use super::zarr_array::{ArrayKind, chunk_path, filled, io_err, write_array};
use super::{DONE, FAILURES, STATS, array_grid, write_group};
use crate::block_grid::BlockGrid;
use crate::error::DaisyError;
use crate::fault;
use crate::geometry::GridIndexer;
use crate::task_spec::TaskSpec;
use std::fs;
use std::path::Path;

/// The staging directory of a migration in progress (inside the store;
/// no Zarr reader lists it before it is committed, and it is gone after).
pub const STAGING: &str = ".daisy-migration";

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
        let reason = if new.total.contains_roi(&old.total) {
            "the block shape, read context or fit changed"
        } else {
            "total_roi shrank or moved off the old block grid"
        };
        return Err(mismatch(path, new_hash, old_hash, reason));
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

    let staging = path.join(STAGING);
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| io_err(&staging, e))?;
    }
    fs::create_dir(&staging).map_err(|e| io_err(&staging, e))?;
    let kinds: Vec<ArrayKind> = all_kinds()
        .filter(|k| path.join(k.name).join("zarr.json").is_file())
        .collect();
    for (i, kind) in kinds.iter().enumerate() {
        let size = kind.dtype.size();
        let mut out = filled(kind, new_shape.product());
        if old_shape.product() > 0 {
            let chunk = chunk_path(&path.join(kind.name), old_shape.dims());
            let bytes = fs::read(&chunk).map_err(|e| io_err(&chunk, e))?;
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
        write_array(&staging, kind, &new_shape, &out)?;
        let dir = staging.join(kind.name);
        if new_shape.product() > 0 {
            sync(&chunk_path(&dir, new_shape.dims()))?;
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
    write_group(&staging, new, task_id)?;
    sync(&staging)?;
    fault::point("migration-committed")?;
    swap_in(path, &staging)?;
    tracing::info!(
        "tracking store {} migrated to the grown total ROI {} (every done block kept)",
        path.display(),
        new.total
    );
    Ok(())
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
