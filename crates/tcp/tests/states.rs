//! State machine tests: one connection fed hand-built segments on explicit times, grouped
//! by state (RFC 9293 3.10.7). Every output segment is parsed back with checksum
//! verification, so these also exercise the wire format.

use std::net::SocketAddr;
use std::time::Duration;

use bypass_tcp::{
    Config, Connection, DropReason, Ecn, Event, Flags, FourTuple, Instant, IpEcn, Keepalive, Outcome, RecvError,
    Segment, SendError, SeqNum, State, TcpOptions, Timestamps, TransmitKind,
};

const REMOTE_ISN: SeqNum = SeqNum(0x1000_0000);

fn local() -> SocketAddr {
    "10.0.0.1:80".parse().unwrap()
}
fn remote() -> SocketAddr {
    "10.0.0.2:40000".parse().unwrap()
}
fn tuple() -> FourTuple {
    FourTuple { local: local(), remote: remote() }
}

/// What the peer sends: ports filled, a generous window, no options.
const TEMPLATE: Segment<'static> =
    Segment { src_port: 40000, dst_port: 80, window: 65535, flags: Flags::ACK, ..Segment::EMPTY };

/// Defaults, with ACKs at once and RFC 6298's 1 s minimum RTO, so that the timers these tests
/// tell apart (RTO, persist, SWS override) are far from each other, and buffers that do not
/// grow (the window scale is then the one a 256 KiB buffer needs, 3).
fn config() -> Config {
    Config {
        delayed_ack: None,
        isn_secret: [7; 16],
        min_rto: Duration::from_secs(1),
        recv_buffer_max: 256 * 1024,
        send_buffer_max: 256 * 1024,
        ..Config::default()
    }
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// A segment we sent, parsed back and owned.
#[derive(Debug, Clone)]
struct Out {
    kind: TransmitKind,
    flags: Flags,
    seq: SeqNum,
    ack: SeqNum,
    window: u16,
    options: TcpOptions,
    payload: Vec<u8>,
    /// Sent ECN-capable (ECT in the IP header).
    ect: bool,
}

/// Take every segment `poll_transmit` writes at `now`. Before each call, ask
/// `nothing_to_transmit`, which hosts call to skip it: when it says nothing, nothing must come.
fn drain(c: &mut Connection, now: Instant) -> Vec<Out> {
    let mut buf = [0xa5u8; 2048];
    let mut out = Vec::new();
    loop {
        let nothing = c.nothing_to_transmit(now);
        let Some(t) = c.poll_transmit(now, &mut buf) else { break };
        assert!(!nothing, "nothing_to_transmit said nothing, then poll_transmit sent {:?}", t.kind);
        // To the peer: a connection in LISTEN has no remote address, and answers `remote()`.
        let dst = c.remote_addr().unwrap_or_else(remote);
        let seg = Segment::parse(&buf[..t.len], c.local_addr().ip(), dst.ip()).expect("we emit valid segments");
        assert_eq!(seg.flags, t.flags);
        assert_eq!(seg.payload.len(), t.payload_len);
        out.push(Out {
            kind: t.kind,
            flags: seg.flags,
            seq: seg.seq,
            ack: seg.ack,
            window: seg.window,
            options: seg.options,
            payload: seg.payload.to_vec(),
            ect: t.ect,
        });
        assert!(out.len() < 1000, "poll_transmit never stops");
    }
    out
}

fn one(c: &mut Connection, now: Instant) -> Out {
    let out = drain(c, now);
    assert_eq!(out.len(), 1, "expected one segment, got {out:?}");
    out.into_iter().next().unwrap()
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Passive open through to ESTABLISHED; return the connection and our ISS.
fn established_passive(config: &Config) -> (Connection, SeqNum) {
    let mut c = Connection::listen(config, local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, ..TcpOptions::NONE },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    let synack = one(&mut c, ms(0));
    let iss = synack.seq;
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 1024, ..TEMPLATE });
    assert_eq!(c.state(), State::Established);
    assert!(drain(&mut c, ms(1)).is_empty());
    events(&mut c);
    (c, iss)
}

/// Peer segment at the next in-order position.
fn peer(iss: SeqNum, flags: Flags, payload: &'static [u8]) -> Segment<'static> {
    Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, flags, payload, ..TEMPLATE }
}

// ------------------------------------------------------------------------------------
// LISTEN (RFC 9293 3.10.7.2)
// ------------------------------------------------------------------------------------

#[test]
fn listen_ignores_rst() {
    let mut c = Connection::listen(&config(), local());
    c.handle_segment_from(ms(0), remote().ip(), &Segment { flags: Flags::RST, ..TEMPLATE });
    assert!(drain(&mut c, ms(0)).is_empty());
    assert_eq!(c.state(), State::Listen);
}

#[test]
fn listen_answers_ack_with_rst_at_seg_ack() {
    let mut c = Connection::listen(&config(), local());
    c.handle_segment_from(ms(0), remote().ip(), &Segment { ack: SeqNum(555), ..TEMPLATE });
    let rst = one(&mut c, ms(0));
    assert_eq!((rst.flags, rst.seq, rst.kind), (Flags::RST, SeqNum(555), TransmitKind::Reset));
    assert_eq!(c.state(), State::Listen);
}

#[test]
fn listen_drops_segments_without_syn_and_needs_the_source() {
    let mut c = Connection::listen(&config(), local());
    c.handle_segment_from(ms(0), remote().ip(), &Segment { flags: Flags::NONE, payload: b"x", ..TEMPLATE });
    c.handle_segment(ms(0), &Segment { flags: Flags::SYN, ..TEMPLATE });
    assert!(drain(&mut c, ms(0)).is_empty());
    assert_eq!(c.state(), State::Listen);
    assert_eq!(c.stats().segs_dropped, 2);
}

#[test]
fn listen_syn_gives_syn_ack_with_negotiated_options() {
    let mut c = Connection::listen(&config(), local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1200), window_scale: Some(9), sack_permitted: true, ..TcpOptions::NONE },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    assert_eq!(c.state(), State::SynReceived);
    assert_eq!(c.tuple(), Some(tuple()));
    let synack = one(&mut c, ms(0));
    assert_eq!(synack.flags, Flags::SYN | Flags::ACK);
    assert_eq!(synack.ack, REMOTE_ISN + 1u32);
    assert_eq!(synack.options.mss, Some(1460));
    assert_eq!(synack.options.window_scale, Some(3), "256 KiB buffer needs shift 3");
    assert!(synack.options.sack_permitted);
    assert_eq!(c.stats().mss, 1200);
}

#[test]
fn syn_ack_offers_only_what_the_syn_offered() {
    let mut c = Connection::listen(&config(), local());
    c.handle_segment_from(ms(0), remote().ip(), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE });
    let synack = one(&mut c, ms(0));
    assert_eq!(synack.options.window_scale, None);
    assert!(!synack.options.sack_permitted);
    assert_eq!(c.stats().mss, 536, "RFC 9293 3.7.1 default send MSS for IPv4");
    assert_eq!(synack.window, 10 * 1460, "SYN-ACK window: ten segments, unscaled");
}

#[test]
fn the_first_ack_after_the_handshake_opens_the_window_past_the_initial_ten_segments() {
    // The SYN-ACK offers what a peer's initial window can send (RFC 6928, as Linux); the
    // handshake's ACK lets us offer the whole buffer, scaled (RFC 7323 2.2).
    let mut c = Connection::listen(&config(), local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1460), window_scale: Some(7), ..TcpOptions::NONE },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    let synack = one(&mut c, ms(0));
    assert_eq!(synack.window, 10 * 1460);
    let ack = Segment { seq: REMOTE_ISN + 1u32, ack: synack.seq + 1u32, flags: Flags::ACK, ..TEMPLATE };
    c.handle_segment(ms(1), &ack);
    assert_eq!(c.state(), State::Established);
    let data = Segment { payload: &[7u8; 100], flags: Flags::ACK | Flags::PSH, ..ack };
    c.handle_segment(ms(2), &data);
    let reply = one(&mut c, ms(2));
    let shift = synack.options.window_scale.unwrap();
    let offered = u32::from(reply.window) << shift;
    assert!(offered > 64 << 10, "the window opened to {offered} bytes");
}

// ------------------------------------------------------------------------------------
// SYN-SENT (RFC 9293 3.10.7.3)
// ------------------------------------------------------------------------------------

fn syn_sent() -> (Connection, SeqNum) {
    let mut c = Connection::connect(&config(), tuple(), ms(0));
    assert_eq!(c.state(), State::SynSent);
    let syn = one(&mut c, ms(0));
    assert_eq!(syn.flags, Flags::SYN);
    assert_eq!(syn.kind, TransmitKind::Syn);
    assert_eq!(syn.options.mss, Some(1460));
    assert!(syn.options.window_scale.is_some() && syn.options.sack_permitted);
    (c, syn.seq)
}

#[test]
fn syn_sent_bad_ack_gets_rst() {
    let (mut c, iss) = syn_sent();
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN, ack: iss + 5u32, flags: Flags::SYN | Flags::ACK, ..TEMPLATE });
    let rst = one(&mut c, ms(1));
    assert_eq!((rst.flags, rst.seq), (Flags::RST, iss + 5u32));
    assert_eq!(c.state(), State::SynSent);
}

#[test]
fn syn_sent_rst_needs_acceptable_ack() {
    let (mut c, iss) = syn_sent();
    c.handle_segment(ms(1), &Segment { flags: Flags::RST, ..TEMPLATE });
    assert_eq!(c.state(), State::SynSent);
    c.handle_segment(ms(1), &Segment { ack: iss + 1u32, flags: Flags::RST | Flags::ACK, ..TEMPLATE });
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::Reset]);
    assert_eq!(c.send(b"x"), Err(SendError::Reset));
    assert_eq!(c.recv(&mut [0; 4]), Err(RecvError::Reset));
}

#[test]
fn syn_sent_syn_ack_establishes() {
    let (mut c, iss) = syn_sent();
    c.send(b"early").unwrap();
    c.handle_segment(
        ms(10),
        &Segment {
            seq: REMOTE_ISN,
            ack: iss + 1u32,
            flags: Flags::SYN | Flags::ACK,
            options: TcpOptions { mss: Some(1000), ..TcpOptions::NONE },
            ..TEMPLATE
        },
    );
    assert_eq!(c.state(), State::Established);
    assert_eq!(events(&mut c), vec![Event::Established, Event::Writable]);
    let out = drain(&mut c, ms(10));
    // Data queued in SYN-SENT goes out with the ACK.
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, REMOTE_ISN + 1u32);
    assert_eq!(out[0].payload, b"early");
    assert_eq!(c.stats().mss, 1000);
    assert!(c.stats().srtt.is_some(), "the SYN was timed");
}

#[test]
fn syn_sent_plain_syn_is_simultaneous_open() {
    let (mut c, iss) = syn_sent();
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE });
    assert_eq!(c.state(), State::SynReceived);
    let synack = one(&mut c, ms(1));
    assert_eq!((synack.flags, synack.seq, synack.ack), (Flags::SYN | Flags::ACK, iss, REMOTE_ISN + 1u32));
    // The peer's SYN-ACK: its SYN is old, its ACK completes the open.
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN, ack: iss + 1u32, flags: Flags::SYN | Flags::ACK, ..TEMPLATE });
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.sequence_space().snd_wnd, 65535, "a SYN's window, unscaled");
    // An active opener does not go back to LISTEN on RST in SYN-RECEIVED.
    let (mut c, _) = syn_sent();
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE });
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, flags: Flags::RST, ..TEMPLATE });
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn simultaneous_open_takes_the_syn_ack_window_unscaled() {
    // Both SYNs offer window scaling, so windows are scaled from here on, except in a
    // segment with SYN (RFC 7323 2.2): the peer's SYN-ACK offers 64240 bytes, not 64240 << 7.
    let mut c = Connection::connect(&config(), tuple(), ms(0));
    let iss = one(&mut c, ms(0)).seq;
    let options = TcpOptions { mss: Some(1460), window_scale: Some(7), ..TcpOptions::NONE };
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, window: 64240, options, ..TEMPLATE });
    assert_eq!(c.state(), State::SynReceived);
    one(&mut c, ms(1));
    let synack = Segment {
        seq: REMOTE_ISN,
        ack: iss + 1u32,
        flags: Flags::SYN | Flags::ACK,
        window: 64240,
        options,
        ..TEMPLATE
    };
    c.handle_segment(ms(2), &synack);
    assert_eq!(c.state(), State::Established);
    let wnd = c.sequence_space().snd_wnd;
    assert!((64240 - 127..=64240).contains(&wnd), "SND.WND {wnd}, not the SYN-ACK's window scaled by 2^7");
}

#[test]
fn syn_sent_drops_segments_without_syn_or_rst() {
    let (mut c, iss) = syn_sent();
    c.handle_segment(ms(1), &Segment { ack: iss + 1u32, payload: b"data", ..TEMPLATE });
    assert_eq!(c.state(), State::SynSent);
    assert!(drain(&mut c, ms(1)).is_empty());
}

#[test]
fn syn_is_retransmitted_with_backoff_then_times_out() {
    let cfg = Config { syn_retries: 3, ..config() };
    let mut c = Connection::connect(&cfg, tuple(), ms(0));
    let iss = one(&mut c, ms(0)).seq;
    let mut at = Vec::new();
    while let Some(t) = c.poll_timeout() {
        c.handle_timeout(t);
        for s in drain(&mut c, t) {
            assert_eq!((s.flags, s.seq, s.kind), (Flags::SYN, iss, TransmitKind::Retransmission));
            at.push(t.as_micros() / 1000);
        }
        if c.state() == State::Closed {
            break;
        }
    }
    assert_eq!(at, vec![1000, 3000, 7000], "RFC 6298 5.5: RTO doubles from 1 s");
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
}

// ------------------------------------------------------------------------------------
// SYN-RECEIVED (RFC 9293 3.10.7.4)
// ------------------------------------------------------------------------------------

fn syn_received() -> (Connection, SeqNum) {
    let mut c = Connection::listen(&config(), local());
    c.handle_segment_from(ms(0), remote().ip(), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE });
    let iss = one(&mut c, ms(0)).seq;
    (c, iss)
}

#[test]
fn syn_received_duplicate_syn_resends_syn_ack() {
    let (mut c, iss) = syn_received();
    c.handle_segment(ms(5), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE });
    let again = one(&mut c, ms(5));
    assert_eq!((again.flags, again.seq, again.kind), (Flags::SYN | Flags::ACK, iss, TransmitKind::Retransmission));
}

#[test]
fn syn_received_rst_returns_to_listen() {
    let (mut c, _) = syn_received();
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN + 1u32, flags: Flags::RST, ..TEMPLATE });
    assert_eq!(c.state(), State::Listen);
    assert_eq!(c.tuple(), None);
}

#[test]
fn syn_received_bad_ack_gets_rst() {
    let (mut c, iss) = syn_received();
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 100u32, ..TEMPLATE });
    let out = drain(&mut c, ms(1));
    assert!(out.iter().any(|s| s.flags == Flags::RST && s.seq == iss + 100u32), "{out:?}");
    assert_eq!(c.state(), State::SynReceived);
}

#[test]
fn syn_received_close_sends_fin_once_established() {
    let (mut c, iss) = syn_received();
    c.close(ms(1));
    assert_eq!(c.state(), State::SynReceived);
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, ..TEMPLATE });
    assert_eq!(c.state(), State::FinWait1);
    let fin = one(&mut c, ms(2));
    assert_eq!((fin.flags, fin.seq), (Flags::FIN | Flags::ACK, iss + 1u32));
}

#[test]
fn accept_builds_syn_received_from_a_syn() {
    let syn = Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE };
    let c = Connection::accept(&config(), tuple(), &syn, ms(0)).unwrap();
    assert_eq!(c.state(), State::SynReceived);
    assert!(Connection::accept(&config(), tuple(), &Segment { flags: Flags::ACK, ..syn }, ms(0)).is_none());
}

// ------------------------------------------------------------------------------------
// ESTABLISHED: receiving (RFC 9293 3.10.7.4 first, seventh; RFC 5681 4.2)
// ------------------------------------------------------------------------------------

#[test]
fn in_order_data_is_delivered_and_acknowledged() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &peer(iss, Flags::ACK | Flags::PSH, b"hello"));
    assert_eq!(events(&mut c), vec![Event::Readable]);
    let ack = one(&mut c, ms(2));
    assert_eq!((ack.flags, ack.ack), (Flags::ACK, REMOTE_ISN + 6u32));
    let mut buf = [0u8; 16];
    assert_eq!(c.recv(&mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(c.recv(&mut buf), Err(RecvError::WouldBlock));
}

#[test]
fn delayed_ack_waits_then_fires_and_every_second_full_segment_is_acked() {
    let cfg = Config { delayed_ack: Some(Duration::from_millis(40)), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(10), &peer(iss, Flags::ACK, b"abc"));
    assert!(drain(&mut c, ms(10)).is_empty(), "ACK delayed");
    assert_eq!(c.poll_timeout(), Some(ms(50)));
    c.handle_timeout(ms(50));
    assert_eq!(one(&mut c, ms(50)).ack, REMOTE_ISN + 4u32);

    static FULL: [u8; 1460] = [1; 1460];
    let mut seq = REMOTE_ISN + 4u32;
    c.handle_segment(ms(60), &Segment { seq, ack: iss + 1u32, payload: &FULL, ..TEMPLATE });
    assert!(drain(&mut c, ms(60)).is_empty());
    seq += 1460;
    c.handle_segment(ms(61), &Segment { seq, ack: iss + 1u32, payload: &FULL, ..TEMPLATE });
    assert_eq!(one(&mut c, ms(61)).ack, seq + 1460u32, "second full-sized segment is ACKed at once");
}

#[test]
fn nothing_to_transmit_tells_a_delayed_ack_from_one_due_and_from_queued_data() {
    let cfg = Config { delayed_ack: Some(Duration::from_millis(40)), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    assert!(c.nothing_to_transmit(ms(2)), "established and idle");
    c.handle_segment(ms(10), &peer(iss, Flags::ACK, b"abc"));
    assert!(c.nothing_to_transmit(ms(10)), "the ACK waits for the timer");
    assert!(drain(&mut c, ms(10)).is_empty());
    c.handle_timeout(ms(50));
    assert!(!c.nothing_to_transmit(ms(50)), "the delayed ACK is due");
    assert_eq!(one(&mut c, ms(50)).ack, REMOTE_ISN + 4u32);
    assert!(c.nothing_to_transmit(ms(50)), "and sent");
    assert_eq!(c.send(b"xyz"), Ok(3));
    assert!(!c.nothing_to_transmit(ms(51)), "data queued");
    assert_eq!(one(&mut c, ms(51)).payload, b"xyz");
    assert!(c.nothing_to_transmit(ms(51)), "in flight, nothing more to send");
    c.close(ms(52));
    assert!(!c.nothing_to_transmit(ms(52)), "a FIN queued");
    assert!(one(&mut c, ms(52)).flags.fin());
    assert!(c.nothing_to_transmit(ms(52)), "FIN-WAIT-1 with the FIN sent");
}

#[test]
fn every_second_segment_of_the_peers_full_size_is_acked_at_once() {
    // Full-sized is what the peer sends: 1448 bytes beside timestamps, 1360 behind a tunnel.
    for size in [1448usize, 1360] {
        let cfg = Config { delayed_ack: Some(Duration::from_millis(40)), timestamps: false, ..config() };
        let (mut c, iss) = established_passive(&cfg);
        let data = vec![7u8; 2 * size];
        let first = Segment { payload: &data[..size], ..peer(iss, Flags::ACK, b"") };
        c.handle_segment(ms(10), &first);
        assert!(drain(&mut c, ms(10)).is_empty(), "{size}: the first waits for the delayed-ACK timer");
        let second = Segment { seq: REMOTE_ISN + 1u32 + size as u32, payload: &data[size..], ..first };
        c.handle_segment(ms(11), &second);
        let ack = one(&mut c, ms(11));
        assert_eq!(ack.ack, REMOTE_ISN + 1u32 + 2 * size as u32, "{size}: the second is ACKed at once");
    }
}

#[test]
fn window_rounding_never_moves_the_right_edge_left() {
    // Our window scale is 3 (a 256 KiB buffer): the field counts 8-byte units. Odd-sized
    // segments move RCV.NXT off the unit grid; the edge the peer computes from each ACK,
    // SEG.ACK + (SEG.WND << 3), must never move left (RFC 9293 3.8.6.2.2, RFC 7323 2.4).
    let (mut c, iss) = established_passive(&config());
    assert_eq!(c.sequence_space().rcv_wscale, 3);
    let mut seq = REMOTE_ISN + 1u32;
    let mut last_edge: Option<SeqNum> = None;
    for (i, len) in [5usize, 7, 13, 1, 100, 3, 1000, 9, 2, 1447].into_iter().cycle().take(200).enumerate() {
        let data = vec![1u8; len];
        c.handle_segment(ms(10 + i as u64), &Segment { seq, payload: &data, ..peer(iss, Flags::ACK, b"") });
        seq += len as u32;
        let ack = one(&mut c, ms(10 + i as u64));
        assert_eq!(ack.ack, seq);
        let edge = ack.ack + (u32::from(ack.window) << 3);
        if let Some(last) = last_edge {
            assert!(!edge.before(last), "segment {i}: the edge moved left from {last:?} to {edge:?}");
        }
        last_edge = Some(edge);
    }
    assert!(c.recv_available() > 40_000, "nothing was read: the window only closes");
}

#[test]
fn each_duplicate_gets_an_ack_with_its_own_dsack() {
    // RFC 2883 4.1: a duplicate is reported as the first block, one per ACK. Three
    // duplicates arrive before we send (as in one batch of frames): three ACKs, the oldest
    // first; two that touch are one report.
    let (mut c, iss) = established_passive(&config());
    let base = REMOTE_ISN + 1u32;
    c.handle_segment(ms(2), &Segment { seq: base, ack: iss + 1u32, payload: &[1; 30], ..TEMPLATE });
    drain(&mut c, ms(2));
    for (off, len) in [(0u32, 5usize), (10, 5), (15, 5), (25, 5)] {
        let payload = &[1u8; 30][..len];
        c.handle_segment(ms(3), &Segment { seq: base + off, ack: iss + 1u32, payload, ..TEMPLATE });
    }
    let acks = drain(&mut c, ms(3));
    let reported: Vec<(u32, u32)> = acks
        .iter()
        .map(|a| (a.options.sack_blocks.as_slice()[0].left - base, a.options.sack_blocks.as_slice()[0].right - base))
        .collect();
    assert_eq!(reported, [(0, 5), (10, 20), (25, 30)]);
    assert!(acks.iter().all(|a| a.ack == base + 30u32 && a.options.sack_blocks.len() == 1));
    assert!(drain(&mut c, ms(4)).is_empty(), "nothing more to say");
}

#[test]
fn out_of_order_data_is_sacked_and_reassembled() {
    let (mut c, iss) = established_passive(&config());
    let base = REMOTE_ISN + 1u32;
    c.handle_segment(ms(2), &Segment { seq: base + 5u32, ack: iss + 1u32, payload: b"world", ..TEMPLATE });
    let dup = one(&mut c, ms(2));
    assert_eq!(dup.ack, base, "duplicate ACK for the hole");
    let sack = dup.options.sack_blocks.as_slice();
    assert_eq!((sack[0].left, sack[0].right), (base + 5u32, base + 10u32));
    assert_eq!(c.recv_available(), 0);
    c.handle_segment(ms(3), &Segment { seq: base, ack: iss + 1u32, payload: b"hello", ..TEMPLATE });
    let ack = one(&mut c, ms(3));
    assert_eq!(ack.ack, base + 10u32);
    assert!(ack.options.sack_blocks.is_empty());
    let mut buf = [0u8; 16];
    assert_eq!(c.recv(&mut buf), Ok(10));
    assert_eq!(&buf[..10], b"helloworld");
}

#[test]
fn overlapping_and_duplicate_data_is_trimmed() {
    let (mut c, iss) = established_passive(&config());
    let base = REMOTE_ISN + 1u32;
    c.handle_segment(ms(2), &Segment { seq: base, ack: iss + 1u32, payload: b"abcd", ..TEMPLATE });
    c.handle_segment(ms(3), &Segment { seq: base + 2u32, ack: iss + 1u32, payload: b"cdef", ..TEMPLATE });
    c.handle_segment(ms(4), &Segment { seq: base, ack: iss + 1u32, payload: b"ab", ..TEMPLATE });
    let mut buf = [0u8; 16];
    assert_eq!(c.recv(&mut buf), Ok(6));
    assert_eq!(&buf[..6], b"abcdef");
}

#[test]
fn unacceptable_segment_is_answered_with_ack_and_dropped() {
    let (mut c, iss) = established_passive(&config());
    drain(&mut c, ms(1));
    // Entirely old data.
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN - 100u32, ack: iss + 1u32, payload: b"old", ..TEMPLATE });
    let ack = one(&mut c, ms(2));
    assert_eq!((ack.flags, ack.seq, ack.ack), (Flags::ACK, iss + 1u32, REMOTE_ISN + 1u32));
    // Beyond the window.
    c.handle_segment(ms(3), &Segment { seq: REMOTE_ISN + 1_000_000u32, ack: iss + 1u32, payload: b"far", ..TEMPLATE });
    assert_eq!(one(&mut c, ms(3)).ack, REMOTE_ISN + 1u32);
    // An out-of-window RST is dropped silently.
    c.handle_segment(ms(4), &Segment { seq: REMOTE_ISN - 5u32, flags: Flags::RST, ..TEMPLATE });
    assert!(drain(&mut c, ms(4)).is_empty());
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.recv_available(), 0);
}

#[test]
fn urgent_data_is_delivered_in_line() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &Segment { urgent: 1, ..peer(iss, Flags::ACK | Flags::URG, b"!x") });
    let mut buf = [0u8; 4];
    assert_eq!(c.recv(&mut buf), Ok(2));
    assert_eq!(&buf[..2], b"!x");
}

// ------------------------------------------------------------------------------------
// RFC 5961: blind reset, SYN and data injection
// ------------------------------------------------------------------------------------

#[test]
fn rst_in_window_but_not_exact_is_challenged() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 10u32, flags: Flags::RST, ..TEMPLATE });
    let ack = one(&mut c, ms(2));
    assert_eq!((ack.flags, ack.seq, ack.ack), (Flags::ACK, iss + 1u32, REMOTE_ISN + 1u32));
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().challenge_acks, 1);
    c.handle_segment(ms(3), &Segment { seq: REMOTE_ISN + 1u32, flags: Flags::RST, ..TEMPLATE });
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::Reset]);
}

#[test]
fn syn_in_synchronized_state_is_challenged() {
    let (mut c, _) = established_passive(&config());
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 3u32, flags: Flags::SYN, ..TEMPLATE });
    assert_eq!(one(&mut c, ms(2)).flags, Flags::ACK);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn challenge_acks_are_rate_limited() {
    // The per-second limit of RFC 5961 7 alone (the ACK rate limit of unacceptable
    // segments off).
    let cfg = Config { challenge_ack_limit: 2, invalid_ack_interval: Duration::ZERO, ..config() };
    let (mut c, _) = established_passive(&cfg);
    let mut sent = 0;
    for i in 0..5u32 {
        c.handle_segment(ms(10 + i as u64), &Segment { seq: REMOTE_ISN + 10u32 + i, flags: Flags::RST, ..TEMPLATE });
        sent += drain(&mut c, ms(10 + i as u64)).len();
    }
    assert_eq!(sent, 2);
    // A new second, a new allowance.
    c.handle_segment(ms(1100), &Segment { seq: REMOTE_ISN + 50u32, flags: Flags::RST, ..TEMPLATE });
    assert_eq!(drain(&mut c, ms(1100)).len(), 1);
    assert_eq!(c.stats().challenge_acks, 3);
}

#[test]
fn data_with_an_unacceptable_ack_is_not_injected() {
    let (mut c, iss) = established_passive(&config());
    // Acknowledges data we never sent.
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 5000u32, payload: b"evil", ..TEMPLATE });
    assert_eq!(c.recv_available(), 0);
    assert_eq!(one(&mut c, ms(2)).flags, Flags::ACK);
    // Far too old an ACK (below SND.UNA - MAX.SND.WND).
    c.handle_segment(ms(3), &Segment { seq: REMOTE_ISN + 1u32, ack: iss - 1_000_000u32, payload: b"evil", ..TEMPLATE });
    assert_eq!(c.recv_available(), 0);
    // Without ACK at all.
    c.handle_segment(ms(4), &Segment { flags: Flags::PSH, ..peer(iss, Flags::NONE, b"evil") });
    assert_eq!(c.recv_available(), 0);
    assert_eq!(c.state(), State::Established);
}

// ------------------------------------------------------------------------------------
// ESTABLISHED: sending, windows and retransmission (RFC 9293 3.8, RFC 6298, RFC 5681)
// ------------------------------------------------------------------------------------

#[test]
fn window_update_follows_wl1_wl2() {
    let (mut c, iss) = established_passive(&config());
    assert_eq!(c.stats().peer_window, 1024 << 7);
    // A newer segment updates the window.
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 10, ..TEMPLATE });
    assert_eq!(c.stats().peer_window, 10 << 7);
    // An older one (SEG.SEQ < SND.WL1) does not.
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"x"));
    c.handle_segment(ms(4), &Segment { seq: REMOTE_ISN + 2u32, ack: iss + 1u32, window: 500, ..TEMPLATE });
    assert_eq!(c.stats().peer_window, 500 << 7);
    c.handle_segment(ms(5), &Segment { seq: REMOTE_ISN - 10u32, ack: iss + 1u32, window: 1, ..TEMPLATE });
    assert_eq!(c.stats().peer_window, 500 << 7);
}

#[test]
fn data_is_retransmitted_after_rto_with_karns_rule() {
    // Without SACK there is no tail-loss probe: the RTO is the first timer to fire.
    let cfg = Config { min_rto: Duration::from_millis(200), sack: false, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.send(b"payload").unwrap();
    let first = one(&mut c, ms(10));
    assert_eq!((first.seq, first.kind), (iss + 1u32, TransmitKind::Data));
    let rto = c.poll_timeout().unwrap();
    c.handle_timeout(rto);
    let again = one(&mut c, rto);
    assert_eq!(
        (again.seq, again.kind, again.payload.as_slice()),
        (iss + 1u32, TransmitKind::Retransmission, &b"payload"[..])
    );
    assert_eq!(c.stats().timeouts, 1);
    let srtt_before = c.stats().srtt;
    c.handle_segment(rto + Duration::from_millis(5), &Segment { ack: iss + 8u32, ..peer(iss, Flags::ACK, b"") });
    assert_eq!(c.stats().srtt, srtt_before, "no sample from a retransmitted segment");
    assert_eq!(c.stats().bytes_in_flight, 0);
    assert_eq!(c.poll_timeout(), None, "timer stopped when all is acknowledged");
}

#[test]
fn a_window_shut_with_data_in_flight_gets_one_probe_per_timeout() {
    // The peer takes the first segment and shuts its window; the second is lost. The
    // timeout marks it lost but the window forbids resending it: one window probe per
    // timeout asks for the window (RFC 9293 3.8.6.1), not one per poll_transmit.
    let cfg = Config { min_rto: Duration::from_millis(200), sack: false, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.send(&[7u8; 600]).unwrap();
    c.send(&[8u8; 400]).unwrap();
    let sent = drain(&mut c, ms(10));
    assert_eq!(sent.iter().map(|s| s.payload.len()).sum::<usize>(), 1000, "{sent:?}");
    c.handle_segment(ms(20), &Segment { ack: iss + 601u32, window: 0, ..peer(iss, Flags::ACK, b"") });
    for round in 1..=3 {
        let rto = c.poll_timeout().unwrap();
        c.handle_timeout(rto);
        let probe = one(&mut c, rto);
        assert_eq!((probe.kind, probe.seq), (TransmitKind::WindowProbe, iss + 600u32), "timeout {round}");
    }
    assert_eq!(c.stats().timeouts, 3);
    // The window opens: the lost data goes at once.
    let now = c.poll_timeout().unwrap();
    c.handle_segment(now, &Segment { ack: iss + 601u32, window: 1024, ..peer(iss, Flags::ACK, b"") });
    let resent = one(&mut c, now);
    assert_eq!((resent.kind, resent.seq, resent.payload.len()), (TransmitKind::Retransmission, iss + 601u32, 400));
}

#[test]
fn an_ack_to_a_shut_window_carries_the_peers_rcv_nxt() {
    // The peer took 600 of our 1000 bytes and shut its window: the 400 beyond it were
    // trimmed away, its RCV.NXT is our SND.UNA. An empty segment is acceptable there only at
    // exactly RCV.NXT (RFC 9293 3.10.7.4, first), so our ACK of its data must carry SND.UNA,
    // not SND.MAX, or the peer never hears that our window is open.
    let (mut c, iss) = established_passive(&Config { sack: false, ..config() });
    c.send(&[7u8; 1000]).unwrap();
    assert_eq!(one(&mut c, ms(10)).payload.len(), 1000);
    c.handle_segment(ms(20), &Segment { ack: iss + 601u32, window: 0, ..peer(iss, Flags::ACK | Flags::PSH, b"hello") });
    let ack = one(&mut c, ms(20));
    assert_eq!((ack.kind, ack.seq, ack.ack), (TransmitKind::Ack, iss + 601u32, REMOTE_ISN + 6u32));
}

#[test]
fn three_duplicate_acks_trigger_fast_retransmit() {
    // Without SACK, duplicate ACKs are all a sender learns (RFC 5681 3.2).
    let cfg = Config { send_buffer: 64 * 1024, sack: false, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    // Open the congestion window first.
    let data = vec![7u8; 20_000];
    c.send(&data).unwrap();
    let sent = drain(&mut c, ms(10));
    assert!(sent.len() >= 3, "initial window sends several segments");
    // Same window as the handshake's ACK: a window change would not be a duplicate.
    let dup = Segment { ack: iss + 1u32, window: 1024, ..peer(iss, Flags::ACK, b"") };
    for i in 0..3 {
        c.handle_segment(ms(20 + i), &dup);
    }
    let out = drain(&mut c, ms(23));
    assert_eq!(out[0].seq, iss + 1u32);
    assert_eq!(out[0].kind, TransmitKind::Retransmission);
    assert_eq!(c.stats().fast_retransmits, 1);
    assert!(c.stats().ssthresh < u32::MAX);
}

/// An established connection with SACK, `n` full segments of 1000 bytes in flight (MSS
/// 1000, no timestamps), the first RTT measured at 10 ms.
fn sack_flight(n: u32) -> (Connection, SeqNum) {
    let mut c = Connection::listen(&config(), local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1000), sack_permitted: true, ..TcpOptions::NONE },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    let iss = one(&mut c, ms(0)).seq;
    c.handle_segment(ms(10), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 65535, ..TEMPLATE });
    c.set_nodelay(true);
    c.send(&vec![1u8; (n * 1000) as usize]).unwrap();
    assert_eq!(drain(&mut c, ms(20)).len(), n as usize);
    (c, iss)
}

/// The peer's ACK at SND.UNA with SACK blocks.
fn sack(iss: SeqNum, ack: u32, blocks: &[(u32, u32)]) -> Segment<'static> {
    let mut options = TcpOptions::NONE;
    for &(l, r) in blocks {
        options.sack_blocks.push(bypass_tcp::SackBlock { left: iss + 1u32 + l, right: iss + 1u32 + r });
    }
    Segment { ack: iss + 1u32 + ack, window: 65535, options, ..peer(iss, Flags::ACK, b"") }
}

#[test]
fn sacked_segments_sent_later_mark_a_hole_lost_at_once_and_only_it_is_resent() {
    // RACK (RFC 8985 6.2): segments sent after the first were delivered and the first was
    // not; with no reordering seen and three segments SACKed, the reordering window is 0.
    let (mut c, iss) = sack_flight(6);
    c.handle_segment(ms(31), &sack(iss, 0, &[(1000, 4000)]));
    let out = drain(&mut c, ms(31));
    assert_eq!(out[0].kind, TransmitKind::Retransmission);
    assert_eq!((out[0].seq, out[0].payload.len()), (iss + 1u32, 1000), "only the hole");
    assert!(out.iter().skip(1).all(|o| o.kind != TransmitKind::Retransmission), "{out:?}");
    assert_eq!(c.stats().fast_retransmits, 1);
    // PRR (RFC 6937): the reduction is spread; the recovery ends when the hole is filled.
    let ssthresh = c.stats().ssthresh;
    assert_eq!(ssthresh, 7000, "CUBIC's reduction (the default): 0.7 of cwnd, ten segments (RFC 9438 4.6)");
    c.handle_segment(ms(45), &sack(iss, 6000, &[]));
    assert_eq!(c.stats().cwnd, ssthresh, "cwnd = ssthresh when the recovery ends");
}

#[test]
fn a_single_sacked_segment_waits_out_the_reordering_window() {
    // One segment SACKed above a hole: reordering is possible, so RACK waits min_RTT / 4
    // beyond the RTT before it calls the hole lost (RFC 8985 6.2 step 4-5).
    let (mut c, iss) = sack_flight(3);
    c.handle_segment(ms(31), &sack(iss, 0, &[(1000, 2000)]));
    assert!(drain(&mut c, ms(31)).is_empty(), "not yet");
    let timer = c.poll_timeout().expect("the reordering timer");
    // Sent at 20 ms, RACK.rtt 11 ms (the SACKed one, sent at 20, delivered at 31),
    // reo_wnd = 10 ms / 4.
    assert_eq!(timer, ms(20 + 11) + Duration::from_micros(2500));
    c.handle_timeout(timer);
    let out = drain(&mut c, timer);
    assert_eq!((out[0].kind, out[0].seq), (TransmitKind::Retransmission, iss + 1u32));
}

#[test]
fn a_lost_tail_is_repaired_by_a_probe_before_the_rto() {
    // The last segments are lost and nothing comes back: the tail-loss probe resends the
    // last one after two round trips (RFC 8985 7), long before the 1 s RTO.
    let (mut c, iss) = sack_flight(4);
    c.handle_segment(ms(31), &sack(iss, 2000, &[]));
    assert!(drain(&mut c, ms(31)).is_empty());
    let pto = c.poll_timeout().unwrap();
    assert!(pto < ms(31) + Duration::from_millis(100), "PTO at {pto}, not the RTO");
    c.handle_timeout(pto);
    let probe = one(&mut c, pto);
    assert_eq!((probe.kind, probe.seq), (TransmitKind::Retransmission, iss + 3001u32), "the last segment");
    assert_eq!(c.stats().loss_probes, 1);
    // Its SACK shows the one before it lost: RACK repairs it in a round trip.
    c.handle_segment(pto + Duration::from_millis(11), &sack(iss, 2000, &[(3000, 4000)]));
    let out = drain(&mut c, pto + Duration::from_millis(11));
    assert_eq!((out[0].kind, out[0].seq), (TransmitKind::Retransmission, iss + 2001u32));
}

#[test]
fn a_timeout_resends_what_was_not_sacked_in_order() {
    let (mut c, iss) = sack_flight(4);
    c.handle_segment(ms(31), &sack(iss, 0, &[(2000, 3000)]));
    drain(&mut c, ms(31));
    // Nothing more arrives: after the probe, the RTO fires.
    let mut now = ms(31);
    for _ in 0..10 {
        let t = c.poll_timeout().unwrap();
        c.handle_timeout(t);
        drain(&mut c, t);
        now = t;
        if c.stats().timeouts > 0 {
            break;
        }
    }
    assert_eq!(c.stats().timeouts, 1);
    let _ = now;
    // Slow start from one segment: the ACK of the first lets two more out, never the
    // SACKed one.
    c.handle_segment(now + Duration::from_millis(10), &sack(iss, 1000, &[(2000, 3000)]));
    let out = drain(&mut c, now + Duration::from_millis(10));
    let seqs: Vec<u32> = out.iter().map(|o| o.seq - (iss + 1u32)).collect();
    assert!(seqs.contains(&1000) && !seqs.contains(&2000), "resent {seqs:?}");
}

#[test]
fn a_duplicate_segment_is_reported_in_a_d_sack() {
    // RFC 2883 4.1: the first SACK block of the ACK reports the duplicate, once.
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &peer(iss, Flags::ACK, b"abcdef"));
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"abcdef"));
    let ack = one(&mut c, ms(3));
    let blocks = ack.options.sack_blocks.as_slice();
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0].left, blocks[0].right), (REMOTE_ISN + 1u32, REMOTE_ISN + 7u32));
    // A partly new segment: only its old part is reported.
    c.handle_segment(ms(4), &Segment { seq: REMOTE_ISN + 5u32, ..peer(iss, Flags::ACK, b"efgh") });
    let ack = one(&mut c, ms(4));
    let blocks = ack.options.sack_blocks.as_slice();
    assert_eq!((blocks[0].left, blocks[0].right), (REMOTE_ISN + 5u32, REMOTE_ISN + 7u32));
    assert_eq!(ack.ack, REMOTE_ISN + 9u32);
    // And not again.
    c.handle_segment(ms(5), &Segment { seq: REMOTE_ISN + 9u32, ..peer(iss, Flags::ACK, b"i") });
    c.handle_timeout(ms(300));
    assert!(drain(&mut c, ms(300)).iter().all(|o| o.options.sack_blocks.is_empty()));
}

#[test]
fn a_d_sack_of_every_resend_undoes_the_timeout() {
    // The RTO resent the first segment, but the original had only been delayed: the peer
    // reports the resend as a duplicate (RFC 2883), so the reduction was needless and cwnd
    // and ssthresh come back (Linux's undo; RFC 2883 section 5).
    let (mut c, iss) = sack_flight(6);
    let before = (c.stats().cwnd, c.stats().ssthresh);
    let rto = c.poll_timeout().unwrap();
    // The probe first, then the timeout.
    let mut t = rto;
    for _ in 0..4 {
        c.handle_timeout(t);
        drain(&mut c, t);
        if c.stats().timeouts == 1 {
            break;
        }
        t = c.poll_timeout().unwrap();
    }
    assert_eq!(c.stats().timeouts, 1);
    assert_eq!(c.stats().cwnd, 1000, "the loss window");
    // Everything arrives: the originals, and the resend of the first as a duplicate.
    c.handle_segment(t + Duration::from_millis(5), &sack(iss, 6000, &[(0, 1000)]));
    assert_eq!(c.stats().ssthresh, before.1, "undone");
    assert!(c.stats().cwnd >= before.0, "cwnd {} back to at least {} (and growing on)", c.stats().cwnd, before.0);
}

#[test]
fn nagle_holds_small_segments_until_acknowledged() {
    let (mut c, iss) = established_passive(&config());
    c.send(b"a").unwrap();
    assert_eq!(drain(&mut c, ms(2)).len(), 1);
    c.send(b"b").unwrap();
    c.send(b"c").unwrap();
    assert!(drain(&mut c, ms(3)).is_empty(), "small segment waits while data is unacknowledged");
    c.handle_segment(ms(4), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK, b"") });
    let out = one(&mut c, ms(4));
    assert_eq!(out.payload, b"bc");
    c.set_nodelay(true);
    c.send(b"d").unwrap();
    assert_eq!(one(&mut c, ms(5)).payload, b"d");
    c.send(b"e").unwrap();
    assert_eq!(one(&mut c, ms(5)).payload, b"e", "no-delay sends at once");
}

#[test]
fn zero_window_is_probed_and_transfer_resumes() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    c.send(b"blocked").unwrap();
    assert!(drain(&mut c, ms(3)).is_empty());
    let probe_at = c.poll_timeout().expect("persist timer armed");
    c.handle_timeout(probe_at);
    let probe = one(&mut c, probe_at);
    assert_eq!((probe.kind, probe.seq, probe.payload.len()), (TransmitKind::WindowProbe, iss, 0));
    assert_eq!(c.stats().window_probes, 1);
    // Still zero: probes back off, the connection does not give up.
    c.handle_segment(probe_at, &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    let next = c.poll_timeout().unwrap();
    assert!(next - probe_at > Duration::from_millis(1500), "backoff: {:?}", next - probe_at);
    // The window opens.
    c.handle_segment(next, &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 100, ..TEMPLATE });
    assert_eq!(one(&mut c, next).payload, b"blocked");
}

/// Data that arrives while the peer's window is shut is acknowledged in a segment the peer
/// accepts, not only on the window probe: a probe is out of the peer's window on purpose,
/// and a peer drops such a segment without reading its ACK field (RFC 9293 3.10.7.4;
/// Linux does). Seen against a kernel client that stopped reading: our persist timer fired
/// with a delayed ACK owed, the probe carried the ACK, the kernel dropped it, and the data
/// stayed unacknowledged until the kernel's own probe drew an ACK from us.
#[test]
fn an_ack_owed_goes_before_a_window_probe() {
    let cfg = Config { delayed_ack: Some(Duration::from_millis(40)), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    c.send(b"blocked").unwrap();
    assert!(drain(&mut c, ms(3)).is_empty());
    let probe_at = c.poll_timeout().expect("persist timer armed");
    // 100 bytes arrive just before the probe is due: their ACK may be delayed.
    let just_before = Instant::from_micros(probe_at.as_micros() - 1000);
    c.handle_segment(
        just_before,
        &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, payload: &[5u8; 100], ..TEMPLATE },
    );
    let early = drain(&mut c, just_before);
    assert!(early.is_empty(), "one small segment: the ACK waits: {early:?}");
    c.handle_timeout(probe_at);
    let out = drain(&mut c, probe_at);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].kind, TransmitKind::Ack, "the ACK owed goes first: {out:?}");
    assert_eq!(out[0].ack, REMOTE_ISN + 101u32);
    // At the peer's RCV.NXT, which a shut window accepts (RFC 9293 3.10.7.4).
    assert_eq!((out[0].seq, out[0].payload.len()), (iss + 1u32, 0));
    assert_eq!((out[1].kind, out[1].seq, out[1].payload.len()), (TransmitKind::WindowProbe, iss, 0));
    assert_eq!(c.stats().window_probes, 1);
}

#[test]
fn receive_window_closes_when_full_and_reopens_after_reading() {
    let cfg = Config { recv_buffer: 4096, window_scaling: false, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    static CHUNK: [u8; 1024] = [3; 1024];
    let mut seq = REMOTE_ISN + 1u32;
    let mut last = None;
    for _ in 0..4 {
        c.handle_segment(ms(2), &Segment { seq, ack: iss + 1u32, payload: &CHUNK, ..TEMPLATE });
        seq += 1024;
        last = drain(&mut c, ms(2)).pop().or(last);
    }
    assert_eq!(last.unwrap().window, 0);
    // More data is out of the (zero) window.
    c.handle_segment(ms(3), &Segment { seq, ack: iss + 1u32, payload: &CHUNK, ..TEMPLATE });
    assert_eq!(c.recv_available(), 4096);
    drain(&mut c, ms(3));
    // Reading a little does not reopen (SWS avoidance); reading half does, with an update.
    let mut buf = [0u8; 4096];
    c.recv(&mut buf[..100]).unwrap();
    assert!(drain(&mut c, ms(4)).is_empty());
    c.recv(&mut buf[..2000]).unwrap();
    let update = one(&mut c, ms(5));
    assert_eq!(update.window, 2100);
}

// ------------------------------------------------------------------------------------
// ESTABLISHED: sender-side SWS avoidance and its override (RFC 9293 3.8.6.2.1,
// RFC 1122 4.2.3.4)
// ------------------------------------------------------------------------------------

/// Open passively to a peer that offers what Linux does (window scale 7, an unscaled SYN
/// window of 64240) and then completes the handshake with window field `window`, in units
/// of 128 bytes; return the connection and our ISS.
fn established_from_linux_syn(config: &Config, window: u16) -> (Connection, SeqNum) {
    let mut c = Connection::listen(config, local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        window: 64240,
        options: TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, ..TcpOptions::NONE },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    let iss = one(&mut c, ms(0)).seq;
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window, ..TEMPLATE });
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().peer_window, u32::from(window) << 7);
    events(&mut c);
    (c, iss)
}

/// Return the peer's pure ACK of `acked` bytes of our data, with window field `window`.
fn window_update(iss: SeqNum, acked: u32, window: u16) -> Segment<'static> {
    Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32 + acked, window, ..TEMPLATE }
}

static QUEUED: [u8; 4096] = [9; 4096];

#[test]
fn small_window_after_a_large_syn_window_is_filled_at_once() {
    // The SYN offered 64240 bytes, unscaled; every window since is 512 bytes (field 4).
    // Half the SYN's window is no measure of this peer: the 512 bytes go at once.
    let (mut c, iss) = established_from_linux_syn(&config(), 4);
    assert_eq!(c.send(&QUEUED), Ok(4096));
    let first = one(&mut c, ms(2));
    assert_eq!((first.kind, first.seq, first.payload.len()), (TransmitKind::Data, iss + 1u32, 512));
    // Each ACK that opens the next 512 bytes is answered at once too, not by a timer.
    for round in 1..8u32 {
        let now = ms(2 + u64::from(round));
        c.handle_segment(now, &window_update(iss, 512 * round, 4));
        let next = one(&mut c, now);
        assert_eq!((next.seq, next.payload.len()), (iss + 1u32 + 512 * round, 512), "round {round}");
    }
    assert_eq!(c.send_queued(), 512, "the last 512 bytes are in flight");
    assert_eq!(c.stats().window_probes, 0);
}

#[test]
fn window_shrunk_below_half_its_largest_is_used_after_the_short_override() {
    // The handshake offered 128 KiB (field 1024 at scale 7); the peer then offers 512 bytes.
    // With 4096 bytes queued and nothing in flight, none of RFC 9293 3.8.6.2.1's conditions
    // holds (no full segment, not all queued data, under half of 128 KiB): the segment
    // waits, but only for the override timeout (200 ms), not for the 1 s RTO.
    let cfg = config();
    assert_eq!(cfg.initial_rto, Duration::from_secs(1));
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &window_update(iss, 0, 4));
    assert_eq!(c.stats().peer_window, 512);
    c.send(&QUEUED).unwrap();
    assert!(drain(&mut c, ms(3)).is_empty(), "SWS avoidance holds the 512-byte segment back");
    assert_eq!(c.poll_timeout(), Some(ms(203)), "the override timeout, not the RTO");
    // Polling again while it waits does not push the deadline back.
    assert!(drain(&mut c, ms(100)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(203)));
    c.handle_timeout(ms(203));
    let forced = one(&mut c, ms(203));
    assert_eq!((forced.kind, forced.seq, forced.payload.len()), (TransmitKind::Data, iss + 1u32, 512));
    // A timer covering the segment now, not the override: the tail-loss probe, two round
    // trips (of 1 ms) and a delayed ACK's worth after it (RFC 8985 7.2), before the RTO.
    assert_eq!(c.poll_timeout(), Some(ms(203 + 2 + 200)));
    // The next small window waits the same short time again: no backoff.
    c.handle_segment(ms(210), &window_update(iss, 512, 4));
    assert!(drain(&mut c, ms(210)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(410)));
    c.handle_timeout(ms(410));
    assert_eq!(one(&mut c, ms(410)).seq, iss + 513u32);
    assert_eq!(c.stats().window_probes, 0, "an open window is not probed");
}

#[test]
fn sws_override_timeout_is_configurable() {
    let cfg = Config { sws_override: Duration::from_millis(120), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &window_update(iss, 0, 4));
    c.send(&QUEUED).unwrap();
    assert!(drain(&mut c, ms(3)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(123)));
    assert_eq!(Config::default().sws_override, Duration::from_millis(200));
}

#[test]
fn window_closing_while_the_override_waits_gets_the_persist_timer() {
    // A guard on the split of the two timers: a small open window waits 200 ms; once the
    // window shuts, probing follows the RTO with backoff as before (RFC 9293 3.8.6.1).
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &window_update(iss, 0, 4));
    c.send(&QUEUED).unwrap();
    assert!(drain(&mut c, ms(3)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(203)));
    c.handle_segment(ms(50), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    assert!(drain(&mut c, ms(50)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(1050)), "the RTO, not the override timeout");
    c.handle_timeout(ms(1050));
    let probe = one(&mut c, ms(1050));
    assert_eq!((probe.kind, probe.seq, probe.payload.len()), (TransmitKind::WindowProbe, iss, 0));
    assert_eq!(c.poll_timeout(), Some(ms(3050)), "backed off to twice the RTO");
    c.handle_segment(ms(1051), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    assert!(drain(&mut c, ms(1051)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(3050)), "a still-shut window leaves the probe where it is");
}

#[test]
fn the_syn_window_still_bounds_old_acks() {
    // A guard on RFC 5961 5.2: MAX.SND.WND keeps the SYN's 64240 bytes, so an old ACK 1500
    // bytes below SND.UNA is still acceptable although no window since exceeded 512 bytes.
    let (mut c, iss) = established_from_linux_syn(&config(), 4);
    c.send(&QUEUED[..2048]).unwrap();
    for round in 0..4u32 {
        let now = ms(2 + u64::from(round));
        if round > 0 {
            c.handle_segment(now, &window_update(iss, 512 * round, 4));
        }
        assert_eq!(one(&mut c, now).payload.len(), 512);
    }
    c.handle_segment(ms(6), &window_update(iss, 2048, 4));
    assert!(drain(&mut c, ms(6)).is_empty());
    let outcome = c.handle_segment(ms(7), &Segment { ack: iss + 549u32, ..peer(iss, Flags::ACK, b"late") });
    assert_eq!(outcome, Outcome::Accepted, "an old but acceptable ACK");
    assert_eq!(c.recv_available(), 4);
    assert_eq!(c.stats().challenge_acks, 0);
}

// ------------------------------------------------------------------------------------
// Closing: FIN-WAIT-1/2, CLOSING, TIME-WAIT, CLOSE-WAIT, LAST-ACK (RFC 9293 3.6)
// ------------------------------------------------------------------------------------

#[test]
fn active_close_through_fin_wait_and_time_wait() {
    let cfg = Config { msl: Duration::from_secs(1), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.send(b"bye").unwrap();
    c.close(ms(2));
    assert_eq!(c.state(), State::FinWait1);
    assert_eq!(c.send(b"more"), Err(SendError::InvalidState(State::FinWait1)));
    let fin = one(&mut c, ms(2));
    assert_eq!((fin.flags, fin.payload.as_slice()), (Flags::ACK | Flags::PSH | Flags::FIN, &b"bye"[..]));
    c.handle_segment(ms(3), &Segment { ack: iss + 5u32, ..peer(iss, Flags::ACK, b"") });
    assert_eq!(c.state(), State::FinWait2);
    // Data still flows from the peer in FIN-WAIT-2.
    c.handle_segment(ms(4), &Segment { ack: iss + 5u32, ..peer(iss, Flags::ACK, b"late") });
    c.handle_segment(
        ms(5),
        &Segment { seq: REMOTE_ISN + 5u32, ack: iss + 5u32, flags: Flags::FIN | Flags::ACK, ..TEMPLATE },
    );
    assert_eq!(c.state(), State::TimeWait);
    let acks = drain(&mut c, ms(5));
    assert_eq!(acks.last().unwrap().ack, REMOTE_ISN + 6u32);
    let mut buf = [0u8; 8];
    assert_eq!(c.recv(&mut buf), Ok(4));
    assert_eq!(c.recv(&mut buf), Ok(0), "end of stream");
    // A retransmitted FIN is acknowledged and restarts 2*MSL.
    c.handle_segment(
        ms(1000),
        &Segment { seq: REMOTE_ISN + 5u32, ack: iss + 5u32, flags: Flags::FIN | Flags::ACK, ..TEMPLATE },
    );
    assert_eq!(one(&mut c, ms(1000)).ack, REMOTE_ISN + 6u32);
    assert_eq!(c.poll_timeout(), Some(ms(3000)));
    c.handle_timeout(ms(3000));
    assert_eq!(c.state(), State::Closed);
    assert!(events(&mut c).contains(&Event::Closed));
    let states: Vec<State> = c.trace().iter().map(|t| t.to).collect();
    assert_eq!(
        states,
        vec![
            State::Listen,
            State::SynReceived,
            State::Established,
            State::FinWait1,
            State::FinWait2,
            State::TimeWait,
            State::Closed
        ]
    );
}

#[test]
fn fin_ack_together_goes_straight_to_time_wait() {
    let (mut c, iss) = established_passive(&config());
    c.close(ms(2));
    one(&mut c, ms(2));
    c.handle_segment(ms(3), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK | Flags::FIN, b"") });
    assert_eq!(c.state(), State::TimeWait);
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let (mut c, iss) = established_passive(&config());
    c.close(ms(2));
    one(&mut c, ms(2));
    // The peer's FIN does not acknowledge ours.
    c.handle_segment(ms(3), &peer(iss, Flags::ACK | Flags::FIN, b""));
    assert_eq!(c.state(), State::Closing);
    assert_eq!(one(&mut c, ms(3)).ack, REMOTE_ISN + 2u32);
    c.handle_segment(ms(4), &Segment { seq: REMOTE_ISN + 2u32, ack: iss + 2u32, ..TEMPLATE });
    assert_eq!(c.state(), State::TimeWait);
}

/// `take_events` hands out at once what `poll_event` hands out one at a time, in the same
/// order, and leaves nothing behind.
#[test]
fn take_events_takes_what_poll_event_would() {
    let step = |c: &mut Connection, iss: SeqNum| {
        c.handle_segment(ms(2), &peer(iss, Flags::ACK | Flags::FIN, b"last"));
    };
    let (mut one_by_one, iss) = established_passive(&config());
    step(&mut one_by_one, iss);
    let (mut at_once, iss) = established_passive(&config());
    step(&mut at_once, iss);
    let taken = at_once.take_events();
    assert_eq!(taken.iter().collect::<Vec<_>>(), events(&mut one_by_one));
    assert!(taken.contains(Event::Readable) && taken.contains(Event::PeerClosed));
    assert_eq!(at_once.poll_event(), None);
    assert!(at_once.take_events().is_empty());
}

#[test]
fn passive_close_through_close_wait_and_last_ack() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &peer(iss, Flags::ACK | Flags::FIN, b"last"));
    assert_eq!(c.state(), State::CloseWait);
    assert_eq!(events(&mut c), vec![Event::Readable, Event::PeerClosed]);
    assert_eq!(one(&mut c, ms(2)).ack, REMOTE_ISN + 6u32);
    // We may still send in CLOSE-WAIT.
    c.send(b"reply").unwrap();
    c.close(ms(3));
    assert_eq!(c.state(), State::LastAck);
    let fin = one(&mut c, ms(3));
    assert!(fin.flags.fin());
    assert_eq!(fin.payload, b"reply");
    c.handle_segment(ms(4), &Segment { seq: REMOTE_ISN + 6u32, ack: iss + 7u32, ..TEMPLATE });
    assert_eq!(c.state(), State::Closed);
    assert!(events(&mut c).contains(&Event::Closed));
}

#[test]
fn out_of_order_fin_waits_for_the_missing_data() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(
        ms(2),
        &Segment {
            seq: REMOTE_ISN + 4u32,
            ack: iss + 1u32,
            flags: Flags::ACK | Flags::FIN,
            payload: b"def",
            ..TEMPLATE
        },
    );
    assert_eq!(c.state(), State::Established);
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"abc"));
    assert_eq!(c.state(), State::CloseWait);
    let mut buf = [0u8; 8];
    assert_eq!(c.recv(&mut buf), Ok(6));
    assert_eq!(c.recv(&mut buf), Ok(0));
}

#[test]
fn abort_sends_rst_and_closes() {
    let (mut c, iss) = established_passive(&config());
    c.send(b"unsent").unwrap();
    c.abort(ms(2));
    assert_eq!(c.state(), State::Closed);
    let rst = one(&mut c, ms(2));
    assert_eq!((rst.flags, rst.seq), (Flags::RST, iss + 1u32));
}

#[test]
fn closed_connection_answers_with_reset() {
    let (mut c, iss) = established_passive(&config());
    c.abort(ms(2));
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"x"));
    let rst = one(&mut c, ms(3));
    assert_eq!((rst.flags, rst.seq), (Flags::RST, iss + 1u32));
}

// ------------------------------------------------------------------------------------
// Timestamps: negotiation, RTTM, PAWS (RFC 7323)
// ------------------------------------------------------------------------------------

/// The peer's timestamps option.
fn ts(tsval: u32, tsecr: u32) -> TcpOptions {
    TcpOptions { timestamps: Some(Timestamps { tsval, tsecr }), ..TcpOptions::NONE }
}

/// Passive open with timestamps: the peer's SYN carries TSval 1000; return the connection,
/// our ISS and the TSval of our SYN-ACK.
fn established_with_timestamps() -> (Connection, SeqNum, u32) {
    let mut c = Connection::listen(&config(), local());
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1460), ..ts(1000, 0) },
        ..TEMPLATE
    };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    let synack = one(&mut c, ms(0));
    let ours = synack.options.timestamps.expect("the SYN-ACK answers timestamps with timestamps");
    assert_eq!(ours.tsecr, 1000, "and echoes the SYN's TSval");
    c.handle_segment(
        ms(1),
        &Segment { seq: REMOTE_ISN + 1u32, ack: synack.seq + 1u32, options: ts(1001, ours.tsval), ..TEMPLATE },
    );
    assert_eq!(c.state(), State::Established);
    events(&mut c);
    (c, synack.seq, ours.tsval)
}

#[test]
fn timestamps_are_offered_and_then_carried_by_every_segment() {
    let (mut c, iss, syn_tsval) = established_with_timestamps();
    // The MSS bounds data and options together (RFC 6691): 1460 - 12.
    assert_eq!(c.stats().mss, 1448);
    c.set_nodelay(true);
    c.send(&[1; 3000]).unwrap();
    let out = drain(&mut c, ms(50));
    assert_eq!(out.iter().map(|o| o.payload.len()).collect::<Vec<_>>(), vec![1448, 1448, 104]);
    for o in &out {
        let t = o.options.timestamps.expect("every segment carries TSopt (RFC 7323 3.2)");
        assert_eq!(t.tsecr, 1001, "echoing TS.Recent");
        assert_eq!(t.tsval.wrapping_sub(syn_tsval), 50, "a 1 ms clock");
    }
    // An active opener offers them in its SYN, with TSecr 0.
    let mut a = Connection::connect(&config(), tuple(), ms(0));
    let syn = one(&mut a, ms(0));
    assert_eq!(syn.options.timestamps.map(|t| t.tsecr), Some(0));
    let _ = iss;
}

#[test]
fn timestamps_are_off_unless_both_offer_them() {
    // The peer does not offer them: none in the SYN-ACK or after.
    let (mut c, _) = established_passive(&config());
    c.send(b"x").unwrap();
    assert_eq!(one(&mut c, ms(5)).options.timestamps, None);
    // We do not offer them: the peer's are ignored.
    let cfg = Config { timestamps: false, ..config() };
    let mut c = Connection::listen(&cfg, local());
    let syn = Segment { seq: REMOTE_ISN, flags: Flags::SYN, options: ts(5, 0), ..TEMPLATE };
    c.handle_segment_from(ms(0), remote().ip(), &syn);
    assert_eq!(one(&mut c, ms(0)).options.timestamps, None);
    let syn = one(&mut Connection::connect(&cfg, tuple(), ms(0)), ms(0));
    assert_eq!(syn.options.timestamps, None);
}

#[test]
fn rtt_is_measured_by_the_hosts_clock_not_the_millisecond_timestamps() {
    let (mut c, iss, _) = established_with_timestamps();
    // The handshake's sample: SYN-ACK at 0 ms, its ACK at 1 ms.
    assert_eq!(c.stats().srtt, Some(Duration::from_millis(1)));
    c.send(&[1; 100]).unwrap();
    let data = one(&mut c, ms(100));
    // Acknowledged 250 us later, echoing the data's TSval: 0 ms by the timestamp clock, 250 us
    // by the host's. SRTT = 7/8 * 1 ms + 1/8 * 250 us (RFC 6298 2.3), in whole microseconds.
    let at = ms(100) + Duration::from_micros(250);
    c.handle_segment(
        at,
        &Segment {
            ack: iss + 101u32,
            options: ts(1050, data.options.timestamps.unwrap().tsval),
            ..peer(iss, Flags::ACK, b"")
        },
    );
    assert_eq!(c.stats().srtt, Some(Duration::from_micros(875 + 31)));
}

#[test]
fn after_a_timeout_the_echoed_timestamp_times_the_retransmission() {
    let (mut c, iss, syn_tsval) = established_with_timestamps();
    c.send(&[1; 100]).unwrap();
    let first = one(&mut c, ms(100));
    assert_eq!(first.options.timestamps.unwrap().tsval.wrapping_sub(syn_tsval), 100);
    // No ACK: the retransmission timer fires and resends, with a new TSval.
    let rto = c.poll_timeout().unwrap();
    c.handle_timeout(rto);
    let resent = one(&mut c, rto);
    assert_eq!(resent.seq, first.seq);
    let tsval = resent.options.timestamps.unwrap().tsval;
    // Karn's rule forbids timing the resend by the clock (which transmission does the ACK
    // answer?); its echo says: this one, 40 ms ago (RFC 7323 4.1).
    c.handle_segment(
        rto + Duration::from_millis(40),
        &Segment { ack: iss + 101u32, options: ts(1050, tsval), ..peer(iss, Flags::ACK, b"") },
    );
    // The timeout's backoff keeps the old SRTT of 1 ms as the base; the echo's sample
    // updates it: 7/8 * 1 ms + 1/8 * 40 ms.
    assert_eq!(c.stats().srtt, Some(Duration::from_micros(875 + 5_000)));
}

#[test]
fn paws_drops_old_duplicates_and_segments_without_timestamps() {
    let (mut c, iss, _) = established_with_timestamps();
    // In order, newer TSval: taken, and TS.Recent moves.
    c.handle_segment(ms(10), &Segment { options: ts(2000, 0), ..peer(iss, Flags::ACK, b"abc") });
    assert_eq!(c.recv_available(), 3);
    // An old duplicate (TSval below TS.Recent), even though its sequence number fits: dropped
    // and acknowledged (RFC 7323 5.3 R1).
    let old = Segment { seq: REMOTE_ISN + 4u32, options: ts(1500, 0), ..peer(iss, Flags::ACK, b"old") };
    assert_eq!(c.handle_segment(ms(20), &old), Outcome::Dropped(DropReason::Paws));
    assert_eq!(c.recv_available(), 3);
    let ack = one(&mut c, ms(20));
    assert_eq!((ack.ack, ack.options.timestamps.unwrap().tsecr), (REMOTE_ISN + 4u32, 2000));
    // No TSopt at all: dropped silently (RFC 7323 3.2).
    let bare = Segment { seq: REMOTE_ISN + 4u32, ..peer(iss, Flags::ACK, b"bare") };
    assert_eq!(c.handle_segment(ms(30), &bare), Outcome::Dropped(DropReason::NoTimestamp));
    assert!(drain(&mut c, ms(30)).is_empty());
    // An RST needs none.
    c.handle_segment(ms(40), &Segment { seq: REMOTE_ISN + 4u32, flags: Flags::RST, ..TEMPLATE });
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn ts_recent_follows_the_segment_our_ack_covers() {
    let (mut c, iss, _) = established_with_timestamps();
    // Out of order first (after Last.ACK.sent): its TSval is not taken.
    c.handle_segment(
        ms(10),
        &Segment { seq: REMOTE_ISN + 4u32, options: ts(3000, 0), ..peer(iss, Flags::ACK, b"def") },
    );
    let ack = one(&mut c, ms(10));
    assert_eq!(ack.options.timestamps.unwrap().tsecr, 1001, "RFC 7323 4.3 (2): SEG.SEQ > Last.ACK.sent");
    // The hole filled (at Last.ACK.sent): its TSval is.
    c.handle_segment(ms(20), &Segment { options: ts(2000, 0), ..peer(iss, Flags::ACK, b"abc") });
    let ack = one(&mut c, ms(20));
    assert_eq!((ack.ack, ack.options.timestamps.unwrap().tsecr), (REMOTE_ISN + 7u32, 2000));
}

#[test]
fn sack_blocks_repeat_the_ones_last_reported_before_the_lowest() {
    // RFC 2018 section 4: the first block holds the segment that triggered the ACK, the
    // next ones repeat the most recently reported blocks. With timestamps, three fit.
    let mut c = Connection::listen(&config(), local());
    let options = TcpOptions { mss: Some(1460), sack_permitted: true, ..ts(1000, 0) };
    c.handle_segment_from(ms(0), remote().ip(), &Segment { seq: REMOTE_ISN, flags: Flags::SYN, options, ..TEMPLATE });
    let synack = one(&mut c, ms(0));
    let (iss, tsval) = (synack.seq, synack.options.timestamps.unwrap().tsval);
    c.handle_segment(ms(1), &Segment { ack: iss + 1u32, options: ts(1001, tsval), ..peer(iss, Flags::ACK, b"") });
    assert!(c.sack_enabled() && c.timestamps_enabled());
    let base = REMOTE_ISN + 1u32;
    let at = |off: u32| Segment { seq: base + off, options: ts(1002, tsval), ..peer(iss, Flags::ACK, b"xxxxxxxxxx") };
    let blocks = |c: &mut Connection, now| {
        let ack = drain(c, now).pop().expect("an ACK");
        ack.options.sack_blocks.as_slice().iter().map(|b| (b.left - base, b.right - base)).collect::<Vec<_>>()
    };
    // Five ranges arrive before we send one ACK (as from one batch of frames): the newest,
    // then the lowest.
    for off in [100, 200, 300, 400, 500] {
        c.handle_segment(ms(2), &at(off));
    }
    assert_eq!(blocks(&mut c, ms(2)), [(500, 510), (100, 110), (200, 210)]);
    // A sixth: it, then the two reported most recently; not 100 and 200 again and again.
    c.handle_segment(ms(3), &at(600));
    assert_eq!(blocks(&mut c, ms(3)), [(600, 610), (500, 510), (100, 110)]);
    // One that grows the range at 300, never reported so far: it leads, as it stands now.
    c.handle_segment(ms(4), &at(310));
    assert_eq!(blocks(&mut c, ms(4)), [(300, 320), (600, 610), (500, 510)]);
}

#[test]
fn time_wait_takes_a_newer_timestamp_whatever_the_sequence_number() {
    let (mut c, iss, _) = established_with_timestamps();
    c.close(ms(2));
    one(&mut c, ms(2));
    c.handle_segment(
        ms(3),
        &Segment { ack: iss + 2u32, options: ts(1100, 0), ..peer(iss, Flags::ACK | Flags::FIN, b"") },
    );
    assert_eq!(c.state(), State::TimeWait);
    // RFC 6191: with timestamps, a SYN whose TSval is newer opens, even below RCV.NXT...
    let newer = Segment { seq: REMOTE_ISN, flags: Flags::SYN, options: ts(1200, 0), ..TEMPLATE };
    assert!(c.time_wait_accepts(&newer));
    // ...and one whose TSval is older does not, even above it.
    let older = Segment { seq: REMOTE_ISN + 1_000_000u32, flags: Flags::SYN, options: ts(1050, 0), ..TEMPLATE };
    assert!(!c.time_wait_accepts(&older));
}

// ------------------------------------------------------------------------------------
// Every connection ends: released connections, FIN-WAIT-2, TIME-WAIT (RFC 9293 3.6,
// 3.10.7.4; RFC 1122 4.2.2.13; RFC 1337; RFC 6191)
// ------------------------------------------------------------------------------------

/// Our FIN sent and acknowledged by the peer: FIN-WAIT-2, released or only half-closed.
fn in_fin_wait2(config: &Config, release: bool) -> (Connection, SeqNum) {
    let (mut c, iss) = established_passive(config);
    if release {
        c.release(ms(2));
        assert!(c.is_released());
    } else {
        c.close(ms(2));
    }
    assert!(one(&mut c, ms(2)).flags.fin());
    c.handle_segment(ms(3), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK, b"") });
    assert_eq!(c.state(), State::FinWait2);
    (c, iss)
}

#[test]
fn released_connection_leaves_fin_wait2_after_the_timeout() {
    let cfg = Config { fin_wait2_timeout: Some(Duration::from_secs(60)), ..config() };
    let (mut c, _) = in_fin_wait2(&cfg, true);
    assert_eq!(c.poll_timeout(), Some(ms(3) + Duration::from_secs(60)), "the FIN-WAIT-2 timer");
    c.handle_timeout(ms(3) + Duration::from_secs(60));
    assert_eq!(c.state(), State::Closed);
    assert!(drain(&mut c, ms(60_003)).is_empty(), "removed without a word to the peer");
    assert_eq!(c.poll_timeout(), None);
    let last = c.trace().last().unwrap();
    assert_eq!(last.cause, bypass_tcp::Cause::Timer(bypass_tcp::Timer::FinWait2));
}

#[test]
fn half_closed_connection_waits_in_fin_wait2_for_its_owner() {
    // Only half-closed (RFC 9293's CLOSE): the application may still read, and decides.
    let (c, _) = in_fin_wait2(&config(), false);
    assert_eq!(c.poll_timeout(), None);
    // And a released one with the timeout switched off waits too.
    let (c, _) = in_fin_wait2(&Config { fin_wait2_timeout: None, ..config() }, true);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn released_connection_that_gets_the_fin_goes_to_time_wait_as_usual() {
    let cfg = Config { msl: Duration::from_secs(1), ..config() };
    let (mut c, iss) = in_fin_wait2(&cfg, true);
    c.handle_segment(ms(10), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK | Flags::FIN, b"") });
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.poll_timeout(), Some(ms(2010)), "2 MSL, the FIN-WAIT-2 timer gone");
}

#[test]
fn releasing_with_unread_data_resets() {
    let (mut c, iss) = established_passive(&config());
    c.handle_segment(ms(2), &peer(iss, Flags::ACK, b"unread"));
    drain(&mut c, ms(2));
    c.release(ms(3));
    assert_eq!(c.state(), State::Closed);
    let rst = one(&mut c, ms(3));
    assert_eq!((rst.flags, rst.seq), (Flags::RST, iss + 1u32));
    assert_eq!(c.stats().resets_for_lost_data, 1);
}

#[test]
fn data_after_release_resets() {
    let (mut c, iss) = in_fin_wait2(&config(), true);
    let outcome = c.handle_segment(ms(4), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK, b"too late") });
    assert_eq!(outcome, Outcome::Dropped(DropReason::DataAfterRelease));
    assert_eq!(c.state(), State::Closed);
    let rst = one(&mut c, ms(4));
    assert_eq!((rst.flags, rst.seq), (Flags::RST, iss + 2u32), "in the peer's window: after our FIN");
    assert_eq!(c.stats().resets_for_lost_data, 1);
    // Half-closed, the same data is taken: the application may still read it.
    let (mut c, iss) = in_fin_wait2(&config(), false);
    c.handle_segment(ms(4), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK, b"still read") });
    assert_eq!(c.state(), State::FinWait2);
    assert_eq!(c.recv_available(), 10);
}

#[test]
fn data_after_release_in_fin_wait1_resets_too() {
    let (mut c, iss) = established_passive(&config());
    c.send(b"pending").unwrap();
    c.release(ms(2));
    assert_eq!(c.state(), State::FinWait1);
    drain(&mut c, ms(2));
    // The peer has not seen our FIN yet and keeps sending.
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"more"));
    assert_eq!(c.state(), State::Closed);
    assert!(drain(&mut c, ms(3)).iter().any(|o| o.flags == Flags::RST));
}

#[test]
fn rst_in_time_wait_closes_unless_rfc1337_is_on() {
    for rfc1337 in [false, true] {
        let cfg = Config { rfc1337, ..config() };
        let (mut c, iss) = in_fin_wait2(&cfg, false);
        c.handle_segment(ms(5), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK | Flags::FIN, b"") });
        assert_eq!(c.state(), State::TimeWait);
        drain(&mut c, ms(5));
        let outcome = c.handle_segment(ms(6), &Segment { seq: REMOTE_ISN + 2u32, flags: Flags::RST, ..TEMPLATE });
        if rfc1337 {
            assert_eq!(c.state(), State::TimeWait, "RFC 1337: the RST is ignored");
            assert_eq!(outcome, Outcome::Dropped(DropReason::TimeWaitReset));
        } else {
            assert_eq!(c.state(), State::Closed, "RFC 9293 3.10.7.4: an acceptable RST closes");
        }
    }
}

#[test]
fn time_wait_accepts_a_new_syn_above_the_old_sequence_space() {
    let (mut c, iss) = in_fin_wait2(&config(), true);
    c.handle_segment(ms(5), &Segment { ack: iss + 2u32, ..peer(iss, Flags::ACK | Flags::FIN, b"") });
    assert_eq!(c.state(), State::TimeWait);
    drain(&mut c, ms(5));
    let old_snd_max = c.sequence_space().snd_max;
    // An old duplicate SYN (at or below RCV.NXT) does not reopen; nor does a SYN with ACK.
    let old = Segment { seq: REMOTE_ISN, flags: Flags::SYN, ..TEMPLATE };
    assert!(!c.time_wait_accepts(&old));
    let new_isn = REMOTE_ISN + 100_000u32;
    assert!(!c.time_wait_accepts(&Segment { seq: new_isn, flags: Flags::SYN | Flags::ACK, ..TEMPLATE }));
    // A new SYN above it does (RFC 6191 without timestamps, RFC 1122 4.2.2.13).
    let syn = Segment {
        seq: new_isn,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1400), ..TcpOptions::NONE },
        ..TEMPLATE
    };
    assert!(c.time_wait_accepts(&syn));
    c.reopen(ms(6), &syn);
    assert_eq!(c.state(), State::SynReceived);
    let synack = one(&mut c, ms(6));
    assert_eq!((synack.flags, synack.ack), (Flags::SYN | Flags::ACK, new_isn + 1u32));
    assert!(
        synack.seq.after(old_snd_max + 65535u32),
        "the new ISS {:?} lies well above the old SND.NXT {old_snd_max:?}",
        synack.seq
    );
    c.handle_segment(ms(7), &Segment { seq: new_isn + 1u32, ack: synack.seq + 1u32, ..TEMPLATE });
    assert_eq!(c.state(), State::Established);
    assert!(!c.is_released(), "a new incarnation, owned afresh");
    let states: Vec<State> = c.trace().iter().map(|t| t.to).collect();
    assert!(states.ends_with(&[State::TimeWait, State::Listen, State::SynReceived, State::Established]), "{states:?}");
}

// ------------------------------------------------------------------------------------
// Giving up: user timeout, keep-alive, silent zero windows (RFC 9293 3.8.3, 3.8.4, 3.8.6.1)
// ------------------------------------------------------------------------------------

#[test]
fn zero_window_probing_goes_on_while_the_probes_are_answered() {
    // A live peer with a full buffer: every probe is answered, so probing never ends.
    let cfg = Config { max_retransmissions: 3, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    c.send(b"blocked").unwrap();
    drain(&mut c, ms(2));
    for _ in 0..10 {
        let t = c.poll_timeout().expect("persist timer");
        c.handle_timeout(t);
        assert_eq!(one(&mut c, t).kind, TransmitKind::WindowProbe);
        c.handle_segment(t, &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    }
    assert_eq!(c.state(), State::Established, "10 answered probes, with the limit at 3");
}

#[test]
fn unanswered_zero_window_probes_give_up_at_the_retransmission_limit() {
    let cfg = Config { max_retransmissions: 3, user_timeout: None, ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    c.send(b"blocked").unwrap();
    drain(&mut c, ms(2));
    let mut probes = 0;
    // Bounded: a connection that never gives up would probe for ever.
    for _ in 0..100 {
        let Some(t) = c.poll_timeout() else { break };
        c.handle_timeout(t);
        probes += drain(&mut c, t).iter().filter(|o| o.kind == TransmitKind::WindowProbe).count();
    }
    assert_eq!(probes, 3);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
}

#[test]
fn unanswered_zero_window_probes_give_up_at_the_user_timeout() {
    // The RFC 5482 user timeout bounds a silent zero window as it bounds unacknowledged data:
    // with the default limit of 12 probes, backed off to 60 s, that would take half an hour.
    let cfg = Config { user_timeout: Some(Duration::from_secs(300)), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    c.handle_segment(ms(2), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 0, ..TEMPLATE });
    c.send(&[7; 1000]).unwrap();
    drain(&mut c, ms(2));
    let mut end = ms(0);
    for _ in 0..100 {
        let Some(t) = c.poll_timeout() else { break };
        c.handle_timeout(t);
        drain(&mut c, t);
        end = t;
    }
    assert_eq!(c.state(), State::Closed);
    let lasted = end - ms(2);
    assert!(lasted >= Duration::from_secs(300) && lasted < Duration::from_secs(360), "gave up after {lasted:?}");
}

#[test]
fn the_minimum_rto_is_200_ms_by_default_as_linux() {
    assert_eq!(Config::default().min_rto, Duration::from_millis(200));
    let cfg = Config { min_rto: Config::default().min_rto, ..config() };
    let (mut c, _) = established_passive(&cfg);
    // A 1 ms round trip measured: the RTO is the floor, not RFC 6298's 1 s.
    assert_eq!(c.stats().rto, Duration::from_millis(200));
    c.send(b"lost").unwrap();
    drain(&mut c, ms(2));
    assert_eq!(c.poll_timeout(), Some(ms(202)));
}

#[test]
fn unanswered_retransmissions_time_out() {
    // Without SACK (no tail-loss probe): three RTO retransmissions, then the end.
    let cfg = Config { max_retransmissions: 3, min_rto: Duration::from_millis(200), sack: false, ..config() };
    let (mut c, _) = established_passive(&cfg);
    c.send(b"lost").unwrap();
    drain(&mut c, ms(2));
    let mut retransmissions = 0;
    while let Some(t) = c.poll_timeout() {
        c.handle_timeout(t);
        retransmissions += drain(&mut c, t).len();
    }
    assert_eq!(retransmissions, 3);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
    assert_eq!(c.send(b"x"), Err(SendError::TimedOut));
}

#[test]
fn keepalive_probes_an_idle_connection_then_gives_up() {
    let ka = Keepalive { idle: Duration::from_secs(10), interval: Duration::from_secs(1), probes: 2 };
    let cfg = Config { keepalive: Some(ka), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    assert_eq!(c.poll_timeout(), Some(ms(1) + Duration::from_secs(10)));
    c.handle_timeout(ms(10_001));
    let probe = one(&mut c, ms(10_001));
    assert_eq!((probe.kind, probe.seq), (TransmitKind::KeepAlive, iss));
    // An answer resets the count.
    c.handle_segment(ms(10_002), &Segment { ack: iss + 1u32, ..peer(iss, Flags::ACK, b"") });
    assert_eq!(c.poll_timeout(), Some(ms(20_002)));
    for t in [20_002, 21_002, 22_002] {
        c.handle_timeout(ms(t));
        drain(&mut c, ms(t));
    }
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
}

#[test]
fn junk_does_not_keep_a_dead_connection_alive() {
    // The peer is gone; every 5 s a blind out-of-window segment arrives. Keep-alive's idle
    // clock follows acceptable segments only, so the connection still dies on schedule:
    // 10 s idle, then two unanswered probes 1 s apart.
    let ka = Keepalive { idle: Duration::from_secs(10), interval: Duration::from_secs(1), probes: 2 };
    let cfg = Config { keepalive: Some(ka), ..config() };
    let (mut c, iss) = established_passive(&cfg);
    let junk = Segment { seq: REMOTE_ISN + 5_000_000u32, ack: iss + 1u32, ..TEMPLATE };
    let mut next_junk = ms(5_000);
    let mut now = ms(1);
    while c.state() != State::Closed && now < ms(120_000) {
        let timer = c.poll_timeout().unwrap_or(next_junk);
        now = timer.min(next_junk);
        if now == next_junk {
            c.handle_segment(now, &junk);
            next_junk = now + Duration::from_secs(5);
        } else {
            c.handle_timeout(now);
        }
        drain(&mut c, now);
    }
    println!("keep-alive with junk every 5 s: closed after {:?}", now - ms(1));
    assert_eq!(c.state(), State::Closed);
    assert!(now - ms(1) <= Duration::from_secs(13), "junk kept the connection open until {now:?}");
    assert_eq!(events(&mut c), vec![Event::TimedOut]);
}

#[test]
fn out_of_window_segments_draw_rate_limited_acks() {
    // 10,000 out-of-window segments without data, one every 100 us: at most one ACK per
    // 500 ms answers them (Linux's tcp_invalid_ratelimit), not one each.
    let (mut c, iss) = established_passive(&config());
    let junk = Segment { seq: REMOTE_ISN + 5_000_000u32, ack: iss + 1u32, ..TEMPLATE };
    let mut acks = 0;
    for i in 0..10_000u64 {
        let now = Instant::from_micros(2_000 + i * 100);
        assert_eq!(c.handle_segment(now, &junk), Outcome::Dropped(DropReason::OutOfWindow));
        acks += drain(&mut c, now).len();
    }
    println!("10,000 out-of-window segments over 1 s drew {acks} ACKs");
    assert!((1..=10).contains(&acks), "{acks} ACKs");
    assert_eq!(c.stats().invalid_acks_limited, 10_000 - acks as u64);
    // A segment with data is answered every time: a retransmission needs its ACK.
    let old = Segment { seq: REMOTE_ISN + 1u32 - 100u32, payload: &[1; 100], ..peer(iss, Flags::ACK, b"") };
    for t in [1_100, 1_101, 1_102] {
        c.handle_segment(ms(t), &old);
        assert_eq!(one(&mut c, ms(t)).ack, REMOTE_ISN + 1u32);
    }
}

#[test]
fn challenge_acks_share_the_rate_limit_of_unacceptable_segments() {
    // RST and SYN inside the window draw challenge ACKs (RFC 5961 3.2, 4.2), at most one per
    // 500 ms between them and the out-of-window ACKs, as Linux's tcp_send_challenge_ack.
    let (mut c, _) = established_passive(&config());
    let rst = Segment { seq: REMOTE_ISN + 10u32, flags: Flags::RST, ..TEMPLATE };
    let syn = Segment { seq: REMOTE_ISN + 20u32, flags: Flags::SYN, ..TEMPLATE };
    c.handle_segment(ms(10), &rst);
    assert_eq!(one(&mut c, ms(10)).flags, Flags::ACK);
    c.handle_segment(ms(20), &syn);
    c.handle_segment(ms(30), &rst);
    assert!(drain(&mut c, ms(30)).is_empty());
    c.handle_segment(ms(600), &syn);
    assert_eq!(one(&mut c, ms(600)).flags, Flags::ACK);
    assert_eq!((c.stats().challenge_acks, c.stats().invalid_acks_limited), (2, 2));
    assert_eq!(c.state(), State::Established);
}

#[test]
fn a_silent_peer_is_given_up_after_about_15_minutes_as_linux() {
    // Linux's defaults: tcp_retries2 = 15 from a 200 ms RTO doubling up to TCP_RTO_MAX
    // (120 s), 924.6 s (tcp_model_timeout), and no user timeout. A five-minute outage
    // does not kill the connection.
    let defaults = Config::default();
    assert_eq!(
        (defaults.max_retransmissions, defaults.max_rto, defaults.user_timeout),
        (15, Duration::from_secs(120), None)
    );
    let cfg = Config { min_rto: defaults.min_rto, sack: false, ..config() };
    let (mut c, _) = established_passive(&cfg);
    c.send(b"into the void").unwrap();
    drain(&mut c, ms(2));
    let mut end = ms(2);
    while let Some(t) = c.poll_timeout() {
        c.handle_timeout(t);
        drain(&mut c, t);
        end = t;
        if t - ms(2) < Duration::from_secs(300) {
            assert_eq!(c.state(), State::Established);
        }
    }
    let lasted = end - ms(2);
    println!("a silent peer given up after {lasted:?}");
    assert_eq!(c.state(), State::Closed);
    assert!(lasted >= Duration::from_secs(900) && lasted <= Duration::from_secs(950), "gave up after {lasted:?}");
}

#[test]
fn keepalive_is_off_by_default() {
    let (c, _) = established_passive(&config());
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn isns_differ_per_connection_and_grow_with_time() {
    let a = Connection::connect(&config(), tuple(), ms(0)).sequence_space().iss;
    let other = FourTuple { remote: "10.0.0.2:40001".parse().unwrap(), ..tuple() };
    let b = Connection::connect(&config(), other, ms(0)).sequence_space().iss;
    let later = Connection::connect(&config(), tuple(), ms(1000)).sequence_space().iss;
    assert_ne!(a, b);
    assert_eq!(later - a, 250_000, "RFC 6528: M ticks every 4 microseconds");
}

// ------------------------------------------------------------------------------------
// SYN cookies (RFC 4987 3.6): the listener kept no state; the ACK rebuilds it
// ------------------------------------------------------------------------------------

#[test]
fn syn_cookie_reply_and_rebuilt_connection() {
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1200), window_scale: Some(7), ..TcpOptions::NONE },
        ..TEMPLATE
    };
    let cookie = SeqNum(0xdead_beef);
    let reply = Connection::syn_cookie_reply(&config(), &tuple(), &syn, cookie, ms(0));
    assert_eq!((reply.flags, reply.seq, reply.ack), (Flags::SYN | Flags::ACK, cookie, REMOTE_ISN + 1u32));
    assert_eq!((reply.src_port, reply.dst_port), (80, 40000));
    assert_eq!(reply.options.window_scale, None);
    let ack = Segment { seq: REMOTE_ISN + 1u32, ack: cookie + 1u32, window: 500, ..peer(cookie, Flags::ACK, b"hi") };
    let mut c = Connection::from_syn_cookie(&config(), tuple(), cookie, 1200, &ack, ms(5));
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().peer_window, 500, "no window scaling without the SYN's state");
    assert_eq!(c.stats().mss, 1200);
    let mut buf = [0u8; 4];
    assert_eq!(c.recv(&mut buf), Ok(2));
    c.send(b"ok").unwrap();
    let out = drain(&mut c, ms(6));
    assert_eq!((out[0].seq, out[0].ack), (cookie + 1u32, REMOTE_ISN + 3u32));
}

#[test]
fn syn_cookie_carries_window_scale_and_sack_in_the_timestamp() {
    // A SYN as Linux sends it: MSS, SACK-permitted, timestamps, window scale 7.
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        window: 64240,
        options: TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamps: Some(Timestamps { tsval: 4000, tsecr: 0 }),
            ..TcpOptions::NONE
        },
        ..TEMPLATE
    };
    let cookie = SeqNum(0x1234_5678);
    let reply = Connection::syn_cookie_reply(&config(), &tuple(), &syn, cookie, ms(1000));
    assert_eq!(reply.options.window_scale, Some(3), "offered as a stateful SYN-ACK would");
    assert!(reply.options.sack_permitted);
    let ts = reply.options.timestamps.expect("timestamps answered");
    assert_eq!(ts.tsecr, 4000);
    assert_eq!(
        bypass_tcp::CookieOptions::decode(ts.tsval),
        Some(bypass_tcp::CookieOptions { window_scale: Some(7), sack_permitted: true, ecn: false })
    );
    // The ACK echoes the TSval: the rebuilt connection has scaling, SACK and timestamps.
    let ack = Segment {
        seq: REMOTE_ISN + 1u32,
        ack: cookie + 1u32,
        window: 500,
        options: TcpOptions { timestamps: Some(Timestamps { tsval: 4001, tsecr: ts.tsval }), ..TcpOptions::NONE },
        ..TEMPLATE
    };
    let mut c = Connection::from_syn_cookie(&config(), tuple(), cookie, 1460, &ack, ms(1001));
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().peer_window, 500 << 7, "the window is scaled");
    assert_eq!(c.stats().mss, 1448, "timestamps in use");
    let space = c.sequence_space();
    assert_eq!((space.snd_wscale, space.rcv_wscale), (7, 3));
    // Out-of-order data is SACKed, and every segment carries timestamps.
    c.handle_segment(
        ms(1002),
        &Segment {
            seq: REMOTE_ISN + 11u32,
            ack: cookie + 1u32,
            payload: b"later",
            options: TcpOptions { timestamps: Some(Timestamps { tsval: 4002, tsecr: 0 }), ..TcpOptions::NONE },
            ..TEMPLATE
        },
    );
    let dup = one(&mut c, ms(1002));
    assert_eq!(dup.options.sack_blocks.len(), 1, "SACK is on");
    assert_eq!(dup.options.timestamps.map(|t| t.tsecr), Some(4001));
    // Our TSvals do not go back from the cookie's (PAWS at the peer, RFC 7323 5).
    let later = dup.options.timestamps.expect("timestamps").tsval;
    assert!(later.wrapping_sub(ts.tsval) as i32 >= 0, "TSval {later} after the cookie's {}", ts.tsval);
    // The options replace the clock's low six bits, never putting it ahead of the clock
    // (Linux's cookie_init_timestamp): at every clock value, including across the wrap.
    let every = bypass_tcp::CookieOptions { window_scale: Some(14), sack_permitted: true, ecn: true };
    let none = bypass_tcp::CookieOptions { window_scale: None, sack_permitted: false, ecn: false };
    for clock in [0u32, 5, 0x3f, 0x40, 0x41, 1_000_007, u32::MAX - 3, u32::MAX] {
        for options in [every, none] {
            let tsval = options.encode(clock);
            let behind = clock.wrapping_sub(tsval);
            assert!(behind < 0x40, "{options:?} at {clock}: TSval {tsval} is {behind} behind");
            assert_eq!(bypass_tcp::CookieOptions::decode(tsval), Some(options), "at {clock}");
        }
    }
    // Bit 5 is ECN (Linux's TS_OPT_ECN).
    assert_eq!(
        bypass_tcp::CookieOptions::decode(0x2f),
        Some(bypass_tcp::CookieOptions { window_scale: None, sack_permitted: false, ecn: true })
    );
    assert_eq!(
        bypass_tcp::CookieOptions::decode(0x0e | 0x01 << 8),
        Some(bypass_tcp::CookieOptions { window_scale: Some(14), sack_permitted: false, ecn: false })
    );
}

#[test]
fn a_buffer_smaller_than_the_mss_bounds_full_segments() {
    // 1480 bytes of room behind IPv4 and Ethernet on a 1514-byte frame: a 1460-byte MSS
    // segment fits exactly, and a tighter buffer makes smaller "full" segments at once.
    let (mut c, _) = established_passive(&config());
    c.send(&[1u8; 5000]).unwrap();
    let mut buf = [0u8; 1000];
    let mut sizes = Vec::new();
    while let Some(t) = c.poll_transmit(ms(2), &mut buf) {
        sizes.push(t.payload_len);
    }
    // Buffer-sized segments go out back to back (Nagle does not hold them, the initial
    // window of RFC 6928 takes ten); Nagle holds the last 100 bytes while data is in flight.
    assert_eq!(sizes, vec![980, 980, 980, 980, 980]);
}

// ------------------------------------------------------------------------------------
// ECN (RFC 3168)
// ------------------------------------------------------------------------------------

/// An ECN-setup SYN (RFC 3168 6.1.1): ECE and CWR.
fn ecn_setup_syn() -> Segment<'static> {
    Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN | Flags::ECE | Flags::CWR,
        options: TcpOptions { mss: Some(1460), ..TcpOptions::NONE },
        ..TEMPLATE
    }
}

/// Passive open from `syn` with `config`; return the connection, our ISS and the SYN-ACK's
/// flags.
fn passive_from(config: &Config, syn: &Segment<'_>) -> (Connection, SeqNum, Flags) {
    let mut c = Connection::listen(config, local());
    c.handle_segment_from(ms(0), remote().ip(), syn);
    let synack = one(&mut c, ms(0));
    assert!(!synack.ect, "a SYN-ACK is never ECN-capable");
    let iss = synack.seq;
    c.handle_segment(ms(1), &Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, window: 65535, ..TEMPLATE });
    assert_eq!(c.state(), State::Established);
    drain(&mut c, ms(1));
    events(&mut c);
    (c, iss, synack.flags)
}

#[test]
fn ecn_passive_open_answers_an_ecn_setup_syn_unless_off() {
    // The default accepts (Linux's tcp_ecn=2): ECE without CWR in the SYN-ACK.
    let (c, _, flags) = passive_from(&config(), &ecn_setup_syn());
    assert_eq!(flags, Flags::SYN | Flags::ACK | Flags::ECE);
    assert!(c.stats().ecn);
    // Off: a plain SYN-ACK.
    let (c, _, flags) = passive_from(&Config { ecn: Ecn::Off, ..config() }, &ecn_setup_syn());
    assert_eq!(flags, Flags::SYN | Flags::ACK);
    assert!(!c.stats().ecn);
    // A SYN that does not ask (ECE alone is not an ECN-setup SYN) gets a plain SYN-ACK.
    let plain = Segment { flags: Flags::SYN | Flags::ECE, ..ecn_setup_syn() };
    let (c, _, flags) = passive_from(&Config { ecn: Ecn::Request, ..config() }, &plain);
    assert_eq!(flags, Flags::SYN | Flags::ACK);
    assert!(!c.stats().ecn);
}

/// Active open with `config`; return the connection and the SYN.
fn ecn_connect(config: &Config) -> (Connection, Out) {
    let mut c = Connection::connect(config, tuple(), ms(0));
    let syn = one(&mut c, ms(0));
    (c, syn)
}

#[test]
fn ecn_active_open_asks_only_when_configured_and_takes_only_an_ecn_setup_syn_ack() {
    let (_, syn) = ecn_connect(&config());
    assert_eq!(syn.flags, Flags::SYN, "the default does not ask");
    let request = Config { ecn: Ecn::Request, ..config() };
    for (reply, ecn) in [
        (Flags::SYN | Flags::ACK | Flags::ECE, true),
        (Flags::SYN | Flags::ACK | Flags::ECE | Flags::CWR, false),
        (Flags::SYN | Flags::ACK, false),
    ] {
        let (mut c, syn) = ecn_connect(&request);
        assert_eq!(syn.flags, Flags::SYN | Flags::ECE | Flags::CWR);
        assert!(!syn.ect);
        c.handle_segment(ms(10), &Segment { seq: REMOTE_ISN, ack: syn.seq + 1u32, flags: reply, ..TEMPLATE });
        assert_eq!(c.state(), State::Established);
        assert_eq!(c.stats().ecn, ecn, "SYN-ACK {reply:?}");
        // Data goes ECN-capable only on an ECN connection.
        c.send(b"data").unwrap();
        let out = drain(&mut c, ms(10));
        assert_eq!(out[0].payload, b"data");
        assert_eq!(out[0].ect, ecn);
        assert!(!out[0].flags.intersects(Flags::ECE | Flags::CWR));
    }
    // A plain SYN-ACK to a client that did not ask, even with ECE set, is not ECN.
    let (mut c, syn) = ecn_connect(&config());
    c.handle_segment(
        ms(10),
        &Segment { seq: REMOTE_ISN, ack: syn.seq + 1u32, flags: Flags::SYN | Flags::ACK | Flags::ECE, ..TEMPLATE },
    );
    assert!(!c.stats().ecn);
}

#[test]
fn ecn_retransmitted_syn_goes_without_ecn() {
    let (mut c, syn) = ecn_connect(&Config { ecn: Ecn::Request, ..config() });
    assert_eq!(syn.flags, Flags::SYN | Flags::ECE | Flags::CWR);
    let at = c.poll_timeout().expect("the SYN is timed");
    c.handle_timeout(at);
    let again = one(&mut c, at);
    assert_eq!(again.kind, TransmitKind::Retransmission);
    assert_eq!(again.flags, Flags::SYN, "Linux's ECN fallback: a plain SYN");
}

#[test]
fn ecn_ce_mark_is_echoed_at_once_on_every_ack_until_cwr() {
    // Delayed ACKs on: the CE mark must still draw an ACK at once.
    let config = Config { delayed_ack: Some(Duration::from_millis(40)), ..config() };
    let (mut c, iss, _) = passive_from(&config, &ecn_setup_syn());
    let mut seq = REMOTE_ISN + 1u32;
    let mut data = |c: &mut Connection, at: u64, flags: Flags, mark: IpEcn| {
        let seg = Segment { seq, ack: iss + 1u32, flags, payload: b"x", ..TEMPLATE };
        seq += 1u32;
        assert_eq!(c.handle_segment_ecn(ms(at), remote().ip(), &seg, mark), Outcome::Accepted);
        drain(c, ms(at))
    };
    // Unmarked: the ACK is delayed.
    assert!(data(&mut c, 2, Flags::ACK, IpEcn::Ect0).is_empty());
    // CE: an ACK at once, with ECE.
    let out = data(&mut c, 3, Flags::ACK, IpEcn::Ce);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].flags, Flags::ACK | Flags::ECE);
    assert!(!out[0].ect, "a pure ACK is not ECN-capable");
    assert_eq!(c.stats().ce_received, 1);
    // Unmarked again: ECE stays on every ACK (the delayed one too).
    assert!(data(&mut c, 4, Flags::ACK, IpEcn::Ect0).is_empty());
    c.handle_timeout(ms(50));
    let out = drain(&mut c, ms(50));
    assert_eq!(out[0].flags, Flags::ACK | Flags::ECE);
    // Our own data carries ECE too, and is ECN-capable.
    c.send(b"reply").unwrap();
    let out = drain(&mut c, ms(50));
    assert!(out[0].flags.contains(Flags::ECE) && !out[0].flags.contains(Flags::CWR));
    assert!(out[0].ect);
    // CWR ends the echo.
    data(&mut c, 60, Flags::ACK | Flags::CWR, IpEcn::Ect0);
    c.handle_timeout(ms(200));
    let out = drain(&mut c, ms(200));
    assert!(!out.is_empty() && out.iter().all(|o| !o.flags.contains(Flags::ECE)), "{out:?}");
    // A CE mark on a connection without ECN is not echoed (and not counted).
    let (mut plain, iss, _) = passive_from(&config, &Segment { flags: Flags::SYN, ..ecn_setup_syn() });
    let seg = Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32, payload: b"x", ..TEMPLATE };
    plain.handle_segment_ecn(ms(2), remote().ip(), &seg, IpEcn::Ce);
    assert!(drain(&mut plain, ms(2)).iter().all(|o| !o.flags.contains(Flags::ECE)));
    assert_eq!(plain.stats().ce_received, 0);
}

#[test]
fn ecn_echo_reduces_cwnd_once_per_window_and_the_next_data_carries_cwr() {
    let (mut c, iss, _) = passive_from(&config(), &ecn_setup_syn());
    c.send(&[7u8; 20 * 1460]).unwrap();
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 10, "the initial window");
    assert!(out.iter().all(|o| o.ect && o.kind == TransmitKind::Data && !o.flags.contains(Flags::CWR)));
    let cwnd = c.stats().cwnd;
    let ack = |n: u32, flags: Flags| Segment { seq: REMOTE_ISN + 1u32, ack: iss + 1u32 + n * 1460, flags, ..TEMPLATE };
    // The first ECE: ssthresh as for a loss, nothing resent, and cwnd walked down by PRR
    // (RFC 6937, Linux's CWR state): at once to what is in flight (nine segments), not
    // grown by the ACK that carried the echo.
    c.handle_segment(ms(12), &ack(1, Flags::ACK | Flags::ECE));
    let reduced = c.stats();
    assert_eq!(reduced.ece_reductions, 1);
    assert!(reduced.cwnd < cwnd, "{} !< {cwnd}", reduced.cwnd);
    assert_eq!(reduced.cwnd, 9 * 1460);
    assert_eq!(reduced.ssthresh, 11 * 1460 * 7 / 10, "CUBIC's beta of 0.7 of cwnd, eleven segments after the ACK");
    // The next new data segment carries CWR, once.
    let out = drain(&mut c, ms(12));
    let new: Vec<_> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    assert!(new.iter().all(|o| o.kind == TransmitKind::Data));
    if let Some((first, rest)) = new.split_first() {
        assert!(first.flags.contains(Flags::CWR));
        assert!(rest.iter().all(|o| !o.flags.contains(Flags::CWR)));
    }
    // More ECEs within the same window, up to and including the ACK of exactly SND.MAX at
    // the reduction (the tenth segment; its ACK still echoes the answered mark, as the CWR
    // rides on data after it): no further reduction.
    for n in 2..=10 {
        c.handle_segment(ms(12 + u64::from(n)), &ack(n, Flags::ACK | Flags::ECE));
    }
    assert_eq!(c.stats().ece_reductions, 1);
    assert_eq!(c.stats().retransmits, 0);
    let out = drain(&mut c, ms(22));
    let new: Vec<_> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    if let Some(first) = new.first() {
        assert!(first.flags.contains(Flags::CWR));
    }
    // The reduction ended with the ACK of SND.MAX at the reduction: cwnd = ssthresh.
    assert_eq!(c.stats().cwnd, reduced.ssthresh);
    // Once SND.UNA passes what was sent at the reduction, an ECE reduces again.
    let past = (c.sequence_space().snd_max - (iss + 1u32)) / 1460;
    assert!(past > 10, "past the initial window, SND.MAX at the reduction");
    c.handle_segment(ms(30), &ack(past, Flags::ACK | Flags::ECE));
    assert_eq!(c.stats().ece_reductions, 2);
    assert_eq!(c.stats().retransmits, 0);
}

#[test]
fn ecn_survives_a_syn_cookie_only_with_timestamps() {
    let syn = Segment {
        options: TcpOptions {
            mss: Some(1460),
            timestamps: Some(Timestamps { tsval: 4000, tsecr: 0 }),
            ..TcpOptions::NONE
        },
        ..ecn_setup_syn()
    };
    let cookie = SeqNum(0xdead_beef);
    let reply = Connection::syn_cookie_reply(&config(), &tuple(), &syn, cookie, ms(1000));
    assert_eq!(reply.flags, Flags::SYN | Flags::ACK | Flags::ECE);
    let tsval = reply.options.timestamps.unwrap().tsval;
    assert!(bypass_tcp::CookieOptions::decode(tsval).unwrap().ecn);
    let ack = Segment {
        options: TcpOptions { timestamps: Some(Timestamps { tsval: 4001, tsecr: tsval }), ..TcpOptions::NONE },
        ..peer(cookie, Flags::ACK, b"")
    };
    let c = Connection::from_syn_cookie(&config(), tuple(), cookie, 1460, &ack, ms(1001));
    assert!(c.stats().ecn);
    // Without timestamps the cookie cannot carry it: a plain SYN-ACK, no ECN.
    let plain = ecn_setup_syn();
    let reply = Connection::syn_cookie_reply(&config(), &tuple(), &plain, cookie, ms(1000));
    assert_eq!(reply.flags, Flags::SYN | Flags::ACK);
    let c = Connection::from_syn_cookie(&config(), tuple(), cookie, 1460, &peer(cookie, Flags::ACK, b""), ms(1001));
    assert!(!c.stats().ecn);
}

// ------------------------------------------------------------------------------------
// A connection built in the place of a used one (`accept_in`, `connect_in`)
// ------------------------------------------------------------------------------------

/// A connection that has lived on another tuple: data sent and unacknowledged (a record in
/// its sent queue, the retransmission timer running), data received and unread, window
/// scaling and SACK negotiated, events waiting, a trace of its states.
fn used() -> Connection {
    let (mut c, iss) = established_passive(&config());
    c.send(b"not acknowledged").unwrap();
    assert_eq!(drain(&mut c, ms(2)).len(), 1);
    c.handle_segment(ms(3), &peer(iss, Flags::ACK, b"not read"));
    c
}

/// What can be seen of `c` at `now`: its state, what it sends, its events, trace, timer and
/// statistics, each formatted.
fn seen(c: &mut Connection, now: Instant) -> String {
    let out = drain(c, now);
    let events = events(c);
    format!(
        "{:?} {out:?} {events:?} {:?} {:?} {:?} {:?}",
        c.state(),
        c.trace(),
        c.poll_timeout(),
        c.stats(),
        c.receive_window()
    )
}

/// Feed `fresh` and `renewed` the same life from the peer, a request and its answer and
/// the close, and check that they are seen alike after each step.
fn same_life(fresh: &mut Connection, renewed: &mut Connection, peer_iss: SeqNum, our_iss: SeqNum, passive: bool) {
    assert_eq!(seen(fresh, ms(10)), seen(renewed, ms(10)));
    let ack = our_iss + 1u32;
    let first = if passive {
        Segment { seq: peer_iss + 1u32, ack, window: 1024, ..TEMPLATE }
    } else {
        let options = TcpOptions { mss: Some(1460), window_scale: Some(7), ..TcpOptions::NONE };
        Segment { seq: peer_iss, ack, flags: Flags::SYN | Flags::ACK, window: 1024, options, ..TEMPLATE }
    };
    let data = Segment { seq: peer_iss + 1u32, ack, payload: b"request", window: 1024, ..TEMPLATE };
    let fin =
        Segment { seq: peer_iss + 8u32, ack: ack + 6u32, flags: Flags::ACK | Flags::FIN, window: 1024, ..TEMPLATE };
    for c in [&mut *fresh, &mut *renewed] {
        c.handle_segment(ms(11), &first);
    }
    assert_eq!(seen(fresh, ms(11)), seen(renewed, ms(11)));
    for c in [&mut *fresh, &mut *renewed] {
        c.handle_segment(ms(12), &data);
        let mut buf = [0u8; 16];
        assert_eq!(c.recv(&mut buf), Ok(7));
        assert_eq!(c.send(b"answer"), Ok(6));
    }
    assert_eq!(seen(fresh, ms(12)), seen(renewed, ms(12)));
    for c in [&mut *fresh, &mut *renewed] {
        c.handle_segment(ms(13), &fin);
        c.close(ms(13));
    }
    assert_eq!(seen(fresh, ms(13)), seen(renewed, ms(13)));
    assert_eq!(fresh.state(), State::LastAck);
}

#[test]
fn a_connection_accepted_in_a_used_place_is_one_accepted_anew() {
    let syn = Segment {
        seq: REMOTE_ISN,
        flags: Flags::SYN,
        options: TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, ..TcpOptions::NONE },
        ..TEMPLATE
    };
    let t = FourTuple { local: local(), remote: "10.0.0.3:40001".parse().unwrap() };
    let mut fresh = Connection::accept(&config(), t, &syn, ms(5)).expect("a SYN is accepted");
    let mut renewed = used();
    assert!(renewed.accept_in(&config(), t, &syn, ms(5), bypass_tcp::Buffers::new(&config())));
    let iss = one(&mut Connection::accept(&config(), t, &syn, ms(5)).unwrap(), ms(5)).seq;
    same_life(&mut fresh, &mut renewed, REMOTE_ISN, iss, true);
    // What is not a SYN for LISTEN is refused in a used place too.
    assert!(!used().accept_in(
        &config(),
        t,
        &Segment { flags: Flags::ACK, ..syn },
        ms(5),
        bypass_tcp::Buffers::new(&config())
    ));
}

#[test]
fn a_connection_opened_in_a_used_place_is_one_opened_anew() {
    let t = FourTuple { local: local(), remote: "10.0.0.3:40001".parse().unwrap() };
    let mut fresh = Connection::connect(&config(), t, ms(5));
    let mut renewed = used();
    renewed.connect_in(&config(), t, ms(5), bypass_tcp::Buffers::new(&config()));
    let iss = one(&mut Connection::connect(&config(), t, ms(5)), ms(5)).seq;
    same_life(&mut fresh, &mut renewed, REMOTE_ISN, iss, false);
}

proptest::proptest! {
    /// An active open built whole in its place (`connect`, through `connect_with`) is the one
    /// built blank in a used place and then started (`connect_in`: `init_send_space`, then
    /// `set_state` to SYN-SENT), for any tuple, time and choice of options: the same SYN
    /// (ISS, options, TSval: the timestamp offset), trace, timer, statistics and window,
    /// and the same after the peer's SYN-ACK.
    #[test]
    fn an_active_open_built_whole_is_one_started_in_a_used_place(
        local_port in 1u16..,
        remote_port in 1u16..,
        remote_host in 1u8..255,
        at in 0u64..(1 << 40),
        timestamps: bool,
        window_scaling: bool,
        sack: bool,
        ecn: bool,
        secret: [u8; 16],
        peer_iss: u32,
    ) {
        let config = Config {
            timestamps,
            window_scaling,
            sack,
            ecn: if ecn { Ecn::Request } else { Ecn::Off },
            isn_secret: secret,
            ..config()
        };
        let t = FourTuple {
            local: SocketAddr::new(local().ip(), local_port),
            remote: SocketAddr::new([10, 0, 0, remote_host].into(), remote_port),
        };
        let now = Instant::from_micros(at);
        let mut fresh = Connection::connect(&config, t, now);
        let mut renewed = used();
        renewed.connect_in(&config, t, now, bypass_tcp::Buffers::new(&config));
        let syn = drain(&mut fresh, now);
        proptest::prop_assert_eq!(format!("{syn:?}"), format!("{:?}", drain(&mut renewed, now)));
        proptest::prop_assert_eq!(seen(&mut fresh, now), seen(&mut renewed, now));
        let tsecr = syn[0].options.timestamps.map_or(0, |ts| ts.tsval);
        let syn_ack = Segment {
            src_port: remote_port,
            dst_port: local_port,
            seq: SeqNum(peer_iss),
            ack: syn[0].seq + 1u32,
            flags: Flags::SYN | Flags::ACK,
            options: TcpOptions {
                mss: Some(1400),
                window_scale: window_scaling.then_some(5),
                sack_permitted: sack,
                timestamps: timestamps.then_some(Timestamps { tsval: 77, tsecr }),
                ..TcpOptions::NONE
            },
            ..TEMPLATE
        };
        let later = now + Duration::from_millis(3);
        for c in [&mut fresh, &mut renewed] {
            c.handle_segment(later, &syn_ack);
        }
        proptest::prop_assert_eq!(seen(&mut fresh, later), seen(&mut renewed, later));
    }
}
