//! ARP (RFC 826): resolve peers, cache with expiry, retry, and hold frames while resolving.
//! The message codec is [`crate::wire::arp`].

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use bypass_tcp::Instant;

/// ARP settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// How long a learned mapping stays valid.
    pub ttl: Duration,
    /// Least time between two requests for one address (Linux `retrans_time`, 1 s): the
    /// retry interval of a resolution, and the rate limit across resolutions, so a mapping
    /// that keeps being evicted or failing cannot make us broadcast faster.
    pub retry: Duration,
    /// Requests sent before giving up (queued frames are then dropped).
    pub retries: u32,
    /// Frames held per unresolved address; more are dropped.
    pub queue_limit: usize,
    /// Most addresses in the cache, resolved or being resolved (Linux `gc_thresh3`, 1024 by
    /// default). A new one evicts the least recently confirmed mapping; when every slot is
    /// a resolution holding frames, the new address is not cached (at least 1).
    pub max_entries: usize,
}

impl Default for ArpConfig {
    fn default() -> Self {
        ArpConfig {
            ttl: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            retries: 3,
            queue_limit: 64,
            max_entries: 1024,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: [u8; 6],
    expires: Instant,
    /// Orders confirmations: the entry's record in `ArpCache::order` carries the same.
    stamp: u64,
}

#[derive(Debug, Default)]
struct Pending {
    requests: u32,
    next_request: Instant,
    /// Complete frames whose destination MAC is filled in on resolution.
    frames: VecDeque<Vec<u8>>,
}

/// What [`ArpCache::due_requests`] did besides asking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueRequests {
    /// Held frames dropped with resolutions that gave up.
    pub dropped: usize,
    /// Requests held back by the per-address rate limit ([`ArpConfig::retry`]).
    pub suppressed: usize,
}

/// The neighbour cache and the resolutions in progress, bounded together by
/// [`ArpConfig::max_entries`].
#[derive(Debug, Default)]
pub struct ArpCache {
    config: ArpConfig,
    entries: HashMap<Ipv4Addr, Entry>,
    /// Resolved addresses, least recently confirmed first, each with the stamp its entry
    /// had then; a record whose stamp no longer matches its entry is stale and skipped.
    order: VecDeque<(Ipv4Addr, u64)>,
    next_stamp: u64,
    pending: HashMap<Ipv4Addr, Pending>,
    /// When each address was last asked for; older than `retry` means free to ask again.
    asked: HashMap<Ipv4Addr, Instant>,
    /// The last address looked up, with its MAC and expiry, as in `entries`: a host sends
    /// most frames to one next hop (its gateway, or the one peer of a link), so a lookup
    /// that hits this skips hashing the address (SipHash, about 400 instructions a frame).
    /// Kept equal to `entries`' entry, or cleared, wherever an entry changes or goes.
    last: Cell<Option<(Ipv4Addr, [u8; 6], Instant)>>,
    /// Changes whenever an entry is added, changed or removed ([`version`](Self::version)).
    version: u64,
}

impl ArpCache {
    /// Return an empty cache.
    pub fn new(config: ArpConfig) -> Self {
        ArpCache { config, ..ArpCache::default() }
    }

    /// Return the MAC address of `ip` if known and fresh. Inlined down to the check of the
    /// last address looked up, which answers for every segment a connection sends to the
    /// same next hop; the table's lookup out of line.
    #[inline]
    pub fn lookup(&self, ip: Ipv4Addr, now: Instant) -> Option<[u8; 6]> {
        self.lookup_expiring(ip, now).map(|(mac, _)| mac)
    }

    /// [`lookup`](Self::lookup), with when the entry expires: until then, and while the
    /// [`version`](Self::version) stays the same, every lookup of `ip` returns the same MAC.
    #[inline]
    pub fn lookup_expiring(&self, ip: Ipv4Addr, now: Instant) -> Option<([u8; 6], Instant)> {
        if let Some((last, mac, expires)) = self.last.get()
            && last == ip
        {
            return (expires > now).then_some((mac, expires));
        }
        self.lookup_entry(ip, now)
    }

    /// [`lookup_expiring`](Self::lookup_expiring) of an address other than the last one
    /// looked up.
    #[inline(never)]
    fn lookup_entry(&self, ip: Ipv4Addr, now: Instant) -> Option<([u8; 6], Instant)> {
        let entry = self.entries.get(&ip)?;
        self.last.set(Some((ip, entry.mac, entry.expires)));
        (entry.expires > now).then_some((entry.mac, entry.expires))
    }

    /// Return a number that changes whenever an entry is added, changed (its MAC or its
    /// expiry) or removed: a caller that remembers a lookup's answer with this number and
    /// the entry's expiry may take it again, without the lookup, while both hold.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Record `ip` at `mac` (RFC 826: from a request aimed at us, or any reply or update);
    /// return frames that were waiting for it, their destination MAC filled in. A new
    /// address takes the place of the least recently confirmed one when the cache is full,
    /// and is not cached if every place holds frames for a resolution.
    pub fn learn(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) -> VecDeque<Vec<u8>> {
        let known = self.entries.contains_key(&ip);
        let mut frames = match self.pending.remove(&ip) {
            Some(p) => p.frames,
            None if known || self.make_room(ip) => VecDeque::new(),
            None => {
                log::debug!("ARP: cache full of resolutions holding frames; not caching {ip}");
                return VecDeque::new();
            }
        };
        self.confirm(ip, mac, now);
        for frame in &mut frames {
            frame[..6].copy_from_slice(&mac);
        }
        frames
    }

    /// RFC 826's merge step: refresh `ip` only if it is already in the table.
    pub fn refresh(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) -> bool {
        if !self.entries.contains_key(&ip) {
            return false;
        }
        self.confirm(ip, mac, now);
        true
    }

    /// Set `ip`'s entry to `mac`, fresh from `now`, and make it the most recently confirmed.
    fn confirm(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let expires = now + self.config.ttl;
        self.entries.insert(ip, Entry { mac, expires, stamp });
        self.version += 1;
        if self.last.get().is_some_and(|(last, _, _)| last == ip) {
            self.last.set(Some((ip, mac, expires)));
        }
        self.order.push_back((ip, stamp));
        // Every confirmation leaves a record; drop the stale ones before they outnumber
        // the live ones (amortised O(1) per confirmation).
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order.retain(|(ip, stamp)| entries.get(ip).is_some_and(|e| e.stamp == *stamp));
        }
    }

    /// Make room for one more address (`ip`, not yet in the cache) if the cache is full:
    /// evict the least recently confirmed mapping (expired ones are the oldest), else a
    /// resolution holding no frames. Return false if every place holds frames (Linux's
    /// forced garbage collection likewise spares entries in use and then refuses).
    fn make_room(&mut self, ip: Ipv4Addr) -> bool {
        let limit = self.config.max_entries.max(1);
        while self.entries.len() + self.pending.len() >= limit {
            if let Some((old, stamp)) = self.order.pop_front() {
                if self.entries.get(&old).is_some_and(|e| e.stamp == stamp) {
                    self.entries.remove(&old);
                    self.version += 1;
                    if self.last.get().is_some_and(|(last, _, _)| last == old) {
                        self.last.set(None);
                    }
                    log::debug!("ARP: cache full ({limit} addresses); evicted {old} for {ip}");
                }
                continue;
            }
            let Some(&idle) = self.pending.iter().find(|(_, p)| p.frames.is_empty()).map(|(a, _)| a) else {
                return false;
            };
            self.pending.remove(&idle);
            log::debug!("ARP: cache full ({limit} addresses); stopped resolving {idle} for {ip}");
        }
        true
    }

    /// Hold `frame` until `ip` resolves. Return `Err(frame)` when the queue is full, or
    /// when the cache is full of other resolutions holding frames.
    pub fn hold(&mut self, ip: Ipv4Addr, frame: Vec<u8>, now: Instant) -> Result<(), Vec<u8>> {
        if !self.pending.contains_key(&ip) && !self.make_room(ip) {
            return Err(frame);
        }
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

    /// Start resolving `ip` if nobody is (a request goes out at the next `due_requests`,
    /// or once `retry` has passed since the last one for `ip`). Nothing starts when the
    /// cache is full of resolutions holding frames.
    pub fn resolve(&mut self, ip: Ipv4Addr, now: Instant) {
        if self.lookup(ip, now).is_none() && !self.pending.contains_key(&ip) && self.make_room(ip) {
            self.pending.insert(ip, Pending { next_request: now, ..Pending::default() });
        }
    }

    /// Call `request` for each address due a (re)request, at most once per address per
    /// `retry` (RFC 1122 2.3.2.1: prevent ARP flooding; Linux `retrans_time`); give up on
    /// those out of retries.
    pub fn due_requests(&mut self, now: Instant, mut request: impl FnMut(Ipv4Addr)) -> DueRequests {
        let mut due = DueRequests::default();
        if self.pending.is_empty() {
            // Called on every poll: skip the walk over an empty table's buckets.
            return due;
        }
        let config = self.config;
        let asked = &mut self.asked;
        self.pending.retain(|&ip, p| {
            if p.next_request > now {
                return true;
            }
            if p.requests >= config.retries {
                log::debug!("ARP: {ip} did not answer {} requests; dropping {} frames", p.requests, p.frames.len());
                due.dropped += p.frames.len();
                return false;
            }
            if let Some(&last) = asked.get(&ip)
                && now < last + config.retry
            {
                log::debug!("ARP: request for {ip} held back: asked {:?} ago", now.saturating_duration_since(last));
                due.suppressed += 1;
                p.next_request = last + config.retry;
                return true;
            }
            if asked.len() >= config.max_entries.max(1) {
                asked.retain(|_, &mut last| now < last + config.retry);
            }
            if asked.len() >= config.max_entries.max(1) {
                // More addresses asked for within one interval than the cache holds.
                log::debug!(
                    "ARP: request for {ip} held back: {} addresses asked for within {:?}",
                    asked.len(),
                    config.retry
                );
                due.suppressed += 1;
                p.next_request = now + config.retry;
                return true;
            }
            asked.insert(ip, now);
            p.requests += 1;
            p.next_request = now + config.retry;
            request(ip);
            true
        });
        due
    }

    /// Return whether a resolution is in progress (`due_requests` may have work).
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Return when [`due_requests`](Self::due_requests) next has work (`None`: none pending).
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

    // ---------------------------------------------------------------------------------
    // Basic caching.
    // ---------------------------------------------------------------------------------

    #[test]
    fn entries_expire() {
        let mut cache = ArpCache::new(ArpConfig::default());
        cache.learn(ip(2), PEER_MAC, Instant::ZERO);
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(59_999)), Some(PEER_MAC));
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(60_000)), None);
        assert!(cache.refresh(ip(2), MAC, Instant::from_millis(60_000)));
        assert!(!cache.refresh(ip(3), MAC, Instant::ZERO));
    }

    /// Every change of an entry (learned, refreshed, changed, evicted) changes the version,
    /// and nothing else does: an answer remembered with it (`Sock::hop`) stands exactly
    /// while lookups would give it.
    #[test]
    fn the_version_changes_with_every_entry_and_only_then() {
        let mut cache = small(2);
        let mut seen = cache.version();
        let mut changed = |cache: &ArpCache, expected: bool| {
            assert_eq!(cache.version() != seen, expected);
            seen = cache.version();
        };
        cache.learn(ip(2), PEER_MAC, ms(0));
        changed(&cache, true);
        assert_eq!(cache.lookup_expiring(ip(2), ms(1)), Some((PEER_MAC, ms(60_000))));
        assert_eq!(cache.lookup(ip(3), ms(1)), None);
        cache.resolve(ip(4), ms(1));
        changed(&cache, false);
        cache.refresh(ip(2), PEER_MAC, ms(2));
        changed(&cache, true);
        assert!(!cache.refresh(ip(3), MAC, ms(3)));
        changed(&cache, false);
        cache.learn(ip(2), MAC, ms(4));
        changed(&cache, true);
        // Room for ip(5) (beside ip(4)'s resolution) evicts ip(2).
        cache.learn(ip(5), MAC, ms(5));
        changed(&cache, true);
        assert_eq!(cache.lookup(ip(2), ms(5)), None);
    }

    #[test]
    fn the_last_lookup_follows_changes_and_evictions() {
        const OTHER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];
        let mut cache = small(1);
        cache.learn(ip(2), PEER_MAC, Instant::ZERO);
        assert_eq!(cache.lookup(ip(2), Instant::ZERO), Some(PEER_MAC));
        // The same address, now at another MAC (a gratuitous ARP), and refreshed later.
        cache.learn(ip(2), OTHER_MAC, Instant::from_millis(50_000));
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(60_000)), Some(OTHER_MAC));
        assert_eq!(cache.lookup(ip(3), Instant::from_millis(60_000)), None);
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(60_000)), Some(OTHER_MAC));
        // A one-address cache evicts 10.0.0.2 for 10.0.0.3.
        cache.learn(ip(3), MAC, Instant::from_millis(60_000));
        assert_eq!(cache.lookup(ip(2), Instant::from_millis(60_000)), None);
        assert_eq!(cache.lookup(ip(3), Instant::from_millis(60_000)), Some(MAC));
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
            dropped += cache.due_requests(Instant::from_millis(s * 1000), |_| asked += 1).dropped;
        }
        assert_eq!((asked, dropped), (3, 1));
        assert_eq!(cache.next_timeout(), None);
    }

    // ---------------------------------------------------------------------------------
    // The bound: evict the stalest mapping, spare held frames.
    // ---------------------------------------------------------------------------------

    fn small(max_entries: usize) -> ArpCache {
        ArpCache::new(ArpConfig { max_entries, ..ArpConfig::default() })
    }

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_confirmed_mapping() {
        let mut cache = small(4);
        for i in 1..=4 {
            cache.learn(ip(i), PEER_MAC, ms(u64::from(i)));
        }
        // Confirming 1 again makes 2 the stalest.
        cache.learn(ip(1), PEER_MAC, ms(10));
        cache.refresh(ip(3), PEER_MAC, ms(11));
        cache.learn(ip(5), PEER_MAC, ms(12));
        assert_eq!(cache.lookup(ip(2), ms(12)), None, "the stalest went");
        for i in [1, 3, 4, 5] {
            assert_eq!(cache.lookup(ip(i), ms(12)), Some(PEER_MAC), "{i} stays");
        }
        cache.learn(ip(6), PEER_MAC, ms(13));
        assert_eq!(cache.lookup(ip(4), ms(13)), None, "then the next stalest");
        assert_eq!(cache.entries.len(), 4);
    }

    #[test]
    fn expired_mappings_go_before_live_ones() {
        let mut cache = small(2);
        cache.learn(ip(1), PEER_MAC, ms(0));
        cache.learn(ip(2), PEER_MAC, ms(50_000));
        // At 61 s, 1 has expired and 2 has not.
        cache.learn(ip(3), PEER_MAC, ms(61_000));
        assert!(!cache.entries.contains_key(&ip(1)));
        assert_eq!(cache.lookup(ip(2), ms(61_000)), Some(PEER_MAC));
    }

    #[test]
    fn a_flood_of_new_addresses_stays_within_the_bound() {
        let mut cache = small(1024);
        for i in 0..100_000u32 {
            let a = Ipv4Addr::from(0x0a00_0000 + i);
            cache.learn(a, PEER_MAC, Instant::from_micros(u64::from(i)));
            if i % 7 == 0 {
                // Refreshes leave stale records behind; they are compacted.
                cache.refresh(a, PEER_MAC, Instant::from_micros(u64::from(i)));
            }
        }
        assert_eq!(cache.entries.len(), 1024);
        assert!(cache.order.len() <= 2 * 1024 + 16, "{}", cache.order.len());
        // The newest survive.
        assert!(cache.lookup(Ipv4Addr::from(0x0a00_0000 + 99_999), Instant::from_micros(100_000)).is_some());
    }

    #[test]
    fn resolutions_count_against_the_bound_and_mappings_go_first() {
        let mut cache = small(2);
        cache.learn(ip(1), PEER_MAC, ms(0));
        cache.hold(ip(9), vec![0; 20], ms(1)).unwrap();
        // A second resolution: the mapping makes room, not the held frame.
        cache.hold(ip(8), vec![0; 20], ms(2)).unwrap();
        assert_eq!(cache.lookup(ip(1), ms(2)), None);
        assert!(cache.resolving(ip(9)) && cache.resolving(ip(8)));
    }

    #[test]
    fn a_resolution_without_frames_goes_before_one_holding_frames() {
        let mut cache = small(2);
        cache.resolve(ip(9), ms(0));
        cache.hold(ip(8), vec![0; 20], ms(0)).unwrap();
        cache.learn(ip(3), PEER_MAC, ms(1));
        assert!(!cache.resolving(ip(9)), "nothing was waiting for 9");
        assert!(cache.resolving(ip(8)));
        assert_eq!(cache.lookup(ip(3), ms(1)), Some(PEER_MAC));
    }

    #[test]
    fn held_frames_are_never_evicted() {
        let mut cache = small(2);
        cache.hold(ip(9), vec![0; 20], ms(0)).unwrap();
        cache.hold(ip(8), vec![0; 20], ms(0)).unwrap();
        // Full of resolutions holding frames: a new address is not cached, a new
        // resolution is refused (its frame handed back), and nothing held is lost.
        assert!(cache.learn(ip(3), PEER_MAC, ms(1)).is_empty());
        assert_eq!(cache.lookup(ip(3), ms(1)), None);
        assert_eq!(cache.hold(ip(7), vec![7; 20], ms(1)), Err(vec![7; 20]));
        cache.resolve(ip(6), ms(1));
        assert!(!cache.resolving(ip(6)));
        // The answer for a held resolution needs no room: it replaces the resolution.
        assert_eq!(cache.learn(ip(9), PEER_MAC, ms(2)).len(), 1);
        assert_eq!(cache.learn(ip(8), PEER_MAC, ms(2)).len(), 1);
        assert_eq!(cache.entries.len() + cache.pending.len(), 2);
    }

    // ---------------------------------------------------------------------------------
    // The rate limit: one request per address per `retry`.
    // ---------------------------------------------------------------------------------

    #[test]
    fn an_address_evicted_and_resolved_again_is_not_asked_for_sooner() {
        let mut cache = small(1);
        let mut asked = Vec::new();
        cache.hold(ip(2), vec![0; 20], ms(0)).unwrap();
        assert_eq!(cache.due_requests(ms(0), |a| asked.push(a)), DueRequests::default());
        cache.learn(ip(2), PEER_MAC, ms(10));
        // A flood evicts the mapping, and traffic for 2 starts a new resolution at once.
        cache.learn(ip(3), PEER_MAC, ms(20));
        cache.hold(ip(2), vec![0; 20], ms(30)).unwrap();
        let due = cache.due_requests(ms(30), |a| asked.push(a));
        assert_eq!(due, DueRequests { dropped: 0, suppressed: 1 });
        assert_eq!(asked, [ip(2)], "not asked again 30 ms after the last request");
        // The request waits for the interval instead.
        assert_eq!(cache.next_timeout(), Some(ms(1000)));
        assert_eq!(cache.due_requests(ms(999), |a| asked.push(a)), DueRequests::default());
        assert_eq!(cache.due_requests(ms(1000), |a| asked.push(a)), DueRequests::default());
        assert_eq!(asked, [ip(2), ip(2)]);
    }

    #[test]
    fn requests_are_spaced_by_the_configured_interval() {
        let config = ArpConfig { retry: Duration::from_millis(300), retries: 5, ..ArpConfig::default() };
        let mut cache = ArpCache::new(config);
        cache.hold(ip(2), vec![0; 20], ms(0)).unwrap();
        let mut times = Vec::new();
        for t in (0..3000).step_by(10) {
            let mut n = 0;
            cache.due_requests(ms(t), |_| n += 1);
            times.extend(std::iter::repeat_n(t, n));
        }
        assert_eq!(times, [0, 300, 600, 900, 1200]);
    }

    #[test]
    fn more_addresses_than_the_cache_holds_in_one_interval_wait() {
        let mut cache = small(2);
        let mut asked = Vec::new();
        cache.resolve(ip(1), ms(0));
        cache.resolve(ip(2), ms(0));
        cache.due_requests(ms(0), |a| asked.push(a));
        cache.learn(ip(1), PEER_MAC, ms(100));
        cache.learn(ip(2), PEER_MAC, ms(100));
        cache.resolve(ip(3), ms(200));
        assert_eq!(cache.due_requests(ms(200), |a| asked.push(a)).suppressed, 1);
        // Once the interval has passed, the old requests no longer count.
        cache.due_requests(ms(1200), |a| asked.push(a));
        asked[..2].sort_unstable();
        assert_eq!(asked, [ip(1), ip(2), ip(3)]);
        assert!(cache.asked.len() <= 2, "the record of requests is bounded too");
    }
}
