//! What a tracking store holds, by name: its arrays (the done marks, the
//! failure counts and, with resource tracking, ten figures per block) and
//! the files daisy keeps beside them. `StatsArrays` reads and writes the
//! resource-tracking arrays of an open store; the rest of the store is
//! `super`'s.

use super::zarr_array::{ArrayKind, ElementType, MappedArray, map_array};
use crate::block_profile::BlockStats;
use crate::error::DaisyError;
use crate::geometry::Coord;
use std::path::Path;

/// Name of a task's run history file: one report line per run (and one
/// record per `reset` that kept it), in its store or its log directory.
pub const RUNS_FILE: &str = "runs.jsonl";

/// Left in a store by `reset` from its first step to its last: the
/// leftovers beside it are a reset's, with no mark to keep.
pub const RESET_MARKER: &str = ".daisy-reset";

/// The staging directory of a migration in progress (inside the store;
/// no Zarr reader lists it before it is committed, and it is gone after).
pub const STAGING: &str = ".daisy-migration";

/// Whether `name` is one of the entries daisy keeps in a store (its
/// arrays, run history, lock, reset marker and migration staging, and a
/// temporary file of its own about to be renamed into place: the group's
/// `zarr.daisy-tmp` is there for a moment while another driver makes the
/// store): what a directory holding only these is (a store, or the
/// leftovers of one, or one being made), and what is no other store's
/// inside it.
pub fn is_own_entry(name: &std::ffi::OsStr) -> bool {
    let temporary = std::path::Path::new(name)
        .extension()
        .is_some_and(|e| e == super::zarr_array::TEMP_EXTENSION);
    temporary
        || name == super::lock::LOCK_FILE
        || name == RUNS_FILE
        || name == RESET_MARKER
        || name == STAGING
        || [DONE, FAILURES]
            .iter()
            .chain(STATS.iter())
            .any(|k| name == k.name)
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

/// Earlier runs a block's wall time and dispatch time are kept for beside
/// its latest: with the latest, the last four runs that did the block, so
/// `daisy compare` can set a partial rerun against the runs before it on
/// the blocks both did (issue 54). Three cost 36 bytes a block.
pub const EARLIER_RUNS: usize = 3;

/// The arrays added by resource tracking, in the order of
/// `StatsArrays::open`. Cells of blocks that never executed hold the fill
/// value (NaN for measurements and times, 2^32-1 for "no worker"). The
/// last six are the block's wall and dispatch times in the runs before its
/// latest (`_1` the one before, see [`EARLIER_RUNS`]): a store made before
/// them gets them, empty, when a run with resource tracking opens it.
pub const STATS: [ArrayKind; 17] = [
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
    stat("run_queue_seconds", ElementType::F32, NAN32),
    stat("wall_seconds_1", ElementType::F32, NAN32),
    stat("wall_seconds_2", ElementType::F32, NAN32),
    stat("wall_seconds_3", ElementType::F32, NAN32),
    stat("sent_at_1", ElementType::F64, NAN64),
    stat("sent_at_2", ElementType::F64, NAN64),
    stat("sent_at_3", ElementType::F64, NAN64),
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

impl TrackingRecord {
    /// Seconds the block kept a worker slot busy: dispatch to return, at
    /// least its own wall time; its wall where the stamps are missing.
    /// None when it was not measured. What the forecast and the ETA
    /// count a measured block as.
    pub fn busy_seconds(&self) -> Option<f64> {
        let wall = self.stats.as_ref()?.wall_seconds;
        Some(match (self.sent_at, self.returned_at) {
            (Some(s), Some(r)) if r > s => (r - s).max(wall),
            _ => wall,
        })
    }
}

/// "No worker" in the `worker_id` array (serial runs, unmanaged clients).
const NO_WORKER: u32 = u32::MAX;

/// The resource-tracking arrays, one named field per figure.
pub(super) struct StatsArrays {
    wall_seconds: MappedArray,
    cpu_seconds: MappedArray,
    peak_rss_bytes: MappedArray,
    io_read_bytes: MappedArray,
    io_write_bytes: MappedArray,
    gpu_util_pct: MappedArray,
    gpu_mem_bytes: MappedArray,
    worker_id: MappedArray,
    sent_at: MappedArray,
    returned_at: MappedArray,
    run_queue_seconds: MappedArray,
    /// The block's wall and dispatch times in earlier runs, latest first.
    earlier_wall: [MappedArray; EARLIER_RUNS],
    earlier_sent: [MappedArray; EARLIER_RUNS],
}

impl StatsArrays {
    /// Open (creating where missing) the [`STATS`] arrays of a store.
    pub(super) fn open(store: &Path, shape: &Coord) -> Result<Self, DaisyError> {
        let [
            w,
            c,
            rss,
            ior,
            iow,
            gu,
            gm,
            wid,
            sent,
            ret,
            rq,
            w1,
            w2,
            w3,
            s1,
            s2,
            s3,
        ] = STATS.map(|k| map_array(store, k, shape));
        Ok(Self {
            wall_seconds: w?,
            cpu_seconds: c?,
            peak_rss_bytes: rss?,
            io_read_bytes: ior?,
            io_write_bytes: iow?,
            gpu_util_pct: gu?,
            gpu_mem_bytes: gm?,
            worker_id: wid?,
            sent_at: sent?,
            returned_at: ret?,
            run_queue_seconds: rq?,
            earlier_wall: [w1?, w2?, w3?],
            earlier_sent: [s1?, s2?, s3?],
        })
    }

    pub(super) fn all(&self) -> [&MappedArray; 17] {
        [
            &self.wall_seconds,
            &self.cpu_seconds,
            &self.peak_rss_bytes,
            &self.io_read_bytes,
            &self.io_write_bytes,
            &self.gpu_util_pct,
            &self.gpu_mem_bytes,
            &self.worker_id,
            &self.sent_at,
            &self.returned_at,
            &self.run_queue_seconds,
            &self.earlier_wall[0],
            &self.earlier_wall[1],
            &self.earlier_wall[2],
            &self.earlier_sent[0],
            &self.earlier_sent[1],
            &self.earlier_sent[2],
        ]
    }

    /// Write one block's figures: the latest wall and dispatch times move
    /// down the earlier runs' (the oldest is dropped), then seventeen
    /// stores into the mappings, no allocation.
    pub(super) fn record(
        &mut self,
        cell: u64,
        stats: &BlockStats,
        worker: Option<u32>,
        sent: f64,
        ret: f64,
    ) {
        if let Some(latest) = self.wall_seconds.get::<f32>(cell).filter(|w| !w.is_nan()) {
            for k in (1..EARLIER_RUNS).rev() {
                let w = self.earlier_wall[k - 1]
                    .get::<f32>(cell)
                    .unwrap_or(f32::NAN);
                let s = self.earlier_sent[k - 1]
                    .get::<f64>(cell)
                    .unwrap_or(f64::NAN);
                self.earlier_wall[k].set(cell, w);
                self.earlier_sent[k].set(cell, s);
            }
            let latest_sent = self.sent_at.get::<f64>(cell).unwrap_or(f64::NAN);
            self.earlier_wall[0].set(cell, latest);
            self.earlier_sent[0].set(cell, latest_sent);
        }
        self.wall_seconds.set(cell, stats.wall_seconds as f32);
        self.cpu_seconds.set(cell, stats.cpu_seconds as f32);
        self.peak_rss_bytes.set(cell, stats.peak_rss_bytes);
        self.io_read_bytes.set(cell, stats.io_read_bytes);
        self.io_write_bytes.set(cell, stats.io_write_bytes);
        self.gpu_util_pct.set(cell, stats.gpu_util_pct);
        self.gpu_mem_bytes.set(cell, stats.gpu_mem_bytes);
        self.worker_id.set(cell, worker.unwrap_or(NO_WORKER));
        self.sent_at.set(cell, sent);
        self.returned_at.set(cell, ret);
        self.run_queue_seconds
            .set(cell, stats.run_queue_seconds as f32);
    }

    /// A block's figures, worker and stamps (done and failures left
    /// unset); None for a block never measured (its wall time is the NaN
    /// fill).
    pub(super) fn read(&self, cell: u64) -> Option<TrackingRecord> {
        let wall = self.wall_seconds.get::<f32>(cell).filter(|w| !w.is_nan())?;
        let stats = BlockStats {
            wall_seconds: f64::from(wall),
            cpu_seconds: f64::from(self.cpu_seconds.get::<f32>(cell).unwrap_or(0.0)),
            peak_rss_bytes: self.peak_rss_bytes.get(cell).unwrap_or(0),
            io_read_bytes: self.io_read_bytes.get(cell).unwrap_or(0),
            io_write_bytes: self.io_write_bytes.get(cell).unwrap_or(0),
            gpu_util_pct: self.gpu_util_pct.get(cell).unwrap_or(f32::NAN),
            gpu_mem_bytes: self.gpu_mem_bytes.get(cell).unwrap_or(0),
            run_queue_seconds: self
                .run_queue_seconds
                .get::<f32>(cell)
                .map_or(f64::NAN, f64::from),
        };
        let worker = self.worker_id.get::<u32>(cell).filter(|&w| w != NO_WORKER);
        let stamp = |a: &MappedArray| a.get::<f64>(cell).filter(|t| !t.is_nan());
        Some(TrackingRecord {
            done: false,
            failures: 0,
            stats: Some(stats),
            worker_id: worker,
            sent_at: stamp(&self.sent_at),
            returned_at: stamp(&self.returned_at),
        })
    }
}
