//! `daisy._daisy.TrackingStore`: a task's tracking store opened from
//! Python, to read back what it holds for a block (`task.block_record`,
//! `TaskReport.block`). Runs write the store through the scheduler; this
//! only reads.

use crate::convert::coord_from_py;
use crate::errors::IntoPyResult;
use crate::py_block::PyBlock;
use crate::py_block_stats::PyBlockStats;
use crate::py_task_spec::PyTaskSpec;
use daisy_core::block_grid::BlockGrid;
use daisy_core::tracking_store::{TrackingRecord, TrackingStore};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict, PyList};
use std::path::PathBuf;

fn record_dict(py: Python<'_>, spatial_id: u64, r: &TrackingRecord) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("spatial_id", spatial_id)?;
    d.set_item("done", r.done)?;
    d.set_item("failures", r.failures)?;
    d.set_item("stats", r.stats.map(PyBlockStats::from))?;
    d.set_item("worker_id", r.worker_id)?;
    d.set_item("sent_at", r.sent_at)?;
    d.set_item("returned_at", r.returned_at)?;
    Ok(d.unbind())
}

/// A task's tracking store, for reading block records.
#[pyclass(name = "TrackingStore", module = "daisy._daisy")]
pub struct PyTrackingStore {
    inner: TrackingStore,
    grid: BlockGrid,
}

#[pymethods]
impl PyTrackingStore {
    /// Open the store of `spec` at `path` (which must exist; a store of
    /// another layout raises `daisy.LayoutMismatch`).
    #[new]
    fn new(spec: PyRef<'_, PyTaskSpec>, path: PathBuf) -> PyResult<Self> {
        if !TrackingStore::exists(&path) {
            return Err(crate::errors::bad_value(format!(
                "tracking_path: no tracking store at {}",
                path.display()
            )));
        }
        let resource_tracking = TrackingStore::has_stats_arrays(&path);
        Ok(Self {
            inner: TrackingStore::open_unlocked(&path, &spec.spec, resource_tracking).py()?,
            grid: BlockGrid::new(0, &spec.spec),
        })
    }

    /// The record of a block of this task (None if it is not on the grid).
    fn record(&self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<Option<Py<PyDict>>> {
        let Some(pos) = self.grid.position_of_write_offset(&block.write.offset()) else {
            return Ok(None);
        };
        let core = self.grid.block_at(pos);
        record_dict(py, core.spatial_id, &self.inner.record(&core)).map(Some)
    }

    /// The record of a grid cell (anchored at `total_roi`, one int per
    /// axis); None outside the grid.
    fn record_at(&self, py: Python<'_>, cell: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyDict>>> {
        let cell = coord_from_py(cell, "block", "grid coordinate")?;
        match self.inner.record_at(&cell) {
            Some((id, r)) => record_dict(py, id, &r).map(Some),
            None => Ok(None),
        }
    }

    /// Every record (done, or with failed attempts), in grid order.
    fn records(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let items = self
            .inner
            .recorded_cells()
            .iter()
            .filter_map(|c| self.inner.record_at(c))
            .map(|(id, r)| record_dict(py, id, &r))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.unbind())
    }

    /// Shape of the store's arrays.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.inner.shape().as_slice().to_vec()
    }
}

/// A stored array as Python gets it: Zarr data type, shape, chunk bytes.
type ArrayParts = (&'static str, Vec<u64>, Py<pyo3::types::PyBytes>);

/// Read one array of the tracking store at `path` whole, without a task:
/// `(zarr data type, shape, little-endian chunk bytes)`, or None when the
/// store has no such array. For the CLI and the HTML report.
#[pyfunction]
pub fn read_tracking_array(
    py: Python<'_>,
    path: PathBuf,
    name: &str,
) -> PyResult<Option<ArrayParts>> {
    let array = TrackingStore::read_array(&path, name).py()?;
    Ok(array.map(|a| {
        (
            a.kind.dtype.zarr_name(),
            a.shape,
            pyo3::types::PyBytes::new(py, &a.bytes).unbind(),
        )
    }))
}

/// The `runs.jsonl` the run history of task `task_id` goes to: in its
/// tracking store, else under the run's log directory when worker output
/// goes to files (`log_mode` "file" or "both"), else None: the core's
/// rule, which its one writer follows at the end of every run.
#[pyfunction]
#[pyo3(signature = (task_id, tracking_path, log_dir, log_mode))]
pub fn history_file(
    task_id: &str,
    tracking_path: Option<PathBuf>,
    log_dir: Option<PathBuf>,
    log_mode: &str,
) -> PyResult<Option<PathBuf>> {
    let mode: daisy_core::server::LogMode = log_mode.parse().py()?;
    let base = daisy_core::run_plan::RunPlan::history_base_for(log_dir.as_deref(), mode);
    Ok(daisy_core::tracking_store::history_file(
        task_id,
        tracking_path.as_deref(),
        base.as_deref(),
    ))
}

/// Where a tracking store stands (`daisy.store_status`): read without
/// locking or writing anything, also while a run writes the store.
#[pyclass(name = "StoreStatus", module = "daisy._daisy", frozen, get_all)]
pub struct PyStoreStatus {
    /// The task it was made for, if it names one.
    task_id: Option<String>,
    /// Its task's blocks (None for a layout this version does not read).
    total: Option<u64>,
    /// Blocks marked done.
    done: u64,
    /// Blocks not done that failed at least one attempt.
    failed: u64,
    /// Who holds its lock now ("pid 123 on host node7"), when this
    /// machine's kernel lists the lock as held; None when it is free here.
    held_by: Option<String>,
}

#[pymethods]
impl PyStoreStatus {
    fn __repr__(&self) -> String {
        format!(
            "StoreStatus(task_id={:?}, total={:?}, done={}, failed={}, held_by={:?})",
            self.task_id, self.total, self.done, self.failed, self.held_by
        )
    }
}

/// Where the tracking store at `path` stands: its task, done of total,
/// failed blocks not done, and who holds it now.
#[pyfunction]
pub fn store_status(path: PathBuf) -> PyResult<PyStoreStatus> {
    let s = daisy_core::tracking_store::store_status(&path).py()?;
    Ok(PyStoreStatus {
        task_id: s.task_id,
        total: s.total,
        done: s.done,
        failed: s.failed,
        held_by: s.held_by,
    })
}

/// The tracking stores and run histories at `path` (the core's
/// `placement::find`): the store itself, or everything below a base
/// directory as task ids nest, never inside a user's array.
#[pyfunction]
pub fn find_tracking(path: PathBuf) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let found = daisy_core::tracking_store::placement::find(&path);
    (found.stores, found.histories)
}

/// The rule among one run's stores (the core's `placement::check_distinct`):
/// `ValueError` when two tasks share a store or one lies inside another's.
#[pyfunction]
pub fn check_distinct_stores(stores: Vec<(String, PathBuf)>) -> PyResult<()> {
    let pairs: Vec<(&str, &std::path::Path)> = stores
        .iter()
        .map(|(t, p)| (t.as_str(), p.as_path()))
        .collect();
    daisy_core::tracking_store::placement::check_distinct(&pairs).py()
}

/// The last report of a history, read from its end (the core's
/// `read_last_report`), as JSON with every key; None for a missing file or
/// one without a report, an `OSError` naming the file for one that cannot
/// be read.
#[pyfunction]
pub fn read_last_report(path: PathBuf) -> PyResult<Option<String>> {
    let report = daisy_core::run_report::read_last_report(&path)
        .map_err(|e| daisy_core::error::DaisyError::Io(format!("{}: {e}", path.display())))
        .py()?;
    report
        .map(|r| serde_json::to_string(&r))
        .transpose()
        .map_err(|e| daisy_core::error::DaisyError::Io(e.to_string()))
        .py()
}

/// A report history read back and each line decoded by the core's report
/// types: `([(line, after_reset, report JSON with every key)], [(line,
/// reason)])`; a missing file is an empty history, an unreadable one an
/// `OSError`.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn read_history(path: PathBuf) -> PyResult<(Vec<(usize, bool, String)>, Vec<(usize, String)>)> {
    let history = daisy_core::run_report::read_history(&path)
        .map_err(|e| daisy_core::error::DaisyError::Io(format!("{}: {e}", path.display())))
        .py()?;
    let mut reports = Vec::with_capacity(history.reports.len());
    for r in history.reports {
        let text = serde_json::to_string(&r.report)
            .map_err(|e| daisy_core::error::DaisyError::Io(e.to_string()))
            .py()?;
        reports.push((r.line, r.after_reset, text));
    }
    Ok((reports, history.skipped))
}
