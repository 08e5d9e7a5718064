//! `daisy._daisy.RunResult`: what a run hands back to Python, typed. Both
//! runners (the server, the serial loop) return one, finished or stopped:
//! a stopped run's result carries the exception that stopped it
//! (`stopped`) beside its partial report, instead of riding on the
//! exception as ad-hoc attributes. Conversion only: every figure is the
//! core's [`RunOutcome`].

use crate::errors::StopCause;
use crate::py_task_state::PyTaskState;
use daisy_core::DaisyError;
use daisy_core::run_report::RunOutcome;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// One failed attempt as a tuple: what a record unpacks to.
type FailureTuple = (String, u64, Option<u32>, String);
/// One block with a failed attempt as a tuple: what a record unpacks to.
type FailedBlockTuple = (String, u64, String, u32, bool, String);

/// `Name(field=value, ...)` with each value as Python writes it.
fn record_repr(name: &str, names: &[&str], values: &Bound<'_, PyTuple>) -> PyResult<String> {
    let mut fields = Vec::with_capacity(names.len());
    for (field, value) in names.iter().zip(values.iter()) {
        fields.push(format!("{field}={}", value.repr()?));
    }
    Ok(format!("{name}({})", fields.join(", ")))
}

/// The Python methods of a record that reads like the tuple it replaced:
/// its `repr`, length, iteration (so it unpacks), indexing and equality
/// (with a record of its kind or the tuple). `$ty` has `NAME`, `FIELDS`
/// and `tuple()`.
macro_rules! tuple_record_methods {
    ($ty:ty) => {
        #[pymethods]
        impl $ty {
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                record_repr(Self::NAME, Self::FIELDS, &self.tuple().into_pyobject(py)?)
            }

            fn __len__(&self) -> usize {
                Self::FIELDS.len()
            }

            fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.tuple()
                    .into_pyobject(py)?
                    .try_iter()
                    .map(Bound::into_any)
            }

            fn __getitem__<'py>(
                &self,
                py: Python<'py>,
                index: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.tuple().into_pyobject(py)?.as_any().get_item(index)
            }

            fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
                if let Ok(other) = other.cast::<$ty>() {
                    return Ok(self.tuple() == other.get().tuple());
                }
                self.tuple().into_pyobject(py)?.eq(other)
            }
        }
    };
}

/// One failed attempt (`daisy._daisy.Failure`): read by name
/// (`f.task_id`, `f.reason`); unpacks as the `(task_id, spatial_id,
/// worker_id, reason)` tuple earlier releases of this package handed out,
/// and equals it.
#[pyclass(name = "Failure", module = "daisy._daisy", frozen, get_all)]
pub struct PyFailure {
    /// The task of the block.
    task_id: String,
    /// The block's spatial id.
    spatial_id: u64,
    /// The managed worker that had it (None: an unmanaged client, or the
    /// driver's own thread).
    worker_id: Option<u32>,
    /// Why the attempt failed (a traceback, a timeout, a worker's death).
    reason: String,
}

impl PyFailure {
    const NAME: &'static str = "Failure";
    const FIELDS: &'static [&'static str] = &["task_id", "spatial_id", "worker_id", "reason"];

    fn tuple(&self) -> FailureTuple {
        (
            self.task_id.clone(),
            self.spatial_id,
            self.worker_id,
            self.reason.clone(),
        )
    }
}

tuple_record_methods!(PyFailure);

/// One block with a failed attempt (`daisy._daisy.FailedBlock`), once,
/// with its last message: read by name; unpacks as the `(task_id,
/// spatial_id, write_roi, attempts, failed, message)` tuple earlier
/// releases of this package handed out, and equals it.
#[pyclass(name = "FailedBlock", module = "daisy._daisy", frozen, get_all)]
pub struct PyFailedBlock {
    /// The task of the block.
    task_id: String,
    /// The block's spatial id.
    spatial_id: u64,
    /// Its write ROI, as slices (`[0:64, 0:64]`).
    write_roi: String,
    /// Its failed attempts.
    attempts: u32,
    /// Whether it failed for good (False: a retry succeeded or is due).
    failed: bool,
    /// Why its last attempt failed.
    message: String,
}

impl PyFailedBlock {
    const NAME: &'static str = "FailedBlock";
    const FIELDS: &'static [&'static str] = &[
        "task_id",
        "spatial_id",
        "write_roi",
        "attempts",
        "failed",
        "message",
    ];

    fn tuple(&self) -> FailedBlockTuple {
        (
            self.task_id.clone(),
            self.spatial_id,
            self.write_roi.clone(),
            self.attempts,
            self.failed,
            self.message.clone(),
        )
    }
}

tuple_record_methods!(PyFailedBlock);

/// The result of one run (`daisy._daisy.RunResult`).
#[pyclass(name = "RunResult", module = "daisy._daisy", frozen)]
pub struct PyRunResult {
    states: Py<PyDict>,
    failures: Vec<Py<PyFailure>>,
    failures_unnoted: u64,
    failed_blocks: Vec<Py<PyFailedBlock>>,
    failing_alike: Vec<String>,
    abandoned: Vec<(String, String)>,
    unmanaged_clients: u32,
    workers_started: Py<PyDict>,
    report_json: String,
    /// The exception itself, normalised when the result is made (see
    /// [`PyRunResult::new`]).
    stopped: Option<Py<PyAny>>,
}

impl PyRunResult {
    /// The result of `outcome`, whose tasks are `task_ids` (pipeline
    /// order); `stop` holds the exception a hook stopped it with. Made
    /// while the run still counts as busy (`interpreter::Busy`): the
    /// exception is normalised here, which releases the GIL for a moment,
    /// so that no getter releases it later, when the interpreter may be
    /// finalising (a run in a daemon thread at exit).
    pub fn new(
        py: Python<'_>,
        task_ids: &[String],
        outcome: &RunOutcome,
        stop: StopCause,
    ) -> PyResult<Self> {
        let name = |t: daisy_core::TaskIndex| task_ids[t as usize].clone();
        let states = PyDict::new(py);
        for (tid, s) in task_ids.iter().zip(&outcome.states) {
            states.set_item(tid, PyTaskState::from_core(s))?;
        }
        let workers_started = PyDict::new(py);
        for (tid, n) in task_ids.iter().zip(&outcome.workers_started) {
            workers_started.set_item(tid, n)?;
        }
        let report_json = outcome.report_json().map_err(crate::errors::to_pyerr)?;
        Ok(Self {
            states: states.unbind(),
            failures: outcome
                .failures
                .iter()
                .map(|f| {
                    let record = PyFailure {
                        task_id: name(f.task),
                        spatial_id: f.spatial_id,
                        worker_id: f.worker_id,
                        reason: f.reason.clone(),
                    };
                    Py::new(py, record)
                })
                .collect::<PyResult<_>>()?,
            failures_unnoted: outcome.failures_unnoted,
            failed_blocks: outcome
                .failed_blocks()
                .into_iter()
                .map(|b| {
                    let record = PyFailedBlock {
                        task_id: name(b.task),
                        spatial_id: b.spatial_id,
                        write_roi: b.write_roi.slices(),
                        attempts: b.attempts,
                        failed: b.failed,
                        message: b.message,
                    };
                    Py::new(py, record)
                })
                .collect::<PyResult<_>>()?,
            failing_alike: outcome.failing_alike().into_iter().map(name).collect(),
            abandoned: outcome
                .abandoned
                .iter()
                .map(|(t, r)| (name(*t), r.clone()))
                .collect(),
            unmanaged_clients: outcome.unmanaged_clients,
            workers_started: workers_started.unbind(),
            report_json,
            stopped: outcome
                .stopped
                .clone()
                .map(|e: DaisyError| stop.into_pyerr(e).into_value(py).into_any()),
        })
    }
}

#[pymethods]
impl PyRunResult {
    /// Every task's final state, by task id, in pipeline order.
    #[getter]
    fn states(&self, py: Python<'_>) -> Py<PyDict> {
        self.states.clone_ref(py)
    }

    /// The first failed attempts, as [`PyFailure`] records.
    #[getter]
    fn failures(&self, py: Python<'_>) -> Vec<Py<PyFailure>> {
        self.failures.iter().map(|f| f.clone_ref(py)).collect()
    }

    /// Failed attempts past those noted one by one (counted, not kept).
    #[getter]
    fn failures_unnoted(&self) -> u64 {
        self.failures_unnoted
    }

    /// Every block with a failed attempt, once, in the order of its first
    /// failure, as [`PyFailedBlock`] records.
    #[getter]
    fn failed_blocks(&self, py: Python<'_>) -> Vec<Py<PyFailedBlock>> {
        self.failed_blocks.iter().map(|b| b.clone_ref(py)).collect()
    }

    /// The tasks whose blocks that failed for good after retries failed
    /// the same way on every attempt (a rerun would fail again), in
    /// pipeline order.
    #[getter]
    fn failing_alike(&self) -> Vec<String> {
        self.failing_alike.clone()
    }

    /// Abandoned tasks: `(task id, reason)`.
    #[getter]
    fn abandoned(&self) -> Vec<(String, String)> {
        self.abandoned.clone()
    }

    /// Clients that connected without a server-assigned worker id.
    #[getter]
    fn unmanaged_clients(&self) -> u32 {
        self.unmanaged_clients
    }

    /// Worker processes started, by task id.
    #[getter]
    fn workers_started(&self, py: Python<'_>) -> Py<PyDict> {
        self.workers_started.clone_ref(py)
    }

    /// The run report as JSON, `{task_id: task report}` (what
    /// `daisy.RunReport.from_json` reads), partial for a stopped run.
    #[getter]
    fn report_json(&self) -> String {
        self.report_json.clone()
    }

    /// The exception that stopped the run before its end (Ctrl-C, an
    /// exception of a block function or hook, a broken rule), or None for
    /// a run that went to its end.
    #[getter]
    fn stopped(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stopped.as_ref().map(|e| e.clone_ref(py))
    }
}
