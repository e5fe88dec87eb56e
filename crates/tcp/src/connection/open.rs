//! Passive opens from a segment: a SYN at a listener (RFC 9293 3.10.7.2), an ACK that
//! returns a SYN cookie (RFC 4987 3.6), and a new SYN in TIME-WAIT (RFC 6191).

use super::{Buffers, Connection, TRACE_LIMIT};
use crate::config::Config;
use crate::controller::Controller;
use crate::event::{Cause, Transition};
use crate::isn::IsnGenerator;
use crate::recv_space::{initial_recv_window, wscale_offer};
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::tuple::FourTuple;
use crate::wire::{Flags, Segment};
use crate::wire::{TcpOptions, Timestamps};

/// The SYN's options a SYN cookie carries in the low six bits of the cookie SYN-ACK's TSval,
/// as Linux does (`cookie_init_timestamp`): bits 0-3 the peer's window scale (15 for none),
/// bit 4 SACK-permitted, bit 5 ECN (RFC 3168 6.1.1: the SYN was an ECN-setup SYN and the
/// SYN-ACK an ECN-setup SYN-ACK; Linux's `TS_OPT_ECN`, read back by `cookie_ecn_ok`). The
/// peer echoes the TSval in the TSecr of
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
    /// The SYN asked for ECN and the SYN-ACK agreed (RFC 3168 6.1.1).
    pub ecn: bool,
}

impl CookieOptions {
    const NO_SCALE: u32 = 0xf;

    /// Return `clock` with its low six bits replaced by these options, moved back by 64
    /// where that put it ahead of `clock`, as Linux's `cookie_init_timestamp` does: the
    /// connection built from the cookie counts its TSvals from `clock`, and RFC 7323's
    /// PAWS at the peer drops a segment whose TSval is below one it already saw (the
    /// SYN-ACK's), so the SYN-ACK's must not be ahead.
    pub fn encode(self, clock: u32) -> u32 {
        let scale = self.window_scale.map_or(Self::NO_SCALE, |s| u32::from(s.min(14)));
        let encoded = (clock & !0x3f) | scale | (u32::from(self.sack_permitted) << 4) | (u32::from(self.ecn) << 5);
        // Compared as timestamps are, modulo 2^32 (RFC 7323 5.2).
        if (encoded.wrapping_sub(clock) as i32) > 0 { encoded.wrapping_sub(0x40) } else { encoded }
    }

    /// Return the options in an echoed TSval, or `None` where the bits cannot be ours (a
    /// scale above 14 other than "none").
    pub fn decode(tsecr: u32) -> Option<CookieOptions> {
        let scale = tsecr & 0xf;
        if scale > 14 && scale != Self::NO_SCALE {
            return None;
        }
        Some(CookieOptions {
            window_scale: (scale != Self::NO_SCALE).then_some(scale as u8),
            sack_permitted: tsecr & 0x10 != 0,
            ecn: tsecr & 0x20 != 0,
        })
    }
}

impl Connection {
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
        // Built inside the `Option` it is returned in: out of `listen_with` and through
        // `then_some`, the 2.4 KiB of a `Connection` were moved twice more per connection
        // (some 250 instructions of memcpy each).
        let mut accepted = Some(Connection::blank(config, tuple.local, None, State::Closed, buffers));
        let c = accepted.as_mut()?;
        c.become_listener();
        c.handle_segment_from(now, tuple.remote.ip(), syn);
        if c.state != State::SynReceived {
            return None;
        }
        accepted
    }

    /// [`accept_with`](Connection::accept_with) in the place of this connection, which it
    /// replaces (see [`connect_in`](Connection::connect_in)): return whether `syn` was
    /// accepted, the place then holding the connection `accept_with` returns. When it was not,
    /// the place holds nothing of use: it is only to be replaced again.
    pub fn accept_in(
        &mut self,
        config: &Config,
        tuple: FourTuple,
        syn: &Segment<'_>,
        now: Instant,
        buffers: Buffers,
    ) -> bool {
        if !syn.flags.syn() || syn.flags.intersects(Flags::RST | Flags::ACK) {
            return false;
        }
        self.renew(config, tuple.local, None, buffers);
        self.become_listener();
        self.handle_segment_from(now, tuple.remote.ip(), syn);
        self.state == State::SynReceived
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
        c.snd.start_acknowledged(iss);
        c.rcv.start(ack.seq - 1u32);
        c.ts.ack_sent(c.rcv.nxt());
        c.ts.set_offset(IsnGenerator::new(config.isn_secret).timestamp_offset(&tuple));
        // The options the cookie carried in our TSval, if the peer echoes one.
        let carried = match ack.options.timestamps {
            Some(ts) if config.timestamps => CookieOptions::decode(ts.tsecr),
            _ => None,
        };
        if let (Some(options), Some(ts)) = (carried, ack.options.timestamps) {
            c.ts.negotiate(Some(ts), true, now);
            if let Some(shift) = options.window_scale.filter(|_| config.window_scaling) {
                c.snd.set_wscale(shift);
                c.rcv.use_wscale(true);
                c.wscale_ok = true;
            }
            c.sack_enabled = config.sack && options.sack_permitted;
            // Linux's `cookie_ecn_ok`: the cookie SYN-ACK agreed to ECN (and ECN is still
            // allowed). Without timestamps the cookie carries no ECN, and neither side uses it:
            // the SYN-ACK did not carry ECE.
            c.ecn.ok = options.ecn && config.ecn != crate::ecn::Ecn::Off;
            c.stats.ecn = c.ecn.ok;
        }
        // The cookie SYN-ACK advertised an unscaled window of this size.
        c.rcv.advertised_cookie_window(initial_recv_window(config));
        c.snd.set_mss(c.path.negotiate(peer_mss, config.mss, c.ts.option_len()));
        c.rel.cc.set_mss(c.snd.mss() as u32);
        c.snd.window_from(c.rcv.irs(), iss);
        c.set_state(now, State::Established, Cause::of(ack));
        c.handle_segment(now, ack);
        c
    }

    /// Return the SYN-ACK a listener sends in answer to `syn` on `tuple` when it keeps no
    /// state: ISS `iss` (a SYN cookie), an unscaled window (RFC 4987 section 3.6), and our
    /// MSS. Where the SYN carries timestamps, so does the reply, its TSval's low six bits
    /// holding the SYN's window scale, SACK-permitted and ECN ([`CookieOptions`]), and the
    /// reply offers them as a stateful SYN-ACK would (ECE for an ECN-setup SYN, RFC 3168
    /// 6.1.1). Without timestamps the reply is a plain SYN-ACK: no ECN.
    pub fn syn_cookie_reply(
        config: &Config,
        tuple: &FourTuple,
        syn: &Segment<'_>,
        iss: SeqNum,
        now: Instant,
    ) -> Segment<'static> {
        let mut options = TcpOptions { mss: Some(config.mss), ..TcpOptions::NONE };
        let mut flags = Flags::SYN | Flags::ACK;
        if let Some(ts) = syn.options.timestamps.filter(|_| config.timestamps) {
            let carried = CookieOptions {
                window_scale: syn.options.window_scale.filter(|_| config.window_scaling),
                sack_permitted: config.sack && syn.options.sack_permitted,
                ecn: config.ecn != crate::ecn::Ecn::Off && syn.flags.contains(Flags::ECE | Flags::CWR),
            };
            let clock = ((now.as_micros() / 1000) as u32)
                .wrapping_add(IsnGenerator::new(config.isn_secret).timestamp_offset(tuple));
            options.timestamps = Some(Timestamps { tsval: carried.encode(clock), tsecr: ts.tsval });
            if carried.window_scale.is_some() {
                options.window_scale = Some(wscale_offer(config));
            }
            options.sack_permitted = carried.sack_permitted;
            if carried.ecn {
                flags |= Flags::ECE;
            }
        }
        Segment {
            src_port: syn.dst_port,
            dst_port: syn.src_port,
            seq: iss,
            ack: syn.seq + 1u32,
            flags,
            window: initial_recv_window(config) as u16,
            options,
            ..Segment::EMPTY
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
            Some(ts) if self.ts.enabled() => self.ts.is_newer(ts.tsval),
            _ => seg.seq.after(self.rcv.nxt()),
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
        let floor = self.snd.max() + 65535u32 + 2u32;
        let buffers = self.take_buffers();
        let mut fresh = Connection::listen_with(&self.config, self.local, buffers);
        fresh.stats = self.stats;
        fresh.trace = std::mem::take(&mut self.trace);
        fresh.snd.set_iss_floor(floor);
        *self = fresh;
        if self.trace.len() < TRACE_LIMIT {
            let cause = Cause::of(seg);
            self.trace.push(Transition { at: now, from: State::TimeWait, to: State::Listen, cause });
        }
        self.handle_segment_from(now, remote.ip(), seg);
    }
}
