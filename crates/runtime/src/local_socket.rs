//! Connections and listeners of the in-thread mode ([`crate::local`]): every call runs the
//! stack in the caller's thread.

use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
#[cfg(feature = "tokio")]
use std::task::{Context, Poll};
use std::time::Duration;

use bypass_stack::SocketId;
use bypass_tcp::State as TcpState;
use std::task::Waker;

use crate::events::Readiness;
use crate::local::{Core, State, Waiter, block_on, connect_outcome};
use crate::wait::Wait;

/// What a [`LocalStream`] asks of its connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

/// A connection of an in-thread stack (one handle of it: see [`try_clone`](LocalStream::try_clone)).
pub(crate) struct LocalStream {
    core: Arc<Core>,
    id: SocketId,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    /// `shutdown(Read)` on this handle: its reads return end of stream.
    read_shut: bool,
    /// Closes the connection when the last handle goes.
    _closer: Arc<Closer>,
}

/// Closes a connection as close(2) does when dropped: FIN after what was written, or RST if
/// received data is left unread (see [`bypass_stack::Stack::close`]).
struct Closer {
    core: Arc<Core>,
    id: SocketId,
}

impl Drop for Closer {
    fn drop(&mut self) {
        let id = self.id;
        self.core.with(|st| {
            st.socks.remove(&id);
            if let Some(stack) = st.stack.as_mut() {
                stack.close(id);
                let _ = stack.poll_tx();
            }
            self.core.after_call(st);
        });
    }
}

impl LocalStream {
    /// Return the handle of `id`, a connection of `core` between `local` and `remote`.
    pub(crate) fn new(core: Arc<Core>, id: SocketId, local: SocketAddr, remote: SocketAddr) -> LocalStream {
        let closer = Arc::new(Closer { core: Arc::clone(&core), id });
        LocalStream { core, id, local, remote, read_shut: false, _closer: closer }
    }

    /// Return another handle of the same connection; it closes when the last handle drops.
    pub(crate) fn try_clone(&self) -> LocalStream {
        LocalStream {
            core: Arc::clone(&self.core),
            id: self.id,
            local: self.local,
            remote: self.remote,
            read_shut: false,
            _closer: Arc::clone(&self._closer),
        }
    }

    /// Return the handle of `id` once its addresses are known (it has been accepted or has
    /// connected).
    pub(crate) fn adopt(core: &Arc<Core>, st: &mut State, id: SocketId) -> io::Result<LocalStream> {
        let tuple = st.stack()?.interface().connection(id).and_then(|c| c.tuple());
        let tuple = tuple.ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "the connection is gone"))?;
        Ok(LocalStream::new(Arc::clone(core), id, tuple.local, tuple.remote))
    }

    pub(crate) fn shard(&self) -> usize {
        self.core.index
    }

    /// Run `op` on the stack until it stops saying `WouldBlock`, waiting as `wait` says.
    fn blocking<T>(
        &self,
        side: Side,
        wait: Wait,
        mut op: impl FnMut(&mut State, SocketId) -> io::Result<T>,
    ) -> io::Result<T> {
        let id = self.id;
        block_on(
            std::slice::from_ref(&self.core),
            wait,
            |_, st| match op(st, id) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => None,
                r => Some(r),
            },
            |_, st, w| register(st, id, side, w),
        )
    }

    /// Return what the connection can do now; with `waker`, also register it to be woken at
    /// the next change of either side (in the same hold of the lock: no change is missed).
    pub(crate) fn readiness(&self, waker: Option<&Waker>) -> io::Result<Readiness> {
        let id = self.id;
        self.core.with(|st| {
            let stack = st.stack()?;
            let ready = stack.readiness(id);
            let conn = stack.interface().connection(id);
            let peer_closed = conn.is_none_or(|c| c.peer_closed());
            let received = conn.map_or(0, |c| c.stats().bytes_in);
            // A closed connection's read says whether it failed (an empty read consumes
            // nothing and keeps the error for the application's read).
            let failed = ready.state == TcpState::Closed && stack.read(id, &mut []).is_err();
            let readiness = Readiness {
                readable: ready.readable || self.read_shut,
                writable: ready.writable || failed,
                peer_closed: peer_closed || self.read_shut,
                hung_up: ready.state == TcpState::Closed
                    || (peer_closed
                        && matches!(ready.state, TcpState::LastAck | TcpState::TimeWait | TcpState::Closing)),
                error: failed,
                received,
            };
            if let Some(w) = waker {
                let sock = st.sock(id);
                sock.readers.add(Waiter::Task(w.clone()));
                sock.writers.add(Waiter::Task(w.clone()));
            }
            Ok(readiness)
        })
    }

    /// Copy what has arrived into `buf` without consuming it (`MSG_PEEK`); `WouldBlock`
    /// when nothing is there yet, `Ok(0)` at end of stream.
    pub(crate) fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read_shut {
            return Ok(0);
        }
        let id = self.id;
        self.core.with(|st| {
            st.stack()?.recv_with(id, |data| {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                (0, n)
            })
        })
    }

    /// Return the bytes waiting to be read (`FIONREAD`).
    pub(crate) fn recv_queued(&self) -> io::Result<usize> {
        let id = self.id;
        self.core.with(|st| Ok(if self.read_shut { 0 } else { st.stack()?.recv_queued(id) }))
    }

    /// Return the connection's state and figures (`TCP_INFO`).
    pub(crate) fn stats(&self) -> io::Result<(TcpState, bypass_tcp::Stats)> {
        let id = self.id;
        self.core.with(|st| {
            let stack = st.stack()?;
            let stats =
                stack.tcp_stats(id).ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "the connection is gone"))?;
            Ok((stack.state(id), stats))
        })
    }

    /// Read what has arrived into `buf`: `Ok(0)` at end of stream.
    pub(crate) fn read(&mut self, buf: &mut [u8], wait: Wait) -> io::Result<usize> {
        if self.read_shut || buf.is_empty() {
            return Ok(0);
        }
        let core = &self.core;
        self.blocking(Side::Read, wait, |st, id| {
            let n = st.stack()?.read(id, buf)?;
            // The window the read opened goes out now (when it is due), not when a later
            // call or the helper polls.
            core.transmit(st)?;
            Ok(n)
        })
    }

    /// Queue `data` for sending (some of it, as the send buffer takes) and transmit.
    pub(crate) fn write(&mut self, data: &[u8], wait: Wait) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let core = &self.core;
        self.blocking(Side::Write, wait, |st, id| {
            let n = st.stack()?.write(id, data)?;
            core.transmit(st)?;
            Ok(n)
        })
    }

    /// Read in place: see [`crate::TcpStream::recv_with`].
    pub(crate) fn recv_with<R>(&mut self, wait: Wait, f: impl FnOnce(&[u8]) -> (usize, R)) -> io::Result<R> {
        if self.read_shut {
            return Ok(f(&[]).1);
        }
        let mut f = Some(f);
        let core = &self.core;
        self.blocking(Side::Read, wait, |st, id| {
            let r = st.stack()?.recv_with(id, |data| (f.take().expect("called once"))(data))?;
            core.transmit(st)?;
            Ok(r)
        })
    }

    /// Write in place: see [`crate::TcpStream::send_with`].
    pub(crate) fn send_with<R>(&mut self, wait: Wait, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> io::Result<R> {
        let mut f = Some(f);
        let core = &self.core;
        self.blocking(Side::Write, wait, |st, id| {
            let r = st.stack()?.send_with(id, |space| (f.take().expect("called once"))(space))?;
            core.transmit(st)?;
            Ok(r)
        })
    }

    pub(crate) fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.core.with(|st| st.stack().map(|s| s.set_nodelay(self.id, nodelay)))
    }

    /// Reset the connection now (RST), dropping what is queued either way, as close(2) does
    /// with `SO_LINGER` set to zero seconds. What writes left for a later transmit (the
    /// helper's, or the next poll's) goes out first, as the kernel had sent it in the write.
    pub(crate) fn abort(&self) -> io::Result<()> {
        let id = self.id;
        self.core.with(|st| {
            let stack = st.stack()?;
            stack.poll_tx()?;
            stack.abort(id);
            stack.poll_tx()?;
            Ok(())
        })
    }

    pub(crate) fn set_keepalive(&self, keepalive: Option<bypass_tcp::Keepalive>) -> io::Result<()> {
        self.core.with(|st| {
            st.stack()?.set_keepalive(self.id, keepalive);
            self.core.after_call(st);
            Ok(())
        })
    }

    pub(crate) fn set_user_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        self.core.with(|st| {
            st.stack()?.set_user_timeout(self.id, limit);
            self.core.after_call(st);
            Ok(())
        })
    }

    pub(crate) fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.core.with(|st| {
                let stack = st.stack()?;
                stack.shutdown(self.id);
                stack.poll_tx()?;
                self.core.after_call(st);
                Ok::<_, io::Error>(())
            })?;
        }
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.read_shut = true;
        }
        Ok(())
    }

    #[cfg(feature = "tokio")]
    /// Try `op` without waiting; on `WouldBlock`, register `cx`'s task to be woken when the
    /// connection changes and make sure a driver polls the stack.
    fn poll_op<T>(
        &mut self,
        cx: &Context<'_>,
        side: Side,
        mut op: impl FnMut(&mut State, SocketId, bool) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        #[cfg(feature = "tokio")]
        self.core.ensure_driver();
        let id = self.id;
        // With a driver polling, it receives and transmits once for every task of this turn
        // of the worker; without (it sleeps), this call does.
        let driven = self.core.driver_awake();
        let core = &self.core;
        core.with(|st| match op(st, id, !driven) {
            Ok(r) => {
                if !driven {
                    core.after_call(st);
                }
                Poll::Ready(Ok(r))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if !driven {
                    if let Err(e) = core.progress(st, true) {
                        return Poll::Ready(Err(e));
                    }
                    match op(st, id, true) {
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        r => return Poll::Ready(r),
                    }
                }
                register(st, id, side, Waiter::Task(cx.waker().clone()));
                Poll::Pending
            }
            r => Poll::Ready(r),
        })
    }

    #[cfg(feature = "tokio")]
    /// Read into `buf`'s unfilled part. Only as many bytes of it are initialized as are
    /// there to read (at least one, so the read still tells nothing-yet from the end): a
    /// reader such as hyper hands over kilobytes of uninitialized space on every call, and
    /// zeroing it all each time cost more than the copy.
    pub(crate) fn poll_read(&mut self, cx: &Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.read_shut || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        self.poll_op(cx, Side::Read, |st, id, flush| {
            let stack = st.stack()?;
            let want = stack.recv_queued(id).clamp(1, buf.remaining());
            let n = stack.read(id, buf.initialize_unfilled_to(want))?;
            buf.advance(n);
            if flush {
                stack.poll_tx()?;
            }
            Ok(())
        })
    }

    #[cfg(feature = "tokio")]
    pub(crate) fn poll_write(&mut self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.poll_op(cx, Side::Write, |st, id, flush| {
            let stack = st.stack()?;
            let n = stack.write(id, data)?;
            if flush {
                stack.poll_tx()?;
            }
            Ok(n)
        })
    }

    #[cfg(feature = "tokio")]
    pub(crate) fn poll_shutdown(&mut self, _: &Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.shutdown(Shutdown::Write))
    }

    /// Wait for the handshake of a connection being opened: `Ok` once established.
    pub(crate) fn connect_wait(core: &Arc<Core>, id: SocketId, timeout: Option<Duration>) -> io::Result<LocalStream> {
        let wait = timeout.map_or(Wait::Forever, Wait::For);
        let outcome = block_on(
            std::slice::from_ref(core),
            wait,
            |_, st| connect_outcome(st, id),
            |_, st, w| register(st, id, Side::Write, w),
        );
        match outcome {
            Ok(()) => core.with(|st| LocalStream::adopt(core, st, id)),
            Err(e) => {
                abandon(core, id);
                if e.kind() == ErrorKind::WouldBlock {
                    return Err(io::Error::new(ErrorKind::TimedOut, "connection timed out"));
                }
                Err(e)
            }
        }
    }

    #[cfg(feature = "tokio")]
    /// Poll the handshake of a connection being opened (tokio).
    pub(crate) fn poll_connect(core: &Arc<Core>, id: SocketId, cx: &Context<'_>) -> Poll<io::Result<LocalStream>> {
        #[cfg(feature = "tokio")]
        core.ensure_driver();
        core.with(|st| {
            let outcome = match connect_outcome(st, id) {
                None => {
                    if let Err(e) = core.progress(st, true) {
                        return Poll::Ready(Err(e));
                    }
                    connect_outcome(st, id)
                }
                done => done,
            };
            match outcome {
                None => {
                    register(st, id, Side::Write, Waiter::Task(cx.waker().clone()));
                    Poll::Pending
                }
                Some(Ok(())) => Poll::Ready(LocalStream::adopt(core, st, id)),
                Some(Err(e)) => Poll::Ready(Err(e)),
            }
        })
    }
}

/// Give up a connection being opened (its handle never reached the application).
pub(crate) fn abandon(core: &Core, id: SocketId) {
    core.with(|st| {
        st.socks.remove(&id);
        if let Some(stack) = st.stack.as_mut() {
            stack.abort(id);
            let _ = stack.poll_tx();
        }
    });
}

/// Add `w` to the waiters of `id`'s `side`.
fn register(st: &mut State, id: SocketId, side: Side, w: Waiter) {
    let sock = st.sock(id);
    match side {
        Side::Read => sock.readers.add(w),
        Side::Write => sock.writers.add(w),
    }
}

/// A port listened on by every in-thread stack of a runtime.
pub(crate) struct LocalListener {
    /// Every stack of the runtime, in order of their index.
    cores: Vec<Arc<Core>>,
    port: u16,
}

impl LocalListener {
    pub(crate) fn new(cores: Vec<Arc<Core>>, port: u16) -> LocalListener {
        LocalListener { cores, port }
    }

    /// Take an established connection from the queue of stack `k`, whose state is `st`.
    fn take(&self, k: usize, st: &mut State) -> Option<io::Result<LocalStream>> {
        let core = &self.cores[k];
        if st.stack.is_none() {
            return Some(Err(io::Error::new(
                ErrorKind::NotConnected,
                "the runtime stopped: no more connections will be accepted",
            )));
        }
        let id = st.listeners.get_mut(&self.port)?.ready.pop_front()?;
        Some(LocalStream::adopt(core, st, id))
    }

    /// Return whether a connection waits to be accepted; with `waker`, also register it to
    /// be woken when one arrives (in the same hold of each stack's lock).
    pub(crate) fn readiness(&self, waker: Option<&Waker>) -> io::Result<bool> {
        let mut ready = false;
        for core in &self.cores {
            core.with(|st| {
                let stopped = st.stack.is_none();
                let Some(l) = st.listeners.get_mut(&self.port) else { return };
                ready |= stopped || !l.ready.is_empty();
                if let Some(w) = waker {
                    l.waiters.add(Waiter::Task(w.clone()));
                }
            });
        }
        Ok(ready)
    }

    pub(crate) fn accept(&self, wait: Wait) -> io::Result<LocalStream> {
        let port = self.port;
        block_on(
            &self.cores,
            wait,
            |k, st| self.take(k, st),
            |_, st, w| {
                if let Some(l) = st.listeners.get_mut(&port) {
                    l.waiters.add(w);
                }
            },
        )
    }

    #[cfg(feature = "tokio")]
    pub(crate) fn poll_accept(&self, cx: &Context<'_>) -> Poll<io::Result<LocalStream>> {
        for core in &self.cores {
            #[cfg(feature = "tokio")]
            core.ensure_driver();
            let k = core.index;
            let driven = core.driver_awake();
            let polled = core.with(|st| {
                if let Some(r) = self.take(k, st) {
                    return Some(r);
                }
                if !driven {
                    if let Err(e) = core.progress(st, true) {
                        return Some(Err(e));
                    }
                    if let Some(r) = self.take(k, st) {
                        return Some(r);
                    }
                }
                if let Some(l) = st.listeners.get_mut(&self.port) {
                    l.waiters.add(Waiter::Task(cx.waker().clone()));
                }
                None
            });
            if let Some(r) = polled {
                return Poll::Ready(r);
            }
        }
        Poll::Pending
    }
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        for core in &self.cores {
            core.unlisten(self.port);
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
