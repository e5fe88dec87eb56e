//! The host, without a device: Ethernet frames in, Ethernet frames out.
//!
//! [`Interface::receive`] takes one frame and dispatches it (ARP, IPv4, ICMP echo, TCP to
//! a connection or a listener). Replies that do not belong to a connection (ARP replies,
//! echo replies, resets, SYN cookies) wait in a small queue; connections keep their own
//! output. [`Interface::transmit`] then writes everything due into a [`Device`], each TCP
//! segment straight into the device's frame buffer behind the Ethernet and IPv4 headers.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use bypass_tcp::{Buffers, Config as TcpConfig, Connection, Event, FourTuple, Instant, Segment, State};
use etherparse::{ArpOperation, EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv4HeaderSlice};

use std::fmt::Write as _;

use crate::arp::{self, ArpCache, ArpConfig};
use crate::capture::{Capture, Direction};
use crate::counters::{Counters, Drop};
use crate::device::Device;
use crate::ports::{EphemeralPorts, derive_key};
use crate::syncookie::{RecentOverflow, SynCookies};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const HEADERS: usize = ETH_LEN + IPV4_LEN;
const BROADCAST: [u8; 6] = [0xff; 6];

/// Host settings.
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of our subnet; other destinations go through `gateway`.
    pub prefix_len: u8,
    /// Next hop for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// Settings for every TCP connection (its `isn_secret` also keys, through keys derived
    /// from it, the SYN cookies and the ephemeral port choice).
    pub tcp: TcpConfig,
    /// ARP settings.
    pub arp: ArpConfig,
    /// Half-open connections (SYN-RECEIVED) per listener before SYN cookies take over.
    pub syn_queue: usize,
    /// How long after a listener last answered a SYN with a cookie it still checks the ACKs
    /// it gets as cookies (Linux: TCP_SYNCOOKIE_VALID, 2 minutes, the default). Outside this
    /// window an ACK to a listener is answered with RST unchecked, so blind forgery needs a
    /// recent SYN flood. Each listener keeps its own window: a flood against one port opens
    /// none on the others. The window runs from the latest cookie, and a cookie itself
    /// lives 64 to 128 s, so the default refuses only a handshake's ACK more than 120 s late.
    pub syn_cookie_valid: Duration,
    /// Established connections per listener waiting for `accept`.
    pub accept_backlog: usize,
    /// Most connections in the table.
    pub max_connections: usize,
    /// Ports for active opens, inclusive. Chosen per destination by RFC 6056 algorithm 4
    /// (double-hash): neither sequential across destinations nor predictable without the key.
    pub ephemeral_ports: (u16, u16),
    /// Buffers of finished connections kept for new ones, so opening a connection does not
    /// allocate (each is `tcp.send_buffer + tcp.recv_buffer` bytes: 512 KiB by default).
    pub buffer_pool: usize,
    /// Most connections the application has closed that are still finishing in the
    /// background (orphans: FIN-WAIT, CLOSING, LAST-ACK, TIME-WAIT). Past it, a closed
    /// connection is reset at once instead (Linux: `net.ipv4.tcp_max_orphans`, "too many
    /// orphaned sockets"), so peers that vanish cannot make the host hold unbounded state.
    pub max_orphans: usize,
    /// Most bytes of unacknowledged data the orphans may hold between them, counted when
    /// each is closed; a close that would go past it resets the connection instead (Linux
    /// resets orphans under memory pressure likewise, `tcp_out_of_resources`).
    pub max_orphan_memory: usize,
    /// The most bytes the receive windows of all connections may offer between them, so
    /// that what the peers may send at once fits what the device can hold until the stack
    /// reads it. Each connection that can receive may grow its window to an equal share
    /// (never below four full-sized segments); a window already offered is never taken
    /// back (RFC 9293 3.8.6.2.2), only its growth stops. `None` (the default) takes half the
    /// device's receive ring in full-sized segments ([`Device::rx_frames`](crate::Device::rx_frames)
    /// times the MSS, halved for the frames that are not full segments and for bursts that
    /// arrive while the stack is descheduled); a device without a fixed ring sets no limit.
    pub window_budget: Option<usize>,
    /// The most bytes the buffers of all connections may hold allocated before autotuning
    /// stops growing any (as Linux's `tcp_mem` pressure threshold); buffers already grown
    /// keep their size, and new connections still get `tcp.send_buffer + tcp.recv_buffer`.
    pub buffer_memory: usize,
}

impl StackConfig {
    /// Return defaults for address `ip`/`prefix_len`, with `secret` keying ISNs and SYN
    /// cookies (fill it from a random source).
    pub fn new(ip: Ipv4Addr, prefix_len: u8, secret: [u8; 16]) -> Self {
        StackConfig {
            ip,
            prefix_len,
            gateway: None,
            tcp: TcpConfig { isn_secret: secret, ..TcpConfig::default() },
            arp: ArpConfig::default(),
            syn_queue: 256,
            syn_cookie_valid: Duration::from_secs(120),
            accept_backlog: 1024,
            max_connections: 65536,
            ephemeral_ports: (49152, 65535),
            buffer_pool: 16,
            max_orphans: 16_384,
            max_orphan_memory: 64 << 20,
            window_budget: None,
            buffer_memory: 512 << 20,
        }
    }
}

/// Names a connection owned by the host; stale ids (of removed connections) are detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketId {
    index: u32,
    generation: u32,
}

/// Names a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u16);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A listener's child, not yet accepted.
    Listener(u16),
    /// Handed to the user (accepted or connected).
    User,
    /// The user let go (`close`, `abort`); removed once the connection is CLOSED.
    Released,
}

struct Sock {
    conn: Connection,
    /// The table key. Kept here because a connection back in LISTEN (RST in SYN-RECEIVED)
    /// no longer knows its remote address.
    tuple: FourTuple,
    owner: Owner,
    /// The MAC the peer's frames came from: used if ARP has no entry.
    peer_mac: Option<[u8; 6]>,
    dirty: bool,
    /// Counted among the orphans, holding this many bytes of their memory bound.
    orphan: Option<usize>,
    /// The connection's buffer capacity as last counted in `Interface::buffer_bytes`.
    capacity: usize,
    /// The receive window it offers, as last counted in `Interface::offered_bytes`.
    offered: u32,
}

struct Slot {
    generation: u32,
    sock: Option<Sock>,
}

struct Listener {
    half_open: usize,
    ready: VecDeque<SocketId>,
    /// When the SYN queue last overflowed (a cookie was sent): cookies are checked only
    /// within `StackConfig::syn_cookie_valid` of it.
    overflow: RecentOverflow,
}

/// Errors of `listen`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenError {
    /// Another listener has the port.
    #[error("port {0} is already in use by another listener; choose another port")]
    AddrInUse(u16),
    /// Port 0.
    #[error("port 0 is not a valid listening port; choose a port from 1 to 65535")]
    InvalidPort,
}

/// Errors of `connect`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConnectError {
    /// Every ephemeral port towards that destination is in use.
    #[error("no free local port towards {0}; close some connections or widen the ephemeral range")]
    NoFreePort(SocketAddrV4),
    /// The table is full.
    #[error("the connection table is full ({0} connections); close some first")]
    TableFull(usize),
    /// The requested local port is zero or already connected to that destination.
    #[error("local port {0} is zero or already connected to that destination; choose another")]
    PortInUse(u16),
    /// Port 0 or an unspecified address.
    #[error("cannot connect to {0}: give a real address and a non-zero port")]
    InvalidAddress(SocketAddrV4),
}

/// The host: address, ARP, listeners and connections; see the module docs.
pub struct Interface {
    config: StackConfig,
    mac: [u8; 6],
    mtu: usize,
    arp: ArpCache,
    cookies: SynCookies,
    slots: Vec<Slot>,
    free: Vec<u32>,
    table: HashMap<FourTuple, u32>,
    listeners: HashMap<u16, Listener>,
    dirty: Vec<u32>,
    /// Frames that belong to no connection, with their capture note.
    control: VecDeque<(Vec<u8>, String)>,
    spare: Vec<Vec<u8>>,
    capture: Option<Box<dyn Capture>>,
    /// What the frame being received meant (filled only while capturing).
    note: String,
    events: VecDeque<(SocketId, Event)>,
    /// Buffers of removed connections, zeroed, for the next ones (at most `buffer_pool`).
    buffers: Vec<Buffers>,
    counters: Counters,
    ports: EphemeralPorts,
    timer_due: Option<Instant>,
    /// Connections the application closed that are still finishing, and the bytes they
    /// were charged when closed (see `StackConfig::max_orphans`).
    orphans: usize,
    orphan_bytes: usize,
    /// `StackConfig::window_budget` as resolved for the device (`usize::MAX`: no limit).
    window_budget: usize,
    /// Bytes allocated to the buffers of the connections in the table.
    buffer_bytes: usize,
    /// The receive windows the connections offer, summed as each last ran.
    offered_bytes: usize,
}

impl Interface {
    /// Return a host with MAC `mac` and IP MTU `mtu`.
    pub fn new(config: StackConfig, mac: [u8; 6], mtu: usize) -> Self {
        let mut tcp = config.tcp.clone();
        // Our segments must fit the MTU with IPv4 and TCP headers.
        tcp.mss = tcp.mss.min((mtu - IPV4_LEN - 20) as u16);
        // One secret, separate keys: what one use reveals says nothing about another's.
        let cookies = SynCookies::new(derive_key(&tcp.isn_secret, b"bypass SYN cookie key"));
        let ports =
            EphemeralPorts::new(derive_key(&tcp.isn_secret, b"bypass RFC 6056 port key"), config.ephemeral_ports);
        Interface {
            arp: ArpCache::new(config.arp),
            config: StackConfig { tcp, ..config },
            mac,
            mtu,
            cookies,
            slots: Vec::new(),
            free: Vec::new(),
            table: HashMap::new(),
            listeners: HashMap::new(),
            dirty: Vec::new(),
            control: VecDeque::new(),
            spare: Vec::new(),
            capture: None,
            note: String::new(),
            events: VecDeque::new(),
            buffers: Vec::new(),
            counters: Counters::default(),
            ports,
            timer_due: None,
            orphans: 0,
            orphan_bytes: 0,
            window_budget: usize::MAX,
            buffer_bytes: 0,
            offered_bytes: 0,
        }
    }

    /// Resolve `StackConfig::window_budget` for a device that holds `rx_frames` received
    /// frames (`None`: no fixed ring). [`Stack::new`](crate::Stack::new) calls this.
    pub fn set_device_rx_frames(&mut self, rx_frames: Option<usize>) {
        let mss = usize::from(self.config.tcp.mss);
        self.window_budget = match (self.config.window_budget, rx_frames) {
            (Some(bytes), _) => bytes,
            (None, Some(frames)) => frames * mss / 2,
            (None, None) => usize::MAX,
        };
    }

    /// Return the bytes of receive window all connections may offer between them
    /// (`usize::MAX`: no limit).
    pub fn window_budget(&self) -> usize {
        self.window_budget
    }

    /// Return the bytes allocated to the buffers of the connections in the table.
    pub fn buffer_memory(&self) -> usize {
        self.buffer_bytes
    }

    /// Return the receive windows the connections offer between them, as each last ran.
    pub fn offered_windows(&self) -> usize {
        self.offered_bytes
    }

    /// The most window a connection that offers `own` bytes may offer now: what is left of
    /// the budget, up to an equal share among the connections that can still be sent data
    /// (all but the orphans, whose data would be answered with RST), and never below two
    /// full-sized segments, so that every connection moves.
    fn window_cap(&self, own: u32) -> u32 {
        if self.window_budget == usize::MAX {
            return u32::MAX;
        }
        let receivers = self.table.len().saturating_sub(self.orphans).max(1);
        let share = self.window_budget / receivers;
        let left = own as usize + self.window_budget.saturating_sub(self.offered_bytes);
        let floor = 2 * usize::from(self.config.tcp.mss);
        share.min(left).max(floor).min(u32::MAX as usize) as u32
    }

    /// Count the window connection `index` offers now in the sum of offered windows; return
    /// it (`None`: no such connection).
    fn count_window(&mut self, index: u32) -> Option<u32> {
        let sock = self.slots[index as usize].sock.as_mut()?;
        let offered = sock.conn.receive_window();
        self.offered_bytes = self.offered_bytes - sock.offered as usize + offered as usize;
        sock.offered = offered;
        Some(offered)
    }

    /// Give connection `index` its window cap and growth permission, and count its buffers.
    fn apply_budgets(&mut self, index: u32) {
        let Some(own) = self.count_window(index) else { return };
        let cap = self.window_cap(own);
        let Some(sock) = self.slots[index as usize].sock.as_mut() else { return };
        let capacity = sock.conn.buffer_capacity();
        self.buffer_bytes = self.buffer_bytes - sock.capacity + capacity;
        sock.capacity = capacity;
        sock.conn.set_window_cap(cap);
        sock.conn.set_growth_allowed(self.buffer_bytes < self.config.buffer_memory);
    }

    /// Return the settings in force (the TCP MSS clamped to the MTU).
    pub fn config(&self) -> &StackConfig {
        &self.config
    }

    /// Report every frame received and sent, annotated, to `capture` (`None` stops).
    pub fn set_capture(&mut self, capture: Option<Box<dyn Capture>>) {
        self.capture = capture;
    }

    /// Push the capture's buffered frames out (the host is about to idle).
    pub fn flush_capture(&mut self) {
        if let Some(capture) = self.capture.as_mut() {
            capture.flush();
        }
    }

    /// Return whether a capture is installed.
    pub fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Return the counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Return the counters for updating (the socket layer counts its copies).
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Return how many connections are in the table.
    pub fn connection_count(&self) -> usize {
        self.table.len()
    }

    /// Return how many connections the application closed are still finishing in the
    /// background (see [`StackConfig::max_orphans`]).
    pub fn orphan_count(&self) -> usize {
        self.orphans
    }

    /// Return how many sets of connection buffers wait in the pool for new connections.
    pub fn pooled_buffers(&self) -> usize {
        self.buffers.len()
    }

    // ---------------------------------------------------------------------------------
    // The user side.
    // ---------------------------------------------------------------------------------

    /// Listen on `port`.
    pub fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError> {
        if port == 0 {
            return Err(ListenError::InvalidPort);
        }
        if self.listeners.contains_key(&port) {
            return Err(ListenError::AddrInUse(port));
        }
        self.listeners
            .insert(port, Listener { half_open: 0, ready: VecDeque::new(), overflow: RecentOverflow::default() });
        Ok(ListenerId(port))
    }

    /// Stop listening; connections not yet accepted are reset.
    pub fn unlisten(&mut self, now: Instant, listener: ListenerId) {
        if let Some(l) = self.listeners.remove(&listener.0) {
            for id in l.ready {
                self.abort(now, id);
                self.release(id);
            }
        }
        let orphans: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.sock.as_ref().is_some_and(|k| k.owner == Owner::Listener(listener.0)))
            .map(|(i, _)| i as u32)
            .collect();
        for index in orphans {
            if let Some(sock) = self.slots[index as usize].sock.as_mut() {
                sock.conn.abort(now);
                sock.owner = Owner::Released;
                self.mark_dirty(index);
            }
        }
    }

    /// Return the next established connection waiting on `listener`.
    pub fn accept(&mut self, listener: ListenerId) -> Option<SocketId> {
        let l = self.listeners.get_mut(&listener.0)?;
        while let Some(id) = l.ready.pop_front() {
            if let Some(sock) = self.slots.get_mut(id.index as usize).and_then(|s| s.sock.as_mut()) {
                sock.owner = Owner::User;
                self.counters.connections_accepted += 1;
                return Some(id);
            }
        }
        None
    }

    /// Open a connection to `remote` from an ephemeral port.
    pub fn connect(&mut self, now: Instant, remote: SocketAddrV4) -> Result<SocketId, ConnectError> {
        self.connect_from(now, None, remote)
    }

    /// Open a connection to `remote` from `local_port`, or an ephemeral port if `None`.
    pub fn connect_from(
        &mut self,
        now: Instant,
        local_port: Option<u16>,
        remote: SocketAddrV4,
    ) -> Result<SocketId, ConnectError> {
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(ConnectError::InvalidAddress(remote));
        }
        if self.table.len() >= self.config.max_connections {
            return Err(ConnectError::TableFull(self.config.max_connections));
        }
        if let Some(port) = local_port {
            let tuple =
                FourTuple { local: SocketAddr::new(IpAddr::V4(self.config.ip), port), remote: SocketAddr::V4(remote) };
            if port == 0 || self.table.contains_key(&tuple) {
                return Err(ConnectError::PortInUse(port));
            }
            let buffers = self.take_buffers();
            let conn = Connection::connect_with(&self.config.tcp, tuple, now, buffers);
            self.counters.connections_opened += 1;
            return Ok(self.insert(tuple, conn, Owner::User, None));
        }
        let ip = self.config.ip;
        let (table, listeners) = (&self.table, &self.listeners);
        let tuple = |port| FourTuple { local: SocketAddr::new(IpAddr::V4(ip), port), remote: SocketAddr::V4(remote) };
        // RFC 6056 section 3.3.4: a port is suitable if no connection uses the 4-tuple
        // (several destinations may share a local port) and no listener holds it.
        let suitable = |port| port != 0 && !table.contains_key(&tuple(port)) && !listeners.contains_key(&port);
        let Some(port) = self.ports.select(ip, remote, suitable) else {
            return Err(ConnectError::NoFreePort(remote));
        };
        let tuple = tuple(port);
        let buffers = self.take_buffers();
        let conn = Connection::connect_with(&self.config.tcp, tuple, now, buffers);
        self.counters.connections_opened += 1;
        Ok(self.insert(tuple, conn, Owner::User, None))
    }

    /// Return the connection behind `id`, if it still exists.
    pub fn connection(&self, id: SocketId) -> Option<&Connection> {
        self.sock(id).map(|s| &s.conn)
    }

    /// Return the connection behind `id` for a user call; it is then polled for output.
    pub fn connection_mut(&mut self, id: SocketId) -> Option<&mut Connection> {
        self.sock(id)?;
        self.mark_dirty(id.index);
        self.slots[id.index as usize].sock.as_mut().map(|s| &mut s.conn)
    }

    /// Close `id` and give up the handle, as close(2) does: FIN after the queued data, and
    /// the connection finishes in the background (an orphan). It is reset instead when data
    /// it received is still unread or arrives later ([`Connection::release`]), and when the
    /// orphans are at their bound in number or memory ([`StackConfig::max_orphans`]).
    pub fn close(&mut self, now: Instant, id: SocketId) {
        let (orphans, orphan_bytes) = (self.orphans, self.orphan_bytes);
        let (max_orphans, max_memory) = (self.config.max_orphans, self.config.max_orphan_memory);
        let Some(sock) = self.sock_mut(id) else { return };
        if sock.owner != Owner::User {
            return;
        }
        let queued = sock.conn.send_queued();
        let synchronized = !matches!(sock.conn.state(), State::Closed | State::Listen | State::SynSent);
        if synchronized && (orphans >= max_orphans || orphan_bytes + queued > max_memory) {
            log::debug!("{}: too many orphans ({orphans}, {orphan_bytes} bytes): reset on close", sock.tuple);
            sock.conn.abort(now);
            self.counters.orphans_reset += 1;
        } else {
            sock.conn.release(now);
            if sock.conn.state() != State::Closed {
                sock.orphan = Some(queued);
                self.orphans += 1;
                self.orphan_bytes += queued;
            }
        }
        self.release(id);
    }

    /// Reset `id` (RST) and give up the handle.
    pub fn abort(&mut self, now: Instant, id: SocketId) {
        if let Some(conn) = self.connection_mut(id) {
            conn.abort(now);
        }
        self.release(id);
    }

    /// Reset every connection (RST where synchronized) and release them all: for shutdown.
    pub fn abort_all(&mut self, now: Instant) {
        for index in 0..self.slots.len() as u32 {
            if let Some(sock) = self.slots[index as usize].sock.as_mut() {
                sock.conn.abort(now);
                sock.owner = Owner::Released;
                self.mark_dirty(index);
            }
        }
    }

    fn release(&mut self, id: SocketId) {
        if let Some(sock) = self.sock_mut(id) {
            sock.owner = Owner::Released;
            self.mark_dirty(id.index);
        }
    }

    /// Return the next event for the user.
    pub fn poll_event(&mut self) -> Option<(SocketId, Event)> {
        self.events.pop_front()
    }

    // ---------------------------------------------------------------------------------
    // Receiving.
    // ---------------------------------------------------------------------------------

    /// Process one received Ethernet frame. Never panics on any bytes.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.note.clear();
        self.receive_frame(now, frame);
        if let Some(capture) = self.capture.as_mut() {
            capture.frame(now, Direction::In, frame, &self.note);
        }
    }

    fn receive_frame(&mut self, now: Instant, frame: &[u8]) {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += frame.len() as u64;
        let Ok((eth, payload)) = Ethernet2Header::from_slice(frame) else {
            return self.drop(Drop::Truncated, "frame shorter than an Ethernet header");
        };
        if eth.destination != self.mac && eth.destination != BROADCAST {
            return self.drop(Drop::WrongMac, "not our MAC");
        }
        match eth.ether_type {
            EtherType::ARP => self.receive_arp(now, payload),
            EtherType::IPV4 => self.receive_ipv4(now, eth.source, payload),
            _ => self.drop(Drop::UnknownEthertype, "ethertype"),
        }
    }

    fn drop(&mut self, reason: Drop, what: &str) {
        self.counters.drop(reason);
        log::debug!("drop {}: {what}", reason.name());
        if self.capture.is_some() {
            let _ = write!(self.note, "dropped: {} ({what})", reason.name());
        }
    }

    /// Queue a frame that belongs to no connection, noting `what` when capturing.
    fn queue_control(&mut self, frame: Vec<u8>, what: impl FnOnce() -> String) {
        let note = if self.capture.is_some() { what() } else { String::new() };
        self.control.push_back((frame, note));
    }

    fn receive_arp(&mut self, now: Instant, payload: &[u8]) {
        let Some(msg) = arp::parse(payload) else {
            return self.drop(Drop::BadArp, "malformed ARP");
        };
        if msg.sender_ip.is_unspecified() || msg.sender_mac == BROADCAST {
            // Probes (RFC 5227) and nonsense teach us nothing.
            if msg.target_ip != self.config.ip {
                return self.drop(Drop::ArpNotForUs, "probe");
            }
        } else if msg.target_ip == self.config.ip {
            // RFC 826: we are the target, so add the sender (merge or insert).
            let released = self.arp.learn(msg.sender_ip, msg.sender_mac, now);
            let ip = msg.sender_ip;
            for frame in released {
                self.queue_control(frame, || format!("held for ARP resolution of {ip}; now sent"));
            }
            if self.capture.is_some() {
                let op = if msg.operation == ArpOperation::REQUEST { "request" } else { "reply" };
                let _ = write!(self.note, "ARP {op} from {} ({}): learned", msg.sender_ip, mac_string(msg.sender_mac));
            }
        } else {
            // Not for us: only refresh an entry we already have.
            self.arp.refresh(msg.sender_ip, msg.sender_mac, now);
            return self.drop(Drop::ArpNotForUs, "ARP for another address");
        }
        if msg.operation == ArpOperation::REQUEST && msg.target_ip == self.config.ip && !msg.sender_ip.is_unspecified()
        {
            let mut buf = self.buffer();
            buf.resize(arp::ARP_FRAME_LEN, 0);
            arp::write_frame(&mut buf, ArpOperation::REPLY, self.mac, self.config.ip, msg.sender_mac, msg.sender_ip);
            let (us, them) = (self.config.ip, msg.sender_ip);
            self.queue_control(buf, || format!("ARP reply to {them}: {us} is at our MAC"));
            self.counters.arp_replies += 1;
        }
    }

    fn receive_ipv4(&mut self, now: Instant, src_mac: [u8; 6], payload: &[u8]) {
        let Ok(ip) = Ipv4HeaderSlice::from_slice(payload) else {
            return self.drop(Drop::BadIpv4Header, "IPv4 header");
        };
        let header = ip.slice();
        if etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement() != 0 {
            return self.drop(Drop::BadIpv4Checksum, "IPv4 header checksum");
        }
        if ip.more_fragments() || ip.fragments_offset().value() != 0 {
            return self.drop(Drop::Ipv4Fragment, "IPv4 fragment");
        }
        if ip.destination_addr() != self.config.ip {
            return self.drop(Drop::WrongIpAddress, "IPv4 for another host");
        }
        let src = ip.source_addr();
        if let Some(why) = self.martian(src) {
            // RFC 1122 3.2.1.3: a host MUST silently discard a datagram from a source
            // address that is invalid by the rules of that section.
            self.counters.drop(Drop::MartianSource);
            let proto = ip.protocol().0;
            log::debug!(
                "drop {}: {src} -> {} (IP protocol {proto}): source is {why}",
                Drop::MartianSource.name(),
                self.config.ip
            );
            if self.capture.is_some() {
                let _ = write!(self.note, "dropped: {} (source {src} is {why})", Drop::MartianSource.name());
            }
            return;
        }
        let total = ip.total_len() as usize;
        if total < header.len() || total > payload.len() {
            return self.drop(Drop::BadIpv4Header, "IPv4 total length");
        }
        let body = &payload[header.len()..total];
        match ip.protocol() {
            IpNumber::TCP => self.receive_tcp(now, src_mac, src, body),
            IpNumber::ICMP => self.receive_icmp(src_mac, src, body),
            _ => self.drop(Drop::UnknownProtocol, "IP protocol"),
        }
    }

    /// Return why no datagram may come from `src`, if none may: RFC 1122 3.2.1.3 allows
    /// no broadcast or multicast source ("the IP source address ... MUST be one of its own
    /// IP addresses (but not a broadcast or multicast address)"), {0, 0} and {0, host}
    /// only while a host learns its address (BOOTP/DHCP, which we do not serve), and no
    /// 127/8 outside a host. Our own address from the wire is spoofed or a loop (Linux's
    /// `fib_validate_source` treats a local source as martian unless `accept_local`).
    fn martian(&self, src: Ipv4Addr) -> Option<&'static str> {
        let prefix = self.config.prefix_len.min(32);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        // A /31 has no broadcast address (RFC 3021), and a /32 has no other host.
        let directed = (prefix <= 30).then(|| Ipv4Addr::from((u32::from(self.config.ip) & mask) | !mask));
        if src == self.config.ip {
            Some("our own address")
        } else if src.is_broadcast() {
            Some("the limited broadcast address (RFC 1122 3.2.1.3 (c))")
        } else if directed == Some(src) {
            Some("our subnet's directed broadcast address (RFC 1122 3.2.1.3 (d), (e))")
        } else if src.octets()[0] == 0 {
            Some("in this network, 0.0.0.0/8 (RFC 1122 3.2.1.3 (a), (b))")
        } else if src.is_loopback() {
            Some("loopback, 127.0.0.0/8 (RFC 1122 3.2.1.3 (g))")
        } else if src.is_multicast() {
            Some("multicast, 224.0.0.0/4")
        } else {
            None
        }
    }

    /// ICMP echo request: answer with an echo reply (RFC 792).
    fn receive_icmp(&mut self, src_mac: [u8; 6], src: Ipv4Addr, body: &[u8]) {
        if body.len() < 8 || etherparse::checksum::Sum16BitWords::new().add_slice(body).ones_complement() != 0 {
            return self.drop(Drop::BadIcmp, "ICMP checksum or length");
        }
        if body[0] != 8 || body[1] != 0 {
            return self.drop(Drop::IcmpIgnored, "not an echo request");
        }
        let len = HEADERS + body.len();
        if len > self.mtu + ETH_LEN {
            return self.drop(Drop::BadIcmp, "echo request larger than our MTU");
        }
        let mut buf = self.buffer();
        buf.resize(len, 0);
        buf[HEADERS..].copy_from_slice(body);
        buf[HEADERS] = 0; // echo reply
        buf[HEADERS + 2..HEADERS + 4].fill(0);
        // The sum is of native-endian words, so it is stored native-endian (RFC 1071 2(B)).
        let sum = etherparse::checksum::Sum16BitWords::new().add_slice(&buf[HEADERS..]).ones_complement();
        buf[HEADERS + 2..HEADERS + 4].copy_from_slice(&sum.to_ne_bytes());
        self.write_headers(&mut buf, src_mac, src, IpNumber::ICMP, body.len());
        self.queue_control(buf, || format!("ICMP echo reply to {src}"));
        if self.capture.is_some() {
            let _ = write!(self.note, "ICMP echo request from {src}: answered");
        }
        self.counters.icmp_echo_replies += 1;
    }

    fn receive_tcp(&mut self, now: Instant, src_mac: [u8; 6], src: Ipv4Addr, body: &[u8]) {
        let seg = match Segment::parse(body, IpAddr::V4(src), IpAddr::V4(self.config.ip)) {
            Ok(seg) => seg,
            Err(e) => {
                self.counters.drop(Drop::BadTcp);
                log::debug!("drop bad_tcp from {src}: {e}");
                return;
            }
        };
        self.counters.tcp_segments_in += 1;
        self.counters.bytes_copied += seg.payload.len() as u64;
        let tuple = FourTuple {
            local: SocketAddr::new(IpAddr::V4(self.config.ip), seg.dst_port),
            remote: SocketAddr::new(IpAddr::V4(src), seg.src_port),
        };
        if let Some(&index) = self.table.get(&tuple) {
            if self.reopen_time_wait(now, index, &seg) {
                return;
            }
            let sock = self.slots[index as usize].sock.as_mut().expect("table points at live slots");
            let before = sock.conn.state();
            let outcome = sock.conn.handle_segment(now, &seg);
            sock.peer_mac = Some(src_mac);
            if self.capture.is_some() {
                note_segment(&mut self.note, &seg, &sock.conn, Direction::In, before);
                if let Some(reason) = outcome.drop_reason() {
                    let _ = write!(self.note, " | dropped by TCP: {reason:?}");
                }
            }
            self.mark_dirty(index);
            return;
        }
        if self.listeners.contains_key(&seg.dst_port) {
            return self.receive_for_listener(now, src_mac, tuple, &seg);
        }
        self.reply_reset(src_mac, src, &seg, Drop::NoListener);
    }

    /// Let a SYN that finds a closed connection in TIME-WAIT open a new one through the port's
    /// listener (RFC 9293 3.10.7.4, RFC 6191, RFC 1122 4.2.2.13; see
    /// [`Connection::time_wait_accepts`]); return whether it did.
    ///
    /// Only a connection the application has let go of is reused: one it still holds keeps
    /// its handle's meaning, and the SYN is only acknowledged, as RFC 9293 also allows.
    fn reopen_time_wait(&mut self, now: Instant, index: u32, seg: &Segment<'_>) -> bool {
        let sock = self.slots[index as usize].sock.as_ref().expect("table points at live slots");
        if sock.owner != Owner::Released || !sock.conn.time_wait_accepts(seg) {
            return false;
        }
        let Some(listener) = self.listeners.get(&seg.dst_port) else { return false };
        if listener.ready.len() >= self.config.accept_backlog || listener.half_open >= self.config.syn_queue {
            return false;
        }
        let sock = self.slots[index as usize].sock.as_mut().expect("live");
        let before = sock.conn.state();
        sock.conn.reopen(now, seg);
        if sock.conn.state() != State::SynReceived {
            return false;
        }
        sock.owner = Owner::Listener(seg.dst_port);
        if let Some(bytes) = sock.orphan.take() {
            self.orphans -= 1;
            self.orphan_bytes -= bytes;
        }
        if self.capture.is_some() {
            let _ = write!(self.note, "new SYN in TIME-WAIT: a new connection (RFC 6191) | ");
            note_segment(&mut self.note, seg, &sock.conn, Direction::In, before);
        }
        self.listeners.get_mut(&seg.dst_port).expect("listener").half_open += 1;
        self.counters.time_wait_reopened += 1;
        self.mark_dirty(index);
        true
    }

    /// A segment for a listening port with no connection (RFC 9293 3.10.7.2, RFC 4987).
    fn receive_for_listener(&mut self, now: Instant, src_mac: [u8; 6], tuple: FourTuple, seg: &Segment<'_>) {
        let port = seg.dst_port;
        let src = match tuple.remote.ip() {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => return,
        };
        let flags = seg.flags;
        if flags.rst() {
            return;
        }
        let listener = self.listeners.get(&port).expect("checked by the caller");
        if flags.syn() && !flags.ack() {
            if listener.ready.len() >= self.config.accept_backlog {
                // Like Linux: drop, the client's retransmission tries again later.
                return self.drop(Drop::BacklogFull, "accept backlog full");
            }
            if self.table.len() >= self.config.max_connections {
                return self.drop(Drop::TableFull, "connection table full");
            }
            if listener.half_open >= self.config.syn_queue {
                // The overflow opens (or extends) the window in which ACKs are checked as
                // cookies (Linux: `tcp_synq_overflow`).
                self.listeners.get_mut(&port).expect("listener").overflow.record(now);
                let iss = self.cookies.make(&tuple, seg.seq, seg.options.mss, now);
                let reply = Connection::syn_cookie_reply(&self.config.tcp, &tuple, seg, iss, now);
                self.queue_segment(src_mac, src, &reply, || "SYN-ACK carrying a SYN cookie (RFC 4987)".into());
                if self.capture.is_some() {
                    let _ = write!(self.note, "SYN to port {port}: SYN queue full, answered with a SYN cookie");
                }
                self.counters.syn_cookies_sent += 1;
                return;
            }
            let buffers = self.take_buffers();
            if let Some(conn) = Connection::accept_with(&self.config.tcp, tuple, seg, now, buffers) {
                if self.capture.is_some() {
                    note_segment(&mut self.note, seg, &conn, Direction::In, State::Listen);
                }
                self.listeners.get_mut(&port).expect("listener").half_open += 1;
                self.insert(tuple, conn, Owner::Listener(port), Some(src_mac));
            }
            return;
        }
        if flags.ack() && !flags.syn() {
            if !listener.overflow.recent(now, self.config.syn_cookie_valid) {
                // No cookie can be outstanding, so this ACK is no handshake's last step:
                // RFC 9293 3.10.7.2 (LISTEN, second: an ACK is bad, send <SEQ=SEG.ACK><CTL=RST>).
                // Linux checks cookies only after a recent overflow likewise
                // (`tcp_synq_no_recent_overflow`), or every stray ACK would be a guess.
                return self.reply_reset(src_mac, src, seg, Drop::StrayAck);
            }
            if let Some((iss, mss)) = self.cookies.check(&tuple, seg.seq, seg.ack, now) {
                if listener.ready.len() >= self.config.accept_backlog || self.table.len() >= self.config.max_connections
                {
                    return self.drop(Drop::BacklogFull, "accept backlog full (cookie)");
                }
                let buffers = self.take_buffers();
                let conn = Connection::from_syn_cookie_with(&self.config.tcp, tuple, iss, mss, seg, now, buffers);
                if self.capture.is_some() {
                    let _ = write!(self.note, "valid SYN cookie: connection rebuilt | ");
                    note_segment(&mut self.note, seg, &conn, Direction::In, State::Listen);
                }
                let id = self.insert(tuple, conn, Owner::Listener(port), Some(src_mac));
                self.listeners.get_mut(&port).expect("listener").ready.push_back(id);
                self.counters.syn_cookies_accepted += 1;
                return;
            }
            return self.reply_reset(src_mac, src, seg, Drop::BadSynCookie);
        }
        if flags.ack() {
            // A SYN-ACK: an ACK is bad in LISTEN (RFC 9293 3.10.7.2, second).
            return self.reply_reset(src_mac, src, seg, Drop::StrayAck);
        }
        // Fourth: any other control or text without SYN is dropped, and answered with
        // nothing (a FIN, or data, alone).
        self.drop(Drop::ListenNoSyn, "neither SYN nor ACK to a listener")
    }

    fn reply_reset(&mut self, src_mac: [u8; 6], src: Ipv4Addr, seg: &Segment<'_>, reason: Drop) {
        self.counters.drop(reason);
        log::debug!("drop {}: {src}:{} -> port {} [{}]", reason.name(), seg.src_port, seg.dst_port, seg.flags);
        if self.capture.is_some() {
            let _ = write!(
                self.note,
                "{src}:{} -> port {} [{}]: dropped: {} (answered with RST, RFC 9293 3.10.7.1)",
                seg.src_port,
                seg.dst_port,
                seg.flags,
                reason.name()
            );
        }
        if let Some(rst) = bypass_tcp::reset_for(seg) {
            self.queue_segment(src_mac, src, &rst, || "RST for a segment that matched no connection".into());
            self.counters.tcp_resets_out += 1;
        }
    }

    /// Queue a segment that belongs to no connection, to `dst` at `dst_mac`.
    fn queue_segment(&mut self, dst_mac: [u8; 6], dst: Ipv4Addr, seg: &Segment<'_>, what: impl FnOnce() -> String) {
        let mut buf = self.buffer();
        buf.resize(HEADERS + seg.header_len() + seg.payload.len(), 0);
        let Ok(n) = seg.emit(IpAddr::V4(self.config.ip), IpAddr::V4(dst), &mut buf[HEADERS..]) else {
            return;
        };
        buf.truncate(HEADERS + n);
        self.write_headers(&mut buf, dst_mac, dst, IpNumber::TCP, n);
        self.queue_control(buf, what);
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(128));
        b.clear();
        b
    }

    /// Write the Ethernet and IPv4 headers in front of an IP payload of `len` bytes.
    fn write_headers(&self, frame: &mut [u8], dst_mac: [u8; 6], dst: Ipv4Addr, proto: IpNumber, len: usize) {
        write_headers(frame, self.mac, dst_mac, self.config.ip, dst, proto, len);
    }

    // ---------------------------------------------------------------------------------
    // Connections.
    // ---------------------------------------------------------------------------------

    fn insert(&mut self, tuple: FourTuple, conn: Connection, owner: Owner, peer_mac: Option<[u8; 6]>) -> SocketId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { generation: 0, sock: None });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.sock = Some(Sock { conn, tuple, owner, peer_mac, dirty: false, orphan: None, capacity: 0, offered: 0 });
        let id = SocketId { index, generation: slot.generation };
        self.table.insert(tuple, index);
        self.apply_budgets(index);
        self.mark_dirty(index);
        id
    }

    fn sock(&self, id: SocketId) -> Option<&Sock> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_ref()
    }

    fn sock_mut(&mut self, id: SocketId) -> Option<&mut Sock> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_mut()
    }

    fn id(&self, index: u32) -> SocketId {
        SocketId { index, generation: self.slots[index as usize].generation }
    }

    fn mark_dirty(&mut self, index: u32) {
        if let Some(sock) = self.slots[index as usize].sock.as_mut()
            && !sock.dirty
        {
            sock.dirty = true;
            self.dirty.push(index);
        }
    }

    fn remove(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if let Some(sock) = slot.sock.take() {
            self.table.remove(&sock.tuple);
            self.buffer_bytes -= sock.capacity;
            self.offered_bytes -= sock.offered as usize;
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(index);
            if let Some(bytes) = sock.orphan {
                self.orphans -= 1;
                self.orphan_bytes -= bytes;
            }
            self.counters.resets_for_lost_data += sock.conn.stats().resets_for_lost_data;
            // Buffers autotuning grew go back to the allocator: the pool keeps the configured
            // size, what short connections (the ones a pool is for) use.
            let buffers = sock.conn.into_buffers();
            if self.buffers.len() < self.config.buffer_pool && buffers.fits(&self.config.tcp) {
                self.buffers.push(buffers);
            }
        }
    }

    /// Return buffers for a new connection: recycled if any are spare, else new.
    fn take_buffers(&mut self) -> Buffers {
        match self.buffers.pop() {
            Some(b) if b.fits(&self.config.tcp) => {
                self.counters.buffers_recycled += 1;
                b
            }
            _ => {
                self.counters.buffers_allocated += 1;
                Buffers::new(&self.config.tcp)
            }
        }
    }

    /// Return the next hop's MAC for a connection's peer, resolving it if needed.
    fn next_hop_mac(&mut self, now: Instant, dst: Ipv4Addr, fallback: Option<[u8; 6]>) -> Option<[u8; 6]> {
        let hop = self.next_hop(dst);
        if let Some(mac) = self.arp.lookup(hop, now) {
            return Some(mac);
        }
        if fallback.is_none() {
            self.arp.resolve(hop, now);
        }
        fallback
    }

    fn next_hop(&self, dst: Ipv4Addr) -> Ipv4Addr {
        let mask = if self.config.prefix_len == 0 { 0 } else { u32::MAX << (32 - self.config.prefix_len.min(32)) };
        let same_subnet = (u32::from(dst) & mask) == (u32::from(self.config.ip) & mask);
        match self.config.gateway {
            Some(gw) if !same_subnet => gw,
            _ => dst,
        }
    }

    // ---------------------------------------------------------------------------------
    // Timers and transmission.
    // ---------------------------------------------------------------------------------

    /// Return when `handle_timeouts` next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.timer_due, self.arp.next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fire the connection and ARP timers due at `now`.
    pub fn handle_timeouts(&mut self, now: Instant) {
        if self.timer_due.is_some_and(|t| t <= now) {
            let mut next: Option<Instant> = None;
            for index in 0..self.slots.len() as u32 {
                let Some(sock) = self.slots[index as usize].sock.as_mut() else { continue };
                match sock.conn.poll_timeout() {
                    Some(t) if t <= now => {
                        sock.conn.handle_timeout(now);
                        self.mark_dirty(index);
                    }
                    Some(t) => next = Some(next.map_or(t, |n| n.min(t))),
                    None => {}
                }
            }
            self.timer_due = next;
        }
        let hosts: &mut Vec<Ipv4Addr> = &mut Vec::new();
        let due = self.arp.due_requests(now, |ip| hosts.push(ip));
        for _ in 0..due.dropped {
            self.counters.drop(Drop::ArpQueueDrop);
        }
        self.counters.arp_requests_suppressed += due.suppressed as u64;
        for ip in hosts.drain(..) {
            let mut buf = self.buffer();
            buf.resize(arp::ARP_FRAME_LEN, 0);
            arp::write_frame(&mut buf, ArpOperation::REQUEST, self.mac, self.config.ip, [0; 6], ip);
            self.queue_control(buf, || format!("ARP request: who has {ip}?"));
            self.counters.arp_requests += 1;
        }
    }

    /// Write everything due into `device` (without flushing it). Return how many frames.
    pub fn transmit(&mut self, now: Instant, device: &mut dyn Device) -> std::io::Result<usize> {
        let mut sent = 0;
        while let Some((frame, note)) = self.control.pop_front() {
            let mut len = 0;
            let capture = &mut self.capture;
            let ok = device.send(&mut |buf: &mut [u8]| {
                len = frame.len().min(buf.len());
                buf[..len].copy_from_slice(&frame[..len]);
                if let Some(capture) = capture.as_mut() {
                    capture.frame(now, Direction::Out, &buf[..len], &note);
                }
                len
            })?;
            if !ok {
                self.counters.drop(Drop::TxRingFull);
                self.control.push_front((frame, note));
                return Ok(sent);
            }
            self.counters.tx_frames += 1;
            self.counters.tx_bytes += len as u64;
            sent += 1;
            self.spare.push(frame);
        }
        let mut i = 0;
        while i < self.dirty.len() {
            let index = self.dirty[i];
            i += 1;
            match self.transmit_one(now, index, device)? {
                Some(n) => sent += n,
                None => {
                    // The device is full: keep the rest dirty for the next round.
                    self.dirty.drain(..i - 1);
                    return Ok(sent);
                }
            }
        }
        self.dirty.clear();
        Ok(sent)
    }

    /// Drain one connection's output into the device, then settle its events and
    /// lifecycle. `None` when the device ran out of buffers.
    fn transmit_one(&mut self, now: Instant, index: u32, device: &mut dyn Device) -> std::io::Result<Option<usize>> {
        self.apply_budgets(index);
        let Some(sock) = self.slots[index as usize].sock.as_mut() else { return Ok(Some(0)) };
        let Some(FourTuple { remote: SocketAddr::V4(remote), .. }) = sock.conn.tuple() else {
            // Back in LISTEN after an RST in SYN-RECEIVED: nothing to send; settle removes it.
            sock.dirty = false;
            self.settle(now, index);
            return Ok(Some(0));
        };
        let dst = *remote.ip();
        let fallback = sock.peer_mac;
        let mac = self.next_hop_mac(now, dst, fallback);
        let max_frame = self.mtu + ETH_LEN;
        let (our_mac, our_ip) = (self.mac, self.config.ip);
        let mut sent = 0;
        loop {
            let sock = self.slots[index as usize].sock.as_mut().expect("live");
            let mut produced = None;
            let (capture, note) = (&mut self.capture, &mut self.note);
            match mac {
                Some(mac) => {
                    let ok = device.send(&mut |buf: &mut [u8]| {
                        let end = buf.len().min(max_frame);
                        let before = sock.conn.state();
                        let t = sock.conn.poll_transmit(now, &mut buf[HEADERS..end]);
                        produced = t;
                        match t {
                            Some(t) => {
                                write_headers(buf, our_mac, mac, our_ip, dst, IpNumber::TCP, t.len);
                                if let Some(capture) = capture.as_mut() {
                                    note.clear();
                                    if let Ok(seg) = Segment::parse_unchecked(&buf[HEADERS..HEADERS + t.len]) {
                                        note_segment(note, &seg, &sock.conn, Direction::Out, before);
                                        note_send(note, &sock.conn, t.kind);
                                    }
                                    capture.frame(now, Direction::Out, &buf[..HEADERS + t.len], note);
                                }
                                HEADERS + t.len
                            }
                            None => 0,
                        }
                    })?;
                    if !ok {
                        self.counters.drop(Drop::TxRingFull);
                        return Ok(None);
                    }
                }
                None => {
                    // Unresolved: hold the frame in the ARP queue (RFC 1122 2.3.2.2).
                    let mut buf = self.spare.pop().unwrap_or_default();
                    buf.resize(max_frame, 0);
                    if let Some(t) = sock.conn.poll_transmit(now, &mut buf[HEADERS..]) {
                        write_headers(&mut buf, our_mac, [0; 6], our_ip, dst, IpNumber::TCP, t.len);
                        buf.truncate(HEADERS + t.len);
                        produced = Some(t);
                        let hop = self.next_hop(dst);
                        if let Err(frame) = self.arp.hold(hop, buf, now) {
                            self.counters.drop(Drop::ArpQueueDrop);
                            self.spare.push(frame);
                        }
                    } else {
                        self.spare.push(buf);
                    }
                }
            }
            let Some(t) = produced else { break };
            sent += 1;
            self.counters.tcp_segments_out += 1;
            self.counters.bytes_copied += t.payload_len as u64;
            if mac.is_some() {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += (HEADERS + t.len) as u64;
            }
        }
        if let Some(sock) = self.slots[index as usize].sock.as_mut() {
            sock.dirty = false;
        }
        self.settle(now, index);
        Ok(Some(sent))
    }

    /// Pass on the events of the connections touched since the last transmit, so the
    /// application sees what arrived before replies go out (call after receiving).
    pub fn deliver_events(&mut self) {
        for k in 0..self.dirty.len() {
            let index = self.dirty[k];
            if self.slots[index as usize].sock.is_some() {
                self.deliver(index);
            }
        }
    }

    /// Move `index`'s events to the user's queue; an established listener child joins the
    /// accept queue.
    fn deliver(&mut self, index: u32) {
        let id = self.id(index);
        let sock = self.slots[index as usize].sock.as_mut().expect("live");
        let owner = sock.owner;
        let mut established = false;
        while let Some(event) = sock.conn.poll_event() {
            match event {
                Event::Established => established = true,
                Event::TimedOut => self.counters.connections_timed_out += 1,
                Event::Reset => self.counters.connections_reset += 1,
                _ => {}
            }
            if owner == Owner::User {
                self.events.push_back((id, event));
            }
        }
        if let (Owner::Listener(port), true) = (owner, established)
            && let Some(l) = self.listeners.get_mut(&port)
        {
            l.half_open = l.half_open.saturating_sub(1);
            l.ready.push_back(id);
        }
    }

    /// After a connection ran: pass its events on, note its next timer, and remove it when
    /// nobody needs it any more.
    fn settle(&mut self, _now: Instant, index: u32) {
        self.count_window(index);
        self.deliver(index);
        let id = self.id(index);
        let sock = self.slots[index as usize].sock.as_mut().expect("live");
        let owner = sock.owner;
        let state = sock.conn.state();
        if let Some(t) = sock.conn.poll_timeout() {
            self.timer_due = Some(self.timer_due.map_or(t, |d| d.min(t)));
        }
        if !matches!(state, State::Closed | State::Listen) {
            return;
        }
        match owner {
            Owner::Listener(port) => {
                if let Some(l) = self.listeners.get_mut(&port) {
                    if l.ready.contains(&id) {
                        l.ready.retain(|&r| r != id);
                    } else {
                        l.half_open = l.half_open.saturating_sub(1);
                    }
                }
                self.remove(index);
            }
            Owner::Released => self.remove(index),
            Owner::User => {}
        }
    }
}

/// Write Ethernet and IPv4 headers at the front of `frame` for an IP payload of `len` bytes.
fn write_headers(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: IpNumber,
    len: usize,
) {
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: EtherType::IPV4 };
    frame[..ETH_LEN].copy_from_slice(&eth.to_bytes());
    let mut ip = Ipv4Header::new(len as u16, 64, proto, src.octets(), dst.octets()).expect("payload fits IPv4");
    ip.dont_fragment = true;
    ip.header_checksum = ip.calc_header_checksum();
    frame[ETH_LEN..HEADERS].copy_from_slice(&ip.to_bytes());
}

/// Append a description of `seg` to `note`: direction, flags, sequence and acknowledgment
/// numbers relative to the connection's initial ones, length, window in bytes, options, and
/// the state change it caused (or the state it was sent in).
fn note_segment(note: &mut String, seg: &Segment<'_>, conn: &Connection, dir: Direction, before: State) {
    let sp = conn.sequence_space();
    // The window of a SYN is never scaled (RFC 7323 2.2).
    let shift = |s: u8| if seg.flags.syn() { 0 } else { s };
    let (seq, ack, window) = match dir {
        Direction::In => (seg.seq - sp.irs, seg.ack - sp.iss, (seg.window as u32) << shift(sp.snd_wscale)),
        Direction::Out => (seg.seq - sp.iss, seg.ack - sp.irs, (seg.window as u32) << shift(sp.rcv_wscale)),
    };
    let arrow = match dir {
        Direction::In => "in ",
        Direction::Out => "out",
    };
    let _ = write!(note, "{arrow} [{}] seq={seq}", seg.flags);
    if seg.flags.ack() {
        let _ = write!(note, " ack={ack}");
    }
    let _ = write!(note, " len={} win={window}", seg.payload.len());
    if !seg.options.is_empty() {
        let _ = write!(note, " {:?}", seg.options);
    }
    let after = conn.state();
    if before == after {
        let _ = write!(note, " | {after}");
    } else {
        let _ = write!(note, " | {before} -> {after}");
    }
}

/// Append our sender's state to `note`: congestion window, RTO, and what kind of send it was.
fn note_send(note: &mut String, conn: &Connection, kind: bypass_tcp::TransmitKind) {
    use bypass_tcp::TransmitKind as K;
    let stats = conn.stats();
    let _ = write!(note, " | cwnd={} rto={}ms", stats.cwnd, stats.rto.as_millis());
    let what = match kind {
        K::Retransmission => " retransmission",
        K::WindowProbe => " zero-window probe",
        K::KeepAlive => " keep-alive probe",
        K::Reset => " reset",
        K::Syn | K::Data | K::Ack => "",
    };
    note.push_str(what);
}

fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}
