//! Throwaway network labs for tests and demos: two network namespaces joined by a veth pair
//! ([`Lab`]), or four in a row with two kernel routers and a narrow link between them
//! ([`RoutedLab`], for path MTU discovery).
//!
//! ```text
//!  namespace "<name>-a" (bypass side)           namespace "<name>-b" (peer side)
//!  bx0  02:00:00:77:00:02   <==== veth ====>    px0  02:00:00:77:00:01
//!  no kernel IPv4 address, IPv6 disabled        10.77.0.1/24, tx checksum/TSO/GSO offloads off
//!  the stack owns 10.77.0.2 (and fd00:77::2)    IPv6 disabled, or with LabConfig::ipv6:
//!                                                 fd00:77::1/64 and fe80::ff:fe77:1,
//!                                                 no DAD, no router solicitations
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
//! IPv6 on the peer is opt-in ([`LabConfig::ipv6`]): a kernel with IPv6 on an interface sends
//! MLD reports for its solicited-node groups when the link comes up, and no sysctl stops them,
//! so those frames would reach the bypass side before any test starts and upset tests that
//! compare the frames `bx0` received with the frames the stack received. Even then the bypass
//! side keeps IPv6 disabled, so its kernel never answers neighbour discovery for fd00:77::2.
//!
//! Run code inside a namespace with [`Lab::in_bypass`] / [`Lab::in_peer`]: the closure runs on
//! a thread that entered the namespace, so sockets, AF_XDP devices and BPF links it creates
//! belong there (and may then be moved to other threads). Run commands there with
//! [`Lab::bypass_cmd`] / [`Lab::peer_cmd`].
//!
//! A lab needs root and `ip` (iproute2, on every Debian machine) and nothing else: the
//! offloads are set through the kernel's ethtool ioctl ([`bypass_io::netdev`]), not the `ethtool`
//! program, and [`ping`], [`ping6`], [`ping_sized`] and [`ping_dont_fragment`] send ICMP
//! echo from code, so a fresh machine can build one. Tests call [`lab_available`] first:
//! without root or `ip`, a test is skipped with a message, except under `CI=true`, where it
//! fails.
//!
//! ```no_run
//! use std::time::Duration;
//! use bypass_lab::testlab::{lab_available, ping, Lab};
//!
//! if lab_available("my_test") {
//!     let lab = Lab::create("mytest").unwrap();
//!     let rtt = lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(1))).unwrap();
//!     println!("the peer answers itself in {rtt:?}");
//! }
//! ```

use std::fs::{self, File};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bypass_io::netdev;

/// Prefix of every lab namespace name.
const PREFIX: &str = "bxt";

/// The smallest MTU IPv6 allows on a link (RFC 8200, section 5): below it the kernel turns
/// IPv6 off on the interface.
const IPV6_MIN_MTU: u32 = 1280;

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
    /// The configuration asks for something a lab cannot be.
    #[error("invalid lab configuration: {0}")]
    InvalidConfig(String),
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
    if sys::euid() != 0 {
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
    /// Turn IPv6 on in the peer's kernel: [`Lab::peer_ip6`] (fd00:77::1/64, added `nodad`)
    /// and its link-local address [`Lab::peer_link_local`] on `px0`, with duplicate address
    /// detection, router solicitations and router advertisements off (`accept_dad=0`,
    /// `router_solicitations=0`, `accept_ra=0`), so both addresses are usable at once and the
    /// peer sends no solicitations. It still sends MLD reports when the link comes up (no
    /// sysctl stops them), which is why this is off by default. The bypass side keeps IPv6
    /// disabled either way.
    pub ipv6: bool,
}

impl LabConfig {
    /// Return the defaults: one queue, MTU 1500, offloads off, no IPv6.
    pub fn new(tag: &str) -> LabConfig {
        LabConfig { tag: tag.to_string(), queues: 1, mtu: 1500, offloads_off: true, name: None, ipv6: false }
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
    /// IPv6 address the stack owns, fd00:77::2 (never configured in the bypass side's kernel,
    /// where IPv6 stays disabled).
    pub bypass_ip6: Ipv6Addr,
    /// The peer kernel's IPv6 address, fd00:77::1 (configured only with [`LabConfig::ipv6`]).
    pub peer_ip6: Ipv6Addr,
    /// The peer kernel's link-local address, fe80::ff:fe77:1 (EUI-64 of [`Lab::peer_mac`];
    /// present only with [`LabConfig::ipv6`]).
    pub peer_link_local: Ipv6Addr,
    /// Prefix length of the lab's IPv6 subnet (64).
    pub prefix6_len: u8,
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
        check_preconditions()?;
        if config.ipv6 && config.mtu < IPV6_MIN_MTU {
            return Err(LabError::InvalidConfig(format!(
                "IPv6 needs an MTU of {IPV6_MIN_MTU} at least, not {}",
                config.mtu
            )));
        }
        remove_stale_labs();
        let name = match &config.name {
            Some(name) => {
                if Path::new(&format!("/var/run/netns/{name}-a")).exists() {
                    return Err(LabError::Exists(name.clone()));
                }
                name.clone()
            }
            None => unique_name(&config.tag),
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
            bypass_ip6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2),
            peer_ip6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1),
            peer_link_local: eui64_link_local([0x02, 0, 0, 0x77, 0, 0x01]),
            prefix6_len: 64,
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
        in_namespace(&lab.bypass_ns, disable_ipv6)??;
        if config.ipv6 {
            // Before the veth exists, so that its end starts with the quiet defaults.
            in_namespace(&lab.peer_ns, || quiet_ipv6(&[]))??;
        } else {
            in_namespace(&lab.peer_ns, disable_ipv6)??;
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
        if config.ipv6 {
            let iface = lab.peer_if.clone();
            in_namespace(&lab.peer_ns, || quiet_ipv6(&[&iface]))??;
            // The link-local address is then the EUI-64 one `peer_link_local` names.
            lab.ip_peer(&["link", "set", "dev", &lab.peer_if, "addrgenmode", "eui64"])?;
            let peer_cidr6 = format!("{}/{}", lab.peer_ip6, lab.prefix6_len);
            lab.ip_peer(&["-6", "addr", "add", &peer_cidr6, "dev", &lab.peer_if, "nodad"])?;
        }
        lab.ip_peer(&["link", "set", "lo", "up"])?;
        lab.ip_peer(&["link", "set", &lab.peer_if, "up"])?;
        if config.offloads_off {
            let iface = lab.peer_if.clone();
            in_namespace(&lab.peer_ns, || netdev::segmentation_offloads_off(&iface))??;
        }
        if config.ipv6 {
            wait_for_ipv6(&lab.peer_ns, &[&lab.peer_if])?;
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

/// How to build a [`RoutedLab`].
#[derive(Clone, Debug)]
pub struct RoutedConfig {
    /// A short word naming the lab (part of the namespace names).
    pub tag: String,
    /// Queues of each end of the A–R1 veth (`numrxqueues`/`numtxqueues`).
    pub queues: u32,
    /// MTU of both ends of the A–R1 and R2–B links.
    pub mtu: u32,
    /// MTU of both ends of the R1–R2 link, the path's narrowest; at least 1280, IPv6's
    /// minimum (RFC 8200, section 5).
    pub small_mtu: u32,
}

impl RoutedConfig {
    /// Return the defaults: one queue, MTU 1500, 1400 between the routers.
    pub fn new(tag: &str) -> RoutedConfig {
        RoutedConfig { tag: tag.to_string(), queues: 1, mtu: 1500, small_mtu: 1400 }
    }
}

/// Four network namespaces in a row, for path MTU discovery: the bypass side `A`, two kernel
/// routers `R1` and `R2` with a narrow link between them, and a kernel peer `B`; deleted on
/// drop.
///
/// ```text
///  A   "<name>-a"   bx0   the bypass side: no kernel address, IPv6 disabled; the stack owns
///                         10.77.0.2 and fd00:77::2 (MAC 02:00:00:77:00:02), gateway R1
///       | veth, mtu (1500)
///  R1  "<name>-r1"  r1a   10.77.0.1/24  fd00:77::1/64    MAC 02:00:00:77:00:01, offloads off
///                   r1r2  10.77.2.1/24  fd00:77:2::1/64
///       | veth, small_mtu (1400) on both ends
///  R2  "<name>-r2"  r2r1  10.77.2.2/24  fd00:77:2::2/64
///                   r2b   10.77.3.1/24  fd00:77:3::1/64
///       | veth, mtu (1500)
///  B   "<name>-b"   px0   10.77.3.2/24  fd00:77:3::2/64  offloads off, default routes via R2
/// ```
///
/// The routers forward IPv4 and IPv6 and route every subnet. With `net.ipv4.icmp_ratelimit`
/// and `net.ipv6.icmp.ratelimit` at 0 they answer every datagram too large for the narrow
/// link with ICMP "fragmentation needed" (DF set) or ICMPv6 "packet too big", carrying
/// `small_mtu`. (A veth silently drops frames larger than its receiving end's MTU, so the
/// narrow MTU is set on both ends of R1–R2: the error comes from the router that cannot
/// forward, never from a link.) Over IPv4, a datagram without DF is fragmented by R1 or R2
/// instead.
///
/// R1's end towards A has its offloads off (frames forwarded to the stack carry complete
/// checksums and never exceed `mtu`), as does B's. IPv6 is on everywhere but in A, without
/// duplicate address detection or router solicitations; the routers send no router
/// advertisements (give the stack R1's address as its gateway), but R1 answers neighbour
/// solicitations for fd00:77::1 and sends MLD reports towards A when its link comes up.
///
/// Names follow [`Lab`]'s scheme, so [`Lab::create`] and [`RoutedLab::create`] also remove
/// routed labs left behind by dead processes.
#[derive(Debug)]
pub struct RoutedLab {
    /// Namespace of the bypass side, A.
    pub a_ns: String,
    /// Namespace of the first router, R1 (A's gateway).
    pub r1_ns: String,
    /// Namespace of the second router, R2 (B's gateway).
    pub r2_ns: String,
    /// Namespace of the kernel peer, B.
    pub b_ns: String,
    /// A's interface, towards R1 (`bx0`).
    pub a_if: String,
    /// R1's interface towards A (`r1a`).
    pub r1_a_if: String,
    /// R1's interface towards R2, on the narrow link (`r1r2`).
    pub r1_r2_if: String,
    /// R2's interface towards R1, on the narrow link (`r2r1`).
    pub r2_r1_if: String,
    /// R2's interface towards B (`r2b`).
    pub r2_b_if: String,
    /// B's interface, towards R2 (`px0`).
    pub b_if: String,
    /// Address the stack owns on A, 10.77.0.2 (not configured in A's kernel).
    pub a_ip: Ipv4Addr,
    /// IPv6 address the stack owns on A, fd00:77::2 (A's kernel has IPv6 disabled).
    pub a_ip6: Ipv6Addr,
    /// MAC address of A's interface.
    pub a_mac: [u8; 6],
    /// R1's address towards A, 10.77.0.1: the stack's gateway.
    pub r1_ip: Ipv4Addr,
    /// R1's IPv6 address towards A, fd00:77::1: the stack's IPv6 gateway.
    pub r1_ip6: Ipv6Addr,
    /// MAC address of R1's interface towards A.
    pub r1_mac: [u8; 6],
    /// R1's link-local address towards A, fe80::ff:fe77:1 (EUI-64 of [`RoutedLab::r1_mac`]):
    /// the source of its neighbour solicitations for the stack's address.
    pub r1_link_local: Ipv6Addr,
    /// R1's address on the narrow link, 10.77.2.1.
    pub r1_r2_ip: Ipv4Addr,
    /// R1's IPv6 address on the narrow link, fd00:77:2::1.
    pub r1_r2_ip6: Ipv6Addr,
    /// R2's address on the narrow link, 10.77.2.2.
    pub r2_r1_ip: Ipv4Addr,
    /// R2's IPv6 address on the narrow link, fd00:77:2::2.
    pub r2_r1_ip6: Ipv6Addr,
    /// R2's address towards B, 10.77.3.1: B's gateway.
    pub r2_ip: Ipv4Addr,
    /// R2's IPv6 address towards B, fd00:77:3::1: B's IPv6 gateway.
    pub r2_ip6: Ipv6Addr,
    /// B's address, 10.77.3.2.
    pub b_ip: Ipv4Addr,
    /// B's IPv6 address, fd00:77:3::2.
    pub b_ip6: Ipv6Addr,
    /// Prefix length of every IPv4 subnet of the lab (24).
    pub prefix_len: u8,
    /// Prefix length of every IPv6 subnet of the lab (64).
    pub prefix6_len: u8,
    /// MTU of the A–R1 and R2–B links.
    pub mtu: u32,
    /// MTU of the R1–R2 link: the path MTU between A and B.
    pub small_mtu: u32,
}

impl RoutedLab {
    /// Create a routed lab with the default [`RoutedConfig`].
    pub fn create(tag: &str) -> Result<RoutedLab, LabError> {
        RoutedLab::with_config(RoutedConfig::new(tag))
    }

    /// Create a routed lab.
    pub fn with_config(config: RoutedConfig) -> Result<RoutedLab, LabError> {
        check_preconditions()?;
        if config.small_mtu < IPV6_MIN_MTU || config.mtu < IPV6_MIN_MTU {
            return Err(LabError::InvalidConfig(format!(
                "a routed lab carries IPv6, whose links need an MTU of {IPV6_MIN_MTU} at least: mtu {}, small_mtu {}",
                config.mtu, config.small_mtu
            )));
        }
        remove_stale_labs();
        let name = unique_name(&config.tag);
        let v4 = |c, d| Ipv4Addr::new(10, 77, c, d);
        let v6 = |net, host| Ipv6Addr::new(0xfd00, 0x77, net, 0, 0, 0, 0, host);
        let lab = RoutedLab {
            a_ns: format!("{name}-a"),
            r1_ns: format!("{name}-r1"),
            r2_ns: format!("{name}-r2"),
            b_ns: format!("{name}-b"),
            a_if: "bx0".into(),
            r1_a_if: "r1a".into(),
            r1_r2_if: "r1r2".into(),
            r2_r1_if: "r2r1".into(),
            r2_b_if: "r2b".into(),
            b_if: "px0".into(),
            a_ip: v4(0, 2),
            a_ip6: v6(0, 2),
            a_mac: [0x02, 0, 0, 0x77, 0, 0x02],
            r1_ip: v4(0, 1),
            r1_ip6: v6(0, 1),
            r1_mac: [0x02, 0, 0, 0x77, 0, 0x01],
            r1_link_local: eui64_link_local([0x02, 0, 0, 0x77, 0, 0x01]),
            r1_r2_ip: v4(2, 1),
            r1_r2_ip6: v6(2, 1),
            r2_r1_ip: v4(2, 2),
            r2_r1_ip6: v6(2, 2),
            r2_ip: v4(3, 1),
            r2_ip6: v6(3, 1),
            b_ip: v4(3, 2),
            b_ip6: v6(3, 2),
            prefix_len: 24,
            prefix6_len: 64,
            mtu: config.mtu,
            small_mtu: config.small_mtu,
        };
        // From here on, dropping `lab` cleans up whatever was created.
        lab.build(&config)?;
        Ok(lab)
    }

    fn build(&self, config: &RoutedConfig) -> Result<(), LabError> {
        for ns in self.namespaces() {
            run(Command::new("ip").args(["netns", "add", ns]))?;
        }
        in_namespace(&self.a_ns, disable_ipv6)??;
        // Before the veths exist, so that their ends start with the quiet defaults.
        for ns in [&self.r1_ns, &self.r2_ns, &self.b_ns] {
            in_namespace(ns, || quiet_ipv6(&[]))??;
        }

        let (queues, mtu, small) = (config.queues.to_string(), self.mtu.to_string(), self.small_mtu.to_string());
        let (a_mac, r1_mac) = (mac_string(self.a_mac), mac_string(self.r1_mac));
        #[rustfmt::skip]
        self.ip_a(&[
            "link", "add", &self.a_if, "address", &a_mac, "mtu", &mtu,
            "numrxqueues", &queues, "numtxqueues", &queues,
            "type", "veth", "peer", "name", &self.r1_a_if, "address", &r1_mac, "mtu", &mtu,
            "numrxqueues", &queues, "numtxqueues", &queues, "netns", &self.r1_ns,
        ])?;
        #[rustfmt::skip]
        self.ip_r1(&[
            "link", "add", &self.r1_r2_if, "address", "02:00:00:77:02:01", "mtu", &small,
            "type", "veth", "peer", "name", &self.r2_r1_if, "address", "02:00:00:77:02:02", "mtu", &small,
            "netns", &self.r2_ns,
        ])?;
        #[rustfmt::skip]
        self.ip_r2(&[
            "link", "add", &self.r2_b_if, "address", "02:00:00:77:03:01", "mtu", &mtu,
            "type", "veth", "peer", "name", &self.b_if, "address", "02:00:00:77:03:02", "mtu", &mtu,
            "netns", &self.b_ns,
        ])?;

        let (r1_ifs, r2_ifs, b_if) = ([&*self.r1_a_if, &self.r1_r2_if], [&*self.r2_r1_if, &self.r2_b_if], &self.b_if);
        in_namespace(&self.r1_ns, || quiet_ipv6(&r1_ifs).and_then(|()| router()))??;
        in_namespace(&self.r2_ns, || quiet_ipv6(&r2_ifs).and_then(|()| router()))??;
        in_namespace(&self.b_ns, || quiet_ipv6(&[b_if]))??;
        // R1's link-local address is then the EUI-64 one `r1_link_local` names.
        self.ip_r1(&["link", "set", "dev", &self.r1_a_if, "addrgenmode", "eui64"])?;

        let addresses: [(&str, &str, IpAddr, IpAddr); 5] = [
            (&self.r1_ns, &self.r1_a_if, self.r1_ip.into(), self.r1_ip6.into()),
            (&self.r1_ns, &self.r1_r2_if, self.r1_r2_ip.into(), self.r1_r2_ip6.into()),
            (&self.r2_ns, &self.r2_r1_if, self.r2_r1_ip.into(), self.r2_r1_ip6.into()),
            (&self.r2_ns, &self.r2_b_if, self.r2_ip.into(), self.r2_ip6.into()),
            (&self.b_ns, &self.b_if, self.b_ip.into(), self.b_ip6.into()),
        ];
        for (ns, iface, ip, ip6) in addresses {
            ip_in(ns, &["addr", "add", &format!("{ip}/{}", self.prefix_len), "dev", iface])?;
            ip_in(ns, &["-6", "addr", "add", &format!("{ip6}/{}", self.prefix6_len), "dev", iface, "nodad"])?;
        }
        let links: [(&str, &[&str]); 4] =
            [(&self.a_ns, &[&self.a_if]), (&self.r1_ns, &r1_ifs), (&self.r2_ns, &r2_ifs), (&self.b_ns, &[b_if])];
        for (ns, ifaces) in links {
            for iface in ["lo"].iter().chain(ifaces) {
                ip_in(ns, &["link", "set", iface, "up"])?;
            }
        }

        // Routes, once the links are up and their gateways on-link.
        let net = |ip: Ipv4Addr| format!("{}/{}", Ipv4Addr::from(u32::from(ip) & !0xff), self.prefix_len);
        let net6 =
            |ip: Ipv6Addr| format!("{}/{}", Ipv6Addr::from(u128::from(ip) & !u128::from(u64::MAX)), self.prefix6_len);
        let routes = [
            (&self.r1_ns, net(self.b_ip), self.r2_r1_ip.to_string()),
            (&self.r1_ns, net6(self.b_ip6), self.r2_r1_ip6.to_string()),
            (&self.r2_ns, net(self.a_ip), self.r1_r2_ip.to_string()),
            (&self.r2_ns, net6(self.a_ip6), self.r1_r2_ip6.to_string()),
            (&self.b_ns, "default".to_string(), self.r2_ip.to_string()),
            (&self.b_ns, "default".to_string(), self.r2_ip6.to_string()),
        ];
        for (ns, to, via) in &routes {
            let family = if via.contains(':') { "-6" } else { "-4" };
            ip_in(ns, &[family, "route", "add", to, "via", via])?;
        }

        let r1_a_if = self.r1_a_if.clone();
        in_namespace(&self.r1_ns, || netdev::segmentation_offloads_off(&r1_a_if))??;
        let b_if = self.b_if.clone();
        in_namespace(&self.b_ns, || netdev::segmentation_offloads_off(&b_if))??;
        for (ns, ifaces) in &links[1..] {
            wait_for_ipv6(ns, ifaces)?;
        }
        Ok(())
    }

    /// Return the four namespaces, from A to B.
    pub fn namespaces(&self) -> [&str; 4] {
        [&self.a_ns, &self.r1_ns, &self.r2_ns, &self.b_ns]
    }

    /// Run `f` on a thread inside A's namespace (the bypass side) and return its result.
    pub fn in_a<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.a_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run `f` on a thread inside R1's namespace and return its result.
    pub fn in_r1<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.r1_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run `f` on a thread inside R2's namespace and return its result.
    pub fn in_r2<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.r2_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run `f` on a thread inside B's namespace (the kernel peer) and return its result.
    pub fn in_b<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.b_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Return a command that runs `program` inside A's namespace.
    pub fn a_cmd(&self, program: &str) -> Command {
        netns_exec(&self.a_ns, program)
    }

    /// Return a command that runs `program` inside R1's namespace.
    pub fn r1_cmd(&self, program: &str) -> Command {
        netns_exec(&self.r1_ns, program)
    }

    /// Return a command that runs `program` inside R2's namespace.
    pub fn r2_cmd(&self, program: &str) -> Command {
        netns_exec(&self.r2_ns, program)
    }

    /// Return a command that runs `program` inside B's namespace.
    pub fn b_cmd(&self, program: &str) -> Command {
        netns_exec(&self.b_ns, program)
    }

    /// Run `ip ARGS` in A's namespace; return its standard output.
    pub fn ip_a(&self, args: &[&str]) -> Result<String, LabError> {
        ip_in(&self.a_ns, args)
    }

    /// Run `ip ARGS` in R1's namespace; return its standard output.
    pub fn ip_r1(&self, args: &[&str]) -> Result<String, LabError> {
        ip_in(&self.r1_ns, args)
    }

    /// Run `ip ARGS` in R2's namespace; return its standard output.
    pub fn ip_r2(&self, args: &[&str]) -> Result<String, LabError> {
        ip_in(&self.r2_ns, args)
    }

    /// Run `ip ARGS` in B's namespace; return its standard output.
    pub fn ip_b(&self, args: &[&str]) -> Result<String, LabError> {
        ip_in(&self.b_ns, args)
    }
}

impl Drop for RoutedLab {
    fn drop(&mut self) {
        for ns in self.namespaces().into_iter().rev() {
            // A failed build leaves some of them uncreated.
            if !Path::new(&format!("/var/run/netns/{ns}")).exists() {
                continue;
            }
            if let Err(e) = run(Command::new("ip").args(["netns", "del", ns])) {
                eprintln!("lab cleanup: {e}");
            }
        }
    }
}

/// Send one ICMP echo request to `addr` from the calling thread's namespace and wait up to
/// `timeout` for the reply (what `ping -c1 -W` does, without needing iputils-ping); return
/// the round-trip time. Needs root (a raw ICMP socket).
pub fn ping(addr: Ipv4Addr, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::KernelDefault, connect: false, report_errors: false };
    echo(IpAddr::V4(addr), &PING_PAYLOAD, options, timeout)
}

/// Send one ICMPv6 echo request to `addr` from the calling thread's namespace and wait up to
/// `timeout` for the reply; return the round-trip time. Like [`ping`], this needs root: it
/// uses a raw ICMPv6 socket, because a datagram one (`socket(AF_INET6, SOCK_DGRAM,
/// IPPROTO_ICMPV6)`) needs `net.ipv4.ping_group_range` to hold the caller's group, root
/// included, and every new namespace starts with the empty range `1 0`. The socket is
/// connected to `addr`, so only messages from `addr` reach it.
///
/// A link-local `addr` needs a scope, which this does not take: ping a global address.
pub fn ping6(addr: Ipv6Addr, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::KernelDefault, connect: true, report_errors: false };
    echo(IpAddr::V6(addr), &PING_PAYLOAD, options, timeout)
}

/// Send one echo request with `payload` bytes of payload (a byte pattern) to `addr`, letting
/// the kernel fragment it, and wait up to `timeout` for a reply that carries the same
/// payload; return the round-trip time.
///
/// The socket sets `IP_MTU_DISCOVER = IP_PMTUDISC_DONT` or `IPV6_MTU_DISCOVER =
/// IPV6_PMTUDISC_DONT`: a request larger than the MTU leaves in fragments (over IPv4 with DF
/// clear, so routers may fragment it further) instead of failing with `EMSGSIZE`, and the
/// kernel reassembles the reply. Over IPv6 routers never fragment: a request whose fragments
/// are larger than the path MTU draws an ICMPv6 Packet Too Big, which comes back as an error
/// whose `raw_os_error()` is `EMSGSIZE`; the kernel has then learned the path MTU, and the
/// next request is fragmented to fit. ICMP errors about the request end the wait with their
/// error (`IP_RECVERR` / `IPV6_RECVERR`). At most 65507 payload bytes over IPv4, 65527 over
/// IPv6.
pub fn ping_sized(addr: IpAddr, payload: usize, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::Fragment, connect: true, report_errors: true };
    echo(addr, &echo_payload(addr, payload)?, options, timeout)
}

/// Send one echo request with `payload` bytes of payload to `addr` that must not be
/// fragmented, and wait up to `timeout` for its reply; return the round-trip time.
///
/// The socket sets `IP_PMTUDISC_DO` / `IPV6_PMTUDISC_DO` (over IPv4 the request carries DF)
/// and `IP_RECVERR` / `IPV6_RECVERR`. A request larger than the path MTU the kernel knows
/// fails at once, and one that a router cannot forward draws an ICMP "fragmentation needed"
/// or ICMPv6 "packet too big", which the kernel records as the route's path MTU (`ip route
/// get` shows it as `mtu`) and returns here: both are errors whose `raw_os_error()` is
/// `EMSGSIZE`. Other ICMP errors about the request end the wait with their error too.
pub fn ping_dont_fragment(addr: IpAddr, payload: usize, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::DontFragment, connect: true, report_errors: true };
    echo(addr, &echo_payload(addr, payload)?, options, timeout)
}

/// The payload of [`ping`] and [`ping6`].
const PING_PAYLOAD: [u8; 32] = *b"bypass testlab ping 0123456789ab";

/// What an echo socket does about fragmentation (`IP_MTU_DISCOVER` / `IPV6_MTU_DISCOVER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pmtu {
    /// Leave the socket's default (`IP_PMTUDISC_WANT`).
    KernelDefault,
    /// `IP_PMTUDISC_DONT` / `IPV6_PMTUDISC_DONT`: fragment locally, DF clear.
    Fragment,
    /// `IP_PMTUDISC_DO` / `IPV6_PMTUDISC_DO`: never fragment, DF set.
    DontFragment,
}

/// How [`echo`] sets up its socket.
#[derive(Clone, Copy, Debug)]
struct EchoOptions {
    pmtu: Pmtu,
    /// Connect the socket to the destination: the kernel then passes it only messages from
    /// there, and ICMP errors only about datagrams sent there.
    connect: bool,
    /// Set `IP_RECVERR` / `IPV6_RECVERR` and return the first ICMP error as the result.
    report_errors: bool,
}

/// Return a payload of `len` bytes for an echo request to `addr`, checking that it fits in
/// one IP datagram.
fn echo_payload(addr: IpAddr, len: usize) -> io::Result<Vec<u8>> {
    // 65535 minus the IPv4 header and the ICMP header; IPv6's payload length excludes its header.
    let max = if addr.is_ipv4() { 65535 - 20 - 8 } else { 65535 - 8 };
    if len > max {
        let message = format!("an echo request to {addr} carries at most {max} bytes of payload, not {len}");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
    }
    let salt = SEQUENCE.load(Ordering::Relaxed);
    Ok((0..len as u32).map(|i| (i.wrapping_mul(31) ^ (i >> 8) ^ salt) as u8).collect())
}

/// Sequence numbers of the echo requests this process sends.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// Send one echo request to `addr` with `payload` and wait up to `timeout` for its reply.
fn echo(addr: IpAddr, payload: &[u8], options: EchoOptions, timeout: Duration) -> io::Result<Duration> {
    let socket = sys::IcmpSocket::open(addr.is_ipv6())?;
    let (level, discover, recverr, dont, always) = match addr {
        IpAddr::V4(_) => {
            (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_RECVERR, libc::IP_PMTUDISC_DONT, libc::IP_PMTUDISC_DO)
        }
        IpAddr::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_RECVERR,
            libc::IPV6_PMTUDISC_DONT,
            libc::IPV6_PMTUDISC_DO,
        ),
    };
    match options.pmtu {
        Pmtu::KernelDefault => {}
        Pmtu::Fragment => socket.set_int(level, discover, dont)?,
        Pmtu::DontFragment => socket.set_int(level, discover, always)?,
    }
    if options.report_errors {
        socket.set_int(level, recverr, 1)?;
    }
    if options.connect {
        socket.connect(addr)?;
    }
    // Raw ICMP sockets see every ICMP message to this host: match ours by id and sequence.
    let id = (std::process::id() & 0xffff) as u16;
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed) as u16;
    let echo = etherparse::IcmpEchoHeader { id, seq };
    let mut request = match addr {
        IpAddr::V4(_) => etherparse::Icmpv4Header::with_checksum(etherparse::Icmpv4Type::EchoRequest(echo), payload)
            .to_bytes()
            .to_vec(),
        // The kernel fills in the checksum of ICMPv6 sent on a raw socket (RFC 3542, 3.1).
        IpAddr::V6(_) => etherparse::Icmpv6Header::new(etherparse::Icmpv6Type::EchoRequest(echo)).to_bytes().to_vec(),
    };
    request.extend_from_slice(payload);
    let start = Instant::now();
    socket.send_to(&request, addr)?;
    let mut buf = vec![0u8; 65536 + 64];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no echo reply from {addr} in {timeout:?}")));
        }
        let Some(n) = socket.recv(&mut buf, left)? else { continue };
        if is_echo_reply(addr, &buf[..n], echo, payload) {
            return Ok(start.elapsed());
        }
    }
}

/// Return whether `message`, as a raw ICMP socket received it, is the reply from `from` to the
/// echo request `echo` carrying `payload`.
fn is_echo_reply(from: IpAddr, message: &[u8], echo: etherparse::IcmpEchoHeader, payload: &[u8]) -> bool {
    match from {
        IpAddr::V4(from) => {
            // A raw IPv4 socket receives the IP header too.
            let Ok(ip) = etherparse::Ipv4Slice::from_slice(message) else { return false };
            if ip.header().source_addr() != from {
                return false;
            }
            let Ok(icmp) = etherparse::Icmpv4Slice::from_slice(ip.payload().payload) else { return false };
            icmp.icmp_type() == etherparse::Icmpv4Type::EchoReply(echo) && icmp.payload() == payload
        }
        // A raw IPv6 socket receives the ICMPv6 message alone; connected, only from `from`.
        IpAddr::V6(_) => {
            let Ok(icmp) = etherparse::Icmpv6Slice::from_slice(message) else { return false };
            icmp.icmp_type() == etherparse::Icmpv6Type::EchoReply(echo) && icmp.payload() == payload
        }
    }
}

/// Run `f` on a new thread that first enters the network namespace `ns`.
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path).map_err(|source| LabError::Io { what: format!("open {path}"), source })?;
    std::thread::scope(|scope| {
        let thread = scope.spawn(move || {
            sys::enter_netns(&file).map_err(|source| LabError::Io { what: format!("enter namespace {ns}"), source })?;
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

/// Turn IPv6 on in the calling thread's namespace, quietly: for `all`, `default` and each of
/// `ifaces`, no duplicate address detection (addresses are usable at once; `all` counts too,
/// the kernel skips DAD only when both are 0), no router solicitations and no router
/// advertisements accepted.
fn quiet_ipv6(ifaces: &[&str]) -> Result<(), LabError> {
    for conf in ["all", "default"].iter().chain(ifaces) {
        for (key, value) in
            [("accept_dad", "0"), ("router_solicitations", "0"), ("accept_ra", "0"), ("disable_ipv6", "0")]
        {
            sysctl(&format!("net/ipv6/conf/{conf}/{key}"), value)?;
        }
    }
    Ok(())
}

/// Wait until every interface of `ifaces` in namespace `ns` has its link-local address and no
/// address is still tentative. Even without duplicate address detection the kernel finishes
/// an address's setup on a work queue after the link comes up, and until then it neither uses
/// the address nor sends neighbour solicitations from the interface.
fn wait_for_ipv6(ns: &str, ifaces: &[&str]) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    for iface in ifaces {
        loop {
            let addrs = ip_in(ns, &["-6", "addr", "show", "dev", iface])?;
            if addrs.contains("scope link") && !addrs.contains("tentative") {
                break;
            }
            if Instant::now() > deadline {
                return Err(LabError::Io {
                    what: format!("wait for the IPv6 addresses of {iface} in {ns} to be ready: {addrs}"),
                    source: io::ErrorKind::TimedOut.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

/// Make the calling thread's namespace a router: forward IPv4 and IPv6, and send every ICMP
/// error (no rate limit), so that each datagram too large for the next link draws its own
/// "fragmentation needed" or "packet too big".
fn router() -> Result<(), LabError> {
    for (key, value) in [
        ("net/ipv4/ip_forward", "1"),
        ("net/ipv6/conf/all/forwarding", "1"),
        ("net/ipv4/icmp_ratelimit", "0"),
        ("net/ipv6/icmp/ratelimit", "0"),
    ] {
        sysctl(key, value)?;
    }
    Ok(())
}

/// Write `value` to the sysctl `key` (a path under `/proc/sys`) of the calling thread's
/// namespace.
fn sysctl(key: &str, value: &str) -> Result<(), LabError> {
    let path = format!("/proc/sys/{key}");
    fs::write(&path, value).map_err(|source| LabError::Io { what: format!("write {value} to {path}"), source })
}

/// Return the link-local address the kernel derives from `mac` (modified EUI-64, RFC 4291
/// appendix A).
fn eui64_link_local(mac: [u8; 6]) -> Ipv6Addr {
    let [a, b, c, d, e, f] = mac;
    let word = |hi: u8, lo: u8| u16::from_be_bytes([hi, lo]);
    Ipv6Addr::new(0xfe80, 0, 0, 0, word(a ^ 0x02, b), word(c, 0xff), word(0xfe, d), word(e, f))
}

/// Return a fresh lab name: the prefix, the process id (see [`remove_stale_labs`]), a counter
/// and `tag`.
fn unique_name(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric()).take(16).collect();
    format!("{PREFIX}-{}-{}-{tag}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Run `ip ARGS` in the namespace `ns`; return its standard output.
fn ip_in(ns: &str, args: &[&str]) -> Result<String, LabError> {
    run(Command::new("ip").args(["-n", ns]).args(args))
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
    use std::fs::File;
    use std::io;
    use std::net::IpAddr;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    /// Return the effective user id of the process.
    pub fn euid() -> u32 {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Move the calling thread into the network namespace `ns` (an open
    /// `/var/run/netns/NAME`). Sockets and BPF links the thread creates afterwards belong to
    /// that namespace.
    pub fn enter_netns(ns: &File) -> io::Result<()> {
        // SAFETY: plain setns(2) on a descriptor we hold open; it changes only this thread's
        // namespace.
        let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// A raw ICMP socket: `socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)` or `socket(AF_INET6,
    /// SOCK_RAW, IPPROTO_ICMPV6)`.
    pub struct IcmpSocket(OwnedFd);

    /// A socket address for `sendto(2)` and `connect(2)`.
    enum SockAddr {
        V4(libc::sockaddr_in),
        V6(libc::sockaddr_in6),
    }

    impl SockAddr {
        fn new(addr: IpAddr) -> SockAddr {
            match addr {
                IpAddr::V4(v4) => SockAddr::V4(libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: 0,
                    sin_addr: libc::in_addr { s_addr: u32::from(v4).to_be() },
                    sin_zero: [0; 8],
                }),
                IpAddr::V6(v6) => SockAddr::V6(libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: 0,
                    sin6_flowinfo: 0,
                    sin6_addr: libc::in6_addr { s6_addr: v6.octets() },
                    sin6_scope_id: 0,
                }),
            }
        }

        /// Return the pointer and length to pass to the kernel.
        fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t) {
            match self {
                SockAddr::V4(a) => ((a as *const libc::sockaddr_in).cast(), size_of::<libc::sockaddr_in>() as _),
                SockAddr::V6(a) => ((a as *const libc::sockaddr_in6).cast(), size_of::<libc::sockaddr_in6>() as _),
            }
        }
    }

    impl IcmpSocket {
        /// Open one (for IPv6 if `v6`) in the calling thread's network namespace.
        pub fn open(v6: bool) -> io::Result<IcmpSocket> {
            let (domain, protocol, what) = if v6 {
                (libc::AF_INET6, libc::IPPROTO_ICMPV6, "ICMPv6")
            } else {
                (libc::AF_INET, libc::IPPROTO_ICMP, "ICMP")
            };
            // SAFETY: socket(2) has no memory preconditions; the result is checked.
            let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("open a raw {what} socket (needs root): {e}")));
            }
            // SAFETY: `fd` is a descriptor we just opened and own.
            Ok(IcmpSocket(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// Set the integer socket option `name` at `level` to `value`.
        pub fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
            // SAFETY: `value` is a c_int valid for reads, and its size is passed alongside it.
            let rc = unsafe {
                libc::setsockopt(
                    self.0.as_raw_fd(),
                    level,
                    name,
                    (&raw const value).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
        }

        /// Connect to `addr`: receive only from there (and errors only about datagrams sent
        /// there).
        pub fn connect(&self, addr: IpAddr) -> io::Result<()> {
            let to = SockAddr::new(addr);
            let (ptr, len) = to.raw();
            // SAFETY: `ptr` points to a socket address of `len` bytes that outlives the call.
            let rc = unsafe { libc::connect(self.0.as_raw_fd(), ptr, len) };
            if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
        }

        /// Send `message` (an ICMP message; the kernel adds the IP header) to `addr`.
        pub fn send_to(&self, message: &[u8], addr: IpAddr) -> io::Result<()> {
            let to = SockAddr::new(addr);
            let (ptr, len) = to.raw();
            // SAFETY: `message` is valid for reads of its length; `ptr` points to a socket
            // address of `len` bytes that outlives the call.
            let n = unsafe { libc::sendto(self.0.as_raw_fd(), message.as_ptr().cast(), message.len(), 0, ptr, len) };
            if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
        }

        /// Wait up to `timeout` for a datagram; return its length, or `None` if none came.
        /// With `IP_RECVERR`/`IPV6_RECVERR` set, a pending ICMP error is returned as the error.
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
                return if e.kind() == io::ErrorKind::WouldBlock {
                    // Only the error queue is left (POLLERR): wait out the rest of the slice
                    // rather than spin on it.
                    if pfd.revents & libc::POLLIN == 0 {
                        std::thread::sleep(Duration::from_millis(1).min(timeout));
                    }
                    Ok(None)
                } else {
                    Err(e)
                };
            }
            Ok(Some(n as usize))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_addresses_follow_modified_eui64() {
        assert_eq!(eui64_link_local([0x02, 0, 0, 0x77, 0, 0x01]), "fe80::ff:fe77:1".parse::<Ipv6Addr>().unwrap());
        // RFC 4291 appendix A: the universal/local bit is inverted.
        let mac = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
        assert_eq!(eui64_link_local(mac), "fe80::211:22ff:fe33:4455".parse::<Ipv6Addr>().unwrap());
        assert_eq!(Lab::named("x").peer_link_local, eui64_link_local(Lab::named("x").peer_mac));
    }

    #[test]
    fn echo_payloads_fit_one_datagram() {
        let (v4, v6) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(echo_payload(v4, 65507).unwrap().len(), 65507);
        assert_eq!(echo_payload(v4, 65508).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(echo_payload(v6, 65527).unwrap().len(), 65527);
        assert_eq!(echo_payload(v6, 65528).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert!(echo_payload(v4, 0).unwrap().is_empty());
    }

    #[test]
    fn echo_replies_match_by_type_id_sequence_and_payload() {
        let from = IpAddr::V6("fd00:77::1".parse().unwrap());
        let echo = etherparse::IcmpEchoHeader { id: 0x1234, seq: 7 };
        let payload = b"abc";
        // Type, code, checksum (not checked here: the kernel did), id, sequence, payload.
        let reply = [129, 0, 0xa5, 0xa5, 0x12, 0x34, 0, 7, b'a', b'b', b'c'];
        assert!(is_echo_reply(from, &reply, echo, payload));
        let mut request = reply;
        request[0] = 128;
        assert!(!is_echo_reply(from, &request, echo, payload), "our own request is no reply");
        assert!(!is_echo_reply(from, &reply, etherparse::IcmpEchoHeader { seq: 8, ..echo }, payload));
        assert!(!is_echo_reply(from, &reply, echo, b"abd"));
        assert!(!is_echo_reply(from, &reply[..6], echo, payload), "truncated");

        // IPv4: the raw socket's datagram starts with the IP header.
        let packet = etherparse::PacketBuilder::ipv4([10, 77, 0, 1], [10, 77, 0, 2], 64)
            .icmpv4(etherparse::Icmpv4Type::EchoReply(echo));
        let mut datagram = Vec::new();
        packet.write(&mut datagram, payload).unwrap();
        assert!(is_echo_reply(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)), &datagram, echo, payload));
        assert!(!is_echo_reply(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3)), &datagram, echo, payload), "other source");
    }
}
