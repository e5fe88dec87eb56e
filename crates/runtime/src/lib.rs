//! `bypass-runtime`: applications on the bypass stack with threads or async Rust.
//!
//! A [`Runtime`] runs one [`Stack`] per device queue. Applications hold [`TcpListener`] and
//! [`TcpStream`] values that are `Send`, with `std::io::Read` and `Write` (blocking, with
//! timeouts, or non-blocking) and, with the `tokio` feature, tokio's `AsyncRead` and
//! `AsyncWrite` ([`tokio`]).
//!
//! ```no_run
//! use std::io::{Read, Write};
//! # fn serve(device: bypass_device::MemoryDevice) -> std::io::Result<()> {
//! let config = bypass_stack::StackConfig::new(std::net::Ipv4Addr::new(10, 77, 0, 2), 24, [7; 16]);
//! let runtime = bypass_runtime::Runtime::start(vec![device], config, Default::default())?;
//! let listener = runtime.listen(7)?;
//! for stream in listener.incoming() {
//!     let mut stream = stream?;
//!     std::thread::spawn(move || {
//!         let mut buf = [0u8; 4096];
//!         while let Ok(n @ 1..) = stream.read(&mut buf) {
//!             if stream.write_all(&buf[..n]).is_err() {
//!                 break;
//!             }
//!         }
//!     });
//! }
//! # Ok(()) }
//! ```
//!
//! # Where the stack runs ([`Mode`])
//! - **In the application's threads** ([`Mode::InThread`], the default), as OpenOnload and
//!   Demikernel run theirs: a socket call takes the stack's lock and polls the device, the
//!   timers and TCP itself, and bytes are copied once, between the TCP buffers and the
//!   caller's buffer. A call that must wait spins for [`RuntimeOptions::spin`] (OpenOnload's
//!   `EF_POLL_USEC`; for good with [`RuntimeOptions::busy_poll`]), then sleeps until whoever
//!   polls sees its connection change. With tokio, a driver task polls the stack between
//!   the tasks it wakes, on the runtime's own workers, and spins for
//!   [`RuntimeOptions::driver_spin`] when idle before it sleeps. A helper thread per stack keeps the
//!   protocol moving (ACKs, handshakes into the accept queue, retransmissions, keepalives)
//!   while no application thread is inside, so an application that stops calling in never
//!   stalls its peers; while they poll, it naps.
//! - **On a thread of its own** ([`Mode::Shard`]): each stack busy-polls or sleeps on its
//!   device on its own thread. Each connection has two bounded, lock-free queues of 16 KiB
//!   chunks (crossbeam's array channels) to the application and back, and an application
//!   that writes or makes room queues one request on the shard's command queue and wakes it
//!   through its device ([`Device::waker`]). A byte is copied twice on our side each way, and
//!   a round trip costs two wake-ups between threads; the application's threads never touch
//!   the stack.
//!
//! # Stacks
//! Give [`Runtime::start`] one device per receive queue (`XdpDevice::open_queues`). The
//! stacks share nothing but (with shards) the chunk pool: each listens on every port a
//! [`TcpListener`] asks for, so a connection is accepted on whichever stack the device
//! steered its SYN to, and active opens take turns across stacks, each choosing ephemeral
//! ports of its own residue (`StackConfig::ephemeral_port_share`), so no two stacks open the
//! same 4-tuple. Replies must come back to the queue of the stack that sent: see docs/design.md
//! on what a veth does.
//!
//! # Event loops
//! For event loops that wait on many sockets at once, as poll(2) and epoll(7) do (what
//! `bypass run` serves a program's `poll` and `epoll_wait` with): the readiness of a
//! connection or a listener, a waker to call when it may have changed, a connect that does
//! not wait, and the stacks polled from the caller's thread. In-thread mode only: with
//! shards, each call fails with `Unsupported`.
//!
//! A loop drives the stacks ([`Runtime::poll`]), looks at the readiness of what it watches,
//! and when nothing is ready registers its waker with each ([`TcpStream::readiness`] with
//! a waker looks and registers in one hold of the stack's lock, so no change is missed),
//! then sleeps inside an [`Idle`] guard, which tells the stacks' helpers that no one polls.
//!
//! # Files
//!
//! | file | what |
//! |---|---|
//! | `lib.rs` | [`Runtime`], [`RuntimeOptions`], [`Mode`]: starting the stacks and reaching them |
//! | `socket.rs` | [`TcpStream`], [`TcpListener`]: the handles, over either mode |
//! | `events.rs` | [`Readiness`], [`Idle`]: for event loops |
//! | `tokio.rs` | `tokio::TcpStream`, `tokio::TcpListener`: the same for async Rust (feature `tokio`) |
//! | `local.rs` | in-thread mode: a stack under a lock, polled by callers and a helper thread |
//! | `local_socket.rs` | in-thread mode: a connection's and a listener's calls, and [`PendingConnect`] |
//! | `shard.rs` | shard mode: the thread that owns a stack and answers commands |
//! | `stream.rs` | shard mode: a connection's handle, and the command queue to its shard |
//! | `listener.rs` | shard mode: a port listened on by every shard |
//! | `pool.rs` | shard mode: the chunks bytes cross threads in |
//! | `wait.rs` | how long a call may wait; parking a task's waker |
//! | `errors.rs` | the stack's errors as `io::Error`s, and `Unsupported` for what shards lack |
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod errors;
mod events;
mod listener;
mod local;
mod local_socket;
mod pool;
mod shard;
mod socket;
mod stream;
#[cfg(feature = "tokio")]
pub mod tokio;
mod wait;

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bypass_device::{Capture, Device};
use bypass_stack::{Counters, Stack, StackConfig};

pub use events::{Idle, Readiness};
pub use local::{holds_a_stack, on_release};
pub use local_socket::PendingConnect;
pub use socket::{TcpListener, TcpStream};

use listener::ShardListener;
use local::Core;
use local_socket::{LocalListener, LocalStream};
use pool::Pool;
use shard::Shard;
use stream::{Command, ConnectReply, ListenerShared, ShardLink};

/// Makes the capture of one shard: given its index and the wall-clock time of its stack's
/// zero, return where its frames are recorded (see `Stack::set_capture`).
pub type CaptureFactory = Arc<dyn Fn(usize, std::time::SystemTime) -> io::Result<Box<dyn Capture>> + Send + Sync>;

/// Where a runtime's stacks run: see the crate docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// In the application's threads, inside their socket calls, with a helper thread per
    /// stack for while none is inside.
    #[default]
    InThread,
    /// Each on a thread of its own, bytes crossing to the application in chunks.
    Shard,
}

/// How a [`Runtime`] runs its stacks.
#[derive(Clone)]
pub struct RuntimeOptions {
    /// Where the stacks run.
    pub mode: Mode,
    /// Spin instead of sleeping when idle: the lowest latency, a core per stack thread
    /// (shards) or per waiting application thread (in-thread; one per stack spins at a time).
    pub busy_poll: bool,
    /// In-thread: how long a blocking call that must wait spins, polling, before it sleeps
    /// (OpenOnload's `EF_POLL_USEC`). Zero by default, as OpenOnload's: with many threads
    /// on few cores a spinning thread takes the CPU the threads it wakes need; a single
    /// thread waiting on one peer answers sooner spinning (docs/performance.md, "Applications on the runtime").
    pub spin: Duration,
    /// In-thread with tokio: how long the driver task goes on polling an idle stack (yielding
    /// to the tasks between polls) before it sleeps and leaves the device to the helper. 50 us
    /// by default: there is one driver per stack, so spinning costs one worker's idle time,
    /// and a driver that sleeps at once pays a wake-up for nearly every request.
    pub driver_spin: Duration,
    /// In-thread: a write does not transmit; the next poll of the stack does (an
    /// application's next call that polls, [`Runtime::poll`], or the helper), so an event loop
    /// that answers many connections and then polls again sends them all with one kick of the
    /// device. For event loops that come back at once (busy-polling ones, as `bypass run
    /// --busy-poll` serves); others should leave it off, or a write waits for the helper.
    pub defer_transmit: bool,
    /// Record each stack's frames (`--pcap`).
    pub capture: Option<CaptureFactory>,
    /// Give each stack a control endpoint (`/run/bypass/<pid>.<shard>.sock`, see
    /// `bypass-control`) for `bypass ss`, `bypass stat` and `bypass capture`: on by default.
    /// While nobody is attached it costs one relaxed load per turn of the stack's loop.
    pub control_endpoint: bool,
    /// Count SYN cookie periods on this clock (`Stack::align_syn_cookie_clock`): for stacks
    /// whose device answers SYNs with their cookies (`StackConfig::syn_cookies_from_device`),
    /// the device's clock, CLOCK_MONOTONIC for the XDP program (`bypass_io::xdp::monotonic_now`).
    pub syn_cookie_clock: Option<fn() -> Duration>,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            mode: Mode::default(),
            busy_poll: false,
            spin: Duration::ZERO,
            driver_spin: Duration::from_micros(50),
            defer_transmit: false,
            capture: None,
            control_endpoint: true,
            syn_cookie_clock: None,
        }
    }
}

/// The stacks of a runtime, as its mode runs them.
enum Stacks {
    Shard {
        links: Vec<Arc<ShardLink>>,
        threads: Vec<JoinHandle<io::Result<Counters>>>,
        counters: Vec<Arc<Mutex<Counters>>>,
    },
    Local {
        cores: Vec<Arc<Core>>,
        helpers: Vec<JoinHandle<()>>,
    },
}

/// Stacks on device queues, run as [`RuntimeOptions::mode`] says: see the crate docs.
pub struct Runtime {
    stacks: Stacks,
    local: std::net::IpAddr,
    next: AtomicUsize,
    stopped: bool,
}

impl Runtime {
    /// Start one stack per device in `devices`, each with `config` (ephemeral ports split
    /// between them), run as `options.mode` says.
    pub fn start<D: Device + Send + 'static>(
        devices: Vec<D>,
        config: StackConfig,
        options: RuntimeOptions,
    ) -> io::Result<Runtime> {
        if devices.is_empty() {
            return Err(io::Error::new(ErrorKind::InvalidInput, "a runtime needs at least one device"));
        }
        let local = config
            .ipv4
            .map(|c| std::net::IpAddr::V4(c.addr))
            .or_else(|| config.ipv6.first().map(|c| std::net::IpAddr::V6(c.addr)))
            .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "the stack has no address"))?;
        let stacks = match options.mode {
            Mode::Shard => start_shards(devices, config, options)?,
            Mode::InThread => start_cores(devices, config, options)?,
        };
        Ok(Runtime { stacks, local, next: AtomicUsize::new(0), stopped: false })
    }

    /// Return how many stacks run.
    pub fn shards(&self) -> usize {
        match &self.stacks {
            Stacks::Shard { links, .. } => links.len(),
            Stacks::Local { cores, .. } => cores.len(),
        }
    }

    /// Return where the stacks run.
    pub fn mode(&self) -> Mode {
        match &self.stacks {
            Stacks::Shard { .. } => Mode::Shard,
            Stacks::Local { .. } => Mode::InThread,
        }
    }

    /// Listen on `port` on every stack.
    pub fn listen(&self, port: u16) -> io::Result<TcpListener> {
        let addr = SocketAddr::new(self.local, port);
        match &self.stacks {
            Stacks::Shard { links, .. } => {
                let backlog = 1024;
                let (accepted_tx, accepted) = crossbeam_channel::bounded(backlog);
                let shared = Arc::new(ListenerShared::default());
                let mut listening: Vec<Arc<ShardLink>> = Vec::new();
                for link in links {
                    let (reply, result) = crossbeam_channel::bounded(1);
                    link.command(Command::Listen {
                        port,
                        accepted: accepted_tx.clone(),
                        shared: Arc::clone(&shared),
                        reply,
                    });
                    let outcome = result.recv().unwrap_or_else(|_| Err(stopped()));
                    if let Err(e) = outcome {
                        for l in &listening {
                            l.command(Command::Unlisten(port));
                        }
                        return Err(e);
                    }
                    listening.push(Arc::clone(link));
                }
                Ok(TcpListener::shard(ShardListener { port, accepted, shared, links: listening }, addr))
            }
            Stacks::Local { cores, .. } => {
                for (k, core) in cores.iter().enumerate() {
                    if let Err(e) = core.listen(port) {
                        for c in &cores[..k] {
                            c.unlisten(port);
                        }
                        return Err(e);
                    }
                }
                Ok(TcpListener::local(LocalListener::new(cores.clone(), port), addr))
            }
        }
    }

    /// Open a connection to `remote`, waiting until it is established or has failed (the
    /// stack's SYN retries bound the wait: about two minutes for a silent peer).
    pub fn connect(&self, remote: impl Into<SocketAddr>) -> io::Result<TcpStream> {
        self.connect_waiting(remote.into(), None)
    }

    /// Open a connection to `remote`, giving up after `timeout` with `TimedOut` (the
    /// attempt is then abandoned: a connection established later is closed).
    pub fn connect_timeout(&self, remote: impl Into<SocketAddr>, timeout: Duration) -> io::Result<TcpStream> {
        self.connect_waiting(remote.into(), Some(timeout))
    }

    fn connect_waiting(&self, remote: SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
        match self.start_connect(remote, Arc::default())? {
            Connecting::Shard(result) => {
                let outcome = match timeout {
                    None => result.recv().unwrap_or_else(|_| Err(stopped())),
                    Some(t) => match result.recv_timeout(t) {
                        Ok(r) => r,
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                            Err(io::Error::new(ErrorKind::TimedOut, "connection timed out"))
                        }
                        Err(_) => Err(stopped()),
                    },
                };
                outcome.map(TcpStream::from)
            }
            Connecting::Local(core, id) => LocalStream::connect_wait(&core, id, timeout).map(TcpStream::from),
        }
    }

    /// Start opening a connection on the next stack in turn.
    pub(crate) fn start_connect(
        &self,
        remote: SocketAddr,
        waker: Arc<Mutex<Option<std::task::Waker>>>,
    ) -> io::Result<Connecting> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        match &self.stacks {
            Stacks::Shard { links, .. } => {
                let (tx, rx) = crossbeam_channel::bounded(1);
                links[turn % links.len()].command(Command::Connect { remote, reply: ConnectReply { tx, waker } });
                Ok(Connecting::Shard(rx))
            }
            Stacks::Local { cores, .. } => {
                let core = &cores[turn % cores.len()];
                Ok(Connecting::Local(Arc::clone(core), core.start_connect(remote, None)?))
            }
        }
    }

    /// Start opening a connection to `remote` (from `local_port`, else an ephemeral port)
    /// without waiting: the SYN is sent when this returns; [`PendingConnect::poll`]
    /// tells how it ends. In-thread mode only.
    pub fn connect_start(&self, remote: SocketAddr, local_port: Option<u16>) -> io::Result<PendingConnect> {
        let Stacks::Local { cores, .. } = &self.stacks else { return Err(errors::unsupported()) };
        let core = &cores[self.next.fetch_add(1, Ordering::Relaxed) % cores.len()];
        Ok(PendingConnect::new(Arc::clone(core), core.start_connect(remote, local_port)?))
    }

    /// Poll every stack once from this thread (receive, timers, TCP, transmit), waking the
    /// waiters of what changed; return whether frames moved. For event loops of their own
    /// (see [event loops](crate#event-loops)); with shards it does nothing and returns `false`.
    pub fn poll(&self) -> io::Result<bool> {
        let Stacks::Local { cores, .. } = &self.stacks else { return Ok(false) };
        let mut busy = false;
        for core in cores {
            busy |= core.poll_once()?;
        }
        Ok(busy)
    }

    /// Return a guard that tells the stacks' helpers a thread sleeps on them until it
    /// drops: they watch the devices and wake the wakers registered meanwhile.
    pub fn idle(&self) -> events::Idle {
        match &self.stacks {
            Stacks::Local { cores, .. } => events::Idle::new(cores),
            Stacks::Shard { .. } => events::Idle::new(&[]),
        }
    }

    /// Return each stack's counters (with shards, as last published, every 50 ms).
    pub fn counters(&self) -> Vec<Counters> {
        match &self.stacks {
            Stacks::Shard { counters, .. } => {
                counters.iter().map(|c| c.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect()
            }
            Stacks::Local { cores, .. } => cores.iter().map(|c| c.counters()).collect(),
        }
    }

    /// Return the bytes application threads copied into and out of the shard mode's chunks,
    /// in this process (every runtime), for the demo's copies per byte. In-thread, the one
    /// copy each way is the stack's, in its counters (`bytes_copied`).
    pub fn app_bytes_copied() -> u64 {
        stream::APP_BYTES_COPIED.load(Ordering::Relaxed)
    }

    /// Stop every stack (connections are reset, devices closed) and return their final
    /// counters. Calls on connections after this fail with `NotConnected`.
    pub fn stop(mut self) -> io::Result<Vec<Counters>> {
        self.stop_stacks()
    }

    /// Stop every stack as [`stop`](Runtime::stop) does, from a shared reference and without
    /// waiting for the stacks' threads to end (they end by themselves): for a process that
    /// is exiting and holds its runtime where it cannot be moved out (a preloaded library's
    /// static). Return the final counters (with shards, as last published).
    ///
    /// It never hangs: a stack whose lock stays taken for [`HALT_WAIT`] is left as it is
    /// (its connections time out at the peers) with an error. Either way, the control
    /// endpoints this process bound are removed, since its stack threads may not get to it
    /// before the process ends.
    pub fn halt(&self) -> io::Result<Vec<Counters>> {
        let result = match &self.stacks {
            Stacks::Shard { links, .. } => {
                for link in links {
                    link.command(Command::Stop);
                }
                Ok(self.counters())
            }
            Stacks::Local { cores, .. } => {
                for core in cores {
                    core.begin_stop();
                }
                cores.iter().map(|c| c.finish_stop_within(Some(HALT_WAIT))).collect()
            }
        };
        bypass_control::remove_all();
        result
    }

    fn stop_stacks(&mut self) -> io::Result<Vec<Counters>> {
        self.stopped = true;
        let mut all = Vec::new();
        let mut first_error = None;
        match &mut self.stacks {
            Stacks::Shard { links, threads, .. } => {
                for link in links.iter() {
                    link.command(Command::Stop);
                }
                for thread in threads.drain(..) {
                    match thread.join() {
                        Ok(Ok(c)) => all.push(c),
                        Ok(Err(e)) => {
                            first_error.get_or_insert(e);
                        }
                        Err(_) => {
                            first_error.get_or_insert(io::Error::other("a shard's thread panicked"));
                        }
                    }
                }
            }
            Stacks::Local { cores, helpers } => {
                for core in cores.iter() {
                    core.begin_stop();
                }
                for helper in helpers.drain(..) {
                    if helper.join().is_err() {
                        first_error.get_or_insert(io::Error::other("a stack's helper thread panicked"));
                    }
                }
                for core in cores.iter() {
                    match core.finish_stop() {
                        Ok(c) => all.push(c),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(all),
        }
    }
}

/// How long [`Runtime::halt`] waits for a stack's lock.
pub const HALT_WAIT: Duration = Duration::from_secs(1);

/// A connection being opened: where its outcome comes from.
pub(crate) enum Connecting {
    /// The shard sends the result here.
    Shard(crossbeam_channel::Receiver<io::Result<stream::ShardStream>>),
    /// The handshake runs on this stack.
    Local(Arc<Core>, bypass_stack::SocketId),
}

/// Bind stack `index`'s control endpoint if `options` want one; a stack that cannot have one
/// (not root and no `BYPASS_RUN_DIR`) serves without, with a warning.
fn control_endpoint<D: Device>(
    stack: &mut Stack<D>,
    index: usize,
    options: &RuntimeOptions,
) -> Option<bypass_control::Server> {
    if !options.control_endpoint {
        return None;
    }
    bypass_control::Server::for_stack(stack, index as u32)
        .map_err(|e| log::warn!("{e}; stack {index} serves without a control endpoint"))
        .ok()
}

/// Start one shard thread per device.
fn start_shards<D: Device + Send + 'static>(
    devices: Vec<D>,
    config: StackConfig,
    options: RuntimeOptions,
) -> io::Result<Stacks> {
    let count = devices.len();
    let pool = Pool::new();
    let (mut links_out, mut threads, mut counters) = (Vec::new(), Vec::new(), Vec::new());
    let mut devices: Vec<D> = devices;
    let links: Vec<_> =
        devices.iter_mut().enumerate().map(|(index, device)| ShardLink::new(index, device.waker())).collect();
    let all: Vec<Arc<ShardLink>> = links.iter().map(|(link, _)| Arc::clone(link)).collect();
    for ((device, (link, commands)), index) in devices.into_iter().zip(links).zip(0..) {
        let mut config = config.clone();
        config.ephemeral_port_share = (index as u16, count as u16);
        config.share_neighbours = count > 1;
        let siblings: Vec<_> = all.iter().filter(|l| l.index != index).cloned().collect();
        let published = Arc::new(Mutex::new(Counters::default()));
        let (link2, pool2, published2, options2) =
            (Arc::clone(&link), pool.clone(), Arc::clone(&published), options.clone());
        let thread = std::thread::Builder::new().name(format!("bypass-shard-{index}")).spawn(move || {
            let mut stack = Stack::new(device, config);
            if let Some(clock) = options2.syn_cookie_clock {
                stack.align_syn_cookie_clock(clock);
            }
            if let Some(factory) = &options2.capture {
                stack.set_capture(factory(index, stack.epoch())?);
            }
            let endpoint = control_endpoint(&mut stack, index, &options2);
            Shard::new(stack, link2, commands, pool2, options2.busy_poll, published2, siblings)
                .with_endpoint(endpoint)
                .run()
        })?;
        links_out.push(link);
        threads.push(thread);
        counters.push(published);
    }
    Ok(Stacks::Shard { links: links_out, threads, counters })
}

/// Make one in-thread core per device, each with its helper thread.
fn start_cores<D: Device + Send + 'static>(
    devices: Vec<D>,
    config: StackConfig,
    options: RuntimeOptions,
) -> io::Result<Stacks> {
    let count = devices.len();
    let mut cores = Vec::new();
    let mut sleepers = Vec::new();
    for (index, mut device) in devices.into_iter().enumerate() {
        let waker = device.waker();
        sleepers.push(device.sleeper());
        let mut config = config.clone();
        config.ephemeral_port_share = (index as u16, count as u16);
        config.share_neighbours = count > 1;
        let mut stack = Stack::new(Box::new(device) as Box<dyn Device + Send>, config);
        if let Some(clock) = options.syn_cookie_clock {
            stack.align_syn_cookie_clock(clock);
        }
        if let Some(factory) = &options.capture {
            stack.set_capture(factory(index, stack.epoch())?);
        }
        let endpoint = control_endpoint(&mut stack, index, &options);
        cores.push(Arc::new(Core::new(index, stack, waker, &options, endpoint)));
    }
    for core in &cores {
        core.set_siblings(cores.iter().filter(|c| c.index != core.index).map(Arc::downgrade).collect());
    }
    let mut helpers = Vec::new();
    for (core, sleeper) in cores.iter().zip(sleepers) {
        let core2 = Arc::clone(core);
        let spawned = std::thread::Builder::new()
            .name(format!("bypass-helper-{}", core.index))
            .spawn(move || core2.help(sleeper));
        match spawned {
            Ok(h) => helpers.push(h),
            Err(e) => {
                for core in &cores {
                    core.begin_stop();
                }
                for h in helpers {
                    let _ = h.join();
                }
                for core in &cores {
                    let _ = core.finish_stop();
                }
                return Err(e);
            }
        }
    }
    Ok(Stacks::Local { cores, helpers })
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.stopped
            && let Err(e) = self.stop_stacks()
        {
            log::warn!("a stack ended with an error: {e}");
        }
    }
}

fn stopped() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the runtime has stopped")
}
