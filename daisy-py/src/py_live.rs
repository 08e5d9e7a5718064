//! `daisy._daisy.LiveDetail`: the core's bounded live detail of one tick
//! (see `daisy_core::server::live`), handed to the tick callback as it is
//! and converted to Python only when asked: a run without a dashboard pays
//! for one small object per tick.

use daisy_core::server::LiveDetail;
use pyo3::prelude::*;
use std::sync::Arc;

/// The live detail of one server tick: the blocks returned since the last
/// tick, the live workers, the last failed attempts and each task's pace.
#[pyclass(name = "LiveDetail", module = "daisy._daisy", frozen)]
pub struct PyLiveDetail {
    detail: LiveDetail,
    task_ids: Arc<Vec<String>>,
}

impl PyLiveDetail {
    /// Wrap one tick's detail; `task_ids` in pipeline order.
    pub fn new(detail: LiveDetail, task_ids: Arc<Vec<String>>) -> Self {
        Self { detail, task_ids }
    }

    fn task_id(&self, t: u32) -> String {
        self.task_ids.get(t as usize).cloned().unwrap_or_default()
    }
}

/// A bar: task id, worker id (None: an unmanaged client), spatial id,
/// sent and returned (seconds since the epoch), outcome.
type Bar = (String, Option<u32>, u64, f64, f64, &'static str);

/// A live worker: id, task id, block held, since when, last peak RSS,
/// blocks done, blocks failed.
type Worker = (u32, String, Option<u64>, Option<f64>, Option<u64>, u64, u64);

#[pymethods]
impl PyLiveDetail {
    /// When the snapshot was taken, seconds since the UNIX epoch.
    #[getter]
    fn now(&self) -> f64 {
        self.detail.now
    }

    /// The blocks returned since the last tick, in return order: ``(task_id,
    /// worker_id or None, spatial_id, sent_at, returned_at, outcome)``;
    /// outcome is ``"done"``, ``"failed"``, ``"timed out"`` or ``"lost"``.
    fn bars(&self) -> Vec<Bar> {
        self.detail
            .bars
            .iter()
            .map(|b| {
                (
                    self.task_id(b.task),
                    b.worker,
                    b.spatial_id,
                    b.start,
                    b.end,
                    b.outcome.as_str(),
                )
            })
            .collect()
    }

    /// How many bars `bars` returns (without converting them).
    fn __len__(&self) -> usize {
        self.detail.bars.len()
    }

    /// Blocks returned since the last tick that `bars` leaves out (it
    /// carries a bounded number per tick).
    #[getter]
    fn bars_dropped(&self) -> u64 {
        self.detail.bars_dropped
    }

    /// Every live worker: ``(worker_id, task_id, spatial id of the block it
    /// holds or None, when it was sent or None, last peak RSS in bytes or
    /// None, blocks done, blocks failed)``.
    fn workers(&self) -> Vec<Worker> {
        self.detail
            .workers
            .iter()
            .map(|w| {
                (
                    w.worker_id,
                    self.task_id(w.task),
                    w.block,
                    w.since,
                    w.last_peak_rss,
                    w.blocks_done,
                    w.blocks_failed,
                )
            })
            .collect()
    }

    /// The last failed attempts, oldest first: ``(task_id, spatial_id,
    /// worker_id or None, the last line of the failure text)``.
    fn failures(&self) -> Vec<(String, u64, Option<u32>, String)> {
        self.detail
            .failures
            .iter()
            .map(|f| {
                (
                    self.task_id(f.task),
                    f.spatial_id,
                    f.worker,
                    f.message.clone(),
                )
            })
            .collect()
    }

    /// Failed attempts in the run so far.
    #[getter]
    fn failures_total(&self) -> u64 {
        self.detail.failures_total
    }

    /// Per task in pipeline order: ``(blocks per second over the last 30 s,
    /// ETA in seconds or None, utilisation so far or None)``.
    fn pace(&self) -> Vec<(f64, Option<f64>, Option<f64>)> {
        self.detail
            .tasks
            .iter()
            .map(|t| (t.blocks_per_second, t.eta_seconds, t.utilisation))
            .collect()
    }
}
