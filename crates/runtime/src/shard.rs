//! A shard: one [`Stack`] on one device queue, run by its own thread.
//!
//! Each turn of the loop: take the applications' commands (a connection to look at, a
//! port to listen on, a connection to open), receive and run timers, move bytes between
//! every connection that changed and its queues, hand accepted and established
//! connections out, transmit. Idle, it sleeps on the device until a frame, a timer or an
//! application's command ([`Device::waker`]), or spins when busy-polling.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bypass_device::Device;
use bypass_stack::{Counters, ListenerId, SocketId, Stack};
use bypass_tcp::Event;
use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError, bounded};

use crate::pool::Pool;
use crate::stream::{Command, ConnectReply, ListenerShared, RxMsg, ShardLink, ShardStream, Shared, TxMsg};

/// Chunks queued per connection each way (16 of 16 KiB: 256 KiB), on top of the TCP buffers.
const QUEUE_CHUNKS: usize = 16;
/// How long an idle shard sleeps at most when its device cannot be woken.
const UNWAKEABLE_SLEEP: Duration = Duration::from_millis(1);
/// How often a shard publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// The shard's side of one connection the application holds.
struct Conn {
    shared: Arc<Shared>,
    /// Received bytes go here; `None` once the reader is gone or was told the end.
    rx: Option<Sender<RxMsg>>,
    /// Bytes to send come from here; `None` once drained after the writer went, or failed.
    tx: Option<Receiver<TxMsg>>,
    /// A chunk taken from `tx` that the send buffer has not taken whole.
    head: Option<(crate::pool::Chunk, usize)>,
}

/// What a shard's thread owns.
pub(crate) struct Shard<D: Device> {
    stack: Stack<D>,
    link: Arc<ShardLink>,
    commands: Receiver<Command>,
    pool: Pool,
    busy_poll: bool,
    conns: HashMap<SocketId, Conn>,
    listeners: HashMap<u16, (ListenerId, Sender<ShardStream>, Arc<ListenerShared>)>,
    /// The listeners' ports, to walk every turn without collecting them.
    ports: Vec<u16>,
    connecting: HashMap<SocketId, ConnectReply>,
    published: Arc<Mutex<Counters>>,
    /// The other shards, told of every neighbour this one learns.
    siblings: Vec<Arc<ShardLink>>,
    /// The control endpoint (`bypass ss`, `bypass stat`, `bypass capture`).
    endpoint: Option<bypass_control::Server>,
}

impl<D: Device> Shard<D> {
    pub(crate) fn new(
        stack: Stack<D>,
        link: Arc<ShardLink>,
        commands: Receiver<Command>,
        pool: Pool,
        busy_poll: bool,
        published: Arc<Mutex<Counters>>,
        siblings: Vec<Arc<ShardLink>>,
    ) -> Self {
        Shard {
            stack,
            link,
            commands,
            pool,
            busy_poll,
            conns: HashMap::new(),
            listeners: HashMap::new(),
            ports: Vec::new(),
            connecting: HashMap::new(),
            published,
            siblings,
            endpoint: None,
        }
    }

    /// Answer `endpoint`'s requests (`bypass ss`, `bypass stat`, `bypass capture`) once per
    /// turn of the loop.
    pub(crate) fn with_endpoint(mut self, endpoint: Option<bypass_control::Server>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// Run until [`Command::Stop`] or every application handle is gone; return the
    /// stack's counters.
    pub(crate) fn run(mut self) -> io::Result<Counters> {
        let mut last_publish = std::time::Instant::now();
        loop {
            let mut busy = false;
            loop {
                match self.commands.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return self.stop(),
                    Ok(command) => {
                        busy = true;
                        self.handle(command);
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            busy |= self.stack.poll_rx()? > 0;
            if !self.siblings.is_empty() {
                for (ip, mac) in self.stack.take_learned_neighbours() {
                    for sibling in &self.siblings {
                        sibling.command(Command::Neighbour(ip, mac));
                    }
                }
                for (owner, frame) in self.stack.take_foreign_frames() {
                    if let Some(sibling) = self.siblings.iter().find(|s| s.index == usize::from(owner)) {
                        sibling.command(Command::Frame(frame));
                    }
                }
            }
            while let Some((id, event)) = self.stack.poll_event() {
                self.on_event(id, event);
            }
            self.accept_all();
            if let Some(endpoint) = &mut self.endpoint {
                endpoint.poll(&mut self.stack);
            }
            busy |= self.stack.poll_tx()? > 0;
            if last_publish.elapsed() >= PUBLISH_EVERY {
                *self.published.lock().unwrap_or_else(PoisonError::into_inner) = self.stack.counters().clone();
                last_publish = std::time::Instant::now();
            }
            if busy {
                continue;
            }
            if self.busy_poll {
                std::hint::spin_loop();
                continue;
            }
            self.link.set_sleeping(true);
            fence(Ordering::SeqCst);
            if self.commands.is_empty() {
                let cap = if self.link.wakeable() { None } else { Some(UNWAKEABLE_SLEEP) };
                self.stack.wait(cap)?;
            }
            self.link.set_sleeping(false);
        }
    }

    fn stop(mut self) -> io::Result<Counters> {
        for (_, reply) in self.connecting.drain() {
            reply.send(Err(io::Error::new(ErrorKind::NotConnected, "the runtime stopped")));
        }
        for conn in self.conns.values() {
            let _ = conn.shared.error.set((ErrorKind::NotConnected, "the runtime stopped".into()));
        }
        self.conns.clear();
        self.listeners.clear();
        self.ports.clear();
        self.stack.abort_all();
        self.stack.poll_tx()?;
        let counters = self.stack.counters().clone();
        *self.published.lock().unwrap_or_else(PoisonError::into_inner) = counters.clone();
        Ok(counters)
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Kick(id) => self.pump(id),
            Command::Listen { port, accepted, shared, reply } => {
                let result = self.stack.listen(port).map_err(crate::errors::listen);
                let result = result.map(|id| {
                    self.listeners.insert(port, (id, accepted, shared));
                    self.ports.push(port);
                });
                let _ = reply.send(result);
            }
            Command::Unlisten(port) => {
                if let Some((id, _, _)) = self.listeners.remove(&port) {
                    self.ports.retain(|&p| p != port);
                    self.stack.unlisten(id);
                }
            }
            Command::Connect { remote, reply } => match self.stack.connect(remote) {
                Ok(id) => {
                    self.connecting.insert(id, reply);
                }
                Err(e) => reply.send(Err(crate::errors::connect(e))),
            },
            Command::SetNodelay(id, nodelay) => self.stack.set_nodelay(id, nodelay),
            Command::Neighbour(ip, mac) => self.stack.learn_neighbour(ip, mac),
            Command::Frame(frame) => self.stack.receive_handed_over(&frame),
            Command::Stop => unreachable!("handled by the loop"),
        }
    }

    fn on_event(&mut self, id: SocketId, event: Event) {
        if let Some(reply) = self.connecting.remove(&id) {
            match event {
                Event::Established => {
                    let stream = self.adopt(id);
                    reply.send(Ok(stream));
                }
                Event::Reset | Event::TimedOut | Event::Unreachable | Event::Closed => {
                    reply.send(Err(crate::errors::handshake_failed(&mut self.stack, id)));
                }
                _ => {
                    self.connecting.insert(id, reply);
                }
            }
            return;
        }
        self.pump(id);
    }

    /// Hand out established connections, as long as each listener's queue has room.
    fn accept_all(&mut self) {
        for k in 0..self.ports.len() {
            let port = self.ports[k];
            loop {
                let (lid, accepted, _) = &self.listeners[&port];
                if accepted.is_full() {
                    break;
                }
                let Some(id) = self.stack.accept(*lid) else { break };
                let stream = self.adopt(id);
                let (_, accepted, shared) = &self.listeners[&port];
                if accepted.send(stream).is_err() {
                    break; // The listener is gone; its Unlisten is on the way.
                }
                shared.wake();
                self.pump(id);
            }
        }
    }

    /// Make the application's handle for `id` and keep the shard's side.
    fn adopt(&mut self, id: SocketId) -> ShardStream {
        let tuple = self.stack.interface().connection(id).and_then(|c| c.tuple()).expect("a live connection");
        let shared = Arc::new(Shared::new(tuple.local, tuple.remote));
        let (rx_tx, rx_rx) = bounded(QUEUE_CHUNKS);
        let (tx_tx, tx_rx) = bounded(QUEUE_CHUNKS);
        self.conns.insert(id, Conn { shared: Arc::clone(&shared), rx: Some(rx_tx), tx: Some(tx_rx), head: None });
        ShardStream::new(shared, Arc::clone(&self.link), id, self.pool.clone(), rx_rx, tx_tx)
    }

    /// Move bytes between `id`'s queues and its connection, and close it once its handle is
    /// gone and everything written has gone into the send buffer.
    fn pump(&mut self, id: SocketId) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        conn.shared.kicked.store(false, Ordering::SeqCst);
        let stack = &mut self.stack;
        let pool = &self.pool;

        // The application's bytes into the send buffer, in order.
        let mut took = false;
        loop {
            if conn.head.is_none() {
                let Some(tx) = &conn.tx else { break };
                match tx.try_recv() {
                    Ok(TxMsg::Data(chunk)) => conn.head = Some((chunk, 0)),
                    Ok(TxMsg::Shutdown) => {
                        stack.shutdown(id);
                        took = true;
                        continue;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        conn.tx = None;
                        break;
                    }
                }
                took = true;
            }
            let (chunk, pos) = conn.head.as_mut().expect("just set");
            match stack.write(id, &chunk.bytes()[*pos..]) {
                Ok(n) => {
                    *pos += n;
                    if *pos < chunk.len {
                        break;
                    }
                    pool.give(conn.head.take().expect("present").0);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Writers blocked on a full queue learn of the failure at once.
                    let _ = conn.shared.error.set((e.kind(), e.to_string()));
                    if let Some((chunk, _)) = conn.head.take() {
                        pool.give(chunk);
                    }
                    conn.tx = None;
                    break;
                }
            }
        }
        if took {
            Shared::wake(&conn.shared.write_waker);
        }

        // Received bytes to the application, while its queue has room.
        let mut gave = false;
        while let Some(rx) = &conn.rx {
            if rx.is_full() {
                // Flag first, then look again: the reader that makes room either is seen
                // here or sees the flag (and asks for this connection to be pumped).
                conn.shared.rx_stalled.store(true, Ordering::SeqCst);
                if rx.is_full() {
                    break;
                }
            }
            let mut chunk = pool.take();
            let msg = match stack.read(id, &mut chunk.data) {
                Ok(0) => {
                    pool.give(chunk);
                    RxMsg::End
                }
                Ok(n) => {
                    chunk.len = n;
                    RxMsg::Data(chunk)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    pool.give(chunk);
                    break;
                }
                Err(e) => {
                    pool.give(chunk);
                    let _ = conn.shared.error.set((e.kind(), e.to_string()));
                    conn.tx = None;
                    RxMsg::Failed
                }
            };
            let last = !matches!(msg, RxMsg::Data(_));
            match rx.try_send(msg) {
                Ok(()) => gave = true,
                Err(TrySendError::Full(_)) => unreachable!("the shard is the only sender and saw room"),
                Err(TrySendError::Disconnected(m)) => {
                    if let RxMsg::Data(chunk) = m {
                        pool.give(chunk);
                    }
                    conn.rx = None;
                    break;
                }
            }
            if last {
                conn.rx = None;
            }
        }
        if gave {
            Shared::wake(&conn.shared.read_waker);
        }

        // The handle is gone and nothing it wrote is left outside the send buffer: close
        // as close(2) would.
        let handle_gone = conn.shared.dropped.load(Ordering::SeqCst);
        if handle_gone && conn.head.is_none() && conn.tx.as_ref().is_none_or(|tx| tx.is_empty()) {
            let unread = conn.shared.unread.load(Ordering::SeqCst);
            self.conns.remove(&id);
            if unread {
                self.stack.abort(id);
            } else {
                self.stack.close(id);
            }
        }
    }
}
