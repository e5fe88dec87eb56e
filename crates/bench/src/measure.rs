//! What one thread costs: CPU time, context switches and read/write system calls, sampled at
//! the start and end of a measurement window.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The client is recording round trips.
pub const MEASURING: u8 = 1;
/// The client has stopped recording.
pub const DONE: u8 = 2;

/// Cumulative counters of the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Voluntary context switches (the thread blocked).
    pub voluntary: u64,
    /// Involuntary context switches (the thread was preempted).
    pub involuntary: u64,
    /// `syscr + syscw` of `/proc/thread-self/io` (read- and write-family system calls) plus
    /// the calls the thread counted itself with [`count_syscalls`].
    pub syscalls: u64,
}

impl Usage {
    /// Return the counters of the calling thread now.
    pub fn now() -> Usage {
        let (cpu, voluntary, involuntary) = sys::thread_rusage();
        Usage { cpu, voluntary, involuntary, syscalls: thread_syscalls() + OTHER_SYSCALLS.with(Cell::get) }
    }

    /// Return `self + other`.
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            cpu: self.cpu + other.cpu,
            voluntary: self.voluntary + other.voluntary,
            involuntary: self.involuntary + other.involuntary,
            syscalls: self.syscalls + other.syscalls,
        }
    }

    /// Return `self - earlier`.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
            syscalls: self.syscalls.saturating_sub(earlier.syscalls),
        }
    }
}

thread_local! {
    /// System calls of this thread that `/proc/thread-self/io` does not count.
    static OTHER_SYSCALLS: Cell<u64> = const { Cell::new(0) };
}

/// Count `n` system calls the calling thread made that `/proc/thread-self/io` does not see:
/// `socket`, `connect`, `accept4`, `poll`, `setsockopt`, `ioctl`, `close` and the like.
pub fn count_syscalls(n: u64) {
    OTHER_SYSCALLS.with(|c| c.set(c.get() + n));
}

/// Return `syscr + syscw` of the calling thread (0 if `/proc` cannot tell).
fn thread_syscalls() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/thread-self/io") else { return 0 };
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "syscr" || *k == "syscw")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

/// What a server's own counters add to its thread's usage: the bytes its CPU copied (our
/// stack and smoltcp count them) and the system calls its packet device made (AF_XDP
/// wake-ups, `sendmmsg` batches), which `/proc/thread-self/io` does not see.
#[derive(Clone, Copy, Debug, Default)]
pub struct Own {
    pub copied: u64,
    pub syscalls: u64,
}

impl From<u64> for Own {
    /// Bytes copied alone (a server without a device of its own).
    fn from(copied: u64) -> Own {
        Own { copied, syscalls: 0 }
    }
}

/// (Phase 0: warm-up, the window has not started.)
///
/// A server thread's view of the window: it samples its own counters when it sees the
/// client's phase change, so both threads count the same requests.
#[derive(Default)]
pub struct Window {
    seen: u8,
    start: Option<(Usage, u64)>,
    end: Option<(Usage, u64)>,
}

impl Window {
    /// Sample if `phase` moved on since the last call; `own` reads the server's own
    /// counters (bytes copied, or [`Own`]; 0 for kernel servers).
    pub fn observe<O: Into<Own>>(&mut self, phase: &AtomicU8, own: impl FnOnce() -> O) {
        let p = phase.load(Ordering::Relaxed);
        if p == self.seen {
            return;
        }
        self.seen = p;
        let sample = sample(own().into());
        if p >= MEASURING && self.start.is_none() {
            self.start = Some(sample);
        }
        if p >= DONE && self.end.is_none() {
            self.end = Some(sample);
        }
    }

    /// Close the window now if it started and has not ended (the client closed its
    /// connection before this thread saw the window end).
    pub fn finish(&mut self, own: impl Into<Own>) {
        if self.start.is_some() && self.end.is_none() {
            self.end = Some(sample(own.into()));
        }
    }

    /// Return the usage and bytes copied inside the window, if it was seen whole.
    pub fn delta(&self) -> Option<(Usage, u64)> {
        let ((u0, c0), (u1, c1)) = (self.start?, self.end?);
        Some((u1.since(&u0), c1.saturating_sub(c0)))
    }
}

/// The thread's usage with the device's system calls added, and the bytes copied.
fn sample(own: Own) -> (Usage, u64) {
    let mut usage = Usage::now();
    usage.syscalls += own.syscalls;
    (usage, own.copied)
}

/// The one system call without a safe wrapper in std.
#[allow(unsafe_code)]
pub(super) mod sys {
    use std::time::Duration;

    /// Return (user + system CPU time, voluntary, involuntary context switches) of the calling thread.
    pub fn thread_rusage() -> (Duration, u64, u64) {
        rusage(libc::RUSAGE_THREAD)
    }

    /// The same figures for the children this process has reaped so far (and theirs).
    pub fn reaped_children_rusage() -> (Duration, u64, u64) {
        rusage(libc::RUSAGE_CHILDREN)
    }

    fn rusage(who: libc::c_int) -> (Duration, u64, u64) {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `ru` points to writable memory of the size of `struct rusage`, which
        // getrusage fills; `who` is RUSAGE_THREAD or RUSAGE_CHILDREN, both valid on Linux.
        let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
        if rc != 0 {
            return (Duration::ZERO, 0, 0);
        }
        // SAFETY: getrusage returned 0, so it initialised the struct (and zeroed() had
        // already made every field a valid integer).
        let ru = unsafe { ru.assume_init() };
        let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
        (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
    }
}
