//! A SYN flood against `bypass echo` over AF_XDP, with the SYN shield of its XDP program
//! (`--syn-rate`): raw SYNs from the peer namespace, from a spoofed address and random source
//! ports, at a paced rate above the shield's, while established connections echo and a
//! legitimate kernel client connects.
//!
//! What it proves:
//! - the shield sheds SYNs beyond its bucket and counts them (`device.syn_shed`, in `bypass
//!   stat` during the flood and in the counters at exit), about as many as the bucket's rate
//!   and burst imply, and never more than were sent;
//! - connections established before the flood keep echoing byte-exact during it;
//! - the SYNs let through meet the SYN cookies (`syn_cookies_sent`), and a kernel client still
//!   connects and echoes during the flood: its SYN passes when a token is free;
//! - without `--syn-rate`, nothing is shed;
//! - with `--xdp-syn-cookies`, the XDP program answers the SYNs beyond the shield's rate with
//!   the stack's SYN cookies (`device.syn_cookies_xdp`), and new clients connect at their
//!   first SYN during the flood, the stack rebuilding their connections from those cookies;
//! - with `--syn-lane`, the SYNs arrive through the SYN lane, a receive ring of their own
//!   (`device.syn_lane` taken and `device.syn_lane_full` dropped there account for the
//!   flood), established connections keep echoing and a new client connects; with the
//!   shield too, the lane takes only what the shield lets through.
//!
//! It prints the fill-ring drops (`device.rx_fill_ring_empty`) of both runs, for
//! docs/performance.md; `BYPASS_SYN_FLOOD_RATE` and `BYPASS_SYN_FLOOD_RING` change the flood's
//! rate and the server's receive ring, to measure.
//!
//! Needs root: without it the test says why it skips, except under `CI=true`, where it fails.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use bypass_io::xdp::PassProgram;
use bypass_lab::syn_flood::{FloodConfig, SynFlood};
use bypass_lab::testlab::{Lab, lab_available};
use common::{Backend, Counters, EchoServer};

/// SYNs per second the flood sends (`BYPASS_SYN_FLOOD_RATE` overrides it, to measure).
const FLOOD_RATE: u64 = 40_000;

fn flood_rate() -> u64 {
    std::env::var("BYPASS_SYN_FLOOD_RATE").ok().and_then(|v| v.parse().ok()).unwrap_or(FLOOD_RATE)
}

/// The servers' receive ring (`--rx-ring`; `BYPASS_SYN_FLOOD_RING` overrides it, to measure).
fn rx_ring() -> String {
    std::env::var("BYPASS_SYN_FLOOD_RING").unwrap_or_else(|_| "4096".into())
}
/// The shield's rate, SYNs per second (a quarter of the flood's), and its burst.
const SHIELD_RATE: u64 = 10_000;
const SHIELD_BURST: u64 = 1_000;
/// How long the established connections echo under the flood, at least.
const FLOOD_TIME: Duration = Duration::from_secs(3);
/// Connections established before the flood, echoing during it.
const ESTABLISHED: usize = 16;

/// Sum the counters whose names end with `name` (the device's are `device.<name>`).
fn counter(c: &Counters, name: &str) -> u64 {
    c.0.iter().filter(|(k, _)| k.ends_with(name)).map(|(_, v)| v).sum()
}

/// Flood the server from a spoofed address of the lab's subnet that nobody holds, from
/// random source ports, paced at [`flood_rate`] ([`bypass_lab::syn_flood`]).
fn flood(lab: &Lab, seed: u64) -> SynFlood {
    let config = FloodConfig {
        rate: Some(flood_rate()),
        seed,
        ..FloodConfig::new(lab, lab.bypass_ip, common::server_addr(lab).port())
    };
    SynFlood::start(lab, config).expect("start the SYN flood")
}

/// Connect from the peer namespace, retrying with a short timeout: under a flood a SYN passes
/// the shield when it finds a token, and the kernel's own retransmission waits a second.
fn connect_during_flood(lab: &Lab) -> Option<(TcpStream, u32)> {
    let addr = common::server_addr(lab);
    lab.in_peer(|| {
        (1..=100).find_map(|attempt| {
            TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok().map(|s| (s, attempt))
        })
    })
}

/// What one run under the flood saw.
struct Outcome {
    counters: Counters,
    /// SYNs the flood sent, and for how long.
    sent: u64,
    lasted: Duration,
    /// Echo rounds over all established connections completed, and the attempts the new
    /// client took; or the first failure.
    result: Result<(u64, u32), String>,
    /// What `bypass stat` printed during the flood.
    stat: String,
}

/// A temporary run directory for the server's control endpoint, removed on drop.
struct RunDir(std::path::PathBuf);

impl RunDir {
    fn new(name: &str) -> RunDir {
        let dir = std::env::temp_dir().join(format!("bypass-syn-flood-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a run directory");
        RunDir(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Return what `bypass stat PID` prints, with the server's run directory `dir`.
fn stat(dir: &RunDir, pid: u32) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["stat", &pid.to_string()])
        .env("BYPASS_RUN_DIR", &dir.0)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run bypass stat");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Return the value of counter `name` in `bypass stat`'s text (columns: name, value).
fn stat_value(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some(name)).then(|| words.next()?.parse().ok()).flatten()
    })
}

/// Run the flood against a server started with `extra`, with established connections echoing
/// and a new client connecting meanwhile.
fn run(lab: &Lab, extra: &[&str], seed: u64) -> Outcome {
    let ring = rx_ring();
    let args: Vec<&str> = ["--rx-ring", ring.as_str()].into_iter().chain(extra.iter().copied()).collect();
    let dir = RunDir::new(&seed.to_string());
    let dir_str = dir.0.to_str().expect("a UTF-8 temporary directory");
    let server = EchoServer::start_with_env(lab, Backend::Xdp, &args, &[("BYPASS_RUN_DIR", dir_str)]);
    let addr = common::server_addr(lab);
    let established = common::peer_connect_many(lab, addr, ESTABLISHED);
    let (sent, lasted, result, stat) = {
        let flooder = flood(lab, seed);
        let result = (|| {
            let started = Instant::now();
            std::thread::sleep(Duration::from_millis(500)); // the flood under way
            // Echo rounds for [`FLOOD_TIME`] (at least five).
            let mut rounds = 0;
            while rounds < 5 || started.elapsed() < FLOOD_TIME {
                for (i, stream) in established.iter().enumerate() {
                    let data = common::data(seed + rounds * 100 + i as u64, 4096);
                    common::echo_with_reader(stream, &data, Duration::from_secs(10))
                        .map_err(|e| format!("established connection {i}, round {rounds}, during the flood: {e}"))?;
                }
                rounds += 1;
            }
            let (client, attempts) =
                connect_during_flood(lab).ok_or("no kernel client connected during the flood in 100 attempts")?;
            common::echo_with_reader(&client, &common::data(seed + 7, 4096), Duration::from_secs(10))
                .map_err(|e| format!("the new client during the flood: {e}"))?;
            Ok((rounds, attempts))
        })();
        let stat = stat(&dir, server.pid()); // still during the flood
        let report = flooder.stop().expect("the SYN flood");
        (report.sent, report.elapsed, result, stat)
    };
    drop(established);
    let finished = server.stop();
    Outcome { counters: finished.counters, sent, lasted, result, stat }
}

/// Print what a run saw.
fn report(what: &str, o: &Outcome) {
    let c = &o.counters;
    println!(
        "{what}: {} SYNs in {:.1?}; echo rounds and new client's attempts {:?}; syn_shed {}, syn_lane {}, syn_lane_full {}, rx_fill_ring_empty {}, rx_dropped {}, syn_cookies_sent {}",
        o.sent,
        o.lasted,
        o.result,
        counter(c, "syn_shed"),
        counter(c, "syn_lane"),
        counter(c, "syn_lane_full"),
        counter(c, "rx_fill_ring_empty"),
        counter(c, "rx_dropped"),
        counter(c, "syn_cookies_sent"),
    );
}

#[test]
fn syn_flood_is_shed_while_connections_echo_and_clients_connect() {
    let test = "syn_flood";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);

    // The same flood against a server without a shield, for the figures: it must shed nothing;
    // whether it keeps echoing depends on the flood's rate.
    let plain = run(&lab, &[], 1);
    report("no shield", &plain);
    assert_eq!(counter(&plain.counters, "syn_shed"), 0, "without --syn-rate nothing is shed: {}", plain.counters);

    let (rate, burst) = (SHIELD_RATE.to_string(), SHIELD_BURST.to_string());
    let shielded = run(&lab, &["--syn-rate", &rate, "--syn-burst", &burst], 2);
    report(&format!("shield {SHIELD_RATE}/s, burst {SHIELD_BURST}"), &shielded);
    let Outcome { counters: c, sent, lasted, result, stat } = shielded;
    let during = stat_value(&stat, "device.syn_shed");
    assert!(during.is_some_and(|n| n > 0), "bypass stat shows SYNs shed during the flood: {stat}");
    let (_, attempts) = result.unwrap_or_else(|e| panic!("with the shield: {e}"));
    let shed = counter(&c, "syn_shed");
    assert!(c.0.keys().any(|k| k.ends_with("syn_shed")), "the shielded server reports syn_shed: {c}");
    // The new client's SYNs may be shed too, one per attempt.
    assert!(shed <= sent + u64::from(attempts), "{shed} SYNs shed of {sent} sent: {c}");
    // The bucket lets through at most its burst and its rate over the flood (with a margin
    // for the time the server ran before and after); the rest of the flood is shed.
    let admitted_at_most = SHIELD_BURST + (SHIELD_RATE as f64 * (lasted.as_secs_f64() + 1.0) * 1.1) as u64;
    assert!(
        shed + admitted_at_most >= sent,
        "only {shed} of {sent} SYNs shed; the bucket admits at most {admitted_at_most}: {c}"
    );
    // The SYNs let through filled the SYN queue; the rest, the new client's among them,
    // were answered with SYN cookies.
    assert!(counter(&c, "syn_cookies_sent") > 0, "the SYNs let through meet the SYN cookies: {c}");
    assert!(shed > 0, "a flood at {}/s against {SHIELD_RATE}/s sheds SYNs: {c}", flood_rate());
}

#[test]
fn syn_flood_through_the_syn_lane_leaves_established_connections_their_ring() {
    let test = "syn_lane";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);

    // Every bare SYN goes to the lane: the flood's, and the new client's.
    let laned = run(&lab, &["--syn-lane", "256"], 3);
    report("SYN lane", &laned);
    let Outcome { counters: c, sent, result, stat, .. } = laned;
    let during = stat_value(&stat, "device.syn_lane");
    assert!(during.is_some_and(|n| n > 0), "bypass stat shows SYNs taken from the lane during the flood: {stat}");
    result.unwrap_or_else(|e| panic!("with the SYN lane: {e}"));
    let (taken, full) = (counter(&c, "syn_lane"), counter(&c, "syn_lane_full"));
    // The veth may drop a few of a burst before the program sees them; the rest reached the lane.
    assert!(
        10 * (taken + full) >= 9 * sent,
        "{taken} SYNs taken from the lane and {full} dropped there, of {sent} sent: {c}"
    );
    assert_eq!(counter(&c, "syn_shed"), 0, "no shield, nothing shed: {c}");
    assert!(counter(&c, "syn_cookies_sent") > 0, "the lane's SYNs meet the SYN cookies: {c}");

    // With the shield in front, the lane takes what the bucket lets through.
    let (rate, burst) = (SHIELD_RATE.to_string(), SHIELD_BURST.to_string());
    let both = run(&lab, &["--syn-rate", &rate, "--syn-burst", &burst, "--syn-lane", "256"], 4);
    report(&format!("shield {SHIELD_RATE}/s, burst {SHIELD_BURST}, and the SYN lane"), &both);
    let Outcome { counters: c, lasted, result, .. } = both;
    let (_, attempts) = result.unwrap_or_else(|e| panic!("with the shield and the SYN lane: {e}"));
    let (shed, taken, full) = (counter(&c, "syn_shed"), counter(&c, "syn_lane"), counter(&c, "syn_lane_full"));
    assert!(shed > 0, "a flood at {}/s against {SHIELD_RATE}/s sheds SYNs: {c}", flood_rate());
    let admitted_at_most = SHIELD_BURST + (SHIELD_RATE as f64 * (lasted.as_secs_f64() + 1.0) * 1.1) as u64;
    assert!(
        taken > 0 && taken + full <= admitted_at_most + u64::from(attempts),
        "the lane takes what the shield admits: {taken} taken, {full} dropped, at most {admitted_at_most} admitted: {c}"
    );
}

#[test]
fn syn_flood_beyond_the_shield_is_answered_in_xdp_and_clients_connect_at_once() {
    let test = "syn_xdpc";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    // A shield of one SYN a second: almost every SYN, the clients' too, is the program's to
    // answer, so the connections the stack rebuilds from cookies are the program's cookies.
    let args = ["--rx-ring", "4096", "--syn-rate", "1", "--syn-burst", "1", "--xdp-syn-cookies"];
    // The peer's end of the veth takes the program's answers only with an XDP program of its
    // own (see `PassProgram`); this one drops the answers to the flood's spoofed address, as
    // the network beyond a real NIC would.
    let _peer_xdp = lab
        .in_peer(|| PassProgram::attach_dropping_others(&lab.peer_if, lab.peer_ip))
        .expect("a pass program on the peer's veth");
    let started = Instant::now();
    let server = EchoServer::start(&lab, Backend::Xdp, &args);
    let addr = common::server_addr(&lab);
    let established = common::peer_connect_many(&lab, addr, ESTABLISHED);
    let flooder = flood(&lab, 5);
    std::thread::sleep(Duration::from_millis(500)); // the flood under way, the bucket empty
    for (i, stream) in established.iter().enumerate() {
        common::echo_with_reader(stream, &common::data(50 + i as u64, 4096), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("established connection {i} during the flood: {e}"));
    }
    // Clients connecting now: without the program's answers their SYNs would be shed, all
    // but one a second. The answers to the flood share the peer's receive ring, so a client's
    // answer can be lost: each client has until just after its first retransmission.
    const CLIENTS: u64 = 10;
    let mut at_once = 0;
    for i in 0..CLIENTS {
        let started = Instant::now();
        let client = lab
            .in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_millis(1_500)))
            .unwrap_or_else(|e| panic!("new client {i} during the flood, by its second SYN: {e}"));
        at_once += u64::from(started.elapsed() < Duration::from_millis(500));
        common::echo_with_reader(&client, &common::data(70 + i, 4096), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("new client {i} during the flood: {e}"));
    }
    let report = flooder.stop().expect("the SYN flood");
    drop(established);
    let c = server.stop().counters;
    // The SYNs the bucket let through while the server ran: its burst and one a second.
    let admitted_at_most = 2 + started.elapsed().as_secs();
    let (shed, answered) = (counter(&c, "syn_shed"), counter(&c, "syn_cookies_xdp"));
    println!(
        "XDP cookies beyond 1 SYN/s: {} SYNs in {:.1?}; {at_once} of {CLIENTS} clients connected at their first SYN; syn_shed {shed}, syn_cookies_xdp {answered}, syn_cookies_accepted {}, rx_fill_ring_empty {}",
        report.sent,
        report.elapsed,
        counter(&c, "syn_cookies_accepted"),
        counter(&c, "rx_fill_ring_empty"),
    );
    assert!(answered > 0 && answered == shed, "every SYN beyond the bucket answered in XDP: {c}");
    let accepted = counter(&c, "syn_cookies_accepted");
    assert!(
        accepted + admitted_at_most >= CLIENTS,
        "the stack rebuilt {accepted} connections from cookies; at most {admitted_at_most} SYNs reached it: {c}"
    );
    assert!(at_once + 2 >= CLIENTS, "only {at_once} of {CLIENTS} clients connected at their first SYN: {c}");
}

#[test]
fn the_xdp_programs_cookie_codec_is_the_stacks() {
    // The program's cookie (bypass_io::xdp::cookie) must be bit for bit the stack's: same
    // MSS table, same period; the MAC's layout is checked against SipHash in the io crate's
    // tests, and end to end above.
    assert_eq!(bypass_io::xdp::COOKIE_MSS, bypass_stack::SYN_COOKIE_MSS);
    assert_eq!(bypass_io::xdp::COOKIE_PERIOD_NS, bypass_stack::SYN_COOKIE_PERIOD_SECS * 1_000_000_000);
}
