//! `bypass ss` and `bypass stat` against a running `bypass echo` (a spawned binary, over
//! AF_XDP in a lab) with kernel clients in the peer namespace (issue 30). Needs root.
//!
//! What `bypass echo` does decides which states can be held: it closes a connection first
//! only when it has been idle for `--idle-timeout`; the kernel client then ACKs our FIN and,
//! as it does not close, our side waits in FIN-WAIT-2 (released by the application: an
//! orphan with its FIN-WAIT-2 timer running). A client that sends without reading fills
//! everything: echo's send buffer (Send-Q, the peer's window closed), then echo stops reading
//! (Recv-Q).
//!
//! Each stack's endpoint goes to a temporary `BYPASS_RUN_DIR`, so the test stays apart from
//! real stacks and from other tests.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Backend, EchoServer, create_lab, data, echo_with_reader, init_log, peer_connect, server_addr};
use serde_json::Value;

/// A temporary run directory, removed on drop.
struct RunDir(PathBuf);

impl RunDir {
    fn new(name: &str) -> RunDir {
        let dir = std::env::temp_dir().join(format!("bypass-ctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        RunDir(dir)
    }

    fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Return the endpoint files in the directory.
    fn sockets(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `bypass args...` with `BYPASS_RUN_DIR=dir`.
fn bypass(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .env("BYPASS_RUN_DIR", dir)
        .stdin(Stdio::null())
        .output()
        .expect("run bypass")
}

/// Run `bypass ss --json -a` and return the one stack's snapshot.
fn ss(dir: &Path, pid: u32) -> Value {
    let out = bypass(dir, &["ss", &pid.to_string(), "--json", "-a"]);
    assert!(out.status.success(), "bypass ss failed: {}", String::from_utf8_lossy(&out.stderr));
    let docs: Value = serde_json::from_slice(&out.stdout).expect("bypass ss --json prints JSON");
    let docs = docs.as_array().expect("an array of stacks");
    assert_eq!(docs.len(), 1, "one stack: {docs:?}");
    docs[0].clone()
}

/// Return the connection of `snap` whose peer is `peer`.
fn conn(snap: &Value, peer: SocketAddr) -> &Value {
    snap["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["peer"] == peer.to_string())
        .unwrap_or_else(|| panic!("no connection with peer {peer} in {snap:#}"))
}

/// Return the kernel socket's (unread bytes, unacknowledged + unsent bytes): SIOCINQ and
/// SIOCOUTQ, what `ss` shows as Recv-Q and Send-Q.
fn kernel_queues(s: &TcpStream) -> (u64, u64) {
    let (mut inq, mut outq): (libc::c_int, libc::c_int) = (0, 0);
    // SAFETY: FIONREAD (SIOCINQ) and TIOCOUTQ (SIOCOUTQ) write one int through the pointer,
    // which points at a live c_int; the descriptor is the stream's, open for the call.
    let (a, b) = unsafe {
        (libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut inq), libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut outq))
    };
    assert!(a == 0 && b == 0, "SIOCINQ/SIOCOUTQ failed");
    (inq as u64, outq as u64)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn ss_and_stat_see_a_running_echo() {
    init_log();
    if !bypass_lab::testlab::lab_available("ss_and_stat_see_a_running_echo") {
        return;
    }
    let lab = create_lab("bpctl", 1);
    let run = RunDir::new("main");
    let server =
        EchoServer::start_with_env(&lab, Backend::Xdp, &["--idle-timeout", "4"], &[("BYPASS_RUN_DIR", run.str())]);
    let pid = server.pid();
    // `serving echo on` is printed as the shard starts, the endpoint bound right after.
    let deadline = Instant::now() + Duration::from_secs(5);
    while run.sockets().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(run.sockets(), vec![format!("{pid}.0.sock")], "one endpoint, named by pid and shard");
    let addr = server_addr(&lab);

    // A: one echo, then idle: after 4 s echo closes it and, as the client does not close,
    // our side waits in FIN-WAIT-2.
    let a = peer_connect(&lab, addr);
    echo_with_reader(&a, b"hello", Duration::from_secs(5)).unwrap();

    // --- stat -i 1: the deltas are the traffic sent -------------------------------------
    let b = peer_connect(&lab, addr);
    let mut stat = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["stat", &pid.to_string(), "--json", "-i", "1", "-c", "2"])
        .env("BYPASS_RUN_DIR", run.str())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bypass stat");
    let mut lines = BufReader::new(stat.stdout.take().unwrap()).lines();
    let base: Value = serde_json::from_str(&lines.next().expect("the base sample").unwrap()).unwrap();
    assert!(base.get("delta").is_none(), "the first line is the base: {base}");
    // 40 round trips of 1000 bytes, well inside the first interval.
    let payload = data(7, 1000);
    for _ in 0..40 {
        echo_with_reader(&b, &payload, Duration::from_secs(5)).unwrap();
    }
    let b_last = Instant::now();
    let samples: Vec<Value> = lines.map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    let status = stat.wait().unwrap();
    assert!(status.success(), "bypass stat failed");
    assert_eq!(samples.len(), 2, "two intervals: {samples:?}");
    let delta = |name: &str| samples.iter().map(|s| s["delta"][name].as_u64().unwrap_or(0)).sum::<u64>();
    assert_eq!(delta("tcp.bytes_in"), 40_000, "payload received: {samples:?}");
    assert_eq!(delta("tcp.bytes_out"), 40_000, "payload echoed: {samples:?}");
    // Each 1000-byte message is at least one segment each way, with 54+ bytes of headers.
    assert!(delta("tcp_segments_in") >= 40 && delta("tcp_segments_out") >= 40, "{samples:?}");
    assert!(delta("rx_bytes") >= 40_000 + 40 * 54 && delta("tx_bytes") >= 40_000 + 40 * 54, "{samples:?}");
    assert!(delta("rx_frames") >= delta("tcp_segments_in"), "{samples:?}");
    for s in &samples {
        let interval = u(&s["interval_us"]);
        assert!((900_000..3_000_000).contains(&interval), "interval of about 1 s: {interval} us");
        // Delta and total agree with the base.
        assert!(u(&s["total"]["tcp.bytes_in"]) >= u(&base["total"]["tcp.bytes_in"]) + u(&s["delta"]["tcp.bytes_in"]));
    }
    let total = &samples[1]["total"];
    assert_eq!(u(&total["tcp.bytes_in"]) - u(&base["total"]["tcp.bytes_in"]), 40_000);
    for name in
        ["drop.tx_ring_full", "syn_cookies_sent", "syn_cookies_accepted", "tcp.challenge_acks", "tcp.retransmits"]
    {
        assert!(total.get(name).is_some(), "stat reports {name}: {total}");
    }
    assert!(
        total.as_object().unwrap().keys().any(|k| k.starts_with("device.")),
        "stat reports the device's counters: {total}"
    );
    // The host's budgets: `bypass echo`'s 4096-frame ring at MSS 1460 gives half of it in
    // full segments to the windows and a quarter to the data in flight.
    assert_eq!(u(&total["budget.windows"]), 4096 * 1460 / 2, "{total}");
    assert_eq!(u(&total["budget.flight"]), 4096 * 1460 / 4, "{total}");
    assert_eq!(u(&total["budget.buffers"]), 512 << 20, "{total}");
    let offered = u(&total["budget.windows_used"]);
    assert!(offered > 0 && offered <= 4096 * 1460 / 2, "the live connections offer windows: {total}");
    for name in ["budget.buffers_used", "budget.flight_used"] {
        assert!(total.get(name).is_some(), "stat reports {name}: {total}");
    }
    // The human form: nstat's columns.
    let out = bypass(&run.0, &["stat", &pid.to_string()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(&format!("#pid {pid} shard 0\n")), "{text}");
    assert!(
        text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..] == ["connections_accepted", "2"]),
        "{text}"
    );

    // --- ss: exactly the live connections, with states and queues ----------------------
    // Wait for B's (and so A's) idle close; C and D below are looked at well within theirs.
    std::thread::sleep(Duration::from_millis(4500).saturating_sub(b_last.elapsed()));
    let c = peer_connect(&lab, addr);
    let d = peer_connect(&lab, addr);
    echo_with_reader(&d, b"12345", Duration::from_secs(5)).unwrap();
    // C sends without ever reading, until nothing more goes in.
    c.set_nonblocking(true).unwrap();
    let chunk = vec![0x5au8; 65536];
    let mut written = 0u64;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(300) {
        match (&c).write(&chunk) {
            Ok(n) => {
                written += n as u64;
                quiet_since = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("write to C: {e}"),
        }
    }
    // Let the last segments, ACKs and window probes settle: our snapshot and the kernel
    // client's queues must hold still together (read on both sides of the snapshot).
    let key = |s: &Value, k: (u64, u64)| {
        let x = conn(s, c.local_addr().unwrap());
        (u(&x["recv_q"]), u(&x["send_q"]), u(&x["bytes_received"]), u(&x["bytes_acked"]), k)
    };
    let mut last = None;
    let (mut snap, mut k_in, mut k_out) = (Value::Null, 0, 0);
    for _ in 0..30 {
        let before = kernel_queues(&c);
        let s = ss(&run.0, pid);
        let after = kernel_queues(&c);
        let now = key(&s, after);
        let settled = before == after && last.as_ref() == Some(&now);
        (snap, k_in, k_out) = (s, after.0, after.1);
        if settled {
            break;
        }
        last = Some(now);
        std::thread::sleep(Duration::from_millis(100));
    }
    let conns = snap["connections"].as_array().unwrap();
    let peers: Vec<String> = {
        let mut p: Vec<String> = conns.iter().map(|c| c["peer"].as_str().unwrap().to_string()).collect();
        p.sort();
        p
    };
    let mut want: Vec<String> = [&a, &b, &c, &d].iter().map(|s| s.local_addr().unwrap().to_string()).collect();
    want.sort();
    assert_eq!(peers, want, "exactly the four live connections: {snap:#}");
    for s in [&a, &b] {
        let x = conn(&snap, s.local_addr().unwrap());
        assert_eq!(x["state"], "FIN-WAIT-2", "echo closed the idle one first: {x:#}");
        assert_eq!(x["owner"], "orphan", "{x:#}");
        assert_eq!((u(&x["recv_q"]), u(&x["send_q"])), (0, 0), "{x:#}");
        assert_eq!(x["timer"]["name"], "fin_wait2", "{x:#}");
    }
    let x = conn(&snap, d.local_addr().unwrap());
    assert_eq!(x["state"], "ESTAB");
    assert_eq!((u(&x["recv_q"]), u(&x["send_q"])), (0, 0), "{x:#}");
    assert_eq!(u(&x["bytes_received"]), 5, "{x:#}");
    assert_eq!(u(&x["bytes_acked"]), 6, "5 bytes and the SYN: {x:#}");
    assert_eq!(x["local"], addr.to_string());
    assert!(x["rtt_us"].as_u64().is_some() && u(&x["rto_us"]) >= 200_000 && u(&x["cwnd"]) > 0, "{x:#}");
    // C: both of our queues hold data, and they add up with what the kernel holds.
    let x = conn(&snap, c.local_addr().unwrap());
    assert_eq!(x["state"], "ESTAB");
    let (recv_q, send_q, received) = (u(&x["recv_q"]), u(&x["send_q"]), u(&x["bytes_received"]));
    assert!(recv_q > 0, "echo stopped reading: unread data waits (Recv-Q): {x:#}");
    assert!(send_q > 0, "the client does not read: our Send-Q holds the echo: {x:#}");
    assert_eq!(received, written - k_out, "what we received is what the client wrote less its Send-Q: {x:#}");
    // What we received is unread (Recv-Q), in echo's hands (at most one 64 KiB read), in our
    // send buffer (Send-Q), or acknowledged by the client and unread there.
    let accounted = recv_q + send_q + k_in;
    assert!(
        accounted <= received && received - accounted <= 65536,
        "received {received} = Recv-Q {recv_q} + Send-Q {send_q} + kernel's unread {k_in} + echo's own (< 64 KiB): {x:#}"
    );
    assert_eq!(u(&x["bytes_acked"]), k_in + 1, "the client acknowledged what it holds, and the SYN: {x:#}");
    // Listeners.
    let l = &snap["listeners"].as_array().unwrap()[0];
    assert_eq!((u(&l["port"]), u(&l["accept_queue"])), (7, 0), "{l:#}");
    assert!(u(&l["backlog"]) > 0);

    // Filters and the table.
    let only_d = bypass(&run.0, &["ss", "--json", "--dport", &d.local_addr().unwrap().port().to_string()]);
    let docs: Value = serde_json::from_slice(&only_d.stdout).unwrap();
    assert_eq!(docs[0]["connections"].as_array().unwrap().len(), 1, "{docs:#}");
    let table = String::from_utf8(bypass(&run.0, &["ss", "-i"]).stdout).unwrap();
    assert!(table.starts_with("State"), "{table}");
    assert_eq!(table.lines().filter(|l| l.starts_with("FIN-WAIT-2")).count(), 2, "{table}");
    assert!(table.contains("timer:(fin_wait2,"), "{table}");
    let listen = String::from_utf8(bypass(&run.0, &["ss", "-l"]).stdout).unwrap();
    assert_eq!(listen.lines().filter(|l| l.starts_with("LISTEN")).count(), 1, "{listen}");

    // --- clients that leave: the stack goes on serving ----------------------------------
    drop(std::os::unix::net::UnixStream::connect(run.0.join(format!("{pid}.0.sock"))).unwrap());
    let mut half = std::os::unix::net::UnixStream::connect(run.0.join(format!("{pid}.0.sock"))).unwrap();
    half.write_all(b"{\"cmd\":").unwrap();
    drop(half);
    let mut garbage = std::os::unix::net::UnixStream::connect(run.0.join(format!("{pid}.0.sock"))).unwrap();
    garbage.write_all(b"{\"cmd\":\"reboot\"}\n").unwrap();
    let mut reply = String::new();
    garbage.read_to_string(&mut reply).unwrap();
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert!(reply["error"].as_str().unwrap().contains("unknown command"), "{reply}");
    let mut unread = std::os::unix::net::UnixStream::connect(run.0.join(format!("{pid}.0.sock"))).unwrap();
    unread.write_all(b"{\"cmd\":\"ss\"}\n").unwrap();
    drop(unread);
    echo_with_reader(&d, &data(9, 100_000), Duration::from_secs(10)).expect("the stack still serves");
    assert_eq!(ss(&run.0, pid)["pid"], pid);

    // --- bad input: one sentence each ----------------------------------------------------
    let err = |out: Output| {
        assert!(!out.status.success());
        let e = String::from_utf8(out.stderr).unwrap();
        assert_eq!(e.trim_end().lines().count(), 1, "one sentence: {e}");
        e
    };
    let e = err(bypass(&run.0, &["ss", "1"]));
    assert!(e.contains("process 1 is not a running bypass stack"), "{e}");
    let empty = RunDir::new("empty");
    let e = err(bypass(&empty.0, &["stat"]));
    assert!(e.contains("no running bypass stack") && e.contains("bypass echo"), "{e}");
    // Not the stack's owner: the socket is 0600.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(run.0.join(format!("{pid}.0.sock"))).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let nobody = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", env!("CARGO_BIN_EXE_bypass"), "ss"])
        .env("BYPASS_RUN_DIR", run.str())
        .output();
    // (setpriv is util-linux's, on every Debian; without it this part is skipped.)
    if let Ok(out) = nobody {
        let e = err(out);
        assert!(e.contains("no permission") && e.contains("run as root"), "{e}");
    }

    // --- normal exit removes the endpoint ---------------------------------------------
    drop((a, b, c, d));
    let finished = server.stop();
    finished.assert_clean_exit();
    assert!(run.sockets().is_empty(), "the endpoint is removed on exit: {:?}", run.sockets());
}

#[test]
fn a_killed_stack_leaves_a_stale_endpoint_that_is_recognised() {
    init_log();
    if !bypass_lab::testlab::lab_available("a_killed_stack_leaves_a_stale_endpoint_that_is_recognised") {
        return;
    }
    let lab = create_lab("bpctk", 1);
    let run = RunDir::new("kill");
    let server = EchoServer::start_with_env(&lab, Backend::Xdp, &[], &[("BYPASS_RUN_DIR", run.str())]);
    let pid = server.pid();
    assert_eq!(ss(&run.0, pid)["shard"], 0);
    server.kill9();
    assert_eq!(run.sockets(), vec![format!("{pid}.0.sock")], "SIGKILL leaves the socket behind");
    // Asked for by pid: one sentence, and the stale socket is gone.
    let out = bypass(&run.0, &["ss", &pid.to_string()]);
    assert!(!out.status.success());
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains(&format!("process {pid} is not a running bypass stack")), "{e}");
    assert!(run.sockets().is_empty(), "the stale endpoint was removed: {:?}", run.sockets());
    // The next stack serves and is the only one listed.
    let next = EchoServer::start_with_env(&lab, Backend::Xdp, &[], &[("BYPASS_RUN_DIR", run.str())]);
    let out = bypass(&run.0, &["ss", "--json"]);
    let docs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(docs.as_array().unwrap().len(), 1);
    assert_eq!(docs[0]["pid"], next.pid());
    next.stop().assert_clean_exit();
}
