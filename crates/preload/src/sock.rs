//! A TCP socket of the program: its life from `socket` (undecided: the stack's or the
//! kernel's) through `bind`/`listen` or `connect` to a listener or a connection on our
//! stack, and every call on it, with Linux's errors. No C types here: addresses are
//! `SocketAddr`, failures an errno.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use bypass_runtime::PendingConnect;
use bypass_runtime::TcpStream;

use crate::env::{self, unmap_addr};
use crate::errno::{Errno, Res, errno_of};
use crate::listen::{self, Claim};
use crate::wait;

/// poll(2)'s bits, which epoll(7) shares.
pub const IN: u32 = libc::POLLIN as u32;
pub const OUT: u32 = libc::POLLOUT as u32;
pub const ERR: u32 = libc::POLLERR as u32;
pub const HUP: u32 = libc::POLLHUP as u32;
pub const RDHUP: u32 = libc::POLLRDHUP as u32;

/// The options a socket keeps for itself (the rest live on its kernel placeholder).
#[derive(Clone, Copy, Default)]
pub struct Opts {
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    pub nodelay: bool,
    /// `SO_KEEPALIVE`, and `TCP_KEEPIDLE`/`KEEPINTVL`/`KEEPCNT` where set (else Linux's
    /// defaults: 7200 s, 75 s, 9).
    pub keepalive: bool,
    pub keepidle: Option<Duration>,
    pub keepintvl: Option<Duration>,
    pub keepcnt: Option<u32>,
    /// `TCP_USER_TIMEOUT` (`Some(0)` is "the default").
    pub user_timeout: Option<Duration>,
    /// `SO_LINGER` on with zero seconds: the last close resets the connection (RST).
    pub linger_reset: bool,
}

impl Opts {
    /// Give a connection what these options ask of it.
    fn apply(&self, stream: &TcpStream) {
        let _ = stream.set_nodelay(self.nodelay);
        let keepalive = self.keepalive.then(|| {
            let d = bypass_tcp::Keepalive::default();
            bypass_tcp::Keepalive {
                idle: self.keepidle.unwrap_or(d.idle),
                interval: self.keepintvl.unwrap_or(d.interval),
                probes: self.keepcnt.unwrap_or(d.probes),
            }
        });
        let _ = stream.set_keepalive(keepalive);
        if let Some(t) = self.user_timeout {
            let _ = stream.set_user_timeout((!t.is_zero()).then_some(t));
        }
    }
}

/// What happens to a socket at `bind` or `connect`.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Served by our stack.
    Ours,
    /// Not an address of ours: the kernel serves it from now on.
    Kernel,
}

enum State {
    /// Made by `socket`, perhaps bound: not yet the stack's or the kernel's.
    Fresh {
        bound: Option<SocketAddr>,
    },
    Listening {
        claim: Arc<Claim>,
        addr: SocketAddr,
    },
    Connecting {
        pending: PendingConnect,
    },
    Connected(Arc<Conn>),
    /// A connect failed: the error `SO_ERROR` (or the next call) reports, once.
    Failed(Errno),
    /// A connect failed and its error was reported.
    Dead,
}

/// An established connection: a handle to read with and one to write with, so a thread
/// blocked reading does not hold up one writing.
pub struct Conn {
    reader: Mutex<TcpStream>,
    writer: Mutex<TcpStream>,
    /// For readiness, peeking and figures (calls that take `&self`).
    probe: TcpStream,
    local: SocketAddr,
    remote: SocketAddr,
    read_shut: AtomicBool,
}

impl Conn {
    fn new(stream: TcpStream) -> Res<Conn> {
        let mut reader = stream;
        let mut writer = reader.try_clone().map_err(|e| errno_of(&e))?;
        let probe = reader.try_clone().map_err(|e| errno_of(&e))?;
        // Waiting is ours (see `wait`): the handles never block.
        reader.set_nonblocking(true).map_err(|e| errno_of(&e))?;
        writer.set_nonblocking(true).map_err(|e| errno_of(&e))?;
        let local = reader.local_addr().map_err(|e| errno_of(&e))?;
        let remote = reader.peer_addr().map_err(|e| errno_of(&e))?;
        Ok(Conn {
            reader: Mutex::new(reader),
            writer: Mutex::new(writer),
            probe,
            local,
            remote,
            read_shut: AtomicBool::new(false),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One socket of the program, shared by the descriptors that refer to it.
pub struct Socket {
    /// Made with `AF_INET6`: addresses are reported as IPv6 (IPv4 ones mapped).
    pub v6: bool,
    nonblocking: AtomicBool,
    state: Mutex<State>,
    opts: Mutex<Opts>,
    /// Bumped each time a read (or accept) found nothing, and each time a write found no
    /// room: the next readiness of that side is an edge for edge-triggered epoll, however
    /// quickly it came back.
    pub read_gen: AtomicU32,
    pub write_gen: AtomicU32,
    /// Descriptors that refer to it (duplicates included), kept by `table`: at zero, the
    /// program has closed it.
    pub fds: AtomicUsize,
}

/// How `recv` and `send` were asked to behave.
#[derive(Clone, Copy, Default)]
pub struct Flags {
    pub peek: bool,
    pub dontwait: bool,
    pub waitall: bool,
    pub nosignal: bool,
}

impl Flags {
    pub fn from_bits(flags: i32) -> Flags {
        Flags {
            peek: flags & libc::MSG_PEEK != 0,
            dontwait: flags & libc::MSG_DONTWAIT != 0,
            waitall: flags & libc::MSG_WAITALL != 0,
            nosignal: flags & libc::MSG_NOSIGNAL != 0,
        }
    }
}

impl Socket {
    /// Return a socket made by `socket(2)`.
    pub fn fresh(v6: bool, nonblocking: bool) -> Socket {
        Socket {
            v6,
            nonblocking: AtomicBool::new(nonblocking),
            state: Mutex::new(State::Fresh { bound: None }),
            opts: Mutex::new(Opts::default()),
            read_gen: AtomicU32::new(0),
            write_gen: AtomicU32::new(0),
            fds: AtomicUsize::new(0),
        }
    }

    /// Return a socket for a connection `accept` returned, with the options it inherits
    /// from the listener (`opts`, as Linux copies them).
    pub fn accepted(stream: TcpStream, v6: bool, nonblocking: bool, opts: Opts) -> Res<Socket> {
        let conn = Conn::new(stream)?;
        opts.apply(&conn.probe);
        Ok(Socket {
            v6,
            nonblocking: AtomicBool::new(nonblocking),
            state: Mutex::new(State::Connected(Arc::new(conn))),
            opts: Mutex::new(Opts { rcvtimeo: None, sndtimeo: None, ..opts }),
            read_gen: AtomicU32::new(0),
            write_gen: AtomicU32::new(0),
            fds: AtomicUsize::new(0),
        })
    }

    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::SeqCst);
    }

    pub fn opts(&self) -> Opts {
        *lock(&self.opts)
    }

    /// Change the options, and give the connection (if there is one) what they ask.
    pub fn set_opts(&self, f: impl FnOnce(&mut Opts)) {
        let opts = {
            let mut o = lock(&self.opts);
            f(&mut o);
            *o
        };
        if let State::Connected(c) = &*lock(&self.state) {
            opts.apply(&c.probe);
        }
    }

    /// Return whether it listens (`SO_ACCEPTCONN`).
    pub fn listening(&self) -> bool {
        matches!(&*lock(&self.state), State::Listening { .. })
    }

    /// Show `addr` as this socket's family does (IPv4 mapped into IPv6 on an IPv6 socket).
    pub fn show(&self, addr: SocketAddr) -> SocketAddr {
        match (self.v6, addr) {
            (true, SocketAddr::V4(a)) => SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port()),
            _ => addr,
        }
    }

    fn unspecified(&self) -> SocketAddr {
        let ip = if self.v6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
        SocketAddr::new(ip, 0)
    }

    /// `bind(2)`: an address of ours or a wildcard makes the socket ours; any other (a
    /// loopback or kernel address) leaves it to the kernel.
    pub fn bind(&self, addr: SocketAddr) -> Res<Decision> {
        let mut state = lock(&self.state);
        let State::Fresh { bound: bound @ None } = &mut *state else { return Err(libc::EINVAL) };
        let env = match env::get() {
            Ok(env) => env,
            Err(_) => return Ok(Decision::Kernel),
        };
        let ip = env::unmap(addr.ip());
        if !ip.is_unspecified() && !env.owns(ip) {
            return Ok(Decision::Kernel);
        }
        *bound = Some(addr);
        Ok(Decision::Ours)
    }

    /// `listen(2)`, on the bound port (or one the stack picks), for IPv4 connections on an
    /// IPv4 socket, IPv6 ones on an IPv6 socket, and both unless `v6only`.
    pub fn listen(&self, v6only: bool, reuseport: bool) -> Res<()> {
        let mut state = lock(&self.state);
        let bound = match &*state {
            State::Fresh { bound } => *bound,
            State::Listening { .. } => return Ok(()),
            _ => return Err(libc::EINVAL),
        };
        let env = env::get().map_err(|_| libc::EADDRNOTAVAIL)?;
        let addr = bound.unwrap_or_else(|| self.unspecified());
        let mask = match (self.v6, v6only) {
            (false, _) => listen::V4,
            (true, true) => listen::V6,
            (true, false) => listen::V4 | listen::V6,
        };
        let claim = listen::claim(env, addr.port(), mask, reuseport)?;
        let addr = SocketAddr::new(addr.ip(), claim.number);
        *state = State::Listening { claim: Arc::new(claim), addr };
        Ok(())
    }

    /// `accept(2)`: the next connection, waiting unless non-blocking.
    pub fn accept(&self) -> Res<TcpStream> {
        let claim = match &*lock(&self.state) {
            State::Listening { claim, .. } => Arc::clone(claim),
            _ => return Err(libc::EINVAL),
        };
        let deadline = self.deadline(self.opts().rcvtimeo);
        self.block(deadline, true, &self.read_gen, || claim.accept(), |w| claim.ready(w))
    }

    /// `connect(2)`: `Kernel` when the stack does not reach `addr` (the caller connects the
    /// kernel's socket instead); `EINPROGRESS` when non-blocking.
    pub fn connect(&self, addr: SocketAddr) -> Res<Decision> {
        {
            let mut state = lock(&self.state);
            match &*state {
                State::Fresh { bound } => {
                    let bound = *bound;
                    let Ok(env) = env::get() else { return Ok(Decision::Kernel) };
                    if !env.routes(addr.ip()) {
                        if bound.is_some_and(|b| !b.ip().is_unspecified()) {
                            // Bound to our address, asked for one we do not reach.
                            return Err(libc::ENETUNREACH);
                        }
                        return Ok(Decision::Kernel);
                    }
                    let remote = unmap_addr(addr);
                    let local_port = bound.map(|b| b.port()).filter(|&p| p != 0);
                    let pending = env.runtime.connect_start(remote, local_port).map_err(|e| errno_of(&e))?;
                    *state = State::Connecting { pending };
                    if self.nonblocking.load(Ordering::SeqCst) {
                        return Err(libc::EINPROGRESS);
                    }
                }
                State::Connecting { .. } if self.nonblocking.load(Ordering::SeqCst) => return Err(libc::EALREADY),
                State::Connecting { .. } => {}
                State::Connected(_) => return Err(libc::EISCONN),
                State::Listening { .. } => return Err(libc::EINVAL),
                State::Failed(e) => {
                    let e = *e;
                    *state = State::Dead;
                    return Err(e);
                }
                State::Dead => return Err(libc::ECONNABORTED),
            }
        }
        // Blocking: wait for the handshake (SO_SNDTIMEO bounds it, with EINPROGRESS).
        let deadline = self.deadline(self.opts().sndtimeo);
        let outcome = self.block(
            deadline,
            false,
            &self.write_gen,
            || match self.progress(None) {
                Some(r) => r,
                None => Err(libc::EAGAIN),
            },
            |w| self.progress(w).is_some(),
        );
        match outcome {
            Ok(()) => Ok(Decision::Ours),
            Err(libc::EAGAIN) => Err(libc::EINPROGRESS),
            Err(e) => Err(e),
        }
    }

    /// Move a connecting socket on: `None` while the handshake runs (registering `waker`),
    /// else its outcome, which then is the state (a failure is reported by this call and
    /// not again).
    fn progress(&self, waker: Option<&Waker>) -> Option<Res<()>> {
        let mut state = lock(&self.state);
        match &mut *state {
            State::Connecting { pending, .. } => match pending.poll(waker)? {
                Ok(stream) => match Conn::new(stream) {
                    Ok(conn) => {
                        self.opts().apply(&conn.probe);
                        *state = State::Connected(Arc::new(conn));
                        Some(Ok(()))
                    }
                    Err(e) => {
                        *state = State::Dead;
                        Some(Err(e))
                    }
                },
                Err(e) => {
                    *state = State::Dead;
                    Some(Err(errno_of(&e)))
                }
            },
            State::Failed(e) => {
                let e = *e;
                *state = State::Dead;
                Some(Err(e))
            }
            _ => Some(Ok(())),
        }
    }

    /// Return the connection, moving a finished connect on first.
    fn conn(&self) -> Res<Arc<Conn>> {
        {
            let state = lock(&self.state);
            if let State::Connected(c) = &*state {
                return Ok(Arc::clone(c));
            }
        }
        match self.progress(None) {
            None => Err(libc::EAGAIN),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => match &*lock(&self.state) {
                State::Connected(c) => Ok(Arc::clone(c)),
                State::Dead => Err(libc::ENOTCONN),
                _ => Err(libc::ENOTCONN),
            },
        }
    }

    /// `SO_ERROR`: a failed connect's error, once; else 0.
    pub fn take_error(&self) -> Errno {
        let mut state = lock(&self.state);
        if let State::Connecting { pending, .. } = &mut *state {
            match pending.poll(None) {
                None => return 0,
                Some(Ok(stream)) => {
                    *state = match Conn::new(stream) {
                        Ok(c) => State::Connected(Arc::new(c)),
                        Err(e) => State::Failed(e),
                    };
                }
                Some(Err(e)) => *state = State::Failed(errno_of(&e)),
            }
        }
        match &*state {
            State::Failed(e) => {
                let e = *e;
                *state = State::Dead;
                e
            }
            _ => 0,
        }
    }

    /// Return what poll(2) would report now; with `waker`, register it for the next change.
    pub fn readiness(&self, waker: Option<&Waker>) -> u32 {
        self.poll_state(waker).0
    }

    /// Return [`readiness`](Socket::readiness) and the payload bytes received so far (for
    /// edge-triggered epoll: new data is a new edge).
    pub fn poll_state(&self, waker: Option<&Waker>) -> (u32, u64) {
        let conn = {
            let state = lock(&self.state);
            match &*state {
                State::Fresh { .. } => return (OUT | HUP, 0),
                State::Listening { claim, .. } => {
                    return (if claim.ready(waker) { IN } else { 0 }, 0);
                }
                State::Connected(c) => Some(Arc::clone(c)),
                State::Connecting { .. } => None,
                State::Failed(_) => return (IN | OUT | ERR | HUP, 0),
                State::Dead => return (IN | OUT | HUP, 0),
            }
        };
        let conn = match conn {
            Some(c) => c,
            None => match self.progress(waker) {
                None => return (0, 0),
                Some(Err(e)) => {
                    // Keep the error for SO_ERROR, as the kernel keeps sk_err.
                    *lock(&self.state) = State::Failed(e);
                    return (IN | OUT | ERR | HUP, 0);
                }
                Some(Ok(())) => match self.conn() {
                    Ok(c) => c,
                    Err(_) => return (IN | OUT | HUP, 0),
                },
            },
        };
        let Ok(r) = conn.probe.readiness(waker) else { return (IN | OUT | HUP, 0) };
        if r.peer_closed || r.hung_up || r.error {
            log::trace!("readiness of {} -> {}: {r:?}, {:?}", conn.local, conn.remote, conn.probe.stats().map(|s| s.0));
        }
        let mut mask = 0;
        if r.readable || conn.read_shut.load(Ordering::SeqCst) {
            mask |= IN;
        }
        if r.writable {
            mask |= OUT;
        }
        if r.peer_closed {
            mask |= RDHUP | IN;
        }
        if r.hung_up {
            mask |= HUP;
        }
        if r.error {
            mask |= ERR;
        }
        (mask, r.received)
    }

    /// Return the bytes waiting to be read (`FIONREAD`).
    pub fn recv_queued(&self) -> Res<usize> {
        match &*lock(&self.state) {
            State::Connected(c) => c.probe.recv_queued().map_err(|e| errno_of(&e)),
            State::Listening { .. } => Err(libc::EINVAL),
            _ => Ok(0),
        }
    }

    /// `recv(2)` and friends into `buf`.
    pub fn recv(&self, buf: &mut [u8], flags: Flags) -> Res<usize> {
        let conn = self.conn().map_err(|e| if e == libc::EAGAIN { libc::EAGAIN } else { libc::ENOTCONN })?;
        if buf.is_empty() {
            return Ok(0);
        }
        let nonblocking = flags.dontwait || self.nonblocking.load(Ordering::SeqCst);
        let deadline = if nonblocking { Some(Instant::now()) } else { self.deadline(self.opts().rcvtimeo) };
        if flags.peek {
            return self.block(
                deadline,
                true,
                &self.read_gen,
                || conn.probe.peek(buf).map_err(|e| errno_of(&e)),
                |w| conn.probe.readiness(w).map_or(true, |r| r.readable),
            );
        }
        let mut got = 0;
        loop {
            let step = self.block(
                if got > 0 && !flags.waitall { Some(Instant::now()) } else { deadline },
                true,
                &self.read_gen,
                || lock(&conn.reader).read(&mut buf[got..]).map_err(|e| errno_of(&e)),
                |w| conn.probe.readiness(w).map_or(true, |r| r.readable),
            );
            match step {
                Ok(0) => return Ok(got),
                Ok(n) => {
                    got += n;
                    if got == buf.len() || !flags.waitall || nonblocking {
                        return Ok(got);
                    }
                }
                Err(e) if got > 0 && (e == libc::EAGAIN || e == libc::EINTR) => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    /// `send(2)` and friends: blocking, everything is queued (or the timeout, a signal or an
    /// error stops it, returning what went); non-blocking, what fits.
    pub fn send(&self, bufs: &[&[u8]], flags: Flags) -> Res<usize> {
        let conn = self.conn().map_err(|e| if e == libc::EAGAIN { libc::EAGAIN } else { libc::EPIPE })?;
        let len = bufs.iter().map(|b| b.len()).sum();
        if let [data] = bufs {
            return self.send_on(&conn, len, flags, |w, at| w.write(&data[at..]));
        }
        // Gathered (writev, sendmsg): copied straight into the send buffer, so the pieces
        // leave together, as the kernel sends them.
        self.send_on(&conn, len, flags, |w, at| {
            w.send_with(|space| {
                let (mut skip, mut n) = (at, 0);
                for b in bufs {
                    if skip >= b.len() {
                        skip -= b.len();
                        continue;
                    }
                    let part = &b[skip..];
                    skip = 0;
                    let k = part.len().min(space.len() - n);
                    space[n..n + k].copy_from_slice(&part[..k]);
                    n += k;
                    if n == space.len() {
                        break;
                    }
                }
                (n, n)
            })
        })
    }

    /// `sendfile(2)` from `file` (at `offset`, or its position) to this socket: the file is
    /// read straight into the send buffer, no buffer of ours between.
    pub fn sendfile(&self, len: usize, mut pread: impl FnMut(&mut [u8], usize) -> io::Result<usize>) -> Res<usize> {
        let conn = self.conn().map_err(|e| if e == libc::EAGAIN { libc::EAGAIN } else { libc::EPIPE })?;
        self.send_on(&conn, len, Flags::default(), |w, at| {
            let mut failed = None;
            let n = w.send_with(|space| {
                let room = space.len().min(len - at);
                match pread(&mut space[..room], at) {
                    Ok(n) => (n, n),
                    Err(e) => {
                        failed = Some(e);
                        (0, 0)
                    }
                }
            })?;
            match failed {
                Some(e) => Err(e),
                None if n == 0 => Err(io::Error::from_raw_os_error(0)),
                None => Ok(n),
            }
        })
    }

    fn send_on(
        &self,
        conn: &Conn,
        len: usize,
        flags: Flags,
        mut write: impl FnMut(&mut TcpStream, usize) -> io::Result<usize>,
    ) -> Res<usize> {
        if len == 0 {
            return Ok(0);
        }
        let nonblocking = flags.dontwait || self.nonblocking.load(Ordering::SeqCst);
        let deadline = if nonblocking { Some(Instant::now()) } else { self.deadline(self.opts().sndtimeo) };
        let mut sent = 0;
        while sent < len {
            let step = self.block(
                deadline,
                true,
                &self.write_gen,
                || match write(&mut lock(&conn.writer), sent) {
                    // The file ended early (sendfile).
                    Err(e) if e.raw_os_error() == Some(0) => Ok(0),
                    r => r.map_err(|e| errno_of(&e)),
                },
                |w| conn.probe.readiness(w).map_or(true, |r| r.writable),
            );
            match step {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if sent > 0 && (e == libc::EAGAIN || e == libc::EINTR) => break,
                Err(e) => {
                    if e == libc::EPIPE && !flags.nosignal {
                        wait::raise_sigpipe();
                    }
                    return Err(e);
                }
            }
        }
        Ok(sent)
    }

    /// `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> Res<()> {
        let conn = self.conn().map_err(|_| libc::ENOTCONN)?;
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            conn.read_shut.store(true, Ordering::SeqCst);
            lock(&conn.reader).shutdown(Shutdown::Read).map_err(|e| errno_of(&e))?;
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            lock(&conn.writer).shutdown(Shutdown::Write).map_err(|e| errno_of(&e))?;
        }
        Ok(())
    }

    /// The last descriptor of the socket closed: with `SO_LINGER` at zero seconds, reset
    /// the connection (else dropping it closes with FIN, or RST for unread data).
    pub fn last_close(&self) {
        if self.opts().linger_reset
            && let State::Connected(c) = &*lock(&self.state)
        {
            let _ = c.probe.abort();
        }
    }

    /// `getsockname(2)`: `None` for a socket the kernel's placeholder answers for.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &*lock(&self.state) {
            State::Fresh { bound } => Some(bound.unwrap_or_else(|| self.unspecified())),
            State::Listening { addr, .. } => Some(*addr),
            State::Connecting { pending, .. } => pending.local_addr().ok().map(|a| self.show(a)),
            State::Connected(c) => Some(self.show(c.local)),
            State::Failed(_) | State::Dead => Some(self.unspecified()),
        }
    }

    /// `getpeername(2)`.
    pub fn peer_addr(&self) -> Res<SocketAddr> {
        match &*lock(&self.state) {
            State::Connected(c) => Ok(self.show(c.remote)),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// The connection's state and figures, for `TCP_INFO`.
    pub fn stats(&self) -> Option<(bypass_tcp::State, bypass_tcp::Stats)> {
        match &*lock(&self.state) {
            State::Connected(c) => c.probe.stats().ok(),
            _ => None,
        }
    }

    fn deadline(&self, timeout: Option<Duration>) -> Option<Instant> {
        timeout.map(|t| Instant::now() + t)
    }

    /// Try `attempt` until it stops saying `EAGAIN`, waiting (as `ready` registers a waker)
    /// until `deadline` (`EAGAIN` then) unless non-blocking. `restart`: a signal restarts
    /// the wait where its handler asks (`SA_RESTART`) and no timeout is set, else `EINTR`.
    fn block<T>(
        &self,
        deadline: Option<Instant>,
        restart: bool,
        side: &AtomicU32,
        mut attempt: impl FnMut() -> Res<T>,
        mut ready: impl FnMut(Option<&Waker>) -> bool,
    ) -> Res<T> {
        let nonblocking = self.nonblocking.load(Ordering::SeqCst);
        loop {
            match attempt() {
                Err(libc::EAGAIN) => {
                    side.fetch_add(1, Ordering::SeqCst);
                }
                r => return r,
            }
            if nonblocking || deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(libc::EAGAIN);
            }
            match wait::until(deadline, &mut ready) {
                Ok(()) => {}
                Err(libc::EINTR) if restart && deadline.is_none() && crate::signals::last_restarts() => {}
                Err(e) => return Err(e),
            }
        }
    }
}
