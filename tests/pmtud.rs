//! Path MTU discovery through kernel routers (RFC 1191, RFC 8201), for IPv4 and IPv6.
//!
//! A routed lab ([`RoutedLab`]): our stack in A, kernel routers R1 and R2 with a 1400-byte
//! link between them, and a kernel client in B. The 1500-byte segments each side sends
//! first cannot cross R1-R2; the router sends "fragmentation needed" / "packet too big"
//! back, and the transfer must complete byte-exact with the MSS lowered: ours after R1's
//! error, the kernel's after R2's. A forged error whose quoted sequence number is outside
//! the window changes nothing (RFC 5927 4.1).
//!
//! Needs root: without it each test says why it skips, except under `CI=true`, where it
//! fails. Each test holds the test binary's lock, so they run one at a time.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_lab::testlab::{RoutedLab, lab_available};
use common::{Backend, EchoServer, PORT, data, echo_with_reader};
use etherparse::{Icmpv4Type, Icmpv6Type, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, PacketBuilder, icmpv4};

const TIMEOUT: Duration = Duration::from_secs(30);

fn routed_lab(test: &str) -> Option<(RoutedLab, std::sync::MutexGuard<'static, ()>)> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    let serial = common::serial();
    let lab = RoutedLab::create(test).expect("create the routed lab");
    Some((lab, serial))
}

fn start_server(lab: &RoutedLab, backend: Backend) -> EchoServer {
    let v4 = format!("{}/{}", lab.a_ip, lab.prefix_len);
    let v6 = format!("{}/{}", lab.a_ip6, lab.prefix6_len);
    let (gw4, gw6) = (lab.r1_ip.to_string(), lab.r1_ip6.to_string());
    let args = ["--ip", &v4, "--ip", &v6, "--gateway", &gw4, "--gateway", &gw6];
    EchoServer::start_in(&lab.a_ns, &lab.a_if, backend, &args)
}

fn connect_from_b(lab: &RoutedLab, to: IpAddr) -> TcpStream {
    lab.in_b(|| TcpStream::connect_timeout(&SocketAddr::new(to, PORT), Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("connect from B to {to}: {e}"))
}

/// A megabyte each way over each family, through the narrow link: both ends learn the
/// path MTU from the routers and the echo is byte-exact.
fn transfer_through_a_narrow_link(backend: Backend) {
    let Some((lab, _serial)) = routed_lab(&format!("pmtu{}", backend.arg())) else { return };
    let server = start_server(&lab, backend);
    for to in [IpAddr::V4(lab.a_ip), IpAddr::V6(lab.a_ip6)] {
        let stream = connect_from_b(&lab, to);
        echo_with_reader(&stream, &data(0x9000, 1 << 20), TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend:?}: echo to {to} through the 1400-byte link: {e}"));
    }
    // The kernel in B learnt it from R2 (its direction)...
    for to in [lab.a_ip.to_string(), lab.a_ip6.to_string()] {
        let route = lab.ip_b(&["route", "get", &to]).expect("ip route get");
        assert!(route.contains(&format!("mtu {}", lab.small_mtu)), "B did not learn the path MTU to {to}: {route}");
    }
    // ...and we from R1 (ours).
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    eprintln!("{backend:?}: {c}");
    assert!(c.get("path_mtu_lowered") >= 2, "we did not lower the path MTU for both families: {c}");
    assert!(c.get("icmp_errors") >= 2, "{c}");
    assert_eq!(c.get("drop.icmp_out_of_window"), 0, "{c}");
    assert_eq!(c.get("connections_accepted"), 2, "{c}");
}

#[test]
fn transfer_through_a_narrow_link_xdp() {
    transfer_through_a_narrow_link(Backend::Xdp);
}

#[test]
fn transfer_through_a_narrow_link_packet() {
    transfer_through_a_narrow_link(Backend::Packet);
}

/// "Fragmentation needed" and "packet too big" that quote a segment of a real connection
/// but a sequence number far outside its window, as a blind attacker would (RFC 5927): they
/// are counted and dropped, and the path MTU stays.
#[test]
fn forged_errors_with_an_out_of_window_quote_change_nothing_xdp() {
    let Some((lab, _serial)) = routed_lab("pmtuforge") else { return };
    let server = start_server(&lab, Backend::Xdp);
    let v4 = connect_from_b(&lab, IpAddr::V4(lab.a_ip));
    let v6 = connect_from_b(&lab, IpAddr::V6(lab.a_ip6));
    for s in [&v4, &v6] {
        echo_with_reader(s, &data(1, 1000), TIMEOUT).expect("echo before");
    }
    let (p4, p6) = (v4.local_addr().unwrap().port(), v6.local_addr().unwrap().port());
    let frames = [forged_frag_needed(&lab, p4), forged_packet_too_big(&lab, p6)];
    let iface = lab.r1_a_if.clone();
    lab.in_r1(|| {
        let mut device = PacketDevice::open(&iface).expect("AF_PACKET on R1");
        for frame in &frames {
            let sent = device
                .send(&mut |buf| {
                    buf[..frame.len()].copy_from_slice(frame);
                    frame.len()
                })
                .expect("send");
            assert!(sent);
        }
        device.flush().expect("flush");
    });
    std::thread::sleep(Duration::from_millis(200));
    // Small writes only: nothing may meet the narrow link here.
    for s in [&v4, &v6] {
        for i in 0..20 {
            echo_with_reader(s, &data(10 + i, 1000), TIMEOUT).expect("echo after the forged errors");
        }
    }
    drop((v4, v6));
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    assert_eq!(c.get("drop.icmp_out_of_window"), 2, "the forged errors were not dropped as out of window: {c}");
    assert_eq!(c.get("path_mtu_lowered"), 0, "a forged error changed the path MTU: {c}");
    assert_eq!(c.get("icmp_errors"), 0, "{c}");
}

/// Return the TCP header's first 8 octets of a segment from our port to B's `port`, with a
/// sequence number no window holds (about 2^31 away from anything sent).
fn quoted_tcp(port: u16) -> [u8; 8] {
    let mut t = [0u8; 8];
    t[..2].copy_from_slice(&PORT.to_be_bytes());
    t[2..4].copy_from_slice(&port.to_be_bytes());
    t[4..8].copy_from_slice(&0x8000_1234u32.to_be_bytes());
    t
}

/// R1's "fragmentation needed" (RFC 792 type 3 code 4, RFC 1191 next-hop MTU 576) about a
/// 1500-byte segment we sent to B.
fn forged_frag_needed(lab: &RoutedLab, port: u16) -> Vec<u8> {
    let quoted_ip = Ipv4Header::new(1480, 63, IpNumber::TCP, lab.a_ip.octets(), lab.b_ip.octets()).unwrap();
    let mut quote = quoted_ip.to_bytes().to_vec();
    quote.extend_from_slice(&quoted_tcp(port));
    let kind =
        Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 576 });
    let builder =
        PacketBuilder::ethernet2(lab.r1_mac, lab.a_mac).ipv4(lab.r1_ip.octets(), lab.a_ip.octets(), 64).icmpv4(kind);
    let mut frame = Vec::new();
    builder.write(&mut frame, &quote).expect("build the ICMP error");
    frame
}

/// R1's "packet too big" (RFC 4443 3.2, MTU 1280) about a 1500-byte segment we sent to B.
fn forged_packet_too_big(lab: &RoutedLab, port: u16) -> Vec<u8> {
    let quoted_ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: 1460,
        next_header: IpNumber::TCP,
        hop_limit: 63,
        source: lab.a_ip6.octets(),
        destination: lab.b_ip6.octets(),
    };
    let mut quote = quoted_ip.to_bytes().to_vec();
    quote.extend_from_slice(&quoted_tcp(port));
    let src: Ipv6Addr = lab.r1_ip6;
    let builder = PacketBuilder::ethernet2(lab.r1_mac, lab.a_mac)
        .ipv6(src.octets(), lab.a_ip6.octets(), 64)
        .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1280 });
    let mut frame = Vec::new();
    builder.write(&mut frame, &quote).expect("build the ICMPv6 error");
    frame
}
