//! The Ethernet and IP headers in front of a connection's segments, which the host writes
//! from a template kept per connection (`bypass_stack::wire::HeaderTemplate`): they carry
//! the next hop's current MAC address, the segment's length and a valid IPv4 checksum,
//! byte for byte what `write_ip_headers` writes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

mod common;

use bypass_stack::StackConfig;
use bypass_stack::wire::{ETH_LEN, HEADERS4, arp, write_ip_headers};
use bypass_tcp::{IpEcn, State};
use common::Host;
use etherparse::{ArpOperation, IpNumber, Ipv4HeaderSlice};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const MAC_A: [u8; 6] = bypass_device::MAC_A;
/// B's MAC address, then the one it moves to.
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb1];
const MAC_B2: [u8; 6] = [2, 0, 0, 0, 0, 0xb2];

/// Return an ARP reply from B at `mac` to A.
fn arp_reply(mac: [u8; 6]) -> Vec<u8> {
    let mut frame = vec![0u8; arp::ARP_FRAME_LEN];
    arp::write_frame(&mut frame, ArpOperation::REPLY, mac, B, MAC_A, A);
    frame
}

/// Check that `frame` is a TCP segment from A to B at `mac` whose headers are those
/// `write_ip_headers` writes for its length.
fn assert_headers(frame: &[u8], mac: [u8; 6]) {
    assert_eq!(frame[..6], mac, "to the next hop's current MAC address");
    let ip = Ipv4HeaderSlice::from_slice(&frame[ETH_LEN..]).expect("an IPv4 header");
    assert_eq!(usize::from(ip.total_len()), frame.len() - ETH_LEN);
    assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
    let mut expected = [0xa5u8; HEADERS4];
    let len = frame.len() - HEADERS4;
    write_ip_headers(&mut expected, MAC_A, mac, IpAddr::V4(A), IpAddr::V4(B), IpNumber::TCP, len, IpEcn::NotEct);
    assert_eq!(frame[..HEADERS4], expected);
}

#[test]
fn a_connections_segments_follow_its_next_hop_to_a_new_mac_address() {
    let mut host = Host::new(StackConfig::new(A, 24, [1; 16]), MAC_A);
    let id = host.iface.connect(host.now, SocketAddr::new(B.into(), 80)).unwrap();
    assert!(host.sent().is_empty(), "the SYN waits for B's address");
    host.advance_to(host.now);
    let request = host.sent();
    assert_eq!(request.len(), 1, "an ARP request");
    host.receive(&arp_reply(MAC_B));
    let syn = host.sent();
    assert_eq!(syn.len(), 1, "the SYN, released");
    assert_headers(&syn[0], MAC_B);

    // The retransmissions go through the connection's template: the first builds it for
    // MAC_B; after B moves, the next must not reuse it.
    let mut at = host.now;
    let mut retransmit = |host: &mut Host| {
        for _ in 0..100 {
            at += Duration::from_millis(100);
            host.advance_to(at);
            let sent = host.sent();
            if !sent.is_empty() {
                return sent;
            }
        }
        panic!("no retransmission of the SYN in 10 s");
    };
    let first = retransmit(&mut host);
    assert_eq!(first.len(), 1);
    assert_headers(&first[0], MAC_B);
    host.receive(&arp_reply(MAC_B2));
    assert!(host.sent().is_empty());
    let second = retransmit(&mut host);
    assert_eq!(second.len(), 1);
    assert_headers(&second[0], MAC_B2);
    assert_eq!(host.iface.connection(id).unwrap().state(), State::SynSent);
}

/// The template's MAC address stands for the next hop's only while the ARP entry it came
/// from does: once the entry has expired, the next segment is held for a new resolution
/// (RFC 1122 2.3.2.2) instead of going to the old address, and goes to the address the
/// new answer gives.
#[test]
fn a_connections_segments_stop_at_its_next_hops_expired_mac_address() {
    let mut config = StackConfig::new(A, 24, [1; 16]);
    config.arp.ttl = Duration::from_millis(2500);
    let mut host = Host::new(config, MAC_A);
    let id = host.iface.connect(host.now, SocketAddr::new(B.into(), 80)).unwrap();
    assert!(host.sent().is_empty(), "the SYN waits for B's address");
    host.advance_to(host.now);
    assert_eq!(host.sent().len(), 1, "an ARP request");
    host.receive(&arp_reply(MAC_B));
    let learned = host.now;
    let syn = host.sent();
    assert_eq!(syn.len(), 1, "the SYN, released");
    assert_headers(&syn[0], MAC_B);

    // Step to each retransmission of the SYN: those before the entry expires go to MAC_B
    // from the template; the first after is held, and an ARP request goes out instead.
    let mut at = host.now;
    let mut before = 0;
    loop {
        at += Duration::from_millis(50);
        assert!(at < learned + Duration::from_secs(20), "no retransmission after the entry expired");
        host.advance_to(at);
        let sent = host.sent();
        if sent.is_empty() {
            continue;
        }
        if at < learned + Duration::from_millis(2500) {
            assert_eq!(sent.len(), 1);
            assert_headers(&sent[0], MAC_B);
            before += 1;
            continue;
        }
        assert!(
            sent.iter().all(|f| f[12..14] == [0x08, 0x06]),
            "after the entry expired, ARP requests only, no segment to the old address"
        );
        break;
    }
    assert!(before >= 1, "a retransmission went out while the entry stood");
    host.receive(&arp_reply(MAC_B2));
    let released = host.sent();
    assert_eq!(released.len(), 1, "the held SYN, released");
    assert_headers(&released[0], MAC_B2);
    assert_eq!(host.iface.connection(id).unwrap().state(), State::SynSent);
}
