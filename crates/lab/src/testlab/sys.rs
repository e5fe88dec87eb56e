//! The system calls labs make: the effective user id, entering a network namespace, and the
//! raw ICMP socket of [`ping`](super::ping).

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Return the effective user id of the process.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Move the calling thread into the network namespace `ns` (an open
/// `/var/run/netns/NAME`). Sockets and BPF links the thread creates afterwards belong to
/// that namespace.
pub fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: plain setns(2) on a descriptor we hold open; it changes only this thread's
    // namespace.
    let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Keep the calling thread on CPU `cpu` alone (`sched_setaffinity(2)`).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu}")));
    }
    // SAFETY: `cpu_set_t` is a plain bit array, for which all zeroes (the empty set) is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`, and `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size given.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A raw ICMP socket: `socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)` or `socket(AF_INET6,
/// SOCK_RAW, IPPROTO_ICMPV6)`.
pub struct IcmpSocket(OwnedFd);

/// A socket address for `sendto(2)` and `connect(2)`.
enum SockAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl SockAddr {
    fn new(addr: IpAddr) -> SockAddr {
        match addr {
            IpAddr::V4(v4) => SockAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr { s_addr: u32::from(v4).to_be() },
                sin_zero: [0; 8],
            }),
            IpAddr::V6(v6) => SockAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: v6.octets() },
                sin6_scope_id: 0,
            }),
        }
    }

    /// Return the pointer and length to pass to the kernel.
    fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            SockAddr::V4(a) => ((a as *const libc::sockaddr_in).cast(), size_of::<libc::sockaddr_in>() as _),
            SockAddr::V6(a) => ((a as *const libc::sockaddr_in6).cast(), size_of::<libc::sockaddr_in6>() as _),
        }
    }
}

impl IcmpSocket {
    /// Open one (for IPv6 if `v6`) in the calling thread's network namespace.
    pub fn open(v6: bool) -> io::Result<IcmpSocket> {
        let (domain, protocol, what) = if v6 {
            (libc::AF_INET6, libc::IPPROTO_ICMPV6, "ICMPv6")
        } else {
            (libc::AF_INET, libc::IPPROTO_ICMP, "ICMP")
        };
        // SAFETY: socket(2) has no memory preconditions; the result is checked.
        let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("open a raw {what} socket (needs root): {e}")));
        }
        // SAFETY: `fd` is a descriptor we just opened and own.
        Ok(IcmpSocket(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Set the integer socket option `name` at `level` to `value`.
    pub fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: `value` is a c_int valid for reads, and its size is passed alongside it.
        let rc = unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
                level,
                name,
                (&raw const value).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Connect to `addr`: receive only from there (and errors only about datagrams sent
    /// there).
    pub fn connect(&self, addr: IpAddr) -> io::Result<()> {
        let to = SockAddr::new(addr);
        let (ptr, len) = to.raw();
        // SAFETY: `ptr` points to a socket address of `len` bytes that outlives the call.
        let rc = unsafe { libc::connect(self.0.as_raw_fd(), ptr, len) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Send `message` (an ICMP message; the kernel adds the IP header) to `addr`.
    pub fn send_to(&self, message: &[u8], addr: IpAddr) -> io::Result<()> {
        let to = SockAddr::new(addr);
        let (ptr, len) = to.raw();
        // SAFETY: `message` is valid for reads of its length; `ptr` points to a socket
        // address of `len` bytes that outlives the call.
        let n = unsafe { libc::sendto(self.0.as_raw_fd(), message.as_ptr().cast(), message.len(), 0, ptr, len) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Wait up to `timeout` for a datagram; return its length, or `None` if none came.
    /// With `IP_RECVERR`/`IPV6_RECVERR` set, a pending ICMP error is returned as the error.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let mut pfd = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `pfd` is one valid pollfd, and the count passed is 1.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(None) } else { Err(e) };
        }
        if ready == 0 {
            return Ok(None);
        }
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                // Only the error queue is left (POLLERR): wait out the rest of the slice
                // rather than spin on it.
                if pfd.revents & libc::POLLIN == 0 {
                    std::thread::sleep(Duration::from_millis(1).min(timeout));
                }
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(n as usize))
    }
}
