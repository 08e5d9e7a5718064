//! One task's launcher as the run knows it ([`LauncherSlot`]): where it
//! stands (not asked for, asked for with its request queue, closed at the
//! run's end, or off: warm starts given up), when it was ready and why it
//! went cold, and whether its process still runs. Its fields are private:
//! `server::launcher` drives it through the methods below, named for what
//! happened, and the report reads it.

use super::launch_request::{ForkRequest, LauncherRequest};
use tokio::sync::mpsc;

/// Where a task's launcher (warm starts) stands.
#[derive(Debug, Default)]
enum LauncherPhase {
    /// None asked for yet.
    #[default]
    Unused,
    /// Asked for: requests go into `requests`; `to_start` is the queue's
    /// other end until the launcher is started (the next tick).
    Active {
        /// Warm starts asked of it.
        requests: mpsc::UnboundedSender<LauncherRequest>,
        /// The queue's receiving end, until its session takes it.
        to_start: Option<mpsc::UnboundedReceiver<LauncherRequest>>,
        /// The launcher's pid once started.
        pid: Option<u32>,
    },
    /// The run is ending: no more requests.
    Closed,
    /// Warm starts are off for this task for the rest of the run.
    Off,
}

/// One task's launcher, as the run knows it.
#[derive(Debug, Default)]
pub(super) struct LauncherSlot {
    /// Where it stands.
    phase: LauncherPhase,
    /// Seconds from its start to it being ready (for the report).
    startup: Option<f64>,
    /// Why warm starts were turned off (for the report).
    cold_reason: Option<String>,
    /// Its process runs (or its session has not yet reaped it): the run
    /// waits for this to clear before it ends, leaving no zombie.
    running: bool,
}

impl LauncherSlot {
    /// The run is ending: it takes no more requests (it leaves once its
    /// workers have).
    pub(super) fn close(&mut self) {
        if matches!(self.phase, LauncherPhase::Active { .. }) {
            self.phase = LauncherPhase::Closed;
        }
    }

    /// Whether its process runs or is not yet reaped.
    pub(super) fn is_running(&self) -> bool {
        self.running
    }

    /// Whether it may still be asked for warm starts (neither off nor
    /// closed).
    pub(super) fn takes_requests(&self) -> bool {
        matches!(
            self.phase,
            LauncherPhase::Unused | LauncherPhase::Active { .. }
        )
    }

    /// Seconds from its start to it being ready, once it was.
    pub(super) fn startup(&self) -> Option<f64> {
        self.startup
    }

    /// Why the task's warm starts were turned off, if they were.
    pub(super) fn cold_reason(&self) -> Option<&str> {
        self.cold_reason.as_deref()
    }

    /// Warm starts are wanted: the request queue is made (the launcher
    /// starts at the next `launcher::start_wanted`), unless it exists or
    /// warm starts are over.
    pub(super) fn want(&mut self) {
        if matches!(self.phase, LauncherPhase::Unused) {
            let (tx, rx) = mpsc::unbounded_channel();
            self.phase = LauncherPhase::Active {
                requests: tx,
                to_start: Some(rx),
                pid: None,
            };
        }
    }

    /// Ask it for a warm start; a closed queue (its session ended, and
    /// with it warm starts) drops it, and the next tick starts that worker
    /// cold.
    pub(super) fn ask(&self, req: ForkRequest) {
        if let LauncherPhase::Active { requests, .. } = &self.phase {
            let _ = requests.send(LauncherRequest::Fork(req));
        }
    }

    /// The queue's receiving end, once, for the session that starts it.
    pub(super) fn take_to_start(&mut self) -> Option<mpsc::UnboundedReceiver<LauncherRequest>> {
        match &mut self.phase {
            LauncherPhase::Active { to_start, .. } => to_start.take(),
            _ => None,
        }
    }

    /// Its process started, as `pid`.
    pub(super) fn spawned(&mut self, pid: Option<u32>) {
        self.running = true;
        if let LauncherPhase::Active { pid: p, .. } = &mut self.phase {
            *p = pid;
        }
    }

    /// It loaded the function, `seconds` after it was started.
    pub(super) fn ready_after(&mut self, seconds: f64) {
        self.startup = Some(seconds);
    }

    /// Its process is gone and reaped.
    pub(super) fn reaped(&mut self) {
        self.running = false;
    }

    /// Warm starts are off for the rest of the run, for `reason` (the
    /// first reason is kept). Returns whether they were on until now.
    pub(super) fn turn_off(&mut self, reason: &str) -> bool {
        if matches!(self.phase, LauncherPhase::Off) {
            return false;
        }
        self.phase = LauncherPhase::Off;
        if self.cold_reason.is_none() {
            self.cold_reason = Some(reason.to_string());
        }
        true
    }
}
