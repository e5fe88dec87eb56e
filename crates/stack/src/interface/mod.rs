//! The host, without a device: Ethernet frames in, Ethernet frames out.
//!
//! [`Interface::receive`] takes one frame and dispatches it, layer by layer (`ethernet`,
//! `neighbour`, `ipv4`, `ipv6`, `icmp`, `reassembly`, `tcp`). A reply that belongs to no
//! connection (ARP and NDP, resets, SYN cookies) waits as the few fields it is written from
//! (`ethernet::Reply`), not as a frame; connections keep their own output.
//! [`Interface::transmit`] then writes everything due into a [`Device`]: each reply and
//! each TCP segment straight into the device's frame buffer behind its headers. Only echo
//! replies (their data) and frames held for address resolution keep bytes of their own.
//!
//! Beside the layers: `config.rs` ([`StackConfig`]), `ids.rs` ([`SocketId`], [`ListenerId`]),
//! `errors.rs` ([`ListenError`], [`ConnectError`]), `connections.rs` (the connection table:
//! slots, listeners, dirty list, buffer pool, timer wheel, orphans and budgets), `table.rs`
//! (inserting, settling and removing connections), `user.rs` (the socket calls), `egress.rs`
//! (a connection's segments into the device), `notes.rs` (capture notes) and `snapshot.rs`
//! (connections, listeners and TCP totals for operators). The headers and
//! messages themselves are read and written by [`crate::wire`].

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

use bypass_device::Device;
use bypass_device::capture::NoteBoard;
use bypass_tcp::{Checksum, Config as TcpConfig, Event, Instant};
use etherparse::ArpOperation;

use crate::addr::Addresses;
use crate::arp::ArpCache;
use crate::counters::{Counters, Drop};
use crate::fragments::Reassembler;
use crate::ndp::{NdpCache, NdpConfig};
use crate::ports::{EphemeralPorts, derive_key};
use crate::syncookie::{RecentOverflow, SynCookies};

use crate::wire::{BROADCAST, ETH_LEN, IPV4_LEN, IPV6_LEN, headers_len, write_ip_headers};

/// Frames for sibling hosts kept between takes, at most (the rest are answered as before).
const MAX_FOREIGN: usize = 4096;

/// The user's event queue is compacted (`Interface::compact_events`) only past this length.
const EVENTS_COMPACT_MIN: usize = 1024;

/// The host: address, ARP, listeners and connections; see the module docs.
pub struct Interface {
    config: StackConfig,
    addrs: Addresses,
    /// Our IPv4 subnet's directed broadcast address (`Interface::directed_broadcast` of
    /// `addrs`, which do not change), for the martian check of every datagram received.
    directed_broadcast: Option<Ipv4Addr>,
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
    /// The connections and listeners, with their bookkeeping.
    conns: Connections,
    /// Replies that belong to no connection, with their capture note.
    control: VecDeque<(ethernet::Reply, String)>,
    spare: Vec<Vec<u8>>,
    /// Neighbours learned from received frames since the last take (`share_neighbours`).
    learned: Vec<(IpAddr, [u8; 6])>,
    /// The frame being received belongs to a sibling's connection (see `take_foreign_frames`).
    misrouted: Option<u16>,
    /// Frames for siblings' connections, with the sibling's index, since the last take.
    foreign: Vec<(u16, Vec<u8>)>,
    /// Where the note of each frame goes while a [`Recorder`](bypass_device::capture::Recorder)
    /// records the device (`None`: no notes are formatted).
    notes: Option<NoteBoard>,
    /// What the frame being received meant (filled only while capturing).
    note: String,
    /// The user's events, each kind at most once per connection while it waits
    /// (`Sock::user_events`), and those of connections the user closed before taking them,
    /// which `compact_events` drops once they are most of the queue.
    events: VecDeque<(SocketId, Event)>,
    /// The queue's length past which `compact_events` runs next.
    events_compact_at: usize,
    /// A frame was received or a timer fired since the last `deliver_events`: only these
    /// give a connection events (its segments, ICMP errors and timeouts; the user's calls
    /// give none), so without either `deliver_events` has nothing to pass on.
    events_due: bool,
    /// No timer but Neighbour Discovery's is due before this: the connections' wheel (its
    /// `next_deadline`), the idle sweep, the ARP requests (while any resolution is pending,
    /// every poll: `now` at the last firing) and the reassembly's expiry. Found again after
    /// the timers fire (`fire_timeouts`), and lowered by every place that arms one of them
    /// in between (`lower_timer_floor`), so that a poll with nothing due asks one
    /// comparison (`timers_due`) rather than each of them.
    timer_floor: Instant,
    counters: Counters,
    /// The TCP counters of the connections removed from the table (see `tcp_totals`).
    ended: TcpTotals,
    ports: EphemeralPorts,
    /// The device verifies IPv4 header, TCP and ICMP checksums itself and delivers no frame
    /// that fails ([`ChecksumCaps::rx_verified`](bypass_device::ChecksumCaps)): skip verifying them.
    rx_verified: bool,
}

mod config;
mod connections;
mod egress;
mod errors;
mod ethernet;
mod icmp;
mod ids;
mod ipv4;
mod ipv6;
mod neighbour;
mod notes;
mod reassembly;
mod snapshot;
mod table;
mod tcp;
mod user;

pub use bypass_device::SynCookieAnswer;
pub use config::StackConfig;
use connections::{Connections, Listener, Owner, Sock};
pub use errors::{ConnectError, ListenError};
use ethernet::mac_string;
pub use ids::{ListenerId, SocketId};
use notes::{note_segment, note_send};
pub use snapshot::{ConnectionInfo, ListenerInfo, TcpTotals};
pub(crate) use table::ForRead;

impl Interface {
    /// Return a host with MAC `mac` and IP MTU `mtu`.
    pub fn new(config: StackConfig, mac: [u8; 6], mtu: usize) -> Self {
        let (tcp, tcp6) = config.tcp_by_family(mtu);
        // One secret, separate keys: what one use reveals says nothing about another's.
        let cookies = SynCookies::new(crate::syncookie::key(&tcp.isn_secret));
        let ports =
            EphemeralPorts::new(derive_key(&tcp.isn_secret, b"bypass RFC 6056 port key"), config.ephemeral_ports);
        let addrs = Addresses::new(config.ipv4, config.ipv6.clone(), mac);
        Interface {
            directed_broadcast: Self::directed_broadcast(&addrs),
            addrs,
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
            conns: Connections::new(),
            control: VecDeque::new(),
            spare: Vec::new(),
            learned: Vec::new(),
            misrouted: None,
            foreign: Vec::new(),
            notes: None,
            note: String::new(),
            events: VecDeque::new(),
            events_compact_at: EVENTS_COMPACT_MIN,
            events_due: false,
            // Found at the first poll.
            timer_floor: Instant::ZERO,
            counters: Counters::default(),
            ended: TcpTotals::default(),
            ports,
            rx_verified: false,
        }
    }

    /// Resolve `StackConfig::window_budget` and `StackConfig::flight_budget` for a device
    /// that holds `rx_frames` received frames (`None`: no fixed ring).
    /// [`Stack::new`](crate::Stack::new) calls this.
    pub fn set_device_rx_frames(&mut self, rx_frames: Option<usize>) {
        let mss = usize::from(self.config.tcp.mss);
        let resolve = |set: Option<usize>, share: usize| match (set, rx_frames) {
            (Some(bytes), _) => bytes,
            (None, Some(frames)) => frames * mss / share,
            (None, None) => usize::MAX,
        };
        self.conns.window_budget = resolve(self.config.window_budget, 2);
        self.conns.flight_budget = resolve(self.config.flight_budget, 4);
        let budgeted = self.conns.window_budget != usize::MAX || self.conns.flight_budget != usize::MAX;
        if budgeted && !self.conns.budgeted {
            // The sums from what each connection noted as it last ran, kept from now on.
            let socks = self.conns.slots.iter().filter_map(|s| s.sock.as_deref());
            (self.conns.offered_bytes, self.conns.flight_bytes) =
                socks.fold((0, 0), |(o, f), s| (o + s.offered as usize, f + s.in_flight as usize));
        }
        // Budgets lifted while connections remain leave them capped until their next pass,
        // which `budget_cap` gives `u32::MAX`: the sums and the caps are kept for them.
        self.conns.budgeted = budgeted || (self.conns.budgeted && !self.conns.table.is_empty());
    }

    /// Take the device's checksum capabilities ([`Device::checksums`]): checksums the
    /// device states it verified are not verified again, and when it completes the TCP
    /// checksums of what it sends (`tx_offload`), every TCP segment we send, of a connection
    /// or not, carries only the pseudo-header sum ([`Checksum::PseudoHeader`]).
    /// [`Stack::new`](crate::Stack::new) calls this, before any connection exists.
    pub fn set_device_checksums(&mut self, caps: bypass_device::ChecksumCaps) {
        self.rx_verified = caps.rx_verified;
        let mode = if caps.tx_offload { Checksum::PseudoHeader } else { Checksum::Full };
        self.config.tcp.tx_checksum = mode;
        self.tcp6.tx_checksum = mode;
    }

    /// Return the bytes of receive window all connections may offer between them
    /// (`usize::MAX`: no limit).
    pub fn window_budget(&self) -> usize {
        self.conns.window_budget
    }

    /// Return the bytes all connections may have in flight between them (`usize::MAX`: no
    /// limit).
    pub fn flight_budget(&self) -> usize {
        self.conns.flight_budget
    }

    /// Return the bytes the connections have in flight between them, as each last ran.
    /// Without a budget, summed over the connections when asked.
    pub fn bytes_in_flight(&self) -> usize {
        if self.conns.budgeted {
            return self.conns.flight_bytes;
        }
        self.conns.slots.iter().filter_map(|s| s.sock.as_deref()).map(|s| s.in_flight as usize).sum()
    }

    /// Return the bytes allocated to the buffers of the connections in the table.
    pub fn buffer_memory(&self) -> usize {
        self.conns.buffer_bytes
    }

    /// Return the receive windows the connections offer between them, as each last ran.
    /// Without a budget, summed over the connections when asked.
    pub fn offered_windows(&self) -> usize {
        if self.conns.budgeted {
            return self.conns.offered_bytes;
        }
        self.conns.slots.iter().filter_map(|s| s.sock.as_deref()).map(|s| s.offered as usize).sum()
    }

    /// Return the TCP settings for connections from our address `local`: the IPv6 ones have
    /// an MSS 20 bytes smaller, for the longer IP header.
    fn tcp_config(&self, local: IpAddr) -> &TcpConfig {
        match local {
            IpAddr::V4(_) => &self.config.tcp,
            IpAddr::V6(_) => &self.tcp6,
        }
    }

    /// Count SYN cookie periods on the host's time plus `micros` (see
    /// [`Stack::align_syn_cookie_clock`](crate::Stack::align_syn_cookie_clock)): cookies made
    /// before keep working only if the periods agree.
    pub fn set_syn_cookie_epoch(&mut self, micros: u64) {
        self.cookies.set_epoch(micros);
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
    /// [`Recorder`](bypass_device::capture::Recorder) that records the device (`None` stops).
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
        self.conns.len()
    }

    /// Return how many connections the application closed are still finishing in the
    /// background (see [`StackConfig::max_orphans`]).
    pub fn orphan_count(&self) -> usize {
        self.conns.orphans
    }

    /// Return how many connection buffers (send or receive storage) wait in the pool.
    pub fn pooled_buffers(&self) -> usize {
        self.conns.pooled_buffers()
    }

    /// Process one received Ethernet frame. Never panics on any bytes.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.note.clear();
        self.events_due = true;
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
        let (timers, idle) = (self.conns.timers.next_deadline(), self.conns.idle_sweep);
        [timers, idle, self.arp.next_timeout(), self.ndp.next_timeout(), fragments].into_iter().flatten().min()
    }

    /// Return whether `handle_timeouts` may have work at `now`: a comparison with the
    /// timers' floor (`timer_floor`) and Neighbour Discovery's test for no timer set, for
    /// the poll of a busy host, which comes far more often than a timer (4 polls a
    /// request/response exchange in the instruction benchmark). The connection timers'
    /// wheel moves on from where it was at its next walk, as after any gap between polls.
    #[inline]
    fn timers_due(&self, now: Instant) -> bool {
        now >= self.timer_floor || self.ndp.next_timeout().is_some_and(|t| t <= now)
    }

    /// Return the timers' floor (`timer_floor`) as the timers stand: the earliest of the
    /// connections' wheel, the idle sweep and the reassembly's expiry, and `now` while an
    /// ARP resolution is pending (its requests are looked at on every poll).
    fn find_timer_floor(&self, now: Instant) -> Instant {
        let never = Instant::from_micros(u64::MAX);
        let fragments = self.fragments.as_ref().and_then(|f| f.poll_timeout());
        let arp = self.arp.has_pending().then_some(now);
        [self.conns.timers.next_deadline(), self.conns.idle_sweep, arp, fragments]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(never)
    }

    /// Note that one of the timers `timer_floor` covers may be due at `at`.
    #[inline]
    pub(super) fn lower_timer_floor(&mut self, at: Instant) {
        self.timer_floor = self.timer_floor.min(at);
    }

    /// Fire the connection, ARP, Neighbour Discovery and reassembly timers due at `now`, and
    /// give idle connections' empty buffers back to the pool. Inlined: a poll with nothing
    /// due (most polls of a busy host) pays `timers_due`'s comparisons, without a call
    /// whose prologue saves the registers the timer work needs.
    #[inline]
    pub fn handle_timeouts(&mut self, now: Instant) {
        if self.timers_due(now) {
            self.fire_timeouts(now);
        }
    }

    /// Do what [`handle_timeouts`](Self::handle_timeouts) does when a timer may be due,
    /// without asking whether one is: for the test that holds its shortcut (`timers_due`,
    /// the timers' floor) to firing on every poll, which changes nothing when nothing is
    /// due (`tests/timer_floor.rs`).
    #[doc(hidden)]
    pub fn handle_timeouts_unasked(&mut self, now: Instant) {
        self.fire_timeouts(now);
    }

    /// [`handle_timeouts`](Self::handle_timeouts) when a timer may be due.
    #[inline(never)]
    fn fire_timeouts(&mut self, now: Instant) {
        self.events_due = true;
        self.expire_fragments(now);
        self.solicit_neighbours(now);
        self.conns.expire_timers(now);
        self.release_idle_storage(now);
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
        self.timer_floor = self.find_timer_floor(now);
    }

    /// Write everything due into `device` (without flushing it). Return how many frames.
    /// Inlined down to the check for nothing due (no reply queued, no connection marked:
    /// the poll after one that settled its connection, `deliver_events_settling`), the
    /// work out of line in `transmit_due`.
    #[inline]
    pub fn transmit(&mut self, now: Instant, device: &mut dyn Device) -> std::io::Result<usize> {
        if self.control.is_empty() && self.conns.dirty.is_empty() {
            self.conns.tx_backlog = false;
            return Ok(0);
        }
        self.transmit_due(now, device)
    }

    /// [`transmit`](Self::transmit) with a reply queued or a connection marked.
    #[inline(never)]
    fn transmit_due(&mut self, now: Instant, device: &mut dyn Device) -> std::io::Result<usize> {
        let mut sent = 0;
        while let Some((reply, note)) = self.control.pop_front() {
            // Read here, where a reply is written: most calls have none.
            let (our_mac, tx_checksum) = (self.mac, self.config.tcp.tx_checksum);
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
        // The order is worked through where it is kept, `Connections::tx_order` (nothing
        // else touches it meanwhile), rather than taken out and put back.
        // Sending may dirty other connections (a child reset, a settle): round again until
        // nothing is left.
        while !self.conns.dirty.is_empty() {
            let conns = &mut self.conns;
            conns.tx_order.clear();
            if conns.tx_backlog || conns.dirty.len() == 1 {
                // In the order left, or one connection (a host answering one request): the
                // list is the order as it is, and the two trade their storage.
                std::mem::swap(&mut conns.tx_order, &mut conns.dirty);
            } else {
                let slots = &conns.slots;
                let released = |i: &u32| slots[*i as usize].sock.as_ref().is_some_and(|s| s.owner == Owner::Released);
                conns.tx_order.extend(conns.dirty.iter().filter(|i| !released(i)));
                conns.tx_order.extend(conns.dirty.iter().filter(|i| released(i)));
                conns.dirty.clear();
            }
            for k in 0..self.conns.tx_order.len() {
                match self.transmit_one(now, self.conns.tx_order[k], device) {
                    Ok(Some(n)) => sent += n,
                    other => {
                        // The device is full (or failed): keep this one and the rest dirty,
                        // ahead of any dirtied meanwhile, for the next round, which takes
                        // them in this order (so the priority never holds a teardown back
                        // longer than arrival order would).
                        let conns = &mut self.conns;
                        conns.dirty.splice(0..0, conns.tx_order[k..].iter().copied());
                        conns.tx_backlog = true;
                        return other.map(|_| sent);
                    }
                }
            }
        }
        self.conns.tx_backlog = false;
        Ok(sent)
    }
}
