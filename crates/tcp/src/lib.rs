//! `bypass-tcp`: TCP (RFC 9293) as a sans-IO state machine.
//!
//! This crate is everything one TCP connection needs and nothing that touches the outside
//! world: no sockets, no threads, no clock. Segments come in as parsed [`Segment`] values,
//! segments go out as bytes written into a buffer you own, and time is an [`Instant`] you
//! pass in. That makes every behaviour reproducible: the tests drive connections over a
//! simulated network (`sim`, behind the `sim` feature) on virtual time, and the host stack
//! (`bypass-stack`) drives the same code over AF_XDP.
//!
//! The time type [`Instant`] (and its module, [`time`]) comes from `bypass-device`, the
//! crate below this one, and is re-exported here: `bypass_tcp::Instant` and
//! `bypass_tcp::time::Instant` are the same type as `bypass_device::Instant`.
//!
//! | file | concern |
//! |---|---|
//! | `seq.rs` | wrapping sequence numbers |
//! | `segment.rs`, `options.rs`, `wire.rs` | the segment value, its options, parsing and emitting |
//! | `connection.rs` | the TCB and the user calls (RFC 9293 3.10.1-3.10.6) |
//! | `input.rs` | segment arrival, step by step (RFC 9293 3.10.7, RFC 5961) |
//! | `output.rs` | what to send next (windows, Nagle, SWS avoidance) |
//! | `timer.rs` | retransmission, persist, SWS override, delayed ACK, keep-alive, TIME-WAIT |
//! | `rtt.rs` | the RFC 6298 RTO |
//! | `controller.rs`, `congestion.rs`, `cubic.rs`, `hystart.rs` | congestion control: the interface, NewReno (RFC 5681), CUBIC (RFC 9438) with HyStart++ (RFC 9406) |
//! | `sent.rs`, `recovery.rs` | the segments in flight (SACK scoreboard); loss detection and recovery (RACK-TLP, RFC 8985; PRR, RFC 6937) |
//! | `buffer.rs`, `reassembly.rs` | send/receive rings; out-of-order tracking |
//! | `icmp.rs`, `path.rs` | ICMP errors (RFC 1122 4.2.3.9, RFC 5461, RFC 5927) and the path MTU (RFC 1191, RFC 8201) |
//! | `isn.rs` | initial sequence numbers (RFC 6528) |
//! | `sim.rs` | feature `sim`: the `Pair` harness, two connections over seeded lossy links on virtual time |
//!
//! # Example: a handshake and one message, by hand
//!
//! ```
//! use bypass_tcp::{Config, Connection, FourTuple, Instant, Segment, State};
//!
//! let tuple = FourTuple { local: "10.0.0.1:40000".parse().unwrap(), remote: "10.0.0.2:7".parse().unwrap() };
//! let config = Config { isn_secret: [42; 16], ..Config::default() };
//! let mut client = Connection::connect(&config, tuple, Instant::ZERO);
//! let mut server = Connection::listen(&config, tuple.remote);
//!
//! // Move every pending segment from one side to the other until both are quiet.
//! fn shuttle(now: Instant, a: &mut Connection, b: &mut Connection) {
//!     // Send one side's segments to the other; return whether any moved.
//!     fn pass(now: Instant, from: &mut Connection, to: &mut Connection) -> bool {
//!         let mut buf = [0u8; 1600];
//!         let mut moved = false;
//!         while let Some(t) = from.poll_transmit(now, &mut buf) {
//!             let seg = Segment::parse(&buf[..t.len], t.src.ip(), t.dst.ip()).unwrap();
//!             to.handle_segment_from(now, t.src.ip(), &seg);
//!             moved = true;
//!         }
//!         moved
//!     }
//!     while pass(now, a, b) | pass(now, b, a) {}
//! }
//!
//! shuttle(Instant::ZERO, &mut client, &mut server);
//! assert_eq!((client.state(), server.state()), (State::Established, State::Established));
//!
//! client.send(b"hello").unwrap();
//! shuttle(Instant::from_millis(1), &mut client, &mut server);
//! let mut buf = [0u8; 16];
//! assert_eq!(server.recv(&mut buf), Ok(5));
//! assert_eq!(&buf[..5], b"hello");
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod connection;
pub mod event;

pub mod seq;
pub mod state;
/// Time as the core sees it: re-exported from bypass-device.
pub use bypass_device::time;
pub mod timer;
pub mod tuple;

pub use config::{Config, Keepalive};
pub use connection::{Buffers, Connection, RecvError, SendError, Side, Transmit, TransmitKind};
pub use controller::Algorithm;
pub use event::{Cause, Event, Stats, Transition, UserCall};
pub use icmp::{IcmpError, IcmpIgnored, IcmpOutcome};
pub use seq::SeqNum;
pub use state::State;
pub use time::Instant;
pub use tuple::FourTuple;
pub use wire::{Flags, Segment};
pub use wire::{SackBlock, SackBlocks, TcpOptions, Timestamps};
pub mod buffer;
pub mod closed;
pub mod congestion;
pub mod controller;
mod cubic;
mod hystart;
pub mod icmp;
pub mod isn;
pub mod outcome;
mod pacing;
mod path;
pub mod reassembly;
mod recovery;
mod recv_space;
mod reliability;
pub mod rtt;
mod send_space;
mod sent;
mod timestamps;
pub mod wire;

pub use closed::reset_for;
pub use connection::CookieOptions;
pub use connection::SequenceSpace;
pub use outcome::{DropReason, Outcome};
pub use wire::{Checksum, EmitError, ParseError};
#[cfg(feature = "sim")]
pub mod sim;
