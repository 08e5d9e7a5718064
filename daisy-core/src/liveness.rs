//! Liveness of the TCP connections between the server and its workers:
//! a peer that vanished without a FIN or RST (a node that lost power, a
//! kernel panic, a cut cable, a network partition) is noticed within a
//! bounded time, on both ends.
//!
//! Without this, a connection to a dead host looks exactly like one to a
//! worker busy with a long block: the server waits for ever for the block
//! it holds, and a worker waiting for a block waits for ever for a server
//! that is gone. [`watch`] asks the kernel to find out: TCP keepalive
//! probes start after a quarter of the timeout without traffic and repeat
//! every eighth of it, and `TCP_USER_TIMEOUT` aborts the connection once
//! data or probes went unacknowledged for the whole timeout. A live peer's
//! kernel answers the probes whatever its process does (a block may run
//! for hours: that is the task `timeout`'s business), so the check costs
//! no message of daisy's, no thread and nothing per block; the server
//! notices the abort as a connection error, reclaims what the connection
//! held and retries it, and a worker's next read or write fails, so it
//! exits. The same timeout travels to workers in their context
//! (`liveness_timeout`, seconds), so both ends give up after the same time.
//!
//! [`DEFAULT_TIMEOUT`] is 60 s: far longer than any pause of a healthy
//! cluster network (a switch failover takes seconds), short enough that a
//! dead node costs a minute of a run, not a day. Keepalive takes whole
//! seconds, hence [`MIN_TIMEOUT`].

use crate::error::DaisyError;
use std::time::Duration;

/// How long a silent peer is given, unless the run says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The shortest liveness timeout: keepalive counts in whole seconds, and
/// the first probe must come well before the timeout ends.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The liveness timeout for `seconds` as the user gave it: a finite
/// number of at least [`MIN_TIMEOUT`].
pub fn timeout_from_secs(seconds: f64) -> Result<Duration, DaisyError> {
    if !seconds.is_finite() || seconds < MIN_TIMEOUT.as_secs_f64() {
        return Err(DaisyError::invalid(
            "liveness_timeout",
            format!(
                "expected seconds, at least {}, got {seconds}; it is how long a worker or \
                 server that stopped answering (a dead node, a cut network) is waited for",
                MIN_TIMEOUT.as_secs()
            ),
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Have the kernel check that the peer of `socket` is alive, and abort
/// the connection after `timeout` without an answer (see the module
/// docs).
pub fn watch<S: std::os::fd::AsFd>(socket: &S, timeout: Duration) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(socket);
    let idle = (timeout / 4).max(Duration::from_secs(1));
    let interval = (timeout / 8).max(Duration::from_secs(1));
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(interval)
        .with_retries(8);
    sock.set_tcp_keepalive(&keepalive)?;
    sock.set_tcp_user_timeout(Some(timeout))
}

/// The error a connection that was aborted for want of an answer gives:
/// what happened, in words a user can act on.
pub fn explain(e: &std::io::Error, peer: &str, timeout: Duration) -> Option<String> {
    (e.kind() == std::io::ErrorKind::TimedOut || e.raw_os_error() == Some(libc::ETIMEDOUT)).then(
        || {
            format!(
                "{peer} stopped answering: nothing came back for {} s (liveness_timeout); its \
                 host is down or the network between is cut",
                timeout.as_secs()
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_at_least_the_minimum_and_finite() {
        assert_eq!(timeout_from_secs(60.0).unwrap(), DEFAULT_TIMEOUT);
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY] {
            let e = timeout_from_secs(bad).unwrap_err().to_string();
            assert!(e.starts_with("liveness_timeout: "), "{e}");
        }
    }

    #[test]
    fn a_watched_socket_has_keepalive_and_a_user_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        watch(&stream, Duration::from_secs(8)).unwrap();
        let sock = socket2::SockRef::from(&stream);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(2));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(1)
        );
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(8))
        );
    }
}
