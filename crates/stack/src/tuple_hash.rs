//! The connection table's hash of 4-tuples: a keyed folded multiply, about a tenth of the
//! cost of the standard library's SipHash-1-3 for an IPv4 tuple.
//!
//! Every segment received looks its connection up by 4-tuple. With one connection busy the
//! table's memo of the last slot found answers; with many interleaved (the demo's 100
//! connections, each with a request in flight) it misses, and SipHash of the tuple's two
//! words took about 200 of the 6,100 instructions a 64-byte request and response cost the
//! server (docs/performance.md, "Many connections").
//!
//! The mixing step is foldhash's (the default hasher of `hashbrown`, and aHash's fallback):
//! XOR a word into the state, multiply by a key into a 128-bit product, and fold its halves
//! together with XOR. The seed and keys are drawn per table from the standard library's
//! `RandomState` (the operating system's random source), so a peer that picks addresses and
//! ports cannot aim its tuples at one bucket without knowing them: the "minimal DoS
//! resistance" foldhash documents, which is what a table keyed by what peers choose needs.
//! It is not a cryptographic hash: SYN cookies, ISNs and ephemeral ports use SipHash-2-4
//! keyed by the stack's secret.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Builds [`TupleHash`]ers with one random seed and pair of keys (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct TupleHasher {
    seed: u64,
    keys: [u64; 2],
}

impl TupleHasher {
    /// Return a builder with a fresh random seed and keys.
    pub(crate) fn new() -> Self {
        let random = RandomState::new();
        let draw = |i: u64| random.hash_one(i);
        // Odd keys: a multiplication by an odd number is a bijection of the low word.
        TupleHasher { seed: draw(0), keys: [draw(1) | 1, draw(2) | 1] }
    }
}

impl Default for TupleHasher {
    fn default() -> Self {
        TupleHasher::new()
    }
}

impl BuildHasher for TupleHasher {
    type Hasher = TupleHash;

    fn build_hasher(&self) -> TupleHash {
        TupleHash { state: self.seed, keys: self.keys }
    }
}

/// The state of one hash (see the module docs).
pub(crate) struct TupleHash {
    state: u64,
    keys: [u64; 2],
}

/// Return the 128-bit product of `x` and `y` with its two halves folded together by XOR.
#[inline]
fn folded_multiply(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Hasher for TupleHash {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.keys[0]);
    }

    #[inline]
    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    #[inline]
    fn write_u16(&mut self, word: u16) {
        self.write_u64(u64::from(word));
    }

    #[inline]
    fn write_u8(&mut self, word: u8) {
        self.write_u64(u64::from(word));
    }

    #[inline]
    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    /// Mix `bytes` eight at a time (the last word padded with zeros), then their length, so
    /// that runs of different lengths differ.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        self.write_u64(bytes.len() as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        folded_multiply(self.state, self.keys[1])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

    use bypass_tcp::FourTuple;

    use super::*;

    fn tuple(local: &str, remote: &str) -> FourTuple {
        FourTuple { local: local.parse().unwrap(), remote: remote.parse().unwrap() }
    }

    #[test]
    fn tuples_that_differ_in_any_field_hash_apart() {
        let hasher = TupleHasher::new();
        for t in [tuple("10.0.0.1:80", "10.0.0.2:40000"), tuple("[fd00::1]:80", "[fd00::2]:40000")] {
            let (local, remote) = (t.local, t.remote);
            let with_port = |a: SocketAddr, p: u16| SocketAddr::new(a.ip(), p);
            let changed = [
                FourTuple { local: with_port(local, 81), ..t },
                FourTuple { remote: with_port(remote, 40001), ..t },
                FourTuple { local: SocketAddr::new(remote.ip(), local.port()), ..t },
                FourTuple { remote: SocketAddr::new(local.ip(), remote.port()), ..t },
                t.reversed(),
            ];
            for other in changed {
                assert_ne!(hasher.hash_one(t), hasher.hash_one(other), "{t} and {other}");
            }
            assert_eq!(hasher.hash_one(t), hasher.hash_one(FourTuple { ..t }), "not deterministic");
        }
    }

    #[test]
    fn each_table_has_its_own_keys() {
        let t = tuple("10.0.0.1:80", "10.0.0.2:40000");
        // Two builders agree on a hash with probability 2^-64 if keyed apart.
        let hashes: HashSet<u64> = (0..4).map(|_| TupleHasher::new().hash_one(t)).collect();
        assert!(hashes.len() > 1, "four tables hashed {t} alike: the hash is not keyed");
    }

    /// What a flood would try: one remote address, every source port, one local port. The
    /// tuples spread over a table's buckets (its low bits) and over hashbrown's control
    /// bytes (the top seven bits) about evenly, and no two share a whole hash.
    #[test]
    fn tuples_from_one_peer_spread_over_the_buckets() {
        let hasher = TupleHasher::new();
        let local = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80));
        let hashes: Vec<u64> = (1024..=u16::MAX)
            .map(|port| {
                let remote = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), port));
                hasher.hash_one(FourTuple { local, remote })
            })
            .collect();
        let distinct: HashSet<u64> = hashes.iter().copied().collect();
        assert_eq!(distinct.len(), hashes.len(), "whole-hash collisions");
        let (buckets, groups) = (1024, 128);
        let mut low = vec![0usize; buckets];
        let mut top = vec![0usize; groups];
        for h in &hashes {
            low[(*h as usize) % buckets] += 1;
            top[(*h >> 57) as usize] += 1;
        }
        let (low_mean, top_mean) = (hashes.len() / buckets, hashes.len() / groups);
        let (low_max, top_max) = (*low.iter().max().unwrap(), *top.iter().max().unwrap());
        assert!(low_max < 2 * low_mean, "a bucket holds {low_max} of {} (mean {low_mean})", hashes.len());
        assert!(top_max < top_mean + top_mean / 4, "a control byte is shared by {top_max} (mean {top_mean})");
    }
}
