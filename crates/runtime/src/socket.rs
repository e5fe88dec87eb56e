//! [`TcpStream`] and [`TcpListener`]: the application's handles, the same for both modes
//! (see [`Mode`](crate::Mode)).

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
#[cfg(feature = "tokio")]
use std::task::{Context, Poll};
use std::time::Duration;

use crate::listener::ShardListener;
use crate::local_socket::{LocalListener, LocalStream};
use crate::stream::ShardStream;
use crate::wait::Wait;

/// Which mode's connection a [`TcpStream`] is.
enum StreamKind {
    Shard(ShardStream),
    Local(LocalStream),
}

/// A TCP connection of a [`Runtime`](crate::Runtime): `Send`, with `std::io::Read` and
/// `Write` that block (optionally with timeouts) or, after
/// [`set_nonblocking`](TcpStream::set_nonblocking), return `WouldBlock`.
///
/// Dropping it closes the connection as close(2) does: FIN after everything written, or
/// RST if received data was left unread.
pub struct TcpStream {
    kind: StreamKind,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    nonblocking: bool,
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (local, remote) = self.addrs();
        f.debug_struct("TcpStream").field("local", &local).field("remote", &remote).finish()
    }
}

impl From<ShardStream> for TcpStream {
    fn from(s: ShardStream) -> TcpStream {
        TcpStream::with_kind(StreamKind::Shard(s))
    }
}

impl From<LocalStream> for TcpStream {
    fn from(s: LocalStream) -> TcpStream {
        TcpStream::with_kind(StreamKind::Local(s))
    }
}

impl TcpStream {
    fn with_kind(kind: StreamKind) -> TcpStream {
        TcpStream { kind, read_timeout: None, write_timeout: None, nonblocking: false }
    }

    fn addrs(&self) -> (SocketAddr, SocketAddr) {
        match &self.kind {
            StreamKind::Shard(s) => (s.shared.local, s.shared.remote),
            StreamKind::Local(s) => (s.local, s.remote),
        }
    }

    /// Return the remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addrs().1)
    }

    /// Return the local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addrs().0)
    }

    /// Return the index of the stack (device queue) the connection lives on.
    pub fn shard(&self) -> usize {
        match &self.kind {
            StreamKind::Shard(s) => s.shard(),
            StreamKind::Local(s) => s.shard(),
        }
    }

    /// Return another handle of the same connection, for example to read on one thread and
    /// write on another (as std's `try_clone`); the connection closes when the last handle
    /// drops. In-thread only: a shard's connection has one reader's and one writer's queue,
    /// so with [`Mode::Shard`](crate::Mode) this fails with `Unsupported`.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        match &self.kind {
            StreamKind::Local(s) => Ok(TcpStream {
                kind: StreamKind::Local(s.try_clone()),
                read_timeout: self.read_timeout,
                write_timeout: self.write_timeout,
                nonblocking: self.nonblocking,
            }),
            StreamKind::Shard(_) => Err(io::Error::new(
                ErrorKind::Unsupported,
                "try_clone needs the in-thread mode (Mode::InThread): a shard's connection has one queue each way",
            )),
        }
    }

    /// Give up a blocked read after `timeout` with `WouldBlock` (as std's `TcpStream`
    /// reports `SO_RCVTIMEO` on Unix); `None` waits without limit.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout = checked(timeout)?;
        Ok(())
    }

    /// Give up a blocked write after `timeout` with `WouldBlock`; `None` waits without limit.
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout = checked(timeout)?;
        Ok(())
    }

    /// Return the read timeout.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// Return the write timeout.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.write_timeout
    }

    /// Make reads and writes return `WouldBlock` instead of waiting (`true`), or wait again.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking = nonblocking;
        Ok(())
    }

    /// Turn Nagle's algorithm off (`true`) or on.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        match &self.kind {
            StreamKind::Shard(s) => s.set_nodelay(nodelay),
            StreamKind::Local(s) => s.set_nodelay(nodelay),
        }
    }

    /// Reset the connection now (RST), dropping what is queued either way, as close(2) does
    /// with `SO_LINGER` set to zero seconds. In-thread mode only.
    pub fn abort(&self) -> io::Result<()> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.abort(),
        }
    }

    /// Turn keep-alive on with `keepalive`'s settings, or off (`SO_KEEPALIVE` with
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`). In-thread mode only.
    pub fn set_keepalive(&self, keepalive: Option<bypass_tcp::Keepalive>) -> io::Result<()> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.set_keepalive(keepalive),
        }
    }

    /// Abort the connection when sent data stays unacknowledged for `limit`
    /// (`TCP_USER_TIMEOUT`; `None`: the stack's retransmission limit only). In-thread mode only.
    pub fn set_user_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.set_user_timeout(limit),
        }
    }

    /// Return what the connection can do now; with `waker`, also register it to be woken
    /// at the next change. See [event loops](crate#event-loops); in-thread mode only.
    pub fn readiness(&self, waker: Option<&std::task::Waker>) -> io::Result<crate::events::Readiness> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.readiness(waker),
        }
    }

    /// Copy what has arrived into `buf` without consuming it, as `MSG_PEEK` does, without
    /// waiting: `WouldBlock` when nothing is there, `Ok(0)` at end of stream. In-thread
    /// mode only.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.peek(buf),
        }
    }

    /// Return how many received bytes wait to be read, as `FIONREAD` does. In-thread mode only.
    pub fn recv_queued(&self) -> io::Result<usize> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.recv_queued(),
        }
    }

    /// Return the connection's TCP state and figures (what `TCP_INFO` reports of a kernel
    /// socket). In-thread mode only.
    pub fn stats(&self) -> io::Result<(bypass_tcp::State, bypass_tcp::Stats)> {
        match &self.kind {
            StreamKind::Shard(_) => Err(crate::errors::unsupported()),
            StreamKind::Local(s) => s.stats(),
        }
    }

    /// Shut down the writing half (`Shutdown::Write`: FIN after what was written), the
    /// reading half (`Shutdown::Read`: reads return end of stream; what arrives is
    /// discarded), or both.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        match &mut self.kind {
            StreamKind::Shard(s) => s.shutdown(how),
            StreamKind::Local(s) => s.shutdown(how),
        }
    }

    fn wait(&self, timeout: Option<Duration>) -> Wait {
        match (self.nonblocking, timeout) {
            (true, _) => Wait::No,
            (false, Some(t)) => Wait::For(t),
            (false, None) => Wait::Forever,
        }
    }

    /// Read received bytes in place: `f` sees the front of what has arrived and returns how
    /// many bytes it consumed and a value. Blocks, times out or returns `WouldBlock` as
    /// [`read`](Read::read) does; at end of stream `f` sees an empty slice. In-thread, `f`
    /// reads the TCP receive buffer itself, so no byte is copied after it arrived; with
    /// shards, it reads a chunk the stack's thread copied (up to 16 KiB), saving the second
    /// copy into a buffer of yours.
    pub fn recv_with<R>(&mut self, f: impl FnOnce(&[u8]) -> (usize, R)) -> io::Result<R> {
        let wait = self.wait(self.read_timeout);
        match &mut self.kind {
            StreamKind::Shard(s) => s.read_with_waiting(wait, f)?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock)),
            StreamKind::Local(s) => s.recv_with(wait, f),
        }
    }

    /// Write in place: `f` fills the front of free send space and returns how many bytes it
    /// wrote and a value; those bytes are sent. Blocks, times out or returns `WouldBlock` as
    /// [`write`](Write::write) does (with shards `f` has run then, and its bytes are dropped;
    /// in-thread it has not run). This saves the copy out of a buffer of yours.
    pub fn send_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> io::Result<R> {
        let wait = self.wait(self.write_timeout);
        match &mut self.kind {
            StreamKind::Shard(s) => {
                s.write_with_waiting(wait, f)?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock))
            }
            StreamKind::Local(s) => s.send_with(wait, f),
        }
    }

    #[cfg(feature = "tokio")]
    /// Read without waiting; on nothing yet, arrange for `cx`'s task to be woken.
    pub(crate) fn poll_read(&mut self, cx: &Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        match &mut self.kind {
            StreamKind::Shard(s) => s.poll_read(cx, buf.initialize_unfilled()).map_ok(|n| buf.advance(n)),
            StreamKind::Local(s) => s.poll_read(cx, buf),
        }
    }

    #[cfg(feature = "tokio")]
    /// Write without waiting; on no room, arrange for `cx`'s task to be woken.
    pub(crate) fn poll_write(&mut self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.kind {
            StreamKind::Shard(s) => s.poll_write(cx, data),
            StreamKind::Local(s) => s.poll_write(cx, data),
        }
    }

    #[cfg(feature = "tokio")]
    /// Send FIN after what was written without blocking the thread.
    pub(crate) fn poll_shutdown(&mut self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.kind {
            StreamKind::Shard(s) => s.poll_shutdown(cx),
            StreamKind::Local(s) => s.poll_shutdown(cx),
        }
    }
}

/// Refuse a zero timeout, as std does.
fn checked(timeout: Option<Duration>) -> io::Result<Option<Duration>> {
    if timeout == Some(Duration::ZERO) {
        return Err(io::Error::new(ErrorKind::InvalidInput, "a zero timeout is not a timeout: use set_nonblocking"));
    }
    Ok(timeout)
}

impl Read for TcpStream {
    /// Read what has arrived: `Ok(0)` at end of stream. See [`TcpStream`] for blocking.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let wait = self.wait(self.read_timeout);
        match &mut self.kind {
            StreamKind::Shard(s) => s.read_waiting(buf, wait)?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock)),
            StreamKind::Local(s) => s.read(buf, wait),
        }
    }
}

impl Write for TcpStream {
    /// Queue what the send buffer takes of `data` (with shards, up to 16 KiB for the stack's
    /// thread to take).
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let wait = self.wait(self.write_timeout);
        match &mut self.kind {
            StreamKind::Shard(s) => s.write_waiting(data, wait)?.ok_or_else(|| io::Error::from(ErrorKind::WouldBlock)),
            StreamKind::Local(s) => s.write(data, wait),
        }
    }

    /// Nothing to do: written bytes are queued for the stack already (as a kernel socket's
    /// flush does nothing).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Which mode's listener a [`TcpListener`] is.
enum ListenerKind {
    Shard(ShardListener),
    Local(LocalListener),
}

/// A listening port of a [`Runtime`](crate::Runtime): every stack listens, and
/// [`accept`](TcpListener::accept) returns connections established on any of them. `Send`;
/// dropping it stops listening (connections not yet accepted are reset).
pub struct TcpListener {
    kind: ListenerKind,
    local: SocketAddr,
    nonblocking: bool,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener").field("local", &self.local).finish()
    }
}

impl TcpListener {
    pub(crate) fn shard(inner: ShardListener, local: SocketAddr) -> TcpListener {
        TcpListener { kind: ListenerKind::Shard(inner), local, nonblocking: false, timeout: None }
    }

    pub(crate) fn local(inner: LocalListener, local: SocketAddr) -> TcpListener {
        TcpListener { kind: ListenerKind::Local(inner), local, nonblocking: false, timeout: None }
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
        let wait = match (self.nonblocking, self.timeout) {
            (true, _) => Wait::No,
            (false, Some(t)) => Wait::For(t),
            (false, None) => Wait::Forever,
        };
        let stream: TcpStream = match &self.kind {
            ListenerKind::Shard(l) => l.accept(wait)?.into(),
            ListenerKind::Local(l) => l.accept(wait)?.into(),
        };
        let remote = stream.addrs().1;
        Ok((stream, remote))
    }

    /// Return whether a connection waits to be accepted; with `waker`, also register it to
    /// be woken when one arrives. See [event loops](crate#event-loops); in-thread mode only.
    pub fn readiness(&self, waker: Option<&std::task::Waker>) -> io::Result<bool> {
        match &self.kind {
            ListenerKind::Shard(_) => Err(crate::errors::unsupported()),
            ListenerKind::Local(l) => l.readiness(waker),
        }
    }

    /// Return an iterator over accepted connections, as std's `incoming`.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }

    #[cfg(feature = "tokio")]
    /// Return the next established connection, or arrange for `cx`'s task to be woken.
    pub(crate) fn poll_accept(&self, cx: &Context<'_>) -> Poll<io::Result<TcpStream>> {
        match &self.kind {
            ListenerKind::Shard(l) => l.poll_accept(cx).map_ok(TcpStream::from),
            ListenerKind::Local(l) => l.poll_accept(cx).map_ok(TcpStream::from),
        }
    }
}
