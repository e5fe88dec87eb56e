//! The host, without a device: Ethernet frames in, Ethernet frames out.
//!
//! [`Interface::receive`] takes one frame and dispatches it, layer by layer (`ethernet`,
//! `neighbour`, `ipv4`, `ipv6`, `icmp`, `reassembly`, `tcp`). A reply that belongs to no
//! connection (ARP and NDP, resets, SYN cookies) waits as the few fields it is written from
//! (`ethernet::Reply`), not as a frame; connections keep their own output.
//! [`Interface::transmit`] then writes everything due into a [`Device`]: each reply and
//! each TCP segment straight into the device's frame buffer behind its headers. Only echo
//! replies (their data) and frames held for address resolution keep bytes of their own.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bypass_tcp::{Checksum, Config as TcpConfig, Connection, Event, FourTuple, Instant};
use etherparse::ArpOperation;

use crate::addr::{Addresses, Cidr};
use crate::arp::{ArpCache, ArpConfig};
use crate::capture::NoteBoard;
use crate::counters::{Counters, Drop};
use crate::device::Device;
use crate::fragments::{Reassembler, ReassemblyConfig};
use crate::ndp::{NdpCache, NdpConfig};
use crate::ports::{EphemeralPorts, derive_key};
use crate::syncookie::{RecentOverflow, SynCookies};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const HEADERS: usize = ETH_LEN + IPV4_LEN;
const HEADERS6: usize = ETH_LEN + IPV6_LEN;
const BROADCAST: [u8; 6] = [0xff; 6];

/// Host settings.
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// Our IPv4 address and subnet (`None`: the host speaks IPv6 only); destinations outside
    /// the subnet go through `gateway`.
    pub ipv4: Option<Cidr<Ipv4Addr>>,
    /// Our IPv6 addresses and their subnets (none: the host speaks IPv4 only). The host
    /// also has the link-local address made from its MAC (RFC 4291 2.1) whenever it has one
    /// of these; other destinations go through `gateway6` or a router that advertised itself.
    pub ipv6: Vec<Cidr<Ipv6Addr>>,
    /// IPv4 next hop for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// IPv6 next hop for destinations off our links (a router's link-local or global address);
    /// without it, the default router learnt from Router Advertisements (RFC 4861 6.3.4).
    pub gateway6: Option<Ipv6Addr>,
    /// Learn default routers and on-link prefixes from Router Advertisements (Linux:
    /// `accept_ra`, on for hosts).
    pub accept_router_advertisements: bool,
    /// Settings for every TCP connection (its `isn_secret` also keys, through keys derived
    /// from it, the SYN cookies and the ephemeral port choice). The host lowers `tcp.mss` to
    /// what the MTU allows; [`StackConfig::new`] leaves it at that (`u16::MAX`), so a jumbo
    /// MTU gets jumbo segments.
    pub tcp: TcpConfig,
    /// ARP settings.
    pub arp: ArpConfig,
    /// Neighbour Discovery settings (RFC 4861 10).
    pub ndp: NdpConfig,
    /// Fragment reassembly bounds (RFC 791 3.2, RFC 8200 4.5).
    pub fragments: ReassemblyConfig,
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
    /// `(index, count)`: take only ephemeral ports `p` with `p % count == index`. Stacks that
    /// share addresses, one per device queue (shards), each get their own residue, so two
    /// never open the same 4-tuple; a device that steers replies by destination port can
    /// then bring them back to the shard that opened the connection. `(0, 1)`: every port.
    pub ephemeral_port_share: (u16, u16),
    /// Keep the neighbours (ARP, NDP) learned from received frames for
    /// [`Interface::take_learned_neighbours`], so stacks that share addresses, one per device
    /// queue, can tell each other: an answer to one's ARP request may arrive on another's
    /// queue.
    pub share_neighbours: bool,
    /// Sets of buffers (a send and a receive buffer's storage, `tcp.send_buffer +
    /// tcp.recv_buffer` bytes: 512 KiB by default, zeroed) kept for connections that need
    /// storage: new ones, and idle ones whose empty buffers gave theirs back
    /// (`Connection::detach_idle_storage`) when data moves again. The pool holds at least
    /// 128 sets whatever this says; only the bytes once written are resident.
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
    /// (never below two full-sized segments); a window already offered is never taken
    /// back (RFC 9293 3.8.6.2.2), only its growth stops. `None` (the default) takes half the
    /// device's receive ring in full-sized segments ([`Device::rx_frames`]
    /// times the MSS, halved for the frames that are not full segments and for bursts that
    /// arrive while the stack is descheduled); a device without a fixed ring sets no limit.
    pub window_budget: Option<usize>,
    /// The most bytes the buffers of all connections may hold allocated before autotuning
    /// stops growing any (as Linux's `tcp_mem` pressure threshold); buffers already grown
    /// keep their size, and new connections still get `tcp.send_buffer + tcp.recv_buffer`.
    pub buffer_memory: usize,
}

impl StackConfig {
    /// Return defaults for address `ip`/`prefix_len` (IPv4 or IPv6; add more with
    /// [`with_address`](StackConfig::with_address)), with `secret` keying ISNs and SYN
    /// cookies (fill it from a random source).
    pub fn new(ip: impl Into<IpAddr>, prefix_len: u8, secret: [u8; 16]) -> Self {
        let config = StackConfig {
            ipv4: None,
            ipv6: Vec::new(),
            gateway: None,
            gateway6: None,
            accept_router_advertisements: true,
            // The MSS the interface's MTU allows (RFC 9293 3.7.1: MTU minus the IP and TCP
            // headers), 1460 at 1500 and 8960 at a 9000-byte jumbo MTU: `Interface::new`
            // lowers the MSS to fit the MTU, and this asks for no lower.
            tcp: TcpConfig { isn_secret: secret, mss: u16::MAX, ..TcpConfig::default() },
            arp: ArpConfig::default(),
            ndp: NdpConfig::default(),
            fragments: ReassemblyConfig::default(),
            syn_queue: 256,
            syn_cookie_valid: Duration::from_secs(120),
            accept_backlog: 1024,
            max_connections: 1 << 20,
            ephemeral_ports: (49152, 65535),
            ephemeral_port_share: (0, 1),
            share_neighbours: false,
            buffer_pool: 16,
            max_orphans: 16_384,
            max_orphan_memory: 64 << 20,
            window_budget: None,
            buffer_memory: 512 << 20,
        };
        config.with_address(ip, prefix_len)
    }

    /// Add address `ip`/`prefix_len`: IPv6 addresses add up, an IPv4 one replaces the IPv4
    /// address (a host has one here).
    pub fn with_address(mut self, ip: impl Into<IpAddr>, prefix_len: u8) -> Self {
        match ip.into() {
            IpAddr::V4(addr) => self.ipv4 = Some(Cidr { addr, prefix_len: prefix_len.min(32) }),
            IpAddr::V6(addr) => self.ipv6.push(Cidr { addr, prefix_len: prefix_len.min(128) }),
        }
        self
    }
}

/// Frames for sibling hosts kept between takes, at most (the rest are answered as before).
const MAX_FOREIGN: usize = 4096;

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
    /// A child of the listener on this port, of this epoch (`Listener::epoch`), not yet
    /// accepted.
    Listener(u16, u32),
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
    /// The deadline of its live entry in `Interface::timers`. A deadline that moves later
    /// leaves the entry be: when it comes up early, the connection is armed again for its
    /// real deadline. One that moves earlier adds an entry and makes the old one stale.
    scheduled: Option<Instant>,
    /// A listener's child waiting in its `ready` queue.
    queued: bool,
}

struct Slot {
    generation: u32,
    sock: Option<Sock>,
}

struct Listener {
    half_open: usize,
    /// Established children in the order they arrived, for `accept`; also holds ids of
    /// children that closed before being accepted (their `Sock::queued` is false), dropped
    /// as `accept` passes them or when they outnumber the live ones.
    ready: VecDeque<SocketId>,
    /// Children in `ready` still waiting (the backlog's length).
    queued: usize,
    /// Tells this listener's children from those of an earlier listener on the port.
    epoch: u32,
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
    NoFreePort(SocketAddr),
    /// The table is full.
    #[error("the connection table is full ({0} connections); close some first")]
    TableFull(usize),
    /// The requested local port is zero or already connected to that destination.
    #[error("local port {0} is zero or already connected to that destination; choose another")]
    PortInUse(u16),
    /// No address of ours may send there: the host has none of the destination's family (an
    /// IPv6 destination on an IPv4-only host, or the other way round), or the destination
    /// never goes on a wire (loopback, IPv4-mapped, broadcast).
    #[error(
        "cannot connect to {0}: the host has no address to send there from (none of its family, or the address never goes on a wire)"
    )]
    NoSourceAddress(SocketAddr),
    /// Port 0 or an unspecified address.
    #[error("cannot connect to {0}: give a real address and a non-zero port")]
    InvalidAddress(SocketAddr),
}

/// The host: address, ARP, listeners and connections; see the module docs.
pub struct Interface {
    config: StackConfig,
    addrs: Addresses,
    /// `config.tcp` for IPv6 connections: the MSS fits the MTU behind the longer header.
    tcp6: TcpConfig,
    mac: [u8; 6],
    mtu: usize,
    arp: ArpCache,
    ndp: NdpCache,
    /// The reassembler; out of its place only while it lends a datagram it completed.
    fragments: Option<Reassembler>,
    /// Path MTUs learnt from ICMP, per destination, with when (RFC 1191 6.3, RFC 8201 4),
    /// for the connections opened to it later.
    path_mtu: HashMap<IpAddr, (u32, Instant)>,
    /// The identification of the last datagram we cut into fragments.
    fragment_id: u32,
    cookies: SynCookies,
    slots: Vec<Slot>,
    free: Vec<u32>,
    table: HashMap<FourTuple, u32>,
    listeners: HashMap<u16, Listener>,
    dirty: Vec<u32>,
    /// The dirty connections in the order `transmit` sends them (held, then released); kept
    /// for its storage.
    tx_order: Vec<u32>,
    /// The device filled up during the last `transmit`: the next takes the dirty
    /// connections in the order they were left, released or not.
    tx_backlog: bool,
    /// Replies that belong to no connection, with their capture note.
    control: VecDeque<(ethernet::Reply, String)>,
    spare: Vec<Vec<u8>>,
    /// Neighbours learned from received frames since the last take (`share_neighbours`).
    learned: Vec<(IpAddr, [u8; 6])>,
    /// The frame being received belongs to a sibling's connection (see `take_foreign_frames`).
    misrouted: Option<u16>,
    /// Frames for siblings' connections, with the sibling's index, since the last take.
    foreign: Vec<(u16, Vec<u8>)>,
    /// Where the note of each frame goes while a [`Recorder`](crate::capture::Recorder)
    /// records the device (`None`: no notes are formatted).
    notes: Option<NoteBoard>,
    /// What the frame being received meant (filled only while capturing).
    note: String,
    events: VecDeque<(SocketId, Event)>,
    /// Buffer storage of removed connections and of idle connections' empty buffers,
    /// zeroed, for the next that need some (see `settle`, `remove`, `lend_storage`).
    /// Indexed by `table::pool_for`: send-buffer-sized storage, then receive-buffer-sized, so
    /// taking one is a pop.
    storage_pool: [Vec<bypass_tcp::Storage>; 2],
    counters: Counters,
    ports: EphemeralPorts,
    /// Each connection's earliest timer, keyed by slot and generation (see `Sock::scheduled`).
    timers: crate::timer_wheel::TimerWheel<(u32, u32)>,
    /// Entries `handle_timeouts` takes from `timers` (kept for its capacity).
    fired: Vec<(Instant, (u32, u32))>,
    /// The epoch of the latest listener (see `Owner::Listener`).
    listener_epoch: u32,
    /// Connections the application closed that are still finishing, and the bytes they
    /// were charged when closed (see `StackConfig::max_orphans`).
    orphans: usize,
    orphan_bytes: usize,
    /// `StackConfig::window_budget` as resolved for the device (`usize::MAX`: no limit).
    window_budget: usize,
    /// Bytes allocated to the buffers of the connections in the table.
    buffer_bytes: usize,
    /// The device verifies IPv4 header, TCP and ICMP checksums itself and delivers no frame
    /// that fails ([`ChecksumCaps::rx_verified`](crate::ChecksumCaps)): skip verifying them.
    rx_verified: bool,
    /// The receive windows the connections offer, summed as each last ran.
    offered_bytes: usize,
}

mod egress;
mod ethernet;
mod icmp;
mod ipv4;
mod ipv6;
mod neighbour;
mod notes;
mod reassembly;
mod table;
mod tcp;
mod user;

use ethernet::{headers_len, mac_string, write_ip_headers};
use notes::{note_segment, note_send};

impl Interface {
    /// Return a host with MAC `mac` and IP MTU `mtu`.
    pub fn new(config: StackConfig, mac: [u8; 6], mtu: usize) -> Self {
        let mut tcp = config.tcp.clone();
        // Our segments must fit the MTU with IP and TCP headers.
        tcp.mss = tcp.mss.min((mtu - IPV4_LEN - 20) as u16);
        let mut tcp6 = tcp.clone();
        tcp6.mss = tcp.mss.min((mtu - IPV6_LEN - 20) as u16);
        // One secret, separate keys: what one use reveals says nothing about another's.
        let cookies = SynCookies::new(derive_key(&tcp.isn_secret, b"bypass SYN cookie key"));
        let ports =
            EphemeralPorts::new(derive_key(&tcp.isn_secret, b"bypass RFC 6056 port key"), config.ephemeral_ports);
        Interface {
            addrs: Addresses::new(config.ipv4, config.ipv6.clone(), mac),
            tcp6,
            arp: ArpCache::new(config.arp),
            ndp: NdpCache::new(NdpConfig {
                seed: u64::from_le_bytes(
                    derive_key(&tcp.isn_secret, b"bypass NDP jitter seed")[..8].try_into().expect("8 bytes"),
                ),
                ..config.ndp
            }),
            fragments: Some(Reassembler::new(config.fragments)),
            path_mtu: HashMap::new(),
            fragment_id: 0,
            config: StackConfig { tcp, ..config },
            mac,
            mtu,
            cookies,
            slots: Vec::new(),
            free: Vec::new(),
            table: HashMap::new(),
            listeners: HashMap::new(),
            dirty: Vec::new(),
            tx_order: Vec::new(),
            tx_backlog: false,
            control: VecDeque::new(),
            spare: Vec::new(),
            learned: Vec::new(),
            misrouted: None,
            foreign: Vec::new(),
            notes: None,
            note: String::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            ports,
            timers: crate::timer_wheel::TimerWheel::new(),
            fired: Vec::new(),
            storage_pool: [Vec::new(), Vec::new()],
            listener_epoch: 0,
            orphans: 0,
            orphan_bytes: 0,
            window_budget: usize::MAX,
            buffer_bytes: 0,
            rx_verified: false,
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

    /// Take the device's checksum capabilities ([`Device::checksums`]): checksums the
    /// device states it verified are not verified again, and when it completes the TCP
    /// checksums of what it sends (`tx_offload`), every TCP segment we send, of a connection
    /// or not, carries only the pseudo-header sum ([`Checksum::PseudoHeader`]).
    /// [`Stack::new`](crate::Stack::new) calls this, before any connection exists.
    pub fn set_device_checksums(&mut self, caps: crate::ChecksumCaps) {
        self.rx_verified = caps.rx_verified;
        let mode = if caps.tx_offload { Checksum::PseudoHeader } else { Checksum::Full };
        self.config.tcp.tx_checksum = mode;
        self.tcp6.tx_checksum = mode;
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

    /// Return the TCP settings for connections from our address `local`: the IPv6 ones have
    /// an MSS 20 bytes smaller, for the longer IP header.
    fn tcp_config(&self, local: IpAddr) -> &TcpConfig {
        match local {
            IpAddr::V4(_) => &self.config.tcp,
            IpAddr::V6(_) => &self.tcp6,
        }
    }

    /// Return our addresses.
    pub fn addresses(&self) -> &Addresses {
        &self.addrs
    }

    /// Return the settings in force (the TCP MSS clamped to the MTU).
    pub fn config(&self) -> &StackConfig {
        &self.config
    }

    /// Leave a note about every frame received and sent on `board`, for the
    /// [`Recorder`](crate::capture::Recorder) that records the device (`None` stops).
    pub fn set_notes(&mut self, board: Option<NoteBoard>) {
        self.notes = board;
    }

    /// Return whether the host leaves notes for a recorder (a capture is installed).
    pub fn capturing(&self) -> bool {
        self.notes.is_some()
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

    /// Return how many connection buffers (send or receive storage) wait in the pool.
    pub fn pooled_buffers(&self) -> usize {
        self.storage_pool[0].len() + self.storage_pool[1].len()
    }

    /// Process one received Ethernet frame. Never panics on any bytes.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.note.clear();
        self.receive_frame(now, frame);
        if let Some(owner) = self.misrouted.take()
            && self.foreign.len() < MAX_FOREIGN
        {
            self.foreign.push((owner, frame.to_vec()));
            self.counters.frames_handed_over += 1;
        }
        if let Some(board) = &self.notes {
            board.write(now, &self.note);
        }
    }

    /// Return the frames received for connections of sibling hosts since the last call,
    /// each with the sibling's index (see [`StackConfig::ephemeral_port_share`]), for the
    /// sibling's [`receive`](Interface::receive). A device whose steering a source port
    /// cannot choose (a veth, where the queue is the peer's transmit queue) brings replies to
    /// one shard's active opens to another shard's queue; they are handed over instead of
    /// being answered with RST.
    pub fn take_foreign_frames(&mut self) -> Vec<(u16, Vec<u8>)> {
        std::mem::take(&mut self.foreign)
    }

    /// Return the sibling that opened connections from local `port`, if not this host.
    pub(super) fn sibling_owner(&self, port: u16) -> Option<u16> {
        let (index, count) = self.config.ephemeral_port_share;
        let (lo, hi) = self.config.ephemeral_ports;
        let ephemeral = (lo.min(hi)..=lo.max(hi)).contains(&port);
        (count > 1 && ephemeral && port % count != index % count).then_some(port % count)
    }

    /// Return when `handle_timeouts` next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let fragments = self.fragments.as_ref().and_then(|f| f.poll_timeout());
        [self.timers.next_deadline(), self.arp.next_timeout(), self.ndp.next_timeout(), fragments]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fire the connection, ARP, Neighbour Discovery and reassembly timers due at `now`.
    pub fn handle_timeouts(&mut self, now: Instant) {
        self.expire_fragments(now);
        self.solicit_neighbours(now);
        let mut fired = std::mem::take(&mut self.fired);
        self.timers.expire(now, &mut fired);
        for (when, (index, generation)) in fired.drain(..) {
            let slot = &mut self.slots[index as usize];
            let Some(sock) = slot.sock.as_mut().filter(|s| slot.generation == generation && s.scheduled == Some(when))
            else {
                continue; // stale: the connection went, or was armed for an earlier time since
            };
            sock.scheduled = None;
            match sock.conn.poll_timeout() {
                Some(t) if t <= now => {
                    sock.conn.handle_timeout(now);
                    // `settle`, when the connection transmits, arms its next timer.
                    self.mark_dirty(index);
                }
                Some(t) => {
                    sock.scheduled = Some(t);
                    self.timers.insert(now, t, (index, generation));
                }
                None => {}
            }
        }
        self.fired = fired;
        if self.timers.len() > 2 * self.table.len() + 1024 {
            // Stale entries (connections gone, or armed earlier since) outnumber live ones.
            let slots = &self.slots;
            self.timers.retain(|when, (index, generation)| {
                let slot = &slots[index as usize];
                slot.generation == generation && slot.sock.as_ref().is_some_and(|s| s.scheduled == Some(when))
            });
        }
        let hosts: &mut Vec<Ipv4Addr> = &mut Vec::new();
        let due = self.arp.due_requests(now, |ip| hosts.push(ip));
        for _ in 0..due.dropped {
            self.counters.drop(Drop::ArpQueueDrop);
        }
        self.counters.arp_requests_suppressed += due.suppressed as u64;
        let ours = self.addrs.ipv4().unwrap_or(Ipv4Addr::UNSPECIFIED);
        for ip in hosts.drain(..) {
            let request = ethernet::Reply::Arp { op: ArpOperation::REQUEST, src_ip: ours, dst_mac: [0; 6], dst_ip: ip };
            self.queue_reply(request, || format!("ARP request: who has {ip}?"));
            self.counters.arp_requests += 1;
        }
    }

    /// Write everything due into `device` (without flushing it). Return how many frames.
    pub fn transmit(&mut self, now: Instant, device: &mut dyn Device) -> std::io::Result<usize> {
        let mut sent = 0;
        let (our_mac, tx_checksum) = (self.mac, self.config.tcp.tx_checksum);
        while let Some((reply, note)) = self.control.pop_front() {
            let mut len = 0;
            let notes = &self.notes;
            let ok = device.send(&mut |buf: &mut [u8]| {
                len = reply.write(buf, our_mac, tx_checksum);
                if let Some(board) = notes {
                    board.write(now, &note);
                }
                len
            })?;
            if !ok {
                self.counters.drop(Drop::TxRingFull);
                self.control.push_front((reply, note));
                return Ok(sent);
            }
            if len > 0 {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += len as u64;
                sent += 1;
            }
            if let ethernet::Reply::Frame(frame) = reply {
                self.spare.push(frame);
            }
        }
        // Connections the application still holds first, then those it released (their
        // FINs and last ACKs): a device may hand each frame of a batch on before it takes
        // the next (copy-mode AF_XDP delivers every frame of a kick to a veth peer in turn),
        // so a handshake or a reply waits for no teardown queued before it.
        let mut order = std::mem::take(&mut self.tx_order);
        // Sending may dirty other connections (a child reset, a settle): round again until
        // nothing is left.
        while !self.dirty.is_empty() {
            order.clear();
            if self.tx_backlog {
                order.append(&mut self.dirty);
            } else {
                let slots = &self.slots;
                let released = |i: &u32| slots[*i as usize].sock.as_ref().is_some_and(|s| s.owner == Owner::Released);
                order.extend(self.dirty.iter().filter(|i| !released(i)));
                order.extend(self.dirty.iter().filter(|i| released(i)));
                self.dirty.clear();
            }
            for k in 0..order.len() {
                match self.transmit_one(now, order[k], device) {
                    Ok(Some(n)) => sent += n,
                    other => {
                        // The device is full (or failed): keep this one and the rest dirty,
                        // ahead of any dirtied meanwhile, for the next round, which takes
                        // them in this order (so the priority never holds a teardown back
                        // longer than arrival order would).
                        self.dirty.splice(0..0, order[k..].iter().copied());
                        self.tx_order = order;
                        self.tx_backlog = true;
                        return other.map(|_| sent);
                    }
                }
            }
        }
        self.tx_order = order;
        self.tx_backlog = false;
        Ok(sent)
    }
}
