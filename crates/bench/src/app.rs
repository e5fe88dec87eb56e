//! The application row: the HTTP/1.1 server of `examples/http_server` (the same code, its
//! `serve.rs`, on hyper) on kernel sockets (`tokio::net`) and on our stack over AF_XDP
//! (`bypass_runtime::tokio`), each under a tokio runtime of one worker thread, loaded with
//! keep-alive requests for `/` by `wrk` (or, without it, `ab -k`) from the peer namespace:
//! the comparison an application developer makes. Ours runs twice: in-thread and
//! busy-polling (the stack runs on the tokio worker itself), and with the stack on a shard
//! thread of its own (the runtime's other mode), so the table shows what the mode buys.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::Lab;
use bypass_runtime::{Mode, Runtime, RuntimeOptions};
use bypass_stack::StackConfig;

#[path = "../../../examples/http_server/serve.rs"]
mod serve;

/// The name `--only` and `--workload` know the application row by.
pub const NAME: &str = "http";

/// Concurrent connections the load generator keeps open.
const CONNECTIONS: usize = 100;

/// One server's figures (medians over the repetitions).
#[derive(Clone, Debug, Default)]
pub struct AppRow {
    pub server: &'static str,
    pub per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Socket errors and non-2xx responses the load generator counted, summed.
    pub errors: u64,
    pub failure: Option<String>,
}

/// The section under the tables.
#[derive(Clone, Debug, Default)]
pub struct AppSection {
    /// The load generator's command line (or why none ran).
    pub tool: String,
    pub rows: Vec<AppRow>,
}

/// Which load generator is installed in the peer namespace's view of the file system.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Wrk,
    Ab,
}

impl Tool {
    /// The program's name, as run and as reported.
    fn program(self) -> &'static str {
        match self {
            Tool::Wrk => "wrk",
            Tool::Ab => "ab",
        }
    }
}

fn installed(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

/// Measure both servers `runs` times for `duration` each, interleaved.
pub fn measure(lab: &Lab, kernel_ip: Ipv4Addr, runs: usize, duration: Duration, port: &mut u16) -> AppSection {
    let Some(tool) = [Tool::Wrk, Tool::Ab].into_iter().find(|t| installed(t.program())) else {
        return AppSection {
            tool: "not measured: neither wrk (Debian package wrk) nor ab (Debian package apache2-utils) is installed"
                .into(),
            rows: Vec::new(),
        };
    };
    let secs = duration.as_secs_f64().round().max(1.0) as u64;
    let tool_line = match tool {
        Tool::Wrk => format!("wrk -t1 -c{CONNECTIONS} -d{secs}s --latency http://ADDRESS/"),
        Tool::Ab => format!("ab -k -c {CONNECTIONS} -t {secs} http://ADDRESS/"),
    };
    let names = [
        "kernel sockets (tokio::net)",
        "ours/AF_XDP, in-thread, busy-poll (bypass_runtime::tokio)",
        "ours/AF_XDP, shard thread (bypass_runtime::tokio)",
    ];
    let mut samples: Vec<Vec<Result<AppRow, String>>> = vec![Vec::new(); names.len()];
    for _ in 0..runs {
        for (i, name) in names.iter().enumerate() {
            *port += 1;
            let result = match i {
                0 => kernel(lab, kernel_ip, *port, tool, secs),
                1 => ours(
                    lab,
                    *port,
                    tool,
                    secs,
                    RuntimeOptions { mode: Mode::InThread, busy_poll: true, ..Default::default() },
                ),
                _ => ours(lab, *port, tool, secs, RuntimeOptions { mode: Mode::Shard, ..Default::default() }),
            };
            samples[i].push(result.map(|mut r| {
                r.server = name;
                r
            }));
        }
    }
    let rows = names
        .iter()
        .zip(samples)
        .map(|(name, runs)| {
            let ok: Vec<AppRow> = runs.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
            if ok.is_empty() {
                let why = runs.into_iter().find_map(Result::err).unwrap_or_else(|| "no measurement".into());
                return AppRow { server: name, failure: Some(why), ..AppRow::default() };
            }
            let median = |f: fn(&AppRow) -> f64| {
                let mut v: Vec<f64> = ok.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            AppRow {
                server: name,
                per_sec: median(|r| r.per_sec),
                p50_us: median(|r| r.p50_us),
                p99_us: median(|r| r.p99_us),
                errors: ok.iter().map(|r| r.errors).sum(),
                failure: None,
            }
        })
        .collect();
    AppSection { tool: tool_line, rows }
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))
}

/// The server on kernel sockets, at `ip:port` in the bypass namespace.
fn kernel(lab: &Lab, ip: Ipv4Addr, port: u16, tool: Tool, secs: u64) -> Result<AppRow, String> {
    let std_listener = lab
        .in_bypass(|| std::net::TcpListener::bind((ip, port)))
        .map_err(|e| format!("kernel listener on {ip}:{port}: {e}"))?;
    std_listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let rt = tokio_runtime()?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(std_listener).map_err(|e| e.to_string())?
    };
    rt.spawn(async move { serve::accept_loop(|| listener.accept()).await });
    let result = load(lab, SocketAddr::from((ip, port)), tool, secs);
    rt.shutdown_timeout(Duration::from_millis(200));
    result
}

/// The server on our stack over AF_XDP at the lab's stack address, run as `options` says.
fn ours(lab: &Lab, port: u16, tool: Tool, secs: u64, options: RuntimeOptions) -> Result<AppRow, String> {
    let device = lab
        .in_bypass(|| {
            XdpDevice::open(XdpConfig { tx_checksum_offload: true, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) })
        })
        .map_err(|e| format!("AF_XDP on {}: {e}", lab.bypass_if))?;
    let config = StackConfig::new(lab.bypass_ip, lab.prefix_len, super::stack::secret());
    let runtime = Runtime::start(vec![device], config, options).map_err(|e| e.to_string())?;
    let rt = tokio_runtime()?;
    let listener = bypass_runtime::tokio::TcpListener::bind(&runtime, port).map_err(|e| e.to_string())?;
    rt.spawn(async move { serve::accept_loop(|| listener.accept()).await });
    let result = load(lab, SocketAddr::from((lab.bypass_ip, port)), tool, secs);
    rt.shutdown_timeout(Duration::from_millis(200));
    drop(runtime);
    result
}

/// Run the load generator in the peer namespace against `addr` and read its figures.
fn load(lab: &Lab, addr: SocketAddr, tool: Tool, secs: u64) -> Result<AppRow, String> {
    let url = format!("http://{addr}/");
    let (conns, secs_s) = (CONNECTIONS.to_string(), secs.to_string());
    let mut cmd = lab.peer_cmd(tool.program());
    match tool {
        Tool::Wrk => cmd.args(["-t1", &format!("-c{conns}"), &format!("-d{secs}s"), "--latency", &url]),
        Tool::Ab => cmd.args(["-k", "-c", &conns, "-t", &secs_s, "-n", "100000000", &url]),
    };
    let output = cmd.output().map_err(|e| format!("cannot run the load generator: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(failure(tool, output.status, &output.stderr, &text));
    }
    match tool {
        Tool::Wrk => parse_wrk(&text),
        Tool::Ab => parse_ab(&text),
    }
    .ok_or_else(|| format!("cannot read the load generator's output: {}", text.trim()))
}

/// Say why the load generator failed: its exit status and what it printed (its error output,
/// else its output), so a tool that fails silently still gets a sentence.
fn failure(tool: Tool, status: std::process::ExitStatus, stderr: &[u8], stdout: &str) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let said = [stderr.trim(), stdout.trim()].into_iter().find(|s| !s.is_empty()).unwrap_or("it printed nothing");
    format!("the load generator ({}) failed ({status}): {said}", tool.program())
}

/// Return microseconds from wrk's `250.00us`, `1.20ms` or `1.00s`.
fn wrk_time(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|n| n * scale)
}

pub(super) fn parse_wrk(text: &str) -> Option<AppRow> {
    let mut row = AppRow::default();
    let field = |line: &str, key: &str| line.trim().strip_prefix(key).map(|v| v.trim().to_string());
    for line in text.lines() {
        if let Some(v) = field(line, "Requests/sec:") {
            row.per_sec = v.parse().ok()?;
        } else if let Some(v) = field(line, "50%") {
            row.p50_us = wrk_time(&v)?;
        } else if let Some(v) = field(line, "99%") {
            row.p99_us = wrk_time(&v)?;
        } else if let Some(v) = field(line, "Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            row.errors += v.split(',').filter_map(|p| p.split_whitespace().nth(1)?.parse::<u64>().ok()).sum::<u64>();
        } else if let Some(v) = field(line, "Non-2xx or 3xx responses:") {
            row.errors += v.parse::<u64>().ok()?;
        }
    }
    (row.per_sec > 0.0).then_some(row)
}

fn parse_ab(text: &str) -> Option<AppRow> {
    let mut row = AppRow::default();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("Requests per second:") {
            row.per_sec = v.split_whitespace().next()?.parse().ok()?;
        } else if let Some(v) = line.strip_prefix("50%") {
            row.p50_us = v.trim().parse::<f64>().ok()? * 1e3;
        } else if let Some(v) = line.strip_prefix("99%") {
            row.p99_us = v.trim().parse::<f64>().ok()? * 1e3;
        } else if let Some(v) = line.strip_prefix("Failed requests:") {
            row.errors += v.trim().parse::<u64>().ok()?;
        } else if let Some(v) = line.strip_prefix("Non-2xx responses:") {
            row.errors += v.trim().parse::<u64>().ok()?;
        }
    }
    (row.per_sec > 0.0).then_some(row)
}

/// The section as a markdown table (also the terminal's text).
pub fn markdown(section: &AppSection) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## application: HTTP/1.1 keep-alive, GET / ({CONNECTIONS} connections), the same tokio server (examples/http_server) on each, one tokio worker\n"
    );
    if section.rows.is_empty() {
        // No load generator ran: `tool` says why.
        let _ = writeln!(out, "{}", section.tool);
        return out;
    }
    let _ = writeln!(out, "load: `{}` from the peer namespace\n", section.tool);
    let _ = writeln!(out, "| server | requests/s | vs kernel | p50 | p99 | errors |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let base = section.rows.first().filter(|r| r.failure.is_none()).map(|r| r.per_sec);
    for r in &section.rows {
        match &r.failure {
            Some(why) => {
                let _ = writeln!(out, "| {} | {why} | | | | |", r.server);
            }
            None => {
                let ratio = base.map_or("-".into(), |b| format!("{:.2}x", r.per_sec / b));
                let _ = writeln!(
                    out,
                    "| {} | {:.0} | {ratio} | {:.0} us | {:.0} us | {} |",
                    r.server, r.per_sec, r.p50_us, r.p99_us, r.errors
                );
            }
        }
    }
    out
}

/// The section as a JSON value.
pub fn json(section: &AppSection, js: impl Fn(&str) -> String) -> String {
    let rows: Vec<String> = section
        .rows
        .iter()
        .map(|r| {
            format!(
                "{{\"server\": {}, \"requests_per_s\": {:.1}, \"p50_us\": {:.1}, \"p99_us\": {:.1}, \"errors\": {}, \"failure\": {}}}",
                js(r.server),
                r.per_sec,
                r.p50_us,
                r.p99_us,
                r.errors,
                r.failure.as_deref().map_or("null".into(), &js)
            )
        })
        .collect();
    format!("{{\"load\": {}, \"rows\": [{}]}}", js(&section.tool), rows.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    // Real output of wrk 4.1 and ab 2.3 (Debian), against a local server.
    const WRK: &str = "Running 1s test @ http://127.0.0.1:18080/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.35ms  816.81us   6.38ms   70.99%
    Req/Sec     1.67k   156.32     1.86k    63.64%
  Latency Distribution
     50%    2.22ms
     75%    2.78ms
     90%    3.45ms
     99%    4.93ms
  1828 requests in 1.10s, 1.20MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:   1662.11
Transfer/sec:      1.09MB
";
    const AB: &str = "Complete requests:      1794
Failed requests:        0
Keep-Alive requests:    0
Requests per second:    1793.53 [#/sec] (mean)
Percentage of the requests served within a certain time (ms)
  50%      2
  66%      2
  99%      4
 100%      7 (longest request)
";

    #[test]
    fn reads_wrk_and_ab() {
        let w = parse_wrk(WRK).expect("wrk's figures");
        assert_eq!((w.per_sec, w.p50_us, w.p99_us, w.errors), (1662.11, 2220.0, 4930.0, 3));
        let a = parse_ab(AB).expect("ab's figures");
        assert_eq!((a.per_sec, a.p50_us, a.p99_us, a.errors), (1793.53, 2000.0, 4000.0, 0));
        assert!(parse_wrk("unable to connect to 10.77.0.2:8080 Connection refused").is_none());
    }

    #[test]
    fn a_silent_failure_still_says_what_happened() {
        let status = std::process::ExitStatus::from_raw(1 << 8);
        let said = failure(Tool::Wrk, status, b"", "");
        assert_eq!(said, "the load generator (wrk) failed (exit status: 1): it printed nothing");
        let said = failure(Tool::Ab, status, b"  ", "apr_socket_recv: Connection reset by peer (104)\n");
        assert!(said.ends_with("failed (exit status: 1): apr_socket_recv: Connection reset by peer (104)"), "{said}");
    }
}
