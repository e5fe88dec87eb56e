//! One AF_XDP socket bound to one queue of an interface, with its own UMEM and four rings.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::error::XdpError;
use super::sys::{self, CompletionQueue, FillQueue, RingSizes, RxQueue, RxTaken, TxChecksum, TxQueue, XdpStatistics};
use super::umem::{Frame, Span, SpanLayout, Umem};

/// How to bind a socket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindOptions {
    pub frame_count: u32,
    pub frame_size: u32,
    pub rings: RingSizes,
    pub zero_copy: bool,
    /// Bind with `XDP_USE_SG`: packets larger than one frame arrive, and may be sent, as
    /// chains of frames.
    pub multi_buffer: bool,
    /// Keep room for TX metadata in every send frame ([`sys::TX_METADATA_LEN`]), for
    /// checksum requests.
    pub tx_metadata: bool,
    /// Spans for sending packets larger than a frame in place (none: `count` 0).
    pub spans: SpanLayout,
}

/// Copy-mode transmission sends at most this many frames per `sendto` (the kernel's
/// `TX_BATCH_SIZE`), answering `EAGAIN` when more are left.
const KERNEL_TX_BATCH: u32 = 32;

/// An AF_XDP socket bound to one queue, with its UMEM and rings.
pub struct XskSocket {
    // Fields drop in order: the rings are unmapped, then the socket closed (the kernel removes
    // it from the XSKMAP and releases the UMEM), then the UMEM unmapped.
    fill: FillQueue,
    completion: CompletionQueue,
    rx: RxQueue,
    tx: TxQueue,
    /// The SYN lane, if opened ([`open_syn_lane`](Self::open_syn_lane)): closed before the
    /// socket whose UMEM it shares.
    lane: Option<SynLane>,
    fd: OwnedFd,
    umem: Umem,
    queue: u32,
    zero_copy: bool,
    multi_buffer: bool,
    tx_ring_size: u32,
    /// System calls made on the socket's rings (wake-ups and kicks), for cost reports.
    syscalls: Cell<u64>,
    /// Of those, the kicks of the TX ring (`sendto`): frames sent per kick is the batch
    /// size the kernel sees, whose per-call cost copy mode pays on every kick.
    tx_kicks: Cell<u64>,
}

impl XskSocket {
    /// Create a socket with a fresh UMEM and bind it to `queue` of `iface` (index `ifindex`),
    /// in zero-copy or copy mode as `options` says. All receive frames are put in the fill
    /// ring.
    pub(crate) fn open(iface: &str, ifindex: u32, queue: u32, options: BindOptions) -> Result<XskSocket, XdpError> {
        let fd = sys::xsk_socket().map_err(|source| match source.raw_os_error() {
            Some(libc::EAFNOSUPPORT) => {
                XdpError::Unsupported { iface: iface.into(), what: "creating an AF_XDP socket".into(), source }
            }
            _ => XdpError::from_io("create an AF_XDP socket", source),
        })?;
        let tx_metadata_len = if options.tx_metadata { sys::TX_METADATA_LEN } else { 0 };
        let umem =
            Umem::new(options.frame_count, options.frame_size, options.rings.fill, tx_metadata_len, options.spans)
                .map_err(|e| XdpError::Io { what: "allocate the UMEM".into(), source: e })?;
        let bytes = options.frame_count as usize * options.frame_size as usize;
        umem.area().register(fd.as_fd()).map_err(|source| match source.raw_os_error() {
            Some(libc::ENOMEM | libc::EPERM | libc::EAGAIN) => XdpError::MemoryLock { bytes, source },
            Some(libc::EINVAL) if options.tx_metadata => XdpError::Unsupported {
                iface: iface.into(),
                what: "AF_XDP TX metadata (checksum offload, XDP_UMEM_TX_METADATA_LEN, Linux 6.11+)".into(),
                source,
            },
            _ => XdpError::from_io("register the UMEM (XDP_UMEM_REG)", source),
        })?;
        let (fill, completion, rx, tx) = sys::xsk_rings(fd.as_fd(), options.rings)
            .map_err(|e| XdpError::from_io("set up and map the AF_XDP rings", e))?;
        let mode = if options.zero_copy { libc::XDP_ZEROCOPY } else { libc::XDP_COPY };
        let sg = if options.multi_buffer { libc::XDP_USE_SG } else { 0 };
        super::retry_busy(|| sys::xsk_bind(fd.as_fd(), ifindex, queue, libc::XDP_USE_NEED_WAKEUP | mode | sg))
            .map_err(|source| {
                let iface = iface.to_string();
                match source.raw_os_error() {
                    Some(libc::EOPNOTSUPP) if options.zero_copy => {
                        XdpError::ZeroCopyUnsupported { iface, queue, source }
                    }
                    Some(libc::EINVAL) => XdpError::NoSuchQueue { iface, queue, source },
                    Some(libc::EBUSY) => XdpError::QueueBusy { iface, queue, source },
                    Some(libc::ENODEV | libc::ENXIO) => XdpError::NoSuchInterface { iface, source },
                    Some(libc::EOPNOTSUPP) => XdpError::Unsupported {
                        iface,
                        what: format!("binding an AF_XDP socket to queue {queue}"),
                        source,
                    },
                    _ => XdpError::from_io(format!("bind an AF_XDP socket to {iface} queue {queue}"), source),
                }
            })?;
        let zero_copy = match sys::xsk_options(fd.as_fd()) {
            Ok(flags) => flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            Err(_) => options.zero_copy,
        };
        let mut socket = XskSocket {
            fill,
            completion,
            rx,
            tx,
            lane: None,
            fd,
            umem,
            queue,
            zero_copy,
            multi_buffer: options.multi_buffer,
            tx_ring_size: options.rings.tx,
            syscalls: Cell::new(0),
            tx_kicks: Cell::new(0),
        };
        socket.umem.refill(&mut socket.fill);
        Ok(socket)
    }

    /// Return the socket's file descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Return the queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Return whether the socket runs in zero-copy mode (else copy mode).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Return whether the socket was bound with `XDP_USE_SG`: packets larger than one frame
    /// arrive as chains of frames, and may be sent as such ([`transmit_copy`](Self::transmit_copy)).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// Return the UMEM, to read frames you hold.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }

    /// Return the UMEM, to write frames you hold.
    pub fn umem_mut(&mut self) -> &mut Umem {
        &mut self.umem
    }

    /// Enable busy polling: `recvfrom` then runs the device's receive processing in the
    /// calling thread (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`).
    pub fn enable_busy_poll(&self, budget: u32) -> io::Result<()> {
        sys::setsockopt_u32(self.fd(), libc::SOL_SOCKET, sys::SO_PREFER_BUSY_POLL, 1)?;
        sys::setsockopt_u32(self.fd(), libc::SOL_SOCKET, sys::SO_BUSY_POLL, 20)?;
        sys::setsockopt_u32(self.fd(), libc::SOL_SOCKET, sys::SO_BUSY_POLL_BUDGET, budget)
    }

    /// Take the frames of up to `max_packets` received packets into `out` (at most its spare
    /// capacity), after topping up the fill ring. A packet of several frames whose end is not
    /// in yet leaves its first frames at the end of `out` ([`Frame::continues`]); keep them
    /// there for the next call, which appends the rest.
    pub fn receive(&mut self, max_packets: usize, out: &mut Vec<Frame>) -> RxTaken {
        self.umem.refill(&mut self.fill);
        self.umem.receive(&mut self.rx, max_packets, out)
    }

    /// Give received frames back to the kernel for receiving again (`frames.drain(..)`, say).
    pub fn recycle(&mut self, frames: impl IntoIterator<Item = Frame>) {
        self.umem.recycle(&mut self.fill, frames);
    }

    /// Return whether no received frame is waiting.
    pub fn rx_is_empty(&mut self) -> bool {
        self.rx.is_empty()
    }

    /// Return whether the kernel asks for a wake-up to see new fill-ring frames.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Wake the kernel's receive side, or busy-poll the device when busy polling is enabled.
    pub fn wake_rx(&self) -> io::Result<()> {
        self.count_syscall();
        match sys::xsk_kick_rx(self.fd()) {
            Ok(()) => Ok(()),
            Err(e) if transient(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Take a free send frame, reclaiming sent ones first if none is free; `None` when every
    /// send frame is in flight or the TX ring is full.
    pub fn alloc_tx(&mut self) -> Option<Frame> {
        if !self.tx_room(1) {
            return None;
        }
        self.umem.alloc_tx()
    }

    /// Return whether `frames` send frames are free and as many TX ring slots, reclaiming sent
    /// frames first if too few are free.
    pub fn tx_room(&mut self, frames: usize) -> bool {
        if self.umem.tx_free_count() < frames {
            self.umem.reclaim(&mut self.completion);
        }
        self.umem.tx_free_count() >= frames && self.tx.free(frames as u32) as usize >= frames
    }

    /// Return whether `slots` TX ring slots are free (a span's packet takes no send frames).
    pub fn tx_ring_room(&mut self, slots: usize) -> bool {
        self.tx.free(slots as u32) as usize >= slots
    }

    /// Return whether send frames keep room for TX metadata, so that
    /// [`transmit_checksummed`](Self::transmit_checksummed) can ask the kernel for checksums.
    pub fn tx_metadata(&self) -> bool {
        self.umem.tx_capacity() < self.umem.frame_size()
    }

    /// Queue the first `len` bytes of `frame` for sending (sent by [`flush_tx`](Self::flush_tx));
    /// give the frame back if the TX ring is full or `len` exceeds the frame's room
    /// ([`Umem::tx_capacity`]).
    pub fn transmit(&mut self, frame: Frame, len: usize) -> Result<(), Frame> {
        self.umem.transmit(&mut self.tx, frame, len, false, None)
    }

    /// Like [`transmit`](Self::transmit), asking the kernel to compute the packet's checksum
    /// as `checksum` says (the field holding the pseudo-header sum); give the frame back also
    /// when the socket has no [`tx_metadata`](Self::tx_metadata).
    pub fn transmit_checksummed(&mut self, frame: Frame, len: usize, checksum: TxChecksum) -> Result<(), Frame> {
        self.umem.transmit(&mut self.tx, frame, len, false, Some(checksum))
    }

    /// Copy the packet `data` into as many free send frames as it needs and queue them as one
    /// packet (chained with `XDP_PKT_CONTD` when it takes more than one frame, which needs a
    /// [`multi_buffer`](Self::multi_buffer) socket), with a checksum request if asked (see
    /// [`transmit_checksummed`](Self::transmit_checksummed)). Return `false`, queueing
    /// nothing, when `data` is empty, when it needs more than one frame on a socket without
    /// multi-buffer, when a checksum is asked without TX metadata, or when too few send frames
    /// or TX ring slots are free ([`tx_room`](Self::tx_room)).
    pub fn transmit_copy(&mut self, data: &[u8], checksum: Option<TxChecksum>) -> bool {
        let capacity = self.umem.tx_capacity() as usize;
        let frames = data.len().div_ceil(capacity);
        if frames == 0
            || (frames > 1 && !self.multi_buffer)
            || (checksum.is_some() && !self.tx_metadata())
            || !self.tx_room(frames)
        {
            return false;
        }
        // tx_room checked for `frames` free send frames and ring slots, every chunk fits a
        // frame, and a checksum request has its room, so no step below can fail half way
        // through the chain.
        for (i, chunk) in data.chunks(capacity).enumerate() {
            let mut frame = self.umem.alloc_tx().expect("tx_room checked for free send frames");
            self.umem.buffer_mut(&mut frame)[..chunk.len()].copy_from_slice(chunk);
            let first = if i == 0 { checksum } else { None };
            let queued = self.umem.transmit(&mut self.tx, frame, chunk.len(), i + 1 < frames, first);
            assert!(queued.is_ok(), "the TX ring refused a frame after tx_room");
        }
        true
    }

    /// Take a free span, reclaiming sent frames and spans first if none is free; `None` also
    /// when the UMEM keeps no spans.
    pub fn alloc_span(&mut self) -> Option<Span> {
        if self.umem.span_free_count() == 0 && self.umem.span_capacity() > 0 {
            self.umem.reclaim(&mut self.completion);
        }
        self.umem.alloc_span()
    }

    /// Queue the first `len` bytes of `span` for sending as one packet, with a checksum
    /// request if asked; give the span back if the TX ring lacks the slots, the socket is not
    /// multi-buffer and the packet needs more than one descriptor, or a checksum is asked of
    /// a socket without [`tx_metadata`](Self::tx_metadata).
    pub fn transmit_span(&mut self, span: Span, len: usize, checksum: Option<TxChecksum>) -> Result<(), Span> {
        if len > self.umem.tx_capacity() as usize && !self.multi_buffer {
            return Err(span);
        }
        self.umem.transmit_span(&mut self.tx, span, len, checksum)
    }

    /// Publish queued frames to the kernel, kick it when it asks to be kicked, and reclaim the
    /// frames already sent.
    pub fn flush_tx(&mut self) -> io::Result<()> {
        self.tx.submit();
        if self.tx.outstanding() > 0 && self.tx.needs_wakeup() {
            // Copy mode sends one batch of KERNEL_TX_BATCH frames per call and answers EAGAIN
            // while more remain (or while the completion ring is full): kick until the ring
            // drains, with a bound in case the device cannot take more now.
            for _ in 0..self.tx_ring_size / KERNEL_TX_BATCH + 2 {
                self.count_syscall();
                self.tx_kicks.set(self.tx_kicks.get() + 1);
                match sys::xsk_kick_tx(self.fd()) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        self.umem.reclaim(&mut self.completion);
                    }
                    Err(e) if transient(&e) => break,
                    Err(e) => return Err(e),
                }
                if self.tx.outstanding() == 0 {
                    break;
                }
            }
        }
        self.umem.reclaim(&mut self.completion);
        Ok(())
    }

    /// Return how many RX and completion descriptors were dropped because they pointed outside
    /// the UMEM (a kernel bug if ever non-zero; the frames they named are lost).
    pub fn invalid_descriptors(&self) -> u64 {
        self.rx.invalid() + self.completion.invalid() + self.lane.as_ref().map_or(0, |l| l.rx.invalid())
    }

    /// Count one system call made on this socket (see [`syscalls`](Self::syscalls)).
    pub(crate) fn count_syscall(&self) {
        self.syscalls.set(self.syscalls.get() + 1);
    }

    /// Return how many wake-up, kick and wait system calls were made on this socket.
    pub fn syscalls(&self) -> u64 {
        self.syscalls.get()
    }

    /// Return how many of [`syscalls`](Self::syscalls) were kicks of the TX ring.
    pub fn tx_kicks(&self) -> u64 {
        self.tx_kicks.get()
    }

    /// Return the kernel's drop counters for this socket.
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        sys::xsk_statistics(self.fd())
    }
}

/// A second socket on the queue of an [`XskSocket`], sharing its UMEM, fill ring and
/// completion ring, with an RX ring of its own: the steering program sends the bare SYNs
/// there (see `program.rs`, "The SYN lane"), so that a flood of them fills this ring and never
/// the one the established connections' frames arrive in.
struct SynLane {
    // Fields drop in order: the ring is unmapped, then the socket closed.
    rx: RxQueue,
    fd: OwnedFd,
}

impl XskSocket {
    /// Open the SYN lane: a socket bound to this socket's queue with its UMEM shared, and an
    /// RX ring of `size` entries (a power of two). Its frames come from this socket's fill
    /// ring and go back to it; register [`syn_lane_fd`](Self::syn_lane_fd) in the program's
    /// lane slot to use it.
    pub fn open_syn_lane(&mut self, iface: &str, ifindex: u32, size: u32) -> Result<(), XdpError> {
        let what = |w: &str| format!("{w} the SYN lane's AF_XDP socket on {iface} queue {}", self.queue);
        let fd = sys::xsk_socket().map_err(|e| XdpError::from_io(what("create"), e))?;
        let rx = sys::xsk_rx_ring(fd.as_fd(), size).map_err(|e| XdpError::from_io(what("map the RX ring of"), e))?;
        super::retry_busy(|| sys::xsk_bind_shared(fd.as_fd(), ifindex, self.queue, self.fd.as_fd()))
            .map_err(|e| XdpError::from_io(what("bind"), e))?;
        self.lane = Some(SynLane { rx, fd });
        Ok(())
    }

    /// Return the SYN lane's socket, if opened.
    pub fn syn_lane_fd(&self) -> Option<BorrowedFd<'_>> {
        self.lane.as_ref().map(|l| l.fd.as_fd())
    }

    /// Take the frames of up to `max_packets` packets from the SYN lane into `out` (as
    /// [`receive`](Self::receive) does from the socket's own ring); nothing without a lane.
    /// Give them back with [`recycle`](Self::recycle): they are frames of the shared UMEM.
    pub fn receive_syn_lane(&mut self, max_packets: usize, out: &mut Vec<Frame>) -> RxTaken {
        match &mut self.lane {
            Some(lane) => self.umem.receive(&mut lane.rx, max_packets, out),
            None => RxTaken::default(),
        }
    }

    /// Return whether the SYN lane holds no received frame (true without a lane).
    pub fn syn_lane_is_empty(&mut self) -> bool {
        self.lane.as_mut().is_none_or(|l| l.rx.is_empty())
    }

    /// Return the kernel's drop counters of the SYN lane's socket, if there is one: its
    /// `rx_ring_full` counts the SYNs dropped because the lane was full.
    pub fn syn_lane_statistics(&self) -> Option<io::Result<XdpStatistics>> {
        self.lane.as_ref().map(|l| sys::xsk_statistics(l.fd.as_fd()))
    }
}

/// Errors of a wake-up call that only mean "not now": the kernel is busy, out of buffers, or
/// the link is down; the frames stay queued.
fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN | libc::EINTR))
}
