//! ECN in the host (RFC 3168 5, 6.1): the ECN field of the IPv4 header read on arrival and
//! handed to TCP, and written on what we send. One `Interface` fed frames by hand.

use std::net::Ipv4Addr;

mod common;

use bypass_stack::StackConfig;
use bypass_tcp::{Flags, Segment, SeqNum, State};
use common::Host;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header};

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
