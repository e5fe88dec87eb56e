//! The AF_PACKET backend against a kernel peer across a veth pair between two namespaces.
//!
//! Needs root and `ip` (the lab of `bypass_lab::testlab`: a missing precondition fails the test
//! under `CI=true` and skips it otherwise). Every test builds its own lab and removes it on
//! every exit path.

use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::{PacketConfig, PacketDevice, PacketError};
use bypass_lab::testlab::{Lab, lab_available};
use etherparse::{ArpEthIpv4Packet, ArpOperation, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

const TIMEOUT: Duration = Duration::from_secs(5);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// Build the lab and open the device on the bypass side.
fn setup(tag: &str, config: &PacketConfig) -> (Lab, PacketDevice) {
    init_log();
    let lab = Lab::create(tag).expect("build the lab");
    let dev = lab.in_bypass(|| PacketDevice::open_with(&lab.bypass_if, config)).expect("open the packet device");
    (lab, dev)
}

/// Add a permanent neighbour entry on the peer for the stack's address, so it sends without ARP.
fn peer_knows_stack(lab: &Lab) {
    let (ip, mac) = (lab.bypass_ip.to_string(), lab.bypass_mac.map(|b| format!("{b:02x}")).join(":"));
    lab.ip_peer(&["neigh", "replace", &ip, "lladdr", &mac, "dev", &lab.peer_if, "nud", "permanent"])
        .expect("static neighbour entry");
}

/// Receive until `pred` accepts a frame or [`TIMEOUT`] passes; return whether it did.
fn recv_until(dev: &mut PacketDevice, mut pred: impl FnMut(&[u8]) -> bool) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    let mut found = false;
    while !found && Instant::now() < deadline {
        dev.wait(Some(Duration::from_millis(50))).expect("wait");
        dev.recv(64, &mut |f| found |= pred(f)).expect("recv");
    }
    found
}

/// Return the UDP payload of `frame` if it is a UDP datagram to `port`.
fn udp_payload(frame: &[u8], port: u16) -> Option<Vec<u8>> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    match p.transport? {
        TransportSlice::Udp(udp) if udp.destination_port() == port => Some(udp.payload().to_vec()),
        _ => None,
    }
}

/// Queue a UDP datagram from the stack's address to `to` on `dev`.
fn send_udp(lab: &Lab, dev: &mut PacketDevice, from_port: u16, to: SocketAddrV4, payload: &[u8]) -> bool {
    dev.send(&mut |buf| {
        let builder = PacketBuilder::ethernet2(lab.bypass_mac, lab.peer_mac)
            .ipv4(lab.bypass_ip.octets(), to.ip().octets(), 64)
            .udp(from_port, to.port());
        builder.write_to_slice(buf, payload).expect("frame fits")
    })
    .expect("send")
}

#[test]
fn opening_a_missing_interface_says_so() {
    let err = PacketDevice::open("bpt-nosuch0").unwrap_err();
    assert!(matches!(err, PacketError::NoSuchInterface { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("bpt-nosuch0") && message.contains("ip link"), "{message}");
    assert!(std::error::Error::source(&err).is_some());
}

/// Set in the child process of `opening_without_cap_net_raw_says_run_as_root`.
const CHILD_ENV: &str = "BYPASS_IO_TEST_NO_NET_RAW";

#[test]
fn opening_without_cap_net_raw_says_run_as_root() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: CAP_NET_RAW is gone from the bounding set, so even root is refused.
        let err = PacketDevice::open("lo").unwrap_err();
        assert!(matches!(err, PacketError::NotPermitted { .. }), "{err:?}");
        assert!(err.to_string().contains("run as root"), "{err}");
        return;
    }
    if !lab_available("opening_without_cap_net_raw_says_run_as_root") {
        return;
    }
    // setpriv comes with util-linux, which every Debian machine has.
    // Re-run this test alone in a child that has lost CAP_NET_RAW.
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set", "-net_raw", "--inh-caps", "-net_raw"])
        .arg(exe)
        .args(["--exact", "opening_without_cap_net_raw_says_run_as_root", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn info_describes_the_interface() {
    if !lab_available("info_describes_the_interface") {
        return;
    }
    let (lab, dev) = setup("pktinfo", &PacketConfig::default());
    let info = dev.info();
    assert_eq!(info.name, lab.bypass_if);
    assert_eq!(info.mac, lab.bypass_mac);
    assert_eq!(info.mtu, 1500);
    assert!(info.mode.starts_with("AF_PACKET, TPACKET_V2"), "{}", info.mode);
    assert!(dev.raw_fd().is_some());
}

#[test]
fn kernel_arp_arrives_and_our_reply_is_believed() {
    if !lab_available("kernel_arp_arrives_and_our_reply_is_believed") {
        return;
    }
    let (lab, mut dev) = setup("pktarp", &PacketConfig::default());
    // A datagram to the stack's address makes the peer's kernel ask for its MAC first.
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0))).expect("bind in the peer namespace");
    peer.send_to(b"hello stack", (lab.bypass_ip, 7777)).expect("send_to");

    let mut request = None;
    let asked = recv_until(&mut dev, |f| {
        let Ok(p) = SlicedPacket::from_ethernet(f) else { return false };
        let Some(NetSlice::Arp(arp)) = p.net else { return false };
        let Ok(arp) = arp.to_packet().try_eth_ipv4() else { return false };
        let hit = arp.operation == ArpOperation::REQUEST && arp.target_ipv4 == lab.bypass_ip.octets();
        if hit {
            request = Some(arp);
        }
        hit
    });
    assert!(asked, "no ARP request for {} reached the device", lab.bypass_ip);
    let request = request.unwrap();
    assert_eq!((request.sender_mac, request.sender_ipv4), (lab.peer_mac, lab.peer_ip.octets()));

    // Answer it; the kernel then sends the datagram it was holding.
    let reply = ArpEthIpv4Packet {
        operation: ArpOperation::REPLY,
        sender_mac: lab.bypass_mac,
        sender_ipv4: lab.bypass_ip.octets(),
        target_mac: request.sender_mac,
        target_ipv4: request.sender_ipv4,
    };
    let queued = dev
        .send(&mut |buf| {
            let builder = PacketBuilder::ethernet2(lab.bypass_mac, request.sender_mac).arp(reply.clone().into());
            builder.write_to_slice(buf).expect("frame fits")
        })
        .unwrap();
    assert!(queued);
    dev.flush().unwrap();
    let mut payload = None;
    assert!(recv_until(&mut dev, |f| {
        payload = udp_payload(f, 7777);
        payload.is_some()
    }));
    assert_eq!(payload.as_deref(), Some(&b"hello stack"[..]));
    let stats = dev.stats();
    assert!(stats.rx_frames >= 2 && stats.tx_frames == 1, "{stats:?}");
}

#[test]
fn kernel_receives_a_frame_built_here() {
    if !lab_available("kernel_receives_a_frame_built_here") {
        return;
    }
    let (lab, mut dev) = setup("pktsend", &PacketConfig::default());
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0))).expect("bind in the peer namespace");
    peer.set_read_timeout(Some(TIMEOUT)).unwrap();
    let port = peer.local_addr().unwrap().port();

    assert!(send_udp(&lab, &mut dev, 5000, SocketAddrV4::new(lab.peer_ip, port), b"from the stack"));
    dev.flush().unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = peer.recv_from(&mut buf).expect("the kernel delivers our datagram");
    assert_eq!(&buf[..n], b"from the stack");
    assert_eq!(from, std::net::SocketAddr::from((lab.bypass_ip, 5000)));

    // PACKET_IGNORE_OUTGOING: our own frame does not come back to us.
    std::thread::sleep(Duration::from_millis(50));
    let mut own = 0;
    dev.recv(usize::MAX, &mut |f| own += usize::from(f[6..12] == lab.bypass_mac)).unwrap();
    assert_eq!(own, 0, "the device received its own frame");
}

#[test]
fn recv_respects_the_budget() {
    if !lab_available("recv_respects_the_budget") {
        return;
    }
    let (lab, mut dev) = setup("pktbudget", &PacketConfig::default());
    peer_knows_stack(&lab);
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0))).expect("bind in the peer namespace");
    for i in 0..20u8 {
        peer.send_to(&[i; 32], (lab.bypass_ip, 9000)).expect("send_to");
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < 20 && Instant::now() < deadline {
        dev.wait(Some(Duration::from_millis(50))).unwrap();
        let mut calls = 0;
        let n = dev
            .recv(5, &mut |f| {
                calls += 1;
                got.extend(udp_payload(f, 9000).map(|p| p[0]));
            })
            .unwrap();
        assert!(n <= 5 && calls == n, "recv(5) returned {n} after {calls} frames");
    }
    assert_eq!(got, (0..20).collect::<Vec<u8>>());
}

#[test]
fn send_reports_a_full_queue_until_flushed() {
    if !lab_available("send_reports_a_full_queue_until_flushed") {
        return;
    }
    let (lab, mut dev) = setup("pktfull", &PacketConfig { tx_frames: 8, ..PacketConfig::default() });
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0))).expect("bind in the peer namespace");
    peer.set_read_timeout(Some(TIMEOUT)).unwrap();
    let to = SocketAddrV4::new(lab.peer_ip, peer.local_addr().unwrap().port());

    for i in 0..8u8 {
        assert!(send_udp(&lab, &mut dev, 5000, to, &[i; 16]), "frame {i} fits");
    }
    assert!(!send_udp(&lab, &mut dev, 5000, to, &[8; 16]), "the ninth frame does not");
    let err = dev.send(&mut |buf| buf.len() + 1);
    assert!(matches!(err, Ok(false)), "a full queue reports Ok(false) before calling fill");
    dev.flush().unwrap();
    assert!(send_udp(&lab, &mut dev, 5000, to, &[8; 16]));
    dev.flush().unwrap();
    let mut buf = [0u8; 64];
    for i in 0..9u8 {
        let n = peer.recv(&mut buf).expect("datagram");
        assert_eq!(&buf[..n], &[i; 16]);
    }
    let stats = dev.stats();
    assert_eq!((stats.tx_frames, stats.tx_dropped), (9, 0));

    // A frame longer than the MTU allows is refused before it is queued.
    let err = dev.send(&mut |buf| buf.len() + 1).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn wait_sleeps_until_a_frame_arrives() {
    if !lab_available("wait_sleeps_until_a_frame_arrives") {
        return;
    }
    let (lab, mut dev) = setup("pktwait", &PacketConfig::default());
    peer_knows_stack(&lab);
    // Let anything from bringing the link up arrive, then drain it.
    std::thread::sleep(Duration::from_millis(100));
    dev.recv(usize::MAX, &mut |_| {}).unwrap();

    let start = Instant::now();
    dev.wait(Some(Duration::from_millis(100))).unwrap();
    let quiet = start.elapsed();
    assert!(quiet >= Duration::from_millis(90), "wait returned after {quiet:?} with nothing to read");

    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0))).expect("bind in the peer namespace");
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            peer.send_to(b"wake up", (lab.bypass_ip, 9000)).unwrap();
        });
        dev.wait(Some(TIMEOUT)).unwrap();
    });
    let woke = start.elapsed();
    assert!(woke >= Duration::from_millis(40) && woke < Duration::from_secs(2), "woke after {woke:?}");
    let mut got = None;
    dev.recv(8, &mut |f| got = got.take().or(udp_payload(f, 9000))).unwrap();
    assert_eq!(got.as_deref(), Some(&b"wake up"[..]));
}
