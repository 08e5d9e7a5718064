//! What the server asks of a launcher (a task's, `server::launcher`, or a
//! job's node launcher, `server::jobs`): start a worker, or kill one it
//! started. Its own module because the launcher's conversation, the jobs
//! and a worker's slot all speak it, and none of them owns the others.

/// One warm start asked of a launcher (see `server::launcher`).
#[derive(Debug)]
pub(super) struct ForkRequest {
    /// The worker's id.
    pub worker_id: u32,
    /// Its `DAISY_CONTEXT`.
    pub context: String,
    /// Its stdout and stderr, passed to a local launcher; None for a job's
    /// launcher on another machine, which opens the worker's log files
    /// itself.
    pub outputs: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
}

/// What the server asks of a launcher.
#[derive(Debug)]
pub(super) enum LauncherRequest {
    /// Start a worker.
    Fork(ForkRequest),
    /// Kill a worker it started (a job's worker: the server cannot signal
    /// a process on another machine).
    Kill(u32),
}
