//! Kernel sockets: the servers of the kernel rows and the client of every row.
//!
//! Both use `read(2)`/`write(2)` on the socket (through `File`), so `/proc/thread-self/io`
//! counts every call, including the ones a busy-polling loop makes in vain.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::Workload;
use super::measure::{DONE, MEASURING, Usage, Window, count_syscalls};

/// Flags shared by the client, the server and the demo for one measurement.
#[derive(Default)]
pub struct Shared {
    /// 0 (warm-up), [`MEASURING`] or [`DONE`], set by the client.
    pub phase: AtomicU8,
    /// The server is listening.
    pub ready: AtomicBool,
    /// The server should stop (set once the client is done, or when the server failed).
    pub stop: AtomicBool,
}

/// What the server measured.
pub struct ServerResult {
    pub usage: Usage,
    /// Bytes the server's CPU copied (our stack only).
    pub copied: Option<u64>,
    /// How the server moved packets (the device's mode), for the conditions line.
    pub mode: String,
    /// What a file-serving server counted, copy by copy (the file rows only).
    pub file: Option<super::file::Counts>,
}

/// Turn a stream into a `File`, so reads and writes are `read(2)`/`write(2)`.
fn into_file(stream: TcpStream, nonblocking: bool) -> std::io::Result<File> {
    // setsockopt(TCP_NODELAY) and ioctl(FIONBIO).
    count_syscalls(2);
    stream.set_nodelay(true)?;
    stream.set_nonblocking(nonblocking)?;
    Ok(File::from(OwnedFd::from(stream)))
}

/// Write all of `data`, spinning while the socket is full.
fn write_all(f: &mut File, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match f.write(data) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read into `buf[*got..]` once; return whether `buf` is full. `Ok(false)` on WouldBlock.
fn read_some(f: &mut File, buf: &mut [u8], got: &mut usize) -> std::io::Result<bool> {
    match f.read(&mut buf[*got..]) {
        Ok(0) => Err(ErrorKind::UnexpectedEof.into()),
        Ok(n) => {
            *got += n;
            Ok(*got == buf.len())
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Fill `buf`, spinning while nothing has arrived; give up after `limit`.
fn read_exact(f: &mut File, buf: &mut [u8], limit: Duration) -> std::io::Result<()> {
    let mut got = 0;
    let deadline = Instant::now() + limit;
    while !read_some(f, buf, &mut got)? {
        if Instant::now() > deadline {
            return Err(ErrorKind::TimedOut.into());
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// What a server does with a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Echo,
    /// Read and discard (bulk, client -> server).
    Sink,
    /// Write without end (bulk, server -> client).
    Source,
}

/// One connection on the server side: serve it until the client closes it.
struct Conn {
    f: File,
}

impl Drop for Conn {
    /// The `close(2)` of the socket, which follows.
    fn drop(&mut self) {
        count_syscalls(1);
    }
}

impl Conn {
    /// Handle what has arrived; return `false` once the connection is finished.
    fn step(&mut self, buf: &mut [u8], role: Role) -> Result<bool, String> {
        if role == Role::Source {
            return match self.f.write(&buf[..64 * 1024]) {
                Ok(_) => Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(true),
                // The client closed (with our data unread: a reset).
                Err(_) => Ok(false),
            };
        }
        let sink = role == Role::Sink;
        match self.f.read(buf) {
            Ok(0) => Ok(false),
            Ok(n) => {
                if !sink {
                    write_all(&mut self.f, &buf[..n]).map_err(|e| format!("kernel server: write: {e}"))?;
                }
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(true),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(false),
            Err(e) => Err(format!("kernel server: read: {e}")),
        }
    }
}

/// Serve `workload`'s clients on `listener` (echo, or discard for bulk) until they are done
/// (or `shared.stop`); `busy` spins on non-blocking sockets in one thread, otherwise blocking
/// sockets with one thread per concurrent connection.
pub fn server(listener: TcpListener, busy: bool, workload: Workload, shared: &Shared) -> Result<ServerResult, String> {
    let io = |what: &str, e: std::io::Error| format!("kernel server: {what}: {e}");
    listener.set_nonblocking(busy).map_err(|e| io("configure the listener", e))?;
    let role = match workload {
        Workload::BulkUp => Role::Sink,
        Workload::BulkDown | Workload::File => Role::Source,
        _ => Role::Echo,
    };
    // Connections to serve before returning; `None`: until told to stop (connection rate).
    let expected = match workload {
        Workload::Rr { conns, .. } => Some(conns),
        Workload::BulkUp | Workload::BulkDown | Workload::File => Some(1),
        Workload::Connect => None,
    };
    let mode = if busy { "kernel TCP, non-blocking, busy polling" } else { "kernel TCP, blocking" };
    shared.ready.store(true, Ordering::SeqCst);
    let mut buf = vec![0u8; 256 * 1024];
    let mut window = Window::default();
    if busy {
        let mut conns: Vec<Conn> = Vec::new();
        let mut accepted = 0;
        loop {
            window.observe(&shared.phase, || 0);
            if expected.is_none_or(|n| accepted < n) {
                count_syscalls(1); // accept4(2), answered or not
                match listener.accept() {
                    Ok((s, _)) => {
                        conns.push(Conn { f: into_file(s, true).map_err(|e| io("configure", e))? });
                        accepted += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io("accept", e)),
                }
            }
            let mut i = 0;
            while i < conns.len() {
                if conns[i].step(&mut buf, role)? {
                    i += 1;
                } else {
                    conns.swap_remove(i);
                }
            }
            let all_done = expected.is_some_and(|n| accepted == n) && conns.is_empty();
            if all_done || (shared.stop.load(Ordering::Relaxed) && (conns.is_empty() || expected.is_some())) {
                break;
            }
        }
        window.finish(0);
        let (usage, _) = window.delta().ok_or("kernel server: the client's measurement window was not seen")?;
        return Ok(ServerResult { usage, copied: None, mode: mode.into(), file: None });
    }
    // Blocking: accept, then serve each connection to its end on a thread of its own.
    let serve = |s: TcpStream, window: &mut Window, buf: &mut [u8]| -> Result<(), String> {
        let mut conn = Conn { f: into_file(s, false).map_err(|e| io("configure", e))? };
        loop {
            window.observe(&shared.phase, || 0);
            if !conn.step(buf, role)? {
                return Ok(());
            }
        }
    };
    match expected {
        Some(n) => std::thread::scope(|scope| {
            let mut threads = Vec::new();
            for _ in 0..n {
                count_syscalls(1);
                let (s, _) = listener.accept().map_err(|e| io("accept", e))?;
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                threads.push(scope.spawn(move || {
                    let (mut window, mut buf) = (Window::default(), vec![0u8; 256 * 1024]);
                    serve(s, &mut window, &mut buf)?;
                    window.finish(0);
                    window.delta().map(|(u, _)| u).ok_or_else(|| "kernel server: window not seen".to_string())
                }));
            }
            let mut total = Usage::default();
            for t in threads {
                let u = t.join().map_err(|_| "kernel server: a connection thread panicked".to_string())??;
                total = total.plus(&u);
            }
            Ok(ServerResult { usage: total, copied: None, mode: mode.into(), file: None })
        }),
        None => {
            loop {
                count_syscalls(1);
                let (s, _) = listener.accept().map_err(|e| io("accept", e))?;
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                serve(s, &mut window, &mut buf)?;
            }
            window.finish(0);
            let (usage, _) = window.delta().ok_or("kernel server: the client's measurement window was not seen")?;
            Ok(ServerResult { usage, copied: None, mode: mode.into(), file: None })
        }
    }
}

/// How the client runs one measurement.
pub struct ClientPlan {
    pub server: SocketAddr,
    pub workload: Workload,
    pub busy: bool,
    pub warmup: Duration,
    pub duration: Duration,
}

/// What the client measured.
pub struct ClientResult {
    /// Latencies in nanoseconds: round trips, or connect + exchange + close (empty for bulk).
    pub latency: Histogram<u64>,
    /// Requests, connections, or bytes (bulk) inside the window.
    pub units: u64,
    pub elapsed: Duration,
    pub usage: Usage,
    /// Bytes the client's CPU copied inside the window (our stack as the client only).
    pub copied: Option<u64>,
}

/// Wait for the server to listen (or fail).
pub fn wait_ready(shared: &Shared) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !shared.ready.load(Ordering::SeqCst) {
        if shared.stop.load(Ordering::SeqCst) {
            return Err("client: the server failed to start".into());
        }
        if Instant::now() > deadline {
            return Err("client: the server did not start within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Run `plan.workload` against the server: warm-up unrecorded, then `duration` recorded.
/// `interrupted` ends the run early.
pub fn client(plan: &ClientPlan, shared: &Shared, interrupted: &AtomicBool) -> Result<ClientResult, String> {
    wait_ready(shared)?;
    match plan.workload {
        Workload::Rr { size, conns } => request_response(plan, size, conns, shared, interrupted),
        Workload::BulkUp => bulk_up(plan, shared, interrupted),
        Workload::BulkDown | Workload::File => bulk_down(plan, shared, interrupted),
        Workload::Connect => connect_rate(plan, shared, interrupted),
    }
}

/// Return an empty latency histogram (1 ns to 100 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Connect to the server: a blocking connect(2) for the blocking row; for the busy-polling
/// rows a non-blocking one, spinning until it completes, so the client never sleeps waiting
/// for the SYN-ACK (a sleeping vCPU's wake-up would be charged to the server under test).
fn connect(plan: &ClientPlan) -> Result<TcpStream, String> {
    let result = if plan.busy {
        sys::connect_spinning(&plan.server, Duration::from_secs(3))
    } else {
        // std: socket, ioctl(FIONBIO), connect, poll (once, unless interrupted), ioctl(FIONBIO).
        count_syscalls(5);
        TcpStream::connect_timeout(&plan.server, Duration::from_secs(3))
    };
    result.map_err(|e| format!("client: connect to {}: {e}", plan.server))
}

/// Connect to the server as [`client`] does and return the socket as a `File`.
pub fn connect_file(plan: &ClientPlan) -> Result<File, String> {
    into_file(connect(plan)?, plan.busy).map_err(|e| format!("client: configure ({}): {e}", plan.server))
}

/// Measure over `conns` connections: each has one `size`-byte request outstanding at a time.
fn request_response(
    plan: &ClientPlan,
    size: usize,
    conns: usize,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let io = |what: &str, e: std::io::Error| format!("client: {what} ({}): {e}", plan.server);
    let mut files = Vec::with_capacity(conns);
    for _ in 0..conns {
        files.push(into_file(connect(plan)?, plan.busy).map_err(|e| io("configure", e))?);
    }
    let msg: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
    let mut bufs = vec![vec![0u8; size]; conns];
    let mut got = vec![0usize; conns];
    let mut sent_at = vec![Instant::now(); conns];
    let mut latency = histogram();
    let limit = Duration::from_secs(2);
    let check = |buf: &[u8]| {
        if buf == &msg[..] { Ok(()) } else { Err("client: the echo differs from what was sent".to_string()) }
    };
    let mut requests = 0u64;
    let mut measuring = false;
    let start_all = Instant::now();
    let (mut start, mut start_usage) = (start_all, Usage::default());
    let warm_end = start_all + plan.warmup;
    let end = warm_end + plan.duration;
    let mut now = Instant::now();
    if plan.busy {
        // Every connection keeps one request in flight; sweep them, spinning.
        for (i, f) in files.iter_mut().enumerate() {
            sent_at[i] = Instant::now();
            write_all(f, &msg).map_err(|e| io("write", e))?;
        }
        let mut last_progress = Instant::now();
        while now < end && !interrupted.load(Ordering::Relaxed) {
            if !measuring && now >= warm_end {
                measuring = true;
                shared.phase.store(MEASURING, Ordering::SeqCst);
                (start, start_usage) = (Instant::now(), Usage::now());
            }
            for i in 0..conns {
                if read_some(&mut files[i], &mut bufs[i], &mut got[i]).map_err(|e| io("read the echo", e))? {
                    now = Instant::now();
                    check(&bufs[i])?;
                    got[i] = 0;
                    if measuring {
                        latency.saturating_record((now - sent_at[i]).as_nanos() as u64);
                        requests += 1;
                    }
                    // The clock starts before write(2): on a veth the send can run the whole
                    // path to the server, and even its answer, before write returns.
                    sent_at[i] = Instant::now();
                    write_all(&mut files[i], &msg).map_err(|e| io("write", e))?;
                    last_progress = now;
                }
            }
            now = Instant::now();
            if now - last_progress > limit {
                return Err(format!("client: no echo for {} s ({})", limit.as_secs(), plan.server));
            }
        }
        // Collect the requests still in flight, unrecorded.
        let elapsed = now - start;
        let usage = Usage::now().since(&start_usage);
        shared.phase.store(DONE, Ordering::SeqCst);
        for i in 0..conns {
            let mut rest = std::mem::take(&mut bufs[i]);
            read_exact(&mut files[i], &mut rest[got[i]..], limit).map_err(|e| io("read the echo", e))?;
        }
        return Ok(ClientResult { latency, units: requests, elapsed, usage, copied: None });
    }
    // Blocking: a request on every connection, then every echo, round after round.
    let mut round = |files: &mut [File], record: bool, latency: &mut Histogram<u64>| -> Result<u64, String> {
        for (i, f) in files.iter_mut().enumerate() {
            sent_at[i] = Instant::now();
            write_all(f, &msg).map_err(|e| io("write", e))?;
        }
        for (i, f) in files.iter_mut().enumerate() {
            f.read_exact(&mut bufs[i]).map_err(|e| io("read the echo", e))?;
            let t = Instant::now();
            check(&bufs[i])?;
            if record {
                latency.saturating_record((t - sent_at[i]).as_nanos() as u64);
            }
        }
        Ok(files.len() as u64)
    };
    while now < end && !interrupted.load(Ordering::Relaxed) {
        if !measuring && now >= warm_end {
            measuring = true;
            shared.phase.store(MEASURING, Ordering::SeqCst);
            (start, start_usage) = (Instant::now(), Usage::now());
        }
        let n = round(&mut files, measuring, &mut latency)?;
        if measuring {
            requests += n;
        }
        now = Instant::now();
    }
    let elapsed = now - start;
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    // One more round, so blocked server threads wake up and see the window close.
    let _ = round(&mut files, false, &mut latency);
    Ok(ClientResult { latency, units: requests, elapsed, usage, copied: None })
}

/// Stream bytes one way (client -> server) for `duration`; the rate counts every byte up to
/// the server's close after our FIN, so nothing still buffered is counted as delivered.
fn bulk_up(plan: &ClientPlan, shared: &Shared, interrupted: &AtomicBool) -> Result<ClientResult, String> {
    let io = |what: &str, e: std::io::Error| format!("client: {what} ({}): {e}", plan.server);
    let stream = connect(plan)?;
    let control = stream.try_clone().map_err(|e| io("duplicate the socket", e))?;
    let mut f = into_file(stream, plan.busy).map_err(|e| io("configure", e))?;
    let chunk = vec![0x5au8; 64 * 1024];
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let mut bytes = 0u64;
    while Instant::now() < end && !interrupted.load(Ordering::Relaxed) {
        match f.write(&chunk) {
            Ok(n) => bytes += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            Err(e) => return Err(io("write", e)),
        }
    }
    control.shutdown(Shutdown::Write).map_err(|e| io("shutdown", e))?;
    let mut buf = [0u8; 64];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => return Err("client: the bulk server sent data".into()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if Instant::now() > deadline {
                    return Err("client: the server did not close within 10 s of our FIN".into());
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(io("wait for the close", e)),
        }
    }
    let elapsed = start.elapsed();
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied: None })
}

/// Most connections one connection-rate measurement opens to one server, warm-up included.
///
/// Every connection the client closes waits in TIME-WAIT for 60 s on the peer, holding its
/// port towards that server. Linux's connect(2) looks for a free port among those of one
/// parity first (`__inet_hash_connect` in net/ipv4/inet_hashtables.c), so once every even
/// port of the range is held, each further connect scans all of them before it tries an odd
/// one: with the peer's range of 1024-65535 that is after 32,256 connections, and from then
/// on every connect(2) takes about 3.3 ms here, which the connection-rate row would report
/// as the server's tail (p99 3 ms, a fifth of the rate). Measured: 40,000 connections to one
/// server, connect(2) p50 9-11 µs for the first 32,000 and 3,288 µs after. Stay well below.
pub const MAX_CONNECTIONS: u64 = 24_000;

/// Most of [`MAX_CONNECTIONS`] the warm-up may use.
pub const MAX_WARMUP_CONNECTIONS: u64 = 2_000;

/// Read what the server streams for `duration`; the rate counts bytes read, then close.
fn bulk_down(plan: &ClientPlan, shared: &Shared, interrupted: &AtomicBool) -> Result<ClientResult, String> {
    let io = |what: &str, e: std::io::Error| format!("client: {what} ({}): {e}", plan.server);
    let mut f = into_file(connect(plan)?, plan.busy).map_err(|e| io("configure", e))?;
    let mut buf = vec![0u8; 256 * 1024];
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let (mut bytes, mut last) = (0u64, start);
    let mut now = start;
    while now < end && !interrupted.load(Ordering::Relaxed) {
        match f.read(&mut buf) {
            Ok(0) => return Err("client: the server closed the stream".into()),
            Ok(n) => {
                bytes += n as u64;
                last = now;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            Err(e) => return Err(io("read", e)),
        }
        now = Instant::now();
        if now - last > Duration::from_secs(2) {
            return Err("client: the stream stalled for 2 s".into());
        }
    }
    let elapsed = now - start;
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied: None })
}

/// Connect, exchange 64 bytes, close, again and again.
fn connect_rate(plan: &ClientPlan, shared: &Shared, interrupted: &AtomicBool) -> Result<ClientResult, String> {
    let io = |what: &str, e: std::io::Error| format!("client: {what} ({}): {e}", plan.server);
    let msg = [0x42u8; 64];
    let mut buf = [0u8; 64];
    let once = |buf: &mut [u8; 64]| -> Result<(), String> {
        let mut f = into_file(connect(plan)?, plan.busy).map_err(|e| io("configure", e))?;
        write_all(&mut f, &msg).map_err(|e| io("write", e))?;
        read_exact(&mut f, buf, Duration::from_secs(2)).map_err(|e| io("read the echo", e))?;
        count_syscalls(1); // the close(2) as `f` drops
        Ok(())
    };
    let (window, start_usage) = connect_loop(plan, shared, interrupted, &mut buf, |_| Usage::now(), once)?;
    let usage = Usage::now().since(&start_usage);
    let _ = once(&mut buf);
    Ok(ClientResult { latency: window.latency, units: window.conns, elapsed: window.elapsed, usage, copied: None })
}

/// What [`connect_loop`] measured.
pub struct ConnectWindow {
    /// Connect + exchange + close of each connection in the window, in nanoseconds.
    pub latency: Histogram<u64>,
    /// Connections in the window.
    pub conns: u64,
    /// The window's length.
    pub elapsed: Duration,
}

/// Run the connection-rate loop of every client: warm up with `once` (at most
/// [`MAX_WARMUP_CONNECTIONS`] times), call `start` as the window opens and keep what it
/// returns (the CPU usage so far), then call `once` until the plan's duration has passed or
/// [`MAX_CONNECTIONS`] connections, warm-up included, have been made. Both get `client`.
/// The phase is DONE when it returns.
pub fn connect_loop<C, U>(
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
    client: &mut C,
    start: impl FnOnce(&mut C) -> U,
    mut once: impl FnMut(&mut C) -> Result<(), String>,
) -> Result<(ConnectWindow, U), String> {
    let warm_end = Instant::now() + plan.warmup;
    let mut warm = 0;
    while Instant::now() < warm_end && warm < MAX_WARMUP_CONNECTIONS && !interrupted.load(Ordering::Relaxed) {
        once(client)?;
        warm += 1;
    }
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let started = start(client);
    let mut latency = histogram();
    let begin = Instant::now();
    let end = begin + plan.duration;
    let (mut now, mut conns) = (begin, 0u64);
    // Capped, warm-up included, so that the peer's connect(2) never runs short of ports of
    // the parity it tries first (see MAX_CONNECTIONS).
    while now < end && warm + conns < MAX_CONNECTIONS && !interrupted.load(Ordering::Relaxed) {
        once(client)?;
        let t = Instant::now();
        latency.saturating_record((t - now).as_nanos() as u64);
        now = t;
        conns += 1;
    }
    shared.phase.store(DONE, Ordering::SeqCst);
    Ok((ConnectWindow { latency, conns, elapsed: now - begin }, started))
}

/// The non-blocking connect(2) std does not offer.
#[allow(unsafe_code)]
mod sys {
    use std::io;
    use std::net::{SocketAddr, TcpStream};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    /// Connect to `addr` (IPv4 or IPv6) on a non-blocking socket, spinning on `poll(2)` with
    /// a zero timeout until the handshake completes or fails, for at most `limit`. The stream
    /// is left non-blocking.
    pub fn connect_spinning(addr: &SocketAddr, limit: Duration) -> io::Result<TcpStream> {
        // socket, connect, getsockopt(SO_ERROR), and each poll below.
        super::count_syscalls(3);
        let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: socket(2) with constant arguments; it returns a new descriptor or -1.
        let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let rc = match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: `sin` is a valid sockaddr_in and the length is its size.
                unsafe {
                    libc::connect(
                        fd.as_raw_fd(),
                        (&raw const sin).cast::<libc::sockaddr>(),
                        size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    )
                }
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: `sin6` is a valid sockaddr_in6 and the length is its size.
                unsafe {
                    libc::connect(
                        fd.as_raw_fd(),
                        (&raw const sin6).cast::<libc::sockaddr>(),
                        size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                    )
                }
            }
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
            let deadline = Instant::now() + limit;
            loop {
                let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                super::count_syscalls(1);
                // SAFETY: `pfd` is one valid pollfd; a zero timeout never blocks.
                let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                } else if n > 0 {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::hint::spin_loop();
            }
        }
        let stream = TcpStream::from(fd);
        match stream.take_error()? {
            Some(e) => Err(e),
            None => Ok(stream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that connects at no cost, for a long warm-up and a long window: the loop stops
    /// at the cap, warm-up included, which the peer's ports of one parity hold with room to spare.
    #[test]
    fn the_connection_rate_loop_stays_within_the_port_budget() {
        let plan = ClientPlan {
            server: "127.0.0.1:9".parse().unwrap(),
            workload: Workload::Connect,
            busy: true,
            warmup: Duration::from_secs(30),
            duration: Duration::from_secs(30),
        };
        let (shared, interrupted) = (Shared::default(), AtomicBool::new(false));
        let mut calls = 0u64;
        let once = |calls: &mut u64| {
            *calls += 1;
            Ok(())
        };
        let (window, started) = connect_loop(&plan, &shared, &interrupted, &mut calls, |_| "started", once).unwrap();
        assert_eq!(started, "started");
        assert_eq!(calls, MAX_CONNECTIONS, "warm-up and window together stop at the cap");
        assert_eq!(window.conns, MAX_CONNECTIONS - MAX_WARMUP_CONNECTIONS);
        assert_eq!(window.latency.len(), window.conns);
        assert_eq!(shared.phase.load(Ordering::SeqCst), DONE);
        // The demo's peer range, 1024-65535: 32,256 ports of each parity.
        let (low, high) = super::super::PEER_PORTS;
        let one_parity = u64::from(high - low + 1) / 2;
        assert!(calls + 1 < one_parity * 4 / 5, "{calls} connections (and the last one) against {one_parity} ports");
    }
}
