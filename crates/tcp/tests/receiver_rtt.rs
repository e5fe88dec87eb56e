//! A path whose round trip grows after the handshake (bufferbloat, Wi-Fi): the receiver
//! measures the round trip itself, by the window and by the timestamp echo (Linux's
//! `tcp_rcv_rtt_measure` and `tcp_rcv_rtt_measure_ts`), and autotuning counts reads over
//! that, so the window grows for the path the data crosses, not the one the handshake saw.
//! With the handshake's 2 ms the window stayed at what 2 ms needs, and an upload on
//! 1 Gbit/s x 100 ms ran at 41 Mbit/s.

use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Instant, Stats};

/// Handshake over 1 Gbit/s x 2 ms, then the round trip grows to 100 ms and the client
/// uploads: the server's receive rate over seconds 4 to 8, in Mbit/s, and its statistics.
fn upload_after_the_rtt_grows(timestamps: bool) -> (f64, Stats) {
    let config = Config { isn_secret: [9; 16], timestamps, ..Config::default() };
    let near = LinkConfig::default().with_delay(Duration::from_millis(1)).with_bandwidth(1_000_000_000);
    let mut pair = Pair::new(&config, &config, near, near, 9);
    assert!(pair.run_until(Pair::both_established, Instant::from_millis(100)), "{:?}", pair.error());
    let far = near.with_delay(Duration::from_millis(50));
    for side in [Side::Client, Side::Server] {
        pair.link_mut(side).set_config(far);
    }
    pair.stream(Side::Client, 1 << 40, false);
    pair.run_until(|_| false, Instant::from_millis(4000));
    let start = pair.progress(Side::Server).received;
    pair.run_until(|_| false, Instant::from_millis(8000));
    assert!(pair.error().is_none(), "{:?}", pair.error());
    let mbit = (pair.progress(Side::Server).received - start) as f64 * 8.0 / 4.0 / 1e6;
    (mbit, pair.server().stats())
}

#[test]
fn autotuning_follows_an_rtt_that_grew_after_the_handshake_with_timestamps() {
    let (mbit, server) = upload_after_the_rtt_grows(true);
    println!(
        "timestamps: {mbit:.0} Mbit/s on 1 Gbit/s x 100 ms (handshake at 2 ms); the receiver's RTT {:?}",
        server.rcv_rtt
    );
    assert!(mbit >= 800.0, "{mbit:.0} Mbit/s; {server:?}");
    assert!(server.rcv_rtt.is_some_and(|rtt| rtt >= Duration::from_millis(100)), "{server:?}");
}

#[test]
fn autotuning_follows_an_rtt_that_grew_after_the_handshake_without_timestamps() {
    let (mbit, server) = upload_after_the_rtt_grows(false);
    println!(
        "no timestamps: {mbit:.0} Mbit/s on 1 Gbit/s x 100 ms (handshake at 2 ms); the receiver's RTT {:?}",
        server.rcv_rtt
    );
    assert!(mbit >= 800.0, "{mbit:.0} Mbit/s; {server:?}");
    assert!(server.rcv_rtt.is_some_and(|rtt| rtt >= Duration::from_millis(100)), "{server:?}");
}
