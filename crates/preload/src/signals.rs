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
//!
//! A handler never runs while its thread holds a stack's lock (mid-poll): the trampoline
//! records the delivery and returns, and [`run_deferred`] runs the handler as soon as the
//! thread lets go of the lock, before the interrupted call returns to the program. A
//! handler that calls `exit(3)` (iperf3's does on SIGTERM) runs the exit handlers, which
//! stop the stack and so take its lock: run on top of the thread that holds it, the process
//! would hang. OpenOnload defers signals while it holds a stack's lock for the same reason.
//! A deferred handler runs with its own signal blocked (unless `SA_NODEFER`), with the
//! `siginfo_t` of its delivery and without the interrupted context (`ucontext` is null).
#![allow(unsafe_code)]

use std::cell::Cell;
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

/// Deferred deliveries whose `siginfo_t` a thread keeps (a signal beyond these gets one
/// made up: `SI_USER`, no sender).
const KEPT_INFOS: usize = 4;

const _: () = assert!(std::mem::size_of::<siginfo_t>() == 128, "siginfo_t is 128 bytes on Linux");

thread_local! {
    /// Signals delivered while this thread held a stack's lock whose handlers have not run:
    /// bit `s - 1` for signal `s`.
    static DEFERRED: Cell<u64> = const { Cell::new(0) };
    /// The `siginfo_t` of deferred deliveries, by signal (0: a free slot).
    static INFOS: [Cell<(c_int, [u64; 16])>; KEPT_INFOS] = const { [const { Cell::new((0, [0; 16])) }; KEPT_INFOS] };
}

extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    DELIVERED.fetch_add(1, Ordering::SeqCst);
    LAST.store(sig, Ordering::SeqCst);
    let Some(s) = usize::try_from(sig).ok().filter(|&s| s > 0 && s < SIGNALS) else { return };
    let handler = HANDLERS[s].load(Ordering::SeqCst);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return;
    }
    if bypass_runtime::holds_a_stack() && defer(s, info) {
        return;
    }
    call(s, handler, info, ctx);
}

/// Record a delivery of signal `s` to run its handler later; false if the thread cannot
/// keep it (it is exiting: its thread-locals are gone).
fn defer(s: usize, info: *const siginfo_t) -> bool {
    let bit = 1u64 << (s - 1);
    let Ok(first) = DEFERRED.try_with(|d| {
        let was = d.get();
        d.set(was | bit);
        was & bit == 0
    }) else {
        return false;
    };
    if first && !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo_t of 128 bytes (asserted above) to an
        // SA_SIGINFO handler; read unaligned into plain integers.
        let bytes: [u64; 16] = unsafe { std::ptr::read_unaligned(info.cast()) };
        let _ = INFOS.try_with(|infos| {
            if let Some(slot) = infos.iter().find(|c| c.get().0 == 0) {
                slot.set((s as c_int, bytes));
            }
        });
    }
    true
}

/// Run the handlers of the signals deferred on this thread (see the module's docs); the
/// runtime calls this whenever the thread lets go of the last stack lock it held.
pub fn run_deferred() {
    let Ok(pending) = DEFERRED.try_with(|d| d.replace(0)) else { return };
    if pending == 0 {
        return;
    }
    for s in 1..SIGNALS {
        if pending & (1u64 << (s - 1)) == 0 {
            continue;
        }
        let kept = INFOS
            .try_with(|infos| infos.iter().find(|c| c.get().0 == s as c_int).map(|c| c.replace((0, [0; 16])).1))
            .ok()
            .flatten();
        let mut info: siginfo_t = match kept {
            // SAFETY: `bytes` are those of a siginfo_t the kernel delivered (same size).
            Some(bytes) => unsafe { std::mem::transmute::<[u64; 16], siginfo_t>(bytes) },
            None => {
                // SAFETY: siginfo_t is plain data, valid all-zero.
                let mut made: siginfo_t = unsafe { std::mem::zeroed() };
                made.si_signo = s as c_int;
                made.si_code = libc::SI_USER;
                made
            }
        };
        // The program may have changed its mind since the delivery.
        let handler = HANDLERS[s].load(Ordering::SeqCst);
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            continue;
        }
        let nodefer = FLAGS[s].load(Ordering::SeqCst) & libc::SA_NODEFER != 0;
        // SAFETY: sigset_t is plain data, valid all-zero.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        if !nodefer {
            // SAFETY: the calls fill and read the sets given, which are ours.
            unsafe {
                let mut this: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut this);
                libc::sigaddset(&mut this, s as c_int);
                libc::pthread_sigmask(libc::SIG_BLOCK, &this, &mut old);
            }
        }
        call(s, handler, &mut info, std::ptr::null_mut());
        if !nodefer {
            // SAFETY: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        }
    }
}

/// Call the program's `handler` for signal `s` as it asked to be called.
fn call(s: usize, handler: usize, info: *mut siginfo_t, ctx: *mut c_void) {
    let sig = s as c_int;
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
