//! End to end on the simulated network ([`bypass_tcp::sim`]): a client and a server over
//! impaired links on virtual time, with every byte checked and every close followed to CLOSED.

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, ReadLimit, Side};
use bypass_tcp::{Config, Event, Instant, Segment, SeqNum, State};

const MS: Duration = Duration::from_millis(1);
const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// RFC defaults, except a 200 ms minimum RTO (fast links, short tests) and an ISN secret from
/// `seed`, so that each seed also starts from different sequence numbers.
fn config(seed: u64) -> Config {
    let mut isn_secret = [0; 16];
    isn_secret[..8].copy_from_slice(&seed.to_le_bytes());
    isn_secret[8..].copy_from_slice(&(!seed).rotate_left(17).to_le_bytes());
    Config { min_rto: Duration::from_millis(200), isn_secret, ..Config::default() }
}

/// A clean link with 5 ms of one-way delay.
fn clean() -> LinkConfig {
    LinkConfig::default().with_delay(5 * MS)
}

fn after(pair: &Pair, secs: u64) -> Instant {
    pair.now() + Duration::from_secs(secs)
}

/// Whether RFC 9293 Figure 5 has an arc `from -> to` that needs neither reset nor abort.
fn graceful_step(from: State, to: State) -> bool {
    use State::*;
    matches!(
        (from, to),
        (Closed, Listen | SynSent)
            | (Listen, SynReceived | SynSent)
            | (SynSent, SynReceived | Established)
            | (SynReceived, Established | FinWait1)
            | (Established, FinWait1 | CloseWait)
            | (FinWait1, FinWait2 | Closing | TimeWait)
            | (FinWait2, TimeWait)
            | (CloseWait, LastAck)
            | (Closing, TimeWait)
            | (LastAck, Closed)
            | (TimeWait, Closed)
    )
}

/// Assert that `side` opened and closed gracefully: only arcs of Figure 5, each starting where the
/// last ended, ending in CLOSED from TIME-WAIT or LAST-ACK, with the matching events.
fn assert_closed_gracefully(pair: &Pair, side: Side) {
    let conn = pair.conn(side);
    let trace = conn.trace();
    let path: Vec<String> = trace.iter().map(ToString::to_string).collect();
    assert_eq!(conn.state(), State::Closed, "seed {}: {side} path {path:#?}", pair.seed());
    for t in trace {
        assert!(graceful_step(t.from, t.to), "seed {}: {side} took {t}; path {path:#?}", pair.seed());
    }
    for w in trace.windows(2) {
        assert_eq!(w[0].to, w[1].from, "seed {}: {side} path has a gap: {path:#?}", pair.seed());
    }
    let last = trace.last().expect("a closed connection has transitions");
    assert!(
        matches!(last.from, State::TimeWait | State::LastAck),
        "seed {}: {side} reached CLOSED via {last}",
        pair.seed()
    );
    let events = pair.events(side);
    for expected in [Event::Established, Event::PeerClosed, Event::Closed] {
        assert!(events.contains(&expected), "seed {}: {side} never reported {expected:?}", pair.seed());
    }
    assert!(
        !events.iter().any(|e| matches!(e, Event::Reset | Event::TimedOut)),
        "seed {}: {side} events {events:?}",
        pair.seed()
    );
}

fn visited(pair: &Pair, side: Side, from: State, to: State) -> bool {
    pair.conn(side).trace().iter().any(|t| t.from == from && t.to == to)
}

// --- Bulk transfer over a bad path ---------------------------------------------------------

/// 5 % loss, 10 % reordering (held back 4 ms behind a 5 ms delay), 1 % duplication and 0.1 %
/// corruption, at 100 Mbit/s.
fn lossy() -> LinkConfig {
    LinkConfig {
        delay: 5 * MS,
        bandwidth: Some(100_000_000),
        loss: 0.05,
        reorder: 0.10,
        reorder_delay: 4 * MS,
        duplicate: 0.01,
        corrupt: 0.001,
        queue_limit: usize::MAX,
        ack_coalescing: None,
        ..LinkConfig::default()
    }
}

/// 10 MiB each way over [`lossy`] links: every byte arrives intact and in order, at the rate
/// the loss allows, and both sides close gracefully.
///
/// 5 % loss caps any loss-based TCP far below the link: Mathis et al. give at most
/// 1.22 * MSS / (RTT * sqrt(p)), about 5 Mbit/s here against the link's 100, so the lossless
/// time (under a second) is no yardstick. The data must arrive within twice the time that
/// rate takes; the close (and its TIME-WAIT of 2 MSL) comes after and is not timed.
fn lossy_transfer(seed: u64) {
    init_log();
    let config = config(seed);
    let mut pair = Pair::new(&config, &config, lossy(), lossy(), seed);
    let deadline = after(&pair, 3600);
    let start = pair.now();
    pair.stream(Side::Client, 10 * MIB, true);
    pair.stream(Side::Server, 10 * MIB, true);
    let both =
        |p: &Pair| p.progress(Side::Client).received == 10 * MIB && p.progress(Side::Server).received == 10 * MIB;
    assert!(pair.run_until(both, deadline), "seed {seed}: {:?}", pair.check(deadline));
    let data_time = pair.now() - start;
    // The path's own round trip, 10 ms, the strictest RTT to put in the bound.
    let rtt = 0.010;
    let mss = f64::from(pair.client().stats().mss);
    let mathis = 1.22 * mss / (rtt * 0.05f64.sqrt()); // bytes per second
    let bound = Duration::from_secs_f64(2.0 * (10 * MIB) as f64 / mathis);
    println!("seed {seed}: 10 MiB each way in {data_time:?}, twice the Mathis time {bound:?}");
    assert!(data_time <= bound, "seed {seed}: {data_time:?}, over twice the Mathis time {bound:?}");
    let report = pair.transfer(0, 0, deadline).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(pair.progress(Side::Client).received, 10 * MIB);
    assert_eq!(pair.progress(Side::Server).received, 10 * MIB);
    let mut rejected = 0;
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
        let link = pair.link(side).stats();
        let dir = pair.direction_stats(side);
        assert!(link.lost > 0 && link.reordered > 0 && link.duplicated > 0, "seed {seed}: {side} {link:?}");
        // Every corrupted copy that came out of the link failed its checksum.
        assert!(dir.rejected <= link.corrupted, "seed {seed}: {side} {dir:?} {link:?}");
        rejected += dir.rejected;
    }
    // About 0.1 % of some 40 000 packets: corruption was exercised.
    assert!(rejected > 0, "seed {seed}: no corrupted segment was delivered");
    log::debug!("seed {seed}: {:?} of virtual time", report.elapsed());
}

macro_rules! lossy_seeds {
    ($($name:ident = $seed:expr;)*) => {
        $(
            #[test]
            fn $name() {
                lossy_transfer($seed);
            }
        )*
    };
}

lossy_seeds! {
    lossy_10mib_each_way_seed_00 = 0;
    lossy_10mib_each_way_seed_01 = 1;
    lossy_10mib_each_way_seed_02 = 2;
    lossy_10mib_each_way_seed_03 = 3;
    lossy_10mib_each_way_seed_04 = 4;
    lossy_10mib_each_way_seed_05 = 5;
    lossy_10mib_each_way_seed_06 = 6;
    lossy_10mib_each_way_seed_07 = 7;
    lossy_10mib_each_way_seed_08 = 8;
    lossy_10mib_each_way_seed_09 = 9;
    lossy_10mib_each_way_seed_10 = 10;
    lossy_10mib_each_way_seed_11 = 11;
    lossy_10mib_each_way_seed_12 = 12;
    lossy_10mib_each_way_seed_13 = 13;
    lossy_10mib_each_way_seed_14 = 14;
    lossy_10mib_each_way_seed_15 = 15;
    lossy_10mib_each_way_seed_16 = 16;
    lossy_10mib_each_way_seed_17 = 17;
    lossy_10mib_each_way_seed_18 = 18;
    lossy_10mib_each_way_seed_19 = 19;
}

#[test]
fn same_seed_same_run() {
    init_log();
    let run = || {
        let config = config(77);
        let mut pair = Pair::new(&config, &config, lossy(), lossy(), 77);
        let deadline = after(&pair, 3600);
        let report = pair.transfer(MIB, MIB, deadline).unwrap_or_else(|e| panic!("{e}"));
        let stats = Side::BOTH.map(|s| (pair.link(s).stats(), pair.direction_stats(s), pair.conn(s).stats()));
        (report, stats, pair.events(Side::Client).to_vec(), pair.events(Side::Server).to_vec())
    };
    assert_eq!(run(), run());
}

// --- Handshake with a lost segment (RFC 9293 3.5, 3.8.1) ----------------------------------------

/// Drop the first segment from `from` that `matches`, and check the handshake still completes
/// (after a retransmission timeout of `retransmitter`) and a transfer and close follow.
fn handshake_with_loss(from: Side, retransmitter: Side, matches: fn(&Segment<'_>) -> bool) {
    init_log();
    let config = config(1);
    let mut pair = Pair::new(&config, &config, clean(), clean(), 1);
    pair.drop_next(from, matches);
    let deadline = after(&pair, 30);
    assert!(
        pair.run_until(Pair::both_established, deadline),
        "client {}; server {}; {:?}",
        pair.progress(Side::Client),
        pair.progress(Side::Server),
        pair.error()
    );
    assert_eq!(pair.direction_stats(from).filtered, 1);
    // The initial RTO is 1 s (RFC 6298 2.1): nothing recovers sooner.
    assert!(pair.now() >= Instant::from_millis(1000), "established at {}", pair.now());
    assert!(pair.conn(retransmitter).stats().timeouts >= 1);
    let deadline = after(&pair, 600);
    pair.transfer(64 * KIB, 64 * KIB, deadline).unwrap_or_else(|e| panic!("{e}"));
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

#[test]
fn handshake_survives_lost_syn() {
    handshake_with_loss(Side::Client, Side::Client, |s| s.flags.syn());
}

#[test]
fn handshake_survives_lost_syn_ack() {
    handshake_with_loss(Side::Server, Side::Server, |s| s.flags.syn() && s.flags.ack());
}

#[test]
fn handshake_survives_lost_final_ack() {
    // The client is ESTABLISHED at once; the server retransmits its SYN-ACK and the client's
    // reply completes the handshake.
    handshake_with_loss(Side::Client, Side::Server, |s| !s.flags.syn() && s.flags.ack());
}

// --- Close with a lost segment (RFC 9293 3.6) --------------------------------------------------

#[test]
fn close_survives_lost_fin() {
    init_log();
    let config = config(2);
    let mut pair = Pair::new(&config, &config, clean(), clean(), 2);
    pair.drop_next(Side::Client, |s| s.flags.fin());
    let deadline = after(&pair, 600);
    pair.transfer(64 * KIB, 64 * KIB, deadline).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pair.direction_stats(Side::Client).filtered, 1);
    assert!(pair.client().stats().retransmits >= 1);
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

#[test]
fn close_survives_lost_ack_of_fin() {
    init_log();
    let config = config(3);
    let mut pair = Pair::new(&config, &config, clean(), clean(), 3);
    // Remember where each side's FIN ends; drop the first segment that acknowledges one.
    let mut fin_end: [Option<SeqNum>; 2] = [None, None];
    let mut dropped = false;
    pair.set_filter(move |from, seg| {
        if seg.flags.fin() && fin_end[from as usize].is_none() {
            fin_end[from as usize] = Some(seg.seq + seg.seg_len());
        }
        if !dropped && seg.flags.ack() && fin_end[from.peer() as usize] == Some(seg.ack) {
            dropped = true;
            return true;
        }
        false
    });
    let deadline = after(&pair, 600);
    pair.transfer(64 * KIB, 64 * KIB, deadline).unwrap_or_else(|e| panic!("{e}"));
    let filtered: u64 = Side::BOTH.iter().map(|&s| pair.direction_stats(s).filtered).sum();
    assert_eq!(filtered, 1);
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

// --- Flow control: zero window (RFC 9293 3.8.6.1) ----------------------------------------------

#[test]
fn slow_reader_forces_zero_window_probes() {
    init_log();
    let client = config(4);
    let server = Config { recv_buffer: 16 * KIB as usize, ..config(4) };
    let mut pair = Pair::new(&client, &server, clean(), clean(), 4);
    // 4 KiB a second: the 16 KiB window closes and stays shut longer than the persist timer.
    pair.set_read_limit(Side::Server, Some(ReadLimit { bytes: 4096, every: Duration::from_secs(1) }));
    let deadline = after(&pair, 600);
    let report = pair.transfer(128 * KIB, 0, deadline).unwrap_or_else(|e| panic!("{e}"));
    let probes = pair.client().stats().window_probes;
    log::debug!("{probes} window probes; {:?} of virtual time", report.elapsed());
    assert!(probes > 0, "{:?}", pair.client().stats());
    // (128 - 16) KiB at 4 KiB per second.
    assert!(report.elapsed() >= Duration::from_secs(27), "took {:?}", report.elapsed());
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

// --- Flow control: a small window after a large SYN window (RFC 9293 3.8.6.2.1) --------------

#[test]
fn small_window_after_a_large_syn_window_moves_every_round_trip() {
    init_log();
    // The client's SYN offers 65535 bytes, unscaled (RFC 7323 2.2), with window scale 3; every
    // window after it is clamped to 512 bytes (field 64), as from a Linux peer whose receive
    // buffer shrank before the handshake completed. The RFC's 1 s minimum RTO, as the echo
    // server runs; the client acknowledges every segment, so the window alone sets the pace.
    const WINDOW: u64 = 512;
    const BYTES: u64 = 64 * KIB;
    let server = Config { min_rto: Config::default().min_rto, ..config(12) };
    let client = Config { delayed_ack: None, ..server.clone() };
    let mut pair = Pair::new(&client, &server, clean(), clean(), 12);
    pair.set_window_clamp(Side::Client, Some(WINDOW as u32));
    let deadline = after(&pair, 30);
    assert!(pair.run_until(Pair::both_established, deadline), "{:?}", pair.error());
    let start = pair.now();
    // Both ways at once, the server's half into the small window.
    pair.stream(Side::Client, BYTES, true);
    pair.stream(Side::Server, BYTES, true);
    let deadline = after(&pair, 600);
    let all_read = |p: &Pair| Side::BOTH.iter().all(|&s| p.progress(s).received == BYTES);
    assert!(
        pair.run_until(all_read, deadline),
        "{} / {}; {:?}",
        pair.progress(Side::Client),
        pair.progress(Side::Server),
        pair.error()
    );
    let elapsed = pair.now() - start;
    // One window per 10 ms round trip: 128 of them take 1.28 s. Waiting for a timer before
    // each would take 128 s at the 1 s RTO, 25.6 s at the 200 ms override.
    let round_trips = BYTES.div_ceil(WINDOW) as u32;
    let rtt = 10 * MS;
    log::debug!("{round_trips} windows in {elapsed:?}; server {:?}", pair.server().stats());
    assert!(elapsed >= rtt * (round_trips - 1), "faster than the window allows: {elapsed:?}");
    assert!(
        elapsed <= rtt * round_trips * 3 / 2,
        "{round_trips} windows took {elapsed:?}: {:?}",
        pair.server().stats()
    );
    let stats = pair.server().stats();
    assert_eq!((stats.window_probes, stats.timeouts, stats.retransmits), (0, 0, 0), "{stats:?}");
    let deadline = after(&pair, 600);
    assert!(pair.run_until(Pair::streams_done, deadline), "{:?}", pair.error());
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

// --- Throughput: window scaling on a long fat path (RFC 7323) -----------------------------------

#[test]
fn window_bounds_throughput_on_long_fat_path() {
    init_log();
    // 1 Gbit/s with 100 ms of round trip: the bandwidth-delay product is 12.5 MB, far above the
    // 1 MiB window, so the window and not the link rate bounds throughput, at 1 MiB per round
    // trip: 10_485_760 bytes per virtual second (84 Mbit/s). Without window scaling the window
    // would stop at 64 KiB, a sixteenth of that.
    const WINDOW_BOUND: u64 = 10 * MIB; // bytes per second: 1 MiB / 0.1 s
    const REQUIRED: u64 = WINDOW_BOUND * 8 / 10; // 8_388_608 bytes per second
    let config = Config {
        send_buffer: MIB as usize,
        recv_buffer: MIB as usize,
        send_buffer_max: MIB as usize,
        recv_buffer_max: MIB as usize,
        window_scaling: true,
        ..config(5)
    };
    let link = LinkConfig::default().with_delay(50 * MS).with_bandwidth(1_000_000_000);
    let mut pair = Pair::new(&config, &config, link, link, 5);
    pair.stream(Side::Client, 1 << 30, false); // more than 6 s can carry
    // Measure over seconds 2..6, after slow start has opened the window.
    pair.run_until(|_| false, Instant::from_millis(2000));
    let start = pair.progress(Side::Server).received;
    pair.run_until(|_| false, Instant::from_millis(6000));
    assert!(pair.error().is_none(), "{:?}", pair.error());
    let rate = (pair.progress(Side::Server).received - start) / 4;
    log::debug!("{rate} bytes per virtual second; {:?}", pair.client().stats());
    assert!(rate >= REQUIRED, "{rate} bytes/s, below 80 % of {WINDOW_BOUND}; {:?}", pair.client().stats());
    // A tolerance for the edges of the measuring interval; more than this means the window
    // is not what limits.
    assert!(rate <= WINDOW_BOUND * 105 / 100, "{rate} bytes/s exceeds the window bound {WINDOW_BOUND}");
}

#[test]
fn a_flight_cap_bounds_what_is_in_flight_and_the_data_still_arrives() {
    init_log();
    // A 10 ms round trip at 1 Gbit/s: slow start would put hundreds of segments in flight.
    // The host caps the client's flight at 8 segments: never more in flight, all of it
    // delivered.
    let link = LinkConfig::default().with_delay(5 * MS).with_bandwidth(1_000_000_000);
    let mut pair = Pair::new(&config(31), &config(31), link, link, 31);
    pair.run_until(Pair::both_established, after(&pair, 5));
    let cap = 8 * u32::from(pair.client().stats().mss);
    pair.conn_mut(Side::Client).set_flight_cap(cap);
    let run = |pair: &mut Pair| {
        pair.stream(Side::Client, 4 * MIB, false);
        let mut peak = 0;
        let deadline = after(pair, 60);
        while !pair.streams_done() && pair.now() < deadline && pair.step() {
            peak = peak.max(pair.client().bytes_in_flight());
        }
        pair.check(deadline).unwrap();
        assert!(pair.streams_done(), "4 MiB not delivered by {}", pair.now());
        peak
    };
    let peak = run(&mut pair);
    assert!(peak <= cap, "{peak} bytes in flight, over the cap of {cap}");
    assert!(peak > cap / 2, "only {peak} bytes in flight: the cap should be what limits");
    // Lifted, the windows open past it.
    pair.conn_mut(Side::Client).set_flight_cap(u32::MAX);
    let open = run(&mut pair);
    assert!(open > 4 * cap, "{open} bytes in flight without the cap");
}

// --- Simultaneous open and close (RFC 9293 3.5 Figure 8, 3.6 Figure 13) -------------------------

#[test]
fn simultaneous_open() {
    init_log();
    let config = config(6);
    let mut pair = Pair::new_simultaneous(&config, &config, clean(), clean(), 6);
    let deadline = after(&pair, 30);
    assert!(pair.run_until(Pair::both_established, deadline), "{:?}", pair.error());
    for side in Side::BOTH {
        assert!(visited(&pair, side, State::SynSent, State::SynReceived), "{side}: {:?}", pair.conn(side).trace());
    }
    let deadline = after(&pair, 600);
    pair.transfer(64 * KIB, 64 * KIB, deadline).unwrap_or_else(|e| panic!("{e}"));
    for side in Side::BOTH {
        assert_closed_gracefully(&pair, side);
    }
}

#[test]
fn simultaneous_close() {
    init_log();
    let config = config(7);
    let mut pair = Pair::new(&config, &config, clean(), clean(), 7);
    let deadline = after(&pair, 30);
    assert!(pair.run_until(Pair::both_established, deadline), "{:?}", pair.error());
    // Both FINs leave at the same instant and cross in flight.
    pair.close(Side::Client);
    pair.close(Side::Server);
    let deadline = after(&pair, 600);
    assert!(pair.run_until(Pair::both_closed, deadline), "{:?}", pair.error());
    for side in Side::BOTH {
        assert!(visited(&pair, side, State::FinWait1, State::Closing), "{side}: {:?}", pair.conn(side).trace());
        assert!(visited(&pair, side, State::Closing, State::TimeWait), "{side}: {:?}", pair.conn(side).trace());
        assert_closed_gracefully(&pair, side);
    }
}
