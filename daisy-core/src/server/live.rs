//! The live detail of a running run, for a dashboard: what each tick's
//! [`RunSnapshot`](super::RunSnapshot) carries beyond the task counts.
//!
//! Everything here is bounded whatever the run's size: the blocks returned
//! since the last tick (at most [`MAX_BARS_PER_TICK`], the rest counted as
//! dropped), one entry per live worker, the last [`MAX_RECENT_FAILURES`]
//! failed attempts and one pace per task. Nothing is accounted twice: the
//! bars are stamped where a block leaves `outstanding` (its one owner, see
//! [`state`](super::state)), the failures are the ledger's own notes, the
//! utilisation is the worker timelines' compute over their lives, and the
//! throughput is the scheduler's completion count over the last
//! [`PACE_WINDOW`].

use crate::block::TaskIndex;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The most block bars one tick carries; more returned blocks in one tick
/// are counted in [`LiveDetail::bars_dropped`].
pub const MAX_BARS_PER_TICK: usize = 4096;

/// The failed attempts a snapshot lists (the latest ones).
pub const MAX_RECENT_FAILURES: usize = 10;
// the ledger keeps at least that many of the latest attempts
const _: () = assert!(MAX_RECENT_FAILURES <= crate::run_report::RECENT_FAILURE_NOTES);

/// The span over which a task's throughput is measured.
pub const PACE_WINDOW: Duration = Duration::from_secs(30);

/// Completion counts are sampled at most this often for the pace.
const PACE_SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// How a block's stay with a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarOutcome {
    /// Released done.
    Done,
    /// Reported failed (or came back unusable).
    Failed,
    /// Reclaimed after the task's timeout.
    TimedOut,
    /// Its worker died or its connection closed.
    Lost,
}

impl BarOutcome {
    /// The name the dashboard shows (`done`, `failed`, `timed out`, `lost`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Failed => "failed",
            Self::TimedOut => "timed out",
            Self::Lost => "lost",
        }
    }
}

/// One block's stay with a worker: one bar of the live timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockBar {
    /// Task of the block.
    pub task: TaskIndex,
    /// The managed worker that held it (None: an unmanaged client).
    pub worker: Option<u32>,
    /// Spatial id of the block.
    pub spatial_id: u64,
    /// Sent, seconds since the UNIX epoch.
    pub start: f64,
    /// Returned (or reclaimed), seconds since the UNIX epoch.
    pub end: f64,
    /// How it ended.
    pub outcome: BarOutcome,
}

/// A live worker now.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerNow {
    /// Server-assigned id.
    pub worker_id: u32,
    /// Its task.
    pub task: TaskIndex,
    /// Spatial id of the block it holds, if any.
    pub block: Option<u64>,
    /// When that block was sent, seconds since the UNIX epoch.
    pub since: Option<f64>,
    /// Peak RSS of the last block it returned done, bytes (tasks with
    /// resource tracking).
    pub last_peak_rss: Option<u64>,
    /// Blocks it returned done.
    pub blocks_done: u64,
    /// Blocks it failed (or lost to a timeout).
    pub blocks_failed: u64,
}

/// A failed attempt, as the dashboard lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecentFailure {
    /// Task of the block.
    pub task: TaskIndex,
    /// Spatial id of the block.
    pub spatial_id: u64,
    /// Worker that reported it, if a managed one.
    pub worker: Option<u32>,
    /// The last line of its failure text.
    pub message: String,
}

/// A task's pace so far.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPace {
    /// Blocks completed per second over the last [`PACE_WINDOW`] (skips
    /// excluded); 0 before two samples.
    pub blocks_per_second: f64,
    /// Blocks not yet completed, failed or orphaned over that pace; None
    /// while nothing completes.
    pub eta_seconds: Option<f64>,
    /// Seconds the task's workers spent on blocks over the seconds they
    /// lived so far (as the report's utilisation, live); None without
    /// workers.
    pub utilisation: Option<f64>,
}

/// The live detail of one tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveDetail {
    /// When the snapshot was taken, seconds since the UNIX epoch.
    pub now: f64,
    /// Blocks returned since the last tick, in return order.
    pub bars: Vec<BlockBar>,
    /// Blocks returned since the last tick beyond [`MAX_BARS_PER_TICK`].
    pub bars_dropped: u64,
    /// Every live managed worker, by id.
    pub workers: Vec<WorkerNow>,
    /// The last failed attempts, oldest first.
    pub failures: Vec<RecentFailure>,
    /// Failed attempts in the run so far.
    pub failures_total: u64,
    /// Per task, in pipeline order.
    pub tasks: Vec<TaskPace>,
}

/// What the run keeps between ticks for the live detail.
#[derive(Debug, Default)]
pub struct LiveWindow {
    bars: Vec<BlockBar>,
    dropped: u64,
    last_peak_rss: HashMap<u32, u64>,
    samples: Vec<VecDeque<(Instant, u64)>>,
}

impl LiveWindow {
    /// A window for `tasks` tasks.
    pub fn new(tasks: usize) -> Self {
        Self {
            samples: vec![VecDeque::new(); tasks],
            ..Self::default()
        }
    }

    /// A block left a worker.
    pub fn bar(&mut self, bar: BlockBar) {
        if self.bars.len() < MAX_BARS_PER_TICK {
            self.bars.push(bar);
        } else {
            self.dropped += 1;
        }
    }

    /// A worker returned a block done that peaked at `bytes`.
    pub fn peak_rss(&mut self, worker: u32, bytes: u64) {
        self.last_peak_rss.insert(worker, bytes);
    }

    /// The last peak RSS `worker` reported.
    pub fn last_peak_rss(&self, worker: u32) -> Option<u64> {
        self.last_peak_rss.get(&worker).copied()
    }

    /// The bars since the last call, and how many did not fit.
    pub fn take_bars(&mut self) -> (Vec<BlockBar>, u64) {
        (
            std::mem::take(&mut self.bars),
            std::mem::take(&mut self.dropped),
        )
    }

    /// Task `task` had `done` blocks completed (skips excluded) at `now`
    /// and `remaining` unresolved: its throughput over the last
    /// [`PACE_WINDOW`] and the time left at that pace.
    pub fn pace(
        &mut self,
        task: TaskIndex,
        now: Instant,
        done: u64,
        remaining: u64,
    ) -> (f64, Option<f64>) {
        let Some(samples) = self.samples.get_mut(task as usize) else {
            return (0.0, None);
        };
        if samples
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= PACE_SAMPLE_EVERY)
        {
            samples.push_back((now, done));
        }
        // keep one sample at or past the window's start
        while samples.len() > 2
            && samples
                .get(1)
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= PACE_WINDOW)
        {
            samples.pop_front();
        }
        let Some(&(first_at, first_done)) = samples.front() else {
            return (0.0, None);
        };
        let span = now.saturating_duration_since(first_at).as_secs_f64();
        let rate = if span > 0.0 {
            done.saturating_sub(first_done) as f64 / span
        } else {
            0.0
        };
        let eta = if remaining == 0 {
            Some(0.0)
        } else if rate > 0.0 {
            Some(remaining as f64 / rate)
        } else {
            None
        };
        (rate, eta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(spatial_id: u64) -> BlockBar {
        BlockBar {
            task: 0,
            worker: Some(1),
            spatial_id,
            start: 1.0,
            end: 2.0,
            outcome: BarOutcome::Done,
        }
    }

    #[test]
    fn bars_are_bounded_per_tick_and_drained() {
        let mut w = LiveWindow::new(1);
        for i in 0..(MAX_BARS_PER_TICK as u64 + 5) {
            w.bar(bar(i));
        }
        let (bars, dropped) = w.take_bars();
        assert_eq!(bars.len(), MAX_BARS_PER_TICK);
        assert_eq!(dropped, 5);
        assert_eq!(w.take_bars(), (Vec::new(), 0), "drained");
    }

    #[test]
    fn the_pace_is_completions_over_the_window() {
        let mut w = LiveWindow::new(1);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.pace(0, at(0), 0, 100), (0.0, None), "one sample: no pace");
        let (rate, eta) = w.pace(0, at(10), 50, 50);
        assert!((rate - 5.0).abs() < 1e-9);
        assert!((eta.unwrap() - 10.0).abs() < 1e-9);
        // past the window the old samples go: the pace is the recent one
        w.pace(0, at(20), 100, 40);
        let (rate, _) = w.pace(0, at(60), 100, 40);
        assert!(rate < 5.0, "{rate}");
        let (rate, eta) = w.pace(0, at(61), 100, 40);
        assert_eq!((rate, eta), (0.0, None), "nothing completes: no ETA");
        assert_eq!(w.pace(0, at(62), 140, 0).1, Some(0.0));
        assert_eq!(w.pace(7, at(62), 1, 1), (0.0, None), "no such task");
    }

    #[test]
    fn the_last_peak_rss_is_per_worker() {
        let mut w = LiveWindow::new(1);
        w.peak_rss(3, 10);
        w.peak_rss(3, 20);
        assert_eq!(w.last_peak_rss(3), Some(20));
        assert_eq!(w.last_peak_rss(4), None);
    }
}
