//! `daisy._daisy.Tick`: what a distributed run shows Python at each tick
//! of its server (the progress observers, metrics and the dashboard read
//! it), one typed record instead of five positional lists. Conversion
//! only: the figures are the core's `RunSnapshot`.

use crate::py_live::PyLiveDetail;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// One tick of a run (`daisy._daisy.Tick`); every per-task list is in the
/// order the caller gave its tasks.
#[pyclass(name = "Tick", module = "daisy._daisy", frozen, get_all)]
pub struct PyTick {
    /// Each task's state (`TaskState`).
    pub states: Py<PyList>,
    /// Each task's live managed workers.
    pub workers: Vec<u32>,
    /// Each task's unexpected worker stops so far.
    pub restarts: Vec<u32>,
    /// `(task id, seconds)` of every block that came back since the last
    /// tick.
    pub round_trips: Vec<(String, f64)>,
    /// The bounded live detail (blocks, workers, failures, pace).
    pub live: Py<PyLiveDetail>,
}
