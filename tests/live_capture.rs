//! Live capture of a running `bypass echo` (issue 30), with kernel clients in a lab:
//! - `bypass capture -w - | tshark -r -` attached mid-run: the connections opened after
//!   attaching show complete handshakes, every frame has a comment, every checksum is valid
//!   (TX checksum offload on); the stack serves on after the reader is gone;
//! - a reader that goes away (a closed pipe) ends `bypass capture` quietly;
//! - a reader that stops reading never slows the stack, and the frames it missed are counted
//!   and reported;
//! - the Wireshark extcap: installed into a temporary personal extcap folder, `tshark -D`
//!   lists the stack and `tshark -i bypass-<pid>-0` captures through it.
//!
//! Needs root (namespaces) and tshark. The stacks' endpoints go to a temporary run directory
//! (`BYPASS_RUN_DIR`), apart from any real stack's.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Backend, EchoServer, create_lab, data, echo_with_reader, init_log, peer_connect, server_addr};

const BYPASS: &str = env!("CARGO_BIN_EXE_bypass");
const TIMEOUT: Duration = Duration::from_secs(10);

/// Return whether the test can run: root for the lab, and tshark (under CI=true its absence
/// fails the test).
fn available(test: &str) -> bool {
    bypass_lab::testlab::lab_available(test) && common::tshark_available()
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("bypass-live-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn env(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed and reaped on drop.
struct Guard(Option<Child>);

impl Guard {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }

    /// Wait (bounded) for the process to exit; return its status and standard error.
    fn wait(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let mut child = self.0.take().expect("running");
        let status = common::wait_exit(&mut child, limit).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} did not exit within {limit:?}", child.id())
        });
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    }

    /// Send SIGINT.
    fn interrupt(&mut self) {
        let pid = self.child().id().to_string();
        assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Start `bypass echo` (AF_XDP, TX checksum offload on) with its endpoint in `run`, and wait
/// for the endpoint.
fn start_echo(lab: &common::TestLab, run: &TempDir) -> EchoServer {
    start_echo_with(lab, run, &[])
}

/// [`start_echo`] with `extra` arguments.
fn start_echo_with(lab: &common::TestLab, run: &TempDir, extra: &[&str]) -> EchoServer {
    let server = EchoServer::start_with_env(lab, Backend::Xdp, extra, &[("BYPASS_RUN_DIR", run.env())]);
    let socket = run.path().join(format!("{}.0.sock", server.pid()));
    let deadline = Instant::now() + TIMEOUT;
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no endpoint {} within {TIMEOUT:?}: {}", socket.display(), server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// `bypass capture <pid> -w - [extra]`, standard output piped, standard error read until the
/// capture is attached (it says so once the stack has answered with the pcapng header).
fn start_capture(run: &TempDir, pid: u32, extra: &[&str]) -> (Guard, std::process::ChildStdout) {
    let mut child = Command::new(BYPASS)
        .args(["capture", &pid.to_string(), "-w", "-"])
        .args(extra)
        .env("BYPASS_RUN_DIR", run.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bypass capture");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&said).contains('\n') {
        match stderr.read(&mut byte) {
            Ok(1) => said.push(byte[0]),
            _ => panic!("bypass capture ended before attaching: {}", String::from_utf8_lossy(&said)),
        }
    }
    let said = String::from_utf8_lossy(&said).to_string();
    assert!(said.contains("capturing on stack"), "{said}");
    child.stderr = Some(stderr);
    (Guard(Some(child)), stdout)
}

/// The local port of a kernel client.
fn port(s: &TcpStream) -> u16 {
    s.local_addr().unwrap().port()
}

/// One frame as tshark printed it.
#[derive(Debug)]
struct Frame {
    ports: (u16, u16),
    syn: bool,
    ack: bool,
    fin: bool,
    /// tshark's checksum status: 0 bad, 1 good, 2 unverified (and empty without the header).
    tcp_checksum: String,
    ip_checksum: String,
    comment: String,
}

/// The tshark fields `Frame` is read from, in order.
const FIELDS: &[&str] = &[
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags.syn",
    "tcp.flags.ack",
    "tcp.flags.fin",
    "tcp.checksum.status",
    "ip.checksum.status",
    "frame.comment",
];

fn tshark_args() -> Vec<String> {
    let mut args: Vec<String> =
        ["-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE", "-T", "fields", "-E", "separator=/t"]
            .map(String::from)
            .to_vec();
    for f in FIELDS {
        args.push("-e".into());
        args.push(f.to_string());
    }
    args
}

fn parse_frames(text: &str) -> Vec<Frame> {
    let flag = |s: &str| s == "1" || s == "True";
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.splitn(FIELDS.len(), '\t').collect();
            let get = |i: usize| f.get(i).copied().unwrap_or("").trim().to_string();
            Frame {
                ports: (get(0).parse().unwrap_or(0), get(1).parse().unwrap_or(0)),
                syn: flag(&get(2)),
                ack: flag(&get(3)),
                fin: flag(&get(4)),
                tcp_checksum: get(5),
                ip_checksum: get(6),
                comment: get(7),
            }
        })
        .collect()
}

/// Assert that every frame has a comment and no checksum is bad, and that the connection of
/// client port `client` shows its whole life: SYN, SYN-ACK, ACK, and a FIN each way.
fn assert_frames(frames: &[Frame], clients: &[u16]) {
    assert!(!frames.is_empty(), "no frames");
    for (i, f) in frames.iter().enumerate() {
        assert!(!f.comment.is_empty(), "frame {} has no comment: {f:?}", i + 1);
        assert!(f.tcp_checksum != "0" && f.ip_checksum != "0", "frame {} has a bad checksum: {f:?}", i + 1);
    }
    let good = frames.iter().filter(|f| f.tcp_checksum == "1").count();
    let tcp = frames.iter().filter(|f| !f.tcp_checksum.is_empty()).count();
    assert_eq!(good, tcp, "every TCP checksum verified good");
    for &c in clients {
        let of = |from_client: bool| {
            frames.iter().filter(move |f| if from_client { f.ports.0 == c } else { f.ports.1 == c })
        };
        assert!(of(true).any(|f| f.syn && !f.ack), "client {c}: no SYN");
        assert!(of(false).any(|f| f.syn && f.ack), "client {c}: no SYN-ACK");
        assert!(of(true).any(|f| f.ack && !f.syn), "client {c}: no ACK");
        assert!(of(true).any(|f| f.fin) && of(false).any(|f| f.fin), "client {c}: no FIN each way");
    }
}

/// Open `n` connections from the peer, echo `len` bytes over each, close them, and return
/// their client ports.
fn clients(lab: &common::TestLab, n: usize, len: usize) -> Vec<u16> {
    let streams = common::peer_connect_many(lab, server_addr(lab), n);
    for (i, s) in streams.iter().enumerate() {
        echo_with_reader(s, &data(i as u64, len), TIMEOUT).expect("echo");
    }
    let ports = streams.iter().map(port).collect();
    for s in &streams {
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = common::read_to_eof(s, TIMEOUT);
    }
    ports
}

#[test]
fn a_capture_attached_mid_run_reads_in_tshark_and_detaches() {
    init_log();
    if !available("a_capture_attached_mid_run_reads_in_tshark_and_detaches") {
        return;
    }
    let lab = create_lab("bplive1", 1);
    let run = TempDir::new("run1");
    let server = start_echo(&lab, &run);
    // Traffic before: its handshake is not in the capture.
    let before = clients(&lab, 1, 1000);

    let (mut capture, stdout) = start_capture(&run, server.pid(), &[]);
    let tshark = Command::new("tshark")
        .args(["-r", "-"])
        .args(tshark_args())
        .stdin(Stdio::from(stdout))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tshark");
    let mut tshark = Guard(Some(tshark));
    let mut tshark_out = tshark.child().stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = tshark_out.read_to_string(&mut s);
        s
    });

    // A second reader at once, filtered, into a file.
    let file = run.path().join("second.pcapng");
    let second = Command::new(BYPASS)
        .args(["capture", &server.pid().to_string(), "--port", "7", "--host", &lab.peer_ip.to_string(), "-w"])
        .arg(&file)
        .env("BYPASS_RUN_DIR", run.env())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a second bypass capture");
    let mut second = Guard(Some(second));
    let deadline = Instant::now() + TIMEOUT;
    while std::fs::metadata(&file).map_or(0, |m| m.len()) == 0 {
        assert!(Instant::now() < deadline, "the second capture did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }

    let after = clients(&lab, 3, 5000);
    std::thread::sleep(Duration::from_millis(300));
    second.interrupt();
    let (status, said) = second.wait(TIMEOUT);
    assert!(status.success(), "the second bypass capture: {status}: {said}");
    let text = Command::new("tshark").arg("-r").arg(&file).args(tshark_args()).output().unwrap();
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    assert_frames(&parse_frames(&String::from_utf8_lossy(&text.stdout)), &after);
    capture.interrupt();
    let (status, said) = capture.wait(TIMEOUT);
    assert!(status.success(), "bypass capture: {status}: {said}");
    assert!(said.contains("frames captured"), "{said}");
    let (status, tshark_err) = tshark.wait(TIMEOUT);
    assert!(status.success(), "tshark: {status}: {tshark_err}");
    let frames = parse_frames(&reader.join().unwrap());
    assert_frames(&frames, &after);
    assert!(!frames.iter().any(|f| f.ports.0 == before[0] && f.syn), "a SYN from before attaching");
    eprintln!("{} frames through tshark; {}", frames.len(), said.lines().last().unwrap_or(""));

    // The reader is gone: the stack serves on.
    let again = peer_connect(&lab, server_addr(&lab));
    echo_with_reader(&again, &data(9, 20_000), TIMEOUT).expect("echo after the capture detached");
    drop(again);
    server.stop().assert_clean_exit();
}

#[test]
fn a_closed_pipe_ends_the_capture_quietly() {
    init_log();
    if !available("a_closed_pipe_ends_the_capture_quietly") {
        return;
    }
    let lab = create_lab("bplive2", 1);
    let run = TempDir::new("run2");
    let server = start_echo(&lab, &run);
    let (capture, mut stdout) = start_capture(&run, server.pid(), &["--port", "7"]);
    let mut magic = [0u8; 4];
    stdout.read_exact(&mut magic).unwrap();
    assert_eq!(magic, [0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header comes first");
    drop(stdout);
    // Traffic makes the capture write, into a pipe no one reads any more.
    clients(&lab, 1, 10_000);
    let (status, said) = capture.wait(TIMEOUT);
    assert!(status.success(), "bypass capture: {status}: {said}");
    assert!(!said.contains("bypass:"), "an error on a closed pipe: {said}");
    // And the stack serves on.
    clients(&lab, 1, 10_000);
    server.stop().assert_clean_exit();
}

#[test]
fn frames_reach_the_reader_as_they_pass_a_busy_polling_stack() {
    init_log();
    if !available("frames_reach_the_reader_as_they_pass_a_busy_polling_stack") {
        return;
    }
    let lab = create_lab("bplive5", 1);
    let run = TempDir::new("run5");
    // A busy-polling stack never sleeps, so nothing is pushed out "when idle": what the
    // reader sees, it sees because the capture is written at the end of every batch.
    let server = start_echo_with(&lab, &run, &["--busy-poll"]);
    let (capture, mut stdout) = start_capture(&run, server.pid(), &[]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let s = peer_connect(&lab, server_addr(&lab));
    let marker = b"a marker the reader must see while the connection stays open";
    echo_with_reader(&s, marker, TIMEOUT).expect("echo");
    let t = Instant::now();
    let found = loop {
        let n = seen.lock().unwrap().windows(marker.len()).filter(|w| w == marker).count();
        // Twice: the client's segment in, and our echo out.
        if n >= 2 || t.elapsed() > Duration::from_secs(2) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(found, 2, "the reader did not get both frames within 2 s of the echo");
    eprintln!("both frames at the reader {:?} after the echo came back", t.elapsed());
    drop(s);
    drop(capture);
    let _ = reader.join();
    server.stop().assert_clean_exit();
}

/// Echo `rounds` 64-byte messages one at a time over `s`; return the median round trip.
fn ping_pong(s: &TcpStream, rounds: usize) -> Duration {
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (mut w, mut r) = (s, s);
    let mut times = Vec::with_capacity(rounds);
    let mut buf = [0u8; 64];
    for i in 0..rounds {
        let t = Instant::now();
        w.write_all(&[i as u8; 64]).unwrap();
        r.read_exact(&mut buf).unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    times[rounds / 2]
}

#[test]
fn a_reader_that_stops_reading_never_slows_the_stack() {
    init_log();
    if !available("a_reader_that_stops_reading_never_slows_the_stack") {
        return;
    }
    let lab = create_lab("bplive3", 1);
    let run = TempDir::new("run3");
    let server = start_echo(&lab, &run);
    let bulk = |seed| {
        let t = Instant::now();
        let s = peer_connect(&lab, server_addr(&lab));
        echo_with_reader(&s, &data(seed, 8 << 20), Duration::from_secs(30)).expect("bulk echo");
        let rr = ping_pong(&s, 300);
        (t.elapsed(), rr)
    };
    let (alone, rr_alone) = bulk(1);

    // Attached, and never read: its pipe, its socket and then the stack's buffer fill up.
    let (capture, mut stdout) = start_capture(&run, server.pid(), &[]);
    let (stalled, rr_stalled) = bulk(2);
    eprintln!(
        "8 MiB echo and 300 round trips: {alone:?} (p50 {rr_alone:?}) alone, {stalled:?} (p50 {rr_stalled:?}) with a stalled reader"
    );
    assert!(
        stalled < alone * 4 + Duration::from_secs(2),
        "a stalled reader slowed the stack: {stalled:?} against {alone:?}"
    );
    assert!(rr_stalled < rr_alone * 4 + Duration::from_millis(2), "round trips {rr_stalled:?} against {rr_alone:?}");

    // The reader comes back: the statistics it reads (every second) count what it missed.
    let drain = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    std::thread::sleep(Duration::from_millis(2500));
    let mut capture = capture;
    capture.interrupt();
    let (status, said) = capture.wait(TIMEOUT);
    assert!(status.success(), "bypass capture: {status}: {said}");
    let bytes = drain.join().unwrap();
    let line = said.lines().find(|l| l.contains("frames captured")).unwrap_or_else(|| panic!("no summary: {said}"));
    let numbers: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let (captured, dropped) = (numbers[0], numbers[1]);
    eprintln!("{line} ({} bytes read)", bytes.len());
    assert!(dropped > 0, "no drops counted for a stalled reader: {line}");
    assert!(captured > 0, "{line}");
    server.stop().assert_clean_exit();
}

#[test]
fn the_extcap_is_listed_and_captures() {
    init_log();
    if !available("the_extcap_is_listed_and_captures") {
        return;
    }
    let lab = create_lab("bplive4", 1);
    let run = TempDir::new("run4");
    let home = TempDir::new("home4");
    let server = start_echo(&lab, &run);
    let folder = home.path().join("wireshark/extcap");
    let out = Command::new(BYPASS).args(["extcap", "--install"]).arg(&folder).output().unwrap();
    assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    let env = |cmd: &mut Command| {
        cmd.env("HOME", home.env()).env("XDG_CONFIG_HOME", home.env()).env("BYPASS_RUN_DIR", run.env());
    };
    let name = format!("bypass-{}-0", server.pid());

    let mut list = Command::new("tshark");
    list.arg("-D");
    env(&mut list);
    let listed = list.output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.lines().any(|l| l.contains(&name)), "tshark -D does not list {name}: {listed}");

    let file = home.path().join("extcap.pcapng");
    let mut cap = Command::new("tshark");
    // The capture filter goes to the extcap, which has the stack apply it.
    cap.args(["-i", &name, "-f", "port 7", "-a", "duration:4", "-w"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    env(&mut cap);
    let tshark = Guard(Some(cap.spawn().expect("spawn tshark -i")));
    std::thread::sleep(Duration::from_millis(1500));
    let during = clients(&lab, 2, 3000);
    let (status, err) = tshark.wait(Duration::from_secs(15));
    assert!(status.success(), "tshark -i {name}: {status}: {err}");

    let text = Command::new("tshark").arg("-r").arg(&file).args(tshark_args()).output().unwrap();
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let frames = parse_frames(&String::from_utf8_lossy(&text.stdout));
    assert_frames(&frames, &during);
    assert!(frames.iter().all(|f| f.ports.0 == 7 || f.ports.1 == 7), "frames beside the filter port 7");
    eprintln!("{} frames through the extcap", frames.len());

    // Wireshark checks capture filters with the extcap: silence for one we apply, a reason
    // for one we cannot.
    let check = |filter: &str| {
        let out = Command::new(BYPASS)
            .args(["extcap", "--extcap-interface", &name, "--extcap-capture-filter", filter])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(check("port 7 and host 10.0.0.1"), "");
    assert!(check("tcp port 7").contains("use a display filter"));
    server.stop().assert_clean_exit();
}

/// Run `bypass capture` with `args` against the run directory `run`, expect a refusal and
/// return it.
fn capture_refused(run: &Path, args: &[&str]) -> String {
    let out = Command::new(BYPASS)
        .arg("capture")
        .args(args)
        .env("BYPASS_RUN_DIR", run)
        .stdout(Stdio::piped())
        .output()
        .expect("run bypass capture");
    assert!(!out.status.success(), "bypass capture {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim().lines().count(), 1, "not one sentence: {err}");
    err
}

#[test]
fn refusals_are_one_sentence() {
    // No lab needed: an empty run directory, and this test process as a pid that is no stack.
    let run = TempDir::new("refusals");
    let err = capture_refused(run.path(), &["-w", "-"]);
    assert!(err.contains("no running bypass stack") && err.contains("bypass echo"), "{err}");
    let me = std::process::id().to_string();
    let err = capture_refused(run.path(), &[&me, "-w", "-"]);
    assert!(err.contains("is not a running bypass stack"), "{err}");
    // Two shards of one process: which one?
    for shard in [0, 1] {
        let path = run.path().join(format!("{me}.{shard}.sock"));
        std::mem::forget(std::os::unix::net::UnixListener::bind(&path).unwrap());
    }
    let err = capture_refused(run.path(), &[&me]);
    assert!(err.contains("runs 2 stacks") && err.contains("--shard"), "{err}");
    let err = capture_refused(run.path(), &[&me, "--shard", "5"]);
    assert!(err.contains("has no stack 5") && err.contains("0, 1"), "{err}");
}
