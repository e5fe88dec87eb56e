//! Our slow start against Linux's through a real bottleneck queue (issue 29, "Against Linux,
//! in namespaces"): same path, same run, one after the other.
//!
//! A routed lab ([`RoutedLab`], MTU 1500 everywhere, no path MTU games): our stack in A on
//! AF_PACKET, kernel routers R1 and R2, a kernel receiver in B, and a kernel host `A'` beside
//! A behind R1 ([`RoutedLab::add_kernel_sender`]). R1's egress towards R2 is the bottleneck:
//! `tc qdisc replace dev r1r2 root tbf rate 100mbit burst 3028 limit 1514000`, a token bucket
//! of two full frames and a tail-drop queue of 1000 of them (tbf reports its latency as
//! 121 ms: a full queue is 120 ms of delay at 100 Mbit/s). This kernel has no netem, so the
//! path has no delay of its own: the base RTT is the veths' (tens of microseconds) and every
//! millisecond more is queue. Slow start that does not leave before the queue overflows
//! ends in a burst of tail drops.
//!
//! The senders: our stack in A, then Linux in `A'` (CUBIC with HyStart, ACK train and delay,
//! set on the socket with `TCP_CONGESTION`: a new namespace inherits the machine's default,
//! which is BBR here, and may not default to CUBIC), each sending 8 MiB to a kernel receiver
//! in B, the FIN right after the data. For each the test takes the bottleneck's drops
//! (`tc -s qdisc`'s `dropped`, a delta over the transfer), the receiver's goodput, the queue
//! delay (ours from the RTT samples our `Stats` keeps: `max_rtt - min_rtt`, and the smoothed
//! RTT polled every millisecond; Linux's from `TCP_INFO`, `tcpi_rtt` polled every
//! millisecond against `tcpi_min_rtt`), cwnd and ssthresh when slow start ended (the first
//! poll that saw ssthresh set), and which HyStart signal ended Linux's (`nstat`'s
//! `TcpExtTCPHystartTrainDetect` and `DelayDetect` in `A'`). It prints a table of both and
//! asserts what is robust: both transfers byte-exact, both goodputs within the bottleneck's
//! rate (the queue is on the path), and our drops at most `max(2 x Linux's, 100)`: the
//! issue's target is a slow start (HyStart++, RFC 9406, with Linux's ACK train) that leaves
//! before overflowing the queue.
//!
//! Needs root (skips with a message otherwise; fails under `CI=true`). Holds the test
//! binary's lock.

mod common;

use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_io::PacketDevice;
use bypass_lab::testlab::{RoutedConfig, RoutedLab, lab_available};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::Stats;

/// Bytes each sender sends.
const LEN: usize = 8 << 20;
const DEADLINE: Duration = Duration::from_secs(20);
/// The bottleneck's rate, Mbit/s.
const RATE_MBIT: u64 = 100;
/// A full frame as tbf counts it (`qdisc_pkt_len`: Ethernet header included).
const FRAME: u64 = 1514;
/// The bottleneck's queue, in full frames.
const QUEUE_FRAMES: u64 = 1000;
/// How often the RTT and the window are polled.
const POLL: Duration = Duration::from_millis(1);

/// What one sender's transfer showed.
#[derive(Debug, Default)]
struct Run {
    /// Tail drops at the bottleneck during the transfer.
    drops: u64,
    /// Packets the bottleneck sent during the transfer (data and anything else).
    sent: u64,
    /// From the receiver's accept to its EOF.
    elapsed: Duration,
    /// Smallest RTT the sender saw.
    min_rtt: Duration,
    /// Largest RTT sample (ours only: Linux exposes none).
    max_sample: Option<Duration>,
    /// Largest and mean smoothed RTT, polled every [`POLL`].
    max_srtt: Duration,
    mean_srtt: Duration,
    /// cwnd and ssthresh, segments, at the first poll that saw slow start over, and what
    /// ended it: "loss" if a segment had been retransmitted by then, else "no loss" for ours
    /// (our `Stats` do not say which HyStart signal it was) and Linux's HyStart counters'
    /// word ("train" or "delay").
    exit: Option<(u32, u32, &'static str)>,
    /// Segments retransmitted over the transfer.
    retransmits: u64,
}

impl Run {
    fn goodput_mbit(&self) -> f64 {
        LEN as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Smoothed-RTT polls: the largest and the mean.
#[derive(Default)]
struct SrttPolls {
    max: Duration,
    sum: Duration,
    count: u32,
}

impl SrttPolls {
    fn add(&mut self, srtt: Duration) {
        self.max = self.max.max(srtt);
        self.sum += srtt;
        self.count += 1;
    }

    fn mean(&self) -> Duration {
        self.sum.checked_div(self.count).unwrap_or_default()
    }
}

/// Run `tc ARGS` in R1's namespace; return its standard output.
fn tc(lab: &RoutedLab, args: &[&str]) -> String {
    let out = lab.r1_cmd("tc").args(args).output().expect("run tc");
    assert!(out.status.success(), "tc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Return the bottleneck qdisc's (packets sent, packets dropped) so far, from
/// `tc -s qdisc show`: " Sent 123 bytes 45 pkt (dropped 6, overlimits 7 requeues 0)".
fn qdisc_counts(lab: &RoutedLab) -> (u64, u64) {
    let out = tc(lab, &["-s", "qdisc", "show", "dev", &lab.r1_r2_if]);
    let number_after = |word: &str| -> u64 {
        let at = out.find(word).unwrap_or_else(|| panic!("no `{word}` in tc's output: {out}"));
        let digits: String = out[at + word.len()..].trim_start().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("no number after `{word}` in tc's output: {out}"))
    };
    assert!(out.contains("qdisc tbf"), "the bottleneck is not tbf: {out}");
    let sent = out.find(" pkt").map(|end| {
        let start = out[..end].rfind(' ').expect("a number before ` pkt`") + 1;
        out[start..end].parse::<u64>().unwrap_or_else(|_| panic!("packets sent in tc's output: {out}"))
    });
    (sent.unwrap_or_else(|| panic!("no ` pkt` in tc's output: {out}")), number_after("dropped"))
}

/// Frames the machine's CPUs dropped from their input backlogs (`/proc/net/softnet_stat`,
/// second column, summed over CPUs): a veth hands frames to its peer through that backlog
/// (`net.core.netdev_max_backlog`), a drop point in front of the bottleneck.
fn backlog_drops() -> u64 {
    let stat = std::fs::read_to_string("/proc/net/softnet_stat").expect("read /proc/net/softnet_stat");
    stat.lines().filter_map(|l| l.split_whitespace().nth(1)).filter_map(|h| u64::from_str_radix(h, 16).ok()).sum()
}

/// Accept one connection on `listener` and read it to the end; return the bytes and the
/// time from the accept to EOF.
fn receive_one(listener: &TcpListener) -> (Vec<u8>, Duration) {
    let (stream, _) = listener.accept().expect("accept in B");
    let start = Instant::now();
    let got = common::read_to_eof(&stream, DEADLINE).expect("read to EOF in B");
    (got, start.elapsed())
}

fn our_config(lab: &RoutedLab) -> StackConfig {
    let mut secret = [0u8; 16];
    common::Rng::new(0x7bf).fill(&mut secret);
    let mut config = StackConfig::new(lab.a_ip, lab.prefix_len, secret);
    config.gateway = Some(lab.r1_ip);
    config
}

/// Our stack on AF_PACKET on A's interface: connect to `server`, send `message` and shut
/// down as soon as it is all written (as the kernel sender does: the FIN follows the data,
/// so the receiver's EOF does not wait for a delayed ACK of the last segment), polling every
/// [`POLL`] at most until the FIN is acknowledged; close. Return the statistics then, the smoothed-RTT polls, and cwnd/ssthresh (bytes) at the first
/// poll that saw ssthresh set, with the retransmissions by then.
fn send_ours(
    iface: &str,
    config: StackConfig,
    server: SocketAddr,
    message: &[u8],
) -> (Stats, SrttPolls, Option<(u32, u32, u64)>) {
    let device = PacketDevice::open(iface).expect("open AF_PACKET on A");
    let mut stack = Stack::new(device, config);
    let deadline = Instant::now() + DEADLINE;
    let id = common::connect_established(&mut stack, server, deadline);
    let initial_ssthresh = stack.tcp_stats(id).expect("open").ssthresh;
    let (mut polls, mut exit, mut last_poll) = (SrttPolls::default(), None, Instant::now());
    let (mut sent, mut shut) = (0, false);
    loop {
        let stats = stack.tcp_stats(id).expect("open");
        // SYN, data and FIN acknowledged (`bytes_acked` counts the SYN and the FIN).
        if stats.bytes_acked == message.len() as u64 + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "stalled after {sent} bytes written, {} acknowledged", stats.bytes_acked);
        if last_poll.elapsed() >= POLL {
            last_poll = Instant::now();
            if let Some(srtt) = stats.srtt {
                polls.add(srtt);
            }
            if exit.is_none() && stats.ssthresh != initial_ssthresh {
                exit = Some((stats.cwnd, stats.ssthresh, stats.retransmits));
            }
        }
        if sent < message.len() {
            match stack.write(id, &message[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("write after {sent} bytes: {e}"),
            }
        }
        if sent == message.len() && !shut {
            stack.shutdown(id);
            shut = true;
        }
        stack.poll_wait(Some(POLL)).expect("poll");
    }
    let stats = stack.tcp_stats(id).expect("open");
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    stack.close(id);
    (stats, polls, exit)
}

/// `TCP_INFINITE_SSTHRESH` (include/net/tcp.h): slow start has not ended.
const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

fn micros(us: u32) -> Duration {
    Duration::from_micros(u64::from(us))
}

/// Linux in `A'`: send `message` over `stream`, polling its `TCP_INFO` every [`POLL`] until
/// `receiver` (B's reader) has it all. Return the last `TCP_INFO`, the smoothed-RTT polls,
/// cwnd/ssthresh (segments) at the first poll that saw ssthresh set with the
/// retransmissions by then, and what the receiver returned.
fn send_linux<T>(
    stream: &TcpStream,
    message: &[u8],
    receiver: std::thread::ScopedJoinHandle<'_, T>,
) -> (libc::tcp_info, SrttPolls, Option<(u32, u32, u32)>, T) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let (mut polls, mut exit) = (SrttPolls::default(), None);
            while !done.load(Ordering::Relaxed) {
                let info = common::tcp_info(stream);
                if info.tcpi_rtt > 0 {
                    polls.add(micros(info.tcpi_rtt));
                }
                if exit.is_none() && info.tcpi_snd_ssthresh < TCP_INFINITE_SSTHRESH {
                    exit = Some((info.tcpi_snd_cwnd, info.tcpi_snd_ssthresh, info.tcpi_total_retrans));
                }
                std::thread::sleep(POLL);
            }
            (polls, exit)
        });
        let mut writer = stream;
        writer.write_all(message).expect("the kernel sender's write");
        stream.shutdown(Shutdown::Write).expect("the kernel sender's shutdown");
        let received = receiver.join().expect("the receiver in B");
        done.store(true, Ordering::Relaxed);
        let (polls, exit) = poller.join().expect("the TCP_INFO poller");
        (common::tcp_info(stream), polls, exit, received)
    })
}

/// Return the kernel socket's congestion control (`TCP_CONGESTION`).
#[allow(unsafe_code)]
fn congestion_control_of(socket: &impl AsRawFd) -> String {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt(2) on a socket we hold open, into a buffer we own, with its size;
    // the kernel writes at most `len` bytes. The result is checked.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_CONGESTION: {}", std::io::Error::last_os_error());
    let name = &name[..len as usize];
    String::from_utf8_lossy(name.split(|&b| b == 0).next().unwrap_or_default()).into_owned()
}

/// Read the namespace's congestion control (`net.ipv4.tcp_congestion_control`).
fn congestion_control(mut sysctl: Command) -> String {
    let out = sysctl.args(["-n", "net.ipv4.tcp_congestion_control"]).output().expect("run sysctl");
    assert!(out.status.success(), "sysctl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn row(who: &str, r: &Run) -> String {
    let exit = r.exit.map_or("never".into(), |(cwnd, ssthresh, why)| format!("{cwnd}/{ssthresh} ({why})"));
    let queue = |rtt: Duration| ms(rtt.saturating_sub(r.min_rtt));
    format!(
        "| {who:<6} | {:>5} | {:>6.1} | {:>7} | {:>12} | {:>10} | {:>11} | {:>15} | {:>11} | {:>8} |",
        r.drops,
        r.goodput_mbit(),
        ms(r.min_rtt),
        r.max_sample.map_or("-".into(), queue),
        queue(r.max_srtt),
        queue(r.mean_srtt),
        exit,
        r.retransmits,
        r.sent,
    )
}

#[test]
fn our_slow_start_against_linux_through_a_tbf_bottleneck() {
    let test = "slow_start_tbf";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let _serial = common::serial();
    let config = RoutedConfig { mtu: 1500, small_mtu: 1500, ..RoutedConfig::new("sstbf") };
    let lab = RoutedLab::with_config(config).expect("create the routed lab");
    let k = lab.add_kernel_sender().expect("add the kernel sender A'");
    let inherited = congestion_control(lab.k_cmd("sysctl"));

    let (rate, burst, limit) =
        (format!("{RATE_MBIT}mbit"), (2 * FRAME).to_string(), (QUEUE_FRAMES * FRAME).to_string());
    #[rustfmt::skip]
    tc(&lab, &[
        "qdisc", "replace", "dev", &lab.r1_r2_if, "root", "tbf",
        "rate", &rate, "burst", &burst, "limit", &limit,
    ]);
    let qdisc = tc(&lab, &["qdisc", "show", "dev", &lab.r1_r2_if]);

    let b_ip = lab.b_ip;
    let listener = lab.in_b(|| TcpListener::bind((b_ip, 0))).expect("listen in B");
    let server = listener.local_addr().expect("listener address");
    let (ours_data, linux_data) = (common::data(0x7bf, LEN), common::data(0x7bf1, LEN));

    // Our stack in A.
    let (before, backlog_before) = (qdisc_counts(&lab), backlog_drops());
    let (iface, config) = (lab.a_if.clone(), our_config(&lab));
    let ((stats, polls, exit), (got, elapsed)) = std::thread::scope(|s| {
        let receiver = s.spawn(|| receive_one(&listener));
        let sent = lab.in_a(|| send_ours(&iface, config, server, &ours_data));
        (sent, receiver.join().expect("the receiver in B"))
    });
    let after = qdisc_counts(&lab);
    let ours_backlog = backlog_drops() - backlog_before;
    assert!(got == ours_data, "our transfer: {}", common::first_difference(&ours_data, &got));
    let mss = u32::from(stats.mss);
    let ours = Run {
        drops: after.1 - before.1,
        sent: after.0 - before.0,
        elapsed,
        min_rtt: stats.min_rtt.expect("our min RTT"),
        max_sample: stats.max_rtt,
        max_srtt: polls.max,
        mean_srtt: polls.mean(),
        exit: exit.map(|(cwnd, ssthresh, retransmits)| {
            (cwnd / mss, ssthresh / mss, if retransmits > 0 { "loss" } else { "no loss" })
        }),
        retransmits: stats.retransmits,
    };

    // Let the queue drain, then Linux in A'.
    std::thread::sleep(Duration::from_millis(300));
    let (before, backlog_before) = (qdisc_counts(&lab), backlog_drops());
    let stream = lab
        .in_k(|| TcpStream::connect_timeout(&server, Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect from A' to {server}: {e}"));
    common::set_congestion_control(&stream, "cubic");
    let linux_cc = congestion_control_of(&stream);
    assert_eq!(linux_cc, "cubic");
    let (info, polls, exit, (got, elapsed)) = std::thread::scope(|s| {
        let receiver = s.spawn(|| receive_one(&listener));
        send_linux(&stream, &linux_data, receiver)
    });
    let after = qdisc_counts(&lab);
    let linux_backlog = backlog_drops() - backlog_before;
    // A' is a fresh namespace: its counters are this connection's. HyStart's exits
    // (`tcp_cubic.c`, `hystart_update`): by the ACK train or by delay.
    let nstat = common::nstat(lab.k_cmd("nstat"));
    let hystart = |what: &str| nstat.get(&format!("TcpExtTCPHystart{what}")).copied().unwrap_or(0);
    let (train, delay) = (hystart("TrainDetect"), hystart("DelayDetect"));
    let why = match (train, delay) {
        (0, 0) => "loss",
        (_, 0) => "train",
        (0, _) => "delay",
        _ => "train+delay",
    };
    assert!(got == linux_data, "Linux's transfer: {}", common::first_difference(&linux_data, &got));
    let linux = Run {
        drops: after.1 - before.1,
        sent: after.0 - before.0,
        elapsed,
        min_rtt: micros(info.tcpi_min_rtt),
        max_sample: None,
        max_srtt: polls.max,
        mean_srtt: polls.mean(),
        exit: exit.map(|(cwnd, ssthresh, retransmits)| (cwnd, ssthresh, if retransmits > 0 { "loss" } else { why })),
        retransmits: u64::from(info.tcpi_total_retrans),
    };

    eprintln!("bottleneck on R1's {}: {}", lab.r1_r2_if, qdisc.trim());
    eprintln!(
        "Linux's congestion control in A': {linux_cc} on the socket (the namespace's default: {inherited}); {k:?}"
    );
    eprintln!(
        "{} MiB each; queue delay = RTT - min RTT, ms; slow-start exit = cwnd/ssthresh in segments at the first poll that saw it",
        LEN >> 20
    );
    eprintln!(
        "| sender | drops | Mbit/s | min RTT | max sample q | max srtt q | mean srtt q | ss exit | retransmits | tbf pkts |"
    );
    eprintln!("{}", row("ours", &ours));
    eprintln!("{}", row("Linux", &linux));
    eprintln!(
        "Linux's HyStart: TrainDetect {train} (cwnd {}), DelayDetect {delay} (cwnd {})",
        hystart("TrainCwnd"),
        hystart("DelayCwnd")
    );
    eprintln!(
        "input-backlog drops (softnet_stat, whole machine): ours {ours_backlog}, Linux {linux_backlog}; our stats: {stats:?}"
    );

    // The bottleneck is on the path: neither goodput beats its rate (5% for tbf's bucket and
    // timing).
    for (who, r) in [("ours", &ours), ("Linux", &linux)] {
        assert!(r.goodput_mbit() < RATE_MBIT as f64 * 1.05, "{who}: {:.1} Mbit/s through {rate}", r.goodput_mbit());
    }
    let bound = (2 * linux.drops).max(100);
    assert!(
        ours.drops <= bound,
        "our slow start overflowed the queue: {} drops, Linux {} (bound {bound})",
        ours.drops,
        linux.drops
    );
}
