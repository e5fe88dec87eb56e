//! Linux interop under loss and reordering: a kernel TCP client with its defaults (SACK,
//! timestamps, CUBIC, RACK-TLP) echoes 64 MiB each way, byte for byte, through our stack
//! behind an impairment layer ([`bypass_device::Impaired`]: 1% loss, 1% of frames held
//! back by three frames, 0.1% duplicated, in both directions of our device).
//!
//! The lab has no netem (LAB.md), so the impairment sits in process, in front of our device:
//! frames the kernel sends us are impaired as our device receives them, frames we send as
//! they go into the device. The kernel peer sees a lossy, reordering path; so does our stack.
//!
//! Four runs, one per test, each printing the kernel peer's retransmission counters (`nstat`
//! deltas) next to our connection's [`bypass_tcp::Stats`] and what the impairment did:
//!
//! - `impaired_echo_xdp`: the proof, over AF_XDP;
//! - `impaired_echo_packet`: the same over AF_PACKET;
//! - `unimpaired_echo_xdp`: our stack without impairment (the wrapper with zero
//!   probabilities), the baseline of what the kernel retransmits against us on a clean path;
//! - `kernel_echo_behind_the_same_impairment`: the reference. The kernel client talks to a
//!   *kernel* echo server in a third namespace, through a userspace bridge in the bypass
//!   namespace (AF_XDP on `bx0` wrapped in the same `Impaired`, with the same seed, and
//!   AF_XDP on a second veth to the far kernel). The client's counters there are what the
//!   same kernel retransmits over the same impairment against a Linux receiver, and the far
//!   kernel's counters what Linux retransmits where our stack does.
//!
//! The kernel sockets run CUBIC, Linux's default congestion control, set per socket (this
//! machine's own default is BBR; see [`congestion_control`]); `BYPASS_IMPAIRED_CC=bbr` runs
//! them with another. The kernel peer keeps tail-loss probes on here (unlike
//! `common::create_lab`, which turns them off so that lossless runs can demand zero
//! retransmissions): these runs expect retransmissions, the probes are part of the kernel's
//! default loss recovery (RFC 8985) that our stack must interoperate with, and they are
//! counted (`TcpExtTCPLossProbes`).
//!
//! Reading the figures: the impairment's `lost` counts frames of every kind (pure ACKs too),
//! so retransmissions per frame lost a little under 1 are what a perfect sender achieves;
//! the excess is spurious, mostly after reordering, and shows as D-SACKs on the other side
//! (`TcpExtTCPDSACKOldSent` of the peer answers our needless resends).
//!
//! Needs root (skips with a message otherwise; fails under `CI=true`). The tests take a lock
//! and run one at a time. `BYPASS_TEST_CAPTURE=DIR` records headers on both veth ends
//! (`tcpdump` on the peer's interface shows the kernel's view) and our stack's own annotated
//! view (`DIR/<test>-stack.pcapng`: frames after the receive impairment and before the send
//! one, each with a comment saying what it meant to the stack, drops included);
//! `BYPASS_IMPAIRED_MIB=N` changes the size echoed each way (64 by default).

mod common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use bypass_device::{Device, ImpairStats, Impaired, Impairment, PcapNgCapture};
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, LabConfig, in_namespace, lab_available};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::{Event, State};
use common::{Backend, Capture, PORT, PeerChanges, data, echo_with_reader, peer_connect, peer_nstat, read_to_eof};

/// How long a run may take before it counts as stalled (it takes a few seconds here).
const DEADLINE: Duration = Duration::from_secs(120);

/// The seed of every impairment: the same frames (by position) are lost in every run.
const SEED: u64 = 0x1055;

/// The tests share the CPU and the namespaces' names: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The impairment of each direction: 1% loss, 1% of frames held back until three later frames
/// have passed (or 16 calls have gone by), 0.1% duplicated.
fn lossy() -> Impairment {
    Impairment::NONE.with_loss(0.01).with_reorder(0.01, 3, 16).with_duplicate(0.001)
}

/// Return the bytes echoed each way: 64 MiB, or `BYPASS_IMPAIRED_MIB`.
fn len() -> usize {
    let mib = std::env::var("BYPASS_IMPAIRED_MIB").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(64);
    mib << 20
}

/// The kernel counters that say how a sender recovered from loss, in the order printed
/// (`TcpOutSegs` leaves retransmissions out, as RFC 1213's tcpOutSegs does).
const RECOVERY_COUNTERS: &[&str] = &[
    "TcpRetransSegs",
    "TcpExtTCPLostRetransmit",
    "TcpExtTCPFastRetrans",
    "TcpExtTCPSackRecovery",
    "TcpExtTCPTimeouts",
    "TcpExtTCPLossProbes",
    "TcpExtTCPLossProbeRecovery",
    "TcpExtTCPDSACKRecv",
    "TcpExtTCPDSACKUndo",
    "TcpExtTCPSpuriousRTOs",
    "TcpExtTCPSACKReorder",
    "TcpExtTCPTSReorder",
    "TcpExtTCPDSACKOldSent",
    "TcpExtTCPDSACKOfoSent",
    "TcpExtTCPOFOQueue",
    "TcpOutSegs",
    "TcpInSegs",
];

/// Format the recovery counters of `changes`, `name=delta`.
fn recovery(changes: &PeerChanges) -> String {
    RECOVERY_COUNTERS.iter().map(|&name| format!("{name}={}", changes.get(name))).collect::<Vec<_>>().join(" ")
}

/// Return the SNMP counters of namespace `ns` (`nstat -azs`, as `common::peer_nstat`).
fn ns_nstat(ns: &str) -> BTreeMap<String, u64> {
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", ns, "nstat"]);
    common::nstat(cmd)
}

/// Return how the counters of `ns` moved since `before`.
fn ns_changes(ns: &str, before: &BTreeMap<String, u64>) -> PeerChanges {
    common::nstat_changes(ns_nstat(ns), before)
}

/// Return the TCP settings of the peer namespace that matter here, as `name=value`.
fn peer_tcp_settings(lab: &Lab) -> String {
    lab.in_peer(|| {
        ["tcp_sack", "tcp_timestamps", "tcp_congestion_control", "tcp_early_retrans", "tcp_recovery", "tcp_dsack"]
            .iter()
            .map(|name| {
                let v = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap_or_else(|e| e.to_string());
                format!("{name}={}", v.trim())
            })
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// Return `ss -tin` of the peer's connections to `to` (the kernel's view: options, CUBIC,
/// retransmissions, reordering seen).
fn peer_ss(lab: &Lab, to: SocketAddr) -> String {
    let out = lab.peer_cmd("ss").args(["-tin", "dst", &to.to_string()]).output().expect("run ss in the peer namespace");
    String::from_utf8_lossy(&out.stdout).lines().skip(1).map(str::trim).collect::<Vec<_>>().join(" | ")
}

// ---------------------------------------------------------------------------------------------
// Our stack as the echo server
// ---------------------------------------------------------------------------------------------

/// What our side of a run saw.
struct ServerRun {
    /// The connection's statistics at the end (CLOSED, the handle still held).
    stats: bypass_tcp::Stats,
    counters: String,
    resets_out: u64,
    device: Vec<(&'static str, u64)>,
    impair: ImpairStats,
    events: Vec<Event>,
    echoed: usize,
    /// SACK (RFC 2018) and timestamps (RFC 7323) negotiated on the connection.
    sack: bool,
    timestamps: bool,
}

/// Serve one echo connection on `device` with our stack: echo until the client's FIN, then
/// close our side and run until the connection is CLOSED (LAST-ACK acknowledged). With
/// `capture`, record what our stack received (after the impairment) and sent (before it),
/// annotated, to that pcapng file. `ready` hears when the port is open. `Err` says how it
/// went wrong.
fn serve_echo<D: Device>(
    device: Impaired<D>,
    ip: Ipv4Addr,
    capture: Option<PathBuf>,
    ready: mpsc::Sender<()>,
) -> Result<ServerRun, String> {
    let mut secret = [0u8; 16];
    common::Rng::new(0x1055).fill(&mut secret);
    let mut stack = Stack::new(device, StackConfig::new(ip, 24, secret));
    if let Some(path) = capture {
        let info = stack.device().info().clone();
        let file = PcapNgCapture::create(&path, &info.name, &format!("{}, impaired", info.mode), stack.epoch())
            .map_err(|e| e.to_string())?;
        stack.set_capture(Box::new(file));
    }
    let listener = stack.listen(PORT).map_err(|e| format!("listen: {e}"))?;
    ready.send(()).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + DEADLINE;
    let id = loop {
        if let Some(id) = stack.accept(listener) {
            break id;
        }
        if Instant::now() > deadline {
            return Err(format!("no connection within {DEADLINE:?}: {}", stack.counters()));
        }
        stack.poll_wait(Some(Duration::from_millis(10))).map_err(|e| format!("poll: {e}"))?;
    };
    let conn = stack.interface().connection(id).ok_or("the accepted connection vanished")?;
    let (sack, timestamps) = (conn.sack_enabled(), conn.timestamps_enabled());
    let mut buf = vec![0u8; 256 << 10];
    let (mut start, mut end) = (0, 0);
    let (mut echoed, mut eof, mut shut) = (0usize, false, false);
    let mut events = Vec::new();
    loop {
        if Instant::now() > deadline {
            return Err(stalled(&stack, id, echoed, &format!("our stack stalled (not done within {DEADLINE:?})")));
        }
        // Echo: write what is pending, and read more only once it is all out.
        loop {
            while start < end {
                match stack.write(id, &buf[start..end]) {
                    Ok(n) => start += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(stalled(&stack, id, echoed, &format!("write: {e}"))),
                }
            }
            if start < end || eof {
                break;
            }
            match stack.read(id, &mut buf) {
                Ok(0) => eof = true,
                Ok(n) => {
                    (start, end) = (0, n);
                    echoed += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(stalled(&stack, id, echoed, &format!("read: {e}"))),
            }
        }
        if eof && start == end && !shut {
            stack.shutdown(id);
            shut = true;
        }
        while let Some((from, event)) = stack.poll_event() {
            if from == id {
                events.push(event);
                if matches!(event, Event::Reset | Event::TimedOut | Event::Unreachable) {
                    return Err(stalled(&stack, id, echoed, &format!("our connection ended with {event:?}")));
                }
            }
        }
        if shut && stack.state(id) == State::Closed {
            break;
        }
        stack
            .poll_wait(Some(Duration::from_millis(1)))
            .map_err(|e| stalled(&stack, id, echoed, &format!("poll: {e}")))?;
    }
    let stats = stack.tcp_stats(id).ok_or("the connection vanished before we released it")?;
    stack.close(id);
    for _ in 0..10 {
        stack.poll().map_err(|e| format!("poll: {e}"))?;
    }
    let impair = stack.device().stats();
    let device = stack.device_mut().device_counters();
    Ok(ServerRun {
        stats,
        counters: stack.counters().to_string(),
        resets_out: stack.counters().tcp_resets_out,
        device,
        impair,
        events,
        echoed,
        sack,
        timestamps,
    })
}

/// Describe where a run went wrong, with everything our side knows.
fn stalled<D: Device>(stack: &Stack<Impaired<D>>, id: bypass_stack::SocketId, echoed: usize, what: &str) -> String {
    format!(
        "{what}: echoed {echoed} bytes, state {:?}, our stats {:?}; impairment {:?}; stack {}",
        stack.state(id),
        stack.tcp_stats(id),
        stack.device().stats(),
        stack.counters()
    )
}

/// What the kernel client saw.
struct ClientRun {
    elapsed: Duration,
    ss: String,
}

/// Connect from the peer to `server`, echo `message` (every byte checked), half-close and
/// read to EOF.
fn kernel_client(lab: &Lab, server: SocketAddr, message: &[u8]) -> Result<ClientRun, String> {
    let stream = peer_connect(lab, server);
    set_congestion_control(&stream);
    let start = Instant::now();
    echo_with_reader(&stream, message, DEADLINE)?;
    let elapsed = start.elapsed();
    let ss = peer_ss(lab, server);
    stream.shutdown(Shutdown::Write).map_err(|e| format!("half-close: {e}"))?;
    let rest = read_to_eof(&stream, Duration::from_secs(30)).map_err(|e| format!("EOF after the echo: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the echo", rest.len()));
    }
    Ok(ClientRun { elapsed, ss })
}

/// Return a lab with the kernel peer's defaults left alone (tail-loss probes included; see
/// the module docs), or `None` to skip.
fn lab(test: &str) -> Option<Lab> {
    if !lab_available(test) {
        return None;
    }
    common::init_log();
    Some(Lab::with_config(LabConfig::new(test)).expect("create the lab"))
}

/// Return the kernel's congestion control for these runs: CUBIC, Linux's default
/// (`BYPASS_IMPAIRED_CC` chooses another). A new namespace inherits the host's default, which
/// on this machine is BBR, and may only choose among the host's
/// `tcp_allowed_congestion_control` (here `reno bbr`), so each kernel socket is set with
/// `TCP_CONGESTION` instead, which root may set to any the kernel has.
fn congestion_control() -> String {
    std::env::var("BYPASS_IMPAIRED_CC").unwrap_or_else(|_| "cubic".to_string())
}

/// The congestion control of the kernel echo server in the kernel-to-kernel comparison:
/// `BYPASS_IMPAIRED_SERVER_CC`, else the client's. Our stack runs CUBIC: against a BBR
/// client, `BYPASS_IMPAIRED_SERVER_CC=cubic` gives the kernel the role ours plays.
fn server_congestion_control() -> String {
    std::env::var("BYPASS_IMPAIRED_SERVER_CC").unwrap_or_else(|_| congestion_control())
}

/// Make `socket` use [`congestion_control`] (`setsockopt(TCP_CONGESTION)`, before any data).
fn set_congestion_control(socket: &impl AsRawFd) {
    common::set_congestion_control(socket, &congestion_control());
}


/// Echo `len()` bytes each way between the kernel client and our stack on `backend`,
/// impaired by `impairment` in both directions; judge and print the figures.
fn echo_through(test: &str, backend: Backend, impairment: Impairment) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lab) = lab(test) else { return };
    let _capture = Capture::start(&lab, test);
    let settings = peer_tcp_settings(&lab);
    assert!(
        settings.contains("tcp_sack=1") && settings.contains("tcp_timestamps=1"),
        "the kernel peer is meant to run with its defaults, SACK and timestamps on: {settings}"
    );
    let len = len();
    let message = data(0x1055_0000 ^ len as u64, len);
    let server = SocketAddr::V4(SocketAddrV4::new(lab.bypass_ip, PORT));
    let before = peer_nstat(&lab);
    let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
    let capture =
        std::env::var_os("BYPASS_TEST_CAPTURE").map(|dir| PathBuf::from(dir).join(format!("{test}-stack.pcapng")));
    let (ours, client) = std::thread::scope(|s| {
        let (ready_tx, ready) = mpsc::channel();
        let lab = &lab;
        let ours = s.spawn(move || {
            lab.in_bypass(move || match backend {
                Backend::Xdp => {
                    let device = XdpDevice::open(XdpConfig::new(&iface, ip)).expect("open AF_XDP on the bypass side");
                    serve_echo(Impaired::new(device, impairment, impairment, SEED), ip, capture, ready_tx)
                }
                Backend::Packet => {
                    let device = PacketDevice::open(&iface).expect("open AF_PACKET on the bypass side");
                    serve_echo(Impaired::new(device, impairment, impairment, SEED), ip, capture, ready_tx)
                }
            })
        });
        let client = match ready.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => kernel_client(lab, server, &message),
            Err(_) => Err("our server did not start".to_string()),
        };
        (ours.join().expect("our server thread"), client)
    });
    std::thread::sleep(Duration::from_millis(100));
    let peer = common::peer_changes(&lab, &before);
    let hint = "(a stall, reset or corruption here is a bug in our TCP under loss: rerun with \
                BYPASS_TEST_CAPTURE=/tmp/impaired RUST_LOG=bypass_tcp=debug to capture it; \
                /tmp/impaired/<test>-stack.pcapng is our stack's annotated view)";
    let ours = ours.unwrap_or_else(|e| panic!("{test}: our side failed: {e}; kernel peer: {peer} {hint}"));
    let client = client.unwrap_or_else(|e| {
        panic!("{test}: the kernel client failed: {e}; our stats {:?}; kernel peer: {peer} {hint}", ours.stats)
    });
    let links = common::link_drops(&lab);
    report(test, backend, impairment, len, &client, &ours, &peer, &settings);
    eprintln!("  below TCP (frames no impairment chose to lose): {links}");

    assert_eq!(ours.echoed, len, "we echoed {} of {len} bytes", ours.echoed);
    let resets = peer.get("TcpEstabResets") + peer.get("TcpOutRsts");
    assert_eq!(resets, 0, "{test}: the kernel peer saw or sent resets: {peer} {hint}");
    assert_eq!(ours.resets_out, 0, "{test}: our stack sent resets: {}", ours.counters);
    assert_eq!(ours.stats.resets_for_lost_data, 0, "{:?}", ours.stats);
    // The serving loop ran until CLOSED; through LAST-ACK, not by a reset or a timeout.
    assert!(ours.events.contains(&Event::Closed), "our connection did not end with Closed: {:?}", ours.events);
    assert!(ours.sack && ours.timestamps, "SACK {} and timestamps {} on our connection", ours.sack, ours.timestamps);
    let cc = congestion_control();
    assert!(client.ss.contains(&format!(" {cc} ")), "the kernel peer does not run {cc}: {}", client.ss);
    if impairment.is_none() {
        assert_eq!(ours.impair.rx.lost + ours.impair.tx.lost, 0);
    } else {
        // Each direction carried at least the 64 MiB, about 46 000 full segments.
        let (rx, tx) = (ours.impair.rx, ours.impair.tx);
        assert!(rx.lost > 100 && tx.lost > 100, "too few frames lost to prove anything: {rx:?} {tx:?}");
        assert!(rx.reordered > 100 && tx.reordered > 100, "too few frames reordered: {rx:?} {tx:?}");
        assert!(ours.stats.retransmits > 0 && peer.get("TcpRetransSegs") > 0, "nobody retransmitted");
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    test: &str,
    backend: Backend,
    impairment: Impairment,
    len: usize,
    client: &ClientRun,
    ours: &ServerRun,
    peer: &PeerChanges,
    settings: &str,
) {
    let secs = client.elapsed.as_secs_f64();
    let mbit = len as f64 * 8.0 / secs / 1e6;
    let s = &ours.stats;
    let (rx, tx) = (ours.impair.rx, ours.impair.tx);
    eprintln!(
        "{test}: {} MiB each way over {backend:?} in {secs:.2} s ({mbit:.0} Mbit/s each way), impairment {impairment:?}",
        len >> 20
    );
    eprintln!(
        "  kernel peer namespace: {settings}; its socket runs {}; negotiated SACK {} timestamps {}",
        congestion_control(),
        ours.sack,
        ours.timestamps
    );
    eprintln!("  kernel peer socket at the end of the echo: {}", client.ss);
    eprintln!("  kernel peer nstat: {}", recovery(peer));
    eprintln!(
        "  our connection: retransmits={} fast_retransmits(recoveries)={} timeouts={} loss_probes={} dup_acks={} \
         segs_out={} segs_in={} segs_dropped={} srtt={:?} rto={:?} cwnd={} ssthresh={}",
        s.retransmits,
        s.fast_retransmits,
        s.timeouts,
        s.loss_probes,
        s.dup_acks,
        s.segs_out,
        s.segs_in,
        s.segs_dropped,
        s.srtt,
        s.rto,
        s.cwnd,
        s.ssthresh
    );
    eprintln!("  impairment rx (kernel -> us): {rx:?}");
    eprintln!("  impairment tx (us -> kernel): {tx:?}");
    eprintln!(
        "  segments we dropped beyond the impairment's copies: {} (mostly data the kernel resent although \
         we had it; the kernel received {} D-SACKs)",
        s.segs_dropped.saturating_sub(rx.duplicated),
        peer.get("TcpExtTCPDSACKRecv")
    );
    if rx.lost > 0 && tx.lost > 0 {
        eprintln!(
            "  retransmissions per frame lost: kernel {:.2} (of {} lost toward us), ours {:.2} (of {} lost toward the kernel)",
            peer.get("TcpRetransSegs") as f64 / rx.lost as f64,
            rx.lost,
            s.retransmits as f64 / tx.lost as f64,
            tx.lost
        );
    }
    let device: Vec<String> =
        ours.device.iter().filter(|(n, _)| !n.starts_with("impair.")).map(|(n, v)| format!("{n}={v}")).collect();
    eprintln!(
        "  device: {}; stack: {}",
        device.join(" "),
        ours.counters.split_whitespace().collect::<Vec<_>>().join(" ")
    );
}

#[test]
fn impaired_echo_xdp() {
    echo_through("impxdp", Backend::Xdp, lossy());
}

#[test]
fn impaired_echo_packet() {
    echo_through("imppacket", Backend::Packet, lossy());
}

#[test]
fn unimpaired_echo_xdp() {
    echo_through("unimpxdp", Backend::Xdp, Impairment::NONE);
}

// ---------------------------------------------------------------------------------------------
// The reference: a kernel echo server behind the same impairment
// ---------------------------------------------------------------------------------------------

/// A third namespace with a kernel at our address, joined to the bypass namespace by a veth
/// pair (`cy0` there, `cx0` here); deleted on drop.
struct FarKernel {
    ns: String,
}

impl FarKernel {
    /// The interface on the bypass side.
    const NEAR_IF: &str = "cy0";
    /// The far kernel's interface.
    const FAR_IF: &str = "cx0";

    fn create(lab: &Lab) -> FarKernel {
        let ns = format!("{}c", lab.bypass_ns.trim_end_matches('a'));
        let far = FarKernel { ns };
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip").args(args).output().expect("run ip");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["netns", "add", &far.ns]);
        #[rustfmt::skip]
        ip(&[
            "-n", &lab.bypass_ns, "link", "add", Self::NEAR_IF, "type", "veth",
            "peer", "name", Self::FAR_IF, "address", "02:00:00:77:00:03", "netns", &far.ns,
        ]);
        ip(&["-n", &lab.bypass_ns, "link", "set", Self::NEAR_IF, "up"]);
        ip(&["-n", &far.ns, "link", "set", "lo", "up"]);
        ip(&["-n", &far.ns, "addr", "add", &format!("{}/{}", lab.bypass_ip, lab.prefix_len), "dev", Self::FAR_IF]);
        ip(&["-n", &far.ns, "link", "set", Self::FAR_IF, "up"]);
        in_namespace(&far.ns, || {
            // As the lab does for the peer: MTU-sized frames with full checksums, which is what
            // AF_XDP on the other end must get; and no IPv6 chatter.
            bypass_io::netdev::segmentation_offloads_off(Self::FAR_IF).expect("offloads off on cx0");
            std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1").expect("disable IPv6");
        })
        .expect("enter the far namespace");
        far
    }
}

impl Drop for FarKernel {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// What the bridge did.
struct BridgeRun {
    impair: ImpairStats,
    /// Frames dropped because the outgoing device had no free buffer.
    no_buffer: u64,
}

/// Forward frames between `near` (the peer's side, impaired) and `far` until `stop`.
fn bridge(mut near: Impaired<XdpDevice>, mut far: XdpDevice, stop: &AtomicBool) -> std::io::Result<BridgeRun> {
    /// Move one batch from `from` to `to`; return how many frames moved.
    fn forward(from: &mut dyn Device, to: &mut dyn Device, no_buffer: &mut u64) -> std::io::Result<usize> {
        let mut error = None;
        let n = from.recv(64, &mut |frame| {
            let mut copy = |buf: &mut [u8]| {
                buf[..frame.len()].copy_from_slice(frame);
                frame.len()
            };
            let sent = match to.send(&mut copy) {
                Ok(false) => to.flush().and_then(|()| to.send(&mut copy)),
                other => other,
            };
            match sent {
                Ok(true) => {}
                Ok(false) => *no_buffer += 1,
                Err(e) => error = Some(e),
            }
        })?;
        to.flush()?;
        error.map_or(Ok(n), Err)
    }
    let mut no_buffer = 0;
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let moved = forward(&mut near, &mut far, &mut no_buffer)? + forward(&mut far, &mut near, &mut no_buffer)?;
        near.flush()?;
        if moved > 0 {
            idle = 0;
        } else {
            idle += 1;
            if idle < 64 {
                std::thread::yield_now();
            } else {
                near.wait(Some(Duration::from_micros(100)))?;
                far.wait(Some(Duration::from_micros(100)))?;
            }
        }
    }
    Ok(BridgeRun { impair: near.stats(), no_buffer })
}

/// A kernel echo server for one connection on `listener`: echo until EOF, then close.
fn kernel_echo(listener: TcpListener) -> Result<usize, String> {
    let (mut conn, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    common::set_congestion_control(&conn, &server_congestion_control());
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    conn.set_write_timeout(Some(DEADLINE)).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let mut echoed = 0;
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return conn.shutdown(Shutdown::Write).map(|()| echoed).map_err(|e| e.to_string()),
            Ok(n) => {
                conn.write_all(&buf[..n]).map_err(|e| format!("far kernel write after {echoed} bytes: {e}"))?;
                echoed += n;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("far kernel read after {echoed} bytes: {e}")),
        }
    }
}

#[test]
fn kernel_echo_behind_the_same_impairment() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let test = "impkernel";
    let Some(lab) = lab(test) else { return };
    let far = FarKernel::create(&lab);
    let _capture = Capture::start(&lab, test);
    let settings = peer_tcp_settings(&lab);
    let len = len();
    let message = data(0x1055_0000 ^ len as u64, len);
    let server = SocketAddr::V4(SocketAddrV4::new(lab.bypass_ip, PORT));
    let listener = in_namespace(&far.ns, || TcpListener::bind(server)).expect("enter").expect("bind in the far ns");
    let (before_peer, before_far) = (peer_nstat(&lab), ns_nstat(&far.ns));
    let stop = AtomicBool::new(false);
    let (bridged, echoed, client) = std::thread::scope(|s| {
        let far_server = s.spawn(move || kernel_echo(listener));
        let (ready_tx, ready) = mpsc::channel();
        let (lab, stop) = (&lab, &stop);
        let bridge_thread = s.spawn(move || {
            lab.in_bypass(move || {
                let near = XdpDevice::open(XdpConfig::new(&lab.bypass_if, lab.bypass_ip)).expect("AF_XDP on bx0");
                let far_dev = XdpDevice::open(XdpConfig::new(FarKernel::NEAR_IF, lab.peer_ip)).expect("AF_XDP on cy0");
                ready_tx.send(()).unwrap();
                bridge(Impaired::new(near, lossy(), lossy(), SEED), far_dev, stop)
            })
        });
        let client = match ready.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => kernel_client(lab, server, &message),
            Err(_) => Err("the bridge did not start".to_string()),
        };
        // Let the last ACKs of the close through before the bridge goes.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        let bridged = bridge_thread.join().expect("bridge thread").expect("bridge");
        (bridged, far_server.join().expect("far kernel thread"), client)
    });
    let peer = common::peer_changes(&lab, &before_peer);
    let far_changes = ns_changes(&far.ns, &before_far);
    let client = client.unwrap_or_else(|e| panic!("{test}: the kernel client failed: {e}; peer: {peer}"));
    let echoed = echoed.unwrap_or_else(|e| panic!("{test}: the far kernel failed: {e}"));
    let secs = client.elapsed.as_secs_f64();
    let (rx, tx) = (bridged.impair.rx, bridged.impair.tx);
    eprintln!(
        "{test}: {} MiB each way, kernel to kernel through the bridge, in {secs:.2} s ({:.0} Mbit/s each way)",
        len >> 20,
        len as f64 * 8.0 / secs / 1e6
    );
    eprintln!(
        "  kernel peer namespace: {settings}; the client runs {}, the echo server {}",
        congestion_control(),
        server_congestion_control()
    );
    eprintln!("  kernel peer socket at the end of the echo: {}", client.ss);
    eprintln!("  kernel peer nstat: {}", recovery(&peer));
    eprintln!("  far kernel (where our stack sits in the other runs) nstat: {}", recovery(&far_changes));
    eprintln!("  impairment rx (peer -> far): {rx:?}");
    eprintln!("  impairment tx (far -> peer): {tx:?}");
    eprintln!("  bridge frames dropped for want of a buffer: {}", bridged.no_buffer);
    if rx.lost > 0 && tx.lost > 0 {
        eprintln!(
            "  retransmissions per frame lost: kernel peer {:.2} (of {}), far kernel {:.2} (of {})",
            peer.get("TcpRetransSegs") as f64 / rx.lost as f64,
            rx.lost,
            far_changes.get("TcpRetransSegs") as f64 / tx.lost as f64,
            tx.lost
        );
    }
    assert_eq!(echoed, len, "the far kernel echoed {echoed} of {len} bytes");
    let resets = peer.get("TcpEstabResets") + peer.get("TcpOutRsts");
    assert_eq!(resets, 0, "kernel against kernel, the peer saw or sent resets: {peer}");
    assert!(rx.lost > 100 && tx.lost > 100, "too few frames lost to compare: {rx:?} {tx:?}");
}
