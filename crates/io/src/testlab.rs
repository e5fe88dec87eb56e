//! Throwaway network labs for tests and demos: two network namespaces joined by a veth pair.
//!
//! ```text
//!  namespace "<name>-a" (bypass side)           namespace "<name>-b" (peer side)
//!  bx0  02:00:00:77:00:02   <==== veth ====>    px0  02:00:00:77:00:01
//!  no kernel IPv4 address, IPv6 disabled        10.77.0.1/24, IPv6 disabled,
//!  the stack owns 10.77.0.2                     tx checksum/TSO/GSO offloads off
//!
//!  optional second pair (Lab::add_kernel_pair), kernel addresses at both ends and the
//!  kernel's default offloads:
//!  bk0  10.77.1.3/24                <==== veth ====>    pk0  10.77.1.1/24
//! ```
//!
//! The bypass side has no kernel address, so only the stack answers for 10.77.0.2 (the kernel
//! would otherwise send RSTs, ARP replies and neighbour discovery of its own); the peer is an
//! ordinary kernel stack with the offloads off, so its frames carry real checksums and never
//! exceed the MTU. Names carry the process id and a counter, so labs of concurrent tests and
//! processes never collide; dropping a [`Lab`] deletes both namespaces (and with them the veth
//! pair), and [`Lab::create`] first removes labs left behind by dead processes.
//!
//! Run code inside a namespace with [`Lab::in_bypass`] / [`Lab::in_peer`]: the closure runs on
//! a thread that entered the namespace, so sockets, AF_XDP devices and BPF links it creates
//! belong there (and may then be moved to other threads). Run commands there with
//! [`Lab::bypass_cmd`] / [`Lab::peer_cmd`].
//!
//! A lab needs root and `ip` (iproute2, on every Debian machine) and nothing else: the
//! offloads are set through the kernel's ethtool ioctl ([`crate::netdev`]), not the `ethtool`
//! program, and [`ping`] sends ICMP echo from code, so a fresh machine can build one. Tests
//! call [`lab_available`] first: without root or `ip`, a test is skipped with a message,
//! except under `CI=true`, where it fails.
//!
//! ```no_run
//! use std::time::Duration;
//! use bypass_io::testlab::{lab_available, ping, Lab};
//!
//! if lab_available("my_test") {
//!     let lab = Lab::create("mytest").unwrap();
//!     let rtt = lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(1))).unwrap();
//!     println!("the peer answers itself in {rtt:?}");
//! }
//! ```

use std::fs::{self, File};
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::{netdev, xdp};

/// Prefix of every lab namespace name.
const PREFIX: &str = "bxt";

/// Why a lab could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces need root.
    #[error("network labs need root (CAP_SYS_ADMIN and CAP_NET_ADMIN): run the tests as root")]
    NotRoot,
    /// A lab of that name exists already.
    #[error("a lab named `{0}` exists already: use it, or remove it first with `bypass lab down --name {0}`")]
    Exists(String),
    /// A command-line tool is missing (labs run only `ip`, from iproute2).
    #[error("`{0}` is not installed: install it (Debian: `apt-get install -y iproute2`)")]
    MissingTool(String),
    /// The peer's offloads could not be set.
    #[error("set the offloads of the lab's veth: {0}")]
    Offloads(#[from] netdev::NetdevError),
    /// A setup command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being attempted.
        what: String,
        /// The error.
        source: io::Error,
    },
}

/// Return whether root and the lab tools are available (see [`check_preconditions`]). If not: under `CI=true`, panic with
/// the reason (a privileged test must not silently pass in CI); otherwise print why `test` is
/// skipped and return `false`.
pub fn lab_available(test: &str) -> bool {
    match check_preconditions() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: {e} (CI=true: tests that need root and network namespaces must run)")
        }
        Err(e) => {
            // Straight to stderr: libtest captures eprintln! output of passing tests.
            let _ = writeln!(io::stderr(), "skipping {test}: {e}");
            false
        }
    }
}

/// Check that the process is root and that `ip` (iproute2), the one program labs run, is
/// installed.
pub fn check_preconditions() -> Result<(), LabError> {
    if xdp::euid() != 0 {
        return Err(LabError::NotRoot);
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Err(LabError::MissingTool("ip".into()));
    }
    Ok(())
}

/// How to build a lab.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// A short word naming the lab (part of the namespace names).
    pub tag: String,
    /// Queues of each veth end (`numrxqueues`/`numtxqueues`).
    pub queues: u32,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// Turn the peer's tx checksum, TSO and GSO offloads off.
    pub offloads_off: bool,
    /// Name the namespaces exactly `<name>-a` and `<name>-b` (a lab meant to outlive the
    /// process, as `bypass lab up` makes); `None` makes unique throwaway names.
    pub name: Option<String>,
}

impl LabConfig {
    /// Return the defaults: one queue, MTU 1500, offloads off.
    pub fn new(tag: &str) -> LabConfig {
        LabConfig { tag: tag.to_string(), queues: 1, mtu: 1500, offloads_off: true, name: None }
    }
}

/// Two network namespaces joined by a veth pair; deleted on drop.
#[derive(Debug)]
pub struct Lab {
    /// Namespace of the bypass side.
    pub bypass_ns: String,
    /// Namespace of the kernel peer.
    pub peer_ns: String,
    /// Interface on the bypass side.
    pub bypass_if: String,
    /// Interface on the peer side.
    pub peer_if: String,
    /// Address the stack owns (not configured in the bypass side's kernel).
    pub bypass_ip: Ipv4Addr,
    /// The peer kernel's address.
    pub peer_ip: Ipv4Addr,
    /// Prefix length of the lab subnet.
    pub prefix_len: u8,
    /// MAC address of the bypass side's interface.
    pub bypass_mac: [u8; 6],
    /// MAC address of the peer's interface.
    pub peer_mac: [u8; 6],
}

impl Lab {
    /// Create a lab with the default [`LabConfig`].
    pub fn create(tag: &str) -> Result<Lab, LabError> {
        Lab::with_config(LabConfig::new(tag))
    }

    /// Create a lab.
    pub fn with_config(config: LabConfig) -> Result<Lab, LabError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        check_preconditions()?;
        remove_stale_labs();
        let tag: String = config.tag.chars().filter(|c| c.is_ascii_alphanumeric()).take(16).collect();
        let name = match &config.name {
            Some(name) => {
                if Path::new(&format!("/var/run/netns/{name}-a")).exists() {
                    return Err(LabError::Exists(name.clone()));
                }
                name.clone()
            }
            None => format!("{PREFIX}-{}-{}-{tag}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)),
        };
        let lab = Lab::named(&name);
        // From here on, dropping `lab` cleans up whatever was created.
        Lab::build(lab, &config)
    }

    /// Return the description of the lab named `name` without creating anything: the handle
    /// `bypass lab down` and the demo use for a lab made earlier. Dropping it deletes the lab;
    /// use [`Lab::keep`] to leave it.
    pub fn named(name: &str) -> Lab {
        Lab {
            bypass_ns: format!("{name}-a"),
            peer_ns: format!("{name}-b"),
            bypass_if: "bx0".into(),
            peer_if: "px0".into(),
            bypass_ip: Ipv4Addr::new(10, 77, 0, 2),
            peer_ip: Ipv4Addr::new(10, 77, 0, 1),
            prefix_len: 24,
            bypass_mac: [0x02, 0, 0, 0x77, 0, 0x02],
            peer_mac: [0x02, 0, 0, 0x77, 0, 0x01],
        }
    }

    /// Return whether both namespaces of this lab exist.
    pub fn exists(&self) -> bool {
        [&self.bypass_ns, &self.peer_ns].iter().all(|ns| Path::new(&format!("/var/run/netns/{ns}")).exists())
    }

    /// Leave the lab in place when this handle goes away.
    pub fn keep(self) {
        std::mem::forget(self);
    }

    fn build(lab: Lab, config: &LabConfig) -> Result<Lab, LabError> {
        run(Command::new("ip").args(["netns", "add", &lab.bypass_ns]))?;
        run(Command::new("ip").args(["netns", "add", &lab.peer_ns]))?;
        for ns in [&lab.bypass_ns, &lab.peer_ns] {
            in_namespace(ns, disable_ipv6)??;
        }
        let (queues, mtu) = (config.queues.to_string(), config.mtu.to_string());
        let (bypass_mac, peer_mac) = (mac_string(lab.bypass_mac), mac_string(lab.peer_mac));
        #[rustfmt::skip]
        lab.ip_bypass(&[
            "link", "add", &lab.bypass_if, "address", &bypass_mac, "mtu", &mtu,
            "numrxqueues", &queues, "numtxqueues", &queues,
            "type", "veth", "peer", "name", &lab.peer_if, "address", &peer_mac, "mtu", &mtu,
            "numrxqueues", &queues, "numtxqueues", &queues, "netns", &lab.peer_ns,
        ])?;
        lab.ip_bypass(&["link", "set", "lo", "up"])?;
        lab.ip_bypass(&["link", "set", &lab.bypass_if, "up"])?;
        let peer_cidr = format!("{}/{}", lab.peer_ip, lab.prefix_len);
        lab.ip_peer(&["addr", "add", &peer_cidr, "dev", &lab.peer_if])?;
        lab.ip_peer(&["link", "set", "lo", "up"])?;
        lab.ip_peer(&["link", "set", &lab.peer_if, "up"])?;
        if config.offloads_off {
            let iface = lab.peer_if.clone();
            in_namespace(&lab.peer_ns, || netdev::segmentation_offloads_off(&iface))??;
        }
        Ok(lab)
    }

    /// Add a second veth pair between the lab's namespaces with kernel addresses at both ends
    /// ([`KernelPair`]: `bk0` 10.77.1.3/24 on the bypass side, `pk0` 10.77.1.1/24 on the
    /// peer's), the kernel's default offloads and the given MTU; it goes with the namespaces.
    ///
    /// This is the link as a user's machine has it out of the box: the kernel passes TSO/GSO
    /// super-packets of up to 64 KiB across it whole. The first pair keeps its own settings.
    pub fn add_kernel_pair(&self, mtu: u32) -> Result<KernelPair, LabError> {
        let pair = self.kernel_pair();
        let mtu = mtu.to_string();
        #[rustfmt::skip]
        self.ip_bypass(&[
            "link", "add", &pair.bypass_if, "mtu", &mtu, "type", "veth",
            "peer", "name", &pair.peer_if, "mtu", &mtu, "netns", &self.peer_ns,
        ])?;
        self.ip_bypass(&["addr", "add", &format!("{}/{}", pair.bypass_ip, pair.prefix_len), "dev", &pair.bypass_if])?;
        self.ip_peer(&["addr", "add", &format!("{}/{}", pair.peer_ip, pair.prefix_len), "dev", &pair.peer_if])?;
        self.ip_bypass(&["link", "set", &pair.bypass_if, "up"])?;
        self.ip_peer(&["link", "set", &pair.peer_if, "up"])?;
        Ok(pair)
    }

    /// Return the description of the pair [`Lab::add_kernel_pair`] adds, without adding it.
    pub fn kernel_pair(&self) -> KernelPair {
        KernelPair {
            bypass_if: "bk0".into(),
            peer_if: "pk0".into(),
            bypass_ip: Ipv4Addr::new(10, 77, 1, 3),
            peer_ip: Ipv4Addr::new(10, 77, 1, 1),
            prefix_len: 24,
        }
    }

    /// Run `f` on a thread inside the bypass side's namespace and return its result.
    pub fn in_bypass<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.bypass_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run `f` on a thread inside the peer's namespace and return its result.
    pub fn in_peer<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.peer_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Return a command that runs `program` inside the bypass side's namespace.
    pub fn bypass_cmd(&self, program: &str) -> Command {
        netns_exec(&self.bypass_ns, program)
    }

    /// Return a command that runs `program` inside the peer's namespace.
    pub fn peer_cmd(&self, program: &str) -> Command {
        netns_exec(&self.peer_ns, program)
    }

    /// Run `ip ARGS` in the bypass side's namespace; return its standard output.
    pub fn ip_bypass(&self, args: &[&str]) -> Result<String, LabError> {
        run(Command::new("ip").args(["-n", &self.bypass_ns]).args(args))
    }

    /// Run `ip ARGS` in the peer's namespace; return its standard output.
    pub fn ip_peer(&self, args: &[&str]) -> Result<String, LabError> {
        run(Command::new("ip").args(["-n", &self.peer_ns]).args(args))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.peer_ns, &self.bypass_ns] {
            if let Err(e) = run(Command::new("ip").args(["netns", "del", ns])) {
                eprintln!("lab cleanup: {e}");
            }
        }
    }
}

/// A second veth pair of a lab, with kernel addresses at both ends and the kernel's default
/// offloads (see [`Lab::add_kernel_pair`]).
#[derive(Clone, Debug)]
pub struct KernelPair {
    /// Interface in the bypass side's namespace.
    pub bypass_if: String,
    /// Interface in the peer's namespace.
    pub peer_if: String,
    /// The kernel address of the bypass side's end.
    pub bypass_ip: Ipv4Addr,
    /// The kernel address of the peer's end.
    pub peer_ip: Ipv4Addr,
    /// Prefix length of the pair's subnet.
    pub prefix_len: u8,
}

/// Send one ICMP echo request to `addr` from the calling thread's namespace and wait up to
/// `timeout` for the reply (what `ping -c1 -W` does, without needing iputils-ping); return
/// the round-trip time. Needs root (a raw ICMP socket).
pub fn ping(addr: Ipv4Addr, timeout: Duration) -> io::Result<Duration> {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let socket = sys::IcmpSocket::open()?;
    // Raw ICMP sockets see every ICMP message to this host: match ours by id and sequence.
    let id = (std::process::id() & 0xffff) as u16;
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed) as u16;
    let payload = *b"bypass testlab ping 0123456789ab";
    let header = etherparse::Icmpv4Header::with_checksum(
        etherparse::Icmpv4Type::EchoRequest(etherparse::IcmpEchoHeader { id, seq }),
        &payload,
    );
    let mut request = header.to_bytes().to_vec();
    request.extend_from_slice(&payload);
    let start = Instant::now();
    socket.send_to(&request, addr)?;
    let mut buf = [0u8; 1500];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no echo reply from {addr} in {timeout:?}")));
        }
        let Some(n) = socket.recv(&mut buf, left)? else { continue };
        // A raw IPv4 socket receives the IP header too.
        let Ok(ip) = etherparse::Ipv4Slice::from_slice(&buf[..n]) else { continue };
        if ip.header().source_addr() != addr {
            continue;
        }
        let Ok(icmp) = etherparse::Icmpv4Slice::from_slice(ip.payload().payload) else { continue };
        if let etherparse::Icmpv4Type::EchoReply(echo) = icmp.icmp_type()
            && echo.id == id
            && echo.seq == seq
            && icmp.payload() == payload
        {
            return Ok(start.elapsed());
        }
    }
}

/// Run `f` on a new thread that first enters the network namespace `ns`.
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path).map_err(|source| LabError::Io { what: format!("open {path}"), source })?;
    std::thread::scope(|scope| {
        let thread = scope.spawn(move || {
            xdp::enter_netns(&file).map_err(|source| LabError::Io { what: format!("enter namespace {ns}"), source })?;
            Ok(f())
        });
        thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Disable IPv6 in the calling thread's namespace (for interfaces present and future).
fn disable_ipv6() -> Result<(), LabError> {
    for path in ["/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"] {
        match fs::write(path, "1") {
            Ok(()) => {}
            // A kernel without IPv6 has nothing to disable.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(LabError::Io { what: format!("write {path}"), source }),
        }
    }
    Ok(())
}

fn netns_exec(ns: &str, program: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program]);
    cmd
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Run a command; return its standard output, or its standard error as the error.
fn run(cmd: &mut Command) -> Result<String, LabError> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => LabError::MissingTool(cmd.get_program().to_string_lossy().into_owned()),
        _ => LabError::Io { what: format!("run {line}"), source },
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command { command: line, stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}

/// Delete lab namespaces whose creating process no longer exists (left by a killed test run).
fn remove_stale_labs() {
    let Ok(entries) = fs::read_dir("/var/run/netns") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&format!("{PREFIX}-")).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !fs::exists(format!("/proc/{pid}")).unwrap_or(true) {
            let _ = run(Command::new("ip").args(["netns", "del", &name]));
        }
    }
}

#[allow(unsafe_code)]
mod sys {
    use std::io;
    use std::net::Ipv4Addr;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    /// A raw IPv4 ICMP socket (`socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)`).
    pub struct IcmpSocket(OwnedFd);

    impl IcmpSocket {
        /// Open one in the calling thread's network namespace.
        pub fn open() -> io::Result<IcmpSocket> {
            // SAFETY: socket(2) has no memory preconditions; the result is checked.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMP) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("open a raw ICMP socket (needs root): {e}")));
            }
            // SAFETY: `fd` is a descriptor we just opened and own.
            Ok(IcmpSocket(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// Send `message` (an ICMP message; the kernel adds the IP header) to `addr`.
        pub fn send_to(&self, message: &[u8], addr: Ipv4Addr) -> io::Result<()> {
            let to = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr { s_addr: u32::from(addr).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: `message` is valid for reads of its length; `to` is a sockaddr_in whose
            // size is passed alongside it.
            let n = unsafe {
                libc::sendto(
                    self.0.as_raw_fd(),
                    message.as_ptr().cast(),
                    message.len(),
                    0,
                    (&raw const to).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
        }

        /// Wait up to `timeout` for a datagram; return its length, or `None` if none came.
        pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
            let mut pfd = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
            // SAFETY: `pfd` is one valid pollfd, and the count passed is 1.
            let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted { Ok(None) } else { Err(e) };
            }
            if ready == 0 {
                return Ok(None);
            }
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
            }
            Ok(Some(n as usize))
        }
    }
}
