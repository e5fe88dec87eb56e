//! The errors of the host's operations, one enum per operation.

use std::net::SocketAddr;

/// Errors of `listen`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenError {
    /// Another listener has the port.
    #[error("port {0} is already in use by another listener; choose another port")]
    AddrInUse(u16),
    /// Port 0.
    #[error("port 0 is not a valid listening port; choose a port from 1 to 65535")]
    InvalidPort,
}

/// Errors of `connect`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConnectError {
    /// Every ephemeral port towards that destination is in use.
    #[error("no free local port towards {0}; close some connections or widen the ephemeral range")]
    NoFreePort(SocketAddr),
    /// The table is full.
    #[error("the connection table is full ({0} connections); close some first")]
    TableFull(usize),
    /// The requested local port is zero or already connected to that destination.
    #[error("local port {0} is zero or already connected to that destination; choose another")]
    PortInUse(u16),
    /// No address of ours may send there: the host has none of the destination's family (an
    /// IPv6 destination on an IPv4-only host, or the other way round), or the destination
    /// never goes on a wire (loopback, IPv4-mapped, broadcast).
    #[error(
        "cannot connect to {0}: the host has no address to send there from (none of its family, or the address never goes on a wire)"
    )]
    NoSourceAddress(SocketAddr),
    /// Port 0 or an unspecified address.
    #[error("cannot connect to {0}: give a real address and a non-zero port")]
    InvalidAddress(SocketAddr),
}
