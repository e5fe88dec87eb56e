//! The system calls the Linux target needs beyond `std::net`: a TCP socket configured before
//! `bind`/`listen`/`connect`, `SO_LINGER`, `TCP_INFO` and `poll(2)`. The one module of the
//! crate with `unsafe`; every block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(addr.ip().octets()) },
        sin_zero: [0; 8],
    }
}

/// Open a non-blocking IPv4 TCP socket in the calling thread's network namespace.
pub fn tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a non-negative result is a new descriptor that
    // nothing else owns, so OwnedFd may take it.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Set an integer socket option.
pub fn set_int(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, an int that lives across the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Set a socket option whose value is bytes (`TCP_CONGESTION`).
pub fn set_bytes(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, borrowed for the call.
    check(unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, value.as_ptr().cast(), value.len() as libc::socklen_t)
    })
    .map(drop)
}

/// Set `SO_LINGER` to on with a zero timeout: close(2) then resets the connection.
pub fn set_linger_zero(fd: &impl AsRawFd) -> io::Result<()> {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the pointer and length describe `linger`, which lives across the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// bind(2) to `addr`.
pub fn bind(fd: &impl AsRawFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr(addr);
    // SAFETY: the pointer and length describe `sa`, a sockaddr_in that lives across the call.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// listen(2).
pub fn listen(fd: &impl AsRawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: listen(2) takes no pointers.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(drop)
}

/// connect(2) on a non-blocking socket: `EINPROGRESS` (the SYN is on its way) is success.
pub fn connect(fd: &impl AsRawFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr(addr);
    // SAFETY: the pointer and length describe `sa`, a sockaddr_in that lives across the call.
    let ret = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    match check(ret) {
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(()),
        other => other.map(drop),
    }
}

/// Return `tcpi_state` of `TCP_INFO` (the kernel's `TCP_ESTABLISHED` = 1 ... `TCP_CLOSING` = 11).
pub fn tcp_state(fd: &impl AsRawFd) -> io::Result<u8> {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, writable for `len` bytes; the kernel
    // writes at most `len` bytes and updates `len`.
    check(unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len)
    })?;
    Ok(info[0])
}

/// Return the `poll(2)` revents of `fd` for `POLLIN | POLLRDHUP` without waiting.
pub fn poll_now(fd: RawFd) -> io::Result<i16> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN | libc::POLLRDHUP, revents: 0 };
    // SAFETY: one valid pollfd, borrowed for the call; timeout 0 never blocks.
    check(unsafe { libc::poll(&mut p, 1, 0) })?;
    Ok(p.revents)
}
