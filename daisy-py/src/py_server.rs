//! `daisy._daisy.run_distributed`: run a pipeline with the core server.
//!
//! Converts the Python-side settings into the core's `ServerConfig`, plugs
//! the user's check functions and the progress/signal tick into the core's
//! `RunHooks`, and runs the server with the GIL released. The GIL is taken
//! back only inside those hooks: to call a check function, and every tick
//! to let Python handle signals (Ctrl-C raises `KeyboardInterrupt` there,
//! which stops the run) and update progress.

use crate::py_block::PyBlock;
use crate::py_scheduler::build_scheduler;
use crate::py_task_spec::PyTaskSpec;
use crate::py_task_state::PyTaskState;
use daisy_core::Block;
use daisy_core::server::{
    LogMode, RunError, RunHooks, RunOutcome, RunSnapshot, ServerConfig, TaskRuntime, WorkerCommand,
    run_server,
};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBytes, PyDict, PyList};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

struct PyHooks {
    task_ids: Vec<String>,
    checks: Vec<Option<Py<PyAny>>>,
    on_tick: Py<PyAny>,
    on_listening: Py<PyAny>,
    token: String,
}

fn states_list(py: Python<'_>, snap: &RunSnapshot) -> PyResult<Py<PyList>> {
    let items: Vec<PyTaskState> = snap
        .states
        .iter()
        .map(|s| PyTaskState::from_core(s, true))
        .collect();
    Ok(PyList::new(py, items)?.unbind())
}

impl RunHooks for PyHooks {
    type Error = PyErr;

    fn is_done(&mut self, block: &Block) -> Result<bool, String> {
        let Some(check) = &self.checks[block.key.task as usize] else {
            return Ok(false);
        };
        Python::attach(|py| {
            let b = Py::new(
                py,
                PyBlock::from_core(block, &self.task_ids[block.key.task as usize]),
            )?;
            check.call1(py, (b,))?.bind(py).is_truthy()
        })
        .map_err(|e| e.to_string())
    }

    fn tick(&mut self, snap: &RunSnapshot) -> Result<(), PyErr> {
        Python::attach(|py| {
            py.check_signals()?;
            let states = states_list(py, snap)?;
            let round_trips: Vec<(String, f64)> = snap
                .round_trips
                .iter()
                .map(|(t, rt)| (self.task_ids[*t as usize].clone(), *rt))
                .collect();
            self.on_tick
                .call1(
                    py,
                    (
                        states,
                        snap.workers.clone(),
                        snap.restarts.clone(),
                        round_trips,
                    ),
                )
                .map(|_| ())
        })
    }

    fn on_listening(&mut self, addr: SocketAddr) -> Result<(), PyErr> {
        Python::attach(|py| {
            self.on_listening
                .call1(py, (addr.ip().to_string(), addr.port(), self.token.clone()))
                .map(|_| ())
        })
    }
}

fn get<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("missing task setting {key:?}")))?
        .extract()
}

fn task_runtime(d: &Bound<'_, PyDict>) -> PyResult<TaskRuntime> {
    let timeout: Option<f64> = get(d, "timeout")?;
    let program: Option<String> = get(d, "program")?;
    let worker = match program {
        None => None,
        Some(program) => Some(WorkerCommand {
            program: PathBuf::from(program),
            args: get(d, "args")?,
            env: get(d, "env")?,
            stdin: get::<Bound<'_, PyBytes>>(d, "stdin")?.as_bytes().to_vec(),
            stop: get(d, "stop")?,
        }),
    };
    Ok(TaskRuntime {
        resource_tracking: get(d, "resource_tracking")?,
        spawner: get(d, "spawner")?,
        max_workers: get(d, "max_workers")?,
        timeout: timeout.map(Duration::from_secs_f64),
        max_worker_restarts: get(d, "max_worker_restarts")?,
        requires: get(d, "requires")?,
        worker,
    })
}

/// Run `specs` with worker processes; returns a dict with `states` (task id
/// to TaskState), `failures` (task id, spatial id, worker id, reason),
/// `abandoned` (task id, reason), `unmanaged_clients` and
/// `workers_started` (task id to count).
#[pyfunction]
#[pyo3(signature = (specs, tasks, host, port, resources, log_dir, log_mode, check_functions, on_tick, on_listening, tracking=None, skip_masks=None, advertise_host=None, stop_all=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub fn run_distributed(
    py: Python<'_>,
    specs: Vec<PyRef<'_, PyTaskSpec>>,
    tasks: &Bound<'_, PyDict>,
    host: String,
    port: u16,
    resources: BTreeMap<String, u64>,
    log_dir: Option<PathBuf>,
    log_mode: &str,
    check_functions: &Bound<'_, PyDict>,
    on_tick: Py<PyAny>,
    on_listening: Py<PyAny>,
    tracking: Option<&Bound<'_, PyDict>>,
    skip_masks: Option<&Bound<'_, PyDict>>,
    advertise_host: Option<String>,
    stop_all: Vec<String>,
) -> PyResult<Py<PyDict>> {
    let mut measured = Vec::new();
    for (tid, d) in tasks.iter() {
        if d.cast::<PyDict>()?
            .get_item("resource_tracking")?
            .is_some_and(|v| v.is_truthy().unwrap_or(false))
        {
            measured.push(tid.extract::<String>()?);
        }
    }
    let scheduler = build_scheduler(&specs, tracking, skip_masks, &measured)?;
    let task_ids: Vec<String> = scheduler
        .pipeline()
        .specs()
        .iter()
        .map(|s| s.task_id.clone())
        .collect();
    let mut runtimes = Vec::with_capacity(task_ids.len());
    let mut checks = Vec::with_capacity(task_ids.len());
    for tid in &task_ids {
        let d = tasks
            .get_item(tid)?
            .ok_or_else(|| PyValueError::new_err(format!("no settings for task {tid:?}")))?;
        let rt = task_runtime(d.cast::<PyDict>()?)?;
        for (k, need) in &rt.requires {
            if let Some(have) = resources.get(k)
                && need > have
            {
                return Err(PyValueError::new_err(format!(
                    "requires: task {tid:?} needs {need} {k:?} per worker but resources only has \
                     {have}; it could never run. Raise resources[{k:?}] or lower the task's requires"
                )));
            }
        }
        runtimes.push(rt);
        checks.push(
            check_functions
                .get_item(tid)?
                .filter(|f| !f.is_none())
                .map(|f| f.unbind()),
        );
    }
    let token = daisy_core::protocol::new_token()
        .map_err(|e| PyOSError::new_err(format!("could not make a run token: {e}")))?;
    let log_mode = match log_mode {
        "console" => LogMode::Console,
        "file" => LogMode::File,
        "both" => LogMode::Both,
        other => {
            return Err(PyValueError::new_err(format!(
                "log_mode: unknown mode {other:?}; use \"console\", \"file\" or \"both\""
            )));
        }
    };
    let config = ServerConfig {
        host,
        port,
        tasks: runtimes,
        resources,
        log_dir,
        log_mode,
        token: token.clone(),
        advertise_host,
        stop_all,
    };
    let hooks = PyHooks {
        task_ids: task_ids.clone(),
        checks,
        on_tick,
        on_listening,
        token,
    };
    let outcome = py.detach(|| run_server(scheduler, config, hooks));
    let outcome = match outcome {
        Ok(o) => o,
        Err(RunError::Hook(e, partial)) => {
            attach_report(py, &e, &partial)?;
            return Err(e);
        }
        Err(RunError::Fatal(message, partial)) => {
            let e = PyRuntimeError::new_err(message);
            attach_report(py, &e, &partial)?;
            return Err(e);
        }
        Err(RunError::Io(e)) => {
            return Err(PyOSError::new_err(format!("daisy server: {e}")));
        }
    };
    let out = PyDict::new(py);
    let states = PyDict::new(py);
    for (tid, s) in task_ids.iter().zip(&outcome.states) {
        states.set_item(tid, PyTaskState::from_core(s, true))?;
    }
    out.set_item("states", states)?;
    let failures: Vec<(String, u64, Option<u32>, String)> = outcome
        .failures
        .iter()
        .map(|f| {
            (
                task_ids[f.task as usize].clone(),
                f.spatial_id,
                f.worker_id,
                f.reason.clone(),
            )
        })
        .collect();
    out.set_item("failures", failures)?;
    let abandoned: Vec<(String, String)> = outcome
        .abandoned
        .iter()
        .map(|(t, r)| (task_ids[*t as usize].clone(), r.clone()))
        .collect();
    out.set_item("abandoned", abandoned)?;
    out.set_item("unmanaged_clients", outcome.unmanaged_clients)?;
    let started = PyDict::new(py);
    for (tid, n) in task_ids.iter().zip(&outcome.workers_started) {
        started.set_item(tid, n)?;
    }
    out.set_item("workers_started", started)?;
    out.set_item("report", report_json(&outcome)?)?;
    Ok(out.unbind())
}

/// The whole run's report as JSON: `{task_id: task report}`.
pub fn report_json(outcome: &RunOutcome) -> PyResult<String> {
    let map: serde_json::Map<String, serde_json::Value> = outcome
        .reports
        .iter()
        .map(|r| {
            serde_json::to_value(r)
                .map(|v| (r.task_id.clone(), v))
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))
        })
        .collect::<PyResult<_>>()?;
    serde_json::to_string(&map).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Attach the partial report of an interrupted or failed run to its error
/// as `daisy_run_report` (JSON; the Python layer makes it a RunReport).
fn attach_report(py: Python<'_>, e: &PyErr, outcome: &RunOutcome) -> PyResult<()> {
    e.value(py)
        .setattr("daisy_run_report_json", report_json(outcome)?)
}
