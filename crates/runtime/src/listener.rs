//! A port listened on by every shard of a runtime (the shard mode), accepting from all.

use std::io::{self, ErrorKind};
use std::sync::Arc;
#[cfg(feature = "tokio")]
use std::task::{Context, Poll};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use crate::stream::{Command, ListenerShared, ShardLink, ShardStream};
use crate::wait::Wait;
#[cfg(feature = "tokio")]
use crate::wait::park;

/// A port listened on by every shard of a runtime: the application's side of the queue of
/// accepted connections. Dropping it stops listening (connections not yet accepted are reset).
pub(crate) struct ShardListener {
    pub(crate) port: u16,
    pub(crate) accepted: Receiver<ShardStream>,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) shared: Arc<ListenerShared>,
    pub(crate) links: Vec<Arc<ShardLink>>,
}

impl ShardListener {
    /// Return the next established connection, waiting as `wait` says.
    pub(crate) fn accept(&self, wait: Wait) -> io::Result<ShardStream> {
        match wait {
            Wait::No => self.try_accept()?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock)),
            Wait::For(t) => match self.accepted.recv_timeout(t) {
                Ok(s) => Ok(s),
                Err(RecvTimeoutError::Timeout) => Err(io::Error::from(ErrorKind::WouldBlock)),
                Err(RecvTimeoutError::Disconnected) => Err(stopped()),
            },
            Wait::Forever => self.accepted.recv().map_err(|_| stopped()),
        }
    }

    /// Return an established connection if one is waiting.
    fn try_accept(&self) -> io::Result<Option<ShardStream>> {
        match self.accepted.try_recv() {
            Ok(s) => Ok(Some(s)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(stopped()),
        }
    }

    #[cfg(feature = "tokio")]
    /// Return the next established connection, or park `cx`'s task to be woken when one is.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn poll_accept(&self, cx: &Context<'_>) -> Poll<io::Result<ShardStream>> {
        for attempt in 0..2 {
            if let Some(stream) = self.try_accept()? {
                return Poll::Ready(Ok(stream));
            }
            if attempt == 0 {
                // Park, then look again: a connection handed out in between is not missed.
                park(&self.shared.waker, cx);
            }
        }
        Poll::Pending
    }
}

impl Drop for ShardListener {
    fn drop(&mut self) {
        for link in &self.links {
            link.command(Command::Unlisten(self.port));
        }
    }
}

fn stopped() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the runtime stopped: no more connections will be accepted")
}
