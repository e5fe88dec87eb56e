//! Kernel TCP clients (std sockets in the peer namespace) against `bypass echo`, over AF_XDP and
//! over AF_PACKET.
//!
//! Needs root: without it each test says why it skips, except under `CI=true`, where it
//! fails. Each test holds its lab with the test binary's lock (`common::create_lab`), so
//! they run one at a time.
//!
//! Every clean run also checks the kernel peer's own view (`nstat -az` in its namespace):
//! `TcpRetransSegs`, `TcpOutRsts`, `TcpEstabResets` and `TcpExtTCPLostRetransmit` do not move,
//! so the stack lost no segment and reset nothing. The peer runs with tail loss probes off
//! (see `common::peer_without_tail_loss_probes`: on this shared two-vCPU machine they fire on
//! any 2 ms scheduling stall); `BYPASS_TEST_KEEP_TLP=1` leaves them on, and
//! `BYPASS_TEST_CAPTURE=DIR` records each test's traffic on the peer interface.

mod common;

use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

use bypass_lab::testlab::{Lab, lab_available};
use common::{
    Backend, Capture, EchoServer, TestLab, abort, data, echo_many, echo_with_reader, peer_connect, peer_connect_many,
    peer_nstat, read_to_eof, server_addr,
};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Build a lab and start the echo server on it, or return `None` to skip.
fn setup(test: &str, backend: Backend, extra: &[&str]) -> Option<(TestLab, EchoServer, Capture)> {
    setup_queues(test, backend, 1, extra)
}

fn setup_queues(test: &str, backend: Backend, queues: u32, extra: &[&str]) -> Option<(TestLab, EchoServer, Capture)> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    let lab = common::create_lab(test, queues);
    let capture = Capture::start(&lab, test);
    let server = EchoServer::start(&lab, backend, extra);
    Some((lab, server, capture))
}

/// Stop the server and check it exited normally; return its counters.
fn finish(server: EchoServer) -> common::Counters {
    let done = server.stop();
    done.assert_clean_exit();
    done.counters
}

// ---------------------------------------------------------------------------------------------
// Message sizes on one connection
// ---------------------------------------------------------------------------------------------

fn message_sizes(backend: Backend, check: Check) {
    let Some((lab, server, _capture)) = setup(&format!("sizes{}", backend.arg()), backend, &[]) else { return };
    let before = peer_nstat(&lab);
    for (i, len) in [64, 64 << 10, 1 << 20, 16 << 20].into_iter().enumerate() {
        let stream = peer_connect(&lab, server_addr(&lab));
        let message = data(0x5eed + i as u64, len);
        let start = Instant::now();
        echo_with_reader(&stream, &message, TIMEOUT).unwrap_or_else(|e| panic!("{backend:?}, {len} bytes: {e}"));
        let elapsed = start.elapsed();
        eprintln!("{backend:?}: {len} bytes echoed in {elapsed:?}");
        stream.shutdown(Shutdown::Write).expect("half-close");
        let rest = read_to_eof(&stream, Duration::from_secs(5)).expect("EOF after the echo");
        assert!(rest.is_empty(), "{} bytes after the echo", rest.len());
    }
    let counters = judge(&lab, &before, server, backend, check);
    assert_eq!(counters.get("connections_accepted"), 4, "{counters}");
}

#[test]
fn message_sizes_xdp() {
    message_sizes(Backend::Xdp, Check::Lossless);
}

#[test]
fn message_sizes_packet() {
    message_sizes(Backend::Packet, Check::Lossless);
}

/// The kernel completes the TCP checksums of what `bypass echo` sends over AF_XDP (the device
/// asks for it with TX metadata, and the stack writes only pseudo-header sums), and they come
/// out right. With bx0's own checksum offload off, the kernel sums each segment in software
/// (`skb_checksum_help`) and the peer verifies every one, so a wrong pseudo-header sum would
/// show in the peer's `TcpInCsumErrors` and as lost segments. (With the veth's default
/// offload on, the peer would take the segments unverified, which proves nothing.)
#[test]
fn checksums_the_kernel_completes_are_right_xdp() {
    checksums(&[]);
}

/// As above with `--software-checksums`: the stack computes every checksum itself, and asks
/// the kernel for none.
#[test]
fn software_checksums_are_right_xdp() {
    checksums(&["--software-checksums"]);
}

fn checksums(extra: &[&str]) {
    let software = extra.contains(&"--software-checksums");
    let test = if software { "swcsum-xdp" } else { "csum-xdp" };
    let Some(counters) = echoes_the_peer_verifies(test, 1500, extra, &[1, 1000, 1 << 20], 0xc5) else { return };
    let offloaded = counters.get("device.tx_checksum_offloaded");
    if software {
        assert_eq!(offloaded, 0, "checksums were offloaded: {counters}");
    } else {
        assert!(offloaded > 0, "no checksum was offloaded: {counters}");
    }
}

/// At a jumbo MTU (65,000 bytes) `bypass echo` sends 64 KB segments as multi-buffer packets,
/// each written in place in one of the device's spans of adjacent UMEM frames and queued as
/// 16 descriptors that follow each other (`device.tx_in_place`), with the kernel completing
/// the TCP checksum over the whole chain. With bx0's checksum offload off the kernel sums
/// every packet in software and the peer verifies it: echoes of up to 16 MiB come back
/// intact, with no checksum error, retransmission or reset at the peer.
#[test]
fn jumbo_segments_written_in_place_arrive_intact_xdp() {
    let sizes = [1000, 1 << 20, 16 << 20];
    let Some(counters) = echoes_the_peer_verifies("jumbo-xdp", 65_000, &[], &sizes, 0x7a) else { return };
    for name in
        ["device.tx_in_place", "device.tx_multi_buffer", "device.rx_multi_buffer", "device.tx_checksum_offloaded"]
    {
        assert!(counters.get(name) > 0, "no {name}: {counters}");
    }
}

/// With bx0 at `mtu` and its transmit checksum offload off (so the kernel completes, in
/// software, every checksum `bypass echo` asks it for, and the kernel peer verifies each),
/// echo messages of `sizes` bytes on one connection each: every echo intact, no checksum
/// error at the peer, nothing lost or reset. The server's counters, or `None` when the test
/// is skipped.
fn echoes_the_peer_verifies(
    test: &str,
    mtu: u32,
    extra: &[&str],
    sizes: &[usize],
    seed: u64,
) -> Option<common::Counters> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    let lab = common::create_lab_mtu(test, 1, mtu);
    let iface = lab.bypass_if.clone();
    lab.in_bypass(|| bypass_io::netdev::set_offloads(&iface, &[(bypass_io::netdev::Offload::TxChecksum, false)]))
        .expect("turn bx0's tx checksum offload off");
    let _capture = Capture::start(&lab, test);
    let server = EchoServer::start(&lab, Backend::Xdp, extra);
    let before = peer_nstat(&lab);
    for (i, &len) in sizes.iter().enumerate() {
        let stream = peer_connect(&lab, server_addr(&lab));
        let message = data(seed + i as u64, len);
        echo_with_reader(&stream, &message, TIMEOUT).unwrap_or_else(|e| panic!("{len} bytes: {e}"));
        stream.shutdown(Shutdown::Write).expect("half-close");
        assert!(read_to_eof(&stream, Duration::from_secs(5)).expect("EOF after the echo").is_empty());
    }
    let peer = common::peer_changes(&lab, &before);
    assert_eq!(peer.get("TcpInCsumErrors"), 0, "the peer found bad checksums: {peer}");
    Some(judge(&lab, &before, server, Backend::Xdp, Check::Lossless))
}

// ---------------------------------------------------------------------------------------------
// Concurrent connections
// ---------------------------------------------------------------------------------------------

/// How strictly a run is judged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Every byte echoed, no reset on either side.
    Echo,
    /// That, and the kernel peer retransmitted nothing (the stack lost no segment).
    Lossless,
}

/// Open `n` connections at once, echo `len` bytes on each (all concurrently), half-close,
/// expect EOF; the peer must see no reset (and with [`Check::Lossless`] no retransmission).
fn concurrent(backend: Backend, n: usize, len: usize, threads: usize, check: Check) {
    concurrent_with(backend, n, len, threads, check, &[]);
}

/// [`concurrent`] against a server started with `extra` arguments; its counters, unless the
/// lab is unavailable (and the test skipped).
fn concurrent_with(
    backend: Backend,
    n: usize,
    len: usize,
    threads: usize,
    check: Check,
    extra: &[&str],
) -> Option<common::Counters> {
    let test = format!("conc{n}{}{}", backend.arg(), extra.len());
    let (lab, server, _capture) = setup(&test, backend, extra)?;
    let before = peer_nstat(&lab);
    let start = Instant::now();
    let streams = peer_connect_many(&lab, server_addr(&lab), n);
    let connected = start.elapsed();
    let echoed = echo_many(streams, len, n as u64, threads, TIMEOUT);
    let elapsed = start.elapsed();
    eprintln!("{backend:?}: {n} connections opened in {connected:?}, {len} bytes echoed on each in {elapsed:?}");
    let counters = judge(&lab, &before, server, backend, check);
    echoed.unwrap_or_else(|e| panic!("{backend:?}: {e}"));
    assert_eq!(counters.get("connections_accepted"), n as u64, "{counters}");
    // A reset may answer a stray ACK: on a loaded machine a tail-loss probe can resend the
    // FIN while the peer's ACK of it is on its way; the peer ACKs the probe too, and that
    // second ACK finds the connection closed (RST from CLOSED, as Linux answers it, to a
    // peer in TIME-WAIT, which the peer's counters above show as no reset). Any other reset
    // is a failure.
    let resets = counters.get("tcp_resets_out") - counters.get("drop.stray_ack").min(counters.get("tcp_resets_out"));
    assert_eq!(resets, 0, "the server sent resets other than answers to stray ACKs: {counters}");
    Some(counters)
}

/// Stop the server and judge the run from the peer's counters since `before` (see
/// [`common::verdict`]): it exited cleanly, nobody sent a reset, and with [`Check::Lossless`]
/// nothing was lost. Failures say where frames went missing (peer counters, link drops,
/// frames the interface took in but the stack never saw).
fn judge(
    lab: &Lab,
    before: &std::collections::BTreeMap<String, u64>,
    server: EchoServer,
    backend: Backend,
    check: Check,
) -> common::Counters {
    // Let the last ACKs of the closes arrive.
    std::thread::sleep(Duration::from_millis(50));
    let peer = common::peer_changes(lab, before);
    let links = common::link_drops(lab);
    let link_rx = common::bypass_link_rx_packets(lab);
    let counters = finish(server);
    let lost = link_rx.saturating_sub(counters.get("rx_frames"));
    let links = format!("{links} [frames bx0 received but the stack did not: {lost}]");
    eprintln!("  kernel peer: {peer}\n  links: {links}\n  server: {counters}");
    let resets = peer.get("TcpOutRsts") + peer.get("TcpEstabResets");
    assert_eq!(resets, 0, "the kernel peer saw or sent resets: {peer}");
    if check == Check::Lossless
        && let Err(e) = common::verdict(backend, &peer, lost, common::peer_link_tx_dropped(lab))
    {
        panic!("{e}; links: {links}; server: {counters}");
    }
    counters
}

#[test]
fn one_connection_xdp() {
    concurrent(Backend::Xdp, 1, 1 << 20, 1, Check::Lossless);
}

#[test]
fn one_connection_packet() {
    concurrent(Backend::Packet, 1, 1 << 20, 1, Check::Lossless);
}

// 100 and 1000 concurrent connections echo correctly without a reset, and (the `_lossless_`
// variants) without the kernel peer retransmitting: the stack keeps the sum of its receive
// windows within half its device's receive ring (`StackConfig::window_budget`), so what the
// windows let in fits the ring even while the stack is descheduled.

#[test]
fn thousand_connections_xdp() {
    // Lossless on every run, loaded or not: about 2000 frames fit the 4096-frame ring.
    concurrent(Backend::Xdp, 1000, 64, 2, Check::Lossless);
}

#[test]
fn thousand_connections_packet() {
    concurrent(Backend::Packet, 1000, 64, 2, Check::Echo);
}

#[test]
fn hundred_connections_lossless_xdp() {
    concurrent(Backend::Xdp, 100, 64 << 10, 2, Check::Lossless);
}

#[test]
fn hundred_connections_lossless_packet() {
    concurrent(Backend::Packet, 100, 64 << 10, 2, Check::Lossless);
}

// The same 100 connections, 256 KiB each, into a receive ring of 512 frames: a tenth of
// what the windows would let in at once without the stack's window budget (the control
// loses thousands of frames to the full ring), and lossless with it. The echo's own data in
// flight draws the peer's ACKs into the same ring: without the flight budget
// (`--flight-budget none`) 10 of 12 runs on a loaded machine dropped 29 to 160 frames for
// an empty fill ring, mostly ACKs, now and then a data segment the peer had to send again;
// with it, none.

#[test]
fn small_ring_lossless_xdp() {
    if let Some(counters) = concurrent_with(Backend::Xdp, 100, 256 << 10, 2, Check::Lossless, &["--rx-ring", "512"]) {
        assert_eq!(counters.get("device.rx_dropped"), 0, "the ring overflowed: {counters}");
    }
}

#[test]
fn small_ring_lossless_packet() {
    concurrent_with(Backend::Packet, 100, 256 << 10, 2, Check::Lossless, &["--rx-ring", "512"]);
}

#[test]
fn small_ring_without_the_window_budget_overflows() {
    let args = ["--rx-ring", "512", "--window-budget", "none"];
    if let Some(counters) = concurrent_with(Backend::Packet, 100, 256 << 10, 2, Check::Echo, &args) {
        assert!(counters.get("device.rx_ring_full") > 0, "the control lost nothing: {counters}");
    }
}

#[test]
fn thousand_connections_lossless_packet() {
    // 1000 clients x (64 B + FIN): about 2000 frames, within the 4096-slot RX ring.
    concurrent(Backend::Packet, 1000, 64, 2, Check::Lossless);
}

// ---------------------------------------------------------------------------------------------
// Half-close, abort, server-initiated close
// ---------------------------------------------------------------------------------------------

/// The client writes everything, half-closes, and only then reads: all of it comes back, then
/// EOF (the server finishes echoing before it closes its side).
fn half_close(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("half{}", backend.arg()), backend, &[]) else { return };
    let before = peer_nstat(&lab);
    let stream = peer_connect(&lab, server_addr(&lab));
    // Small enough to sit in the buffers of both sides while nobody reads.
    let message = data(42, 32 << 10);
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    (&stream).write_all(&message).expect("write");
    stream.shutdown(Shutdown::Write).expect("half-close");
    let back = read_to_eof(&stream, Duration::from_secs(5)).expect("echo, then EOF");
    assert!(back == message, "echo differs: {}", common::first_difference(&message, &back));
    drop(stream);
    judge(&lab, &before, server, backend, Check::Lossless);
}

#[test]
fn half_close_xdp() {
    half_close(Backend::Xdp);
}

#[test]
fn half_close_packet() {
    half_close(Backend::Packet);
}

/// The client resets connections (SO_LINGER 0, close): one idle, one in the middle of a
/// 4 MiB echo; the server forgets them and goes on serving.
fn client_abort(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("abort{}", backend.arg()), backend, &[]) else { return };
    let before = peer_nstat(&lab);
    let addr = server_addr(&lab);

    let idle = peer_connect(&lab, addr);
    echo_with_reader(&idle, b"ping", TIMEOUT).expect("echo before the abort");
    abort(idle);

    let busy = peer_connect(&lab, addr);
    {
        use std::io::Read;
        let message = data(7, 4 << 20);
        busy.set_write_timeout(Some(TIMEOUT)).unwrap();
        busy.set_read_timeout(Some(TIMEOUT)).unwrap();
        // Write 1 MiB, read part of the echo, and abort with the rest in flight both ways.
        (&busy).write_all(&message[..1 << 20]).expect("write");
        let mut got = vec![0u8; 64 << 10];
        (&busy).read_exact(&mut got).expect("read part of the echo");
        assert!(got == message[..64 << 10], "echo differs before the abort");
    }
    abort(busy);

    let peer = common::peer_changes(&lab, &before);
    assert!(peer.get("TcpOutRsts") >= 2, "the aborts sent no RSTs: {peer}");

    // The server is still healthy: a new connection echoes 1 MiB.
    std::thread::sleep(Duration::from_millis(100));
    let after = peer_nstat(&lab);
    let fresh = peer_connect(&lab, addr);
    echo_with_reader(&fresh, &data(8, 1 << 20), TIMEOUT).expect("echo after the aborts");
    fresh.shutdown(Shutdown::Write).unwrap();
    read_to_eof(&fresh, Duration::from_secs(5)).expect("EOF");
    drop(fresh);
    let counters = judge(&lab, &after, server, backend, Check::Lossless);
    assert_eq!(counters.get("connections_accepted"), 3, "{counters}");
}

#[test]
fn client_abort_xdp() {
    client_abort(Backend::Xdp);
}

#[test]
fn client_abort_packet() {
    client_abort(Backend::Packet);
}

/// `--idle-timeout 0.5`: the server closes an idle connection; the client sees EOF.
fn server_close(backend: Backend) {
    let Some((lab, server, _capture)) = setup(&format!("idle{}", backend.arg()), backend, &["--idle-timeout", "0.5"])
    else {
        return;
    };
    let before = peer_nstat(&lab);
    let stream = peer_connect(&lab, server_addr(&lab));
    echo_with_reader(&stream, &data(9, 1000), TIMEOUT).expect("echo");
    let start = Instant::now();
    let rest = read_to_eof(&stream, Duration::from_secs(5)).expect("the server closes an idle connection");
    let waited = start.elapsed();
    assert!(rest.is_empty(), "{} unexpected bytes", rest.len());
    assert!(waited >= Duration::from_millis(400), "closed after only {waited:?} idle");
    eprintln!("{backend:?}: EOF after {waited:?} idle");
    drop(stream);
    judge(&lab, &before, server, backend, Check::Lossless);
}

#[test]
fn server_closes_idle_connection_xdp() {
    server_close(Backend::Xdp);
}

#[test]
fn server_closes_idle_connection_packet() {
    server_close(Backend::Packet);
}

// ---------------------------------------------------------------------------------------------
// Multi-queue
// ---------------------------------------------------------------------------------------------

/// Two veth queues, one shard per queue (`--queues 2`): 50 connections echo correctly on
/// whichever queue the veth steers them to. With `lanes`, each queue has its SYN lane
/// (`--syn-lane`, keyed after the queues in the program's map), and every connection's SYN
/// arrives through the lane of the queue that accepts it.
fn two_queues(tag: &str, lanes: bool) {
    let args: &[&str] = if lanes { &["--queues", "2", "--syn-lane", "64"] } else { &["--queues", "2"] };
    let Some((lab, server, _capture)) = setup_queues(tag, Backend::Xdp, 2, args) else { return };
    let before = peer_nstat(&lab);
    let streams = peer_connect_many(&lab, server_addr(&lab), 50);
    let echoed = echo_many(streams, 64 << 10, 50, 2, TIMEOUT);
    std::thread::sleep(Duration::from_millis(50));
    let peer = common::peer_tcp_changes(&lab, &before);
    let done = server.stop();
    done.assert_clean_exit();
    let per_queue: Vec<u64> = done.per_queue.iter().map(|q| q.get("connections_accepted")).collect();
    eprintln!("connections per queue: {per_queue:?}\n  kernel peer: {peer}\n  server: {}", done.counters);
    echoed.expect("echo on 50 connections over two queues");
    assert_eq!(done.per_queue.len(), 2, "counters of two queues expected: {}", done.stdout);
    assert_eq!(per_queue.iter().sum::<u64>(), 50, "{}", done.counters);
    if lanes {
        let laned: Vec<u64> = done.per_queue.iter().map(|q| q.get("device.syn_lane")).collect();
        assert_eq!(laned, per_queue, "each queue's SYNs came through its lane: {}", done.counters);
    }
    let changes = common::peer_changes(&lab, &before);
    assert_eq!(changes.get("TcpOutRsts") + changes.get("TcpEstabResets"), 0, "resets: {peer}");
}

#[test]
fn two_queues_xdp() {
    two_queues("queues2", false);
}

#[test]
fn two_queues_with_syn_lanes_xdp() {
    two_queues("queues2lane", true);
}

// ---------------------------------------------------------------------------------------------
// A small receive window after a large SYN window (RFC 9293 3.8.6.2.1)
// ---------------------------------------------------------------------------------------------

/// Echo 64 KiB to a kernel client whose receive buffer shrinks after its SYN has left: the SYN
/// offers what a stock Linux offers (64240 bytes, unscaled, and window scale 7), every window
/// after it about 1 KiB (SO_RCVBUF 1024, which the kernel makes 2304, and
/// `net.ipv4.tcp_shrink_window = 1`, so the handshake's ACK already says so). That takes some
/// fifty round trips of well under a millisecond. With the SYN's 64240 bytes counted as the
/// largest window, SWS avoidance held back every segment under half of it and each window
/// waited for the 1 s persist timer: 56 s in all.
fn small_receive_window(backend: Backend) {
    let test = format!("smallrcv{}", backend.arg());
    if !lab_available(&test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(&test, 1);
    let _capture = Capture::start(&lab, &test);
    if !peer_sysctl(&lab, "net/ipv4/tcp_shrink_window", "1") {
        let why = "the kernel has no net.ipv4.tcp_shrink_window (Linux 6.5 and later)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: {why} (CI=true: this test must run)");
        eprintln!("skipping {test}: {why}");
        return;
    }
    // The stock maximum (6 MiB) makes the SYN offer window scale 7, whatever the host has.
    assert!(peer_sysctl(&lab, "net/ipv4/tcp_rmem", "4096 131072 6291456"), "set tcp_rmem in the peer namespace");
    // The SYN must leave before the buffer shrinks, and the handshake complete after: connect
    // before the server is up. The first SYN goes unanswered and the kernel sends it again a
    // second later, window and scale unchanged; the server's MAC is entered by hand so that
    // no failed ARP ends the attempt meanwhile.
    let mac = lab.bypass_mac.map(|b| format!("{b:02x}")).join(":");
    let ip = lab.bypass_ip.to_string();
    lab.ip_peer(&["neigh", "replace", &ip, "lladdr", &mac, "dev", &lab.peer_if, "nud", "permanent"])
        .expect("enter the server's MAC in the peer's neighbour table");
    let stream = lab.in_peer(|| start_connect(server_addr(&lab))).expect("start a connection from the peer");
    set_rcvbuf(&stream, 1024).expect("setsockopt(SO_RCVBUF)");
    let server = EchoServer::start(&lab, backend, &[]);
    let connected = wait_connected(&stream, Duration::from_secs(10)).expect("connect");
    // What the kernel offers: scale 7, and a buffer of a couple of KiB ("skmem:(r0,rb2304,..").
    let ss = lab.peer_cmd("ss").args(["-tnmi", "state", "established"]).output().expect("run ss");
    let ss = String::from_utf8_lossy(&ss.stdout).into_owned();
    let rcv_wscale = ss.split("wscale:").nth(1).and_then(|w| w.split([',', ' ']).nth(1)?.parse::<u8>().ok());
    let rcvbuf = ss.split(",rb").nth(1).and_then(|r| r.split(',').next()?.parse::<u32>().ok());
    eprintln!("{backend:?}: connected in {connected:?}; peer: {}", ss.trim());
    assert_eq!(rcv_wscale, Some(7), "the kernel's window scale: {ss}");
    assert!(rcvbuf.is_some_and(|b| b < 4096), "the kernel's receive buffer: {ss}");

    let before = peer_nstat(&lab);
    let start = Instant::now();
    let echoed = echo_many(vec![stream], 64 << 10, 0x5ca1e, 1, Duration::from_secs(5));
    let elapsed = start.elapsed();
    eprintln!("{backend:?}: 64 KiB echoed through a ~1 KiB window in {elapsed:?}");
    echoed.unwrap_or_else(|e| panic!("{backend:?}: {e} (after {elapsed:?})"));
    // Round trips only: some fifty take milliseconds. A timer per window would take 11 s
    // even at the 200 ms override timeout, 56 s at the RTO. The bound leaves room for a
    // frame or two lost on a loaded machine (each costs one 1 s retransmission timeout:
    // seen once when the whole suite ran at once, AF_PACKET's ring overflowing).
    assert!(elapsed < Duration::from_secs(4), "{backend:?}: the echo took {elapsed:?}");
    // No reset; and no retransmission by the kernel during the echo (not `Check::Lossless`,
    // which also counts frames the interface took in before the server ran: the first SYN).
    judge(&lab, &before, server, backend, Check::Echo);
    // A retransmission the peer's kernel learned was needless (a D-SACK for each, RFC 2883:
    // both copies arrived) is not loss. Seen twice on a loaded machine (a CI run beside two
    // builds), AF_PACKET only: 7 and 6 segments fast-retransmitted, each D-SACKed, the
    // recovery undone. The reading: without an XDP program on bx0 a veth hands each frame to
    // the backlog of the CPU that sent it, so two segments the kernel sent from two CPUs can
    // arrive swapped; our ACK then carries a SACK block, and the kernel resends what lies
    // between.
    let peer = common::peer_changes(&lab, &before);
    let (retransmitted, needless) = (peer.get("TcpRetransSegs"), peer.get("TcpExtTCPDSACKRecvSegs"));
    assert!(retransmitted <= needless, "{backend:?}: the kernel peer retransmitted what was lost: {peer}");
}

/// Set the sysctl `/proc/sys/<path>` to `value` in the peer namespace; return whether it took.
fn peer_sysctl(lab: &Lab, path: &str, value: &str) -> bool {
    lab.in_peer(|| std::fs::write(format!("/proc/sys/{path}"), value)).is_ok()
}

/// Start a non-blocking connect to `addr` and return the socket while its SYN is out.
#[allow(unsafe_code)]
fn start_connect(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let std::net::SocketAddr::V4(v4) = addr else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "an IPv4 address is needed"));
    };
    // SAFETY: socket(2) takes no pointers; a non-negative result is a descriptor nobody else
    // owns, so `OwnedFd` may take it (and closes it on every path below).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: see above.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: the descriptor is open; the address points at a `sockaddr_in` that lives across
    // the call, and the length passed is its size.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    let error = std::io::Error::last_os_error();
    if rc != 0 && error.raw_os_error() != Some(libc::EINPROGRESS) {
        return Err(error);
    }
    Ok(std::net::TcpStream::from(fd))
}

/// Set SO_RCVBUF on `stream` (the kernel doubles it, and keeps at least its minimum).
#[allow(unsafe_code)]
fn set_rcvbuf(stream: &std::net::TcpStream, bytes: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is an open socket owned by `stream`, alive for the call; the
    // option value points at a `c_int` that lives across the call, and the length passed is
    // its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Wait until the non-blocking connect of `stream` completes; return how long it took.
fn wait_connected(stream: &std::net::TcpStream, timeout: Duration) -> std::io::Result<Duration> {
    let start = Instant::now();
    loop {
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        if stream.peer_addr().is_ok() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("not connected in {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn small_receive_window_xdp() {
    small_receive_window(Backend::Xdp);
}

#[test]
fn small_receive_window_packet() {
    small_receive_window(Backend::Packet);
}

// ---------------------------------------------------------------------------------------------
// Control: the same clients against a kernel echo server (run by hand: `--ignored`)
// ---------------------------------------------------------------------------------------------

/// A kernel echo server (one thread per connection) on 10.77.0.3 in the bypass namespace.
fn kernel_echo_server(lab: &Lab) -> std::net::SocketAddr {
    lab.ip_bypass(&["addr", "add", "10.77.0.3/24", "dev", &lab.bypass_if]).expect("add 10.77.0.3");
    let listener = lab.in_bypass(|| std::net::TcpListener::bind("10.77.0.3:7")).expect("bind 10.77.0.3:7");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                loop {
                    match std::io::Read::read(&mut conn, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if conn.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
#[ignore = "control experiment: kernel against kernel, for comparing retransmission counts"]
fn control_kernel_server() {
    if !lab_available("control_kernel_server") {
        return;
    }
    let lab = Lab::create("control").expect("create the lab");
    if std::env::var("CONTROL_NO_TLP").is_ok() {
        common::peer_without_tail_loss_probes(&lab);
    }
    let addr = kernel_echo_server(&lab);
    for (n, len) in [(1, 16 << 20), (100, 64 << 10), (1000, 64)] {
        let before = peer_nstat(&lab);
        let streams = lab.in_peer(|| {
            (0..n).map(|_| std::net::TcpStream::connect_timeout(&addr, TIMEOUT).unwrap()).collect::<Vec<_>>()
        });
        echo_many(streams, len, 1, 2, TIMEOUT).expect("echo");
        std::thread::sleep(Duration::from_millis(50));
        eprintln!("kernel server, {n} x {len} B: {}", common::peer_tcp_changes(&lab, &before));
    }
}
