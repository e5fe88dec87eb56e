//! What the runtime costs, measured side by side in one run: 100 kernel client connections
//! in the lab's peer namespace, each with one 64-byte request in flight, echoed by a server
//! in the bypass namespace:
//!
//! - `stack`: our stack over AF_XDP by the run-to-completion API, one thread spinning on the
//!   device and serving every connection in its loop (as `bypass echo`): the reference;
//! - `threads`: a blocking application thread per connection, on the runtime in-thread (the
//!   threads poll the stack in their calls), on the runtime's shard design (a stack thread,
//!   bytes crossing in chunks), and on the kernel's sockets (`std::net`, the same program);
//! - `tokio`: a task per connection under a tokio runtime of one worker, on the runtime
//!   in-thread (busy-polling, as `stack` does, and spinning then sleeping), with
//!   shards, and on the kernel's sockets (`tokio::net`);
//! - `threads, 2 stacks`: in-thread on a veth with two queues, a stack per queue.
//!
//! The kernel rows serve at a second address the kernel owns on the bypass interface, with
//! no XDP program attached. Repetitions are interleaved: every row once per round, rounds
//! repeated, medians reported with their spread (the machine's speed drifts within minutes).
//!
//! Needs root (it builds its own lab, and removes it). Run with
//! `cargo bench --bench runtime` (`BENCH_ROUNDS=N` for N rounds, default 3; `BENCH_ONLY=text` for the
//! rows whose name contains `text`, beside `stack`). Each row reports
//! round trips per second, latency percentiles, and CPU time per round trip of the whole
//! process (the client's share is the same in every row, so differences are the server's),
//! and the ratios to `stack` and to the same program on kernel sockets.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, LabConfig};
use bypass_runtime::{Mode, Runtime, RuntimeOptions};
use bypass_stack::{Stack, StackConfig};
use hdrhistogram::Histogram;

const CONNECTIONS: usize = 100;
const PORT: u16 = 7;
const MESSAGE: usize = 64;
const WARMUP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(3);
/// The kernel rows' server address, on the bypass interface (the stack owns the lab's).
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);

/// Who serves, and how.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Server {
    Stack,
    Threads(Mode, u32),
    Tokio(Mode, bool),
    KernelThreads,
    KernelTokio,
}

impl Server {
    fn name(self) -> String {
        match self {
            Server::Stack => "stack (run to completion, 1 thread)".into(),
            Server::Threads(Mode::InThread, 1) => format!("threads, in-thread, spin {} us", spin().as_micros()),
            Server::Threads(Mode::InThread, n) => {
                format!("threads, in-thread, spin {} us, {n} stacks", spin().as_micros())
            }
            Server::Threads(Mode::Shard, n) => format!("threads, {n} shard"),
            Server::Tokio(Mode::InThread, true) => "tokio, in-thread, busy-poll".into(),
            Server::Tokio(Mode::InThread, false) => "tokio, in-thread, driver spins 50 us".into(),
            Server::Tokio(Mode::Shard, _) => "tokio, 1 shard".into(),
            Server::KernelThreads => "threads, kernel sockets".into(),
            Server::KernelTokio => "tokio, kernel sockets".into(),
        }
    }

    fn stacks(self) -> u32 {
        match self {
            Server::Threads(_, n) => n,
            _ => 1,
        }
    }

    /// The same program on kernel sockets, to compare with.
    fn kernel_twin(self) -> Option<Server> {
        match self {
            Server::Threads(..) => Some(Server::KernelThreads),
            Server::Tokio(..) => Some(Server::KernelTokio),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
struct Figures {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_rt: f64,
}

fn main() {
    if is_root() == Some(false) {
        eprintln!("cargo bench --bench runtime needs root (it builds a network lab); run it as root");
        return;
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3).max(1);
    let servers = [
        Server::Stack,
        Server::Threads(Mode::InThread, 1),
        Server::Threads(Mode::Shard, 1),
        Server::KernelThreads,
        Server::Tokio(Mode::InThread, true),
        Server::Tokio(Mode::InThread, false),
        Server::Tokio(Mode::Shard, false),
        Server::KernelTokio,
        Server::Threads(Mode::InThread, 2),
    ];
    // `BENCH_ONLY=text` measures the rows whose name contains it (and `stack`, the reference).
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let servers: Vec<Server> =
        servers.into_iter().filter(|s| *s == Server::Stack || s.name().contains(only.as_str())).collect();
    let mut samples: Vec<Vec<Figures>> = vec![Vec::new(); servers.len()];
    for round in 0..rounds {
        // Rotate the order, so a slow phase of the machine does not land on one row.
        for k in 0..servers.len() {
            let i = (k + round) % servers.len();
            let figures = run(servers[i]);
            eprintln!(
                "round {round}: {:<32} {:>9.0} rt/s  p50 {:>6.1} us  p99 {:>7.1} us  {:>5.1} us CPU/rt",
                servers[i].name(),
                figures.per_sec,
                figures.p50_us,
                figures.p99_us,
                figures.cpu_us_per_rt
            );
            samples[i].push(figures);
        }
    }
    let median = |v: &[Figures], f: fn(&Figures) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        (x[x.len() / 2], x[0], x[x.len() - 1])
    };
    let row = |s: Server| &samples[servers.iter().position(|&x| x == s).expect("measured")];
    let (base, ..) = median(row(Server::Stack), |f| f.per_sec);
    let (base_cpu, ..) = median(row(Server::Stack), |f| f.cpu_us_per_rt);
    println!(
        "\n| server, {CONNECTIONS} connections, {MESSAGE} B echo, {rounds} rounds | round trips/s (min-max) | vs stack | vs kernel, same program | p50 us | p99 us | CPU us per round trip | vs stack |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (server, runs) in servers.iter().zip(&samples) {
        let (rate, lo, hi) = median(runs, |f| f.per_sec);
        let twin = server
            .kernel_twin()
            .filter(|k| servers.contains(k))
            .map_or(String::new(), |k| format!("{:.2}x", rate / median(row(k), |f| f.per_sec).0));
        let (cpu, ..) = median(runs, |f| f.cpu_us_per_rt);
        println!(
            "| {} | {rate:.0} ({lo:.0}-{hi:.0}) | {:.2}x | {twin} | {:.1} | {:.1} | {cpu:.1} | {:.2}x |",
            server.name(),
            rate / base,
            median(runs, |f| f.p50_us).0,
            median(runs, |f| f.p99_us).0,
            cpu / base_cpu
        );
    }
}

/// Return whether we run as root, from /proc (no unsafe, no libc).
fn is_root() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status.lines().find(|l| l.starts_with("Uid:"))?.split_whitespace().nth(1)?.to_string();
    Some(uid == "0")
}

/// Return the process's CPU time (user + system, every thread), from /proc/self/stat.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    // After the command name: state is not numeric, so utime and stime are fields 11 and 12
    // of the numeric ones (14 and 15 of the whole line); clock ticks of 10 ms.
    let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn run(server: Server) -> Figures {
    let lab = Lab::with_config(LabConfig { queues: server.stacks(), ..LabConfig::new("bench-rt") }).expect("lab");
    let stop = Arc::new(AtomicBool::new(false));
    let addr = match server {
        Server::KernelThreads | Server::KernelTokio => {
            let cidr = format!("{KERNEL_IP}/{}", lab.prefix_len);
            lab.ip_bypass(&["addr", "add", &cidr, "dev", &lab.bypass_if]).expect("a kernel address on the bypass side");
            SocketAddr::from((KERNEL_IP, PORT))
        }
        _ => SocketAddr::from((lab.bypass_ip, PORT)),
    };
    let config = StackConfig::new(lab.bypass_ip, lab.prefix_len, [5; 16]);
    let devices = || {
        let queues: Vec<u32> = (0..server.stacks()).collect();
        lab.in_bypass(|| XdpDevice::open_queues(XdpConfig::new(&lab.bypass_if, lab.bypass_ip), &queues))
            .expect("AF_XDP")
    };
    let mut runtime = None;
    let mut thread = None;
    match server {
        Server::Stack => {
            let device = devices().remove(0);
            let stop = Arc::clone(&stop);
            thread = Some(std::thread::spawn(move || run_to_completion(device, config, &stop)));
        }
        Server::Threads(mode, _) => {
            let options = RuntimeOptions { mode, spin: spin(), ..RuntimeOptions::default() };
            let rt = Runtime::start(devices(), config, options).expect("runtime");
            let listener = rt.listen(PORT).expect("listen");
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(s) = stream else { return };
                    std::thread::spawn(move || echo_blocking(s));
                }
            });
            runtime = Some(rt);
        }
        Server::KernelThreads => {
            let listener = lab.in_bypass(|| std::net::TcpListener::bind(addr)).expect("kernel listener");
            listener.set_nonblocking(true).unwrap();
            let stop = Arc::clone(&stop);
            thread = Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            s.set_nodelay(true).unwrap();
                            std::thread::spawn(move || echo_blocking(s));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }));
        }
        Server::Tokio(mode, busy_poll) => {
            let options = RuntimeOptions { mode, busy_poll, ..RuntimeOptions::default() };
            let rt = Runtime::start(devices(), config, options).expect("runtime");
            let listener = bypass_runtime::tokio::TcpListener::bind(&rt, PORT).expect("listen");
            let stop = Arc::clone(&stop);
            thread = Some(std::thread::spawn(move || {
                tokio_server(&stop, async move {
                    loop {
                        let (s, _) = listener.accept().await?;
                        s.set_nodelay(true)?;
                        tokio::spawn(echo_async(s));
                    }
                })
            }));
            runtime = Some(rt);
        }
        Server::KernelTokio => {
            let std_listener = lab.in_bypass(|| std::net::TcpListener::bind(addr)).expect("kernel listener");
            std_listener.set_nonblocking(true).unwrap();
            let stop = Arc::clone(&stop);
            thread = Some(std::thread::spawn(move || {
                tokio_server(&stop, async move {
                    let listener = tokio::net::TcpListener::from_std(std_listener)?;
                    loop {
                        let (s, _) = listener.accept().await?;
                        s.set_nodelay(true)?;
                        tokio::spawn(echo_async(s));
                    }
                })
            }));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let figures = lab.in_peer(|| client(addr));
    stop.store(true, Ordering::SeqCst);
    if let Some(t) = thread {
        t.join().expect("server");
    }
    drop(runtime);
    figures
}

/// The in-thread threads' spin: `BENCH_SPIN_US`, else the runtime's default.
fn spin() -> Duration {
    let us = std::env::var("BENCH_SPIN_US").ok().and_then(|v| v.parse().ok());
    us.map_or(RuntimeOptions::default().spin, Duration::from_micros)
}

/// Echo a connection with blocking reads and writes until end of stream.
fn echo_blocking(mut s: impl Read + Write) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        if s.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// Echo a connection through `.await` until end of stream.
async fn echo_async(mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf).await {
        if s.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Run `accept_loop` on a tokio runtime of one worker until `stop`.
fn tokio_server(
    stop: &AtomicBool,
    accept_loop: impl std::future::Future<Output = std::io::Result<()>> + Send + 'static,
) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("tokio");
    rt.spawn(accept_loop);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    rt.shutdown_timeout(Duration::from_millis(200));
}

/// The run-to-completion server: one thread, spinning, echoing every connection.
fn run_to_completion(device: XdpDevice, config: StackConfig, stop: &AtomicBool) {
    let mut stack = Stack::new(device, config);
    let listener = stack.listen(PORT).expect("listen");
    let mut conns = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        stack.poll_rx().expect("rx");
        while let Some(id) = stack.accept(listener) {
            conns.push(id);
        }
        for &id in &conns {
            // One request in flight per connection: what is read always fits back.
            if let Ok(n @ 1..) = stack.read(id, &mut buf) {
                let _ = stack.write(id, &buf[..n]);
            }
        }
        stack.poll_tx().expect("tx");
    }
    stack.abort_all();
    let _ = stack.poll_tx();
}

/// The kernel client: `CONNECTIONS` non-blocking sockets, one request in flight on each,
/// served by one thread spinning over them.
fn client(addr: SocketAddr) -> Figures {
    let mut socks: Vec<(TcpStream, Instant, usize)> = (0..CONNECTIONS)
        .map(|_| {
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
            (s, Instant::now(), 0)
        })
        .collect();
    let msg = [0x42u8; MESSAGE];
    let mut buf = [0u8; MESSAGE];
    for (s, sent, _) in &mut socks {
        s.write_all(&msg).unwrap();
        *sent = Instant::now();
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let start = Instant::now();
    let mut window: Option<(Instant, Duration)> = None;
    let mut count = 0u64;
    loop {
        let now = Instant::now();
        if window.is_none() && now - start >= WARMUP {
            window = Some((now, process_cpu()));
        }
        if let Some((from, _)) = window
            && now - from >= MEASURE
        {
            break;
        }
        for (s, sent, got) in &mut socks {
            match s.read(&mut buf[..MESSAGE - *got]) {
                Ok(0) => panic!("the server closed a connection"),
                Ok(n) => {
                    *got += n;
                    if *got == MESSAGE {
                        *got = 0;
                        let now = Instant::now();
                        if window.is_some() {
                            count += 1;
                            hist.saturating_record((now - *sent).as_nanos() as u64);
                        }
                        s.write_all(&msg).unwrap();
                        *sent = now;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("client: {e}"),
            }
        }
    }
    let (from, cpu0) = window.expect("measured");
    let elapsed = from.elapsed();
    let cpu = process_cpu().saturating_sub(cpu0);
    Figures {
        per_sec: count as f64 / elapsed.as_secs_f64(),
        p50_us: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
        cpu_us_per_rt: cpu.as_secs_f64() * 1e6 / count.max(1) as f64,
    }
}
