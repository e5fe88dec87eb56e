//! The SYN-flood figure: what a flood of SYNs does to a connection already established, and
//! to clients that connect during it, on the kernel and on our stack with and without the
//! SYN shield of its XDP program (`--syn-rate`, docs/design.md, "The SYN shield").
//!
//! Each server in turn serves 64-byte echo (RFC 862) in the stack's namespace:
//! - **kernel**: a kernel TCP echo server on the kernel's address of bx0, a thread per
//!   connection, with the kernel's SYN cookies (`tcp_syncookies` = 1, as it ships);
//! - **ours**: our stack over AF_XDP, waiting on the socket when idle (`bypass echo`'s default);
//! - **ours, shielded**: the same, with the XDP program shedding SYNs beyond [`SHIELD`];
//! - **ours, SYN lane**: no shield, the XDP program steering bare SYNs to a receive ring of
//!   their own ([`XdpConfig::syn_lane`], [`LANE`] entries), which the stack reads a few at a
//!   time after its own ring: the flood fills the lane, not the established connection's ring,
//!   and a new client's SYN has the odds of what the stack answers over the flood's rate;
//! - **ours, shielded, with the SYN lane**: both;
//! - **ours, every SYN shed**: a shield of one SYN a second, so that the stack sees none of the
//!   flood: what is left is what the flood costs the veth and the XDP program, the floor of any
//!   shield in XDP on this lab (a veth with an XDP program takes every frame through one ring,
//!   the client's behind the flood's; new clients cannot connect there, by design).
//!
//! A kernel client in the peer namespace keeps one connection in request/response, 64 bytes
//! at a time, for a calm phase and then for a flood phase. In both phases a second client
//! opens a new connection every [`NEW_EVERY`] (attempts of [`ATTEMPT`]; given up after
//! [`GIVE_UP`]), echoes 64 bytes and closes. In the flood phase
//! [`bypass_lab::syn_flood`] sends bare SYNs from a spoofed address of the subnet out of
//! the peer's interface, unpaced, as fast as one thread can.
//!
//! Where it runs: the flood's thread has the last CPU to itself, standing in for the
//! machines a flood comes from; everything else (server, clients) is kept on the other CPUs.
//! On a veth the receiving side's XDP program and the kernel's TCP receive run in the softirq
//! of the sending CPU, so the flood's own CPU also pays what the shield drops and what the
//! kernel's SYN cookies cost: a real NIC would charge the server's machine for both. What
//! reaches our stack's socket is paid by its thread.
//!
//! What "no frame of an established connection dropped" rests on: the client's kernel
//! retransmitted nothing (`tcpi_total_retrans`), and for ours, the AF_XDP socket dropped
//! nothing for a full receive ring or an empty fill ring (`XDP_STATISTICS`).

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::netdev;
use bypass_io::xdp::{PassProgram, SynShield, XdpConfig, XdpDevice, monotonic_now};
use bypass_lab::syn_flood::{FloodConfig, FloodReport, SynFlood};
use bypass_lab::testlab::{Lab, pin_to_cpu};
use bypass_stack::{Stack, StackConfig};
use hdrhistogram::Histogram;

use crate::echo::EchoServer;

/// The name `--only` and `--workload` know the flood figure by.
pub const NAME: &str = "flood";

/// The shield of the shielded row: 10,000 SYNs a second per queue, a burst of 1,000 (what
/// `tests/syn_flood.rs` runs: the stack answers that many SYNs with its cookies with time to
/// spare, and the burst is a quarter of the receive ring).
pub const SHIELD: SynShield = SynShield { rate: 10_000, burst: 1_000 };

/// The SYN lane's ring in the rows that have one: 256 entries, `bypass echo --syn-lane`'s
/// default.
pub const LANE: u32 = 256;

/// The shield of the shielded row: [`SHIELD`], or `BYPASS_DEMO_SYN_RATE` (`RATE` SYNs a
/// second with a burst of a tenth of a second's worth, or `RATE/BURST`), to measure others.
fn shield() -> SynShield {
    let Ok(v) = std::env::var("BYPASS_DEMO_SYN_RATE") else { return SHIELD };
    let (rate, burst) = v.split_once('/').map_or((v.as_str(), None), |(r, b)| (r, Some(b)));
    match (rate.trim().parse::<u32>(), burst.map(|b| b.trim().parse::<u32>())) {
        (Ok(rate), None) => SynShield::new(rate),
        (Ok(rate), Some(Ok(burst))) => SynShield { rate, burst },
        _ => SHIELD,
    }
}

/// How often the second client opens a new connection.
const NEW_EVERY: Duration = Duration::from_millis(50);
/// How long it waits for one SYN to be answered before it sends another (a new connect).
const ATTEMPT: Duration = Duration::from_millis(200);
/// How long a new connection may take, attempts together, before it counts as failed.
const GIVE_UP: Duration = Duration::from_secs(3);
/// The longest the established connection waits for an echo before the row fails: past six
/// retransmissions of one segment by the client's kernel (12.6 s of backed-off timeouts).
const STALL_LIMIT: Duration = Duration::from_secs(20);

/// The servers, in table order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Server {
    /// Kernel TCP, SYN cookies as shipped.
    Kernel,
    /// Our stack over AF_XDP, no shield.
    Ours,
    /// Our stack over AF_XDP, with [`SHIELD`].
    Shielded,
    /// Our stack over AF_XDP with the SYN lane, no shield.
    Laned,
    /// Our stack over AF_XDP with [`SHIELD`] and the SYN lane.
    ShieldedLaned,
    /// Our stack over AF_XDP with [`SHIELD`], the SYNs beyond it answered with SYN cookies by
    /// the XDP program itself ([`XdpConfig::syn_cookies`]).
    ShieldedCookies,
    /// Our stack over AF_XDP with a shield that lets one SYN a second through: every SYN of
    /// the flood is dropped in the XDP program, and what is left of the flood's cost is the
    /// veth's and the program's, the floor of any shield in XDP here.
    ShedAll,
}

impl Server {
    const ALL: [Server; 7] = [
        Server::Kernel,
        Server::Ours,
        Server::Shielded,
        Server::Laned,
        Server::ShieldedLaned,
        Server::ShieldedCookies,
        Server::ShedAll,
    ];

    fn label(self) -> String {
        match self {
            Server::Kernel => "kernel TCP, SYN cookies".into(),
            Server::Ours => "ours/AF_XDP, SYN cookies, no shield".into(),
            Server::Shielded => {
                let s = shield();
                format!("ours/AF_XDP, SYN cookies, shield {} SYN/s, burst {}", s.rate, s.burst)
            }
            Server::Laned => format!("ours/AF_XDP, SYN cookies, SYN lane of {LANE}"),
            Server::ShieldedLaned => {
                let s = shield();
                format!("ours/AF_XDP, SYN cookies, shield {} SYN/s, burst {}, SYN lane of {LANE}", s.rate, s.burst)
            }
            Server::ShieldedCookies => {
                let s = shield();
                format!("ours/AF_XDP, shield {} SYN/s, burst {}, SYN cookies in XDP beyond it", s.rate, s.burst)
            }
            Server::ShedAll => "ours/AF_XDP, every SYN shed in XDP (1 SYN/s): the floor of a shield".into(),
        }
    }

    fn key(self) -> &'static str {
        match self {
            Server::Kernel => "kernel",
            Server::Ours => "ours",
            Server::Shielded => "ours-shielded",
            Server::Laned => "ours-lane",
            Server::ShieldedLaned => "ours-shielded-lane",
            Server::ShieldedCookies => "ours-shielded-xdp-cookies",
            Server::ShedAll => "ours-shed-all",
        }
    }
}

/// One phase's figures.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// Round trips of the established connection, and their p50 and p99 in microseconds.
    pub round_trips: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Segments the client's kernel retransmitted on the established connection.
    pub retransmits: u64,
    /// New connections completed, and tried (a connection is tried until [`GIVE_UP`]).
    pub new_completed: u64,
    pub new_tried: u64,
    /// Median time a new connection took to complete, attempts together, in milliseconds.
    pub connect_p50_ms: f64,
    /// Server-side counters over the phase: frames the AF_XDP socket dropped (receive ring
    /// full, fill ring empty: ours only), SYNs shed, SYN cookies sent.
    pub socket_drops: Option<u64>,
    pub syn_shed: Option<u64>,
    pub syn_cookies: u64,
    /// The flood, in the flood phase.
    pub flood: Option<FloodReport>,
}

/// One server's repetitions: (calm, flood) per repetition.
#[derive(Clone, Debug)]
pub struct FloodRow {
    pub server: Server,
    pub runs: Vec<(Phase, Phase)>,
    pub failure: Option<String>,
}

impl FloodRow {
    /// Return the median over repetitions of `f`.
    fn median(&self, f: impl Fn(&(Phase, Phase)) -> f64) -> Option<f64> {
        let mut v: Vec<f64> = self.runs.iter().map(f).filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    }

    /// Return the range over repetitions of `f`.
    fn range(&self, f: impl Fn(&(Phase, Phase)) -> f64) -> Option<(f64, f64)> {
        let v: Vec<f64> = self.runs.iter().map(f).filter(|x| x.is_finite()).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (!v.is_empty()).then_some((lo, hi))
    }
}

/// The section: a row per server, or why there is none.
#[derive(Clone, Debug, Default)]
pub struct FloodSection {
    pub rows: Vec<FloodRow>,
    pub duration: Duration,
    /// The CPU the flood had to itself, if the machine has more than one.
    pub flood_cpu: Option<usize>,
    pub failure: Option<String>,
}

/// Measure every server `runs` times, each phase `duration` long, on ports from `*port`.
pub fn measure(lab: &Lab, kernel_ip: Ipv4Addr, runs: usize, duration: Duration, port: &mut u16) -> FloodSection {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let flood_cpu = (cpus > 1).then_some(cpus - 1);
    let mut rows: Vec<FloodRow> =
        Server::ALL.iter().map(|&server| FloodRow { server, runs: Vec::new(), failure: None }).collect();
    for rep in 0..runs {
        // Rotate the order, so a slow phase of the machine lands on every server alike.
        for k in 0..rows.len() {
            let row = &mut rows[(k + rep) % Server::ALL.len()];
            if row.failure.is_some() {
                continue;
            }
            *port = port.wrapping_add(1).max(20000);
            let addr = match row.server {
                Server::Kernel => SocketAddr::new(IpAddr::V4(kernel_ip), *port),
                _ => SocketAddr::new(IpAddr::V4(lab.bypass_ip), *port),
            };
            let setup = Setup { lab, addr, duration, flood_cpu, seed: rep as u64 + 1 };
            let result = match row.server {
                Server::Kernel => kernel(&setup),
                Server::Ours => ours(&setup, None, None, false),
                Server::Shielded => ours(&setup, Some(shield()), None, false),
                Server::Laned => ours(&setup, None, Some(LANE), false),
                Server::ShieldedLaned => ours(&setup, Some(shield()), Some(LANE), false),
                Server::ShieldedCookies => ours(&setup, Some(shield()), None, true),
                Server::ShedAll => ours(&setup, Some(SynShield { rate: 1, burst: 1 }), None, false),
            };
            match result {
                Ok(run) => row.runs.push(run),
                Err(e) => row.failure = Some(e),
            }
        }
    }
    FloodSection { rows, duration, flood_cpu, failure: None }
}

/// What every server's run shares.
struct Setup<'a> {
    lab: &'a Lab,
    addr: SocketAddr,
    duration: Duration,
    flood_cpu: Option<usize>,
    seed: u64,
}

/// Keep the calling thread off the flood's CPU `flood_cpu`, if there is one (on a 2-CPU
/// machine: on CPU 0).
fn stay_off_the_flood(flood_cpu: Option<usize>) {
    if let Some(cpu) = flood_cpu.filter(|&c| c > 0) {
        // With more CPUs the others would do as well; one is enough for these threads.
        let _ = pin_to_cpu(cpu - 1);
    }
}

/// Server-side counters: SYN cookies sent, and for ours, the socket's drops and SYNs shed.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    syn_cookies: u64,
    socket_drops: Option<u64>,
    syn_shed: Option<u64>,
}

/// A way for the client to read the server thread's counters at a phase's edges.
#[derive(Default)]
struct Probe {
    asked: AtomicU64,
    answered: AtomicU64,
    counts: Mutex<Counts>,
    stop: AtomicBool,
}

impl Probe {
    /// Ask the server thread for its counters and wait for them (up to a second).
    fn read(&self) -> Result<Counts, String> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.answered.load(Ordering::SeqCst) < n {
            if Instant::now() > deadline {
                return Err("the server did not report its counters".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(*self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// In the server thread: answer a pending request with `counts()`.
    fn serve(&self, counts: impl FnOnce() -> Counts) {
        let asked = self.asked.load(Ordering::Relaxed);
        if asked != self.answered.load(Ordering::Relaxed) {
            *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = counts();
            self.answered.store(asked, Ordering::SeqCst);
        }
    }
}

/// Our stack over AF_XDP as the server, with `shield` or none, a SYN lane of `lane` entries
/// or none, and with `xdp_cookies` the SYNs beyond the shield answered by the XDP program.
fn ours(
    setup: &Setup,
    shield: Option<SynShield>,
    lane: Option<u32>,
    xdp_cookies: bool,
) -> Result<(Phase, Phase), String> {
    let lab = setup.lab;
    let mut stack_config = StackConfig::new(lab.bypass_ip, lab.prefix_len, crate::stack::secret());
    let mut config = XdpConfig { syn_shield: shield, syn_lane: lane, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) };
    // The peer's end of the veth takes the program's answers only with an XDP program of its
    // own (see `PassProgram`): for this row, the kernel clients receive through one, which
    // drops the answers to the flood's spoofed address as the network beyond a NIC would.
    let _peer_xdp = if xdp_cookies {
        let mtu = lab.in_bypass(|| netdev::mtu(&lab.bypass_if)).map_err(|e| format!("the MTU of the lab: {e}"))?;
        config.syn_cookies = Some(stack_config.syn_cookie_answer(mtu as usize));
        stack_config.syn_cookies_from_device = true;
        let pass = lab.in_peer(|| PassProgram::attach_dropping_others(&lab.peer_if, lab.peer_ip));
        Some(pass.map_err(|e| format!("an XDP program on the peer's veth: {e}"))?)
    } else {
        None
    };
    let device = lab.in_bypass(|| XdpDevice::open(config)).map_err(|e| format!("AF_XDP unavailable: {e}"))?;
    let mut stack = Stack::new(device, stack_config);
    if xdp_cookies {
        stack.align_syn_cookie_clock(monotonic_now);
    }
    let port = setup.addr.port();
    let mut echo = EchoServer::new(&mut stack, port, None).map_err(|e| format!("listen on {port}: {e}"))?;
    let probe = Arc::new(Probe::default());
    let flood_cpu = setup.flood_cpu;
    let server = std::thread::spawn({
        let probe = probe.clone();
        move || -> Result<(), String> {
            stay_off_the_flood(flood_cpu);
            let io = |e: std::io::Error| format!("our stack: packet I/O failed: {e}");
            while !probe.stop.load(Ordering::Relaxed) {
                stack.poll_wait(Some(Duration::from_millis(5))).map_err(io)?;
                echo.service(&mut stack);
                stack.poll_tx().map_err(io)?;
                probe.serve(|| {
                    let device = stack.device_mut().device_counters();
                    let get = |name: &str| device.iter().find(|(k, _)| *k == name).map(|&(_, v)| v);
                    Counts {
                        // The stack's, and the XDP program's.
                        syn_cookies: stack.counters().syn_cookies_sent + get("syn_cookies_xdp").unwrap_or(0),
                        socket_drops: Some(get("rx_dropped").unwrap_or(0) + get("rx_fill_ring_empty").unwrap_or(0)),
                        // Dropped before the stack: by the shield, and for a full SYN lane.
                        syn_shed: match (get("syn_shed"), get("syn_lane_full")) {
                            (None, None) => None,
                            (shed, full) => Some(shed.unwrap_or(0) + full.unwrap_or(0)),
                        },
                    }
                });
            }
            stack.abort_all();
            stack.poll().map_err(io)?;
            Ok(())
        }
    });
    let result = clients(setup, &probe);
    probe.stop.store(true, Ordering::Relaxed);
    let served = server.join().map_err(|_| "the server thread panicked".to_string())?;
    let run = result?;
    served?;
    Ok(run)
}

/// The kernel as the server: a thread per connection, in the stack's namespace.
fn kernel(setup: &Setup) -> Result<(Phase, Phase), String> {
    let addr = setup.addr;
    let listener =
        setup.lab.in_bypass(|| TcpListener::bind(addr)).map_err(|e| format!("kernel server on {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let probe = Arc::new(Probe::default());
    let ns = setup.lab.bypass_ns.clone();
    let flood_cpu = setup.flood_cpu;
    let server = std::thread::spawn({
        let probe = probe.clone();
        move || {
            stay_off_the_flood(flood_cpu);
            std::thread::scope(|scope| {
                while !probe.stop.load(Ordering::Relaxed) {
                    probe.serve(|| Counts { syn_cookies: syncookies_sent(&ns), ..Counts::default() });
                    match listener.accept() {
                        Ok((s, _)) => {
                            let stop = &probe.stop;
                            scope.spawn(move || {
                                stay_off_the_flood(flood_cpu);
                                echo_kernel(s, stop)
                            });
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_micros(500)),
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            })
        }
    });
    let result = clients(setup, &probe);
    probe.stop.store(true, Ordering::Relaxed);
    server.join().map_err(|_| "the kernel server thread panicked".to_string())?;
    result
}

/// Echo what `s` sends until it closes or `stop`.
fn echo_kernel(mut s: TcpStream, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// `TcpExt: SyncookiesSent` of the namespace `ns` (its `/proc/net/netstat`, read through
/// `/proc/thread-self`: `/proc/net` is the namespace of the process's first thread).
fn syncookies_sent(ns: &str) -> u64 {
    bypass_lab::testlab::in_namespace(ns, || std::fs::read_to_string("/proc/thread-self/net/netstat").ok())
        .ok()
        .flatten()
        .and_then(|text| netstat_field(&text, "TcpExt:", "SyncookiesSent"))
        .unwrap_or(0)
}

/// Return `field` of the `prefix` lines (a header line of names, then one of values).
fn netstat_field(text: &str, prefix: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The client side of one run: the established connection, calm then flooded.
fn clients(setup: &Setup, probe: &Probe) -> Result<(Phase, Phase), String> {
    let addr = setup.addr;
    let stream = setup.lab.in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_secs(2)));
    let mut stream = stream.map_err(|e| format!("connect to {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    // A round trip a flood stalls (a server without a shield loses frames) is measured, in
    // the p99, rather than taken for a failure of the row.
    stream.set_read_timeout(Some(STALL_LIMIT)).map_err(|e| e.to_string())?;
    // Warm the path (ARP, the first frames of the UMEM) before anything is measured.
    round_trips(&mut stream, Duration::from_millis(100))?;
    let calm = phase(setup, probe, &mut stream, false)?;
    let flooded = phase(setup, probe, &mut stream, true)?;
    Ok((calm, flooded))
}

/// One phase: request/response on `stream` for the setup's duration while a second client
/// opens new connections, under a flood or not.
fn phase(setup: &Setup, probe: &Probe, stream: &mut TcpStream, flooded: bool) -> Result<Phase, String> {
    let before = probe.read()?;
    let retrans_before = sys::total_retrans(stream);
    let flood = if flooded {
        let config = FloodConfig {
            cpu: setup.flood_cpu,
            seed: setup.seed,
            ..FloodConfig::new(setup.lab, ip4(setup.addr)?, setup.addr.port())
        };
        let flood = SynFlood::start(setup.lab, config)?;
        // Let the flood reach its pace (and the server's SYN queue fill) before measuring.
        std::thread::sleep(Duration::from_millis(200));
        Some(flood)
    } else {
        None
    };
    let stop_new = AtomicBool::new(false);
    let (rr, news) = std::thread::scope(|scope| {
        let news = scope.spawn(|| {
            setup.lab.in_peer(|| {
                stay_off_the_flood(setup.flood_cpu);
                new_connections(setup.addr, &stop_new)
            })
        });
        stay_off_the_flood(setup.flood_cpu);
        let rr = round_trips(stream, setup.duration);
        stop_new.store(true, Ordering::Relaxed);
        (rr, news.join())
    });
    let report = flood.map(SynFlood::stop).transpose()?;
    let after = probe.read()?;
    let hist = rr?;
    let (completed, tried, mut times) = news.map_err(|_| "the new-connection client panicked".to_string())??;
    times.sort_by(f64::total_cmp);
    let diff = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
    Ok(Phase {
        round_trips: hist.len(),
        p50_us: hist.value_at_quantile(0.50) as f64 / 1000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
        retransmits: sys::total_retrans(stream).saturating_sub(retrans_before),
        new_completed: completed,
        new_tried: tried,
        connect_p50_ms: times.get(times.len() / 2).copied().unwrap_or(f64::NAN),
        socket_drops: diff(after.socket_drops, before.socket_drops),
        syn_shed: diff(after.syn_shed, before.syn_shed),
        syn_cookies: after.syn_cookies.saturating_sub(before.syn_cookies),
        flood: report,
    })
}

fn ip4(addr: SocketAddr) -> Result<Ipv4Addr, String> {
    match addr.ip() {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(_) => Err("the flood is IPv4".into()),
    }
}

/// Echo 64 bytes at a time on `stream` for `duration`; return the round trips' histogram
/// (nanoseconds).
fn round_trips(stream: &mut TcpStream, duration: Duration) -> Result<Histogram<u64>, String> {
    let mut hist = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let message = [0x42u8; 64];
    let mut got = [0u8; 64];
    let begin = Instant::now();
    while begin.elapsed() < duration {
        let t = Instant::now();
        stream.write_all(&message).map_err(|e| format!("the established connection: write: {e}"))?;
        stream.read_exact(&mut got).map_err(|e| format!("the established connection: read the echo: {e}"))?;
        if got != message {
            return Err("the established connection echoed other bytes".into());
        }
        hist.saturating_record(t.elapsed().as_nanos() as u64);
    }
    Ok(hist)
}

/// Open a new connection every [`NEW_EVERY`] until `stop`: connect (a new attempt every
/// [`ATTEMPT`], up to [`GIVE_UP`]), echo 64 bytes, close. Return those completed, those
/// tried, and each completed one's time to connect in milliseconds.
fn new_connections(addr: SocketAddr, stop: &AtomicBool) -> Result<(u64, u64, Vec<f64>), String> {
    let (mut completed, mut tried, mut times) = (0u64, 0u64, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let begin = Instant::now();
        tried += 1;
        let stream = loop {
            match TcpStream::connect_timeout(&addr, ATTEMPT) {
                Ok(s) => break Some(s),
                Err(_) if begin.elapsed() + ATTEMPT <= GIVE_UP => {}
                Err(_) => break None,
            }
        };
        if let Some(mut s) = stream {
            let connected = begin.elapsed();
            s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
            let mut got = [0u8; 64];
            let message = [0x17u8; 64];
            if s.write_all(&message).is_ok() && s.read_exact(&mut got).is_ok() && got == message {
                completed += 1;
                times.push(connected.as_secs_f64() * 1000.0);
            }
        }
        std::thread::sleep(NEW_EVERY);
    }
    Ok((completed, tried, times))
}

/// The kernel's count of the segments it retransmitted on a socket.
#[allow(unsafe_code)]
mod sys {
    use std::os::fd::AsRawFd;

    /// Return `tcpi_total_retrans` of `socket` (Linux's `tcp_get_info`), or 0 if unreadable.
    pub fn total_retrans(socket: &impl AsRawFd) -> u64 {
        // SAFETY: `tcp_info` is plain integers, for which all zeroes is a valid value.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt(2) on a socket held open for the borrow, into a `tcp_info` we
        // own, with its size as the length.
        let rc = unsafe {
            libc::getsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len)
        };
        if rc == 0 { u64::from(info.tcpi_total_retrans) } else { 0 }
    }
}

fn fmt_range(r: Option<(f64, f64)>, digits: usize) -> String {
    match r {
        Some((lo, hi)) => format!("{lo:.digits$}-{hi:.digits$}"),
        None => "-".into(),
    }
}

/// The section in Markdown.
pub fn markdown(section: &FloodSection) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## SYN flood: an established connection and new clients, while the peer namespace floods the server with SYNs\n"
    );
    if let Some(why) = &section.failure {
        let _ = writeln!(out, "not measured: {why}");
        return out;
    }
    let _ = writeln!(
        out,
        "64 B request/response on one established kernel-client connection for {:.1} s without a flood, then {:.1} s with one (bare SYNs from a spoofed address of the subnet, unpaced, one thread{}); meanwhile a second kernel client opens a new connection every {} ms (a new SYN every {} ms, given up after {} s), echoes 64 B and closes. Servers wait on their socket when idle (no busy polling). Medians of {} repetitions, range in brackets.\n",
        section.duration.as_secs_f64(),
        section.duration.as_secs_f64(),
        match section.flood_cpu {
            Some(cpu) => format!(" kept on CPU {cpu}, the others on the rest: the flood stands in for other machines"),
            None => String::new(),
        },
        NEW_EVERY.as_millis(),
        ATTEMPT.as_millis(),
        GIVE_UP.as_secs(),
        section.rows.iter().map(|r| r.runs.len()).max().unwrap_or(0),
    );
    let _ = writeln!(
        out,
        "| server | flood, SYN/s | p99 µs calm | p99 µs flooded | p99 flooded / calm | p50 µs calm / flooded | retransmitted | dropped by the socket | SYNs shed | SYN cookies sent | new connections completed | time to connect, ms p50 |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &section.rows {
        if let Some(why) = &row.failure
            && row.runs.is_empty()
        {
            let _ = writeln!(out, "| {} | not measured: {why} |||||||||||", row.server.label());
            continue;
        }
        let m = |f: &dyn Fn(&(Phase, Phase)) -> f64| row.median(f).map_or("-".into(), |v| format!("{v:.1}"));
        let ratio = |r: &(Phase, Phase)| r.1.p99_us / r.0.p99_us;
        let sum = |f: &dyn Fn(&(Phase, Phase)) -> u64| row.runs.iter().map(f).sum::<u64>();
        let opt_sum = |f: &dyn Fn(&(Phase, Phase)) -> Option<u64>| {
            row.runs.iter().map(f).sum::<Option<u64>>().map_or("n/a".into(), |v| v.to_string())
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} ({}) | {} / {} | {} | {} | {} | {} | {} of {} | {} |",
            row.server.label(),
            row.median(|r| r.1.flood.map_or(f64::NAN, |f| f.rate())).unwrap_or(0.0),
            m(&|r| r.0.p99_us),
            m(&|r| r.1.p99_us),
            row.median(ratio).map_or("-".into(), |v| format!("{v:.2}x")),
            fmt_range(row.range(ratio), 2),
            m(&|r| r.0.p50_us),
            m(&|r| r.1.p50_us),
            sum(&|r| r.1.retransmits),
            opt_sum(&|r| r.1.socket_drops),
            opt_sum(&|r| r.1.syn_shed),
            sum(&|r| r.1.syn_cookies),
            sum(&|r| r.1.new_completed),
            sum(&|r| r.1.new_tried),
            m(&|r| r.1.connect_p50_ms),
        );
    }
    let _ = writeln!(
        out,
        "\nThe counts (retransmitted, dropped, shed, cookies, new connections) are over the flood phases of every repetition; calm phases had {} retransmissions and {} new connections fail. `retransmitted`: segments the client's kernel sent again on the established connection (`tcpi_total_retrans`): a frame of it lost on the way in. `dropped by the socket`: frames the AF_XDP socket dropped for a full receive ring or an empty fill ring (`XDP_STATISTICS`; the kernel's server has no such socket). `SYNs shed`: SYNs dropped before the stack saw them, by the shield in the XDP program, and, with a SYN lane, by the kernel for a full lane (the lane socket's `rx_ring_full`); with SYN cookies in XDP, the SYNs beyond the shield are answered by the program instead (counted in `SYN cookies sent` too), and for that row the peer's end of the veth has an XDP program of its own, without which a veth drops what the other end's program sends back; it passes what is addressed to the peer and drops the answers to the flood's spoofed address, as the network beyond a real NIC would.",
        section.rows.iter().flat_map(|r| &r.runs).map(|r| r.0.retransmits).sum::<u64>(),
        section.rows.iter().flat_map(|r| &r.runs).map(|r| r.0.new_tried - r.0.new_completed).sum::<u64>(),
    );
    for row in section.rows.iter().filter(|r| r.failure.is_some() && !r.runs.is_empty()) {
        let _ = writeln!(
            out,
            "\n{}: stopped after {} runs: {}",
            row.server.label(),
            row.runs.len(),
            row.failure.as_deref().unwrap_or("")
        );
    }
    out
}

/// The section as a JSON value.
pub fn json(section: &FloodSection, js: impl Fn(&str) -> String) -> String {
    let phase = |p: &Phase| {
        let opt = |v: Option<u64>| v.map_or("null".into(), |v| v.to_string());
        format!(
            "{{\"round_trips\": {}, \"p50_us\": {:.2}, \"p99_us\": {:.2}, \"retransmits\": {}, \"new_completed\": {}, \"new_tried\": {}, \"connect_p50_ms\": {}, \"socket_drops\": {}, \"syn_shed\": {}, \"syn_cookies\": {}, \"flood_sent\": {}, \"flood_seconds\": {}}}",
            p.round_trips,
            p.p50_us,
            p.p99_us,
            p.retransmits,
            p.new_completed,
            p.new_tried,
            if p.connect_p50_ms.is_finite() { format!("{:.3}", p.connect_p50_ms) } else { "null".into() },
            opt(p.socket_drops),
            opt(p.syn_shed),
            p.syn_cookies,
            p.flood.map_or("null".into(), |f| f.sent.to_string()),
            p.flood.map_or("null".into(), |f| format!("{:.3}", f.elapsed.as_secs_f64())),
        )
    };
    let rows: Vec<String> = section
        .rows
        .iter()
        .map(|r| {
            let runs: Vec<String> =
                r.runs.iter().map(|(c, f)| format!("{{\"calm\": {}, \"flooded\": {}}}", phase(c), phase(f))).collect();
            format!(
                "{{\"server\": {}, \"label\": {}, \"runs\": [{}], \"failure\": {}}}",
                js(r.server.key()),
                js(&r.server.label()),
                runs.join(", "),
                r.failure.as_deref().map_or("null".into(), &js)
            )
        })
        .collect();
    format!(
        "{{\"phase_seconds\": {:.3}, \"flood_cpu\": {}, \"shield_rate\": {}, \"shield_burst\": {}, \"rows\": [{}], \"failure\": {}}}",
        section.duration.as_secs_f64(),
        section.flood_cpu.map_or("null".into(), |c| c.to_string()),
        shield().rate,
        shield().burst,
        rows.join(", "),
        section.failure.as_deref().map_or("null".into(), &js)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netstat_fields_are_read_by_name() {
        let text = "TcpExt: SyncookiesSent SyncookiesRecv\nTcpExt: 17 3\nIpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(netstat_field(text, "TcpExt:", "SyncookiesSent"), Some(17));
        assert_eq!(netstat_field(text, "TcpExt:", "SyncookiesRecv"), Some(3));
        assert_eq!(netstat_field(text, "TcpExt:", "Nope"), None);
    }
}
