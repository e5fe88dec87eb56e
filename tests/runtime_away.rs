//! An application that stops calling in (the "away" tests): our server runtime over AF_XDP
//! on one queue, against the Linux kernel in the lab's peer namespace, while the
//! application's only thread sleeps for 5 s inside no socket call at all. Meanwhile:
//! - the kernel's bulk sender on connection A (32 MiB, far more than our window; the
//!   application read the first 4 MiB and left) gets ACKs all the way to the right edge of
//!   the window we offered when the application left, ends stalled by that window (not
//!   waiting for ACKs), and retransmits nothing (TCP_INFO on its socket; `nstat` in its
//!   namespace);
//! - the kernel's keepalive probes on the idle connection B (SO_KEEPALIVE, 1 s idle, 1 s
//!   interval, 2 probes: unanswered, B would die of ETIMEDOUT after 3 s) are answered;
//! - 20 new kernel clients complete their handshakes into the accept backlog without a SYN
//!   retransmission, and the 1 KiB request each sends at once is ACKed.
//!
//! Then the application returns: it echoes a request on B, accepts the 20 and echoes each
//! one's request, and reads A to the end, byte-exact. Every failed point is listed in one
//! panic message, with the figures.
//!
//! In-thread mode ([`Mode::InThread`]), where the runtime's helper thread keeps the protocol
//! moving while no application thread is inside, and shard mode ([`Mode::Shard`]), where
//! the stack has a thread of its own anyway.
//!
//! Needs root: without it each test says why it skips, except under `CI=true`, where it
//! fails.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, lab_available};
use bypass_runtime::{Mode, Runtime, RuntimeOptions, TcpListener};
use bypass_stack::StackConfig;
use common::Backend;

/// How long the application stays away.
const AWAY: Duration = Duration::from_secs(5);
/// What the kernel sends on connection A.
const TOTAL: usize = 32 << 20;
/// What the application reads of A before it leaves.
const HEAD: usize = 4 << 20;
/// Kernel clients that connect while the application is away.
const NEW: usize = 20;
/// The request each of them sends at once.
const REQUEST: usize = 1024;
/// What the kernel asks on B once the application is back.
const PING: &[u8] = b"still there after the keepalives?\n";
/// `tcpi_state` of an established connection (the kernel's `TCP_ESTABLISHED`).
const TCP_ESTABLISHED: u8 = 1;
/// The bound of every blocking call of the test, so a broken run ends with a message.
const TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn in_thread_stack_keeps_the_protocol_moving_while_the_application_is_away() {
    away("away-it", Mode::InThread);
}

#[test]
fn shard_stack_keeps_the_protocol_moving_while_the_application_is_away() {
    away("away-sh", Mode::Shard);
}

/// Start a runtime in `mode` on the one queue of the lab's bypass interface.
fn runtime(lab: &Lab, mode: Mode) -> Runtime {
    let devices = lab
        .in_bypass(|| XdpDevice::open_queues(XdpConfig::new(&lab.bypass_if, lab.bypass_ip), &[0]))
        .expect("AF_XDP on queue 0");
    let config = StackConfig::new(lab.bypass_ip, lab.prefix_len, [5; 16]);
    Runtime::start(devices, config, RuntimeOptions { mode, ..Default::default() }).expect("runtime")
}

/// What the application thread tells the test.
enum Says {
    /// It accepted connection A.
    AcceptedA,
    /// It read the first [`HEAD`] bytes of A and leaves now.
    Away,
}

/// Run the scenario of the module docs with the runtime in `mode`.
fn away(test: &str, mode: Mode) {
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 1);
    let runtime = runtime(&lab, mode);
    let mut listener = runtime.listen(common::PORT).expect("listen");
    listener.set_timeout(Some(TIMEOUT));
    let server = common::server_addr(&lab);
    let data = common::data(0xa11a, TOTAL);
    let written = AtomicU64::new(0);
    let (say, heard) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let mut failures: Vec<String> = Vec::new();

    std::thread::scope(|scope| {
        let data = &data[..];
        let written = &written;
        let app = scope.spawn(move || application(listener, data, say, released));

        // Connection A, and the kernel's sender on it, writing for as long as it may.
        let a = common::peer_connect(&lab, server);
        let mut w = a.try_clone().expect("a second handle of A");
        let writer = scope.spawn(move || -> Result<(), String> {
            w.set_write_timeout(Some(3 * TIMEOUT)).map_err(|e| e.to_string())?;
            for chunk in data.chunks(64 << 10) {
                w.write_all(chunk).map_err(|e| format!("after {} bytes: {e}", written.load(Ordering::SeqCst)))?;
                written.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            w.shutdown(Shutdown::Write).map_err(|e| format!("shutdown: {e}"))
        });
        let hear = |what: &str| match heard.recv_timeout(3 * TIMEOUT) {
            Ok(says) => says,
            Err(_) => panic!("the application thread did not say it {what} (it ended or hung)"),
        };
        assert!(matches!(hear("accepted A"), Says::AcceptedA));

        // Connection B: idle, with the kernel's keepalive probing it every second.
        let b = common::peer_connect(&lab, server);
        keepalive(&b, 1, 1, 2);
        b.set_read_timeout(Some(TIMEOUT)).unwrap();

        assert!(matches!(hear("read the head of A and left"), Says::Away));
        let left = Instant::now();
        let a0 = tcp_info(&a);
        let written0 = written.load(Ordering::SeqCst);
        let (cpu0, _) = stack_threads_cpu();
        let before = common::peer_nstat(&lab);
        let dropped0 = common::peer_link_tx_dropped(&lab);

        // New connections while the application is away: each must connect at once (a
        // second is the kernel's first SYN retransmission) and send its request.
        let connecting = Instant::now();
        let (clients, slowest, failed) = lab.in_peer(|| {
            let (mut clients, mut slowest, mut failed) = (Vec::new(), Duration::ZERO, None);
            for i in 0..NEW {
                let t = Instant::now();
                match std::net::TcpStream::connect_timeout(&server, Duration::from_secs(2)) {
                    Ok(mut s) => {
                        slowest = slowest.max(t.elapsed());
                        if let Err(e) = s.write_all(&request(i)) {
                            failed = Some(format!("new connection {i}: write its request: {e}"));
                            break;
                        }
                        clients.push(s);
                    }
                    Err(e) => {
                        failed = Some(format!("new connection {i}: connect failed after {:?}: {e}", t.elapsed()));
                        break;
                    }
                }
            }
            (clients, slowest, failed)
        });
        let connected_in = connecting.elapsed();
        failures.extend(failed);
        if slowest >= Duration::from_secs(1) {
            failures.push(format!(
                "a new connection took {slowest:?} to connect while the application was away: its SYN was retransmitted"
            ));
        }

        // The end of the away period: look at everything before the application returns.
        std::thread::sleep((left + AWAY).saturating_duration_since(Instant::now()));
        let a1 = tcp_info(&a);
        let written1 = written.load(Ordering::SeqCst);
        let b1 = tcp_info(&b);
        let acked: Vec<u64> = clients.iter().map(|c| data_acked(&tcp_info(c))).collect();
        let changes = common::peer_changes(&lab, &before);
        let dropped = common::peer_link_tx_dropped(&lab) - dropped0;
        let (cpu1, threads) = stack_threads_cpu();
        let cpu = cpu1.saturating_sub(cpu0);
        let away_for = left.elapsed();
        release.send(clients.len()).expect("the application thread waits to return");

        // A: ACKed to the right edge of the window offered when the application left.
        let (acked0, acked1) = (data_acked(&a0), data_acked(&a1));
        let edge = acked0 + u64::from(a0.tcpi_snd_wnd);
        let acked_away = acked1 - acked0;
        let offered = edge as i64 - HEAD as i64;
        let retrans_a = a1.tcpi_total_retrans - a0.tcpi_total_retrans;
        eprintln!(
            "[{test}] away {away_for:?}, the stack's own threads ({threads}) busy {cpu:?} of it. A: window \
             offered when the application left {offered} bytes beyond what it had read ({} still open then); \
             ACKed while away {acked_away} bytes, to {} beyond \
             the application's read point; the kernel's writes took {} bytes while away; at the end its \
             window {} bytes, unacked {} segments (MSS {}); retransmitted {retrans_a} segments",
            a0.tcpi_snd_wnd,
            acked1 as i64 - HEAD as i64,
            written1 - written0,
            a1.tcpi_snd_wnd,
            a1.tcpi_unacked,
            a1.tcpi_snd_mss,
        );
        eprintln!(
            "[{test}] peer's TCP counters while away: {changes}; veth drops before our device: {dropped}. \
             New connections: {} of {NEW} in {connected_in:?} (slowest {slowest:?}), requests ACKed {acked:?}. \
             B: state {} with {} unanswered probes",
            clients.len(),
            b1.tcpi_state,
            b1.tcpi_probes,
        );
        if offered < 64 << 10 {
            failures
                .push(format!("A: we offered only {offered} bytes of window (test premise: a window worth filling)"));
        }
        if acked1 < edge {
            failures.push(format!(
                "A: ACKed only {acked_away} bytes while away, short of the {} bytes of window open when the \
                 application left",
                a0.tcpi_snd_wnd
            ));
        }
        if a1.tcpi_snd_wnd >= a1.tcpi_snd_mss || a1.tcpi_unacked > 0 {
            failures.push(format!(
                "A: at the end of the away time the kernel's sender was not stalled by our full window with \
                 everything ACKed: window {} bytes, {} segments unacknowledged",
                a1.tcpi_snd_wnd, a1.tcpi_unacked
            ));
        }
        if let Err(e) = common::verdict(Backend::Xdp, &changes, 0, dropped) {
            failures.push(format!("while away: {e} (A alone: {retrans_a})"));
        }
        let probes = changes.get("TcpExtTCPKeepAlive");
        let b_alive = changes.get("TcpExtTCPAbortOnTimeout") == 0 && b1.tcpi_state == TCP_ESTABLISHED;
        if b_alive && probes < 3 {
            failures
                .push(format!("B: the kernel sent {probes} keepalive probes in {AWAY:?} (test premise: at least 3)"));
        }
        if !b_alive {
            failures.push(format!(
                "B: the kernel gave up on it while away (keepalive probes unanswered): state {}, \
                 TcpExtTCPAbortOnTimeout+{}",
                b1.tcpi_state,
                changes.get("TcpExtTCPAbortOnTimeout")
            ));
        }
        if acked.iter().any(|&n| n != REQUEST as u64) {
            failures.push(format!("new connections: requests not all ACKed while away: {acked:?} bytes"));
        }

        // The application is back: B answers, the new connections are echoed.
        let back = Instant::now();
        let mut got = vec![0u8; PING.len()];
        match (&b).write_all(PING).and_then(|()| (&b).read_exact(&mut got)) {
            Ok(()) if got == PING => {}
            Ok(()) => failures.push(format!("B: echo differs: {}", common::first_difference(PING, &got))),
            Err(e) => failures.push(format!("B: request after the away time: {e} (ETIMEDOUT: keepalives unanswered)")),
        }
        for (i, c) in clients.iter().enumerate() {
            let mut got = vec![0u8; REQUEST];
            let read = c.set_read_timeout(Some(TIMEOUT)).and_then(|()| (&*c).read_exact(&mut got));
            match read {
                Ok(()) if got == request(i) => {}
                Ok(()) => failures.push(format!("new connection {i}: echo differs")),
                Err(e) => failures.push(format!("new connection {i}: echo: {e}")),
            }
        }
        match writer.join().expect("the kernel's writer on A") {
            Ok(()) => eprintln!("[{test}] A: the kernel wrote all {TOTAL} bytes {:?} after the return", back.elapsed()),
            Err(e) => failures.push(format!("A: the kernel's writer failed: {e}")),
        }
        failures.extend(app.join().expect("the application thread"));
        eprintln!("[{test}] the application was done {:?} after its return", back.elapsed());
    });

    let counters = runtime.stop().expect("clean stop");
    let c = &counters[0];
    eprintln!(
        "[{test}] stack: accepted {}, resets out {}, timed out {}, frames in {} out {}",
        c.connections_accepted, c.tcp_resets_out, c.connections_timed_out, c.rx_frames, c.tx_frames
    );
    assert!(failures.is_empty(), "[{test}] {} failures:\n- {}", failures.len(), failures.join("\n- "));
}

/// The application: accept A and B, read the head of A, then call nothing for [`AWAY`] (and
/// until the test releases it, with how many new connections to accept). Back, echo one
/// request on B, accept and echo the new connections, and read A to the end. Return what
/// went wrong.
fn application(
    listener: TcpListener,
    data: &[u8],
    say: mpsc::Sender<Says>,
    back: mpsc::Receiver<usize>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let (mut a, _) = listener.accept().expect("accept A");
    a.set_read_timeout(Some(TIMEOUT)).unwrap();
    say.send(Says::AcceptedA).unwrap();
    let (mut b, _) = listener.accept().expect("accept B");
    b.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0;
    while at < HEAD {
        let n = a.read(&mut buf[..(HEAD - at).min(64 << 10)]).expect("read the head of A");
        assert!(n > 0, "A ended after {at} bytes");
        assert!(
            buf[..n] == data[at..at + n],
            "A differs at {at}+: {}",
            common::first_difference(&data[at..at + n], &buf[..n])
        );
        at += n;
    }

    say.send(Says::Away).unwrap();
    std::thread::sleep(AWAY);
    let Ok(new) = back.recv() else { return vec!["the test ended before releasing the application".into()] };

    let mut ping = vec![0u8; PING.len()];
    match b.read_exact(&mut ping).and_then(|()| b.write_all(&ping)) {
        Ok(()) => {}
        Err(e) => failures.push(format!("B, the application's side: {e}")),
    }
    for i in 0..new {
        let accepted = listener.accept();
        let echoed = accepted.and_then(|(mut s, _)| {
            s.set_read_timeout(Some(TIMEOUT))?;
            let mut req = vec![0u8; REQUEST];
            s.read_exact(&mut req)?;
            s.write_all(&req)
        });
        if let Err(e) = echoed {
            failures.push(format!("new connection {i} of {new}, the application's side: {e}"));
            break;
        }
    }
    loop {
        match a.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if at + n <= data.len() && buf[..n] == data[at..at + n] => at += n,
            Ok(n) => {
                let end = (at + n).min(data.len());
                failures.push(format!(
                    "A: {} bytes read at {at}: {}",
                    n,
                    common::first_difference(&data[at..end], &buf[..n])
                ));
                return failures;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                failures.push(format!("A: read after {at} of {TOTAL} bytes: {e}"));
                return failures;
            }
        }
    }
    if at != TOTAL {
        failures.push(format!("A: end of stream after {at} of {TOTAL} bytes"));
    }
    failures
}

/// Return the request new connection `i` sends.
fn request(i: usize) -> Vec<u8> {
    common::data(0x5eed ^ i as u64, REQUEST)
}

/// Return the kernel's TCP_INFO of `stream`.
#[allow(unsafe_code)]
fn tcp_info(stream: &std::net::TcpStream) -> libc::tcp_info {
    // SAFETY: `tcp_info` is integers only, for which all zero bits are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is an open socket owned by `stream`, alive for the call; the
    // kernel writes at most `len` bytes, the size of `info`, which lives across the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt(TCP_INFO): {}", std::io::Error::last_os_error());
    info
}

/// Return the CPU time the runtime's own threads (`bypass-helper-*`, `bypass-shard-*`) of
/// this process have used so far, from `/proc/self/task/*/stat` (in clock ticks), and how
/// many there are.
fn stack_threads_cpu() -> (Duration, usize) {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let (mut ticks, mut threads) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.starts_with("bypass-") {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // After the command in parentheses: state is field 3, utime and stime 14 and 15.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
        ticks += fields.iter().sum::<u64>();
        threads += 1;
    }
    (Duration::from_millis(ticks * 1000 / hz), threads)
}

/// Return the data bytes the peer has ACKed, as `info` says (`tcpi_bytes_acked` counts the
/// SYN too).
fn data_acked(info: &libc::tcp_info) -> u64 {
    info.tcpi_bytes_acked.saturating_sub(1)
}

/// Turn on the kernel's keepalive on `stream`: a probe after `idle` seconds without a
/// segment from us, then every `interval` seconds; `count` unanswered probes end it.
fn keepalive(stream: &std::net::TcpStream, idle: i32, interval: i32, count: i32) {
    set_option(stream, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1, "SO_KEEPALIVE");
    set_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle, "TCP_KEEPIDLE");
    set_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval, "TCP_KEEPINTVL");
    set_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, count, "TCP_KEEPCNT");
}

/// Set the integer socket option `level`/`name` (called `what`) of `stream` to `value`.
#[allow(unsafe_code)]
fn set_option(stream: &std::net::TcpStream, level: i32, name: i32, value: i32, what: &str) {
    // SAFETY: the descriptor is an open socket owned by `stream`, alive for the call; the
    // option value points at an `i32` that lives across the call, and the length passed is
    // its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt({what}): {}", std::io::Error::last_os_error());
}
