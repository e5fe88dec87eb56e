//! The connection table: what the host keeps about its connections and listeners besides
//! the connections themselves. Slots with generations (a [`SocketId`] names one), the
//! 4-tuple index, the listeners, the dirty list `transmit` works through, the pool of
//! buffer storage, the timer wheel, the orphans, and the memory and window budgets.
//! The operations on it that need the rest of the host (inserting, settling and removing a
//! connection) are `Interface`'s, in `table.rs`.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};

use bypass_tcp::Storage;
use bypass_tcp::{Connection, Events, FourTuple, Instant};

use super::SocketId;
use crate::syncookie::RecentOverflow;
use crate::timer_wheel::TimerWheel;
use crate::tuple_hash::TupleHasher;
use crate::wire::HeaderTemplate;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// A child of the listener on this port, of this epoch (`Listener::epoch`), not yet
    /// accepted.
    Listener(u16, u32),
    /// Handed to the user (accepted or connected).
    User,
    /// The user let go (`close`, `abort`); removed once the connection is CLOSED.
    Released,
}

pub(super) struct Sock {
    pub(super) conn: Connection,
    /// The table key. Kept here because a connection back in LISTEN (RST in SYN-RECEIVED)
    /// no longer knows its remote address.
    pub(super) tuple: FourTuple,
    pub(super) owner: Owner,
    /// The MAC the peer's frames came from: used if ARP has no entry.
    pub(super) peer_mac: Option<[u8; 6]>,
    pub(super) dirty: bool,
    /// Counted among the orphans, holding this many bytes of their memory bound.
    pub(super) orphan: Option<usize>,
    /// The connection's buffer capacity as last counted in `Connections::buffer_bytes`.
    pub(super) capacity: usize,
    /// The receive window it offers, as last counted in `Connections::offered_bytes`.
    pub(super) offered: u32,
    /// Its data in flight, as last counted in `Connections::flight_bytes`.
    pub(super) in_flight: u32,
    /// The kinds of its events waiting in the user's queue (`Interface::events`): an event
    /// already waiting is not queued again.
    pub(super) user_events: Events,
    /// The deadline of its live entry in `Connections::timers`. A deadline that moves later
    /// leaves the entry be: when it comes up early, the connection is armed again for its
    /// real deadline. One that moves earlier adds an entry and makes the old one stale.
    pub(super) scheduled: Option<Instant>,
    /// A listener's child waiting in its `ready` queue.
    pub(super) queued: bool,
    /// When it last ran (`Interface::settle`): its empty buffers go back to the pool once
    /// it has not run for `IDLE_RELEASE`.
    pub(super) active_at: Instant,
    /// Listed in `Connections::idle`.
    pub(super) idle_listed: bool,
    /// The Ethernet and IP headers of its segments, for the next hop's MAC address they
    /// carry (`None` until it first sends to a resolved next hop).
    pub(super) headers: Option<HeaderTemplate>,
    /// While `headers` carries the ARP cache's answer for its next hop: the cache's
    /// version then and the entry's expiry (`Interface::next_hop_mac_until`). The next
    /// hop's MAC is the template's while the version is the same and the entry has not
    /// expired, without a lookup.
    pub(super) hop: Option<(u64, Instant)>,
}

impl Sock {
    /// Make this place's host part that of a new connection on `tuple`, as
    /// `Interface::insert` builds it, for the connection just built in it
    /// (`Connection::accept_in`, `connect_in`).
    pub(super) fn renew(&mut self, tuple: FourTuple, owner: Owner, peer_mac: Option<[u8; 6]>, now: Instant) {
        // Every field named, so that one added is not left behind from the last occupant.
        let Sock {
            conn: _,
            tuple: t,
            owner: o,
            peer_mac: m,
            dirty,
            orphan,
            capacity,
            offered,
            in_flight,
            user_events,
            scheduled,
            queued,
            active_at,
            idle_listed,
            headers,
            hop,
        } = self;
        (*t, *o, *m, *dirty, *orphan) = (tuple, owner, peer_mac, false, None);
        (*capacity, *offered, *in_flight, *user_events, *scheduled, *queued) = (0, 0, 0, Events::NONE, None, false);
        (*active_at, *idle_listed, *headers, *hop) = (now, false, None, None);
    }

    /// Count the window the connection offers now in `offered_bytes` and its data in flight
    /// in `flight_bytes`, the sums the host's budgets are kept by (`Connections::offered_bytes`,
    /// `Connections::flight_bytes`); return the two. Takes the sums rather than the table, so
    /// that a caller holding the connection needs no second lookup of its slot.
    pub(super) fn count_budgets(&mut self, offered_bytes: &mut usize, flight_bytes: &mut usize) -> (u32, u32) {
        let (offered, in_flight) = (self.conn.receive_window(), self.conn.bytes_in_flight());
        *offered_bytes = *offered_bytes - self.offered as usize + offered as usize;
        *flight_bytes = *flight_bytes - self.in_flight as usize + in_flight as usize;
        (self.offered, self.in_flight) = (offered, in_flight);
        (offered, in_flight)
    }

    /// [`count_budgets`](Self::count_budgets) without a budget (`Connections::budgeted`):
    /// note the window the connection offers now and its data in flight, which nothing
    /// sums until asked.
    #[inline]
    pub(super) fn note_budgets(&mut self) {
        (self.offered, self.in_flight) = (self.conn.receive_window(), self.conn.bytes_in_flight());
    }
}

/// A place in the table. The connection is boxed: a slot is two words, so the table grows
/// without moving any connection (a client's connections in TIME-WAIT stay in it, and each
/// doubling of an unboxed table copied all of them: about 2,500 instructions a connection
/// opened), and a connection (about 2.3 KiB) is written into its box once instead of being
/// moved by value through the insert and the remove (about 250 instructions of `memcpy` a
/// move). The data path follows one pointer more, from the slot to its box.
pub(super) struct Slot {
    pub(super) generation: u32,
    pub(super) sock: Option<Box<Sock>>,
}

/// Places of removed connections kept for new ones, at most: enough for the opens that
/// follow a burst of closes without a `malloc` and a `free` of a box each; each holds the
/// 2.3 KiB of a connection and its trace's and sent queue's few hundred bytes.
const SPARE_PLACES: usize = 64;

pub(super) struct Listener {
    pub(super) half_open: usize,
    /// Established children in the order they arrived, for `accept`; also holds ids of
    /// children that closed before being accepted (their `Sock::queued` is false), dropped
    /// as `accept` passes them or when they outnumber the live ones.
    pub(super) ready: VecDeque<SocketId>,
    /// Children in `ready` still waiting (the backlog's length).
    pub(super) queued: usize,
    /// Tells this listener's children from those of an earlier listener on the port.
    pub(super) epoch: u32,
    /// When the SYN queue last overflowed (a cookie was sent): cookies are checked only
    /// within `StackConfig::syn_cookie_valid` of it.
    pub(super) overflow: RecentOverflow,
}

/// Builds the listener table's hashers. Only the application adds listeners, so a peer
/// cannot crowd a bucket: the ports it sends to are only looked up. foldhash's `fast`
/// variant (hashbrown's default) is enough.
pub(super) type ListenerHasher = foldhash::fast::RandomState;

/// The connections and listeners of one host, with their bookkeeping.
pub(super) struct Connections {
    pub(super) slots: Vec<Slot>,
    free: Vec<u32>,
    /// The boxes of removed connections, for new connections to be built in
    /// (`Connection::accept_in`, `connect_in`): a new connection then takes no `malloc` and
    /// is not moved into its box, and one removed no `free` (see `recycle`). The boxes
    /// themselves are what is kept, to go back into slots as they are.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Sock>>,
    /// The 4-tuple index, hashed by foldhash's keyed folded multiply (`tuple_hash.rs`): SipHash
    /// cost about 200 instructions a segment once connections interleave.
    pub(super) table: HashMap<FourTuple, u32, TupleHasher>,
    /// The slot `find` last found, or `insert` last filled: most segments in a row are for
    /// one connection (the one exchanging requests, the one moving bulk, the one just
    /// opened), and checking this slot's tuple is cheaper than hashing the tuple. Needs no
    /// upkeep: a slot holds the connection of a tuple only while the table maps that tuple
    /// to it (tuples are fixed at `insert`).
    last_found: Cell<u32>,
    /// The listeners by port, hashed by foldhash (`ListenerHasher`): the standard library's
    /// SipHash-1-3 of a port cost about 100 instructions a lookup, and a connection's
    /// handshake, accept and close look its listener up several times (about 1,000
    /// instructions a connection on the server).
    pub(super) listeners: HashMap<u16, Listener, ListenerHasher>,
    pub(super) dirty: Vec<u32>,
    /// The dirty connections in the order `transmit` sends them (held, then released),
    /// worked through in place: only `transmit` touches it.
    pub(super) tx_order: Vec<u32>,
    /// The device filled up during the last `transmit`: the next takes the dirty
    /// connections in the order they were left, released or not.
    pub(super) tx_backlog: bool,
    /// Buffer storage of removed connections and of idle connections' empty buffers,
    /// zeroed, for the next that need some (see `Interface::release_idle_storage`,
    /// `remove`, `table::lend`).
    /// Indexed by `table::pool_for`: send-buffer-sized storage, then receive-buffer-sized, so
    /// taking one is a pop.
    pub(super) storage_pool: [Vec<Storage>; 2],
    /// Connections that ran holding buffer storage, keyed by slot and generation, for
    /// `Interface::release_idle_storage` to give their empty buffers back once idle.
    pub(super) idle: Vec<(u32, u32)>,
    /// When `release_idle_storage` next looks at `idle` (`None`: it is empty).
    pub(super) idle_sweep: Option<Instant>,
    /// Each connection's earliest timer, keyed by slot and generation (see `Sock::scheduled`).
    pub(super) timers: TimerWheel<(u32, u32)>,
    /// Entries `expire_timers` takes from `timers` (kept for its capacity).
    fired: Vec<(Instant, (u32, u32))>,
    /// The epoch of the latest listener (see `Owner::Listener`).
    pub(super) listener_epoch: u32,
    /// Connections the application closed that are still finishing, and the bytes they
    /// were charged when closed (see `StackConfig::max_orphans`).
    pub(super) orphans: usize,
    pub(super) orphan_bytes: usize,
    /// `StackConfig::window_budget` as resolved for the device (`usize::MAX`: no limit).
    pub(super) window_budget: usize,
    /// Bytes allocated to the buffers of the connections in the table.
    pub(super) buffer_bytes: usize,
    /// The receive windows the connections offer, summed as each last ran (kept while
    /// `budgeted`).
    pub(super) offered_bytes: usize,
    /// `StackConfig::flight_budget` as resolved for the device (`usize::MAX`: no limit).
    pub(super) flight_budget: usize,
    /// The connections' data in flight, summed as each last ran (kept while `budgeted`).
    pub(super) flight_bytes: usize,
    /// A window or flight budget is set, or was while connections were in the table: the
    /// sums `offered_bytes` and `flight_bytes` are kept and every pass sets the caps
    /// (`Interface::apply_budgets`). Without (no budget since the table was last empty),
    /// every cap is `u32::MAX` from the connection's making and stays so, and each pass
    /// only notes the connection's own window and data in flight (`Sock::note_budgets`),
    /// which `Interface::offered_windows` and `bytes_in_flight` sum when asked.
    pub(super) budgeted: bool,
}

impl Connections {
    /// Return an empty table with no budget.
    pub(super) fn new() -> Self {
        Connections {
            slots: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            table: HashMap::with_hasher(TupleHasher::default()),
            last_found: Cell::new(0),
            listeners: HashMap::with_hasher(ListenerHasher::default()),
            dirty: Vec::new(),
            tx_order: Vec::new(),
            tx_backlog: false,
            storage_pool: [Vec::new(), Vec::new()],
            idle: Vec::new(),
            idle_sweep: None,
            timers: TimerWheel::new(),
            fired: Vec::new(),
            listener_epoch: 0,
            orphans: 0,
            orphan_bytes: 0,
            window_budget: usize::MAX,
            buffer_bytes: 0,
            offered_bytes: 0,
            flight_budget: usize::MAX,
            flight_bytes: 0,
            budgeted: false,
        }
    }

    /// Put `sock` in a free slot (a new one if none is free) and index it by its 4-tuple;
    /// return its id. Its budgets are not counted yet (`Interface::apply_budgets`).
    pub(super) fn insert(&mut self, sock: Box<Sock>) -> SocketId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { generation: 0, sock: None });
                (self.slots.len() - 1) as u32
            }
        };
        let tuple = sock.tuple;
        let slot = &mut self.slots[index as usize];
        slot.sock = Some(sock);
        let id = SocketId { index, generation: slot.generation };
        let replaced = self.table.insert(tuple, index);
        debug_assert!(replaced.is_none(), "{tuple} is in the table already");
        // The next segment is most likely this connection's (the SYN-ACK to our SYN, the ACK
        // of our SYN-ACK): `find` then checks this slot first instead of hashing the tuple.
        self.last_found.set(index);
        id
    }

    /// Return the slot of the connection of `tuple`, if any. Inlined into the demux, its
    /// one caller: the last slot's check is a few comparisons, less than a call.
    #[inline]
    pub(super) fn find(&self, tuple: &FourTuple) -> Option<u32> {
        let hint = self.last_found.get();
        if self.slots.get(hint as usize).and_then(|s| s.sock.as_ref()).is_some_and(|s| s.tuple == *tuple) {
            return Some(hint);
        }
        let index = *self.table.get(tuple)?;
        self.last_found.set(index);
        Some(index)
    }

    /// Take connection `index` out of the table, uncounting its buffers, window and orphan
    /// charge; its slot's next occupant gets a new generation, so old ids go stale.
    pub(super) fn remove(&mut self, index: u32) -> Option<Box<Sock>> {
        let slot = &mut self.slots[index as usize];
        let sock = slot.sock.take()?;
        self.table.remove(&sock.tuple);
        self.buffer_bytes -= sock.capacity;
        if self.budgeted {
            self.offered_bytes -= sock.offered as usize;
            self.flight_bytes -= sock.in_flight as usize;
        }
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        if let Some(bytes) = sock.orphan {
            self.orphans -= 1;
            self.orphan_bytes -= bytes;
        }
        Some(sock)
    }

    /// Keep the box of a removed connection for the next one, if it holds no buffer
    /// storage (it would be kept with it) and fewer than `SPARE_PLACES` are kept.
    pub(super) fn recycle(&mut self, sock: Box<Sock>) {
        if self.spare.len() < SPARE_PLACES && sock.conn.storage_attached() == (false, false) {
            self.spare.push(sock);
        }
    }

    /// Take the box of a removed connection to build a new one in, if one is kept.
    pub(super) fn take_spare(&mut self) -> Option<Box<Sock>> {
        self.spare.pop()
    }

    /// Return how many connections are in the table.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Return how many connection buffers (send or receive storage) wait in the pool.
    pub(super) fn pooled_buffers(&self) -> usize {
        self.storage_pool[0].len() + self.storage_pool[1].len()
    }

    /// Return the connection `id` names, if it is still in the table.
    pub(super) fn sock(&self, id: SocketId) -> Option<&Sock> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_deref()
    }

    /// Return the connection `id` names for updating, if it is still in the table.
    pub(super) fn sock_mut(&mut self, id: SocketId) -> Option<&mut Sock> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_deref_mut()
    }

    /// Put connection `index` on the dirty list (once), for `transmit` to send what it has.
    pub(super) fn mark_dirty(&mut self, index: u32) {
        if let Some(sock) = self.slots[index as usize].sock.as_mut()
            && !sock.dirty
        {
            sock.dirty = true;
            self.dirty.push(index);
        }
    }

    /// Put the established child `id` of the listener on `port` in its accept queue.
    pub(super) fn enqueue_child(&mut self, port: u16, id: SocketId) {
        let Some(l) = self.listeners.get_mut(&port) else { return };
        l.ready.push_back(id);
        l.queued += 1;
        if let Some(sock) = self.slots[id.index as usize].sock.as_mut() {
            sock.queued = true;
        }
    }

    /// Fire the connection timers due at `now`: each connection whose deadline has come
    /// handles its timeout and is marked dirty; one whose deadline moved later is armed
    /// again for it.
    pub(super) fn expire_timers(&mut self, now: Instant) {
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
    }
}
