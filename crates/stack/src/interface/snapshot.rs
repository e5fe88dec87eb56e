//! Snapshots for operators: every connection and listener with what `ss -tin` shows of a
//! kernel socket, and the TCP counters summed over all connections, live and ended (what
//! `nstat` shows as `TcpExt`/`Tcp`). Built on request only (by `bypass-control`'s endpoint),
//! never on the data path.

use std::net::SocketAddr;
use std::time::Duration;

use bypass_tcp::{Instant, State, Stats, Timer};

use super::Interface;
use super::connections::Owner;

/// One connection as an operator sees it (a row of `ss -tin`).
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
    /// The TCP state.
    pub state: State,
    /// Who holds it: `user` (accepted or connected), `listener` (not accepted yet; the
    /// listener's port), or `orphan` (the application let go and it is finishing).
    pub owner: &'static str,
    /// Bytes received and not yet read by the application (`ss`'s Recv-Q).
    pub recv_queue: usize,
    /// Bytes queued for sending: in flight (unacknowledged) and not yet sent (`ss`'s Send-Q).
    pub send_queue: usize,
    /// The connection's statistics (rtt, rto, cwnd, ssthresh, retransmissions, bytes, rates).
    pub stats: Stats,
    /// The timer that fires next, and in how long.
    pub timer: Option<(Timer, Duration)>,
    /// SACK was negotiated (RFC 2018).
    pub sack: bool,
    /// Timestamps are in use (RFC 7323).
    pub timestamps: bool,
    /// The window scales: ours (receive) and the peer's (send), RFC 7323 2.
    pub wscale: (u8, u8),
    /// The receive window offered now.
    pub rcv_wnd: u32,
    /// Bytes of buffer allocated (send and receive).
    pub buffers: usize,
}

/// One listener (a row of `ss -ltn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// The port (a listener takes every address of the host).
    pub port: u16,
    /// Established connections waiting for `accept` (`ss -l`'s Recv-Q).
    pub accept_queue: usize,
    /// The most that may wait (`StackConfig::accept_backlog`, `ss -l`'s Send-Q).
    pub backlog: usize,
    /// Handshakes in progress (SYN-RECEIVED).
    pub half_open: usize,
    /// The most in progress before SYN cookies take over (`StackConfig::syn_queue`).
    pub syn_queue: usize,
}

/// TCP counters summed over every connection the host has had (Linux's `Tcp` and `TcpExt`
/// MIB counters, as `nstat` shows them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpTotals {
    /// Segments accepted by connections.
    pub segs_in: u64,
    /// Segments connections sent.
    pub segs_out: u64,
    /// Payload bytes received in order.
    pub bytes_in: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_out: u64,
    /// Sequence space acknowledged by peers.
    pub bytes_acked: u64,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast recoveries begun.
    pub fast_retransmits: u64,
    /// Duplicate ACKs received.
    pub dup_acks: u64,
    /// Segments connections dropped as unacceptable or invalid.
    pub segs_dropped: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// ACKs not sent for unacceptable segments (rate limit).
    pub invalid_acks_limited: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Tail-loss probes sent (RFC 8985 7).
    pub loss_probes: u64,
    /// ICMP errors ignored.
    pub icmp_ignored: u64,
    /// Soft ICMP errors kept.
    pub icmp_soft_errors: u64,
    /// Packet Too Big messages acted on.
    pub mtu_reductions: u64,
    /// Segments received marked CE.
    pub ce_received: u64,
    /// cwnd reductions in answer to ECE.
    pub ece_reductions: u64,
}

impl TcpTotals {
    /// Add one connection's statistics.
    pub fn add(&mut self, s: &Stats) {
        self.segs_in += s.segs_in;
        self.segs_out += s.segs_out;
        self.bytes_in += s.bytes_in;
        self.bytes_out += s.bytes_out;
        self.bytes_acked += s.bytes_acked;
        self.retransmits += s.retransmits;
        self.timeouts += s.timeouts;
        self.fast_retransmits += s.fast_retransmits;
        self.dup_acks += s.dup_acks;
        self.segs_dropped += s.segs_dropped;
        self.challenge_acks += s.challenge_acks;
        self.invalid_acks_limited += s.invalid_acks_limited;
        self.window_probes += s.window_probes;
        self.loss_probes += s.loss_probes;
        self.icmp_ignored += s.icmp_ignored;
        self.icmp_soft_errors += s.icmp_soft_errors;
        self.mtu_reductions += s.mtu_reductions;
        self.ce_received += s.ce_received;
        self.ece_reductions += s.ece_reductions;
    }

    /// Return every counter as `(name, value)`, in display order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("segs_in", self.segs_in),
            ("segs_out", self.segs_out),
            ("bytes_in", self.bytes_in),
            ("bytes_out", self.bytes_out),
            ("bytes_acked", self.bytes_acked),
            ("retransmits", self.retransmits),
            ("timeouts", self.timeouts),
            ("fast_retransmits", self.fast_retransmits),
            ("dup_acks", self.dup_acks),
            ("segs_dropped", self.segs_dropped),
            ("challenge_acks", self.challenge_acks),
            ("invalid_acks_limited", self.invalid_acks_limited),
            ("window_probes", self.window_probes),
            ("loss_probes", self.loss_probes),
            ("icmp_ignored", self.icmp_ignored),
            ("icmp_soft_errors", self.icmp_soft_errors),
            ("mtu_reductions", self.mtu_reductions),
            ("ce_received", self.ce_received),
            ("ece_reductions", self.ece_reductions),
        ]
        .into_iter()
    }
}

impl Interface {
    /// Return every connection in the table (SYN-RECEIVED children and orphans too), in
    /// table order, with what each is doing at `now`.
    pub fn connection_infos(&self, now: Instant) -> Vec<ConnectionInfo> {
        let mut out = Vec::new();
        for slot in &self.conns.slots {
            let Some(sock) = &slot.sock else { continue };
            let c = &sock.conn;
            if c.state() == State::Listen || c.state() == State::Closed {
                continue;
            }
            let space = c.sequence_space();
            out.push(ConnectionInfo {
                local: sock.tuple.local,
                remote: sock.tuple.remote,
                state: c.state(),
                owner: match sock.owner {
                    Owner::User => "user",
                    Owner::Listener(..) => "listener",
                    Owner::Released => "orphan",
                },
                recv_queue: c.recv_available(),
                send_queue: c.send_queued(),
                stats: c.stats(),
                timer: c.next_timer().map(|(t, at)| (t, at.saturating_duration_since(now))),
                sack: c.sack_enabled(),
                timestamps: c.timestamps_enabled(),
                wscale: (space.rcv_wscale, space.snd_wscale),
                rcv_wnd: space.rcv_wnd,
                buffers: c.buffer_capacity(),
            });
        }
        out
    }

    /// Return every listener, by port.
    pub fn listener_infos(&self) -> Vec<ListenerInfo> {
        let mut out: Vec<ListenerInfo> = self
            .conns
            .listeners
            .iter()
            .map(|(&port, l)| ListenerInfo {
                port,
                accept_queue: l.queued,
                backlog: self.config.accept_backlog,
                half_open: l.half_open,
                syn_queue: self.config.syn_queue,
            })
            .collect();
        out.sort_by_key(|l| l.port);
        out
    }

    /// Return the TCP counters of every connection the host has had: those removed, plus
    /// those in the table now.
    pub fn tcp_totals(&self) -> TcpTotals {
        let mut totals = self.ended;
        for sock in self.conns.slots.iter().filter_map(|s| s.sock.as_ref()) {
            totals.add(&sock.conn.stats());
        }
        totals
    }
}
