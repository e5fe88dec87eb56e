//! Network namespaces and veth pairs for tests that need root.
//!
//! [`require`] decides whether such a test runs: when a precondition is missing it fails the
//! test under `CI=true` and skips it (with the reason on stderr) otherwise. [`Netns`] creates a
//! uniquely named namespace (`bpt-<pid>-<n>-<tag>`) and deletes it on drop, so every exit path
//! of a test, panics included, cleans up; namespaces left by killed runs are removed the next
//! time one is created. [`VethPair`] builds the usual lab: a bypass side with no kernel address
//! and a kernel peer at [`PEER_ADDR`] with checksum and segmentation offloads off.
//!
//! Tests use only addresses in 10.78.0.0/24, inside namespaces they create.
#![allow(dead_code)] // Each test binary uses a different part of this module.
#![allow(unsafe_code)] // setns(2) has no safe wrapper in std.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The kernel peer's address.
pub const PEER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// The address the userspace stack owns (no kernel interface has it).
pub const STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// The prefix length of both.
pub const PREFIX_LEN: u8 = 24;
/// The bypass side's interface, in namespace `a`.
pub const STACK_IF: &str = "veth0";
/// The kernel peer's interface, in namespace `b`.
pub const PEER_IF: &str = "veth1";
/// The bypass side's MAC (locally administered).
pub const STACK_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0x02];
/// The kernel peer's MAC (locally administered).
pub const PEER_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0x01];

const PREFIX: &str = "bpt-";

/// Return why namespace tests cannot run here, or `None` when they can.
pub fn missing_precondition() -> Option<String> {
    if !is_root() {
        return Some("not running as root (namespaces and AF_PACKET need CAP_NET_ADMIN and CAP_NET_RAW)".into());
    }
    for (tool, package) in [("ip", "iproute2"), ("ethtool", "ethtool")] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` is not installed (apt-get install {package})"));
        }
    }
    None
}

/// Return whether `test` should run: `true` when root, `ip` and `ethtool` are there. Otherwise
/// panic under `CI=true` (a missing precondition is a failure there) or print why and skip.
pub fn require(test: &str) -> bool {
    let Some(why) = missing_precondition() else { return true };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}; CI must run these tests as root with iproute2 and ethtool installed");
    }
    eprintln!("skipping {test}: {why}");
    false
}

fn is_root() -> bool {
    // The effective UID is the second field of the `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)).map(|u| u == "0")
        })
        .unwrap_or(false)
}

/// Run a command; return its stdout, or an error carrying its stderr.
pub fn run(program: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(program).args(args).output()?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!("`{program} {}` failed: {}", args.join(" "), stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Create a namespace named `bpt-<pid>-<n>-<tag>`, first removing any left by dead processes.
    pub fn create(tag: &str) -> io::Result<Netns> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        remove_stale();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{}-{n}-{tag}", std::process::id());
        run("ip", &["netns", "add", &name])?;
        Ok(Netns { name })
    }

    /// Return the namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `ip -n <name> <args>`.
    pub fn ip(&self, args: &[&str]) -> io::Result<String> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Run `program args` inside the namespace (`ip netns exec`).
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<String> {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Run `f` on a thread that has entered the namespace, and return its result. Sockets
    /// opened by `f` stay in the namespace wherever they are used afterwards.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns(2) takes a valid open descriptor (file lives across the call)
                // and changes only the calling thread's network namespace.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns into {path}: {}", io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Disable IPv6 in the namespace, so the kernel sends no neighbour or router solicitations.
    pub fn disable_ipv6(&self) -> io::Result<()> {
        self.enter(|| {
            for conf in ["all", "default"] {
                let path = format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6");
                if std::path::Path::new(&path).exists() {
                    std::fs::write(&path, "1")?;
                }
            }
            Ok(())
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = run("ip", &["netns", "del", &self.name]) {
            eprintln!("cleanup: {e}");
        }
    }
}

/// Delete `bpt-<pid>-...` namespaces whose process no longer exists (left by a killed run).
fn remove_stale() {
    let Ok(list) = run("ip", &["netns", "list"]) else { return };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()) else { continue };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

/// Two namespaces joined by a veth pair: `a` holds [`STACK_IF`] (up, no address, IPv6 off) for
/// the userspace stack; `b` holds [`PEER_IF`] at [`PEER_ADDR`]/24 with `tx`, `tso` and `gso`
/// offloads off, so the kernel peer sends complete checksums and no super-frames.
#[derive(Debug)]
pub struct VethPair {
    /// The bypass side.
    pub a: Netns,
    /// The kernel peer.
    pub b: Netns,
}

impl VethPair {
    /// Build the pair.
    pub fn new() -> io::Result<VethPair> {
        let a = Netns::create("a")?;
        let b = Netns::create("b")?;
        a.disable_ipv6()?;
        b.disable_ipv6()?;
        let (stack_mac, peer_mac) = (mac_string(STACK_MAC), mac_string(PEER_MAC));
        a.ip(&[
            "link",
            "add",
            STACK_IF,
            "address",
            &stack_mac,
            "type",
            "veth",
            "peer",
            "name",
            PEER_IF,
            "address",
            &peer_mac,
            "netns",
            b.name(),
        ])?;
        b.ip(&["addr", "add", &format!("{PEER_ADDR}/{PREFIX_LEN}"), "dev", PEER_IF])?;
        b.exec("ethtool", &["-K", PEER_IF, "tx", "off", "tso", "off", "gso", "off"])?;
        a.ip(&["link", "set", STACK_IF, "up"])?;
        b.ip(&["link", "set", PEER_IF, "up"])?;
        // Carrier comes up asynchronously; wait for it so the first frames are not lost.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        for (ns, iface) in [(&a, STACK_IF), (&b, PEER_IF)] {
            while !ns.ip(&["-o", "link", "show", iface])?.contains("state UP") {
                if std::time::Instant::now() > deadline {
                    return Err(io::Error::other(format!("{iface} in {} did not come up", ns.name())));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        Ok(VethPair { a, b })
    }

    /// Add a permanent neighbour entry on the peer for [`STACK_ADDR`], so it sends without ARP.
    pub fn peer_knows_stack(&self) -> io::Result<()> {
        let addr = STACK_ADDR.to_string();
        self.b.ip(&[
            "neigh",
            "replace",
            &addr,
            "lladdr",
            &mac_string(STACK_MAC),
            "dev",
            PEER_IF,
            "nud",
            "permanent",
        ])?;
        Ok(())
    }

    /// Return the counter `name` (e.g. `rx_packets`) of `iface` in namespace `ns`.
    pub fn counter(ns: &Netns, iface: &str, name: &str) -> u64 {
        // /sys shows the namespace of whoever mounted it, so read through `ip netns exec`,
        // which remounts /sys for the namespace.
        let path = format!("/sys/class/net/{iface}/statistics/{name}");
        ns.exec("cat", &[&path]).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }
}

/// Format a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn mac_string(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
