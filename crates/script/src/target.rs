//! What a mode implements so that scripts can run against it ([`Target`]).

use std::net::{Ipv4Addr, SocketAddrV4};

use bypass_tcp::{Event, State};

use crate::parse::SockOpt;

/// Script time: microseconds since the script started.
pub type Micros = u64;

/// One segment our stack sent, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When it left, script time.
    pub at: Micros,
    /// The TCP segment: header and payload.
    pub tcp: Vec<u8>,
}

/// What an application call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    /// Success, with a count (bytes) or 0.
    Value(i64),
    /// Failure, by its errno name (`EAGAIN`, `ECONNRESET`, ...).
    Errno(&'static str),
    /// The TCB state (`state`).
    State(State),
    /// The events delivered since the last query (`event`, `no_event`).
    Events(Vec<Event>),
}

/// An application call as the target sees it (the script's, with defaults filled in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// Listen on a port.
    Listen(u16),
    /// Take the next established connection of the listener: it becomes the current one.
    Accept,
    /// Connect from `local_port` to `remote`: it becomes the current connection.
    Connect {
        /// The tester's address.
        remote: SocketAddrV4,
        /// Our port.
        local_port: u16,
    },
    /// Queue bytes for sending on the current connection.
    Write(usize),
    /// Read up to this many bytes from the current connection.
    Read(usize),
    /// RFC 9293 CLOSE: our FIN, the receiving side stays open.
    Shutdown,
    /// close(2).
    Close,
    /// RST.
    Abort,
    /// A socket option.
    SetSockOpt(SockOpt),
    /// Report the current connection's state.
    State,
    /// Report the events delivered to the current connection since the last `Events`.
    Events,
}

/// A mode the runner can drive. Time only moves forward.
///
/// The runner speaks TCP segments (header and payload, checksummed for the addresses of
/// [`Target::addresses`]) and application calls; a target moves them: the virtual target
/// ([`VirtualTarget`](crate::VirtualTarget)) into a `bypass_stack::Interface` on virtual
/// time, the wire targets ([`WireTarget`](crate::WireTarget)) onto a veth pair on the real
/// clock.
pub trait Target {
    /// Return our stack's address and the tester's.
    fn addresses(&self) -> (Ipv4Addr, Ipv4Addr);

    /// Return the current script time.
    fn now(&self) -> Micros;

    /// Let time pass until `until`, running our stack's timers on the way; what it sends
    /// meanwhile is kept for [`Target::take_sent`].
    fn advance(&mut self, until: Micros);

    /// Return when our stack next has timer work (`None`: nothing pending).
    fn next_deadline(&self) -> Option<Micros>;

    /// Deliver one TCP segment from the tester to our stack, now.
    fn inject(&mut self, tcp: &[u8]);

    /// Run an application call now.
    fn call(&mut self, call: &Call) -> Returned;

    /// Return the oldest segment our stack sent that the runner has not taken yet.
    fn take_sent(&mut self) -> Option<Sent>;

    /// Return the oldest segment not taken yet without taking it.
    fn peek_sent(&self) -> Option<&Sent>;

    /// Return how far past an outbound line's window the runner waits for the segment before
    /// it reports none (it reports the time a late one came, when it comes within this). An
    /// hour by default: on virtual time waiting costs nothing. A wire target waits in real
    /// time and says less.
    fn look_ahead(&self) -> Micros {
        3600 * 1_000_000
    }

    /// Let the target catch up after the last line, before the runner checks that nothing
    /// unexpected was sent: nothing on virtual time (the check sees what left at the last
    /// line's instant); a wire target waits its tolerance for frames still on the way.
    fn settle(&mut self) {}
}
