//! A simulated link on virtual time: one direction of a path with propagation delay, an
//! optional bandwidth cap with a bounded queue, and loss, reordering, duplication and bit
//! corruption drawn from a seeded RNG, and optionally ACK coalescing ([`AckCoalescing`]).
//!
//! [`Link`] carries opaque packets, so the same model serves the TCP core's two-connection
//! simulator (`bypass_tcp::sim::Pair`, segments) and the in-memory link between two hosts
//! ([`crate::MemoryLink`], Ethernet frames). Nothing here sleeps: the caller says what time it
//! is, and [`Link::next_delivery`] says when the next packet is due, so a run is a pure
//! function of the config, the seed and the calls.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use bypass_device::{Instant, Link, LinkConfig};
//!
//! let mut link = Link::new(LinkConfig::default().with_delay(Duration::from_millis(5)), 7);
//! link.send(Instant::ZERO, b"hello");
//! assert!(link.recv(Instant::from_millis(4)).is_none(), "still on the way");
//! assert_eq!(link.next_delivery(), Some(Instant::from_millis(5)));
//! assert_eq!(link.recv(Instant::from_millis(5)).unwrap().bytes(), b"hello");
//! ```

use core::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ops::Deref;
use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::time::Instant;

/// How one direction of a simulated path behaves.
///
/// Impairments apply in this order: tail drop at the queue, serialization at `bandwidth`,
/// `loss`, `duplicate`; then, for each copy on its own, `corrupt` and `reorder`; last, at the
/// far end, `ack_coalescing`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay, added after serialization.
    pub delay: Duration,
    /// Link rate in bits per second; `None` is infinitely fast (no serialization, no queue).
    pub bandwidth: Option<u64>,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is held back by `reorder_delay`, so later ones overtake it.
    pub reorder: f64,
    /// Extra delay of a held-back packet.
    pub reorder_delay: Duration,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that one random bit of a packet is flipped.
    pub corrupt: f64,
    /// Bytes waiting for serialization (the packet on the wire included) beyond which a new packet
    /// is tail-dropped; `usize::MAX` is unbounded. Ignored without `bandwidth`.
    pub queue_limit: usize,
    /// Merge the pure TCP ACKs of a flow that arrive within an interval (GRO, DOCSIS ACK
    /// thinning); `None` delivers every packet.
    pub ack_coalescing: Option<AckCoalescing>,
    /// Probability that a packet sent ECN-capable ([`Link::send_ecn`] with ECT(0) or
    /// ECT(1)) is marked Congestion Experienced instead of going unmarked (RFC 3168 5).
    pub ce_mark: f64,
    /// Mark an ECN-capable packet CE when the bytes waiting for serialization exceed this,
    /// as an AQM's step threshold would (RFC 3168 5; a DCTCP-style marking point);
    /// `usize::MAX` marks none. Ignored without `bandwidth`. Packets that are not
    /// ECN-capable are still only tail-dropped at `queue_limit`.
    pub ce_threshold: usize,
}

/// How the packets on a link are framed, so that [`AckCoalescing`] can find the TCP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// A bare TCP segment, header first (the TCP core's `Pair`).
    Tcp,
    /// An IPv4 or IPv6 packet, told apart by the version nibble.
    Ip,
    /// An Ethernet II frame (one 802.1Q tag allowed) carrying IPv4 or IPv6 (the in-memory link).
    Ethernet,
}

/// ACK coalescing at the receiving end of a link, as a receiver's GRO/LRO or a cable modem's
/// ACK thinning (DOCSIS) does it: the pure ACKs of one TCP flow that arrive within
/// `interval` of the first are merged, and only the newest is delivered, at the interval's
/// end. The ACKs it stands for are gone, so the sender sees one stretch ACK.
///
/// A pure ACK here is a TCP segment with ACK set, no payload and none of SYN, FIN or RST
/// (RFC 9293 3.1); over IPv4 an unfragmented one. Over IPv6 the TCP header must follow the
/// fixed header (no extension headers); anything else passes untouched. A flow is its
/// addresses and ports (ports alone under [`Framing::Tcp`]). Any other packet of a flow that
/// has an ACK held lets that ACK go first, so the flow's order is kept (as GRO flushes on a
/// packet it cannot merge). Merged ACKs are counted in [`LinkStats::acks_merged`].
///
/// Parsing reads a few header bytes in place; held ACKs keep their buffers, with no
/// allocation per packet once the link's spare buffers are warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckCoalescing {
    /// How long after the first ACK of a batch the batch's newest is delivered.
    pub interval: Duration,
    /// How the link's packets are framed.
    pub framing: Framing,
}

impl Default for LinkConfig {
    /// Return a perfect link: 1 ms of delay, infinitely fast, no impairments.
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_millis(1),
            bandwidth: None,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(2),
            duplicate: 0.0,
            corrupt: 0.0,
            queue_limit: usize::MAX,
            ack_coalescing: None,
            ce_mark: 0.0,
            ce_threshold: usize::MAX,
        }
    }
}

impl LinkConfig {
    /// Return `self` with one-way delay `delay`.
    pub fn with_delay(self, delay: Duration) -> Self {
        LinkConfig { delay, ..self }
    }

    /// Return `self` with a rate of `bits_per_second`.
    pub fn with_bandwidth(self, bits_per_second: u64) -> Self {
        LinkConfig { bandwidth: Some(bits_per_second), ..self }
    }

    /// Return `self` losing packets with probability `p`.
    pub fn with_loss(self, p: f64) -> Self {
        LinkConfig { loss: p, ..self }
    }

    /// Return `self` holding packets back by `delay` with probability `p`.
    pub fn with_reorder(self, p: f64, delay: Duration) -> Self {
        LinkConfig { reorder: p, reorder_delay: delay, ..self }
    }

    /// Return `self` duplicating packets with probability `p`.
    pub fn with_duplicate(self, p: f64) -> Self {
        LinkConfig { duplicate: p, ..self }
    }

    /// Return `self` marking ECN-capable packets CE above `bytes` of queue.
    pub fn with_ce_threshold(self, bytes: usize) -> Self {
        LinkConfig { ce_threshold: bytes, ..self }
    }

    /// Return `self` with probability `p` of marking an ECN-capable packet CE.
    pub fn with_ce_mark(self, p: f64) -> Self {
        LinkConfig { ce_mark: p, ..self }
    }

    /// Return `self` flipping one bit of a packet with probability `p`.
    pub fn with_corrupt(self, p: f64) -> Self {
        LinkConfig { corrupt: p, ..self }
    }

    /// Return `self` tail-dropping beyond `bytes` of queue.
    pub fn with_queue_limit(self, bytes: usize) -> Self {
        LinkConfig { queue_limit: bytes, ..self }
    }

    /// Return `self` merging the pure ACKs of a flow that arrive within `interval`, on a link
    /// of packets framed as `framing` (see [`AckCoalescing`]).
    pub fn with_ack_coalescing(self, interval: Duration, framing: Framing) -> Self {
        LinkConfig { ack_coalescing: Some(AckCoalescing { interval, framing }), ..self }
    }

    fn validate(&self) {
        for (name, p) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
            ("ce_mark", self.ce_mark),
        ] {
            assert!((0.0..=1.0).contains(&p), "LinkConfig::{name} = {p} is not a probability");
        }
        assert!(self.bandwidth != Some(0), "LinkConfig::bandwidth must not be zero");
    }
}

/// What a [`Link`] did with the packets sent into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets passed to [`Link::send`].
    pub sent: u64,
    /// Bytes passed to [`Link::send`].
    pub bytes_sent: u64,
    /// Packets returned by [`Link::recv`] (duplicates included).
    pub delivered: u64,
    /// Bytes returned by [`Link::recv`].
    pub bytes_delivered: u64,
    /// Packets lost at random.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies with a bit flipped.
    pub corrupted: u64,
    /// Copies held back by the reorder delay.
    pub reordered: u64,
    /// Packets tail-dropped because the queue was full.
    pub queue_dropped: u64,
    /// Pure ACKs replaced by a newer one of their flow under [`AckCoalescing`], never
    /// delivered.
    pub acks_merged: u64,
    /// ECN-capable packets marked Congestion Experienced (`ce_mark`, `ce_threshold`).
    pub ce_marked: u64,
}

/// A TCP flow as [`AckCoalescing`] tells them apart: the address bytes (IPv6's, IPv4's or
/// none) and the ports, zero-filled.
type FlowKey = [u8; 36];

/// A pure ACK held by [`AckCoalescing`] until `release`.
#[derive(Debug)]
struct Held {
    flow: FlowKey,
    release: Instant,
    sent_at: Instant,
    ecn: u8,
    data: Vec<u8>,
}

/// Return the flow of `packet` and whether it is a pure ACK, or `None` if it is no TCP
/// segment `framing` lets us read.
fn tcp_flow(packet: &[u8], framing: Framing) -> Option<(FlowKey, bool)> {
    let mut key = [0u8; 36];
    let ip = match framing {
        Framing::Tcp => return tcp_part(packet, packet.len(), key, 0),
        Framing::Ip => packet,
        Framing::Ethernet => {
            let mut at = 12;
            let mut ethertype = u16::from_be_bytes(packet.get(at..at + 2)?.try_into().ok()?);
            if ethertype == 0x8100 {
                at += 4;
                ethertype = u16::from_be_bytes(packet.get(at..at + 2)?.try_into().ok()?);
            }
            if ethertype != 0x0800 && ethertype != 0x86dd {
                return None;
            }
            packet.get(at + 2..)?
        }
    };
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?)).min(ip.len());
            // Protocol TCP, and not a fragment (MF clear, offset zero).
            if ip.get(9) != Some(&6) || u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?) & 0x3fff != 0 || ihl < 20 {
                return None;
            }
            key[..8].copy_from_slice(ip.get(12..20)?);
            tcp_part(ip.get(ihl..total)?, total.checked_sub(ihl)?, key, 8)
        }
        6 => {
            let total = (40 + usize::from(u16::from_be_bytes(ip.get(4..6)?.try_into().ok()?))).min(ip.len());
            if ip.get(6) != Some(&6) {
                return None;
            }
            key[..32].copy_from_slice(ip.get(8..40)?);
            tcp_part(ip.get(40..total)?, total.checked_sub(40)?, key, 32)
        }
        _ => None,
    }
}

/// Read the TCP header at the start of `tcp` (`len` bytes of segment): put its ports into
/// `key` at `at`, and say whether it is a pure ACK (ACK set, none of SYN, FIN, RST, and no
/// payload).
fn tcp_part(tcp: &[u8], len: usize, mut key: FlowKey, at: usize) -> Option<(FlowKey, bool)> {
    let header = tcp.get(..20)?;
    key[at..at + 4].copy_from_slice(&header[..4]);
    let data_offset = usize::from(header[12] >> 4) * 4;
    let flags = header[13];
    let (ack, syn_fin_rst) = (0x10, 0x07);
    let pure = flags & ack != 0 && flags & syn_fin_rst == 0 && len == data_offset;
    Some((key, pure))
}

/// A packet that came out of a [`Link`]; derefs to its bytes.
///
/// Hand it back with [`Link::recycle`] to reuse its buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    data: Vec<u8>,
    sent_at: Instant,
    due: Instant,
    ecn: u8,
}

impl Packet {
    /// Return the bytes as delivered (possibly corrupted).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Return the ECN field it arrived with (RFC 3168 5: 0 Not-ECT, 1 ECT(1), 2 ECT(0),
    /// 3 CE), as sent with [`Link::send_ecn`] or marked by the link.
    pub fn ecn(&self) -> u8 {
        self.ecn
    }

    /// Return when the packet was sent.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// Return when the packet was due for delivery.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// Return the buffer.
    pub fn into_vec(self) -> Vec<u8> {
        self.data
    }
}

impl Deref for Packet {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

/// A packet in flight, ordered by delivery time, then by the order it was enqueued.
#[derive(Debug)]
struct InFlight {
    due: Instant,
    id: u64,
    sent_at: Instant,
    ecn: u8,
    data: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.id).cmp(&(other.due, other.id))
    }
}

/// Spare buffers a link keeps for reuse.
const SPARE_BUFFERS: usize = 4096;

/// One direction of a simulated path.
///
/// Call [`send`](Link::send) with packets in time order, and [`recv`](Link::recv) to take the
/// ones due; [`next_delivery`](Link::next_delivery) says when the next one is. The same config,
/// seed and calls give the same deliveries, byte for byte (the RNG is `Xoshiro256PlusPlus`,
/// whose output `rand` promises to keep across releases).
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: Xoshiro256PlusPlus,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    next_id: u64,
    /// When the transmitter finishes the last accepted packet, in nanoseconds.
    tx_idle_ns: u64,
    stats: LinkStats,
    spare: Vec<Vec<u8>>,
    /// Pure ACKs held by [`AckCoalescing`], one per flow, in the order their batches began.
    held: Vec<Held>,
}

impl Link {
    /// Return an empty link.
    ///
    /// # Panics
    ///
    /// When a probability in `config` lies outside `0.0..=1.0`, or `bandwidth` is `Some(0)`.
    pub fn new(config: LinkConfig, seed: u64) -> Link {
        config.validate();
        Link {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            in_flight: BinaryHeap::new(),
            next_id: 0,
            tx_idle_ns: 0,
            stats: LinkStats::default(),
            spare: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Return the config.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Replace the config; packets already in flight keep their delivery times.
    ///
    /// # Panics
    ///
    /// As [`Link::new`].
    pub fn set_config(&mut self, config: LinkConfig) {
        config.validate();
        self.config = config;
    }

    /// Return the counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Return the number of packets in flight (held ACKs included).
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() + self.held.len()
    }

    /// Put `packet` on the link at `now`, not ECN-capable.
    pub fn send(&mut self, now: Instant, packet: &[u8]) {
        self.send_ecn(now, packet, 0);
    }

    /// Put `packet` on the link at `now` with the ECN field `ecn` of its IP header (RFC 3168
    /// 5, the two low bits); an ECN-capable packet (ECT(0), ECT(1)) may come out marked CE
    /// ([`LinkConfig::ce_mark`], [`LinkConfig::ce_threshold`]) where another would not be
    /// dropped. [`Packet::ecn`] gives the field as delivered.
    pub fn send_ecn(&mut self, now: Instant, packet: &[u8], ecn: u8) {
        let sent_ecn = ecn & 0b11;
        let mut ecn = sent_ecn;
        let len = packet.len();
        self.stats.sent += 1;
        self.stats.bytes_sent += len as u64;

        // Serialization: the packet starts when the transmitter is free and occupies it for
        // len * 8 / bandwidth; delivery counts from its last bit. Nanoseconds keep small
        // packets on fast links from rounding to a whole microsecond each.
        let mut leaves = now;
        if let Some(bps) = self.config.bandwidth {
            let now_ns = now.as_micros().saturating_mul(1000);
            let start_ns = self.tx_idle_ns.max(now_ns);
            let backlog = u128::from(start_ns - now_ns) * u128::from(bps) / 8_000_000_000;
            if backlog + len as u128 > self.config.queue_limit as u128 {
                self.stats.queue_dropped += 1;
                log::debug!("{now} link queue full ({backlog} bytes): tail-dropped {len} bytes");
                return;
            }
            if (ecn == 0b01 || ecn == 0b10) && backlog > self.config.ce_threshold as u128 {
                ecn = 0b11;
            }
            let tx_ns = (len as u128 * 8_000_000_000).div_ceil(u128::from(bps));
            self.tx_idle_ns = start_ns.saturating_add(tx_ns.min(u128::from(u64::MAX)) as u64);
            leaves = Instant::from_micros(self.tx_idle_ns.div_ceil(1000));
        }
        if self.roll(self.config.loss) {
            self.stats.lost += 1;
            log::trace!("{now} link lost {len} bytes");
            return;
        }
        if (ecn == 0b01 || ecn == 0b10) && self.roll(self.config.ce_mark) {
            ecn = 0b11;
        }
        if ecn == 0b11 && sent_ecn != 0b11 {
            self.stats.ce_marked += 1;
        }
        let due = leaves + self.config.delay;
        self.enqueue(now, due, packet, ecn);
        if self.roll(self.config.duplicate) {
            self.stats.duplicated += 1;
            self.enqueue(now, due, packet, ecn);
        }
    }

    fn enqueue(&mut self, now: Instant, mut due: Instant, packet: &[u8], ecn: u8) {
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(packet);
        if !data.is_empty() && self.roll(self.config.corrupt) {
            let bit = self.rng.random_range(0..data.len() * 8);
            data[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        if self.roll(self.config.reorder) {
            due += self.config.reorder_delay;
            self.stats.reordered += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight.push(Reverse(InFlight { due, id, sent_at: now, ecn, data }));
    }

    /// Return whether an event of probability `p` happens; draw nothing when `p` is zero.
    fn roll(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    /// Return when the next packet is due, if any is in flight.
    ///
    /// Under [`AckCoalescing`] this may be when a pure ACK reaches the far end only to be
    /// held: [`recv`](Link::recv) then returns nothing, and the next call says when the
    /// batch is released.
    pub fn next_delivery(&self) -> Option<Instant> {
        let held = self.held.iter().map(|h| h.release).min();
        let queued = self.in_flight.peek().map(|Reverse(p)| p.due);
        match (held, queued) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Take the next packet due at or before `now`: earliest due first, FIFO among equals.
    pub fn recv(&mut self, now: Instant) -> Option<Packet> {
        let Some(coalescing) = self.config.ack_coalescing else {
            return self.pop_due(now);
        };
        loop {
            let release = self.held.iter().enumerate().min_by_key(|(_, h)| h.release).map(|(i, h)| (i, h.release));
            let queued = self.in_flight.peek().map(|Reverse(p)| p.due).filter(|&due| due <= now);
            match (release, queued) {
                (Some((i, at)), queued) if at <= now && queued.is_none_or(|due| at <= due) => {
                    return Some(self.release(i, at));
                }
                (_, Some(due)) => {
                    let Reverse(p) = self.in_flight.peek()?;
                    let Some((flow, pure)) = tcp_flow(&p.data, coalescing.framing) else {
                        return self.pop_due(now);
                    };
                    let held = self.held.iter().position(|h| h.flow == flow);
                    match (pure, held) {
                        // Another packet of a flow with an ACK held: the ACK goes first.
                        (false, Some(i)) => return Some(self.release(i, due)),
                        (false, None) => return self.pop_due(now),
                        (true, Some(i)) => {
                            // Within the batch: the newer ACK replaces the held one.
                            let Reverse(p) = self.in_flight.pop()?;
                            let old = std::mem::replace(&mut self.held[i].data, p.data);
                            self.held[i].sent_at = p.sent_at;
                            self.held[i].ecn = p.ecn;
                            self.stats.acks_merged += 1;
                            self.give_back(old);
                        }
                        (true, None) => {
                            // The first of a batch: held until the interval ends.
                            let Reverse(p) = self.in_flight.pop()?;
                            let release = due + coalescing.interval;
                            self.held.push(Held { flow, release, sent_at: p.sent_at, ecn: p.ecn, data: p.data });
                        }
                    }
                }
                _ => return None,
            }
        }
    }

    /// Deliver the held ACK `i` at `due`.
    fn release(&mut self, i: usize, due: Instant) -> Packet {
        let h = self.held.remove(i);
        self.stats.delivered += 1;
        self.stats.bytes_delivered += h.data.len() as u64;
        Packet { data: h.data, sent_at: h.sent_at, due, ecn: h.ecn }
    }

    /// Take the packet at the head of the queue if it is due by `now`.
    fn pop_due(&mut self, now: Instant) -> Option<Packet> {
        if self.in_flight.peek()?.0.due > now {
            return None;
        }
        let Reverse(p) = self.in_flight.pop()?;
        self.stats.delivered += 1;
        self.stats.bytes_delivered += p.data.len() as u64;
        Some(Packet { data: p.data, sent_at: p.sent_at, due: p.due, ecn: p.ecn })
    }

    fn give_back(&mut self, data: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(data);
        }
    }

    /// Give a delivered packet's buffer back for reuse.
    pub fn recycle(&mut self, packet: Packet) {
        self.give_back(packet.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A 100-byte packet carrying its index.
    fn packet(i: u32) -> Vec<u8> {
        let mut p = vec![0u8; 100];
        p[..4].copy_from_slice(&i.to_be_bytes());
        p
    }

    fn index(p: &[u8]) -> u32 {
        u32::from_be_bytes(p[..4].try_into().unwrap())
    }

    /// Send `n` packets 100 us apart, then return every delivery in order.
    fn run(config: LinkConfig, seed: u64, n: u32) -> (Vec<(Instant, Vec<u8>)>, LinkStats) {
        let mut link = Link::new(config, seed);
        let mut out = Vec::new();
        for i in 0..n {
            let now = Instant::from_micros(u64::from(i) * 100);
            while let Some(p) = link.recv(now) {
                out.push((p.due(), p.to_vec()));
                link.recycle(p);
            }
            link.send(now, &packet(i));
        }
        while let Some(t) = link.next_delivery() {
            let p = link.recv(t).expect("due");
            assert_eq!(p.due(), t);
            out.push((t, p.into_vec()));
        }
        (out, link.stats())
    }

    #[test]
    fn perfect_link_delivers_in_order_after_delay() {
        let (out, stats) = run(LinkConfig::default(), 1, 100);
        assert_eq!(out.len(), 100);
        for (i, (t, p)) in out.iter().enumerate() {
            assert_eq!(index(p), i as u32);
            assert_eq!(*t, Instant::from_micros(i as u64 * 100) + MS);
        }
        assert_eq!(stats.sent, 100);
        assert_eq!(stats.delivered, 100);
        assert_eq!(stats.bytes_delivered, 100 * 100);
    }

    #[test]
    fn equal_times_are_fifo() {
        let mut link = Link::new(LinkConfig::default(), 1);
        for i in 0..50 {
            link.send(Instant::ZERO, &packet(i));
        }
        assert_eq!(link.next_delivery(), Some(Instant::ZERO + MS));
        assert!(link.recv(Instant::ZERO).is_none(), "nothing is due before the delay");
        let order: Vec<u32> = std::iter::from_fn(|| link.recv(Instant::ZERO + MS)).map(|p| index(&p)).collect();
        assert_eq!(order, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn loss_rate_matches_config() {
        let (out, stats) = run(LinkConfig::default().with_loss(0.1), 42, 10_000);
        // Binomial(10000, 0.1): sd = 30, so +-150 is five sd.
        assert!((850..=1150).contains(&stats.lost), "lost {}", stats.lost);
        assert_eq!(stats.delivered + stats.lost, stats.sent);
        assert_eq!(out.len() as u64, stats.delivered);
        // Survivors keep their order and their bytes.
        assert!(out.windows(2).all(|w| index(&w[0].1) < index(&w[1].1)));
        assert!(out.iter().all(|(_, p)| *p == packet(index(p))));
    }

    #[test]
    fn duplication_delivers_identical_copies() {
        let (out, stats) = run(LinkConfig::default().with_duplicate(0.2), 7, 10_000);
        assert!((1800..=2200).contains(&stats.duplicated), "duplicated {}", stats.duplicated);
        assert_eq!(stats.delivered, stats.sent + stats.duplicated);
        let copies = out.windows(2).filter(|w| w[0] == w[1]).count() as u64;
        assert_eq!(copies, stats.duplicated, "a copy follows its original at the same instant");
        assert!(out.iter().all(|(_, p)| *p == packet(index(p))));
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let mut link = Link::new(LinkConfig::default().with_corrupt(0.3), 9);
        let mut flipped = 0;
        for i in 0..10_000u32 {
            let original = packet(i);
            link.send(Instant::ZERO, &original);
            let got = link.recv(Instant::ZERO + MS).expect("no loss");
            let bits: u32 = got.iter().zip(&original).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert!(bits <= 1, "packet {i}: {bits} bits flipped");
            flipped += u64::from(bits);
            assert_eq!(got.len(), original.len());
        }
        assert_eq!(flipped, link.stats().corrupted);
        assert!((2700..=3300).contains(&flipped), "corrupted {flipped}");
    }

    #[test]
    fn corruption_reaches_every_byte() {
        let mut link = Link::new(LinkConfig::default().with_corrupt(1.0), 3);
        let mut seen = [false; 100];
        for _ in 0..5_000 {
            link.send(Instant::ZERO, &[0u8; 100]);
            let got = link.recv(Instant::ZERO + MS).expect("no loss");
            let at = got.iter().position(|&b| b != 0).expect("one bit flipped");
            seen[at] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn reordering_lets_later_packets_overtake() {
        let config = LinkConfig::default().with_reorder(0.1, 3 * MS);
        let (out, stats) = run(config, 11, 10_000);
        assert_eq!(out.len(), 10_000, "reordering loses nothing");
        assert!((850..=1150).contains(&stats.reordered), "reordered {}", stats.reordered);
        let inversions = out.windows(2).filter(|w| index(&w[0].1) > index(&w[1].1)).count() as u64;
        assert!(inversions > 0);
        let mut indices: Vec<u32> = out.iter().map(|(_, p)| index(p)).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..10_000).collect::<Vec<_>>());
        // A held-back packet arrives reorder_delay late.
        let late = out.iter().filter(|(t, p)| *t == Instant::from_micros(u64::from(index(p)) * 100) + 4 * MS);
        assert_eq!(late.count() as u64, stats.reordered);
    }

    #[test]
    fn bandwidth_spaces_deliveries_by_serialization_time() {
        // 1500 bytes at 12 Mbit/s take exactly 1 ms on the wire.
        let config = LinkConfig::default().with_delay(10 * MS).with_bandwidth(12_000_000);
        let mut link = Link::new(config, 1);
        for _ in 0..100 {
            link.send(Instant::ZERO, &[0u8; 1500]);
        }
        let mut times = Vec::new();
        while let Some(t) = link.next_delivery() {
            link.recv(t).expect("due");
            times.push(t);
        }
        let expected: Vec<Instant> = (1..=100).map(|k| Instant::ZERO + 10 * MS + k * MS).collect();
        assert_eq!(times, expected);

        // A packet sent into an idle link goes straight out; one sent while busy waits.
        link.send(Instant::from_millis(1000), &[0u8; 1500]);
        link.send(Instant::from_millis(1000), &[0u8; 150]);
        assert_eq!(link.recv(Instant::from_millis(1011)).map(|p| p.len()), Some(1500));
        assert_eq!(link.next_delivery(), Some(Instant::from_micros(1_011_100)));
    }

    #[test]
    fn bandwidth_caps_throughput() {
        // Offer 10 Mbit/s for one second into a 1 Mbit/s link: 125 kB get through per second.
        let config = LinkConfig::default().with_bandwidth(1_000_000);
        let mut link = Link::new(config, 1);
        let mut delivered = 0;
        for ms in 0..1000u64 {
            let now = Instant::from_millis(ms);
            link.send(now, &[0u8; 1250]);
            while let Some(p) = link.recv(now) {
                delivered += p.len();
            }
        }
        // 125_000 bytes per second, minus what is still on the wire or in the delay.
        assert!((123_000..=125_000).contains(&delivered), "delivered {delivered}");
        assert_eq!(link.stats().queue_dropped, 0);
        // The queue still holds 900 packets: the next leaves the wire at 1000 ms, arriving 1 ms later.
        assert_eq!(link.next_delivery(), Some(Instant::from_millis(1001)));
    }

    #[test]
    fn queue_limit_tail_drops() {
        let config = LinkConfig::default().with_bandwidth(12_000_000).with_queue_limit(15_000);
        let mut link = Link::new(config, 1);
        for _ in 0..100 {
            link.send(Instant::ZERO, &[0u8; 1500]);
        }
        assert_eq!(link.stats().queue_dropped, 90);
        assert_eq!(link.in_flight(), 10);
        // Half a millisecond later half a packet has drained: still no room for a whole one.
        link.send(Instant::from_micros(500), &[0u8; 1500]);
        assert_eq!(link.stats().queue_dropped, 91);
        link.send(Instant::from_millis(1), &[0u8; 1500]);
        assert_eq!(link.in_flight(), 11);
    }

    #[test]
    fn same_seed_same_run() {
        let config = LinkConfig::default()
            .with_loss(0.05)
            .with_reorder(0.1, 3 * MS)
            .with_duplicate(0.01)
            .with_corrupt(0.01)
            .with_bandwidth(10_000_000);
        let a = run(config, 1234, 5_000);
        let b = run(config, 1234, 5_000);
        assert_eq!(a, b);
        let c = run(config, 1235, 5_000);
        assert_ne!(a.0, c.0);
    }

    /// A bare TCP header from port `src` with `flags` and `payload` bytes of data; the
    /// acknowledgment number carries `tag`.
    fn tcp(src: u16, flags: u8, payload: usize, tag: u32) -> Vec<u8> {
        let mut p = vec![0u8; 20 + payload];
        p[..2].copy_from_slice(&src.to_be_bytes());
        p[2..4].copy_from_slice(&80u16.to_be_bytes());
        p[8..12].copy_from_slice(&tag.to_be_bytes());
        p[12] = 5 << 4;
        p[13] = flags;
        p
    }

    fn ack_no(p: &[u8]) -> u32 {
        u32::from_be_bytes(p[8..12].try_into().unwrap())
    }

    const ACK: u8 = 0x10;

    #[test]
    fn pure_acks_of_a_flow_are_merged_per_interval() {
        let config = LinkConfig::default().with_ack_coalescing(Duration::from_micros(250), Framing::Tcp);
        let mut link = Link::new(config, 1);
        // Ten pure ACKs 50 us apart from one flow, two from another, one ACK with a FIN.
        for i in 0..10u32 {
            link.send(Instant::from_micros(u64::from(i) * 50), &tcp(1000, ACK, 0, i));
        }
        link.send(Instant::from_micros(10), &tcp(2000, ACK, 0, 100));
        link.send(Instant::from_micros(20), &tcp(2000, ACK, 0, 101));
        link.send(Instant::from_micros(30), &tcp(3000, ACK | 0x01, 0, 200));
        let mut out = Vec::new();
        while let Some(t) = link.next_delivery() {
            while let Some(p) = link.recv(t) {
                out.push((p.due(), u16::from_be_bytes([p[0], p[1]]), ack_no(&p)));
            }
        }
        let us = |n: u64| Instant::from_micros(1000 + n);
        assert_eq!(
            out,
            [
                // The FIN passes at once; flow 1000's batches end 250 us after their first.
                (us(30), 3000, 200),
                // The sixth arrives as the first batch ends: it begins the next.
                (us(250), 1000, 4),
                (us(260), 2000, 101),
                (us(500), 1000, 9),
            ]
        );
        let stats = link.stats();
        assert_eq!((stats.acks_merged, stats.delivered, stats.sent), (9, 4, 13));
        assert_eq!(link.in_flight(), 0);
    }

    #[test]
    fn data_lets_a_held_ack_of_its_flow_go_first() {
        let config = LinkConfig::default().with_ack_coalescing(Duration::from_millis(1), Framing::Tcp);
        let mut link = Link::new(config, 1);
        link.send(Instant::ZERO, &tcp(1000, ACK, 0, 1));
        link.send(Instant::from_micros(100), &tcp(1000, ACK, 10, 2));
        link.send(Instant::from_micros(200), &tcp(1000, 0x02, 0, 3));
        let mut got = Vec::new();
        while let Some(t) = link.next_delivery() {
            while let Some(p) = link.recv(t) {
                got.push((p.due(), ack_no(&p)));
            }
        }
        let us = |n: u64| Instant::from_micros(1000 + n);
        assert_eq!(got, [(us(100), 1), (us(100), 2), (us(200), 3)], "the data segment and the SYN are no pure ACKs");
    }

    #[test]
    fn pure_acks_are_found_in_ipv4_ipv6_and_ethernet() {
        let segment = tcp(1000, ACK, 0, 7);
        let mut v4 = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        v4.extend_from_slice(&segment);
        let mut v6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        v6.extend_from_slice(&[0xfe; 32]);
        v6.extend_from_slice(&segment);
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0, 1, 0x08, 0x00]);
        frame.extend_from_slice(&v4);
        assert_eq!(tcp_flow(&v4, Framing::Ip).map(|f| f.1), Some(true));
        assert_eq!(tcp_flow(&v6, Framing::Ip).map(|f| f.1), Some(true));
        assert_eq!(tcp_flow(&frame, Framing::Ethernet).map(|f| f.1), Some(true));
        assert_ne!(tcp_flow(&v4, Framing::Ip).unwrap().0, tcp_flow(&v6, Framing::Ip).unwrap().0);
        // A fragment, UDP, a payload, a short packet: no pure ACK.
        let mut fragment = v4.clone();
        fragment[6] = 0x20;
        assert_eq!(tcp_flow(&fragment, Framing::Ip), None);
        let mut udp = v4.clone();
        udp[9] = 17;
        assert_eq!(tcp_flow(&udp, Framing::Ip), None);
        let mut data = v4.clone();
        data[3] = 41;
        data.push(0);
        assert_eq!(tcp_flow(&data, Framing::Ip).map(|f| f.1), Some(false));
        assert_eq!(tcp_flow(&v4[..30], Framing::Ip), None);
    }

    #[test]
    #[should_panic(expected = "not a probability")]
    fn rejects_bad_probability() {
        Link::new(LinkConfig::default().with_loss(1.5), 0);
    }
}
