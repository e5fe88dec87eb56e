//! The Linux kernel as the system under test: what a script's `@config` becomes in a
//! namespace's sysctls, its route and socket options ([`LinuxSetup`]), and the kernel
//! program that serves the script's application lines with ordinary sockets ([`LinuxApp`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use bypass_tcp::{Event, State};

use crate::parse::SockOpt;
use crate::settings::Settings;
use crate::target::{Call, Returned};
use crate::wire_sys as sys;

/// Everything a script's `@config` asks of the kernel (see [`LinuxSetup::from_config`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxSetup {
    /// `(name under /proc/sys/net/ipv4, value)`, written inside the namespace.
    pub sysctls: Vec<(&'static str, String)>,
    /// `ip route` metrics on the subnet's route (`quickack 1`; `initrwnd 10` is always set).
    pub route: Vec<(&'static str, String)>,
    /// `TCP_MAXSEG` on every socket before listen/connect.
    pub mss: Option<u16>,
    /// `TCP_NODELAY` (the script's `nagle=off`).
    pub nodelay: bool,
    /// `TCP_CONGESTION`.
    pub congestion: Option<&'static str>,
    /// `TCP_USER_TIMEOUT` in milliseconds.
    pub user_timeout_ms: Option<u32>,
    /// `TCP_LINGER2` in seconds (the FIN-WAIT-2 timeout of an orphaned connection).
    pub linger2_secs: Option<i32>,
    /// `SO_KEEPALIVE` with `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (seconds) and `TCP_KEEPCNT`.
    pub keepalive: Option<(i32, i32, i32)>,
    /// `listen(2)` backlog.
    pub backlog: i32,
}

impl LinuxSetup {
    /// Map the script's `@config` pairs (applied to `settings` already) to the kernel, or say
    /// which key has no Linux equivalent. The keys, and what they become:
    ///
    /// | key | Linux |
    /// |---|---|
    /// | `mss` | `TCP_MAXSEG` on the socket before listen/connect |
    /// | `window_scaling`, `sack`, `timestamps` | `net.ipv4.tcp_window_scaling`, `tcp_sack`, `tcp_timestamps` |
    /// | `nagle=off` | `TCP_NODELAY` |
    /// | `congestion` | `TCP_CONGESTION` (`reno`, `cubic`) |
    /// | `delayed_ack=off` | route metric `quickack 1`; `40ms` (ours by default) is Linux's `TCP_DELACK_MIN` |
    /// | `min_rto`, `max_rto` | `net.ipv4.tcp_rto_min_us`, `tcp_rto_max_ms` |
    /// | `syn_retries` | `net.ipv4.tcp_syn_retries` and `tcp_synack_retries` |
    /// | `max_retransmissions` | `net.ipv4.tcp_retries2` (Linux turns it into a time limit from exponential backoff) |
    /// | `user_timeout` | `TCP_USER_TIMEOUT` |
    /// | `fin_wait2_timeout` | `TCP_LINGER2` and `net.ipv4.tcp_fin_timeout` |
    /// | `rfc1337` | `net.ipv4.tcp_rfc1337` |
    /// | `challenge_ack_limit` | `net.ipv4.tcp_challenge_ack_limit` |
    /// | `invalid_ack_interval` | `net.ipv4.tcp_invalid_ratelimit` (milliseconds) |
    /// | `ecn` | `net.ipv4.tcp_ecn` (`off` 0, `request` 1, `accept` 2) |
    /// | `keepalive`, `keepalive_idle`, `keepalive_interval`, `keepalive_probes` | `SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (whole seconds), `TCP_KEEPCNT` |
    /// | `syn_queue=0` | `net.ipv4.tcp_syncookies=2` (a cookie for every SYN) |
    /// | `syn_queue=N` | `listen(2)` backlog N-1 (the kernel's SYN queue is full above the backlog) |
    /// | `accept_backlog=N` | `listen(2)` backlog N |
    /// | `local_ip`, `remote_ip`, ports, `tolerance_usecs` | the lab's addresses; the runner |
    ///
    /// No equivalent (a script setting one is skipped for Linux, with the reason): the
    /// buffer sizes (`recv_buffer`, `send_buffer` and their maxima: Linux doubles `SO_RCVBUF`
    /// for its overhead and derives the window through `tcp_adv_win_scale`, so no byte value
    /// gives our window), `sws_override` (Linux has no sender SWS override timer),
    /// `delayed_ack` other than 40 ms or off (Linux's delayed ACK adapts between 40 and 200 ms),
    /// `initial_rto` other than 1 s (`TCP_TIMEOUT_INIT`, settable by BPF only), `msl` other
    /// than 30 s (`TCP_TIMEWAIT_LEN` is a constant 60 s), `fin_wait2_timeout=off`, and
    /// `window_budget` and `flight_budget` (host-wide budgets of ours).
    pub fn from_config(pairs: &[(String, String)], settings: &Settings) -> Result<LinuxSetup, String> {
        let tcp = &settings.stack.tcp;
        let mut s = LinuxSetup { backlog: 128, ..LinuxSetup::default() };
        let on = |b: bool| if b { "1".to_string() } else { "0".to_string() };
        let cannot = |key: &str, why: &str| Err(format!("@config {key} has no Linux equivalent: {why}"));
        for (key, _) in pairs {
            match key.as_str() {
                "mss" => s.mss = Some(tcp.mss),
                "window_scaling" => s.sysctls.push(("tcp_window_scaling", on(tcp.window_scaling))),
                "sack" => s.sysctls.push(("tcp_sack", on(tcp.sack))),
                "timestamps" => s.sysctls.push(("tcp_timestamps", on(tcp.timestamps))),
                "nagle" => s.nodelay = !tcp.nagle,
                "congestion" => {
                    s.congestion = Some(match tcp.congestion {
                        bypass_tcp::Algorithm::Cubic => "cubic",
                        _ => "reno",
                    })
                }
                "delayed_ack" => match tcp.delayed_ack {
                    None => s.route.push(("quickack", "1".into())),
                    Some(d) if d == Duration::from_millis(40) => {}
                    Some(_) => {
                        return cannot(
                            key,
                            "Linux's delayed-ACK timeout adapts between 40 and 200 ms (TCP_DELACK_MIN/MAX)",
                        );
                    }
                },
                "min_rto" => s.sysctls.push(("tcp_rto_min_us", tcp.min_rto.as_micros().to_string())),
                "max_rto" => s.sysctls.push(("tcp_rto_max_ms", tcp.max_rto.as_millis().to_string())),
                "initial_rto" if tcp.initial_rto != Duration::from_secs(1) => {
                    return cannot(key, "Linux's initial RTO is TCP_TIMEOUT_INIT (1 s), settable only by BPF");
                }
                "initial_rto" => {}
                "msl" if tcp.msl != Duration::from_secs(30) => {
                    return cannot(key, "Linux's TIME-WAIT is TCP_TIMEWAIT_LEN, a constant 60 s");
                }
                "msl" => {}
                "syn_retries" => {
                    s.sysctls.push(("tcp_syn_retries", tcp.syn_retries.to_string()));
                    s.sysctls.push(("tcp_synack_retries", tcp.syn_retries.to_string()));
                }
                "max_retransmissions" => s.sysctls.push(("tcp_retries2", tcp.max_retransmissions.to_string())),
                "user_timeout" => s.user_timeout_ms = Some(tcp.user_timeout.map_or(0, |d| d.as_millis() as u32)),
                "fin_wait2_timeout" => match tcp.fin_wait2_timeout {
                    Some(d) => {
                        let secs = d.as_secs().max(1) as i32;
                        s.linger2_secs = Some(secs);
                        s.sysctls.push(("tcp_fin_timeout", secs.to_string()));
                    }
                    None => return cannot(key, "Linux always times FIN-WAIT-2 out (tcp_fin_timeout)"),
                },
                "rfc1337" => s.sysctls.push(("tcp_rfc1337", on(tcp.rfc1337))),
                "challenge_ack_limit" => {
                    s.sysctls.push(("tcp_challenge_ack_limit", tcp.challenge_ack_limit.to_string()))
                }
                "invalid_ack_interval" => {
                    s.sysctls.push(("tcp_invalid_ratelimit", tcp.invalid_ack_interval.as_millis().to_string()))
                }
                "ecn" => s.sysctls.push((
                    "tcp_ecn",
                    match tcp.ecn {
                        bypass_tcp::Ecn::Off => "0",
                        bypass_tcp::Ecn::Request => "1",
                        bypass_tcp::Ecn::Accept => "2",
                    }
                    .into(),
                )),
                "keepalive" | "keepalive_idle" | "keepalive_interval" | "keepalive_probes" => match tcp.keepalive {
                    None => s.keepalive = None,
                    Some(ka) => {
                        let whole = |d: Duration| (d.subsec_nanos() == 0 && d.as_secs() >= 1).then_some(d.as_secs());
                        let (Some(idle), Some(interval)) = (whole(ka.idle), whole(ka.interval)) else {
                            return cannot(key, "Linux's TCP_KEEPIDLE and TCP_KEEPINTVL are whole seconds");
                        };
                        let secs = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
                        s.keepalive = Some((secs(idle), secs(interval), i32::try_from(ka.probes).unwrap_or(i32::MAX)));
                    }
                },
                "syn_queue" if settings.stack.syn_queue == 0 => s.sysctls.push(("tcp_syncookies", "2".into())),
                // Linux's SYN queue is full when it holds more than the backlog
                // (inet_csk_reqsk_queue_is_full: qlen > sk_max_ack_backlog).
                "syn_queue" => s.backlog = settings.stack.syn_queue as i32 - 1,
                "accept_backlog" => s.backlog = settings.stack.accept_backlog as i32,
                "recv_buffer" | "send_buffer" | "recv_buffer_max" | "send_buffer_max" => {
                    return cannot(
                        key,
                        "Linux doubles SO_RCVBUF/SO_SNDBUF for its overhead and derives the window \
                         through tcp_adv_win_scale, so no value gives our window",
                    );
                }
                "sws_override" => return cannot(key, "Linux has no sender SWS override timer"),
                "window_budget" => return cannot(key, "a host-wide window budget of our stack"),
                "flight_budget" => return cannot(key, "a host-wide flight budget of our stack"),
                "local_ip" | "remote_ip" | "remote_port" | "local_port" | "tolerance_usecs" => {}
                other => return cannot(other, "not mapped"),
            }
        }
        Ok(s)
    }
}

/// Map an errno to the name scripts write.
fn errno_name(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => "EAGAIN",
        Some(libc::EPIPE) => "EPIPE",
        Some(libc::ECONNRESET) => "ECONNRESET",
        Some(libc::ECONNREFUSED) => "ECONNREFUSED",
        Some(libc::ETIMEDOUT) => "ETIMEDOUT",
        Some(libc::ENOTCONN) => "ENOTCONN",
        Some(libc::EADDRINUSE) => "EADDRINUSE",
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EBADF) => "EBADF",
        Some(libc::ENOBUFS) => "ENOBUFS",
        Some(libc::EISCONN) => "EISCONN",
        Some(libc::EALREADY) => "EALREADY",
        _ => "EIO",
    }
}

/// Map the kernel's `TCP_*` state numbers (`include/net/tcp_states.h`).
fn kernel_state(n: u8) -> State {
    match n {
        1 => State::Established,
        2 => State::SynSent,
        3 => State::SynReceived,
        4 => State::FinWait1,
        5 => State::FinWait2,
        6 => State::TimeWait,
        8 => State::CloseWait,
        9 => State::LastAck,
        10 => State::Listen,
        11 => State::Closing,
        _ => State::Closed,
    }
}

/// The connection the script's calls act on.
#[derive(Debug)]
struct Conn {
    stream: Option<TcpStream>,
    local: SocketAddrV4,
    peer: SocketAddrV4,
    /// The last state seen, for the `established` event.
    state: u8,
    /// `POLLRDHUP` reported already.
    peer_closed: bool,
    /// An error taken with `SO_ERROR` for the `reset`/`timed_out` events, returned by the
    /// next read or write as the kernel would have.
    error: Option<io::Error>,
}

/// The kernel program serving a script's application lines in the SUT's namespace.
#[derive(Debug)]
pub struct LinuxApp {
    ns: String,
    ip: Ipv4Addr,
    setup: LinuxSetup,
    listener: Option<TcpListener>,
    current: Option<Conn>,
    events: Vec<Event>,
}

impl LinuxApp {
    /// Return a program whose sockets live in namespace `ns`, at `ip`.
    pub fn new(ns: &str, ip: Ipv4Addr, setup: LinuxSetup) -> LinuxApp {
        LinuxApp { ns: ns.to_string(), ip, setup, listener: None, current: None, events: Vec::new() }
    }

    /// Open a TCP socket in the namespace with the script's options set.
    fn socket(&self) -> io::Result<OwnedFd> {
        let setup = self.setup.clone();
        let fd = bypass_lab::testlab::in_namespace(&self.ns, sys::tcp_socket).map_err(io::Error::other)??;
        sys::set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        if let Some(mss) = setup.mss {
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, i32::from(mss))?;
        }
        if setup.nodelay {
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        }
        if let Some(cc) = setup.congestion {
            sys::set_bytes(&fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_bytes())?;
        }
        if let Some(ms) = setup.user_timeout_ms {
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms as i32)?;
        }
        if let Some(secs) = setup.linger2_secs {
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_LINGER2, secs)?;
        }
        if let Some((idle, interval, probes)) = setup.keepalive {
            sys::set_int(&fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle)?;
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval)?;
            sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes)?;
        }
        Ok(fd)
    }

    fn listen(&mut self, port: u16) -> io::Result<i64> {
        let fd = self.socket()?;
        sys::bind(&fd, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))?;
        sys::listen(&fd, self.setup.backlog)?;
        self.listener = Some(TcpListener::from(fd));
        Ok(0)
    }

    fn connect(&mut self, remote: SocketAddrV4, local_port: u16) -> io::Result<i64> {
        let fd = self.socket()?;
        let local = SocketAddrV4::new(self.ip, local_port);
        sys::bind(&fd, local)?;
        sys::connect(&fd, remote)?;
        let stream = TcpStream::from(fd);
        self.current =
            Some(Conn { stream: Some(stream), local, peer: remote, state: 2, peer_closed: false, error: None });
        Ok(0)
    }

    fn accept(&mut self) -> io::Result<i64> {
        let listener = self.listener.as_ref().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let (stream, peer) = listener.accept()?;
        stream.set_nonblocking(true)?;
        let (std::net::SocketAddr::V4(local), std::net::SocketAddr::V4(peer)) = (stream.local_addr()?, peer) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        self.current = Some(Conn { stream: Some(stream), local, peer, state: 1, peer_closed: false, error: None });
        Ok(0)
    }

    fn stream(&mut self) -> io::Result<(&TcpStream, &mut Option<io::Error>)> {
        match &mut self.current {
            Some(Conn { stream: Some(s), error, .. }) => Ok((s, error)),
            _ => Err(io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    /// Notice what happened to the current connection since the last look: the events of
    /// `event` lines (established, peer_closed, reset, timed_out).
    pub fn poll(&mut self) {
        let Some(conn) = &mut self.current else { return };
        let Some(stream) = &conn.stream else { return };
        if let Ok(state) = sys::tcp_state(stream) {
            if state == 1 && conn.state == 2 {
                self.events.push(Event::Established);
            }
            conn.state = state;
        }
        let Ok(revents) = sys::poll_now(stream.as_raw_fd()) else { return };
        if revents & libc::POLLRDHUP != 0 && !conn.peer_closed {
            conn.peer_closed = true;
            self.events.push(Event::PeerClosed);
        }
        if revents & libc::POLLERR != 0
            && conn.error.is_none()
            && let Ok(Some(e)) = stream.take_error()
        {
            self.events.push(match e.raw_os_error() {
                Some(libc::ETIMEDOUT) => Event::TimedOut,
                _ => Event::Reset,
            });
            conn.error = Some(e);
        }
    }

    /// Run one application call (the syscalls are listed in the crate docs).
    pub fn call(&mut self, call: &Call) -> Returned {
        let result = match *call {
            Call::Listen(port) => self.listen(port),
            Call::Accept => self.accept(),
            Call::Connect { remote, local_port } => self.connect(remote, local_port),
            Call::Write(n) => self.stream().and_then(|(mut s, error)| match error.take() {
                Some(e) => Err(e),
                None => s.write(&vec![0u8; n]).map(|k| k as i64),
            }),
            Call::Read(n) => self.stream().and_then(|(mut s, error)| match error.take() {
                Some(e) => Err(e),
                None => s.read(&mut vec![0u8; n]).map(|k| k as i64),
            }),
            Call::Shutdown => self.stream().and_then(|(s, _)| s.shutdown(Shutdown::Write).map(|()| 0)),
            Call::Close | Call::Abort => match &mut self.current {
                Some(Conn { stream: stream @ Some(_), .. }) => {
                    let s = stream.take().expect("matched Some");
                    if *call == Call::Abort {
                        let _ = sys::set_linger_zero(&s);
                    }
                    drop(s);
                    Ok(0)
                }
                _ => Err(io::Error::from_raw_os_error(libc::EBADF)),
            },
            Call::SetSockOpt(SockOpt::NoDelay(on)) => self.stream().and_then(|(s, _)| s.set_nodelay(on).map(|()| 0)),
            Call::State => return Returned::State(self.state()),
            Call::Events => return Returned::Events(std::mem::take(&mut self.events)),
        };
        match result {
            Ok(v) => Returned::Value(v),
            Err(e) => Returned::Errno(errno_name(&e)),
        }
    }

    fn state(&self) -> State {
        match (&self.current, &self.listener) {
            // A socket whose connection went to TIME-WAIT (or an orphan's FIN-WAIT-2) reports
            // CLOSE itself: the kernel moved the connection to a timewait socket.
            (Some(c @ Conn { stream: Some(s), .. }), _) => {
                match sys::tcp_state(s).map_or(State::Closed, kernel_state) {
                    State::Closed => self.table_state(c.local, c.peer),
                    state => state,
                }
            }
            // Given up: the kernel finishes the connection without a descriptor; find it in
            // the namespace's socket table.
            (Some(c), _) => self.table_state(c.local, c.peer),
            (None, Some(_)) => State::Listen,
            (None, None) => State::Closed,
        }
    }

    /// Return the state of the socket with this 4-tuple in `/proc/net/tcp` of the namespace
    /// (orphans and TIME-WAIT included), CLOSED if there is none.
    fn table_state(&self, local: SocketAddrV4, peer: SocketAddrV4) -> State {
        let table =
            bypass_lab::testlab::in_namespace(&self.ns, || std::fs::read_to_string("/proc/thread-self/net/tcp"));
        let Ok(Ok(table)) = table else { return State::Closed };
        let hex = |a: SocketAddrV4| format!("{:08X}:{:04X}", u32::from_ne_bytes(a.ip().octets()), a.port());
        let (l, p) = (hex(local), hex(peer));
        let mut states: VecDeque<u8> = VecDeque::new();
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 3 && f[1] == l && f[2] == p {
                states.push_back(u8::from_str_radix(f[3], 16).unwrap_or(7));
            }
        }
        states.front().map_or(State::Closed, |&n| kernel_state(n))
    }
}
