//! ARP (RFC 826): answer requests for our address, resolve peers, cache with expiry, retry,
//! and hold frames while resolving.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use bypass_tcp::Instant;
use etherparse::{ArpEthIpv4Packet, ArpOperation, ArpPacketSlice, EtherType, Ethernet2Header};

/// Length of an ARP frame: Ethernet header plus the Ethernet/IPv4 ARP packet.
pub const ARP_FRAME_LEN: usize = 14 + ArpEthIpv4Packet::LEN;

/// ARP settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// How long a learned mapping stays valid.
    pub ttl: Duration,
    /// Time between requests for an unresolved address.
    pub retry: Duration,
    /// Requests sent before giving up (queued frames are then dropped).
    pub retries: u32,
    /// Frames held per unresolved address; more are dropped.
    pub queue_limit: usize,
}

impl Default for ArpConfig {
    fn default() -> Self {
        ArpConfig { ttl: Duration::from_secs(60), retry: Duration::from_secs(1), retries: 3, queue_limit: 64 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: [u8; 6],
    expires: Instant,
}

#[derive(Debug, Default)]
struct Pending {
    requests: u32,
    next_request: Instant,
    /// Complete frames whose destination MAC is filled in on resolution.
    frames: VecDeque<Vec<u8>>,
}

/// What a request or reply told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpMessage {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// Parse an Ethernet/IPv4 ARP packet (the payload of an ARP frame).
pub fn parse(payload: &[u8]) -> Option<ArpMessage> {
    let packet = ArpPacketSlice::from_slice(payload).ok()?.to_packet().try_eth_ipv4().ok()?;
    Some(ArpMessage {
        operation: packet.operation,
        sender_mac: packet.sender_mac,
        sender_ip: packet.sender_ipv4_addr(),
        target_ip: packet.target_ipv4_addr(),
    })
}

/// Write an ARP frame into `buf` (at least [`ARP_FRAME_LEN`] bytes); return its length.
pub fn write_frame(
    buf: &mut [u8],
    operation: ArpOperation,
    our_mac: [u8; 6],
    our_ip: Ipv4Addr,
    target_mac: [u8; 6],
    target_ip: Ipv4Addr,
) -> usize {
    let eth_dst = if operation == ArpOperation::REQUEST { [0xff; 6] } else { target_mac };
    let eth = Ethernet2Header { source: our_mac, destination: eth_dst, ether_type: EtherType::ARP };
    buf[..14].copy_from_slice(&eth.to_bytes());
    let arp = ArpEthIpv4Packet {
        operation,
        sender_mac: our_mac,
        sender_ipv4: our_ip.octets(),
        target_mac: if operation == ArpOperation::REQUEST { [0; 6] } else { target_mac },
        target_ipv4: target_ip.octets(),
    };
    buf[14..ARP_FRAME_LEN].copy_from_slice(&arp.to_bytes());
    ARP_FRAME_LEN
}

/// The neighbour cache and the resolutions in progress.
#[derive(Debug, Default)]
pub struct ArpCache {
    config: ArpConfig,
    entries: HashMap<Ipv4Addr, Entry>,
    pending: HashMap<Ipv4Addr, Pending>,
}

impl ArpCache {
    /// Return an empty cache.
    pub fn new(config: ArpConfig) -> Self {
        ArpCache { config, entries: HashMap::new(), pending: HashMap::new() }
    }

    /// Return the MAC address of `ip` if known and fresh.
    pub fn lookup(&self, ip: Ipv4Addr, now: Instant) -> Option<[u8; 6]> {
        self.entries.get(&ip).filter(|e| e.expires > now).map(|e| e.mac)
    }

    /// Record `ip` at `mac` (RFC 826: from a request aimed at us, or any reply or update);
    /// return frames that were waiting for it, their destination MAC filled in.
    pub fn learn(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) -> VecDeque<Vec<u8>> {
        self.entries.insert(ip, Entry { mac, expires: now + self.config.ttl });
        let mut frames = self.pending.remove(&ip).map(|p| p.frames).unwrap_or_default();
        for frame in &mut frames {
            frame[..6].copy_from_slice(&mac);
        }
        frames
    }

    /// RFC 826's merge step: refresh `ip` only if it is already in the table.
    pub fn refresh(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) -> bool {
        match self.entries.get_mut(&ip) {
            Some(e) => {
                *e = Entry { mac, expires: now + self.config.ttl };
                true
            }
            None => false,
        }
    }

    /// Hold `frame` until `ip` resolves. Return `Err(frame)` when the queue is full.
    pub fn hold(&mut self, ip: Ipv4Addr, frame: Vec<u8>, now: Instant) -> Result<(), Vec<u8>> {
        let p = self.pending.entry(ip).or_insert_with(|| Pending { next_request: now, ..Pending::default() });
        if p.frames.len() >= self.config.queue_limit {
            return Err(frame);
        }
        p.frames.push_back(frame);
        Ok(())
    }

    /// Return whether `ip` is being resolved.
    pub fn resolving(&self, ip: Ipv4Addr) -> bool {
        self.pending.contains_key(&ip)
    }

    /// Start resolving `ip` if nobody is (a request goes out at the next `due_requests`).
    pub fn resolve(&mut self, ip: Ipv4Addr, now: Instant) {
        if self.lookup(ip, now).is_none() {
            self.pending.entry(ip).or_insert_with(|| Pending { next_request: now, ..Pending::default() });
        }
    }

    /// Call `request` for each address due a (re)request; give up on those out of retries,
    /// returning how many held frames were dropped.
    pub fn due_requests(&mut self, now: Instant, mut request: impl FnMut(Ipv4Addr)) -> usize {
        let mut dropped = 0;
        let config = self.config;
        self.pending.retain(|&ip, p| {
            if p.next_request > now {
                return true;
            }
            if p.requests >= config.retries {
                log::debug!("ARP: {ip} did not answer {} requests; dropping {} frames", p.requests, p.frames.len());
                dropped += p.frames.len();
                return false;
            }
            p.requests += 1;
            p.next_request = now + config.retry;
            request(ip);
            true
        });
        dropped
    }

    /// Return when `due_requests` next has work.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_request).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, last)
    }

    #[test]
    fn request_round_trips_through_bytes() {
        let mut buf = [0xa5u8; 64];
        let n = write_frame(&mut buf, ArpOperation::REQUEST, MAC, ip(1), [0; 6], ip(2));
        assert_eq!(n, 42);
        assert_eq!(&buf[..6], &[0xff; 6]);
        assert_eq!(&buf[12..14], &[0x08, 0x06]);
        let msg = parse(&buf[14..n]).unwrap();
        assert_eq!(
            msg,
            ArpMessage { operation: ArpOperation::REQUEST, sender_mac: MAC, sender_ip: ip(1), target_ip: ip(2) }
        );
        assert_eq!(buf[n], 0xa5);
        assert_eq!(parse(&buf[14..30]), None, "truncated");
    }

    #[test]
    fn entries_expire() {
        let mut cache = ArpCache::new(ArpConfig::default());
        cache.learn(ip(2), PEER_MAC, Instant::ZERO);
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(59_999)), Some(PEER_MAC));
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(60_000)), None);
        assert!(cache.refresh(ip(2), MAC, Instant::from_millis(60_000)));
        assert!(!cache.refresh(ip(3), MAC, Instant::ZERO));
    }

    #[test]
    fn held_frames_are_released_with_the_mac_filled_in() {
        let mut cache = ArpCache::new(ArpConfig { queue_limit: 2, ..ArpConfig::default() });
        cache.hold(ip(2), vec![0; 20], Instant::ZERO).unwrap();
        cache.hold(ip(2), vec![0; 20], Instant::ZERO).unwrap();
        assert!(cache.hold(ip(2), vec![0; 20], Instant::ZERO).is_err());
        let mut asked = Vec::new();
        cache.due_requests(Instant::ZERO, |a| asked.push(a));
        assert_eq!(asked, vec![ip(2)]);
        let frames = cache.learn(ip(2), PEER_MAC, Instant::from_millis(5));
        assert_eq!(frames.len(), 2);
        assert!(frames.iter().all(|f| f[..6] == PEER_MAC));
        assert!(!cache.resolving(ip(2)));
    }

    #[test]
    fn resolution_retries_then_gives_up() {
        let mut cache = ArpCache::new(ArpConfig::default());
        cache.hold(ip(9), vec![0; 20], Instant::ZERO).unwrap();
        let mut asked = 0;
        let mut dropped = 0;
        for s in 0..10 {
            dropped += cache.due_requests(Instant::from_millis(s * 1000), |_| asked += 1);
        }
        assert_eq!((asked, dropped), (3, 1));
        assert_eq!(cache.next_timeout(), None);
    }
}
