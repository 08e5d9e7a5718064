//! Where workers' output goes when the run copies it (log mode "both":
//! each worker's log file and the driver's console). [`OutputWriter`] owns
//! the run's one writer thread; [`tee`] reads one worker pipe on the
//! server's thread and hands what it read to that writer.
//!
//! ## Why a thread of its own
//! Writing is blocking I/O the server does not control: the driver's
//! stdout may be a pipe nobody reads for a while (`python run.py | less`,
//! a notebook kernel, a slow `tee` on a shared filesystem), and a log file
//! may sit on a stalled NFS mount. Written on the server's thread, as it
//! was, one full pipe stalled every acquire of every task and the timeout
//! sweep. Here the server's thread only reads pipes (asynchronously) and
//! queues what it read; the writer thread does every write, in order.
//!
//! ## Bounded
//! The queue holds at most [`QUEUE_CHUNKS`] reads of at most
//! [`TEE_BUFFER`] bytes each (4 MiB). When it is full the tee of the
//! worker that wants to queue more waits, so that worker's own pipe fills
//! and its next write blocks: a worker printing faster than its output can
//! be written is slowed, as it would be writing to a full terminal, and no
//! other worker is. Nothing is dropped.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Size of the buffer [`tee`] copies a worker's output through: one pipe's
/// worth (64 KiB on Linux), so a burst is copied in one read.
pub(super) const TEE_BUFFER: usize = 64 * 1024;

/// How many reads the writer's queue holds before a tee waits: 4 MiB at
/// most, enough to absorb any burst a console keeps up with.
pub(super) const QUEUE_CHUNKS: usize = 64;

/// Which of the driver's streams a worker's stream is copied to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Console {
    /// The driver's stdout (a worker's stdout).
    Stdout,
    /// The driver's stderr (a worker's stderr).
    Stderr,
    /// Neither (the log file only: a test's).
    #[cfg(test)]
    Nowhere,
}

/// One read of a worker's output, on its way to the writer thread.
struct Chunk {
    file: Arc<File>,
    console: Console,
    bytes: Vec<u8>,
}

/// Where a tee sends what it read (cloned into each tee).
#[derive(Clone)]
pub(super) struct OutputQueue(mpsc::Sender<Chunk>);

impl OutputQueue {
    /// A queue nothing reads (for tests whose workers write to files).
    #[cfg(test)]
    pub fn unused() -> Self {
        Self(mpsc::channel(1).0)
    }
}

/// The run's writer thread and its queue.
pub(super) struct OutputWriter {
    queue: OutputQueue,
    thread: std::thread::JoinHandle<()>,
}

impl OutputWriter {
    /// Start the writer thread.
    pub(super) fn start() -> std::io::Result<Self> {
        let (tx, mut rx) = mpsc::channel::<Chunk>(QUEUE_CHUNKS);
        let thread = std::thread::Builder::new()
            .name("daisy-output".into())
            .spawn(move || {
                while let Some(chunk) = rx.blocking_recv() {
                    write(&chunk);
                }
            })?;
        Ok(Self {
            queue: OutputQueue(tx),
            thread,
        })
    }

    /// The queue tees send to.
    pub(super) fn queue(&self) -> OutputQueue {
        self.queue.clone()
    }

    /// Wait until everything queued is written: call once every tee has
    /// ended (the runtime that ran them is gone), so the queue's last
    /// sender goes with this one.
    pub(super) fn finish(self) {
        drop(self.queue);
        if self.thread.join().is_err() {
            tracing::warn!("the thread writing workers' output panicked");
        }
    }
}

/// Write one chunk to its log file, then to the driver's console. A
/// failed write is not retried (the file or the console is gone); the
/// other still gets its copy.
fn write(chunk: &Chunk) {
    let _ = (&*chunk.file).write_all(&chunk.bytes);
    let _ = match chunk.console {
        Console::Stdout => std::io::stdout().write_all(&chunk.bytes),
        Console::Stderr => std::io::stderr().write_all(&chunk.bytes),
        #[cfg(test)]
        Console::Nowhere => Ok(()),
    };
}

/// Copy a worker's output pipe into its log file and the driver's stdout
/// (or stderr), through the writer thread: reads here, never writes.
pub(super) async fn tee(
    mut pipe: impl tokio::io::AsyncRead + Unpin,
    file: File,
    console: Console,
    queue: OutputQueue,
) {
    use tokio::io::AsyncReadExt;
    let file = Arc::new(file);
    let mut buf = vec![0u8; TEE_BUFFER];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = Chunk {
                    file: file.clone(),
                    console,
                    bytes: buf[..n].to_vec(),
                };
                if queue.0.send(chunk).await.is_err() {
                    return; // the run is over
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_a_worker_printed_is_in_its_log_when_the_writer_finishes() {
        let dir = std::env::temp_dir().join(format!("daisy-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("worker_1.err");
        let writer = OutputWriter::start().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        // more than the queue holds, in reads of at most a pipe's worth
        let line = "y".repeat(999) + "\n";
        let total = QUEUE_CHUNKS * TEE_BUFFER * 2 / line.len();
        local.block_on(&rt, async {
            let (mut write, read) = tokio::net::unix::pipe::pipe().unwrap();
            let file = File::create(&path).unwrap();
            let copy = tokio::task::spawn_local(tee(read, file, Console::Nowhere, writer.queue()));
            use tokio::io::AsyncWriteExt;
            for _ in 0..total {
                write.write_all(line.as_bytes()).await.unwrap();
            }
            drop(write);
            copy.await.unwrap();
        });
        drop(local);
        writer.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), total * line.len());
        assert!(text.lines().all(|l| l.len() == 999));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
