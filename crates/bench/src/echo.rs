//! The echo service (RFC 862) on a [`Stack`]: every byte a client sends comes back.
//!
//! Driven by the stack's events, so an idle connection costs nothing per loop. Bytes that
//! do not fit in a connection's send buffer wait in a per-connection queue until the
//! connection is writable again; when the client half-closes, the server finishes echoing
//! and then closes its side.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::time::Duration;

use bypass_device::Device;
use bypass_stack::{ListenerId, SocketId, Stack};
use bypass_tcp::{Event, Instant};

/// Bytes read from the stack in one call.
const CHUNK: usize = 64 * 1024;

#[derive(Default)]
struct Conn {
    /// Read but not yet written back.
    pending: Vec<u8>,
    sent: usize,
    last_activity: Instant,
}

/// An echo server on one listener.
pub struct EchoServer {
    listener: ListenerId,
    conns: HashMap<SocketId, Conn>,
    buf: Vec<u8>,
    idle_timeout: Option<Duration>,
    /// Connections accepted so far.
    pub accepted: u64,
    /// Bytes echoed so far.
    pub echoed: u64,
}

impl EchoServer {
    /// Serve on `port`; close connections idle for `idle_timeout` (server-initiated close).
    pub fn new<D: Device>(
        stack: &mut Stack<D>,
        port: u16,
        idle_timeout: Option<Duration>,
    ) -> Result<Self, bypass_stack::ListenError> {
        Ok(EchoServer {
            listener: stack.listen(port)?,
            conns: HashMap::new(),
            buf: vec![0; CHUNK],
            idle_timeout,
            accepted: 0,
            echoed: 0,
        })
    }

    /// Accept new connections and serve the ones with something to do.
    pub fn service<D: Device>(&mut self, stack: &mut Stack<D>) {
        let now = stack.now();
        while let Some(id) = stack.accept(self.listener) {
            stack.set_nodelay(id, true);
            self.conns.insert(id, Conn { last_activity: now, ..Conn::default() });
            self.accepted += 1;
            // Data may have arrived with the handshake's last ACK.
            self.serve(stack, id, now);
        }
        while let Some((id, event)) = stack.poll_event() {
            match event {
                Event::Reset | Event::TimedOut | Event::Unreachable | Event::Closed => {
                    if self.conns.remove(&id).is_some() {
                        stack.close(id);
                    }
                }
                _ => self.serve(stack, id, now),
            }
        }
        if let Some(limit) = self.idle_timeout {
            let idle: Vec<SocketId> = self
                .conns
                .iter()
                .filter(|(_, c)| now.saturating_duration_since(c.last_activity) >= limit)
                .map(|(&id, _)| id)
                .collect();
            for id in idle {
                log::debug!("closing idle connection {id:?}");
                self.conns.remove(&id);
                stack.close(id);
            }
        }
    }

    /// Move bytes from `id`'s receive side to its send side until one of them blocks.
    fn serve<D: Device>(&mut self, stack: &mut Stack<D>, id: SocketId, now: Instant) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        loop {
            while conn.sent < conn.pending.len() {
                match stack.write(id, &conn.pending[conn.sent..]) {
                    Ok(n) => {
                        conn.sent += n;
                        self.echoed += n as u64;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => return self.drop_conn(stack, id),
                }
            }
            conn.pending.clear();
            conn.sent = 0;
            match stack.read(id, &mut self.buf) {
                Ok(0) => {
                    // The client half-closed and everything is echoed: close our side too.
                    self.conns.remove(&id);
                    stack.close(id);
                    return;
                }
                Ok(n) => {
                    conn.last_activity = now;
                    match stack.write(id, &self.buf[..n]) {
                        Ok(k) => {
                            self.echoed += k as u64;
                            conn.pending.extend_from_slice(&self.buf[k..n]);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => conn.pending.extend_from_slice(&self.buf[..n]),
                        Err(_) => return self.drop_conn(stack, id),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => return self.drop_conn(stack, id),
            }
        }
    }

    fn drop_conn<D: Device>(&mut self, stack: &mut Stack<D>, id: SocketId) {
        self.conns.remove(&id);
        stack.close(id);
    }

    /// Close every connection gracefully (FIN) and stop listening.
    pub fn shutdown<D: Device>(&mut self, stack: &mut Stack<D>) {
        stack.unlisten(self.listener);
        for (id, _) in self.conns.drain() {
            stack.close(id);
        }
    }
}
