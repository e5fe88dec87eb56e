//! The file-serving rows (`--workload file`): one file, in the page cache, sent to a client
//! that reads it and checks every byte, by each of the paths the textbook lesson on zero copy
//! walks down, with each CPU copy counted where it happens.
//!
//! The file is made once per run in the output directory, unlinked at once (so it goes with
//! the process on every exit path, a kill included), synced, read through once to warm the
//! page cache, and checked to be resident with `mincore(2)` before every row. The server
//! sends it whole, again and again, over one connection; the client reads whole passes,
//! checksums each and fails the row if one differs from the file's checksum.
//!
//! The paths ([`Path`]) and how each copy is counted, by the mechanism, inside the window:
//!
//! | path | page cache -> user | user -> socket buffer | other |
//! |---|---|---|---|
//! | `read` + `write` | bytes `pread(2)` returned (`filemap_read` copies them out) | bytes `write(2)` took (`tcp_sendmsg_locked` copies them in) | |
//! | `mmap` + `write` | none: the pages are mapped (minor faults counted) | bytes `write(2)` took | |
//! | `sendfile` | none | none: `splice_to_socket` attaches page references | |
//! | `splice` | none | none: file -> pipe takes page references, pipe -> socket attaches them | |
//! | `MSG_ZEROCOPY` (mmap) | none | none: the pages are pinned | bytes of sends completed with `SO_EE_CODE_ZEROCOPY_COPIED`: copied after all, when the veth delivered them to a local socket (`skb_orphan_frags_rx`) |
//! | ours, `send_with` | bytes `pread(2)` wrote straight into the lent send buffer | (same copy) | send buffer -> UMEM frame: the stack's `bytes_copied` |
//! | ours, `send_with` (mmap) | bytes the server copied from its mapping into the lent send buffer | (same copy) | as above; minor faults counted |
//! | ours, `write` | bytes `pread(2)` returned | bytes `Stack::write` took | send buffer -> UMEM frame: `bytes_copied` less those |
//!
//! The client's `read(2)` copies every byte it returns (socket buffer -> user). What happens
//! between the sender's socket buffer and the client's (the veth, AF_XDP copy mode's UMEM ->
//! skb copy) is the kernel's and not observable from here; the table says so.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path as FsPath;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_stack::{Stack, StackConfig};

use super::kernel::{ClientPlan, ClientResult, ServerResult, Shared};
use super::measure::{MEASURING, Usage, Window};

/// Most bytes one call is asked to move (as the other servers' 64 KiB writes).
const CHUNK: usize = 64 * 1024;
/// The client's read buffer.
const READ_BUF: usize = 256 * 1024;
/// A residency below this fails the row: the file would not be served from the page cache.
const MIN_RESIDENT: f64 = 0.99;

/// How the server moves the file to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `pread(2)` into a 64 KiB user buffer, `write(2)` it to the socket.
    ReadWrite,
    /// `mmap(2)` the file per pass, `write(2)` from the mapping, `munmap(2)`.
    MmapWrite,
    /// `sendfile(2)` file -> socket.
    Sendfile,
    /// `splice(2)` file -> pipe -> socket.
    Splice,
    /// `send(2)` with `MSG_ZEROCOPY` from an `mmap(2)` of the file.
    MsgZerocopy,
    /// Our stack: `Stack::send_with`, `pread(2)` straight into the lent send buffer.
    StackSendWith,
    /// Our stack: `Stack::send_with`, the lent send buffer filled from one `mmap(2)` of the
    /// file (a copy of the server's own, from the mapped page cache).
    StackSendWithMmap,
    /// Our stack: `pread(2)` into a user buffer, then `Stack::write`.
    StackWrite,
}

/// The file every row sends: open, unlinked, in the page cache.
pub struct Source {
    file: File,
    len: u64,
    sum: u64,
    /// What it is and where it was, for the conditions line.
    pub description: String,
}

impl Source {
    /// Make a file of `len` bytes (a multiple of the page size) in `dir`, unlink it, sync it,
    /// warm the page cache with it and check it is resident.
    pub fn create(dir: &FsPath, len: u64) -> Result<Source, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join(format!(".bypass-demo-file-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("cannot create the file to serve, {}: {e}", path.display()))?;
        // Gone from the directory at once: the open descriptor keeps it for this process only.
        std::fs::remove_file(&path).map_err(|e| format!("cannot unlink {}: {e}", path.display()))?;
        let mut sum = Checksum::default();
        let mut block = vec![0u8; 1 << 20];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut left = len;
        while left > 0 {
            for word in block.chunks_exact_mut(8) {
                // xorshift64: bytes that are not a short period, so a misplaced block shows.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                word.copy_from_slice(&state.to_le_bytes());
            }
            let n = left.min(block.len() as u64) as usize;
            file.write_all(&block[..n]).map_err(|e| format!("cannot write the file to serve: {e}"))?;
            sum.update(&block[..n]);
            left -= n as u64;
        }
        // Clean pages, as a served file's are.
        file.sync_data().map_err(|e| format!("cannot sync the file to serve: {e}"))?;
        let source = Source { file, len, sum: sum.finish(), description: String::new() };
        // Warm the page cache (the pages written are there already, unless reclaimed since).
        source.warm()?;
        let resident = source.resident()?;
        let fs = sys::filesystem(source.file.as_raw_fd());
        Ok(Source {
            description: format!(
                "{} MiB of pseudo-random bytes on {fs} in {} (unlinked once open), synced, read once; {:.1}% resident in the page cache (mincore)",
                len >> 20,
                dir.display(),
                resident * 100.0
            ),
            ..source
        })
    }

    /// Read the file through once, so that pages the kernel reclaimed since are back in the
    /// page cache (the rest are read from it).
    pub fn warm(&self) -> Result<(), String> {
        let mut block = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < self.len {
            let n = self.file.read_at(&mut block, at).map_err(|e| format!("cannot read the file to serve: {e}"))?;
            if n == 0 {
                return Err("the file to serve is shorter than written".into());
            }
            at += n as u64;
        }
        Ok(())
    }

    /// Return the fraction of the file's pages in the page cache (`mincore(2)` on a mapping).
    pub fn resident(&self) -> Result<f64, String> {
        let map = sys::Map::new(self.file.as_raw_fd(), self.len as usize)
            .map_err(|e| format!("cannot map the file to serve: {e}"))?;
        map.resident().map_err(|e| format!("mincore on the file to serve: {e}"))
    }
}

/// A 64-bit checksum of a byte stream, fed in pieces of any size: four lanes of
/// multiply-rotate over little-endian words, folded at the end. Not cryptographic: it tells a
/// byte lost, doubled, changed or out of place from the file, at several GB/s.
#[derive(Clone, Debug)]
pub struct Checksum {
    lanes: [u64; 4],
    /// Bytes not yet making a whole 32-byte block.
    tail: [u8; 32],
    tail_len: usize,
    total: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum {
            lanes: [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89],
            tail: [0; 32],
            tail_len: 0,
            total: 0,
        }
    }
}

impl Checksum {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    fn block(&mut self, b: &[u8]) {
        for (lane, w) in self.lanes.iter_mut().zip(b.chunks_exact(8)) {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            *lane = (*lane ^ w).wrapping_mul(Self::K).rotate_left(31);
        }
    }

    /// Feed `data`.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.tail_len > 0 {
            let take = (32 - self.tail_len).min(data.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
            self.tail_len += take;
            data = &data[take..];
            if self.tail_len < 32 {
                return;
            }
            let tail = self.tail;
            self.block(&tail);
            self.tail_len = 0;
        }
        let mut blocks = data.chunks_exact(32);
        for b in &mut blocks {
            self.block(b);
        }
        let rest = blocks.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    /// Return the checksum of everything fed.
    pub fn finish(&self) -> u64 {
        let mut h = self.total.wrapping_mul(Self::K);
        for (i, b) in self.tail[..self.tail_len].iter().enumerate() {
            h ^= u64::from(*b) << ((i % 8) * 8);
            h = h.wrapping_mul(Self::K).rotate_left(27);
        }
        for lane in self.lanes {
            h = (h ^ lane).wrapping_mul(Self::K).rotate_left(29);
        }
        h
    }
}

/// What the server counted inside the measurement window, in bytes (faults in pages).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Page cache -> a user buffer: bytes `pread(2)` returned into a buffer of the server's.
    pub cache_to_user: u64,
    /// User buffer -> socket buffer: bytes `write(2)` took on a kernel socket, or
    /// `Stack::write` on ours.
    pub user_to_socket: u64,
    /// Page cache -> our send buffer, in one copy: bytes `pread(2)` wrote into the space
    /// `Stack::send_with` lent, or that the server copied there from its mapping.
    pub cache_to_socket: u64,
    /// `MSG_ZEROCOPY`: bytes of sends completed, and of those completed with
    /// `SO_EE_CODE_ZEROCOPY_COPIED` (the kernel copied them after all).
    pub zerocopy_completed: u64,
    pub zerocopy_copied: u64,
    /// Our send buffer -> UMEM frames (the stack's `bytes_copied` less `Stack::write`'s).
    pub socket_to_frame: u64,
    /// Minor page faults of the server's thread (`getrusage`).
    pub minor_faults: u64,
    /// The fraction of the file resident in the page cache as the row started (`mincore`).
    pub resident: f64,
}

/// [`Counts`] per byte the client received, as the table shows them (faults per MiB).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerByte {
    pub cache_to_user: f64,
    pub user_to_socket: f64,
    pub cache_to_socket: f64,
    /// `MSG_ZEROCOPY`'s copies after all, per byte its completions covered; `None` on the
    /// other paths.
    pub zerocopy_copied: Option<f64>,
    pub socket_to_frame: f64,
    /// The client's `read(2)`: socket buffer -> user, every byte it returned.
    pub client_to_user: f64,
    pub faults_per_mib: f64,
    pub resident: f64,
}

impl PerByte {
    /// Return `counts` and the client's `read` bytes per byte of `delivered`.
    pub fn new(counts: &Counts, client_read: u64, delivered: u64) -> PerByte {
        let d = delivered.max(1) as f64;
        let per = |x: u64| x as f64 / d;
        PerByte {
            cache_to_user: per(counts.cache_to_user),
            user_to_socket: per(counts.user_to_socket),
            cache_to_socket: per(counts.cache_to_socket),
            // Per byte completed: the sends completed in the window include bytes still unread
            // in the client's socket buffer as it ends (acknowledged, so completed).
            zerocopy_copied: (counts.zerocopy_completed > 0)
                .then(|| counts.zerocopy_copied as f64 / counts.zerocopy_completed as f64),
            socket_to_frame: per(counts.socket_to_frame),
            client_to_user: per(client_read),
            faults_per_mib: counts.minor_faults as f64 / (d / (1u64 << 20) as f64),
            resident: counts.resident,
        }
    }

    /// Return the counted CPU copies per byte on the way to the client's socket buffer.
    pub fn sending(&self) -> f64 {
        self.cache_to_user
            + self.user_to_socket
            + self.cache_to_socket
            + self.zerocopy_copied.unwrap_or(0.0)
            + self.socket_to_frame
    }

    /// Return every counted CPU copy per byte, server and client.
    pub fn total(&self) -> f64 {
        self.sending() + self.client_to_user
    }

    /// Return the median of each figure over `all` (not empty).
    pub fn median(all: &[PerByte]) -> PerByte {
        let m = |f: &dyn Fn(&PerByte) -> f64| {
            let mut v: Vec<f64> = all.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        PerByte {
            cache_to_user: m(&|p| p.cache_to_user),
            user_to_socket: m(&|p| p.user_to_socket),
            cache_to_socket: m(&|p| p.cache_to_socket),
            zerocopy_copied: all[0].zerocopy_copied.map(|_| m(&|p| p.zerocopy_copied.unwrap_or(0.0))),
            socket_to_frame: m(&|p| p.socket_to_frame),
            client_to_user: m(&|p| p.client_to_user),
            faults_per_mib: m(&|p| p.faults_per_mib),
            resident: all.iter().map(|p| p.resident).fold(f64::INFINITY, f64::min),
        }
    }
}

/// The server's minor faults in the window: sampled as the window opens and closes.
#[derive(Default)]
struct Faults {
    start: Option<u64>,
    total: u64,
}

impl Faults {
    /// Sample at each turn: open the count when the window opens, close it when it ends.
    fn observe(&mut self, measuring: bool) {
        match (measuring, self.start) {
            (true, None) if self.total == 0 => self.start = Some(sys::minor_faults()),
            (false, Some(s)) => {
                self.total = sys::minor_faults().saturating_sub(s);
                self.start = None;
            }
            _ => {}
        }
    }
}

/// Check the file is in the page cache before a row; return the fraction resident.
fn check_resident(source: &Source) -> Result<f64, String> {
    let mut r = source.resident()?;
    if r < MIN_RESIDENT {
        // Reclaimed since it was made (other rows' memory: a UMEM, a program): read it in
        // again, as a server's file is read in by its first client.
        source.warm()?;
        r = source.resident()?;
    }
    if r < MIN_RESIDENT {
        return Err(format!(
            "only {:.1}% of the file is in the page cache (mincore): the machine is short of memory; try a smaller file",
            r * 100.0
        ));
    }
    Ok(r)
}

/// Accept one client on `listener` and send it the file by `path` (a kernel path), round and
/// round, spinning on a non-blocking socket, until the client closes (or `shared.stop`).
pub fn server(listener: TcpListener, path: Path, source: &Source, shared: &Shared) -> Result<ServerResult, String> {
    let io = |what: &str, e: std::io::Error| format!("file server ({path:?}): {what}: {e}");
    let resident = check_resident(source)?;
    let mut window = Window::default();
    let sock = super::zerocopy::accept_spinning(&listener, shared, &mut window, &format!("file server ({path:?})"))?;
    let mut sender = Sender::new(path, source, sock.as_raw_fd()).map_err(|e| io("set up", e))?;
    let mut faults = Faults::default();
    let mut counts = Counts { resident, ..Counts::default() };
    let mut calls = 0u64;
    loop {
        window.observe(&shared.phase, || 0);
        let measuring = shared.phase.load(Ordering::Relaxed) == MEASURING;
        faults.observe(measuring);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let mut step = Counts::default();
        let (made, result) = sender.step(&mut step);
        if measuring {
            calls += made;
            add(&mut counts, &step);
        }
        match result {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            // The client closed (with our data unread: a reset or a broken pipe).
            Err(e) if is_gone(&e) => break,
            Err(e) => return Err(io("send", e)),
        }
    }
    faults.observe(false);
    counts.minor_faults = faults.total;
    window.finish(0);
    let (mut usage, _) = window
        .delta()
        .ok_or_else(|| format!("file server ({path:?}): the client's measurement window was not seen"))?;
    // `/proc/thread-self/io` misses sendfile(2)'s, splice(2)'s, send(2)'s and recvmsg(2)'s
    // calls or counts them twice; this thread makes no other call in the window, so its own
    // count of the calls it made replaces it.
    usage.syscalls = calls;
    Ok(ServerResult { usage, copied: None, mode: sender.describe(), file: Some(counts) })
}

/// Return whether `e` says the client is gone.
fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted)
}

fn add(total: &mut Counts, step: &Counts) {
    total.cache_to_user += step.cache_to_user;
    total.user_to_socket += step.user_to_socket;
    total.cache_to_socket += step.cache_to_socket;
    total.zerocopy_completed += step.zerocopy_completed;
    total.zerocopy_copied += step.zerocopy_copied;
}

/// The kernel paths' sending state.
struct Sender<'a> {
    path: Path,
    source: &'a Source,
    sock: RawFd,
    /// The next byte of the file to send.
    offset: u64,
    /// [`Path::ReadWrite`]: the user buffer, and the part of it read and not yet written.
    buf: Vec<u8>,
    pending: (usize, usize),
    /// [`Path::MmapWrite`] (this pass's) and [`Path::MsgZerocopy`] (the connection's) mapping.
    map: Option<sys::Map>,
    /// [`Path::Splice`]: the pipe, and the bytes in it.
    pipe: Option<(OwnedFd, OwnedFd)>,
    in_pipe: usize,
    /// [`Path::MsgZerocopy`]: the bytes of each send not yet completed, from id `front` on.
    front: u32,
    inflight: std::collections::VecDeque<Option<u64>>,
    sends: u64,
    notifications: u64,
}

impl<'a> Sender<'a> {
    fn new(path: Path, source: &'a Source, sock: RawFd) -> std::io::Result<Sender<'a>> {
        let fd = source.file.as_raw_fd();
        let len = source.len as usize;
        let map = match path {
            Path::MsgZerocopy => {
                super::zerocopy::sys::enable_zerocopy(sock)?;
                Some(sys::Map::new(fd, len)?)
            }
            _ => None,
        };
        let pipe = if path == Path::Splice { Some(super::zerocopy::sys::pipe()?) } else { None };
        Ok(Sender {
            path,
            source,
            sock,
            offset: 0,
            buf: if path == Path::ReadWrite { vec![0; CHUNK] } else { Vec::new() },
            pending: (0, 0),
            map,
            pipe,
            in_pipe: 0,
            front: 0,
            inflight: Default::default(),
            sends: 0,
            notifications: 0,
        })
    }

    /// Return the path's description for the conditions line.
    fn describe(&self) -> String {
        match self.path {
            Path::MsgZerocopy => format!(
                "MSG_ZEROCOPY from an mmap of the file: {} sends, {} notifications",
                self.sends, self.notifications
            ),
            p => format!("{p:?}"),
        }
    }

    /// Advance the file offset by `n` bytes sent; wrap at the end of the file (a new pass).
    fn advance(&mut self, n: usize) {
        self.offset += n as u64;
        if self.offset >= self.source.len {
            self.offset = 0;
            if self.path == Path::MmapWrite {
                self.map = None; // munmap(2); the next pass maps the file again
            }
        }
    }

    /// Make one attempt to send; count into `c`; return the system calls made and the result.
    fn step(&mut self, c: &mut Counts) -> (u64, std::io::Result<()>) {
        let fd = self.source.file.as_raw_fd();
        let len = CHUNK.min((self.source.len - self.offset) as usize);
        match self.path {
            Path::ReadWrite => {
                let mut calls = 0;
                if self.pending.0 == self.pending.1 {
                    calls += 1;
                    match self.source.file.read_at(&mut self.buf[..len], self.offset) {
                        Ok(n) => {
                            c.cache_to_user += n as u64;
                            self.pending = (0, n);
                        }
                        Err(e) => return (calls, Err(e)),
                    }
                }
                calls += 1;
                let (a, b) = self.pending;
                match sys::write(self.sock, &self.buf[a..b]) {
                    Ok(n) => {
                        c.user_to_socket += n as u64;
                        self.pending.0 += n;
                        if self.pending.0 == self.pending.1 {
                            self.advance(b);
                        }
                        (calls, Ok(()))
                    }
                    Err(e) => (calls, Err(e)),
                }
            }
            Path::MmapWrite => {
                let mut calls = 1;
                if self.map.is_none() {
                    // mmap(2), and the munmap(2) that ends the pass.
                    calls += 2;
                    match sys::Map::new(fd, self.source.len as usize) {
                        Ok(m) => self.map = Some(m),
                        Err(e) => return (calls, Err(e)),
                    }
                }
                let map = self.map.as_ref().expect("mapped above");
                let at = self.offset as usize;
                match sys::write(self.sock, &map.bytes()[at..at + len]) {
                    Ok(n) => {
                        c.user_to_socket += n as u64;
                        self.advance(n);
                        (calls, Ok(()))
                    }
                    Err(e) => (calls, Err(e)),
                }
            }
            Path::Sendfile => {
                let mut off = self.offset;
                match super::zerocopy::sys::sendfile(self.sock, fd, &mut off, len) {
                    Ok(n) => {
                        self.advance(n);
                        (1, Ok(()))
                    }
                    Err(e) => (1, Err(e)),
                }
            }
            Path::Splice => {
                let mut calls = 0;
                let (r, w) = self.pipe.as_ref().map(|(r, w)| (r.as_raw_fd(), w.as_raw_fd())).expect("a pipe");
                if self.in_pipe == 0 {
                    calls += 1;
                    let mut off = self.offset;
                    match super::zerocopy::sys::splice(fd, Some(&mut off), w, len) {
                        Ok(n) => {
                            self.in_pipe = n;
                            self.advance(n);
                        }
                        Err(e) => return (calls, Err(e)),
                    }
                }
                calls += 1;
                match super::zerocopy::sys::splice(r, None, self.sock, self.in_pipe) {
                    Ok(n) => {
                        self.in_pipe -= n;
                        (calls, Ok(()))
                    }
                    Err(e) => (calls, Err(e)),
                }
            }
            Path::MsgZerocopy => self.step_zerocopy(len, c),
            Path::StackSendWith | Path::StackSendWithMmap | Path::StackWrite => (0, Err(ErrorKind::Unsupported.into())),
        }
    }

    /// One `MSG_ZEROCOPY` send from the mapping, reading completions every 8 sends or when
    /// the kernel refuses more.
    fn step_zerocopy(&mut self, len: usize, c: &mut Counts) -> (u64, std::io::Result<()>) {
        let mut calls = 1;
        let at = self.offset as usize;
        let map = self.map.as_ref().expect("mapped at the start");
        let sent = sys::send_zerocopy(self.sock, &map.bytes()[at..at + len]);
        let reap = match sent {
            Ok(n) => {
                // A send that moved any bytes took the next id.
                self.inflight.push_back(Some(n as u64));
                self.sends += 1;
                self.advance(n);
                self.sends.is_multiple_of(8)
            }
            Err(ref e) => e.raw_os_error() == Some(libc::ENOBUFS),
        };
        if reap {
            match self.reap(c) {
                Ok(n) => calls += n,
                Err(e) => return (calls, Err(e)),
            }
        }
        match sent {
            Ok(_) => (calls, Ok(())),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => (calls, Ok(())),
            Err(e) => (calls, Err(e)),
        }
    }

    /// Read the error queue dry; count completed and copied bytes; return the calls made.
    fn reap(&mut self, c: &mut Counts) -> std::io::Result<u64> {
        use super::zerocopy::sys::{ErrQueue, read_errqueue};
        let mut calls = 0;
        loop {
            calls += 1;
            match read_errqueue(self.sock)? {
                ErrQueue::Empty => return Ok(calls),
                ErrQueue::Zerocopy { first, last, copied } => {
                    self.notifications += 1;
                    let mut id = first;
                    loop {
                        let i = id.wrapping_sub(self.front) as usize;
                        if let Some(bytes) = self.inflight.get_mut(i).and_then(Option::take) {
                            c.zerocopy_completed += bytes;
                            c.zerocopy_copied += if copied { bytes } else { 0 };
                        }
                        if id == last {
                            break;
                        }
                        id = id.wrapping_add(1);
                    }
                    while self.inflight.front().is_some_and(Option::is_none) {
                        self.inflight.pop_front();
                        self.front = self.front.wrapping_add(1);
                    }
                }
                ErrQueue::Other => {}
            }
        }
    }
}

/// Serve the file to one client with our stack on `device` (`path` is
/// [`Path::StackSendWith`] or [`Path::StackWrite`]), spinning, until `shared.stop`.
pub fn stack_server<D: Device>(
    device: D,
    ip: impl Into<IpAddr>,
    prefix: u8,
    port: u16,
    path: Path,
    source: &Source,
    shared: &Shared,
) -> Result<ServerResult, String> {
    let resident = check_resident(source)?;
    let mode = device.info().mode.clone();
    let mut stack = Stack::new(device, StackConfig::new(ip, prefix, super::stack::secret()));
    let listener = stack.listen(port).map_err(|e| format!("our stack: listen on {port}: {e}"))?;
    let io = |e: std::io::Error| format!("our stack: packet I/O failed: {e}");
    shared.ready.store(true, Ordering::SeqCst);
    let mut window = Window::default();
    let mut faults = Faults::default();
    let mut counts = Counts { resident, ..Counts::default() };
    let mut conn = None;
    let mut offset = 0u64;
    let len = source.len;
    let fd = &source.file;
    // StackWrite's user buffer and the part of it read and not yet written.
    let mut buf = vec![0u8; CHUNK];
    // StackSendWithMmap's mapping of the whole file, for the connection.
    let map = match path {
        Path::StackSendWithMmap => {
            Some(sys::Map::new(fd.as_raw_fd(), len as usize).map_err(|e| format!("our stack: mmap the file: {e}"))?)
        }
        _ => None,
    };
    let (mut a, mut b) = (0usize, 0usize);
    while !shared.stop.load(Ordering::Relaxed) {
        window.observe(&shared.phase, || super::stack::own(&stack));
        let measuring = shared.phase.load(Ordering::Relaxed) == MEASURING;
        faults.observe(measuring);
        stack.poll_rx().map_err(io)?;
        if conn.is_none() {
            conn = stack.accept(listener);
        }
        while stack.poll_event().is_some() {}
        if let Some(id) = conn {
            loop {
                let sent = match path {
                    Path::StackSendWith => stack.send_with(id, |space| {
                        let want = space.len().min((len - offset) as usize);
                        match fd.read_at(&mut space[..want], offset) {
                            Ok(n) => (n, Ok(n)),
                            Err(e) => (0, Err(e)),
                        }
                    }),
                    Path::StackSendWithMmap => stack.send_with(id, |space| {
                        let want = space.len().min((len - offset) as usize);
                        let at = offset as usize;
                        let bytes = map.as_ref().map_or(&[][..], |m| &m.bytes()[at..at + want]);
                        space[..bytes.len()].copy_from_slice(bytes);
                        (bytes.len(), Ok(bytes.len()))
                    }),
                    _ => {
                        if a == b {
                            let want = CHUNK.min((len - offset) as usize);
                            let n =
                                fd.read_at(&mut buf[..want], offset).map_err(|e| format!("our stack: pread: {e}"))?;
                            counts.cache_to_user += if measuring { n as u64 } else { 0 };
                            (a, b) = (0, n);
                        }
                        stack.write(id, &buf[a..b]).map(|n| {
                            a += n;
                            counts.user_to_socket += if measuring { n as u64 } else { 0 };
                            Ok(n)
                        })
                    }
                };
                match sent {
                    Ok(Ok(n)) => {
                        if matches!(path, Path::StackSendWith | Path::StackSendWithMmap) {
                            counts.cache_to_socket += if measuring { n as u64 } else { 0 };
                            offset += n as u64;
                        } else if a == b {
                            offset += b as u64;
                        }
                        if offset >= len {
                            offset = 0;
                        }
                        if n == 0 {
                            break;
                        }
                    }
                    Ok(Err(e)) => return Err(format!("our stack: pread into the send buffer: {e}")),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        stack.close(id);
                        conn = None;
                        break;
                    }
                }
            }
        }
        stack.poll_tx().map_err(io)?;
    }
    window.observe(&shared.phase, || super::stack::own(&stack));
    faults.observe(false);
    window.finish(super::stack::own(&stack));
    stack.abort_all();
    stack.poll().map_err(io)?;
    let (usage, copied) = window.delta().ok_or("our stack: the client's measurement window was not seen")?;
    // The stack counts every payload byte it copies: into the send buffer by `write` (counted
    // above too), into each frame from the send buffer, and out of received frames (the
    // client sends none). What is left once `write`'s are taken out went into frames.
    counts.socket_to_frame = copied.saturating_sub(counts.user_to_socket);
    counts.minor_faults = faults.total;
    Ok(ServerResult { usage, copied: Some(copied), mode, file: Some(counts) })
}

/// Read the file from the server, pass after pass, for the plan's duration (whole passes, at
/// least one), checking each pass's checksum; return the figures and the bytes `read(2)`
/// returned.
pub fn client(
    plan: &ClientPlan,
    source: &Source,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    super::kernel::wait_ready(shared)?;
    let io = |what: &str, e: std::io::Error| format!("file client: {what} ({}): {e}", plan.server);
    let mut f = super::kernel::connect_file(plan)?;
    let mut buf = vec![0u8; READ_BUF];
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let (mut bytes, mut in_pass, mut passes) = (0u64, 0u64, 0u64);
    let mut sum = Checksum::default();
    let mut last = start;
    loop {
        let want = buf.len().min((source.len - in_pass) as usize);
        match std::io::Read::read(&mut f, &mut buf[..want]) {
            Ok(0) => return Err("file client: the server closed the stream".into()),
            Ok(n) => {
                sum.update(&buf[..n]);
                bytes += n as u64;
                in_pass += n as u64;
                last = Instant::now();
                if in_pass == source.len {
                    let got = sum.finish();
                    if got != source.sum {
                        return Err(format!(
                            "file client: pass {} differs from the file (checksum {got:016x}, the file's {:016x})",
                            passes + 1,
                            source.sum
                        ));
                    }
                    passes += 1;
                    (in_pass, sum) = (0, Checksum::default());
                    if last >= end || interrupted.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            Err(e) => return Err(io("read", e)),
        }
        if last.elapsed() > Duration::from_secs(2) {
            return Err("file client: the stream stalled for 2 s".into());
        }
    }
    let elapsed = last - start;
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(super::measure::DONE, Ordering::SeqCst);
    Ok(ClientResult { latency: super::kernel::histogram(), units: bytes, elapsed, usage, copied: None })
}

/// pread/write, mmap/munmap/mincore, send with `MSG_ZEROCOPY`, and getrusage's minor faults,
/// which std does not wrap.
#[allow(unsafe_code)]
mod sys {
    use std::os::fd::RawFd;

    /// A read-only shared mapping of a whole file, unmapped on drop.
    pub struct Map {
        ptr: *mut libc::c_void,
        len: usize,
    }

    impl Map {
        /// Map `len` bytes of `fd` from offset 0, read-only, shared.
        pub fn new(fd: RawFd, len: usize) -> std::io::Result<Map> {
            // SAFETY: a new mapping chosen by the kernel (no address given), of a descriptor
            // the caller holds open for the call; the result is checked below.
            let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd, 0) };
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Map { ptr, len })
        }

        /// Return the mapped bytes.
        pub fn bytes(&self) -> &[u8] {
            // SAFETY: `ptr` is a live, readable mapping of `len` bytes until drop; the file
            // is this process's own (unlinked) and never written after it was made, so the
            // bytes do not change under the shared borrow.
            unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
        }

        /// Return the fraction of the mapping's pages resident in memory (`mincore(2)`).
        pub fn resident(&self) -> std::io::Result<f64> {
            let pages = self.len.div_ceil(4096).max(1);
            let mut vec = vec![0u8; pages];
            // SAFETY: `ptr` is page-aligned (mmap's) and `len` bytes are mapped; `vec` has a
            // byte per page of them (4 KiB pages on x86-64 and on arm64 kernels of the lab).
            let rc = unsafe { libc::mincore(self.ptr, self.len, vec.as_mut_ptr()) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(vec.iter().filter(|b| *b & 1 != 0).count() as f64 / pages as f64)
        }
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: `ptr`/`len` is the mapping made in `new`, unmapped once; borrows of
            // `bytes()` have ended (they borrow `self`). Pages the kernel pinned for a send
            // stay valid for it: it holds its own references.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }

    /// write(2) `buf` to `fd` once (the socket is non-blocking; SIGPIPE not raised: std
    /// ignores it in Rust programs).
    pub fn write(fd: RawFd, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: `buf` is `buf.len()` readable bytes; `fd` is open for the call.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Send `buf` on `sock` with `MSG_ZEROCOPY`, without waiting; return the bytes sent.
    pub fn send_zerocopy(sock: RawFd, buf: &[u8]) -> std::io::Result<usize> {
        let flags = libc::MSG_ZEROCOPY | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // SAFETY: `buf` is `buf.len()` readable bytes of a file mapping; the kernel pins its
        // pages (its own references) for as long as it reads them after the call, and the
        // file's bytes never change, so what it sends is what was asked.
        let n = unsafe { libc::send(sock, buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Return the calling thread's minor page faults so far.
    pub fn minor_faults() -> u64 {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `ru` is writable memory of the size of `struct rusage`.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) } != 0 {
            return 0;
        }
        // SAFETY: getrusage returned 0 and filled it (and zeroed() made every field valid).
        unsafe { ru.assume_init() }.ru_minflt as u64
    }

    /// Return the name of the filesystem `fd` lives on (as `statfs(2)` tells its magic).
    pub fn filesystem(fd: RawFd) -> &'static str {
        let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: `st` is writable memory of the size of `struct statfs`; `fd` is open.
        if unsafe { libc::fstatfs(fd, st.as_mut_ptr()) } != 0 {
            return "an unknown filesystem";
        }
        // SAFETY: fstatfs returned 0 and filled it.
        let f_type = unsafe { st.assume_init() }.f_type;
        // The field's type differs between targets (`__fsword_t`): i64 on x86-64 and arm64.
        #[allow(clippy::unnecessary_cast)]
        match f_type as i64 {
            0xEF53 => "ext4",
            0x0102_1994 => "tmpfs",
            0x5846_5342 => "xfs",
            0x9123_683E => "btrfs",
            0x794C_7630 => "overlayfs",
            _ => "a disk filesystem",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_does_not_depend_on_how_the_stream_is_cut() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        let mut whole = Checksum::default();
        whole.update(&data);
        for cut in [1, 3, 31, 32, 33, 1000, 4097] {
            let mut pieces = Checksum::default();
            for p in data.chunks(cut) {
                pieces.update(p);
            }
            assert_eq!(pieces.finish(), whole.finish(), "pieces of {cut}");
        }
        // A changed byte, two swapped blocks, a byte lost, each change the sum.
        let mut changed = data.clone();
        changed[5000] ^= 1;
        let mut swapped = data.clone();
        swapped[..64].rotate_left(32);
        let lost = &data[..data.len() - 1];
        for other in [&changed[..], &swapped[..], lost] {
            let mut c = Checksum::default();
            c.update(other);
            assert_ne!(c.finish(), whole.finish());
        }
    }

    /// Serve `source` over loopback by `path` to the file client for a short window.
    fn serve_once(
        source: &Source,
        check: &Source,
        path: Path,
    ) -> (Result<ServerResult, String>, Result<ClientResult, String>) {
        use std::sync::atomic::AtomicBool;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let plan = ClientPlan {
            server: listener.local_addr().unwrap(),
            workload: super::super::Workload::File,
            busy: true,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(50),
        };
        let shared = Shared::default();
        std::thread::scope(|scope| {
            let shared = &shared;
            let server = scope.spawn(move || {
                let r = server(listener, path, source, shared);
                shared.stop.store(true, Ordering::SeqCst);
                r
            });
            let client = client(&plan, check, shared, &AtomicBool::new(false));
            shared.stop.store(true, Ordering::SeqCst);
            (server.join().unwrap(), client)
        })
    }

    #[test]
    fn every_kernel_path_delivers_the_file_byte_exact_and_counts_its_copies() {
        let dir = std::env::temp_dir().join(format!("bypass-file-paths-{}", std::process::id()));
        let source = Source::create(&dir, 4 << 20).unwrap();
        for path in [Path::ReadWrite, Path::MmapWrite, Path::Sendfile, Path::Splice, Path::MsgZerocopy] {
            let (server, client) = serve_once(&source, &source, path);
            let (server, client) = (server.unwrap(), client.unwrap());
            assert!(client.units >= source.len && client.units % source.len == 0, "{path:?}: whole passes");
            let c = server.file.unwrap();
            let per = PerByte::new(&c, client.units, client.units);
            let expect: (f64, f64) = match path {
                Path::ReadWrite => (1.0, 1.0),
                Path::MmapWrite => (0.0, 1.0),
                _ => (0.0, 0.0),
            };
            // The server has copied what is still in the socket buffers when the window
            // ends, beyond what the client read: at most their sizes over what was delivered.
            let in_flight = (16u64 << 20) as f64 / client.units as f64;
            let near = |got: f64, want: f64| got >= want - 0.02 && got <= want + want * in_flight + 0.02;
            assert!(near(per.cache_to_user, expect.0), "{path:?}: {per:?}");
            assert!(near(per.user_to_socket, expect.1), "{path:?}: {per:?}");
            if path == Path::MsgZerocopy {
                // Loopback delivers to a local socket too: copied after all.
                assert!(per.zerocopy_copied.is_some_and(|x| x > 0.9), "{path:?}: {per:?}");
            }
        }
        // A client that expects other bytes fails the row.
        let wrong = Source { file: source.file.try_clone().unwrap(), sum: source.sum ^ 1, ..source };
        let (_, client) = serve_once(&wrong, &wrong, Path::Sendfile);
        let err = client.err().expect("a pass that differs fails");
        assert!(err.contains("pass 1 differs from the file"), "{err}");
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn a_made_file_is_resident_and_gone_from_its_directory() {
        let dir = std::env::temp_dir().join(format!("bypass-file-test-{}", std::process::id()));
        let source = Source::create(&dir, 4 << 20).unwrap();
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "the file is unlinked");
        assert!(source.resident().unwrap() >= MIN_RESIDENT, "{}", source.description);
        assert!(source.description.contains("4 MiB"), "{}", source.description);
        let map = sys::Map::new(source.file.as_raw_fd(), source.len as usize).unwrap();
        let mut sum = Checksum::default();
        sum.update(map.bytes());
        assert_eq!(sum.finish(), source.sum);
        let _ = std::fs::remove_dir(&dir);
    }
}
