//! The figures of one measurement, their medians, and the table, Markdown and JSON.

use std::fmt::Write;

use hdrhistogram::Histogram;

use super::kernel::{ClientResult, ServerResult};
use super::{Conditions, Transport, Workload};

/// The figures of one measurement. Costs are per unit of work: per request, per connection,
/// or (bulk) per MiB, except CPU for bulk, which is seconds per GiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Requests/s, connections/s, or Gbit/s (bulk).
    pub rate: f64,
    /// Client plus server CPU time per unit (µs; s/GiB for bulk).
    pub cpu_per_unit: f64,
    pub client_cpu_per_unit: f64,
    pub server_cpu_per_unit: f64,
    /// Client plus server `syscr + syscw` per unit.
    pub syscalls_per_unit: f64,
    /// Client plus server context switches (voluntary + involuntary) per unit.
    pub ctx_per_unit: f64,
    pub voluntary_per_unit: f64,
    pub involuntary_per_unit: f64,
    /// Our stack's CPU copies per byte per direction (its ends: the server, and the client
    /// where it is ours too; smoltcp's server counts its own), if an end is ours.
    pub copies_ours: Option<f64>,
    /// Units of work measured (requests, connections, MiB).
    pub units: f64,
}

impl Run {
    /// Combine what the client and the server measured.
    pub fn new(workload: Workload, client: &ClientResult, server: &ServerResult) -> Run {
        let (c, s) = (&client.usage, &server.usage);
        let secs = client.elapsed.as_secs_f64().max(1e-9);
        let q = |q: f64| client.latency.value_at_quantile(q) as f64 / 1000.0;
        let (units, rate, cpu_scale, bytes_through_server) = match workload {
            Workload::Rr { size, .. } => {
                let n = client.units.max(1) as f64;
                // Each request is `size` bytes into and `size` bytes out of the server.
                (n, client.units as f64 / secs, 1e6 / n, 2.0 * size as f64 * n)
            }
            Workload::Connect => {
                let n = client.units.max(1) as f64;
                (n, client.units as f64 / secs, 1e6 / n, 2.0 * 64.0 * n)
            }
            Workload::BulkUp | Workload::BulkDown => {
                let bytes = client.units.max(1) as f64;
                let mib = bytes / (1u64 << 20) as f64;
                (mib, bytes * 8.0 / secs / 1e9, (1u64 << 30) as f64 / bytes, bytes)
            }
        };
        Run {
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            rate,
            cpu_per_unit: (c.cpu + s.cpu).as_secs_f64() * cpu_scale,
            client_cpu_per_unit: c.cpu.as_secs_f64() * cpu_scale,
            server_cpu_per_unit: s.cpu.as_secs_f64() * cpu_scale,
            syscalls_per_unit: (c.syscalls + s.syscalls) as f64 / units,
            ctx_per_unit: (c.voluntary + c.involuntary + s.voluntary + s.involuntary) as f64 / units,
            voluntary_per_unit: (c.voluntary + s.voluntary) as f64 / units,
            involuntary_per_unit: (c.involuntary + s.involuntary) as f64 / units,
            // Both ends where both are ours (their copies add up along the path).
            copies_ours: match (server.copied, client.copied) {
                (None, None) => None,
                (s, c) => Some((s.unwrap_or(0) + c.unwrap_or(0)) as f64 / bytes_through_server),
            },
            units,
        }
    }
}

/// Medians over the repetitions.
pub type Figures = Run;

/// A latency distribution as (round trip in µs, fraction of round trips at or below it),
/// ascending; empty for workloads without latencies.
pub type Cdf = Vec<(f64, f64)>;

/// One repetition: its figures and its latency distribution.
pub type Measured = (Run, Cdf);

/// Return the distribution of `latency` (ns) at quantiles 0, 0.01 .. 0.99, the far tail and the maximum.
pub fn cdf(latency: &Histogram<u64>) -> Cdf {
    if latency.is_empty() {
        return Vec::new();
    }
    let tail = [0.995, 0.999, 0.9995, 0.9999, 1.0];
    (0..100).map(|i| i as f64 / 100.0).chain(tail).map(|q| (latency.value_at_quantile(q) as f64 / 1000.0, q)).collect()
}

impl Run {
    /// Return the median of every figure over `runs` (not empty).
    pub fn median(runs: &[Run]) -> Run {
        let m = |f: &dyn Fn(&Run) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let k = v.len();
            if k % 2 == 1 { v[k / 2] } else { (v[k / 2 - 1] + v[k / 2]) / 2.0 }
        };
        Run {
            p50_us: m(&|r| r.p50_us),
            p99_us: m(&|r| r.p99_us),
            p999_us: m(&|r| r.p999_us),
            rate: m(&|r| r.rate),
            cpu_per_unit: m(&|r| r.cpu_per_unit),
            client_cpu_per_unit: m(&|r| r.client_cpu_per_unit),
            server_cpu_per_unit: m(&|r| r.server_cpu_per_unit),
            syscalls_per_unit: m(&|r| r.syscalls_per_unit),
            ctx_per_unit: m(&|r| r.ctx_per_unit),
            voluntary_per_unit: m(&|r| r.voluntary_per_unit),
            involuntary_per_unit: m(&|r| r.involuntary_per_unit),
            copies_ours: runs[0].copies_ours.map(|_| m(&|r| r.copies_ours.unwrap_or(0.0))),
            units: m(&|r| r.units),
        }
    }
}

/// One row: a transport at one message size.
pub struct Row {
    pub transport: Transport,
    pub workload: Workload,
    pub figures: Option<Figures>,
    /// Why the row has no figures (or why a repetition failed).
    pub failure: Option<String>,
    pub runs: usize,
    /// The latency distribution of the repetition with the median p50 (empty for bulk).
    pub cdf: Cdf,
}

/// Return the column headers of `workload`'s table.
fn header(workload: Workload) -> Vec<&'static str> {
    match workload {
        Workload::Rr { .. } => vec![
            "transport",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "req/s",
            "p50 vs 2",
            "p50 vs 2d",
            "CPU µs/req",
            "syscalls/req",
            "ctx sw/req",
            "copies/byte",
        ],
        Workload::Connect => vec![
            "transport",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "conn/s",
            "p50 vs 2",
            "p50 vs 2d",
            "CPU µs/conn",
            "syscalls/conn",
            "ctx sw/conn",
            "copies/byte",
        ],
        Workload::BulkUp | Workload::BulkDown => {
            vec!["transport", "Gbit/s", "vs 2", "vs 2d", "CPU s/GiB", "syscalls/MiB", "ctx sw/MiB", "copies/byte"]
        }
    }
}

/// The kernel rows every other row is read against: busy-polling kernel TCP with the offloads
/// off (row 2, frame for frame what the userspace stacks put on the wire) and with the
/// kernel's default offloads (row 2d, what a user gets out of the box).
const BASELINES: [Transport; 2] = [Transport::KernelBusy, Transport::KernelDefaults];

/// Return the figure of `workload` that ratios compare: Gbit/s for bulk, p50 for the others.
fn compared(workload: Workload, f: &Figures) -> f64 {
    if workload.is_bulk() { f.rate } else { f.p50_us }
}

/// Return `row`'s ratio to each of [`BASELINES`] in the same run, where both were measured.
pub fn ratios(rows: &[Row], row: &Row) -> [Option<f64>; 2] {
    BASELINES.map(|baseline| {
        let base = rows.iter().find(|r| r.workload == row.workload && r.transport == baseline)?.figures?;
        let f = row.figures?;
        Some(compared(row.workload, &f) / compared(row.workload, &base))
    })
}

/// Return the cells of each row of `workload`.
fn cells(rows: &[Row], workload: Workload) -> Vec<Vec<String>> {
    let ratio_cells = |r: &Row| ratios(rows, r).map(|x| x.map_or("-".into(), |x| format!("{x:.2}x")));
    rows.iter()
        .filter(|r| r.workload == workload)
        .map(|r| {
            let mut c = vec![r.transport.label().to_string()];
            match &r.figures {
                Some(f) => {
                    if workload.is_bulk() {
                        c.push(format!("{:.2}", f.rate));
                        c.extend(ratio_cells(r));
                        c.push(format!("{:.2}", f.cpu_per_unit));
                    } else {
                        c.push(format!("{:.1}", f.p50_us));
                        c.push(format!("{:.1}", f.p99_us));
                        c.push(format!("{:.1}", f.p999_us));
                        c.push(format!("{:.0}", f.rate));
                        c.extend(ratio_cells(r));
                        c.push(format!("{:.2}", f.cpu_per_unit));
                    }
                    c.push(format!("{:.1}", f.syscalls_per_unit));
                    c.push(format!("{:.3}", f.ctx_per_unit));
                    c.push(match f.copies_ours {
                        Some(x) => format!("{x:.2}+{}k", r.transport.kernel_copies()),
                        None => format!("{}k", r.transport.kernel_copies()),
                    });
                }
                None => {
                    c.push(format!("skipped: {}", r.failure.as_deref().unwrap_or("?")));
                }
            }
            c
        })
        .collect()
}

fn workloads(rows: &[Row]) -> Vec<Workload> {
    let mut w: Vec<Workload> = Vec::new();
    for r in rows {
        if !w.contains(&r.workload) {
            w.push(r.workload);
        }
    }
    w
}

pub fn conditions_line(c: &Conditions) -> String {
    let mut s = format!(
        "{}; Linux {}; {} cores; MTU {}; {}; row 1 interrupt-driven (blocking), every other row busy-polling; AF_XDP mode: {}; AF_PACKET: {}; MSG_ZEROCOPY: {}; median of {} run(s) of {:.1} s each",
        c.date,
        c.kernel,
        c.cores,
        c.mtu.map_or("65536 (loopback)".into(), |m| m.to_string()),
        c.offloads,
        c.xdp_mode.as_deref().unwrap_or("not run"),
        c.packet_mode.as_deref().unwrap_or("not run"),
        c.msg_zerocopy.as_deref().unwrap_or("not run"),
        c.runs,
        c.duration.as_secs_f64(),
    );
    if let Some(note) = &c.note {
        let _ = write!(s, "; {note}");
    }
    s
}

const LEGEND: &str = "latency measured by the client (round trip; for the connection rate: connect + exchange + close); `vs 2` and `vs 2d`: ratio to row 2 (busy-polling kernel TCP, offloads off: the same frames on the wire as the userspace stacks) and to row 2d (the same with the kernel's default offloads: what a user gets out of the box, and the one to compare with) in the same run (p50: lower is better; Gbit/s: higher is better); `<- kernel`: a kernel client against our server (the mixed case); `<-> ours`: our stack at both ends; CPU, syscalls (syscr+syscw of /proc/thread-self/io: read/write-family calls, every call of the kernel ends, including those a busy-polling loop makes in vain; plus the socket, connect, poll, accept4, setsockopt, ioctl and close calls the kernel ends make, counted where the demo makes them; plus, for our stack and smoltcp, the calls their packet device made, counted by the device: AF_XDP sendto/recvfrom/poll, AF_PACKET sendmmsg/ppoll) and context switches (voluntary + involuntary, getrusage RUSAGE_THREAD) are client + server threads per unit of work; copies/byte = CPU copies per byte per direction, end to end: ours (measured by the stack at our ends; for smoltcp, counted by its server) + k by the kernel";

fn failures(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.figures.is_some())
        .filter_map(|r| {
            r.failure.as_ref().map(|f| format!("{} {}: a repetition failed: {f}", r.transport.name(), r.workload.key()))
        })
        .collect()
}

/// Return the floor's line, if it was measured.
fn floor_line(c: &Conditions) -> Option<String> {
    let f = c.floor.as_ref()?;
    Some(format!(
        "0 raw AF_XDP frames, no TCP (the floor for any bypass stack here): p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs over {} round trips{} ({})",
        f.p50_us,
        f.p99_us,
        f.p999_us,
        f.rounds,
        if f.lost > 0 { format!(", {} lost", f.lost) } else { String::new() },
        f.mode
    ))
}

/// Return the terminal table.
pub fn table(rows: &[Row], c: &Conditions) -> String {
    let mut out = String::new();
    if let Some(line) = floor_line(c) {
        let _ = writeln!(out, "\n{line}");
    }
    for workload in workloads(rows) {
        let body = cells(rows, workload);
        let head = header(workload);
        let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for row in &body {
            for (i, cell) in row.iter().enumerate().take(if row.len() == 2 { 1 } else { row.len() }) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let _ = writeln!(out, "\n{}", workload.title());
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let w = if cells.len() == 2 && i == 1 { 0 } else { widths[i] };
                if i == 0 {
                    let _ = write!(l, "{cell:<w$}");
                } else {
                    let _ = write!(l, "  {cell:>w$}");
                }
            }
            l
        };
        let head: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(out, "{}", line(&head));
        for row in &body {
            let _ = writeln!(out, "{}", line(row));
        }
    }
    let _ = writeln!(out, "\n{LEGEND}");
    let _ = writeln!(out, "conditions: {}", conditions_line(c));
    for f in failures(rows) {
        let _ = writeln!(out, "note: {f}");
    }
    out
}

/// Return `results.md`, with `charts` (the Markdown that shows the charts) under its title.
pub fn markdown(rows: &[Row], c: &Conditions, charts: &str) -> String {
    let mut out = String::from("# bypass demo results\n");
    let _ = writeln!(out, "\n{charts}");
    if let Some(line) = floor_line(c) {
        let _ = writeln!(out, "\n{line}.");
    }
    for workload in workloads(rows) {
        let head = header(workload);
        let _ = writeln!(out, "\n## {}\n", workload.title());
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
        for row in cells(rows, workload) {
            let mut row = row;
            row.resize(head.len(), String::new());
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }
    let _ = writeln!(out, "\n{LEGEND}.\n\n**Conditions:** {}.\n\n## What runs where\n", conditions_line(c));
    let mut seen = Vec::new();
    for r in rows {
        if !seen.contains(&r.transport) {
            seen.push(r.transport);
            let _ =
                writeln!(out, "- **{}** (`{}`): {}.", r.transport.label(), r.transport.name(), r.transport.placement());
        }
    }
    let _ = writeln!(out, "\n## Copies per byte\n");
    for t in &seen {
        let _ = writeln!(out, "- **{}**: {}.", t.label(), t.copies());
    }
    for f in failures(rows) {
        let _ = writeln!(out, "\nNote: {f}");
    }
    out
}

/// Return `s` as a JSON string literal.
fn js(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Return a finite number as JSON (non-finite as null).
fn jn(x: f64) -> String {
    if x.is_finite() { format!("{x:.4}") } else { "null".into() }
}

/// Return `results.json`.
pub fn json(rows: &[Row], c: &Conditions) -> String {
    let opt = |s: &Option<String>| s.as_deref().map_or("null".into(), js);
    let mut out = String::from("{\n");
    let _ = writeln!(out, "  \"date\": {},", js(&c.date));
    let _ = writeln!(out, "  \"legend\": {},", js(LEGEND));
    let _ = writeln!(
        out,
        "  \"conditions\": {{\"kernel\": {}, \"cores\": {}, \"mtu\": {}, \"offloads\": {}, \"xdp_mode\": {}, \"packet_mode\": {}, \"msg_zerocopy\": {}, \"runs\": {}, \"duration_s\": {}, \"note\": {}, \"summary\": {}}},",
        js(&c.kernel),
        c.cores,
        c.mtu.map_or("null".into(), |m| m.to_string()),
        js(&c.offloads),
        opt(&c.xdp_mode),
        opt(&c.packet_mode),
        opt(&c.msg_zerocopy),
        c.runs,
        jn(c.duration.as_secs_f64()),
        opt(&c.note),
        js(&conditions_line(c)),
    );
    match &c.floor {
        Some(f) => {
            let _ = writeln!(
                out,
                "  \"floor\": {{\"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \"round_trips\": {}, \"lost\": {}, \"mode\": {}}},",
                jn(f.p50_us),
                jn(f.p99_us),
                jn(f.p999_us),
                f.rounds,
                f.lost,
                js(&f.mode)
            );
        }
        None => out.push_str("  \"floor\": null,\n"),
    }
    match &c.app {
        Some(app) => {
            let _ = writeln!(out, "  \"application\": {},", super::app::json(app, js));
        }
        None => out.push_str("  \"application\": null,\n"),
    }
    match &c.programs {
        Some(p) => {
            let _ = writeln!(out, "  \"programs\": {},", super::programs::json(p, js));
        }
        None => out.push_str("  \"programs\": null,\n"),
    }
    match &c.memory {
        Some(memory) => {
            let _ = writeln!(out, "  \"memory\": {},", super::memory::json(memory, js));
        }
        None => out.push_str("  \"memory\": null,\n"),
    }
    out.push_str("  \"rows\": [\n");
    for (i, r) in rows.iter().enumerate() {
        let mut o = format!(
            "    {{\"transport\": {}, \"label\": {}, \"workload\": {}, \"title\": {}, \"connections\": {}, \"message_bytes\": {}, \"rate_unit\": {}, \"cost_unit\": {}, \"runs\": {}, \"where\": {}, \"copies\": {}, \"kernel_copies_per_byte\": {}",
            js(r.transport.name()),
            js(r.transport.label()),
            js(&r.workload.key()),
            js(&r.workload.title()),
            match r.workload {
                Workload::Rr { conns, .. } => conns,
                _ => 1,
            },
            match r.workload {
                Workload::Rr { size, .. } => size.to_string(),
                Workload::Connect => "64".into(),
                Workload::BulkUp | Workload::BulkDown => "null".into(),
            },
            js(match r.workload {
                Workload::Rr { .. } => "requests/s",
                Workload::Connect => "connections/s",
                Workload::BulkUp | Workload::BulkDown => "Gbit/s",
            }),
            js(match r.workload {
                Workload::Rr { .. } => "per request (CPU in µs)",
                Workload::Connect => "per connection (CPU in µs)",
                Workload::BulkUp | Workload::BulkDown => "per MiB (CPU in s/GiB)",
            }),
            r.runs,
            js(r.transport.placement()),
            js(r.transport.copies()),
            r.transport.kernel_copies(),
        );
        let [vs_2, vs_2d] = ratios(rows, r);
        // Ratios in full: a row far off the baseline must not print as 0.0000.
        let ratio = |x: Option<f64>| x.filter(|x| x.is_finite()).map_or("null".into(), |x| format!("{x}"));
        let _ = write!(o, ", \"vs_row_2\": {}, \"vs_row_2d\": {}", ratio(vs_2), ratio(vs_2d));
        if let Some(f) = &r.figures {
            let _ = write!(
                o,
                ", \"p50_us\": {}, \"p99_us\": {}, \"p99_9_us\": {}, \"rate\": {}, \"cpu\": {}, \"client_cpu\": {}, \"server_cpu\": {}, \"syscalls\": {}, \"ctx_switches\": {}, \"voluntary_ctx\": {}, \"involuntary_ctx\": {}, \"copies_ours_per_byte\": {}, \"units\": {}",
                if r.workload.is_bulk() { "null".into() } else { jn(f.p50_us) },
                if r.workload.is_bulk() { "null".into() } else { jn(f.p99_us) },
                if r.workload.is_bulk() { "null".into() } else { jn(f.p999_us) },
                jn(f.rate),
                jn(f.cpu_per_unit),
                jn(f.client_cpu_per_unit),
                jn(f.server_cpu_per_unit),
                jn(f.syscalls_per_unit),
                jn(f.ctx_per_unit),
                jn(f.voluntary_per_unit),
                jn(f.involuntary_per_unit),
                f.copies_ours.map_or("null".into(), jn),
                jn(f.units),
            );
        }
        let _ = write!(o, ", \"failure\": {}}}", opt(&r.failure));
        out.push_str(&o);
        out.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ]\n}\n");
    out
}
