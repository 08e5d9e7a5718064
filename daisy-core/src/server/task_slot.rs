//! What the run keeps of one task beside the scheduler's counts and the
//! task's settings ([`TaskSlot`]): its workers' stops and starts (which
//! policy turns into a replacement, a cap or an abandonment), its
//! unmanaged clients and its launcher. Its fields are private: the staffing
//! loop and the connections change it through the methods below.

use super::launcher_slot::LauncherSlot;
use super::policy;
use crate::task_state::Abandonment;
use std::time::Instant;

/// What the run keeps of one task beside its scheduler state (the
/// scheduler's) and its settings (`config.tasks`): its workers' stops and
/// starts, its unmanaged clients and its launcher.
#[derive(Debug, Default)]
pub(super) struct TaskSlot {
    /// No worker start before this moment (a start failed for want of
    /// descriptors, processes or memory).
    start_after: Option<Instant>,
    /// Since when its worker starts have been failing.
    failing_since: Option<Instant>,
    /// Its workers that stopped unexpectedly, what `max_worker_restarts`
    /// caps (the task's `worker_restart_count` counts only those that were
    /// replaced, as daisy 2.0.0's does).
    deaths: u32,
    /// Of those, the workers that exited cleanly without taking a block
    /// (see [`policy::restart_limit`]).
    empty_exits: u32,
    /// Of those, the workers killed by a SIGKILL daisy did not send.
    killed: u32,
    /// Its workers that left on their own since it last had none alive
    /// (see [`policy::worker_cap`]).
    left: u32,
    /// Clients that connected to it without a worker id.
    unmanaged_clients: u64,
    /// Its launcher (warm starts), `server::launcher`'s to change.
    launcher: LauncherSlot,
}

impl TaskSlot {
    /// A client without a worker id connected to it.
    pub(super) fn client_joined(&mut self) {
        self.unmanaged_clients += 1;
    }

    /// The clients without a worker id that connected to it.
    pub(super) fn unmanaged_clients(&self) -> u64 {
        self.unmanaged_clients
    }

    /// Its launcher.
    pub(super) fn launcher(&self) -> &LauncherSlot {
        &self.launcher
    }

    /// Its launcher, for `server::launcher` and the run's end to change
    /// through the launcher's own methods.
    pub(super) fn launcher_mut(&mut self) -> &mut LauncherSlot {
        &mut self.launcher
    }

    /// Whether a worker may be started now (no start failure asks to
    /// wait).
    pub(super) fn may_start(&self, now: Instant) -> bool {
        self.start_after.is_none_or(|after| now >= after)
    }

    /// A worker started: failures before it are forgotten.
    pub(super) fn started(&mut self) {
        self.start_after = None;
        self.failing_since = None;
    }

    /// A start failed for want of a passing resource: no start before
    /// `retry`. Returns since when starts have been failing.
    pub(super) fn start_failed(&mut self, now: Instant, retry: Instant) -> Instant {
        self.start_after = Some(retry);
        *self.failing_since.get_or_insert(now)
    }

    /// One of its workers stopped unexpectedly (`took_nothing`: cleanly,
    /// without taking a block; `killed`: by a SIGKILL daisy did not send).
    /// Returns whether a replacement starts, which is policy's to say
    /// ([`policy::replaced`]).
    pub(super) fn worker_stopped(
        &mut self,
        took_nothing: bool,
        killed: bool,
        max_worker_restarts: u32,
    ) -> bool {
        self.deaths += 1;
        if took_nothing {
            self.empty_exits += 1;
        }
        if killed {
            self.killed += 1;
        }
        policy::replaced(self.deaths, max_worker_restarts)
    }

    /// One of its workers left on its own (see [`policy::worker_cap`]).
    pub(super) fn worker_left(&mut self) {
        self.left += 1;
    }

    /// How many workers it may have alive now, `alive` being alive.
    pub(super) fn worker_cap(&mut self, max_workers: u32, alive: u32) -> u32 {
        if alive == 0 {
            self.left = 0; // none is left: it starts afresh
        }
        policy::worker_cap(max_workers, self.left, alive)
    }

    /// Why the task is abandoned for its workers' stops, if it is
    /// ([`policy::restart_limit`]).
    pub(super) fn restart_limit(&self, max_worker_restarts: u32) -> Option<Abandonment> {
        policy::restart_limit(
            self.deaths,
            max_worker_restarts,
            self.empty_exits,
            self.killed,
        )
        .map(|(reason, next)| Abandonment { reason, next })
    }
}
