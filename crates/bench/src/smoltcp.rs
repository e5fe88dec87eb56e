//! smoltcp as the server (row 6): the rival userspace TCP/IP stack, smoltcp 0.14, serving the
//! demo's workloads over our packet device (AF_XDP in the lab), so the two stacks are
//! measured on the same device against the same kernel client. [`client`] is smoltcp as the
//! client (row 6b, smoltcp at both ends), a twin of our stack's (`ours::client`).
//!
//! The loop spins like our server's (`stack.rs`): `Interface::poll` (receive, then send what
//! is due), the application's reads and writes on every socket, `Interface::poll_egress` (send
//! what the application queued), then one [`Device::flush`].
//!
//! smoltcp has no accept queue: a listening [`tcp::Socket`] becomes the connection. The server
//! keeps a fixed pool of sockets, as many as the workload keeps open plus
//! [`SPARE_LISTENERS`], and puts each one back into Listen as soon as its connection has closed.
//!
//! Socket settings, as our stack's server where smoltcp lets us choose: Nagle off (the kernel
//! client and our stack use `TCP_NODELAY`), 256 KiB receive and send buffers (so smoltcp
//! offers window scaling, shift 3), Reno congestion control. smoltcp's own defaults stay:
//! delayed ACKs of 10 ms (with an immediate ACK for every full segment of new data), no TCP
//! timestamps, checksums computed in software.
//!
//! Checked against smoltcp's own examples (examples/benchmark.rs, server.rs, client.rs of
//! 0.14): the same loop (poll, serve every socket, put a finished socket back to work: the
//! server's into Listen, the client's into a new connection, see [`Client`]), with two
//! differences chosen for the demo: the loop spins instead of sleeping until
//! `Interface::poll_delay` (every userspace and busy-polling kernel row spins), and Nagle is
//! off as above (the examples keep smoltcp's default, on).
//!
//! Bytes copied by the CPU (`ServerResult::copied`, and `ClientResult::copied` for the
//! client), counted where each copy happens, in TCP payload bytes (headers are not counted,
//! as our stack counts):
//! 1. received frame -> adapter buffer: [`Adapter`] copies every frame out of the device,
//!    because smoltcp's receive token must outlive the closure our device lends it in;
//! 2. adapter buffer -> socket receive buffer: smoltcp's, for every received TCP segment
//!    (counted as our stack counts its own: every segment's payload, duplicates included);
//! 3. socket receive buffer -> application and application -> socket send buffer (echo and
//!    bulk source; the client's requests, echoes, bulk writes and bulk reads, which copy as
//!    our stack's client does); the bulk sink discards in place in the receive buffer (no copy);
//! 4. socket send buffer -> frame: smoltcp's, straight into the device's transmit buffer
//!    (retransmissions included).

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_device::Device;
use etherparse::{SlicedPacket, TransportSlice};
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

use super::Workload;
use super::client::{self, Endpoint};
use super::kernel::{ClientPlan, ClientResult, ServerResult, Shared};
use super::measure::{Own, Usage, Window};

/// Receive and send buffer of every socket, as our stack's.
const BUFFER: usize = 256 * 1024;
/// Listening sockets kept beyond those the workload keeps busy, so a SYN always finds one.
const SPARE_LISTENERS: usize = 4;
/// Frames taken from the device per receive batch.
const RX_BATCH: usize = 64;
/// Bytes the bulk source writes per call (as our stack's server).
const CHUNK: usize = 64 * 1024;
/// How long the server lets closing connections finish after it is told to stop.
const LINGER: Duration = Duration::from_millis(100);
/// The client's local ports: every port above 1023, as the demo gives the kernel client.
const EPHEMERAL: (u16, u16) = (1024, 65535);
/// How long the client holds the port of a connection that entered TIME-WAIT: smoltcp's
/// TIME-WAIT (`CLOSE_DELAY`, src/socket/tcp.rs:301 of smoltcp 0.14), which the client cuts
/// short to reuse the socket (see [`Client`]).
const TIME_WAIT: Duration = Duration::from_secs(10);

/// Serve `workload` on `ip:port` with smoltcp over `device`, spinning, until `shared.stop`.
pub fn server<D: Device>(
    device: D,
    ip: Ipv4Addr,
    prefix: u8,
    port: u16,
    workload: Workload,
    shared: &Shared,
) -> Result<ServerResult, String> {
    let mode = format!("smoltcp 0.14 on {}", device.info().mode);
    let clock = Clock(Instant::now());
    let mut adapter = Adapter::new(device);
    let mut iface = interface(&mut adapter, ip, prefix, clock.now())?;

    let (role, busy) = match workload {
        Workload::Rr { conns, .. } => (Role::Echo, conns),
        Workload::Connect => (Role::Echo, 1),
        Workload::BulkUp => (Role::Sink, 1),
        Workload::BulkDown | Workload::File => (Role::Source, 1),
    };
    let mut sockets = SocketSet::new(Vec::with_capacity(busy + SPARE_LISTENERS));
    let mut server = Server { role, port, handles: Vec::new(), buf: vec![0; BUFFER], chunk: vec![0x5a; CHUNK] };
    for _ in 0..busy + SPARE_LISTENERS {
        let handle = sockets.add(new_socket());
        listen(sockets.get_mut(handle), port)?;
        server.handles.push(handle);
    }
    shared.ready.store(true, Ordering::SeqCst);

    let mut window = Window::default();
    let mut turns = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        turns += 1;
        window.observe(&shared.phase, || adapter.own());
        iface.poll(clock.now(), &mut adapter, &mut sockets);
        server.service(&mut sockets, &mut adapter.copied)?;
        let now = clock.now();
        while iface.poll_egress(now, &mut adapter, &mut sockets) == PollResult::SocketStateChanged {}
        adapter.flush()?;
    }
    window.observe(&shared.phase, || adapter.own());
    window.finish(adapter.own());
    let kicks = adapter.device.device_counters().into_iter().find(|(n, _)| *n == "tx_kicks").map_or(0, |c| c.1);
    log::debug!(
        "smoltcp: {turns} turns of the loop, {} frames received, {} sent in {kicks} kicks, {} device calls",
        adapter.rx.frames_in,
        adapter.tx.frames_out,
        adapter.device.syscalls()
    );

    // Close every connection (FIN after what is queued), let the FINs out, then reset the rest.
    for &handle in &server.handles {
        sockets.get_mut::<tcp::Socket>(handle).close();
    }
    let open = |sockets: &SocketSet| {
        server
            .handles
            .iter()
            .any(|&h| !matches!(sockets.get::<tcp::Socket>(h).state(), tcp::State::Closed | tcp::State::TimeWait))
    };
    let deadline = Instant::now() + LINGER;
    while Instant::now() < deadline && open(&sockets) {
        iface.poll(clock.now(), &mut adapter, &mut sockets);
        adapter.flush()?;
    }
    for &handle in &server.handles {
        let socket = sockets.get_mut::<tcp::Socket>(handle);
        if !matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
            socket.abort();
        }
    }
    iface.poll(clock.now(), &mut adapter, &mut sockets);
    adapter.flush()?;
    if adapter.tx.dropped > 0 {
        log::debug!("smoltcp: {} frames dropped for want of a transmit buffer", adapter.tx.dropped);
    }

    let (usage, copied) = window.delta().ok_or("smoltcp: the client's measurement window was not seen")?;
    Ok(ServerResult { usage, copied: Some(copied), mode, file: None })
}

/// Return a smoltcp interface at `ip`/`prefix` on the adapter's device (its MAC), seeded
/// from the kernel's random source (ISNs).
fn interface<D: Device>(
    adapter: &mut Adapter<D>,
    ip: Ipv4Addr,
    prefix: u8,
    now: smoltcp::time::Instant,
) -> Result<Interface, String> {
    let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(adapter.device.info().mac)));
    let seed = super::stack::secret();
    config.random_seed = u64::from_le_bytes(seed[..8].try_into().expect("a 16-byte secret"));
    let mut iface = Interface::new(config, adapter, now);
    let mut added = Ok(());
    iface.update_ip_addrs(|addrs| added = addrs.push(IpCidr::new(IpAddress::Ipv4(ip), prefix)));
    added.map_err(|_| format!("smoltcp: add the address {ip}/{prefix}"))?;
    Ok(iface)
}

/// Return a new socket with this demo's buffers (256 KiB each way).
fn new_socket() -> tcp::Socket<'static> {
    tcp::Socket::new(tcp::SocketBuffer::new(vec![0; BUFFER]), tcp::SocketBuffer::new(vec![0; BUFFER]))
}

/// Give `socket` this demo's per-connection settings: Nagle off, a fresh Reno controller.
fn configure(socket: &mut tcp::Socket) {
    // A socket keeps these across connections (smoltcp's reset leaves them alone): set them
    // again, so every connection starts with a fresh congestion controller.
    socket.set_nagle_enabled(false);
    socket.set_congestion_control(tcp::CongestionControl::Reno);
}

/// Put `socket` (Closed) into Listen on `port`, with this server's per-connection settings.
fn listen(socket: &mut tcp::Socket, port: u16) -> Result<(), String> {
    configure(socket);
    socket.listen(port).map_err(|e| format!("smoltcp: listen on {port}: {e}"))
}

/// What the server does with a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Send back everything read (request/response, connection rate).
    Echo,
    /// Read and discard (bulk, client -> server).
    Sink,
    /// Write without end (bulk, server -> client).
    Source,
}

/// The application side: a pool of sockets, each listening or serving one connection.
struct Server {
    role: Role,
    port: u16,
    handles: Vec<SocketHandle>,
    /// The echo's bounce buffer.
    buf: Vec<u8>,
    /// What the bulk source writes (0x5a, as our stack's server).
    chunk: Vec<u8>,
}

impl Server {
    /// Serve every connection once; put closed sockets back into Listen. `copied` counts
    /// the application's copies.
    fn service(&mut self, sockets: &mut SocketSet, copied: &mut u64) -> Result<(), String> {
        for i in 0..self.handles.len() {
            let socket = sockets.get_mut::<tcp::Socket>(self.handles[i]);
            match socket.state() {
                tcp::State::Closed => listen(socket, self.port)?,
                tcp::State::Listen | tcp::State::SynReceived | tcp::State::SynSent => {}
                _ => self.serve(socket, copied),
            }
        }
        Ok(())
    }

    /// Move what `socket` allows for the role; close once the client has closed and
    /// everything it sent has been consumed.
    fn serve(&mut self, socket: &mut tcp::Socket, copied: &mut u64) {
        match self.role {
            Role::Echo => {
                // Read only what the send buffer can take at once; the rest waits in the
                // receive buffer (its window closes) until the client has read some echo.
                while socket.can_recv() && socket.may_send() {
                    let room = socket.send_capacity() - socket.send_queue();
                    if room == 0 {
                        break;
                    }
                    let limit = room.min(self.buf.len());
                    let Ok(n) = socket.recv_slice(&mut self.buf[..limit]) else { break };
                    // Copy: socket receive buffer -> application.
                    *copied += n as u64;
                    let sent = socket.send_slice(&self.buf[..n]).unwrap_or(0);
                    // Copy: application -> socket send buffer (all of it: `room` was free).
                    *copied += sent as u64;
                    debug_assert_eq!(sent, n, "the send buffer had room for the echo");
                }
            }
            Role::Sink => {
                // Discard in place: the closure sees the receive buffer; nothing is copied.
                // Twice at most, when the data wraps around the end of the ring.
                while socket.can_recv() {
                    if socket.recv(|data| (data.len(), ())).is_err() {
                        break;
                    }
                }
            }
            Role::Source => {
                while socket.can_send() {
                    let n = socket.send_slice(&self.chunk).unwrap_or(0);
                    // Copy: application -> socket send buffer.
                    *copied += n as u64;
                    if n < self.chunk.len() {
                        break;
                    }
                }
            }
        }
        if socket.state() == tcp::State::CloseWait && socket.recv_queue() == 0 {
            socket.close();
        }
    }
}

/// Run `plan.workload` from smoltcp at `ip`/`prefix` over `device` against `plan.server`: the
/// workloads of `client::run`, which our stack's client runs too, warm-up unrecorded, then
/// `plan.duration` recorded. `interrupted` ends the run early.
///
/// Each connection has a [`tcp::Socket`] of its own, with the server's settings (256 KiB
/// buffers, Nagle off, Reno), bound to a port of [`Ports`]. The client closes first, so its
/// connections enter TIME-WAIT; their sockets are reused for new connections and their ports
/// stay held for smoltcp's TIME-WAIT: see [`Client`].
///
/// Each poll sends what the application wrote (`Interface::poll_egress`), flushes the
/// device, then receives and sends what is due ([`Interface::poll`]) and flushes again.
/// `copied` counts as the server does (see the module documentation).
pub fn client<D: Device>(
    device: D,
    ip: Ipv4Addr,
    prefix: u8,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let SocketAddr::V4(server) = plan.server else { return Err("smoltcp client: IPv4 only".into()) };
    let mut client = Client::new(device, ip, prefix, server)?;
    let result = client::run(&mut client, plan, shared, interrupted);
    if client.adapter.tx.dropped > 0 {
        log::debug!("smoltcp client: {} frames dropped for want of a transmit buffer", client.adapter.tx.dropped);
    }
    result
}

/// One connection of the client: its socket and the local port it holds.
#[derive(Clone, Copy)]
struct Conn {
    handle: SocketHandle,
    port: u16,
}

/// The client's local ports: a counter over [`EPHEMERAL`], wrapping, that skips every port
/// still held (by an open or closing connection, or one in TIME-WAIT).
struct Ports {
    next: u16,
    /// Indexed by port.
    held: Vec<bool>,
}

impl Ports {
    /// Start the counter at `seed`'s place in the range (a random start, as the kernel's).
    fn new(seed: u16) -> Ports {
        let (low, high) = EPHEMERAL;
        Ports { next: low + seed % (high - low + 1), held: vec![false; usize::from(u16::MAX) + 1] }
    }

    /// Return the next free port, now held; `None` if every port is held.
    fn take(&mut self) -> Option<u16> {
        let (low, high) = EPHEMERAL;
        for _ in low..=high {
            let port = self.next;
            self.next = if port == high { low } else { port + 1 };
            if !self.held[usize::from(port)] {
                self.held[usize::from(port)] = true;
                return Some(port);
            }
        }
        None
    }

    fn release(&mut self, port: u16) {
        self.held[usize::from(port)] = false;
    }
}

/// smoltcp as the client: the interface, its sockets, and the connections' bookkeeping.
///
/// A small pool of sockets, as smoltcp is meant to be used: a closed connection's socket is
/// not removed but goes to `closing` while it finishes (FIN-WAIT), then to `free` once it
/// has reached TIME-WAIT and sent its ACK of the server's FIN, or Closed; the next
/// connection reuses it with its buffers. smoltcp counts a socket in
/// TIME-WAIT as not open and lets [`tcp::Socket::connect`] start a new connection on it
/// (`is_open`, `connect`: src/socket/tcp.rs:1138 and :1026 of smoltcp 0.14), which ends the
/// old connection's TIME-WAIT early. The port stays held all the same, for as long as
/// smoltcp's TIME-WAIT would have lasted ([`TIME_WAIT`]), so no four-tuple comes back while
/// the old connection could still have segments in flight (RFC 9293 3.4.2); what is lost is
/// only the re-ACK of a retransmitted final FIN, which the interface now answers with a
/// reset (the server closes either way; on a lossless link it never happens). So the set
/// holds about as many sockets as connections are open or finishing their close at once.
///
/// Why not leave each socket in TIME-WAIT, as the kernel does: smoltcp matches every received
/// segment to its socket by a linear scan of the set (`Interface::process_tcp`,
/// src/iface/interface/tcp.rs:33) and visits every socket on every egress poll
/// (`socket_egress`, src/iface/interface/mod.rs:725), while TIME-WAIT holds a socket for a
/// fixed 10 s (`CLOSE_DELAY`, src/socket/tcp.rs:301). A client that kept one socket per
/// connection through TIME-WAIT held thousands after a second of connecting, and every
/// segment and poll paid for each: measured here, 1,585-2,135 connections/s with a p50 of
/// 458 µs instead of tens of thousands. The kernel and our stack keep TIME-WAIT in hash
/// tables, at no cost to other connections; smoltcp's maintainers state that its socket set is
/// meant for a handful of sockets (smoltcp-rs/smoltcp#934).
struct Client<D: Device> {
    iface: Interface,
    adapter: Adapter<D>,
    sockets: SocketSet<'static>,
    clock: Clock,
    server: SocketAddrV4,
    ports: Ports,
    /// Connections closed or aborted by the application that smoltcp still holds, oldest first.
    closing: VecDeque<Conn>,
    /// Sockets in TIME-WAIT with nothing left to send, or Closed: ready for the next
    /// connection.
    free: Vec<SocketHandle>,
    /// How many connections at the front of `closing` are in TIME-WAIT with their last ACK
    /// sent (see [`settle`](Self::settle)).
    settled: usize,
    /// Ports whose connection left TIME-WAIT early for a new one, each with when smoltcp's
    /// TIME-WAIT would have ended, oldest first; released then.
    time_wait: VecDeque<(Instant, u16)>,
}

impl<D: Device> Client<D> {
    /// Return a client at `ip`/`prefix` on `device`, with no socket yet, for `server`.
    fn new(device: D, ip: Ipv4Addr, prefix: u8, server: SocketAddrV4) -> Result<Self, String> {
        let clock = Clock(Instant::now());
        let mut adapter = Adapter::new(device);
        let iface = interface(&mut adapter, ip, prefix, clock.now())?;
        let seed = super::stack::secret();
        Ok(Client {
            iface,
            adapter,
            sockets: SocketSet::new(Vec::new()),
            clock,
            server,
            ports: Ports::new(u16::from_le_bytes([seed[0], seed[1]])),
            closing: VecDeque::new(),
            free: Vec::new(),
            settled: 0,
            time_wait: VecDeque::new(),
        })
    }

    /// Release the ports whose TIME-WAIT is over, and move the sockets of connections that
    /// have finished closing to `free`, oldest first: those smoltcp has closed, and those in
    /// TIME-WAIT that [`settle`](Self::settle) has seen with their last ACK out. The
    /// connection-rate run closes them in order, so a connection still closing only delays the
    /// reuse of those behind it.
    fn reclaim(&mut self) {
        let now = Instant::now();
        while let Some(&(until, port)) = self.time_wait.front() {
            if until > now {
                break;
            }
            self.time_wait.pop_front();
            self.ports.release(port);
        }
        while let Some(&oldest) = self.closing.front() {
            match self.state(oldest) {
                tcp::State::Closed => self.ports.release(oldest.port),
                tcp::State::TimeWait if self.settled > 0 => self.time_wait.push_back((now + TIME_WAIT, oldest.port)),
                _ => break,
            }
            self.closing.pop_front();
            self.settled = self.settled.saturating_sub(1);
            self.free.push(oldest.handle);
        }
    }

    /// After a poll, count the connections at the front of `closing` in TIME-WAIT as settled
    /// if no socket has anything to send before a delayed ACK could fall due
    /// (`Interface::poll_at`): then each one's ACK of the server's FIN has gone out, and
    /// reusing its socket takes nothing from the server. Costs a scan of the set only while
    /// such a connection waits.
    fn settle(&mut self) {
        let waiting = |client: &Self| {
            client.closing.get(client.settled).is_some_and(|&c| client.state(c) == tcp::State::TimeWait)
        };
        if !waiting(self) {
            return;
        }
        let at = self.clock.now();
        let first = self.closing[self.settled];
        let ack_delay = self.socket(first).ack_delay().unwrap_or(smoltcp::time::Duration::ZERO);
        if self.iface.poll_at(at, &self.sockets).is_some_and(|due| due <= at + ack_delay) {
            return;
        }
        while waiting(self) {
            self.settled += 1;
        }
    }

    fn socket(&mut self, conn: Conn) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(conn.handle)
    }

    fn state(&self, conn: Conn) -> tcp::State {
        self.sockets.get::<tcp::Socket>(conn.handle).state()
    }

    /// Hand `conn` back after the application has closed or aborted it: smoltcp finishes
    /// the close, then [`open`](Endpoint::open) reuses the socket.
    fn retire(&mut self, conn: Conn) {
        self.closing.push_back(conn);
    }
}

impl<D: Device> Endpoint for Client<D> {
    type Conn = Conn;

    fn name(&self) -> &'static str {
        "smoltcp client"
    }

    fn server(&self) -> SocketAddrV4 {
        self.server
    }

    fn poll(&mut self) -> Result<(), String> {
        let now = self.clock.now();
        while self.iface.poll_egress(now, &mut self.adapter, &mut self.sockets) == PollResult::SocketStateChanged {}
        self.adapter.flush()?;
        self.iface.poll(self.clock.now(), &mut self.adapter, &mut self.sockets);
        self.adapter.flush()?;
        self.settle();
        Ok(())
    }

    fn usage(&self) -> (Usage, u64) {
        let own = self.adapter.own();
        let mut usage = Usage::now();
        usage.syscalls += own.syscalls;
        (usage, own.copied)
    }

    /// Start one connection to the server (SYN-SENT) on a free port and a free socket.
    fn open(&mut self) -> Result<Conn, String> {
        self.reclaim();
        let port = self.ports.take().ok_or("smoltcp client: every local port is in use")?;
        let handle = match self.free.pop() {
            Some(handle) => handle,
            None => self.sockets.add(new_socket()),
        };
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        configure(socket);
        let server = self.server;
        socket
            .connect(self.iface.context(), (IpAddress::Ipv4(*server.ip()), server.port()), port)
            .map_err(|e| format!("smoltcp client: connect to {server} from port {port}: {e}"))?;
        Ok(Conn { handle, port })
    }

    fn opening(&self, conn: Conn) -> bool {
        matches!(self.state(conn), tcp::State::SynSent | tcp::State::SynReceived)
    }

    fn not_established(&self, conn: Conn) -> Option<String> {
        let state = self.state(conn);
        (state != tcp::State::Established).then(|| state.to_string())
    }

    fn closed(&self, conn: Conn) -> bool {
        matches!(self.state(conn), tcp::State::TimeWait | tcp::State::Closed)
    }

    fn write_some(&mut self, conn: Conn, data: &[u8], sent: &mut usize) -> Result<(), String> {
        let n = self.socket(conn).send_slice(&data[*sent..]).map_err(|e| format!("smoltcp client: send: {e}"))?;
        // Copy: application -> socket send buffer.
        self.adapter.copied += n as u64;
        *sent += n;
        Ok(())
    }

    fn read(&mut self, conn: Conn, buf: &mut [u8], what: &str) -> Result<usize, String> {
        match self.socket(conn).recv_slice(buf) {
            Ok(n) => {
                // Copy: socket receive buffer -> application.
                self.adapter.copied += n as u64;
                Ok(n)
            }
            Err(tcp::RecvError::Finished) => Err(format!("smoltcp client: the server closed the {what}")),
            Err(e) => Err(format!("smoltcp client: receive: {e} (the connection was reset?)")),
        }
    }

    fn peer_finished(&mut self, conn: Conn) -> Result<bool, String> {
        match self.socket(conn).recv(|data| (0, data.len())) {
            Err(tcp::RecvError::Finished) => Ok(true),
            Ok(0) => Ok(false),
            Ok(_) => Err("smoltcp client: the bulk server sent data".into()),
            Err(e) => Err(format!("smoltcp client: receive: {e} (the connection was reset?)")),
        }
    }

    fn shutdown(&mut self, conn: Conn) {
        // smoltcp's close is a half-close: FIN after what is queued, reading goes on.
        self.socket(conn).close();
    }

    /// The socket finishes the close in the background (TIME-WAIT included) and is reused
    /// after.
    fn close(&mut self, conn: Conn) {
        self.socket(conn).close();
        self.retire(conn);
    }

    fn abort(&mut self, conn: Conn) {
        self.socket(conn).abort();
        self.retire(conn);
    }
}

/// smoltcp's clock: microseconds since the server (or client) started.
struct Clock(Instant);

impl Clock {
    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.0.elapsed().as_micros() as i64)
    }
}

/// Our [`Device`] as a smoltcp [`phy::Device`].
///
/// Receiving costs one extra copy per frame: our devices lend a received frame to a closure
/// only for the length of the call, while smoltcp takes a token that it consumes later, so
/// the adapter copies each batch of frames into a pool of buffers it owns (allocated once,
/// reused) and hands them out one token at a time. That copy is counted in `copied`.
/// Sending costs none: a transmit token fills the device's own buffer.
struct Adapter<D: Device> {
    device: D,
    rx: RxPool,
    tx: TxState,
    /// TCP payload bytes copied by the adapter, smoltcp and the application (see the module
    /// documentation).
    copied: u64,
}

/// Received frames waiting for smoltcp.
struct RxPool {
    frames: Vec<Vec<u8>>,
    /// TCP payload length of each frame (0 for anything else).
    payload: Vec<usize>,
    /// Frames of the current batch, and the next one to hand out.
    filled: usize,
    next: usize,
    /// Frames taken from the device so far.
    frames_in: u64,
}

/// What transmit tokens share with the adapter.
struct TxState {
    /// No transmit buffer was free even after a flush: hand out no more transmit tokens
    /// until the next flush.
    full: bool,
    /// Frames smoltcp built that found no transmit buffer (TCP sends them again).
    dropped: u64,
    /// Where such a frame is built, since the token must run smoltcp's closure anyway.
    scratch: Vec<u8>,
    /// The first failure of the device; the server returns it.
    error: Option<io::Error>,
    /// Frames queued on the device so far.
    frames_out: u64,
}

impl<D: Device> Adapter<D> {
    fn new(device: D) -> Self {
        let max_frame = device.info().max_frame();
        Adapter {
            rx: RxPool {
                frames: (0..RX_BATCH).map(|_| Vec::with_capacity(max_frame)).collect(),
                payload: vec![0; RX_BATCH],
                filled: 0,
                next: 0,
                frames_in: 0,
            },
            tx: TxState { full: false, dropped: 0, scratch: vec![0; max_frame], error: None, frames_out: 0 },
            device,
            copied: 0,
        }
    }

    /// The counters the measurement window samples.
    fn own(&self) -> Own {
        Own { copied: self.copied, syscalls: self.device.syscalls() }
    }

    /// Take the next batch of frames from the device into the pool.
    fn refill(&mut self) {
        let RxPool { frames, payload, filled, next, .. } = &mut self.rx;
        let max_frame = self.device.info().max_frame();
        let copied = &mut self.copied;
        (*filled, *next) = (0, 0);
        let received = self.device.recv(RX_BATCH, &mut |frame| {
            if *filled == frames.len() {
                frames.push(Vec::with_capacity(max_frame));
                payload.push(0);
            }
            let buf = &mut frames[*filled];
            buf.clear();
            buf.extend_from_slice(frame);
            payload[*filled] = tcp_payload_len(frame);
            // Copy: the device's buffer (a UMEM frame) -> the adapter's.
            *copied += payload[*filled] as u64;
            *filled += 1;
        });
        self.rx.frames_in += self.rx.filled as u64;
        if let Err(e) = received {
            self.tx.error.get_or_insert(e);
        }
    }

    /// Push queued frames out; return the device's first failure, if any.
    fn flush(&mut self) -> Result<(), String> {
        if let Err(e) = self.device.flush() {
            self.tx.error.get_or_insert(e);
        }
        self.tx.full = false;
        match self.tx.error.take() {
            Some(e) => Err(format!("smoltcp: packet I/O failed: {e}")),
            None => Ok(()),
        }
    }
}

impl<D: Device> phy::Device for Adapter<D> {
    type RxToken<'a>
        = RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, D>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(RxToken<'_>, TxToken<'_, D>)> {
        if self.rx.next == self.rx.filled {
            if self.tx.error.is_some() {
                return None;
            }
            self.refill();
        }
        if self.rx.next == self.rx.filled {
            return None;
        }
        let i = self.rx.next;
        self.rx.next += 1;
        // Copy: smoltcp's, adapter buffer -> socket receive buffer, when it processes the
        // segment (smoltcp consumes every token it takes).
        self.copied += self.rx.payload[i] as u64;
        let rx = RxToken { frame: &self.rx.frames[i] };
        // A reply built while receiving (an ACK, a RST) is dropped if no buffer is free.
        let tx = TxToken { device: &mut self.device, tx: &mut self.tx, copied: &mut self.copied };
        Some((rx, tx))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<TxToken<'_, D>> {
        if self.tx.full || self.tx.error.is_some() {
            return None;
        }
        Some(TxToken { device: &mut self.device, tx: &mut self.tx, copied: &mut self.copied })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.device.info().max_frame();
        // Default checksum capabilities: computed and verified in software, as our stack does.
        caps
    }
}

/// A received frame, in the adapter's pool.
struct RxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

/// The right to queue one frame on the device.
struct TxToken<'a, D: Device> {
    device: &'a mut D,
    tx: &'a mut TxState,
    copied: &'a mut u64,
}

impl<D: Device> phy::TxToken for TxToken<'_, D> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut f = Some(f);
        let mut built = None;
        let mut fill = |buf: &mut [u8]| {
            if len > buf.len() {
                // Cannot happen (smoltcp keeps to the MTU we report); cancel, and the frame
                // is built in scratch and dropped below.
                return 0;
            }
            let build = f.take().expect("the device fills a buffer at most once");
            let frame = &mut buf[..len];
            built = Some((build(frame), tcp_payload_len(frame)));
            len
        };
        let mut sent = self.device.send(&mut fill);
        if matches!(sent, Ok(false)) {
            // No free buffer: push the queued frames (which reclaims those already sent)
            // and try once more.
            sent = self.device.flush().and_then(|()| self.device.send(&mut fill));
        }
        match sent {
            Ok(true) => self.tx.frames_out += u64::from(built.is_some()),
            Ok(false) => self.tx.full = true,
            Err(e) => {
                self.tx.error.get_or_insert(e);
            }
        }
        let (out, payload) = match (built, f) {
            (Some(built), _) => built,
            (None, Some(build)) => {
                // No buffer: smoltcp's closure must run all the same; build the frame aside
                // and drop it, like a loss on the wire.
                self.tx.dropped += 1;
                log::debug!("smoltcp: drop a {len}-byte frame: no transmit buffer free");
                if self.tx.scratch.len() < len {
                    self.tx.scratch.resize(len, 0);
                }
                let frame = &mut self.tx.scratch[..len];
                (build(frame), tcp_payload_len(frame))
            }
            (None, None) => unreachable!("the closure ran, so it built the frame"),
        };
        // Copy: smoltcp's, socket send buffer -> frame.
        *self.copied += payload as u64;
        out
    }
}

/// Return the TCP payload length of an Ethernet frame (0 if it carries no TCP segment).
fn tcp_payload_len(frame: &[u8]) -> usize {
    match SlicedPacket::from_ethernet(frame) {
        Ok(SlicedPacket { transport: Some(TransportSlice::Tcp(tcp)), .. }) => tcp.payload().len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    //! smoltcp serving our stack over the in-memory link (real time): echo and bulk content
    //! checked here, every workload through the demo's own client (`ours::client`).

    use std::io::ErrorKind;
    use std::net::{SocketAddr, SocketAddrV4};
    use std::sync::atomic::AtomicBool;

    use bypass_device::{Clock as LinkClock, LinkConfig, MemoryDevice, MemoryLink};
    use bypass_stack::{SocketId, Stack, StackConfig};
    use bypass_tcp::State;

    use super::super::kernel::{ClientPlan, wait_ready};
    use super::super::measure::{DONE, MEASURING};
    use super::*;

    const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
    const PORT: u16 = 7;

    /// Set `shared.stop` when dropped, so a failing client never leaves the server spinning.
    struct StopOnDrop<'a>(&'a Shared);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.stop.store(true, Ordering::SeqCst);
        }
    }

    /// A demo server: smoltcp's ([`server`]) or our stack's.
    type Serve = fn(MemoryDevice, Ipv4Addr, u8, u16, Workload, &Shared) -> Result<ServerResult, String>;

    /// Run the smoltcp server for `workload` on one end of an in-memory link and `client`
    /// on the other; stop the server once the client returns.
    fn run<T>(
        workload: Workload,
        client: impl FnOnce(MemoryDevice, &Shared) -> T,
    ) -> (Result<ServerResult, String>, T) {
        run_against(server, workload, client)
    }

    /// As [`run`], with `serve` as the server.
    fn run_against<T>(
        serve: Serve,
        workload: Workload,
        client: impl FnOnce(MemoryDevice, &Shared) -> T,
    ) -> (Result<ServerResult, String>, T) {
        let _ = env_logger::builder().is_test(true).try_init();
        let link = LinkConfig::default().with_delay(Duration::ZERO);
        let (client_device, server_device) = MemoryLink::new(link, link, 1).clock(LinkClock::real()).build();
        let shared = Shared::default();
        std::thread::scope(|scope| {
            let shared = &shared;
            let handle = scope.spawn(move || serve(server_device, SERVER_IP, 24, PORT, workload, shared));
            let stop = StopOnDrop(shared);
            let out = client(client_device, shared);
            drop(stop);
            (handle.join().expect("the server thread panicked"), out)
        })
    }

    /// Connect our stack to the server and wait until the connection is established.
    fn connect(device: MemoryDevice, shared: &Shared) -> (Stack<MemoryDevice>, SocketId) {
        wait_ready(shared).expect("the server listens");
        let mut stack = Stack::new(device, StackConfig::new(CLIENT_IP, 24, super::super::stack::secret()));
        let id = stack.connect(SocketAddrV4::new(SERVER_IP, PORT)).expect("connect");
        stack.set_nodelay(id, true);
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(stack.state(id), State::SynSent | State::SynReceived) {
            assert!(Instant::now() < deadline, "no answer from smoltcp within 3 s");
            stack.poll().expect("poll");
        }
        assert_eq!(stack.state(id), State::Established);
        (stack, id)
    }

    /// Set the phase, giving the server time to sample its counters at the change.
    fn phase(shared: &Shared, phase: u8) {
        shared.phase.store(phase, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Close `id` and poll until the close has finished (or a moment passes).
    fn close(stack: &mut Stack<MemoryDevice>, id: SocketId) {
        stack.close(id);
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline && !matches!(stack.state(id), State::TimeWait | State::Closed) {
            stack.poll().expect("poll");
        }
    }

    #[test]
    fn smoltcp_echoes_what_our_stack_sends() {
        const ROUNDS: usize = 300;
        const SIZE: usize = 1024;
        let (server, echoed) = run(Workload::Rr { size: SIZE, conns: 1 }, |device, shared| {
            let (mut stack, id) = connect(device, shared);
            phase(shared, MEASURING);
            let mut buf = vec![0u8; SIZE];
            for round in 0..ROUNDS {
                let msg: Vec<u8> = (0..SIZE).map(|i| (i * 7 + round) as u8).collect();
                let (mut sent, mut got) = (0, 0);
                let deadline = Instant::now() + Duration::from_secs(2);
                while got < SIZE {
                    assert!(Instant::now() < deadline, "no echo within 2 s (round {round})");
                    if sent < SIZE {
                        match stack.write(id, &msg[sent..]) {
                            Ok(n) => sent += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            Err(e) => panic!("write: {e}"),
                        }
                    }
                    stack.poll().expect("poll");
                    match stack.read(id, &mut buf[got..]) {
                        Ok(0) => panic!("smoltcp closed the connection"),
                        Ok(n) => got += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("read: {e}"),
                    }
                }
                assert_eq!(buf, msg, "round {round}: the echo differs");
            }
            phase(shared, DONE);
            close(&mut stack, id);
            (ROUNDS * SIZE) as u64
        });
        let server = server.expect("the server returns Ok after stop");
        // Five copies per echoed byte: adapter, into the socket, out to the application,
        // back in, out into a frame (more only if a segment went twice).
        let copied = server.copied.expect("smoltcp counts its copies");
        assert!(copied >= 5 * echoed && copied < 6 * echoed, "copied {copied} for {echoed} bytes echoed");
        assert!(server.mode.starts_with("smoltcp 0.14 on in-memory link"), "{}", server.mode);
    }

    #[test]
    fn smoltcp_sinks_a_bulk_upload_and_closes() {
        const TOTAL: usize = 4 << 20;
        let (server, ()) = run(Workload::BulkUp, |device, shared| {
            let (mut stack, id) = connect(device, shared);
            phase(shared, MEASURING);
            let chunk = vec![0x5au8; 64 * 1024];
            let mut sent = 0;
            let deadline = Instant::now() + Duration::from_secs(20);
            while sent < TOTAL {
                assert!(Instant::now() < deadline, "stalled after {sent} bytes");
                match stack.write(id, &chunk[..chunk.len().min(TOTAL - sent)]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => stack.poll().map(|_| ()).expect("poll"),
                    Err(e) => panic!("write: {e}"),
                }
            }
            stack.shutdown(id);
            // The server closes once it has read everything up to our FIN.
            let mut buf = [0u8; 64];
            loop {
                assert!(Instant::now() < deadline, "smoltcp did not close after our FIN");
                stack.poll().expect("poll");
                match stack.read(id, &mut buf) {
                    Ok(0) => break,
                    Ok(_) => panic!("the sink sent data"),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
            phase(shared, DONE);
            close(&mut stack, id);
        });
        let copied = server.expect("the server returns Ok after stop").copied.expect("counted");
        // Two copies per byte received: adapter, into the socket; the sink discards in place.
        let total = TOTAL as u64;
        assert!(copied >= 2 * total && copied < 2 * total + total / 4, "copied {copied} for {total} bytes");
    }

    /// A short measurement of `workload` against the server on the in-memory link: longer
    /// with many connections, whose handshakes (busy-polling threads of every test in
    /// parallel on two cores) can take the whole of a short window.
    fn memory_plan(workload: Workload) -> ClientPlan {
        let many = matches!(workload, Workload::Rr { conns, .. } if conns > 1);
        ClientPlan {
            server: SocketAddr::V4(SocketAddrV4::new(SERVER_IP, PORT)),
            workload,
            busy: true,
            warmup: Duration::from_millis(if many { 300 } else { 50 }),
            duration: Duration::from_millis(if many { 500 } else { 200 }),
        }
    }

    /// Every workload of the demo, through the client of rows 4b/5b (our stack).
    #[test]
    fn smoltcp_serves_every_workload_to_our_client() {
        for workload in super::super::WORKLOADS.into_iter().filter(|w| *w != Workload::File) {
            let plan = memory_plan(workload);
            let interrupted = AtomicBool::new(false);
            let (server, client) = run(workload, |device, shared| {
                super::super::ours::client(device, CLIENT_IP, 24, &plan, shared, &interrupted)
            });
            let client = client.unwrap_or_else(|e| panic!("{}: client: {e}", workload.key()));
            let server = server.unwrap_or_else(|e| panic!("{}: server: {e}", workload.key()));
            assert!(client.units > 0, "{}: nothing measured", workload.key());
            assert!(server.copied.is_some_and(|c| c > 0), "{}: no copies counted", workload.key());
        }
    }

    /// Every workload of the demo from the smoltcp client (row 6b), against the smoltcp
    /// server and against our stack's.
    #[test]
    fn smoltcp_client_runs_every_workload_against_smoltcp_and_ours() {
        let servers: [(&str, Serve); 2] = [("smoltcp", server), ("ours", super::super::stack::server)];
        for (name, serve) in servers {
            for workload in super::super::WORKLOADS.into_iter().filter(|w| *w != Workload::File) {
                let plan = memory_plan(workload);
                let interrupted = AtomicBool::new(false);
                let (server, client) = run_against(serve, workload, |device, shared| {
                    super::client(device, CLIENT_IP, 24, &plan, shared, &interrupted)
                });
                let key = format!("{} against {name}", workload.key());
                let client = client.unwrap_or_else(|e| panic!("{key}: client: {e}"));
                server.unwrap_or_else(|e| panic!("{key}: server: {e}"));
                let copied = client.copied.expect("the smoltcp client counts its copies");
                assert!(client.units > 0, "{key}: nothing measured");
                assert!(copied > 0, "{key}: no copies counted");
            }
        }
    }

    /// The smoltcp client's connection-rate run keeps a small pool of sockets however many
    /// connections it makes (smoltcp scans the whole set for every segment and every poll,
    /// so one socket per connection held through TIME-WAIT slowed the run down as it went),
    /// yet no port comes back within smoltcp's TIME-WAIT: each connection's port is held. And
    /// no socket is reused before its ACK of the server's FIN has gone out: each connection
    /// costs the client at least its five segments (SYN, ACK, request, FIN, that last ACK).
    #[test]
    fn smoltcp_client_reuses_its_sockets_but_not_their_ports() {
        use std::collections::HashSet;

        // The counts below need twenty connections or so, which a loaded two-core machine
        // (every test's busy-polling threads at once, a Valgrind run beside them) may not
        // finish in a second: then the run is made again, longer. What is checked does not
        // depend on the time taken.
        let measure = |duration: Duration| {
            let plan = ClientPlan { duration, ..memory_plan(Workload::Connect) };
            let interrupted = AtomicBool::new(false);
            let (server, (result, sockets, held, sent)) = run(Workload::Connect, |device, shared| {
                let mut client =
                    Client::new(device, CLIENT_IP, 24, SocketAddrV4::new(SERVER_IP, PORT)).expect("client");
                let result = super::super::client::run(&mut client, &plan, shared, &interrupted);
                let held: HashSet<u16> = client.time_wait.iter().map(|&(_, port)| port).collect();
                assert_eq!(held.len(), client.time_wait.len(), "a port came back within TIME-WAIT");
                (result, client.sockets.iter().count(), held.len(), client.adapter.device.tx_stats().sent)
            });
            server.expect("the server returns Ok after stop");
            (result.expect("the connection-rate run"), sockets, held, sent)
        };
        let (mut result, mut sockets, mut held, mut sent) = measure(Duration::from_secs(1));
        for longer in [4, 10] {
            if result.units >= 20 {
                break;
            }
            eprintln!("{} connections in a second on this machine: again for {longer} s", result.units);
            (result, sockets, held, sent) = measure(Duration::from_secs(longer));
        }
        // Warm-up connections come on top of the measured ones.
        assert!(result.units >= 20, "only {} connections measured", result.units);
        assert!(sockets <= 8, "{sockets} sockets held for {} connections", result.units);
        assert!(held as u64 + 8 >= result.units, "{held} ports held in TIME-WAIT for {} connections", result.units);
        // `held` counts every connection reused out of TIME-WAIT, the warm-up's included.
        assert!(sent >= 5 * held as u64, "{sent} frames sent for {held} connections: a last ACK went missing");
    }

    /// Every workload against the kernel's client, smoltcp on our AF_XDP device in a
    /// two-namespace lab (root only; skipped elsewhere, outside CI), as the demo's row 6.
    #[test]
    fn smoltcp_on_af_xdp_serves_the_kernel_client() {
        use bypass_io::xdp::{XdpConfig, XdpDevice};
        use bypass_lab::testlab::{Lab, LabConfig, lab_available};

        if !lab_available("smoltcp_on_af_xdp_serves_the_kernel_client") {
            return;
        }
        let _ = env_logger::builder().is_test(true).try_init();
        let lab = Lab::with_config(LabConfig::new("smoltcp")).expect("build the lab");
        let (low, high) = super::super::PEER_PORTS;
        lab.in_peer(|| std::fs::write("/proc/sys/net/ipv4/ip_local_port_range", format!("{low} {high}")))
            .expect("widen the peer's ephemeral ports");
        for workload in super::super::WORKLOADS.into_iter().filter(|w| *w != Workload::File) {
            let plan = ClientPlan {
                server: SocketAddr::V4(SocketAddrV4::new(lab.bypass_ip, PORT)),
                workload,
                busy: true,
                warmup: Duration::from_millis(100),
                duration: Duration::from_millis(300),
            };
            let (shared, interrupted) = (Shared::default(), AtomicBool::new(false));
            let (server, client) = std::thread::scope(|scope| {
                let (lab, shared) = (&lab, &shared);
                let handle = scope.spawn(move || {
                    let result = lab.in_bypass(|| {
                        let config = XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) };
                        let device = XdpDevice::open(config).map_err(|e| format!("AF_XDP: {e}"))?;
                        server(device, lab.bypass_ip, lab.prefix_len, PORT, workload, shared)
                    });
                    shared.stop.store(true, Ordering::SeqCst);
                    result
                });
                let stop = StopOnDrop(shared);
                let client = lab.in_peer(|| super::super::kernel::client(&plan, shared, &interrupted));
                drop(stop);
                (handle.join().expect("the server thread panicked"), client)
            });
            let key = workload.key();
            let client = client.unwrap_or_else(|e| panic!("{key}: kernel client: {e}"));
            let server = server.unwrap_or_else(|e| panic!("{key}: smoltcp server: {e}"));
            assert!(client.units > 0, "{key}: nothing measured");
            assert!(server.mode.starts_with("smoltcp 0.14 on AF_XDP"), "{key}: {}", server.mode);
        }
    }
}
