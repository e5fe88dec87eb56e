//! The documents the endpoint answers with: [`Snapshot`] for `ss`, [`stat`] for `stat`.
//! Both sides use these types: the stack builds them from its tables, `bypass ss` reads them
//! back, and scripts read the JSON.

use std::collections::BTreeMap;

use bypass_device::Device;
use bypass_stack::{ConnectionInfo, ListenerInfo, Stack};
use bypass_tcp::{State, Timer};
use serde::{Deserialize, Serialize};

/// What `{"cmd":"ss"}` answers: one stack's connections and listeners.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The process the stack runs in.
    pub pid: u32,
    /// The stack's index in its process (a runtime's shard).
    pub shard: u32,
    /// The device's name (the interface).
    pub device: String,
    /// The stack's clock, microseconds since it started.
    pub now_us: u64,
    /// Every connection: accepted, connected, waiting in an accept queue, and closing.
    pub connections: Vec<Connection>,
    /// Every listener.
    pub listeners: Vec<Listener>,
}

/// One connection (a row of `ss -tin`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    /// The state, in `ss`'s words (`ESTAB`, `FIN-WAIT-2`, ...).
    pub state: String,
    /// Our address and port.
    pub local: String,
    /// The peer's address and port.
    pub peer: String,
    /// `user` (the application holds it), `listener` (not accepted yet) or `orphan` (the
    /// application let go; it is finishing).
    pub owner: String,
    /// Received bytes not yet read by the application (Recv-Q).
    pub recv_q: u64,
    /// Bytes not yet acknowledged: in flight and not yet sent (Send-Q).
    pub send_q: u64,
    /// Smoothed round-trip time, microseconds (none before the first sample).
    pub rtt_us: Option<u64>,
    /// Round-trip time variation, microseconds.
    pub rttvar_us: u64,
    /// Retransmission timeout, microseconds.
    pub rto_us: u64,
    /// The receiver's round-trip estimate, microseconds.
    pub rcv_rtt_us: Option<u64>,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes (`u32::MAX` before the first loss).
    pub ssthresh: u64,
    /// Effective send MSS.
    pub mss: u64,
    /// Bytes in flight.
    pub unacked: u64,
    /// Segments retransmitted.
    pub retrans: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Sequence space the peer acknowledged (`bytes_acked`).
    pub bytes_acked: u64,
    /// Payload bytes received in order (`bytes_received`).
    pub bytes_received: u64,
    /// Payload bytes sent, retransmissions included (`bytes_sent`).
    pub bytes_sent: u64,
    /// Segments received.
    pub segs_in: u64,
    /// Segments sent.
    pub segs_out: u64,
    /// Delivery rate, bytes per second.
    pub delivery_rate: u64,
    /// Pacing rate, bytes per second (0: unpaced).
    pub pacing_rate: u64,
    /// The peer's window, bytes.
    pub snd_wnd: u64,
    /// The window we offer, bytes.
    pub rcv_wnd: u64,
    /// Window scales: ours (receive), the peer's (send).
    pub wscale: [u8; 2],
    /// SACK negotiated.
    pub sack: bool,
    /// Timestamps in use.
    pub timestamps: bool,
    /// ECN negotiated.
    pub ecn: bool,
    /// Bytes of buffer allocated (send and receive).
    pub buffers: u64,
    /// The timer that fires next.
    pub timer: Option<NextTimer>,
}

/// The timer a connection runs next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextTimer {
    /// Its name (`retransmit`, `persist`, `delayed_ack`, `keepalive`, `time_wait`, ...).
    pub name: String,
    /// Microseconds until it fires (0: due).
    pub in_us: u64,
}

/// One listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// `*:<port>`: a listener takes every address of the host.
    pub local: String,
    /// The port.
    pub port: u16,
    /// Established connections waiting for accept (Recv-Q of `ss -l`).
    pub accept_queue: u64,
    /// The accept queue's bound (Send-Q of `ss -l`).
    pub backlog: u64,
    /// Handshakes in progress (SYN-RECEIVED).
    pub half_open: u64,
    /// Half-open connections before SYN cookies take over.
    pub syn_queue: u64,
}

/// Return `state` in `ss`'s words (iproute2's `sstate_name`).
pub fn state_name(state: State) -> &'static str {
    match state {
        State::Closed => "CLOSED",
        State::Listen => "LISTEN",
        State::SynSent => "SYN-SENT",
        State::SynReceived => "SYN-RECV",
        State::Established => "ESTAB",
        State::FinWait1 => "FIN-WAIT-1",
        State::FinWait2 => "FIN-WAIT-2",
        State::CloseWait => "CLOSE-WAIT",
        State::Closing => "CLOSING",
        State::LastAck => "LAST-ACK",
        State::TimeWait => "TIME-WAIT",
    }
}

/// Return `timer`'s name in reports.
pub fn timer_name(timer: Timer) -> &'static str {
    match timer {
        Timer::Retransmit => "retransmit",
        Timer::Persist => "persist",
        Timer::SwsOverride => "sws_override",
        Timer::DelayedAck => "delayed_ack",
        Timer::Reorder => "reorder",
        Timer::LossProbe => "loss_probe",
        Timer::FinWait2 => "fin_wait2",
        Timer::KeepAlive => "keepalive",
        Timer::UserTimeout => "user_timeout",
        Timer::Pacing => "pacing",
        Timer::TimeWait => "time_wait",
    }
}

impl From<&ConnectionInfo> for Connection {
    fn from(c: &ConnectionInfo) -> Connection {
        let s = &c.stats;
        let us = |d: std::time::Duration| d.as_micros() as u64;
        Connection {
            state: state_name(c.state).to_string(),
            local: c.local.to_string(),
            peer: c.remote.to_string(),
            owner: c.owner.to_string(),
            recv_q: c.recv_queue as u64,
            send_q: c.send_queue as u64,
            rtt_us: s.srtt.map(us),
            rttvar_us: us(s.rttvar),
            rto_us: us(s.rto),
            rcv_rtt_us: s.rcv_rtt.map(us),
            cwnd: u64::from(s.cwnd),
            ssthresh: u64::from(s.ssthresh),
            mss: u64::from(s.mss),
            unacked: u64::from(s.bytes_in_flight),
            retrans: s.retransmits,
            timeouts: s.timeouts,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_in,
            bytes_sent: s.bytes_out,
            segs_in: s.segs_in,
            segs_out: s.segs_out,
            delivery_rate: s.delivery_rate,
            pacing_rate: s.pacing_rate,
            snd_wnd: u64::from(s.peer_window),
            rcv_wnd: u64::from(c.rcv_wnd),
            wscale: [c.wscale.0, c.wscale.1],
            sack: c.sack,
            timestamps: c.timestamps,
            ecn: s.ecn,
            buffers: c.buffers as u64,
            timer: c.timer.map(|(t, d)| NextTimer { name: timer_name(t).to_string(), in_us: us(d) }),
        }
    }
}

impl From<&ListenerInfo> for Listener {
    fn from(l: &ListenerInfo) -> Listener {
        Listener {
            local: format!("*:{}", l.port),
            port: l.port,
            accept_queue: l.accept_queue as u64,
            backlog: l.backlog as u64,
            half_open: l.half_open as u64,
            syn_queue: l.syn_queue as u64,
        }
    }
}

/// Return the snapshot of `stack`, the stack number `shard` of this process.
pub fn snapshot<D: Device>(stack: &Stack<D>, shard: u32) -> Snapshot {
    let now = stack.now();
    let iface = stack.interface();
    Snapshot {
        pid: std::process::id(),
        shard,
        device: stack.device().info().name.clone(),
        now_us: now.as_micros(),
        connections: iface.connection_infos(now).iter().map(Connection::from).collect(),
        listeners: iface.listener_infos().iter().map(Listener::from).collect(),
    }
}

/// Return what `{"cmd":"stat"}` answers: every counter by name. The host's counters keep
/// their names (`rx_frames`, `drop.<reason>`, `syn_cookies_sent`, ...); the TCP totals over
/// all connections are `tcp.<name>` (`tcp.retransmits`, `tcp.challenge_acks`, ...); the
/// device's own are `device.<name>` (`device.rx_fill_ring_empty`, `device.rx_dropped`, ...);
/// gauges: `connections`, `orphans`, `captures`; and `now_us`, the stack's clock.
pub fn stat<D: Device>(stack: &mut Stack<D>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    out.insert("now_us".to_string(), stack.now().as_micros());
    for (name, value) in stack.counters().iter() {
        out.insert(name, value);
    }
    for (name, value) in stack.interface().tcp_totals().iter() {
        out.insert(format!("tcp.{name}"), value);
    }
    out.insert("connections".into(), stack.interface().connection_count() as u64);
    out.insert("orphans".into(), stack.interface().orphan_count() as u64);
    out.insert("captures".into(), stack.capture_count() as u64);
    // The host's budgets, each beside what is spent of it; a budget without a limit (a
    // device without a fixed receive ring) is left out.
    let iface = stack.interface();
    let budgets = [
        ("budget.windows", iface.offered_windows(), iface.window_budget()),
        ("budget.flight", iface.bytes_in_flight(), iface.flight_budget()),
        ("budget.buffers", iface.buffer_memory(), iface.config().buffer_memory),
    ];
    for (name, spent, limit) in budgets {
        out.insert(format!("{name}_used"), spent as u64);
        if limit != usize::MAX {
            out.insert(name.into(), limit as u64);
        }
    }
    for (name, value) in stack.device_mut().device_counters() {
        out.insert(format!("device.{name}"), value);
    }
    out
}
