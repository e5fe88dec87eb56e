//! The connection table: slots with generations, the 4-tuple index, the buffer pool, the
//! memory and window budgets, and each connection's life after it ran.

use bypass_tcp::{Buffers, Connection, Event, FourTuple, Instant, State};

use super::*;

impl Interface {
    /// The most window a connection that offers `own` bytes may offer now: what is left of
    /// the budget, up to an equal share among the connections that can still be sent data
    /// (all but the orphans, whose data would be answered with RST), and never below two
    /// full-sized segments, so that every connection moves.
    pub(super) fn window_cap(&self, own: u32) -> u32 {
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
    pub(super) fn count_window(&mut self, index: u32) -> Option<u32> {
        let sock = self.slots[index as usize].sock.as_mut()?;
        let offered = sock.conn.receive_window();
        self.offered_bytes = self.offered_bytes - sock.offered as usize + offered as usize;
        sock.offered = offered;
        Some(offered)
    }

    /// Give connection `index` its window cap and growth permission, and count its buffers.
    pub(super) fn apply_budgets(&mut self, index: u32) {
        let Some(own) = self.count_window(index) else { return };
        let cap = self.window_cap(own);
        let Some(sock) = self.slots[index as usize].sock.as_mut() else { return };
        let capacity = sock.conn.buffer_capacity();
        self.buffer_bytes = self.buffer_bytes - sock.capacity + capacity;
        sock.capacity = capacity;
        sock.conn.set_window_cap(cap);
        sock.conn.set_growth_allowed(self.buffer_bytes < self.config.buffer_memory);
    }

    pub(super) fn insert(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        mut conn: Connection,
        owner: Owner,
        peer_mac: Option<[u8; 6]>,
    ) -> SocketId {
        if let Some(mtu) = self.known_path_mtu(now, tuple.remote.ip()) {
            conn.set_path_mtu(now, mtu);
        }
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

    pub(super) fn sock(&self, id: SocketId) -> Option<&Sock> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_ref()
    }

    pub(super) fn sock_mut(&mut self, id: SocketId) -> Option<&mut Sock> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.sock.as_mut()
    }

    pub(super) fn id(&self, index: u32) -> SocketId {
        SocketId { index, generation: self.slots[index as usize].generation }
    }

    pub(super) fn mark_dirty(&mut self, index: u32) {
        if let Some(sock) = self.slots[index as usize].sock.as_mut()
            && !sock.dirty
        {
            sock.dirty = true;
            self.dirty.push(index);
        }
    }

    pub(super) fn remove(&mut self, index: u32) {
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
    pub(super) fn take_buffers(&mut self) -> Buffers {
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
    pub(super) fn deliver(&mut self, index: u32) {
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
    pub(super) fn settle(&mut self, _now: Instant, index: u32) {
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
