//! Interoperability with smoltcp 0.14: our `Connection` against a smoltcp `Interface` over an
//! in-memory IPv4 link on virtual time (see `common/smol.rs` for the driver).
//!
//! Every scenario runs in both roles: our client against a smoltcp server, and a smoltcp
//! client against our server. Our side must end CLOSED (TIME-WAIT included, with a short MSL);
//! smoltcp's must end CLOSED or in TIME-WAIT (it holds TIME-WAIT for a fixed 10 s).
//!
//! The last section holds minimal reproductions of bugs in our connection that smoltcp
//! exposed (and one the send-path benchmark found), kept as regression tests.

#[path = "common/smol.rs"]
mod smol;

use std::time::Duration;

use bypass_tcp::sim::{Link, LinkConfig};
use bypass_tcp::{Config, Connection, Flags, Instant, Segment, SeqNum, State, TcpOptions, TransmitKind};
use smol::{App, CLIENT, CloseWhen, Host, Net, OurHost, SERVER, SmolHost, random_bytes};
use smoltcp::socket::tcp;

const MIB: usize = 1 << 20;

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn config() -> Config {
    Config {
        isn_secret: *b"smoltcp-interop!",
        min_rto: Duration::from_millis(200),
        // TIME-WAIT (2 MSL) outlasts smoltcp's retransmission of a FIN whose ACK was lost
        // (its RTO reaches seconds on the lossy link), as a real MSL of 30 s does; shorter,
        // the retransmitted FIN would meet CLOSED and a reset. Virtual time: no cost.
        msl: Duration::from_secs(5),
        ..Config::default()
    }
}

fn secs(n: u64) -> Instant {
    Instant::from_millis(n * 1000)
}

/// A perfect link: 1 ms each way.
fn perfect() -> LinkConfig {
    LinkConfig::default()
}

/// 5 ms each way, 2% loss.
fn lossy() -> LinkConfig {
    LinkConfig::default().with_delay(Duration::from_millis(5)).with_loss(0.02)
}

/// Our client, a smoltcp server.
fn ours_client(link: LinkConfig, seed: u64, client_app: App, server_app: App) -> Net<OurHost, SmolHost> {
    let client = OurHost::client(&config(), CLIENT, SERVER, Instant::ZERO);
    let server = SmolHost::server(SERVER, seed);
    Net::new(client, server, Link::new(link, seed * 2), Link::new(link, seed * 2 + 1), client_app, server_app)
}

/// A smoltcp client, our server.
fn smol_client(link: LinkConfig, seed: u64, client_app: App, server_app: App) -> Net<SmolHost, OurHost> {
    let client = SmolHost::client(CLIENT, SERVER, seed);
    let server = OurHost::server(&config(), SERVER);
    Net::new(client, server, Link::new(link, seed * 2), Link::new(link, seed * 2 + 1), client_app, server_app)
}

fn run<C: Host, S: Host>(net: &mut Net<C, S>, deadline: Instant) {
    if let Err(report) = net.run(deadline) {
        panic!("{report}");
    }
}

/// Check what every run must satisfy at the end: no resets either way, nothing dropped as
/// malformed, and our connection CLOSED.
fn check_clean(net_report: impl Fn(&str) -> String, ours: &OurHost) {
    assert_eq!(ours.conn.state(), State::Closed, "{}", net_report("ours is not CLOSED"));
    assert_eq!((ours.rst_in, ours.rst_out), (0, 0), "{}", net_report("resets were exchanged"));
    assert_eq!(ours.rejected, 0, "{}", net_report("ours rejected packets"));
    assert!(ours.events.contains(&bypass_tcp::Event::Closed), "{}", net_report("no Closed event"));
}

fn went_through(ours: &OurHost, state: State) -> bool {
    ours.conn.trace().iter().any(|t| t.to == state)
}

// ------------------------------------------------------------------------------------
// Handshake
// ------------------------------------------------------------------------------------

/// Run until both sides are synchronized, then check what the handshake negotiated:
/// MSS 1460 (smoltcp's, from the 1500-byte MTU) and window scaling both ways.
fn check_handshake<C: Host, S: Host>(net: &mut Net<C, S>, ours: impl Fn(&Net<C, S>) -> &OurHost) {
    init_log();
    let done = |n: &Net<C, S>| n.client.is_synchronized() && n.server.is_synchronized();
    if let Err(report) = net.run_until(done, secs(5)) {
        panic!("{report}");
    }
    // Let the last ACK land.
    let later = net.now + Duration::from_millis(10);
    if let Err(report) = net.run_until(|n| n.now >= later, later) {
        panic!("{report}");
    }
    let ours = ours(net);
    let report = net.report("handshake");
    assert_eq!(ours.conn.state(), State::Established, "{report}");
    assert_eq!(ours.conn.stats().mss, 1460, "{report}");
    let space = ours.conn.sequence_space();
    // 256 KiB buffers both sides: smoltcp shifts by (bits in 2^18) - 16 = 3; we by the
    // smallest shift that lets 65535 << shift cover what autotuning may grow our buffer to,
    // 16 MiB: 9.
    assert_eq!((space.snd_wscale, space.rcv_wscale), (3, 9), "{report}");
    assert_eq!(ours.conn.stats().segs_dropped, 0, "{report}");
    assert_eq!((ours.rst_in, ours.rst_out, ours.rejected), (0, 0, 0), "{report}");
}

#[test]
fn handshake_ours_client() {
    let mut net = ours_client(perfect(), 1, App::echo(Vec::new()), App::echo(Vec::new()));
    check_handshake(&mut net, |n| &n.client);
    assert_eq!(net.server.state(), tcp::State::Established);
}

#[test]
fn handshake_smoltcp_client() {
    let mut net = smol_client(perfect(), 2, App::echo(Vec::new()), App::echo(Vec::new()));
    check_handshake(&mut net, |n| &n.server);
    assert_eq!(net.client.state(), tcp::State::Established);
}

// ------------------------------------------------------------------------------------
// 1 MiB echo
// ------------------------------------------------------------------------------------

/// The client sends `data` and expects it back, then closes; the server echoes and closes
/// after the client.
fn echo_apps(data: &[u8]) -> (App, App) {
    (App::new(data.to_vec(), data.to_vec(), CloseWhen::Done), App::echo(data.to_vec()))
}

#[test]
fn echo_1mib_ours_client() {
    init_log();
    let data = random_bytes(11, MIB);
    let (client_app, server_app) = echo_apps(&data);
    let mut net = ours_client(perfect(), 3, client_app, server_app);
    run(&mut net, secs(60));
    check_clean(|why| net.report(why), &net.client);
    assert_eq!(net.client.conn.stats().retransmits, 0, "{}", net.report("retransmits on a perfect link"));
    assert_eq!(net.client_app.received, MIB);
}

#[test]
fn echo_1mib_smoltcp_client() {
    init_log();
    let data = random_bytes(12, MIB);
    let (client_app, server_app) = echo_apps(&data);
    let mut net = smol_client(perfect(), 4, client_app, server_app);
    run(&mut net, secs(60));
    check_clean(|why| net.report(why), &net.server);
    assert_eq!(net.server.conn.stats().retransmits, 0, "{}", net.report("retransmits on a perfect link"));
    assert_eq!(net.client_app.received, MIB);
}

#[test]
fn echo_1mib_lossy_ours_client() {
    init_log();
    let data = random_bytes(13, MIB);
    let (client_app, server_app) = echo_apps(&data);
    let mut net = ours_client(lossy(), 5, client_app, server_app);
    run(&mut net, secs(600));
    check_clean(|why| net.report(why), &net.client);
    assert!(net.to_server.stats().lost > 0 && net.to_client.stats().lost > 0);
    assert_eq!(net.client_app.received, MIB);
}

#[test]
fn echo_1mib_lossy_smoltcp_client() {
    init_log();
    let data = random_bytes(14, MIB);
    let (client_app, server_app) = echo_apps(&data);
    let mut net = smol_client(lossy(), 6, client_app, server_app);
    run(&mut net, secs(600));
    check_clean(|why| net.report(why), &net.server);
    assert!(net.to_server.stats().lost > 0 && net.to_client.stats().lost > 0);
    assert_eq!(net.client_app.received, MIB);
}

// ------------------------------------------------------------------------------------
// Close
// ------------------------------------------------------------------------------------

/// The client sends 10 KB and closes; the server reads them and closes on end of stream.
fn client_closes_first() -> (App, App) {
    let data = random_bytes(21, 10_000);
    (App::new(data.clone(), Vec::new(), CloseWhen::Done), App::new(Vec::new(), data, CloseWhen::PeerClosed))
}

/// The server sends 10 KB and closes; the client reads them and closes on end of stream.
fn server_closes_first() -> (App, App) {
    let data = random_bytes(22, 10_000);
    (App::new(Vec::new(), data.clone(), CloseWhen::PeerClosed), App::new(data, Vec::new(), CloseWhen::Done))
}

#[test]
fn close_client_first_ours_client() {
    init_log();
    let (c, s) = client_closes_first();
    let mut net = ours_client(perfect(), 7, c, s);
    run(&mut net, secs(30));
    check_clean(|why| net.report(why), &net.client);
    // We closed first: FIN-WAIT-1, FIN-WAIT-2 or CLOSING, TIME-WAIT; smoltcp went through
    // LAST-ACK to CLOSED.
    assert!(went_through(&net.client, State::FinWait1), "{}", net.report("no FIN-WAIT-1"));
    assert!(went_through(&net.client, State::TimeWait), "{}", net.report("no TIME-WAIT"));
    assert_eq!(net.server.state(), tcp::State::Closed, "{}", net.report("smoltcp not CLOSED"));
}

#[test]
fn close_client_first_smoltcp_client() {
    init_log();
    let (c, s) = client_closes_first();
    let mut net = smol_client(perfect(), 8, c, s);
    run(&mut net, secs(30));
    check_clean(|why| net.report(why), &net.server);
    assert!(went_through(&net.server, State::CloseWait), "{}", net.report("no CLOSE-WAIT"));
    assert!(went_through(&net.server, State::LastAck), "{}", net.report("no LAST-ACK"));
    assert_eq!(net.client.state(), tcp::State::TimeWait, "{}", net.report("smoltcp not in TIME-WAIT"));
}

#[test]
fn close_server_first_ours_client() {
    init_log();
    let (c, s) = server_closes_first();
    let mut net = ours_client(perfect(), 9, c, s);
    run(&mut net, secs(30));
    check_clean(|why| net.report(why), &net.client);
    assert!(went_through(&net.client, State::CloseWait), "{}", net.report("no CLOSE-WAIT"));
    assert!(went_through(&net.client, State::LastAck), "{}", net.report("no LAST-ACK"));
    assert_eq!(net.server.state(), tcp::State::TimeWait, "{}", net.report("smoltcp not in TIME-WAIT"));
}

#[test]
fn close_server_first_smoltcp_client() {
    init_log();
    let (c, s) = server_closes_first();
    let mut net = smol_client(perfect(), 10, c, s);
    run(&mut net, secs(30));
    check_clean(|why| net.report(why), &net.server);
    assert!(went_through(&net.server, State::FinWait1), "{}", net.report("no FIN-WAIT-1"));
    assert!(went_through(&net.server, State::TimeWait), "{}", net.report("no TIME-WAIT"));
    assert_eq!(net.client.state(), tcp::State::Closed, "{}", net.report("smoltcp not CLOSED"));
}

// ------------------------------------------------------------------------------------
// Regressions: bugs smoltcp exposed in our connection, now fixed
// ------------------------------------------------------------------------------------
//
// A retransmission from SND.UNA (`retransmit_una` in connection/output.rs, after an RTO) takes
// `min(queued, SMSS)` bytes: past SND.MAX when more data waits, and past the peer's
// window. `send_from` counts it as a retransmission because it starts before SND.MAX, so
// SND.MAX stays put while SND.NXT moves past it. The same happens when data resent
// after an RTO is cut into different segments and the last one crosses SND.MAX. Then:
//
// 1. The peer's ACK for the new bytes is above SND.MAX, which is our RFC 9293 SND.NXT:
//    3.10.7.4 fifth step ("If the ACK acks something not yet sent ... send an ACK, drop
//    the segment") and RFC 5961 5.2 drop it, and every later ACK too: the connection
//    stalls until the user timeout. Fix: advance SND.MAX whenever a segment ends past it.
// 2. Bytes beyond SND.UNA + SND.WND break RFC 9293 3.8.6 and RFC 5681 3.1 (at most
//    min(cwnd, rwnd) outstanding). Our later ACKs (SEQ = SND.MAX) then lie past the
//    peer's right edge and fail its acceptability test once its window is zero
//    (RFC 9293 3.10.7.4: SEG.LEN = 0, RCV.WND = 0 needs SEG.SEQ = RCV.NXT); smoltcp drops
//    them, never learns we have its data, and both sides deadlock. Fix: cap the
//    retransmission at the peer's window.

const PEER_ISN: SeqNum = SeqNum(0x1000_0000);

/// What the peer sends: ports filled, no options.
const PEER: Segment<'static> = Segment { src_port: 40000, dst_port: 80, flags: Flags::ACK, ..Segment::EMPTY };

/// Passive open with a peer that offers MSS 1460, no window scaling and `window`; return
/// the ESTABLISHED connection and our ISS.
fn established(config: &Config, window: u16) -> (Connection, SeqNum) {
    let mut c = Connection::listen(config, SERVER);
    let options = TcpOptions { mss: Some(1460), ..TcpOptions::NONE };
    let syn = Segment { seq: PEER_ISN, flags: Flags::SYN, window, options, ..PEER };
    c.handle_segment_from(Instant::ZERO, CLIENT.ip(), &syn);
    let mut buf = [0u8; 2048];
    let t = c.poll_transmit(Instant::ZERO, &mut buf).expect("SYN-ACK");
    let iss = t.seq;
    let ms1 = Instant::from_millis(1);
    c.handle_segment(ms1, &Segment { seq: PEER_ISN + 1u32, ack: iss + 1u32, window, ..PEER });
    assert_eq!(c.state(), State::Established);
    (c, iss)
}

/// Drain `poll_transmit`: (kind, seq, payload length) of each segment.
fn transmit(c: &mut Connection, now: Instant) -> Vec<(TransmitKind, SeqNum, usize)> {
    let mut buf = [0u8; 2048];
    std::iter::from_fn(|| c.poll_transmit(now, &mut buf).map(|t| (t.kind, t.seq, t.payload_len))).collect()
}

/// Fire the retransmission timer; return when, and what it sent.
fn fire_rto(c: &mut Connection) -> (Instant, Vec<(TransmitKind, SeqNum, usize)>) {
    let at = c.poll_timeout().expect("the retransmission timer runs");
    c.handle_timeout(at);
    (at, transmit(c, at))
}

/// Bug 1, minimal: Nagle holds 200 bytes behind 100 in flight; the RTO resends from
/// SND.UNA, and the peer's ACK of everything sent must then be taken (it was once dropped
/// as acknowledging something not yet sent, when a resend from SND.UNA took the held bytes
/// along). The RTO now resends the segment that was lost, as it was sent; the held bytes
/// follow once it is acknowledged.
#[test]
fn ack_of_retransmission_past_snd_max_is_accepted() {
    let config = Config { delayed_ack: None, ..config() };
    let (mut c, iss) = established(&config, 65535);
    assert_eq!(c.send(&[1; 100]), Ok(100));
    assert_eq!(transmit(&mut c, Instant::from_millis(2)), vec![(TransmitKind::Data, iss + 1u32, 100)]);
    assert_eq!(c.send(&[2; 200]), Ok(200));
    assert_eq!(transmit(&mut c, Instant::from_millis(2)), vec![], "Nagle holds the small segment");
    let (at, resent) = fire_rto(&mut c);
    assert_eq!(resent, vec![(TransmitKind::Retransmission, iss + 1u32, 100)]);
    let dropped = c.stats().segs_dropped;
    let later = at + Duration::from_millis(1);
    c.handle_segment(later, &Segment { seq: PEER_ISN + 1u32, ack: iss + 101u32, window: 65535, ..PEER });
    assert_eq!(transmit(&mut c, later), vec![(TransmitKind::Data, iss + 101u32, 200)]);
    c.handle_segment(later, &Segment { seq: PEER_ISN + 1u32, ack: iss + 301u32, window: 65535, ..PEER });
    assert_eq!(c.stats().segs_dropped, dropped, "the ACK of bytes we sent was dropped");
    assert_eq!(c.sequence_space().snd_una, iss + 301u32);
    assert_eq!(c.send_queued(), 0);
}

/// Bug 2, minimal: the peer offers 600 bytes; 600 are in flight and 424 wait. The RTO
/// resends 1024 bytes from SND.UNA, 424 past the peer's right edge.
#[test]
fn rto_retransmission_stays_in_peer_window() {
    let config = Config { delayed_ack: None, ..config() };
    let (mut c, iss) = established(&config, 600);
    assert_eq!(c.send(&[7; 1024]), Ok(1024));
    assert_eq!(transmit(&mut c, Instant::from_millis(2)), vec![(TransmitKind::Data, iss + 1u32, 600)]);
    let (_, resent) = fire_rto(&mut c);
    assert_eq!(resent.len(), 1, "{resent:?}");
    let (kind, seq, len) = resent[0];
    assert_eq!((kind, seq), (TransmitKind::Retransmission, iss + 1u32));
    assert!(len <= 600, "retransmitted {len} bytes into a 600-byte window");
    assert!(!c.sequence_space().snd_nxt.after(iss + 601u32), "SND.NXT past the peer's right edge");
}

/// After an RTO, SND.NXT is rewound to SND.UNA for go-back-N; our ACKs must still carry
/// the highest sequence number sent, or a peer that already has the data drops them as
/// below RCV.NXT (smoltcp does, and it rewinds too, so both sides deadlocked). Here the
/// peer has all 4380 bytes, its ACKs were lost, and it repeats an old segment; our answer
/// carries SEQ = iss + 4381 (RFC 9293 3.10.7.4, "<SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>").
#[test]
fn ack_after_rto_carries_highest_sequence_sent() {
    let config = Config { delayed_ack: None, ..config() };
    let (mut c, iss) = established(&config, 65535);
    let hello = Segment { seq: PEER_ISN + 1u32, ack: iss + 1u32, window: 65535, payload: &[9; 100], ..PEER };
    c.handle_segment(Instant::from_millis(2), &hello);
    assert_eq!(transmit(&mut c, Instant::from_millis(2)), vec![(TransmitKind::Ack, iss + 1u32, 0)]);
    assert_eq!(c.send(&[1; 4380]), Ok(4380));
    assert_eq!(transmit(&mut c, Instant::from_millis(3)).len(), 3);
    let (at, resent) = fire_rto(&mut c);
    assert_eq!(resent, vec![(TransmitKind::Retransmission, iss + 1u32, 1460)]);
    // The peer, holding all 4380 bytes, repeats its old segment with its current ACK.
    let old = Segment { ack: iss + 4381u32, ..hello };
    c.handle_segment(at + Duration::from_millis(1), &old);
    let acks = transmit(&mut c, at + Duration::from_millis(1));
    assert_eq!(acks, vec![(TransmitKind::Ack, iss + 4381u32, 0)], "our ACK is below the peer's RCV.NXT");
}

/// Both bugs against smoltcp: its 600-byte socket buffers keep the window small, 5% loss
/// makes RTOs; our client stalls on dropped ACKs (bug 1) or deadlocks with smoltcp's zero
/// window (bug 2) and times out.
#[test]
fn echo_lossy_small_smoltcp_window_ours_client() {
    init_log();
    let data = random_bytes(0, 100_000);
    let (client_app, server_app) = echo_apps(&data);
    let link = LinkConfig::default().with_delay(Duration::from_millis(5)).with_loss(0.05);
    let client = OurHost::client(&config(), CLIENT, SERVER, Instant::ZERO);
    let server = SmolHost::server_with_buffers(SERVER, 0, 600);
    let mut net = Net::new(client, server, Link::new(link, 100), Link::new(link, 101), client_app, server_app);
    run(&mut net, secs(900));
    check_clean(|why| net.report(why), &net.client);
}

/// Bug 1 against smoltcp with ordinary 256 KiB buffers and 10% loss: after an RTO our
/// go-back-N resends over data first sent in other pieces; a piece crosses SND.MAX and
/// smoltcp's ACK of it is dropped from then on, until our user timeout.
#[test]
fn echo_lossy_resegmented_retransmission_smoltcp_client() {
    init_log();
    let data = random_bytes(4, 256 * 1024);
    let (client_app, server_app) = echo_apps(&data);
    let link = LinkConfig::default().with_delay(Duration::from_millis(5)).with_loss(0.10);
    let client = SmolHost::client(CLIENT, SERVER, 4);
    let server = OurHost::server(&config(), SERVER);
    let mut net = Net::new(client, server, Link::new(link, 108), Link::new(link, 109), client_app, server_app);
    run(&mut net, secs(900));
    check_clean(|why| net.report(why), &net.server);
}

// Found by the send-path benchmark rather than by smoltcp: `Connection::syn_acked`
// (connection/mod.rs) is `snd_una.after(iss)`, a modular comparison that turns false once
// SND.UNA is more than 2^31 past the ISS. From 2 GiB sent until 4 GiB, `send_new`
// (connection/output.rs) refuses to send ("SYN not acknowledged"), an RTO neither resends data nor
// uses the data retry limit (connection/timeouts.rs), and every new ACK is counted one byte short
// (connection/input.rs `on_new_ack`). A bulk sender stops dead after 2 GiB.

/// Send 2 GiB and a bit through one connection (65000-byte segments keep it quick), every
/// segment acknowledged at once; it must keep sending past 2^31 bytes.
#[test]
fn sending_past_2_gib_keeps_going() {
    const MSS: u16 = 65000;
    let config = Config { mss: MSS, send_buffer: 1 << 20, delayed_ack: None, ..config() };
    let mut c = Connection::listen(&config, SERVER);
    let options = TcpOptions { mss: Some(MSS), window_scale: Some(14), ..TcpOptions::NONE };
    let syn = Segment { seq: PEER_ISN, flags: Flags::SYN, window: 65535, options, ..PEER };
    c.handle_segment_from(Instant::ZERO, CLIENT.ip(), &syn);
    let mut buf = vec![0u8; 1 << 17];
    let iss = c.poll_transmit(Instant::ZERO, &mut buf).expect("SYN-ACK").seq;
    let ack = |n: SeqNum| Segment { seq: PEER_ISN + 1u32, ack: n, window: 65535, ..PEER };
    c.handle_segment(Instant::from_millis(1), &ack(iss + 1u32));
    let chunk = vec![0x5a; 1 << 16];
    let mut now = Instant::from_millis(2);
    let mut sent: u64 = 0;
    while sent < (1 << 31) + (1 << 20) {
        while c.send_capacity() > 0 {
            c.send(&chunk[..c.send_capacity().min(chunk.len())]).expect("room");
        }
        let Some(t) = c.poll_transmit(now, &mut buf) else {
            panic!("stopped sending after {sent} bytes: {:?}", c.sequence_space());
        };
        sent += t.payload_len as u64;
        c.handle_segment(now, &ack(t.seq + t.payload_len));
        now += Duration::from_micros(10);
    }
    assert_eq!(c.sequence_space().snd_una, iss + 1u32 + (sent as u32));
}
