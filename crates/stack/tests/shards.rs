//! Two hosts sharing one address, as the shards of one stack on two device queues, with a
//! device that steers every reply to the second one (what a veth does to half of a shard's
//! active opens): the first shard's connect still completes, because the second hands the
//! frames for the first's ephemeral ports over and tells it the neighbour its ARP reply
//! taught, and nothing is answered with RST. Without the shares, the second resets.

use std::net::{Ipv4Addr, SocketAddr};

mod common;

use bypass_stack::StackConfig;
use bypass_tcp::State;
use common::Host;

const US: Ipv4Addr = Ipv4Addr::new(10, 5, 0, 2);
const US_MAC: [u8; 6] = [0x02, 0, 0, 0, 5, 2];
const PEER: Ipv4Addr = Ipv4Addr::new(10, 5, 0, 1);
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 5, 1];

fn shard(index: u16, ports: bool, neighbours: bool) -> Host {
    let mut config = StackConfig::new(US, 24, [6; 16]);
    if ports {
        config.ephemeral_port_share = (index, 2);
    }
    config.share_neighbours = neighbours;
    Host::new(config, US_MAC)
}

/// Connect from shard 0 with every frame of the peer delivered to shard 1; return whether
/// shard 0's connection was established, and shard 1's host.
fn connect_through_the_wrong_queue(ports: bool, neighbours: bool) -> (bool, Host) {
    let (mut s0, mut s1) = (shard(0, ports, neighbours), shard(1, ports, neighbours));
    let mut peer = Host::new(StackConfig::new(PEER, 24, [7; 16]), PEER_MAC);
    peer.iface.listen(80).unwrap();
    let id = s0.iface.connect(s0.now, SocketAddr::from((PEER, 80))).unwrap();
    for _ in 0..10 {
        // Due ARP requests go out from the timer pass.
        s0.advance_to(s0.now);
        s1.advance_to(s1.now);
        for frame in s0.sent().into_iter().chain(s1.sent()) {
            peer.receive(&frame);
        }
        for frame in peer.sent() {
            s1.receive(&frame);
        }
        for (ip, mac) in s1.iface.take_learned_neighbours() {
            assert_eq!((ip, mac), (PEER.into(), PEER_MAC), "shard 1 learned the peer from its ARP reply");
            s0.iface.learn_neighbour(s0.now, ip, mac);
        }
        for (owner, frame) in s1.iface.take_foreign_frames() {
            assert_eq!(owner, 0, "the port is shard 0's");
            s0.receive(&frame);
        }
    }
    let established = s0.iface.connection(id).is_some_and(|c| c.state() == State::Established);
    (established, s1)
}

#[test]
fn a_reply_on_the_other_shards_queue_is_handed_over_not_reset() {
    let (established, s1) = connect_through_the_wrong_queue(true, true);
    assert!(established, "shard 0's connect completes through shard 1");
    assert!(s1.iface.counters().frames_handed_over >= 1, "{}", s1.iface.counters());
    assert_eq!(s1.iface.counters().tcp_resets_out, 0, "{}", s1.iface.counters());
}

#[test]
fn without_the_port_share_the_other_shard_resets() {
    let (established, s1) = connect_through_the_wrong_queue(false, true);
    assert!(!established);
    assert_eq!(s1.iface.counters().frames_handed_over, 0);
    assert!(s1.iface.counters().tcp_resets_out > 0, "{}", s1.iface.counters());
}

#[test]
fn without_the_neighbour_share_the_connect_waits_for_arp() {
    let (established, s1) = connect_through_the_wrong_queue(true, false);
    assert!(!established, "the ARP reply taught only shard 1");
    assert_eq!(s1.iface.counters().tcp_resets_out, 0);
}

#[test]
fn each_shard_takes_ephemeral_ports_of_its_own_residue() {
    for index in 0..2u16 {
        let mut s = shard(index, true, true);
        for n in 0..50u16 {
            let id = s.iface.connect(s.now, SocketAddr::from((PEER, 1000 + n))).unwrap();
            let port = s.iface.connection(id).unwrap().local_addr().port();
            assert_eq!(port % 2, index, "shard {index} took port {port}");
        }
    }
}
