//! The run report: one JSON object per task, built from this run's running
//! aggregates and worker timelines, appended as one line to the task's
//! `runs.jsonl` and handed to Python, which parses the very same JSON into
//! `daisy.RunReport`. The object a run returns and the record it leaves on
//! disk therefore cannot drift apart.
//!
//! `blocks.count` is the scheduler's completion count for this run (skipped
//! blocks included), not a second counter: the aggregates only add timing
//! samples to it. A resumed run that skipped everything reports its skips
//! and no samples.
//!
//! Both runners (the server and the serial loop) account a run through the
//! one [`RunLedger`] here: a completed block, a failed attempt, an abandoned
//! task, and at the end the [`RunOutcome`] with every task's report, its
//! [`Outcome`] decided by one rule and appended to `runs.jsonl` by one
//! function. A runner only says what happened.

use crate::block::{Block, BlockKey, BlockStatus, TaskIndex};
use crate::block_profile::BlockStats;
use crate::clock::wall_clock;
use crate::error::DaisyError;
use crate::geometry::Roi;
use crate::run_stats::{StatSummary, Trend, Welford};
use crate::scheduler::{ReleaseOutcome, Scheduler};
use crate::task_state::TaskState;
use crate::worker_timeline::WorkerSummary;
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::tracking_store::RUNS_FILE;

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
}

impl BlockAggregates {
    /// A completed block: the server's round trip (distributed runs) and
    /// the worker's own measurement (resource tracking).
    pub fn record_success(&mut self, round_trip: Option<f64>, stats: Option<&BlockStats>) {
        if let Some(rt) = round_trip {
            self.round_trip.push(rt);
        }
        if let Some(s) = stats {
            self.has_stats = true;
            self.wall.push(s.wall_seconds);
            self.cpu.push(s.cpu_seconds);
            self.peak_rss.push(s.peak_rss_bytes as f64);
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
            peak_rss_source: if self.has_stats {
                crate::block_profile::peak_rss_source().to_string()
            } else {
                String::new()
            },
        }
    }
}

/// The block section of a task's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockSummary {
    /// Blocks completed in this run, skipped ones included.
    pub count: u64,
    /// Blocks this run skipped (done markers, skip mask, check function).
    pub skipped: u64,
    /// Failed attempts in this run.
    pub failures: u64,
    /// Whether the worker-side figures below were measured.
    pub has_stats: bool,
    /// Dispatch to return, measured by the server (distributed runs).
    pub round_trip: StatSummary,
    /// The block's own wall time.
    pub wall: StatSummary,
    /// CPU seconds of the worker process during the block.
    pub cpu: StatSummary,
    /// Peak RSS of the worker process during the block, bytes.
    pub peak_rss: StatSummary,
    /// Bytes read through syscalls.
    pub io_read: StatSummary,
    /// Bytes written through syscalls.
    pub io_write: StatSummary,
    /// Round trip minus wall: daisy's own cost per block.
    pub overhead: StatSummary,
    /// Mean GPU utilisation of the worker process per block, percent, over
    /// the blocks that have the figure (GPU tracking; empty otherwise).
    #[serde(default)]
    pub gpu_util: StatSummary,
    /// Peak GPU memory of the worker process per block, bytes, over the
    /// blocks that have the figure.
    #[serde(default)]
    pub gpu_mem: StatSummary,
    /// Least-squares slope of wall time (ms) in completion order.
    pub trend_slope_ms: f64,
    /// Where `peak_rss` comes from (see
    /// [`crate::block_profile::peak_rss_source`]); empty without stats.
    #[serde(default)]
    pub peak_rss_source: String,
}

/// One task's report of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// The task.
    pub task_id: String,
    /// Run start, seconds since the UNIX epoch.
    pub started_at: f64,
    /// Report time, seconds since the UNIX epoch.
    pub finished_at: f64,
    /// Whether the task has a tracking store.
    pub tracked: bool,
    /// How the run ended for this task.
    pub outcome: Outcome,
    /// Per-block figures.
    pub blocks: BlockSummary,
    /// Per-worker figures.
    pub workers: WorkerSummary,
    /// How much of the workers' lives went into blocks (see
    /// [`utilisation`]); None without workers (a serial run, or only
    /// unmanaged clients). Absent from lines written before daisy 2.1.
    #[serde(default)]
    pub utilisation: Option<f64>,
    /// When this task's first block was handed out in this run (seconds
    /// since the UNIX epoch); None when none was. With `last_block_at`, the
    /// task's own span inside a run of several tasks.
    #[serde(default)]
    pub first_block_at: Option<f64>,
    /// When this task's last block came back (done or failed); None when
    /// none did.
    #[serde(default)]
    pub last_block_at: Option<f64>,
    /// Why blocks failed in this run: distinct messages with their counts
    /// and the first whole failure text, bounded (see [`FailureCauses`]).
    #[serde(default)]
    pub failure_causes: FailureCauses,
    /// What the run has to say once about this task, e.g. `"no GPU
    /// figures: NVML not found"`: distinct texts in the order they came,
    /// at most [`MAX_NOTES`], each at most [`MAX_NOTE_BYTES`].
    #[serde(default)]
    pub notices: Vec<String>,
}

/// Distinct notices kept per task: a peer cannot grow the report without
/// bound by sending different ones.
pub const MAX_NOTES: usize = 8;

/// A notice is one line of a report: longer texts are cut to this many
/// bytes (on a character boundary).
pub const MAX_NOTE_BYTES: usize = 512;

/// Distinct failure messages a report line keeps per task: enough to tell
/// a handful of causes apart, few enough that a run whose every block fails
/// differently (a block id in each message) keeps its line short.
pub const MAX_CAUSES: usize = 20;

/// The longest first failure text a report line keeps (its end, where a
/// Python traceback names the exception): a deep traceback fits, a
/// runaway one does not grow `runs.jsonl` by megabytes per run.
pub const FIRST_TRACEBACK_BYTES: usize = 16 << 10;

/// One distinct failure message and how many failed attempts gave it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CauseCount {
    /// The failure text's last line (for a Python traceback: the
    /// exception), at most [`FAILURE_LINE_BYTES`].
    pub message: String,
    /// Failed attempts with this message.
    pub count: u64,
}

/// Why a task's blocks failed in one run, kept in its report line so the
/// next morning says what went wrong, not only how often.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureCauses {
    /// Distinct messages in order of first appearance, at most
    /// [`MAX_CAUSES`].
    pub messages: Vec<CauseCount>,
    /// Failed attempts whose message came after [`MAX_CAUSES`] others.
    pub other: u64,
    /// The first failure's whole text (a traceback), its last
    /// [`FIRST_TRACEBACK_BYTES`] where longer.
    pub first_traceback: Option<String>,
}

/// What a block lost with its worker's connection is first put down as;
/// [`RunLedger::explain_lost`] replaces it once the worker's end is known.
pub const CONNECTION_CLOSED: &str = "the connection to its worker closed";

impl FailureCauses {
    /// One attempt counted as `old` (a one-line text) counts as `new`
    /// instead: the first traceback too, where it was `old`.
    pub fn restate(&mut self, old: &str, new: &str) {
        if self.first_traceback.as_deref() == Some(old) {
            self.first_traceback = Some(tail(new.trim_end(), FIRST_TRACEBACK_BYTES));
        }
        if let Some(i) = self.messages.iter().position(|c| c.message == old) {
            self.messages[i].count -= 1;
            if self.messages[i].count == 0 {
                self.messages.remove(i);
            }
        } else {
            self.other = self.other.saturating_sub(1);
        }
        self.note_message(new);
    }

    /// Count one failed attempt's text.
    pub fn note(&mut self, text: &str) {
        if self.first_traceback.is_none() {
            self.first_traceback = Some(tail(text.trim_end(), FIRST_TRACEBACK_BYTES));
        }
        self.note_message(text);
    }

    fn note_message(&mut self, text: &str) {
        let message = last_line(text);
        if let Some(c) = self.messages.iter_mut().find(|c| c.message == message) {
            c.count += 1;
        } else if self.messages.len() < MAX_CAUSES {
            self.messages.push(CauseCount { message, count: 1 });
        } else {
            self.other += 1;
        }
    }
}

/// The last `max` bytes of `text` (on a character boundary), marked with a
/// leading `…` when cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

impl TaskReport {
    /// Append this report as one line to `<dir>/runs.jsonl`.
    pub fn append_to(&self, dir: &Path) -> std::io::Result<()> {
        let line = serde_json::to_string(self).map_err(std::io::Error::other)?;
        crate::tracking_store::append_runs_line(&dir.join(RUNS_FILE), &line)
    }
}

/// Block seconds over the worker-seconds that were available: the share of
/// the workers' lives (startup, idle, compute, final wait, teardown) that
/// went into blocks. The block seconds are the workers' own measurement
/// (`blocks.wall`) where the task has resource tracking, else the server's
/// round trips. None without workers, as Dask's utilisation check has no
/// denominator without threads.
pub fn utilisation(blocks: &BlockSummary, workers: &WorkerSummary) -> Option<f64> {
    if workers.count == 0 {
        return None;
    }
    let available: f64 = workers
        .by_id
        .iter()
        .map(|r| {
            r.startup.unwrap_or(0.0)
                + r.idle.sum
                + r.compute.sum
                + r.final_wait.unwrap_or(0.0)
                + r.teardown.unwrap_or(0.0)
        })
        .sum();
    if available <= 0.0 {
        return None;
    }
    let busy = if blocks.has_stats {
        blocks.wall.sum
    } else {
        workers.compute.sum
    };
    Some(busy / available)
}

/// How a run ended for one task (`outcome` in the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every block completed (skipped ones included).
    #[default]
    Completed,
    /// The run went to its end, but some blocks failed or were orphaned.
    Failed,
    /// The run was stopped before its end (Ctrl-C, an exception, a broken
    /// rule).
    Interrupted,
    /// The task was given up (its workers kept dying, or an upstream task
    /// was abandoned).
    Abandoned,
}

impl Outcome {
    /// The one rule, for every runner: an interrupted run is interrupted
    /// whatever its counts; then an abandoned task; then completed only if
    /// every block completed.
    pub fn of(state: &TaskState, interrupted: bool, abandoned: bool) -> Self {
        if interrupted {
            Self::Interrupted
        } else if abandoned {
            Self::Abandoned
        } else if state.all_completed() {
            Self::Completed
        } else {
            Self::Failed
        }
    }
}

/// A failed attempt, for the summary.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureNote {
    /// Task of the block.
    pub task: TaskIndex,
    /// Spatial id of the block.
    pub spatial_id: u64,
    /// What the block writes.
    pub write_roi: Roi,
    /// The block failed for good with this attempt (its retries were used
    /// up); otherwise it was put back to be retried.
    pub last_attempt: bool,
    /// Worker that reported it (None: unmanaged client, or a serial run).
    pub worker_id: Option<u32>,
    /// What happened.
    pub reason: String,
}

/// One block's failed attempts in a run, for the summary: what a user
/// reads instead of one line per attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedBlock {
    /// Task of the block.
    pub task: TaskIndex,
    /// Spatial id of the block.
    pub spatial_id: u64,
    /// What the block writes.
    pub write_roi: Roi,
    /// Failed attempts in this run.
    pub attempts: u32,
    /// The block failed for good (not retried successfully, or not yet).
    pub failed: bool,
    /// The last line of the latest attempt's failure text.
    pub message: String,
}

/// What a finished run reports, whichever runner ran it.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// Final task states in pipeline order.
    pub states: Vec<TaskState>,
    /// The first [`MAX_FAILURE_NOTES`] failed attempts.
    pub failures: Vec<FailureNote>,
    /// Failed attempts past those, counted but not noted.
    pub failures_unnoted: u64,
    /// Abandoned tasks with the reason.
    pub abandoned: Vec<(TaskIndex, String)>,
    /// Clients that connected without a server-assigned worker id.
    pub unmanaged_clients: u32,
    /// Worker processes started per task.
    pub workers_started: Vec<u32>,
    /// The run report of every task, in pipeline order (also appended to
    /// the `runs.jsonl` of every task with a tracking store).
    pub reports: Vec<TaskReport>,
    /// Why the run stopped before its end, if it did: [`DaisyError::Stopped`]
    /// when a hook of the embedding program stopped it (Ctrl-C, an
    /// exception), [`DaisyError::RunBroken`] when a rule was broken.
    pub stopped: Option<DaisyError>,
}

impl RunOutcome {
    /// Every block with a failed attempt, once, in the order of its first
    /// failure: what the Execution Summary lists.
    pub fn failed_blocks(&self) -> Vec<FailedBlock> {
        let mut index: std::collections::HashMap<(TaskIndex, u64), usize> =
            std::collections::HashMap::new();
        let mut out: Vec<FailedBlock> = Vec::new();
        for note in &self.failures {
            let at = *index
                .entry((note.task, note.spatial_id))
                .or_insert_with(|| {
                    out.push(FailedBlock {
                        task: note.task,
                        spatial_id: note.spatial_id,
                        write_roi: note.write_roi,
                        attempts: 0,
                        failed: false,
                        message: String::new(),
                    });
                    out.len() - 1
                });
            let block = &mut out[at];
            block.attempts += 1;
            block.failed |= note.last_attempt;
            block.message = last_line(&note.reason);
        }
        out
    }

    /// The whole run's report as one JSON object, `{task_id: report}`, in
    /// pipeline order: what Python parses into `daisy.RunReport`.
    pub fn report_json(&self) -> Result<String, DaisyError> {
        let map: serde_json::Map<String, serde_json::Value> = self
            .reports
            .iter()
            .map(|r| serde_json::to_value(r).map(|v| (r.task_id.clone(), v)))
            .collect::<Result<_, _>>()
            .map_err(|e| DaisyError::Io(format!("could not write the run report: {e}")))?;
        serde_json::to_string(&map)
            .map_err(|e| DaisyError::Io(format!("could not write the run report: {e}")))
    }

    /// Append every tracked task's report to its store's `runs.jsonl`. A
    /// failure is logged, not raised: the run itself is over and its blocks
    /// are recorded; losing one history line must not hide that.
    pub fn append_to_stores(&self, scheduler: &Scheduler) {
        for (t, report) in self.reports.iter().enumerate() {
            if let Some(tracking) = scheduler.tracking(t as TaskIndex)
                && let Err(e) = report.append_to(tracking.path())
            {
                tracing::warn!(
                    "could not append to {}/{RUNS_FILE}: {e}",
                    tracking.path().display()
                );
            }
        }
    }
}

/// What a run accounts as it goes: per-task aggregates, every failed
/// attempt and every abandoned task. The server and the serial runner both
/// keep one, so a block completes, fails and is reported the same way in
/// both.
#[derive(Clone, Debug)]
pub struct RunLedger {
    started_at: f64,
    aggregates: Vec<BlockAggregates>,
    /// The first [`MAX_FAILURE_NOTES`] failed attempts.
    failures: Vec<FailureNote>,
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
    causes: Vec<FailureCauses>,
    /// Per task: first dispatch and last return, wall clock.
    spans: Vec<(Option<f64>, Option<f64>)>,
    /// Per task: its notices (see [`TaskReport::notices`]).
    notices: Vec<Vec<String>>,
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

/// The longest last line kept of a failure text that is not kept whole.
pub const FAILURE_LINE_BYTES: usize = 512;

/// The last non-empty line of a failure text (the exception, for a Python
/// traceback), cut to [`FAILURE_LINE_BYTES`] on a character boundary.
pub fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut end = line.len().min(FAILURE_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

impl RunLedger {
    /// A ledger for a pipeline of `tasks` tasks, starting now.
    pub fn new(tasks: usize) -> Self {
        // the run's stamps count from the wall clock now, monotonically
        crate::clock::anchor();
        Self {
            started_at: wall_clock(),
            aggregates: vec![BlockAggregates::default(); tasks],
            failures: Vec::new(),
            failures_unnoted: 0,
            recent: std::collections::VecDeque::new(),
            abandoned: Vec::new(),
            described: std::collections::HashSet::new(),
            failure_text: 0,
            causes: vec![FailureCauses::default(); tasks],
            spans: vec![(None, None); tasks],
            notices: vec![Vec::new(); tasks],
        }
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

    /// A block came back done: its figures join the aggregates and the
    /// tracking store, and the scheduler marks it completed. `round_trip`
    /// is the server's dispatch-to-return time (None in a serial run);
    /// `sent_at` the wall-clock dispatch time.
    pub fn complete(
        &mut self,
        scheduler: &mut Scheduler,
        block: &Block,
        round_trip: Option<f64>,
        worker: Option<u32>,
        sent_at: f64,
    ) -> Result<(), DaisyError> {
        let task = block.key.task;
        self.returned(task);
        self.aggregates[task as usize].record_success(round_trip, block.stats.as_ref());
        if let (Some(stats), Some(tracking)) = (block.stats.as_ref(), scheduler.tracking_mut(task))
        {
            tracking.record_stats(block, stats, worker, sent_at, wall_clock());
        }
        scheduler
            .release_block(block.key, BlockStatus::Success)
            .map(|_| ())
    }

    /// A failed attempt: counted in the scheduler (which retries or fails
    /// the block) and noted for the summary, its text bounded (see
    /// [`FAILURE_TEXT_BUDGET`]), and counted as a worker error. Nothing is
    /// counted for a task already abandoned.
    pub fn fail(
        &mut self,
        scheduler: &mut Scheduler,
        key: BlockKey,
        worker: Option<u32>,
        reason: String,
    ) {
        self.fail_as(scheduler, key, worker, reason, false);
    }

    /// A block the timeout reclaimed: a failed attempt like any other, but
    /// counted in `timeout_reclaim_count` instead of as a worker error (as
    /// daisy 2.0.0 counts it). True when the block will be retried.
    pub fn time_out(
        &mut self,
        scheduler: &mut Scheduler,
        key: BlockKey,
        worker: Option<u32>,
        reason: String,
    ) -> bool {
        self.fail_as(scheduler, key, worker, reason, true)
    }

    /// Count a failed attempt; true when the scheduler will retry the block.
    fn fail_as(
        &mut self,
        scheduler: &mut Scheduler,
        key: BlockKey,
        worker: Option<u32>,
        reason: String,
        timed_out: bool,
    ) -> bool {
        if scheduler.is_abandoned(key.task) {
            return false;
        }
        let block = scheduler.graph().block(key);
        let last_attempt = match scheduler.release_block(key, BlockStatus::Failed) {
            Ok(outcome) => outcome == ReleaseOutcome::Failed,
            Err(e) => {
                tracing::warn!("could not record a failure: {e}");
                return false;
            }
        };
        self.returned(key.task);
        if let Some(causes) = self.causes.get_mut(key.task as usize) {
            causes.note(&reason);
        }
        let state = scheduler.task_state_mut(key.task);
        if timed_out {
            state.timeout_reclaim_count += 1;
        } else {
            state.worker_failure_count += 1;
        }
        state.note_worker_error(&reason);
        let noted = self.failures.len() < MAX_FAILURE_NOTES;
        let whole = noted
            && self.failure_text + reason.len() <= FAILURE_TEXT_BUDGET
            && self.described.insert(key);
        let reason = if whole { reason } else { last_line(&reason) };
        let note = FailureNote {
            task: key.task,
            spatial_id: block.spatial_id,
            write_roi: block.write_roi,
            last_attempt,
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
        !last_attempt
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
    /// ([`CONNECTION_CLOSED`]), say `why` instead, in the report, the
    /// summary and their tasks' first and last worker errors.
    pub fn explain_lost(&mut self, scheduler: &mut Scheduler, worker: u32, why: &str) {
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
        for task in restated {
            let state = scheduler.task_state_mut(task);
            for text in [&mut state.first_worker_error, &mut state.last_worker_error] {
                if text.as_deref() == Some(CONNECTION_CLOSED) {
                    *text = Some(why.to_string());
                }
            }
        }
    }

    /// Give up `task` (and orphan what depends on it), with the reason;
    /// every task abandoned through it is noted too.
    pub fn abandon(&mut self, scheduler: &mut Scheduler, task: TaskIndex, reason: String) {
        let before: Vec<bool> = (0..scheduler.pipeline().len() as TaskIndex)
            .map(|t| scheduler.is_abandoned(t))
            .collect();
        scheduler.abandon_task(task);
        scheduler
            .task_state_mut(task)
            .abandon_reason
            .get_or_insert_with(|| reason.clone());
        self.abandoned.push((task, reason));
        let up = scheduler.pipeline().spec(task).task_id.clone();
        for (t, was) in before.iter().enumerate() {
            if !was && t as TaskIndex != task && scheduler.is_abandoned(t as TaskIndex) {
                let why = format!("upstream task {up:?} was abandoned");
                scheduler
                    .task_state_mut(t as TaskIndex)
                    .abandon_reason
                    .get_or_insert_with(|| why.clone());
                self.abandoned.push((t as TaskIndex, why));
            }
        }
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
                let blocks = self.aggregates[t as usize].summary(state);
                let workers = workers(t);
                TaskReport {
                    task_id: scheduler.pipeline().spec(t).task_id.clone(),
                    started_at: self.started_at,
                    finished_at,
                    tracked: scheduler.tracking(t).is_some(),
                    outcome: Outcome::of(state, interrupted, scheduler.is_abandoned(t)),
                    utilisation: utilisation(&blocks, &workers),
                    blocks,
                    workers,
                    first_block_at: self.spans[t as usize].0,
                    last_block_at: self.spans[t as usize].1,
                    failure_causes: self.causes[t as usize].clone(),
                    notices: self.notices[t as usize].clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_kept_once_bounded_and_cut() {
        let mut ledger = RunLedger::new(2);
        for _ in 0..3 {
            ledger.note(1, "no GPU figures: NVML not found");
        }
        ledger.note(7, "a task that does not exist is ignored");
        ledger.note(1, "   ");
        for i in 0..(MAX_NOTES + 4) {
            ledger.note(1, &format!("note {i}"));
        }
        ledger.note(0, &"é".repeat(MAX_NOTE_BYTES));
        assert_eq!(ledger.notices[1].len(), MAX_NOTES);
        assert_eq!(
            ledger.notices[1][0], "no GPU figures: NVML not found",
            "once, first"
        );
        assert_eq!(
            ledger.notices[0][0].len(),
            MAX_NOTE_BYTES,
            "cut on a char boundary"
        );
    }

    #[test]
    fn gpu_figures_join_the_aggregates_only_where_measured() {
        let mut agg = BlockAggregates::default();
        let stats = |util: f32, mem: u64| BlockStats {
            wall_seconds: 1.0,
            cpu_seconds: 1.0,
            peak_rss_bytes: 1,
            io_read_bytes: 0,
            io_write_bytes: 0,
            gpu_util_pct: util,
            gpu_mem_bytes: mem,
        };
        agg.record_success(None, Some(&stats(f32::NAN, 0)));
        agg.record_success(None, Some(&stats(90.0, 2 << 30)));
        agg.record_success(None, Some(&stats(10.0, 1 << 30)));
        let s = agg.summary(&TaskState::default());
        assert_eq!(s.gpu_util.n, 2, "the unmeasured block is not a 0 %");
        assert_eq!(s.gpu_util.mean, 50.0);
        assert_eq!(s.gpu_mem.n, 2);
        assert_eq!(s.gpu_mem.max, (2u64 << 30) as f64);
        assert_eq!(s.wall.n, 3);
    }

    #[test]
    fn failure_causes_count_distinct_last_lines_and_keep_the_first_text() {
        let mut causes = FailureCauses::default();
        let trace =
            "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: corrupt";
        for _ in 0..3 {
            causes.note(trace);
        }
        causes.note("worker 2 died while processing the block\n");
        for i in 0..(MAX_CAUSES + 5) {
            causes.note(&format!("KeyError: {i}"));
        }
        assert_eq!(causes.first_traceback.as_deref(), Some(trace));
        assert_eq!(causes.messages.len(), MAX_CAUSES);
        assert_eq!(causes.messages[0].message, "ValueError: corrupt");
        assert_eq!(causes.messages[0].count, 3);
        assert_eq!(
            causes.messages[1].message,
            "worker 2 died while processing the block"
        );
        // 18 KeyErrors fit beside the first two messages; 7 more do not
        assert_eq!(causes.other, 7);
        let total: u64 = causes.messages.iter().map(|c| c.count).sum::<u64>() + causes.other;
        assert_eq!(total, 3 + 1 + MAX_CAUSES as u64 + 5);
    }

    #[test]
    fn failed_blocks_group_attempts_in_order_of_first_failure() {
        let note = |spatial_id: u64, last_attempt: bool, reason: &str| FailureNote {
            task: 0,
            spatial_id,
            write_roi: Roi::from_slices(&[spatial_id as i64 * 10], &[10]).unwrap(),
            last_attempt,
            worker_id: Some(1),
            reason: reason.into(),
        };
        let outcome = RunOutcome {
            states: vec![],
            failures: vec![
                note(7, false, "Traceback ...\nValueError: first"),
                note(3, false, "KeyError: 'x'"),
                note(7, true, "Traceback ...\nValueError: second"),
            ],
            failures_unnoted: 0,
            abandoned: vec![],
            unmanaged_clients: 0,
            workers_started: vec![],
            reports: vec![],
            stopped: None,
        };
        let blocks = outcome.failed_blocks();
        assert_eq!(blocks.len(), 2);
        assert_eq!(
            (blocks[0].spatial_id, blocks[0].attempts, blocks[0].failed),
            (7, 2, true)
        );
        assert_eq!(blocks[0].message, "ValueError: second");
        assert_eq!(blocks[0].write_roi.slices(), "[70:80]");
        assert_eq!(
            (blocks[1].spatial_id, blocks[1].attempts, blocks[1].failed),
            (3, 1, false)
        );
    }

    #[test]
    fn a_long_first_failure_keeps_its_end() {
        let mut causes = FailureCauses::default();
        let long = format!("{}\nRuntimeError: the end", "é frame\n".repeat(10_000));
        causes.note(&long);
        let kept = causes.first_traceback.unwrap();
        assert!(kept.len() <= FIRST_TRACEBACK_BYTES + "…".len());
        assert!(kept.starts_with('…'));
        assert!(kept.ends_with("RuntimeError: the end"));
    }

    #[test]
    fn report_is_one_json_line_with_the_spec_keys() {
        let mut agg = BlockAggregates::default();
        let stats = BlockStats {
            wall_seconds: 0.05,
            cpu_seconds: 0.001,
            peak_rss_bytes: 1 << 20,
            io_read_bytes: 10,
            io_write_bytes: 0,
            gpu_util_pct: f32::NAN,
            gpu_mem_bytes: 0,
        };
        for _ in 0..12 {
            agg.record_success(Some(0.0505), Some(&stats));
        }
        let state = TaskState {
            total_block_count: 12,
            completed_count: 12,
            ..TaskState::default()
        };
        let report = TaskReport {
            task_id: "seg".into(),
            started_at: 1.0,
            finished_at: 2.0,
            tracked: true,
            outcome: Outcome::Completed,
            blocks: agg.summary(&state),
            workers: WorkerSummary::default(),
            utilisation: None,
            ..TaskReport::default()
        };
        assert_eq!(report.blocks.count, 12);
        assert!((report.blocks.overhead.mean - 0.0005).abs() < 1e-9);
        let dir = std::env::temp_dir().join(format!("daisy-report-{}", std::process::id()));
        report.append_to(&dir).unwrap();
        report.append_to(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(RUNS_FILE)).unwrap();
        assert_eq!(text.lines().count(), 2);
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for key in [
            "task_id",
            "started_at",
            "finished_at",
            "tracked",
            "blocks",
            "workers",
            "outcome",
            "utilisation",
            "first_block_at",
            "last_block_at",
            "failure_causes",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["blocks"]["round_trip"]["n"], 12);
        assert!(v["blocks"]["wall"]["sum"].as_f64().unwrap() > 0.5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failure_texts_are_bounded_but_every_failure_is_counted() {
        use crate::geometry::Roi;
        use crate::pipeline::Pipeline;
        use crate::task_spec::{Fit, TaskSpec};
        let r = |s| Roi::from_slices(&[0], &[s]).unwrap();
        let spec = TaskSpec::new("t", r(2000), r(1), r(1), Fit::Valid, false, 2, vec![]).unwrap();
        let mut scheduler = Scheduler::new(Pipeline::new(vec![spec]).unwrap());
        let mut ledger = RunLedger::new(1);
        let traceback = |i: usize| format!("{}\nValueError: block {i} broke", "x".repeat(60_000));
        let mut failed = 0;
        while let Some(b) = scheduler
            .acquire_block(0, |_| Ok::<_, DaisyError>(false))
            .unwrap()
        {
            ledger.fail(
                &mut scheduler,
                b.key,
                None,
                traceback(b.spatial_id as usize),
            );
            failed += 1;
        }
        assert_eq!(failed, 3 * 2000, "three attempts of every block");
        assert_eq!(ledger.failures.len(), failed, "every attempt is counted");
        let kept: usize = ledger.failures.iter().map(|f| f.reason.len()).sum();
        assert!(
            kept <= FAILURE_TEXT_BUDGET + failed * FAILURE_LINE_BYTES,
            "{kept}"
        );
        let first = &ledger.failures[0];
        assert!(
            first.reason.len() > 60_000,
            "a block's first failure is kept whole"
        );
        let short = ledger.failures.last().unwrap();
        assert!(
            short.reason.starts_with("ValueError: block"),
            "{}",
            short.reason
        );
    }

    #[test]
    fn the_last_line_is_cut_on_a_character_boundary() {
        assert_eq!(
            last_line("Traceback\n  x\nKeyError: 'a'\n\n"),
            "KeyError: 'a'"
        );
        let long = "é".repeat(FAILURE_LINE_BYTES);
        let cut = last_line(&long);
        assert!(cut.len() <= FAILURE_LINE_BYTES && cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn utilisation_is_block_seconds_over_worker_seconds() {
        use crate::worker_timeline::{StartKind, WorkerRecord};
        let record = |startup: f64, idle: f64, compute: f64, teardown: f64| WorkerRecord {
            worker_id: 0,
            startup: Some(startup),
            blocks_ok: 1,
            blocks_failed: 0,
            idle: StatSummary {
                n: 1,
                sum: idle,
                ..StatSummary::default()
            },
            compute: StatSummary {
                n: 1,
                sum: compute,
                ..StatSummary::default()
            },
            final_wait: Some(0.0),
            teardown: Some(teardown),
            exit: None,
            start: StartKind::Cold,
        };
        let workers = WorkerSummary {
            count: 2,
            compute: StatSummary {
                n: 2,
                sum: 6.0,
                ..StatSummary::default()
            },
            by_id: vec![record(1.0, 0.5, 3.0, 0.5), record(1.0, 0.5, 3.0, 0.5)],
            ..WorkerSummary::default()
        };
        let mut blocks = BlockSummary::default();
        let u = utilisation(&blocks, &workers).unwrap();
        assert!((u - 6.0 / 10.0).abs() < 1e-12, "round trips: {u}");
        blocks.has_stats = true;
        blocks.wall.sum = 5.0;
        let u = utilisation(&blocks, &workers).unwrap();
        assert!((u - 5.0 / 10.0).abs() < 1e-12, "the workers' own wall: {u}");
        assert_eq!(utilisation(&blocks, &WorkerSummary::default()), None);
    }
}
