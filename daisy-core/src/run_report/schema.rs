//! The report's types: what one `runs.jsonl` line holds, defined once.
//! serde writes them and [`report_schema`] publishes their JSON Schema
//! (`python/daisy/report_schema.json`), which Python's report classes and
//! history readers are checked against. The limits on what a line keeps
//! (notices, failure causes) live here, beside the keys they bound.

use super::*;
use crate::run_stats::StatSummary;
use crate::worker_timeline::WorkerSummary;
use serde::{Deserialize, Serialize};

/// The block section of a task's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Whether the slope means something: fitted to at least
    /// [`crate::run_stats::TREND_MIN_BLOCKS`] measured blocks (a slope of
    /// 7 blocks read "-726 ms/block": noise). Views show the trend only
    /// then. False in lines written before it was kept.
    #[serde(default)]
    pub trend_shown: bool,
    /// Where `peak_rss` comes from (see
    /// [`crate::block_profile::peak_rss_source`]); empty without stats.
    #[serde(default)]
    pub peak_rss_source: String,
    /// The time of each worker's first block in this run (its wall where
    /// measured, else its round trip): its warm-up (imports, caches, first
    /// touch) is in it.
    #[serde(default)]
    pub first_on_worker: StatSummary,
    /// The mean of those first blocks over the mean of the others; None
    /// without both. A ratio far above 1 is a warm-up worth removing.
    #[serde(default)]
    pub warmup_ratio: Option<f64>,
    /// The slowest blocks of this run (by the same time), slowest first,
    /// at most [`super::SLOWEST_BLOCKS`].
    #[serde(default)]
    pub slowest: Vec<SlowBlock>,
    /// CPU seconds per wall second of the blocks (`cpu.sum / wall.sum`):
    /// about 1 for a CPU-bound block function on one core, well below for
    /// one that waits (IO, locks), above for several threads. None without
    /// measurements.
    #[serde(default)]
    pub cpu_per_wall: Option<f64>,
    /// Seconds each block's worker waited for a core (runnable, on the run
    /// queue), over the blocks that have the figure. Absent from lines
    /// written before daisy 2.1.
    #[serde(default)]
    pub run_queue: StatSummary,
    /// The share of those blocks' wall time spent waiting for a core
    /// (`run_queue.sum` over their wall); None without the figure. Near
    /// 1 - `cpu_per_wall`, the blocks waited for cores, not for IO: more
    /// workers than cores.
    #[serde(default)]
    pub run_queue_per_wall: Option<f64>,
    /// The median of the blocks' peak RSS, bytes (within 2.2 %, see
    /// [`crate::run_stats::LogHistogram`]); None without measurements.
    #[serde(default)]
    pub peak_rss_p50: Option<f64>,
    /// The 95th percentile of the blocks' peak RSS, bytes (the same way).
    #[serde(default)]
    pub peak_rss_p95: Option<f64>,
}

/// One of a run's slowest blocks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlowBlock {
    /// Its spatial id (`block.block_id[1]`).
    pub spatial_id: u64,
    /// Its time, seconds.
    pub seconds: f64,
}

/// One task's report of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// When this run's failed attempts ran, on which worker: the first
    /// [`MAX_FAILED_ATTEMPT_SPANS`] (the tracking store times only a
    /// block's successful attempt), for the HTML report's timeline.
    /// Absent from lines written before daisy 2.1.
    #[serde(default)]
    pub failed_attempts: Vec<AttemptSpan>,
    /// The memory budget its blocks were let in by, and what the memory
    /// guard did (see `server::memory_gate`); None where no gate ran (a
    /// remote spawner, a serial run, `memory_guard=False`). Absent from
    /// lines written before daisy 2.1.
    #[serde(default)]
    pub memory: Option<MemoryReport>,
    /// The ETAs the run gave for this task from the model (see
    /// `forecast::eta`): one every 5 % of its blocks, at most
    /// `forecast::eta::CHECKPOINTS`, to set against when it really ended.
    /// Absent from lines written before daisy 2.1.
    #[serde(default)]
    pub eta: Vec<EtaCheckpoint>,
    /// The run was a forecast's sample (`daisy.forecast`), not a run of the
    /// task: `daisy status` and `daisy compare` pass it over. Absent from
    /// lines written before daisy 2.1.
    #[serde(default)]
    pub forecast_sample: bool,
    /// A SHA-256 of the block function's code the run ran (see
    /// `server::TaskRuntime::function_sha256`): the forecast leaves out
    /// blocks measured with other code. None where not known (a serial run,
    /// lines written before daisy 2.1).
    #[serde(default)]
    pub function_sha256: Option<String>,
}

/// One ETA a run gave for a task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EtaCheckpoint {
    /// Blocks of the task done in this run when it was given.
    pub done: u64,
    /// Seconds since the run's start when it was given.
    pub elapsed_seconds: f64,
    /// The seconds it said were left.
    pub eta_seconds: f64,
    /// The seconds that really were left: from then until the task's last
    /// block came back (filled in when the report is made; None before).
    #[serde(default)]
    pub left_seconds: Option<f64>,
}

/// The memory budget of a task's local workers in a run, and what the
/// memory guard did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryReport {
    /// The budget, bytes.
    pub budget_bytes: u64,
    /// Where it came from, in words ("the memory cgroup limit (...)").
    pub budget_source: String,
    /// Blocks the guard held back (stopped their worker before the kernel's
    /// OOM killer would, and ran them again when they fit).
    pub held_back: u64,
}

/// The failed attempts whose times a report keeps: enough to see where in a
/// run failures clustered, bounded so that a run whose every block fails
/// writes a report line of at most about 100 KB.
pub const MAX_FAILED_ATTEMPT_SPANS: usize = 1_000;

/// One failed attempt of a block: where it ran and when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttemptSpan {
    /// The block's cell on the task's block grid (C order; the tracking
    /// store's index).
    pub index: u64,
    /// The block's spatial id.
    pub block: u64,
    /// The worker it ran on (None: an unmanaged client, or a serial run).
    pub worker_id: Option<u32>,
    /// When it was handed out, seconds since the UNIX epoch.
    pub sent_at: f64,
    /// When it came back (or was given up), likewise.
    pub returned_at: f64,
    /// It ran past the task's timeout and was reclaimed.
    pub timed_out: bool,
}

/// The JSON Schema of one report line (one [`TaskReport`]), generated from
/// these very types: the report's schema has one definition, and what is
/// published (`python/daisy/report_schema.json`, which readers check lines
/// against) is this. A key with a serde default is not required: lines
/// written before it was added still read.
pub fn report_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(TaskReport)).unwrap_or_default()
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

/// One cause of failed attempts and how many gave it. Attempts group by
/// their cause: for a Python traceback, the exception type and the source
/// line that raised it (so messages that name a block id or a ROI still
/// group); for any other text, its last line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CauseCount {
    /// The first failure text's last line with this cause (for a Python
    /// traceback: the exception), at most [`FAILURE_LINE_BYTES`]: an
    /// example.
    pub message: String,
    /// Failed attempts with this cause.
    pub count: u64,
    /// The cause: `"ValueError at smooth.py:12 in smooth"` for a Python
    /// traceback; empty where the text is none (then the message is the
    /// cause), and in lines written before daisy grouped by cause.
    #[serde(default)]
    pub cause: String,
}

/// Why a task's blocks failed in one run, kept in its report line so the
/// next morning says what went wrong, not only how often.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
