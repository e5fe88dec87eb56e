//! Follow TCP conversations through a capture: who is the client, Wireshark-style relative
//! numbers, both sides' RFC 9293 states, and the events worth a mark.
//!
//! The states are inferred from what the capture shows, so they are approximations:
//! - The capture point is taken to sit at both ends at once: a segment changes the sender's
//!   state and the receiver's state on the same row, and nothing is lost between the capture
//!   point and either end.
//! - A side that has sent nothing yet is CLOSED when it will send the first SYN and LISTEN when
//!   it will answer one. A capture that starts after the handshake starts both sides in
//!   ESTABLISHED; one that starts with the SYN|ACK starts the client in SYN-SENT.
//! - Every segment is taken as acceptable (RFC 9293 3.10.7.4's checks are not repeated), except
//!   that a FIN that arrives ahead of missing data takes effect only once the gap is filled, as
//!   a receiver queues it (3.10.7.4, eighth check).
//! - FINs that cross are recognised by the ACK field: a FIN whose ACK does not cover the peer's
//!   FIN was sent before that FIN arrived, so its sender goes FIN-WAIT-1 -> CLOSING (simultaneous
//!   close, 3.6 case 2) and is not shown in CLOSE-WAIT where the peer's FIN was captured.
//! - A RST closes both sides, except one sent to a LISTEN side, which ignores it (3.10.7.2).
//! - A SYN that is never answered leaves the server in LISTEN (nothing shows it arrived); a SYN
//!   answered by a RST had no listener, so that server is CLOSED throughout (3.10.7.1).
//! - TIME-WAIT is the last state shown: the 2*MSL timer that ends it sends nothing.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use bypass_tcp::{Flags, SeqNum, State, TcpOptions};

use super::decode::TcpPacket;

/// The most gaps remembered per direction; older ones are forgotten (a bound for odd captures).
const MAX_HOLES: usize = 64;

/// Index of the client in `[client, server]` arrays.
pub const CLIENT: usize = 0;
/// Index of the server in `[client, server]` arrays.
pub const SERVER: usize = 1;

/// How a conversation begins in the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// With the client's SYN.
    Syn,
    /// With the server's SYN|ACK: the SYN was not captured.
    SynAck,
    /// After the handshake.
    MidStream,
}

/// How far the three-way handshake got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// Both sides reached ESTABLISHED.
    Complete,
    /// The capture starts after the handshake.
    NotCaptured,
    /// The SYN got no answer.
    NotAnswered,
    /// The server answered the SYN with a RST.
    Refused,
    /// A RST ended the handshake after the SYN|ACK.
    Reset,
    /// The SYN|ACK was never acknowledged.
    SynAckNotAcked,
}

impl Handshake {
    /// Return what went wrong, if the handshake is incomplete.
    pub fn problem(self) -> Option<&'static str> {
        match self {
            Handshake::Complete | Handshake::NotCaptured => None,
            Handshake::NotAnswered => Some("incomplete handshake: the SYN was never answered"),
            Handshake::Refused => Some("incomplete handshake: refused (RST in answer to the SYN)"),
            Handshake::Reset => Some("incomplete handshake: reset before it completed"),
            Handshake::SynAckNotAcked => Some("incomplete handshake: the SYN|ACK was never acknowledged"),
        }
    }
}

/// Something about a segment worth a mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The segment carries RST.
    Reset,
    /// It resends sequence space its sender already sent.
    Retransmission,
    /// It starts above the next expected sequence number: `missing` octets were not seen before it.
    OutOfOrder {
        /// Octets between the next expected sequence number and this segment.
        missing: u32,
    },
    /// It fills (part of) a gap left by an out-of-order segment.
    FillsGap,
    /// It advertises a zero receive window.
    ZeroWindow,
    /// It reopens a window its sender had closed.
    WindowOpens,
    /// It probes the peer's zero window (RFC 9293 3.8.6.1).
    WindowProbe,
    /// A keep-alive: no new data, one below the next sequence number (RFC 9293 3.8.4).
    KeepAlive,
}

impl Event {
    /// Return whether the event points at trouble (drawn in red).
    pub fn is_problem(self) -> bool {
        !matches!(self, Event::WindowOpens | Event::KeepAlive)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Reset => f.write_str("reset"),
            Event::Retransmission => f.write_str("retransmission"),
            Event::OutOfOrder { missing } => write!(f, "out-of-order ({missing} bytes missing before it)"),
            Event::FillsGap => f.write_str("out-of-order (late, fills a gap)"),
            Event::ZeroWindow => f.write_str("zero window"),
            Event::WindowOpens => f.write_str("window opens"),
            Event::WindowProbe => f.write_str("window probe"),
            Event::KeepAlive => f.write_str("keep-alive"),
        }
    }
}

/// One segment of a conversation, ready to draw.
#[derive(Clone, Debug)]
pub struct Row {
    /// Frame number in the capture (1-based).
    pub frame: usize,
    /// Nanoseconds since the conversation's first segment (negative if the capture's clock stepped back).
    pub time_ns: i128,
    /// Sent by the client (left to right).
    pub from_client: bool,
    /// Control bits.
    pub flags: Flags,
    /// Sequence number relative to the sender's ISN.
    pub seq: u32,
    /// Acknowledgment number relative to the receiver's ISN, with ACK.
    pub ack: Option<u32>,
    /// Payload octets.
    pub len: u32,
    /// Receive window, scaled where the scale is known (never on SYNs, RFC 7323 2.2).
    pub window: u64,
    /// The options, on SYNs.
    pub syn_options: Option<TcpOptions>,
    /// SACK blocks, relative to the receiver's ISN.
    pub sack: Vec<(u32, u32)>,
    /// New `[client, server]` states, where this segment changed them.
    pub states: [Option<State>; 2],
    /// What is worth a mark.
    pub events: Vec<Event>,
    /// The packet comment.
    pub comment: Option<String>,
}

impl Row {
    /// Return the arrow's label: `[SYN|ACK] seq=0 ack=1 win=65535 mss=1460 ws=7 sackOK`.
    pub fn label(&self) -> String {
        use std::fmt::Write;
        let mut s = format!("[{}] seq={}", self.flags, self.seq);
        if let Some(ack) = self.ack {
            let _ = write!(s, " ack={ack}");
        }
        if self.len > 0 {
            let _ = write!(s, " len={}", self.len);
        }
        let _ = write!(s, " win={}", self.window);
        if let Some(o) = &self.syn_options {
            if let Some(mss) = o.mss {
                let _ = write!(s, " mss={mss}");
            }
            if let Some(ws) = o.window_scale {
                let _ = write!(s, " ws={ws}");
            }
            if o.sack_permitted {
                s.push_str(" sackOK");
            }
            if o.timestamps.is_some() {
                s.push_str(" ts");
            }
        }
        if !self.sack.is_empty() {
            s.push_str(" sack=");
            for (i, (left, right)) in self.sack.iter().enumerate() {
                let _ = write!(s, "{}{left}-{right}", if i > 0 { "," } else { "" });
            }
        }
        s
    }
}

/// Counts for the summary line.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Segments `[client->server, server->client]`.
    pub packets: [u64; 2],
    /// Payload octets `[client->server, server->client]`, retransmissions included.
    pub bytes: [u64; 2],
    /// Nanoseconds from the first to the last segment.
    pub duration_ns: i128,
    /// Segments with SYN.
    pub syn: u64,
    /// Segments with FIN.
    pub fin: u64,
    /// Segments with RST.
    pub rst: u64,
    /// Retransmissions.
    pub retransmissions: u64,
    /// Out-of-order segments (both kinds).
    pub out_of_order: u64,
    /// Zero-window advertisements.
    pub zero_windows: u64,
    /// Window probes.
    pub window_probes: u64,
    /// Keep-alives.
    pub keepalives: u64,
}

/// One TCP conversation, analysed.
#[derive(Clone, Debug)]
pub struct Conversation {
    /// The side that sent the first SYN (else the first sender).
    pub client: SocketAddr,
    /// The other side.
    pub server: SocketAddr,
    /// How the capture begins.
    pub opening: Opening,
    /// `[client, server]` states before the first segment.
    pub initial: [State; 2],
    /// `[client, server]` states after the last segment.
    pub last: [State; 2],
    /// Whether windows may be shown unscaled for want of a SYN: no SYN without the window scale
    /// option was seen (which would turn scaling off), and not both SYNs were.
    pub scale_unknown: bool,
    /// How far the handshake got.
    pub handshake: Handshake,
    /// The segments.
    pub rows: Vec<Row>,
    /// The counts.
    pub summary: Summary,
}

/// What one side has sent, and its state.
#[derive(Clone, Debug)]
struct Side {
    state: State,
    /// Base for relative sequence numbers: the ISN, or one below the first number seen.
    base: Option<SeqNum>,
    /// Sequence number of its SYN, if it sent one.
    syn: Option<SeqNum>,
    /// Options of its SYN.
    syn_options: Option<TcpOptions>,
    /// Sequence number of its FIN.
    fin: Option<SeqNum>,
    /// One past the highest sequence number sent (SND.MAX as the capture sees it).
    nxt: Option<SeqNum>,
    /// Sequence ranges below `nxt` skipped by out-of-order segments and not seen since.
    holes: Vec<(SeqNum, SeqNum)>,
    /// Its FIN arrived ahead of a gap: the peer acts on it when the gap is filled.
    fin_pending: bool,
    /// The last window it advertised (unscaled; only zero matters).
    window: Option<u16>,
    /// It reached ESTABLISHED at some point.
    established: bool,
    /// It sent a RST.
    sent_rst: bool,
}

impl Side {
    fn new(state: State) -> Side {
        Side {
            state,
            base: None,
            syn: None,
            syn_options: None,
            fin: None,
            nxt: None,
            holes: Vec::new(),
            fin_pending: false,
            window: None,
            established: state == State::Established,
            sent_rst: false,
        }
    }

    fn relative(&self, n: SeqNum) -> u32 {
        n.0.wrapping_sub(self.base.map_or(0, |b| b.0))
    }

    /// Remove `start..end` from the holes; return whether it overlapped any.
    fn fill_holes(&mut self, start: SeqNum, end: SeqNum) -> bool {
        let mut overlapped = false;
        let mut kept = Vec::with_capacity(self.holes.len() + 1);
        for &(a, b) in &self.holes {
            if end.before_eq(a) || start.after_eq(b) {
                kept.push((a, b));
                continue;
            }
            overlapped = true;
            if a.before(start) {
                kept.push((a, start));
            }
            if end.before(b) {
                kept.push((end, b));
            }
        }
        self.holes = kept;
        overlapped
    }
}

/// A conversation being followed.
struct Builder {
    client: SocketAddr,
    server: SocketAddr,
    start: Duration,
    opening: Opening,
    initial: [State; 2],
    sides: [Side; 2],
    rows: Vec<Row>,
    summary: Summary,
    /// The row where each side was put in CLOSE-WAIT, to take back if its FIN turns out to cross.
    close_wait_row: [Option<usize>; 2],
}

impl Builder {
    fn new(first: &TcpPacket) -> Builder {
        let f = first.flags;
        let (client, server, opening, initial) = if f.syn() && !f.ack() && !f.rst() {
            (first.src, first.dst, Opening::Syn, [State::Closed, State::Listen])
        } else if f.syn() && f.ack() && !f.rst() {
            (first.dst, first.src, Opening::SynAck, [State::SynSent, State::Listen])
        } else {
            (first.src, first.dst, Opening::MidStream, [State::Established, State::Established])
        };
        Builder {
            client,
            server,
            start: first.time,
            opening,
            initial,
            sides: [Side::new(initial[CLIENT]), Side::new(initial[SERVER])],
            rows: Vec::new(),
            summary: Summary::default(),
            close_wait_row: [None, None],
        }
    }

    /// Return whether a SYN from `p.src` opens a new conversation on the same addresses
    /// (port reuse) rather than belonging to this one.
    fn is_new_connection(&self, p: &TcpPacket) -> bool {
        if !p.flags.syn() || p.flags.ack() || p.flags.rst() {
            return false;
        }
        let side = &self.sides[if p.src == self.client { CLIENT } else { SERVER }];
        match side.syn {
            // The same ISN is a retransmitted SYN.
            Some(isn) => isn != p.seq,
            // A first SYN from this side belongs here only during a (simultaneous) open.
            None => self.opening == Opening::MidStream || self.sides.iter().any(|s| s.established || s.sent_rst),
        }
    }

    fn push(&mut self, p: &TcpPacket) {
        let from_client = p.src == self.client;
        let before = [self.sides[CLIENT].state, self.sides[SERVER].state];
        let scale_known = self.scale_known();
        let [client, server] = &mut self.sides;
        let (snd, rcv) = if from_client { (client, server) } else { (server, client) };
        let f = p.flags;

        if snd.base.is_none() {
            snd.base = Some(if f.syn() { p.seq } else { p.seq - 1 });
        }
        if f.ack() && rcv.base.is_none() {
            rcv.base = Some(p.ack - 1);
        }
        if f.syn() && snd.syn.is_none() {
            snd.syn = Some(p.seq);
            snd.syn_options = Some(p.options);
        }
        if f.fin() && !f.rst() {
            snd.fin = Some(p.seq + p.len);
        }
        let events = classify(snd, rcv, p);
        // Crossing FINs (RFC 9293 3.6, simultaneous close): this FIN does not acknowledge the
        // peer's, so it left before that FIN arrived. Undo the CLOSE-WAIT shown where the peer's
        // FIN was captured; the sender goes FIN-WAIT-1 now, and CLOSING as the peer's FIN lands.
        let crossing = f.fin()
            && !f.rst()
            && snd.state == State::CloseWait
            && rcv.fin.is_some_and(|fin| !(f.ack() && p.ack.after(fin)));
        if crossing {
            snd.state = State::Established;
            let s = if from_client { CLIENT } else { SERVER };
            if let Some(row) = self.close_wait_row[s].and_then(|i| self.rows.get_mut(i)) {
                row.states[s] = None;
            }
        }
        transition(snd, rcv, p);
        if crossing && snd.state == State::FinWait1 {
            snd.state = State::Closing;
        }
        snd.window = Some(p.window);
        snd.sent_rst |= f.rst();

        // Window scaling applies when both SYNs carried the option, never to SYNs (RFC 7323 2.2).
        let shift = match (scale_known, &snd.syn_options, &rcv.syn_options) {
            (true, Some(a), Some(b)) if !f.syn() => match (a.window_scale, b.window_scale) {
                (Some(ws), Some(_)) => ws.min(14),
                _ => 0,
            },
            _ => 0,
        };
        let mut row = Row {
            frame: p.frame,
            time_ns: p.time.as_nanos() as i128 - self.start.as_nanos() as i128,
            from_client,
            flags: f,
            seq: snd.relative(p.seq),
            ack: f.ack().then(|| rcv.relative(p.ack)),
            len: p.len,
            window: (p.window as u64) << shift,
            syn_options: f.syn().then_some(p.options),
            sack: p
                .options
                .sack_blocks
                .as_slice()
                .iter()
                .map(|b| (rcv.relative(b.left), rcv.relative(b.right)))
                .collect(),
            states: [None, None],
            events,
            comment: p.comment.clone(),
        };
        for (i, side) in self.sides.iter_mut().enumerate() {
            side.established |= side.state == State::Established;
            if side.state != before[i] {
                row.states[i] = Some(side.state);
                if side.state == State::CloseWait {
                    self.close_wait_row[i] = Some(self.rows.len());
                }
            }
        }

        let s = &mut self.summary;
        let dir = if from_client { CLIENT } else { SERVER };
        s.packets[dir] += 1;
        s.bytes[dir] += p.len as u64;
        s.duration_ns = s.duration_ns.max(row.time_ns);
        s.syn += f.syn() as u64;
        s.fin += f.fin() as u64;
        s.rst += f.rst() as u64;
        for e in &row.events {
            match e {
                Event::Retransmission => s.retransmissions += 1,
                Event::OutOfOrder { .. } | Event::FillsGap => s.out_of_order += 1,
                Event::ZeroWindow => s.zero_windows += 1,
                Event::WindowProbe => s.window_probes += 1,
                Event::KeepAlive => s.keepalives += 1,
                Event::Reset | Event::WindowOpens => {}
            }
        }
        self.rows.push(row);
    }

    fn scale_known(&self) -> bool {
        self.sides.iter().all(|s| s.syn_options.is_some())
    }

    fn finish(mut self) -> Conversation {
        let [client, server] = &self.sides;
        let handshake = if self.opening == Opening::MidStream {
            Handshake::NotCaptured
        } else if client.established && server.established {
            Handshake::Complete
        } else if server.sent_rst && server.syn.is_none() {
            Handshake::Refused
        } else if client.sent_rst || server.sent_rst {
            Handshake::Reset
        } else if server.syn.is_none() {
            Handshake::NotAnswered
        } else {
            Handshake::SynAckNotAcked
        };
        let mut last = [client.state, server.state];
        // Where nothing shows the server's side (see the module comment), take back its states.
        let server_state = match handshake {
            Handshake::NotAnswered => Some(State::Listen),
            Handshake::Refused => Some(State::Closed),
            _ => None,
        };
        if let Some(state) = server_state {
            self.initial[SERVER] = state;
            last[SERVER] = state;
            for row in &mut self.rows {
                row.states[SERVER] = None;
            }
        }
        Conversation {
            client: self.client,
            server: self.server,
            opening: self.opening,
            initial: self.initial,
            last,
            scale_unknown: !self.scale_known()
                && self.sides.iter().filter_map(|s| s.syn_options).all(|o| o.window_scale.is_some()),
            handshake,
            rows: self.rows,
            summary: self.summary,
        }
    }
}

/// Return the events of segment `p` from `snd` to `rcv`, and advance `snd`'s sequence record.
fn classify(snd: &mut Side, rcv: &Side, p: &TcpPacket) -> Vec<Event> {
    let f = p.flags;
    let mut events = Vec::new();
    if f.rst() {
        // A RST's sequence number only has to fall in the window (RFC 9293 3.10.7.4, first check).
        events.push(Event::Reset);
        return events;
    }
    let seg_len = p.seg_len();
    let end = p.seq + seg_len;
    match snd.nxt {
        None => snd.nxt = Some(end),
        Some(nxt) => {
            let below = nxt - 1;
            let bare = !f.syn() && !f.fin();
            if bare && rcv.window == Some(0) && (p.len == 1 || (p.len == 0 && p.seq == below)) {
                // New data (RFC 9293 3.8.6.1) or, as Linux sends, an old sequence number.
                events.push(Event::WindowProbe);
            } else if seg_len == 0 {
                if p.seq == below {
                    events.push(Event::KeepAlive);
                }
            } else if p.seq == nxt {
            } else if p.seq.after(nxt) {
                events.push(Event::OutOfOrder { missing: p.seq - nxt });
                snd.holes.push((nxt, p.seq));
                if snd.holes.len() > MAX_HOLES {
                    snd.holes.remove(0);
                }
            } else if bare && p.len == 1 && p.seq == below {
                events.push(Event::KeepAlive);
            } else if snd.fill_holes(p.seq, end) {
                events.push(Event::FillsGap);
            } else {
                events.push(Event::Retransmission);
            }
            if end.after(nxt) {
                snd.nxt = Some(end);
            }
        }
    }
    if p.window == 0 {
        events.push(Event::ZeroWindow);
    } else if snd.window == Some(0) {
        events.push(Event::WindowOpens);
    }
    events
}

/// Apply segment `p` from `snd` to `rcv` to both sides' states.
fn transition(snd: &mut Side, rcv: &mut Side, p: &TcpPacket) {
    use State::*;
    let f = p.flags;
    // The sender: what sending this segment says about it.
    if f.rst() {
        // RFC 9293 3.10.5 ABORT, or a RST answering a segment for no connection (3.10.7.1).
        snd.state = Closed;
    } else {
        if f.syn() {
            snd.state = match (snd.state, f.ack()) {
                (Closed | Listen, false) => SynSent,    // 3.10.1 active OPEN
                (Closed | Listen, true) => SynReceived, // 3.10.7.2: SYN received (not captured), SYN|ACK sent
                (state, _) => state,
            };
        }
        if f.fin() {
            // 3.10.4 CLOSE.
            snd.state = match snd.state {
                SynReceived | Established => FinWait1,
                CloseWait => LastAck,
                state => state,
            };
        }
    }

    // The receiver, in the order of RFC 9293 3.10.7.
    if f.rst() {
        // 3.10.7.2: LISTEN ignores a RST; 3.10.7.3 and 3.10.7.4 (second check): others close.
        if rcv.state != Listen {
            rcv.state = Closed;
        }
        return;
    }
    if f.syn() && !f.ack() {
        // 3.10.7.2 LISTEN, 3.10.7.3 SYN-SENT (simultaneous open): a SYN moves to SYN-RECEIVED.
        if matches!(rcv.state, Listen | SynSent) {
            rcv.state = SynReceived;
        }
    }
    if f.ack() {
        // 3.10.7.3 SYN-SENT with SYN|ACK; 3.10.7.4 fifth check (the ACK field) otherwise.
        // A SYN not seen in the capture is taken as acknowledged.
        let acks_syn = rcv.syn.is_none_or(|isn| p.ack.after(isn));
        let acks_fin = rcv.fin.is_some_and(|fin| p.ack.after(fin));
        rcv.state = match rcv.state {
            SynSent if f.syn() && acks_syn => Established,
            SynReceived if acks_syn => Established,
            FinWait1 if acks_fin => FinWait2,
            Closing if acks_fin => TimeWait,
            LastAck if acks_fin => Closed,
            state => state,
        };
    }
    // 3.10.7.4 eighth check: a FIN takes effect once everything before it has arrived.
    if f.fin() || snd.fin_pending {
        if snd.holes.is_empty() {
            snd.fin_pending = false;
            rcv.state = match rcv.state {
                SynReceived | Established => CloseWait,
                FinWait1 => Closing,
                FinWait2 => TimeWait,
                state => state,
            };
        } else {
            snd.fin_pending = true;
        }
    }
}

/// Follows every conversation of a capture, in order of first appearance.
#[derive(Default)]
pub struct Tracker {
    conversations: Vec<Builder>,
    by_addresses: HashMap<(SocketAddr, SocketAddr), usize>,
}

impl Tracker {
    /// Add the next segment of the capture.
    pub fn push(&mut self, p: &TcpPacket) {
        let key = if p.src <= p.dst { (p.src, p.dst) } else { (p.dst, p.src) };
        let index = match self.by_addresses.get(&key) {
            Some(&i) if !self.conversations[i].is_new_connection(p) => i,
            _ => {
                self.conversations.push(Builder::new(p));
                self.by_addresses.insert(key, self.conversations.len() - 1);
                self.conversations.len() - 1
            }
        };
        self.conversations[index].push(p);
    }

    /// Return the conversations.
    pub fn finish(self) -> Vec<Conversation> {
        self.conversations.into_iter().map(Builder::finish).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filling_holes_splits_and_removes_them() {
        let mut side = Side::new(State::Established);
        side.holes = vec![(SeqNum(100), SeqNum(200)), (SeqNum(u32::MAX - 10), SeqNum(10))];
        assert!(!side.fill_holes(SeqNum(200), SeqNum(300)));
        assert!(side.fill_holes(SeqNum(120), SeqNum(150)));
        assert!(side.fill_holes(SeqNum(u32::MAX - 20), SeqNum(5)));
        assert_eq!(side.holes, [(SeqNum(100), SeqNum(120)), (SeqNum(150), SeqNum(200)), (SeqNum(5), SeqNum(10))]);
    }
}
