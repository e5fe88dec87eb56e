//! The lab topologies: two namespaces joined by a veth pair ([`Lab`]), and four in a row
//! with two kernel routers ([`RoutedLab`]); their names, and the removal of labs left
//! behind by dead processes.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use bypass_io::netdev;

use super::error::LabError;
use super::netns::{
    check_preconditions, disable_ipv6, in_namespace, ip_in, netns_exec, quiet_ipv6, router, run, wait_for_ipv6,
};

/// Prefix of every lab namespace name.
const PREFIX: &str = "bxt";

/// The smallest MTU IPv6 allows on a link (RFC 8200, section 5): below it the kernel turns
/// IPv6 off on the interface.
const IPV6_MIN_MTU: u32 = 1280;

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
/// [`RoutedLab::add_kernel_sender`] adds a fifth namespace, a kernel host `A'` beside A
/// behind R1, so that a kernel sender crosses the same R1–R2–B path as the stack.
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
    /// Namespace of the kernel host beside A, `A'` (`<name>-k`), once
    /// [`RoutedLab::add_kernel_sender`] made it.
    pub k_ns: String,
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
            k_ns: format!("{name}-k"),
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

    /// Add `A'`, a kernel host beside A behind R1 on a subnet of its own ([`KernelSender`]:
    /// namespace [`RoutedLab::k_ns`], `kx0` 10.77.1.2/24 with its offloads off and IPv6
    /// disabled, R1's `r1k` 10.77.1.1/24 its gateway, and R2 routing 10.77.1.0/24 back via
    /// R1), so that a kernel sender's segments cross the same R1–R2–B path as the stack's,
    /// in the same sizes (no TSO/GSO super-packets). It goes with the lab.
    pub fn add_kernel_sender(&self) -> Result<KernelSender, LabError> {
        let sender = self.kernel_sender();
        let mtu = self.mtu.to_string();
        run(Command::new("ip").args(["netns", "add", &self.k_ns]))?;
        in_namespace(&self.k_ns, disable_ipv6)??;
        #[rustfmt::skip]
        ip_in(&self.k_ns, &[
            "link", "add", &sender.iface, "address", "02:00:00:77:01:02", "mtu", &mtu,
            "type", "veth", "peer", "name", &sender.r1_if, "address", "02:00:00:77:01:01", "mtu", &mtu,
            "netns", &self.r1_ns,
        ])?;
        ip_in(&self.k_ns, &["addr", "add", &format!("{}/{}", sender.ip, self.prefix_len), "dev", &sender.iface])?;
        self.ip_r1(&["addr", "add", &format!("{}/{}", sender.gateway, self.prefix_len), "dev", &sender.r1_if])?;
        for iface in ["lo", &sender.iface] {
            ip_in(&self.k_ns, &["link", "set", iface, "up"])?;
        }
        self.ip_r1(&["link", "set", &sender.r1_if, "up"])?;
        ip_in(&self.k_ns, &["-4", "route", "add", "default", "via", &sender.gateway.to_string()])?;
        let subnet = format!("{}/{}", Ipv4Addr::from(u32::from(sender.ip) & !0xff), self.prefix_len);
        self.ip_r2(&["-4", "route", "add", &subnet, "via", &self.r1_r2_ip.to_string()])?;
        let iface = sender.iface.clone();
        in_namespace(&self.k_ns, || netdev::segmentation_offloads_off(&iface))??;
        let r1_if = sender.r1_if.clone();
        in_namespace(&self.r1_ns, || netdev::segmentation_offloads_off(&r1_if))??;
        Ok(sender)
    }

    /// Return the description of the host [`RoutedLab::add_kernel_sender`] adds, without
    /// adding it.
    pub fn kernel_sender(&self) -> KernelSender {
        KernelSender {
            iface: "kx0".into(),
            r1_if: "r1k".into(),
            ip: Ipv4Addr::new(10, 77, 1, 2),
            gateway: Ipv4Addr::new(10, 77, 1, 1),
        }
    }

    /// Run `f` on a thread inside `A'`'s namespace (see [`RoutedLab::add_kernel_sender`])
    /// and return its result.
    pub fn in_k<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.k_ns, f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Return a command that runs `program` inside `A'`'s namespace.
    pub fn k_cmd(&self, program: &str) -> Command {
        netns_exec(&self.k_ns, program)
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
        for ns in std::iter::once(&*self.k_ns).chain(self.namespaces().into_iter().rev()) {
            // A failed build leaves some of them uncreated, and `A'` exists only when added.
            if !Path::new(&format!("/var/run/netns/{ns}")).exists() {
                continue;
            }
            if let Err(e) = run(Command::new("ip").args(["netns", "del", ns])) {
                eprintln!("lab cleanup: {e}");
            }
        }
    }
}

/// The kernel host `A'` beside a routed lab's A (see [`RoutedLab::add_kernel_sender`]).
#[derive(Clone, Debug)]
pub struct KernelSender {
    /// Its interface, towards R1 (`kx0`).
    pub iface: String,
    /// R1's interface towards it (`r1k`).
    pub r1_if: String,
    /// Its address, 10.77.1.2.
    pub ip: Ipv4Addr,
    /// R1's address towards it, 10.77.1.1: its gateway.
    pub gateway: Ipv4Addr,
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

fn mac_string(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
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
}
