//! Warm starts: one launcher process per task that loads the task's
//! function once and forks a worker per request, so that a worker does not
//! pay for a fresh interpreter importing what the function needs (the
//! largest part of a real worker's startup: `funlib.persistence` alone
//! imports for 0.7 s).
//!
//! ## Who does what
//! * The server starts every task's launcher ([`supervision::spawn_launcher`])
//!   from the task's `launcher` command when the run begins ([`want_all`]):
//!   a downstream task's launcher loads while the upstream task runs, and
//!   its first block finds it ready. It is a fresh process, never a fork
//!   of the threaded driver.
//! * The launcher (daisy's `daisy._launcher`) loads the payload, checks it
//!   has no threads that would make forking unsafe, and says `ready`, or
//!   `cold` with the reason it cannot fork.
//! * Each warm start is a [`ForkRequest`]: the worker's id, its
//!   `DAISY_CONTEXT`, and its stdout/stderr as descriptors (the same
//!   files or pipes a cold start of the same worker gets), sent with
//!   `SCM_RIGHTS` over the control socket. The launcher forks, the child
//!   becomes the worker, and the launcher answers `forked` with its pid,
//!   and `exited` with its wait status when it ends.
//! * Anything that goes wrong turns the task's warm starts off for the
//!   rest of the run, with the reason logged once and kept in the report:
//!   every request not yet forked is started cold under the same worker
//!   id, and the workers of a launcher that died are counted as dead
//!   (they die with it) so their blocks are retried.
//!
//! The server only asks; the launcher's replies are untrusted bytes (a
//! line that does not parse turns warm starts off, nothing panics).

use super::launch_request::{ForkRequest, LauncherRequest};
use super::state::{Shared, State};
use super::supervision;
use super::worker_slot::ExitEvent;
use crate::block::TaskIndex;
use crate::worker_timeline::StartKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest line a launcher may send: its replies are a few dozen
/// bytes, a reason a few hundred; a launcher that sends more is broken.
const MAX_REPLY_LINE: usize = 64 << 10;

/// How long a launcher gets to leave once its socket is closed at the end
/// of a run (it only has to notice): then it is killed.
pub(super) const LAUNCHER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the launcher may leave a fork request unanswered, or a forked
/// worker's end unreported (the server watches each warm worker through a
/// pidfd of its own), before it is given up and the task's workers start
/// cold. A fork takes milliseconds (a launcher holding gigabytes, well
/// under a second), and a launcher reaps a worker as it ends; one that
/// answers nothing for this long is stopped (SIGSTOP, a frozen cgroup) or
/// stuck in the kernel, and without the deadline the run waited for it for
/// good. The time counts from its last reply, so a burst of forks answered
/// one by one never runs out. Giving up a launcher costs what its death
/// costs: its warm workers die with it (their blocks are retried) and the
/// task's next workers start cold.
pub(super) const FORK_REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the server writes for a [`ForkRequest`], one JSON line (to a
/// local launcher the descriptors travel beside it).
#[derive(Serialize)]
struct RequestLine<'a> {
    worker_id: u32,
    context: &'a str,
}

/// What the server writes to have a job's launcher kill one of its
/// workers, one JSON line.
#[derive(Serialize)]
struct KillLine {
    kill: u32,
}

/// What a launcher says, one JSON line each.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub(super) enum Reply {
    /// The function is loaded; forks may be asked.
    Ready,
    /// It cannot (or can no longer) fork; it leaves.
    Cold {
        /// Why, for the log and the report.
        reason: String,
    },
    /// A worker was forked.
    Forked {
        /// The request's worker id.
        worker_id: u32,
        /// The worker's pid (also its process group).
        pid: u32,
        /// A job's launcher that cannot fork starts the worker as a fresh
        /// interpreter instead, and says so here.
        #[serde(default)]
        cold: bool,
    },
    /// A forked worker ended.
    Exited {
        /// Its worker id.
        worker_id: u32,
        /// Its raw wait status.
        status: i32,
    },
}

/// Parse one line of a launcher's; an error says what was wrong.
pub(super) fn parse_reply(line: &[u8]) -> Result<Reply, String> {
    serde_json::from_slice(line).map_err(|e| {
        format!(
            "it sent a line that is not a reply ({e}): {:?}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        )
    })
}

/// Ask task `task`'s launcher for a warm start, creating the request queue
/// (and so the launcher, at the next [`start_wanted`]) where there is
/// none. The caller has checked [`State::warm_wanted`].
pub(super) fn request(st: &mut State, task: TaskIndex, req: ForkRequest) {
    st.tasks[task].launcher_mut().want();
    st.tasks[task].launcher().ask(req);
}

/// The run begins: start the launcher of every task that asks for warm
/// starts and is not finished already (a fully resumed task needs none), at
/// the next [`start_wanted`], so that each loads its function while the
/// tasks before it work. They used to start one after another, each once
/// the task before it had begun, so that two imports would not share a
/// small node's cores; measured on the real pipeline (a smoothing task and
/// a threshold task, funlib.persistence imported by each function), the
/// downstream task's first block then waited for its own import (its
/// launcher ready 4.8 s into the run, the upstream one's 2.2 s), and the
/// imports overlap with work anyway: see benchmarks/RESULTS.md.
pub(super) fn want_all(st: &mut State) {
    for t in 0..st.scheduler.pipeline().len() as TaskIndex {
        if st.warm_wanted(t) && !st.scheduler.is_task_finished(t) {
            st.tasks[t].launcher_mut().want();
        }
    }
}

/// Start the launchers wanted since the last call. A launcher that cannot
/// be started turns its task's warm starts off (its requests start cold).
pub(super) fn start_wanted(shared: &Shared, exit_tx: &mpsc::UnboundedSender<ExitEvent>) {
    let n = shared.state().tasks.len();
    for t in 0..n as TaskIndex {
        let (rx, cmd, task_id, log_dir) = {
            let mut st = shared.state_mut();
            let rx = st.tasks[t].launcher_mut().take_to_start();
            let Some(rx) = rx else { continue };
            let Some(cmd) = st.config.tasks[t].launcher.clone() else {
                continue;
            };
            (rx, cmd, st.task_id(t), st.config.log_dir.clone())
        };
        let started = Instant::now();
        match supervision::spawn_launcher(&cmd, &task_id, &log_dir) {
            Ok(spawned) => {
                let pid = spawned.child.id();
                {
                    let mut st = shared.state_mut();
                    st.tasks[t].launcher_mut().spawned(pid);
                }
                let session = Session {
                    shared: shared.clone(),
                    task: t,
                    host: Host::Task,
                    exit_tx: exit_tx.clone(),
                    started,
                };
                tokio::task::spawn_local(session.run(spawned, rx));
            }
            Err(e) => {
                let mut rx = rx;
                let mut st = shared.state_mut();
                let mut queued = Vec::new();
                while let Ok(req) = rx.try_recv() {
                    if let LauncherRequest::Fork(req) = req {
                        queued.push(req.worker_id);
                    }
                }
                go_cold(
                    &mut st,
                    t,
                    &format!("the launcher could not be started: {e}"),
                    queued,
                );
            }
        }
    }
}

/// Turn task `task`'s warm starts off for the rest of the run, logging why
/// once, and have the main loop start the workers of `unserved` requests
/// cold.
fn go_cold(st: &mut State, task: TaskIndex, reason: &str, unserved: Vec<u32>) {
    if st.tasks[task].launcher_mut().turn_off(reason) {
        tracing::warn!(
            "task {:?}: starting its workers cold from now on: {reason}",
            st.task_id(task)
        );
    }
    st.start_cold_later(unserved);
    // start them now, not at the next tick
    st.main_wake().notify_one();
}

/// Whose launcher a session serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    /// A task's launcher on this machine: its workers are watched through
    /// pidfds and killed by their pids, and their outputs are passed to it.
    Task,
    /// The node launcher of job N (`server::jobs`), on another machine:
    /// its word is all the server knows of its workers.
    Job(u32),
}

/// The server's end of a launcher's conversation, for writing: a local
/// launcher's socket (descriptors go with the requests) or a job's TCP
/// connection.
enum ControlWrite {
    Local(tokio::net::unix::OwnedWriteHalf),
    Remote(tokio::io::WriteHalf<Box<dyn crate::protocol::Stream>>),
}

/// The same conversation, for reading.
type ControlRead = Box<dyn tokio::io::AsyncRead + Unpin>;

/// The server's side of one running launcher.
struct Session {
    shared: Shared,
    task: TaskIndex,
    host: Host,
    exit_tx: mpsc::UnboundedSender<ExitEvent>,
    started: Instant,
}

/// Requests and workers of one session, by where they stand.
#[derive(Default)]
struct Ledger {
    /// Asked before the launcher was ready: sent once it is.
    queued: Vec<ForkRequest>,
    /// Sent, not yet answered: worker id to when it was sent.
    sent: BTreeMap<u32, Instant>,
    /// Forked and alive: worker id to pid.
    alive: BTreeMap<u32, u32>,
    /// Forked workers seen to end (pidfd) that the launcher has not
    /// reported yet: worker id to when the server saw it.
    unreported: BTreeMap<u32, Instant>,
}

impl Session {
    async fn run(
        self,
        spawned: supervision::SpawnedLauncher,
        mut requests: mpsc::UnboundedReceiver<LauncherRequest>,
    ) {
        let supervision::SpawnedLauncher { mut child, socket } = spawned;
        // our end of the socket closes as `converse` returns: a launcher
        // still running sees the end of its socket and leaves
        let ended = match local_control(socket) {
            Ok((read, write)) => {
                self.converse(read, write, Vec::new(), &mut requests, None)
                    .await
            }
            Err(e) => Err((format!("its socket is unusable: {e}"), Ledger::default())),
        };
        match ended {
            Ok(never_forked) => {
                // the run ended before these were forked: they never ran
                for id in never_forked {
                    let _ = self.exit_tx.send((id, None));
                }
                let left = tokio::time::timeout(LAUNCHER_GRACE, child.wait()).await;
                if left.is_ok() {
                    self.reaped();
                    return;
                }
            }
            Err((reason, ledger)) => self.fail(&reason, ledger, &mut requests),
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        self.reaped();
    }

    /// The launcher process is gone and reaped.
    fn reaped(&self) {
        self.shared.state_mut().tasks[self.task]
            .launcher_mut()
            .reaped();
        self.shared.notify_changed();
    }

    /// Serve requests until the run wants no more workers and every forked
    /// one has ended (`Ok` with the ids of requests never sent: the run
    /// ended while the launcher was loading), or until the launcher goes
    /// cold, dies or misbehaves (`Err` with the reason and what was left).
    ///
    /// `buf` holds what the launcher sent before the session began (a
    /// job's launcher may say `ready` right behind its hello); `ended`
    /// is cancelled when the launcher's job ended under it.
    async fn converse(
        &self,
        mut read: ControlRead,
        mut write: ControlWrite,
        mut buf: Vec<u8>,
        requests: &mut mpsc::UnboundedReceiver<LauncherRequest>,
        ended: Option<CancellationToken>,
    ) -> Result<Vec<u32>, (String, Ledger)> {
        let mut ledger = Ledger::default();
        let (died_tx, mut died) = mpsc::unbounded_channel::<u32>();
        let ended = ended.unwrap_or_default();
        let mut ready = false;
        let mut open = true;
        let mut last_heard = Instant::now();
        let mut chunk = vec![0u8; 4096];
        loop {
            // whole lines first: those read last time, and on the first
            // turn what came before the session began
            while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let reply = match parse_reply(&line[..end]) {
                    Ok(r) => r,
                    Err(e) => return Err((e, ledger)),
                };
                if self
                    .on_reply(reply, &mut write, &mut ledger, &died_tx)
                    .await?
                {
                    ready = true;
                }
            }
            if buf.len() > MAX_REPLY_LINE {
                return Err(("it sent an overlong line".into(), ledger));
            }
            if !open && ledger.sent.is_empty() && ledger.alive.is_empty() {
                return Ok(ledger.queued.iter().map(|r| r.worker_id).collect());
            }
            // silent for FORK_REPLY_TIMEOUT since the later of the oldest thing it
            // owes (a fork, a worker's end) and its last reply: a burst of forks
            // answered one by one never runs out of time
            let answer_by = ledger
                .sent
                .values()
                .chain(ledger.unreported.values())
                .min()
                .map(|&since| {
                    tokio::time::Instant::from_std(since.max(last_heard) + FORK_REPLY_TIMEOUT)
                });
            tokio::select! {
                // replies first, the deadline last: after a stall of this
                // thread (a long hook, the driver stopped and resumed) the
                // answers already waiting count before the time is judged
                biased;
                got = read.read(&mut chunk) => {
                    match got {
                        Ok(0) => return Err(("the launcher exited".into(), ledger)),
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            last_heard = Instant::now();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err((format!("its socket failed: {e}"), ledger)),
                    }
                }
                req = requests.recv(), if open => match req {
                    Some(req) if ready => self.send(&mut write, req, &mut ledger).await?,
                    Some(LauncherRequest::Fork(req)) => ledger.queued.push(req),
                    // a kill of a worker not yet asked for: it is never sent
                    Some(LauncherRequest::Kill(id)) => {
                        if let Some(at) = ledger.queued.iter().position(|r| r.worker_id == id) {
                            ledger.queued.remove(at);
                            let _ = self.exit_tx.send((id, None));
                        }
                    }
                    None => open = false,
                },
                () = ended.cancelled() => {
                    return Err(("its job ended".into(), ledger));
                }
                Some(id) = died.recv() => {
                    if ledger.alive.contains_key(&id) {
                        ledger.unreported.entry(id).or_insert_with(Instant::now);
                    }
                }
                () = tokio::time::sleep_until(answer_by.unwrap_or_else(tokio::time::Instant::now)),
                    if answer_by.is_some() =>
                {
                    return Err((
                        format!(
                            "the launcher answered nothing for {} s (a fork request, or a \
                             worker's end): it is stopped or stuck",
                            FORK_REPLY_TIMEOUT.as_secs()
                        ),
                        ledger,
                    ));
                }
            }
        }
    }

    /// Take one reply of the launcher: it is ready (the requests queued
    /// until then go out; Ok(true)), it went cold (an error), a worker
    /// forked, a worker exited.
    async fn on_reply(
        &self,
        reply: Reply,
        write: &mut ControlWrite,
        ledger: &mut Ledger,
        died_tx: &mpsc::UnboundedSender<u32>,
    ) -> Result<bool, (String, Ledger)> {
        match reply {
            Reply::Ready => {
                {
                    let mut st = self.shared.state_mut();
                    match self.host {
                        Host::Task => {
                            st.tasks[self.task]
                                .launcher_mut()
                                .ready_after(self.started.elapsed().as_secs_f64());
                        }
                        Host::Job(job) => super::jobs::on_ready(&mut st, job),
                    }
                }
                for req in std::mem::take(&mut ledger.queued) {
                    self.send(write, LauncherRequest::Fork(req), ledger).await?;
                }
                return Ok(true);
            }
            Reply::Cold { reason } => return Err((reason, std::mem::take(ledger))),
            Reply::Forked {
                worker_id,
                pid,
                cold,
            } => {
                if ledger.sent.remove(&worker_id).is_some() {
                    ledger.alive.insert(worker_id, pid);
                    match self.host {
                        Host::Task => {
                            self.on_forked(worker_id, pid);
                            watch_worker(worker_id, pid, died_tx.clone());
                        }
                        Host::Job(job) => super::jobs::on_started(
                            &mut self.shared.state_mut(),
                            job,
                            worker_id,
                            cold,
                        ),
                    }
                }
            }
            Reply::Exited { worker_id, status } => {
                ledger.unreported.remove(&worker_id);
                if ledger.alive.remove(&worker_id).is_some() {
                    let status = ExitStatus::from_raw(status);
                    let _ = self.exit_tx.send((worker_id, Some(status)));
                }
            }
        }
        Ok(false)
    }

    /// Send one request (a fork's descriptors go with it to a local
    /// launcher). A job's worker stopped while its request waited is not
    /// asked for: it ends here, never having run.
    async fn send(
        &self,
        write: &mut ControlWrite,
        req: LauncherRequest,
        ledger: &mut Ledger,
    ) -> Result<(), (String, Ledger)> {
        let req = match req {
            LauncherRequest::Kill(id) => {
                if let ControlWrite::Remote(w) = write {
                    let mut line = serde_json::to_vec(&KillLine { kill: id }).unwrap_or_default();
                    line.push(b'\n');
                    if let Err(e) = w.write_all(&line).await {
                        return Err((
                            format!("a kill of worker {id} could not be sent: {e}"),
                            std::mem::take(ledger),
                        ));
                    }
                }
                return Ok(());
            }
            LauncherRequest::Fork(req) => req,
        };
        if matches!(self.host, Host::Job(_)) {
            let stopped = self
                .shared
                .state()
                .workers
                .get(&req.worker_id)
                .is_none_or(|w| w.expected_exit().is_some());
            if stopped {
                let _ = self.exit_tx.send((req.worker_id, None));
                return Ok(());
            }
        }
        let mut line = match serde_json::to_vec(&RequestLine {
            worker_id: req.worker_id,
            context: &req.context,
        }) {
            Ok(l) => l,
            Err(e) => {
                ledger.queued.push(req);
                return Err((
                    format!("a request could not be written: {e}"),
                    std::mem::take(ledger),
                ));
            }
        };
        line.push(b'\n');
        let id = req.worker_id;
        let sent = match (write, &req.outputs) {
            (ControlWrite::Remote(w), _) => w.write_all(&line).await,
            (ControlWrite::Local(w), Some(outputs)) => {
                send_line_with_fds(
                    w.as_ref(),
                    &line,
                    [outputs.0.as_raw_fd(), outputs.1.as_raw_fd()],
                )
                .await
            }
            (ControlWrite::Local(_), None) => Err(io::Error::other("it has no outputs to pass")),
        };
        if let Err(e) = sent {
            ledger.queued.push(req);
            return Err((
                format!("a request for worker {id} could not be sent: {e}"),
                std::mem::take(ledger),
            ));
        }
        ledger.sent.insert(id, Instant::now());
        Ok(())
    }

    /// A warm worker exists: its pid is known from now on, its startup
    /// counts from now, and one killed while it was being forked (a run
    /// that ended meanwhile) is killed now.
    fn on_forked(&self, worker_id: u32, pid: u32) {
        let mut st = self.shared.state_mut();
        st.worker_restarted(worker_id, StartKind::Warm);
        if let Some(w) = st.workers.get_mut(&worker_id) {
            w.forked(pid);
            if w.expected_exit().is_some() {
                w.kill();
            }
        }
    }

    /// The launcher can fork no more: warm starts off, requests not yet
    /// answered started cold, the workers it forked (which die with it)
    /// killed and counted as exited.
    fn fail(
        &self,
        reason: &str,
        ledger: Ledger,
        requests: &mut mpsc::UnboundedReceiver<LauncherRequest>,
    ) {
        let mut st = self.shared.state_mut();
        let mut unserved: Vec<u32> = ledger.queued.iter().map(|r| r.worker_id).collect();
        unserved.extend(ledger.sent.keys().copied());
        requests.close();
        while let Ok(req) = requests.try_recv() {
            if let LauncherRequest::Fork(req) = req {
                unserved.push(req.worker_id);
            }
        }
        match self.host {
            Host::Task => {
                for (&id, &pid) in &ledger.alive {
                    supervision::kill(Some(pid), &[]);
                    let _ = self.exit_tx.send((id, None));
                }
                go_cold(&mut st, self.task, reason, unserved);
            }
            Host::Job(job) => {
                // on another machine: its workers are lost with it (the
                // job is cancelled), and those never started died too, so
                // that staffing replaces them in another job
                for id in ledger.alive.keys().copied().chain(unserved) {
                    let _ = self.exit_tx.send((id, None));
                }
                super::jobs::on_lost(&mut st, job, reason);
            }
        }
    }
}

/// A local launcher's socket, split for the session.
fn local_control(
    socket: std::os::unix::net::UnixStream,
) -> io::Result<(ControlRead, ControlWrite)> {
    socket.set_nonblocking(true)?;
    let (read, write) = UnixStream::from_std(socket)?.into_split();
    Ok((Box::new(read), ControlWrite::Local(write)))
}

/// Write `line` to a local launcher, its two descriptors with the first
/// byte.
async fn send_line_with_fds(stream: &UnixStream, line: &[u8], fds: [RawFd; 2]) -> io::Result<()> {
    let mut written = 0;
    while written < line.len() {
        let with: &[RawFd] = if written == 0 { &fds } else { &[] };
        let rest = &line[written..];
        written += stream
            .async_io(Interest::WRITABLE, || send_with_fds(stream, rest, with))
            .await?;
    }
    Ok(())
}

/// Serve the launcher of job `job` over the connection it opened with its
/// hello (`leftover`: what it sent behind the hello), until the job's
/// queue closes and its workers have ended, or the launcher is lost.
pub(super) async fn serve_job(
    shared: Shared,
    job: u32,
    batch_job_id: Option<String>,
    stream: Box<dyn crate::protocol::Stream>,
    leftover: Vec<u8>,
) {
    let Some((task, mut requests, exit_tx, ended)) =
        super::jobs::attach(&shared, job, batch_job_id)
    else {
        return;
    };
    let session = Session {
        shared,
        task,
        host: Host::Job(job),
        exit_tx,
        started: Instant::now(),
    };
    let (read, write) = tokio::io::split(stream);
    let read: ControlRead = Box::new(read);
    let done = session
        .converse(
            read,
            ControlWrite::Remote(write),
            leftover,
            &mut requests,
            Some(ended),
        )
        .await;
    match done {
        Ok(never_sent) => {
            for id in never_sent {
                let _ = session.exit_tx.send((id, None));
            }
            super::jobs::on_finished(&mut session.shared.state_mut(), job);
        }
        Err((reason, ledger)) => session.fail(&reason, ledger, &mut requests),
    }
}

/// Watch a warm worker's end through a pidfd of the server's own: `died`
/// gets its id once it has exited. Its launcher reports the end too, but a
/// launcher that is stopped or stuck reports nothing, and the run would
/// count the worker alive for good. A worker already gone (`ESRCH`) is
/// reported at once; where pidfds are missing the watch is left out.
fn watch_worker(worker_id: u32, pid: u32, died: mpsc::UnboundedSender<u32>) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: a plain syscall; a descriptor it returns is owned below
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            let _ = died.send(worker_id);
        }
        return;
    }
    let Ok(fd) = RawFd::try_from(fd) else {
        return;
    };
    // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the AsyncFd owns the only handle to the descriptor (an
    // OwnedFd moved in), so it stays open while registered and is closed
    // only after its registration is dropped
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }) else {
        return;
    };
    tokio::task::spawn_local(async move {
        if fd.readable().await.is_ok() {
            let _ = died.send(worker_id);
        }
    });
}

/// `sendmsg` of `data` with `fds` attached (`SCM_RIGHTS`); the bytes sent.
fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let fd = stream.as_raw_fd();
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let fds_bytes = std::mem::size_of_val(fds);
    let space = if fds.is_empty() {
        0
    } else {
        // SAFETY: CMSG_SPACE only computes a size.
        unsafe { libc::CMSG_SPACE(fds_bytes as u32) as usize }
    };
    // u64 words keep the control buffer aligned for cmsghdr
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; every pointer set below points into
    // `iov`, `control` or `fds`, which outlive the sendmsg call, and the
    // control header is written inside `control`'s `space` bytes as
    // CMSG_FIRSTHDR/CMSG_DATA lay it out.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(io::Error::other("no room for the descriptors"));
            }
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fds_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fds_bytes,
            );
        }
        let n = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_and_garbage_is_an_error_not_a_panic() {
        assert_eq!(parse_reply(br#"{"event":"ready"}"#), Ok(Reply::Ready));
        assert_eq!(
            parse_reply(br#"{"event":"forked","worker_id":3,"pid":4242}"#),
            Ok(Reply::Forked {
                worker_id: 3,
                pid: 4242,
                cold: false
            })
        );
        assert_eq!(
            parse_reply(br#"{"event":"forked","worker_id":3,"pid":4242,"cold":true}"#),
            Ok(Reply::Forked {
                worker_id: 3,
                pid: 4242,
                cold: true
            })
        );
        assert_eq!(
            parse_reply(br#"{"event":"exited","worker_id":3,"status":256}"#),
            Ok(Reply::Exited {
                worker_id: 3,
                status: 256
            })
        );
        assert_eq!(
            parse_reply(br#"{"event":"cold","reason":"a thread"}"#),
            Ok(Reply::Cold {
                reason: "a thread".into()
            })
        );
        for bad in [
            &b"not json"[..],
            br#"{"event":"forked","worker_id":-1,"pid":1}"#,
            br#"{"event":"launch"}"#,
            b"\xff\xfe",
            b"",
        ] {
            let e = parse_reply(bad).unwrap_err();
            assert!(e.contains("not a reply"), "{e}");
        }
    }

    /// The launcher's deadline in tokio's paused time: a launcher that
    /// says it is ready and then answers a fork request with nothing is
    /// given up once `FORK_REPLY_TIMEOUT` has passed, without the test
    /// waiting it out (it took 10 s of real time in the Python suite).
    #[test]
    fn a_launcher_that_answers_nothing_is_given_up_at_the_deadline() {
        use std::io::Write;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let state = super::super::state::test_support::state();
            let shared: Shared = Shared::new(state);
            let (exit_tx, _exits) = mpsc::unbounded_channel();
            let session = Session {
                shared,
                task: 0,
                host: Host::Task,
                exit_tx,
                started: Instant::now(),
            };
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            (&theirs).write_all(b"{\"event\":\"ready\"}\n").unwrap();
            let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
            let (requests, mut incoming) = mpsc::unbounded_channel();
            requests
                .send(LauncherRequest::Fork(ForkRequest {
                    worker_id: 7,
                    context: "{}".into(),
                    outputs: Some((null(), null())),
                }))
                .unwrap();
            let begun = tokio::time::Instant::now();
            // an hour of virtual time: a broken deadline fails here at once
            let waited = std::time::Duration::from_secs(3600);
            let (read, write) = local_control(ours).unwrap();
            let talk = session.converse(read, write, Vec::new(), &mut incoming, None);
            let ended = tokio::time::timeout(waited, talk).await;
            let Ok(Err((reason, ledger))) = ended else {
                panic!("the silent launcher was not given up");
            };
            assert!(reason.contains("answered nothing for 10 s"), "{reason}");
            assert!(ledger.sent.contains_key(&7), "the request is still owed");
            assert!(tokio::time::Instant::now() - begun >= FORK_REPLY_TIMEOUT);
            // the launcher got the request: its line is in the socket
            let mut got = [0u8; 256];
            let n = std::io::Read::read(&mut &theirs, &mut got).unwrap();
            assert!(
                std::str::from_utf8(&got[..n])
                    .unwrap()
                    .contains("\"worker_id\":7")
            );
            drop(requests);
        });
    }

    #[test]
    fn descriptors_travel_with_the_first_byte() {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let dir = std::env::temp_dir().join(format!("daisy-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::File::create(dir.join("out")).unwrap();
        let n = rt.block_on(async {
            a.set_nonblocking(true).unwrap();
            let a = UnixStream::from_std(a).unwrap();
            a.async_io(Interest::WRITABLE, || {
                send_with_fds(&a, b"hello\n", &[file.as_raw_fd()])
            })
            .await
            .unwrap()
        });
        assert_eq!(n, 6);
        // receive it as the launcher does: recvmsg with room for two fds
        let mut data = [0u8; 16];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data pointing into `data` and `control`,
        // which outlive the call; the descriptor read from CMSG_DATA was
        // just received, so this File is its only owner.
        let received = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&control) as _;
            let got = libc::recvmsg(b.as_raw_fd(), &mut msg, 0);
            assert_eq!(got, 6);
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            assert!(!cmsg.is_null());
            assert_eq!((*cmsg).cmsg_type, libc::SCM_RIGHTS);
            let mut fd: RawFd = -1;
            std::ptr::copy_nonoverlapping(
                libc::CMSG_DATA(cmsg),
                &mut fd as *mut RawFd as *mut u8,
                std::mem::size_of::<RawFd>(),
            );
            std::fs::File::from_raw_fd(fd)
        };
        assert_eq!(&data[..6], b"hello\n");
        use std::io::Write;
        (&received)
            .write_all(b"through the passed descriptor")
            .unwrap();
        let mut text = String::new();
        std::fs::File::open(dir.join("out"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "through the passed descriptor");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
