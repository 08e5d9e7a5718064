//! The worker side of the wire protocol: [`Client`], a blocking connection
//! to the server used by every worker kind (daisy's worker processes,
//! worker functions, hand-written cluster workers).
//!
//! Each call is one request and its reply, run on a small single-threaded
//! tokio runtime owned by the client, so the framing is the same
//! length-delimited codec the server uses. TCP_NODELAY is set: without it a
//! request/reply exchange can stall for tens of milliseconds (Nagle's
//! algorithm meeting delayed ACKs).
//!
//! Releases are pipelined: a release (or failure report) is sent at once,
//! but its acknowledgement is read only with the reply to the next request
//! (or at disconnect). A worker's release and its next acquire thus cost one
//! network round trip instead of two. The server handles a connection's
//! frames in order, so the block is released before the next one is
//! handed out; a release the server refused (the block was reclaimed after
//! a timeout) is logged when its answer arrives.
//!
//! A managed worker's client (one with a worker id) also keeps a
//! [`HangUpWatch`] on its connection: while it holds a block, the server
//! closing the connection ends the process (see `hang_up`).
//!
//! A reply is awaited by polling the socket for up to [`REPLY_SPIN`]
//! before sleeping in the kernel (see that constant for why).
//!
//! ## Measuring blocks
//! When the task has resource tracking (the server says so in its welcome)
//! and the client was asked to measure ([`Client::measure_blocks`]), every
//! block is measured from its acquire to its release by the core's
//! [`BlockProfiler`]: the start snapshot is taken while the acquire is in
//! flight (it overlaps the server's round trip instead of adding to it),
//! the wall clock restarts when the block arrives, and the figures settle
//! on the block at its release unless a narrower measurement
//! (`profile_block`) is already attached.

use crate::block::Block;
use crate::block_deadline::BlockDeadline;
use crate::block_profile::BlockProfiler;
use crate::error::DaisyError;
use crate::gpu_profile::GpuProfiler;
use crate::hang_up::HangUpWatch;
use crate::liveness;
use crate::protocol::{self, ClientMessage, ServerMessage};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// How long connecting to the server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a daisy server for one task.
pub struct Client {
    /// A managed worker's hang-up watch (declared before `conn`, so it is
    /// dropped, and its thread joined, before the socket closes).
    watch: Option<HangUpWatch>,
    rt: tokio::runtime::Runtime,
    conn: Framed<Box<dyn protocol::Stream>, LengthDelimitedCodec>,
    /// Releases sent whose acknowledgement has not been read yet.
    pending_acks: usize,
    /// Whether the task wants its blocks measured.
    resource_tracking: bool,
    /// Whether those measurements include GPU figures.
    gpu_tracking: bool,
    /// Measures every block from acquire to release (None: this client
    /// does not measure).
    profiler: Option<BlockProfiler>,
    /// The connection's socket, watched while a reply is awaited (see
    /// [`REPLY_SPIN`]).
    fd: std::os::fd::RawFd,
    /// Where the server is, and how long it is given to answer (TCP
    /// keepalive, see `crate::liveness`): for the error a dead one gives.
    server: String,
    liveness: Duration,
    /// The task's timeout, enforced here for a worker the server did not
    /// start (see `block_deadline`); None otherwise.
    deadline: Option<BlockDeadline>,
}

/// How long a client watches its socket for a reply before it sleeps in
/// the kernel. The server answers in tens of microseconds, and a process
/// that sleeps for that long pays to be woken: on a virtual machine whose
/// idle CPUs halt, each wake costs the host an interrupt and the worker
/// tens of microseconds (10^4 no-op blocks on one worker: 0.85 s when
/// both sides slept, 0.3 s when another process kept the CPUs awake).
/// Watching costs at most this much CPU per request, nothing against a
/// real block.
pub const REPLY_SPIN: Duration = Duration::from_micros(200);

/// Watch `fd` until it is readable (or closed) or `budget` has passed,
/// without sleeping: see [`REPLY_SPIN`].
fn spin_until_readable(fd: std::os::fd::RawFd, budget: Duration) {
    let start = std::time::Instant::now();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while start.elapsed() < budget {
        // SAFETY: one valid pollfd, a zero timeout
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n != 0 {
            return; // readable, closed, or an error the read will report
        }
        // the CPU goes to any other runnable process first
        std::thread::yield_now();
    }
}

/// The first wait before connecting again after the server closed a new
/// connection unanswered; it doubles up to [`MAX_REFUSED_BACKOFF`].
const REFUSED_BACKOFF: Duration = Duration::from_millis(20);

/// The longest wait between such attempts: a refused worker is back within
/// half a second of the server having room.
const MAX_REFUSED_BACKOFF: Duration = Duration::from_millis(500);

impl Client {
    /// Connect and say hello with the run's token.
    ///
    /// A server answers [`protocol::BUSY`] when too many connections are
    /// waiting to say hello at once (`MAX_PENDING_HELLOS`: a thousand
    /// workers starting together meet it); the client then tries again,
    /// with growing waits, for up to [`CONNECT_TIMEOUT`]. Any other
    /// refusal (a wrong token, an unknown task) is final.
    pub fn connect(
        host: &str,
        port: u16,
        token: &str,
        task_id: &str,
        worker_id: Option<u32>,
    ) -> Result<Self, DaisyError> {
        Self::connect_with(
            host,
            port,
            token,
            task_id,
            worker_id,
            liveness::DEFAULT_TIMEOUT,
        )
    }

    /// [`Client::connect`], giving up on a server over TCP that stops
    /// answering (its host died, the network is cut) after `liveness`:
    /// the run's `liveness_timeout`, which workers find in their context.
    pub fn connect_with(
        host: &str,
        port: u16,
        token: &str,
        task_id: &str,
        worker_id: Option<u32>,
        liveness: Duration,
    ) -> Result<Self, DaisyError> {
        let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
        let mut wait = REFUSED_BACKOFF;
        loop {
            match Self::connect_once(host, port, token, task_id, worker_id, liveness) {
                Err(DaisyError::Refused(why))
                    if why == protocol::BUSY && std::time::Instant::now() + wait < deadline =>
                {
                    // spread the retries of many workers refused together
                    let noise = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| u64::from(d.subsec_nanos() % 16));
                    let jitter = noise * wait.as_millis() as u64 / 16;
                    std::thread::sleep(wait + Duration::from_millis(jitter));
                    wait = (wait * 2).min(MAX_REFUSED_BACKOFF);
                }
                other => return other,
            }
        }
    }

    fn connect_once(
        host: &str,
        port: u16,
        token: &str,
        task_id: &str,
        worker_id: Option<u32>,
        liveness: Duration,
    ) -> Result<Self, DaisyError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DaisyError::connection)?;
        // on the server's machine, its Unix-domain socket; else TCP
        use std::os::fd::AsRawFd;
        let local =
            protocol::connect_local_socket(&protocol::local_socket_name(token)).and_then(|s| {
                s.set_nonblocking(true).ok()?;
                let _guard = rt.enter();
                tokio::net::UnixStream::from_std(s).ok()
            });
        let (stream, fd): (Box<dyn protocol::Stream>, _) = match local {
            Some(unix) => {
                let fd = unix.as_raw_fd();
                (Box::new(unix), fd)
            }
            None => {
                let tcp = rt
                    .block_on(async {
                        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
                            .await
                            .map_err(|_| {
                                std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    format!("no daisy server answered at {host}:{port}"),
                                )
                            })?
                    })
                    .map_err(|e| {
                        if e.kind() == std::io::ErrorKind::ConnectionRefused {
                            DaisyError::ServerGone(format!("{host}:{port}"))
                        } else {
                            DaisyError::connection(e)
                        }
                    })?;
                tcp.set_nodelay(true).map_err(DaisyError::connection)?;
                liveness::watch(&tcp, liveness).map_err(DaisyError::connection)?;
                let fd = tcp.as_raw_fd();
                (Box::new(tcp), fd)
            }
        };
        let mut client = Self {
            watch: worker_id.map(|id| HangUpWatch::start(fd, id)),
            rt,
            conn: Framed::new(stream, protocol::codec()),
            pending_acks: 0,
            resource_tracking: false,
            gpu_tracking: false,
            profiler: None,
            fd,
            server: format!("the daisy server at {host}:{port}"),
            liveness,
            deadline: None,
        };
        match client.request(&ClientMessage::Hello {
            token: token.to_string(),
            task_id: task_id.to_string(),
            worker_id,
        })? {
            ServerMessage::Welcome {
                resource_tracking,
                gpu_tracking,
                block_timeout_ms,
                server_pid,
            } => {
                client.resource_tracking = resource_tracking;
                client.gpu_tracking = gpu_tracking;
                // never in the driver's own process (reached over TCP,
                // where the server cannot tell)
                client.deadline = block_timeout_ms
                    .filter(|_| server_pid != std::process::id())
                    .map(|ms| BlockDeadline::start(Duration::from_millis(ms), task_id.to_string()));
                Ok(client)
            }
            ServerMessage::Error { message } => Err(DaisyError::Refused(message)),
            other => Err(DaisyError::Protocol(format!(
                "expected a welcome, got {other:?}"
            ))),
        }
    }

    /// Send one message (flushed at once).
    fn send(&mut self, msg: &ClientMessage) -> Result<(), DaisyError> {
        let bytes = protocol::encode(msg).map_err(|e| DaisyError::Protocol(e.to_string()))?;
        let conn = &mut self.conn;
        self.rt
            .block_on(SinkExt::<tokio_util::bytes::Bytes>::send(
                conn,
                bytes.into(),
            ))
            .map_err(|e| self.lost(e))
    }

    /// The error of a connection that failed: in words, where the server
    /// stopped answering.
    fn lost(&self, e: std::io::Error) -> DaisyError {
        match liveness::explain(&e, &self.server, self.liveness) {
            Some(why) => DaisyError::Connection(why),
            None => DaisyError::connection(e),
        }
    }

    /// Read one reply.
    fn receive(&mut self) -> Result<ServerMessage, DaisyError> {
        if self.conn.read_buffer().is_empty() {
            spin_until_readable(self.fd, REPLY_SPIN);
        }
        let conn = &mut self.conn;
        match self.rt.block_on(conn.next()) {
            Some(Ok(frame)) => {
                protocol::decode(&frame).map_err(|e| DaisyError::Protocol(e.to_string()))
            }
            Some(Err(e)) => Err(self.lost(e)),
            None => Err(DaisyError::Connection(
                "the daisy server closed the connection".into(),
            )),
        }
    }

    /// Read the acknowledgements of pipelined releases.
    fn drain_acks(&mut self) -> Result<(), DaisyError> {
        while self.pending_acks > 0 {
            self.pending_acks -= 1;
            match self.receive()? {
                ServerMessage::ReleaseAck => {}
                ServerMessage::Error { message } => {
                    tracing::warn!("the server refused a release: {message}");
                }
                other => {
                    return Err(DaisyError::Protocol(format!(
                        "expected a release acknowledgement, got {other:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Send a request and read its reply (after any pending acks).
    fn request(&mut self, msg: &ClientMessage) -> Result<ServerMessage, DaisyError> {
        self.send(msg)?;
        self.drain_acks()?;
        self.receive()
    }

    /// A block's report (release or failure) was sent: its acknowledgement
    /// is due, and the worker no longer holds it.
    fn reported_block(&mut self) {
        self.pending_acks += 1;
        if let Some(watch) = &self.watch {
            watch.returned_block();
        }
        if let Some(deadline) = &self.deadline {
            deadline.returned();
        }
    }

    /// Whether the task wants every block measured (resource tracking).
    pub fn wants_measurements(&self) -> bool {
        self.resource_tracking
    }

    /// Measure every block from now on, if the task wants measurements
    /// (`on`: daisy's own clients; a stand-in for a hand-written client
    /// passes false). Returns whether blocks are measured.
    ///
    /// Where the task also wants GPU figures, NVML is loaded here, once per
    /// worker; if it cannot be, the reason goes to the server as a note
    /// (pipelined like a release: no round trip) and the GPU figures stay
    /// NaN / 0.
    pub fn measure_blocks(&mut self, on: bool) -> Result<bool, DaisyError> {
        self.profiler = (on && self.resource_tracking).then(BlockProfiler::new);
        if self.gpu_tracking
            && let Some(p) = self.profiler.take()
        {
            match GpuProfiler::open() {
                Ok(gpu) => self.profiler = Some(p.with_gpu(gpu)),
                Err(text) => {
                    self.profiler = Some(p);
                    self.send(&ClientMessage::Note { text })?;
                    self.pending_acks += 1; // answered like a release
                }
            }
        }
        Ok(self.profiler.is_some())
    }

    /// Say something the run report should say once for the task (see
    /// [`ClientMessage::Note`]): pipelined like a release, no round trip.
    pub fn note(&mut self, text: String) -> Result<(), DaisyError> {
        self.send(&ClientMessage::Note { text })?;
        self.pending_acks += 1; // answered like a release
        Ok(())
    }

    /// Settle this client's measurement on a block it is about to report
    /// (the reports do it themselves; a caller that keeps its own copy of
    /// the block calls it first to see the figures). Idempotent.
    pub fn settle(&mut self, block: &mut Block) {
        if let Some(p) = self.profiler.as_mut() {
            p.stop_into(&mut block.stats);
        }
    }

    /// The next block, or `None` when the task has no more for this worker.
    pub fn acquire_block(&mut self) -> Result<Option<Block>, DaisyError> {
        self.send(&ClientMessage::AcquireBlock)?;
        // the start snapshot is taken while the server answers
        if let Some(p) = self.profiler.as_mut() {
            p.start();
        }
        self.drain_acks()?;
        let reply = self.receive();
        let block = match reply? {
            ServerMessage::SendBlock { block } => {
                if let Some(watch) = &self.watch {
                    watch.took_block();
                }
                if let Some(deadline) = &self.deadline {
                    deadline.took(block.spatial_id);
                }
                Some(block)
            }
            ServerMessage::NoMoreBlocks => None,
            ServerMessage::Error { message } => return Err(DaisyError::Refused(message)),
            other => {
                return Err(DaisyError::Protocol(format!("unexpected reply {other:?}")));
            }
        };
        if let Some(p) = self.profiler.as_mut() {
            if block.is_some() {
                p.restart_wall(); // the wait for the block is not its time
            } else {
                let _ = p.stop(); // nothing to measure
            }
        }
        Ok(block)
    }

    /// Report a block (done, or failed with `error`) and ask for the next
    /// one in a single write: what a worker does between two blocks.
    pub fn release_and_acquire(
        &mut self,
        mut block: Block,
        error: Option<String>,
    ) -> Result<Option<Block>, DaisyError> {
        self.settle(&mut block);
        let report = match error {
            None => ClientMessage::ReleaseBlock { block },
            Some(error) => ClientMessage::BlockFailed {
                block,
                error: protocol::cap_error_text(error),
            },
        };
        let bytes = protocol::encode(&report).map_err(|e| DaisyError::Protocol(e.to_string()))?;
        let conn = &mut self.conn;
        self.rt
            .block_on(SinkExt::<tokio_util::bytes::Bytes>::feed(
                conn,
                bytes.into(),
            ))
            .map_err(DaisyError::connection)?;
        self.reported_block();
        self.acquire_block()
    }

    /// Report a block done (or failed, if its status says so). Sent at
    /// once; acknowledged with the next request.
    pub fn release_block(&mut self, mut block: Block) -> Result<(), DaisyError> {
        self.settle(&mut block);
        self.send(&ClientMessage::ReleaseBlock { block })?;
        self.reported_block();
        Ok(())
    }

    /// Report a block failed with an error text. Sent at once;
    /// acknowledged with the next request.
    pub fn block_failed(&mut self, mut block: Block, error: String) -> Result<(), DaisyError> {
        self.settle(&mut block);
        self.send(&ClientMessage::BlockFailed {
            block,
            error: protocol::cap_error_text(error),
        })?;
        self.reported_block();
        Ok(())
    }

    /// Say goodbye and close.
    pub fn disconnect(mut self) {
        // make sure every release was recorded before the connection closes
        let _ = self.drain_acks();
        if let Ok(bytes) = protocol::encode(&ClientMessage::Disconnect) {
            let conn = &mut self.conn;
            let _ = self.rt.block_on(async {
                SinkExt::<tokio_util::bytes::Bytes>::send(conn, bytes.into()).await?;
                SinkExt::<tokio_util::bytes::Bytes>::close(conn).await
            });
        }
    }
}

#[cfg(test)]
mod tests {
    //! The client's side of the conversation against a scripted server on
    //! loopback TCP (no time is waited out: every step is a message).
    use super::*;
    use crate::block::{BlockKey, BlockStatus};
    use crate::geometry::{Coord, Roi};
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// The scripted server's end of one connection.
    struct Wire<'a> {
        rt: &'a tokio::runtime::Runtime,
        conn: Framed<tokio::net::TcpStream, LengthDelimitedCodec>,
    }

    /// What the scripted server heard, message by message, in order.
    struct Heard(mpsc::Receiver<ClientMessage>);

    impl Heard {
        fn all(self) -> Vec<ClientMessage> {
            self.0.iter().collect()
        }
    }

    /// A server on loopback that accepts `connections` connections in turn
    /// and runs `script` on each (its index, the wire, a way to note what
    /// it heard).
    fn scripted(
        connections: usize,
        script: impl Fn(usize, &mut Wire<'_>, &dyn Fn(ClientMessage) -> ClientMessage) + Send + 'static,
    ) -> (u16, Heard, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            for i in 0..connections {
                let (stream, _) = listener.accept().unwrap();
                stream.set_nonblocking(true).unwrap();
                let conn = {
                    let _guard = rt.enter();
                    Framed::new(
                        tokio::net::TcpStream::from_std(stream).unwrap(),
                        protocol::codec(),
                    )
                };
                let mut wire = Wire { rt: &rt, conn };
                let note = |m: ClientMessage| {
                    let _ = tx.send(m.clone());
                    m
                };
                script(i, &mut wire, &note);
            }
        });
        (port, Heard(rx), server)
    }

    fn read(wire: &mut Wire<'_>) -> ClientMessage {
        let frame = wire.rt.block_on(wire.conn.next()).unwrap().unwrap();
        protocol::decode(&frame).unwrap()
    }

    fn write(wire: &mut Wire<'_>, msg: &ServerMessage) {
        let bytes = protocol::encode(msg).unwrap();
        wire.rt
            .block_on(SinkExt::<tokio_util::bytes::Bytes>::send(
                &mut wire.conn,
                bytes.into(),
            ))
            .unwrap();
    }

    fn welcome() -> ServerMessage {
        ServerMessage::Welcome {
            resource_tracking: false,
            gpu_tracking: false,
            block_timeout_ms: None,
            server_pid: 0,
        }
    }

    fn block(spatial_id: u64) -> Block {
        let roi = Roi::from_slices(&[0], &[10]).unwrap();
        Block {
            key: BlockKey {
                task: 0,
                index: spatial_id,
            },
            spatial_id,
            position: Coord::new(&[0]).unwrap(),
            read_roi: roi,
            write_roi: roi,
            requested_write_roi: roi,
            status: BlockStatus::Created,
            stats: None,
        }
    }

    fn connect(port: u16) -> Result<Client, DaisyError> {
        // a token no local socket is named after: the client goes by TCP
        Client::connect(
            "127.0.0.1",
            port,
            &protocol::new_token().unwrap(),
            "a",
            None,
        )
    }

    #[test]
    fn a_release_rides_with_the_next_request_and_its_ack_is_read_with_the_reply() {
        let (port, heard, server) = scripted(1, |_, wire, note| {
            note(read(wire)); // hello
            write(wire, &welcome());
            note(read(wire)); // acquire
            write(wire, &ServerMessage::SendBlock { block: block(3) });
            // the release and the next acquire come before any answer
            note(read(wire));
            note(read(wire));
            write(wire, &ServerMessage::ReleaseAck);
            write(wire, &ServerMessage::NoMoreBlocks);
            note(read(wire)); // goodbye
        });
        let mut client = connect(port).unwrap();
        let first = client.acquire_block().unwrap().unwrap();
        assert_eq!(first.spatial_id, 3);
        assert_eq!(client.release_and_acquire(first, None).unwrap(), None);
        assert_eq!(client.pending_acks, 0, "the ack was read with the reply");
        client.disconnect();
        server.join().unwrap();
        let heard = heard.all();
        assert!(matches!(
            heard[0],
            ClientMessage::Hello {
                worker_id: None,
                ..
            }
        ));
        assert!(matches!(heard[1], ClientMessage::AcquireBlock));
        assert!(
            matches!(&heard[2], ClientMessage::ReleaseBlock { block } if block.spatial_id == 3)
        );
        assert!(matches!(heard[3], ClientMessage::AcquireBlock));
        assert!(matches!(heard[4], ClientMessage::Disconnect));
    }

    #[test]
    fn a_refused_release_is_logged_and_the_worker_goes_on_and_acks_drain_at_goodbye() {
        let (port, heard, server) = scripted(1, |_, wire, note| {
            note(read(wire));
            write(wire, &welcome());
            note(read(wire)); // a failure report, sent at once
            note(read(wire)); // the next acquire
            write(
                wire,
                &ServerMessage::Error {
                    message: "block 1 is not out (it was reclaimed after its timeout)".into(),
                },
            );
            write(wire, &ServerMessage::SendBlock { block: block(2) });
            note(read(wire)); // the release of block 2
            write(wire, &ServerMessage::ReleaseAck);
            note(read(wire)); // goodbye, only after the ack was read
        });
        let mut client = connect(port).unwrap();
        client
            .block_failed(block(1), "ValueError: bad".into())
            .unwrap();
        assert_eq!(client.pending_acks, 1, "acknowledged with the next request");
        let next = client.acquire_block().unwrap().unwrap();
        assert_eq!(next.spatial_id, 2, "the refusal did not end the worker");
        client.release_block(next).unwrap();
        client.disconnect();
        server.join().unwrap();
        let heard = heard.all();
        assert!(
            matches!(&heard[1], ClientMessage::BlockFailed { error, .. } if error == "ValueError: bad")
        );
        assert!(matches!(heard[3], ClientMessage::ReleaseBlock { .. }));
        assert!(matches!(heard[4], ClientMessage::Disconnect));
    }

    #[test]
    fn a_busy_server_is_tried_again_and_any_other_refusal_is_final() {
        // busy twice, then a welcome: the third connection is the client's
        let (port, heard, server) = scripted(3, |i, wire, note| {
            note(read(wire));
            if i < 2 {
                write(
                    wire,
                    &ServerMessage::Error {
                        message: protocol::BUSY.into(),
                    },
                );
            } else {
                write(wire, &welcome());
                note(read(wire));
            }
        });
        let client = connect(port).unwrap();
        client.disconnect();
        server.join().unwrap();
        let hellos = heard
            .all()
            .iter()
            .filter(|m| matches!(m, ClientMessage::Hello { .. }))
            .count();
        assert_eq!(hellos, 3);

        // an unknown task: refused once, not tried again
        let (port, heard, server) = scripted(1, |_, wire, note| {
            note(read(wire));
            write(
                wire,
                &ServerMessage::Error {
                    message: "unknown task id \"a\"".into(),
                },
            );
        });
        match connect(port) {
            Err(DaisyError::Refused(why)) => assert!(why.contains("unknown task"), "{why}"),
            Err(other) => panic!("expected a refusal, got {other}"),
            Ok(_) => panic!("expected a refusal, got a connection"),
        }
        server.join().unwrap();
        assert_eq!(heard.all().len(), 1);
    }

    #[test]
    fn a_server_that_closes_mid_conversation_is_a_connection_error_not_a_hang() {
        let (port, _heard, server) = scripted(1, |_, wire, note| {
            note(read(wire));
            write(wire, &welcome());
            note(read(wire)); // the acquire, never answered: the server goes
        });
        let mut client = connect(port).unwrap();
        let lost = client.acquire_block();
        server.join().unwrap();
        match lost {
            Err(DaisyError::Connection(why)) => assert!(why.contains("closed"), "{why}"),
            other => panic!("expected a lost connection, got {other:?}"),
        }
    }
}
