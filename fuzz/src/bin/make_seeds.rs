//! Write the seed corpora: `seeds/stack_frame/seed-*` and `seeds/tcp_segment/seed-*`.
//!
//! Run from `fuzz/`: `cargo run --bin make_seeds`. The stack seeds are conversations a
//! peer (10.0.0.1 or fd00::1, port 40000; fe80::1 on the link) has with the fuzzed host
//! (10.0.0.2 and fd00::2, echo on port 7), built with etherparse's `PacketBuilder` and
//! `bypass_stack::wire::ndp`'s writers: ARP, Neighbour Discovery, echo (whole and in fragments,
//! good and bad trains), a Router Advertisement, TCP, and ICMP errors about TCP. Each is
//! played against the same [`Host`] the fuzz target runs, so every ACK acknowledges the
//! host's real ISN and echoed data, and every ICMP error quotes a segment the host really
//! sent: the fuzzer starts from inputs that already reach ESTABLISHED, data transfer,
//! closing, reassembly and path MTU discovery. The TCP seeds are the TCP segments of the
//! plain conversations, both directions.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use bypass_fuzz::host::{ECHO_PORT, HOST_IP, HOST_IP6, HOST_MAC, Host, UNLIMITED, host_link_local, record};
use bypass_stack::Drop;
use bypass_stack::wire::ndp::{self, NDP_FRAME_LEN, Solicit};
use bypass_tcp::wire::set_checksum;
use bypass_tcp::{Flags, SackBlock, SackBlocks, Segment, SeqNum, TcpOptions, Timestamps};
use etherparse::icmpv4::DestUnreachableHeader;
use etherparse::icmpv6::RouterAdvertisementHeader;
use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, Icmpv4Type, Icmpv6Type, IpFragOffset, IpNumber,
    Ipv4Header, Ipv4HeaderSlice, Ipv6FlowLabel, Ipv6FragmentHeader, Ipv6Header, Ipv6HeaderSlice, PacketBuilder,
    PacketBuilderStep, TcpHeader, TcpOptionElement,
};

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
/// The peer's link-local address; it is also the router of the Router Advertisement and
/// the ICMPv6 error seeds.
const PEER_LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// A router on the IPv4 subnet, the source of the "fragmentation needed" seed.
const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const PEER_PORT: u16 = 40000;
const WINDOW: u16 = 64240;
/// The ICMP (and ICMPv6) message length of the fragmented echo requests.
const BIG_ECHO: usize = 4000;
/// The MTU the ICMP errors report (IPv6's minimum, RFC 8200 5).
const REPORTED_MTU: u16 = 1280;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const ETH_LEN: usize = 14;

/// Step bytes (see `bypass_fuzz::host::step`).
const MS_1: u8 = 0x01;
const MS_10: u8 = 0x0a;
const S_1: u8 = 0x81;
const S_3: u8 = 0x83;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut stack: Vec<(String, Vec<u8>)> = vec![
        ("arp-request".into(), arp_request()),
        ("icmp-echo".into(), icmp_echo()),
        ("ndp-solicitation".into(), ndp_solicitation()),
        ("icmpv6-echo".into(), icmpv6_echo()),
        ("icmp-echo-fragments".into(), icmp_echo_fragments()),
        ("icmpv6-echo-fragments".into(), icmpv6_echo_fragments()),
        ("ipv4-fragment-overlap".into(), ipv4_fragment_overlap()),
        ("ipv6-fragment-oversized".into(), ipv6_fragment_oversized()),
        ("router-advertisement".into(), router_advertisement()),
    ];
    let mut tcp: Vec<(String, Vec<u8>)> = Vec::new();
    let conversations: [(&str, Conversation); 6] = [
        ("tcp-echo", tcp_echo),
        ("tcp-reset", tcp_reset),
        ("tcp-out-of-order", tcp_out_of_order),
        ("tcp-retransmit", tcp_retransmit),
        ("tcp-no-listener", tcp_no_listener),
        ("tcp-echo-v6", tcp_echo_v6),
    ];
    for (name, conversation) in conversations {
        let mut segments = Vec::new();
        stack.push((name.into(), conversation(&mut segments)));
        for (i, (mode, src, dst, bytes)) in segments.iter().enumerate() {
            let seg = Segment::parse(bytes, *src, *dst).expect("seed segments parse");
            let from = if [IpAddr::V4(HOST_IP), IpAddr::V6(HOST_IP6)].contains(src) { "host" } else { "peer" };
            let label = format!("{name}-{i:02}-{from}-{}", seg.flags).replace('|', "-");
            tcp.push((label, segment_input(*mode, *src, *dst, bytes)));
        }
    }
    // ICMP errors about TCP: their TCP segments add nothing new to the `tcp_segment` seeds.
    stack.push(("icmp-frag-needed".into(), icmp_frag_needed(&mut Vec::new())));
    stack.push(("icmpv6-packet-too-big".into(), icmpv6_packet_too_big(&mut Vec::new())));
    stack.push(("all".into(), all()));
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

/// An ARP request for 10.0.0.2 from the peer.
fn arp_request() -> Vec<u8> {
    let (host, input) = play(&[arp_request_frame()]);
    assert_eq!(host.interface().counters().arp_replies, 1, "ARP request not answered");
    input
}

fn arp_request_frame() -> Vec<u8> {
    let arp = ArpEthIpv4Packet {
        operation: ArpOperation::REQUEST,
        sender_mac: PEER_MAC,
        sender_ipv4: PEER_IP.octets(),
        target_mac: [0; 6],
        target_ipv4: HOST_IP.octets(),
    };
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, [0xff; 6]).arp(arp.into()).write(&mut frame).unwrap();
    frame
}

/// An ICMP echo request from the peer.
fn icmp_echo() -> Vec<u8> {
    let (host, input) = play(&[icmp_echo_frame()]);
    assert_eq!(host.interface().counters().icmp_echo_replies, 1, "echo request not answered");
    input
}

fn icmp_echo_frame() -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
        .ipv4(PEER_IP.octets(), HOST_IP.octets(), 64)
        .icmpv4_echo_request(0x1234, 1)
        .write(&mut frame, b"ping payload")
        .unwrap();
    frame
}

/// Play `frames` against a fresh host, one record each 1 ms apart; return the host (its
/// frames kept) and the input.
fn play(frames: &[Vec<u8>]) -> (Host, Vec<u8>) {
    let mut host = Host::new();
    host.keep_frames();
    let mut input = Vec::new();
    for frame in frames {
        host.step(MS_1, UNLIMITED, frame);
        input.extend(record(MS_1, UNLIMITED, frame));
    }
    (host, input)
}

/// Return `len` bytes that are not all alike, so a misplaced fragment changes the sum.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Return a Neighbour Solicitation from `src` at [`PEER_MAC`] (in its source link-layer
/// address option) for `target`, to the target's solicited-node group.
fn solicitation(src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let mut frame = vec![0; NDP_FRAME_LEN];
    let n = ndp::write_solicitation(&mut frame, PEER_MAC, src, target, Solicit::Multicast);
    frame.truncate(n);
    frame
}

/// A Neighbour Solicitation for fd00::2 from fe80::1: answered with an advertisement.
fn ndp_solicitation() -> Vec<u8> {
    let (mut host, input) = play(&[solicitation(PEER_LINK_LOCAL, HOST_IP6)]);
    assert_eq!(host.interface().counters().ndp_advertisements, 1, "solicitation not answered");
    assert_eq!(host.take_frames().len(), 1, "one advertisement");
    input
}

/// An ICMPv6 echo request from fe80::1 to the host's link-local address.
fn icmpv6_echo() -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
        .ipv6(PEER_LINK_LOCAL.octets(), host_link_local().octets(), 64)
        .icmpv6_echo_request(0x1234, 1)
        .write(&mut frame, b"ping6 payload")
        .unwrap();
    let (host, input) = play(&[frame]);
    assert_eq!(host.interface().counters().icmp_echo_replies, 1, "echo request not answered");
    input
}

/// Return an ICMP echo request of [`BIG_ECHO`] bytes from [`PEER_IP`] to the host.
fn big_echo_v4(seq: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
        .ipv4(PEER_IP.octets(), HOST_IP.octets(), 64)
        .icmpv4_echo_request(0x4000, seq)
        .write(&mut frame, &pattern(BIG_ECHO - 8))
        .unwrap();
    frame.split_off(ETH_LEN + IPV4_LEN)
}

/// Return an ICMPv6 echo request of [`BIG_ECHO`] bytes from [`PEER_IP6`] to the host.
fn big_echo_v6() -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
        .ipv6(PEER_IP6.octets(), HOST_IP6.octets(), 64)
        .icmpv6_echo_request(0x6000, 1)
        .write(&mut frame, &pattern(BIG_ECHO - 8))
        .unwrap();
    frame.split_off(ETH_LEN + IPV6_LEN)
}

/// Return the frame of one IPv4 fragment of an ICMP message from [`PEER_IP`]: `data` at
/// `offset` (a multiple of 8), `more` to follow or not, DF clear (RFC 791 3.2).
fn ipv4_fragment(id: u16, offset: usize, more: bool, data: &[u8]) -> Vec<u8> {
    let mut ip = Ipv4Header::new(data.len() as u16, 64, IpNumber::ICMP, PEER_IP.octets(), HOST_IP.octets()).unwrap();
    ip.identification = id;
    ip.dont_fragment = false;
    ip.more_fragments = more;
    ip.fragment_offset = IpFragOffset::try_new((offset / 8) as u16).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let eth = Ethernet2Header { source: PEER_MAC, destination: HOST_MAC, ether_type: EtherType::IPV4 };
    [&eth.to_bytes()[..], &ip.to_bytes(), data].concat()
}

/// Return the frame of one IPv6 fragment of an ICMPv6 message from [`PEER_IP6`] to
/// [`HOST_IP6`]: a Fragment header with `offset`, `more` and `id`, then `data` (RFC 8200 4.5).
fn ipv6_fragment(id: u32, offset: usize, more: bool, data: &[u8]) -> Vec<u8> {
    let frag =
        Ipv6FragmentHeader::new(IpNumber::IPV6_ICMP, IpFragOffset::try_new((offset / 8) as u16).unwrap(), more, id);
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: (Ipv6FragmentHeader::LEN + data.len()) as u16,
        next_header: IpNumber::IPV6_FRAGMENTATION_HEADER,
        hop_limit: 64,
        source: PEER_IP6.octets(),
        destination: HOST_IP6.octets(),
    };
    let eth = Ethernet2Header { source: PEER_MAC, destination: HOST_MAC, ether_type: EtherType::IPV6 };
    [&eth.to_bytes()[..], &ip.to_bytes(), &frag.to_bytes(), data].concat()
}

/// Return the IPv4 fragments of `msg` cut at `cuts` (each a multiple of 8).
fn ipv4_fragments(id: u16, msg: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let ends: Vec<usize> = cuts.iter().copied().chain([msg.len()]).collect();
    let starts = [0].into_iter().chain(cuts.iter().copied());
    starts.zip(&ends).map(|(a, &b)| ipv4_fragment(id, a, b < msg.len(), &msg[a..b])).collect()
}

/// A 4000-byte echo request in 3 IPv4 fragments, the last first, then the first, then the
/// middle: reassembled, and answered in 3 fragments (the checker reassembles those).
fn icmp_echo_fragments() -> Vec<u8> {
    let frags = ipv4_fragments(0x4242, &big_echo_v4(1), &[1480, 2960]);
    let (mut host, input) = play(&[frags[2].clone(), frags[0].clone(), frags[1].clone()]);
    let c = host.interface().counters();
    assert_eq!((c.fragments_reassembled, c.icmp_echo_replies), (1, 1), "fragmented echo not answered");
    assert_eq!(host.take_frames().len(), 3, "the reply is not in 3 fragments");
    input
}

/// The same over IPv6, with Fragment headers.
fn icmpv6_echo_fragments() -> Vec<u8> {
    let msg = big_echo_v6();
    let frags =
        [(0, 1448), (1448, 2896), (2896, msg.len())].map(|(a, b)| ipv6_fragment(0x6666, a, b < msg.len(), &msg[a..b]));
    let (mut host, input) = play(&[frags[2].clone(), frags[0].clone(), frags[1].clone()]);
    let c = host.interface().counters();
    assert_eq!((c.fragments_reassembled, c.icmp_echo_replies), (1, 1), "fragmented echo not answered");
    assert_eq!(host.take_frames().len(), 3, "the reply is not in 3 fragments");
    input
}

/// A train whose second fragment overlaps the first by 8 bytes (the datagram is discarded,
/// and its last fragment dropped with it, RFC 5722), then the same request again, clean,
/// under a new identification: answered.
fn ipv4_fragment_overlap() -> Vec<u8> {
    let msg = big_echo_v4(2);
    let bad = [ipv4_fragment(0x5151, 0, true, &msg[..1480]), ipv4_fragment(0x5151, 1472, true, &msg[1472..2952])];
    let last = ipv4_fragment(0x5151, 2952, false, &msg[2952..]);
    let mut frames = vec![bad[0].clone(), bad[1].clone(), last];
    frames.extend(ipv4_fragments(0x5152, &msg, &[1480, 2960]));
    let (host, input) = play(&frames);
    let c = host.interface().counters();
    assert_eq!(c.drops(Drop::FragmentDropped), 2, "overlap and the discarded datagram's last fragment");
    assert_eq!((c.fragments_reassembled, c.icmp_echo_replies), (1, 1), "the clean train");
    input
}

/// The first IPv6 fragment of an echo request, then a last fragment at offset 65528 that
/// would end past 65,535 bytes (the ping of death: the datagram is discarded), then the
/// middle fragment (dropped with it).
fn ipv6_fragment_oversized() -> Vec<u8> {
    let msg = big_echo_v6();
    let frames = [
        ipv6_fragment(0x6767, 0, true, &msg[..1448]),
        ipv6_fragment(0x6767, 65528, false, &msg[..16]),
        ipv6_fragment(0x6767, 1448, true, &msg[1448..2896]),
    ];
    let (host, input) = play(&frames);
    let c = host.interface().counters();
    assert_eq!(c.drops(Drop::FragmentDropped), 2, "oversized fragment and the one after");
    assert_eq!((c.fragments_reassembled, c.icmp_echo_replies), (0, 0));
    input
}

/// A Router Advertisement from fe80::1 to all nodes: lifetime 30 min, its MAC, MTU 1500,
/// and the on-link prefix 2001:db8:1::/64 (RFC 4861 4.2, 4.6).
fn router_advertisement() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(30_000u32.to_be_bytes()); // reachable time, ms
    body.extend(1_000u32.to_be_bytes()); // retrans timer, ms
    body.extend([1, 1]); // source link-layer address
    body.extend(PEER_MAC);
    body.extend([5, 1, 0, 0]); // MTU
    body.extend(1500u32.to_be_bytes());
    body.extend([3, 4, 64, 0xc0]); // prefix information: /64, on-link and autonomous
    body.extend(86_400u32.to_be_bytes()); // valid lifetime, s
    body.extend(14_400u32.to_be_bytes()); // preferred lifetime, s
    body.extend([0; 4]);
    body.extend(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0).octets());
    let ra = RouterAdvertisementHeader {
        cur_hop_limit: 64,
        managed_address_config: false,
        other_config: false,
        router_lifetime: 1800,
    };
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, ndp::multicast_mac(ndp::ALL_NODES))
        .ipv6(PEER_LINK_LOCAL.octets(), ndp::ALL_NODES.octets(), ndp::HOP_LIMIT)
        .icmpv6(Icmpv6Type::RouterAdvertisement(ra))
        .write(&mut frame, &body)
        .unwrap();
    let (host, input) = play(&[frame]);
    assert_eq!(host.interface().counters().total_drops(), 0, "router advertisement refused");
    input
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
    /// Our address and the host's: both IPv4 or both IPv6.
    ip: IpAddr,
    host_ip: IpAddr,
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
    /// The IP packets of the host's segments to us, in order sent (for ICMP errors to quote).
    packets: Vec<Vec<u8>>,
    segments: Vec<SegmentSeed>,
}

impl Peer {
    /// Return a peer at [`PEER_IP`] talking to the host's port `port`.
    fn new(port: u16) -> Peer {
        Peer::with_addresses(IpAddr::V4(PEER_IP), IpAddr::V4(HOST_IP), port)
    }

    /// Return a peer at [`PEER_IP6`] talking to [`HOST_IP6`] port `port`, which has first
    /// told the host its MAC with a Neighbour Solicitation (the host answers it).
    fn new_v6(port: u16) -> Peer {
        let mut p = Peer::with_addresses(IpAddr::V6(PEER_IP6), IpAddr::V6(HOST_IP6), port);
        p.frame(MS_1, &solicitation(PEER_IP6, HOST_IP6));
        assert_eq!(p.host.interface().counters().ndp_advertisements, 1, "solicitation not answered");
        p
    }

    fn with_addresses(ip: IpAddr, host_ip: IpAddr, port: u16) -> Peer {
        let mut host = Host::new();
        host.keep_frames();
        Peer {
            host,
            input: Vec::new(),
            ip,
            host_ip,
            port,
            seq: 0x1000_0000,
            ack: None,
            tsval: 1000,
            ts_recent: 0,
            received: Vec::new(),
            flags: Vec::new(),
            packets: Vec::new(),
            segments: Vec::new(),
        }
    }

    /// Start a segment at `seq`, acknowledging what we have seen of the host.
    fn tcp(&self, seq: u32) -> PacketBuilderStep<TcpHeader> {
        let eth = PacketBuilder::ethernet2(PEER_MAC, HOST_MAC);
        let ip = match (self.ip, self.host_ip) {
            (IpAddr::V4(ours), IpAddr::V4(host)) => eth.ipv4(ours.octets(), host.octets(), 64),
            (IpAddr::V6(ours), IpAddr::V6(host)) => eth.ipv6(ours.octets(), host.octets(), 64),
            _ => unreachable!("a peer's addresses are of one family"),
        };
        let b = ip.tcp(PEER_PORT, self.port, seq, WINDOW);
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
        self.frame(step, &frame);
        self.seq = self.seq.wrapping_add(advance);
        self.tsval = self.tsval.wrapping_add(u32::from(step & 0x3f).max(1));
    }

    /// Send any frame (not kept as a TCP seed) and read the host's answers.
    fn frame(&mut self, step: u8, frame: &[u8]) {
        self.input.extend(record(step, UNLIMITED, frame));
        self.host.step(step, UNLIMITED, frame);
        self.learn();
    }

    /// Read the host's frames: track its sequence number, timestamps and payloads.
    fn learn(&mut self) {
        for frame in self.host.take_frames() {
            let Some((seg_bytes, src, dst, packet)) = tcp_of(&frame) else { continue };
            let seg = Segment::parse(seg_bytes, src, dst).expect("host frames are checked");
            if seg.dst_port != PEER_PORT {
                continue;
            }
            self.segments.push((0, src, dst, seg_bytes.to_vec()));
            self.packets.push(packet.to_vec());
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
        if let Some((seg, src, dst, _)) = tcp_of(frame) {
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

/// Return the TCP segment of an Ethernet/IPv4 or Ethernet/IPv6 frame (no extension
/// headers), its addresses, and the IP packet it is in.
fn tcp_of(frame: &[u8]) -> Option<(&[u8], IpAddr, IpAddr, &[u8])> {
    let (eth, payload) = Ethernet2Header::from_slice(frame).ok()?;
    match eth.ether_type {
        EtherType::IPV4 => {
            let ip = Ipv4HeaderSlice::from_slice(payload).ok()?;
            if ip.protocol() != IpNumber::TCP {
                return None;
            }
            let packet = &payload[..usize::from(ip.total_len())];
            let body = &packet[ip.slice().len()..];
            Some((body, ip.source_addr().into(), ip.destination_addr().into(), packet))
        }
        EtherType::IPV6 => {
            let ip = Ipv6HeaderSlice::from_slice(payload).ok()?;
            if ip.next_header() != IpNumber::TCP {
                return None;
            }
            let packet = &payload[..IPV6_LEN + usize::from(ip.payload_length())];
            Some((&packet[IPV6_LEN..], ip.source_addr().into(), ip.destination_addr().into(), packet))
        }
        _ => None,
    }
}

/// Handshake, "hello" echoed, our FIN, the host's FIN, our last ACK.
fn tcp_echo(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    echo_conversation(Peer::new(ECHO_PORT), out)
}

/// [`tcp_echo`] over IPv6, fd00::1 to fd00::2, after a Neighbour Solicitation from the peer.
fn tcp_echo_v6(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    echo_conversation(Peer::new_v6(ECHO_PORT), out)
}

/// ARP, ICMP echo and [`tcp_echo`] in one input, played as one so that the ACKs match the
/// ISN the host picks 2 ms later than in `tcp_echo` alone.
fn all() -> Vec<u8> {
    let mut p = Peer::new(ECHO_PORT);
    p.frame(MS_1, &arp_request_frame());
    p.frame(MS_1, &icmp_echo_frame());
    let c = p.host.interface().counters();
    assert_eq!((c.arp_replies, c.icmp_echo_replies), (1, 1), "ARP or echo request not answered");
    echo_conversation(p, &mut Vec::new())
}

/// The conversation of [`tcp_echo`], from `p`.
fn echo_conversation(mut p: Peer, out: &mut Vec<SegmentSeed>) -> Vec<u8> {
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

/// Handshake and 1400 bytes echoed; before the peer acknowledges the echo, an ICMP error
/// from `error` (given the host's IP packet of the echo) reports an MTU of 1280: the host
/// resends the echo cut to fit it. Then ACK, FIN, ACK.
fn path_mtu_conversation(mut p: Peer, out: &mut Vec<SegmentSeed>, error: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    p.syn(MS_1);
    p.ack(MS_1);
    let data = pattern(1400);
    p.data(MS_1, &data);
    assert_eq!(p.echoed(), data, "no echo");
    let echo = p.packets.iter().max_by_key(|packet| packet.len()).expect("the echo").clone();
    let sent = p.packets.len();
    p.frame(MS_1, &error(&echo));
    assert_eq!(p.host.interface().counters().path_mtu_lowered, 1, "path MTU not lowered");
    let resent = &p.packets[sent..];
    assert!(!resent.is_empty(), "echo not resent");
    assert!(resent.iter().all(|packet| packet.len() <= usize::from(REPORTED_MTU)), "resent segments too large");
    p.ack(MS_1);
    p.fin(MS_1);
    assert!(p.saw(Flags::FIN), "host did not close after our FIN");
    p.ack(MS_1);
    p.finish(out)
}

/// ICMP "fragmentation needed" (type 3 code 4, next-hop MTU 1280, RFC 1191) from a router,
/// quoting the IPv4 header and first 8 bytes (RFC 792) of the host's unacknowledged echo.
fn icmp_frag_needed(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    path_mtu_conversation(Peer::new(ECHO_PORT), out, |echo| {
        let unreachable = DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: REPORTED_MTU };
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(ROUTER_MAC, HOST_MAC)
            .ipv4(ROUTER_IP.octets(), HOST_IP.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(unreachable))
            .write(&mut frame, &echo[..IPV4_LEN + 8])
            .unwrap();
        frame
    })
}

/// ICMPv6 Packet Too Big (MTU 1280, RFC 4443 3.2, RFC 8201) from fe80::1, quoting as much
/// of the host's unacknowledged IPv6 echo as fits in 1280 bytes.
fn icmpv6_packet_too_big(out: &mut Vec<SegmentSeed>) -> Vec<u8> {
    path_mtu_conversation(Peer::new_v6(ECHO_PORT), out, |echo| {
        let quote = &echo[..echo.len().min(usize::from(REPORTED_MTU) - IPV6_LEN - 8)];
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(PEER_MAC, HOST_MAC)
            .ipv6(PEER_LINK_LOCAL.octets(), HOST_IP6.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu: REPORTED_MTU.into() })
            .write(&mut frame, quote)
            .unwrap();
        frame
    })
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
