//! SYN cookies (RFC 4987 section 3.6): answer a SYN without keeping state when the SYN
//! queue is full, and rebuild the connection from the ACK that comes back.
//!
//! The ISS we send encodes everything needed later:
//!
//! ```text
//!  31      27 26  24 23                          0
//! +----------+------+-----------------------------+
//! | t mod 32 | mss  | SipHash(secret, 4-tuple,     |
//! | (64 s)   | index|   peer ISN, t) & 0xffffff    |
//! +----------+------+-----------------------------+
//! ```
//!
//! `t` counts 64-second periods, so a cookie is valid for one to two periods; the MSS is
//! rounded down to one of eight common values. Window scaling and SACK are lost, the
//! price RFC 4987 names for keeping no state.

use core::hash::Hasher;

use bypass_tcp::{FourTuple, Instant, SeqNum};
use siphasher::sip::SipHasher24;

/// MSS values a cookie can encode, ascending.
const MSS_TABLE: [u16; 8] = [536, 1200, 1220, 1360, 1400, 1440, 1460, 8960];

/// Seconds per cookie period.
const PERIOD_SECS: u64 = 64;

/// The cookie secret and codec.
#[derive(Clone)]
pub struct SynCookies {
    key: [u8; 16],
}

impl core::fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SynCookies { .. }")
    }
}

impl SynCookies {
    /// Return a codec keyed by `key` (keep it secret; fill it from a random source).
    pub fn new(key: [u8; 16]) -> Self {
        SynCookies { key }
    }

    fn period(now: Instant) -> u32 {
        ((now.as_micros() / 1_000_000 / PERIOD_SECS) % 32) as u32
    }

    fn hash(&self, tuple: &FourTuple, peer_isn: SeqNum, t: u32) -> u32 {
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
        (h.finish() as u32) & 0x00ff_ffff
    }

    /// Return the ISS to send in answer to a SYN with sequence number `peer_isn` and MSS
    /// option `peer_mss` (536 if absent, RFC 9293 3.7.1).
    pub fn make(&self, tuple: &FourTuple, peer_isn: SeqNum, peer_mss: Option<u16>, now: Instant) -> SeqNum {
        let mss = peer_mss.unwrap_or(536);
        let index = MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32;
        let t = Self::period(now);
        SeqNum((t << 27) | (index << 24) | self.hash(tuple, peer_isn, t))
    }

    /// Check the ACK number of a segment completing a cookie handshake: `ack - 1` must be a
    /// cookie we made for this tuple and `seq - 1` within the last two periods. Return the
    /// ISS and the MSS it encodes.
    pub fn check(&self, tuple: &FourTuple, seq: SeqNum, ack: SeqNum, now: Instant) -> Option<(SeqNum, u16)> {
        let cookie = ack - 1u32;
        let t = cookie.0 >> 27;
        let age = (Self::period(now) + 32 - t) % 32;
        if age > 1 {
            return None;
        }
        if cookie.0 & 0x00ff_ffff != self.hash(tuple, seq - 1u32, t) {
            return None;
        }
        Some((cookie, MSS_TABLE[((cookie.0 >> 24) & 7) as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple() -> FourTuple {
        FourTuple { local: "10.0.0.1:7".parse().unwrap(), remote: "10.0.0.2:50000".parse().unwrap() }
    }

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
        let later = now + std::time::Duration::from_secs(64);
        assert!(c.check(&tuple(), SeqNum(78), iss + 1u32, later).is_some(), "next period still valid");
        let stale = now + std::time::Duration::from_secs(3 * 64);
        assert_eq!(c.check(&tuple(), SeqNum(78), iss + 1u32, stale), None, "expired");
    }
}
