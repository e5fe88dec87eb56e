//! `bypass-device`: the bottom layer of bypass, what every other crate agrees on about
//! moving frames and telling time.
//!
//! - the [`Device`] trait every packet I/O backend implements, with [`DeviceInfo`] and
//!   [`ChecksumCaps`], and the [`Capture`] trait the host reports frames to, with [`Direction`];
//! - [`Instant`], the microsecond time the sans-IO core is driven with;
//! - the simulated link (`Link`, `LinkConfig`; feature `sim`): delay, bandwidth, loss,
//!   reordering, duplication and corruption from a seeded RNG, on virtual time, and
//!   [`mix`], which splits one run seed into independent streams;
//! - devices built on them: `MemoryLink` (feature `sim`: two `MemoryDevice`s joined by a
//!   pair of links, with the MAC addresses `MAC_A` and `MAC_B`), [`Impaired`] (loss, duplication and reordering in front of any device,
//!   as middleware) and [`ScriptedDevice`] (a device you drive by hand: frames into its
//!   inbox, the host's frames kept with their time; what tests, replay and the script runner
//!   use);
//! - recording and reading captures (feature `pcap`): `PcapNgCapture`, `read_capture`,
//!   `parse_capture`; live capture to a reader on a Unix socket (`live::LiveCapture`, with
//!   its `CaptureFilter`).
//!
//! Both features are on by default. `bypass-tcp` turns them off, so that the TCP core builds
//! with neither `rand` nor `pcap-file`, and asks for `sim` only with its own `sim` feature.
//!
//! Nothing here parses TCP or IP: frames are bytes. What a host and its device agree on
//! about them is here as plain facts ([`ChecksumCaps`]; [`SynCookieAnswer`], what a device
//! answers SYNs with on the host's behalf). `bypass-tcp` takes its [`Instant`] from
//! here, `bypass-stack` its [`Device`] and [`Capture`], and `bypass-io` adds the kernel-bypass
//! devices (AF_XDP, AF_PACKET) beside the ones here.
//!
//! Everything is re-exported at the crate root; `capture`, `device`, `link`, `live`, `seed`
//! and `time` are public as modules too, for the crates that name them by path.
//!
//! | file | concern |
//! |---|---|
//! | `device.rs` | the device trait, its facts and checksum capabilities |
//! | `capture.rs` | the capture hook |
//! | `time.rs` | virtual or wall-clock time as microseconds |
//! | `link.rs` | one direction of a simulated path |
//! | `seed.rs` | seed mixing |
//! | `memory.rs` | the in-memory link between two hosts, and its clock |
//! | `impair.rs` | impairment as middleware around any device |
//! | `scripted.rs` | the device driven by hand |
//! | `pcap.rs` | pcapng writing, pcap and pcapng reading |
//! | `live.rs` | live capture to a slow or vanishing reader, never blocking |
//!
//! # Example: two devices over a lossless 5 ms link, on virtual time
//!
//! ```
//! use std::time::Duration;
//!
//! use bypass_device::{Device, LinkConfig, MemoryLink};
//!
//! let link = LinkConfig::default().with_delay(Duration::from_millis(5));
//! let (mut a, mut b) = MemoryLink::pair(link, link, 7);
//! a.send(&mut |buf| {
//!     buf[..60].fill(0xab);
//!     60
//! })
//! .unwrap();
//! a.flush().unwrap();
//! a.clock().advance(Duration::from_millis(5));
//! assert_eq!(b.recv(8, &mut |frame| assert_eq!(frame, [0xab; 60])).unwrap(), 1);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// Modules other crates name by path (`bypass-tcp` re-exports `time` and uses `link` and
// `seed` in its simulator; `bypass-stack` re-exports `device` and `capture`); everything in
// them is also re-exported below.
pub mod capture;
pub mod device;
#[cfg(feature = "sim")]
pub mod link;
#[cfg(feature = "pcap")]
pub mod live;
pub mod seed;
pub mod time;

mod impair;
#[cfg(feature = "sim")]
mod memory;
#[cfg(feature = "pcap")]
mod pcap;
mod scripted;

pub use capture::{Capture, Direction, NoteBoard, Recorder};
pub use device::{ChecksumCaps, Device, DeviceInfo, Sleeper, SynCookieAnswer, Waker};
pub use impair::{DirectionStats, ImpairStats, Impaired, Impairment};
#[cfg(feature = "sim")]
pub use link::{AckCoalescing, Framing, Link, LinkConfig, LinkStats, Packet};
#[cfg(feature = "pcap")]
pub use live::{CaptureFilter, LiveCapture};
#[cfg(feature = "sim")]
pub use memory::{Clock, MAC_A, MAC_B, MemoryDevice, MemoryLink};
#[cfg(feature = "pcap")]
pub use pcap::{
    CaptureFile, CapturedFrame, PcapNgCapture, ReadCaptureError, SkippedFrame, parse_capture, read_capture,
};
pub use scripted::ScriptedDevice;
pub use seed::{mix, splitmix64};
pub use time::Instant;
