//! `bypass-stack`: the host around the TCP core: Ethernet, ARP, IPv4, ICMP echo, the
//! connection table and listeners, a socket-like API, and the poll loop that drives a
//! [`Device`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod device;

pub use device::{Device, DeviceInfo};
