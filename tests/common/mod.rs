//! Shared helpers for the tests that run `bypass` against real Linux kernel peers.
//!
//! Every test builds its own lab ([`Lab`]: two namespaces and a veth pair) and deletes it on
//! every exit path (the lab's `Drop`); the echo server runs as a child process under an
//! [`EchoServer`] guard that stops it with SIGINT (and collects the counters it prints) or,
//! if the test ends early, kills it. Kernel sockets are made inside a namespace with
//! `lab.in_peer(|| ..)` and then used from any thread: a socket stays in the namespace it
//! was created in.
//!
//! Frames that no kernel would send (bad checksums, fragments, random bytes, floods) are
//! built by hand here and injected with an AF_PACKET [`PacketDevice`] opened on the peer's
//! interface.
#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_lab::testlab::Lab;

/// The echo port the tests serve on.
pub const PORT: u16 = 7;

/// Initialise logging for a test (`RUST_LOG=debug` shows the stack's drop reasons).
pub fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// Which packet I/O backend the echo server uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP.
    Xdp,
    /// AF_PACKET.
    Packet,
}

impl Backend {
    /// Return the `--backend` value.
    pub fn arg(self) -> &'static str {
        match self {
            Backend::Xdp => "xdp",
            Backend::Packet => "packet",
        }
    }
}

/// Create a lab for `test`, holding the lock of [`serial`] (see [`peer_without_tail_loss_probes`] for the one change made to
/// the kernel peer).
pub fn create_lab(test: &str, queues: u32) -> TestLab {
    create_lab_mtu(test, queues, bypass_lab::testlab::LabConfig::new(test).mtu)
}

/// [`create_lab`] with both veth pairs at `mtu`.
pub fn create_lab_mtu(test: &str, queues: u32, mtu: u32) -> TestLab {
    let serial = serial();
    let config = bypass_lab::testlab::LabConfig { queues, mtu, ..bypass_lab::testlab::LabConfig::new(test) };
    let lab = Lab::with_config(config).expect("create the lab");
    peer_without_tail_loss_probes(&lab);
    TestLab { lab, _serial: serial }
}

/// Turn off tail loss probes (RFC 8985 TLP) in the peer namespace (`net.ipv4.tcp_early_retrans
/// = 0`; per namespace).
///
/// With a round-trip time of ~100 us the kernel's probe timeout is ~2 ms (2 * SRTT + 2 ms):
/// any 2 ms stall of the receiving process makes the kernel retransmit its last segment. On a
/// two-vCPU machine shared with other work such stalls are common, for a kernel receiver too
/// (the `control_kernel_server` test shows probes kernel against kernel), so probes would make
/// the "no retransmission" checks measure the scheduler, not the stack. Without them, the
/// kernel retransmits only on evidence of loss (duplicate ACKs, SACK, RACK) or on its
/// retransmission timeout (200 ms at least): exactly what those checks are about.
///
/// Set `BYPASS_TEST_KEEP_TLP=1` to leave them on (and see the probes).
pub fn peer_without_tail_loss_probes(lab: &Lab) {
    if std::env::var_os("BYPASS_TEST_KEEP_TLP").is_some() {
        return;
    }
    lab.in_peer(|| std::fs::write("/proc/sys/net/ipv4/tcp_early_retrans", "0"))
        .unwrap_or_else(|e| panic!("net.ipv4.tcp_early_retrans=0 in the peer namespace: {e}"));
}

/// The stack's address and echo port as a socket address.
pub fn server_addr(lab: &Lab) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(lab.bypass_ip, PORT))
}

// ---------------------------------------------------------------------------------------------
// The echo server as a child process
// ---------------------------------------------------------------------------------------------

/// A `bypass echo` child process in the lab's bypass namespace. Dropping the guard kills it
/// (SIGKILL) and reaps it; [`EchoServer::stop`] ends it the normal way (SIGINT).
pub struct EchoServer {
    child: Option<Child>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// What a stopped server left behind.
#[derive(Debug)]
pub struct Finished {
    /// How the process ended.
    pub status: ExitStatus,
    /// Everything it printed on standard output.
    pub stdout: String,
    /// Everything it printed on standard error.
    pub stderr: String,
    /// The counters printed at exit, summed over queues (drops as `drop.<reason>`).
    pub counters: Counters,
    /// The counters of each queue, in queue order (one entry with a single queue).
    pub per_queue: Vec<Counters>,
}

/// Counters by name; a counter not printed is zero.
#[derive(Clone, Debug, Default)]
pub struct Counters(pub BTreeMap<String, u64>);

impl Counters {
    /// Return the counter `name` (0 when it was not printed).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.0 {
            write!(f, "{k}={v} ")?;
        }
        Ok(())
    }
}

impl EchoServer {
    /// Start `bypass echo` on the lab's bypass interface with `backend` and `extra` arguments,
    /// and wait until every queue says it is serving.
    pub fn start(lab: &Lab, backend: Backend, extra: &[&str]) -> EchoServer {
        let cidr = format!("{}/{}", lab.bypass_ip, lab.prefix_len);
        let mut args = vec!["--ip", &cidr];
        args.extend_from_slice(extra);
        EchoServer::start_in(&lab.bypass_ns, &lab.bypass_if, backend, &args)
    }

    /// Start `bypass echo` in namespace `ns` on `iface` with `backend` and `args` (its
    /// addresses among them), and wait until every queue says it is serving.
    pub fn start_in(ns: &str, iface: &str, backend: Backend, args: &[&str]) -> EchoServer {
        EchoServer::start_in_env(ns, iface, backend, args, &[])
    }

    /// [`EchoServer::start`] with environment variables `env` set for the server (such as
    /// `BYPASS_RUN_DIR`, where its control endpoint goes).
    pub fn start_with_env(lab: &Lab, backend: Backend, extra: &[&str], env: &[(&str, &str)]) -> EchoServer {
        let cidr = format!("{}/{}", lab.bypass_ip, lab.prefix_len);
        let mut args = vec!["--ip", &cidr];
        args.extend_from_slice(extra);
        EchoServer::start_in_env(&lab.bypass_ns, &lab.bypass_if, backend, &args, env)
    }

    /// [`EchoServer::start_in`] with environment variables `env` set for the server.
    pub fn start_in_env(ns: &str, iface: &str, backend: Backend, args: &[&str], env: &[(&str, &str)]) -> EchoServer {
        let extra = args;
        let queues = extra
            .iter()
            .position(|a| *a == "--queues")
            .and_then(|i| extra.get(i + 1))
            .map_or(1, |q| q.parse::<usize>().expect("--queues N"));
        let port = PORT.to_string();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_bypass")]);
        cmd.args(["echo", "--iface", iface, "--port", &port, "--backend", backend.arg()])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn `ip netns exec .. bypass echo`");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("piped stdout"), stdout.clone()),
            collect(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        let mut server = EchoServer { child: Some(child), stdout, stderr, readers };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let serving = server.stdout.lock().unwrap().matches("serving echo on").count();
            if serving >= queues {
                return server;
            }
            if let Ok(Some(status)) = server.child.as_mut().unwrap().try_wait() {
                server.join_readers();
                panic!(
                    "bypass echo exited before serving ({status}): stdout: {} stderr: {}",
                    server.stdout.lock().unwrap(),
                    server.stderr.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "bypass echo did not start within 10 s: {}",
                server.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Return the process id (that of `ip netns exec`, which execs `bypass`).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Return what the server printed on standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Send SIGINT, wait (bounded) for the process to exit and return what it printed.
    pub fn stop(mut self) -> Finished {
        let pid = self.pid().to_string();
        let ok = Command::new("kill").args(["-INT", &pid]).status().expect("run kill").success();
        assert!(ok, "kill -INT {pid} failed");
        let status = self.wait_exit(Duration::from_secs(10));
        let status = status.unwrap_or_else(|| {
            let err = self.stderr();
            panic!("bypass echo did not exit within 10 s of SIGINT; stderr: {err}")
        });
        self.join_readers();
        let stdout = self.stdout.lock().unwrap().clone();
        let stderr = self.stderr();
        let (counters, per_queue) = parse_counters(&stdout);
        Finished { status, stdout, stderr, counters, per_queue }
    }

    /// SIGKILL the server and reap it (no counters: it cannot print any).
    pub fn kill9(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let status = child.wait().expect("reap bypass echo");
        self.join_readers();
        status
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("wait for bypass echo") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("bypass echo stderr: {}", self.stderr.lock().unwrap());
            }
        }
        self.join_readers();
    }
}

impl Finished {
    /// Assert the server exited on its own with success, without a panic.
    pub fn assert_clean_exit(&self) {
        assert!(
            self.status.success(),
            "bypass echo exited with {}; stdout: {}; stderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "bypass echo panicked: {}", self.stderr);
        assert!(self.stdout.contains("stopped; counters:"), "no counters printed: {}", self.stdout);
    }
}

/// Append every line read from `pipe` to `into`, on a thread.
pub fn collect(pipe: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    })
}

/// Parse the `name value` lines after `stopped; counters:`; `[queue i]` lines start a queue.
fn parse_counters(stdout: &str) -> (Counters, Vec<Counters>) {
    let mut total = Counters::default();
    let mut queues: Vec<Counters> = Vec::new();
    let Some((_, tail)) = stdout.split_once("stopped; counters:") else { return (total, queues) };
    for line in tail.lines() {
        let line = line.trim();
        if line.starts_with("[queue") {
            queues.push(Counters::default());
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else { continue };
        let Ok(value) = value.parse::<u64>() else { continue };
        if queues.is_empty() {
            queues.push(Counters::default());
        }
        *queues.last_mut().unwrap().0.entry(name.to_string()).or_default() += value;
        *total.0.entry(name.to_string()).or_default() += value;
    }
    (total, queues)
}

// ---------------------------------------------------------------------------------------------
// Optional capture on the peer's interface
// ---------------------------------------------------------------------------------------------

/// `tcpdump`s started when `BYPASS_TEST_CAPTURE=DIR` is set, stopped on drop: one on the peer's
/// interface (`DIR/<name>.pcap`: what the kernel peer sent and received) and one on the
/// bypass side's (`DIR/<name>-bypass.pcap`: what reached the interface in the order packet
/// sockets see it; frames the XDP program redirects never show there).
pub struct Capture(Vec<Child>);

/// Take the test binary's one lock. Tests that judge a run by what it must not lose (no
/// frame dropped at a full ring, no retransmission on the peer) run one at a time: the
/// harness runs tests in parallel, and two labs busy on this two-vCPU machine deschedule
/// each other's stacks long enough to overflow a small ring.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's lab, held with the lock of [`serial`] until it is dropped (the lab first).
pub struct TestLab {
    lab: Lab,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestLab {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl Capture {
    /// Start capturing headers on both ends of the lab's veth pair, if asked to.
    pub fn start(lab: &Lab, name: &str) -> Capture {
        let Ok(dir) = std::env::var("BYPASS_TEST_CAPTURE") else { return Capture(Vec::new()) };
        let mut children = Vec::new();
        for (mut cmd, iface, path) in [
            (lab.peer_cmd("tcpdump"), &lab.peer_if, format!("{dir}/{name}.pcap")),
            (lab.bypass_cmd("tcpdump"), &lab.bypass_if, format!("{dir}/{name}-bypass.pcap")),
        ] {
            let child = cmd
                .args(["-i", iface, "-nn", "-s", "128", "-U", "-w", &path])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match child {
                Ok(child) => children.push(child),
                Err(e) => eprintln!("BYPASS_TEST_CAPTURE: cannot run tcpdump (apt-get install -y tcpdump): {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        Capture(children)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
        for child in &mut self.0 {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The kernel peer's TCP counters
// ---------------------------------------------------------------------------------------------

/// Return the peer namespace's SNMP counters (`nstat -azs`: absolute, zeros included, history
/// untouched).
pub fn peer_nstat(lab: &Lab) -> BTreeMap<String, u64> {
    nstat(lab.peer_cmd("nstat"))
}

/// Run `nstat` (a command for it in some namespace) with `-azs` and return its counters.
pub fn nstat(mut nstat: std::process::Command) -> BTreeMap<String, u64> {
    let out = nstat.arg("-azs").output().expect("run nstat");
    assert!(out.status.success(), "nstat failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// How the peer's counters moved since a snapshot: every counter that changed.
#[derive(Clone, Debug, Default)]
pub struct PeerChanges(pub BTreeMap<String, u64>);

impl PeerChanges {
    /// Return how much `name` moved (0 if it did not).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for PeerChanges {
    /// List the TCP counters that moved, `name+delta`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tcp: Vec<String> =
            self.0.iter().filter(|(k, _)| k.starts_with("Tcp")).map(|(k, v)| format!("{k}+{v}")).collect();
        write!(f, "{}", tcp.join(" "))
    }
}

/// Return how the peer's counters moved since `before`.
pub fn peer_changes(lab: &Lab, before: &BTreeMap<String, u64>) -> PeerChanges {
    nstat_changes(peer_nstat(lab), before)
}

/// Return how counters moved from `before` to `after`: every one that changed.
pub fn nstat_changes(after: BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> PeerChanges {
    PeerChanges(
        after
            .into_iter()
            .filter_map(|(k, v)| {
                let d = v.wrapping_sub(before.get(&k).copied().unwrap_or(0));
                (d != 0).then_some((k, d))
            })
            .collect(),
    )
}

/// Return every TCP counter of the peer that moved since `before` (for failure messages).
pub fn peer_tcp_changes(lab: &Lab, before: &BTreeMap<String, u64>) -> String {
    peer_changes(lab, before).to_string()
}

/// Judge a run from the kernel peer's side: `Err` says why it was not clean.
///
/// Never clean with a reset (`TcpOutRsts`, `TcpEstabResets`). Over AF_XDP, clean means the
/// peer retransmitted nothing that the veth itself did not drop before our device
/// (`link_dropped`, [`peer_link_tx_dropped`]): in driver mode the veth queues the peer's
/// frames in a 256-entry ring (`VETH_RING_SIZE`) that its NAPI drains in the softirq of the
/// peer's own CPU, and when that softirq is pushed to ksoftirqd on a loaded machine the
/// ring overflows whatever the bypass side's windows and rings are (seen in CI: 257 frames,
/// every one of them retransmitted, with no drop at our socket). Those losses are reported,
/// not failed; a retransmission they do not explain (`TcpRetransSegs` or
/// `TcpExtTCPLostRetransmit` above `link_dropped`) fails. Over AF_PACKET the veth itself
/// reorders: without XDP it hands frames to the bypass side through the per-CPU backlog of
/// whichever CPU the sending thread is on, so a sender that migrates between CPUs delivers a
/// burst out of order (seen in captures on bx0: a segment 11 ahead of its predecessors, none
/// lost), the stack SACKs the hole and the peer's RACK retransmits.
/// So over AF_PACKET, clean means: no frame the interface received was missed by the stack
/// (`lost_frames`, from `ip -s link` against the stack's `rx_frames`), no retransmission
/// timeout, no lost retransmission; fast retransmissions after reordering are reported, not
/// failed.
pub fn verdict(backend: Backend, peer: &PeerChanges, lost_frames: u64, link_dropped: u64) -> Result<(), String> {
    let resets = peer.get("TcpOutRsts") + peer.get("TcpEstabResets");
    if resets > 0 {
        return Err(format!("the kernel peer saw or sent {resets} resets: {peer}"));
    }
    let retrans = peer.get("TcpRetransSegs");
    match backend {
        Backend::Xdp if retrans.max(peer.get("TcpExtTCPLostRetransmit")) > link_dropped => Err(format!(
            "the kernel peer retransmitted {retrans} segments, and the veth dropped only {link_dropped} frames before our device: {peer}"
        )),
        Backend::Xdp => {
            if retrans > 0 {
                eprintln!(
                    "tolerated over AF_XDP: {retrans} retransmissions of the {link_dropped} frames the veth's own ring dropped before our device ({peer})"
                );
            }
            Ok(())
        }
        Backend::Packet => {
            if lost_frames > 0 || peer.get("TcpExtTCPTimeouts") > 0 || peer.get("TcpExtTCPLostRetransmit") > 0 {
                return Err(format!("frames lost: {lost_frames} received by bx0 but not by the stack; peer: {peer}"));
            }
            if retrans > 0 {
                eprintln!("tolerated over AF_PACKET: {retrans} fast retransmissions after veth reordering ({peer})");
            }
            Ok(())
        }
    }
}

/// Return how many frames the bypass side's interface received (`ip -s link`, RX packets):
/// compared with the stack's `rx_frames`, the difference is what the packet socket (its
/// ring) or the XDP program's redirect lost, or what was passed to the kernel.
pub fn bypass_link_rx_packets(lab: &Lab) -> u64 {
    let out = lab.ip_bypass(&["-s", "link", "show", "dev", &lab.bypass_if]).expect("ip -s link show");
    let lines: Vec<&str> = out.lines().collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("RX:")).expect("an RX: line");
    lines[i + 1].split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("RX packets")
}

/// Return how many frames the peer's end of the veth dropped on transmit (`ip -s link`, TX
/// dropped of the peer's interface): with XDP on the bypass side, the frames the veth's ring
/// had no room for before our XDP program ran (`veth_xmit`).
pub fn peer_link_tx_dropped(lab: &Lab) -> u64 {
    let out = lab.ip_peer(&["-s", "link", "show", "dev", &lab.peer_if]).expect("ip -s link show");
    let lines: Vec<&str> = out.lines().collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("TX:")).expect("a TX: line");
    let header: Vec<&str> = lines[i].split_whitespace().collect();
    let column = header.iter().position(|w| *w == "dropped").expect("a dropped column") - 1;
    lines[i + 1].split_whitespace().nth(column).and_then(|n| n.parse().ok()).expect("TX dropped")
}

/// Describe the drop counters of both veth ends (`ip -s link`, and the nonzero drop, full and
/// error counters of the driver's statistics, as `ethtool -S` shows them): where frames were
/// lost below TCP.
pub fn link_drops(lab: &Lab) -> String {
    let mut out = String::new();
    for (side, iface, cmd) in
        [("bypass", &lab.bypass_if, lab.bypass_cmd("ip")), ("peer", &lab.peer_if, lab.peer_cmd("ip"))]
    {
        let mut cmd = cmd;
        if let Ok(o) = cmd.args(["-s", "-o", "link", "show", "dev", iface]).output() {
            let text = String::from_utf8_lossy(&o.stdout);
            let text = text.split("\\").map(str::trim).collect::<Vec<_>>().join(" | ");
            out.push_str(&format!("[{side} ip -s link: {}] ", text.trim()));
        }
    }
    match lab.in_bypass(|| bypass_io::netdev::stats(&lab.bypass_if)) {
        Ok(stats) => {
            let nonzero: Vec<String> = stats
                .iter()
                .filter(|(name, value)| *value != 0 && ["drop", "full", "err"].iter().any(|w| name.contains(w)))
                .map(|(name, value)| format!("{name}: {value}"))
                .collect();
            out.push_str(&format!("[bypass driver statistics, drops: {}]", nonzero.join(", ")));
        }
        Err(e) => out.push_str(&format!("[bypass driver statistics: {e}]")),
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------------

/// A small seeded PRNG (SplitMix64): test data and random frames, reproducible from the seed.
pub struct Rng(u64);

impl Rng {
    /// Return a generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Return the next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Return a number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Fill `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// Return `len` reproducible pseudo-random bytes for `seed`.
pub fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// Describe where `got` first differs from `want` (for assertion messages).
pub fn first_difference(want: &[u8], got: &[u8]) -> String {
    match want.iter().zip(got).position(|(a, b)| a != b) {
        Some(i) => format!("first difference at byte {i}: want {:#04x}, got {:#04x}", want[i], got[i]),
        None => format!("lengths differ: want {} bytes, got {}", want.len(), got.len()),
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel echo clients
// ---------------------------------------------------------------------------------------------

/// Connect from the peer namespace to `addr` (bounded by a 5 s connect timeout).
pub fn peer_connect(lab: &Lab, addr: SocketAddr) -> TcpStream {
    lab.in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect to {addr} from the peer namespace: {e}"))
}

/// Connect `n` sockets from the peer namespace to `addr`, all open at once.
pub fn peer_connect_many(lab: &Lab, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(30);
    lab.in_peer(|| {
        (0..n)
            .map(|i| {
                assert!(Instant::now() < deadline, "only {i} of {n} connections to {addr} opened in 30 s");
                TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connection {i} of {n} to {addr}: {e}"))
            })
            .collect()
    })
}

/// Echo `data` over `stream`: a reader thread reads it back (byte-exact) while this thread
/// writes, so neither side's buffers fill up for good. Leaves the stream open.
pub fn echo_with_reader(stream: &TcpStream, data: &[u8], timeout: Duration) -> Result<(), String> {
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let mut reader = stream.try_clone().map_err(|e| e.to_string())?;
    let mut writer = stream;
    std::thread::scope(|scope| {
        let read = scope.spawn(move || -> Result<(), String> {
            let mut got = vec![0u8; data.len()];
            let mut at = 0;
            while at < got.len() {
                match reader.read(&mut got[at..]) {
                    Ok(0) => return Err(format!("EOF after {at} of {} echoed bytes", data.len())),
                    Ok(n) => at += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("read after {at} of {} echoed bytes: {e}", data.len())),
                }
            }
            if got != data {
                return Err(format!("echo differs: {}", first_difference(data, &got)));
            }
            Ok(())
        });
        let wrote = writer.write_all(data).map_err(|e| format!("write: {e}"));
        let read = read.join().expect("reader thread");
        wrote.and(read)
    })
}

/// Read until EOF within `timeout`; return the bytes read.
pub fn read_to_eof(stream: &TcpStream, timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let mut s = stream;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, format!("no EOF within {timeout:?}")));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One connection of [`echo_many`].
struct Flow {
    stream: TcpStream,
    data: Vec<u8>,
    sent: usize,
    received: usize,
    shut: bool,
    eof: bool,
}

/// Echo a distinct `len`-byte message on each of `streams` at once, then half-close each and
/// expect EOF (the server closes once it has echoed everything). Non-blocking sockets shared
/// out among `threads` threads; gives up after `timeout`. Every byte is checked.
pub fn echo_many(
    streams: Vec<TcpStream>,
    len: usize,
    seed: u64,
    threads: usize,
    timeout: Duration,
) -> Result<(), String> {
    let n = streams.len();
    let mut groups: Vec<Vec<(usize, Flow)>> = (0..threads.max(1)).map(|_| Vec::new()).collect();
    for (i, stream) in streams.into_iter().enumerate() {
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let data = data(seed ^ (i as u64).wrapping_mul(0x1000_0001), len);
        groups[i % threads.max(1)].push((i, Flow { stream, data, sent: 0, received: 0, shut: false, eof: false }));
    }
    let deadline = Instant::now() + timeout;
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups.into_iter().map(|group| scope.spawn(move || run_flows(group, deadline))).collect();
        handles.into_iter().map(|h| h.join().expect("echo thread")).collect()
    });
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {n} connections failed: {}", errors.len(), errors.join("; ")))
    }
}

fn run_flows(mut flows: Vec<(usize, Flow)>, deadline: Instant) -> Result<(), String> {
    let mut buf = vec![0u8; 65536];
    let mut errors = Vec::new();
    while !flows.is_empty() {
        if Instant::now() >= deadline {
            let stuck: Vec<String> = flows
                .iter()
                .take(5)
                .map(|(i, f)| {
                    format!("conn {i}: sent {} received {} of {} eof {}", f.sent, f.received, f.data.len(), f.eof)
                })
                .collect();
            errors.push(format!("{} connections unfinished at the deadline, e.g. {}", flows.len(), stuck.join(", ")));
            break;
        }
        let mut progress = false;
        flows.retain_mut(|(i, f)| match step(f, &mut buf, &mut progress) {
            Ok(done) => !done,
            Err(e) => {
                errors.push(format!("conn {i}: {e}"));
                false
            }
        });
        if !progress {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// Move one connection forward; return whether it is finished.
fn step(f: &mut Flow, buf: &mut [u8], progress: &mut bool) -> Result<bool, String> {
    let len = f.data.len();
    while f.sent < len {
        let end = len.min(f.sent + 65536);
        match (&f.stream).write(&f.data[f.sent..end]) {
            Ok(n) => {
                f.sent += n;
                *progress = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write at {}: {e}", f.sent)),
        }
    }
    if f.sent == len && !f.shut {
        f.stream.shutdown(Shutdown::Write).map_err(|e| format!("shutdown: {e}"))?;
        f.shut = true;
    }
    loop {
        match (&f.stream).read(buf) {
            Ok(0) => {
                if f.received < len {
                    return Err(format!("EOF after {} of {len} echoed bytes", f.received));
                }
                f.eof = true;
                *progress = true;
                return Ok(true);
            }
            Ok(n) => {
                *progress = true;
                if f.received + n > len {
                    return Err(format!("{} bytes echoed, {len} sent", f.received + n));
                }
                let want = &f.data[f.received..f.received + n];
                if want != &buf[..n] {
                    return Err(format!(
                        "echo differs at offset {}: {}",
                        f.received,
                        first_difference(want, &buf[..n])
                    ));
                }
                f.received += n;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read at {}: {e}", f.received)),
        }
    }
}

/// Abort `stream`: SO_LINGER {on, 0 s} and close, so the kernel sends RST instead of FIN.
#[allow(unsafe_code)]
pub fn abort(stream: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the descriptor is an open socket owned by `stream`, alive for the call; the
    // option value points at a `libc::linger` that lives across the call, and the length
    // passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_LINGER): {}", io::Error::last_os_error());
    drop(stream);
}

/// Give the kernel socket `algorithm` (`setsockopt(TCP_CONGESTION)`), before any data: the
/// controller then starts afresh (`tcp_reinit_congestion_control`) with ssthresh still
/// infinite. A namespace other than the first may not make a restricted algorithm its
/// default (`tcp_set_default_congestion_control`: EPERM unless it is in
/// `net.ipv4.tcp_allowed_congestion_control`), but a socket of a process with CAP_NET_ADMIN
/// may take any the kernel has (`tcp_set_congestion_control`).
#[allow(unsafe_code)]
pub fn set_congestion_control(socket: &impl std::os::fd::AsRawFd, algorithm: &str) {
    // SAFETY: setsockopt(2) on a socket held open for the borrow, reading `algorithm.len()`
    // bytes of a live string. The result is checked.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            algorithm.as_ptr().cast(),
            algorithm.len() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(TCP_CONGESTION, {algorithm}): {}", io::Error::last_os_error());
}

/// Return the kernel socket's `TCP_INFO` (Linux's `tcp_get_info`, what `ss -ti` shows).
#[allow(unsafe_code)]
pub fn tcp_info(socket: &impl std::os::fd::AsRawFd) -> libc::tcp_info {
    // SAFETY: `tcp_info` is plain integers, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt(2) on a socket held open for the borrow, into a `tcp_info` we own,
    // with its size; the kernel writes at most `len` bytes. The result is checked.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", io::Error::last_os_error());
    info
}

/// Connect `stack` to `server` and poll until the handshake ends, failing the test after
/// `deadline` or if it ends anywhere but ESTABLISHED; return the connection.
pub fn connect_established<D: Device>(
    stack: &mut bypass_stack::Stack<D>,
    server: impl Into<SocketAddr> + std::fmt::Display + Copy,
    deadline: Instant,
) -> bypass_stack::SocketId {
    use bypass_tcp::State;
    let id = stack.connect(server.into()).expect("connect");
    while matches!(stack.state(id), State::SynSent | State::SynReceived) {
        assert!(Instant::now() < deadline, "no handshake with {server}: {}", stack.counters());
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    assert_eq!(stack.state(id), State::Established, "connect to {server} failed: {}", stack.counters());
    id
}

/// Where programs the tests run keep their control endpoints (`BYPASS_RUN_DIR`), instead of
/// `/run/bypass`: under the target directory, out of the machine's way. A program that dies of
/// a signal leaves its socket behind; the next stack to start there removes it.
pub const TEST_RUN_DIR: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/bypass-run");

/// Return whether tshark is there; under `CI=true` its absence fails the test.
pub fn tshark_available() -> bool {
    let ok = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tshark is not installed (CI installs it: apt-get install -y --no-install-recommends tshark)"
        );
        eprintln!("skipping: tshark is not installed");
    }
    ok
}

/// Run tshark on `file` with IP and TCP checksum validation on, with `args`; return its output.
pub fn tshark(file: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE"])
        .args(args)
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Hand-made frames, injected from the peer side
// ---------------------------------------------------------------------------------------------

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// Internet checksum (RFC 1071) over `parts`, concatenated (each but the last of even length).
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    for part in parts {
        for c in part.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Return an Ethernet II frame.
pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Return an IPv4 packet (20-byte header, correct checksum); `frag` is the flags and
/// fragment offset field (0x2000 = more fragments).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&0x1234u16.to_be_bytes());
    p.extend_from_slice(&frag.to_be_bytes());
    p.extend_from_slice(&[64, protocol, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let sum = checksum(&[&p]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A TCP segment's header fields.
#[derive(Clone, Copy, Debug)]
pub struct Tcp {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

/// Return a TCP segment (20-byte header, or 24 with an MSS option on a SYN) with a correct
/// checksum for `src` -> `dst`.
pub fn tcp(src: Ipv4Addr, dst: Ipv4Addr, t: Tcp, payload: &[u8]) -> Vec<u8> {
    let options: &[u8] = if t.flags & SYN != 0 { &[2, 4, 0x05, 0xb4] } else { &[] };
    let header_len = 20 + options.len();
    let mut s = Vec::with_capacity(header_len + payload.len());
    s.extend_from_slice(&t.src_port.to_be_bytes());
    s.extend_from_slice(&t.dst_port.to_be_bytes());
    s.extend_from_slice(&t.seq.to_be_bytes());
    s.extend_from_slice(&t.ack.to_be_bytes());
    s.push(((header_len / 4) as u8) << 4);
    s.push(t.flags);
    s.extend_from_slice(&t.window.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(options);
    s.extend_from_slice(payload);
    set_tcp_checksum(src, dst, &mut s);
    s
}

/// Write the correct checksum into the TCP segment `s` for `src` -> `dst`.
pub fn set_tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, s: &mut [u8]) {
    s[16..18].fill(0);
    let len = (s.len() as u16).to_be_bytes();
    let pseudo = [&src.octets()[..], &dst.octets()[..], &[0, 6], &len[..]].concat();
    let sum = checksum(&[&pseudo, s]);
    s[16..18].copy_from_slice(&sum.to_be_bytes());
}

/// Open an AF_PACKET device on the peer's interface, inside the peer namespace, and run `f`
/// with it there (the device is not `Send`).
pub fn with_peer_injector<T: Send>(lab: &Lab, f: impl FnOnce(&mut Injector) -> T + Send) -> T {
    let iface = lab.peer_if.clone();
    lab.in_peer(move || {
        let dev = PacketDevice::open(&iface).expect("open an AF_PACKET socket on the peer interface");
        let mut inj = Injector { dev, sent: 0 };
        let out = f(&mut inj);
        inj.flush();
        out
    })
}

/// Sends hand-made frames out of the peer's interface.
pub struct Injector {
    dev: PacketDevice,
    /// Frames sent so far.
    pub sent: u64,
}

impl Injector {
    /// Queue `frame` (flushing when the transmit staging area is full).
    pub fn send(&mut self, frame: &[u8]) {
        for _ in 0..1000 {
            let queued = self
                .dev
                .send(&mut |buf| {
                    buf[..frame.len()].copy_from_slice(frame);
                    frame.len()
                })
                .expect("queue a frame on the peer's AF_PACKET socket");
            if queued {
                self.sent += 1;
                return;
            }
            self.flush();
        }
        panic!("the peer's AF_PACKET socket took no frame for 1000 flushes");
    }

    /// Push queued frames to the wire.
    pub fn flush(&mut self) {
        self.dev.flush().expect("flush the peer's AF_PACKET socket");
        // Drain what the socket received (everything on px0), so its ring never matters.
        let _ = self.dev.recv(usize::MAX, &mut |_| {});
    }
}

/// Wait up to `limit` for `child` to exit.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
