//! The connection table's hash of 4-tuples: foldhash's keyed folded multiply (the `foldhash`
//! crate; its `fast` variant is `hashbrown`'s default hasher), about a tenth of the cost of
//! the standard library's SipHash-1-3 for an IPv4 tuple.
//!
//! Every segment received looks its connection up by 4-tuple. With one connection busy the
//! table's memo of the last slot found answers; with many interleaved (the demo's 100
//! connections, each with a request in flight) it misses, and SipHash of the tuple's two
//! words took about 200 of the 6,100 instructions a 64-byte request and response cost the
//! server (docs/performance.md, "Many connections").
//!
//! Each word is XORed into the state and multiplied by a key into a 128-bit product whose
//! halves are folded together with XOR. The seed is drawn per table from a random source,
//! so a peer that picks addresses and ports cannot aim its tuples at one bucket without
//! knowing it: the "minimal DoS resistance" foldhash documents, which is what a table keyed
//! by what peers choose needs. It is not a cryptographic hash: SYN cookies, ISNs and
//! ephemeral ports use SipHash-2-4 keyed by the stack's secret.

/// Builds the table's hashers, with a random seed of its own (see the module docs).
///
/// foldhash's `quality` variant, one more folded multiply at the end than `fast` (3
/// instructions a lookup): with `fast`, about one seed in thirty put twice the mean of a
/// peer's tuples (every source port) into one bucket of the table's low bits, which the
/// test below catches.
pub(crate) type TupleHasher = foldhash::quality::RandomState;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

    use bypass_tcp::FourTuple;

    use std::hash::BuildHasher;

    use super::*;

    fn tuple(local: &str, remote: &str) -> FourTuple {
        FourTuple { local: local.parse().unwrap(), remote: remote.parse().unwrap() }
    }

    #[test]
    fn tuples_that_differ_in_any_field_hash_apart() {
        let hasher = TupleHasher::default();
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
        let hashes: HashSet<u64> = (0..4).map(|_| TupleHasher::default().hash_one(t)).collect();
        assert!(hashes.len() > 1, "four tables hashed {t} alike: the hash is not keyed");
    }

    /// What a flood would try: one remote address, every source port, one local port. The
    /// tuples spread over a table's buckets (its low bits) and over hashbrown's control
    /// bytes (the top seven bits) about evenly, and no two share a whole hash.
    #[test]
    fn tuples_from_one_peer_spread_over_the_buckets() {
        let hasher = TupleHasher::default();
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
