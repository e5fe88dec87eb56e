//! `bypass-script`: conformance scripts for our TCP in packetdrill's language.
//!
//! A script is a list of timed lines: segments the tester sends to our stack (`<`), segments
//! our stack must send (`>`), and calls of our application. [`run_script`] plays one against
//! a [`Target`]; [`VirtualTarget`] is our `bypass_stack::Interface` on virtual time, where a
//! script runs in milliseconds and every retransmission lands on the microsecond.
//!
//! ```
//! use bypass_script::{Settings, VirtualTarget, run_script};
//!
//! let script = "\
//! // RFC 9293 3.5: a passive open
//! // @config timestamps=off
//! 0     listen 8080
//! +0    < S 0:0(0) win 65535 <mss 1460>
//! +0    > S. 0:0(0) ack 1 <mss 1460>
//! +0.01 < . 1:1(0) ack 1 win 65535
//! +0    accept
//! +0    state ESTABLISHED
//! ";
//! let parsed = bypass_script::parse_script(script).unwrap();
//! let settings = Settings::from_pairs(&parsed.directives.config).unwrap();
//! let report = run_script("inline", script, &mut VirtualTarget::new(&settings)).unwrap();
//! assert_eq!(report.outbound, 1);
//! ```
//!
//! | file | concern |
//! |---|---|
//! | `lib.rs` | running a script or a suite: [`run_script`], [`run_virtual`], [`check_file`], [`scripts_in`] |
//! | `parse.rs` | the language: text to typed lines and directives |
//! | `settings.rs` | `// @config` keys: the stack's settings and the runner's |
//! | `matcher.rs` | number spaces, building inbound segments, comparing outbound ones |
//! | `run.rs` | the runner: lines in order, time, unexpected segments |
//! | `target.rs` | the trait a mode implements |
//! | `virtual.rs` | the virtual-time target over `bypass_stack::Interface`, and our application's calls |
//! | `wire.rs` | the wire targets: a veth pair, the tester's AF_PACKET socket, our stack on AF_XDP/AF_PACKET |
//! | `wire_linux.rs` | the Linux kernel as the SUT: `@config` to sysctls and socket options, the kernel program |
//! | `wire_sys.rs` | the few system calls `std::net` lacks (the crate's only `unsafe`) |
//! | `report.rs` | reports and failure text |
//! | `from_pcap.rs` | a capture's conversation turned into a script |
//!
//! # The language
//!
//! As packetdrill's (`gtests/net/packetdrill/{lexer.l,parser.y}`), one statement per line,
//! `//` to the end of a line is a comment.
//!
//! **Times.** `0.100` (seconds since the script started), `+0.100` (after the previous line
//! happened: for a `>` line, when the matched segment left), `0.1~0.3` and `+0.1~+0.3`
//! (any time in the range), `*` (any time).
//!
//! **Packets.** `< S 0:0(0) win 65535 <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7>`:
//! direction, optionally ports `SRC>DST` (`< 40001>8080 S ...`; otherwise the connection's:
//! the tester's port is `remote_port`, or the port a `connect` went to; ours is the port of
//! the last `listen`, or `local_port`), flags (`S` SYN, `.` ACK, `F` FIN, `R` RST, `P` PSH,
//! `U` URG, `E` ECE, `W` CWR, `-` none), `start:end(len)`, then `ack N`, `win N` (the
//! window field as on the wire, unscaled), `urg N`, and the options: `mss N`, `wscale N`,
//! `sackOK`, `sack a:b c:d`, `TS val N ecr M`, `nop`, `eol`, or `<...>` (outbound only: not
//! checked). An ACK segment needs `ack N`; an inbound one needs `win N` (as in packetdrill).
//! Inbound payloads are zero bytes.
//!
//! **Application calls** (instead of packetdrill's system calls; each returns a value that
//! `= N` or `= ERRNO` asserts, and without `=` the call must succeed: all bytes for
//! `write`/`read`, 0 for the rest):
//!
//! | line | does | returns |
//! |---|---|---|
//! | `listen [PORT]` | `Interface::listen` (socket + bind + listen); PORT defaults to `local_port` | 0, EADDRINUSE |
//! | `accept` | `Interface::accept`: the connection becomes the current one | 0, EAGAIN (none established) |
//! | `connect [IP:]PORT` | `Interface::connect_from` from `local_port` to the tester (IP defaults to `remote_ip`) | 0 (the SYN is on its way) |
//! | `write N` | `Connection::send` of N zero bytes | bytes taken, EAGAIN, EPIPE (closed for sending), ECONNRESET, ETIMEDOUT |
//! | `read N` | `Connection::recv` into N bytes | bytes read, 0 at end of stream, EAGAIN, ENOTCONN, ECONNRESET, ETIMEDOUT |
//! | `shutdown` | `Connection::close`: RFC 9293 CLOSE, our FIN (shutdown(SHUT_WR)) | 0 |
//! | `close` | `Interface::close`: close(2), the handle is given up (reset if data is unread) | 0, EBADF |
//! | `abort` | `Interface::abort`: RST (SO_LINGER 0 and close) | 0, EBADF |
//! | `setsockopt nodelay [0\|1]` | `Connection::set_nodelay` | 0 |
//! | `state NAME` | asserts the TCB state (`ESTABLISHED`, `FIN-WAIT-1` or `FIN_WAIT_1`, ...; CLOSED once gone) | |
//! | `event NAME` | asserts the event (`established readable writable peer_closed closed reset timed_out`) was delivered since the last `event`/`no_event` line | |
//! | `no_event NAME` | asserts it was not | |
//!
//! Calls on a handle given up by `close` or `abort` fail with EBADF; `state` still reports
//! the connection finishing in the background.
//!
//! **Directives**, in comments: `// @config key=value ...` (see below), `// @expect-fail:
//! REASON` (our TCP is known to fail this script: the suite checks that it still fails, so
//! that a fix is noticed), `// @linux differs: REASON` (Linux fails this script, and why: the
//! Linux wire run checks that it still fails; a REASON starting `timing:` marks a timer at
//! the tolerance's edge, where a pass is accepted too), `// @wire skip: REASON` (the wire
//! mode does not run it: long timers).
//! The first comment of a script cites the RFC section it proves.
//!
//! **`@config` keys.** TCP: `mss`, `recv_buffer` / `send_buffer` (bytes; also fix the
//! maximum, so no autotuning), `recv_buffer_max`, `send_buffer_max`, `window_scaling`,
//! `sack`, `timestamps`, `nagle`, `pacing` (on/off), `congestion` (reno, cubic), `sws_override`,
//! `delayed_ack` (a duration or off), `initial_rto`, `min_rto`, `max_rto`, `msl`,
//! `syn_retries`, `max_retransmissions`, `user_timeout`, `fin_wait2_timeout` (or off),
//! `rfc1337`, `challenge_ack_limit`, `invalid_ack_interval`, `ecn` (off, accept, request),
//! `keepalive` (on/off: keep-alive on every connection, SO_KEEPALIVE, with Linux's defaults
//! of 2 h, 75 s and 9 probes), `keepalive_idle`, `keepalive_interval`, `keepalive_probes`
//! (TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT; each turns keep-alive on). Host: `syn_queue`, `accept_backlog`, `window_budget`,
//! `flight_budget`, `local_ip`. Runner: `remote_ip`, `remote_port`, `local_port`, `tolerance_usecs`.
//! Durations: `200ms`, `1s`, `500us`. Defaults: `bypass_stack::StackConfig::new`, our
//! address 192.168.0.1/24, the tester 192.168.0.2:40000, our port 8080.
//!
//! # How lines run and match (packetdrill's rules, with the differences said)
//!
//! - **Numbers.** Inbound segments carry the script's numbers as written: the tester's ISN is
//!   what its SYN says (0 in most scripts), so its numbers read relative to it, and a SYN
//!   with a large seq gives an absolute base. Our numbers are mapped: our ISN is learned from
//!   each SYN we send (or SYN-ACK), and the script's numbers for our side count from that
//!   line's seq; our seq, the ack of inbound segments and inbound SACK blocks are translated.
//!   Before our first SYN (a reset to a closed port) our numbers are taken as absolute.
//! - **Timestamps.** Inbound TSvals go out as written. An inbound TSecr is a TSval of ours in
//!   script space: it is mapped to the live value of that exact outbound TSval, else by the
//!   offset learned from our first timestamp (packetdrill's `tcp_ts_ecr_scaled`). Our TSval
//!   is checked relative to our first one: it must advance with the script's values within
//!   the tolerance in 1 ms ticks (packetdrill leaves it unchecked unless `--tcp_ts_tick_usecs`
//!   is set: ours ticks in milliseconds, so we check). Our TSecr must equal the script's
//!   exactly (packetdrill does not check it).
//! - **Matching.** The next segment we sent is compared with the next `>` line: flags, seq,
//!   payload length, ack (when the script's flags have ACK), window (when `win` is given),
//!   urgent pointer (when `urg` is given), then the options (unless `<...>`), compared as
//!   values: mss, wscale, sackOK, SACK blocks, TS; the place of `nop`/`eol` padding is not
//!   compared (packetdrill compares option bytes). Then the time: within
//!   `tolerance_usecs` (default 4000, as packetdrill) of the line's time or range; on virtual
//!   time our segments leave exactly when the timers fire.
//! - **Aggregation.** As packetdrill without `--strict_segments`: `> P. 1:2001(2000)` matches
//!   consecutive segments that continue each other, with the same flags but PSH and FIN,
//!   until their payloads add up; the last one's header is compared, with the first's seq.
//! - **Unexpected segments.** Before an inbound line or a call runs, time advances to it (our
//!   timers fire on the way); any segment of ours not matched by then fails the script, as
//!   does one left over after the last line.
//! - **Waiting.** A `>` line with nothing sent yet runs our timers until a segment leaves
//!   (up to an hour of script time past the line's time, so that a late one reports when it
//!   came: `timing error: expected at 0.200000 actual 1.000000`).
//!
//! # The wire mode
//!
//! [`check_wire`] / [`check_file_wire`] run a script in real time over a veth pair between
//! two network namespaces of a `bypass_lab::testlab::Lab` (root; the lab is removed on every
//! exit path), against a [`Backend`]:
//!
//! - **The tester** is an AF_PACKET socket (`bypass_io::PacketDevice`) on one veth
//!   end, in a namespace where that end has no kernel address (so its kernel never answers).
//!   It injects the script's inbound segments as whole Ethernet/IPv4/TCP frames with correct
//!   checksums, captures the SUT's TCP frames stamped with the real clock since the script
//!   started (a SUT frame with a bad TCP checksum fails the script), and answers the SUT's
//!   ARP requests.
//! - **`linux`**: the other end holds our address (`local_ip`, 192.168.0.1/24) with the
//!   kernel's TCP, the tx checksum, TSO and GSO offloads off, a permanent neighbour entry for
//!   the tester, `initrwnd 10` on the subnet's route (our initial window of 10 segments,
//!   Linux's own default before 4.19) and `tcp_rmem[2]` = our `recv_buffer_max` (16 MiB: the
//!   same window scale, 9). The script's `@config` becomes sysctls in that namespace, route
//!   metrics and socket options ([`LinuxSetup::from_config`] has the table, and
//!   the keys with no Linux equivalent: a script using one is reported skipped with the
//!   reason). The application lines are served by sockets made in that namespace:
//!
//! | line | system calls |
//! |---|---|
//! | `listen PORT` | `socket(AF_INET, SOCK_STREAM\|SOCK_NONBLOCK)`, `SO_REUSEADDR` and the `@config` options, `bind(0.0.0.0:PORT)`, `listen(backlog)` (128, or from `syn_queue`/`accept_backlog`) |
//! | `accept` | `accept4` (non-blocking: EAGAIN when none is established) |
//! | `connect PORT` | `socket`, the options, `bind(local_ip:local_port)`, non-blocking `connect` (EINPROGRESS is 0) |
//! | `write N` | `send(MSG_NOSIGNAL)` of N zero bytes on the non-blocking socket |
//! | `read N` | `recv` on the non-blocking socket (EAGAIN when nothing is there) |
//! | `shutdown` | `shutdown(SHUT_WR)` |
//! | `close` | `close` |
//! | `abort` | `SO_LINGER {1, 0}`, `close` |
//! | `setsockopt nodelay N` | `TCP_NODELAY` |
//! | `state NAME` | `TCP_INFO` `tcpi_state`; after `close`/`abort` (or once the kernel moved the connection to a timewait socket) the 4-tuple's line in the namespace's `/proc/net/tcp` |
//! | `event NAME` | `poll` each loop: `POLLRDHUP` is `peer_closed`, `POLLERR` takes `SO_ERROR` (`reset`, `timed_out`; the error is handed to the next read or write, as the kernel would), SYN-SENT to ESTABLISHED is `established` |
//!
//! - **`xdp`, `packet`**: our stack (`bypass_stack::Interface`) on the other end over
//!   `bypass_io`'s AF_XDP device (copy mode on veth) or AF_PACKET device, the application
//!   lines mapped exactly as in virtual mode (the same code). The tester introduces itself
//!   with one ARP request before the first line, as the virtual target does.
//!
//! One thread drives everything: between script events it polls our stack (receive, due
//! timers, transmit) and the tester's socket, sleeping at most 200 us on the tester's
//! socket in between; scripts run one at a time. Outbound segments carry the time the
//! tester captured them.
//!
//! **Tolerance.** 25 ms ([`DEFAULT_TOLERANCE_USECS`]; `BYPASS_WIRE_TOLERANCE_US`
//! overrides it; a script's own larger `tolerance_usecs` wins): packetdrill's 4 ms is for a
//! quiet machine, while on a shared 2-vCPU VM a wake-up can be late by several milliseconds
//! and Linux's timers sit on the timer wheel. A script that should pass and fails on timing
//! runs once more before it counts as failed. A `>` line waits at most 1.5 s past its window
//! for a late segment (`BYPASS_WIRE_LOOK_AHEAD_US`), and after the last line the runner
//! waits one tolerance for stray segments before it checks that none came.
//!
//! **Running one script** (as root):
//!
//! ```sh
//! cargo run -p bypass-script --release --example run_script -- --wire linux tests/scripts/rst/abort-sends-rst.pkt
//! cargo run -p bypass-script --release --example run_script -- --wire xdp tests/scripts/sack/*.pkt
//! ```
//!
//! `cargo test -p bypass-script --release --test wire` runs every script against Linux and a
//! representative set against our stack on both backends (`BYPASS_WIRE=linux,xdp,packet`
//! picks the backends).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod from_pcap;
mod matcher;
mod parse;
mod report;
mod run;
mod settings;
mod target;
#[path = "virtual.rs"]
mod virtual_target;
mod wire;
mod wire_linux;
mod wire_sys;

use std::path::{Path, PathBuf};

pub use from_pcap::{Side, script_from_pcap, script_from_pcap_file};
pub use parse::{Directives, ParseError, Script, SockOpt, parse_script};
pub use report::{Failure, Report};
pub use settings::Settings;
pub use target::{Call, Micros, Returned, Sent, Target};
pub use virtual_target::VirtualTarget;
pub use wire::{
    Backend, DEFAULT_TOLERANCE_USECS, WireError, WireOptions, WireTarget, WireVerdict, check_file_wire, check_wire,
};
pub use wire_linux::LinuxSetup;

/// Parse `text` (named `path` in messages) and run it against `target`. The script's
/// `@config` directives are not applied here: build the target from
/// [`Settings::from_pairs`] of them (see [`run_virtual`]), as a target owns its stack.
pub fn run_script(path: &str, text: &str, target: &mut dyn Target) -> Result<Report, Failure> {
    let script = parse::parse_script(text).map_err(|e| Failure::at(path, e.line, "", e.message))?;
    let settings = Settings::from_pairs(&script.directives.config).map_err(|e| Failure::at(path, 0, "", e))?;
    run::run(path, &script, &settings, target)
}

/// Return every script (`.pkt` file) under `dir`, subfolders included, in sorted order: a
/// suite to run.
pub fn scripts_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries = std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>()?;
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "pkt") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    Ok(out)
}

/// Parse `text`, build a [`VirtualTarget`] with its `@config`, and run it.
pub fn run_virtual(path: &str, text: &str) -> Result<Report, Failure> {
    let script = parse::parse_script(text).map_err(|e| Failure::at(path, e.line, "", e.message))?;
    let settings = Settings::from_pairs(&script.directives.config).map_err(|e| Failure::at(path, 0, "", e))?;
    run::run(path, &script, &settings, &mut VirtualTarget::new(&settings))
}

/// What a script file's run means, with its `@expect-fail` directive honoured.
#[derive(Debug)]
pub enum Verdict {
    /// It ran to the end, as it should.
    Pass(Report),
    /// It failed; it should not have.
    Fail(Failure),
    /// It failed, as its `@expect-fail` says it does.
    ExpectedFail(Failure, String),
    /// It ran to the end although `@expect-fail` says it fails: the bug may be fixed.
    UnexpectedPass(Report, String),
}

impl Verdict {
    /// Return whether the verdict is what the suite wants (pass, or an expected failure).
    pub fn ok(&self) -> bool {
        matches!(self, Verdict::Pass(_) | Verdict::ExpectedFail(..))
    }
}

/// Run a script file in virtual mode and judge it.
pub fn check_file(path: &Path) -> Verdict {
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return Verdict::Fail(Failure::at(&name, 0, "", format!("read the script: {e}"))),
    };
    let expect_fail = parse::parse_script(&text).ok().and_then(|s| s.directives.expect_fail);
    match (run_virtual(&name, &text), expect_fail) {
        (Ok(r), None) => Verdict::Pass(r),
        (Ok(r), Some(why)) => Verdict::UnexpectedPass(r, why),
        (Err(f), None) => Verdict::Fail(f),
        (Err(f), Some(why)) => Verdict::ExpectedFail(f, why),
    }
}
