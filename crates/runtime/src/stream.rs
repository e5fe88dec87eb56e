//! The application's side of a stack that runs on its own thread (the shard mode): one
//! connection ([`ShardStream`]), with blocking, timed and non-blocking reads and writes, and
//! the command queue by which connections, listeners and the runtime reach the shard
//! ([`ShardLink`], [`Command`]). The shard's thread ([`crate::shard`]) owns the stack and
//! takes these commands; nothing here reaches into it.
//!
//! Bytes cross between the threads in [`Chunk`]s through two bounded channels per
//! connection (lock-free array queues): received bytes from the stack's thread to the
//! application, bytes to send the other way. Nothing is shared by all connections but the
//! chunk pool and each shard's command queue, so application threads never wait for one
//! another, nor for the stack's thread except when a queue is full or empty.

use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Waker;
#[cfg(feature = "tokio")]
use std::task::{Context, Poll};

use bypass_stack::SocketId;
use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender, TryRecvError, TrySendError};

use crate::pool::{CHUNK, Chunk, Pool};
use crate::wait::Wait;
#[cfg(feature = "tokio")]
use crate::wait::park;

/// What the stack's thread hands a connection's reader.
pub(crate) enum RxMsg {
    /// Received bytes, in order.
    Data(Chunk),
    /// The peer closed: nothing more will arrive.
    End,
    /// The connection failed; [`Shared::error`] says how.
    Failed,
}

/// What a connection's writer hands the stack's thread.
pub(crate) enum TxMsg {
    /// Bytes to send, in order.
    Data(Chunk),
    /// Send FIN after the bytes before it (`shutdown(Write)`).
    Shutdown,
}

/// What the application's handle and the stack's thread share about one connection.
pub(crate) struct Shared {
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    /// The stack's thread found the receive queue full and stopped reading the connection:
    /// the reader that makes room asks it to go on.
    pub(crate) rx_stalled: AtomicBool,
    /// The application asked the stack's thread to look at this connection and it has not
    /// yet: one request in its queue at a time.
    pub(crate) kicked: AtomicBool,
    /// The application's handle was dropped.
    pub(crate) dropped: AtomicBool,
    /// The handle was dropped with received bytes unread: reset, as close(2) does.
    pub(crate) unread: AtomicBool,
    /// How the connection failed, once it has.
    pub(crate) error: OnceLock<(ErrorKind, String)>,
    /// Tasks waiting to read or to write (the tokio feature).
    pub(crate) read_waker: Mutex<Option<Waker>>,
    pub(crate) write_waker: Mutex<Option<Waker>>,
}

impl Shared {
    pub(crate) fn new(local: SocketAddr, remote: SocketAddr) -> Shared {
        Shared {
            local,
            remote,
            rx_stalled: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            unread: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            error: OnceLock::new(),
            read_waker: Mutex::new(None),
            write_waker: Mutex::new(None),
        }
    }

    /// Return the connection's error as an `io::Error`, or `otherwise` if it has none.
    pub(crate) fn error_or(&self, otherwise: ErrorKind) -> io::Error {
        match self.error.get() {
            Some((kind, msg)) => io::Error::new(*kind, msg.clone()),
            None => io::Error::from(otherwise),
        }
    }

    /// Wake a task waiting in `poll_read` or `poll_write`.
    pub(crate) fn wake(waker: &Mutex<Option<Waker>>) {
        if let Some(w) = waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            w.wake();
        }
    }
}

/// Bytes the application's threads copied (into and out of chunks), for cost reports.
pub(crate) static APP_BYTES_COPIED: AtomicU64 = AtomicU64::new(0);

/// A connection of a stack that runs on its own thread (a shard): the application's side
/// of its two queues.
///
/// Dropping it closes the connection as close(2) does: FIN after everything written (which
/// the stack's thread still sends), or RST if received data was left unread.
pub(crate) struct ShardStream {
    pub(crate) shared: Arc<Shared>,
    pub(crate) link: Arc<ShardLink>,
    pub(crate) id: SocketId,
    pub(crate) pool: Pool,
    pub(crate) rx: Option<Receiver<RxMsg>>,
    pub(crate) tx: Option<Sender<TxMsg>>,
    /// The chunk being read, and how far.
    cur: Option<(Chunk, usize)>,
    eof: bool,
}

impl ShardStream {
    pub(crate) fn new(
        shared: Arc<Shared>,
        link: Arc<ShardLink>,
        id: SocketId,
        pool: Pool,
        rx: Receiver<RxMsg>,
        tx: Sender<TxMsg>,
    ) -> ShardStream {
        ShardStream { shared, link, id, pool, rx: Some(rx), tx: Some(tx), cur: None, eof: false }
    }

    /// Return the index of the shard (stack thread) the connection lives on.
    pub(crate) fn shard(&self) -> usize {
        self.link.index
    }

    /// Turn Nagle's algorithm off (`true`) or on.
    pub(crate) fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.link.command(Command::SetNodelay(self.id, nodelay));
        Ok(())
    }

    /// Shut down the writing half (`Shutdown::Write`: FIN after what was written), the
    /// reading half (`Shutdown::Read`: reads return end of stream; what arrives is
    /// discarded), or both.
    pub(crate) fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Write | Shutdown::Both)
            && let Some(tx) = &self.tx
        {
            // The stack's thread takes the queue in order, so FIN follows the data.
            if tx.send(TxMsg::Shutdown).is_err() {
                return Err(self.shared.error_or(ErrorKind::NotConnected));
            }
            self.kick();
        }
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.eof = true;
            self.cur = None;
        }
        Ok(())
    }

    #[cfg(feature = "tokio")]
    /// Queue FIN after what was written without waiting: `Ok(false)` when the queue is full.
    pub(crate) fn try_shutdown_write(&mut self) -> io::Result<bool> {
        let Some(tx) = &self.tx else { return Ok(true) };
        match tx.try_send(TxMsg::Shutdown) {
            Ok(()) => {
                self.kick();
                Ok(true)
            }
            Err(TrySendError::Full(_)) => Ok(false),
            Err(TrySendError::Disconnected(_)) => Err(self.shared.error_or(ErrorKind::NotConnected)),
        }
    }

    /// Ask the stack's thread to look at this connection (once until it has).
    pub(crate) fn kick(&self) {
        if !self.shared.kicked.swap(true, Ordering::SeqCst) {
            self.link.command(Command::Kick(self.id));
        }
    }

    /// Take the next message from the receive queue, waiting as `wait` says; `None` when
    /// none came. A stalled stack is told there is room again.
    pub(crate) fn take_rx(&mut self, wait: Wait) -> io::Result<Option<RxMsg>> {
        let Some(rx) = &self.rx else { return Ok(Some(RxMsg::End)) };
        let msg = match wait {
            Wait::No => match rx.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Disconnected) => return Err(self.shared.error_or(ErrorKind::NotConnected)),
            },
            Wait::For(t) => match rx.recv_timeout(t) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(self.shared.error_or(ErrorKind::NotConnected)),
            },
            Wait::Forever => rx.recv().map_err(|_| self.shared.error_or(ErrorKind::NotConnected))?,
        };
        // The stack's thread sets the flag before it tries again, so either its second try
        // finds this room or this swap finds the flag.
        if self.shared.rx_stalled.swap(false, Ordering::SeqCst) {
            self.kick();
        }
        Ok(Some(msg))
    }

    /// Read into `buf` from what has arrived, waiting as `wait` says: `Ok(None)` when
    /// nothing came in time.
    pub(crate) fn read_waiting(&mut self, buf: &mut [u8], wait: Wait) -> io::Result<Option<usize>> {
        self.read_with_waiting(wait, |data| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            APP_BYTES_COPIED.fetch_add(n as u64, Ordering::Relaxed);
            (n, n)
        })
    }

    /// Call `f` with received bytes in place (the front of the current chunk), waiting as
    /// `wait` says; `f` returns how many it consumed. At end of stream `f` sees an empty slice.
    pub(crate) fn read_with_waiting<R>(
        &mut self,
        wait: Wait,
        f: impl FnOnce(&[u8]) -> (usize, R),
    ) -> io::Result<Option<R>> {
        loop {
            if let Some((chunk, pos)) = &mut self.cur {
                let (n, r) = f(&chunk.bytes()[*pos..]);
                *pos += n.min(chunk.len - *pos);
                if *pos == chunk.len {
                    let (chunk, _) = self.cur.take().expect("present");
                    self.pool.give(chunk);
                }
                return Ok(Some(r));
            }
            if self.eof {
                return Ok(Some(f(&[]).1));
            }
            match self.take_rx(wait)? {
                None => return Ok(None),
                Some(RxMsg::Data(chunk)) => self.cur = Some((chunk, 0)),
                Some(RxMsg::End) => self.eof = true,
                Some(RxMsg::Failed) => {
                    self.rx = None;
                    return Err(self.shared.error_or(ErrorKind::ConnectionReset));
                }
            }
        }
    }

    /// Queue a chunk for sending, waiting as `wait` says; give it back with `Ok(Some)` when
    /// there was no room in time.
    pub(crate) fn send_chunk(&mut self, chunk: Chunk, wait: Wait) -> io::Result<Option<Chunk>> {
        if let Some((kind, msg)) = self.shared.error.get() {
            return Err(io::Error::new(*kind, msg.clone()));
        }
        let Some(tx) = &self.tx else { return Err(io::Error::new(ErrorKind::BrokenPipe, "the stream was shut down")) };
        let msg = TxMsg::Data(chunk);
        let back = match wait {
            Wait::No => match tx.try_send(msg) {
                Ok(()) => None,
                Err(TrySendError::Full(m)) => Some(m),
                Err(TrySendError::Disconnected(_)) => return Err(self.shared.error_or(ErrorKind::BrokenPipe)),
            },
            Wait::For(t) => match tx.send_timeout(msg, t) {
                Ok(()) => None,
                Err(SendTimeoutError::Timeout(m)) => Some(m),
                Err(SendTimeoutError::Disconnected(_)) => return Err(self.shared.error_or(ErrorKind::BrokenPipe)),
            },
            Wait::Forever => {
                tx.send(msg).map_err(|_| self.shared.error_or(ErrorKind::BrokenPipe))?;
                None
            }
        };
        match back {
            Some(TxMsg::Data(chunk)) => Ok(Some(chunk)),
            _ => {
                self.kick();
                Ok(None)
            }
        }
    }

    /// Write up to one chunk of `data`, waiting as `wait` says: `Ok(None)` when there was
    /// no room in time.
    pub(crate) fn write_waiting(&mut self, data: &[u8], wait: Wait) -> io::Result<Option<usize>> {
        if data.is_empty() {
            return Ok(Some(0));
        }
        self.write_with_waiting(wait, |buf| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            APP_BYTES_COPIED.fetch_add(n as u64, Ordering::Relaxed);
            (n, n)
        })
    }

    /// Let `f` write up to a chunk's worth of bytes in place and queue what it reports.
    pub(crate) fn write_with_waiting<R>(
        &mut self,
        wait: Wait,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> io::Result<Option<R>> {
        let mut chunk = self.pool.take();
        let (n, r) = f(&mut chunk.data[..CHUNK]);
        chunk.len = n.min(CHUNK);
        if chunk.len == 0 {
            self.pool.give(chunk);
            return Ok(Some(r));
        }
        match self.send_chunk(chunk, wait)? {
            None => Ok(Some(r)),
            Some(chunk) => {
                self.pool.give(chunk);
                Ok(None)
            }
        }
    }

    #[cfg(feature = "tokio")]
    /// Read without waiting; on nothing, park `cx`'s task to be woken when bytes come.
    pub(crate) fn poll_read(&mut self, cx: &Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        for attempt in 0..2 {
            match self.read_waiting(buf, Wait::No) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                // Park, then look again: bytes queued in between are not missed.
                Ok(None) if attempt == 0 => park(&self.shared.read_waker, cx),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }

    #[cfg(feature = "tokio")]
    /// Write without waiting; on a full queue, park `cx`'s task to be woken when it drains.
    pub(crate) fn poll_write(&mut self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        for attempt in 0..2 {
            match self.write_waiting(data, Wait::No) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                Ok(None) if attempt == 0 => park(&self.shared.write_waker, cx),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }

    #[cfg(feature = "tokio")]
    /// Queue FIN after what was written, or park `cx`'s task until the queue has room.
    pub(crate) fn poll_shutdown(&mut self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        for attempt in 0..2 {
            match self.try_shutdown_write() {
                Ok(true) => return Poll::Ready(Ok(())),
                Ok(false) if attempt == 0 => park(&self.shared.write_waker, cx),
                Ok(false) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }
}

impl Drop for ShardStream {
    fn drop(&mut self) {
        let mut unread = self.cur.is_some();
        for msg in self.rx.iter().flat_map(|rx| rx.try_iter()) {
            if let RxMsg::Data(chunk) = msg {
                unread = true;
                self.pool.give(chunk);
            }
        }
        if let Some((chunk, _)) = self.cur.take() {
            self.pool.give(chunk);
        }
        if unread && !self.eof {
            self.shared.unread.store(true, Ordering::SeqCst);
        }
        self.rx = None;
        self.tx = None;
        self.shared.dropped.store(true, Ordering::SeqCst);
        self.link.command(Command::Kick(self.id));
    }
}

/// What an application asks of a shard.
pub(crate) enum Command {
    /// Look at this connection: bytes to send, room to receive, or its handle is gone.
    Kick(SocketId),
    /// Listen on a port, handing accepted connections to `accepted`.
    Listen { port: u16, accepted: Sender<ShardStream>, shared: Arc<ListenerShared>, reply: Sender<io::Result<()>> },
    /// Stop listening on a port.
    Unlisten(u16),
    /// Open a connection; the reply comes once it is established or has failed.
    Connect { remote: SocketAddr, reply: ConnectReply },
    /// Turn Nagle's algorithm off or on.
    SetNodelay(SocketId, bool),
    /// A frame a sibling received for one of this shard's connections.
    Frame(Vec<u8>),
    /// A sibling shard learned where a neighbour is (its answer came to that shard's queue).
    Neighbour(std::net::IpAddr, [u8; 6]),
    /// Reset everything and end the thread.
    Stop,
}

/// Where the result of a connect goes, and who to wake (the tokio feature).
pub(crate) struct ConnectReply {
    pub(crate) tx: Sender<io::Result<ShardStream>>,
    pub(crate) waker: Arc<Mutex<Option<Waker>>>,
}

impl ConnectReply {
    pub(crate) fn send(self, result: io::Result<ShardStream>) {
        // The application may have given up waiting; its stream then drops here, closing.
        let _ = self.tx.send(result);
        if let Some(w) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            w.wake();
        }
    }
}

/// An application's way to a shard: its command queue and the means to wake it.
pub(crate) struct ShardLink {
    pub(crate) index: usize,
    commands: Sender<Command>,
    waker: Option<bypass_device::Waker>,
    sleeping: AtomicBool,
}

impl ShardLink {
    /// Return a shard's link and the receiving end of its command queue.
    pub(crate) fn new(index: usize, waker: Option<bypass_device::Waker>) -> (Arc<ShardLink>, Receiver<Command>) {
        let (commands, rx) = crossbeam_channel::unbounded();
        (Arc::new(ShardLink { index, commands, waker, sleeping: AtomicBool::new(false) }), rx)
    }

    /// Return whether the shard can be woken from its sleep on the device.
    pub(crate) fn wakeable(&self) -> bool {
        self.waker.is_some()
    }

    /// Say whether the shard sleeps (or is about to), so that a command wakes it.
    pub(crate) fn set_sleeping(&self, sleeping: bool) {
        self.sleeping.store(sleeping, Ordering::SeqCst);
    }

    /// Queue `command` and wake the shard if it sleeps.
    pub(crate) fn command(&self, command: Command) {
        if self.commands.send(command).is_err() {
            return; // The shard has stopped; the caller's queues tell it so.
        }
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst)
            && let Some(w) = &self.waker
        {
            w.wake();
        }
    }
}

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
