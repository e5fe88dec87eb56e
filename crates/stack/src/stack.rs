//! A host driving a device: the poll loop and a socket-like API in the shape of `std::net`.
//!
//! ```no_run
//! # use bypass_device::Device;
//! # use bypass_stack::{Stack, StackConfig};
//! # fn serve(device: impl Device) -> std::io::Result<()> {
//! let config = StackConfig::new(std::net::Ipv4Addr::new(10, 77, 0, 2), 24, [7; 16]);
//! let mut stack = Stack::new(device, config);
//! let listener = stack.listen(7).expect("port 7 is free");
//! let mut conns = Vec::new();
//! let mut buf = [0u8; 4096];
//! loop {
//!     stack.poll()?;                              // receive, process, transmit, timers
//!     while let Some(id) = stack.accept(listener) {
//!         conns.push(id);
//!     }
//!     for &id in &conns {
//!         if let Ok(n @ 1..) = stack.read(id, &mut buf) {
//!             stack.write(id, &buf[..n])?;           // echo (a real server keeps what does not fit)
//!         }
//!     }
//! }
//! # }
//! ```

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use bypass_device::Device;
use bypass_device::capture::{Capture, NoteBoard, Recorder};
use bypass_tcp::{Event, Instant, RecvError, SendError, State};

use crate::counters::Counters;
use crate::interface::{ConnectError, ForRead, Interface, ListenError, ListenerId, SocketId, StackConfig};

/// Frames taken from the device per call: as fast as smaller batches for bulk, with less
/// spread, while a larger batch only delays the answers (measured in docs/performance.md,
/// "Receive batch sizes").
const RX_BATCH: usize = 64;
/// Batches taken per poll before the timers run: 4096 frames, the default ring, so that the
/// timers fire after the ACKs waiting in the ring have been seen (rather than sending
/// tail-loss probes for data already acknowledged), and a flood still cannot hold them off
/// for long (see docs/performance.md, "Receive batch sizes").
const RX_DRAIN: usize = 64;

/// Where the stack's time comes from.
#[derive(Clone, Copy, Debug)]
pub enum Time {
    /// The monotonic clock, from when the stack was made.
    Real(std::time::Instant),
    /// Set by the caller with [`Stack::set_time`] (simulations, replays).
    Virtual(Instant),
}

/// What a connection can do now, for an event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// `read` would return data, end of stream, or an error.
    pub readable: bool,
    /// `write` would take some data.
    pub writable: bool,
    /// The connection's state.
    pub state: State,
}

/// A host bound to one device. See the module docs.
pub struct Stack<D: Device> {
    device: D,
    iface: Interface,
    time: Time,
    /// The captures and the board the host leaves its notes on: while there is one, the
    /// device is wrapped in a [`Recorder`] for each turn of the loop.
    capture: Option<(Tee, NoteBoard)>,
}

/// Names a capture added with [`Stack::add_capture`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaptureId(u64);

/// Several captures fed the same frames: a `--pcap` file and live readers at once.
#[derive(Default)]
struct Tee {
    sinks: Vec<(CaptureId, Box<dyn Capture>)>,
    next: u64,
}

impl Capture for Tee {
    fn frame(&mut self, now: Instant, dir: bypass_device::capture::Direction, frame: &[u8], note: &str) {
        for (_, sink) in &mut self.sinks {
            sink.frame(now, dir, frame, note);
        }
    }

    fn flush(&mut self) {
        for (_, sink) in &mut self.sinks {
            sink.flush();
        }
    }

    fn batch(&mut self) {
        for (_, sink) in &mut self.sinks {
            sink.batch();
        }
    }
}

impl<D: Device> Stack<D> {
    /// Return a host on `device` with `config`, on the real clock.
    pub fn new(device: D, config: StackConfig) -> Self {
        let info = device.info().clone();
        let mut iface = Interface::new(config, info.mac, info.mtu);
        iface.set_device_rx_frames(device.rx_frames());
        iface.set_device_checksums(device.checksums());
        Stack { iface, device, time: Time::Real(std::time::Instant::now()), capture: None }
    }

    /// Switch to caller-driven time, starting at `now`.
    pub fn set_time(&mut self, now: Instant) {
        self.time = Time::Virtual(now);
    }

    /// Return the wall-clock time of the stack's `Instant::ZERO` (for capture timestamps):
    /// when the stack started on the real clock, the Unix epoch on virtual time.
    pub fn epoch(&self) -> std::time::SystemTime {
        match self.time {
            Time::Real(origin) => std::time::SystemTime::now() - origin.elapsed(),
            Time::Virtual(_) => std::time::UNIX_EPOCH,
        }
    }

    /// Report every frame received and sent, annotated, to `capture`: the device is recorded
    /// by a [`Recorder`] (a middleware device), and the host leaves its note about each frame
    /// for it. Captures added before go on recording too (see [`add_capture`](Stack::add_capture)).
    pub fn set_capture(&mut self, capture: Box<dyn Capture>) {
        self.add_capture(capture);
    }

    /// Add `capture` beside any others (a `--pcap` file and live readers at once: each gets
    /// every frame); return its name for [`remove_capture`](Stack::remove_capture).
    pub fn add_capture(&mut self, capture: Box<dyn Capture>) -> CaptureId {
        let (tee, _) = self.capture.get_or_insert_with(|| {
            let board = NoteBoard::default();
            self.iface.set_notes(Some(board.clone()));
            (Tee::default(), board)
        });
        let id = CaptureId(tee.next);
        tee.next += 1;
        tee.sinks.push((id, capture));
        id
    }

    /// Stop recording to capture `id` and return it (flushed); when it was the last, the
    /// host stops formatting notes. `None` if `id` is not recording.
    pub fn remove_capture(&mut self, id: CaptureId) -> Option<Box<dyn Capture>> {
        let (tee, _) = self.capture.as_mut()?;
        let at = tee.sinks.iter().position(|(i, _)| *i == id)?;
        let (_, mut capture) = tee.sinks.remove(at);
        capture.flush();
        if tee.sinks.is_empty() {
            self.capture = None;
            self.iface.set_notes(None);
        }
        Some(capture)
    }

    /// Return how many captures are recording.
    pub fn capture_count(&self) -> usize {
        self.capture.as_ref().map_or(0, |(tee, _)| tee.sinks.len())
    }

    /// Push every capture's buffered frames out (a live reader gets them per batch rather
    /// than when the stack next goes idle).
    pub fn flush_captures(&mut self) {
        if let Some((tee, _)) = &mut self.capture {
            tee.flush();
        }
    }

    /// Run `f` with the device, wrapped in its recorder while capturing.
    fn with_device<T>(&mut self, f: impl FnOnce(&mut Interface, &mut dyn Device) -> T) -> T {
        match &mut self.capture {
            Some((tee, board)) => f(&mut self.iface, &mut Recorder::new(&mut self.device, tee, board)),
            None => f(&mut self.iface, &mut self.device),
        }
    }

    /// Count SYN cookie periods on `CLOCK_MONOTONIC`, which `monotonic` reads (as
    /// `bypass_io::xdp::monotonic_now` does), so that the host checks the cookies a device
    /// makes on that clock (`bpf_ktime_get_ns` in the XDP program): the host's own clock
    /// starts at zero when the stack is made. The host's time is read first and rounded up,
    /// so the host runs a microsecond or so ahead of that clock, never behind, and never takes
    /// a cookie made at the end of a period for one from the future. Does nothing on virtual
    /// time.
    pub fn align_syn_cookie_clock(&mut self, monotonic: impl FnOnce() -> std::time::Duration) {
        if let Time::Real(_) = self.time {
            let ours = self.now().as_micros();
            let epoch = (monotonic().as_micros() as u64 + 1).saturating_sub(ours);
            self.iface.set_syn_cookie_epoch(epoch);
        }
    }

    /// Return the current time as the TCP core sees it.
    pub fn now(&self) -> Instant {
        match self.time {
            Time::Real(origin) => Instant::from_micros(origin.elapsed().as_micros() as u64),
            Time::Virtual(now) => now,
        }
    }

    /// Return the device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Return the device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Return the host without its device.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Return the neighbours learned from received frames since the last call, for sibling
    /// stacks on other queues (see [`StackConfig::share_neighbours`]).
    pub fn take_learned_neighbours(&mut self) -> Vec<(std::net::IpAddr, [u8; 6])> {
        self.iface.take_learned_neighbours()
    }

    /// Return frames for sibling stacks' connections ([`Interface::take_foreign_frames`]).
    pub fn take_foreign_frames(&mut self) -> Vec<(u16, Vec<u8>)> {
        self.iface.take_foreign_frames()
    }

    /// Take in a frame a sibling stack received for one of our connections.
    pub fn receive_handed_over(&mut self, frame: &[u8]) {
        let now = self.now();
        self.iface.receive(now, frame);
    }

    /// Learn a neighbour a sibling stack saw ([`Interface::learn_neighbour`]).
    pub fn learn_neighbour(&mut self, ip: std::net::IpAddr, mac: [u8; 6]) {
        let now = self.now();
        self.iface.learn_neighbour(now, ip, mac);
    }

    /// Return the host's counters.
    pub fn counters(&self) -> &Counters {
        self.iface.counters()
    }

    /// One turn of the loop: receive a batch, fire timers, transmit, flush. Return whether
    /// anything was received or sent.
    ///
    /// An application that answers what it receives does better with the two halves:
    /// [`poll_rx`](Stack::poll_rx), then its own work, then [`poll_tx`](Stack::poll_tx), so
    /// its replies carry the ACKs instead of following them.
    pub fn poll(&mut self) -> io::Result<bool> {
        let received = self.receive_and_fire()?;
        // `poll_tx`'s time, read before the events are passed on: a connection the batch
        // touched that has nothing to send is settled with them, as `transmit` would settle
        // it at `now` with nothing between (`Interface::deliver_events_settling`).
        let now = self.now();
        self.iface.deliver_events_settling(now);
        let sent = self.transmit_at(now)?;
        Ok(received > 0 || sent > 0)
    }

    /// Receive what has arrived (in batches, up to `RX_DRAIN` (64) of them) and then fire due
    /// timers; return the frames received.
    ///
    /// Frames first: an ACK waiting in the device must be seen before a timer it would have
    /// stopped (a tail-loss probe of a few round trips is shorter than the time a loaded
    /// host takes to get to the back of its ring).
    pub fn poll_rx(&mut self) -> io::Result<usize> {
        let received = self.receive_and_fire()?;
        self.iface.deliver_events();
        Ok(received)
    }

    /// [`poll_rx`](Stack::poll_rx) but for passing the events on.
    #[inline]
    fn receive_and_fire(&mut self) -> io::Result<usize> {
        let now = self.now();
        let received = self.with_device(|iface, device| -> io::Result<usize> {
            let mut received = 0;
            for _ in 0..RX_DRAIN {
                // By value: the interface's reference and the time, not pointers to them.
                let rx = &mut *iface;
                let n = device.recv(RX_BATCH, &mut move |frame| rx.receive(now, frame))?;
                received += n;
                if n < RX_BATCH {
                    break;
                }
                // More is waiting: answer this batch first, so that a sender hears of every
                // batch's holes and duplicates (its SACK and D-SACK blocks), not only the last's.
                iface.transmit(now, device)?;
            }
            Ok(received)
        })?;
        self.iface.handle_timeouts(now);
        Ok(received)
    }

    /// Transmit everything due and flush the device; return the frames sent.
    ///
    /// The flush runs on every call, not only after new frames: a device may keep frames
    /// from an earlier flush (AF_XDP in copy mode takes a batch per kick and answers
    /// `EAGAIN` while more remain; a full TX ring stops `transmit` early), and without
    /// another kick they would wait for the next new frame, or for a retransmission
    /// timeout when the connection has nothing new to send.
    pub fn poll_tx(&mut self) -> io::Result<usize> {
        let now = self.now();
        self.transmit_at(now)
    }

    /// [`poll_tx`](Stack::poll_tx) at `now`.
    #[inline]
    fn transmit_at(&mut self, now: Instant) -> io::Result<usize> {
        self.with_device(|iface, device| {
            let sent = iface.transmit(now, device)?;
            device.flush()?;
            Ok(sent)
        })
    }

    /// Sleep on the device until a frame may be waiting, the next timer, or `timeout`,
    /// whichever comes first (interrupt-driven mode). Processes nothing.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let now = self.now();
        let until_timer = self.iface.poll_timeout().map(|t| t.saturating_duration_since(now));
        let wait = match (until_timer, timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if wait != Some(Duration::ZERO) {
            // The recorder pushes the capture's buffered frames out before it sleeps.
            self.with_device(|_, device| device.wait(wait))?;
        }
        Ok(())
    }

    /// Interrupt-driven mode in one call: poll, and when idle sleep on the device (see
    /// [`wait`](Stack::wait)), then poll again.
    pub fn poll_wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.poll()? {
            return Ok(true);
        }
        self.wait(timeout)?;
        self.poll()
    }

    /// Return when the host next has timer work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.iface.poll_timeout()
    }

    /// Listen on `port`.
    pub fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError> {
        self.iface.listen(port)
    }

    /// Stop listening on `listener`.
    pub fn unlisten(&mut self, listener: ListenerId) {
        let now = self.now();
        self.iface.unlisten(now, listener);
    }

    /// Return the next established connection on `listener`, if any (non-blocking).
    pub fn accept(&mut self, listener: ListenerId) -> Option<SocketId> {
        self.iface.accept(listener)
    }

    /// Start connecting to `remote` (non-blocking: wait for `Event::Established`).
    pub fn connect(&mut self, remote: impl Into<SocketAddr>) -> Result<SocketId, ConnectError> {
        let now = self.now();
        self.iface.connect(now, remote)
    }

    /// Start connecting to `remote` from `local_port` (a fixed source port).
    pub fn connect_from(&mut self, local_port: u16, remote: impl Into<SocketAddr>) -> Result<SocketId, ConnectError> {
        let now = self.now();
        self.iface.connect_from(now, Some(local_port), remote)
    }

    /// Read received data: `Ok(0)` at end of stream, `WouldBlock` when nothing is there yet.
    pub fn read(&mut self, id: SocketId, buf: &mut [u8]) -> io::Result<usize> {
        // Nothing to read: answer without touching the connection. Taking it mutably marks
        // it for the next transmit (a pass through its output and its settling) and lends
        // it buffer storage; for a read that finds nothing, both are wasted, and an
        // application that polls an idle connection would pay them on every call.
        let conn = match self.iface.connection_for_read(id).ok_or_else(stale)? {
            ForRead::Data(conn) => conn,
            ForRead::Nothing(conn, nothing) => return nothing.map_err(|e| recv_io_error(e, conn.error())),
        };
        let n = conn.recv(buf).map_err(|e| recv_io_error(e, conn.error()))?;
        self.iface.counters_mut().bytes_copied += n as u64;
        Ok(n)
    }

    /// Queue data for sending; `WouldBlock` when the send buffer is full.
    pub fn write(&mut self, id: SocketId, data: &[u8]) -> io::Result<usize> {
        let conn = self.iface.connection_for_send(id).ok_or_else(stale)?;
        let n = conn.send(data).map_err(|e| send_io_error(e, conn.error()))?;
        self.iface.counters_mut().bytes_copied += n as u64;
        Ok(n)
    }

    /// Read received data in place: call `f` with the bytes at the front of the receive
    /// buffer; it returns how many it consumed and a value, which is returned. An empty slice
    /// means the end of the stream. On failure `f` is not called, and the error is
    /// [`read`](Stack::read)'s (`WouldBlock` when nothing is there yet). See
    /// [`Connection::recv_with`](bypass_tcp::Connection::recv_with).
    ///
    /// What is copied: the payload of each frame into the receive buffer, as it arrives
    /// (counted in [`Counters::bytes_copied`]). What is not: the bytes `f` consumes, which it
    /// reads where they are (counted in [`Counters::bytes_in_place`]); `read` copies them
    /// out a second time.
    pub fn recv_with<R>(&mut self, id: SocketId, f: impl FnOnce(&[u8]) -> (usize, R)) -> io::Result<R> {
        // Nothing to read: as in `read`, the connection is left untouched.
        let conn = match self.iface.connection_for_read(id).ok_or_else(stale)? {
            ForRead::Data(conn) => conn,
            ForRead::Nothing(conn, nothing) => {
                return nothing.map(|_| f(&[]).1).map_err(|e| recv_io_error(e, conn.error()));
            }
        };
        let before = conn.recv_available();
        let value = conn.recv_with(f).map_err(|e| recv_io_error(e, conn.error()))?;
        let consumed = before - conn.recv_available();
        self.iface.counters_mut().bytes_in_place += consumed as u64;
        Ok(value)
    }

    /// Queue data written in place: call `f` with free space at the end of the send buffer;
    /// it returns how many bytes it wrote there and a value, which is returned. On failure
    /// `f` is not called, and the error is [`write`](Stack::write)'s (`WouldBlock` when the
    /// send buffer is full). See [`Connection::send_with`](bypass_tcp::Connection::send_with).
    ///
    /// What is copied: the bytes from the send buffer into each frame that carries them
    /// (counted in [`Counters::bytes_copied`]). What is not: the bytes `f` writes, which are
    /// the ones sent (counted in [`Counters::bytes_in_place`]); `write` copies them in first.
    pub fn send_with<R>(&mut self, id: SocketId, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> io::Result<R> {
        let conn = self.iface.connection_for_send(id).ok_or_else(stale)?;
        let before = conn.send_queued();
        let value = conn.send_with(f).map_err(|e| send_io_error(e, conn.error()))?;
        let queued = conn.send_queued() - before;
        self.iface.counters_mut().bytes_in_place += queued as u64;
        Ok(value)
    }

    /// Half-close: send FIN after queued data; reading goes on (`shutdown(Write)`).
    pub fn shutdown(&mut self, id: SocketId) {
        let now = self.now();
        if let Some(conn) = self.iface.connection_mut(id) {
            conn.close(now);
        }
    }

    /// Close and give up the handle, as close(2): FIN after the queued data, and the
    /// connection finishes in the background; reset instead if received data is left unread
    /// or arrives later, or if too many closed connections are still finishing (see
    /// [`Interface::close`]). To stop sending but go on reading, use [`shutdown`](Stack::shutdown).
    pub fn close(&mut self, id: SocketId) {
        let now = self.now();
        self.iface.close(now, id);
    }

    /// Reset the connection (RST) and give up the handle.
    pub fn abort(&mut self, id: SocketId) {
        let now = self.now();
        self.iface.abort(now, id);
    }

    /// Reset every connection and release them (for shutdown); `poll` sends the RSTs.
    pub fn abort_all(&mut self) {
        let now = self.now();
        self.iface.abort_all(now);
    }

    /// Turn Nagle's algorithm off (`true`) or on for `id`.
    pub fn set_nodelay(&mut self, id: SocketId, nodelay: bool) {
        if let Some(conn) = self.iface.connection_mut(id) {
            conn.set_nodelay(nodelay);
        }
    }

    /// Turn keep-alive on (with its settings) or off for `id` (`SO_KEEPALIVE`).
    pub fn set_keepalive(&mut self, id: SocketId, keepalive: Option<bypass_tcp::Keepalive>) {
        let now = self.now();
        if let Some(conn) = self.iface.connection_mut(id) {
            conn.set_keepalive(now, keepalive);
        }
    }

    /// Set the user timeout of `id` (`TCP_USER_TIMEOUT`; `None`: none).
    pub fn set_user_timeout(&mut self, id: SocketId, limit: Option<Duration>) {
        if let Some(conn) = self.iface.connection_mut(id) {
            conn.set_user_timeout(limit);
        }
    }

    /// Return the state of `id` (`Closed` for an unknown or removed id).
    pub fn state(&self, id: SocketId) -> State {
        self.iface.connection(id).map_or(State::Closed, |c| c.state())
    }

    /// Return what `id` can do now.
    pub fn readiness(&self, id: SocketId) -> Readiness {
        match self.iface.connection(id) {
            Some(c) => Readiness {
                readable: c.recv_available() > 0 || c.peer_closed() || c.state() == State::Closed,
                writable: c.send_capacity() > 0,
                state: c.state(),
            },
            None => Readiness { readable: true, writable: false, state: State::Closed },
        }
    }

    /// Return how many received bytes wait to be read on `id` (0 for an unknown id), as
    /// `FIONREAD` tells of a kernel socket.
    pub fn recv_queued(&self, id: SocketId) -> usize {
        self.iface.connection(id).map_or(0, |c| c.recv_available())
    }

    /// Return the statistics of `id`'s connection.
    pub fn tcp_stats(&self, id: SocketId) -> Option<bypass_tcp::Stats> {
        self.iface.connection(id).map(|c| c.stats())
    }

    /// Return the next event for a connection the user holds: a connection's events in
    /// the order they happened, each kind once while it waits (edge-triggered, as epoll's
    /// `EPOLLET`: a second `Readable` before the first was taken adds nothing), so the
    /// queue of an application that never takes its events holds at most one of each kind
    /// per connection it holds.
    pub fn poll_event(&mut self) -> Option<(SocketId, Event)> {
        self.iface.poll_event()
    }

    /// Return the events waiting for [`poll_event`](Stack::poll_event).
    pub fn pending_events(&self) -> usize {
        self.iface.pending_events()
    }

    /// Return a blocking `Read + Write` view of `id` that polls this stack while it waits.
    pub fn stream(&mut self, id: SocketId) -> Stream<'_, D> {
        Stream { stack: self, id, timeout: None }
    }
}

fn stale() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the connection no longer exists (closed or never opened)")
}

/// Return the `io::Error` for a read that failed with `e` on a connection whose ICMP error,
/// if any, is `icmp`.
fn recv_io_error(e: RecvError, icmp: Option<bypass_tcp::IcmpError>) -> io::Error {
    match e {
        RecvError::WouldBlock => io::Error::from(ErrorKind::WouldBlock),
        RecvError::Reset | RecvError::TimedOut if icmp.is_some() => icmp_io_error(e, icmp),
        RecvError::Reset => io::Error::new(ErrorKind::ConnectionReset, e),
        RecvError::TimedOut => io::Error::new(ErrorKind::TimedOut, e),
        RecvError::InvalidState(_) => io::Error::new(ErrorKind::NotConnected, e),
    }
}

/// Return the `io::Error` for a write that failed with `e` on a connection whose ICMP
/// error, if any, is `icmp`.
fn send_io_error(e: SendError, icmp: Option<bypass_tcp::IcmpError>) -> io::Error {
    match e {
        SendError::WouldBlock => io::Error::from(ErrorKind::WouldBlock),
        SendError::Reset | SendError::TimedOut if icmp.is_some() => icmp_io_error(e, icmp),
        SendError::Reset => io::Error::new(ErrorKind::ConnectionReset, e),
        SendError::TimedOut => io::Error::new(ErrorKind::TimedOut, e),
        SendError::InvalidState(_) => io::Error::new(ErrorKind::BrokenPipe, e),
    }
}

/// A blocking `std::io::Read` and `Write` adapter over one connection: it drives the
/// stack's poll loop while it waits, so it suits simple clients and tests.
pub struct Stream<'a, D: Device> {
    stack: &'a mut Stack<D>,
    id: SocketId,
    timeout: Option<Duration>,
}

impl<D: Device> Stream<'_, D> {
    /// Give up a blocked read or write after `timeout` with `ErrorKind::TimedOut`.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Poll until `ready` holds or the timeout passes.
    fn block_until(&mut self, mut ready: impl FnMut(&mut Stack<D>) -> bool) -> io::Result<()> {
        let start = std::time::Instant::now();
        loop {
            if ready(self.stack) {
                return Ok(());
            }
            if self.timeout.is_some_and(|t| start.elapsed() >= t) {
                return Err(io::Error::new(ErrorKind::TimedOut, "timed out waiting for the connection"));
            }
            self.stack.poll_wait(Some(Duration::from_millis(10)))?;
        }
    }

    /// Wait until the connection is established (or fails).
    pub fn wait_established(&mut self) -> io::Result<()> {
        let id = self.id;
        self.block_until(|s| s.state(id) != State::SynSent && s.state(id) != State::SynReceived)?;
        match self.stack.state(id) {
            State::Closed => Err(io::Error::new(ErrorKind::ConnectionRefused, "connection refused or timed out")),
            _ => Ok(()),
        }
    }
}

impl<D: Device> Read for Stream<'_, D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let id = self.id;
        let mut result = None;
        self.block_until(|s| match s.read(id, buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            r => {
                result = Some(r);
                true
            }
        })?;
        result.expect("set when ready")
    }
}

impl<D: Device> Write for Stream<'_, D> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let id = self.id;
        let mut result = None;
        self.block_until(|s| match s.write(id, data) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            r => {
                result = Some(r);
                true
            }
        })?;
        let r = result.expect("set when ready");
        self.stack.poll()?;
        r
    }

    /// Wait until everything written has been acknowledged.
    fn flush(&mut self) -> io::Result<()> {
        let id = self.id;
        self.block_until(|s| s.iface.connection(id).is_none_or(|c| c.send_queued() == 0))
    }
}

/// Return the error a connection that ended after an ICMP error reports, as Linux reports
/// `sk_err` or `sk_err_soft` (EHOSTUNREACH, ENETUNREACH, ECONNREFUSED) in place of
/// ECONNRESET or ETIMEDOUT (RFC 1122 4.2.3.9: make the information available).
fn icmp_io_error(e: impl std::fmt::Display, icmp: Option<bypass_tcp::IcmpError>) -> io::Error {
    use bypass_tcp::IcmpError as I;
    let Some(icmp) = icmp else { return io::Error::other(e.to_string()) };
    let kind = match icmp {
        I::NetUnreachable => ErrorKind::NetworkUnreachable,
        I::PortUnreachable | I::ProtocolUnreachable => ErrorKind::ConnectionRefused,
        I::AdminProhibited => ErrorKind::PermissionDenied,
        _ => ErrorKind::HostUnreachable,
    };
    io::Error::new(kind, format!("{e}: {icmp}"))
}
