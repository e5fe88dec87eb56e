//! Replay: play one side of a recorded TCP conversation against our stack in the other role,
//! on virtual time, and check that our replies match what the recorded peer answered.
//!
//! The capture's first TCP conversation is split into the side we replay (its segments are
//! fed to our stack at their recorded spacing) and the side we play (its segments are what
//! we expect to send). Our ISN differs from the recorded one, so acknowledgment numbers of
//! the replayed side are rewritten to follow ours. Our application is scripted from the
//! recording too: it writes what the recorded side sent, when it sent it, and closes or
//! aborts when the recorded side did.
//!
//! Our replies are compared with the recorded ones on what TCP promises, not on accidents of
//! timing: the handshake's flags and options (window scale, MSS, SACK-permitted where the
//! recording had them), every SYN, FIN and RST with its relative sequence and acknowledgment
//! numbers, and the bytes of data in order. Pure ACKs may differ in number (delayed-ACK
//! policies differ between stacks) but the last acknowledgment must match.
//!
//! [`play_into_stack`] plays a whole capture, frames of any kind, into a listening stack.
//! Both run the stack on a [`ScriptedDevice`] on virtual time: recorded frames go into its
//! inbox, what the stack sends is kept with the time it left, and in a replay the device
//! answers our ARP requests and Neighbour Solicitations for the recorded peer.

use std::fmt::{self, Write as _};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bypass_device::{Capture, CaptureFile, DeviceInfo, Instant, ScriptedDevice};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::{Flags, Segment, SeqNum, TcpOptions};
use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, NetSlice, SlicedPacket, TransportSlice,
};

const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xbb, 0x02];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xbb, 0x01];

/// Which side of the conversation our stack plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// We are the server (the side that received the first SYN).
    Server,
    /// We are the client (the side that sent the first SYN).
    Client,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No TCP conversation starting with a SYN.
    #[error("the capture holds no TCP conversation that starts with a SYN; nothing to replay")]
    NoConversation,
    /// The stack failed.
    #[error("the stack failed during the replay: {0}")]
    Stack(#[from] io::Error),
}

/// One recorded TCP segment of the conversation.
#[derive(Clone, Debug)]
struct Recorded {
    at: Duration,
    from_client: bool,
    flags: Flags,
    seq: SeqNum,
    ack: SeqNum,
    window: u16,
    options: TcpOptions,
    payload: Vec<u8>,
}

impl Recorded {
    /// Return SEG.LEN: data plus one each for SYN and FIN.
    fn seg_len(&self) -> u32 {
        self.payload.len() as u32 + self.flags.syn() as u32 + self.flags.fin() as u32
    }
}

/// One row of a ladder: a segment as relative numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Time since the conversation started.
    pub at: Duration,
    /// Control bits.
    pub flags: Flags,
    /// Sequence number relative to the sender's ISN.
    pub seq: u32,
    /// Acknowledgment number relative to the receiver's ISN (when ACK is set).
    pub ack: Option<u32>,
    /// Payload length.
    pub len: usize,
    /// Options, as a ladder shows them.
    pub options: String,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9.3}ms [{}] seq={}", self.at.as_secs_f64() * 1000.0, self.flags, self.seq)?;
        if let Some(ack) = self.ack {
            write!(f, " ack={ack}")?;
        }
        write!(f, " len={}", self.len)?;
        if !self.options.is_empty() {
            write!(f, " {}", self.options)?;
        }
        Ok(())
    }
}

/// What a replay found.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    /// The role we played.
    pub role: Role,
    /// The conversation: (client, server).
    pub endpoints: (SocketAddr, SocketAddr),
    /// What the recorded side sent, relative to its ISN.
    pub expected: Vec<Row>,
    /// What our stack sent, relative to our ISN.
    pub actual: Vec<Row>,
    /// Differences that matter; empty when our replies match.
    pub mismatches: Vec<String>,
}

impl ReplayReport {
    /// Return whether our replies matched the recording.
    pub fn matched(&self) -> bool {
        self.mismatches.is_empty()
    }

    /// Return the two ladders side by side, recorded on the left, ours on the right.
    pub fn side_by_side(&self) -> String {
        let width = self.expected.iter().map(|r| r.to_string().len()).max().unwrap_or(0).clamp(30, 70);
        let mut out = String::new();
        let _ = writeln!(out, "{:<width$} | ours", "recorded");
        let _ = writeln!(out, "{:-<width$}-+-{:-<width$}", "", "");
        for i in 0..self.expected.len().max(self.actual.len()) {
            let left = self.expected.get(i).map(|r| r.to_string()).unwrap_or_default();
            let right = self.actual.get(i).map(|r| r.to_string()).unwrap_or_default();
            let mark = if left.is_empty() || right.is_empty() || !same_shape(&self.expected[i], &self.actual[i]) {
                '*'
            } else {
                '|'
            };
            let _ = writeln!(out, "{left:<width$} {mark} {right}");
        }
        out
    }
}

fn same_shape(a: &Row, b: &Row) -> bool {
    a.flags.without(Flags::PSH) == b.flags.without(Flags::PSH) && a.seq == b.seq && a.ack == b.ack && a.len == b.len
}

/// Return the source and destination addresses of an IPv4 or IPv6 packet.
fn addresses(net: &NetSlice<'_>) -> Option<(IpAddr, IpAddr)> {
    match net {
        NetSlice::Ipv4(ip) => Some((ip.header().source_addr().into(), ip.header().destination_addr().into())),
        NetSlice::Ipv6(ip) => Some((ip.header().source_addr().into(), ip.header().destination_addr().into())),
        _ => None,
    }
}

/// Extract the first TCP conversation (IPv4 or IPv6) that starts with a SYN.
fn conversation(file: &CaptureFile) -> Option<((SocketAddr, SocketAddr), Vec<Recorded>)> {
    let mut endpoints: Option<(SocketAddr, SocketAddr)> = None;
    let mut t0 = None;
    let mut segments = Vec::new();
    for frame in &file.frames {
        let Ok(packet) = SlicedPacket::from_ethernet(&frame.data) else { continue };
        let Some((src_ip, dst_ip)) = packet.net.as_ref().and_then(addresses) else { continue };
        let Some(TransportSlice::Tcp(tcp)) = packet.transport else { continue };
        let Ok(seg) = Segment::parse_unchecked(tcp.slice()) else { continue };
        let src = SocketAddr::new(src_ip, seg.src_port);
        let dst = SocketAddr::new(dst_ip, seg.dst_port);
        let (client, server) = match endpoints {
            None if seg.flags.syn() && !seg.flags.ack() => {
                endpoints = Some((src, dst));
                t0 = Some(frame.timestamp);
                (src, dst)
            }
            None => continue,
            Some(e) => e,
        };
        let from_client = (src, dst) == (client, server);
        if !from_client && (src, dst) != (server, client) {
            continue;
        }
        segments.push(Recorded {
            at: frame.timestamp.saturating_sub(t0.unwrap_or_default()),
            from_client,
            flags: seg.flags,
            seq: seg.seq,
            ack: seg.ack,
            window: seg.window,
            options: seg.options,
            payload: seg.payload.to_vec(),
        });
    }
    endpoints.map(|e| (e, segments))
}

/// Answer our ARP requests and Neighbour Solicitations for the peer, as the recorded peer's
/// host would (the replay device's responder).
fn neighbour_reply(frame: &[u8], peer_ip: IpAddr) -> Option<Vec<u8>> {
    arp_reply(frame, peer_ip).or_else(|| ndp_reply(frame, peer_ip))
}

fn arp_reply(frame: &[u8], peer_ip: IpAddr) -> Option<Vec<u8>> {
    let IpAddr::V4(peer_ip) = peer_ip else { return None };
    if frame.len() < 42 || frame[12..14] != [0x08, 0x06] {
        return None;
    }
    let msg = bypass_stack::wire::arp::parse(&frame[14..])?;
    if msg.operation != etherparse::ArpOperation::REQUEST || msg.target_ip != peer_ip {
        return None;
    }
    let mut reply = vec![0u8; bypass_stack::wire::arp::ARP_FRAME_LEN];
    bypass_stack::wire::arp::write_frame(
        &mut reply,
        etherparse::ArpOperation::REPLY,
        PEER_MAC,
        peer_ip,
        msg.sender_mac,
        msg.sender_ip,
    );
    Some(reply)
}

/// Answer a Neighbour Solicitation of ours for the peer with the peer's advertisement.
fn ndp_reply(frame: &[u8], peer_ip: IpAddr) -> Option<Vec<u8>> {
    use bypass_stack::wire::ndp;
    let IpAddr::V6(peer_ip) = peer_ip else { return None };
    let packet = SlicedPacket::from_ethernet(frame).ok()?;
    let NetSlice::Ipv6(ip) = packet.net? else { return None };
    let (src, dst, hop) = (ip.header().source_addr(), ip.header().destination_addr(), ip.header().hop_limit());
    let ndp::NdpMessage::NeighborSolicitation(ns) = ndp::parse(src, dst, hop, ip.payload().payload).ok()? else {
        return None;
    };
    if ns.target != peer_ip {
        return None;
    }
    let mut reply = vec![0u8; ndp::NDP_FRAME_LEN];
    let flags = ndp::NaFlags { router: false, solicited: true, r#override: true };
    let n = ndp::write_advertisement(&mut reply, PEER_MAC, peer_ip, OUR_MAC, src, peer_ip, flags);
    reply.truncate(n);
    Some(reply)
}

/// Build an Ethernet/IP/TCP frame from the peer to us (IPv4 or IPv6, as the addresses are).
fn frame(src: SocketAddr, dst: SocketAddr, seg: &Segment<'_>) -> Vec<u8> {
    let tcp_len = seg.header_len() + seg.payload.len();
    let headers = if src.is_ipv4() { 34 } else { 54 };
    let mut out = vec![0u8; headers + tcp_len];
    let ether_type = if src.is_ipv4() { EtherType::IPV4 } else { EtherType::IPV6 };
    let eth = Ethernet2Header { source: PEER_MAC, destination: OUR_MAC, ether_type };
    out[..14].copy_from_slice(&eth.to_bytes());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = Ipv4Header::new(tcp_len as u16, 64, IpNumber::TCP, s.octets(), d.octets())
                .expect("a recorded segment fits IPv4");
            ip.header_checksum = ip.calc_header_checksum();
            out[14..34].copy_from_slice(&ip.to_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: tcp_len as u16,
                next_header: IpNumber::TCP,
                hop_limit: 64,
                source: s.octets(),
                destination: d.octets(),
            };
            out[14..54].copy_from_slice(&ip.to_bytes());
        }
        _ => unreachable!("a conversation's addresses are of one family"),
    }
    let n = seg.emit(src.ip(), dst.ip(), &mut out[headers..]).expect("sized above");
    out.truncate(headers + n);
    out
}

/// Replay `file`'s first TCP conversation with our stack as `role`. `capture`, if given,
/// records what our stack received and sent.
pub fn replay(file: &CaptureFile, role: Role, capture: Option<Box<dyn Capture>>) -> Result<ReplayReport, ReplayError> {
    let ((client, server), recorded) = conversation(file).ok_or(ReplayError::NoConversation)?;
    let (us, peer) = match role {
        Role::Server => (server, client),
        Role::Client => (client, server),
    };
    let ours_is_client = role == Role::Client;
    // Our side's recorded ISN; `None` when it never sent a SYN (a refused connection, say).
    let rec_our_isn = recorded.iter().find(|r| r.from_client == ours_is_client && r.flags.syn()).map(|r| r.seq);
    // Frames to deliver, frames sent, and ARP and Neighbour Discovery answered for the peer.
    let peer_ip = peer.ip();
    let device = ScriptedDevice::new(DeviceInfo::new("replay", OUR_MAC, 1500, "replay of a capture"))
        .with_responder(move |frame| neighbour_reply(frame, peer_ip));
    let prefix = if us.is_ipv4() { 24 } else { 64 };
    let mut config = StackConfig::new(us.ip(), prefix, [0x42; 16]);
    // Match the recorded handshake's options where we can.
    let our_syn = recorded.iter().find(|r| r.from_client == ours_is_client && r.flags.syn());
    if let Some(syn) = our_syn {
        if let Some(mss) = syn.options.mss {
            config.tcp.mss = mss;
        }
        config.tcp.window_scaling = syn.options.window_scale.is_some();
        config.tcp.sack = syn.options.sack_permitted;
    }
    // Like a Linux peer: acknowledge at once rather than after a delay, so ACKs line up.
    config.tcp.delayed_ack = None;
    config.tcp.nagle = false;
    let mut stack = Stack::new(device, config);
    stack.set_time(Instant::ZERO);
    if let Some(capture) = capture {
        stack.set_capture(capture);
    }
    // Only a server that answered the SYN was listening.
    let listening = role == Role::Server && recorded.iter().any(|r| !r.from_client && r.flags.syn());
    let listener = if listening { Some(stack.listen(us.port()).map_err(io::Error::other)?) } else { None };
    let mut socket = None;
    let mut established_once = false;

    let mut now = Duration::ZERO;
    // Order the events causally. A capture taken at one end shows the other end's segments
    // a one-way delay late, so when our side's segment did not acknowledge something the
    // peer had already sent (crossing FINs, say), our side acted before that arrived: play
    // it first.
    let mut order: Vec<(Duration, usize, u8, usize)> = recorded
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if r.from_client == ours_is_client && r.flags.ack() {
                let unseen = recorded[..i].iter().position(|p| {
                    p.from_client != ours_is_client && p.seg_len() > 0 && (p.seq + p.seg_len()).after(r.ack)
                });
                if let Some(j) = unseen {
                    return (recorded[j].at, j, 0, i);
                }
            }
            (r.at, i, 1, i)
        })
        .collect();
    order.sort();
    // The recorded sequence number of the next byte our application has not written yet.
    let mut app_next: Option<SeqNum> = None;
    for (at, _, _, i) in order {
        let r = &recorded[i];
        advance(&mut stack, &mut now, at)?;
        if let Some(l) = listener
            && socket.is_none()
        {
            socket = stack.accept(l);
        }
        if r.from_client == ours_is_client {
            // Our side acted here: do what its application did.
            if r.flags.syn() && !r.flags.ack() && ours_is_client && socket.is_none() {
                socket = Some(stack.connect_from(us.port(), peer).map_err(io::Error::other)?);
            }
            if let Some(id) = socket {
                // Write each recorded byte once: retransmissions carry nothing new.
                let from = match app_next {
                    Some(next) if next.after(r.seq) => ((next - r.seq) as usize).min(r.payload.len()),
                    _ => 0,
                };
                if from < r.payload.len() {
                    let _ = stack.write(id, &r.payload[from..]);
                    app_next = Some(r.seq + r.payload.len());
                }
                if r.flags.fin() {
                    stack.shutdown(id);
                }
                if r.flags.rst() && established_once {
                    stack.abort(id);
                    socket = None;
                }
            }
            stack.poll()?;
            continue;
        }
        // The replayed side: rewrite its ACK to our ISN and deliver.
        let our_iss = our_isn(&stack, socket);
        let ack = match (r.flags.ack(), rec_our_isn, our_iss) {
            (true, Some(rec), Some(ours)) => ours + (r.ack - rec),
            _ => r.ack,
        };
        let seg = Segment {
            src_port: peer.port(),
            dst_port: us.port(),
            seq: r.seq,
            ack,
            flags: r.flags,
            window: r.window,
            urgent: 0,
            options: r.options,
            payload: &r.payload,
        };
        stack.device_mut().push_rx(frame(peer, us, &seg));
        stack.poll()?;
        if let Some(l) = listener
            && socket.is_none()
        {
            socket = stack.accept(l);
        }
        if socket.is_some_and(|id| stack.state(id) != bypass_tcp::State::SynSent) {
            established_once = true;
        }
        // Read what arrives, as the recorded application did (it may be slow: we are not).
        if let Some(id) = socket {
            let mut sink = [0u8; 65536];
            while let Ok(1..) = stack.read(id, &mut sink) {}
        }
    }
    // Let the conversation settle: a second of virtual time for final ACKs and closes.
    let end = now + Duration::from_secs(1);
    advance(&mut stack, &mut now, end)?;

    let sent = stack.device_mut().take_sent();
    let our_rows = rows_from_frames(&sent, us, peer);
    let peer_isn = recorded.iter().find(|r| r.from_client != ours_is_client && r.flags.syn()).map(|r| r.seq);
    let expected = relative_rows(recorded.iter().filter(|r| r.from_client == ours_is_client), rec_our_isn, peer_isn);
    let actual = relative_rows(our_rows.iter(), our_rows.iter().find(|r| r.flags.syn()).map(|r| r.seq), peer_isn);
    let mismatches = compare(&recorded, ours_is_client, &our_rows, &expected, &actual);
    Ok(ReplayReport { role, endpoints: (client, server), expected, actual, mismatches })
}

/// Return `d` after the replay's start as the stack's and the device's time.
fn at(d: Duration) -> Instant {
    Instant::from_micros(d.as_micros() as u64)
}

/// Run the stack's timers up to `to` on virtual time, then arrive there.
fn advance(stack: &mut Stack<ScriptedDevice>, now: &mut Duration, to: Duration) -> io::Result<()> {
    loop {
        stack.set_time(at(*now));
        stack.device_mut().set_time(at(*now));
        stack.poll()?;
        match stack.poll_timeout().map(|t| Duration::from_micros(t.as_micros())) {
            Some(next) if next > *now && next <= to => *now = next,
            _ => break,
        }
    }
    *now = (*now).max(to);
    stack.set_time(at(*now));
    stack.device_mut().set_time(at(*now));
    stack.poll()?;
    Ok(())
}

fn our_isn(stack: &Stack<ScriptedDevice>, socket: Option<bypass_stack::SocketId>) -> Option<SeqNum> {
    // The ISN we chose is in our first SYN on the wire.
    let _ = socket;
    stack.device().sent().iter().find_map(|(_, f)| {
        let packet = SlicedPacket::from_ethernet(f).ok()?;
        let TransportSlice::Tcp(tcp) = packet.transport? else { return None };
        let seg = Segment::parse_unchecked(tcp.slice()).ok()?;
        seg.flags.syn().then_some(seg.seq)
    })
}

/// Our sent frames as recorded segments (only those of the conversation).
fn rows_from_frames(frames: &[(Instant, Vec<u8>)], us: SocketAddr, peer: SocketAddr) -> Vec<Recorded> {
    frames
        .iter()
        .filter_map(|(at, f)| {
            let packet = SlicedPacket::from_ethernet(f).ok()?;
            let TransportSlice::Tcp(tcp) = packet.transport? else { return None };
            let seg = Segment::parse_unchecked(tcp.slice()).ok()?;
            let (_, dst_ip) = packet.net.as_ref().and_then(addresses)?;
            let dst = SocketAddr::new(dst_ip, seg.dst_port);
            (seg.src_port == us.port() && dst == peer).then(|| Recorded {
                at: Duration::from_micros(at.as_micros()),
                from_client: false,
                flags: seg.flags,
                seq: seg.seq,
                ack: seg.ack,
                window: seg.window,
                options: seg.options,
                payload: seg.payload.to_vec(),
            })
        })
        .collect()
}

fn relative_rows<'a>(
    segs: impl Iterator<Item = &'a Recorded>,
    own_isn: Option<SeqNum>,
    other_isn: Option<SeqNum>,
) -> Vec<Row> {
    segs.map(|r| Row {
        at: r.at,
        flags: r.flags,
        seq: own_isn.map_or(r.seq.0, |isn| r.seq - isn),
        ack: r.flags.ack().then(|| other_isn.map_or(r.ack.0, |isn| r.ack - isn)),
        len: r.payload.len(),
        options: if r.options.is_empty() { String::new() } else { format!("{:?}", r.options) },
    })
    .collect()
}

/// Compare what matters: control segments, the data stream, the last ACK, SYN options.
fn compare(
    recorded: &[Recorded],
    ours_is_client: bool,
    ours: &[Recorded],
    expected: &[Row],
    actual: &[Row],
) -> Vec<String> {
    let mut out = Vec::new();
    // An RST may or may not carry an ACK (Linux's abort does, RFC 9293 3.10.5's does not);
    // the reset is what matters.
    let control = |rows: &[Row]| -> Vec<(Flags, u32, Option<u32>)> {
        rows.iter()
            .filter(|r| r.flags.intersects(Flags::SYN | Flags::FIN | Flags::RST))
            .map(|r| match r.flags.rst() {
                true => (Flags::RST, r.seq, None),
                false => (r.flags.without(Flags::PSH), r.seq, r.ack),
            })
            .collect()
    };
    let (want, got) = (control(expected), control(actual));
    // Retransmitted SYNs or FINs in either ladder are not differences of behaviour.
    let dedup = |v: Vec<(Flags, u32, Option<u32>)>| {
        let mut d: Vec<(Flags, u32, Option<u32>)> = Vec::new();
        for x in v {
            if !d.iter().any(|y| y.0 == x.0 && y.1 == x.1) {
                d.push(x);
            }
        }
        d
    };
    let (want, got) = (dedup(want), dedup(got));
    if want != got {
        out.push(format!("control segments differ: recorded {}, ours {}", show(&want), show(&got)));
    }
    let stream = |segs: &mut dyn Iterator<Item = &Recorded>| -> Vec<u8> {
        let mut segs: Vec<&Recorded> = segs.filter(|r| !r.payload.is_empty()).collect();
        segs.sort_by_key(|r| r.seq.0);
        let mut bytes = Vec::new();
        let mut next: Option<SeqNum> = None;
        for r in segs {
            let start = next.map_or(0, |n| (n - r.seq) as usize);
            if start < r.payload.len() && next.is_none_or(|n| !r.seq.after(n)) {
                bytes.extend_from_slice(&r.payload[start.min(r.payload.len())..]);
                next = Some(r.seq + r.payload.len());
            }
        }
        bytes
    };
    let want_data = stream(&mut recorded.iter().filter(|r| r.from_client == ours_is_client));
    let got_data = stream(&mut ours.iter());
    if want_data != got_data {
        out.push(format!("data differs: recorded {} bytes, ours {} bytes", want_data.len(), got_data.len()));
    }
    let last_ack = |rows: &[Row]| rows.iter().rev().find(|r| r.flags.ack() && !r.flags.rst()).and_then(|r| r.ack);
    if last_ack(expected) != last_ack(actual) {
        out.push(format!(
            "last acknowledgment differs: recorded {:?}, ours {:?}",
            last_ack(expected),
            last_ack(actual)
        ));
    }
    let our_recorded_syn = recorded.iter().find(|r| r.from_client == ours_is_client && r.flags.syn());
    let our_syn = ours.iter().find(|r| r.flags.syn());
    if let (Some(want), Some(got)) = (our_recorded_syn.map(|r| r.options), our_syn.map(|r| r.options)) {
        if want.window_scale.is_some() != got.window_scale.is_some() {
            out.push(format!("window scale option: recorded {:?}, ours {:?}", want.window_scale, got.window_scale));
        }
        if want.mss.is_some() != got.mss.is_some() {
            out.push(format!("MSS option: recorded {:?}, ours {:?}", want.mss, got.mss));
        }
        if want.sack_permitted != got.sack_permitted {
            out.push(format!("SACK-permitted: recorded {}, ours {}", want.sack_permitted, got.sack_permitted));
        }
    }
    out
}

fn show(v: &[(Flags, u32, Option<u32>)]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|(f, s, a)| match a {
            Some(a) => format!("[{f}] seq={s} ack={a}"),
            None => format!("[{f}] seq={s}"),
        })
        .collect();
    parts.join(", ")
}

/// Play every frame of `file` into a stack owning `ip` (listening on `ports`) at the
/// recorded spacing, on virtual time; return the stack's counters. Any capture is safe:
/// unusable frames are counted and dropped by the stack, never a panic.
pub fn play_into_stack(file: &CaptureFile, ip: IpAddr, ports: &[u16]) -> io::Result<bypass_stack::Counters> {
    // Every frame of the capture, both directions, due at its time since the first frame;
    // frames of any kind go in as they are.
    let mut device = ScriptedDevice::new(DeviceInfo::new("replay", OUR_MAC, 1500, "replay of a capture"));
    let start = file.frames.first().map_or(Duration::ZERO, |f| f.timestamp);
    for f in &file.frames {
        device.push_rx_at(at(f.timestamp.saturating_sub(start)), f.data.clone());
    }
    let prefix = if ip.is_ipv4() { 24 } else { 64 };
    let mut stack = Stack::new(device, StackConfig::new(ip, prefix, [0x17; 16]));
    stack.set_time(Instant::ZERO);
    for &port in ports {
        let _ = stack.listen(port);
    }
    while let Some(due) = stack.device().next_rx() {
        stack.device_mut().set_time(due);
        stack.set_time(due);
        stack.poll()?;
    }
    Ok(stack.counters().clone())
}
