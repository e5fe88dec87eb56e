//! Linux's error numbers, as our calls return them.

use std::io::{self, ErrorKind};

/// An errno value.
pub type Errno = i32;
/// A call's outcome: its value or an errno.
pub type Res<T> = Result<T, Errno>;

/// Return the errno Linux gives for `e`.
pub fn errno_of(e: &io::Error) -> Errno {
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    match e.kind() {
        ErrorKind::WouldBlock => libc::EAGAIN,
        ErrorKind::ConnectionRefused => libc::ECONNREFUSED,
        ErrorKind::ConnectionReset => libc::ECONNRESET,
        ErrorKind::ConnectionAborted => libc::ECONNABORTED,
        ErrorKind::NotConnected => libc::ENOTCONN,
        ErrorKind::AddrInUse => libc::EADDRINUSE,
        ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
        ErrorKind::TimedOut => libc::ETIMEDOUT,
        ErrorKind::BrokenPipe => libc::EPIPE,
        ErrorKind::InvalidInput => libc::EINVAL,
        ErrorKind::Unsupported => libc::EOPNOTSUPP,
        ErrorKind::OutOfMemory => libc::ENOMEM,
        ErrorKind::HostUnreachable => libc::EHOSTUNREACH,
        ErrorKind::NetworkUnreachable => libc::ENETUNREACH,
        ErrorKind::Interrupted => libc::EINTR,
        _ => libc::EIO,
    }
}
