//! Kernel TCP on io_uring: the server and client of rows 2u and 2ud.
//!
//! What a performance-minded user of kernel sockets reaches for in 2026, set up as the
//! io_uring documentation recommends for speed (io_uring_setup(2), io_uring_register(2),
//! io_uring_prep_recv_multishot(3), io_uring_prep_send_zc(3), io_uring_setup_buf_ring(3)):
//!
//! - one ring per thread with `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`
//!   (completion work runs only when the thread asks, never interrupting it) and
//!   `IORING_SETUP_SUBMIT_ALL`;
//! - registered files only: the listener and every accepted socket live in the ring's file
//!   table (multishot accept straight into it, `IORING_FILE_INDEX_ALLOC`), and the
//!   connection-rate client creates its sockets there too (`IORING_OP_SOCKET`);
//! - multishot accept and multishot receive into a provided-buffer ring
//!   ([`BUF_ENTRIES`] buffers of [`BUF_SIZE`] bytes);
//! - `IORING_OP_SEND_ZC` from a registered buffer for bulk sending;
//! - busy polling: each turn of the loop is one `io_uring_enter(2)` that submits what is
//!   queued and runs the deferred completions (`IORING_ENTER_GETEVENTS`, waiting for none),
//!   then reads the completion queue. No SQPOLL: see docs/performance.md.
//!
//! Each `io_uring_enter(2)` is counted as one system call (it is the only one on the data path).

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::types::{BufRingEntry, DestinationSlot, Fixed};
use io_uring::{IoUring, cqueue, opcode, squeue};

use super::Workload;
use super::kernel::{ClientPlan, ClientResult, ServerResult, Shared, connect_loop, histogram, wait_ready};
use super::measure::{DONE, MEASURING, Usage, Window, count_syscalls};

/// Provided buffers in each ring's buffer ring (a power of two, at most 32,768).
pub const BUF_ENTRIES: u16 = 256;
/// Bytes per provided buffer.
pub const BUF_SIZE: usize = 32 * 1024;
/// Bytes per bulk `SEND_ZC` (as the kernel rows' 64 KiB writes).
const BULK_CHUNK: usize = 64 * 1024;
/// Bytes of [`Uring`]'s scratch page.
const SCRATCH: usize = 4096;
/// Slots in the registered file table.
const FILES: u32 = 1024;
/// The buffer group of the provided-buffer ring.
const BGID: u16 = 0;
/// Submission queue entries.
const SQ_ENTRIES: u32 = 256;
/// io_uring_enter(2)'s flag that runs (deferred) completion work (include/uapi/linux/io_uring.h).
const IORING_ENTER_GETEVENTS: u32 = 1;

// What a completion answers: the operation in the top byte of `user_data`, the file slot in
// the next three, a buffer id or length in the low four.
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_SEND_ZC: u64 = 4;
const OP_CLOSE: u64 = 5;
const OP_SOCKOPT: u64 = 6;
const OP_SOCKET: u64 = 7;
const OP_CONNECT: u64 = 8;
const OP_SHUTDOWN: u64 = 9;

/// Return the `user_data` of operation `op` on file slot `slot`.
fn tag(op: u64, slot: u32) -> u64 {
    (op << 56) | (u64::from(slot) << 32)
}

/// Return the operation a completion answers.
fn op_of(user_data: u64) -> u64 {
    user_data >> 56
}

/// Return the file slot a completion answers for.
fn slot_of(user_data: u64) -> u32 {
    ((user_data >> 32) & 0xff_ffff) as u32
}

/// `TCP_NODELAY` = 1, as the kernel rows set it; it must outlive the `SetSockOpt`s that point at it.
static ONE: libc::c_int = 1;

/// A page-aligned anonymous mapping, unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// Map `len` bytes, zeroed.
    fn new(len: usize) -> io::Result<Mapping> {
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping made in `new`, unmapped once. The kernel pins
        // the pages of a registered buffer ring, so an unmap after the ring is gone is safe.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// One thread's ring: the ring, its provided-buffer ring and the buffers behind it.
struct Uring {
    // Dropped first: the ring lets go of the buffer ring and the buffers before they are unmapped.
    ring: IoUring,
    ring_map: Mapping,
    bufs: Mapping,
    /// The buffer ring's tail as we have written it (published with a release store).
    tail: u16,
    /// A registered buffer for `SEND_ZC` (constant bytes).
    zc: Mapping,
    /// A page the single-shot receives write into: owned by the ring, so a receive still in
    /// flight when a run ends in an error never writes into memory that is gone.
    scratch: Mapping,
    /// A page the sends of requests (and connect's address) read from: owned by the ring for
    /// the same reason, so a send still in flight never reads memory that is gone.
    out: Mapping,
}

impl Uring {
    /// Set up a ring as the documentation recommends for one busy thread (see the module doc).
    fn new() -> io::Result<Uring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .setup_cqsize(SQ_ENTRIES * 16)
            .build(SQ_ENTRIES)?;
        ring.submitter().register_files_sparse(FILES)?;
        let ring_map = Mapping::new(usize::from(BUF_ENTRIES) * size_of::<BufRingEntry>())?;
        let bufs = Mapping::new(usize::from(BUF_ENTRIES) * BUF_SIZE)?;
        // SAFETY: `ring_map` holds BUF_ENTRIES entries, page-aligned, and lives as long as the ring.
        unsafe { ring.submitter().register_buf_ring_with_flags(ring_map.ptr as u64, BUF_ENTRIES, BGID, 0)? };
        let zc = Mapping::new(BULK_CHUNK)?;
        // SAFETY: the mapping is written before use and lives as long as the ring.
        unsafe { std::ptr::write_bytes(zc.ptr.cast::<u8>(), 0x5a, BULK_CHUNK) };
        let iov = libc::iovec { iov_base: zc.ptr, iov_len: BULK_CHUNK };
        // SAFETY: `iov` describes the live mapping `zc`, which outlives the ring.
        unsafe { ring.submitter().register_buffers(&[iov])? };
        let scratch = Mapping::new(SCRATCH)?;
        let out = Mapping::new(SCRATCH)?;
        let mut u = Uring { ring, ring_map, bufs, tail: 0, zc, scratch, out };
        for bid in 0..BUF_ENTRIES {
            u.give_back(bid);
        }
        Ok(u)
    }

    /// Return buffer `bid` to the buffer ring (io_uring_buf_ring_add + advance).
    fn give_back(&mut self, bid: u16) {
        let ring = self.ring_map.ptr.cast::<BufRingEntry>();
        // SAFETY: the index is masked into the ring's BUF_ENTRIES entries; the kernel reads an
        // entry only once the tail below covers it.
        let entry = unsafe { &mut *ring.add(usize::from(self.tail & (BUF_ENTRIES - 1))) };
        entry.set_addr(self.bufs.ptr as u64 + u64::from(bid) * BUF_SIZE as u64);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the u16 the kernel reads in the first entry; it is 2-aligned.
        let tail = unsafe { &*BufRingEntry::tail(ring).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// Return the bytes the kernel put in buffer `bid`.
    fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        let len = len.min(BUF_SIZE);
        // SAFETY: `bid` < BUF_ENTRIES names a buffer inside `bufs`, filled by the kernel
        // with `len` bytes before it posted the completion we are handling.
        unsafe { std::slice::from_raw_parts(self.bufs.ptr.cast::<u8>().add(usize::from(bid) * BUF_SIZE), len) }
    }

    /// Return a pointer to byte `offset` (< [`SCRATCH`]) of the scratch page.
    fn scratch_ptr(&mut self, offset: usize) -> *mut u8 {
        // SAFETY: callers pass offsets below SCRATCH, inside the mapping.
        unsafe { self.scratch.ptr.cast::<u8>().add(offset.min(SCRATCH - 1)) }
    }

    /// Return the first `len` (<= [`SCRATCH`]) bytes of the scratch page.
    fn scratch(&self, len: usize) -> &[u8] {
        // SAFETY: the mapping holds SCRATCH bytes; the kernel wrote them before the
        // completion we are handling.
        unsafe { std::slice::from_raw_parts(self.scratch.ptr.cast::<u8>(), len.min(SCRATCH)) }
    }

    /// Copy `bytes` to byte `at` of the out page and return where they are. Sends and
    /// connects point there, not into the caller's memory, which an error may free while
    /// the kernel still reads it.
    fn out(&mut self, at: usize, bytes: &[u8]) -> *const u8 {
        assert!(at + bytes.len() <= SCRATCH, "{} bytes at {at} do not fit the out page", bytes.len());
        // SAFETY: the range is inside the mapping (asserted) and nothing else writes it while
        // this borrow of the ring is held; the kernel only reads it, for sends queued later.
        unsafe {
            let to = self.out.ptr.cast::<u8>().add(at);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len());
            to
        }
    }

    /// Return a pointer to byte `at` (< [`SCRATCH`]) of the out page.
    fn out_ptr(&self, at: usize) -> *const u8 {
        // SAFETY: the offset is clamped inside the mapping.
        unsafe { self.out.ptr.cast::<u8>().add(at.min(SCRATCH - 1)) }
    }

    /// Queue a send of the `len` bytes at byte `at` of the out page on `slot`.
    fn send_out(&mut self, slot: u32, at: usize, len: usize) -> io::Result<()> {
        let len = len.min(SCRATCH - at.min(SCRATCH - 1));
        let e = opcode::Send::new(Fixed(slot), self.out_ptr(at), len as u32).flags(libc::MSG_NOSIGNAL);
        self.push(e.build().user_data(tag(OP_SEND, slot)))
    }

    /// Queue `entry`, submitting first if the queue is full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an entry points at (the out page, the scratch page, the
            // provided and registered buffers, `ONE`) is a mapping the ring owns and drops
            // after itself, or a static; the bulk server's chunks are kept for the whole run.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            self.enter()?;
        }
    }

    /// Submit what is queued and run the deferred completion work, waiting for nothing.
    fn enter(&mut self) -> io::Result<()> {
        let to_submit = self.ring.submission().len() as u32;
        count_syscalls(1);
        // SAFETY: io_uring_enter(2) with no argument struct.
        match unsafe { self.ring.submitter().enter::<libc::sigset_t>(to_submit, 0, IORING_ENTER_GETEVENTS, None) } {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Take the completions posted so far into `out`.
    fn reap(&mut self, out: &mut Vec<cqueue::Entry>) {
        out.clear();
        out.extend(self.ring.completion());
    }

    /// Queue a multishot receive on `slot` into the provided-buffer ring.
    fn recv_multi(&mut self, slot: u32) -> io::Result<()> {
        self.push(opcode::RecvMulti::new(Fixed(slot), BGID).build().user_data(tag(OP_RECV, slot)))
    }

    /// Queue a zero-copy send of the registered 64 KiB buffer on `slot`.
    fn send_zc(&mut self, slot: u32) -> io::Result<()> {
        let e = opcode::SendZc::new(Fixed(slot), self.zc.ptr.cast::<u8>(), BULK_CHUNK as u32)
            .buf_index(Some(0))
            .flags(libc::MSG_NOSIGNAL);
        self.push(e.build().user_data(tag(OP_SEND_ZC, slot)))
    }

    /// Queue the close of the socket in `slot`, which frees the slot.
    fn close(&mut self, slot: u32) -> io::Result<()> {
        self.push(opcode::Close::new(Fixed(slot)).build().user_data(tag(OP_CLOSE, slot)))
    }

    /// Queue `setsockopt(TCP_NODELAY)` on `slot`, through the ring.
    fn nodelay(&mut self, slot: u32) -> io::Result<()> {
        let e = opcode::SetSockOpt::new(
            Fixed(slot),
            libc::IPPROTO_TCP as u32,
            libc::TCP_NODELAY as u32,
            (&raw const ONE).cast(),
            size_of::<libc::c_int>() as u32,
        );
        self.push(e.build().user_data(tag(OP_SOCKOPT, slot)))
    }

    /// Put `fd` into file slot `slot`.
    fn register(&mut self, slot: u32, fd: i32) -> io::Result<()> {
        count_syscalls(1);
        self.ring.submitter().register_files_update(slot, &[fd]).map(drop)
    }
}

/// What a server does with a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Echo,
    Sink,
    Source,
}

/// A server connection: its echo queue (buffer id, bytes sent, length) and what is in flight.
#[derive(Default)]
struct Conn {
    queue: VecDeque<(u16, usize, usize)>,
    sending: bool,
    /// Zero-copy sends whose notification has not come (row source).
    notifs: u32,
    /// The peer closed or reset; close once nothing is in flight.
    closing: bool,
    /// The close is submitted.
    closed: bool,
}

/// Return the error of a negative completion result.
fn errno(res: i32) -> io::Error {
    io::Error::from_raw_os_error(-res)
}

/// Serve `workload`'s clients on `listener` through io_uring until they are done (or
/// `shared.stop`), busy polling in this thread.
pub fn server(listener: TcpListener, workload: Workload, shared: &Shared) -> Result<ServerResult, String> {
    let io = |what: &str, e: io::Error| format!("io_uring server: {what}: {e}");
    let mut u = Uring::new().map_err(|e| io("set up the ring", e))?;
    let role = match workload {
        Workload::BulkUp => Role::Sink,
        Workload::BulkDown | Workload::File => Role::Source,
        _ => Role::Echo,
    };
    let expected = match workload {
        Workload::Rr { conns, .. } => Some(conns),
        Workload::BulkUp | Workload::BulkDown | Workload::File => Some(1),
        Workload::Connect => None,
    };
    // The listener takes the last slot; accepted sockets go to free ones below it.
    let lslot = FILES - 1;
    u.register(lslot, listener.as_raw_fd()).map_err(|e| io("register the listener", e))?;
    let accept =
        || opcode::AcceptMulti::new(Fixed(lslot)).allocate_file_index(true).build().user_data(tag(OP_ACCEPT, 0));
    u.push(accept()).map_err(|e| io("accept", e))?;
    shared.ready.store(true, Ordering::SeqCst);
    let mut conns: Vec<Option<Conn>> = (0..FILES).map(|_| None).collect();
    // The slots with a connection, so a turn of the loop visits those only.
    let mut active: Vec<u32> = Vec::new();
    let (mut accepted, mut open) = (0usize, 0usize);
    let mut window = Window::default();
    let mut cqes = Vec::new();
    loop {
        window.observe(&shared.phase, || 0);
        u.enter().map_err(|e| io("io_uring_enter", e))?;
        u.reap(&mut cqes);
        for cqe in &cqes {
            let (res, flags, ud) = (cqe.result(), cqe.flags(), cqe.user_data());
            let slot = slot_of(ud);
            match op_of(ud) {
                OP_ACCEPT => {
                    if res < 0 {
                        return Err(io("accept", errno(res)));
                    }
                    if !cqueue::more(flags) {
                        u.push(accept()).map_err(|e| io("accept", e))?;
                    }
                    let s = res as u32;
                    conns[s as usize] = Some(Conn::default());
                    active.push(s);
                    accepted += 1;
                    open += 1;
                    u.nodelay(s).map_err(|e| io("set TCP_NODELAY", e))?;
                    u.recv_multi(s).map_err(|e| io("receive", e))?;
                }
                OP_SOCKOPT if res < 0 => return Err(io("set TCP_NODELAY", errno(res))),
                OP_RECV => {
                    let Some(c) = conns[slot as usize].as_mut() else { continue };
                    if res > 0 {
                        let bid = cqueue::buffer_select(flags).ok_or("io_uring server: a receive without a buffer")?;
                        if role == Role::Echo {
                            c.queue.push_back((bid, 0, res as usize));
                        } else {
                            u.give_back(bid);
                        }
                        if !cqueue::more(flags) {
                            u.recv_multi(slot).map_err(|e| io("receive", e))?;
                        }
                    } else if res == -libc::ENOBUFS {
                        // Every buffer was in use: receive again once some are back.
                        if !cqueue::more(flags) {
                            u.recv_multi(slot).map_err(|e| io("receive", e))?;
                        }
                    } else if res == 0 || res == -libc::ECONNRESET {
                        c.closing = true;
                    } else {
                        return Err(io("receive", errno(res)));
                    }
                }
                OP_SEND => {
                    let Some(c) = conns[slot as usize].as_mut() else { continue };
                    c.sending = false;
                    if res < 0 {
                        if !matches!(-res, libc::EPIPE | libc::ECONNRESET) {
                            return Err(io("send", errno(res)));
                        }
                        c.closing = true;
                        while let Some((bid, _, _)) = c.queue.pop_front() {
                            u.give_back(bid);
                        }
                        continue;
                    }
                    if let Some(front) = c.queue.front_mut() {
                        front.1 += res as usize;
                        if front.1 == front.2 {
                            let bid = front.0;
                            c.queue.pop_front();
                            u.give_back(bid);
                        }
                    }
                }
                OP_SEND_ZC => {
                    let Some(c) = conns[slot as usize].as_mut() else { continue };
                    if cqueue::notif(flags) {
                        c.notifs -= 1;
                        continue;
                    }
                    if cqueue::more(flags) {
                        c.notifs += 1;
                    }
                    c.sending = false;
                    if res < 0 {
                        if !matches!(-res, libc::EPIPE | libc::ECONNRESET) {
                            return Err(io("send", errno(res)));
                        }
                        c.closing = true;
                    }
                }
                OP_CLOSE => {
                    conns[slot as usize] = None;
                    active.retain(|&a| a != slot);
                    open -= 1;
                }
                _ => {}
            }
        }
        // Start the next send of each connection, or close it once nothing is in flight.
        for &s in &active {
            let Some(c) = conns[s as usize].as_mut() else { continue };
            if c.sending || c.closed {
                continue;
            }
            match role {
                Role::Echo if !c.queue.is_empty() => {
                    let &(bid, off, len) = c.queue.front().expect("not empty");
                    let data = u.buffer(bid, len)[off..].as_ptr();
                    let e = opcode::Send::new(Fixed(s), data, (len - off) as u32).flags(libc::MSG_NOSIGNAL);
                    u.push(e.build().user_data(tag(OP_SEND, s))).map_err(|e| io("send", e))?;
                    c.sending = true;
                }
                Role::Source if !c.closing => {
                    u.send_zc(s).map_err(|e| io("send", e))?;
                    c.sending = true;
                }
                _ if c.closing && c.notifs == 0 => {
                    c.closed = true;
                    u.close(s).map_err(|e| io("close", e))?;
                }
                _ => {}
            }
        }
        let all_done = expected.is_some_and(|n| accepted >= n) && open == 0;
        if all_done || (shared.stop.load(Ordering::Relaxed) && (open == 0 || expected.is_some())) {
            break;
        }
    }
    window.finish(0);
    let (usage, _) = window.delta().ok_or("io_uring server: the client's measurement window was not seen")?;
    Ok(ServerResult { usage, copied: None, mode: "kernel TCP on io_uring, busy polling".into(), file: None })
}

/// Connect a plain socket (setup, outside any measurement window) and register it in `slot`.
fn connect_registered(u: &mut Uring, plan: &ClientPlan, slot: u32) -> Result<std::net::TcpStream, String> {
    count_syscalls(5);
    let s = std::net::TcpStream::connect_timeout(&plan.server, Duration::from_secs(3))
        .map_err(|e| format!("io_uring client: connect to {}: {e}", plan.server))?;
    count_syscalls(1);
    s.set_nodelay(true).map_err(|e| format!("io_uring client: set TCP_NODELAY: {e}"))?;
    u.register(slot, s.as_raw_fd()).map_err(|e| format!("io_uring client: register the socket: {e}"))?;
    Ok(s)
}

/// Run `plan.workload` against the server through io_uring, busy polling.
pub fn client(plan: &ClientPlan, shared: &Shared, interrupted: &AtomicBool) -> Result<ClientResult, String> {
    wait_ready(shared)?;
    let mut u = Uring::new().map_err(|e| format!("io_uring client: set up the ring: {e}"))?;
    match plan.workload {
        Workload::Rr { size, conns } => request_response(&mut u, plan, size, conns, shared, interrupted),
        Workload::BulkUp => bulk_up(&mut u, plan, shared, interrupted),
        Workload::BulkDown | Workload::File => bulk_down(&mut u, plan, shared, interrupted),
        Workload::Connect => connect_rate(&mut u, plan, shared, interrupted),
    }
}

/// Measure over `conns` connections, each with one `size`-byte request in flight at a time,
/// every echo checked byte for byte.
fn request_response(
    u: &mut Uring,
    plan: &ClientPlan,
    size: usize,
    conns: usize,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let io = |what: &str, e: io::Error| format!("io_uring client: {what} ({}): {e}", plan.server);
    let mut streams = Vec::with_capacity(conns);
    for i in 0..conns {
        streams.push(connect_registered(u, plan, i as u32)?);
    }
    let msg: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
    // Sent from the ring's out page (request sizes are at most a page).
    if size > SCRATCH {
        return Err(format!("io_uring client: requests of {size} bytes do not fit a page"));
    }
    u.out(0, &msg);
    let mut got = vec![Vec::with_capacity(size); conns];
    let mut sent_at = vec![Instant::now(); conns];
    // Bytes of the request in flight not yet sent (a short send is sent on).
    let mut unsent = vec![0usize; conns];
    for i in 0..conns {
        u.recv_multi(i as u32).map_err(|e| io("receive", e))?;
        sent_at[i] = Instant::now();
        u.send_out(i as u32, 0, size).map_err(|e| io("send", e))?;
        unsent[i] = size;
    }
    let mut latency = histogram();
    let limit = Duration::from_secs(2);
    let (mut requests, mut measuring, mut draining) = (0u64, false, false);
    let start_all = Instant::now();
    let (mut start, mut start_usage) = (start_all, Usage::default());
    let warm_end = start_all + plan.warmup;
    let end = warm_end + plan.duration;
    let (mut now, mut last_progress) = (Instant::now(), Instant::now());
    let (mut elapsed, mut usage) = (Duration::ZERO, Usage::default());
    let mut outstanding = conns;
    let mut cqes = Vec::new();
    loop {
        if !draining && (now >= end || interrupted.load(Ordering::Relaxed)) {
            // Collect the requests still in flight, unrecorded.
            draining = true;
            (elapsed, usage) = (now - start, Usage::now().since(&start_usage));
            shared.phase.store(DONE, Ordering::SeqCst);
        }
        if draining && outstanding == 0 {
            break;
        }
        if !measuring && now >= warm_end {
            measuring = true;
            shared.phase.store(MEASURING, Ordering::SeqCst);
            (start, start_usage) = (Instant::now(), Usage::now());
        }
        u.enter().map_err(|e| io("io_uring_enter", e))?;
        u.reap(&mut cqes);
        for cqe in &cqes {
            let (res, flags, ud) = (cqe.result(), cqe.flags(), cqe.user_data());
            let i = slot_of(ud) as usize;
            match op_of(ud) {
                OP_RECV => {
                    if res == -libc::ENOBUFS {
                        if !cqueue::more(flags) {
                            u.recv_multi(i as u32).map_err(|e| io("receive", e))?;
                        }
                        continue;
                    }
                    if res <= 0 {
                        return Err(io(
                            "receive the echo",
                            if res == 0 { io::ErrorKind::UnexpectedEof.into() } else { errno(res) },
                        ));
                    }
                    let bid = cqueue::buffer_select(flags).ok_or("io_uring client: a receive without a buffer")?;
                    got[i].extend_from_slice(u.buffer(bid, res as usize));
                    u.give_back(bid);
                    if !cqueue::more(flags) {
                        u.recv_multi(i as u32).map_err(|e| io("receive", e))?;
                    }
                    if got[i].len() > size {
                        return Err("io_uring client: the server sent more than the echo".into());
                    }
                    if got[i].len() < size {
                        continue;
                    }
                    now = Instant::now();
                    if got[i] != msg {
                        return Err("io_uring client: the echo differs from what was sent".into());
                    }
                    got[i].clear();
                    last_progress = now;
                    outstanding -= 1;
                    if measuring && !draining {
                        latency.saturating_record((now - sent_at[i]).as_nanos() as u64);
                        requests += 1;
                    }
                    if !draining {
                        sent_at[i] = Instant::now();
                        u.send_out(i as u32, 0, size).map_err(|e| io("send", e))?;
                        unsent[i] = size;
                        outstanding += 1;
                    }
                }
                OP_SEND => {
                    if res < 0 {
                        return Err(io("send", errno(res)));
                    }
                    unsent[i] -= (res as usize).min(unsent[i]);
                    if unsent[i] > 0 {
                        u.send_out(i as u32, size - unsent[i], unsent[i]).map_err(|e| io("send", e))?;
                    }
                }
                _ => {}
            }
        }
        now = Instant::now();
        if now - last_progress > limit {
            return Err(format!("io_uring client: no echo for {} s ({})", limit.as_secs(), plan.server));
        }
    }
    drop(streams);
    Ok(ClientResult { latency, units: requests, elapsed, usage, copied: None })
}

/// Spin until a completion of `op` arrives (not a zero-copy notification); return its result and flags. Other
/// completions are handed to `other`.
fn wait_for(
    u: &mut Uring,
    op: u64,
    limit: Duration,
    mut other: impl FnMut(&mut Uring, &cqueue::Entry) -> Result<(), String>,
) -> Result<(i32, u32), String> {
    let deadline = Instant::now() + limit;
    let mut cqes = Vec::new();
    let mut found = None;
    loop {
        u.enter().map_err(|e| format!("io_uring client: io_uring_enter: {e}"))?;
        u.reap(&mut cqes);
        for cqe in &cqes {
            if found.is_none() && op_of(cqe.user_data()) == op && !cqueue::notif(cqe.flags()) {
                found = Some((cqe.result(), cqe.flags()));
            } else {
                other(u, cqe)?;
            }
        }
        if let Some(f) = found {
            return Ok(f);
        }
        if Instant::now() > deadline {
            return Err(format!("io_uring client: no completion within {} s", limit.as_secs()));
        }
        std::hint::spin_loop();
    }
}

/// Stream `SEND_ZC`s of 64 KiB for `duration`; count every byte up to the server's close after our FIN.
fn bulk_up(
    u: &mut Uring,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let io = |what: &str, e: io::Error| format!("io_uring client: {what} ({}): {e}", plan.server);
    let stream = connect_registered(u, plan, 0)?;
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let mut bytes = 0u64;
    let mut notifs = 0u32;
    let count_notif = |notifs: &mut u32, cqe: &cqueue::Entry| {
        if cqueue::notif(cqe.flags()) {
            *notifs -= 1;
        }
    };
    while Instant::now() < end && !interrupted.load(Ordering::Relaxed) {
        u.send_zc(0).map_err(|e| io("send", e))?;
        let (res, flags) = wait_for(u, OP_SEND_ZC, Duration::from_secs(2), |_, c| {
            count_notif(&mut notifs, c);
            Ok(())
        })?;
        if res < 0 {
            return Err(io("send", errno(res)));
        }
        if cqueue::more(flags) {
            notifs += 1;
        }
        bytes += res as u64;
    }
    u.push(opcode::Shutdown::new(Fixed(0), libc::SHUT_WR).build().user_data(tag(OP_SHUTDOWN, 0)))
        .map_err(|e| io("shutdown", e))?;
    let probe = u.scratch_ptr(0);
    u.push(opcode::Recv::new(Fixed(0), probe, 64).build().user_data(tag(OP_RECV, 0)))
        .map_err(|e| io("wait for the close", e))?;
    let (res, _) = wait_for(u, OP_RECV, Duration::from_secs(10), |_, c| {
        count_notif(&mut notifs, c);
        if op_of(c.user_data()) == OP_SHUTDOWN && c.result() < 0 {
            return Err(io("shutdown", errno(c.result())));
        }
        Ok(())
    })?;
    match res {
        0 => {}
        r if r > 0 => return Err("io_uring client: the bulk server sent data".into()),
        r => return Err(io("wait for the close", errno(r))),
    }
    let elapsed = start.elapsed();
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    // The zero-copy notifications still due, so the buffer is free before the ring goes.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut cqes = Vec::new();
    while notifs > 0 && Instant::now() < deadline {
        u.enter().map_err(|e| io("io_uring_enter", e))?;
        u.reap(&mut cqes);
        cqes.iter().for_each(|c| count_notif(&mut notifs, c));
    }
    drop(stream);
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied: None })
}

/// Read what the server streams for `duration` with a multishot receive; count bytes read.
fn bulk_down(
    u: &mut Uring,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let io = |what: &str, e: io::Error| format!("io_uring client: {what} ({}): {e}", plan.server);
    let stream = connect_registered(u, plan, 0)?;
    u.recv_multi(0).map_err(|e| io("receive", e))?;
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let (mut bytes, mut last, mut now) = (0u64, start, start);
    let mut cqes = Vec::new();
    while now < end && !interrupted.load(Ordering::Relaxed) {
        u.enter().map_err(|e| io("io_uring_enter", e))?;
        u.reap(&mut cqes);
        for cqe in &cqes {
            let (res, flags) = (cqe.result(), cqe.flags());
            if op_of(cqe.user_data()) != OP_RECV {
                continue;
            }
            if res > 0 {
                let bid = cqueue::buffer_select(flags).ok_or("io_uring client: a receive without a buffer")?;
                u.give_back(bid);
                bytes += res as u64;
                last = now;
            } else if res == 0 {
                return Err("io_uring client: the server closed the stream".into());
            } else if res != -libc::ENOBUFS {
                return Err(io("receive", errno(res)));
            }
            if !cqueue::more(flags) {
                u.recv_multi(0).map_err(|e| io("receive", e))?;
            }
        }
        now = Instant::now();
        if now - last > Duration::from_secs(2) {
            return Err("io_uring client: the stream stalled for 2 s".into());
        }
    }
    let elapsed = now - start;
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    drop(stream);
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied: None })
}

/// Connect, exchange 64 bytes, close, again and again, every step an io_uring operation on
/// a registered socket: socket -> connect -> send -> receive linked in one submission, then close.
fn connect_rate(
    u: &mut Uring,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let SocketAddr::V4(v4) = plan.server else {
        return Err("io_uring client: the io_uring rows run over IPv4 only".into());
    };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
        sin_zero: [0; 8],
    };
    let msg = [0x42u8; 64];
    // Both in the ring's out page, the address 8-aligned after the message.
    u.out(0, &msg);
    // SAFETY: a sockaddr_in is plain integers; its bytes are what connect(2) reads.
    let sin_bytes =
        unsafe { std::slice::from_raw_parts((&raw const sin).cast::<u8>(), size_of::<libc::sockaddr_in>()) };
    let sin_at = u.out(64, sin_bytes);
    let slot = DestinationSlot::try_from_slot_target(0).map_err(|_| "io_uring client: no file slot 0")?;
    let once = |u: &mut Uring| -> Result<(), String> {
        let fail = |what: &str, res: i32| format!("io_uring client: {what} ({}): {}", plan.server, errno(res));
        let link = squeue::Flags::IO_LINK;
        let socket = opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0).file_index(Some(slot));
        let connect = opcode::Connect::new(Fixed(0), sin_at.cast(), size_of::<libc::sockaddr_in>() as u32);
        let push = |u: &mut Uring, e: squeue::Entry| u.push(e).map_err(|e| format!("io_uring client: submit: {e}"));
        push(u, socket.build().flags(link).user_data(tag(OP_SOCKET, 0)))?;
        push(u, connect.build().flags(link).user_data(tag(OP_CONNECT, 0)))?;
        let send = opcode::Send::new(Fixed(0), u.out_ptr(0), 64).flags(libc::MSG_NOSIGNAL);
        push(u, send.build().flags(link).user_data(tag(OP_SEND, 0)))?;
        let mut got = 0usize;
        let mut failed: Option<String> = None;
        while got < 64 {
            let recv = opcode::Recv::new(Fixed(0), u.scratch_ptr(got), (64 - got) as u32);
            push(u, recv.build().user_data(tag(OP_RECV, 0)))?;
            let (res, _) = wait_for(u, OP_RECV, Duration::from_secs(2), |_, c| {
                let what = match op_of(c.user_data()) {
                    OP_SOCKET => "socket",
                    OP_CONNECT => "connect",
                    OP_SEND => "send",
                    _ => return Ok(()),
                };
                if c.result() < 0 && failed.is_none() {
                    failed = Some(fail(what, c.result()));
                }
                Ok(())
            })?;
            if let Some(f) = failed.take() {
                return Err(f);
            }
            match res {
                r if r > 0 => got += r as usize,
                0 => return Err("io_uring client: the server closed before the echo".into()),
                r => return Err(fail("receive the echo", r)),
            }
        }
        if u.scratch(64) != msg {
            return Err("io_uring client: the echo differs from what was sent".into());
        }
        u.close(0).map_err(|e| format!("io_uring client: close: {e}"))?;
        let (res, _) = wait_for(u, OP_CLOSE, Duration::from_secs(2), |_, _| Ok(()))?;
        if res < 0 {
            return Err(fail("close", res));
        }
        Ok(())
    };
    let mut once = once;
    let (window, start_usage) = connect_loop(plan, shared, interrupted, u, |_| Usage::now(), &mut once)?;
    let usage = Usage::now().since(&start_usage);
    let _ = once(u);
    Ok(ClientResult { latency: window.latency, units: window.conns, elapsed: window.elapsed, usage, copied: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Return whether this kernel offers what the io_uring rows use; `Err` says why not.
    fn available() -> Result<(), String> {
        Uring::new().map(drop).map_err(|e| format!("io_uring with buffer rings and registered files: {e}"))
    }

    /// Return whether io_uring is there to test; without it, say so and skip, except under
    /// `CI=true`, where a missing io_uring fails the test.
    fn uring_or_skip(test: &str) -> bool {
        match available() {
            Ok(()) => true,
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("{test}: CI=true and {e}"),
            Err(e) => {
                eprintln!("{test}: skipped: this kernel lacks {e}");
                false
            }
        }
    }

    /// Run `workload` between the io_uring server and client over loopback, briefly.
    fn run(workload: Workload) -> (Result<ServerResult, String>, Result<ClientResult, String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind on loopback");
        let server_addr = listener.local_addr().expect("the listener's address");
        let plan = ClientPlan {
            server: server_addr,
            workload,
            busy: true,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(300),
        };
        let (shared, interrupted) = (Shared::default(), AtomicBool::new(false));
        std::thread::scope(|scope| {
            let shared = &shared;
            let handle = scope.spawn(move || {
                let result = server(listener, workload, shared);
                shared.stop.store(true, Ordering::SeqCst);
                result
            });
            let client = client(&plan, shared, &interrupted);
            shared.stop.store(true, Ordering::SeqCst);
            (handle.join().expect("the server thread panicked"), client)
        })
    }

    /// Every workload of the demo runs on io_uring at both ends: the client verifies each
    /// echo byte for byte (an error otherwise), measures units, and the server sees the window.
    #[test]
    fn io_uring_server_and_client_run_every_workload() {
        if !uring_or_skip("io_uring_server_and_client_run_every_workload") {
            return;
        }
        for workload in super::super::WORKLOADS.into_iter().filter(|w| *w != Workload::File) {
            let key = workload.key();
            let (server, client) = run(workload);
            let client = client.unwrap_or_else(|e| panic!("{key}: io_uring client: {e}"));
            let server = server.unwrap_or_else(|e| panic!("{key}: io_uring server: {e}"));
            assert!(client.units > 0, "{key}: nothing measured");
            if !workload.is_bulk() {
                assert_eq!(client.latency.len(), client.units, "{key}: one latency per unit");
            }
            assert!(server.usage.syscalls > 0 && client.usage.syscalls > 0, "{key}: io_uring_enter counted");
            assert_eq!(server.mode, "kernel TCP on io_uring, busy polling");
        }
    }

    /// An echo that differs from the request is an error, not a measured request.
    #[test]
    fn io_uring_client_rejects_a_wrong_echo() {
        if !uring_or_skip("io_uring_client_rejects_a_wrong_echo") {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind on loopback");
        let plan = ClientPlan {
            server: listener.local_addr().expect("the listener's address"),
            workload: Workload::Rr { size: 64, conns: 1 },
            busy: true,
            warmup: Duration::from_millis(10),
            duration: Duration::from_millis(100),
        };
        let shared = Shared::default();
        shared.ready.store(true, Ordering::SeqCst);
        let liar = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 64];
            s.read_exact(&mut buf).expect("read the request");
            buf[17] ^= 1;
            s.write_all(&buf).expect("write the wrong echo");
            // Hold the connection until the client has judged.
            let _ = s.read(&mut buf);
        });
        let result = client(&plan, &shared, &AtomicBool::new(false));
        let err = result.err().expect("a wrong echo must fail the client");
        assert!(err.contains("differs"), "{err}");
        liar.join().expect("the lying server panicked");
    }
}
