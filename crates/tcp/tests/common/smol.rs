//! An in-memory IPv4 network on virtual time that joins our [`Connection`] and smoltcp.
//!
//! Each end is a [`Host`]: [`OurHost`] wraps our segments in IPv4 headers built with
//! `etherparse` (and unwraps the peer's), [`SmolHost`] is a smoltcp `Interface` with
//! `Medium::Ip` whose device reads from and writes to a [`Link`]. A [`Net`] joins two hosts
//! with a link each way, plays an [`App`] on each, and moves one virtual clock to the earliest
//! of the next link delivery, our `poll_timeout` and smoltcp's `poll_at`.
//!
//! Shared by `tests/smoltcp_interop.rs` and `benches/tcp.rs` (each uses part of it).
#![allow(dead_code)]

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use bypass_tcp::sim::Link;
use bypass_tcp::{Config, Connection, Event, FourTuple, Instant, RecvError, Segment, SendError, State, TransmitKind};
use etherparse::{IpNumber, Ipv4Header, Ipv4Slice};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};

/// The client's address (the active opener).
pub const CLIENT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000));
/// The server's address (the passive opener).
pub const SERVER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80));

/// IP MTU of the simulated path: smoltcp derives its MSS (1460) from it.
pub const MTU: usize = 1500;
/// Socket buffers of the smoltcp ends, the size of our default buffers.
pub const SMOL_BUFFER: usize = 256 * 1024;
/// Bytes an application moves per `send`/`recv` call.
const APP_CHUNK: usize = 64 * 1024;
/// Rounds of work at one instant before the run is declared a livelock.
const MAX_ROUNDS: usize = 10_000;
/// Clock advances that do not move time before the run is declared a livelock.
const MAX_STUCK: usize = 10_000;

/// Return `n` pseudo-random bytes from `seed`.
pub fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut data = vec![0; n];
    Xoshiro256PlusPlus::seed_from_u64(seed).fill_bytes(&mut data);
    data
}

fn smol_instant(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(now.as_micros() as i64)
}

fn our_instant(t: smoltcp::time::Instant) -> Instant {
    Instant::from_micros(t.total_micros().max(0) as u64)
}

fn ipv4(addr: SocketAddr) -> Ipv4Addr {
    match addr.ip() {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(ip) => panic!("IPv4 network, got {ip}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------------------------

/// What `recv` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// This many bytes were read.
    Data(usize),
    /// Nothing to read yet.
    WouldBlock,
    /// The peer closed and everything was read.
    Eof,
}

/// One end of a [`Net`]: a TCP stack with one connection, its IP layer and its socket calls.
pub trait Host {
    /// Return which stack this is.
    fn name(&self) -> &'static str;
    /// Take the packets due on `rx`, fire due timers, and put what the stack sends on `tx`.
    fn poll(&mut self, now: Instant, rx: &mut Link, tx: &mut Link);
    /// Return when the stack wants `poll` next, packets aside.
    fn poll_at(&mut self, now: Instant) -> Option<Instant>;
    /// Queue data; return how much was taken (0 when the buffer is full).
    fn send(&mut self, data: &[u8]) -> Result<usize, String>;
    /// Read data.
    fn recv(&mut self, buf: &mut [u8]) -> Result<Recv, String>;
    /// Close our sending side.
    fn close(&mut self, now: Instant);
    /// Return whether the handshake completed (the state is ESTABLISHED or later).
    fn is_synchronized(&self) -> bool;
    /// Return whether the connection is over: CLOSED, or TIME-WAIT where the host allows it.
    fn is_done(&self) -> bool;
    /// Return what went wrong in the stack, if anything did (a reset, a bad packet).
    fn fault(&self) -> Option<&str>;
    /// Describe the state, for failure messages.
    fn describe(&self) -> String;
}

// ---------------------------------------------------------------------------------------------
// Our end
// ---------------------------------------------------------------------------------------------

/// Our [`Connection`] behind an IPv4 layer built with `etherparse`.
pub struct OurHost {
    /// The connection.
    pub conn: Connection,
    ip: Ipv4Addr,
    buf: Vec<u8>,
    /// Whether TIME-WAIT counts as done (else only CLOSED does).
    pub time_wait_ok: bool,
    /// Packets dropped on input: bad IPv4 header, bad TCP checksum, not for us.
    pub rejected: u64,
    /// RSTs received.
    pub rst_in: u64,
    /// RSTs sent.
    pub rst_out: u64,
    /// Events reported by the connection, oldest first.
    pub events: Vec<Event>,
    fault: Option<String>,
    /// The source of the last segment handed to the connection: where a reset answering it
    /// from LISTEN goes, which has no remote address.
    last_src: Option<Ipv4Addr>,
}

impl OurHost {
    fn new(conn: Connection) -> OurHost {
        OurHost {
            ip: ipv4(conn.local_addr()),
            conn,
            buf: vec![0; Ipv4Header::MIN_LEN + (1 << 16)],
            time_wait_ok: false,
            rejected: 0,
            rst_in: 0,
            rst_out: 0,
            events: Vec::new(),
            fault: None,
            last_src: None,
        }
    }

    /// Return a host whose connection is opening from `local` to `remote`.
    pub fn client(config: &Config, local: SocketAddr, remote: SocketAddr, now: Instant) -> OurHost {
        OurHost::new(Connection::connect(config, FourTuple { local, remote }, now))
    }

    /// Return a host whose connection listens on `local`.
    pub fn server(config: &Config, local: SocketAddr) -> OurHost {
        OurHost::new(Connection::listen(config, local))
    }

    fn set_fault(&mut self, fault: String) {
        log::debug!("ours: {fault}");
        self.fault.get_or_insert(fault);
    }

    /// Unwrap one IPv4 packet and hand its segment to the connection.
    fn input(&mut self, now: Instant, packet: &[u8]) {
        let ip = match Ipv4Slice::from_slice(packet) {
            Ok(ip) => ip,
            Err(e) => {
                self.rejected += 1;
                log::debug!("ours: dropped a {}-byte packet: {e}", packet.len());
                return;
            }
        };
        let header = ip.header();
        let (src, dst) = (header.source_addr(), header.destination_addr());
        if header.to_header().calc_header_checksum() != header.header_checksum() {
            self.rejected += 1;
            log::debug!("ours: dropped {src} -> {dst}: bad IPv4 header checksum");
            return;
        }
        if ip.payload_ip_number() != IpNumber::TCP || ip.payload().fragmented || dst != self.ip {
            self.rejected += 1;
            log::debug!("ours: dropped {src} -> {dst}: not an unfragmented TCP packet for {}", self.ip);
            return;
        }
        let seg = match Segment::parse(ip.payload().payload, src.into(), dst.into()) {
            Ok(seg) => seg,
            Err(e) => {
                self.rejected += 1;
                log::debug!("ours: dropped {src} -> {dst}: {e}");
                return;
            }
        };
        log::trace!("{now} ours <- {seg:?}");
        self.rst_in += u64::from(seg.flags.rst());
        self.last_src = Some(src);
        match self.conn.tuple() {
            None => {
                self.conn.handle_segment_from(now, src.into(), &seg);
            }
            Some(t) if t.remote == SocketAddr::new(src.into(), seg.src_port) => {
                self.conn.handle_segment(now, &seg);
            }
            Some(t) => self.set_fault(format!("segment from {src}:{} for the connection {t}", seg.src_port)),
        }
    }

    /// Wrap each segment `poll_transmit` writes in an IPv4 header and send it.
    fn output(&mut self, now: Instant, tx: &mut Link) {
        const IP: usize = Ipv4Header::MIN_LEN;
        while let Some(t) = self.conn.poll_transmit(now, &mut self.buf[IP..]) {
            let dst = self.conn.remote_addr().map(ipv4).or(self.last_src).expect("a segment answers a peer");
            let header = Ipv4Header::new(t.len as u16, 64, IpNumber::TCP, self.ip.octets(), dst.octets())
                .expect("a segment fits in an IPv4 packet");
            // `write` fills in the header checksum.
            header.write(&mut &mut self.buf[..IP]).expect("room for the IPv4 header");
            if t.kind == TransmitKind::Reset {
                self.rst_out += 1;
            }
            log::trace!("{now} ours -> [{}] seq={} len={} ({:?})", t.flags, t.seq, t.payload_len, t.kind);
            tx.send(now, &self.buf[..IP + t.len]);
        }
    }
}

impl Host for OurHost {
    fn name(&self) -> &'static str {
        "ours"
    }

    fn poll(&mut self, now: Instant, rx: &mut Link, tx: &mut Link) {
        while let Some(packet) = rx.recv(now) {
            self.input(now, packet.bytes());
            rx.recycle(packet);
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        self.output(now, tx);
        while let Some(event) = self.conn.poll_event() {
            if matches!(event, Event::Reset | Event::TimedOut) {
                self.set_fault(format!("connection reported {event:?} at {now}"));
            }
            self.events.push(event);
        }
    }

    fn poll_at(&mut self, _now: Instant) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    fn send(&mut self, data: &[u8]) -> Result<usize, String> {
        match self.conn.send(data) {
            Ok(n) => Ok(n),
            Err(SendError::WouldBlock) => Ok(0),
            Err(e) => Err(format!("ours: send: {e}")),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Recv, String> {
        match self.conn.recv(buf) {
            Ok(0) => Ok(Recv::Eof),
            Ok(n) => Ok(Recv::Data(n)),
            Err(RecvError::WouldBlock) => Ok(Recv::WouldBlock),
            Err(e) => Err(format!("ours: recv: {e}")),
        }
    }

    fn close(&mut self, now: Instant) {
        self.conn.close(now);
    }

    fn is_synchronized(&self) -> bool {
        self.conn.state().is_synchronized()
    }

    fn is_done(&self) -> bool {
        match self.conn.state() {
            State::Closed => true,
            State::TimeWait => self.time_wait_ok,
            _ => false,
        }
    }

    fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    fn describe(&self) -> String {
        let s = self.conn.stats();
        let q = self.conn.sequence_space();
        format!(
            "ours {}: {:?}; segs in/out {}/{}, bytes in/out {}/{}, retransmits {} (timeouts {}, fast {}), \
             dropped {}, rejected {}, rst in/out {}/{}, send queue {}, recv queue {}; transitions: [{}]",
            self.conn.state(),
            q,
            s.segs_in,
            s.segs_out,
            s.bytes_in,
            s.bytes_out,
            s.retransmits,
            s.timeouts,
            s.fast_retransmits,
            s.segs_dropped,
            self.rejected,
            self.rst_in,
            self.rst_out,
            self.conn.send_queued(),
            self.conn.recv_available(),
            self.conn.trace().iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// smoltcp end
// ---------------------------------------------------------------------------------------------

/// A smoltcp `phy::Device` for one poll: receives from one link and transmits into another.
pub struct LinkDevice<'a> {
    rx: &'a mut Link,
    tx: &'a mut Link,
    scratch: &'a mut Vec<u8>,
}

/// A received packet; its buffer goes back to the link once consumed.
pub struct LinkRxToken<'a> {
    packet: Option<bypass_tcp::sim::Packet>,
    link: &'a mut Link,
}

/// Room for one packet; sent on the link at the device's time once filled.
pub struct LinkTxToken<'a> {
    link: &'a mut Link,
    scratch: &'a mut Vec<u8>,
    now: Instant,
}

impl LinkDevice<'_> {
    fn capabilities() -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = MTU;
        caps
    }
}

impl Device for LinkDevice<'_> {
    type RxToken<'b>
        = LinkRxToken<'b>
    where
        Self: 'b;
    type TxToken<'b>
        = LinkTxToken<'b>
    where
        Self: 'b;

    fn receive(&mut self, timestamp: smoltcp::time::Instant) -> Option<(LinkRxToken<'_>, LinkTxToken<'_>)> {
        let now = our_instant(timestamp);
        let packet = self.rx.recv(now)?;
        let rx = LinkRxToken { packet: Some(packet), link: self.rx };
        let tx = LinkTxToken { link: self.tx, scratch: self.scratch, now };
        Some((rx, tx))
    }

    fn transmit(&mut self, timestamp: smoltcp::time::Instant) -> Option<LinkTxToken<'_>> {
        Some(LinkTxToken { link: self.tx, scratch: self.scratch, now: our_instant(timestamp) })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        LinkDevice::capabilities()
    }
}

impl phy::RxToken for LinkRxToken<'_> {
    fn consume<R, F>(mut self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let packet = self.packet.take().expect("a token holds its packet until consumed");
        let r = f(packet.bytes());
        self.link.recycle(packet);
        r
    }
}

impl phy::TxToken for LinkTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.scratch.clear();
        self.scratch.resize(len, 0);
        let r = f(self.scratch);
        self.link.send(self.now, self.scratch);
        r
    }
}

/// A smoltcp interface (`Medium::Ip`) with one TCP socket.
pub struct SmolHost {
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    scratch: Vec<u8>,
    /// Whether TIME-WAIT counts as done (else only CLOSED does).
    pub time_wait_ok: bool,
}

impl SmolHost {
    fn new(local: SocketAddr, seed: u64, buffer: usize) -> SmolHost {
        let mut config = smoltcp::iface::Config::new(HardwareAddress::Ip);
        config.random_seed = seed;
        let mut scratch = Vec::new();
        // `Interface::new` only reads the device's capabilities.
        let (mut rx, mut tx) = (Link::new(Default::default(), 0), Link::new(Default::default(), 0));
        let mut device = LinkDevice { rx: &mut rx, tx: &mut tx, scratch: &mut scratch };
        let mut iface = Interface::new(config, &mut device, smol_instant(Instant::ZERO));
        iface.update_ip_addrs(|addrs| addrs.push(IpCidr::new(IpAddress::Ipv4(ipv4(local)), 24)).expect("room"));
        let socket = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; buffer]), tcp::SocketBuffer::new(vec![0; buffer]));
        let mut sockets = SocketSet::new(Vec::new());
        let handle = sockets.add(socket);
        SmolHost { iface, sockets, handle, scratch, time_wait_ok: true }
    }

    /// Return a host whose socket connects from `local` to `remote`, with buffers of
    /// [`SMOL_BUFFER`] bytes.
    pub fn client(local: SocketAddr, remote: SocketAddr, seed: u64) -> SmolHost {
        SmolHost::client_with_buffers(local, remote, seed, SMOL_BUFFER)
    }

    /// Return a host whose socket connects from `local` to `remote`, with send and receive
    /// buffers of `buffer` bytes.
    pub fn client_with_buffers(local: SocketAddr, remote: SocketAddr, seed: u64, buffer: usize) -> SmolHost {
        let mut host = SmolHost::new(local, seed, buffer);
        let socket = host.sockets.get_mut::<tcp::Socket>(host.handle);
        socket
            .connect(host.iface.context(), (IpAddress::Ipv4(ipv4(remote)), remote.port()), local.port())
            .expect("smoltcp connect");
        host
    }

    /// Return a host whose socket listens on `local`, with buffers of [`SMOL_BUFFER`] bytes.
    pub fn server(local: SocketAddr, seed: u64) -> SmolHost {
        SmolHost::server_with_buffers(local, seed, SMOL_BUFFER)
    }

    /// Return a host whose socket listens on `local`, with send and receive buffers of
    /// `buffer` bytes.
    pub fn server_with_buffers(local: SocketAddr, seed: u64, buffer: usize) -> SmolHost {
        let mut host = SmolHost::new(local, seed, buffer);
        host.socket().listen(local.port()).expect("smoltcp listen");
        host
    }

    /// Return the socket.
    pub fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }

    /// Return the socket's state.
    pub fn state(&self) -> tcp::State {
        self.sockets.get::<tcp::Socket>(self.handle).state()
    }
}

impl Host for SmolHost {
    fn name(&self) -> &'static str {
        "smoltcp"
    }

    fn poll(&mut self, now: Instant, rx: &mut Link, tx: &mut Link) {
        let mut device = LinkDevice { rx, tx, scratch: &mut self.scratch };
        self.iface.poll(smol_instant(now), &mut device, &mut self.sockets);
    }

    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        self.iface.poll_at(smol_instant(now), &self.sockets).map(our_instant)
    }

    fn send(&mut self, data: &[u8]) -> Result<usize, String> {
        let state = self.state();
        self.socket().send_slice(data).map_err(|e| format!("smoltcp: send in {state}: {e}"))
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Recv, String> {
        let state = self.state();
        match self.socket().recv_slice(buf) {
            Ok(0) => Ok(Recv::WouldBlock),
            Ok(n) => Ok(Recv::Data(n)),
            Err(tcp::RecvError::Finished) => Ok(Recv::Eof),
            Err(tcp::RecvError::InvalidState) if !self.is_synchronized() => Ok(Recv::WouldBlock),
            Err(e) => Err(format!("smoltcp: recv in {state}: {e}")),
        }
    }

    fn close(&mut self, _now: Instant) {
        self.socket().close();
    }

    fn is_synchronized(&self) -> bool {
        !matches!(self.state(), tcp::State::Closed | tcp::State::Listen | tcp::State::SynSent | tcp::State::SynReceived)
    }

    fn is_done(&self) -> bool {
        match self.state() {
            tcp::State::Closed => true,
            tcp::State::TimeWait => self.time_wait_ok,
            _ => false,
        }
    }

    fn fault(&self) -> Option<&str> {
        // Resets and bad packets show up on our side (`OurHost`) or as a failed `recv`.
        None
    }

    fn describe(&self) -> String {
        let socket = self.sockets.get::<tcp::Socket>(self.handle);
        format!(
            "smoltcp {}: send queue {}, recv queue {}, local {:?}, remote {:?}",
            socket.state(),
            socket.send_queue(),
            socket.recv_queue(),
            socket.local_endpoint(),
            socket.remote_endpoint()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Applications
// ---------------------------------------------------------------------------------------------

/// When an [`App`] closes its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseWhen {
    /// Once its data is queued and everything it expects has arrived.
    Done,
    /// Once the peer closed (and any echo is queued).
    PeerClosed,
}

/// One end's application: sends `data`, checks what arrives against `expect`, optionally
/// echoes it, and closes; it starts once its connection is synchronized.
pub struct App {
    /// Bytes to send.
    pub data: Vec<u8>,
    /// Bytes of `data` queued.
    pub sent: usize,
    /// Bytes the peer will send, checked as they arrive.
    pub expect: Vec<u8>,
    /// Bytes read.
    pub received: usize,
    /// Send back everything read.
    pub echo: bool,
    /// Bytes echoed (queued).
    pub echoed: usize,
    echo_buf: Vec<u8>,
    echo_at: usize,
    /// When to close.
    pub close: CloseWhen,
    /// Whether `close` was called.
    pub closed: bool,
    /// Whether `recv` reported the end of the stream.
    pub eof: bool,
    started: bool,
    scratch: Vec<u8>,
}

impl App {
    /// Return an application that sends `data`, expects `expect`, and closes at `close`.
    pub fn new(data: Vec<u8>, expect: Vec<u8>, close: CloseWhen) -> App {
        App {
            data,
            sent: 0,
            expect,
            received: 0,
            echo: false,
            echoed: 0,
            echo_buf: Vec::new(),
            echo_at: 0,
            close,
            closed: false,
            eof: false,
            started: false,
            scratch: vec![0; APP_CHUNK],
        }
    }

    /// Return an echo server for a client that sends `expect`; it closes when the client has.
    pub fn echo(expect: Vec<u8>) -> App {
        App { echo: true, ..App::new(Vec::new(), expect, CloseWhen::PeerClosed) }
    }

    /// Return whether everything was sent, read (end of stream included) and closed.
    pub fn is_done(&self) -> bool {
        self.sent == self.data.len() && self.received == self.expect.len() && self.eof && self.closed
    }

    fn echo_pending(&self) -> bool {
        self.echo_at < self.echo_buf.len()
    }

    /// Do what can be done now; return whether anything was.
    fn run(&mut self, host: &mut dyn Host, now: Instant) -> Result<bool, String> {
        if !self.started {
            if !host.is_synchronized() {
                return Ok(false);
            }
            self.started = true;
        }
        let mut progress = false;
        while self.sent < self.data.len() && !self.closed {
            let end = self.data.len().min(self.sent + APP_CHUNK);
            match host.send(&self.data[self.sent..end])? {
                0 => break,
                n => {
                    self.sent += n;
                    progress = true;
                }
            }
        }
        loop {
            if self.echo_pending() {
                match host.send(&self.echo_buf[self.echo_at..])? {
                    0 => break,
                    n => {
                        self.echo_at += n;
                        self.echoed += n;
                        progress = true;
                        continue;
                    }
                }
            }
            if self.eof {
                break;
            }
            match host.recv(&mut self.scratch)? {
                Recv::WouldBlock => break,
                Recv::Eof => {
                    progress = true;
                    self.eof = true;
                    if self.received != self.expect.len() {
                        return Err(format!(
                            "{}: end of stream after {} of {} bytes",
                            host.name(),
                            self.received,
                            self.expect.len()
                        ));
                    }
                }
                Recv::Data(n) => {
                    progress = true;
                    let got = &self.scratch[..n];
                    let want = self.expect.get(self.received..self.received + n).ok_or_else(|| {
                        format!("{}: read {} bytes, more than the {} expected", host.name(), self.received + n, {
                            self.expect.len()
                        })
                    })?;
                    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
                        return Err(format!(
                            "{}: byte {} of the stream is {:#04x}, the peer sent {:#04x}",
                            host.name(),
                            self.received + i,
                            got[i],
                            want[i]
                        ));
                    }
                    self.received += n;
                    if self.echo {
                        self.echo_buf.clear();
                        self.echo_buf.extend_from_slice(got);
                        self.echo_at = 0;
                    }
                }
            }
        }
        let ready = match self.close {
            CloseWhen::Done => self.sent == self.data.len() && self.received == self.expect.len(),
            CloseWhen::PeerClosed => self.eof,
        };
        if ready && !self.closed && !self.echo_pending() && self.sent == self.data.len() {
            log::trace!("{now} {} closes", host.name());
            host.close(now);
            self.closed = true;
            progress = true;
        }
        Ok(progress)
    }
}

impl fmt::Display for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sent {}/{}", self.sent, self.data.len())?;
        if self.echo {
            write!(f, ", echoed {}", self.echoed)?;
        }
        write!(f, ", received {}/{}", self.received, self.expect.len())?;
        if self.eof {
            f.write_str(", eof")?;
        }
        if self.closed {
            f.write_str(", closed")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Net
// ---------------------------------------------------------------------------------------------

/// Two hosts, a link each way, an application on each, one virtual clock.
pub struct Net<C: Host, S: Host> {
    /// The active opener.
    pub client: C,
    /// The passive opener.
    pub server: S,
    /// The client's application.
    pub client_app: App,
    /// The server's application.
    pub server_app: App,
    /// Client to server.
    pub to_server: Link,
    /// Server to client.
    pub to_client: Link,
    /// The virtual time.
    pub now: Instant,
}

impl<C: Host, S: Host> Net<C, S> {
    /// Return a network at time zero.
    pub fn new(client: C, server: S, to_server: Link, to_client: Link, client_app: App, server_app: App) -> Self {
        Net { client, server, client_app, server_app, to_server, to_client, now: Instant::ZERO }
    }

    /// Return whether both applications and both connections are done.
    pub fn is_done(&self) -> bool {
        self.client_app.is_done() && self.server_app.is_done() && self.client.is_done() && self.server.is_done()
    }

    fn activity(&self) -> (u64, u64, usize, usize) {
        let (a, b) = (self.to_server.stats(), self.to_client.stats());
        let apps = |app: &App| app.sent + app.received + app.echoed + usize::from(app.closed) + usize::from(app.eof);
        (a.sent + b.sent, a.delivered + b.delivered, apps(&self.client_app), apps(&self.server_app))
    }

    /// Do everything due now until nothing more is.
    fn settle(&mut self) -> Result<(), String> {
        for _ in 0..MAX_ROUNDS {
            let before = self.activity();
            self.client.poll(self.now, &mut self.to_client, &mut self.to_server);
            self.server.poll(self.now, &mut self.to_server, &mut self.to_client);
            self.client_app.run(&mut self.client, self.now).map_err(|e| format!("client app: {e}"))?;
            self.server_app.run(&mut self.server, self.now).map_err(|e| format!("server app: {e}"))?;
            if let Some(fault) = self.client.fault().or(self.server.fault()) {
                return Err(fault.to_string());
            }
            if self.activity() == before {
                return Ok(());
            }
        }
        Err("livelock: work at one instant kept producing more work".into())
    }

    /// Run until [`is_done`](Net::is_done) or `deadline` (virtual time); on failure, return a
    /// report of both ends.
    pub fn run(&mut self, deadline: Instant) -> Result<(), String> {
        self.run_until(Self::is_done, deadline)
    }

    /// Run until `done` holds or `deadline` (virtual time). With nothing scheduled, the clock
    /// jumps to `deadline`: nothing can happen before it.
    pub fn run_until(&mut self, mut done: impl FnMut(&Self) -> bool, deadline: Instant) -> Result<(), String> {
        let mut stuck = 0;
        loop {
            if let Err(e) = self.settle() {
                return Err(self.report(&e));
            }
            if done(self) {
                return Ok(());
            }
            let next = [
                self.to_server.next_delivery(),
                self.to_client.next_delivery(),
                self.client.poll_at(self.now),
                self.server.poll_at(self.now),
            ]
            .into_iter()
            .flatten()
            .min();
            if self.now >= deadline {
                let why = if next.is_some() { "deadline passed" } else { "stalled with nothing scheduled" };
                return Err(self.report(why));
            }
            match next {
                Some(t) if t <= self.now => {
                    stuck += 1;
                    if stuck > MAX_STUCK {
                        return Err(self.report("livelock: a poll deadline stays due without any work"));
                    }
                }
                Some(t) => {
                    stuck = 0;
                    self.now = t.min(deadline);
                }
                None => self.now = deadline,
            }
        }
    }

    /// Describe both ends, their applications and the links.
    pub fn report(&self, why: &str) -> String {
        let (a, b) = (self.to_server.stats(), self.to_client.stats());
        format!(
            "{why} at {}\n  client {}: {}\n    app: {}\n  server {}: {}\n    app: {}\n  \
             client->server: {} sent, {} lost, {} delivered\n  server->client: {} sent, {} lost, {} delivered",
            self.now,
            self.client.name(),
            self.client.describe(),
            self.client_app,
            self.server.name(),
            self.server.describe(),
            self.server_app,
            a.sent,
            a.lost,
            a.delivered,
            b.sent,
            b.lost,
            b.delivered,
        )
    }
}
