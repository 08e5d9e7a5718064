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

use crate::block_profile::BlockStats;
use crate::run_stats::{StatSummary, Trend, Welford};
use crate::task_state::TaskState;
use crate::worker_timeline::WorkerSummary;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// Name of the run history file in a task's store (or log directory).
pub const RUNS_FILE: &str = "runs.jsonl";

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
            trend_slope_ms: self.trend.slope(),
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
    /// Least-squares slope of wall time (ms) in completion order.
    pub trend_slope_ms: f64,
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
    /// How the run ended: "completed", "failed", "interrupted" or
    /// "abandoned".
    pub outcome: String,
    /// Per-block figures.
    pub blocks: BlockSummary,
    /// Per-worker figures.
    pub workers: WorkerSummary,
}

impl TaskReport {
    /// Append this report as one line to `<dir>/runs.jsonl`.
    pub fn append_to(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let line = serde_json::to_string(self).map_err(std::io::Error::other)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(RUNS_FILE))?;
        // one write call per line, so concurrent appends never interleave
        f.write_all(format!("{line}\n").as_bytes())
    }
}

/// Seconds since the UNIX epoch, now.
pub fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            outcome: "completed".into(),
            blocks: agg.summary(&state),
            workers: WorkerSummary::default(),
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
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["blocks"]["round_trip"]["n"], 12);
        assert!(v["blocks"]["wall"]["sum"].as_f64().unwrap() > 0.5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
