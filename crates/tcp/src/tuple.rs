//! The 4-tuple that names a connection.

use core::fmt;
use core::hash::{Hash, Hasher};
use std::net::SocketAddr;

/// Local and remote socket addresses of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
}

impl FourTuple {
    /// Return the tuple as the peer sees it.
    pub fn reversed(self) -> FourTuple {
        FourTuple { local: self.remote, remote: self.local }
    }
}

/// An IPv4 tuple is hashed as two words, where the derived `Hash` feeds the hasher eight
/// pieces (each address's variant, length, octets and port): the connection table's
/// keyed SipHash costs per piece, and it runs for every segment received (see
/// docs/performance.md, "Instruction counts"). IPv6 tuples are hashed field by field.
impl Hash for FourTuple {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match (self.local, self.remote) {
            (SocketAddr::V4(local), SocketAddr::V4(remote)) => {
                state.write_u64(u64::from(local.ip().to_bits()) << 32 | u64::from(remote.ip().to_bits()));
                state.write_u32(u32::from(local.port()) << 16 | u32::from(remote.port()));
            }
            (local, remote) => {
                local.hash(state);
                remote.hash(state);
            }
        }
    }
}

impl fmt::Display for FourTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} <-> {}", self.local, self.remote)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;

    use super::*;

    fn hash(t: FourTuple) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn ipv4_tuples_that_differ_in_any_field_hash_apart() {
        let t = FourTuple { local: "10.0.0.1:80".parse().unwrap(), remote: "10.0.0.2:40000".parse().unwrap() };
        let changed = [
            FourTuple { local: "10.0.0.3:80".parse().unwrap(), ..t },
            FourTuple { local: "10.0.0.1:81".parse().unwrap(), ..t },
            FourTuple { remote: "10.0.0.4:40000".parse().unwrap(), ..t },
            FourTuple { remote: "10.0.0.2:40001".parse().unwrap(), ..t },
            t.reversed(),
        ];
        for other in changed {
            assert_ne!(hash(t), hash(other), "{t} and {other}");
        }
        assert_eq!(hash(t), hash(FourTuple { ..t }));
    }

    #[test]
    fn ipv6_tuples_hash_by_every_field() {
        let t = FourTuple { local: "[fd00::1]:80".parse().unwrap(), remote: "[fd00::2]:40000".parse().unwrap() };
        assert_ne!(hash(t), hash(t.reversed()));
        assert_ne!(hash(t), hash(FourTuple { remote: "[fd00::2]:40001".parse().unwrap(), ..t }));
    }
}
