//! The host's three budgets, on virtual time over a simulated link: the sum of the receive
//! windows stays within what the device's receive ring can hold, so does the data in flight
//! (whose acknowledgments the ring must hold too), and autotuning stops growing buffers once
//! the host's buffer memory is spent. Data arrives intact either way.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_device::{DeviceInfo, Instant, Link, LinkConfig, ScriptedDevice, mix};
use bypass_stack::{SocketId, Stack, StackConfig};
use bypass_tcp::State;

const A: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 2);
const PORT: u16 = 9;

/// Client host A, server host B (whose device says it has a receive ring of `rx_frames`
/// frames, as the AF_XDP and AF_PACKET devices do), each on a scripted device, joined by a
/// simulated link each way that the test carries frames across.
struct Net {
    a: Stack<ScriptedDevice>,
    b: Stack<ScriptedDevice>,
    /// A to B, B to A.
    links: [Link; 2],
    now: Instant,
}

impl Net {
    fn new(link: LinkConfig, rx_frames: Option<usize>, tweak: impl Fn(&mut StackConfig)) -> Net {
        let _ = env_logger::builder().is_test(true).try_init();
        // 256 frames between flushes, as the in-memory link's devices.
        let device =
            |name: &str, mac| ScriptedDevice::new(DeviceInfo::new(name, mac, 1500, "test")).with_tx_capacity(256);
        let da = device("a", [2, 0, 0, 0, 0, 0x0a]);
        let db = device("b", [2, 0, 0, 0, 0, 0x0b]).with_rx_frames(rx_frames);
        let ca = StackConfig::new(A, 24, [1; 16]);
        let mut cb = StackConfig::new(B, 24, [2; 16]);
        tweak(&mut cb);
        let mut a = Stack::new(da, ca);
        let mut b = Stack::new(db, cb);
        a.set_time(Instant::ZERO);
        b.set_time(Instant::ZERO);
        let links = [Link::new(link, mix(3, 1)), Link::new(link, mix(3, 2))];
        Net { a, b, links, now: Instant::ZERO }
    }

    fn step(&mut self) {
        self.a.poll().unwrap();
        self.b.poll().unwrap();
        let [ab, ba] = &mut self.links;
        for (from, link) in [(&mut self.a, &mut *ab), (&mut self.b, &mut *ba)] {
            for (at, frame) in from.device_mut().take_sent() {
                link.send(at, &frame);
            }
        }
        let next = [
            self.a.poll_timeout(),
            self.b.poll_timeout(),
            self.links[0].next_delivery(),
            self.links[1].next_delivery(),
        ]
        .into_iter()
        .flatten()
        .min();
        let next = next.unwrap_or(self.now + Duration::from_millis(10)).max(self.now);
        self.now = next;
        let [ab, ba] = &mut self.links;
        for (link, to) in [(ab, &mut self.b), (ba, &mut self.a)] {
            while let Some(packet) = link.recv(next) {
                to.device_mut().push_rx(packet.bytes());
                link.recycle(packet);
            }
            to.device_mut().set_time(next);
            to.set_time(next);
        }
    }
}

/// What one bulk run saw.
struct Run {
    /// The largest sum of the windows B offered its clients, as the clients knew them,
    /// sampled once every connection had sent its first quarter.
    peak_windows: usize,
    /// The most bytes B's connections held in buffers at once.
    peak_memory: usize,
    /// B's window budget.
    window_budget: usize,
    /// The unit of B's windows (its window scale).
    unit: usize,
}

/// `clients` connections from A to B, each sending `each` bytes that B reads and checks as
/// fast as they come.
fn bulk(net: &mut Net, clients: usize, each: usize) -> Run {
    let listener = net.b.listen(PORT).unwrap();
    let ids: Vec<SocketId> = (0..clients).map(|_| net.a.connect(SocketAddrV4::new(B, PORT)).unwrap()).collect();
    // Each client's bytes depend on its port, so a byte in the wrong connection shows.
    let message = |port: u16, i: usize| (i as u32 * 31 + u32::from(port) * 7) as u8;
    let port = |net: &Net, id: SocketId| net.a.interface().connection(id).unwrap().tuple().unwrap().local.port();
    let ports: Vec<u16> = ids.iter().map(|&id| port(net, id)).collect();
    let mut servers: Vec<(SocketId, usize)> = Vec::new();
    let mut sent = vec![0usize; clients];
    let (mut peak_windows, mut peak_memory) = (0, 0);
    let deadline = net.now + Duration::from_secs(600);
    let mut chunk = vec![0u8; 64 << 10];
    let mut buf = vec![0u8; 64 << 10];
    while servers.len() < clients || servers.iter().any(|&(_, got)| got < each) {
        assert!(net.now < deadline, "virtual deadline passed: {}", net.b.counters());
        while let Some(id) = net.b.accept(listener) {
            servers.push((id, 0));
        }
        for (c, &id) in ids.iter().enumerate() {
            while sent[c] < each && net.a.state(id) == State::Established {
                let n = chunk.len().min(each - sent[c]);
                for (i, b) in chunk[..n].iter_mut().enumerate() {
                    *b = message(ports[c], sent[c] + i);
                }
                match net.a.write(id, &chunk[..n]) {
                    Ok(k) if k > 0 => sent[c] += k,
                    _ => break,
                }
            }
        }
        for (id, got) in servers.iter_mut() {
            let peer = net.b.interface().connection(*id).unwrap().tuple().unwrap().remote.port();
            while let Ok(k @ 1..) = net.b.read(*id, &mut buf) {
                for (i, &b) in buf[..k].iter().enumerate() {
                    assert_eq!(b, message(peer, *got + i), "client port {peer}, byte {}", *got + i);
                }
                *got += k;
            }
        }
        if sent.iter().all(|&s| s >= each / 4) {
            let windows: usize =
                ids.iter().map(|&id| net.a.interface().connection(id).unwrap().sequence_space().snd_wnd as usize).sum();
            peak_windows = peak_windows.max(windows);
        }
        peak_memory = peak_memory.max(net.b.interface().buffer_memory());
        net.step();
    }
    let unit = 1 << net.a.interface().connection(ids[0]).unwrap().sequence_space().snd_wscale;
    Run { peak_windows, peak_memory, window_budget: net.b.interface().window_budget(), unit }
}

/// `clients` connections from A to B; B sends `each` bytes on each, which A reads and checks
/// as fast as they come. Return the most data B had in flight on all of them at once.
fn download(net: &mut Net, clients: usize, each: usize) -> usize {
    let listener = net.b.listen(PORT).unwrap();
    let ids: Vec<SocketId> = (0..clients).map(|_| net.a.connect(SocketAddrV4::new(B, PORT)).unwrap()).collect();
    let message = |port: u16, i: usize| (i as u32 * 13 + u32::from(port) * 5) as u8;
    let port = |net: &Net, id: SocketId| net.a.interface().connection(id).unwrap().tuple().unwrap().local.port();
    let ports: Vec<u16> = ids.iter().map(|&id| port(net, id)).collect();
    let mut servers: Vec<(SocketId, u16, usize)> = Vec::new();
    let mut got = vec![0usize; clients];
    let mut peak = 0;
    let deadline = net.now + Duration::from_secs(600);
    let mut chunk = vec![0u8; 64 << 10];
    let mut buf = vec![0u8; 64 << 10];
    while got.iter().any(|&g| g < each) {
        assert!(net.now < deadline, "virtual deadline passed: {}", net.b.counters());
        while let Some(id) = net.b.accept(listener) {
            let peer = net.b.interface().connection(id).unwrap().tuple().unwrap().remote.port();
            servers.push((id, peer, 0));
        }
        for (id, peer, sent) in servers.iter_mut() {
            while *sent < each {
                let n = chunk.len().min(each - *sent);
                for (i, b) in chunk[..n].iter_mut().enumerate() {
                    *b = message(*peer, *sent + i);
                }
                match net.b.write(*id, &chunk[..n]) {
                    Ok(k) if k > 0 => *sent += k,
                    _ => break,
                }
            }
        }
        for (c, &id) in ids.iter().enumerate() {
            while let Ok(k @ 1..) = net.a.read(id, &mut buf) {
                for (i, &b) in buf[..k].iter().enumerate() {
                    assert_eq!(b, message(ports[c], got[c] + i), "client port {}, byte {}", ports[c], got[c] + i);
                }
                got[c] += k;
            }
        }
        let flight: usize = servers
            .iter()
            .map(|&(id, _, _)| net.b.interface().connection(id).unwrap().bytes_in_flight() as usize)
            .sum();
        peak = peak.max(flight);
        net.step();
    }
    peak
}

#[test]
fn the_budgets_follow_the_device_ring_unless_set() {
    let net = Net::new(LinkConfig::default(), Some(4096), |_| {});
    let mss = usize::from(net.b.interface().config().tcp.mss);
    assert_eq!(net.b.interface().window_budget(), 4096 * mss / 2, "half the ring in full segments");
    assert_eq!(net.b.interface().flight_budget(), 4096 * mss / 4, "a quarter of the ring in full segments");
    let net = Net::new(LinkConfig::default(), None, |_| {});
    assert_eq!(net.b.interface().window_budget(), usize::MAX, "no ring, no limit");
    assert_eq!(net.b.interface().flight_budget(), usize::MAX, "no ring, no limit");
    let net = Net::new(LinkConfig::default(), Some(4096), |c| {
        c.window_budget = Some(1 << 20);
        c.flight_budget = Some(1 << 19);
    });
    assert_eq!(net.b.interface().window_budget(), 1 << 20, "set in the config");
    assert_eq!(net.b.interface().flight_budget(), 1 << 19, "set in the config");
}

#[test]
fn data_in_flight_together_fits_the_device_ring() {
    // A 200-frame ring: 73 kB in flight between 10 connections whose initial windows alone
    // (ten segments each, RFC 6928) would put 146 kB in flight, and whose congestion
    // windows grow past that over a 2 ms round trip.
    let link = LinkConfig::default().with_delay(Duration::from_millis(1));
    let (clients, each) = (10, 1 << 20);
    let mut net = Net::new(link, Some(200), |_| {});
    let budget = net.b.interface().flight_budget();
    let mss = usize::from(net.b.interface().config().tcp.mss);
    let peak = download(&mut net, clients, each);
    println!("10 connections, 200-frame ring: {peak} bytes in flight at most, budget {budget}");
    // Every connection may keep two full segments in flight whatever the budget.
    assert!(peak <= budget.max(clients * 2 * mss), "{peak} bytes in flight, over the budget {budget}");

    // The control: without a ring to fit, the same transfer has far more in flight.
    let mut net = Net::new(link, None, |_| {});
    let open = download(&mut net, clients, each);
    println!("without a ring: {open} bytes in flight at most");
    assert!(open > 2 * budget, "the control had {open} bytes in flight");
}

#[test]
fn receive_windows_together_fit_the_device_ring() {
    // A 200-frame ring: 146 kB of window between 10 connections that could each offer
    // 256 KiB (the default receive buffer) or more.
    let link = LinkConfig::default().with_delay(Duration::from_millis(1));
    let (clients, each) = (10, 1 << 20);
    let mut net = Net::new(link, Some(200), |_| {});
    let run = bulk(&mut net, clients, each);
    println!(
        "10 connections, 200-frame ring: windows peak at {} bytes together, budget {}",
        run.peak_windows, run.window_budget
    );
    // Each window may end up to one scale unit past its share (rounded up, RFC 7323 2.3).
    assert!(
        run.peak_windows <= run.window_budget + clients * run.unit,
        "windows {} over the budget {}",
        run.peak_windows,
        run.window_budget
    );

    // The control: without a ring to fit, the same transfer offers far more.
    let mut net = Net::new(link, None, |_| {});
    let open = bulk(&mut net, clients, each);
    println!("without a ring: windows peak at {} bytes together", open.peak_windows);
    assert!(open.peak_windows > 4 * run.window_budget, "the control offers {} bytes", open.peak_windows);
}

#[test]
fn autotuning_stops_growing_buffers_at_the_memory_budget() {
    // 20 ms round trips at 1 Gbit/s: a 2.5 MB path that autotuning grows each connection's
    // 256 KiB receive buffer towards.
    let link = LinkConfig::default().with_delay(Duration::from_millis(10)).with_bandwidth(1_000_000_000);
    let (clients, each) = (4, 16 << 20);

    let mut net = Net::new(link, None, |_| {});
    let free = bulk(&mut net, clients, each);
    let config = net.b.interface().config().tcp.clone();
    let initial = clients * (config.send_buffer + config.recv_buffer);
    println!("4 bulk connections: buffers grew from {initial} to {} bytes", free.peak_memory);
    assert!(free.peak_memory > 4 * initial, "autotuning grew the buffers to {} bytes", free.peak_memory);

    let budget = 2 * initial;
    let mut net = Net::new(link, None, |c| c.buffer_memory = budget);
    let held = bulk(&mut net, clients, each);
    println!("with a budget of {budget} bytes: buffers peak at {} bytes", held.peak_memory);
    // One step past the budget at most: each connection may take the growth it was already
    // allowed (a doubling) before it learns the budget is spent.
    assert!(
        held.peak_memory <= budget + clients * 2 * config.recv_buffer_max.min(4 * config.recv_buffer),
        "{}",
        held.peak_memory
    );
    assert!(held.peak_memory < free.peak_memory / 2);
}
