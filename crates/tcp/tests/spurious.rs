//! Spurious retransmissions found and undone: by the timestamp echo (Eifel, RFC 3522, with
//! RFC 4015's response after a timeout; Linux's `tcp_packet_delayed`, `tcp_try_undo_loss`,
//! `tcp_try_undo_recovery`), and after a timeout by F-RTO (RFC 5682, Linux's
//! `tcp_process_loss`).
//!
//! | case | before | after | target |
//! |---|---|---|---|
//! | 10 Mbit/s x 20 ms, window-limited, the ACK path stalled 400 ms (ACKs held, delivered in order), timestamps on (Eifel) | 1 timeout, 14 retransmissions (undone later by D-SACKs) | 1 retransmission, cwnd and ssthresh restored | at most 2 retransmissions, no reduction left |
//! | the same, timestamps off (F-RTO, RFC 5682) | 1 timeout, 17 retransmissions | 1 retransmission, cwnd and ssthresh restored | the same |
//! | 100 Mbit/s x 20 ms, 3% reordered 2 ms, no SACK, 10 s, timestamps on and off | 2 retransmissions either way (the min_RTT test already undoes these) | the same | at least 80 Mbit/s, no more retransmissions with timestamps than without |
//!
//! The rules themselves, where the min_RTT test cannot tell and for F-RTO's bounds, are
//! pinned by the unit tests of `recovery.rs`.

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant};

const MS: Duration = Duration::from_millis(1);

/// What a run left: cwnd and ssthresh before the spike and after it, retransmissions and
/// timeouts.
#[derive(Debug)]
struct Spike {
    cwnd_before: u32,
    ssthresh_before: u32,
    cwnd_after: u32,
    ssthresh_after: u32,
    retransmits: u64,
    timeouts: u64,
}

/// A window-limited bulk transfer over 10 Mbit/s x 20 ms; at 2 s the ACKs are held for 400
/// ms, long enough for the retransmission timer to fire while nothing is lost.
fn delay_spike(timestamps: bool) -> Spike {
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(10_000_000);
    let config = Config { isn_secret: [7; 16], timestamps, ..Config::default() };
    let mut pair = Pair::new(&config, &config, link, link, 11);
    pair.run_until(Pair::both_established, Instant::from_millis(1_000));
    assert_eq!(pair.client().timestamps_enabled(), timestamps);
    // 40 KB of window: under the path's 50 KB, so nothing queues and nothing is dropped.
    pair.set_window_clamp(Side::Server, Some(40_000));
    pair.stream(Side::Client, 1 << 40, false);
    pair.run_for(Duration::from_secs(2));
    let before = pair.client().stats();
    // The ACK path stalls for 400 ms (a radio retrying, a handover): the ACKs sent then are
    // held and delivered in order when it resumes, each one's delay stepped down by the
    // millisecond so that none overtakes another (ACKs are small: no serialization backlog
    // reorders them).
    let release = pair.now() + 400 * MS;
    while pair.now() < release {
        let held = link.with_delay(10 * MS + (release - pair.now()));
        pair.link_mut(Side::Server).set_config(held);
        pair.run_for(MS);
    }
    pair.link_mut(Side::Server).set_config(link);
    pair.run_for(Duration::from_secs(2));
    let after = pair.client().stats();
    for from in [Side::Client, Side::Server] {
        assert_eq!(pair.link(from).stats().queue_dropped, 0, "nothing is lost");
    }
    Spike {
        cwnd_before: before.cwnd,
        ssthresh_before: before.ssthresh,
        cwnd_after: after.cwnd,
        ssthresh_after: after.ssthresh,
        retransmits: after.retransmits - before.retransmits,
        timeouts: after.timeouts - before.timeouts,
    }
}

#[test]
fn a_delay_spike_that_fires_the_timer_is_undone() {
    // Timestamps on: Eifel decides, on the first ACK after the stall (its echo predates the
    // resend). Off: F-RTO, on the second (new data went, and originals were acknowledged).
    for (timestamps, by) in [(true, "Eifel"), (false, "F-RTO")] {
        let run = delay_spike(timestamps);
        println!("ACK path stalled 400 ms, timestamps {timestamps} ({by}): {run:?}");
        assert!(run.timeouts >= 1, "the stall fires the retransmission timer");
        assert!(run.ssthresh_after >= run.ssthresh_before, "the timeout's reduction is undone: {run:?}");
        assert!(run.cwnd_after >= run.cwnd_before, "cwnd restored: {run:?}");
        // Before: 14 (timestamps on) and 17 (off), every segment in flight sent again.
        assert!(run.retransmits <= 2, "needless retransmissions: {run:?}");
    }
}

/// A bulk transfer without SACK for `secs` over 100 Mbit/s x 20 ms, 3% of the packets held
/// back 2 ms both ways; return Mbit/s, retransmissions (all spurious) and fast retransmits.
fn reordered(timestamps: bool, secs: u64) -> (f64, u64, u64) {
    let link = LinkConfig::default().with_delay(10 * MS).with_bandwidth(100_000_000).with_reorder(0.03, 2 * MS);
    let config = Config { isn_secret: [5; 16], sack: false, timestamps, ..Config::default() };
    let mut pair = Pair::new(&config, &config, link, link, 5);
    pair.run_until(Pair::both_established, Instant::from_millis(10_000));
    assert_eq!(pair.client().timestamps_enabled(), timestamps);
    pair.stream(Side::Client, 1 << 40, false);
    let start = pair.progress(Side::Server).received;
    pair.run_for(Duration::from_secs(secs));
    let received = pair.progress(Side::Server).received - start;
    let stats = pair.client().stats();
    (received as f64 * 8.0 / secs as f64 / 1e6, stats.retransmits, stats.fast_retransmits)
}

#[test]
fn a_fast_retransmit_from_reordering_is_undone_by_the_echo() {
    let secs = 10;
    let (rate_off, retrans_off, fast_off) = reordered(false, secs);
    let (rate_on, retrans_on, fast_on) = reordered(true, secs);
    println!(
        "3% reordered, no SACK, {secs} s: timestamps off {rate_off:.1} Mbit/s, {retrans_off} retransmissions \
         ({fast_off} fast); timestamps on (Eifel) {rate_on:.1} Mbit/s, {retrans_on} retransmissions ({fast_on} fast)"
    );
    assert!(rate_on >= 80.0, "{rate_on:.1} Mbit/s");
    assert!(retrans_on <= retrans_off.max(10), "{retrans_on} spurious retransmissions against {retrans_off}");
}
