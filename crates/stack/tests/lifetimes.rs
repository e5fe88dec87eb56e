//! Every connection ends: a server whose peers vanish, on virtual time.
//!
//! 10,000 connections to one listening host, 2,000 for each way a peer can leave a server
//! holding a connection (see [`Vanish`]). The server's application lets go of every one
//! (`Stack::close`, close(2) semantics) and never looks at it again; the table must return
//! to empty within the configured timeouts, and every connection's buffers to the pool.
//!
//! The peers are sans-IO `bypass_tcp::Connection`s driven by hand on the other end of an
//! in-memory link, so each can be made to fall silent at exactly the moment the test needs.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use bypass_device::{Device, MemoryDevice, MemoryLink};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::sim::LinkConfig;
use bypass_tcp::{Config, Connection, Event, FourTuple, Instant, Segment, State};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, NetSlice, SlicedPacket};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
const PORT: u16 = 80;
const PEER_MAC: [u8; 6] = [0x02, 0x10, 0, 0, 0, 0x01];
/// Connections per way of vanishing.
const EACH: u16 = 2000;
/// What the server sends before it closes, where it sends anything.
const DATA: usize = 8 * 1024;

/// How a peer leaves the server holding a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vanish {
    /// Acknowledges our FIN and never sends its own: FIN-WAIT-2, until its timeout.
    NeverCloses,
    /// Takes our data until its window is shut, then falls silent: zero-window probes go
    /// unanswered, until the user timeout.
    ShutsItsWindowThenFallsSilent,
    /// Sends data after our application closed: a reset, at once.
    SendsAfterClose,
    /// Falls silent as soon as the connection is up: our data is never acknowledged, until
    /// the retransmissions or the user timeout run out.
    GoneWithDataInFlight,
    /// Closes properly after us: TIME-WAIT, 2 MSL.
    ClosesAfterUs,
}

const ALL: [Vanish; 5] = [
    Vanish::NeverCloses,
    Vanish::ShutsItsWindowThenFallsSilent,
    Vanish::SendsAfterClose,
    Vanish::GoneWithDataInFlight,
    Vanish::ClosesAfterUs,
];

impl Vanish {
    /// The peer ports of this way: a block of [`EACH`].
    fn ports(self) -> std::ops::Range<u16> {
        let i = ALL.iter().position(|&v| v == self).unwrap() as u16;
        10_000 + i * EACH..10_000 + (i + 1) * EACH
    }

    fn of_port(port: u16) -> Vanish {
        ALL[((port - 10_000) / EACH) as usize]
    }

    /// Whether the server sends [`DATA`] before it closes.
    fn server_sends(self) -> bool {
        matches!(self, Vanish::ShutsItsWindowThenFallsSilent | Vanish::GoneWithDataInFlight)
    }
}

/// One peer connection.
struct Peer {
    conn: Connection,
    vanish: Vanish,
    /// Fallen silent: takes nothing in, sends nothing, runs no timers.
    silent: bool,
    sent_after_close: bool,
}

/// The peers' end of the link.
struct Peers {
    device: MemoryDevice,
    conns: HashMap<u16, Peer>,
    server_mac: Option<[u8; 6]>,
    config: Config,
    frame: Vec<u8>,
}

impl Peers {
    fn new(device: MemoryDevice) -> Peers {
        // Small buffers that stay small (no autotuning, no window scaling): a peer that never
        // reads shuts its window after exactly 4 KiB.
        let config = Config {
            recv_buffer: 4096,
            send_buffer: 4096,
            recv_buffer_max: 4096,
            send_buffer_max: 4096,
            min_rto: Duration::from_millis(200),
            isn_secret: [9; 16],
            ..Config::default()
        };
        Peers { device, conns: HashMap::new(), server_mac: None, config, frame: vec![0; 2048] }
    }

    fn connect(&mut self, now: Instant, port: u16) {
        let tuple = FourTuple {
            local: SocketAddr::new(IpAddr::V4(PEER), port),
            remote: SocketAddr::new(IpAddr::V4(SERVER), PORT),
        };
        let conn = Connection::connect(&self.config, tuple, now);
        self.conns.insert(port, Peer { conn, vanish: Vanish::of_port(port), silent: false, sent_after_close: false });
    }

    /// Take in what arrived, let each peer's application act, and send what is due.
    fn step(&mut self, now: Instant) {
        let mut frames: Vec<Vec<u8>> = Vec::new();
        while self.device.recv(256, &mut |f| frames.push(f.to_vec())).unwrap() > 0 {}
        for frame in frames {
            self.receive(now, &frame);
        }
        let ports: Vec<u16> = self.conns.keys().copied().collect();
        for port in ports {
            self.run(now, port);
        }
        self.device.flush().unwrap();
    }

    fn receive(&mut self, now: Instant, frame: &[u8]) {
        let Ok(packet) = SlicedPacket::from_ethernet(frame) else { return };
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = packet.link.as_ref() else { return };
        let source = eth.source();
        match packet.net {
            Some(NetSlice::Arp(arp)) => {
                // Answer who-has for the peers' address (the server learns our MAC too).
                let Ok(arp) = arp.to_packet().try_eth_ipv4() else { return };
                if arp.target_ipv4 == PEER.octets() && arp.operation == etherparse::ArpOperation::REQUEST {
                    let (mac, ip) = (arp.sender_mac, Ipv4Addr::from(arp.sender_ipv4));
                    let mut reply = [0u8; bypass_stack::wire::arp::ARP_FRAME_LEN];
                    let op = etherparse::ArpOperation::REPLY;
                    bypass_stack::wire::arp::write_frame(&mut reply, op, PEER_MAC, PEER, mac, ip);
                    send(&mut self.device, &reply);
                }
            }
            Some(NetSlice::Ipv4(ip)) => {
                self.server_mac = Some(source);
                let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
                let Ok(seg) = Segment::parse(ip.payload().payload, IpAddr::V4(src), IpAddr::V4(dst)) else { return };
                if let Some(peer) = self.conns.get_mut(&seg.dst_port)
                    && !peer.silent
                {
                    peer.conn.handle_segment(now, &seg);
                }
            }
            _ => {}
        }
    }

    /// Fire `port`'s timers, let its application act as its way of vanishing says, and
    /// send what it has.
    fn run(&mut self, now: Instant, port: u16) {
        let peer = self.conns.get_mut(&port).unwrap();
        if peer.silent {
            return;
        }
        if peer.conn.poll_timeout().is_some_and(|t| t <= now) {
            peer.conn.handle_timeout(now);
        }
        let mut peer_closed = false;
        while let Some(event) = peer.conn.poll_event() {
            peer_closed |= event == Event::PeerClosed;
        }
        match peer.vanish {
            Vanish::SendsAfterClose if peer_closed && !peer.sent_after_close => {
                peer.sent_after_close = true;
                peer.conn.send(b"more data after your close").unwrap();
            }
            Vanish::ClosesAfterUs if peer_closed => peer.conn.close(now),
            _ => {}
        }
        // Everything but the window-shutter reads what arrives.
        if peer.vanish != Vanish::ShutsItsWindowThenFallsSilent {
            let mut sink = [0u8; 4096];
            while let Ok(1..) = peer.conn.recv(&mut sink) {}
        }
        let Some(server_mac) = self.server_mac.or(Some([0xff; 6])) else { return };
        loop {
            let frame = &mut self.frame;
            let Some(t) = peer.conn.poll_transmit(now, &mut frame[34..]) else { break };
            let eth = Ethernet2Header { source: PEER_MAC, destination: server_mac, ether_type: EtherType::IPV4 };
            frame[..14].copy_from_slice(&eth.to_bytes());
            let ip = Ipv4Header::new(t.len as u16, 64, IpNumber::TCP, PEER.octets(), SERVER.octets()).unwrap();
            let mut header = ip;
            header.header_checksum = header.calc_header_checksum();
            frame[14..34].copy_from_slice(&header.to_bytes());
            send(&mut self.device, &frame[..34 + t.len]);
        }
        // The window-shutter falls silent once it has told the server its window is shut; the
        // gone one once its handshake's last ACK is out.
        let silent = match peer.vanish {
            Vanish::ShutsItsWindowThenFallsSilent => peer.conn.sequence_space().rcv_wnd == 0,
            Vanish::GoneWithDataInFlight => peer.conn.state() == State::Established,
            _ => false,
        };
        peer.silent |= silent;
    }

    /// Return the earliest timer of a peer that is still talking.
    fn next_timeout(&self) -> Option<Instant> {
        self.conns.values().filter(|p| !p.silent).filter_map(|p| p.conn.poll_timeout()).min()
    }
}

/// Queue `frame` on `device`, flushing first when its queue is full.
fn send(device: &mut MemoryDevice, frame: &[u8]) {
    let mut fill = |buf: &mut [u8]| {
        buf[..frame.len()].copy_from_slice(frame);
        frame.len()
    };
    if !device.send(&mut fill).unwrap() {
        device.flush().unwrap();
        assert!(device.send(&mut fill).unwrap(), "an empty queue takes a frame");
    }
}

/// The server: a stack whose application accepts, sends where its peer's way says, and
/// closes at once, never to look at the connection again.
struct Net {
    server: Stack<MemoryDevice>,
    peers: Peers,
    now: Instant,
    listener: bypass_stack::ListenerId,
    accepted: usize,
}

impl Net {
    fn new(tweak: impl Fn(&mut StackConfig)) -> Net {
        let _ = env_logger::builder().is_test(true).try_init();
        let link = LinkConfig::default().with_delay(Duration::from_micros(500));
        let (server_device, peer_device) = MemoryLink::new(link, link, 7).tx_queue(4096).build();
        let mut config = StackConfig::new(SERVER, 24, [3; 16]);
        config.tcp.send_buffer = 64 * 1024;
        config.tcp.recv_buffer = 16 * 1024;
        config.syn_queue = 20_000;
        config.accept_backlog = 20_000;
        config.buffer_pool = 20_000;
        tweak(&mut config);
        let mut server = Stack::new(server_device, config);
        server.set_time(Instant::ZERO);
        let listener = server.listen(PORT).unwrap();
        Net { server, peers: Peers::new(peer_device), now: Instant::ZERO, listener, accepted: 0 }
    }

    /// Run both ends at the current time, then move time to the next thing that happens
    /// (never past `limit`).
    fn step(&mut self, limit: Instant) {
        self.server.poll().unwrap();
        while let Some(id) = self.server.accept(self.listener) {
            self.accepted += 1;
            let tuple = self.server.interface().connection(id).and_then(|c| c.tuple()).unwrap();
            if Vanish::of_port(tuple.remote.port()).server_sends() {
                let data = vec![0x5a; DATA];
                let mut sent = 0;
                while sent < DATA {
                    sent += self.server.write(id, &data[sent..]).unwrap();
                }
            }
            self.server.close(id);
        }
        self.server.poll().unwrap();
        self.peers.step(self.now);
        let next = [
            self.server.poll_timeout(),
            self.peers.next_timeout(),
            self.server.device().next_arrival(),
            self.peers.device.next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(limit)
        .clamp(self.now, limit);
        // Never stand still: something due now was handled above.
        self.now = if next == self.now { self.now + Duration::from_micros(100) } else { next }.min(limit);
        self.server.device().clock().advance_to(self.now);
        self.server.set_time(self.now);
    }

    fn run_until(&mut self, at: Instant) {
        while self.now < at {
            self.step(at);
        }
    }

    fn connections(&self) -> usize {
        self.server.interface().connection_count()
    }
}

#[test]
fn ten_thousand_vanishing_peers_leave_nothing_behind() {
    let mut net = Net::new(|_| {});
    let tcp = net.server.interface().config().tcp.clone();
    for vanish in ALL {
        for port in vanish.ports() {
            net.peers.connect(Instant::ZERO, port);
        }
    }
    let total = ALL.len() * EACH as usize;

    // Within a second every connection is up and closed by the server's application, and the
    // peers that send after the close have been reset.
    net.run_until(Instant::ZERO + Duration::from_secs(1));
    assert_eq!(net.accepted, total, "every connection accepted");
    let resets = net.server.counters().resets_for_lost_data;
    assert_eq!(resets, EACH as u64, "one reset for each peer that sent after the close");
    assert_eq!(net.connections(), total - EACH as usize, "{}", net.server.counters());
    assert_eq!(net.server.interface().orphan_count(), total - EACH as usize, "released, not yet ended");

    // FIN-WAIT-2 and TIME-WAIT end after their timeouts (60 s each, from about 0 s).
    let fin_wait2 = tcp.fin_wait2_timeout.unwrap();
    let time_wait = tcp.msl * 2;
    net.run_until(Instant::ZERO + fin_wait2.max(time_wait) + Duration::from_secs(2));
    assert_eq!(net.connections(), 2 * EACH as usize, "only the two silent kinds are left");

    // The silent ones end when their retransmissions (or the zero window's probes) run out:
    // `max_retransmissions` timeouts doubling from the minimum RTO up to `max_rto` (924.6 s
    // with the defaults, Linux's tcp_model_timeout for tcp_retries2 = 15), give or take the
    // last backed-off timer (at most the largest RTO).
    assert_eq!(tcp.user_timeout, None, "no user timeout by default, as Linux");
    let give_up: Duration =
        (0..=tcp.max_retransmissions).map(|i| tcp.min_rto.saturating_mul(1 << i.min(20)).min(tcp.max_rto)).sum();
    net.run_until(Instant::ZERO + give_up + tcp.max_rto + Duration::from_secs(2));
    assert_eq!(net.connections(), 0, "the table is empty");
    assert_eq!(net.server.interface().orphan_count(), 0);
    let counters = net.server.counters();
    assert_eq!(counters.connections_timed_out, 2 * EACH as u64, "the silent ones timed out: {counters}");

    // Every connection's buffers came back to the pool: as many sets as were ever made.
    let pool = net.server.interface().pooled_buffers();
    assert_eq!(pool, counters.buffers_allocated as usize, "{counters}");
    assert!(pool <= total);
}

#[test]
fn orphans_beyond_the_bound_are_reset() {
    // At most 100 closed connections finishing in the background: the next ones are reset at
    // once (Linux's tcp_max_orphans), and so is one whose queued data would take the orphans
    // past their memory bound.
    let mut net = Net::new(|c| {
        c.max_orphans = 100;
        c.max_orphan_memory = 1 << 20;
    });
    // 150 peers that never close (FIN-WAIT-2 orphans holding no data).
    for port in Vanish::NeverCloses.ports().take(150) {
        net.peers.connect(Instant::ZERO, port);
    }
    net.run_until(Instant::ZERO + Duration::from_secs(1));
    assert_eq!(net.accepted, 150);
    assert_eq!(net.server.interface().orphan_count(), 100);
    assert_eq!(net.connections(), 100, "50 reset at once");
    assert_eq!(net.server.counters().orphans_reset, 50);

    // 40 that each leave 8 KiB unacknowledged (their peers fall silent) against a bound of
    // 256 KiB: 32 fit, the other 8 are reset.
    let mut net = Net::new(|c| {
        c.max_orphans = 10_000;
        c.max_orphan_memory = 256 << 10;
    });
    for port in Vanish::GoneWithDataInFlight.ports().take(40) {
        net.peers.connect(Instant::ZERO, port);
    }
    net.run_until(Instant::ZERO + Duration::from_secs(1));
    assert_eq!(net.accepted, 40);
    assert_eq!(net.server.interface().orphan_count(), 32, "32 x 8 KiB fit in 256 KiB");
    assert_eq!(net.server.counters().orphans_reset, 8);
}

#[test]
fn a_new_syn_reopens_a_connection_in_time_wait() {
    // The server closes first and ends in TIME-WAIT; the same peer port connects again
    // within the 60 s: the new SYN starts a new connection (RFC 6191), it is not just ACKed.
    let mut net = Net::new(|_| {});
    let port = Vanish::ClosesAfterUs.ports().start;
    net.peers.connect(Instant::ZERO, port);
    net.run_until(Instant::ZERO + Duration::from_secs(1));
    assert_eq!(net.connections(), 1, "in TIME-WAIT");
    let old = net.peers.conns.remove(&port).unwrap();
    assert_eq!(old.conn.state(), State::Closed, "the peer's end is gone (it closed second)");
    let old_iss = old.conn.sequence_space().iss;
    // A new incarnation from the same port, later: its ISS is higher (RFC 6528's clock).
    net.peers.connect(net.now, port);
    assert!(net.peers.conns[&port].conn.sequence_space().iss.after(old_iss));
    net.run_until(net.now + Duration::from_secs(1));
    assert_eq!(net.accepted, 2, "the second SYN was accepted");
    assert_eq!(net.server.counters().time_wait_reopened, 1);
    net.run_until(Instant::ZERO + Duration::from_secs(70));
    assert_eq!(net.connections(), 0);
}

#[test]
fn a_released_connection_is_reset_when_data_is_left_unread() {
    let mut net = Net::new(|_| {});
    let port = Vanish::NeverCloses.ports().start;
    net.peers.connect(Instant::ZERO, port);
    // Let the handshake finish, then have the peer send before the server accepts.
    while net.peers.conns[&port].conn.state() != State::Established {
        net.server.poll().unwrap();
        net.peers.step(net.now);
        net.now += Duration::from_millis(1);
        net.server.device().clock().advance_to(net.now);
        net.server.set_time(net.now);
    }
    net.peers.conns.get_mut(&port).unwrap().conn.send(b"never read").unwrap();
    net.run_until(net.now + Duration::from_secs(1));
    assert_eq!(net.accepted, 1);
    assert_eq!(net.connections(), 0, "reset, not a FIN: the data was lost");
    assert_eq!(net.server.counters().resets_for_lost_data, 1);
    assert_eq!(net.peers.conns[&port].conn.state(), State::Closed);
    let _ = SocketAddrV4::new(SERVER, PORT);
}
