//! epoll(7) and poll(2) over our sockets and the kernel's descriptors in one wait.
//!
//! An epoll instance stays the kernel's (the program's descriptor is a real epoll): kernel
//! descriptors are added to it as usual. Our sockets are kept beside it, in [`Epoll`], with
//! their events and data; a wait looks at them (level- or edge-triggered, one-shot), asks
//! the kernel's instance without waiting, and to sleep registers its waker with each of
//! ours and sleeps in the kernel's `epoll_pwait`, where an eventfd the waker rings is
//! registered (its events never reach the program).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::task::Waker;
use std::time::Instant;

use libc::epoll_event;

use crate::env;
use crate::errno::Res;
use crate::real;
use crate::sock::{ERR, HUP, IN, OUT, Socket};
use crate::wait::{self, Bell, Next, Spinner};
use std::sync::atomic::Ordering;

/// The data of the eventfd's registration in the kernel's instance.
const SENTINEL: u64 = 0xb1a5_5b1a_55b1_a55b;

/// Every instance that watches one of our sockets, to forget a socket closed without
/// `EPOLL_CTL_DEL` (the kernel forgets a closed descriptor by itself).
static ALL: Mutex<Vec<Weak<Epoll>>> = Mutex::new(Vec::new());

struct Interest {
    sock: Arc<Socket>,
    events: u32,
    data: u64,
    /// Edge-triggered: the events last seen, the bytes received by then, and the sides'
    /// EAGAIN counts.
    last: u32,
    last_received: u64,
    last_gens: (u32, u32),
    /// One-shot and reported: silent until `EPOLL_CTL_MOD`.
    disabled: bool,
}

/// What an epoll instance watches of ours.
pub struct Epoll {
    epfd: i32,
    bell: Arc<Bell>,
    waker: Waker,
    interest: Mutex<BTreeMap<i32, Interest>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Epoll {
    /// Start keeping our sockets for the kernel's instance `epfd`.
    pub fn new(epfd: i32) -> Res<Arc<Epoll>> {
        let bell = Bell::new()?;
        let mut ev = epoll_event { events: libc::EPOLLIN as u32, u64: SENTINEL };
        // SAFETY: `ev` is a valid event for the call.
        if unsafe { real::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, bell.fd, &mut ev) } != 0 {
            return Err(wait::last_errno());
        }
        let waker = Waker::from(Arc::clone(&bell));
        let ep = Arc::new(Epoll { epfd, bell, waker, interest: Mutex::new(BTreeMap::new()) });
        let mut all = lock(&ALL);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&ep));
        Ok(ep)
    }

    /// `epoll_ctl(2)` for our socket `sock` at descriptor `fd`.
    pub fn ctl(&self, op: i32, fd: i32, sock: Arc<Socket>, events: u32, data: u64) -> Res<()> {
        let mut interest = lock(&self.interest);
        match op {
            libc::EPOLL_CTL_ADD => {
                if interest.contains_key(&fd) {
                    return Err(libc::EEXIST);
                }
                interest.insert(
                    fd,
                    Interest { sock, events, data, last: 0, last_received: 0, last_gens: (0, 0), disabled: false },
                );
            }
            libc::EPOLL_CTL_MOD => {
                let it = interest.get_mut(&fd).ok_or(libc::ENOENT)?;
                *it = Interest { sock, events, data, last: 0, last_received: 0, last_gens: (0, 0), disabled: false };
            }
            libc::EPOLL_CTL_DEL => {
                interest.remove(&fd).ok_or(libc::ENOENT)?;
            }
            _ => return Err(libc::EINVAL),
        }
        drop(interest);
        // A newly watched socket may be ready already: let a sleeping wait look.
        self.waker.wake_by_ref();
        Ok(())
    }

    /// Report ready sockets of ours into `out`; with `waker`, register it with each.
    fn collect(&self, out: &mut [epoll_event], waker: Option<&Waker>) -> usize {
        let mut interest = lock(&self.interest);
        let mut n = 0;
        for (fd, it) in interest.iter_mut() {
            if n == out.len() {
                break;
            }
            if it.disabled {
                continue;
            }
            let (now, received) = it.sock.poll_state(waker);
            let now = now & (it.events | ERR | HUP);
            let mut report = now;
            if it.events & libc::EPOLLET as u32 != 0 {
                // An edge: a bit newly set, new data received, or a side the program ran
                // dry (EAGAIN) since the last look that is ready again.
                let gens = (it.sock.read_gen.load(Ordering::SeqCst), it.sock.write_gen.load(Ordering::SeqCst));
                let edge = now & !it.last != 0
                    || (now & IN != 0 && (received != it.last_received || gens.0 != it.last_gens.0))
                    || (now & OUT != 0 && gens.1 != it.last_gens.1);
                it.last = now;
                it.last_received = received;
                it.last_gens = gens;
                if !edge {
                    report = 0;
                }
            }
            if report != 0 {
                log::trace!("epoll: socket {fd} ready {report:#x} (watching {:#x})", it.events);
                out[n] = epoll_event { events: report, u64: it.data };
                n += 1;
                if it.events & libc::EPOLLONESHOT as u32 != 0 {
                    it.disabled = true;
                }
            }
        }
        n
    }

    /// Ask the kernel's instance without waiting (or until `deadline`), into `out`; drop
    /// the eventfd's events.
    fn kernel(&self, out: &mut [epoll_event], timeout_ms: i32, mask: *const libc::sigset_t) -> Res<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let max = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: `out` holds `max` events; `mask` is null or the caller's signal set.
        let r = unsafe { real::epoll_pwait(self.epfd, out.as_mut_ptr(), max, timeout_ms, mask) };
        if r < 0 {
            return Err(wait::last_errno());
        }
        let mut kept = 0;
        for i in 0..r as usize {
            if out[i].u64 == SENTINEL {
                self.bell.drain();
            } else {
                out[kept] = out[i];
                kept += 1;
            }
        }
        Ok(kept)
    }

    /// `epoll_wait(2)`: our sockets and the kernel's descriptors, until one is ready,
    /// `deadline` passes, or a signal arrives (`EINTR`).
    pub fn wait(&self, out: &mut [epoll_event], deadline: Option<Instant>, mask: *const libc::sigset_t) -> Res<usize> {
        let env = env::get().map_err(|_| libc::ENETDOWN)?;
        let spinner = Spinner::new(env);
        loop {
            let _ = env.runtime.poll();
            let n = self.collect(out, None);
            let n = n + self.kernel(&mut out[n..], 0, std::ptr::null())?;
            if n > 0 {
                return Ok(n);
            }
            match spinner.next(deadline) {
                Next::TimedOut => return Ok(0),
                Next::Interrupted => return Err(libc::EINTR),
                Next::Spin => continue,
                Next::Sleep => {}
            }
            let n = self.collect(out, Some(&self.waker));
            if n > 0 {
                return Ok(n);
            }
            let _idle = env.runtime.idle();
            let n = self.kernel(out, wait::millis(deadline), mask)?;
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Forget `sock` (closed for good).
    fn forget(&self, sock: &Arc<Socket>) {
        lock(&self.interest).retain(|_, it| !Arc::ptr_eq(&it.sock, sock));
    }
}

/// Forget `sock` in every instance: its last descriptor closed.
pub fn forget_everywhere(sock: &Arc<Socket>) {
    let all: Vec<Arc<Epoll>> = lock(&ALL).iter().filter_map(Weak::upgrade).collect();
    for ep in all {
        ep.forget(sock);
    }
}

/// `poll(2)` over `fds`, where `ours[i]` is the socket of `fds[i]` if it is one of ours.
pub fn poll(
    fds: &mut [libc::pollfd],
    ours: &[Option<Arc<Socket>>],
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> Res<usize> {
    let env = env::get().map_err(|_| libc::ENETDOWN)?;
    let spinner = Spinner::new(env);
    let mut kernel: Vec<libc::pollfd> = Vec::new();
    let mut index: Vec<usize> = Vec::new();
    for (i, (pfd, sock)) in fds.iter().zip(ours).enumerate() {
        if sock.is_none() {
            kernel.push(libc::pollfd { revents: 0, ..*pfd });
            index.push(i);
        }
    }
    let look = |fds: &mut [libc::pollfd], waker: Option<&Waker>| {
        let mut n = 0;
        for (pfd, sock) in fds.iter_mut().zip(ours) {
            if let Some(sock) = sock {
                let m = sock.readiness(waker) & (pfd.events as u32 | ERR | HUP);
                pfd.revents = m as i16;
                n += usize::from(m != 0);
            }
        }
        n
    };
    let copy_back = |fds: &mut [libc::pollfd], kernel: &[libc::pollfd]| {
        let mut n = 0;
        for (k, &i) in kernel.iter().zip(&index) {
            fds[i].revents = k.revents;
            n += usize::from(k.revents != 0);
        }
        n
    };
    loop {
        let _ = env.runtime.poll();
        let mut n = look(fds, None);
        if !kernel.is_empty() {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `kernel` holds valid pollfds; `zero` lives for the call.
            if unsafe { real::ppoll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, &zero, std::ptr::null()) } < 0 {
                return Err(wait::last_errno());
            }
            n += copy_back(fds, &kernel);
        }
        if n > 0 {
            return Ok(n);
        }
        match spinner.next(deadline) {
            Next::TimedOut => return Ok(0),
            Next::Interrupted => return Err(libc::EINTR),
            Next::Spin => continue,
            Next::Sleep => {}
        }
        let (bell, waker) = wait::thread_bell()?;
        let n = look(fds, Some(&waker));
        if n > 0 {
            return Ok(n);
        }
        let _idle = env.runtime.idle();
        kernel.push(libc::pollfd { fd: bell.fd, events: libc::POLLIN, revents: 0 });
        let ts = wait::timespec(deadline);
        let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `kernel` holds valid pollfds; `tp` is null or points at `ts`; `mask` is
        // null or the caller's signal set.
        let r = unsafe { real::ppoll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, tp, mask) };
        let rung = kernel.pop().is_some_and(|b| b.revents != 0);
        if r < 0 {
            return Err(wait::last_errno());
        }
        if rung {
            bell.drain();
        }
        let n = copy_back(fds, &kernel);
        if n > 0 {
            return Ok(n);
        }
    }
}
