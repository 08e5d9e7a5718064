//! The task `timeout` for a worker the server did not start (one a user's
//! own `sbatch` or `srun` runs, connecting with `daisy.Client()`): the
//! server cannot kill it, so the client ends its own attempt.
//!
//! A managed worker whose block runs past the task's timeout is killed by
//! the server, which then retries the block. An unmanaged one kept running
//! beside the retry and beside its conflicting neighbours, which broke the
//! `read_write_conflict` guarantee. Now the server tells such a client the
//! task's timeout in its welcome, and the client's [`BlockDeadline`] (one
//! thread, asleep on a condition variable) ends the process and what it
//! started (`process_group::exit_with_group`) when a block is still held at
//! its deadline, saying so in the log. The server, for its part, gives an
//! unmanaged worker's block [`UNMANAGED_GRACE`] beyond the timeout before
//! it takes the block back: by then the attempt is gone (or its
//! connection closed earlier, which reclaims the block at once), so
//! neither the retry nor a neighbour runs beside it. Nothing happens per
//! block but a lock, a notify and two `timer_settime` calls.
//!
//! ## A fence the kernel keeps
//! The watchdog is a thread: a worker stopped in the middle of a block
//! (SIGSTOP, a suspended job step) and continued after its retry had run
//! raced it at SIGCONT, and the user's thread won in 2 of 3 runs, writing
//! one more piece of a block that was no longer its. So each held block
//! also arms a POSIX timer ([`KernelFence`], `CLOCK_MONOTONIC`, which runs
//! while the process is stopped) that sends SIGKILL [`FENCE_AFTER`] past
//! the deadline: the kernel ends a stopped process on the spot, before any
//! of its threads runs again. In a process that runs, the watchdog acts
//! first, at the deadline, and says why; the fence is only for one that
//! did not run. It ends this process, not what the block started (those
//! are ended by the watchdog's group kill, or by the server's hang-up of
//! the connection).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How much longer than the task's timeout the server waits before it
/// takes back the block of a worker it did not start: the client ends the
/// attempt at the timeout by its own clock, and this covers the time the
/// block took to reach it and a loaded machine's slow exit.
pub const UNMANAGED_GRACE: Duration = Duration::from_secs(5);

/// The exit status of a worker that ended its own attempt at the deadline.
pub const DEADLINE_EXIT_CODE: i32 = 76;

/// How long past a block's deadline the kernel fence kills a process that
/// did not end its attempt itself (it was stopped): long enough for the
/// watchdog to act first in a running process, well within
/// [`UNMANAGED_GRACE`], so the process is gone before the server takes the
/// block back and a retry can start.
pub const FENCE_AFTER: Duration = Duration::from_secs(1);

/// A POSIX timer that sends this process SIGKILL when it expires (see the
/// module's doc). Armed when a block is taken, disarmed when it returns.
struct KernelFence {
    timer: libc::timer_t,
}

// SAFETY: a timer id is a plain handle the kernel keys by process; any
// thread may arm, disarm or delete it
unsafe impl Send for KernelFence {}
// SAFETY: as for Send: the kernel serialises the calls on one timer
unsafe impl Sync for KernelFence {}

impl KernelFence {
    /// A disarmed timer, or None where the system has none to give.
    fn new() -> Option<Self> {
        // SAFETY: a zeroed sigevent is valid; the fields set are the ones
        // SIGEV_SIGNAL reads
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_SIGNAL;
        event.sigev_signo = libc::SIGKILL;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call
        let made = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) };
        (made == 0).then_some(Self { timer })
    }

    /// Fire `after` from now (zero: disarm).
    fn set(&self, after: Duration) {
        let value = libc::timespec {
            tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(after.subsec_nanos()),
        };
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: value,
        };
        // SAFETY: the timer is this process's, the spec valid
        unsafe { libc::timer_settime(self.timer, 0, &spec, std::ptr::null_mut()) };
    }
}

impl Drop for KernelFence {
    fn drop(&mut self) {
        // SAFETY: the timer is this process's and deleted once
        unsafe { libc::timer_delete(self.timer) };
    }
}

#[derive(Default)]
struct Slot {
    /// The held block's spatial id and deadline, if one is held.
    held: Option<(u64, Instant)>,
    /// The client is gone: the thread ends.
    closed: bool,
}

/// Ends this process when a block is held past its deadline.
pub struct BlockDeadline {
    timeout: Duration,
    slot: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    fence: Option<KernelFence>,
}

impl BlockDeadline {
    /// A watchdog for blocks that may each run `timeout`.
    pub fn start(timeout: Duration, task_id: String) -> Self {
        let slot = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let watched = slot.clone();
        let thread = std::thread::Builder::new()
            .name("daisy-block-deadline".into())
            .spawn(move || watch(&watched, timeout, &task_id))
            .ok();
        Self {
            timeout,
            slot,
            thread,
            fence: KernelFence::new(),
        }
    }

    /// A block was handed to this worker now.
    pub fn took(&self, spatial_id: u64) {
        let (lock, wake) = &*self.slot;
        if let Ok(mut s) = lock.lock() {
            s.held = Some((spatial_id, Instant::now() + self.timeout));
            wake.notify_one();
        }
        if let Some(fence) = &self.fence {
            fence.set(self.timeout + FENCE_AFTER);
        }
    }

    /// The held block was reported.
    pub fn returned(&self) {
        if let Some(fence) = &self.fence {
            fence.set(Duration::ZERO);
        }
        let (lock, wake) = &*self.slot;
        if let Ok(mut s) = lock.lock() {
            s.held = None;
            wake.notify_one();
        }
    }
}

impl Drop for BlockDeadline {
    fn drop(&mut self) {
        {
            let (lock, wake) = &*self.slot;
            if let Ok(mut s) = lock.lock() {
                s.closed = true;
                wake.notify_one();
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(slot: &(Mutex<Slot>, Condvar), timeout: Duration, task_id: &str) {
    let (lock, wake) = slot;
    let Ok(mut s) = lock.lock() else {
        return;
    };
    loop {
        if s.closed {
            return;
        }
        match s.held {
            None => {
                s = match wake.wait(s) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            }
            Some((spatial_id, deadline)) => {
                let now = Instant::now();
                if now >= deadline {
                    eprintln!(
                        "daisy worker: block {spatial_id} of task {task_id:?} was still running \
                         after the task's timeout of {timeout:?}; this worker ends the attempt \
                         (and every process it started) now, and the server retries the block"
                    );
                    crate::process_group::exit_with_group(DEADLINE_EXIT_CODE);
                }
                s = match wake.wait_timeout(s, deadline - now) {
                    Ok((s, _)) => s,
                    Err(_) => return,
                };
            }
        }
    }
}
