//! Slow start on real paths: each row as a `Pair` run on virtual time, asserting the target
//! and printing the figure.
//!
//! | case | before | target |
//! |---|---|---|
//! | 100 Mbit/s x 20 ms, 1000-packet queue | exit by loss: cwnd 2,327 segments against a BDP of 173, 1,185 drops | HyStart++ (RFC 9406) exits with fewer than 100 drops |
//! | 1 Gbit/s x 50 ms, ACKs merged per 0.25 ms | 47 Mbit/s over the first 2 s | at least 600 Mbit/s (Linux credits every byte an ACK covers) |

use std::time::Duration;

use bypass_tcp::sim::{Framing, LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant};

const MIB: usize = 1 << 20;
const MS: Duration = Duration::from_millis(1);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// A config whose buffers never bind the window on these paths.
fn config(seed: u64) -> Config {
    let mut secret = [0u8; 16];
    secret[..8].copy_from_slice(&seed.to_le_bytes());
    Config {
        isn_secret: secret,
        send_buffer: 16 * MIB,
        recv_buffer: 16 * MIB,
        send_buffer_max: 32 * MIB,
        recv_buffer_max: 32 * MIB,
        ..Config::default()
    }
}

#[test]
fn hystart_leaves_slow_start_before_a_deep_queue_overflows() {
    // 100 Mbit/s x 20 ms: a BDP of 250 kB, 173 segments of 1448 bytes; the bottleneck queue
    // holds 1000 packets (1.5 MB, six BDPs). HyStart++ needs N_RTT_SAMPLE = 8 samples a
    // round, one per ACK: slow start must end on the queue's delay, not on its overflow.
    init_log();
    let config = config(29);
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000);
    let data = link.with_queue_limit(1_500_000);
    let mut pair = Pair::new(&config, &config, data, link, 29);
    pair.run_until(Pair::both_established, Instant::from_millis(1000));
    pair.stream(Side::Client, 1 << 30, false);
    let deadline = pair.now() + Duration::from_secs(20);
    assert!(pair.run_until(|p| p.client().stats().ssthresh != u32::MAX, deadline), "slow start never ended");
    let stats = pair.client().stats();
    let mss = u32::from(stats.mss);
    let bdp = 100_000_000 / 8 * 20 / 1000 / mss;
    let exit_at = pair.now();
    let at_exit = pair.link(Side::Client).stats().queue_dropped;
    // The segments already in flight at the exit may still meet a full queue: count them too.
    pair.run_for(Duration::from_secs(1));
    let drops = pair.link(Side::Client).stats().queue_dropped;
    println!(
        "100 Mbit/s x 20 ms, 1000-packet queue: slow start ended at {exit_at} with cwnd {} segments \
         (ssthresh {}), BDP {bdp} segments; {at_exit} drops by then, {drops} a second later; \
         {} fast retransmits and {} timeouts before the exit",
        stats.cwnd / mss,
        stats.ssthresh / mss,
        stats.fast_retransmits,
        stats.timeouts
    );
    assert_eq!((stats.fast_retransmits, stats.timeouts), (0, 0), "slow start ended by loss, not by HyStart++");
    assert!(drops < 100, "{drops} drops");
    assert!(stats.cwnd / mss < 1000 + bdp, "cwnd {} segments: past what the path and queue hold", stats.cwnd / mss);
}

#[test]
fn stretch_acks_do_not_throttle_slow_start() {
    // 1 Gbit/s x 50 ms with the receiver's ACKs merged per 0.25 ms (GRO, DOCSIS ACK thinning):
    // each ACK the sender sees covers up to about 21 segments. Slow start credits all the
    // bytes it covers, as Linux's tcp_slow_start does, so the ramp takes as many round trips
    // as with an ACK per segment.
    init_log();
    let config = config(30);
    let data = LinkConfig::default().with_delay(25 * MS).with_bandwidth(1_000_000_000);
    let acks = data.with_ack_coalescing(Duration::from_micros(250), Framing::Tcp);
    let mut pair = Pair::new(&config, &config, data, acks, 30);
    pair.run_until(Pair::both_established, Instant::from_millis(1000));
    let start = pair.now();
    pair.stream(Side::Client, 1 << 30, false);
    pair.run_until(|_| false, start + Duration::from_secs(2));
    let rate = pair.progress(Side::Server).received as f64 * 8.0 / 2.0;
    let merged = pair.link(Side::Server).stats().acks_merged;
    let stats = pair.client().stats();
    println!(
        "1 Gbit/s x 50 ms, ACKs merged per 0.25 ms: {:.0} Mbit/s over the first 2 s; {merged} ACKs merged; \
         cwnd {} segments, {} retransmits",
        rate / 1e6,
        stats.cwnd / u32::from(stats.mss),
        stats.retransmits
    );
    assert!(merged > 1000, "the ACKs were coalesced: {merged} merged");
    assert!(rate >= 600e6, "{:.0} Mbit/s over the first 2 s", rate / 1e6);
}
