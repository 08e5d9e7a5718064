//! Jobs that host several workers each (`SlurmSpawner(workers_per_job=N)`):
//! one batch job, one node launcher, N workers forked from it.
//!
//! On a cluster a worker of its own costs a queue entry and a cold
//! interpreter importing what the function needs (a second, or tens of
//! seconds on a busy shared file system). A task whose runtime has a
//! [`JobCommand`] therefore starts its workers inside jobs:
//!
//! * A worker to start goes into a job of its task that has a free slot
//!   and is still open ([`start_in_job`]); where there is none a job is
//!   submitted: its command (`sbatch --wait ...`) runs locally as the job's
//!   handle, with the job's context in `DAISY_JOB_CONTEXT`.
//! * The job runs a node launcher (`daisy._launcher --job`) that connects
//!   back over TCP with a `LauncherHello` (the run token and the job's
//!   number) and then talks the local launcher's conversation (JSON lines,
//!   `server::launcher`) over that connection: it loads the function once
//!   and forks the workers the server asks for, opening their log files
//!   itself. Where it cannot fork (a thread in the loaded function) it
//!   starts each worker as a fresh interpreter inside the job instead.
//! * The server knows a job's workers only by the launcher's word: their
//!   pids are on another machine, so a worker is killed by a request to
//!   its launcher, never by a local signal. A lost launcher (its
//!   connection fails, its job ends) is the death of its workers: their
//!   blocks are retried and staffing replaces them, in another job.
//! * A worker that dies inside a job is replaced inside it while the job
//!   has a free slot and is open. A job whose last worker ended is closed
//!   at once ([`close_empty`]): its launcher sees its connection end and
//!   leaves, and with it the job; new work submits a new job.
//!
//! The report keeps each job: its batch id, its workers, its queue wait
//! (submission to the launcher's hello) and its launcher's load time
//! (`job_slot::records`).

use super::config::JobCommand;
use super::job_slot::JobSlot;
use super::launch_request::{ForkRequest, LauncherRequest};
use super::state::{Shared, State};
use super::supervision;
use super::worker_slot::{ExitEvent, WorkerSlot};
use crate::block::TaskIndex;
use crate::error::DaisyError;
use crate::worker_timeline::StartKind;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The most workers one job may host: a node has at most a few hundred
/// cores, and a launcher forking more than that is a typo.
pub const MAX_WORKERS_PER_JOB: u32 = 1024;

/// Check a spawner's `workers_per_job`: a whole number from 1 (one worker
/// per job, no node launcher) to [`MAX_WORKERS_PER_JOB`].
pub fn check_workers_per_job(n: i64) -> Result<u32, DaisyError> {
    match u32::try_from(n) {
        Ok(n) if (1..=MAX_WORKERS_PER_JOB).contains(&n) => Ok(n),
        _ => Err(DaisyError::invalid(
            "workers_per_job",
            format!(
                "{n} workers per job: give a whole number from 1 (a job per worker) to \
                 {MAX_WORKERS_PER_JOB}, at most the cores of one node"
            ),
        )),
    }
}

/// Start worker `id` of `task` (its slot and timeline exist) in a job: one
/// of the task's open jobs with a free slot, or a new one.
pub(super) fn start_in_job(
    st: &mut State,
    task: TaskIndex,
    id: u32,
    context: String,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
) -> std::io::Result<()> {
    let Some(jc) = st.config.tasks[task].job.clone() else {
        return Ok(());
    };
    let found = st
        .jobs
        .iter()
        .find(|(_, j)| j.open_with_room(task, jc.workers_per_job))
        .map(|(n, _)| *n);
    let job = match found {
        Some(n) => n,
        None => submit(st, task, &jc, exit_tx)?,
    };
    let Some((requests, label)) = st.jobs.get_mut(&job).and_then(|slot| slot.host(job, id)) else {
        return Ok(());
    };
    let weak = requests.downgrade();
    let _ = requests.send(LauncherRequest::Fork(ForkRequest {
        worker_id: id,
        context,
        outputs: None,
    }));
    if let Some(w) = st.workers.get_mut(&id) {
        w.hosted_by(job, (id, weak));
    }
    if let Some(label) = label {
        st.worker_in_job(id, &label);
    }
    Ok(())
}

/// Submit a new job of `task`: start its handle and watch it.
fn submit(
    st: &mut State,
    task: TaskIndex,
    jc: &JobCommand,
    exit_tx: &mpsc::UnboundedSender<ExitEvent>,
) -> std::io::Result<u32> {
    let job = st.next_job_number();
    let task_id = st.task_id(task);
    let host = st
        .config
        .advertise_host
        .clone()
        .unwrap_or_else(|| st.addr().ip().to_string());
    let context = supervision::WorkerContext {
        host: &host,
        port: st.addr().port(),
        task_id: &task_id,
        worker_id: 0,
        token: &st.config.token,
        log_dir: &st.config.log_dir,
        liveness_timeout: st.config.liveness_timeout,
        payload_sha256: st.config.tasks[task].payload_sha256.as_deref(),
    }
    .to_job_json(job);
    let mut spawned =
        supervision::spawn_job(&jc.command, &task_id, job, &context, &st.config.log_dir)?;
    st.job_number_taken();
    let (tx, rx) = mpsc::unbounded_channel();
    let ended = CancellationToken::new();
    st.jobs.insert(
        job,
        JobSlot::submitted(
            task,
            tx,
            rx,
            spawned.pid,
            std::mem::take(&mut spawned.stop),
            ended.clone(),
            jc.command.polls,
            exit_tx.clone(),
        ),
    );
    // the handle's end is seen by the main loop (`sweep`), woken here
    let wake = st.main_wake();
    tokio::task::spawn_local(async move {
        let _ = spawned.child.wait().await;
        ended.cancel();
        wake.notify_one();
    });
    Ok(job)
}

/// Account for the jobs whose handle exited since the last call: each is
/// over. Its launcher, if it ever connected, loses its session (and its
/// workers with it, see `launcher::serve_job`); a job that never connected
/// (cancelled or failed in the queue) takes its workers, none of which
/// ever ran, with it.
pub(super) fn sweep(st: &mut State) {
    let mut never_connected = Vec::new();
    for (&job, slot) in st.jobs.iter_mut() {
        if slot.handle_ended() == Some(true) {
            never_connected.push((slot.label(job), slot.task()));
        }
    }
    if st.is_stopping() {
        return;
    }
    for (label, task) in never_connected {
        tracing::warn!(
            "job {label} of task {:?} ended before its launcher connected (cancelled or failed \
             in the queue); its workers count as dead",
            st.task_id(task)
        );
    }
}

/// A launcher said hello for job `job`: its queue, its task and where its
/// workers' exits go, or None where the job is unknown, already served or
/// over (the connection is then closed).
pub(super) fn attach(
    shared: &Shared,
    job: u32,
    batch_job_id: Option<String>,
) -> Option<(
    TaskIndex,
    mpsc::UnboundedReceiver<LauncherRequest>,
    mpsc::UnboundedSender<ExitEvent>,
    CancellationToken,
)> {
    let mut st = shared.state_mut();
    let st = &mut *st;
    let Some(slot) = st.jobs.get_mut(&job) else {
        tracing::warn!("refused a launcher claiming unknown job {job}");
        return None;
    };
    let Some((queue, exit_tx, ended)) = slot.attach(batch_job_id) else {
        tracing::warn!("refused a second launcher for job {job}");
        return None;
    };
    let label = slot.label(job);
    let (hosted, started) = (slot.hosted().to_vec(), (slot.task(), queue, exit_tx, ended));
    for id in hosted {
        st.worker_in_job(id, &label);
    }
    Some(started)
}

/// Job `job`'s launcher has loaded the function.
pub(super) fn on_ready(st: &mut State, job: u32) {
    if let Some(slot) = st.jobs.get_mut(&job) {
        slot.launcher_ready();
    }
}

/// Job `job`'s launcher started worker `id` (forked, or `cold`: a fresh
/// interpreter); one stopped meanwhile is killed now. Its startup keeps
/// counting from its request: the job's queue wait is part of it.
pub(super) fn on_started(st: &mut State, job: u32, id: u32, cold: bool) {
    if let Some(slot) = st.jobs.get_mut(&job) {
        slot.worker_started();
    }
    st.worker_started_as(
        id,
        if cold {
            StartKind::Cold
        } else {
            StartKind::Warm
        },
    );
    if let Some(w) = st.workers.get(&id)
        && w.expected_exit().is_some()
    {
        w.kill();
    }
}

/// Job `job`'s launcher is lost (its connection failed, it misbehaved, its
/// job ended): the job is closed and cancelled.
pub(super) fn on_lost(st: &mut State, job: u32, reason: &str) {
    let task_id = st.jobs.get(&job).map(|s| st.task_id(s.task()));
    let stopping = st.is_stopping();
    let Some(slot) = st.jobs.get_mut(&job) else {
        return;
    };
    slot.close();
    if !stopping {
        tracing::warn!(
            "job {} of task {:?} lost its launcher ({reason}); its workers count as dead",
            slot.label(job),
            task_id.unwrap_or_default()
        );
    }
    slot.cancel();
    st.main_wake().notify_one();
}

/// Job `job`'s launcher left after its last worker ended: the job is
/// ending by itself. A local handle that polls for its end (`sbatch
/// --wait`, 2 to 32 s late) is ended now, quietly (no stop command), so
/// the run's end does not wait for that poll nor cancel a job that
/// completed.
pub(super) fn on_finished(st: &mut State, job: u32) {
    if let Some(slot) = st.jobs.get(&job) {
        slot.end_polling_handle();
    }
}

/// Worker `id` ended: it no longer holds a slot in its job.
pub(super) fn on_worker_exit(
    jobs: &mut std::collections::BTreeMap<u32, JobSlot>,
    w: &WorkerSlot,
    id: u32,
) {
    if let Some(slot) = w.job().and_then(|j| jobs.get_mut(&j)) {
        slot.worker_ended(id);
    }
}

/// Close every open job with no worker left (called after staffing, which
/// has placed the replacements it wanted): its launcher leaves, and its
/// job with it.
pub(super) fn close_empty(st: &mut State) {
    for slot in st.jobs.values_mut() {
        slot.close_if_empty();
    }
}

/// The run is ending: no job takes another worker, and those whose
/// launcher never connected (still queued) are cancelled.
pub(super) fn close_all(st: &mut State) {
    for slot in st.jobs.values_mut() {
        slot.close();
        if slot.still_queued() {
            slot.cancel();
        }
    }
}

/// Whether some job's handle is still running.
pub(super) fn any_running(st: &State) -> bool {
    st.jobs.values().any(JobSlot::handle_alive)
}

/// Cancel every job still running (the run's end did not wait longer).
pub(super) fn cancel_running(st: &State) {
    for slot in st.jobs.values().filter(|j| j.running()) {
        slot.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A job's launcher, scripted over an in-memory stream: the server
    /// sends it the queued fork requests once it is ready, asks it (not the
    /// kernel) to kill a worker, names the workers after the job's batch id,
    /// and counts the workers of a launcher that is lost as dead.
    #[test]
    fn a_job_launcher_is_asked_for_forks_and_kills_and_its_loss_ends_its_workers() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let state = super::super::state::test_support::state();
            let shared: Shared = Shared::new(state);
            let (exit_tx, mut exits) = mpsc::unbounded_channel();
            let (tx, rx) = mpsc::unbounded_channel();
            {
                let mut st = shared.state_mut();
                for id in [1, 2] {
                    let mut w = WorkerSlot::starting(0);
                    w.hosted_by(0, (id, tx.downgrade()));
                    st.workers.insert(id, w);
                    st.timeline_begins(id, StartKind::Cold);
                    let _ = tx.send(LauncherRequest::Fork(super::ForkRequest {
                        worker_id: id,
                        context: format!("{{\"worker_id\":{id}}}"),
                        outputs: None,
                    }));
                }
                let mut slot = JobSlot::submitted(
                    0,
                    tx,
                    rx,
                    None,
                    Vec::new(),
                    CancellationToken::new(),
                    false,
                    exit_tx,
                );
                slot.host(0, 1);
                slot.host(0, 2);
                st.jobs.insert(0, slot);
            }
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            // it says ready right behind its hello
            let leftover = b"{\"event\":\"ready\"}\n".to_vec();
            let session = tokio::task::spawn_local(super::super::launcher::serve_job(
                shared.clone(),
                0,
                Some("4711".into()),
                Box::new(ours),
                leftover,
            ));
            let (read, mut write) = tokio::io::split(theirs);
            let mut lines = BufReader::new(read).lines();
            for id in [1, 2] {
                let line = lines.next_line().await.unwrap().unwrap();
                assert!(line.contains(&format!("\"worker_id\":{id}")), "{line}");
                let reply = format!("{{\"event\":\"forked\",\"worker_id\":{id},\"pid\":9{id}}}\n");
                write.write_all(reply.as_bytes()).await.unwrap();
            }
            // a worker's kill is a request to its launcher
            tokio::task::yield_now().await;
            shared.state().workers[&2].kill();
            let hang = std::time::Duration::from_secs(30);
            let line = tokio::time::timeout(hang, lines.next_line()).await;
            let line = line.expect("no kill request came").unwrap().unwrap();
            assert_eq!(line, r#"{"kill":2}"#);
            {
                let st = shared.state();
                let job = &st.jobs[&0];
                assert_eq!(job.label(0), "4711");
                let tl = st.timeline(1).unwrap();
                assert_eq!(tl.record().job_id.as_deref(), Some("4711"));
                assert_eq!(tl.record().start, StartKind::Warm);
                let rec = &super::super::job_slot::records(st.jobs.iter(), 0)[0];
                assert_eq!(rec.workers, vec![1, 2]);
                assert_eq!(rec.starts.len(), 2);
                assert!(rec.queue_wait.is_some() && rec.launcher_startup.is_some());
            }
            // the launcher is lost: both its workers are dead
            drop(write);
            drop(lines);
            session.await.unwrap();
            let mut dead = Vec::new();
            for _ in 0..2 {
                let exit = tokio::time::timeout(hang, exits.recv()).await;
                dead.push(exit.expect("a lost launcher's worker lived on").unwrap());
            }
            dead.sort_by_key(|(id, _)| *id);
            assert_eq!(dead, vec![(1, None), (2, None)]);
            assert!(
                !shared.state().jobs[&0].open_with_room(0, 8),
                "the job is closed"
            );
        });
    }

    #[test]
    fn workers_per_job_is_a_whole_number_within_a_node() {
        assert_eq!(check_workers_per_job(1), Ok(1));
        assert_eq!(check_workers_per_job(4), Ok(4));
        for bad in [0, -3, i64::from(MAX_WORKERS_PER_JOB) + 1, i64::MAX] {
            let e = check_workers_per_job(bad).unwrap_err().to_string();
            assert!(e.starts_with("workers_per_job:"), "{e}");
        }
    }
}
