//! In-thread mode: the application's own threads run the stack inside their socket calls.
//!
//! Each device queue has a [`Core`]: its [`Stack`] behind one lock, and what waits on it. A
//! thread that reads, writes, accepts or connects takes the lock, tries the call on the
//! TCP buffers and, when it cannot complete, polls the device, the timers and TCP itself
//! (receive, events, transmit) and tries again. Bytes are copied once, between the TCP
//! buffers and the caller's buffer, as [`Stack::read`] and [`Stack::write`] do.
//!
//! A call that must wait spins (polling) for [`RuntimeOptions::spin`](crate::RuntimeOptions),
//! or for good when busy-polling, and then sleeps. One thread per stack spins at a time; the
//! others sleep at once, and whoever polls wakes them when their connection changes.
//!
//! While no application thread is inside (none has polled for [`GRACE`], or
//! [`GRACE_BUSY_POLL`] when busy-polling, or every waiting
//! one sleeps), a helper thread keeps the protocol moving: it watches the device
//! ([`Device::sleeper`]) and the next timer, and polls, so the peer's data is ACKed up to
//! the offered window, handshakes complete into the accept queue and keepalives answer,
//! however long the application is away. While applications poll, it naps. While traffic
//! flows and the application's threads sleep, it polls in a loop, yielding the CPU to the
//! threads it woke between turns; they leave polling, and transmitting what they write, to
//! it ([`Core::transmit`]).
//!
//! With tokio, a driver task on the runtime's workers polls the stack between the tasks it
//! wakes (so one turn of the worker answers every connection with one transmit), spinning
//! by yielding, and leaves the device to the helper when idle for `driver_spin`.

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

use bypass_device::{Device, Sleeper};
use bypass_stack::{Counters, ListenerId, SocketId, Stack};
use bypass_tcp::{Event, State as TcpState};

use crate::wait::Wait;

/// How long no application thread may have polled before the helper polls instead.
pub(crate) const GRACE: Duration = Duration::from_millis(1);
/// The same when the application busy-polls: it comes back without sleeping, so a long
/// gap is work between its polls (a batch of events served), not absence, and a helper
/// that stepped in would only contend for the lock.
pub(crate) const GRACE_BUSY_POLL: Duration = Duration::from_millis(10);
/// The longest a sleeping call sleeps before it looks again by itself (wakes are not lost;
/// this bounds the cost of a bug and lets a stopped runtime be noticed).
const PARK_MAX: Duration = Duration::from_millis(100);
/// How long the helper sleeps at most on a device it cannot watch (no [`Sleeper`]).
const UNWATCHABLE: Duration = Duration::from_millis(1);
/// Pause instructions between two polls of a spinning thread (a microsecond or two).
const SPIN_PAUSE: usize = 64;
/// Established connections a listener keeps for `accept`, at most; the stack's own backlog
/// holds the rest.
const BACKLOG: usize = 1024;

/// Who to wake when a connection or listener changes.
#[derive(Clone)]
pub(crate) enum Waiter {
    /// A thread asleep in a blocking call.
    Thread(Thread),
    /// A task waiting in a `poll_*` (tokio).
    Task(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            Waiter::Thread(t) => t.unpark(),
            Waiter::Task(w) => w.wake(),
        }
    }

    fn same(&self, other: &Waiter) -> bool {
        match (self, other) {
            (Waiter::Thread(a), Waiter::Thread(b)) => a.id() == b.id(),
            (Waiter::Task(a), Waiter::Task(b)) => a.will_wake(b),
            _ => false,
        }
    }
}

/// The waiters of one side of a connection (or of a listener), each once.
#[derive(Default)]
pub(crate) struct Waiters(Vec<Waiter>);

impl Waiters {
    pub(crate) fn add(&mut self, w: Waiter) {
        match self.0.iter_mut().find(|x| x.same(&w)) {
            Some(slot) => *slot = w,
            None => self.0.push(w),
        }
    }

    /// Move every waiter to `woken` (they are woken once the lock is released).
    fn take_into(&mut self, woken: &mut Vec<Waiter>) {
        woken.append(&mut self.0);
    }
}

/// The waiters of a connection the application holds.
#[derive(Default)]
pub(crate) struct Sock {
    pub(crate) readers: Waiters,
    pub(crate) writers: Waiters,
}

/// A port listened on: established connections taken from the stack, and who waits for one.
pub(crate) struct Listen {
    id: ListenerId,
    pub(crate) ready: VecDeque<SocketId>,
    pub(crate) waiters: Waiters,
}

/// What a frame or a fact handed over by a sibling stack is.
enum Handoff {
    Frame(Vec<u8>),
    Neighbour(std::net::IpAddr, [u8; 6]),
}

/// What the lock of a [`Core`] guards.
pub(crate) struct State {
    /// `None` once the runtime has stopped (the device is closed then).
    pub(crate) stack: Option<Stack<Box<dyn Device + Send>>>,
    pub(crate) socks: HashMap<SocketId, Sock>,
    pub(crate) listeners: HashMap<u16, Listen>,
    /// Waiters to wake once the lock is released.
    woken: Vec<Waiter>,
    /// The counters as the stack stopped.
    final_counters: Option<Counters>,
    /// The stack's control endpoint (`bypass ss`, `bypass stat`, `bypass capture`); gone
    /// with the stack.
    endpoint: Option<bypass_control::Server>,
}

impl State {
    /// Return the stack, or the error every call gets once the runtime has stopped.
    pub(crate) fn stack(&mut self) -> io::Result<&mut Stack<Box<dyn Device + Send>>> {
        self.stack.as_mut().ok_or_else(stopped)
    }

    /// Return the waiters of `id`, adding an entry for it.
    pub(crate) fn sock(&mut self, id: SocketId) -> &mut Sock {
        self.socks.entry(id).or_default()
    }
}

thread_local! {
    /// The waiters a thread wakes after releasing a lock, kept to reuse the allocation.
    static WAKING: std::cell::RefCell<Vec<Waiter>> = const { std::cell::RefCell::new(Vec::new()) };
    /// How many stacks' locks the thread holds.
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// What runs when a thread lets go of the last stack lock it held: see [`on_release`].
static ON_RELEASE: OnceLock<fn()> = OnceLock::new();

/// Return whether the calling thread holds a stack's lock now. A signal handler that finds
/// it does has interrupted the stack mid-poll: see [`on_release`].
pub fn holds_a_stack() -> bool {
    HELD.try_with(std::cell::Cell::get).unwrap_or(0) > 0
}

/// Run `f` whenever a thread lets go of the last stack lock it held (set once per process;
/// later calls are ignored).
///
/// For a preloaded library whose program's signal handlers may not run while the stack is
/// locked: a handler that calls `exit(3)` (iperf3's does) runs the exit handlers, which stop
/// the stack, which takes the lock the interrupted thread holds, and the process hangs. The
/// library defers such a handler while [`holds_a_stack`] and runs it from `f`, outside the
/// lock, as OpenOnload defers signals while it holds a stack's lock.
pub fn on_release(f: fn()) {
    let _ = ON_RELEASE.set(f);
}

/// A stack's lock, held: counted in [`HELD`] so that [`holds_a_stack`] knows, and
/// [`ON_RELEASE`] runs once the thread holds none.
pub(crate) struct Locked<'a> {
    guard: Option<MutexGuard<'a, State>>,
}

impl<'a> Locked<'a> {
    fn new(guard: MutexGuard<'a, State>) -> Self {
        let _ = HELD.try_with(|h| h.set(h.get() + 1));
        Locked { guard: Some(guard) }
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let last = HELD
            .try_with(|h| {
                h.set(h.get().saturating_sub(1));
                h.get() == 0
            })
            .unwrap_or(true);
        if last && let Some(f) = ON_RELEASE.get() {
            f();
        }
    }
}

/// One stack and what waits on it: see the module docs.
pub(crate) struct Core {
    pub(crate) index: usize,
    state: Mutex<State>,
    /// When the stack was made: the zero of `last_app_poll`.
    origin: Instant,
    /// Microseconds after `origin` at which an application thread (or the tokio driver)
    /// last polled.
    last_app_poll: AtomicU64,
    /// Threads spinning in a wait (at most one).
    spinning: AtomicUsize,
    /// Threads and driver tasks asleep in a wait: they count on the helper.
    pub(crate) sleeping: AtomicUsize,
    /// The helper naps (not watching the device): unpark it to make it look.
    napping: AtomicBool,
    /// The helper polls in a loop (traffic is flowing): it transmits what is written soon,
    /// so a writer need not (see [`Core::transmit`]).
    helper_polling: AtomicBool,
    /// Something was written and left for the helper to transmit.
    tx_pending: AtomicBool,
    /// The helper sleeps on the device until `watch_until` (microseconds of the stack's
    /// clock; `u64::MAX`: no timer): a call that arms an earlier timer wakes it (see
    /// [`Core::after_call`]).
    watching: AtomicBool,
    watch_until: AtomicU64,
    helper: OnceLock<Thread>,
    /// Ends the helper's watch of the device.
    device_waker: Option<bypass_device::Waker>,
    /// How long a waiting call spins before it sleeps.
    pub(crate) spin: Duration,
    /// How long an idle tokio driver spins before it sleeps.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    driver_spin: Duration,
    /// Spin without end instead of sleeping.
    pub(crate) busy_poll: bool,
    /// Writes leave transmitting to the next poll (see `RuntimeOptions::defer_transmit`).
    defer_transmit: bool,
    stopped: AtomicBool,
    /// A tokio driver task runs for this stack.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    driver_running: AtomicBool,
    /// The driver sleeps: wake `driver_waker` when there is work.
    driver_asleep: AtomicBool,
    driver_waker: Mutex<Option<Waker>>,
    /// Frames and neighbours from sibling stacks, taken at the next poll.
    inbox: Mutex<Vec<Handoff>>,
    inbox_pending: AtomicBool,
    siblings: OnceLock<Vec<Weak<Core>>>,
}

impl Core {
    /// Return a core running `stack`, whose device's waker is `device_waker`, waiting and
    /// spinning as `options` say.
    pub(crate) fn new(
        index: usize,
        stack: Stack<Box<dyn Device + Send>>,
        device_waker: Option<bypass_device::Waker>,
        options: &crate::RuntimeOptions,
        endpoint: Option<bypass_control::Server>,
    ) -> Core {
        Core {
            index,
            state: Mutex::new(State {
                stack: Some(stack),
                socks: HashMap::new(),
                listeners: HashMap::new(),
                woken: Vec::new(),
                final_counters: None,
                endpoint,
            }),
            origin: Instant::now(),
            last_app_poll: AtomicU64::new(0),
            spinning: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            napping: AtomicBool::new(false),
            helper_polling: AtomicBool::new(false),
            tx_pending: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            watch_until: AtomicU64::new(u64::MAX),
            helper: OnceLock::new(),
            device_waker,
            spin: options.spin,
            driver_spin: options.driver_spin,
            busy_poll: options.busy_poll,
            defer_transmit: options.defer_transmit,
            stopped: AtomicBool::new(false),
            driver_running: AtomicBool::new(false),
            driver_asleep: AtomicBool::new(false),
            driver_waker: Mutex::new(None),
            inbox: Mutex::new(Vec::new()),
            inbox_pending: AtomicBool::new(false),
            siblings: OnceLock::new(),
        }
    }

    /// Tell the core about the other stacks of its runtime (frames and neighbours go to them).
    pub(crate) fn set_siblings(&self, siblings: Vec<Weak<Core>>) {
        let _ = self.siblings.set(siblings);
    }

    fn lock(&self) -> Locked<'_> {
        Locked::new(self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Run `f` under the lock, then wake whom it made ready (outside the lock).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        Self::run_locked(self.lock(), f)
    }

    /// Run `f` under the lock if no one holds it, as [`with`](Core::with); `None` if someone does.
    fn try_with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        let state = match self.state.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(Self::run_locked(Locked::new(state), f))
    }

    fn run_locked<T>(mut state: Locked<'_>, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut state);
        if state.woken.is_empty() {
            return out;
        }
        // The thread's spare list, if it still has one: a thread that is exiting (a
        // program's atexit handler stopping the runtime) has lost its thread-locals.
        let mut waking = WAKING.try_with(|w| std::mem::take(&mut *w.borrow_mut())).unwrap_or_default();
        std::mem::swap(&mut waking, &mut state.woken);
        drop(state);
        for w in waking.drain(..) {
            w.wake();
        }
        let _ = WAKING.try_with(|w| *w.borrow_mut() = waking);
        out
    }

    /// Return whether the runtime has stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    fn micros(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }

    /// Return how long ago an application thread last polled.
    fn since_app_poll(&self) -> Duration {
        Duration::from_micros(self.micros().saturating_sub(self.last_app_poll.load(Ordering::Relaxed)))
    }

    /// One turn of the stack: hand-offs from siblings, receive and timers, events to
    /// waiters, accept queues, transmit. `app` says an application thread (or the driver)
    /// polls, not the helper. Return whether frames moved.
    pub(crate) fn progress(&self, st: &mut State, app: bool) -> io::Result<bool> {
        if app {
            self.last_app_poll.store(self.micros(), Ordering::Relaxed);
        }
        let State { stack, socks, listeners, woken, endpoint, .. } = st;
        let stack = stack.as_mut().ok_or_else(stopped)?;
        // This turn transmits whatever was left for it.
        self.tx_pending.store(false, Ordering::SeqCst);
        if self.inbox_pending.swap(false, Ordering::AcqRel) {
            let handed = std::mem::take(&mut *self.inbox.lock().unwrap_or_else(PoisonError::into_inner));
            for h in handed {
                match h {
                    Handoff::Frame(frame) => stack.receive_handed_over(&frame),
                    Handoff::Neighbour(ip, mac) => stack.learn_neighbour(ip, mac),
                }
            }
        }
        let received = stack.poll_rx()?;
        if let Some(siblings) = self.siblings.get().filter(|s| !s.is_empty()) {
            for (ip, mac) in stack.take_learned_neighbours() {
                for sibling in siblings.iter().filter_map(Weak::upgrade) {
                    sibling.hand(Handoff::Neighbour(ip, mac));
                }
            }
            for (owner, frame) in stack.take_foreign_frames() {
                let sibling = siblings.iter().filter_map(Weak::upgrade).find(|s| s.index == usize::from(owner));
                if let Some(sibling) = sibling {
                    sibling.hand(Handoff::Frame(frame));
                }
            }
        }
        while let Some((id, event)) = stack.poll_event() {
            let Some(sock) = socks.get_mut(&id) else { continue };
            match event {
                Event::Readable | Event::PeerClosed => sock.readers.take_into(woken),
                Event::Writable => sock.writers.take_into(woken),
                Event::Established | Event::Reset | Event::Closed | Event::TimedOut | Event::Unreachable => {
                    sock.readers.take_into(woken);
                    sock.writers.take_into(woken);
                }
            }
        }
        if let Some(endpoint) = endpoint {
            endpoint.poll(stack);
        }
        for listen in listeners.values_mut() {
            let before = listen.ready.len();
            while listen.ready.len() < BACKLOG {
                let Some(id) = stack.accept(listen.id) else { break };
                listen.ready.push_back(id);
                socks.insert(id, Sock::default());
            }
            if listen.ready.len() > before {
                listen.waiters.take_into(woken);
            }
        }
        let sent = stack.poll_tx()?;
        let busy = received > 0 || sent > 0;
        if busy && !app && self.driver_asleep.load(Ordering::SeqCst) {
            self.wake_driver();
        }
        Ok(busy)
    }

    /// Transmit what a call under the lock just wrote (or the window a read opened), unless
    /// the helper polls in a loop and will: then the caller holds the lock only for its copy,
    /// and the helper sends the writes of many threads with one kick of the device. The helper looks for
    /// `tx_pending` after it stops polling, and a writer for `helper_polling` after it set
    /// `tx_pending` (both sequentially consistent), so one of them always transmits.
    pub(crate) fn transmit(&self, st: &mut State) -> io::Result<()> {
        self.tx_pending.store(true, Ordering::SeqCst);
        if self.defer_transmit || self.helper_polling.load(Ordering::SeqCst) {
            return Ok(());
        }
        st.stack()?.poll_tx()?;
        self.after_call(st);
        Ok(())
    }

    /// After an application's call that may have armed a timer (a retransmission for what it
    /// sent, a close's FIN): if the helper sleeps on the device past that timer, wake it to
    /// look again, so the timer fires while the application is away.
    pub(crate) fn after_call(&self, st: &State) {
        if !self.watching.load(Ordering::SeqCst) {
            return;
        }
        let due = st.stack.as_ref().and_then(|s| s.poll_timeout()).map_or(u64::MAX, |t| t.as_micros());
        if due < self.watch_until.load(Ordering::SeqCst)
            && let Some(w) = &self.device_waker
        {
            w.wake();
        }
    }

    /// Queue a hand-off from a sibling and make sure someone polls this stack soon.
    fn hand(&self, handoff: Handoff) {
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner).push(handoff);
        self.inbox_pending.store(true, Ordering::Release);
        self.call_helper();
        if let Some(w) = &self.device_waker {
            w.wake();
        }
    }

    /// Make a napping helper look at the stack now (a thread is about to sleep on it).
    pub(crate) fn call_helper(&self) {
        if self.napping.load(Ordering::SeqCst)
            && let Some(helper) = self.helper.get()
        {
            helper.unpark();
        }
    }

    /// Run as the helper thread until the runtime stops: see the module docs.
    pub(crate) fn help(self: Arc<Core>, sleeper: Option<Sleeper>) {
        let _ = self.helper.set(std::thread::current());
        let mut busy_before = false;
        loop {
            if self.stopped() {
                return;
            }
            let idle = self.since_app_poll();
            let spinner = self.spinning.load(Ordering::SeqCst) > 0;
            let grace = if self.busy_poll { GRACE_BUSY_POLL } else { GRACE };
            if spinner || (idle < grace && self.sleeping.load(Ordering::SeqCst) == 0) {
                self.stop_polling();
                busy_before = false;
                self.napping.store(true, Ordering::SeqCst);
                // Look again after raising the flag: a thread that went to sleep before the
                // flag was up did not unpark us, and is seen here.
                if spinner || self.sleeping.load(Ordering::SeqCst) == 0 {
                    std::thread::park_timeout(grace.saturating_sub(idle).max(GRACE / 4));
                }
                self.napping.store(false, Ordering::SeqCst);
                continue;
            }
            let poll = |st: &mut State| {
                let busy = self.progress(st, false)?;
                let stack = st.stack()?;
                let now = stack.now();
                Ok::<_, io::Error>((busy, stack.poll_timeout().map(|t| t.saturating_duration_since(now))))
            };
            // After a busy turn, more is likely under way: poll again, but leave the lock to
            // an application thread that holds it (it polls too), and yield between polls so
            // the threads just woken can run.
            let turn = if busy_before {
                // Let the threads this turn woke run first, where they wait for a CPU.
                std::thread::yield_now();
                match self.try_with(poll) {
                    Some(turn) => turn,
                    None => continue,
                }
            } else {
                self.with(poll)
            };
            let (busy, timer) = match turn {
                Ok(t) => t,
                Err(_) if self.stopped() => return,
                Err(e) => {
                    log::warn!("stack {}: the helper's poll failed: {e}", self.index);
                    std::thread::sleep(UNWATCHABLE);
                    continue;
                }
            };
            busy_before = busy;
            if busy {
                self.helper_polling.store(true, Ordering::SeqCst);
                continue;
            }
            self.stop_polling();
            let Some(sleeper) = &sleeper else {
                std::thread::park_timeout(timer.unwrap_or(UNWATCHABLE).min(UNWATCHABLE));
                continue;
            };
            // Watch until the next timer. Raise the flag, then look at the timers again: a
            // call that armed an earlier one before it saw the flag is seen here; one after
            // rings the device (`after_call`).
            let until = self.with(|st| st.stack.as_ref().map(|s| s.now().as_micros()));
            let Some(now) = until else { continue };
            let until = timer.map_or(u64::MAX, |t| now.saturating_add(t.as_micros() as u64));
            self.watch_until.store(until, Ordering::SeqCst);
            self.watching.store(true, Ordering::SeqCst);
            let again = self.with(|st| st.stack.as_ref().and_then(|s| s.poll_timeout()).map(|t| t.as_micros()));
            if again.is_none_or(|t| t >= until) && timer != Some(Duration::ZERO) {
                sleeper.sleep(timer);
            }
            self.watching.store(false, Ordering::SeqCst);
        }
    }

    /// Leave the helper's polling loop: writers transmit for themselves from now on, and
    /// what one left to the helper before it saw this goes out here (see
    /// [`transmit`](Core::transmit)).
    fn stop_polling(&self) {
        if !self.helper_polling.swap(false, Ordering::SeqCst) || !self.tx_pending.load(Ordering::SeqCst) {
            return;
        }
        self.with(|st| {
            self.tx_pending.store(false, Ordering::SeqCst);
            if let Some(stack) = st.stack.as_mut()
                && let Err(e) = stack.poll_tx()
            {
                log::warn!("stack {}: the helper's transmit failed: {e}", self.index);
            }
        });
    }

    /// Stop: end the helper's watch (the caller joins it), then reset every connection,
    /// close the device and wake every waiter; return the final counters.
    pub(crate) fn begin_stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(w) = &self.device_waker {
            w.wake();
        }
        if let Some(helper) = self.helper.get() {
            helper.unpark();
        }
    }

    /// Finish stopping after the helper has ended: see [`begin_stop`](Core::begin_stop).
    pub(crate) fn finish_stop(&self) -> io::Result<Counters> {
        self.finish_stop_within(None)
    }

    /// Finish stopping as [`finish_stop`](Core::finish_stop) does, but give up with
    /// `WouldBlock` if the lock is not free within `limit`: for a process that is exiting,
    /// which must not hang on a lock its interrupted thread may hold.
    pub(crate) fn finish_stop_within(&self, limit: Option<Duration>) -> io::Result<Counters> {
        let stop = |st: &mut State| {
            let result = match st.stack.as_mut() {
                Some(stack) => {
                    stack.abort_all();
                    let flushed = stack.poll_tx().map(drop);
                    st.final_counters = Some(stack.counters().clone());
                    flushed
                }
                None => Ok(()),
            };
            st.stack = None;
            st.endpoint = None;
            let State { socks, listeners, woken, .. } = st;
            for sock in socks.values_mut() {
                sock.readers.take_into(woken);
                sock.writers.take_into(woken);
            }
            for listen in listeners.values_mut() {
                listen.waiters.take_into(woken);
            }
            result.map(|()| st.final_counters.clone().unwrap_or_default())
        };
        let result = match limit {
            None => self.with(stop),
            Some(limit) => {
                let deadline = Instant::now() + limit;
                loop {
                    if let Some(result) = self.try_with(stop) {
                        break result;
                    }
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(
                            ErrorKind::WouldBlock,
                            "the stack's lock stayed taken (by the exiting thread itself, if a signal handler \
                             called exit while it polled): its connections are left to time out",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        self.wake_driver();
        result
    }

    /// Return the stack's counters (as they were when it stopped, after a stop).
    pub(crate) fn counters(&self) -> Counters {
        let st = self.lock();
        match &st.stack {
            Some(stack) => stack.counters().clone(),
            None => st.final_counters.clone().unwrap_or_default(),
        }
    }

    /// Poll the stack once from an application's thread: see [`Runtime::poll`](crate::Runtime::poll).
    pub(crate) fn poll_once(&self) -> io::Result<bool> {
        self.with(|st| self.progress(st, true))
    }

    /// Listen on `port`.
    pub(crate) fn listen(&self, port: u16) -> io::Result<()> {
        self.with(|st| {
            let id = st.stack()?.listen(port).map_err(crate::errors::listen)?;
            st.listeners.insert(port, Listen { id, ready: VecDeque::new(), waiters: Waiters::default() });
            Ok(())
        })
    }

    /// Stop listening on `port`, resetting the connections no one accepted.
    pub(crate) fn unlisten(&self, port: u16) {
        self.with(|st| {
            let Some(listen) = st.listeners.remove(&port) else { return };
            let Some(stack) = st.stack.as_mut() else { return };
            stack.unlisten(listen.id);
            for id in listen.ready {
                stack.abort(id);
                st.socks.remove(&id);
            }
            let _ = stack.poll_tx();
        });
    }

    /// Start opening a connection to `remote` (from `local_port`, else an ephemeral one):
    /// the SYN is sent before this returns.
    pub(crate) fn start_connect(&self, remote: SocketAddr, local_port: Option<u16>) -> io::Result<SocketId> {
        self.with(|st| {
            let stack = st.stack()?;
            let id = match local_port {
                Some(port) => stack.connect_from(port, remote),
                None => stack.connect(remote),
            }
            .map_err(crate::errors::connect)?;
            stack.poll_tx()?;
            st.socks.insert(id, Sock::default());
            self.after_call(st);
            Ok(id)
        })
    }

    /// Ensure a tokio driver task polls this stack (spawned on the current runtime).
    #[cfg(feature = "tokio")]
    pub(crate) fn ensure_driver(self: &Arc<Core>) {
        if !self.driver_running.swap(true, Ordering::SeqCst) {
            tokio::spawn(drive(Arc::clone(self)));
        }
    }

    /// Return whether a driver task polls the stack now (it runs and is not asleep).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn driver_awake(&self) -> bool {
        self.driver_running.load(Ordering::SeqCst) && !self.driver_asleep.load(Ordering::SeqCst)
    }

    fn wake_driver(&self) {
        if self.driver_asleep.swap(false, Ordering::SeqCst)
            && let Some(w) = self.driver_waker.lock().unwrap_or_else(PoisonError::into_inner).take()
        {
            w.wake();
        }
    }
}

/// The error of every call on a stopped runtime.
pub(crate) fn stopped() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the runtime has stopped")
}

/// Holds the one spinning slot of a core while a thread spins in a wait.
struct Spinning<'a>(&'a Core);

impl<'a> Spinning<'a> {
    fn try_take(core: &'a Core) -> Option<Spinning<'a>> {
        core.spinning.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).ok().map(|_| Spinning(core))
    }
}

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        self.0.spinning.store(0, Ordering::SeqCst);
    }
}

/// Counts a thread asleep on each of `cores` while it lives.
struct Sleeping<'a>(&'a [Arc<Core>]);

impl<'a> Sleeping<'a> {
    fn new(cores: &'a [Arc<Core>]) -> Sleeping<'a> {
        for core in cores {
            core.sleeping.fetch_add(1, Ordering::SeqCst);
            core.call_helper();
        }
        Sleeping(cores)
    }
}

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        for core in self.0 {
            core.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Run a blocking call on `cores` (one, or every stack of a listener): `attempt` tries it
/// under a core's lock (`None`: not yet), `register` adds the calling thread as a waiter.
/// Between tries the caller polls the stacks itself, spins while it may, then sleeps until
/// woken, as `wait` allows. `WouldBlock` when it may not wait or the time is up.
pub(crate) fn block_on<T>(
    cores: &[Arc<Core>],
    wait: Wait,
    mut attempt: impl FnMut(usize, &mut State) -> Option<io::Result<T>>,
    mut register: impl FnMut(usize, &mut State, Waiter),
) -> io::Result<T> {
    let deadline = match wait {
        Wait::For(t) => Some(Instant::now() + t),
        _ => None,
    };
    let first = &cores[0];
    let mut spin_end = None;
    let mut spinning = None;
    loop {
        let now = Instant::now();
        let may_wait = !matches!(wait, Wait::No) && deadline.is_none_or(|d| now < d);
        // Spin while the time allows and no other thread of this stack spins; else this
        // poll is the last before sleeping, and registers in the same hold of the lock.
        let spin_end = *spin_end.get_or_insert(now + first.spin);
        if may_wait && (first.busy_poll || now < spin_end) {
            if spinning.is_none() {
                spinning = Spinning::try_take(first);
            }
        } else {
            spinning = None;
        }
        let sleep_next = may_wait && spinning.is_none();
        for (k, core) in cores.iter().enumerate() {
            let poll = |st: &mut State| {
                if let Some(r) = attempt(k, st) {
                    return Some(r);
                }
                // A helper polling in a loop polls for everyone; else poll here.
                if (spinning.is_some() || !core.helper_polling.load(Ordering::SeqCst))
                    && let Err(e) = core.progress(st, true)
                {
                    return Some(Err(e));
                }
                let r = attempt(k, st);
                if r.is_none() && sleep_next {
                    // Under the lock after a last try: a change after it wakes us.
                    register(k, st, Waiter::Thread(std::thread::current()));
                }
                r
            };
            // Spinning, leave the lock to whoever holds it (a thread this poll woke, most
            // likely): it polls too.
            let tried = if spinning.is_some() { core.try_with(poll).flatten() } else { core.with(poll) };
            if let Some(r) = tried {
                return r;
            }
        }
        if !may_wait {
            return Err(io::Error::from(ErrorKind::WouldBlock));
        }
        if spinning.is_some() {
            // Off the lock for a moment between polls, so the threads woken can take it.
            for _ in 0..SPIN_PAUSE {
                std::hint::spin_loop();
            }
            continue;
        }
        let _sleeping = Sleeping::new(cores);
        let nap = deadline.map_or(PARK_MAX, |d| d.saturating_duration_since(Instant::now()).min(PARK_MAX));
        std::thread::park_timeout(nap);
    }
}

/// The tokio driver: poll the stack between the tasks it wakes, yielding to them; once idle
/// for the spin time (never when busy-polling), sleep until the helper sees work.
#[cfg(feature = "tokio")]
async fn drive(core: Arc<Core>) {
    /// Marks the driver gone when its task ends or is dropped (the tokio runtime stopped).
    struct Running(Arc<Core>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.driver_running.store(false, Ordering::SeqCst);
        }
    }
    let running = Running(core);
    let core = &running.0;
    let mut idle_since: Option<Instant> = None;
    loop {
        if core.stopped() {
            return;
        }
        let busy = match core.with(|st| core.progress(st, true)) {
            Ok(busy) => busy,
            Err(_) if core.stopped() => return,
            Err(e) => {
                log::warn!("stack {}: the driver's poll failed: {e}", core.index);
                false
            }
        };
        let now = Instant::now();
        if busy {
            idle_since = None;
        }
        let idle = now - *idle_since.get_or_insert(now);
        if core.busy_poll || idle < core.driver_spin {
            yield_once().await;
            continue;
        }
        // Sleep until the helper sees work: counted as a sleeper while the guard lives.
        let _asleep = DriverAsleep::new(core);
        let mut registered = false;
        std::future::poll_fn(|cx| {
            if !registered || core.driver_asleep.load(Ordering::SeqCst) {
                *core.driver_waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
                if !registered {
                    registered = true;
                    core.driver_asleep.store(true, Ordering::SeqCst);
                    core.call_helper();
                }
                // Look after storing the waker: a wake in between cleared the flag.
                if core.driver_asleep.load(Ordering::SeqCst) {
                    return std::task::Poll::Pending;
                }
            }
            std::task::Poll::Ready(())
        })
        .await;
        idle_since = None;
    }
}

/// Counts the driver as a sleeper of its core while it lives.
#[cfg(feature = "tokio")]
struct DriverAsleep<'a>(&'a Core);

#[cfg(feature = "tokio")]
impl<'a> DriverAsleep<'a> {
    fn new(core: &'a Core) -> DriverAsleep<'a> {
        core.sleeping.fetch_add(1, Ordering::SeqCst);
        DriverAsleep(core)
    }
}

#[cfg(feature = "tokio")]
impl Drop for DriverAsleep<'_> {
    fn drop(&mut self) {
        self.0.driver_asleep.store(false, Ordering::SeqCst);
        self.0.sleeping.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Yield once to the tokio scheduler: wake ourselves and return `Pending`, so every task
/// already woken runs before the driver polls again.
#[cfg(feature = "tokio")]
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// Return the state of `id` as a connect sees it: `None` while the handshake runs, else
/// whether it succeeded (the error a failed one reports).
pub(crate) fn connect_outcome(st: &mut State, id: SocketId) -> Option<io::Result<()>> {
    let stack = match st.stack() {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    match stack.state(id) {
        TcpState::SynSent | TcpState::SynReceived => None,
        TcpState::Closed => {
            let err = crate::errors::handshake_failed(stack, id);
            st.socks.remove(&id);
            Some(Err(err))
        }
        _ => Some(Ok(())),
    }
}
