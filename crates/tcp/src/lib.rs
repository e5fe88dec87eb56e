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
//! Everything is re-exported at the crate root; `wire` (the segment codec, with
//! [`wire::set_checksum`]) and `sim` are also public modules.
//!
//! | file | concern |
//! |---|---|
//! | `wire/` | the wire layer: `mod.rs` (errors, the no-panic contract), `segment.rs` ([`Segment`], [`Flags`], parse and emit), `options.rs` ([`TcpOptions`]), `checksum.rs` |
//! | `connection/` | [`Connection`]: `mod.rs` (the TCB and the user calls, RFC 9293 3.10.1-3.10.6), `input.rs` (segment arrival, RFC 9293 3.10.7, RFC 5961), `output.rs` (what to send next: windows, Nagle, SWS avoidance), `timeouts.rs` (the timer table and expiry), `open.rs` (passive opens, SYN cookies), `icmp.rs` (ICMP errors and the path MTU) |
//! | `config.rs`, `state.rs`, `tuple.rs`, `seq.rs` | [`Config`]; [`State`]; [`FourTuple`]; wrapping sequence numbers |
//! | `event.rs`, `outcome.rs`, `icmp.rs`, `timer.rs` | what a connection reports: [`Event`], [`Stats`]; [`Outcome`] of a segment; [`IcmpError`] and [`IcmpOutcome`]; the [`Timer`] names |
//! | `send_space.rs`, `sent.rs` | the send sequence space; the segments in flight (SACK scoreboard) |
//! | `recv_space.rs`, `rcv_rtt.rs`, `reassembly.rs`, `buffer.rs` | the receive sequence space, with the receiver's RTT estimate for autotuning; out-of-order tracking ([`Assembler`]); send/receive rings ([`Storage`]) |
//! | `reliability.rs`, `rtt.rs`, `recovery.rs`, `pacing.rs`, `timestamps.rs` | RTT and the RFC 6298 RTO; loss detection and recovery (RACK-TLP, RFC 8985; PRR, RFC 6937); pacing; timestamps (RFC 7323) |
//! | `controller.rs`, `congestion.rs`, `cubic.rs`, `hystart.rs` | congestion control: the interface, NewReno (RFC 5681), CUBIC (RFC 9438) with HyStart++ (RFC 9406) |
//! | `ecn.rs` | Explicit Congestion Notification (RFC 3168): [`Ecn`], [`IpEcn`], negotiation and the ECE/CWR state |
//! | `path.rs` | the path MTU (RFC 1191, RFC 8201) and the default MSS |
//! | `isn.rs`, `closed.rs` | initial sequence numbers (RFC 6528); the reply of a CLOSED port ([`reset_for`]) |
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
//!         // A segment goes from one's address to the other's.
//!         let (src, dst) = (from.local_addr().ip(), to.local_addr().ip());
//!         while let Some(t) = from.poll_transmit(now, &mut buf) {
//!             let seg = Segment::parse(&buf[..t.len], src, dst).unwrap();
//!             to.handle_segment_from(now, src, &seg);
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

mod buffer;
mod closed;
mod config;
mod congestion;
mod connection;
mod controller;
mod cubic;
mod delivery;
mod ecn;
mod event;
mod hystart;
mod icmp;
mod isn;
mod outcome;
mod pacing;
mod path;
mod rcv_rtt;
mod reassembly;
mod recovery;
mod recv_space;
mod reliability;
mod rtt;
mod send_space;
mod sent;
mod seq;
mod state;
mod timer;
mod timestamps;
mod tuple;
pub mod wire;

#[cfg(feature = "sim")]
pub mod sim;

/// Time as the core sees it: re-exported from bypass-device.
pub use bypass_device::time;

pub use buffer::Storage;
pub use closed::reset_for;
pub use config::{Config, Keepalive};
pub use connection::{
    Buffers, Connection, CookieOptions, RecvError, SendError, SequenceSpace, Side, Transmit, TransmitKind,
};
pub use controller::Algorithm;
pub use ecn::{Ecn, IpEcn};
pub use event::{Cause, Event, Events, Stats, Transition, UserCall};
pub use icmp::{IcmpError, IcmpIgnored, IcmpOutcome};
pub use outcome::{DropReason, Outcome};
pub use reassembly::{Assembler, TooManyRanges};
pub use seq::SeqNum;
pub use state::State;
pub use time::Instant;
pub use timer::Timer;
pub use tuple::FourTuple;
pub use wire::{Checksum, EmitError, Flags, ParseError, SackBlock, SackBlocks, Segment, TcpOptions, Timestamps};
