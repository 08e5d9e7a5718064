//! The scheduler: which block may run next. [`Scheduler`] owns the ready
//! surface, the retry counters, skips and orphaning.
//!
//! ## The ready surface
//! Memory is bounded by the active frontier, not by the number of blocks:
//! * roots (blocks with no upstream block) are enumerated lazily, level by
//!   level, so a task of 10^6 independent blocks holds
//!   one cursor, not 10^6 entries;
//! * a non-root block enters `waiting` the first time one of its upstream
//!   blocks completes, with its number of unfinished upstream blocks, and
//!   moves to its task's ready queue when that reaches zero;
//! * blocks out with a worker are in their task's `processing` set, which
//!   is what makes a stray or repeated release an error instead of a
//!   double count.
//!
//! ## Order of service
//! daisy 1.x's, so that a scheduler driven by hand hands out the same blocks
//! in the same order (`tests/test_scheduler_order.py` checks it against
//! recordings of 1.2.2 and 2.0.0): a task's roots first, level by level and
//! row-major within a level (1.x queued them all at the start), then its
//! other blocks first in, first out, in the order they became ready; a
//! failed attempt to be retried joins the back of that queue. The blocks a
//! release makes ready join it in row-major order of their grid positions.
//!
//! ## Skips
//! Before a block is handed out, the caller's check decides whether it is
//! already done. A skipped block counts as completed (and as skipped) and
//! releases its downstream blocks exactly like a success, without ever
//! reaching a worker.
//!
//! ## Failures
//! A failed attempt is retried while the block's attempts stay within the
//! task's `max_retries`; after that the block is failed and every
//! transitive downstream block, across tasks, is orphaned exactly once.

use crate::block::{Block, BlockKey, BlockStatus, PerTask, TaskIndex};
use crate::dependency_graph::{DependencyGraph, RootCursor};
use crate::error::DaisyError;
use crate::pipeline::Pipeline;
use crate::task_state::{Abandonment, TaskState};
use crate::tracking_store::TrackingStore;
use std::collections::{HashMap, HashSet, VecDeque};

/// Scheduling state of one task.
#[derive(Debug)]
struct TaskRun {
    state: TaskState,
    roots: RootCursor,
    ready: VecDeque<u64>,
    /// Blocks handed back unserved (their check raised): served first.
    put_back: VecDeque<u64>,
    /// Blocks the memory guard held back ([`Scheduler::hold_back`]): ready,
    /// handed out only by [`Scheduler::take_held`], when the memory gate
    /// says they fit.
    held: VecDeque<u64>,
    /// Blocks out for a check ([`Scheduler::take_for_check`]): still
    /// ready, never handed out before their check comes back.
    checking: HashSet<u64>,
    /// Blocks whose check said they need work: handed out first, without
    /// asking the check again.
    checked: VecDeque<u64>,
    attempts: HashMap<u64, u32>,
    processing: HashSet<u64>,
    max_retries: u32,
    abandoned: bool,
    /// The task's tracking store, when it has one.
    tracking: Option<TrackingStore>,
    /// Per-run skip mask over the placement grid (nonzero: skip).
    skip_mask: Option<Vec<u8>>,
}

/// What happened to a block handed back with [`Scheduler::release_block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Completed; downstream blocks were released.
    Completed,
    /// Failed and queued for another attempt.
    Retrying,
    /// Failed for good; downstream blocks were orphaned.
    Failed,
}

/// A failed attempt the scheduler took back ([`Scheduler::fail_attempt`]).
#[derive(Clone, Debug)]
pub struct FailedAttempt {
    /// The block.
    pub block: Block,
    /// Whether it was the block's last attempt (it failed for good).
    pub last_attempt: bool,
}

/// Decides which block of which task may run next.
#[derive(Debug)]
pub struct Scheduler {
    graph: DependencyGraph,
    tasks: PerTask<TaskRun>,
    waiting: HashMap<BlockKey, u32>,
    orphaned: HashSet<BlockKey>,
    scratch: Vec<BlockKey>,
    scratch2: Vec<BlockKey>,
    /// Where untracked tasks' histories go (see [`Self::history_file`]).
    history_base: Option<std::path::PathBuf>,
    /// What the run plan found to say about tasks before the run (see
    /// [`crate::pipeline_coverage`]): each becomes a notice of its task's
    /// report.
    plan_notices: Vec<(TaskIndex, String)>,
}

impl Scheduler {
    /// A scheduler for a validated pipeline.
    pub fn new(pipeline: Pipeline) -> Self {
        let graph = DependencyGraph::new(pipeline);
        let tasks = (0..graph.pipeline().len() as TaskIndex)
            .map(|t| {
                let state = TaskState {
                    total_block_count: graph.num_blocks(t),
                    ready_count: graph.count_roots(t),
                    ..TaskState::default()
                };
                TaskRun {
                    state,
                    roots: graph.root_cursor(t),
                    ready: VecDeque::new(),
                    put_back: VecDeque::new(),
                    held: VecDeque::new(),
                    checking: HashSet::new(),
                    checked: VecDeque::new(),
                    attempts: HashMap::new(),
                    processing: HashSet::new(),
                    max_retries: graph.pipeline().spec(t).max_retries,
                    abandoned: false,
                    tracking: None,
                    skip_mask: None,
                }
            })
            .collect();
        Self {
            graph,
            tasks,
            waiting: HashMap::new(),
            orphaned: HashSet::new(),
            scratch: Vec::new(),
            scratch2: Vec::new(),
            history_base: None,
            plan_notices: Vec::new(),
        }
    }

    /// Give a task its tracking store: done blocks are skipped before
    /// dispatch, completions are marked, failed attempts counted.
    pub fn set_tracking(&mut self, task: TaskIndex, tracking: TrackingStore) {
        self.tasks[task].tracking = Some(tracking);
    }

    /// Where untracked tasks keep their run history (see
    /// [`crate::tracking_store::history_file`]); None: nowhere.
    pub fn set_history_base(&mut self, base: Option<std::path::PathBuf>) {
        self.history_base = base;
    }

    /// Keep `text` to say in `task`'s report (a finding of the run plan).
    pub fn add_plan_notice(&mut self, task: TaskIndex, text: String) {
        self.plan_notices.push((task, text));
    }

    /// What the run plan found to say, per task, in the order found.
    pub fn plan_notices(&self) -> &[(TaskIndex, String)] {
        &self.plan_notices
    }

    /// The `runs.jsonl` a task's report goes to at the end of a run, if
    /// any.
    pub fn history_file(&self, task: TaskIndex) -> Option<std::path::PathBuf> {
        crate::tracking_store::history_file(
            &self.pipeline().spec(task).task_id,
            self.tracking(task).map(TrackingStore::path),
            self.history_base.as_deref(),
        )
    }

    /// The tracking store of a task, if it has one.
    pub fn tracking(&self, task: TaskIndex) -> Option<&TrackingStore> {
        self.tasks[task].tracking.as_ref()
    }

    /// The tracking store of a task, for recording measurements.
    pub fn tracking_mut(&mut self, task: TaskIndex) -> Option<&mut TrackingStore> {
        self.tasks[task].tracking.as_mut()
    }

    /// Give a task a skip mask for this run: one byte per block in C order
    /// of the placement grid, nonzero meaning skip. Masked blocks count as
    /// skipped, release their downstream blocks and are never recorded.
    pub fn set_skip_mask(&mut self, task: TaskIndex, mask: Vec<u8>) -> Result<(), DaisyError> {
        let grid = self.graph.grid(task);
        if mask.len() as u64 != grid.num_blocks() {
            return Err(DaisyError::invalid(
                "skip_mask",
                format!(
                    "has {} cells but task {:?} has {} blocks (grid {}); give one cell per block",
                    mask.len(),
                    self.graph.pipeline().spec(task).task_id,
                    grid.num_blocks(),
                    grid.grid_shape()
                ),
            ));
        }
        self.tasks[task].skip_mask = Some(mask);
        Ok(())
    }

    /// A task's skip mask for this run, if it has one (see
    /// [`Self::set_skip_mask`]).
    pub fn skip_mask(&self, task: TaskIndex) -> Option<&[u8]> {
        self.tasks[task].skip_mask.as_deref()
    }

    /// Why a tracking store could not keep a mark (a full disk), if one
    /// could not: the run stops with it.
    pub fn tracking_failure(&self) -> Option<DaisyError> {
        self.tasks
            .iter()
            .filter_map(|run| run.tracking.as_ref()?.failure())
            .map(|why| DaisyError::Io(why.to_string()))
            .next()
    }

    /// Write every tracking store's dirty pages to disk.
    pub fn flush_tracking(&self) -> Result<(), DaisyError> {
        for run in &self.tasks {
            if let Some(t) = &run.tracking {
                t.flush()?;
            }
        }
        Ok(())
    }

    /// End the run's hold on its tracking stores: write their dirty pages
    /// and close them, which releases their locks. A runner calls this once
    /// its run is over (finished or stopped) and its history appended: the
    /// lock belongs to the run, not to the scheduler object, which a
    /// stopped run's traceback may keep alive (a notebook keeps the last
    /// one), and a rerun in the same process must get the store. The
    /// scheduler's own counts stay; with every block settled or the run
    /// stopped, nothing is marked after this.
    pub fn close_tracking(&mut self) {
        for run in &mut self.tasks {
            if let Some(t) = run.tracking.take()
                && let Err(e) = t.flush()
            {
                tracing::warn!("could not flush a tracking store: {e}");
            }
        }
    }

    /// The dependency graph the scheduler works on.
    pub fn graph(&self) -> &DependencyGraph {
        &self.graph
    }

    /// The pipeline (task order, ids, specs).
    pub fn pipeline(&self) -> &Pipeline {
        self.graph.pipeline()
    }

    /// Counts of one task.
    pub fn task_state(&self, task: TaskIndex) -> &TaskState {
        &self.tasks[task].state
    }

    /// True once every block of every task is completed, failed or orphaned.
    pub fn is_done(&self) -> bool {
        self.tasks.iter().all(|t| t.state.is_done())
    }

    /// True if the task will hand out no more blocks: every block is
    /// accounted for, or the task was abandoned.
    pub fn is_task_finished(&self, task: TaskIndex) -> bool {
        let run = &self.tasks[task];
        run.abandoned || run.state.is_done()
    }

    /// True if the task was abandoned (its own or an upstream task's
    /// workers kept dying).
    pub fn is_abandoned(&self, task: TaskIndex) -> bool {
        self.tasks[task].abandoned
    }

    /// A block came back done: its figures, where it was measured, go to
    /// its task's tracking store with who ran it and when (`sent_at`,
    /// `returned_at`: wall-clock seconds), and it is marked completed
    /// ([`Self::release_block`]).
    pub fn complete_block(
        &mut self,
        block: &Block,
        worker: Option<u32>,
        sent_at: f64,
        returned_at: f64,
    ) -> Result<(), DaisyError> {
        if let (Some(stats), Some(tracking)) = (
            block.stats.as_ref(),
            self.tasks
                .get_mut(block.key.task as usize)
                .and_then(|r| r.tracking.as_mut()),
        ) {
            tracking.record_stats(block, stats, worker, sent_at, returned_at);
        }
        self.release_block(block.key, BlockStatus::Success)
            .map(|_| ())
    }

    /// A failed attempt at block `key`, `reason` its text: the block is
    /// retried or failed for good ([`Self::release_block`]), and the
    /// attempt counted in its task's state (as a timeout reclaim when
    /// `timed_out`, as daisy 2.0.0 counts it, else as a worker error).
    /// None, and nothing counted, for a block of a task already abandoned
    /// (or one not out).
    pub fn fail_attempt(
        &mut self,
        key: BlockKey,
        reason: &str,
        timed_out: bool,
    ) -> Option<FailedAttempt> {
        if self.is_abandoned(key.task) {
            return None;
        }
        let last_attempt = match self.release_block(key, BlockStatus::Failed) {
            Ok(outcome) => outcome == ReleaseOutcome::Failed,
            Err(e) => {
                tracing::warn!("could not record a failure: {e}");
                return None;
            }
        };
        let state = &mut self.tasks[key.task].state;
        if timed_out {
            state.timeout_reclaim_count += 1;
        } else {
            state.worker_failure_count += 1;
        }
        state.note_worker_error(reason);
        Some(FailedAttempt {
            block: self.graph.block(key),
            last_attempt,
        })
    }

    /// Task `task`'s first and last worker errors that read `from` read
    /// `to` now (an attempt that failed as its connection closed, once
    /// the worker's end is known).
    pub fn restate_worker_error(&mut self, task: TaskIndex, from: &str, to: &str) {
        let state = &mut self.tasks[task].state;
        for text in [&mut state.first_worker_error, &mut state.last_worker_error] {
            if text.as_deref() == Some(from) {
                *text = Some(to.to_string());
            }
        }
    }

    /// Give up `task` ([`Self::abandon_task`]) because of `why`, and every
    /// task downstream because it was: each task abandoned now keeps its
    /// reason and what to change (the first given). The tasks abandoned
    /// now, with their reasons, `task` first.
    pub fn abandon_task_because(
        &mut self,
        task: TaskIndex,
        why: Abandonment,
    ) -> Vec<(TaskIndex, String)> {
        let Abandonment { reason, next } = why;
        let before: Vec<bool> = self.tasks.iter().map(|r| r.abandoned).collect();
        self.abandon_task(task);
        let state = &mut self.tasks[task].state;
        if state.abandon_reason.is_none() {
            state.abandon_reason = Some(reason.clone());
            state.abandon_next = Some(next);
        }
        let mut now = vec![(task, reason)];
        let up = self.graph.pipeline().spec(task).task_id.clone();
        for (t, was) in before.iter().enumerate() {
            let t = t as TaskIndex;
            if !was && t != task && self.is_abandoned(t) {
                let why = format!("upstream task {up:?} was abandoned");
                let state = &mut self.tasks[t].state;
                if state.abandon_reason.is_none() {
                    state.abandon_reason = Some(why.clone());
                    state.abandon_next = Some(format!("fix task {up:?} (above)"));
                    state.abandoned_by = Some(up.clone());
                }
                now.push((t, why));
            }
        }
        now
    }

    /// A worker of `task` started.
    pub fn count_worker_start(&mut self, task: TaskIndex) {
        self.tasks[task].state.worker_start_count += 1;
    }

    /// A worker of `task` stopped unexpectedly: a worker failure unless it
    /// lost a block (that block's failed attempt counted it already), and
    /// a restart when it is `replaced`.
    pub fn count_worker_stop(&mut self, task: TaskIndex, lost_block: bool, replaced: bool) {
        let state = &mut self.tasks[task].state;
        if !lost_block {
            state.worker_failure_count += 1;
        }
        if replaced {
            state.worker_restart_count += 1;
        }
    }

    /// Task `task`'s block timeout, as its state reports it.
    pub fn set_task_timeout(&mut self, task: TaskIndex, timeout: Option<std::time::Duration>) {
        self.tasks[task].state.timeout = timeout;
    }

    /// Give up on a task: every block of it not yet finished (those out
    /// with workers included: their results will be refused), and every
    /// block of every transitive downstream task not yet finished, counts
    /// as orphaned; blocks that already failed for good stay failed.
    /// Counts stay balanced; nothing of these tasks is handed out again.
    /// Idempotent.
    pub fn abandon_task(&mut self, task: TaskIndex) {
        let mut stack = vec![(task, true)];
        while let Some((t, is_root)) = stack.pop() {
            let run = &mut self.tasks[t];
            if run.abandoned {
                continue;
            }
            run.abandoned = true;
            let s = &mut run.state;
            let remaining =
                s.total_block_count - s.completed_count - s.failed_count - s.orphaned_count;
            // what never ran is orphaned, not failed (as daisy 2.0.0 counts
            // it): in the abandoned task itself (its abandonment is the
            // reason) and in every task downstream
            s.orphaned_count += remaining;
            if !is_root {
                s.orphaned_by_upstream_count += remaining;
            }
            s.ready_count = 0;
            s.processing_count = 0;
            run.processing.clear();
            run.ready.clear();
            run.put_back.clear();
            run.held.clear();
            run.checking.clear();
            run.checked.clear();
            run.attempts.clear();
            for &d in self.graph.pipeline().downstream_of(t) {
                stack.push((d, false));
            }
        }
        self.waiting.retain(|k, _| !self.tasks[k.task].abandoned);
    }

    /// Tasks that have a block ready now.
    pub fn ready_tasks(&self) -> impl Iterator<Item = TaskIndex> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state.ready_count > 0)
            .map(|(i, _)| i as TaskIndex)
    }

    /// Next root of a task from its lazy cursor, if any.
    fn next_root(&mut self, task: TaskIndex) -> Option<u64> {
        let run = &mut self.tasks[task];
        self.graph
            .next_root(&mut run.roots, &mut self.scratch)
            .map(|b| b.key.index)
    }

    fn pop_ready(&mut self, task: TaskIndex) -> Option<u64> {
        let run = &mut self.tasks[task];
        if let Some(i) = run.put_back.pop_front() {
            return Some(i);
        }
        if let Some(i) = self.next_root(task) {
            return Some(i);
        }
        self.tasks[task].ready.pop_front()
    }

    /// A run begins: every task of the pipeline counts as started from now
    /// (what the states a run reports say, as daisy 1.x's and 2.0.0's
    /// runs report them), whether or not a block of it is handed out.
    pub fn begin_run(&mut self) {
        for run in &mut self.tasks {
            run.state.started = true;
        }
        self.settle_marked_tasks();
    }

    /// Settle at once, without enumerating a block, every task whose
    /// tracking store marks each of its blocks done and whose downstream
    /// tasks are all settled so too: its blocks count as skipped and
    /// completed, and it has nothing ready. A fully resumed run of 10^7
    /// blocks is then one count of done marks (a scan of 10 MB) instead of
    /// 10^7 skips. A task with a downstream task that has work left is
    /// walked block by block as before: its skips are what make the
    /// downstream blocks ready. Only before the first block is handed out.
    fn settle_marked_tasks(&mut self) {
        let n = self.tasks.len() as TaskIndex;
        let mut settled: PerTask<bool> = vec![false; n as usize].into();
        // pipeline order is topological: downstream tasks come later
        for t in (0..n).rev() {
            let run = &self.tasks[t];
            let untouched = run.state.completed_count == 0
                && run.state.processing_count == 0
                && run.ready.is_empty()
                && run.put_back.is_empty()
                && run.held.is_empty()
                && !run.abandoned;
            let all_marked = run
                .tracking
                .as_ref()
                .is_some_and(|store| store.done_count() == run.state.total_block_count);
            let downstream_settled = self
                .graph
                .pipeline()
                .downstream_of(t)
                .iter()
                .all(|&d| d > t && settled[d]);
            settled[t] = untouched && all_marked && downstream_settled;
        }
        for (run, _) in self
            .tasks
            .iter_mut()
            .zip(settled.iter())
            .filter(|(_, s)| **s)
        {
            let total = run.state.total_block_count;
            run.state.ready_count = 0;
            run.state.skipped_count += total;
            run.state.completed_count += total;
            run.roots.exhaust();
        }
    }

    /// Hand out the next ready block of `task`, asking `already_done` first
    /// whether it can be skipped. `None` if the task has no ready block now
    /// (it may have later, or be finished: see [`TaskState::is_done`]).
    /// An error from `already_done` leaves the block ready and is returned.
    /// A block whose check already said it needs work ([`Self::check_done`])
    /// goes first, without asking again.
    pub fn acquire_block<E>(
        &mut self,
        task: TaskIndex,
        mut already_done: impl FnMut(&Block) -> Result<bool, E>,
    ) -> Result<Option<Block>, E> {
        if let Some(block) = self.acquire_checked(task) {
            return Ok(Some(block));
        }
        while let Some(block) = self.next_unmarked(task) {
            match already_done(&block) {
                Ok(true) => self.skip(block.key, true),
                Ok(false) => return Ok(Some(self.hand_out(block))),
                Err(e) => {
                    self.tasks[task].put_back.push_front(block.key.index);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Hand out the next block of `task` that its check said needs work
    /// ([`Self::check_done`]), if any.
    pub fn acquire_checked(&mut self, task: TaskIndex) -> Option<Block> {
        let run = &mut self.tasks[task];
        if run.abandoned {
            return None;
        }
        let index = run.checked.pop_front()?;
        let block = self.graph.grid(task).block(index);
        Some(self.hand_out(block))
    }

    /// Take the next ready block of `task` that neither its done marker nor
    /// its skip mask says is done (skipping those), to have it checked
    /// elsewhere: the block stays ready (counted so) but is not handed out
    /// until its check comes back ([`Self::check_done`]). How a server asks
    /// a slow check without waiting for it.
    pub fn take_for_check(&mut self, task: TaskIndex) -> Option<Block> {
        let block = self.next_unmarked(task)?;
        self.tasks[task].checking.insert(block.key.index);
        Some(block)
    }

    /// What the check of block `key` (taken with [`Self::take_for_check`])
    /// said: done, and it is skipped like a block the check found done at
    /// hand-out; not done, and it is handed out next by
    /// [`Self::acquire_checked`] or [`Self::acquire_block`]. Ignored for a
    /// block not being checked (its task was abandoned meanwhile).
    pub fn check_done(&mut self, key: BlockKey, done: bool) {
        let run = &mut self.tasks[key.task];
        if run.abandoned || !run.checking.remove(&key.index) {
            return;
        }
        if done {
            self.skip(key, true);
        } else {
            run.checked.push_back(key.index);
        }
    }

    /// How many blocks of `task` are out for a check or back from one
    /// waiting to be handed out.
    pub fn checks_pending(&self, task: TaskIndex) -> (usize, usize) {
        let run = &self.tasks[task];
        (run.checking.len(), run.checked.len())
    }

    /// The next ready block of `task` that may need work, skipping (as
    /// done) those its done marker or its skip mask covers: the cheap
    /// skips, a memory read each, asked before any check.
    fn next_unmarked(&mut self, task: TaskIndex) -> Option<Block> {
        if self.tasks[task].abandoned {
            return None;
        }
        while let Some(index) = self.pop_ready(task) {
            let block = self.graph.grid(task).block(index);
            let run = &self.tasks[task];
            let marked = run
                .tracking
                .as_ref()
                .is_some_and(|t| t.is_marked_done(&block));
            let masked = !marked
                && run
                    .skip_mask
                    .as_ref()
                    .is_some_and(|m| m.get(index as usize).is_some_and(|&v| v != 0));
            if !(marked || masked) {
                return Some(block);
            }
            self.skip(block.key, false);
        }
        None
    }

    /// Ready block `key` is done already: it counts as skipped and completed
    /// and releases its downstream blocks. One its check found done is
    /// marked, so the next run skips it for one memory read.
    fn skip(&mut self, key: BlockKey, checked: bool) {
        let run = &mut self.tasks[key.task];
        run.state.ready_count -= 1;
        run.state.started = true;
        run.state.skipped_count += 1;
        self.complete(key, checked);
    }

    /// Ready `block` goes to a worker: handed out as created (not yet
    /// processed), as daisy 1.2.2 and 2.0.0 hand it out; the worker sets
    /// SUCCESS or FAILED.
    fn hand_out(&mut self, block: Block) -> Block {
        let run = &mut self.tasks[block.key.task];
        run.state.ready_count -= 1;
        run.state.started = true;
        run.processing.insert(block.key.index);
        run.state.processing_count += 1;
        block
    }

    /// Skip, without handing anything out, the ready blocks at the front of
    /// `task`'s queue that its done markers or skip mask say are done (a
    /// memory read each; the caller's check is not asked), stopping at the
    /// first block that may need work. Returns how many were skipped. The
    /// server calls it before it starts a task's first worker, so a task
    /// whose blocks are all done never starts one.
    pub fn skip_marked(&mut self, task: TaskIndex) -> u64 {
        let before = self.tasks[task].state.skipped_count;
        if let Some(block) = self.next_unmarked(task) {
            // it may need work: back to the front, where it was
            self.tasks[task].put_back.push_front(block.key.index);
        }
        self.tasks[task].state.skipped_count - before
    }

    /// Block `key`, out with a worker the memory guard stopped, is held
    /// back: ready again, but handed out only by [`Self::take_held`]. Not
    /// an attempt: nothing is counted against its retries, it is not
    /// marked, and it runs again in this run. False (nothing changed) for
    /// a block not out, or of a task abandoned meanwhile.
    pub fn hold_back(&mut self, key: BlockKey) -> bool {
        let Some(run) = self.tasks.get_mut(key.task as usize) else {
            return false;
        };
        if run.abandoned || !run.processing.remove(&key.index) {
            return false;
        }
        run.state.processing_count -= 1;
        run.state.ready_count += 1;
        run.state.held_back_count += 1;
        run.held.push_back(key.index);
        true
    }

    /// The held-back block of `task` next in line, if any.
    pub fn next_held(&self, task: TaskIndex) -> Option<BlockKey> {
        let run = &self.tasks[task];
        (!run.abandoned)
            .then(|| run.held.front())
            .flatten()
            .map(|&index| BlockKey { task, index })
    }

    /// Hand out the held-back block of `task` next in line.
    pub fn take_held(&mut self, task: TaskIndex) -> Option<Block> {
        if self.tasks[task].abandoned {
            return None;
        }
        let index = self.tasks[task].held.pop_front()?;
        let block = self.graph.grid(task).block(index);
        Some(self.hand_out(block))
    }

    /// Take back a block handed out by [`Scheduler::acquire_block`], with
    /// the status its worker gave it.
    pub fn release_block(
        &mut self,
        key: BlockKey,
        status: BlockStatus,
    ) -> Result<ReleaseOutcome, DaisyError> {
        let task_id = || self.graph.pipeline().spec(key.task).task_id.clone();
        if !matches!(status, BlockStatus::Success | BlockStatus::Failed) {
            return Err(DaisyError::UnknownBlock(format!(
                "block {} of task {:?} comes back with status {status:?}; set block.status to \
                 BlockStatus.SUCCESS or BlockStatus.FAILED before releasing it",
                self.graph.block(key).spatial_id,
                task_id()
            )));
        }
        let run = self
            .tasks
            .get_mut(key.task as usize)
            .ok_or_else(|| DaisyError::UnknownBlock(format!("no task with index {}", key.task)))?;
        if !run.processing.remove(&key.index) {
            return Err(DaisyError::UnknownBlock(format!(
                "block {} of task {:?} is not being processed (never handed out, or already \
                 released); release each acquired block exactly once",
                self.graph.block(key).spatial_id,
                task_id()
            )));
        }
        run.state.processing_count -= 1;
        Ok(match status {
            BlockStatus::Success => {
                self.complete(key, true);
                ReleaseOutcome::Completed
            }
            _ => self.fail(key),
        })
    }

    /// Mark a block completed (in the store too if `record`) and release
    /// what waits for it.
    fn complete(&mut self, key: BlockKey, record: bool) {
        let block = self.graph.block(key);
        let run = &mut self.tasks[key.task];
        run.state.completed_count += 1;
        run.attempts.remove(&key.index);
        if record && let Some(t) = run.tracking.as_mut() {
            t.mark_done(&block);
        }
        let mut downstream = std::mem::take(&mut self.scratch2);
        downstream.clear();
        self.graph.downstream(&block, &mut downstream);
        for &d in &downstream {
            if self.orphaned.contains(&d) {
                continue;
            }
            let remaining = match self.waiting.get_mut(&d) {
                Some(n) => n,
                None => {
                    let n = self
                        .graph
                        .upstream_count(&self.graph.block(d), &mut self.scratch);
                    self.waiting.entry(d).or_insert(n)
                }
            };
            *remaining = remaining.saturating_sub(1);
            if *remaining == 0 {
                self.waiting.remove(&d);
                let run = &mut self.tasks[d.task];
                run.ready.push_back(d.index);
                run.state.ready_count += 1;
            }
        }
        self.scratch2 = downstream;
    }

    /// Count a failed attempt; retry or fail for good.
    fn fail(&mut self, key: BlockKey) -> ReleaseOutcome {
        let block = self.graph.block(key);
        let run = &mut self.tasks[key.task];
        run.state.failed_attempts += 1;
        if let Some(t) = run.tracking.as_mut() {
            t.add_failure(&block);
        }
        let attempts = run.attempts.entry(key.index).or_insert(0);
        *attempts += 1;
        if *attempts <= run.max_retries {
            run.ready.push_back(key.index);
            run.state.ready_count += 1;
            return ReleaseOutcome::Retrying;
        }
        run.attempts.remove(&key.index);
        run.state.failed_count += 1;
        self.orphan_downstream_of(key);
        ReleaseOutcome::Failed
    }

    /// Orphan every transitive downstream block of `key`, each once, and
    /// say why: a block of `key`'s own task waits on a failed conflicting
    /// neighbour; a block of another task on a failed upstream block.
    fn orphan_downstream_of(&mut self, key: BlockKey) {
        let mut stack = Vec::new();
        self.graph.downstream(&self.graph.block(key), &mut stack);
        while let Some(d) = stack.pop() {
            if !self.orphaned.insert(d) {
                continue;
            }
            self.waiting.remove(&d);
            let state = &mut self.tasks[d.task].state;
            state.orphaned_count += 1;
            if d.task == key.task {
                state.orphaned_by_neighbour_count += 1;
            } else {
                state.orphaned_by_upstream_count += 1;
            }
            self.graph.downstream(&self.graph.block(d), &mut stack);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Roi;
    use crate::task_spec::{Fit, TaskSpec};
    use proptest::prelude::*;
    use std::convert::Infallible;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    fn no_skip(_: &Block) -> Result<bool, Infallible> {
        Ok(false)
    }

    fn acquire(s: &mut Scheduler, t: TaskIndex) -> Option<Block> {
        s.acquire_block(t, no_skip).unwrap()
    }

    fn chain(retries: u32) -> Scheduler {
        let a = TaskSpec::new(
            "a",
            roi(&[0, 0], &[20, 20]),
            roi(&[-1, -1], &[6, 6]),
            roi(&[0, 0], &[4, 4]),
            Fit::Overhang,
            true,
            retries,
            vec![],
        )
        .unwrap();
        let b = TaskSpec::new(
            "b",
            roi(&[0, 0], &[20, 20]),
            roi(&[0, 0], &[5, 5]),
            roi(&[0, 0], &[5, 5]),
            Fit::Valid,
            false,
            retries,
            vec!["a".into()],
        )
        .unwrap();
        Scheduler::new(Pipeline::new(vec![a, b]).unwrap())
    }

    #[test]
    fn skip_marked_skips_the_done_front_and_stops_at_work() {
        let mut s = chain(0);
        let n = s.graph().num_blocks(0) as usize;
        // everything masked: all of a's roots go, nothing is handed out
        s.set_skip_mask(0, vec![1; n]).unwrap();
        let skipped = s.skip_marked(0);
        assert!(skipped > 0);
        assert_eq!(s.task_state(0).processing_count, 0);
        assert_eq!(s.task_state(0).skipped_count, skipped);
        // a fresh run masking all but the first block handed out: nothing
        // is skipped in front of it, and that block is handed out next
        let mut s = chain(0);
        let first = acquire(&mut chain(0), 0).unwrap();
        let mut mask = vec![1u8; n];
        mask[first.key.index as usize] = 0;
        s.set_skip_mask(0, mask).unwrap();
        assert_eq!(s.skip_marked(0), 0);
        let next = acquire(&mut s, 0).unwrap();
        assert_eq!(next.key, first.key, "the block that needs work stays first");
    }

    #[test]
    fn runs_everything_once_in_dependency_order() {
        let mut s = chain(0);
        let mut done: HashSet<BlockKey> = HashSet::new();
        let mut up = Vec::new();
        loop {
            let mut progressed = false;
            for t in 0..2 {
                while let Some(b) = acquire(&mut s, t) {
                    up.clear();
                    s.graph().upstream(&b, &mut up);
                    assert!(up.iter().all(|u| done.contains(u)), "ran before upstream");
                    assert!(done.insert(b.key), "ran twice");
                    s.release_block(b.key, BlockStatus::Success).unwrap();
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        assert!(s.is_done());
        assert_eq!(
            done.len() as u64,
            s.graph().num_blocks(0) + s.graph().num_blocks(1)
        );
        assert!(s.task_state(1).all_completed());
    }

    #[test]
    fn retries_come_first_and_failure_orphans_downstream() {
        let mut s = chain(1);
        let first = acquire(&mut s, 0).unwrap();
        assert_eq!(
            s.release_block(first.key, BlockStatus::Failed).unwrap(),
            ReleaseOutcome::Retrying
        );
        let again = acquire(&mut s, 0).unwrap();
        assert_ne!(
            again.key, first.key,
            "a retry waits behind the roots, as in 1.x"
        );
        s.release_block(again.key, BlockStatus::Success).unwrap();
        let again = loop {
            let b = acquire(&mut s, 0).unwrap();
            if b.key == first.key {
                break b;
            }
            s.release_block(b.key, BlockStatus::Success).unwrap();
        };
        assert_eq!(
            s.release_block(again.key, BlockStatus::Failed).unwrap(),
            ReleaseOutcome::Failed
        );
        // drain the rest
        loop {
            let mut progressed = false;
            for t in 0..2 {
                while let Some(b) = acquire(&mut s, t) {
                    s.release_block(b.key, BlockStatus::Success).unwrap();
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        assert!(s.is_done());
        let a = s.task_state(0);
        let b = s.task_state(1);
        assert_eq!(a.failed_count, 1);
        assert_eq!(a.failed_attempts, 2);
        assert!(a.orphaned_count > 0 && b.orphaned_count > 0);
        for st in [a, b] {
            assert_eq!(
                st.completed_count + st.failed_count + st.orphaned_count,
                st.total_block_count
            );
            assert_eq!(st.pending_count(), 0);
        }
    }

    #[test]
    fn abandoning_orphans_the_rest_and_the_downstream_tasks() {
        let mut s = chain(0);
        let b = acquire(&mut s, 0).unwrap();
        s.release_block(b.key, BlockStatus::Success).unwrap();
        let _out = acquire(&mut s, 0).unwrap();
        s.abandon_task(0);
        assert!(s.is_task_finished(0) && s.is_task_finished(1));
        assert!(acquire(&mut s, 0).is_none() && acquire(&mut s, 1).is_none());
        let a = s.task_state(0);
        assert_eq!(a.completed_count, 1);
        assert_eq!(a.failed_count, 0);
        assert_eq!(a.orphaned_count, a.total_block_count - 1);
        let b = s.task_state(1);
        assert_eq!(b.orphaned_count, b.total_block_count);
        assert_eq!(b.orphaned_by_upstream_count, b.total_block_count);
        assert!(s.is_done());
        s.abandon_task(0);
        assert_eq!(
            s.task_state(1).orphaned_count,
            s.task_state(1).total_block_count
        );
    }

    #[test]
    fn tracking_skips_done_blocks_and_masks_are_not_recorded() {
        let path = std::env::temp_dir().join(format!("daisy-sched-track-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let run = |mask: Option<Vec<u8>>, fail_id: Option<u64>| {
            let mut s = chain(0);
            let spec = s.pipeline().spec(0).clone();
            s.set_tracking(0, TrackingStore::open(&path, &spec, false).unwrap());
            if let Some(m) = mask {
                s.set_skip_mask(0, m).unwrap();
            }
            let mut ran = Vec::new();
            loop {
                let mut progressed = false;
                for t in 0..2 {
                    while let Some(b) = acquire(&mut s, t) {
                        if t == 0 {
                            ran.push(b.spatial_id);
                        }
                        let st = if Some(b.spatial_id) == fail_id && t == 0 {
                            BlockStatus::Failed
                        } else {
                            BlockStatus::Success
                        };
                        s.release_block(b.key, st).unwrap();
                        progressed = true;
                    }
                }
                if !progressed {
                    break;
                }
            }
            (ran, s.task_state(0).clone())
        };
        let n = chain(0).graph().num_blocks(0);
        // first run: everything is masked but block 0 is not; block 0 fails
        let mut mask = vec![1u8; n as usize];
        mask[0] = 0;
        let (ran, st) = run(Some(mask), Some(0));
        assert_eq!(ran, vec![0]);
        assert_eq!(st.skipped_count, n - 1);
        // second run: nothing was recorded done, so everything runs
        let (ran, st) = run(None, None);
        assert_eq!(ran.len() as u64, n);
        assert_eq!(st.skipped_count, 0);
        // third run: everything is skipped via the markers
        let (ran, st) = run(None, None);
        assert!(ran.is_empty());
        assert_eq!(st.skipped_count, n);
        assert!(st.all_completed());
        let s = chain(0);
        let t = TrackingStore::open(&path, s.pipeline().spec(0), false).unwrap();
        let first = s.graph().grid(0).block(0);
        let zero = (0..n)
            .map(|i| s.graph().grid(0).block(i))
            .find(|b| b.spatial_id == 0)
            .unwrap();
        assert_eq!(t.failures(&zero), 1);
        assert!(t.is_marked_done(&first));
        assert!(chain(0).set_skip_mask(0, vec![0; 3]).is_err());
        std::fs::remove_dir_all(&path).unwrap();
    }

    /// Hand out and complete every block of the two tasks of `s` that it
    /// hands out; how many of each task's.
    fn hand_out_all(s: &mut Scheduler) -> [u64; 2] {
        let mut handed = [0u64; 2];
        loop {
            let mut progressed = false;
            for t in 0..2 {
                while let Some(b) = acquire(s, t) {
                    handed[t as usize] += 1;
                    s.release_block(b.key, BlockStatus::Success).unwrap();
                    progressed = true;
                }
            }
            if !progressed {
                return handed;
            }
        }
    }

    #[test]
    fn a_fully_marked_pipeline_is_settled_without_a_block_enumerated() {
        let dir = std::env::temp_dir().join(format!("daisy-sched-settle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let tracked = || {
            let mut s = chain(0);
            for t in 0..2 {
                let spec = s.pipeline().spec(t).clone();
                let path = dir.join(&spec.task_id);
                s.set_tracking(t, TrackingStore::open(&path, &spec, false).unwrap());
            }
            s
        };
        // nothing marked: nothing settled, every block is handed out
        let mut s = tracked();
        s.begin_run();
        assert!(s.task_state(0).ready_count > 0);
        let handed = hand_out_all(&mut s);
        let totals = [s.graph().num_blocks(0), s.graph().num_blocks(1)];
        assert_eq!(handed, totals);
        drop(s);
        // every block of both marked: both settled at the run's start
        let mut s = tracked();
        assert!(s.task_state(0).ready_count > 0, "roots before the run");
        s.begin_run();
        assert!(s.is_done());
        for t in 0..2 {
            let st = s.task_state(t);
            assert_eq!((st.ready_count, st.processing_count), (0, 0));
            assert_eq!(st.skipped_count, totals[t as usize]);
            assert_eq!(st.completed_count, totals[t as usize]);
            assert!(acquire(&mut s, t).is_none());
        }
        drop(s);
        // b's marks gone: a is walked (its skips make b's blocks ready),
        // and only b's blocks are handed out
        std::fs::remove_dir_all(dir.join("b")).unwrap();
        let mut s = tracked();
        s.begin_run();
        assert!(!s.is_done());
        let handed = hand_out_all(&mut s);
        assert_eq!(handed, [0, totals[1]]);
        assert_eq!(s.task_state(0).skipped_count, totals[0]);
        assert!(s.is_done());
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn double_release_and_bad_status_are_errors() {
        let mut s = chain(0);
        let b = acquire(&mut s, 0).unwrap();
        assert!(s.release_block(b.key, BlockStatus::Processing).is_err());
        s.release_block(b.key, BlockStatus::Success).unwrap();
        let e = s.release_block(b.key, BlockStatus::Success).unwrap_err();
        assert!(e.to_string().contains("exactly once"));
    }

    #[test]
    fn skips_release_downstream_without_dispatch() {
        let mut s = chain(0);
        let mut handed = 0;
        loop {
            let mut progressed = false;
            for t in 0..2 {
                // skip every block of task a
                while let Some(b) = s
                    .acquire_block(t, |b: &Block| Ok::<_, Infallible>(b.key.task == 0))
                    .unwrap()
                {
                    handed += 1;
                    assert_eq!(b.key.task, 1);
                    s.release_block(b.key, BlockStatus::Success).unwrap();
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        assert!(s.is_done());
        assert_eq!(s.task_state(0).skipped_count, s.graph().num_blocks(0));
        assert_eq!(s.task_state(0).completed_count, s.graph().num_blocks(0));
        assert_eq!(handed, s.graph().num_blocks(1));
    }

    #[test]
    fn lazy_roots_hold_no_per_block_state() {
        let t = TaskSpec::new(
            "big",
            roi(&[0, 0, 0], &[100, 100, 100]),
            roi(&[0, 0, 0], &[1, 1, 1]),
            roi(&[0, 0, 0], &[1, 1, 1]),
            Fit::Valid,
            false,
            0,
            vec![],
        )
        .unwrap();
        let mut s = Scheduler::new(Pipeline::new(vec![t]).unwrap());
        assert_eq!(s.task_state(0).ready_count, 1_000_000);
        for _ in 0..1000 {
            let b = acquire(&mut s, 0).unwrap();
            s.release_block(b.key, BlockStatus::Success).unwrap();
        }
        assert!(s.waiting.is_empty());
        assert_eq!(s.tasks[0].ready.len(), 0);
    }

    fn arb_case() -> impl Strategy<Value = (Vec<TaskSpec>, u64, u32)> {
        let dims = 1usize..=2;
        dims.prop_flat_map(|d| {
            let task = (
                proptest::collection::vec(-3i64..3, d),
                proptest::collection::vec(6i64..18, d),
                proptest::collection::vec(1i64..5, d),
                proptest::collection::vec(0i64..3, d),
                proptest::collection::vec(0i64..3, d),
                0usize..3,
                any::<bool>(),
            );
            (
                proptest::collection::vec(task, 1..=3),
                any::<u64>(),
                0u32..3,
            )
        })
        .prop_map(|(tasks, seed, retries)| {
            let fits = [Fit::Valid, Fit::Overhang, Fit::Shrink];
            let specs: Vec<TaskSpec> = tasks
                .into_iter()
                .enumerate()
                .filter_map(|(i, (off, shape, w, lo, hi, fit, conflict))| {
                    let write = Roi::from_slices(&vec![0; w.len()], &w).ok()?;
                    let read_off: Vec<i64> = lo.iter().map(|c| -c).collect();
                    let read_shape: Vec<i64> = (0..w.len()).map(|k| w[k] + lo[k] + hi[k]).collect();
                    let read = Roi::from_slices(&read_off, &read_shape).ok()?;
                    let total = Roi::from_slices(&off, &shape).ok()?;
                    let up = if i > 0 {
                        vec![format!("t{}", i - 1)]
                    } else {
                        vec![]
                    };
                    TaskSpec::new(
                        format!("t{i}"),
                        total,
                        read,
                        write,
                        fits[fit],
                        conflict,
                        retries,
                        up,
                    )
                    .ok()
                })
                .collect();
            (specs, seed, retries)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn invariants_hold_under_random_interleavings((specs, seed, _r) in arb_case()) {
            // keep only a consistent chain (a filtered-out task breaks the upstream link)
            let mut chain_specs = Vec::new();
            for (i, s) in specs.into_iter().enumerate() {
                if s.task_id != format!("t{i}") || (i > 0 && chain_specs.len() != i) {
                    break;
                }
                chain_specs.push(s);
            }
            prop_assume!(!chain_specs.is_empty());
            let mut s = Scheduler::new(Pipeline::new(chain_specs).unwrap());
            let n_tasks = s.pipeline().len() as TaskIndex;
            let mut rng = seed;
            let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng };
            let mut out: Vec<Block> = Vec::new();
            let mut completed: HashSet<BlockKey> = HashSet::new();
            let mut up = Vec::new();
            let mut steps = 0;
            loop {
                steps += 1;
                prop_assert!(steps < 100_000);
                // acquire a few blocks from random tasks
                let mut acquired_any = false;
                for _ in 0..(next() % 4) {
                    let t = (next() % n_tasks as u64) as TaskIndex;
                    if let Some(b) = acquire(&mut s, t) {
                        up.clear();
                        s.graph().upstream(&b, &mut up);
                        for u in &up { prop_assert!(completed.contains(u), "upstream not done"); }
                        for o in &out {
                            if o.key.task == b.key.task && s.pipeline().spec(o.key.task).read_write_conflict {
                                prop_assert!(!o.read_roi.intersects(&b.write_roi) && !b.read_roi.intersects(&o.write_roi),
                                    "conflicting blocks out together");
                            }
                        }
                        out.push(b);
                        acquired_any = true;
                    }
                }
                if out.is_empty() && !acquired_any {
                    // nothing out: make sure nothing is ready anywhere
                    let mut any = false;
                    for t in 0..n_tasks {
                        if let Some(b) = acquire(&mut s, t) { out.push(b); any = true; break; }
                    }
                    if !any { break; }
                }
                if !out.is_empty() && next() % 2 == 0 {
                    let i = (next() % out.len() as u64) as usize;
                    let b = out.swap_remove(i);
                    let status = if next() % 5 == 0 { BlockStatus::Failed } else { BlockStatus::Success };
                    if s.release_block(b.key, status).unwrap() == ReleaseOutcome::Completed {
                        prop_assert!(completed.insert(b.key));
                    }
                }
                for t in 0..n_tasks {
                    let st = s.task_state(t);
                    prop_assert_eq!(
                        st.pending_count() + st.ready_count + st.processing_count + st.completed_count
                            + st.failed_count + st.orphaned_count,
                        st.total_block_count
                    );
                }
            }
            prop_assert!(s.is_done());
        }
    }

    #[test]
    fn a_check_taken_elsewhere_holds_its_block_until_it_comes_back() {
        let line = TaskSpec::new(
            "t",
            roi(&[0], &[40]),
            roi(&[0], &[10]),
            roi(&[0], &[10]),
            Fit::Valid,
            false,
            0,
            vec![],
        )
        .unwrap();
        let mut s = Scheduler::new(Pipeline::new(vec![line]).unwrap());
        let first = s.take_for_check(0).unwrap();
        assert_eq!(first.key.index, 0);
        // out for its check: still ready, never handed out meanwhile
        assert_eq!(s.task_state(0).ready_count, 4);
        assert_eq!(s.checks_pending(0), (1, 0));
        assert!(s.acquire_checked(0).is_none());
        // done: skipped, as a check at hand-out skips it
        s.check_done(first.key, true);
        assert_eq!(s.task_state(0).skipped_count, 1);
        assert_eq!(s.task_state(0).ready_count, 3);
        // needs work: handed out next, before any other ready block, and
        // without its check asked again
        let second = s.take_for_check(0).unwrap();
        s.check_done(second.key, false);
        assert_eq!(s.checks_pending(0), (0, 1));
        let calls = std::cell::Cell::new(0);
        let check = |_: &Block| {
            calls.set(calls.get() + 1);
            Ok::<bool, ()>(false)
        };
        let b = s.acquire_block(0, check).unwrap().unwrap();
        assert_eq!(b.key, second.key);
        assert_eq!(calls.get(), 0);
        assert_eq!(s.task_state(0).processing_count, 1);
        // a result for a block not out for a check changes nothing
        s.check_done(second.key, true);
        assert_eq!(s.task_state(0).skipped_count, 1);
        // an abandoned task's check comes back to nothing
        let third = s.take_for_check(0).unwrap();
        s.abandon_task(0);
        s.check_done(third.key, false);
        assert_eq!(s.checks_pending(0), (0, 0));
        assert!(s.acquire_checked(0).is_none());
        assert!(s.take_for_check(0).is_none());
    }

    #[test]
    fn a_held_back_block_is_counted_once_never_as_an_attempt_and_runs_again() {
        let line = TaskSpec::new(
            "t",
            roi(&[0], &[40]),
            roi(&[0], &[10]),
            roi(&[0], &[10]),
            Fit::Valid,
            false,
            0,
            vec![],
        )
        .unwrap();
        let mut s = Scheduler::new(Pipeline::new(vec![line]).unwrap());
        let b = acquire(&mut s, 0).unwrap();
        assert!(s.hold_back(b.key));
        assert!(!s.hold_back(b.key), "not out any more: nothing changes");
        let st = s.task_state(0);
        assert_eq!(
            (st.held_back_count, st.failed_attempts, st.processing_count),
            (1, 0, 0)
        );
        assert_eq!(st.ready_count, 4, "ready again");
        assert_eq!(s.next_held(0), Some(b.key));
        let again = s.take_held(0).unwrap();
        assert_eq!(again.key, b.key);
        assert_eq!(s.next_held(0), None);
        s.release_block(again.key, BlockStatus::Success).unwrap();
        let st = s.task_state(0);
        assert_eq!(
            (st.completed_count, st.held_back_count, st.failed_count),
            (1, 1, 0)
        );
    }
}
