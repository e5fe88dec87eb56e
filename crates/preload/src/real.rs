//! The C library's own functions, behind the ones this library exports: each is looked up
//! once with `dlsym(RTLD_NEXT, name)`, the next definition after ours in the search order.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_uint, c_ulong, c_void, epoll_event, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t, sockaddr,
    socklen_t, ssize_t, timespec,
};

/// Return the address of the next definition of `name` (NUL-terminated), looked up once
/// into `slot`. Aborts with a sentence when the C library lacks it (it cannot be).
fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT asks for the definition after this library.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast::<c_char>()) } as usize;
    if found == 0 {
        let msg = b"bypass: the C library has no function this library needs; is the program linked with glibc?\n";
        // SAFETY: writing a static buffer to stderr, then ending the process.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    slot.store(found, Ordering::Relaxed);
    found
}

macro_rules! real {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        /// The C library's function of this name.
        ///
        /// # Safety
        /// As the C function: the pointers must be valid for what it does with them.
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = resolve(&SLOT, concat!(stringify!($name), "\0"));
            // SAFETY: `p` is the C library's definition of this function, whose type this is.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller upholds the C function's contract.
            unsafe { f($($arg),*) }
        }
    )*};
}

real! {
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn sendfile(out: c_int, input: c_int, offset: *mut off_t, n: size_t) -> ssize_t;
    fn close(fd: c_int) -> c_int;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int;
    fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int;
    fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut socklen_t) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int;
    fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int;
    fn epoll_pwait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
    // Looked up at its first call (glibc 2.35 and later have it; a program that calls it
    // was linked against one).
    fn epoll_pwait2(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn eventfd(init: c_uint, flags: c_int) -> c_int;
    fn pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    fn __chk_fail() -> ();
    fn select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int;
    fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
}

/// Register `f` to run at exit.
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: `f` is a plain function that lives as long as the process.
    unsafe { libc::atexit(f) };
}
