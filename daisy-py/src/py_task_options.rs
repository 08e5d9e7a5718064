//! `daisy._daisy.TaskOptions`: a task's run options checked by the core's
//! rules ([`daisy_core::task_options`]). The Python `Task` builds one at
//! construction (so bad values fail there, naming the parameter) and
//! again when a run starts, from its current attributes, and hands it to
//! the runner; this file only converts.

use crate::errors::IntoPyResult;
use daisy_core::serial::Measure;
use daisy_core::task_options::{GivenOptions, TaskOptions};
use pyo3::prelude::*;
use std::collections::BTreeMap;

/// A task's validated run options (workers, retries, restarts, timeout,
/// resources, measurement).
#[pyclass(name = "TaskOptions", module = "daisy._daisy", frozen)]
pub struct PyTaskOptions {
    pub(crate) options: TaskOptions,
}

#[pymethods]
impl PyTaskOptions {
    /// Check a task's options; `ValueError` names the parameter at fault
    /// (`max_workers_name` is the name the worker count was given under).
    #[new]
    #[pyo3(signature = (task_id, *, max_workers, max_retries, max_worker_restarts, timeout, requires, resource_tracking, gpu_tracking, max_workers_name="max_workers", idle_timeout=None, auto_workers=false))]
    #[allow(clippy::too_many_arguments)] // the Task constructor's keywords
    fn new(
        task_id: &str,
        max_workers: i128,
        max_retries: i128,
        max_worker_restarts: i128,
        timeout: Option<f64>,
        requires: BTreeMap<String, i128>,
        resource_tracking: bool,
        gpu_tracking: Option<bool>,
        max_workers_name: &str,
        idle_timeout: Option<f64>,
        auto_workers: bool,
    ) -> PyResult<Self> {
        let options = TaskOptions::new(&GivenOptions {
            task_id,
            max_workers,
            max_workers_name,
            auto_workers,
            max_retries,
            max_worker_restarts,
            timeout,
            idle_timeout,
            requires: requires.into_iter().collect(),
            resource_tracking,
            gpu_tracking,
        })
        .py()?;
        Ok(Self { options })
    }

    /// Workers at once.
    #[getter]
    fn max_workers(&self) -> u32 {
        self.options.max_workers
    }

    /// `max_workers="auto"`: the run chooses the count when it starts.
    #[getter]
    fn auto_workers(&self) -> bool {
        self.options.auto_workers
    }

    /// Retries of a failed block.
    #[getter]
    fn max_retries(&self) -> u32 {
        self.options.max_retries
    }

    /// Unexpected worker deaths tolerated.
    #[getter]
    fn max_worker_restarts(&self) -> u32 {
        self.options.max_worker_restarts
    }

    /// The block timeout in seconds, or None.
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.options.timeout.map(|t| t.as_secs_f64())
    }

    /// Seconds a worker may wait for a block before it is handed back, or
    /// None (the run's or the spawner's setting).
    #[getter]
    fn idle_timeout(&self) -> Option<f64> {
        self.options.idle_timeout.map(|t| t.as_secs_f64())
    }

    /// Resources one worker holds.
    #[getter]
    fn requires(&self) -> BTreeMap<String, u64> {
        self.options.requires.clone()
    }

    /// Whether blocks are measured.
    #[getter]
    fn resource_tracking(&self) -> bool {
        self.options.measure != Measure::Off
    }

    /// Whether the measurements include GPU figures (as given, or by
    /// default when the task measures its blocks and requires a GPU).
    #[getter]
    fn gpu_tracking(&self) -> bool {
        self.options.measure == Measure::WithGpu
    }
}
