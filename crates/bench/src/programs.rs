//! The programs rows: unmodified programs nobody here wrote, each run on the kernel's
//! sockets and under `bypass run --busy-poll` (its TCP on our stack over AF_XDP, served in
//! its own threads), side by side, loaded from the peer namespace by their own clients:
//!
//! - nginx (one worker, `master_process off`), `GET /` by `wrk -t1 -c100`;
//! - redis-server, `redis-benchmark -t get,set -c 50`;
//! - iperf3, one stream each way.
//!
//! Repetitions are interleaved (kernel, ours, kernel, ...), medians reported. The kernel
//! servers listen on a second address the kernel owns on the bypass interface.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bypass_lab::testlab::Lab;

/// The name `--only` and `--workload` know these rows by.
pub const NAME: &str = "programs";

/// One measurement: a rate and, where the client reports them, latency percentiles.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fig {
    pub value: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// The load generator's CPU time over its run, as a share of one core: near 1.0, the
    /// client, not the server, set the rate (and caps the ratio between the sides).
    pub client_busy: Option<f64>,
}

/// One program's workload on both sides (medians).
#[derive(Clone, Debug, Default)]
pub struct ProgramRow {
    pub name: &'static str,
    pub unit: &'static str,
    pub kernel: Option<Fig>,
    pub ours: Option<Fig>,
    pub failure: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct ProgramsSection {
    pub rows: Vec<ProgramRow>,
}

/// Kills and reaps a server on every path.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first, so `bypass run` programs stop their stack (XDP detached) at exit.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn installed(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

/// Where a server runs.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Kernel,
    Ours,
}

/// Start `program args` in the bypass namespace (under `bypass run --busy-poll` for ours)
/// and wait until `addr` accepts a connection from the peer.
fn start(lab: &Lab, side: Side, addr: SocketAddr, program: &str, args: &[String]) -> Result<Server, String> {
    let mut cmd = match side {
        Side::Kernel => lab.bypass_cmd(program),
        Side::Ours => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut c = lab.bypass_cmd(exe.to_str().ok_or("a non-UTF-8 path")?);
            c.args(["run", "--busy-poll", "--iface", &lab.bypass_if]).args([
                "--ip",
                &format!("{}/{}", lab.bypass_ip, lab.prefix_len),
                "--",
                program,
            ]);
            c
        }
    };
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = Server(cmd.spawn().map_err(|e| format!("cannot run {program}: {e}"))?);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if lab.in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_millis(200))).is_ok() {
            return Ok(child);
        }
        if let Some(status) = child.0.try_wait().ok().flatten() {
            let mut err = String::new();
            if let Some(mut e) = child.0.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("{program} ended ({status}): {}", err.lines().last().unwrap_or("")));
        }
        if Instant::now() > deadline {
            return Err(format!("{program} did not listen on {addr} within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run a load generator in the peer namespace: its standard output, and its CPU time as a
/// share of its wall time. The servers are reaped only after their client, so the
/// difference in reaped children's CPU is the client's alone.
fn run_peer(lab: &Lab, program: &str, args: &[String]) -> Result<(String, f64), String> {
    let (cpu0, t0) = (super::measure::sys::reaped_children_rusage().0, Instant::now());
    let out = lab.peer_cmd(program).args(args).output().map_err(|e| format!("cannot run {program}: {e}"))?;
    let busy =
        (super::measure::sys::reaped_children_rusage().0 - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64().max(1e-6);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("{program} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok((text, busy))
}

/// A scratch directory for nginx, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn nginx_conf(dir: &Path, listen: SocketAddr) -> Result<PathBuf, String> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
    std::fs::write(www.join("index.html"), "hello from nginx\n").map_err(|e| e.to_string())?;
    let d = dir.display();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; error_log {d}/error.log warn; pid {d}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; sendfile on; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{ listen {listen}; root {d}/www; }} }}\n"
    );
    let path = dir.join(format!("nginx-{}.conf", listen.port()));
    std::fs::write(&path, conf).map_err(|e| e.to_string())?;
    Ok(path)
}

fn nginx(lab: &Lab, side: Side, addr: SocketAddr, secs: u64, dir: &Path) -> Result<Fig, String> {
    let conf = nginx_conf(dir, addr)?;
    let _server = start(lab, side, addr, "nginx", &["-c".into(), conf.display().to_string()])?;
    let url = format!("http://{addr}/");
    let (text, busy) =
        run_peer(lab, "wrk", &["-t1".into(), "-c100".into(), format!("-d{secs}s"), "--latency".into(), url])?;
    let row = super::app::parse_wrk(&text).ok_or_else(|| format!("cannot read wrk's output: {}", text.trim()))?;
    if row.errors > 0 {
        return Err(format!("wrk counted {} errors", row.errors));
    }
    Ok(Fig { value: row.per_sec, p50_us: Some(row.p50_us), p99_us: Some(row.p99_us), client_busy: Some(busy) })
}

/// redis-benchmark's GET and SET figures, from its CSV.
fn redis(lab: &Lab, side: Side, addr: SocketAddr, requests: u32) -> Result<[Fig; 2], String> {
    let port = addr.port().to_string();
    let args: Vec<String> = ["--port", &port, "--bind", &addr.ip().to_string(), "--save", "", "--appendonly", "no"]
        .into_iter()
        .map(String::from)
        .chain(["--protected-mode".into(), "no".into()])
        .collect();
    let _server = start(lab, side, addr, "redis-server", &args)?;
    // One test per run, SET first (GET then reads the key it wrote), so each test's client
    // CPU is its own.
    let mut figs = ["SET", "GET"].map(|test| -> Result<Fig, String> {
        let (text, busy) = run_peer(
            lab,
            "redis-benchmark",
            &[
                "-h".into(),
                addr.ip().to_string(),
                "-p".into(),
                port.clone(),
                "-t".into(),
                test.to_lowercase(),
                "-c".into(),
                "50".into(),
                "-n".into(),
                requests.to_string(),
                "--csv".into(),
            ],
        )?;
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("\"{test}\"")))
            .ok_or_else(|| format!("no {test} line in redis-benchmark's output: {}", text.trim()))?;
        let cols: Vec<f64> = line.split(',').skip(1).filter_map(|c| c.trim_matches('"').parse().ok()).collect();
        // rps, avg, min, p50, p95, p99, max (milliseconds).
        Ok(Fig {
            value: *cols.first().ok_or_else(|| format!("no rate in redis-benchmark's line: {line}"))?,
            p50_us: cols.get(3).map(|v| v * 1e3),
            p99_us: cols.get(5).map(|v| v * 1e3),
            client_busy: Some(busy),
        })
    });
    figs.reverse();
    let [get, set] = figs;
    Ok([get?, set?])
}

/// Gbit/s received, one iperf3 stream for `secs`; `reverse`: the server sends.
fn iperf3(lab: &Lab, side: Side, addr: SocketAddr, secs: u64, reverse: bool) -> Result<Fig, String> {
    // Not `-1`: the readiness probe's connection would be its one test.
    let args: Vec<String> = vec!["-s".into(), "-p".into(), addr.port().to_string(), "-B".into(), addr.ip().to_string()];
    let _server = start(lab, side, addr, "iperf3", &args)?;
    let mut client = vec![
        "-c".into(),
        addr.ip().to_string(),
        "-p".into(),
        addr.port().to_string(),
        "-t".into(),
        secs.to_string(),
        "-J".into(),
    ];
    if reverse {
        client.push("-R".into());
    }
    let (text, busy) = run_peer(lab, "iperf3", &client)?;
    let after = text.find("\"sum_received\"").ok_or_else(|| {
        // iperf3 reports a failed test in its JSON (`"error": "..."`), at times with status 0.
        let error = text.find("\"error\":").map(|at| text[at..].lines().next().unwrap_or("").trim().to_string());
        format!(
            "no sum_received in iperf3's JSON ({})",
            error.unwrap_or_else(|| format!("{} bytes of output, no error reported", text.len()))
        )
    })?;
    let bps = text[after..]
        .split("\"bits_per_second\":")
        .nth(1)
        .and_then(|v| v.split([',', '\n', '}']).next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or("no bits_per_second in iperf3's JSON")?;
    Ok(Fig { value: bps / 1e9, p50_us: None, p99_us: None, client_busy: Some(busy) })
}

fn median(v: &mut [Fig]) -> Option<Fig> {
    v.sort_by(|a, b| a.value.total_cmp(&b.value));
    v.get(v.len() / 2).copied()
}

/// Measure every program `runs` times on each side, interleaved.
pub fn measure(lab: &Lab, kernel_ip: Ipv4Addr, runs: usize, duration: Duration, port: &mut u16) -> ProgramsSection {
    let secs = duration.as_secs_f64().round().max(1.0) as u64;
    let names: [(&'static str, &'static str, &[&str]); 5] = [
        ("nginx, GET / (wrk -t1 -c100)", "requests/s", &["nginx", "wrk"]),
        ("redis, GET (redis-benchmark -c 50)", "requests/s", &["redis-server", "redis-benchmark"]),
        ("redis, SET (redis-benchmark -c 50)", "requests/s", &["redis-server", "redis-benchmark"]),
        ("iperf3, to the server", "Gbit/s", &["iperf3"]),
        ("iperf3, from the server (-R)", "Gbit/s", &["iperf3"]),
    ];
    let scratch = Scratch(std::env::temp_dir().join(format!("bypass-demo-programs-{}", std::process::id())));
    let _ = std::fs::create_dir_all(&scratch.0);
    let mut samples: Vec<[Vec<Fig>; 2]> = vec![[Vec::new(), Vec::new()]; names.len()];
    let mut failures: Vec<Option<String>> = vec![None; names.len()];
    for (i, (_, _, tools)) in names.iter().enumerate() {
        if let Some(t) = tools.iter().find(|t| !installed(t)) {
            failures[i] = Some(format!("not measured: {t} is not installed"));
        }
    }
    for _ in 0..runs {
        for side in [Side::Kernel, Side::Ours] {
            let k = usize::from(side == Side::Ours);
            let ip = if side == Side::Kernel { IpAddr::V4(kernel_ip) } else { IpAddr::V4(lab.bypass_ip) };
            let mut next = || {
                *port = port.wrapping_add(1).max(20000);
                SocketAddr::new(ip, *port)
            };
            let mut results: Vec<(usize, Result<Fig, String>)> = Vec::new();
            if failures[0].is_none() {
                let addr = next();
                results.push((0, nginx(lab, side, addr, secs, &scratch.0)));
            }
            if failures[1].is_none() {
                match redis(lab, side, next(), 100_000) {
                    Ok([get, set]) => results.extend([(1, Ok(get)), (2, Ok(set))]),
                    Err(e) => results.extend([(1, Err(e.clone())), (2, Err(e))]),
                }
            }
            for (i, reverse) in [(3, false), (4, true)] {
                if failures[i].is_none() {
                    let addr = next();
                    results.push((i, iperf3(lab, side, addr, secs, reverse)));
                }
            }
            for (i, r) in results {
                match r {
                    Ok(f) => samples[i][k].push(f),
                    Err(e) => {
                        failures[i].get_or_insert(e);
                    }
                }
            }
        }
    }
    let rows = names
        .iter()
        .zip(samples)
        .zip(failures)
        .map(|(((name, unit, _), [mut kernel, mut ours]), failure)| ProgramRow {
            name,
            unit,
            kernel: median(&mut kernel),
            ours: median(&mut ours),
            failure,
        })
        .collect();
    ProgramsSection { rows }
}

/// The section as markdown.
pub fn markdown(section: &ProgramsSection) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## programs: unmodified, on kernel sockets and under `bypass run --busy-poll` (our stack in the program's threads)\n"
    );
    let _ = writeln!(
        out,
        "| program and load | unit | kernel | bypass run | vs kernel | p50 kernel / ours | p99 kernel / ours | client CPU kernel / ours |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let busy = |f: Option<Fig>| f.and_then(|f| f.client_busy).map_or("-".into(), |b| format!("{:.0}%", b * 100.0));
    let us = |f: Option<Fig>, pick: fn(&Fig) -> Option<f64>| {
        f.and_then(|f| pick(&f)).map_or("-".into(), |v| format!("{v:.0} us"))
    };
    for r in &section.rows {
        let val = |f: Option<Fig>| {
            f.map_or(
                "-".into(),
                |f| if r.unit == "Gbit/s" { format!("{:.2}", f.value) } else { format!("{:.0}", f.value) },
            )
        };
        let ratio = match (r.kernel, r.ours) {
            (Some(k), Some(o)) if k.value > 0.0 => format!("{:.2}x", o.value / k.value),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {ratio} | {} / {} | {} / {} | {} / {} |{}",
            r.name,
            r.unit,
            val(r.kernel),
            val(r.ours),
            us(r.kernel, |f| f.p50_us),
            us(r.ours, |f| f.p50_us),
            us(r.kernel, |f| f.p99_us),
            us(r.ours, |f| f.p99_us),
            busy(r.kernel),
            busy(r.ours),
            r.failure.as_ref().map_or(String::new(), |f| format!(" {f}")),
        );
    }
    out
}

/// The section as a JSON value.
pub fn json(section: &ProgramsSection, js: impl Fn(&str) -> String) -> String {
    let num = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.3}"));
    let fig = |f: Option<Fig>| match f {
        Some(f) => {
            format!(
                "{{\"value\": {:.3}, \"p50_us\": {}, \"p99_us\": {}, \"client_cpu_share\": {}}}",
                f.value,
                num(f.p50_us),
                num(f.p99_us),
                num(f.client_busy)
            )
        }
        None => "null".into(),
    };
    let rows: Vec<String> = section
        .rows
        .iter()
        .map(|r| {
            format!(
                "{{\"name\": {}, \"unit\": {}, \"kernel\": {}, \"bypass_run\": {}, \"failure\": {}}}",
                js(r.name),
                js(r.unit),
                fig(r.kernel),
                fig(r.ours),
                r.failure.as_deref().map_or("null".into(), &js)
            )
        })
        .collect();
    format!("[{}]", rows.join(", "))
}
