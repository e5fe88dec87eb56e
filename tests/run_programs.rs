//! Programs nobody here wrote, run unmodified under `bypass run` (src/run.rs, which preloads
//! crates/preload): their TCP sockets are served by our stack over AF_XDP on the lab's `bx0`,
//! and ordinary kernel clients in the peer's namespace talk to them. Python's `socket` module
//! and asyncio, curl as a client (active opens from our stack), nginx, redis and iperf3, over
//! IPv4 and IPv6; every byte that a test can check is checked. And what `bypass run` refuses
//! before the program starts: no interface, no program, not root, a statically linked program
//! (and a Go program, where one is installed).
//!
//! Every program runs under a guard that kills and reaps it on every exit path; the tests that
//! stop one the normal way (SIGTERM) also check that it did not crash and that no XDP program
//! is left on `bx0` once it is gone. Servers are ready when a kernel client in the peer's
//! namespace can connect to them, never after a fixed sleep.
//!
//! Needs root, and `python3`, `curl`, `nginx` (Debian's nginx-light), `redis-server`,
//! `redis-benchmark` and `redis-cli` (redis-server, redis-tools), `iperf3`, `wrk` and
//! `setpriv` (util-linux) on `PATH` (`.ci/run` installs them): without them each test says why
//! it skips, except under `CI=true`, where it fails. Tests hold their lab with the test
//! binary's lock (`common::serial`), so they run one at a time.
//!
//! The preloaded library is not a dependency of this test, so a run that selects targets
//! (`cargo test --test run_programs`) would not build it: the test first runs `cargo build -p
//! bypass-preload` with the cargo that runs it, into the same target directory and profile
//! (`<target>/<profile>/libbypass_preload.so`, beside `bypass`; `bypass run` takes the newer of
//! that one and the one in `deps/`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bypass_lab::testlab::{Lab, LabConfig, lab_available};

/// The `bypass` executable under test.
const BYPASS: &str = env!("CARGO_BIN_EXE_bypass");
/// How long a server may take to accept connections once started.
const READY: Duration = Duration::from_secs(10);
/// How long any one client command may run.
const CLIENT: Duration = Duration::from_secs(30);
/// The size of the files served and fetched whole.
const FILE_LEN: usize = 64 << 20;

// ---------------------------------------------------------------------------------------------
// Python
// ---------------------------------------------------------------------------------------------

/// An echo server with Python's `socket` module: an IPv4 listener and an IPv6-only one on
/// port 7, a thread accepting on each and a thread per connection (blocking `recv` and
/// `sendall`, close at EOF).
const SOCKET_ECHO: &str = r#"
import socket, threading

def serve(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)

def listen(family, host):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, 7))
    s.listen(64)
    return s

def accept(s):
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()

v4, v6 = listen(socket.AF_INET, "0.0.0.0"), listen(socket.AF_INET6, "::")
threading.Thread(target=accept, args=(v6,), daemon=True).start()
print("echo on", v4.getsockname(), v6.getsockname(), flush=True)
accept(v4)
"#;

/// A Python `socket` echo server (an IPv4 and an IPv6 listener, a thread per connection)
/// echoes 8 MiB byte-exact on each of 4 concurrent kernel connections over IPv4, then on 4
/// over IPv6; each connection is half-closed by the client and closed by the server.
#[test]
fn python_socket_echo() {
    let Some(lab) = setup("py_socket", &[PYTHON3]) else { return };
    let mut server = Program::under_bypass(&lab, "python3 socket echo", &["python3", "-u", "-c", SOCKET_ECHO]);
    server.wait_ready(&lab, &[lab.v4(7), lab.v6(7)]);
    for (seed, addr) in [(1, lab.v4(7)), (2, lab.v6(7))] {
        let start = Instant::now();
        let streams = common::peer_connect_many(&lab, addr, 4);
        common::echo_many(streams, 8 << 20, seed, 2, CLIENT)
            .unwrap_or_else(|e| panic!("python3 socket echo at {addr}: {e}\n{}", server.output()));
        eprintln!("python3 socket echo at {addr}: 4 x 8 MiB byte-exact in {:?}", start.elapsed());
    }
    server.stop();
}

/// A program under `bypass run` has a control endpoint like `bypass echo` (issue 30):
/// `bypass ss` lists its stack's connection to a kernel client, established, and its
/// listeners; `bypass stat` counts what the client sent, and the segments whose checksums the
/// kernel completed (AF_XDP TX metadata, on by default as in `bypass echo`). The program dies of SIGTERM (Python's
/// default), which runs no destructor: its endpoint is left behind, and the next `bypass ss`
/// recognises it as stale, says so in one sentence and removes it.
#[test]
fn bypass_ss_sees_a_program_under_bypass_run() {
    let Some(lab) = setup("run_ss", &[PYTHON3]) else { return };
    let run_dir = TempDir::new("run-ss");
    let mut cmd = bypass_run(&lab, &["python3", "-u", "-c", SOCKET_ECHO]);
    cmd.env("BYPASS_RUN_DIR", &run_dir.0);
    let mut server = Program::spawn("python3 socket echo", cmd, Some((lab.bypass_ns.clone(), lab.bypass_if.clone())));
    server.wait_ready(&lab, &[lab.v4(7)]);
    let pid = server.child.as_ref().expect("running").id();
    let client = lab.in_peer(|| TcpStream::connect_timeout(&lab.v4(7), Duration::from_secs(5))).expect("connect");
    common::echo_with_reader(&client, &common::data(3, 10_000), CLIENT).expect("echo");
    let ss =
        |args: &[&str]| Command::new(BYPASS).args(args).env("BYPASS_RUN_DIR", &run_dir.0).output().expect("run bypass");
    let out = ss(&["ss", &pid.to_string(), "--json", "-a"]);
    assert!(out.status.success(), "bypass ss: {}", String::from_utf8_lossy(&out.stderr));
    let docs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let docs = docs.as_array().expect("an array");
    assert!(!docs.is_empty(), "the program's stacks answer");
    let peer = client.local_addr().unwrap().to_string();
    let conns: Vec<&serde_json::Value> =
        docs.iter().flat_map(|d| d["connections"].as_array().unwrap()).filter(|c| c["peer"] == peer.as_str()).collect();
    assert_eq!(conns.len(), 1, "the client's connection, once: {docs:?}");
    assert_eq!(conns[0]["state"], "ESTAB");
    assert_eq!(conns[0]["bytes_received"], 10_000);
    assert!(docs.iter().any(|d| d["listeners"].as_array().unwrap().iter().any(|l| l["port"] == 7)), "{docs:?}");
    let out = ss(&["stat", &pid.to_string(), "--json"]);
    let bytes_in: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["total"]["tcp.bytes_in"].as_u64().unwrap())
        .sum();
    assert_eq!(bytes_in, 10_000, "stat counts what the client sent");
    // As `bypass echo`, the program's stack leaves its TCP checksums to the kernel where AF_XDP
    // TX metadata lets it (Linux 6.11 and later; this lab's kernel has it).
    let out = ss(&["stat", &pid.to_string(), "--json"]);
    let offloaded: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["total"]["device.tx_checksum_offloaded"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert!(offloaded > 0, "the kernel completes the checksums of what the program's stack sends");
    drop(client);
    server.stop();
    let out = ss(&["ss", &pid.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("is not a running bypass stack") && err.trim_end().lines().count() == 1, "{err}");
    let left: Vec<_> = std::fs::read_dir(&run_dir.0).unwrap().collect();
    assert!(left.is_empty(), "stale endpoints removed: {left:?}");
}

/// `bypass run` takes the SYN defenses of `bypass echo` (`--syn-rate`, `--syn-burst`,
/// `--xdp-syn-cookies`): a Python echo server behind a shield of one SYN a second, with the
/// SYNs beyond it answered by the XDP program with its stacks' cookies, under a flood of raw
/// SYNs from a spoofed address. Established connections keep echoing, ten new kernel clients
/// connect (each by its second SYN at the latest, nearly all at the first) and echo, and `bypass
/// stat` shows the program's answers (`device.syn_cookies_xdp`) and the connections the
/// program's stack rebuilt from them (`syn_cookies_accepted`): the cookies the XDP program
/// made are the ones the stack in the program checks, on the same clock.
#[test]
fn a_program_under_bypass_run_keeps_its_clients_through_a_syn_flood() {
    use bypass_io::xdp::PassProgram;
    use bypass_lab::syn_flood::{FloodConfig, SynFlood};
    let Some(lab) = setup("run_flood", &[PYTHON3]) else { return };
    // The peer's end of the veth takes the program's answers only with an XDP program of its
    // own; this one drops the answers to the flood's spoofed address (tests/syn_flood.rs).
    let _peer_xdp =
        lab.in_peer(|| PassProgram::attach_dropping_others(&lab.peer_if, lab.peer_ip)).expect("a program on the peer");
    let run_dir = TempDir::new("run-flood");
    let options = ["--syn-rate", "1", "--syn-burst", "1", "--xdp-syn-cookies"];
    let mut cmd = bypass_run_with(&lab, &options, &["python3", "-u", "-c", SOCKET_ECHO]);
    cmd.env("BYPASS_RUN_DIR", &run_dir.0);
    let started = Instant::now();
    let mut server = Program::spawn("python3 socket echo", cmd, Some((lab.bypass_ns.clone(), lab.bypass_if.clone())));
    // Ready once a client connects: with a shield of one SYN a second, through a cookie.
    server.wait_ready(&lab, &[lab.v4(7)]);
    let pid = server.child.as_ref().expect("running").id().to_string();
    let established = common::peer_connect_many(&lab, lab.v4(7), 4);
    let flood = FloodConfig { rate: Some(40_000), seed: 11, ..FloodConfig::new(&lab, lab.bypass_ip, 7) };
    let flooder = SynFlood::start(&lab, flood).expect("start the SYN flood");
    std::thread::sleep(Duration::from_millis(500)); // the flood under way, the bucket empty
    for (i, stream) in established.iter().enumerate() {
        common::echo_with_reader(stream, &common::data(20 + i as u64, 64 << 10), CLIENT)
            .unwrap_or_else(|e| panic!("established connection {i} during the flood: {e}\n{}", server.output()));
    }
    const CLIENTS: u64 = 10;
    let mut at_once = 0;
    for i in 0..CLIENTS {
        let started = Instant::now();
        let client = lab
            .in_peer(|| TcpStream::connect_timeout(&lab.v4(7), Duration::from_millis(1_500)))
            .unwrap_or_else(|e| panic!("new client {i} during the flood, by its second SYN: {e}"));
        at_once += u64::from(started.elapsed() < Duration::from_millis(500));
        common::echo_with_reader(&client, &common::data(40 + i, 4096), CLIENT)
            .unwrap_or_else(|e| panic!("new client {i} during the flood: {e}\n{}", server.output()));
    }
    let stat = Command::new(BYPASS)
        .args(["stat", &pid, "--json"])
        .env("BYPASS_RUN_DIR", &run_dir.0)
        .output()
        .expect("run bypass stat");
    let report = flooder.stop().expect("the SYN flood");
    let text = String::from_utf8_lossy(&stat.stdout);
    let total = |name: &str| -> u64 {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|doc| doc["total"][name].as_u64().unwrap_or(0))
            .sum()
    };
    let (answered, accepted) = (total("device.syn_cookies_xdp"), total("syn_cookies_accepted"));
    eprintln!(
        "bypass run under a flood of {} SYNs in {:.1?}: {at_once} of {CLIENTS} clients at their first SYN; device.syn_cookies_xdp {answered}, syn_cookies_accepted {accepted}",
        report.sent, report.elapsed
    );
    assert!(answered > 0, "the XDP program answered SYNs: {text}");
    // The bucket let through its burst and one SYN a second at most; the stack rebuilt the
    // other clients' connections (the established four and the new ten) from the cookies.
    let admitted_at_most = 2 + started.elapsed().as_secs();
    assert!(
        accepted + admitted_at_most >= CLIENTS + 4,
        "the program's stack rebuilt {accepted} connections from cookies; at most {admitted_at_most} SYNs reached it: {text}"
    );
    assert!(at_once + 2 >= CLIENTS, "only {at_once} of {CLIENTS} clients connected at their first SYN");
    drop(established);
    server.stop();
}

/// An asyncio echo server (`asyncio.start_server` on every address, which listens on one
/// socket per family; epoll underneath).
const ASYNCIO_ECHO: &str = r#"
import asyncio

async def echo(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()

async def main():
    server = await asyncio.start_server(echo, host=None, port=7, backlog=128)
    print("echo on", [s.getsockname() for s in server.sockets], flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"#;

/// An asyncio echo server echoes 1 MiB byte-exact to each of 20 concurrent kernel clients
/// over IPv4, then to 20 over IPv6.
#[test]
fn python_asyncio_echo() {
    let Some(lab) = setup("py_asyncio", &[PYTHON3]) else { return };
    let mut server = Program::under_bypass(&lab, "python3 asyncio echo", &["python3", "-u", "-c", ASYNCIO_ECHO]);
    server.wait_ready(&lab, &[lab.v4(7), lab.v6(7)]);
    for (seed, addr) in [(3, lab.v4(7)), (4, lab.v6(7))] {
        let start = Instant::now();
        let streams = common::peer_connect_many(&lab, addr, 20);
        common::echo_many(streams, 1 << 20, seed, 4, CLIENT)
            .unwrap_or_else(|e| panic!("python3 asyncio echo at {addr}: {e}\n{}", server.output()));
        eprintln!("python3 asyncio echo at {addr}: 20 x 1 MiB byte-exact in {:?}", start.elapsed());
    }
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// curl as a client
// ---------------------------------------------------------------------------------------------

/// curl under `bypass run` (our stack opens the connections) downloads a 64 MiB random file
/// from Python's `http.server` in the peer's kernel, byte-exact, over IPv4 and over IPv6.
#[test]
fn curl_client_downloads() {
    let Some(lab) = setup("curl_client", &[PYTHON3, CURL]) else { return };
    let dir = TempDir::new("curl-client");
    let file = common::data(5, FILE_LEN);
    std::fs::write(dir.join("file"), &file).expect("write the file to serve");
    let port = 8000;
    // `--bind ::` listens on both families (http.server's dual-stack server).
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let mut server = Program::in_peer(
        &lab,
        "python3 -m http.server",
        &["python3", "-m", "http.server", &port.to_string(), "--bind", "::", "--directory", dir_arg],
    );
    let (v4, v6) = (SocketAddr::from((lab.peer_ip, port)), SocketAddr::from((lab.peer_ip6, port)));
    server.wait_ready(&lab, &[v4, v6]);
    for (name, addr) in [("v4", v4), ("v6", v6)] {
        let out = dir.join(format!("out-{name}"));
        let url = format!("http://{addr}/file");
        let start = Instant::now();
        let program = ["curl", "-sS", "-g", "--max-time", "30", "-o", out.to_str().expect("UTF-8"), &url];
        run_ok(&mut bypass_run(&lab, &program), None);
        let got = std::fs::read(&out).expect("read what curl wrote");
        assert!(got == file, "curl under bypass run from {url}: {}", common::first_difference(&file, &got));
        eprintln!("curl under bypass run: 64 MiB from {url} byte-exact in {:?}", start.elapsed());
    }
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// nginx
// ---------------------------------------------------------------------------------------------

/// nginx in one process (`master_process off`: a forked worker could not use the stack of
/// the process that opened it), listening on port 80 of both families; DIR is its directory.
const NGINX_CONF: &str = "daemon off; master_process off; worker_processes 1;
error_log DIR/error.log warn; pid DIR/nginx.pid;
events { worker_connections 1024; }
http { access_log off; sendfile on;
  client_body_temp_path DIR/body; proxy_temp_path DIR/proxy; fastcgi_temp_path DIR/fastcgi;
  uwsgi_temp_path DIR/uwsgi; scgi_temp_path DIR/scgi;
  server { listen 80; listen [::]:80; root DIR/www; } }
";

/// nginx (`sendfile on`) under `bypass run`: curl in the peer fetches a 64 MiB random file
/// byte-exact over IPv4 and over IPv6, and `wrk -t1 -c100 -d3s` sees no socket error and no
/// non-2xx response; nginx exits 0 on SIGTERM and logs nothing at `crit` or worse.
#[test]
fn nginx_serves_files() {
    let Some(lab) = setup("nginx", &[NGINX, CURL, WRK]) else { return };
    let dir = TempDir::new("nginx");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path").to_string();
    std::fs::create_dir(dir.join("www")).expect("create www/");
    let file = common::data(6, FILE_LEN);
    std::fs::write(dir.join("www/file"), &file).expect("write the file to serve");
    std::fs::write(dir.join("www/index.html"), "<p>bypass run nginx</p>\n").expect("write index.html");
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, NGINX_CONF.replace("DIR", &dir_arg)).expect("write nginx.conf");
    let error_log = dir.join("error.log");
    let (conf, error_log) = (conf.to_str().expect("UTF-8"), error_log.to_str().expect("UTF-8"));
    // `-e`: the log before the configuration is read, instead of /var/log/nginx's.
    let mut server = Program::under_bypass(&lab, "nginx", &["nginx", "-p", &dir_arg, "-c", conf, "-e", error_log]);
    server.wait_ready(&lab, &[lab.v4(80), lab.v6(80)]);

    for addr in [lab.v4(80), lab.v6(80)] {
        let url = format!("http://{addr}/file");
        let start = Instant::now();
        let out = run_ok(lab.peer_cmd("curl").args(["-sS", "-g", "--max-time", "30", "-o", "-", &url]), None);
        assert!(out.stdout == file, "curl {url} from nginx: {}", common::first_difference(&file, &out.stdout));
        eprintln!("nginx: 64 MiB from {url} byte-exact in {:?}", start.elapsed());
    }

    let url = format!("http://{}/", lab.v4(80));
    let out = run_ok(lab.peer_cmd("wrk").args(["-t1", "-c100", "-d3s", "--timeout", "5s", &url]), None);
    let report = String::from_utf8_lossy(&out.stdout);
    let requests: u64 = report
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or_else(|| panic!("no request count from wrk:\n{report}"));
    assert!(requests > 0, "wrk made no request:\n{report}");
    assert!(!report.contains("Socket errors"), "wrk saw socket errors from nginx:\n{report}");
    assert!(!report.contains("Non-2xx"), "wrk saw non-2xx responses from nginx:\n{report}");
    eprintln!("nginx: wrk -t1 -c100 -d3s made {requests} requests, no error");

    let status = server.stop();
    assert!(status.success(), "nginx exited with {status} on SIGTERM");
    let log = std::fs::read_to_string(error_log).unwrap_or_default();
    let serious: Vec<&str> =
        log.lines().filter(|l| ["[crit]", "[alert]", "[emerg]"].iter().any(|level| l.contains(level))).collect();
    assert!(serious.is_empty(), "nginx logged:\n{}", serious.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// redis
// ---------------------------------------------------------------------------------------------

/// redis-server under `bypass run`: `redis-benchmark -t get,set -c 50 -n 100000` from the
/// peer completes both tests; values set with `redis-cli` over one family read back over the
/// other (a word, and 1 MiB of random bytes); redis exits 0 on SIGTERM.
#[test]
fn redis_benchmark_and_cli() {
    let Some(lab) = setup("redis", &[REDIS_SERVER, REDIS_BENCHMARK, REDIS_CLI]) else { return };
    let dir = TempDir::new("redis");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let program = [
        "redis-server",
        "--port",
        "6379",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--dir",
        dir_arg,
    ];
    let mut server = Program::under_bypass(&lab, "redis-server", &program);
    server.wait_ready(&lab, &[lab.v4(6379), lab.v6(6379)]);
    let (v4, v6) = (lab.bypass_ip.to_string(), lab.bypass_ip6.to_string());

    let start = Instant::now();
    let bench = ["-h", &v4, "-p", "6379", "-t", "get,set", "-c", "50", "-n", "100000", "--csv"];
    let out = run_ok(lab.peer_cmd("redis-benchmark").args(bench), None);
    let csv = String::from_utf8_lossy(&out.stdout);
    for test in ["SET", "GET"] {
        let rate: f64 = csv
            .lines()
            .find_map(|l| l.strip_prefix(&format!("\"{test}\",\"")))
            .and_then(|rest| rest.split('"').next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("redis-benchmark reported no {test}:\n{csv}"));
        assert!(rate > 0.0, "redis-benchmark {test} at {rate} requests/s:\n{csv}");
        eprintln!("redis-benchmark -c 50 -n 100000: {test} {rate:.0} requests/s");
    }
    eprintln!("redis-benchmark took {:?}", start.elapsed());

    let cli = |host: &str, args: &[&str], input: Option<&[u8]>| -> Vec<u8> {
        run_ok(lab.peer_cmd("redis-cli").args(["-h", host, "-p", "6379"]).args(args), input).stdout
    };
    assert_eq!(cli(&v4, &["set", "k4", "hello"], None), b"OK\n");
    assert_eq!(cli(&v6, &["get", "k4"], None), b"hello\n");
    assert_eq!(cli(&v6, &["set", "k6", "world"], None), b"OK\n");
    assert_eq!(cli(&v4, &["get", "k6"], None), b"world\n");
    // `-x`: the last argument is standard input, as it is; `--raw` prints the value as it is.
    let big = common::data(7, 1 << 20);
    assert_eq!(cli(&v6, &["-x", "set", "big"], Some(&big)), b"OK\n");
    let got = cli(&v4, &["--raw", "get", "big"], None);
    let got = got.strip_suffix(b"\n").unwrap_or(&got);
    assert!(got == big, "1 MiB through redis: {}", common::first_difference(&big, got));

    let status = server.stop();
    assert!(status.success(), "redis-server exited with {status} on SIGTERM");
}

// ---------------------------------------------------------------------------------------------
// iperf3
// ---------------------------------------------------------------------------------------------

/// `iperf3 -s` under `bypass run`: the peer's `iperf3 -c -t 3` to it over IPv4, `-R` (it
/// sends), and `-P 4` over IPv6 (four streams at once) all complete, and in each the bytes
/// received are at most those sent and short of them by no more than can be in flight when
/// the test ends: written by the sender but not yet read by the receiver, so at most, per
/// stream, the sender's largest send buffer and the receiver's largest receive buffer (the
/// kernel's `tcp_wmem`/`tcp_rmem` maximum on its side, 16 MiB each on ours).
#[test]
fn iperf3_streams() {
    let Some(lab) = setup("iperf3", &[IPERF3]) else { return };
    // Not `-1` (one test, then exit): the readiness probe's bare connection would be that test.
    let mut server = Program::under_bypass(&lab, "iperf3 -s", &["iperf3", "-s", "-p", "5201"]);
    server.wait_ready(&lab, &[lab.v4(5201), lab.v6(5201)]);
    let (v4, v6) = (lab.bypass_ip.to_string(), lab.bypass_ip6.to_string());
    for (what, host, extra) in [("to it", &v4, None), ("from it (-R)", &v4, Some("-R")), ("-P 4", &v6, Some("-P4"))] {
        let mut cmd = lab.peer_cmd("iperf3");
        cmd.args(["-c", host, "-p", "5201", "-t", "3", "-J"]).args(extra);
        let out = run_client(&mut cmd, None);
        let json = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "iperf3 {what} at {host}: {}\n{json}\n{}", out.status, out.stderr);
        let bytes = |sum: &str| {
            json_bytes(&json, sum).unwrap_or_else(|| panic!("iperf3 {what}: no end.{sum}.bytes in\n{json}"))
        };
        let (sent, received) = (bytes("sum_sent"), bytes("sum_received"));
        let ours = bypass_tcp::Config::default();
        let (kernel_send, kernel_recv) = (kernel_buffer_max("tcp_wmem"), kernel_buffer_max("tcp_rmem"));
        let per_stream = match extra {
            Some("-R") => ours.send_buffer_max + kernel_recv,
            _ => kernel_send + ours.recv_buffer_max,
        };
        let slack = if extra == Some("-P4") { 4 } else { 1 } * per_stream as u64;
        assert!(received > 0, "iperf3 {what} at {host}: nothing received\n{json}");
        assert!(
            received <= sent && sent - received <= slack,
            "iperf3 {what} at {host}: {sent} bytes sent, {received} received"
        );
        eprintln!(
            "iperf3 {what} at {host}: {sent} bytes sent, {received} received ({} Mbit/s)",
            received * 8 / 3_000_000
        );
    }
    server.stop();
}

/// Return the largest buffer of the kernel's `net.ipv4.<name>` (`tcp_wmem` or `tcp_rmem`:
/// min, default, max), 6 MiB if unreadable (the larger of the two defaults).
fn kernel_buffer_max(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(6 << 20)
}

/// A program whose SIGTERM handler calls `exit(3)` (iperf3's does) exits at once under
/// `bypass run --busy-poll`, whether the signal finds it polling an idle stack or sending to
/// a client, and its exit handlers remove its control endpoint. Busy-polling, the program's
/// thread holds the stack's lock most of the time: a handler run on top of it, whose exit
/// handlers stop the stack and so take that lock, hung the process (the handler is deferred
/// until the thread lets go of the lock: crates/preload/src/signals.rs).
#[test]
fn a_handler_that_exits_ends_a_busy_polling_program() {
    let Some(lab) = setup("run_exit", &[IPERF3]) else { return };
    for sending in [false, true] {
        let run_dir = TempDir::new("run-exit");
        let mut cmd = bypass_run_with(&lab, &["--busy-poll"], &["iperf3", "-s", "-p", "5201"]);
        cmd.env("BYPASS_RUN_DIR", &run_dir.0);
        let mut server =
            Program::spawn("iperf3 -s (busy-polling)", cmd, Some((lab.bypass_ns.clone(), lab.bypass_if.clone())));
        server.wait_ready(&lab, &[lab.v4(5201)]);
        let client = sending.then(|| {
            let mut c = lab.peer_cmd("iperf3");
            c.args(["-c", &lab.bypass_ip.to_string(), "-p", "5201", "-t", "5", "-R"]);
            c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run iperf3 -c")
        });
        std::thread::sleep(Duration::from_millis(if sending { 1500 } else { 300 }));
        let started = Instant::now();
        let status = server.stop();
        let took = started.elapsed();
        if let Some(mut c) = client {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(status.code().is_some(), "iperf3 exits by its handler's exit(3), not by the signal: {status}");
        assert!(took < Duration::from_secs(3), "iperf3 took {took:?} to exit after SIGTERM (sending: {sending})");
        let left: Vec<_> = std::fs::read_dir(&run_dir.0).unwrap().collect();
        assert!(left.is_empty(), "the exit handlers removed the control endpoint (sending: {sending}): {left:?}");
        eprintln!("iperf3 exited {took:?} after SIGTERM ({status}; sending: {sending})");
    }
}

/// Return the number after `"bytes":` in the object `"<sum>":` of iperf3's JSON report (only
/// `end` has `sum_sent` and `sum_received`).
fn json_bytes(json: &str, sum: &str) -> Option<u64> {
    let key = format!("\"{sum}\"");
    let object = &json[json.find(&key)? + key.len()..];
    let object = object.trim_start().strip_prefix(':')?;
    let value = &object[object.find("\"bytes\"")? + "\"bytes\"".len()..];
    let value = value.trim_start().strip_prefix(':')?.trim_start();
    let digits = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    value[..digits].parse().ok()
}

// ---------------------------------------------------------------------------------------------
// What bypass run refuses
// ---------------------------------------------------------------------------------------------

/// `bypass run` fails with status 1 and one sentence, before the program runs and without
/// leaving an XDP program on the interface, when: the interface does not exist, the program
/// is not in PATH, it is not run as root (`setpriv` to nobody), the program is statically
/// linked (glibc's `ldconfig`), or it is a dynamically linked Go program (only if one is
/// installed).
#[test]
fn refusals_are_one_sentence() {
    let Some(lab) = setup("refusals", &[SETPRIV]) else { return };
    let refusal = |what: &str, cmd: &mut Command, expect: &str| {
        let out = run_client(cmd, None);
        assert_eq!(out.status.code(), Some(1), "bypass run with {what}: {}: {}", out.status, out.stderr);
        let sentence = out.stderr.trim_end();
        assert!(
            sentence.starts_with("bypass: ") && !sentence.contains('\n') && sentence.contains(expect),
            "bypass run with {what} said {sentence:?}, not one line with {expect:?}"
        );
        assert!(out.stdout.is_empty(), "bypass run with {what} printed {:?}", String::from_utf8_lossy(&out.stdout));
    };
    let v4 = format!("{}/{}", lab.bypass_ip, lab.prefix_len);

    let mut cmd = lab.bypass_cmd(BYPASS);
    cmd.args(["run", "--iface", "no-such-if0", "--ip", &v4, "--", "true"]);
    refusal("no such interface", &mut cmd, "there is no interface `no-such-if0`");

    refusal(
        "no such program",
        &mut bypass_run(&lab, &["no-such-program-bypass-test"]),
        "there is no program `no-such-program-bypass-test`",
    );

    let mut cmd = lab.bypass_cmd("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", BYPASS, "run", "--iface", &lab.bypass_if])
        .args(["--ip", &v4, "--", "true"]);
    refusal("not root", &mut cmd, "needs root");

    // glibc's ldconfig is linked statically, so that it works while the libraries are broken.
    match ["/usr/sbin/ldconfig", "/sbin/ldconfig"]
        .into_iter()
        .map(Path::new)
        .find(|p| has_interpreter(p) == Some(false))
    {
        Some(ldconfig) => {
            let program = ldconfig.to_str().expect("UTF-8");
            refusal("a static program", &mut bypass_run(&lab, &[program]), "is statically linked");
        }
        None => eprintln!("refusals_are_one_sentence: no statically linked ldconfig here; not tried"),
    }
    match dynamic_go_program() {
        Some(go) => {
            let program = go.to_str().expect("UTF-8");
            refusal("a Go program", &mut bypass_run(&lab, &[program]), "is a Go program");
        }
        None => eprintln!("refusals_are_one_sentence: no dynamically linked Go program here; not tried"),
    }
    assert_no_xdp(&lab.bypass_ns, &lab.bypass_if, "after the refusals");
}

/// Return whether the 64-bit ELF file at `path` names a program interpreter (a `PT_INTERP`
/// program header: it is linked dynamically), or `None` if it is no such file.
fn has_interpreter(path: &Path) -> Option<bool> {
    let mut head = vec![0u8; 4096];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).ok()?;
    let head = &head[..n];
    if head.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(head.get(o..o + 2)?.try_into().ok()?) as usize);
    let phoff = u64::from_le_bytes(head.get(0x20..0x28)?.try_into().ok()?) as usize;
    let (size, count) = (u16_at(0x36)?, u16_at(0x38)?);
    const PT_INTERP: u32 = 3;
    let types = (0..count).map(|i| Some(u32::from_le_bytes(head.get(phoff + i * size..)?.get(..4)?.try_into().ok()?)));
    types.collect::<Option<Vec<u32>>>().map(|t| t.contains(&PT_INTERP))
}

/// Return a dynamically linked Go program on PATH (one with a `.go.buildinfo` section), if
/// one of a few well-known ones is installed (the Go toolchain's own are usually static).
fn dynamic_go_program() -> Option<PathBuf> {
    ["go", "gofmt", "docker", "kubectl", "terraform", "gh", "hugo", "caddy"].into_iter().filter_map(which).find(|p| {
        has_interpreter(p) == Some(true)
            && std::fs::read(p).is_ok_and(|b| b.windows(b".go.buildinfo".len()).any(|w| w == b".go.buildinfo"))
    })
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// A program the tests run, with the Debian package that has it.
type Tool = (&'static str, &'static str);
const PYTHON3: Tool = ("python3", "python3");
const CURL: Tool = ("curl", "curl");
const NGINX: Tool = ("nginx", "nginx-light");
const WRK: Tool = ("wrk", "wrk");
const REDIS_SERVER: Tool = ("redis-server", "redis-server");
const REDIS_BENCHMARK: Tool = ("redis-benchmark", "redis-tools");
const REDIS_CLI: Tool = ("redis-cli", "redis-tools");
const IPERF3: Tool = ("iperf3", "iperf3");
const SETPRIV: Tool = ("setpriv", "util-linux");

/// A lab whose peer speaks IPv6 too, held with the test binary's lock.
struct RunLab {
    lab: Lab,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for RunLab {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

/// The addresses the stack owns, at a port.
trait StackAddrs {
    fn v4(&self, port: u16) -> SocketAddr;
    fn v6(&self, port: u16) -> SocketAddr;
}

impl StackAddrs for Lab {
    fn v4(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.bypass_ip, port))
    }
    fn v6(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.bypass_ip6, port))
    }
}

/// Return the lab for `test` (IPv6 on, for the peer's kernel too), or `None` to skip it:
/// without root (see `lab_available`) or one of `tools`, which under `CI=true` fails instead.
fn setup(test: &str, tools: &[Tool]) -> Option<RunLab> {
    if !lab_available(test) {
        return None;
    }
    let missing: Vec<String> =
        tools.iter().filter(|(program, _)| which(program).is_none()).map(|(p, pkg)| format!("{p} ({pkg})")).collect();
    if !missing.is_empty() {
        let mut packages: Vec<&str> = tools.iter().map(|(_, pkg)| *pkg).collect();
        packages.dedup();
        let why = format!("{test}: not installed: {} (apt-get install -y {})", missing.join(", "), packages.join(" "));
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why} (CI=true: every program must run)");
        }
        let _ = writeln!(std::io::stderr(), "skipping {why}");
        return None;
    }
    common::init_log();
    preload_library(); // Before the lock, which the lab holds while it lives.
    let serial = common::serial();
    let lab = Lab::with_config(LabConfig { ipv6: true, ..LabConfig::new(test) }).expect("create a lab with IPv6");
    common::peer_without_tail_loss_probes(&lab);
    Some(RunLab { lab, _serial: serial })
}

/// Return the path of `program` in a directory of `PATH`, if it is an executable file there.
fn which(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Build the preloaded library with the cargo that runs this test (once per test binary),
/// into this test's target directory and profile: `<target>/<profile>/libbypass_preload.so`,
/// beside `bypass`, where `bypass run` looks first.
fn preload_library() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let Some(cargo) = std::env::var_os("CARGO") else {
            eprintln!("not run by cargo: bypass run uses the preloaded library as it is");
            return;
        };
        let bypass = Path::new(BYPASS);
        let profile_dir = bypass.parent().expect("<target>/<profile>/bypass");
        let target_dir = profile_dir.parent().expect("<target>/<profile> has a parent");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(name) => name,
            None => panic!("{} names no profile", profile_dir.display()),
        };
        let mut cmd = Command::new(cargo);
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "-p", "bypass-preload", "--lib", "--profile", profile, "--target-dir"])
            .arg(target_dir);
        let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
        assert!(out.status.success(), "{cmd:?}: {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    });
}

/// Return `bypass run` in the lab's bypass namespace, on its interface with both of the
/// stack's addresses, for `program` and its arguments.
fn bypass_run(lab: &Lab, program: &[&str]) -> Command {
    bypass_run_with(lab, &[], program)
}

/// [`bypass_run`] with more of `bypass run`'s options.
fn bypass_run_with(lab: &Lab, options: &[&str], program: &[&str]) -> Command {
    let v4 = format!("{}/{}", lab.bypass_ip, lab.prefix_len);
    let v6 = format!("{}/{}", lab.bypass_ip6, lab.prefix6_len);
    let mut cmd = lab.bypass_cmd(BYPASS);
    cmd.args(["run", "--iface", &lab.bypass_if, "--ip", &v4, "--ip", &v6]).args(options).arg("--").args(program);
    // The programs die of SIGTERM, which leaves their control endpoints behind: keep them out
    // of /run/bypass (a test that reads them sets its own directory over this one).
    cmd.env("BYPASS_RUN_DIR", common::TEST_RUN_DIR);
    cmd
}

/// Fail the test if an XDP program is attached to `iface` in namespace `ns`.
fn assert_no_xdp(ns: &str, iface: &str, when: &str) {
    let link = Command::new("ip").args(["-n", ns, "link", "show", "dev", iface]).output().expect("run ip link show");
    let link = String::from_utf8_lossy(&link.stdout);
    // `mtu 1500 xdp qdisc ...` (or xdpgeneric) and `prog/xdp id N` while one is attached.
    let attached = link.split_whitespace().any(|w| w.starts_with("xdp") || w.starts_with("prog/xdp"));
    assert!(!attached, "an XDP program is attached to {iface} {when}: {link}");
}

/// A server process (under `bypass run` in the bypass namespace, or in the peer's); dropping
/// the guard kills it (SIGKILL) and reaps it, [`Program::stop`] ends it with SIGTERM.
struct Program {
    name: String,
    child: Option<Child>,
    /// Its standard output and error, as they come.
    output: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// For a program under `bypass run`: the namespace and interface that must have no XDP
    /// program once it is gone.
    xdp: Option<(String, String)>,
}

impl Program {
    /// Start `program` under `bypass run` in the lab's bypass namespace.
    fn under_bypass(lab: &Lab, name: &str, program: &[&str]) -> Program {
        let xdp = (lab.bypass_ns.clone(), lab.bypass_if.clone());
        Program::spawn(name, bypass_run(lab, program), Some(xdp))
    }

    /// Start `program` in the peer's namespace, on the kernel's sockets.
    fn in_peer(lab: &Lab, name: &str, program: &[&str]) -> Program {
        let mut cmd = lab.peer_cmd(program[0]);
        cmd.args(&program[1..]);
        Program::spawn(name, cmd, None)
    }

    fn spawn(name: &str, mut cmd: Command, xdp: Option<(String, String)>) -> Program {
        // `ip netns exec` execs `bypass`, which execs the program: the child's pid is its own.
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            common::collect(child.stdout.take().expect("piped stdout"), output.clone()),
            common::collect(child.stderr.take().expect("piped stderr"), output.clone()),
        ];
        Program { name: name.to_string(), child: Some(child), output, readers, xdp }
    }

    /// Wait until a kernel client in the peer's namespace can connect to each of `addrs`
    /// (within [`READY`]); fail if the program exits first.
    fn wait_ready(&mut self, lab: &Lab, addrs: &[SocketAddr]) {
        let deadline = Instant::now() + READY;
        for addr in addrs {
            loop {
                let connected = lab.in_peer(|| TcpStream::connect_timeout(addr, Duration::from_millis(300)));
                if connected.is_ok() {
                    break;
                }
                if let Some(status) = self.child.as_mut().expect("running").try_wait().expect("wait for the program") {
                    self.child = None;
                    self.join_readers();
                    panic!("{} exited before it served {addr} ({status}): {}", self.name, self.output());
                }
                assert!(
                    Instant::now() < deadline,
                    "{} did not accept connections at {addr} within {READY:?} ({:?}): {}",
                    self.name,
                    connected.unwrap_err(),
                    self.output()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Return what the program printed so far (standard output and error).
    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Send SIGTERM; check that the program exits within 10 s, not by another signal (a
    /// crash), and, under `bypass run`, without panicking and without leaving its XDP
    /// program attached. Return how it exited.
    fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: kill(2) takes plain integers; `pid` is our child, not yet reaped, so the
        // pid names no other process.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill -TERM {pid}: {}", std::io::Error::last_os_error());
        let status = common::wait_exit(&mut child, Duration::from_secs(10)).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not exit within 10 s of SIGTERM: {}", self.name, self.output())
        });
        self.join_readers();
        let output = self.output();
        assert!(
            status.signal().is_none_or(|s| s == libc::SIGTERM),
            "{} ended with {status} on SIGTERM: {output}",
            self.name
        );
        assert!(!output.contains("panicked"), "{} panicked: {output}", self.name);
        if let Some((ns, iface)) = &self.xdp {
            assert_no_xdp(ns, iface, &format!("after {} exited", self.name));
        }
        status
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.join_readers();
            if std::thread::panicking() {
                eprintln!("{} printed: {}", self.name, self.output());
            }
        }
        self.join_readers();
    }
}

/// What a client command left.
struct ClientOutput {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// Run `cmd` with `input` on its standard input (else none) for at most [`CLIENT`], killing
/// it (and failing the test) if it runs longer.
fn run_client(cmd: &mut Command, input: Option<&[u8]>) -> ClientOutput {
    let mut child = cmd
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let writer = input.map(|data| {
        let mut stdin = child.stdin.take().expect("piped stdin");
        let data = data.to_vec();
        // Dropping `stdin` at the end closes it: the program sees the end of its input.
        std::thread::spawn(move || stdin.write_all(&data))
    });
    let status = common::wait_exit(&mut child, CLIENT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stdout = stdout.join().expect("stdout reader");
    let stderr = String::from_utf8_lossy(&stderr.join().expect("stderr reader")).into_owned();
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let Some(status) = status else {
        panic!("{cmd:?} did not finish within {CLIENT:?}: {stderr}\n{}", String::from_utf8_lossy(&stdout))
    };
    ClientOutput { status, stdout, stderr }
}

/// [`run_client`], failing the test if the command fails.
fn run_ok(cmd: &mut Command, input: Option<&[u8]>) -> ClientOutput {
    let out = run_client(cmd, input);
    assert!(
        out.status.success(),
        "{cmd:?}: {}: {}\n{}",
        out.status,
        out.stderr,
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(4096)])
    );
    out
}

/// A directory under the system's temporary directory, removed with everything in it on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("bypass-run-programs-{}-{n}-{tag}", std::process::id()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
