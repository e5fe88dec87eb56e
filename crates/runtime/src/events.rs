//! What event loops use: readiness, the idle guard and a connect that does not wait (see
//! the crate docs, "Event loops").

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;

use bypass_stack::SocketId;

use crate::local::{Core, Waiter, connect_outcome};
use crate::local_socket::{LocalStream, abandon};

/// What a connection can do now, as poll(2) reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read would not wait: data, end of stream, or an error is there (`POLLIN`).
    pub readable: bool,
    /// A write would take some data (`POLLOUT`).
    pub writable: bool,
    /// The peer has sent FIN (`POLLRDHUP`).
    pub peer_closed: bool,
    /// The connection is closed both ways, or was reset (`POLLHUP`).
    pub hung_up: bool,
    /// The connection failed (reset, timed out, unreachable): a read reports why (`POLLERR`).
    pub error: bool,
    /// Payload bytes received so far, in order: it grows with every segment of new data,
    /// which is what edge-triggered epoll reports as a new `EPOLLIN` edge.
    pub received: u64,
}

/// Return the error every call of this module gets with shards.
pub(crate) fn unsupported() -> io::Error {
    io::Error::new(ErrorKind::Unsupported, "readiness and non-blocking connects need the runtime's in-thread mode")
}

/// Tells the stacks' helpers that a thread sleeps on them while it lives (so they watch
/// the devices and wake the waker it registered): see [`Runtime::idle`](crate::Runtime::idle).
pub struct Idle {
    cores: Vec<Arc<Core>>,
}

impl Idle {
    pub(crate) fn new(cores: &[Arc<Core>]) -> Idle {
        for core in cores {
            core.sleeping.fetch_add(1, Ordering::SeqCst);
            core.call_helper();
        }
        Idle { cores: cores.to_vec() }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        for core in &self.cores {
            core.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A connection being opened by [`Runtime::connect_start`](crate::Runtime::connect_start):
/// its SYN is sent. Dropped before it completes, the attempt is abandoned (RST).
pub struct PendingConnect {
    core: Arc<Core>,
    id: Option<SocketId>,
}

impl PendingConnect {
    pub(crate) fn new(core: Arc<Core>, id: SocketId) -> PendingConnect {
        PendingConnect { core, id: Some(id) }
    }

    /// Return the local address chosen for the connection.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let id = self.id.ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "the connect has finished"))?;
        self.core.with(|st| {
            let tuple = st.stack()?.interface().connection(id).and_then(|c| c.tuple());
            tuple.map(|t| t.local).ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "the connection is gone"))
        })
    }

    /// Look at the handshake: `None` while it runs (`waker`, if given, is woken when it
    /// ends), else the connection or why it failed (`ConnectionRefused` for a RST,
    /// `TimedOut`, ...). Once it has returned `Some`, it returns `NotConnected`.
    pub fn poll(&mut self, waker: Option<&Waker>) -> Option<io::Result<crate::TcpStream>> {
        let Some(id) = self.id else {
            return Some(Err(io::Error::new(ErrorKind::NotConnected, "the connect has finished")));
        };
        let core = &self.core;
        let outcome = core.with(|st| match connect_outcome(st, id) {
            None => {
                if let Some(w) = waker {
                    st.sock(id).writers.add(Waiter::Task(w.clone()));
                }
                None
            }
            Some(Ok(())) => Some(LocalStream::adopt(core, st, id)),
            Some(Err(e)) => Some(Err(e)),
        })?;
        self.id = None;
        Some(outcome.map(crate::TcpStream::from))
    }
}

impl Drop for PendingConnect {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            abandon(&self.core, id);
        }
    }
}

impl std::fmt::Debug for PendingConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingConnect").field("id", &self.id).finish()
    }
}
