//! The namespace lab (`bypass_lab::testlab`) and the interface facts it relies on
//! (`bypass_io::netdev`): offloads set through the ethtool ioctl, ICMP echo from code, IPv6 on
//! the peer, the routed lab's path MTU discovery and fragmentation between kernels, and a lab
//! built on a machine where `ip` is the only program there is.
//!
//! Needs root: without it the tests say why they skip, except under `CI=true`, where they fail.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bypass_io::netdev::{self, NetdevError, Offload};
use bypass_lab::testlab::{
    Lab, LabConfig, LabError, RoutedConfig, RoutedLab, lab_available, ping, ping_dont_fragment, ping_sized, ping6,
};

/// Set in the child process of [`a_lab_needs_only_ip`].
const CHILD_ENV: &str = "BYPASS_IO_TEST_ONLY_IP";

/// Return where `program` is found on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// Return the offloads of `iface` in the peer's namespace, as `ethtool -k` would show them.
fn peer_offloads(lab: &Lab, iface: &str) -> Vec<(Offload, bool)> {
    lab.in_peer(|| netdev::offloads(iface)).unwrap_or_else(|e| panic!("read the offloads of {iface}: {e}"))
}

fn on(offloads: &[(Offload, bool)], which: Offload) -> bool {
    offloads.iter().find(|(o, _)| *o == which).map(|(_, on)| *on).unwrap()
}

#[test]
fn offloads_are_read_and_set_through_the_ioctl() {
    if !lab_available("offloads_are_read_and_set_through_the_ioctl") {
        return;
    }
    let lab = Lab::with_config(LabConfig { offloads_off: false, ..LabConfig::new("offloads") }).unwrap();
    let iface = lab.peer_if.clone();
    // A veth's defaults: checksumming, scatter-gather, TSO and GSO on.
    let defaults = peer_offloads(&lab, &iface);
    for o in [Offload::TxChecksum, Offload::ScatterGather, Offload::Tso, Offload::Gso] {
        assert!(on(&defaults, o), "{} is on by default on a veth: {defaults:?}", o.name());
    }
    lab.in_peer(|| netdev::segmentation_offloads_off(&iface)).unwrap();
    let off = peer_offloads(&lab, &iface);
    for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
        assert!(!on(&off, o), "{} is off: {off:?}", o.name());
    }
    assert!(on(&off, Offload::ScatterGather), "scatter-gather was not touched: {off:?}");
    // And back, checksumming first (the kernel drops TSO while it is off).
    let all_on = [(Offload::TxChecksum, true), (Offload::Tso, true), (Offload::Gso, true)];
    lab.in_peer(|| netdev::set_offloads(&iface, &all_on)).unwrap();
    assert_eq!(peer_offloads(&lab, &iface), defaults, "the defaults are back");

    // The driver and its statistics (`ethtool -i`, `ethtool -S`).
    assert_eq!(lab.in_peer(|| netdev::driver(&iface)).unwrap(), "veth");
    let stats = lab.in_peer(|| netdev::stats(&iface)).unwrap();
    assert!(stats.iter().any(|(name, _)| name == "peer_ifindex"), "veth's statistics: {stats:?}");
    assert!(stats.iter().any(|(name, _)| name.starts_with("rx_queue_0_")), "per-queue statistics: {stats:?}");
}

#[test]
fn offload_errors_name_the_interface_and_what_to_do() {
    if !lab_available("offload_errors_name_the_interface_and_what_to_do") {
        return;
    }
    let err = netdev::offload("bxt-nosuch0", Offload::Tso).unwrap_err();
    assert!(matches!(err, NetdevError::Ioctl { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("bxt-nosuch0") && message.contains("no such interface"), "{message}");
    assert!(std::error::Error::source(&err).is_some());
    // A name too long for the kernel is refused before the ioctl.
    assert!(netdev::offload("an-interface-name-longer-than-ifnamsiz", Offload::Gso).is_err());
}

#[test]
fn ping_from_code_reaches_the_peer() {
    if !lab_available("ping_from_code_reaches_the_peer") {
        return;
    }
    let lab = Lab::create("ping").unwrap();
    let rtt = lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(2))).expect("the peer answers its own address");
    assert!(rtt < Duration::from_secs(2));
    // Nobody has 10.77.0.9: no reply, an error that says so, after the timeout.
    let err = lab.in_peer(|| ping("10.77.0.9".parse().unwrap(), Duration::from_millis(300))).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
}

#[test]
fn a_kernel_pair_keeps_the_kernel_defaults() {
    if !lab_available("a_kernel_pair_keeps_the_kernel_defaults") {
        return;
    }
    let lab = Lab::create("kpair").unwrap();
    let pair = lab.add_kernel_pair(1500).unwrap();
    // The first pair's peer end has its offloads off, the second pair's the defaults.
    let first = peer_offloads(&lab, &lab.peer_if);
    let second = peer_offloads(&lab, &pair.peer_if);
    assert!(!on(&first, Offload::Tso) && on(&second, Offload::Tso), "px0 {first:?}, pk0 {second:?}");
    assert!(on(&lab.in_bypass(|| netdev::offloads(&pair.bypass_if)).unwrap(), Offload::Gso));

    // Kernel TCP across it, peer -> bypass side, with a transfer large enough for super-packets.
    let listener = lab.in_bypass(|| TcpListener::bind((pair.bypass_ip, 5001))).unwrap();
    let stream = lab.in_peer(|| TcpStream::connect((pair.bypass_ip, 5001))).unwrap();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4093) as u8).collect();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut stream = stream;
            stream.write_all(&data).unwrap();
        });
        let (mut conn, from) = listener.accept().unwrap();
        assert_eq!(from.ip(), std::net::IpAddr::V4(pair.peer_ip));
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert!(got == data, "{} of {} bytes, first difference somewhere", got.len(), data.len());
    });
}

/// The lab on a machine without `ethtool` or `ping`: a child process of this test binary runs
/// [`a_lab_needs_only_ip`] again with `PATH` holding only `ip`.
#[test]
fn a_lab_needs_only_ip() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: nothing but `ip` can be found.
        for program in ["ethtool", "ping", "tshark", "tcpdump"] {
            let err = Command::new(program).arg("--version").output().unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "`{program}` is out of reach");
        }
        assert!(lab_available("a_lab_needs_only_ip (child)"));
        let lab = Lab::create("onlyip").expect("a lab with only `ip` on PATH");
        let offloads = peer_offloads(&lab, &lab.peer_if);
        for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
            assert!(!on(&offloads, o), "{} is off on the peer: {offloads:?}", o.name());
        }
        lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(2))).expect("ping from code");
        let pair = lab.add_kernel_pair(1500).expect("the default-offloads pair");
        lab.in_peer(|| ping(pair.bypass_ip, Duration::from_secs(2))).expect("ping across the kernel pair");
        let routed = RoutedLab::create("onlyiprouted").expect("a routed lab with only `ip` on PATH");
        routed.in_b(|| ping6(routed.r1_ip6, Duration::from_secs(2))).expect("ping6 from code, through both routers");
        return;
    }
    if !lab_available("a_lab_needs_only_ip") {
        return;
    }
    let ip = which("ip").expect("`ip` is on PATH");
    let dir = std::env::temp_dir().join(format!("bypass-only-ip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&ip, dir.join("ip")).unwrap();
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args(["--exact", "a_lab_needs_only_ip", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env("PATH", &dir)
        .output()
        .expect("run the child");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child (PATH={}) failed:\n{stdout}\n{}",
        Path::new(&dir).display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// IPv6 on the peer
// ---------------------------------------------------------------------------------------------

/// Return the sysctl `key` (a path under `/proc/sys`) of the calling thread's namespace.
fn sysctl(key: &str) -> String {
    let path = format!("/proc/sys/{key}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}")).trim().to_string()
}

/// Return the kernel's IP counters in the calling thread's namespace: `/proc/net/snmp` as
/// `Ip.ReasmOKs`, `Icmp.OutMsgs`, ..., and `/proc/net/snmp6` as `Ip6ReasmOKs`, ...
fn snmp() -> BTreeMap<String, u64> {
    // `/proc/net` is the process's namespace; `/proc/thread-self/net` this thread's.
    let read = |file: &str| {
        let path = format!("/proc/thread-self/net/{file}");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    };
    let mut counters = BTreeMap::new();
    let v4 = read("snmp");
    let lines: Vec<&str> = v4.lines().collect();
    // Pairs of lines: "Ip: Forwarding DefaultTTL ..." then "Ip: 1 64 ...".
    for pair in lines.chunks(2) {
        let (Some((proto, names)), Some((_, values))) =
            (pair[0].split_once(':'), pair.get(1).and_then(|l| l.split_once(':')))
        else {
            continue;
        };
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(value) = value.parse() {
                counters.insert(format!("{proto}.{name}"), value);
            }
        }
    }
    for line in read("snmp6").lines() {
        let mut words = line.split_whitespace();
        if let (Some(name), Some(Ok(value))) = (words.next(), words.next().map(str::parse)) {
            counters.insert(name.to_string(), value);
        }
    }
    counters
}

/// Return how much counter `name` grew from `before` to `after`.
fn grew(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, name: &str) -> u64 {
    let get = |c: &BTreeMap<String, u64>| *c.get(name).unwrap_or_else(|| panic!("no counter {name}"));
    get(after) - get(before)
}

#[test]
fn ipv6_on_the_peer_is_opt_in_and_quiet() {
    if !lab_available("ipv6_on_the_peer_is_opt_in_and_quiet") {
        return;
    }
    // By default both sides have IPv6 disabled, as before.
    let plain = Lab::create("noipv6").unwrap();
    assert_eq!(plain.in_peer(|| sysctl(&format!("net/ipv6/conf/{}/disable_ipv6", plain.peer_if))), "1");
    let err = plain.in_peer(|| ping6(plain.peer_ip6, Duration::from_millis(300))).unwrap_err();
    assert_ne!(err.kind(), std::io::ErrorKind::TimedOut, "without IPv6 the peer fails at once: {err}");
    drop(plain);

    let created = Instant::now();
    let lab = Lab::with_config(LabConfig { ipv6: true, ..LabConfig::new("ipv6") }).unwrap();
    assert_eq!(
        (lab.bypass_ip6, lab.peer_ip6, lab.peer_link_local, lab.prefix6_len),
        ("fd00:77::2".parse().unwrap(), "fd00:77::1".parse().unwrap(), "fe80::ff:fe77:1".parse().unwrap(), 64)
    );
    let addrs = lab.ip_peer(&["-6", "addr", "show", "dev", &lab.peer_if]).unwrap();
    for addr in [lab.peer_ip6, lab.peer_link_local] {
        assert!(addrs.contains(&format!("inet6 {addr}/64")), "{addr} on {}: {addrs}", lab.peer_if);
    }
    assert!(!addrs.contains("tentative"), "no address waits for duplicate address detection: {addrs}");
    // The bypass side's kernel still has no IPv6, so it cannot answer for fd00:77::2.
    assert_eq!(lab.in_bypass(|| sysctl(&format!("net/ipv6/conf/{}/disable_ipv6", lab.bypass_if))), "1");
    assert_eq!(lab.ip_bypass(&["-6", "addr", "show"]).unwrap().trim(), "", "no IPv6 address on the bypass side");

    let rtt = lab.in_peer(|| ping6(lab.peer_ip6, Duration::from_secs(2))).expect("the peer answers itself over IPv6");
    assert!(rtt < Duration::from_secs(2));
    for addr in [IpAddr::V6(lab.peer_ip6), IpAddr::V4(lab.peer_ip)] {
        lab.in_peer(|| ping_sized(addr, 4000, Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("a 4000-byte echo to {addr}: {e}"));
    }
    let too_big = lab.in_peer(|| ping_sized(IpAddr::V4(lab.peer_ip), 65508, Duration::from_secs(1))).unwrap_err();
    assert_eq!(too_big.kind(), std::io::ErrorKind::InvalidInput, "{too_big}");

    // A second after the link came up (router solicitations wait up to rtr_solicit_delay, 1 s),
    // the peer has sent no router solicitation and no neighbour solicitation (a DAD probe).
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(created.elapsed()));
    let counters = lab.in_peer(snmp);
    assert_eq!(counters["Icmp6OutRouterSolicits"], 0, "{counters:?}");
    assert_eq!(counters["Icmp6OutNeighborSolicits"], 0, "{counters:?}");
    eprintln!("MLDv2 reports the peer sent on link up: {}", counters["Icmp6OutMLDv2Reports"]);

    // Nobody has fd00:77::9: no reply (the peer's neighbour solicitations go unanswered).
    let err = lab.in_peer(|| ping6("fd00:77::9".parse().unwrap(), Duration::from_millis(300))).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
}

// ---------------------------------------------------------------------------------------------
// The routed lab
// ---------------------------------------------------------------------------------------------

/// A kernel address on A's interface with a route to B through R1, for as long as it lives, so
/// that A's kernel can stand in for the stack; removed on drop, whatever the test does.
struct KernelOnA<'a> {
    lab: &'a RoutedLab,
    v6: bool,
}

impl<'a> KernelOnA<'a> {
    /// 10.77.0.9/24 on A, route to B's subnet via R1.
    fn v4(lab: &'a RoutedLab) -> KernelOnA<'a> {
        let guard = KernelOnA { lab, v6: false };
        lab.ip_a(&["-4", "addr", "add", "10.77.0.9/24", "dev", &lab.a_if]).unwrap();
        lab.ip_a(&["-4", "route", "add", &format!("{}/24", subnet(lab.b_ip)), "via", &lab.r1_ip.to_string()]).unwrap();
        guard
    }

    /// IPv6 on in A (quietly) and fd00:77::9/64 on its interface, route to B's subnet via R1.
    fn v6(lab: &'a RoutedLab) -> KernelOnA<'a> {
        let guard = KernelOnA { lab, v6: true };
        let a_if = lab.a_if.clone();
        lab.in_a(|| {
            for conf in ["all", "lo", &a_if] {
                for (key, value) in [("accept_dad", "0"), ("router_solicitations", "0"), ("accept_ra", "0")] {
                    std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/{key}"), value).unwrap();
                }
            }
            for conf in ["lo", &a_if] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "0").unwrap();
            }
        });
        lab.ip_a(&["-6", "addr", "add", "fd00:77::9/64", "dev", &lab.a_if, "nodad"]).unwrap();
        let to = format!("{}/64", Ipv6Addr::from(u128::from(lab.b_ip6) & !u128::from(u64::MAX)));
        lab.ip_a(&["-6", "route", "add", &to, "via", &lab.r1_ip6.to_string()]).unwrap();
        guard
    }
}

impl Drop for KernelOnA<'_> {
    fn drop(&mut self) {
        let lab = self.lab;
        if self.v6 {
            // Disabling IPv6 removes its addresses and routes.
            let a_if = lab.a_if.clone();
            lab.in_a(|| {
                for conf in ["lo", &a_if] {
                    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1");
                }
            });
        } else {
            for args in
                [["-4", "route", "flush", "dev"], ["-4", "addr", "flush", "dev"], ["-4", "neigh", "flush", "dev"]]
            {
                let mut args = args.to_vec();
                args.push(&lab.a_if);
                let _ = lab.ip_a(&args);
            }
        }
    }
}

/// Return the /24 network `ip` is in.
fn subnet(ip: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ip) & !0xff)
}

/// Assert that `result` is the EMSGSIZE error of an echo request too large for the path.
fn assert_message_too_long(result: std::io::Result<Duration>, what: &str) {
    match result {
        Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {}
        other => panic!("{what}: expected EMSGSIZE, got {other:?}"),
    }
}

#[test]
fn a_routed_lab_has_four_namespaces_and_a_narrow_link() {
    if !lab_available("a_routed_lab_has_four_namespaces_and_a_narrow_link") {
        return;
    }
    // IPv6 needs 1280 on every link.
    let err = RoutedLab::with_config(RoutedConfig { small_mtu: 1200, ..RoutedConfig::new("tiny") }).unwrap_err();
    assert!(matches!(err, LabError::InvalidConfig(_)), "{err}");

    // Leftovers of a dead process go when the next lab is made: a namespace named after a pid
    // that has exited.
    let mut child = Command::new("ip").arg("-V").stdout(std::process::Stdio::null()).spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!("bxt-{dead}-0-stale-r1");
    let added = Command::new("ip").args(["netns", "add", &stale]).status().unwrap();
    assert!(added.success());

    let lab = RoutedLab::create("shape").unwrap();
    assert!(!Path::new(&format!("/var/run/netns/{stale}")).exists(), "{stale} was removed");
    let names: Vec<String> = lab.namespaces().iter().map(|ns| ns.to_string()).collect();
    for ns in &names {
        assert!(Path::new(&format!("/var/run/netns/{ns}")).exists(), "{ns}");
    }
    for (ns, iface, mtu) in [
        (&lab.a_ns, &lab.a_if, lab.mtu),
        (&lab.r1_ns, &lab.r1_a_if, lab.mtu),
        (&lab.r1_ns, &lab.r1_r2_if, lab.small_mtu),
        (&lab.r2_ns, &lab.r2_r1_if, lab.small_mtu),
        (&lab.r2_ns, &lab.r2_b_if, lab.mtu),
        (&lab.b_ns, &lab.b_if, lab.mtu),
    ] {
        let out = Command::new("ip").args(["-n", ns, "link", "show", "dev", iface]).output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(out.contains(&format!(" mtu {mtu} ")), "{ns} {iface}: {out}");
    }
    assert_eq!((lab.mtu, lab.small_mtu), (1500, 1400));
    let r1_addrs = lab.ip_r1(&["-6", "addr", "show", "dev", &lab.r1_a_if]).unwrap();
    for addr in [lab.r1_ip6, lab.r1_link_local] {
        assert!(r1_addrs.contains(&format!("inet6 {addr}/64")), "{addr} on R1: {r1_addrs}");
    }
    assert!(!r1_addrs.contains("tentative"), "{r1_addrs}");
    // A is the bypass side: no kernel address, IPv6 disabled.
    assert!(!lab.ip_a(&["addr", "show", "dev", &lab.a_if]).unwrap().contains("inet"));
    assert_eq!(lab.in_a(|| sysctl(&format!("net/ipv6/conf/{}/disable_ipv6", lab.a_if))), "1");
    // R1's end towards A and B's interface have their offloads off; the routers forward.
    for (offloads, iface) in [
        (lab.in_r1(|| netdev::offloads(&lab.r1_a_if)).unwrap(), &lab.r1_a_if),
        (lab.in_b(|| netdev::offloads(&lab.b_if)).unwrap(), &lab.b_if),
    ] {
        for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
            assert!(!on(&offloads, o), "{} is off on {iface}: {offloads:?}", o.name());
        }
    }
    for router in [&lab.r1_ns, &lab.r2_ns] {
        let (v4, v6, rate) = bypass_lab::testlab::in_namespace(router, || {
            (sysctl("net/ipv4/ip_forward"), sysctl("net/ipv6/conf/all/forwarding"), sysctl("net/ipv4/icmp_ratelimit"))
        })
        .unwrap();
        assert_eq!((v4.as_str(), v6.as_str(), rate.as_str()), ("1", "1", "0"), "{router}");
    }
    // Kernel to kernel, both ways through both routers, both families.
    lab.in_b(|| ping(lab.r1_ip, Duration::from_secs(2))).expect("B reaches R1's address towards A");
    lab.in_b(|| ping6(lab.r1_ip6, Duration::from_secs(2))).expect("B reaches fd00:77::1");
    lab.in_r1(|| ping(lab.b_ip, Duration::from_secs(2))).expect("R1 reaches B");
    lab.in_r1(|| ping6(lab.b_ip6, Duration::from_secs(2))).expect("R1 reaches fd00:77:3::2");

    drop(lab);
    for ns in &names {
        assert!(!Path::new(&format!("/var/run/netns/{ns}")).exists(), "{ns} was removed on drop");
    }
}

#[test]
fn a_kernel_sender_beside_a_reaches_b_through_both_routers_and_goes_with_the_lab() {
    if !lab_available("a_kernel_sender_beside_a_reaches_b_through_both_routers_and_goes_with_the_lab") {
        return;
    }
    let lab = RoutedLab::create("sender").unwrap();
    assert!(!Path::new(&format!("/var/run/netns/{}", lab.k_ns)).exists(), "A' exists only once added");
    let k = lab.add_kernel_sender().unwrap();
    assert!(Path::new(&format!("/var/run/netns/{}", lab.k_ns)).exists());
    // Its own subnet, its offloads off, IPv6 disabled, R1 its gateway.
    let addrs = Command::new("ip").args(["-n", &lab.k_ns, "addr", "show", "dev", &k.iface]).output().unwrap();
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    assert!(addrs.contains(&format!("inet {}/24", k.ip)), "{addrs}");
    assert!(addrs.contains(&format!(" mtu {} ", lab.mtu)), "{addrs}");
    let offloads = lab.in_k(|| netdev::offloads(&k.iface)).unwrap();
    for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
        assert!(!on(&offloads, o), "{} is off on {}: {offloads:?}", o.name(), k.iface);
    }
    assert_eq!(lab.in_k(|| sysctl("net/ipv6/conf/all/disable_ipv6")), "1");
    // Through R1 and R2 to B, and back (R2 routes A''s subnet via R1).
    lab.in_k(|| ping(lab.b_ip, Duration::from_secs(2))).expect("A' reaches B");
    lab.in_b(|| ping(k.ip, Duration::from_secs(2))).expect("B reaches A'");

    let k_ns = lab.k_ns.clone();
    drop(lab);
    assert!(!Path::new(&format!("/var/run/netns/{k_ns}")).exists(), "{k_ns} was removed on drop");
}

#[test]
fn a_kernel_on_the_bypass_side_learns_the_path_mtu_from_r1() {
    if !lab_available("a_kernel_on_the_bypass_side_learns_the_path_mtu_from_r1") {
        return;
    }
    let lab = RoutedLab::create("pmtu").unwrap();
    let timeout = Duration::from_secs(2);
    let (b, b6) = (IpAddr::V4(lab.b_ip), IpAddr::V6(lab.b_ip6));
    let path_mtu = lab.small_mtu as usize;
    {
        let _kernel = KernelOnA::v4(&lab);
        // 1472 + 8 + 20 = 1500 bytes with DF: R1 cannot forward it onto the 1400 link and
        // answers "fragmentation needed", which the kernel returns as EMSGSIZE and records.
        assert_message_too_long(lab.in_a(|| ping_dont_fragment(b, 1472, timeout)), "a 1500-byte DF echo to B");
        let route = lab.ip_a(&["-4", "route", "get", &lab.b_ip.to_string()]).unwrap();
        assert!(route.contains(&format!("mtu {path_mtu}")), "the kernel learned the path MTU: {route}");
        // Now it refuses the same datagram itself, and one of exactly the path MTU passes.
        assert_message_too_long(lab.in_a(|| ping_dont_fragment(b, 1472, timeout)), "the same echo again");
        lab.in_a(|| ping_dont_fragment(b, path_mtu - 28, timeout)).expect("a DF echo of the path MTU passes");
    }
    assert!(!lab.ip_a(&["addr", "show", "dev", &lab.a_if]).unwrap().contains("inet"), "the kernel address is gone");
    {
        let _kernel = KernelOnA::v6(&lab);
        // 1452 + 8 + 40 = 1500 bytes: R1 answers "packet too big".
        assert_message_too_long(lab.in_a(|| ping_dont_fragment(b6, 1452, timeout)), "a 1500-byte echo to B over IPv6");
        let route = lab.ip_a(&["-6", "route", "get", &lab.b_ip6.to_string()]).unwrap();
        assert!(route.contains(&format!("mtu {path_mtu}")), "the kernel learned the IPv6 path MTU: {route}");
        lab.in_a(|| ping_dont_fragment(b6, path_mtu - 48, timeout)).expect("an IPv6 echo of the path MTU passes");
    }
    assert_eq!(lab.in_a(|| sysctl(&format!("net/ipv6/conf/{}/disable_ipv6", lab.a_if))), "1");
    assert_eq!(lab.ip_a(&["-6", "addr", "show"]).unwrap().trim(), "", "A has no IPv6 address again");
}

#[test]
fn fragments_cross_the_narrow_link_and_are_reassembled() {
    if !lab_available("fragments_cross_the_narrow_link_and_are_reassembled") {
        return;
    }
    let lab = RoutedLab::create("frag").unwrap();
    let timeout = Duration::from_secs(2);
    let counters = || (lab.in_r1(snmp), lab.in_r2(snmp), lab.in_b(snmp));

    // IPv4, B to R1 and back: B sends 1500-byte fragments (DF clear), R2 fragments them again
    // for the 1400 link, R1 reassembles, fragments its 4028-byte reply to fit, B reassembles.
    let (r1, r2, b) = counters();
    lab.in_b(|| ping_sized(IpAddr::V4(lab.r1_ip), 4000, timeout)).expect("4000 bytes each way over IPv4");
    let (r1_after, r2_after, b_after) = counters();
    assert!(grew(&b, &b_after, "Ip.FragCreates") >= 3, "B fragmented the request");
    assert!(grew(&r2, &r2_after, "Ip.FragOKs") >= 1, "R2 fragmented B's fragments for the narrow link");
    assert_eq!(grew(&r1, &r1_after, "Ip.ReasmOKs"), 1, "R1 reassembled the request");
    assert!(grew(&r1, &r1_after, "Ip.FragOKs") >= 1, "R1 fragmented the reply");
    assert_eq!(grew(&b, &b_after, "Ip.ReasmOKs"), 1, "B reassembled the reply");

    // IPv6, B to R2 on its own 1500 link: B fragments, R2 reassembles and fragments the reply.
    let (_, r2, b) = counters();
    lab.in_b(|| ping_sized(IpAddr::V6(lab.r2_ip6), 4000, timeout)).expect("4000 bytes each way over IPv6");
    let (_, r2_after, b_after) = counters();
    assert!(grew(&b, &b_after, "Ip6FragCreates") >= 3, "B fragmented the request");
    assert_eq!(grew(&r2, &r2_after, "Ip6ReasmOKs"), 1, "R2 reassembled the request");
    assert_eq!(grew(&b, &b_after, "Ip6ReasmOKs"), 1, "B reassembled the reply");

    // IPv6 across the narrow link: routers never fragment, so B's 1500-byte fragments draw a
    // Packet Too Big from R2; B learns the path MTU and fragments the next request to fit.
    let route = lab.ip_b(&["-6", "route", "get", &lab.r1_ip6.to_string()]).unwrap();
    assert!(!route.contains(" mtu "), "no path MTU known yet: {route}");
    assert_message_too_long(lab.in_b(|| ping_sized(IpAddr::V6(lab.r1_ip6), 4000, timeout)), "the first request");
    let route = lab.ip_b(&["-6", "route", "get", &lab.r1_ip6.to_string()]).unwrap();
    assert!(route.contains(&format!("mtu {}", lab.small_mtu)), "B learned the path MTU: {route}");
    let (r1, _, _) = counters();
    lab.in_b(|| ping_sized(IpAddr::V6(lab.r1_ip6), 4000, timeout)).expect("fragments that fit the path MTU");
    let (r1_after, _, _) = counters();
    assert_eq!(grew(&r1, &r1_after, "Ip6ReasmOKs"), 1, "R1 reassembled the request");
}
