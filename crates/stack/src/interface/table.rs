//! The connection table: slots with generations, the 4-tuple index, the buffer pool, the
//! memory and window budgets, and each connection's life after it ran.

use std::time::Duration;

use bypass_tcp::Storage;
use bypass_tcp::{Buffers, Connection, Event, Events, FourTuple, Instant, RecvError, Side, State};

use super::*;

/// An empty buffer gives its storage back only if at most this much of it was written since
/// it took it (all of it is zeroed for the next connection): a connection exchanging small
/// messages lets go once idle, one moving bulk keeps its storage.
const DETACH_WRITTEN_MAX: usize = 16 * 1024;
/// How long a connection goes without running before its empty buffers go back to the pool
/// (checked this often, so they go between one and two of these after it last ran). A
/// connection exchanging requests keeps its storage between them instead of giving it back
/// and taking it again on every exchange (zeroing it, two pool operations: about 390
/// instructions an exchange); an idle one holds none after a few milliseconds, well within
/// any figure of memory per idle connection taken after it settled.
const IDLE_RELEASE: Duration = Duration::from_millis(2);
/// Which of the two storage pools (send size, receive size: one when they are equal) keeps
/// storage of `capacity` bytes, for buffer sizes `(send, recv)`; `None` for other sizes.
fn pool_for((send, recv): (usize, usize), capacity: usize) -> Option<usize> {
    if capacity == send {
        Some(0)
    } else if capacity == recv {
        Some(1)
    } else {
        None
    }
}

/// Give `conn`'s detached buffers zeroed storage from `pool` (buffer sizes `sizes`),
/// counting it in `counters`, before it may need them (a segment with data arrives, or the
/// application calls), so that taking up storage again allocates nothing while the pool has
/// some. With `need`, only that side, allocated if the pool has none: a buffer that stays
/// empty would hold pooled storage that the needy side of this or the next connection then
/// allocates anew. Takes the connection rather than its slot: its callers (`receive_tcp`,
/// `Interface::connection_for_user`, `connection_for_read`) hold it already.
#[inline]
pub(super) fn lend(
    conn: &mut Connection,
    sizes: (usize, usize),
    pool: &mut [Vec<Storage>; 2],
    counters: &mut Counters,
    need: Option<Side>,
) {
    conn.attach_storage(|capacity, side| {
        if need.is_some_and(|n| n != side) {
            return None;
        }
        if let Some(storage) = pool_for(sizes, capacity).and_then(|k| pool[k].pop()) {
            counters.buffers_recycled += 1;
            return Some(storage);
        }
        (need == Some(side)).then(|| {
            counters.buffers_allocated += 1;
            Storage::new(capacity)
        })
    });
}

/// A connection found for a read ([`Interface::connection_for_read`]).
pub(crate) enum ForRead<'a> {
    /// Its receive buffer holds data: the connection, marked for the next transmit.
    Data(&'a mut Connection),
    /// Its receive buffer is empty: the connection, untouched, and what a read returns.
    Nothing(&'a Connection, Result<usize, RecvError>),
}

/// Zeroed buffer storage kept for connections that take up storage again, at most (or
/// twice `StackConfig::buffer_pool`, if more).
const STORAGE_POOL: usize = 256;

/// The kinds of event the host acts on itself when a connection hands them over
/// (`Interface::deliver_from`): `Established` (a listener's child joins its accept queue),
/// `TimedOut` and `Reset` (counted).
const HOST_KINDS: Events = Events::of(Event::Established).with(Event::TimedOut).with(Event::Reset);

/// Return whether the events `taken` from a connection whose user already has the kinds
/// `waiting` in its queue (`Sock::user_events`) ask anything of `deliver_from`: a kind not
/// waiting yet (to be queued), or one the host acts on. An exchange's `Readable` and
/// `Writable`, when both wait already (an application that takes its events after a
/// while, or never), ask nothing: an AND and a test instead of the call.
///
/// Most calls find no event at all (after a segment that only acknowledged, and in
/// `settle` after a connection sent): that is tested first, alone, as before the sets.
#[inline]
fn needs_delivery(taken: Events, waiting: Events) -> bool {
    !taken.is_empty() && !taken.without(waiting.without(HOST_KINDS)).is_empty()
}

impl Interface {
    /// The most a connection holding `own` bytes of a budget of `budget` bytes may hold now,
    /// when `total` bytes of it are held: what is left of the budget, up to an equal share
    /// among the `parties` that may hold some, and never below two full-sized segments, so
    /// that every connection moves. Its operands are the table's fields rather than the
    /// table, so that `apply_budgets` computes it while it holds the connection from its
    /// slot.
    fn budget_cap(budget: usize, parties: usize, total: usize, mss: u16, own: u32) -> u32 {
        if budget == usize::MAX {
            return u32::MAX;
        }
        let share = budget / parties.max(1);
        let left = own as usize + budget.saturating_sub(total);
        let floor = 2 * usize::from(mss);
        share.min(left).max(floor).min(u32::MAX as usize) as u32
    }

    /// Give connection `index` its window cap, flight cap and growth permission, and count
    /// its buffers, after one lookup of its slot. The window budget is shared among the
    /// connections that can still be sent data (all but the orphans, whose data would be
    /// answered with RST); the flight budget among all of them. Without a budget
    /// (`Connections::budgeted`), every cap is `u32::MAX` already, as `budget_cap` would
    /// make it, and the window and flight are only noted, not summed.
    #[inline(always)]
    pub(super) fn apply_budgets(&mut self, index: u32) {
        let conns = &mut self.conns;
        let Some(sock) = conns.slots[index as usize].sock.as_deref_mut() else { return };
        if conns.budgeted {
            let mss = self.config.tcp.mss;
            let connections = conns.table.len();
            let (offered, in_flight) = sock.count_budgets(&mut conns.offered_bytes, &mut conns.flight_bytes);
            let receivers = connections.saturating_sub(conns.orphans);
            let window_cap = Self::budget_cap(conns.window_budget, receivers, conns.offered_bytes, mss, offered);
            sock.conn.set_window_cap(window_cap);
            let flight_cap = Self::budget_cap(conns.flight_budget, connections, conns.flight_bytes, mss, in_flight);
            sock.conn.set_flight_cap(flight_cap);
        } else {
            sock.note_budgets();
        }
        let capacity = sock.conn.buffer_capacity();
        conns.buffer_bytes = conns.buffer_bytes - sock.capacity + capacity;
        sock.capacity = capacity;
        sock.conn.set_growth_allowed(conns.buffer_bytes < self.config.buffer_memory);
    }

    /// Put `conn` in the table for `tuple`, owned by `owner`; return its id.
    #[inline]
    pub(super) fn insert(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        conn: Connection,
        owner: Owner,
        peer_mac: Option<[u8; 6]>,
    ) -> SocketId {
        let sock = Self::boxed(now, tuple, conn, owner, peer_mac);
        self.insert_sock(now, sock)
    }

    /// Return `conn` in a new box, the host's part as [`Sock::renew`] makes it. Inlined:
    /// where the connection was just built (`connect_from`), it then goes from its
    /// constructor into its box with one copy fewer of its 2.3 KiB.
    #[inline]
    pub(super) fn boxed(
        now: Instant,
        tuple: FourTuple,
        conn: Connection,
        owner: Owner,
        peer_mac: Option<[u8; 6]>,
    ) -> Box<Sock> {
        Box::new(Sock {
            conn,
            tuple,
            owner,
            peer_mac,
            dirty: false,
            orphan: None,
            capacity: 0,
            offered: 0,
            in_flight: 0,
            user_events: Events::NONE,
            scheduled: None,
            queued: false,
            active_at: now,
            idle_listed: false,
            headers: None,
            hop: None,
        })
    }

    /// Put `sock`, a new connection in its box (from [`boxed`](Self::boxed), or a spare one
    /// renewed), in the table; return its id.
    pub(super) fn insert_sock(&mut self, now: Instant, mut sock: Box<Sock>) -> SocketId {
        if let Some(mtu) = self.known_path_mtu(now, sock.tuple.remote.ip()) {
            sock.conn.set_path_mtu(now, mtu);
        }
        let id = self.conns.insert(sock);
        self.apply_budgets(id.index);
        self.conns.mark_dirty(id.index);
        id
    }

    /// Take connection `index` out of the table for good: its counters go to the host's
    /// totals, its empty buffers' storage to the pool and its box to the spares. Out of
    /// line: once a connection, and `settle`, which calls it, is on every segment's path.
    #[inline(never)]
    pub(super) fn remove(&mut self, index: u32) {
        if let Some(mut sock) = self.conns.remove(index) {
            let stats = sock.conn.stats();
            self.counters.resets_for_lost_data += stats.resets_for_lost_data;
            self.ended.add(&stats);
            // The storage of its empty buffers goes back to the pool, zeroed, taken in place
            // (`into_buffers` would move the 2.3 KiB connection out of its box first); a buffer
            // that still holds bytes (a connection reset with data unread or unacknowledged)
            // is freed with it. Buffers autotuning grew go back to the allocator: the pool
            // keeps the configured sizes, what short connections (the ones a pool is for) use.
            let mut freed = [None, None];
            sock.conn.detach_idle_storage(usize::MAX, |storage| {
                let free = if freed[0].is_none() { 0 } else { 1 };
                freed[free] = Some(storage);
            });
            for storage in freed.into_iter().flatten() {
                self.pool_storage(storage);
            }
            self.conns.recycle(sock);
        }
    }

    /// Return connection `id` for a user call, marked dirty (`Connections::mark_dirty`) and
    /// lent storage (`lend`, with `need`), after one lookup of its slot rather than
    /// one for each of these (a read and a write on every exchange).
    #[inline]
    pub(super) fn connection_for_user(&mut self, id: SocketId, need: Option<Side>) -> Option<&mut Connection> {
        let slot = self.conns.slots.get_mut(id.index as usize).filter(|s| s.generation == id.generation)?;
        let sock = slot.sock.as_deref_mut()?;
        if !sock.dirty {
            sock.dirty = true;
            self.conns.dirty.push(id.index);
        }
        let sizes = (self.config.tcp.send_buffer, self.config.tcp.recv_buffer);
        lend(&mut sock.conn, sizes, &mut self.conns.storage_pool, &mut self.counters, need);
        Some(&mut sock.conn)
    }

    /// Return connection `id` for a read after one lookup of its slot: when its receive
    /// buffer holds data, marked dirty and lent storage as by
    /// [`connection_mut`](Self::connection_mut) (`Data`); when it holds none, untouched,
    /// with what a read returns then ([`Connection::recv_nothing`]; `Nothing`). Reading
    /// nothing changes nothing, so it costs no pass through the connection's output and
    /// settling.
    #[inline(always)]
    pub(crate) fn connection_for_read(&mut self, id: SocketId) -> Option<ForRead<'_>> {
        let slot = self.conns.slots.get_mut(id.index as usize).filter(|s| s.generation == id.generation)?;
        let sock = slot.sock.as_deref_mut()?;
        // The buffer's length first (a load, inlined): `recv_nothing`, a call, only when it
        // is empty, to say what the read returns.
        if sock.conn.recv_available() == 0
            && let Some(nothing) = sock.conn.recv_nothing()
        {
            return Some(ForRead::Nothing(&sock.conn, nothing));
        }
        if !sock.dirty {
            sock.dirty = true;
            self.conns.dirty.push(id.index);
        }
        let sizes = (self.config.tcp.send_buffer, self.config.tcp.recv_buffer);
        lend(&mut sock.conn, sizes, &mut self.conns.storage_pool, &mut self.counters, None);
        Some(ForRead::Data(&mut sock.conn))
    }

    /// Give the empty buffers of each connection that has not run for `IDLE_RELEASE` back
    /// to the pool (see `Connection::detach_idle_storage`): an idle connection then holds
    /// no buffer memory. Runs every `IDLE_RELEASE` while any connection is listed.
    pub(super) fn release_idle_storage(&mut self, now: Instant) {
        if self.conns.idle_sweep.is_none_or(|t| t > now) {
            return;
        }
        let mut idle = std::mem::take(&mut self.conns.idle);
        let mut k = 0;
        while k < idle.len() {
            let (index, generation) = idle[k];
            let slot = &mut self.conns.slots[index as usize];
            let Some(sock) = slot.sock.as_mut().filter(|_| slot.generation == generation) else {
                idle.swap_remove(k); // gone
                continue;
            };
            if now < sock.active_at + IDLE_RELEASE {
                k += 1;
                continue;
            }
            sock.idle_listed = false;
            idle.swap_remove(k);
            let mut freed = [None, None];
            sock.conn.detach_idle_storage(DETACH_WRITTEN_MAX, |storage| {
                let free = if freed[0].is_none() { 0 } else { 1 };
                freed[free] = Some(storage);
            });
            for storage in freed.into_iter().flatten() {
                self.pool_storage(storage);
            }
        }
        self.conns.idle_sweep = (!idle.is_empty()).then_some(now + IDLE_RELEASE);
        self.conns.idle = idle;
    }

    /// Keep `storage` (zeroed) for the next connection that needs some, if it is of a size
    /// connections start with and the pool has room.
    fn pool_storage(&mut self, storage: Storage) {
        let sizes = (self.config.tcp.send_buffer, self.config.tcp.recv_buffer);
        let limit = STORAGE_POOL.max(2 * self.config.buffer_pool);
        let pooled = self.conns.storage_pool[0].len() + self.conns.storage_pool[1].len();
        if let Some(k) = pool_for(sizes, storage.capacity())
            && storage.is_allocated()
            && pooled < limit
        {
            self.conns.storage_pool[k].push(storage);
        }
    }

    /// Reset connection `index` if it is the child of a listener that has gone (an
    /// `unlisten` leaves half-open children be until they next have something to do, as
    /// Linux leaves request sockets whose listener closed: `tcp_v4_rcv` and
    /// `reqsk_timer_handler` drop them when they come up).
    pub(super) fn reset_if_orphaned_child(&mut self, now: Instant, index: u32) {
        let Some(sock) = self.conns.slots[index as usize].sock.as_mut() else { return };
        if let Owner::Listener(port, epoch) = sock.owner
            && self.conns.listeners.get(&port).is_none_or(|l| l.epoch != epoch)
        {
            sock.conn.abort(now);
            sock.owner = Owner::Released;
            sock.queued = false;
        }
    }

    /// Return buffers for a new connection: not yet allocated; each takes storage from the
    /// pool, or allocates it, when it first holds data (`lend`). A SYN, even a
    /// flood of them, allocates no buffer memory.
    pub(super) fn take_buffers(&mut self) -> Buffers {
        Buffers::unallocated(&self.config.tcp)
    }

    /// Pass on the events of the connections touched since the last transmit, so the
    /// application sees what arrived before replies go out (call after receiving).
    ///
    /// Events come only from what arrives and what times out (a connection's segments, the
    /// ICMP errors quoting them, its timers: `Connection::handle_segment`, `handle_icmp`,
    /// `handle_timeout`); the user's calls (`send`, `recv`, `close`, `abort`, ...) give
    /// none. So when no frame was received and no timer fired since the last call, the
    /// connections touched since (by the user's calls) have no event to pass on, and the
    /// walk over them is skipped: the poll after an application's write, on both ends of
    /// every exchange.
    ///
    /// Inlined down to that test, and to one connection's delivery when it is the only one
    /// touched (a host answering one request): the poll after a write pays the test, and
    /// the poll that received a request one connection's `deliver`, not a call; more go
    /// through the walk (`deliver_dirty`).
    #[inline]
    pub fn deliver_events(&mut self) {
        if std::mem::take(&mut self.events_due) {
            if let [index] = self.conns.dirty[..] {
                // One connection touched (a host answering one request): `deliver` inlined.
                if self.conns.slots[index as usize].sock.is_some() {
                    self.deliver(index);
                }
            } else {
                self.deliver_dirty();
            }
        }
    }

    /// [`deliver_events`](Self::deliver_events) for a caller that calls
    /// [`transmit`](Self::transmit) next, with nothing between (`Stack::poll`): when one
    /// connection was touched, it is a bound connection the user holds, nothing waits in
    /// the control queue and the connection has nothing to send now (a segment whose ACK
    /// is delayed), its pass through `transmit` is made here, instead of a delivery here
    /// and a pass finding nothing there (`settle_quiet`).
    ///
    /// That `transmit` would make the same pass and write no frame: it writes the control
    /// queue first (empty), then makes a pass over each connection marked (this one
    /// alone), which asks `nothing_to_transmit` (here `true`) and then settles it. Were
    /// the application to call in between, that pass would come after its call, and could
    /// differ (a deadline noted before a write that moves it later, the budgets counted
    /// before a read): so [`Stack::poll_rx`], after which the application works, calls
    /// `deliver_events`, and only [`Stack::poll`] this. A listener's child (which
    /// `transmit` resets when its listener has gone) and a connection back in LISTEN take
    /// their pass in `transmit` as before.
    ///
    /// [`Stack::poll`]: crate::Stack::poll
    /// [`Stack::poll_rx`]: crate::Stack::poll_rx
    #[inline]
    pub fn deliver_events_settling(&mut self, now: Instant) {
        if std::mem::take(&mut self.events_due) {
            if let [index] = self.conns.dirty[..] {
                // One connection touched: its pass made here when it is a bound connection
                // of the user's with nothing to send, else `deliver` inlined, as in
                // `deliver_events`.
                let Some(sock) = self.conns.slots[index as usize].sock.as_mut() else { return };
                if sock.owner == Owner::User
                    && sock.conn.remote_addr().is_some()
                    && self.control.is_empty()
                    && sock.conn.nothing_to_transmit(now)
                {
                    self.settle_quiet(now, index);
                } else {
                    self.deliver(index);
                }
            } else {
                self.deliver_dirty();
            }
        }
    }

    /// [`deliver_events`](Self::deliver_events) when a frame was received or a timer fired
    /// and other than one connection was touched since: the walk over them.
    #[inline(never)]
    fn deliver_dirty(&mut self) {
        for k in 0..self.conns.dirty.len() {
            let index = self.conns.dirty[k];
            if self.conns.slots[index as usize].sock.is_some() {
                self.deliver(index);
            }
        }
    }

    /// Move `index`'s events to the user's queue; an established listener child joins the
    /// accept queue. Most calls find none (after a segment that only acknowledged, and
    /// again in `settle` after the connection sent), or only kinds already waiting in the
    /// user's queue that the host does not act on (`needs_delivery`): they return after
    /// one check, inlined.
    #[inline]
    pub(super) fn deliver(&mut self, index: u32) {
        let sock = self.conns.slots[index as usize].sock.as_mut().expect("live");
        let taken = sock.conn.take_events();
        if needs_delivery(taken, sock.user_events) {
            self.deliver_from(index, taken);
        }
    }

    /// [`deliver`](Self::deliver) of the events `taken` from the connection.
    #[inline(never)]
    fn deliver_from(&mut self, index: u32, taken: Events) {
        let slot = &mut self.conns.slots[index as usize];
        let id = SocketId { index, generation: slot.generation };
        let sock = slot.sock.as_deref_mut().expect("live");
        let owner = sock.owner;
        // Once per kind while it waits: a busy connection whose application does not poll
        // its events queues each kind once, not once per segment; an exchange's `Readable`
        // and `Writable`, when both wait already, cost this one test.
        let new = taken.without(sock.user_events);
        if owner == Owner::User && !new.is_empty() {
            sock.user_events = sock.user_events.union(new);
            self.events.extend(new.iter().map(|event| (id, event)));
        }
        // A connection holds each kind at most once, so these count each event taken.
        if taken.contains(Event::TimedOut) {
            self.counters.connections_timed_out += 1;
        }
        if taken.contains(Event::Reset) {
            self.counters.connections_reset += 1;
        }
        if let (Owner::Listener(port, epoch), true) = (owner, taken.contains(Event::Established))
            && let Some(l) = self.conns.listeners.get_mut(&port).filter(|l| l.epoch == epoch)
        {
            l.half_open = l.half_open.saturating_sub(1);
            self.conns.enqueue_child(port, id);
        }
        if self.events.len() > self.events_compact_at {
            self.compact_events();
        }
    }

    /// Drop the waiting events of connections the user no longer holds (`poll_event` would
    /// pass over them), so that the queue of an application that never takes its events
    /// stays within one event of each kind per connection it holds; the next compaction
    /// waits until the queue has doubled (amortised O(1) an event).
    #[cold]
    fn compact_events(&mut self) {
        let conns = &self.conns;
        self.events.retain(|&(id, _)| conns.sock(id).is_some_and(|s| s.owner == Owner::User));
        self.events_compact_at = (2 * self.events.len()).max(EVENTS_COMPACT_MIN);
    }

    /// [`settle`](Self::settle) but for the removal: count, pass the events on, note the
    /// next timer; return the connection's owner and state. Inlined into `settle` and into
    /// the pass of a connection with nothing to send (`settle_quiet`), which is never
    /// closed.
    #[inline(always)]
    pub(super) fn settle_running(&mut self, now: Instant, index: u32, counted: bool) -> (Owner, State) {
        let slot = &mut self.conns.slots[index as usize];
        // Delivering events removes no connection: the generation stays.
        let id = SocketId { index, generation: slot.generation };
        let mut sock = slot.sock.as_deref_mut().expect("live");
        if !counted {
            if self.conns.budgeted {
                sock.count_budgets(&mut self.conns.offered_bytes, &mut self.conns.flight_bytes);
            } else {
                sock.note_budgets();
            }
        }
        // `deliver`, with the connection in hand; looked up again only after events.
        let taken = sock.conn.take_events();
        if needs_delivery(taken, sock.user_events) {
            self.deliver_from(index, taken);
            sock = self.conns.slots[index as usize].sock.as_deref_mut().expect("live");
        }
        let owner = sock.owner;
        let state = sock.conn.state();
        // Its empty buffers go back to the pool once it is idle (`release_idle_storage`).
        sock.active_at = now;
        if !sock.idle_listed && sock.conn.storage_attached() != (false, false) {
            sock.idle_listed = true;
            self.conns.idle.push((id.index, id.generation));
            let sweep = *self.conns.idle_sweep.get_or_insert(now + IDLE_RELEASE);
            self.timer_floor = self.timer_floor.min(sweep);
        }
        if let Some(t) = sock.conn.poll_timeout_before(sock.scheduled) {
            sock.scheduled = Some(t);
            let at = self.conns.timers.insert(now, t, (id.index, id.generation));
            self.timer_floor = self.timer_floor.min(at);
        }
        (owner, state)
    }

    /// After a connection ran: count its window and data in flight, pass its events on,
    /// note its next timer, and remove it when nobody needs it any more. With `counted`,
    /// the window and the data in flight are as `apply_budgets` counted them before the
    /// pass (it asked for no segment: only writing one moves the window's right edge or
    /// SND.MAX, and only one received RCV.NXT or SND.UNA), and are not counted again.
    pub(super) fn settle(&mut self, now: Instant, index: u32, counted: bool) {
        let (owner, state) = self.settle_running(now, index, counted);
        if !matches!(state, State::Closed | State::Listen) {
            return;
        }
        let sock = self.conns.slots[index as usize].sock.as_deref_mut().expect("live");
        match owner {
            Owner::Listener(port, epoch) => {
                let queued = std::mem::take(&mut sock.queued);
                if let Some(l) = self.conns.listeners.get_mut(&port).filter(|l| l.epoch == epoch) {
                    if queued {
                        // Its id stays in `ready` for `accept` to pass over, unless the
                        // queue is mostly such ids: then they go, in one pass (amortised O(1)).
                        l.queued -= 1;
                        if l.ready.len() > 2 * l.queued + 64 {
                            let slots = &self.conns.slots;
                            l.ready.retain(|r| {
                                let slot = &slots[r.index as usize];
                                slot.generation == r.generation && slot.sock.as_ref().is_some_and(|s| s.queued)
                            });
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `needs_delivery` is false exactly when `deliver_from` would do nothing: no kind to
    /// queue (every kind taken already waits) and none it acts on itself, for every set
    /// taken and every set waiting (an owner other than the user queues nothing, so for it
    /// a false answer is only the more certain).
    #[test]
    fn needs_delivery_is_false_exactly_when_deliver_from_does_nothing() {
        for taken in 0..=u8::MAX {
            for waiting in 0..=u8::MAX {
                let (taken, waiting) = (Events::from_bits(taken), Events::from_bits(waiting));
                let queues = !taken.without(waiting).is_empty();
                let acts = [Event::Established, Event::TimedOut, Event::Reset].into_iter().any(|e| taken.contains(e));
                assert_eq!(needs_delivery(taken, waiting), queues || acts, "taken {taken:?}, waiting {waiting:?}");
            }
        }
    }
}
