//! `bypass echo` under things that are not plain echo clients: kernel traffic on the same
//! interface, a SIGKILL and restart, malformed and random frames, and a SYN flood.
//!
//! Needs root (skips with a message otherwise; fails under `CI=true`). Run serially:
//! `cargo test --release --test robustness -- --test-threads=1`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_lab::testlab::{Lab, lab_available};
use common::{
    Backend, Capture, EchoServer, Injector, Rng, SYN, Tcp, data, echo_with_reader, ethernet, ipv4, peer_connect,
    peer_connect_many, read_to_eof, server_addr, tcp, with_peer_injector,
};

const TIMEOUT: Duration = Duration::from_secs(20);

fn setup(test: &str, backend: Backend) -> Option<(common::TestLab, EchoServer, Capture)> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    let capture = Capture::start(&lab, test);
    let server = EchoServer::start(&lab, backend, &[]);
    Some((lab, server, capture))
}

/// Echo `len` bytes on a new connection from the peer, then close it cleanly.
fn echo_fresh(lab: &Lab, seed: u64, len: usize) {
    let stream = peer_connect(lab, server_addr(lab));
    echo_with_reader(&stream, &data(seed, len), TIMEOUT).expect("echo on a new connection");
    stream.shutdown(Shutdown::Write).unwrap();
    read_to_eof(&stream, Duration::from_secs(5)).expect("EOF");
}

// ---------------------------------------------------------------------------------------------
// (a) Traffic the stack does not own still reaches the kernel
// ---------------------------------------------------------------------------------------------

fn kernel_shares_interface(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("share{}", backend.arg()), backend) else { return };
    let kernel_ip = Ipv4Addr::new(10, 77, 0, 3);
    lab.ip_bypass(&["addr", "add", "10.77.0.3/24", "dev", &lab.bypass_if]).expect("add 10.77.0.3 to bx0");
    let listener = lab.in_bypass(|| TcpListener::bind((kernel_ip, 0))).expect("kernel listener on 10.77.0.3");
    let kernel_addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let kernel = std::thread::spawn(move || -> Result<usize, String> {
        let deadline = Instant::now() + TIMEOUT;
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => return Err(format!("accept on 10.77.0.3: {e}")),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut total = 0;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    conn.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                    total += n;
                }
                Err(e) => return Err(format!("kernel server read: {e}")),
            }
        }
    });

    // Both at once: the stack's echo on 10.77.0.2 and the kernel's on 10.77.0.3.
    let to_stack = peer_connect(&lab, server_addr(&lab));
    let to_kernel = peer_connect(&lab, kernel_addr);
    let (a, b) = (data(1, 4 << 20), data(2, 4 << 20));
    std::thread::scope(|s| {
        let t = s.spawn(|| echo_with_reader(&to_kernel, &b, TIMEOUT));
        echo_with_reader(&to_stack, &a, TIMEOUT).expect("echo from the stack at 10.77.0.2");
        t.join().unwrap().expect("echo from the kernel at 10.77.0.3");
    });
    for s in [&to_stack, &to_kernel] {
        s.shutdown(Shutdown::Write).unwrap();
        read_to_eof(s, Duration::from_secs(5)).expect("EOF");
    }
    assert_eq!(kernel.join().unwrap().expect("kernel server"), 4 << 20);
    // The kernel still answers ping on its address.
    let ping = lab.in_peer(|| bypass_lab::testlab::ping(Ipv4Addr::new(10, 77, 0, 3), Duration::from_secs(2)));
    assert!(ping.is_ok(), "the kernel at 10.77.0.3 does not answer ping: {ping:?}");
    let done = server.stop();
    done.assert_clean_exit();
    assert_eq!(done.counters.get("connections_accepted"), 1, "{}", done.counters);
}

#[test]
fn kernel_traffic_shares_the_interface_xdp() {
    kernel_shares_interface(Backend::Xdp);
}

#[test]
fn kernel_traffic_shares_the_interface_packet() {
    kernel_shares_interface(Backend::Packet);
}

// ---------------------------------------------------------------------------------------------
// (b) SIGKILL mid-connection, restart at once
// ---------------------------------------------------------------------------------------------

fn restart_after_sigkill(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("kill{}", backend.arg()), backend) else { return };
    let old = peer_connect(&lab, server_addr(&lab));
    echo_with_reader(&old, &data(3, 256 << 10), TIMEOUT).expect("echo before the kill");
    // Kill it with a transfer in flight.
    (&old).write_all(&data(4, 64 << 10)).expect("write");
    let status = server.kill9();
    assert!(!status.success(), "SIGKILL ended the server with {status}");

    let start = Instant::now();
    let server = EchoServer::start(&lab, backend, &[]);
    eprintln!("{backend:?}: restarted and serving {:?} after the kill", start.elapsed());
    echo_fresh(&lab, 5, 1 << 20);

    // The old connection is gone: it gets a reset (or, at worst, silence), never an echo.
    // Linux reports a received RST once, to the first call: the write below may take it
    // (ECONNRESET or EPIPE), and a read after that sees a plain EOF.
    old.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let wrote = (&old).write_all(b"anyone there?").map_err(|e| e.kind());
    let reset_on_write = matches!(wrote, Err(ErrorKind::ConnectionReset | ErrorKind::BrokenPipe));
    let mut buf = vec![0u8; 1 << 20];
    let mut outcome = vec![format!("write: {wrote:?}")];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match (&old).read(&mut buf) {
            Ok(0) => {
                outcome.push("EOF".to_string());
                break;
            }
            // Echo bytes queued before the kill may still be in the kernel's buffer.
            Ok(n) => outcome.push(format!("{n} bytes")),
            // A signal interrupted the wait (with a receive timeout set, Linux answers EINTR
            // instead of restarting the call): wait again.
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                outcome.push(format!("{:?}", e.kind()));
                break;
            }
        }
    }
    eprintln!("{backend:?}: the old connection saw {outcome:?}");
    let last = outcome.last().map(String::as_str).unwrap_or("nothing");
    assert!(
        matches!(last, "ConnectionReset" | "WouldBlock" | "TimedOut") || (reset_on_write && last == "EOF"),
        "the old connection should be reset or silent, saw {outcome:?}"
    );
    let done = server.stop();
    done.assert_clean_exit();
    assert_eq!(done.counters.get("connections_accepted"), 1, "{}", done.counters);
}

#[test]
fn restart_after_sigkill_xdp() {
    restart_after_sigkill(Backend::Xdp);
}

#[test]
fn restart_after_sigkill_packet() {
    restart_after_sigkill(Backend::Packet);
}

// ---------------------------------------------------------------------------------------------
// (c) Malformed and random frames
// ---------------------------------------------------------------------------------------------

/// Frames of each kind sent.
const EACH: usize = 10;
/// Random frames sent.
const RANDOM: usize = 1000;

/// A SYN from the peer to the echo port, as an IPv4 packet (checksums correct).
fn syn_packet(lab: &Lab, src_port: u16, frag: u16) -> Vec<u8> {
    let t = Tcp { src_port, dst_port: common::PORT, seq: 1000, ack: 0, flags: SYN, window: 1000 };
    ipv4(lab.peer_ip, lab.bypass_ip, 6, frag, &tcp(lab.peer_ip, lab.bypass_ip, t, &[]))
}

/// Send `EACH` frames of each malformed kind. (A frame shorter than an Ethernet header, the
/// stack's `truncated` drop, cannot be sent at all: AF_PACKET refuses frames under 14 bytes
/// with EINVAL, so "truncated" here means a packet shorter than its own headers say.)
fn inject_bad_frames(lab: &Lab, inj: &mut Injector) {
    let (us, peer) = (lab.bypass_mac, lab.peer_mac);
    let ip = |p: Vec<u8>| ethernet(us, peer, 0x0800, &p);
    for i in 0..EACH {
        let port = 2000 + i as u16;
        // IPv4 total length beyond the frame (truncated packet).
        let mut p = syn_packet(lab, port, 0);
        p[2..4].copy_from_slice(&1000u16.to_be_bytes());
        p[10..12].fill(0);
        let sum = common::checksum(&[&p[..20]]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        inj.send(&ip(p));
        // TCP header cut short (12 of 20 bytes).
        let t = tcp(
            lab.peer_ip,
            lab.bypass_ip,
            Tcp { src_port: port, dst_port: 7, seq: 1, ack: 0, flags: SYN, window: 1 },
            &[],
        );
        inj.send(&ip(ipv4(lab.peer_ip, lab.bypass_ip, 6, 0, &t[..12])));
        // Bad IPv4 header checksum.
        let mut p = syn_packet(lab, port, 0);
        p[10] ^= 0x5a;
        inj.send(&ip(p));
        // Bad TCP checksum.
        let mut p = syn_packet(lab, port, 0);
        p[20 + 16] ^= 0x5a;
        inj.send(&ip(p));
        // Another MAC, our IP.
        inj.send(&ethernet([0x02, 0, 0, 0x77, 0, 0x99], peer, 0x0800, &syn_packet(lab, port, 0)));
        // Our MAC, another IP.
        let t = tcp(
            lab.peer_ip,
            Ipv4Addr::new(10, 77, 0, 99),
            Tcp { src_port: port, dst_port: 7, seq: 1, ack: 0, flags: SYN, window: 1 },
            &[],
        );
        inj.send(&ip(ipv4(lab.peer_ip, Ipv4Addr::new(10, 77, 0, 99), 6, 0, &t)));
        // Fragments: a first fragment (MF) and a later one (offset 1480 bytes, last).
        inj.send(&ip(syn_packet(lab, port, 0x2000)));
        inj.send(&ip(syn_packet(lab, port, 185)));
        // UDP to us (a protocol the stack does not speak).
        inj.send(&ip(ipv4(lab.peer_ip, lab.bypass_ip, 17, 0, &[0x30, 0x39, 0, 7, 0, 12, 0, 0, 1, 2, 3, 4])));
        // An IPv6 ethertype.
        inj.send(&ethernet(us, peer, 0x86dd, &[0x60; 60]));
    }
    inj.flush();
}

fn inject_random_frames(lab: &Lab, inj: &mut Injector, seed: u64) {
    let mut rng = Rng::new(seed);
    for i in 0..RANDOM {
        let len = 14 + rng.below(1500) as usize;
        let mut f = vec![0u8; len];
        rng.fill(&mut f);
        f[..6].copy_from_slice(&lab.bypass_mac);
        f[6] &= 0xfe; // a unicast source
        match i % 4 {
            // Random after the MAC addresses.
            0 => {}
            // IPv4 to our address, the rest random (the XDP program redirects it to us).
            1 if len >= 34 => {
                f[12..14].copy_from_slice(&[0x08, 0x00]);
                f[30..34].copy_from_slice(&lab.bypass_ip.octets());
            }
            // ARP about our address, the rest random.
            2 if len >= 42 => {
                f[12..14].copy_from_slice(&[0x08, 0x06]);
                f[38..42].copy_from_slice(&lab.bypass_ip.octets());
            }
            // A well-formed IPv4 header and TCP checksum around a random TCP header and
            // payload, half of them to the echo port: they get past every integrity check.
            3 if len >= 54 => {
                let mut seg = f[34..].to_vec();
                if rng.below(2) == 0 {
                    seg[2..4].copy_from_slice(&common::PORT.to_be_bytes());
                }
                common::set_tcp_checksum(lab.peer_ip, lab.bypass_ip, &mut seg);
                let p = ipv4(lab.peer_ip, lab.bypass_ip, 6, 0, &seg);
                f = ethernet(lab.bypass_mac, lab.peer_mac, 0x0800, &p);
            }
            _ => {}
        }
        inj.send(&f);
        if i % 64 == 63 {
            inj.flush();
        }
    }
    inj.flush();
}

fn bad_input(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("bad{}", backend.arg()), backend) else { return };
    // A connection that lives through it all.
    let survivor = peer_connect(&lab, server_addr(&lab));
    echo_with_reader(&survivor, &data(10, 64 << 10), TIMEOUT).expect("echo before");

    let sent = with_peer_injector(&lab, |inj| {
        inject_bad_frames(&lab, inj);
        inject_random_frames(&lab, inj, 0xbad);
        inj.sent
    });
    assert_eq!(sent, (EACH * 10 + RANDOM) as u64);
    std::thread::sleep(Duration::from_millis(100));

    echo_with_reader(&survivor, &data(11, 1 << 20), TIMEOUT).expect("echo on the old connection after");
    echo_fresh(&lab, 12, 1 << 20);
    survivor.shutdown(Shutdown::Write).unwrap();
    read_to_eof(&survivor, Duration::from_secs(5)).expect("EOF");

    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    eprintln!("{backend:?}: counters after the bad input: {c}");
    let n = EACH as u64;
    for (name, at_least) in [
        ("drop.bad_ipv4_header", n),
        ("drop.bad_ipv4_checksum", n),
        ("drop.bad_tcp", 2 * n),
        ("drop.wrong_mac", n),
        // The same two fragments again and again: all but the first of each are dropped
        // as duplicates or as fragments of a datagram discarded for overlapping (RFC 5722).
        ("drop.fragment_dropped", 2 * n - 2),
        ("drop.unknown_protocol", n),
    ] {
        assert!(c.get(name) >= at_least, "{name} is {}, expected at least {at_least}: {c}", c.get(name));
    }
    if backend == Backend::Packet {
        // AF_PACKET sees everything; the XDP program passes these to the kernel instead.
        assert!(c.get("drop.wrong_ip_address") >= n, "{c}");
        assert!(c.get("drop.unknown_ethertype") >= n, "{c}");
    }
    // At least the random frames the XDP program redirects (3 of 4 kinds) reached the stack.
    assert!(c.get("rx_frames") >= (EACH * 7 + RANDOM / 2) as u64, "{c}");
    assert_eq!(c.get("connections_accepted"), 2, "{c}");
}

#[test]
fn bad_input_is_dropped_and_counted_xdp() {
    bad_input(Backend::Xdp);
}

#[test]
fn bad_input_is_dropped_and_counted_packet() {
    bad_input(Backend::Packet);
}

// ---------------------------------------------------------------------------------------------
// (d) SYN flood
// ---------------------------------------------------------------------------------------------

/// SYNs per burst, bursts per second, seconds: bursts larger than the SYN queue (256), so
/// half-open connections pile up faster than the peer's resets clear them.
const BURST: usize = 600;
const BURSTS_PER_SECOND: u32 = 10;
const FLOOD_SECONDS: u32 = 2;
const ECHO_CONNECTIONS: usize = 10;

fn syn_flood(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("flood{}", backend.arg()), backend) else { return };
    let streams = peer_connect_many(&lab, server_addr(&lab), ECHO_CONNECTIONS);
    let flooding = AtomicBool::new(true);
    let (sent, results) = std::thread::scope(|s| {
        let echoes: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(i, stream)| {
                let flooding = &flooding;
                s.spawn(move || -> Result<u64, String> {
                    let mut rounds = 0u64;
                    let mut back = vec![0u8; 1024];
                    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut stream = stream;
                    while flooding.load(Ordering::Relaxed) || rounds == 0 {
                        let message = data((i as u64) << 32 | rounds, 1024);
                        stream.write_all(&message).map_err(|e| format!("conn {i} round {rounds}: write: {e}"))?;
                        stream.read_exact(&mut back).map_err(|e| format!("conn {i} round {rounds}: read: {e}"))?;
                        if back != message {
                            return Err(format!(
                                "conn {i} round {rounds}: {}",
                                common::first_difference(&message, &back)
                            ));
                        }
                        rounds += 1;
                    }
                    Ok(rounds)
                })
            })
            .collect();
        let sent = with_peer_injector(&lab, |inj| {
            let mut rng = Rng::new(0xf100d);
            let start = Instant::now();
            let mut port: u16 = 1024;
            for burst in 0..BURSTS_PER_SECOND * FLOOD_SECONDS {
                for _ in 0..BURST {
                    // Source ports below the kernel's ephemeral range: never one of the
                    // established connections' 4-tuples.
                    port = if port >= 32000 { 1024 } else { port + 1 };
                    let t = Tcp {
                        src_port: port,
                        dst_port: common::PORT,
                        seq: rng.next_u64() as u32,
                        ack: 0,
                        flags: SYN,
                        window: 64240,
                    };
                    let p = ipv4(lab.peer_ip, lab.bypass_ip, 6, 0, &tcp(lab.peer_ip, lab.bypass_ip, t, &[]));
                    inj.send(&ethernet(lab.bypass_mac, lab.peer_mac, 0x0800, &p));
                }
                inj.flush();
                let next = start + Duration::from_secs(1) / BURSTS_PER_SECOND * (burst + 1);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            inj.sent
        });
        flooding.store(false, Ordering::Relaxed);
        let results: Vec<_> = echoes.into_iter().map(|h| h.join().unwrap()).collect();
        (sent, results)
    });
    let rounds: Vec<u64> = results.into_iter().map(|r| r.expect("echo during the flood")).collect();
    eprintln!("{backend:?}: {sent} SYNs sent; echo rounds per connection during the flood: {rounds:?}");
    // After the flood (its half-open connections reset by the peer), a new connection is an
    // ordinary one again, not a SYN cookie.
    std::thread::sleep(Duration::from_millis(200));
    echo_fresh(&lab, 13, 64 << 10);
    for s in &streams {
        s.shutdown(Shutdown::Write).unwrap();
        read_to_eof(s, Duration::from_secs(5)).expect("EOF");
    }
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    eprintln!("{backend:?}: counters after the flood: {c}");
    assert!(c.get("syn_cookies_sent") > 0, "no SYN cookies sent: {c}");
    assert_eq!(c.get("connections_accepted"), ECHO_CONNECTIONS as u64 + 1, "{c}");
    assert_eq!(c.get("syn_cookies_accepted"), 0, "the SYN queue was still full after the flood: {c}");
}

#[test]
fn syn_flood_xdp() {
    syn_flood(Backend::Xdp);
}

#[test]
fn syn_flood_packet() {
    syn_flood(Backend::Packet);
}

/// Half-open connections the peer resets (its kernel answers our SYN-ACKs with RST, having
/// no socket) must leave the SYN queue: bursts of 50 SYNs, each reset before the next burst,
/// never fill the 256-entry queue, so no SYN cookie is ever needed.
#[test]
fn reset_half_open_connections_leave_the_syn_queue() {
    let Some((lab, server, _capture)) = setup("halfopen", Backend::Xdp) else { return };
    let sent = with_peer_injector(&lab, |inj| {
        let mut rng = Rng::new(0x5eed);
        for burst in 0..6u16 {
            for i in 0..50u16 {
                let t = Tcp {
                    src_port: 1024 + burst * 50 + i,
                    dst_port: common::PORT,
                    seq: rng.next_u64() as u32,
                    ack: 0,
                    flags: SYN,
                    window: 64240,
                };
                let p = ipv4(lab.peer_ip, lab.bypass_ip, 6, 0, &tcp(lab.peer_ip, lab.bypass_ip, t, &[]));
                inj.send(&ethernet(lab.bypass_mac, lab.peer_mac, 0x0800, &p));
            }
            inj.flush();
            std::thread::sleep(Duration::from_millis(50));
        }
        inj.sent
    });
    assert_eq!(sent, 300);
    std::thread::sleep(Duration::from_millis(100));
    let resets = common::peer_nstat(&lab).get("TcpOutRsts").copied().unwrap_or(0);
    echo_fresh(&lab, 14, 1000);
    let done = server.stop();
    done.assert_clean_exit();
    let c = &done.counters;
    eprintln!("the peer reset {resets} SYN-ACKs; server counters: {c}");
    assert!(resets >= 300, "the peer kernel did not reset the SYN-ACKs ({resets} RSTs)");
    assert_eq!(c.get("syn_cookies_sent"), 0, "the SYN queue filled up with reset half-open connections: {c}");
    assert_eq!(c.get("syn_cookies_accepted"), 0, "{c}");
}
