//! The `io::Error` each stack error becomes, the same in both modes, and the one a call
//! the shard mode lacks returns.

use std::io::{self, ErrorKind};

use bypass_device::Device;
use bypass_stack::{ConnectError, ListenError, SocketId, Stack};

/// Return the error of a listen the stack refused.
pub(crate) fn listen(e: ListenError) -> io::Error {
    let kind = match e {
        ListenError::AddrInUse(_) => ErrorKind::AddrInUse,
        ListenError::InvalidPort => ErrorKind::InvalidInput,
    };
    io::Error::new(kind, e)
}

/// Return the error of a connect the stack refused to start.
pub(crate) fn connect(e: ConnectError) -> io::Error {
    let kind = match e {
        ConnectError::InvalidAddress(_) => ErrorKind::InvalidInput,
        ConnectError::NoSourceAddress(_) | ConnectError::NoFreePort(_) => ErrorKind::AddrNotAvailable,
        ConnectError::PortInUse(_) => ErrorKind::AddrInUse,
        ConnectError::TableFull(_) => ErrorKind::OutOfMemory,
    };
    io::Error::new(kind, e)
}

/// Return why the handshake of `id`, now closed, failed (a reset is a refusal, as connect(2)
/// reports it), and release the connection.
pub(crate) fn handshake_failed<D: Device>(stack: &mut Stack<D>, id: SocketId) -> io::Error {
    let err = match stack.read(id, &mut []) {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {
            io::Error::new(ErrorKind::ConnectionRefused, "connection refused (the peer answered RST)")
        }
        Err(e) => e,
        Ok(_) => io::Error::new(ErrorKind::ConnectionRefused, "the connection closed while opening"),
    };
    stack.close(id);
    err
}

/// Return the error with shards of the calls for event loops (readiness, non-blocking
/// connects) and of the in-thread mode's other extras.
pub(crate) fn unsupported() -> io::Error {
    io::Error::new(ErrorKind::Unsupported, "readiness and non-blocking connects need the runtime's in-thread mode")
}
