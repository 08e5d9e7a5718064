//! How a run ended: the one rule that decides a task's [`Outcome`], the
//! [`RunOutcome`] both runners return (states, failures, reports), the
//! failed-block list the Execution Summary shows, and the utilisation
//! figure. [`RunOutcome::append_history`] is the one writer of history
//! lines.

use super::*;
use crate::block::TaskIndex;
use crate::error::DaisyError;
use crate::geometry::Roi;
use crate::scheduler::Scheduler;
use crate::task_state::TaskState;
use crate::worker_timeline::WorkerSummary;
use serde::{Deserialize, Serialize};

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
    let available = worker_seconds(workers);
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

/// The worker-seconds a task's workers lived: startup, idle, compute,
/// final wait and teardown, summed over its workers.
fn worker_seconds(workers: &WorkerSummary) -> f64 {
    workers
        .by_id
        .iter()
        .map(|r| {
            r.startup.unwrap_or(0.0)
                + r.idle.sum
                + r.compute.sum
                + r.final_wait.unwrap_or(0.0)
                + r.teardown.unwrap_or(0.0)
        })
        .sum()
}

/// The share of its workers' lives a task's workers may spend waiting for
/// blocks before the report says that handing them back would have saved
/// node time: a quarter is past the start-up and tail waits of a healthy
/// task, and well within a downstream task waiting on a slow upstream.
pub const IDLE_HINT_SHARE: f64 = 0.25;

/// The idle worker-seconds below which nothing is said, whatever the
/// share: a second of waiting is noise. The hint only comes where no idle
/// timeout was in force (remote spawners have one by default), so it
/// speaks to someone who turned it off or wrote their own spawner.
pub const IDLE_HINT_SECONDS: f64 = 1.0;

/// What the report says when a task's workers held their nodes idle
/// (at least [`IDLE_HINT_SHARE`] of their lives and
/// [`IDLE_HINT_SECONDS`]) without an idle timeout to hand them back, or
/// None. Local workers hold no node (an idle process costs memory, not a
/// core), so only other spawners get it.
pub fn idle_hint(workers: &WorkerSummary) -> Option<String> {
    let lived = worker_seconds(workers);
    let idle = workers.idle_seconds;
    let local = workers.spawner == "local" || workers.spawner.is_empty();
    if local || workers.idle_timeout.is_some() || lived <= 0.0 {
        return None;
    }
    (idle >= IDLE_HINT_SECONDS && idle >= IDLE_HINT_SHARE * lived).then(|| {
        format!(
            "its workers waited {idle:.0} worker-seconds for blocks ({:.0}% of their time) \
             holding their nodes; an idle_timeout (Task(idle_timeout=...) or \
             run_blockwise(idle_timeout=...)) would have handed them back and started \
             workers again when blocks were ready",
            100.0 * idle / lived
        )
    })
}

/// How a run ended for one task (`outcome` in the report).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
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

    /// The tasks, in pipeline order, whose blocks that failed for good
    /// after more than one attempt failed the same way (the same last line)
    /// on every attempt the run noted: a rerun would fail again, which
    /// points at the code or the block's ROI rather than chance. A task
    /// with no such block is not one of them.
    pub fn failing_alike(&self) -> Vec<TaskIndex> {
        let mut alike: std::collections::BTreeMap<TaskIndex, bool> = Default::default();
        for block in self.failed_blocks() {
            if !block.failed || block.attempts < 2 {
                continue;
            }
            let mut lines = self
                .failures
                .iter()
                .filter(|n| (n.task, n.spatial_id) == (block.task, block.spatial_id))
                .map(|n| last_line(&n.reason));
            let first = lines.next();
            let same = lines.all(|l| Some(&l) == first.as_ref());
            *alike.entry(block.task).or_insert(true) &= same;
        }
        alike
            .into_iter()
            .filter_map(|(t, same)| same.then_some(t))
            .collect()
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

    /// Append every task's report to its run history (its store's
    /// `runs.jsonl`, else the one next to its worker logs: see
    /// [`Scheduler::history_file`]): the one writer of history lines. A
    /// failure is logged, not raised: the run itself is over and its
    /// blocks are recorded; losing one history line must not hide that.
    pub fn append_history(&self, scheduler: &Scheduler) {
        for (t, report) in self.reports.iter().enumerate() {
            let Some(file) = scheduler.history_file(t as TaskIndex) else {
                continue;
            };
            let line = match serde_json::to_string(report) {
                Ok(line) => line,
                Err(e) => {
                    tracing::warn!("could not write the report of {}: {e}", report.task_id);
                    continue;
                }
            };
            if let Err(e) = crate::tracking_store::append_runs_line(&file, &line) {
                tracing::warn!("could not append to {}: {e}", file.display());
            }
        }
    }
}
