//! SYN cookies (RFC 4987 section 3.6): answer a SYN without keeping state when the SYN
//! queue is full, and rebuild the connection from the ACK that comes back.
//!
//! The ISS we send encodes everything needed later:
//!
//! ```text
//!  31      27 26  24 23                          0
//! +----------+------+-----------------------------+
//! | t mod 32 | mss  | SipHash(secret, 4-tuple,     |
//! | (64 s)   | index|   peer ISN, t, mss index)    |
//! |          |      |   & 0xffffff                 |
//! +----------+------+-----------------------------+
//! ```
//!
//! `t` counts 64-second periods, so a cookie is valid for one to two periods; the MSS is
//! rounded down to one of eight common values. The MAC covers every bit the cookie
//! encodes (the period and the MSS index as well as the 4-tuple and the peer's ISN), and
//! [`SynCookies::check`] rebuilds the whole cookie and compares all 32 bits, so changing
//! any field invalidates it: a blind guess succeeds with probability 2^-24 for each of
//! the two live periods. Window scaling and SACK are lost, the price RFC 4987 names for
//! keeping no state.
//!
//! The codec alone would accept a valid cookie at any time. A host checks cookies only
//! for a listener that sent one recently ([`RecentOverflow`]), as Linux does: otherwise
//! every stray ACK would be a 2^-28 lottery ticket for an established connection.

use core::hash::Hasher;
use std::time::Duration;

use bypass_tcp::{FourTuple, Instant, SeqNum};
use siphasher::sip::SipHasher24;

/// MSS values a cookie can encode, ascending.
pub const MSS_TABLE: [u16; 8] = [536, 1200, 1220, 1360, 1400, 1440, 1460, 8960];

/// Seconds per cookie period.
pub const PERIOD_SECS: u64 = 64;

/// Bits of the MAC: the low 24 bits of the cookie.
const MAC_MASK: u32 = 0x00ff_ffff;

/// Return the cookie key of a host whose TCP secret is `isn_secret`.
pub(crate) fn key(isn_secret: &[u8; 16]) -> [u8; 16] {
    crate::ports::derive_key(isn_secret, b"bypass SYN cookie key")
}

/// The cookie secret and codec.
#[derive(Clone)]
pub struct SynCookies {
    key: [u8; 16],
    /// Microseconds added to the host's time to give the clock periods are counted on: 0 by
    /// default (the host's epoch), or what makes it `CLOCK_MONOTONIC` when another party (the
    /// XDP program) makes cookies with the same key on that clock.
    epoch_micros: u64,
}

impl core::fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SynCookies { .. }")
    }
}

impl SynCookies {
    /// Return a codec keyed by `key` (keep it secret; fill it from a random source).
    pub fn new(key: [u8; 16]) -> Self {
        SynCookies { key, epoch_micros: 0 }
    }

    /// Count periods on the host's time plus `micros` from now on (see
    /// [`Interface::set_syn_cookie_epoch`](crate::Interface::set_syn_cookie_epoch)).
    pub fn set_epoch(&mut self, micros: u64) {
        self.epoch_micros = micros;
    }

    fn period(&self, now: Instant) -> u32 {
        (((now.as_micros() + self.epoch_micros) / 1_000_000 / PERIOD_SECS) % 32) as u32
    }

    /// Return the cookie for `tuple`, `peer_isn`, period `t` and MSS index `index`: both
    /// encoded fields and their MAC.
    fn cookie(&self, tuple: &FourTuple, peer_isn: SeqNum, t: u32, index: u32) -> u32 {
        let mut h = SipHasher24::new_with_key(&self.key);
        for addr in [tuple.local, tuple.remote] {
            match addr.ip() {
                std::net::IpAddr::V4(ip) => h.write(&ip.octets()),
                std::net::IpAddr::V6(ip) => h.write(&ip.octets()),
            }
            h.write_u16(addr.port());
        }
        h.write_u32(peer_isn.0);
        h.write_u32(t);
        h.write_u32(index);
        (t << 27) | (index << 24) | ((h.finish() as u32) & MAC_MASK)
    }

    /// Return the ISS to send in answer to a SYN with sequence number `peer_isn` and MSS
    /// option `peer_mss` (536 if absent, RFC 9293 3.7.1).
    pub fn make(&self, tuple: &FourTuple, peer_isn: SeqNum, peer_mss: Option<u16>, now: Instant) -> SeqNum {
        let mss = peer_mss.unwrap_or(536);
        let index = MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32;
        SeqNum(self.cookie(tuple, peer_isn, self.period(now), index))
    }

    /// Check the ACK number of a segment completing a cookie handshake: `ack - 1` must be,
    /// bit for bit, a cookie we made for this tuple and `seq - 1` within the last two
    /// periods. Return the ISS and the MSS it encodes.
    pub fn check(&self, tuple: &FourTuple, seq: SeqNum, ack: SeqNum, now: Instant) -> Option<(SeqNum, u16)> {
        let cookie = ack - 1u32;
        let t = cookie.0 >> 27;
        let index = (cookie.0 >> 24) & 7;
        let age = (self.period(now) + 32 - t) % 32;
        if age > 1 {
            return None;
        }
        if self.cookie(tuple, seq - 1u32, t, index) != cookie.0 {
            return None;
        }
        Some((cookie, MSS_TABLE[index as usize]))
    }
}

/// When a listener last answered a SYN with a cookie. Cookies are checked only within a
/// validity window after that (Linux: `tcp_synq_no_recent_overflow`, TCP_SYNCOOKIE_VALID
/// of 2 minutes): with no recent overflow no cookie can be outstanding, so an ACK to the
/// listener is not a handshake's last step, whatever its acknowledgment number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentOverflow {
    last: Option<Instant>,
}

impl RecentOverflow {
    /// Note that a cookie was sent at `now`.
    pub fn record(&mut self, now: Instant) {
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
    }

    /// Return whether a cookie was sent within `valid` before `now` (inclusive).
    pub fn recent(&self, now: Instant, valid: Duration) -> bool {
        self.last.is_some_and(|last| now.saturating_duration_since(last) <= valid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple() -> FourTuple {
        FourTuple { local: "10.0.0.1:7".parse().unwrap(), remote: "10.0.0.2:50000".parse().unwrap() }
    }

    // ---------------------------------------------------------------------------------
    // The codec.
    // ---------------------------------------------------------------------------------

    #[test]
    fn cookie_round_trips_and_encodes_mss() {
        let c = SynCookies::new([9; 16]);
        let now = Instant::from_millis(1_000_000);
        let iss = c.make(&tuple(), SeqNum(77), Some(1460), now);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, now), Some((iss, 1460)));
        let iss = c.make(&tuple(), SeqNum(77), Some(1450), now);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, now).unwrap().1, 1440, "rounded down");
        let iss = c.make(&tuple(), SeqNum(77), None, now);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, now).unwrap().1, 536);
    }

    #[test]
    fn forged_stale_or_misdirected_cookies_fail() {
        let c = SynCookies::new([9; 16]);
        let now = Instant::from_millis(1_000_000);
        let iss = c.make(&tuple(), SeqNum(77), Some(1460), now);
        assert_eq!(c.check(&tuple(), SeqNum(79), iss + 1u32, now), None, "wrong peer ISN");
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 2u32, now), None, "wrong ACK");
        let other = FourTuple { remote: "10.0.0.3:50000".parse().unwrap(), ..tuple() };
        assert_eq!(c.check(&other, SeqNum(78), iss + 1u32, now), None, "other tuple");
        assert_eq!(SynCookies::new([8; 16]).check(&tuple(), SeqNum(78), iss + 1u32, now), None, "other key");
        let later = now + Duration::from_secs(64);
        assert!(c.check(&tuple(), SeqNum(78), iss + 1u32, later).is_some(), "next period still valid");
        let stale = now + Duration::from_secs(3 * 64);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, stale), None, "expired");
    }

    #[test]
    fn every_flipped_bit_fails() {
        // The MAC covers the MSS index and the period too: a peer that flips them (to
        // claim a larger MSS, or to stretch the cookie's life) gets nothing.
        let c = SynCookies::new([9; 16]);
        // In the middle of a period, so flipping the lowest period bit names a period
        // that is still live (one later or one earlier) and only the MAC can catch it.
        let now = Instant::from_millis(1_000_000);
        let iss = c.make(&tuple(), SeqNum(77), Some(1200), now);
        for bit in 0..32 {
            let forged = SeqNum(iss.0 ^ (1 << bit));
            for when in [now, now + Duration::from_secs(64)] {
                assert_eq!(c.check(&tuple(), SeqNum(78), forged + 1u32, when), None, "bit {bit} flipped");
            }
        }
    }

    #[test]
    fn flipped_mss_index_or_period_bit_fails_while_the_original_holds() {
        let c = SynCookies::new([9; 16]);
        let now = Instant::from_millis(1_000_000);
        let iss = c.make(&tuple(), SeqNum(77), Some(536), now);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, now), Some((iss, 536)));
        // Index 7 (8960) from index 0: every MSS bit set.
        let bigger = SeqNum(iss.0 | (7 << 24));
        assert_eq!(c.check(&tuple(), SeqNum(78), bigger + 1u32, now), None, "MSS index raised");
        // The period one later: live at `now + 64 s`, but not the one the MAC covers.
        let t = iss.0 >> 27;
        let shifted = SeqNum((iss.0 & !(0x1f << 27)) | (((t + 1) % 32) << 27));
        let later = now + Duration::from_secs(64);
        assert!(c.check(&tuple(), SeqNum(78), iss + 1u32, later).is_some());
        assert_eq!(c.check(&tuple(), SeqNum(78), shifted + 1u32, later), None, "period moved");
    }

    // ---------------------------------------------------------------------------------
    // The validity window after an overflow.
    // ---------------------------------------------------------------------------------

    #[test]
    fn no_overflow_means_no_cookie_is_recent() {
        let o = RecentOverflow::default();
        assert!(!o.recent(Instant::ZERO, Duration::from_secs(120)));
        assert!(!o.recent(Instant::from_millis(10_000_000), Duration::MAX));
    }

    #[test]
    fn an_overflow_opens_the_window_for_its_length() {
        let valid = Duration::from_secs(120);
        let mut o = RecentOverflow::default();
        let t0 = Instant::from_millis(5_000);
        o.record(t0);
        assert!(o.recent(t0, valid));
        assert!(o.recent(t0 + valid, valid), "the window's end is inside");
        assert!(!o.recent(t0 + valid + Duration::from_micros(1), valid));
        // Another cookie extends it; an older time never shortens it.
        o.record(t0 + Duration::from_secs(100));
        o.record(t0);
        assert!(o.recent(t0 + Duration::from_secs(219), valid));
        assert!(!o.recent(t0 + Duration::from_secs(221), valid));
    }
}
