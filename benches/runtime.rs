//! What the threaded runtime costs, measured side by side in one run: 100 kernel client
//! connections in the lab's peer namespace, each with one 64-byte request in flight, echoed
//! by our stack over AF_XDP, served
//!
//! - `stack`: by the run-to-completion API, one thread spinning on the device and serving
//!   every connection in its loop (as `bypass echo`);
//! - `threads`: by the threaded runtime, one shard thread, one blocking application thread
//!   per connection;
//! - `tokio`: by the runtime's tokio types, one shard thread and a tokio runtime of one
//!   worker, a task per connection;
//! - `threads, 2 shards`: as `threads`, on a veth with two queues and a shard per queue.
//!
//! Needs root (it builds its own lab, and removes it). Run with
//! `cargo bench --bench runtime`. Each row reports round trips per second, latency
//! percentiles, and CPU time per round trip of the whole process (the client's share is the
//! same in every row, so differences are the server's), and the ratio to `stack`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, LabConfig};
use bypass_runtime::{Runtime, RuntimeOptions};
use bypass_stack::{Stack, StackConfig};
use hdrhistogram::Histogram;

const CONNECTIONS: usize = 100;
const PORT: u16 = 7;
const MESSAGE: usize = 64;
const WARMUP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug)]
enum Server {
    Stack,
    Threads { shards: u32 },
    Tokio,
}

impl Server {
    fn name(self) -> String {
        match self {
            Server::Stack => "stack (run to completion, 1 thread)".into(),
            Server::Threads { shards: 1 } => "threads (runtime, 1 shard)".into(),
            Server::Threads { shards } => format!("threads (runtime, {shards} shards)"),
            Server::Tokio => "tokio (runtime, 1 shard, 1 worker)".into(),
        }
    }

    fn shards(self) -> u32 {
        match self {
            Server::Threads { shards } => shards,
            _ => 1,
        }
    }
}

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
    let servers = [Server::Stack, Server::Threads { shards: 1 }, Server::Tokio, Server::Threads { shards: 2 }];
    let mut rows = Vec::new();
    for server in servers {
        let figures = run(server);
        eprintln!(
            "{:<40} {:>9.0} rt/s  p50 {:>6.1} us  p99 {:>6.1} us  {:>5.1} us CPU/rt",
            server.name(),
            figures.per_sec,
            figures.p50_us,
            figures.p99_us,
            figures.cpu_us_per_rt
        );
        rows.push((server, figures));
    }
    let base = rows[0].1.per_sec;
    let base_cpu = rows[0].1.cpu_us_per_rt;
    println!(
        "\n| server, {CONNECTIONS} connections, {MESSAGE} B echo | round trips/s | vs stack | p50 us | p99 us | CPU us per round trip | vs stack |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (server, f) in &rows {
        println!(
            "| {} | {:.0} | {:.2}x | {:.1} | {:.1} | {:.1} | {:.2}x |",
            server.name(),
            f.per_sec,
            f.per_sec / base,
            f.p50_us,
            f.p99_us,
            f.cpu_us_per_rt,
            f.cpu_us_per_rt / base_cpu
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
    let lab = Lab::with_config(LabConfig { queues: server.shards(), ..LabConfig::new("bench-rt") }).expect("lab");
    let stop = Arc::new(AtomicBool::new(false));
    let config = StackConfig::new(lab.bypass_ip, lab.prefix_len, [5; 16]);
    let queues: Vec<u32> = (0..server.shards()).collect();
    let mut devices = lab
        .in_bypass(|| XdpDevice::open_queues(XdpConfig::new(&lab.bypass_if, lab.bypass_ip), &queues))
        .expect("AF_XDP");
    let (runtime, thread) = match server {
        Server::Stack => {
            let device = devices.remove(0);
            let stop = Arc::clone(&stop);
            (None, Some(std::thread::spawn(move || run_to_completion(device, config, &stop))))
        }
        Server::Threads { .. } => {
            let runtime = Runtime::start(devices, config, RuntimeOptions::default()).expect("runtime");
            let listener = runtime.listen(PORT).expect("listen");
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut s) = stream else { return };
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        while let Ok(n @ 1..) = s.read(&mut buf) {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            });
            (Some(runtime), None)
        }
        Server::Tokio => {
            let runtime = Runtime::start(devices, config, RuntimeOptions::default()).expect("runtime");
            let listener = bypass_runtime::tokio::TcpListener::bind(&runtime, PORT).expect("listen");
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().expect("tokio");
                rt.block_on(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    while let Ok((mut s, _)) = listener.accept().await {
                        tokio::spawn(async move {
                            let mut buf = [0u8; 4096];
                            while let Ok(n @ 1..) = s.read(&mut buf).await {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                });
            });
            (Some(runtime), None)
        }
    };
    std::thread::sleep(Duration::from_millis(100));
    let addr = SocketAddr::from((lab.bypass_ip, PORT));
    let figures = lab.in_peer(|| client(addr));
    stop.store(true, Ordering::SeqCst);
    if let Some(t) = thread {
        t.join().expect("server");
    }
    drop(runtime);
    figures
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
                            hist.record((now - *sent).as_nanos() as u64).unwrap();
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
