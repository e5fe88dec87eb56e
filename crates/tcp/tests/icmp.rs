//! ICMP errors and the path MTU (`Connection::handle_icmp`, `set_path_mtu`): one connection
//! fed hand-built segments and errors on explicit times, grouped by what the error is; then
//! a bulk transfer over the simulated network whose path MTU falls midway, a router
//! answering each segment too large with a Packet Too Big.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{
    Cause, Config, Connection, Event, Flags, FourTuple, IcmpError, IcmpIgnored, IcmpOutcome, Instant, RecvError,
    Segment, SendError, SeqNum, State, TcpOptions, TransmitKind,
};

const REMOTE_ISN: SeqNum = SeqNum(0x2000_0000);
const MSS: usize = 1460;

fn v4() -> FourTuple {
    FourTuple { local: "10.0.0.1:40000".parse().unwrap(), remote: "10.0.0.2:80".parse().unwrap() }
}

fn v6() -> FourTuple {
    FourTuple { local: "[fd00::1]:40000".parse().unwrap(), remote: "[fd00::2]:80".parse().unwrap() }
}

/// What the peer sends: ports filled, a 64 KiB window (no scaling), no options.
const TEMPLATE: Segment<'static> =
    Segment { src_port: 80, dst_port: 40000, window: 65535, flags: Flags::ACK, ..Segment::EMPTY };

/// Defaults, with ACKs at once and a 1 s minimum RTO, so that the timers stand apart.
fn config() -> Config {
    Config { delayed_ack: None, isn_secret: [3; 16], min_rto: Duration::from_secs(1), ..Config::default() }
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn ptb(mtu: u32) -> IcmpError {
    IcmpError::PacketTooBig { mtu }
}

/// A segment we sent, parsed back and owned.
#[derive(Debug, Clone)]
struct Out {
    kind: TransmitKind,
    seq: SeqNum,
    payload: Vec<u8>,
}

fn drain(c: &mut Connection, now: Instant) -> Vec<Out> {
    let mut buf = [0xa5u8; 2048];
    let mut out = Vec::new();
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        let dst = c.remote_addr().expect("every connection here has its peer");
        let seg = Segment::parse(&buf[..t.len], c.local_addr().ip(), dst.ip()).expect("we emit valid segments");
        out.push(Out { kind: t.kind, seq: seg.seq, payload: seg.payload.to_vec() });
        assert!(out.len() < 1000, "poll_transmit never stops");
    }
    out
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// The bytes the tests send: position-dependent, so a misplaced resend shows.
fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Active open of `tuple` to SYN-SENT; return the connection and our ISS.
fn syn_sent(config: &Config, tuple: FourTuple) -> (Connection, SeqNum) {
    let mut c = Connection::connect(config, tuple, ms(0));
    let syn = drain(&mut c, ms(0));
    assert_eq!(syn.len(), 1);
    (c, syn[0].seq)
}

/// Active open through to ESTABLISHED with a peer announcing `peer_mss` and SACK, no
/// timestamps or window scaling (so the send MSS is the peer's, and the window 64 KiB).
fn established(config: &Config, tuple: FourTuple, peer_mss: u16) -> (Connection, SeqNum) {
    let (mut c, iss) = syn_sent(config, tuple);
    let options = TcpOptions { mss: Some(peer_mss), sack_permitted: true, ..TcpOptions::NONE };
    let synack = Segment { seq: REMOTE_ISN, ack: iss + 1u32, flags: Flags::SYN | Flags::ACK, options, ..TEMPLATE };
    c.handle_segment(ms(10), &synack);
    assert_eq!(c.state(), State::Established);
    assert_eq!(drain(&mut c, ms(10)).len(), 1, "the handshake's ACK");
    events(&mut c);
    (c, iss)
}

/// The peer's acknowledgment of everything up to `ack`.
fn ack(ack: SeqNum) -> Segment<'static> {
    Segment { seq: REMOTE_ISN + 1u32, ack, ..TEMPLATE }
}

/// Send `n` bytes of [`data`] from an established connection at `now`; return what went out.
fn send(c: &mut Connection, n: usize, now: Instant) -> Vec<Out> {
    assert_eq!(c.send(&data(n)), Ok(n));
    drain(c, now)
}

// ------------------------------------------------------------------------------------
// Validation (RFC 5927 4.1): only a segment of ours in flight
// ------------------------------------------------------------------------------------

#[test]
fn an_error_quoting_a_sequence_number_outside_the_flight_is_ignored() {
    let (mut c, iss) = established(&config(), v4(), 1460);
    assert_eq!(send(&mut c, 3 * MSS, ms(20)).len(), 3);
    let (una, nxt) = (iss + 1u32, iss + 1u32 + 3 * MSS);
    // Below SND.UNA (the SYN, long acknowledged; or far below), at SND.NXT (what a pure ACK
    // carries) and beyond it.
    for seq in [iss, una - 1u32, una - 100_000u32, nxt, nxt + 1u32, nxt + 100_000u32] {
        for error in [ptb(1300), IcmpError::HostUnreachable, IcmpError::PortUnreachable] {
            let outcome = c.handle_icmp(ms(30), seq, error);
            assert_eq!(outcome, IcmpOutcome::Ignored(IcmpIgnored::OutOfWindow), "seq {seq} {error:?}");
        }
    }
    assert_eq!(c.stats().icmp_ignored, 18);
    assert_eq!((c.stats().mss, c.path_mtu(), c.error(), c.state()), (1460, 1500, None, State::Established));
    assert!(drain(&mut c, ms(30)).is_empty());
    // The first and the last byte in flight are.
    assert_eq!(c.handle_icmp(ms(31), una, IcmpError::HostUnreachable), IcmpOutcome::SoftError);
    assert_eq!(c.handle_icmp(ms(31), nxt - 1u32, IcmpError::NetUnreachable), IcmpOutcome::SoftError);
}

#[test]
fn closed_and_listening_connections_ignore_errors() {
    let mut listener = Connection::listen(&config(), v4().local);
    assert_eq!(listener.handle_icmp(ms(0), SeqNum(1), ptb(1300)), IcmpOutcome::Ignored(IcmpIgnored::NotOpen));
    let (mut c, _) = syn_sent(&config(), v4());
    c.abort(ms(1));
    assert_eq!(c.handle_icmp(ms(2), SeqNum(1), IcmpError::PortUnreachable), IcmpOutcome::Ignored(IcmpIgnored::NotOpen));
    assert!(events(&mut c).is_empty());
}

// ------------------------------------------------------------------------------------
// Packet Too Big (RFC 1191, RFC 8201)
// ------------------------------------------------------------------------------------

#[test]
fn packet_too_big_lowers_the_mss_and_resends_the_flight_in_new_segments_without_touching_cwnd() {
    let (mut c, iss) = established(&config(), v4(), 1460);
    let flight = send(&mut c, 10 * MSS, ms(20));
    assert_eq!(flight.len(), 10, "the initial window: ten segments");
    assert!(flight.iter().all(|s| s.payload.len() == MSS));
    // Two arrive; the router ahead drops the rest and says why about the first of them.
    let una = iss + 1u32 + 2 * MSS;
    c.handle_segment(ms(40), &ack(una));
    assert!(drain(&mut c, ms(40)).is_empty());
    let before = c.stats();

    let outcome = c.handle_icmp(ms(41), una, ptb(1300));
    assert_eq!(outcome, IcmpOutcome::MtuLowered { mtu: 1300, mss: 1260 }, "1300 - 20 - 20");
    let after = c.stats();
    assert_eq!((after.mss, c.path_mtu()), (1260, 1300));
    assert_eq!((after.cwnd, after.ssthresh), (before.cwnd, before.ssthresh), "not a congestion signal");
    assert_eq!(after.mtu_reductions, 1);

    // At once, no timer: the eight segments' bytes again, in full segments of the new MSS.
    let resent = drain(&mut c, ms(41));
    let lens: Vec<usize> = resent.iter().map(|s| s.payload.len()).collect();
    assert_eq!(lens, [vec![1260; 9], vec![8 * MSS - 9 * 1260]].concat());
    let all = data(10 * MSS);
    let mut seq = una;
    for s in &resent {
        assert_eq!((s.kind, s.seq), (TransmitKind::Retransmission, seq));
        let offset = (s.seq - (iss + 1u32)) as usize;
        assert_eq!(s.payload, all[offset..offset + s.payload.len()], "the bytes at {}", s.seq);
        seq += s.payload.len() as u32;
    }
    assert_eq!(seq, iss + 1u32 + 10 * MSS);
    assert_eq!(c.stats().cwnd, before.cwnd);

    // Everything arrives: no recovery began, the window did not come down, and new data goes
    // in segments of the new size.
    c.handle_segment(ms(60), &ack(seq));
    let done = c.stats();
    assert_eq!(done.fast_retransmits, 0);
    assert!(done.cwnd >= before.cwnd, "cwnd {} after {}", done.cwnd, before.cwnd);
    assert_eq!(done.ssthresh, before.ssthresh);
    assert!(drain(&mut c, ms(60)).is_empty());
    assert!(send(&mut c, 3000, ms(61)).iter().all(|s| s.payload.len() <= 1260));
}

#[test]
fn packet_too_big_that_lowers_nothing_is_ignored_and_a_burst_resends_once() {
    let (mut c, iss) = established(&config(), v4(), 1460);
    assert_eq!(send(&mut c, 4 * MSS, ms(20)).len(), 4);
    let first = iss + 1u32;
    // No lower than the 1500 in use: never raised (RFC 1191 section 3).
    for mtu in [1500, 1501, 9000] {
        assert_eq!(c.handle_icmp(ms(21), first, ptb(mtu)), IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower));
    }
    assert_eq!((c.stats().mss, c.path_mtu()), (1460, 1500));
    assert!(drain(&mut c, ms(21)).is_empty());
    // Four segments too large bring four messages: the first acts, the rest find nothing
    // left too large (RFC 1191 section 6.4).
    assert_eq!(c.handle_icmp(ms(22), first, ptb(1400)), IcmpOutcome::MtuLowered { mtu: 1400, mss: 1360 });
    let resent = drain(&mut c, ms(22));
    assert_eq!(resent.iter().map(|s| s.payload.len()).sum::<usize>(), 4 * MSS);
    for k in 1..4u32 {
        let outcome = c.handle_icmp(ms(23), first + k * MSS as u32, ptb(1400));
        assert_eq!(outcome, IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower));
    }
    assert!(drain(&mut c, ms(23)).is_empty());
    assert_eq!(c.stats().mtu_reductions, 1);
}

#[test]
fn ipv4_reports_are_held_to_552_and_old_routers_step_down_the_plateaus() {
    // RFC 1191 section 4: a router says at least 68; Linux's floor is 552.
    let (mut c, iss) = established(&config(), v4(), 1460);
    send(&mut c, 2 * MSS, ms(20));
    assert_eq!(c.handle_icmp(ms(21), iss + 1u32, ptb(300)), IcmpOutcome::MtuLowered { mtu: 552, mss: 512 });
    assert_eq!(c.handle_icmp(ms(21), iss + 1u32, ptb(68)), IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower));

    // A router older than RFC 1191 says 0: the plateau below the datagram that bounced
    // (RFC 1191 section 5, Table 7-1), 1500 -> 1492.
    let (mut c, iss) = established(&config(), v4(), 1460);
    send(&mut c, 2 * MSS, ms(20));
    let first = iss + 1u32;
    assert_eq!(c.handle_icmp(ms(21), first, ptb(0)), IcmpOutcome::MtuLowered { mtu: 1492, mss: 1452 });
    // The second 1500-byte datagram of the burst bounces too: nothing new.
    assert_eq!(c.handle_icmp(ms(21), first + MSS as u32, ptb(0)), IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower));
    let resent = drain(&mut c, ms(21));
    assert_eq!(resent.first().map(|s| s.payload.len()), Some(1452));
    // The 1492-byte resend bounces as well: the next plateau, 1006.
    assert_eq!(c.handle_icmp(ms(22), first, ptb(0)), IcmpOutcome::MtuLowered { mtu: 1006, mss: 966 });
}

#[test]
fn ipv6_packet_too_big_below_1280_is_discarded_and_1280_is_the_floor() {
    // RFC 8201 section 4: "If a node receives a Packet Too Big message reporting a next-hop
    // MTU that is less than the IPv6 minimum link MTU, it must discard it."
    let config = Config { mss: 1440, ..config() };
    let (mut c, iss) = established(&config, v6(), 1440);
    assert_eq!((c.stats().mss, c.path_mtu()), (1440, 1500));
    send(&mut c, 2 * 1440, ms(20));
    for mtu in [0, 576, 1279] {
        assert_eq!(c.handle_icmp(ms(21), iss + 1u32, ptb(mtu)), IcmpOutcome::Ignored(IcmpIgnored::BelowMinimumMtu));
    }
    assert_eq!(c.stats().mss, 1440);
    assert!(drain(&mut c, ms(21)).is_empty());
    assert_eq!(c.handle_icmp(ms(22), iss + 1u32, ptb(1280)), IcmpOutcome::MtuLowered { mtu: 1280, mss: 1220 });
    assert!(drain(&mut c, ms(22)).iter().all(|s| s.payload.len() <= 1220));
    // The host may not go below the minimum either.
    c.set_path_mtu(ms(23), 1000);
    assert_eq!((c.path_mtu(), c.stats().mss), (1280, 1220));
}

#[test]
fn the_mss_leaves_room_for_the_timestamps() {
    // RFC 6691: the MSS bounds data and options; with timestamps a full segment carries 12
    // bytes less data.
    let (mut c, iss) = syn_sent(&config(), v4());
    let options = TcpOptions {
        mss: Some(1460),
        timestamps: Some(bypass_tcp::Timestamps { tsval: 1, tsecr: 0 }),
        ..TcpOptions::NONE
    };
    let synack = Segment { seq: REMOTE_ISN, ack: iss + 1u32, flags: Flags::SYN | Flags::ACK, options, ..TEMPLATE };
    c.handle_segment(ms(10), &synack);
    assert_eq!(c.stats().mss, 1448);
    c.set_path_mtu(ms(11), 1300);
    assert_eq!(c.stats().mss, 1248);
}

#[test]
fn the_host_path_mtu_changes_what_is_sent_next_and_resends_nothing() {
    // Before the handshake: it applies once the peer's MSS is known.
    let (mut c, iss) = syn_sent(&config(), v4());
    c.set_path_mtu(ms(1), 1400);
    assert_eq!(c.path_mtu(), 1400);
    let options = TcpOptions { mss: Some(1460), ..TcpOptions::NONE };
    c.handle_segment(
        ms(10),
        &Segment { seq: REMOTE_ISN, ack: iss + 1u32, flags: Flags::SYN | Flags::ACK, options, ..TEMPLATE },
    );
    assert_eq!(c.stats().mss, 1360);

    // Mid-connection: what is in flight stays as it was (RFC 1191 section 6.2) ...
    let (mut c, iss) = established(&config(), v4(), 1460);
    let cwnd = c.stats().cwnd;
    assert_eq!(send(&mut c, 3 * MSS, ms(20)).len(), 3);
    c.set_path_mtu(ms(21), 1300);
    assert_eq!((c.stats().mss, c.stats().cwnd), (1260, cwnd));
    assert!(drain(&mut c, ms(21)).is_empty(), "nothing is known lost yet");
    // ... until a Packet Too Big says a segment bounced: not lower than the host's MTU, but
    // the segment was larger. It and those sent after it go again; the one sent before it
    // had passed the router, or brings a message of its own.
    let outcome = c.handle_icmp(ms(22), iss + 1u32 + MSS as u32, ptb(1300));
    assert_eq!(outcome, IcmpOutcome::MtuLowered { mtu: 1300, mss: 1260 });
    let resent = drain(&mut c, ms(22));
    assert_eq!(resent.iter().map(|s| s.payload.len()).collect::<Vec<_>>(), [1260, 1260, 400]);
    assert_eq!(resent[0].seq, iss + 1u32 + MSS as u32);
    let outcome = c.handle_icmp(ms(22), iss + 1u32, ptb(1300));
    assert_eq!(outcome, IcmpOutcome::MtuLowered { mtu: 1300, mss: 1260 });
    let resent = drain(&mut c, ms(22));
    assert_eq!(
        resent.iter().map(|s| (s.seq, s.payload.len())).collect::<Vec<_>>(),
        [(iss + 1u32, 1260), (iss + 1261u32, 200)]
    );
    // The same floors as for a report.
    c.set_path_mtu(ms(23), 0);
    assert_eq!((c.path_mtu(), c.stats().mss), (552, 512));
    // The estimate may go back up (RFC 1191 section 6.3), never past the peer's MSS.
    c.set_path_mtu(ms(23), 1500);
    assert_eq!(c.stats().mss, 1460);
    c.set_path_mtu(ms(23), 9000);
    assert_eq!((c.path_mtu(), c.stats().mss), (9000, 1460));
    assert!(drain(&mut c, ms(23)).is_empty(), "an increase resends nothing");
}

// ------------------------------------------------------------------------------------
// The handshake (RFC 1122 4.2.3.9, RFC 5461): errors abort
// ------------------------------------------------------------------------------------

#[test]
fn a_hard_error_in_syn_sent_aborts_with_unreachable() {
    let (mut c, iss) = syn_sent(&config(), v4());
    // Only the SYN's own sequence number counts.
    assert_eq!(
        c.handle_icmp(ms(5), iss + 1u32, IcmpError::PortUnreachable),
        IcmpOutcome::Ignored(IcmpIgnored::OutOfWindow)
    );
    assert_eq!(c.state(), State::SynSent);
    assert_eq!(c.handle_icmp(ms(5), iss, IcmpError::PortUnreachable), IcmpOutcome::Aborted);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::Unreachable]);
    assert_eq!(c.error(), Some(IcmpError::PortUnreachable));
    assert!(drain(&mut c, ms(5)).is_empty(), "no reset");
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.send(b"x"), Err(SendError::Reset));
    assert_eq!(c.recv(&mut [0; 4]), Err(RecvError::Reset));
    let last = c.trace().last().unwrap();
    assert_eq!(
        (last.from, last.to, last.cause),
        (State::SynSent, State::Closed, Cause::Icmp(IcmpError::PortUnreachable))
    );
}

#[test]
fn every_error_but_packet_too_big_aborts_the_handshake() {
    use IcmpError::*;
    // Linux's tcp_v4_err and tcp_v6_err: soft errors too, in SYN-SENT and SYN-RECEIVED.
    for error in [
        NetUnreachable,
        HostUnreachable,
        ProtocolUnreachable,
        AdminProhibited,
        SourceRouteFailed,
        TimeExceeded,
        ParameterProblem,
    ] {
        let (mut c, iss) = syn_sent(&config(), v6());
        assert_eq!(c.handle_icmp(ms(5), iss, error), IcmpOutcome::Aborted, "{error:?}");
        assert_eq!((c.state(), c.error(), events(&mut c)), (State::Closed, Some(error), vec![Event::Unreachable]));
    }
    // A Packet Too Big for a SYN lowers the path MTU for what comes after it.
    let (mut c, iss) = syn_sent(&config(), v4());
    assert!(matches!(c.handle_icmp(ms(5), iss, ptb(1400)), IcmpOutcome::MtuLowered { mtu: 1400, .. }));
    assert_eq!(c.state(), State::SynSent);
}

#[test]
fn an_error_about_our_syn_ack_aborts_syn_received() {
    let mut c = Connection::listen(&config(), "10.0.0.1:80".parse().unwrap());
    let syn =
        Segment { src_port: 40000, dst_port: 80, seq: REMOTE_ISN, flags: Flags::SYN, window: 65535, ..Segment::EMPTY };
    c.handle_segment_from(ms(0), "10.0.0.9".parse().unwrap(), &syn);
    let synack = drain(&mut c, ms(0));
    assert_eq!(c.state(), State::SynReceived);
    assert_eq!(c.handle_icmp(ms(3), synack[0].seq, IcmpError::HostUnreachable), IcmpOutcome::Aborted);
    assert_eq!((c.state(), events(&mut c)), (State::Closed, vec![Event::Unreachable]));
    assert!(drain(&mut c, ms(3)).is_empty());
}

// ------------------------------------------------------------------------------------
// Synchronized states (RFC 9293 3.9.2.2, RFC 5927 5.2): errors are soft
// ------------------------------------------------------------------------------------

#[test]
fn a_hard_error_when_established_is_soft_and_reported_at_the_timeout() {
    let config = Config { max_retransmissions: 3, user_timeout: None, ..config() };
    let (mut c, iss) = established(&config, v4(), 1460);
    send(&mut c, 100, ms(20));
    assert_eq!(c.handle_icmp(ms(25), iss + 1u32, IcmpError::PortUnreachable), IcmpOutcome::SoftError);
    assert_eq!((c.state(), c.error()), (State::Established, Some(IcmpError::PortUnreachable)));
    assert!(events(&mut c).is_empty());
    assert_eq!(c.stats().icmp_soft_errors, 1);
    // Nothing comes back; the retransmissions run out.
    let mut now = ms(25);
    while let Some(t) = c.poll_timeout() {
        now = t;
        c.handle_timeout(t);
        drain(&mut c, t);
        if c.state() == State::Closed {
            break;
        }
    }
    assert_eq!(c.state(), State::Closed, "at {now}");
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
    assert_eq!(c.error(), Some(IcmpError::PortUnreachable), "the likelier reason than the timeout");
    assert_eq!(c.send(b"x"), Err(SendError::TimedOut));
}

#[test]
fn a_soft_error_changes_no_timer_window_or_segment() {
    let (mut c, iss) = established(&config(), v4(), 1460);
    send(&mut c, 3 * MSS, ms(20));
    let (timeout, stats, space) = (c.poll_timeout(), c.stats(), c.sequence_space());
    for error in
        [IcmpError::HostUnreachable, IcmpError::NetUnreachable, IcmpError::TimeExceeded, IcmpError::AdminProhibited]
    {
        assert_eq!(c.handle_icmp(ms(30), iss + 1u32 + MSS as u32, error), IcmpOutcome::SoftError);
        assert_eq!(c.error(), Some(error), "the latest");
    }
    assert_eq!(c.poll_timeout(), timeout);
    assert_eq!(c.sequence_space(), space);
    assert_eq!(c.stats(), bypass_tcp::Stats { icmp_soft_errors: 4, ..stats });
    assert!(drain(&mut c, ms(30)).is_empty());
    assert!(events(&mut c).is_empty());
}

#[test]
fn an_acknowledgment_clears_the_soft_error() {
    let (mut c, iss) = established(&config(), v4(), 1460);
    send(&mut c, 2 * MSS, ms(20));
    c.handle_icmp(ms(21), iss + 1u32, IcmpError::HostUnreachable);
    // An old ACK proves nothing ...
    c.handle_segment(ms(22), &ack(iss));
    assert_eq!(c.error(), Some(IcmpError::HostUnreachable));
    // ... a current one does: the path works again.
    c.handle_segment(ms(30), &ack(iss + 1u32 + MSS as u32));
    assert_eq!(c.error(), None);
}

// ------------------------------------------------------------------------------------
// A whole transfer through a smaller MTU
// ------------------------------------------------------------------------------------

/// The size of the IP datagram that carries `seg` over IPv4 (our options as we lay them
/// out: timestamps in 12 bytes, SACK blocks in 4 + 8 per block).
fn ipv4_len(seg: &Segment<'_>) -> usize {
    let ts = if seg.options.timestamps.is_some() { 12 } else { 0 };
    let sack = match seg.options.sack_blocks.len() {
        0 => 0,
        n => 4 + 8 * n,
    };
    20 + 20 + ts + sack + seg.payload.len()
}

#[test]
fn a_bulk_transfer_through_a_smaller_mtu_completes_byte_exact_with_the_smaller_mss() {
    let _ = env_logger::builder().is_test(true).try_init();
    const BYTES: u64 = 4 << 20;
    const MTU: usize = 1280;
    // The router sits midway: its message takes half the 10 ms round trip to come back.
    const ICMP_DELAY: Duration = Duration::from_millis(5);
    let config = Config { isn_secret: [5; 16], min_rto: Duration::from_millis(200), ..Config::default() };
    let link = LinkConfig::default().with_delay(Duration::from_millis(5)).with_bandwidth(200_000_000);
    let mut pair = Pair::new(&config, &config, link, link, 11);

    // Once the path changes (a quarter into the transfer), the router drops what is too
    // large for its next hop and answers each datagram dropped with a Packet Too Big.
    let narrowed = Rc::new(Cell::new(false));
    let told = Rc::new(Cell::new(false));
    let bounced = Rc::new(RefCell::new(Vec::new()));
    let too_large_after_told = Rc::new(Cell::new(0u32));
    {
        let (narrowed, told, bounced, late) =
            (narrowed.clone(), told.clone(), bounced.clone(), too_large_after_told.clone());
        pair.set_filter(move |side, seg| {
            if side != Side::Client || !narrowed.get() || ipv4_len(seg) <= MTU {
                return false;
            }
            if told.get() {
                late.set(late.get() + 1);
            }
            bounced.borrow_mut().push((seg.seq, seg.payload.len()));
            true
        });
    }
    pair.stream(Side::Client, BYTES, true);
    pair.stream(Side::Server, 0, true);
    let deadline = pair.now() + Duration::from_secs(300);
    let mut pending = std::collections::VecDeque::new();
    let mut outcomes = Vec::new();
    let (mut dropped, mut dropped_bytes) = (0, 0);
    while !pair.streams_done() && pair.now() < deadline && pair.error().is_none() {
        if !narrowed.get() && pair.progress(Side::Server).received >= BYTES / 4 {
            narrowed.set(true);
        }
        let now = pair.now();
        for (seq, len) in bounced.borrow_mut().drain(..) {
            pending.push_back((now + ICMP_DELAY, seq));
            dropped += 1;
            dropped_bytes += len;
        }
        while let Some(&(due, seq)) = pending.front()
            && due <= now
        {
            pending.pop_front();
            outcomes.push(pair.conn_mut(Side::Client).handle_icmp(now, seq, ptb(MTU as u32)));
            told.set(true);
        }
        // Run until something bounces, the path is to change, or a message is due.
        let until = pending.front().map_or(deadline, |&(due, _)| due.min(deadline));
        let (narrowed, bounced) = (narrowed.clone(), bounced.clone());
        pair.run_until(
            move |p| {
                p.streams_done()
                    || !bounced.borrow().is_empty()
                    || (!narrowed.get() && p.progress(Side::Server).received >= BYTES / 4)
            },
            until,
        );
    }
    pair.check(deadline).expect("the transfer completes, every byte checked");

    let client = pair.client().stats();
    assert_eq!(client.mss, (MTU - 20 - 20 - 12) as u16, "the MTU less IPv4, TCP and the timestamps");
    assert_eq!(pair.client().path_mtu(), MTU as u32);
    assert!(dropped > 10, "half a round trip's worth bounced: {dropped}");
    assert_eq!(outcomes.len(), dropped);
    assert_eq!(outcomes[0], IcmpOutcome::MtuLowered { mtu: MTU as u32, mss: client.mss });
    assert!(outcomes[1..].iter().all(|o| *o == IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower)), "{outcomes:?}");
    assert_eq!(too_large_after_told.get(), 0, "nothing too large once told");
    // Recovered by the Packet Too Big alone: what bounced, once, in full segments of the new
    // size; no timeout, no fast recovery (and so no reduction).
    assert_eq!(client.bytes_out, BYTES + dropped_bytes as u64, "{client:?}");
    assert_eq!(client.retransmits, dropped_bytes.div_ceil(usize::from(client.mss)) as u64, "{client:?}");
    assert_eq!((client.timeouts, client.fast_retransmits), (0, 0), "{client:?}");
}
