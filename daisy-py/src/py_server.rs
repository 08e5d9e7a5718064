//! `daisy._daisy.run_distributed`: run a pipeline with the core server.
//!
//! Converts the Python-side settings into the core's `ServerConfig`, plugs
//! the user's check functions and the progress/signal tick into the core's
//! `RunHooks`, and runs the server with the GIL released. The GIL is taken
//! back only inside those hooks: to call a check function, and every tick
//! to let Python handle signals (Ctrl-C raises `KeyboardInterrupt` there,
//! which stops the run) and update progress.

use crate::errors::{IntoPyResult, StopCause, to_pyerr};
use crate::interpreter;
use crate::py_block::PyBlock;
use crate::py_live::PyLiveDetail;
use crate::py_run_result::PyRunResult;
use crate::py_scheduler::{OutputArgs, TaskStoreOptions, declared_outputs, run_plan};
use crate::py_task_options::PyTaskOptions;
use crate::py_task_spec::PyTaskSpec;
use crate::py_task_state::PyTaskState;
use crate::py_tick::PyTick;
use daisy_core::serial::Measure;
use daisy_core::server::config::JobCommand;
use daisy_core::server::{
    BlockCheck, LogMode, RunHooks, RunSnapshot, ServerConfig, TaskRuntime, WorkerCommand,
    run_server,
};
use daisy_core::{Block, DaisyError};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyList};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// How one task of a distributed run is served: its workers, limits,
/// resources, stores and check function (`daisy._daisy.TaskConfig`).
#[pyclass(name = "TaskConfig", module = "daisy._daisy", frozen)]
pub struct PyTaskConfig {
    task_id: String,
    runtime: TaskRuntime,
    check_function: Option<Py<PyAny>>,
    store: TaskStoreOptions,
}

#[pymethods]
impl PyTaskConfig {
    /// `program=None` means no worker processes: only external clients
    /// (`daisy.Client`) serve the task. `launcher_args`, where given, are
    /// the arguments of `program` that start the task's launcher (warm
    /// starts: it gets the same `stdin`); None starts every worker cold.
    /// `options` are the task's run options as the core checked them
    /// (`daisy._daisy.TaskOptions`); `spawner_idle_timeout` the spawner's
    /// idle timeout in seconds, for when neither the task nor the run sets
    /// one. `job_program`/`job_args`/`job_stop`, where given, are the
    /// command of a job hosting up to `workers_per_job` workers (its node
    /// launcher reads the payload file; `{job}` and `{task_id}` are
    /// expanded). `polls`: the worker's (and the job's) command is a local
    /// handle that learns of its job's end only by polling (`sbatch
    /// --wait`), ended once its worker has left. `outputs`: the task's
    /// declared outputs (`(directory, chunk or None, offset)` in world
    /// units).
    #[new]
    #[pyo3(signature = (task_id, options, *, program, args, stdin, stop, spawner, check_function=None, tracking_path=None, skip_mask=None, launcher_args=None, payload_sha256=None, function_sha256=None, spawner_idle_timeout=None, job_program=None, job_args=Vec::new(), job_stop=Vec::new(), workers_per_job=1, polls=false, outputs=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        task_id: String,
        options: PyRef<'_, PyTaskOptions>,
        program: Option<PathBuf>,
        args: Vec<String>,
        stdin: Vec<u8>,
        stop: Vec<String>,
        spawner: String,
        check_function: Option<Py<PyAny>>,
        tracking_path: Option<PathBuf>,
        skip_mask: Option<Vec<u8>>,
        launcher_args: Option<Vec<String>>,
        payload_sha256: Option<String>,
        function_sha256: Option<String>,
        spawner_idle_timeout: Option<f64>,
        job_program: Option<PathBuf>,
        job_args: Vec<String>,
        job_stop: Vec<String>,
        workers_per_job: i64,
        polls: bool,
        outputs: Vec<OutputArgs>,
    ) -> PyResult<Self> {
        let workers_per_job =
            daisy_core::server::jobs::check_workers_per_job(workers_per_job).py()?;
        // one copy of the payload, shared by every worker and the launcher
        let stdin: Arc<[u8]> = stdin.into();
        let options = &options.options;
        Ok(Self {
            store: TaskStoreOptions {
                tracking_path,
                skip_mask,
                measure: options.measure,
                outputs: declared_outputs(outputs)?,
            },
            runtime: TaskRuntime {
                max_workers: options.max_workers,
                auto_workers: options.auto_workers,
                timeout: options.timeout,
                max_worker_restarts: options.max_worker_restarts,
                idle_timeout: options.idle_timeout,
                spawner_idle_timeout: spawner_idle_timeout
                    .map(daisy_core::task_options::idle_timeout)
                    .transpose()
                    .py()?,
                requires: options.requires.clone(),
                job: job_program.map(|program| JobCommand {
                    command: WorkerCommand {
                        program,
                        args: job_args,
                        env: Vec::new(),
                        stdin: Arc::from(Vec::new()),
                        stop: job_stop,
                        polls,
                    },
                    workers_per_job,
                }),
                launcher: program.as_ref().zip(launcher_args).map(|(program, args)| {
                    WorkerCommand {
                        program: program.clone(),
                        args,
                        env: Vec::new(),
                        stdin: stdin.clone(),
                        stop: Vec::new(),
                        polls: false,
                    }
                }),
                worker: program.map(|program| WorkerCommand {
                    program,
                    args,
                    env: Vec::new(),
                    stdin,
                    stop,
                    polls,
                }),
                resource_tracking: options.measure != Measure::Off,
                gpu_tracking: options.measure == Measure::WithGpu,
                spawner,
                payload_sha256,
                function_sha256,
            },
            task_id,
            check_function: check_function.filter(|f| !Python::attach(|py| f.is_none(py))),
        })
    }

    /// The task this configures.
    #[getter]
    fn task_id(&self) -> &str {
        &self.task_id
    }
}

/// The settings of one distributed run (`daisy._daisy.RunConfig`).
#[pyclass(name = "RunConfig", module = "daisy._daisy", frozen)]
pub struct PyRunConfig {
    host: String,
    port: u16,
    resources: BTreeMap<String, u64>,
    log_dir: Option<PathBuf>,
    log_mode: LogMode,
    advertise_host: Option<String>,
    stop_all: Vec<String>,
    wait_all: Vec<String>,
    liveness_timeout: std::time::Duration,
    block_tracking: bool,
    idle_timeout: Option<std::time::Duration>,
    strict: bool,
    memory: daisy_core::server::MemorySettings,
    forecast_sample: bool,
}

#[pymethods]
impl PyRunConfig {
    /// `log_mode` is `"console"`, `"file"` or `"both"`; `advertise_host`
    /// the name workers connect to (None: the listen address); `stop_all`
    /// a command run once when the run ends (cancels remote jobs);
    /// `wait_all` a command waited for (bounded) at the end of a run not
    /// interrupted, before `stop_all`: it returns once no remote job of
    /// the run is left;
    /// `liveness_timeout` the seconds a silent TCP peer is waited for;
    /// `block_tracking=False` runs without the tasks' tracking stores;
    /// `idle_timeout` the seconds a worker of a task that sets none of its
    /// own may wait for a block before it is handed back (None: each
    /// task's spawner's); `strict=True` refuses a pipeline whose
    /// downstream blocks read where no upstream block writes;
    /// `memory_budget` the bytes the run's local workers may use (None:
    /// found, see `daisy_core::memory_budget`) and `memory_guard=False`
    /// turns the memory gate and guard off; `forecast_sample=True` marks
    /// the run's report lines as a forecast's sample.
    #[new]
    #[pyo3(signature = (*, host, port, resources, log_dir, log_mode, advertise_host=None, stop_all=Vec::new(), wait_all=Vec::new(), liveness_timeout=None, block_tracking=true, idle_timeout=None, strict=false, memory_budget=None, memory_guard=true, forecast_sample=false))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        host: String,
        port: u16,
        resources: BTreeMap<String, i128>,
        log_dir: Option<PathBuf>,
        log_mode: &str,
        advertise_host: Option<String>,
        stop_all: Vec<String>,
        wait_all: Vec<String>,
        liveness_timeout: Option<f64>,
        block_tracking: bool,
        idle_timeout: Option<f64>,
        strict: bool,
        memory_budget: Option<i128>,
        memory_guard: bool,
        forecast_sample: bool,
    ) -> PyResult<Self> {
        let memory_budget = memory_budget
            .map(|b| {
                u64::try_from(b).map_err(|_| {
                    DaisyError::invalid(
                        "memory_budget",
                        format!("{b}: give the bytes the run's workers may use, e.g. 3 * 2**30"),
                    )
                })
            })
            .transpose()
            .py()?;
        let resources: Vec<(String, i128)> = resources.into_iter().collect();
        Ok(Self {
            host,
            port,
            resources: daisy_core::task_options::amounts("resources", &resources).py()?,
            log_dir,
            log_mode: log_mode.parse().py()?,
            advertise_host,
            stop_all,
            wait_all,
            liveness_timeout: match liveness_timeout {
                Some(s) => daisy_core::liveness::timeout_from_secs(s).py()?,
                None => daisy_core::liveness::DEFAULT_TIMEOUT,
            },
            block_tracking,
            idle_timeout: idle_timeout
                .map(daisy_core::task_options::idle_timeout)
                .transpose()
                .py()?,
            strict,
            memory: daisy_core::server::MemorySettings {
                budget: memory_budget,
                guard: memory_guard,
            },
            forecast_sample,
        })
    }
}

struct PyHooks {
    task_ids: Arc<Vec<String>>,
    /// for each spec as the caller listed it, its index in the core's
    /// order (which puts upstream tasks first): the per-task lists given
    /// to `on_tick` follow the caller's order, which is the one it knows
    caller_order: Vec<usize>,
    checks: Arc<PyChecks>,
    on_tick: Py<PyAny>,
    on_listening: Py<PyAny>,
    token: String,
    stop: StopCause,
}

/// `per_task` (one entry per task, in the core's order) in the caller's
/// order, `order[i]` being the core index of the caller's i-th task.
fn in_caller_order<T: Clone>(order: &[usize], per_task: &[T]) -> Vec<T> {
    order
        .iter()
        .filter_map(|&i| per_task.get(i).cloned())
        .collect()
}

fn states_list(py: Python<'_>, order: &[usize], snap: &RunSnapshot) -> PyResult<Py<PyList>> {
    let items: Vec<PyTaskState> = in_caller_order(order, &snap.states)
        .iter()
        .map(PyTaskState::from_core)
        .collect();
    Ok(PyList::new(py, items)?.unbind())
}

/// The tasks' check functions, asked by the server on its blocking pool
/// (`daisy_core::server::checks`): each call takes the GIL on that thread.
struct PyChecks {
    task_ids: Arc<Vec<String>>,
    checks: Vec<Option<Py<PyAny>>>,
    stop: StopCause,
}

impl BlockCheck for PyChecks {
    fn checks(&self, task: daisy_core::TaskIndex) -> bool {
        self.checks.get(task as usize).is_some_and(Option::is_some)
    }

    fn already_done(&self, block: &Block) -> Result<bool, DaisyError> {
        let t = block.key.task as usize;
        let Some(check) = self.checks.get(t).and_then(Option::as_ref) else {
            return Ok(false);
        };
        interpreter::attach(|py| {
            Py::new(py, PyBlock::from_core(block, &self.task_ids[t]))
                .and_then(|b| check.call1(py, (b,))?.bind(py).is_truthy())
                .map_err(|e| self.stop.raised(py, e))
        })
        .unwrap_or_else(|| Err(self.stop.stop(interpreter::exiting_error())))
    }

    fn batch(&self, batch: &mut dyn FnMut()) {
        // attached once for the batch (each check's own attach nests);
        // an exiting interpreter: each check says so itself
        if interpreter::attach(|_| batch()).is_none() {
            batch();
        }
    }
}

impl RunHooks for PyHooks {
    fn block_check(&self) -> Option<Arc<dyn BlockCheck>> {
        let checks: Arc<dyn BlockCheck> = self.checks.clone();
        Some(checks)
    }

    fn tick(&mut self, snap: &RunSnapshot) -> Result<(), DaisyError> {
        interpreter::attach(|py| self.tick_in(py, snap).map_err(|e| self.stop.raised(py, e)))
            .unwrap_or_else(|| Err(self.stop.stop(interpreter::exiting_error())))
    }

    fn on_listening(&mut self, addr: SocketAddr) -> Result<(), DaisyError> {
        interpreter::attach(|py| {
            self.on_listening
                .call1(py, (addr.ip().to_string(), addr.port(), self.token.clone()))
                .map(|_| ())
                .map_err(|e| self.stop.raised(py, e))
        })
        .unwrap_or_else(|| Err(self.stop.stop(interpreter::exiting_error())))
    }
}

impl PyHooks {
    /// A tick's work in Python: signals (Ctrl-C raises here) and the
    /// progress observers.
    fn tick_in(&self, py: Python<'_>, snap: &RunSnapshot) -> PyResult<()> {
        py.check_signals()?;
        let states = states_list(py, &self.caller_order, snap)?;
        let round_trips: Vec<(String, f64)> = snap
            .round_trips
            .iter()
            .map(|(t, rt)| (self.task_ids[*t as usize].clone(), *rt))
            .collect();
        let live = Py::new(
            py,
            PyLiveDetail::new(snap.live.clone(), self.task_ids.clone()),
        )?;
        let tick = PyTick {
            states,
            workers: in_caller_order(&self.caller_order, &snap.workers),
            restarts: in_caller_order(&self.caller_order, &snap.restarts),
            round_trips,
            live,
        };
        self.on_tick.call1(py, (tick,)).map(|_| ())
    }
}

/// The [`PyTaskConfig`] of task `tid` among `tasks`.
fn config_of<'a, 'py>(
    tasks: &'a [PyRef<'py, PyTaskConfig>],
    tid: &str,
) -> PyResult<&'a PyRef<'py, PyTaskConfig>> {
    tasks.iter().find(|t| t.task_id == tid).ok_or_else(|| {
        to_pyerr(DaisyError::invalid(
            "tasks",
            format!("no TaskConfig for task {tid:?}; give one per task of the pipeline"),
        ))
    })
}

/// The core run plan of a distributed run.
fn distributed_plan(
    specs: &[PyRef<'_, PyTaskSpec>],
    tasks: &[PyRef<'_, PyTaskConfig>],
    run: &PyRunConfig,
) -> PyResult<daisy_core::run_plan::RunPlan> {
    let mut stores = Vec::with_capacity(specs.len());
    for spec in specs {
        stores.push(config_of(tasks, &spec.spec.task_id)?.store.clone());
    }
    let mut plan = run_plan(
        specs,
        &stores,
        run.log_dir.as_deref(),
        run.log_mode,
        run.block_tracking,
    );
    plan.strict = run.strict;
    Ok(plan)
}

/// `check_run(specs, tasks, run)`: the run plan's rules (a task that
/// measures its blocks needs a store the run uses), checked before the run
/// starts anything; `ValueError` names the parameter.
#[pyfunction]
pub fn check_run(
    specs: Vec<PyRef<'_, PyTaskSpec>>,
    tasks: Vec<PyRef<'_, PyTaskConfig>>,
    run: PyRef<'_, PyRunConfig>,
) -> PyResult<()> {
    distributed_plan(&specs, &tasks, &run)?.check().py()
}

/// Run `specs` with worker processes, one [`PyTaskConfig`] per task (in
/// any order); `on_tick` gets a [`PyTick`] every tick, its per-task lists
/// (states, workers, restarts) in the order of `specs`. Returns the run's [`PyRunResult`],
/// finished or stopped (a stopped run's carries the exception that stopped
/// it); raises only where the run could not start.
#[pyfunction]
pub fn run_distributed(
    py: Python<'_>,
    specs: Vec<PyRef<'_, PyTaskSpec>>,
    tasks: Vec<PyRef<'_, PyTaskConfig>>,
    run: PyRef<'_, PyRunConfig>,
    on_tick: Py<PyAny>,
    on_listening: Py<PyAny>,
) -> PyResult<PyRunResult> {
    let config_of = |tid: &str| config_of(&tasks, tid);
    let scheduler = distributed_plan(&specs, &tasks, &run)?.scheduler().py()?;
    let task_ids: Vec<String> = scheduler
        .pipeline()
        .specs()
        .iter()
        .map(|s| s.task_id.clone())
        .collect();
    let caller_order: Vec<usize> = specs
        .iter()
        .filter_map(|s| task_ids.iter().position(|t| *t == s.spec.task_id))
        .collect();
    let mut runtimes = Vec::with_capacity(task_ids.len());
    let mut checks = Vec::with_capacity(task_ids.len());
    for tid in &task_ids {
        let t = config_of(tid)?;
        runtimes.push(t.runtime.clone());
        checks.push(t.check_function.as_ref().map(|f| f.clone_ref(py)));
    }
    let token = daisy_core::protocol::new_token()
        .map_err(|e| to_pyerr(DaisyError::Io(format!("could not make a run token: {e}"))))?;
    let config = ServerConfig {
        host: run.host.clone(),
        port: run.port,
        tasks: runtimes.into(),
        resources: run.resources.clone(),
        log_dir: run.log_dir.clone(),
        log_mode: run.log_mode,
        token: token.clone(),
        advertise_host: run.advertise_host.clone(),
        stop_all: run.stop_all.clone(),
        wait_all: run.wait_all.clone(),
        tick: daisy_core::server::TICK,
        liveness_timeout: run.liveness_timeout,
        idle_timeout: run.idle_timeout,
        memory: run.memory.clone(),
        forecast_sample: run.forecast_sample,
    };
    config.check_resources(&task_ids).py()?;
    let stop = StopCause::default();
    let task_ids_shared = Arc::new(task_ids.clone());
    let hooks = PyHooks {
        task_ids: task_ids_shared.clone(),
        caller_order,
        checks: Arc::new(PyChecks {
            task_ids: task_ids_shared,
            checks,
            stop: stop.clone(),
        }),
        on_tick,
        on_listening,
        token,
        stop: stop.clone(),
    };
    interpreter::detach_then(
        py,
        || run_server(scheduler, config, hooks),
        |py, outcome| {
            let outcome = outcome.py()?;
            interpreter::slow_point(py, "run-result-slow");
            PyRunResult::new(py, &task_ids, &outcome, stop)
        },
    )?
}
