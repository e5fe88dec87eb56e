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
//! `umem.rs` ([`Umem`]) and `socket.rs` ([`XskSocket`]) the safe frame-token API; this
//! module the [`Device`].

pub mod cookie;
mod error;
pub mod program;
mod socket;
mod sys;
mod umem;

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use bypass_device::{Device, DeviceInfo};

use crate::ifreq;

pub use bypass_device::SynCookieAnswer;
pub use cookie::{COOKIE_MSS, COOKIE_PERIOD_NS};
pub use error::XdpError;
pub use program::{AttachMode, MAX_ADDRS_PER_FAMILY, PassProgram, SynShield, XdpProgram};
pub use socket::XskSocket;
pub use sys::{RxTaken, TxChecksum, XdpStatistics, monotonic_now};
pub use umem::{Frame, Span, SpanLayout, Umem};

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
    /// Bytes per frame: 2048 or 4096. A frame receives `frame_size - 256` bytes (the kernel
    /// keeps `XDP_PACKET_HEADROOM` in front) and sends `frame_size`; a packet of an interface
    /// whose MTU + 14 exceeds that spans several frames (multi-buffer, see [`XdpDevice`]), at
    /// most [`MAX_FRAMES_PER_PACKET`].
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
    /// Have the kernel fill in the TCP and UDP checksums of the frames we send (AF_XDP TX
    /// metadata, `XDP_TXMD_FLAGS_CHECKSUM`; Linux 6.11+), stating
    /// [`ChecksumCaps::tx_offload`](bypass_device::ChecksumCaps::tx_offload): the stack then
    /// writes only the pseudo-header sum. Copy mode only (a zero-copy socket keeps the
    /// checksums in software; see [`XdpDevice`]). Each send frame keeps 24 bytes for the
    /// metadata, so it holds 4072 bytes of a packet instead of 4096. On a kernel without TX
    /// metadata the device opens without it and states no `tx_offload`. Off by default: a
    /// user of the device who writes whole checksums (smoltcp, say) must leave it off, since
    /// the kernel would sum over them; the `bypass-stack` host reads `tx_offload` and writes
    /// pseudo-header sums.
    pub tx_checksum_offload: bool,
    /// Spans the UMEM keeps beside its frames when a packet may exceed a frame (a jumbo
    /// MTU): runs of adjacent frames that a packet is written into in place and sent from
    /// without a copy of ours (see [`XdpDevice`]); 64 by default, 4.25 MiB at a 65,000-byte
    /// MTU. Copy mode only. Copy mode completes a packet once the kernel peer has consumed
    /// its socket buffer, so the spans in flight follow the peer's receive queue; while all
    /// are, packets are copied into frames as below the threshold. 0: no spans.
    pub tx_spans: u32,
    /// The SYN shield in the XDP program: bare SYNs to our addresses beyond a token bucket
    /// per queue are dropped before they take a UMEM frame, and counted as the device
    /// counter `syn_shed` (see [`SynShield`]). `None` (the default) lets every SYN through.
    pub syn_shield: Option<SynShield>,
    /// The SYN lane: the entries (a power of two, at least 8 and at most half of
    /// `fill_size`) of the RX ring of a second socket on each queue, sharing the queue's UMEM,
    /// to which the XDP program sends bare SYNs (those the shield lets through, with a
    /// shield). A flood then fills that ring, not the one established connections' frames
    /// arrive in; `recv` takes up to [`SYN_LANE_BATCH`] SYNs from it per call, after the
    /// queue's own ring. Counted as `syn_lane` (SYNs taken) and `syn_lane_full` (dropped by
    /// the kernel for a full lane). `None` (the default): SYNs arrive with everything else.
    pub syn_lane: Option<u32>,
    /// SYN cookies in the XDP program, with the shield: the SYNs beyond its rate are
    /// answered with the stack's SYN cookie by the program itself (`XDP_TX`, see
    /// [`cookie`]), not dropped, so that clients still connect during a flood; counted as
    /// `syn_cookies_xdp` (they count in `syn_shed` too: none of them reaches the stack). The
    /// stack must hold the same key and check cookies without an overflow of its own
    /// (`bypass_stack`'s `StackConfig::syn_cookies_from_device`). `None` (the default): the
    /// shield drops them.
    pub syn_cookies: Option<SynCookieAnswer>,
}

/// SYNs [`XdpDevice::recv`] takes from the SYN lane at most per call, and only once the
/// queue's own ring gave fewer packets than asked: a stack polling in a loop answers a few
/// SYNs a turn and turns back to its established connections' frames.
pub const SYN_LANE_BATCH: usize = 8;

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
            tx_checksum_offload: false,
            tx_spans: 64,
            syn_shield: None,
            syn_lane: None,
            syn_cookies: None,
        }
    }

    /// Return the configuration with `ip` added to the stack's addresses.
    pub fn with_addr(mut self, ip: impl Into<IpAddr>) -> XdpConfig {
        self.addrs.push(ip.into());
        self
    }

    fn validate(&self) -> Result<(), XdpError> {
        program::check_addrs(&self.addrs)?;
        if let Some(shield) = self.syn_shield {
            shield.check()?;
        }
        if self.syn_cookies.is_some() && self.syn_shield.is_none() {
            return Err(XdpError::InvalidConfig(
                "SYN cookies in the XDP program answer the SYNs beyond the SYN shield's rate: set a shield too".into(),
            ));
        }
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
        if let Some(n) = self.syn_lane
            && (!n.is_power_of_two() || n < 8 || n > self.fill_size / 2)
        {
            return bad(format!(
                "the SYN lane's ring must be a power of two from 8 to half the fill ring ({}), not {n}",
                self.fill_size / 2
            ));
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

/// Frames a receive batch must reach for the next [`Device::recv`] to busy-poll although
/// frames already wait in the ring (see `recv`).
const RX_GATHER: usize = 4;

/// Bytes of packets larger than a frame queued for sending after which `send` kicks the
/// kernel itself, before the caller's [`Device::flush`]: copy mode copies every frame into a
/// socket buffer when kicked, and a large burst queued whole (a window of 64 KB segments,
/// megabytes) has left the cache by then. Measured at a 65,000-byte MTU (row 5j of the demo,
/// sending): 14.9 Gbit/s kicking once per flush, 21.0-21.7 kicking every 64-256 KiB, 19.0 every
/// 512 KiB. At MTU 1500 kicking early measured 5% slower than once per flush (more kicks, and
/// the peer's receive path, which a kick runs on our CPU, contends with its reader for the
/// socket lock), so packets that fit a frame are kicked at the flush only.
const TX_KICK_BYTES: usize = 256 * 1024;

/// The most UMEM frames (descriptors) one packet may span: what copy mode sends at most,
/// `MAX_SKB_FRAGS + 1` with the kernel's default `CONFIG_MAX_SKB_FRAGS=17`. `xsk_build_skb`
/// (net/xdp/xsk.c) copies the first descriptor into the socket buffer's linear part and each
/// further one into a page fragment, and drops the whole packet (`-EOVERFLOW`, counted in
/// `tx_invalid_descs`) when a descriptor with `XDP_PKT_CONTD` would need fragment
/// `MAX_SKB_FRAGS`. Receiving in copy mode has no such limit (`__xsk_rcv` takes as many
/// frames as the packet needs).
pub const MAX_FRAMES_PER_PACKET: usize = 18;

/// An AF_XDP socket on one queue of an interface, as a [`Device`].
///
/// # Packets larger than a frame (multi-buffer)
///
/// When the interface's largest frame (MTU + 14) exceeds what one UMEM frame receives
/// (`frame_size - 256`), the device binds its socket with `XDP_USE_SG`, and the program is
/// multi-buffer aware (`BPF_F_XDP_HAS_FRAGS`) in any case. The kernel then delivers a large
/// packet as a chain of frames (`XDP_PKT_CONTD` on all but the last), and
/// [`recv`](Device::recv) copies a chain into a scratch buffer of `max_frame` bytes,
/// allocated once at open, to hand it over as one slice; a packet in one frame is still lent
/// in place. A chain longer than `max_frame` (a GSO super-packet from a peer with its
/// segmentation offloads on) or one that lost a descriptor is dropped and counted
/// (`rx_dropped_oversized`, `rx_dropped_broken` in [`device_counters`](Device::device_counters)).
/// The `budget` of `recv` counts packets; a chain is never split between calls.
///
/// When `max_frame` also exceeds one frame's `frame_size` bytes, [`send`](Device::send) lets
/// `fill` write the packet in place into a span of adjacent UMEM frames
/// ([`XdpConfig::tx_spans`]) and queues it as a chain of descriptors that follow each other
/// in the span without a gap. That needs the UMEM in unaligned mode
/// (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`: in aligned mode every descriptor starts past the TX
/// metadata room of its own frame, so a chain cannot be contiguous), which the device asks
/// for whenever it keeps spans, in copy mode only. While every span is in flight, `fill`
/// writes into a second scratch buffer and the device copies the packet into as many send
/// frames as it needs, chained likewise. Either way `send` returns `Ok(false)` without
/// calling `fill` unless the TX ring slots (and frames, for a copy) of a `max_frame` packet
/// are free. Below the threshold `fill` writes straight into a send frame.
///
/// Binding with `XDP_USE_SG` only when needed keeps smaller MTUs exactly as before: a
/// multi-buffer socket also takes in the GSO super-packets a kernel peer may send (only to
/// drop them here, after they held up to 18 fill-ring frames each), where a plain socket has
/// the kernel drop them at once (`rx_dropped`).
///
/// # TX checksum offload
///
/// With [`XdpConfig::tx_checksum_offload`], `send` reads the headers of each frame `fill`
/// wrote and, for TCP or UDP in an unfragmented IPv4 packet, or right after the fixed IPv6
/// header, asks the kernel to compute the checksum ([`TxChecksum`]); every other frame goes
/// out as written, so the stack must still compute the checksums of IPv4 fragments and of
/// IPv6 packets with extension headers in full. In copy mode the kernel turns the request
/// into a `CHECKSUM_PARTIAL` socket buffer (`xsk_skb_metadata`, net/xdp/xsk.c), which a
/// device with checksum offload completes as it sends; veth has none to do: the kernel peer
/// accepts `CHECKSUM_PARTIAL` as verified, so on a veth the sum is never computed at all
/// (and a capture on the peer shows the pseudo-header sum, as it does for the kernel's own
/// traffic over veth). Zero-copy drivers honour the request only if they implement TX
/// metadata, which the device cannot tell, so a zero-copy socket leaves `tx_offload` off.
pub struct XdpDevice {
    // Fields drop in order: the socket closes before the (possibly last) program reference
    // detaches the program.
    socket: XskSocket,
    program: Arc<XdpProgram>,
    info: DeviceInfo,
    /// Frames taken from the RX ring during one `recv` (capacity: the RX ring size; no
    /// allocation per packet). Between calls it holds the first frames of a packet whose
    /// last frame was not in the ring yet.
    rx_batch: Vec<Frame>,
    /// Frames taken from the SYN lane during one `recv` (capacity [`SYN_LANE_BATCH`]; empty
    /// without a lane).
    lane_batch: Vec<Frame>,
    /// Where a packet of several frames is gathered for `recv`: `max_frame` bytes on a
    /// multi-buffer socket, else empty.
    rx_scratch: Vec<u8>,
    /// The rest of a packet dropped before its end arrived is still to come: drop it too.
    rx_discarding: bool,
    /// Where `send` lets `fill` write when `max_frame` exceeds one frame, else empty.
    tx_scratch: Vec<u8>,
    /// Send frames (and TX ring slots) a packet of `max_frame` bytes takes.
    tx_frames_per_packet: usize,
    /// Ask the kernel for the TCP and UDP checksums of the frames sent.
    tx_offload: bool,
    /// Bytes of chained packets queued for sending since the kernel was last kicked.
    tx_unkicked: usize,
    counters: Counters,
    busy_poll: bool,
    /// Packets the last `recv` delivered from the RX ring.
    rx_last_batch: usize,
    /// Packets of the largest size the kernel can deliver before it drops: the smaller of
    /// the fill and RX rings, divided by the frames such a packet takes.
    rx_frames: usize,
    /// Polled beside the socket once a [`Waker`](bypass_device::Waker) was asked for.
    wake: crate::wake::WakeSlot,
}

/// The device's own counters: multi-buffer packets and checksum requests.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    /// Packets received in more than one frame and handed over.
    rx_multi_buffer: u64,
    /// SYNs taken from the SYN lane and handed over.
    syn_lane: u64,
    /// Packets dropped because their frames held more than `max_frame` bytes.
    rx_dropped_oversized: u64,
    /// Packets dropped because one of their descriptors was invalid (or their chain never
    /// ended within a full RX batch).
    rx_dropped_broken: u64,
    /// Packets sent in more than one frame.
    tx_multi_buffer: u64,
    /// Packets sent with a checksum request ([`XdpConfig::tx_checksum_offload`]).
    tx_checksum_offloaded: u64,
    /// Packets larger than a frame's room written in place in a span (no copy of ours).
    tx_in_place: u64,
}

/// Why a received packet is dropped before the stack sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxDrop {
    /// Its frames hold more bytes than the scratch buffer (`max_frame`).
    Oversized(usize),
    /// One of its descriptors was invalid and dropped ([`Frame::is_broken`]).
    Broken,
}

/// Return where the kernel is to compute the checksum of `frame`: TCP or UDP in an
/// unfragmented IPv4 packet (any header length), or right after the fixed IPv6 header; `None`
/// for every other frame. (Offsets by hand: this crate does not depend on a packet parser,
/// and the kernel needs only these two numbers.)
fn checksum_request(frame: &[u8]) -> Option<TxChecksum> {
    let (proto, start) = match u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]) {
        0x0800 => {
            let ip = frame.get(14..34)?;
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            // Version 4, a valid header length, and neither a first fragment (MF) nor a later one.
            let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
            if ip[0] >> 4 != 4 || ihl < 20 || fragment {
                return None;
            }
            (ip[9], 14 + ihl)
        }
        0x86dd => (*frame.get(20)?, 54),
        _ => return None,
    };
    let offset = match proto {
        6 => 16,
        17 => 6,
        _ => return None,
    };
    // The field must lie in the frame (the kernel checks it lies in the first descriptor,
    // which holds at least 4072 bytes).
    (start + offset + 2 <= frame.len()).then_some(TxChecksum { start: start as u16, offset: offset as u16 })
}

/// Return the bytes of the received packet in `frames`: the frame itself if it is one, else
/// the frames gathered into `scratch`.
fn packet_bytes<'a>(umem: &'a Umem, frames: &[Frame], scratch: &'a mut [u8]) -> Result<&'a [u8], RxDrop> {
    if frames.iter().any(Frame::is_broken) {
        return Err(RxDrop::Broken);
    }
    if let [frame] = frames {
        return Ok(umem.data(frame));
    }
    let len = frames.iter().map(Frame::len).sum::<usize>();
    if len > scratch.len() {
        return Err(RxDrop::Oversized(len));
    }
    let mut at = 0;
    for frame in frames {
        let data = umem.data(frame);
        scratch[at..at + data.len()].copy_from_slice(data);
        at += data.len();
    }
    Ok(&scratch[..len])
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
        let frame_size = config.frame_size as usize;
        let max_frame = mtu as usize + 14;
        // Copy mode copies a received packet in `frame_size - XDP_PACKET_HEADROOM` bytes per
        // frame (`xsk_pool_get_rx_frame_size`) and sends `frame_size` bytes per frame, less
        // the TX metadata when there is some.
        let rx_capacity = frame_size - sys::XDP_PACKET_HEADROOM as usize;
        let tx_capacity = frame_size - if config.tx_checksum_offload { sys::TX_METADATA_LEN as usize } else { 0 };
        let multi_buffer = max_frame > rx_capacity || max_frame > tx_capacity;
        let tx_frames_per_packet = max_frame.div_ceil(tx_capacity);
        if tx_frames_per_packet > MAX_FRAMES_PER_PACKET {
            return Err(XdpError::MtuTooLargeForFrame {
                iface: iface.into(),
                mtu,
                frame_size: config.frame_size,
                max_mtu: (MAX_FRAMES_PER_PACKET * tx_capacity - 14) as u32,
            });
        }
        let rx_frames_per_packet = max_frame.div_ceil(rx_capacity);
        for (name, n, need) in [
            ("tx_size", config.tx_size, tx_frames_per_packet),
            ("completion_size", config.completion_size, tx_frames_per_packet),
            ("frame_count - fill_size (the send frames)", config.frame_count - config.fill_size, tx_frames_per_packet),
            ("fill_size", config.fill_size, rx_frames_per_packet),
            ("rx_size", config.rx_size, rx_frames_per_packet),
        ] {
            if (n as usize) < need {
                return Err(XdpError::InvalidConfig(format!(
                    "{name} is {n}, fewer than the {need} frames one packet takes at the MTU of {iface} ({mtu}): \
                     raise it"
                )));
            }
        }
        if let Err(e) = sys::raise_memlock() {
            // Normal without CAP_SYS_RESOURCE; root's CAP_IPC_LOCK still lets the UMEM be pinned.
            log::debug!("setrlimit(RLIMIT_MEMLOCK) failed ({e}); continuing");
        }

        let program = Arc::new(XdpProgram::attach(
            iface,
            ifindex,
            &config.addrs,
            config.mode,
            max_queue + 1,
            config.syn_shield.map(|shield| (shield, config.syn_cookies.as_ref())),
            config.syn_lane.is_some(),
        )?);
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
        // Spans for packets larger than a frame, written in place and sent without a copy of
        // ours; copy mode only (a zero-copy driver would need the span's pages to be
        // physically adjacent, `xp_desc_crosses_non_contig_pg`).
        let spans = if tx_frames_per_packet > 1 && config.tx_spans > 0 {
            let frames = (max_frame + sys::TX_METADATA_LEN as usize).div_ceil(frame_size) as u32;
            SpanLayout { count: config.tx_spans, frames }
        } else {
            SpanLayout::default()
        };
        let options = BindOptions {
            frame_count: config.frame_count,
            frame_size: config.frame_size,
            rings,
            zero_copy: want_zero_copy,
            multi_buffer,
            tx_metadata: config.tx_checksum_offload,
            spans: if want_zero_copy { SpanLayout::default() } else { spans },
        };

        let mut devices = Vec::with_capacity(queues.len());
        for &queue in queues {
            let open = |options: BindOptions| match XskSocket::open(iface, ifindex, queue, options) {
                Err(XdpError::ZeroCopyUnsupported { source, .. }) if config.zero_copy == ZeroCopy::Auto => {
                    log::debug!("zero-copy refused on {iface} queue {queue} ({source}); using copy mode");
                    XskSocket::open(iface, ifindex, queue, BindOptions { zero_copy: false, spans, ..options })
                }
                other => other,
            };
            let mut socket = match open(options) {
                // A kernel before 6.11 has no TX metadata: the checksums stay in software.
                Err(XdpError::Unsupported { source, .. }) if options.tx_metadata => {
                    log::debug!(
                        "{iface} queue {queue}: no AF_XDP TX metadata ({source}); TX checksums stay in software"
                    );
                    open(BindOptions { tx_metadata: false, ..options })?
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
            if let Some(size) = config.syn_lane {
                socket.open_syn_lane(iface, ifindex, size)?;
                program.register_lane(queue, socket.syn_lane_fd().expect("just opened"))?;
            }
            program.register(queue, socket.fd())?;
            let tx_offload = socket.tx_metadata() && !socket.zero_copy();
            if config.tx_checksum_offload && socket.zero_copy() {
                log::debug!("{iface} queue {queue}: zero-copy socket; TX checksums stay in software");
            }
            let mode = format!(
                "AF_XDP, {} mode, {}, queue {queue}{}{}{}{}",
                if socket.zero_copy() { "zero-copy" } else { "copy" },
                program.mode().describe(),
                if multi_buffer { ", multi-buffer" } else { "" },
                if tx_offload { ", TX checksum offload" } else { "" },
                if busy_poll { ", busy polling" } else { "" },
                if config.syn_lane.is_some() { ", SYN lane" } else { "" },
            );
            log::debug!("opened {iface}: {mode}");
            // Receive checksums in software: copy mode hands over the bytes alone, without the
            // driver's receive verdict. Transmit ones too unless offloaded.
            let mut info = DeviceInfo::new(iface, mac, mtu as usize, mode);
            info.checksums.tx_offload = tx_offload;
            devices.push(XdpDevice {
                socket,
                program: Arc::clone(&program),
                info,
                rx_batch: Vec::with_capacity(config.rx_size as usize),
                lane_batch: Vec::with_capacity(if config.syn_lane.is_some() { SYN_LANE_BATCH } else { 0 }),
                rx_scratch: if multi_buffer { vec![0; max_frame] } else { Vec::new() },
                rx_discarding: false,
                tx_scratch: if tx_frames_per_packet > 1 { vec![0; max_frame] } else { Vec::new() },
                tx_frames_per_packet,
                tx_offload,
                tx_unkicked: 0,
                counters: Counters::default(),
                busy_poll,
                rx_last_batch: 0,
                rx_frames: (config.fill_size.min(config.rx_size) as usize / rx_frames_per_packet).max(1),
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

    /// Receive up to `budget` packets (a packet of several frames counts once and is never
    /// split between calls); their frames go back to the fill ring before returning. Return
    /// how many were handed to `on_frame` (dropped ones are counted in `device_counters`).
    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        // Busy-poll (a `recvfrom(2)`) when the ring is empty, or when the last batch was a
        // big one (`RX_GATHER` frames or more): under load the pass lets the next batch
        // gather, and a bigger batch is answered in fewer kicks. When a small batch came
        // before and frames already wait, take them at once: a round trip's answer leaves a
        // system call sooner (docs/performance.md, "Busy-polling only when the ring is
        // empty").
        if self.busy_poll && (self.rx_last_batch >= RX_GATHER || self.socket.rx_is_empty()) {
            self.socket.wake_rx()?;
        }
        let delivered = self.recv_own(budget, on_frame)?;
        self.rx_last_batch = delivered;
        if delivered < budget && self.lane_batch.capacity() > 0 {
            return Ok(delivered + self.recv_syn_lane((budget - delivered).min(SYN_LANE_BATCH), on_frame));
        }
        Ok(delivered)
    }

    /// Return `Ok(true)` whenever `fill` was called, including when it cancelled with 0.
    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if !self.tx_scratch.is_empty() {
            return self.send_chain(fill);
        }
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
            return Err(overfilled(len, capacity));
        }
        let checksum = if self.tx_offload { checksum_request(&buffer[..len]) } else { None };
        log::trace!("{}: queued {len} bytes (checksum request {checksum:?})", self.info.name);
        let queued = match checksum {
            Some(checksum) => self.socket.transmit_checksummed(frame, len, checksum),
            None => self.socket.transmit(frame, len),
        };
        if let Err(frame) = queued {
            // Unreachable: alloc_tx checked for room in the TX ring, and the UMEM keeps room
            // for the metadata whenever `tx_offload` is on.
            self.socket.umem_mut().free_tx(frame);
            return Ok(false);
        }
        self.counters.tx_checksum_offloaded += u64::from(checksum.is_some());
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tx_unkicked = 0;
        self.socket.flush_tx()
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if !self.socket.rx_is_empty() || !self.socket.syn_lane_is_empty() {
            return Ok(());
        }
        let ms = match timeout {
            None => -1,
            // Round up so a short timeout sleeps instead of spinning.
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
        };
        self.socket.count_syscall();
        let result =
            match crate::wake::poll_any([Some(self.socket.fd()), self.socket.syn_lane_fd(), self.wake.fd()], ms) {
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

    fn sleeper(&mut self) -> Option<bypass_device::Sleeper> {
        self.wake.sleeper(&self.info.name, self.socket.fd(), self.socket.syn_lane_fd())
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.socket.fd().as_raw_fd())
    }

    fn syscalls(&self) -> u64 {
        self.socket.syscalls()
    }

    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        let c = self.counters;
        let mut counters = match self.statistics() {
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
        };
        counters.extend([
            ("rx_multi_buffer", c.rx_multi_buffer),
            ("rx_dropped_oversized", c.rx_dropped_oversized),
            ("rx_dropped_broken", c.rx_dropped_broken),
            ("tx_multi_buffer", c.tx_multi_buffer),
            ("tx_checksum_offloaded", c.tx_checksum_offloaded),
            ("tx_in_place", c.tx_in_place),
            ("tx_kicks", self.socket.tx_kicks()),
        ]);
        if let Some(shed) = self.program.syn_shed(self.socket.queue()) {
            counters.push(("syn_shed", shed));
        }
        if let Some(answered) = self.program.syn_cookies_sent(self.socket.queue()) {
            counters.push(("syn_cookies_xdp", answered));
        }
        match self.socket.syn_lane_statistics() {
            Some(Ok(st)) => counters.extend([("syn_lane", c.syn_lane), ("syn_lane_full", st.rx_ring_full)]),
            Some(Err(e)) => log::debug!("XDP_STATISTICS of the SYN lane: {e}"),
            None => {}
        }
        counters
    }
}

/// The error of a `fill` that claims to have written more than the buffer it was lent.
fn overfilled(len: usize, capacity: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("send: fill returned {len} bytes for a {capacity}-byte buffer"))
}

impl XdpDevice {
    /// Take up to `budget` packets from the queue's own RX ring (see [`Device::recv`]).
    fn recv_own(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let taken = self.socket.receive(budget, &mut self.rx_batch);
        if taken.descs == 0 {
            if !self.busy_poll && self.socket.fill_needs_wakeup() {
                self.socket.wake_rx()?;
            }
            return Ok(0);
        }
        let XdpDevice { socket, info, rx_batch, rx_scratch, rx_discarding, counters, .. } = self;
        let mut delivered = 0;
        // Start of the packet being walked: frames before it are done with.
        let mut start = 0;
        for end in 0..rx_batch.len() {
            if rx_batch[end].continues() {
                continue;
            }
            let frames = &rx_batch[start..=end];
            start = end + 1;
            if std::mem::take(rx_discarding) {
                continue; // the end of a packet dropped in an earlier call
            }
            match packet_bytes(socket.umem(), frames, rx_scratch) {
                Ok(packet) => {
                    log::trace!("{}: received {} bytes in {} frames", info.name, packet.len(), frames.len());
                    counters.rx_multi_buffer += u64::from(frames.len() > 1);
                    on_frame(packet);
                    delivered += 1;
                }
                Err(RxDrop::Oversized(len)) => {
                    counters.rx_dropped_oversized += 1;
                    log::debug!(
                        "{}: dropped a received packet of {len} bytes in {} frames: larger than the largest \
                         frame ({} bytes)",
                        info.name,
                        frames.len(),
                        info.max_frame(),
                    );
                }
                Err(RxDrop::Broken) => {
                    counters.rx_dropped_broken += 1;
                    log::debug!("{}: dropped a received packet that lost an invalid descriptor", info.name);
                }
            }
        }
        if start == 0 && rx_batch.len() == rx_batch.capacity() {
            // A chain as long as the RX ring that has not ended: impossible from a correct
            // kernel (it writes a packet's descriptors at once, into free slots only). Drop
            // it rather than hold every frame.
            if !std::mem::replace(rx_discarding, true) {
                counters.rx_dropped_broken += 1;
            }
            log::debug!("{}: dropped a received chain of {} frames that does not end", info.name, rx_batch.len());
            start = rx_batch.len();
        }
        // Every frame of a finished packet goes back to the kernel now; the first frames of
        // an unfinished one stay at the front of the batch for the next call.
        socket.recycle(rx_batch.drain(..start));
        Ok(delivered)
    }

    /// Take up to `max` SYNs from the SYN lane and hand them to `on_frame`; their frames go
    /// back to the shared fill ring. A packet of several frames (the lane's socket is bound
    /// without `XDP_USE_SG`, so the kernel should deliver none) or with an invalid descriptor
    /// is dropped and counted as broken.
    fn recv_syn_lane(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> usize {
        let XdpDevice { socket, info, lane_batch, counters, .. } = self;
        let taken = socket.receive_syn_lane(max, lane_batch);
        if taken.descs == 0 {
            return 0;
        }
        let mut delivered = 0;
        for frame in lane_batch.iter() {
            if frame.continues() || frame.is_broken() {
                counters.rx_dropped_broken += 1;
                log::debug!("{}: dropped a frame of the SYN lane that is not a whole packet", info.name);
                continue;
            }
            on_frame(socket.umem().data(frame));
            delivered += 1;
        }
        counters.syn_lane += delivered as u64;
        socket.recycle(lane_batch.drain(..));
        delivered
    }

    /// [`Device::send`] when a packet may take more than one send frame: let `fill` write into
    /// the scratch buffer, then copy the packet into as many frames as it needs.
    fn send_chain(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.socket.umem().span_capacity() >= self.tx_scratch.len()
            && self.socket.tx_ring_room(self.tx_frames_per_packet)
            && let Some(span) = self.socket.alloc_span()
        {
            return self.send_span(span, fill);
        }
        // Room for the largest packet first: `fill` may write any length up to it.
        if !self.socket.tx_room(self.tx_frames_per_packet) {
            return Ok(false);
        }
        let capacity = self.tx_scratch.len();
        let len = fill(&mut self.tx_scratch);
        if len == 0 {
            return Ok(true);
        }
        if len > capacity {
            return Err(overfilled(len, capacity));
        }
        let packet = &self.tx_scratch[..len];
        let checksum = if self.tx_offload { checksum_request(packet) } else { None };
        // Cannot fail: the room of a full-sized packet was checked, the socket is multi-buffer
        // whenever a packet may exceed a frame, and has TX metadata whenever `tx_offload` is on.
        let queued = self.socket.transmit_copy(packet, checksum);
        debug_assert!(queued, "transmit_copy refused {len} bytes after tx_room");
        let frames = len.div_ceil(self.socket.umem().tx_capacity() as usize);
        self.counters.tx_multi_buffer += u64::from(frames > 1);
        self.counters.tx_checksum_offloaded += u64::from(checksum.is_some());
        log::trace!("{}: queued {len} bytes in {frames} frames (checksum request {checksum:?})", self.info.name);
        self.note_queued(len)?;
        Ok(true)
    }

    /// [`send_chain`](Self::send_chain) with a span taken and the TX ring slots of a
    /// `max_frame` packet free: `fill` writes the packet in place, where the kernel copies it
    /// from.
    fn send_span(&mut self, mut span: Span, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let capacity = self.tx_scratch.len();
        let buffer = &mut self.socket.umem_mut().span_buffer_mut(&mut span)[..capacity];
        let len = fill(buffer);
        if len == 0 || len > capacity {
            self.socket.umem_mut().free_span(span);
            if len > capacity {
                return Err(overfilled(len, capacity));
            }
            return Ok(true);
        }
        let checksum = if self.tx_offload { checksum_request(&buffer[..len]) } else { None };
        if let Err(span) = self.socket.transmit_span(span, len, checksum) {
            // Unreachable: the ring slots were checked, the socket is multi-buffer whenever a
            // packet may exceed a frame, and has TX metadata whenever `tx_offload` is on.
            debug_assert!(false, "transmit_span refused {len} bytes after tx_ring_room");
            self.socket.umem_mut().free_span(span);
            return Ok(true);
        }
        let frames = len.div_ceil(self.socket.umem().tx_capacity() as usize);
        self.counters.tx_multi_buffer += u64::from(frames > 1);
        self.counters.tx_in_place += 1;
        self.counters.tx_checksum_offloaded += u64::from(checksum.is_some());
        log::trace!(
            "{}: queued {len} bytes in place in {frames} frames (checksum request {checksum:?})",
            self.info.name
        );
        self.note_queued(len)?;
        Ok(true)
    }

    /// Count `len` bytes of a chained packet queued for sending, and kick the kernel once
    /// [`TX_KICK_BYTES`] wait, so that copy mode copies the frames while they are still in
    /// the cache.
    fn note_queued(&mut self, len: usize) -> io::Result<()> {
        self.tx_unkicked += len;
        if self.tx_unkicked >= TX_KICK_BYTES {
            self.tx_unkicked = 0;
            self.socket.flush_tx()?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use bypass_lab::testlab::{Lab, LabConfig, lab_available};

    use super::*;

    /// An Ethernet frame of `ethertype` whose next bytes are `header`, padded to 100 bytes.
    fn frame(ethertype: u16, header: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(header);
        f.resize(100, 0);
        f
    }

    /// An IPv4 header of `ihl` words carrying `proto`, with flags and fragment offset `frag`.
    fn ipv4(ihl: u8, frag: u16, proto: u8) -> Vec<u8> {
        let mut h = vec![0x40 | ihl, 0, 0, 100, 0, 0];
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto]);
        h.resize(usize::from(ihl) * 4, 0);
        h
    }

    #[test]
    fn checksum_requests_name_the_tcp_or_udp_header() {
        let at = |start, offset| Some(TxChecksum { start, offset });
        let ipv6 = |next: u8| {
            let mut h = vec![0x60, 0, 0, 0, 0, 40, next, 64];
            h.resize(40, 0);
            h
        };
        for (name, f, want) in [
            ("IPv4 UDP", frame(0x0800, &ipv4(5, 0x4000, 17)), at(34, 6)),
            ("IPv4 TCP", frame(0x0800, &ipv4(5, 0, 6)), at(34, 16)),
            ("IPv4 TCP with options", frame(0x0800, &ipv4(7, 0x4000, 6)), at(42, 16)),
            ("IPv4 first fragment", frame(0x0800, &ipv4(5, 0x2000, 17)), None),
            ("IPv4 later fragment", frame(0x0800, &ipv4(5, 0x0010, 17)), None),
            ("IPv4 ICMP", frame(0x0800, &ipv4(5, 0, 1)), None),
            ("IPv4 header length below 20", frame(0x0800, &ipv4(4, 0, 17)), None),
            ("IPv6 TCP", frame(0x86dd, &ipv6(6)), at(54, 16)),
            ("IPv6 UDP", frame(0x86dd, &ipv6(17)), at(54, 6)),
            ("IPv6 with a hop-by-hop header", frame(0x86dd, &ipv6(0)), None),
            ("VLAN-tagged", frame(0x8100, &ipv4(5, 0, 17)), None),
            ("ARP", frame(0x0806, &[0; 28]), None),
            ("truncated before the UDP checksum", frame(0x0800, &ipv4(5, 0, 17))[..41].to_vec(), None),
            ("truncated IPv4 header", frame(0x0800, &ipv4(5, 0, 17))[..30].to_vec(), None),
            ("shorter than Ethernet", vec![0; 10], None),
        ] {
            assert_eq!(checksum_request(&f), want, "{name}");
        }
    }

    /// A packet whose first frames fill the receive batch is kept, whole, for the next `recv`
    /// (the batch is cut to 4 frames here; normally it holds the whole RX ring, and the
    /// kernel writes a packet's descriptors at once, so a cut cannot happen).
    #[test]
    fn a_packet_cut_by_a_full_batch_is_kept_for_the_next_recv() {
        if !lab_available("a_packet_cut_by_a_full_batch_is_kept_for_the_next_recv") {
            return;
        }
        let _ = env_logger::builder().is_test(true).try_init();
        let lab = Lab::with_config(LabConfig { mtu: 9000, ..LabConfig::new("cut") }).unwrap();
        let mac = lab.bypass_mac.map(|b| format!("{b:02x}")).join(":");
        let ip = lab.bypass_ip.to_string();
        lab.ip_peer(&["neigh", "replace", &ip, "lladdr", &mac, "dev", &lab.peer_if, "nud", "permanent"]).unwrap();
        let mut dev = lab.in_bypass(|| XdpDevice::open(XdpConfig::new(&lab.bypass_if, lab.bypass_ip))).unwrap();
        dev.rx_batch = Vec::with_capacity(4);
        let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0)).unwrap());
        for seed in [1u8, 2] {
            peer.send_to(&[seed; 8972], (lab.bypass_ip, 5000)).unwrap(); // 9014 bytes: 3 frames
        }
        std::thread::sleep(Duration::from_millis(200));

        let mut got = Vec::new();
        assert_eq!(dev.recv(64, &mut |f| got.push((f.len(), f[42], f[f.len() - 1]))).unwrap(), 1);
        assert_eq!(dev.rx_batch.len(), 1, "the first frame of the second packet stays");
        assert!(dev.rx_batch[0].continues());
        assert_eq!(dev.recv(64, &mut |f| got.push((f.len(), f[42], f[f.len() - 1]))).unwrap(), 1);
        assert!(dev.rx_batch.is_empty());
        assert_eq!(got, [(9014, 1, 1), (9014, 2, 2)]);
        assert_eq!(dev.counters.rx_multi_buffer, 2);
        assert_eq!(dev.recv(64, &mut |_| panic!("nothing more was sent")).unwrap(), 0);
    }

    /// `recv` busy-polls (one system call) only when the RX ring is empty or the last batch
    /// held `RX_GATHER` frames or more; after a smaller batch, frames already waiting are
    /// taken at once.
    #[test]
    fn recv_busy_polls_only_when_the_ring_is_empty_or_the_last_batch_was_big() {
        if !lab_available("recv_busy_polls_only_when_the_ring_is_empty_or_the_last_batch_was_big") {
            return;
        }
        let _ = env_logger::builder().is_test(true).try_init();
        let lab = Lab::create("gather").unwrap();
        let mac = lab.bypass_mac.map(|b| format!("{b:02x}")).join(":");
        let ip = lab.bypass_ip.to_string();
        lab.ip_peer(&["neigh", "replace", &ip, "lladdr", &mac, "dev", &lab.peer_if, "nud", "permanent"]).unwrap();
        let config = XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) };
        let mut dev = lab.in_bypass(|| XdpDevice::open(config)).unwrap();
        assert!(dev.busy_poll, "busy polling could not be enabled on the lab's veth");
        let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0)).unwrap());
        let send = |n: usize| {
            for i in 0..n {
                peer.send_to(&[i as u8; 64], (lab.bypass_ip, 5000)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // Each step: (budget, packets delivered, system calls made).
        let mut step = |budget: usize| {
            let before = dev.syscalls();
            let n = dev.recv(budget, &mut |_| {}).unwrap();
            (n, dev.syscalls() - before)
        };
        send(RX_GATHER + 2);
        assert_eq!(step(2), (2, 0), "frames wait and nothing came before: taken at once");
        assert_eq!(step(RX_GATHER), (RX_GATHER, 0), "a small batch came before: taken at once");
        assert_eq!(step(64), (0, 1), "a big batch came before: a busy-poll pass first");
        assert_eq!(step(64), (0, 1), "the ring is empty: a busy-poll pass");
        send(1);
        assert_eq!(step(64), (1, 0), "after an empty batch the frame waiting is taken at once");
    }
}
