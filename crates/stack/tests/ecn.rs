//! ECN in the host (RFC 3168 5, 6.1): the ECN field of the IPv4 header and of the IPv6
//! Traffic Class read on arrival and handed to TCP, kept through fragment reassembly (RFC 3168
//! 5.3), and written on what we send. One `Interface` fed frames by hand.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod common;

use bypass_stack::Drop;
use bypass_stack::StackConfig;
use bypass_tcp::{Flags, Segment, SeqNum, State};
use common::Host;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const MAC_A: [u8; 6] = bypass_device::MAC_A;
const MAC_B: [u8; 6] = bypass_device::MAC_B;
const ISN: SeqNum = SeqNum(0x1000);

/// Return an Ethernet frame from A to B carrying `seg` in IPv4 with the ECN field `ecn`.
fn frame(seg: &Segment<'_>, ecn: u8) -> Vec<u8> {
    let mut tcp = [0u8; 1600];
    let n = seg.emit(A.into(), B.into(), &mut tcp).unwrap();
    let mut ip = Ipv4Header::new(n as u16, 64, IpNumber::TCP, A.octets(), B.octets()).unwrap();
    ip.ecn = etherparse::IpEcn::try_new(ecn).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut f = Ethernet2Header { source: MAC_A, destination: MAC_B, ether_type: EtherType::IPV4 }.to_bytes().to_vec();
    f.extend_from_slice(&ip.to_bytes());
    f.extend_from_slice(&tcp[..n]);
    f
}

/// The TCP segments among `frames`, each with the ECN field of its IPv4 header and its
/// flags, sequence number and payload length.
fn segments(frames: &[Vec<u8>]) -> Vec<(u8, Flags, SeqNum, usize)> {
    frames
        .iter()
        .filter(|f| f.len() >= 54 && f[12..14] == [0x08, 0x00] && f[23] == 6)
        .map(|f| {
            let seg = Segment::parse(&f[34..], B.into(), A.into()).unwrap();
            (f[15] & 0b11, seg.flags, seg.seq, seg.payload.len())
        })
        .collect()
}

const TEMPLATE: Segment<'static> =
    Segment { src_port: 40000, dst_port: 7, window: 65535, flags: Flags::ACK, ..Segment::EMPTY };

#[test]
fn a_ce_mark_draws_ece_and_our_new_data_goes_ect0() {
    let mut host = Host::new(StackConfig::new(B, 24, [5; 16]), MAC_B);
    let listener = host.iface.listen(7).unwrap();
    // An ECN-setup SYN draws an ECN-setup SYN-ACK (the default, as Linux's tcp_ecn=2), sent
    // Not-ECT (RFC 3168 6.1.1).
    host.receive(&frame(&Segment { seq: ISN, flags: Flags::SYN | Flags::ECE | Flags::CWR, ..TEMPLATE }, 0));
    let sent = segments(&host.sent());
    assert_eq!(sent.len(), 1);
    let (ecn, flags, iss, _) = sent[0];
    assert_eq!((ecn, flags), (0, Flags::SYN | Flags::ACK | Flags::ECE));
    host.receive(&frame(&Segment { seq: ISN + 1u32, ack: iss + 1u32, ..TEMPLATE }, 0));
    let id = host.iface.accept(listener).expect("established");
    assert_eq!(host.iface.connection(id).unwrap().state(), State::Established);
    assert!(host.iface.connection(id).unwrap().stats().ecn);
    // Data marked CE (ECT(0) turned to 11 by a router): our ACK goes at once, with ECE, and
    // is not ECN-capable.
    let data = Segment { seq: ISN + 1u32, ack: iss + 1u32, payload: b"marked", ..TEMPLATE };
    host.receive(&frame(&data, 0b11));
    let sent = segments(&host.sent());
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, 0, "a pure ACK is Not-ECT");
    assert!(sent[0].1.contains(Flags::ECE), "{:?}", sent[0].1);
    assert_eq!(host.iface.connection(id).unwrap().stats().ce_received, 1);
    // Our new data goes ECT(0), and still carries ECE (no CWR yet).
    host.iface.connection_mut(id).unwrap().send(b"reply").unwrap();
    let sent = segments(&host.sent());
    let ours: Vec<_> = sent.iter().filter(|s| s.3 > 0).collect();
    assert_eq!(ours.len(), 1, "{sent:?}");
    assert_eq!(ours[0].0, 0b10, "ECT(0)");
    assert!(ours[0].1.contains(Flags::ECE));
    // An unmarked ECT(0) segment with CWR ends the echo.
    let cwr = Segment { seq: ISN + 7u32, ack: iss + 6u32, flags: Flags::ACK | Flags::CWR, payload: b"x", ..TEMPLATE };
    host.receive(&frame(&cwr, 0b10));
    host.advance_to(host.now + std::time::Duration::from_millis(300));
    let sent = segments(&host.sent());
    assert!(!sent.is_empty() && sent.iter().all(|s| !s.1.contains(Flags::ECE)), "{sent:?}");
    assert_eq!(host.iface.connection(id).unwrap().stats().ce_received, 1);
}

// ---- IPv6, and fragments (RFC 3168 5.3) ----

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 2);

/// Return the Ethernet frames from A to B that carry `seg` over IP (`v6` or IPv4): whole
/// if `fields` has one ECN field, else cut in as many fragments (of 8 bytes each but the
/// last), fragment `i` with ECN field `fields[i]`.
fn frames(seg: &Segment<'_>, v6: bool, fields: &[u8]) -> Vec<Vec<u8>> {
    let (src, dst): (IpAddr, IpAddr) = if v6 { (A6.into(), B6.into()) } else { (A.into(), B.into()) };
    let mut tcp = [0u8; 1600];
    let n = seg.emit(src, dst, &mut tcp).unwrap();
    let tcp = &tcp[..n];
    let pieces = fields.len();
    let cut = |i: usize| {
        if pieces == 1 {
            return tcp;
        }
        let start = 8 * i;
        if i + 1 == pieces { &tcp[start..] } else { &tcp[start..start + 8] }
    };
    (0..pieces)
        .map(|i| {
            let data = cut(i);
            let more = i + 1 < pieces;
            let ether_type = if v6 { EtherType::IPV6 } else { EtherType::IPV4 };
            let mut f = Ethernet2Header { source: MAC_A, destination: MAC_B, ether_type }.to_bytes().to_vec();
            if v6 {
                let mut body = Vec::new();
                let next = if pieces == 1 {
                    IpNumber::TCP
                } else {
                    // The Fragment header (RFC 8200 4.5): TCP next, offset in 8-byte units, M.
                    let off = ((8 * i as u16) & !7) | u16::from(more);
                    body.extend_from_slice(&[6, 0]);
                    body.extend_from_slice(&off.to_be_bytes());
                    body.extend_from_slice(&0x0e0e_0001u32.to_be_bytes());
                    IpNumber::IPV6_FRAGMENTATION_HEADER
                };
                body.extend_from_slice(data);
                let ip = Ipv6Header {
                    traffic_class: fields[i],
                    flow_label: Ipv6FlowLabel::ZERO,
                    payload_length: body.len() as u16,
                    next_header: next,
                    hop_limit: 64,
                    source: A6.octets(),
                    destination: B6.octets(),
                };
                f.extend_from_slice(&ip.to_bytes());
                f.extend_from_slice(&body);
            } else {
                let mut ip = Ipv4Header::new(data.len() as u16, 64, IpNumber::TCP, A.octets(), B.octets()).unwrap();
                ip.ecn = etherparse::IpEcn::try_new(fields[i]).unwrap();
                ip.identification = 0x0e0e;
                ip.more_fragments = more;
                ip.dont_fragment = false;
                ip.fragment_offset = etherparse::IpFragOffset::try_new(i as u16).unwrap();
                ip.header_checksum = ip.calc_header_checksum();
                f.extend_from_slice(&ip.to_bytes());
                f.extend_from_slice(data);
            }
            f
        })
        .collect()
}

/// What B sent: (ECN field, flags, payload length) of each TCP segment, either family.
fn sent_segments(host: &mut Host, v6: bool) -> Vec<(u8, Flags, usize)> {
    host.sent()
        .iter()
        .filter_map(|f| {
            if v6 {
                let ip = Ipv6Header::from_slice(&f[14..]).ok()?.0;
                (ip.next_header == IpNumber::TCP).then_some(())?;
                let seg = Segment::parse(&f[54..], B6.into(), A6.into()).ok()?;
                Some((ip.traffic_class & 0b11, seg.flags, seg.payload.len()))
            } else {
                (f[12..14] == [0x08, 0x00] && f[23] == 6).then_some(())?;
                let seg = Segment::parse(&f[34..], B.into(), A.into()).ok()?;
                Some((f[15] & 0b11, seg.flags, seg.payload.len()))
            }
        })
        .collect()
}

/// Open an ECN connection to B's port 7 from A over `v6` or IPv4; return it and B's ISS.
fn ecn_connection(host: &mut Host, v6: bool) -> (bypass_stack::SocketId, SeqNum) {
    let listener = host.iface.listen(7).unwrap();
    for f in frames(&Segment { seq: ISN, flags: Flags::SYN | Flags::ECE | Flags::CWR, ..TEMPLATE }, v6, &[0]) {
        host.receive(&f);
    }
    let sent = host.sent();
    let seg = if v6 {
        Segment::parse(&sent[0][54..], B6.into(), A6.into())
    } else {
        Segment::parse(&sent[0][34..], B.into(), A.into())
    };
    let syn_ack = seg.expect("a SYN-ACK");
    assert_eq!(syn_ack.flags, Flags::SYN | Flags::ACK | Flags::ECE, "an ECN-setup SYN-ACK");
    let iss = syn_ack.seq;
    for f in frames(&Segment { seq: ISN + 1u32, ack: iss + 1u32, ..TEMPLATE }, v6, &[0]) {
        host.receive(&f);
    }
    let id = host.iface.accept(listener).expect("established");
    assert!(host.iface.connection(id).unwrap().stats().ecn);
    (id, iss)
}

#[test]
fn an_ipv6_ce_mark_draws_ece() {
    let mut host = Host::new(StackConfig::new(B6, 64, [6; 16]), MAC_B);
    let (id, iss) = ecn_connection(&mut host, true);
    let data = Segment { seq: ISN + 1u32, ack: iss + 1u32, payload: b"marked", ..TEMPLATE };
    for f in frames(&data, true, &[0b11]) {
        host.receive(&f);
    }
    let sent = sent_segments(&mut host, true);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].1.contains(Flags::ECE), "{sent:?}");
    assert_eq!(host.iface.connection(id).unwrap().stats().ce_received, 1);
    // Our data goes ECT(0) in the Traffic Class.
    host.iface.connection_mut(id).unwrap().send(b"reply").unwrap();
    let ours: Vec<_> = sent_segments(&mut host, true).into_iter().filter(|s| s.2 > 0).collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].0, 0b10, "ECT(0)");
}

#[test]
fn a_ce_mark_on_one_fragment_reaches_tcp_and_a_not_ect_mix_is_dropped() {
    for v6 in [false, true] {
        let mut host = if v6 {
            Host::new(StackConfig::new(B6, 64, [7; 16]), MAC_B)
        } else {
            Host::new(StackConfig::new(B, 24, [7; 16]), MAC_B)
        };
        let (id, iss) = ecn_connection(&mut host, v6);
        // 20 bytes of header and 12 of data in four fragments: ECT(0), CE, ECT(0), ECT(0).
        let data = Segment { seq: ISN + 1u32, ack: iss + 1u32, payload: b"twelve bytes", ..TEMPLATE };
        for f in frames(&data, v6, &[0b10, 0b11, 0b10, 0b10]) {
            host.receive(&f);
        }
        let sent = sent_segments(&mut host, v6);
        assert!(sent.iter().any(|s| s.1.contains(Flags::ECE)), "v6 {v6}: {sent:?}");
        let conn = host.iface.connection(id).unwrap();
        assert_eq!((conn.stats().ce_received, conn.stats().bytes_in), (1, 12), "v6 {v6}");
        // A datagram whose fragments mix Not-ECT with ECT(0) is discarded whole: its data never
        // reaches TCP (RFC 3168 5.3; Linux's ip_frag_ecn_table).
        let before = host.iface.counters().drops(Drop::FragmentDropped);
        let more = Segment { seq: ISN + 13u32, ack: iss + 1u32, payload: b"not this one", ..TEMPLATE };
        for f in frames(&more, v6, &[0b10, 0b00, 0b10, 0b10]) {
            host.receive(&f);
        }
        assert!(host.iface.counters().drops(Drop::FragmentDropped) > before, "v6 {v6}");
        assert_eq!(host.iface.connection(id).unwrap().stats().bytes_in, 12, "v6 {v6}");
    }
}
