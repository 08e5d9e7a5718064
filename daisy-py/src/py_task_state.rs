//! `daisy.TaskState`: a snapshot of one task's block counts, with the
//! attribute names of daisy 1.x.

use daisy_core::TaskState;
use pyo3::prelude::*;

/// Block counts of one task: `total_block_count`, `ready_count`,
/// `processing_count`, `pending_count`, `completed_count` (skipped blocks
/// included), `skipped_count`, `failed_count`, `orphaned_count`.
#[pyclass(name = "TaskState", module = "daisy.task_state", get_all)]
#[derive(Clone, Default)]
pub struct PyTaskState {
    /// Whether any block of the task was handed out or skipped.
    pub started: bool,
    /// All blocks of the task.
    pub total_block_count: u64,
    /// Blocks that can be handed out now.
    pub ready_count: u64,
    /// Blocks out with a worker.
    pub processing_count: u64,
    /// Blocks finished successfully (skipped ones included).
    pub completed_count: u64,
    /// Blocks found done before dispatch.
    pub skipped_count: u64,
    /// Blocks that failed past their retries.
    pub failed_count: u64,
    /// Blocks that can never run because an upstream block failed.
    pub orphaned_count: u64,
    /// Failed attempts, retried or not.
    pub failed_attempts: u64,
}

impl PyTaskState {
    /// Snapshot of a core state.
    pub fn from_core(s: &TaskState, started: bool) -> Self {
        Self {
            started,
            total_block_count: s.total_block_count,
            ready_count: s.ready_count,
            processing_count: s.processing_count,
            completed_count: s.completed_count,
            skipped_count: s.skipped_count,
            failed_count: s.failed_count,
            orphaned_count: s.orphaned_count,
            failed_attempts: s.failed_attempts,
        }
    }

    fn core(&self) -> TaskState {
        TaskState {
            total_block_count: self.total_block_count,
            ready_count: self.ready_count,
            processing_count: self.processing_count,
            completed_count: self.completed_count,
            skipped_count: self.skipped_count,
            failed_count: self.failed_count,
            orphaned_count: self.orphaned_count,
            failed_attempts: self.failed_attempts,
        }
    }
}

#[pymethods]
impl PyTaskState {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Blocks waiting for upstream blocks.
    #[getter]
    fn pending_count(&self) -> u64 {
        self.core().pending_count()
    }

    /// True once every block is completed, failed or orphaned.
    fn is_done(&self) -> bool {
        self.core().is_done()
    }

    /// True if every block completed.
    #[getter]
    fn all_completed(&self) -> bool {
        self.core().all_completed()
    }

    fn __repr__(&self) -> String {
        self.__str__()
    }

    fn __str__(&self) -> String {
        format!(
            "Started: {}\nTotal Blocks: {}\nReady: {}\nProcessing: {}\nPending: {}\nCompleted: {}\n\
             Skipped: {}\nFailed: {}\nOrphaned: {}\n",
            if self.started { "True" } else { "False" },
            self.total_block_count,
            self.ready_count,
            self.processing_count,
            self.pending_count(),
            self.completed_count,
            self.skipped_count,
            self.failed_count,
            self.orphaned_count
        )
    }
}
