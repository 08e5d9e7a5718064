//! The check stage: a task's `check_function` asked of its ready blocks
//! off the server's thread. [`CheckStage`] owns which block of which task
//! is out for a check.
//!
//! ## Why a stage of its own
//! A check is user code, and typical ones are slow: they look for a
//! block's output on a shared filesystem (0.2 s a call is common). Asked on
//! the server's single thread, as it was, one task's check stalled every
//! worker of every task: a task with a 0.2 s check stretched an unrelated
//! task's 300 fast blocks from 0.36 s to 4.2 s. So checks go to tokio's
//! blocking pool (`spawn_blocking`, its home for blocking work), and their
//! answers come back to the main loop as messages ([`Checked`]).
//!
//! ## One call at a time per task, a batch ahead
//! A task's check is called for one block at a time, as it was when checks
//! ran inline: a user's check need not be thread-safe, and its task's pace
//! is its own. Blocks go to the pool in batches of up to [`CHECK_AHEAD`]
//! (fewer when fewer are ready), checked in order on one thread, each
//! answer sent back as soon as it is known: one hop to the pool and one
//! GIL acquisition per batch, not per block. A block stays ready while it
//! is checked (the scheduler holds it back from hand-out,
//! `Scheduler::take_for_check`); its answer skips it or queues it for the
//! next worker of its task, in order. The next batch is asked when one is
//! done and fewer than half a batch of checked blocks wait. A task whose
//! check finds every block done gets no worker: before a task's first
//! worker starts, its blocks are checked until one needs work.

use super::policy;
use crate::block::{Block, BlockKey, PerTask, TaskIndex};
use crate::error::DaisyError;
use crate::scheduler::Scheduler;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// How many blocks of a task are checked ahead of hand-out, at most. The
/// hop to the blocking pool and back costs tens of microseconds, so a
/// batch per block tripled the time of 10^4 no-op blocks with a trivial
/// check (0.48 s against 0.17 s); 32 amortises it to about a microsecond a
/// block, while a slow check (0.2 s) still sends each answer as it comes
/// and looks at most a few seconds ahead.
pub const CHECK_AHEAD: usize = 32;

/// How long answers of a batch may wait to go back together: far below
/// what a worker notices, far above what a trivial check takes (a few
/// microseconds), so a batch of quick checks is one message.
pub const SEND_AFTER: std::time::Duration = std::time::Duration::from_millis(1);

/// The user's check of a ready block (its task's `check_function`):
/// whether it is already done and can be skipped. User code that may take
/// long (it looks at an output on a shared filesystem), so the server asks
/// it on the blocking pool, never on its own thread, and asks one block of
/// a task at a time (a check need not be thread-safe). What an error does
/// is [`super::policy::after_check_error`]'s to say.
pub trait BlockCheck: Send + Sync {
    /// Whether task `task` has a check at all.
    fn checks(&self, task: TaskIndex) -> bool;
    /// Whether `block` is done already.
    fn already_done(&self, block: &Block) -> Result<bool, DaisyError>;
    /// Run `batch`, which asks [`Self::already_done`] of several blocks in
    /// turn, with whatever the checks need held throughout (in daisy: the
    /// interpreter, attached once for the batch; attaching a thread Python
    /// does not know costs microseconds each time).
    fn batch(&self, batch: &mut dyn FnMut()) {
        batch();
    }
}

/// A check's answer, on its way back to the main loop.
#[derive(Debug)]
pub struct Checked {
    /// The block asked about.
    pub key: BlockKey,
    /// Its spatial id (for the warning when the check failed).
    pub spatial_id: u64,
    /// What the check said: done or not, or how it failed.
    pub answer: Result<bool, DaisyError>,
}

/// Which block of which task is out for a check, and where answers go.
pub struct CheckStage {
    check: Option<Arc<dyn BlockCheck>>,
    /// Per task: it has a check function.
    checks: PerTask<bool>,
    /// Per task: how many of its blocks are out for a check (one batch).
    in_flight: PerTask<usize>,
    /// Per task: set to end its batch early (the task is finished, or the
    /// run ends): the blocks left are answered "not done" unasked.
    cancel: PerTask<Arc<AtomicBool>>,
    answers: mpsc::UnboundedSender<Vec<Checked>>,
}

impl Drop for CheckStage {
    /// The run is over: no batch asks another check.
    fn drop(&mut self) {
        for c in &self.cancel {
            c.store(true, Ordering::Relaxed);
        }
    }
}

impl CheckStage {
    /// The stage for `tasks` tasks asking `check`, answering to `answers`.
    pub fn new(
        check: Option<Arc<dyn BlockCheck>>,
        tasks: usize,
        answers: mpsc::UnboundedSender<Vec<Checked>>,
    ) -> Self {
        let checks = (0..tasks as TaskIndex)
            .map(|t| check.as_ref().is_some_and(|c| c.checks(t)))
            .collect();
        Self {
            check,
            checks,
            in_flight: vec![0; tasks].into(),
            cancel: (0..tasks).map(|_| Arc::default()).collect(),
            answers,
        }
    }

    /// Whether task `task`'s blocks are checked before they are handed out.
    pub fn checks(&self, task: TaskIndex) -> bool {
        self.checks[task]
    }

    /// Send a batch of `task`'s next ready blocks to its check, unless a
    /// batch is out already or half a batch of checked blocks waits for
    /// workers. Returns whether blocks of the task are now out for a check.
    pub fn ask_next(&mut self, scheduler: &mut Scheduler, task: TaskIndex) -> bool {
        let t = task;
        if self.in_flight[t] > 0 {
            return true;
        }
        let Some(check) = self.check.clone().filter(|_| self.checks[t]) else {
            return false;
        };
        let waiting = scheduler.checks_pending(task).1;
        if waiting >= CHECK_AHEAD / 2 {
            return false;
        }
        let batch: Vec<_> = std::iter::from_fn(|| scheduler.take_for_check(task))
            .take(CHECK_AHEAD - waiting)
            .collect();
        if batch.is_empty() {
            return false;
        }
        self.in_flight[t] = batch.len();
        let cancel = Arc::new(AtomicBool::new(false));
        self.cancel[t] = cancel.clone();
        let answers = self.answers.clone();
        tokio::task::spawn_blocking(move || {
            // answers go back together while they come fast, one by one
            // once a check takes longer than SEND_AFTER: the main loop
            // wakes once a batch of quick checks, and at once for a slow one
            let mut ready = Vec::new();
            let mut since = std::time::Instant::now();
            let n = batch.len();
            let mut blocks = batch.into_iter().enumerate();
            check.batch(&mut || {
                for (i, block) in blocks.by_ref() {
                    let answer = if cancel.load(Ordering::Relaxed) {
                        Ok(false)
                    } else {
                        check.already_done(&block)
                    };
                    ready.push(Checked {
                        key: block.key,
                        spatial_id: block.spatial_id,
                        answer,
                    });
                    if i + 1 == n || since.elapsed() >= SEND_AFTER {
                        if answers.send(std::mem::take(&mut ready)).is_err() {
                            return; // the run is over: nobody listens
                        }
                        since = std::time::Instant::now();
                    }
                }
            });
        });
        true
    }

    /// A check came back: the block is skipped or queued for a worker (see
    /// [`Scheduler::check_done`]), and, when its batch is done, the next
    /// batch is asked. An
    /// ordinary error in the check counts as "not done"
    /// ([`policy::after_check_error`]); an interruption is returned, and
    /// stops the run.
    pub fn answered(
        &mut self,
        scheduler: &mut Scheduler,
        checked: Checked,
    ) -> Result<(), DaisyError> {
        let t = checked.key.task;
        self.in_flight[t] = self.in_flight[t].saturating_sub(1);
        let done = checked
            .answer
            .or_else(|e| policy::after_check_error(e, Some(checked.spatial_id)));
        scheduler.check_done(checked.key, *done.as_ref().unwrap_or(&false));
        if scheduler.is_task_finished(t) {
            self.cancel[t].store(true, Ordering::Relaxed);
        } else if done.is_err() {
            // an interruption: the run stops; ask nothing more
            self.cancel[t].store(true, Ordering::Relaxed);
        } else {
            self.ask_next(scheduler, t);
        }
        done.map(|_| ())
    }
}
