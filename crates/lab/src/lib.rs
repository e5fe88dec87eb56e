//! `bypass-lab`: what tests, demos and the `bypass` command build around the stack to watch
//! it work, none of which a program using the stack needs:
//!
//! - [`testlab`]: throwaway network labs, two network namespaces joined by a veth pair
//!   ([`testlab::Lab`], the kernel on one side) or four in a row with two kernel routers
//!   ([`testlab::RoutedLab`]); ICMP echo from code; running code inside a namespace;
//! - [`floor`]: raw AF_XDP frames bounced between a lab's two namespaces, the latency floor
//!   every other figure is read against;
//! - [`bulk_floor`]: MTU-sized raw AF_XDP frames streamed one way, the throughput floor the
//!   bulk figures are read against;
//! - [`syn_flood`]: bare SYNs from a spoofed address, sent from the peer namespace as fast as
//!   a thread can, the flood the SYN shield and SYN cookies are measured under;
//! - [`replay`]: one side of a recorded TCP conversation played against our stack on virtual
//!   time, its replies compared with the recording's; and any capture played into a stack.
//!
//! | file | what |
//! |---|---|
//! | `testlab/` | [`testlab`]: [`Lab`](testlab::Lab) and [`RoutedLab`](testlab::RoutedLab) (`topology.rs`), [`in_namespace`](testlab::in_namespace) (`netns.rs`), [`ping`](testlab::ping) and its kin (`ping.rs`), the system calls (`sys.rs`) |
//! | `floor.rs` | [`floor`]: the AF_XDP latency floor |
//! | `bulk_floor.rs` | [`bulk_floor`]: the AF_XDP throughput floor, one way, at any MTU |
//! | `syn_flood.rs` | [`syn_flood`]: a SYN flood from the peer namespace |
//! | `replay.rs` | [`replay`]: recorded conversations and captures played into the stack |
//!
//! Labs need root and `ip` (iproute2); [`testlab::lab_available`] says whether a test can run
//! (under `CI=true` a missing precondition fails it instead).
//!
//! ```no_run
//! use std::time::Duration;
//! use bypass_lab::testlab::{Lab, lab_available, ping};
//!
//! if lab_available("example") {
//!     let lab = Lab::create("example").unwrap();
//!     let rtt = lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(1))).unwrap();
//!     println!("the peer answers itself in {rtt:?}");
//! }
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bulk_floor;
pub mod floor;
pub mod replay;
pub mod syn_flood;
pub mod testlab;
