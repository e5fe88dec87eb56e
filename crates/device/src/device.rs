//! The one device trait every packet I/O backend implements.
//!
//! A device moves whole Ethernet frames. The stack's poll loop receives a batch, processes
//! it, queues its replies with [`Device::send`] and pushes them out with one
//! [`Device::flush`]. Frames are lent to closures rather than returned, so a backend can
//! hand out its own buffers (UMEM frames for AF_XDP, ring slots for AF_PACKET) without a
//! copy and without exposing their lifetime.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Facts about an opened device.
///
/// Build one with [`DeviceInfo::new`] (every checksum in software), and state what the
/// device verifies or computes itself in `checksums`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Interface name (or a label for in-memory devices).
    pub name: String,
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// The IP MTU: the largest IPv4 packet, Ethernet header excluded.
    pub mtu: usize,
    /// How the device moves packets, for people: for example
    /// `"AF_XDP, copy mode, driver (native) XDP, queue 0"`.
    pub mode: String,
    /// Which checksums the device verifies on receive and computes on transmit.
    pub checksums: ChecksumCaps,
}

impl DeviceInfo {
    /// Return the facts of a device named `name` with MAC address `mac`, IP MTU `mtu`, moving
    /// packets as `mode` says (for people).
    pub fn new(name: impl Into<String>, mac: [u8; 6], mtu: usize, mode: impl Into<String>) -> DeviceInfo {
        DeviceInfo { name: name.into(), mac, mtu, mode: mode.into(), checksums: ChecksumCaps::SOFTWARE }
    }

    /// Return the largest frame the device sends or receives: MTU plus the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu + 14
    }
}

/// Which checksums a device computes or verifies itself, so that the host need not.
///
/// Most devices of ours leave all of them to software: AF_XDP and AF_PACKET hand over frames
/// with the checksums they carried on the wire (the lab turns its kernel peer's offloads
/// off, so the peer's frames carry real checksums too), and the in-memory link and the
/// scripted device move bytes untouched. AF_XDP in copy mode can complete the checksums of
/// what it sends (`XdpConfig::tx_checksum_offload` in `bypass-io`, AF_XDP TX metadata) and
/// then states `tx_offload`. The host (`bypass-stack`) skips verifying what a device states
/// it verified (`rx_verified`), and writes only the pseudo-header sum of every TCP segment
/// it sends through a device that states `tx_offload`; a capture of such a device shows
/// those sums, as `tcpdump` does on a host whose NIC offloads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChecksumCaps {
    /// The device has verified the IPv4 header, TCP, UDP and ICMP checksums of every frame it
    /// delivers, and delivers none that fail (a NIC's `CHECKSUM_UNNECESSARY`): the host may
    /// skip verifying them on receive.
    pub rx_verified: bool,
    /// The device fills in the TCP and UDP checksums of the frames it sends (a NIC's
    /// `CHECKSUM_PARTIAL` transmit offload): the host may leave them for it, writing only the
    /// pseudo-header sum, on transmit.
    pub tx_offload: bool,
}

impl ChecksumCaps {
    /// Everything in software: the device verifies nothing and computes nothing.
    pub const SOFTWARE: ChecksumCaps = ChecksumCaps { rx_verified: false, tx_offload: false };
}

/// What a device needs to answer SYNs with the host's own SYN cookies (RFC 4987 section
/// 3.6), so that a SYN it answers never reaches the host: the cookies' SipHash key, and the
/// MSS and unscaled window the host's own cookie SYN-ACKs announce for each family. The host
/// (`bypass-stack`'s `StackConfig::syn_cookie_answer`) makes it; a device that can answer
/// SYNs (`bypass-io`'s XDP program, `XdpConfig::syn_cookies`) takes it. Its `Debug` leaves
/// the key out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SynCookieAnswer {
    /// The SipHash key of the host's cookies.
    pub key: [u8; 16],
    /// The MSS announced over IPv4.
    pub mss4: u16,
    /// The window announced over IPv4 (unscaled): the host's initial receive window.
    pub window4: u16,
    /// The MSS announced over IPv6.
    pub mss6: u16,
    /// The window announced over IPv6 (unscaled).
    pub window6: u16,
}

impl core::fmt::Debug for SynCookieAnswer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SynCookieAnswer")
            .field("mss4", &self.mss4)
            .field("window4", &self.window4)
            .field("mss6", &self.mss6)
            .field("window6", &self.window6)
            .finish_non_exhaustive()
    }
}

/// A source and sink of Ethernet frames.
pub trait Device {
    /// Return facts about the device.
    fn info(&self) -> &DeviceInfo;

    /// Receive up to `budget` frames, calling `on_frame` with each. The slice is valid only
    /// during the call. Return how many frames were received; `Ok(0)` when none is waiting
    /// (never blocks).
    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize>;

    /// Queue one frame: `fill` writes it into a buffer of at least `info().max_frame()`
    /// bytes and returns its length; 0 cancels, and the buffer goes back unused. Return
    /// `Ok(true)` once `fill` has run (cancelled or not) and `Ok(false)`, without calling
    /// `fill`, when no transmit buffer is free; `flush` and try again later.
    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool>;

    /// Push queued frames to the wire (one system call per batch where the backend needs
    /// one) and reclaim buffers of frames already sent. A device that cannot take every
    /// frame now keeps the rest queued for the next call, so callers flush again even when
    /// they queued nothing new; a call with nothing queued must be cheap.
    fn flush(&mut self) -> io::Result<()>;

    /// Block until a frame may be waiting or `timeout` passes (interrupt-driven mode).
    /// `None` waits without limit. Spurious wake-ups are allowed.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Return the file descriptor to watch for readability, where the device has one.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    /// Return the device's own counters, drops below the stack above all (ring overflows,
    /// kernel-side drops), as `(name, value)` pairs for reports.
    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Return how many system calls the device has made since it was opened (sends, wake-ups,
    /// waits), for cost reports; 0 for devices that make none. Cheap: a counter, no call.
    fn syscalls(&self) -> u64 {
        0
    }

    /// Return how many received frames the device holds for the stack before it must drop
    /// (its receive ring: AF_XDP's fill and RX rings, AF_PACKET's RX ring), where it has a
    /// fixed one; `None` for devices that queue without such a limit. The stack keeps the sum
    /// of its receive windows within half of this (`StackConfig::window_budget`) and its
    /// data in flight within a quarter (`StackConfig::flight_budget`), so that what its
    /// peers send and the acknowledgments they return fit together.
    fn rx_frames(&self) -> Option<usize> {
        None
    }

    /// Return which checksums the device verifies on receive and computes on transmit:
    /// what its [`DeviceInfo::checksums`] states ([`ChecksumCaps::SOFTWARE`] for every
    /// device here today).
    fn checksums(&self) -> ChecksumCaps {
        self.info().checksums
    }

    /// Return a handle that ends a [`wait`](Device::wait) in progress from another thread
    /// (an application handing the stack's thread new work), where the device can be woken;
    /// `None` when it cannot, and a waiting thread must bound its waits instead. A wake with
    /// no wait in progress makes the next `wait` return at once.
    fn waker(&mut self) -> Option<Waker> {
        None
    }

    /// Return a handle that blocks until a frame may be waiting, a [`Waker`] of this device
    /// rings, or a timeout passes, without borrowing the device: a thread can watch the
    /// device while others use it (the in-thread runtime's helper watches it while no
    /// application thread is inside the stack). `None` when the device cannot be watched so;
    /// a watcher then bounds its sleeps instead. Spurious returns are allowed.
    fn sleeper(&mut self) -> Option<Sleeper> {
        None
    }
}

/// Ends a device's [`wait`](Device::wait) from another thread: see [`Device::waker`].
#[derive(Clone)]
pub struct Waker(std::sync::Arc<dyn Fn() + Send + Sync>);

impl Waker {
    /// Return a waker that runs `wake` (which must make the device's `wait` return).
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Waker {
        Waker(std::sync::Arc::new(wake))
    }

    /// Wake the device: its `wait` in progress, or else its next one, returns.
    pub fn wake(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

/// Watches a device from a thread that does not hold it: see [`Device::sleeper`].
#[derive(Clone)]
pub struct Sleeper(std::sync::Arc<dyn Fn(Option<Duration>) + Send + Sync>);

impl Sleeper {
    /// Return a sleeper that runs `sleep` (which must block until the device may have a
    /// frame, its waker rings, or the timeout passes; `None` waits without limit).
    pub fn new(sleep: impl Fn(Option<Duration>) + Send + Sync + 'static) -> Sleeper {
        Sleeper(std::sync::Arc::new(sleep))
    }

    /// Block until the device may have a frame, its [`Waker`] rings, or `timeout` passes.
    pub fn sleep(&self, timeout: Option<Duration>) {
        (self.0)(timeout)
    }
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sleeper")
    }
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn info(&self) -> &DeviceInfo {
        (**self).info()
    }
    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        (**self).recv(budget, on_frame)
    }
    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        (**self).send(fill)
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).wait(timeout)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        (**self).raw_fd()
    }
    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        (**self).device_counters()
    }
    fn syscalls(&self) -> u64 {
        (**self).syscalls()
    }
    fn rx_frames(&self) -> Option<usize> {
        (**self).rx_frames()
    }
    fn checksums(&self) -> ChecksumCaps {
        (**self).checksums()
    }
    fn waker(&mut self) -> Option<Waker> {
        (**self).waker()
    }
    fn sleeper(&mut self) -> Option<Sleeper> {
        (**self).sleeper()
    }
}
