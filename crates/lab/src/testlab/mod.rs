//! Throwaway network labs for tests and demos: two network namespaces joined by a veth pair
//! ([`Lab`]), or four in a row with two kernel routers and a narrow link between them
//! ([`RoutedLab`], for path MTU discovery; with a kernel sender beside the bypass side, for
//! a bottleneck both cross).
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
//! | `topology.rs` | [`Lab`] (with [`LabConfig`], [`KernelPair`]) and [`RoutedLab`] (with [`RoutedConfig`], [`KernelSender`]) |
//! | `netns.rs` | [`lab_available`], [`check_preconditions`], [`in_namespace`], [`spawn_in_namespace`], and the sysctls and `ip` commands a lab runs in a namespace |
//! | `error.rs` | [`LabError`] |
//! | `ping.rs` | [`ping`], [`ping6`], [`ping_sized`], [`ping_dont_fragment`] |
//! | `sys.rs` | the system calls: the effective user id, `setns`, [`pin_to_cpu`], the raw ICMP socket |
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

mod error;
mod netns;
mod ping;
#[allow(unsafe_code)]
mod sys;
mod topology;

pub use error::LabError;
pub use netns::{check_preconditions, in_namespace, lab_available, spawn_in_namespace};
pub use ping::{ping, ping_dont_fragment, ping_sized, ping6};
pub use sys::pin_to_cpu;
pub use topology::{KernelPair, KernelSender, Lab, LabConfig, RoutedConfig, RoutedLab};
