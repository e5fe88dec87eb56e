//! Loss repaired in round trips, not seconds: each row of the table below
//! as a `Pair` run on virtual time, asserting the target and printing the figure.
//!
//! | case | before (NewReno, 1 s RTO floor) | target |
//! |---|---|---|
//! | last of 4 segments lost, 10 ms RTT | 1.015 s (one RTO) | a tail-loss probe (RFC 8985): 2 SRTT, plus a delayed ACK's 200 ms where one segment is left in flight |
//! | 16 segments lost in one window, 8 MiB, 100 ms RTT, 1 Gbit/s | 3.40 s vs 1.18 s lossless | <= 1.2x lossless |
//! | 2% random loss, 20 ms RTT, 100 Mbit/s | 3.5 Mbit/s, 11 RTOs | no RTO for isolated losses; >= Mathis |
//! | 30 s idle, then send | 153 segments back to back | cwnd restarted (RFC 5681 4.1) |

#[path = "common/config.rs"]
mod config;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant};

const MIB: u64 = 1 << 20;
const MS: Duration = Duration::from_millis(1);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn config(seed: u64) -> Config {
    config::seeded(seed)
}

/// Run a one-way transfer of `bytes` from the client and return the virtual time it took,
/// from the first data segment to the last byte read; `drop` may discard client segments.
fn one_way(
    config: &Config,
    link: LinkConfig,
    bytes: u64,
    seed: u64,
    drop: impl FnMut(&bypass_tcp::Segment<'_>) -> bool + 'static,
) -> (Pair, Duration) {
    let mut pair = Pair::new(config, config, link, link, seed);
    pair.run_until(Pair::both_established, Instant::from_millis(10_000));
    let start = pair.now();
    let mut drop = drop;
    pair.set_filter(move |side, seg| side == Side::Client && !seg.payload.is_empty() && drop(seg));
    pair.stream(Side::Client, bytes, false);
    let deadline = start + Duration::from_secs(600);
    assert!(pair.run_until(|p| p.progress(Side::Server).received == bytes, deadline), "{:?}", pair.error());
    let took = pair.now() - start;
    (pair, took)
}

/// Send `n` segments over a 10 ms, 1 Gbit/s path with the last one lost once; return the
/// pair and how long until the receiver has everything.
fn lose_the_last(n: u32) -> (Pair, Duration) {
    let config = config(1);
    let link = LinkConfig::default().with_delay(5 * MS).with_bandwidth(1_000_000_000);
    let seen = Rc::new(Cell::new(0u32));
    let counter = seen.clone();
    let (pair, took) = one_way(&config, link, u64::from(n) * 1448, 1, move |_| {
        counter.set(counter.get() + 1);
        counter.get() == n
    });
    assert!(seen.get() > n, "the lost segment was sent again");
    (pair, took)
}

#[test]
fn a_lost_tail_is_repaired_in_round_trips() {
    init_log();
    let rtt = 10 * MS;
    // The receiver ACKs the first segment at once (its window update after the SYN's
    // unscaled 64 KiB) and then every second one: with an odd number sent, the last ACK
    // leaves two in flight (one held by the receiver's delayed ACK, one lost), and the
    // probe goes out 2 * SRTT later (RFC 8985 7.2); its arrival completes the pair and is
    // ACKed at once. Before: one RTO of 1 s.
    for n in [5, 9] {
        let (pair, took) = lose_the_last(n);
        let stats = pair.client().stats();
        println!(
            "last of {n} lost, 10 ms RTT: done after {took:?} ({} probe, {} timeouts)",
            stats.loss_probes, stats.timeouts
        );
        assert!(took < 4 * rtt, "{n} segments: {took:?}, a tail-loss probe, not a timeout");
        assert_eq!((stats.timeouts, stats.loss_probes), (0, 1));
    }
}

#[test]
fn a_lone_lost_segment_waits_for_a_delayed_ack_then_is_probed() {
    // One segment outstanding: the probe also waits out the receiver's worst-case delayed
    // ACK (RFC 8985 7.2: WCDelAckT, 200 ms), capped at the RTO's expiry, as Linux does
    // (tcp_schedule_loss_probe); a probe still, not a timeout.
    init_log();
    // (With an even number sent, the last ACK leaves the lost one alone in flight too.)
    let (pair, took) = lose_the_last(4);
    let stats = pair.client().stats();
    println!("last of 4 lost, one left in flight, 10 ms RTT: done after {took:?}");
    assert!(took < Duration::from_millis(240), "{took:?}");
    assert_eq!((stats.timeouts, stats.loss_probes), (0, 1));
}

#[test]
fn many_losses_in_one_window_cost_about_one_round_trip() {
    // 8 MiB over 1 Gbit/s with 100 ms of round trip; 16 segments of one window lost.
    init_log();
    let config = Config { send_buffer: 16 * MIB as usize, recv_buffer: 16 * MIB as usize, ..config(2) };
    let link = LinkConfig::default().with_delay(50 * MS).with_bandwidth(1_000_000_000);
    let (_, lossless) = one_way(&config, link, 8 * MIB, 2, |_| false);
    let count = Rc::new(Cell::new(0u32));
    let c = count.clone();
    let (pair, lossy) = one_way(&config, link, 8 * MIB, 2, move |_| {
        // Every other one of the 2001st to 2032nd data segments, once.
        c.set(c.get() + 1);
        (2001..=2032).contains(&c.get()) && c.get() % 2 == 1
    });
    let stats = pair.client().stats();
    let ratio = lossy.as_secs_f64() / lossless.as_secs_f64();
    println!(
        "16 lost in one window, 8 MiB, 100 ms, 1 Gbit/s: {lossy:?} against {lossless:?} lossless ({ratio:.2}x; {} recoveries, {} timeouts, {} retransmissions)",
        stats.fast_retransmits, stats.timeouts, stats.retransmits
    );
    assert_eq!(stats.timeouts, 0, "SACK recovery, not the timer");
    assert_eq!(stats.retransmits, 16, "each lost segment resent once, nothing else");
    assert!(ratio <= 1.2, "{ratio:.2}x the lossless time");
}

#[test]
fn random_loss_is_repaired_without_timeouts_at_the_mathis_rate() {
    // 2% random loss each way on a 20 ms, 100 Mbit/s path, 20 MiB.
    init_log();
    let config = Config { send_buffer: 4 * MIB as usize, recv_buffer: 4 * MIB as usize, ..config(3) };
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000).with_loss(0.02);
    let bytes = 20 * MIB;
    let (pair, took) = one_way(&config, link, bytes, 3, |_| false);
    let stats = pair.client().stats();
    let rate = bytes as f64 * 8.0 / took.as_secs_f64();
    // Mathis et al.: rate <= 1.22 * MSS / (RTT * sqrt(p)), for Reno-like growth, with the
    // round trip the connection measured (the path's 20 ms and the serialisation).
    let mss = f64::from(stats.mss) * 8.0;
    let rtt = stats.srtt.unwrap().as_secs_f64();
    let mathis = 1.22 * mss / (rtt * 0.02f64.sqrt());
    let lost = pair.link(Side::Client).stats().lost;
    println!(
        "2% loss, 20 ms, 100 Mbit/s: {:.1} Mbit/s (Mathis bound {:.1} Mbit/s at SRTT {:.1} ms); {lost} segments lost, {} recoveries, {} timeouts",
        rate / 1e6,
        mathis / 1e6,
        rtt * 1e3,
        stats.fast_retransmits,
        stats.timeouts
    );
    assert!(rate >= mathis, "{:.1} Mbit/s under the Mathis bound of {:.1}", rate / 1e6, mathis / 1e6);
    // Isolated losses are repaired by SACK, RACK and probes; a timeout needs a loss of the
    // repair itself and of its probe, a few per thousand losses at most.
    assert!(stats.timeouts * 100 <= lost, "{} timeouts for {lost} losses", stats.timeouts);
}

#[test]
fn sending_after_an_idle_period_restarts_from_the_initial_window() {
    // A window opened by a first transfer, 30 s of silence, then a second burst: it starts
    // from the restart window, min(IW, cwnd) (RFC 5681 4.1), not with a window's worth.
    init_log();
    let config = Config { send_buffer: 4 * MIB as usize, recv_buffer: 4 * MIB as usize, ..config(4) };
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000);
    let mut pair = Pair::new(&config, &config, link, link, 4);
    pair.run_until(Pair::both_established, Instant::from_millis(10_000));
    pair.stream(Side::Client, 2 * MIB, false);
    assert!(pair.run_until(|p| p.progress(Side::Server).received == 2 * MIB, pair.now() + Duration::from_secs(60)));
    let opened = pair.client().stats().cwnd;
    assert!(opened > 100 * 1448, "the first transfer opened the window to {opened}");
    assert!(pair.run_for(Duration::from_secs(30)));
    let burst_start = pair.now();
    let sent_before = pair.client().stats().segs_out;
    pair.stream(Side::Client, 2 * MIB, false);
    // One round trip later, at most the initial window has gone out in the first flight.
    pair.run_until(|_| false, burst_start + Duration::from_millis(15));
    let first_flight = pair.client().stats().segs_out - sent_before;
    println!("30 s idle, then send: {first_flight} segments in the first round trip (cwnd was {opened})");
    assert!(first_flight <= 10, "{first_flight} segments back to back after the idle period");
}

#[test]
fn autotuning_fills_a_long_fat_path_with_the_default_buffers() {
    // 1 Gbit/s with 100 ms of round trip: a 12.5 MB bandwidth-delay product, fifty times the
    // default 256 KiB buffers. Before autotuning the window bound the transfer at 21 Mbit/s;
    // now both buffers grow with the measured round trips (up to 16 MiB each) and the path is
    // the limit. Measured over seconds 3 to 8, after slow start.
    init_log();
    let config = config(5);
    assert_eq!(config.recv_buffer, 256 * 1024, "the defaults");
    let link = LinkConfig::default().with_delay(50 * MS).with_bandwidth(1_000_000_000);
    let mut pair = Pair::new(&config, &config, link, link, 5);
    pair.stream(Side::Client, 2 << 30, false);
    pair.run_until(|_| false, Instant::from_millis(3000));
    let start = pair.progress(Side::Server).received;
    pair.run_until(|_| false, Instant::from_millis(8000));
    let rate = (pair.progress(Side::Server).received - start) as f64 * 8.0 / 5.0;
    let (client, server) = (pair.client(), pair.server());
    println!(
        "1 Gbit/s x 100 ms, default buffers: {:.0} Mbit/s; buffers grew to {} (sender) and {} (receiver) bytes; cwnd {}",
        rate / 1e6,
        client.buffer_capacity(),
        server.buffer_capacity(),
        client.stats().cwnd
    );
    assert!(rate >= 0.8e9, "{:.0} Mbit/s, under 80% of the path", rate / 1e6);
}

/// One transfer for the pacing comparison: virtual time taken, segments retransmitted.
fn transfer(pacing: bool, link: LinkConfig, bytes: u64) -> (Duration, u64) {
    let config = Config { pacing, ..config(7) };
    let (pair, took) = one_way(&config, link, bytes, 7, |_| false);
    (took, pair.client().stats().retransmits)
}

#[test]
fn pacing_after_slow_start_against_none_on_ten_paths() {
    // The figures behind `Config::pacing`'s default (docs/tcp.md, "Pacing"): the same transfer
    // with and without the pacer, on paths from a LAN to a long fat pipe with a shallow
    // queue. Slow start is never paced (see `pacing.rs`), so the pacer acts on the bursts
    // of congestion avoidance and recovery.
    init_log();
    let path = |one_way_ms: f64, bits: u64, queue_packets: Option<usize>| {
        let link = LinkConfig::default().with_delay(Duration::from_secs_f64(one_way_ms / 1e3)).with_bandwidth(bits);
        queue_packets.map_or(link, |n| link.with_queue_limit(n * 1500))
    };
    let cases = [
        ("10 Gbit/s, 50 us, unbounded queue", path(0.025, 10_000_000_000, None), 64 * MIB),
        ("10 Gbit/s, 50 us, 100-packet queue", path(0.025, 10_000_000_000, Some(100)), 64 * MIB),
        ("1 Gbit/s, 10 ms, 200-packet queue", path(5.0, 1_000_000_000, Some(200)), 64 * MIB),
        ("1 Gbit/s, 100 ms, 100-packet queue", path(50.0, 1_000_000_000, Some(100)), 64 * MIB),
        ("1 Gbit/s, 100 ms, 1000-packet queue", path(50.0, 1_000_000_000, Some(1000)), 64 * MIB),
        ("1 Gbit/s, 100 ms, 4000-packet queue", path(50.0, 1_000_000_000, Some(4000)), 64 * MIB),
        ("100 Mbit/s, 40 ms, 20-packet queue", path(20.0, 100_000_000, Some(20)), 16 * MIB),
        ("100 Mbit/s, 40 ms, 350-packet queue (1 BDP)", path(20.0, 100_000_000, Some(350)), 16 * MIB),
        ("100 Mbit/s, 20 ms, 2% loss", path(10.0, 100_000_000, None).with_loss(0.02), 16 * MIB),
        ("10 Mbit/s, 200 ms, 50-packet queue", path(100.0, 10_000_000, Some(50)), 4 * MIB),
    ];
    println!("| path | unpaced | paced | paced / unpaced |");
    println!("|---|---|---|---|");
    let mut results = Vec::new();
    for (name, link, bytes) in cases {
        let (off, off_rtx) = transfer(false, link, bytes);
        let (on, on_rtx) = transfer(true, link, bytes);
        let ratio = on.as_secs_f64() / off.as_secs_f64();
        println!("| {name} | {off:.2?}, {off_rtx} resent | {on:.2?}, {on_rtx} resent | {ratio:.2} |");
        results.push((name, ratio, off_rtx, on_rtx));
    }
    // On the LAN the rate is far above the link: the pacer never holds a segment back.
    assert_eq!(results[0].1, 1.0, "{}", results[0].0);
    // A long fat path with a shallow queue is where bursts hurt: pacing is faster and
    // loses less.
    let (name, ratio, off_rtx, on_rtx) = results[3];
    assert!(ratio < 0.8 && on_rtx < off_rtx, "{name}: {ratio:.2}, {off_rtx} -> {on_rtx} resent");
}
