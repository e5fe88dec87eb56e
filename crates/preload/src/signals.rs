//! Signals that arrive while a call of ours spins. The kernel ends a wait with `EINTR` when
//! a signal's handler runs; a call of ours that polls the stack in user space (busy-polling,
//! or spinning before it sleeps) is not in the kernel, so it would never learn of it, and a
//! program that stops on SIGTERM (nginx, whose handler only sets a flag for its loop to see
//! after `epoll_wait` returns) would spin on. So the program's handlers are installed behind
//! a trampoline of ours that counts each delivery and remembers the signal, and a spinning
//! call that sees the count move returns `EINTR`, as the kernel would have. `sigaction` and
//! `signal` report the program's own handlers, never the trampoline.
//!
//! The stack's helper threads block every signal, so a process-directed signal always runs
//! on one of the program's threads.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, c_void, siginfo_t};

use crate::real;

/// Signal numbers go up to 64 on Linux.
const SIGNALS: usize = 65;

static DELIVERED: AtomicU64 = AtomicU64::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);
/// The program's handler and `sa_flags` for each signal it handles (0: none recorded).
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];

/// Return how many handled signals have been delivered so far.
pub fn delivered() -> u64 {
    DELIVERED.load(Ordering::SeqCst)
}

/// Return whether a call the last delivered signal interrupted restarts (its handler asked
/// for `SA_RESTART`).
pub fn last_restarts() -> bool {
    let sig = LAST.load(Ordering::SeqCst);
    usize::try_from(sig)
        .ok()
        .filter(|&s| s < SIGNALS)
        .is_some_and(|s| FLAGS[s].load(Ordering::SeqCst) & libc::SA_RESTART != 0)
}

extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    DELIVERED.fetch_add(1, Ordering::SeqCst);
    LAST.store(sig, Ordering::SeqCst);
    let Some(s) = usize::try_from(sig).ok().filter(|&s| s < SIGNALS) else { return };
    let handler = HANDLERS[s].load(Ordering::SeqCst);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return;
    }
    if FLAGS[s].load(Ordering::SeqCst) & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this address as an `sa_sigaction` handler.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this address as an `sa_handler`.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// `sigaction(2)`, with the program's handlers behind the trampoline.
///
/// # Safety
/// As `sigaction`: `act` and `old` are null or valid.
pub unsafe fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let Some(s) = usize::try_from(sig).ok().filter(|&s| s > 0 && s < SIGNALS) else {
        // SAFETY: passing the caller's arguments on (the kernel reports EINVAL).
        return unsafe { real::sigaction(sig, act, old) };
    };
    let recorded = (HANDLERS[s].load(Ordering::SeqCst), FLAGS[s].load(Ordering::SeqCst));
    let mut ours: libc::sigaction;
    let mut install = act;
    if !act.is_null() {
        // SAFETY: a non-null action of the caller's.
        ours = unsafe { *act };
        let handler = ours.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN && sig != libc::SIGKILL && sig != libc::SIGSTOP {
            ours.sa_sigaction = trampoline as *const () as usize;
            ours.sa_flags |= libc::SA_SIGINFO;
            install = &ours;
        }
    }
    // SAFETY: all-zero is a valid sigaction, filled by the call.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `install` is null or valid; `previous` is ours.
    let r = unsafe { real::sigaction(sig, install, &mut previous) };
    if r != 0 {
        return r;
    }
    if !act.is_null() {
        // SAFETY: a non-null action of the caller's.
        let a = unsafe { &*act };
        HANDLERS[s].store(a.sa_sigaction, Ordering::SeqCst);
        FLAGS[s].store(a.sa_flags, Ordering::SeqCst);
    }
    if !old.is_null() {
        if previous.sa_sigaction == trampoline as *const () as usize {
            previous.sa_sigaction = recorded.0;
            previous.sa_flags = recorded.1;
        }
        // SAFETY: a non-null old action of the caller's.
        unsafe { *old = previous };
    }
    0
}

/// `signal(3)` as glibc defines it (BSD semantics: `SA_RESTART`), through [`sigaction`].
///
/// # Safety
/// As `signal`.
pub unsafe fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: all-zero is a valid sigaction (an empty mask).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both are ours and valid.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Run `f` with every signal blocked in the calling thread (threads it starts inherit the
/// mask: the stack's helpers), then restore the mask.
pub fn blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data; sigfillset fills it; pthread_sigmask reads and writes
    // the masks given.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}
