//! D-SACKs undo a reduction only for ranges we retransmitted (RFC 2883 section 5, RFC
//! 3708; Linux's `tcp_dsack_seen` and `undo_retrans`). A network that duplicates packets
//! sends D-SACKs for data sent once: these must not cancel the response to real queue
//! drops.
//!
//! | case | before | after | target |
//! |---|---|---|---|
//! | 100 Mbit/s x 20 ms, 1-BDP queue, 60 s, 1% duplication | 1,792 queue drops against 165 without (the run: 2,178 against 102) | 175 against 165 | at most 2x the drops without duplication |

#[path = "common/config.rs"]
mod config;

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant};

const MS: Duration = Duration::from_millis(1);

fn config(seed: u64) -> Config {
    config::seeded(seed)
}

/// Run a bulk transfer from the client for `secs` of virtual time over 100 Mbit/s x 20 ms
/// with a queue of one BDP (about 172 packets), duplicating `duplicate` of the packets both
/// ways; return the queue drops and the megabits per second delivered.
fn bulk(duplicate: f64, secs: u64) -> (u64, f64, u64) {
    let bdp_packets = 100_000_000 / 8 * 20 / 1000 / 1448;
    let link = LinkConfig::default()
        .with_delay(10 * MS)
        .with_bandwidth(100_000_000)
        .with_queue_limit(bdp_packets * 1500)
        .with_duplicate(duplicate);
    let config = config(3);
    let mut pair = Pair::new(&config, &config, link, link, 3);
    pair.run_until(Pair::both_established, Instant::from_millis(10_000));
    pair.stream(Side::Client, 1 << 40, false);
    let start = pair.progress(Side::Server).received;
    pair.run_for(Duration::from_secs(secs));
    let received = pair.progress(Side::Server).received - start;
    let drops = pair.link(Side::Client).stats().queue_dropped;
    let duplicated = pair.link(Side::Client).stats().duplicated + pair.link(Side::Server).stats().duplicated;
    (drops, received as f64 * 8.0 / secs as f64 / 1e6, duplicated)
}

#[test]
fn duplication_does_not_undo_the_response_to_queue_drops() {
    let secs = 60;
    let (drops, rate, _) = bulk(0.0, secs);
    let (dup_drops, dup_rate, duplicated) = bulk(0.01, secs);
    println!(
        "100 Mbit/s x 20 ms, 1-BDP queue, {secs} s: {drops} queue drops ({rate:.1} Mbit/s) without duplication, \
         {dup_drops} ({dup_rate:.1} Mbit/s) with 1% ({duplicated} packets duplicated)"
    );
    assert!(drops > 0, "the queue overflows at all");
    assert!(dup_drops <= 2 * drops, "{dup_drops} drops with duplication against {drops} without");
}
