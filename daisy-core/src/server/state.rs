//! Everything one run knows while it goes: the scheduler, the blocks out
//! with workers, the workers, their timelines and the run's ledger, in one
//! [`State`] shared (single-threaded, in a `RefCell`) by the connection
//! tasks and the main loop.
//!
//! ## One block, one owner
//! A block handed out is recorded in `outstanding` with the connection and
//! worker it went to, when, and its deadline. Whoever removes it from there
//! first accounts for it, exactly once: the worker's release or failure
//! report, the connection closing or the worker dying ([`State::reclaim`]),
//! or the timeout sweep. A late report for a block that is no longer
//! outstanding is refused.

use super::admission::Admission;
use super::checks::{CheckStage, Checked};
use super::config::ServerConfig;
use super::job_slot::{self, JobSlot};
use super::live::{
    BarOutcome, BlockBar, LiveDetail, LiveWindow, MAX_RECENT_FAILURES, RecentFailure, TaskPace,
    WorkerNow,
};
use super::memory_gate::MemoryGate;
use super::memory_watch::{KillFacts, MemoryWatch};
use super::output::OutputQueue;
use super::policy::{self, WorkerFlags};
use super::task_slot::TaskSlot;
use super::worker_slot::WorkerSlot;
use crate::block::{Block, BlockKey, BlockStatus, PerTask, TaskIndex};
use crate::clock::wall_clock;
use crate::error::DaisyError;
use crate::forecast::eta::{Prior, TaskEta};
use crate::run_report::{RunLedger, RunOutcome, last_line};
use crate::scheduler::Scheduler;
use crate::task_state::Abandonment;
use crate::task_state::TaskState;
use crate::worker_timeline::{StartKind, WorkerExit, WorkerSummary, WorkerTimeline};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;
use tokio::sync::Notify;

/// Where a run stands, for the tick hook (progress display).
#[derive(Clone, Debug)]
pub struct RunSnapshot {
    /// Task states in pipeline order.
    pub states: Vec<TaskState>,
    /// Live managed workers per task.
    pub workers: Vec<u32>,
    /// Unexpected worker deaths per task so far.
    pub restarts: Vec<u32>,
    /// Round trips (task, seconds) of the blocks completed since the last
    /// tick, for live metrics.
    pub round_trips: Vec<(TaskIndex, f64)>,
    /// The bounded live detail (blocks returned since the last tick, live
    /// workers, last failures, pace), for a dashboard.
    pub live: LiveDetail,
}

/// A block out with a worker.
#[derive(Debug)]
pub(super) struct Outstanding {
    /// The connection it went out on.
    pub conn: u64,
    /// The managed worker holding it (None: an unmanaged client).
    pub worker: Option<u32>,
    /// When it is reclaimed (the task's timeout).
    pub deadline: Option<Instant>,
    /// When it was sent.
    pub sent: Instant,
    /// When it was sent, seconds since the UNIX epoch.
    pub sent_wall: f64,
}

/// The run's state.
pub(super) struct State {
    /// The blocks and their dependencies.
    pub(super) scheduler: Scheduler,
    /// The run's settings.
    pub(super) config: ServerConfig,
    /// Which ready blocks are out for their task's check.
    checks: CheckStage,
    /// Where workers' output is copied (log mode "both").
    output: OutputQueue,
    /// Where the server listens.
    addr: SocketAddr,
    /// Blocks out with workers.
    outstanding: HashMap<BlockKey, Outstanding>,
    /// Per task: its ETA from the model (see `forecast::eta`).
    eta: PerTask<TaskEta>,
    /// Every managed worker of the run, by id.
    pub(super) workers: BTreeMap<u32, WorkerSlot>,
    /// The id the next worker gets.
    next_worker_id: u32,
    /// What the run keeps of each task beside its scheduler state, in
    /// pipeline order.
    pub(super) tasks: PerTask<TaskSlot>,
    /// The connections: accepted, waiting to say hello, open, and the
    /// clients without a worker id (`connection`'s to keep).
    admission: Admission,
    /// The run is ending: no more blocks, no more workers.
    stopping: bool,
    /// The run was stopped from outside (Ctrl-C, SIGTERM, a hook): the
    /// blocks its killed workers held did not fail (see `reclaim`).
    interrupted: bool,
    /// Every managed worker's timeline, by id.
    timelines: BTreeMap<u32, WorkerTimeline>,
    /// The run's accounting.
    ledger: RunLedger,
    /// Why the run must stop at the next tick: a broken rule
    /// ([`DaisyError::RunBroken`]) or a hook that asked
    /// ([`DaisyError::Stopped`]). The first reason wins.
    stop: Option<DaisyError>,
    /// Completed round trips since the last tick (drained by `snapshot`).
    recent_round_trips: Vec<(TaskIndex, f64)>,
    /// The jobs of the run that host several workers each, by number
    /// (`server::jobs`).
    pub(super) jobs: BTreeMap<u32, JobSlot>,
    /// The number the next job gets.
    next_job: u32,
    /// Workers whose warm start failed, to be started cold by the main
    /// loop (their slots exist).
    start_cold: Vec<u32>,
    /// Blocks returned since the last tick and the workers' last peak RSS
    /// (drained by `snapshot`).
    live: LiveWindow,
    /// The OOM kills and the memory of running blocks, for the words on a
    /// worker the kernel killed.
    memory: MemoryWatch,
    /// The memory gate and guard of the local tasks' blocks, where the run
    /// has one (`server::memory_gate`).
    gate: Option<MemoryGate>,
    /// A block of some task was ready but the memory gate kept it back
    /// since the last look (see [`State::take_gate_wait`]).
    gate_waited: bool,
    /// Wakes the main loop before its next tick (see [`State::wake_main`]).
    main_wake: Rc<Notify>,
    /// Notified at every message a connection receives: keeps the server
    /// awake for a moment after it (see `server::spin_while_busy`).
    activity: Rc<Notify>,
}

/// The run as the tasks of the server's thread share it: its [`State`] in
/// one cell, and the signal that wakes acquires waiting for a block (given
/// whenever blocks or workers change). Cloning it is cloning an `Rc`.
#[derive(Clone)]
pub(super) struct Shared(Rc<SharedRun>);

struct SharedRun {
    state: RefCell<State>,
    changed: Notify,
}

impl Shared {
    /// The run `state`, to be shared.
    pub(super) fn new(state: State) -> Self {
        Self(Rc::new(SharedRun {
            state: RefCell::new(state),
            changed: Notify::new(),
        }))
    }

    /// The state, to read. Never held across an `.await`.
    pub(super) fn state(&self) -> std::cell::Ref<'_, State> {
        self.0.state.borrow()
    }

    /// The state, to change. Never held across an `.await`.
    pub(super) fn state_mut(&self) -> std::cell::RefMut<'_, State> {
        self.0.state.borrow_mut()
    }

    /// The state, to change, unless it is borrowed now (a drop during a
    /// borrow).
    pub(super) fn try_state_mut(&self) -> Option<std::cell::RefMut<'_, State>> {
        self.0.state.try_borrow_mut().ok()
    }

    /// Blocks or workers changed: wake every acquire waiting for a block.
    pub(super) fn notify_changed(&self) {
        self.0.changed.notify_waiters();
    }

    /// The next [`Self::notify_changed`] (take it before looking at the
    /// state, so a change between the look and the wait is not missed).
    pub(super) fn changes(&self) -> tokio::sync::futures::Notified<'_> {
        self.0.changed.notified()
    }
}

impl State {
    /// A fresh run over `scheduler`.
    pub(super) fn new(
        mut scheduler: Scheduler,
        config: ServerConfig,
        checks: CheckStage,
        output: OutputQueue,
        addr: SocketAddr,
    ) -> Self {
        let n = scheduler.pipeline().len();
        scheduler.begin_run();
        let ledger = RunLedger::planned(&scheduler);
        let eta = (0..n)
            .map(|t| TaskEta::new(scheduler.graph().num_blocks(t as TaskIndex)))
            .collect();
        for (t, task) in config.tasks.iter().enumerate() {
            scheduler.set_task_timeout(t as TaskIndex, task.timeout);
        }
        Self {
            scheduler,
            config,
            checks,
            output,
            addr,
            outstanding: HashMap::new(),
            eta,
            workers: BTreeMap::new(),
            next_worker_id: 0,
            tasks: (0..n).map(|_| TaskSlot::default()).collect(),
            admission: Admission::default(),
            stopping: false,
            interrupted: false,
            timelines: BTreeMap::new(),
            ledger,
            stop: None,
            recent_round_trips: Vec::new(),
            jobs: BTreeMap::new(),
            next_job: 0,
            start_cold: Vec::new(),
            live: LiveWindow::new(n),
            memory: MemoryWatch::new(),
            gate: None,
            gate_waited: false,
            main_wake: Rc::new(Notify::new()),
            activity: Rc::new(Notify::new()),
        }
    }

    /// Sample the memory of the blocks local workers run (at most once a
    /// [`super::memory_watch::SAMPLE_EVERY`]).
    pub(super) fn sample_block_memory(&mut self, now: Instant) {
        let workers = &self.workers;
        let busy = self.outstanding.iter().filter_map(|(key, o)| {
            let id = o.worker?;
            Some((id, workers.get(&id)?.local_pid()?, *key))
        });
        self.memory.sample(now, busy);
    }

    /// What is known of worker `id`, killed by a SIGKILL the server did
    /// not send (see [`MemoryWatch::killed`]).
    pub(super) fn kill_facts(&mut self, id: u32) -> KillFacts {
        let key = self
            .outstanding
            .iter()
            .find(|(_, o)| o.worker == Some(id))
            .map(|(k, _)| *k);
        self.memory.killed(id, key)
    }

    /// Where the server listens.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where workers' output is copied.
    pub(super) fn output(&self) -> &OutputQueue {
        &self.output
    }

    /// The id the next worker gets; taken by [`Self::worker_id_taken`]
    /// once its start went through (a failed start leaves it to the next).
    pub(super) fn next_worker_id(&self) -> u32 {
        self.next_worker_id
    }

    /// The id [`Self::next_worker_id`] said is now a worker's.
    pub(super) fn worker_id_taken(&mut self) {
        self.next_worker_id += 1;
    }

    /// The number the next job gets; taken by [`Self::job_number_taken`]
    /// once it was submitted.
    pub(super) fn next_job_number(&self) -> u32 {
        self.next_job
    }

    /// The number [`Self::next_job_number`] said is now a job's.
    pub(super) fn job_number_taken(&mut self) {
        self.next_job += 1;
    }

    /// Stop the run at the next pass of the main loop, for `why`, unless
    /// a reason to stop is known already (the first one wins).
    pub(super) fn stop_with(&mut self, why: DaisyError) {
        self.stop.get_or_insert(why);
        self.main_wake.notify_one();
    }

    /// Why the run must stop now, if it must (taken: the main loop acts
    /// on it once).
    pub(super) fn take_stop(&mut self) -> Option<DaisyError> {
        self.stop.take()
    }

    /// The run is ending: no more blocks and no more workers; when
    /// `interrupted`, because it was stopped from outside (Ctrl-C,
    /// SIGTERM, a hook), and the blocks its killed workers held did not
    /// fail.
    pub(super) fn begin_stopping(&mut self, interrupted: bool) {
        self.stopping = true;
        self.interrupted = interrupted;
    }

    /// Worker `id`'s timeline begins now, its start `kind`.
    pub(super) fn timeline_begins(&mut self, id: u32, kind: StartKind) {
        self.timelines
            .insert(id, WorkerTimeline::new(id, Instant::now(), kind));
    }

    /// Worker `id` never started: it has no timeline.
    pub(super) fn timeline_forgotten(&mut self, id: u32) {
        self.timelines.remove(&id);
    }

    /// Worker `id`'s timeline, to read.
    pub(super) fn timeline(&self, id: u32) -> Option<&WorkerTimeline> {
        self.timelines.get(&id)
    }

    /// Tell worker `id`'s timeline what happened (a worker without one,
    /// never started, is passed over).
    fn on_timeline(&mut self, id: u32, event: impl FnOnce(&mut WorkerTimeline)) {
        if let Some(tl) = self.timelines.get_mut(&id) {
            event(tl);
        }
    }

    /// Worker `id` asks for a block at `now`.
    pub(super) fn worker_acquires(&mut self, id: u32, now: Instant) {
        self.on_timeline(id, |tl| tl.on_acquire(now));
    }

    /// Worker `id` was told at `now` there is no block for it: its
    /// teardown counts from here.
    pub(super) fn worker_dismissed_at(&mut self, id: u32, now: Instant) {
        self.on_timeline(id, |tl| tl.on_dismiss(now));
    }

    /// Worker `id` runs in the job labelled `label`.
    pub(super) fn worker_in_job(&mut self, id: u32, label: &str) {
        self.on_timeline(id, |tl| tl.set_job(label));
    }

    /// Worker `id` was started as `kind` (a job's launcher said how).
    pub(super) fn worker_started_as(&mut self, id: u32, kind: StartKind) {
        self.on_timeline(id, |tl| tl.started_as(kind));
    }

    /// Worker `id`'s start begins again now, as `kind` (its warm start was
    /// answered, or it starts cold after all).
    pub(super) fn worker_restarted(&mut self, id: u32, kind: StartKind) {
        self.on_timeline(id, |tl| tl.restart_at(Instant::now(), kind));
    }

    /// Worker `id` ended now, `exit`.
    pub(super) fn worker_ended(&mut self, id: u32, exit: WorkerExit) {
        self.on_timeline(id, |tl| tl.on_exit(Instant::now(), exit));
    }

    /// The connections: who may come in, who is waiting to say hello,
    /// how many are open (`connection` changes it through
    /// [`State::admission_mut`]).
    pub(super) fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The connections, to change (`connection` admits and closes them).
    pub(super) fn admission_mut(&mut self) -> &mut Admission {
        &mut self.admission
    }

    /// A client of task `task` connected without a worker id.
    pub(super) fn unmanaged_client_joined(&mut self, task: TaskIndex) {
        self.admission.unmanaged_joined();
        self.tasks[task].client_joined();
    }

    /// Whether the run is ending (see [`State::begin_stopping`]).
    pub(super) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Whether task `t` has a check function (its ready blocks go to the
    /// check stage before a worker gets them).
    pub(super) fn has_check(&self, t: TaskIndex) -> bool {
        self.checks.checks(t)
    }

    /// Send task `t`'s next ready blocks to its check, unless some are
    /// there already.
    pub(super) fn ask_next_check(&mut self, t: TaskIndex) {
        self.checks.ask_next(&mut self.scheduler, t);
    }

    /// A check's answers came back: the blocks found done are done, the
    /// others ready for a worker; an error when the check was interrupted.
    pub(super) fn check_answered(&mut self, checked: Checked) -> Result<(), DaisyError> {
        self.checks.answered(&mut self.scheduler, checked)
    }

    /// Whether connection `conn` holds block `key`.
    pub(super) fn holds(&self, conn: u64, key: BlockKey) -> bool {
        self.outstanding.get(&key).is_some_and(|o| o.conn == conn)
    }

    /// One block connection `conn` holds (if any), and whether another
    /// connection holds one.
    pub(super) fn held_by(&self, conn: u64) -> (Option<BlockKey>, bool) {
        let mine = self
            .outstanding
            .iter()
            .find(|(_, o)| o.conn == conn)
            .map(|(k, _)| *k);
        let others = self.outstanding.values().any(|o| o.conn != conn);
        (mine, others)
    }

    /// Whether block `key` is out with a worker (the connection's tests
    /// ask).
    #[cfg(test)]
    pub(super) fn is_out(&self, key: BlockKey) -> bool {
        self.outstanding.contains_key(&key)
    }

    /// Whether no block is out (the connection's tests ask).
    #[cfg(test)]
    pub(super) fn none_out(&self) -> bool {
        self.outstanding.is_empty()
    }

    /// The blocks past their deadline at `now` (`policy::expired`).
    pub(super) fn expired(&self, now: Instant) -> Vec<BlockKey> {
        policy::expired(self.outstanding.iter().map(|(k, o)| (*k, o.deadline)), now)
    }

    /// The worker daisy started that holds block `key`, if one does.
    pub(super) fn holder(&self, key: BlockKey) -> Option<u32> {
        self.outstanding.get(&key).and_then(|o| o.worker)
    }

    /// Worker `worker`'s last block peaked at `bytes` of memory.
    pub(super) fn note_peak_rss(&mut self, worker: u32, bytes: u64) {
        self.live.peak_rss(worker, bytes);
    }

    /// The peak memory of worker `worker`'s last block, if it reported one.
    pub(super) fn last_peak_rss(&self, worker: u32) -> Option<u64> {
        self.live.last_peak_rss(worker)
    }

    /// A note the function of task `task` sent for the report.
    pub(super) fn note(&mut self, task: TaskIndex, text: &str) {
        self.ledger.note(task, text);
    }

    /// Block `block` came back done from `worker` after `round_trip`
    /// seconds (sent at `sent_wall`): marked and counted.
    pub(super) fn record_done(
        &mut self,
        block: &Block,
        round_trip: f64,
        worker: Option<u32>,
        sent_wall: f64,
    ) -> Result<(), DaisyError> {
        self.note_round_trip(block.key.task, round_trip);
        self.ledger.complete(block, Some(round_trip), worker);
        self.scheduler
            .complete_block(block, worker, sent_wall, crate::clock::wall_clock())?;
        self.eta_after(block, round_trip);
        Ok(())
    }

    /// Block `block` came back done after `round_trip` seconds: at every
    /// 5 % of its task's blocks, the model's ETA of the task is made again
    /// (see `forecast::eta`) and recorded for its report.
    fn eta_after(&mut self, block: &Block, round_trip: f64) {
        let task = block.key.task;
        let Some(eta) = self.eta.get_mut(task as usize) else {
            return;
        };
        if !eta.block_done(block.key.index, round_trip) {
            return;
        }
        if !eta.has_prior() {
            let prior = self.eta_prior(task);
            self.eta[task].set_prior(prior);
        }
        let now = Instant::now();
        let in_flight: Vec<(u64, f64)> = self
            .outstanding
            .iter()
            .filter(|(k, _)| k.task == task)
            .map(|(k, o)| (k.index, now.saturating_duration_since(o.sent).as_secs_f64()))
            .collect();
        let workers = self
            .workers
            .values()
            .filter(|w| w.flags().task == task)
            .count();
        let workers = u32::try_from(workers).unwrap_or(u32::MAX).max(1);
        let eta = &mut self.eta[task];
        if let Some(seconds) = eta.checkpoint(now, &in_flight, workers) {
            let done = eta.done_count();
            self.ledger.eta_checkpoint(task, done, seconds);
        }
    }

    /// What a task's blocks were before this run, for its ETA: which are to
    /// run (not marked done in its store, not skipped by its mask) and what
    /// its store measured in earlier runs (dispatch to return, else the
    /// block's wall).
    fn eta_prior(&self, task: TaskIndex) -> Prior {
        let grid = self.scheduler.graph().grid(task);
        let n = grid.num_blocks();
        let mask = self.scheduler.skip_mask(task);
        let store = self.scheduler.tracking(task);
        // figures from before the last reset are of code since changed
        let since = store
            .and_then(|s| {
                crate::run_report::read_last_reset(&s.path().join(crate::tracking_store::RUNS_FILE))
                    .ok()
                    .flatten()
            })
            .unwrap_or(f64::NEG_INFINITY);
        let mut to_run = vec![true; n as usize];
        let mut measured = Vec::new();
        for i in 0..n {
            if mask
                .and_then(|m| m.get(i as usize))
                .is_some_and(|&m| m != 0)
            {
                to_run[i as usize] = false;
            }
            let Some(store) = store else { continue };
            let record = store.record(&grid.block(i));
            if record.done {
                to_run[i as usize] = false;
            }
            if record.sent_at.is_some_and(|s| s < since) {
                continue;
            }
            if let Some(seconds) = record.busy_seconds() {
                measured.push((i, seconds));
            }
        }
        Prior {
            shape: grid.grid_shape(),
            to_run,
            measured,
        }
    }

    /// Block `key` failed on `worker`, `reason`: retried or failed for good.
    pub(super) fn record_failed(&mut self, key: BlockKey, worker: Option<u32>, reason: String) {
        if let Some(attempt) = self.scheduler.fail_attempt(key, &reason, false) {
            self.ledger.failed(&attempt, worker, reason);
        }
    }

    /// Block `key` timed out on `worker`, `reason`; whether it is retried.
    pub(super) fn record_timed_out(
        &mut self,
        key: BlockKey,
        worker: Option<u32>,
        reason: String,
    ) -> bool {
        match self.scheduler.fail_attempt(key, &reason, true) {
            Some(attempt) => {
                let retried = !attempt.last_attempt;
                self.ledger.failed(&attempt, worker, reason);
                retried
            }
            None => false,
        }
    }

    /// Worker `worker` was lost, `why`: its attempts that ended with its
    /// connection say so.
    pub(super) fn explain_lost(&mut self, worker: u32, why: &str) {
        for task in self.ledger.explain_lost(worker, why) {
            self.scheduler
                .restate_worker_error(task, crate::run_report::CONNECTION_CLOSED, why);
        }
    }

    /// A block of `task` came back after `seconds` (for the live metrics
    /// of the next tick).
    fn note_round_trip(&mut self, task: TaskIndex, seconds: f64) {
        self.recent_round_trips.push((task, seconds));
    }

    /// Start these workers (whose warm start failed) cold, from the main
    /// loop.
    pub(super) fn start_cold_later(&mut self, workers: impl IntoIterator<Item = u32>) {
        self.start_cold.extend(workers);
    }

    /// The workers to start cold now.
    pub(super) fn take_start_cold(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.start_cold)
    }

    /// What wakes the main loop before its next tick.
    pub(super) fn main_wake(&self) -> Rc<Notify> {
        self.main_wake.clone()
    }

    /// What keeps the server awake after a message.
    pub(super) fn activity(&self) -> Rc<Notify> {
        self.activity.clone()
    }

    /// Wake the main loop now, not at its next tick, when it has something
    /// to do that the run waits for: the run is done or must stop, or a
    /// task has ready blocks and no worker (a downstream task whose first
    /// block just became ready). Without this, each of those waited for the
    /// tick: up to 50 ms at the end of every run and at the start of every
    /// downstream task. Cheap enough for every release: a task with a live
    /// worker is found at its first one.
    pub(super) fn wake_main(&self) {
        let unstaffed = |t: TaskIndex| {
            self.config.tasks[t].worker.is_some()
                && !self.flags().any(|(_, w)| w.alive && w.task == t)
        };
        if self.stop.is_some()
            || self.scheduler.is_done()
            || self.scheduler.ready_tasks().any(unstaffed)
        {
            self.main_wake.notify_one();
        }
    }

    /// Whether task `t`'s next worker should be asked of its launcher: it
    /// has a launcher command, and warm starts are neither off nor over.
    pub(super) fn warm_wanted(&self, t: TaskIndex) -> bool {
        self.config.tasks[t].launcher.is_some() && self.tasks[t].launcher().takes_requests()
    }

    /// The task id of task `t`.
    pub(super) fn task_id(&self, t: TaskIndex) -> String {
        self.scheduler.pipeline().spec(t).task_id.clone()
    }

    /// Every block out that matches `lost` counts as a failed attempt (its
    /// worker died or its connection closed): removed from `outstanding`
    /// here, so it is accounted for exactly once. On an interrupted run the
    /// blocks were cut short by whoever stopped it, not failed: they count
    /// no attempt (in the report or the tracking store) and stay unfinished,
    /// for the next run to do with their retries whole.
    pub(super) fn reclaim(
        &mut self,
        lost: impl Fn(&Outstanding) -> bool,
        worker: Option<u32>,
        why: &str,
    ) {
        let keys: Vec<BlockKey> = self
            .outstanding
            .iter()
            .filter(|(_, o)| lost(o))
            .map(|(k, _)| *k)
            .collect();
        if let Some(w) = worker
            .filter(|_| !keys.is_empty())
            .and_then(|id| self.workers.get_mut(&id))
        {
            w.lost_a_block();
        }
        for key in keys {
            self.take_back(key, BarOutcome::Lost, None, Instant::now());
            if self.interrupted {
                continue;
            }
            let stopped = worker
                .and_then(|w| self.gate.as_mut()?.take_stopped(w))
                .filter(|s| s.key == key);
            match stopped {
                // the memory guard stopped it: held back, no attempt
                Some(s) if !s.alone && self.scheduler.hold_back(key) => {}
                Some(s) => {
                    let why = self
                        .gate
                        .as_ref()
                        .map(|g| g.too_big(&s))
                        .unwrap_or_default();
                    self.record_failed(key, worker, why);
                }
                None => self.record_failed(key, worker, why.to_string()),
            }
        }
    }

    /// The next block of `task` for a worker, if one is ready and, where
    /// the task has a check function, its check said it needs work (the
    /// next block's check is asked at once: one ahead, see
    /// [`super::checks`]).
    pub(super) fn next_block(&mut self, task: TaskIndex) -> Option<Block> {
        if let Some(gate) = self
            .gate
            .as_ref()
            .filter(|_| self.config.tasks[task].is_local())
        {
            if let Some(held) = self.scheduler.next_held(task)
                && gate.admits(task, Some(held))
            {
                return self.scheduler.take_held(task);
            }
            if !gate.admits(task, None) {
                self.gate_waited = true;
                return None;
            }
        }
        if !self.checks.checks(task) {
            let no_check = |_: &Block| Ok::<bool, std::convert::Infallible>(false);
            return match self.scheduler.acquire_block(task, no_check) {
                Ok(block) => block,
                Err(never) => match never {},
            };
        }
        let block = self.scheduler.acquire_checked(task);
        self.checks.ask_next(&mut self.scheduler, task);
        block
    }

    /// Run the memory gate of this run's local tasks (see
    /// `server::memory_gate`).
    pub(super) fn use_memory_gate(&mut self, gate: MemoryGate) {
        self.gate = Some(gate);
    }

    /// Whether the memory gate kept a ready block back since the last call
    /// (a waiting worker then looks again soon: memory frees without a
    /// block returning, when a stopped worker's process is gone).
    pub(super) fn take_gate_wait(&mut self) -> bool {
        std::mem::take(&mut self.gate_waited)
    }

    /// Whether the memory guard stopped worker `id` (its exit is no
    /// surprise, and no restart).
    pub(super) fn stopped_for_memory(&self, id: u32) -> bool {
        self.gate.as_ref().is_some_and(|g| g.stopped_by_guard(id))
    }

    /// The server did not run for `gap` (its process was stopped, or
    /// starved): whatever its workers did meanwhile it did not watch, and a
    /// block that finished then may still have its release unread. Every
    /// deadline moves on by the gap, so that a block times out only for
    /// time its worker was watched: timed out means the worker was slow.
    pub(super) fn server_stalled(&mut self, gap: std::time::Duration) {
        let mut moved = 0usize;
        for o in self.outstanding.values_mut() {
            if let Some(d) = o.deadline.as_mut() {
                *d += gap;
                moved += 1;
            }
        }
        let gap = gap.as_secs_f64();
        if moved > 0 {
            tracing::warn!(
                "the server did not run for {gap:.1} s (its process was stopped, or starved of \
                 CPU); the deadlines of the {moved} block(s) out with a timeout move on by as much"
            );
        } else {
            tracing::debug!("the server did not run for {gap:.1} s");
        }
    }

    /// Hand `block` out on connection `conn` (of managed worker `worker`,
    /// if any): the one place a block enters `outstanding`, with its send
    /// stamps (the ledger's wall clock, the round trip's instant), its
    /// deadline under the task's timeout (a worker the server cannot kill,
    /// `ends_late_attempts`, ends the attempt itself at the timeout, so its
    /// block is taken back only a grace later, once that surely happened),
    /// and its worker's timeline and flags; the block is marked processing,
    /// as a worker's block function sees it in both releases (a hand-driven
    /// `Scheduler` hands it out created). The mirror of [`Self::take_back`].
    pub(super) fn hand_out(
        &mut self,
        block: &mut Block,
        conn: u64,
        worker: Option<u32>,
        ends_late_attempts: bool,
    ) {
        block.status = BlockStatus::Processing;
        let task = block.key.task;
        let timeout = self.config.tasks[task].timeout;
        let now = Instant::now();
        let sent_wall = wall_clock();
        self.ledger.sent(task, sent_wall);
        let grace = if ends_late_attempts {
            crate::block_deadline::UNMANAGED_GRACE
        } else {
            std::time::Duration::ZERO
        };
        self.outstanding.insert(
            block.key,
            Outstanding {
                conn,
                worker,
                deadline: timeout.map(|t| now + t + grace),
                sent: now,
                sent_wall,
            },
        );
        if let Some(tl) = worker.and_then(|id| self.timelines.get_mut(&id)) {
            tl.on_send(now);
        }
        let pid = worker.and_then(|id| self.workers.get(&id)?.local_pid());
        if let Some(gate) = self.gate.as_mut() {
            gate.handed_out(block.key, worker, pid);
        }
        if let Some(w) = worker.and_then(|id| self.workers.get_mut(&id)) {
            w.took_a_block();
        }
    }

    /// Take block `key` back from whoever has it out: the one place a
    /// block leaves `outstanding` (returned, timed out or lost), its bar on
    /// the live timeline stamped with `outcome` and, where `returned_by`
    /// names the worker that gave it back (with whether it reported it
    /// done), the return on that worker's timeline. The caller accounts it
    /// in the ledger. `now` is the moment it came back: the worker's
    /// compute phase and the block's round trip end at the same instant.
    /// None when the block was not out.
    pub(super) fn take_back(
        &mut self,
        key: BlockKey,
        outcome: BarOutcome,
        returned_by: Option<(u32, bool)>,
        now: Instant,
    ) -> Option<Outstanding> {
        let out = self.outstanding.remove(&key)?;
        if let Some(gate) = self.gate.as_mut() {
            gate.returned(key, out.worker);
        }
        if let Some((id, ok)) = returned_by {
            if let Some(w) = self.workers.get_mut(&id) {
                w.gave_a_block_back();
            }
            if let Some(tl) = self.timelines.get_mut(&id) {
                tl.on_return(now, ok);
            }
        }
        self.note_bar(key, &out, outcome);
        Some(out)
    }

    /// Block `key`, just removed from `outstanding` as `out`, left its
    /// worker now: one bar of the live timeline.
    /// A failed attempt (not one an interrupt cut short, which is no
    /// failure) is also kept with its times for the report.
    fn note_bar(&mut self, key: BlockKey, out: &Outstanding, outcome: BarOutcome) {
        let spatial_id = self.scheduler.graph().block(key).spatial_id;
        let end = wall_clock().max(out.sent_wall);
        self.live.bar(BlockBar {
            task: key.task,
            worker: out.worker,
            spatial_id,
            start: out.sent_wall,
            end,
            outcome,
        });
        if outcome != BarOutcome::Done && !self.interrupted {
            let timed_out = outcome == BarOutcome::TimedOut;
            self.ledger
                .failed_span(key, spatial_id, out.worker, (out.sent_wall, end), timed_out);
        }
    }

    /// Give up `task` (and orphan its downstream tasks): blocks of
    /// abandoned tasks still out will be refused, and their workers leave
    /// at their next request.
    pub(super) fn abandon(&mut self, task: TaskIndex, why: Abandonment) {
        tracing::error!("abandoning task {:?}: {}", self.task_id(task), why.reason);
        let now = self.scheduler.abandon_task_because(task, why);
        self.ledger.abandoned(now);
        let scheduler = &self.scheduler;
        self.outstanding
            .retain(|k, _| !scheduler.is_abandoned(k.task));
        for w in self.workers.values_mut() {
            if w.flags().alive && scheduler.is_abandoned(w.flags().task) {
                w.retire();
            }
        }
    }

    /// The workers' flags, by id.
    pub(super) fn flags(&self) -> impl Iterator<Item = (u32, &WorkerFlags)> + Clone {
        self.workers.iter().map(|(id, w)| (*id, w.flags()))
    }

    /// Where the run stands, for the tick hook; drains the recent round
    /// trips.
    pub(super) fn snapshot(&mut self) -> RunSnapshot {
        let n = self.scheduler.pipeline().len();
        let mut workers = vec![0u32; n];
        for w in self.workers.values().filter(|w| w.flags().alive) {
            workers[w.flags().task as usize] += 1;
        }
        RunSnapshot {
            states: (0..n as TaskIndex)
                .map(|t| self.scheduler.task_state(t).clone())
                .collect(),
            workers,
            restarts: (0..n as TaskIndex)
                .map(|t| self.scheduler.task_state(t).worker_restart_count as u32)
                .collect(),
            round_trips: std::mem::take(&mut self.recent_round_trips),
            live: self.live_detail(),
        }
    }

    /// The live detail now; drains the bars.
    fn live_detail(&mut self) -> LiveDetail {
        let now = Instant::now();
        let (bars, bars_dropped) = self.live.take_bars();
        let mut holding: HashMap<u32, (u64, f64)> = HashMap::new();
        for (key, out) in &self.outstanding {
            if let Some(id) = out.worker {
                let spatial_id = self.scheduler.graph().block(*key).spatial_id;
                holding.insert(id, (spatial_id, out.sent_wall));
            }
        }
        let n = self.scheduler.pipeline().len();
        let mut busy = vec![(0.0f64, 0.0f64, false); n];
        let mut workers = Vec::new();
        for (id, w) in &self.workers {
            let t = w.flags().task as usize;
            let timeline = self.timelines.get(id);
            if let (Some(tl), Some(acc)) = (timeline, busy.get_mut(t)) {
                let (b, a) = tl.busy_and_alive(now);
                *acc = (acc.0 + b, acc.1 + a, true);
            }
            if !w.flags().alive {
                continue;
            }
            let (blocks_done, blocks_failed) = timeline.map(|tl| tl.blocks()).unwrap_or_default();
            let held = holding.get(id);
            workers.push(WorkerNow {
                worker_id: *id,
                task: w.flags().task,
                block: held.map(|h| h.0),
                since: held.map(|h| h.1),
                last_peak_rss: self.live.last_peak_rss(*id),
                blocks_done,
                blocks_failed,
            });
        }
        let recent: Vec<&crate::run_report::FailureNote> = self.ledger.recent_failures().collect();
        let failures = recent[recent.len().saturating_sub(MAX_RECENT_FAILURES)..]
            .iter()
            .map(|f| RecentFailure {
                task: f.task,
                spatial_id: f.spatial_id,
                worker: f.worker_id,
                message: last_line(&f.reason),
            })
            .collect();
        let tasks = (0..n)
            .map(|t| {
                let s = self.scheduler.task_state(t as TaskIndex);
                let remaining = s
                    .total_block_count
                    .saturating_sub(s.completed_count + s.failed_count + s.orphaned_count);
                let done = s.completed_count.saturating_sub(s.skipped_count);
                let (blocks_per_second, rate_eta) =
                    self.live.pace(t as TaskIndex, now, done, remaining);
                // the model's ETA once it has one (see `forecast::eta`)
                let eta_seconds = if remaining == 0 {
                    rate_eta
                } else {
                    self.eta[t as TaskIndex].eta_now(now).or(rate_eta)
                };
                let (b, a, any) = busy[t];
                TaskPace {
                    blocks_per_second,
                    eta_seconds,
                    utilisation: (any && a > 0.0).then(|| b / a),
                }
            })
            .collect();
        LiveDetail {
            now: wall_clock(),
            bars,
            bars_dropped,
            workers,
            failures,
            failures_total: self.ledger.failures_total(),
            tasks,
        }
    }

    /// The run's outcome now, its workers folded per task.
    pub(super) fn outcome(&self, interrupted: bool) -> RunOutcome {
        let mut outcome = self.ledger.outcome(
            &self.scheduler,
            interrupted,
            |t| WorkerSummary {
                spawner: self.config.tasks[t].spawner.clone(),
                launcher_startup: self.tasks[t].launcher().startup(),
                cold_start_reason: self.tasks[t].launcher().cold_reason().map(str::to_string),
                idle_timeout: self.idle_timeout(t).map(|d| d.as_secs_f64()),
                jobs: job_slot::records(self.jobs.iter(), t),
                job_queue_wait: job_slot::queue_waits(self.jobs.values(), t),
                ..WorkerSummary::fold(
                    self.timelines
                        .iter()
                        .filter(|(id, _)| self.workers.get(id).is_some_and(|w| w.flags().task == t))
                        .map(|(_, tl)| tl),
                    self.tasks[t].unmanaged_clients(),
                )
            },
            self.admission.unmanaged_clients(),
            (0..self.scheduler.pipeline().len() as TaskIndex)
                .map(|t| self.scheduler.task_state(t).worker_start_count as u32)
                .collect(),
        );
        for (t, report) in outcome.reports.iter_mut().enumerate() {
            report.forecast_sample = self.config.forecast_sample;
            report.function_sha256 = self.config.tasks[t as TaskIndex].function_sha256.clone();
        }
        if let Some(gate) = &self.gate {
            for (t, report) in outcome.reports.iter_mut().enumerate() {
                let t = t as TaskIndex;
                if self.config.tasks[t].is_local() {
                    let held_back = self.scheduler.task_state(t).held_back_count;
                    report.memory = Some(gate.report(held_back));
                }
            }
        }
        outcome
    }

    /// How long a worker of task `t` may wait for a block before it is
    /// handed back (see [`policy::idle_timeout`]).
    pub(super) fn idle_timeout(&self, t: TaskIndex) -> Option<std::time::Duration> {
        let rt = &self.config.tasks[t];
        policy::idle_timeout(
            rt.idle_timeout,
            self.config.idle_timeout,
            rt.spawner_idle_timeout,
        )
    }

    /// The resources the live workers hold.
    pub(super) fn resources_in_use(&self) -> BTreeMap<String, u64> {
        let tasks = &self.config.tasks;
        policy::resources_in_use(self.workers.values().map(|w| w.flags()), |t| {
            &tasks[t].requires
        })
    }
}

/// A small run's state for the server's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::geometry::Roi;
    use crate::pipeline::Pipeline;
    use crate::server::config::{LogMode, TaskRuntime};
    use crate::task_spec::{Fit, TaskSpec};
    use tokio::sync::mpsc;

    /// A run of two chained 1-D tasks of 4 blocks each, nothing started.
    pub(crate) fn state() -> State {
        let roi = |o: i64, s: i64| Roi::from_slices(&[o], &[s]).unwrap();
        let spec = |id: &str, up: Vec<String>| {
            TaskSpec::new(
                id,
                roi(0, 40),
                roi(0, 10),
                roi(0, 10),
                Fit::Valid,
                false,
                1, // one retry: a lost block is ready again
                up,
            )
            .unwrap()
        };
        let pipeline = Pipeline::new(vec![spec("a", vec![]), spec("b", vec!["a".into()])]);
        let runtime = TaskRuntime {
            max_workers: 1,
            auto_workers: false,
            timeout: None,
            max_worker_restarts: 0,
            requires: BTreeMap::new(),
            worker: None,
            launcher: None,
            job: None,
            resource_tracking: false,
            gpu_tracking: false,
            spawner: "local".into(),
            payload_sha256: None,
            function_sha256: None,
            idle_timeout: None,
            spawner_idle_timeout: None,
        };
        let config = ServerConfig {
            host: "127.0.0.1".into(),
            port: 0,
            tasks: vec![runtime.clone(), runtime].into(),
            resources: BTreeMap::new(),
            log_dir: None,
            log_mode: LogMode::File,
            token: String::new(),
            advertise_host: None,
            stop_all: Vec::new(),
            wait_all: Vec::new(),
            tick: crate::server::TICK,
            liveness_timeout: crate::liveness::DEFAULT_TIMEOUT,
            idle_timeout: None,
            memory: Default::default(),
            forecast_sample: false,
        };
        let addr = "127.0.0.1:1".parse().unwrap();
        let (answers, _) = mpsc::unbounded_channel();
        let checks = CheckStage::new(None, 2, answers);
        let output = OutputQueue::unused();
        State::new(
            Scheduler::new(pipeline.unwrap()),
            config,
            checks,
            output,
            addr,
        )
    }

    /// Hand out the next block of `task` on connection `conn`.
    pub(crate) fn hand_out(st: &mut State, task: TaskIndex, conn: u64) -> BlockKey {
        let mut block = st
            .scheduler
            .acquire_block(task, |_| Ok::<_, std::convert::Infallible>(false))
            .unwrap()
            .unwrap();
        st.hand_out(&mut block, conn, None, false);
        block.key
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{hand_out, state};
    use super::*;

    #[test]
    fn a_stall_of_the_server_moves_every_deadline_on_by_its_length() {
        let mut st = state();
        st.config.tasks[0].timeout = Some(std::time::Duration::from_secs(3));
        let timed = hand_out(&mut st, 0, 1);
        let before = st.outstanding[&timed].deadline.unwrap();
        st.server_stalled(std::time::Duration::from_secs(25));
        let after = st.outstanding[&timed].deadline.unwrap();
        assert_eq!(after - before, std::time::Duration::from_secs(25));
        // what expired only for the time nobody watched has not expired
        let expired = policy::expired(
            st.outstanding.iter().map(|(k, o)| (*k, o.deadline)),
            before + std::time::Duration::from_secs(1),
        );
        assert!(expired.is_empty());
    }

    #[test]
    fn blocks_cut_short_by_an_interrupt_are_no_failed_attempts() {
        let mut st = state();
        let held = hand_out(&mut st, 0, 1);
        st.interrupted = true;
        st.reclaim(|o| o.conn == 1, None, "the connection closed");
        assert!(!st.outstanding.contains_key(&held));
        let out = st.outcome(true);
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        assert_eq!(out.states[0].failed_attempts, 0);
        assert_eq!(out.states[0].failed_count, 0);
    }

    #[test]
    fn reclaim_accounts_each_lost_block_once() {
        let mut st = state();
        let lost = hand_out(&mut st, 0, 1);
        let kept = hand_out(&mut st, 0, 2);
        st.reclaim(|o| o.conn == 1, None, "the connection closed");
        st.reclaim(|o| o.conn == 1, None, "the connection closed");
        assert!(!st.outstanding.contains_key(&lost));
        assert!(st.outstanding.contains_key(&kept));
        let out = st.outcome(false);
        assert_eq!(out.failures.len(), 1, "once, however often it is reclaimed");
        assert_eq!(out.states[0].failed_attempts, 1);
        assert_eq!(
            out.states[0].ready_count, 3,
            "the lost block is ready again"
        );
    }

    #[test]
    fn a_block_handed_out_is_processing_with_its_deadline_and_its_worker_busy() {
        let mut st = state();
        st.config.tasks[0].timeout = Some(std::time::Duration::from_secs(30));
        st.workers.insert(4, WorkerSlot::starting(0));
        let mut block = st
            .scheduler
            .acquire_block(0, |_| Ok::<_, std::convert::Infallible>(false))
            .unwrap()
            .unwrap();
        st.hand_out(&mut block, 9, Some(4), false);
        assert_eq!(block.status, BlockStatus::Processing);
        let out = &st.outstanding[&block.key];
        assert_eq!((out.conn, out.worker), (9, Some(4)));
        assert_eq!(
            out.deadline,
            Some(out.sent + std::time::Duration::from_secs(30))
        );
        assert!(out.sent_wall > 0.0, "stamped on the wall clock");
        let w = st.workers[&4].flags();
        assert!(w.busy && !w.waiting && w.blocks_taken == 1);
        // a worker the server cannot kill ends its attempt itself: its block
        // is taken back only a grace after the timeout
        let mut other = st
            .scheduler
            .acquire_block(0, |_| Ok::<_, std::convert::Infallible>(false))
            .unwrap()
            .unwrap();
        st.hand_out(&mut other, 10, None, true);
        let out = &st.outstanding[&other.key];
        assert_eq!(
            out.deadline,
            Some(
                out.sent
                    + std::time::Duration::from_secs(30)
                    + crate::block_deadline::UNMANAGED_GRACE
            )
        );
    }

    #[test]
    fn a_block_is_taken_back_once_with_its_bar() {
        let mut st = state();
        let key = hand_out(&mut st, 0, 1);
        let out = st.take_back(key, BarOutcome::TimedOut, None, Instant::now());
        assert!(out.is_some() && !st.outstanding.contains_key(&key));
        assert_eq!(
            st.take_back(key, BarOutcome::Done, None, Instant::now())
                .map(|o| o.conn),
            None,
            "a block not out is not taken back twice"
        );
        let (bars, dropped) = st.live.take_bars();
        assert_eq!((bars.len(), dropped), (1, 0));
        assert_eq!(bars[0].outcome, BarOutcome::TimedOut);
        // a failed attempt's times go to the report; a block an interrupt
        // cut short is no failed attempt
        let other = hand_out(&mut st, 0, 2);
        st.interrupted = true;
        st.take_back(other, BarOutcome::Lost, None, Instant::now());
        let spans = &st.outcome(false).reports[0].failed_attempts;
        assert_eq!(spans.len(), 1, "{spans:?}");
        assert!(spans[0].timed_out && spans[0].index == key.index);
    }

    #[test]
    fn abandoning_drops_its_blocks_orphans_downstream_and_retires_its_workers() {
        let mut st = state();
        hand_out(&mut st, 0, 1);
        st.workers.insert(7, WorkerSlot::starting(0));
        st.abandon(
            0,
            Abandonment::start_failed("its workers kept dying".into()),
        );
        assert!(st.outstanding.is_empty(), "a late release will be refused");
        assert!(st.workers[&7].flags().retire);
        let out = st.outcome(false);
        assert_eq!(out.abandoned.len(), 2, "the task and the one it orphaned");
        assert_eq!(out.states[1].orphaned_count, 4);
        assert_eq!(
            out.reports[0].outcome,
            crate::run_report::Outcome::Abandoned
        );
    }

    #[test]
    fn a_snapshot_counts_live_workers_and_drains_round_trips() {
        let mut st = state();
        st.recent_round_trips.push((0, 0.5));
        let first = st.snapshot();
        assert_eq!(first.round_trips, vec![(0, 0.5)]);
        assert!(st.snapshot().round_trips.is_empty());
        assert_eq!(first.workers, vec![0, 0]);
    }

    #[test]
    fn a_snapshot_carries_the_bounded_live_detail() {
        let mut st = state();
        st.workers.insert(3, WorkerSlot::starting(0));
        st.timelines.insert(
            3,
            WorkerTimeline::new(3, Instant::now(), crate::worker_timeline::StartKind::Cold),
        );
        let held = hand_out(&mut st, 0, 1);
        st.outstanding.get_mut(&held).unwrap().worker = Some(3);
        let lost = hand_out(&mut st, 0, 2);
        st.reclaim(|o| o.conn == 2, None, "first line\nthe connection closed");
        st.live.peak_rss(3, 1234);
        let snap = st.snapshot();
        let live = &snap.live;
        assert_eq!(live.bars.len(), 1, "the lost block is a bar");
        let bar = &live.bars[0];
        assert_eq!(bar.outcome, BarOutcome::Lost);
        assert_eq!(bar.spatial_id, st.scheduler.graph().block(lost).spatial_id);
        assert!(bar.end >= bar.start);
        assert_eq!(live.workers.len(), 1);
        let w = &live.workers[0];
        assert_eq!(w.worker_id, 3);
        assert_eq!(w.block, Some(st.scheduler.graph().block(held).spatial_id));
        assert_eq!(w.last_peak_rss, Some(1234));
        assert_eq!(live.failures_total, 1);
        assert_eq!(live.failures[0].message, "the connection closed");
        assert_eq!(live.tasks.len(), 2);
        assert!(live.tasks[0].utilisation.is_some(), "task 0 has a worker");
        assert_eq!(live.tasks[1].utilisation, None, "task 1 has none");
        assert!(st.snapshot().live.bars.is_empty(), "bars are drained");
    }
}
