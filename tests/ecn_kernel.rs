//! ECN (RFC 3168 6.1.1) negotiated with a Linux kernel peer whose namespace asks for it
//! (`net.ipv4.tcp_ecn=1`), both ways: our stack (configured to request) as the client of a
//! kernel server, and as the server of a kernel client. Each side's view is checked: our
//! `Stats::ecn`, and the kernel socket's `TCP_INFO` (`tcpi_options & TCPI_OPT_ECN`, what
//! `ss -ti` shows as `ecn`; the iproute2 6.1 `ss` here prints none of the options a 6.18
//! kernel reports, not even `ts` and `sack`, so the test reads them itself). Over AF_PACKET.
//! Needs root (skips with a message otherwise; fails under `CI=true`).
//!
//! And CE marks reaching our TCP: a tc BPF program on the kernel's side of the link
//! (`tests/bpf/ce_mark.ll`, built with `llc`) marks CE on about one skb in 4 of a kernel
//! client's upload (tc sees the kernel's GSO super-packets there, so a mark covers up to 45
//! segments); our server echoes ECE and the kernel (Reno) answers it. And the
//! same across a routed path: router R1 of a `RoutedLab` marks what it forwards to our
//! server from a kernel client two routers away.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bypass_io::PacketDevice;
use bypass_lab::testlab::{Lab, lab_available};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::{Ecn, Stats};

const LEN: usize = 256 * 1024;
const DEADLINE: Duration = Duration::from_secs(20);

/// Set `net.ipv4.tcp_ecn=1` in the peer's namespace: its connections ask for ECN.
fn kernel_requests_ecn(lab: &Lab) {
    let status = lab.peer_cmd("sysctl").args(["-q", "-w", "net.ipv4.tcp_ecn=1"]).status().expect("run sysctl");
    assert!(status.success(), "sysctl net.ipv4.tcp_ecn=1 in the peer namespace: {status}");
}

/// `TCPI_OPT_ECN` (include/uapi/linux/tcp.h): ECN was negotiated (`ss`'s `ecn`).
const TCPI_OPT_ECN: u8 = 8;
/// `TCPI_OPT_ECN_SEEN`: the kernel received ECT-marked segments (`ss`'s `ecnseen`).
const TCPI_OPT_ECN_SEEN: u8 = 16;

/// Return the kernel socket's `tcpi_options` (`TCP_INFO`, Linux's `tcp_get_info`).
fn tcpi_options(socket: &impl AsRawFd) -> u8 {
    common::tcp_info(socket).tcpi_options
}

fn config(ip: std::net::Ipv4Addr, ecn: Ecn) -> StackConfig {
    let mut secret = [0u8; 16];
    common::Rng::new(0xec4).fill(&mut secret);
    let mut config = StackConfig::new(ip, 24, secret);
    config.tcp.ecn = ecn;
    config
}

#[test]
fn our_client_negotiates_ecn_with_a_kernel_server() {
    let test = "ecn_client";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    kernel_requests_ecn(&lab);
    let peer_ip = lab.peer_ip;
    let listener = lab.in_peer(|| TcpListener::bind((peer_ip, 0))).expect("bind in the peer namespace");
    let std::net::SocketAddr::V4(server) = listener.local_addr().unwrap() else { unreachable!() };
    // The kernel server: read everything, looking at its TCP_INFO once data flows.
    let (ours, (received, options)) = std::thread::scope(|s| {
        let kernel = s.spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            conn.set_read_timeout(Some(DEADLINE)).unwrap();
            let mut buf = vec![0u8; 65536];
            let (mut received, mut options) = (0, 0);
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => return (received, options),
                    Ok(n) => {
                        if received == 0 {
                            options = tcpi_options(&conn);
                        }
                        received += n;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => panic!("kernel server read after {received} bytes: {e}"),
                }
            }
        });
        let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
        let ours =
            lab.in_bypass(|| send_all(&iface, ip, server.into(), &common::data(0xec4, LEN), Duration::from_millis(10)));
        (ours, kernel.join().expect("kernel server thread"))
    });
    eprintln!(
        "our client: Stats::ecn {}, {received} bytes sent; the kernel server's tcpi_options {options:#x}",
        ours.ecn
    );
    assert_eq!(received, LEN);
    assert!(ours.ecn, "our Stats: ECN not negotiated");
    assert!(options & TCPI_OPT_ECN != 0, "the kernel server has no ECN: tcpi_options {options:#x}");
    // Our data reached it ECT(0) (the host's IPv4 header writer).
    assert!(options & TCPI_OPT_ECN_SEEN != 0, "the kernel saw no ECT from us: tcpi_options {options:#x}");
}

/// Our stack on AF_PACKET on `iface`, asking for ECN: connect to `server`, send `message`,
/// polling every `poll` until it is all acknowledged, shut down and close; return the
/// connection's statistics.
fn send_all(iface: &str, ip: Ipv4Addr, server: SocketAddr, message: &[u8], poll: Duration) -> Stats {
    let device = PacketDevice::open(iface).expect("open AF_PACKET");
    let mut stack = Stack::new(device, config(ip, Ecn::Request));
    let deadline = Instant::now() + DEADLINE;
    let id = common::connect_established(&mut stack, server, deadline);
    let mut sent = 0;
    while sent < message.len() || stack.tcp_stats(id).is_some_and(|s| s.bytes_in_flight > 0) {
        assert!(Instant::now() < deadline, "stalled after {sent} bytes");
        if sent < message.len() {
            match stack.write(id, &message[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("write after {sent} bytes: {e}"),
            }
        }
        stack.poll_wait(Some(poll)).expect("poll");
    }
    let stats = stack.tcp_stats(id).expect("open");
    stack.shutdown(id);
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    stack.close(id);
    stats
}

/// Our stack on AF_PACKET on `iface` (ECN as Linux's default, accept when asked): accept one
/// connection on `port`, read it to the end polling every `poll`, close it; return its
/// statistics and the bytes read.
fn serve_one(iface: &str, ip: Ipv4Addr, port: u16, poll: Duration) -> (Stats, usize) {
    serve_one_via(iface, ip, None, port, poll)
}

/// [`serve_one`], with `gateway` as the stack's IPv4 gateway (clients beyond the subnet).
fn serve_one_via(iface: &str, ip: Ipv4Addr, gateway: Option<Ipv4Addr>, port: u16, poll: Duration) -> (Stats, usize) {
    let device = PacketDevice::open(iface).expect("open AF_PACKET");
    let mut stack = Stack::new(device, StackConfig { gateway, ..config(ip, Ecn::Accept) });
    let listener = stack.listen(port).expect("listen");
    let deadline = Instant::now() + DEADLINE;
    let id = loop {
        assert!(Instant::now() < deadline, "no connection");
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
        if let Some(id) = stack.accept(listener) {
            break id;
        }
    };
    let mut buf = vec![0u8; 65536];
    let mut received = 0;
    loop {
        assert!(Instant::now() < deadline, "stalled after {received} bytes");
        match stack.read(id, &mut buf) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("read after {received} bytes: {e}"),
        }
        stack.poll_wait(Some(poll)).expect("poll");
    }
    let stats = stack.tcp_stats(id).expect("open");
    stack.close(id);
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    (stats, received)
}

#[test]
fn a_kernel_client_negotiates_ecn_with_our_server() {
    let test = "ecn_server";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    kernel_requests_ecn(&lab);
    const PORT: u16 = 7007;
    let addr: SocketAddr = SocketAddrV4::new(lab.bypass_ip, PORT).into();
    let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
    let lab_ref: &Lab = &lab;
    let (ours, options) = std::thread::scope(|s| {
        // The default accepts, as Linux's tcp_ecn=2.
        let server = s.spawn(move || lab_ref.in_bypass(|| serve_one(&iface, ip, PORT, Duration::from_millis(10))));
        // Give our stack a moment to listen; the kernel's SYN retransmission covers the rest.
        std::thread::sleep(Duration::from_millis(100));
        let mut conn = common::peer_connect(&lab, addr);
        conn.set_write_timeout(Some(DEADLINE)).unwrap();
        conn.write_all(&common::data(0xec5, LEN)).expect("kernel client write");
        let options = tcpi_options(&conn);
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = common::read_to_eof(&conn, DEADLINE);
        (server.join().expect("our server thread"), options)
    });
    let (stats, received) = ours;
    eprintln!(
        "our server: Stats::ecn {}, {received} bytes received; the kernel client's tcpi_options {options:#x}",
        stats.ecn
    );
    assert_eq!(received, LEN);
    assert!(stats.ecn, "our Stats: ECN not negotiated");
    assert!(options & TCPI_OPT_ECN != 0, "the kernel client has no ECN: tcpi_options {options:#x}");
}

/// Mark CE on ECT packets crossing the kernel's end of the link in `direction`: `ingress`,
/// ours to the kernel, about one frame in 16; `egress`, the kernel's packets to us, about one
/// skb in 4. tc's egress hook runs before the kernel's TCP super-packets (GSO) are cut into
/// segments, even with the device's GSO off, so there one mark covers up to 45 segments and
/// an upload of a few MiB is only a few dozen skbs: at one in 16, about one run in 60 saw no
/// mark at all (tests/bpf/ce_mark.ll).
fn attach_ce_marker(lab: &Lab, direction: &str) {
    let section = if direction == "egress" { "tc_quarter" } else { "tc" };
    attach_ce_marker_with(|| lab.peer_cmd("tc"), &lab.peer_if, direction, section);
}

/// Mark CE on ECT packets crossing `iface` in `direction` with the program of `section` of
/// tests/bpf/ce_mark.ll (`tc`: one in 16; `tc_quarter`: one in 4), with `tc` run by `tc` (in
/// the interface's namespace).
fn attach_ce_marker_with(tc: impl Fn() -> std::process::Command, iface: &str, direction: &str, section: &str) {
    let dir = std::env::temp_dir().join(format!("bypass-ecn-ce-{}-{iface}-{direction}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let obj = build_ce_marker(&dir);
    for args in [
        vec!["qdisc", "add", "dev", iface, "clsact"],
        vec!["filter", "add", "dev", iface, direction, "bpf", "da", "obj", obj.to_str().unwrap(), "sec", section],
    ] {
        let out = tc().args(&args).output().expect("run tc");
        assert!(out.status.success(), "tc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Build `tests/bpf/ce_mark.ll` into an object `tc` can load, in `dir`; return its path.
fn build_ce_marker(dir: &std::path::Path) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bpf/ce_mark.ll");
    let obj = dir.join("ce_mark.o");
    let out = std::process::Command::new("llc")
        .args(["-march=bpf", "-filetype=obj", "-o"])
        .arg(&obj)
        .arg(&src)
        .output()
        .expect("run llc (LLVM) to build the CE-marking BPF program");
    assert!(out.status.success(), "llc: {}", String::from_utf8_lossy(&out.stderr));
    obj
}

#[test]
fn ce_marks_from_the_path_reach_our_tcp_and_the_kernel_sender_answers_the_echo() {
    let test = "ecn_ce";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    kernel_requests_ecn(&lab);
    attach_ce_marker(&lab, "egress");
    const BULK: usize = 4 << 20;
    const PORT: u16 = 7008;
    let addr: SocketAddr = SocketAddrV4::new(lab.bypass_ip, PORT).into();
    let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
    let before = common::peer_nstat(&lab);
    let lab_ref: &Lab = &lab;
    let ((stats, received), (retrans, ssthresh)) = std::thread::scope(|s| {
        let server = s.spawn(move || lab_ref.in_bypass(|| serve_one(&iface, ip, PORT, Duration::from_millis(1))));
        std::thread::sleep(Duration::from_millis(100));
        let mut conn = common::peer_connect(&lab, addr);
        // Reno reduces on ECE (BBR, this kernel's default here, does not use it).
        common::set_congestion_control(&conn, "reno");
        conn.set_write_timeout(Some(DEADLINE)).unwrap();
        conn.write_all(&common::data(0xec6, BULK)).expect("kernel client write");
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = common::read_to_eof(&conn, DEADLINE);
        // Only now: `write_all` returns once the data is in the socket's send buffer, which
        // may be before the first echo of a CE mark came back; our FIN comes after the ACKs
        // of all the data, so by its end of stream the kernel has taken every ECE.
        let info = common::tcp_info(&conn);
        (server.join().expect("our server thread"), (info.tcpi_total_retrans, info.tcpi_snd_ssthresh))
    });
    let peer = common::peer_changes(&lab, &before);
    let delivered_ce = peer.get("TcpExtTCPDeliveredCE");
    eprintln!(
        "4 MiB from a kernel client, ~1 skb in 4 marked CE: we received {received} bytes, {} CE, \
         ECN {}; the kernel: {delivered_ce} packets delivered with ECE (TcpExtTCPDeliveredCE), \
         ssthresh {ssthresh}, {retrans} retransmissions",
        stats.ce_received, stats.ecn
    );
    assert_eq!(received, BULK);
    assert!(stats.ecn);
    assert!(stats.ce_received > 0, "no CE mark reached our TCP");
    assert!(delivered_ce > 0, "the kernel saw no ECE: {peer}");
    assert!(ssthresh < 0x7fff_ffff, "the kernel never reduced (ssthresh {ssthresh})");
}

#[test]
fn ce_marks_on_our_data_draw_the_kernels_ece_and_we_reduce_once_per_window() {
    let test = "ecn_ece";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    kernel_requests_ecn(&lab);
    attach_ce_marker(&lab, "ingress");
    const BULK: usize = 8 << 20;
    let before = common::peer_nstat(&lab);
    let peer_ip = lab.peer_ip;
    let listener = lab.in_peer(|| TcpListener::bind((peer_ip, 0))).expect("bind in the peer namespace");
    let std::net::SocketAddr::V4(server) = listener.local_addr().unwrap() else { unreachable!() };
    let (ours, received) = std::thread::scope(|s| {
        let kernel = s.spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            conn.set_read_timeout(Some(DEADLINE)).unwrap();
            let mut buf = vec![0u8; 65536];
            let mut received = 0;
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => return received,
                    Ok(n) => received += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => panic!("kernel server read after {received} bytes: {e}"),
                }
            }
        });
        let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
        let ours =
            lab.in_bypass(|| send_all(&iface, ip, server.into(), &common::data(0xec7, BULK), Duration::from_millis(1)));
        (ours, kernel.join().expect("kernel server thread"))
    });
    let peer = common::peer_changes(&lab, &before);
    let (ect0, ce) = (peer.get("IpExtInECT0Pkts"), peer.get("IpExtInCEPkts"));
    eprintln!(
        "8 MiB to a kernel server in {} segments, ~1/16 of our ECT packets marked CE: the kernel \
         received {ect0} ECT(0) and {ce} CE packets; {} ECE reductions, {} retransmissions, cwnd \
         {} segments at the end",
        ours.segs_out,
        ours.ece_reductions,
        ours.retransmits,
        ours.cwnd / u32::from(ours.mss)
    );
    assert!(ect0 > 0 && ce > 0, "our data did not arrive ECT: {peer}");
    // Each reduction answers at least one mark since the window of the last one.
    assert!(ours.ece_reductions <= ce, "{} reductions for {ce} marks", ours.ece_reductions);
    assert_eq!(received, BULK);
    assert!(ours.ecn);
    assert!(ours.ece_reductions > 0, "the kernel's ECE never reduced our window");
    assert_eq!(ours.retransmits, 0, "an ECN reduction resends nothing");
}

#[test]
fn ce_marks_from_a_router_namespace_reach_our_tcp() {
    // The path of a real network: our server in A behind router R1, a kernel client in B
    // two routers away, and R1 marking CE (about one ECT packet in 16) on what it forwards
    // to A, as an AQM router would instead of dropping.
    use bypass_lab::testlab::RoutedLab;
    let test = "ecn_router";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = RoutedLab::create(test).expect("create the routed lab");
    let status = lab.b_cmd("sysctl").args(["-q", "-w", "net.ipv4.tcp_ecn=1"]).status().expect("run sysctl");
    assert!(status.success(), "sysctl net.ipv4.tcp_ecn=1 in B: {status}");
    attach_ce_marker_with(|| lab.r1_cmd("tc"), &lab.r1_a_if, "egress", "tc");
    const BULK: usize = 4 << 20;
    const PORT: u16 = 7010;
    let addr: SocketAddr = SocketAddrV4::new(lab.a_ip, PORT).into();
    let (iface, ip, gateway) = (lab.a_if.clone(), lab.a_ip, lab.r1_ip);
    let lab_ref = &lab;
    let ((stats, received), (retrans, ssthresh)) = std::thread::scope(|s| {
        let server =
            s.spawn(move || lab_ref.in_a(|| serve_one_via(&iface, ip, Some(gateway), PORT, Duration::from_millis(1))));
        std::thread::sleep(Duration::from_millis(100));
        lab.in_b(|| {
            let mut conn = std::net::TcpStream::connect_timeout(&addr, DEADLINE).expect("B connects to A");
            // Reno reduces on ECE (BBR, this kernel's default here, does not use it).
            common::set_congestion_control(&conn, "reno");
            conn.set_write_timeout(Some(DEADLINE)).unwrap();
            conn.write_all(&common::data(0xec7, BULK)).expect("kernel client write");
            conn.shutdown(std::net::Shutdown::Write).unwrap();
            let _ = common::read_to_eof(&conn, DEADLINE);
            // After the end of stream, as in the test above: by then every ECE was taken.
            let info = common::tcp_info(&conn);
            let server = server.join().expect("our server thread");
            (server, (info.tcpi_total_retrans, info.tcpi_snd_ssthresh))
        })
    });
    eprintln!(
        "4 MiB from B through R2 and R1, R1 marking ~1/16 ECT packets CE towards A: we received {received} \
         bytes, {} CE, ECN {}; the kernel sender's ssthresh {ssthresh}, {retrans} retransmissions",
        stats.ce_received, stats.ecn
    );
    assert_eq!(received, BULK);
    assert!(stats.ecn, "ECN negotiated across the routers");
    assert!(stats.ce_received > 0, "no CE mark from R1 reached our TCP");
    assert!(ssthresh < 0x7fff_ffff, "the kernel sender never reduced for our echo (ssthresh {ssthresh})");
}
