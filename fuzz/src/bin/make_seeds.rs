//! Write the seed corpora: `seeds/stack_frame/seed-*` and `seeds/tcp_segment/seed-*`.
//!
//! Run from `fuzz/`: `cargo run --bin make_seeds`. The stack seeds are conversations a
//! peer (10.0.0.1, port 40000) has with the fuzzed host (10.0.0.2, echo on port 7), built
//! with etherparse's `PacketBuilder`. Each is played against the same [`Host`] the fuzz
//! target runs, so every ACK acknowledges the host's real ISN and echoed data: the
//! fuzzer starts from inputs that already reach ESTABLISHED, data transfer and closing.
//! The TCP seeds are the TCP segments of those conversations, both directions.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use bypass_fuzz::host::{ECHO_PORT, HOST_IP, HOST_MAC, Host, UNLIMITED, record};
use bypass_tcp::wire::set_checksum;
use bypass_tcp::{Flags, SackBlock, SackBlocks, Segment, SeqNum, TcpOptions, Timestamps};
use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, IpNumber, Ipv4HeaderSlice, PacketBuilder,
    PacketBuilderStep, TcpHeader, TcpOptionElement,
};

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_PORT: u16 = 40000;
const WINDOW: u16 = 64240;

/// Step bytes (see `bypass_fuzz::host::step`).
const MS_1: u8 = 0x01;
const MS_10: u8 = 0x0a;
const S_1: u8 = 0x81;
const S_3: u8 = 0x83;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut stack: Vec<(String, Vec<u8>)> =
        vec![("arp-request".into(), arp_request()), ("icmp-echo".into(), icmp_echo())];
    let mut tcp: Vec<(String, Vec<u8>)> = Vec::new();
    let conversations: [(&str, Conversation); 5] = [
        ("tcp-echo", tcp_echo),
        ("tcp-reset", tcp_reset),
        ("tcp-out-of-order", tcp_out_of_order),
        ("tcp-retransmit", tcp_retransmit),
        ("tcp-no-listener", tcp_no_listener),
    ];
    for (name, conversation) in conversations {
        let mut segments = Vec::new();
        stack.push((name.into(), conversation(&mut segments)));
        for (i, (mode, src, dst, bytes)) in segments.iter().enumerate() {
            let seg = Segment::parse(bytes, *src, *dst).expect("seed segments parse");
            let from = if *src == IpAddr::V4(HOST_IP) { "host" } else { "peer" };
            let label = format!("{name}-{i:02}-{from}-{}", seg.flags).replace('|', "-");
            tcp.push((label, segment_input(*mode, *src, *dst, bytes)));
        }
    }
    stack.push(("all".into(), [arp_request(), icmp_echo(), tcp_echo(&mut Vec::new())].concat()));
    tcp.push(("v6-sack".into(), v6_sack()));
    tcp.push(("sack-dropped".into(), sack_dropped()));
    tcp.push(("unknown-option".into(), unknown_option()));
    write_dir(&root.join("stack_frame"), &stack);
    write_dir(&root.join("tcp_segment"), &tcp);
}

/// Replace `dir`'s `seed-*` files with `seeds`.
fn write_dir(dir: &Path, seeds: &[(String, Vec<u8>)]) {
    fs::create_dir_all(dir).unwrap();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-")) {
            fs::remove_file(path).unwrap();
        }
    }
    for (name, data) in seeds {
        fs::write(dir.join(format!("seed-{name}")), data).unwrap();
    }
    println!("{}: {} seeds", dir.display(), seeds.len());
}

// ---- link and network layer seeds ----

fn arp_request() -> Vec<u8> {
    let arp = ArpEthIpv4Packet {
        operation: ArpOperation::REQUEST,
        sender_mac: PEER_MAC,
        sender_ipv4: PEER_IP.octets(),
        target_mac: [0; 6],
        target_ipv4: HOST_IP.octets(),
    };
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, [0xff; 6]).arp(arp.into()).write(&mut frame).unwrap();
    let mut host = Host::new();
    host.step(MS_1, UNLIMITED, &frame);
    assert_eq!(host.interface().counters().arp_replies, 1, "ARP request not answered");
    record(MS_1, UNLIMITED, &frame)
}

fn icmp_echo() -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
        .ipv4(PEER_IP.octets(), HOST_IP.octets(), 64)
        .icmpv4_echo_request(0x1234, 1)
        .write(&mut frame, b"ping payload")
        .unwrap();
    let mut host = Host::new();
    host.step(MS_1, UNLIMITED, &frame);
    assert_eq!(host.interface().counters().icmp_echo_replies, 1, "echo request not answered");
    record(MS_1, UNLIMITED, &frame)
}

// ---- TCP conversations ----

/// One TCP segment for the TCP seeds: mode byte, source, destination, segment bytes.
type SegmentSeed = (u8, IpAddr, IpAddr, Vec<u8>);

/// A conversation: return its `stack_frame` input, and add its segments to the argument.
type Conversation = fn(&mut Vec<SegmentSeed>) -> Vec<u8>;

/// The peer's side of a conversation with the host, and the input it adds up to.
struct Peer {
    host: Host,
    input: Vec<u8>,
    port: u16,
    /// Our next sequence number.
    seq: u32,
    /// The host's next sequence number, once its SYN-ACK was seen.
    ack: Option<u32>,
    tsval: u32,
    ts_recent: u32,
    /// Payloads of the host's segments to us, in order sent.
    received: Vec<Vec<u8>>,
    /// Flags of the host's segments to us, in order sent.
    flags: Vec<Flags>,
    segments: Vec<SegmentSeed>,
}

impl Peer {
    fn new(port: u16) -> Peer {
        let mut host = Host::new();
        host.keep_frames();
        Peer {
            host,
            input: Vec::new(),
            port,
            seq: 0x1000_0000,
            ack: None,
            tsval: 1000,
            ts_recent: 0,
            received: Vec::new(),
            flags: Vec::new(),
            segments: Vec::new(),
        }
    }

    /// Start a segment at `seq`, acknowledging what we have seen of the host.
    fn tcp(&self, seq: u32) -> PacketBuilderStep<TcpHeader> {
        let b = PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
            .ipv4(PEER_IP.octets(), HOST_IP.octets(), 64)
            .tcp(PEER_PORT, self.port, seq, WINDOW);
        match self.ack {
            Some(ack) => b.ack(ack),
            None => b,
        }
    }

    /// Send the SYN: MSS 1460, SACK-permitted, timestamps, window scale 7.
    fn syn(&mut self, step: u8) {
        let opts = [
            TcpOptionElement::MaximumSegmentSize(1460),
            TcpOptionElement::SelectiveAcknowledgementPermitted,
            TcpOptionElement::Timestamp(self.tsval, 0),
            TcpOptionElement::Noop,
            TcpOptionElement::WindowScale(7),
        ];
        let b = self.tcp(self.seq).syn().options(&opts).unwrap();
        self.send(step, b, b"", 1);
    }

    /// Send a segment at `seq` with `payload`, timestamps, and the flags `build` sets (ACK
    /// is set once the host's SYN was seen); our sequence number is left to the caller.
    fn send_at(
        &mut self,
        step: u8,
        seq: u32,
        build: impl FnOnce(PacketBuilderStep<TcpHeader>) -> PacketBuilderStep<TcpHeader>,
        payload: &[u8],
    ) {
        let b = build(self.tcp(seq));
        let b = b.options(&[TcpOptionElement::Noop, TcpOptionElement::Noop, self.timestamps()]).unwrap();
        self.send(step, b, payload, 0);
    }

    fn timestamps(&self) -> TcpOptionElement {
        TcpOptionElement::Timestamp(self.tsval, self.ts_recent)
    }

    /// Send data (PSH) from our sequence number and advance it.
    fn data(&mut self, step: u8, payload: &[u8]) {
        let seq = self.seq;
        self.send_at(step, seq, |b| b.psh(), payload);
        self.seq = self.seq.wrapping_add(payload.len() as u32);
    }

    /// Send a bare ACK.
    fn ack(&mut self, step: u8) {
        let seq = self.seq;
        self.send_at(step, seq, |b| b, b"");
    }

    /// Send FIN and advance our sequence number past it.
    fn fin(&mut self, step: u8) {
        let seq = self.seq;
        self.send_at(step, seq, |b| b.fin(), b"");
        self.seq = self.seq.wrapping_add(1);
    }

    /// Send RST.
    fn rst(&mut self, step: u8) {
        let seq = self.seq;
        self.send_at(step, seq, |b| b.rst(), b"");
    }

    /// Let time pass with no frame (an empty record).
    fn wait(&mut self, step: u8) {
        self.input.extend(record(step, UNLIMITED, &[]));
        self.host.step(step, UNLIMITED, &[]);
        self.learn();
    }

    fn send(&mut self, step: u8, b: PacketBuilderStep<TcpHeader>, payload: &[u8], advance: u32) {
        let mut frame = Vec::new();
        b.write(&mut frame, payload).unwrap();
        self.keep_segment(&frame);
        self.input.extend(record(step, UNLIMITED, &frame));
        self.host.step(step, UNLIMITED, &frame);
        self.seq = self.seq.wrapping_add(advance);
        self.tsval = self.tsval.wrapping_add(u32::from(step & 0x3f).max(1));
        self.learn();
    }

    /// Read the host's frames: track its sequence number, timestamps and payloads.
    fn learn(&mut self) {
        for frame in self.host.take_frames() {
            let Some((seg_bytes, src, dst)) = tcp_of(&frame) else { continue };
            let seg = Segment::parse(seg_bytes, src, dst).expect("host frames are checked");
            if seg.dst_port != PEER_PORT {
                continue;
            }
            self.segments.push((0, src, dst, seg_bytes.to_vec()));
            let end = seg.seq.0.wrapping_add(seg.seg_len());
            let newer = self.ack.is_none_or(|ack| (end.wrapping_sub(ack) as i32) > 0);
            if newer && !seg.flags.rst() {
                self.ack = Some(end);
            }
            if let Some(ts) = seg.options.timestamps {
                self.ts_recent = ts.tsval;
            }
            self.received.push(seg.payload.to_vec());
            self.flags.push(seg.flags);
        }
    }

    fn keep_segment(&mut self, frame: &[u8]) {
        if let Some((seg, src, dst)) = tcp_of(frame) {
            self.segments.push((2, src, dst, seg.to_vec()));
        }
    }

    fn saw(&self, flags: Flags) -> bool {
        self.flags.iter().any(|f| f.contains(flags))
    }

    fn echoed(&self) -> Vec<u8> {
        self.received.concat()
    }

    fn finish(self, into: &mut Vec<SegmentSeed>) -> Vec<u8> {
        into.extend(self.segments);
        self.input
    }
}

/// Return the TCP segment of an Ethernet/IPv4 frame and its addresses.
fn tcp_of(frame: &[u8]) -> Option<(&[u8], IpAddr, IpAddr)> {
    let (eth, payload) = Ethernet2Header::from_slice(frame).ok()?;
    if eth.ether_type != EtherType::IPV4 {
        return None;
    }
    let ip = Ipv4HeaderSlice::from_slice(payload).ok()?;
    if ip.protocol() != IpNumber::TCP {
        return None;
    }
    let body = &payload[ip.slice().len()..usize::from(ip.total_len())];
    Some((body, ip.source_addr().into(), ip.destination_addr().into()))
}

/// Handshake, "hello" echoed, our FIN, the host's FIN, our last ACK.
fn tcp_echo(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    let mut p = Peer::new(ECHO_PORT);
    p.syn(MS_1);
    assert!(p.saw(Flags::SYN | Flags::ACK), "no SYN-ACK");
    p.ack(MS_1);
    assert_eq!(p.host.served().len(), 1, "handshake did not complete");
    p.data(MS_1, b"hello");
    assert_eq!(p.echoed(), b"hello", "no echo");
    p.ack(MS_10);
    p.fin(MS_1);
    assert!(p.saw(Flags::FIN), "host did not close after our FIN");
    p.ack(MS_1);
    p.finish(out)
}

/// Handshake, data, then RST.
fn tcp_reset(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    let mut p = Peer::new(ECHO_PORT);
    p.syn(MS_1);
    p.ack(MS_1);
    p.data(MS_1, b"abc");
    p.rst(MS_1);
    assert!(p.host.served().is_empty(), "host still serves a reset connection");
    p.finish(out)
}

/// Handshake, the second half of the data first (SACKed), the first half twice, FIN.
fn tcp_out_of_order(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    let mut p = Peer::new(ECHO_PORT);
    p.syn(MS_1);
    p.ack(MS_1);
    let start = p.seq;
    p.send_at(MS_1, start.wrapping_add(5), |b| b.psh(), b"world");
    assert!(p.echoed().is_empty(), "out-of-order data delivered early");
    p.send_at(MS_1, start, |b| b.psh(), b"hello");
    p.send_at(MS_1, start, |b| b.psh(), b"hello");
    p.seq = start.wrapping_add(10);
    assert_eq!(p.echoed(), b"helloworld", "reassembly");
    p.ack(MS_1);
    p.fin(MS_1);
    p.ack(MS_1);
    p.finish(out)
}

/// Handshake and data, then silence while the host retransmits its echo, then the ACK.
fn tcp_retransmit(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    let mut p = Peer::new(ECHO_PORT);
    p.syn(MS_1);
    p.ack(MS_1);
    p.data(MS_1, b"retransmit me");
    let sent = p.received.len();
    p.wait(S_1);
    p.wait(S_3);
    assert!(p.received.len() > sent, "no retransmission");
    p.ack(MS_1);
    p.fin(MS_1);
    p.ack(MS_1);
    p.finish(out)
}

/// A SYN to a closed port and an ACK to the listener that matches no SYN cookie: both reset.
fn tcp_no_listener(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    let mut p = Peer::new(9);
    p.syn(MS_1);
    assert!(p.saw(Flags::RST), "no reset from a closed port");
    let mut q = Peer::new(ECHO_PORT);
    q.ack = Some(0x5555_5555);
    q.ack(MS_1);
    assert!(q.saw(Flags::RST), "no reset for a bad cookie");
    let mut input = p.finish(out);
    input.extend(q.finish(out));
    input
}

// ---- TCP segment seeds ----

/// Return a `tcp_segment` input: mode byte, addresses, segment.
fn segment_input(mode: u8, src: IpAddr, dst: IpAddr, segment: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(mode & !1);
            out.extend(s.octets());
            out.extend(d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.push(mode | 1);
            out.extend(s.octets());
            out.extend(d.octets());
        }
        _ => unreachable!("seeds use one family"),
    }
    out.extend_from_slice(segment);
    out
}

/// An IPv6 ACK with timestamps and three SACK blocks (all fit) and a payload.
fn v6_sack() -> Vec<u8> {
    let src = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let dst = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let mut blocks = SackBlocks::new();
    for (l, r) in [(100, 200), (300, 400), (500, 600)] {
        blocks.push(SackBlock { left: SeqNum(l), right: SeqNum(r) });
    }
    let seg = Segment {
        src_port: 443,
        dst_port: 50000,
        seq: SeqNum(7),
        ack: SeqNum(99),
        flags: Flags::ACK | Flags::PSH,
        window: 1000,
        options: TcpOptions {
            sack_blocks: blocks,
            timestamps: Some(Timestamps { tsval: 1, tsecr: 2 }),
            ..TcpOptions::NONE
        },
        payload: b"data",
        ..Segment::EMPTY
    };
    let mut buf = [0; 128];
    let n = seg.emit(src, dst, &mut buf).unwrap();
    segment_input(1, src, dst, &buf[..n])
}

/// MSS, timestamps and three SACK blocks packed without NOPs (40 option bytes): emit keeps
/// only two blocks next to the padded MSS and timestamps.
fn sack_dropped() -> Vec<u8> {
    let (src, dst) = (IpAddr::V4(PEER_IP), IpAddr::V4(HOST_IP));
    #[rustfmt::skip]
    let mut seg = vec![
        0x9c, 0x40, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 0, 2, 0xf0, 0x10, 0x10, 0x00, 0, 0, 0, 0,
        2, 4, 0x05, 0xb4, // MSS
        8, 10, 0, 0, 0, 1, 0, 0, 0, 2, // timestamps
        5, 26, 0, 0, 0, 10, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0, 40, 0, 0, 0, 50, 0, 0, 0, 60, // 3 blocks
    ];
    assert_eq!(seg.len(), 60);
    set_checksum(&mut seg, src, dst).unwrap();
    segment_input(2, src, dst, &seg)
}

/// An unknown option kind (30, length 4) before the MSS: skipped, not written back.
fn unknown_option() -> Vec<u8> {
    let (src, dst) = (IpAddr::V4(PEER_IP), IpAddr::V4(HOST_IP));
    #[rustfmt::skip]
    let mut seg = vec![
        0x9c, 0x40, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 0, 0, 0x70, 0x02, 0x10, 0x00, 0, 0, 0, 0,
        30, 4, 0xab, 0xcd, 2, 4, 0x05, 0xb4,
    ];
    set_checksum(&mut seg, src, dst).unwrap();
    segment_input(0, src, dst, &seg)
}
