//! One job of the run that hosts several workers ([`JobSlot`]), as the
//! server knows it: its launcher's queue, its workers, its handle and the
//! moments the report keeps (submitted, connected, ready, each start). Its
//! fields are private: `server::jobs` drives a job through the methods
//! below, each named for what happened to it, and the report reads its
//! records ([`records`], [`queue_waits`]).

use super::launch_request::LauncherRequest;
use super::supervision;
use super::worker_slot::ExitEvent;
use crate::block::TaskIndex;
use crate::worker_timeline::JobRecord;
use std::collections::BTreeSet;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One job of the run that hosts several workers, as the server knows it
/// (see `server::jobs`).
#[derive(Debug)]
pub(super) struct JobSlot {
    /// The task whose workers it hosts.
    task: TaskIndex,
    /// New workers for its launcher; None once the job is closed (no more
    /// workers go into it).
    requests: Option<mpsc::UnboundedSender<LauncherRequest>>,
    /// The queue's other end, until the launcher's hello takes it.
    to_start: Option<mpsc::UnboundedReceiver<LauncherRequest>>,
    /// Its workers still alive.
    workers: BTreeSet<u32>,
    /// Every worker it hosted, in order.
    hosted: Vec<u32>,
    /// When it was submitted.
    submitted: Instant,
    /// When its launcher said hello.
    connected: Option<Instant>,
    /// When its launcher had loaded the function.
    ready: Option<Instant>,
    /// When each of its workers started.
    starts: Vec<Instant>,
    /// The batch system's id of the job.
    batch_job_id: Option<String>,
    /// Its local handle's pid.
    handle_pid: Option<u32>,
    /// Its stop command, expanded (`scancel` of the job).
    stop: Vec<String>,
    /// Cancelled when its handle exited: the job is over, whatever its
    /// launcher's connection says.
    ended: CancellationToken,
    /// Its handle has not been reaped yet.
    running: bool,
    /// Its handle learns of the job's end only by polling
    /// (`WorkerCommand::polls`).
    polls: bool,
    /// Where its workers' exits are reported.
    exit_tx: mpsc::UnboundedSender<ExitEvent>,
}

impl JobSlot {
    /// What the report and the worker timelines call it.
    pub(super) fn label(&self, job: u32) -> String {
        self.batch_job_id
            .clone()
            .unwrap_or_else(|| format!("job {job}"))
    }

    /// Kill its handle and cancel the job (`scancel`).
    pub(super) fn cancel(&self) {
        supervision::kill(self.handle_pid, &self.stop);
    }

    /// A job of `task` just submitted: its launcher's queue (`requests`,
    /// `to_start`), its handle (`handle_pid`, `stop`, `polls`), the token
    /// cancelled when the handle exits, and where its workers' exits go.
    #[allow(clippy::too_many_arguments)] // one job's facts, named
    pub(super) fn submitted(
        task: TaskIndex,
        requests: mpsc::UnboundedSender<LauncherRequest>,
        to_start: mpsc::UnboundedReceiver<LauncherRequest>,
        handle_pid: Option<u32>,
        stop: Vec<String>,
        ended: CancellationToken,
        polls: bool,
        exit_tx: mpsc::UnboundedSender<ExitEvent>,
    ) -> Self {
        Self {
            task,
            requests: Some(requests),
            to_start: Some(to_start),
            workers: BTreeSet::new(),
            hosted: Vec::new(),
            submitted: Instant::now(),
            connected: None,
            ready: None,
            starts: Vec::new(),
            batch_job_id: None,
            handle_pid,
            stop,
            ended,
            running: true,
            polls,
            exit_tx,
        }
    }

    /// The task whose workers it hosts.
    pub(super) fn task(&self) -> TaskIndex {
        self.task
    }

    /// Whether it is open and has room for another worker of `task`.
    pub(super) fn open_with_room(&self, task: TaskIndex, per_job: u32) -> bool {
        self.task == task
            && self.requests.is_some()
            && !self.ended.is_cancelled()
            && self.workers.len() < per_job as usize
    }

    /// Worker `id` goes into it: its launcher's queue, and the worker's
    /// label where the batch system named the job. None where it is closed.
    pub(super) fn host(
        &mut self,
        job: u32,
        id: u32,
    ) -> Option<(mpsc::UnboundedSender<LauncherRequest>, Option<String>)> {
        let requests = self.requests.clone()?;
        self.workers.insert(id);
        self.hosted.push(id);
        let label = self.batch_job_id.as_ref().map(|_| self.label(job));
        Some((requests, label))
    }

    /// Its handle exited since the last look: it is over, closed, and the
    /// workers queued for a launcher that never connected are reported
    /// dead. Returns whether that launcher never connected; None where
    /// nothing changed.
    pub(super) fn handle_ended(&mut self) -> Option<bool> {
        if !self.running || !self.ended.is_cancelled() {
            return None;
        }
        self.running = false;
        self.requests = None;
        let Some(mut queue) = self.to_start.take() else {
            return Some(false);
        };
        queue.close();
        while let Ok(req) = queue.try_recv() {
            if let LauncherRequest::Fork(req) = req {
                let _ = self.exit_tx.send((req.worker_id, None));
            }
        }
        Some(true)
    }

    /// Its launcher said hello (the batch system's `batch_job_id`): its
    /// queue, where its workers' exits go and the token of its end; None
    /// where a launcher was served already.
    #[allow(clippy::type_complexity)] // the session's parts, named below
    pub(super) fn attach(
        &mut self,
        batch_job_id: Option<String>,
    ) -> Option<(
        mpsc::UnboundedReceiver<LauncherRequest>,
        mpsc::UnboundedSender<ExitEvent>,
        CancellationToken,
    )> {
        let queue = self.to_start.take()?;
        self.connected = Some(Instant::now());
        self.batch_job_id = batch_job_id.filter(|id| !id.is_empty() && id.len() <= 64);
        Some((queue, self.exit_tx.clone(), self.ended.clone()))
    }

    /// Every worker it hosted, in order.
    pub(super) fn hosted(&self) -> &[u32] {
        &self.hosted
    }

    /// Its launcher has loaded the function.
    pub(super) fn launcher_ready(&mut self) {
        self.ready = Some(Instant::now());
    }

    /// Its launcher started a worker.
    pub(super) fn worker_started(&mut self) {
        self.starts.push(Instant::now());
    }

    /// Worker `id` ended: its slot is free.
    pub(super) fn worker_ended(&mut self, id: u32) {
        self.workers.remove(&id);
    }

    /// No more workers go into it (its launcher leaves once its workers
    /// have).
    pub(super) fn close(&mut self) {
        self.requests = None;
    }

    /// It is closed where no worker is left in it.
    pub(super) fn close_if_empty(&mut self) {
        if self.workers.is_empty() {
            self.requests = None;
        }
    }

    /// Its launcher never connected (it is still queued) and its handle
    /// runs.
    pub(super) fn still_queued(&self) -> bool {
        self.connected.is_none() && self.running
    }

    /// Its handle has not been reaped yet.
    pub(super) fn running(&self) -> bool {
        self.running
    }

    /// Its handle runs and the job has not ended.
    pub(super) fn handle_alive(&self) -> bool {
        self.running && !self.ended.is_cancelled()
    }

    /// End its local handle quietly (no stop command), where that handle
    /// only learns of the job's end by polling (see [`super::jobs::on_finished`]).
    pub(super) fn end_polling_handle(&self) {
        if self.running && self.polls {
            supervision::kill(self.handle_pid, &[]);
        }
    }
}

/// The queue waits of task `t`'s jobs that connected.
pub(super) fn queue_waits<'a>(
    jobs: impl Iterator<Item = &'a JobSlot>,
    t: TaskIndex,
) -> crate::run_stats::StatSummary {
    let mut w = crate::run_stats::Welford::default();
    for j in jobs.filter(|j| j.task == t) {
        if let Some(c) = j.connected {
            w.push(c.saturating_duration_since(j.submitted).as_secs_f64());
        }
    }
    w.summary()
}

/// The report's record of each job of task `t`.
pub(super) fn records<'a>(
    jobs: impl Iterator<Item = (&'a u32, &'a JobSlot)>,
    t: TaskIndex,
) -> Vec<JobRecord> {
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    jobs.filter(|(_, j)| j.task == t)
        .map(|(&n, j)| JobRecord {
            job_id: j.label(n),
            workers: j.hosted.clone(),
            queue_wait: j.connected.map(|c| secs(j.submitted, c)),
            launcher_startup: j.connected.zip(j.ready).map(|(c, r)| secs(c, r)),
            starts: j
                .ready
                .map(|r| j.starts.iter().map(|&s| secs(r, s)).collect())
                .unwrap_or_default(),
        })
        .collect()
}
