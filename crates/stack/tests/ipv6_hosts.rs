//! IPv6 hosts on virtual time: Neighbour Discovery (RFC 4861), ICMPv6 echo (RFC 4443), dual
//! stack, routing through a router's link-local address, extension headers (RFC 8200) and
//! martian sources (RFC 4291). Two stacks over the in-memory link where the hosts talk to
//! each other; one `Interface` fed crafted frames where a peer must misbehave.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use std::time::Duration;

mod common;

use bypass_device::LinkConfig;
use bypass_stack::wire::ndp::{self, NdpMessage};
use bypass_stack::{Drop, SocketId, StackConfig};
use bypass_tcp::{Event, Flags, Instant, Segment, SeqNum, State, TcpOptions};
use common::{Collector, Host, Net, ipv6_frame};
use etherparse::icmpv6::NeighborAdvertisementHeader;
use etherparse::{EtherType, Ethernet2Header, Icmpv6Slice, Icmpv6Type, IpNumber, Ipv6Header};

/// The host under test when it is driven by hand.
const US: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const US_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// The peer on its link that the tests speak for.
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
/// A router, by its link-local address (RFC 4861 6.1.2: routers speak from one).
const ROUTER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// A destination off the link.
const FAR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1);

const ICMPV6: u8 = 58;
const TCP: u8 = 6;

// -------------------------------------------------------------------------------------
// Two stacks over the in-memory link.
// -------------------------------------------------------------------------------------

impl Net {
    /// Close both ends of a connection, A first: A ends in TIME-WAIT, B's end is gone.
    fn close(&mut self, client: SocketId, server: SocketId) {
        self.a.close(client);
        self.run_until(|n| n.b.read(server, &mut [0; 8]).ok() == Some(0));
        self.b.close(server);
        self.run_until(|n| n.b.state(server) == State::Closed);
        assert_eq!(self.a.state(client), State::TimeWait, "the active closer waits in TIME-WAIT");
    }
}

/// Send `message` from A on every connection of `pairs` (client, server), echo it back
/// through B, all at once; check every connection brought it back byte for byte.
fn echo(net: &mut Net, pairs: &[(SocketId, SocketId)], message: &[u8]) {
    let n = pairs.len();
    let (mut sent, mut pending, mut echoed) = (vec![0; n], vec![Vec::new(); n], vec![Vec::new(); n]);
    let mut buf = vec![0u8; 65536];
    net.run_until(|net| {
        for (i, &(client, server)) in pairs.iter().enumerate() {
            if sent[i] < message.len()
                && let Ok(k) = net.a.write(client, &message[sent[i]..])
            {
                sent[i] += k;
            }
            if pending[i].is_empty()
                && let Ok(k @ 1..) = net.b.read(server, &mut buf)
            {
                pending[i].extend_from_slice(&buf[..k]);
            }
            if let Ok(k) = net.b.write(server, &pending[i]) {
                pending[i].drain(..k);
            }
            while let Ok(k @ 1..) = net.a.read(client, &mut buf) {
                echoed[i].extend_from_slice(&buf[..k]);
            }
        }
        echoed.iter().all(|e| e.len() >= message.len())
    });
    for (i, e) in echoed.iter().enumerate() {
        assert!(e == message, "connection {i}: the echo differs from what was sent");
    }
}

// -------------------------------------------------------------------------------------
// One interface fed by hand.
// -------------------------------------------------------------------------------------

impl Host {
    /// A host with only `US`/64.
    fn v6() -> Host {
        Host::new(StackConfig::new(US, 64, [3; 16]), US_MAC)
    }
}

/// Return the MAC a packet to `dst` on the link goes to: the multicast one for a group
/// (RFC 2464 7), else ours.
fn mac_for(dst: Ipv6Addr) -> [u8; 6] {
    if dst.is_multicast() { ndp::multicast_mac(dst) } else { US_MAC }
}

/// Return an ICMPv6 message (RFC 4443 2.1) with the 4 bytes after the checksum `word` and
/// `body`, its checksum right for `src` to `dst`.
fn icmpv6(src: Ipv6Addr, dst: Ipv6Addr, kind: u8, code: u8, word: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&word);
    m.extend_from_slice(body);
    let sum = ndp::checksum(src, dst, &m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// Return a Neighbour Solicitation for `target` (RFC 4861 4.3) from `src` at `PEER_MAC` to
/// `dst`, with a source link-layer address option if `slla`.
fn solicitation(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, hop_limit: u8, slla: bool) -> Vec<u8> {
    let mut body = target.octets().to_vec();
    if slla {
        body.extend_from_slice(&[1, 1]);
        body.extend_from_slice(&PEER_MAC);
    }
    let msg = icmpv6(src, dst, 135, 0, [0; 4], &body);
    ipv6_frame((PEER_MAC, mac_for(dst)), src, dst, hop_limit, ICMPV6, &msg)
}

/// Return a Neighbour Advertisement (RFC 4861 4.4) of `target` at `mac` from `src` at `mac`
/// to `dst`, with `flags` (R, S, O) and the target link-layer address option.
fn advertisement(
    mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    flags: NeighborAdvertisementHeader,
) -> Vec<u8> {
    let mut body = target.octets().to_vec();
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&mac);
    let first = u8::from(flags.router) << 7 | u8::from(flags.solicited) << 6 | u8::from(flags.r#override) << 5;
    let msg = icmpv6(src, dst, 136, 0, [first, 0, 0, 0], &body);
    ipv6_frame((mac, mac_for(dst)), src, dst, 255, ICMPV6, &msg)
}

/// Return a Router Advertisement (RFC 4861 4.2) from `src` to all nodes with `hop_limit`
/// and a router lifetime of `lifetime` seconds, with the router's link-layer address
/// option if `slla`.
fn router_advertisement(src: Ipv6Addr, hop_limit: u8, lifetime: u16, slla: bool) -> Vec<u8> {
    let options = if slla { router_slla().to_vec() } else { Vec::new() };
    router_advertisement_with(src, hop_limit, lifetime, &options)
}

/// Return the source link-layer address option (RFC 4861 4.6.1) with `ROUTER_MAC`.
fn router_slla() -> [u8; 8] {
    let m = ROUTER_MAC;
    [1, 1, m[0], m[1], m[2], m[3], m[4], m[5]]
}

/// Return a Router Advertisement as [`router_advertisement`] with `options` (RFC 4861 4.6).
fn router_advertisement_with(src: Ipv6Addr, hop_limit: u8, lifetime: u16, options: &[u8]) -> Vec<u8> {
    let [hi, lo] = lifetime.to_be_bytes();
    // Reachable Time and Retrans Timer unspecified (0).
    let mut body = vec![0u8; 8];
    body.extend_from_slice(options);
    let msg = icmpv6(src, ndp::ALL_NODES, 134, 0, [64, 0, hi, lo], &body);
    ipv6_frame((ROUTER_MAC, ndp::multicast_mac(ndp::ALL_NODES)), src, ndp::ALL_NODES, hop_limit, ICMPV6, &msg)
}

/// Return the TCP SYN of a peer from `src`:`port` to `dst`:80, its checksum right for them.
fn syn(src: IpAddr, dst: IpAddr, port: u16) -> Vec<u8> {
    let seg = Segment {
        src_port: port,
        dst_port: 80,
        seq: SeqNum(0x1000),
        flags: Flags::SYN,
        window: 65535,
        options: TcpOptions { mss: Some(1440), ..TcpOptions::NONE },
        ..Segment::EMPTY
    };
    let mut buf = [0u8; 64];
    let n = seg.emit(src, dst, &mut buf).unwrap();
    buf[..n].to_vec()
}

/// Split a frame the host sent into its Ethernet and IPv6 headers and the IPv6 payload.
fn parse6(frame: &[u8]) -> Option<(Ethernet2Header, Ipv6Header, &[u8])> {
    let (eth, rest) = Ethernet2Header::from_slice(frame).ok()?;
    if eth.ether_type != EtherType::IPV6 {
        return None;
    }
    let (ip, rest) = Ipv6Header::from_slice(rest).ok()?;
    Some((eth, ip.clone(), rest.get(..usize::from(ip.payload_length))?))
}

/// Return the ICMPv6 message in `frame`, with its IPv6 header, if it carries one.
fn icmp_in(frame: &[u8]) -> Option<(Ethernet2Header, Ipv6Header, &[u8])> {
    parse6(frame).filter(|(_, ip, _)| ip.next_header == IpNumber::IPV6_ICMP)
}

/// Return the TCP segment in `frame`, with its IPv6 header, if it carries one.
fn tcp_in(frame: &[u8]) -> Option<(Ethernet2Header, Ipv6Header, Segment<'_>)> {
    let (eth, ip, payload) = parse6(frame).filter(|(_, ip, _)| ip.next_header == IpNumber::TCP)?;
    let seg = Segment::parse(payload, Ipv6Addr::from(ip.source).into(), Ipv6Addr::from(ip.destination).into()).ok()?;
    Some((eth, ip, seg))
}

/// Return the target of the Neighbour Solicitation in `frame`, if it is one, and where it went.
fn solicited_target(frame: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    let (_, ip, icmp) = icmp_in(frame)?;
    let src = Ipv6Addr::from(ip.source);
    let dst = Ipv6Addr::from(ip.destination);
    match ndp::parse(src, dst, ip.hop_limit, icmp) {
        Ok(NdpMessage::NeighborSolicitation(ns)) => Some((ns.target, dst)),
        _ => None,
    }
}

// -------------------------------------------------------------------------------------
// Two IPv6 hosts talking.
// -------------------------------------------------------------------------------------

#[test]
fn ipv6_only_hosts_resolve_each_other_and_echo_200_kb_over_tcp() {
    // RFC 4861 7.2: address resolution; RFC 8200 5 / RFC 9293 3.7.1: MSS = MTU - 60.
    let mut net =
        Net::new(LinkConfig::default(), StackConfig::new(PEER, 64, [1; 16]), StackConfig::new(US, 64, [2; 16]));
    let sent_a = Collector::install(&mut net.a);
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddr::new(US.into(), 7), listener);
    // A asked for B (multicast, to its solicited-node group) and B answered.
    assert!(net.a.counters().ndp_solicitations >= 1, "{}", net.a.counters());
    assert!(net.b.counters().ndp_advertisements >= 1, "{}", net.b.counters());
    let first = sent_a.lock().unwrap()[0].clone();
    assert_eq!(solicited_target(&first), Some((US, ndp::solicited_node(US))), "A's first frame asks for B");

    // The MSS A offered in its SYN is what fits the MTU behind 40 bytes of IPv6 and 20 of
    // TCP; the data of a segment is that less the timestamps (12 bytes, RFC 7323 3).
    let offered = sent_a
        .lock()
        .unwrap()
        .iter()
        .find_map(|f| tcp_in(f).filter(|(_, _, s)| s.flags.syn() && !s.flags.ack()).map(|(_, _, s)| s.options.mss));
    assert_eq!(offered, Some(Some(1440)), "the IPv6 SYN offers MSS 1500 - 60");
    for (stack, id) in [(&net.a, client), (&net.b, server)] {
        let conn = stack.interface().connection(id).unwrap();
        let ts = if conn.timestamps_enabled() { 12 } else { 0 };
        assert_eq!(conn.stats().mss, 1440 - ts, "the send MSS of an IPv6 connection");
    }

    let message: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    echo(&mut net, &[(client, server)], &message);
    // Every data segment fitted the MTU.
    let biggest = sent_a.lock().unwrap().iter().filter_map(|f| parse6(f)).map(|(_, ip, _)| ip.payload_length).max();
    assert_eq!(biggest.map(|l| l + 40), Some(1500), "full-sized segments fill the MTU exactly");
    net.close(client, server);

    // B learnt A from the link-layer address in A's solicitation (RFC 4861 7.2.3: STALE),
    // so it had nothing to ask; using the entry put it in DELAY, and the ACKs of its data
    // confirmed A before DELAY_FIRST_PROBE_TIME ran out (7.3.1: upper-layer confirmation),
    // so it never had to probe A either.
    assert_eq!(net.b.counters().ndp_solicitations, 0, "{}", net.b.counters());
    assert_eq!(net.b.counters().drops(Drop::BadNdp) + net.a.counters().drops(Drop::BadNdp), 0);
    assert_eq!(net.a.counters().drops(Drop::NeighbourQueueDrop), 0);
}

#[test]
fn dual_stack_hosts_serve_ipv4_and_ipv6_on_one_listener_at_once() {
    // RFC 4213 2: a dual-stack host runs both; the listener takes both families.
    let (a4, b4) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
    let ca = StackConfig::new(a4, 24, [1; 16]).with_address(PEER, 64);
    let cb = StackConfig::new(b4, 24, [2; 16]).with_address(US, 64);
    let mut net = Net::new(LinkConfig::default(), ca, cb);
    let listener = net.b.listen(7).unwrap();
    let c4 = net.a.connect(SocketAddr::new(b4.into(), 7)).unwrap();
    let c6 = net.a.connect(SocketAddr::new(US.into(), 7)).unwrap();
    let mut accepted = Vec::new();
    net.run_until(|n| {
        while let Some(id) = n.b.accept(listener) {
            accepted.push(id);
        }
        accepted.len() == 2 && [c4, c6].iter().all(|&c| n.a.state(c) == State::Established)
    });
    assert!(net.a.counters().arp_requests >= 1 && net.a.counters().ndp_solicitations >= 1);
    // Match each accepted connection to its client by the client's port and family.
    let remote = |id: SocketId| net.b.interface().connection(id).unwrap().tuple().unwrap().remote;
    let local = |id: SocketId| net.a.interface().connection(id).unwrap().tuple().unwrap().local;
    let s4 = *accepted.iter().find(|&&s| remote(s) == local(c4)).expect("the IPv4 connection was accepted");
    let s6 = *accepted.iter().find(|&&s| remote(s) == local(c6)).expect("the IPv6 connection was accepted");
    assert_eq!(remote(s4).ip(), IpAddr::V4(a4));
    assert_eq!(remote(s6).ip(), IpAddr::V6(PEER));
    let mss = |id| net.b.interface().connection(id).unwrap().stats().mss;
    assert_eq!((mss(s4), mss(s6)), (1448, 1428), "each family's MSS fits its header (timestamps on)");

    let message: Vec<u8> = (0..120_000u32).map(|i| (i * 13 % 241) as u8).collect();
    echo(&mut net, &[(c4, s4), (c6, s6)], &message);
    net.close(c4, s4);
    net.close(c6, s6);
}

// -------------------------------------------------------------------------------------
// ICMPv6 echo (RFC 4443 4).
// -------------------------------------------------------------------------------------

#[test]
fn icmpv6_echo_to_our_address_is_answered_and_to_a_group_or_with_a_bad_checksum_is_not() {
    let mut host = Host::v6();
    let data = b"thirty-one bytes of echo data..";
    let request = icmpv6(PEER, US, 128, 0, [0x12, 0x34, 0, 7], data);
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), PEER, US, 64, ICMPV6, &request));
    let sent = host.sent();
    assert_eq!(sent.len(), 1, "one echo reply");
    // RFC 4443 4.2: the reply goes back from the address the request was sent to, with
    // the request's identifier, sequence number and data.
    let (eth, ip, reply) = icmp_in(&sent[0]).expect("ICMPv6");
    assert_eq!((eth.source, eth.destination), (US_MAC, PEER_MAC));
    assert_eq!((Ipv6Addr::from(ip.source), Ipv6Addr::from(ip.destination)), (US, PEER));
    assert_eq!((reply[0], reply[1]), (129, 0), "echo reply");
    assert_eq!(&reply[4..8], &[0x12, 0x34, 0, 7], "identifier and sequence number");
    assert_eq!(&reply[8..], data);
    let slice = Icmpv6Slice::from_slice(reply).unwrap();
    assert!(slice.is_checksum_valid(US.octets(), PEER.octets()), "the reply's checksum verifies (RFC 4443 2.3)");
    assert!(matches!(slice.icmp_type(), Icmpv6Type::EchoReply(h) if h.id == 0x1234 && h.seq == 7));
    assert_eq!(host.iface.counters().icmp_echo_replies, 1);

    // To our link-local address: answered from it.
    let ll = ndp::link_local_from_mac(US_MAC);
    let peer_ll = ndp::link_local_from_mac(PEER_MAC);
    let request = icmpv6(peer_ll, ll, 128, 0, [0, 1, 0, 1], b"ll");
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), peer_ll, ll, 64, ICMPV6, &request));
    let sent = host.sent();
    let (_, ip, _) = icmp_in(&sent[0]).expect("a reply");
    assert_eq!(Ipv6Addr::from(ip.source), ll);

    // To the all-nodes group (which we are in): not answered.
    let request = icmpv6(PEER, ndp::ALL_NODES, 128, 0, [0x12, 0x34, 0, 8], data);
    let to_all = (PEER_MAC, ndp::multicast_mac(ndp::ALL_NODES));
    host.receive(&ipv6_frame(to_all, PEER, ndp::ALL_NODES, 64, ICMPV6, &request));
    assert!(host.sent().is_empty(), "no reply to a multicast echo request");
    assert_eq!(host.iface.counters().drops(Drop::IcmpIgnored), 1);

    // A bad checksum: dropped and counted.
    let mut bad = icmpv6(PEER, US, 128, 0, [0x12, 0x34, 0, 9], data);
    bad[2] ^= 0x5a;
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), PEER, US, 64, ICMPV6, &bad));
    // Shorter than an ICMPv6 header.
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), PEER, US, 64, ICMPV6, &[128, 0, 0]));
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.counters().drops(Drop::BadIcmpv6), 2);
    assert_eq!(host.iface.counters().icmp_echo_replies, 2);
}

// -------------------------------------------------------------------------------------
// Neighbour Discovery by hand (RFC 4861 7).
// -------------------------------------------------------------------------------------

#[test]
fn neighbour_solicitations_for_our_address_are_answered_and_others_are_not() {
    let mut host = Host::v6();
    // RFC 4861 7.2.4: a solicitation for our address, to our solicited-node group (at its
    // 33:33:ff multicast MAC), answered with a solicited advertisement with Override and
    // our MAC in the target link-layer address option, to the solicitation's source.
    host.receive(&solicitation(PEER, ndp::solicited_node(US), US, 255, true));
    let sent = host.sent();
    assert_eq!(sent.len(), 1, "one advertisement");
    let (eth, ip, na) = icmp_in(&sent[0]).expect("ICMPv6");
    assert_eq!((eth.source, eth.destination), (US_MAC, PEER_MAC), "to the MAC the solicitation gave");
    assert_eq!((Ipv6Addr::from(ip.source), Ipv6Addr::from(ip.destination)), (US, PEER));
    assert_eq!(ip.hop_limit, 255, "NDP is sent with hop limit 255 (RFC 4861 7.1.2)");
    let slice = Icmpv6Slice::from_slice(na).unwrap();
    assert!(slice.is_checksum_valid(US.octets(), PEER.octets()));
    let flags = NeighborAdvertisementHeader { router: false, solicited: true, r#override: true };
    assert_eq!(slice.icmp_type(), Icmpv6Type::NeighborAdvertisement(flags));
    assert_eq!(&na[8..24], &US.octets(), "target address");
    assert_eq!(&na[24..], &[2, 1, 0x02, 0, 0, 0, 0, 0x0b], "target link-layer address option: our MAC");
    match ndp::parse(US, PEER, ip.hop_limit, na) {
        Ok(NdpMessage::NeighborAdvertisement(a)) => assert_eq!((a.target, a.target_mac), (US, Some(US_MAC))),
        other => panic!("not a valid advertisement: {other:?}"),
    }
    assert_eq!(host.iface.counters().ndp_advertisements, 1);
    // RFC 4861 7.2.3: the solicitation's source link-layer address made an entry for the
    // peer, so a connection to it needs no solicitation of ours.
    host.iface.connect(host.now, SocketAddr::new(PEER.into(), 80)).unwrap();
    let sent = host.sent();
    assert_eq!(sent.len(), 1);
    let (eth, _, seg) = tcp_in(&sent[0]).expect("the SYN, sent at once");
    assert!(seg.flags.syn());
    assert_eq!(eth.destination, PEER_MAC);

    let other = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x99);
    // For another address, to its group (which we did not join) or to our unicast address.
    host.receive(&solicitation(PEER, ndp::solicited_node(other), other, 255, true));
    host.receive(&solicitation(PEER, US, other, 255, true));
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.counters().drops(Drop::Ipv6NotForUs), 2);
    // Hop limit 254: it may come from off the link (RFC 4861 7.1.1).
    host.receive(&solicitation(PEER, ndp::solicited_node(US), US, 254, true));
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.counters().drops(Drop::BadNdp), 1);

    // Duplicate address detection (RFC 4862 5.4.3): from ::, answered to all nodes, not
    // solicited (RFC 4861 7.2.4).
    host.receive(&solicitation(Ipv6Addr::UNSPECIFIED, ndp::solicited_node(US), US, 255, false));
    let sent = host.sent();
    assert_eq!(sent.len(), 1, "DAD probe for our address answered");
    let (eth, ip, na) = icmp_in(&sent[0]).expect("ICMPv6");
    assert_eq!(eth.destination, ndp::multicast_mac(ndp::ALL_NODES));
    assert_eq!((Ipv6Addr::from(ip.source), Ipv6Addr::from(ip.destination)), (US, ndp::ALL_NODES));
    let flags = NeighborAdvertisementHeader { router: false, solicited: false, r#override: true };
    assert_eq!(Icmpv6Slice::from_slice(na).unwrap().icmp_type(), Icmpv6Type::NeighborAdvertisement(flags));
    assert!(ndp::parse(US, ndp::ALL_NODES, 255, na).is_ok());

    // Another node advertising our address (RFC 4862 5.4.4): dropped and counted; our own
    // answers go on.
    let thief = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x66);
    let unsolicited = NeighborAdvertisementHeader { router: false, solicited: false, r#override: true };
    host.receive(&advertisement([0x02, 0, 0, 0, 0, 0x66], thief, ndp::ALL_NODES, US, unsolicited));
    assert!(host.sent().is_empty());
    assert_eq!(host.iface.counters().drops(Drop::BadNdp), 2);
    host.receive(&solicitation(PEER, ndp::solicited_node(US), US, 255, true));
    let sent = host.sent();
    let (_, _, na) = icmp_in(&sent[0]).expect("still answered");
    assert_eq!(&na[26..32], &US_MAC);
}

#[test]
fn a_peer_that_never_answers_drops_the_held_syns_and_the_connect_times_out() {
    // RFC 4861 7.2.2: MAX_MULTICAST_SOLICIT solicitations RetransTimer apart, then the
    // held packets are dropped; RFC 9293 3.8.1 / RFC 6298: the SYN retries run out.
    let mut host = Host::v6();
    let id = host.iface.connect(host.now, SocketAddr::new(PEER.into(), 80)).unwrap();
    let mut asked = Vec::new();
    let mut events = Vec::new();
    let deadline = Instant::ZERO + Duration::from_secs(600);
    while !events.contains(&Event::TimedOut) {
        for f in host.sent() {
            assert_eq!(solicited_target(&f), Some((PEER, ndp::solicited_node(PEER))), "only solicitations go out");
            asked.push(host.now);
        }
        while let Some((_, e)) = host.iface.poll_event() {
            events.push(e);
        }
        let next = host.iface.poll_timeout().expect("a timer runs while connecting");
        assert!(next <= deadline, "the connect must give up");
        host.advance_to(next.max(host.now));
    }
    let secs = |t: &Instant| t.saturating_duration_since(Instant::ZERO).as_secs_f64();
    assert_eq!(asked[..3].iter().map(secs).collect::<Vec<_>>(), [0.0, 1.0, 2.0], "three solicitations, 1 s apart");
    let c = host.iface.counters().clone();
    // Every SYN (the first and each retry) was held and then dropped: none went out
    // with an unresolved MAC, and none is kept.
    assert!(c.tcp_segments_out >= 2, "{c}");
    assert_eq!(c.drops(Drop::NeighbourQueueDrop), c.tcp_segments_out, "{c}");
    assert_eq!(c.connections_timed_out, 1);
    assert_eq!(host.iface.connection(id).map(|c| c.state()), Some(State::Closed));
    // Nothing is left running: the last resolution ends and no timer remains.
    let mut rounds = 0;
    while let Some(t) = host.iface.poll_timeout() {
        host.advance_to(t.max(host.now));
        host.sent();
        rounds += 1;
        assert!(rounds < 10, "timers keep running after the connect gave up");
    }
    assert_eq!(host.iface.counters().drops(Drop::NeighbourQueueDrop), c.tcp_segments_out);
}

#[test]
fn the_queue_for_a_neighbour_being_resolved_is_bounded_and_keeps_the_newest() {
    // RFC 4861 7.2.2: a small queue per neighbour; "the new arrival SHOULD replace the
    // oldest entry".
    let mut host = Host::v6();
    let ids: Vec<SocketId> =
        (0..20).map(|_| host.iface.connect(host.now, SocketAddr::new(PEER.into(), 80)).unwrap()).collect();
    assert!(host.sent().is_empty(), "every SYN is held");
    let limit = host.iface.config().ndp.queue_limit;
    assert_eq!(host.iface.counters().drops(Drop::NeighbourQueueDrop), 20 - limit as u64);
    let flags = NeighborAdvertisementHeader { router: false, solicited: true, r#override: true };
    host.receive(&advertisement(PEER_MAC, PEER, US, PEER, flags));
    let sent = host.sent();
    assert_eq!(sent.len(), limit, "the held SYNs go out once the neighbour answers");
    let port = |id: SocketId| host.iface.connection(id).unwrap().tuple().unwrap().local.port();
    let newest: Vec<u16> = ids[20 - limit..].iter().map(|&id| port(id)).collect();
    let released: Vec<u16> = sent
        .iter()
        .map(|f| {
            let (eth, _, seg) = tcp_in(f).expect("a SYN");
            assert_eq!(eth.destination, PEER_MAC);
            seg.src_port
        })
        .collect();
    assert_eq!(released, newest, "the newest SYNs, in order");
}

// -------------------------------------------------------------------------------------
// Routing (RFC 4861 5.2, 6.3.4).
// -------------------------------------------------------------------------------------

/// Connect to `FAR` and return what goes out first: the SYN, or the solicitation due at
/// once (the neighbour timer's first round) while the SYN is held.
fn connect_far(host: &mut Host) -> Vec<Vec<u8>> {
    host.iface.connect(host.now, SocketAddr::new(FAR.into(), 443)).unwrap();
    let mut frames = host.sent();
    host.advance_to(host.now);
    frames.extend(host.sent());
    frames
}

/// Answer the host's solicitation for the router, as the router; return the SYN released.
fn router_answers(host: &mut Host) -> Vec<Vec<u8>> {
    let ll = ndp::link_local_from_mac(US_MAC);
    let flags = NeighborAdvertisementHeader { router: true, solicited: true, r#override: true };
    host.receive(&advertisement(ROUTER_MAC, ROUTER, ll, ROUTER, flags));
    host.sent()
}

fn assert_syn_to_far_via_router(frames: &[Vec<u8>]) {
    assert_eq!(frames.len(), 1, "the held SYN");
    let (eth, ip, seg) = tcp_in(&frames[0]).expect("TCP");
    assert!(seg.flags.syn() && !seg.flags.ack());
    assert_eq!(eth.destination, ROUTER_MAC, "sent to the router's MAC");
    assert_eq!((Ipv6Addr::from(ip.source), Ipv6Addr::from(ip.destination)), (US, FAR), "addressed to the far host");
}

#[test]
fn off_link_destinations_go_through_the_configured_router() {
    // RFC 4861 5.2: next-hop determination; the configured router is the next hop, and it
    // is its address that is resolved.
    let mut config = StackConfig::new(US, 64, [3; 16]);
    config.gateway6 = Some(ROUTER);
    let mut host = Host::new(config, US_MAC);
    let sent = connect_far(&mut host);
    assert_eq!(sent.len(), 1);
    assert_eq!(solicited_target(&sent[0]), Some((ROUTER, ndp::solicited_node(ROUTER))), "asks for the router");
    assert_syn_to_far_via_router(&router_answers(&mut host));
}

#[test]
fn a_router_advertisement_makes_the_default_router() {
    // RFC 4861 6.3.4: a valid RA (hop limit 255, link-local source) with a non-zero router
    // lifetime adds its source to the default router list.
    let mut host = Host::v6();
    // Invalid ones first: hop limit 64 (it may have been forwarded), a global source.
    host.receive(&router_advertisement(ROUTER, 64, 1800, false));
    host.receive(&router_advertisement(PEER, 255, 1800, false));
    assert_eq!(host.iface.counters().drops(Drop::BadNdp), 2);
    host.receive(&router_advertisement(ROUTER, 255, 1800, false));
    assert!(host.sent().is_empty(), "a host answers no RA");
    let sent = connect_far(&mut host);
    assert_eq!(sent.len(), 1);
    assert_eq!(solicited_target(&sent[0]), Some((ROUTER, ndp::solicited_node(ROUTER))), "asks for the router");
    assert_syn_to_far_via_router(&router_answers(&mut host));

    // With its link-layer address in the RA, the router needs no solicitation.
    let mut host = Host::v6();
    host.receive(&router_advertisement(ROUTER, 255, 1800, true));
    assert_syn_to_far_via_router(&connect_far(&mut host));

    // Once the lifetime has run out it is no default router: the destination is taken as
    // on-link (RFC 4861 5.2 allows either; we ask for it).
    let mut host = Host::v6();
    host.receive(&router_advertisement(ROUTER, 255, 1800, true));
    host.advance_to(Instant::ZERO + Duration::from_secs(1801));
    let sent = connect_far(&mut host);
    assert_eq!(solicited_target(&sent[0]), Some((FAR, ndp::solicited_node(FAR))));
}

#[test]
fn an_advertised_on_link_prefix_is_reached_directly_and_a_zero_lifetime_removes_the_router() {
    // RFC 4861 6.3.4: a prefix information option with the L flag makes the prefix on-link
    // (5.2: its addresses are next hops themselves); a router lifetime of 0 removes the
    // router from the default router list.
    let mut host = Host::v6();
    let mut prefix = vec![3, 4, 64, 0x80];
    prefix.extend_from_slice(&3600u32.to_be_bytes());
    prefix.extend_from_slice(&1800u32.to_be_bytes());
    prefix.extend_from_slice(&[0; 4]);
    prefix.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 0).octets());
    let mut options = router_slla().to_vec();
    options.extend_from_slice(&prefix);
    host.receive(&router_advertisement_with(ROUTER, 255, 1800, &options));
    let sent = connect_far(&mut host);
    assert_eq!(solicited_target(&sent[0]), Some((FAR, ndp::solicited_node(FAR))), "FAR is on-link now");
    // Another destination off the link goes to the router.
    host.iface.connect(host.now, SocketAddr::new(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 1).into(), 80)).unwrap();
    let sent = host.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(tcp_in(&sent[0]).map(|(eth, _, _)| eth.destination), Some(ROUTER_MAC));

    let mut host = Host::v6();
    host.receive(&router_advertisement(ROUTER, 255, 1800, true));
    host.receive(&router_advertisement(ROUTER, 255, 0, true));
    let sent = connect_far(&mut host);
    assert_eq!(solicited_target(&sent[0]), Some((FAR, ndp::solicited_node(FAR))), "no default router left");
}

#[test]
fn multicast_frames_are_taken_only_for_groups_we_joined() {
    // RFC 2464 7: IPv6 multicast goes to 33:33 and the group's low 32 bits; RFC 4861 7.2.1:
    // a host joins the solicited-node group of each of its addresses.
    let mut host = Host::v6();
    let other = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0x99);
    let request = icmpv6(PEER, other, 128, 0, [0, 1, 0, 1], b"x");
    host.receive(&ipv6_frame((PEER_MAC, ndp::multicast_mac(other)), PEER, other, 64, ICMPV6, &request));
    assert_eq!(host.iface.counters().drops(Drop::Ipv6NotForUs), 1);
    assert_eq!(host.iface.counters().drops(Drop::WrongMac), 0, "the 33:33 frame was taken");
    // Our solicited-node group at its multicast MAC is taken (and answered).
    host.receive(&solicitation(PEER, ndp::solicited_node(US), US, 255, true));
    assert_eq!(host.sent().len(), 1);
    // An IPv4-only host takes no 33:33 frame at all.
    let mut v4 = Host::new(StackConfig::new(Ipv4Addr::new(10, 9, 0, 2), 24, [3; 16]), US_MAC);
    v4.receive(&solicitation(PEER, ndp::solicited_node(US), US, 255, true));
    assert_eq!(v4.iface.counters().drops(Drop::WrongMac), 1);
}

// -------------------------------------------------------------------------------------
// Extension headers (RFC 8200 4).
// -------------------------------------------------------------------------------------

/// Send the peer's SYN from `port` behind `headers` (whose first Next Header is `next`),
/// and return whether it was answered with a SYN-ACK.
fn syn_behind(host: &mut Host, next: u8, headers: &[u8], port: u16) -> bool {
    let mut payload = headers.to_vec();
    payload.extend_from_slice(&syn(PEER.into(), US.into(), port));
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), PEER, US, 64, next, &payload));
    host.sent().iter().filter_map(|f| tcp_in(f)).any(|(_, _, s)| s.flags.syn() && s.flags.ack() && s.dst_port == port)
}

#[test]
fn extension_headers_are_walked_or_the_packet_is_dropped() {
    let mut host = Host::v6();
    host.iface.listen(80).unwrap();
    let bad = |host: &Host| host.iface.counters().drops(Drop::BadIpv6Header);
    // Hop-by-hop (0) with PadN (type 1, RFC 8200 4.2): skipped, the SYN is served.
    assert!(syn_behind(&mut host, 0, &[TCP, 0, 1, 4, 0, 0, 0, 0], 40001), "SYN behind hop-by-hop with PadN");
    // Pad1s and an unknown option of type 0x1e (high bits 00: skip over it).
    assert!(syn_behind(&mut host, 0, &[TCP, 0, 0, 0, 0x1e, 2, 0xaa, 0xbb], 40002));
    // Destination options (60) then a routing header (43) with no segments left (RFC 8200 4.4:
    // ignore it and go on).
    let chain = [43, 0, 1, 4, 0, 0, 0, 0, TCP, 0, 4, 0, 0, 0, 0, 0];
    assert!(syn_behind(&mut host, 60, &chain, 40003), "destination options and a spent routing header");
    // An atomic fragment (RFC 6946): offset 0, M clear, the whole packet.
    assert!(syn_behind(&mut host, 44, &[TCP, 0, 0, 0, 0, 0, 0, 1], 40004), "SYN in an atomic fragment");
    assert_eq!(bad(&host), 0);

    // Option type 0x80 (high bits 10: discard and send Parameter Problem), 0x40 (01:
    // discard silently), 0xc0 (11): each drops the packet.
    for (i, kind) in [0x80u8, 0x40, 0xc0].into_iter().enumerate() {
        assert!(!syn_behind(&mut host, 0, &[TCP, 0, kind, 4, 0, 0, 0, 0], 40010 + i as u16), "option {kind:#x}");
        assert_eq!(bad(&host), 1 + i as u64);
    }
    // A routing header with segments left: a host is no router for it (RFC 8200 4.4).
    assert!(!syn_behind(&mut host, 43, &[TCP, 0, 4, 1, 0, 0, 0, 0], 40020));
    assert_eq!(bad(&host), 4);
    // An option running past its header, a header running past the packet.
    assert!(!syn_behind(&mut host, 0, &[TCP, 0, 1, 9, 0, 0, 0, 0], 40021));
    let mut host2 = Host::v6();
    host2.receive(&ipv6_frame((PEER_MAC, US_MAC), PEER, US, 64, 60, &[TCP, 3, 1, 4, 0, 0, 0, 0]));
    assert_eq!(bad(&host), 5);
    assert_eq!(bad(&host2), 1);
    assert_eq!(host.iface.connection_count(), 4, "only the four good SYNs made connections");
}

#[test]
fn a_hop_by_hop_header_after_another_header_is_dropped() {
    // RFC 8200 4.1 and 4.3: the Hop-by-Hop Options header must immediately follow the IPv6
    // header; Next Header 0 anywhere else is not a header we recognise (Linux answers with
    // a Parameter Problem and drops the packet).
    let mut host = Host::v6();
    host.iface.listen(80).unwrap();
    let chain = [0, 0, 1, 4, 0, 0, 0, 0, TCP, 0, 1, 4, 0, 0, 0, 0];
    assert!(!syn_behind(&mut host, 60, &chain, 40030), "hop-by-hop behind destination options");
    assert_eq!(host.iface.counters().drops(Drop::BadIpv6Header), 1);
    assert_eq!(host.iface.connection_count(), 0);
}

// -------------------------------------------------------------------------------------
// Martian sources (RFC 4291 2.5.3, 2.7; RFC 4861 7.1.1 for ::).
// -------------------------------------------------------------------------------------

#[test]
fn ipv6_from_martian_sources_is_dropped() {
    let mut host = Host::v6();
    host.iface.listen(80).unwrap();
    let martians: [Ipv6Addr; 5] = [
        ndp::ALL_NODES,
        Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0, 0x101),
        Ipv6Addr::LOCALHOST,
        US,
        ndp::link_local_from_mac(US_MAC),
    ];
    for (i, &src) in martians.iter().enumerate() {
        let port = 41000 + i as u16;
        let tcp = syn(src.into(), US.into(), port);
        host.receive(&ipv6_frame((PEER_MAC, US_MAC), src, US, 64, TCP, &tcp));
        let ping = icmpv6(src, US, 128, 0, [0, 1, 0, i as u8], b"martian");
        host.receive(&ipv6_frame((PEER_MAC, US_MAC), src, US, 64, ICMPV6, &ping));
    }
    // From :: only Neighbour Discovery may come (duplicate address detection).
    let tcp = syn(Ipv6Addr::UNSPECIFIED.into(), US.into(), 41100);
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), Ipv6Addr::UNSPECIFIED, US, 64, TCP, &tcp));
    let ipv4_mapped = Ipv4Addr::new(10, 9, 0, 1).to_ipv6_mapped();
    let tcp = syn(ipv4_mapped.into(), US.into(), 41101);
    host.receive(&ipv6_frame((PEER_MAC, US_MAC), ipv4_mapped, US, 64, TCP, &tcp));
    assert!(host.sent().is_empty(), "nothing answered");
    let c = host.iface.counters();
    assert_eq!(c.drops(Drop::MartianSource), 2 * martians.len() as u64 + 2, "{c}");
    assert_eq!((c.tcp_segments_in, c.icmp_echo_replies, c.tcp_resets_out), (0, 0, 0), "{c}");
    assert_eq!(host.iface.connection_count(), 0);
    // The same from the peer is served.
    assert!(syn_behind(&mut host, 0, &[TCP, 0, 1, 4, 0, 0, 0, 0], 41200));
}

#[test]
fn connecting_to_addresses_that_never_go_on_the_wire_fails_at_once() {
    // RFC 4291 2.5.3 and 2.5.5.2: ::1 and IPv4-mapped addresses are not sent on a link; a
    // peer drops them as martian (as we do, above), so no answer could ever come.
    let mut host = Host::v6();
    for remote in [Ipv6Addr::LOCALHOST, Ipv4Addr::new(10, 9, 0, 1).to_ipv6_mapped()] {
        let remote = SocketAddr::new(remote.into(), 80);
        let result = host.iface.connect(host.now, remote);
        assert_eq!(result.err(), Some(bypass_stack::ConnectError::NoSourceAddress(remote)), "{remote}");
    }
    host.advance_to(host.now);
    assert!(host.sent().is_empty(), "nothing was sent for them");
    assert_eq!(host.iface.connection_count(), 0);
}
