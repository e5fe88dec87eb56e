//! `bypass-stack`: the host around the TCP core: Ethernet, ARP and Neighbour Discovery, IPv4
//! and IPv6 (with fragment reassembly), ICMP, the connection table and listeners (with SYN
//! cookies), a socket-like API, and the poll loop that drives a [`Device`].
//!
//! [`Interface`] is the host without a device (frames in, frames out), testable on its own;
//! [`Stack`] binds it to a device and a clock and offers `listen`/`accept`/`connect`/
//! `read`/`write`, readiness and events, and blocking `std::io` adapters.
//!
//! The [`Device`] and [`Capture`] traits (with [`DeviceInfo`] and [`Direction`]) live in
//! `bypass-device`, the crate below this one and `bypass-tcp`; they are re-exported here, at
//! the crate root and as the modules [`device`] and [`capture`], so `bypass_stack::Device`
//! and `bypass_stack::device::Device` name the same trait as `bypass_device::Device`. The host
//! computes and verifies every checksum in software, whatever [`Device::checksums`] says.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod arp;
/// Capture hooks: re-exported from bypass-device.
pub use bypass_device::capture;
pub mod counters;
/// The device trait: re-exported from bypass-device.
pub use bypass_device::device;
pub mod fragments;
pub mod interface;
pub mod ndp;
mod ports;
pub mod stack;
pub mod syncookie;
mod timer_wheel;
pub mod wire;

pub use capture::{Capture, Direction};
pub use counters::{Counters, Drop};
pub use device::{ChecksumCaps, Device, DeviceInfo};
pub use interface::{ConnectError, Interface, ListenError, ListenerId, SocketId, StackConfig};
pub use stack::{Readiness, Stack, Stream, Time};
