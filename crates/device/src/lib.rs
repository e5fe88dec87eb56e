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
//!   pair of links), [`Impaired`] (loss, duplication and reordering in front of any device,
//!   as middleware) and [`ScriptedDevice`] (a device you drive by hand: frames into its
//!   inbox, the host's frames kept with their time; what tests, replay and the script runner
//!   use);
//! - recording and reading captures (feature `pcap`): `PcapNgCapture`, `read_capture`,
//!   `parse_capture`.
//!
//! Both features are on by default. `bypass-tcp` turns them off, so that the TCP core builds
//! with neither `rand` nor `pcap-file`, and asks for `sim` only with its own `sim` feature.
//!
//! Nothing here knows TCP or IP: frames are bytes. `bypass-tcp` takes its [`Instant`] from
//! here, `bypass-stack` its [`Device`] and [`Capture`], and `bypass-io` adds the kernel-bypass
//! devices (AF_XDP, AF_PACKET) beside the ones here.
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

pub mod capture;
pub mod device;
pub mod impair;
#[cfg(feature = "sim")]
pub mod link;
#[cfg(feature = "sim")]
pub mod memory;
#[cfg(feature = "pcap")]
pub mod pcap;
pub mod scripted;
pub mod seed;
pub mod time;

pub use capture::{Capture, Direction, NoteBoard, Recorder};
pub use device::{ChecksumCaps, Device, DeviceInfo, Sleeper, Waker};
pub use impair::{ImpairStats, Impaired, Impairment};
#[cfg(feature = "sim")]
pub use link::{Link, LinkConfig, LinkStats, Packet};
#[cfg(feature = "sim")]
pub use memory::{Clock, MemoryDevice, MemoryLink};
#[cfg(feature = "pcap")]
pub use pcap::{
    CaptureFile, CapturedFrame, PcapNgCapture, ReadCaptureError, SkippedFrame, parse_capture, read_capture,
};
pub use scripted::ScriptedDevice;
pub use seed::mix;
pub use time::Instant;
