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
//! block but a lock and a notify.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How much longer than the task's timeout the server waits before it
/// takes back the block of a worker it did not start: the client ends the
/// attempt at the timeout by its own clock, and this covers the time the
/// block took to reach it and a loaded machine's slow exit.
pub const UNMANAGED_GRACE: Duration = Duration::from_secs(5);

/// The exit status of a worker that ended its own attempt at the deadline.
pub const DEADLINE_EXIT_CODE: i32 = 76;

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
        }
    }

    /// A block was handed to this worker now.
    pub fn took(&self, spatial_id: u64) {
        let (lock, wake) = &*self.slot;
        if let Ok(mut s) = lock.lock() {
            s.held = Some((spatial_id, Instant::now() + self.timeout));
            wake.notify_one();
        }
    }

    /// The held block was reported.
    pub fn returned(&self) {
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
