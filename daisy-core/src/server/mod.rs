//! The distributed runtime's server: a listener in the calling process that
//! hands blocks to worker processes, takes them back, replaces dead workers
//! and ends the run cleanly on every path. [`run_server`] owns it.
//!
//! ## Threads and state
//! The server runs on a single-threaded tokio runtime inside a `LocalSet`
//! on the calling thread (the bindings release the GIL around it). All run
//! state lives in one `RefCell` ([`state::Shared`]) shared by the
//! connection tasks and the main loop: no locks. The only calls back into
//! the embedding program are the explicit [`RunHooks`] (a periodic tick,
//! the moment it listens), made by the main loop with no borrow of the
//! state held, and the tasks' check functions ([`BlockCheck`]), which are
//! user code and may be slow: they run on tokio's blocking pool and answer
//! the main loop by message ([`checks`]), so nothing the user wrote runs
//! on the server's thread between two blocks.
//!
//! ## Who does what
//! * [`connection`]: one task per worker connection; admits it, hands out
//!   and takes back blocks.
//! * [`checks`]: asks the tasks' check functions of ready blocks, off this
//!   thread, before they are handed out.
//! * [`policy`]: pure decisions (start a worker? retire one? abandon a
//!   task? what does this exit, this returned block, count as?).
//! * [`supervision`]: acts on processes (spawn, tee, kill, stop commands).
//! * this module: the main loop, which every [`TICK`] sweeps timeouts,
//!   abandons tasks whose workers died too often, starts workers where
//!   policy says, calls the tick hook, and hands every worker exit (an
//!   event from the process monitors) to policy and the run's state. What
//!   the run waits for does not wait for a tick: a worker's exit, the last
//!   block coming back and a task's first ready block wake the loop at
//!   once (`State::wake_main`).
//!
//! ## Staying awake while busy
//! After every message the server polls its sockets without sleeping for
//! [`BUSY_SPIN`], and a client waits for its reply the same way
//! (`client::REPLY_SPIN`): on a virtual machine whose idle CPUs halt, a
//! process put to sleep for the tens of microseconds a reply takes pays
//! an interrupt through the host to be woken. Both yield the CPU to any
//! other runnable process while they poll. Measured on the 2-vCPU
//! development machine: 10^4 no-op blocks on one worker in 0.29 s
//! instead of 0.85 s; 120k instead of 53k blocks/s for 100 simulated
//! clients.
//!
//! ## Ending
//! When every task is finished, waiting workers get `NoMoreBlocks` and exit
//! (so does a worker that waited its task's idle timeout for a block: it is
//! handed back, and staffing starts another when blocks are ready again);
//! stragglers are killed after [`TEARDOWN_GRACE`]. When the tick hook
//! stops the run (Ctrl-C in the driver), every worker's process group is
//! killed at once, and the run ends after at most [`INTERRUPT_GRACE`].

// What the bindings and the tests outside the crate reach: the settings,
// the one rule on `workers_per_job`, the live detail and the check's word.
// The rest (the state and its owners, the connections, the launchers, the
// supervision) is the server's own, `pub(crate)` where the serial run or
// the ledger read it.
mod admission;
pub mod checks;
pub mod config;
mod connection;
mod hooks;
mod job_slot;
pub mod jobs;
mod launch_request;
mod launcher;
mod launcher_slot;
pub mod live;
mod memory_gate;
mod memory_watch;
mod output;
pub(crate) mod policy;
mod state;
mod supervision;
mod task_slot;
mod worker_slot;

pub use self::admission::MAX_PENDING_HELLOS;
pub use self::checks::BlockCheck;
pub use self::config::{LogMode, MemorySettings, ServerConfig, TaskRuntime, WorkerCommand};
pub use self::connection::HELLO_TIMEOUT;
pub use self::hooks::RunHooks;
pub use self::live::{BarOutcome, BlockBar, LiveDetail, RecentFailure, TaskPace, WorkerNow};
pub use self::state::RunSnapshot;
pub use crate::run_report::{FailureNote, RunOutcome};

use self::checks::{CheckStage, Checked};
use self::connection::Listener;
use self::launch_request::ForkRequest;
use self::output::{OutputQueue, OutputWriter};
use self::policy::{Staffing, WorkerFlags};
use self::state::{Shared, State};
use self::worker_slot::{ExitEvent, WorkerSlot};
use crate::block::TaskIndex;
use crate::error::DaisyError;
use crate::protocol;
use crate::scheduler::Scheduler;
use crate::task_state::Abandonment;
use crate::worker_timeline::{StartKind, WorkerExit, WorkerTimeline};
use std::process::ExitStatus;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// How often the main loop sweeps timeouts, starts workers and calls the
/// tick hook: short enough that Ctrl-C and a hung block are acted on well
/// within a second, long enough to cost nothing.
pub const TICK: Duration = Duration::from_millis(50);

/// How long finished workers get to exit on their own before they are
/// killed: a Python worker's interpreter shutdown with heavy libraries
/// loaded takes up to a second or two; ten leaves room on a loaded node.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long an interrupted run waits for its killed workers to be reaped:
/// SIGKILL is immediate, so this only covers the kernel and the monitors;
/// the driver must exit promptly after Ctrl-C.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How long the run's end waits for the jobs hosting several workers
/// (`server::jobs`) to end once their workers have: `sbatch --wait`
/// notices a job's end within seconds; one that takes longer is cancelled,
/// as is any job of the run still queued.
pub const JOB_GRACE: Duration = Duration::from_secs(10);

/// How long a task waits before it tries again to start a worker after a
/// start failed for want of descriptors, processes or memory: long enough
/// for a burst of exits to free them, short enough not to stall the run.
pub const START_RETRY: Duration = Duration::from_secs(1);

/// How long a task with no live worker keeps trying to start one against
/// such failures before it is abandoned: the moment has clearly not
/// passed, and waiting longer would be a silent hang.
pub const START_GIVE_UP: Duration = Duration::from_secs(60);

/// After killing the stragglers, how long to wait for their exits to be
/// reaped, so their timelines record the exit before the report is made.
const REAP_PAUSE: Duration = Duration::from_millis(100);

/// How long the end of a run waits for open connections to close after
/// their last answer: a client with a request in flight hears "no more
/// blocks" within milliseconds; only a connected client that says nothing
/// (a stray `daisy.Client` left open) makes a run wait this long.
pub const CLIENT_DRAIN: Duration = Duration::from_millis(500);

/// Run a scheduler's pipeline with workers until every task is finished
/// (or a hook stops it, or a rule is broken: the outcome's `stopped` says
/// which). Blocks the calling thread. Tracking stores and skip masks set on
/// the scheduler are honoured and flushed at the end, and every tracked
/// task's report is appended to its `runs.jsonl`. An error only when the
/// server could not start (listen), or `config` does not have one
/// [`TaskRuntime`] per task of the pipeline.
pub fn run_server<H: RunHooks + 'static>(
    scheduler: Scheduler,
    config: ServerConfig,
    hooks: H,
) -> Result<RunOutcome, DaisyError> {
    // per-task settings are read by task index everywhere: one per task
    let (tasks, settings) = (scheduler.pipeline().len(), config.tasks.len());
    if settings != tasks {
        return Err(DaisyError::invalid(
            "config.tasks",
            format!(
                "has settings for {settings} tasks but the pipeline has {tasks}; give one \
                 TaskRuntime per task, in the pipeline's order"
            ),
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DaisyError::Io(format!("daisy server: {e}")))?;
    let writer = OutputWriter::start()
        .map_err(|e| DaisyError::Io(format!("daisy server: an output thread: {e}")))?;
    let local = tokio::task::LocalSet::new();
    let out = local.block_on(&rt, serve(scheduler, config, hooks, writer.queue()));
    // the tees of workers still running go with the set that runs them
    drop(local);
    // a check still running (the run was stopped while it looked at an
    // output) is waited for a moment, then left to end on its own: its
    // answer goes nowhere
    rt.shutdown_timeout(CHECK_GRACE);
    // every worker's output is in its log file before the run returns
    writer.finish();
    out
}

/// Set the worker count of each task with `max_workers="auto"` (see
/// [`crate::worker_count`]): local tasks from the cores and `budget`, a
/// batch job's from its `workers_per_job`. The choices, with their
/// tasks' indices.
fn choose_worker_counts(
    config: &mut ServerConfig,
    budget: Option<&crate::memory_budget::MemoryBudget>,
) -> Vec<(TaskIndex, crate::worker_count::AutoWorkers)> {
    use crate::worker_count::{auto_workers, auto_workers_per_job, cores};
    let mut chosen = Vec::new();
    for (t, task) in config.tasks.iter_mut().enumerate() {
        if !task.auto_workers {
            continue;
        }
        let pick = match (&task.job, budget) {
            (Some(job), _) => auto_workers_per_job(job.workers_per_job),
            (None, Some(budget)) => auto_workers(cores(), budget),
            // a spawner whose workers run elsewhere without a job: its own
            // machines' cores are not ours to count
            (None, None) => auto_workers_per_job(1),
        };
        task.max_workers = pick.count;
        chosen.push((t as TaskIndex, pick));
    }
    chosen
}

/// How long the end of a run waits for a check function still running on
/// the blocking pool (only a stopped run leaves one: a run that finished
/// had every block's check answered): as long as an interrupted run waits
/// for its workers.
pub const CHECK_GRACE: Duration = INTERRUPT_GRACE;

async fn serve<H: RunHooks + 'static>(
    scheduler: Scheduler,
    mut config: ServerConfig,
    mut hooks: H,
    output: OutputQueue,
) -> Result<RunOutcome, DaisyError> {
    let io = |e: std::io::Error| DaisyError::Io(format!("daisy server: {e}"));
    // the memory budget first: a budget that cannot be right refuses the
    // run before anything starts
    let wants_budget = config
        .tasks
        .iter()
        .any(|t| t.is_local() && (config.memory.guard || t.auto_workers));
    let budget = if wants_budget {
        let budget = crate::memory_budget::MemoryBudget::find(config.memory.budget)?;
        tracing::info!("memory budget: {}", budget.describe());
        Some(budget)
    } else {
        None
    };
    let chosen = choose_worker_counts(&mut config, budget.as_ref());
    let gate = budget
        .filter(|_| config.memory.guard)
        .map(|budget| memory_gate::MemoryGate::new(budget, config.tasks.len(), true));
    let listener = TcpListener::bind((config.host.as_str(), config.port))
        .await
        .map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let (exit_tx, exits) = mpsc::unbounded_channel::<ExitEvent>();
    let (answers_tx, answers) = mpsc::unbounded_channel::<Vec<Checked>>();
    let checks = CheckStage::new(hooks.block_check(), scheduler.pipeline().len(), answers_tx);
    let mut state = State::new(scheduler, config, checks, output, addr);
    if let Some(gate) = gate {
        state.use_memory_gate(gate);
    }
    for (t, chosen) in &chosen {
        tracing::info!("{}: {}", state.task_id(*t), chosen.reason);
        state.note(*t, &chosen.reason);
    }
    let shared = Shared::new(state);
    let mut inbox = Inbox { exits, answers };
    // workers on this machine connect through the run's Unix-domain
    // socket: bound before anyone is told where the run listens, so a
    // client started then (an init callback's) finds it, not only the TCP
    // port
    let unix =
        protocol::bind_local_socket(&protocol::local_socket_name(&shared.state().config.token));
    let listening = hooks.on_listening(addr);
    if let Err(e) = listening {
        let mut out = shared.state().outcome(true);
        out.stopped = Some(e);
        return Ok(out);
    }
    tracing::debug!("daisy server listening on {addr}");

    let accept = connection::spawn_accept_loop(
        &shared,
        Listener::Tcp(listener, shared.state().config.liveness_timeout),
    );
    let local = unix.map(|unix| connection::spawn_accept_loop(&shared, Listener::Local(unix)));

    let spin = tokio::task::spawn_local(spin_while_busy(shared.state().activity()));
    launcher::want_all(&mut shared.state_mut());
    let result = main_loop(&shared, &mut hooks, &exit_tx, &mut inbox).await;
    spin.abort();
    accept.abort();
    if let Some(local) = local {
        local.abort();
    }
    if let Err(e) = shared.state().scheduler.flush_tracking() {
        tracing::warn!("could not flush a tracking store: {e}");
    }
    teardown(&shared, &mut inbox.exits, result.is_err()).await;
    drain_clients(&shared).await;
    let mut st = shared.state_mut();
    // a broken rule ends the run as it stands; a hook stopping it
    // interrupts it
    let interrupted = matches!(&result, Err(e) if !matches!(e, DaisyError::RunBroken(_)));
    let mut out = st.outcome(interrupted);
    out.stopped = result.err();
    out.append_history(&st.scheduler);
    st.scheduler.close_tracking();
    Ok(out)
}

/// The shortest gap between two passes of the main loop, beyond its tick,
/// taken for a stall of the server itself (its process stopped: a
/// suspended laptop or VM, a frozen cgroup, Ctrl-Z; or starved of CPU):
/// far above any scheduling delay of a running process, far below any
/// sensible block timeout. Block deadlines move on by the whole gap (see
/// `State::server_stalled`).
pub const STALL: Duration = Duration::from_secs(1);

/// How long the server stays awake after a message before it sleeps in
/// the kernel: a busy run's next message comes within this, and a server
/// that slept pays to be woken (on a virtual machine whose idle CPUs halt,
/// an interrupt through the host, tens of microseconds per message).
/// Awake, it polls its sockets without blocking, yielding the CPU to
/// any other runnable process between polls; it costs at most this much
/// CPU per message, nothing against real blocks.
pub const BUSY_SPIN: Duration = Duration::from_micros(200);

/// Keep the server's thread polling (see [`BUSY_SPIN`]) while messages
/// keep coming; sleep when none came for that long.
async fn spin_while_busy(activity: Rc<Notify>) {
    loop {
        activity.notified().await;
        let until = Instant::now() + BUSY_SPIN;
        while Instant::now() < until {
            // the CPU goes to any other runnable process first
            std::thread::yield_now();
            // defers this task until the sockets were polled (without
            // blocking), so every other task's readiness is seen first
            tokio::task::yield_now().await;
        }
    }
}

/// What comes to the main loop from elsewhere: worker exits (from the
/// process monitors) and check answers (from the blocking pool).
struct Inbox {
    exits: mpsc::UnboundedReceiver<ExitEvent>,
    answers: mpsc::UnboundedReceiver<Vec<Checked>>,
}

/// `Ok` when every task finished; `Err` when a hook stopped the run or a
/// rule was broken.
async fn main_loop<H: RunHooks>(
    shared: &Shared,
    hooks: &mut H,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
    inbox: &mut Inbox,
) -> Result<(), DaisyError> {
    let mut interval = tokio::time::interval(shared.state().config.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wake = shared.state().main_wake();
    let tick = shared.state().config.tick;
    let mut last_pass = Instant::now();
    loop {
        // a tick also calls the hook (progress, Ctrl-C); an exit or a wake
        // (see `State::wake_main`) is acted on at once, without it
        let ticked = tokio::select! {
            _ = interval.tick() => true,
            Some((id, status)) = inbox.exits.recv() => {
                on_worker_exit(&mut shared.state_mut(), id, status);
                false
            }
            Some(checked) = inbox.answers.recv() => {
                let mut guard = shared.state_mut();
                let st = &mut *guard;
                // every answer that came meanwhile, in one pass of the loop
                let more = std::iter::from_fn(|| inbox.answers.try_recv().ok());
                for checked in std::iter::once(checked).chain(more).flatten() {
                    if let Err(e) = st.check_answered(checked) {
                        st.stop_with(e); // an interruption in a check
                    }
                }
                false
            }
            () = wake.notified() => false,
        };

        let snap = {
            let mut st = shared.state_mut();
            // time the server did not run (the process was stopped or
            // starved) is nobody's block's: deadlines move on by it before
            // any is enforced
            let now = Instant::now();
            let unwatched = now
                .saturating_duration_since(last_pass)
                .saturating_sub(tick);
            if unwatched >= STALL {
                st.server_stalled(unwatched);
            }
            sweep_timeouts(&mut st);
            if ticked {
                st.sample_block_memory(now);
            }
            jobs::sweep(&mut st);
            abandon_crashing_tasks(&mut st);
            staff(&mut st, exit_tx);
            // after staffing, which put the replacements it wanted into
            // the jobs of the workers they replace
            jobs::close_empty(&mut st);
            start_cold_queue(&mut st, exit_tx);
            // a mark the disk had no room for: stop before more are lost
            if let Some(e) = st.scheduler.tracking_failure() {
                st.stop_with(e);
            }
            // the hook also sees the run's last state (its final counts)
            (ticked || st.scheduler.is_done()).then(|| st.snapshot())
        };
        launcher::start_wanted(shared, exit_tx);
        shared.notify_changed();
        if let Some(snap) = snap {
            // the hook runs without any borrow held: it may take the GIL
            hooks.tick(&snap)?;
        }
        if let Some(stop) = shared.state_mut().take_stop() {
            return Err(stop);
        }
        if shared.state().scheduler.is_done() {
            return Ok(());
        }
        last_pass = Instant::now();
    }
}

/// Reclaim blocks past their deadline and kill their workers.
fn sweep_timeouts(st: &mut State) {
    for key in st.expired(Instant::now()) {
        // a failed block of its worker, as a failure the worker reports is
        let returned_by = st.holder(key).map(|id| (id, false));
        let taken = st.take_back(key, live::BarOutcome::TimedOut, returned_by, Instant::now());
        let Some(out) = taken else {
            continue;
        };
        let spatial_id = st.scheduler.graph().block(key).spatial_id;
        let retried = st.record_timed_out(
            key,
            out.worker,
            format!(
                "timed out: block {spatial_id} was still running after the task's timeout of \
                 {:?}; {}",
                st.config.tasks[key.task].timeout.unwrap_or_default(),
                if out.worker.is_some() {
                    "its worker was killed"
                } else {
                    "its worker, which daisy did not start and cannot kill, ends a late \
                     attempt itself (a thread of the driver cannot: its release is refused)"
                }
            ),
        );
        tracing::warn!(
            "block {spatial_id} of task {:?} timed out in {}; {}",
            st.task_id(key.task),
            out.worker
                .map_or_else(|| "a worker".to_string(), |w| format!("worker {w}")),
            if retried {
                "retrying it"
            } else {
                "it has no retries left and failed"
            }
        );
        if let Some(w) = out.worker.and_then(|id| st.workers.get_mut(&id)) {
            w.expect_exit(WorkerExit::Timeout);
            w.kill();
        }
    }
}

/// A task whose workers keep dying is abandoned with a message instead of
/// being restarted forever.
fn abandon_crashing_tasks(st: &mut State) {
    for t in 0..st.scheduler.pipeline().len() as TaskIndex {
        let rt = &st.config.tasks[t];
        if st.scheduler.is_task_finished(t) || rt.worker.is_none() {
            continue; // done, or served by external clients
        }
        if let Some(reason) = st.tasks[t].restart_limit(rt.max_worker_restarts) {
            st.abandon(t, reason);
        }
    }
}

/// Start workers where policy says a task needs them; where the budget is
/// spent, ask an idle worker of another task to leave.
fn staff(st: &mut State, exit_tx: &mpsc::UnboundedSender<ExitEvent>) {
    if st.is_stopping() {
        return;
    }
    let now = Instant::now();
    for t in 0..st.scheduler.pipeline().len() as TaskIndex {
        if st.scheduler.is_task_finished(t) || st.config.tasks[t].worker.is_none() {
            continue;
        }
        if !st.tasks[t].may_start(now) {
            continue; // a start failed for want of resources: wait a moment
        }
        if needs_work(st, t) {
            start_workers(st, t, now, exit_tx);
        }
    }
}

/// Whether task `t` has blocks a worker is needed for. No worker for
/// nothing: before a task's first worker starts, the blocks its markers or
/// mask say are done are skipped, and its check function (if any) is asked
/// until a block needs work (the answers come back to the main loop, which
/// staffs again).
fn needs_work(st: &mut State, t: TaskIndex) -> bool {
    let alive = st.flags().any(|(_, w)| w.alive && w.task == t);
    if alive || st.scheduler.task_state(t).ready_count == 0 {
        return true; // staffing decides on what is ready
    }
    st.scheduler.skip_marked(t);
    let checked = st.scheduler.checks_pending(t).1 > 0;
    if st.has_check(t) && !checked {
        st.ask_next_check(t);
        return false;
    }
    !st.scheduler.is_task_finished(t) && st.scheduler.task_state(t).ready_count > 0
}

/// Start the workers task `t` needs now, as many as policy says, or ask
/// an idle worker of another task to leave where the budget is spent. A
/// start that failed for want of a passing resource is tried again after
/// [`START_RETRY`], and abandons the task after [`START_GIVE_UP`] without
/// a live worker; any other failure abandons it at once.
fn start_workers(
    st: &mut State,
    t: TaskIndex,
    now: Instant,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
) {
    let ready = st.scheduler.task_state(t).ready_count;
    loop {
        let alive = st.flags().filter(|(_, w)| w.alive && w.task == t).count() as u32;
        let max_workers = st.config.tasks[t].max_workers;
        let cap = st.tasks[t].worker_cap(max_workers, alive);
        let rt = &st.config.tasks[t];
        let fits = policy::fits(&st.config.resources, &st.resources_in_use(), &rt.requires);
        let needed = policy::staffing(t, ready, cap, st.workers.values().map(|w| w.flags()), fits);
        match needed {
            Staffing::Enough => return,
            Staffing::NoRoom => {
                if let Some(id) = policy::retiree(st.flags(), t)
                    && let Some(w) = st.workers.get_mut(&id)
                {
                    w.retire();
                }
                return;
            }
            Staffing::Start => match start_worker(st, t, exit_tx) {
                Ok(()) => st.tasks[t].started(),
                Err(e) if policy::spawn_error_is_transient(&e) => {
                    let since = st.tasks[t].start_failed(now, now + START_RETRY);
                    let alive = st.flags().any(|(_, w)| w.alive && w.task == t);
                    if !alive && now.duration_since(since) > START_GIVE_UP {
                        let why =
                            format!("could not start a single worker for {START_GIVE_UP:?}: {e}");
                        st.abandon(t, Abandonment::start_failed(why));
                    } else if since == now {
                        tracing::warn!(
                            "could not start a worker of task {:?} for now ({e}); trying again \
                             every {START_RETRY:?}",
                            st.task_id(t)
                        );
                    }
                    return;
                }
                Err(e) => {
                    st.abandon(
                        t,
                        Abandonment::start_failed(format!("could not start a worker: {e}")),
                    );
                    return;
                }
            },
        }
    }
}

/// Start one worker of `task`: asked of the task's launcher (a warm
/// start) where it has one, else a fresh process (a cold start); its exit
/// is reported on `exit_tx` either way. Every task's launcher was asked
/// for when the run began ([`launcher::want_all`]).
fn start_worker(
    st: &mut State,
    task: TaskIndex,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
) -> std::io::Result<()> {
    if st.config.tasks[task].worker.is_none() {
        return Ok(());
    }
    let id = st.next_worker_id();
    let in_job = st.config.tasks[task].job.is_some();
    let warm = !in_job && st.warm_wanted(task);
    st.workers.insert(id, WorkerSlot::starting(task));
    let kind = if warm {
        StartKind::Warm
    } else {
        StartKind::Cold
    };
    st.timeline_begins(id, kind);
    let started = if in_job {
        let task_id = st.task_id(task);
        let context = launch(st, &task_id, id).context;
        jobs::start_in_job(st, task, id, context, exit_tx)
    } else if warm {
        let task_id = st.task_id(task);
        let launch = launch(st, &task_id, id);
        let context = launch.context.clone();
        supervision::worker_outputs(&launch).map(|outputs| {
            launcher::request(
                st,
                task,
                ForkRequest {
                    worker_id: id,
                    context,
                    outputs: Some(outputs),
                },
            )
        })
    } else {
        start_cold(st, id, exit_tx)
    };
    if let Err(e) = started {
        st.workers.remove(&id);
        st.timeline_forgotten(id);
        return Err(e);
    }
    st.worker_id_taken();
    st.scheduler.count_worker_start(task);
    Ok(())
}

/// Start cold the workers whose warm start failed (see `launcher`).
fn start_cold_queue(st: &mut State, exit_tx: &mpsc::UnboundedSender<ExitEvent>) {
    for id in st.take_start_cold() {
        if let Err(e) = start_cold(st, id, exit_tx) {
            let task = st.workers.get(&id).map(|w| w.flags().task).unwrap_or(0);
            tracing::warn!(
                "could not start worker {id} of task {:?} cold ({e})",
                st.task_id(task)
            );
            let _ = exit_tx.send((id, None));
        }
    }
}

/// What worker `id` of task `task_id` is told and where its
/// output goes, however it is started.
fn launch<'a>(st: &'a State, task_id: &'a str, id: u32) -> supervision::Launch<'a> {
    let host = st
        .config
        .advertise_host
        .clone()
        .unwrap_or_else(|| st.addr().ip().to_string());
    supervision::Launch {
        task_id,
        worker_id: id,
        context: supervision::WorkerContext {
            host: &host,
            port: st.addr().port(),
            task_id,
            worker_id: id,
            token: &st.config.token,
            log_dir: &st.config.log_dir,
            liveness_timeout: st.config.liveness_timeout,
            payload_sha256: st
                .scheduler
                .pipeline()
                .index_of(task_id)
                .ok()
                .and_then(|t| st.config.tasks.get(t as usize))
                .and_then(|t| t.payload_sha256.as_deref()),
        }
        .to_json(),
        log_dir: &st.config.log_dir,
        log_mode: st.config.log_mode,
        output: st.output(),
    }
}

/// Start the process of worker `id` (whose slot exists) cold, from its
/// task's worker command, and watch for its exit: a cold start, or the
/// fallback of a warm one the launcher could not fork.
fn start_cold(
    st: &mut State,
    id: u32,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
) -> std::io::Result<()> {
    let Some(task) = st.workers.get(&id).map(|w| w.flags().task) else {
        return Ok(());
    };
    let Some(cmd) = st.config.tasks[task].worker.as_ref() else {
        return Ok(());
    };
    let task_id = st.task_id(task);
    let mut spawned = supervision::spawn(cmd, &launch(st, &task_id, id))?;
    let polls = cmd.polls;
    st.worker_restarted(id, StartKind::Cold);
    if let Some(w) = st.workers.get_mut(&id) {
        w.started_cold(spawned.pid, std::mem::take(&mut spawned.stop), polls);
        if w.expected_exit().is_some() {
            w.kill(); // stopped while it waited for its launcher
        }
    }
    let exits = exit_tx.clone();
    tokio::task::spawn_local(async move {
        let status = spawned.child.wait().await;
        let _ = exits.send((id, status.ok()));
    });
    Ok(())
}

/// A worker's process ended: policy says what the exit means; a block still
/// out with it is lost, its connection is closed, and an unexpected exit
/// counts as a restart of its task.
fn on_worker_exit(st: &mut State, id: u32, status: Option<ExitStatus>) {
    let Some(w) = st.workers.get_mut(&id) else {
        return;
    };
    if !w.exited() {
        return; // its end was reported already (a job's, on two paths)
    }
    jobs::on_worker_exit(&mut st.jobs, w, id);
    w.hang_up_now();
    if st.stopped_for_memory(id)
        && let Some(w) = st.workers.get_mut(&id)
    {
        w.expect_exit(WorkerExit::Memory);
    }
    let status_text = exit_text(st, id, status);
    // first, so that a block it still held marks it (`lost_block`) whether
    // its connection's end or its exit is seen first
    let why = if status.is_some_and(|s| s.success()) {
        format!("worker {id} exited ({status_text}) with the block in hand")
    } else {
        format!("worker {id} died ({status_text})")
    };
    st.reclaim(|o| o.worker == Some(id), Some(id), &why);
    if status.is_some() {
        // its connection's end may have been seen first
        st.explain_lost(id, &why);
    }
    let Some(w) = st.workers.get(&id) else {
        return;
    };
    // what its blocks left running in the background ends with it
    // (`crate::process_group`)
    if status.is_some() {
        supervision::kill(w.pid(), &[]);
    }
    let (flags, expected) = (*w.flags(), w.expected_exit());
    let verdict = policy::classify_exit(
        expected,
        status.map(|s| s.success()),
        &status_text,
        &flags,
        st.scheduler.is_task_finished(flags.task),
    );
    st.worker_ended(id, verdict.exit);
    if verdict.exit == WorkerExit::Left {
        st.tasks[flags.task].worker_left();
    }
    if let Some(why) = verdict.unexpected
        && !st.is_stopping()
    {
        use std::os::unix::process::ExitStatusExt;
        let killed =
            expected.is_none() && status.is_some_and(|s| s.signal() == Some(libc::SIGKILL));
        count_unexpected_exit(st, id, &flags, verdict.took_nothing, killed, &why);
    }
}

/// How worker `id` ended, in words: its exit status, and for a SIGKILL
/// daisy did not send, what most likely sent it (the OOM killer).
fn exit_text(st: &mut State, id: u32, status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        return "unknown status".into();
    };
    let mut text = status.to_string();
    let unasked = st
        .workers
        .get(&id)
        .is_some_and(|w| w.expected_exit().is_none());
    if unasked && status.signal() == Some(libc::SIGKILL) {
        let facts = st.kill_facts(id);
        text.push_str(&supervision::sigkill_hint(facts, st.last_peak_rss(id)));
    }
    text
}

/// Worker `id` (its `flags` as it ended) stopped unexpectedly, `why`:
/// counted as daisy 2.0.0 counts, every such exit a worker failure (a
/// block it held counted already, as lost) and a restart only where a
/// replacement starts, which policy decides.
fn count_unexpected_exit(
    st: &mut State,
    id: u32,
    flags: &WorkerFlags,
    took_nothing: bool,
    killed: bool,
    why: &str,
) {
    let task = flags.task;
    let max = st.config.tasks[task].max_worker_restarts;
    let replaced = st.tasks[task].worker_stopped(took_nothing, killed, max);
    st.scheduler
        .count_worker_stop(task, flags.lost_block, replaced);
    tracing::warn!(
        "worker {id} of task {:?} {why}; {}",
        st.task_id(task),
        if replaced {
            "replacing it"
        } else {
            "not replacing it (max_worker_restarts)"
        }
    );
}

/// Let the connections still open hear "no more blocks" for the requests
/// they have in flight (a worker sends its next request with its last
/// release) and close on their side, for at most [`CLIENT_DRAIN`]: without
/// this wait, stopping the server dropped them unanswered and such clients
/// saw a closed connection (839 of 1000 simulated clients at N = 1000).
async fn drain_clients(shared: &Shared) {
    shared.notify_changed();
    let deadline = tokio::time::Instant::now() + CLIENT_DRAIN;
    loop {
        // every connection's end notifies (`ReclaimOnDrop`): register
        // before looking, so an end between the two is not missed
        let ended = shared.changes();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if shared.state().admission().open_connections() == 0
            || tokio::time::timeout_at(deadline, ended).await.is_err()
        {
            return;
        }
    }
}

/// End the run's workers: dismissed ones get [`TEARDOWN_GRACE`] to exit on
/// their own; on an interrupted run every one is killed at once. Whatever
/// is still alive at the deadline is killed.
async fn teardown(
    shared: &Shared,
    exits: &mut mpsc::UnboundedReceiver<ExitEvent>,
    interrupted: bool,
) {
    dismiss_workers(&mut shared.state_mut(), interrupted);
    shared.notify_changed();
    wait_for_workers(shared, exits, interrupted).await;
    wait_for_launchers(shared).await;
    wait_for_jobs(shared).await;
    if !interrupted {
        // the jobs whose workers left end by themselves: wait for the batch
        // system to list none of them rather than cancel them mid-exit
        let wait_all = shared.state().config.wait_all.clone();
        supervision::run_wait_command(&wait_all, TEARDOWN_GRACE).await;
    }
    // cancel whatever remote work of the run may still be queued
    supervision::run_stop_command(&shared.state().config.stop_all);
}

/// The run's end, told to its workers: launchers close, workers still
/// starting are stopped (not needed, not a crash), connected ones are
/// dismissed (their teardown counts from now) or, on an interrupted run,
/// killed; no job takes another worker.
fn dismiss_workers(st: &mut State, interrupted: bool) {
    st.begin_stopping(interrupted);
    // no more warm starts: each launcher leaves once its workers have
    for t in st.tasks.iter_mut() {
        t.launcher_mut().close();
    }
    // workers whose warm start failed as the run ended never ran
    for id in st.take_start_cold() {
        if let Some(w) = st.workers.get_mut(&id) {
            w.expect_exit(WorkerExit::Clean);
        }
        on_worker_exit(st, id, None);
    }
    let now = Instant::now();
    let alive: Vec<u32> = st
        .flags()
        .filter(|(_, f)| f.alive)
        .map(|(id, _)| id)
        .collect();
    for id in alive {
        let connected = st.timeline(id).is_some_and(WorkerTimeline::connected);
        if connected && !interrupted {
            // teardown of the workers still alive counts from here
            st.worker_dismissed_at(id, now);
        }
        let Some(w) = st.workers.get_mut(&id) else {
            continue;
        };
        if interrupted {
            w.expect_exit(WorkerExit::Interrupted);
            w.kill();
        } else if !connected {
            // still starting when the work ran out: not needed, so
            // stopped now (its listener is gone), and not a crash
            w.expect_exit(WorkerExit::Clean);
            w.kill();
        }
        w.retire();
    }
    // no job takes another worker; a job still queued is cancelled
    jobs::close_all(st);
}

/// Wait for every worker to exit, for [`TEARDOWN_GRACE`] (an interrupted
/// run: [`INTERRUPT_GRACE`]); then kill those still alive and give their
/// monitors [`REAP_PAUSE`] to reap them.
async fn wait_for_workers(
    shared: &Shared,
    exits: &mut mpsc::UnboundedReceiver<ExitEvent>,
    interrupted: bool,
) {
    let wake = shared.state().main_wake();
    let grace = if interrupted {
        INTERRUPT_GRACE
    } else {
        TEARDOWN_GRACE
    };
    let deadline = tokio::time::Instant::now() + grace;
    let alive = |shared: &Shared| {
        shared
            .state()
            .workers
            .values()
            .filter(|w| w.flags().alive)
            .count()
    };
    while alive(shared) > 0 {
        tokio::select! {
            Some((id, status)) = exits.recv() => {
                on_worker_exit(&mut shared.state_mut(), id, status);
            }
            // a job's handle exited: its workers that never ran end
            () = wake.notified() => jobs::sweep(&mut shared.state_mut()),
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!("killing {} worker(s) that did not exit", alive(shared));
                for w in shared.state().workers.values().filter(|w| w.flags().alive) {
                    w.kill();
                }
                // give the monitors a moment to reap them
                let reaped = tokio::time::sleep(REAP_PAUSE);
                tokio::pin!(reaped);
                loop {
                    tokio::select! {
                        Some((id, status)) = exits.recv() => {
                            on_worker_exit(&mut shared.state_mut(), id, status);
                        }
                        () = &mut reaped => break,
                    }
                }
                break;
            }
        }
    }
}

/// Wait until every job's handle has exited (each job's launcher leaves
/// once its connection closes and its workers are gone, and the job with
/// it), at most [`JOB_GRACE`]; then the jobs still running are cancelled.
async fn wait_for_jobs(shared: &Shared) {
    let wake = shared.state().main_wake();
    let deadline = tokio::time::Instant::now() + JOB_GRACE;
    while jobs::any_running(&shared.state()) {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep_until(deadline) => {
                jobs::cancel_running(&shared.state());
                return;
            }
        }
    }
}

/// Wait until every launcher has left and been reaped (each leaves once
/// its socket closes and its workers are gone; its session kills it after
/// [`launcher::LAUNCHER_GRACE`]), so a run leaves no process behind.
async fn wait_for_launchers(shared: &Shared) {
    let running = |shared: &Shared| {
        shared
            .state()
            .tasks
            .iter()
            .any(|t| t.launcher().is_running())
    };
    let deadline = tokio::time::Instant::now() + launcher::LAUNCHER_GRACE * 2;
    loop {
        // register before looking, so a launcher reaped in between is seen
        let notified = shared.changes();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !running(shared) {
            return;
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!("a launcher did not leave; the run ends without it");
                return;
            }
        }
    }
}
