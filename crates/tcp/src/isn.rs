//! Initial sequence numbers (RFC 6528, referenced by RFC 9293 section 3.4.1).
//!
//! ISN = M + F(localip, localport, remoteip, remoteport, secretkey), where M
//! is a timer ticking every 4 microseconds and F is a keyed pseudorandom
//! function of the connection's 4-tuple (RFC 6528 section 3). F keeps
//! off-path attackers from guessing the ISN of another connection; M keeps
//! successive incarnations of the same 4-tuple moving forward in sequence
//! space. Here F is SipHash-2-4 truncated to 32 bits.
//!
//! The caller supplies the secret (from a CSPRNG, at start-up) and the time:
//! the generator reads neither a clock nor a random source.

use core::fmt;
use core::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use siphasher::sip::SipHasher24;

use crate::seq::SeqNum;
use crate::time::Instant;
use crate::tuple::FourTuple;

/// Microseconds per tick of the ISN timer M (RFC 9293 section 3.4.1).
const TICK_US: u64 = 4;

/// An RFC 6528 initial sequence number generator holding the secret key.
#[derive(Clone)]
pub struct IsnGenerator {
    /// The secret key of F (RFC 6528 section 3).
    key: [u8; 16],
}

impl fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsnGenerator").field("key", &"<secret>").finish()
    }
}

impl IsnGenerator {
    /// Return a generator keyed with `secret`, which should come from a
    /// cryptographically secure random source (RFC 6528 section 3).
    pub fn new(secret: [u8; 16]) -> Self {
        IsnGenerator { key: secret }
    }

    /// Return the ISN for a connection on `tuple` opened at `now`:
    /// `now / 4 us + SipHash-2-4(key, tuple)` modulo 2^32 (RFC 6528 section 3). (A
    /// connection takes it with its timestamp offset, from one hash.)
    #[cfg(test)]
    pub fn isn(&self, tuple: &FourTuple, now: Instant) -> SeqNum {
        self.isn_and_timestamp_offset(tuple, now).0
    }

    /// Return the offset of a connection's timestamp clock (RFC 7323 section 5.4 and
    /// Appendix A: a per-connection random offset, so that TSval reveals neither the host's
    /// uptime nor how it relates to other connections): the high 32 bits of the hash whose
    /// low 32 bits are F, so the two are independent halves of one pseudorandom output.
    pub fn timestamp_offset(&self, tuple: &FourTuple) -> u32 {
        (self.hash(tuple) >> 32) as u32
    }

    /// Return both [`isn`](Self::isn) and [`timestamp_offset`](Self::timestamp_offset)
    /// from one SipHash of the tuple (each costs about 450 instructions; a connection that
    /// opens needs both).
    pub fn isn_and_timestamp_offset(&self, tuple: &FourTuple, now: Instant) -> (SeqNum, u32) {
        let hash = self.hash(tuple);
        // M: the 4-microsecond timer, wrapping modulo 2^32 (truncation intended).
        let m = (now.as_micros() / TICK_US) as u32;
        // F(localip, localport, remoteip, remoteport, secretkey): the low 32 bits.
        (SeqNum(m.wrapping_add(hash as u32)), (hash >> 32) as u32)
    }

    /// Return SipHash-2-4 of the tuple under the key, fed as one slice (see [`put_addr`]).
    fn hash(&self, tuple: &FourTuple) -> u64 {
        let mut bytes = [0u8; 2 * ADDR_MAX];
        let n = put_addr(&mut bytes, 0, &tuple.local);
        let n = put_addr(&mut bytes, n, &tuple.remote);
        let mut hasher = SipHasher24::new_with_key(&self.key);
        hasher.write(&bytes[..n]);
        hasher.finish()
    }
}

/// The most bytes [`put_addr`] writes: a tag, an IPv6 address and a port.
const ADDR_MAX: usize = 1 + 16 + 2;

/// Write one socket address into `bytes` at `at` and return the end: a family tag (so that
/// IPv4 and IPv6 inputs can never collide), the address octets and the port in network
/// byte order (so the result does not depend on the host's endianness).
fn put_addr(bytes: &mut [u8; 2 * ADDR_MAX], at: usize, addr: &SocketAddr) -> usize {
    let mut put = |at: usize, data: &[u8]| {
        bytes[at..at + data.len()].copy_from_slice(data);
        at + data.len()
    };
    let at = match addr.ip() {
        IpAddr::V4(ip) => {
            let at = put(at, &[4]);
            put(at, &ip.octets())
        }
        IpAddr::V6(ip) => {
            let at = put(at, &[6]);
            put(at, &ip.octets())
        }
    };
    put(at, &addr.port().to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const KEY: [u8; 16] = *b"0123456789abcdef";

    fn v4(local: [u8; 4], lport: u16, remote: [u8; 4], rport: u16) -> FourTuple {
        FourTuple {
            local: SocketAddr::new(Ipv4Addr::from(local).into(), lport),
            remote: SocketAddr::new(Ipv4Addr::from(remote).into(), rport),
        }
    }

    fn tuple() -> FourTuple {
        v4([10, 0, 0, 1], 40_000, [10, 0, 0, 2], 80)
    }

    #[test]
    fn deterministic_for_key_tuple_and_time() {
        let a = IsnGenerator::new(KEY);
        let b = IsnGenerator::new(KEY);
        let now = Instant::from_millis(1234);
        assert_eq!(a.isn(&tuple(), now), b.isn(&tuple(), now));
    }

    #[test]
    fn advances_one_per_four_microseconds() {
        let isns = IsnGenerator::new(KEY);
        let t0 = Instant::from_micros(1_000_000);
        let isn0 = isns.isn(&tuple(), t0);
        assert_eq!(isns.isn(&tuple(), Instant::from_micros(1_000_003)), isn0, "same tick");
        assert_eq!(isns.isn(&tuple(), Instant::from_micros(1_000_004)), isn0 + 1u32);
        let later = isns.isn(&tuple(), Instant::from_micros(1_000_000 + 4_000_000));
        assert_eq!(later - isn0, 1_000_000);
        assert!(later.after(isn0), "a later incarnation starts ahead");
    }

    #[test]
    fn monotonic_across_the_wrap_of_m() {
        let isns = IsnGenerator::new(KEY);
        // M wraps modulo 2^32 every 2^32 * 4 us (about 4.8 hours).
        let wrap_us = (1u64 << 32) * TICK_US;
        let before = isns.isn(&tuple(), Instant::from_micros(wrap_us - 40));
        let after = isns.isn(&tuple(), Instant::from_micros(wrap_us + 40));
        assert_eq!(after - before, 20);
        assert!(after.after(before));
    }

    #[test]
    fn differs_by_tuple() {
        let isns = IsnGenerator::new(KEY);
        let now = Instant::from_millis(5);
        let base = isns.isn(&tuple(), now);
        let others = [
            v4([10, 0, 0, 1], 40_001, [10, 0, 0, 2], 80),
            v4([10, 0, 0, 1], 40_000, [10, 0, 0, 2], 81),
            v4([10, 0, 0, 3], 40_000, [10, 0, 0, 2], 80),
            v4([10, 0, 0, 1], 40_000, [10, 0, 0, 4], 80),
            tuple().reversed(),
            v4([10, 0, 0, 1], 80, [10, 0, 0, 2], 40_000),
        ];
        for other in others {
            assert_ne!(isns.isn(&other, now), base, "{other}");
        }
    }

    #[test]
    fn differs_by_key() {
        let now = Instant::from_millis(5);
        let a = IsnGenerator::new(KEY).isn(&tuple(), now);
        let mut key = KEY;
        key[15] ^= 1;
        let b = IsnGenerator::new(key).isn(&tuple(), now);
        assert_ne!(a, b);
    }

    #[test]
    fn ipv6() {
        let isns = IsnGenerator::new(KEY);
        let t6 = FourTuple {
            local: SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(), 40_000),
            remote: SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into(), 443),
        };
        let now = Instant::from_millis(7);
        let isn = isns.isn(&t6, now);
        assert_eq!(isns.isn(&t6, now), isn);
        assert_eq!(isns.isn(&t6, now + core::time::Duration::from_micros(400)), isn + 100u32);
        assert_ne!(isns.isn(&t6.reversed(), now), isn);
        // An IPv4-mapped IPv6 address is a different input from the IPv4 address.
        let mapped = FourTuple {
            local: SocketAddr::new(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into(), 40_000),
            remote: SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped().into(), 80),
        };
        assert_ne!(isns.isn(&mapped, now), isns.isn(&tuple(), now));
    }

    #[test]
    fn known_answer() {
        // Pin the exact input encoding so it does not change by accident:
        // tag 4, local octets, local port (BE), tag 4, remote octets, remote port (BE).
        let mut h = SipHasher24::new_with_key(&KEY);
        h.write(&[4, 10, 0, 0, 1, 0x9c, 0x40, 4, 10, 0, 0, 2, 0, 80]);
        let hash = h.finish();
        let f = hash as u32;
        let isns = IsnGenerator::new(KEY);
        assert_eq!(isns.isn(&tuple(), Instant::ZERO), SeqNum(f));
        assert_eq!(isns.isn(&tuple(), Instant::from_micros(40)), SeqNum(f.wrapping_add(10)));
        assert_eq!(isns.timestamp_offset(&tuple()), (hash >> 32) as u32);
    }

    #[test]
    fn one_hash_gives_both_the_isn_and_the_timestamp_offset() {
        let isns = IsnGenerator::new(KEY);
        let now = Instant::from_micros(123_456);
        let t6 = FourTuple {
            local: SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(), 40_000),
            remote: SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into(), 443),
        };
        for t in [tuple(), tuple().reversed(), t6] {
            let (isn, offset) = isns.isn_and_timestamp_offset(&t, now);
            assert_eq!(isn, isns.isn(&t, now), "{t}");
            assert_eq!(offset, isns.timestamp_offset(&t), "{t}");
            assert_ne!(offset, isn.0.wrapping_sub((now.as_micros() / TICK_US) as u32), "{t}: the halves differ");
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let s = format!("{:?}", IsnGenerator::new(KEY));
        assert!(!s.contains("48") && !s.contains("0123"), "{s}");
    }

    proptest! {
        #[test]
        fn later_is_after(micros in 0u64..(1 << 50), delta in 4u64..(1 << 32), lport: u16, rport: u16) {
            let isns = IsnGenerator::new(KEY);
            let t = v4([192, 0, 2, 1], lport, [198, 51, 100, 7], rport);
            let a = isns.isn(&t, Instant::from_micros(micros));
            let b = isns.isn(&t, Instant::from_micros(micros + delta));
            // Within half the sequence space, a later ISN is ahead of the earlier one.
            prop_assert!(b.after(a));
            prop_assert_eq!(b - a, ((micros + delta) / 4 - micros / 4) as u32);
        }
    }
}
