//! One TCP connection (a TCB, RFC 9293 3.3.1), sans-IO; the call order is on
//! [`Connection`].
//!
//! This file holds the TCB and the user calls (RFC 9293 3.10.1-3.10.6); the TCB's fields
//! are private to it and its children. The TCB's parts live in files of their own, each
//! with its invariants: `send_space.rs` (with the SACK scoreboard of `sent.rs`),
//! `recv_space.rs` (with reassembly), `timestamps.rs`, `reliability.rs` (RTT, loss
//! recovery, congestion control) and `path.rs` (path MTU, soft errors). What the
//! connection does with them lives in the children of this module: `input.rs` (segment
//! arrival, returning an [`Outcome`](crate::Outcome)), `output.rs` (segment output),
//! `timeouts.rs` (the timer table and the one place that dispatches expiry), `icmp.rs`
//! (ICMP errors, returning an [`IcmpOutcome`](crate::IcmpOutcome)) and `open.rs` (passive
//! opens from a segment). Those build on this file, which uses no more of them than the
//! timer table.

mod icmp;
mod input;
mod open;
mod output;
mod timeouts;

use std::net::SocketAddr;
use std::time::Duration;

pub use open::CookieOptions;
use timeouts::{Due, TimerTable};

use crate::buffer::{RingBuffer, Storage};
use crate::config::{Config, Keepalive};
use crate::controller::Controller;
use crate::delivery::DeliveryRate;
use crate::ecn::EcnState;
use crate::event::{Cause, Event, Events, Stats, Transition, UserCall};
use crate::isn::IsnGenerator;
use crate::path::{Path, default_mss};
use crate::recv_space::{RecvSpace, wscale_offer};
use crate::reliability::Reliability;
use crate::send_space::SendSpace;
use crate::sent::SentQueue;
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;
use crate::timestamps::Timestamping;
use crate::tuple::FourTuple;
use crate::wire::{Flags, Segment};

/// Why `send` refused data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send buffer is full; wait for `Event::Writable`.
    #[error("send buffer full; wait until the connection is writable")]
    WouldBlock,
    /// The connection is not open for sending (listening, closing or closed).
    #[error("connection is not open for sending (state {0})")]
    InvalidState(State),
    /// The peer reset the connection, or an ICMP error ended the handshake
    /// ([`Event::Unreachable`]; [`Connection::error`] says which).
    #[error("connection reset by peer or unreachable")]
    Reset,
    /// The connection timed out ([`Connection::error`] may say why).
    #[error("connection timed out")]
    TimedOut,
}

/// Why `recv` returned no data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// No data yet; wait for `Event::Readable`.
    #[error("no data available yet; wait until the connection is readable")]
    WouldBlock,
    /// The connection is not open for receiving (listening or never opened).
    #[error("connection is not open for receiving (state {0})")]
    InvalidState(State),
    /// The peer reset the connection, or an ICMP error ended the handshake
    /// ([`Event::Unreachable`]; [`Connection::error`] says which).
    #[error("connection reset by peer or unreachable")]
    Reset,
    /// The connection timed out ([`Connection::error`] may say why).
    #[error("connection timed out")]
    TimedOut,
}

/// What kind of segment `poll_transmit` produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransmitKind {
    /// SYN or SYN-ACK (first transmission).
    Syn,
    /// New data and/or FIN, sent for the first time.
    Data,
    /// A pure acknowledgment (including window updates and challenge ACKs).
    Ack,
    /// A retransmission (after RTO, fast retransmit, or partial ACK), SYN included.
    Retransmission,
    /// A zero-window probe (persist timer).
    WindowProbe,
    /// A keep-alive probe.
    KeepAlive,
    /// A reset.
    Reset,
}

/// One segment written by `poll_transmit`: `buf[..len]` holds the TCP header and payload,
/// checksum filled in for the pseudo-header of its addresses.
///
/// It goes from [`Connection::local_addr`] to [`Connection::remote_addr`]; a reset
/// answering a segment in LISTEN or CLOSED, to that segment's source (RFC 9293 3.10.7.1), the
/// address given with it to [`Connection::handle_segment_from`], which a connection in
/// LISTEN has no remote address for. The addresses are not carried here: a host writes the
/// IP header from what it holds per connection, and filling two `SocketAddr`s into every
/// segment's description cost about 24 instructions a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written into the caller's buffer.
    pub len: usize,
    /// What it is.
    pub kind: TransmitKind,
    /// Its control bits.
    pub flags: Flags,
    /// Its sequence number.
    pub seq: SeqNum,
    /// Payload length.
    pub payload_len: usize,
    /// The segment is ECN-capable: the host sends it with ECT(0) in the IP header (RFC 3168
    /// 6.1.5, Linux's `tcp_ecn_send`). Only new data of an ECN connection; never
    /// retransmissions, pure ACKs, probes, SYNs or resets.
    pub ect: bool,
}

/// Why the connection ended abnormally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Reset,
    TimedOut,
    /// An ICMP error ended the handshake (the error is in `Path::error`).
    Unreachable,
}

/// A reset to send that does not follow from the send sequence (RFC 9293 3.10.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingReset {
    pub dst: SocketAddr,
    pub src_port: u16,
    pub seq: SeqNum,
    /// `Some` sends RST|ACK with this acknowledgment number.
    pub ack: Option<SeqNum>,
}

/// Transitions kept per connection; a connection makes a dozen in a normal life.
const TRACE_LIMIT: usize = 64;
/// Transitions a new connection's trace has room for before it grows: a normal life's.
const TRACE_CAPACITY: usize = 16;
/// Records a new connection's sent queue has room for before it grows.
const SENT_CAPACITY: usize = 16;

/// The storage of a connection's send and receive buffers, to hand from a finished
/// connection ([`Connection::into_buffers`]) to the next one ([`Connection::connect_with`],
/// [`accept_with`](Connection::accept_with),
/// [`from_syn_cookie_with`](Connection::from_syn_cookie_with)).
///
/// Each buffer is [`Config::send_buffer`] or [`Config::recv_buffer`] bytes, 256 KiB by
/// default: allocating and zeroing both for every connection costs more than the rest of a
/// short connection's life (the allocator returns blocks this large to the kernel on
/// free, so each one comes back as fresh pages to fault in). Recycled storage is zeroed
/// only where the last connection wrote.
#[derive(Debug)]
pub struct Buffers {
    send: Storage,
    recv: Storage,
}

impl Buffers {
    /// Allocate zeroed buffers of the sizes `config` asks for.
    pub fn new(config: &Config) -> Self {
        Buffers { send: Storage::new(config.send_buffer), recv: Storage::new(config.recv_buffer) }
    }

    /// Return buffers of the sizes `config` asks for, not yet allocated: each is allocated
    /// when first written, unless given storage first
    /// ([`Connection::attach_storage`]). A connection that never moves data allocates none.
    pub fn unallocated(config: &Config) -> Self {
        Buffers { send: Storage::unallocated(config.send_buffer), recv: Storage::unallocated(config.recv_buffer) }
    }

    /// Return buffers made of `send` and `recv` storage.
    pub fn from_parts(send: Storage, recv: Storage) -> Self {
        Buffers { send, recv }
    }

    /// Return the send and the receive storage.
    pub fn into_parts(self) -> (Storage, Storage) {
        (self.send, self.recv)
    }

    /// Return whether these buffers have the sizes `config` asks for.
    pub fn fits(&self, config: &Config) -> bool {
        self.send.capacity() == config.send_buffer && self.recv.capacity() == config.recv_buffer
    }

    /// Return these buffers if they fit `config`, else newly allocated ones.
    fn for_config(self, config: &Config) -> Self {
        if self.fits(config) { self } else { Buffers::new(config) }
    }
}

/// Which of a connection's two buffers (see [`Connection::attach_storage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The send buffer.
    Send,
    /// The receive buffer.
    Recv,
}

/// One TCP connection (a TCB), sans-IO.
///
/// The TCB is made of owned parts, each with its own invariants: the send space with its
/// scoreboard, the receive space with reassembly, the timestamps, reliability with
/// congestion control, and the timers. What is left here is what the whole connection
/// shares.
///
/// # Call order
///
/// The owner of a [`Connection`] drives it with four calls and never blocks:
///
/// 1. [`Connection::handle_segment`] for every segment that arrives for it;
/// 2. [`Connection::poll_transmit`] in a loop until it returns `None`, sending each
///    segment it writes;
/// 3. [`Connection::poll_timeout`] to learn when to call
///    [`Connection::handle_timeout`] next (then poll again);
/// 4. [`Connection::poll_event`] to learn what the application should do.
///
/// An ICMP error about one of its segments goes to [`Connection::handle_icmp`], like a
/// segment (then poll again); a path MTU the host learnt, to [`Connection::set_path_mtu`].
///
/// The application side is [`send`](Connection::send), [`recv`](Connection::recv),
/// [`close`](Connection::close) and [`abort`](Connection::abort); after any of
/// them, call `poll_transmit` again. [`send_with`](Connection::send_with) and
/// [`recv_with`](Connection::recv_with) are `send` and `recv` without the copy: the
/// application writes into the send buffer and reads from the receive buffer in place.
///
/// # Layout
///
/// With many connections, each one's state leaves the CPU's L1 cache between its segments,
/// so every cache line a segment or a user call touches is a miss. The fields are laid out
/// in declaration order (`repr(C)`) so that what is touched together lies together: first
/// what every call reads (state, failure, flags, the path's error, the 4-tuple), then the
/// timers, the timestamps and the delivery sampler, which every segment in or out touches,
/// the send space (its buffer last) and the receive space (its buffer first: the host asks
/// both whether they hold storage on every pass; its reassembly ranges last), reliability
/// (loss recovery's rarely used state first, the congestion controller last: NewReno
/// leaves CUBIC's tail unused), the configuration (the settings read per segment last),
/// the statistics (the per-segment counters first), and what only errors and unacceptable
/// segments touch. The parts with cold fields order them the same way (`SendSpace`,
/// `RecvSpace`, `Reliability`, `Recovery`, [`Config`], [`Stats`]), so that unused bytes sit
/// together in whole lines rather than between hot ones. docs/performance.md ("Packing the
/// connection") has the misses this saves.
#[repr(C)]
pub struct Connection {
    state: State,
    events: Events,
    failure: Option<Failure>,
    /// Opened from LISTEN (RFC 9293 3.10.7.4: an RST in SYN-RECEIVED returns there).
    passive: bool,
    /// The application let go of the connection ([`Connection::release`]).
    released: bool,
    /// Window scaling was negotiated (both SYNs carried the option, RFC 7323 2.2).
    wscale_ok: bool,
    /// SACK was negotiated (both SYNs offered it, RFC 2018).
    sack_enabled: bool,
    /// The host lets the buffers grow (its memory budget is not spent).
    growth_allowed: bool,
    /// The most bytes the host lets this connection have in flight (`u32::MAX`: no limit;
    /// [`Connection::set_flight_cap`]).
    flight_cap: u32,
    /// The segment being processed arrived marked CE ([`Connection::handle_segment_ecn`]).
    ce_in: bool,
    due: Due,
    ecn: EcnState,
    path: Path,
    /// The ports of `local` and `remote` (0 while the remote half is unknown), kept beside
    /// them: every segment in checks its destination port, and every segment out writes
    /// both, where a `SocketAddr`'s port sits at one of two offsets, by its family.
    local_port: u16,
    remote_port: u16,
    /// Our address; the remote half is known once a SYN is sent or received.
    local: SocketAddr,
    remote: Option<SocketAddr>,
    /// Boxed: queued only by a reset, and a pointer's 8 bytes keep the hot lines short.
    pending_reset: Option<Box<PendingReset>>,
    timers: TimerTable,
    ts: Timestamping,
    /// The delivery rate reported in [`Stats::delivery_rate`].
    delivery: DeliveryRate,

    snd: SendSpace,
    rcv: RecvSpace,
    rel: Reliability,
    config: Config,
    stats: Stats,

    challenge: ChallengeLimit,
    /// When the last ACK answering an unacceptable segment went out
    /// ([`Config::invalid_ack_interval`]).
    last_invalid_ack: Option<Instant>,
    trace: Vec<Transition>,
}

/// The rate limit of challenge ACKs (RFC 5961 section 7): at most
/// [`Config::challenge_ack_limit`] in each second.
#[derive(Clone, Copy, Debug, Default)]
struct ChallengeLimit {
    window: Instant,
    count: u32,
}

impl ChallengeLimit {
    /// Return whether one more challenge ACK may go out at `now`, and count it.
    fn allow(&mut self, now: Instant, limit: u32) -> bool {
        if now.saturating_duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.count = 0;
        }
        if self.count < limit {
            self.count += 1;
            return true;
        }
        false
    }
}

/// Give `$then` every field of a new connection with its initial value, for a connection
/// on `$local` (and `$remote`, once known) in `$state`, with `$config`, the buffers' storage
/// `$send` and `$recv` and an empty trace and sent queue to keep, and with `$open` (`Some`
/// of the ISS and the timestamp offset of an active open, see `Connection::connect_with`)
/// the send space and the timestamp clock started: `build_fields` makes the
/// struct expression of [`Connection::blank_with`], `assign_fields` the assignments in place
/// of [`Connection::renew`]. One list for both, so that a connection renewed in a used place
/// is the one built anew; the struct expression names every field (or does not compile), and
/// so then does the list.
macro_rules! with_initial_fields {
    ($then:ident, $target:tt, $config:ident, $local:ident, $remote:ident, $state:ident, $send:ident, $recv:ident, $trace:ident, $sent:ident, $open:expr) => {{
        let rcv_wscale_offer = if $config.window_scaling { wscale_offer($config) } else { 0 };
        let mss = default_mss($local.ip()).min($config.mss);
        $then!($target {
            config: $config.clone(),
            state: $state,
            local: $local,
            remote: $remote,
            local_port: $local.port(),
            remote_port: $remote.map_or(0, |remote: SocketAddr| remote.port()),
            passive: false,
            released: false,
            wscale_ok: false,
            sack_enabled: false,
            growth_allowed: true,
            flight_cap: u32::MAX,
            snd: {
                let mut snd = SendSpace::new($send, mss, $sent);
                if let Some((iss, _)) = $open {
                    snd.start(iss);
                }
                snd
            },
            rcv: RecvSpace::new($recv, rcv_wscale_offer, $config.mss, $config.delayed_ack),
            ts: {
                let mut ts = Timestamping::default();
                if let Some((_, offset)) = $open {
                    ts.set_offset(offset);
                }
                ts
            },
            rel: Reliability::new($config, mss),
            timers: TimerTable::default(),
            delivery: DeliveryRate::default(),
            due: Due::default(),
            path: Path::new($local.is_ipv6(), $config.mss),
            ecn: EcnState::default(),
            ce_in: false,
            challenge: ChallengeLimit::default(),
            last_invalid_ack: None,
            pending_reset: None,
            events: Events::NONE,
            failure: None,
            stats: Stats::default(),
            trace: $trace,
        })
    }};
}

/// `with_initial_fields`'s `$open` for a connection not opened yet.
const NOT_OPENED: Option<(SeqNum, u32)> = None;

/// The struct expression of `with_initial_fields`'s list.
macro_rules! build_fields {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? }) => {
        $ty { $($field: $value),* }
    };
}

/// `with_initial_fields`'s list as assignments to the fields of `$place`, in its order.
macro_rules! assign_fields {
    ($place:tt { $($field:ident: $value:expr),* $(,)? }) => {
        {
            $( $place.$field = $value; )*
        }
    };
}

impl Connection {
    fn blank(config: &Config, local: SocketAddr, remote: Option<SocketAddr>, state: State, buffers: Buffers) -> Self {
        let trace = Vec::with_capacity(TRACE_CAPACITY);
        let sent = SentQueue::with_capacity(SENT_CAPACITY);
        Connection::blank_with(config, local, remote, state, buffers, trace, sent)
    }

    /// [`blank`](Connection::blank) with an empty trace and sent queue to keep, whose
    /// allocations a connection's place hands on to its next occupant
    /// ([`renew`](Connection::renew)).
    fn blank_with(
        config: &Config,
        local: SocketAddr,
        remote: Option<SocketAddr>,
        state: State,
        buffers: Buffers,
        trace: Vec<Transition>,
        sent: SentQueue,
    ) -> Self {
        let Buffers { send, recv } = buffers.for_config(config);
        with_initial_fields!(
            build_fields,
            Connection,
            config,
            local,
            remote,
            state,
            send,
            recv,
            trace,
            sent,
            NOT_OPENED
        )
    }

    /// Make this connection's place a [`blank`](Connection::blank) connection, as if newly
    /// built, keeping the allocations of its trace and sent queue: a host that keeps the
    /// place of a finished connection for the next (its box) then allocates neither.
    /// Everything else of the old connection goes, its buffers' storage included.
    ///
    /// Each field is given its initial value in place, from the list `blank_with` builds a
    /// connection from (`with_initial_fields`): replacing the whole connection with one
    /// built by `blank_with` built it in a temporary and then moved its 2.3 KiB into the
    /// place (a `memcpy` of about 230 instructions), since the old one must be dropped in
    /// between.
    fn renew(&mut self, config: &Config, local: SocketAddr, remote: Option<SocketAddr>, buffers: Buffers) {
        let mut trace = std::mem::take(&mut self.trace);
        trace.clear();
        trace.shrink_to(TRACE_CAPACITY);
        let sent = std::mem::take(&mut self.snd.sent).recycled(SENT_CAPACITY);
        let Buffers { send, recv } = buffers.for_config(config);
        let state = State::Closed;
        with_initial_fields!(assign_fields, self, config, local, remote, state, send, recv, trace, sent, NOT_OPENED);
    }

    /// Choose our ISS for the tuple (RFC 9293 3.4.1, RFC 6528) and set up the send space.
    fn init_send_space(&mut self, now: Instant) {
        let tuple = self.tuple().expect("remote address is known when choosing an ISS");
        let generator = IsnGenerator::new(self.config.isn_secret);
        let (isn, offset) = generator.isn_and_timestamp_offset(&tuple, now);
        self.snd.start(isn);
        self.ts.set_offset(offset);
    }

    /// Active open: return a connection in SYN-SENT whose SYN `poll_transmit` will send
    /// (RFC 9293 3.10.1).
    pub fn connect(config: &Config, tuple: FourTuple, now: Instant) -> Connection {
        Connection::connect_with(config, tuple, now, Buffers::new(config))
    }

    /// [`connect`](Connection::connect) with the storage of a finished connection (see
    /// [`Buffers`]); buffers of other sizes than `config` asks for are replaced.
    ///
    /// Built whole in the place it is returned in, already in SYN-SENT (as
    /// [`connect_in`](Connection::connect_in) makes it: a blank connection, its send space
    /// and timestamp clock started by `init_send_space`, its move to SYN-SENT by `set_state`
    /// traced), so that it is not built blank in a local, changed there, and then copied
    /// whole (2.3 KiB) into the place it is returned in.
    pub fn connect_with(config: &Config, tuple: FourTuple, now: Instant, buffers: Buffers) -> Connection {
        let (local, remote) = (tuple.local, Some(tuple.remote));
        let generator = IsnGenerator::new(config.isn_secret);
        let open = Some(generator.isn_and_timestamp_offset(&tuple, now));
        let (from, state, cause) = (State::Closed, State::SynSent, Cause::User(UserCall::Connect));
        log::trace!("{:?}: {} -> {}", Some(tuple), from, state);
        let mut trace = Vec::with_capacity(TRACE_CAPACITY);
        trace.push(Transition { at: now, from, to: state, cause });
        let sent = SentQueue::with_capacity(SENT_CAPACITY);
        let Buffers { send, recv } = buffers.for_config(config);
        with_initial_fields!(build_fields, Connection, config, local, remote, state, send, recv, trace, sent, open)
    }

    /// [`connect_with`](Connection::connect_with) in the place of this connection, which it
    /// replaces: a finished one, whose statistics the caller has taken, or any other that
    /// is no longer wanted. The new connection keeps the old one's allocations (see
    /// [`renew`](Connection::renew)) and is the same as one `connect_with` returns.
    pub fn connect_in(&mut self, config: &Config, tuple: FourTuple, now: Instant, buffers: Buffers) {
        self.renew(config, tuple.local, Some(tuple.remote), buffers);
        self.init_send_space(now);
        self.set_state(now, State::SynSent, Cause::User(UserCall::Connect));
    }

    /// Passive open on `local`: return a connection in LISTEN (RFC 9293 3.10.1).
    ///
    /// A listening connection needs the source address of each segment: feed it with
    /// [`handle_segment_from`](Connection::handle_segment_from).
    pub fn listen(config: &Config, local: SocketAddr) -> Connection {
        Connection::listen_with(config, local, Buffers::new(config))
    }

    fn listen_with(config: &Config, local: SocketAddr, buffers: Buffers) -> Connection {
        let mut c = Connection::blank(config, local, None, State::Closed, buffers);
        c.become_listener();
        c
    }

    /// Turn a [`blank`](Connection::blank) connection into a listener (LISTEN, passive).
    fn become_listener(&mut self) {
        self.passive = true;
        self.set_state(Instant::ZERO, State::Listen, Cause::User(UserCall::Listen));
    }

    /// Give up the connection and return the storage of its buffers, zeroed, for the next
    /// connection (see [`Buffers`]).
    pub fn into_buffers(self) -> Buffers {
        Buffers { send: self.snd.buf.into_storage(), recv: self.rcv.buf.into_storage() }
    }

    /// Give back, zeroed, the storage of each buffer that is empty (the send buffer with
    /// nothing unsent or unacknowledged, the receive buffer with nothing unread or out of
    /// order) and cheap to clear (at most `max_written` bytes ever written since it was
    /// attached), keeping the buffers' sizes and so the window. An idle connection then holds
    /// no buffer memory, as an idle Linux socket holds no skbs. The next byte that arrives
    /// or is written takes storage again: from [`attach_storage`](Self::attach_storage), or
    /// newly allocated. A connection moving bulk has written more than a small
    /// `max_written` and keeps its storage.
    pub fn detach_idle_storage(&mut self, max_written: usize, mut keep: impl FnMut(Storage)) {
        if self.snd.buf.written() <= max_written
            && let Some(storage) = self.snd.buf.detach()
        {
            keep(storage);
        }
        if !self.rcv.holds_out_of_order()
            && self.rcv.buf.written() <= max_written
            && let Some(storage) = self.rcv.buf.detach()
        {
            keep(storage);
        }
    }

    /// Give each detached buffer storage from `take(capacity)` (a host's pool of zeroed
    /// storage, see [`detach_idle_storage`](Self::detach_idle_storage)), if it has some of
    /// that size; storage `take` returns of another size is dropped.
    ///
    /// Called before every pass over a connection, which nearly always holds its storage:
    /// that case is two comparisons here, inlined into the caller, and the loop over the
    /// sides (with the caller's pool inlined into it) runs only for a detached buffer.
    #[inline]
    pub fn attach_storage(&mut self, take: impl FnMut(usize, Side) -> Option<Storage>) {
        if self.snd.buf.is_detached() || self.rcv.buf.is_detached() {
            self.attach_detached(take);
        }
    }

    /// [`attach_storage`](Self::attach_storage) for a connection with a detached buffer.
    #[inline(never)]
    fn attach_detached(&mut self, mut take: impl FnMut(usize, Side) -> Option<Storage>) {
        for (buf, side) in [(&mut self.snd.buf, Side::Send), (&mut self.rcv.buf, Side::Recv)] {
            if buf.is_detached()
                && let Some(storage) = take(buf.capacity(), side)
            {
                let _ = buf.attach(storage);
            }
        }
    }

    /// Return whether the send and the receive buffer hold storage now (see
    /// [`detach_idle_storage`](Self::detach_idle_storage)).
    pub fn storage_attached(&self) -> (bool, bool) {
        (!self.snd.buf.is_detached(), !self.rcv.buf.is_detached())
    }

    /// Take the buffers' storage out, leaving empty rings (the connection is being replaced).
    fn take_buffers(&mut self) -> Buffers {
        let send = std::mem::replace(&mut self.snd.buf, RingBuffer::new(0));
        let recv = std::mem::replace(&mut self.rcv.buf, RingBuffer::new(0));
        Buffers { send: send.into_storage(), recv: recv.into_storage() }
    }

    /// Return the current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Return the 4-tuple (`None` while listening).
    pub fn tuple(&self) -> Option<FourTuple> {
        self.remote.map(|remote| FourTuple { local: self.local, remote })
    }

    /// Return the peer's address (`None` while listening): what [`tuple`](Connection::tuple)
    /// says without copying our own address beside it.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Return our local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Return the next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        let bits = self.events.bits();
        if bits == 0 {
            return None;
        }
        self.events = Events::from_bits(bits & (bits - 1));
        Some(Event::ALL[bits.trailing_zeros() as usize])
    }

    /// Take every event waiting for the application at once, each kind once, as a set (in
    /// the order [`poll_event`](Connection::poll_event) would hand them out:
    /// [`Events::iter`]).
    #[inline]
    pub fn take_events(&mut self) -> Events {
        std::mem::take(&mut self.events)
    }

    /// Queue data for sending; return how many bytes were taken (RFC 9293 3.10.2).
    ///
    /// Data queued in SYN-SENT or SYN-RECEIVED goes out once the connection is established.
    #[inline]
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.check_send()?;
        if data.is_empty() {
            return Ok(0);
        }
        let n = self.snd.buf.push(data);
        if n < data.len() {
            // The buffer, not the application, limits what is sent: autotuning may grow it.
            self.snd.set_limited();
        }
        match n {
            0 => Err(SendError::WouldBlock),
            n => Ok(n),
        }
    }

    /// Queue data written in place: call `f` with the free space of the send buffer that
    /// lies contiguous after the queued data, and queue the first `n` bytes of it, where `f`
    /// returns `(n, value)`; return `value` (RFC 9293 3.10.2, as [`send`](Connection::send)).
    ///
    /// Nothing is copied: the bytes `f` writes are the ones sent. The slice may be shorter
    /// than [`send_capacity`](Connection::send_capacity) where the free space wraps around
    /// the end of the buffer; the next call gets the rest. It holds whatever was there
    /// before, not zeroes. Bytes `f` writes past the `n` it reports are not sent (the next
    /// call sees them again), and an `n` larger than the slice counts as all of it.
    ///
    /// The errors are `send`'s, and with any of them `f` is not called: `WouldBlock` when
    /// the buffer is full, `InvalidState`, `Reset` or `TimedOut` when no data may be queued.
    pub fn send_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> (usize, R)) -> Result<R, SendError> {
        self.check_send()?;
        let (free, _) = self.snd.buf.free_slices_mut();
        if free.is_empty() {
            // As when `send` finds no room: the buffer holds the application back.
            self.snd.set_limited();
            return Err(SendError::WouldBlock);
        }
        let room = free.len();
        let (n, value) = f(free);
        self.snd.buf.commit(n.min(room));
        Ok(value)
    }

    /// Return why no data may be queued now, if it may not: the connection failed, is not
    /// open for sending, or the user closed it (RFC 9293 3.10.2).
    fn check_send(&self) -> Result<(), SendError> {
        self.check_failure().map_err(|f| match f {
            Failure::Reset | Failure::Unreachable => SendError::Reset,
            Failure::TimedOut => SendError::TimedOut,
        })?;
        if !self.state.can_send() || self.snd.fin_queued() {
            return Err(SendError::InvalidState(self.state));
        }
        Ok(())
    }

    /// Read received data; `Ok(0)` means the peer closed and everything was read
    /// (RFC 9293 3.10.3).
    #[inline]
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        if let Some(nothing) = self.recv_nothing() {
            return nothing;
        }
        let n = self.rcv.read(buf);
        self.note_read(n);
        Ok(n)
    }

    /// Return what [`recv`](Connection::recv) returns when the receive buffer is empty
    /// (`Ok(0)` at the end of the stream, else its error: `WouldBlock`, `Reset`, ...), or
    /// `None` when there is data to read. Reading nothing changes nothing, so a host can
    /// answer such a read without treating the connection as touched (see
    /// `bypass_stack::Stack::read`).
    ///
    /// Inlined down to the test of data to read, which the host's read asks first; the
    /// answer with nothing to read out of line.
    #[inline]
    pub fn recv_nothing(&self) -> Option<Result<usize, RecvError>> {
        if !self.rcv.buf.is_empty() {
            return None;
        }
        Some(self.nothing_to_read())
    }

    /// [`recv_nothing`](Self::recv_nothing)'s answer with the receive buffer empty.
    #[inline(never)]
    fn nothing_to_read(&self) -> Result<usize, RecvError> {
        self.check_end_of_stream().map(|()| 0)
    }

    /// Read received data in place: call `f` with the received bytes that lie contiguous
    /// at the front of the receive buffer, and consume the first `n` of them, where `f`
    /// returns `(n, value)`; return `value` (RFC 9293 3.10.3, as [`recv`](Connection::recv)).
    ///
    /// Nothing is copied: `f` reads the buffer itself. The slice may hold fewer bytes than
    /// [`recv_available`](Connection::recv_available) where the data wraps around the end of
    /// the buffer; the next call gets the rest. Bytes not consumed stay for the next call,
    /// and an `n` larger than the slice consumes all of it. Consuming opens the window as
    /// `recv` does, with a window update at once when that is worthwhile.
    ///
    /// When the peer closed and everything was read, `f` is called with an empty slice (the
    /// end of the stream, where `recv` returns `Ok(0)`), as often as `recv_with` is called.
    /// Otherwise, with nothing to read, `f` is not called and the error is `recv`'s:
    /// `WouldBlock` while data may still come, `Reset` or `TimedOut` when the connection
    /// failed, `InvalidState` when it is not open for receiving.
    pub fn recv_with<R>(&mut self, f: impl FnOnce(&[u8]) -> (usize, R)) -> Result<R, RecvError> {
        if !self.rcv.buf.is_empty() {
            let front = self.rcv.readable_front();
            let len = front.len();
            let (n, value) = f(front);
            let n = self.rcv.consume(n.min(len));
            self.note_read(n);
            return Ok(value);
        }
        self.check_end_of_stream()?;
        Ok(f(&[]).1)
    }

    /// Account for `n` bytes the application read: they count for receive-buffer
    /// autotuning, and a window update is owed at once if reading opened the window enough.
    fn note_read(&mut self, n: usize) {
        // Receive-buffer autotuning measures what the application takes, not what arrives.
        self.rcv.count_read(n);
        // Receiver-side SWS avoidance (RFC 9293 3.8.6.2.2): a window update at once
        // only when reading opened the window by a worthwhile amount.
        if self.state.can_receive() && self.rcv.read_opens_window() {
            self.rcv.ack_now();
        }
    }

    /// With nothing left to read, return `Ok` at the end of the stream (the peer's FIN
    /// arrived), else why there is nothing: data may still come, the connection failed, or
    /// it is not open for receiving (RFC 9293 3.10.3).
    fn check_end_of_stream(&self) -> Result<(), RecvError> {
        if self.rcv.fin_received() {
            return Ok(());
        }
        self.check_failure().map_err(|f| match f {
            Failure::Reset | Failure::Unreachable => RecvError::Reset,
            Failure::TimedOut => RecvError::TimedOut,
        })?;
        match self.state {
            State::SynSent | State::SynReceived | State::Established | State::FinWait1 | State::FinWait2 => {
                Err(RecvError::WouldBlock)
            }
            state => Err(RecvError::InvalidState(state)),
        }
    }

    /// Close our sending side: FIN follows the queued data (RFC 9293 3.10.4).
    pub fn close(&mut self, now: Instant) {
        let cause = Cause::User(UserCall::Close);
        match self.state {
            State::Listen | State::SynSent => {
                self.timers.stop_all();
                self.set_state(now, State::Closed, cause);
            }
            // The FIN waits until ESTABLISHED (RFC 9293 3.10.4, SYN-RECEIVED).
            State::SynReceived => self.snd.queue_fin(),
            State::Established => {
                self.snd.queue_fin();
                self.set_state(now, State::FinWait1, cause);
            }
            State::CloseWait => {
                self.snd.queue_fin();
                self.set_state(now, State::LastAck, cause);
            }
            _ => {}
        }
    }

    /// Close the connection and let go of it: the application will neither read nor write
    /// it again. What close(2) does to a socket; [`close`](Connection::close) alone is RFC
    /// 9293's CLOSE, a half-close after which the receiving side stays open.
    ///
    /// With received data still unread, the connection is reset instead (RFC 9293 3.6.1,
    /// RFC 1122 4.2.2.13: the peer learns that data was lost, rather than taking our FIN
    /// for a clean end); so is it when data arrives later. Otherwise the FIN follows the
    /// queued data, and the connection finishes on its own: FIN-WAIT-2 lasts at most
    /// [`Config::fin_wait2_timeout`](crate::Config::fin_wait2_timeout), TIME-WAIT 2 MSL.
    pub fn release(&mut self, now: Instant) {
        if !self.rcv.buf.is_empty() {
            log::debug!("{:?}: released with {} bytes unread: reset", self.tuple(), self.rcv.buf.len());
            self.stats.resets_for_lost_data += 1;
            return self.abort(now);
        }
        self.released = true;
        self.close(now);
        self.arm_fin_wait2(now);
    }

    /// Return whether the application let go of the connection ([`release`](Connection::release)).
    pub fn is_released(&self) -> bool {
        self.released
    }

    /// Start the FIN-WAIT-2 timeout of a released connection (see [`Connection::release`]).
    fn arm_fin_wait2(&mut self, now: Instant) {
        if self.state == State::FinWait2
            && self.released
            && let Some(limit) = self.config.fin_wait2_timeout
        {
            self.timers.set_if_idle(Timer::FinWait2, now + limit);
        }
    }

    /// Abort: send RST if synchronized and drop everything (RFC 9293 3.10.5).
    pub fn abort(&mut self, now: Instant) {
        if matches!(
            self.state,
            State::SynReceived | State::Established | State::FinWait1 | State::FinWait2 | State::CloseWait
        ) && let Some(remote) = self.remote
        {
            self.pending_reset = Some(Box::new(PendingReset {
                dst: remote,
                src_port: self.local.port(),
                seq: self.snd.max(),
                ack: None,
            }));
        }
        self.snd.buf.clear();
        self.timers.stop_all();
        if self.state != State::Closed {
            self.set_state(now, State::Closed, Cause::User(UserCall::Abort));
        }
    }

    /// Turn Nagle's algorithm off (`true`, TCP_NODELAY) or on.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.config.nagle = !nodelay;
    }

    /// Turn keep-alive on with `keepalive`'s settings, or off (`None`), as `SO_KEEPALIVE`
    /// and `TCP_KEEPIDLE`/`KEEPINTVL`/`KEEPCNT` do (RFC 9293 3.8.4): the idle time counts
    /// from `now`.
    pub fn set_keepalive(&mut self, now: Instant, keepalive: Option<Keepalive>) {
        self.config.keepalive = keepalive;
        match keepalive {
            Some(_) => self.arm_keepalive(now),
            None => self.timers.stop(Timer::KeepAlive),
        }
    }

    /// Abort the connection when sent data stays unacknowledged for `limit` (RFC 5482's
    /// user timeout, `TCP_USER_TIMEOUT`), or never (`None`); from now on.
    pub fn set_user_timeout(&mut self, limit: Option<Duration>) {
        self.config.user_timeout = limit;
        let since = self.rel.unacked_since();
        self.set_unacked_since(since);
    }

    /// Return bytes that `send` would accept now.
    pub fn send_capacity(&self) -> usize {
        if self.state.can_send() && !self.snd.fin_queued() && self.failure.is_none() { self.snd.buf.free() } else { 0 }
    }

    /// Return bytes queued for sending and not yet acknowledged.
    pub fn send_queued(&self) -> usize {
        self.snd.buf.len()
    }

    /// Return bytes that `recv` would return now.
    pub fn recv_available(&self) -> usize {
        self.rcv.buf.len()
    }

    /// Let the buffers grow with autotuning (`true`, the default) or not: a host over its
    /// memory budget says no. Buffers already grown keep their size.
    pub fn set_growth_allowed(&mut self, allowed: bool) {
        self.growth_allowed = allowed;
    }

    /// Limit the window this connection offers to `bytes` (`u32::MAX`: no limit), as a host
    /// does to keep the sum of its windows within what its device can take in at once. The
    /// right edge already advertised never moves back (RFC 9293 3.8.6.2.2); only its growth
    /// stops.
    pub fn set_window_cap(&mut self, bytes: u32) {
        self.rcv.set_window_cap(bytes);
    }

    /// Limit the data this connection has in flight to `bytes` (`u32::MAX`: no limit), on top
    /// of the congestion and peer windows, as a host does to keep the acknowledgments its
    /// connections' data draws within what its device can take in at once: a peer may
    /// acknowledge every segment. Only new data waits; what is already in flight stays.
    pub fn set_flight_cap(&mut self, bytes: u32) {
        self.flight_cap = bytes;
    }

    /// Return the bytes sent and not yet acknowledged (SND.MAX - SND.UNA), the figure
    /// [`Connection::set_flight_cap`] limits.
    pub fn bytes_in_flight(&self) -> u32 {
        self.snd.in_flight()
    }

    /// Return the bytes the connection's buffers hold allocated (send and receive).
    pub fn buffer_capacity(&self) -> usize {
        self.snd.buf.capacity() + self.rcv.buf.capacity()
    }

    /// Grow the send buffer to twice the congestion window, in powers of two up to
    /// `send_buffer_max`, while the application keeps it full (Linux's
    /// `tcp_sndbuf_expand`): a buffer smaller than the window it feeds caps the throughput
    /// at buffer / RTT.
    fn autotune_send(&mut self) {
        let capacity = self.snd.buf.capacity();
        let max = self.config.send_buffer_max;
        if !self.growth_allowed || capacity >= max || !self.snd.limited() {
            return;
        }
        let want = (2 * self.rel.cc.cwnd() as usize).min(max);
        if want > capacity {
            self.snd.clear_limited();
            self.snd.buf.grow(want.next_power_of_two().min(max));
            if self.state.can_send() && !self.snd.fin_queued() {
                self.emit(Event::Writable);
            }
        }
    }

    /// Let the receive buffer grow with what the application reads (see
    /// [`RecvSpace::autotune`]).
    fn autotune_recv(&mut self, now: Instant) {
        let (srtt_us, max) = (self.rel.rtt.srtt_us(), self.config.recv_buffer_max);
        self.rcv.autotune(now, srtt_us, max, self.growth_allowed);
    }

    /// Return whether SACK was negotiated (both SYNs offered it, RFC 2018).
    pub fn sack_enabled(&self) -> bool {
        self.sack_enabled
    }

    /// Return whether timestamps are in use (both SYNs carried them, RFC 7323 3.2).
    pub fn timestamps_enabled(&self) -> bool {
        self.ts.enabled()
    }

    /// Return whether the peer's FIN has been received.
    pub fn peer_closed(&self) -> bool {
        self.rcv.fin_received()
    }

    /// Return a snapshot of the statistics.
    ///
    /// Inlined: a caller that reads only the counters (the host, when it removes a
    /// connection, adds them to its totals) then computes none of the gauges (the RTTs,
    /// the delivery and pacing rates).
    #[inline]
    pub fn stats(&self) -> Stats {
        let (min_rtt, max_rtt, rtt_samples) = self.rel.recovery.rtt_range();
        Stats {
            min_rtt,
            max_rtt,
            rtt_samples,
            srtt: self.rel.rtt.srtt(),
            rttvar: self.rel.rtt.rttvar(),
            rcv_rtt: self.rcv.rtt(),
            bytes_acked: self.snd.acked_total(),
            rto: self.rel.rtt.rto(),
            cwnd: self.rel.cc.cwnd(),
            ssthresh: self.rel.cc.ssthresh(),
            peer_window: self.snd.wnd(),
            bytes_in_flight: self.snd.in_flight(),
            mss: self.snd.mss(),
            delivery_rate: self.delivery.rate(),
            pacing_rate: self.rel.pacing_rate().filter(|_| self.config.pacing).unwrap_or(0),
            ..self.stats
        }
    }

    /// Return the state transitions so far, oldest first (the first 64).
    pub fn trace(&self) -> &[Transition] {
        &self.trace
    }

    /// Return SND.UNA, the oldest sequence number not yet acknowledged (cheap: no window is
    /// computed, unlike [`sequence_space`](Connection::sequence_space)).
    pub fn snd_una(&self) -> SeqNum {
        self.snd.una()
    }

    /// Return the send and receive sequence variables, for annotations and tests.
    pub fn sequence_space(&self) -> SequenceSpace {
        SequenceSpace {
            iss: self.snd.iss(),
            snd_una: self.snd.una(),
            snd_nxt: self.snd.nxt(),
            snd_max: self.snd.max(),
            snd_wnd: self.snd.wnd(),
            irs: self.rcv.irs(),
            rcv_nxt: self.rcv.nxt(),
            rcv_wnd: self.receive_window(),
            snd_wscale: self.snd.wscale(),
            rcv_wscale: self.rcv.wscale(),
        }
    }

    // ---------------------------------------------------------------------------------
    // Shared helpers.
    // ---------------------------------------------------------------------------------

    /// Return the receive window offered now: from RCV.NXT to the right edge advertised
    /// (RCV.WND, RFC 9293 3.3.1).
    pub fn receive_window(&self) -> u32 {
        self.rcv.window()
    }

    fn check_failure(&self) -> Result<(), Failure> {
        match self.failure {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Record a state change with its cause.
    fn set_state(&mut self, now: Instant, to: State, cause: Cause) {
        let from = self.state;
        if from == to {
            return;
        }
        log::trace!("{:?}: {} -> {}", self.tuple(), from, to);
        if self.trace.len() < TRACE_LIMIT {
            self.trace.push(Transition { at: now, from, to, cause });
        }
        self.state = to;
        match to {
            State::Established if matches!(from, State::SynSent | State::SynReceived) => {
                self.emit(Event::Established);
                self.emit(Event::Writable);
                self.arm_keepalive(now);
            }
            State::FinWait2 => self.arm_fin_wait2(now),
            State::TimeWait => {
                self.timers.stop_all();
                self.timers.set(Timer::TimeWait, now + self.config.msl * 2);
            }
            State::Closed => {
                self.timers.stop_all();
                self.snd.drop_fin();
                self.due = Due::default();
                self.rcv.forget_ack();
            }
            _ => {}
        }
    }

    /// End the connection abnormally: the peer reset it, it timed out, or an ICMP error
    /// ended the handshake.
    fn fail(&mut self, now: Instant, failure: Failure, cause: Cause) {
        if failure == Failure::TimedOut
            && let Some(error) = self.path.error()
        {
            log::debug!("{:?}: timed out after ICMP {error:?}", self.tuple());
        }
        self.failure = Some(failure);
        self.snd.buf.clear();
        self.emit(match failure {
            Failure::Reset => Event::Reset,
            Failure::TimedOut => Event::TimedOut,
            Failure::Unreachable => Event::Unreachable,
        });
        self.set_state(now, State::Closed, cause);
    }

    fn emit(&mut self, event: Event) {
        self.events = self.events.with(event);
    }

    /// Restart the keep-alive timer after activity.
    fn arm_keepalive(&mut self, now: Instant) {
        if let Some(ka) = self.config.keepalive
            && matches!(self.state, State::SynReceived | State::Established | State::CloseWait)
        {
            self.timers.set(Timer::KeepAlive, now + ka.idle);
        }
    }

    /// Note since when data has waited for an acknowledgment (`None`: nothing waits), and
    /// run the user timeout from then (RFC 9293 3.8.3, RFC 5482): the connection is
    /// aborted when it expires, not at the next retransmission after it.
    fn set_unacked_since(&mut self, since: Option<Instant>) {
        self.rel.set_unacked_since(since);
        match (since, self.config.user_timeout) {
            (Some(since), Some(limit)) => self.timers.set(Timer::UserTimeout, since + limit),
            _ => self.timers.stop(Timer::UserTimeout),
        }
    }

    /// Owe the peer a challenge ACK, within the rate limit (RFC 5961 section 7).
    /// Send a challenge ACK (RFC 5961 3.2, 4.2, 5.2) for `seg`, unless one of the two rate
    /// limits holds it back: the one for unacceptable segments and RFC 5961 section 7's per
    /// second (Linux's `tcp_send_challenge_ack` checks both, in that order).
    fn challenge_ack(&mut self, now: Instant, seg: &Segment<'_>) {
        if self.invalid_ack_allowed(now, seg) && self.challenge.allow(now, self.config.challenge_ack_limit) {
            self.stats.challenge_acks += 1;
            self.rcv.ack_now();
        }
    }

    /// Acknowledge a segment that was not acceptable (out of the window, or failing PAWS),
    /// unless the rate limit holds the ACK back.
    fn ack_unacceptable(&mut self, now: Instant, seg: &Segment<'_>) {
        if self.invalid_ack_allowed(now, seg) {
            self.rcv.ack_now();
        }
    }

    /// Whether an ACK may answer the unacceptable segment `seg` at `now`: always for a segment
    /// that carries data or FIN without SYN (it is no part of an ACK loop, and a peer
    /// retransmitting needs the ACK), otherwise at most one per
    /// [`Config::invalid_ack_interval`], counted in `Stats::invalid_acks_limited` when held
    /// back. Linux's `tcp_oow_rate_limited` (net/ipv4/tcp_input.c), one clock per connection
    /// for the three cases as Linux's `last_oow_ack_time`.
    fn invalid_ack_allowed(&mut self, now: Instant, seg: &Segment<'_>) -> bool {
        if seg.seg_len() > 0 && !seg.flags.syn() {
            return true;
        }
        if let Some(last) = self.last_invalid_ack
            && now.saturating_duration_since(last) < self.config.invalid_ack_interval
        {
            self.stats.invalid_acks_limited += 1;
            return false;
        }
        self.last_invalid_ack = Some(now);
        true
    }
}

/// The sequence variables of a connection (RFC 9293 3.3.1), for annotations and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceSpace {
    /// Initial send sequence number.
    pub iss: SeqNum,
    /// Oldest unacknowledged sequence number.
    pub snd_una: SeqNum,
    /// Next sequence number to send.
    pub snd_nxt: SeqNum,
    /// Highest sequence number sent, plus one.
    pub snd_max: SeqNum,
    /// Peer's window, scaled, bytes.
    pub snd_wnd: u32,
    /// Initial receive sequence number.
    pub irs: SeqNum,
    /// Next sequence number expected.
    pub rcv_nxt: SeqNum,
    /// Receive window last advertised, bytes.
    pub rcv_wnd: u32,
    /// Shift applied to the peer's window field.
    pub snd_wscale: u8,
    /// Shift applied to our window field.
    pub rcv_wscale: u8,
}
