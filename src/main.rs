//! `bypass`: run the userspace TCP/IP stack on a network interface, and the lab around it.
#![deny(unsafe_code)]

mod capture;
mod extcap;
mod inspect;
mod run;
mod ss;
mod stat;

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bypass_bench::EchoServer;
use bypass_device::{Device, PcapNgCapture};
use bypass_io::xdp::{SynShield, XdpConfig, XdpDevice, XdpError, XdpMode};
use bypass_io::{PacketConfig, PacketDevice, netdev};
use bypass_lab::testlab::{Lab, LabConfig};
use bypass_stack::{Stack, StackConfig};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "bypass", version, about = "A userspace TCP/IP stack on AF_XDP, and the lab to try it in")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create or remove a two-namespace veth lab (bypass side without a kernel address).
    Lab {
        #[command(subcommand)]
        action: LabAction,
    },
    /// Serve TCP echo (RFC 862) from user space on an interface.
    Echo(EchoArgs),
    /// Run an unmodified program with its TCP sockets on our stack (a preloaded library
    /// serves them in the program's own threads, as OpenOnload's `onload` does).
    Run(run::RunArgs),
    /// Draw every TCP conversation of a pcap/pcapng capture as a ladder diagram.
    Inspect(InspectArgs),
    /// Replay one side of a captured TCP conversation against our stack and compare replies.
    Replay(ReplayArgs),
    /// Write a conformance script (packetdrill's language, see the bypass-script crate) from a
    /// TCP conversation in a capture, to commit as a regression test.
    Script(ScriptArgs),
    /// Show the connections and listeners of running stacks, as `ss -tin` shows the kernel's.
    Ss(ss::SsArgs),
    /// Show the counters of running stacks (drops by reason, retransmissions, SYN cookies,
    /// device rings), or with `-i SECS` what moved each interval, as `nstat` does.
    Stat(stat::StatArgs),
    /// Attach a live capture to a running stack and write it as pcapng (to a file, or to
    /// standard output for `tshark -r -` or `wireshark -k -i -`), until interrupted.
    Capture(capture::CaptureArgs),
    /// Wireshark's extcap protocol (Wireshark runs this): each running stack is a capture
    /// interface. `bypass extcap --install [DIR]` installs it into your extcap folder.
    #[command(disable_help_flag = true)]
    Extcap {
        /// Wireshark's arguments (--extcap-interfaces, --extcap-dlts, --extcap-config,
        /// --capture, --extcap-interface, --fifo, --extcap-capture-filter) or --install [DIR].
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Measure kernel sockets against our stack on AF_PACKET and AF_XDP, side by side, in a
    /// two-namespace lab the demo builds and removes itself (needs root).
    Demo(DemoArgs),
}

#[derive(clap::Args)]
struct DemoArgs {
    /// A short run (one repetition of 0.5 s per figure): well under a minute.
    #[arg(long)]
    quick: bool,
    /// Run only these transports, comma-separated: kernel-blocking, kernel-busy,
    /// kernel-busy-defaults, kernel-uring, kernel-uring-defaults (rows 2u, 2ud: io_uring at
    /// both ends), kernel-sendfile, kernel-splice, kernel-msg-zerocopy, stack-afpacket,
    /// stack-afpacket-both, stack-afxdp, stack-afxdp-uring (row 5u: our server, the io_uring
    /// client of row 2u), stack-afxdp-ipv6, stack-afxdp-in-place,
    /// stack-afxdp-both, smoltcp-afxdp, smoltcp-afxdp-both, kernel-busy-jumbo,
    /// stack-afxdp-jumbo, smoltcp-afxdp-jumbo (rows 2j, 5j, 6j: bulk at a 65,000-byte MTU),
    /// stack-memory (our stack at both ends over an in-memory link; run by default only when
    /// the lab is out of reach), http (the application row: the HTTP server on kernel sockets
    /// and on our stack under tokio, loaded by wrk or ab), memory (resident bytes per idle
    /// established connection of ours, with 10,000 of them, and the kernel's slab memory per
    /// connection for the same clients), programs (unmodified nginx, redis and iperf3 on
    /// kernel sockets and under `bypass run`), and the file rows (workload `file`):
    /// file-read-write, file-mmap-write, file-sendfile, file-splice, file-msg-zerocopy,
    /// file-stack-send-with, file-stack-write.
    #[arg(long, value_delimiter = ',', value_name = "TRANSPORT,...")]
    only: Vec<String>,
    /// Run only these workloads, comma-separated: rr-64B-1c, rr-1024B-1c, rr-64B-100c,
    /// bulk-up, bulk-down, connect, file (a file in the page cache served by each copy path:
    /// rows f1-f7, and results/file-copies.svg), http (the application row), memory (the
    /// memory figure).
    #[arg(long, value_delimiter = ',', value_name = "WORKLOAD,...")]
    workload: Vec<String>,
    /// Seconds per measurement (default 2, 0.5 with --quick).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Repetitions of every measurement; figures are their medians (default 3, 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: Option<u32>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Directory for results.md, results.json and the SVG charts.
    #[arg(long, value_name = "DIR", default_value = "results")]
    out: std::path::PathBuf,
}

impl From<DemoArgs> for bypass_bench::Options {
    fn from(args: DemoArgs) -> Self {
        let DemoArgs { quick, only, workload, duration, runs, json, out } = args;
        bypass_bench::Options { quick, only, workload, duration, runs, json, out }
    }
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// A pcap or pcapng capture (Ethernet, Linux cooked or raw IP).
    file: std::path::PathBuf,
    /// The role our stack plays; the other side is replayed from the capture.
    #[arg(long = "as", value_enum)]
    role: ReplayRole,
    /// Record what our stack received and sent to this pcapng file.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct ScriptArgs {
    /// A pcap or pcapng capture (Ethernet, Linux cooked or raw IP): a `--pcap` recording of
    /// ours, or tcpdump's.
    file: std::path::PathBuf,
    /// Which TCP conversation, counted from 1 in the order of their first SYN (as
    /// `bypass inspect` numbers them).
    #[arg(long, default_value_t = 1)]
    conversation: usize,
    /// The side our stack plays in the script (its segments are the `>` lines).
    #[arg(long = "as", value_enum, default_value = "server")]
    role: ReplayRole,
    /// Write the script here instead of to standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Then run it against our stack on virtual time and say whether it passes.
    #[arg(long)]
    run: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReplayRole {
    /// We answer the recorded client.
    Server,
    /// We talk to the recorded server.
    Client,
}

#[derive(Subcommand)]
enum LabAction {
    /// Create the lab and print the addresses to use.
    Up {
        /// Lab name: the namespaces are NAME-a (bypass side) and NAME-b (kernel peer).
        #[arg(long, default_value = "bypass")]
        name: String,
        /// Queues on each veth end (for multi-queue runs).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
        queues: u32,
    },
    /// Remove the lab.
    Down {
        /// Lab name given to `lab up`.
        #[arg(long, default_value = "bypass")]
        name: String,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// AF_XDP (kernel bypass).
    Xdp,
    /// AF_PACKET raw socket (fallback).
    Packet,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AttachMode {
    /// Driver (native) XDP, falling back to generic.
    Auto,
    /// Driver (native) XDP only.
    Driver,
    /// Generic (skb) XDP only.
    Generic,
}

/// Where a stack serves: what `bypass echo` and `bypass run` both take.
#[derive(clap::Args)]
struct StackArgs {
    /// Interface to serve on (the kernel must not have --ip configured on it).
    #[arg(long)]
    iface: String,
    /// Our address, ADDR or ADDR/PREFIX (default prefix 24 for IPv4, 64 for IPv6); give it
    /// twice for both families: `--ip 10.0.0.1/24 --ip fd00::1/64`.
    #[arg(long, value_parser = parse_cidr, required = true)]
    ip: Vec<(IpAddr, u8)>,
    /// Next hop for destinations outside our subnets: a router's IPv4 address, or its IPv6
    /// one (give both for both families). Without an IPv6 one, a router that sends Router
    /// Advertisements is used.
    #[arg(long, value_name = "ADDR")]
    gateway: Vec<IpAddr>,
}

#[derive(clap::Args)]
struct EchoArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// TCP port to serve.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Packet I/O backend.
    #[arg(long, value_enum, default_value_t = Backend::Xdp)]
    backend: Backend,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    xdp_mode: AttachMode,
    /// Spin on the device instead of sleeping in poll(2): lowest latency, one core busy.
    #[arg(long)]
    busy_poll: bool,
    /// Compute every TCP checksum in the stack, instead of leaving them to the kernel and
    /// the NIC (AF_XDP TX metadata, used by default where the kernel has it).
    #[arg(long)]
    software_checksums: bool,
    /// Queues to serve, one share-nothing shard (thread) per queue (AF_XDP only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    queues: u32,
    /// Close connections idle this many seconds (server-initiated close).
    #[arg(long)]
    idle_timeout: Option<f64>,
    /// Receive ring size in frames (AF_XDP fill and RX rings, AF_PACKET RX ring): frames
    /// the kernel can hand over before the stack reads them, past which it drops.
    #[arg(long, value_name = "FRAMES", default_value_t = 4096, value_parser = parse_ring)]
    rx_ring: u32,
    /// The most bytes of receive window all connections offer together, or `none`; by
    /// default half the receive ring in full-sized segments, so what peers may send at
    /// once fits the ring.
    #[arg(long, value_name = "BYTES", value_parser = parse_budget)]
    window_budget: Option<usize>,
    /// The most bytes of data all connections have in flight together, or `none`; by
    /// default a quarter of the receive ring in full-sized segments, so the peers'
    /// acknowledgments fit the ring beside what the windows let in.
    #[arg(long, value_name = "BYTES", value_parser = parse_budget)]
    flight_budget: Option<usize>,
    /// Record every frame received and sent to this pcapng file (one file per queue:
    /// FILE, FILE.q1, ...), for Wireshark.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
    #[command(flatten)]
    syn: SynArgs,
}

/// What the XDP program does with SYNs under a flood (`bypass echo` and `bypass run`).
#[derive(clap::Args)]
struct SynArgs {
    /// Shed SYNs beyond this many per second per queue in the XDP program, before they
    /// take a receive frame (AF_XDP only; `device.syn_shed` counts them). Off (0) by
    /// default: every SYN reaches the stack, whose SYN cookies answer a flood without
    /// state. Set it to what one queue should answer at most, well above the connection
    /// bursts you expect (e.g. 50000), to keep frames for established connections.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000_000))]
    syn_rate: u32,
    /// SYNs a queue lets through at once after a quiet spell (with --syn-rate; default a
    /// tenth of a second's worth of the rate).
    #[arg(long, value_name = "N", requires = "syn_rate", value_parser = clap::value_parser!(u32).range(1..))]
    syn_burst: Option<u32>,
    /// Steer bare SYNs (those --syn-rate lets through) to a receive ring of their own, of N
    /// entries per queue (AF_XDP only; a power of two from 8 to half of the receive ring,
    /// 4096 frames unless `bypass echo --rx-ring` sets it; 256 if given without N): a
    /// flood then fills that ring, never the one established
    /// connections' frames arrive in, and the stack answers a few SYNs at a time after its
    /// other frames (`device.syn_lane` counts the SYNs taken, `device.syn_lane_full` those
    /// dropped for a full lane).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "256")]
    syn_lane: Option<u32>,
    /// Answer the SYNs beyond --syn-rate with SYN cookies in the XDP program itself (sent
    /// back out of the interface, `device.syn_cookies_xdp` counts them) instead of shedding
    /// them, so that clients still connect during a flood; the stack then checks every ACK
    /// to a listener as a cookie. Their connections go without window scaling, SACK and
    /// timestamps, which such a cookie cannot carry.
    #[arg(long, requires = "syn_rate")]
    xdp_syn_cookies: bool,
}

impl SynArgs {
    /// Refuse what `backend` cannot do: everything here runs in the XDP program.
    fn check(&self, backend: Backend) -> Result<(), String> {
        if backend == Backend::Xdp {
            return Ok(());
        }
        if self.syn_rate > 0 {
            return Err("--syn-rate needs the xdp backend (the shield runs in its XDP program)".into());
        }
        if self.xdp_syn_cookies {
            return Err("--xdp-syn-cookies needs the xdp backend (the cookies are made in its XDP program)".into());
        }
        if self.syn_lane.is_some() {
            return Err("--syn-lane needs the xdp backend (the XDP program steers the SYNs)".into());
        }
        Ok(())
    }

    /// Set the shield, the lane and the cookies of `xdp`, on interface `iface`, for the
    /// stacks of `config` (which then take every ACK to a listener as a possible cookie of
    /// the program's).
    fn apply(&self, iface: &str, xdp: &mut XdpConfig, config: &mut StackConfig) -> Result<(), String> {
        xdp.syn_shield = (self.syn_rate > 0).then(|| {
            let shield = SynShield::new(self.syn_rate);
            SynShield { burst: self.syn_burst.unwrap_or(shield.burst), ..shield }
        });
        xdp.syn_lane = self.syn_lane;
        config.syn_cookies_from_device = self.xdp_syn_cookies;
        if self.xdp_syn_cookies {
            let mtu = netdev::mtu(iface).map_err(|e| format!("cannot read the MTU of {iface}: {e}"))?;
            if netdev::driver(iface).is_ok_and(|d| d == "veth") {
                eprintln!(
                    "note: {iface} is a veth: its peer takes the XDP program's SYN-ACKs only if the peer runs an XDP program of its own (see docs/lab.md)"
                );
            }
            xdp.syn_cookies = Some(config.syn_cookie_answer(mtu as usize));
        }
        Ok(())
    }
}

#[derive(clap::Args)]
struct InspectArgs {
    /// Capture to read (pcap or pcapng; Ethernet, Linux cooked or raw IP).
    file: std::path::PathBuf,
    /// Also draw the ladders, stacked, as an SVG picture in OUT.
    #[arg(long, value_name = "OUT")]
    svg: Option<std::path::PathBuf>,
    /// Show packet comments (pcapng opt_comment, as our --pcap recordings write) under each packet.
    #[arg(long)]
    comments: bool,
    /// Do not colour the output (it is coloured only on a terminal, and not with NO_COLOR set).
    #[arg(long)]
    no_color: bool,
}

fn parse_ring(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && (64..=32768).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a ring size: give a power of two from 64 to 32768")),
    }
}

fn parse_budget(s: &str) -> Result<usize, String> {
    if s == "none" {
        return Ok(usize::MAX);
    }
    s.parse::<usize>().map_err(|_| format!("`{s}` is not a number of bytes (or `none`)"))
}

fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
    let addr: IpAddr = addr.parse().map_err(|_| format!("`{addr}` is not an IPv4 or IPv6 address"))?;
    let (default, max) = if addr.is_ipv4() { (24, 32) } else { (64, 128) };
    let prefix = match prefix {
        None => default,
        Some(p) => {
            p.parse::<u8>().ok().filter(|&p| p <= max).ok_or(format!("`{p}` is not a prefix length (0-{max})"))?
        }
    };
    let bad = match addr {
        IpAddr::V4(a) => a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback(),
        IpAddr::V6(a) => {
            a.is_unspecified() || a.is_multicast() || a.is_loopback() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    if bad {
        return Err(format!("{addr} cannot be a host address here (link-local IPv6 addresses come from the MAC)"));
    }
    Ok((addr, prefix))
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // Buffers given back are memory given back (see the function's docs).
    if !bypass_io::return_large_blocks_when_freed() {
        log::debug!("mallopt(M_MMAP_THRESHOLD) refused; freed buffers may stay resident");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lab { action: LabAction::Up { name, queues } } => lab_up(&name, queues),
        Command::Lab { action: LabAction::Down { name } } => lab_down(&name),
        Command::Echo(args) => echo(args),
        Command::Run(args) => run::run(args),
        Command::Inspect(args) => inspect::run(
            &args.file,
            &inspect::Options { svg: args.svg, comments: args.comments, no_color: args.no_color },
        ),
        Command::Replay(args) => replay(args),
        Command::Script(args) => script(args),
        Command::Demo(args) => bypass_bench::run(args.into()),
        Command::Ss(args) => ss::run(args),
        Command::Stat(args) => stat::run(args),
        Command::Capture(args) => capture::run(args),
        Command::Extcap { args } => extcap::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bypass: {message}");
            ExitCode::FAILURE
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

fn lab_up(name: &str, queues: u32) -> Result<(), String> {
    if !is_root() {
        return Err("creating a lab needs root (network namespaces): run it with sudo".into());
    }
    let config = LabConfig { name: Some(name.to_string()), queues, ipv6: true, ..LabConfig::new(name) };
    let lab = Lab::with_config(config).map_err(|e| e.to_string())?;
    println!("lab `{name}` is up:");
    println!(
        "  bypass side: namespace {}, interface {} (no kernel address; the stack owns {}/{} and {}/{})",
        lab.bypass_ns, lab.bypass_if, lab.bypass_ip, lab.prefix_len, lab.bypass_ip6, lab.prefix6_len
    );
    println!(
        "  kernel peer: namespace {}, interface {}, addresses {}/{} and {}/{} (offloads off)",
        lab.peer_ns, lab.peer_if, lab.peer_ip, lab.prefix_len, lab.peer_ip6, lab.prefix6_len
    );
    println!();
    println!(
        "serve echo:   ip netns exec {} bypass echo --iface {} --ip {}/{} --ip {}/{} --port 7",
        lab.bypass_ns, lab.bypass_if, lab.bypass_ip, lab.prefix_len, lab.bypass_ip6, lab.prefix6_len
    );
    println!(
        "try it:       ip netns exec {} python3 -c 'import socket; s=socket.create_connection((\"{}\", 7)); s.sendall(b\"hello\"); print(s.recv(5))'",
        lab.peer_ns, lab.bypass_ip
    );
    println!(
        "over IPv6:    ip netns exec {} python3 -c 'import socket; s=socket.create_connection((\"{}\", 7)); s.sendall(b\"hello\"); print(s.recv(5))'",
        lab.peer_ns, lab.bypass_ip6
    );
    println!("remove it:    bypass lab down --name {name}");
    lab.keep();
    Ok(())
}

fn lab_down(name: &str) -> Result<(), String> {
    if !is_root() {
        return Err("removing a lab needs root (network namespaces): run it with sudo".into());
    }
    let lab = Lab::named(name);
    if !lab.exists() {
        lab.keep();
        return Err(format!("there is no lab named `{name}` (see `ip netns list`)"));
    }
    drop(lab);
    println!("lab `{name}` removed");
    Ok(())
}

fn echo(args: EchoArgs) -> Result<(), String> {
    check_setup("bypass echo", &args.stack)?;
    if args.queues > 1 && args.backend == Backend::Packet {
        return Err("--queues needs the xdp backend (AF_PACKET runs one shard)".into());
    }
    args.syn.check(args.backend)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }
    let mut secret = [0u8; 16];
    getrandom(&mut secret);
    let (first, first_prefix) = args.stack.ip[0];
    let mut config = StackConfig::new(first, first_prefix, secret);
    for &(ip, prefix) in &args.stack.ip[1..] {
        config = config.with_address(ip, prefix);
    }
    for &gw in &args.stack.gateway {
        match gw {
            IpAddr::V4(a) => config.gateway = Some(a),
            IpAddr::V6(a) => config.gateway6 = Some(a),
        }
    }
    config.window_budget = args.window_budget;
    config.flight_budget = args.flight_budget;
    let addrs = args.stack.ip.iter().map(|(a, p)| format!("{a}/{p}")).collect::<Vec<_>>().join(" and ");
    let idle = args.idle_timeout.map(Duration::from_secs_f64);

    let totals = match args.backend {
        Backend::Packet => {
            let packet = PacketConfig { rx_frames: args.rx_ring as usize, ..PacketConfig::default() };
            let device = PacketDevice::open_with(&args.stack.iface, &packet).map_err(|e| e.to_string())?;
            println!("serving echo on {addrs} port {} over {} ({})", args.port, args.stack.iface, device.info().mode);
            let pcap = args.pcap.clone();
            vec![serve(device, config, 0, args.port, idle, args.busy_poll, pcap.as_deref(), &stop)?]
        }
        Backend::Xdp => {
            let mut xdp = XdpConfig::new(&args.stack.iface, first);
            xdp.addrs = args.stack.ip.iter().map(|&(a, _)| a).collect();
            xdp.mode = match args.xdp_mode {
                AttachMode::Auto => XdpMode::Auto,
                AttachMode::Driver => XdpMode::Driver,
                AttachMode::Generic => XdpMode::Generic,
            };
            xdp.busy_poll = args.busy_poll;
            // The kernel completes our TCP checksums where it can (the stack reads the device's
            // `tx_offload` and writes pseudo-header sums), unless told not to.
            xdp.tx_checksum_offload = !args.software_checksums;
            xdp.fill_size = args.rx_ring;
            xdp.rx_size = args.rx_ring;
            xdp.frame_count = xdp.frame_count.max(2 * args.rx_ring);
            args.syn.apply(&args.stack.iface, &mut xdp, &mut config)?;
            let queues: Vec<u32> = (0..args.queues).collect();
            let devices = XdpDevice::open_queues(xdp, &queues).map_err(|e| xdp_error(e, &args.stack.iface))?;
            for d in &devices {
                println!("serving echo on {addrs} port {} over {} ({})", args.port, args.stack.iface, d.info().mode);
            }
            std::thread::scope(|scope| {
                let handles: Vec<_> = devices
                    .into_iter()
                    .enumerate()
                    .map(|(queue, device)| {
                        let (config, stop) = (config.clone(), &stop);
                        let pcap = args.pcap.as_ref().map(|p| capture_path(p, queue));
                        scope.spawn(move || {
                            serve(device, config, queue as u32, args.port, idle, args.busy_poll, pcap.as_deref(), stop)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("a shard panicked".into())))
                    .collect::<Result<Vec<_>, _>>()
            })?
        }
    };
    println!("stopped; counters:");
    for (i, c) in totals.iter().enumerate() {
        if totals.len() > 1 {
            println!("[queue {i}]");
        }
        print!("{c}");
    }
    Ok(())
}

/// Check what `bypass echo` and `bypass run` need before they touch the interface: root,
/// the interface, addresses the kernel does not use, gateways of our families. Each
/// failure is one sentence saying what to do.
fn check_setup(command: &str, stack: &StackArgs) -> Result<(), String> {
    let (iface, ips, gateways) = (stack.iface.as_str(), &stack.ip, &stack.gateway);
    if !is_root() {
        return Err(format!(
            "{command} needs root (CAP_NET_ADMIN and CAP_BPF for AF_XDP, CAP_NET_RAW for AF_PACKET): run it with sudo"
        ));
    }
    if !netdev::exists(iface) {
        return Err(format!("there is no interface `{iface}` in this network namespace (see `ip link`)"));
    }
    if ips.iter().filter(|(a, _)| a.is_ipv4()).count() > 1 {
        return Err("give at most one IPv4 --ip (and any number of IPv6 ones)".into());
    }
    let kernel4 = netdev::kernel_ipv4_addrs(iface).map_err(|e| format!("cannot list the addresses of {iface}: {e}"))?;
    let kernel6 =
        netdev::kernel_ipv6_addrs(iface).map_err(|e| format!("cannot list the IPv6 addresses of {iface}: {e}"))?;
    for &(ip, prefix) in ips {
        let taken = match ip {
            IpAddr::V4(a) => kernel4.contains(&a),
            IpAddr::V6(a) => kernel6.contains(&a),
        };
        if taken {
            return Err(format!(
                "the kernel already uses {ip} on {iface}: remove it (`ip addr del {ip}/{prefix} dev {iface}`) or give the stack another address"
            ));
        }
    }
    for gw in gateways {
        if !ips.iter().any(|(a, _)| a.is_ipv4() == gw.is_ipv4()) {
            return Err(format!("--gateway {gw} is of a family we have no --ip for; add an address of its family"));
        }
    }
    Ok(())
}

/// Return the capture file for `queue`: `path` itself for queue 0, `path.qN` for the others.
fn capture_path(path: &std::path::Path, queue: usize) -> std::path::PathBuf {
    if queue == 0 { path.to_path_buf() } else { path.with_extension(format!("q{queue}")) }
}

fn replay(args: ReplayArgs) -> Result<(), String> {
    use bypass_lab::replay::{self, Role};
    let file = bypass_device::read_capture(&args.file).map_err(|e| e.to_string())?;
    for skipped in &file.skipped {
        eprintln!("skipped frame {}: {}", skipped.index, skipped.reason);
    }
    let role = match args.role {
        ReplayRole::Server => Role::Server,
        ReplayRole::Client => Role::Client,
    };
    let capture: Option<Box<dyn bypass_device::Capture>> = match &args.pcap {
        Some(path) => {
            let description = "bypass replay";
            let cap =
                PcapNgCapture::create(path, "replay", description, std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
            Some(Box::new(cap))
        }
        None => None,
    };
    let report = replay::replay(&file, role, capture).map_err(|e| e.to_string())?;
    let (client, server) = report.endpoints;
    let (ours, theirs) = match role {
        Role::Server => ("server", "client"),
        Role::Client => ("client", "server"),
    };
    println!("replaying the {theirs} of {client} -> {server}; our stack plays the {ours}");
    println!("the {ours}'s segments, numbers relative to each side's ISN:");
    print!("{}", report.side_by_side());
    if report.matched() {
        println!("our replies match the recording");
        Ok(())
    } else {
        for m in &report.mismatches {
            println!("mismatch: {m}");
        }
        Err(format!("our replies differ from the recorded {ours}'s (see above)"))
    }
}

fn script(args: ScriptArgs) -> Result<(), String> {
    let side = match args.role {
        ReplayRole::Server => bypass_script::Side::Server,
        ReplayRole::Client => bypass_script::Side::Client,
    };
    let mut text =
        bypass_script::script_from_pcap_file(&args.file, args.conversation, side).map_err(|e| e.to_string())?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let name = match &args.output {
        Some(path) => {
            std::fs::write(path, &text).map_err(|e| format!("write the script to {}: {e}", path.display()))?;
            path.display().to_string()
        }
        None => {
            print!("{text}");
            args.file.display().to_string()
        }
    };
    if args.run {
        match bypass_script::run_virtual(&name, &text) {
            Ok(report) => eprintln!("ok: {} lines, {} segments of ours matched", report.lines, report.outbound),
            Err(failure) => return Err(format!("the script fails against our stack:\n{failure}")),
        }
    }
    Ok(())
}

fn xdp_error(e: XdpError, iface: &str) -> String {
    match e {
        XdpError::Unsupported { .. } => {
            format!("{e} (interface {iface}); try `--backend packet` to use AF_PACKET instead")
        }
        e => e.to_string(),
    }
}

/// Run shard `shard` until `stop`; then close connections, let the FINs go, and return the
/// counters. Its control endpoint answers `bypass ss`, `bypass stat` and `bypass capture`
/// meanwhile.
#[allow(clippy::too_many_arguments)]
fn serve<D: Device>(
    device: D,
    config: StackConfig,
    shard: u32,
    port: u16,
    idle: Option<Duration>,
    busy_poll: bool,
    pcap: Option<&std::path::Path>,
    stop: &AtomicBool,
) -> Result<String, String> {
    let device_cookies = config.syn_cookies_from_device;
    let mut stack = Stack::new(device, config);
    if device_cookies {
        // The XDP program counts cookie periods on CLOCK_MONOTONIC.
        stack.align_syn_cookie_clock(bypass_io::xdp::monotonic_now);
    }
    if let Some(path) = pcap {
        let info = stack.device().info().clone();
        let description = format!("bypass echo: {}", info.mode);
        let capture =
            PcapNgCapture::create(path, &info.name, &description, stack.epoch()).map_err(|e| e.to_string())?;
        stack.set_capture(Box::new(capture));
        println!("recording to {}", path.display());
    }
    let mut server = EchoServer::new(&mut stack, port, idle).map_err(|e| e.to_string())?;
    let mut endpoint = match bypass_control::Server::for_stack(&mut stack, shard) {
        Ok(endpoint) => Some(endpoint),
        Err(e) => {
            eprintln!("warning: {e}; serving without a control endpoint (no `bypass ss` for this stack)");
            None
        }
    };
    let io = |e: std::io::Error| format!("packet I/O failed: {e}");
    while !stop.load(Ordering::Relaxed) {
        // Receive, answer, then transmit: the echoed data carries the ACK.
        let received = stack.poll_rx().map_err(io)?;
        server.service(&mut stack);
        if let Some(endpoint) = &mut endpoint {
            endpoint.poll(&mut stack);
        }
        let sent = stack.poll_tx().map_err(io)?;
        if !busy_poll && received == 0 && sent == 0 {
            stack.wait(Some(Duration::from_millis(100))).map_err(io)?;
        }
    }
    // Shut down: FIN to every client, a moment for the close to complete, then RST the rest.
    server.shutdown(&mut stack);
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while std::time::Instant::now() < deadline && stack.interface().connection_count() > 0 {
        stack.poll_wait(Some(Duration::from_millis(10))).map_err(io)?;
        while stack.poll_event().is_some() {}
    }
    stack.abort_all();
    stack.poll().map_err(io)?;
    let mut report = stack.counters().to_string();
    for (name, value) in stack.device_mut().device_counters() {
        if value != 0 {
            report.push_str(&format!("device.{name:<17} {value}\n"));
        }
    }
    Ok(report)
}

/// Fill `buf` from the kernel's random source.
fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(buf);
    }
}
