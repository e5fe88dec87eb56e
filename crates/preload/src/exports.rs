//! The C functions this library exports in place of the C library's: each turns pointers
//! into Rust values, serves our sockets through [`Socket`], and passes every other
//! descriptor to the C library untouched (one lock-free bit test decides).
//!
//! `fcntl` and `ioctl` are variadic in C; they are defined here with one integer argument,
//! which is how the x86-64 and AArch64 Linux calling conventions pass the variadic one.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libc::{
    c_int, c_ulong, c_void, epoll_event, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t,
};

use crate::env::{self, FORKED, INSIDE};
use crate::epoll::{self, Epoll};
use crate::errno::{Errno, Res};
use crate::real;
use crate::sock::{Decision, Flags, Socket};
use crate::table::{self, Entry};
use crate::wait;

// ---- plumbing ---------------------------------------------------------------------------

fn set_errno(e: Errno) {
    // SAFETY: errno is the calling thread's.
    unsafe { *libc::__errno_location() = e };
}

fn int(r: Res<c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

fn size(r: Res<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Run `f`, turning a panic (a bug of ours) into `EIO` rather than unwinding into C.
fn guard<T>(name: &str, f: impl FnOnce() -> Res<T>) -> Res<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log::error!("bypass: {name} panicked; returning EIO");
        Err(libc::EIO)
    })
}

/// Say once that a forked child cannot use its parent's sockets.
fn refuse_forked(fd: c_int) -> Errno {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::SeqCst) {
        log::error!(
            "bypass: process {} is a fork of the process that runs the stack, and descriptor {fd} is one of the parent's sockets on it: a forked child cannot use them (run servers single-process, e.g. nginx with `master_process off`)",
            std::process::id()
        );
    }
    libc::EOPNOTSUPP
}

/// What a descriptor is to us.
enum Who {
    Kernel,
    Ours(Arc<Socket>),
    Forked,
}

fn who(fd: c_int) -> Who {
    if !table::is_ours(fd) || INSIDE.with(|i| i.get()) {
        return Who::Kernel;
    }
    if FORKED.load(Ordering::Relaxed) {
        return Who::Forked;
    }
    table::socket(fd).map_or(Who::Kernel, Who::Ours)
}

/// Read a socket address of `len` bytes at `addr`.
unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Res<SocketAddr> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: `addr` points at `len` readable bytes (the caller's contract); the family
    // says which structure they hold, and the length is checked before reading it.
    unsafe {
        match c_int::from((*addr).sa_family) {
            libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
                let a = &*(addr as *const libc::sockaddr_in);
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
                let a = &*(addr as *const libc::sockaddr_in6);
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            libc::AF_INET | libc::AF_INET6 => Err(libc::EINVAL),
            _ => Err(libc::EAFNOSUPPORT),
        }
    }
}

/// Write `sa` at `addr` (up to `*len` bytes, as the kernel truncates) and its full length
/// into `*len`. Null pointers write nothing.
unsafe fn write_addr(sa: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let full = match sa {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_addr.s6_addr = a.ip().octets();
            s.sin6_flowinfo = a.flowinfo();
            s.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: the caller's `*len` says how many bytes `addr` holds; we copy at most that.
    unsafe {
        let room = *len as usize;
        std::ptr::copy_nonoverlapping((&raw const storage).cast::<u8>(), addr.cast::<u8>(), room.min(full));
        *len = full as socklen_t;
    }
}

fn deadline_ms(timeout: c_int) -> Option<Instant> {
    (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64))
}

fn deadline_ts(ts: *const libc::timespec) -> Option<Instant> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: a non-null timespec pointer from the caller.
    let ts = unsafe { *ts };
    Some(Instant::now() + Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32))
}

/// Close `fd`'s entry: drop our side of it (the caller closes the descriptor).
fn release(entry: Entry) {
    if FORKED.load(Ordering::Relaxed) {
        std::mem::forget(entry);
        return;
    }
    if let Entry::Socket(sock) = &entry
        && sock.fds.load(Ordering::SeqCst) == 0
    {
        epoll::forget_everywhere(sock);
        sock.last_close();
    }
    drop(entry);
}

// ---- the library's start ----------------------------------------------------------------

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::SeqCst);
}

extern "C" fn start() {
    if !env::configured() {
        return;
    }
    let filter = std::env::var("BYPASS_LOG").unwrap_or_else(|_| "warn".into());
    let _ = env_logger::Builder::new()
        .parse_filters(&filter)
        .format_timestamp_micros()
        .target(env_logger::Target::Stderr)
        .try_init();
    // SAFETY: registering a handler that only stores to an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
}

/// Runs when the library is loaded, before the program's `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static START: extern "C" fn() = start;

// ---- sockets ----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: passing the caller's arguments on.
    let fd = unsafe { real::socket(domain, ty, protocol) };
    if fd < 0 || !env::configured() || INSIDE.with(|i| i.get()) {
        return fd;
    }
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let tcp = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && base == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP);
    if !tcp {
        return fd;
    }
    if FORKED.load(Ordering::Relaxed) {
        log::warn!(
            "bypass: socket {fd} of forked process {} is the kernel's (the stack is its parent's)",
            std::process::id()
        );
        return fd;
    }
    let sock = Arc::new(Socket::fresh(domain == libc::AF_INET6, ty & libc::SOCK_NONBLOCK != 0));
    match table::insert(fd, Entry::Socket(sock)) {
        Ok(old) => old.map_or((), release),
        Err(_) => log::warn!("bypass: socket {fd} is past descriptor {}: the kernel serves it", table::MAX_FD),
    }
    log::debug!("socket({domain}, {ty:#x}, {protocol}) = {fd}");
    fd
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::bind(fd, addr, len) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    // SAFETY: the caller's address.
    let decided = guard("bind", || sock.bind(unsafe { read_addr(addr, len) }?));
    log::debug!("bind({fd}) = {decided:?}");
    match decided {
        Ok(Decision::Ours) => 0,
        Ok(Decision::Kernel) => {
            if let Some(e) = table::remove(fd) {
                release(e);
            }
            // SAFETY: passing the caller's arguments on.
            unsafe { real::bind(fd, addr, len) }
        }
        Err(e) => int(Err(e)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::listen(fd, backlog) },
        Who::Forked => int(Err(refuse_forked(fd))),
        Who::Ours(s) => {
            let flag = |level, name| {
                let mut v: c_int = 0;
                let mut len = size_of::<c_int>() as socklen_t;
                // SAFETY: reading an int option of the placeholder into `v`.
                let r = unsafe { real::getsockopt(fd, level, name, (&raw mut v).cast(), &mut len) };
                r == 0 && v != 0
            };
            let v6only = s.v6 && flag(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY);
            let reuseport = flag(libc::SOL_SOCKET, libc::SO_REUSEPORT);
            let r = guard("listen", || s.listen(v6only, reuseport));
            log::debug!("listen({fd}, {backlog}) = {r:?}");
            int(r.map(|()| 0))
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { accept4(fd, addr, len, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::accept4(fd, addr, len, flags) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    let r = guard("accept", || {
        if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
            return Err(libc::EINVAL);
        }
        let stream = sock.accept()?;
        let domain = if sock.v6 { libc::AF_INET6 } else { libc::AF_INET };
        // The descriptor the program gets: a kernel socket that holds the number (and
        // the flags and options the program sets), never connected.
        // SAFETY: plain arguments.
        let placeholder = unsafe { real::socket(domain, libc::SOCK_STREAM | flags, 0) };
        if placeholder < 0 {
            return Err(wait::last_errno());
        }
        let peer = stream.peer_addr().map_err(|e| crate::errno::errno_of(&e))?;
        let new = Socket::accepted(stream, sock.v6, flags & libc::SOCK_NONBLOCK != 0, sock.opts())?;
        let peer = new.show(peer);
        match table::insert(placeholder, Entry::Socket(Arc::new(new))) {
            Ok(old) => old.map_or((), release),
            Err(_) => {
                // SAFETY: closing the descriptor made above.
                unsafe { real::close(placeholder) };
                return Err(libc::EMFILE);
            }
        }
        // SAFETY: the caller's address buffer.
        unsafe { write_addr(peer, addr, len) };
        Ok(placeholder)
    });
    log::debug!("accept4({fd}, {flags:#x}) = {r:?}");
    int(r)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::connect(fd, addr, len) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    // SAFETY: the caller's address.
    let r = guard("connect", || sock.connect(unsafe { read_addr(addr, len) }?));
    log::debug!("connect({fd}) = {r:?}");
    match r {
        Ok(Decision::Ours) => 0,
        Ok(Decision::Kernel) => {
            if let Some(e) = table::remove(fd) {
                release(e);
            }
            // SAFETY: passing the caller's arguments on.
            unsafe { real::connect(fd, addr, len) }
        }
        Err(e) => int(Err(e)),
    }
}

// ---- data -------------------------------------------------------------------------------

/// Receive into `buf` on our socket.
fn recv_on(fd: c_int, sock: &Socket, buf: &mut [u8], flags: c_int) -> ssize_t {
    let r = guard("recv", || sock.recv(buf, Flags::from_bits(flags)));
    log::debug!("recv({fd}, {}, {flags:#x}) = {r:?}", buf.len());
    size(r)
}

/// Send `data` on our socket.
fn send_on(fd: c_int, sock: &Socket, data: &[&[u8]], flags: c_int) -> ssize_t {
    let r = guard("send", || sock.send(data, Flags::from_bits(flags)));
    log::debug!("send({fd}, {}, {flags:#x}) = {r:?}", data.iter().map(|d| d.len()).sum::<usize>());
    size(r)
}

/// Return the caller's buffer as a slice (empty for a null pointer with no length).
unsafe fn buf_mut<'a>(p: *mut c_void, n: size_t) -> Res<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller promises `n` writable bytes at `p`.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
}

unsafe fn buf<'a>(p: *const c_void, n: size_t) -> Res<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller promises `n` readable bytes at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) })
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Res<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller promises `n` iovecs at `iov`, each describing its buffer.
    let iov = unsafe { std::slice::from_raw_parts(iov, n as usize) };
    iov.iter().map(|v| unsafe { buf_mut(v.iov_base, v.iov_len) }).collect()
}

/// Receive into the scattered buffers `bufs`: the first waits as the socket does, the
/// rest take what is there.
fn recv_scattered(fd: c_int, sock: &Socket, bufs: &mut [&mut [u8]], flags: c_int) -> ssize_t {
    let r = guard("recvmsg", || {
        let mut total = 0;
        for (i, b) in bufs.iter_mut().filter(|b| !b.is_empty()).enumerate() {
            let f = if i == 0 { flags } else { flags | libc::MSG_DONTWAIT };
            match sock.recv(b, Flags::from_bits(f)) {
                Ok(n) => {
                    total += n;
                    if n < b.len() {
                        break;
                    }
                }
                Err(e) if i > 0 && e == libc::EAGAIN => break,
                Err(e) if total > 0 => {
                    log::debug!("recv({fd}) after {total} bytes: errno {e}");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    });
    log::debug!("readv({fd}, {} buffers) = {r:?}", bufs.len());
    size(r)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, p: *mut c_void, n: size_t) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::read(fd, p, n) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // SAFETY: the caller's buffer.
        Who::Ours(s) => match unsafe { buf_mut(p, n) } {
            Ok(b) => recv_on(fd, &s, b, 0),
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(fd: c_int, p: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's report of a buffer overflow; it does not return.
        unsafe { real::__chk_fail() };
    }
    // SAFETY: the caller's arguments.
    unsafe { read(fd, p, n) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, p: *const c_void, n: size_t) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::write(fd, p, n) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // SAFETY: the caller's buffer.
        Who::Ours(s) => match unsafe { buf(p, n) } {
            Ok(b) => send_on(fd, &s, &[b], 0),
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::readv(fd, iov, n) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // SAFETY: the caller's iovecs.
        Who::Ours(s) => match unsafe { iovecs(iov, n) } {
            Ok(mut bufs) => recv_scattered(fd, &s, &mut bufs, 0),
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::writev(fd, iov, n) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // SAFETY: the caller's iovecs.
        Who::Ours(s) => match unsafe { iovecs(iov, n) } {
            Ok(bufs) => {
                let bufs: Vec<&[u8]> = bufs.into_iter().map(|b| &*b).collect();
                send_on(fd, &s, &bufs, 0)
            }
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, p: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { recvfrom(fd, p, n, flags, std::ptr::null_mut(), std::ptr::null_mut()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(fd: c_int, p: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's report of a buffer overflow; it does not return.
        unsafe { real::__chk_fail() };
    }
    // SAFETY: the caller's arguments.
    unsafe { recv(fd, p, n, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    p: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::recvfrom(fd, p, n, flags, addr, len) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // SAFETY: the caller's buffer.
        Who::Ours(s) => match unsafe { buf_mut(p, n) } {
            Ok(b) => {
                let r = recv_on(fd, &s, b, flags);
                if r >= 0 && !len.is_null() {
                    // A connected TCP socket names no source, as Linux's recvfrom does.
                    // SAFETY: the caller's length.
                    unsafe { *len = 0 };
                }
                r
            }
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    p: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's report of a buffer overflow; it does not return.
        unsafe { real::__chk_fail() };
    }
    // SAFETY: the caller's arguments.
    unsafe { recvfrom(fd, p, n, flags, addr, len) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, p: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { sendto(fd, p, n, flags, std::ptr::null(), 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    p: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::sendto(fd, p, n, flags, addr, len) },
        Who::Forked => size(Err(refuse_forked(fd))),
        // A connected TCP socket ignores the address, as Linux's does.
        // SAFETY: the caller's buffer.
        Who::Ours(s) => match unsafe { buf(p, n) } {
            Ok(b) => send_on(fd, &s, &[b], flags),
            Err(e) => size(Err(e)),
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::recvmsg(fd, msg, flags) },
        Who::Forked => return size(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    if msg.is_null() {
        return size(Err(libc::EFAULT));
    }
    // SAFETY: the caller's message header and the iovecs it names.
    let m = unsafe { &mut *msg };
    let mut bufs = match unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) } {
        Ok(b) => b,
        Err(e) => return size(Err(e)),
    };
    let r = recv_scattered(fd, &sock, &mut bufs, flags);
    if r >= 0 {
        m.msg_namelen = 0;
        m.msg_controllen = 0;
        m.msg_flags = 0;
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::sendmsg(fd, msg, flags) },
        Who::Forked => return size(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    if msg.is_null() {
        return size(Err(libc::EFAULT));
    }
    // SAFETY: the caller's message header and the iovecs it names.
    let m = unsafe { &*msg };
    if m.msg_controllen > 0 {
        log::warn!("bypass: sendmsg({fd}) with control messages: not supported on our sockets (EOPNOTSUPP)");
        return size(Err(libc::EOPNOTSUPP));
    }
    match unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) } {
        Ok(bufs) => {
            let bufs: Vec<&[u8]> = bufs.into_iter().map(|b| &*b).collect();
            send_on(fd, &sock, &bufs, flags)
        }
        Err(e) => size(Err(e)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(out: c_int, input: c_int, offset: *mut off_t, n: size_t) -> ssize_t {
    let sock = match who(out) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::sendfile(out, input, offset, n) },
        Who::Forked => return size(Err(refuse_forked(out))),
        Who::Ours(s) => s,
    };
    // SAFETY: a non-null offset is the caller's.
    let start = if offset.is_null() { None } else { Some(unsafe { *offset }) };
    let r = guard("sendfile", || {
        sock.sendfile(n, |space, at| {
            // SAFETY: `space` is writable for its length; `input` is the caller's file.
            let got = unsafe {
                match start {
                    Some(o) => libc::pread(input, space.as_mut_ptr().cast(), space.len(), o + at as off_t),
                    None => real::read(input, space.as_mut_ptr().cast(), space.len()),
                }
            };
            if got < 0 { Err(std::io::Error::last_os_error()) } else { Ok(got as usize) }
        })
    });
    if let (Ok(sent), Some(o)) = (&r, start) {
        // SAFETY: the caller's offset.
        unsafe { *offset = o + *sent as off_t };
    }
    log::debug!("sendfile({out}, {input}, {n}) = {r:?}");
    size(r)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(out: c_int, input: c_int, offset: *mut off_t, n: size_t) -> ssize_t {
    // SAFETY: the caller's arguments (off_t is 64 bits on this target).
    unsafe { sendfile(out, input, offset, n) }
}

// ---- descriptors ------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let entry = if INSIDE.with(|i| i.get()) { None } else { table::remove(fd) };
    // SAFETY: closing the caller's descriptor.
    let r = unsafe { real::close(fd) };
    if let Some(entry) = entry {
        log::debug!("close({fd})");
        release(entry);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::shutdown(fd, how) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    let how = match how {
        libc::SHUT_RD => Shutdown::Read,
        libc::SHUT_WR => Shutdown::Write,
        libc::SHUT_RDWR => Shutdown::Both,
        _ => return int(Err(libc::EINVAL)),
    };
    let r = guard("shutdown", || sock.shutdown(how));
    log::debug!("shutdown({fd}, {how:?}) = {r:?}");
    int(r.map(|()| 0))
}

/// After the kernel made `new` a duplicate of `old`: make it ours too.
fn duplicated(old: c_int, new: c_int) -> c_int {
    if new < 0 {
        return new;
    }
    let Some(entry) = table::get(old) else { return new };
    match table::insert(new, entry) {
        Ok(prev) => prev.map_or((), release),
        Err(_) => {
            // SAFETY: closing the duplicate the kernel just made.
            unsafe { real::close(new) };
            return int(Err(libc::EMFILE));
        }
    }
    log::debug!("dup({old}) = {new}");
    new
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: passing the caller's arguments on.
    let new = unsafe { real::dup(fd) };
    if table::is_ours(fd) { duplicated(fd, new) } else { new }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // SAFETY: F_GETFD checks `old` is open, as dup2 does.
        return if unsafe { real::fcntl(old, libc::F_GETFD, 0) } < 0 { -1 } else { new };
    }
    // SAFETY: the caller's arguments.
    unsafe { dup3(old, new, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // The kernel closes what `new` was: so do we.
    let prev = if old != new { table::remove(new) } else { None };
    // SAFETY: passing the caller's arguments on.
    let r = unsafe { real::dup3(old, new, flags) };
    if let Some(prev) = prev {
        release(prev);
    }
    if table::is_ours(old) { duplicated(old, r) } else { r }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // The kernel's placeholder keeps the flags (F_GETFL reads them back); ours follow.
    // SAFETY: passing the caller's arguments on.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if r < 0 || !table::is_ours(fd) {
        return r;
    }
    match cmd {
        libc::F_SETFL => {
            if let Some(s) = table::socket(fd) {
                s.set_nonblocking(arg as c_int & libc::O_NONBLOCK != 0);
            }
            r
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => duplicated(fd, r),
        _ => r,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { fcntl(fd, cmd, arg) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::ioctl(fd, request, arg) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    let p = arg as *mut c_int;
    match request {
        libc::FIONBIO => {
            if p.is_null() {
                return int(Err(libc::EFAULT));
            }
            // SAFETY: FIONBIO's argument points at an int.
            sock.set_nonblocking(unsafe { *p } != 0);
            // SAFETY: the placeholder follows, for F_GETFL.
            unsafe { real::ioctl(fd, request, arg) }
        }
        libc::FIONREAD => {
            if p.is_null() {
                return int(Err(libc::EFAULT));
            }
            let r = guard("ioctl", || sock.recv_queued());
            // SAFETY: FIONREAD's argument points at an int.
            int(r.map(|n| {
                unsafe { *p = c_int::try_from(n).unwrap_or(c_int::MAX) };
                0
            }))
        }
        _ => {
            log::warn!("bypass: ioctl({fd}, {request:#x}) is not supported on our sockets (ENOTTY)");
            int(Err(libc::ENOTTY))
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::getsockname(fd, addr, len) },
        Who::Forked => int(Err(refuse_forked(fd))),
        Who::Ours(s) => match s.local_addr() {
            Some(a) => {
                // SAFETY: the caller's buffer.
                unsafe { write_addr(s.show(a), addr, len) };
                0
            }
            // SAFETY: passing the caller's arguments on.
            None => unsafe { real::getsockname(fd, addr, len) },
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => unsafe { real::getpeername(fd, addr, len) },
        Who::Forked => int(Err(refuse_forked(fd))),
        Who::Ours(s) => int(s.peer_addr().map(|a| {
            // SAFETY: the caller's buffer.
            unsafe { write_addr(a, addr, len) };
            0
        })),
    }
}

// ---- options ----------------------------------------------------------------------------

/// Write `value` into the caller's option buffer, truncated to `*len` as Linux does.
unsafe fn put_opt<T: Copy>(value: T, out: *mut c_void, len: *mut socklen_t) -> c_int {
    if out.is_null() || len.is_null() {
        return int(Err(libc::EFAULT));
    }
    // SAFETY: `*len` bytes are writable at `out` (the caller's contract).
    unsafe {
        let n = (*len as usize).min(size_of::<T>());
        std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), out.cast::<u8>(), n);
        *len = n as socklen_t;
    }
    0
}

unsafe fn get_int(value: *const c_void, len: socklen_t) -> Res<c_int> {
    if value.is_null() || (len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least an int is readable there.
    Ok(unsafe { (value as *const c_int).read_unaligned() })
}

/// Read a `struct linger` option.
unsafe fn get_linger(value: *const c_void, len: socklen_t) -> Res<libc::linger> {
    if value.is_null() || (len as usize) < size_of::<libc::linger>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a linger structure is readable there.
    Ok(unsafe { (value as *const libc::linger).read_unaligned() })
}

/// Read an int option that must lie in `range` (`EINVAL` otherwise, as Linux answers).
unsafe fn int_in(value: *const c_void, len: socklen_t, range: std::ops::RangeInclusive<c_int>) -> Res<c_int> {
    // SAFETY: the caller's option value and length.
    let v = unsafe { get_int(value, len) }?;
    if range.contains(&v) { Ok(v) } else { Err(libc::EINVAL) }
}

unsafe fn get_timeval(value: *const c_void, len: socklen_t) -> Res<Option<Duration>> {
    if value.is_null() || (len as usize) < size_of::<libc::timeval>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a timeval is readable there.
    let tv = unsafe { (value as *const libc::timeval).read_unaligned() };
    if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
        return Err(libc::EDOM);
    }
    let d = Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    Ok((!d.is_zero()).then_some(d))
}

/// Return the name of an option, for the log.
fn opt_name(level: c_int, name: c_int) -> String {
    format!("level {level} option {name}")
}

fn tcp_info(sock: &Socket) -> libc::tcp_info {
    // SAFETY: all-zero is a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let Some((state, s)) = sock.stats() else {
        info.tcpi_state = 7; // TCP_CLOSE
        return info;
    };
    use bypass_tcp::State as S;
    // Linux's numbering (include/net/tcp_states.h).
    info.tcpi_state = match state {
        S::Established => 1,
        S::SynSent => 2,
        S::SynReceived => 3,
        S::FinWait1 => 4,
        S::FinWait2 => 5,
        S::TimeWait => 6,
        S::Closed => 7,
        S::CloseWait => 8,
        S::LastAck => 9,
        S::Listen => 10,
        S::Closing => 11,
    };
    let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
    let mss = u32::from(s.mss.max(1));
    info.tcpi_rto = us(s.rto);
    info.tcpi_snd_mss = mss;
    info.tcpi_rcv_mss = mss;
    info.tcpi_unacked = s.bytes_in_flight.div_ceil(mss);
    info.tcpi_retrans = 0;
    info.tcpi_rtt = s.srtt.map_or(0, us);
    info.tcpi_rttvar = us(s.rttvar);
    info.tcpi_rcv_rtt = s.rcv_rtt.map_or(0, us);
    info.tcpi_snd_ssthresh = s.ssthresh / mss;
    info.tcpi_snd_cwnd = s.cwnd / mss;
    info.tcpi_advmss = mss;
    info.tcpi_total_retrans = u32::try_from(s.retransmits).unwrap_or(u32::MAX);
    info.tcpi_bytes_acked = s.bytes_acked;
    info.tcpi_bytes_received = s.bytes_in;
    info.tcpi_segs_out = s.segs_out as u32;
    info.tcpi_segs_in = s.segs_in as u32;
    info
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::getsockopt(fd, level, name, value, len) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    log::debug!("getsockopt({fd}, {})", opt_name(level, name));
    // SAFETY (every arm): the caller's option buffer and length.
    unsafe {
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => put_opt(sock.take_error(), value, len),
            (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => put_opt(c_int::from(sock.listening()), value, len),
            // Kept on the placeholder as set, or the kernel's own for a TCP socket.
            (
                libc::SOL_SOCKET,
                libc::SO_TYPE
                | libc::SO_DOMAIN
                | libc::SO_PROTOCOL
                | libc::SO_REUSEADDR
                | libc::SO_REUSEPORT
                | libc::SO_KEEPALIVE
                | libc::SO_RCVBUF
                | libc::SO_SNDBUF
                | libc::SO_LINGER
                | libc::SO_RCVTIMEO
                | libc::SO_SNDTIMEO
                | libc::SO_RCVLOWAT
                | libc::SO_SNDLOWAT
                | libc::SO_BROADCAST
                | libc::SO_OOBINLINE,
            ) => real::getsockopt(fd, level, name, value, len),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => put_opt(c_int::from(sock.opts().nodelay), value, len),
            (libc::IPPROTO_TCP, libc::TCP_INFO) => put_opt(tcp_info(&sock), value, len),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => match sock.stats() {
                Some((_, s)) => put_opt(c_int::from(s.mss), value, len),
                None => real::getsockopt(fd, level, name, value, len),
            },
            (
                libc::IPPROTO_TCP,
                libc::TCP_KEEPIDLE | libc::TCP_KEEPINTVL | libc::TCP_KEEPCNT | libc::TCP_USER_TIMEOUT,
            ) => real::getsockopt(fd, level, name, value, len),
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => real::getsockopt(fd, level, name, value, len),
            _ => {
                log::warn!(
                    "bypass: getsockopt({fd}, {}) is not supported on our sockets (ENOPROTOOPT)",
                    opt_name(level, name)
                );
                int(Err(libc::ENOPROTOOPT))
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::setsockopt(fd, level, name, value, len) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    log::debug!("setsockopt({fd}, {})", opt_name(level, name));
    // SAFETY (every arm): the caller's option value and length.
    let r = unsafe {
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => get_timeval(value, len).map(|t| sock.set_opts(|o| o.rcvtimeo = t)),
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => get_timeval(value, len).map(|t| sock.set_opts(|o| o.sndtimeo = t)),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
                get_int(value, len).map(|v| sock.set_opts(|o| o.nodelay = v != 0))
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => get_linger(value, len).map(|l| {
                sock.set_opts(|o| o.linger_reset = l.l_onoff != 0 && l.l_linger == 0);
            }),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                get_int(value, len).map(|v| sock.set_opts(|o| o.keepalive = v != 0))
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE | libc::TCP_KEEPINTVL) => int_in(value, len, 1..=32767).map(|v| {
                let d = Some(Duration::from_secs(v as u64));
                sock.set_opts(|o| if name == libc::TCP_KEEPIDLE { o.keepidle = d } else { o.keepintvl = d })
            }),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => {
                int_in(value, len, 1..=127).map(|v| sock.set_opts(|o| o.keepcnt = Some(v as u32)))
            }
            (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => int_in(value, len, 0..=c_int::MAX)
                .map(|v| sock.set_opts(|o| o.user_timeout = Some(Duration::from_millis(v as u64)))),
            // Recorded on the placeholder (read back by getsockopt): the stack's buffers
            // autotune, and its MSS follows the path, whatever the program asks.
            (
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR
                | libc::SO_REUSEPORT
                | libc::SO_RCVBUF
                | libc::SO_SNDBUF
                | libc::SO_RCVLOWAT
                | libc::SO_SNDLOWAT
                | libc::SO_BROADCAST
                | libc::SO_OOBINLINE,
            )
            | (libc::IPPROTO_TCP, libc::TCP_MAXSEG)
            | (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => Ok(()),
            _ => {
                log::warn!(
                    "bypass: setsockopt({fd}, {}) is not supported on our sockets (ENOPROTOOPT)",
                    opt_name(level, name)
                );
                Err(libc::ENOPROTOOPT)
            }
        }
    };
    if let Err(e) = r {
        return int(Err(e));
    }
    // SAFETY: the placeholder keeps the value, for getsockopt (and for the kernel, should
    // the socket become the kernel's at bind or connect).
    let k = unsafe { real::setsockopt(fd, level, name, value, len) };
    if k < 0
        && matches!(
            (level, name),
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) | (libc::IPPROTO_TCP, libc::TCP_NODELAY)
        )
    {
        return 0;
    }
    k
}

// ---- readiness --------------------------------------------------------------------------

/// Return the sockets of ours among `fds` (`None` if there are none).
fn ours_among(fds: &[pollfd]) -> Option<Vec<Option<Arc<Socket>>>> {
    if INSIDE.with(|i| i.get()) || !fds.iter().any(|p| table::is_ours(p.fd)) {
        return None;
    }
    Some(fds.iter().map(|p| table::socket(p.fd)).collect())
}

unsafe fn poll_ours(fds: *mut pollfd, n: nfds_t, deadline: Option<Instant>, mask: *const sigset_t) -> Option<c_int> {
    if n == 0 || fds.is_null() {
        return None;
    }
    // SAFETY: the caller's `n` pollfds.
    let fds = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    let ours = ours_among(fds)?;
    if FORKED.load(Ordering::Relaxed) {
        let fd = fds.iter().zip(&ours).find(|(_, s)| s.is_some()).map_or(-1, |(p, _)| p.fd);
        return Some(int(Err(refuse_forked(fd))));
    }
    let r = guard("poll", || epoll::poll(fds, &ours, deadline, mask));
    log::debug!("poll({} descriptors) = {r:?}", fds.len());
    Some(int(r.map(|n| n as c_int)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    match unsafe { poll_ours(fds, n, deadline_ms(timeout), std::ptr::null()) } {
        Some(r) => r,
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::poll(fds, n, timeout) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int {
    if (n as usize).saturating_mul(size_of::<pollfd>()) > fdslen {
        // SAFETY: glibc's report of a buffer overflow; it does not return.
        unsafe { real::__chk_fail() };
    }
    // SAFETY: the caller's arguments.
    unsafe { poll(fds, n, timeout) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(fds: *mut pollfd, n: nfds_t, ts: *const libc::timespec, mask: *const sigset_t) -> c_int {
    // SAFETY: the caller's arguments.
    match unsafe { poll_ours(fds, n, deadline_ts(ts), mask) } {
        Some(r) => r,
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::ppoll(fds, n, ts, mask) },
    }
}

/// select(2) and pselect(2) over our sockets: as poll, converting the sets both ways.
unsafe fn select_ours(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    deadline: Option<Instant>,
    mask: *const sigset_t,
) -> Option<c_int> {
    if n <= 0 || INSIDE.with(|i| i.get()) {
        return None;
    }
    let n = n.min(libc::FD_SETSIZE as c_int);
    // SAFETY: the caller's sets (each null or valid); FD_ISSET reads within FD_SETSIZE.
    let isset = |set: *mut libc::fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
    if !(0..n).any(|fd| table::is_ours(fd) && (isset(r, fd) || isset(w, fd) || isset(e, fd))) {
        return None;
    }
    let mut fds: Vec<pollfd> = Vec::new();
    for fd in 0..n {
        let mut events = 0;
        if isset(r, fd) {
            events |= libc::POLLIN;
        }
        if isset(w, fd) {
            events |= libc::POLLOUT;
        }
        if isset(e, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            fds.push(pollfd { fd, events, revents: 0 });
        }
    }
    // SAFETY: `fds` is ours, valid for its length.
    let polled = unsafe { poll_ours(fds.as_mut_ptr(), fds.len() as nfds_t, deadline, mask) }?;
    if polled < 0 {
        return Some(polled);
    }
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: a valid set of the caller's.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &fds {
        let rev = p.revents;
        let mut mark = |set: *mut libc::fd_set, on: bool| {
            if on && !set.is_null() {
                // SAFETY: `p.fd` < FD_SETSIZE; a valid set of the caller's.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        };
        mark(r, p.events & libc::POLLIN != 0 && rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0);
        mark(w, p.events & libc::POLLOUT != 0 && rev & (libc::POLLOUT | libc::POLLERR) != 0);
        mark(e, p.events & libc::POLLPRI != 0 && rev & libc::POLLPRI != 0);
    }
    Some(count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    let deadline = if tv.is_null() {
        None
    } else {
        // SAFETY: a non-null timeval of the caller's.
        let t = unsafe { *tv };
        Some(Instant::now() + Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.clamp(0, 999_999) * 1000) as u32))
    };
    // SAFETY: the caller's arguments.
    match unsafe { select_ours(n, r, w, e, deadline, std::ptr::null()) } {
        Some(count) => {
            if let (false, Some(d)) = (tv.is_null(), deadline) {
                // Linux leaves the time not slept in the timeval.
                let left = d.saturating_duration_since(Instant::now());
                // SAFETY: the caller's timeval.
                unsafe {
                    (*tv).tv_sec = left.as_secs() as libc::time_t;
                    (*tv).tv_usec = left.subsec_micros() as libc::suseconds_t;
                }
            }
            count
        }
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::select(n, r, w, e, tv) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    match unsafe { select_ours(n, r, w, e, deadline_ts(ts), mask) } {
        Some(count) => count,
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::pselect(n, r, w, e, ts, mask) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    let sock = match who(fd) {
        // SAFETY: passing the caller's arguments on.
        Who::Kernel => return unsafe { real::epoll_ctl(epfd, op, fd, ev) },
        Who::Forked => return int(Err(refuse_forked(fd))),
        Who::Ours(s) => s,
    };
    let r = guard("epoll_ctl", || {
        let (events, data) = if op == libc::EPOLL_CTL_DEL {
            (0, 0)
        } else if ev.is_null() {
            return Err(libc::EFAULT);
        } else {
            // SAFETY: a non-null event of the caller's (packed: read unaligned).
            let e = unsafe { ev.read_unaligned() };
            (e.events, e.u64)
        };
        let ep = match table::get(epfd) {
            Some(Entry::Epoll(ep)) => ep,
            Some(Entry::Socket(_)) => return Err(libc::EINVAL),
            None => {
                // Check `epfd` is an epoll instance: the kernel refuses a bad one here.
                let ep = Epoll::new(epfd)?;
                if table::insert(epfd, Entry::Epoll(Arc::clone(&ep))).is_err() {
                    return Err(libc::EMFILE);
                }
                ep
            }
        };
        ep.ctl(op, fd, sock, events, data)
    });
    log::debug!("epoll_ctl({epfd}, {op}, {fd}) = {r:?}");
    int(r.map(|()| 0))
}

unsafe fn epoll_wait_ours(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    deadline: Option<Instant>,
    mask: *const sigset_t,
) -> Option<c_int> {
    if INSIDE.with(|i| i.get()) {
        return None;
    }
    let Some(Entry::Epoll(ep)) = table::get(epfd) else { return None };
    if FORKED.load(Ordering::Relaxed) {
        return Some(int(Err(refuse_forked(epfd))));
    }
    if max <= 0 {
        return Some(int(Err(libc::EINVAL)));
    }
    if events.is_null() {
        return Some(int(Err(libc::EFAULT)));
    }
    // SAFETY: the caller's room for `max` events.
    let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
    let r = guard("epoll_wait", || ep.wait(out, deadline, mask));
    log::trace!("epoll_wait({epfd}) = {r:?}");
    Some(int(r.map(|n| n as c_int)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { epoll_pwait(epfd, events, max, timeout, std::ptr::null()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    match unsafe { epoll_wait_ours(epfd, events, max, deadline_ms(timeout), mask) } {
        Some(r) => r,
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::epoll_pwait(epfd, events, max, timeout, mask) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: *const libc::timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    match unsafe { epoll_wait_ours(epfd, events, max, deadline_ts(timeout), mask) } {
        Some(r) => r,
        // SAFETY: passing the caller's arguments on.
        None => unsafe { real::epoll_pwait2(epfd, events, max, timeout, mask) },
    }
}

// ---- signals ----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    if !env::configured() || INSIDE.with(|i| i.get()) {
        // SAFETY: passing the caller's arguments on.
        return unsafe { real::sigaction(sig, act, old) };
    }
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sigaction(sig, act, old) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if !env::configured() {
        // SAFETY: the C library's signal, through its sigaction.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both are ours and valid.
        if unsafe { real::sigaction(sig, &act, &mut old) } != 0 {
            return libc::SIG_ERR;
        }
        return old.sa_sigaction;
    }
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::signal(sig, handler) }
}
