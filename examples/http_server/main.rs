//! An HTTP/1.1 server on tokio: the same server code (`serve.rs`) on our stack over AF_XDP or
//! AF_PACKET, or on the kernel's TCP sockets to compare, for clients nobody here wrote.
//!
//! ```sh
//! cargo build --release --bin bypass --example http_server && sudo target/release/bypass lab up
//! sudo ip netns exec bypass-a target/release/examples/http_server bx0 10.77.0.2 8080
//! #   ... from another terminal, clients in the kernel peer's namespace:
//! sudo ip netns exec bypass-b curl -s http://10.77.0.2:8080/
//! sudo ip netns exec bypass-b curl -s -o /dev/null -w '%{size_download} bytes\n' http://10.77.0.2:8080/bytes/67108864
//! sudo ip netns exec bypass-b ab -k -c 100 -n 100000 http://10.77.0.2:8080/
//! sudo ip netns exec bypass-b wrk -t2 -c100 -d5s http://10.77.0.2:8080/
//! #   the same server on the kernel's sockets, at an address the kernel owns on bx0:
//! sudo ip -n bypass-a addr add 10.77.0.3/24 dev bx0
//! sudo ip netns exec bypass-a target/release/examples/http_server bx0 10.77.0.3 8080 kernel
//! sudo ip netns exec bypass-b ab -k -c 100 -n 100000 http://10.77.0.3:8080/
//! sudo target/release/bypass lab down
//! ```
//!
//! Arguments: `INTERFACE ADDRESS[/PREFIX] PORT [packet|kernel] [--pcap FILE] [--shards N]
//! [--busy-poll | --spin-usec N] [--shard-threads]`.
//! Without a mode the server runs on our stack over AF_XDP (the prefix defaults to 24);
//! `packet` runs it over AF_PACKET; `kernel` serves from a `tokio::net::TcpListener` bound to
//! ADDRESS:PORT, the kernel's TCP, so ADDRESS must be one of the kernel's; INTERFACE is then
//! only checked to exist. `--pcap FILE` records our stack's frames for Wireshark (one file per
//! shard: FILE, then FILE with extension `q1`, `q2`, ...). `--shards N` runs N stacks on
//! queues 0 to N-1 of INTERFACE (AF_XDP only; `bypass lab up --queues N` gives bx0 N queues).
//! Our stack runs in the tokio worker's own thread (`bypass_runtime::Mode::InThread`):
//! `--busy-poll` makes the worker spin on the stack instead of sleeping when idle (the
//! lowest latency, a core), `--spin-usec N` sets how long it spins before sleeping (default
//! 50); `--shard-threads` runs each stack on a thread of its own instead
//! (`bypass_runtime::Mode::Shard`), for comparison.
//! Needs root for our stack. It prints one line saying where it serves and through what, then serves until
//! SIGINT or SIGTERM, on which it stops the stacks (detaching XDP) and exits 0.
//! `RUST_LOG=debug` shows connections that ended early.

mod serve;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bypass_device::{Device, PcapNgCapture};
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_runtime::{CaptureFactory, Runtime, RuntimeOptions};
use bypass_stack::StackConfig;

/// Which TCP serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Our stack over AF_XDP.
    Xdp,
    /// Our stack over AF_PACKET.
    Packet,
    /// The kernel's sockets.
    Kernel,
}

/// The command line.
struct Args {
    iface: String,
    ip: Ipv4Addr,
    prefix: u8,
    port: u16,
    mode: Mode,
    pcap: Option<PathBuf>,
    shards: u32,
    options: RuntimeOptions,
}

const USAGE: &str = "usage: http_server INTERFACE ADDRESS[/PREFIX] PORT [packet|kernel] [--pcap FILE] [--shards N] \
                     [--busy-poll | --spin-usec N] [--shard-threads]";

fn main() -> std::process::ExitCode {
    env_logger::init();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("http_server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args(std::env::args().skip(1).collect())?;
    if !bypass_io::netdev::exists(&args.iface) {
        return Err(format!("there is no interface `{}` in this network namespace (see `ip link`)", args.iface).into());
    }
    // Whatever ends first, a signal or the accept loop, sends its outcome here.
    let (done, outcome) = mpsc::channel::<io::Result<()>>();
    let on_signal = done.clone();
    ctrlc::set_handler(move || {
        let _ = on_signal.send(Ok(()));
    })?;
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let addr = SocketAddr::from((args.ip, args.port));

    let stack = match args.mode {
        Mode::Kernel => {
            let listener = tokio
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|e| format!("bind {addr} (a kernel address in this namespace?): {e}"))?;
            println!("http_server on http://{addr}/ via kernel TCP sockets (tokio::net), interface {}", args.iface);
            tokio.spawn(async move {
                let listener = &listener;
                let outcome = serve::accept_loop(move || async move {
                    let (stream, peer) = listener.accept().await?;
                    stream.set_nodelay(true)?;
                    Ok((stream, peer))
                })
                .await;
                let _ = done.send(outcome);
            });
            None
        }
        Mode::Packet => Some(start_stack(vec![PacketDevice::open(&args.iface)?], &args, &tokio, done)?),
        Mode::Xdp => {
            let queues: Vec<u32> = (0..args.shards).collect();
            let devices = XdpDevice::open_queues(XdpConfig::new(&args.iface, args.ip), &queues)?;
            Some(start_stack(devices, &args, &tokio, done)?)
        }
    };

    let outcome = outcome.recv().unwrap_or(Ok(()));
    // Drop every connection's task first, then stop the stacks (which detaches XDP and
    // finishes the captures).
    tokio.shutdown_timeout(Duration::from_secs(1));
    if let Some(stack) = stack {
        stack.stop().map_err(|e| format!("stop the stack: {e}"))?;
    }
    Ok(outcome?)
}

/// Start our stack on `devices` (one shard each) and its accept loop on `tokio`, which sends
/// its outcome to `done` should it end.
fn start_stack<D: Device + Send + 'static>(
    devices: Vec<D>,
    args: &Args,
    tokio: &tokio::runtime::Runtime,
    done: mpsc::Sender<io::Result<()>>,
) -> Result<Runtime, Box<dyn std::error::Error>> {
    let mode = devices[0].info().mode.clone();
    let shards = devices.len();
    let capture = args.pcap.clone().map(|path| {
        let iface = args.iface.clone();
        Arc::new(move |shard: usize, epoch| {
            let file = capture_path(&path, shard);
            let capture = PcapNgCapture::create(&file, &iface, "http_server example", epoch)?;
            Ok(Box::new(capture) as Box<dyn bypass_device::Capture>)
        }) as CaptureFactory
    });
    let config = StackConfig::new(args.ip, args.prefix, rand_secret());
    let runtime = Runtime::start(devices, config, RuntimeOptions { capture, ..args.options.clone() })?;
    let listener = bypass_runtime::tokio::TcpListener::bind(&runtime, args.port)?;
    let more =
        if shards == 1 { String::new() } else { format!(" (shard 0 of {shards}, one per queue 0-{})", shards - 1) };
    let how = match (args.options.mode, args.options.busy_poll) {
        (bypass_runtime::Mode::Shard, _) => "stack on its own thread",
        (_, true) => "stack in the tokio worker, busy-polling",
        (_, false) => "stack in the tokio worker",
    };
    println!("http_server on http://{}:{}/ via our stack ({how}), {mode}{more}", args.ip, args.port);
    tokio.spawn(async move {
        let listener = &listener;
        let outcome = serve::accept_loop(move || async move {
            let (stream, peer) = listener.accept().await?;
            stream.set_nodelay(true)?;
            Ok((stream, peer))
        })
        .await;
        let _ = done.send(outcome);
    });
    Ok(runtime)
}

fn parse_args(mut args: Vec<String>) -> Result<Args, String> {
    let pcap = take_flag(&mut args, "--pcap")?.map(PathBuf::from);
    let mut options = RuntimeOptions::default();
    if let Some(usec) = take_flag(&mut args, "--spin-usec")? {
        let usec = usec.parse::<u64>().map_err(|_| format!("--spin-usec takes microseconds, not `{usec}`"))?;
        options.driver_spin = std::time::Duration::from_micros(usec);
    }
    options.busy_poll = take_switch(&mut args, "--busy-poll");
    if take_switch(&mut args, "--shard-threads") {
        options.mode = bypass_runtime::Mode::Shard;
    }
    let shards = match take_flag(&mut args, "--shards")? {
        Some(n) => n.parse::<u32>().ok().filter(|&n| n > 0).ok_or(format!("--shards takes a count, not `{n}`"))?,
        None => 1,
    };
    let (iface, addr, port, mode) = match &args[..] {
        [iface, addr, port] => (iface, addr, port, Mode::Xdp),
        [iface, addr, port, mode] => match mode.as_str() {
            "packet" => (iface, addr, port, Mode::Packet),
            "kernel" => (iface, addr, port, Mode::Kernel),
            _ => return Err(format!("unknown mode `{mode}`: packet or kernel (AF_XDP without one)\n{USAGE}")),
        },
        _ => return Err(USAGE.into()),
    };
    let (ip, prefix) = match addr.split_once('/') {
        Some((ip, prefix)) => (ip, prefix.parse::<u8>().ok().filter(|&p| p <= 32).ok_or("bad prefix length")?),
        None => (addr.as_str(), 24),
    };
    let ip = ip.parse::<Ipv4Addr>().map_err(|e| format!("ADDRESS `{ip}`: {e}"))?;
    let port = port.parse::<u16>().map_err(|e| format!("PORT `{port}`: {e}"))?;
    if shards > 1 && mode != Mode::Xdp {
        return Err("--shards needs AF_XDP (AF_PACKET runs one stack; the kernel has its own threads)".into());
    }
    if pcap.is_some() && mode == Mode::Kernel {
        return Err("--pcap records our stack's frames; with `kernel`, capture with tcpdump on the peer".into());
    }
    Ok(Args { iface: iface.clone(), ip, prefix, port, mode, pcap, shards, options })
}

/// Remove `flag` from the arguments and return whether it was there.
fn take_switch(args: &mut Vec<String>, flag: &str) -> bool {
    let before = args.len();
    args.retain(|a| a != flag);
    args.len() < before
}

/// Remove `flag VALUE` from the arguments and return VALUE.
fn take_flag(args: &mut Vec<String>, flag: &str) -> Result<Option<String>, String> {
    let Some(at) = args.iter().position(|a| a == flag) else { return Ok(None) };
    let value = args.get(at + 1).cloned().ok_or(format!("{flag} needs a value"))?;
    args.drain(at..at + 2);
    Ok(Some(value))
}

/// Return where shard `shard` records: `path` for the first, then `path` with extension
/// `q1`, `q2`, ... (as `bypass echo --queues` names them).
fn capture_path(path: &Path, shard: usize) -> PathBuf {
    if shard == 0 { path.to_path_buf() } else { path.with_extension(format!("q{shard}")) }
}

fn rand_secret() -> [u8; 16] {
    let mut key = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key)).ok();
    key
}
