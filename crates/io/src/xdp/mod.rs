//! AF_XDP: frames go between the NIC queue and the stack through shared memory rings, with no
//! system call per packet and no socket buffers.
//!
//! [`XdpDevice::open`] loads a small XDP program (see [`program`]) that sends the frames the
//! stack owns (ARP for its IPv4 addresses, IPv4 and IPv6 to its addresses, and the Neighbour
//! Discovery messages it needs) to an AF_XDP socket and passes everything else to the kernel,
//! so the host stays reachable. The program is attached through a BPF link: it goes away when
//! the device is dropped or the process dies, even by SIGKILL, and a restart never needs
//! manual cleanup.
//!
//! ```no_run
//! use std::net::{Ipv4Addr, Ipv6Addr};
//!
//! use bypass_io::xdp::{XdpConfig, XdpDevice};
//! use bypass_device::Device;
//!
//! // Dual stack: one IPv4 and one IPv6 address on the interface.
//! let config = XdpConfig::new("veth0", Ipv4Addr::new(10, 77, 0, 2)).with_addr("fd00:77::2".parse::<Ipv6Addr>()?);
//! let mut dev = XdpDevice::open(config)?;
//! println!("{}", dev.info().mode); // e.g. "AF_XDP, copy mode, driver (native) XDP, queue 0"
//! dev.recv(64, &mut |frame| println!("{} bytes", frame.len()))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layout: `sys` holds every system call and all `unsafe`; [`program`] the eBPF program;
//! [`umem`] and [`socket`] the safe frame-token API; this module the [`Device`].

mod error;
pub mod program;
pub mod socket;
mod sys;
pub mod umem;

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use bypass_device::{Device, DeviceInfo};

use crate::ifreq;

pub use error::XdpError;
pub use program::{AttachMode, MAX_ADDRS_PER_FAMILY, XdpProgram};
pub use socket::XskSocket;
pub use sys::XdpStatistics;
pub use umem::{Frame, Umem};

use socket::BindOptions;
use sys::RingSizes;

/// Where to run the XDP program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Driver (native) mode if the driver supports it, else generic mode.
    #[default]
    Auto,
    /// Driver (native) mode only: fastest; needs driver support.
    Driver,
    /// Generic (skb) mode only: works with any driver, slower.
    Generic,
}

/// Whether to map the NIC's buffers straight into the UMEM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy if the driver supports it in the obtained XDP mode, else copy mode.
    #[default]
    Auto,
    /// Copy mode: the kernel copies frames between its buffers and the UMEM.
    Off,
    /// Zero-copy or fail.
    Required,
}

/// How to open an [`XdpDevice`]. Start from [`XdpConfig::new`] and change fields:
/// `XdpConfig { mode: XdpMode::Generic, ..XdpConfig::new("eth0", ip) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpConfig {
    /// Interface name, in the calling thread's network namespace.
    pub iface: String,
    /// Queue to bind (ignored by [`XdpDevice::open_queues`]).
    pub queue: u32,
    /// The stack's addresses, IPv4 and IPv6: the traffic redirected to the device (at least
    /// one; at most [`MAX_ADDRS_PER_FAMILY`] distinct addresses of each family).
    pub addrs: Vec<IpAddr>,
    /// Where to run the XDP program.
    pub mode: XdpMode,
    /// Zero-copy or copy mode.
    pub zero_copy: ZeroCopy,
    /// UMEM frames per queue: `fill_size` of them receive, the rest send.
    pub frame_count: u32,
    /// Bytes per frame: 2048 or 4096.
    pub frame_size: u32,
    /// Fill ring entries (a power of two).
    pub fill_size: u32,
    /// Completion ring entries (a power of two).
    pub completion_size: u32,
    /// RX ring entries (a power of two).
    pub rx_size: u32,
    /// TX ring entries (a power of two).
    pub tx_size: u32,
    /// Busy-poll the device from `recv` (`SO_PREFER_BUSY_POLL`): lowest latency, one core spinning.
    pub busy_poll: bool,
}

impl XdpConfig {
    /// Return the defaults for `iface` and the one address `ip` (an [`Ipv4Addr`](std::net::Ipv4Addr),
    /// [`Ipv6Addr`](std::net::Ipv6Addr) or [`IpAddr`]): queue 0, automatic modes, 8192 frames
    /// of 4096 bytes (32 MiB), fill and RX rings of 4096 entries, completion and TX rings of
    /// 2048, no busy polling.
    pub fn new(iface: &str, ip: impl Into<IpAddr>) -> XdpConfig {
        XdpConfig {
            iface: iface.to_string(),
            queue: 0,
            addrs: vec![ip.into()],
            mode: XdpMode::Auto,
            zero_copy: ZeroCopy::Auto,
            frame_count: 8192,
            frame_size: 4096,
            fill_size: 4096,
            completion_size: 2048,
            rx_size: 4096,
            tx_size: 2048,
            busy_poll: false,
        }
    }

    /// Return the configuration with `ip` added to the stack's addresses.
    pub fn with_addr(mut self, ip: impl Into<IpAddr>) -> XdpConfig {
        self.addrs.push(ip.into());
        self
    }

    fn validate(&self) -> Result<(), XdpError> {
        program::check_addrs(&self.addrs)?;
        let bad = |msg: String| Err(XdpError::InvalidConfig(msg));
        for (name, n) in [
            ("fill_size", self.fill_size),
            ("completion_size", self.completion_size),
            ("rx_size", self.rx_size),
            ("tx_size", self.tx_size),
        ] {
            if !n.is_power_of_two() {
                return bad(format!("{name} must be a power of two, not {n}"));
            }
        }
        if !matches!(self.frame_size, 2048 | 4096) {
            return bad(format!("frame_size must be 2048 or 4096, not {}", self.frame_size));
        }
        if self.frame_count <= self.fill_size {
            return bad(format!(
                "frame_count ({}) must exceed fill_size ({}): fill_size frames receive, the rest send",
                self.frame_count, self.fill_size
            ));
        }
        Ok(())
    }
}

/// Batch size for busy polling and the receive scratch list.
const BUSY_POLL_BUDGET: u32 = 64;

/// An AF_XDP socket on one queue of an interface, as a [`Device`].
pub struct XdpDevice {
    // Fields drop in order: the socket closes before the (possibly last) program reference
    // detaches the program.
    socket: XskSocket,
    program: Arc<XdpProgram>,
    info: DeviceInfo,
    /// Frames taken from the RX ring during one `recv` (capacity: the RX ring size; no
    /// allocation per packet).
    rx_batch: Vec<Frame>,
    busy_poll: bool,
    /// Frames the kernel can deliver before it drops: the smaller of the fill and RX rings.
    rx_frames: usize,
    /// Polled beside the socket once a [`Waker`](bypass_device::Waker) was asked for.
    wake: crate::wake::WakeSlot,
}

impl XdpDevice {
    /// Attach the steering program to `config.iface` and open an AF_XDP socket on
    /// `config.queue`. The interface is looked up in the calling thread's network namespace.
    pub fn open(config: XdpConfig) -> Result<XdpDevice, XdpError> {
        let queue = config.queue;
        let mut devices = XdpDevice::open_queues(config, &[queue])?;
        Ok(devices.remove(0))
    }

    /// Attach one steering program (one XSKMAP) to `config.iface` and open one AF_XDP socket,
    /// with its own UMEM, per queue in `queues`, returning one device per queue in that order.
    pub fn open_queues(config: XdpConfig, queues: &[u32]) -> Result<Vec<XdpDevice>, XdpError> {
        config.validate()?;
        let Some(&max_queue) = queues.iter().max() else {
            return Err(XdpError::InvalidConfig("open_queues needs at least one queue".into()));
        };
        if (1..queues.len()).any(|i| queues[..i].contains(&queues[i])) {
            return Err(XdpError::InvalidConfig(format!("queues must be distinct: {queues:?}")));
        }
        let iface = config.iface.as_str();
        let no_iface = |source| XdpError::NoSuchInterface { iface: iface.to_string(), source };
        let ifindex = ifreq::index(iface).map_err(no_iface)?;
        let (_, mac) = ifreq::hardware_address(iface).map_err(no_iface)?;
        let mtu = ifreq::mtu(iface).map_err(no_iface)?;
        let max_mtu = config.frame_size - sys::XDP_PACKET_HEADROOM - 14;
        if mtu > max_mtu {
            return Err(XdpError::MtuTooLargeForFrame {
                iface: iface.into(),
                mtu,
                frame_size: config.frame_size,
                max_mtu,
            });
        }
        if let Err(e) = sys::raise_memlock() {
            // Normal without CAP_SYS_RESOURCE; root's CAP_IPC_LOCK still lets the UMEM be pinned.
            log::debug!("setrlimit(RLIMIT_MEMLOCK) failed ({e}); continuing");
        }

        let program = Arc::new(XdpProgram::attach(iface, ifindex, &config.addrs, config.mode, max_queue + 1)?);
        let want_zero_copy = match config.zero_copy {
            ZeroCopy::Off => false,
            ZeroCopy::Required => true,
            // Zero-copy sockets receive only from driver-mode XDP.
            ZeroCopy::Auto => program.mode() == AttachMode::Driver,
        };
        if config.zero_copy == ZeroCopy::Required && program.mode() == AttachMode::Generic {
            return Err(XdpError::ZeroCopyUnsupported {
                iface: iface.into(),
                queue: queues[0],
                source: io::Error::new(io::ErrorKind::Unsupported, "zero-copy needs driver-mode XDP"),
            });
        }
        let rings = RingSizes {
            fill: config.fill_size,
            completion: config.completion_size,
            rx: config.rx_size,
            tx: config.tx_size,
        };
        let options = BindOptions {
            frame_count: config.frame_count,
            frame_size: config.frame_size,
            rings,
            zero_copy: want_zero_copy,
        };

        let mut devices = Vec::with_capacity(queues.len());
        for &queue in queues {
            let socket = match XskSocket::open(iface, ifindex, queue, options) {
                Err(XdpError::ZeroCopyUnsupported { source, .. }) if config.zero_copy == ZeroCopy::Auto => {
                    log::debug!("zero-copy refused on {iface} queue {queue} ({source}); using copy mode");
                    XskSocket::open(iface, ifindex, queue, BindOptions { zero_copy: false, ..options })?
                }
                other => other?,
            };
            let busy_poll = config.busy_poll
                && match socket.enable_busy_poll(BUSY_POLL_BUDGET) {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("busy polling unavailable on {iface} queue {queue} ({e}); using interrupts");
                        false
                    }
                };
            program.register(queue, socket.fd())?;
            let mode = format!(
                "AF_XDP, {} mode, {}, queue {queue}{}",
                if socket.zero_copy() { "zero-copy" } else { "copy" },
                program.mode().describe(),
                if busy_poll { ", busy polling" } else { "" },
            );
            log::debug!("opened {iface}: {mode}");
            devices.push(XdpDevice {
                socket,
                program: Arc::clone(&program),
                // Checksums in software: copy mode hands over the bytes alone, without the
                // driver's receive verdict, and asks for no transmit offload.
                info: DeviceInfo::new(iface, mac, mtu as usize, mode),
                rx_batch: Vec::with_capacity(config.rx_size as usize),
                busy_poll,
                rx_frames: config.fill_size.min(config.rx_size) as usize,
                wake: Default::default(),
            });
        }
        Ok(devices)
    }

    /// Return the program shared by the devices of the interface.
    pub fn program(&self) -> &Arc<XdpProgram> {
        &self.program
    }

    /// Return the socket.
    pub fn socket(&self) -> &XskSocket {
        &self.socket
    }

    /// Return the socket, to move frames yourself (bypassing [`Device`]).
    pub fn socket_mut(&mut self) -> &mut XskSocket {
        &mut self.socket
    }

    /// Return the queue this device is bound to.
    pub fn queue(&self) -> u32 {
        self.socket.queue()
    }

    /// Return the kernel's drop counters for this device's socket.
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        self.socket.statistics()
    }
}

// A device opened on a thread inside a network namespace may be used from any thread.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<XdpDevice>();
};

impl Device for XdpDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn rx_frames(&self) -> Option<usize> {
        Some(self.rx_frames)
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if self.busy_poll {
            self.socket.wake_rx()?;
        }
        let consumed = self.socket.receive(budget, &mut self.rx_batch);
        if consumed == 0 {
            if !self.busy_poll && self.socket.fill_needs_wakeup() {
                self.socket.wake_rx()?;
            }
            return Ok(0);
        }
        for frame in &self.rx_batch {
            log::trace!("{}: received {} bytes", self.info.name, frame.len());
            on_frame(self.socket.umem().data(frame));
        }
        let received = self.rx_batch.len();
        self.socket.recycle(&mut self.rx_batch);
        Ok(received)
    }

    /// Return `Ok(true)` whenever `fill` was called, including when it cancelled with 0.
    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let Some(mut frame) = self.socket.alloc_tx() else {
            return Ok(false);
        };
        let buffer = self.socket.umem_mut().buffer_mut(&mut frame);
        let capacity = buffer.len();
        let len = fill(buffer);
        if len == 0 {
            self.socket.umem_mut().free_tx(frame);
            return Ok(true);
        }
        if len > capacity {
            self.socket.umem_mut().free_tx(frame);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("send: fill returned {len} bytes for a {capacity}-byte buffer"),
            ));
        }
        log::trace!("{}: queued {len} bytes", self.info.name);
        if let Err(frame) = self.socket.transmit(frame, len) {
            // Unreachable: alloc_tx checked for room in the TX ring.
            self.socket.umem_mut().free_tx(frame);
            return Ok(false);
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush_tx()
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if !self.socket.rx_is_empty() {
            return Ok(());
        }
        let ms = match timeout {
            None => -1,
            // Round up so a short timeout sleeps instead of spinning.
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
        };
        self.socket.count_syscall();
        let result = match sys::poll_either(self.socket.fd(), self.wake.fd(), ms) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        };
        self.wake.drain();
        result
    }

    fn waker(&mut self) -> Option<bypass_device::Waker> {
        self.wake.waker(&self.info.name)
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.socket.fd().as_raw_fd())
    }

    fn syscalls(&self) -> u64 {
        self.socket.syscalls()
    }

    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        match self.statistics() {
            Ok(st) => vec![
                ("rx_dropped", st.rx_dropped),
                ("rx_invalid_descs", st.rx_invalid_descs),
                ("rx_ring_full", st.rx_ring_full),
                ("rx_fill_ring_empty", st.rx_fill_ring_empty_descs),
                ("tx_invalid_descs", st.tx_invalid_descs),
                ("tx_ring_empty", st.tx_ring_empty_descs),
            ],
            Err(e) => {
                log::debug!("XDP_STATISTICS: {e}");
                Vec::new()
            }
        }
    }
}

/// Run `op` again while it fails with EBUSY, for up to a second.
///
/// When a process that had the interface dies (even by SIGKILL), the kernel releases its
/// AF_XDP socket and UMEM in deferred work, so an immediate restart can briefly find the
/// queue busy; a few milliseconds later it is free. A queue held by a live process stays
/// busy, and the error is reported after the second.
pub(crate) fn retry_busy<T>(mut op: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            result => return result,
        }
    }
}
