//! The neighbour cache (RFC 4861 7.3): the reachability state machine of each neighbour,
//! the frames held while resolving, the default router and on-link prefix lists learned from
//! Router Advertisements, and the bounds that keep a flood from growing any of them.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

use bypass_tcp::Instant;

use super::{
    DELAY_FIRST_PROBE_TIME, MAX_MULTICAST_SOLICIT, MAX_REACHABLE_TIME, MAX_UNICAST_SOLICIT, MIN_REACHABLE_TIME,
    MIN_RETRANS_TIMER, REACHABLE_TIME, RETRANS_TIMER,
};
use crate::wire::ndp::{
    INFINITE_LIFETIME, MIN_LINK_MTU, NaFlags, NeighborAdvertisement, NeighborSolicitation, PrefixInfo, Redirect,
    RouterAdvertisement, Solicit,
};

// -------------------------------------------------------------------------------------
// The neighbour cache.
// -------------------------------------------------------------------------------------

/// Neighbour Discovery settings: the protocol constants of RFC 4861 10 and the bounds of the
/// cache. RetransTimer and BaseReachableTime start here and follow Router Advertisements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdpConfig {
    /// Multicast solicitations before resolution fails ([`MAX_MULTICAST_SOLICIT`]).
    pub max_multicast_solicit: u32,
    /// Unicast probes before a neighbour is unreachable ([`MAX_UNICAST_SOLICIT`]).
    pub max_unicast_solicit: u32,
    /// Time between solicitations ([`RETRANS_TIMER`]); at least 10 ms is used.
    pub retrans_timer: Duration,
    /// BaseReachableTime ([`REACHABLE_TIME`]); each confirmation lasts it times a random
    /// factor in [0.5, 1.5] (RFC 4861 6.3.2).
    pub reachable_time: Duration,
    /// Time a used STALE entry waits before probing ([`DELAY_FIRST_PROBE_TIME`]).
    pub delay_first_probe_time: Duration,
    /// Frames held per address being resolved; a new one pushes out the oldest
    /// (RFC 4861 7.2.2). At least 1.
    pub queue_limit: usize,
    /// Most neighbours in the cache, in any state. At least 1. When full, an address we
    /// send to takes the place of the oldest resolved entry (STALE first, then REACHABLE,
    /// DELAY, PROBE, each oldest first by when it entered its state); an address a message
    /// told us of takes only a STALE one's (or one whose ReachableTime is over), so a flood
    /// of solicitations cannot push out neighbours in use. INCOMPLETE entries are never
    /// evicted; they end within a few RetransTimers.
    pub max_entries: usize,
    /// Most of them INCOMPLETE at once; no more resolutions start until some end. At least 1.
    pub max_incomplete: usize,
    /// Most default routers remembered (RFC 4861 6.3.4 allows a host to keep only some).
    pub max_routers: usize,
    /// Most on-link prefixes remembered.
    pub max_prefixes: usize,
    /// Seed of the generator drawing the ReachableTime factors: give each host its own,
    /// from a secret (RFC 4861 6.3.2: the randomness keeps hosts from synchronising).
    pub seed: u64,
}

impl Default for NdpConfig {
    fn default() -> Self {
        NdpConfig {
            max_multicast_solicit: MAX_MULTICAST_SOLICIT,
            max_unicast_solicit: MAX_UNICAST_SOLICIT,
            retrans_timer: RETRANS_TIMER,
            reachable_time: REACHABLE_TIME,
            delay_first_probe_time: DELAY_FIRST_PROBE_TIME,
            queue_limit: 16,
            max_entries: 1024,
            max_incomplete: 256,
            max_routers: 8,
            max_prefixes: 16,
            seed: 0x6e64_7020_7365_6564,
        }
    }
}

/// A neighbour cache entry's reachability state (RFC 4861 7.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeighborState {
    /// Address resolution in progress; no MAC yet.
    Incomplete,
    /// Known reachable within ReachableTime.
    Reachable,
    /// Not known reachable; nothing is done until a packet is sent.
    Stale,
    /// Not known reachable, a packet was sent; waiting for upper-layer confirmation.
    Delay,
    /// Probing with unicast solicitations.
    Probe,
}

/// What the cache knows of one neighbour ([`NdpCache::neighbor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbor {
    /// The reachability state; a REACHABLE entry whose time has passed shows as STALE.
    pub state: NeighborState,
    /// The link-layer address, unless INCOMPLETE.
    pub mac: Option<[u8; 6]>,
    /// IsRouter (RFC 4861 7.2.5): the neighbour said it is a router.
    pub is_router: bool,
}

/// What handling a message did besides updating the cache.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// Frames that were waiting for the address, destination MAC filled in, oldest first:
    /// send them now (RFC 4861 7.2.5, appendix C "send queued packets").
    pub frames: VecDeque<Vec<u8>>,
    /// The neighbour said it is no longer a router, so it left the default router list
    /// (RFC 4861 7.2.5): stop using it as a next hop (RFC 4861 7.3.3).
    pub router_lost: bool,
}

/// A neighbour that did not answer ([`NdpCache::due`]); its entry is gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Failed {
    /// The neighbour.
    pub ip: Ipv6Addr,
    /// The frames held while resolving it (none after failed probing): answer each with an
    /// ICMPv6 Destination Unreachable, code 3 (address unreachable), or tell the local sender
    /// (RFC 4861 7.2.2, RFC 4443 3.1).
    pub frames: VecDeque<Vec<u8>>,
}

/// A state with its own data (RFC 4861 7.3.2); timers are deadlines.
#[derive(Debug)]
enum State {
    Incomplete { sent: u32, next: Instant, frames: VecDeque<Vec<u8>> },
    Reachable { mac: [u8; 6], until: Instant },
    Stale { mac: [u8; 6] },
    Delay { mac: [u8; 6], until: Instant },
    Probe { mac: [u8; 6], sent: u32, next: Instant },
}

impl State {
    fn kind(&self) -> NeighborState {
        match self {
            State::Incomplete { .. } => NeighborState::Incomplete,
            State::Reachable { .. } => NeighborState::Reachable,
            State::Stale { .. } => NeighborState::Stale,
            State::Delay { .. } => NeighborState::Delay,
            State::Probe { .. } => NeighborState::Probe,
        }
    }

    fn mac(&self) -> Option<[u8; 6]> {
        match *self {
            State::Incomplete { .. } => None,
            State::Reachable { mac, .. }
            | State::Stale { mac }
            | State::Delay { mac, .. }
            | State::Probe { mac, .. } => Some(mac),
        }
    }

    /// When `NdpCache::due` has work for this state.
    fn timer(&self) -> Option<Instant> {
        match *self {
            State::Incomplete { next, .. } | State::Probe { next, .. } => Some(next),
            State::Delay { until, .. } => Some(until),
            State::Reachable { .. } | State::Stale { .. } => None,
        }
    }

    /// Eviction order: STALE first; INCOMPLETE entries are never evicted.
    fn rank(&self) -> Option<u8> {
        match self {
            State::Incomplete { .. } => None,
            State::Stale { .. } => Some(0),
            State::Reachable { .. } => Some(1),
            State::Delay { .. } => Some(2),
            State::Probe { .. } => Some(3),
        }
    }

    /// RFC 4861 7.3.3: REACHABLE becomes STALE once ReachableTime has passed.
    fn expire(&mut self, now: Instant) {
        if let State::Reachable { mac, until } = *self
            && until <= now
        {
            *self = State::Stale { mac };
        }
    }
}

#[derive(Debug)]
struct Entry {
    state: State,
    is_router: bool,
    /// When the entry entered its state, in stamps; with `rank`, its key in `NdpCache::order`.
    stamp: u64,
}

#[derive(Clone, Copy, Debug)]
struct Router {
    addr: Ipv6Addr,
    expires: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Prefix {
    /// Masked to `len` bits.
    prefix: Ipv6Addr,
    len: u8,
    /// `None` for an infinite lifetime.
    expires: Option<Instant>,
}

/// Whom making room may evict.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Evict {
    /// For an address we are sending to: any resolved entry, STALE ones first.
    Resolved,
    /// For an address a message told us of: only a STALE entry, so that a flood of
    /// solicitations from new addresses cannot push out the neighbours in use.
    Stale,
}

/// Return `addr` with all but its first `len` bits cleared.
fn mask(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(addr);
    Ipv6Addr::from(bits & u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0))
}

/// The ReachableTime generator (RFC 4861 6.3.2): xorshift64*, cheap and deterministic.
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Return `base` times a random factor in [MIN_RANDOM_FACTOR, MAX_RANDOM_FACTOR] = [0.5, 1.5]
/// (RFC 4861 6.3.2, 10), in millionths.
fn random_reachable_time(rng: &mut u64, base: Duration) -> Duration {
    let factor = 500_000 + u128::from(next_random(rng) % 1_000_001);
    Duration::from_micros((base.as_micros() * factor / 1_000_000).min(u128::from(u64::MAX)) as u64)
}

/// Fill in the destination MAC of held frames.
fn release(mut frames: VecDeque<Vec<u8>>, mac: [u8; 6]) -> VecDeque<Vec<u8>> {
    for frame in &mut frames {
        if let Some(dst) = frame.get_mut(..6) {
            dst.copy_from_slice(&mac);
        }
    }
    frames
}

/// The neighbour cache (RFC 4861 5.1, 7.3) with the default router list and the prefix list
/// (RFC 4861 5.1, 6.3.4) of one interface, bounded by [`NdpConfig`]. See the module docs
/// for the call order.
#[derive(Debug)]
pub struct NdpCache {
    config: NdpConfig,
    entries: HashMap<Ipv6Addr, Entry>,
    /// Resolved entries by (rank, stamp): the first is the one to evict.
    order: BTreeSet<(u8, u64, Ipv6Addr)>,
    /// Entries with a deadline, soonest first.
    timers: BTreeSet<(Instant, Ipv6Addr)>,
    incomplete: usize,
    next_stamp: u64,
    rng: u64,
    retrans_timer: Duration,
    base_reachable_time: Duration,
    routers: Vec<Router>,
    prefixes: Vec<Prefix>,
    link_mtu: Option<u32>,
    cur_hop_limit: Option<u8>,
}

impl NdpCache {
    /// Return an empty cache.
    pub fn new(config: NdpConfig) -> Self {
        NdpCache {
            config,
            entries: HashMap::new(),
            order: BTreeSet::new(),
            timers: BTreeSet::new(),
            incomplete: 0,
            next_stamp: 0,
            // xorshift has one fixed point, zero.
            rng: if config.seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { config.seed },
            retrans_timer: config.retrans_timer.max(MIN_RETRANS_TIMER),
            base_reachable_time: config.reachable_time,
            routers: Vec::new(),
            prefixes: Vec::new(),
            link_mtu: None,
            cur_hop_limit: None,
        }
    }

    // ---------------------------------------------------------------------------------
    // Bookkeeping: every change of state goes through `take` and `put`, which keep the
    // eviction order, the timers and the INCOMPLETE count in step with the entries.
    // ---------------------------------------------------------------------------------

    fn take(&mut self, ip: Ipv6Addr) -> Option<Entry> {
        let entry = self.entries.remove(&ip)?;
        if let Some(t) = entry.state.timer() {
            self.timers.remove(&(t, ip));
        }
        match entry.state.rank() {
            Some(rank) => {
                self.order.remove(&(rank, entry.stamp, ip));
            }
            None => self.incomplete -= 1,
        }
        Some(entry)
    }

    /// Put back an entry taken in state `before` (a new one: `None`); a change of state
    /// moves it to the back of the eviction order.
    fn put(&mut self, ip: Ipv6Addr, mut entry: Entry, before: Option<NeighborState>) {
        if before != Some(entry.state.kind()) {
            entry.stamp = self.next_stamp;
            self.next_stamp += 1;
        }
        if let Some(t) = entry.state.timer() {
            self.timers.insert((t, ip));
        }
        match entry.state.rank() {
            Some(rank) => {
                self.order.insert((rank, entry.stamp, ip));
            }
            None => self.incomplete += 1,
        }
        self.entries.insert(ip, entry);
    }

    /// Make room for one more entry, `ip`, if the cache is full. Return false if no entry
    /// may go: INCOMPLETE ones never do (they end within a few RetransTimers).
    fn make_room(&mut self, ip: Ipv6Addr, evict: Evict, now: Instant) -> bool {
        let limit = self.config.max_entries.max(1);
        while self.entries.len() >= limit {
            let Some(&(rank, _, victim)) = self.order.first() else {
                log::debug!("NDP: cache full of resolutions ({limit}); not caching {ip}");
                return false;
            };
            let stale = rank == 0
                || self
                    .entries
                    .get(&victim)
                    .is_some_and(|e| matches!(e.state, State::Reachable { until, .. } if until <= now));
            if evict == Evict::Stale && !stale {
                log::debug!("NDP: cache full ({limit}) and nothing STALE; not caching {ip}");
                return false;
            }
            self.take(victim);
            log::debug!("NDP: cache full ({limit}); evicted {victim} for {ip}");
        }
        true
    }

    // ---------------------------------------------------------------------------------
    // Sending (RFC 4861 7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    /// Return the MAC to send to `ip`, unless it is unknown or INCOMPLETE (then
    /// [`hold`](Self::hold) the frame). A REACHABLE entry past its ReachableTime is STALE,
    /// and sending to a STALE entry moves it to DELAY, to be probed after
    /// DELAY_FIRST_PROBE_TIME unless [`confirm`](Self::confirm)ed first (RFC 4861 7.3.3).
    pub fn lookup(&mut self, ip: Ipv6Addr, now: Instant) -> Option<[u8; 6]> {
        let mac = match self.entries.get(&ip)?.state {
            State::Incomplete { .. } => return None,
            State::Reachable { mac, until } if until > now => return Some(mac),
            State::Delay { mac, .. } | State::Probe { mac, .. } => return Some(mac),
            State::Reachable { mac, .. } | State::Stale { mac } => mac,
        };
        let mut entry = self.take(ip)?;
        let before = entry.state.kind();
        entry.state = State::Delay { mac, until: now + self.config.delay_first_probe_time };
        log::trace!("NDP: {ip} used while stale; DELAY");
        self.put(ip, entry, Some(before));
        Some(mac)
    }

    /// Hold `frame` (a whole Ethernet frame; its destination MAC is filled in on release)
    /// until `ip` resolves, starting resolution if it has not started (RFC 4861 7.2.2).
    /// Return `Ok(Some(oldest))` when the queue was full and its oldest frame made way
    /// (RFC 4861 7.2.2), and `Err(frame)` when nothing was held: `ip` is already resolved
    /// (use [`lookup`](Self::lookup)), or no resolution may start now
    /// ([`NdpConfig::max_incomplete`], or a cache full of resolutions).
    pub fn hold(&mut self, ip: Ipv6Addr, frame: Vec<u8>, now: Instant) -> Result<Option<Vec<u8>>, Vec<u8>> {
        if let Some(entry) = self.entries.get_mut(&ip) {
            let State::Incomplete { frames, .. } = &mut entry.state else {
                return Err(frame);
            };
            let oldest = if frames.len() >= self.config.queue_limit.max(1) { frames.pop_front() } else { None };
            frames.push_back(frame);
            return Ok(oldest);
        }
        if !self.may_start(ip, now) {
            return Err(frame);
        }
        self.start(ip, VecDeque::from([frame]), now);
        Ok(None)
    }

    /// Start resolving `ip` without holding a frame, if it is not in the cache. Return
    /// whether it is in the cache now, resolved or resolving.
    pub fn resolve(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        if self.entries.contains_key(&ip) {
            return true;
        }
        if !self.may_start(ip, now) {
            return false;
        }
        self.start(ip, VecDeque::new(), now);
        true
    }

    /// Return whether a resolution of `ip` (not in the cache) may start, making room for it.
    fn may_start(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        if ip.is_multicast() || ip.is_unspecified() {
            return false;
        }
        if self.incomplete >= self.config.max_incomplete.max(1) {
            log::debug!("NDP: {} resolutions in progress; not resolving {ip}", self.incomplete);
            return false;
        }
        self.make_room(ip, Evict::Resolved, now)
    }

    /// Create an INCOMPLETE entry for `ip` whose first solicitation is due at once (RFC 4861
    /// 7.2.2), after [`may_start`](Self::may_start).
    fn start(&mut self, ip: Ipv6Addr, frames: VecDeque<Vec<u8>>, now: Instant) {
        log::trace!("NDP: resolving {ip}");
        let state = State::Incomplete { sent: 0, next: now, frames };
        self.put(ip, Entry { state, is_router: false, stamp: 0 }, None);
    }

    /// Take an upper-layer confirmation that `ip` is reachable (RFC 4861 7.3.1: TCP saw new
    /// data acknowledged, or a reply arrived, from this neighbour): any state but INCOMPLETE
    /// becomes REACHABLE for a fresh ReachableTime. Return whether the entry exists and has
    /// a MAC. Cheap while REACHABLE: call it per acknowledgement.
    pub fn confirm(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        let Some(entry) = self.entries.get_mut(&ip) else {
            return false;
        };
        let mac = match &mut entry.state {
            State::Incomplete { .. } => return false,
            State::Reachable { until, .. } => {
                *until = now + random_reachable_time(&mut self.rng, self.base_reachable_time);
                return true;
            }
            state => state.mac(),
        };
        let (Some(mac), Some(mut entry)) = (mac, self.take(ip)) else {
            return false;
        };
        let before = entry.state.kind();
        entry.state = State::Reachable { mac, until: now + self.reachable_time() };
        self.put(ip, entry, Some(before));
        true
    }

    fn reachable_time(&mut self) -> Duration {
        random_reachable_time(&mut self.rng, self.base_reachable_time)
    }

    // ---------------------------------------------------------------------------------
    // Timers (RFC 4861 7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    /// Do the work due by `now`: call `solicit` for each solicitation to send (INCOMPLETE:
    /// multicast, every RetransTimer up to MAX_MULTICAST_SOLICIT; DELAY past
    /// DELAY_FIRST_PROBE_TIME becomes PROBE; PROBE: unicast to the cached MAC, every
    /// RetransTimer up to MAX_UNICAST_SOLICIT). Return the neighbours that did not answer in
    /// time, RetransTimer after their last solicitation; their entries are removed, and a
    /// router among them moves to the back of the default router list (RFC 4861 6.3.6).
    /// Expired routers and prefixes are dropped too.
    pub fn due(&mut self, now: Instant, mut solicit: impl FnMut(Ipv6Addr, Solicit)) -> Vec<Failed> {
        let mut failed = Vec::new();
        let retrans = self.retrans_timer;
        while let Some(&(t, ip)) = self.timers.first()
            && t <= now
        {
            self.timers.pop_first();
            let Some(mut entry) = self.take(ip) else {
                continue;
            };
            let before = entry.state.kind();
            entry.state = match entry.state {
                State::Incomplete { sent, frames, .. } if sent >= self.config.max_multicast_solicit => {
                    log::debug!("NDP: {ip} did not answer {sent} solicitations; dropping {} frames", frames.len());
                    failed.push(Failed { ip, frames });
                    self.router_failed(ip);
                    continue;
                }
                State::Incomplete { sent, frames, .. } => {
                    solicit(ip, Solicit::Multicast);
                    State::Incomplete { sent: sent + 1, next: now + retrans, frames }
                }
                State::Delay { .. } if self.config.max_unicast_solicit == 0 => {
                    log::debug!("NDP: {ip} not confirmed and probing is off; unreachable");
                    failed.push(Failed { ip, frames: VecDeque::new() });
                    self.router_failed(ip);
                    continue;
                }
                State::Delay { mac, .. } => {
                    log::trace!("NDP: {ip} not confirmed; PROBE");
                    solicit(ip, Solicit::Unicast(mac));
                    State::Probe { mac, sent: 1, next: now + retrans }
                }
                State::Probe { sent, .. } if sent >= self.config.max_unicast_solicit => {
                    log::debug!("NDP: {ip} did not answer {sent} probes; unreachable");
                    failed.push(Failed { ip, frames: VecDeque::new() });
                    self.router_failed(ip);
                    continue;
                }
                State::Probe { mac, sent, .. } => {
                    solicit(ip, Solicit::Unicast(mac));
                    State::Probe { mac, sent: sent + 1, next: now + retrans }
                }
                state @ (State::Reachable { .. } | State::Stale { .. }) => state,
            };
            self.put(ip, entry, Some(before));
        }
        self.routers.retain(|r| r.expires > now);
        self.prefixes.retain(|p| p.expires.is_none_or(|e| e > now));
        failed
    }

    /// Return when [`due`](Self::due) next has a solicitation to send or a neighbour to give up on.
    /// Inlined down to the check for no timer set (a host speaking IPv4 alone, or one with
    /// no neighbour to solicit), which a poll asks on every turn; the timers' first entry out
    /// of line.
    #[inline]
    pub fn next_timeout(&self) -> Option<Instant> {
        if self.timers.is_empty() {
            return None;
        }
        self.first_timeout()
    }

    /// [`next_timeout`](Self::next_timeout) with a timer set.
    #[inline(never)]
    fn first_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Move router `ip` to the back of the default router list, so that the next is tried.
    fn router_failed(&mut self, ip: Ipv6Addr) {
        if let Some(i) = self.routers.iter().position(|r| r.addr == ip) {
            let router = self.routers.remove(i);
            self.routers.push(router);
        }
    }

    // ---------------------------------------------------------------------------------
    // Receiving (RFC 4861 6.3.4, 7.2.3, 7.2.5, 8.3, appendix C).
    // ---------------------------------------------------------------------------------

    /// Take `ip`'s link-layer address from a sibling cache (a host sharing our addresses on
    /// another queue saw it), as from a solicitation's source option: see `learn`.
    pub fn learn_from_sibling(&mut self, ip: Ipv6Addr, mac: [u8; 6], now: Instant) -> Update {
        self.learn(ip, mac, false, now)
    }

    /// Take a link-layer address from a message other than an advertisement (NS, RA,
    /// Redirect): appendix C's second table. A new entry is STALE; an INCOMPLETE one becomes
    /// STALE and releases its frames; a resolved one with a different MAC takes it and
    /// becomes STALE; the same MAC changes nothing. `router` sets IsRouter (an RA, a
    /// redirect to a router); otherwise an existing entry keeps its flag and a new one is
    /// not a router (RFC 4861 7.2.3).
    fn learn(&mut self, ip: Ipv6Addr, mac: [u8; 6], router: bool, now: Instant) -> Update {
        let mut update = Update::default();
        if ip.is_multicast() || ip.is_unspecified() {
            return update;
        }
        let Some(mut entry) = self.take(ip) else {
            if self.make_room(ip, Evict::Stale, now) {
                log::trace!("NDP: learned {ip}; STALE");
                self.put(ip, Entry { state: State::Stale { mac }, is_router: router, stamp: 0 }, None);
            }
            return update;
        };
        let before = entry.state.kind();
        entry.is_router |= router;
        entry.state.expire(now);
        entry.state = match entry.state {
            State::Incomplete { frames, .. } => {
                update.frames = release(frames, mac);
                State::Stale { mac }
            }
            same if same.mac() == Some(mac) => same,
            _ => {
                log::debug!("NDP: {ip} moved to a new MAC; STALE");
                State::Stale { mac }
            }
        };
        self.put(ip, entry, Some(before));
        update
    }

    /// Take a Neighbour Solicitation from `src` whose target is one of our addresses
    /// (RFC 4861 7.2.3): with a source link-layer address option and a specified source,
    /// create or update the entry for `src` (appendix C, second table). Answering it is the
    /// caller's ([`write_advertisement`](crate::wire::ndp::write_advertisement)).
    pub fn handle_solicitation(&mut self, src: Ipv6Addr, ns: &NeighborSolicitation, now: Instant) -> Update {
        match ns.source_mac {
            Some(mac) if !src.is_unspecified() => self.learn(src, mac, false, now),
            _ => Update::default(),
        }
    }

    /// Take a Neighbour Advertisement (RFC 4861 7.2.5, appendix C): nothing without an entry
    /// for its target; an INCOMPLETE entry takes its MAC and becomes REACHABLE if solicited,
    /// else STALE, releasing the held frames; a resolved entry follows the Override and
    /// Solicited flags. IsRouter follows the R flag, except where an unsolicited-looking
    /// change of MAC is refused.
    pub fn handle_advertisement(&mut self, na: &NeighborAdvertisement, now: Instant) -> Update {
        let ip = na.target;
        let mut update = Update::default();
        let Some(mut entry) = self.take(ip) else {
            log::trace!("NDP: advertisement for {ip}, not in the cache; ignored");
            return update;
        };
        let before = entry.state.kind();
        entry.state.expire(now);
        let until = now + self.reachable_time();
        let NaFlags { router, solicited, r#override } = na.flags;
        let mut update_router = true;
        entry.state = match (entry.state, na.target_mac) {
            // 7.2.5: INCOMPLETE and no target link-layer address: ignore.
            (incomplete @ State::Incomplete { .. }, None) => {
                log::debug!("NDP: advertisement for {ip} without its MAC while resolving; ignored");
                update_router = false;
                incomplete
            }
            // 7.2.5: record the address, REACHABLE if solicited, else STALE; Override ignored.
            (State::Incomplete { frames, .. }, Some(mac)) => {
                update.frames = release(frames, mac);
                if solicited { State::Reachable { mac, until } } else { State::Stale { mac } }
            }
            (resolved, target_mac) => {
                let cached = resolved.mac().unwrap_or_default();
                let differs = target_mac.is_some_and(|mac| mac != cached);
                match resolved {
                    // 7.2.5 I: Override clear and a different address: REACHABLE becomes
                    // STALE (the address kept), any other state is unchanged; nothing else.
                    State::Reachable { .. } if differs && !r#override => {
                        update_router = false;
                        State::Stale { mac: cached }
                    }
                    unchanged if differs && !r#override => {
                        update_router = false;
                        unchanged
                    }
                    // 7.2.5 II: take the address; solicited: REACHABLE; a new address: STALE;
                    // else unchanged.
                    _ if solicited => State::Reachable { mac: target_mac.unwrap_or(cached), until },
                    _ if differs => State::Stale { mac: target_mac.unwrap_or(cached) },
                    unchanged => unchanged,
                }
            }
        };
        if update_router {
            if entry.is_router && !router {
                log::debug!("NDP: {ip} is no longer a router");
                self.routers.retain(|r| r.addr != ip);
                update.router_lost = true;
            }
            entry.is_router = router;
        }
        self.put(ip, entry, Some(before));
        update
    }

    /// Take a Router Advertisement from `src` (RFC 4861 6.3.4): update the default router
    /// list (a lifetime of 0 removes the router), CurHopLimit, BaseReachableTime,
    /// RetransTimer, the link MTU, the on-link prefixes (L flag set; a valid lifetime of 0
    /// removes the prefix; the link-local prefix is ignored), and the router's entry, marked
    /// a router (a source link-layer address option creates or updates it as STALE).
    /// Advertised timers are taken within Linux's floors (RetransTimer at least 10 ms,
    /// BaseReachableTime at least 100 ms) and BaseReachableTime within the hour routers may
    /// advertise (RFC 4861 6.2.1).
    pub fn handle_router_advertisement(&mut self, src: Ipv6Addr, ra: &RouterAdvertisement, now: Instant) -> Update {
        let lifetime = Duration::from_secs(u64::from(ra.router_lifetime_secs));
        match self.routers.iter().position(|r| r.addr == src) {
            Some(i) if lifetime.is_zero() => {
                self.routers.remove(i);
            }
            Some(i) => self.routers[i].expires = now + lifetime,
            None if lifetime.is_zero() => {}
            None if self.routers.len() < self.config.max_routers => {
                self.routers.push(Router { addr: src, expires: now + lifetime });
            }
            None => log::debug!("NDP: {} routers known; not adding {src}", self.routers.len()),
        }
        if ra.cur_hop_limit != 0 {
            self.cur_hop_limit = Some(ra.cur_hop_limit);
        }
        if ra.reachable_time_ms != 0 {
            let base = Duration::from_millis(u64::from(ra.reachable_time_ms));
            // Each confirmation draws its own factor, so a new base needs no recomputation.
            self.base_reachable_time = base.clamp(MIN_REACHABLE_TIME, MAX_REACHABLE_TIME);
        }
        if ra.retrans_timer_ms != 0 {
            self.retrans_timer = Duration::from_millis(u64::from(ra.retrans_timer_ms)).max(MIN_RETRANS_TIMER);
        }
        match ra.mtu {
            Some(mtu) if mtu >= MIN_LINK_MTU => self.link_mtu = Some(mtu),
            Some(mtu) => log::debug!("NDP: advertised MTU {mtu} from {src} is below {MIN_LINK_MTU}; ignored"),
            None => {}
        }
        for prefix in &ra.prefixes {
            self.learn_prefix(prefix, now);
        }
        match ra.source_mac {
            Some(mac) => self.learn(src, mac, true, now),
            None => {
                if let Some(entry) = self.entries.get_mut(&src) {
                    entry.is_router = true;
                }
                Update::default()
            }
        }
    }

    /// RFC 4861 6.3.4's rules for one prefix information option.
    fn learn_prefix(&mut self, info: &PrefixInfo, now: Instant) {
        if !info.on_link || info.prefix_len > 128 {
            return;
        }
        let prefix = mask(info.prefix, info.prefix_len);
        if prefix.is_unicast_link_local() && info.prefix_len >= 10 {
            return;
        }
        let expires = match info.valid_lifetime_secs {
            INFINITE_LIFETIME => None,
            secs => Some(now + Duration::from_secs(u64::from(secs))),
        };
        match self.prefixes.iter().position(|p| p.prefix == prefix && p.len == info.prefix_len) {
            Some(i) if info.valid_lifetime_secs == 0 => {
                self.prefixes.remove(i);
            }
            Some(i) => self.prefixes[i].expires = expires,
            None if info.valid_lifetime_secs == 0 => {}
            None if self.prefixes.len() < self.config.max_prefixes => {
                self.prefixes.push(Prefix { prefix, len: info.prefix_len, expires });
            }
            None => log::debug!("NDP: {} prefixes known; not adding {prefix}/{}", self.prefixes.len(), info.prefix_len),
        }
    }

    /// Take a Redirect the caller accepted (it came from the current first-hop router of
    /// its destination, RFC 4861 8.1) into the neighbour cache (RFC 4861 8.3): a target
    /// link-layer address option creates or updates the target's entry as for a
    /// solicitation, and a target other than the destination is a router. Re-pointing the
    /// destination's route at the target is the caller's.
    pub fn handle_redirect(&mut self, redirect: &Redirect, now: Instant) -> Update {
        let router = redirect.target != redirect.destination;
        match redirect.target_mac {
            Some(mac) => self.learn(redirect.target, mac, router, now),
            None => {
                if router && let Some(entry) = self.entries.get_mut(&redirect.target) {
                    entry.is_router = true;
                }
                Update::default()
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Questions.
    // ---------------------------------------------------------------------------------

    /// Return what the cache knows of `ip`.
    pub fn neighbor(&self, ip: Ipv6Addr, now: Instant) -> Option<Neighbor> {
        let entry = self.entries.get(&ip)?;
        let state = match entry.state {
            State::Reachable { until, .. } if until <= now => NeighborState::Stale,
            ref state => state.kind(),
        };
        Some(Neighbor { state, mac: entry.state.mac(), is_router: entry.is_router })
    }

    /// Return the number of neighbours in the cache.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Return whether the cache holds no neighbour.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Return the default router to send off-link traffic to (RFC 4861 6.3.6): the first
    /// live router known reachable or probably reachable (an entry in any state but
    /// INCOMPLETE), else the first live router.
    pub fn default_router(&self, now: Instant) -> Option<Ipv6Addr> {
        let mut live = self.routers.iter().filter(|r| r.expires > now).map(|r| r.addr);
        let first = live.clone().next();
        live.find(|ip| self.entries.get(ip).is_some_and(|e| !matches!(e.state, State::Incomplete { .. }))).or(first)
    }

    /// Return whether `addr` is on-link (RFC 4861 5.2): link-local, or in a live prefix
    /// advertised with the L flag.
    pub fn on_link(&self, addr: Ipv6Addr, now: Instant) -> bool {
        addr.is_unicast_link_local()
            || self.prefixes.iter().any(|p| p.expires.is_none_or(|e| e > now) && mask(addr, p.len) == p.prefix)
    }

    /// Return the link MTU from the last Router Advertisement with a usable MTU option
    /// (RFC 4861 6.3.4); the host may adopt it if lower than the device's.
    pub fn link_mtu(&self) -> Option<u32> {
        self.link_mtu
    }

    /// Return the hop limit the last Router Advertisement asked for (RFC 4861 6.3.4), if any.
    pub fn cur_hop_limit(&self) -> Option<u8> {
        self.cur_hop_limit
    }

    /// Return the RetransTimer in use (configured, or from a Router Advertisement).
    pub fn retrans_timer(&self) -> Duration {
        self.retrans_timer
    }

    /// Return the BaseReachableTime in use (configured, or from a Router Advertisement).
    pub fn base_reachable_time(&self) -> Duration {
        self.base_reachable_time
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ndp::Dad;
    use crate::wire::ndp::tests::*;
    use crate::wire::ndp::*;

    /// The xorshift64* of the cache, for random inputs.
    pub(crate) struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            (next_random(&mut self.0) % n as u64) as usize
        }

        fn byte(&mut self) -> u8 {
            next_random(&mut self.0) as u8
        }

        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.byte()).collect()
        }
    }

    /// Hand a parsed message to the cache and a DAD check the way a host would.
    pub(crate) fn feed(cache: &mut NdpCache, dad: &mut Dad, src: Ipv6Addr, msg: &NdpMessage, now: Instant) -> Update {
        dad.handle(src, msg);
        match msg {
            NdpMessage::NeighborSolicitation(ns) => cache.handle_solicitation(src, ns, now),
            NdpMessage::NeighborAdvertisement(na) => cache.handle_advertisement(na, now),
            NdpMessage::RouterAdvertisement(ra) => cache.handle_router_advertisement(src, ra, now),
            NdpMessage::Redirect(redirect) => cache.handle_redirect(redirect, now),
            NdpMessage::RouterSolicitation(_) => Update::default(),
        }
    }

    #[test]
    fn random_bytes_never_panic_and_keep_the_cache_consistent() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let pool: Vec<Ipv6Addr> = (0..12).map(ll).chain([B, GLOBAL]).collect();
        let ends = [UNSPECIFIED, A, B, ll(3), solicited_node(B), solicited_node(ll(3)), ALL_NODES, GLOBAL];
        let config = NdpConfig {
            max_entries: 8,
            max_incomplete: 3,
            queue_limit: 2,
            max_routers: 2,
            max_prefixes: 2,
            seed: 7,
            ..NdpConfig::default()
        };
        let mut cache = NdpCache::new(config);
        let mut dad = Dad::new(ll(3), 3, RETRANS_TIMER, Instant::ZERO);
        let mut now = Instant::ZERO;
        let mut valid = 0;
        for i in 0..40_000 {
            let mut msg = Vec::new();
            if rng.below(8) == 0 {
                // Raw noise.
                let len = rng.below(100);
                msg = rng.bytes(len);
            } else {
                // Something shaped like Neighbour Discovery, with random fields and options.
                let kind = 133 + rng.below(5) as u8;
                msg.extend([kind, if rng.below(16) == 0 { rng.byte() } else { 0 }, 0, 0]);
                msg.extend(rng.bytes(4));
                let addresses = match kind {
                    135 | 136 => 1,
                    137 => 2,
                    _ => 0,
                };
                for _ in 0..addresses {
                    let addr =
                        if rng.below(4) == 0 { rng.bytes(16) } else { pool[rng.below(pool.len())].octets().to_vec() };
                    msg.extend(addr);
                }
                if kind == 134 {
                    msg.extend(rng.bytes(8));
                }
                if rng.below(16) == 0 {
                    msg.truncate(rng.below(msg.len() + 1));
                }
                for _ in 0..rng.below(4) {
                    let kind = [1, 2, 3, 4, 5, 25, rng.byte()][rng.below(7)];
                    let units = if rng.below(10) == 0 {
                        rng.below(6) as u8
                    } else if kind == 3 {
                        4
                    } else {
                        1
                    };
                    msg.extend([kind, units]);
                    let len =
                        (usize::from(units) * 8).saturating_sub(2 + if rng.below(12) == 0 { rng.below(4) } else { 0 });
                    if kind == 3 && units == 4 && len == 30 {
                        // A plausible prefix: length, flags, lifetimes, prefix.
                        msg.extend([
                            rng.below(129) as u8,
                            rng.byte(),
                            0,
                            0,
                            0,
                            rng.byte(),
                            0,
                            0,
                            0,
                            rng.byte(),
                            0,
                            0,
                            0,
                            0,
                        ]);
                        msg.extend(pool[rng.below(pool.len())].octets());
                    } else {
                        msg.extend(rng.bytes(len));
                    }
                }
            }
            let (src, dst) = (ends[rng.below(ends.len())], ends[rng.below(ends.len())]);
            if msg.len() >= 4 && rng.below(10) != 0 {
                seal(&mut msg, src, dst);
            }
            let hop_limit = if rng.below(10) == 0 { rng.byte() } else { 255 };
            now += Duration::from_millis(rng.below(400) as u64);
            if let Ok(parsed) = parse(src, dst, hop_limit, &msg) {
                valid += 1;
                let update = feed(&mut cache, &mut dad, src, &parsed, now);
                assert!(update.frames.len() <= 2);
            }
            let ip = pool[rng.below(pool.len())];
            match rng.below(5) {
                0 => {
                    cache.lookup(ip, now);
                }
                1 => {
                    let _ = cache.hold(ip, vec![0; 60], now);
                }
                2 => {
                    cache.confirm(ip, now);
                }
                3 => {
                    cache.default_router(now);
                    cache.on_link(ip, now);
                }
                _ => {
                    cache.due(now, |_, _| {});
                    dad.due(now, |_| {});
                }
            }
            if i % 500 == 0 {
                check(&cache);
            }
        }
        check(&cache);
        assert!(valid > 5_000, "only {valid} messages passed: the loop does not reach the deep paths");
    }

    // ---------------------------------------------------------------------------------
    // The neighbour cache: helpers.
    // ---------------------------------------------------------------------------------

    pub(crate) fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    pub(crate) fn secs(n: u64) -> Instant {
        Instant::from_millis(n * 1000)
    }

    pub(crate) fn cache() -> NdpCache {
        NdpCache::new(NdpConfig::default())
    }

    pub(crate) fn with(config: NdpConfig) -> NdpCache {
        NdpCache::new(config)
    }

    pub(crate) fn na(
        target: Ipv6Addr,
        solicited: bool,
        r#override: bool,
        router: bool,
        mac: Option<[u8; 6]>,
    ) -> NeighborAdvertisement {
        NeighborAdvertisement { target, flags: NaFlags { router, solicited, r#override }, target_mac: mac }
    }

    pub(crate) fn ns(mac: [u8; 6]) -> NeighborSolicitation {
        NeighborSolicitation { target: A, source_mac: Some(mac) }
    }

    pub(crate) fn ra(lifetime: u16, mac: Option<[u8; 6]>) -> RouterAdvertisement {
        RouterAdvertisement {
            cur_hop_limit: 0,
            managed: false,
            other: false,
            router_lifetime_secs: lifetime,
            reachable_time_ms: 0,
            retrans_timer_ms: 0,
            source_mac: mac,
            mtu: None,
            prefixes: vec![],
        }
    }

    /// A frame for `hold`, its destination MAC to be filled in, numbered by its last byte.
    pub(crate) fn frame(n: u8) -> Vec<u8> {
        let mut frame = vec![0; 60];
        frame[59] = n;
        frame
    }

    /// Run the timers at `now`; return the solicitations asked for and the failures.
    pub(crate) fn run(cache: &mut NdpCache, now: Instant) -> (Vec<(Ipv6Addr, Solicit)>, Vec<Failed>) {
        let mut asked = Vec::new();
        let failed = cache.due(now, |ip, kind| asked.push((ip, kind)));
        (asked, failed)
    }

    pub(crate) fn state_of(cache: &NdpCache, ip: Ipv6Addr, now: Instant) -> Option<(NeighborState, Option<[u8; 6]>)> {
        cache.neighbor(ip, now).map(|n| (n.state, n.mac))
    }

    /// Check that the indexes agree with the entries and the bounds hold.
    pub(crate) fn check(cache: &NdpCache) {
        let config = cache.config;
        assert!(cache.entries.len() <= config.max_entries.max(1));
        let incomplete: Vec<_> = cache.entries.values().filter(|e| e.state.rank().is_none()).collect();
        assert_eq!(incomplete.len(), cache.incomplete);
        assert!(cache.incomplete <= config.max_incomplete.max(1));
        for entry in incomplete {
            if let State::Incomplete { frames, .. } = &entry.state {
                assert!(frames.len() <= config.queue_limit.max(1));
            }
        }
        assert_eq!(cache.order.len() + cache.incomplete, cache.entries.len());
        for &(rank, stamp, ip) in &cache.order {
            let entry = &cache.entries[&ip];
            assert_eq!((entry.state.rank(), entry.stamp), (Some(rank), stamp), "{ip}");
        }
        let timers: BTreeSet<_> =
            cache.entries.iter().filter_map(|(&ip, e)| e.state.timer().map(|t| (t, ip))).collect();
        assert_eq!(timers, cache.timers);
        assert!(cache.routers.len() <= config.max_routers);
        assert!(cache.prefixes.len() <= config.max_prefixes);
    }

    /// Return a cache with B in `state` at B_MAC (not a router), and the time it is so.
    pub(crate) fn in_state(state: NeighborState) -> (NdpCache, Instant) {
        use NeighborState::*;
        let mut cache = cache();
        let now = match state {
            Incomplete => {
                cache.hold(B, frame(1), secs(0)).unwrap();
                secs(0)
            }
            Reachable => {
                cache.resolve(B, secs(0));
                cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), secs(0));
                secs(0)
            }
            Stale => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                secs(0)
            }
            Delay => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                cache.lookup(B, secs(0));
                secs(0)
            }
            Probe => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                cache.lookup(B, secs(0));
                let (asked, _) = run(&mut cache, secs(5));
                assert_eq!(asked, [(B, Solicit::Unicast(B_MAC))]);
                secs(5)
            }
        };
        let expected_mac = if state == Incomplete { None } else { Some(B_MAC) };
        assert_eq!(state_of(&cache, B, now), Some((state, expected_mac)));
        assert!(!cache.neighbor(B, now).unwrap().is_router);
        check(&cache);
        (cache, now)
    }

    pub(crate) const RESOLVED: &[NeighborState] =
        &[NeighborState::Reachable, NeighborState::Stale, NeighborState::Delay, NeighborState::Probe];

    // ---------------------------------------------------------------------------------
    // Appendix C: Neighbour Advertisements (RFC 4861 7.2.5).
    // ---------------------------------------------------------------------------------

    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Lla {
        Absent,
        Same,
        Other,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    pub(crate) enum Then {
        Unchanged,
        /// The new state, with the cached MAC (false) or the advertised one (true).
        To(NeighborState, bool),
    }

    /// From states, S, O, TLLA, then, and whether IsRouter is updated from the R flag.
    pub(crate) type NaRow = (&'static [NeighborState], bool, bool, Lla, Then, bool);

    #[test]
    fn advertisements_move_resolved_entries_as_in_appendix_c() {
        use Lla::*;
        use NeighborState::*;
        use Then::*;
        const STALE_DELAY_PROBE: &[NeighborState] = &[Stale, Delay, Probe];
        #[rustfmt::skip]
        let table: &[NaRow] = &[
            (RESOLVED,          true,  false, Same,   To(Reachable, false), true),
            // 7.2.5 II (appendix C says "unchanged"; the text wins, see the module docs).
            (RESOLVED,          true,  false, Absent, To(Reachable, false), true),
            // 7.2.5 I: O clear and a different address.
            (&[Reachable],      true,  false, Other,  To(Stale, false),     false),
            (STALE_DELAY_PROBE, true,  false, Other,  Unchanged,            false),
            (RESOLVED,          true,  true,  Other,  To(Reachable, true),  true),
            (RESOLVED,          true,  true,  Same,   To(Reachable, false), true),
            (RESOLVED,          true,  true,  Absent, To(Reachable, false), true),
            (RESOLVED,          false, false, Same,   Unchanged,            true),
            (RESOLVED,          false, false, Absent, Unchanged,            true),
            (&[Reachable],      false, false, Other,  To(Stale, false),     false),
            (STALE_DELAY_PROBE, false, false, Other,  Unchanged,            false),
            (RESOLVED,          false, true,  Same,   Unchanged,            true),
            (RESOLVED,          false, true,  Absent, Unchanged,            true),
            (RESOLVED,          false, true,  Other,  To(Stale, true),      true),
        ];
        for &(froms, solicited, over, lla, then, router_updated) in table {
            for &from in froms {
                let (mut cache, now) = in_state(from);
                let timeout = cache.next_timeout();
                let mac = match lla {
                    Absent => None,
                    Same => Some(B_MAC),
                    Other => Some(C_MAC),
                };
                let update = cache.handle_advertisement(&na(B, solicited, over, true, mac), now);
                let row = format!("{from:?} S={solicited} O={over} {lla:?}");
                assert_eq!(update, Update::default(), "{row}");
                let n = cache.neighbor(B, now).unwrap();
                match then {
                    Unchanged => {
                        assert_eq!((n.state, n.mac), (from, Some(B_MAC)), "{row}");
                        assert_eq!(cache.next_timeout(), timeout, "{row}: timers untouched");
                    }
                    To(state, advertised) => {
                        let expected = if advertised { C_MAC } else { B_MAC };
                        assert_eq!((n.state, n.mac), (state, Some(expected)), "{row}");
                        if state != from {
                            assert_eq!(cache.next_timeout(), None, "{row}: no timer in {state:?}");
                        }
                    }
                }
                assert_eq!(n.is_router, router_updated, "{row}: IsRouter");
                check(&cache);
            }
        }
    }

    #[test]
    fn advertisements_complete_resolution_and_release_held_frames() {
        use NeighborState::*;
        // (S, O, TLLA, state after, frames released).
        #[rustfmt::skip]
        let table = [
            (true,  false, true,  Reachable,  1),
            (true,  true,  true,  Reachable,  1),
            (false, false, true,  Stale,      1),
            (false, true,  true,  Stale,      1),
            (true,  true,  false, Incomplete, 0),
            (false, false, false, Incomplete, 0),
        ];
        for (solicited, over, with_mac, state, released) in table {
            let (mut cache, now) = in_state(Incomplete);
            let mac = with_mac.then_some(B_MAC);
            let update = cache.handle_advertisement(&na(B, solicited, over, true, mac), now);
            let row = format!("S={solicited} O={over} TLLA={with_mac}");
            assert_eq!(update.frames.len(), released, "{row}");
            assert!(update.frames.iter().all(|f| f[..6] == B_MAC && f[59] == 1), "{row}");
            let n = cache.neighbor(B, now).unwrap();
            assert_eq!((n.state, n.mac, n.is_router), (state, mac, with_mac), "{row}");
            if state != Incomplete {
                assert_eq!(cache.next_timeout(), None, "{row}: resolution over");
            }
            check(&cache);
        }
    }

    #[test]
    fn an_advertisement_for_an_unknown_address_creates_nothing() {
        let mut cache = cache();
        assert_eq!(cache.handle_advertisement(&na(B, false, true, false, Some(B_MAC)), secs(0)), Update::default());
        assert!(cache.is_empty());
    }

    // ---------------------------------------------------------------------------------
    // Appendix C: other messages with a link-layer address (NS, RA, Redirect).
    // ---------------------------------------------------------------------------------

    #[derive(Clone, Copy, Debug, PartialEq)]
    pub(crate) enum Teller {
        Solicitation,
        RouterAdvertisement,
        Redirect,
    }

    pub(crate) fn tell(cache: &mut NdpCache, teller: Teller, mac: [u8; 6], now: Instant) -> Update {
        match teller {
            Teller::Solicitation => cache.handle_solicitation(B, &ns(mac), now),
            Teller::RouterAdvertisement => cache.handle_router_advertisement(B, &ra(1800, Some(mac)), now),
            Teller::Redirect => {
                let redirect = Redirect { target: B, destination: GLOBAL, target_mac: Some(mac) };
                cache.handle_redirect(&redirect, now)
            }
        }
    }

    #[test]
    fn other_messages_create_and_update_entries_as_in_appendix_c() {
        use NeighborState::*;
        for teller in [Teller::Solicitation, Teller::RouterAdvertisement, Teller::Redirect] {
            // An RA is from a router, and a redirect to other than its destination names one.
            let router = teller != Teller::Solicitation;
            // No entry: create it STALE.
            let mut cache = cache();
            assert_eq!(tell(&mut cache, teller, B_MAC, secs(0)), Update::default());
            let n = cache.neighbor(B, secs(0)).unwrap();
            assert_eq!((n.state, n.mac, n.is_router), (Stale, Some(B_MAC), router), "{teller:?} new");
            // INCOMPLETE: record the address, STALE, send the queued frames.
            let (mut cache, now) = in_state(Incomplete);
            let update = tell(&mut cache, teller, B_MAC, now);
            assert_eq!(update.frames.len(), 1);
            assert_eq!(&update.frames[0][..6], &B_MAC);
            assert_eq!(state_of(&cache, B, now), Some((Stale, Some(B_MAC))), "{teller:?} from INCOMPLETE");
            assert_eq!(cache.next_timeout(), None);
            for &from in RESOLVED {
                // The same address: unchanged.
                let (mut cache, now) = in_state(from);
                let timeout = cache.next_timeout();
                tell(&mut cache, teller, B_MAC, now);
                assert_eq!(state_of(&cache, B, now), Some((from, Some(B_MAC))), "{teller:?} {from:?} same");
                assert_eq!(cache.next_timeout(), timeout);
                assert_eq!(cache.neighbor(B, now).unwrap().is_router, router, "{teller:?} {from:?} IsRouter");
                // A different address: take it, STALE.
                let (mut cache, now) = in_state(from);
                tell(&mut cache, teller, C_MAC, now);
                assert_eq!(state_of(&cache, B, now), Some((Stale, Some(C_MAC))), "{teller:?} {from:?} other");
                check(&cache);
            }
        }
    }

    #[test]
    fn a_solicitation_without_source_address_or_option_changes_nothing() {
        let mut cache = cache();
        cache.handle_solicitation(UNSPECIFIED, &ns(B_MAC), secs(0));
        cache.handle_solicitation(B, &NeighborSolicitation { target: A, source_mac: None }, secs(0));
        assert!(cache.is_empty());
    }

    #[test]
    fn a_solicitation_keeps_is_router_and_a_redirect_to_the_destination_sets_nothing() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(1800, Some(B_MAC)), secs(0));
        cache.handle_solicitation(B, &ns(C_MAC), secs(1));
        assert!(cache.neighbor(B, secs(1)).unwrap().is_router, "7.2.3: IsRouter not modified");
        let on_link = Redirect { target: GLOBAL, destination: GLOBAL, target_mac: Some(C_MAC) };
        cache.handle_redirect(&on_link, secs(1));
        assert!(!cache.neighbor(GLOBAL, secs(1)).unwrap().is_router);
    }

    // ---------------------------------------------------------------------------------
    // Sending and timers: INCOMPLETE, REACHABLE, STALE, DELAY, PROBE (7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    #[test]
    fn resolution_fails_after_three_multicast_solicitations() {
        let mut cache = cache();
        assert_eq!(cache.lookup(B, secs(0)), None);
        assert_eq!(cache.hold(B, frame(7), secs(0)), Ok(None));
        assert_eq!(cache.lookup(B, secs(0)), None, "INCOMPLETE has no MAC");
        assert_eq!(cache.next_timeout(), Some(secs(0)), "the first solicitation is due at once");
        let mut asked = Vec::new();
        for t in [0, 500, 1000, 1999, 2000] {
            let (a, failed) = run(&mut cache, ms(t));
            assert!(failed.is_empty());
            asked.extend(a.into_iter().map(|a| (t, a)));
        }
        assert_eq!(
            asked,
            [(0, (B, Solicit::Multicast)), (1000, (B, Solicit::Multicast)), (2000, (B, Solicit::Multicast))]
        );
        assert_eq!(cache.next_timeout(), Some(secs(3)));
        let (asked, failed) = run(&mut cache, secs(3));
        assert!(asked.is_empty());
        assert_eq!(failed, [Failed { ip: B, frames: VecDeque::from([frame(7)]) }]);
        assert_eq!(cache.neighbor(B, secs(3)), None);
        assert_eq!(cache.next_timeout(), None);
        check(&cache);
    }

    #[test]
    fn solicitations_follow_the_configured_constants() {
        let config =
            NdpConfig { retrans_timer: Duration::from_millis(300), max_multicast_solicit: 5, ..NdpConfig::default() };
        let mut cache = with(config);
        cache.resolve(B, ms(0));
        let mut times = Vec::new();
        for t in (0..3000).step_by(10) {
            let (asked, failed) = run(&mut cache, ms(t));
            times.extend(asked.iter().map(|_| t));
            if !failed.is_empty() {
                times.push(t + 1);
            }
        }
        assert_eq!(times, [0, 300, 600, 900, 1200, 1501], "five solicitations, then failure");
    }

    #[test]
    fn a_stale_entry_used_is_probed_after_the_delay_then_removed() {
        let mut cache = cache();
        cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        assert_eq!(run(&mut cache, secs(100)), (vec![], vec![]), "STALE waits for traffic");
        assert_eq!(cache.lookup(B, secs(10)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(10)), Some((NeighborState::Delay, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), Some(secs(15)));
        assert_eq!(cache.lookup(B, secs(11)), Some(B_MAC), "still usable in DELAY");
        assert_eq!(run(&mut cache, ms(14_999)), (vec![], vec![]));
        let mut asked = Vec::new();
        for t in [15, 16, 17] {
            let (a, failed) = run(&mut cache, secs(t));
            assert!(failed.is_empty());
            asked.extend(a);
            assert_eq!(state_of(&cache, B, secs(t)), Some((NeighborState::Probe, Some(B_MAC))));
            assert_eq!(cache.lookup(B, secs(t)), Some(B_MAC), "still usable in PROBE");
        }
        assert_eq!(asked, [(B, Solicit::Unicast(B_MAC)); 3]);
        let (asked, failed) = run(&mut cache, secs(18));
        assert!(asked.is_empty());
        assert_eq!(failed, [Failed { ip: B, frames: VecDeque::new() }]);
        assert_eq!(cache.neighbor(B, secs(18)), None);
        check(&cache);
    }

    #[test]
    fn a_probe_answered_without_the_option_is_reachable() {
        let (mut cache, now) = in_state(NeighborState::Probe);
        cache.handle_advertisement(&na(B, true, false, false, None), now);
        assert_eq!(state_of(&cache, B, now), Some((NeighborState::Reachable, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), None);
    }

    #[test]
    fn reachable_expires_lazily_and_use_then_starts_the_delay() {
        let (mut cache, _) = in_state(NeighborState::Reachable);
        assert_eq!(cache.lookup(B, secs(1)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(1)), Some((NeighborState::Reachable, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), None, "no timer for REACHABLE");
        // ReachableTime is at most 1.5 * 30 s.
        assert_eq!(state_of(&cache, B, secs(46)), Some((NeighborState::Stale, Some(B_MAC))));
        assert_eq!(cache.lookup(B, secs(46)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(46)), Some((NeighborState::Delay, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), Some(secs(51)));
        check(&cache);
    }

    #[test]
    fn confirmation_makes_any_resolved_entry_reachable() {
        for &from in RESOLVED {
            let (mut cache, now) = in_state(from);
            assert!(cache.confirm(B, now), "{from:?}");
            assert_eq!(state_of(&cache, B, now), Some((NeighborState::Reachable, Some(B_MAC))), "{from:?}");
            assert_eq!(cache.next_timeout(), None, "{from:?}: no probe");
            check(&cache);
        }
        let (mut cache, now) = in_state(NeighborState::Incomplete);
        assert!(!cache.confirm(B, now), "nothing to confirm without a MAC");
        assert!(!cache.confirm(GLOBAL, now));
        assert_eq!(state_of(&cache, B, now), Some((NeighborState::Incomplete, None)));
    }

    #[test]
    fn confirmation_while_reachable_extends_it() {
        let (mut cache, _) = in_state(NeighborState::Reachable);
        for t in (10..200).step_by(10) {
            assert!(cache.confirm(B, secs(t)));
            assert_eq!(state_of(&cache, B, secs(t + 14)).unwrap().0, NeighborState::Reachable);
        }
        check(&cache);
    }

    #[test]
    fn reachable_time_is_randomised_between_half_and_one_and_a_half() {
        let mut rng = 42;
        let draws: Vec<Duration> = (0..2000).map(|_| random_reachable_time(&mut rng, REACHABLE_TIME)).collect();
        let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*min >= Duration::from_secs(15) && *max <= Duration::from_secs(45), "{min:?}..{max:?}");
        assert!(*min < Duration::from_secs(16) && *max > Duration::from_secs(44), "spread: {min:?}..{max:?}");
        // The seed decides: the same seed gives the same times, another seed others.
        let until = |seed| {
            let mut cache = NdpCache::new(NdpConfig { seed, ..NdpConfig::default() });
            cache.handle_solicitation(B, &ns(B_MAC), secs(0));
            cache.confirm(B, secs(0));
            match cache.entries[&B].state {
                State::Reachable { until, .. } => until,
                _ => unreachable!(),
            }
        };
        assert_eq!(until(5), until(5));
        assert_ne!(until(5), until(6));
    }

    // ---------------------------------------------------------------------------------
    // Held frames (7.2.2).
    // ---------------------------------------------------------------------------------

    #[test]
    fn held_frames_are_bounded_the_oldest_dropped_and_released_in_order() {
        let mut cache = with(NdpConfig { queue_limit: 2, ..NdpConfig::default() });
        assert_eq!(cache.hold(B, frame(1), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(2), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(3), secs(0)), Ok(Some(frame(1))), "the oldest makes way");
        let update = cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), ms(10));
        let mut expected = [frame(2), frame(3)];
        for f in &mut expected {
            f[..6].copy_from_slice(&B_MAC);
        }
        assert_eq!(update.frames, expected);
        assert_eq!(cache.hold(B, frame(4), ms(20)), Err(frame(4)), "resolved: use lookup");
    }

    #[test]
    fn at_least_one_frame_is_held() {
        let mut cache = with(NdpConfig { queue_limit: 0, ..NdpConfig::default() });
        cache.resolve(B, secs(0));
        assert_eq!(cache.hold(B, frame(1), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(2), secs(0)), Ok(Some(frame(1))));
        let update = cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        assert_eq!(update.frames.len(), 1);
        assert_eq!(update.frames[0][59], 2);
    }

    #[test]
    fn multicast_and_unspecified_addresses_are_never_cached() {
        let mut cache = cache();
        assert_eq!(cache.hold(ALL_NODES, frame(1), secs(0)), Err(frame(1)));
        assert!(!cache.resolve(UNSPECIFIED, secs(0)));
        cache
            .handle_redirect(&Redirect { target: ALL_NODES, destination: ALL_NODES, target_mac: Some(B_MAC) }, secs(0));
        assert!(cache.is_empty());
    }

    // ---------------------------------------------------------------------------------
    // The bound: STALE goes first, INCOMPLETE never.
    // ---------------------------------------------------------------------------------

    #[test]
    fn a_full_cache_evicts_the_oldest_stale_entry_first() {
        let mut cache = with(NdpConfig { max_entries: 4, ..NdpConfig::default() });
        for n in 1..=4 {
            cache.handle_solicitation(ll(n), &ns(B_MAC), secs(u64::from(n)));
        }
        // ll(1) is used (DELAY): ll(2) is now the oldest STALE entry.
        cache.lookup(ll(1), secs(5));
        cache.handle_solicitation(ll(5), &ns(B_MAC), secs(6));
        assert_eq!(cache.neighbor(ll(2), secs(6)), None);
        cache.handle_solicitation(ll(6), &ns(B_MAC), secs(7));
        assert_eq!(cache.neighbor(ll(3), secs(7)), None);
        for n in [1, 4, 5, 6] {
            assert!(cache.neighbor(ll(n), secs(7)).is_some(), "{n} stays");
        }
        assert_eq!(cache.len(), 4);
        check(&cache);
    }

    /// Return a cache of `max` entries full of REACHABLE neighbours ll(1), ll(2), ...
    pub(crate) fn full_of_reachable(max: usize) -> NdpCache {
        let mut cache = with(NdpConfig { max_entries: max, ..NdpConfig::default() });
        for n in 1..=max as u16 {
            cache.resolve(ll(n), ms(u64::from(n)));
            cache.handle_advertisement(&na(ll(n), true, true, false, Some(B_MAC)), ms(u64::from(n)));
        }
        cache
    }

    #[test]
    fn messages_do_not_evict_neighbours_in_use() {
        let mut cache = full_of_reachable(2);
        cache.handle_solicitation(ll(9), &ns(B_MAC), secs(1));
        assert_eq!(
            cache.neighbor(ll(9), secs(1)),
            None,
            "a flood of solicitations cannot push out the neighbours in use"
        );
        assert_eq!(cache.len(), 2);
        // Once ReachableTime has passed they are STALE, and may go.
        cache.handle_solicitation(ll(9), &ns(B_MAC), secs(50));
        assert!(cache.neighbor(ll(9), secs(50)).is_some());
        check(&cache);
    }

    #[test]
    fn sending_evicts_the_oldest_resolved_entry_when_none_is_stale() {
        let mut cache = full_of_reachable(2);
        assert_eq!(cache.hold(ll(9), frame(1), secs(1)), Ok(None));
        assert_eq!(cache.neighbor(ll(1), secs(1)), None, "the oldest went");
        assert!(cache.neighbor(ll(2), secs(1)).is_some());
        check(&cache);
    }

    #[test]
    fn resolutions_are_bounded_and_never_evicted() {
        let mut cache = with(NdpConfig { max_entries: 3, max_incomplete: 2, ..NdpConfig::default() });
        assert_eq!(cache.hold(ll(1), frame(1), secs(0)), Ok(None));
        assert!(cache.resolve(ll(2), secs(0)));
        assert_eq!(cache.hold(ll(3), frame(3), secs(0)), Err(frame(3)), "max_incomplete");
        assert!(!cache.resolve(ll(3), secs(0)));
        cache.handle_solicitation(ll(4), &ns(B_MAC), secs(0));
        cache.handle_solicitation(ll(5), &ns(B_MAC), secs(1));
        assert_eq!(cache.neighbor(ll(4), secs(1)), None, "the STALE entry made room");
        assert_eq!(state_of(&cache, ll(1), secs(1)), Some((NeighborState::Incomplete, None)));
        assert_eq!(state_of(&cache, ll(2), secs(1)), Some((NeighborState::Incomplete, None)));
        // Full of resolutions: nothing new fits, and nothing held is lost.
        let mut cache = with(NdpConfig { max_entries: 2, max_incomplete: 2, ..NdpConfig::default() });
        cache.hold(ll(1), frame(1), secs(0)).unwrap();
        cache.hold(ll(2), frame(2), secs(0)).unwrap();
        cache.handle_solicitation(ll(4), &ns(B_MAC), secs(0));
        assert_eq!(cache.neighbor(ll(4), secs(0)), None);
        // The answer to a resolution needs no room.
        assert_eq!(cache.handle_advertisement(&na(ll(1), true, true, false, Some(B_MAC)), secs(0)).frames.len(), 1);
        check(&cache);
    }

    #[test]
    fn a_flood_of_new_addresses_stays_within_the_bound() {
        let mut cache = cache();
        for i in 0..50_000u32 {
            let ip = Ipv6Addr::from(0xfe80_0000_0000_0000_0000_0000_0000_0000u128 + u128::from(i));
            let now = Instant::from_micros(u64::from(i) * 100);
            cache.handle_solicitation(ip, &ns(B_MAC), now);
            if i % 7 == 0 {
                cache.lookup(ip, now);
            }
            if i % 11 == 0 {
                let _ = cache.hold(Ipv6Addr::from(u128::from(i) | 0x2001 << 112), frame(0), now);
                run(&mut cache, now);
            }
        }
        assert_eq!(cache.len(), 1024);
        check(&cache);
    }

    // ---------------------------------------------------------------------------------
    // Routers, prefixes and RA parameters (6.3.4, 6.3.6).
    // ---------------------------------------------------------------------------------

    #[test]
    fn a_router_lasts_its_lifetime() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(30, None), secs(0));
        assert_eq!(cache.default_router(ms(29_999)), Some(B));
        assert_eq!(cache.default_router(secs(30)), None);
        // A new advertisement restarts the lifetime; lifetime 0 removes the router.
        cache.handle_router_advertisement(B, &ra(30, None), secs(20));
        assert_eq!(cache.default_router(secs(49)), Some(B));
        cache.handle_router_advertisement(B, &ra(0, None), secs(21));
        assert_eq!(cache.default_router(secs(21)), None);
        // Lifetime 0 from an unknown router adds nothing; expired ones are dropped.
        cache.handle_router_advertisement(ll(1), &ra(0, None), secs(22));
        cache.handle_router_advertisement(ll(2), &ra(5, None), secs(22));
        run(&mut cache, secs(30));
        assert!(cache.routers.is_empty());
    }

    #[test]
    fn the_default_router_is_one_probably_reachable() {
        let mut cache = cache();
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        cache.handle_router_advertisement(ll(2), &ra(1800, None), secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(ll(1)), "none known: the first");
        cache.handle_router_advertisement(ll(2), &ra(1800, Some(C_MAC)), secs(1));
        assert_eq!(cache.default_router(secs(1)), Some(ll(2)), "the one with a STALE entry");
        assert!(cache.neighbor(ll(2), secs(1)).unwrap().is_router);
    }

    #[test]
    fn a_router_that_does_not_answer_goes_to_the_back() {
        let mut cache = cache();
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        cache.handle_router_advertisement(ll(2), &ra(1800, None), secs(0));
        cache.resolve(ll(1), secs(0));
        for t in 0..=3 {
            run(&mut cache, secs(t));
        }
        assert_eq!(cache.default_router(secs(3)), Some(ll(2)));
    }

    #[test]
    fn a_router_turning_host_leaves_the_router_list() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(1800, Some(B_MAC)), secs(0));
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(B));
        let update = cache.handle_advertisement(&na(B, true, true, true, Some(B_MAC)), secs(1));
        assert!(!update.router_lost, "still a router");
        let update = cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), secs(2));
        assert!(update.router_lost);
        assert!(!cache.neighbor(B, secs(2)).unwrap().is_router);
        assert_eq!(cache.default_router(secs(2)), Some(ll(1)));
    }

    #[test]
    fn an_advertisement_without_option_marks_an_existing_entry_as_router() {
        let mut cache = cache();
        cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        cache.handle_router_advertisement(B, &ra(0, None), secs(1));
        let n = cache.neighbor(B, secs(1)).unwrap();
        assert!(n.is_router);
        assert_eq!((n.state, n.mac), (NeighborState::Stale, Some(B_MAC)));
        assert_eq!(cache.default_router(secs(1)), None, "lifetime 0: not a default router");
    }

    #[test]
    fn routers_and_prefixes_are_bounded() {
        let mut cache = with(NdpConfig { max_routers: 2, max_prefixes: 2, ..NdpConfig::default() });
        for n in 1..=3 {
            let mut advert = ra(1800, None);
            let prefix = Ipv6Addr::new(0x2001, 0xdb8, n, 0, 0, 0, 0, 0);
            advert.prefixes.push(PrefixInfo {
                prefix,
                prefix_len: 64,
                on_link: true,
                autonomous: false,
                valid_lifetime_secs: 60,
                preferred_lifetime_secs: 60,
            });
            cache.handle_router_advertisement(ll(n), &advert, secs(0));
        }
        assert_eq!((cache.routers.len(), cache.prefixes.len()), (2, 2));
        assert!(!cache.on_link(Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1), secs(0)));
    }

    pub(crate) fn prefix_ra(prefix: &str, len: u8, on_link: bool, valid: u32) -> RouterAdvertisement {
        let mut advert = ra(0, None);
        advert.prefixes.push(PrefixInfo {
            prefix: prefix.parse().unwrap(),
            prefix_len: len,
            on_link,
            autonomous: true,
            valid_lifetime_secs: valid,
            preferred_lifetime_secs: valid,
        });
        advert
    }

    #[test]
    fn on_link_prefixes_follow_their_valid_lifetimes() {
        let mut cache = cache();
        let inside: Ipv6Addr = "2001:db8:1::99".parse().unwrap();
        assert!(cache.on_link(B, secs(0)), "link-local is always on-link (5.2)");
        assert!(!cache.on_link(inside, secs(0)));
        // Bits past the length do not count.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::ffff", 64, true, 60), secs(0));
        assert!(cache.on_link(inside, ms(59_999)));
        assert!(!cache.on_link("2001:db8:2::1".parse().unwrap(), secs(0)));
        assert!(!cache.on_link(inside, secs(60)));
        // Refreshed, then removed by a valid lifetime of 0.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 60), secs(30));
        assert!(cache.on_link(inside, secs(89)));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 0), secs(31));
        assert!(!cache.on_link(inside, secs(31)));
        // L clear, a new prefix with lifetime 0, and the link-local prefix: ignored.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, false, 60), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 0), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("fe80::", 64, true, 60), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 129, true, 60), secs(32));
        assert!(cache.prefixes.is_empty());
        // An infinite lifetime lasts.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 48, true, INFINITE_LIFETIME), secs(33));
        run(&mut cache, Instant::from_micros(u64::MAX));
        assert!(cache.on_link(inside, Instant::from_micros(u64::MAX)));
    }

    #[test]
    fn router_advertisements_set_mtu_hop_limit_and_timers() {
        let mut cache = cache();
        let mut advert = ra(1800, None);
        advert.mtu = Some(1400);
        advert.cur_hop_limit = 64;
        advert.reachable_time_ms = 10_000;
        advert.retrans_timer_ms = 500;
        cache.handle_router_advertisement(B, &advert, secs(0));
        assert_eq!((cache.link_mtu(), cache.cur_hop_limit()), (Some(1400), Some(64)));
        assert_eq!(
            (cache.base_reachable_time(), cache.retrans_timer()),
            (Duration::from_secs(10), Duration::from_millis(500))
        );
        // Too small an MTU, unspecified fields: nothing changes.
        cache.handle_router_advertisement(B, &RouterAdvertisement { mtu: Some(1000), ..ra(1800, None) }, secs(1));
        assert_eq!((cache.link_mtu(), cache.cur_hop_limit()), (Some(1400), Some(64)));
        assert_eq!(cache.retrans_timer(), Duration::from_millis(500));
        // The advertised RetransTimer spaces solicitations, with a floor.
        cache.resolve(ll(1), secs(2));
        assert_eq!(run(&mut cache, secs(2)).0.len(), 1);
        assert_eq!(cache.next_timeout(), Some(ms(2500)));
        cache.handle_router_advertisement(
            B,
            &RouterAdvertisement { retrans_timer_ms: 1, reachable_time_ms: 1, ..ra(1800, None) },
            secs(3),
        );
        assert_eq!((cache.retrans_timer(), cache.base_reachable_time()), (MIN_RETRANS_TIMER, MIN_REACHABLE_TIME));
    }

    #[test]
    fn the_fixture_advertisement_configures_the_cache() {
        let Ok(NdpMessage::RouterAdvertisement(advert)) = parse_frame(&RA_FRAME) else { panic!() };
        let mut cache = cache();
        cache.handle_router_advertisement(B, &advert, secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(B));
        assert!(cache.on_link("2001:db8:1::1".parse().unwrap(), secs(0)));
        assert_eq!(cache.link_mtu(), Some(1500));
        assert_eq!(state_of(&cache, B, secs(0)), Some((NeighborState::Stale, Some(B_MAC))));
    }
}
