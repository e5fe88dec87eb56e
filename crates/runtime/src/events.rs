//! What event loops use: readiness and the idle guard (see the crate docs, "Event loops";
//! the connect that does not wait, [`PendingConnect`](crate::PendingConnect), is in
//! `local_socket.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::local::Core;

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
