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
}

impl DeviceInfo {
    /// Return the largest frame the device sends or receives: MTU plus the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu + 14
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
    /// of its receive windows within this (`StackConfig::window_budget`).
    fn rx_frames(&self) -> Option<usize> {
        None
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
}
