//! The per-task tracking store: which blocks are done and how often each
//! failed, persisted as a Zarr v3 group of memory-mapped arrays.
//! [`TaskTracking`] owns it; DONE_MARKERS.md describes it for users.
//!
//! ## Layout
//! ```text
//! <store>/zarr.json            group metadata: daisy_task_hash, daisy_layout
//! <store>/done/zarr.json       uint8, one element per block
//! <store>/done/c/0/../0        the single chunk: raw little-endian elements
//! <store>/failures/...         uint32, likewise
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
//! the kernel has (only a power cut can lose unflushed pages; [`TaskTracking::flush`]
//! runs at the end of every run). A migration writes the new arrays next to
//! the old ones and renames them into place before the group metadata is
//! rewritten, so an interrupted migration leaves the old store intact.

use crate::block::Block;
use crate::block_grid::BlockGrid;
use crate::block_profile::BlockStats;
use crate::error::DaisyError;
use crate::geometry::{Coord, GridIndexer, Roi};
use crate::task_spec::{Fit, TaskSpec};
use memmap2::MmapMut;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use zarrs_metadata::v3::{ArrayMetadataV3, GroupMetadataV3, MetadataV3, NodeMetadataV3};

/// Version of the layout description; part of the hash's domain.
const LAYOUT_VERSION: u64 = 2;

/// An element type of a tracking array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// `uint8`
    U8,
    /// `uint32`
    U32,
    /// `uint64`
    U64,
    /// `float32`
    F32,
    /// `float64`
    F64,
}

impl ElementType {
    fn size(self) -> usize {
        match self {
            ElementType::U8 => 1,
            ElementType::U32 | ElementType::F32 => 4,
            ElementType::U64 | ElementType::F64 => 8,
        }
    }

    fn zarr_name(self) -> &'static str {
        match self {
            ElementType::U8 => "uint8",
            ElementType::U32 => "uint32",
            ElementType::U64 => "uint64",
            ElementType::F32 => "float32",
            ElementType::F64 => "float64",
        }
    }
}

/// What one tracking array holds.
#[derive(Clone, Copy, Debug)]
pub struct ArrayKind {
    /// Directory name inside the group.
    pub name: &'static str,
    /// Element type.
    pub dtype: ElementType,
    /// Value of cells never written, as little-endian bytes.
    pub fill: [u8; 8],
}

/// `done`: 1 once the block completed.
pub const DONE: ArrayKind = ArrayKind {
    name: "done",
    dtype: ElementType::U8,
    fill: [0; 8],
};

/// `failures`: failed attempts of the block.
pub const FAILURES: ArrayKind = ArrayKind {
    name: "failures",
    dtype: ElementType::U32,
    fill: [0; 8],
};

const NAN32: [u8; 8] = {
    let b = f32::NAN.to_le_bytes();
    [b[0], b[1], b[2], b[3], 0, 0, 0, 0]
};
const NAN64: [u8; 8] = f64::NAN.to_le_bytes();

const fn stat(name: &'static str, dtype: ElementType, fill: [u8; 8]) -> ArrayKind {
    ArrayKind { name, dtype, fill }
}

/// The arrays added by resource tracking, in the order [`TaskTracking`]
/// keeps them. Cells of blocks that never executed hold the fill value
/// (NaN for measurements and times, 2^32-1 for "no worker").
pub const STATS: [ArrayKind; 10] = [
    stat("wall_seconds", ElementType::F32, NAN32),
    stat("cpu_seconds", ElementType::F32, NAN32),
    stat("peak_rss_bytes", ElementType::U64, [0; 8]),
    stat("io_read_bytes", ElementType::U64, [0; 8]),
    stat("io_write_bytes", ElementType::U64, [0; 8]),
    stat("gpu_util_pct", ElementType::F32, NAN32),
    stat("gpu_mem_bytes", ElementType::U64, [0; 8]),
    stat(
        "worker_id",
        ElementType::U32,
        [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0],
    ),
    stat("sent_at", ElementType::F64, NAN64),
    stat("returned_at", ElementType::F64, NAN64),
];

/// What the store holds for one block.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackingRecord {
    /// Marked done.
    pub done: bool,
    /// Failed attempts.
    pub failures: u32,
    /// Its measurement, if it executed with resource tracking.
    pub stats: Option<BlockStats>,
    /// The worker that completed it (None: unmanaged client or serial).
    pub worker_id: Option<u32>,
    /// Dispatch time, seconds since the UNIX epoch.
    pub sent_at: Option<f64>,
    /// Return time, seconds since the UNIX epoch.
    pub returned_at: Option<f64>,
}

struct MappedArray {
    kind: ArrayKind,
    map: Option<MmapMut>,
}

impl MappedArray {
    fn bytes_mut(&mut self, index: u64) -> Option<&mut [u8]> {
        let size = self.kind.dtype.size();
        let start = index as usize * size;
        self.map.as_mut()?.get_mut(start..start + size)
    }

    fn bytes(&self, index: u64) -> Option<&[u8]> {
        let size = self.kind.dtype.size();
        let start = index as usize * size;
        self.map.as_ref()?.get(start..start + size)
    }

    fn put(&mut self, index: u64, value: &[u8]) {
        if let Some(b) = self.bytes_mut(index) {
            b.copy_from_slice(&value[..b.len()]);
        }
    }

    fn get8(&self, index: u64) -> Option<[u8; 8]> {
        let b = self.bytes(index)?;
        let mut out = [0u8; 8];
        out[..b.len()].copy_from_slice(b);
        Some(out)
    }
}

/// The structural parameters of a task's block grid, as stored in
/// `daisy_layout`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Layout {
    total: Roi,
    read: Roi,
    write: Roi,
    fit: Fit,
}

impl Layout {
    fn of(spec: &TaskSpec) -> Self {
        Self {
            total: spec.total_roi,
            read: spec.read_roi,
            write: spec.write_roi,
            fit: spec.fit,
        }
    }

    fn to_json(&self) -> Value {
        let c = |c: Coord| json!(c.as_slice());
        json!({
            "version": LAYOUT_VERSION,
            "total_offset": c(self.total.offset()),
            "total_shape": c(self.total.shape()),
            "read_offset": c(self.read.offset()),
            "read_shape": c(self.read.shape()),
            "write_offset": c(self.write.offset()),
            "write_shape": c(self.write.shape()),
            "fit": self.fit.as_str(),
        })
    }

    fn from_json(v: &Value) -> Option<Self> {
        if v.get("version")?.as_u64()? != LAYOUT_VERSION {
            return None;
        }
        let coord = |key: &str| -> Option<Coord> {
            let items: Option<Vec<i64>> =
                v.get(key)?.as_array()?.iter().map(Value::as_i64).collect();
            Coord::new(&items?).ok()
        };
        let roi = |o: &str, s: &str| Roi::new(coord(o)?, coord(s)?).ok();
        Some(Self {
            total: roi("total_offset", "total_shape")?,
            read: roi("read_offset", "read_shape")?,
            write: roi("write_offset", "write_shape")?,
            fit: v.get("fit")?.as_str()?.parse().ok()?,
        })
    }

    /// SHA-256 over the canonical text of the layout.
    fn hash(&self) -> String {
        let text = format!(
            "daisy-tracking-v{LAYOUT_VERSION}\ntotal {} {}\nread {} {}\nwrite {} {}\nfit {}\n",
            self.total.offset(),
            self.total.shape(),
            self.read.offset(),
            self.read.shape(),
            self.write.offset(),
            self.write.shape(),
            self.fit
        );
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The tracking store of one task, open for reading and writing.
pub struct TaskTracking {
    path: PathBuf,
    /// Cells of the array grid (anchored at `total_roi`).
    cells: GridIndexer,
    /// Array-grid position of placement-grid position 0.
    anchor_shift: Coord,
    done: MappedArray,
    failures: MappedArray,
    /// The [`STATS`] arrays, when resource tracking is on.
    stats: Vec<MappedArray>,
}

fn io_err(path: &Path, e: std::io::Error) -> DaisyError {
    DaisyError::Io(format!("{}: {e}", path.display()))
}

fn mismatch(path: &Path, expected: &str, found: &str, reason: &str) -> DaisyError {
    DaisyError::LayoutMismatch {
        store: path.display().to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
        reason: reason.to_string(),
    }
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

fn chunk_path(dir: &Path, dims: usize) -> PathBuf {
    let mut p = dir.join("c");
    for _ in 0..dims {
        p = p.join("0");
    }
    p
}

fn array_metadata(kind: &ArrayKind, shape: &Coord) -> Result<String, DaisyError> {
    let shape_u: Vec<u64> = shape.as_slice().iter().map(|&s| s.max(0) as u64).collect();
    let chunk: Vec<u64> = shape_u.iter().map(|&s| s.max(1)).collect();
    let grid = MetadataV3::new_with_serializable_configuration(
        "regular".to_string(),
        &json!({ "chunk_shape": chunk }),
    )
    .map_err(|e| DaisyError::Io(e.to_string()))?;
    let codec = MetadataV3::new_with_serializable_configuration(
        "bytes".to_string(),
        &json!({ "endian": "little" }),
    )
    .map_err(|e| DaisyError::Io(e.to_string()))?;
    let fill = match kind.dtype {
        ElementType::F32 | ElementType::F64 => {
            let v = if kind.dtype == ElementType::F32 {
                f32::from_le_bytes(kind.fill[..4].try_into().unwrap_or_default()) as f64
            } else {
                f64::from_le_bytes(kind.fill)
            };
            if v.is_nan() {
                zarrs_metadata::v3::FillValueMetadataV3::from("NaN")
            } else {
                zarrs_metadata::v3::FillValueMetadataV3::from(v)
            }
        }
        _ => zarrs_metadata::v3::FillValueMetadataV3::from(u64::from_le_bytes(kind.fill)),
    };
    let meta = ArrayMetadataV3::new(
        shape_u,
        grid,
        MetadataV3::new(kind.dtype.zarr_name()),
        fill,
        vec![codec],
    );
    serde_json::to_string_pretty(&meta).map_err(|e| DaisyError::Io(e.to_string()))
}

/// Write `bytes` to `path` atomically (temporary file, then rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DaisyError> {
    let tmp = path.with_extension("daisy-tmp");
    fs::write(&tmp, bytes).map_err(|e| io_err(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

/// Create (or replace) one array: metadata and a chunk of `contents`.
fn write_array(
    store: &Path,
    kind: &ArrayKind,
    shape: &Coord,
    contents: &[u8],
) -> Result<(), DaisyError> {
    let dir = store.join(kind.name);
    let chunk = chunk_path(&dir, shape.dims());
    if let Some(parent) = chunk.parent() {
        fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    if !contents.is_empty() {
        write_atomic(&chunk, contents)?;
    }
    write_atomic(
        &dir.join("zarr.json"),
        array_metadata(kind, shape)?.as_bytes(),
    )
}

fn filled(kind: &ArrayKind, n: u64) -> Vec<u8> {
    let size = kind.dtype.size();
    let mut v = Vec::with_capacity(n as usize * size);
    for _ in 0..n {
        v.extend_from_slice(&kind.fill[..size]);
    }
    v
}

fn map_array(store: &Path, kind: ArrayKind, shape: &Coord) -> Result<MappedArray, DaisyError> {
    let n = shape.product();
    if n == 0 {
        return Ok(MappedArray { kind, map: None });
    }
    let dir = store.join(kind.name);
    let chunk = chunk_path(&dir, shape.dims());
    if !dir.join("zarr.json").is_file() || !chunk.is_file() {
        write_array(store, &kind, shape, &filled(&kind, n))?;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&chunk)
        .map_err(|e| io_err(&chunk, e))?;
    let expected = n * kind.dtype.size() as u64;
    let len = file.metadata().map_err(|e| io_err(&chunk, e))?.len();
    if len != expected {
        return Err(DaisyError::Io(format!(
            "{}: chunk holds {len} bytes, expected {expected}; the store is damaged: delete it \
             (rm -rf {}) to start fresh",
            chunk.display(),
            store.display()
        )));
    }
    // SAFETY: the file is daisy's own chunk, opened read-write; only this
    // process maps it for writing (one server per run), and every access
    // goes through bounds-checked slices of the mapping.
    let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| io_err(&chunk, e))?;
    Ok(MappedArray {
        kind,
        map: Some(map),
    })
}

fn read_group(store: &Path) -> Result<Option<Value>, DaisyError> {
    let meta_path = store.join("zarr.json");
    if !store.exists() {
        return Ok(None);
    }
    if !meta_path.is_file() {
        let empty = fs::read_dir(store)
            .map_err(|e| io_err(store, e))?
            .next()
            .is_none();
        if empty {
            return Ok(None);
        }
        return Err(mismatch(
            store,
            "",
            "(none)",
            "the directory exists but is not a daisy tracking store (no zarr.json)",
        ));
    }
    let text = fs::read_to_string(&meta_path).map_err(|e| io_err(&meta_path, e))?;
    let node: NodeMetadataV3 = serde_json::from_str(&text).map_err(|_| {
        mismatch(
            store,
            "",
            "(unreadable)",
            "its zarr.json is not Zarr v3 metadata (an older daisy wrote a different layout)",
        )
    })?;
    match node {
        NodeMetadataV3::Array(_) => Err(mismatch(
            store,
            "",
            "(array)",
            "it is a bare Zarr array written by an older daisy, not a tracking group",
        )),
        NodeMetadataV3::Group(g) => Ok(Some(Value::Object(g.attributes))),
    }
}

impl std::fmt::Debug for TaskTracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskTracking")
            .field("path", &self.path)
            .field("shape", &self.cells.shape())
            .finish()
    }
}

impl TaskTracking {
    /// Open the store at `path` for `spec`, creating it if it does not
    /// exist and migrating it if the task's total ROI grew. With
    /// `with_stats`, the resource-tracking arrays are opened (and created
    /// where missing).
    pub fn open(path: &Path, spec: &TaskSpec, with_stats: bool) -> Result<Self, DaisyError> {
        let layout = Layout::of(spec);
        let hash = layout.hash();
        let (shape, shift) = array_grid(spec);
        match read_group(path)? {
            None => {
                fs::create_dir_all(path).map_err(|e| io_err(path, e))?;
                for kind in [DONE, FAILURES] {
                    write_array(path, &kind, &shape, &filled(&kind, shape.product()))?;
                }
                write_group(path, &layout)?;
            }
            Some(attrs) => {
                let found = attrs
                    .get("daisy_task_hash")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)")
                    .to_string();
                if found != hash {
                    let old = attrs.get("daisy_layout").and_then(Layout::from_json);
                    match old {
                        Some(old) if old.hash() == found => {
                            migrate(path, &old, &layout, &hash, &found)?;
                        }
                        _ => {
                            return Err(mismatch(
                                path,
                                &hash,
                                &found,
                                "it was written for a different block layout (or by another \
                                 program)",
                            ));
                        }
                    }
                }
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            cells: GridIndexer::new(shape),
            anchor_shift: shift,
            done: map_array(path, DONE, &shape)?,
            failures: map_array(path, FAILURES, &shape)?,
            stats: if with_stats {
                STATS
                    .iter()
                    .map(|k| map_array(path, *k, &shape))
                    .collect::<Result<_, _>>()?
            } else {
                Vec::new()
            },
        })
    }

    /// Whether the resource-tracking arrays are open.
    pub fn has_stats(&self) -> bool {
        !self.stats.is_empty()
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
        if self.stats.is_empty() {
            return;
        }
        let cell = self.cell(block);
        let values: [Vec<u8>; 10] = [
            (stats.wall_seconds as f32).to_le_bytes().to_vec(),
            (stats.cpu_seconds as f32).to_le_bytes().to_vec(),
            stats.peak_rss_bytes.to_le_bytes().to_vec(),
            stats.io_read_bytes.to_le_bytes().to_vec(),
            stats.io_write_bytes.to_le_bytes().to_vec(),
            stats.gpu_util_pct.to_le_bytes().to_vec(),
            stats.gpu_mem_bytes.to_le_bytes().to_vec(),
            worker_id.unwrap_or(u32::MAX).to_le_bytes().to_vec(),
            sent_at.to_le_bytes().to_vec(),
            returned_at.to_le_bytes().to_vec(),
        ];
        for (array, value) in self.stats.iter_mut().zip(values.iter()) {
            array.put(cell, value);
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
                self.done.bytes(i).is_some_and(|b| b[0] != 0)
                    || self
                        .failures
                        .bytes(i)
                        .is_some_and(|b| b.iter().any(|&x| x != 0))
            })
            .map(|i| self.cells.unflat(i))
            .collect()
    }

    /// True if a store (a daisy tracking group) exists at `path`.
    pub fn exists(path: &Path) -> bool {
        path.join("zarr.json").is_file()
    }

    /// True if the store at `path` has the resource-tracking arrays.
    pub fn has_stats_on_disk(path: &Path) -> bool {
        path.join(STATS[0].name).join("zarr.json").is_file()
    }

    fn record_at_index(&self, cell: u64) -> TrackingRecord {
        let f32_at = |i: usize| {
            self.stats[i]
                .get8(cell)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let u64_at = |i: usize| self.stats[i].get8(cell).map(u64::from_le_bytes);
        let f64_at = |i: usize| self.stats[i].get8(cell).map(f64::from_le_bytes);
        let (mut stats, mut worker_id, mut sent_at, mut returned_at) = (None, None, None, None);
        if !self.stats.is_empty()
            && let Some(wall) = f32_at(0).filter(|w| !w.is_nan())
        {
            stats = Some(BlockStats {
                wall_seconds: wall as f64,
                cpu_seconds: f32_at(1).unwrap_or(0.0) as f64,
                peak_rss_bytes: u64_at(2).unwrap_or(0),
                io_read_bytes: u64_at(3).unwrap_or(0),
                io_write_bytes: u64_at(4).unwrap_or(0),
                gpu_util_pct: f32_at(5).unwrap_or(f32::NAN),
                gpu_mem_bytes: u64_at(6).unwrap_or(0),
            });
            worker_id = self.stats[7]
                .get8(cell)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .filter(|&w| w != u32::MAX);
            sent_at = f64_at(8).filter(|t| !t.is_nan());
            returned_at = f64_at(9).filter(|t| !t.is_nan());
        }
        TrackingRecord {
            done: self.done.bytes(cell).is_some_and(|b| b[0] != 0),
            failures: self
                .failures
                .bytes(cell)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            stats,
            worker_id,
            sent_at,
            returned_at,
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

    /// True if the block is marked done. One memory read.
    #[inline]
    pub fn is_done(&self, block: &Block) -> bool {
        self.done.bytes(self.cell(block)).is_some_and(|b| b[0] != 0)
    }

    /// Mark a block done.
    #[inline]
    pub fn mark_done(&mut self, block: &Block) {
        let cell = self.cell(block);
        if let Some(b) = self.done.bytes_mut(cell) {
            b[0] = 1;
        }
    }

    /// Count a failed attempt of a block.
    #[inline]
    pub fn add_failure(&mut self, block: &Block) {
        let cell = self.cell(block);
        if let Some(b) = self.failures.bytes_mut(cell) {
            let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]).saturating_add(1);
            b.copy_from_slice(&n.to_le_bytes());
        }
    }

    /// Failed attempts recorded for a block.
    pub fn failures(&self, block: &Block) -> u32 {
        self.failures
            .bytes(self.cell(block))
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Number of blocks marked done.
    pub fn count_done(&self) -> u64 {
        self.done
            .map
            .as_ref()
            .map_or(0, |m| m.iter().filter(|&&b| b != 0).count() as u64)
    }

    /// Write dirty pages to disk.
    pub fn flush(&self) -> Result<(), DaisyError> {
        for a in [&self.done, &self.failures]
            .into_iter()
            .chain(self.stats.iter())
        {
            if let Some(m) = &a.map {
                m.flush().map_err(|e| io_err(&self.path, e))?;
            }
        }
        Ok(())
    }

    /// Delete a task's store (only the store: its directory must be a
    /// tracking group). Nothing to delete is not an error.
    pub fn reset(path: &Path) -> Result<(), DaisyError> {
        match read_group(path) {
            Ok(None) => Ok(()),
            Ok(Some(attrs)) if attrs.get("daisy_task_hash").is_some() => {
                fs::remove_dir_all(path).map_err(|e| io_err(path, e))
            }
            Ok(Some(_)) | Err(_) => Err(DaisyError::Io(format!(
                "{}: not a daisy tracking store; not deleting it",
                path.display()
            ))),
        }
    }
}

fn write_group(path: &Path, layout: &Layout) -> Result<(), DaisyError> {
    let mut attrs = serde_json::Map::new();
    attrs.insert("daisy_task_hash".into(), Value::String(layout.hash()));
    attrs.insert("daisy_layout".into(), layout.to_json());
    let meta = GroupMetadataV3::new().with_attributes(attrs);
    let text = serde_json::to_string_pretty(&meta).map_err(|e| DaisyError::Io(e.to_string()))?;
    write_atomic(&path.join("zarr.json"), text.as_bytes())
}

/// The per-axis shift (in blocks) from an old grid to a new one when the
/// new layout only grew the total ROI; None otherwise.
fn growth_shift(old: &Layout, new: &Layout) -> Option<Coord> {
    let same_block = old.write.shape() == new.write.shape()
        && old.read.shape() == new.read.shape()
        && old.read.offset().sub(&old.write.offset()) == new.read.offset().sub(&new.write.offset())
        && old.fit == new.fit
        && old.total.dims() == new.total.dims();
    if !same_block || !new.total.contains_roi(&old.total) {
        return None;
    }
    let stride = new.write.shape();
    let delta = old.total.offset().sub(&new.total.offset());
    (0..delta.dims())
        .all(|d| delta[d] % stride[d] == 0)
        .then(|| delta.div_floor(&stride))
}

fn migrate(
    path: &Path,
    old: &Layout,
    new: &Layout,
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
    let kinds = [DONE, FAILURES]
        .into_iter()
        .chain(STATS)
        .filter(|k| path.join(k.name).join("zarr.json").is_file());
    for kind in kinds {
        let size = kind.dtype.size();
        let mut out = filled(&kind, new_shape.product());
        if old_shape.product() > 0 {
            let chunk = chunk_path(&path.join(kind.name), old_shape.dims());
            let bytes = fs::read(&chunk).map_err(|e| io_err(&chunk, e))?;
            for i in 0..old_cells.len() {
                let pos = old_cells.unflat(i);
                let start = i as usize * size;
                let Some(src) = bytes.get(start..start + size) else {
                    break;
                };
                let mut value = src.to_vec();
                if kind.name == DONE.name {
                    let placement = pos.sub(&old_anchor);
                    let cut = old_grid.indexer().contains(&placement)
                        && (0..placement.dims()).any(|d| {
                            old_grid.block_at(placement).requested_write_roi.end()[d]
                                > old_write_end[d]
                        });
                    if cut {
                        value = kind.fill[..size].to_vec();
                    }
                }
                let new_pos = pos.add(&shift);
                if new_cells.contains(&new_pos) {
                    let dst = new_cells.flat(&new_pos) as usize * size;
                    out[dst..dst + size].copy_from_slice(&value);
                }
            }
        }
        write_array(path, &kind, &new_shape, &out)?;
    }
    write_group(path, new)?;
    tracing::info!(
        "tracking store {} migrated to the grown total ROI {} (every done block kept)",
        path.display(),
        new.total
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_grid::BlockGrid;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
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
            let mut t = TaskTracking::open(&path, &s, false).unwrap();
            for i in (0..grid.num_blocks()).step_by(3) {
                t.mark_done(&grid.block(i));
            }
            t.add_failure(&grid.block(1));
            t.add_failure(&grid.block(1));
            t.flush().unwrap();
        }
        let t = TaskTracking::open(&path, &s, false).unwrap();
        for i in 0..grid.num_blocks() {
            assert_eq!(t.is_done(&grid.block(i)), i % 3 == 0);
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
        let st = BlockStats {
            wall_seconds: 0.5,
            cpu_seconds: 0.25,
            peak_rss_bytes: 1 << 30,
            io_read_bytes: 7,
            io_write_bytes: 9,
            gpu_util_pct: f32::NAN,
            gpu_mem_bytes: 0,
        };
        {
            let mut t = TaskTracking::open(&path, &s, true).unwrap();
            t.mark_done(&grid.block(0));
            t.record_stats(&grid.block(0), &st, Some(3), 100.0, 100.5);
        }
        let t = TaskTracking::open(&path, &s, true).unwrap();
        let r = t.record(&grid.block(0));
        assert!(r.done);
        let got = r.stats.unwrap();
        assert_eq!(got.peak_rss_bytes, 1 << 30);
        assert!((got.wall_seconds - 0.5).abs() < 1e-6);
        assert!(got.gpu_util_pct.is_nan());
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
        TaskTracking::open(&path, &s, false).unwrap();
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
        let err = TaskTracking::open(&path, &other, false).err().unwrap();
        let text = err.to_string();
        assert!(text.contains(&Layout::of(&s).hash()), "{text}");
        assert!(text.contains(&Layout::of(&other).hash()), "{text}");
        assert!(text.contains("rm -rf"), "{text}");
        // shrinking is refused too
        let smaller = spec(roi(&[0, 0, 0], &[16, 20, 20]), Fit::Valid);
        assert!(TaskTracking::open(&path, &smaller, false).is_err());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_bare_array_or_foreign_directory_is_refused() {
        let path = tmp("foreign");
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("notes.txt"), "hello").unwrap();
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        assert!(matches!(
            TaskTracking::open(&path, &s, false),
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
        let err = TaskTracking::open(&path, &s, false).err().unwrap();
        assert!(err.to_string().contains("bare Zarr array"), "{err}");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_grown_volume_keeps_every_done_block() {
        let path = tmp("grow");
        let small = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        let old_grid = BlockGrid::new(0, &small);
        let done_offsets: Vec<Coord> = {
            let mut t = TaskTracking::open(&path, &small, true).unwrap();
            (0..old_grid.num_blocks())
                .filter(|i| i % 2 == 0)
                .map(|i| {
                    let b = old_grid.block(i);
                    t.mark_done(&b);
                    b.write_roi.offset()
                })
                .collect()
        };
        // grown along two axes, one of them towards negative coordinates
        let big = spec(roi(&[0, -8, 0], &[20, 36, 32]), Fit::Valid);
        let t = TaskTracking::open(&path, &big, true).unwrap();
        let new_grid = BlockGrid::new(0, &big);
        let mut kept = 0;
        for i in 0..new_grid.num_blocks() {
            let b = new_grid.block(i);
            let was_done = done_offsets.contains(&b.write_roi.offset());
            assert_eq!(t.is_done(&b), was_done, "block at {}", b.write_roi.offset());
            kept += was_done as usize;
        }
        assert_eq!(kept, done_offsets.len());
        // reopening with the grown layout is a plain open now
        drop(t);
        TaskTracking::open(&path, &big, true).unwrap();
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn growth_drops_blocks_the_old_border_cut() {
        let path = tmp("grow-shrink");
        let small = spec(roi(&[0, 0, 0], &[18, 20, 20]), Fit::Shrink);
        let old_grid = BlockGrid::new(0, &small);
        {
            let mut t = TaskTracking::open(&path, &small, true).unwrap();
            for i in 0..old_grid.num_blocks() {
                t.mark_done(&old_grid.block(i));
            }
        }
        let big = spec(roi(&[0, 0, 0], &[30, 20, 20]), Fit::Shrink);
        let t = TaskTracking::open(&path, &big, true).unwrap();
        let new_grid = BlockGrid::new(0, &big);
        for i in 0..new_grid.num_blocks() {
            let b = new_grid.block(i);
            // old total write ROI along axis 0 was [2, 16): blocks starting
            // at 2, 6, 10 were whole, the one at 14 was cut to [14, 16)
            let whole_before = b.write_roi.offset()[0] < 14;
            assert_eq!(t.is_done(&b), whole_before, "{}", b.write_roi);
        }
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn reset_deletes_only_a_store() {
        let path = tmp("reset");
        let s = spec(roi(&[0, 0, 0], &[20, 20, 20]), Fit::Valid);
        TaskTracking::open(&path, &s, false).unwrap();
        TaskTracking::reset(&path).unwrap();
        assert!(!path.exists());
        TaskTracking::reset(&path).unwrap();
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("precious.txt"), "x").unwrap();
        assert!(TaskTracking::reset(&path).is_err());
        assert!(path.join("precious.txt").exists());
        fs::remove_dir_all(&path).unwrap();
    }
}
