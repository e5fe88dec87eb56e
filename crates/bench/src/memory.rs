//! The memory figure: what an idle established connection costs our stack. Our echo server
//! runs over AF_XDP in a thread of the demo; kernel clients in the peer namespace open
//! [`CONNECTIONS`] connections to it, one after another, echo 64 bytes on each, and stay
//! open. The demo's resident memory (`VmRSS`) then, less what it was before the first of them
//! (after a warm-up that brought the UMEM and the buffer pool in), divided by the count, is
//! the figure. The kernel clients' sockets are kernel memory, not the demo's.
//! `tests/scale.rs` asserts the bound (8 KiB) at 10,000 and measures 100,000.
//!
//! Beside it, what the kernel takes for the same: the same clients open as many connections
//! to a kernel echo server in the stack's namespace. Kernel memory is read as `Slab:` of
//! `/proc/meminfo` (sockets, inodes, files and dentries are slab objects; an idle socket
//! holds no packet buffers), before and after. With the kernel's server both ends are kernel
//! sockets, alike but for the side that opened them, so half the growth per connection is
//! the figure for one end. The growth while our server held its connections, the clients'
//! sockets alone, is reported beside it as a cross-check (one kernel end, measured apart;
//! the slab figures of a shared machine move by a few hundred bytes per connection between
//! runs).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::Lab;
use bypass_stack::{Stack, StackConfig};

use crate::echo::EchoServer;

/// The name `--only` and `--workload` know the memory figure by.
pub const NAME: &str = "memory";

/// Connections held at once (within the 20,000 open files a process may have here).
const CONNECTIONS: usize = 10_000;
/// Connections echoing at once: a small burst for the receive ring.
const WAVE: usize = 500;

/// The figure, or why there is none.
#[derive(Clone, Debug)]
pub struct MemorySection {
    pub connections: usize,
    pub before: u64,
    pub after: u64,
    /// Kernel slab memory grown while our server held the connections: the clients' sockets.
    pub clients_slab: u64,
    /// Connections a kernel server held (fewer than `connections` when the open-file limit
    /// does not leave room for both ends of each in this process), and the kernel slab memory
    /// grown meanwhile, clients included; or why it was not measured.
    pub kernel_slab: Result<(usize, u64), String>,
    pub failure: Option<String>,
}

impl Default for MemorySection {
    fn default() -> Self {
        MemorySection {
            connections: 0,
            before: 0,
            after: 0,
            clients_slab: 0,
            kernel_slab: Err("not measured".into()),
            failure: None,
        }
    }
}

impl MemorySection {
    /// Bytes resident per idle established connection.
    pub fn per_connection(&self) -> Option<u64> {
        (self.failure.is_none() && self.connections > 0)
            .then(|| self.after.saturating_sub(self.before) / self.connections as u64)
    }

    /// Bytes of kernel memory per idle established connection of a kernel server.
    pub fn kernel_per_connection(&self) -> Option<u64> {
        let (held, grown) = *self.kernel_slab.as_ref().ok()?;
        (self.failure.is_none() && held > 0).then(|| grown / held as u64 / 2)
    }

    /// Bytes of kernel memory per kernel client socket, measured while our server held them.
    pub fn clients_per_connection(&self) -> Option<u64> {
        (self.failure.is_none() && self.connections > 0).then(|| self.clients_slab / self.connections as u64)
    }
}

/// Measure, on port `port` of the lab's stack address, then of `kernel_ip` (a kernel address
/// in the stack's namespace) for the kernel's figure.
pub fn measure(lab: &Lab, port: u16, kernel_ip: Ipv4Addr) -> MemorySection {
    match run(lab, port) {
        Ok(mut section) => {
            section.kernel_slab = kernel(lab, SocketAddr::new(IpAddr::V4(kernel_ip), port), section.connections);
            section
        }
        Err(e) => MemorySection { failure: Some(e), ..MemorySection::default() },
    }
}

/// The kernel's figure: a kernel echo server at `addr` in the stack's namespace holds up to
/// `connections` from the same clients (both ends are this process's files); return how many
/// it held and how much the kernel's slab memory grew.
fn kernel(lab: &Lab, addr: SocketAddr, connections: usize) -> Result<(usize, u64), String> {
    let connections = connections.min(open_files_limit().saturating_sub(512) / 2);
    let listener = lab.in_bypass(|| TcpListener::bind(addr)).map_err(|e| format!("kernel server on {addr}: {e}"))?;
    // Accept without blocking, so that a client that gives up ends the server too.
    listener.set_nonblocking(true).map_err(|e| format!("kernel server: {e}"))?;
    let clients_done = Arc::new(AtomicBool::new(false));
    let server = std::thread::spawn({
        let clients_done = clients_done.clone();
        move || -> Result<Vec<TcpStream>, String> {
            let mut held = Vec::with_capacity(connections);
            while held.len() < connections && !clients_done.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => held.push(echo_once(s)?),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => return Err(format!("kernel server: accept: {e}")),
                }
            }
            Ok(held)
        }
    });
    let clients = lab.in_peer(|| -> Result<(u64, u64, Vec<TcpStream>), String> {
        let before = slab_bytes()?;
        let mut streams = Vec::with_capacity(connections);
        for i in 0..connections {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .map_err(|e| format!("kernel server: connection {i} of {connections}: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
            s.write_all(&message(i)).map_err(|e| format!("write: {e}"))?;
            let mut got = [0u8; 64];
            s.read_exact(&mut got).map_err(|e| format!("read the echo: {e}"))?;
            if got != message(i) {
                return Err(format!("kernel server: connection {i} echoed other bytes"));
            }
            streams.push(s);
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok((before, slab_bytes()?, streams))
    });
    clients_done.store(true, Ordering::Relaxed);
    let held = server.join().map_err(|_| "the kernel server thread panicked".to_string())?;
    let (before, after, mut streams) = clients?;
    let held = held?;
    while !streams.is_empty() {
        streams.truncate(streams.len().saturating_sub(WAVE));
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    Ok((connections, after.saturating_sub(before)))
}

/// Echo the 64 bytes the client of `s` sends first, and return the stream.
fn echo_once(mut s: TcpStream) -> Result<TcpStream, String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut got = [0u8; 64];
    s.read_exact(&mut got).map_err(|e| format!("kernel server: read: {e}"))?;
    s.write_all(&got).map_err(|e| format!("kernel server: write: {e}"))?;
    Ok(s)
}

/// The kernel's slab memory, in bytes (`Slab:` of /proc/meminfo, for the whole machine).
fn slab_bytes() -> Result<u64, String> {
    let info = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    kib_field(&info, "Slab:").ok_or_else(|| "no Slab in /proc/meminfo".into())
}

/// Return the value of the `name` line of a `/proc` file given in kB, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

fn run(lab: &Lab, port: u16) -> Result<MemorySection, String> {
    let device = lab
        .in_bypass(|| XdpDevice::open(XdpConfig::new(&lab.bypass_if, lab.bypass_ip)))
        .map_err(|e| format!("AF_XDP unavailable: {e}"))?;
    let mut stack = Stack::new(device, StackConfig::new(lab.bypass_ip, lab.prefix_len, super::stack::secret()));
    let mut echo = EchoServer::new(&mut stack, port, None).map_err(|e| format!("listen on {port}: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<(), String> {
            while !stop.load(Ordering::Relaxed) {
                stack.poll_wait(Some(Duration::from_millis(5))).map_err(|e| format!("packet I/O: {e}"))?;
                echo.service(&mut stack);
                stack.poll_tx().map_err(|e| format!("packet I/O: {e}"))?;
            }
            stack.abort_all();
            let _ = stack.poll();
            Ok(())
        })
    };
    let addr = SocketAddr::new(IpAddr::V4(lab.bypass_ip), port);
    let result = lab.in_peer(|| clients(addr));
    stop.store(true, Ordering::Relaxed);
    let served = server.join().map_err(|_| "the server thread panicked".to_string())?;
    let section = result?;
    served?;
    Ok(section)
}

/// The client side: warm up, then hold [`CONNECTIONS`] and read the resident memory.
fn clients(addr: SocketAddr) -> Result<MemorySection, String> {
    let limit = open_files_limit();
    let connections = CONNECTIONS.min(limit.saturating_sub(256));
    if connections < 1000 {
        return Err(format!("only {limit} open files allowed (`ulimit -n`); raise it to 10,500 or more"));
    }
    warm_up(addr)?;
    std::thread::sleep(Duration::from_millis(200));
    let (before, slab_before) = (resident_bytes()?, slab_bytes()?);
    let mut streams = Vec::with_capacity(connections);
    for i in 0..connections {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connection {i} of {connections}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        streams.push(s);
    }
    for (w, wave) in streams.chunks(WAVE).enumerate() {
        for (k, mut s) in wave.iter().enumerate() {
            s.write_all(&message(w * WAVE + k)).map_err(|e| format!("write: {e}"))?;
        }
        for (k, mut s) in wave.iter().enumerate() {
            let mut got = [0u8; 64];
            s.read_exact(&mut got).map_err(|e| format!("read the echo: {e}"))?;
            if got != message(w * WAVE + k) {
                return Err(format!("connection {} echoed other bytes", w * WAVE + k));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (after, slab_after) = (resident_bytes()?, slab_bytes()?);
    // Closed a wave at a time: thousands of FINs at once would overrun the receive ring.
    while !streams.is_empty() {
        streams.truncate(streams.len().saturating_sub(WAVE));
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(MemorySection {
        connections,
        before,
        after,
        clients_slab: slab_after.saturating_sub(slab_before),
        ..MemorySection::default()
    })
}

fn message(i: usize) -> [u8; 64] {
    std::array::from_fn(|k| (i.wrapping_mul(31) + k) as u8)
}

/// One connection echoes 32 MiB: every UMEM frame and the buffer pool come into memory.
fn warm_up(addr: SocketAddr) -> Result<(), String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("warm-up: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
    let mut reader = s.try_clone().map_err(|e| e.to_string())?;
    let total = 32 << 20;
    let read = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < total {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
        }
        Ok(())
    });
    let chunk = vec![0x5au8; 64 * 1024];
    let mut w = &s;
    for _ in 0..total / chunk.len() {
        w.write_all(&chunk).map_err(|e| format!("warm-up write: {e}"))?;
    }
    read.join().map_err(|_| "warm-up reader panicked".to_string())?.map_err(|e| format!("warm-up read: {e}"))
}

/// This process's resident memory, in bytes (`VmRSS` of /proc/self/status).
fn resident_bytes() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    kib_field(&status, "VmRSS:").ok_or_else(|| "no VmRSS in /proc/self/status".into())
}

/// The soft limit on open files (`Max open files` of /proc/self/limits).
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(1024)
}

/// The section as markdown (also the terminal's text).
pub fn markdown(section: &MemorySection) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n## memory: idle established connections, our stack over AF_XDP\n");
    match (section.per_connection(), &section.failure) {
        (Some(per), _) => {
            let _ = writeln!(
                out,
                "{} connections from kernel clients, 64 B echoed on each, then idle: resident {:.1} MiB -> {:.1} MiB, **{per} bytes per connection** (bound: 8 KiB; an idle connection's empty buffers hold no storage)",
                section.connections,
                section.before as f64 / (1 << 20) as f64,
                section.after as f64 / (1 << 20) as f64,
            );
            match (section.kernel_per_connection(), &section.kernel_slab) {
                (Some(kernel), &Ok((held, grown))) => {
                    let _ = writeln!(
                        out,
                        "\nthe kernel, for comparison: the same clients, {held} connections to a kernel echo server: **{kernel} bytes of kernel memory per connection end** (slab, /proc/meminfo: {:.1} MiB for both ends, halved; the kernel clients of our server took {} bytes each)",
                        grown as f64 / (1 << 20) as f64,
                        section.clients_per_connection().unwrap_or(0),
                    );
                }
                (None, Err(why)) => {
                    let _ = writeln!(out, "\nthe kernel, for comparison: not measured: {why}");
                }
                _ => {}
            }
        }
        (None, Some(why)) => {
            let _ = writeln!(out, "not measured: {why}");
        }
        (None, None) => {
            let _ = writeln!(out, "not measured");
        }
    }
    out
}

/// The section as a JSON value.
pub fn json(section: &MemorySection, js: impl Fn(&str) -> String) -> String {
    format!(
        "{{\"connections\": {}, \"resident_before\": {}, \"resident_after\": {}, \"bytes_per_connection\": {}, \"clients_slab\": {}, \"kernel_slab\": {}, \"kernel_bytes_per_connection\": {}, \"failure\": {}}}",
        section.connections,
        section.before,
        section.after,
        section.per_connection().map_or("null".into(), |v| v.to_string()),
        section.clients_slab,
        section
            .kernel_slab
            .as_ref()
            .map_or("null".into(), |&(held, grown)| format!("{{\"connections\": {held}, \"grown\": {grown}}}")),
        section.kernel_per_connection().map_or("null".into(), |v| v.to_string()),
        section.failure.as_deref().map_or("null".into(), &js)
    )
}
