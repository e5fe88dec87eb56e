//! ECN (RFC 3168) on a simulated path: a `Pair` over a link that marks CE above a queue
//! threshold, asserting the sender's response on virtual time and printing the figures.
//!
//! | case | target |
//! |---|---|
//! | 100 Mbit/s x 20 ms, CE above 100 packets of queue | cwnd reduced at most once per window of data, no drop and no retransmission, at least 90 Mbit/s |

#[path = "common/config.rs"]
mod config;

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Ecn, Instant};

const MS: Duration = Duration::from_millis(1);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// A config whose buffers never bind the window on this path, with `ecn`.
fn config(seed: u64, ecn: Ecn) -> Config {
    Config { ecn, ..config::roomy(seed) }
}

#[test]
fn ce_marks_reduce_cwnd_once_per_window_without_loss_and_keep_throughput() {
    init_log();
    // The client asks (tcp_ecn=1), the server accepts by default (tcp_ecn=2).
    let (client, server) = (config(3168, Ecn::Request), config(3168, Ecn::Accept));
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000);
    // A deep queue that never overflows here, marking CE above 100 packets of it.
    let data = link.with_queue_limit(1_500_000).with_ce_threshold(150_000);
    let mut pair = Pair::new(&client, &server, data, link, 3168);
    assert!(pair.run_until(Pair::both_established, Instant::from_millis(1000)));
    assert!(pair.client().stats().ecn && pair.server().stats().ecn, "ECN negotiated both ways");
    pair.stream(Side::Client, 1 << 40, false);
    let start = pair.now();
    let run = Duration::from_secs(10);
    let deadline = start + run;
    // Each reduction, with SND.UNA then and SND.MAX just before the step it came in: the
    // next must come only once SND.UNA has passed this one's SND.MAX (RFC 3168 6.1.2),
    // strictly. (PRR sends on in the step of the reduction, so SND.MAX after it is past
    // the reduction's; the one before it is at most the reduction's, so a next reduction
    // at or below it is early for sure.)
    let mut reductions: Vec<(u64, bypass_tcp::SeqNum, bypass_tcp::SeqNum)> = Vec::new();
    let mut seen = 0u64;
    let mut too_many_at_once = 0u32;
    let mut snd_max_before = pair.client().sequence_space().snd_max;
    pair.run_until(
        |p| {
            let n = p.client().stats().ece_reductions;
            let s = p.client().sequence_space();
            if n > seen {
                if n > seen + 1 {
                    too_many_at_once += 1;
                }
                reductions.push((n, s.snd_una, snd_max_before));
                seen = n;
            }
            snd_max_before = s.snd_max;
            false
        },
        deadline,
    );
    assert!(pair.error().is_none(), "{:?}", pair.error());
    let stats = pair.client().stats();
    let received = pair.progress(Side::Server).received;
    let mbps = received as f64 * 8.0 / run.as_secs_f64() / 1e6;
    let windows = reductions.windows(2).filter(|w| w[1].1.after(w[0].2)).count();
    let early = reductions.windows(2).filter(|w| !w[1].1.after(w[0].2)).count();
    let rtts = run.as_millis() / 20;
    let link_stats = pair.link(Side::Client).stats();
    println!(
        "100 Mbit/s x 20 ms, CE above 100 packets: {} ECE reductions in {rtts} round trips, each in a \
         window of its own ({windows} of {} gaps, {early} early); {} CE marks, {} received by the server, \
         {} drops, {} retransmissions, {mbps:.1} Mbit/s over {} s, cwnd {} segments at the end",
        stats.ece_reductions,
        reductions.len().saturating_sub(1),
        link_stats.ce_marked,
        pair.server().stats().ce_received,
        link_stats.queue_dropped,
        stats.retransmits,
        run.as_secs(),
        stats.cwnd / u32::from(stats.mss),
    );
    assert!(stats.ece_reductions >= 3, "the marks reached the sender");
    assert_eq!(too_many_at_once, 0);
    assert_eq!(early, 0, "at most one reduction per window of data");
    assert!(stats.ece_reductions as u128 <= rtts, "no more reductions than windows");
    assert_eq!(link_stats.queue_dropped, 0);
    assert_eq!(stats.retransmits, 0);
    assert_eq!(stats.fast_retransmits + stats.timeouts, 0);
    assert!(mbps >= 90.0, "throughput kept: {mbps:.1} Mbit/s");
}
