//! What the in-memory host tests share: two stacks over the in-memory link on virtual time
//! ([`Net`]), one `Interface` fed by hand on a [`ScriptedDevice`] ([`Host`]), a capture
//! that keeps what a stack sends ([`Collector`]) and a small random generator ([`Rng`]).
#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::net::{Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bypass_device::{Capture, Direction};
use bypass_device::{DeviceInfo, LinkConfig, MemoryDevice, MemoryLink, ScriptedDevice};
use bypass_stack::{Interface, ListenerId, SocketId, Stack, StackConfig};
use bypass_tcp::{Instant, State};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv6FlowLabel, Ipv6Header};

/// Two hosts, A and B, over the in-memory link, on virtual time.
pub struct Net {
    pub a: Stack<MemoryDevice>,
    pub b: Stack<MemoryDevice>,
    pub now: Instant,
}

impl Net {
    /// Return hosts with `ca` and `cb` over a link of `link` each way (seed 1), with a
    /// minimum RTO of 200 ms.
    pub fn new(link: LinkConfig, mut ca: StackConfig, mut cb: StackConfig) -> Net {
        let _ = env_logger::builder().is_test(true).try_init();
        let (da, db) = MemoryLink::pair(link, link, 1);
        for c in [&mut ca, &mut cb] {
            c.tcp.min_rto = Duration::from_millis(200);
        }
        let mut a = Stack::new(da, ca);
        let mut b = Stack::new(db, cb);
        a.set_time(Instant::ZERO);
        b.set_time(Instant::ZERO);
        Net { a, b, now: Instant::ZERO }
    }

    /// Advance virtual time to the next thing that happens and poll both hosts.
    pub fn step(&mut self) {
        self.a.poll().unwrap();
        self.b.poll().unwrap();
        let next = [
            self.a.poll_timeout(),
            self.b.poll_timeout(),
            self.a.device().next_arrival(),
            self.b.device().next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min();
        let next = next.unwrap_or(self.now + Duration::from_millis(10)).max(self.now);
        self.now = next;
        self.a.device().clock().advance_to(next);
        self.a.set_time(next);
        self.b.set_time(next);
        self.a.poll().unwrap();
        self.b.poll().unwrap();
    }

    /// Step until `done`, failing after two minutes of virtual time.
    pub fn run_until(&mut self, mut done: impl FnMut(&mut Net) -> bool) {
        let deadline = self.now + Duration::from_secs(120);
        while !done(self) {
            assert!(self.now < deadline, "virtual deadline passed");
            self.step();
        }
    }

    /// Connect A to B at `remote` (B listening on its port with `listener`); return both
    /// ends once established.
    pub fn connect(&mut self, remote: SocketAddr, listener: ListenerId) -> (SocketId, SocketId) {
        let client = self.a.connect(remote).unwrap();
        let mut server = None;
        self.run_until(|n| {
            server = server.or_else(|| n.b.accept(listener));
            server.is_some() && n.a.state(client) == State::Established
        });
        (client, server.unwrap())
    }
}

/// Keeps the frames a stack sends (its capture).
pub struct Collector(Arc<Mutex<Vec<Vec<u8>>>>);

impl Collector {
    /// Install a collector on `stack`; return the frames it will keep.
    pub fn install(stack: &mut Stack<MemoryDevice>) -> Arc<Mutex<Vec<Vec<u8>>>> {
        let frames = Arc::new(Mutex::new(Vec::new()));
        stack.set_capture(Box::new(Collector(frames.clone())));
        frames
    }
}

impl Capture for Collector {
    fn frame(&mut self, _now: Instant, dir: Direction, frame: &[u8], _note: &str) {
        if dir == Direction::Out {
            self.0.lock().unwrap().push(frame.to_vec());
        }
    }
}

/// The host under test, driven by hand in the order `Stack::poll` uses: frames in with
/// [`Host::receive`], what it sends out with [`Host::sent`].
pub struct Host {
    pub iface: Interface,
    pub wire: ScriptedDevice,
    pub now: Instant,
}

impl Host {
    /// Return a host with `config` at `mac` on a 1500-byte link.
    pub fn new(config: StackConfig, mac: [u8; 6]) -> Host {
        let _ = env_logger::builder().is_test(true).try_init();
        let wire = ScriptedDevice::new(DeviceInfo::new("test", mac, 1500, "by hand"));
        Host { iface: Interface::new(config, mac, 1500), wire, now: Instant::ZERO }
    }

    /// Take `frame` now, then fire due timers and pass events on.
    pub fn receive(&mut self, frame: &[u8]) {
        self.iface.receive(self.now, frame);
        self.iface.handle_timeouts(self.now);
        self.iface.deliver_events();
    }

    /// Return a host as [`Host::new`] makes it, on a device without a fixed receive ring (so
    /// with no window or flight budget), as the hosts that compare two paths use.
    pub fn without_ring(config: StackConfig, mac: [u8; 6]) -> Host {
        let mut host = Host::new(config, mac);
        host.iface.set_device_rx_frames(None);
        host
    }

    /// Return what the host sends now.
    pub fn sent(&mut self) -> Vec<Vec<u8>> {
        self.transmit_at(self.now)
    }

    /// Return what the host sends at `now` (its own clock left alone).
    pub fn transmit_at(&mut self, now: Instant) -> Vec<Vec<u8>> {
        self.iface.transmit(now, &mut self.wire).unwrap();
        self.wire.take_sent().into_iter().map(|(_, f)| f).collect()
    }

    /// Return the events waiting, taken, each as `{:?}` prints it.
    pub fn events(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.iface.poll_event()).map(|e| format!("{e:?}")).collect()
    }

    /// Return what the application sees of the connections `ids` (state, bytes queued to
    /// send, bytes to read, bytes in flight), as `{:?}` prints it.
    pub fn connections_seen(&self, ids: &[Option<SocketId>]) -> String {
        let conns: Vec<_> = ids
            .iter()
            .flatten()
            .map(|&id| {
                let c = self.iface.connection(id)?;
                Some((c.state(), c.send_queued(), c.recv_available(), c.bytes_in_flight()))
            })
            .collect();
        format!("{conns:?}")
    }

    /// Move the clock to `to`, fire due timers and pass events on.
    pub fn advance_to(&mut self, to: Instant) {
        self.now = to;
        self.iface.handle_timeouts(to);
        self.iface.deliver_events();
    }
}

/// Return an Ethernet frame carrying an IPv6 packet with `payload` behind a fixed header
/// whose Next Header is `next`.
pub fn ipv6_frame(
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    next: u8,
    payload: &[u8],
) -> Vec<u8> {
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: EtherType::IPV6 };
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: payload.len() as u16,
        next_header: IpNumber(next),
        hop_limit,
        source: src.octets(),
        destination: dst.octets(),
    };
    let mut f = eth.to_bytes().to_vec();
    f.extend_from_slice(&ip.to_bytes());
    f.extend_from_slice(payload);
    f
}

/// A small xorshift generator: a test's randomness, from a seed (not zero).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Return a number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
