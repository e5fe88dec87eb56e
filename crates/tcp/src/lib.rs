//! `bypass-tcp`: TCP (RFC 9293) as a sans-IO state machine.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod connection;
pub mod event;
pub mod options;
pub mod segment;
pub mod seq;
pub mod state;
pub mod time;
pub mod timer;
pub mod tuple;

pub use config::{Config, Keepalive};
pub use connection::{Connection, RecvError, SendError, Transmit, TransmitKind};
pub use event::{Cause, Event, Stats, Transition, UserCall};
pub use options::{SackBlock, SackBlocks, TcpOptions, Timestamps};
pub use segment::{Flags, Segment};
pub use seq::SeqNum;
pub use state::State;
pub use time::Instant;
pub use tuple::FourTuple;
pub mod buffer;
pub mod closed;
pub mod congestion;
mod input;
pub mod isn;
mod output;
pub mod reassembly;
pub mod rtt;
pub mod wire;

pub use closed::reset_for;
pub use connection::SequenceSpace;
pub use input::DropReason;
pub use wire::{EmitError, ParseError};
