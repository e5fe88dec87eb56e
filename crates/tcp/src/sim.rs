//! A simulated network on virtual time, for testing connections end to end (feature `sim`;
//! test support, not part of a production build).
//!
//! A [`Link`] is one direction of a path: propagation delay, an optional bandwidth cap with a
//! bounded queue, and loss, reordering, duplication and bit corruption drawn from a seeded RNG
//! (the model lives in `bypass-device`, re-exported here). A [`Pair`] joins two
//! [`Connection`]s with a link each way and plays both applications (the harness of quinn's
//! `tests/util.rs` and smoltcp's `tests/netsim.rs`).
//!
//! Nothing here sleeps or touches a socket. Time is virtual and jumps straight to the next
//! packet delivery, timer or application wake-up, so a run is a pure function of the configs
//! and the seed, and a minute of TIME-WAIT costs nothing.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use bypass_tcp::sim::{LinkConfig, Pair, Side};
//! use bypass_tcp::{Config, State};
//!
//! let config = Config { min_rto: Duration::from_millis(200), ..Config::default() };
//! let link = LinkConfig::default().with_delay(Duration::from_millis(5)).with_loss(0.01);
//! let mut pair = Pair::new(&config, &config, link, link, 7);
//! let deadline = pair.now() + Duration::from_secs(600);
//! let report = pair.transfer(1 << 20, 1 << 20, deadline).expect("transfer");
//! assert_eq!(pair.conn(Side::Client).state(), State::Closed);
//! println!("done in {:?} of virtual time", report.elapsed());
//! ```

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use bypass_device::seed::splitmix64;

use crate::config::Config;
use crate::connection::{Connection, RecvError, SendError};
use crate::ecn::IpEcn;
use crate::event::Event;
use crate::state::State;
use crate::time::Instant;
use crate::tuple::FourTuple;
use crate::wire::ParseError;
use crate::wire::Segment;

// ---------------------------------------------------------------------------------------------
// Link (re-exported from bypass-device)
// ---------------------------------------------------------------------------------------------

/// The simulated link, re-exported from bypass-device (whose `MemoryLink` runs on it too), so
/// that `bypass_tcp::sim::{Link, LinkConfig, ...}` keep working.
pub use bypass_device::link::{AckCoalescing, Framing, Link, LinkConfig, LinkStats, Packet};
/// Seed mixing, re-exported from bypass-device.
pub use bypass_device::mix;

// ---------------------------------------------------------------------------------------------
// Pair
// ---------------------------------------------------------------------------------------------

/// One end of a [`Pair`]. As a direction, the side that sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The active opener (10.0.0.1:40000).
    Client,
    /// The passive opener (10.0.0.2:80).
    Server,
}

impl Side {
    /// Both sides, client first.
    pub const BOTH: [Side; 2] = [Side::Client, Side::Server];

    /// Return the other side.
    pub const fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Client => "client",
            Side::Server => "server",
        })
    }
}

/// The client's address in a [`Pair`].
pub const CLIENT_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000));
/// The server's address in a [`Pair`].
pub const SERVER_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80));

/// A slow application: it reads at most `bytes` per `every` of virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimit {
    /// Bytes read per interval.
    pub bytes: usize,
    /// The interval.
    pub every: Duration,
}

/// Counters for the segments one side sent, as the [`Pair`] moved them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Segments taken from `poll_transmit`.
    pub transmitted: u64,
    /// Segments dropped by a filter or `drop_next` before reaching the link.
    pub filtered: u64,
    /// Segments that came out of the link, parsed, and went to the peer's `handle_segment`.
    pub delivered: u64,
    /// Segments that came out of the link and failed to parse (checksum): dropped.
    pub rejected: u64,
}

/// Where one side's application stands in a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The connection's state.
    pub state: State,
    /// Bytes the application handed to `send`.
    pub sent: u64,
    /// Bytes it will send in all.
    pub to_send: u64,
    /// Bytes it read (and checked).
    pub received: u64,
    /// Bytes it expects from the peer.
    pub expected: u64,
    /// Whether `recv` reported the end of the stream.
    pub eof: bool,
    /// Whether the application called `close`.
    pub closed: bool,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} sent {}/{} received {}/{}{}{}",
            self.state,
            self.sent,
            self.to_send,
            self.received,
            self.expected,
            if self.eof { " eof" } else { "" },
            if self.closed { " closed" } else { "" }
        )
    }
}

/// Why a [`Pair`] run failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SimError {
    /// A byte read differs from the byte the peer sent.
    #[error("{side} read {got:#04x} at stream offset {offset}, but the peer sent {expected:#04x}")]
    Mismatch {
        /// The reader.
        side: Side,
        /// Offset of the byte in the stream.
        offset: u64,
        /// The byte sent.
        expected: u8,
        /// The byte read.
        got: u8,
    },
    /// More bytes arrived than the peer sent.
    #[error("{side} read {received} bytes, but the peer sent only {expected}")]
    ExtraData {
        /// The reader.
        side: Side,
        /// Bytes read.
        received: u64,
        /// Bytes sent.
        expected: u64,
    },
    /// The stream ended early.
    #[error("{side} saw the end of the stream after {received} of {expected} bytes")]
    PrematureEof {
        /// The reader.
        side: Side,
        /// Bytes read.
        received: u64,
        /// Bytes sent.
        expected: u64,
    },
    /// `send` failed in a synchronized state.
    #[error("{side}: send failed: {error}")]
    Send {
        /// The sender.
        side: Side,
        /// The error.
        error: SendError,
    },
    /// `recv` failed in a synchronized state.
    #[error("{side}: recv failed: {error}")]
    Recv {
        /// The reader.
        side: Side,
        /// The error.
        error: RecvError,
    },
    /// The connection reported `Event::Reset` or `Event::TimedOut` during a stream.
    #[error("{side}: connection failed with {event:?} at {at}")]
    Failed {
        /// The side that reported it.
        side: Side,
        /// When.
        at: Instant,
        /// The event.
        event: Event,
    },
    /// `poll_transmit` produced bytes that do not parse (bad checksum or header).
    #[error("{side} emitted a {len}-byte segment that does not parse: {error}")]
    BadSegment {
        /// The sender.
        side: Side,
        /// Bytes written.
        len: usize,
        /// The parse error.
        error: ParseError,
    },
    /// `poll_transmit` claimed to write more bytes than the buffer holds.
    #[error("{side} claims a {len}-byte segment in a {capacity}-byte buffer")]
    Oversized {
        /// The sender.
        side: Side,
        /// `Transmit::len`.
        len: usize,
        /// The buffer's size.
        capacity: usize,
    },
    /// `poll_transmit` wrote a segment whose ports are not the sender's and its peer's.
    #[error("{side} sent {src} -> {dst} (ports in header {src_port} -> {dst_port})")]
    Misrouted {
        /// The sender.
        side: Side,
        /// The sender's address.
        src: SocketAddr,
        /// Its peer's address.
        dst: SocketAddr,
        /// Source port in the segment.
        src_port: u16,
        /// Destination port in the segment.
        dst_port: u16,
    },
    /// `poll_transmit` wrote a segment right after `nothing_to_transmit` said it would
    /// write nothing (a host that skips the call would not have sent it).
    #[error("{side} at {at}: nothing_to_transmit said nothing, then poll_transmit sent a {kind:?} segment")]
    NotNothing {
        /// The sender.
        side: Side,
        /// When.
        at: Instant,
        /// What it sent.
        kind: crate::TransmitKind,
    },
    /// Work at one instant did not settle: a timer that stays due or a transmit loop.
    #[error("livelock at {at}: {what}")]
    Livelock {
        /// The instant.
        at: Instant,
        /// What kept going.
        what: &'static str,
    },
    /// Nothing is scheduled, yet the run is not done.
    #[error("stalled at {at} with nothing scheduled; client {client}; server {server}")]
    Stalled {
        /// The instant.
        at: Instant,
        /// The client's progress.
        client: Progress,
        /// The server's progress.
        server: Progress,
    },
    /// The deadline passed before the run was done.
    #[error("deadline {at} passed; client {client}; server {server}")]
    Deadline {
        /// The deadline.
        at: Instant,
        /// The client's progress.
        client: Progress,
        /// The server's progress.
        server: Progress,
    },
}

/// The outcome of [`Pair::transfer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferReport {
    /// When the transfer started.
    pub started: Instant,
    /// When both connections were done (CLOSED).
    pub finished: Instant,
    /// Bytes the client sent (and the server read).
    pub client_bytes: u64,
    /// Bytes the server sent (and the client read).
    pub server_bytes: u64,
}

impl TransferReport {
    /// Return the virtual time the transfer took.
    pub fn elapsed(&self) -> Duration {
        self.finished - self.started
    }
}

/// The application at one end: streams a deterministic byte pattern and checks the peer's.
#[derive(Debug, Default)]
struct App {
    active: bool,
    to_send: u64,
    sent: u64,
    close_when_done: bool,
    closed: bool,
    expected: u64,
    expect_eof: bool,
    received: u64,
    eof: bool,
    read_limit: Option<ReadLimit>,
    budget: usize,
    next_refill: Instant,
}

struct End {
    conn: Connection,
    /// The config, for [`Connection::accept`] while the connection is listening.
    config: Config,
    addr: SocketAddr,
    /// Key of the byte pattern this side sends.
    key: u64,
    app: App,
    events: Vec<Event>,
    dir: DirectionStats,
    /// Most window bytes this side advertises after its SYN ([`Pair::set_window_clamp`]).
    window_clamp: Option<u32>,
}

type Filter = Box<dyn FnMut(Side, &Segment<'_>) -> bool>;
type DropOnce = (Side, Box<dyn FnMut(&Segment<'_>) -> bool>);

/// Rounds of work at one instant before the pair declares a livelock.
const MAX_ROUNDS: usize = 100_000;
/// Segments from one `poll_transmit` burst before the pair declares a livelock.
const MAX_BURST: usize = 1_000_000;
/// Room for any segment a connection writes (64 KiB payload and a full header, with margin).
const TX_BUFFER: usize = 1 << 17;
/// Bytes an application moves per `send`/`recv` call.
const APP_CHUNK: usize = 64 * 1024;

/// Two connections, a link each way, both applications and a virtual clock.
///
/// The client is created with [`Connection::connect`], the server with [`Connection::listen`],
/// both at [`Instant::ZERO`]. While the server listens, an acceptable SYN goes to
/// [`Connection::accept`], whose SYN-RECEIVED connection replaces the listener; anything else
/// goes to the listener's `handle_segment`. [`step`](Pair::step) does everything due at [`now`](Pair::now) until
/// nothing more is, then moves the clock to the next delivery, timer or application wake-up:
///
/// 1. each application sends and reads what it can (when a stream is set up);
/// 2. each connection's `poll_transmit` is drained into its link; every segment is parsed
///    back with its checksum (a connection that emits a bad one fails the run), can have its
///    window clamped ([`set_window_clamp`](Pair::set_window_clamp)) and can be dropped by a
///    filter;
/// 3. due packets are delivered: parsed with checksum validation (corrupt ones are counted in
///    [`DirectionStats::rejected`] and skipped) and passed to the peer's `handle_segment`;
/// 4. due timers fire (`handle_timeout`); events are collected.
///
/// Failures of the connections under test (bad bytes, misrouted segments, a stream that
/// reads wrong data, a livelock) stop the run with a [`SimError`] instead of panicking.
pub struct Pair {
    ends: [End; 2],
    links: [Link; 2],
    now: Instant,
    seed: u64,
    filter: Option<Filter>,
    drops: Vec<DropOnce>,
    tx_buf: Vec<u8>,
    scratch: Vec<u8>,
    error: Option<SimError>,
}

impl Pair {
    /// Return a pair whose client (`client` config) is connecting to its listening server.
    ///
    /// `client_to_server` carries the client's segments, `server_to_client` the server's; each
    /// link and each byte pattern gets its own RNG stream derived from `seed`.
    pub fn new(
        client: &Config,
        server: &Config,
        client_to_server: LinkConfig,
        server_to_client: LinkConfig,
        seed: u64,
    ) -> Pair {
        let server_conn = Connection::listen(server, SERVER_ADDR);
        let tuple = FourTuple { local: CLIENT_ADDR, remote: SERVER_ADDR };
        let client_conn = Connection::connect(client, tuple, Instant::ZERO);
        let ends = [(client_conn, client), (server_conn, server)];
        Pair::assemble(ends, client_to_server, server_to_client, seed)
    }

    /// Return a pair in which both sides connect to each other at once, so the SYNs cross:
    /// a simultaneous open (RFC 9293 3.5, Figure 8).
    pub fn new_simultaneous(
        client: &Config,
        server: &Config,
        client_to_server: LinkConfig,
        server_to_client: LinkConfig,
        seed: u64,
    ) -> Pair {
        let tuple = FourTuple { local: CLIENT_ADDR, remote: SERVER_ADDR };
        let client_conn = Connection::connect(client, tuple, Instant::ZERO);
        let server_conn = Connection::connect(server, tuple.reversed(), Instant::ZERO);
        let ends = [(client_conn, client), (server_conn, server)];
        Pair::assemble(ends, client_to_server, server_to_client, seed)
    }

    fn assemble(
        [client, server]: [(Connection, &Config); 2],
        client_to_server: LinkConfig,
        server_to_client: LinkConfig,
        seed: u64,
    ) -> Pair {
        let end = |(conn, config): (Connection, &Config), addr, key| End {
            conn,
            config: config.clone(),
            addr,
            key,
            app: App::default(),
            events: Vec::new(),
            dir: DirectionStats::default(),
            window_clamp: None,
        };
        Pair {
            ends: [end(client, CLIENT_ADDR, mix(seed, 3)), end(server, SERVER_ADDR, mix(seed, 4))],
            links: [Link::new(client_to_server, mix(seed, 1)), Link::new(server_to_client, mix(seed, 2))],
            now: Instant::ZERO,
            seed,
            filter: None,
            drops: Vec::new(),
            tx_buf: vec![0; TX_BUFFER],
            scratch: vec![0; APP_CHUNK],
            error: None,
        }
    }

    // --- access -------------------------------------------------------------------------------

    /// Return the virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Return the seed the pair was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Return one side's connection.
    pub fn conn(&self, side: Side) -> &Connection {
        &self.ends[side.index()].conn
    }

    /// Return one side's connection, to call it directly (pass [`now`](Pair::now) as the time).
    pub fn conn_mut(&mut self, side: Side) -> &mut Connection {
        &mut self.ends[side.index()].conn
    }

    /// Return the client's connection.
    pub fn client(&self) -> &Connection {
        self.conn(Side::Client)
    }

    /// Return the server's connection.
    pub fn server(&self) -> &Connection {
        self.conn(Side::Server)
    }

    /// Return one side's address.
    pub fn addr(&self, side: Side) -> SocketAddr {
        self.ends[side.index()].addr
    }

    /// Return the link that carries `from`'s segments.
    pub fn link(&self, from: Side) -> &Link {
        &self.links[from.index()]
    }

    /// Return the link that carries `from`'s segments, to change its config mid-run.
    pub fn link_mut(&mut self, from: Side) -> &mut Link {
        &mut self.links[from.index()]
    }

    /// Return the counters for the segments `from` sent.
    pub fn direction_stats(&self, from: Side) -> DirectionStats {
        self.ends[from.index()].dir
    }

    /// Return the events one side's connection reported so far, oldest first.
    pub fn events(&self, side: Side) -> &[Event] {
        &self.ends[side.index()].events
    }

    /// Return where one side's application stands.
    pub fn progress(&self, side: Side) -> Progress {
        let end = &self.ends[side.index()];
        let app = &end.app;
        Progress {
            state: end.conn.state(),
            sent: app.sent,
            to_send: app.to_send,
            received: app.received,
            expected: app.expected,
            eof: app.eof,
            closed: app.closed,
        }
    }

    /// Return the error that stopped the run, if any.
    pub fn error(&self) -> Option<&SimError> {
        self.error.as_ref()
    }

    /// Return whether both connections are ESTABLISHED.
    pub fn both_established(&self) -> bool {
        Side::BOTH.iter().all(|&s| self.conn(s).state() == State::Established)
    }

    /// Return whether both connections are CLOSED.
    pub fn both_closed(&self) -> bool {
        Side::BOTH.iter().all(|&s| self.conn(s).state() == State::Closed)
    }

    // --- control ------------------------------------------------------------------------------

    /// Call `close` on one side's connection now.
    pub fn close(&mut self, side: Side) {
        let now = self.now;
        self.conn_mut(side).close(now);
    }

    /// Call `abort` on one side's connection now.
    pub fn abort(&mut self, side: Side) {
        let now = self.now;
        self.conn_mut(side).abort(now);
    }

    /// Drop the next segment sent by `from` for which `matches` holds (once).
    ///
    /// Several pending drops for the same side are tried in the order they were added.
    pub fn drop_next(&mut self, from: Side, matches: impl FnMut(&Segment<'_>) -> bool + 'static) {
        self.drops.push((from, Box::new(matches)));
    }

    /// Drop every segment for which `drop` returns `true`, called with the sending side; it sees
    /// both directions in the order they are sent, so it may keep state across them.
    pub fn set_filter(&mut self, drop: impl FnMut(Side, &Segment<'_>) -> bool + 'static) {
        self.filter = Some(Box::new(drop));
    }

    /// Remove the filter.
    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    /// Make `side` advertise at most `bytes` of window (`None`: what its connection offers) in
    /// every segment but its SYN, as a receiver does that shrinks its buffer before the
    /// handshake completes (Linux with a smaller SO_RCVBUF and `net.ipv4.tcp_shrink_window`,
    /// or TCP_WINDOW_CLAMP): its SYN still offers the unscaled window of the buffer it started
    /// with (RFC 7323 2.2), and every later window is the small one.
    ///
    /// The window field is rewritten on the way to the link, rounded down to the side's window
    /// scale (at least one unit), and the checksum redone; the connection itself does not
    /// know, and takes whatever arrives within the window it believes it offered.
    pub fn set_window_clamp(&mut self, side: Side, bytes: Option<u32>) {
        self.ends[side.index()].window_clamp = bytes;
    }

    /// Make one side's application read at most `limit.bytes` per `limit.every` (`None`: as fast
    /// as data arrives).
    pub fn set_read_limit(&mut self, side: Side, limit: Option<ReadLimit>) {
        let app = &mut self.ends[side.index()].app;
        app.read_limit = limit;
        app.budget = 0;
        app.next_refill = self.now;
    }

    /// Make `from`'s application send `bytes` more bytes of its pattern, and the peer's read and
    /// check them; with `close`, `from` closes once everything is queued and the peer expects
    /// the end of the stream after it.
    ///
    /// Applications start once their connection is ESTABLISHED (or CLOSE-WAIT).
    pub fn stream(&mut self, from: Side, bytes: u64, close: bool) {
        let app = &mut self.ends[from.index()].app;
        app.active = true;
        app.to_send += bytes;
        app.close_when_done |= close;
        let peer = &mut self.ends[from.peer().index()].app;
        peer.active = true;
        peer.expected += bytes;
        peer.expect_eof |= close;
    }

    /// Return whether every stream set up with [`stream`](Pair::stream) is complete: all bytes
    /// sent and read, every expected end of stream seen, and, where both sides close, both
    /// connections CLOSED.
    pub fn streams_done(&self) -> bool {
        let both_close = self.ends.iter().all(|e| e.app.close_when_done);
        self.ends.iter().all(|e| {
            let a = &e.app;
            a.sent == a.to_send
                && a.received == a.expected
                && (a.eof || !a.expect_eof)
                && (a.closed || !a.close_when_done)
                && (!both_close || e.conn.state() == State::Closed)
        })
    }

    /// Stream `client_bytes` from the client and `server_bytes` from the server at once, each
    /// checked byte for byte, close both sides when their data is queued, and run until both
    /// connections are CLOSED (TIME-WAIT included) or `deadline`.
    pub fn transfer(
        &mut self,
        client_bytes: u64,
        server_bytes: u64,
        deadline: Instant,
    ) -> Result<TransferReport, SimError> {
        let started = self.now;
        self.stream(Side::Client, client_bytes, true);
        self.stream(Side::Server, server_bytes, true);
        self.run_until(Pair::streams_done, deadline);
        self.check(deadline)?;
        Ok(TransferReport { started, finished: self.now, client_bytes, server_bytes })
    }

    /// Return `Ok` when the streams are done, else why not: the run's error, a stall (nothing
    /// scheduled) or the deadline.
    pub fn check(&self, deadline: Instant) -> Result<(), SimError> {
        if let Some(e) = self.error.clone() {
            return Err(e);
        }
        if self.streams_done() {
            return Ok(());
        }
        let (client, server) = (self.progress(Side::Client), self.progress(Side::Server));
        if self.next_event().is_none() {
            Err(SimError::Stalled { at: self.now, client, server })
        } else {
            Err(SimError::Deadline { at: deadline, client, server })
        }
    }

    // --- running ------------------------------------------------------------------------------

    /// Do everything due now, then advance the clock to the next scheduled thing.
    ///
    /// Return `false` (and leave the clock) when nothing is scheduled or the run failed.
    pub fn step(&mut self) -> bool {
        self.settle();
        if self.error.is_some() {
            return false;
        }
        match self.next_event() {
            Some(t) => self.advance(t),
            None => false,
        }
    }

    /// Run until `done` holds (checked whenever the clock is about to move), the run fails, or
    /// the clock reaches `deadline`. Return whether `done` held.
    ///
    /// With nothing scheduled the clock jumps to `deadline`: nothing can happen before it.
    pub fn run_until(&mut self, mut done: impl FnMut(&Pair) -> bool, deadline: Instant) -> bool {
        loop {
            self.settle();
            if self.error.is_some() {
                return false;
            }
            if done(self) {
                return true;
            }
            if self.now >= deadline {
                return false;
            }
            let next = match self.next_event() {
                Some(t) if t <= deadline => t,
                _ => deadline,
            };
            if !self.advance(next) {
                return false;
            }
        }
    }

    /// Move the clock to `t`, which must be later than now: everything due now was done, so
    /// something still due means a timer or application that does not move on.
    fn advance(&mut self, t: Instant) -> bool {
        if t <= self.now {
            self.fail(SimError::Livelock { at: self.now, what: "something stays due after running" });
            return false;
        }
        self.now = t;
        true
    }

    /// Run for `duration` of virtual time; return `false` if the run failed.
    pub fn run_for(&mut self, duration: Duration) -> bool {
        let deadline = self.now + duration;
        self.run_until(|_| false, deadline);
        self.error.is_none()
    }

    /// Return the next instant at which something is scheduled.
    pub fn next_event(&self) -> Option<Instant> {
        let links = self.links.iter().filter_map(Link::next_delivery);
        let timers = self.ends.iter().filter_map(|e| e.conn.poll_timeout());
        let apps = self.ends.iter().filter_map(|e| e.app.wakeup());
        links.chain(timers).chain(apps).min()
    }

    /// Do everything due at `now` until nothing more is.
    fn settle(&mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.error.is_some() {
                return;
            }
            let mut progress = false;
            for side in Side::BOTH {
                progress |= self.drive_app(side);
                self.collect_events(side);
            }
            for side in Side::BOTH {
                progress |= self.flush(side);
            }
            for side in Side::BOTH {
                progress |= self.deliver(side);
            }
            for side in Side::BOTH {
                progress |= self.fire_timers(side);
                self.collect_events(side);
            }
            if !progress {
                return;
            }
        }
        self.fail(SimError::Livelock { at: self.now, what: "work at one instant kept producing more work" });
    }

    fn fail(&mut self, error: SimError) {
        log::debug!("{} seed {}: {error}", self.now, self.seed);
        self.error.get_or_insert(error);
    }

    /// Move `from`'s segments from `poll_transmit` to its link. Return whether there were any.
    fn flush(&mut self, from: Side) -> bool {
        let now = self.now;
        let peer_addr = self.ends[from.peer().index()].addr;
        let Pair { ends, links, filter, drops, tx_buf, .. } = self;
        let end = &mut ends[from.index()];
        let link = &mut links[from.index()];
        let mut count = 0;
        loop {
            // Hosts skip `poll_transmit` when the connection says it has nothing to send;
            // every call here checks that it then has nothing indeed (and asking changes
            // nothing `poll_transmit` would not have changed).
            let nothing = end.conn.nothing_to_transmit(now);
            let Some(t) = end.conn.poll_transmit(now, tx_buf) else { break };
            if nothing {
                self.fail(SimError::NotNothing { side: from, at: now, kind: t.kind });
                return true;
            }
            count += 1;
            if count > MAX_BURST {
                self.fail(SimError::Livelock { at: now, what: "poll_transmit never returned None" });
                return true;
            }
            // Every segment goes from the sender's address to its peer's (`Transmit` names
            // neither): the checksum, checked below, covers both addresses, the header both
            // ports.
            let (src, dst) = (end.addr, peer_addr);
            let Some(bytes) = tx_buf.get_mut(..t.len) else {
                self.fail(SimError::Oversized { side: from, len: t.len, capacity: TX_BUFFER });
                return true;
            };
            if let Some(limit) = end.window_clamp
                && !t.flags.syn()
            {
                clamp_window(bytes, limit, end.conn.sequence_space().rcv_wscale, src.ip(), dst.ip());
            }
            let bytes = &*bytes;
            let seg = match Segment::parse(bytes, src.ip(), dst.ip()) {
                Ok(seg) => seg,
                Err(error) => {
                    self.fail(SimError::BadSegment { side: from, len: t.len, error });
                    return true;
                }
            };
            if seg.src_port != src.port() || seg.dst_port != dst.port() {
                let (src_port, dst_port) = (seg.src_port, seg.dst_port);
                self.fail(SimError::Misrouted { side: from, src, dst, src_port, dst_port });
                return true;
            }
            end.dir.transmitted += 1;
            let filtered = filter.as_mut().is_some_and(|f| f(from, &seg)) || {
                let hit = drops.iter_mut().position(|(side, matches)| *side == from && matches(&seg));
                hit.map(|i| drops.remove(i)).is_some()
            };
            if filtered {
                end.dir.filtered += 1;
                log::debug!("{now} {from} {} -> {peer_addr}: filter dropped {seg:?}", end.addr);
                continue;
            }
            log::trace!("{now} {from} sends {seg:?} ({:?})", t.kind);
            // ECT(0) in the IP header of an ECN-capable segment (RFC 3168 5), as the host writes.
            link.send_ecn(now, bytes, if t.ect { IpEcn::Ect0.bits() } else { IpEcn::NotEct.bits() });
        }
        count > 0
    }

    /// Hand the packets due on `from`'s link to the peer. Return whether there were any.
    fn deliver(&mut self, from: Side) -> bool {
        let now = self.now;
        let to = from.peer();
        let (src, dst) = (self.ends[from.index()].addr, self.ends[to.index()].addr);
        let link = &mut self.links[from.index()];
        let mut any = false;
        while let Some(packet) = link.recv(now) {
            any = true;
            match Segment::parse(&packet, src.ip(), dst.ip()) {
                Ok(seg) => {
                    log::trace!("{now} {to} receives {seg:?}");
                    self.ends[from.index()].dir.delivered += 1;
                    let end = &mut self.ends[to.index()];
                    // A listener learns nothing of the source address from a `Segment`: an
                    // acceptable SYN makes the connection that replaces it (RFC 9293 3.10.7.2).
                    let child = if end.conn.state() == State::Listen {
                        let tuple = FourTuple { local: dst, remote: src };
                        Connection::accept(&end.config, tuple, &seg, now)
                    } else {
                        None
                    };
                    match child {
                        Some(child) => {
                            log::trace!("{now} {to} accepted {tuple}", tuple = FourTuple { local: dst, remote: src });
                            end.conn = child;
                        }
                        // The IP header's ECN field goes up with the segment (RFC 3168 5).
                        None => match end.conn.tuple() {
                            Some(t) => {
                                let ecn = IpEcn::from_tos(packet.ecn());
                                end.conn.handle_segment_ecn(now, t.remote.ip(), &seg, ecn);
                            }
                            None => {
                                end.conn.handle_segment(now, &seg);
                            }
                        },
                    }
                }
                Err(error) => {
                    self.ends[from.index()].dir.rejected += 1;
                    log::debug!("{now} {src} -> {dst}: dropped {}-byte segment: {error}", packet.len());
                }
            }
            link.recycle(packet);
        }
        any
    }

    /// Fire `side`'s timers if due. Return whether they were.
    fn fire_timers(&mut self, side: Side) -> bool {
        let conn = &mut self.ends[side.index()].conn;
        match conn.poll_timeout() {
            Some(t) if t <= self.now => {
                conn.handle_timeout(self.now);
                true
            }
            _ => false,
        }
    }

    fn collect_events(&mut self, side: Side) {
        let end = &mut self.ends[side.index()];
        let mut failed = None;
        while let Some(event) = end.conn.poll_event() {
            log::trace!("{} {side} event {event:?}", self.now);
            if end.app.active && matches!(event, Event::Reset | Event::TimedOut) {
                failed.get_or_insert(event);
            }
            end.events.push(event);
        }
        if let Some(event) = failed {
            self.fail(SimError::Failed { side, at: self.now, event });
        }
    }

    /// Let `side`'s application send, read and close. Return whether it did anything.
    fn drive_app(&mut self, side: Side) -> bool {
        let now = self.now;
        let peer_key = self.ends[side.peer().index()].key;
        let Pair { ends, scratch, .. } = self;
        let End { conn, app, key, .. } = &mut ends[side.index()];
        if !app.active {
            return false;
        }
        if let Some(limit) = app.read_limit
            && now >= app.next_refill
        {
            app.budget = limit.bytes;
            app.next_refill = now + limit.every.max(Duration::from_micros(1));
        }
        let state = conn.state();
        if !state.is_synchronized() {
            return false;
        }
        let mut progress = false;

        // Read and check.
        while !app.eof {
            let want = match app.read_limit {
                Some(_) => app.budget.min(scratch.len()),
                None => scratch.len(),
            };
            if want == 0 {
                break;
            }
            match conn.recv(&mut scratch[..want]) {
                Ok(0) => {
                    app.eof = true;
                    progress = true;
                    if app.received != app.expected || !app.expect_eof {
                        let (received, expected) = (app.received, app.expected);
                        self.error.get_or_insert(SimError::PrematureEof { side, received, expected });
                        return true;
                    }
                }
                Ok(n) => {
                    progress = true;
                    if app.read_limit.is_some() {
                        app.budget -= n;
                    }
                    let offset = app.received;
                    app.received += n as u64;
                    if app.received > app.expected {
                        let (received, expected) = (app.received, app.expected);
                        self.error.get_or_insert(SimError::ExtraData { side, received, expected });
                        return true;
                    }
                    if let Some((i, expected)) = check_pattern(peer_key, offset, &scratch[..n]) {
                        let (offset, got) = (offset + i as u64, scratch[i]);
                        self.error.get_or_insert(SimError::Mismatch { side, offset, expected, got });
                        return true;
                    }
                }
                Err(RecvError::WouldBlock) => break,
                Err(error) => {
                    self.error.get_or_insert(SimError::Recv { side, error });
                    return true;
                }
            }
        }

        // Send, as much as the buffer takes.
        if matches!(state, State::Established | State::CloseWait) {
            while app.sent < app.to_send {
                let room = conn.send_capacity().min(scratch.len());
                let n = room.min(usize::try_from(app.to_send - app.sent).unwrap_or(usize::MAX));
                if n == 0 {
                    break;
                }
                fill_pattern(*key, app.sent, &mut scratch[..n]);
                match conn.send(&scratch[..n]) {
                    Ok(0) | Err(SendError::WouldBlock) => break,
                    Ok(taken) => {
                        app.sent += taken as u64;
                        progress = true;
                    }
                    Err(error) => {
                        self.error.get_or_insert(SimError::Send { side, error });
                        return true;
                    }
                }
            }
            if app.close_when_done && !app.closed && app.sent == app.to_send {
                log::trace!("{now} {side} closes");
                conn.close(now);
                app.closed = true;
                progress = true;
            }
        }
        progress
    }
}

/// Lower the window field of the TCP segment `bytes` (header and payload, as `poll_transmit`
/// writes it) to `limit` bytes at shift `wscale`, and redo the checksum; leave a smaller
/// window alone. A checksum that cannot be redone shows as a bad segment when parsed.
fn clamp_window(bytes: &mut [u8], limit: u32, wscale: u8, src: IpAddr, dst: IpAddr) {
    let field = (limit >> wscale).clamp(1, 65535) as u16;
    let Some(window) = bytes.get_mut(14..16) else { return };
    if u16::from_be_bytes([window[0], window[1]]) > field {
        window.copy_from_slice(&field.to_be_bytes());
        if let Err(e) = crate::wire::set_checksum(bytes, src, dst) {
            log::debug!("cannot redo the checksum of a clamped segment: {e}");
        }
    }
}

impl App {
    /// Return when a rate-limited reader wants to run again.
    fn wakeup(&self) -> Option<Instant> {
        (self.active && !self.eof && self.read_limit.is_some() && self.budget == 0).then_some(self.next_refill)
    }
}

// ---------------------------------------------------------------------------------------------
// Byte pattern
// ---------------------------------------------------------------------------------------------

/// Fill `buf` with the pattern `key` from stream offset `offset` (random access: byte `o` is
/// byte `o % 8` of `splitmix64(key + o / 8)`).
fn fill_pattern(key: u64, mut offset: u64, mut buf: &mut [u8]) {
    while !buf.is_empty() {
        let word = splitmix64(key.wrapping_add(offset / 8)).to_le_bytes();
        let skip = (offset % 8) as usize;
        let n = (8 - skip).min(buf.len());
        buf[..n].copy_from_slice(&word[skip..skip + n]);
        buf = &mut buf[n..];
        offset += n as u64;
    }
}

/// Return the index and expected value of the first byte of `data` that differs from the
/// pattern `key` at `offset`.
fn check_pattern(key: u64, mut offset: u64, mut data: &[u8]) -> Option<(usize, u8)> {
    let mut done = 0;
    while !data.is_empty() {
        let word = splitmix64(key.wrapping_add(offset / 8)).to_le_bytes();
        let skip = (offset % 8) as usize;
        let n = (8 - skip).min(data.len());
        if data[..n] != word[skip..skip + n] {
            let i = (0..n).find(|&i| data[i] != word[skip + i]).unwrap_or(0);
            return Some((done + i, word[skip + i]));
        }
        data = &data[n..];
        offset += n as u64;
        done += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_random_access() {
        let mut whole = vec![0u8; 1000];
        fill_pattern(5, 3, &mut whole);
        let mut pieces = vec![0u8; 1000];
        let mut at = 0;
        for len in [1, 7, 8, 9, 100, 875] {
            fill_pattern(5, 3 + at as u64, &mut pieces[at..at + len]);
            at += len;
        }
        assert_eq!(whole, pieces);
        assert_eq!(check_pattern(5, 3, &whole), None);
        assert_eq!(check_pattern(5, 4, &whole[1..]), None);
        let mut bad = whole.clone();
        bad[517] ^= 0x10;
        assert_eq!(check_pattern(5, 3, &bad), Some((517, whole[517])));
        let mut other = vec![0u8; 1000];
        fill_pattern(6, 3, &mut other);
        assert_ne!(whole, other);
    }
}
