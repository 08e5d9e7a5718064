//! The hang-up watchdog of a managed worker's connection: [`HangUpWatch`].
//!
//! When a worker process is gone, the server closes the connections that
//! claim that worker (the server side of this lives in `server`). For a
//! local worker nothing is left to stop; but a worker that is only a local
//! handle on remote work (a Dask task behind `daisy._dask_worker`) leaves
//! the remote half running, and if that half is stuck in a block the
//! server has already reclaimed and handed to another worker, it would
//! keep computing (and writing) a block that is being redone elsewhere.
//!
//! So while a managed worker holds a block, a thread watches its
//! connection for the server's hang-up (`POLLRDHUP`, without reading, so
//! the connection's own reader is undisturbed); seeing it, the process
//! says why on stderr (the worker's log) and exits at once with
//! [`HUNG_UP_EXIT_CODE`]. A worker that holds no block needs no watch: its
//! next request fails on the closed connection. Linux only; elsewhere the
//! watch does nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The exit status of a worker process stopped by the watchdog.
pub const HUNG_UP_EXIT_CODE: i32 = 75;

/// Watches one connection while blocks are held; stops when dropped.
pub struct HangUpWatch {
    /// Blocks the worker holds now (the watch acts only when above 0).
    held: Arc<AtomicUsize>,
    #[cfg(target_os = "linux")]
    stop: Option<std::os::unix::net::UnixStream>,
    #[cfg(target_os = "linux")]
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HangUpWatch {
    /// Start watching the socket `fd` (which must stay open until this
    /// watch is dropped) of `worker_id`'s connection.
    pub fn start(fd: std::os::fd::RawFd, worker_id: u32) -> Self {
        let held = Arc::new(AtomicUsize::new(0));
        #[cfg(target_os = "linux")]
        {
            if let Ok((stop, wake)) = std::os::unix::net::UnixStream::pair() {
                let watched = held.clone();
                let thread = std::thread::Builder::new()
                    .name("daisy-hang-up-watch".into())
                    .spawn(move || watch(fd, wake, watched, worker_id))
                    .ok();
                return Self {
                    held,
                    stop: Some(stop),
                    thread,
                };
            }
            Self {
                held,
                stop: None,
                thread: None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (fd, worker_id);
            Self { held }
        }
    }

    /// The worker received a block.
    pub fn took_block(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
    }

    /// The worker reported a block (done or failed).
    pub fn returned_block(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

impl Drop for HangUpWatch {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        {
            // closing our end wakes the thread; join it before the
            // watched socket can be closed
            drop(self.stop.take());
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn watch(fd: i32, wake: std::os::unix::net::UnixStream, held: Arc<AtomicUsize>, worker_id: u32) {
    use std::os::fd::AsRawFd;
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLRDHUP,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll reads and writes the two pollfd entries we own; the
        // watched fd stays open until this thread is joined (see Drop).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 || fds[0].revents & libc::POLLNVAL != 0 {
            return; // the watch was dropped (or the socket is no more)
        }
        if fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            if held.load(Ordering::SeqCst) > 0 {
                eprintln!(
                    "daisy worker {worker_id}: the server closed this worker's connection while \
                     it held a block (the block timed out, or the worker's local handle was \
                     stopped); the block is being retried elsewhere, so this process exits now"
                );
                // nothing of this process may run on (the user's block is
                // stuck), nor what the block started
                crate::process_group::exit_with_group(HUNG_UP_EXIT_CODE);
            }
            return; // nothing held: the next request sees the closed connection
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn counts_blocks_and_stops_when_dropped() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let watch = HangUpWatch::start(std::os::fd::AsRawFd::as_raw_fd(&a), 1);
        watch.returned_block(); // never below zero
        assert_eq!(watch.held.load(Ordering::SeqCst), 0);
        watch.took_block();
        watch.took_block();
        watch.returned_block();
        assert_eq!(watch.held.load(Ordering::SeqCst), 1);
        b.write_all(b"data is not a hang-up").unwrap();
        watch.returned_block();
        // dropping joins the thread promptly (a hang-up while holding
        // would have ended this test process)
        let start = std::time::Instant::now();
        drop(watch);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_hang_up_while_holding_nothing_only_ends_the_watch() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let watch = HangUpWatch::start(std::os::fd::AsRawFd::as_raw_fd(&a), 2);
        drop(b); // the peer hangs up; nothing is held, so the process lives
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let finished = || watch.thread.as_ref().is_some_and(|t| t.is_finished());
        while !finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(finished(), "the watch ends once the connection is gone");
    }
}
