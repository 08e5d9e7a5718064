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
    /// Of the orphaned blocks, those cut off by a failed block of their own
    /// task (a conflicting neighbour, directly or through other orphans).
    pub orphaned_by_neighbour_count: u64,
    /// Of the orphaned blocks, those cut off by a failed block (or an
    /// abandoned run) of an upstream task.
    pub orphaned_by_upstream_count: u64,
    /// Failed attempts, retried or not.
    pub failed_attempts: u64,
    /// Worker processes started for the task (daisy 2.0.0's name).
    pub worker_start_count: u64,
    /// Workers that stopped unexpectedly (crashed, or left without taking
    /// a block while work remained) and were replaced (daisy 2.0.0's
    /// count: a task abandoned after `max_worker_restarts=3` shows 3).
    pub worker_restart_count: u64,
    /// Worker errors: failed attempts a worker reported (the block function
    /// raised, set FAILED, or the check failed), blocks lost with a worker
    /// that died, and workers that died holding none (not the timeout's
    /// reclaims: see below).
    pub worker_failure_count: u64,
    /// Blocks reclaimed because they ran past the task's `timeout`.
    pub timeout_reclaim_count: u64,
    /// Times the memory guard stopped a block's worker before the kernel's
    /// OOM killer would and held the block back to run again (none is a
    /// failed attempt or a worker death; see `server::memory_gate`).
    pub held_back_count: u64,
    /// The task's per-block timeout, if it has one.
    pub timeout: Option<std::time::Duration>,
    /// Why the task was given up, once it was.
    pub abandon_reason: Option<String>,
    /// What to change before a rerun, once the task was given up.
    pub abandon_next: Option<String>,
    /// The upstream task whose abandonment gave this one up, where that is
    /// why.
    pub abandoned_by: Option<String>,
    /// Whether work on the task has begun: a block of it was handed out
    /// or found done, or a run (which begins every task of its pipeline)
    /// started (daisy 1.x's `started`; see `Scheduler::begin_run`).
    pub started: bool,
    /// The first worker error's text (for a Python failure, its traceback;
    /// its last [`WORKER_ERROR_BYTES`]).
    pub first_worker_error: Option<String>,
    /// The latest worker error's text, likewise.
    pub last_worker_error: Option<String>,
}

/// The most of a worker error's text a state keeps (its end, where a Python
/// traceback names the exception): states are copied for every progress
/// snapshot, so they must stay small.
pub const WORKER_ERROR_BYTES: usize = 16 << 10;

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

    /// Keep a worker error's text as the first (if none yet) and the last.
    pub fn note_worker_error(&mut self, text: &str) {
        let mut start = text.len().saturating_sub(WORKER_ERROR_BYTES);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let kept = text[start..].to_string();
        if self.first_worker_error.is_none() {
            self.first_worker_error = Some(kept.clone());
        }
        self.last_worker_error = Some(kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_errors_keep_the_first_and_the_last_text_bounded() {
        let mut s = TaskState::default();
        s.note_worker_error("ValueError: one");
        s.note_worker_error(&format!("{}\nKeyError: two", "é".repeat(20_000)));
        assert_eq!(s.first_worker_error.as_deref(), Some("ValueError: one"));
        let last = s.last_worker_error.unwrap();
        assert!(last.len() <= WORKER_ERROR_BYTES && last.ends_with("KeyError: two"));
    }
}

/// Why a task is given up, and what to change before a rerun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abandonment {
    /// What happened, in the user's words ("its workers were killed ...").
    pub reason: String,
    /// What to change ("give its workers more memory ..."), without the
    /// rerun that follows it.
    pub next: String,
}

impl Abandonment {
    /// A task whose workers could not be started: `reason` says why.
    pub fn start_failed(reason: String) -> Self {
        Self {
            reason,
            next: "fix what stops its workers from starting (the error above)".into(),
        }
    }
}
