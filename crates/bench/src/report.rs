//! The figures of one measurement, their medians, and the table, Markdown and JSON.

use std::fmt::Write;

use hdrhistogram::Histogram;

use super::kernel::{ClientResult, ServerResult};
use super::{BulkFloor, Conditions, Transport, Workload};

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
    /// A file row's copies, where each happens, per byte delivered.
    pub file: Option<super::file::PerByte>,
    /// The floor's p50 (µs) measured just before and just after this measurement, for the
    /// rows the floor bounds (see [`Workload::floored`]); per repetition only (`None` in
    /// the medians: a ratio to it is taken within each repetition).
    pub floor_bracket_us: Option<(f64, f64)>,
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
            Workload::BulkUp | Workload::BulkDown | Workload::File => {
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
            file: None,
            floor_bracket_us: None,
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
            file: runs[0].file.map(|_| {
                let all: Vec<super::file::PerByte> = runs.iter().filter_map(|r| r.file).collect();
                super::file::PerByte::median(&all)
            }),
            floor_bracket_us: None,
        }
    }
}

/// A spread wider than this (`max / min - 1`) marks a ratio unsettled.
pub const UNSETTLED: f64 = 0.20;

/// The legend of a ratio cell `1.31x (1.12-1.37)`.
pub const LEGEND_SPREAD: &str = "a ratio cell reads `median (least-most)` over the repetitions, each repetition's ratio taken between figures of that repetition (so a slow phase of the machine moves both sides of it alike); its spread is most/least - 1, and a trailing `~` marks a ratio whose spread is wider than 20%: unsettled, the machine's speed moved more than the difference it shows";

/// A ratio over the repetitions: one per repetition, their median and range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The ratio of each repetition, in repetition order.
    pub per_run: Vec<f64>,
}

impl Spread {
    /// Return the median and range of `per_run` (finite values only); `None` if there are none.
    pub fn of(per_run: &[f64]) -> Option<Spread> {
        let per_run: Vec<f64> = per_run.iter().copied().filter(|x| x.is_finite()).collect();
        let mut v = per_run.clone();
        v.sort_by(f64::total_cmp);
        let k = v.len();
        let median = match k {
            0 => return None,
            k if k % 2 == 1 => v[k / 2],
            k => (v[k / 2 - 1] + v[k / 2]) / 2.0,
        };
        Some(Spread { median, min: v[0], max: v[k - 1], per_run })
    }

    /// Return the spread, `max / min - 1` (0 for a single repetition; infinite if the least is 0).
    pub fn width(&self) -> f64 {
        if self.min > 0.0 {
            self.max / self.min - 1.0
        } else if self.max == self.min {
            0.0
        } else {
            f64::INFINITY
        }
    }

    /// Return whether the spread is wider than [`UNSETTLED`].
    pub fn unsettled(&self) -> bool {
        self.width() > UNSETTLED
    }

    /// Return the table cell: `1.31x (1.12-1.37)`, `~` appended when unsettled; the median
    /// alone for a single repetition.
    pub fn cell(&self) -> String {
        let mut c = format!("{:.2}x", self.median);
        if self.per_run.len() > 1 {
            let _ = write!(c, " ({:.2}-{:.2})", self.min, self.max);
        }
        if self.unsettled() {
            c.push('~');
        }
        c
    }

    /// Return the spread as a JSON object.
    pub fn json(&self) -> String {
        let ratio = |x: f64| if x.is_finite() { format!("{x}") } else { "null".into() };
        let per_run: Vec<String> = self.per_run.iter().map(|x| ratio(*x)).collect();
        format!(
            "{{\"median\": {}, \"min\": {}, \"max\": {}, \"spread\": {}, \"unsettled\": {}, \"per_repetition\": [{}]}}",
            ratio(self.median),
            ratio(self.min),
            ratio(self.max),
            ratio(self.width()),
            self.unsettled(),
            per_run.join(", ")
        )
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
    /// The figures of each repetition that measured, with its number (counted from 0).
    pub per_run: Vec<(usize, Run)>,
    /// The latency distribution of the repetition with the median p50 (empty for bulk).
    pub cdf: Cdf,
}

/// Return the column headers of `workload`'s table.
fn header(workload: Workload) -> Vec<&'static str> {
    match workload {
        Workload::Rr { .. } => {
            let mut h = vec![
                "transport",
                "p50 µs",
                "p99 µs",
                "p99.9 µs",
                "req/s",
                "p50 vs 2",
                "p50 vs 2d",
                "p50 vs best kernel",
            ];
            if workload.floored() {
                h.push("p50 vs floor");
            }
            h.extend(["CPU µs/req", "syscalls/req", "ctx sw/req", "copies/byte"]);
            h
        }
        Workload::Connect => vec![
            "transport",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "conn/s",
            "p50 vs 2",
            "p50 vs 2d",
            "p50 vs best kernel",
            "CPU µs/conn",
            "syscalls/conn",
            "ctx sw/conn",
            "copies/byte",
        ],
        Workload::File => vec![
            "transport",
            "Gbit/s",
            "CPU s/GiB",
            "syscalls/MiB",
            "ctx sw/MiB",
            "minor faults/MiB",
            "page cache -> user",
            "user -> socket buffer",
            "page cache -> socket buffer",
            "pinned pages copied (ZEROCOPY_COPIED)",
            "socket buffer -> UMEM frame",
            "socket buffer -> wire, not observable here",
            "client: socket buffer -> user",
            "CPU copies/byte counted",
        ],
        Workload::BulkUp | Workload::BulkDown => {
            vec![
                "transport",
                "Gbit/s",
                "vs 2",
                "vs 2d",
                "vs best kernel",
                "vs floor",
                "CPU s/GiB",
                "syscalls/MiB",
                "ctx sw/MiB",
                "copies/byte",
            ]
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

/// Return `row`'s ratio to each of [`BASELINES`]: one per repetition where both measured,
/// taken between the figures of that repetition, with their median and range.
pub fn ratios(rows: &[Row], row: &Row) -> [Option<Spread>; 2] {
    BASELINES.map(|baseline| {
        let base = rows.iter().find(|r| r.workload == row.workload && r.transport == baseline)?;
        let per_run: Vec<f64> = row
            .per_run
            .iter()
            .filter_map(|(rep, run)| {
                let (_, b) = base.per_run.iter().find(|(k, _)| k == rep)?;
                Some(compared(row.workload, run) / compared(row.workload, b))
            })
            .collect();
        Spread::of(&per_run)
    })
}

/// The kernel rows that compete for "best kernel": plain sockets and io_uring, each with the
/// offloads off (the userspace stacks' frames) and with the kernel's defaults.
const KERNEL_ROWS: [Transport; 4] =
    [Transport::KernelBusy, Transport::KernelDefaults, Transport::KernelUring, Transport::KernelUringDefaults];

/// Return `row`'s ratio to the best of [`KERNEL_ROWS`] that measured `row`'s workload in the
/// same repetition (the highest Gbit/s, or the lowest p50), one per repetition, with their
/// median and range: which kernel row is best may change from repetition to repetition.
pub fn vs_best_kernel(rows: &[Row], row: &Row) -> Option<Spread> {
    let w = row.workload;
    let per_run: Vec<f64> = row
        .per_run
        .iter()
        .filter_map(|(rep, run)| {
            let best = rows
                .iter()
                .filter(|r| r.workload == w && KERNEL_ROWS.contains(&r.transport))
                .filter_map(|r| r.per_run.iter().find(|(k, _)| k == rep).map(|(_, b)| compared(w, b)))
                .filter(|x| x.is_finite() && *x > 0.0)
                .reduce(|a, b| if w.is_bulk() { a.max(b) } else { a.min(b) })?;
            Some(compared(w, run) / best)
        })
        .collect();
    Spread::of(&per_run)
}

/// Return `row`'s p50 as a ratio to the floor's, for the rows the floor bounds: one per
/// repetition, each against the floor measured right before and right after the row in that
/// repetition (the mean of the two p50s), so that the machine's speed has no time to move
/// between the two sides of a ratio; `None` where no repetition had its bracket.
pub fn p50_vs_floor(row: &Row) -> Option<Spread> {
    let per_run: Vec<f64> = row
        .per_run
        .iter()
        .filter_map(|(_, run)| {
            let (before, after) = run.floor_bracket_us?;
            Some(run.p50_us / ((before + after) / 2.0))
        })
        .collect();
    Spread::of(&per_run)
}

/// Return the bulk floors of `workload` at the MTU of `transport`'s rows, one per repetition
/// that measured it: none for a non-bulk workload or the in-memory row (no veth).
fn floors_for(c: &Conditions, workload: Workload, transport: Transport) -> impl Iterator<Item = &BulkFloor> {
    let applies = workload.is_bulk() && transport != Transport::StackMemory;
    c.bulk_floors.iter().filter(move |f| applies && f.workload == workload && f.jumbo == transport.jumbo())
}

/// Return `row`'s Gbit/s as a ratio to the bulk floor of its direction and MTU: one per
/// repetition where both measured, taken between the figures of that repetition.
pub fn vs_floor(c: &Conditions, row: &Row) -> Option<Spread> {
    let per_run: Vec<f64> = row
        .per_run
        .iter()
        .filter_map(|(rep, run)| {
            let floor = floors_for(c, row.workload, row.transport).find(|f| f.rep == *rep)?;
            Some(run.rate / floor.gbit)
        })
        .collect();
    Spread::of(&per_run)
}

/// Return the lines that state the bulk floors of `workload`, one per MTU measured.
fn bulk_floor_lines(c: &Conditions, workload: Workload) -> Vec<String> {
    let mut lines = Vec::new();
    for jumbo in [false, true] {
        let floors: Vec<&BulkFloor> =
            c.bulk_floors.iter().filter(|f| f.workload == workload && f.jumbo == jumbo).collect();
        let Some(first) = floors.first() else { continue };
        let gbit: Vec<f64> = floors.iter().map(|f| f.gbit).collect();
        let Some(s) = Spread::of(&gbit) else { continue };
        let (sent, lost) = floors.iter().fold((0, 0), |(s, l), f| (s + f.sent, l + f.lost));
        let range = if floors.len() > 1 { format!(" ({:.2}-{:.2})", s.min, s.max) } else { String::new() };
        lines.push(format!(
            "floor: raw AF_XDP frames streamed {}, MTU {}, no TCP, AF_XDP copy mode at both ends (the bound for a stack on copy-mode AF_XDP at both ends): {:.2} Gbit/s{range} of UDP payload received; {lost} of {sent} frames sent were lost ({})",
            first.path(),
            first.mtu(),
            s.median,
            first.mode
        ));
    }
    lines
}

/// Return the cells of each row of `workload`.
fn cells(rows: &[Row], conditions: &Conditions, workload: Workload) -> Vec<Vec<String>> {
    let ratio_cells = |r: &Row| ratios(rows, r).map(|x| x.map_or("-".into(), |x| x.cell()));
    rows.iter()
        .filter(|r| r.workload == workload)
        .map(|r| {
            let mut c = vec![r.transport.label().to_string()];
            match &r.figures {
                Some(f) if workload == Workload::File => c.extend(file_cells(r.transport, f)),
                Some(f) => {
                    if workload.is_bulk() {
                        c.push(format!("{:.2}", f.rate));
                        c.extend(ratio_cells(r));
                        c.push(vs_best_kernel(rows, r).map_or("-".into(), |x| x.cell()));
                        c.push(vs_floor(conditions, r).map_or("-".into(), |x| x.cell()));
                        c.push(format!("{:.2}", f.cpu_per_unit));
                    } else {
                        c.push(format!("{:.1}", f.p50_us));
                        c.push(format!("{:.1}", f.p99_us));
                        c.push(format!("{:.1}", f.p999_us));
                        c.push(format!("{:.0}", f.rate));
                        c.extend(ratio_cells(r));
                        c.push(vs_best_kernel(rows, r).map_or("-".into(), |x| x.cell()));
                        if workload.floored() {
                            c.push(p50_vs_floor(r).map_or("-".into(), |x| x.cell()));
                        }
                        c.push(format!("{:.2}", f.cpu_per_unit));
                    }
                    c.push(format!("{:.1}", f.syscalls_per_unit));
                    c.push(format!("{:.3}", f.ctx_per_unit));
                    c.push(copies_cell(f.copies_ours, r.transport.kernel_copies()));
                }
                None => {
                    c.push(format!("skipped: {}", r.failure.as_deref().unwrap_or("?")));
                }
            }
            c
        })
        .collect()
}

/// Return the copies cell: `1.02 ours + 2 kernel`, or `2 kernel` where no end is ours.
fn copies_cell(ours: Option<f64>, kernel: u32) -> String {
    match ours {
        Some(x) => format!("{x:.2} ours + {kernel} kernel"),
        None => format!("{kernel} kernel"),
    }
}

/// Return a file row's cells after its label: the usual figures, then each copy per byte
/// where it happens (`-` where the path has no such step).
fn file_cells(t: Transport, f: &Figures) -> Vec<String> {
    let p = f.file.unwrap_or_default();
    let ours = t.needs_lab();
    let x = |v: f64| format!("{v:.2}");
    vec![
        format!("{:.2}", f.rate),
        format!("{:.2}", f.cpu_per_unit),
        format!("{:.1}", f.syscalls_per_unit),
        format!("{:.3}", f.ctx_per_unit),
        format!("{:.1}", p.faults_per_mib),
        x(p.cache_to_user),
        x(p.user_to_socket),
        x(p.cache_to_socket),
        p.zerocopy_copied.map_or("-".into(), x),
        if ours { x(p.socket_to_frame) } else { "-".into() },
        t.hidden_copies().into(),
        x(p.client_to_user),
        format!("{:.2} ({:.2} sending + {:.2} client)", p.total(), p.sending(), p.client_to_user),
    ]
}

/// What the file table's columns mean.
pub const FILE_LEGEND: &str = "each copy column is bytes copied by a CPU per byte the client received, counted inside the window by the mechanism that copies (a little over 1 where bytes still in flight or unread in the client's socket buffer as the window ends were counted by the server): page cache -> user = bytes pread(2) returned into a buffer of the server's (filemap_read copies them out); user -> socket buffer = bytes write(2) took on a kernel socket (tcp_sendmsg copies them in) or Stack::write took on ours (an mmap'ed file is user memory here: write copies from the mapping); page cache -> socket buffer = bytes pread(2) wrote straight into the space Stack::send_with lent (one copy where read + write make two); pinned pages copied = bytes of MSG_ZEROCOPY sends whose completion carried SO_EE_CODE_ZEROCOPY_COPIED, per byte of the sends completed (the veth delivers to a local socket, which copies pinned pages: skb_orphan_frags_rx); socket buffer -> UMEM frame = our stack's bytes_copied less Stack::write's; client = bytes the client's read(2) returned (skb -> user); sendfile and splice copy nothing the system calls can show: the socket buffer holds page references; what the kernel does below the socket (the veth passing the skb on; AF_XDP copy mode copying each frame from the UMEM into an skb) is not observable from user space and not counted; minor faults: the server thread's (getrusage), the price of mapping instead of copying; every kernel row runs on bk0/pk0 with the kernel's default offloads (scatter-gather and checksum offload on, as shipped), our rows on bx0/px0 as row 5";

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
        "{}; Linux {}; {} cores; MTU {}; {}; row 1 interrupt-driven (blocking), every other row busy-polling; AF_XDP mode: {}; AF_PACKET: {}; MSG_ZEROCOPY: {}; median of {} run(s) of {:.1} s each, every run measuring every row once, in an order rotated from run to run",
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

const LEGEND: &str = "latency measured by the client (round trip; for the connection rate: connect + exchange + close); `vs 2` and `vs 2d`: ratio to row 2 (busy-polling kernel TCP, offloads off: the same frames on the wire as the userspace stacks) and to row 2d (the same with the kernel's default offloads: what a user gets out of the box, and the one to compare with) in the same run (p50: lower is better; Gbit/s: higher is better); `vs best kernel`: ratio to the best kernel row of the workload in the same run, the best of rows 2, 2d, 2u and 2ud (kernel TCP with read/write or io_uring, offloads off or default) in that repetition; `vs floor` (bulk): ratio to the bulk floor of the same direction and MTU in the same run, MTU-sized raw AF_XDP frames streamed one way in copy mode through our AF_XDP device with no TCP and no payload written (the bound for a stack on copy-mode AF_XDP at both ends, as row 5b; a row with a kernel socket at one end does not pay AF_XDP's cost there and may pass it; the floor's UDP payload is 12 bytes per frame more than a TCP segment's with timestamps); `p50 vs floor` (64-byte request/response, one connection): the row's p50 over row 0's, the raw AF_XDP frames bounced with no TCP, measured right before and right after the row in the same repetition (their mean: the floor brackets each row, so the machine's speed has no time to move between the two sides of the ratio); `<- kernel`: a kernel client against our server (the mixed case); `<-> ours`: our stack at both ends; CPU, syscalls (syscr+syscw of /proc/thread-self/io: read/write-family calls, every call of the kernel ends, including those a busy-polling loop makes in vain; plus the socket, connect, poll, accept4, setsockopt, ioctl and close calls the kernel ends make, counted where the demo makes them; plus, for our stack and smoltcp, the calls their packet device made, counted by the device: AF_XDP sendto/recvfrom/poll, AF_PACKET sendmmsg/ppoll) and context switches (voluntary + involuntary, getrusage RUSAGE_THREAD) are client + server threads per unit of work; copies/byte = CPU copies per byte per direction, end to end, as `X ours + N kernel`: X measured by our stack at our ends (for smoltcp, counted by its server), N made by the kernel (from its code path: see each row's copies below)";

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
        "0 raw AF_XDP frames, no TCP (the floor for any bypass stack here): p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs over {} round trips{}{} ({})",
        f.p50_us,
        f.p99_us,
        f.p999_us,
        f.rounds,
        if f.lost > 0 { format!(", {} lost", f.lost) } else { String::new() },
        match c.floor_runs.len() {
            n if n > c.runs => format!(
                " (medians of {n} measurements, each right before or after a row of 64-byte request/response on one connection, which reads its p50 against the two around it)"
            ),
            _ => String::new(),
        },
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
        let body = cells(rows, c, workload);
        let head = header(workload);
        let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for row in &body {
            for (i, cell) in row.iter().enumerate().take(if row.len() == 2 { 1 } else { row.len() }) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let _ = writeln!(out, "\n{}", workload.title());
        for l in bulk_floor_lines(c, workload) {
            let _ = writeln!(out, "{l}");
        }
        if workload == Workload::File {
            let _ = writeln!(out, "file: {}; {FILE_LEGEND}", c.file.as_deref().unwrap_or("not made"));
        }
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
    let _ = writeln!(out, "\n{LEGEND}; {LEGEND_SPREAD}");
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
        for l in bulk_floor_lines(c, workload) {
            let _ = writeln!(out, "{l}.\n");
        }
        if workload == Workload::File {
            let _ = writeln!(out, "File: {}. Columns: {FILE_LEGEND}.\n", c.file.as_deref().unwrap_or("not made"));
            let _ = writeln!(out, "![where each copy happens](file-copies.svg)\n");
        }
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
        for row in cells(rows, c, workload) {
            let mut row = row;
            row.resize(head.len(), String::new());
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }
    let _ = writeln!(
        out,
        "\n{LEGEND}; {LEGEND_SPREAD}.\n\n**Conditions:** {}.\n\n## What runs where\n",
        conditions_line(c)
    );
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

/// Return one repetition's figures as a JSON object.
fn run_json(rep: usize, f: &Run, bulk: bool) -> String {
    let floor = match f.floor_bracket_us {
        Some((before, after)) => {
            format!(", \"floor_p50_before_us\": {}, \"floor_p50_after_us\": {}", jn(before), jn(after))
        }
        None => String::new(),
    };
    format!("{{\"repetition\": {}, {}{floor}}}", rep + 1, figure_fields(f, bulk))
}

/// Return a file row's copies per byte as a JSON object.
fn file_json(p: &super::file::PerByte) -> String {
    format!(
        "{{\"page_cache_to_user\": {}, \"user_to_socket\": {}, \"page_cache_to_socket\": {}, \"zerocopy_copied\": {}, \"socket_to_frame\": {}, \"client_socket_to_user\": {}, \"sending\": {}, \"total\": {}, \"minor_faults_per_mib\": {}, \"resident\": {}}}",
        jn(p.cache_to_user),
        jn(p.user_to_socket),
        jn(p.cache_to_socket),
        p.zerocopy_copied.map_or("null".into(), jn),
        jn(p.socket_to_frame),
        jn(p.client_to_user),
        jn(p.sending()),
        jn(p.total()),
        jn(p.faults_per_mib),
        jn(p.resident),
    )
}

/// Return a run's figures as JSON members (`"p50_us": .., .., "units": ..`), latencies null
/// for a bulk stream: the keys of a row's medians and of each of its repetitions.
fn figure_fields(f: &Run, bulk: bool) -> String {
    let lat = |x: f64| if bulk { "null".into() } else { jn(x) };
    format!(
        "\"p50_us\": {}, \"p99_us\": {}, \"p99_9_us\": {}, \"rate\": {}, \"cpu\": {}, \"client_cpu\": {}, \"server_cpu\": {}, \"syscalls\": {}, \"ctx_switches\": {}, \"voluntary_ctx\": {}, \"involuntary_ctx\": {}, \"copies_ours_per_byte\": {}, \"units\": {}",
        lat(f.p50_us),
        lat(f.p99_us),
        lat(f.p999_us),
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
    ) + &f.file.map_or(String::new(), |p| format!(", \"file_copies_per_byte\": {}", file_json(&p)))
}

/// Return `results.json`.
pub fn json(rows: &[Row], c: &Conditions) -> String {
    let opt = |s: &Option<String>| s.as_deref().map_or("null".into(), js);
    let mut out = String::from("{\n");
    let _ = writeln!(out, "  \"date\": {},", js(&c.date));
    let _ = writeln!(out, "  \"file\": {},", opt(&c.file));
    let _ = writeln!(out, "  \"legend\": {},", js(&format!("{LEGEND}; {LEGEND_SPREAD}")));
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
            let reps: Vec<String> = c
                .floor_runs
                .iter()
                .map(|(rep, f)| {
                    format!(
                        "{{\"repetition\": {}, \"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \"round_trips\": {}, \"lost\": {}}}",
                        rep + 1,
                        jn(f.p50_us),
                        jn(f.p99_us),
                        jn(f.p999_us),
                        f.rounds,
                        f.lost
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  \"floor\": {{\"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \"round_trips\": {}, \"lost\": {}, \"mode\": {}, \"repetitions\": [{}]}},",
                jn(f.p50_us),
                jn(f.p99_us),
                jn(f.p999_us),
                f.rounds,
                f.lost,
                js(&f.mode),
                reps.join(", ")
            );
        }
        None => out.push_str("  \"floor\": null,\n"),
    }
    let bulk: Vec<String> = c
        .bulk_floors
        .iter()
        .map(|f| {
            format!(
                "{{\"repetition\": {}, \"workload\": {}, \"path\": {}, \"mtu\": {}, \"gbit_s\": {}, \"frames_sent\": {}, \"frames_lost\": {}, \"mode\": {}}}",
                f.rep + 1,
                js(&f.workload.key()),
                js(f.path()),
                f.mtu(),
                jn(f.gbit),
                f.sent,
                f.lost,
                js(&f.mode)
            )
        })
        .collect();
    let _ = writeln!(out, "  \"bulk_floor\": [{}],", bulk.join(", "));
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
    match &c.flood {
        Some(flood) => {
            let _ = writeln!(out, "  \"flood\": {},", super::flood::json(flood, js));
        }
        None => out.push_str("  \"flood\": null,\n"),
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
                Workload::BulkUp | Workload::BulkDown | Workload::File => "null".into(),
            },
            js(match r.workload {
                Workload::Rr { .. } => "requests/s",
                Workload::Connect => "connections/s",
                Workload::BulkUp | Workload::BulkDown | Workload::File => "Gbit/s",
            }),
            js(match r.workload {
                Workload::Rr { .. } => "per request (CPU in µs)",
                Workload::Connect => "per connection (CPU in µs)",
                Workload::BulkUp | Workload::BulkDown | Workload::File => "per MiB (CPU in s/GiB)",
            }),
            r.runs,
            js(r.transport.placement()),
            js(r.transport.copies()),
            // The file rows count each copy where it happens instead (`file_copies_per_byte`).
            if r.workload == Workload::File { "null".into() } else { r.transport.kernel_copies().to_string() },
        );
        let [vs_2, vs_2d] = ratios(rows, r);
        // Ratios in full: a row far off the baseline must not print as 0.0000. The median
        // under the old keys, the range and each repetition's ratio beside it.
        let ratio = |x: &Option<Spread>| {
            x.as_ref().map(|s| s.median).filter(|x| x.is_finite()).map_or("null".into(), |x| format!("{x}"))
        };
        let spread = |x: &Option<Spread>| x.as_ref().map_or("null".into(), Spread::json);
        let _ = write!(
            o,
            ", \"vs_row_2\": {}, \"vs_row_2d\": {}, \"vs_row_2_spread\": {}, \"vs_row_2d_spread\": {}",
            ratio(&vs_2),
            ratio(&vs_2d),
            spread(&vs_2),
            spread(&vs_2d)
        );
        let best = vs_best_kernel(rows, r);
        let _ = write!(o, ", \"vs_best_kernel\": {}, \"vs_best_kernel_spread\": {}", ratio(&best), spread(&best));
        if r.workload.is_bulk() || r.workload.floored() {
            // Gbit/s over the bulk floor's, or p50 over the floor's bracket.
            let floor = if r.workload.is_bulk() { vs_floor(c, r) } else { p50_vs_floor(r) };
            let _ = write!(o, ", \"vs_floor\": {}, \"vs_floor_spread\": {}", ratio(&floor), spread(&floor));
        }
        if let Some(f) = &r.figures {
            let _ = write!(o, ", {}", figure_fields(f, r.workload.is_stream()));
        }
        let _ = write!(o, ", \"failure\": {}", opt(&r.failure));
        // Every figure of every repetition, after the medians (readers that take a key's
        // first occurrence in the line get the median).
        let reps: Vec<String> =
            r.per_run.iter().map(|(rep, run)| run_json(*rep, run, r.workload.is_stream())).collect();
        let _ = write!(o, ", \"repetitions\": [{}]}}", reps.join(", "));
        out.push_str(&o);
        out.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_median_and_range_and_marks_wide_ones() {
        let s = Spread::of(&[1.37, 1.12, 1.31]).unwrap();
        assert_eq!((s.median, s.min, s.max), (1.31, 1.12, 1.37));
        // 1.37 / 1.12 - 1 = 22%: unsettled.
        assert!(s.unsettled());
        assert_eq!(s.cell(), "1.31x (1.12-1.37)~");
        let s = Spread::of(&[1.30, 1.25, 1.20, f64::NAN]).unwrap();
        assert_eq!(s.per_run.len(), 3, "non-finite ratios are left out");
        assert!(!s.unsettled());
        assert_eq!(s.cell(), "1.25x (1.20-1.30)");
        // One repetition: the median alone, settled.
        assert_eq!(Spread::of(&[0.5]).unwrap().cell(), "0.50x");
        assert_eq!(Spread::of(&[]), None);
        assert!(Spread::of(&[0.0, 1.0]).unwrap().unsettled());
    }

    fn row(transport: Transport, workload: Workload, p50s: &[(usize, f64)]) -> Row {
        let per_run: Vec<(usize, Run)> =
            p50s.iter().map(|&(k, p50_us)| (k, Run { p50_us, ..Run::default() })).collect();
        let runs: Vec<Run> = per_run.iter().map(|(_, r)| *r).collect();
        Row {
            transport,
            workload,
            figures: (!runs.is_empty()).then(|| Run::median(&runs)),
            failure: None,
            runs: runs.len(),
            per_run,
            cdf: Vec::new(),
        }
    }

    #[test]
    fn ratios_pair_figures_of_the_same_repetition() {
        let w = Workload::Rr { size: 64, conns: 1 };
        // The machine slows down 3x in repetition 1: both rows alike.
        let base = row(Transport::KernelBusy, w, &[(0, 20.0), (1, 60.0), (2, 20.0)]);
        // Row 2d missed repetition 0.
        let defaults = row(Transport::KernelDefaults, w, &[(1, 30.0), (2, 10.0)]);
        let ours = row(Transport::StackXdp, w, &[(0, 10.0), (1, 30.0), (2, 10.0)]);
        let rows = [base, defaults, ours];
        let [vs_2, vs_2d] = ratios(&rows, &rows[2]);
        let vs_2 = vs_2.unwrap();
        assert_eq!((vs_2.median, vs_2.min, vs_2.max), (0.5, 0.5, 0.5), "the slow phase cancels out");
        assert_eq!(vs_2.cell(), "0.50x (0.50-0.50)");
        // The ratio of medians would be 10/20; per repetition it is 30/30 and 10/10.
        let vs_2d = vs_2d.unwrap();
        assert_eq!(vs_2d.per_run, vec![1.0, 1.0]);
        // results.json keeps the median under the old key and every repetition beside it.
        let c = Conditions::default();
        let json = json(&rows, &c);
        let line = json.lines().find(|l| l.contains("\"transport\": \"stack-afxdp\"")).unwrap();
        assert!(line.contains("\"vs_row_2\": 0.5, \"vs_row_2d\": 1, \"vs_row_2_spread\": {\"median\": 0.5"), "{line}");
        assert!(line.contains("\"repetitions\": [{\"repetition\": 1, \"p50_us\": 10.0000"), "{line}");
        assert_eq!(line.matches("\"repetition\": ").count(), 3, "{line}");
        // The median comes first in the line, where readers look for a key.
        assert!(line.find("\"p50_us\": ").unwrap() < line.find("\"repetitions\"").unwrap());
    }

    fn bulk_row(transport: Transport, workload: Workload, rates: &[(usize, f64)]) -> Row {
        let per_run: Vec<(usize, Run)> = rates.iter().map(|&(k, rate)| (k, Run { rate, ..Run::default() })).collect();
        let runs: Vec<Run> = per_run.iter().map(|(_, r)| *r).collect();
        Row {
            transport,
            workload,
            figures: Some(Run::median(&runs)),
            failure: None,
            runs: runs.len(),
            per_run,
            cdf: Vec::new(),
        }
    }

    fn floor(rep: usize, workload: Workload, jumbo: bool, gbit: f64) -> BulkFloor {
        BulkFloor { rep, workload, jumbo, gbit, sent: 100, lost: 3, mode: "AF_XDP, copy mode".into() }
    }

    #[test]
    fn the_bulk_floor_ratio_pairs_direction_mtu_and_repetition() {
        let c = Conditions {
            bulk_floors: vec![
                floor(0, Workload::BulkUp, false, 4.0),
                floor(0, Workload::BulkDown, false, 8.0),
                floor(0, Workload::BulkUp, true, 20.0),
                // The machine is twice as fast in repetition 1.
                floor(1, Workload::BulkUp, false, 8.0),
                floor(1, Workload::BulkUp, true, 40.0),
            ],
            ..Conditions::default()
        };
        let ours = bulk_row(Transport::StackXdp, Workload::BulkUp, &[(0, 2.0), (1, 4.0), (2, 9.0)]);
        let s = vs_floor(&c, &ours).unwrap();
        // Repetition 2 has no floor: left out; 2/4 and 4/8.
        assert_eq!(s.per_run, vec![0.5, 0.5]);
        let jumbo = bulk_row(Transport::StackXdpJumbo, Workload::BulkUp, &[(0, 10.0), (1, 30.0)]);
        assert_eq!(vs_floor(&c, &jumbo).unwrap().per_run, vec![0.5, 0.75], "the jumbo floor");
        let down = bulk_row(Transport::StackXdp, Workload::BulkDown, &[(0, 2.0), (1, 2.0)]);
        assert_eq!(vs_floor(&c, &down).unwrap().per_run, vec![0.25], "the other direction's floor");
        // No veth, no floor.
        let memory = bulk_row(Transport::StackMemory, Workload::BulkUp, &[(0, 2.0)]);
        assert_eq!(vs_floor(&c, &memory), None);

        // The column, the floor's line and the JSON keys.
        let rows = [ours, jumbo, down];
        let md = markdown(&rows, &c, "");
        assert!(md.contains("| vs 2 | vs 2d | vs best kernel | vs floor | CPU s/GiB |"), "{md}");
        assert!(md.contains("| 5 ours/AF_XDP <- kernel | 4.00 | - | - | - | 0.50x (0.50-0.50) |"), "{md}");
        assert!(md.contains("streamed px0 -> bx0, MTU 1500, no TCP"), "{md}");
        assert!(md.contains("streamed bx0 -> px0, MTU 1500"), "{md}");
        assert!(md.contains("MTU 65000") && md.contains("6 of 200 frames sent were lost"), "{md}");
        let json = json(&rows, &c);
        let line = json.lines().find(|l| l.contains("\"transport\": \"stack-afxdp-jumbo\"")).unwrap();
        assert!(line.contains("\"vs_floor\": 0.625, \"vs_floor_spread\": {\"median\": 0.625"), "{line}");
        assert!(line.contains("\"vs_row_2d\": null"), "the old keys stay: {line}");
        assert!(json.contains("\"bulk_floor\": [{\"repetition\": 1, \"workload\": \"bulk-up\", \"path\": \"px0 -> bx0\", \"mtu\": 1500, \"gbit_s\": 4.0000"), "{json}");
    }

    #[test]
    fn the_round_trip_is_read_against_the_floor_around_it() {
        let w = Workload::Rr { size: 64, conns: 1 };
        // (repetition, p50, the floor's p50 before and after the row)
        type Measured = (usize, f64, Option<(f64, f64)>);
        let bracketed = |p50s: &[Measured]| {
            let mut r = row(Transport::StackXdpBoth, w, &[]);
            r.per_run = p50s
                .iter()
                .map(|&(k, p50_us, floor_bracket_us)| (k, Run { p50_us, floor_bracket_us, ..Run::default() }))
                .collect();
            r.runs = r.per_run.len();
            r.figures = Some(Run::median(&r.per_run.iter().map(|(_, r)| *r).collect::<Vec<_>>()));
            r
        };
        // The machine slows down 2x in repetition 1, floor and row alike; the floor moved
        // from 4 to 6 µs during repetition 2's row (the mean of the two, 5, is its floor);
        // repetition 3 lost its floor after the row.
        let ours = bracketed(&[
            (0, 6.0, Some((5.0, 5.0))),
            (1, 12.0, Some((10.0, 10.0))),
            (2, 6.0, Some((4.0, 6.0))),
            (3, 9.0, None),
        ]);
        let s = p50_vs_floor(&ours).unwrap();
        assert_eq!(s.per_run, vec![1.2, 1.2, 1.2], "per repetition, against its own bracket");
        assert_eq!(s.cell(), "1.20x (1.20-1.20)");
        // A row never bracketed has no ratio.
        assert_eq!(p50_vs_floor(&row(Transport::KernelBusy, w, &[(0, 10.0)])), None);

        // The column on this workload's table only, and the JSON keys.
        let kernel = bracketed(&[(0, 10.0, Some((5.0, 5.0))), (1, 20.0, Some((10.0, 10.0)))]);
        let kernel = Row { transport: Transport::KernelBusy, ..kernel };
        let many = row(Transport::StackXdpBoth, Workload::Rr { size: 64, conns: 100 }, &[(0, 100.0)]);
        let rows = [kernel, ours, many];
        let c = Conditions::default();
        let md = markdown(&rows, &c, "");
        assert!(md.contains("| p50 vs best kernel | p50 vs floor | CPU µs/req |"), "{md}");
        assert!(md.contains("| 0.60x (0.60-0.60) | 1.20x (1.20-1.20) |"), "{md}");
        assert!(md.contains("| 2 kernel TCP, busy-poll |") && md.contains("| 2.00x (2.00-2.00) |"), "{md}");
        assert_eq!(md.matches("| p50 vs floor |").count(), 1, "not on the 100-connection table: {md}");
        let json = json(&rows, &c);
        let line = json
            .lines()
            .find(|l| l.contains("\"transport\": \"stack-afxdp-both\", ") && l.contains("\"connections\": 1,"))
            .unwrap();
        assert!(line.contains("\"vs_floor\": 1.2, \"vs_floor_spread\": {\"median\": 1.2"), "{line}");
        assert!(line.contains("\"floor_p50_before_us\": 4.0000, \"floor_p50_after_us\": 6.0000}"), "{line}");
        let line = json.lines().find(|l| l.contains("\"connections\": 100,")).unwrap();
        assert!(!line.contains("vs_floor"), "{line}");
    }

    #[test]
    fn the_copies_cell_says_whose_copies_it_counts() {
        assert_eq!(copies_cell(Some(1.0249), 2), "1.02 ours + 2 kernel");
        assert_eq!(copies_cell(None, 2), "2 kernel");
        assert_eq!(copies_cell(Some(4.0), 0), "4.00 ours + 0 kernel");
    }

    #[test]
    fn a_file_row_shows_each_copy_where_it_happens() {
        use super::super::file::{Counts, PerByte};
        let mib = 1u64 << 20;
        // read + write over 100 MiB delivered: 100 MiB pread, 101 MiB written (1 MiB still
        // unread at the client as the window ends).
        let counts = Counts { cache_to_user: 100 * mib, user_to_socket: 101 * mib, resident: 1.0, ..Counts::default() };
        let file = PerByte::new(&counts, 100 * mib, 100 * mib);
        assert_eq!((file.cache_to_user, file.user_to_socket, file.client_to_user), (1.0, 1.01, 1.0));
        assert_eq!(file.zerocopy_copied, None, "no MSG_ZEROCOPY on this path");
        assert!((file.total() - 3.01).abs() < 1e-9);
        let run = Run { rate: 10.0, cpu_per_unit: 1.5, units: 100.0, file: Some(file), ..Run::default() };
        let row = Row {
            transport: Transport::FileReadWrite,
            workload: Workload::File,
            figures: Some(run),
            failure: None,
            runs: 1,
            per_run: vec![(0, run)],
            cdf: Vec::new(),
        };
        let c = Conditions { file: Some("32 MiB, 100.0% resident".into()), ..Conditions::default() };
        let md = markdown(std::slice::from_ref(&row), &c, "");
        assert!(md.contains("| page cache -> user | user -> socket buffer | page cache -> socket buffer |"), "{md}");
        assert!(
            md.contains("| f1 kernel, read + write | 10.00 | 1.50 | 0.0 | 0.000 | 0.0 | 1.00 | 1.01 | 0.00 | - | - | none expected (veth hands the skb on) | 1.00 | 3.01 (2.01 sending + 1.00 client) |"),
            "{md}"
        );
        assert!(md.contains("File: 32 MiB, 100.0% resident.") && md.contains("](file-copies.svg)"), "{md}");
        let json = json(&[row], &c);
        assert!(json.contains("\"kernel_copies_per_byte\": null"), "{json}");
        assert!(
            json.contains("\"file_copies_per_byte\": {\"page_cache_to_user\": 1.0000, \"user_to_socket\": 1.0100"),
            "{json}"
        );
        // MSG_ZEROCOPY: the copied fraction is of the bytes completed.
        let zc = Counts { zerocopy_completed: 200 * mib, zerocopy_copied: 150 * mib, ..Counts::default() };
        assert_eq!(PerByte::new(&zc, 100 * mib, 100 * mib).zerocopy_copied, Some(0.75));
    }

    /// The best kernel row is chosen per repetition among 2, 2d, 2u and 2ud: the lowest p50,
    /// the highest Gbit/s; other rows (here row 3) never count as a kernel baseline.
    #[test]
    fn vs_best_kernel_takes_the_best_kernel_row_of_each_repetition() {
        let w = Workload::Rr { size: 64, conns: 1 };
        let rows = [
            row(Transport::KernelBusy, w, &[(0, 20.0), (1, 40.0)]),
            row(Transport::KernelUring, w, &[(0, 10.0), (1, 80.0)]),
            row(Transport::KernelZerocopy, w, &[(0, 1.0), (1, 1.0)]),
            row(Transport::StackXdp, w, &[(0, 5.0), (1, 20.0), (2, 7.0)]),
        ];
        let s = vs_best_kernel(&rows, &rows[3]).unwrap();
        assert_eq!(s.per_run, vec![0.5, 0.5], "5/10 (2u best), 20/40 (2 best); repetition 2 has no kernel row");
        let bulk = [
            bulk_row(Transport::KernelDefaults, Workload::BulkUp, &[(0, 10.0), (1, 4.0)]),
            bulk_row(Transport::KernelUringDefaults, Workload::BulkUp, &[(0, 8.0), (1, 8.0)]),
            bulk_row(Transport::StackXdp, Workload::BulkUp, &[(0, 2.0), (1, 2.0)]),
        ];
        let s = vs_best_kernel(&bulk, &bulk[2]).unwrap();
        assert_eq!(s.per_run, vec![0.2, 0.25], "2/10 (2d best), 2/8 (2ud best)");
        let md = markdown(&bulk, &Conditions::default(), "");
        assert!(
            md.contains("| 5 ours/AF_XDP <- kernel | 2.00 | - | 0.35x (0.20-0.50)~ | 0.23x (0.20-0.25)~ |"),
            "{md}"
        );
        let json = json(&bulk, &Conditions::default());
        let line = json.lines().find(|l| l.contains("\"transport\": \"stack-afxdp\"")).unwrap();
        assert!(line.contains("\"vs_best_kernel\": 0.225, \"vs_best_kernel_spread\": {\"median\": 0.225"), "{line}");
    }
}
