//! The per-task tracking store: which blocks are done (their done markers)
//! and how often each failed, and with resource tracking what each cost,
//! persisted as a Zarr v3 group of memory-mapped arrays. [`TrackingStore`]
//! owns it; DONE_MARKERS.md describes it for users.
//!
//! Its parts: [`zarr_array`] (one single-chunk memory-mapped array),
//! [`arrays`] (what a store holds, by name, and the resource-tracking
//! arrays), [`layout`] (the layout hash and growth check), [`integrity`]
//! (whether a store is whole, and the refusals when it is not),
//! [`migration`] (a grown volume), [`outputs`] (the declared outputs'
//! identities), [`lock`] (one run at a time), [`history`] (the
//! `runs.jsonl` beside it) and [`placement`] (where a store may lie, and
//! finding stores below a directory); this module assembles them into a task's
//! store, opens and resets it.
//!
//! ## Layout
//! ```text
//! <store>/zarr.json            group metadata: daisy_task_hash, daisy_layout,
//!                              daisy_task_id, daisy_outputs (see [`outputs`])
//! <store>/done/zarr.json       uint8, one element per block
//! <store>/done/c/0/../0        the single chunk: raw little-endian elements
//! <store>/failures/...         uint32, likewise
//! <store>/runs.jsonl           the task's run history (run_report.rs)
//! <store>/daisy.lock           held by the run that has the store open
//! ```
//! Every array has the same shape, one element per cell of the block grid
//! anchored at `total_roi` (a block's cell is `(write_offset - total_offset)
//! // write_shape`, its spatial-id position), one chunk, and only the
//! `bytes` codec, so the chunk file *is* the array: it is memory-mapped and
//! a block is marked with one store into memory, no syscall. Any Zarr v3
//! reader (zarr-python) opens the group, also while a run writes it.
//!
//! ## Guarding against reuse with another geometry
//! The group's attributes hold `daisy_task_hash`, a SHA-256 over the total,
//! read and write ROIs and the fit (not the task id, not worker counts), and
//! `daisy_layout`, the structural parameters behind it. Opening a store
//! whose hash differs is a [`DaisyError::LayoutMismatch`] naming the store,
//! both hashes and how to delete it, unless the only change is a larger
//! `total_roi` on the same block grid (same block shape, read context and
//! fit, grid anchors a whole number of blocks apart): then the store is
//! migrated in place, every element moved to its cell on the larger grid.
//! Blocks whose write region was cut at the old border (`fit="shrink"` or
//! `"overhang"`) are no longer the same block and lose their done mark.
//! A directory that is not such a group (an older bare array, anything
//! foreign) is refused the same way, never reused.
//!
//! ## Crash consistency
//! Marks are stores into shared file mappings: a killed driver loses nothing
//! the kernel has (only a power cut can lose unflushed pages; [`TrackingStore::flush`]
//! runs at the end of every run). A migration writes the new arrays next to
//! the old ones and renames them into place before the group metadata is
//! rewritten, so an interrupted migration leaves the old store intact.

pub mod arrays;
pub mod block_history;
pub mod history;
pub mod integrity;
pub mod layout;
pub mod lock;
pub mod migration;
pub mod outputs;
pub mod placement;
pub mod status;
pub mod zarr_array;

pub use self::arrays::{DONE, FAILURES, RUNS_FILE, STATS, TrackingRecord};
pub use self::history::{append_runs_line, history_file};
pub use self::status::{StoreStatus, store_spec, store_status};

use self::arrays::{RESET_MARKER, StatsArrays};
use self::integrity::{open_array, read_group};
use self::layout::{Layout, mismatch};
use self::lock::{LOCK_FILE, StoreLock};
use self::zarr_array::{
    ChunkFormat, MappedArray, StoredArray, chunk_path, create_array, io_err, read_array,
    write_array_metadata, write_atomic,
};
use crate::block::Block;
use crate::block_grid::BlockGrid;
use crate::block_profile::BlockStats;
use crate::error::DaisyError;
use crate::geometry::{Coord, GridIndexer};
use crate::task_spec::TaskSpec;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use zarrs_metadata::v3::GroupMetadataV3;

/// Why a store of another layout, or a directory no daisy made, is refused.
const FOREIGN: &str = "it was written for a different block layout (or by another program)";

/// The tracking store of one task, open for reading and writing.
pub struct TrackingStore {
    path: PathBuf,
    /// Cells of the array grid (anchored at `total_roi`).
    cells: GridIndexer,
    /// Array-grid position of placement-grid position 0.
    anchor_shift: Coord,
    done: MappedArray,
    failures: MappedArray,
    /// The resource-tracking arrays, when resource tracking is on.
    stats: Option<StatsArrays>,
    /// The run's exclusive hold on the store (None: a reader).
    lock: Option<StoreLock>,
}

/// Shape of the array grid and the shift of the placement grid in it.
fn array_grid(spec: &TaskSpec) -> (Coord, Coord) {
    let grid = BlockGrid::new(0, spec);
    let shift = spec
        .total_write_roi()
        .begin()
        .sub(&spec.total_roi.begin())
        .div_floor(&spec.write_roi.shape());
    let shape = if grid.num_blocks() == 0 {
        Coord::splat(0, shift.dims())
    } else {
        grid.grid_shape().add(&shift)
    };
    (shape, shift)
}

/// The group attribute naming the task a store belongs to.
const TASK_ID_ATTR: &str = "daisy_task_id";

/// Set a file's modification time to now: age-based scratch purges see the
/// store's small metadata files, written once when it was made, as in use.
fn touch(path: &Path) {
    let now = std::time::SystemTime::now();
    if let Ok(f) = fs::File::options().append(true).open(path) {
        let _ = f.set_modified(now);
    }
}

impl std::fmt::Debug for TrackingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackingStore")
            .field("path", &self.path)
            .field("shape", &self.cells.shape())
            .finish()
    }
}

impl TrackingStore {
    /// Open the store at `path` for `spec`, creating it if it does not
    /// exist and migrating it if the task's total ROI grew, and take its
    /// lock for as long as it is open. With `resource_tracking`, the
    /// statistics arrays are opened (and created where missing). A store
    /// of another task, or one that lost files it cannot lose without
    /// losing marks, is refused.
    pub fn open(path: &Path, spec: &TaskSpec, resource_tracking: bool) -> Result<Self, DaisyError> {
        let hash = Layout::of(spec).hash();
        // a store inside another, or around one, is refused before anything
        // is written (see `placement`)
        placement::check_on_disk(path, &spec.task_id)?;
        // a foreign directory (or Zarr group) is refused untouched, before
        // the lock file would be written into it
        if let Some(attrs) = read_group(path, &hash)?
            && attrs.get("daisy_task_hash").is_none()
        {
            return Err(mismatch(path, &hash, "(none)", FOREIGN));
        }
        let lock = StoreLock::acquire(path)?;
        migration::recover(path)?;
        let mut store = Self::open_as(path, spec, resource_tracking, true)?;
        store.lock = Some(lock);
        Ok(store)
    }

    /// Open the store without taking its lock: for readers outside a run
    /// (`task.block_record`), which may look while a run writes it.
    pub fn open_unlocked(
        path: &Path,
        spec: &TaskSpec,
        resource_tracking: bool,
    ) -> Result<Self, DaisyError> {
        Self::open_as(path, spec, resource_tracking, false)
    }

    /// Open for `spec`; the `owner` (the run holding the lock) also
    /// migrates, records the task id of an older store that has none, and
    /// refreshes the metadata's modification times.
    fn open_as(
        path: &Path,
        spec: &TaskSpec,
        resource_tracking: bool,
        owner: bool,
    ) -> Result<Self, DaisyError> {
        let layout = Layout::of(spec);
        let hash = layout.hash();
        let (shape, shift) = array_grid(spec);
        match read_group(path, &hash)? {
            None => {
                fs::create_dir_all(path).map_err(|e| io_err(path, e))?;
                for kind in [DONE, FAILURES] {
                    create_array(path, &kind, &shape)?;
                }
                // figures a reset kept, of another geometry than this
                // task's (its ROIs changed with the reset): not its blocks'.
                // Only an array whose metadata says so: one without is
                // being made by a driver making this store at the same time
                for kind in STATS {
                    let other =
                        migration::array_shape(path, &kind).is_some_and(|s| s != shape.as_slice());
                    if other {
                        let dir = path.join(kind.name);
                        fs::remove_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
                    }
                }
                write_group(path, &layout, &spec.task_id)?;
                let marker = path.join(RESET_MARKER);
                if marker.exists() {
                    fs::remove_file(&marker).map_err(|e| io_err(&marker, e))?;
                }
            }
            Some(attrs) => {
                let found = attrs
                    .get("daisy_task_hash")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)")
                    .to_string();
                let owner_id = attrs.get(TASK_ID_ATTR).and_then(Value::as_str);
                if let Some(other) = owner_id
                    && other != spec.task_id
                {
                    return Err(DaisyError::StoreOfAnotherTask {
                        store: path.display().to_string(),
                        owner: other.to_string(),
                        task: spec.task_id.clone(),
                    });
                }
                if found != hash {
                    let old = attrs.get("daisy_layout").and_then(Layout::from_json);
                    match old {
                        Some(old) if old.hash() == found && owner => {
                            migration::migrate(path, &old, &layout, &spec.task_id, &hash, &found)?;
                        }
                        None if owner && migration::is_v200_store(path, &attrs, spec) => {
                            migration::from_v200(path, spec)?;
                        }
                        _ => {
                            return Err(mismatch(path, &hash, &found, FOREIGN));
                        }
                    }
                } else if owner && owner_id.is_none() {
                    // a store from before stores named their task
                    write_group(path, &layout, &spec.task_id)?;
                }
            }
        }
        let done = open_array(path, DONE, &shape)?;
        let failures = open_array(path, FAILURES, &shape)?;
        let stats = if resource_tracking {
            Some(StatsArrays::open(path, &shape)?)
        } else {
            None
        };
        if owner {
            touch(&path.join("zarr.json"));
            for kind in [DONE, FAILURES].iter().chain(STATS.iter()) {
                touch(&path.join(kind.name).join("zarr.json"));
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            cells: GridIndexer::new(shape),
            anchor_shift: shift,
            done,
            failures,
            stats,
            lock: None,
        })
    }

    /// Make the store at `path` the store of `spec`'s task, keeping every
    /// mark: write again the metadata a purge deleted (the group's, for
    /// `spec`'s layout, and each array's whose chunk is there and has the
    /// size of that layout), and record `spec`'s task id (a renamed task).
    /// A store whose group metadata names another layout is refused as on
    /// open. Takes the store's lock.
    pub fn adopt(path: &Path, spec: &TaskSpec) -> Result<(), DaisyError> {
        let layout = Layout::of(spec);
        let hash = layout.hash();
        if !path.is_dir() {
            return Err(DaisyError::Io(format!(
                "{}: no tracking store to adopt there",
                path.display()
            )));
        }
        let _lock = StoreLock::acquire(path)?;
        migration::recover(path)?;
        let group = path.join("zarr.json");
        if group.is_file() {
            let attrs = match read_group(path, &hash)? {
                Some(a) => a,
                None => return Err(mismatch(path, &hash, "(none)", FOREIGN)),
            };
            let found = attrs.get("daisy_task_hash").and_then(Value::as_str);
            if found != Some(hash.as_str()) {
                return Err(mismatch(path, &hash, found.unwrap_or("(none)"), FOREIGN));
            }
        }
        let (shape, _) = array_grid(spec);
        for kind in [DONE, FAILURES].into_iter().chain(STATS) {
            let dir = path.join(kind.name);
            let chunk = chunk_path(&dir, shape.dims());
            if dir.join("zarr.json").is_file() || !chunk.is_file() {
                continue;
            }
            let len = fs::metadata(&chunk).map_err(|e| io_err(&chunk, e))?.len();
            let Some(format) = ChunkFormat::of_file(&kind, &shape, len) else {
                let expected = ChunkFormat::for_kind(&kind, &shape).file_len(&kind, &shape);
                return Err(mismatch(
                    path,
                    &hash,
                    "(metadata deleted)",
                    &format!(
                        "its {} chunk holds {len} bytes where this task's layout needs \
                         {expected}: it was written for another total_roi, read_roi, \
                         write_roi or fit",
                        kind.name
                    ),
                ));
            };
            write_array_metadata(path, &kind, &shape, format)?;
        }
        write_group(path, &layout, &spec.task_id)?;
        tracing::info!(
            "tracking store {} adopted by task {:?} (every mark kept)",
            path.display(),
            spec.task_id
        );
        Ok(())
    }

    /// Record an executed block's measurement, worker and time stamps
    /// (resource tracking only; a no-op otherwise).
    pub fn record_stats(
        &mut self,
        block: &Block,
        stats: &BlockStats,
        worker_id: Option<u32>,
        sent_at: f64,
        returned_at: f64,
    ) {
        let cell = self.cell(block);
        if let Some(arrays) = self.stats.as_mut() {
            arrays.record(cell, stats, worker_id, sent_at, returned_at);
        }
    }

    /// What the store holds for a block.
    pub fn record(&self, block: &Block) -> TrackingRecord {
        self.record_at_index(self.cell(block))
    }

    /// What the store holds for a grid cell (anchored at `total_roi`), with
    /// the spatial id of the block there; None outside the arrays.
    pub fn record_at(&self, cell: &Coord) -> Option<(u64, TrackingRecord)> {
        if cell.dims() != self.cells.shape().dims() || !self.cells.contains(cell) {
            return None;
        }
        let id = crate::block_id::cantor_number(cell.as_slice());
        Some((id, self.record_at_index(self.cells.flat(cell))))
    }

    /// Every cell with a record (done, or with failed attempts), C order.
    pub fn recorded_cells(&self) -> Vec<Coord> {
        (0..self.cells.len())
            .filter(|&i| {
                self.done.get::<u8>(i).is_some_and(|d| d != 0)
                    || self.failures.get::<u32>(i).is_some_and(|f| f != 0)
            })
            .map(|i| self.cells.unflat(i))
            .collect()
    }

    /// True if a store (a daisy tracking group) exists at `path`.
    pub fn exists(path: &Path) -> bool {
        path.join("zarr.json").is_file()
    }

    /// Read one array of the store at `path` whole (`done`, `failures` or
    /// one of the [`STATS`] arrays), without opening the store for a task:
    /// for readers outside a run. None when the store has no such array.
    pub fn read_array(path: &Path, name: &str) -> Result<Option<StoredArray>, DaisyError> {
        let kind = [DONE, FAILURES]
            .into_iter()
            .chain(STATS)
            .find(|k| k.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = [DONE, FAILURES]
                    .iter()
                    .chain(STATS.iter())
                    .map(|k| k.name)
                    .collect();
                DaisyError::invalid(
                    "name",
                    format!(
                        "no tracking array {name:?}; the arrays are {}",
                        names.join(", ")
                    ),
                )
            })?;
        read_array(path, kind)
    }

    /// The `qs`-th percentiles of the block wall times recorded in the
    /// store at `path` (the runs that executed each block stamped them;
    /// unmeasured blocks are left out): None without measured blocks.
    pub fn wall_percentiles(path: &Path, qs: &[f64]) -> Result<Option<Vec<f64>>, DaisyError> {
        let Some(array) = Self::read_array(path, "wall_seconds")? else {
            return Ok(None);
        };
        let walls = array
            .bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        Ok(crate::run_stats::percentiles(walls, qs))
    }

    /// True if the store at `path` has the resource-tracking arrays.
    pub fn has_stats_arrays(path: &Path) -> bool {
        path.join(STATS[0].name).join("zarr.json").is_file()
    }

    fn record_at_index(&self, cell: u64) -> TrackingRecord {
        let unmeasured = TrackingRecord {
            done: false,
            failures: 0,
            stats: None,
            worker_id: None,
            sent_at: None,
            returned_at: None,
        };
        TrackingRecord {
            done: self.done.get::<u8>(cell).is_some_and(|d| d != 0),
            failures: self.failures.get(cell).unwrap_or(0),
            ..self
                .stats
                .as_ref()
                .and_then(|a| a.read(cell))
                .unwrap_or(unmeasured)
        }
    }

    /// Where the store is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shape of the arrays (the block grid anchored at `total_roi`).
    pub fn shape(&self) -> Coord {
        self.cells.shape()
    }

    /// The array cell of a block.
    #[inline]
    pub fn cell(&self, block: &Block) -> u64 {
        self.cells.flat(&block.position.add(&self.anchor_shift))
    }

    /// True if the block carries a done marker. One memory read.
    #[inline]
    pub fn is_marked_done(&self, block: &Block) -> bool {
        self.done
            .get::<u8>(self.cell(block))
            .is_some_and(|d| d != 0)
    }

    /// Set a block's done marker.
    #[inline]
    pub fn mark_done(&mut self, block: &Block) {
        self.done.set(self.cell(block), 1u8);
    }

    /// Count a failed attempt of a block.
    #[inline]
    pub fn add_failure(&mut self, block: &Block) {
        let cell = self.cell(block);
        let n = self.failures.get::<u32>(cell).unwrap_or(0);
        self.failures.set(cell, n.saturating_add(1));
    }

    /// Failed attempts recorded for a block.
    pub fn failures(&self, block: &Block) -> u32 {
        self.failures.get(self.cell(block)).unwrap_or(0)
    }

    /// Every array of the store that is open.
    fn arrays(&self) -> impl Iterator<Item = &MappedArray> {
        let stats = self.stats.as_ref().map(StatsArrays::all);
        [&self.done, &self.failures]
            .into_iter()
            .chain(stats.into_iter().flatten())
    }

    /// Why a mark could not be kept (the disk under the store is full), if
    /// so: the run must stop (see `zarr_array`'s module docs).
    pub fn failure(&self) -> Option<&str> {
        self.arrays().find_map(MappedArray::failure)
    }

    /// Write dirty pages to disk; the store's [`failure`](Self::failure),
    /// if any, as an error.
    pub fn flush(&self) -> Result<(), DaisyError> {
        for a in self.arrays() {
            a.flush(&self.path)?;
        }
        match self.failure() {
            Some(why) => Err(DaisyError::Io(why.to_string())),
            None => Ok(()),
        }
    }

    /// Reset a task's store (only a directory that is one): delete its
    /// done markers and failures so the next run processes every block
    /// again. With `keep_history`, its `runs.jsonl` stays and gets a reset
    /// record (`{"reset_at": <epoch seconds>}`) so readers see the
    /// boundary, and so do the blocks' figures (the [`STATS`] arrays: what
    /// each block cost in the runs that did it, which `daisy compare` sets
    /// a rerun against, block for block; the forecast uses only those
    /// measured after the reset); without, the whole directory goes.
    /// Nothing to delete is not an error.
    pub fn reset(path: &Path, keep_history: bool) -> Result<(), DaisyError> {
        if !path.exists() {
            return Ok(());
        }
        match read_group(path, "") {
            Ok(Some(attrs)) if attrs.get("daisy_task_hash").is_none() => {
                return Err(not_a_store(path));
            }
            Err(_) => return Err(not_a_store(path)),
            Ok(_) => {}
        }
        // not from under a run that holds it
        let _lock = StoreLock::acquire(path)?;
        if !keep_history {
            return fs::remove_dir_all(path).map_err(|e| io_err(path, e));
        }
        // the marker first, then the group metadata: a reset cut short
        // leaves a directory of leftovers beside the marker, which the next
        // run makes into a store again (nothing there is a mark to keep)
        let marker = path.join(RESET_MARKER);
        fs::write(&marker, b"").map_err(|e| io_err(&marker, e))?;
        let meta = path.join("zarr.json");
        if meta.exists() {
            fs::remove_file(&meta).map_err(|e| io_err(&meta, e))?;
        }
        for entry in fs::read_dir(path).map_err(|e| io_err(path, e))? {
            let entry = entry.map_err(|e| io_err(path, e))?;
            let name = entry.file_name();
            if name == LOCK_FILE
                || name == RUNS_FILE
                || name == RESET_MARKER
                || STATS.iter().any(|k| name == k.name)
            {
                continue;
            }
            let p = entry.path();
            let gone = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
            gone.map_err(|e| io_err(&p, e))?;
        }
        let runs = path.join(RUNS_FILE);
        if runs.is_file() {
            let line = serde_json::json!({ "reset_at": crate::clock::wall_clock() });
            append_runs_line(&runs, &line.to_string()).map_err(|e| io_err(&runs, e))?;
        }
        fs::remove_file(&marker).map_err(|e| io_err(&marker, e))
    }
}

fn not_a_store(path: &Path) -> DaisyError {
    DaisyError::Io(format!(
        "{}: not a daisy tracking store; not deleting it",
        path.display()
    ))
}

fn write_group(path: &Path, layout: &Layout, task_id: &str) -> Result<(), DaisyError> {
    let mut attrs = serde_json::Map::new();
    attrs.insert("daisy_task_hash".into(), Value::String(layout.hash()));
    attrs.insert("daisy_layout".into(), layout.to_json());
    attrs.insert(TASK_ID_ATTR.into(), Value::String(task_id.to_string()));
    // what the store recorded of the task's outputs outlives a rewrite
    if let Ok(identities) = outputs::recorded(path)
        && !identities.is_empty()
    {
        attrs.insert(outputs::OUTPUTS_ATTR.into(), Value::Object(identities));
    }
    let meta = GroupMetadataV3::new().with_attributes(attrs);
    let text = serde_json::to_string_pretty(&meta).map_err(|e| DaisyError::Io(e.to_string()))?;
    write_atomic(&path.join("zarr.json"), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_grid::BlockGrid;
    use crate::geometry::Roi;
    use crate::task_spec::Fit;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    /// One block's measurement, as the tests record it.
    fn figures() -> BlockStats {
        BlockStats {
            wall_seconds: 0.5,
            cpu_seconds: 0.25,
            peak_rss_bytes: 1 << 30,
            io_read_bytes: 7,
            io_write_bytes: 9,
            gpu_util_pct: f32::NAN,
            gpu_mem_bytes: 0,
            run_queue_seconds: 0.125,
        }
    }

    fn spec(total: Roi, fit: Fit) -> TaskSpec {
        TaskSpec::new(
            "t",
            total,
            roi(&[-2, -2, -2], &[8, 8, 8]),
            roi(&[0, 0, 0], &[4, 4, 4]),
            fit,
            true,
            0,
            vec![],
        )
        .unwrap()
    }

    fn tmp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "daisy-tracking-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn marks_persist_across_opens() {
        let path = tmp("persist");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        let grid = BlockGrid::new(0, &s);
        {
            let mut t = TrackingStore::open(&path, &s, false).unwrap();
            for i in (0..grid.num_blocks()).step_by(3) {
                t.mark_done(&grid.block(i));
            }
            t.add_failure(&grid.block(1));
            t.add_failure(&grid.block(1));
            t.flush().unwrap();
        }
        let t = TrackingStore::open(&path, &s, false).unwrap();
        for i in 0..grid.num_blocks() {
            assert_eq!(t.is_marked_done(&grid.block(i)), i % 3 == 0);
        }
        assert_eq!(t.failures(&grid.block(1)), 2);
        assert!(path.join("done/c/0/0/0").is_file());
        let meta: Value =
            serde_json::from_str(&fs::read_to_string(path.join("done/zarr.json")).unwrap())
                .unwrap();
        assert_eq!(meta["data_type"], "uint8");
        assert_eq!(meta["codecs"][0]["name"], "bytes");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn stats_are_recorded_and_read_back() {
        let path = tmp("stats");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let grid = BlockGrid::new(0, &s);
        let st = figures();
        {
            let mut t = TrackingStore::open(&path, &s, true).unwrap();
            t.mark_done(&grid.block(0));
            t.record_stats(&grid.block(0), &st, Some(3), 100.0, 100.5);
        }
        let t = TrackingStore::open(&path, &s, true).unwrap();
        let r = t.record(&grid.block(0));
        assert!(r.done);
        let got = r.stats.unwrap();
        assert_eq!(got.peak_rss_bytes, 1 << 30);
        assert!((got.wall_seconds - 0.5).abs() < 1e-6);
        assert!(got.gpu_util_pct.is_nan());
        assert_eq!(got.run_queue_seconds, 0.125);
        assert_eq!(
            (r.worker_id, r.sent_at, r.returned_at),
            (Some(3), Some(100.0), Some(100.5))
        );
        let never = t.record(&grid.block(1));
        assert_eq!(
            (never.stats, never.worker_id, never.sent_at),
            (None, None, None)
        );
        let meta: Value =
            serde_json::from_str(&fs::read_to_string(path.join("sent_at/zarr.json")).unwrap())
                .unwrap();
        assert_eq!(meta["fill_value"], "NaN");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn another_layout_is_refused_with_both_hashes() {
        let path = tmp("mismatch");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        TrackingStore::open(&path, &s, false).unwrap();
        let other = TaskSpec::new(
            "t",
            roi(&[0, 0, 0], &[20, 20, 20]),
            roi(&[-2, -2, -2], &[9, 9, 9]),
            roi(&[0, 0, 0], &[5, 5, 5]),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let err = TrackingStore::open(&path, &other, false).err().unwrap();
        let text = err.to_string();
        assert!(text.contains(&Layout::of(&s).hash()), "{text}");
        assert!(text.contains(&Layout::of(&other).hash()), "{text}");
        assert!(text.contains("rm -rf"), "{text}");
        // shrinking is refused too
        let smaller = spec(roi(&[0, 0, 0], &[16, 20, 20]), Fit::Valid);
        assert!(TrackingStore::open(&path, &smaller, false).is_err());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_bare_array_or_foreign_directory_is_refused() {
        let path = tmp("foreign");
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("notes.txt"), "hello").unwrap();
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        assert!(matches!(
            TrackingStore::open(&path, &s, false),
            Err(DaisyError::LayoutMismatch { .. })
        ));
        fs::remove_file(path.join("notes.txt")).unwrap();
        fs::write(
            path.join("zarr.json"),
            r#"{"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "uint8",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
               "codecs": [{"name": "bytes"}]}"#,
        )
        .unwrap();
        let err = TrackingStore::open(&path, &s, false).err().unwrap();
        assert!(err.to_string().contains("bare Zarr array"), "{err}");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_grown_volume_keeps_every_done_block() {
        let path = tmp("grow");
        let small = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let old_grid = BlockGrid::new(0, &small);
        let done_offsets: Vec<Coord> = {
            let mut t = TrackingStore::open(&path, &small, true).unwrap();
            (0..old_grid.num_blocks())
                .filter(|i| i % 2 == 0)
                .map(|i| {
                    let b = old_grid.block(i);
                    t.mark_done(&b);
                    t.record_stats(&b, &figures(), Some(i as u32), 1.0, 2.0);
                    b.write_roi.offset()
                })
                .collect()
        };
        // grown along two axes, one of them towards negative coordinates
        let big = spec(roi(&[0, -8, 0], &[20, 36, 32]), Fit::Valid);
        let t = TrackingStore::open(&path, &big, true).unwrap();
        let new_grid = BlockGrid::new(0, &big);
        let mut kept = 0;
        for i in 0..new_grid.num_blocks() {
            let b = new_grid.block(i);
            let was_done = done_offsets.contains(&b.write_roi.offset());
            assert_eq!(
                t.is_marked_done(&b),
                was_done,
                "block at {}",
                b.write_roi.offset()
            );
            kept += was_done as usize;
            // the figures (sharded arrays) move with their blocks
            let measured = t.record(&b).worker_id.is_some();
            assert_eq!(measured, was_done, "figures of {}", b.write_roi.offset());
        }
        assert_eq!(kept, done_offsets.len());
        // reopening with the grown layout is a plain open now
        drop(t);
        TrackingStore::open(&path, &big, true).unwrap();
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn growth_drops_blocks_the_old_border_cut() {
        let path = tmp("grow-shrink");
        let small = spec(roi(&[0, 0, 0], &[18, 20, 20]), Fit::Shrink);
        let old_grid = BlockGrid::new(0, &small);
        {
            let mut t = TrackingStore::open(&path, &small, true).unwrap();
            for i in 0..old_grid.num_blocks() {
                t.mark_done(&old_grid.block(i));
            }
        }
        let big = spec(roi(&[0, 0, 0], &[30, 20, 20]), Fit::Shrink);
        let t = TrackingStore::open(&path, &big, true).unwrap();
        let new_grid = BlockGrid::new(0, &big);
        for i in 0..new_grid.num_blocks() {
            let b = new_grid.block(i);
            // old total write ROI along axis 0 was [2, 16): blocks starting
            // at 2, 6, 10 were whole, the one at 14 was cut to [14, 16)
            let whole_before = b.write_roi.offset()[0] < 14;
            assert_eq!(t.is_marked_done(&b), whole_before, "{}", b.write_roi);
        }
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn drivers_making_one_fresh_store_at_once_are_never_told_it_is_foreign() {
        // a job array started together: eight drivers open one store that
        // does not exist yet; one makes it, each other either opens it
        // after or is told a run holds it, never "not a daisy store" (the
        // maker's `zarr.daisy-tmp` was taken for someone else's file)
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        for round in 0..12 {
            let path = tmp(&format!("eight-{round}"));
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let drivers: Vec<_> = (0..8)
                .map(|_| {
                    let (path, s, start) = (path.clone(), s.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        TrackingStore::open(&path, &s, false).map(drop)
                    })
                })
                .collect();
            for d in drivers {
                if let Err(e) = d.join().unwrap() {
                    let e = e.to_string();
                    assert!(e.contains("in use by another run"), "round {round}: {e}");
                }
            }
            assert!(path.join("zarr.json").is_file());
            fs::remove_dir_all(&path).unwrap();
        }
    }

    #[test]
    fn a_store_being_made_by_another_driver_is_not_foreign() {
        let path = tmp("being-made");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        // the moment before the maker renames its group metadata into place
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("zarr.daisy-tmp"), b"{").unwrap();
        let t = TrackingStore::open(&path, &s, false).unwrap();
        assert!(path.join("zarr.json").is_file());
        drop(t);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_creation_cut_short_is_made_again_and_a_refusal_names_this_tasks_hash() {
        let path = tmp("half-made");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        // what a full disk leaves: an array's temporary chunk, no zarr.json
        fs::create_dir_all(path.join("done/c/0/0")).unwrap();
        fs::write(path.join("done/c/0/0/0.daisy-tmp"), b"").unwrap();
        let t = TrackingStore::open(&path, &s, false).unwrap();
        assert!(path.join("zarr.json").is_file());
        drop(t);
        // a directory of someone else's is still refused, with our hash
        let foreign = tmp("foreign-hash");
        fs::create_dir_all(&foreign).unwrap();
        fs::write(foreign.join("notes.txt"), "x").unwrap();
        let e = TrackingStore::open(&foreign, &s, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&Layout::of(&s).hash()), "{e}");
        fs::remove_dir_all(&path).unwrap();
        fs::remove_dir_all(&foreign).unwrap();
    }

    #[test]
    fn a_new_store_is_sparse_and_a_mark_reserves_its_window_only() {
        // the store grows as blocks are marked (a store for 10^9 blocks
        // costs nothing up front), and every write lands in reserved disk
        // blocks, so that a mark never meets a full disk as SIGBUS (see
        // zarr_array's module docs)
        use std::os::unix::fs::MetadataExt;
        let path = tmp("sparse");
        let unit = Roi::from_slices(&[0, 0], &[1, 1]).unwrap();
        let spec = TaskSpec::new(
            "t",
            Roi::from_slices(&[0, 0], &[4000, 1000]).unwrap(),
            unit,
            unit,
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let mut store = TrackingStore::open(&path, &spec, false).unwrap();
        let allocated = |name: &str| {
            let meta = fs::metadata(path.join(name).join("c/0/0")).unwrap();
            (meta.len(), meta.blocks() * 512)
        };
        for name in ["done", "failures"] {
            let (len, used) = allocated(name);
            assert!(len >= 4_000_000, "{name}: apparent size {len}");
            assert!(used < 64 << 10, "{name}: {used} bytes allocated up front");
        }
        let block = BlockGrid::new(0, &spec).block(2_500_000);
        store.mark_done(&block);
        store.add_failure(&block);
        assert!(store.is_marked_done(&block));
        assert_eq!(store.failures(&block), 1);
        let (_, used) = allocated("done");
        assert!(
            (zarr_array::RESERVE_WINDOW..(2 * zarr_array::RESERVE_WINDOW)).contains(&used),
            "done: {used} bytes allocated after one mark"
        );
        assert!(store.failure().is_none());
        drop(store);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn resource_tracking_arrays_are_as_sparse_as_the_marks() {
        // 10^6 blocks with resource tracking, one block measured: the
        // arrays whose fill is NaN or "no worker" are sharded, so a window
        // never written is absent (it reads as the fill value in any Zarr
        // reader) and costs no disk
        use std::os::unix::fs::MetadataExt;
        let path = tmp("sparse-stats");
        let unit = Roi::from_slices(&[0, 0], &[1, 1]).unwrap();
        let spec = TaskSpec::new(
            "t",
            Roi::from_slices(&[0, 0], &[1000, 1000]).unwrap(),
            unit,
            unit,
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let mut store = TrackingStore::open(&path, &spec, true).unwrap();
        let disk = |path: &Path| {
            let mut apparent = 0;
            let mut used = 0;
            for kind in [DONE, FAILURES].iter().chain(STATS.iter()) {
                let meta = fs::metadata(path.join(kind.name).join("c/0/0")).unwrap();
                apparent += meta.len();
                used += meta.blocks() * 512;
            }
            (apparent, used)
        };
        let (apparent, used) = disk(&path);
        assert!(apparent >= 69_000_000, "apparent size {apparent}");
        assert!(used < 1 << 20, "{used} bytes allocated up front");
        let grid = BlockGrid::new(0, &spec);
        let block = grid.block(500_000);
        let st = figures();
        store.mark_done(&block);
        store.record_stats(&block, &st, Some(3), 100.0, 100.5);
        drop(store);
        let (apparent, used) = disk(&path);
        assert!(
            used * 4 < apparent,
            "{used} of {apparent} bytes allocated after one measured block"
        );
        // read back: by the store, and whole (as the CLI and report do)
        let store = TrackingStore::open(&path, &spec, true).unwrap();
        let r = store.record(&block);
        assert_eq!(
            (r.done, r.worker_id, r.sent_at),
            (true, Some(3), Some(100.0))
        );
        assert!((r.stats.unwrap().wall_seconds - 0.5).abs() < 1e-6);
        let never = store.record(&grid.block(7));
        assert_eq!((never.stats, never.worker_id), (None, None));
        let cell = store.cell(&block) as usize;
        drop(store);
        let walls = TrackingStore::read_array(&path, "wall_seconds")
            .unwrap()
            .unwrap();
        assert_eq!(walls.bytes.len(), 4_000_000);
        let wall = |i: usize| f32::from_le_bytes(walls.bytes[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(wall(cell), 0.5);
        assert!(wall(0).is_nan() && wall(999_999).is_nan());
        let ids = TrackingStore::read_array(&path, "worker_id")
            .unwrap()
            .unwrap();
        assert_eq!(&ids.bytes[..4], &[0xff; 4]);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_store_whose_figures_were_written_in_full_is_read_and_written_as_it_is() {
        // stores made before the figures were sharded hold them as one
        // plain chunk written out in full: still opened, read and written
        let path = tmp("plain-stats");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let grid = BlockGrid::new(0, &s);
        drop(TrackingStore::open(&path, &s, true).unwrap());
        let (shape, _) = array_grid(&s);
        for kind in STATS {
            let chunk = chunk_path(&path.join(kind.name), shape.dims());
            zarr_array::write_atomic(&chunk, &zarr_array::filled(&kind, shape.product())).unwrap();
            write_array_metadata(&path, &kind, &shape, ChunkFormat::Plain).unwrap();
        }
        let st = figures();
        {
            let mut t = TrackingStore::open(&path, &s, true).unwrap();
            assert_eq!(t.record(&grid.block(1)).stats, None);
            t.record_stats(&grid.block(1), &st, Some(2), 1.0, 2.0);
        }
        let t = TrackingStore::open(&path, &s, true).unwrap();
        assert_eq!(t.record(&grid.block(1)).worker_id, Some(2));
        assert_eq!(t.record(&grid.block(0)).worker_id, None);
        let chunk = chunk_path(&path.join("worker_id"), shape.dims());
        assert_eq!(fs::metadata(&chunk).unwrap().len(), shape.product() * 4);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn reset_deletes_only_a_store() {
        let path = tmp("reset");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        TrackingStore::open(&path, &s, false).unwrap();
        TrackingStore::reset(&path, false).unwrap();
        assert!(!path.exists());
        TrackingStore::reset(&path, false).unwrap();
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("precious.txt"), "x").unwrap();
        for keep in [false, true] {
            assert!(TrackingStore::reset(&path, keep).is_err());
            assert!(path.join("precious.txt").exists());
        }
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_reset_keeping_history_leaves_runs_and_a_reset_record() {
        let path = tmp("reset-history");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let block = BlockGrid::new(0, &s).block(0);
        {
            let mut store = TrackingStore::open(&path, &s, true).unwrap();
            store.mark_done(&block);
        }
        fs::write(path.join(RUNS_FILE), "{\"task_id\": \"t\"}\n").unwrap();
        TrackingStore::reset(&path, true).unwrap();
        let mut left: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        // the blocks' figures stay, for comparing runs block for block
        let mut kept: Vec<&str> = STATS.iter().map(|k| k.name).collect();
        kept.extend([LOCK_FILE, RUNS_FILE]);
        kept.sort_unstable();
        assert_eq!(left, kept);
        let text = fs::read_to_string(path.join(RUNS_FILE)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let record: Value = serde_json::from_str(lines[1]).unwrap();
        assert!(record["reset_at"].as_f64().unwrap() > 0.0);
        // the next run makes a fresh store beside the kept history
        let store = TrackingStore::open(&path, &s, false).unwrap();
        assert!(!store.is_marked_done(&block));
        drop(store);
        assert!(path.join(RUNS_FILE).is_file());
        TrackingStore::reset(&path, false).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_reset_keeps_the_blocks_figures_unless_the_geometry_changed_with_it() {
        let path = tmp("reset-figures");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let block = BlockGrid::new(0, &s).block(1);
        {
            let mut store = TrackingStore::open(&path, &s, true).unwrap();
            store.record_stats(&block, &figures(), Some(1), 10.0, 11.0);
            store.mark_done(&block);
        }
        TrackingStore::reset(&path, true).unwrap();
        {
            let store = TrackingStore::open(&path, &s, true).unwrap();
            let r = store.record(&block);
            assert!(!r.done, "the mark is gone");
            // the figures stay (NaN GPU figures: compared by their wall)
            let kept = r.stats.expect("the figures stay");
            assert_eq!(kept.wall_seconds, figures().wall_seconds);
            assert_eq!(kept.peak_rss_bytes, figures().peak_rss_bytes);
            assert_eq!(r.sent_at, Some(10.0));
        }
        // reset, then run with other ROIs: the old figures are not its blocks'
        TrackingStore::reset(&path, true).unwrap();
        let wider = spec(roi(&[0, 0, 0], &[40, 40, 40]), Fit::Valid);
        let store = TrackingStore::open(&path, &wider, true).unwrap();
        let grid = BlockGrid::new(0, &wider);
        assert!((0..grid.num_blocks()).all(|i| store.record(&grid.block(i)).stats.is_none()));
        drop(store);
        fs::remove_dir_all(&path).unwrap();
    }

    /// A store for `s` with every third block marked done; the done chunk's bytes.
    fn marked_store(path: &Path, s: &TaskSpec) -> Vec<u8> {
        let grid = BlockGrid::new(0, s);
        let mut t = TrackingStore::open(path, s, false).unwrap();
        for i in (0..grid.num_blocks()).step_by(3) {
            t.mark_done(&grid.block(i));
        }
        t.flush().unwrap();
        drop(t);
        fs::read(path.join("done/c/0/0/0")).unwrap()
    }

    #[test]
    fn a_purged_group_metadata_is_refused_and_no_mark_is_lost() {
        let path = tmp("purged-group");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        let before = marked_store(&path, &s);
        fs::remove_file(path.join("zarr.json")).unwrap();
        let e = TrackingStore::open(&path, &s, false).unwrap_err();
        assert!(matches!(e, DaisyError::StoreDamaged(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("zarr.json is missing"), "{text}");
        assert!(text.contains("adopt_tracking_store"), "{text}");
        assert_eq!(fs::read(path.join("done/c/0/0/0")).unwrap(), before);
        // the history alone is enough to know the store held marks
        let path2 = tmp("purged-group-history");
        drop(TrackingStore::open(&path2, &s, false).unwrap());
        append_runs_line(&path2.join(RUNS_FILE), r#"{"task_id":"t"}"#).unwrap();
        fs::remove_file(path2.join("zarr.json")).unwrap();
        let e = TrackingStore::open(&path2, &s, false).unwrap_err();
        assert!(e.to_string().contains("records earlier runs"), "{e}");
        // adopting writes the metadata again and keeps every mark
        TrackingStore::adopt(&path, &s).unwrap();
        let t = TrackingStore::open(&path, &s, false).unwrap();
        let grid = BlockGrid::new(0, &s);
        for i in 0..grid.num_blocks() {
            assert_eq!(t.is_marked_done(&grid.block(i)), i % 3 == 0, "block {i}");
        }
        drop(t);
        fs::remove_dir_all(&path).unwrap();
        fs::remove_dir_all(&path2).unwrap();
    }

    #[test]
    fn a_purged_array_metadata_is_refused_and_no_mark_is_lost() {
        let path = tmp("purged-array");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        let before = marked_store(&path, &s);
        fs::remove_file(path.join("done/zarr.json")).unwrap();
        let e = TrackingStore::open(&path, &s, false).unwrap_err();
        assert!(e.to_string().contains("done/zarr.json is missing"), "{e}");
        assert_eq!(fs::read(path.join("done/c/0/0/0")).unwrap(), before);
        // a chunk of failure counts gone beside its metadata: refused too
        fs::remove_file(path.join("failures/c/0/0/0")).unwrap();
        TrackingStore::adopt(&path, &s).unwrap();
        let e = TrackingStore::open(&path, &s, false).unwrap_err();
        assert!(e.to_string().contains("failures/c/0/0/0 is missing"), "{e}");
        fs::remove_dir_all(&path).unwrap();
        // adopting with another layout of another size is refused
        let path = tmp("purged-array-other");
        marked_store(&path, &s);
        fs::remove_file(path.join("zarr.json")).unwrap();
        fs::remove_file(path.join("done/zarr.json")).unwrap();
        let bigger = spec(roi(&[0, 0, 0], &[40, 20, 24]), Fit::Valid);
        assert!(TrackingStore::adopt(&path, &bigger).is_err());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_purged_marks_directory_is_refused_when_the_history_shows_runs() {
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        let path = tmp("purged-dir-done");
        marked_store(&path, &s);
        append_runs_line(&path.join(RUNS_FILE), r#"{"task_id":"t"}"#).unwrap();
        fs::remove_dir_all(path.join("done")).unwrap();
        let e = TrackingStore::open(&path, &s, false).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, DaisyError::StoreDamaged(_)), "{e:?}");
        assert!(text.contains("done is missing"), "{text}");
        assert!(
            text.contains("records earlier runs") && text.contains("task.reset()"),
            "{text}"
        );
        assert!(!path.join("done").exists(), "a refused store was changed");
        fs::remove_dir_all(&path).unwrap();
        // lost failure counts are made again, the done marks kept
        let path = tmp("purged-dir-failures");
        let before = marked_store(&path, &s);
        fs::remove_dir_all(path.join("failures")).unwrap();
        drop(TrackingStore::open(&path, &s, false).unwrap());
        assert_eq!(fs::read(path.join("done/c/0/0/0")).unwrap(), before);
        fs::remove_dir_all(&path).unwrap();
        // without a history, nothing shows marks were lost: made again
        let path = tmp("purged-dir-fresh");
        drop(TrackingStore::open(&path, &s, false).unwrap());
        fs::remove_dir_all(path.join("done")).unwrap();
        assert!(TrackingStore::open(&path, &s, false).is_ok());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_store_of_another_task_is_refused_until_adopted() {
        let path = tmp("other-task");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        marked_store(&path, &s);
        let mut other = s.clone();
        other.task_id = "u".into();
        let e = TrackingStore::open(&path, &other, false).unwrap_err();
        assert!(matches!(e, DaisyError::StoreOfAnotherTask { .. }), "{e:?}");
        assert!(e.to_string().contains("belongs to task \"t\""), "{e}");
        TrackingStore::adopt(&path, &other).unwrap();
        assert!(TrackingStore::open(&path, &other, false).is_ok());
        assert!(TrackingStore::open(&path, &s, false).is_err());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_store_without_a_task_id_is_claimed_by_its_next_run() {
        let path = tmp("no-task-id");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        marked_store(&path, &s);
        // what an older daisy wrote: no daisy_task_id
        let meta = path.join("zarr.json");
        let mut v: Value = serde_json::from_str(&fs::read_to_string(&meta).unwrap()).unwrap();
        v["attributes"]
            .as_object_mut()
            .unwrap()
            .remove(TASK_ID_ATTR);
        fs::write(&meta, v.to_string()).unwrap();
        drop(TrackingStore::open(&path, &s, false).unwrap());
        let v: Value = serde_json::from_str(&fs::read_to_string(&meta).unwrap()).unwrap();
        assert_eq!(v["attributes"][TASK_ID_ATTR], "t");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_migration_cut_short_at_any_step_leaves_the_old_store_or_the_new() {
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        let grown = spec(roi(&[-8, 0, 0], &[36, 20, 24]), Fit::Valid);
        let old_grid = BlockGrid::new(0, &s);
        let new_grid = BlockGrid::new(0, &grown);
        let done_old: Vec<u64> = (0..old_grid.num_blocks()).step_by(3).collect();
        // the blocks of the grown grid that are the old done blocks
        let expected_new: Vec<bool> = (0..new_grid.num_blocks())
            .map(|i| {
                let b = new_grid.block(i);
                done_old
                    .iter()
                    .any(|&j| old_grid.block(j).write_roi == b.write_roi)
            })
            .collect();
        assert!(expected_new.iter().any(|&d| d));
        for point in [
            "migration-staging",
            "migration-staged",
            "migration-committed",
            "migration-swapping",
            "migration-swapped",
        ] {
            let path = tmp(point);
            marked_store(&path, &s);
            crate::fault::arm(point);
            let e = TrackingStore::open(&path, &grown, false).unwrap_err();
            assert!(e.to_string().contains("fault injected"), "{point}: {e}");
            crate::fault::arm("none");
            let committed = !matches!(point, "migration-staging" | "migration-staged");
            // a reader of the old layout sees the old store intact until the
            // committed migration is finished by the next owner
            if !committed {
                let t = TrackingStore::open(&path, &s, false).unwrap();
                for i in 0..old_grid.num_blocks() {
                    assert_eq!(t.is_marked_done(&old_grid.block(i)), i % 3 == 0);
                }
                drop(t);
            }
            // the next run of the grown task ends up with the grown store,
            // every old mark in its new place and nothing else marked
            let t = TrackingStore::open(&path, &grown, false).unwrap();
            for (i, &want) in expected_new.iter().enumerate() {
                assert_eq!(
                    t.is_marked_done(&new_grid.block(i as u64)),
                    want,
                    "{point}: block {i}"
                );
            }
            drop(t);
            assert!(!path.join(arrays::STAGING).exists(), "{point}");
            fs::remove_dir_all(&path).unwrap();
        }
    }

    #[test]
    fn a_reset_cut_short_leaves_a_store_made_afresh() {
        let path = tmp("reset-cut");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 24]), Fit::Valid);
        marked_store(&path, &s);
        append_runs_line(&path.join(RUNS_FILE), r#"{"task_id":"t"}"#).unwrap();
        // what a reset killed after its first steps leaves
        fs::write(path.join(RESET_MARKER), b"").unwrap();
        fs::remove_file(path.join("zarr.json")).unwrap();
        let t = TrackingStore::open(&path, &s, false).unwrap();
        assert!(!t.is_marked_done(&BlockGrid::new(0, &s).block(0)));
        drop(t);
        assert!(!path.join(RESET_MARKER).exists());
        fs::remove_dir_all(&path).unwrap();
    }
}
