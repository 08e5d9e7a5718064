//! `daisy._daisy.Scheduler` and `daisy._daisy.DependencyGraph`: the core
//! scheduler and dependency graph, driven from Python.
//!
//! Conversion only: blocks become `daisy.Block` objects on the way out and
//! are identified again on the way in; the user's check functions are
//! called from the core's skip hook; the serial loop is the core's
//! `run_serial` with the user's process function plugged in. Nothing here
//! decides which block runs.

use crate::errors::{IntoPyResult, to_pyerr};
use crate::py_block::PyBlock;
use crate::py_task_spec::PyTaskSpec;
use crate::py_task_state::PyTaskState;
use daisy_core::block_profile::BlockProfiler;
use daisy_core::block_tracking::TaskTracking;
use daisy_core::dependency_graph::DependencyGraph;
use daisy_core::run_report::{BlockAggregates, TaskReport, wall_clock};
use daisy_core::worker_timeline::WorkerSummary;
use daisy_core::{Block, BlockKey, BlockStatus, DaisyError, Pipeline, Scheduler, TaskIndex};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict, PyList};

fn pipeline_from(specs: &[PyRef<'_, PyTaskSpec>]) -> PyResult<Pipeline> {
    Pipeline::new(specs.iter().map(|s| s.spec.clone()).collect()).py()
}

/// A core scheduler for `specs`, with the tracking stores (task id to
/// directory) opened and the skip masks (task id to one byte per block)
/// set. A store of another layout raises `daisy.LayoutMismatch`.
pub fn build_scheduler(
    specs: &[PyRef<'_, PyTaskSpec>],
    tracking: Option<&Bound<'_, PyDict>>,
    skip_masks: Option<&Bound<'_, PyDict>>,
    measured: &[String],
) -> PyResult<Scheduler> {
    let mut scheduler = Scheduler::new(pipeline_from(specs)?);
    for t in 0..scheduler.pipeline().len() as TaskIndex {
        let spec = scheduler.pipeline().spec(t).clone();
        if let Some(path) = tracking
            .map(|d| d.get_item(&spec.task_id))
            .transpose()?
            .flatten()
            && !path.is_none()
        {
            let path: std::path::PathBuf = path.extract()?;
            let with_stats = measured.contains(&spec.task_id);
            scheduler.set_tracking(t, TaskTracking::open(&path, &spec, with_stats).py()?);
        }
        if let Some(mask) = skip_masks
            .map(|d| d.get_item(&spec.task_id))
            .transpose()?
            .flatten()
            && !mask.is_none()
        {
            let bytes: Vec<u8> = mask.extract()?;
            scheduler.set_skip_mask(t, bytes).py()?;
        }
    }
    Ok(scheduler)
}

/// The core key of a Python block, from its scheduler key when it has one,
/// else from its task id and write ROI offset.
fn key_of(pipeline: &Pipeline, graph: &DependencyGraph, block: &PyBlock) -> PyResult<BlockKey> {
    let task_id = block.task_id.as_deref().ok_or_else(|| {
        PyValueError::new_err("block: this block has no task_id; pass a block handed out by daisy")
    })?;
    let task = pipeline.index_of(task_id).py()?;
    if let Some(key) = block.key
        && key.task == task
    {
        return Ok(key);
    }
    let grid = graph.grid(task);
    grid.position_of_write_offset(&block.write.offset())
        .map(|p| BlockKey {
            task,
            index: grid.indexer().flat(&p),
        })
        .ok_or_else(|| {
            PyValueError::new_err(format!(
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

/// A Python error that can also carry a core error (for `run_serial`).
struct RunError(PyErr);

impl From<DaisyError> for RunError {
    fn from(e: DaisyError) -> Self {
        RunError(to_pyerr(e))
    }
}

impl From<PyErr> for RunError {
    fn from(e: PyErr) -> Self {
        RunError(e)
    }
}

impl PyScheduler {
    fn reports(&self) -> Vec<TaskReport> {
        (0..self.inner.pipeline().len() as TaskIndex)
            .map(|t| {
                let state = self.inner.task_state(t);
                TaskReport {
                    task_id: self.task_ids[t as usize].clone(),
                    started_at: self.started_at,
                    finished_at: self.finished_at.max(self.started_at),
                    tracked: self.inner.tracking(t).is_some(),
                    outcome: if self.interrupted {
                        "interrupted"
                    } else if state.all_completed() {
                        "completed"
                    } else {
                        "failed"
                    }
                    .into(),
                    blocks: self.aggregates[t as usize].summary(state),
                    workers: WorkerSummary::default(),
                }
            })
            .collect()
    }
}

/// The core scheduler over a pipeline of task specs.
#[pyclass(name = "Scheduler", module = "daisy._daisy")]
pub struct PyScheduler {
    inner: Scheduler,
    task_ids: Vec<String>,
    checks: Vec<Option<Py<PyAny>>>,
    started: Vec<bool>,
    measured: Vec<bool>,
    aggregates: Vec<BlockAggregates>,
    started_at: f64,
    finished_at: f64,
    /// The last run stopped on an exception (Ctrl-C, or a block's error).
    interrupted: bool,
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
    /// store directories, `skip_masks` task ids to one byte per block.
    #[new]
    #[pyo3(signature = (specs, check_functions=None, tracking=None, skip_masks=None, measured=Vec::new()))]
    fn new(
        specs: Vec<PyRef<'_, PyTaskSpec>>,
        check_functions: Option<&Bound<'_, PyDict>>,
        tracking: Option<&Bound<'_, PyDict>>,
        skip_masks: Option<&Bound<'_, PyDict>>,
        measured: Vec<String>,
    ) -> PyResult<Self> {
        let inner = build_scheduler(&specs, tracking, skip_masks, &measured)?;
        let checks = callables_by_task(inner.pipeline(), check_functions)?;
        let task_ids = inner
            .pipeline()
            .specs()
            .iter()
            .map(|s| s.task_id.clone())
            .collect();
        let n = inner.pipeline().len();
        let measured = inner
            .pipeline()
            .specs()
            .iter()
            .map(|s| measured.contains(&s.task_id))
            .collect();
        Ok(Self {
            measured,
            aggregates: vec![BlockAggregates::default(); n],
            started_at: wall_clock(),
            finished_at: 0.0,
            interrupted: false,
            inner,
            task_ids,
            checks,
            started: vec![false; n],
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
        if block.is_some() || self.inner.task_state(task).skipped_count > 0 {
            self.started[task as usize] = true;
        }
        Ok(block.map(|b| PyBlock::from_core(&b, task_id)))
    }

    /// The last run's report as JSON: `{task_id: task report}`.
    fn report_json(&self) -> PyResult<String> {
        let map: serde_json::Map<String, serde_json::Value> = self
            .reports()
            .into_iter()
            .map(|r| {
                serde_json::to_value(&r)
                    .map(|v| (r.task_id.clone(), v))
                    .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
            })
            .collect::<PyResult<_>>()?;
        serde_json::to_string(&map)
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
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
        Ok(PyTaskState::from_core(
            self.inner.task_state(t),
            self.started[t as usize],
        ))
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
    /// its post-check returns False; the first exception stops the run and
    /// propagates unchanged.
    #[pyo3(signature = (process_functions, post_checks=None))]
    fn run_serial(
        &mut self,
        py: Python<'_>,
        process_functions: &Bound<'_, PyDict>,
        post_checks: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let funcs = callables_by_task(self.inner.pipeline(), Some(process_functions))?;
        let posts = callables_by_task(self.inner.pipeline(), post_checks)?;
        for (t, f) in funcs.iter().enumerate() {
            if f.is_none() {
                return Err(PyValueError::new_err(format!(
                    "process_function: task {:?} has none; give it a function that takes a block",
                    self.task_ids[t]
                )));
            }
        }
        self.started_at = wall_clock();
        let (checks, task_ids, started) = (&self.checks, &self.task_ids, &mut self.started);
        let (measured, aggregates) = (&self.measured, &mut self.aggregates);
        let mut profiler = BlockProfiler::new();
        let result = daisy_core::serial::run_serial::<RunError>(
            &mut self.inner,
            |b| Ok(Self::call_check(py, checks, task_ids, b)?),
            |b| {
                let t = b.key.task as usize;
                started[t] = true;
                let block = Py::new(py, PyBlock::from_core(b, &task_ids[t]))?;
                if measured[t] {
                    profiler.start();
                }
                let called = funcs[t]
                    .as_ref()
                    .map(|f| f.call1(py, (block.clone_ref(py),)))
                    .transpose();
                let outer = if measured[t] { profiler.stop() } else { None };
                called?;
                let mut pb = block.borrow_mut(py);
                // the first measurement attached wins (profile_block inside)
                if pb.stats.is_none() {
                    pb.stats = outer;
                }
                let stats = pb.stats;
                let status = pb.status;
                drop(pb);
                b.stats = stats;
                if status == BlockStatus::Failed {
                    return Ok(BlockStatus::Failed);
                }
                if let Some(post) = &posts[t]
                    && !post.call1(py, (block,))?.bind(py).is_truthy()?
                {
                    return Ok(BlockStatus::Failed);
                }
                aggregates[t].record_success(None, stats.as_ref());
                Ok(BlockStatus::Success)
            },
        );
        for (t, s) in self.started.iter_mut().enumerate() {
            *s |= self.inner.task_state(t as TaskIndex).skipped_count > 0;
        }
        let flushed = self.inner.flush_tracking().py();
        self.finished_at = wall_clock();
        self.interrupted = result.is_err();
        let reports = self.reports();
        for (t, report) in reports.iter().enumerate() {
            if let Some(tracking) = self.inner.tracking(t as TaskIndex)
                && let Err(e) = report.append_to(tracking.path())
            {
                tracing::warn!(
                    "could not append to {}/runs.jsonl: {e}",
                    tracking.path().display()
                );
            }
        }
        result.map_err(|e| e.0)?;
        flushed
    }
}

/// The block dependency graph of a pipeline (daisy 1.x's
/// `DependencyGraph` queries).
#[pyclass(name = "DependencyGraph", module = "daisy._daisy", frozen)]
pub struct PyDependencyGraph {
    graph: DependencyGraph,
    task_ids: Vec<String>,
}

impl PyDependencyGraph {
    fn blocks_of(&self, py: Python<'_>, keys: &[BlockKey]) -> PyResult<Py<PyList>> {
        let items: Vec<PyBlock> = keys
            .iter()
            .map(|k| PyBlock::from_core(&self.graph.block(*k), &self.task_ids[k.task as usize]))
            .collect();
        Ok(PyList::new(py, items)?.unbind())
    }
}

#[pymethods]
impl PyDependencyGraph {
    #[new]
    fn new(specs: Vec<PyRef<'_, PyTaskSpec>>) -> PyResult<Self> {
        let pipeline = pipeline_from(&specs)?;
        let task_ids = pipeline.specs().iter().map(|s| s.task_id.clone()).collect();
        Ok(Self {
            graph: DependencyGraph::new(pipeline),
            task_ids,
        })
    }

    /// Task ids in pipeline (topological) order.
    #[getter]
    fn task_ids(&self) -> Vec<String> {
        self.task_ids.clone()
    }

    /// Number of blocks of a task.
    fn num_blocks(&self, task_id: &str) -> PyResult<u64> {
        Ok(self
            .graph
            .num_blocks(self.graph.pipeline().index_of(task_id).py()?))
    }

    /// Number of blocks of a task that wait for no other block.
    fn num_roots(&self, task_id: &str) -> PyResult<u64> {
        Ok(self
            .graph
            .count_roots(self.graph.pipeline().index_of(task_id).py()?))
    }

    /// Every block of a task, in C order of the block grid.
    fn blocks(&self, py: Python<'_>, task_id: &str) -> PyResult<Py<PyList>> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let keys: Vec<BlockKey> = (0..self.graph.num_blocks(t))
            .map(|index| BlockKey { task: t, index })
            .collect();
        self.blocks_of(py, &keys)
    }

    /// The blocks of a task that wait for no other block.
    fn roots(&self, py: Python<'_>, task_id: &str) -> PyResult<Py<PyList>> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let mut cursor = self.graph.root_cursor(t);
        let mut scratch = Vec::new();
        let mut keys = Vec::new();
        while let Some(b) = self.graph.next_root(&mut cursor, &mut scratch) {
            keys.push(b.key);
        }
        self.blocks_of(py, &keys)
    }

    /// The blocks this block waits for.
    fn upstream(&self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<Py<PyList>> {
        let key = key_of(self.graph.pipeline(), &self.graph, &block)?;
        let mut out = Vec::new();
        self.graph.upstream(&self.graph.block(key), &mut out);
        self.blocks_of(py, &out)
    }

    /// The blocks that wait for this block.
    fn downstream(&self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<Py<PyList>> {
        let key = key_of(self.graph.pipeline(), &self.graph, &block)?;
        let mut out = Vec::new();
        self.graph.downstream(&self.graph.block(key), &mut out);
        self.blocks_of(py, &out)
    }
}
