//! `daisy._daisy.Scheduler` and `daisy._daisy.DependencyGraph`: the core
//! scheduler and dependency graph, driven from Python.
//!
//! Conversion only: blocks become `daisy.Block` objects on the way out and
//! are identified again on the way in; the user's check functions are
//! called from the core's skip hook; the serial run is the core's
//! `run_serial` with the user's functions plugged in as its hooks, and its
//! outcome is the core's. Nothing here decides which block runs or counts
//! anything.

use crate::errors::{IntoPyResult, StopCause};
use crate::interpreter;
use crate::py_block::PyBlock;
use crate::py_run_result::PyRunResult;
use crate::py_task_spec::PyTaskSpec;
use crate::py_task_state::PyTaskState;
use daisy_core::dependency_graph::DependencyGraph;
use daisy_core::run_plan::{RunPlan, TaskPlan};
use daisy_core::serial::{Measure, SerialHooks};
use daisy_core::server::LogMode;
use daisy_core::task_outputs::DeclaredOutput;
use daisy_core::{Block, BlockKey, BlockStatus, Coord, DaisyError, Pipeline, Scheduler, TaskIndex};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict};

pub(crate) fn pipeline_from(specs: &[PyRef<'_, PyTaskSpec>]) -> PyResult<Pipeline> {
    Pipeline::new(specs.iter().map(|s| s.spec.clone()).collect()).py()
}

/// What one task keeps, skips and measures, as Python gives it: the
/// [`TaskPlan`] but for its spec.
#[derive(Clone, Debug, Default)]
pub struct TaskStoreOptions {
    /// The task's tracking store directory (None: untracked).
    pub tracking_path: Option<std::path::PathBuf>,
    /// One byte per block, C order; non-zero skips the block.
    pub skip_mask: Option<Vec<u8>>,
    /// How its blocks are measured.
    pub measure: Measure,
    /// The arrays it declares it writes.
    pub outputs: Vec<DeclaredOutput>,
}

/// One declared output as Python describes it: its directory, the shape
/// of the unit its store writes whole in world units (None: not known yet)
/// and where its chunk grid starts.
pub type OutputArgs = (std::path::PathBuf, Option<Vec<i64>>, Vec<i64>);

/// The core's declared outputs from their Python descriptions.
pub fn declared_outputs(outputs: Vec<OutputArgs>) -> PyResult<Vec<DeclaredOutput>> {
    outputs
        .into_iter()
        .map(|(path, chunk, offset)| {
            Ok(DeclaredOutput {
                path,
                chunk: chunk.map(|c| Coord::new(&c)).transpose().py()?,
                offset: Coord::new(&offset).py()?,
            })
        })
        .collect()
}

/// The value of `tid` in an optional dict, None for a missing key or None.
fn entry<'py>(d: Option<&Bound<'py, PyDict>>, tid: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(d.map(|d| d.get_item(tid))
        .transpose()?
        .flatten()
        .filter(|v| !v.is_none()))
}

/// The core run plan of `specs`, with `stores` (one per spec, in the same
/// order) and the run's log directory and mode (where untracked tasks'
/// histories go); the core's plan builds the scheduler.
pub fn run_plan(
    specs: &[PyRef<'_, PyTaskSpec>],
    stores: &[TaskStoreOptions],
    log_dir: Option<&std::path::Path>,
    log_mode: LogMode,
    block_tracking: bool,
) -> RunPlan {
    RunPlan {
        tasks: specs
            .iter()
            .zip(stores)
            .map(|(spec, store)| TaskPlan {
                spec: spec.spec.clone(),
                tracking_path: store.tracking_path.clone(),
                skip_mask: store.skip_mask.clone(),
                measure: store.measure,
                outputs: store.outputs.clone(),
            })
            .collect(),
        history_base: RunPlan::history_base_for(log_dir, log_mode),
        block_tracking,
        strict: false, // the runs that take `strict` set it
    }
}

/// The core key of a Python block, from its scheduler key when it has one,
/// else from its task id and write ROI offset.
pub(crate) fn key_of(
    pipeline: &Pipeline,
    graph: &DependencyGraph,
    block: &PyBlock,
) -> PyResult<BlockKey> {
    let task_id = block.task_id.as_deref().ok_or_else(|| {
        crate::errors::bad_value(
            "block: this block has no task_id; pass a block handed out by daisy",
        )
    })?;
    let task = pipeline.index_of(task_id).py()?;
    if let Some(key) = block.key
        && key.task == task
    {
        return Ok(key);
    }
    graph.locate(task, &block.write.offset()).ok_or_else(|| {
        crate::errors::bad_value(format!(
            "block: no block of task {task_id:?} writes at offset {}; pass a block handed out \
                 by daisy",
            block.write.offset()
        ))
    })
}

/// Per-task Python callables, by task index.
fn callables_by_task(
    pipeline: &Pipeline,
    funcs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<Option<Py<PyAny>>>> {
    (0..pipeline.len() as TaskIndex)
        .map(|t| {
            let Some(d) = funcs else { return Ok(None) };
            match d.get_item(&pipeline.spec(t).task_id)? {
                Some(f) if !f.is_none() => Ok(Some(f.unbind())),
                _ => Ok(None),
            }
        })
        .collect()
}

/// The user's functions as the core serial runner's hooks.
struct PySerialHooks<'a, 'py> {
    py: Python<'py>,
    task_ids: &'a [String],
    checks: &'a [Option<Py<PyAny>>],
    funcs: Vec<Option<Py<PyAny>>>,
    posts: Vec<Option<Py<PyAny>>>,
    stop: StopCause,
}

impl PySerialHooks<'_, '_> {
    /// Stop before the next block once the interpreter exits (a serial run
    /// in a daemon thread; see [`interpreter`]).
    fn still_running(&self) -> Result<(), DaisyError> {
        if interpreter::exiting() {
            return Err(self.stop.stop(interpreter::exiting_error()));
        }
        Ok(())
    }

    fn py_block(&self, block: &Block) -> PyResult<Py<PyBlock>> {
        Py::new(
            self.py,
            PyBlock::from_core(block, &self.task_ids[block.key.task as usize]),
        )
    }
}

impl SerialHooks for PySerialHooks<'_, '_> {
    fn already_done(&mut self, block: &Block) -> Result<bool, DaisyError> {
        self.still_running()?;
        PyScheduler::call_check(self.py, self.checks, self.task_ids, block)
            .map_err(|e| self.stop.raised(self.py, e))
    }

    fn process(&mut self, block: &mut Block) -> Result<BlockStatus, DaisyError> {
        self.still_running()?;
        let t = block.key.task as usize;
        let called = (|| {
            let b = self.py_block(block)?;
            if let Some(f) = &self.funcs[t] {
                f.call1(self.py, (b.clone_ref(self.py),))?;
            }
            let b = b.borrow(self.py);
            Ok::<_, PyErr>((b.status, b.stats))
        })();
        let (status, stats) = called.map_err(|e| self.stop.raised(self.py, e))?;
        block.stats = stats;
        Ok(status)
    }

    fn post_check(&mut self, block: &Block) -> Result<bool, DaisyError> {
        let Some(post) = &self.posts[block.key.task as usize] else {
            return Ok(true);
        };
        self.py_block(block)
            .and_then(|b| post.call1(self.py, (b,))?.bind(self.py).is_truthy())
            .map_err(|e| self.stop.raised(self.py, e))
    }
}

/// The core scheduler over a pipeline of task specs.
#[pyclass(name = "Scheduler", module = "daisy._daisy")]
pub struct PyScheduler {
    inner: Scheduler,
    task_ids: Vec<String>,
    checks: Vec<Option<Py<PyAny>>>,
    /// Per task: how its blocks are measured.
    measure: Vec<Measure>,
}

impl PyScheduler {
    fn call_check(
        py: Python<'_>,
        checks: &[Option<Py<PyAny>>],
        task_ids: &[String],
        block: &Block,
    ) -> PyResult<bool> {
        match &checks[block.key.task as usize] {
            None => Ok(false),
            Some(f) => {
                let b = Py::new(
                    py,
                    PyBlock::from_core(block, &task_ids[block.key.task as usize]),
                )?;
                f.call1(py, (b,))?.bind(py).is_truthy()
            }
        }
    }
}

#[pymethods]
impl PyScheduler {
    /// `Scheduler(specs, check_functions=None, tracking=None,
    /// skip_masks=None)`: `check_functions` maps task ids to callables that
    /// return True for blocks already done, `tracking` task ids to tracking
    /// store directories, `skip_masks` task ids to one byte per block;
    /// `resource_tracking` and `gpu_tracking` name the tasks that measure
    /// their blocks, and those that add GPU figures; `block_tracking=False`
    /// runs without the stores (daisy 2.0.0's option); `strict=True`
    /// refuses a pipeline whose downstream blocks read where no upstream
    /// block writes; `outputs` maps task ids to their declared outputs
    /// (`(directory, chunk or None, offset)` in world units).
    #[new]
    #[pyo3(signature = (specs, check_functions=None, tracking=None, skip_masks=None, resource_tracking=Vec::new(), gpu_tracking=Vec::new(), log_dir=None, log_mode="file", block_tracking=true, strict=false, outputs=None))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        specs: Vec<PyRef<'_, PyTaskSpec>>,
        check_functions: Option<&Bound<'_, PyDict>>,
        tracking: Option<&Bound<'_, PyDict>>,
        skip_masks: Option<&Bound<'_, PyDict>>,
        resource_tracking: Vec<String>,
        gpu_tracking: Vec<String>,
        log_dir: Option<std::path::PathBuf>,
        log_mode: &str,
        block_tracking: bool,
        strict: bool,
        outputs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut stores = Vec::with_capacity(specs.len());
        for spec in &specs {
            let tid = &spec.spec.task_id;
            let declared: Vec<OutputArgs> = entry(outputs, tid)?
                .map(|o| o.extract())
                .transpose()?
                .unwrap_or_default();
            stores.push(TaskStoreOptions {
                tracking_path: entry(tracking, tid)?.map(|p| p.extract()).transpose()?,
                skip_mask: entry(skip_masks, tid)?.map(|m| m.extract()).transpose()?,
                measure: Measure::of(resource_tracking.contains(tid), gpu_tracking.contains(tid)),
                outputs: declared_outputs(declared)?,
            });
        }
        let mut plan = run_plan(
            &specs,
            &stores,
            log_dir.as_deref(),
            log_mode.parse().py()?,
            block_tracking,
        );
        plan.strict = strict;
        let inner = plan.scheduler().py()?;
        let checks = callables_by_task(inner.pipeline(), check_functions)?;
        let task_ids = inner
            .pipeline()
            .specs()
            .iter()
            .map(|s| s.task_id.clone())
            .collect();
        let measure = plan.measures(inner.pipeline());
        Ok(Self {
            measure,
            inner,
            task_ids,
            checks,
        })
    }

    /// Task ids in pipeline (topological) order.
    #[getter]
    fn task_ids(&self) -> Vec<String> {
        self.task_ids.clone()
    }

    /// The next ready block of `task_id`, or None if none is ready now.
    fn acquire_block(&mut self, py: Python<'_>, task_id: &str) -> PyResult<Option<PyBlock>> {
        let task = self.inner.pipeline().index_of(task_id).py()?;
        let (checks, task_ids) = (&self.checks, &self.task_ids);
        let block = self
            .inner
            .acquire_block(task, |b| Self::call_check(py, checks, task_ids, b))?;
        Ok(block.map(|b| PyBlock::from_core(&b, task_id)))
    }

    /// Write the tracking stores' pages to disk.
    fn flush(&self) -> PyResult<()> {
        self.inner.flush_tracking().py()
    }

    /// Hand back a block with its status set to SUCCESS or FAILED.
    fn release_block(&mut self, block: PyRef<'_, PyBlock>) -> PyResult<()> {
        let key = key_of(self.inner.pipeline(), self.inner.graph(), &block)?;
        self.inner.release_block(key, block.status).py()?;
        Ok(())
    }

    /// A snapshot of one task's counts.
    fn task_state(&self, task_id: &str) -> PyResult<PyTaskState> {
        let t = self.inner.pipeline().index_of(task_id).py()?;
        Ok(PyTaskState::from_core(self.inner.task_state(t)))
    }

    /// Ids of the tasks that have a block ready now.
    fn ready_task_ids(&self) -> Vec<String> {
        self.inner
            .ready_tasks()
            .map(|t| self.task_ids[t as usize].clone())
            .collect()
    }

    /// True once every block is completed, failed or orphaned.
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// Run every block in this thread: `process_functions` and
    /// `post_checks` map task ids to callables. A block whose function
    /// returns normally succeeds unless it set `block.status = FAILED` or
    /// its post-check returns False; the first exception stops the run,
    /// which returns its result with that exception (`stopped`) for the
    /// caller to raise.
    #[pyo3(signature = (process_functions, post_checks=None))]
    fn run_serial(
        &mut self,
        py: Python<'_>,
        process_functions: &Bound<'_, PyDict>,
        post_checks: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyRunResult> {
        let funcs = callables_by_task(self.inner.pipeline(), Some(process_functions))?;
        let posts = callables_by_task(self.inner.pipeline(), post_checks)?;
        for (t, f) in funcs.iter().enumerate() {
            if f.is_none() {
                return Err(crate::errors::bad_value(format!(
                    "process_function: task {:?} has none; give it a function that takes a block",
                    self.task_ids[t]
                )));
            }
        }
        let _busy = interpreter::Busy::enter()?;
        let mut hooks = PySerialHooks {
            py,
            task_ids: &self.task_ids,
            checks: &self.checks,
            funcs,
            posts,
            stop: StopCause::default(),
        };
        let outcome = daisy_core::serial::run_serial(&mut self.inner, &self.measure, &mut hooks);
        let stop = hooks.stop;
        PyRunResult::new(py, &self.task_ids, &outcome, stop)
    }
}
