//! `bypass-stack`: the host around the TCP core: Ethernet, ARP, IPv4, ICMP echo, the
//! connection table and listeners (with SYN cookies), a socket-like API, and the poll loop
//! that drives a [`Device`].
//!
//! [`Interface`] is the host without a device (frames in, frames out), testable on its own;
//! [`Stack`] binds it to a device and a clock and offers `listen`/`accept`/`connect`/
//! `read`/`write`, readiness and events, and blocking `std::io` adapters.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod arp;
pub mod capture;
pub mod counters;
pub mod device;
pub mod fragments;
pub mod interface;
pub mod ndp;
mod ports;
pub mod stack;
pub mod syncookie;

pub use capture::{Capture, Direction};
pub use counters::{Counters, Drop};
pub use device::{Device, DeviceInfo};
pub use interface::{ConnectError, Interface, ListenError, ListenerId, SocketId, StackConfig};
pub use stack::{Readiness, Stack, Stream, Time};
