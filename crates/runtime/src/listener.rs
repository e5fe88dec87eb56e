//! [`TcpListener`]: a port listened on by every shard of a runtime, accepting from all.

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use crate::shard::{Command, ShardLink};
use crate::stream::TcpStream;

/// What a listener's shards share with its handle.
#[derive(Default)]
pub(crate) struct ListenerShared {
    /// A task waiting in `poll_accept` (the tokio feature).
    pub(crate) waker: Mutex<Option<Waker>>,
}

impl ListenerShared {
    pub(crate) fn wake(&self) {
        if let Some(w) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            w.wake();
        }
    }
}

/// A listening port of a [`Runtime`](crate::Runtime): every shard listens, and
/// [`accept`](TcpListener::accept) returns connections established on any of them. `Send`;
/// dropping it stops listening (connections not yet accepted are reset).
pub struct TcpListener {
    pub(crate) port: u16,
    pub(crate) local: SocketAddr,
    pub(crate) accepted: Receiver<TcpStream>,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) shared: Arc<ListenerShared>,
    pub(crate) links: Vec<Arc<ShardLink>>,
    nonblocking: bool,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener").field("local", &self.local).finish()
    }
}

impl TcpListener {
    pub(crate) fn new(
        port: u16,
        local: SocketAddr,
        accepted: Receiver<TcpStream>,
        shared: Arc<ListenerShared>,
        links: Vec<Arc<ShardLink>>,
    ) -> TcpListener {
        TcpListener { port, local, accepted, shared, links, nonblocking: false, timeout: None }
    }

    /// Return the address listened on (the stack's first address and the port).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// Make [`accept`](TcpListener::accept) return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking = nonblocking;
        Ok(())
    }

    /// Give up a blocked [`accept`](TcpListener::accept) after `timeout` with `WouldBlock`.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Return the next established connection and its peer's address, waiting for one
    /// unless non-blocking or timed out.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let stream = if self.nonblocking {
            self.try_accept()?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock))?
        } else if let Some(t) = self.timeout {
            match self.accepted.recv_timeout(t) {
                Ok(s) => s,
                Err(RecvTimeoutError::Timeout) => return Err(io::Error::from(ErrorKind::WouldBlock)),
                Err(RecvTimeoutError::Disconnected) => return Err(stopped()),
            }
        } else {
            self.accepted.recv().map_err(|_| stopped())?
        };
        let remote = stream.shared.remote;
        Ok((stream, remote))
    }

    /// Return an established connection if one is waiting.
    pub(crate) fn try_accept(&self) -> io::Result<Option<TcpStream>> {
        match self.accepted.try_recv() {
            Ok(s) => Ok(Some(s)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(stopped()),
        }
    }

    /// Return an iterator over accepted connections, as std's `incoming`.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        for link in &self.links {
            link.command(Command::Unlisten(self.port));
        }
    }
}

fn stopped() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the runtime stopped: no more connections will be accepted")
}
