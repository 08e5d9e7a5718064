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
use pyo3::types::PyDict;

/// One failed attempt: `(task id, spatial id, worker id or None, reason)`.
type FailureTuple = (String, u64, Option<u32>, String);
/// One block with a failed attempt: `(task id, spatial id, write ROI as
/// slices, failed attempts, failed for good, last message)`.
type FailedBlockTuple = (String, u64, String, u32, bool, String);

/// The result of one run (`daisy._daisy.RunResult`).
#[pyclass(name = "RunResult", module = "daisy._daisy", frozen)]
pub struct PyRunResult {
    states: Py<PyDict>,
    failures: Vec<FailureTuple>,
    failures_unnoted: u64,
    failed_blocks: Vec<FailedBlockTuple>,
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
                .map(|f| (name(f.task), f.spatial_id, f.worker_id, f.reason.clone()))
                .collect(),
            failures_unnoted: outcome.failures_unnoted,
            failed_blocks: outcome
                .failed_blocks()
                .into_iter()
                .map(|b| {
                    (
                        name(b.task),
                        b.spatial_id,
                        b.write_roi.slices(),
                        b.attempts,
                        b.failed,
                        b.message,
                    )
                })
                .collect(),
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

    /// The first failed attempts: `(task id, spatial id, worker id or
    /// None, reason)`.
    #[getter]
    fn failures(&self) -> Vec<FailureTuple> {
        self.failures.clone()
    }

    /// Failed attempts past those noted one by one (counted, not kept).
    #[getter]
    fn failures_unnoted(&self) -> u64 {
        self.failures_unnoted
    }

    /// Every block with a failed attempt, once, in the order of its first
    /// failure: `(task id, spatial id, write ROI, attempts, failed for
    /// good, last message)`.
    #[getter]
    fn failed_blocks(&self) -> Vec<FailedBlockTuple> {
        self.failed_blocks.clone()
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
