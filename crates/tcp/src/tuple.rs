//! The 4-tuple that names a connection.

use core::fmt;
use std::net::SocketAddr;

/// Local and remote socket addresses of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

impl fmt::Display for FourTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} <-> {}", self.local, self.remote)
    }
}
