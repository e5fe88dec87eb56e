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
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`LabError`], [`lab_available`], [`check_preconditions`] |
//! | `topology.rs` | [`Lab`] (with [`LabConfig`], [`KernelPair`]) and [`RoutedLab`] (with [`RoutedConfig`]) |
//! | `netns.rs` | [`in_namespace`], and the sysctls and `ip` commands a lab runs in a namespace |
//! | `ping.rs` | [`ping`], [`ping6`], [`ping_sized`], [`ping_dont_fragment`] |
//! | `sys.rs` | the system calls: the effective user id, `setns`, the raw ICMP socket |
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

mod netns;
mod ping;
#[allow(unsafe_code)]
mod sys;
mod topology;

use std::io::{self, Write};
use std::process::Command;

use bypass_io::netdev;

pub use netns::in_namespace;
pub use ping::{ping, ping_dont_fragment, ping_sized, ping6};
pub use topology::{KernelPair, Lab, LabConfig, RoutedConfig, RoutedLab};

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
