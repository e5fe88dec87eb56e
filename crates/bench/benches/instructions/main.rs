//! Instruction counts of our stack against smoltcp 0.14, on Valgrind (Callgrind) through
//! `gungraun`: figures that do not drift with the machine's speed, as timings on a shared VM
//! do (docs/performance.md, "Instruction counts").
//!
//! Both stacks are whole hosts (Ethernet, ARP, IPv4, TCP: `hosts.rs`) on the same in-memory
//! link (`wire.rs`), driven by the same code here, one connection between a client (A) and a
//! server (B) on virtual time. Each benchmark builds its hosts and brings them to a steady
//! state in a setup that is not counted, then runs `N` units of work; Callgrind counts the
//! instructions of [`measured`] only, so a figure divided by `N` is the cost of one unit:
//!
//! | benchmark (`_ours`, `_smoltcp`) | unit | counted (the benchmark's id) |
//! |---|---|---|
//! | `rr` | one 64-byte request and its 64-byte echo | `both` ends, or the `client`'s or the `server`'s part |
//! | `rr_many` | one 64-byte request and its echo, on one of [`MANY`] connections with a request in flight on each at once (the demo's 100-connection workload) | `both` ends, or the `server`'s part |
//! | `bulk`, id `receive` | one data segment (1460 bytes) received | the receiver: its polls (the segment, the ACKs it sends) and its application's calls |
//! | `bulk`, id `send` | one data segment sent | the sender: its polls (the segment, the ACKs it takes in) and its application's calls |
//! | `connection` | one connection opened and closed, no data | `both` ends, or the `client`'s or the `server`'s part |
//!
//! `cargo bench -p bypass-bench --bench instructions` measures (it needs `valgrind` and
//! `gungraun-runner` of gungraun's version); without `--bench`, as under
//! `cargo test --workspace --release`, the binary runs itself under Valgrind in a reduced
//! form (a tenth of each `N`), so that the benchmarks cannot rot, and prints the figures.

#![deny(unsafe_code)]

mod hosts;
mod report;
mod wire;

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_device::Instant;
use gungraun::{Callgrind, EntryPoint, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group};
use hosts::{Host, Ours, Read, Smol};
use wire::{carry, carry_data};

/// The client's address.
const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The server's address.
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The server's port.
const PORT: u16 = 7;
/// Virtual time between two rounds of polling.
const TICK: Duration = Duration::from_micros(10);
/// Buffers of the link's pool: more than a window of full-sized frames.
const POOL: usize = 512;
/// Request and response size.
const MESSAGE: usize = 64;

/// Requests and responses counted.
pub const RR: u64 = 1000;
/// Connections of the `rr_many` benchmarks, each with one request in flight at a time.
pub const MANY: usize = 100;
/// Passes of `rr_many` counted: in each, every one of the [`MANY`] connections carries one
/// request and its response.
pub const PASSES: u64 = 100;
/// Data segments counted in the bulk benchmarks.
pub const SEGMENTS: u64 = 2000;
/// Connections counted.
pub const CONNECTIONS: u64 = 200;
/// Set (to anything) in the reduced form: every `N` is divided by 10.
pub const QUICK: &str = "BYPASS_INSTRUCTIONS_QUICK";

/// Return `n`, or a tenth of it in the reduced form.
fn scaled(n: u64) -> u64 {
    if std::env::var_os(QUICK).is_some() { n / 10 } else { n }
}

/// Run `f` with Callgrind counting (the benchmarks' entry point: see `config`).
#[inline(never)]
fn measured<R>(f: impl FnOnce() -> R) -> R {
    black_box(f())
}

/// Which host's work a benchmark counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Nothing (warming up).
    Nothing,
    /// Everything, the link's work included.
    Both,
    /// The client's polls and its application.
    Client,
    /// The server's polls and its application.
    Server,
}

/// Whose work a step is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

impl Count {
    /// Run `f`, `side`'s work, counted if this counts that side alone. (Under
    /// [`Count::Both`] the whole run is inside [`measured`] already.)
    fn part<R>(self, side: Side, f: impl FnOnce() -> R) -> R {
        match (self, side) {
            (Count::Client, Side::Client) | (Count::Server, Side::Server) => measured(f),
            _ => f(),
        }
    }

    /// Run `f`, the whole of a benchmark, counted if this counts both ends.
    fn whole<R>(self, f: impl FnOnce() -> R) -> R {
        if self == Count::Both { measured(f) } else { f() }
    }
}

/// A client and a server host on one link, one clock, and the application's buffers.
pub struct Net<H: Host> {
    client: H,
    server: H,
    now: Instant,
    /// The client's next local port.
    next_port: u16,
    buf: Vec<u8>,
    request: [u8; MESSAGE],
    /// Units of work the benchmark runs.
    n: u64,
}

impl<H: Host> Net<H> {
    /// Return two hosts on a new link, the server listening.
    fn new(n: u64) -> Self {
        let (a, b) = wire::link(bypass_device::MAC_A, bypass_device::MAC_B, POOL);
        let mut net = Net {
            client: H::new(a, A),
            server: H::new(b, B),
            now: Instant::ZERO,
            next_port: 40_000,
            buf: vec![0; 64 * 1024],
            request: [0x5a; MESSAGE],
            n,
        };
        net.server.listen(PORT);
        net
    }

    fn tick(&mut self) {
        self.now += TICK;
    }

    /// One round: the client polls, its frames cross, the server polls, its frames cross.
    fn round(&mut self, count: Count) {
        let now = self.now;
        count.part(Side::Client, || self.client.poll(now));
        carry(self.client.port(), self.server.port());
        count.part(Side::Server, || self.server.poll(now));
        carry(self.server.port(), self.client.port());
        self.tick();
    }

    /// Run rounds until `done`; panic after 1000 (the benchmark's driver is broken).
    fn until(&mut self, count: Count, mut done: impl FnMut(&mut Self) -> bool) {
        for _ in 0..1000 {
            if done(self) {
                return;
            }
            self.round(count);
        }
        panic!("no progress after 1000 rounds");
    }

    /// Open a connection and wait until both ends are established.
    fn connect(&mut self, count: Count) {
        let port = self.next_port;
        self.next_port += 1;
        count.part(Side::Client, || self.client.connect(port, SocketAddrV4::new(B, PORT)));
        self.until(count, |net| {
            count.part(Side::Client, || net.client.established())
                & count.part(Side::Server, || net.server.established())
        });
    }

    /// Close the connection from the client; the server closes when it reads the end of
    /// the stream; wait until both are done.
    fn disconnect(&mut self, count: Count) {
        count.part(Side::Client, || self.client.close());
        let mut server_closed = false;
        self.until(count, |net| {
            if !server_closed {
                server_closed = count.part(Side::Server, || {
                    let eof = net.server.recv(&mut net.buf) == Read::Eof;
                    if eof {
                        net.server.close();
                    }
                    eof
                });
            }
            server_closed
                && count.part(Side::Client, || net.client.finished())
                && count.part(Side::Server, || net.server.finished())
        });
    }

    /// Run `n` requests and responses on the open connection.
    fn request_response(&mut self, n: u64, count: Count) {
        for _ in 0..n {
            let now = self.now;
            count.part(Side::Client, || {
                assert_eq!(self.client.send(&self.request), MESSAGE);
                self.client.poll(now);
            });
            carry(self.client.port(), self.server.port());
            count.part(Side::Server, || {
                self.server.poll(now);
                let Read::Data(MESSAGE) = self.server.recv(&mut self.buf) else { panic!("no request") };
                assert_eq!(self.server.send(&self.buf[..MESSAGE]), MESSAGE);
                self.server.poll(now);
            });
            carry(self.server.port(), self.client.port());
            count.part(Side::Client, || {
                self.client.poll(now);
                let Read::Data(MESSAGE) = self.client.recv(&mut self.buf) else { panic!("no response") };
            });
            self.tick();
        }
    }

    /// Open `k` connections, one after another, as connections `0..k` of both hosts.
    fn connect_many(&mut self, k: usize, count: Count) {
        for i in 0..k {
            self.client.select(i);
            self.server.select(i);
            self.connect(count);
        }
    }

    /// Run `passes` passes over the `k` open connections: the client writes a request on
    /// every connection and polls; then, until every response is in, the server polls,
    /// echoes each request that has arrived and polls again, and the client polls and reads
    /// each response that has arrived (as the demo's server and clients do, all `k`
    /// requests in flight at once).
    fn request_response_many(&mut self, passes: u64, k: usize, count: Count) {
        let mut echoed = vec![false; k];
        let mut answered = vec![false; k];
        for _ in 0..passes {
            echoed.fill(false);
            answered.fill(false);
            let mut left = k;
            let now = self.now;
            count.part(Side::Client, || {
                for i in 0..k {
                    self.client.select(i);
                    assert_eq!(self.client.send(&self.request), MESSAGE);
                }
                self.client.poll(now);
            });
            for _ in 0..100 {
                carry(self.client.port(), self.server.port());
                let now = self.now;
                count.part(Side::Server, || {
                    self.server.poll(now);
                    for (i, echoed) in echoed.iter_mut().enumerate().filter(|(_, e)| !**e) {
                        self.server.select(i);
                        if let Read::Data(n) = self.server.recv(&mut self.buf) {
                            assert_eq!(n, MESSAGE, "a request in pieces");
                            assert_eq!(self.server.send(&self.buf[..MESSAGE]), MESSAGE);
                            *echoed = true;
                        }
                    }
                    self.server.poll(now);
                });
                carry(self.server.port(), self.client.port());
                count.part(Side::Client, || {
                    self.client.poll(now);
                    for (i, answered) in answered.iter_mut().enumerate().filter(|(_, a)| !**a) {
                        self.client.select(i);
                        if let Read::Data(n) = self.client.recv(&mut self.buf) {
                            assert_eq!(n, MESSAGE, "a response in pieces");
                            *answered = true;
                            left -= 1;
                        }
                    }
                });
                self.tick();
                if left == 0 {
                    break;
                }
            }
            assert_eq!(left, 0, "responses missing after 100 rounds");
        }
    }

    /// Stream from the client to the server until `segments` data segments have
    /// crossed; the client may send no more than that meanwhile.
    fn bulk(&mut self, segments: u64, count: Count) {
        self.client.port().budget = usize::try_from(segments).expect("a small count");
        let mut crossed = 0;
        for _ in 0..segments * 10 {
            let now = self.now;
            count.part(Side::Client, || {
                self.client.source();
                self.client.poll(now);
            });
            let (frames, data) = carry_data(self.client.port(), self.server.port());
            assert_eq!(frames, data, "the sender sent a frame without data");
            crossed += frames as u64;
            count.part(Side::Server, || {
                self.server.poll(now);
                self.server.sink();
            });
            carry(self.server.port(), self.client.port());
            self.tick();
            if crossed == segments && !self.server.port().has_rx() {
                self.client.port().budget = usize::MAX;
                return;
            }
        }
        panic!("{crossed} of {segments} segments crossed");
    }
}

/// Return a connected pair, warmed up by 100 requests and responses.
fn rr_setup<H: Host>(count: Count) -> (Net<H>, Count) {
    let mut net = Net::new(scaled(RR));
    net.connect(Count::Nothing);
    net.request_response(100, Count::Nothing);
    (net, count)
}

/// Return [`MANY`] connected pairs, warmed up by 10 passes.
fn rr_many_setup<H: Host>(count: Count) -> (Net<H>, Count) {
    let mut net = Net::new(scaled(PASSES));
    net.connect_many(MANY, Count::Nothing);
    net.request_response_many(10, MANY, Count::Nothing);
    (net, count)
}

/// Return a connected pair past slow start, its window full (8 MiB streamed).
fn bulk_setup<H: Host>(count: Count) -> (Net<H>, Count) {
    let mut net = Net::new(scaled(SEGMENTS));
    net.connect(Count::Nothing);
    net.bulk(6000, Count::Nothing);
    (net, count)
}

/// Return a pair with the server listening, warmed up by two connections.
fn connection_setup<H: Host>(count: Count) -> (Net<H>, Count) {
    let mut net = Net::new(scaled(CONNECTIONS));
    for _ in 0..2 {
        net.connect(Count::Nothing);
        net.disconnect(Count::Nothing);
    }
    (net, count)
}

fn request_response<H: Host>(mut net: Net<H>, count: Count) -> Net<H> {
    let n = net.n;
    count.whole(|| net.request_response(n, count));
    net
}

fn request_response_many<H: Host>(mut net: Net<H>, count: Count) -> Net<H> {
    let n = net.n;
    count.whole(|| net.request_response_many(n, MANY, count));
    net
}

fn bulk<H: Host>(mut net: Net<H>, count: Count) -> Net<H> {
    let n = net.n;
    net.bulk(n, count);
    net
}

fn connection<H: Host>(mut net: Net<H>, count: Count) -> Net<H> {
    let n = net.n;
    count.whole(|| {
        for _ in 0..n {
            net.connect(count);
            net.disconnect(count);
        }
    });
    net
}

// The benchmarks: one function per stack, the counted side as its argument.

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = rr_setup::<Ours>)]
#[bench::client(args = (Count::Client), setup = rr_setup::<Ours>)]
#[bench::server(args = (Count::Server), setup = rr_setup::<Ours>)]
fn rr_ours((net, count): (Net<Ours>, Count)) -> Net<Ours> {
    request_response(net, count)
}

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = rr_setup::<Smol>)]
#[bench::client(args = (Count::Client), setup = rr_setup::<Smol>)]
#[bench::server(args = (Count::Server), setup = rr_setup::<Smol>)]
fn rr_smoltcp((net, count): (Net<Smol>, Count)) -> Net<Smol> {
    request_response(net, count)
}

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = rr_many_setup::<Ours>)]
#[bench::server(args = (Count::Server), setup = rr_many_setup::<Ours>)]
fn rr_many_ours((net, count): (Net<Ours>, Count)) -> Net<Ours> {
    request_response_many(net, count)
}

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = rr_many_setup::<Smol>)]
#[bench::server(args = (Count::Server), setup = rr_many_setup::<Smol>)]
fn rr_many_smoltcp((net, count): (Net<Smol>, Count)) -> Net<Smol> {
    request_response_many(net, count)
}

#[library_benchmark]
#[bench::receive(args = (Count::Server), setup = bulk_setup::<Ours>)]
#[bench::send(args = (Count::Client), setup = bulk_setup::<Ours>)]
fn bulk_ours((net, count): (Net<Ours>, Count)) -> Net<Ours> {
    bulk(net, count)
}

#[library_benchmark]
#[bench::receive(args = (Count::Server), setup = bulk_setup::<Smol>)]
#[bench::send(args = (Count::Client), setup = bulk_setup::<Smol>)]
fn bulk_smoltcp((net, count): (Net<Smol>, Count)) -> Net<Smol> {
    bulk(net, count)
}

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = connection_setup::<Ours>)]
#[bench::client(args = (Count::Client), setup = connection_setup::<Ours>)]
#[bench::server(args = (Count::Server), setup = connection_setup::<Ours>)]
fn connection_ours((net, count): (Net<Ours>, Count)) -> Net<Ours> {
    connection(net, count)
}

#[library_benchmark]
#[bench::both(args = (Count::Both), setup = connection_setup::<Smol>)]
#[bench::client(args = (Count::Client), setup = connection_setup::<Smol>)]
#[bench::server(args = (Count::Server), setup = connection_setup::<Smol>)]
fn connection_smoltcp((net, count): (Net<Smol>, Count)) -> Net<Smol> {
    connection(net, count)
}

library_benchmark_group!(name = request_response_group; benchmarks = rr_ours, rr_smoltcp);
library_benchmark_group!(name = many_group; benchmarks = rr_many_ours, rr_many_smoltcp);
library_benchmark_group!(name = bulk_group; benchmarks = bulk_ours, bulk_smoltcp);
library_benchmark_group!(name = connection_group; benchmarks = connection_ours, connection_smoltcp);

/// Count [`measured`] alone, and let the reduced form's switch through to the benchmarks.
fn config() -> LibraryBenchmarkConfig {
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(Callgrind::default().entry_point(EntryPoint::Custom("*::measured*".into()))).pass_through_env(QUICK);
    config
}

/// gungraun's own `main`, in a module so that ours can run first.
mod harness {
    use super::*;

    gungraun::main!(
        config = config();
        library_benchmark_groups = request_response_group, many_group, bulk_group, connection_group
    );

    /// Run gungraun's `main`.
    pub fn run() {
        main();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--bench" || a == "--gungraun-run") {
        // `cargo bench`, or gungraun's runner running one benchmark.
        harness::run();
    } else {
        // `cargo test`: the reduced form.
        report::reduced();
    }
}
