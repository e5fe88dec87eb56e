//! Reordering without SACK is survivable: once a retransmission proves needless (its ACK
//! came sooner than a round trip after it, so the original was delivered), the reduction
//! is undone and the duplicate-ACK threshold rises to the reordering seen (Linux's
//! `tp->reordering`, `tcp_check_sack_reordering`, `tcp_try_undo_partial`).
//!
//! | case | before | after | target |
//! |---|---|---|---|
//! | 100 Mbit/s x 20 ms, 3% of packets held back 2 ms both ways, no SACK, 20 s | 9.8 Mbit/s, 947 retransmissions (98 fast), all spurious | 97.4 Mbit/s, 3 | at least 80 Mbit/s; at most 94 retransmissions, a tenth of before |

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant};

const MS: Duration = Duration::from_millis(1);

/// Run a bulk transfer without SACK for `secs` over 100 Mbit/s x 20 ms, holding back
/// `reorder` of the packets by 2 ms both ways; return Mbit/s, retransmissions (all
/// spurious: nothing is lost) and fast retransmits.
fn bulk(reorder: f64, secs: u64) -> (f64, u64, u64) {
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000).with_reorder(reorder, 2 * MS);
    let config = Config { isn_secret: [5; 16], sack: false, ..Config::default() };
    let mut pair = Pair::new(&config, &config, link, link, 5);
    pair.run_until(Pair::both_established, Instant::from_millis(10_000));
    assert!(!pair.client().sack_enabled());
    pair.stream(Side::Client, 1 << 40, false);
    let start = pair.progress(Side::Server).received;
    pair.run_for(Duration::from_secs(secs));
    let received = pair.progress(Side::Server).received - start;
    let stats = pair.client().stats();
    (received as f64 * 8.0 / secs as f64 / 1e6, stats.retransmits, stats.fast_retransmits)
}

#[test]
fn reordering_without_sack_keeps_the_path_full() {
    let secs = 20;
    let (clean, clean_retrans, _) = bulk(0.0, secs);
    let (rate, retrans, fast) = bulk(0.03, secs);
    println!(
        "100 Mbit/s x 20 ms, no SACK, {secs} s: {clean:.1} Mbit/s ({clean_retrans} retransmissions) in order; \
         {rate:.1} Mbit/s with 3% reordered, {retrans} retransmissions ({fast} fast retransmits), all spurious"
    );
    assert!(rate >= 80.0, "{rate:.1} Mbit/s with 3% reordering");
    assert!(retrans <= 94, "{retrans} spurious retransmissions, 947 before");
}
