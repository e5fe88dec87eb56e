//! AF_PACKET backend: the fallback where AF_XDP is unavailable ([`PacketDevice`]).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use bypass_device::{Device, DeviceInfo};

use crate::ifreq;

/// How a [`PacketDevice`] sizes its buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketConfig {
    /// Slots in the receive ring (rounded up to fill whole ring blocks).
    pub rx_frames: usize,
    /// Frames [`Device::send`] can queue before a [`Device::flush`].
    pub tx_frames: usize,
    /// Hand sent frames straight to the driver, skipping the queueing discipline
    /// (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
}

impl Default for PacketConfig {
    /// Return 1024 receive slots, 256 transmit frames and qdisc bypass on.
    fn default() -> Self {
        PacketConfig { rx_frames: 4096, tx_frames: 256, qdisc_bypass: true }
    }
}

/// Why [`PacketDevice::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// The interface does not exist in this network namespace.
    #[error("no network interface named {iface:?} in this network namespace: check the name with `ip link`")]
    NoSuchInterface {
        /// The name asked for.
        iface: String,
        /// The lookup's error.
        #[source]
        source: io::Error,
    },
    /// The process may not open raw sockets.
    #[error("opening an AF_PACKET socket was refused: run as root (AF_PACKET needs CAP_NET_RAW)")]
    NotPermitted {
        /// The `socket(2)` error.
        #[source]
        source: io::Error,
    },
    /// The interface does not carry Ethernet frames.
    #[error("{iface} is not an Ethernet interface (ARP hardware type {hatype}): use an Ethernet or veth interface")]
    NotEthernet {
        /// The interface.
        iface: String,
        /// Its ARP hardware type (`ARPHRD_*`).
        hatype: u16,
    },
    /// A setup step failed.
    #[error("could not {action} on {iface}: check that the kernel has AF_PACKET with TPACKET_V2 rings (Linux 4.20+)")]
    Setup {
        /// The interface.
        iface: String,
        /// What was being attempted.
        action: &'static str,
        /// The system call's error.
        #[source]
        source: io::Error,
    },
}

/// Counters of a [`PacketDevice`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames handed to `recv`'s closure.
    pub rx_frames: u64,
    /// Frames taken from the ring but dropped: truncated to fit a slot (a GRO/GSO super-frame
    /// from a peer with offloads on) or tagged with a VLAN.
    pub rx_dropped: u64,
    /// Frames the kernel dropped because the receive ring was full.
    pub rx_ring_full: u64,
    /// Frames the kernel accepted for transmission.
    pub tx_frames: u64,
    /// Frames the kernel refused (`ENOBUFS`, `EMSGSIZE`, ...), dropped.
    pub tx_dropped: u64,
    /// System calls made to move frames: `sendmmsg(2)` batches and `ppoll(2)` waits (the
    /// receive ring needs none).
    pub syscalls: u64,
}

/// Frames per `sendmmsg(2)` call.
const TX_BATCH: usize = 64;

/// An Ethernet interface driven through an `AF_PACKET` socket with a `TPACKET_V2` receive ring
/// and batched `sendmmsg(2)` transmission: the fallback where AF_XDP is unavailable.
///
/// It opens a raw `AF_PACKET` socket bound to one interface and moves frames in
/// batches:
///
/// - **RX: a `TPACKET_V2` ring** mapped into our memory. The kernel copies each frame into a
///   slot and flips the slot's status word; [`Device::recv`] reads ready slots and hands them
///   back, with no system call at all while frames keep coming. `TPACKET_V3` was the other
///   candidate: it packs frames into blocks and hands a block over only when it is full or its
///   retire timer (whole milliseconds) fires, which adds up to that timer to every frame of a
///   sparse flow, a TCP handshake for one. libpcap picks V2 over V3 in immediate mode for the
///   same reason.
/// - **TX: a staging area flushed with one `sendmmsg(2)`** per batch of up to 64 frames. The
///   kernel copies each frame once. A `PACKET_TX_RING` would save that copy, but measured on a
///   veth it was no faster (the copy is small next to the per-frame socket-buffer work), and
///   the staging area has no slot shared with the kernel whose reuse depends on when the kernel
///   frees a socket buffer.
///
/// An AF_PACKET socket sees every frame on the interface, including the ones the kernel
/// handles itself; that is inherent. Give the stack an address the kernel does not have on
/// that interface (ideally no kernel address at all, and IPv6 off) so the kernel ignores the
/// stack's traffic instead of answering it with resets. Frames this socket sends are not
/// looped back to it (`PACKET_IGNORE_OUTGOING`), and with `qdisc_bypass` they skip the
/// interface's queueing discipline, so `tcpdump` on this interface does not see them either:
/// capture on the peer.
#[derive(Debug)]
pub struct PacketDevice {
    socket: sys::Socket,
    rx: sys::RxRing,
    rx_head: usize,
    /// `tx_frames` slots of `max_frame` bytes, used as a FIFO.
    tx_buf: Box<[u8]>,
    tx_len: Box<[usize]>,
    /// Index of the oldest queued frame.
    tx_first: usize,
    /// Frames queued and not yet accepted by the kernel.
    tx_queued: usize,
    info: DeviceInfo,
    stats: PacketStats,
    /// Polled beside the socket once a [`Waker`](bypass_device::Waker) was asked for.
    wake: crate::wake::WakeSlot,
}

impl PacketDevice {
    /// Open `iface` with the default [`PacketConfig`].
    pub fn open(iface: &str) -> Result<PacketDevice, PacketError> {
        PacketDevice::open_with(iface, &PacketConfig::default())
    }

    /// Open `iface` in the calling thread's network namespace.
    pub fn open_with(iface: &str, config: &PacketConfig) -> Result<PacketDevice, PacketError> {
        let ifindex =
            ifreq::index(iface).map_err(|source| PacketError::NoSuchInterface { iface: iface.to_owned(), source })?;
        let setup = |action| move |source| PacketError::Setup { iface: iface.to_owned(), action, source };

        // Protocol 0 receives nothing until bind, so no frame from another interface slips
        // into the ring in between.
        let socket = sys::Socket::packet().map_err(|source| match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => PacketError::NotPermitted { source },
            _ => setup("open an AF_PACKET socket")(source),
        })?;
        let (hatype, mac) = ifreq::hardware_address(iface).map_err(setup("read the MAC address (SIOCGIFHWADDR)"))?;
        if hatype != libc::ARPHRD_ETHER {
            return Err(PacketError::NotEthernet { iface: iface.to_owned(), hatype });
        }
        let mtu = ifreq::mtu(iface).map_err(setup("read the MTU (SIOCGIFMTU)"))?;
        let info_mtu = mtu as usize;
        let max_frame = info_mtu + 14;

        socket
            .set_int(libc::PACKET_VERSION, libc::tpacket_versions::TPACKET_V2 as i32)
            .map_err(setup("select TPACKET_V2"))?;
        socket.set_int(libc::PACKET_IGNORE_OUTGOING, 1).map_err(setup("set PACKET_IGNORE_OUTGOING"))?;
        if config.qdisc_bypass {
            socket.set_int(libc::PACKET_QDISC_BYPASS, 1).map_err(setup("set PACKET_QDISC_BYPASS"))?;
        }
        let rx =
            sys::RxRing::new(&socket, max_frame, config.rx_frames.max(1)).map_err(setup("map the receive ring"))?;
        socket.bind(ifindex, libc::ETH_P_ALL as u16).map_err(setup("bind the socket"))?;

        let tx_frames = config.tx_frames.max(1);
        let mode = format!(
            "AF_PACKET, TPACKET_V2 RX ring ({} slots), sendmmsg TX ({tx_frames} frames){}",
            rx.frames(),
            if config.qdisc_bypass { ", qdisc bypass" } else { "" }
        );
        log::debug!("opened {iface}: {mode}, MTU {mtu}");
        Ok(PacketDevice {
            socket,
            rx,
            rx_head: 0,
            tx_buf: vec![0; tx_frames * max_frame].into_boxed_slice(),
            tx_len: vec![0; tx_frames].into_boxed_slice(),
            tx_first: 0,
            tx_queued: 0,
            // Checksums in software: neither the ring's TP_STATUS_CSUM_VALID nor the socket's
            // PACKET_VNET_HDR offloads are used.
            info: DeviceInfo::new(iface, mac, info_mtu, mode),
            stats: PacketStats::default(),
            wake: Default::default(),
        })
    }

    /// Return the counters, folding in the kernel's ring-overflow count.
    pub fn stats(&mut self) -> PacketStats {
        match self.socket.take_drops() {
            Ok(drops) => self.stats.rx_ring_full += u64::from(drops),
            Err(e) => log::debug!("{}: PACKET_STATISTICS: {e}", self.info.name),
        }
        self.stats
    }

    /// Return the byte range of transmit slot `slot`.
    fn tx_slot(&self, slot: usize) -> std::ops::Range<usize> {
        let size = self.info.max_frame();
        slot * size..(slot + 1) * size
    }
}

impl Device for PacketDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn rx_frames(&self) -> Option<usize> {
        Some(self.rx.frames())
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut delivered = 0;
        for _ in 0..budget {
            let Some(frame) = self.rx.frame(self.rx_head) else { break };
            if frame.data.len() < frame.wire_len {
                self.stats.rx_dropped += 1;
                log::debug!(
                    "{}: dropped a {}-byte frame truncated to {} (turn off GRO/GSO on the peer)",
                    self.info.name,
                    frame.wire_len,
                    frame.data.len()
                );
            } else if frame.vlan_id != 0 {
                self.stats.rx_dropped += 1;
                log::debug!("{}: dropped a frame of VLAN {}", self.info.name, frame.vlan_id);
            } else {
                log::trace!("{}: received {} bytes", self.info.name, frame.data.len());
                on_frame(frame.data);
                delivered += 1;
            }
            self.rx.release(self.rx_head);
            self.rx_head = (self.rx_head + 1) % self.rx.frames();
        }
        self.stats.rx_frames += delivered as u64;
        Ok(delivered)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let slots = self.tx_len.len();
        if self.tx_queued == slots {
            return Ok(false);
        }
        let slot = (self.tx_first + self.tx_queued) % slots;
        let range = self.tx_slot(slot);
        let buf = &mut self.tx_buf[range];
        let len = fill(buf);
        if len == 0 {
            return Ok(true);
        }
        if !(14..=buf.len()).contains(&len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a frame must be 14 to {} bytes, not {len}", buf.len()),
            ));
        }
        self.tx_len[slot] = len;
        self.tx_queued += 1;
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        let slots = self.tx_len.len();
        while self.tx_queued > 0 {
            let n = self.tx_queued.min(TX_BATCH);
            let mut frames: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
            for (k, frame) in frames[..n].iter_mut().enumerate() {
                let slot = (self.tx_first + k) % slots;
                *frame = &self.tx_buf[self.tx_slot(slot)][..self.tx_len[slot]];
            }
            self.stats.syscalls += 1;
            let (done, result) = match self.socket.send_batch(&frames[..n]) {
                Ok(sent) => {
                    self.stats.tx_frames += sent as u64;
                    (sent, Ok(()))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    // The first frame failed: drop it so one bad frame cannot wedge the queue.
                    self.stats.tx_dropped += 1;
                    log::debug!("{}: dropped a {}-byte frame: {e}", self.info.name, self.tx_len[self.tx_first]);
                    let fatal = !matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EMSGSIZE | libc::EINVAL));
                    (1, if fatal { Err(e) } else { Ok(()) })
                }
            };
            self.tx_first = (self.tx_first + done) % slots;
            self.tx_queued -= done;
            result?;
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if self.rx.frame(self.rx_head).is_some() {
            return Ok(());
        }
        self.stats.syscalls += 1;
        let result = self.socket.poll_readable(timeout, self.wake.fd());
        self.wake.drain();
        result
    }

    fn waker(&mut self) -> Option<bypass_device::Waker> {
        self.wake.waker(&self.info.name)
    }

    fn sleeper(&mut self) -> Option<bypass_device::Sleeper> {
        self.wake.sleeper(&self.info.name, self.socket.fd(), None)
    }

    fn syscalls(&self) -> u64 {
        self.stats.syscalls
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.socket.raw_fd())
    }

    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        let stats = self.stats();
        vec![
            ("rx_frames", stats.rx_frames),
            ("rx_dropped", stats.rx_dropped),
            ("rx_ring_full", stats.rx_ring_full),
            ("tx_frames", stats.tx_frames),
            ("tx_dropped", stats.tx_dropped),
        ]
    }
}

/// The system calls and the shared-memory ring, behind a safe interface.
#[allow(unsafe_code)]
mod sys {
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use libc::{c_int, c_void, socklen_t};

    use super::TX_BATCH;

    fn check(rc: c_int) -> io::Result<c_int> {
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
    }

    /// An `AF_PACKET` raw socket.
    #[derive(Debug)]
    pub(super) struct Socket(OwnedFd);

    impl Socket {
        /// Open a non-blocking raw packet socket that receives nothing until bound.
        pub(super) fn packet() -> io::Result<Socket> {
            let kind = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
            // SAFETY: socket(2) takes no pointers; it returns a new descriptor or -1.
            let fd = check(unsafe { libc::socket(libc::AF_PACKET, kind, 0) })?;
            // SAFETY: `fd` was just created and nothing else owns it.
            Ok(Socket(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        pub(super) fn fd(&self) -> BorrowedFd<'_> {
            use std::os::fd::AsFd;
            self.0.as_fd()
        }

        pub(super) fn raw_fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }

        fn setsockopt<T>(&self, name: c_int, value: &T) -> io::Result<()> {
            let len = size_of::<T>() as socklen_t;
            // SAFETY: `value` points to `len` readable bytes for the duration of the call.
            let rc = unsafe {
                libc::setsockopt(self.raw_fd(), libc::SOL_PACKET, name, (value as *const T).cast::<c_void>(), len)
            };
            check(rc).map(drop)
        }

        /// Set the `SOL_PACKET` option `name` to `value`.
        pub(super) fn set_int(&self, name: c_int, value: c_int) -> io::Result<()> {
            self.setsockopt(name, &value)
        }

        /// Bind to interface `ifindex`, receiving frames of EtherType `protocol` (host order).
        pub(super) fn bind(&self, ifindex: u32, protocol: u16) -> io::Result<()> {
            let addr = libc::sockaddr_ll {
                sll_family: libc::AF_PACKET as u16,
                sll_protocol: protocol.to_be(),
                sll_ifindex: ifindex as c_int,
                sll_hatype: 0,
                sll_pkttype: 0,
                sll_halen: 0,
                sll_addr: [0; 8],
            };
            let len = size_of::<libc::sockaddr_ll>() as socklen_t;
            // SAFETY: `addr` is a valid sockaddr_ll of `len` bytes, alive for the call.
            let rc = unsafe { libc::bind(self.raw_fd(), (&raw const addr).cast::<libc::sockaddr>(), len) };
            check(rc).map(drop)
        }

        /// Return the frames the kernel dropped since the last call (`PACKET_STATISTICS`).
        pub(super) fn take_drops(&self) -> io::Result<u32> {
            let mut stats = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
            let mut len = size_of::<libc::tpacket_stats>() as socklen_t;
            // SAFETY: `stats` has room for `len` bytes and `len` is a valid in/out length.
            let rc = unsafe {
                libc::getsockopt(
                    self.raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    (&raw mut stats).cast::<c_void>(),
                    &mut len,
                )
            };
            check(rc).map(|_| stats.tp_drops)
        }

        /// Send `frames` (at most [`TX_BATCH`]) with one `sendmmsg(2)`; return how many the
        /// kernel took (at least one), or the error of the first.
        pub(super) fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
            let n = frames.len().min(TX_BATCH);
            // SAFETY: iovec and mmsghdr are plain old data; all zeroes (null pointers, zero
            // lengths) is a valid value.
            let mut iov: [libc::iovec; TX_BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
            for k in 0..n {
                iov[k] = libc::iovec { iov_base: frames[k].as_ptr().cast_mut().cast(), iov_len: frames[k].len() };
                msgs[k].msg_hdr.msg_iov = &raw mut iov[k];
                msgs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs[..n]` point at `iov[..n]`, which point at the frames; all outlive
            // the call, and the kernel only reads the frames (the cast to *mut is for the C
            // signature). No destination address: the socket's binding supplies it.
            let rc = unsafe { libc::sendmmsg(self.raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, 0) };
            check(rc).map(|sent| sent as usize)
        }

        /// Block until the socket is readable, has an error, or `timeout` passes. An error
        /// pending on the socket (the interface went down) is returned, once.
        pub(super) fn poll_readable(&self, timeout: Option<Duration>, also: Option<BorrowedFd<'_>>) -> io::Result<()> {
            let mut pfds = [
                libc::pollfd { fd: self.raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: also.map_or(-1, |f| f.as_raw_fd()), events: libc::POLLIN, revents: 0 },
            ];
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            let count = if also.is_some() { 2 } else { 1 };
            // SAFETY: `pfds` holds `count` valid pollfds and `ts_ptr` is null or points to
            // `ts`, all alive for the call; a null signal mask leaves the mask alone.
            let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), count, ts_ptr, std::ptr::null()) };
            let pfd = pfds[0];
            match check(rc) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            if pfd.revents & libc::POLLERR != 0 {
                let mut err: c_int = 0;
                let mut len = size_of::<c_int>() as socklen_t;
                // SAFETY: `err` has room for `len` bytes and `len` is a valid in/out length.
                let rc = unsafe {
                    libc::getsockopt(
                        self.raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        (&raw mut err).cast::<c_void>(),
                        &mut len,
                    )
                };
                check(rc)?;
                if err != 0 {
                    return Err(io::Error::from_raw_os_error(err));
                }
            }
            Ok(())
        }
    }

    /// One received frame, borrowed from its ring slot.
    pub(super) struct RxFrame<'a> {
        /// The bytes captured, from the Ethernet header on.
        pub data: &'a [u8],
        /// The frame's length on the wire (more than `data.len()` when truncated).
        pub wire_len: usize,
        /// The VLAN ID the NIC stripped, or 0.
        pub vlan_id: u16,
    }

    /// A `TPACKET_V2` receive ring shared with the kernel.
    ///
    /// Slot `i` starts at `i * frame_size` with a `tpacket2_hdr` whose `tp_status` says who
    /// owns it: `TP_STATUS_KERNEL` (0) the kernel, `TP_STATUS_USER` us. The kernel fills a
    /// slot and then sets `TP_STATUS_USER` (after a write barrier); we read it and then store
    /// `TP_STATUS_KERNEL` to hand it back. `frame` borrows `&self` and `release` needs
    /// `&mut self`, so no borrowed frame outlives its hand-back.
    #[derive(Debug)]
    pub(super) struct RxRing {
        map: NonNull<u8>,
        map_len: usize,
        frame_size: usize,
        frames: usize,
    }

    // SAFETY: the ring owns its mapping; nothing in it is tied to the creating thread.
    unsafe impl Send for RxRing {}

    impl RxRing {
        /// Set up a ring of at least `frames` slots for frames of up to `max_frame` bytes
        /// on `socket` (whose version is TPACKET_V2), and map it.
        pub(super) fn new(socket: &Socket, max_frame: usize, frames: usize) -> io::Result<RxRing> {
            // The frame starts at TPACKET_ALIGN(TPACKET2_HDRLEN) + 16 - 14 (an aligned network
            // header); leave room for that and a power-of-two slot.
            let align = libc::TPACKET_ALIGNMENT;
            let header = ((libc::TPACKET2_HDRLEN + align - 1) & !(align - 1)) + 16;
            let frame_size = (header + max_frame).next_power_of_two();
            // SAFETY: sysconf takes no pointers.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
            let block_size = frame_size.max(page);
            let per_block = block_size / frame_size;
            let frames = frames.div_ceil(per_block) * per_block;
            let too_big = || io::Error::from(io::ErrorKind::InvalidInput);
            let req = libc::tpacket_req {
                tp_block_size: u32::try_from(block_size).map_err(|_| too_big())?,
                tp_block_nr: u32::try_from(frames / per_block).map_err(|_| too_big())?,
                tp_frame_size: u32::try_from(frame_size).map_err(|_| too_big())?,
                tp_frame_nr: u32::try_from(frames).map_err(|_| too_big())?,
            };
            socket.setsockopt(libc::PACKET_RX_RING, &req)?;
            let map_len = frames * frame_size;
            // SAFETY: a fresh shared mapping of the socket's ring; the kernel checks the
            // length against the ring it just set up. We own the result until munmap in Drop.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    socket.raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let map = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))?;
            Ok(RxRing { map, map_len, frame_size, frames })
        }

        /// Return the number of slots.
        pub(super) fn frames(&self) -> usize {
            self.frames
        }

        /// Return slot `i`'s header pointer.
        fn header(&self, i: usize) -> *mut libc::tpacket2_hdr {
            assert!(i < self.frames, "ring slot {i} out of range");
            // SAFETY: `i * frame_size < map_len`, so the offset stays inside the mapping.
            unsafe { self.map.as_ptr().add(i * self.frame_size).cast() }
        }

        fn status(&self, i: usize) -> &AtomicU32 {
            // SAFETY: tp_status is the first field of a 16-byte-aligned slot, so aligned for
            // u32; the kernel and we only access it atomically (the kernel with
            // READ_ONCE/WRITE_ONCE and barriers), and it lives as long as `self`.
            unsafe { AtomicU32::from_ptr(&raw mut (*self.header(i)).tp_status) }
        }

        /// Return slot `i`'s frame if the kernel has handed it to us.
        pub(super) fn frame(&self, i: usize) -> Option<RxFrame<'_>> {
            // Acquire pairs with the kernel's barrier before it sets TP_STATUS_USER, so the
            // frame's bytes and header are visible.
            let status = self.status(i).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return None;
            }
            let h = self.header(i);
            // SAFETY: the slot is ours (TP_STATUS_USER): the kernel does not write it until
            // `release`, which needs `&mut self` and so waits for this borrow to end.
            let (mac, snaplen, len, tci) =
                unsafe { ((*h).tp_mac as usize, (*h).tp_snaplen as usize, (*h).tp_len as usize, (*h).tp_vlan_tci) };
            // Never trust offsets: clamp them into the slot.
            let start = mac.min(self.frame_size);
            let end = start.saturating_add(snaplen).min(self.frame_size);
            // SAFETY: `start..end` lies inside slot `i` (checked above), which we own as above.
            let data = unsafe { std::slice::from_raw_parts(h.cast::<u8>().add(start), end - start) };
            let vlan_id = if status & libc::TP_STATUS_VLAN_VALID != 0 { tci & 0x0fff } else { 0 };
            Some(RxFrame { data, wire_len: len, vlan_id })
        }

        /// Hand slot `i` back to the kernel.
        pub(super) fn release(&mut self, i: usize) {
            // Release orders our reads of the slot before the kernel may overwrite it.
            self.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
    }

    impl Drop for RxRing {
        fn drop(&mut self) {
            // SAFETY: `map`/`map_len` are exactly the mapping made in `new`; no borrow of it
            // can outlive `self`.
            unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
        }
    }
}
