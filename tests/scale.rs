//! Many connections at once: kernel clients in the peer namespace hold 10,000 connections to
//! `bypass echo` over AF_XDP, echo on every one byte-exact, and the server's resident memory
//! per idle established connection stays within 8 KiB, with no frame dropped for an empty
//! fill ring (or any other reason the device counts).
//!
//! `BYPASS_SCALE_CONNECTIONS=100000 cargo test --release --test scale -- --nocapture` runs
//! the same test at 100,000 (the figure in docs/performance.md, "Many connections"). The clients are child processes
//! (this test binary again, run in the peer namespace), each with its own source address and
//! at most [`PER_CLIENT`] sockets: a process here may hold only 20,000 open files, and one
//! address has about 55,000 ports.
//!
//! Needs root: without it the test says why it skips, except under `CI=true`, where it fails.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::FromRawFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use bypass_lab::testlab::lab_available;
use common::{Backend, EchoServer};

/// Connections per client process.
const PER_CLIENT: usize = 5_000;
/// Connections echoing or closing at once, all clients together: the writes of a wave, then
/// their replies. Half the server's receive ring (`--rx-ring`, [`RX_RING`]), for the
/// replies' acknowledgements and what else arrives meanwhile: a burst larger than the
/// ring, from any number of sockets written or closed at once, is dropped by the kernel
/// and retransmitted (the 100,000 run showed it with every client's wave at once).
const IN_FLIGHT: usize = RX_RING / 2;
/// The server's receive ring, in frames.
const RX_RING: usize = 8192;
/// The bytes each connection sends and gets back.
const MESSAGE: usize = 64;
/// The bound the test asserts, bytes of server memory per idle established connection.
const MAX_RESIDENT_PER_CONNECTION: u64 = 8 * 1024;
/// Set in a client process: `SOURCE_IP SERVER_ADDR COUNT SEED WAVE`.
const CLIENT_ENV: &str = "BYPASS_SCALE_CLIENT";

#[test]
fn ten_thousand_connections_echo_with_no_drop_in_bounded_memory() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return; // a client process runs `scale_client` only
    }
    let test = "scale";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let total: usize = std::env::var("BYPASS_SCALE_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let lab = common::create_lab(test, 1);
    // Ports for the clients' binds: about 55,000 per source address.
    lab.in_peer(|| std::fs::write("/proc/sys/net/ipv4/ip_local_port_range", "10000 65000")).expect("port range");
    let clients = total.div_ceil(PER_CLIENT);
    let sources: Vec<Ipv4Addr> = (0..clients)
        .map(|i| {
            let [a, b, c, _] = lab.peer_ip.octets();
            let ip = Ipv4Addr::new(a, b, c, 100 + i as u8);
            lab.ip_peer(&["addr", "add", &format!("{ip}/{}", lab.prefix_len), "dev", &lab.peer_if])
                .expect("add a client address");
            ip
        })
        .collect();
    // Rings large enough for a wave from every client at once, and the table for all.
    let server = EchoServer::start(&lab, Backend::Xdp, &["--rx-ring", &RX_RING.to_string()]);
    let pid = server.pid();
    let addr = common::server_addr(&lab);

    // Warm up: one connection moves enough to bring every UMEM frame and the stack's pools
    // into memory, so the figure below is the connections' and not the rings'.
    let warm = common::peer_connect(&lab, addr);
    common::echo_with_reader(&warm, &common::data(7, 48 << 20), Duration::from_secs(60)).expect("warm-up echo");
    drop(warm);
    std::thread::sleep(Duration::from_millis(300));
    let before = resident_bytes(pid);

    let started = Instant::now();
    let mut procs: Vec<ClientProcess> = sources
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            let count = PER_CLIENT.min(total - i * PER_CLIENT);
            ClientProcess::spawn(&lab.peer_ns, *ip, addr, count, i as u64, (IN_FLIGHT / clients).min(500))
        })
        .collect();
    // One client at a time opens its connections, then they all echo at once.
    for p in &mut procs {
        p.command("open");
        p.expect("opened");
    }
    let opened = started.elapsed();
    for p in &mut procs {
        p.command("echo");
    }
    for p in &mut procs {
        p.expect("echoed");
    }
    let echoed = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let after = resident_bytes(pid);
    let per_connection = after.saturating_sub(before) / total as u64;
    println!(
        "{total} connections: opened in {opened:.1?}, echoed by {echoed:.1?}; server resident {} MiB -> {} MiB, {per_connection} bytes per connection",
        before >> 20,
        after >> 20
    );
    // One client at a time closes, a wave at a time (see `scale_client`).
    for mut p in procs {
        p.command("close");
        p.finish();
    }
    let finished = server.stop();
    let c = &finished.counters;
    println!("server counters: {c}");
    for name in ["rx_fill_ring_empty", "rx_dropped", "rx_ring_full", "rx_invalid_descs"] {
        let drops: u64 = c.0.iter().filter(|(k, _)| k.ends_with(name)).map(|(_, v)| v).sum();
        assert_eq!(drops, 0, "device counter {name}: {c}");
    }
    assert!(c.get("connections_accepted") >= total as u64, "{c}");
    assert_eq!(c.get("connections_reset"), 0, "{c}");
    assert!(
        per_connection <= MAX_RESIDENT_PER_CONNECTION,
        "{per_connection} bytes resident per idle connection, more than {MAX_RESIDENT_PER_CONNECTION}"
    );
}

/// Return the resident memory of process `pid` (VmRSS), in bytes.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

/// A client process and the pipes to command it.
struct ClientProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ClientProcess {
    fn spawn(ns: &str, source: Ipv4Addr, server: SocketAddr, count: usize, seed: u64, wave: usize) -> ClientProcess {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args(["scale_client", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(CLIENT_ENV, format!("{source} {server} {count} {seed} {wave}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a client process");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        ClientProcess { child, stdin, stdout }
    }

    fn command(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").expect("command a client");
    }

    /// Wait for the client's line starting with `word`; a line `failed: ...` fails the test.
    fn expect(&mut self, word: &str) {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read a client's output");
            assert!(n > 0, "a client exited before saying {word}");
            if line.starts_with("failed:") {
                panic!("a client {line}");
            }
            if line.starts_with(word) {
                return;
            }
        }
    }

    fn finish(mut self) {
        let status = self.child.wait().expect("reap a client");
        assert!(status.success(), "a client process ended with {status}");
    }
}

impl Drop for ClientProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client process: does nothing unless run by the test above.
#[test]
fn scale_client() {
    let Ok(spec) = std::env::var(CLIENT_ENV) else { return };
    let mut words = spec.split_whitespace();
    let source: Ipv4Addr = words.next().and_then(|w| w.parse().ok()).expect("source address");
    let server: SocketAddrV4 = words.next().and_then(|w| w.parse().ok()).expect("server address");
    let count: usize = words.next().and_then(|w| w.parse().ok()).expect("count");
    let seed: u64 = words.next().and_then(|w| w.parse().ok()).expect("seed");
    let wave: usize = words.next().and_then(|w| w.parse().ok()).expect("wave");
    let mut streams = Vec::with_capacity(count);
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("read a command");
        let result = match line.trim() {
            "open" => open_all(source, server, count, &mut streams).map(|()| "opened".to_string()),
            "echo" => echo_all(&streams, seed, wave).map(|()| "echoed".to_string()),
            "close" => {
                // A wave at a time, as the echo went: the FINs of thousands of sockets closed
                // at once (a process exiting) would arrive faster than any ring of ours holds.
                while !streams.is_empty() {
                    streams.truncate(streams.len().saturating_sub(wave));
                    std::thread::sleep(Duration::from_millis(50));
                }
                break;
            }
            other => Err(format!("unknown command {other:?}")),
        };
        match result {
            Ok(word) => println!("{word}"),
            Err(e) => println!("failed: {e}"),
        }
    }
}

fn open_all(source: Ipv4Addr, server: SocketAddrV4, count: usize, streams: &mut Vec<TcpStream>) -> Result<(), String> {
    for i in 0..count {
        let stream =
            connect_from(source, server).map_err(|e| format!("connection {i} of {count} from {source}: {e}"))?;
        streams.push(stream);
    }
    Ok(())
}

/// Connect to `server` from `source` (std cannot bind before connecting).
fn connect_from(source: Ipv4Addr, server: SocketAddrV4) -> std::io::Result<TcpStream> {
    let sockaddr = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket; the fd is owned by the TcpStream made from it right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is ours and open; nothing else owns it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    stream.set_write_timeout(Some(Duration::from_secs(10)))?; // bounds connect(2) too
    let local = sockaddr(SocketAddrV4::new(source, 0));
    let remote = sockaddr(server);
    // SAFETY: valid sockaddr_in values of the given length.
    if unsafe { libc::bind(fd, (&raw const local).cast(), len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::connect(fd, (&raw const remote).cast(), len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Echo [`MESSAGE`] bytes on every stream, `size` streams at a time, byte-exact.
fn echo_all(streams: &[TcpStream], seed: u64, size: usize) -> Result<(), String> {
    for (w, wave) in streams.chunks(size).enumerate() {
        let first = w * size;
        let message = |k: usize| common::data(seed << 32 | (first + k) as u64, MESSAGE);
        for (k, mut s) in wave.iter().enumerate() {
            s.write_all(&message(k)).map_err(|e| format!("write on connection {}: {e}", first + k))?;
        }
        for (k, mut s) in wave.iter().enumerate() {
            s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
            let mut got = [0u8; MESSAGE];
            s.read_exact(&mut got).map_err(|e| format!("read on connection {}: {e}", first + k))?;
            if got[..] != message(k)[..] {
                return Err(format!("connection {} echoed other bytes", first + k));
            }
        }
    }
    Ok(())
}
