//! Per-task block counts: [`TaskState`].
//!
//! The counts balance by construction: every block of a task is in exactly
//! one of pending (waiting for upstream blocks), ready, processing,
//! completed, failed or orphaned. Skipped blocks (found done before
//! dispatch) are completed blocks that never ran; `skipped_count` counts
//! them *within* `completed_count`, as daisy 1.x does.

/// Block counts of one task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskState {
    /// All blocks of the task.
    pub total_block_count: u64,
    /// Blocks that can be handed out now (including retries).
    pub ready_count: u64,
    /// Blocks handed out and not yet returned.
    pub processing_count: u64,
    /// Blocks that finished successfully, skipped blocks included.
    pub completed_count: u64,
    /// Completed blocks that were found done and never ran.
    pub skipped_count: u64,
    /// Blocks that failed more often than the retry budget allows.
    pub failed_count: u64,
    /// Blocks that can never run because an upstream block failed.
    pub orphaned_count: u64,
    /// Failed attempts, retried or not.
    pub failed_attempts: u64,
}

impl TaskState {
    /// Blocks still waiting for upstream blocks.
    pub fn pending_count(&self) -> u64 {
        self.total_block_count.saturating_sub(
            self.ready_count
                + self.processing_count
                + self.completed_count
                + self.failed_count
                + self.orphaned_count,
        )
    }

    /// True once every block is completed, failed or orphaned.
    pub fn is_done(&self) -> bool {
        self.completed_count + self.failed_count + self.orphaned_count >= self.total_block_count
    }

    /// True if every block completed.
    pub fn all_completed(&self) -> bool {
        self.completed_count == self.total_block_count
    }
}
