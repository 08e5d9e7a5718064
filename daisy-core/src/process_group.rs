//! A worker and everything it started end together.
//!
//! Every worker leads a process group of its own (cold workers are spawned
//! with one, warm ones call `setpgid` after the fork), and what a block
//! starts in the background (`subprocess.Popen("sleep 600 &")`, a helper
//! server) joins that group. Two ends kill the group:
//!
//! - the server kills it when it sees the worker exit, and so at the end of
//!   every run (`server::on_worker_exit`): a normal run leaves nothing;
//! - a worker dies with its parent (the driver, or the launcher that forked
//!   it) by `PR_SET_PDEATHSIG`, and [`group_dies_with_parent`] makes that
//!   signal one whose handler kills the whole group, not only the worker:
//!   a driver killed with SIGKILL, which can clean nothing up itself,
//!   leaves nothing either. The handler calls only `kill(2)`, which is
//!   async-signal-safe, and runs whatever the interpreter is doing (it is a
//!   native handler, not a Python one).
//!
//! The signal is [`PARENT_DEATH_SIGNAL`]'s offset into the real-time
//! signals, which no library daisy runs beside is known to use; a process
//! that moved itself into a group of its own (`setsid`, a daemon) has left
//! on purpose and is not followed.

/// Offset of the parent-death signal from `SIGRTMIN`.
pub const PARENT_DEATH_SIGNAL: i32 = 3;

fn parent_death_signal() -> libc::c_int {
    libc::SIGRTMIN() + PARENT_DEATH_SIGNAL
}

/// What the worker's log says when its parent died.
const PARENT_DIED: &[u8] =
    b"daisy worker: its parent (the driver, or the launcher that forked it) \
died; this worker and every process it started end now\n";

extern "C" fn end_group(_signal: libc::c_int) {
    // SAFETY: write(2) and kill(2) are async-signal-safe; the message is a
    // static buffer; 0 names this process's group
    unsafe {
        libc::write(2, PARENT_DIED.as_ptr().cast(), PARENT_DIED.len());
        libc::kill(0, libc::SIGKILL);
    }
}

/// End this process at once (`_exit(code)`), and with it its process
/// group if it leads one (a worker and what its blocks started): then the
/// whole group, this process included, is killed with SIGKILL.
pub fn exit_with_group(code: i32) -> ! {
    // SAFETY: getpgrp, getpid, kill and _exit have no memory-safety
    // preconditions and end the process without running anything of it
    unsafe {
        if libc::getpgrp() == libc::getpid() {
            libc::kill(0, libc::SIGKILL);
        }
        libc::_exit(code)
    }
}

/// In a worker leading its own process group: when its parent dies, the
/// whole group is killed (see the module docs). If the parent is already
/// gone (this process was reparented), the group is killed now. A worker
/// that leads a session of its own was started detached by its spawner
/// (its parent is only a local handle of work elsewhere): it is left as it
/// is, and leaves on the server's hang-up instead (`hang_up`).
pub fn group_dies_with_parent() -> std::io::Result<()> {
    // SAFETY: getsid and getpid have no memory-safety preconditions
    if unsafe { libc::getsid(0) == libc::getpid() } {
        return Ok(());
    }
    let signal = parent_death_signal();
    // SAFETY: sigaction with a handler that only calls kill(2), and prctl
    // and getppid, which have no memory-safety preconditions
    unsafe {
        let parent = libc::getppid();
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = end_group as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if parent == 1 || libc::getppid() != parent {
            end_group(signal);
        }
    }
    Ok(())
}
