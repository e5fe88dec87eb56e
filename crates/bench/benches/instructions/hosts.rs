//! The two stacks behind one interface, [`Host`]: ours ([`Ours`]: `bypass_stack::Stack`) and
//! smoltcp 0.14 ([`Smol`]: an `Interface`, a `SocketSet` and one TCP socket), each a whole
//! host (Ethernet, ARP, IPv4, TCP) on a [`Port`] of the in-memory link, each holding a
//! number of connections, one of them the current one ([`Host::select`]) that the calls act on.
//!
//! Settings, alike where the two let us choose (see [`tcp_config`] and [`Smol::new`]):
//! MSS 1460 (MTU 1500), 256 KiB send and receive buffers that stay that size (window
//! scaling offered by both), Nagle off, Reno-family congestion control (our NewReno,
//! smoltcp's Reno), no pacing, no TCP timestamps (smoltcp sends none unless given a clock
//! for them), checksums computed and verified in software. What differs, because only one
//! of the two has it: our SACK (offered, never used on a lossless link), our ECN
//! negotiation (accepted if asked; nobody asks here) and our delayed-ACK timer of 40 ms
//! against smoltcp's 10 ms (both acknowledge every second full segment at once, and a
//! request/response's ACK rides on the next segment either way).

use std::net::{Ipv4Addr, SocketAddrV4};

use bypass_device::Instant;
use bypass_stack::{ListenerId, SocketId, Stack, StackConfig};
use bypass_tcp::{Algorithm, Config, State};
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

use crate::wire::Port;

/// Send and receive buffer of every connection, both stacks.
pub const BUFFER: usize = 256 * 1024;

/// What a read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// This many bytes.
    Data(usize),
    /// Nothing yet.
    Nothing,
    /// The end of the stream.
    Eof,
}

/// A host with connections numbered from 0, one of them the current one (0 unless
/// [`Host::select`] picks another), which the connection's calls act on.
pub trait Host {
    /// Return a host at `ip`/24 on `port`.
    fn new(port: Port, ip: Ipv4Addr) -> Self;
    /// Receive what has arrived, run due timers and send what is due, at `now`.
    fn poll(&mut self, now: Instant);
    /// Return the host's end of the link.
    fn port(&mut self) -> &mut Port;
    /// Accept connections on `port`, each into the current connection when it is empty.
    fn listen(&mut self, port: u16);
    /// Make connection `i` the current one. A listening host listens with an empty one
    /// (smoltcp: a new listening socket), so that the next connection opened to it becomes
    /// connection `i`.
    fn select(&mut self, i: usize);
    /// Open a connection from `local_port` to `remote`.
    fn connect(&mut self, local_port: u16, remote: SocketAddrV4);
    /// Return whether the connection is established (a listener takes its connection here).
    fn established(&mut self) -> bool;
    /// Queue what of `data` fits; return how much.
    fn send(&mut self, data: &[u8]) -> usize;
    /// Read into `buf`.
    fn recv(&mut self, buf: &mut [u8]) -> Read;
    /// Queue as much as the send buffer takes, in place: the bytes already in the buffer
    /// are sent again (a bulk source whose own work costs nothing); return how much.
    fn source(&mut self) -> usize;
    /// Consume everything received, in place (a bulk sink that costs nothing); return how
    /// much.
    fn sink(&mut self) -> usize;
    /// Close the connection (FIN after the queued data).
    fn close(&mut self);
    /// Return whether the closed connection is done: gone, or in TIME-WAIT (the active
    /// closer, after it acknowledged the peer's FIN). A listener is then ready for the next.
    fn finished(&mut self) -> bool;
}

/// Our TCP settings for these benchmarks (see the module documentation).
pub fn tcp_config(base: Config) -> Config {
    Config {
        mss: 1460,
        send_buffer: BUFFER,
        recv_buffer: BUFFER,
        send_buffer_max: BUFFER,
        recv_buffer_max: BUFFER,
        nagle: false,
        timestamps: false,
        pacing: false,
        congestion: Algorithm::NewReno,
        ..base
    }
}

/// Our stack.
pub struct Ours {
    stack: Stack<Port>,
    listener: Option<ListenerId>,
    /// The connections; `None` where none is open.
    conns: Vec<Option<SocketId>>,
    /// The index of the current one in `conns`.
    current: usize,
}

impl Ours {
    fn conn(&self) -> SocketId {
        self.conns[self.current].expect("a connection")
    }
}

impl Host for Ours {
    fn new(port: Port, ip: Ipv4Addr) -> Self {
        let mut config = StackConfig::new(ip, 24, [ip.octets()[3]; 16]);
        config.tcp = tcp_config(config.tcp);
        let mut stack = Stack::new(port, config);
        stack.set_time(Instant::ZERO);
        Ours { stack, listener: None, conns: vec![None], current: 0 }
    }

    fn poll(&mut self, now: Instant) {
        self.stack.set_time(now);
        self.stack.poll().expect("the in-memory link does not fail");
    }

    fn port(&mut self) -> &mut Port {
        self.stack.device_mut()
    }

    fn listen(&mut self, port: u16) {
        self.listener = Some(self.stack.listen(port).expect("listen"));
    }

    fn select(&mut self, i: usize) {
        if self.conns.len() <= i {
            self.conns.resize(i + 1, None);
        }
        self.current = i;
    }

    fn connect(&mut self, local_port: u16, remote: SocketAddrV4) {
        self.conns[self.current] = Some(self.stack.connect_from(local_port, remote).expect("connect"));
    }

    fn established(&mut self) -> bool {
        if self.conns[self.current].is_none()
            && let Some(listener) = self.listener
        {
            self.conns[self.current] = self.stack.accept(listener);
        }
        self.conns[self.current].is_some_and(|id| self.stack.state(id) == State::Established)
    }

    fn send(&mut self, data: &[u8]) -> usize {
        let id = self.conn();
        self.stack.write(id, data).unwrap_or(0)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Read {
        let id = self.conn();
        match self.stack.read(id, buf) {
            Ok(0) => Read::Eof,
            Ok(n) => Read::Data(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Read::Nothing,
            Err(e) => panic!("ours: read: {e}"),
        }
    }

    fn source(&mut self) -> usize {
        let id = self.conn();
        self.stack.send_with(id, |buf| (buf.len(), buf.len())).unwrap_or(0)
    }

    fn sink(&mut self) -> usize {
        let id = self.conn();
        let mut total = 0;
        while let Ok(n @ 1..) = self.stack.recv_with(id, |buf| (buf.len(), buf.len())) {
            total += n;
        }
        total
    }

    fn close(&mut self) {
        self.stack.close(self.conn());
    }

    fn finished(&mut self) -> bool {
        let id = self.conn();
        let done = matches!(self.stack.state(id), State::Closed | State::TimeWait);
        if done {
            self.conns[self.current] = None;
        }
        done
    }
}

/// smoltcp 0.14.
pub struct Smol {
    iface: Interface,
    port: Port,
    sockets: SocketSet<'static>,
    /// The connections' sockets, each of them listening while a listening host's
    /// connection is not open.
    handles: Vec<SocketHandle>,
    /// The index of the current one in `handles`.
    current: usize,
    listening: Option<u16>,
}

impl Smol {
    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handles[self.current])
    }

    /// Return a new socket with the benchmarks' settings.
    fn new_socket() -> tcp::Socket<'static> {
        let mut socket =
            tcp::Socket::new(tcp::SocketBuffer::new(vec![0; BUFFER]), tcp::SocketBuffer::new(vec![0; BUFFER]));
        socket.set_nagle_enabled(false);
        socket.set_congestion_control(tcp::CongestionControl::Reno);
        socket
    }
}

/// smoltcp's `Instant` for ours.
fn smol_now(now: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(now.as_micros() as i64)
}

impl Host for Smol {
    fn new(mut port: Port, ip: Ipv4Addr) -> Self {
        let mac = bypass_device::Device::info(&port).mac;
        let mut config = SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        config.random_seed = u64::from(ip.octets()[3]);
        let mut iface = Interface::new(config, &mut port, smol_now(Instant::ZERO));
        iface.update_ip_addrs(|addrs| addrs.push(IpCidr::new(IpAddress::Ipv4(ip), 24)).expect("room for one address"));
        let mut sockets = SocketSet::new(Vec::new());
        let socket = sockets.add(Smol::new_socket());
        Smol { iface, port, sockets, handles: vec![socket], current: 0, listening: None }
    }

    fn poll(&mut self, now: Instant) {
        self.iface.poll(smol_now(now), &mut self.port, &mut self.sockets);
    }

    fn port(&mut self) -> &mut Port {
        &mut self.port
    }

    fn listen(&mut self, port: u16) {
        self.socket().listen(port).expect("listen");
        self.listening = Some(port);
    }

    fn select(&mut self, i: usize) {
        while self.handles.len() <= i {
            let mut socket = Smol::new_socket();
            if let Some(port) = self.listening {
                socket.listen(port).expect("listen");
            }
            self.handles.push(self.sockets.add(socket));
        }
        self.current = i;
    }

    fn connect(&mut self, local_port: u16, remote: SocketAddrV4) {
        let handle = self.handles[self.current];
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        // Nagle and the controller stay set across connections (smoltcp's reset keeps them).
        socket
            .connect(self.iface.context(), (IpAddress::Ipv4(*remote.ip()), remote.port()), local_port)
            .expect("connect");
    }

    fn established(&mut self) -> bool {
        self.socket().state() == tcp::State::Established
    }

    fn send(&mut self, data: &[u8]) -> usize {
        self.socket().send_slice(data).unwrap_or(0)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Read {
        match self.socket().recv_slice(buf) {
            Ok(0) => Read::Nothing,
            Ok(n) => Read::Data(n),
            Err(tcp::RecvError::Finished) => Read::Eof,
            Err(e) => panic!("smoltcp: read: {e}"),
        }
    }

    fn source(&mut self) -> usize {
        self.socket().send(|buf| (buf.len(), buf.len())).unwrap_or(0)
    }

    fn sink(&mut self) -> usize {
        let mut total = 0;
        while let Ok(n @ 1..) = self.socket().recv(|buf| (buf.len(), buf.len())) {
            total += n;
        }
        total
    }

    fn close(&mut self) {
        self.socket().close();
    }

    fn finished(&mut self) -> bool {
        let done = matches!(self.socket().state(), tcp::State::Closed | tcp::State::TimeWait);
        if done
            && self.socket().state() == tcp::State::Closed
            && let Some(port) = self.listening
        {
            // smoltcp has no accept queue: the listening socket became the connection, and
            // listens again once it is closed.
            self.socket().listen(port).expect("listen again");
        }
        done
    }
}
