//! What a run is told before it starts: [`ServerConfig`] for the run,
//! [`TaskRuntime`] per task, [`WorkerCommand`] for how a worker process is
//! started. Plain data: nothing here acts or decides.

use crate::block::PerTask;
use crate::error::DaisyError;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How to start one worker process of a task.
#[derive(Clone, Debug, Default)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (`{worker_id}` and `{task_id}` are substituted).
    pub args: Vec<String>,
    /// Extra environment variables (the server adds `DAISY_CONTEXT`).
    pub env: Vec<(String, String)>,
    /// Bytes written to the worker's stdin, then closed (the pickled
    /// function, for daisy's Python workers). Shared, not copied, by every
    /// worker and the launcher of a task: a function that captured 100 MB
    /// is held once in the driver however many workers start.
    pub stdin: Arc<[u8]>,
    /// Run (and not waited for long) when the server kills this worker on
    /// purpose (timeout, interrupt, shutdown): for a worker that is only a
    /// local handle on remote work, such as `sbatch --wait`, this cancels
    /// the remote part (`scancel`). Empty: nothing to run.
    pub stop: Vec<String>,
    /// The process is a local handle that learns of its remote part's end
    /// only by polling (`sbatch --wait`: 2 to 32 s late): once its worker
    /// (or job) has said goodbye and left, the handle is ended instead of
    /// waited for (see `WorkerSlot::on_connection_end`).
    pub polls: bool,
}

impl WorkerCommand {
    /// Substitute `{worker_id}` and `{task_id}` in a command argument, so a
    /// spawner can name jobs and log files after the worker.
    pub fn expand(arg: &str, task_id: &str, worker_id: u32) -> String {
        arg.replace("{worker_id}", &worker_id.to_string())
            .replace("{task_id}", task_id)
    }

    /// Substitute `{job}` and `{task_id}` in an argument of a job's command
    /// (`JobCommand`), so a spawner can name the job and its log files.
    pub fn expand_job(arg: &str, task_id: &str, job: u32) -> String {
        arg.replace("{job}", &job.to_string())
            .replace("{task_id}", task_id)
    }
}

/// How to start a job that hosts several workers of a task (see
/// `server::jobs`): a batch job (`sbatch --wait ...`) running a node
/// launcher that connects back to the server, loads the function once and
/// forks the workers the server asks of it.
#[derive(Clone, Debug)]
pub struct JobCommand {
    /// The job's local handle; `{job}` and `{task_id}` are substituted.
    pub command: WorkerCommand,
    /// At most this many workers share one job.
    pub workers_per_job: u32,
}

/// Per-task runtime settings.
#[derive(Clone, Debug)]
pub struct TaskRuntime {
    /// At most this many workers at once.
    pub max_workers: u32,
    /// `max_workers="auto"`: the run sets `max_workers` when it starts,
    /// from the cores and its memory budget (see [`crate::worker_count`]).
    pub auto_workers: bool,
    /// A block out longer than this is reclaimed and its worker killed.
    pub timeout: Option<Duration>,
    /// Unexpected worker deaths tolerated before the task is abandoned.
    pub max_worker_restarts: u32,
    /// A worker that waited this long for a block is handed back: the
    /// task's own setting (`Task(idle_timeout=...)`); None: the run's.
    pub idle_timeout: Option<Duration>,
    /// The spawner's idle timeout, used when neither the task nor the run
    /// sets one (a remote spawner hands idle nodes back by default).
    pub spawner_idle_timeout: Option<Duration>,
    /// Resources one worker of this task holds (e.g. `gpu: 1`).
    pub requires: BTreeMap<String, u64>,
    /// How to start a worker; `None`: only external clients serve it.
    pub worker: Option<WorkerCommand>,
    /// How to start the task's launcher, which loads the function once
    /// and forks warm workers (see `server::launcher`); `None`: every
    /// worker starts cold from `worker`, which is also the fallback when
    /// the launcher cannot fork.
    pub launcher: Option<WorkerCommand>,
    /// Where set, workers start in jobs of several workers each instead of
    /// one process (or job) per worker (`SlurmSpawner(workers_per_job=N)`).
    pub job: Option<JobCommand>,
    /// Blocks must come back measured (`resource_tracking=True`).
    pub resource_tracking: bool,
    /// Those measurements include GPU figures (`gpu_tracking`).
    pub gpu_tracking: bool,
    /// Name of the spawner that starts the workers ("local", "slurm", ...),
    /// written into the report.
    pub spawner: String,
    /// SHA-256 of the payload file a worker of this task loads (cluster
    /// and custom spawners), told to it in its secret context so that a
    /// payload changed while a job was queued is refused; None: the
    /// payload travels on stdin.
    pub payload_sha256: Option<String>,
    /// A SHA-256 of the block function's code (not of what it captured),
    /// recorded in the task's report lines so the forecast uses only blocks
    /// measured with the code that will run; None where not known.
    pub function_sha256: Option<String>,
}

/// Settings of one run.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1` by default in daisy).
    pub host: String,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// One entry per task, in pipeline order.
    pub tasks: PerTask<TaskRuntime>,
    /// Total resources workers may hold at once.
    pub resources: BTreeMap<String, u64>,
    /// Base directory for worker logs; `None` leaves their output on the
    /// driver's console.
    pub log_dir: Option<PathBuf>,
    /// Where worker output goes when there is a log directory.
    pub log_mode: LogMode,
    /// The run's secret token.
    pub token: String,
    /// The host name workers are told to connect to; None: the address
    /// the server listens on (right for loopback and a specific address,
    /// not for 0.0.0.0).
    pub advertise_host: Option<String>,
    /// Run once when the run ends, whatever the path (to cancel any remote
    /// job of the run still queued); empty: nothing.
    pub stop_all: Vec<String>,
    /// Run and waited for (at most [`TEARDOWN_GRACE`](super::TEARDOWN_GRACE))
    /// at the end of a run that was not interrupted, before `stop_all`: it
    /// returns once the batch system lists no job of the run, so the run
    /// leaves none behind and does not cancel jobs that are ending by
    /// themselves; empty: nothing to wait for.
    pub wait_all: Vec<String>,
    /// How often the main loop sweeps timeouts and calls the tick hook:
    /// [`TICK`](super::TICK) in a run; a test may make it long, to check
    /// that nothing the run waits for waits for a tick.
    pub tick: std::time::Duration,
    /// How long a TCP peer that stopped answering is waited for before its
    /// connection is given up (see `crate::liveness`); also told to
    /// workers, whose clients give up on the server after as long.
    pub liveness_timeout: Duration,
    /// The run's idle timeout (`run_blockwise(idle_timeout=...)`), for the
    /// tasks that set none of their own; None: each task's spawner's.
    pub idle_timeout: Option<Duration>,
    /// The memory budget and guard.
    pub memory: MemorySettings,
    /// The run is a forecast's sample (`daisy.forecast`): its report lines
    /// say so, and status, compare and the forecast's own history read
    /// them as that, not as a run of the task.
    pub forecast_sample: bool,
}

impl TaskRuntime {
    /// Its workers run on this machine (the local spawner's), where the
    /// memory gate can see them.
    pub fn is_local(&self) -> bool {
        self.spawner == "local" && self.job.is_none()
    }
}

/// The run's memory settings (see `server::memory_gate`).
#[derive(Clone, Debug, Default)]
pub struct MemorySettings {
    /// The budget in bytes, declared (`memory_budget=`); None: found.
    pub budget: Option<u64>,
    /// Let blocks in by measured memory and stop a worker before the
    /// kernel's OOM killer would (`memory_guard=`).
    pub guard: bool,
}

impl ServerConfig {
    /// Refuse a run in which a task's workers need more of a resource than
    /// the whole budget has: such a task could never run. `task_ids` are
    /// the tasks in pipeline order.
    pub fn check_resources(&self, task_ids: &[String]) -> Result<(), DaisyError> {
        for (tid, rt) in task_ids.iter().zip(&self.tasks) {
            for (k, need) in &rt.requires {
                if let Some(have) = self.resources.get(k)
                    && need > have
                {
                    return Err(DaisyError::invalid(
                        "requires",
                        format!(
                            "task {tid:?} needs {need} {k:?} per worker but resources only has \
                             {have}; it could never run. Raise resources[{k:?}] or lower the \
                             task's requires"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Where worker output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogMode {
    /// The driver's console only.
    Console,
    /// `<log dir>/<task>/worker_<id>.out|.err` only.
    #[default]
    File,
    /// Both: the files, and copied to the driver's stdout/stderr.
    Both,
}

impl std::str::FromStr for LogMode {
    type Err = DaisyError;

    fn from_str(s: &str) -> Result<Self, DaisyError> {
        match s {
            "console" => Ok(Self::Console),
            "file" => Ok(Self::File),
            "both" => Ok(Self::Both),
            other => Err(DaisyError::invalid(
                "log_mode",
                format!("unknown mode {other:?}; use \"console\", \"file\" or \"both\""),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_names_the_worker_and_task() {
        assert_eq!(
            WorkerCommand::expand("--job-name=daisy-{task_id}-{worker_id}", "seg", 7),
            "--job-name=daisy-seg-7"
        );
        assert_eq!(WorkerCommand::expand("plain", "seg", 7), "plain");
    }

    #[test]
    fn log_modes_parse_and_an_unknown_one_names_the_choices() {
        assert_eq!("both".parse::<LogMode>(), Ok(LogMode::Both));
        let e = "loud".parse::<LogMode>().unwrap_err().to_string();
        assert!(
            e.starts_with("log_mode:") && e.contains("\"console\""),
            "{e}"
        );
    }

    #[test]
    fn a_task_that_needs_more_than_the_budget_is_refused() {
        let rt = TaskRuntime {
            max_workers: 1,
            auto_workers: false,
            timeout: None,
            max_worker_restarts: 0,
            idle_timeout: None,
            spawner_idle_timeout: None,
            requires: [("gpu".to_string(), 2)].into(),
            worker: None,
            launcher: None,
            job: None,
            resource_tracking: false,
            gpu_tracking: false,
            spawner: "local".into(),
            payload_sha256: None,
            function_sha256: None,
        };
        let mut config = ServerConfig {
            host: "127.0.0.1".into(),
            port: 0,
            tasks: vec![rt].into(),
            resources: [("gpu".to_string(), 1)].into(),
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
        let e = config.check_resources(&["seg".into()]).unwrap_err();
        assert!(
            e.to_string().starts_with("requires: task \"seg\" needs 2"),
            "{e}"
        );
        config.resources.insert("gpu".into(), 2);
        assert_eq!(config.check_resources(&["seg".into()]), Ok(()));
    }
}
