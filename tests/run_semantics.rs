//! What a program sees of its sockets under `bypass run`, call by call, against Linux's
//! behaviour: one Python program runs in the lab's bypass namespace under `bypass run` and
//! talks to kernel servers in the peer namespace, and prints `ok NAME` for each check that
//! holds (a failed check raises, and its traceback is shown). Checked:
//!
//! - non-blocking `connect`: `EINPROGRESS`, then writable with `SO_ERROR` 0; to a port
//!   nobody listens on, `SO_ERROR` is `ECONNREFUSED` (the peer's RST);
//! - `MSG_PEEK`, `FIONREAD`, `MSG_WAITALL`, `MSG_DONTWAIT` (`EAGAIN`), `sendmsg`/`recvmsg`
//!   with several buffers;
//! - `TCP_INFO`: state ESTABLISHED, an RTT, the bytes acknowledged and received;
//!   `TCP_NODELAY`, `SO_KEEPALIVE` and `TCP_KEEPIDLE` read back as set; `SO_TYPE`,
//!   `SO_ACCEPTCONN`; an unknown TCP option fails with `ENOPROTOOPT`;
//! - `getsockname`/`getpeername` on an IPv6 socket connected over IPv4 (mapped addresses);
//! - epoll, level- and edge-triggered and one-shot, with a pipe in the same instance;
//!   `select` and `poll` over our socket and a pipe;
//! - a signal interrupts a blocking `recv` (`EINTR`: Python's handler runs and raises);
//! - `dup`: the duplicate reads what the original's peer sends; closing the original
//!   leaves the connection up;
//! - `fork`: the child's calls on an inherited socket fail with `EOPNOTSUPP`, and the
//!   parent's connection is unharmed;
//! - a listener of ours accepts a kernel client, and `SO_RCVTIMEO` ends a blocking
//!   `accept` with `EAGAIN`; closed with `SO_LINGER` at zero seconds, the connection is
//!   reset;
//! - `epoll_pwait2` (called through `ctypes`) sees our socket.
//!
//! Needs root, network namespaces and python3 (under `CI=true`, missing ones fail).

mod common;

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bypass_lab::testlab::{Lab, LabConfig, lab_available};

/// The peer's echo server (Python, kernel sockets): echoes each connection until EOF.
const PEER_ECHO: &str = r#"
import socket, threading, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 9000)); s.listen(64)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The program under `bypass run`. `PEER` and `PEER6` are the peer's addresses; `OURS`
/// ours; the kernel client for the listener check connects to port 9100 after `listening`
/// is printed.
const PROGRAM: &str = r#"
import errno, fcntl, os, select, signal, socket, struct, sys, termios, time
PEER, PEER6, OURS = sys.argv[1], sys.argv[2], sys.argv[3]
def ok(name): print("ok", name, flush=True)

# Non-blocking connect, then SO_ERROR.
s = socket.socket(); s.setblocking(False)
assert s.connect_ex((PEER, 9000)) == errno.EINPROGRESS
_, w, _ = select.select([], [s], [], 5); assert w == [s]
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
ok("nonblocking-connect")
r = socket.socket(); r.setblocking(False)
assert r.connect_ex((PEER, 9001)) == errno.EINPROGRESS
select.select([], [r], [], 5)
assert r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
r.close(); ok("refused-so-error")
s.setblocking(True)

# Data calls.
s.sendall(b"abcdef")
assert s.recv(3, socket.MSG_PEEK | socket.MSG_WAITALL) == b"abc"
time.sleep(0.1)
n = struct.unpack("i", fcntl.ioctl(s, termios.FIONREAD, b"\0\0\0\0"))[0]
assert n == 6, n
assert s.recv(6, socket.MSG_WAITALL) == b"abcdef"
try:
    s.recv(10, socket.MSG_DONTWAIT); raise AssertionError("no EAGAIN")
except BlockingIOError:
    pass
ok("peek-fionread-waitall-dontwait")
s.sendmsg([b"one ", b"two ", b"three"])
buf1, buf2 = bytearray(6), bytearray(20)
time.sleep(0.1)
got = s.recvmsg_into([buf1, buf2])[0]
assert bytes(buf1) + bytes(buf2[:got - 6]) == b"one two three", (buf1, buf2, got)
ok("sendmsg-recvmsg")

# Options and TCP_INFO.
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
state = info[0]
rtt, rttvar = struct.unpack_from("II", info, 68)
acked, received = struct.unpack_from("QQ", info, 120)
assert state == 1, state
assert rtt > 0, rtt
assert acked >= 6 + 13, acked
assert received == 6 + 13, received
ok("tcp-info")
try:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno"); raise AssertionError("accepted")
except OSError as e:
    assert e.errno == errno.ENOPROTOOPT, e
ok("unsupported-option")

# IPv6 socket to an IPv4 peer: mapped addresses.
m = socket.socket(socket.AF_INET6)
m.connect(("::ffff:" + PEER, 9000))
assert m.getpeername()[0] == "::ffff:" + PEER, m.getpeername()
assert m.getsockname()[0] == "::ffff:" + OURS, m.getsockname()
m.sendall(b"x"); assert m.recv(1) == b"x"
ok("mapped-addresses")
v6 = socket.create_connection((PEER6, 9000))
v6.sendall(b"v6"); assert v6.recv(2) == b"v6"
v6.close(); ok("ipv6")

# epoll: level, edge, one-shot, with a pipe.
ep = select.epoll()
pr, pw = os.pipe()
ep.register(s, select.EPOLLIN)
ep.register(pr, select.EPOLLIN)
assert ep.poll(0.2) == []
s.sendall(b"lvl")
time.sleep(0.1)
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]   # level: again, unread
assert s.recv(3) == b"lvl"
os.write(pw, b"p")
assert ep.poll(1) == [(pr, select.EPOLLIN)]
os.read(pr, 1)
ep.modify(s, select.EPOLLIN | select.EPOLLET)
s.sendall(b"e1"); time.sleep(0.1)
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]
assert ep.poll(0.2) == []                             # edge: not again
s.sendall(b"e2"); time.sleep(0.1)
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]   # new data: a new edge
assert s.recv(10) == b"e1e2"
ep.modify(s, select.EPOLLIN | select.EPOLLONESHOT)
s.sendall(b"o"); time.sleep(0.1)
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]
assert ep.poll(0.2) == []                             # one-shot: disarmed
ep.modify(s, select.EPOLLIN)
assert ep.poll(1) == [(s.fileno(), select.EPOLLIN)]
assert s.recv(1) == b"o"
ep.unregister(s); ep.close()
ok("epoll")
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Event(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]
ep2 = select.epoll(); ep2.register(s, select.EPOLLIN)
s.sendall(b"p2"); time.sleep(0.1)
evs = (Event * 4)(); ts = (ctypes.c_long * 2)(1, 0)
n = libc.epoll_pwait2(ep2.fileno(), evs, 4, ts, None)
assert n == 1 and evs[0].data & 0xffffffff == s.fileno(), (n, evs[0].data)  # data.fd: the low 32 bits
assert s.recv(2) == b"p2"
ep2.close(); ok("epoll-pwait2")
os.write(pw, b"q"); s.sendall(b"z"); time.sleep(0.1)
r_, _, _ = select.select([s, pr], [], [], 1)
assert sorted(r_, key=lambda f: f if isinstance(f, int) else f.fileno()) == sorted([s, pr], key=lambda f: f if isinstance(f, int) else f.fileno()), r_
p = select.poll(); p.register(s, select.POLLIN); p.register(pr, select.POLLIN)
assert sorted(fd for fd, _ in p.poll(1000)) == sorted([s.fileno(), pr])
s.recv(1); os.read(pr, 1)
ok("select-poll")

# A signal interrupts a blocking recv.
class Alarm(Exception): pass
def on_alarm(sig, frame): raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.3)
t = time.monotonic()
try:
    s.recv(10); raise AssertionError("recv returned")
except Alarm:
    pass
assert time.monotonic() - t < 2
ok("eintr")

# dup: both descriptors, one connection.
d = os.dup(s.fileno())
s.sendall(b"dup")
assert os.read(d, 3) == b"dup"
os.close(d)
s.sendall(b"still"); assert s.recv(5) == b"still"
ok("dup")

# fork: the child may not use the parent's socket; the parent's stays up.
pid = os.fork()
if pid == 0:
    try:
        s.send(b"child"); os._exit(1)
    except OSError as e:
        os._exit(0 if e.errno == errno.EOPNOTSUPP else 2)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
s.sendall(b"parent"); assert s.recv(6) == b"parent"
ok("fork")

# A listener of ours.
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 9100)); l.listen(8)
assert l.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
l.settimeout(0.3)
try:
    l.accept(); raise AssertionError("accepted")
except socket.timeout:
    pass
l.settimeout(None)
l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
t = time.monotonic()
try:
    l.accept(); raise AssertionError("accepted")
except BlockingIOError:
    pass
assert 0.2 < time.monotonic() - t < 2
l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
print("listening", flush=True)
c, a = l.accept()
assert a[0] == PEER, a
c.sendall(c.recv(5))
# SO_LINGER at zero seconds: close resets the connection (the client sees RST).
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
c.close(); l.close()
ok("listener")
s.close()
print("done", flush=True)
"#;

const CHECKS: &[&str] = &[
    "nonblocking-connect",
    "refused-so-error",
    "peek-fionread-waitall-dontwait",
    "sendmsg-recvmsg",
    "tcp-info",
    "unsupported-option",
    "mapped-addresses",
    "ipv6",
    "epoll",
    "epoll-pwait2",
    "select-poll",
    "eintr",
    "dup",
    "fork",
    "listener",
];

/// Kills and reaps a child on every exit path.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the peer's echo server (port 9000) and wait until it accepts.
fn peer_echo(lab: &Lab) -> Guard {
    let guard = Guard(
        lab.peer_cmd("python3").args(["-c", PEER_ECHO]).stdin(Stdio::null()).spawn().expect("the peer's echo server"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let echo = SocketAddr::new(lab.peer_ip.into(), 9000);
    while lab.in_peer(|| TcpStream::connect_timeout(&echo, Duration::from_millis(200))).is_err() {
        assert!(Instant::now() < deadline, "the peer's echo server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    guard
}

fn python_available(test: &str) -> bool {
    let found = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: python3 is not installed (CI=true: every test must run)");
        }
        eprintln!("skipping {test}: python3 is not installed (apt-get install -y python3)");
    }
    found
}

#[test]
fn a_python_program_sees_linux_socket_semantics() {
    let test = "run_semantics";
    if !lab_available(test) || !python_available(test) {
        return;
    }
    common::init_log();
    let _serial = common::serial();
    let lab = Lab::with_config(LabConfig { ipv6: true, ..LabConfig::new(test) }).expect("create an IPv6 lab");
    common::peer_without_tail_loss_probes(&lab);
    let _peer = peer_echo(&lab);
    let mut cmd = lab.bypass_cmd(env!("CARGO_BIN_EXE_bypass"));
    cmd.env("BYPASS_RUN_DIR", common::TEST_RUN_DIR);
    cmd.args(["run", "--iface", &lab.bypass_if])
        .args(["--ip", &format!("{}/{}", lab.bypass_ip, lab.prefix_len)])
        .args(["--ip", &format!("{}/{}", lab.bypass_ip6, lab.prefix6_len)])
        .args(["--", "python3", "-c", PROGRAM])
        .args([lab.peer_ip.to_string(), lab.peer_ip6.to_string(), lab.bypass_ip.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = Guard(cmd.spawn().expect("bypass run python3"));
    let mut guard = child;
    let stdout = guard.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            seen.push(line);
        }
        seen
    });
    // The listener check waits for a kernel client once it says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listening = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line == "listening" => break true,
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(_) if Instant::now() > deadline => break false,
            Err(_) => {}
        }
    };
    let ours = SocketAddr::new(lab.bypass_ip.into(), 9100);
    let mut client =
        listening.then(|| lab.in_peer(|| TcpStream::connect_timeout(&ours, Duration::from_secs(5))).ok()).flatten();
    if let Some(c) = client.as_mut() {
        use std::io::{Read, Write};
        c.write_all(b"hello").expect("write to our listener");
        let mut back = [0u8; 5];
        c.read_exact(&mut back).expect("read the echo");
        assert_eq!(&back, b"hello");
        c.set_read_timeout(Some(Duration::from_secs(10))).expect("a read timeout");
        match c.read(&mut back) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("after close with SO_LINGER at zero, expected a reset, got {other:?}"),
        }
    }
    let status = loop {
        if let Some(s) = guard.0.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline + Duration::from_secs(10) {
            eprintln!("the program did not finish: killed");
            let _ = guard.0.kill();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let seen = lines.join().expect("stdout reader");
    let missing: Vec<&&str> = CHECKS.iter().filter(|c| !seen.iter().any(|l| l == &format!("ok {c}"))).collect();
    assert!(
        missing.is_empty() && status.success() && seen.last().is_some_and(|l| l == "done"),
        "checks that did not hold: {missing:?}; exit {status}\nstdout:\n{}\nstderr:\n{stderr}",
        seen.join("\n")
    );
}

/// The program of the busy-polling test: its calls poll the stack without sleeping in the
/// kernel, so only our signal trampoline can tell them a handler ran.
const BUSY_PROGRAM: &str = r#"
import select, signal, socket, sys, time
PEER = sys.argv[1]
def ok(name): print("ok", name, flush=True)
class Alarm(Exception): pass
def on_alarm(sig, frame): raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
s = socket.create_connection((PEER, 9000))
ep = select.epoll(); ep.register(s, select.EPOLLIN)
signal.setitimer(signal.ITIMER_REAL, 0.3)
t = time.monotonic()
try:
    ep.poll(); raise AssertionError("epoll returned")
except Alarm:
    pass
assert time.monotonic() - t < 2
ok("busy-epoll-eintr")
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    s.recv(10); raise AssertionError("recv returned")
except Alarm:
    pass
ok("busy-recv-eintr")
# What one turn writes leaves at the next poll; a program that then sleeps outside any
# socket call (nanosleep is not intercepted) still gets it sent, by the helper.
s.sendall(b"y" * 100000)
time.sleep(1)
got = b""
while True:
    try:
        d = s.recv(1 << 20, socket.MSG_DONTWAIT)
    except BlockingIOError:
        break
    got += d
assert got == b"y" * 100000, len(got)
ok("busy-deferred-transmit")
print("done", flush=True)
"#;

const BUSY_CHECKS: &[&str] = &["busy-epoll-eintr", "busy-recv-eintr", "busy-deferred-transmit"];

#[test]
fn a_busy_polling_program_is_interrupted_by_signals_and_its_writes_leave() {
    let test = "run_semantics_busy";
    if !lab_available(test) || !python_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    let _peer = peer_echo(&lab);
    let mut cmd = lab.bypass_cmd(env!("CARGO_BIN_EXE_bypass"));
    cmd.env("BYPASS_RUN_DIR", common::TEST_RUN_DIR);
    cmd.args(["run", "--busy-poll", "--iface", &lab.bypass_if])
        .args(["--ip", &format!("{}/{}", lab.bypass_ip, lab.prefix_len)])
        .args(["--", "timeout", "30", "python3", "-c", BUSY_PROGRAM, &lab.peer_ip.to_string()]);
    let out = cmd.output().expect("bypass run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&&str> = BUSY_CHECKS.iter().filter(|c| !stdout.lines().any(|l| l == format!("ok {c}"))).collect();
    assert!(
        missing.is_empty() && out.status.success() && stdout.lines().last() == Some("done"),
        "checks that did not hold: {missing:?}; exit {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
