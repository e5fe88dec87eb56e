//! Rows 3, 3s and the `MSG_ZEROCOPY` row: the kernel server sends the server -> client stream
//! without copying it in the system call.
//!
//! - [`Mode::Sendfile`] (row 3) and [`Mode::Splice`] (row 3s) send from a memfd (64 MiB,
//!   filled once per process, sent again and again; the offset wraps), with `sendfile(2)` or
//!   with `splice(2)` file -> pipe -> socket.
//! - [`Mode::MsgZerocopy`] sends from a ring of user buffers with `send(2)` and `MSG_ZEROCOPY`
//!   on a socket with `SO_ZEROCOPY` (Linux `Documentation/networking/msg_zerocopy.rst`). The
//!   kernel pins the pages instead of copying them and reports on the socket's error queue
//!   when it has let go of them: a range of send ids, flagged `SO_EE_CODE_ZEROCOPY_COPIED` if
//!   it copied after all. Between namespaces of one machine (veth, loopback) it always does:
//!   the receive path (`skb_orphan_frags_rx` in `__netif_receive_skb_core`) copies the pinned
//!   pages of every packet delivered to a local socket, since a local reader could otherwise
//!   hold them for ever. The copy moves from `send(2)` to the receive softirq, the sender's
//!   pages stay pinned until the data is acknowledged, and pinning and notifications come on
//!   top; the server reports what the completions said.
//!
//! All three produce the same bytes: byte `i` of the stream is [`pattern(i)`](pattern).
//! The client is the ordinary kernel client (non-blocking `read(2)`, busy polling).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use super::kernel::{ServerResult, Shared};
use super::measure::{MEASURING, Window};

/// Size of the file the server sends from.
const FILE_SIZE: u64 = 64 << 20;
/// Most bytes one `sendfile(2)`, `splice(2)` or `send(2)` call is asked for (as the other
/// servers' 64 KiB writes).
const CHUNK: usize = 64 * 1024;
/// The stream repeats every `PERIOD` bytes.
const PERIOD: usize = 1 << 20;
/// Buffers in the `MSG_ZEROCOPY` ring, `CHUNK` bytes each (4 MiB, a multiple of `PERIOD`, so
/// the ring read round and round is the stream).
const RING_SLOTS: usize = 64;
/// The `MSG_ZEROCOPY` server reads its completions every time it has sent this many buffers
/// (besides whenever the ring is full).
const REAP_EVERY: usize = 8;
/// Page size, for aligning the ring so a 64 KiB send pins exactly 16 pages.
const PAGE: usize = 4096;

/// Return byte `i` of the stream every mode sends.
pub fn pattern(i: usize) -> u8 {
    ((i % PERIOD) * 7 + 1) as u8
}

/// The file, made on first use.
static SOURCE: OnceLock<File> = OnceLock::new();

/// Return the memfd holding `FILE_SIZE` bytes of data.
fn source() -> Result<&'static File, String> {
    if let Some(f) = SOURCE.get() {
        return Ok(f);
    }
    let mut f = sys::memfd("bypass-demo-sendfile").map_err(|e| format!("sendfile server: memfd_create: {e}"))?;
    let block: Vec<u8> = (0..PERIOD).map(pattern).collect();
    for _ in 0..FILE_SIZE / block.len() as u64 {
        f.write_all(&block).map_err(|e| format!("sendfile server: fill the memfd: {e}"))?;
    }
    let _ = SOURCE.set(f);
    SOURCE.get().ok_or_else(|| "sendfile server: the memfd vanished".into())
}

/// The `MSG_ZEROCOPY` ring (with up to a page of slack in front, for alignment), made on
/// first use and never written again.
static RING: OnceLock<Vec<u8>> = OnceLock::new();

/// Return the `MSG_ZEROCOPY` ring: `RING_SLOTS * CHUNK` page-aligned bytes of the stream.
///
/// The bytes never change and live for the whole process, so pages the kernel still holds
/// after the server returns (data in flight to a client that closed) stay valid and intact.
/// The server still waits for each buffer's completion before sending it again, as a real
/// application rewriting its buffers must, so the row pays what such an application pays.
fn ring() -> &'static [u8] {
    let start = |v: &Vec<u8>| (PAGE - v.as_ptr() as usize % PAGE) % PAGE;
    let v = RING.get_or_init(|| {
        let mut v = vec![0u8; RING_SLOTS * CHUNK + PAGE];
        let s = start(&v);
        for (i, b) in v[s..s + RING_SLOTS * CHUNK].iter_mut().enumerate() {
            *b = pattern(i);
        }
        v
    });
    let s = start(v);
    &v[s..s + RING_SLOTS * CHUNK]
}

/// How the server moves the stream's bytes to the socket.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `sendfile(2)` file -> socket.
    Sendfile,
    /// `splice(2)` file -> pipe, then `splice(2)` pipe -> socket.
    Splice,
    /// `send(2)` with `MSG_ZEROCOPY` from a ring of user buffers, each reused only after the
    /// kernel's completion notification for it.
    MsgZerocopy,
}

impl Mode {
    /// Return the server's name, for error messages.
    fn name(self) -> &'static str {
        match self {
            Mode::Sendfile => "sendfile server",
            Mode::Splice => "splice server",
            Mode::MsgZerocopy => "MSG_ZEROCOPY server",
        }
    }
}

/// Accept one client on `listener` and stream to it (`mode`), spinning on a non-blocking
/// socket, until the client closes (or `shared.stop`).
pub fn server(listener: TcpListener, mode: Mode, shared: &Shared) -> Result<ServerResult, String> {
    let name = mode.name();
    let file = match mode {
        Mode::Sendfile | Mode::Splice => Some(source()?),
        Mode::MsgZerocopy => {
            ring();
            None
        }
    };
    let mut window = Window::default();
    let sock = accept_spinning(&listener, shared, &mut window, name)?;
    let (mode, calls) = match file {
        Some(file) => stream_file(&sock, file, mode, shared, &mut window)?,
        None => {
            let counts = stream_zerocopy(&sock, shared, &mut window)?;
            (counts.describe(), counts.calls)
        }
    };
    window.finish(0);
    let (mut usage, _) =
        window.delta().ok_or_else(|| format!("{name}: the client's measurement window was not seen"))?;
    // `/proc/thread-self/io` miscounts these calls: sendfile(2) twice (syscr and syscw),
    // splice(2), send(2) and recvmsg(2) not at all. This thread makes no other call in the
    // window, so its own count of the calls made in the window replaces it.
    usage.syscalls = calls;
    Ok(ServerResult { usage, copied: None, mode, file: None })
}

/// Send `file` round and round with `sendfile(2)` (or `splice(2)` for [`Mode::Splice`]) until the client closes (or
/// `shared.stop`); return the mode's description and the calls made in the window.
/// Tell the client the server is ready, then accept one client on `listener`, spinning on
/// it non-blocking (observing the measurement's phases in `window` meanwhile), until one
/// comes or `shared.stop`; return its socket, non-blocking, with Nagle off. `name` names the
/// server in errors.
pub(crate) fn accept_spinning(
    listener: &TcpListener,
    shared: &Shared,
    window: &mut Window,
    name: &str,
) -> Result<OwnedFd, String> {
    let io = |what: &str, e: std::io::Error| format!("{name}: {what}: {e}");
    listener.set_nonblocking(true).map_err(|e| io("configure the listener", e))?;
    shared.ready.store(true, Ordering::SeqCst);
    let sock = loop {
        window.observe(&shared.phase, || 0);
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io("accept", e)),
        }
        if shared.stop.load(Ordering::Relaxed) {
            return Err(format!("{name}: no client came"));
        }
        std::hint::spin_loop();
    };
    sock.set_nodelay(true).map_err(|e| io("configure", e))?;
    sock.set_nonblocking(true).map_err(|e| io("configure", e))?;
    Ok(OwnedFd::from(sock))
}

fn stream_file(
    sock: &OwnedFd,
    file: &File,
    mode: Mode,
    shared: &Shared,
    window: &mut Window,
) -> Result<(String, u64), String> {
    let io = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", mode.name());
    let splice = mode == Mode::Splice;
    let pipe = if splice { Some(sys::pipe().map_err(|e| io("pipe2", e))?) } else { None };
    // Bytes spliced into the pipe and not yet into the socket.
    let mut in_pipe = 0usize;
    let mut offset: u64 = 0;
    let mut calls = 0u64;
    loop {
        window.observe(&shared.phase, || 0);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let in_window = shared.phase.load(Ordering::Relaxed) == MEASURING;
        let len = CHUNK.min((FILE_SIZE - offset) as usize);
        let sent = match &pipe {
            None => sys::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut offset, len),
            Some((r, w)) => {
                if in_pipe == 0 {
                    // The pipe is empty, so this does not wait; it takes references to the
                    // memfd's pages.
                    calls += u64::from(in_window);
                    in_pipe = sys::splice(file.as_raw_fd(), Some(&mut offset), w.as_raw_fd(), len)
                        .map_err(|e| io("splice file -> pipe", e))?;
                }
                sys::splice(r.as_raw_fd(), None, sock.as_raw_fd(), in_pipe).inspect(|n| in_pipe -= n)
            }
        };
        calls += u64::from(in_window);
        match sent {
            Ok(_) => {
                if offset >= FILE_SIZE {
                    offset = 0;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            // The client closed (with our data unread: a reset or a broken pipe).
            Err(_) => break,
        }
    }
    let mode = if splice {
        "kernel TCP, splice(2) file -> pipe -> socket, busy polling"
    } else {
        "kernel TCP, sendfile(2), busy polling"
    };
    Ok((mode.into(), calls))
}

/// Send the ring round and round with `send(2)` and `MSG_ZEROCOPY` until the client closes
/// (or `shared.stop`); return what happened inside the measurement window.
fn stream_zerocopy(sock: &OwnedFd, shared: &Shared, window: &mut Window) -> Result<Counts, String> {
    let name = Mode::MsgZerocopy.name();
    let fd = sock.as_raw_fd();
    sys::enable_zerocopy(fd)
        .map_err(|e| format!("{name}: the kernel does not offer MSG_ZEROCOPY here (setsockopt SO_ZEROCOPY: {e})"))?;
    let ring = ring();
    let mut inflight = Inflight::default();
    let mut counts = Counts::default();
    // The next send starts at byte `off` of buffer `slot`.
    let (mut slot, mut off) = (0usize, 0usize);
    loop {
        window.observe(&shared.phase, || 0);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if off == 0 && inflight.pending[slot] > 0 {
            // The ring is full: the kernel may still hold this buffer's pages.
            reap(fd, &mut inflight, &mut counts, shared)?;
            std::hint::spin_loop();
            continue;
        }
        let sent = sys::send_zerocopy(fd, &ring[slot * CHUNK + off..(slot + 1) * CHUNK]);
        let measuring = shared.phase.load(Ordering::Relaxed) == MEASURING;
        counts.calls += u64::from(measuring);
        match sent {
            Ok(n) => {
                // A send that moved any bytes, even fewer than asked, took the next id.
                inflight.sent(slot);
                counts.sends += u64::from(measuring);
                off += n;
                if off == CHUNK {
                    (slot, off) = ((slot + 1) % RING_SLOTS, 0);
                    if slot % REAP_EVERY == 0 {
                        reap(fd, &mut inflight, &mut counts, shared)?;
                    }
                }
            }
            // The socket buffer is full (no id taken). Completions are read when the ring
            // needs them, not here: a read per vain send would double the calls.
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            // Over the socket's optmem limit (or the locked-pages limit), no id taken: the
            // kernel frees the memory as completions are read.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => reap(fd, &mut inflight, &mut counts, shared)?,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // The client closed (with our data unread: a reset or a broken pipe).
            Err(_) => break,
        }
    }
    // Check the bookkeeping against the completions that arrived after the last read.
    reap(fd, &mut inflight, &mut counts, shared)?;
    Ok(counts)
}

/// Read every notification waiting on `fd`'s error queue into `inflight`, counting the ones
/// read inside the measurement window.
///
/// The phase is read after each notification: the client ends the window before it closes,
/// so the notification for the sends the kernel discards when the connection goes (never
/// delivered, hence never copied) falls outside the window, and does not pass for a zerocopy
/// transmission.
fn reap(fd: RawFd, inflight: &mut Inflight, counts: &mut Counts, shared: &Shared) -> Result<(), String> {
    let name = Mode::MsgZerocopy.name();
    loop {
        let read = sys::read_errqueue(fd);
        let measuring = shared.phase.load(Ordering::SeqCst) == MEASURING;
        counts.calls += u64::from(measuring);
        match read {
            Ok(sys::ErrQueue::Empty) => return Ok(()),
            Ok(sys::ErrQueue::Zerocopy { first, last, copied }) => {
                let n = inflight.complete(first, last).map_err(|e| format!("{name}: {e}"))?;
                if measuring {
                    counts.notifications += 1;
                    counts.completed += n;
                    counts.copied += if copied { n } else { 0 };
                }
            }
            Ok(sys::ErrQueue::Other) => counts.other += u64::from(measuring),
            Err(e) => return Err(format!("{name}: read the error queue: {e}")),
        }
    }
}

/// The `MSG_ZEROCOPY` sends of one socket that the kernel has not completed.
///
/// The kernel numbers the sends that moved bytes from 0, one id per call (partial or not; a
/// call that fails takes none), and completes them in ranges `[first, last]`, in order for
/// TCP in the common case but not always (retransmission, teardown).
struct Inflight {
    /// Id of `slots[0]`.
    front: u32,
    /// Ring buffer of each send from `front` on, `None` once completed.
    slots: VecDeque<Option<usize>>,
    /// Sends not completed, per ring buffer.
    pending: [u32; RING_SLOTS],
}

impl Default for Inflight {
    fn default() -> Self {
        // The kernel's first id is 0.
        Inflight { front: 0, slots: VecDeque::new(), pending: [0; RING_SLOTS] }
    }
}

impl Inflight {
    /// Record a send from ring buffer `slot` (it took the next id).
    fn sent(&mut self, slot: usize) {
        self.slots.push_back(Some(slot));
        self.pending[slot] += 1;
    }

    /// Record the notification for sends `first..=last` (wrapping ids); return how many
    /// sends it completed.
    fn complete(&mut self, first: u32, last: u32) -> Result<u64, String> {
        let start = first.wrapping_sub(self.front) as usize;
        let count = last.wrapping_sub(first) as usize + 1;
        let unknown = || {
            let end = self.front.wrapping_add(self.slots.len() as u32);
            format!("completion of sends {first}..={last}, but sends {}..{end} are in flight", self.front)
        };
        if start.checked_add(count).is_none_or(|end| end > self.slots.len()) {
            return Err(unknown());
        }
        for i in start..start + count {
            let Some(slot) = self.slots[i].take() else {
                return Err(format!("send {} completed twice", self.front.wrapping_add(i as u32)));
            };
            self.pending[slot] -= 1;
        }
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.front = self.front.wrapping_add(1);
        }
        Ok(count as u64)
    }
}

/// What the `MSG_ZEROCOPY` server did inside the measurement window.
#[derive(Default)]
struct Counts {
    /// Sends that moved bytes.
    sends: u64,
    /// Zerocopy notifications read (each covering a range of sends).
    notifications: u64,
    /// Sends completed.
    completed: u64,
    /// Sends completed in notifications flagged `SO_EE_CODE_ZEROCOPY_COPIED` (the kernel
    /// sets the flag per notification; a range merged into a queued one keeps its flag).
    copied: u64,
    /// Other messages on the error queue.
    other: u64,
    /// `send(2)` and `recvmsg(2)` calls, including the ones that found nothing to do.
    calls: u64,
}

impl Counts {
    /// Return the mode's description with the counts.
    fn describe(&self) -> String {
        let mut s = format!(
            "kernel TCP, send(2) with MSG_ZEROCOPY, busy polling; in the window: {} sends, {} notifications completing {}",
            self.sends, self.notifications, self.completed
        );
        // Tenths of a percent, rounded down, so "100%" means every one.
        match (self.copied * 1000).checked_div(self.completed) {
            Some(tenths) => {
                let percent = if tenths.is_multiple_of(10) {
                    format!("{}%", tenths / 10)
                } else {
                    format!("{}.{}%", tenths / 10, tenths % 10)
                };
                s += &format!(", {percent} completed as copied (SO_EE_CODE_ZEROCOPY_COPIED)");
            }
            None => s += "; no completion in the window",
        }
        if self.other > 0 {
            s += &format!(", {} other error-queue messages", self.other);
        }
        s
    }
}

/// memfd_create(2), sendfile(2), pipe2(2), splice(2), and send(2) with `MSG_ZEROCOPY` and
/// its error queue, which std does not wrap.
#[allow(unsafe_code)]
pub(super) mod sys {
    use std::fs::File;
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};

    /// `SO_ZEROCOPY` from `asm-generic/socket.h` (x86-64 and arm64 use the generic value);
    /// libc 0.2 does not define it.
    const SO_ZEROCOPY: libc::c_int = 60;
    /// `SO_EE_ORIGIN_ZEROCOPY` from `linux/errqueue.h`; libc 0.2 does not define it.
    const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
    /// `SO_EE_CODE_ZEROCOPY_COPIED` from `linux/errqueue.h`; libc 0.2 does not define it.
    const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

    /// Return a new pipe (read end, write end), close-on-exec.
    pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a writable array of two ints, as pipe2 requires.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are new descriptors that nothing else owns.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// Move up to `len` bytes from `from` (at `*offset`, advanced, if given) to `to` without
    /// waiting (SPLICE_F_NONBLOCK); return them.
    pub fn splice(from: RawFd, offset: Option<&mut u64>, to: RawFd, len: usize) -> std::io::Result<usize> {
        let mut off = offset.as_ref().map_or(0, |o| **o as libc::loff_t);
        let off_ptr = if offset.is_some() { &mut off as *mut libc::loff_t } else { std::ptr::null_mut() };
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: both descriptors are open for the duration of the call (the caller holds
        // them); `off_ptr` is null or points to `off`, a live, writable loff_t.
        let n = unsafe { libc::splice(from, off_ptr, to, std::ptr::null_mut(), len, flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(o) = offset {
            *o = off as u64;
        }
        Ok(n as usize)
    }

    /// Return a new anonymous memory file (close-on-exec).
    pub fn memfd(name: &str) -> std::io::Result<File> {
        let name = std::ffi::CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Send up to `len` bytes of `file` from `*offset` to `sock`; advance `*offset` by the
    /// bytes sent and return them.
    pub fn sendfile(sock: RawFd, file: RawFd, offset: &mut u64, len: usize) -> std::io::Result<usize> {
        let mut off = *offset as libc::off_t;
        // SAFETY: both descriptors are open for the duration of the call (the caller holds
        // them); `off` is a valid, writable off_t that sendfile updates.
        let n = unsafe { libc::sendfile(sock, file, &mut off, len) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        *offset = off as u64;
        Ok(n as usize)
    }

    /// Let `sock` take `MSG_ZEROCOPY` sends (`SO_ZEROCOPY`).
    pub fn enable_zerocopy(sock: RawFd) -> std::io::Result<()> {
        let one: libc::c_int = 1;
        let len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `sock` is open for the duration of the call (the caller holds it); the value
        // points to `one`, a live int of `len` bytes.
        let rc = unsafe { libc::setsockopt(sock, libc::SOL_SOCKET, SO_ZEROCOPY, (&raw const one).cast(), len) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Send up to all of `buf` on `sock` with `MSG_ZEROCOPY`, without waiting; return the
    /// bytes sent.
    ///
    /// The kernel may keep reading `buf`'s pages after the call returns, until its completion
    /// notification: `'static` and shared keep them alive and unchanged for that long.
    pub fn send_zerocopy(sock: RawFd, buf: &'static [u8]) -> std::io::Result<usize> {
        let flags = libc::MSG_ZEROCOPY | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // SAFETY: `sock` is open for the duration of the call (the caller holds it); `buf` is
        // `buf.len()` readable bytes, and they stay valid and unwritten for ever (`'static`,
        // shared), so the kernel's later reads of the pinned pages see the bytes sent.
        let n = unsafe { libc::send(sock, buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// One message from a socket's error queue.
    pub enum ErrQueue {
        /// The queue is empty.
        Empty,
        /// The kernel released the pages of `MSG_ZEROCOPY` sends `first..=last`; `copied`: it
        /// had copied them after all (`SO_EE_CODE_ZEROCOPY_COPIED`).
        Zerocopy { first: u32, last: u32, copied: bool },
        /// Something else (an error or a timestamp).
        Other,
    }

    /// Read one message from `sock`'s error queue (`recvmsg(2)` with `MSG_ERRQUEUE`, which
    /// never waits).
    pub fn read_errqueue(sock: RawFd) -> std::io::Result<ErrQueue> {
        // Room for a few control messages, aligned for `cmsghdr`.
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data (pointers, integers) for which all zeroes is valid: no
        // name, no data buffers, no control buffer yet.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control) as _;
        // SAFETY: `sock` is open for the duration of the call (the caller holds it); `msg`
        // has no name and no data buffers, and its control buffer is `control`, live and
        // writable for `msg_controllen` bytes.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_ERRQUEUE) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::WouldBlock { Ok(ErrQueue::Empty) } else { Err(e) };
        }
        let ee_len = size_of::<libc::sock_extended_err>();
        // SAFETY: `msg` is the header recvmsg filled; its control pointer and length describe
        // `control`, which is still live.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR returned a non-null pointer to a header that
            // lies inside `control` and is aligned for cmsghdr.
            let header = unsafe { &*cmsg };
            let recverr = (header.cmsg_level == libc::SOL_IP && header.cmsg_type == libc::IP_RECVERR)
                || (header.cmsg_level == libc::SOL_IPV6 && header.cmsg_type == libc::IPV6_RECVERR);
            // SAFETY: CMSG_LEN only computes a length.
            if recverr && header.cmsg_len as usize >= unsafe { libc::CMSG_LEN(ee_len as libc::c_uint) } as usize {
                // SAFETY: the message's data holds `ee_len` bytes (checked just above) inside
                // `control`; read_unaligned needs no alignment, and sock_extended_err is plain
                // integers, valid for any bytes.
                let ee = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>()) };
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                    let copied = ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0;
                    return Ok(ErrQueue::Zerocopy { first: ee.ee_info, last: ee.ee_data, copied });
                }
            }
            // SAFETY: `msg` describes the live `control` buffer and `cmsg` is a header in it.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
        Ok(ErrQueue::Other)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::super::kernel::Shared;
    use super::super::measure::{DONE, MEASURING};
    use super::*;

    // ---- Inflight bookkeeping ----

    #[test]
    fn inflight_frees_a_buffer_once_every_send_from_it_completed() {
        let mut f = Inflight::default();
        // Buffer 0 took two sends (the first partial), buffer 1 one: ids 0, 1, 2.
        f.sent(0);
        f.sent(0);
        f.sent(1);
        assert_eq!(f.complete(0, 0), Ok(1));
        assert_eq!((f.pending[0], f.pending[1]), (1, 1));
        // Out of order: 2 before 1.
        assert_eq!(f.complete(2, 2), Ok(1));
        assert_eq!((f.pending[0], f.pending[1], f.front, f.slots.len()), (1, 0, 1, 2));
        assert!(f.complete(2, 2).is_err(), "completed twice");
        assert_eq!(f.complete(1, 1), Ok(1));
        assert_eq!((f.pending[0], f.pending[1], f.front, f.slots.len()), (0, 0, 3, 0));
        assert!(f.complete(3, 3).is_err(), "never sent");
        assert!(f.complete(1, 1).is_err(), "completed and forgotten");
    }

    #[test]
    fn inflight_takes_ranges_across_the_id_wrap() {
        let mut f = Inflight { front: u32::MAX - 1, ..Inflight::default() };
        for slot in 0..4 {
            f.sent(slot);
        }
        assert!(f.complete(u32::MAX - 1, 2).is_err(), "one more than was sent");
        assert_eq!(f.complete(u32::MAX - 1, 1), Ok(4));
        assert_eq!((f.front, f.slots.len()), (2, 0));
        assert!(f.pending.iter().all(|&p| p == 0));
    }

    #[test]
    fn counts_say_how_many_completions_were_copied() {
        let counts = |completed, copied| Counts { sends: 3, notifications: 2, completed, copied, ..Counts::default() };
        let table = [
            (3, 3, ", 100% completed as copied"),
            (3, 2, ", 66.6% completed as copied"),
            (3, 0, ", 0% completed as copied"),
            (1000, 999, ", 99.9% completed as copied"),
            (0, 0, "; no completion in the window"),
        ];
        for (completed, copied, want) in table {
            let text = counts(completed, copied).describe();
            assert!(text.contains(want), "{completed} {copied}: {text}");
        }
    }

    // ---- over loopback ----

    #[test]
    fn msg_zerocopy_streams_the_pattern_and_reports_completions() {
        let _ = env_logger::builder().is_test(true).try_init();
        const TOTAL: usize = 64 << 20;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Shared::default();
        let (server, got) = std::thread::scope(|scope| {
            let shared = &shared;
            let server = scope.spawn(move || {
                let r = server(listener, Mode::MsgZerocopy, shared);
                shared.stop.store(true, Ordering::SeqCst);
                r
            });
            let client = scope.spawn(move || -> Result<usize, String> {
                while !shared.ready.load(Ordering::SeqCst) {
                    if shared.stop.load(Ordering::SeqCst) {
                        return Err("the server stopped before listening".into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
                shared.phase.store(MEASURING, Ordering::SeqCst);
                let mut buf = vec![0u8; 256 * 1024];
                let mut at = 0usize;
                while at < TOTAL {
                    let want = buf.len().min(TOTAL - at);
                    let n = s.read(&mut buf[..want]).map_err(|e| format!("read at {at}: {e}"))?;
                    if n == 0 {
                        return Err(format!("the server closed at byte {at}"));
                    }
                    if let Some(j) = (0..n).find(|&j| buf[j] != pattern(at + j)) {
                        return Err(format!("byte {} is {}, not {}", at + j, buf[j], pattern(at + j)));
                    }
                    at += n;
                }
                shared.phase.store(DONE, Ordering::SeqCst);
                drop(s);
                shared.stop.store(true, Ordering::SeqCst);
                Ok(at)
            });
            let got = client.join().unwrap();
            shared.stop.store(true, Ordering::SeqCst);
            (server.join().unwrap(), got)
        });
        assert_eq!(got, Ok(TOTAL));
        let server = server.unwrap();
        eprintln!("{} (server: {:?})", server.mode, server.usage);
        assert!(server.mode.contains("MSG_ZEROCOPY"), "{}", server.mode);
        let count = |after: &str| -> u64 {
            let head = server.mode.split(after).next().unwrap();
            head.rsplit(" ").next().and_then(|n| n.parse().ok()).unwrap_or(0)
        };
        // 64 MiB in sends of at most 64 KiB.
        assert!(count(" sends,") >= (TOTAL / CHUNK) as u64, "{}", server.mode);
        assert!(count(" notifications") > 0, "{}", server.mode);
        assert!(server.mode.contains("completed as copied"), "{}", server.mode);
    }
}
