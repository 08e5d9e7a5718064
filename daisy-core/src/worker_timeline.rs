//! The life of every worker, stamped by the server from events it already
//! handles: [`WorkerTimeline`] per worker, folded per task into a
//! [`WorkerSummary`]. RUN_STATS.md explains the phases.
//!
//! ```text
//! phase       from                               to
//! startup     spawn                              first AcquireBlock
//! idle        previous return (or 1st acquire)   SendBlock
//! compute     SendBlock                          ReleaseBlock / BlockFailed
//! final wait  last return                        NoMoreBlocks sent
//! teardown    NoMoreBlocks (or run shutdown)     process exit
//! ```
//!
//! Only the server sees startup (a worker cannot time the moments before
//! its interpreter ran) and teardown (or after it exited); for a cluster
//! worker function, startup honestly includes the queue wait. Compute is the
//! server's round trip, so it includes transport and the worker's wrapper;
//! the block's own `wall_seconds` is narrower, and the difference is
//! reported as overhead. A failed block's round trip counts in compute and
//! `blocks_failed`. Only clean exits have a teardown.

use crate::run_stats::{StatSummary, Welford};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// How a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkerExit {
    /// It was told there was no more work and exited.
    Clean,
    /// It died or left unexpectedly.
    Error,
    /// Its block timed out and the server killed it.
    Timeout,
    /// It was alive when the run was interrupted.
    Interrupted,
    /// Handed back: it waited its task's `idle_timeout` for a block, was
    /// dismissed and left (the server starts another when blocks are
    /// ready again).
    Idle,
    /// The memory guard stopped it: its memory group neared the run's
    /// budget and its block grew fastest (the block was held back, to run
    /// again when it fits; no failure, no restart counted).
    Memory,
    /// It left on its own, exiting normally after it took blocks, while
    /// its task still had work (a worker function that returns after some
    /// blocks, to cap its memory say): not a death and no restart; it is
    /// replaced only when no other worker of its task is left.
    Left,
}

/// How a worker process was started.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StartKind {
    /// A fresh process: an interpreter that imports what the function
    /// needs (every remote spawner, and local workers without a launcher).
    #[default]
    Cold,
    /// Forked by the task's launcher, which had already loaded the
    /// function (see `server::launcher`).
    Warm,
}

/// One worker's stamps.
#[derive(Clone, Debug)]
pub struct WorkerTimeline {
    worker_id: u32,
    spawned: Instant,
    start: StartKind,
    first_acquire: Option<Instant>,
    last_return: Option<Instant>,
    sent: Option<Instant>,
    idle: Welford,
    compute: Welford,
    blocks_ok: u64,
    blocks_failed: u64,
    final_wait: Option<f64>,
    dismissed: Option<Instant>,
    teardown: Option<f64>,
    exit: Option<WorkerExit>,
    exited: Option<Instant>,
    job_id: Option<String>,
}

/// One worker's figures, as the report writes them (seconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerRecord {
    /// Server-assigned id.
    pub worker_id: u32,
    /// Spawn to first acquire; None if it never connected.
    pub startup: Option<f64>,
    /// Blocks it completed.
    pub blocks_ok: u64,
    /// Blocks it failed.
    pub blocks_failed: u64,
    /// Gaps before each block.
    pub idle: StatSummary,
    /// Round trip of each block.
    pub compute: StatSummary,
    /// Last return to being dismissed.
    pub final_wait: Option<f64>,
    /// Dismissed (or run shutdown) to exit; clean exits only.
    pub teardown: Option<f64>,
    /// How it ended; None if still running.
    pub exit: Option<WorkerExit>,
    /// How it was started. Absent from lines written before daisy 2.1
    /// (cold: there was no other way then).
    #[serde(default)]
    pub start: StartKind,
    /// The job that hosted it, where workers share jobs
    /// (`workers_per_job`): the batch system's job id (SLURM's), or
    /// `"job N"` where it gave none. Absent from lines written before
    /// daisy 2.1, and for workers that had a process (or job) of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// One job that hosted several workers of a task (`workers_per_job`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobRecord {
    /// The batch system's job id, or `"job N"` (N: its number in the run)
    /// where it gave none.
    pub job_id: String,
    /// The workers it hosted, by id (replacements included).
    pub workers: Vec<u32>,
    /// Seconds from its submission to its launcher connecting: the queue
    /// wait and the interpreter's start. None: it never connected (it was
    /// cancelled, or failed, in the queue).
    pub queue_wait: Option<f64>,
    /// Seconds from its launcher connecting to it having loaded the
    /// function (ready to fork); None if it never was.
    pub launcher_startup: Option<f64>,
    /// Seconds from the launcher being ready to each of its workers'
    /// starts, in order (forked ones start milliseconds apart).
    pub starts: Vec<f64>,
}

impl WorkerTimeline {
    /// A worker spawned at `spawned`, started the `start` way.
    pub fn new(worker_id: u32, spawned: Instant, start: StartKind) -> Self {
        Self {
            worker_id,
            spawned,
            start,
            first_acquire: None,
            last_return: None,
            sent: None,
            idle: Welford::default(),
            compute: Welford::default(),
            blocks_ok: 0,
            blocks_failed: 0,
            final_wait: None,
            dismissed: None,
            teardown: None,
            exit: None,
            exited: None,
            job_id: None,
        }
    }

    /// How the worker's process was started, learnt after the request: a
    /// job's worker, whose startup keeps counting from the request (the
    /// job's queue wait is part of it, as a job of its own is).
    pub fn started_as(&mut self, start: StartKind) {
        self.start = start;
    }

    /// The job hosting this worker (see [`WorkerRecord::job_id`]).
    pub fn set_job(&mut self, job_id: &str) {
        self.job_id = Some(job_id.to_string());
    }

    /// The worker's process exists from `now` on, started the `start`
    /// way: a warm start's fork, or the cold start that replaced it when
    /// the launcher could not fork. Its startup counts from here; the wait
    /// for the launcher to load the function is the launcher's own startup
    /// in the report.
    pub fn restart_at(&mut self, now: Instant, start: StartKind) {
        if self.first_acquire.is_none() {
            self.spawned = now;
        }
        self.start = start;
    }

    /// How the worker was started.
    pub fn start(&self) -> StartKind {
        self.start
    }

    /// An acquire request arrived.
    pub fn on_acquire(&mut self, now: Instant) {
        if self.first_acquire.is_none() {
            self.first_acquire = Some(now);
        }
    }

    /// A block was sent.
    pub fn on_send(&mut self, now: Instant) {
        if let Some(since) = self.last_return.or(self.first_acquire) {
            self.idle
                .push(now.saturating_duration_since(since).as_secs_f64());
        }
        self.sent = Some(now);
    }

    /// A block came back (released or failed).
    pub fn on_return(&mut self, now: Instant, ok: bool) {
        if let Some(sent) = self.sent.take() {
            self.compute
                .push(now.saturating_duration_since(sent).as_secs_f64());
        }
        if ok {
            self.blocks_ok += 1;
        } else {
            self.blocks_failed += 1;
        }
        self.last_return = Some(now);
    }

    /// Whether the worker has connected (asked for its first block).
    pub fn connected(&self) -> bool {
        self.first_acquire.is_some()
    }

    /// The worker was told there are no more blocks (or the run ended).
    pub fn on_dismiss(&mut self, now: Instant) {
        if self.dismissed.is_some() {
            return;
        }
        self.dismissed = Some(now);
        if let Some(last) = self.last_return.or(self.first_acquire) {
            self.final_wait = Some(now.saturating_duration_since(last).as_secs_f64());
        }
    }

    /// The process exited.
    pub fn on_exit(&mut self, now: Instant, exit: WorkerExit) {
        if self.exit.is_some() {
            return;
        }
        self.exit = Some(exit);
        self.exited = Some(now);
        if matches!(exit, WorkerExit::Clean | WorkerExit::Idle)
            && let Some(d) = self.dismissed
        {
            self.teardown = Some(now.saturating_duration_since(d).as_secs_f64());
        }
    }

    /// Blocks returned done and failed so far.
    pub fn blocks(&self) -> (u64, u64) {
        (self.blocks_ok, self.blocks_failed)
    }

    /// Seconds spent on blocks (round trips, the one in flight included)
    /// and seconds alive (spawn to exit, or to `now`) so far: the live
    /// form of the report's utilisation, whose phases add up to the same
    /// life.
    pub fn busy_and_alive(&self, now: Instant) -> (f64, f64) {
        let end = self.exited.unwrap_or(now);
        let in_flight = match (self.sent, self.exited) {
            (Some(sent), None) => now.saturating_duration_since(sent).as_secs_f64(),
            _ => 0.0,
        };
        (
            self.compute.summary().sum + in_flight,
            end.saturating_duration_since(self.spawned).as_secs_f64(),
        )
    }

    /// The record for the report.
    pub fn record(&self) -> WorkerRecord {
        WorkerRecord {
            worker_id: self.worker_id,
            startup: self
                .first_acquire
                .map(|t| t.saturating_duration_since(self.spawned).as_secs_f64()),
            blocks_ok: self.blocks_ok,
            blocks_failed: self.blocks_failed,
            idle: self.idle.summary(),
            compute: self.compute.summary(),
            final_wait: self.final_wait,
            teardown: self.teardown,
            exit: self.exit,
            start: self.start,
            job_id: self.job_id.clone(),
        }
    }
}

/// The workers of one task, as the report writes them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerSummary {
    /// Where the workers ran ("local", "slurm", "dask", ...): for a batch
    /// system, startup includes the queue wait.
    #[serde(default)]
    pub spawner: String,
    /// Workers daisy started.
    pub count: u64,
    /// Clients that connected without a server-assigned id.
    pub unmanaged_clients: u64,
    /// One sample per worker that connected.
    pub startup: StatSummary,
    /// Every per-block gap, pooled.
    pub idle: StatSummary,
    /// Every per-block round trip, pooled.
    pub compute: StatSummary,
    /// One sample per clean exit.
    pub teardown: StatSummary,
    /// How many workers ended which way.
    pub exits: BTreeMap<String, u64>,
    /// Every worker, by id.
    pub by_id: Vec<WorkerRecord>,
    /// Workers forked warm by the task's launcher (the rest started
    /// cold). Absent from lines written before daisy 2.1.
    #[serde(default)]
    pub warm_starts: u64,
    /// Seconds from starting the task's launcher to it having loaded the
    /// function and being ready to fork; None without a launcher.
    #[serde(default)]
    pub launcher_startup: Option<f64>,
    /// Why workers of a task that asked for warm starts were started cold
    /// (the launcher had a thread, failed to load the function, died);
    /// None when nothing went wrong or nothing was asked.
    #[serde(default)]
    pub cold_start_reason: Option<String>,
    /// Worker-seconds the workers spent connected without a block: the
    /// gaps before their blocks and their final waits (a node held idle).
    /// Absent from lines written before daisy 2.1.
    #[serde(default)]
    pub idle_seconds: f64,
    /// The idle timeout the task's workers ran under (seconds; None: they
    /// waited for blocks as long as the task had any); `exits["idle"]`
    /// counts the workers it handed back. Absent from lines written before
    /// daisy 2.1.
    #[serde(default)]
    pub idle_timeout: Option<f64>,
    /// The jobs that hosted several workers each (`workers_per_job`), in
    /// order; empty where every worker had a process (or job) of its own.
    /// Absent from lines written before daisy 2.1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRecord>,
    /// The jobs' queue waits, one sample per job that connected;
    /// no samples without such jobs. Absent from lines written before
    /// daisy 2.1.
    #[serde(default)]
    pub job_queue_wait: StatSummary,
}

impl WorkerSummary {
    /// Fold the timelines of one task's workers.
    pub fn fold<'a>(
        timelines: impl Iterator<Item = &'a WorkerTimeline>,
        unmanaged_clients: u64,
    ) -> Self {
        let (mut startup, mut idle, mut compute, mut teardown) = (
            Welford::default(),
            Welford::default(),
            Welford::default(),
            Welford::default(),
        );
        let mut exits = BTreeMap::new();
        let mut by_id = Vec::new();
        let mut warm_starts = 0;
        let mut idle_seconds = 0.0;
        for t in timelines {
            if t.start == StartKind::Warm {
                warm_starts += 1;
            }
            let r = t.record();
            idle_seconds += r.idle.sum + r.final_wait.unwrap_or(0.0);
            if let Some(s) = r.startup {
                startup.push(s);
            }
            idle.merge(&t.idle);
            compute.merge(&t.compute);
            if let Some(td) = r.teardown {
                teardown.push(td);
            }
            if let Some(e) = r.exit {
                let key = serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                *exits.entry(key).or_insert(0) += 1;
            }
            by_id.push(r);
        }
        by_id.sort_by_key(|r| r.worker_id);
        Self {
            spawner: String::new(),
            count: by_id.len() as u64,
            unmanaged_clients,
            startup: startup.summary(),
            idle: idle.summary(),
            compute: compute.summary(),
            teardown: teardown.summary(),
            exits,
            by_id,
            warm_starts,
            launcher_startup: None,
            cold_start_reason: None,
            idle_seconds,
            idle_timeout: None,
            jobs: Vec::new(),
            job_queue_wait: StatSummary::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn phases_follow_the_stamps() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = WorkerTimeline::new(3, t0, StartKind::Cold);
        w.on_acquire(at(60));
        w.on_send(at(61));
        w.on_return(at(111), true);
        w.on_acquire(at(112));
        w.on_send(at(113));
        w.on_return(at(163), false);
        w.on_dismiss(at(170));
        w.on_exit(at(190), WorkerExit::Clean);
        let r = w.record();
        assert!((r.startup.unwrap() - 0.060).abs() < 1e-9);
        assert_eq!((r.blocks_ok, r.blocks_failed), (1, 1));
        assert_eq!(r.compute.n, 2);
        assert!((r.compute.mean - 0.050).abs() < 1e-9);
        assert!((r.idle.sum - 0.003).abs() < 1e-9, "{:?}", r.idle);
        assert!((r.final_wait.unwrap() - 0.007).abs() < 1e-9);
        assert!((r.teardown.unwrap() - 0.020).abs() < 1e-9);
        assert_eq!(r.exit, Some(WorkerExit::Clean));
        assert_eq!(w.blocks(), (1, 1));
        let (busy, alive) = w.busy_and_alive(at(10_000));
        assert!((busy - 0.100).abs() < 1e-9, "{busy}");
        assert!(
            (alive - 0.190).abs() < 1e-9,
            "alive until its exit: {alive}"
        );
        let s = WorkerSummary::fold([w].iter(), 2);
        assert_eq!(s.count, 1);
        assert_eq!(s.unmanaged_clients, 2);
        assert_eq!(s.exits.get("clean"), Some(&1));
        assert_eq!((s.warm_starts, s.by_id[0].start), (0, StartKind::Cold));
    }

    #[test]
    fn a_warm_start_counts_its_startup_from_the_fork() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // asked at 0, forked at 700 (the launcher loaded), first request at 710
        let mut w = WorkerTimeline::new(4, t0, StartKind::Warm);
        w.restart_at(at(700), StartKind::Warm);
        w.on_acquire(at(710));
        let r = w.record();
        assert!((r.startup.unwrap() - 0.010).abs() < 1e-9, "{:?}", r.startup);
        assert_eq!(r.start, StartKind::Warm);
        // a warm start the launcher could not fork became a cold one
        let mut c = WorkerTimeline::new(5, t0, StartKind::Warm);
        c.restart_at(at(50), StartKind::Cold);
        c.on_acquire(at(850));
        // after connecting, nothing moves the spawn stamp
        c.restart_at(at(900), StartKind::Cold);
        assert!((c.record().startup.unwrap() - 0.800).abs() < 1e-9);
        let s = WorkerSummary::fold([w, c].iter(), 0);
        assert_eq!((s.count, s.warm_starts), (2, 1));
        let json = serde_json::to_value(&s.by_id[0]).unwrap();
        assert_eq!(json["start"], "warm");
    }

    #[test]
    fn only_clean_exits_have_a_teardown() {
        let t0 = Instant::now();
        let mut w = WorkerTimeline::new(0, t0, StartKind::Warm);
        w.on_acquire(t0);
        w.on_dismiss(t0);
        w.on_exit(t0 + Duration::from_millis(5), WorkerExit::Error);
        assert_eq!(w.record().teardown, None);
        let mut busy = WorkerTimeline::new(2, t0, StartKind::Cold);
        busy.on_acquire(t0);
        busy.on_send(t0 + Duration::from_millis(10));
        let (b, a) = busy.busy_and_alive(t0 + Duration::from_millis(40));
        assert!((b - 0.030).abs() < 1e-9, "the block in flight counts: {b}");
        assert!((a - 0.040).abs() < 1e-9);
        let never = WorkerTimeline::new(1, t0, StartKind::Cold);
        assert_eq!(never.record().startup, None);
    }
}
