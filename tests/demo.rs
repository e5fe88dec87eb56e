//! `bypass demo --quick` end to end, as on a fresh machine: with `ip` the only program on
//! `PATH` (no `ethtool`, `ping`, `tshark`, `wrk` or `ab`), it builds its own lab, measures
//! every transport, the file-serving rows and the HTTP row (with its own load generator),
//! writes `results.md`, `results.json` and four SVG pictures, and removes the lab. And the HTTP row alone, over
//! two repetitions, with the built-in load generator forced where `wrk` is installed.
//!
//! Needs root: without it the test says why it skips, except under `CI=true`, where it fails.

use std::process::Command;

use bypass_lab::testlab::lab_available;

/// One demo at a time: each spins both cores, and figures taken side by side mean nothing.
static ONE_DEMO: std::sync::Mutex<()> = std::sync::Mutex::new(());

const TRANSPORTS: [(&str, &str); 13] = [
    ("kernel-blocking", "1 kernel TCP, blocking"),
    ("kernel-busy", "2 kernel TCP, busy-poll"),
    ("kernel-busy-defaults", "2d kernel TCP, default offloads, busy-poll"),
    ("kernel-uring", "2u kernel TCP, io_uring, busy-poll"),
    ("kernel-uring-defaults", "2ud kernel TCP, io_uring, default offloads, busy-poll"),
    ("stack-afpacket", "4 ours/AF_PACKET <- kernel"),
    ("stack-afpacket-both", "4b ours/AF_PACKET <-> ours"),
    ("stack-afxdp", "5 ours/AF_XDP <- kernel"),
    ("stack-afxdp-uring", "5u ours/AF_XDP <- kernel io_uring"),
    ("stack-afxdp-ipv6", "5v6 ours/AF_XDP <- kernel, IPv6"),
    ("stack-afxdp-both", "5b ours/AF_XDP <-> ours"),
    ("smoltcp-afxdp", "6 smoltcp/AF_XDP <- kernel"),
    ("smoltcp-afxdp-both", "6b smoltcp/AF_XDP <-> smoltcp"),
];

/// Rows 3, 3s and 3z: kernel TCP sending with sendfile(2), splice(2) or MSG_ZEROCOPY, bulk
/// server -> client only.
const ZEROCOPY: [(&str, &str); 3] = [
    ("kernel-sendfile", "3 kernel TCP, sendfile"),
    ("kernel-splice", "3s kernel TCP, splice"),
    ("kernel-msg-zerocopy", "3z kernel TCP, MSG_ZEROCOPY"),
];

/// The file-serving rows (`--workload file`): the same file, in the page cache, by each path.
const FILE_ROWS: [(&str, &str); 8] = [
    ("file-read-write", "f1 kernel, read + write"),
    ("file-mmap-write", "f2 kernel, mmap + write"),
    ("file-sendfile", "f3 kernel, sendfile"),
    ("file-splice", "f4 kernel, splice"),
    ("file-msg-zerocopy", "f5 kernel, MSG_ZEROCOPY from mmap"),
    ("file-stack-send-with", "f6 ours/AF_XDP, send_with + pread"),
    ("file-stack-write", "f7 ours/AF_XDP, pread + write"),
    ("file-stack-send-with-mmap", "f8 ours/AF_XDP, send_with + mmap"),
];

/// The workloads, as results.json names them (the file rows apart).
const WORKLOADS: [&str; 6] = ["rr-64B-1c", "rr-1024B-1c", "rr-64B-100c", "bulk-up", "bulk-down", "connect"];

/// Return the number after `"key": ` in `json`.
fn number_after(json: &str, key: &str) -> Option<f64> {
    let at = json.find(&format!("\"{key}\": "))? + key.len() + 4;
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// Return the line of results.json for transport `name` and `workload`, or fail saying so.
fn json_row<'a>(json: &'a str, name: &str, workload: &str) -> &'a str {
    json.lines()
        .find(|l| {
            l.contains(&format!("\"transport\": \"{name}\"")) && l.contains(&format!("\"workload\": \"{workload}\""))
        })
        .unwrap_or_else(|| panic!("no {name} {workload} row in results.json:\n{json}"))
}

#[test]
fn quick_demo_measures_every_transport_and_cleans_up() {
    if !lab_available("quick_demo_measures_every_transport_and_cleans_up") {
        return;
    }
    let _one = ONE_DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("bypass-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // A fresh machine: `ip` (iproute2) is all there is.
    let only_ip = out.join("bin");
    std::fs::create_dir_all(&only_ip).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let ip = std::env::split_paths(&path).map(|d| d.join("ip")).find(|p| p.is_file()).expect("`ip` is on PATH");
    std::os::unix::fs::symlink(ip, only_ip.join("ip")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["demo", "--quick", "--out"])
        .arg(&out)
        .env("PATH", &only_ip)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start bypass demo");
    let pid = child.id();
    let output = child.wait_with_output().expect("run bypass demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bypass demo --quick failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    // Every transport has a row with numbers in every workload, in the table and in both files.
    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md written");
    let json = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    // The application row is there, and on a fresh machine (no wrk, no ab) measured with
    // bypass's own load generator, which the table names.
    for text in [&stdout[..], &md[..]] {
        assert!(text.contains("## application: HTTP/1.1 keep-alive"), "no application section:\n{text}");
        assert!(
            text.contains("load: bypass's own HTTP load generator, closed loop, 100 connections")
                && text.contains("neither wrk nor ab is installed"),
            "the load generator is not named:\n{text}"
        );
    }
    assert_http_rows_measured(&json, 1);
    // Every measured row keeps its repetition's figures (one, in a quick run).
    for line in json.lines().filter(|l| l.contains("\"rate\": ")) {
        assert!(line.contains("\"repetitions\": [{\"repetition\": 1, "), "no raw repetition:\n{line}");
    }
    assert!(md.contains("a trailing `~` marks a ratio whose spread is wider than 20%"), "no spread legend:\n{md}");
    // The memory figure: 10,000 idle connections within 8 KiB each.
    for text in [&stdout[..], &md[..]] {
        assert!(text.contains("## memory: idle established connections"), "no memory section:\n{text}");
    }
    let per = number_after(&json, "bytes_per_connection").unwrap_or_else(|| panic!("no memory figure:\n{json}"));
    assert!(per > 0.0 && per <= 8192.0, "{per} bytes resident per idle connection");
    // Beside it, the kernel's own memory per connection for the same clients.
    for text in [&stdout[..], &md[..]] {
        assert!(text.contains("the kernel, for comparison: the same clients"), "no kernel memory figure:\n{text}");
    }
    let kernel = number_after(&json, "kernel_bytes_per_connection")
        .unwrap_or_else(|| panic!("no kernel memory figure:\n{json}"));
    assert!(kernel > 0.0, "{kernel} bytes of kernel memory per connection");
    // The SYN-flood figure: every server measured calm and flooded, the flood sent SYNs, and
    // the shield shed some of them.
    for text in [&stdout[..], &md[..]] {
        assert!(text.contains("## SYN flood: an established connection"), "no SYN-flood section:\n{text}");
    }
    for server in ["kernel", "ours", "ours-shielded", "ours-shed-all"] {
        let at = json
            .find(&format!("\"server\": \"{server}\""))
            .unwrap_or_else(|| panic!("no {server} row in the SYN-flood figure:\n{json}"));
        let row = &json[at..];
        let calm = &row[row.find("\"calm\": ").unwrap_or_else(|| panic!("{server}: no calm phase:\n{row}"))..];
        assert!(number_after(calm, "round_trips").unwrap_or(0.0) > 0.0, "{server}: no round trips calm:\n{row}");
        let flooded = &row[row.find("\"flooded\": ").expect("a flooded phase")..];
        assert!(number_after(flooded, "round_trips").unwrap_or(0.0) > 0.0, "{server}: no round trips flooded");
        assert!(number_after(flooded, "flood_sent").unwrap_or(0.0) > 0.0, "{server}: the flood sent nothing:\n{row}");
        if server.starts_with("ours-sh") {
            assert!(number_after(flooded, "syn_shed").unwrap_or(0.0) > 0.0, "the shield shed nothing:\n{row}");
        }
    }
    for (name, label) in TRANSPORTS {
        for workload in WORKLOADS {
            let row = json_row(&json, name, workload);
            let rate = number_after(row, "rate").unwrap_or_else(|| panic!("{name} {workload} has no rate:\n{row}"));
            assert!(rate > 0.0, "{name} {workload}: rate {rate}");
            if !workload.starts_with("bulk") {
                let p50 = number_after(row, "p50_us").unwrap_or_else(|| panic!("{name} {workload} has no p50:\n{row}"));
                assert!(p50 > 0.0 && p50 < 1e6, "{name} {workload}: p50 {p50} µs");
            }
        }
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with(&format!("| {label} |"))).collect();
        assert_eq!(lines.len(), WORKLOADS.len(), "one `{label}` row per workload in results.md:\n{md}");
        for line in lines {
            let first = line.split('|').nth(2).unwrap().trim();
            assert!(first.parse::<f64>().is_ok(), "`{label}`: first figure is `{first}` in results.md");
        }
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with(label)).count(),
            WORKLOADS.len(),
            "one `{label}` row per workload in the table:\n{stdout}"
        );
    }
    // Rows 3, 3s and 3z (sendfile, splice, MSG_ZEROCOPY) measure bulk server -> client only; the others say so.
    let throughput = std::fs::read_to_string(out.join("throughput.svg")).expect("throughput.svg written");
    for (name, label) in ZEROCOPY {
        for workload in WORKLOADS {
            let row = json_row(&json, name, workload);
            if workload == "bulk-down" {
                let rate = number_after(row, "rate").unwrap_or_else(|| panic!("{name} {workload} has no rate:\n{row}"));
                assert!(rate > 0.0, "{name} {workload}: rate {rate}");
            } else {
                assert!(
                    row.contains("\"failure\": \"not measured:"),
                    "{name} {workload} is marked not measured:\n{row}"
                );
            }
        }
        let measured: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with(&format!("| {label} |")))
            .filter(|l| l.split('|').nth(2).unwrap().trim().parse::<f64>().is_ok())
            .collect();
        assert_eq!(measured.len(), 1, "one measured `{label}` row (bulk server -> client) in results.md:\n{md}");
        assert!(throughput.contains(label), "throughput.svg names `{label}`");
    }

    // Row 5z (our server reading and writing in place) measures the bulk streams only, with
    // fewer copies of ours per byte than row 5.
    for workload in WORKLOADS {
        let row = json_row(&json, "stack-afxdp-in-place", workload);
        if workload.starts_with("bulk") {
            let rate = number_after(row, "rate").unwrap_or_else(|| panic!("5z {workload} has no rate:\n{row}"));
            assert!(rate > 0.0, "5z {workload}: rate {rate}");
            let copies = number_after(row, "copies_ours_per_byte").unwrap_or_else(|| panic!("5z copies:\n{row}"));
            assert!(copies < 1.5, "5z {workload}: the application copies nothing, the stack once: {copies}\n{row}");
        } else {
            assert!(row.contains("\"failure\": \"not measured:"), "5z {workload} is marked not measured:\n{row}");
        }
    }

    // The jumbo rows (2j, 5j, 6j: bx0 and px0 at 65,000 bytes for the row) measure the bulk
    // streams only, and leave the MTU as it was for the rows after them.
    for name in ["kernel-busy-jumbo", "stack-afxdp-jumbo", "smoltcp-afxdp-jumbo"] {
        for workload in WORKLOADS {
            let row = json_row(&json, name, workload);
            if workload.starts_with("bulk") {
                let rate = number_after(row, "rate").unwrap_or_else(|| panic!("{name} {workload} has no rate:\n{row}"));
                assert!(rate > 0.0, "{name} {workload}: rate {rate}");
            } else {
                assert!(
                    row.contains("\"failure\": \"not measured:"),
                    "{name} {workload} is marked not measured:\n{row}"
                );
            }
        }
    }

    // Every measured row is read against both kernel rows: offloads off (2) and the kernel's
    // defaults (2d); row 2d is 1.00x of itself. And against the best kernel row of its
    // repetition (2, 2d, 2u, 2ud).
    for line in json.lines().filter(|l| l.contains("\"rate\": ") && !l.contains("\"workload\": \"file\"")) {
        for key in ["vs_row_2", "vs_row_2d", "vs_best_kernel"] {
            let ratio = number_after(line, key).unwrap_or_else(|| panic!("no {key} ratio:\n{line}"));
            assert!(ratio > 0.0, "{key} {ratio}:\n{line}");
        }
        if line.contains("\"transport\": \"kernel-busy-defaults\"") {
            assert_eq!(number_after(line, "vs_row_2d"), Some(1.0), "{line}");
        }
    }
    assert!(md.contains("| vs 2 | vs 2d |"), "the bulk tables have both ratio columns:\n{md}");
    // The bulk floors: each bulk direction at both MTUs, and every lab bulk row read against one.
    assert!(
        md.contains("| vs 2 | vs 2d | vs best kernel | vs floor |"),
        "the bulk tables have the best kernel's and the floor's columns:\n{md}"
    );
    for (path, mtu) in [("px0 -> bx0", 1500), ("px0 -> bx0", 65000), ("bx0 -> px0", 1500), ("bx0 -> px0", 65000)] {
        assert!(md.contains(&format!("streamed {path}, MTU {mtu}, no TCP")), "no bulk floor {path} at {mtu}:\n{md}");
    }
    for line in json.lines().filter(|l| l.contains("\"workload\": \"bulk-") && l.contains("\"rate\": ")) {
        let ratio = number_after(line, "vs_floor").unwrap_or_else(|| panic!("no vs_floor ratio:\n{line}"));
        assert!(ratio > 0.0, "vs_floor {ratio}:\n{line}");
    }
    assert!(md.contains("row 2d on bk0/pk0 with the kernel's default offloads"), "the conditions say so:\n{md}");
    assert!(md.contains("AF_XDP mode: AF_XDP"), "the AF_XDP mode is stated:\n{md}");
    assert!(
        md.contains("MSG_ZEROCOPY: kernel TCP, send(2) with MSG_ZEROCOPY"),
        "row 3z's completions are stated:\n{md}"
    );
    // Both ends ours: the copies of both ends are counted (4 per byte per direction: 2 at each end).
    for name in ["stack-afpacket-both", "stack-afxdp-both"] {
        let row = json_row(&json, name, "rr-64B-1c");
        let copies = number_after(row, "copies_ours_per_byte").unwrap_or_else(|| panic!("{name}: no copies:\n{row}"));
        assert!((3.9..4.1).contains(&copies), "{name}: {copies} copies per byte per direction, not 4:\n{row}");
        let syscalls = number_after(row, "syscalls").unwrap_or_else(|| panic!("{name}: no syscalls:\n{row}"));
        assert!(syscalls > 0.0, "{name}: the devices' system calls are counted:\n{row}");
    }
    assert!(md.contains("0 raw AF_XDP frames, no TCP") && md.contains("round trips"), "the floor row:\n{md}");
    // The floor brackets every lab row of the 64-byte round trip on one connection, which
    // reads its p50 against the two floors around it (and only that workload's rows do).
    assert!(md.contains("| p50 vs best kernel | p50 vs floor |"), "the floor's column:\n{md}");
    assert_eq!(md.matches("| p50 vs floor |").count(), 1, "on one table only:\n{md}");
    for (name, _) in TRANSPORTS {
        let row = json_row(&json, name, "rr-64B-1c");
        let ratio = number_after(row, "vs_floor").unwrap_or_else(|| panic!("{name}: no p50 vs floor:\n{row}"));
        let before =
            number_after(row, "floor_p50_before_us").unwrap_or_else(|| panic!("{name}: no floor before:\n{row}"));
        let after = number_after(row, "floor_p50_after_us").unwrap_or_else(|| panic!("{name}: no floor after:\n{row}"));
        let p50 = number_after(row, "p50_us").unwrap();
        assert!(before > 0.0 && after > 0.0, "{name}: floors {before} and {after} µs");
        assert!(
            (ratio / (p50 / ((before + after) / 2.0)) - 1.0).abs() < 1e-3,
            "{name}: {ratio} is not p50 over the floors:\n{row}"
        );
        assert!(!json_row(&json, name, "rr-64B-100c").contains("floor_p50"), "{name}: 100 connections bracketed");
    }

    // The three charts: well-formed SVG, linked from results.md, with every transport drawn.
    for name in ["latency-cdf.svg", "throughput.svg", "cpu.svg"] {
        let svg = std::fs::read_to_string(out.join(name)).unwrap_or_else(|e| panic!("{name} not written: {e}"));
        assert!(svg.starts_with("<svg"), "{name} starts with `{}`", &svg[..svg.len().min(40)]);
        if let Err(e) = balanced(&svg) {
            panic!("{name} is not balanced: {e}\n{svg}");
        }
        assert!(md.contains(&format!("]({name})")), "results.md links {name}:\n{md}");
        for (_, label) in TRANSPORTS {
            assert!(svg.contains(&label.replace('<', "&lt;").replace('>', "&gt;")), "{name} names `{label}`");
        }
    }
    let cdf = std::fs::read_to_string(out.join("latency-cdf.svg")).unwrap();
    assert_eq!(cdf.matches("<polyline").count(), TRANSPORTS.len(), "one CDF line per transport");
    assert!(cdf.contains("floor: raw AF_XDP frames"), "the floor marker is drawn");

    assert_file_rows(&json, &md, &stdout, &out);

    // No namespace of that process is left.
    let list = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&format!("bxt-{pid}-")), "the demo left a namespace behind:\n{list}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Check the file-serving rows: every path measured with no failed repetition (the client
/// checksums each pass of the file and fails the row on a difference, so a measured row is
/// byte-exact), its copies counted where they happen, in the order the paths promise; the
/// picture drawn; and no file row for the other transports, nor a file left behind.
fn assert_file_rows(json: &str, md: &str, stdout: &str, out: &std::path::Path) {
    assert!(md.contains("100.0% resident in the page cache (mincore)"), "the file's residency:\n{md}");
    let copies = |name: &str, key: &str| -> f64 {
        let row = json_row(json, name, "file");
        let at = row.find("\"file_copies_per_byte\": ").unwrap_or_else(|| panic!("{name}: no copies:\n{row}"));
        number_after(&row[at..], key).unwrap_or_else(|| panic!("{name}: no {key}:\n{row}"))
    };
    for (name, label) in FILE_ROWS {
        let row = json_row(json, name, "file");
        assert!(row.contains("\"failure\": null"), "{name}: a repetition failed (a checksum differs?):\n{row}");
        for key in ["rate", "cpu", "syscalls", "ctx_switches"] {
            let x = number_after(row, key).unwrap_or_else(|| panic!("{name}: no {key}:\n{row}"));
            assert!(x > 0.0 || key == "ctx_switches", "{name}: {key} {x}:\n{row}");
        }
        // The client's read(2) copies every byte it returns, once.
        let client = copies(name, "client_socket_to_user");
        assert!((0.99..1.01).contains(&client), "{name}: the client copied {client} per byte");
        assert!(stdout.lines().any(|l| l.starts_with(label)), "no `{label}` row in the table:\n{stdout}");
        assert!(md.contains(&format!("| {label} |")), "no `{label}` row in results.md:\n{md}");
    }
    // The ladder: read + write copies the file twice on the way out, mmap + write once,
    // sendfile not at all (each counted from the bytes the calls returned).
    let total = |name: &str| copies(name, "total");
    let (rw, mmap, sendfile) = (total("file-read-write"), total("file-mmap-write"), total("file-sendfile"));
    assert!(
        rw > mmap + 0.5 && mmap > sendfile + 0.5,
        "copies: read + write {rw}, mmap + write {mmap}, sendfile {sendfile}"
    );
    assert!((2.9..3.2).contains(&rw) && (0.99..1.05).contains(&sendfile), "read + write {rw}, sendfile {sendfile}");
    assert!(copies("file-splice", "sending") < 0.01, "splice copies nothing it can show");
    // MSG_ZEROCOPY over a veth to a local socket: the kernel copies after all, and says so.
    let zc = copies("file-msg-zerocopy", "zerocopy_copied");
    assert!(zc > 0.9, "MSG_ZEROCOPY: {zc} of the bytes completed as copied");
    // Ours: send_with takes the file's bytes straight into the send buffer (one copy where
    // pread + write make two); both copy send buffer -> frame once.
    assert!(copies("file-stack-send-with", "user_to_socket") == 0.0, "send_with: no user -> socket copy");
    assert!(copies("file-stack-send-with", "page_cache_to_socket") > 0.99, "send_with: pread into the send buffer");
    assert!(copies("file-stack-write", "page_cache_to_user") > 0.99, "write: pread into a user buffer");
    // Or from a mapping: the same one copy, page faults instead of a read.
    assert!(copies("file-stack-send-with-mmap", "page_cache_to_socket") > 0.99, "send_with: mmap copy");
    assert!(copies("file-stack-send-with-mmap", "page_cache_to_user") == 0.0, "send_with + mmap: no read");
    assert!(copies("file-stack-send-with-mmap", "minor_faults_per_mib") > 0.0, "send_with + mmap: faults");
    for name in ["file-stack-send-with", "file-stack-write", "file-stack-send-with-mmap"] {
        let frame = copies(name, "socket_to_frame");
        assert!((0.99..1.2).contains(&frame), "{name}: {frame} copies send buffer -> frame per byte");
    }
    assert!(total("file-stack-write") > total("file-stack-send-with") + 0.5, "send_with saves a copy over write");
    // Only the file rows serve the file.
    assert!(
        !json.lines().any(|l| l.contains("\"workload\": \"file\"") && l.contains("\"transport\": \"kernel-busy\"")),
        "a file row for kernel-busy:\n{json}"
    );
    // The picture: a row per path, linked from results.md.
    let svg = std::fs::read_to_string(out.join("file-copies.svg")).expect("file-copies.svg written");
    if let Err(e) = balanced(&svg) {
        panic!("file-copies.svg is not balanced: {e}\n{svg}");
    }
    assert!(md.contains("](file-copies.svg)"), "results.md links file-copies.svg");
    for (_, label) in FILE_ROWS {
        assert!(svg.contains(label), "file-copies.svg names `{label}`");
    }
    assert!(svg.contains("not observable"), "file-copies.svg marks what cannot be observed");
    // The file itself is gone (unlinked as soon as it was open).
    let left: Vec<_> = std::fs::read_dir(out)
        .expect("the output directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("bypass-demo-file"))
        .collect();
    assert!(left.is_empty(), "the served file was left behind: {left:?}");
}

/// Check that results.json's application section has every server measured, `runs` times,
/// with no failure and no error.
fn assert_http_rows_measured(json: &str, runs: usize) {
    let app =
        json.lines().find(|l| l.contains("\"application\": {")).unwrap_or_else(|| panic!("no application:\n{json}"));
    let rows: Vec<&str> = app.split("{\"server\": ").skip(1).collect();
    assert_eq!(rows.len(), 3, "three servers:\n{app}");
    for row in rows {
        let per_sec = number_after(row, "requests_per_s").unwrap_or_else(|| panic!("no requests/s:\n{row}"));
        assert!(per_sec > 0.0, "{per_sec} requests/s:\n{row}");
        assert!(row.contains("\"failure\": null"), "a failure:\n{row}");
        assert_eq!(row.matches("{\"repetition\": ").count(), runs, "one figure per repetition:\n{row}");
        let p50 = number_after(row, "p50_us").unwrap_or_else(|| panic!("no p50:\n{row}"));
        assert!(p50 > 0.0, "p50 {p50} µs:\n{row}");
    }
}

#[test]
fn the_http_row_measures_with_its_own_load_generator_when_told() {
    if !lab_available("the_http_row_measures_with_its_own_load_generator_when_told") {
        return;
    }
    let _one = ONE_DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("bypass-demo-http-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // wrk may be installed here (it is on CI): the variable hides it.
    let output = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["demo", "--quick", "--only", "http", "--runs", "2", "--out"])
        .arg(&out)
        .env("BYPASS_DEMO_HTTP_CLIENT", "builtin")
        .output()
        .expect("run bypass demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bypass demo --only http failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md written");
    let json = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    for text in [&stdout[..], &md[..]] {
        assert!(
            text.contains("load: bypass's own HTTP load generator, closed loop, 100 connections")
                && text.contains("BYPASS_DEMO_HTTP_CLIENT=builtin"),
            "the load generator is not named:\n{text}"
        );
        // Two repetitions: each ratio to the kernel is a median with its range.
        let ours: Vec<&str> = text.lines().filter(|l| l.starts_with("| ours/AF_XDP")).collect();
        assert_eq!(ours.len(), 2, "two servers of ours:\n{text}");
        for line in ours {
            let cell = line.split('|').nth(3).unwrap().trim();
            let (median, range) = cell.split_once("x (").unwrap_or_else(|| panic!("`{cell}` is not `median (range)`"));
            let (lo, hi) = range.trim_end_matches('~').trim_end_matches(')').split_once('-').unwrap();
            let (median, lo, hi): (f64, f64, f64) = (median.parse().unwrap(), lo.parse().unwrap(), hi.parse().unwrap());
            assert!(lo <= median && median <= hi && lo > 0.0, "`{cell}`");
            // `~` past a 20% spread (the printed bounds are rounded: a margin either side).
            let spread = hi / lo - 1.0;
            if !(0.15..=0.25).contains(&spread) {
                assert_eq!(cell.ends_with('~'), spread > 0.2, "`{cell}`: `~` marks a spread over 20%");
            }
        }
    }
    assert_http_rows_measured(&json, 2);
    let _ = std::fs::remove_dir_all(&out);
}

/// Return whether every tag of `xml` is closed in order (no comments, CDATA or `>` in attributes).
fn balanced(xml: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find('<') {
        let end = rest[at..].find('>').ok_or("a tag is not closed with `>`")? + at;
        let tag = &rest[at + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if o == name.trim() => {}
                o => return Err(format!("`</{name}>` closes {o:?}")),
            }
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap_or(""));
        }
    }
    if open.is_empty() { Ok(()) } else { Err(format!("not closed: {open:?}")) }
}

#[test]
fn the_balance_check_catches_unclosed_tags() {
    assert!(balanced("<svg a=\"1\"><g><line/></g><text>x &lt; y</text></svg>").is_ok());
    assert!(balanced("<svg><g></svg>").is_err());
    assert!(balanced("<svg><text>").is_err());
}
