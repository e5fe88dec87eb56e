//! One TCP connection (a TCB, RFC 9293 3.3.1), sans-IO.
//!
//! # Call order
//!
//! The owner of a [`Connection`] drives it with four calls and never blocks:
//!
//! 1. [`Connection::handle_segment`] for every segment that arrives for it;
//! 2. [`Connection::poll_transmit`] in a loop until it returns `None`, sending each
//!    segment it writes;
//! 3. [`Connection::poll_timeout`] to learn when to call
//!    [`Connection::handle_timeout`] next (then poll again);
//! 4. [`Connection::poll_event`] to learn what the application should do.
//!
//! The application side is [`send`](Connection::send), [`recv`](Connection::recv),
//! [`close`](Connection::close) and [`abort`](Connection::abort); after any of
//! them, call `poll_transmit` again.
//!
//! Segment arrival lives in `input.rs`, segment output in `output.rs`, timers in
//! `timer.rs`; this file holds the TCB and the user calls (RFC 9293 3.10.1-3.10.6).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::buffer::{RingBuffer, Storage};
use crate::config::Config;
use crate::congestion::CongestionControl;
use crate::controller::Controller;
use crate::event::{Cause, Event, Stats, Transition, UserCall};
use crate::isn::IsnGenerator;
use crate::reassembly::Assembler;
use crate::recovery::Recovery;
use crate::rtt::RttEstimator;
use crate::segment::{Flags, Segment};
use crate::sent::SentQueue;
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::{Timer, TimerTable};
use crate::tuple::FourTuple;

/// Why `send` refused data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send buffer is full; wait for `Event::Writable`.
    #[error("send buffer full; wait until the connection is writable")]
    WouldBlock,
    /// The connection is not open for sending (listening, closing or closed).
    #[error("connection is not open for sending (state {0})")]
    InvalidState(State),
    /// The peer reset the connection.
    #[error("connection reset by peer")]
    Reset,
    /// The connection timed out.
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
    /// The peer reset the connection.
    #[error("connection reset by peer")]
    Reset,
    /// The connection timed out.
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
/// checksum filled in for the pseudo-header of `src` -> `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written into the caller's buffer.
    pub len: usize,
    /// Our address (IP source).
    pub src: SocketAddr,
    /// The peer's address (IP destination).
    pub dst: SocketAddr,
    /// What it is.
    pub kind: TransmitKind,
    /// Its control bits.
    pub flags: Flags,
    /// Its sequence number.
    pub seq: SeqNum,
    /// Payload length.
    pub payload_len: usize,
}

/// Why the connection ended abnormally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Reset,
    TimedOut,
}

/// How urgently an ACK is owed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AckDue {
    None,
    /// Owed, but may wait for the delayed-ACK timer or ride on data.
    Delayed,
    /// Send at the next `poll_transmit`.
    Now,
}

/// A reset to send that does not follow from the send sequence (RFC 9293 3.10.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingReset {
    pub dst: SocketAddr,
    pub src_port: u16,
    pub seq: SeqNum,
    /// `Some` sends RST|ACK with this acknowledgment number.
    pub ack: Option<SeqNum>,
}

const EV_ESTABLISHED: u8 = 1 << 0;
const EV_READABLE: u8 = 1 << 1;
const EV_WRITABLE: u8 = 1 << 2;
const EV_PEER_CLOSED: u8 = 1 << 3;
const EV_CLOSED: u8 = 1 << 4;
const EV_RESET: u8 = 1 << 5;
const EV_TIMED_OUT: u8 = 1 << 6;

/// Transitions kept per connection; a connection makes a dozen in a normal life.
const TRACE_LIMIT: usize = 64;

/// The largest window a shift of `wscale` can express (RFC 7323 2.3).
pub(crate) fn max_window(wscale: u8) -> u32 {
    65535u32 << wscale
}

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

    /// Return whether these buffers have the sizes `config` asks for.
    pub fn fits(&self, config: &Config) -> bool {
        self.send.capacity() == config.send_buffer && self.recv.capacity() == config.recv_buffer
    }

    /// Return these buffers if they fit `config`, else newly allocated ones.
    fn for_config(self, config: &Config) -> Self {
        if self.fits(config) { self } else { Buffers::new(config) }
    }
}

/// The SYN's options a SYN cookie carries in the low six bits of the cookie SYN-ACK's TSval,
/// as Linux does (`cookie_init_timestamp`): bits 0-3 the peer's window scale (15 for none),
/// bit 4 SACK-permitted, bit 5 reserved (zero). The peer echoes the TSval in the TSecr of
/// its ACK, so the listener keeps nothing and still learns them.
///
/// The bits are not under the cookie's MAC: whoever completes a handshake with a valid
/// cookie chooses options for its own connection only, as it could in its SYN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieOptions {
    /// The window scale the SYN offered.
    pub window_scale: Option<u8>,
    /// The SYN offered SACK.
    pub sack_permitted: bool,
}

impl CookieOptions {
    const NO_SCALE: u32 = 0xf;

    /// Return `clock` with its low six bits replaced by these options.
    pub fn encode(self, clock: u32) -> u32 {
        let scale = self.window_scale.map_or(Self::NO_SCALE, |s| u32::from(s.min(14)));
        (clock & !0x3f) | scale | (u32::from(self.sack_permitted) << 4)
    }

    /// Return the options in an echoed TSval, or `None` where the bits cannot be ours (a
    /// scale above 14 other than "none", or the reserved bit set).
    pub fn decode(tsecr: u32) -> Option<CookieOptions> {
        let scale = tsecr & 0xf;
        if tsecr & 0x20 != 0 || (scale > 14 && scale != Self::NO_SCALE) {
            return None;
        }
        Some(CookieOptions {
            window_scale: (scale != Self::NO_SCALE).then_some(scale as u8),
            sack_permitted: tsecr & 0x10 != 0,
        })
    }
}

/// One TCP connection (a TCB), sans-IO. See the module docs for the call order.
pub struct Connection {
    pub(crate) config: Config,
    pub(crate) state: State,
    /// Our address; the remote half is known once a SYN is sent or received.
    pub(crate) local: SocketAddr,
    pub(crate) remote: Option<SocketAddr>,
    /// Opened from LISTEN (RFC 9293 3.10.7.4: an RST in SYN-RECEIVED returns there).
    pub(crate) passive: bool,

    // Send sequence space (RFC 9293 3.3.1, Figure 3).
    pub(crate) iss: SeqNum,
    pub(crate) snd_una: SeqNum,
    /// Next sequence number to send; moved back to SND.UNA by a retransmission timeout.
    pub(crate) snd_nxt: SeqNum,
    /// Highest sequence number sent plus one (RFC 9293's SND.NXT for ACK validation).
    pub(crate) snd_max: SeqNum,
    /// Peer window, scaled, in bytes.
    pub(crate) snd_wnd: u32,
    pub(crate) snd_wl1: SeqNum,
    pub(crate) snd_wl2: SeqNum,
    /// Largest window the peer has offered, its SYN's included: MAX.SND.WND of the ACK
    /// acceptability check (RFC 5961 5.2), where a larger value only accepts older ACKs.
    pub(crate) max_snd_wnd: u32,
    /// Max(SND.WND) of sender-side SWS avoidance (RFC 9293 3.8.6.2.1, RFC 1122 4.2.3.4), the
    /// estimate of the peer's receive buffer: the largest window offered in a segment
    /// without SYN; 0 until one arrives.
    ///
    /// Not the SYN's window: that one is unscaled (RFC 7323 2.2), sent before scaling is in
    /// effect, and need not describe the buffer the peer goes on to offer (Linux sends 64240
    /// from its default buffer; one made smaller before the handshake completes shows only
    /// in the scaled windows after it). Counted, it would hold back every segment under half
    /// of it until the override timer. Linux, too, starts `max_window` on a passive open
    /// from the scaled window of the ACK that completes the handshake.
    pub(crate) sws_max_wnd: u32,
    pub(crate) snd_wscale: u8,
    /// Window scaling was negotiated (both SYNs carried the option).
    pub(crate) wscale_ok: bool,
    /// Effective send MSS (RFC 9293 3.7.1).
    pub(crate) smss: u16,
    /// Our SYN has been acknowledged.
    pub(crate) syn_acknowledged: bool,
    /// Sequence number of the first byte held in `send_buf`.
    pub(crate) send_buf_seq: SeqNum,
    pub(crate) send_buf: RingBuffer,
    /// The user closed: a FIN follows the last byte of `send_buf`.
    pub(crate) fin_queued: bool,

    // Receive sequence space (RFC 9293 3.3.1, Figure 4).
    pub(crate) irs: SeqNum,
    pub(crate) rcv_nxt: SeqNum,
    /// Right edge of the window last advertised; never moves left (RFC 9293 3.8.6.2.2).
    pub(crate) rcv_adv: SeqNum,
    pub(crate) rcv_wscale: u8,
    /// The scale we offered in our SYN (used only if the peer offers one too).
    pub(crate) rcv_wscale_offer: u8,
    pub(crate) recv_buf: RingBuffer,
    pub(crate) assembler: Assembler,
    /// A FIN arrived ahead of missing data at this sequence number.
    pub(crate) fin_pending: Option<SeqNum>,
    pub(crate) fin_received: bool,
    pub(crate) sack_enabled: bool,
    /// A duplicate segment received, to report in the first SACK block of the next ACK
    /// (D-SACK, RFC 2883 section 4).
    pub(crate) dsack: DsackQueue,
    /// The SACK blocks (not D-SACK) of the last ACK, most recent first (RFC 2018 4).
    pub(crate) sack_reported: crate::options::SackBlocks,

    // Timestamps (RFC 7323).
    /// Both SYNs carried the timestamps option: every segment carries it from now on.
    pub(crate) ts_ok: bool,
    /// TS.Recent: the peer's timestamp to echo (RFC 7323 4.3).
    pub(crate) ts_recent: u32,
    /// When TS.Recent was last set (it goes stale after 24 days idle, RFC 7323 5.5).
    pub(crate) ts_recent_at: Instant,
    /// Last.ACK.sent: the acknowledgment number of our last ACK (RFC 7323 4.3).
    pub(crate) last_ack_sent: SeqNum,
    /// Added to the clock in our TSval (RFC 7323 5.4).
    pub(crate) ts_offset: u32,
    /// The TSecr of the segment being processed, when it echoes one of ours (RTTM).
    pub(crate) seg_tsecr: Option<u32>,

    // Reliability and congestion control.
    pub(crate) rtt: RttEstimator,
    /// The segment being timed: (sequence number whose ACK ends it, send time). Karn's rule
    /// clears it on any retransmission (RFC 6298 section 3).
    pub(crate) rtt_probe: Option<(SeqNum, Instant)>,
    pub(crate) cc: CongestionControl,
    /// The segments in flight: the SACK scoreboard and RACK's transmit record.
    pub(crate) sent: SentQueue,
    /// Loss detection and recovery (RACK-TLP, duplicate ACKs, PRR).
    pub(crate) recovery: Recovery,
    /// The RTT sample the ACK being processed gave, for the controller.
    pub(crate) last_rtt_sample: Option<Duration>,
    /// A tail-loss probe is due (RFC 8985 7.3).
    pub(crate) tlp_due: bool,
    /// When data was last sent (RFC 5681 4.1's idle test).
    pub(crate) last_data_at: Option<Instant>,
    /// Consecutive retransmission timeouts without progress.
    pub(crate) rto_count: u32,
    /// When the oldest unacknowledged octet was first sent (user timeout, RFC 5482).
    pub(crate) unacked_since: Option<Instant>,
    /// A zero-window probe is due.
    pub(crate) probe_due: bool,
    /// The SWS override timeout passed: send what the window holds (RFC 9293 3.8.6.2.1).
    pub(crate) sws_override_due: bool,
    pub(crate) persist_backoff: u32,
    /// Zero-window probes sent since the last acceptable ACK.
    pub(crate) probes_unanswered: u32,
    /// When the last acceptable ACK arrived (or the connection was synchronized).
    pub(crate) last_ack_at: Instant,
    /// The application let go of the connection ([`Connection::release`]).
    pub(crate) released: bool,
    /// The ISS of this connection must lie above this (a new incarnation from TIME-WAIT,
    /// RFC 1122 4.2.2.13).
    pub(crate) iss_floor: Option<SeqNum>,
    /// A keep-alive probe is due; `keepalive_sent` counts unanswered probes.
    pub(crate) keepalive_due: bool,
    pub(crate) keepalive_sent: u32,
    pub(crate) last_send: Instant,

    // ACK generation.
    pub(crate) ack_due: AckDue,
    /// In-order bytes received since we last sent an ACK (RFC 9293 3.8.6.3).
    pub(crate) unacked_bytes: u32,
    /// Receive-buffer autotuning (dynamic right-sizing, as Linux's `tcp_rcv_space_adjust`):
    /// bytes the application read since `drs_since`, and the most it read in one round trip.
    pub(crate) drs_bytes: u32,
    pub(crate) drs_since: Option<Instant>,
    pub(crate) drs_space: u32,
    /// The host lets the buffers grow (its memory budget is not spent).
    pub(crate) growth_allowed: bool,
    /// The application offered more than the send buffer took since the last growth.
    pub(crate) send_limited: bool,
    /// The most bytes in flight since SND.UNA last passed `pipe_high_until` (about a round
    /// trip): whether cwnd, not the peer's window or the application, held the sender back
    /// (RFC 7661; Linux's `tcp_is_cwnd_limited`).
    pub(crate) pipe_high: u32,
    pub(crate) pipe_high_until: SeqNum,
    /// The most window the host lets this connection offer (its share of the device's
    /// receive ring); `u32::MAX` without a limit.
    pub(crate) window_cap: u32,
    /// The peer's full-sized segment, as measured: the largest payload it has sent, up to
    /// our MSS (Linux's `rcv_mss`). A peer with timestamps sends 1448 bytes under an MSS
    /// of 1460, one behind a tunnel less: "every second full-sized segment" counts these.
    pub(crate) rcv_mss: u32,
    pub(crate) challenge_window: Instant,
    pub(crate) challenge_count: u32,
    pub(crate) pending_reset: Option<PendingReset>,
    /// Why the last segment handed in was dropped, if it was.
    pub(crate) last_drop: Option<crate::input::DropReason>,

    pub(crate) timers: TimerTable,
    pub(crate) events: u8,
    pub(crate) failure: Option<Failure>,
    pub(crate) stats: Stats,
    pub(crate) trace: Vec<Transition>,
}

impl Connection {
    fn blank(config: &Config, local: SocketAddr, remote: Option<SocketAddr>, state: State, buffers: Buffers) -> Self {
        let Buffers { send, recv } = buffers.for_config(config);
        let rcv_wscale_offer = if config.window_scaling { wscale_offer(config) } else { 0 };
        let default_mss = match local.ip() {
            IpAddr::V4(_) => 536,
            IpAddr::V6(_) => 1220,
        };
        Connection {
            config: config.clone(),
            state,
            local,
            remote,
            passive: false,
            iss: SeqNum(0),
            snd_una: SeqNum(0),
            snd_nxt: SeqNum(0),
            snd_max: SeqNum(0),
            snd_wnd: 0,
            snd_wl1: SeqNum(0),
            snd_wl2: SeqNum(0),
            max_snd_wnd: 0,
            sws_max_wnd: 0,
            snd_wscale: 0,
            wscale_ok: false,
            smss: default_mss.min(config.mss),
            syn_acknowledged: false,
            send_buf_seq: SeqNum(0),
            send_buf: RingBuffer::with_storage(send),
            fin_queued: false,
            irs: SeqNum(0),
            rcv_nxt: SeqNum(0),
            rcv_adv: SeqNum(0),
            rcv_wscale: 0,
            rcv_wscale_offer,
            recv_buf: RingBuffer::with_storage(recv),
            assembler: Assembler::new(),
            fin_pending: None,
            fin_received: false,
            sack_enabled: false,
            dsack: DsackQueue::default(),
            sack_reported: crate::options::SackBlocks::new(),
            ts_ok: false,
            ts_recent: 0,
            ts_recent_at: Instant::ZERO,
            last_ack_sent: SeqNum(0),
            ts_offset: 0,
            seg_tsecr: None,
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            rtt_probe: None,
            cc: CongestionControl::new(config.congestion, default_mss.min(config.mss) as u32),
            sent: SentQueue::with_capacity(16),
            recovery: Recovery::default(),
            last_rtt_sample: None,
            tlp_due: false,
            last_data_at: None,
            rto_count: 0,
            unacked_since: None,
            probe_due: false,
            sws_override_due: false,
            persist_backoff: 0,
            probes_unanswered: 0,
            last_ack_at: Instant::ZERO,
            released: false,
            iss_floor: None,
            keepalive_due: false,
            keepalive_sent: 0,
            last_send: Instant::ZERO,
            ack_due: AckDue::None,
            unacked_bytes: 0,
            drs_bytes: 0,
            drs_since: None,
            drs_space: 0,
            growth_allowed: true,
            send_limited: false,
            pipe_high: 0,
            pipe_high_until: SeqNum(0),
            window_cap: u32::MAX,
            rcv_mss: u32::from(config.mss.min(536)),
            challenge_window: Instant::ZERO,
            challenge_count: 0,
            pending_reset: None,
            last_drop: None,
            timers: TimerTable::default(),
            events: 0,
            failure: None,
            stats: Stats::default(),
            trace: Vec::with_capacity(16),
        }
    }

    /// Choose our ISS for the tuple (RFC 9293 3.4.1, RFC 6528) and set up the send space.
    pub(crate) fn init_send_space(&mut self, now: Instant) {
        let tuple = self.tuple().expect("remote address is known when choosing an ISS");
        let generator = IsnGenerator::new(self.config.isn_secret);
        self.iss = generator.isn(&tuple, now);
        self.ts_offset = generator.timestamp_offset(&tuple);
        if let Some(floor) = self.iss_floor.take()
            && !self.iss.after(floor)
        {
            self.iss = floor;
        }
        self.snd_una = self.iss;
        self.snd_nxt = self.iss;
        self.snd_max = self.iss;
        self.send_buf_seq = self.iss + 1u32;
    }

    /// Active open: return a connection in SYN-SENT whose SYN `poll_transmit` will send
    /// (RFC 9293 3.10.1).
    pub fn connect(config: &Config, tuple: FourTuple, now: Instant) -> Connection {
        Connection::connect_with(config, tuple, now, Buffers::new(config))
    }

    /// [`connect`](Connection::connect) with the storage of a finished connection (see
    /// [`Buffers`]); buffers of other sizes than `config` asks for are replaced.
    pub fn connect_with(config: &Config, tuple: FourTuple, now: Instant, buffers: Buffers) -> Connection {
        let mut c = Connection::blank(config, tuple.local, Some(tuple.remote), State::Closed, buffers);
        c.init_send_space(now);
        c.set_state(now, State::SynSent, Cause::User(UserCall::Connect));
        c
    }

    /// Passive open on `local`: return a connection in LISTEN (RFC 9293 3.10.1).
    ///
    /// A listening connection needs the source address of each segment: feed it with
    /// [`handle_segment_from`](Connection::handle_segment_from).
    pub fn listen(config: &Config, local: SocketAddr) -> Connection {
        Connection::listen_with(config, local, Buffers::new(config))
    }

    pub(crate) fn listen_with(config: &Config, local: SocketAddr, buffers: Buffers) -> Connection {
        let mut c = Connection::blank(config, local, None, State::Closed, buffers);
        c.passive = true;
        c.set_state(Instant::ZERO, State::Listen, Cause::User(UserCall::Listen));
        c
    }

    /// Return a connection in SYN-RECEIVED created from a SYN that arrived at a listener for
    /// `tuple`, with its SYN-ACK ready to send. Return `None` when the segment is not an
    /// acceptable SYN for LISTEN (RFC 9293 3.10.7.2).
    pub fn accept(config: &Config, tuple: FourTuple, syn: &Segment<'_>, now: Instant) -> Option<Connection> {
        if !syn.flags.syn() || syn.flags.intersects(Flags::RST | Flags::ACK) {
            return None;
        }
        Connection::accept_with(config, tuple, syn, now, Buffers::new(config))
    }

    /// [`accept`](Connection::accept) with the storage of a finished connection (see
    /// [`Buffers`]); the buffers are dropped if the segment is refused.
    pub fn accept_with(
        config: &Config,
        tuple: FourTuple,
        syn: &Segment<'_>,
        now: Instant,
        buffers: Buffers,
    ) -> Option<Connection> {
        if !syn.flags.syn() || syn.flags.intersects(Flags::RST | Flags::ACK) {
            return None;
        }
        let mut c = Connection::listen_with(config, tuple.local, buffers);
        c.handle_segment_from(now, tuple.remote.ip(), syn);
        (c.state == State::SynReceived).then_some(c)
    }

    /// Return an ESTABLISHED connection rebuilt from a SYN cookie (RFC 4987 section 3.6).
    ///
    /// A listener whose SYN queue was full answered a SYN statelessly with
    /// [`syn_cookie_reply`](Connection::syn_cookie_reply), ISS `iss`; `ack` is the peer's
    /// segment completing the handshake, whose acknowledgment number the caller has already
    /// checked against the cookie, and `peer_mss` the MSS the cookie encoded. Where the SYN
    /// had timestamps, the reply hid the window scale and SACK-permitted of the SYN in the
    /// low bits of its TSval ([`CookieOptions`]), and the ACK's TSecr brings them back: the
    /// connection then has them all, as Linux's cookies do. Without timestamps they are lost,
    /// the price RFC 4987 names. The segment is then processed like any other.
    pub fn from_syn_cookie(
        config: &Config,
        tuple: FourTuple,
        iss: SeqNum,
        peer_mss: u16,
        ack: &Segment<'_>,
        now: Instant,
    ) -> Connection {
        Connection::from_syn_cookie_with(config, tuple, iss, peer_mss, ack, now, Buffers::new(config))
    }

    /// [`from_syn_cookie`](Connection::from_syn_cookie) with the storage of a finished
    /// connection (see [`Buffers`]).
    pub fn from_syn_cookie_with(
        config: &Config,
        tuple: FourTuple,
        iss: SeqNum,
        peer_mss: u16,
        ack: &Segment<'_>,
        now: Instant,
        buffers: Buffers,
    ) -> Connection {
        let mut c = Connection::blank(config, tuple.local, Some(tuple.remote), State::Closed, buffers);
        c.passive = true;
        c.iss = iss;
        c.snd_una = iss + 1u32;
        c.snd_nxt = c.snd_una;
        c.snd_max = c.snd_una;
        c.send_buf_seq = c.snd_una;
        c.syn_acknowledged = true;
        c.irs = ack.seq - 1u32;
        c.rcv_nxt = ack.seq;
        c.last_ack_sent = c.rcv_nxt;
        c.ts_offset = IsnGenerator::new(config.isn_secret).timestamp_offset(&tuple);
        // The options the cookie carried in our TSval, if the peer echoes one.
        let carried = match ack.options.timestamps {
            Some(ts) if config.timestamps => CookieOptions::decode(ts.tsecr),
            _ => None,
        };
        if let (Some(options), Some(ts)) = (carried, ack.options.timestamps) {
            c.ts_ok = true;
            c.ts_recent = ts.tsval;
            c.ts_recent_at = now;
            if let Some(shift) = options.window_scale.filter(|_| config.window_scaling) {
                c.snd_wscale = shift.min(14);
                c.rcv_wscale = c.rcv_wscale_offer;
                c.wscale_ok = true;
            }
            c.sack_enabled = config.sack && options.sack_permitted;
        }
        // The cookie SYN-ACK advertised an unscaled window of this size.
        c.rcv_adv = c.rcv_nxt + crate::output::initial_recv_window(config).min(c.recv_buf.free() as u32);
        let mss = peer_mss.min(config.mss).max(64);
        c.smss = (mss - c.fixed_options_len() as u16).max(64);
        c.cc.set_mss(c.smss as u32);
        c.snd_wl1 = c.irs;
        c.snd_wl2 = iss;
        c.set_state(now, State::Established, crate::input::segment_cause(ack));
        c.handle_segment(now, ack);
        c
    }

    /// Return the SYN-ACK a listener sends in answer to `syn` on `tuple` when it keeps no
    /// state: ISS `iss` (a SYN cookie), an unscaled window (RFC 4987 section 3.6), and our
    /// MSS. Where the SYN carries timestamps, so does the reply, its TSval's low six bits
    /// holding the SYN's window scale and SACK-permitted ([`CookieOptions`]), and the reply
    /// offers both options as a stateful SYN-ACK would.
    pub fn syn_cookie_reply(
        config: &Config,
        tuple: &FourTuple,
        syn: &Segment<'_>,
        iss: SeqNum,
        now: Instant,
    ) -> Segment<'static> {
        let mut options = crate::options::TcpOptions { mss: Some(config.mss), ..crate::options::TcpOptions::NONE };
        if let Some(ts) = syn.options.timestamps.filter(|_| config.timestamps) {
            let carried = CookieOptions {
                window_scale: syn.options.window_scale.filter(|_| config.window_scaling),
                sack_permitted: config.sack && syn.options.sack_permitted,
            };
            let clock = ((now.as_micros() / 1000) as u32)
                .wrapping_add(IsnGenerator::new(config.isn_secret).timestamp_offset(tuple));
            options.timestamps = Some(crate::options::Timestamps { tsval: carried.encode(clock), tsecr: ts.tsval });
            if carried.window_scale.is_some() {
                options.window_scale = Some(wscale_offer(config));
            }
            options.sack_permitted = carried.sack_permitted;
        }
        Segment {
            src_port: syn.dst_port,
            dst_port: syn.src_port,
            seq: iss,
            ack: syn.seq + 1u32,
            flags: Flags::SYN | Flags::ACK,
            window: crate::output::initial_recv_window(config) as u16,
            options,
            ..Segment::EMPTY
        }
    }

    /// Give up the connection and return the storage of its buffers, zeroed, for the next
    /// connection (see [`Buffers`]).
    pub fn into_buffers(self) -> Buffers {
        Buffers { send: self.send_buf.into_storage(), recv: self.recv_buf.into_storage() }
    }

    /// Take the buffers' storage out, leaving empty rings (the connection is being replaced).
    pub(crate) fn take_buffers(&mut self) -> Buffers {
        let send = std::mem::replace(&mut self.send_buf, RingBuffer::new(0));
        let recv = std::mem::replace(&mut self.recv_buf, RingBuffer::new(0));
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

    /// Return our local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Return the next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.events == 0 {
            return None;
        }
        let bit = self.events & self.events.wrapping_neg();
        self.events &= !bit;
        Some(match bit {
            EV_ESTABLISHED => Event::Established,
            EV_READABLE => Event::Readable,
            EV_WRITABLE => Event::Writable,
            EV_PEER_CLOSED => Event::PeerClosed,
            EV_CLOSED => Event::Closed,
            EV_RESET => Event::Reset,
            _ => Event::TimedOut,
        })
    }

    /// Queue data for sending; return how many bytes were taken (RFC 9293 3.10.2).
    ///
    /// Data queued in SYN-SENT or SYN-RECEIVED goes out once the connection is established.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.check_failure().map_err(|f| match f {
            Failure::Reset => SendError::Reset,
            Failure::TimedOut => SendError::TimedOut,
        })?;
        if !self.state.can_send() || self.fin_queued {
            return Err(SendError::InvalidState(self.state));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = self.send_buf.push(data);
        if n < data.len() {
            // The buffer, not the application, limits what is sent: autotuning may grow it.
            self.send_limited = true;
        }
        match n {
            0 => Err(SendError::WouldBlock),
            n => Ok(n),
        }
    }

    /// Read received data; `Ok(0)` means the peer closed and everything was read
    /// (RFC 9293 3.10.3).
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        if !self.recv_buf.is_empty() {
            let before = self.receive_window();
            let n = self.recv_buf.pop(buf);
            // Receive-buffer autotuning measures what the application takes, not what arrives.
            self.drs_bytes = self.drs_bytes.saturating_add(n as u32);
            self.after_read(before);
            return Ok(n);
        }
        if self.fin_received {
            return Ok(0);
        }
        self.check_failure().map_err(|f| match f {
            Failure::Reset => RecvError::Reset,
            Failure::TimedOut => RecvError::TimedOut,
        })?;
        match self.state {
            State::SynSent | State::SynReceived | State::Established | State::FinWait1 | State::FinWait2 => {
                Err(RecvError::WouldBlock)
            }
            state => Err(RecvError::InvalidState(state)),
        }
    }

    /// Decide whether reading opened the window enough to tell the peer at once
    /// (receiver-side SWS avoidance, RFC 9293 3.8.6.2.2).
    fn after_read(&mut self, _window_before: u32) {
        if !self.state.can_receive() {
            return;
        }
        // Tell the peer at once only when the window it knows has fallen to half of what we
        // could offer and the right edge would move by a worthwhile amount; otherwise the
        // next ACK carries the update.
        let possible = (self.recv_buf.free() as u32).min(max_window(self.rcv_wscale));
        let advertised = self.receive_window();
        let threshold = (self.recv_buf.capacity() as u32 / 2).min(self.config.mss as u32);
        if 2 * advertised <= possible && possible - advertised >= threshold {
            self.ack_due = AckDue::Now;
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
            State::SynReceived => self.fin_queued = true,
            State::Established => {
                self.fin_queued = true;
                self.set_state(now, State::FinWait1, cause);
            }
            State::CloseWait => {
                self.fin_queued = true;
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
        if !self.recv_buf.is_empty() {
            log::debug!("{:?}: released with {} bytes unread: reset", self.tuple(), self.recv_buf.len());
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
    pub(crate) fn arm_fin_wait2(&mut self, now: Instant) {
        if self.state == State::FinWait2
            && self.released
            && let Some(limit) = self.config.fin_wait2_timeout
        {
            self.timers.set_if_idle(Timer::FinWait2, now + limit);
        }
    }

    /// Return whether `seg`, arriving in TIME-WAIT, may open a new incarnation of this
    /// connection ([`reopen`](Connection::reopen)) rather than being answered with an ACK.
    ///
    /// RFC 9293 3.10.7.4 lets TIME-WAIT accept a new SYN as RFC 6191 describes, and RFC
    /// 1122 4.2.2.13 allows it when the new ISS lies above everything the old incarnation
    /// sent. RFC 6191 section 2 decides by timestamps where the old incarnation used them
    /// and the SYN carries one: its TSval must be newer than TS.Recent (then any sequence
    /// number will do). Otherwise by sequence number: the SYN must start above the old
    /// incarnation's RCV.NXT, so that no old duplicate of it can be mistaken for new data.
    pub fn time_wait_accepts(&self, seg: &Segment<'_>) -> bool {
        if self.state != State::TimeWait
            || !seg.flags.syn()
            || seg.flags.intersects(Flags::ACK | Flags::RST | Flags::FIN)
        {
            return false;
        }
        match seg.options.timestamps {
            Some(ts) if self.ts_ok => (ts.tsval.wrapping_sub(self.ts_recent) as i32) > 0,
            _ => seg.seq.after(self.rcv_nxt),
        }
    }

    /// Replace this TIME-WAIT connection with a new incarnation opened by the SYN `seg`
    /// ([`time_wait_accepts`](Connection::time_wait_accepts) must hold): a passive open in
    /// SYN-RECEIVED, its SYN-ACK ready, keeping this connection's buffers.
    ///
    /// The new ISS lies at least 64 KiB above the old SND.NXT (RFC 1122 4.2.2.13 (1); the
    /// margin is Linux's `tcp_timewait_state_process`), so segments of the old incarnation
    /// still in the network fall outside the new one's window.
    pub fn reopen(&mut self, now: Instant, seg: &Segment<'_>) {
        debug_assert!(self.time_wait_accepts(seg));
        let Some(remote) = self.remote else { return };
        let floor = self.snd_max + 65535u32 + 2u32;
        let buffers = self.take_buffers();
        let mut fresh = Connection::listen_with(&self.config, self.local, buffers);
        fresh.stats = self.stats;
        fresh.trace = std::mem::take(&mut self.trace);
        fresh.iss_floor = Some(floor);
        *self = fresh;
        if self.trace.len() < TRACE_LIMIT {
            let cause = crate::input::segment_cause(seg);
            self.trace.push(Transition { at: now, from: State::TimeWait, to: State::Listen, cause });
        }
        self.handle_segment_from(now, remote.ip(), seg);
    }

    /// Abort: send RST if synchronized and drop everything (RFC 9293 3.10.5).
    pub fn abort(&mut self, now: Instant) {
        if matches!(
            self.state,
            State::SynReceived | State::Established | State::FinWait1 | State::FinWait2 | State::CloseWait
        ) && let Some(remote) = self.remote
        {
            self.pending_reset =
                Some(PendingReset { dst: remote, src_port: self.local.port(), seq: self.snd_max, ack: None });
        }
        self.send_buf.clear();
        self.timers.stop_all();
        if self.state != State::Closed {
            self.set_state(now, State::Closed, Cause::User(UserCall::Abort));
        }
    }

    /// Turn Nagle's algorithm off (`true`, TCP_NODELAY) or on.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.config.nagle = !nodelay;
    }

    /// Return bytes that `send` would accept now.
    pub fn send_capacity(&self) -> usize {
        if self.state.can_send() && !self.fin_queued && self.failure.is_none() { self.send_buf.free() } else { 0 }
    }

    /// Return bytes queued for sending and not yet acknowledged.
    pub fn send_queued(&self) -> usize {
        self.send_buf.len()
    }

    /// Return bytes that `recv` would return now.
    pub fn recv_available(&self) -> usize {
        self.recv_buf.len()
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
        self.window_cap = bytes;
    }

    /// Return the bytes the connection's buffers hold allocated (send and receive).
    pub fn buffer_capacity(&self) -> usize {
        self.send_buf.capacity() + self.recv_buf.capacity()
    }

    /// Grow the send buffer to twice the congestion window, in powers of two up to
    /// `send_buffer_max`, while the application keeps it full (Linux's
    /// `tcp_sndbuf_expand`): a buffer smaller than the window it feeds caps the throughput
    /// at buffer / RTT.
    pub(crate) fn autotune_send(&mut self) {
        let capacity = self.send_buf.capacity();
        let max = self.config.send_buffer_max;
        if !self.growth_allowed || capacity >= max || !self.send_limited {
            return;
        }
        let want = (2 * self.cc.cwnd() as usize).min(max);
        if want > capacity {
            self.send_limited = false;
            self.send_buf.grow(want.next_power_of_two().min(max));
            if self.state.can_send() && !self.fin_queued {
                self.emit(Event::Writable);
            }
        }
    }

    /// Receive-buffer autotuning (dynamic right-sizing, Fisk and Feng; Linux's
    /// `tcp_rcv_space_adjust`): count what the application reads per round trip, and when a
    /// round trip's reads are more than any before, let the buffer (and so the window) grow
    /// to twice that. A sender the window held back delivers a window per round trip, so
    /// with an application that keeps up the window doubles each round trip until the path,
    /// not the window, is the limit; an application that does not read grows nothing.
    /// Checked as data arrives (the reads carry no clock).
    pub(crate) fn autotune_recv(&mut self, now: Instant) {
        let since = *self.drs_since.get_or_insert(now);
        let rtt = self.rtt.srtt().unwrap_or(Duration::from_millis(100)).max(Duration::from_micros(100));
        if now.saturating_duration_since(since) < rtt {
            return;
        }
        let copied = self.drs_bytes;
        self.drs_bytes = 0;
        self.drs_since = Some(now);
        if copied <= self.drs_space {
            return;
        }
        self.drs_space = copied;
        let capacity = self.recv_buf.capacity();
        let max = self.config.recv_buffer_max;
        let want = (2 * copied as usize).min(max);
        if self.growth_allowed && want > capacity {
            self.recv_buf.grow(want.next_power_of_two().min(max));
        }
    }

    /// Return whether SACK was negotiated (both SYNs offered it, RFC 2018).
    pub fn sack_enabled(&self) -> bool {
        self.sack_enabled
    }

    /// Return whether timestamps are in use (both SYNs carried them, RFC 7323 3.2).
    pub fn timestamps_enabled(&self) -> bool {
        self.ts_ok
    }

    /// Return whether the peer's FIN has been received.
    pub fn peer_closed(&self) -> bool {
        self.fin_received
    }

    /// Return why the last segment given to `handle_segment` was dropped, or `None` if it
    /// was processed (for capture annotations and debugging).
    pub fn last_drop(&self) -> Option<crate::input::DropReason> {
        self.last_drop
    }

    /// Return a snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        Stats {
            srtt: self.rtt.srtt(),
            rto: self.rtt.rto(),
            cwnd: self.cc.cwnd(),
            ssthresh: self.cc.ssthresh(),
            peer_window: self.snd_wnd,
            bytes_in_flight: self.snd_max - self.snd_una,
            mss: self.smss,
            ..self.stats
        }
    }

    /// Return the state transitions so far, oldest first (the first 64).
    pub fn trace(&self) -> &[Transition] {
        &self.trace
    }

    /// Return the send and receive sequence variables, for annotations and tests.
    pub fn sequence_space(&self) -> SequenceSpace {
        SequenceSpace {
            iss: self.iss,
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
            snd_max: self.snd_max,
            snd_wnd: self.snd_wnd,
            irs: self.irs,
            rcv_nxt: self.rcv_nxt,
            rcv_wnd: self.receive_window(),
            snd_wscale: self.snd_wscale,
            rcv_wscale: self.rcv_wscale,
        }
    }

    // ---------------------------------------------------------------------------------
    // Shared helpers.
    // ---------------------------------------------------------------------------------

    /// Return our timestamp clock (TSval) at `now`: milliseconds plus the connection's offset
    /// (RFC 7323 5.4: a tick of 1 ms to 1 s; Linux ticks in milliseconds too).
    pub(crate) fn ts_now(&self, now: Instant) -> u32 {
        ((now.as_micros() / 1000) as u32).wrapping_add(self.ts_offset)
    }

    /// Return the bytes of options every data segment carries (the timestamps, padded).
    pub(crate) fn fixed_options_len(&self) -> usize {
        if self.ts_ok { 12 } else { 0 }
    }

    /// Return the receive window offered now: from RCV.NXT to the right edge advertised
    /// (RCV.WND, RFC 9293 3.3.1).
    pub fn receive_window(&self) -> u32 {
        if self.rcv_adv.after(self.rcv_nxt) { self.rcv_adv - self.rcv_nxt } else { 0 }
    }

    fn check_failure(&self) -> Result<(), Failure> {
        match self.failure {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Record a state change with its cause.
    pub(crate) fn set_state(&mut self, now: Instant, to: State, cause: Cause) {
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
                self.fin_queued = false;
                self.probe_due = false;
                self.tlp_due = false;
                self.sws_override_due = false;
                self.keepalive_due = false;
                self.ack_due = AckDue::None;
            }
            _ => {}
        }
    }

    /// End the connection abnormally: the peer reset it or it timed out.
    pub(crate) fn fail(&mut self, now: Instant, failure: Failure, cause: Cause) {
        self.failure = Some(failure);
        self.send_buf.clear();
        self.emit(match failure {
            Failure::Reset => Event::Reset,
            Failure::TimedOut => Event::TimedOut,
        });
        self.set_state(now, State::Closed, cause);
    }

    pub(crate) fn emit(&mut self, event: Event) {
        self.events |= match event {
            Event::Established => EV_ESTABLISHED,
            Event::Readable => EV_READABLE,
            Event::Writable => EV_WRITABLE,
            Event::PeerClosed => EV_PEER_CLOSED,
            Event::Closed => EV_CLOSED,
            Event::Reset => EV_RESET,
            Event::TimedOut => EV_TIMED_OUT,
        };
    }

    /// Return the sequence number of our FIN, once the user has closed.
    pub(crate) fn fin_seq(&self) -> Option<SeqNum> {
        self.fin_queued.then(|| self.send_buf_seq + self.send_buf.len())
    }

    /// Return whether our FIN has been sent and acknowledged.
    pub(crate) fn fin_acked(&self) -> bool {
        self.fin_seq().is_some_and(|f| self.snd_una.after(f))
    }

    /// Return whether our SYN has been acknowledged.
    pub(crate) fn syn_acked(&self) -> bool {
        // A flag, not `SND.UNA > ISS`: that comparison is modular and turns false again
        // after 2 GiB have been sent.
        self.syn_acknowledged
    }

    /// Owe the peer a challenge ACK, within the rate limit (RFC 5961 section 7).
    pub(crate) fn challenge_ack(&mut self, now: Instant) {
        if now.saturating_duration_since(self.challenge_window) >= Duration::from_secs(1) {
            self.challenge_window = now;
            self.challenge_count = 0;
        }
        if self.challenge_count < self.config.challenge_ack_limit {
            self.challenge_count += 1;
            self.stats.challenge_acks += 1;
            self.ack_due = AckDue::Now;
        }
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

/// The window scale we offer: the smallest shift (at most 14, RFC 7323 2.3) whose window
/// covers the largest receive buffer autotuning may grow to.
fn wscale_offer(config: &Config) -> u8 {
    let most = config.recv_buffer_max.max(config.recv_buffer) as u32;
    (0..14).find(|&shift| max_window(shift) >= most).unwrap_or(14)
}

/// Duplicates received and not yet reported: each goes first in an ACK of its own as a
/// D-SACK (RFC 2883 4.1: the first block, and only one per ACK), as Linux sends one
/// duplicate ACK per duplicate. The host takes in frames in batches, so several can arrive
/// before the next ACK; a sender that learns of each one widens its reordering window
/// (RFC 8985 6.2) and stops resending what it thought lost.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DsackQueue {
    blocks: [(SeqNum, SeqNum); 4],
    len: u8,
}

impl DsackQueue {
    /// Note the duplicate `left..right`: joined to the last one where they touch, else
    /// queued; the oldest gives way when four wait.
    pub(crate) fn push(&mut self, left: SeqNum, right: SeqNum) {
        if let Some(last) = self.blocks[..self.len as usize].last_mut()
            && !left.after(last.1)
            && !last.0.after(right)
        {
            *last = (if left.before(last.0) { left } else { last.0 }, if right.after(last.1) { right } else { last.1 });
            return;
        }
        if self.len as usize == self.blocks.len() {
            self.blocks.rotate_left(1);
            self.len -= 1;
        }
        self.blocks[self.len as usize] = (left, right);
        self.len += 1;
    }

    /// Take the oldest duplicate not yet reported.
    pub(crate) fn pop(&mut self) -> Option<(SeqNum, SeqNum)> {
        if self.len == 0 {
            return None;
        }
        let first = self.blocks[0];
        self.blocks.rotate_left(1);
        self.len -= 1;
        Some(first)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
