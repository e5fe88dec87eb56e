//! No blind forgery, on one host fed frames built by hand: SYN cookies
//! are checked only shortly after a SYN-queue overflow, and ephemeral ports follow RFC 6056
//! algorithm 4; and listeners keep their queues without scanning the table. Frames go straight into `Interface::receive`; what the host sends goes
//! into a scripted device that keeps it.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_device::{DeviceInfo, ScriptedDevice};
use bypass_stack::{ConnectError, Drop, Interface, StackConfig};
use bypass_tcp::{Flags, Instant, Segment, SeqNum};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header};

const US: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const SECRET: [u8; 16] = [7; 16];
const PORT: u16 = 80;

/// A device that keeps what the host sends.
fn sink() -> ScriptedDevice {
    ScriptedDevice::new(DeviceInfo::new("sink", MAC, 1500, "test"))
}

/// SplitMix64: reproducible random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Return a unicast source no martian filter drops: outside 0/8, 10/8 (ours), 127/8
    /// and 224/3.
    fn source(&mut self) -> Ipv4Addr {
        loop {
            let a = Ipv4Addr::from(self.next() as u32);
            if !matches!(a.octets()[0], 0 | 10 | 127 | 224..) {
                return a;
            }
        }
    }
}

fn host(tweak: impl Fn(&mut StackConfig)) -> Interface {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut config = StackConfig::new(US, 24, SECRET);
    tweak(&mut config);
    Interface::new(config, MAC, 1500)
}

/// Write into `frame` an Ethernet frame from `src` to us carrying `seg`; return its length.
fn tcp_frame(frame: &mut [u8; 128], src: Ipv4Addr, seg: &Segment<'_>) -> usize {
    let n = seg.emit(IpAddr::V4(src), IpAddr::V4(US), &mut frame[34..]).expect("segment fits");
    let eth = Ethernet2Header { source: PEER_MAC, destination: MAC, ether_type: EtherType::IPV4 };
    frame[..14].copy_from_slice(&eth.to_bytes());
    let mut ip = Ipv4Header::new(n as u16, 64, IpNumber::TCP, src.octets(), US.octets()).expect("fits");
    ip.header_checksum = ip.calc_header_checksum();
    frame[14..34].copy_from_slice(&ip.to_bytes());
    34 + n
}

fn receive(host: &mut Interface, now: Instant, src: Ipv4Addr, seg: &Segment<'_>) {
    let mut frame = [0u8; 128];
    let n = tcp_frame(&mut frame, src, seg);
    host.receive(now, &frame[..n]);
}

fn syn(src_port: u16, isn: u32) -> Segment<'static> {
    Segment { src_port, dst_port: PORT, seq: SeqNum(isn), flags: Flags::SYN, window: 64240, ..Segment::EMPTY }
}

fn ack(src_port: u16, seq: u32, ack: u32) -> Segment<'static> {
    Segment { src_port, dst_port: PORT, seq: SeqNum(seq), ack: SeqNum(ack), flags: Flags::ACK, ..Segment::EMPTY }
}

/// Send `host` a SYN from `PEER:src_port` with ISN `isn` and return the ISS of its
/// SYN-ACK (a cookie when the SYN queue is full).
fn syn_ack_iss(host: &mut Interface, now: Instant, src_port: u16, isn: u32) -> u32 {
    receive(host, now, PEER, &syn(src_port, isn));
    let mut sink = sink();
    host.transmit(now, &mut sink).unwrap();
    let (_, frame) = sink.sent().iter().find(|(_, f)| f.len() >= 54 && f[23] == 6 && f[47] == 0x12).expect("a SYN-ACK");
    u32::from_be_bytes(frame[38..42].try_into().unwrap())
}

/// Return whether the host sent a RST.
fn sent_rst(host: &mut Interface, now: Instant) -> bool {
    let mut sink = sink();
    host.transmit(now, &mut sink).unwrap();
    sink.sent().iter().any(|(_, f)| f.len() >= 54 && f[23] == 6 && f[47] & 0x04 != 0)
}

// -------------------------------------------------------------------------------------
// SYN cookies: checked only within `syn_cookie_valid` of an overflow.
// -------------------------------------------------------------------------------------

#[test]
fn a_million_random_acks_without_an_overflow_make_no_connection() {
    let mut host = host(|_| {});
    let listener = host.listen(PORT).unwrap();
    let mut rng = Rng(0x0a11_ac75);
    let mut sink = sink();
    // Frames sent, counted and dropped after each transmit so that a million do not pile up.
    let mut sent = 0;
    let mut frame = [0u8; 128];
    let mut now = Instant::from_millis(1_000);
    const ACKS: u64 = 1_000_000;
    for i in 0..ACKS {
        let bits = rng.next();
        // ACK with any of PSH, FIN, URG, never SYN or RST.
        let extra = Flags::from_bits((bits >> 48) as u16 & (Flags::PSH | Flags::FIN | Flags::URG).bits());
        let seg = Segment {
            src_port: bits as u16,
            dst_port: PORT,
            seq: SeqNum((bits >> 16) as u32),
            ack: SeqNum(rng.next() as u32),
            flags: Flags::ACK | extra,
            window: (bits >> 32) as u16,
            ..Segment::EMPTY
        };
        let src = rng.source();
        let n = tcp_frame(&mut frame, src, &seg);
        host.receive(now, &frame[..n]);
        if i % 4096 == 4095 {
            host.transmit(now, &mut sink).unwrap();
            sent += sink.take_sent().len() as u64;
            now += Duration::from_micros(4096);
        }
    }
    host.transmit(now, &mut sink).unwrap();
    sent += sink.take_sent().len() as u64;
    host.deliver_events();
    assert_eq!(host.accept(listener), None);
    assert_eq!(host.connection_count(), 0);
    let c = host.counters();
    assert_eq!(c.syn_cookies_accepted, 0);
    assert_eq!(c.drops(Drop::StrayAck), ACKS, "{c}");
    assert_eq!(c.drops(Drop::BadSynCookie), 0, "no cookie was checked: {c}");
    assert_eq!(c.tcp_resets_out, ACKS, "RFC 9293 3.10.7.2: each ACK to LISTEN is answered with RST");
    assert_eq!(sent, ACKS);
    let report = c.to_string();
    let line = report.lines().find(|l| l.starts_with("drop.stray_ack ")).expect("the reason is named in the report");
    assert_eq!(line.split_whitespace().nth(1), Some(ACKS.to_string().as_str()), "{report}");
}

#[test]
fn random_acks_during_an_overflow_are_checked_and_make_no_connection() {
    let mut host = host(|c| c.syn_queue = 0);
    let listener = host.listen(PORT).unwrap();
    let now = Instant::from_millis(1_000);
    syn_ack_iss(&mut host, now, 40_000, 1);
    assert_eq!(host.counters().syn_cookies_sent, 1);
    let mut rng = Rng(0xc00c1e);
    let mut sink = sink();
    const ACKS: u64 = 200_000;
    for i in 0..ACKS {
        let bits = rng.next();
        receive(&mut host, now, rng.source(), &ack(bits as u16, (bits >> 16) as u32, (bits >> 32) as u32));
        if i % 4096 == 4095 {
            host.transmit(now, &mut sink).unwrap();
            sink.take_sent();
        }
    }
    host.transmit(now, &mut sink).unwrap();
    assert_eq!((host.connection_count(), host.accept(listener)), (0, None));
    let c = host.counters();
    assert_eq!(c.drops(Drop::BadSynCookie), ACKS, "every ACK was checked as a cookie and failed: {c}");
    assert_eq!(c.drops(Drop::StrayAck), 0);
}

#[test]
fn a_genuine_cookie_is_refused_by_a_listener_that_never_overflowed() {
    // Two hosts with one secret: the first, with no SYN queue, makes a genuine cookie; the
    // second has never sent one, so it does not even check it.
    let now = Instant::from_millis(1_000);
    let mut flooded = host(|c| c.syn_queue = 0);
    let mut calm = host(|_| {});
    let listener = flooded.listen(PORT).unwrap();
    let calm_listener = calm.listen(PORT).unwrap();
    let cookie = syn_ack_iss(&mut flooded, now, 40_001, 5_000);
    let ack = ack(40_001, 5_001, cookie.wrapping_add(1));

    receive(&mut calm, now, PEER, &ack);
    assert!(sent_rst(&mut calm, now), "RFC 9293 3.10.7.2: RST for an ACK to LISTEN");
    assert_eq!((calm.connection_count(), calm.accept(calm_listener)), (0, None));
    assert_eq!(calm.counters().drops(Drop::StrayAck), 1);
    assert_eq!(calm.counters().syn_cookies_accepted, 0);

    // The same ACK completes the handshake where the cookie was made: it is genuine.
    receive(&mut flooded, now, PEER, &ack);
    assert_eq!(flooded.counters().syn_cookies_accepted, 1);
    assert!(flooded.accept(listener).is_some());
}

#[test]
fn a_cookie_is_refused_once_the_window_after_the_overflow_has_passed() {
    // Default window, 2 minutes: a cookie from t = 0 s is still live for the codec at
    // t = 121 s (period 1 of 64 s), but the listener last overflowed 121 s ago.
    let mut host = host(|c| c.syn_queue = 0);
    assert_eq!(host.config().syn_cookie_valid, Duration::from_secs(120));
    let listener = host.listen(PORT).unwrap();
    let t0 = Instant::ZERO;
    let cookie = syn_ack_iss(&mut host, t0, 40_002, 9_000);
    let late = t0 + Duration::from_secs(121);
    receive(&mut host, late, PEER, &ack(40_002, 9_001, cookie.wrapping_add(1)));
    assert!(sent_rst(&mut host, late));
    assert_eq!((host.connection_count(), host.accept(listener)), (0, None));
    assert_eq!(host.counters().drops(Drop::StrayAck), 1);

    // Within the window the same kind of handshake completes, and every cookie sent
    // extends the window: the second cookie's ACK comes 172 s after the first overflow.
    let t1 = Instant::from_millis(130_000);
    let first = syn_ack_iss(&mut host, t1, 40_003, 10_000);
    receive(&mut host, t1 + Duration::from_secs(5), PEER, &ack(40_003, 10_001, first.wrapping_add(1)));
    let t2 = Instant::from_millis(192_000);
    let second = syn_ack_iss(&mut host, t2, 40_004, 11_000);
    receive(&mut host, t2 + Duration::from_secs(110), PEER, &ack(40_004, 11_001, second.wrapping_add(1)));
    assert_eq!(host.counters().syn_cookies_accepted, 2);
    assert!(host.accept(listener).is_some() && host.accept(listener).is_some());
}

#[test]
fn the_window_is_configurable() {
    let mut host = host(|c| {
        c.syn_queue = 0;
        c.syn_cookie_valid = Duration::from_secs(10);
    });
    host.listen(PORT).unwrap();
    let t0 = Instant::from_millis(1_000);
    let early = syn_ack_iss(&mut host, t0, 40_010, 1);
    let late = syn_ack_iss(&mut host, t0, 40_011, 2);
    receive(&mut host, t0 + Duration::from_secs(10), PEER, &ack(40_010, 2, early.wrapping_add(1)));
    receive(&mut host, t0 + Duration::from_secs(11), PEER, &ack(40_011, 3, late.wrapping_add(1)));
    let c = host.counters();
    assert_eq!((c.syn_cookies_accepted, c.drops(Drop::StrayAck)), (1, 1), "{c}");
}

#[test]
fn an_overflow_on_one_listener_opens_no_window_on_another() {
    // The window is per listener: port 81 answered a SYN with a cookie on the first host;
    // the second host's port 80 is flooded, but its port 81 never overflowed.
    let now = Instant::from_millis(1_000);
    let mut maker = host(|c| c.syn_queue = 0);
    maker.listen(81).unwrap();
    let mut host = host(|c| c.syn_queue = 0);
    host.listen(PORT).unwrap();
    let quiet = host.listen(81).unwrap();
    syn_ack_iss(&mut host, now, 40_020, 1);
    receive(&mut maker, now, PEER, &Segment { dst_port: 81, ..syn(40_021, 500) });
    let mut sink = sink();
    maker.transmit(now, &mut sink).unwrap();
    let cookie = u32::from_be_bytes(sink.sent()[0].1[38..42].try_into().unwrap());
    receive(&mut host, now, PEER, &Segment { dst_port: 81, ..ack(40_021, 501, cookie.wrapping_add(1)) });
    assert_eq!(host.counters().drops(Drop::StrayAck), 1);
    assert_eq!((host.connection_count(), host.accept(quiet)), (0, None));
}

// -------------------------------------------------------------------------------------
// Ephemeral ports: RFC 6056 algorithm 4.
// -------------------------------------------------------------------------------------

fn local_port(host: &Interface, id: bypass_stack::SocketId) -> u16 {
    host.connection(id).unwrap().local_addr().port()
}

fn connect_port(host: &mut Interface, now: Instant, dst: SocketAddrV4) -> u16 {
    let id = host.connect(now, dst).unwrap();
    local_port(host, id)
}

#[test]
fn ports_to_successive_destinations_are_not_a_sequence() {
    let mut host = host(|_| {});
    let now = Instant::ZERO;
    let ports: Vec<u16> = (0..64u16)
        .map(|i| {
            let dst = SocketAddrV4::new(Ipv4Addr::new(10, 9, 1 + (i / 200) as u8, (i % 200) as u8 + 1), 443);
            let id = host.connect(now, dst).unwrap();
            local_port(&host, id)
        })
        .collect();
    let (lo, hi) = host.config().ephemeral_ports;
    assert!(ports.iter().all(|p| (lo..=hi).contains(p)));
    // A global counter gives p, p + 1, p + 2, ...: here no two successive ports are
    // neighbours, and they spread over the range.
    let neighbours = ports.windows(2).filter(|w| w[1].wrapping_sub(w[0]) == 1).count();
    assert_eq!(neighbours, 0, "{ports:?}");
    let spread = ports.iter().max().unwrap() - ports.iter().min().unwrap();
    assert!(spread > (hi - lo) / 2, "{ports:?}");
    // The remote port is part of the destination, too.
    let a = host.connect(now, SocketAddrV4::new(PEER, 1000)).unwrap();
    let b = host.connect(now, SocketAddrV4::new(PEER, 1001)).unwrap();
    assert_ne!(local_port(&host, b).wrapping_sub(local_port(&host, a)), 1);
}

#[test]
fn the_port_for_a_destination_depends_on_the_key() {
    let dst = SocketAddrV4::new(PEER, 443);
    let first = |secret: [u8; 16]| {
        let mut host = Interface::new(StackConfig::new(US, 24, secret), MAC, 1500);
        let id = host.connect(Instant::ZERO, dst).unwrap();
        local_port(&host, id)
    };
    let ports: Vec<u16> = (0..8u8).map(|k| first([k; 16])).collect();
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 7, "{ports:?}");
    assert_eq!(first([3; 16]), ports[3], "the same key picks the same port");
}

#[test]
fn connections_elsewhere_do_not_move_the_port_towards_one_destination() {
    // An observer at one destination sees consecutive ports for its own connections,
    // whatever number of connections went elsewhere in between: it cannot count them
    // (unless they share its table slot; these do not).
    let mut host = host(|_| {});
    let now = Instant::ZERO;
    let watcher = SocketAddrV4::new(PEER, 443);
    let first = host.connect(now, watcher).unwrap();
    for i in 0..50u8 {
        host.connect(now, SocketAddrV4::new(Ipv4Addr::new(10, 9, 3, i + 1), 443)).unwrap();
    }
    let second = host.connect(now, watcher).unwrap();
    let (lo, hi) = host.config().ephemeral_ports;
    let next = if local_port(&host, first) == hi { lo } else { local_port(&host, first) + 1 };
    assert_eq!(local_port(&host, second), next);
}

#[test]
fn every_port_in_the_range_is_reachable_and_taken_ones_are_skipped() {
    let mut host = host(|c| c.ephemeral_ports = (40_000, 40_007));
    let now = Instant::ZERO;
    let dst = SocketAddrV4::new(PEER, 443);
    // Taken: a listener's port and a port already connected to this destination.
    host.listen(40_003).unwrap();
    let fixed = host.connect_from(now, Some(40_005), dst).unwrap();
    assert_eq!(local_port(&host, fixed), 40_005);
    let mut ports: Vec<u16> = (0..6).map(|_| connect_port(&mut host, now, dst)).collect();
    ports.sort_unstable();
    assert_eq!(ports, [40_000, 40_001, 40_002, 40_004, 40_006, 40_007]);
    assert_eq!(host.connect(now, dst), Err(ConnectError::NoFreePort(dst.into())));
    // Towards another destination every port but the listener's is free again.
    let other = SocketAddrV4::new(PEER, 444);
    let mut ports: Vec<u16> = (0..7).map(|_| connect_port(&mut host, now, other)).collect();
    ports.sort_unstable();
    assert_eq!(ports, [40_000, 40_001, 40_002, 40_004, 40_005, 40_006, 40_007]);
    assert_eq!(host.connect(now, other), Err(ConnectError::NoFreePort(other.into())));
}

#[test]
fn a_full_range_still_finds_the_last_free_port() {
    // 1,024 ports, all but one taken towards one destination: the search walks the whole
    // range from wherever it starts and finds it.
    let mut host = host(|c| {
        c.ephemeral_ports = (50_000, 51_023);
        c.tcp.send_buffer = 2048;
        c.tcp.recv_buffer = 2048;
    });
    let now = Instant::ZERO;
    let dst = SocketAddrV4::new(PEER, 443);
    let (lo, hi) = host.config().ephemeral_ports;
    let free = lo + 777;
    for port in (lo..=hi).filter(|&p| p != free) {
        host.connect_from(now, Some(port), dst).unwrap();
    }
    let id = host.connect(now, dst).unwrap();
    assert_eq!(local_port(&host, id), free);
    assert_eq!(host.connect(now, dst), Err(ConnectError::NoFreePort(dst.into())));
}

// -------------------------------------------------------------------------------------
// Listeners: unlisten and the accept queue, without scanning the table.
// -------------------------------------------------------------------------------------

/// Complete a handshake from `src_port` to the listener; return the host's ISS.
fn establish(host: &mut Interface, now: Instant, src_port: u16) -> u32 {
    let iss = syn_ack_iss(host, now, src_port, 1000);
    receive(host, now, PEER, &ack(src_port, 1001, iss.wrapping_add(1)));
    iss
}

#[test]
fn unlisten_resets_the_queued_children_now_and_the_half_open_ones_when_they_next_speak() {
    let mut host = host(|_| {});
    let now = Instant::from_millis(1);
    let listener = host.listen(PORT).unwrap();
    let half_open_iss = syn_ack_iss(&mut host, now, 4000, 1000);
    establish(&mut host, now, 4001);
    let mut out = sink();
    host.transmit(now, &mut out).unwrap();
    host.unlisten(now, listener);
    assert!(sent_rst(&mut host, now), "the established child waiting for accept is reset at once");
    assert_eq!(host.connection_count(), 1, "the half-open child stays until it next has something to do");

    // A new listener on the port: the old half-open child must not join its queue.
    let listener = host.listen(PORT).unwrap();
    receive(&mut host, now, PEER, &ack(4000, 1001, half_open_iss.wrapping_add(1)));
    assert!(sent_rst(&mut host, now), "the old listener's half-open child is reset when its ACK comes");
    assert_eq!(host.accept(listener), None);
    assert_eq!(host.connection_count(), 0);

    // The new listener works as a listener should.
    establish(&mut host, now, 4002);
    host.transmit(now, &mut out).unwrap();
    assert!(host.accept(listener).is_some());
}

#[test]
fn a_child_reset_before_accept_leaves_the_backlog_and_the_queue() {
    let mut host = host(|c| c.accept_backlog = 2);
    let now = Instant::from_millis(1);
    let listener = host.listen(PORT).unwrap();
    let iss = establish(&mut host, now, 5000);
    establish(&mut host, now, 5001);
    let rst = Segment { flags: Flags::RST, ..ack(5000, 1001, iss.wrapping_add(1)) };
    receive(&mut host, now, PEER, &rst);
    let mut out = sink();
    host.transmit(now, &mut out).unwrap();
    // The backlog holds one live child, so a third handshake completes.
    establish(&mut host, now, 5002);
    host.transmit(now, &mut out).unwrap();
    let ids: Vec<_> = std::iter::from_fn(|| host.accept(listener)).collect();
    let ports: Vec<u16> = ids.iter().map(|&id| remote_port(&host, id)).collect();
    assert_eq!(ports, [5001, 5002], "accept passes over the reset child, in arrival order");
    assert_eq!(host.counters().connections_accepted, 2);
}

fn remote_port(host: &Interface, id: bypass_stack::SocketId) -> u16 {
    host.connection(id).and_then(|c| c.tuple()).map(|t| t.remote.port()).expect("live connection")
}

// -------------------------------------------------------------------------------------
// Cookies made by the device (the XDP program's): checked without an overflow of our own.
// -------------------------------------------------------------------------------------

#[test]
fn a_cookie_made_elsewhere_with_our_key_completes_a_handshake_with_syn_cookies_from_device() {
    // The maker stands in for the XDP program: same secret, periods counted from the same
    // epoch (seconds of CLOCK_MONOTONIC, say) as the host's.
    let epoch = 1_000_000 * 1_000_000; // 10^6 s, in microseconds
    let now = Instant::from_millis(1_000);
    let mut maker = host(|c| c.syn_queue = 0);
    maker.set_syn_cookie_epoch(epoch);
    maker.listen(PORT).unwrap();
    let mut device_made = host(|c| c.syn_cookies_from_device = true);
    device_made.set_syn_cookie_epoch(epoch);
    let listener = device_made.listen(PORT).unwrap();

    let cookie = syn_ack_iss(&mut maker, now, 40_030, 7_000);
    let later = now + Duration::from_millis(300);
    receive(&mut device_made, later, PEER, &ack(40_030, 7_001, cookie.wrapping_add(1)));
    assert_eq!(device_made.counters().syn_cookies_accepted, 1, "{}", device_made.counters());
    assert!(device_made.accept(listener).is_some());

    // Forged or stale ones still fail: the check itself is the same.
    receive(&mut device_made, later, PEER, &ack(40_031, 7_001, cookie.wrapping_add(1)));
    let mut stale = host(|c| c.syn_cookies_from_device = true);
    stale.set_syn_cookie_epoch(epoch + 3 * 64 * 1_000_000);
    stale.listen(PORT).unwrap();
    receive(&mut stale, later, PEER, &ack(40_030, 7_001, cookie.wrapping_add(1)));
    assert_eq!(stale.counters().drops(Drop::BadSynCookie), 1, "three periods later: expired");
    assert_eq!(device_made.counters().drops(Drop::BadSynCookie), 1, "another port's ACK");

    // Without the setting the host does not even check it (no overflow of its own).
    let mut plain = host(|_| {});
    plain.set_syn_cookie_epoch(epoch);
    plain.listen(PORT).unwrap();
    receive(&mut plain, later, PEER, &ack(40_030, 7_001, cookie.wrapping_add(1)));
    assert_eq!(plain.counters().drops(Drop::StrayAck), 1);
}

#[test]
fn the_answer_for_a_device_is_what_the_host_s_cookie_syn_ack_says() {
    // `syn_cookie_answer` gives the device the MSS and window the host's own cookie SYN-ACK
    // (to a SYN without timestamps, so with the MSS option alone) announces.
    let mut maker = host(|c| c.syn_queue = 0);
    maker.listen(PORT).unwrap();
    let now = Instant::from_millis(1_000);
    receive(&mut maker, now, PEER, &syn(40_040, 1));
    let mut sink = sink();
    maker.transmit(now, &mut sink).unwrap();
    let (_, f) = &sink.sent()[0];
    let answer = StackConfig::new(US, 24, SECRET).syn_cookie_answer(1500);
    assert_eq!(f[47], 0x12, "SYN-ACK");
    assert_eq!(f[46] >> 4, 6, "the MSS option alone");
    assert_eq!(&f[54..58], &[2, 4, (answer.mss4 >> 8) as u8, answer.mss4 as u8]);
    assert_eq!(u16::from_be_bytes([f[48], f[49]]), answer.window4);
    assert_eq!((answer.mss4, answer.mss6), (1460, 1440));
    assert_eq!(answer.window6 as u32, StackConfig::new(US, 24, SECRET).tcp.recv_buffer.min(14_400) as u32);
}
