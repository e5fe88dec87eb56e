//! ICMP errors driving TCP (RFC 1122 4.2.3.9, RFC 5927, path MTU discovery: RFC 1191 and
//! RFC 8201) and fragment reassembly and fragmentation (RFC 791 3.2, RFC 8200 4.5, RFC 5722),
//! on virtual time: two stacks over the in-memory link, or one `Interface` fed by hand.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

mod common;

use bypass_device::Device;
use bypass_device::{LinkConfig, MemoryDevice, MemoryLink};
use bypass_stack::fragments::{Fragment, FragmentKey, Reassembler, ReassemblyConfig};
use bypass_stack::wire::{arp, ndp};
use bypass_stack::{Drop, SocketId, Stack, StackConfig};
use bypass_tcp::{Event, IcmpError, Instant, Segment, SeqNum, State};
use common::{Collector, Host, Net};
use etherparse::{
    ArpOperation, EtherType, Ethernet2Header, IpFragOffset, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header,
};

const A4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
/// A router on the link, the source of the ICMP errors.
const ROUTER4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 254);
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe);
const MAC_A: [u8; 6] = bypass_device::MAC_A;
const MAC_B: [u8; 6] = bypass_device::MAC_B;

const ICMP: u8 = 1;
const TCP: u8 = 6;
const ICMPV6: u8 = 58;
const FRAGMENT: u8 = 44;

// -------------------------------------------------------------------------------------
// Two stacks over the in-memory link.
// -------------------------------------------------------------------------------------

impl Net {
    /// Dual-stack hosts A (10.9.0.1, fd00::1) and B (10.9.0.2, fd00::2).
    fn dual_stack() -> Net {
        let ca = StackConfig::new(A4, 24, [1; 16]).with_address(A6, 64);
        let cb = StackConfig::new(B4, 24, [2; 16]).with_address(B6, 64);
        Net::new(LinkConfig::default(), ca, cb)
    }

    /// Put `frames` on the link from B's side, so that they arrive at A.
    fn inject_into_a(&mut self, frames: &[Vec<u8>]) {
        send_raw(self.b.device_mut(), frames);
    }

    /// Put `frames` on the link from A's side, so that they arrive at B.
    fn inject_into_b(&mut self, frames: &[Vec<u8>]) {
        send_raw(self.a.device_mut(), frames);
    }

    fn mss(&self, client: SocketId) -> u16 {
        self.a.tcp_stats(client).unwrap().mss
    }
}

fn send_raw(device: &mut MemoryDevice, frames: &[Vec<u8>]) {
    for f in frames {
        let queued = device
            .send(&mut |buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            })
            .unwrap();
        assert!(queued, "the device's queue is full");
    }
    device.flush().unwrap();
}

/// A bulk transfer from A to B on one connection, stepped by the test.
struct Bulk {
    client: SocketId,
    server: SocketId,
    data: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
}

impl Bulk {
    fn new(client: SocketId, server: SocketId, len: usize) -> Bulk {
        let data = (0..len as u32).map(|i| (i * 31 % 253) as u8).collect();
        Bulk { client, server, data, sent: 0, got: Vec::new() }
    }

    /// Feed A and drain B once; return whether B has everything.
    fn pump(&mut self, net: &mut Net) -> bool {
        if self.sent < self.data.len()
            && let Ok(k) = net.a.write(self.client, &self.data[self.sent..])
        {
            self.sent += k;
        }
        let mut buf = [0u8; 16384];
        while let Ok(k @ 1..) = net.b.read(self.server, &mut buf) {
            self.got.extend_from_slice(&buf[..k]);
        }
        self.got.len() == self.data.len()
    }

    /// Run the transfer until A has at least `bytes` in flight.
    fn until_in_flight(&mut self, net: &mut Net, bytes: u32) {
        net.run_until(|n| {
            self.pump(n);
            n.a.tcp_stats(self.client).unwrap().bytes_in_flight >= bytes
        });
    }

    fn finish(&mut self, net: &mut Net) {
        net.run_until(|n| self.pump(n));
        assert!(self.got == self.data, "B received other bytes than A sent");
    }
}

// -------------------------------------------------------------------------------------
// One interface fed by hand: B's addresses and MAC, A speaking.
// -------------------------------------------------------------------------------------

impl Host {
    /// The dual-stack host B (10.9.0.2/24, fd00::2/64) at `MAC_B`.
    fn dual_stack() -> Host {
        Host::new(StackConfig::new(B4, 24, [3; 16]).with_address(B6, 64), MAC_B)
    }

    fn dropped_fragments(&self) -> u64 {
        self.iface.counters().drops(Drop::FragmentDropped)
    }
}

fn at(secs: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(secs)
}

// -------------------------------------------------------------------------------------
// Frames.
// -------------------------------------------------------------------------------------

/// RFC 1071 checksum of `data`, ready to store big-endian.
fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Return an ICMP message (RFC 792) of `kind`/`code`, `word` after the checksum, and `body`.
fn icmpv4(kind: u8, code: u8, word: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&word);
    m.extend_from_slice(body);
    let sum = internet_checksum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// Return an ICMPv6 message (RFC 4443 2.1), its checksum right for `src` to `dst`.
fn icmpv6(src: Ipv6Addr, dst: Ipv6Addr, kind: u8, code: u8, word: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&word);
    m.extend_from_slice(body);
    let sum = ndp::checksum(src, dst, &m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// Return an Ethernet frame from `MAC_A`'s side (`src_mac`) to `dst_mac` carrying one IPv4
/// fragment: identification `id`, `data` at byte `offset`, MF as `more`, DF clear.
fn ipv4_fragment(
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    (src, dst): (Ipv4Addr, Ipv4Addr),
    proto: u8,
    (id, offset, more): (u16, usize, bool),
    data: &[u8],
) -> Vec<u8> {
    let mut ip = Ipv4Header::new(data.len() as u16, 64, IpNumber(proto), src.octets(), dst.octets()).unwrap();
    ip.dont_fragment = false;
    ip.more_fragments = more;
    ip.identification = id;
    ip.fragment_offset = IpFragOffset::try_new((offset / 8) as u16).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: EtherType::IPV4 };
    let mut f = eth.to_bytes().to_vec();
    f.extend_from_slice(&ip.to_bytes());
    f.extend_from_slice(data);
    f
}

/// Return an Ethernet frame carrying a whole IPv4 datagram (DF set, as TCP's are).
fn ipv4_frame(macs: ([u8; 6], [u8; 6]), (src, dst): (Ipv4Addr, Ipv4Addr), proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ipv4_fragment(macs, (src, dst), proto, (0, 0, false), payload);
    f[14 + 6] |= 0x40;
    f[14 + 10..14 + 12].fill(0);
    let sum = internet_checksum(&f[14..34]);
    f[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
    f
}

/// Return an Ethernet frame carrying an IPv6 packet with `payload` behind the fixed header
/// (hop limit 64).
fn ipv6_frame(macs: ([u8; 6], [u8; 6]), (src, dst): (Ipv6Addr, Ipv6Addr), next: u8, payload: &[u8]) -> Vec<u8> {
    common::ipv6_frame(macs, src, dst, 64, next, payload)
}

/// Return an IPv6 Fragment header (RFC 8200 4.5) and `data` behind it.
fn fragment6(next: u8, offset: usize, more: bool, id: u32, data: &[u8]) -> Vec<u8> {
    let field = (offset as u16 & !7) | u16::from(more);
    let mut p = vec![next, 0];
    p.extend_from_slice(&field.to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(data);
    p
}

/// One fragment as the host sent it: the IP header's fields and the fragment's data.
#[derive(Debug)]
struct SentFragment {
    id: u32,
    offset: usize,
    more: bool,
    /// IPv4: DF set. IPv6: always false.
    dont_fragment: bool,
    /// The IP packet's length, header included.
    ip_len: usize,
    /// The protocol: IPv4's, or the Fragment header's Next Header.
    protocol: u8,
    src: IpAddr,
    dst: IpAddr,
    data: Vec<u8>,
}

/// Parse a fragment the host sent (IPv4 with MF or an offset, or IPv6 with a Fragment
/// header right behind the fixed one).
fn sent_fragment(frame: &[u8]) -> Option<SentFragment> {
    let (eth, rest) = Ethernet2Header::from_slice(frame).ok()?;
    match eth.ether_type {
        EtherType::IPV4 => {
            let (ip, rest) = Ipv4Header::from_slice(rest).ok()?;
            let offset = usize::from(ip.fragment_offset.value()) * 8;
            if !ip.more_fragments && offset == 0 {
                return None;
            }
            let data = rest.get(..usize::from(ip.total_len) - ip.header_len())?.to_vec();
            Some(SentFragment {
                id: u32::from(ip.identification),
                offset,
                more: ip.more_fragments,
                dont_fragment: ip.dont_fragment,
                ip_len: usize::from(ip.total_len),
                protocol: ip.protocol.0,
                src: Ipv4Addr::from(ip.source).into(),
                dst: Ipv4Addr::from(ip.destination).into(),
                data,
            })
        }
        EtherType::IPV6 => {
            let (ip, rest) = Ipv6Header::from_slice(rest).ok()?;
            if ip.next_header.0 != FRAGMENT {
                return None;
            }
            let payload = rest.get(..usize::from(ip.payload_length))?;
            let field = u16::from_be_bytes([payload[2], payload[3]]);
            Some(SentFragment {
                id: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
                offset: usize::from(field & !7),
                more: field & 1 == 1,
                dont_fragment: false,
                ip_len: 40 + payload.len(),
                protocol: payload[0],
                src: Ipv6Addr::from(ip.source).into(),
                dst: Ipv6Addr::from(ip.destination).into(),
                data: payload[8..].to_vec(),
            })
        }
        _ => None,
    }
}

/// Check `frames` are one datagram's fragments, cut as RFC 791 3.2 / RFC 8200 4.5 ask:
/// each within the 1500-byte MTU with DF clear, every one but the last a multiple of 8
/// bytes long, at the offset where the one before ended, one identification, MF on all but
/// the last. Return the datagram, reassembled by the library's own reassembler, and the
/// fragments.
fn reassemble_sent(frames: &[Vec<u8>]) -> (Vec<u8>, Vec<SentFragment>) {
    let frags: Vec<SentFragment> = frames.iter().map(|f| sent_fragment(f).expect("a fragment")).collect();
    assert!(frags.len() >= 2, "the reply came in fragments");
    let mut end = 0;
    for (i, f) in frags.iter().enumerate() {
        assert!(f.ip_len <= 1500, "fragment {i} is {} bytes of IP, more than the MTU", f.ip_len);
        // RFC 791 3.2: a fragment may be cut again by a router on a narrower link.
        assert!(!f.dont_fragment, "fragment {i} has DF set");
        assert_eq!(f.offset, end, "fragment {i} starts where the one before ended");
        assert_eq!(f.more, i + 1 < frags.len(), "MF on every fragment but the last");
        assert_eq!((f.id, f.src, f.dst, f.protocol), (frags[0].id, frags[0].src, frags[0].dst, frags[0].protocol));
        if f.more {
            assert_eq!(f.data.len() % 8, 0, "fragment {i}'s length is a multiple of 8");
        }
        end += f.data.len();
    }
    let first = &frags[0];
    let key = match (first.src, first.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => FragmentKey::ipv4(s, d, first.id as u16, first.protocol),
        (IpAddr::V6(s), IpAddr::V6(d)) => FragmentKey::ipv6(s, d, first.id),
        _ => unreachable!(),
    };
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let mut whole = None;
    // Backwards, so that the reassembler puts them in order itself.
    for f in frags.iter().rev() {
        if let Some(d) = r.insert(Instant::ZERO, key, Fragment::new(f.offset, f.more, &f.data)).unwrap() {
            whole = Some(d.payload.to_vec());
        }
    }
    (whole.expect("the fragments make a datagram"), frags)
}

/// Return A's most recent data segment in `frames`: its IP header and TCP bytes, and its
/// sequence number.
fn last_data_segment(frames: &[Vec<u8>]) -> (Vec<u8>, SeqNum) {
    frames
        .iter()
        .rev()
        .find_map(|f| {
            let ip_start = 14;
            let (ip_len, tcp_start) = match u16::from_be_bytes([f[12], f[13]]) {
                0x0800 => (usize::from(u16::from_be_bytes([f[16], f[17]])), ip_start + 20),
                0x86dd => (40 + usize::from(u16::from_be_bytes([f[18], f[19]])), ip_start + 40),
                _ => return None,
            };
            let next = if f[12] == 0x08 { f[ip_start + 9] } else { f[ip_start + 6] };
            let seg = Segment::parse_unchecked(f.get(tcp_start..ip_start + ip_len)?).ok()?;
            (next == TCP && !seg.payload.is_empty()).then(|| (f[ip_start..ip_start + ip_len].to_vec(), seg.seq))
        })
        .expect("A sent a data segment")
}

/// Step the transfer until A's most recent data segment has not reached B yet, and return
/// it: an ICMP error about it injected now (on the B-to-A link, ahead of any ACK of it) finds
/// it in flight.
fn fresh_segment(net: &mut Net, bulk: &mut Bulk, sent: &Mutex<Vec<Vec<u8>>>) -> (Vec<u8>, SeqNum) {
    loop {
        let (packet, seq) = last_data_segment(&sent.lock().unwrap());
        let rcv_nxt = net.b.interface().connection(bulk.server).unwrap().sequence_space().rcv_nxt;
        if seq.0.wrapping_sub(rcv_nxt.0) as i32 >= 0 {
            return (packet, seq);
        }
        bulk.pump(net);
        net.step();
    }
}

/// Return IP packet `packet` (IPv4 or IPv6, from A) with its TCP sequence number replaced by
/// `seq` (no checksum is fixed: a router's quote is not checked).
fn with_seq(packet: &[u8], seq: SeqNum) -> Vec<u8> {
    let mut p = packet.to_vec();
    let tcp = if p[0] >> 4 == 4 { 20 } else { 40 };
    p[tcp + 4..tcp + 8].copy_from_slice(&seq.0.to_be_bytes());
    p
}

/// Return the lengths of the IP packets carrying TCP data in `frames`.
fn data_packet_lens(frames: &[Vec<u8>]) -> Vec<usize> {
    frames
        .iter()
        .filter_map(|f| match u16::from_be_bytes([f[12], f[13]]) {
            0x0800 if f[23] == TCP => {
                let len = usize::from(u16::from_be_bytes([f[16], f[17]]));
                let tcp_header = usize::from(f[34 + 12] >> 4) * 4;
                (len > 20 + tcp_header).then_some(len)
            }
            0x86dd if f[20] == TCP => {
                let len = 40 + usize::from(u16::from_be_bytes([f[18], f[19]]));
                let tcp_header = usize::from(f[54 + 12] >> 4) * 4;
                (len > 40 + tcp_header).then_some(len)
            }
            _ => None,
        })
        .collect()
}

// -------------------------------------------------------------------------------------
// Echo in fragments (RFC 791 3.2, RFC 8200 4.5; RFC 792, RFC 4443 4).
// -------------------------------------------------------------------------------------

/// 4000 bytes of echo data, as `ping -s 4000` sends.
fn ping_data() -> Vec<u8> {
    (0..4000u32).map(|i| (i * 11 % 256) as u8).collect()
}

#[test]
fn a_fragmented_ipv4_echo_request_is_reassembled_and_answered_in_fragments() {
    let mut host = Host::dual_stack();
    let data = ping_data();
    let request = icmpv4(8, 0, [0x4b, 0x1d, 0, 1], &data);
    assert_eq!(request.len(), 4008);
    // Cut as Linux cuts it for a 1500-byte MTU: 1480, 1480 and 1048 bytes.
    let cuts = [(0, 1480, true), (1480, 2960, true), (2960, 4008, false)];
    let frames: Vec<Vec<u8>> = cuts
        .iter()
        .map(|&(from, to, more)| {
            ipv4_fragment((MAC_A, MAC_B), (A4, B4), ICMP, (0x3039, from, more), &request[from..to])
        })
        .collect();
    // Out of order: the last first, then the first, then the middle.
    for i in [2, 0] {
        host.receive(&frames[i]);
        assert!(host.sent().is_empty(), "nothing answered before the datagram is whole");
    }
    host.receive(&frames[1]);
    assert_eq!(host.iface.counters().fragments_reassembled, 1);
    let sent = host.sent();
    assert_eq!(sent.len(), 3, "4008 bytes of reply need three fragments at MTU 1500");
    let (reply, frags) = reassemble_sent(&sent);
    assert_eq!(frags.iter().map(|f| f.data.len()).collect::<Vec<_>>(), [1480, 1480, 1048]);
    assert!(frags.iter().all(|f| f.dst == IpAddr::V4(A4) && f.src == IpAddr::V4(B4) && f.protocol == ICMP));
    assert!(sent.iter().all(|f| f[..6] == MAC_A), "back to the requester's MAC");
    assert_eq!((reply[0], reply[1]), (0, 0), "an echo reply");
    assert_eq!(internet_checksum(&reply), 0, "its checksum verifies");
    assert_eq!(&reply[4..8], &[0x4b, 0x1d, 0, 1], "identifier and sequence number");
    assert_eq!(&reply[8..], &data[..]);
    assert_eq!(host.iface.counters().icmp_echo_replies, 1);
    assert_eq!(host.dropped_fragments(), 0);
}

#[test]
fn the_largest_ipv4_echo_request_is_answered() {
    // `ping -s 65507`: 65,515 bytes of ICMP, a 65,535-byte datagram (RFC 791 3.1: Total
    // Length is 16 bits), 45 fragments each way.
    let mut host = Host::dual_stack();
    let data: Vec<u8> = (0..65507u32).map(|i| (i % 199) as u8).collect();
    let request = icmpv4(8, 0, [0, 1, 0, 2], &data);
    for (i, chunk) in request.chunks(1480).enumerate() {
        let more = (i + 1) * 1480 < request.len();
        host.receive(&ipv4_fragment((MAC_A, MAC_B), (A4, B4), ICMP, (99, i * 1480, more), chunk));
    }
    assert_eq!(host.iface.counters().fragments_reassembled, 1);
    let sent = host.sent();
    assert_eq!(sent.len(), 45, "{}", host.iface.counters());
    let (reply, _) = reassemble_sent(&sent);
    assert_eq!(reply.len(), 65515);
    assert_eq!(internet_checksum(&reply), 0);
    assert_eq!(&reply[8..], &data[..]);
}

#[test]
fn a_fragmented_icmpv6_echo_request_is_reassembled_and_answered_in_fragments() {
    let mut host = Host::dual_stack();
    let data = ping_data();
    let request = icmpv6(A6, B6, 128, 0, [0x4b, 0x1d, 0, 2], &data);
    // 1448-byte fragments: 1448, 1448 and 1112 bytes.
    let cuts = [(0, 1448, true), (1448, 2896, true), (2896, 4008, false)];
    let frames: Vec<Vec<u8>> = cuts
        .iter()
        .map(|&(from, to, more)| {
            ipv6_frame(
                (MAC_A, MAC_B),
                (A6, B6),
                FRAGMENT,
                &fragment6(ICMPV6, from, more, 0xdead_beef, &request[from..to]),
            )
        })
        .collect();
    for i in [1, 2] {
        host.receive(&frames[i]);
        assert!(host.sent().is_empty());
    }
    host.receive(&frames[0]);
    assert_eq!(host.iface.counters().fragments_reassembled, 1);
    let sent = host.sent();
    assert_eq!(sent.len(), 3);
    let (reply, frags) = reassemble_sent(&sent);
    // Behind 40 bytes of IPv6 and 8 of Fragment header, 1452 bytes fit; cut at 8-byte
    // boundaries that is 1448.
    assert_eq!(frags.iter().map(|f| f.data.len()).collect::<Vec<_>>(), [1448, 1448, 1112]);
    assert!(frags.iter().all(|f| f.src == IpAddr::V6(B6) && f.dst == IpAddr::V6(A6) && f.protocol == ICMPV6));
    assert_eq!((reply[0], reply[1]), (129, 0), "an echo reply");
    assert_eq!(ndp::checksum(B6, A6, &reply), u16::from_be_bytes([reply[2], reply[3]]), "its checksum verifies");
    assert_eq!(&reply[4..8], &[0x4b, 0x1d, 0, 2]);
    assert_eq!(&reply[8..], &data[..]);
    assert_eq!(host.iface.counters().icmp_echo_replies, 1);
}

#[test]
fn the_largest_icmpv6_echo_request_is_answered() {
    // RFC 8200 4.5: the fragmentable part may reach 65,535 bytes.
    let mut host = Host::dual_stack();
    let data: Vec<u8> = (0..65527u32).map(|i| (i % 197) as u8).collect();
    let request = icmpv6(A6, B6, 128, 0, [0, 1, 0, 3], &data);
    assert_eq!(request.len(), 65535);
    for (i, chunk) in request.chunks(1448).enumerate() {
        let more = (i + 1) * 1448 < request.len();
        let frag = fragment6(ICMPV6, i * 1448, more, 77, chunk);
        host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &frag));
    }
    assert_eq!(host.iface.counters().fragments_reassembled, 1);
    let sent = host.sent();
    assert!(!sent.is_empty(), "answered: {}", host.iface.counters());
    let (reply, _) = reassemble_sent(&sent);
    assert_eq!(reply.len(), 65535);
    assert_eq!(&reply[8..], &data[..]);
}

// -------------------------------------------------------------------------------------
// Bad fragment trains (RFC 5722, RFC 791 3.2, RFC 8200 4.5).
// -------------------------------------------------------------------------------------

#[test]
fn overlapping_and_oversized_ipv4_trains_are_dropped_until_their_time_runs_out() {
    let mut host = Host::dual_stack();
    let request = icmpv4(8, 0, [0, 5, 0, 5], &[0x42; 24]);
    let frag = |id: u16, from: usize, to: usize, more: bool| {
        ipv4_fragment((MAC_A, MAC_B), (A4, B4), ICMP, (id, from, more), &request[from..to])
    };
    let good_train = |id: u16| [frag(id, 0, 16, true), frag(id, 16, 24, true), frag(id, 24, 32, false)];
    // Overlap (RFC 5722 4, which Linux applies to IPv4 too): the datagram is discarded, and
    // its later fragments with it.
    host.receive(&frag(0x77, 0, 16, true));
    host.receive(&frag(0x77, 8, 24, true));
    assert_eq!(host.dropped_fragments(), 1, "the overlapping fragment");
    host.receive(&frag(0x77, 24, 32, false));
    assert_eq!(host.dropped_fragments(), 2, "a later fragment of the discarded datagram");
    // A train that never completes.
    host.receive(&frag(0x78, 0, 16, true));
    assert_eq!(host.iface.poll_timeout(), Some(at(30.0)), "IPv4 reassembly gives up after 30 s");
    // A fragment ending beyond 65,535 bytes of datagram: the ping of death.
    let far = ipv4_fragment((MAC_A, MAC_B), (A4, B4), ICMP, (0x79, 65528, false), &[0; 16]);
    host.receive(&far);
    assert_eq!(host.dropped_fragments(), 3);
    assert!(host.sent().is_empty(), "nothing was reassembled");

    // Before the time runs out, the discarded datagram stays discarded.
    host.advance_to(at(29.0));
    for f in good_train(0x77) {
        host.receive(&f);
    }
    assert!(host.sent().is_empty());
    assert_eq!(host.dropped_fragments(), 6);
    // Then its memory is freed, and the train that never completed is given up (counted).
    host.advance_to(at(30.0));
    assert_eq!(host.dropped_fragments(), 7, "the incomplete datagram timed out");
    assert_eq!(host.iface.poll_timeout(), None, "nothing is held");
    // Fresh trains with the same keys reassemble.
    for id in [0x77, 0x78, 0x79] {
        for f in good_train(id) {
            host.receive(&f);
        }
    }
    assert_eq!(host.sent().len(), 3, "three echo replies");
    assert_eq!(host.iface.counters().fragments_reassembled, 3);
    assert_eq!(host.dropped_fragments(), 7);
}

#[test]
fn overlapping_and_oversized_ipv6_trains_are_dropped_until_their_time_runs_out() {
    let mut host = Host::dual_stack();
    let request = icmpv6(A6, B6, 128, 0, [0, 6, 0, 6], &[0x42; 24]);
    let frag = |id: u32, from: usize, to: usize, more: bool| {
        ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, from, more, id, &request[from..to]))
    };
    let good_train = |id: u32| [frag(id, 0, 16, true), frag(id, 16, 24, true), frag(id, 24, 32, false)];
    host.receive(&frag(1, 0, 16, true));
    host.receive(&frag(1, 8, 32, false));
    host.receive(&frag(1, 16, 24, true));
    assert_eq!(host.dropped_fragments(), 2, "RFC 5722: the overlap and everything after it");
    // The same offset and length with other bytes is an overlap too.
    host.receive(&frag(2, 0, 16, true));
    let mut other = request.clone();
    other[0..16].fill(0x99);
    host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, 0, true, 2, &other[..16])));
    assert_eq!(host.dropped_fragments(), 3);
    // An exact duplicate is only dropped (RFC 5722 errata 3089); the datagram goes on.
    host.receive(&frag(3, 0, 16, true));
    host.receive(&frag(3, 0, 16, true));
    assert_eq!(host.dropped_fragments(), 4);
    host.receive(&frag(3, 16, 24, true));
    host.receive(&frag(3, 24, 32, false));
    assert_eq!(host.sent().len(), 1, "the train with a duplicate is reassembled and answered");
    // Beyond 65,535 bytes (RFC 8200 4.5: offset plus length).
    host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, 65528, false, 4, &[0; 16])));
    assert_eq!(host.dropped_fragments(), 5);
    // A fragment with more to follow whose length is no multiple of 8.
    host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, 0, true, 5, &[0; 12])));
    assert_eq!(host.dropped_fragments(), 6);
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.poll_timeout(), Some(at(60.0)), "IPv6 reassembly gives up after 60 s");
    host.advance_to(at(60.0));
    assert_eq!(host.iface.poll_timeout(), None);
    for id in [1, 2, 4] {
        for f in good_train(id) {
            host.receive(&f);
        }
    }
    assert_eq!(host.sent().len(), 3, "fresh trains with the old keys are answered");
    assert_eq!(host.dropped_fragments(), 6);
}

#[test]
fn fragmented_neighbour_discovery_is_ignored() {
    // RFC 6980 5: a host MUST silently ignore Neighbour Discovery messages that use
    // fragmentation (an attacker hides options in later fragments). A solicitation to a
    // multicast group is dropped for that already; this one is a unicast probe.
    let mut host = Host::dual_stack();
    let mut body = B6.octets().to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&MAC_A);
    let ns = icmpv6(A6, B6, 135, 0, [0; 4], &body);
    for (from, to, more) in [(0, 16, true), (16, ns.len(), false)] {
        let mut f = ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, from, more, 9, &ns[from..to]));
        f[14 + 7] = 255;
        host.receive(&f);
    }
    assert!(host.sent().is_empty(), "no advertisement for a fragmented solicitation");
    assert_eq!(host.iface.counters().ndp_advertisements, 0);
    assert_eq!(host.iface.counters().drops(Drop::BadNdp), 1);
    // An atomic fragment (RFC 6946) uses fragmentation too.
    let mut f = ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(ICMPV6, 0, false, 10, &ns));
    f[14 + 7] = 255;
    host.receive(&f);
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.counters().drops(Drop::BadNdp), 2);
    // Whole, the same solicitation is answered.
    let mut f = ipv6_frame((MAC_A, MAC_B), (A6, B6), ICMPV6, &ns);
    f[14 + 7] = 255;
    host.receive(&f);
    assert_eq!(host.sent().len(), 1);
}

// -------------------------------------------------------------------------------------
// Path MTU discovery (RFC 1191, RFC 8201) and the RFC 5927 window check.
// -------------------------------------------------------------------------------------

/// Return the ICMP "fragmentation needed and DF set" (type 3 code 4, RFC 1191 4) from the
/// router to A with next-hop MTU `mtu`, quoting `packet`'s IPv4 header and 8 bytes of TCP.
fn frag_needed(packet: &[u8], mtu: u16) -> Vec<u8> {
    let [hi, lo] = mtu.to_be_bytes();
    let icmp = icmpv4(3, 4, [0, 0, hi, lo], &packet[..28]);
    ipv4_frame((MAC_B, MAC_A), (ROUTER4, A4), ICMP, &icmp)
}

/// Return the ICMPv6 Packet Too Big (type 2, RFC 4443 3.2) from the router to A with `mtu`,
/// quoting as much of `packet` as fits the minimum MTU.
fn packet_too_big(packet: &[u8], mtu: u32) -> Vec<u8> {
    packet_too_big_from(ROUTER6, packet, mtu)
}

fn packet_too_big_from(src: Ipv6Addr, packet: &[u8], mtu: u32) -> Vec<u8> {
    let quote = &packet[..packet.len().min(1280 - 48)];
    let icmp = icmpv6(src, A6, 2, 0, mtu.to_be_bytes(), quote);
    ipv6_frame((MAC_B, MAC_A), (src, A6), ICMPV6, &icmp)
}

/// Run a PMTUD scenario for `remote` (B's IPv4 or IPv6 address): a forged message quoting
/// an old sequence number changes nothing, a real one lowers the MSS to `mss`, what follows
/// fits `mtu`, and the transfer completes. `message(packet, mtu)` builds the ICMP frame.
fn path_mtu_discovery(remote: IpAddr, message: fn(&[u8], u32) -> Vec<u8>, mtu: u32, mss: u16) {
    let mut net = Net::dual_stack();
    let sent = Collector::install(&mut net.a);
    let listener = net.b.listen(5001).unwrap();
    let (client, server) = net.connect(SocketAddr::new(remote, 5001), listener);
    // Another connection to the same destination, idle.
    let (idle, _) = net.connect(SocketAddr::new(remote, 5001), listener);
    let full = net.mss(client);
    let mut bulk = Bulk::new(client, server, 2_000_000);
    bulk.until_in_flight(&mut net, 30_000);

    // Forged (RFC 5927 4.1): a sequence number 100,000 before SND.UNA.
    let (packet, _) = fresh_segment(&mut net, &mut bulk, &sent);
    let una = net.a.interface().connection(client).unwrap().sequence_space().snd_una;
    let forged = message(&with_seq(&packet, SeqNum(una.0.wrapping_sub(100_000))), mtu);
    net.inject_into_a(&[forged]);
    net.run_until(|n| n.a.counters().drops(Drop::IcmpOutOfWindow) == 1);
    assert_eq!(net.mss(client), full, "a forged message changes nothing");
    assert_eq!(net.a.counters().path_mtu_lowered, 0);

    // Real: quoting the segment A just sent, in flight.
    let (packet, seq) = fresh_segment(&mut net, &mut bulk, &sent);
    let space = net.a.interface().connection(client).unwrap().sequence_space();
    assert!(space.snd_una.0 <= seq.0 && seq.0 < space.snd_max.0, "the quoted segment is in flight");
    net.inject_into_a(&[message(&packet, mtu)]);
    net.run_until(|n| {
        bulk.pump(n);
        n.a.counters().path_mtu_lowered == 1
    });
    let c = net.a.counters();
    assert_eq!((c.icmp_errors, c.drops(Drop::IcmpOutOfWindow)), (1, 1), "{c}");
    assert_eq!(net.mss(client), mss, "the MSS follows the path MTU");
    // RFC 1191 6.3 / RFC 8201 5.2: the path MTU is the destination's, so the other
    // connection to it takes it too.
    assert_eq!(net.mss(idle), mss, "the other connection to the destination");
    let mark = sent.lock().unwrap().len();
    bulk.finish(&mut net);
    let after = data_packet_lens(&sent.lock().unwrap()[mark..]);
    assert!(after.len() > 100, "the transfer went on after the message");
    assert!(after.iter().all(|&l| l <= mtu as usize), "segments after it fit {mtu}: {:?}", after.iter().max());
    assert!(after.contains(&(mtu as usize)), "and fill it");

    // And it is kept for the destination, so a new connection to it starts with it.
    let (client2, _) = net.connect(SocketAddr::new(remote, 5001), listener);
    assert_eq!(net.mss(client2), mss);
}

#[test]
fn ipv4_frag_needed_in_window_lowers_the_mss_and_a_forged_one_does_not() {
    // 1280 - 20 - 20 = 1240, less 12 bytes of timestamps.
    path_mtu_discovery(B4.into(), |p, mtu| frag_needed(p, mtu as u16), 1280, 1228);
}

#[test]
fn ipv6_packet_too_big_in_window_lowers_the_mss_and_a_forged_one_does_not() {
    // 1280 - 40 - 20 = 1220, less 12 bytes of timestamps.
    path_mtu_discovery(B6.into(), packet_too_big, 1280, 1208);
}

#[test]
fn an_ipv6_packet_too_big_below_1280_is_ignored() {
    // RFC 8201 4: a node must not reduce its estimate below the IPv6 minimum link MTU.
    let mut net = Net::dual_stack();
    let sent = Collector::install(&mut net.a);
    let listener = net.b.listen(5001).unwrap();
    let (client, server) = net.connect(SocketAddr::new(B6.into(), 5001), listener);
    let mut bulk = Bulk::new(client, server, 300_000);
    bulk.until_in_flight(&mut net, 20_000);
    let (packet, _) = fresh_segment(&mut net, &mut bulk, &sent);
    net.inject_into_a(&[packet_too_big(&packet, 1000)]);
    net.run_until(|n| n.a.counters().drops(Drop::IcmpIgnored) == 1);
    assert_eq!(net.mss(client), 1428);
    assert_eq!(net.a.counters().path_mtu_lowered, 0);
    bulk.finish(&mut net);
}

#[test]
fn icmpv6_errors_from_the_unspecified_address_are_dropped() {
    // RFC 4443 2.2: an error's source is a unicast address of the node that sends it; only
    // Neighbour Discovery may come from :: (RFC 4861 7.1.1 duplicate address detection).
    let mut net = Net::dual_stack();
    let sent = Collector::install(&mut net.a);
    let listener = net.b.listen(5001).unwrap();
    let (client, server) = net.connect(SocketAddr::new(B6.into(), 5001), listener);
    let mut bulk = Bulk::new(client, server, 300_000);
    bulk.until_in_flight(&mut net, 20_000);
    let (packet, _) = fresh_segment(&mut net, &mut bulk, &sent);
    net.inject_into_a(&[packet_too_big_from(Ipv6Addr::UNSPECIFIED, &packet, 1280)]);
    net.run_until(|n| n.a.counters().drops(Drop::MartianSource) == 1);
    assert_eq!(net.a.counters().path_mtu_lowered, 0);
    assert_eq!(net.mss(client), 1428);
    bulk.finish(&mut net);
}

// -------------------------------------------------------------------------------------
// Hard and soft errors (RFC 1122 4.2.3.9, RFC 9293 3.9.2.2, RFC 5461).
// -------------------------------------------------------------------------------------

#[test]
fn port_unreachable_in_syn_sent_refuses_the_connect() {
    // A's peer is a raw device: it answers ARP and then the SYN with ICMP port unreachable
    // (type 3 code 3) quoting it (seq = ISS).
    let _ = env_logger::builder().is_test(true).try_init();
    let (da, mut peer) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
    let mut a = Stack::new(da, StackConfig::new(A4, 24, [1; 16]));
    let mut now = Instant::ZERO;
    a.set_time(now);
    let id = a.connect(SocketAddr::new(B4.into(), 80)).unwrap();
    let iss = a.interface().connection(id).unwrap().sequence_space().iss;
    let mut events = Vec::new();
    while !events.contains(&Event::Unreachable) {
        assert!(now < at(10.0), "no Unreachable event; events {events:?}");
        a.poll().unwrap();
        while let Some((_, e)) = a.poll_event() {
            events.push(e);
        }
        now += Duration::from_millis(1);
        a.device().clock().advance_to(now);
        a.set_time(now);
        let mut got = Vec::new();
        peer.recv(64, &mut |f| got.push(f.to_vec())).unwrap();
        let mut answers = Vec::new();
        for f in got {
            match u16::from_be_bytes([f[12], f[13]]) {
                0x0806 => {
                    let mut reply = vec![0u8; arp::ARP_FRAME_LEN];
                    arp::write_frame(&mut reply, ArpOperation::REPLY, MAC_B, B4, MAC_A, A4);
                    answers.push(reply);
                }
                0x0800 if f[23] == TCP => {
                    let seg = Segment::parse_unchecked(&f[34..]).unwrap();
                    assert!(seg.flags.syn() && seg.seq == iss, "the SYN carries the ISS");
                    let icmp = icmpv4(3, 3, [0; 4], &f[14..14 + 28]);
                    answers.push(ipv4_frame((MAC_B, MAC_A), (B4, A4), ICMP, &icmp));
                }
                _ => {}
            }
        }
        send_raw(&mut peer, &answers);
    }
    assert_eq!(a.state(id), State::Closed);
    assert_eq!(a.interface().connection(id).unwrap().error(), Some(IcmpError::PortUnreachable));
    let err = a.read(id, &mut [0; 8]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert_eq!(a.counters().icmp_errors, 1);
    assert_eq!(a.counters().tcp_segments_out, 1, "no SYN retransmission, no RST");
}

#[test]
fn icmpv6_port_unreachable_in_syn_sent_aborts_the_connection() {
    // ICMPv6 type 1 code 4 (RFC 4443 3.1) maps to port unreachable: hard (RFC 1122 4.2.3.9).
    let mut host = Host::dual_stack();
    let id = host.iface.connect(host.now, SocketAddr::new(A6.into(), 80)).unwrap();
    host.sent();
    host.advance_to(host.now);
    host.sent(); // the solicitation for A
    let mut na_body = A6.octets().to_vec();
    na_body.extend_from_slice(&[2, 1]);
    na_body.extend_from_slice(&MAC_A);
    let na = icmpv6(A6, B6, 136, 0, [0x60, 0, 0, 0], &na_body);
    let mut frame = ipv6_frame((MAC_A, MAC_B), (A6, B6), ICMPV6, &na);
    frame[14 + 7] = 255;
    host.receive(&frame);
    let syn = host.sent();
    assert_eq!(syn.len(), 1, "the SYN, released");
    let quote = &syn[0][14..];
    // First an error quoting another sequence number: ignored (RFC 5927 4.1).
    let stale = icmpv6(A6, B6, 1, 4, [0; 4], &with_seq(quote, SeqNum(12345)));
    host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), ICMPV6, &stale));
    assert_eq!(host.iface.connection(id).unwrap().state(), State::SynSent);
    assert_eq!(host.iface.counters().drops(Drop::IcmpOutOfWindow), 1);
    let icmp = icmpv6(A6, B6, 1, 4, [0; 4], quote);
    host.receive(&ipv6_frame((MAC_A, MAC_B), (A6, B6), ICMPV6, &icmp));
    host.sent();
    let conn = host.iface.connection(id).unwrap();
    assert_eq!(conn.state(), State::Closed);
    assert_eq!(conn.error(), Some(IcmpError::PortUnreachable));
    let mut events = Vec::new();
    while let Some((_, e)) = host.iface.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&Event::Unreachable), "{events:?}");
}

#[test]
fn host_unreachable_when_established_is_soft() {
    // RFC 9293 3.9.2.2 (MUST-56) and RFC 5927 5.2: in the synchronized states no ICMP error
    // aborts; it is kept for the application and cleared by an acceptable ACK.
    let mut net = Net::dual_stack();
    let sent = Collector::install(&mut net.a);
    let listener = net.b.listen(5001).unwrap();
    let (client, server) = net.connect(SocketAddr::new(B4.into(), 5001), listener);
    let mut bulk = Bulk::new(client, server, 500_000);
    bulk.until_in_flight(&mut net, 20_000);
    let (packet, _) = fresh_segment(&mut net, &mut bulk, &sent);
    // Host unreachable (type 3 code 1) and protocol unreachable (code 2, hard in RFC 1122
    // terms), both in window.
    for code in [1, 2] {
        let icmp = icmpv4(3, code, [0; 4], &packet[..28]);
        net.inject_into_a(&[ipv4_frame((MAC_B, MAC_A), (ROUTER4, A4), ICMP, &icmp)]);
    }
    net.run_until(|n| n.a.counters().icmp_errors == 2);
    assert_eq!(net.a.state(client), State::Established);
    assert!(net.a.interface().connection(client).unwrap().error().is_some(), "the error is kept");
    bulk.finish(&mut net);
    assert_eq!(net.a.interface().connection(client).unwrap().error(), None, "an acceptable ACK cleared it");
    assert_eq!(net.a.state(client), State::Established);
    net.a.write(client, b"still here").unwrap();
    let mut buf = [0u8; 16];
    let mut got = 0;
    net.run_until(|n| {
        if let Ok(k) = n.b.read(server, &mut buf) {
            got = k;
        }
        got == 10
    });
}

// -------------------------------------------------------------------------------------
// Never panic on bytes from the wire.
// -------------------------------------------------------------------------------------

/// xorshift64* (Vigna): deterministic and good enough to pick bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Random frames for B: IPv6 from random sources on its link (never A's addresses, so that
/// A's own traffic stands) and IPv4 fragments.
struct Storm {
    rng: Rng,
    /// B's IPv6 connection to A: its port, A's port, SND.UNA and the bytes in flight, for
    /// ICMPv6 errors that quote it, some in the window.
    quote: (u16, u16, u32, u32),
    /// The rest of a whole train of fragments being sent, last first.
    pending: Vec<Vec<u8>>,
    /// The identification of the last whole train.
    train: u32,
}

impl Storm {
    fn new(seed: u64, quote: (u16, u16, u32, u32)) -> Storm {
        Storm { rng: Rng(seed), quote, pending: Vec::new(), train: 0 }
    }

    /// The next frame of the storm: mostly IPv6, every fourth an IPv4 fragment, and now and
    /// then a whole train of fragments (an echo request, or random bytes as any protocol)
    /// in random order, sometimes with one fragment overlapping.
    fn frame(&mut self, i: usize) -> Vec<u8> {
        if let Some(f) = self.pending.pop() {
            return f;
        }
        if self.rng.chance(4) {
            self.whole_train(i.is_multiple_of(2));
            if let Some(f) = self.pending.pop() {
                return f;
            }
        }
        if i % 4 == 3 { self.ipv4_fragment() } else { self.ipv6_frame() }
    }

    fn whole_train(&mut self, v6: bool) {
        self.train += 1;
        let id = self.train;
        let rng = &mut self.rng;
        let len = 8 + rng.below(5000);
        let echo = rng.chance(70);
        let wild = rng.next() as u8;
        let proto = if echo { if v6 { ICMPV6 } else { ICMP } } else { rng.pick(&[TCP, 17, wild]) };
        let data = rng.bytes(len - 8);
        let datagram = match (echo, v6) {
            (true, true) => icmpv6(A6, B6, 128, 0, [0, 7, 0, 7], &data),
            (true, false) => icmpv4(8, 0, [0, 7, 0, 7], &data),
            (false, _) => rng.bytes(len),
        };
        let piece = 8 * (1 + rng.below(180));
        let mut frames: Vec<Vec<u8>> = datagram
            .chunks(piece)
            .enumerate()
            .map(|(k, chunk)| {
                let (offset, more) = (k * piece, (k + 1) * piece < datagram.len());
                if v6 {
                    ipv6_frame((MAC_A, MAC_B), (A6, B6), FRAGMENT, &fragment6(proto, offset, more, id, chunk))
                } else {
                    ipv4_fragment((MAC_A, MAC_B), (A4, B4), proto, (id as u16, offset, more), chunk)
                }
            })
            .collect();
        for k in (1..frames.len()).rev() {
            frames.swap(k, rng.below(k + 1));
        }
        if rng.chance(10) && frames.len() > 1 {
            // One fragment moved 8 bytes on: it overlaps its neighbour (RFC 5722).
            let k = rng.below(frames.len());
            let at = if v6 { 14 + 40 + 3 } else { 14 + 7 };
            frames[k][at] = frames[k][at].wrapping_add(if v6 { 8 } else { 1 });
            if !v6 {
                frames[k][14 + 10..14 + 12].fill(0);
                let sum = internet_checksum(&frames[k][14..34]);
                frames[k][14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
            }
        }
        self.pending = frames;
    }

    fn source(&mut self) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 1, self.rng.next() as u16, self.rng.next() as u16)
    }

    /// A random chain of extension headers ending in random bytes, and its first Next Header.
    fn chain(&mut self) -> (u8, Vec<u8>) {
        let rng = &mut self.rng;
        let kinds = [0u8, 43, 44, 60, 58, 6, 59, 17, 50, 135];
        let first = if rng.chance(90) { rng.pick(&kinds) } else { rng.next() as u8 };
        let mut p = Vec::new();
        for _ in 0..rng.below(4) {
            let next = if rng.chance(80) { rng.pick(&kinds) } else { rng.next() as u8 };
            let len = rng.below(3) as u8;
            p.push(next);
            p.push(len);
            p.extend(rng.bytes(6 + 8 * usize::from(len)));
        }
        let tail = rng.below(120);
        p.extend(rng.bytes(tail));
        (first, p)
    }

    /// A random ICMPv6 message with a right checksum: errors quoting B's address (some its
    /// real connection, some in its window), echo, Neighbour Discovery with random options.
    fn icmpv6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let (port, peer_port, una, flight) = self.quote;
        let real = self.rng.chance(40);
        let theirs = if real { A6 } else { self.source() };
        let rng = &mut self.rng;
        let kinds = [1u8, 2, 3, 4, 128, 129, 133, 134, 135, 136, 137];
        let kind = if rng.chance(90) { rng.pick(&kinds) } else { rng.next() as u8 };
        let code = if rng.chance(70) { 0 } else { rng.below(10) as u8 };
        let mut word: [u8; 4] = rng.bytes(4).try_into().unwrap();
        if kind == 2 && rng.chance(70) {
            word = (1200 + rng.below(400) as u32).to_be_bytes();
        }
        let mut body = Vec::new();
        match kind {
            1..=4 if rng.chance(80) => {
                let ip = Ipv6Header {
                    traffic_class: 0,
                    flow_label: Ipv6FlowLabel::ZERO,
                    payload_length: rng.below(2000) as u16,
                    next_header: IpNumber(rng.pick(&[6u8, 6, 17, 44])),
                    hop_limit: 64,
                    source: B6.octets(),
                    destination: theirs.octets(),
                };
                body.extend_from_slice(&ip.to_bytes());
                if real {
                    // Mostly just below SND.MAX: sent last, still in flight when the error
                    // arrives.
                    let back = 1 + rng.below(flight.clamp(1, 1000) as usize) as u32;
                    let near = una.wrapping_add(flight).wrapping_sub(back);
                    let seq = if rng.chance(60) { near } else { rng.next() as u32 };
                    body.extend_from_slice(&port.to_be_bytes());
                    body.extend_from_slice(&peer_port.to_be_bytes());
                    body.extend_from_slice(&seq.to_be_bytes());
                }
                let tail = rng.below(40);
                body.extend(rng.bytes(tail));
            }
            133..=137 => {
                let fixed = rng.pick(&[0usize, 4, 8, 16, 32]);
                body.extend(rng.bytes(fixed));
                if rng.chance(50) {
                    body[..fixed.min(16)].copy_from_slice(&B6.octets()[..fixed.min(16)]);
                }
                for _ in 0..rng.below(4) {
                    let kind = rng.pick(&[1u8, 2, 3, 5, 0, 9]);
                    let units = rng.below(5);
                    body.push(kind);
                    body.push(units as u8);
                    let n = if rng.chance(90) { (units * 8).saturating_sub(2) } else { rng.below(30) };
                    body.extend(rng.bytes(n));
                }
            }
            _ => {
                let n = rng.below(200);
                body.extend(rng.bytes(n));
            }
        }
        icmpv6(src, dst, kind, code, word, &body)
    }

    /// One random IPv6 frame to B: valid Ethernet and IPv6 headers, then a random chain, a
    /// random ICMPv6 message or a fragment (from a few sources, so that trains complete);
    /// sometimes mutated or truncated afterwards.
    fn ipv6_frame(&mut self) -> Vec<u8> {
        let mut src = self.source();
        if self.rng.chance(3) {
            src = self.rng.pick(&[Ipv6Addr::UNSPECIFIED, Ipv6Addr::LOCALHOST, ndp::ALL_NODES]);
        }
        let dsts = [B6, B6, ndp::link_local_from_mac(MAC_B), ndp::solicited_node(B6), ndp::ALL_NODES];
        let dst = self.rng.pick(&dsts);
        let dst_mac = if dst.is_multicast() { ndp::multicast_mac(dst) } else { MAC_B };
        let (next, payload) = match self.rng.below(3) {
            0 => self.chain(),
            1 => (ICMPV6, self.icmpv6(src, dst)),
            _ => {
                src = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 2, 0, self.rng.below(4) as u16);
                let rng = &mut self.rng;
                let next = rng.pick(&[ICMPV6, ICMPV6, TCP, 59, 0, 44, 17]);
                let offset = if rng.chance(95) { 8 * rng.below(8) } else { rng.below(65536) };
                let len = if rng.chance(80) { 8 * rng.below(6) } else { rng.below(100) };
                let data = if next == ICMPV6 && offset == 0 && len >= 8 {
                    let mut d = icmpv6(src, dst, 128, 0, [0, 1, 0, 1], &rng.bytes(len - 8));
                    d.truncate(len);
                    d
                } else {
                    rng.bytes(len)
                };
                let more = rng.chance(60);
                (FRAGMENT, fragment6(next, offset, more, rng.below(4) as u32, &data))
            }
        };
        let rng = &mut self.rng;
        let mut f = ipv6_frame((MAC_A, dst_mac), (src, dst), next, &payload);
        if rng.chance(50) {
            f[14 + 7] = 255;
        }
        if rng.chance(10) {
            let len = rng.next() as u16;
            f[18..20].copy_from_slice(&len.to_be_bytes());
        }
        if rng.chance(15) {
            for _ in 0..1 + rng.below(4) {
                let i = 14 + rng.below(f.len() - 14);
                f[i] = rng.next() as u8;
            }
        }
        if rng.chance(5) {
            let keep = 14 + rng.below(f.len() - 13);
            f.truncate(keep);
        }
        f
    }

    /// One random IPv4 fragment to B: a valid header from one of a few sources on the link,
    /// random identification, offset, flags and data.
    fn ipv4_fragment(&mut self) -> Vec<u8> {
        let rng = &mut self.rng;
        let src = Ipv4Addr::new(10, 9, 0, 100 + rng.below(4) as u8);
        let wild = rng.next() as u8;
        let proto = rng.pick(&[ICMP, ICMP, ICMP, TCP, 17, wild]);
        let offset = if rng.chance(95) { 8 * rng.below(8) } else { 8 * rng.below(8192) };
        let len = if rng.chance(80) { 8 * rng.below(6) } else { rng.below(100) };
        let mut data = rng.bytes(len);
        if proto == ICMP && offset == 0 && len >= 8 {
            data[0] = 8;
            data[1] = 0;
        }
        let more = rng.chance(60);
        let mut f = ipv4_fragment((MAC_A, MAC_B), (src, B4), proto, (rng.below(4) as u16, offset, more), &data);
        if rng.chance(5) {
            let i = 14 + rng.below(f.len() - 14);
            f[i] = rng.next() as u8;
        }
        f
    }
}

#[test]
fn twenty_thousand_random_frames_do_not_disturb_the_host() {
    // STYLE: never panic on bytes from the wire; RFC 5927: ICMP errors in the window do not
    // break a connection in the synchronized states.
    let mut net = Net::dual_stack();
    let listener = net.b.listen(7).unwrap();
    // A connection of each family up before the storm, kept through it; B sends A data on
    // the IPv6 one all along, so that errors quoting it may fall in its window.
    let (c4, s4) = net.connect(SocketAddr::new(B4.into(), 7), listener);
    let (c6, s6) = net.connect(SocketAddr::new(B6.into(), 7), listener);
    let a_port = net.a.interface().connection(c6).unwrap().tuple().unwrap().local.port();
    let pattern = |i: usize| (i * 7 % 251) as u8;
    let (mut down_sent, mut down_got) = (0usize, Vec::new());
    let mut storm = Storm::new(0x00c0_ffee_1234_5678, (7, a_port, 0, 0));
    let before = net.b.counters().clone();
    let mut batch = Vec::new();
    for i in 0..20_000 {
        batch.push(storm.frame(i));
        if batch.len() < 200 {
            continue;
        }
        net.inject_into_b(&batch);
        batch.clear();
        for _ in 0..3 {
            let chunk: Vec<u8> = (down_sent..down_sent + 262_144).map(pattern).collect();
            if let Ok(k) = net.b.write(s6, &chunk) {
                down_sent += k;
            }
            net.step();
            let space = net.b.interface().connection(s6).unwrap().sequence_space();
            storm.quote = (7, a_port, space.snd_una.0, space.snd_max.0.wrapping_sub(space.snd_una.0));
            let mut buf = [0u8; 65536];
            while let Ok(k @ 1..) = net.a.read(c6, &mut buf) {
                down_got.extend_from_slice(&buf[..k]);
            }
        }
    }
    // The link delivers the storm's tail as virtual time moves on: how far 300 steps go
    // depends on B's own timers (its pacer, once slow start is over), so step on until B
    // has taken every frame (the virtual deadline fails the test otherwise).
    net.run_until(|n| n.b.counters().rx_frames - before.rx_frames >= 20_000);
    let c = net.b.counters().clone();
    assert!(c.total_drops() - before.total_drops() > 10_000, "most of the storm was dropped: {c}");
    assert!(c.fragments_reassembled > 10, "some trains completed: {c}");
    assert!(c.icmp_errors > 0, "some errors fell in the window: {c}");
    assert_eq!(net.b.state(s6), State::Established, "{c}");
    // What B sent A through the storm arrives whole.
    net.run_until(|n| {
        let mut buf = [0u8; 65536];
        while let Ok(k @ 1..) = n.a.read(c6, &mut buf) {
            down_got.extend_from_slice(&buf[..k]);
        }
        down_got.len() == down_sent
    });
    assert!(down_got.iter().enumerate().all(|(i, &b)| b == pattern(i)), "the data through the storm is intact");
    // The old connections still carry data both ways, and new ones open in both families.
    let (n4, m4) = net.connect(SocketAddr::new(B4.into(), 7), listener);
    let (n6, m6) = net.connect(SocketAddr::new(B6.into(), 7), listener);
    for (client, server) in [(c4, s4), (c6, s6), (n4, m4), (n6, m6)] {
        let mut bulk = Bulk::new(client, server, 50_000);
        bulk.finish(&mut net);
        net.b.write(server, b"pong").unwrap();
        let mut buf = [0u8; 8];
        let mut got = 0;
        net.run_until(|n| {
            if let Ok(k) = n.a.read(client, &mut buf) {
                got = k;
            }
            got == 4
        });
    }
}
