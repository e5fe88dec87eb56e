//! IPv6 against the Linux kernel: kernel clients against a dual-stack `bypass echo`, our
//! stack as a client of a kernel server, Neighbour Discovery both ways, `ping -6` answered,
//! fragmented pings reassembled, and a kernel IPv6 service on the same interface untouched.
//!
//! The lab's peer has IPv6 (`fd00:77::1/64`); the stack owns `10.77.0.2` and `fd00:77::2`.
//! Needs root: without it each test says why it skips, except under `CI=true`, where it
//! fails. Each test holds the test binary's lock, so they run one at a time.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, LabConfig, lab_available, ping_sized, ping6};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::State;
use common::{Backend, EchoServer, PORT, data, echo_many, echo_with_reader, peer_connect, peer_connect_many};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A lab whose peer speaks IPv6, with the test binary's lock held.
struct V6Lab {
    lab: Lab,
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn lab(test: &str) -> Option<V6Lab> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    let serial = common::serial();
    let lab = Lab::with_config(LabConfig { ipv6: true, ..LabConfig::new(test) }).expect("create an IPv6 lab");
    common::peer_without_tail_loss_probes(&lab);
    Some(V6Lab { lab, _serial: serial })
}

fn v6_addr(lab: &Lab) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(lab.bypass_ip6, PORT, 0, 0))
}

fn dual_stack_server(lab: &Lab, backend: Backend) -> EchoServer {
    let v6 = format!("{}/{}", lab.bypass_ip6, lab.prefix6_len);
    EchoServer::start(lab, backend, &["--ip", &v6])
}

/// Kernel clients over IPv6 (1, 100 and 1000 connections) and one over IPv4 at the same
/// time, all byte-exact; `ping -6` and 4000-byte pings of both families (fragmented by the
/// kernel, reassembled by us, answered in fragments); the kernel resolved us by NDP.
fn echo_over_ipv6(backend: Backend) {
    let Some(l) = lab(&format!("v6echo{}", backend.arg())) else { return };
    let lab = &l.lab;
    let server = dual_stack_server(lab, backend);

    let rtt = lab.in_peer(|| ping6(lab.bypass_ip6, Duration::from_secs(2))).expect("ping -6 answered");
    eprintln!("{backend:?}: ping -6 {} in {rtt:?}", lab.bypass_ip6);
    for addr in [IpAddr::V6(lab.bypass_ip6), IpAddr::V4(lab.bypass_ip)] {
        lab.in_peer(|| ping_sized(addr, 4000, Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("{backend:?}: a 4000-byte ping to {addr} (fragments) is not answered: {e}"));
    }

    let v4 = peer_connect(lab, common::server_addr(lab));
    let one = peer_connect(lab, v6_addr(lab));
    std::thread::scope(|s| {
        let a = s.spawn(|| echo_with_reader(&v4, &data(4, 1 << 20), TIMEOUT));
        let b = s.spawn(|| echo_with_reader(&one, &data(6, 1 << 20), TIMEOUT));
        a.join().unwrap().expect("IPv4 echo beside IPv6");
        b.join().unwrap().expect("IPv6 echo, 1 MiB");
    });
    drop((v4, one));
    for (n, len) in [(100, 64 << 10), (1000, 4 << 10)] {
        let streams = peer_connect_many(lab, v6_addr(lab), n);
        echo_many(streams, len, 0x6666 + n as u64, 4, TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend:?}: {n} IPv6 connections: {e}"));
    }

    let neigh = lab.ip_peer(&["-6", "neigh", "show", &lab.bypass_ip6.to_string()]).expect("ip -6 neigh show");
    assert!(neigh.contains("lladdr 02:00:00:77:00:02"), "the kernel did not resolve us by NDP: {neigh:?}");
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    eprintln!("{backend:?}: {c}");
    assert!(c.get("ndp_advertisements") >= 1, "we answered no solicitation: {c}");
    assert!(c.get("icmp_echo_replies") >= 3, "{c}");
    assert!(c.get("fragments_reassembled") >= 2, "{c}");
    assert_eq!(c.get("connections_accepted"), 1102, "{c}");
    // As in `echo_kernel`: only answers to stray ACKs (a FIN resent by a tail-loss probe
    // while the peer's ACK of it was on its way) may be resets.
    assert_eq!(c.get("tcp_resets_out"), c.get("drop.stray_ack").min(c.get("tcp_resets_out")), "{c}");
    assert_eq!(c.get("drop.bad_ndp"), 0, "{c}");
}

#[test]
fn echo_over_ipv6_xdp() {
    echo_over_ipv6(Backend::Xdp);
}

#[test]
fn echo_over_ipv6_packet() {
    echo_over_ipv6(Backend::Packet);
}

/// Over IPv6 too, the kernel completes the TCP checksums `bypass echo` leaves to it (AF_XDP
/// TX metadata with the checksum at offset 54 + 16): with bx0's own checksum offload off the
/// kernel sums every segment in software and the kernel peer verifies it, so a wrong IPv6
/// pseudo-header sum would show in `TcpInCsumErrors` (one counter for both families) and as a
/// stalled echo.
#[test]
fn checksums_the_kernel_completes_are_right_over_ipv6_xdp() {
    let Some(l) = lab("v6csum") else { return };
    let lab = &l.lab;
    let iface = lab.bypass_if.clone();
    lab.in_bypass(|| bypass_io::netdev::set_offloads(&iface, &[(bypass_io::netdev::Offload::TxChecksum, false)]))
        .expect("turn bx0's tx checksum offload off");
    let server = dual_stack_server(lab, Backend::Xdp);
    let before = common::peer_nstat(lab);
    for (i, addr) in [v6_addr(lab), common::server_addr(lab)].into_iter().enumerate() {
        let stream = peer_connect(lab, addr);
        echo_with_reader(&stream, &data(0x6c5 + i as u64, 1 << 20), TIMEOUT).unwrap_or_else(|e| panic!("{addr}: {e}"));
    }
    let peer = common::peer_changes(lab, &before);
    assert_eq!(peer.get("TcpInCsumErrors"), 0, "the peer found bad checksums: {peer}");
    assert_eq!(peer.get("TcpRetransSegs"), 0, "the peer retransmitted: {peer}");
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    assert!(c.get("device.tx_checksum_offloaded") > 0, "no checksum was offloaded: {c}");
    assert_eq!(c.get("connections_accepted"), 2, "{c}");
}

/// Our stack as an IPv6 client of a kernel echo server: we resolve the kernel with a
/// Neighbour Solicitation, and the echo comes back byte-exact.
fn client_over_ipv6(backend: Backend) {
    let Some(l) = lab(&format!("v6client{}", backend.arg())) else { return };
    let lab = &l.lab;
    let peer6 = lab.peer_ip6;
    let listener = lab.in_peer(|| TcpListener::bind((peer6, 0))).expect("bind in the peer namespace");
    let server = listener.local_addr().unwrap();
    let kernel = std::thread::spawn(move || -> Result<usize, String> {
        let (mut conn, _) = listener.accept().map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut echoed = 0;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return Ok(echoed),
                Ok(n) => {
                    conn.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                    echoed += n;
                }
                Err(e) => return Err(format!("kernel server after {echoed} bytes: {e}")),
            }
        }
    });
    let message = data(0x6c1e, 1 << 20);
    let (iface, ours) = (lab.bypass_if.clone(), lab.bypass_ip6);
    let counters = lab.in_bypass(|| match backend {
        Backend::Xdp => {
            run_client(XdpDevice::open(XdpConfig::new(&iface, ours)).expect("AF_XDP"), ours, server, &message)
        }
        Backend::Packet => run_client(PacketDevice::open(&iface).expect("AF_PACKET"), ours, server, &message),
    });
    assert_eq!(kernel.join().unwrap().expect("kernel server"), message.len());
    assert!(counters.ndp_solicitations >= 1, "we sent no Neighbour Solicitation: {counters:?}");
    assert_eq!(counters.tcp_resets_out, 0, "{counters:?}");
}

fn run_client<D: Device>(device: D, ours: Ipv6Addr, server: SocketAddr, message: &[u8]) -> bypass_stack::Counters {
    let mut secret = [0u8; 16];
    common::Rng::new(0x6c).fill(&mut secret);
    let mut stack = Stack::new(device, StackConfig::new(ours, 64, secret));
    let deadline = Instant::now() + TIMEOUT;
    let id = stack.connect(server).expect("connect");
    let (mut sent, mut got, mut shut) = (0, Vec::with_capacity(message.len()), false);
    let mut buf = vec![0u8; 65536];
    loop {
        assert!(Instant::now() < deadline, "stalled: sent {sent}, got {}; {}", got.len(), stack.counters());
        match stack.state(id) {
            State::SynSent | State::SynReceived => {}
            _ => {
                while sent < message.len() {
                    match stack.write(id, &message[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("write after {sent} bytes: {e}"),
                    }
                }
                if sent == message.len() && !shut {
                    stack.shutdown(id);
                    shut = true;
                }
                match stack.read(id, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("read after {} bytes: {e}", got.len()),
                }
            }
        }
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    assert!(got == message, "echo differs: {}", common::first_difference(message, &got));
    stack.close(id);
    let settle = Instant::now() + Duration::from_millis(200);
    while Instant::now() < settle {
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    stack.counters().clone()
}

#[test]
fn client_over_ipv6_against_a_kernel_server_xdp() {
    client_over_ipv6(Backend::Xdp);
}

#[test]
fn client_over_ipv6_against_a_kernel_server_packet() {
    client_over_ipv6(Backend::Packet);
}

/// The kernel keeps its own IPv6 service on the interface the stack serves on: the XDP
/// program passes what is not ours (fd00:77::3 and its neighbour discovery) to the kernel.
#[test]
fn a_kernel_ipv6_service_on_the_same_interface_is_untouched_xdp() {
    let Some(l) = lab("v6beside") else { return };
    let lab = &l.lab;
    let kernel_ip: Ipv6Addr = "fd00:77::3".parse().unwrap();
    lab.in_bypass(|| std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", lab.bypass_if), "0"))
        .expect("enable IPv6 on the bypass interface");
    lab.ip_bypass(&["addr", "add", "fd00:77::3/64", "dev", &lab.bypass_if, "nodad"]).expect("kernel address");
    let kernel_listener = lab.in_bypass(|| TcpListener::bind((kernel_ip, 8))).expect("kernel listener");
    let kernel = std::thread::spawn(move || {
        let (mut conn, _) = kernel_listener.accept().expect("kernel accept");
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).expect("kernel read");
        conn.write_all(&buf[..n]).expect("kernel write");
    });
    let server = dual_stack_server(lab, Backend::Xdp);
    let to_kernel: TcpStream = lab
        .in_peer(|| TcpStream::connect_timeout(&SocketAddr::new(kernel_ip.into(), 8), Duration::from_secs(5)))
        .expect("connect to the kernel's service");
    (&to_kernel).write_all(b"kernel").unwrap();
    let mut reply = [0u8; 6];
    to_kernel.set_read_timeout(Some(TIMEOUT)).unwrap();
    (&to_kernel).read_exact(&mut reply).expect("the kernel's reply");
    assert_eq!(&reply, b"kernel");
    kernel.join().unwrap();
    let ours = peer_connect(lab, v6_addr(lab));
    echo_with_reader(&ours, &data(3, 256 << 10), TIMEOUT).expect("our echo beside the kernel's service");
    let done = server.stop();
    done.assert_clean_exit();
    // Nothing for the kernel's address reached us.
    assert_eq!(done.counters.get("drop.ipv6_not_for_us"), 0, "{}", done.counters);
}
