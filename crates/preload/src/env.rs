//! What `bypass run` asked for (the `BYPASS_*` variables of the environment) and the
//! runtime serving it, started at the first TCP socket that needs it.
//!
//! | variable | meaning |
//! |---|---|
//! | `BYPASS_IFACE` | the interface (required) |
//! | `BYPASS_IP` | our addresses, `ADDR/PREFIX`, comma-separated (required) |
//! | `BYPASS_GATEWAY` | next hops, comma-separated |
//! | `BYPASS_BACKEND` | `xdp` (default) or `packet` |
//! | `BYPASS_QUEUES` | device queues, a stack each (default 1) |
//! | `BYPASS_BUSY_POLL` | `1`: a waiting call polls without end |
//! | `BYPASS_SPIN_USEC` | microseconds a waiting call polls before it sleeps (default 0) |
//! | `BYPASS_PCAP` | record every frame to this pcapng file |
//! | `BYPASS_SOFTWARE_CHECKSUMS` | `1`: the stack computes every TCP checksum (by default the kernel and the NIC complete them where AF_XDP TX metadata lets it) |
//! | `BYPASS_SYN_RATE`, `BYPASS_SYN_BURST` | the XDP program's SYN shield: SYNs per second and burst per queue |
//! | `BYPASS_SYN_LANE` | entries of the SYN lane, a receive ring of bare SYNs |
//! | `BYPASS_XDP_SYN_COOKIES` | `1`: the XDP program answers the SYNs beyond the shield with the stacks' cookies |
//! | `BYPASS_LOG` | log filter, as `RUST_LOG` (`debug` shows every intercepted call) |

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bypass_io::netdev;
use bypass_io::xdp::{SynShield, XdpConfig, XdpDevice};
use bypass_io::{PacketConfig, PacketDevice};
use bypass_runtime::{CaptureFactory, Mode, Runtime, RuntimeOptions};
use bypass_stack::StackConfig;

/// The stacks and what decides which sockets are theirs.
pub struct Env {
    pub runtime: Runtime,
    /// Our addresses and their prefixes.
    pub addrs: Vec<(IpAddr, u8)>,
    /// A next hop exists for IPv4, for IPv6.
    pub gateway4: bool,
    pub gateway6: bool,
    pub spin: Duration,
    pub busy_poll: bool,
}

impl Env {
    /// Return whether `ip` is one of our addresses.
    pub fn owns(&self, ip: IpAddr) -> bool {
        self.addrs.iter().any(|&(a, _)| a == unmap(ip))
    }

    /// Return whether the stack reaches `ip`: on one of our subnets, or past a gateway of
    /// its family (loopback, link-local and multicast never).
    pub fn routes(&self, ip: IpAddr) -> bool {
        let ip = unmap(ip);
        if ip.is_loopback() || ip.is_multicast() || ip.is_unspecified() {
            return false;
        }
        if self.addrs.iter().any(|&(a, p)| same_subnet(a, ip, p)) {
            return true;
        }
        match ip {
            IpAddr::V4(_) => self.gateway4,
            IpAddr::V6(v6) => self.gateway6 && (v6.segments()[0] & 0xffc0) != 0xfe80,
        }
    }
}

/// Return `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) turned into IPv4.
pub fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Return `addr` with its IP unmapped (see [`unmap`]).
pub fn unmap_addr(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(unmap(addr.ip()), addr.port())
}

fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// Whether `bypass run` set this process up (else every call passes through).
pub fn configured() -> bool {
    static SET: OnceLock<bool> = OnceLock::new();
    *SET.get_or_init(|| std::env::var_os("BYPASS_IFACE").is_some())
}

static ENV: OnceLock<Result<&'static Env, String>> = OnceLock::new();
/// The runtime, to stop at exit (the captures flushed, the XDP program detached).
static STOP: Mutex<Option<&'static Env>> = Mutex::new(None);
/// This process is a child forked after the stack started: the stack is the parent's.
pub static FORKED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this library itself calls functions it intercepts (starting the
    /// runtime): they pass straight through.
    pub static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Return the stacks, starting them at the first call. The error is logged once, and
/// every call that needs the stack fails after it.
pub fn get() -> Result<&'static Env, String> {
    ENV.get_or_init(|| {
        INSIDE.with(|i| i.set(true));
        let started = start();
        INSIDE.with(|i| i.set(false));
        match started {
            Ok(env) => {
                let env: &'static Env = Box::leak(Box::new(env));
                *STOP.lock().unwrap_or_else(|e| e.into_inner()) = Some(env);
                Ok(env)
            }
            Err(e) => {
                log::error!("bypass: {e}; TCP sockets on our addresses fail from now on");
                Err(e)
            }
        }
    })
    .clone()
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn start() -> Result<Env, String> {
    let iface = var("BYPASS_IFACE").ok_or("BYPASS_IFACE is not set")?;
    let mut addrs = Vec::new();
    for cidr in var("BYPASS_IP").ok_or("BYPASS_IP is not set")?.split(',') {
        let (a, p) = cidr.split_once('/').ok_or(format!("BYPASS_IP: `{cidr}` is not ADDR/PREFIX"))?;
        let a: IpAddr = a.parse().map_err(|_| format!("BYPASS_IP: `{a}` is not an address"))?;
        let p: u8 = p.parse().map_err(|_| format!("BYPASS_IP: `{p}` is not a prefix length"))?;
        addrs.push((a, p));
    }
    let gateways: Vec<IpAddr> = match var("BYPASS_GATEWAY") {
        Some(g) => g
            .split(',')
            .map(|a| a.parse().map_err(|_| format!("BYPASS_GATEWAY: `{a}` is not an address")))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let queues: u32 = var("BYPASS_QUEUES")
        .map_or(Ok(1), |q| q.parse().map_err(|_| format!("BYPASS_QUEUES: `{q}` is not a count")))?;
    let busy_poll = var("BYPASS_BUSY_POLL").is_some_and(|v| v == "1");
    let spin = var("BYPASS_SPIN_USEC")
        .map_or(Ok(0), |u| u.parse::<u64>().map_err(|_| format!("BYPASS_SPIN_USEC: `{u}` is not microseconds")))?;
    let count = |name: &str| {
        var(name).map(|v| v.parse::<u32>().map_err(|_| format!("{name}: `{v}` is not a count"))).transpose()
    };
    let (syn_rate, syn_burst, syn_lane) =
        (count("BYPASS_SYN_RATE")?, count("BYPASS_SYN_BURST")?, count("BYPASS_SYN_LANE")?);
    let xdp_syn_cookies = var("BYPASS_XDP_SYN_COOKIES").is_some_and(|v| v == "1");
    let (first, first_prefix) = *addrs.first().ok_or("BYPASS_IP names no address")?;
    let mut config = StackConfig::new(first, first_prefix, secret());
    for &(a, p) in &addrs[1..] {
        config = config.with_address(a, p);
    }
    for &gw in &gateways {
        match gw {
            IpAddr::V4(a) => config.gateway = Some(a),
            IpAddr::V6(a) => config.gateway6 = Some(a),
        }
    }
    let capture = var("BYPASS_PCAP").map(|path| {
        let iface = iface.clone();
        Arc::new(move |shard: usize, epoch| {
            let file = if shard == 0 { path.clone() } else { format!("{path}.q{shard}") };
            let capture =
                bypass_device::PcapNgCapture::create(std::path::Path::new(&file), &iface, "bypass run", epoch)?;
            Ok(Box::new(capture) as Box<dyn bypass_device::Capture>)
        }) as CaptureFactory
    });
    // What `bypass run --syn-rate ... --xdp-syn-cookies` asked for, as `bypass echo` sets it.
    let syn_shield = syn_rate.filter(|&r| r > 0).map(|rate| {
        let shield = SynShield::new(rate);
        SynShield { burst: syn_burst.unwrap_or(shield.burst), ..shield }
    });
    let syn_cookies = if xdp_syn_cookies {
        let mtu = netdev::mtu(&iface).map_err(|e| format!("cannot read the MTU of {iface}: {e}"))?;
        config.syn_cookies_from_device = true;
        Some(config.syn_cookie_answer(mtu as usize))
    } else {
        None
    };
    let options = RuntimeOptions {
        mode: Mode::InThread,
        busy_poll,
        spin: Duration::from_micros(spin),
        // Busy-polling, the program is back in a wait (which polls) within microseconds:
        // what one turn of its event loop writes leaves with one kick of the device.
        defer_transmit: busy_poll,
        capture,
        // The XDP program counts cookie periods on CLOCK_MONOTONIC.
        syn_cookie_clock: xdp_syn_cookies.then_some(bypass_io::xdp::monotonic_now as fn() -> Duration),
        ..RuntimeOptions::default()
    };
    // The helper threads the runtime starts inherit a mask blocking every signal, so that
    // the program's handlers run on the program's threads (see `signals`).
    let runtime = crate::signals::blocked(|| match var("BYPASS_BACKEND").as_deref() {
        Some("packet") => {
            let device = PacketDevice::open_with(&iface, &PacketConfig::default()).map_err(|e| e.to_string())?;
            Ok(Runtime::start(vec![device], config, options))
        }
        None | Some("xdp") => {
            let mut xdp = XdpConfig::new(&iface, first);
            xdp.addrs = addrs.iter().map(|&(a, _)| a).collect();
            xdp.busy_poll = busy_poll;
            // As `bypass echo`: the kernel (and a NIC that offloads them) completes our TCP
            // checksums where it can; the stack reads the device's `tx_offload`.
            xdp.tx_checksum_offload = var("BYPASS_SOFTWARE_CHECKSUMS").is_none_or(|v| v != "1");
            xdp.syn_shield = syn_shield;
            xdp.syn_lane = syn_lane;
            xdp.syn_cookies = syn_cookies;
            let queues: Vec<u32> = (0..queues).collect();
            let devices = XdpDevice::open_queues(xdp, &queues).map_err(|e| e.to_string())?;
            Ok(Runtime::start(devices, config, options))
        }
        Some(other) => Err(format!("BYPASS_BACKEND: `{other}` is not xdp or packet")),
    })?
    .map_err(|e| format!("cannot start the stack: {e}"))?;
    // A program's signal handler waits until its thread lets go of the stack (`signals`).
    bypass_runtime::on_release(crate::signals::run_deferred);
    crate::real::at_exit(stop_at_exit);
    log::info!(
        "bypass: serving TCP on {} over {iface}",
        addrs.iter().map(|(a, p)| format!("{a}/{p}")).collect::<Vec<_>>().join(", ")
    );
    Ok(Env {
        runtime,
        gateway4: gateways.iter().any(IpAddr::is_ipv4),
        gateway6: gateways.iter().any(IpAddr::is_ipv6),
        addrs,
        spin: Duration::from_micros(spin),
        busy_poll,
    })
}

/// Stop the stacks as the process exits: connections reset, captures finished, the XDP
/// program detached.
extern "C" fn stop_at_exit() {
    if FORKED.load(Ordering::SeqCst) {
        return;
    }
    if let Some(env) = STOP.lock().unwrap_or_else(|e| e.into_inner()).take() {
        INSIDE.with(|i| i.set(true));
        crate::table::forget_all();
        if let Err(e) = env.runtime.halt() {
            log::warn!("bypass: stopping the stack at exit: {e}");
        }
    }
}

/// Return a random secret for SYN cookies and initial sequence numbers.
fn secret() -> [u8; 16] {
    let mut s = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut s);
    }
    s
}
