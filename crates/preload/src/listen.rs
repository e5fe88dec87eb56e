//! Listening ports shared between the program's sockets, as Linux lets an IPv4 socket and
//! an IPv6-only one (`IPV6_V6ONLY`) listen on one port (redis's default `bind * -::*`), and
//! sockets with `SO_REUSEPORT` share one. The stack listens once per port, on every
//! address; each connection goes to a socket of its family.

use std::collections::{BTreeMap, VecDeque};
use std::io::ErrorKind;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;

use bypass_runtime::{TcpListener, TcpStream};

use crate::env::Env;
use crate::errno::{Res, errno_of};

/// The families a socket accepts: bit 0 IPv4, bit 1 IPv6.
pub const V4: u8 = 1;
pub const V6: u8 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One port the stack listens on.
pub struct Port {
    listener: TcpListener,
    /// Connections taken from the stack for the other family's socket, by family.
    pending: Mutex<[VecDeque<TcpStream>; 2]>,
    /// Sockets claiming each family, and whether they all asked for `SO_REUSEPORT`.
    claims: Mutex<([usize; 2], bool)>,
    /// Who waits for a connection (woken when one is set aside for them).
    wakers: Mutex<Vec<Waker>>,
}

static PORTS: Mutex<BTreeMap<u16, Weak<Port>>> = Mutex::new(BTreeMap::new());

/// A socket's hold on a port: it accepts the families `mask`.
pub struct Claim {
    pub port: Arc<Port>,
    pub mask: u8,
    pub number: u16,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = lock(&self.port.claims);
        for (i, bit) in [V4, V6].into_iter().enumerate() {
            if self.mask & bit != 0 {
                claims.0[i] -= 1;
            }
        }
    }
}

fn family(s: &TcpStream) -> usize {
    match s.local_addr() {
        Ok(a) if crate::env::unmap(a.ip()).is_ipv6() => 1,
        _ => 0,
    }
}

/// Listen on `number` (0: a port from the dynamic range) for the families `mask`.
/// `EADDRINUSE` when a socket of an overlapping family holds it, unless both ask to share
/// (`reuseport`).
pub fn claim(env: &Env, number: u16, mask: u8, reuseport: bool) -> Res<Claim> {
    let mut ports = lock(&PORTS);
    ports.retain(|_, p| p.strong_count() > 0);
    if number != 0
        && let Some(port) = ports.get(&number).and_then(Weak::upgrade)
    {
        let mut claims = lock(&port.claims);
        let overlap = [V4, V6].into_iter().enumerate().any(|(i, bit)| mask & bit != 0 && claims.0[i] > 0);
        if overlap && !(reuseport && claims.1) {
            return Err(libc::EADDRINUSE);
        }
        for (i, bit) in [V4, V6].into_iter().enumerate() {
            if mask & bit != 0 {
                claims.0[i] += 1;
            }
        }
        claims.1 &= reuseport;
        drop(claims);
        return Ok(Claim { port, mask, number });
    }
    let (listener, number) =
        if number != 0 { (env.runtime.listen(number).map_err(|e| errno_of(&e))?, number) } else { ephemeral(env)? };
    let mut listener = listener;
    listener.set_nonblocking(true).map_err(|e| errno_of(&e))?;
    let claims = [usize::from(mask & V4 != 0), usize::from(mask & V6 != 0)];
    let port = Arc::new(Port {
        listener,
        pending: Mutex::new([VecDeque::new(), VecDeque::new()]),
        claims: Mutex::new((claims, reuseport)),
        wakers: Mutex::new(Vec::new()),
    });
    ports.insert(number, Arc::downgrade(&port));
    Ok(Claim { port, mask, number })
}

/// Listen on a port from the dynamic range (`listen` without `bind`, or bound to port 0).
fn ephemeral(env: &Env) -> Res<(TcpListener, u16)> {
    let start = std::process::id() as u16;
    for i in 0..16384u16 {
        let port = 49152 + (start.wrapping_add(i.wrapping_mul(7919)) % 16384);
        match env.runtime.listen(port) {
            Ok(l) => return Ok((l, port)),
            Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
            Err(e) => return Err(errno_of(&e)),
        }
    }
    Err(libc::EADDRINUSE)
}

impl Claim {
    /// Return a connection of our families without waiting (`EAGAIN`: none yet).
    pub fn accept(&self) -> Res<TcpStream> {
        let port = &self.port;
        {
            let mut pending = lock(&port.pending);
            for (i, bit) in [V4, V6].into_iter().enumerate() {
                if self.mask & bit != 0
                    && let Some(s) = pending[i].pop_front()
                {
                    return Ok(s);
                }
            }
        }
        loop {
            let s = port.listener.accept().map(|(s, _)| s).map_err(|e| errno_of(&e))?;
            let fam = family(&s);
            if self.mask & [V4, V6][fam] != 0 {
                return Ok(s);
            }
            // The other family's: set it aside for its socket, or refuse it (RST) when
            // none listens for it any more.
            if lock(&port.claims).0[fam] > 0 {
                lock(&port.pending)[fam].push_back(s);
                for w in lock(&port.wakers).drain(..) {
                    w.wake();
                }
            }
        }
    }

    /// Return whether a connection waits for us; with `waker`, register it.
    pub fn ready(&self, waker: Option<&Waker>) -> bool {
        let port = &self.port;
        if let Some(w) = waker {
            let mut wakers = lock(&port.wakers);
            if !wakers.iter().any(|x| x.will_wake(w)) {
                wakers.push(w.clone());
            }
        }
        let pending = lock(&port.pending);
        if [V4, V6].into_iter().enumerate().any(|(i, bit)| self.mask & bit != 0 && !pending[i].is_empty()) {
            return true;
        }
        drop(pending);
        port.listener.readiness(waker).unwrap_or(true)
    }
}
