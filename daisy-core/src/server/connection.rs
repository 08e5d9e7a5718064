//! One worker's connection: the listeners that accept it, the hello that
//! admits it, and the request/reply loop that hands it blocks and takes
//! them back ([`handle_connection`]).
//!
//! A connection must say hello with the run's token within
//! [`HELLO_TIMEOUT`]; a managed worker must claim an id the server gave a
//! live worker of the same task. A malformed or oversized frame closes the
//! connection, never the server. Whatever is still out with a connection
//! when it closes is lost and retried (see `State::reclaim`), also when its
//! handling panics: a guard reclaims it as the task unwinds.
//!
//! ## A release is checked against the server's own record
//! The block a worker sends back is only a claim: the server accounts the
//! block *it* handed out on this connection (its key, position, ROIs, from
//! the dependency graph) and takes from the message only the status, the
//! error text and the figures. A release whose block does not match that
//! record (another spatial id or grid position, a position of the wrong
//! dimension) or whose figures are not finite and non-negative breaks the
//! protocol: the connection is closed and the block it held is retried.

use super::admission::Door;
use super::live::BarOutcome;
use super::policy::{self, Returned};
use super::state::{Shared, State};
use crate::block::{Block, BlockStatus, TaskIndex};
use crate::error::DaisyError;
use crate::protocol::{self, ClientMessage, ServerMessage};
use crate::worker_timeline::WorkerExit;
use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::codec::Framed;

/// How long a new connection may take to say hello: long enough for a
/// worker on a loaded node, short enough that a silent peer does not hold a
/// connection for the whole run.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection beyond `MAX_PENDING_HELLOS` is read before it is
/// told the server is busy: a hello arrives within a round trip, and a
/// stranger holds the descriptor no longer than this.
const BUSY_READ: Duration = Duration::from_millis(100);

/// How long the accept loop waits after a failed accept (out of file
/// descriptors, say) before trying again: long enough not to spin, short
/// enough that a worker's connect (which retries for 30 s) gets through.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

type Conn = Framed<Box<dyn protocol::Stream>, tokio_util::codec::LengthDelimitedCodec>;

async fn send(conn: &mut Conn, msg: &ServerMessage) -> bool {
    write_reply(conn, msg, true).await
}

/// Queue a reply; write it out now if `flush`, else with the next one.
async fn write_reply(conn: &mut Conn, msg: &ServerMessage, flush: bool) -> bool {
    let Ok(bytes) = protocol::encode(msg) else {
        return false;
    };
    let bytes = tokio_util::bytes::Bytes::from(bytes);
    if flush {
        conn.send(bytes).await.is_ok()
    } else {
        SinkExt::<tokio_util::bytes::Bytes>::feed(conn, bytes)
            .await
            .is_ok()
    }
}

async fn recv(conn: &mut Conn) -> Option<ClientMessage> {
    match conn.next().await {
        Some(Ok(frame)) => protocol::decode(&frame).ok(),
        _ => None, // closed, oversized or malformed: drop the connection
    }
}

/// Where workers connect: the run's TCP port or, from this machine, its
/// Unix-domain socket.
pub(super) enum Listener {
    /// The run's TCP port, and the liveness timeout of its connections.
    Tcp(TcpListener, Duration),
    /// The run's Unix-domain socket.
    Local(tokio::net::UnixListener),
}

impl Listener {
    /// The next connection (None: one refused at the door); TCP ones with
    /// Nagle off, since every message is small and waited for. A local
    /// connection from another user is refused: only the driver's own user
    /// may be a local worker, whatever it knows.
    /// With the stream: its door, and whether the peer is this very process.
    async fn accept(&self) -> std::io::Result<Option<(Box<dyn protocol::Stream>, Door, bool)>> {
        Ok(Some(match self {
            Listener::Tcp(l, liveness) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                if let Err(e) = crate::liveness::watch(&stream, *liveness) {
                    tracing::warn!(
                        "could not set keepalive on the connection from {peer}: {e}; a \
                         worker there that dies without a word is not noticed"
                    );
                }
                (Box::new(stream), Door::Tcp, false)
            }
            Listener::Local(l) => {
                let (stream, _) = l.accept().await?;
                let uid = stream.peer_cred().map(|c| c.uid());
                if uid.as_ref().ok() != Some(&protocol::own_uid()) {
                    tracing::warn!(
                        "refused a local connection from another user (uid {:?})",
                        uid.ok()
                    );
                    return Ok(None);
                }
                // a client in the driver's own process (a thread of it)
                let here = stream
                    .peer_cred()
                    .ok()
                    .and_then(|c| c.pid())
                    .is_some_and(|pid| pid == std::process::id() as i32);
                (Box::new(stream), Door::Local, here)
            }
        }))
    }
}

/// Hands every connection `listener` accepts to [`handle_connection`] under a
/// fresh connection id, until the returned task is aborted.
pub(super) fn spawn_accept_loop(
    shared: &Shared,
    listener: Listener,
) -> tokio::task::JoinHandle<()> {
    let shared = shared.clone();
    tokio::task::spawn_local(async move {
        loop {
            match listener.accept().await {
                Ok(None) => {}
                Ok(Some((stream, door, here))) => {
                    let id = shared.state_mut().admission_mut().new_conn_id();
                    tokio::task::spawn_local(handle_connection(
                        shared.clone(),
                        stream,
                        door,
                        here,
                        id,
                    ));
                }
                Err(e) => {
                    tracing::warn!("daisy server: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    })
}

/// Admit a connection's hello: the task it serves, or None to close it
/// (an error message to send first, if any).
fn admit(
    shared: &Shared,
    token: &str,
    task_id: &str,
    worker_id: Option<u32>,
) -> Result<TaskIndex, Option<String>> {
    let mut st = shared.state_mut();
    if !protocol::tokens_match(token, &st.config.token) {
        tracing::warn!("refused a connection with a wrong token");
        return Err(None);
    }
    let task = st
        .scheduler
        .pipeline()
        .index_of(task_id)
        .map_err(|e| Some(e.to_string()))?;
    match worker_id {
        None => {
            st.unmanaged_client_joined(task);
        }
        Some(id) => match st.workers.get(&id) {
            Some(w) if w.flags().task == task && w.flags().alive => {}
            _ => {
                tracing::warn!("refused a connection claiming unknown worker {id}");
                return Err(None);
            }
        },
    }
    Ok(task)
}

/// One connection from its first byte to its close: its opening (the
/// hello, or "busy", or a job's launcher served to its end), the worker's
/// admission and welcome, then its requests answered one by one
/// ([`serve`]); whatever it holds when it ends is reclaimed.
async fn handle_connection(
    shared: Shared,
    stream: Box<dyn protocol::Stream>,
    door: Door,
    in_process: bool,
    conn_id: u64,
) {
    let conn = Framed::new(stream, protocol::codec());
    let Some((mut conn, hello)) = opening(&shared, conn, door).await else {
        return;
    };
    let task = match admit(&shared, &hello.token, &hello.task_id, hello.worker_id) {
        Ok(task) => task,
        Err(Some(message)) => {
            let _ = send(&mut conn, &ServerMessage::Error { message }).await;
            return;
        }
        Err(None) => return,
    };
    let worker_id = hello.worker_id;
    // from here on, whatever this connection holds is reclaimed when it
    // ends, however it ends (a panic in its handling included)
    let _reclaim = ReclaimOnDrop {
        shared: shared.clone(),
        conn_id,
        worker_id,
    };
    shared.state_mut().admission_mut().opened();
    // a worker the server did not start ends its own late attempts
    // (`block_deadline`), unless it is a thread of the driver itself, which
    // nothing may end: its late attempts are refused as before
    let ends_late_attempts = worker_id.is_none() && !in_process;
    let Some(hang_up) = welcome(&shared, &mut conn, task, worker_id, ends_late_attempts).await
    else {
        return;
    };
    let peer = Peer {
        task,
        worker_id,
        conn_id,
        ends_late_attempts,
    };
    serve(&shared, &mut conn, &peer, hang_up).await;
    let _ = SinkExt::<tokio_util::bytes::Bytes>::flush(&mut conn).await;
}

/// What a worker said in its hello.
struct Hello {
    token: String,
    task_id: String,
    worker_id: Option<u32>,
}

/// Who is at the other end of an admitted connection.
struct Peer {
    task: TaskIndex,
    worker_id: Option<u32>,
    conn_id: u64,
    ends_late_attempts: bool,
}

/// A connection's opening, before anyone is admitted: a stranger gets a
/// tiny frame allowance, and only so many at once (past that, "busy"); a
/// job's node launcher is served here to its end. The connection and the
/// worker's hello when a worker said one; None when the connection is done.
async fn opening(shared: &Shared, mut conn: Conn, door: Door) -> Option<(Conn, Hello)> {
    conn.codec_mut()
        .set_max_frame_length(protocol::MAX_HELLO_BYTES);
    let full = !shared.state_mut().admission_mut().expect_hello(door);
    if full {
        tracing::debug!("deferred a connection through {door}");
        // read the hello (so closing sends no reset that could swallow the
        // answer), then say busy: a worker tries again
        let _ = tokio::time::timeout(BUSY_READ, recv(&mut conn)).await;
        let _ = send(
            &mut conn,
            &ServerMessage::Error {
                message: protocol::BUSY.into(),
            },
        )
        .await;
        return None;
    }
    let hello = tokio::time::timeout(HELLO_TIMEOUT, recv(&mut conn)).await;
    shared.state_mut().admission_mut().hello_heard(door);
    conn.codec_mut()
        .set_max_frame_length(protocol::MAX_FRAME_BYTES);
    match hello {
        Ok(Some(ClientMessage::Hello {
            token,
            task_id,
            worker_id,
        })) => Some((
            conn,
            Hello {
                token,
                task_id,
                worker_id,
            },
        )),
        Ok(Some(ClientMessage::LauncherHello {
            token,
            job,
            batch_job_id,
        })) => {
            // a job's node launcher: its conversation continues on this
            // connection, as JSON lines (`server::jobs`)
            if !protocol::tokens_match(&token, &shared.state().config.token) {
                tracing::warn!("refused a launcher with a wrong token");
                return None;
            }
            let parts = conn.into_parts();
            let leftover = parts.read_buf.to_vec();
            super::launcher::serve_job(shared.clone(), job, batch_job_id, parts.io, leftover).await;
            None
        }
        _ => None, // no hello: close without a word
    }
}

/// Welcome an admitted worker with its task's settings. The signal that
/// ends a managed worker's connection with its process (None inside: an
/// unmanaged client's has none); None when the welcome could not be sent.
async fn welcome(
    shared: &Shared,
    conn: &mut Conn,
    task: TaskIndex,
    worker_id: Option<u32>,
    ends_late_attempts: bool,
) -> Option<Option<tokio_util::sync::CancellationToken>> {
    let (resource_tracking, gpu_tracking, hang_up, timeout) = {
        let st = shared.state();
        let hang_up = worker_id
            .and_then(|id| st.workers.get(&id))
            .map(|w| w.hang_up());
        let rt = &st.config.tasks[task];
        (rt.resource_tracking, rt.gpu_tracking, hang_up, rt.timeout)
    };
    let welcome = ServerMessage::Welcome {
        resource_tracking,
        gpu_tracking,
        block_timeout_ms: timeout
            .filter(|_| ends_late_attempts)
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        server_pid: std::process::id(),
    };
    send(conn, &welcome).await.then_some(hang_up)
}

/// Answer an admitted worker's requests until it leaves, breaks the
/// protocol, or (a managed worker) its process ends.
async fn serve(
    shared: &Shared,
    conn: &mut Conn,
    peer: &Peer,
    hang_up: Option<tokio_util::sync::CancellationToken>,
) {
    let activity = shared.state().activity();
    loop {
        // a managed worker's connection ends with its process
        let msg = match &hang_up {
            Some(hang_up) => tokio::select! {
                msg = recv(conn) => msg,
                () = hang_up.cancelled() => None,
            },
            None => recv(conn).await,
        };
        let Some(msg) = msg else {
            break;
        };
        activity.notify_one();
        let reply = match answer(shared, peer, msg).await {
            Some(Ok(reply)) => reply,
            Some(Err(why)) => {
                tracing::warn!("closing a worker connection that broke the protocol: {why}");
                let _ = send(conn, &ServerMessage::Error { message: why }).await;
                break;
            }
            None => break, // it said goodbye
        };
        // A reply waits for the next one when the client's next request is
        // already here (a worker sends its release and its next acquire
        // together): both replies then leave in one write. Anything in the
        // buffer is the start of a request the client has sent, so the
        // wait is never for the client.
        let next_request_buffered = !conn.read_buffer().is_empty();
        if !write_reply(conn, &reply, !next_request_buffered).await {
            break;
        }
    }
}

/// The reply to one request: an error text for one that breaks the
/// protocol; None for a goodbye.
async fn answer(
    shared: &Shared,
    peer: &Peer,
    msg: ClientMessage,
) -> Option<Result<ServerMessage, String>> {
    let Peer {
        task,
        worker_id,
        conn_id,
        ends_late_attempts,
    } = *peer;
    Some(match msg {
        ClientMessage::AcquireBlock => {
            Ok(acquire(shared, task, worker_id, conn_id, ends_late_attempts).await)
        }
        ClientMessage::ReleaseBlock { block } => {
            release(shared, task, worker_id, conn_id, block, None)
        }
        ClientMessage::BlockFailed { block, error } => {
            release(shared, task, worker_id, conn_id, block, Some(error))
        }
        ClientMessage::Note { text } => {
            shared.state_mut().note(task, &text);
            Ok(ServerMessage::ReleaseAck)
        }
        ClientMessage::Disconnect => return None,
        ClientMessage::Hello { .. } | ClientMessage::LauncherHello { .. } => {
            Ok(ServerMessage::Error {
                message: "hello sent twice".into(),
            })
        }
    })
}

/// Reclaims what a connection still holds when its handler ends (the
/// connection closed, broke the protocol, or its handling panicked): the
/// block is lost and retried, the worker is no longer busy or waiting.
struct ReclaimOnDrop {
    shared: Shared,
    conn_id: u64,
    worker_id: Option<u32>,
}

impl Drop for ReclaimOnDrop {
    fn drop(&mut self) {
        let (conn_id, worker_id) = (self.conn_id, self.worker_id);
        // a panic while the state was borrowed has released the borrow by
        // now; should it still be held, the run's own sweep must do
        let Some(mut st) = self.shared.try_state_mut() else {
            return;
        };
        st.admission_mut().closed();
        if let Some(w) = worker_id.and_then(|id| st.workers.get(&id)) {
            w.on_connection_end();
        }
        st.reclaim(
            |o| o.conn == conn_id,
            worker_id,
            crate::run_report::CONNECTION_CLOSED,
        );
        st.wake_main();
        if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
            w.disconnected();
        }
        drop(st);
        self.shared.notify_changed();
    }
}

/// Why a block a worker sends back breaks the protocol, or None: it must be
/// the block the server handed out (`own`, from its record), with figures
/// that are finite, non-negative seconds.
fn violation(own: &Block, claimed: &Block) -> Option<String> {
    if claimed.spatial_id != own.spatial_id || claimed.position != own.position {
        return Some(format!(
            "block {} came back as block {} at grid position {}; it was handed out at {}",
            own.spatial_id, claimed.spatial_id, claimed.position, own.position
        ));
    }
    let stats = claimed.stats.as_ref()?;
    // the run-queue wait may be NaN: not measured where /proc has no
    // schedstat
    let queued = stats.run_queue_seconds;
    let finite = [stats.wall_seconds, stats.cpu_seconds]
        .iter()
        .all(|x| x.is_finite() && *x >= 0.0)
        && (queued.is_nan() || (queued.is_finite() && queued >= 0.0));
    (!finite).then(|| {
        format!(
            "block {} came back with figures that are not finite, non-negative seconds \
             (wall {}, cpu {}, run queue {})",
            own.spatial_id, stats.wall_seconds, stats.cpu_seconds, queued
        )
    })
}

async fn acquire(
    shared: &Shared,
    task: TaskIndex,
    worker_id: Option<u32>,
    conn_id: u64,
    ends_late_attempts: bool,
) -> ServerMessage {
    if let Some(id) = worker_id {
        shared.state_mut().worker_acquires(id, Instant::now());
    }
    // a managed worker that waits this long for a block is handed back
    // (an unmanaged client is nobody's node to give back)
    let idle_deadline = worker_id
        .and_then(|_| shared.state().idle_timeout(task))
        .map(|d| tokio::time::Instant::now() + d);
    loop {
        let notified = shared.changes();
        {
            let mut guard = shared.state_mut();
            let st = &mut *guard;
            let retire = worker_id
                .and_then(|id| st.workers.get(&id))
                .is_some_and(|w| w.flags().retire);
            if st.is_stopping() || retire || st.scheduler.is_task_finished(task) {
                dismiss(st, worker_id, WorkerExit::Clean);
                return ServerMessage::NoMoreBlocks;
            }
            let got = st.next_block(task);
            if let Some(mut block) = got {
                st.hand_out(&mut block, conn_id, worker_id, ends_late_attempts);
                return ServerMessage::SendBlock { block };
            }
            if let Some(held) = self_blocking(st, conn_id) {
                return ServerMessage::Error {
                    message: format!(
                        "this worker holds block {held} and asks for another, but no block can \
                         become ready before it returns what it holds: release (or fail) a \
                         block before asking for the next one"
                    ),
                };
            }
            if idle_deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                // idle for the whole idle timeout: hand its node back; the
                // main loop starts another when blocks are ready again
                dismiss(st, worker_id, WorkerExit::Idle);
                return ServerMessage::NoMoreBlocks;
            }
            if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
                w.waits();
            }
        }
        // kept back by the memory gate: look again soon, as memory frees
        // without a block returning (a stopped worker's process leaving)
        let gated = shared.state_mut().take_gate_wait();
        let recheck = gated.then(|| tokio::time::Instant::now() + super::memory_gate::GATE_RECHECK);
        match idle_deadline.into_iter().chain(recheck).min() {
            // woken by a block, the end of the task, or the deadline
            Some(d) => drop(tokio::time::timeout_at(d, notified).await),
            None => notified.await,
        }
    }
}

/// Tell worker `worker_id` there is no block for it: its exit, when it
/// comes, is `exit` (clean at the end of its task, idle when handed back),
/// and its final wait ends now.
fn dismiss(st: &mut State, worker_id: Option<u32>, exit: WorkerExit) {
    if let Some(w) = worker_id.and_then(|id| st.workers.get_mut(&id)) {
        w.dismissed();
        w.expect_exit_unless_known(exit);
    }
    if let Some(id) = worker_id {
        st.worker_dismissed_at(id, Instant::now());
    }
}

/// The spatial id of a block this connection holds, when waiting for
/// another would wait forever: no block is ready anywhere and no other
/// connection holds one, so only this connection's own blocks could make
/// one ready, and it is waiting instead of returning them (a worker
/// function that takes blocks in pairs).
fn self_blocking(st: &State, conn_id: u64) -> Option<u64> {
    let (mine, others) = st.held_by(conn_id);
    let key = mine?;
    let ready = st.scheduler.ready_tasks().next().is_some();
    (!others && !ready).then(|| st.scheduler.graph().block(key).spatial_id)
}

fn release(
    shared: &Shared,
    task: TaskIndex,
    worker_id: Option<u32>,
    conn_id: u64,
    block: Block,
    error: Option<String>,
) -> Result<ServerMessage, String> {
    let mut guard = shared.state_mut();
    let st = &mut *guard;
    let key = block.key;
    let owned = key.task == task && st.holds(conn_id, key);
    if !owned {
        // a late release (reclaimed after a timeout): refused politely
        return Ok(ServerMessage::Error {
            message: format!(
                "block {} is not out with this worker (reclaimed after a timeout, or never sent)",
                block.spatial_id
            ),
        });
    }
    // the server's own record of the block, with what the worker reports;
    // a claim that does not match it closes the connection, which then
    // reclaims the block
    let own = st.scheduler.graph().block(key);
    if let Some(why) = violation(&own, &block) {
        return Err(why);
    }
    let mut block = Block {
        status: block.status,
        stats: block.stats,
        ..own
    };
    let resource_tracking = st.config.tasks[task].resource_tracking;
    if !resource_tracking {
        block.stats = None; // only tasks with resource tracking report figures
    }
    let failed = block.status == BlockStatus::Failed;
    let reported_ok = error.is_none() && !failed;
    let verdict = policy::returned(error, failed, resource_tracking, block.stats.is_some());
    let done = matches!(verdict, Returned::Done);
    let bar = if done {
        BarOutcome::Done
    } else {
        BarOutcome::Failed
    };
    let now = Instant::now();
    let Some(out) = st.take_back(key, bar, worker_id.map(|id| (id, reported_ok)), now) else {
        return Ok(ServerMessage::Error {
            message: "block is not out".into(),
        });
    };
    let round_trip = now.saturating_duration_since(out.sent).as_secs_f64();
    if let (true, Some(id), Some(stats)) = (done, worker_id, block.stats.as_ref()) {
        st.note_peak_rss(id, stats.peak_rss_bytes);
    }
    let result = match verdict {
        Returned::Done => st.record_done(&block, round_trip, worker_id, out.sent_wall),
        Returned::Failed(reason) => {
            st.record_failed(key, worker_id, reason);
            Ok(())
        }
        Returned::Unmeasured => {
            // not done: a rerun must measure it; and the run stops
            let why = policy::unmeasured_message(block.spatial_id, &st.task_id(task));
            st.stop_with(DaisyError::RunBroken(why));
            st.record_failed(key, worker_id, "came back without measurements".into());
            Ok(())
        }
    };
    st.wake_main();
    drop(guard);
    shared.notify_changed();
    Ok(match result {
        Ok(()) => ServerMessage::ReleaseAck,
        Err(e) => ServerMessage::Error {
            message: e.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::admission::MAX_PENDING_HELLOS;
    use crate::server::state::test_support::{hand_out, state};
    use crate::server::worker_slot::WorkerSlot;
    use tokio::io::{AsyncReadExt, DuplexStream};

    fn shared_state(token: &str) -> Shared {
        let mut st = state();
        st.config.token = token.into();
        Shared::new(st)
    }

    /// The peer's end of a connection, speaking the protocol.
    fn peer(end: DuplexStream) -> Framed<DuplexStream, tokio_util::codec::LengthDelimitedCodec> {
        Framed::new(end, protocol::codec())
    }

    async fn say(
        conn: &mut Framed<DuplexStream, tokio_util::codec::LengthDelimitedCodec>,
        msg: &ClientMessage,
    ) {
        let bytes = protocol::encode(msg).unwrap();
        SinkExt::<tokio_util::bytes::Bytes>::send(conn, bytes.into())
            .await
            .unwrap();
    }

    async fn hear(
        conn: &mut Framed<DuplexStream, tokio_util::codec::LengthDelimitedCodec>,
    ) -> Option<ServerMessage> {
        let frame = conn.next().await?.ok()?;
        Some(protocol::decode(&frame).unwrap())
    }

    fn hello(token: &str, task_id: &str) -> ClientMessage {
        ClientMessage::Hello {
            token: token.into(),
            task_id: task_id.into(),
            worker_id: None,
        }
    }

    // The connection's state machine in tokio's paused time: what it waits
    // for is waited out in virtual time, at once in real time.

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_says_nothing_is_closed_at_the_hello_timeout() {
        let shared = shared_state("s3cret");
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let begun = tokio::time::Instant::now();
        let silent = async {
            tokio::time::sleep(HELLO_TIMEOUT / 2).await;
            let waiting = shared.state().admission().pending_hellos[Door::Tcp as usize];
            let mut buf = [0u8; 16];
            let n = theirs.read(&mut buf).await.unwrap();
            (waiting, n, tokio::time::Instant::now() - begun)
        };
        let ((), (waiting, read, waited)) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 1),
            silent
        );
        assert_eq!(waiting, 1, "counted as waiting to say hello meanwhile");
        assert_eq!(read, 0, "closed without a word");
        assert!(
            waited >= HELLO_TIMEOUT && waited < HELLO_TIMEOUT + Duration::from_secs(1),
            "closed after {waited:?}"
        );
        let st = shared.state();
        assert_eq!(st.admission().pending_hellos, [0, 0], "no longer waiting");
        assert_eq!(st.admission().unmanaged_clients, 0);
    }

    /// A managed worker of task "b" (waiting for "a") that says hello and
    /// asks for a block; what it hears, and when.
    async fn waiting_worker(
        shared: &Shared,
        worker_id: u32,
        patience: Duration,
    ) -> (Option<ServerMessage>, Duration) {
        let (ours, theirs) = tokio::io::duplex(4096);
        let begun = tokio::time::Instant::now();
        let client = async {
            let mut conn = peer(theirs);
            say(
                &mut conn,
                &ClientMessage::Hello {
                    token: "s3cret".into(),
                    task_id: "b".into(),
                    worker_id: Some(worker_id),
                },
            )
            .await;
            let welcome = hear(&mut conn).await;
            assert!(
                matches!(welcome, Some(ServerMessage::Welcome { .. })),
                "{welcome:?}"
            );
            say(&mut conn, &ClientMessage::AcquireBlock).await;
            let heard = tokio::time::timeout(patience, hear(&mut conn))
                .await
                .ok()
                .flatten();
            (heard, tokio::time::Instant::now() - begun)
        };
        tokio::select! {
            () = handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 1) => {
                (None, tokio::time::Instant::now() - begun)
            }
            heard = client => heard,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_idle_for_its_idle_timeout_is_handed_back_and_without_one_it_waits() {
        let idle = Duration::from_secs(30);
        let shared = shared_state("s3cret");
        {
            let mut st = shared.state_mut();
            st.config.tasks[1].idle_timeout = Some(idle);
            st.workers.insert(7, WorkerSlot::starting(1));
        }
        let (heard, after) = waiting_worker(&shared, 7, Duration::from_secs(3600)).await;
        assert_eq!(heard, Some(ServerMessage::NoMoreBlocks));
        assert!(
            after >= idle && after < idle + Duration::from_secs(1),
            "after {after:?}"
        );
        {
            let st = shared.state();
            let w = &st.workers[&7];
            assert!(w.flags().dismissed && !w.flags().waiting);
            assert_eq!(
                w.expected_exit(),
                Some(WorkerExit::Idle),
                "handed back, not a crash"
            );
        }

        // the run's setting applies where the task has none; the spawner's
        // where neither has one
        for (run, spawner) in [(Some(idle), None), (None, Some(idle))] {
            let shared = shared_state("s3cret");
            {
                let mut st = shared.state_mut();
                st.config.idle_timeout = run;
                st.config.tasks[1].spawner_idle_timeout = spawner;
                st.workers.insert(7, WorkerSlot::starting(1));
            }
            let (heard, after) = waiting_worker(&shared, 7, Duration::from_secs(3600)).await;
            assert_eq!(
                heard,
                Some(ServerMessage::NoMoreBlocks),
                "{run:?} {spawner:?}"
            );
            assert!(after < idle + Duration::from_secs(1), "after {after:?}");
        }

        // without one, the worker waits (an hour here) while its task can
        // still get blocks: no churn
        let shared = shared_state("s3cret");
        shared
            .state_mut()
            .workers
            .insert(8, WorkerSlot::starting(1));
        let (heard, _) = waiting_worker(&shared, 8, Duration::from_secs(3600)).await;
        assert_eq!(heard, None, "no reply while nothing is ready");
        let st = shared.state();
        assert!(st.workers[&8].expected_exit().is_none(), "not dismissed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_ready_before_the_idle_timeout_goes_to_the_waiting_worker() {
        let idle = Duration::from_secs(30);
        let shared = shared_state("s3cret");
        {
            let mut st = shared.state_mut();
            st.config.tasks[1].idle_timeout = Some(idle);
            st.workers.insert(7, WorkerSlot::starting(1));
        }
        let upstream_done = async {
            tokio::time::sleep(idle / 2).await;
            let mut st = shared.state_mut();
            while st.scheduler.task_state(0).ready_count > 0 {
                let key = hand_out(&mut st, 0, 99);
                st.take_back(key, BarOutcome::Done, None, Instant::now());
                st.scheduler
                    .release_block(key, BlockStatus::Success)
                    .unwrap();
            }
            drop(st);
            shared.notify_changed();
        };
        let ((heard, after), ()) = tokio::join!(
            waiting_worker(&shared, 7, Duration::from_secs(3600)),
            upstream_done
        );
        assert!(
            matches!(heard, Some(ServerMessage::SendBlock { .. })),
            "{heard:?}"
        );
        assert!(after < idle, "after {after:?}");
        assert_eq!(shared.state().workers[&7].expected_exit(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hello_is_welcomed_refused_or_ignored_by_its_token_and_task() {
        // the right token and task: welcomed, counted, and served
        let shared = shared_state("s3cret");
        let (ours, theirs) = tokio::io::duplex(4096);
        let client = async {
            let mut conn = peer(theirs);
            say(&mut conn, &hello("s3cret", "a")).await;
            let welcome = hear(&mut conn).await;
            say(&mut conn, &ClientMessage::AcquireBlock).await;
            let block = hear(&mut conn).await;
            say(&mut conn, &ClientMessage::Disconnect).await;
            (welcome, block)
        };
        let ((), (welcome, block)) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 1),
            client
        );
        assert!(
            matches!(welcome, Some(ServerMessage::Welcome { .. })),
            "{welcome:?}"
        );
        assert!(
            matches!(block, Some(ServerMessage::SendBlock { .. })),
            "{block:?}"
        );
        {
            let st = shared.state();
            assert_eq!(st.admission().unmanaged_clients, 1);
            assert_eq!(st.admission().pending_hellos, [0, 0]);
            // the block of a client that said goodbye holding it is not lost
            assert!(st.none_out(), "reclaimed at the disconnect");
        }

        // a wrong token: closed without a word (a stranger learns nothing)
        let (ours, theirs) = tokio::io::duplex(4096);
        let stranger = async {
            let mut conn = peer(theirs);
            say(&mut conn, &hello("guess", "a")).await;
            hear(&mut conn).await
        };
        let ((), heard) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 2),
            stranger
        );
        assert!(heard.is_none(), "{heard:?}");

        // the right token and an unknown task: told why
        let (ours, theirs) = tokio::io::duplex(4096);
        let lost = async {
            let mut conn = peer(theirs);
            say(&mut conn, &hello("s3cret", "nope")).await;
            hear(&mut conn).await
        };
        let ((), heard) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 3),
            lost
        );
        match heard {
            Some(ServerMessage::Error { message }) => {
                assert!(message.contains("unknown task id \"nope\""), "{message}")
            }
            other => panic!("expected an error, got {other:?}"),
        }
        assert_eq!(shared.state().admission().unmanaged_clients, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_door_says_busy_and_the_other_door_still_welcomes() {
        let shared = shared_state("s3cret");
        shared.state_mut().admission_mut().pending_hellos[Door::Tcp as usize] = MAX_PENDING_HELLOS;
        let (ours, theirs) = tokio::io::duplex(4096);
        let crowded = async {
            let mut conn = peer(theirs);
            say(&mut conn, &hello("s3cret", "a")).await;
            hear(&mut conn).await
        };
        let ((), heard) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 1),
            crowded
        );
        match heard {
            Some(ServerMessage::Error { message }) => assert_eq!(message, protocol::BUSY),
            other => panic!("expected busy, got {other:?}"),
        }
        assert!(shared.state().admission().door_was_full[Door::Tcp as usize]);
        // this machine's workers come through the local socket, not held up
        let (ours, theirs) = tokio::io::duplex(4096);
        let local = async {
            let mut conn = peer(theirs);
            say(&mut conn, &hello("s3cret", "a")).await;
            let welcome = hear(&mut conn).await;
            say(&mut conn, &ClientMessage::Disconnect).await;
            welcome
        };
        let ((), welcome) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Local, false, 2),
            local
        );
        assert!(
            matches!(welcome, Some(ServerMessage::Welcome { .. })),
            "{welcome:?}"
        );
        // a silent stranger at a full door is held for BUSY_READ only
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let begun = tokio::time::Instant::now();
        let silent = async {
            let mut buf = [0u8; 64];
            let _ = theirs.read(&mut buf).await;
            tokio::time::Instant::now() - begun
        };
        let ((), held) = tokio::join!(
            handle_connection(shared.clone(), Box::new(ours), Door::Tcp, false, 3),
            silent
        );
        assert!(held >= BUSY_READ && held < HELLO_TIMEOUT, "held {held:?}");
    }

    #[test]
    fn a_panic_in_a_connections_handling_does_not_lose_its_block() {
        let shared: Shared = Shared::new(state());
        let key = hand_out(&mut shared.state_mut(), 0, 7);
        let handler = {
            let shared = shared.clone();
            move || {
                let _reclaim = ReclaimOnDrop {
                    shared: shared.clone(),
                    conn_id: 7,
                    worker_id: None,
                };
                let _borrowed = shared.state_mut(); // panics while borrowing
                panic!("a bug in the handling of a message");
            }
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler));
        assert!(caught.is_err());
        let st = shared.state();
        assert!(!st.is_out(key), "reclaimed as the handler unwound");
        let out = st.outcome(false);
        assert_eq!(out.failures.len(), 1);
        assert_eq!(
            out.states[0].ready_count, 4,
            "the block is ready to be retried"
        );
    }
}
