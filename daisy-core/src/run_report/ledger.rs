//! What a run accounts as it goes: the per-task [`BlockAggregates`] and
//! the [`RunLedger`] both runners keep (completions, failed attempts,
//! abandoned tasks, spans, notices), with the budgets that keep a run of
//! failing blocks from growing the driver without bound.

use super::*;
use crate::block::{Block, BlockKey, PerTask, TaskIndex};
use crate::block_profile::BlockStats;
use crate::clock::wall_clock;
use crate::run_stats::{LogHistogram, REPORT_PER_OCTAVE, Trend, Welford};
use crate::scheduler::{FailedAttempt, Scheduler};
use crate::task_state::TaskState;
use crate::worker_timeline::WorkerSummary;

/// Per-block aggregates of one task over one run.
#[derive(Clone, Debug, Default)]
pub struct BlockAggregates {
    round_trip: Welford,
    wall: Welford,
    cpu: Welford,
    peak_rss: Welford,
    io_read: Welford,
    io_write: Welford,
    overhead: Welford,
    gpu_util: Welford,
    gpu_mem: Welford,
    trend: Trend,
    has_stats: bool,
    /// The time of each worker's first block (wall, else round trip).
    first_on_worker: Welford,
    /// The time of every block (the same measure), to set the first
    /// blocks against the rest.
    timed: Welford,
    /// The slowest blocks so far, slowest first: `(seconds, spatial id)`.
    slowest: Vec<(f64, u64)>,
    /// Run-queue waits, and the wall of the blocks that have one.
    run_queue: Welford,
    queued_wall: f64,
    /// The blocks' peak RSS, for its quantiles.
    peak_rss_hist: Option<LogHistogram>,
}

/// Slowest blocks a report lists: enough to find the outliers, few enough
/// for one line.
pub const SLOWEST_BLOCKS: usize = 5;

impl BlockAggregates {
    /// A completed block: the server's round trip (distributed runs) and
    /// the worker's own measurement (resource tracking). `first_on_worker`
    /// says it is the first block its worker completed in this run (its
    /// cost includes the worker's warm-up: imports, caches, first touch).
    pub fn record_success(
        &mut self,
        round_trip: Option<f64>,
        stats: Option<&BlockStats>,
        first_on_worker: bool,
        spatial_id: u64,
    ) {
        if let Some(rt) = round_trip {
            self.round_trip.push(rt);
        }
        if let Some(t) = stats.map(|s| s.wall_seconds).or(round_trip)
            && t.is_finite()
        {
            self.timed.push(t);
            if first_on_worker {
                self.first_on_worker.push(t);
            }
            if self.slowest.len() < SLOWEST_BLOCKS || t > self.slowest[SLOWEST_BLOCKS - 1].0 {
                let at = self.slowest.partition_point(|&(s, _)| s >= t);
                self.slowest.insert(at, (t, spatial_id));
                self.slowest.truncate(SLOWEST_BLOCKS);
            }
        }
        if let Some(s) = stats {
            self.has_stats = true;
            self.wall.push(s.wall_seconds);
            self.cpu.push(s.cpu_seconds);
            self.peak_rss.push(s.peak_rss_bytes as f64);
            if s.peak_rss_bytes > 0 {
                self.peak_rss_hist
                    .get_or_insert_with(|| LogHistogram::new(REPORT_PER_OCTAVE))
                    .push(s.peak_rss_bytes);
            }
            if s.run_queue_seconds.is_finite() {
                self.run_queue.push(s.run_queue_seconds);
                self.queued_wall += s.wall_seconds;
            }
            self.io_read.push(s.io_read_bytes as f64);
            self.io_write.push(s.io_write_bytes as f64);
            self.trend.push(s.wall_seconds * 1e3);
            // GPU figures join only where measured: NaN / 0 is "none"
            if !s.gpu_util_pct.is_nan() {
                self.gpu_util.push(f64::from(s.gpu_util_pct));
            }
            if !s.gpu_util_pct.is_nan() || s.gpu_mem_bytes > 0 {
                self.gpu_mem.push(s.gpu_mem_bytes as f64);
            }
            if let Some(rt) = round_trip {
                self.overhead.push(rt - s.wall_seconds);
            }
        }
    }

    /// The block section of the report.
    pub fn summary(&self, state: &TaskState) -> BlockSummary {
        BlockSummary {
            count: state.completed_count,
            skipped: state.skipped_count,
            failures: state.failed_attempts,
            has_stats: self.has_stats,
            round_trip: self.round_trip.summary(),
            wall: self.wall.summary(),
            cpu: self.cpu.summary(),
            peak_rss: self.peak_rss.summary(),
            io_read: self.io_read.summary(),
            io_write: self.io_write.summary(),
            overhead: self.overhead.summary(),
            gpu_util: self.gpu_util.summary(),
            gpu_mem: self.gpu_mem.summary(),
            trend_slope_ms: self.trend.slope(),
            trend_shown: self.trend.count() >= crate::run_stats::TREND_MIN_BLOCKS,
            peak_rss_source: if self.has_stats {
                crate::block_profile::peak_rss_source().to_string()
            } else {
                String::new()
            },
            first_on_worker: self.first_on_worker.summary(),
            warmup_ratio: self.warmup_ratio(),
            slowest: self
                .slowest
                .iter()
                .map(|&(seconds, spatial_id)| SlowBlock {
                    spatial_id,
                    seconds,
                })
                .collect(),
            cpu_per_wall: (self.has_stats && self.wall.summary().sum > 0.0)
                .then(|| self.cpu.summary().sum / self.wall.summary().sum),
            run_queue: self.run_queue.summary(),
            run_queue_per_wall: (self.queued_wall > 0.0)
                .then(|| (self.run_queue.summary().sum / self.queued_wall).min(1.0)),
            peak_rss_p50: self.peak_rss_quantile(0.5),
            peak_rss_p95: self.peak_rss_quantile(0.95),
        }
    }

    /// The `q` quantile of the blocks' peak RSS, bytes, never above the
    /// largest measured (a bucket's upper end can be).
    fn peak_rss_quantile(&self, q: f64) -> Option<f64> {
        let at = self.peak_rss_hist.as_ref()?.quantile(q)? as f64;
        Some(at.min(self.peak_rss.summary().max))
    }

    /// Each worker's first block against the mean of the other blocks:
    /// None without both.
    fn warmup_ratio(&self) -> Option<f64> {
        let (first, all) = (self.first_on_worker.summary(), self.timed.summary());
        let others = all.n.checked_sub(first.n).filter(|&n| n > 0)?;
        let others_mean = (all.sum - first.sum) / others as f64;
        (first.n > 0 && others_mean > 0.0).then(|| first.mean / others_mean)
    }
}

/// What a run accounts as it goes: per-task aggregates, every failed
/// attempt and every abandoned task. The server and the serial runner both
/// keep one, so a block completes, fails and is reported the same way in
/// both.
#[derive(Clone, Debug)]
pub struct RunLedger {
    started_at: f64,
    aggregates: PerTask<BlockAggregates>,
    /// The first [`MAX_FAILURE_NOTES`] failed attempts.
    pub(super) failures: Vec<FailureNote>,
    /// Failed attempts past those: counted, not noted.
    failures_unnoted: u64,
    /// The latest [`RECENT_FAILURE_NOTES`] failed attempts (the live view
    /// lists them), each with whether it is among `failures` too.
    recent: std::collections::VecDeque<(FailureNote, bool)>,
    abandoned: Vec<(TaskIndex, String)>,
    /// Blocks whose first failure text is kept whole.
    described: std::collections::HashSet<BlockKey>,
    /// Bytes of failure text kept so far.
    failure_text: usize,
    /// Per task: why its blocks failed.
    causes: PerTask<FailureCauses>,
    /// Per task: first dispatch and last return, wall clock.
    spans: PerTask<(Option<f64>, Option<f64>)>,
    /// The workers that completed a block of a task in this run (None: the
    /// serial runner), so a worker's first block is known.
    workers_seen: std::collections::HashSet<(TaskIndex, Option<u32>)>,
    /// Per task: its notices (see [`TaskReport::notices`]).
    pub(super) notices: PerTask<Vec<String>>,
    /// Per task: when its first failed attempts ran (see
    /// [`TaskReport::failed_attempts`]).
    attempt_spans: PerTask<Vec<AttemptSpan>>,
    /// Per task: the ETAs the run gave (see [`TaskReport::eta`]).
    eta: PerTask<Vec<EtaCheckpoint>>,
}

/// Failure texts a run keeps whole, in all: a run whose blocks all fail
/// with long tracebacks must not grow the driver without bound (2000
/// attempts of 60 KB each took a driver to 254 MiB). Past it, and for every
/// attempt but a block's first, only the text's last line is kept.
pub const FAILURE_TEXT_BUDGET: usize = 4 << 20;

/// Failed attempts a run notes one by one (block, worker, text: what
/// `Server.failures` and the summary's failed blocks come from). Past it,
/// attempts are still counted everywhere (task states, failure causes, the
/// report) but not noted: a run whose blocks all fail kept 2.5 KB per
/// attempt in the driver (50 MB for 20,000 attempts measured, so 2.5 GB
/// for 10^6), and no one reads ten thousand failure notes.
pub const MAX_FAILURE_NOTES: usize = 10_000;

/// The latest failed attempts kept for the live view, noted or not.
pub const RECENT_FAILURE_NOTES: usize = 16;

impl RunLedger {
    /// A ledger for a pipeline of `tasks` tasks, starting now.
    pub fn new(tasks: usize) -> Self {
        // the run's stamps count from the wall clock now, monotonically
        crate::clock::anchor();
        Self {
            started_at: wall_clock(),
            aggregates: vec![BlockAggregates::default(); tasks].into(),
            failures: Vec::new(),
            failures_unnoted: 0,
            recent: std::collections::VecDeque::new(),
            abandoned: Vec::new(),
            described: std::collections::HashSet::new(),
            failure_text: 0,
            causes: vec![FailureCauses::default(); tasks].into(),
            spans: vec![(None, None); tasks].into(),
            workers_seen: std::collections::HashSet::new(),
            notices: vec![Vec::new(); tasks].into(),
            attempt_spans: vec![Vec::new(); tasks].into(),
            eta: vec![Vec::new(); tasks].into(),
        }
    }

    /// `task`'s ETAs with the time that really was left after each: until
    /// its last block came back.
    fn eta_against_end(&self, task: TaskIndex) -> Vec<EtaCheckpoint> {
        let end = self.spans[task].1.map(|last| last - self.started_at);
        self.eta[task]
            .iter()
            .map(|c| EtaCheckpoint {
                left_seconds: end.map(|e| (e - c.elapsed_seconds).max(0.0)),
                ..c.clone()
            })
            .collect()
    }

    /// The run gave an ETA of `eta_seconds` for `task` with `done` of its
    /// blocks done in this run: kept for its report, stamped with the
    /// seconds since the run's start.
    pub fn eta_checkpoint(&mut self, task: TaskIndex, done: u64, eta_seconds: f64) {
        let elapsed_seconds = (wall_clock() - self.started_at).max(0.0);
        if let Some(list) = self.eta.get_mut(task as usize)
            && list.len() < crate::forecast::eta::CHECKPOINTS as usize + 1
        {
            list.push(EtaCheckpoint {
                done,
                elapsed_seconds,
                eta_seconds,
                left_seconds: None,
            });
        }
    }

    /// A failed attempt of the block `key` (spatial id `block`) ran on
    /// `worker` from `sent_at` to `returned_at` (wall clock): kept for the
    /// report's timeline, the first [`MAX_FAILED_ATTEMPT_SPANS`] per task.
    pub fn failed_span(
        &mut self,
        key: BlockKey,
        block: u64,
        worker: Option<u32>,
        (sent_at, returned_at): (f64, f64),
        timed_out: bool,
    ) {
        if let Some(spans) = self.attempt_spans.get_mut(key.task as usize)
            && spans.len() < MAX_FAILED_ATTEMPT_SPANS
        {
            spans.push(AttemptSpan {
                index: key.index,
                block,
                worker_id: worker,
                sent_at,
                returned_at: returned_at.max(sent_at),
                timed_out,
            });
        }
    }

    /// A fresh ledger for a run of `scheduler`, holding what its run plan
    /// found to say about its tasks ([`Scheduler::plan_notices`]).
    pub fn planned(scheduler: &Scheduler) -> Self {
        let mut ledger = Self::new(scheduler.pipeline().len());
        for (task, text) in scheduler.plan_notices() {
            ledger.note(*task, text);
        }
        ledger
    }

    /// Something to say once in `task`'s report (a worker's note): kept
    /// unless already said or [`MAX_NOTES`] are kept; cut to
    /// [`MAX_NOTE_BYTES`].
    pub fn note(&mut self, task: TaskIndex, text: &str) {
        let Some(notes) = self.notices.get_mut(task as usize) else {
            return;
        };
        let mut end = text.len().min(MAX_NOTE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = text[..end].trim();
        if notes.len() < MAX_NOTES && !text.is_empty() && !notes.iter().any(|n| n == text) {
            notes.push(text.to_string());
        }
    }

    /// A block of `task` was handed out at `at` (wall clock): the task's
    /// span starts at its first.
    pub fn sent(&mut self, task: TaskIndex, at: f64) {
        if let Some(span) = self.spans.get_mut(task as usize) {
            span.0.get_or_insert(at);
        }
    }

    /// A block of `task` came back now: the task's span ends at its last.
    fn returned(&mut self, task: TaskIndex) {
        if let Some(span) = self.spans.get_mut(task as usize) {
            span.1 = Some(wall_clock());
        }
    }

    /// A block came back done: its figures join the aggregates (the
    /// scheduler marks it, [`Scheduler::complete_block`]). `round_trip`
    /// is the server's dispatch-to-return time (None in a serial run).
    pub fn complete(&mut self, block: &Block, round_trip: Option<f64>, worker: Option<u32>) {
        let task = block.key.task;
        self.returned(task);
        let first_on_worker = self.workers_seen.insert((task, worker));
        self.aggregates[task].record_success(
            round_trip,
            block.stats.as_ref(),
            first_on_worker,
            block.spatial_id,
        );
    }

    /// A failed attempt the scheduler took back
    /// ([`Scheduler::fail_attempt`]): noted for the summary, its text
    /// bounded (see [`FAILURE_TEXT_BUDGET`]), and its cause counted.
    pub fn failed(&mut self, attempt: &FailedAttempt, worker: Option<u32>, reason: String) {
        let block = &attempt.block;
        self.returned(block.key.task);
        if let Some(causes) = self.causes.get_mut(block.key.task as usize) {
            causes.note(&reason);
        }
        let noted = self.failures.len() < MAX_FAILURE_NOTES;
        let whole = noted
            && self.failure_text + reason.len() <= FAILURE_TEXT_BUDGET
            && self.described.insert(block.key);
        let reason = if whole { reason } else { last_line(&reason) };
        let note = FailureNote {
            task: block.key.task,
            spatial_id: block.spatial_id,
            write_roi: block.write_roi,
            last_attempt: attempt.last_attempt,
            worker_id: worker,
            reason,
        };
        if self.recent.len() == RECENT_FAILURE_NOTES {
            self.recent.pop_front();
        }
        if noted {
            self.failure_text += note.reason.len();
            let recent = FailureNote {
                reason: last_line(&note.reason),
                ..note
            };
            self.failures.push(note);
            self.recent.push_back((recent, true));
        } else {
            self.failures_unnoted += 1;
            self.recent.push_back((note, false));
        }
    }

    /// Failed attempts so far, noted or not.
    pub fn failures_total(&self) -> u64 {
        self.failures.len() as u64 + self.failures_unnoted
    }

    /// The latest failed attempts (at most [`RECENT_FAILURE_NOTES`]), oldest
    /// first, each with the last line of its text.
    pub fn recent_failures(&self) -> impl Iterator<Item = &FailureNote> {
        self.recent.iter().map(|(note, _)| note)
    }

    /// Worker `worker` has ended, `why` (its exit status): the attempts
    /// that failed as its connection closed, before its end was known
    /// ([`CONNECTION_CLOSED`]), say `why` instead, in the report and the
    /// summary. The tasks whose notes were restated, for their first and
    /// last worker errors ([`Scheduler::restate_worker_error`]).
    pub fn explain_lost(&mut self, worker: u32, why: &str) -> Vec<TaskIndex> {
        let lost = |n: &FailureNote| n.worker_id == Some(worker) && n.reason == CONNECTION_CLOSED;
        // each attempt restated once: from `failures` if noted, else from
        // `recent` (an unnoted one that left `recent` stays as it was)
        let mut restated: Vec<TaskIndex> = Vec::new();
        for (note, noted) in self.recent.iter_mut().filter(|(n, _)| lost(n)) {
            note.reason = last_line(why);
            if !*noted {
                restated.push(note.task);
            }
        }
        for note in self.failures.iter_mut().filter(|n| lost(n)) {
            note.reason = why.to_string();
            restated.push(note.task);
        }
        for &task in &restated {
            if let Some(causes) = self.causes.get_mut(task as usize) {
                causes.restate(CONNECTION_CLOSED, why);
            }
        }
        restated.sort_unstable();
        restated.dedup();
        restated
    }

    /// Tasks abandoned now, with their reasons
    /// ([`Scheduler::abandon_task_because`]), for the summary.
    pub fn abandoned(&mut self, now: Vec<(TaskIndex, String)>) {
        self.abandoned.extend(now);
    }

    /// The run's outcome now: every task's report (its workers folded by
    /// `workers`), with the one outcome rule.
    pub fn outcome(
        &self,
        scheduler: &Scheduler,
        interrupted: bool,
        workers: impl Fn(TaskIndex) -> WorkerSummary,
        unmanaged_clients: u32,
        workers_started: Vec<u32>,
    ) -> RunOutcome {
        let n = scheduler.pipeline().len() as TaskIndex;
        let finished_at = wall_clock().max(self.started_at);
        let reports = (0..n)
            .map(|t| {
                let state = scheduler.task_state(t);
                let blocks = self.aggregates[t].summary(state);
                let workers = workers(t);
                let notices = self.notices[t]
                    .iter()
                    .cloned()
                    .chain(idle_hint(&workers))
                    .collect();
                TaskReport {
                    task_id: scheduler.pipeline().spec(t).task_id.clone(),
                    started_at: self.started_at,
                    finished_at,
                    tracked: scheduler.tracking(t).is_some(),
                    outcome: Outcome::of(state, interrupted, scheduler.is_abandoned(t)),
                    utilisation: utilisation(&blocks, &workers),
                    blocks,
                    workers,
                    first_block_at: self.spans[t].0,
                    last_block_at: self.spans[t].1,
                    failure_causes: self.causes[t].clone(),
                    notices,
                    failed_attempts: self.attempt_spans[t].clone(),
                    memory: None,
                    eta: self.eta_against_end(t),
                    forecast_sample: false,
                    function_sha256: None,
                }
            })
            .collect();
        RunOutcome {
            reports,
            states: (0..n).map(|t| scheduler.task_state(t).clone()).collect(),
            failures: self.failures.clone(),
            failures_unnoted: self.failures_unnoted,
            abandoned: self.abandoned.clone(),
            unmanaged_clients,
            workers_started,
            stopped: None,
        }
    }
}
