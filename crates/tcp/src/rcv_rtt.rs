//! The receiver's estimate of the round trip (Linux's `rcv_rtt_est`, net/ipv4/tcp_input.c),
//! for receive-buffer autotuning.
//!
//! A pure receiver sends no data, so it takes no RTT sample of its own after the handshake
//! (RFC 6298 times data and its ACK). When the path's round trip grows later (a queue
//! filling, Wi-Fi), autotuning that kept the handshake's RTT would measure the reads over
//! too short an interval and leave the window too small for the path. Two measurements,
//! as Linux makes them (Dynamic Right-Sizing, Fisk and Feng):
//!
//! - **By the window** (`tcp_rcv_rtt_measure`): the sender cannot send beyond the right edge
//!   we have advertised until an ACK we send later moves it, so the first in-order byte
//!   beyond the edge that stood at `t` arrives at least a round trip after `t`. A sample
//!   per window; they only overestimate (the sender may not use the new window at once),
//!   so the estimate keeps their minimum. (Linux marks `rcv_nxt + rcv_wnd` after taking
//!   the segment, which is beyond its advertised edge for the same reason.)
//! - **By the timestamp echo** (`tcp_rcv_rtt_measure_ts`, RFC 7323 4): a full-sized segment
//!   echoing a TSecr not seen before came a round trip after we sent that TSval. These are
//!   smoothed (gain 1/8, as RFC 6298's SRTT). Our TSval ticks in milliseconds, so a sample
//!   of zero ticks (a sub-millisecond path) says only "under a millisecond" and is skipped:
//!   the window's samples, on the host's microsecond clock, measure those paths.

use std::time::Duration;

use crate::seq::SeqNum;
use crate::time::Instant;

/// The receiver's round-trip estimate.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RcvRtt {
    /// The estimate, if any sample was taken.
    rtt: Option<Duration>,
    /// The window mark: the right edge advertised when `since` began, and when.
    mark: Option<(SeqNum, Instant)>,
    /// The last TSecr a sample was taken from (one sample per echoed value).
    last_tsecr: Option<u32>,
}

impl RcvRtt {
    /// Return the estimate.
    pub(crate) fn get(&self) -> Option<Duration> {
        self.rtt
    }

    /// In-order data arrived at `now`, RCV.NXT is now `nxt` and the right edge of the window
    /// we have advertised is `right_edge`: once RCV.NXT passes beyond the edge marked a
    /// window ago, the time since is a sample (the estimate keeps the smallest); then mark
    /// the edge anew.
    pub(crate) fn on_data_by_window(&mut self, now: Instant, nxt: SeqNum, right_edge: SeqNum) {
        if let Some((edge, at)) = self.mark {
            if !nxt.after(edge) {
                return;
            }
            let sample = now.saturating_duration_since(at).max(Duration::from_micros(1));
            self.rtt = Some(self.rtt.map_or(sample, |rtt| rtt.min(sample)));
        }
        self.mark = Some((right_edge, now));
    }

    /// A segment of `len` bytes arrived echoing `tsecr`, which measures the round trip
    /// `echo` (`None`: not one of ours, or under a millisecond), where the peer's full-sized
    /// segment is `full_size`: a sample from each TSecr once, from full-sized segments only
    /// (a small one may be an ACK the peer delayed), smoothed by 1/8.
    pub(crate) fn on_data_by_timestamp(&mut self, tsecr: u32, echo: Option<Duration>, len: u32, full_size: u32) {
        if tsecr == 0 || self.last_tsecr == Some(tsecr) {
            return;
        }
        self.last_tsecr = Some(tsecr);
        let Some(sample) = echo.filter(|_| len >= full_size) else {
            return;
        };
        self.rtt = Some(match self.rtt {
            // RFC 6298 2.3's SRTT <- 7/8 SRTT + 1/8 R, as Linux's tcp_rcv_rtt_update.
            Some(rtt) => (rtt * 7 + sample) / 8,
            None => sample,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn a_window_filled_a_round_trip_later_is_a_sample_and_the_smallest_is_kept() {
        let mut r = RcvRtt::default();
        r.on_data_by_window(ms(0), SeqNum(1000), SeqNum(11_000));
        assert_eq!(r.get(), None);
        // Up to the edge: the sender could send that without a newer window.
        r.on_data_by_window(ms(30), SeqNum(11_000), SeqNum(20_000));
        assert_eq!(r.get(), None);
        r.on_data_by_window(ms(50), SeqNum(11_001), SeqNum(30_000));
        assert_eq!(r.get(), Some(Duration::from_millis(50)));
        r.on_data_by_window(ms(150), SeqNum(30_001), SeqNum(40_000));
        assert_eq!(r.get(), Some(Duration::from_millis(50)), "a slower window does not raise the minimum");
        r.on_data_by_window(ms(170), SeqNum(40_001), SeqNum(50_000));
        assert_eq!(r.get(), Some(Duration::from_millis(20)));
    }

    #[test]
    fn timestamp_samples_are_smoothed_once_per_echo_from_full_segments() {
        let mut r = RcvRtt::default();
        let echo = |ms| Some(Duration::from_millis(ms));
        r.on_data_by_timestamp(7, echo(100), 1448, 1448);
        assert_eq!(r.get(), Some(Duration::from_millis(100)));
        // The same echo again, a small segment, a zero echo, a sub-millisecond sample: none.
        r.on_data_by_timestamp(7, echo(900), 1448, 1448);
        r.on_data_by_timestamp(8, echo(900), 100, 1448);
        r.on_data_by_timestamp(0, echo(900), 1448, 1448);
        r.on_data_by_timestamp(9, None, 1448, 1448);
        assert_eq!(r.get(), Some(Duration::from_millis(100)));
        r.on_data_by_timestamp(10, echo(180), 1448, 1448);
        assert_eq!(r.get(), Some(Duration::from_millis(110)));
    }
}
