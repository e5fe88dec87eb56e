//! Raw Linux interfaces for AF_XDP and eBPF: the AF_XDP backend's only module with `unsafe` (the
//! interface queries it needs are in `crate::ifreq`).
//!
//! Everything here is a thin, checked wrapper over one system call or one piece of shared
//! memory, and every wrapper is safe to call. The layouts come from the kernel's uapi headers
//! (`linux/bpf.h`, `linux/if_xdp.h`, `linux/if_link.h`).
//!
//! The UMEM and its four rings also live here because their soundness rests on one rule that
//! only this module can enforce: a [`Frame`] token exists for a UMEM frame exactly while user
//! space owns that frame. Tokens are created only when frames are first handed out, or when the
//! kernel gives a frame back through the RX or completion ring; they are consumed when a frame
//! is given to the kernel through the fill or TX ring. Borrowing a frame's bytes therefore
//! never races with the kernel writing them.

#![allow(unsafe_code)]

use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

// ---------------------------------------------------------------------------------------------
// bpf(2)
// ---------------------------------------------------------------------------------------------

/// `enum bpf_cmd` values.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
#[cfg(test)]
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `BPF_MAP_TYPE_ARRAY`: fixed-size values indexed by a 32-bit key, zeroed at creation.
const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_XSKMAP`: an array of AF_XDP sockets indexed by queue.
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`: the attach type of an XDP program on a network device.
const BPF_XDP: u32 = 37;

/// `XDP_FLAGS_SKB_MODE` (`linux/if_link.h`): generic XDP, run on socket buffers by the core.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before any socket buffer exists.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `XDP_PACKET_HEADROOM`: bytes the kernel keeps free in front of received data in a frame.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// `BPF_F_XDP_HAS_FRAGS` (`linux/bpf.h`, a `prog_flags` bit of `BPF_PROG_LOAD`): the program
/// accepts multi-buffer packets, whose bytes past `data_end` lie in fragments it may ignore.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpfInsn {
    /// Opcode: class, size/source and operation bits.
    pub code: u8,
    /// Destination register in the low nibble, source register in the high nibble.
    pub regs: u8,
    /// Signed offset: for memory accesses and jumps.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

/// `bpf_attr` for `BPF_MAP_CREATE` (the leading fields we set; the rest stays zero).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    map_ifindex: u32,
}

/// `bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf_attr` for `BPF_LINK_DETACH`.
#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// `bpf_attr` for `BPF_PROG_TEST_RUN`.
#[cfg(test)]
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

/// Call `bpf(cmd, attr, size_of::<T>())` and return its non-negative result.
///
/// # Safety
///
/// `T` must be the `bpf_attr` member that `cmd` reads, and every pointer stored in `attr` must be
/// valid for the reads and writes that command performs for the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed struct of exactly the size passed; the
    // caller guarantees its layout and pointers suit `cmd`.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, mem::size_of::<T>()) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// Wrap a file descriptor number returned by a successful system call.
fn owned_fd(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }
}

/// Copy `name` into a fixed-size, NUL-terminated kernel object name.
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (slot, byte) in out.iter_mut().zip(name.bytes().filter(|b| b.is_ascii_alphanumeric() || *b == b'_').take(15)) {
        *slot = byte;
    }
    out
}

/// Create an XSKMAP with `max_entries` slots (keys are queue indices, values socket fds).
pub fn xskmap_create(max_entries: u32, name: &str) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // SAFETY: `MapCreateAttr` is the `BPF_MAP_CREATE` member and holds no pointers.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr)? };
    Ok(owned_fd(fd))
}

/// Bytes of a value of the SYN shield's array map: three `u64`s (see `program`): the
/// bucket's schedule, the SYNs shed, the SYNs of those answered with a cookie.
pub const SHIELD_VALUE_SIZE: usize = 24;

/// Create an array map of `max_entries` zeroed values of [`SHIELD_VALUE_SIZE`] bytes (keys
/// are 32-bit indices).
pub fn shield_map_create(max_entries: u32, name: &str) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: SHIELD_VALUE_SIZE as u32,
        max_entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // SAFETY: `MapCreateAttr` is the `BPF_MAP_CREATE` member and holds no pointers.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr)? };
    Ok(owned_fd(fd))
}

/// Read the value at index `key` of `map`, a map made by [`shield_map_create`].
pub fn shield_map_get(map: BorrowedFd<'_>, key: u32) -> io::Result<[u8; SHIELD_VALUE_SIZE]> {
    let mut value = [0u8; SHIELD_VALUE_SIZE];
    let mut attr = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: `MapUpdateAttr` has the layout of the `BPF_MAP_LOOKUP_ELEM` member too; `key`
    // points to a live 4-byte key and `value` to `SHIELD_VALUE_SIZE` writable bytes, the
    // value size `shield_map_create` gives the map (the only kind of map callers pass).
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr)? };
    Ok(value)
}

/// Store the socket `sock` in the XSKMAP `map` at index `key`.
pub fn xskmap_set(map: BorrowedFd<'_>, key: u32, sock: BorrowedFd<'_>) -> io::Result<()> {
    let value: u32 = sock.as_raw_fd() as u32;
    let mut attr = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    // SAFETY: `MapUpdateAttr` is the `BPF_MAP_UPDATE_ELEM` member; `key` and `value` point to
    // live 4-byte values matching the map's key and value sizes.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr)? };
    Ok(())
}

/// Load an XDP program, multi-buffer aware (`BPF_F_XDP_HAS_FRAGS`) if `frags`. On failure,
/// return the error and the verifier's log (empty when the kernel wrote none).
pub fn xdp_prog_load(insns: &[BpfInsn], name: &str, frags: bool) -> Result<OwnedFd, (io::Error, String)> {
    let license = c"GPL"; // bpf_redirect_map is GPL-only.
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_flags: if frags { BPF_F_XDP_HAS_FRAGS } else { 0 },
        prog_name: object_name(name),
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    // First try without a log, as libbpf does: the verifier is faster without one.
    // SAFETY: `ProgLoadAttr` is the `BPF_PROG_LOAD` member; `insns` and `license` point to
    // live memory of the stated length that outlives the call.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) } {
        Ok(fd) => return Ok(owned_fd(fd)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM)) => return Err((e, String::new())),
        Err(_) => {}
    }
    // Load again with a verifier log so the error can say why.
    let mut log = vec![0u8; 1 << 20];
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    // SAFETY: as above; `log_buf` points to `log_size` writable bytes that outlive the call.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) } {
        Ok(fd) => Ok(owned_fd(fd)),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((e, String::from_utf8_lossy(&log[..end]).trim_end().to_string()))
        }
    }
}

/// Attach `prog` to the interface `ifindex` through a BPF link (`flags`: one of the
/// `XDP_FLAGS_*_MODE` values). Closing the returned link detaches the program; so does the
/// death of the process, however it dies.
pub fn xdp_link_create(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr =
        LinkCreateAttr { prog_fd: prog.as_raw_fd() as u32, target_ifindex: ifindex, attach_type: BPF_XDP, flags };
    // SAFETY: `LinkCreateAttr` is the `BPF_LINK_CREATE` member and holds no pointers.
    let fd = unsafe { bpf(BPF_LINK_CREATE, &mut attr)? };
    Ok(owned_fd(fd))
}

/// Detach the program of `link` now (`BPF_LINK_DETACH`, Linux 5.9+), whoever else holds a
/// copy of the link's descriptor: a child forked by another thread holds copies of every
/// descriptor until it execs, and closing ours alone would leave the program attached until
/// then. The link stays open, defunct, until its last descriptor closes.
pub fn xdp_link_detach(link: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = LinkDetachAttr { link_fd: link.as_raw_fd() as u32 };
    // SAFETY: `LinkDetachAttr` is the `BPF_LINK_DETACH` member and holds no pointers.
    unsafe { bpf(BPF_LINK_DETACH, &mut attr)? };
    Ok(())
}

/// Run the XDP program `prog` once on `frame` in the kernel (`BPF_PROG_TEST_RUN`) and return
/// the action it chose (`XDP_PASS` = 2, ...).
#[cfg(test)]
pub fn xdp_test_run(prog: BorrowedFd<'_>, frame: &[u8]) -> io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: `TestRunAttr` is the `BPF_PROG_TEST_RUN` member; `data_in` points to
    // `data_size_in` readable bytes; `data_out` is null with size 0, so nothing is written.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr)? };
    Ok(attr.retval)
}

/// Run the XDP program `prog` once on `frame` as [`xdp_test_run`] does, and return the action
/// and the frame as the program left it.
#[cfg(test)]
pub fn xdp_test_run_frame(prog: BorrowedFd<'_>, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; 4096];
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_size_out: out.len() as u32,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: `TestRunAttr` is the `BPF_PROG_TEST_RUN` member; `data_in` points to
    // `data_size_in` readable bytes and `data_out` to `data_size_out` writable ones, into
    // which the kernel writes at most that many (it fails with ENOSPC rather than overrun).
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr)? };
    out.truncate(attr.data_size_out as usize);
    Ok((attr.retval, out))
}

/// Return `CLOCK_MONOTONIC` now: the clock `bpf_ktime_get_ns` reads, and `std::time::Instant`
/// on Linux.
pub fn monotonic_now() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

// ---------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------

/// Try to lift `RLIMIT_MEMLOCK`. Failing is normal without `CAP_SYS_RESOURCE`, and harmless
/// where `CAP_IPC_LOCK` (root) or memcg accounting (Linux 5.11+) lets the UMEM be pinned anyway.
pub fn raise_memlock() -> io::Result<()> {
    let limit = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: `limit` is a valid rlimit read by the call.
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

// ---------------------------------------------------------------------------------------------
// AF_XDP socket
// ---------------------------------------------------------------------------------------------

/// `SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL_BUDGET` (`asm-generic/socket.h`).
pub const SO_BUSY_POLL: libc::c_int = 46;
/// See [`SO_BUSY_POLL`].
pub const SO_PREFER_BUSY_POLL: libc::c_int = 69;
/// See [`SO_BUSY_POLL`].
pub const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// Create an AF_XDP socket.
pub fn xsk_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 { Err(io::Error::last_os_error()) } else { Ok(owned_fd(fd as libc::c_long)) }
}

/// Set an integer socket option.
pub fn setsockopt_u32(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: u32) -> io::Result<()> {
    // SAFETY: `value` is a live 4-byte integer; the kernel reads `optlen` bytes from it.
    let ret = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, &value as *const u32 as *const libc::c_void, 4) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Read a plain-data socket option of type `T`, requiring the kernel to fill all of it.
///
/// # Safety
///
/// `T` must be a plain C struct for which any bit pattern is valid and which is the layout the
/// kernel writes for (`level`, `name`).
unsafe fn getsockopt_struct<T>(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<T> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes and `len` is a valid in/out length.
    let ret = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, value.as_mut_ptr().cast(), &mut len) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != mem::size_of::<T>() {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "kernel returned a shorter (older) structure"));
    }
    // SAFETY: the kernel filled all of `value`, and the caller guarantees any bytes are valid.
    Ok(unsafe { value.assume_init() })
}

/// Return the offsets of the producer, consumer, flags and descriptors in the four rings.
pub fn xsk_mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: `xdp_mmap_offsets` is plain integers, the layout of XDP_MMAP_OFFSETS (with flags).
    unsafe { getsockopt_struct(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS) }
}

/// Return the `XDP_OPTIONS` flags of a bound socket (`XDP_OPTIONS_ZEROCOPY`).
pub fn xsk_options(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: `xdp_options` is one u32, the layout of XDP_OPTIONS.
    let opts: libc::xdp_options = unsafe { getsockopt_struct(fd, libc::SOL_XDP, libc::XDP_OPTIONS)? };
    Ok(opts.flags)
}

/// Drop counters of an AF_XDP socket (`struct xdp_statistics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Frames dropped for other reasons.
    pub rx_dropped: u64,
    /// Frames dropped because of an invalid RX descriptor.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel rejected as invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty.
    pub tx_ring_empty_descs: u64,
}

/// Return the socket's drop counters.
pub fn xsk_statistics(fd: BorrowedFd<'_>) -> io::Result<XdpStatistics> {
    // SAFETY: `xdp_statistics` is six u64 counters, the layout of XDP_STATISTICS.
    let s: libc::xdp_statistics = unsafe { getsockopt_struct(fd, libc::SOL_XDP, libc::XDP_STATISTICS)? };
    Ok(XdpStatistics {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}

/// Bind the socket to queue `queue` of interface `ifindex` (`flags`: `XDP_*` bind flags).
pub fn xsk_bind(fd: BorrowedFd<'_>, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    bind_xdp(fd, &addr)
}

/// `bind(2)` the socket to `addr`.
fn bind_xdp(fd: BorrowedFd<'_>, addr: &libc::sockaddr_xdp) -> io::Result<()> {
    // SAFETY: `addr` is a valid sockaddr_xdp of the length passed.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            addr as *const libc::sockaddr_xdp as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Bind a second socket to the queue `queue` of interface `ifindex` that `owner` is bound
/// to, sharing `owner`'s UMEM with its fill and completion rings (`XDP_SHARED_UMEM`: a socket
/// on the same queue and device must not have rings of its own for them, and takes no other
/// bind flags; net/xdp/xsk.c, `xsk_bind`). The program then chooses between the two sockets by
/// their XSKMAP keys.
pub fn xsk_bind_shared(fd: BorrowedFd<'_>, ifindex: u32, queue: u32, owner: BorrowedFd<'_>) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: libc::XDP_SHARED_UMEM,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: owner.as_raw_fd() as u32,
    };
    bind_xdp(fd, &addr)
}

/// Ask the kernel to process the TX ring (`sendto` with no data).
pub fn xsk_kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffer and address; the kernel reads nothing.
    let ret = unsafe { libc::sendto(fd.as_raw_fd(), ptr::null(), 0, libc::MSG_DONTWAIT, ptr::null(), 0) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Ask the kernel to process the fill ring, or busy-poll the device (`recvfrom` with no buffer).
pub fn xsk_kick_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffer and address; the kernel writes nothing.
    let ret = unsafe {
        libc::recvfrom(fd.as_raw_fd(), ptr::null_mut(), 0, libc::MSG_DONTWAIT, ptr::null_mut(), ptr::null_mut())
    };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

// ---------------------------------------------------------------------------------------------
// Shared memory: mappings, UMEM, frames, rings
// ---------------------------------------------------------------------------------------------

/// An owned memory mapping, unmapped on drop.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing about it is tied to a thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Map `len` bytes, populated up front. `fd`/`offset` select a ring of an AF_XDP socket
    /// (shared mapping); `None` maps private anonymous memory.
    fn new(len: usize, fd: Option<(BorrowedFd<'_>, u64)>) -> io::Result<Mmap> {
        let (flags, raw_fd, offset) = match fd {
            Some((fd, offset)) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd(), offset),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0),
        };
        // SAFETY: a fresh mapping chosen by the kernel (null hint); it aliases no Rust memory.
        let ptr = unsafe {
            libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, raw_fd, offset as libc::off_t)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mmap { ptr, len })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value owns; no references into it outlive
        // the owner (borrows of UMEM bytes and ring slots are tied to `&self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A UMEM frame owned by user space: a move-only token (no `Clone`).
///
/// Obtain one from [`XskSocket::receive`](crate::xdp::XskSocket::receive) or
/// [`XskSocket::alloc_tx`](crate::xdp::XskSocket::alloc_tx); give it up with
/// [`XskSocket::recycle`](crate::xdp::XskSocket::recycle) or
/// [`XskSocket::transmit`](crate::xdp::XskSocket::transmit). While you hold it, the kernel does
/// not touch its bytes, so [`Umem::data`](crate::xdp::Umem::data) and
/// [`Umem::buffer_mut`](crate::xdp::Umem::buffer_mut) are safe.
///
/// A received packet larger than one frame (multi-buffer, `XDP_USE_SG`) arrives as a chain of
/// frames: every frame but the last [`continues`](Frame::continues) in the next.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Offset of the frame's first byte in the UMEM.
    addr: u64,
    /// Offset of the packet data within the frame.
    offset: u32,
    /// Length of the packet data.
    len: u32,
    /// Identity of the UMEM the frame belongs to.
    umem: u32,
    /// `FRAME_CONTINUES` and `FRAME_BROKEN` bits (received frames only).
    flags: u8,
}

/// The packet goes on in the next frame (the descriptor had `XDP_PKT_CONTD`).
const FRAME_CONTINUES: u8 = 1 << 0;
/// A descriptor of the frame's packet was invalid and dropped, so the packet is incomplete.
const FRAME_BROKEN: u8 = 1 << 1;

impl Frame {
    /// Return the offset of the frame in the UMEM.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Return the length of the packet data in the frame.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Return whether the frame holds no packet data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Return whether the received packet goes on in the next frame (`XDP_PKT_CONTD`).
    pub fn continues(&self) -> bool {
        self.flags & FRAME_CONTINUES != 0
    }
    /// Return whether the received packet lost a descriptor the kernel wrote outside the UMEM
    /// (never expected from a correct kernel): the packet is incomplete and must be dropped.
    pub fn is_broken(&self) -> bool {
        self.flags & FRAME_BROKEN != 0
    }
}

/// Bytes kept in front of the packet in every send frame for `struct xsk_tx_metadata` when TX
/// metadata is on (`linux/if_xdp.h`, Linux 6.8+; 24 bytes since 6.14): `flags` (u64), then
/// the request's `csum_start` and `csum_offset` (u16 each) and `launch_time` (u64, aligned).
pub const TX_METADATA_LEN: u32 = 24;

/// Where the kernel is to compute a packet's Internet checksum as it sends it (the
/// `csum_start`/`csum_offset` request of `struct xsk_tx_metadata`, `XDP_TXMD_FLAGS_CHECKSUM`):
/// over the bytes from `start` to the end of the packet, stored at `start + offset`. The field
/// must hold the pseudo-header sum beforehand, as for a NIC's `CHECKSUM_PARTIAL` offload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxChecksum {
    /// Offset of the first byte summed (the TCP or UDP header), from the Ethernet header.
    pub start: u16,
    /// Offset of the checksum field from `start` (16 for TCP, 6 for UDP).
    pub offset: u16,
}

/// A run of adjacent frames at the end of the UMEM, past the frames, that one packet is
/// written into whole and sent as a chain of descriptors that follow each other without a
/// gap (see `UmemArea::new`). Move-only, like [`Frame`].
#[derive(Debug, PartialEq, Eq)]
pub struct Span {
    index: u32,
    umem: u32,
}

/// The spans a UMEM keeps beside its frames: `count` of `frames` frames each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanLayout {
    /// How many spans.
    pub count: u32,
    /// Frames per span: enough for the largest packet and its TX metadata.
    pub frames: u32,
}

/// The packet buffer area registered with an AF_XDP socket: `count` frames of `size` bytes,
/// then its spans.
pub struct UmemArea {
    map: Mmap,
    frame_size: u32,
    id: u32,
    /// Bytes of TX metadata in front of the packet in each send frame (0 or
    /// [`TX_METADATA_LEN`]).
    tx_metadata_len: u32,
    /// Where the spans start (the frames' end), and how they are laid out.
    spans_start: u64,
    spans: SpanLayout,
}

impl UmemArea {
    /// Allocate `count` frames of `size` bytes (a power of two), with `tx_metadata_len` bytes
    /// of TX metadata (0 or [`TX_METADATA_LEN`]) in front of every packet sent, and return
    /// the area with one token per frame.
    ///
    /// With `spans` (a count above 0), the area also keeps that many spans of adjacent frames
    /// after the frames, and registers in unaligned mode (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`),
    /// where a descriptor may start anywhere and cross into the next frame. A packet written
    /// whole into a span then goes out as descriptors of [`tx_capacity`](Self::tx_capacity)
    /// bytes that follow each other without a gap: in aligned mode each descriptor of a chain
    /// must start past the TX metadata room of its own frame, so a packet larger than a frame
    /// has to be copied into the frames piece by piece. The kernel reads the TX metadata of
    /// the first descriptor of a packet only (`xsk_build_skb`, net/xdp/xsk.c), so the bytes
    /// in front of the others are the packet's own. The frames keep their aligned addresses
    /// either way.
    pub fn new(count: u32, size: u32, tx_metadata_len: u32, spans: SpanLayout) -> io::Result<(UmemArea, Vec<Frame>)> {
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        if count == 0 || !size.is_power_of_two() || !matches!(tx_metadata_len, 0 | TX_METADATA_LEN) {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let spans = if spans.frames == 0 { SpanLayout::default() } else { spans };
        let frames_len = count as usize * size as usize;
        let len = frames_len + spans.count as usize * spans.frames as usize * size as usize;
        let area = UmemArea {
            map: Mmap::new(len, None)?,
            frame_size: size,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            tx_metadata_len,
            spans_start: frames_len as u64,
            spans,
        };
        let frames = (0..count)
            .map(|i| Frame { addr: i as u64 * size as u64, offset: 0, len: 0, umem: area.id, flags: 0 })
            .collect();
        Ok((area, frames))
    }

    /// Return the size of one frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Return how many packet bytes one send frame holds: the frame less its TX metadata.
    pub fn tx_capacity(&self) -> u32 {
        self.frame_size - self.tx_metadata_len
    }

    /// Return the spans the area keeps, one token each (none without spans).
    pub fn span_tokens(&self) -> Vec<Span> {
        (0..self.spans.count).map(|index| Span { index, umem: self.id }).collect()
    }

    /// Return how many packet bytes a span holds: its frames less the TX metadata.
    pub fn span_capacity(&self) -> usize {
        (self.spans.frames * self.frame_size - self.tx_metadata_len) as usize
    }

    /// Return whether the area registers in unaligned mode (it keeps spans).
    pub fn unaligned(&self) -> bool {
        self.spans.count > 0
    }

    fn span_addr(&self, span: &Span) -> u64 {
        assert_eq!(span.umem, self.id, "a Span was used with a UMEM it does not belong to");
        self.spans_start + u64::from(span.index) * u64::from(self.spans.frames * self.frame_size)
    }

    /// Return the room for a packet in a span you hold, [`span_capacity`](Self::span_capacity)
    /// bytes after its TX metadata.
    pub fn span_buffer_mut(&mut self, span: &mut Span) -> &mut [u8] {
        let start = self.span_addr(span) as usize + self.tx_metadata_len as usize;
        // SAFETY: spans lie in the mapping past the frames (`new`); holding the token means
        // the kernel does not read or write these bytes; `&mut self` rules out other borrows.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(start), self.span_capacity()) }
    }

    /// Write the TX metadata in front of the packet in `span`, as
    /// [`set_tx_metadata`](Self::set_tx_metadata) does for a frame.
    pub fn set_span_tx_metadata(&mut self, span: &mut Span, checksum: Option<TxChecksum>) -> bool {
        let at = self.span_addr(span);
        self.write_tx_metadata(at, checksum)
    }

    /// Register the area with the AF_XDP socket `fd` (`XDP_UMEM_REG`), with TX metadata if
    /// the area keeps room for it (`XDP_UMEM_TX_METADATA_LEN`, Linux 6.11+; older kernels
    /// refuse the flag with EINVAL).
    pub fn register(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let reg = libc::xdp_umem_reg {
            addr: self.map.ptr.as_ptr() as u64,
            len: self.map.len as u64,
            chunk_size: self.frame_size,
            headroom: 0,
            flags: if self.tx_metadata_len > 0 { libc::XDP_UMEM_TX_METADATA_LEN } else { 0 }
                | if self.unaligned() { libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG } else { 0 },
            tx_metadata_len: self.tx_metadata_len,
        };
        // SAFETY: `reg` is a valid xdp_umem_reg; it describes memory this area owns, which stays
        // mapped while the socket lives (the socket's owner keeps the area alive, see XskSocket).
        let ret = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_UMEM_REG,
                &reg as *const libc::xdp_umem_reg as *const libc::c_void,
                mem::size_of::<libc::xdp_umem_reg>() as libc::socklen_t,
            )
        };
        if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Check that `frame` belongs to this area (a token from another UMEM is a caller bug).
    fn check(&self, frame: &Frame) {
        assert_eq!(frame.umem, self.id, "a Frame was used with a UMEM it does not belong to");
    }

    /// Return the packet data of a frame (for a received frame: the received bytes).
    pub fn data(&self, frame: &Frame) -> &[u8] {
        self.check(frame);
        let start = frame.addr as usize + frame.offset as usize;
        // SAFETY: tokens are created in bounds (`new`, `frame_at`), so start..start+len lies in
        // the mapping; holding the token means the kernel does not write these bytes; the slice
        // borrows `self`, so the mapping outlives it.
        unsafe { std::slice::from_raw_parts(self.map.ptr.as_ptr().add(start), frame.len as usize) }
    }

    /// Return the frame's room for a packet to send: the whole frame but its TX metadata,
    /// [`tx_capacity`](Self::tx_capacity) bytes.
    pub fn buffer_mut(&mut self, frame: &mut Frame) -> &mut [u8] {
        self.check(frame);
        let start = frame.addr as usize + self.tx_metadata_len as usize;
        // SAFETY: as in `data`; the frame lies in the mapping (and `tx_metadata_len` is less
        // than a frame, see `new`), the kernel does not touch it while the token is held, and
        // `&mut self` rules out any other borrow of the area's bytes.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(start), self.tx_capacity() as usize) }
    }

    /// Write the TX metadata in front of the packet in `frame`: a checksum request, or none.
    /// Return `false` (writing nothing) when the area keeps no room for TX metadata.
    pub fn set_tx_metadata(&mut self, frame: &mut Frame, checksum: Option<TxChecksum>) -> bool {
        self.check(frame);
        self.write_tx_metadata(frame.addr, checksum)
    }

    /// Write the TX metadata at `at`, the start of a frame or span the caller holds.
    fn write_tx_metadata(&mut self, at: u64, checksum: Option<TxChecksum>) -> bool {
        if self.tx_metadata_len == 0 {
            return false;
        }
        // SAFETY: as in `buffer_mut`, for the first `tx_metadata_len` bytes of a frame or
        // span the caller holds (its token is borrowed mutably by the callers).
        let meta = unsafe {
            std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(at as usize), self.tx_metadata_len as usize)
        };
        meta.fill(0);
        if let Some(TxChecksum { start, offset }) = checksum {
            // The kernel reads the struct in its own byte order.
            meta[0..8].copy_from_slice(&u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM).to_ne_bytes());
            meta[8..10].copy_from_slice(&start.to_ne_bytes());
            meta[10..12].copy_from_slice(&offset.to_ne_bytes());
        }
        true
    }

    /// Turn a descriptor address from the kernel into a token, after checking that the data
    /// range lies within one frame of the area. `None` for an impossible descriptor.
    fn frame_at(&self, addr: u64, len: u32) -> Option<Frame> {
        // In unaligned mode the kernel hands back the buffer's start with the data's offset
        // in the top 16 bits (`xp_get_handle`, include/net/xsk_buff_pool.h).
        let addr = if self.unaligned() {
            (addr & libc::XSK_UNALIGNED_BUF_ADDR_MASK) + (addr >> libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT)
        } else {
            addr
        };
        if addr >= self.spans_start {
            return None;
        }
        let base = addr & !(self.frame_size as u64 - 1);
        let offset = (addr - base) as u32;
        let fits_frame = offset.checked_add(len).is_some_and(|end| end <= self.frame_size);
        let in_area = base.checked_add(self.frame_size as u64).is_some_and(|end| end <= self.spans_start);
        (fits_frame && in_area).then_some(Frame { addr: base, offset, len, umem: self.id, flags: 0 })
    }
}

/// One mapped ring: producer and consumer indices, flags and `size` slots of `T`.
struct Ring<T> {
    _map: Mmap,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    slots: NonNull<T>,
    mask: u32,
    size: u32,
}

// SAFETY: the ring is shared memory owned by this value (through `_map`); nothing is thread-bound.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Map the ring of `size` entries at page offset `pgoff` of the socket `fd`.
    fn map(fd: BorrowedFd<'_>, off: &libc::xdp_ring_offset, pgoff: u64, size: u32) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * mem::size_of::<T>();
        let map = Mmap::new(len, Some((fd, pgoff)))?;
        let aligned = |o: u64, align: usize| (o as usize).is_multiple_of(align) && (o as usize) < len;
        if !aligned(off.producer, 4)
            || !aligned(off.consumer, 4)
            || !aligned(off.flags, 4)
            || !aligned(off.desc, mem::align_of::<T>())
        {
            return Err(io::Error::other("kernel reported misaligned ring offsets"));
        }
        // SAFETY: all offsets were checked to lie inside the mapping and be suitably aligned;
        // the kernel only ever accesses the indices and flags as 32-bit words.
        Ok(unsafe { Ring::in_mapping(map, off, size) })
    }

    /// Return the ring laid out at `off` in `map`, `size` (a power of two) slots.
    ///
    /// # Safety
    ///
    /// The indices and flags (32-bit words) and the `size` slots at the offsets must lie inside
    /// `map`, each aligned for its type.
    unsafe fn in_mapping(map: Mmap, off: &libc::xdp_ring_offset, size: u32) -> Ring<T> {
        let base = map.ptr.as_ptr();
        // SAFETY: the caller guarantees every offset lies inside the mapping, aligned.
        unsafe {
            Ring {
                producer: NonNull::new_unchecked(base.add(off.producer as usize).cast()),
                consumer: NonNull::new_unchecked(base.add(off.consumer as usize).cast()),
                flags: NonNull::new_unchecked(base.add(off.flags as usize).cast()),
                slots: NonNull::new_unchecked(base.add(off.desc as usize).cast()),
                mask: size - 1,
                size,
                _map: map,
            }
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping owned by `self` (checked in `map`), aligned, and only
        // ever accessed atomically by user space and the kernel.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`. A relaxed load, like libxdp's plain read of the flags word.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn read(&self, index: u32) -> T {
        // SAFETY: `index & mask` is within the `size` slots of the mapping; the caller only reads
        // slots the kernel published (index < acquired producer), which it no longer writes.
        unsafe { ptr::read(self.slots.as_ptr().add((index & self.mask) as usize)) }
    }

    fn write(&mut self, index: u32, value: T) {
        // SAFETY: in bounds as in `read`; the caller only writes slots the kernel has released
        // (index < acquired consumer + size) and not yet published, which the kernel does not read.
        unsafe { ptr::write(self.slots.as_ptr().add((index & self.mask) as usize), value) }
    }
}

/// The user-space producer side of a ring (fill and TX), as in libxdp's `xsk_ring_prod`.
struct Producer<T> {
    ring: Ring<T>,
    /// Next slot to write; slots below it and at or above `published` are written, not yet visible.
    cached_prod: u32,
    /// Kernel's consumer index plus `size`: the first slot we may not write.
    cached_cons: u32,
}

impl<T: Copy> Producer<T> {
    fn new(ring: Ring<T>) -> Self {
        let cached_prod = ring.producer().load(Ordering::Relaxed);
        let cached_cons = ring.consumer().load(Ordering::Relaxed).wrapping_add(ring.size);
        Producer { ring, cached_prod, cached_cons }
    }

    /// Return how many slots are free, refreshing from the kernel only when fewer than `want`.
    fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        // Acquire: the kernel's reads of the slots it released happen before we overwrite them.
        self.cached_cons = self.ring.consumer().load(Ordering::Acquire).wrapping_add(self.ring.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Write `value` into the next free slot (invisible to the kernel until `submit`).
    fn push(&mut self, value: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        self.ring.write(self.cached_prod, value);
        self.cached_prod = self.cached_prod.wrapping_add(1);
        true
    }

    /// Publish every slot written so far.
    fn submit(&mut self) {
        // Release: the slot contents are visible to the kernel before the new producer index.
        self.ring.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Return how many published or written entries the kernel has not consumed yet.
    fn outstanding(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.ring.consumer().load(Ordering::Acquire))
    }
}

/// The user-space consumer side of a ring (RX and completion), as in libxdp's `xsk_ring_cons`.
struct Consumer<T> {
    ring: Ring<T>,
    /// Kernel's producer index, as last read.
    cached_prod: u32,
    /// Next slot to read.
    cached_cons: u32,
}

impl<T: Copy> Consumer<T> {
    fn new(ring: Ring<T>) -> Self {
        let cached_prod = ring.producer().load(Ordering::Relaxed);
        let cached_cons = ring.consumer().load(Ordering::Relaxed);
        Consumer { ring, cached_prod, cached_cons }
    }

    /// Return how many entries are ready (at most `max`), refreshing from the kernel when the
    /// cached ones are used up.
    fn available(&mut self, max: u32) -> u32 {
        let mut ready = self.cached_prod.wrapping_sub(self.cached_cons);
        if ready == 0 {
            // Acquire: the kernel's writes of the slots happen before we read them.
            self.cached_prod = self.ring.producer().load(Ordering::Acquire);
            ready = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        ready.min(max)
    }

    /// Read the next ready entry. Call only after `available` returned more entries than read.
    fn next(&mut self) -> T {
        debug_assert!(self.cached_prod != self.cached_cons);
        let value = self.ring.read(self.cached_cons);
        self.cached_cons = self.cached_cons.wrapping_add(1);
        value
    }

    /// Give every slot read so far back to the kernel.
    fn release(&mut self) {
        // Release: our reads of the slots happen before the kernel may overwrite them.
        self.ring.consumer().store(self.cached_cons, Ordering::Release);
    }
}

/// Ring sizes (entries, each a power of two) of one socket.
#[derive(Clone, Copy, Debug)]
pub struct RingSizes {
    /// Fill ring: frames given to the kernel for receiving.
    pub fill: u32,
    /// Completion ring: sent frames given back by the kernel.
    pub completion: u32,
    /// RX ring: received frames.
    pub rx: u32,
    /// TX ring: frames to send.
    pub tx: u32,
}

/// Set the four ring sizes on `fd` and map the rings (after `XDP_UMEM_REG`, before `bind`).
pub fn xsk_rings(fd: BorrowedFd<'_>, sizes: RingSizes) -> io::Result<(FillQueue, CompletionQueue, RxQueue, TxQueue)> {
    setsockopt_u32(fd, libc::SOL_XDP, libc::XDP_UMEM_FILL_RING, sizes.fill)?;
    setsockopt_u32(fd, libc::SOL_XDP, libc::XDP_UMEM_COMPLETION_RING, sizes.completion)?;
    setsockopt_u32(fd, libc::SOL_XDP, libc::XDP_RX_RING, sizes.rx)?;
    setsockopt_u32(fd, libc::SOL_XDP, libc::XDP_TX_RING, sizes.tx)?;
    let off = xsk_mmap_offsets(fd)?;
    let fill = Ring::<u64>::map(fd, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, sizes.fill)?;
    let comp = Ring::<u64>::map(fd, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING, sizes.completion)?;
    let rx = Ring::<libc::xdp_desc>::map(fd, &off.rx, libc::XDP_PGOFF_RX_RING as u64, sizes.rx)?;
    let tx = Ring::<libc::xdp_desc>::map(fd, &off.tx, libc::XDP_PGOFF_TX_RING as u64, sizes.tx)?;
    Ok((
        FillQueue(Producer::new(fill)),
        CompletionQueue(Consumer::new(comp), 0),
        RxQueue { ring: Consumer::new(rx), invalid: 0, lost_start: false },
        TxQueue(Producer::new(tx)),
    ))
}

/// Set the size of an RX ring on `fd` and map it, for a socket with no rings but that one
/// (one that shares another socket's UMEM on the same queue: [`xsk_bind_shared`]).
pub fn xsk_rx_ring(fd: BorrowedFd<'_>, size: u32) -> io::Result<RxQueue> {
    setsockopt_u32(fd, libc::SOL_XDP, libc::XDP_RX_RING, size)?;
    let off = xsk_mmap_offsets(fd)?;
    let rx = Ring::<libc::xdp_desc>::map(fd, &off.rx, libc::XDP_PGOFF_RX_RING as u64, size)?;
    Ok(RxQueue { ring: Consumer::new(rx), invalid: 0, lost_start: false })
}

/// The fill ring: frames handed to the kernel to receive into.
pub struct FillQueue(Producer<u64>);

impl FillQueue {
    /// Queue `frame` for receiving (visible after [`submit`](Self::submit)); give it back when
    /// the ring is full.
    pub fn push(&mut self, frame: Frame) -> Result<(), Frame> {
        if self.0.push(frame.addr) { Ok(()) } else { Err(frame) }
    }
    /// Publish the queued frames to the kernel.
    pub fn submit(&mut self) {
        self.0.submit();
    }
    /// Return whether the kernel asks for a wake-up (`recvfrom`/`poll`) to see new frames.
    pub fn needs_wakeup(&self) -> bool {
        self.0.ring.needs_wakeup()
    }
}

/// The completion ring: frames the kernel has finished sending.
/// The second field counts descriptors dropped as invalid.
pub struct CompletionQueue(Consumer<u64>, u64);

impl CompletionQueue {
    /// Move up to `max` completed frames into `out` and completed spans into `spans` (never
    /// beyond `out`'s spare capacity, so never allocating; `spans` must have room for every
    /// span of the area) and release their slots in one step. Return how many descriptors
    /// were taken.
    ///
    /// A span comes back with the completion of its first descriptor: the kernel completes
    /// all the descriptors of a packet together, once it has copied them (copy mode; spans
    /// are not used in zero-copy mode), and the others are passed over.
    pub fn pop_into(&mut self, umem: &UmemArea, max: usize, out: &mut Vec<Frame>, spans: &mut Vec<Span>) -> usize {
        let n = self.0.available(max.min(out.capacity() - out.len()) as u32);
        let span_bytes = u64::from(umem.spans.frames * umem.frame_size);
        for _ in 0..n {
            let addr = self.0.next();
            if umem.unaligned() && addr >= umem.spans_start {
                let (index, at) = ((addr - umem.spans_start) / span_bytes, (addr - umem.spans_start) % span_bytes);
                if index < u64::from(umem.spans.count) {
                    if at == u64::from(umem.tx_metadata_len) && spans.len() < spans.capacity() {
                        spans.push(Span { index: index as u32, umem: umem.id });
                    }
                    continue;
                }
            }
            match umem.frame_at(addr, 0) {
                Some(frame) => out.push(frame),
                None => {
                    self.1 += 1;
                    log::debug!("dropped AF_XDP completion: address {addr:#x} outside the UMEM");
                }
            }
        }
        if n > 0 {
            self.0.release();
        }
        n as usize
    }
    /// Return how many descriptors were dropped because they lay outside the UMEM.
    pub fn invalid(&self) -> u64 {
        self.1
    }
}

/// The RX ring: frames the kernel has received into.
pub struct RxQueue {
    ring: Consumer<libc::xdp_desc>,
    /// Descriptors dropped because they lay outside the UMEM.
    invalid: u64,
    /// The packet being read lost its first descriptors as invalid: mark its next frame broken.
    lost_start: bool,
}

/// What one [`XskSocket::receive`](crate::xdp::XskSocket::receive) took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxTaken {
    /// Descriptors consumed from the ring (invalid ones included).
    pub descs: usize,
    /// Packets whose last descriptor was among them.
    pub packets: usize,
}

impl RxQueue {
    /// Move received frames into `out` (never beyond its spare capacity) until `max_packets`
    /// packets have ended, and release their slots in one step. A packet ends with a
    /// descriptor without `XDP_PKT_CONTD`; the frames of a multi-buffer packet carry
    /// [`Frame::continues`], so a packet whose end is not in the ring yet (or did not fit in
    /// `out`) leaves its first frames at the end of `out`, and the rest follows in the next
    /// call, appended to the same vector.
    ///
    /// A descriptor outside the UMEM is dropped and counted; the packet it belonged to is
    /// marked [`Frame::is_broken`] (on its frame before the lost one, or else on its next).
    pub fn pop_into(&mut self, umem: &UmemArea, max_packets: usize, out: &mut Vec<Frame>) -> RxTaken {
        let mut taken = RxTaken::default();
        if max_packets == 0 {
            return taken;
        }
        let n = self.ring.available((out.capacity() - out.len()).min(u32::MAX as usize) as u32);
        for _ in 0..n {
            let desc = self.ring.next();
            taken.descs += 1;
            let continues = desc.options & libc::XDP_PKT_CONTD != 0;
            match umem.frame_at(desc.addr, desc.len) {
                Some(mut frame) => {
                    if continues {
                        frame.flags |= FRAME_CONTINUES;
                    }
                    if self.lost_start {
                        frame.flags |= FRAME_BROKEN;
                        self.lost_start = false;
                    }
                    out.push(frame);
                }
                None => {
                    self.invalid += 1;
                    log::debug!(
                        "dropped AF_XDP RX descriptor outside the UMEM: addr {:#x} len {}",
                        desc.addr,
                        desc.len
                    );
                    match out.last_mut() {
                        // Inside a packet: mark it, and end it here if the lost one ended it.
                        Some(last) if last.continues() => {
                            last.flags |= FRAME_BROKEN;
                            if !continues {
                                last.flags &= !FRAME_CONTINUES;
                            }
                        }
                        // The first descriptor of a longer packet: mark its next frame.
                        _ if continues => self.lost_start = true,
                        // A whole one-descriptor packet lost: nothing left to mark.
                        _ => {}
                    }
                }
            }
            if !continues {
                taken.packets += 1;
                if taken.packets == max_packets {
                    break;
                }
            }
        }
        if taken.descs > 0 {
            self.ring.release();
        }
        taken
    }
    /// Return how many descriptors were dropped because they lay outside the UMEM (never
    /// expected from a correct kernel).
    pub fn invalid(&self) -> u64 {
        self.invalid
    }
    /// Return whether received frames are waiting.
    pub fn is_empty(&mut self) -> bool {
        self.ring.available(1) == 0
    }
}

/// The TX ring: frames handed to the kernel to send.
pub struct TxQueue(Producer<libc::xdp_desc>);

impl TxQueue {
    /// Queue the first `len` bytes of `frame` for sending (visible after
    /// [`submit`](Self::submit)); give the frame back when the ring is full or `len` is larger
    /// than a frame.
    ///
    /// With `continues`, the packet goes on in the next frame pushed (`XDP_PKT_CONTD`: the
    /// socket must be bound with `XDP_USE_SG`); push a chain only after checking
    /// [`free`](Self::free) for all of it, and submit it whole.
    ///
    /// With `metadata`, the kernel reads the TX metadata in front of the packet (written with
    /// [`UmemArea::set_tx_metadata`]; `XDP_TX_METADATA`, on the first frame of a packet only).
    pub fn push(
        &mut self,
        umem: &UmemArea,
        frame: Frame,
        len: usize,
        continues: bool,
        metadata: bool,
    ) -> Result<(), Frame> {
        umem.check(&frame);
        if len > umem.tx_capacity() as usize || (metadata && umem.tx_metadata_len == 0) {
            return Err(frame);
        }
        let mut options = if continues { libc::XDP_PKT_CONTD } else { 0 };
        if metadata {
            options |= libc::XDP_TX_METADATA;
        }
        // The packet starts after the metadata room, in every frame of a packet: the kernel
        // checks each descriptor so (`xp_aligned_validate_desc`).
        let addr = frame.addr + u64::from(umem.tx_metadata_len);
        let desc = libc::xdp_desc { addr, len: len as u32, options };
        if self.0.push(desc) { Ok(()) } else { Err(frame) }
    }
    /// Queue the first `len` bytes of `span` for sending as one packet: descriptors of
    /// [`tx_capacity`](UmemArea::tx_capacity) bytes, one after the other in the span
    /// (`XDP_PKT_CONTD` on all but the last; the socket must be bound with `XDP_USE_SG` if
    /// there is more than one), with the TX metadata read for the first if `metadata`. Give
    /// the span back when the ring lacks the slots, or `len` is 0 or exceeds the span.
    pub fn push_span(&mut self, umem: &UmemArea, span: Span, len: usize, metadata: bool) -> Result<(), Span> {
        let capacity = umem.tx_capacity() as usize;
        let descs = len.div_ceil(capacity);
        if len == 0
            || len > umem.span_capacity()
            || (metadata && umem.tx_metadata_len == 0)
            || (self.0.free(descs as u32) as usize) < descs
        {
            return Err(span);
        }
        let start = umem.span_addr(&span) + u64::from(umem.tx_metadata_len);
        for k in 0..descs {
            let mut options = if k + 1 < descs { libc::XDP_PKT_CONTD } else { 0 };
            if metadata && k == 0 {
                options |= libc::XDP_TX_METADATA;
            }
            let piece = capacity.min(len - k * capacity);
            let desc = libc::xdp_desc { addr: start + (k * capacity) as u64, len: piece as u32, options };
            let pushed = self.0.push(desc);
            debug_assert!(pushed, "the TX ring refused a descriptor after free");
        }
        Ok(())
    }
    /// Return how many slots are free, at most `want` (asking the kernel only when fewer
    /// than `want` are known to be).
    pub fn free(&mut self, want: u32) -> u32 {
        self.0.free(want).min(want)
    }
    /// Publish the queued frames to the kernel.
    pub fn submit(&mut self) {
        self.0.submit();
    }
    /// Return how many queued frames the kernel has not taken yet.
    pub fn outstanding(&self) -> u32 {
        self.0.outstanding()
    }
    /// Return whether the kernel asks for a `sendto` to process the ring.
    pub fn needs_wakeup(&self) -> bool {
        self.0.ring.needs_wakeup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: u32 = 4096;

    /// An RX ring of 8 slots in plain memory, as the kernel would lay it out, with a way to
    /// produce descriptors into it.
    struct FakeRx {
        queue: RxQueue,
        produced: u32,
    }

    impl FakeRx {
        fn new() -> FakeRx {
            let ring = fake_ring(8);
            FakeRx { queue: RxQueue { ring: Consumer::new(ring), invalid: 0, lost_start: false }, produced: 0 }
        }

        /// Publish descriptors (frame index or `None` for an address outside the UMEM, length,
        /// whether the packet continues), as the kernel does.
        fn produce(&mut self, descs: &[(Option<u64>, u32, bool)]) {
            for &(frame, len, contd) in descs {
                let addr = frame.map_or(1 << 40, |i| i * FRAME as u64 + 256);
                let options = if contd { libc::XDP_PKT_CONTD } else { 0 };
                self.queue.ring.ring.write(self.produced, libc::xdp_desc { addr, len, options });
                self.produced += 1;
            }
            self.queue.ring.ring.producer().store(self.produced, Ordering::Release);
        }
    }

    /// A ring of `size` (a power of two) slots of `T` in plain memory, as the kernel would
    /// lay it out.
    fn fake_ring<T: Copy>(size: u32) -> Ring<T> {
        let off = libc::xdp_ring_offset { producer: 0, consumer: 64, flags: 128, desc: 192 };
        let len = off.desc as usize + size as usize * mem::size_of::<T>();
        let map = Mmap::new(len, None).unwrap();
        // SAFETY: the offsets lie inside the fresh mapping and are aligned (see `off`).
        unsafe { Ring::in_mapping(map, &off, size) }
    }

    #[test]
    fn a_packet_in_a_span_goes_out_as_descriptors_that_follow_each_other() {
        let spans = SpanLayout { count: 2, frames: 3 };
        let (mut umem, _) = UmemArea::new(8, FRAME, TX_METADATA_LEN, spans).unwrap();
        assert!(umem.unaligned());
        let mut tokens = umem.span_tokens();
        assert_eq!(tokens.len(), 2);
        assert_eq!(umem.span_capacity(), 3 * FRAME as usize - TX_METADATA_LEN as usize);
        let mut span = tokens.pop().unwrap();
        let len = 2 * umem.tx_capacity() as usize + 100;
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        umem.span_buffer_mut(&mut span)[..len].copy_from_slice(&bytes);
        let checksum = TxChecksum { start: 34, offset: 16 };
        assert!(umem.set_span_tx_metadata(&mut span, Some(checksum)));
        let mut tx = TxQueue(Producer::new(fake_ring(32)));
        tx.push_span(&umem, span, len, true).unwrap();
        tx.submit();
        // The second span, the last, starts after the 8 frames and the first span.
        let start = (8 + 3) * FRAME as u64;
        let cap = umem.tx_capacity();
        let descs: Vec<libc::xdp_desc> = (0..3).map(|i| tx.0.ring.read(i)).collect();
        let shape: Vec<(u64, u32, u32)> = descs.iter().map(|d| (d.addr, d.len, d.options)).collect();
        let m = u64::from(TX_METADATA_LEN);
        assert_eq!(
            shape,
            [
                (start + m, cap, libc::XDP_PKT_CONTD | libc::XDP_TX_METADATA),
                (start + m + u64::from(cap), cap, libc::XDP_PKT_CONTD),
                (start + m + 2 * u64::from(cap), 100, 0),
            ],
            "no gap between the descriptors, the metadata on the first only"
        );
        // What the kernel reads: the packet's bytes, contiguous, and the request in front.
        // SAFETY: the span lies in the mapping; nothing else borrows it here.
        let sent = unsafe { std::slice::from_raw_parts(umem.map.ptr.as_ptr().add((start + m) as usize), len) };
        assert_eq!(sent, &bytes[..]);
        // SAFETY: as above, for the metadata in front of the span's packet.
        let meta = unsafe { std::slice::from_raw_parts(umem.map.ptr.as_ptr().add(start as usize), 12) };
        assert_eq!(meta[0..8], u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM).to_ne_bytes());
        assert_eq!(meta[8..10], 34u16.to_ne_bytes());

        // The kernel completes all three; the span comes back once, a frame as a frame.
        let mut completion = CompletionQueue(Consumer::new(fake_ring(32)), 0);
        let frame_addr = 5 * u64::from(FRAME) + m;
        for (i, addr) in descs.iter().map(|d| d.addr).chain([frame_addr]).enumerate() {
            completion.0.ring.write(i as u32, addr);
        }
        completion.0.ring.producer().store(4, Ordering::Release);
        let (mut frames, mut spans_back) = (Vec::with_capacity(8), Vec::with_capacity(2));
        assert_eq!(completion.pop_into(&umem, 64, &mut frames, &mut spans_back), 4);
        assert_eq!(spans_back, [Span { index: 1, umem: umem.id }]);
        assert_eq!(frames.iter().map(|f| f.addr).collect::<Vec<_>>(), [5 * u64::from(FRAME)]);
        assert_eq!(completion.invalid(), 0);
        // A span's packet needs its ring slots, and fits the span.
        let mut full = TxQueue(Producer::new(fake_ring(32)));
        assert!(full.push_span(&umem, tokens.pop().unwrap(), umem.span_capacity() + 1, false).is_err());
    }

    #[test]
    fn received_addresses_in_unaligned_mode_carry_their_offset_in_the_top_bits() {
        let (umem, _) = UmemArea::new(8, FRAME, 0, SpanLayout { count: 1, frames: 2 }).unwrap();
        // The buffer's start, and the data's offset from it in the top 16 bits.
        let handle = 3 * u64::from(FRAME) + (256u64 << libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT);
        let frame = umem.frame_at(handle, 1000).unwrap();
        assert_eq!((frame.addr, frame.offset, frame.len), (3 * u64::from(FRAME), 256, 1000));
        // Nothing is received into a span.
        assert_eq!(umem.frame_at(8 * u64::from(FRAME) + 256, 60), None);
        // Aligned mode reads the address as it is.
        let (aligned, _) = UmemArea::new(8, FRAME, 0, SpanLayout::default()).unwrap();
        let frame = aligned.frame_at(3 * u64::from(FRAME) + 256, 1000).unwrap();
        assert_eq!((frame.addr, frame.offset), (3 * u64::from(FRAME), 256));
    }

    /// Return (frame index, continues, broken) of each frame.
    fn shape(frames: &[Frame]) -> Vec<(u64, bool, bool)> {
        frames.iter().map(|f| (f.addr / FRAME as u64, f.continues(), f.is_broken())).collect()
    }

    #[test]
    fn rx_takes_whole_packets_up_to_the_budget() {
        let (umem, _) = UmemArea::new(16, FRAME, 0, SpanLayout::default()).unwrap();
        let mut rx = FakeRx::new();
        rx.produce(&[(Some(0), 3840, true), (Some(1), 3840, true), (Some(2), 1334, false), (Some(3), 60, false)]);
        rx.produce(&[(Some(4), 3840, true), (Some(5), 100, false)]);
        let mut out = Vec::with_capacity(8);
        // A budget of one packet stops after its last frame.
        assert_eq!(rx.queue.pop_into(&umem, 1, &mut out), RxTaken { descs: 3, packets: 1 });
        assert_eq!(shape(&out), [(0, true, false), (1, true, false), (2, false, false)]);
        assert_eq!(out[0].len(), 3840);
        // No budget, no descriptor.
        out.clear();
        assert_eq!(rx.queue.pop_into(&umem, 0, &mut out), RxTaken::default());
        // A full vector stops inside a packet; the rest follows, appended.
        let mut small = Vec::with_capacity(2);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut small), RxTaken { descs: 2, packets: 1 });
        assert_eq!(shape(&small), [(3, false, false), (4, true, false)]);
        small.remove(0);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut small), RxTaken { descs: 1, packets: 1 });
        assert_eq!(shape(&small), [(4, true, false), (5, false, false)]);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut small), RxTaken::default());
        assert_eq!(rx.queue.invalid(), 0);
    }

    #[test]
    fn rx_marks_packets_that_lost_a_descriptor() {
        let (umem, _) = UmemArea::new(16, FRAME, 0, SpanLayout::default()).unwrap();
        let mut rx = FakeRx::new();
        let mut out = Vec::with_capacity(8);
        // The last descriptor lost: the packet ends, broken, on the frame before it.
        rx.produce(&[(Some(0), 3840, true), (None, 100, false)]);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut out), RxTaken { descs: 2, packets: 1 });
        assert_eq!(shape(&out), [(0, false, true)]);
        // A middle one lost: the packet goes on, broken.
        out.clear();
        rx.produce(&[(Some(1), 3840, true), (None, 3840, true), (Some(2), 100, false)]);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut out), RxTaken { descs: 3, packets: 1 });
        assert_eq!(shape(&out), [(1, true, true), (2, false, false)]);
        // The first one lost: the next frame carries the mark.
        out.clear();
        rx.produce(&[(None, 3840, true), (Some(3), 100, false)]);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut out), RxTaken { descs: 2, packets: 1 });
        assert_eq!(shape(&out), [(3, false, true)]);
        // A one-descriptor packet lost: nothing to hand over, the next packet is whole.
        out.clear();
        rx.produce(&[(None, 60, false), (Some(4), 60, false)]);
        assert_eq!(rx.queue.pop_into(&umem, 64, &mut out), RxTaken { descs: 2, packets: 2 });
        assert_eq!(shape(&out), [(4, false, false)]);
        assert_eq!(rx.queue.invalid(), 4);
    }
}
