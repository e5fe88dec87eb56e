//! Draw the results as SVG pictures: the latency CDF of each transport for
//! 64 B request/response over one connection, bulk throughput in both directions, and CPU
//! per request with the request rate; and, with the file rows, where each copy happens on
//! each path of serving a file.
//!
//! Drawn with the SVG primitives of [`crate::svg`], as `inspect`'s ladder picture is: every
//! text is escaped, so any label makes well-formed XML.

use super::report::{Row, conditions_line};
use super::svg::{dashed_line, document, line, polygon, polyline, rect, text};
use super::{Conditions, Transport, Workload};

/// The workload of the latency CDF and the CPU chart.
const RR: Workload = Workload::Rr { size: 64, conns: 1 };

/// Image links to the three charts, for `results.md`.
pub const MARKDOWN_LINKS: &str =
    "![latency CDF](latency-cdf.svg) ![bulk throughput](throughput.svg) ![CPU per request](cpu.svg)";

const WIDTH: f64 = 1000.0;
const MARGIN: f64 = 16.0;
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const MUTED: &str = "#707070";
const GRID: &str = "#e4e4e4";
const AXIS: &str = "#404040";
const FLOOR_COLOUR: &str = "#d01010";
/// Two shades per transport: client (or client -> server) and server (or server -> client).
const UP: &str = "#1f5fbf";
const DOWN: &str = "#e08a1e";
/// The request-rate bars.
const RATE: &str = "#5f7f99";

/// Return the colour of `transport`'s line.
fn colour(transport: Transport) -> &'static str {
    match transport {
        Transport::KernelBlocking => "#7a7a7a",
        Transport::KernelBusy => "#1f5fbf",
        Transport::KernelDefaults => "#0d2f66",
        Transport::KernelUring => "#6a3d9a",
        Transport::KernelUringDefaults => "#3b1f5c",
        Transport::KernelZerocopy => "#17a2b8",
        Transport::KernelSplice => "#b8860b",
        Transport::KernelMsgZerocopy => "#6c757d",
        Transport::StackPacket => "#e08a1e",
        Transport::StackPacketBoth => "#a85d00",
        Transport::StackXdp => "#2a9d4b",
        Transport::StackXdpUring => "#1b6e33",
        Transport::StackXdpV6 => "#5cc27a",
        Transport::StackXdpInPlace => "#8fd19e",
        Transport::StackXdpBoth => "#0b6b2a",
        Transport::SmoltcpXdp => "#c0392b",
        Transport::SmoltcpXdpBoth => "#7b1e12",
        Transport::KernelBusyJumbo => "#4f8fef",
        Transport::StackXdpJumbo => "#145a2e",
        Transport::SmoltcpXdpJumbo => "#e06050",
        Transport::StackMemory => "#8e44ad",
        Transport::FileReadWrite => "#7a7a7a",
        Transport::FileMmapWrite => "#1f5fbf",
        Transport::FileSendfile => "#17a2b8",
        Transport::FileSplice => "#b8860b",
        Transport::FileMsgZerocopy => "#c0392b",
        Transport::FileStackSendWith => "#1e8449",
        Transport::FileStackWrite => "#58d68d",
        Transport::FileStackSendWithMmap => "#117a65",
    }
}

/// Return the three charts as (file name, SVG text).
pub fn render(rows: &[Row], c: &Conditions) -> Vec<(&'static str, String)> {
    let mut charts = vec![
        ("latency-cdf.svg", latency_cdf(rows, c)),
        ("throughput.svg", throughput(rows, c)),
        ("cpu.svg", cpu(rows, c)),
    ];
    if rows.iter().any(|r| r.workload == Workload::File) {
        charts.push(("file-copies.svg", file_copies(rows, c)));
    }
    charts
}

/// Split `text` into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// Write the title and subtitle; return the `y` below them.
fn heading(svg: &mut String, title: &str, subtitle: &str) -> f64 {
    text(MARGIN, MARGIN + 16.0, "start").bold().size(17.0).write(svg, title);
    text(MARGIN, MARGIN + 36.0, "start").fill(MUTED).write(svg, subtitle);
    MARGIN + 56.0
}

/// Write the run's date and conditions in small text from `y` down; return the `y` below.
fn footer(svg: &mut String, mut y: f64, c: &Conditions) -> f64 {
    for l in wrap(&format!("conditions: {}", conditions_line(c)), 170) {
        text(MARGIN, y + 10.0, "start").size(10.0).fill(MUTED).write(svg, &l);
        y += 13.0;
    }
    y
}

/// Return a tick step of 1, 2 or 5 times a power of ten that cuts `max` into about `n` parts.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    power
        * if m <= 1.0 {
            1.0
        } else if m <= 2.0 {
            2.0
        } else if m <= 5.0 {
            5.0
        } else {
            10.0
        }
}

/// Return `x` with about three significant digits.
fn short(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Return `x` as a tick label.
fn tick_label(x: f64) -> String {
    if x >= 1e6 {
        format!("{}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{}k", x / 1e3)
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The latency CDF, log-scale x.
fn latency_cdf(rows: &[Row], c: &Conditions) -> String {
    let lines: Vec<&Row> = rows.iter().filter(|r| r.workload == RR && !r.cdf.is_empty()).collect();
    let title = "Latency CDF: 64 B request/response, 1 connection";
    let mut svg = String::new();
    let top = heading(
        &mut svg,
        title,
        "round trips measured by the kernel client; one line per transport (the repetition with the median p50)",
    );
    let (left, right) = (90.0, WIDTH - 30.0);
    let (plot_top, plot_bottom) = (top + 16.0, top + 426.0);
    let floor = c.floor.as_ref().map(|f| f.p50_us).filter(|x| *x > 0.0);
    let values = lines.iter().flat_map(|r| r.cdf.iter().map(|(v, _)| *v)).chain(floor).filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (1.0, 100.0) };
    let (d0, d1) = (lo.log10().floor(), hi.log10().ceil().max(lo.log10().floor() + 1.0));
    let x_of = |v: f64| left + (v.max(10f64.powf(d0)).log10() - d0) / (d1 - d0) * (right - left);
    let y_of = |q: f64| plot_bottom - q * (plot_bottom - plot_top);

    // Grid and axes.
    for i in 0..=10 {
        let q = i as f64 / 10.0;
        line(&mut svg, (left, y_of(q)), (right, y_of(q)), GRID, 1.0);
        text(left - 6.0, y_of(q) + 4.0, "end").size(11.0).write(&mut svg, &format!("{q:.1}"));
    }
    let mut decade = d0;
    while decade <= d1 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powf(decade);
            if decade + m.log10() > d1 + 1e-9 {
                break;
            }
            let x = x_of(v);
            line(&mut svg, (x, plot_top), (x, plot_bottom), GRID, if m == 1.0 { 1.2 } else { 0.6 });
            text(x, plot_bottom + 16.0, "middle").size(11.0).write(&mut svg, &tick_label(v));
        }
        decade += 1.0;
    }
    line(&mut svg, (left, plot_bottom), (right, plot_bottom), AXIS, 1.2);
    line(&mut svg, (left, plot_top), (left, plot_bottom), AXIS, 1.2);
    text((left + right) / 2.0, plot_bottom + 36.0, "middle")
        .size(13.0)
        .write(&mut svg, "round-trip latency (µs, log scale)");
    text(28.0, (plot_top + plot_bottom) / 2.0, "middle")
        .size(13.0)
        .rotated()
        .write(&mut svg, "fraction of round trips ≤ latency");

    if let Some(f) = floor {
        let x = x_of(f);
        dashed_line(&mut svg, (x, plot_top), (x, plot_bottom), FLOOR_COLOUR, 1.5, "6 4");
        text(x, plot_top - 4.0, "middle").size(11.0).fill(FLOOR_COLOUR).write(&mut svg, "floor");
    }
    for r in &lines {
        polyline(&mut svg, r.cdf.iter().map(|(v, q)| (x_of(*v), y_of(*q))), colour(r.transport), 2.2);
    }
    if lines.is_empty() {
        text((left + right) / 2.0, (plot_top + plot_bottom) / 2.0, "middle")
            .fill(MUTED)
            .write(&mut svg, "no 64 B request/response latencies were measured");
    }

    // Legend, bottom right, where a CDF has no lines.
    let mut entries: Vec<(String, &str)> = lines
        .iter()
        .map(|r| {
            let p = |q: f64| r.figures.map_or(String::new(), |f| short(if q == 0.5 { f.p50_us } else { f.p99_us }));
            (format!("{}  (p50 {} µs, p99 {} µs)", r.transport.label(), p(0.5), p(0.99)), colour(r.transport))
        })
        .collect();
    if let Some(f) = floor {
        entries.push((format!("floor: raw AF_XDP frames, no TCP (p50 {} µs)", short(f)), FLOOR_COLOUR));
    }
    let (lw, lh) = (420.0, 12.0 + 18.0 * entries.len() as f64);
    let (lx, ly) = (right - lw - 10.0, plot_bottom - lh - 10.0);
    if !entries.is_empty() {
        rect(lx, ly, lw, lh, "#ffffff").opacity(0.9).stroke("#b0b0b0").write(&mut svg);
    }
    for (i, (label, col)) in entries.iter().enumerate() {
        let y = ly + 16.0 + 18.0 * i as f64;
        if *col == FLOOR_COLOUR {
            dashed_line(&mut svg, (lx + 10.0, y - 4.0), (lx + 36.0, y - 4.0), col, 1.5, "6 4");
        } else {
            line(&mut svg, (lx + 10.0, y - 4.0), (lx + 36.0, y - 4.0), col, 3.0);
        }
        text(lx + 44.0, y, "start").size(12.0).write(&mut svg, label);
    }

    let height = footer(&mut svg, plot_bottom + 52.0, c) + MARGIN;
    document(WIDTH, height, FONT, title, &svg)
}

/// One bar of a horizontal bar chart: segments laid end to end, and the text after it.
struct Bar {
    segments: Vec<(f64, &'static str)>,
    text: String,
}

/// Bars under one label (a transport); no bars: the row was not measured.
struct Group {
    label: String,
    bars: Vec<Bar>,
    missing: Option<String>,
}

const BAR: f64 = 18.0;
const BAR_GAP: f64 = 3.0;
const GROUP_GAP: f64 = 16.0;

/// Return the height of `group` in a panel with `bars_per_group` bars.
fn group_height(bars_per_group: usize) -> f64 {
    bars_per_group as f64 * (BAR + BAR_GAP) - BAR_GAP
}

/// Draw horizontal bars from `(x, y)`, `w` wide; labels (if `labels`) left of `x`.
/// Return the `y` below the axis labels.
#[allow(clippy::too_many_arguments)]
fn bar_panel(
    svg: &mut String,
    x: f64,
    y: f64,
    w: f64,
    groups: &[Group],
    bars_per_group: usize,
    labels: bool,
    axis: &str,
) -> f64 {
    let max =
        groups.iter().flat_map(|g| &g.bars).map(|b| b.segments.iter().map(|s| s.0).sum::<f64>()).fold(0.0, f64::max);
    // Room for the value after the longest bar.
    let step = nice_step(max, (w / 80.0).clamp(3.0, 8.0));
    let top = (max * 1.2 / step).ceil().max(1.0) * step;
    let scale = |v: f64| v / top * w;
    let gh = group_height(bars_per_group);
    let bottom = y + groups.len() as f64 * (gh + GROUP_GAP);
    let mut t = 0.0;
    while t <= top + step * 1e-6 {
        line(svg, (x + scale(t), y - 4.0), (x + scale(t), bottom), GRID, 1.0);
        text(x + scale(t), bottom + 15.0, "middle").size(11.0).write(svg, &tick_label((t / step).round() * step));
        t += step;
    }
    for (i, g) in groups.iter().enumerate() {
        let gy = y + GROUP_GAP / 2.0 + i as f64 * (gh + GROUP_GAP);
        if labels {
            text(x - 8.0, gy + gh / 2.0 + 4.0, "end").size(12.0).write(svg, &g.label);
        }
        if let Some(why) = &g.missing {
            text(x + 6.0, gy + gh / 2.0 + 4.0, "start").size(11.0).fill(MUTED).write(svg, why);
        }
        for (j, b) in g.bars.iter().enumerate() {
            let by = gy + j as f64 * (BAR + BAR_GAP);
            let mut bx = x;
            for (v, col) in &b.segments {
                rect(bx, by, scale(*v), BAR, col).write(svg);
                bx += scale(*v);
            }
            text(bx + 5.0, by + BAR - 5.0, "start").size(11.0).write(svg, &b.text);
        }
    }
    line(svg, (x, y - 4.0), (x, bottom), AXIS, 1.2);
    line(svg, (x, bottom), (x + w, bottom), AXIS, 1.2);
    text(x + w / 2.0, bottom + 34.0, "middle").size(13.0).write(svg, axis);
    bottom + 40.0
}

/// Draw a legend of coloured squares in one line from `(x, y)`.
fn legend(svg: &mut String, mut x: f64, y: f64, entries: &[(&str, &str)]) {
    for (label, col) in entries {
        rect(x, y - 10.0, 12.0, 12.0, col).write(svg);
        text(x + 18.0, y, "start").size(12.0).write(svg, label);
        x += 30.0 + 7.0 * label.chars().count() as f64;
    }
}

/// Return the transports of `rows`, in table order.
fn transports(rows: &[Row]) -> Vec<Transport> {
    let mut seen = Vec::new();
    // The file rows have a picture of their own.
    for r in rows.iter().filter(|r| r.workload != Workload::File) {
        if !seen.contains(&r.transport) {
            seen.push(r.transport);
        }
    }
    seen
}

fn find(rows: &[Row], t: Transport, w: Workload) -> Option<&Row> {
    rows.iter().find(|r| r.transport == t && r.workload == w)
}

/// Return why `row` has no figures, short.
fn missing(row: Option<&Row>) -> String {
    match row.and_then(|r| r.failure.as_deref()) {
        Some(why) => {
            let why: String = why.chars().take(70).collect();
            format!("not measured: {why}")
        }
        None => "not measured".into(),
    }
}

/// Grouped bars: Gbit/s per transport, both directions.
fn throughput(rows: &[Row], c: &Conditions) -> String {
    let title = "Bulk throughput: one TCP stream";
    let mut svg = String::new();
    let top = heading(
        &mut svg,
        title,
        "payload Gbit/s as the kernel client counts it over the measurement window; higher is better",
    );
    legend(&mut svg, 260.0, top + 4.0, &[("client -> server", UP), ("server -> client", DOWN)]);
    let groups: Vec<Group> = transports(rows)
        .into_iter()
        .map(|t| {
            let up = find(rows, t, Workload::BulkUp).filter(|r| r.figures.is_some());
            let down = find(rows, t, Workload::BulkDown).filter(|r| r.figures.is_some());
            let bar = |r: Option<&Row>, col: &'static str| {
                r.and_then(|r| r.figures)
                    .map(|f| Bar { segments: vec![(f.rate, col)], text: format!("{:.2} Gbit/s", f.rate) })
            };
            let bars: Vec<Bar> = [bar(up, UP), bar(down, DOWN)].into_iter().flatten().collect();
            let missing =
                if up.is_none() && down.is_none() { Some(missing(find(rows, t, Workload::BulkUp))) } else { None };
            Group { label: t.label().to_string(), bars, missing }
        })
        .collect();
    let bottom = bar_panel(&mut svg, 240.0, top + 24.0, WIDTH - 240.0 - 110.0, &groups, 2, true, "throughput (Gbit/s)");
    let height = footer(&mut svg, bottom + 8.0, c) + MARGIN;
    document(WIDTH, height, FONT, title, &svg)
}

/// CPU µs per request (client + server, stacked) and requests/s, 64 B request/response.
fn cpu(rows: &[Row], c: &Conditions) -> String {
    let title = "CPU per request: 64 B request/response, 1 connection";
    let mut svg = String::new();
    let top = heading(
        &mut svg,
        title,
        "CPU time of the client and server threads per request (lower is better), and the request rate (higher is better)",
    );
    let ts: Vec<(Transport, Option<&Row>)> =
        transports(rows).into_iter().map(|t| (t, find(rows, t, RR).filter(|r| r.figures.is_some()))).collect();
    let cpu_groups: Vec<Group> = ts
        .iter()
        .map(|(t, r)| Group {
            label: t.label().to_string(),
            bars: r
                .and_then(|r| r.figures)
                .map(|f| Bar {
                    segments: vec![(f.client_cpu_per_unit, UP), (f.server_cpu_per_unit, DOWN)],
                    text: format!("{} µs", short(f.cpu_per_unit)),
                })
                .into_iter()
                .collect(),
            missing: r.is_none().then(|| missing(find(rows, *t, RR))),
        })
        .collect();
    let rate_groups: Vec<Group> = ts
        .iter()
        .map(|(t, r)| Group {
            label: t.label().to_string(),
            bars: r
                .and_then(|r| r.figures)
                .map(|f| Bar { segments: vec![(f.rate, RATE)], text: format!("{:.0}", f.rate) })
                .into_iter()
                .collect(),
            missing: None,
        })
        .collect();
    text(240.0, top + 4.0, "start").bold().size(13.0).write(&mut svg, "CPU µs per request");
    legend(&mut svg, 420.0, top + 4.0, &[("client", UP), ("server", DOWN)]);
    text(730.0, top + 4.0, "start").bold().size(13.0).write(&mut svg, "requests/s");
    let y = top + 24.0;
    let a = bar_panel(&mut svg, 240.0, y, 400.0, &cpu_groups, 1, true, "CPU time per request (µs)");
    let b = bar_panel(&mut svg, 730.0, y, 190.0, &rate_groups, 1, false, "requests per second");
    let height = footer(&mut svg, a.max(b) + 8.0, c) + MARGIN;
    document(WIDTH, height, FONT, title, &svg)
}

/// The buffers of the file picture, left to right: the server's, the wire, the client's.
const BUFFERS: [&str; 7] =
    ["page cache", "user buffer", "socket buffer", "UMEM frame", "wire (veth)", "socket buffer", "user buffer"];

/// How bytes cross from one buffer to the next in the file picture.
enum Hop {
    /// A CPU copy, counted: bytes copied per byte delivered.
    Cpu(f64, &'static str),
    /// No CPU copy: page references, pinned pages, the skb passed on (a NIC would DMA here).
    HandOff(String),
    /// A copy the kernel makes that user space cannot count.
    Hidden(&'static str),
}

/// Return the buffers a file row's bytes pass through (indices into [`BUFFERS`]) and the hop
/// into each after the first.
fn file_hops(t: Transport, p: &super::file::PerByte) -> (Vec<usize>, Vec<Hop>) {
    let wire_to_client = |copied: Option<f64>| match copied {
        Some(x) => Hop::Cpu(x, "copied at delivery"),
        None => Hop::HandOff("skb passed on".into()),
    };
    let client = Hop::Cpu(p.client_to_user, "read(2)");
    match t {
        Transport::FileReadWrite => (
            vec![0, 1, 2, 4, 5, 6],
            vec![
                Hop::Cpu(p.cache_to_user, "pread(2)"),
                Hop::Cpu(p.user_to_socket, "write(2)"),
                Hop::HandOff("skb passed on".into()),
                wire_to_client(None),
                client,
            ],
        ),
        Transport::FileMmapWrite => (
            vec![0, 1, 2, 4, 5, 6],
            vec![
                Hop::HandOff(format!("mapped: {:.1} faults/MiB", p.faults_per_mib)),
                Hop::Cpu(p.user_to_socket, "write(2)"),
                Hop::HandOff("skb passed on".into()),
                wire_to_client(None),
                client,
            ],
        ),
        Transport::FileSendfile | Transport::FileSplice => (
            vec![0, 2, 4, 5, 6],
            vec![
                Hop::HandOff(if t == Transport::FileSplice { "page refs, via a pipe" } else { "page refs" }.into()),
                Hop::HandOff("skb passed on".into()),
                wire_to_client(None),
                client,
            ],
        ),
        Transport::FileMsgZerocopy => (
            vec![0, 1, 2, 4, 5, 6],
            vec![
                Hop::HandOff("mapped once".into()),
                Hop::HandOff("pages pinned".into()),
                Hop::HandOff("skb passed on".into()),
                wire_to_client(Some(p.zerocopy_copied.unwrap_or(0.0))),
                client,
            ],
        ),
        Transport::FileStackSendWith | Transport::FileStackSendWithMmap => (
            vec![0, 2, 3, 4, 5, 6],
            vec![
                Hop::Cpu(
                    p.cache_to_socket,
                    if t == Transport::FileStackSendWith { "pread into send_with" } else { "mmap copy into send_with" },
                ),
                Hop::Cpu(p.socket_to_frame, "our stack"),
                Hop::Hidden("AF_XDP copy mode"),
                wire_to_client(None),
                client,
            ],
        ),
        _ => (
            vec![0, 1, 2, 3, 4, 5, 6],
            vec![
                Hop::Cpu(p.cache_to_user, "pread(2)"),
                Hop::Cpu(p.user_to_socket, "Stack::write"),
                Hop::Cpu(p.socket_to_frame, "our stack"),
                Hop::Hidden("AF_XDP copy mode"),
                wire_to_client(None),
                client,
            ],
        ),
    }
}

/// The file rows as a ladder: a row per path, a box per buffer its bytes pass through, an
/// arrow per hop (solid red: a CPU copy with its counted bytes per byte; dashed grey: a
/// hand-off without a CPU copy; dotted orange: a copy the kernel makes out of our sight).
fn file_copies(rows: &[Row], c: &Conditions) -> String {
    const CPU: &str = "#c0392b";
    const HAND: &str = "#8a8a8a";
    const HIDDEN: &str = "#e08a1e";
    let width = 1290.0;
    let title = "Serving a file: where each byte is copied";
    let mut svg = String::new();
    let top = heading(
        &mut svg,
        title,
        "a row per path, a box per buffer the bytes pass through, an arrow per hop labelled with CPU copies per byte delivered, counted by the mechanism",
    );
    legend(
        &mut svg,
        MARGIN,
        top + 4.0,
        &[("CPU copy (counted)", CPU), ("hand-off, no CPU copy", HAND), ("kernel copy, not observable here", HIDDEN)],
    );
    let (label_w, col_w, box_w, box_h, row_h) = (250.0, 126.0, 80.0, 30.0, 62.0);
    let x0 = MARGIN + label_w;
    let centre = |i: usize| x0 + col_w * i as f64 + col_w / 2.0;
    // Column heads: the server's side, the wire, the client's side.
    let mut y = top + 40.0;
    for (i, name) in BUFFERS.iter().enumerate() {
        text(centre(i), y, "middle").bold().size(11.0).write(&mut svg, name);
    }
    text(centre(1), y - 16.0, "middle").fill(MUTED).size(11.0).write(&mut svg, "server");
    text(centre(5) + col_w / 2.0, y - 16.0, "middle").fill(MUTED).size(11.0).write(&mut svg, "client");
    text(x0 + col_w * 7.0 + 8.0, y, "start").bold().size(11.0).write(&mut svg, "CPU copies/byte");
    y += 14.0;
    for r in rows.iter().filter(|r| r.workload == Workload::File) {
        let mid = y + row_h / 2.0;
        text(MARGIN, mid + 4.0, "start").size(12.0).write(&mut svg, r.transport.label());
        let Some(f) = r.figures else {
            let why = r.failure.as_deref().unwrap_or("no measurement");
            text(x0, mid + 4.0, "start").fill(MUTED).size(11.0).write(&mut svg, &format!("not measured: {why}"));
            y += row_h;
            continue;
        };
        let p = f.file.unwrap_or_default();
        let (boxes, hops) = file_hops(r.transport, &p);
        for &b in &boxes {
            rect(centre(b) - box_w / 2.0, mid - box_h / 2.0, box_w, box_h, "#f4f6f8")
                .rounded(4.0)
                .stroke(AXIS)
                .write(&mut svg);
            text(centre(b), mid + 4.0, "middle").size(10.0).write(&mut svg, BUFFERS[b]);
        }
        for (k, hop) in hops.iter().enumerate() {
            let (from, to) = (centre(boxes[k]) + box_w / 2.0, centre(boxes[k + 1]) - box_w / 2.0);
            let (stroke, label, note) = match hop {
                Hop::Cpu(x, how) => (CPU, format!("{x:.2}"), *how),
                Hop::HandOff(how) => (HAND, "0".to_string(), how.as_str()),
                Hop::Hidden(how) => (HIDDEN, "n/o".to_string(), *how),
            };
            let tip = to - 1.0;
            match hop {
                Hop::Cpu(..) => line(&mut svg, (from + 2.0, mid), (tip - 6.0, mid), stroke, 2.5),
                Hop::HandOff(_) => dashed_line(&mut svg, (from + 2.0, mid), (tip - 6.0, mid), stroke, 1.5, "5 3"),
                Hop::Hidden(_) => dashed_line(&mut svg, (from + 2.0, mid), (tip - 6.0, mid), stroke, 2.5, "2 3"),
            }
            polygon(&mut svg, [(tip, mid), (tip - 8.0, mid - 4.5), (tip - 8.0, mid + 4.5)], stroke);
            let cx = (from + to) / 2.0;
            text(cx, mid - 7.0, "middle").bold().size(11.0).fill(stroke).write(&mut svg, &label);
            text(cx, mid + box_h / 2.0 + 10.0, "middle").size(9.0).fill(MUTED).write(&mut svg, note);
        }
        let hidden = if boxes.contains(&3) { " + n/o" } else { "" };
        text(x0 + col_w * 7.0 + 8.0, mid + 4.0, "start").bold().write(&mut svg, &format!("{:.2}{hidden}", p.total()));
        text(x0 + col_w * 7.0 + 8.0, mid + 18.0, "start")
            .size(9.0)
            .fill(MUTED)
            .write(&mut svg, &format!("{:.2} Gbit/s", f.rate));
        y += row_h;
    }
    let mut y = y + 4.0;
    for l in wrap(
        "0 = no CPU copy: the bytes are handed on by reference (page references, pinned pages, the skb itself; on a NIC with scatter-gather DMA the device would read them there). n/o = not observable from user space: AF_XDP in copy mode copies each frame from the UMEM into an skb (xsk_build_skb); it is a CPU copy the kernel makes, not counted here. The veth has no DMA engine: a real NIC would DMA from the socket buffer or UMEM to the wire.",
        215,
    ) {
        text(MARGIN, y + 10.0, "start").size(10.0).fill(MUTED).write(&mut svg, &l);
        y += 13.0;
    }
    let height = footer(&mut svg, y + 4.0, c) + MARGIN;
    document(width, height, FONT, title, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svg::escape;

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(23.0, 5.0), 5.0);
        assert_eq!(nice_step(0.7, 5.0), 0.2);
    }

    /// Return a row of `transport` and `workload` with figures scaled by `k`.
    fn row(transport: Transport, workload: Workload, k: f64) -> Row {
        let figures = crate::report::Figures {
            p50_us: 10.0 * k,
            p99_us: 20.0 * k,
            rate: if workload.is_bulk() { 2.5 * k } else { 50_000.0 / k },
            cpu_per_unit: 3.0 * k,
            client_cpu_per_unit: k,
            server_cpu_per_unit: 2.0 * k,
            ..Default::default()
        };
        let cdf = if workload.is_bulk() {
            Vec::new()
        } else {
            (0..=10).map(|i| (k * (5.0 + i as f64), i as f64 / 10.0)).collect()
        };
        Row { transport, workload, figures: Some(figures), failure: None, runs: 1, per_run: vec![(0, figures)], cdf }
    }

    #[test]
    fn charts_from_fixed_rows_draw_every_transport_and_the_floor() {
        let ts = [Transport::KernelBusy, Transport::StackXdp, Transport::SmoltcpXdp];
        let mut rows = Vec::new();
        for (i, &t) in ts.iter().enumerate() {
            for w in [RR, Workload::BulkUp, Workload::BulkDown] {
                rows.push(row(t, w, 1.0 + i as f64));
            }
        }
        let c = Conditions { floor: Some(crate::Floor { p50_us: 3.2, ..Default::default() }), ..Conditions::default() };
        let charts = render(&rows, &c);
        let [(_, cdf), (_, throughput), (_, cpu)] = &charts[..] else { panic!("three charts") };
        assert_eq!(cdf.matches("<polyline").count(), ts.len(), "one CDF line per transport");
        assert!(cdf.contains(r#"stroke-dasharray="6 4""#) && cdf.contains("floor: raw AF_XDP frames"));
        for t in ts {
            let label = escape(t.label());
            for (name, svg) in &charts {
                assert!(svg.contains(&label), "{name} names {label}");
            }
        }
        assert!(throughput.contains(">2.50 Gbit/s<") && throughput.contains(">7.50 Gbit/s<"));
        assert!(cpu.contains(">3.00 µs<") && cpu.contains(">16667<"));
    }

    #[test]
    fn charts_without_rows_are_documents() {
        for (name, svg) in render(&[], &Conditions::default()) {
            assert!(svg.starts_with("<svg"), "{name}");
            assert!(svg.trim_end().ends_with("</svg>"), "{name}");
        }
    }
}
