//! One managed worker as the run knows it ([`WorkerSlot`]): what policy
//! knows of it (its [`WorkerFlags`]), its process, the exit the server
//! expects of it and how to kill it (a signal to its process group here,
//! or a request to its job's launcher on another machine). Its fields are
//! private: the connection, the staffing loop and the jobs change a worker
//! only through the methods below, named for what happened to it.

use super::launch_request::LauncherRequest;
use super::policy::WorkerFlags;
use super::supervision;
use crate::block::TaskIndex;
use crate::worker_timeline::WorkerExit;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One managed worker.
#[derive(Debug)]
pub(super) struct WorkerSlot {
    /// What policy knows of it.
    flags: WorkerFlags,
    /// Its process id.
    pid: Option<u32>,
    /// Set when the server killed or retired it on purpose.
    expected_exit: Option<WorkerExit>,
    /// Its command's stop command, expanded (cancels remote work).
    stop: Vec<String>,
    /// Signalled when the worker's process is gone: its connection is then
    /// closed, so a remote half still running (a Dask task behind a local
    /// handle) learns it was dropped and stops (see `client`).
    hang_up: CancellationToken,
    /// The job hosting it (`server::jobs`), if it runs in one.
    job: Option<u32>,
    /// How to kill it when it runs in a job: a request to its job's
    /// launcher (its pid is on another machine; nothing local is
    /// signalled). Weak, so that closing the job's queue is not held up by
    /// the workers it hosted.
    remote_kill: Option<(u32, mpsc::WeakUnboundedSender<LauncherRequest>)>,
    /// Its process is a local handle that learns of the remote worker's
    /// end only by polling (`WorkerCommand::polls`).
    polls: bool,
}

impl WorkerSlot {
    /// A worker of `task` being started: alive, no process id yet.
    pub(super) fn starting(task: TaskIndex) -> Self {
        Self {
            flags: WorkerFlags {
                task,
                alive: true,
                ..WorkerFlags::default()
            },
            pid: None,
            expected_exit: None,
            stop: Vec::new(),
            hang_up: CancellationToken::new(),
            job: None,
            remote_kill: None,
            polls: false,
        }
    }

    /// What policy knows of it.
    pub(super) fn flags(&self) -> &WorkerFlags {
        &self.flags
    }

    /// Its process id (None before it started, or where it runs in a job).
    pub(super) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The job hosting it, if it runs in one.
    pub(super) fn job(&self) -> Option<u32> {
        self.job
    }

    /// How the server expects it to end, when it killed, dismissed or
    /// retired it on purpose.
    pub(super) fn expected_exit(&self) -> Option<WorkerExit> {
        self.expected_exit
    }

    /// The server ends it on purpose, this way (a later reason wins).
    pub(super) fn expect_exit(&mut self, exit: WorkerExit) {
        self.expected_exit = Some(exit);
    }

    /// The server ends it on purpose, this way, unless a reason is known.
    pub(super) fn expect_exit_unless_known(&mut self, exit: WorkerExit) {
        self.expected_exit.get_or_insert(exit);
    }

    /// What its connection waits on to close when its process is gone.
    pub(super) fn hang_up(&self) -> CancellationToken {
        self.hang_up.clone()
    }

    /// Its process is gone: its connection closes.
    pub(super) fn hang_up_now(&self) {
        self.hang_up.cancel();
    }

    /// It runs in job `job`, killed by request `kill` to the job's launcher.
    pub(super) fn hosted_by(
        &mut self,
        job: u32,
        kill: (u32, mpsc::WeakUnboundedSender<LauncherRequest>),
    ) {
        self.job = Some(job);
        self.remote_kill = Some(kill);
    }

    /// Its launcher forked it as process `pid`.
    pub(super) fn forked(&mut self, pid: u32) {
        self.pid = Some(pid);
    }

    /// It was started again as a fresh interpreter here (its warm start
    /// failed): process `pid`, its stop command `stop`, and whether the
    /// process is a handle that polls for the worker's end.
    pub(super) fn started_cold(&mut self, pid: Option<u32>, stop: Vec<String>, polls: bool) {
        self.job = None;
        self.remote_kill = None;
        self.pid = pid;
        self.stop = stop;
        self.polls = polls;
    }

    /// Its process id where that process runs here (a worker in a job, or
    /// behind a handle that polls, runs elsewhere: its pid is not local).
    pub(super) fn local_pid(&self) -> Option<u32> {
        let local = self.job.is_none() && self.remote_kill.is_none() && !self.polls;
        self.pid.filter(|_| local)
    }

    /// It was handed a block: busy, no longer waiting.
    pub(super) fn took_a_block(&mut self) {
        self.flags.waiting = false;
        self.flags.busy = true;
        self.flags.blocks_taken += 1;
    }

    /// It gave its block back (done or failed).
    pub(super) fn gave_a_block_back(&mut self) {
        self.flags.busy = false;
    }

    /// A block it held was lost with it (its connection or process went).
    pub(super) fn lost_a_block(&mut self) {
        self.flags.lost_block = true;
    }

    /// Ask it to leave at its next request (the budget is spent, its task
    /// was abandoned, or the run ends).
    pub(super) fn retire(&mut self) {
        self.flags.retire = true;
    }

    /// It waits for a block.
    pub(super) fn waits(&mut self) {
        self.flags.waiting = true;
    }

    /// It was told there is no block for it: its exit, when it comes, is
    /// no surprise.
    pub(super) fn dismissed(&mut self) {
        self.flags.waiting = false;
        self.flags.dismissed = true;
    }

    /// Its connection is gone: it holds and waits for nothing.
    pub(super) fn disconnected(&mut self) {
        self.flags.busy = false;
        self.flags.waiting = false;
    }

    /// Its process exited: returns false when that was known already (a
    /// job's worker is reported on two paths).
    pub(super) fn exited(&mut self) -> bool {
        let was_alive = self.flags.alive;
        self.flags.alive = false;
        self.flags.busy = false;
        was_alive
    }

    /// The worker's connection ended. A worker that was dismissed (told
    /// there is no block for it) and then closed its connection has left.
    /// Where its process here is only a local handle that polls for its
    /// job's end (`sbatch --wait`, 2 to 32 s late), the handle is ended
    /// now, quietly (no stop command: the job ends by itself), so that the
    /// worker's exit, its teardown figure and its slot do not wait for
    /// that poll.
    pub(super) fn on_connection_end(&self) {
        let left = self.flags.alive && self.flags.dismissed && !self.flags.busy;
        if left && self.polls && self.remote_kill.is_none() {
            supervision::kill(self.pid, &[]);
        }
    }

    /// Kill the worker's process group and cancel its remote part; a
    /// worker in a job is killed by its job's launcher.
    pub(super) fn kill(&self) {
        if let Some((id, requests)) = &self.remote_kill {
            if let Some(requests) = requests.upgrade() {
                let _ = requests.send(LauncherRequest::Kill(*id));
            }
            return;
        }
        supervision::kill(self.pid, &self.stop);
    }
}

/// A worker process ended: its id and exit status (None: unknown).
pub(super) type ExitEvent = (u32, Option<std::process::ExitStatus>);

#[cfg(test)]
mod tests {
    use super::*;

    /// A process in a group of its own, standing for a worker's local
    /// handle (`sbatch --wait`).
    fn handle() -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep starts")
    }

    #[test]
    fn the_handle_of_a_remote_worker_that_left_is_ended_and_no_other() {
        let remote = |dismissed: bool, polls: bool| {
            let child = handle();
            let mut w = WorkerSlot::starting(0);
            // `true` stands for scancel: it must not be what ends the job
            w.started_cold(Some(child.id()), vec!["true".into()], polls);
            if dismissed {
                w.dismissed();
            }
            (w, child)
        };
        // polls `tries` times, 20 ms apart, for the handle's exit
        let ended = |mut child: std::process::Child, tries: u32| {
            for _ in 0..tries {
                if child.try_wait().expect("waits").is_some() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            false
        };
        // dismissed, then its connection ended: it left; its handle goes
        let (w, child) = remote(true, true);
        w.on_connection_end();
        assert!(
            ended(child, 250),
            "the handle of a worker that left is ended"
        );
        // its connection ended without a dismissal (a crash, a lost
        // network): the handle tells what happened, so it stays
        let (w, child) = remote(false, true);
        w.on_connection_end();
        assert!(
            !ended(child, 25),
            "a worker that was not dismissed keeps its handle"
        );
        // a worker whose process is the worker (local) or a handle that
        // hears of its end at once (ssh): its exit is waited for
        let (w, child) = remote(true, false);
        w.on_connection_end();
        assert!(
            !ended(child, 25),
            "a handle that does not poll is not killed"
        );
    }
}
