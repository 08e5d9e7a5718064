//! The distributed runtime's server: a TCP listener in the calling process
//! that hands blocks to worker processes, takes them back, replaces dead
//! workers and ends the run cleanly on every path. [`run_server`] owns it.
//!
//! ## Threads and state
//! The server runs on a single-threaded tokio runtime inside a `LocalSet`
//! on the calling thread (the bindings release the GIL around it). All run
//! state lives in one `RefCell` shared by the connection tasks, the worker
//! monitors and the main loop: no locks, no cross-thread wake-ups, and the
//! only calls back into the embedding program are the explicit
//! [`RunHooks`] (a block's pre-check, a periodic tick).
//!
//! ## One block, one owner
//! A block handed out is recorded in `outstanding` with the connection and
//! worker it went to, when, and its deadline. Whoever removes it from there
//! first accounts for it, exactly once: the worker's release or failure
//! report, the connection closing (lost block), or the timeout sweep. A late
//! report for a block that is no longer outstanding is refused.
//!
//! ## Workers
//! Managed workers are processes started from the task's
//! [`WorkerCommand`], one process group each (so the terminal's Ctrl-C
//! reaches only the driver, and killing a worker kills what it started),
//! stdout/stderr written straight into `<log dir>/<task>/worker_<id>.out|.err`.
//! A monitor awaits each child's exit, so a death is seen at once. The main
//! loop ([`TICK`]) sweeps timeouts, starts workers where a task has more
//! ready blocks than idle workers (within `max_workers` and the resource
//! budget), retires idle workers when another task needs their resources,
//! and abandons a task whose workers died more than `max_worker_restarts`
//! times (its downstream tasks are orphaned).
//!
//! ## Ending
//! When every task is finished, waiting workers get `NoMoreBlocks` and exit;
//! stragglers are killed after [`TEARDOWN_GRACE`]. When the tick hook
//! reports an error (Ctrl-C in the driver), every worker's process group is
//! killed at once and the error is returned.

use crate::block::{Block, BlockKey, BlockStatus, TaskIndex};
use crate::protocol::{self, ClientMessage, ServerMessage};
use crate::run_report::{BlockAggregates, TaskReport, wall_clock};
use crate::scheduler::Scheduler;
use crate::task_state::TaskState;
use crate::worker_timeline::{WorkerExit, WorkerSummary, WorkerTimeline};
use futures_util::{SinkExt, StreamExt};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

/// How often the main loop sweeps timeouts, starts workers and calls the
/// tick hook: short enough that Ctrl-C and a hung block are acted on well
/// within a second, long enough to cost nothing.
pub const TICK: Duration = Duration::from_millis(50);

/// How long finished workers get to exit on their own before they are
/// killed.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a new connection may take to say hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start one worker process of a task.
#[derive(Clone, Debug, Default)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (the server adds `DAISY_CONTEXT`).
    pub env: Vec<(String, String)>,
    /// Bytes written to the worker's stdin, then closed (the pickled
    /// function, for daisy's Python workers).
    pub stdin: Vec<u8>,
    /// Run (and not waited for long) when the server kills this worker on
    /// purpose (timeout, interrupt, shutdown): for a worker that is only a
    /// local handle on remote work, such as `sbatch --wait`, this cancels
    /// the remote part (`scancel`). Empty: nothing to run.
    pub stop: Vec<String>,
}

/// Substitute `{worker_id}` and `{task_id}` in a command argument, so a
/// spawner can name jobs and log files after the worker.
fn expand(arg: &str, task_id: &str, worker_id: u32) -> String {
    arg.replace("{worker_id}", &worker_id.to_string())
        .replace("{task_id}", task_id)
}

/// Per-task runtime settings.
#[derive(Clone, Debug)]
pub struct TaskRuntime {
    /// At most this many workers at once.
    pub max_workers: u32,
    /// A block out longer than this is reclaimed and its worker killed.
    pub timeout: Option<Duration>,
    /// Unexpected worker deaths tolerated before the task is abandoned.
    pub max_worker_restarts: u32,
    /// Resources one worker of this task holds (e.g. `gpu: 1`).
    pub requires: BTreeMap<String, u64>,
    /// How to start a worker; `None`: only external clients serve it.
    pub worker: Option<WorkerCommand>,
    /// Blocks must come back measured (`resource_tracking=True`).
    pub resource_tracking: bool,
    /// Name of the spawner that starts the workers ("local", "slurm", ...),
    /// written into the report.
    pub spawner: String,
}

/// Settings of one run.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1` by default in daisy).
    pub host: String,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// One entry per task, in pipeline order.
    pub tasks: Vec<TaskRuntime>,
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
}

/// A failed attempt, for the summary.
#[derive(Clone, Debug)]
pub struct FailureNote {
    /// Task of the block.
    pub task: TaskIndex,
    /// Spatial id of the block.
    pub spatial_id: u64,
    /// Worker that reported it (None: unmanaged client).
    pub worker_id: Option<u32>,
    /// What happened.
    pub reason: String,
}

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// Final task states in pipeline order.
    pub states: Vec<TaskState>,
    /// Every failed attempt.
    pub failures: Vec<FailureNote>,
    /// Abandoned tasks with the reason.
    pub abandoned: Vec<(TaskIndex, String)>,
    /// Clients that connected without a server-assigned worker id.
    pub unmanaged_clients: u32,
    /// Worker processes started per task.
    pub workers_started: Vec<u32>,
    /// The run report of every task, in pipeline order (also appended to
    /// the `runs.jsonl` of every task with a tracking store).
    pub reports: Vec<TaskReport>,
}

/// Calls from the server back into the embedding program.
pub trait RunHooks {
    /// The error a tick may return to stop the run.
    type Error;
    /// Whether a ready block is already done and can be skipped (the
    /// user's check function). An error is logged and the block runs.
    fn is_done(&mut self, block: &Block) -> Result<bool, String>;
    /// Called every [`TICK`]; an error stops the run (workers are killed).
    fn tick(&mut self, snapshot: &RunSnapshot) -> Result<(), Self::Error>;
    /// Called once the server listens, before any worker starts.
    fn on_listening(&mut self, _addr: SocketAddr) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Errors of a run: the hook's own, a broken rule, or an I/O failure of
/// the server. The first two carry the partial outcome (with its reports,
/// already appended to the stores' `runs.jsonl`).
#[derive(Debug)]
pub enum RunError<E> {
    /// The tick hook stopped the run (Ctrl-C).
    Hook(E, Box<RunOutcome>),
    /// The run could not go on (a block came back unmeasured to a task
    /// that expects measurements).
    Fatal(String, Box<RunOutcome>),
    /// The server could not listen.
    Io(io::Error),
}

type ExitKind = WorkerExit;

#[derive(Debug)]
struct WorkerSlot {
    task: TaskIndex,
    pid: Option<u32>,
    alive: bool,
    /// Set when the server killed or retired it on purpose.
    expected_exit: Option<ExitKind>,
    /// In an acquire with nothing to give.
    waiting: bool,
    /// Told to leave at its next acquire (resources wanted elsewhere).
    retire: bool,
    /// Holds a block now.
    busy: bool,
    /// Was told there are no more blocks (so a clean exit is expected).
    dismissed: bool,
    /// Blocks handed to it.
    blocks_taken: u64,
    /// Its command's stop command, expanded (cancels remote work).
    stop: Vec<String>,
    /// Signalled when the worker's process is gone: its connection is then
    /// closed, so a remote half still running (a Dask task behind a local
    /// handle) learns it was dropped and stops (see `client`).
    hang_up: CancellationToken,
}

impl WorkerSlot {
    /// Kill the worker's process group and cancel its remote part.
    fn kill(&self) {
        if let Some(pid) = self.pid {
            kill_group(pid);
        }
        run_stop_command(&self.stop);
    }
}

#[derive(Debug)]
struct Outstanding {
    conn: u64,
    worker: Option<u32>,
    deadline: Option<Instant>,
    sent: Instant,
    sent_wall: f64,
}

struct State<H> {
    scheduler: Scheduler,
    config: ServerConfig,
    hooks: H,
    addr: Option<SocketAddr>,
    outstanding: HashMap<BlockKey, Outstanding>,
    workers: BTreeMap<u32, WorkerSlot>,
    next_worker_id: u32,
    restarts: Vec<u32>,
    workers_started: Vec<u32>,
    failures: Vec<FailureNote>,
    abandoned: Vec<(TaskIndex, String)>,
    unmanaged_clients: u32,
    next_conn: u64,
    stopping: bool,
    started_at: f64,
    timelines: BTreeMap<u32, WorkerTimeline>,
    aggregates: Vec<BlockAggregates>,
    unmanaged_per_task: Vec<u64>,
    fatal: Option<String>,
    /// Completed round trips since the last tick (drained by `snapshot`).
    recent_round_trips: Vec<(TaskIndex, f64)>,
}

type Shared<H> = Rc<(RefCell<State<H>>, Notify)>;

/// Run a scheduler's pipeline with workers until every task is finished
/// (or the tick hook stops it). Blocks the calling thread. Tracking stores
/// and skip masks set on the scheduler are honoured and flushed at the end.
pub fn run_server<H: RunHooks + 'static>(
    scheduler: Scheduler,
    config: ServerConfig,
    hooks: H,
) -> Result<RunOutcome, RunError<H::Error>>
where
    H::Error: 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Io)?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, serve(scheduler, config, hooks))
}

async fn serve<H: RunHooks + 'static>(
    scheduler: Scheduler,
    config: ServerConfig,
    hooks: H,
) -> Result<RunOutcome, RunError<H::Error>>
where
    H::Error: 'static,
{
    let listener = TcpListener::bind((config.host.as_str(), config.port))
        .await
        .map_err(RunError::Io)?;
    let addr = listener.local_addr().map_err(RunError::Io)?;
    let n = scheduler.pipeline().len();
    let shared: Shared<H> = Rc::new((
        RefCell::new(State {
            scheduler,
            config,
            hooks,
            addr: Some(addr),
            outstanding: HashMap::new(),
            workers: BTreeMap::new(),
            next_worker_id: 0,
            restarts: vec![0; n],
            workers_started: vec![0; n],
            failures: Vec::new(),
            abandoned: Vec::new(),
            unmanaged_clients: 0,
            next_conn: 0,
            stopping: false,
            started_at: wall_clock(),
            timelines: BTreeMap::new(),
            aggregates: vec![BlockAggregates::default(); n],
            unmanaged_per_task: vec![0; n],
            fatal: None,
            recent_round_trips: Vec::new(),
        }),
        Notify::new(),
    ));
    let listening = shared.0.borrow_mut().hooks.on_listening(addr);
    if let Err(e) = listening {
        let out = outcome(&shared.0.borrow(), true);
        return Err(RunError::Hook(e, Box::new(out)));
    }
    tracing::debug!("daisy server listening on {addr}");

    let accept = spawn_accept_loop(&shared, Listener::Tcp(listener));
    // workers on this machine connect through the run's Unix-domain socket
    let local = protocol::bind_local_socket(&protocol::local_socket_name(
        &shared.0.borrow().config.token,
    ))
    .map(|unix| spawn_accept_loop(&shared, Listener::Local(unix)));

    let result = main_loop(&shared).await;
    accept.abort();
    if let Some(local) = local {
        local.abort();
    }
    if let Err(e) = shared.0.borrow().scheduler.flush_tracking() {
        tracing::warn!("could not flush a tracking store: {e}");
    }
    let interrupted = result.is_err();
    teardown(&shared, !matches!(result, Ok(None))).await;
    let out = outcome(&shared.0.borrow(), interrupted);
    for (t, report) in out.reports.iter().enumerate() {
        if let Some(tracking) = shared.0.borrow().scheduler.tracking(t as TaskIndex)
            && let Err(e) = report.append_to(tracking.path())
        {
            tracing::warn!(
                "could not append to {}/runs.jsonl: {e}",
                tracking.path().display()
            );
        }
    }
    match result {
        Ok(None) => Ok(out),
        Ok(Some(message)) => Err(RunError::Fatal(message, Box::new(out))),
        Err(e) => Err(RunError::Hook(e, Box::new(out))),
    }
}

fn outcome<H>(st: &State<H>, interrupted: bool) -> RunOutcome {
    let n = st.scheduler.pipeline().len();
    let finished_at = wall_clock();
    let reports = (0..n as TaskIndex)
        .map(|t| {
            let state = st.scheduler.task_state(t);
            let outcome = if interrupted {
                "interrupted"
            } else if st.scheduler.is_abandoned(t) {
                "abandoned"
            } else if state.all_completed() {
                "completed"
            } else {
                "failed"
            };
            TaskReport {
                task_id: st.scheduler.pipeline().spec(t).task_id.clone(),
                started_at: st.started_at,
                finished_at,
                tracked: st.scheduler.tracking(t).is_some(),
                outcome: outcome.into(),
                blocks: st.aggregates[t as usize].summary(state),
                workers: WorkerSummary {
                    spawner: st.config.tasks[t as usize].spawner.clone(),
                    ..WorkerSummary::fold(
                        st.timelines
                            .iter()
                            .filter(|(id, _)| st.workers.get(id).is_some_and(|w| w.task == t))
                            .map(|(_, tl)| tl),
                        st.unmanaged_per_task[t as usize],
                    )
                },
            }
        })
        .collect();
    RunOutcome {
        reports,
        states: (0..n as TaskIndex)
            .map(|t| st.scheduler.task_state(t).clone())
            .collect(),
        failures: st.failures.clone(),
        abandoned: st.abandoned.clone(),
        unmanaged_clients: st.unmanaged_clients,
        workers_started: st.workers_started.clone(),
    }
}

fn snapshot<H>(st: &mut State<H>) -> RunSnapshot {
    let n = st.scheduler.pipeline().len();
    let mut workers = vec![0u32; n];
    for w in st.workers.values().filter(|w| w.alive) {
        workers[w.task as usize] += 1;
    }
    RunSnapshot {
        states: (0..n as TaskIndex)
            .map(|t| st.scheduler.task_state(t).clone())
            .collect(),
        workers,
        restarts: st.restarts.clone(),
        round_trips: std::mem::take(&mut st.recent_round_trips),
    }
}

/// `Ok(None)` when every task finished, `Ok(Some(message))` when a rule
/// was broken, `Err` when the tick hook stopped the run.
async fn main_loop<H: RunHooks + 'static>(shared: &Shared<H>) -> Result<Option<String>, H::Error> {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let snap = {
            let mut st = shared.0.borrow_mut();
            sweep_timeouts(&mut st);
            check_progress_possible(&mut st);
            rebalance(shared, &mut st);
            snapshot(&mut st)
        };
        shared.1.notify_waiters();
        // the hook runs without any borrow held: it may take the GIL
        let tick = {
            let mut st = shared.0.borrow_mut();
            st.hooks.tick(&snap)
        };
        tick?;
        if let Some(message) = shared.0.borrow_mut().fatal.take() {
            return Ok(Some(message));
        }
        if shared.0.borrow().scheduler.is_done() {
            return Ok(None);
        }
    }
}

/// Reclaim blocks past their deadline and kill their workers.
fn sweep_timeouts<H: RunHooks>(st: &mut State<H>) {
    let now = Instant::now();
    let expired: Vec<BlockKey> = st
        .outstanding
        .iter()
        .filter(|(_, o)| o.deadline.is_some_and(|d| d <= now))
        .map(|(k, _)| *k)
        .collect();
    for key in expired {
        let Some(out) = st.outstanding.remove(&key) else {
            continue;
        };
        let spatial_id = st.scheduler.graph().block(key).spatial_id;
        let task_id = st.scheduler.pipeline().spec(key.task).task_id.clone();
        tracing::warn!(
            "block {spatial_id} of task {task_id:?} timed out in worker {:?}; retrying it",
            out.worker
        );
        record_failure(
            st,
            key,
            out.worker,
            "timed out (the worker was killed)".into(),
        );
        if let Some(w) = out.worker.and_then(|id| st.workers.get_mut(&id)) {
            w.expected_exit = Some(ExitKind::Timeout);
            w.busy = false;
            w.kill();
        }
    }
}

/// Every block out that matches `lost` counts as a failed attempt (its
/// worker died or its connection closed): removed from `outstanding` here,
/// so it is accounted for exactly once.
fn reclaim_lost<H>(
    st: &mut State<H>,
    lost: impl Fn(&Outstanding) -> bool,
    worker: Option<u32>,
    reason: &str,
) {
    let keys: Vec<BlockKey> = st
        .outstanding
        .iter()
        .filter(|(_, o)| lost(o))
        .map(|(k, _)| *k)
        .collect();
    for key in keys {
        st.outstanding.remove(&key);
        record_failure(st, key, worker, reason.to_string());
    }
}

/// Count a failed attempt in the scheduler and the summary.
fn record_failure<H>(st: &mut State<H>, key: BlockKey, worker: Option<u32>, reason: String) {
    let spatial_id = st.scheduler.graph().block(key).spatial_id;
    if st.scheduler.is_abandoned(key.task) {
        return;
    }
    if let Err(e) = st.scheduler.release_block(key, BlockStatus::Failed) {
        tracing::warn!("could not record a failure: {e}");
        return;
    }
    st.failures.push(FailureNote {
        task: key.task,
        spatial_id,
        worker_id: worker,
        reason,
    });
}

/// A task that has work but can never get a worker is abandoned with a
/// message instead of waiting forever.
fn check_progress_possible<H>(st: &mut State<H>) {
    for t in 0..st.scheduler.pipeline().len() as TaskIndex {
        if st.scheduler.is_task_finished(t) {
            continue;
        }
        let rt = &st.config.tasks[t as usize];
        if rt.worker.is_none() {
            continue; // served by external clients; nothing to decide here
        }
        if st.restarts[t as usize] > rt.max_worker_restarts {
            let task_id = st.scheduler.pipeline().spec(t).task_id.clone();
            let reason = format!(
                "its workers stopped unexpectedly {} times (max_worker_restarts={}); see the worker logs",
                st.restarts[t as usize], rt.max_worker_restarts
            );
            tracing::error!("abandoning task {task_id:?}: {reason}");
            abandon(st, t, reason);
        }
    }
}

fn abandon<H>(st: &mut State<H>, task: TaskIndex, reason: String) {
    let before: Vec<bool> = (0..st.scheduler.pipeline().len() as TaskIndex)
        .map(|t| st.scheduler.is_abandoned(t))
        .collect();
    st.scheduler.abandon_task(task);
    st.outstanding
        .retain(|k, _| !st.scheduler.is_abandoned(k.task));
    st.abandoned.push((task, reason));
    for (t, was) in before.iter().enumerate() {
        if !was && t as TaskIndex != task && st.scheduler.is_abandoned(t as TaskIndex) {
            let up = st.scheduler.pipeline().spec(task).task_id.clone();
            st.abandoned.push((
                t as TaskIndex,
                format!("upstream task {up:?} was abandoned"),
            ));
        }
    }
    // workers of abandoned tasks leave at their next request
    for w in st.workers.values_mut() {
        if st.scheduler.is_abandoned(w.task) && w.alive {
            w.retire = true;
        }
    }
}

fn resources_in_use<H>(st: &State<H>) -> BTreeMap<String, u64> {
    let mut used = BTreeMap::new();
    for w in st.workers.values().filter(|w| w.alive) {
        for (k, v) in &st.config.tasks[w.task as usize].requires {
            *used.entry(k.clone()).or_insert(0) += v;
        }
    }
    used
}

fn fits(
    budget: &BTreeMap<String, u64>,
    used: &BTreeMap<String, u64>,
    req: &BTreeMap<String, u64>,
) -> bool {
    req.iter().all(|(k, v)| {
        let have = budget.get(k).copied().unwrap_or(u64::MAX);
        used.get(k).copied().unwrap_or(0) + v <= have
    })
}

/// Start workers where tasks have more ready blocks than idle workers.
fn rebalance<H: RunHooks + 'static>(shared: &Shared<H>, st: &mut State<H>) {
    if st.stopping {
        return;
    }
    for t in 0..st.scheduler.pipeline().len() as TaskIndex {
        if st.scheduler.is_task_finished(t) {
            continue;
        }
        let Some(cmd) = st.config.tasks[t as usize].worker.clone() else {
            continue;
        };
        let ready = st.scheduler.task_state(t).ready_count;
        loop {
            let alive = st
                .workers
                .values()
                .filter(|w| w.alive && w.task == t)
                .count() as u64;
            let idle = st
                .workers
                .values()
                .filter(|w| w.alive && w.task == t && !w.busy && !w.retire)
                .count() as u64;
            let max = st.config.tasks[t as usize].max_workers as u64;
            if ready <= idle || alive >= max {
                break;
            }
            let req = st.config.tasks[t as usize].requires.clone();
            let used = resources_in_use(st);
            if !fits(&st.config.resources, &used, &req) {
                retire_one_idle_worker(st, t);
                break;
            }
            if let Err(e) = spawn_worker(shared, st, t, &cmd) {
                let task_id = st.scheduler.pipeline().spec(t).task_id.clone();
                let reason = format!("could not start a worker: {e}");
                tracing::error!("abandoning task {task_id:?}: {reason}");
                abandon(st, t, reason);
                break;
            }
        }
    }
}

/// Ask a worker of another task that is waiting for work to leave, so its
/// resources can go to `needy`.
fn retire_one_idle_worker<H>(st: &mut State<H>, needy: TaskIndex) {
    if let Some(w) = st
        .workers
        .values_mut()
        .find(|w| w.alive && w.task != needy && w.waiting && !w.retire)
    {
        w.retire = true;
    }
}

/// The `DAISY_CONTEXT` a worker gets: where the server is, who it is, the
/// run token and the log directory (JSON, parsed by `daisy.Context`).
fn context_json(
    host: &str,
    port: u16,
    task_id: &str,
    worker_id: u32,
    token: &str,
    log_dir: &Option<PathBuf>,
) -> String {
    serde_json::json!({
        "hostname": host,
        "port": port,
        "task_id": task_id,
        "worker_id": worker_id,
        "token": token,
        "log_dir": log_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
    })
    .to_string()
}

/// Run a stop command (a `scancel`, say) without blocking the run for
/// long: started, and reaped in the background.
fn run_stop_command(argv: &[String]) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    match std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => tracing::warn!("could not run {program}: {e}"),
    }
}

fn spawn_worker<H: RunHooks + 'static>(
    shared: &Shared<H>,
    st: &mut State<H>,
    task: TaskIndex,
    cmd: &WorkerCommand,
) -> io::Result<()> {
    let addr = st
        .addr
        .ok_or_else(|| io::Error::other("server has no address"))?;
    let id = st.next_worker_id;
    st.next_worker_id += 1;
    let task_id = st.scheduler.pipeline().spec(task).task_id.clone();
    let host = st
        .config
        .advertise_host
        .clone()
        .unwrap_or_else(|| addr.ip().to_string());
    let mut command = tokio::process::Command::new(&cmd.program);
    command
        .args(cmd.args.iter().map(|a| expand(a, &task_id, id)))
        .envs(cmd.env.iter().cloned())
        .env(
            "DAISY_CONTEXT",
            context_json(
                &host,
                addr.port(),
                &task_id,
                id,
                &st.config.token,
                &st.config.log_dir,
            ),
        )
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(die_with_parent);
    }
    let mut files = None;
    if let (Some(base), LogMode::File | LogMode::Both) = (&st.config.log_dir, st.config.log_mode) {
        let dir = base.join(&task_id);
        std::fs::create_dir_all(&dir)?;
        // appended, not truncated: a remote job (sbatch -o/-e) may write
        // to the same files as its local handle
        let open = |name: String| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(name))
        };
        let out = open(format!("worker_{id}.out"))?;
        let err = open(format!("worker_{id}.err"))?;
        if st.config.log_mode == LogMode::File {
            command.stdout(Stdio::from(out)).stderr(Stdio::from(err));
        } else {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            files = Some((out, err));
        }
    }
    let mut child = command.spawn()?;
    if let Some((out, err)) = files {
        if let Some(pipe) = child.stdout.take() {
            tokio::task::spawn_local(tee(pipe, out, false));
        }
        if let Some(pipe) = child.stderr.take() {
            tokio::task::spawn_local(tee(pipe, err, true));
        }
    }
    let pid = child.id();
    st.workers.insert(
        id,
        WorkerSlot {
            task,
            pid,
            alive: true,
            expected_exit: None,
            waiting: false,
            retire: false,
            busy: false,
            dismissed: false,
            blocks_taken: 0,
            stop: cmd.stop.iter().map(|a| expand(a, &task_id, id)).collect(),
            hang_up: CancellationToken::new(),
        },
    );
    st.workers_started[task as usize] += 1;
    st.timelines
        .insert(id, WorkerTimeline::new(id, Instant::now()));
    let payload = cmd.stdin.clone();
    let stdin = child.stdin.take();
    let shared = shared.clone();
    tokio::task::spawn_local(async move {
        if let Some(mut stdin) = stdin {
            // a worker that dies before reading its function is seen below
            let _ = stdin.write_all(&payload).await;
            drop(stdin);
        }
        let status = child.wait().await;
        on_worker_exit(&shared, id, status.ok());
    });
    Ok(())
}

/// Copy a worker's output pipe into its log file and the driver's
/// stdout (or stderr).
async fn tee(mut pipe: impl tokio::io::AsyncRead + Unpin, mut file: std::fs::File, stderr: bool) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let _ = file.write_all(&buf[..n]);
                let _ = if stderr {
                    std::io::stderr().write_all(&buf[..n])
                } else {
                    std::io::stdout().write_all(&buf[..n])
                };
            }
        }
    }
}

fn on_worker_exit<H: RunHooks>(
    shared: &Shared<H>,
    id: u32,
    status: Option<std::process::ExitStatus>,
) {
    let mut st = shared.0.borrow_mut();
    let Some(w) = st.workers.get_mut(&id) else {
        return;
    };
    w.alive = false;
    w.busy = false;
    w.hang_up.cancel();
    let task = w.task;
    let dismissed = w.dismissed;
    let took_blocks = w.blocks_taken > 0;
    let now = Instant::now();
    let expected = w.expected_exit;
    let task_id = st.scheduler.pipeline().spec(task).task_id.clone();
    let status_text = status
        .map(|s| s.to_string())
        .unwrap_or_else(|| "unknown status".into());
    // A worker that leaves while its task still has work, without having
    // been told there is none and without having taken a single block (a
    // worker function that returns at once), counts like a crash: otherwise
    // it would be replaced forever. One that did some work and left (to cap
    // its memory, say) made progress and is simply replaced.
    let unexpected = match expected {
        Some(_) => None,
        None if !status.is_some_and(|s| s.success()) => Some(format!("died ({status_text})")),
        None if !dismissed && !took_blocks && !st.scheduler.is_task_finished(task) => {
            Some("exited before the task was finished without taking a block".to_string())
        }
        None => None,
    };
    // a block still out with this worker is lost
    reclaim_lost(
        &mut st,
        |o| o.worker == Some(id),
        Some(id),
        &format!("worker {id} died ({status_text})"),
    );
    let exit = match (expected, &unexpected) {
        (Some(kind), _) => kind,
        (None, Some(_)) => WorkerExit::Error,
        (None, None) => WorkerExit::Clean,
    };
    if let Some(tl) = st.timelines.get_mut(&id) {
        tl.on_exit(now, exit);
    }
    if let Some(why) = unexpected
        && !st.stopping
    {
        st.restarts[task as usize] += 1;
        tracing::warn!("worker {id} of task {task_id:?} {why}; replacing it");
    }
    drop(st);
    shared.1.notify_waiters();
}

/// In a worker, before exec: be killed when the driver dies, however it
/// dies (SIGKILL, SIGTERM without cleanup), so no worker outlives its run.
fn die_with_parent() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid have no memory-safety
    // preconditions; this runs in the child between fork and exec.
    unsafe {
        let parent = libc::getppid();
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::_exit(1); // the driver died before the request took hold
        }
    }
    Ok(())
}

fn kill_group(pid: u32) {
    // SAFETY: kill(2) with a negative pid signals the process group the
    // worker leads; it has no memory-safety preconditions.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

async fn teardown<H: RunHooks>(shared: &Shared<H>, interrupted: bool) {
    {
        let mut guard = shared.0.borrow_mut();
        let st = &mut *guard;
        st.stopping = true;
        let now = Instant::now();
        if !interrupted {
            // teardown of the workers still alive counts from here
            for id in st.workers.iter().filter(|(_, w)| w.alive).map(|(id, _)| id) {
                if let Some(tl) = st.timelines.get_mut(id) {
                    tl.on_dismiss(now);
                }
            }
        }
        for w in st.workers.values_mut().filter(|w| w.alive) {
            w.retire = true;
            if interrupted {
                w.expected_exit = Some(ExitKind::Interrupted);
                w.kill();
            }
        }
    }
    shared.1.notify_waiters();
    let deadline = Instant::now()
        + if interrupted {
            Duration::from_secs(2)
        } else {
            TEARDOWN_GRACE
        };
    loop {
        let alive = shared
            .0
            .borrow()
            .workers
            .values()
            .filter(|w| w.alive)
            .count();
        if alive == 0 {
            break;
        }
        if Instant::now() >= deadline {
            tracing::warn!("killing {alive} worker(s) that did not exit");
            for w in shared.0.borrow().workers.values().filter(|w| w.alive) {
                w.kill();
            }
            // give the monitors a moment to reap them
            tokio::time::sleep(Duration::from_millis(100)).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // cancel whatever remote work of the run may still be queued
    run_stop_command(&shared.0.borrow().config.stop_all);
}

type Conn = Framed<Box<dyn protocol::Stream>, tokio_util::codec::LengthDelimitedCodec>;

async fn send(conn: &mut Conn, msg: &ServerMessage) -> bool {
    write_reply(conn, msg, true).await
}

/// Queue a reply; write it out now if `flush`, else with the next one.
async fn write_reply(conn: &mut Conn, msg: &ServerMessage, flush: bool) -> bool {
    let Ok(bytes) = protocol::encode(msg) else {
        return false;
    };
    let bytes = tokio_util::bytes::Bytes::from(bytes);
    if flush {
        conn.send(bytes).await.is_ok()
    } else {
        SinkExt::<tokio_util::bytes::Bytes>::feed(conn, bytes)
            .await
            .is_ok()
    }
}

async fn recv(conn: &mut Conn) -> Option<ClientMessage> {
    match conn.next().await {
        Some(Ok(frame)) => protocol::decode(&frame).ok(),
        _ => None, // closed, oversized or malformed: drop the connection
    }
}

/// Where workers connect: the run's TCP port or, from this machine, its
/// Unix-domain socket.
enum Listener {
    Tcp(TcpListener),
    Local(tokio::net::UnixListener),
}

impl Listener {
    /// The next connection; TCP ones with Nagle off, since every message is
    /// small and waited for.
    async fn accept(&self) -> std::io::Result<Box<dyn protocol::Stream>> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Box::new(stream)
            }
            Listener::Local(l) => Box::new(l.accept().await?.0),
        })
    }
}

/// Hands every connection `listener` accepts to [`handle_connection`] under a
/// fresh connection id, until the returned task is aborted.
fn spawn_accept_loop<H: RunHooks + 'static>(
    shared: &Shared<H>,
    listener: Listener,
) -> tokio::task::JoinHandle<()> {
    let shared = shared.clone();
    tokio::task::spawn_local(async move {
        loop {
            match listener.accept().await {
                Ok(stream) => {
                    let id = {
                        let mut st = shared.0.borrow_mut();
                        st.next_conn += 1;
                        st.next_conn
                    };
                    tokio::task::spawn_local(handle_connection(shared.clone(), stream, id));
                }
                Err(e) => {
                    tracing::warn!("daisy server: accept failed: {e}");
                    tokio::time::sleep(TICK).await;
                }
            }
        }
    })
}

async fn handle_connection<H: RunHooks + 'static>(
    shared: Shared<H>,
    stream: Box<dyn protocol::Stream>,
    conn_id: u64,
) {
    let mut conn = Framed::new(stream, protocol::codec());
    let hello = tokio::time::timeout(HELLO_TIMEOUT, recv(&mut conn)).await;
    let Ok(Some(ClientMessage::Hello {
        token,
        task_id,
        worker_id,
    })) = hello
    else {
        return; // no hello: close without a word
    };
    let checked: Result<TaskIndex, String> = {
        let mut st = shared.0.borrow_mut();
        if token != st.config.token {
            tracing::warn!("refused a connection with a wrong token");
            return;
        }
        match st.scheduler.pipeline().index_of(&task_id) {
            Err(e) => Err(e.to_string()),
            Ok(task) => {
                match worker_id {
                    None => {
                        st.unmanaged_clients += 1;
                        st.unmanaged_per_task[task as usize] += 1;
                    }
                    Some(id) => match st.workers.get(&id) {
                        Some(w) if w.task == task && w.alive => {}
                        _ => {
                            tracing::warn!("refused a connection claiming unknown worker {id}");
                            return;
                        }
                    },
                }
                Ok(task)
            }
        }
    };
    let task = match checked {
        Ok(task) => task,
        Err(message) => {
            let _ = send(&mut conn, &ServerMessage::Error { message }).await;
            return;
        }
    };
    let (measure, hang_up) = {
        let st = shared.0.borrow();
        let hang_up = worker_id
            .and_then(|id| st.workers.get(&id))
            .map(|w| w.hang_up.clone());
        (st.config.tasks[task as usize].resource_tracking, hang_up)
    };
    if !send(&mut conn, &ServerMessage::Welcome { measure }).await {
        return;
    }
    loop {
        // a managed worker's connection ends with its process
        let msg = match &hang_up {
            Some(hang_up) => tokio::select! {
                msg = recv(&mut conn) => msg,
                () = hang_up.cancelled() => None,
            },
            None => recv(&mut conn).await,
        };
        let Some(msg) = msg else {
            break;
        };
        let reply = match msg {
            ClientMessage::AcquireBlock => acquire(&shared, task, worker_id, conn_id).await,
            ClientMessage::ReleaseBlock { block } => {
                release(&shared, task, worker_id, conn_id, block, None)
            }
            ClientMessage::BlockFailed { block, error } => {
                release(&shared, task, worker_id, conn_id, block, Some(error))
            }
            ClientMessage::Disconnect => break,
            ClientMessage::Hello { .. } => ServerMessage::Error {
                message: "hello sent twice".into(),
            },
        };
        // A reply waits for the next one when the client's next request is
        // already here (a worker sends its release and its next acquire
        // together): both replies then leave in one write. Anything in the
        // buffer is the start of a request the client has sent, so the
        // wait is never for the client.
        let next_request_buffered = !conn.read_buffer().is_empty();
        if !write_reply(&mut conn, &reply, !next_request_buffered).await {
            break;
        }
    }
    let _ = SinkExt::<tokio_util::bytes::Bytes>::flush(&mut conn).await;
    // anything still out with this connection is lost
    let mut st = shared.0.borrow_mut();
    reclaim_lost(
        &mut st,
        |o| o.conn == conn_id,
        worker_id,
        "the connection to its worker closed",
    );
    if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
        w.busy = false;
        w.waiting = false;
    }
    drop(st);
    shared.1.notify_waiters();
}

async fn acquire<H: RunHooks>(
    shared: &Shared<H>,
    task: TaskIndex,
    worker_id: Option<u32>,
    conn_id: u64,
) -> ServerMessage {
    if let Some(id) = worker_id
        && let Some(tl) = shared.0.borrow_mut().timelines.get_mut(&id)
    {
        tl.on_acquire(Instant::now());
    }
    loop {
        let notified = shared.1.notified();
        {
            let mut guard = shared.0.borrow_mut();
            let st = &mut *guard;
            let retire = worker_id
                .and_then(|id| st.workers.get(&id))
                .is_some_and(|w| w.retire);
            if st.stopping || retire || st.scheduler.is_task_finished(task) {
                if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
                    w.waiting = false;
                    w.dismissed = true;
                    w.expected_exit.get_or_insert(ExitKind::Clean);
                }
                if let Some(tl) = worker_id.and_then(|id| st.timelines.get_mut(&id)) {
                    tl.on_dismiss(Instant::now());
                }
                return ServerMessage::NoMoreBlocks;
            }
            let hooks = &mut st.hooks;
            let got = st.scheduler.acquire_block(task, |b| {
                Ok::<bool, std::convert::Infallible>(match hooks.is_done(b) {
                    Ok(done) => done,
                    Err(e) => {
                        tracing::warn!("check_function failed for block {}: {e}", b.spatial_id);
                        false
                    }
                })
            });
            if let Ok(Some(block)) = got {
                let timeout = st.config.tasks[task as usize].timeout;
                let now = Instant::now();
                st.outstanding.insert(
                    block.key,
                    Outstanding {
                        conn: conn_id,
                        worker: worker_id,
                        deadline: timeout.map(|t| now + t),
                        sent: now,
                        sent_wall: wall_clock(),
                    },
                );
                if let Some(tl) = worker_id.and_then(|id| st.timelines.get_mut(&id)) {
                    tl.on_send(now);
                }
                if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
                    w.waiting = false;
                    w.busy = true;
                    w.blocks_taken += 1;
                }
                return ServerMessage::SendBlock { block };
            }
            if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
                w.waiting = true;
            }
        }
        notified.await;
    }
}

fn release<H>(
    shared: &Shared<H>,
    task: TaskIndex,
    worker_id: Option<u32>,
    conn_id: u64,
    block: Block,
    error: Option<String>,
) -> ServerMessage {
    let mut st = shared.0.borrow_mut();
    let key = block.key;
    let owned = st
        .outstanding
        .get(&key)
        .is_some_and(|o| o.conn == conn_id && key.task == task);
    if !owned {
        return ServerMessage::Error {
            message: format!(
                "block {} is not out with this worker (reclaimed after a timeout, or never sent)",
                block.spatial_id
            ),
        };
    }
    let Some(out) = st.outstanding.remove(&key) else {
        return ServerMessage::Error {
            message: "block is not out".into(),
        };
    };
    let now = Instant::now();
    let round_trip = now.saturating_duration_since(out.sent).as_secs_f64();
    let ok = error.is_none() && block.status != BlockStatus::Failed;
    if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
        w.busy = false;
    }
    if let Some(tl) = worker_id.and_then(|id| st.timelines.get_mut(&id)) {
        tl.on_return(now, ok);
    }
    let measured = st.config.tasks[task as usize].resource_tracking;
    let mut block = block;
    if !measured {
        block.stats = None; // only tasks with resource tracking report figures
    }
    let unmeasured = ok && measured && block.stats.is_none();
    if unmeasured && st.fatal.is_none() {
        let task_id = st.scheduler.pipeline().spec(task).task_id.clone();
        st.fatal = Some(format!(
            "block {} of task {task_id:?} came back without measurements, but the task has \
             resource_tracking=True; a hand-written client must measure each block (wrap it in \
             daisy.profile_block(block), or use daisy.Client, which measures automatically)",
            block.spatial_id
        ));
    }
    let result = match error {
        // an unmeasured block is not done: a rerun must measure it
        None if unmeasured => {
            record_failure(
                &mut st,
                key,
                worker_id,
                "came back without measurements".into(),
            );
            Ok(())
        }
        None if block.status != BlockStatus::Failed => {
            st.aggregates[task as usize].record_success(Some(round_trip), block.stats.as_ref());
            st.recent_round_trips.push((task, round_trip));
            if let (Some(stats), Some(tracking)) =
                (block.stats.as_ref(), st.scheduler.tracking_mut(task))
            {
                tracking.record_stats(&block, stats, worker_id, out.sent_wall, wall_clock());
            }
            st.scheduler
                .release_block(key, BlockStatus::Success)
                .map(|_| ())
        }
        other => {
            let reason = other.unwrap_or_else(|| "the block function set status FAILED".into());
            record_failure(&mut st, key, worker_id, reason);
            Ok(())
        }
    };
    drop(st);
    shared.1.notify_waiters();
    match result {
        Ok(()) => ServerMessage::ReleaseAck,
        Err(e) => ServerMessage::Error {
            message: e.to_string(),
        },
    }
}
