//! The delivery rate: bytes the peer acknowledged per second, over about the last round trip
//! (Linux's `tcpi_delivery_rate`, which `ss -i` shows as `delivery_rate`).
//!
//! Linux samples the rate per ACK from per-segment delivery stamps (`tcp_rate.c`, the
//! draft-cheng-iccrg-delivery-rate-estimation method). We keep less: a mark of the bytes
//! acknowledged at some instant, and once a round trip (at least 1 ms) has passed since
//! it, a sample of the bytes acknowledged since over the time taken, then a new mark. A
//! report, not an input to congestion control: nothing in the connection reads it.

use crate::time::Instant;

/// The shortest interval a sample covers, in microseconds (1 ms): on a LAN the round trip
/// is tens of microseconds, too short to average over the bursts of a batch-driven host.
const MIN_INTERVAL_US: u64 = 1_000;

/// The delivery-rate sampler of one connection.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeliveryRate {
    /// When the current interval began, with the bytes acknowledged then.
    mark: Option<(Instant, u64)>,
    /// The latest sample, bytes per second.
    rate: u64,
}

impl DeliveryRate {
    /// Take the total `acked` (bytes acknowledged so far) at `now`; close the interval once
    /// the smoothed RTT, `srtt_us` microseconds (at least 1 ms), has passed. In microseconds
    /// throughout, as the connection's clock and estimator count: this runs on every ACK
    /// that advances SND.UNA.
    pub(crate) fn on_ack(&mut self, now: Instant, acked: u64, srtt_us: Option<u64>) {
        let Some((at, before)) = self.mark else {
            self.mark = Some((now, acked));
            return;
        };
        let elapsed_us = now.as_micros().saturating_sub(at.as_micros());
        if elapsed_us < srtt_us.unwrap_or(MIN_INTERVAL_US).max(MIN_INTERVAL_US) {
            return;
        }
        let bytes = u128::from(acked - before);
        self.rate = (bytes * 1_000_000 / u128::from(elapsed_us.max(1))).min(u128::from(u64::MAX)) as u64;
        self.mark = Some((now, acked));
    }

    /// Return the latest sample, bytes per second (0 before the first).
    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_bytes_over_at_least_a_round_trip() {
        let mut d = DeliveryRate::default();
        let srtt = Some(10_000);
        d.on_ack(Instant::from_millis(0), 0, srtt);
        d.on_ack(Instant::from_millis(5), 50_000, srtt);
        assert_eq!(d.rate(), 0, "no sample before a round trip has passed");
        d.on_ack(Instant::from_millis(10), 100_000, srtt);
        assert_eq!(d.rate(), 10_000_000, "100 kB in 10 ms");
        d.on_ack(Instant::from_millis(30), 120_000, srtt);
        assert_eq!(d.rate(), 1_000_000, "20 kB in 20 ms");
        // A LAN round trip is shorter than the floor of 1 ms.
        let mut d = DeliveryRate::default();
        d.on_ack(Instant::from_micros(0), 0, Some(30));
        d.on_ack(Instant::from_micros(500), 1000, Some(30));
        assert_eq!(d.rate(), 0);
        d.on_ack(Instant::from_micros(2000), 4000, Some(30));
        assert_eq!(d.rate(), 2_000_000);
    }
}
