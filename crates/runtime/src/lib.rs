//! `bypass-runtime`: applications on the bypass stack with threads or async Rust.
//!
//! A [`Runtime`] runs one [`Stack`] per device queue (a *shard*), each on its own thread,
//! busy-polling or sleeping on its device between frames, timers and the applications'
//! requests. Applications hold [`TcpListener`] and [`TcpStream`] values that are `Send`,
//! with `std::io::Read` and `Write` (blocking, with timeouts, or non-blocking) and, with
//! the `tokio` feature, tokio's `AsyncRead` and `AsyncWrite` ([`tokio`]).
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
//! # How bytes cross between threads
//! There is no lock over a stack. Each connection has two bounded, lock-free queues of
//! 16 KiB chunks (crossbeam's array channels): received bytes from the shard's thread to the
//! application, bytes to send the other way. An application that writes or makes room
//! queues one request for its connection on the shard's command queue (at most one waits
//! at a time) and wakes the shard through its device ([`Device::waker`]) if it sleeps. The
//! shard moves bytes between the queues and the TCP buffers of each connection that changed.
//! So a byte is copied twice on each side, against once for the run-to-completion
//! [`Stack`] API, which stays for the lowest latency; [`TcpStream::recv_with`] and
//! [`TcpStream::send_with`] save the application's copy.
//!
//! # Shards
//! Give [`Runtime::start`] one device per receive queue (`XdpDevice::open_queues`). The
//! shards share nothing but the chunk pool: each listens on every port a [`TcpListener`]
//! asks for, so a connection is accepted on whichever shard the device steered its SYN to,
//! and active opens take turns across shards, each shard choosing ephemeral ports of its
//! own residue (`StackConfig::ephemeral_port_share`), so no two shards open the same
//! 4-tuple. Replies must come back to the queue of the shard that sent: see the README on
//! what a veth does.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod listener;
mod pool;
mod shard;
mod stream;
#[cfg(feature = "tokio")]
pub mod tokio;

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bypass_device::{Capture, Device};
use bypass_stack::{Counters, Stack, StackConfig};

pub use listener::TcpListener;
pub use stream::TcpStream;

use listener::ListenerShared;
use pool::Pool;
use shard::{Command, ConnectReply, Shard, ShardLink};

/// Makes the capture of one shard: given its index and the wall-clock time of its stack's
/// zero, return where its frames are recorded (see `Stack::set_capture`).
pub type CaptureFactory = Arc<dyn Fn(usize, std::time::SystemTime) -> io::Result<Box<dyn Capture>> + Send + Sync>;

/// How a [`Runtime`] runs its shards.
#[derive(Clone, Default)]
pub struct RuntimeOptions {
    /// Spin instead of sleeping when idle: the lowest latency, a core per shard.
    pub busy_poll: bool,
    /// Record each shard's frames (`--pcap`).
    pub capture: Option<CaptureFactory>,
}

/// Stacks on their own threads, one per device: see the crate docs.
pub struct Runtime {
    links: Vec<Arc<ShardLink>>,
    threads: Vec<JoinHandle<io::Result<Counters>>>,
    counters: Vec<Arc<Mutex<Counters>>>,
    local: std::net::IpAddr,
    next: AtomicUsize,
}

impl Runtime {
    /// Start one shard per device in `devices`, each a [`Stack`] with `config` on its own
    /// thread (ephemeral ports split between them).
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
        let count = devices.len();
        let pool = Pool::new();
        let mut runtime =
            Runtime { links: Vec::new(), threads: Vec::new(), counters: Vec::new(), local, next: AtomicUsize::new(0) };
        let mut devices: Vec<D> = devices;
        let links: Vec<_> =
            devices.iter_mut().enumerate().map(|(index, device)| shard::link(index, device.waker())).collect();
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
                if let Some(factory) = &options2.capture {
                    stack.set_capture(factory(index, stack.epoch())?);
                }
                Shard::new(stack, link2, commands, pool2, options2.busy_poll, published2, siblings).run()
            })?;
            runtime.links.push(link);
            runtime.threads.push(thread);
            runtime.counters.push(published);
        }
        Ok(runtime)
    }

    /// Return how many shards run.
    pub fn shards(&self) -> usize {
        self.links.len()
    }

    /// Listen on `port` on every shard.
    pub fn listen(&self, port: u16) -> io::Result<TcpListener> {
        let backlog = 1024;
        let (accepted_tx, accepted) = crossbeam_channel::bounded(backlog);
        let shared = Arc::new(ListenerShared::default());
        let mut listening: Vec<Arc<ShardLink>> = Vec::new();
        for link in &self.links {
            let (reply, result) = crossbeam_channel::bounded(1);
            link.command(Command::Listen { port, accepted: accepted_tx.clone(), shared: Arc::clone(&shared), reply });
            let outcome = result.recv().unwrap_or_else(|_| Err(stopped()));
            if let Err(e) = outcome {
                for l in &listening {
                    l.command(Command::Unlisten(port));
                }
                return Err(e);
            }
            listening.push(Arc::clone(link));
        }
        Ok(TcpListener::new(port, SocketAddr::new(self.local, port), accepted, shared, listening))
    }

    /// Open a connection to `remote`, waiting until it is established or has failed (the
    /// stack's SYN retries bound the wait: about two minutes for a silent peer).
    pub fn connect(&self, remote: impl Into<SocketAddr>) -> io::Result<TcpStream> {
        let (_, result) = self.start_connect(remote.into(), Arc::default());
        result.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// Open a connection to `remote`, giving up after `timeout` with `TimedOut` (the
    /// attempt is then abandoned: a connection established later is closed).
    pub fn connect_timeout(&self, remote: impl Into<SocketAddr>, timeout: Duration) -> io::Result<TcpStream> {
        let (_, result) = self.start_connect(remote.into(), Arc::default());
        match result.recv_timeout(timeout) {
            Ok(r) => r,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                Err(io::Error::new(ErrorKind::TimedOut, "connection timed out"))
            }
            Err(_) => Err(stopped()),
        }
    }

    /// Ask the next shard in turn to open a connection; return the channel its result comes on.
    pub(crate) fn start_connect(
        &self,
        remote: SocketAddr,
        waker: Arc<Mutex<Option<std::task::Waker>>>,
    ) -> (usize, crossbeam_channel::Receiver<io::Result<TcpStream>>) {
        let shard = self.next.fetch_add(1, Ordering::Relaxed) % self.links.len();
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.links[shard].command(Command::Connect { remote, reply: ConnectReply { tx, waker } });
        (shard, rx)
    }

    /// Return each shard's stack counters, as last published (every 50 ms).
    pub fn counters(&self) -> Vec<Counters> {
        self.counters.iter().map(|c| c.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect()
    }

    /// Return the bytes application threads copied into and out of the queues' chunks, in
    /// this process (every runtime), for the demo's copies per byte.
    pub fn app_bytes_copied() -> u64 {
        stream::APP_BYTES_COPIED.load(Ordering::Relaxed)
    }

    /// Stop every shard (connections are reset) and return their final counters.
    pub fn stop(mut self) -> io::Result<Vec<Counters>> {
        self.stop_shards()
    }

    fn stop_shards(&mut self) -> io::Result<Vec<Counters>> {
        for link in &self.links {
            link.command(Command::Stop);
        }
        let mut all = Vec::new();
        let mut first_error = None;
        for thread in self.threads.drain(..) {
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
        match first_error {
            Some(e) => Err(e),
            None => Ok(all),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.threads.is_empty()
            && let Err(e) = self.stop_shards()
        {
            log::warn!("a shard ended with an error: {e}");
        }
    }
}

fn stopped() -> io::Error {
    io::Error::new(ErrorKind::NotConnected, "the runtime has stopped")
}
