//! `bypass-io`: the kernel-bypass packet devices behind [`bypass_device::Device`], and the
//! interface facts they need.
//!
//! - [`xdp`]: AF_XDP ([`xdp::XdpDevice`]), with the XDP program that steers our addresses'
//!   frames to its socket;
//! - AF_PACKET ([`PacketDevice`]), the fallback where AF_XDP is unavailable;
//! - [`netdev`]: what the kernel knows about an interface (addresses, offloads through the
//!   ethtool ioctl, the driver and its statistics).
//!
//! The in-memory link, impairment and captures are in `bypass-device`; the namespace labs,
//! the floor and replay in `bypass-lab`.
//!
//! | file | what |
//! |---|---|
//! | `xdp/` | [`xdp`]: the device (`mod.rs`), its UMEM (`umem.rs`) and socket rings (`socket.rs`), the XDP program (`program.rs`), errors (`error.rs`), the system calls (`sys.rs`) |
//! | `packet.rs` | [`PacketDevice`], [`PacketConfig`], [`PacketError`], [`PacketStats`]: AF_PACKET |
//! | `netdev.rs` | [`netdev`]: addresses, offloads, driver and statistics of an interface |
//! | `ifreq.rs` | an interface's index, hardware address and MTU, through the interface ioctl |
//! | `wake.rs` | the eventfd that wakes a device's wait from another thread |
//! | `alloc.rs` | [`return_large_blocks_when_freed`] |
//!
//! ```no_run
//! use bypass_device::Device;
//! use bypass_io::PacketDevice;
//!
//! let mut dev = PacketDevice::open("eth0")?;
//! println!("{}: MTU {}, {}", dev.info().name, dev.info().mtu, dev.info().mode);
//! dev.recv(64, &mut |frame| println!("{} bytes", frame.len()))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod alloc;
mod ifreq;
pub mod netdev;
mod packet;
mod wake;
pub mod xdp;

pub use alloc::return_large_blocks_when_freed;
pub use packet::{PacketConfig, PacketDevice, PacketError, PacketStats};
