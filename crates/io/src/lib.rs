//! `bypass-io`: packet I/O backends behind [`bypass_stack::Device`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod floor;
pub mod impair;
pub mod memory;
pub mod netdev;
pub mod packet;
pub mod pcap;
pub mod replay;
pub mod testlab;
pub mod xdp;

pub use memory::{Clock, MemoryDevice, MemoryLink};
pub use packet::{PacketConfig, PacketDevice, PacketError, PacketStats};
pub use pcap::{CaptureFile, CapturedFrame, PcapNgCapture, ReadCaptureError, parse_capture, read_capture};
