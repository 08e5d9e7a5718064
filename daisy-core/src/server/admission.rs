//! Who is let in, and how many wait at each door. [`Admission`] owns the
//! bookkeeping of the run's connections (the state holds it, the
//! connection tasks change it); [`Door`] says which listener a connection
//! came through.

/// Connections that have not said hello yet, at most, at once, through
/// each door (the TCP port and the local socket count apart, so strangers
/// on the network cannot make this machine's own workers wait): far more
/// than workers start at once on any cluster, few enough that strangers
/// cannot hold the driver's descriptors and memory. More are told the
/// server is busy.
pub const MAX_PENDING_HELLOS: usize = 256;

/// Which listener a connection came through: each has its own allowance
/// of connections waiting to say hello ([`MAX_PENDING_HELLOS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Door {
    /// The TCP port: workers on other machines, and anyone on the network.
    Tcp = 0,
    /// The Unix-domain socket: this machine's workers of this user.
    Local = 1,
}

impl std::fmt::Display for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Door::Tcp => "the TCP port",
            Door::Local => "the local socket",
        })
    }
}

/// The doors' bookkeeping: connections accepted, those still to say
/// hello (per door: a flood through the TCP port never keeps out workers
/// coming through the local socket), those admitted and still open, and
/// the clients that came without a worker id. The run's state holds it;
/// `connection` changes it.
#[derive(Debug, Default)]
pub(super) struct Admission {
    next_conn: u64,
    pub(super) pending_hellos: [usize; 2],
    pub(super) door_was_full: [bool; 2],
    pub(super) open_connections: usize,
    pub(super) unmanaged_clients: u32,
}

impl Admission {
    /// Admitted connections whose handler still runs (the run's end waits
    /// for them to hear "no more blocks").
    pub(super) fn open_connections(&self) -> usize {
        self.open_connections
    }

    /// Clients that connected without a worker id, in all.
    pub(super) fn unmanaged_clients(&self) -> u32 {
        self.unmanaged_clients
    }

    /// A fresh connection id.
    pub(super) fn new_conn_id(&mut self) -> u64 {
        self.next_conn += 1;
        self.next_conn
    }

    /// One more stranger through `door` to wait for, unless the door is
    /// full (then false, and the first time it says so).
    pub(super) fn expect_hello(&mut self, door: Door) -> bool {
        let waiting = &mut self.pending_hellos[door as usize];
        if *waiting < MAX_PENDING_HELLOS {
            *waiting += 1;
            return true;
        }
        if !self.door_was_full[door as usize] {
            self.door_was_full[door as usize] = true;
            tracing::warn!(
                "{MAX_PENDING_HELLOS} connections through {door} are waiting to say hello; \
                 more are told the server is busy (a port scan, or clients stuck on the \
                 network?). Workers that come through {} are not affected",
                match door {
                    Door::Tcp => Door::Local,
                    Door::Local => Door::Tcp,
                }
            );
        }
        false
    }

    /// A stranger through `door` said hello (or gave up).
    pub(super) fn hello_heard(&mut self, door: Door) {
        self.pending_hellos[door as usize] -= 1;
    }

    /// A connection was admitted: its handler runs.
    pub(super) fn opened(&mut self) {
        self.open_connections += 1;
    }

    /// An admitted connection's handler ended.
    pub(super) fn closed(&mut self) {
        self.open_connections = self.open_connections.saturating_sub(1);
    }

    /// A client connected without a worker id.
    pub(super) fn unmanaged_joined(&mut self) {
        self.unmanaged_clients += 1;
    }
}
