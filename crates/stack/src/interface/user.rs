//! The application's side of the host: listeners, opens, closes and events.

use std::collections::VecDeque;
use std::net::SocketAddr;

use bypass_tcp::{Connection, Event, Events, FourTuple, Instant, State};

use super::*;

impl Interface {
    /// Listen on `port`.
    pub fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError> {
        if port == 0 {
            return Err(ListenError::InvalidPort);
        }
        if self.conns.listeners.contains_key(&port) {
            return Err(ListenError::AddrInUse(port));
        }
        self.conns.listener_epoch = self.conns.listener_epoch.wrapping_add(1);
        let listener = Listener {
            half_open: 0,
            ready: VecDeque::new(),
            queued: 0,
            epoch: self.conns.listener_epoch,
            overflow: RecentOverflow::default(),
        };
        self.conns.listeners.insert(port, listener);
        Ok(ListenerId(port))
    }

    /// Stop listening; connections not yet accepted are reset: the established ones now,
    /// the half-open ones when they next receive or time out (see
    /// `reset_if_orphaned_child`), so unlisten costs no scan of the table.
    pub fn unlisten(&mut self, now: Instant, listener: ListenerId) {
        let Some(l) = self.conns.listeners.remove(&listener.0) else { return };
        for id in l.ready {
            if let Some(sock) = self.conns.sock_mut(id).filter(|s| s.queued) {
                sock.queued = false;
                self.abort(now, id);
            }
        }
    }

    /// Return the next established connection waiting on `listener`.
    pub fn accept(&mut self, listener: ListenerId) -> Option<SocketId> {
        let l = self.conns.listeners.get_mut(&listener.0)?;
        while let Some(id) = l.ready.pop_front() {
            let slot = &mut self.conns.slots[id.index as usize];
            if slot.generation != id.generation {
                continue;
            }
            if let Some(sock) = slot.sock.as_mut().filter(|s| s.queued) {
                sock.queued = false;
                sock.owner = Owner::User;
                l.queued -= 1;
                self.counters.connections_accepted += 1;
                return Some(id);
            }
        }
        None
    }

    /// Open a connection to `remote` (IPv4 or IPv6) from an ephemeral port.
    pub fn connect(&mut self, now: Instant, remote: impl Into<SocketAddr>) -> Result<SocketId, ConnectError> {
        self.connect_from(now, None, remote)
    }

    /// Open a connection to `remote` from `local_port`, or an ephemeral port if `None`; the
    /// local address is ours of the destination's family ([`crate::addr::Addresses::source_for`]).
    pub fn connect_from(
        &mut self,
        now: Instant,
        local_port: Option<u16>,
        remote: impl Into<SocketAddr>,
    ) -> Result<SocketId, ConnectError> {
        let remote = remote.into();
        if remote.port() == 0 || remote.ip().is_unspecified() || remote.ip().is_multicast() {
            return Err(ConnectError::InvalidAddress(remote));
        }
        let Some(ip) = self.addrs.source_for(remote.ip()) else {
            return Err(ConnectError::NoSourceAddress(remote));
        };
        if self.conns.table.len() >= self.config.max_connections {
            return Err(ConnectError::TableFull(self.config.max_connections));
        }
        let tuple = |port| FourTuple { local: SocketAddr::new(ip, port), remote };
        let port = match local_port {
            Some(port) if port == 0 || self.conns.table.contains_key(&tuple(port)) => {
                return Err(ConnectError::PortInUse(port));
            }
            Some(port) => port,
            None => {
                let (table, listeners) = (&self.conns.table, &self.conns.listeners);
                // RFC 6056 section 3.3.4: a port is suitable if no connection uses the
                // 4-tuple (several destinations may share a local port) and no listener
                // holds it.
                let (index, count) = self.config.ephemeral_port_share;
                let ours = |port: u16| count <= 1 || port % count == index % count;
                let suitable = |port| {
                    port != 0 && ours(port) && !table.contains_key(&tuple(port)) && !listeners.contains_key(&port)
                };
                self.ports.select(ip, remote, suitable).ok_or(ConnectError::NoFreePort(remote))?
            }
        };
        let tuple = tuple(port);
        let buffers = self.take_buffers();
        // Built in the box of a removed connection where one is kept, as a listener's child.
        let sock = match self.conns.take_spare() {
            Some(mut sock) => {
                sock.conn.connect_in(self.tcp_config(ip), tuple, now, buffers);
                sock.renew(tuple, Owner::User, None, now);
                sock
            }
            None => Self::boxed(
                now,
                tuple,
                Connection::connect_with(self.tcp_config(ip), tuple, now, buffers),
                Owner::User,
                None,
            ),
        };
        self.counters.connections_opened += 1;
        Ok(self.insert_sock(now, sock))
    }

    /// Return the connection behind `id`, if it still exists.
    pub fn connection(&self, id: SocketId) -> Option<&Connection> {
        self.conns.sock(id).map(|s| &s.conn)
    }

    /// Return the connection behind `id` for a user call; it is then polled for output.
    pub fn connection_mut(&mut self, id: SocketId) -> Option<&mut Connection> {
        self.connection_for_user(id, None)
    }

    /// Return the connection behind `id` for a call that queues data: its send buffer has
    /// storage (from the pool, or allocated) when this returns.
    #[inline]
    pub fn connection_for_send(&mut self, id: SocketId) -> Option<&mut Connection> {
        self.connection_for_user(id, Some(bypass_tcp::Side::Send))
    }

    /// Close `id` and give up the handle, as close(2) does: FIN after the queued data, and
    /// the connection finishes in the background (an orphan). It is reset instead when data
    /// it received is still unread or arrives later ([`Connection::release`]), and when the
    /// orphans are at their bound in number or memory ([`StackConfig::max_orphans`]).
    pub fn close(&mut self, now: Instant, id: SocketId) {
        let (orphans, orphan_bytes) = (self.conns.orphans, self.conns.orphan_bytes);
        let (max_orphans, max_memory) = (self.config.max_orphans, self.config.max_orphan_memory);
        let Some(sock) = self.conns.sock_mut(id) else { return };
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
                self.conns.orphans += 1;
                self.conns.orphan_bytes += queued;
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
        for index in 0..self.conns.slots.len() as u32 {
            if let Some(sock) = self.conns.slots[index as usize].sock.as_mut() {
                sock.conn.abort(now);
                sock.owner = Owner::Released;
                self.conns.mark_dirty(index);
            }
        }
    }

    pub(super) fn release(&mut self, id: SocketId) {
        if let Some(sock) = self.conns.sock_mut(id) {
            sock.owner = Owner::Released;
            self.conns.mark_dirty(id.index);
        }
    }

    /// Return the next event for the user. A connection's events come in the order they
    /// happened, each kind once while it waits (a second `Readable` before the first was
    /// taken adds nothing: the first already says so). Events of connections the user has
    /// closed since are passed over.
    pub fn poll_event(&mut self) -> Option<(SocketId, Event)> {
        while let Some((id, event)) = self.events.pop_front() {
            if let Some(sock) = self.conns.sock_mut(id).filter(|s| s.owner == Owner::User) {
                sock.user_events = sock.user_events.without(Events::of(event));
                return Some((id, event));
            }
        }
        None
    }

    /// Return the events waiting for the user: at most one of each kind per connection the
    /// user holds, and those of connections it closed before taking them.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }
}
