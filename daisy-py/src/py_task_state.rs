//! `daisy.TaskState`: a snapshot of one task's block counts, with the
//! attribute names of daisy 1.x.

use daisy_core::TaskState;
use pyo3::prelude::*;

/// Block counts of one task: `total_block_count`, `ready_count`,
/// `processing_count`, `pending_count`, `completed_count` (skipped blocks
/// included), `skipped_count`, `failed_count`, `orphaned_count`.
#[pyclass(name = "TaskState", module = "daisy.task_state")]
#[derive(Clone, Default)]
pub struct PyTaskState {
    /// The core's counts.
    inner: TaskState,
}

impl PyTaskState {
    /// Snapshot of a core state.
    pub fn from_core(s: &TaskState) -> Self {
        Self { inner: s.clone() }
    }
}

#[pymethods]
impl PyTaskState {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Whether any block of the task was handed out or skipped.
    #[getter]
    fn started(&self) -> bool {
        self.inner.started
    }

    /// All blocks of the task.
    #[getter]
    fn total_block_count(&self) -> u64 {
        self.inner.total_block_count
    }

    /// Blocks that can be handed out now.
    #[getter]
    fn ready_count(&self) -> u64 {
        self.inner.ready_count
    }

    /// Blocks out with a worker.
    #[getter]
    fn processing_count(&self) -> u64 {
        self.inner.processing_count
    }

    /// Blocks finished successfully (skipped ones included).
    #[getter]
    fn completed_count(&self) -> u64 {
        self.inner.completed_count
    }

    /// Blocks found done before dispatch.
    #[getter]
    fn skipped_count(&self) -> u64 {
        self.inner.skipped_count
    }

    /// Blocks that failed past their retries.
    #[getter]
    fn failed_count(&self) -> u64 {
        self.inner.failed_count
    }

    /// Blocks that can never run because an upstream block failed.
    #[getter]
    fn orphaned_count(&self) -> u64 {
        self.inner.orphaned_count
    }

    /// Of the orphaned blocks, those cut off by a failed block of this
    /// task (a conflicting neighbour, directly or through other orphans).
    #[getter]
    fn orphaned_by_neighbour_count(&self) -> u64 {
        self.inner.orphaned_by_neighbour_count
    }

    /// Of the orphaned blocks, those cut off by a failed block (or the
    /// abandoning) of an upstream task.
    #[getter]
    fn orphaned_by_upstream_count(&self) -> u64 {
        self.inner.orphaned_by_upstream_count
    }

    /// Failed attempts, retried or not.
    #[getter]
    fn failed_attempts(&self) -> u64 {
        self.inner.failed_attempts
    }

    /// Blocks waiting for upstream blocks.
    #[getter]
    fn pending_count(&self) -> u64 {
        self.inner.pending_count()
    }

    /// True once every block is completed, failed or orphaned.
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// True if every block completed.
    #[getter]
    fn all_completed(&self) -> bool {
        self.inner.all_completed()
    }

    /// Worker processes started for the task.
    #[getter]
    fn worker_start_count(&self) -> u64 {
        self.inner.worker_start_count
    }

    /// Workers that stopped unexpectedly and were replaced (what
    /// `max_worker_restarts` caps).
    #[getter]
    fn worker_restart_count(&self) -> u64 {
        self.inner.worker_restart_count
    }

    /// Worker errors: failed attempts a worker reported and blocks lost
    /// with a worker that died (timeouts count in `timeout_reclaim_count`).
    #[getter]
    fn worker_failure_count(&self) -> u64 {
        self.inner.worker_failure_count
    }

    /// Blocks reclaimed because they ran past the task's timeout.
    #[getter]
    fn timeout_reclaim_count(&self) -> u64 {
        self.inner.timeout_reclaim_count
    }

    /// Times the memory guard stopped a block's worker before the kernel's
    /// OOM killer would and held the block back to run again: neither a
    /// failed attempt nor a worker death.
    #[getter]
    fn held_back_count(&self) -> u64 {
        self.inner.held_back_count
    }

    /// The task's per-block timeout in seconds, or None without one.
    #[getter]
    fn timeout_secs(&self) -> Option<f64> {
        self.inner.timeout.map(|t| t.as_secs_f64())
    }

    /// True once the task was given up (its workers kept dying, or an
    /// upstream task was given up).
    #[getter]
    fn abandoned(&self) -> bool {
        self.inner.abandon_reason.is_some()
    }

    /// Why the task was given up, or None.
    #[getter]
    fn abandon_reason(&self) -> Option<String> {
        self.inner.abandon_reason.clone()
    }

    /// What to change before a rerun of a task that was given up ("give
    /// its workers more memory ..."), or None.
    #[getter]
    fn abandon_next(&self) -> Option<String> {
        self.inner.abandon_next.clone()
    }

    /// The upstream task whose abandonment gave this one up, where that is
    /// why; None otherwise.
    #[getter]
    fn abandoned_by(&self) -> Option<String> {
        self.inner.abandoned_by.clone()
    }

    /// The first worker error's text (a traceback for a Python failure), or
    /// None.
    #[getter]
    fn first_worker_error(&self) -> Option<String> {
        self.inner.first_worker_error.clone()
    }

    /// The latest worker error's text, or None.
    #[getter]
    fn last_worker_error(&self) -> Option<String> {
        self.inner.last_worker_error.clone()
    }

    fn __repr__(&self) -> String {
        self.__str__()
    }

    fn __str__(&self) -> String {
        format!(
            "Started: {}\nTotal Blocks: {}\nReady: {}\nProcessing: {}\nPending: {}\nCompleted: {}\n\
             Skipped: {}\nFailed: {}\nOrphaned: {}\n",
            if self.inner.started { "True" } else { "False" },
            self.inner.total_block_count,
            self.inner.ready_count,
            self.inner.processing_count,
            self.inner.pending_count(),
            self.inner.completed_count,
            self.inner.skipped_count,
            self.inner.failed_count,
            self.inner.orphaned_count
        )
    }
}
