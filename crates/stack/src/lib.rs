//! `bypass-stack`: the host around the TCP core: Ethernet, ARP and Neighbour Discovery, IPv4
//! and IPv6 (with fragment reassembly), ICMP, the connection table and listeners (with SYN
//! cookies), a socket-like API, and the poll loop that drives a
//! [`Device`](bypass_device::Device).
//!
//! [`Interface`] is the host without a device (frames in, frames out), testable on its own;
//! [`Stack`] binds it to a device and a clock and offers `listen`/`accept`/`connect`/
//! `read`/`write`, readiness and events, and blocking `std::io` adapters.
//!
//! The `Device` and `Capture` traits live in `bypass-device`, the crate below this one and
//! `bypass-tcp`: name them `bypass_device::Device` and `bypass_device::Capture`. The host
//! computes and verifies every checksum in software unless the device's
//! [`ChecksumCaps`](bypass_device::ChecksumCaps) say it verified them.
//!
//! | what | where | file |
//! |---|---|---|
//! | the host with a device, sockets, the poll loop | [`Stack`], [`Stream`], [`Readiness`], [`Time`] | `stack.rs` |
//! | the host without a device | [`Interface`] | `interface/mod.rs`, one file per layer |
//! | its settings, names and errors | [`StackConfig`], [`SocketId`], [`ListenerId`], [`ListenError`], [`ConnectError`] | `interface/{config,ids,errors}.rs` |
//! | the connection table | (internal) | `interface/{connections,table}.rs` |
//! | snapshots for operators (`bypass ss`, `bypass stat`) | [`ConnectionInfo`], [`ListenerInfo`], [`TcpTotals`] | `interface/snapshot.rs` |
//! | our addresses | [`Addresses`], [`Cidr`] | `addr.rs` |
//! | counters and drop reasons | [`Counters`], [`Drop`] | `counters.rs` |
//! | wire formats: Ethernet/IP header writers, ARP, NDP, ICMP | [`wire`] | `wire/` |
//! | ARP cache (RFC 826) | [`arp`] | `arp.rs` |
//! | Neighbour Discovery cache and DAD (RFC 4861, RFC 4862) | [`ndp`] | `ndp/{mod,cache,dad}.rs` |
//! | fragment reassembly (RFC 791, RFC 8200) | [`fragments`] | `fragments.rs` |
//! | SYN cookies, ephemeral ports, timer wheel, the connection table's hash | (internal) | `syncookie.rs`, `ports.rs`, `timer_wheel.rs`, `tuple_hash.rs` |
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr;
pub mod arp;
mod counters;
pub mod fragments;
mod interface;
pub mod ndp;
mod ports;
mod stack;
mod syncookie;
mod timer_wheel;
mod tuple_hash;
pub mod wire;

pub use addr::{Addresses, Cidr};
pub use counters::{Counters, Drop};
pub use interface::{
    ConnectError, ConnectionInfo, Interface, ListenError, ListenerId, ListenerInfo, SocketId, StackConfig,
    SynCookieAnswer, TcpTotals,
};
pub use stack::{CaptureId, Readiness, Stack, Stream, Time};
pub use syncookie::{MSS_TABLE as SYN_COOKIE_MSS, PERIOD_SECS as SYN_COOKIE_PERIOD_SECS};
