//! Waiting for our sockets, alone or beside the kernel's descriptors: poll the stacks,
//! spin while allowed, then register a waker that rings an eventfd and sleep in the
//! kernel's own `ppoll`/`epoll_pwait` on that eventfd and the program's descriptors. A
//! signal ends the sleep with `EINTR`, as it ends the kernel's.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Instant;

use crate::env;
use crate::errno::{Errno, Res};
use crate::real;
use crate::signals;

/// Rings an eventfd when woken; closes it when the last waker goes (a waker may outlive
/// the wait that made it, in a stack's waiter list, so the descriptor must too).
pub struct Bell {
    pub fd: i32,
}

impl Bell {
    pub fn new() -> Res<Arc<Bell>> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { real::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(last_errno());
        }
        Ok(Arc::new(Bell { fd }))
    }

    /// Empty the eventfd (after a wake).
    pub fn drain(&self) {
        let mut n = 0u64;
        // SAFETY: reading 8 bytes into a u64 on the stack.
        unsafe { real::read(self.fd, (&raw mut n).cast(), 8) };
    }
}

impl Wake for Bell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 on the stack to our eventfd.
        unsafe { real::write(self.fd, (&raw const one).cast(), 8) };
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { real::close(self.fd) };
    }
}

thread_local! {
    static BELL: std::cell::OnceCell<Option<(Arc<Bell>, Waker)>> = const { std::cell::OnceCell::new() };
}

/// Return this thread's bell and a waker that rings it.
pub fn thread_bell() -> Res<(Arc<Bell>, Waker)> {
    BELL.with(|b| {
        b.get_or_init(|| Bell::new().ok().map(|bell| (Arc::clone(&bell), Waker::from(bell))))
            .clone()
            .ok_or(libc::EMFILE)
    })
}

/// Return the calling thread's errno.
pub fn last_errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Return how long until `deadline` as a timespec for ppoll (`None`: no limit).
pub fn timespec(deadline: Option<Instant>) -> Option<libc::timespec> {
    deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as libc::c_long }
    })
}

/// Return milliseconds until `deadline` for epoll (-1: no limit), rounded up.
pub fn millis(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
        }
    }
}

/// What a waiting loop does after a look that found nothing ready.
pub enum Next {
    /// The deadline has passed.
    TimedOut,
    /// A handler ran while the loop polled in user space: the kernel would have said EINTR.
    Interrupted,
    /// Look again (spinning: busy-polling, or within the spin time).
    Spin,
    /// Register the waker and sleep in the kernel.
    Sleep,
}

/// The spin-then-sleep policy of one wait: `BYPASS_SPIN_USEC` or `BYPASS_BUSY_POLL`, and
/// the signals delivered since it began.
pub struct Spinner {
    spin_end: Instant,
    busy_poll: bool,
    signals: u64,
}

impl Spinner {
    pub fn new(env: &env::Env) -> Spinner {
        Spinner { spin_end: Instant::now() + env.spin, busy_poll: env.busy_poll, signals: signals::delivered() }
    }

    /// Decide what follows a look that found nothing, for a wait until `deadline`.
    pub fn next(&self, deadline: Option<Instant>) -> Next {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Next::TimedOut;
        }
        if signals::delivered() != self.signals {
            return Next::Interrupted;
        }
        if self.busy_poll || now < self.spin_end {
            std::hint::spin_loop();
            return Next::Spin;
        }
        Next::Sleep
    }
}

/// Wait until `ready` says so (it is called without a waker to look, and with one to look
/// and register in one step), or `deadline` passes (`EAGAIN`), or a signal arrives
/// (`EINTR`).
pub fn until(deadline: Option<Instant>, ready: &mut dyn FnMut(Option<&Waker>) -> bool) -> Res<()> {
    let env = env::get().map_err(|_| libc::ENETDOWN)?;
    let spinner = Spinner::new(env);
    loop {
        let _ = env.runtime.poll();
        if ready(None) {
            return Ok(());
        }
        match spinner.next(deadline) {
            Next::TimedOut => return Err(libc::EAGAIN),
            Next::Interrupted => return Err(libc::EINTR),
            Next::Spin => continue,
            Next::Sleep => {}
        }
        let (bell, waker) = thread_bell()?;
        if ready(Some(&waker)) {
            return Ok(());
        }
        let _idle = env.runtime.idle();
        let mut fds = [libc::pollfd { fd: bell.fd, events: libc::POLLIN, revents: 0 }];
        let ts = timespec(deadline);
        let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: one valid pollfd; `tp` is null or points at `ts`, alive for the call.
        let r = unsafe { real::ppoll(fds.as_mut_ptr(), 1, tp, std::ptr::null()) };
        if r < 0 {
            let e = last_errno();
            if e == libc::EINTR {
                return Err(libc::EINTR);
            }
            return Err(e);
        }
        bell.drain();
    }
}

/// Send SIGPIPE to the calling thread, as a send on a closed connection without
/// `MSG_NOSIGNAL` does.
pub fn raise_sigpipe() {
    // SAFETY: raising a signal in the calling thread.
    unsafe { libc::raise(libc::SIGPIPE) };
}
