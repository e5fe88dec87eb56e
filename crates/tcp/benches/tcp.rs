//! Benchmarks: the receive and send paths of one established connection, segment parsing
//! and emitting, and a 4 MiB transfer between two of our connections next to the same
//! transfer between two smoltcp 0.14 endpoints over the same simulated IPv4 link.
//!
//! `cargo bench -p bypass-tcp` runs everything in about a minute and ends by printing the
//! ours/smoltcp throughput ratio of the transfer. Pass a filter (`-- transfer`) to run less.

#[path = "../tests/common/smol.rs"]
mod smol;

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use bypass_tcp::sim::{Link, LinkConfig, Pair};
use bypass_tcp::{Config, Connection, Flags, Instant, SackBlock, Segment, SeqNum, State, TcpOptions};
use criterion::{BatchSize, Criterion, Throughput};
use smol::{App, CLIENT, CloseWhen, Host, Net, OurHost, SERVER, SmolHost, random_bytes};

/// Segments per measured iteration of the per-segment benchmarks.
const BATCH: u64 = 64;
/// Payload of a full-sized segment.
const MSS: usize = 1460;
/// Bytes moved by a transfer benchmark.
const TRANSFER: usize = 4 << 20;
/// Transfers timed for the printed ratio (the median is used).
const RATIO_RUNS: usize = 15;

const PEER_ISN: SeqNum = SeqNum(0x1000_0000);
const PEER: Segment<'static> = Segment { src_port: 40000, dst_port: 80, flags: Flags::ACK, ..Segment::EMPTY };
const TICK: Duration = Duration::from_micros(1);

fn config() -> Config {
    Config { isn_secret: *b"bypass-tcp-bench", ..Config::default() }
}

/// Passive open with a peer that offers MSS 1460, window scaling by 14 and SACK; return the
/// ESTABLISHED connection and our ISS.
fn established(config: &Config) -> (Connection, SeqNum) {
    let mut c = Connection::listen(config, SERVER);
    let options =
        TcpOptions { mss: Some(MSS as u16), window_scale: Some(14), sack_permitted: true, ..TcpOptions::NONE };
    let syn = Segment { seq: PEER_ISN, flags: Flags::SYN, window: 65535, options, ..PEER };
    c.handle_segment_from(Instant::ZERO, CLIENT.ip(), &syn);
    let mut buf = vec![0; 2048];
    let iss = c.poll_transmit(Instant::ZERO, &mut buf).expect("SYN-ACK").seq;
    let ack = Segment { seq: PEER_ISN + 1u32, ack: iss + 1u32, window: 65535, ..PEER };
    c.handle_segment(Instant::from_millis(1), &ack);
    assert_eq!(c.state(), State::Established);
    while c.poll_event().is_some() {}
    (c, iss)
}

// ---------------------------------------------------------------------------------------------
// Receive path
// ---------------------------------------------------------------------------------------------

/// An established connection fed in-order full-sized segments; the application reads each
/// one and the ACKs are polled (and dropped).
struct Receiver {
    conn: Connection,
    ack: SeqNum,
    seq: SeqNum,
    now: Instant,
    payload: Vec<u8>,
    app: Vec<u8>,
    tx: Vec<u8>,
}

impl Receiver {
    fn new() -> Receiver {
        let (conn, iss) = established(&config());
        Receiver {
            conn,
            ack: iss + 1u32,
            seq: PEER_ISN + 1u32,
            now: Instant::from_millis(2),
            payload: random_bytes(1, MSS),
            app: vec![0; 64 * 1024],
            tx: vec![0; 2048],
        }
    }

    fn segment(&mut self) {
        let seg = Segment { seq: self.seq, ack: self.ack, window: 65535, payload: &self.payload, ..PEER };
        self.conn.handle_segment(self.now, &seg);
        self.seq = self.seq + MSS;
        while let Ok(n @ 1..) = self.conn.recv(&mut self.app) {
            black_box(&self.app[..n]);
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= self.now) {
            self.conn.handle_timeout(self.now);
        }
        while let Some(t) = self.conn.poll_transmit(self.now, &mut self.tx) {
            black_box(&self.tx[..t.len]);
        }
        self.now += TICK;
    }
}

fn receive_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("receive_path");
    group.throughput(Throughput::Elements(BATCH));
    let mut rx = Receiver::new();
    group.bench_function("in_order_1460", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                rx.segment();
            }
        })
    });
    group.finish();
    let stats = rx.conn.stats();
    assert_eq!(stats.segs_dropped, 0, "every segment was accepted");
    assert_eq!(stats.bytes_in % (1 << 32), u64::from(rx.seq - (PEER_ISN + 1u32)));
}

// ---------------------------------------------------------------------------------------------
// Send path
// ---------------------------------------------------------------------------------------------

/// An established connection with a 4 MiB send buffer kept full and a 1 GiB peer window;
/// whenever it stops sending (congestion window used up), one ACK covers everything sent.
struct Sender {
    conn: Connection,
    now: Instant,
    chunk: Vec<u8>,
    tx: Vec<u8>,
    sent: u64,
}

impl Sender {
    /// Bytes after which the bench starts over with a new connection: past 2^31 bytes our
    /// connection stops sending (`syn_acked` compares SND.UNA with the ISS modulo 2^32; see
    /// `sending_past_2_gib_keeps_going` in tests/smoltcp_interop.rs).
    const RENEW_AFTER: u64 = 3 << 29;

    /// Return a sender well into slow start: bursts of 700 segments between ACKs.
    fn new() -> Sender {
        let config = Config { send_buffer: 4 << 20, ..config() };
        let (conn, _) = established(&config);
        let chunk = random_bytes(2, 64 * 1024);
        let mut s = Sender { conn, now: Instant::from_millis(2), chunk, tx: vec![0; 2048], sent: 0 };
        s.fill();
        while s.conn.stats().cwnd < 1 << 20 {
            assert_eq!(s.segment(), MSS);
        }
        s
    }

    fn fill(&mut self) {
        while self.conn.send_capacity() > 0 {
            let n = self.conn.send_capacity().min(self.chunk.len());
            self.conn.send(&self.chunk[..n]).expect("room");
        }
    }

    /// Take one segment from `poll_transmit`, acknowledging and refilling when it stalls.
    fn segment(&mut self) -> usize {
        loop {
            if let Some(t) = self.conn.poll_transmit(self.now, &mut self.tx) {
                black_box(&self.tx[..t.len]);
                self.now += TICK;
                self.sent += t.payload_len as u64;
                return t.payload_len;
            }
            let space = self.conn.sequence_space();
            assert_ne!(space.snd_una, space.snd_max, "the sender stalled: {space:?}");
            let ack = Segment { seq: PEER_ISN + 1u32, ack: space.snd_max, window: 65535, ..PEER };
            self.conn.handle_segment(self.now, &ack);
            self.fill();
        }
    }
}

fn send_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("send_path");
    group.throughput(Throughput::Elements(BATCH));
    let mut tx = Sender::new();
    group.bench_function("full_window_1460", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                if tx.sent > Sender::RENEW_AFTER {
                    tx = Sender::new();
                }
                let start = std::time::Instant::now();
                for _ in 0..BATCH {
                    black_box(tx.segment());
                }
                elapsed += start.elapsed();
            }
            elapsed
        })
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// Wire
// ---------------------------------------------------------------------------------------------

fn wire(c: &mut Criterion) {
    let (src, dst): (IpAddr, IpAddr) = (CLIENT.ip(), SERVER.ip());
    let payload = random_bytes(3, MSS);
    let seg = Segment {
        seq: PEER_ISN,
        ack: SeqNum(7),
        window: 512,
        flags: Flags::ACK | Flags::PSH,
        payload: &payload,
        ..PEER
    };
    let mut bytes = vec![0; 2048];
    let len = seg.emit(src, dst, &mut bytes).expect("fits");
    bytes.truncate(len);

    let mut group = c.benchmark_group("wire");
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse_1460", |b| {
        b.iter(|| Segment::parse(black_box(&bytes), src, dst).expect("valid").payload.len())
    });
    group.bench_function("parse_unchecked_1460", |b| {
        b.iter(|| Segment::parse_unchecked(black_box(&bytes)).expect("valid").payload.len())
    });
    let mut out = vec![0; 2048];
    group.bench_function("emit_1460", |b| b.iter(|| black_box(&seg).emit(src, dst, &mut out).expect("fits")));
    let mut options = TcpOptions::NONE;
    for (left, right) in [(1000, 2000), (3000, 4000), (5000, 6000)] {
        options.sack_blocks.push(SackBlock { left: SeqNum(left), right: SeqNum(right) });
    }
    let sack = Segment { payload: &[], options, ..seg };
    let len = sack.emit(src, dst, &mut out).expect("fits");
    let sack_bytes = out[..len].to_vec();
    group.bench_function("parse_ack_3_sack_blocks", |b| {
        b.iter(|| Segment::parse(black_box(&sack_bytes), src, dst).expect("valid").options.sack_blocks.len())
    });
    group.bench_function("emit_ack_3_sack_blocks", |b| {
        b.iter(|| black_box(&sack).emit(src, dst, &mut out).expect("fits"))
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// Transfer: ours against smoltcp
// ---------------------------------------------------------------------------------------------

/// A client that sends `data` and closes, and a server that checks it and closes after.
fn apps(data: &[u8]) -> (App, App) {
    (App::new(data.to_vec(), Vec::new(), CloseWhen::Done), App::new(Vec::new(), data.to_vec(), CloseWhen::PeerClosed))
}

fn links() -> (Link, Link) {
    (Link::new(LinkConfig::default(), 1), Link::new(LinkConfig::default(), 2))
}

fn ours_net(data: &[u8]) -> Net<OurHost, OurHost> {
    let mut client = OurHost::client(&config(), CLIENT, SERVER, Instant::ZERO);
    let mut server = OurHost::server(&config(), SERVER);
    client.time_wait_ok = true;
    server.time_wait_ok = true;
    let (to_server, to_client) = links();
    let (c, s) = apps(data);
    Net::new(client, server, to_server, to_client, c, s)
}

fn smoltcp_net(data: &[u8]) -> Net<SmolHost, SmolHost> {
    let client = SmolHost::client(CLIENT, SERVER, 1);
    let server = SmolHost::server(SERVER, 2);
    let (to_server, to_client) = links();
    let (c, s) = apps(data);
    Net::new(client, server, to_server, to_client, c, s)
}

/// Run a transfer to the end; return the virtual time it took.
fn finish<C: Host, S: Host>(mut net: Net<C, S>) -> Duration {
    if let Err(report) = net.run(Instant::from_millis(600_000)) {
        panic!("transfer failed: {report}");
    }
    assert_eq!(net.server_app.received, TRANSFER);
    net.now - Instant::ZERO
}

fn sim_pair() -> Pair {
    Pair::new(&config(), &config(), LinkConfig::default(), LinkConfig::default(), 1)
}

/// Return why `sim::Pair` cannot run the transfer, if it cannot.
fn sim_pair_broken() -> Option<String> {
    let mut pair = sim_pair();
    pair.transfer(TRANSFER as u64, 0, Instant::from_millis(600_000)).err().map(|e| e.to_string())
}

fn transfer(c: &mut Criterion) {
    let data = random_bytes(4, TRANSFER);
    let mut group = c.benchmark_group("transfer_4mib");
    group.throughput(Throughput::Bytes(TRANSFER as u64));
    group.sample_size(10);
    group.bench_function("ours_ipv4", |b| b.iter_batched(|| ours_net(&data), finish, BatchSize::PerIteration));
    group.bench_function("smoltcp_ipv4", |b| b.iter_batched(|| smoltcp_net(&data), finish, BatchSize::PerIteration));
    match sim_pair_broken() {
        None => {
            group.bench_function("ours_sim_pair", |b| {
                b.iter_batched(
                    sim_pair,
                    |mut pair| pair.transfer(TRANSFER as u64, 0, Instant::from_millis(600_000)).expect("transfer"),
                    BatchSize::PerIteration,
                )
            });
        }
        Some(e) => println!("transfer_4mib/ours_sim_pair skipped: sim::Pair cannot run the transfer: {e}"),
    }
    group.finish();
}

/// Return the median of `runs`.
fn median(mut runs: Vec<(Duration, Duration)>) -> (Duration, Duration) {
    runs.sort();
    runs[runs.len() / 2]
}

/// Time `RATIO_RUNS` transfers of each kind, interleaved so that load from elsewhere on the
/// machine hits them alike; print the median throughputs and their ratio.
fn print_ratio() {
    let data = random_bytes(4, TRANSFER);
    let pair_works = sim_pair_broken().is_none();
    let (mut ours, mut smoltcp, mut pair) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RATIO_RUNS {
        let net = ours_net(&data);
        let start = std::time::Instant::now();
        let virtual_time = finish(net);
        ours.push((start.elapsed(), virtual_time));

        let net = smoltcp_net(&data);
        let start = std::time::Instant::now();
        let virtual_time = finish(net);
        smoltcp.push((start.elapsed(), virtual_time));

        if pair_works {
            let mut p = sim_pair();
            let start = std::time::Instant::now();
            let report = p.transfer(TRANSFER as u64, 0, Instant::from_millis(600_000)).expect("transfer");
            pair.push((start.elapsed(), report.elapsed()));
        }
    }
    let (ours, smoltcp) = (median(ours), median(smoltcp));
    let pair = pair_works.then(|| median(pair));
    let mib_s = |wall: Duration| TRANSFER as f64 / f64::from(1 << 20) / wall.as_secs_f64();
    let line = |name: &str, (wall, virt): (Duration, Duration)| {
        println!("  {name:<22} {:8.1} MiB/s  ({wall:.2?} wall, {virt:?} virtual)", mib_s(wall));
    };
    println!();
    println!("4 MiB one way over a perfect link (1 ms each way), both ends simulated; median of {RATIO_RUNS}:");
    line("ours, IPv4 driver", ours);
    line("smoltcp, IPv4 driver", smoltcp);
    if let Some(pair) = pair {
        line("ours, sim::Pair", pair);
    }
    println!(
        "  ratio ours/smoltcp throughput (same IPv4 driver): {:.2}",
        smoltcp.0.as_secs_f64() / ours.0.as_secs_f64()
    );
    if let Some(pair) = pair {
        println!("  ratio ours (sim::Pair)/smoltcp: {:.2}", smoltcp.0.as_secs_f64() / pair.0.as_secs_f64());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--test" || a == "--list");
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    receive_path(&mut c);
    send_path(&mut c);
    wire(&mut c);
    transfer(&mut c);
    c.final_summary();
    if !quick {
        print_ratio();
    }
}
