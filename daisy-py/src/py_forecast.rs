//! `daisy._daisy.forecast` and `forecast_sample`: the core's forecast
//! (`daisy_core::forecast`) called with Python's task specs, store paths
//! and worker counts; the forecast comes back as JSON with every key, for
//! `daisy.forecast`'s `Forecast` to render.

use crate::errors::IntoPyResult;
use crate::py_task_spec::PyTaskSpec;
use daisy_core::error::DaisyError;
use daisy_core::forecast::{TaskInput, forecast as core_forecast, sample_blocks};
use daisy_core::memory_budget::MemoryBudget;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

/// The blocks a forecast runs for real, by task id (placement-grid indices
/// in C order): `n` a task spread over its volume, none measured or done
/// in its store already, and the upstream blocks they read.
#[pyfunction]
pub fn forecast_sample(
    specs: Vec<PyRef<'_, PyTaskSpec>>,
    stores: HashMap<String, PathBuf>,
    n: u64,
) -> PyResult<HashMap<String, Vec<u64>>> {
    sample_blocks(specs.iter().map(|s| s.spec.clone()).collect(), &stores, n).py()
}

/// The forecast of the rest of a run of `specs`, from each task's store
/// (`stores`, by task id) and worker count (`workers`; 0 for
/// `max_workers="auto"`), on this machine's
/// cores within `memory_budget` bytes (None: the budget a run here would
/// find), leaving out blocks measured with another block function than
/// `functions` names (SHA-256 of its code, by task id), as JSON.
#[pyfunction]
#[pyo3(signature = (specs, stores, workers, memory_budget=None, functions=HashMap::new()))]
pub fn forecast(
    specs: Vec<PyRef<'_, PyTaskSpec>>,
    stores: HashMap<String, PathBuf>,
    workers: HashMap<String, u32>,
    memory_budget: Option<u64>,
    functions: HashMap<String, String>,
) -> PyResult<String> {
    let budget = MemoryBudget::find(memory_budget).py()?;
    let cores = daisy_core::worker_count::cores();
    // 0 workers: max_workers="auto", resolved as a run here would
    let auto = daisy_core::worker_count::auto_workers(cores, &budget).count;
    let inputs: HashMap<String, TaskInput> = specs
        .iter()
        .map(|s| {
            let id = s.spec.task_id.clone();
            let input = TaskInput {
                store: stores.get(&id).cloned(),
                workers: match workers.get(&id).copied().unwrap_or(1) {
                    0 => auto,
                    n => n,
                },
                whole: false,
                function_sha256: functions.get(&id).cloned(),
            };
            (id, input)
        })
        .collect();
    let fc = core_forecast(
        specs.iter().map(|s| s.spec.clone()).collect(),
        &inputs,
        cores,
        &budget,
    )
    .py()?;
    serde_json::to_string(&fc)
        .map_err(|e| DaisyError::Io(e.to_string()))
        .py()
}

/// The next run of the task whose store is at `path`, from its history
/// alone (`daisy forecast PATH`), on `workers` workers (None: as many as
/// its last run started), as JSON.
#[pyfunction]
#[pyo3(signature = (path, workers=None, memory_budget=None))]
pub fn forecast_store(
    path: PathBuf,
    workers: Option<u32>,
    memory_budget: Option<u64>,
) -> PyResult<String> {
    let budget = MemoryBudget::find(memory_budget).py()?;
    let cores = daisy_core::worker_count::cores();
    let fc = daisy_core::forecast::forecast_store(&path, workers, cores, &budget).py()?;
    serde_json::to_string(&fc)
        .map_err(|e| DaisyError::Io(e.to_string()))
        .py()
}
