//! The wire protocol between the server and its workers: messages, their
//! encoding, and the frame size cap.
//!
//! ## Framing
//! Every message is one frame: a 4-byte big-endian length followed by a
//! postcard-encoded message (tokio-util's `LengthDelimitedCodec`, which
//! checks the length against [`MAX_FRAME_BYTES`] *before* allocating, so an
//! oversized or hostile length prefix costs nothing). A frame that does not
//! decode, or that is too large, closes that connection only.
//!
//! ## Conversation
//! One persistent connection per worker, strictly request/response:
//!
//! ```text
//! worker                                   server
//!   Hello{token, task_id, worker_id} ───▶  checks the run token first; a
//!                                   ◀───   Welcome{resource_tracking, gpu_tracking}
//!                                          (or Error + close)
//!   AcquireBlock                     ───▶  waits until a block is ready, the
//!                                   ◀───   task is finished or the worker's
//!                                          idle timeout passed:
//!                                          SendBlock{block} | NoMoreBlocks
//!   ReleaseBlock{block}              ───▶  ReleaseAck
//!   BlockFailed{block, error}        ───▶  ReleaseAck
//!   Note{text}                       ───▶  ReleaseAck (kept once per task
//!                                          for the report)
//!   Disconnect                       ───▶  (closes)
//! ```
//!
//! A job hosting several workers (`server::jobs`) runs a node launcher
//! that opens its own connection with `LauncherHello{token, job}`; after
//! it the connection carries the launcher's JSON lines (fork requests and
//! their replies, as on a local launcher's socket), not these frames.
//!
//! A connection whose first message is not a `Hello` with the run's token is
//! closed without a reply: a stray or malicious client can neither take nor
//! release blocks. Error text is capped at [`MAX_ERROR_BYTES`] so a huge
//! traceback cannot push a frame over the cap.
//!
//! ## Keeping the token secret
//! The token reaches workers only through their environment (readable by
//! their owner alone) and is compared in constant time ([`tokens_match`]).
//! The run's local socket is an abstract Unix-domain socket, and abstract
//! names are listed in the world-readable `/proc/net/unix`: its name is
//! therefore a SHA-256 digest of the token ([`local_socket_name`]), from
//! which the token cannot be recovered, and the server also refuses a local
//! peer of another user (its uid, from `SO_PEERCRED`).

use crate::block::Block;
use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// Largest frame either side accepts: far above any real message (a block
/// is a few hundred bytes, an error text at most [`MAX_ERROR_BYTES`]), far
/// below what could hurt the server.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// Largest frame a connection may send before its hello is accepted: a
/// hello is a token, a task id and a worker id, well under a kilobyte, and
/// a stranger gets no more than that (a 1 MiB allowance let 200 idle
/// connections grow the driver by 200 MiB).
pub const MAX_HELLO_BYTES: usize = 4096;

/// The server's answer to a hello it has no room for yet (too many
/// connections waiting to say hello at once): the client tries again.
pub const BUSY: &str = "busy: too many connections are saying hello at once; try again";

/// Error texts are cut to this many bytes before they are sent.
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Messages a worker sends.
// A block is a few hundred bytes on the stack and every message is encoded
// at once; boxing it would only add an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientMessage {
    /// First message of every connection.
    Hello {
        /// The run's secret token.
        token: String,
        /// The task whose blocks this client processes.
        task_id: String,
        /// Server-assigned worker id; `None` for an unmanaged client.
        worker_id: Option<u32>,
    },
    /// Ask for the next block of the task.
    AcquireBlock,
    /// A block finished successfully.
    ReleaseBlock {
        /// The block as it was sent.
        block: Block,
    },
    /// A block failed.
    BlockFailed {
        /// The block as it was sent.
        block: Block,
        /// What went wrong (a traceback, cut to [`MAX_ERROR_BYTES`]).
        error: String,
    },
    /// Something the run report should say once for the task (e.g. that
    /// the worker found no NVML); kept by [`crate::run_report::RunLedger::note`],
    /// bounded there. Answered like a release.
    Note {
        /// What to say.
        text: String,
    },
    /// The worker is done and closes the connection.
    Disconnect,
    /// First message of a job's node launcher (`server::jobs`): the
    /// connection then carries the launcher's conversation (JSON lines,
    /// as a local launcher's socket does) instead of a worker's. Last of
    /// the variants, so the others keep their numbers on the wire.
    LauncherHello {
        /// The run's secret token.
        token: String,
        /// The job's number in the run, from its context.
        job: u32,
        /// The batch system's id of the job (`SLURM_JOB_ID`), for the
        /// report; None where there is none.
        batch_job_id: Option<String>,
    },
}

/// Messages the server sends.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerMessage {
    /// The hello was accepted. `resource_tracking`: the task expects every
    /// block to come back with its measurements.
    Welcome {
        /// Whether the client should measure its blocks.
        resource_tracking: bool,
        /// Whether those measurements include GPU figures.
        gpu_tracking: bool,
        /// The task's block timeout in milliseconds, told to a worker the
        /// server did not start, which then ends an attempt that runs
        /// past it itself (`block_deadline`); None otherwise.
        block_timeout_ms: Option<u64>,
        /// The server's process id: a client in that very process (a
        /// thread of the driver) must never end its process at a deadline.
        server_pid: u32,
    },
    /// A block to process.
    SendBlock {
        /// The block.
        block: Block,
    },
    /// The task has no more blocks for this worker: it should exit.
    NoMoreBlocks,
    /// A release or failure report was recorded.
    ReleaseAck,
    /// A request could not be served (unknown task, block not out, ...).
    Error {
        /// What went wrong.
        message: String,
    },
}

/// The frame codec both sides use.
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME_BYTES)
        .new_codec()
}

/// Encode a message into one frame payload.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_stdvec(msg)
}

/// The framed bytes of a [`ClientMessage::LauncherHello`] (the length
/// prefix and the message), for a node launcher written in another
/// language to open its conversation with.
pub fn launcher_hello_frame(
    token: &str,
    job: u32,
    batch_job_id: Option<&str>,
) -> Result<Vec<u8>, postcard::Error> {
    let body = encode(&ClientMessage::LauncherHello {
        token: token.to_string(),
        job,
        batch_job_id: batch_job_id.map(str::to_string),
    })?;
    let len = u32::try_from(body.len()).map_err(|_| postcard::Error::SerializeBufferFull)?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend(body);
    Ok(frame)
}

/// Decode one frame payload.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

/// A fresh random run token (128 bits from the OS, hex).
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The byte stream a connection runs over: TCP, or a Unix-domain socket
/// for workers on the server's own machine.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// The abstract Unix-domain socket name of a run (Linux): local workers
/// reach the server through it, which costs about half of a loopback TCP
/// round trip. Derived from the run token, so no two runs share it, but
/// through SHA-256 (domain-separated): the name is listed in the
/// world-readable `/proc/net/unix`, the token must not be.
pub fn local_socket_name(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("daisy local socket\n{token}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("daisy-{hex}")
}

/// Whether a presented token is the run's, compared in time that does not
/// depend on where the two differ (a byte-by-byte `==` stops at the first
/// difference, which a peer could time). Ten lines, so no crate for it.
pub fn tokens_match(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The effective uid of this process: the only user whose local
/// connections the server admits.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Bind the run's abstract Unix-domain socket (None where the platform
/// has none; workers then use TCP).
pub fn bind_local_socket(name: &str) -> Option<tokio::net::UnixListener> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?;
        let std_listener = std::os::unix::net::UnixListener::bind_addr(&addr).ok()?;
        std_listener.set_nonblocking(true).ok()?;
        tokio::net::UnixListener::from_std(std_listener).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        None
    }
}

/// Connect to a run's abstract Unix-domain socket (None if there is none
/// here: a worker on another machine).
pub fn connect_local_socket(name: &str) -> Option<std::os::unix::net::UnixStream> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?;
        std::os::unix::net::UnixStream::connect_addr(&addr).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        None
    }
}

/// Cut an error text to [`MAX_ERROR_BYTES`] on a character boundary.
pub fn cap_error_text(mut text: String) -> String {
    if text.len() > MAX_ERROR_BYTES {
        let mut cut = MAX_ERROR_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[... cut by daisy]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio_util::codec::Decoder;

    proptest! {
        // The fuzz target of the wire: whatever bytes a peer sends, the
        // frame decoder and the message decoder return an error or a value,
        // never panic, and never accept a frame over the cap (bounded: 2000
        // cases of up to 4 KiB each, a second or so, in every cargo test).
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = decode::<ClientMessage>(&bytes);
            let _ = decode::<ServerMessage>(&bytes);
            let mut codec = codec();
            codec.set_max_frame_length(MAX_HELLO_BYTES);
            let mut buf = tokio_util::bytes::BytesMut::from(&bytes[..]);
            while let Ok(Some(frame)) = codec.decode(&mut buf) {
                prop_assert!(frame.len() <= MAX_HELLO_BYTES);
                let _ = decode::<ClientMessage>(&frame);
            }
        }

        #[test]
        fn a_valid_hello_with_its_bytes_mutated_never_panics(flip in 0usize..64, value in any::<u8>()) {
            let hello = ClientMessage::Hello {
                token: "0123456789abcdef0123456789abcdef".into(),
                task_id: "seg".into(),
                worker_id: Some(3),
            };
            let mut bytes = encode(&hello).unwrap();
            let i = flip % bytes.len();
            bytes[i] = value;
            let _ = decode::<ClientMessage>(&bytes);
        }
    }

    #[test]
    fn the_local_socket_name_does_not_reveal_the_token() {
        let token = "0123456789abcdef0123456789abcdef";
        let name = local_socket_name(token);
        assert!(name.starts_with("daisy-") && name.len() == 6 + 32, "{name}");
        assert!(!name.contains(&token[..8]), "{name}");
        assert_eq!(
            name,
            local_socket_name(token),
            "a worker derives the same name"
        );
        assert_ne!(name, local_socket_name("0123456789abcdef0123456789abcdee"));
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match("s3cret", "s3cret"));
        assert!(!tokens_match("s3cres", "s3cret"));
        assert!(!tokens_match("s3cre", "s3cret"));
        assert!(!tokens_match("", "s3cret"));
    }
    use crate::block::{BlockKey, BlockStatus};
    use crate::geometry::{Coord, Roi};

    #[test]
    fn messages_round_trip() {
        let r = Roi::from_slices(&[0, -5, 3], &[4, 4, 4]).unwrap();
        let block = Block {
            key: BlockKey { task: 1, index: 42 },
            spatial_id: 7,
            position: Coord::new(&[1, 2, 3]).unwrap(),
            read_roi: r,
            write_roi: r,
            requested_write_roi: r,
            status: BlockStatus::Failed,
            stats: None,
        };
        for msg in [
            ClientMessage::Hello {
                token: "t".into(),
                task_id: "seg".into(),
                worker_id: Some(3),
            },
            ClientMessage::AcquireBlock,
            ClientMessage::ReleaseBlock { block },
            ClientMessage::BlockFailed {
                block,
                error: "boom".into(),
            },
            ClientMessage::Disconnect,
        ] {
            let bytes = encode(&msg).unwrap();
            assert_eq!(decode::<ClientMessage>(&bytes).unwrap(), msg);
        }
        let bytes = encode(&ServerMessage::SendBlock { block }).unwrap();
        assert!(bytes.len() < 200, "a block frame is small: {}", bytes.len());
    }

    #[test]
    fn garbage_does_not_decode_into_a_hello() {
        let junk = [0xffu8, 0x13, 0x37, 0x00, 0x42];
        assert!(decode::<ClientMessage>(&junk).is_err());
        assert!(decode::<ClientMessage>(&[]).is_err());
    }

    #[test]
    fn a_launcher_hello_frame_decodes_as_the_server_reads_it() {
        let frame = launcher_hello_frame("tok", 3, Some("4711")).unwrap();
        let mut codec = codec();
        codec.set_max_frame_length(MAX_HELLO_BYTES);
        let mut buf = tokio_util::bytes::BytesMut::from(&frame[..]);
        let body = codec.decode(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty(), "one frame, nothing more");
        assert_eq!(
            decode::<ClientMessage>(&body).unwrap(),
            ClientMessage::LauncherHello {
                token: "tok".into(),
                job: 3,
                batch_job_id: Some("4711".into()),
            }
        );
        // the worker messages kept their numbers: a hello still starts at 0
        let hello = encode(&ClientMessage::Hello {
            token: "t".into(),
            task_id: "a".into(),
            worker_id: None,
        })
        .unwrap();
        assert_eq!(hello[0], 0);
    }

    #[test]
    fn tokens_are_random_and_long() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn error_text_is_capped() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = cap_error_text(long);
        assert!(cut.len() <= MAX_ERROR_BYTES + 32);
        assert!(cut.ends_with("[... cut by daisy]"));
    }
}
