//! ECN (RFC 3168 6.1.1) negotiated with a Linux kernel peer whose namespace asks for it
//! (`net.ipv4.tcp_ecn=1`), both ways: our stack (configured to request) as the client of a
//! kernel server, and as the server of a kernel client. Each side's view is checked: our
//! `Stats::ecn`, and the kernel socket's `TCP_INFO` (`tcpi_options & TCPI_OPT_ECN`, what
//! `ss -ti` shows as `ecn`; the iproute2 6.1 `ss` here prints none of the options a 6.18
//! kernel reports, not even `ts` and `sack`, so the test reads them itself). Over AF_PACKET.
//! Needs root (skips with a message otherwise; fails under `CI=true`).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bypass_io::PacketDevice;
use bypass_lab::testlab::{Lab, lab_available};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::{Ecn, State};

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
#[allow(unsafe_code)]
fn tcpi_options(socket: &impl AsRawFd) -> u8 {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt(2) on a socket we hold open, into a `tcp_info` we own, with its
    // size; the kernel writes at most `len` bytes. The result is checked.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_options
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
        let ours = lab.in_bypass(|| {
            let device = PacketDevice::open(&iface).expect("open AF_PACKET");
            let mut stack = Stack::new(device, config(ip, Ecn::Request));
            let deadline = Instant::now() + DEADLINE;
            let id = stack.connect(server).expect("connect");
            while matches!(stack.state(id), State::SynSent | State::SynReceived) {
                assert!(Instant::now() < deadline, "no handshake with {server}");
                stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
            }
            assert_eq!(stack.state(id), State::Established);
            let message = common::data(0xec4, LEN);
            let mut sent = 0;
            while sent < LEN || stack.tcp_stats(id).is_some_and(|s| s.bytes_in_flight > 0) {
                assert!(Instant::now() < deadline, "stalled after {sent} bytes");
                if sent < LEN {
                    match stack.write(id, &message[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("write after {sent} bytes: {e}"),
                    }
                }
                stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
            }
            let stats = stack.tcp_stats(id).expect("open");
            stack.shutdown(id);
            let settle = Instant::now() + Duration::from_millis(300);
            while Instant::now() < settle {
                stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
            }
            stack.close(id);
            stats
        });
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
        let server = s.spawn(move || {
            lab_ref.in_bypass(|| {
                let device = PacketDevice::open(&iface).expect("open AF_PACKET");
                // The default accepts, as Linux's tcp_ecn=2.
                let mut stack = Stack::new(device, config(ip, Ecn::Accept));
                let listener = stack.listen(PORT).expect("listen");
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
                    stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
                }
                let stats = stack.tcp_stats(id).expect("open");
                stack.close(id);
                let settle = Instant::now() + Duration::from_millis(300);
                while Instant::now() < settle {
                    stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
                }
                (stats, received)
            })
        });
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
