//! `bypass demo --quick` end to end: it builds its own lab, measures every transport, writes
//! `results.md` and `results.json`, and removes the lab.
//!
//! Needs root: without it the test says why it skips, except under `CI=true`, where it fails.

use std::process::Command;

use bypass_io::testlab::lab_available;

const TRANSPORTS: [(&str, &str); 4] = [
    ("kernel-blocking", "1 kernel TCP, blocking"),
    ("kernel-busy", "2 kernel TCP, busy-poll"),
    ("stack-afpacket", "4 ours/AF_PACKET <- kernel"),
    ("stack-afxdp", "5 ours/AF_XDP <- kernel"),
];

/// The workloads, as results.json names them.
const WORKLOADS: [&str; 6] = ["rr-64B-1c", "rr-1024B-1c", "rr-64B-100c", "bulk-up", "bulk-down", "connect"];

/// Return the number after `"key": ` in `json`.
fn number_after(json: &str, key: &str) -> Option<f64> {
    let at = json.find(&format!("\"{key}\": "))? + key.len() + 4;
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

#[test]
fn quick_demo_measures_every_transport_and_cleans_up() {
    if !lab_available("quick_demo_measures_every_transport_and_cleans_up") {
        return;
    }
    let out = std::env::temp_dir().join(format!("bypass-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let child = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["demo", "--quick", "--out"])
        .arg(&out)
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
    for (name, label) in TRANSPORTS {
        for workload in WORKLOADS {
            let row = json
                .lines()
                .find(|l| {
                    l.contains(&format!("\"transport\": \"{name}\""))
                        && l.contains(&format!("\"workload\": \"{workload}\""))
                })
                .unwrap_or_else(|| panic!("no {name} {workload} row in results.json:\n{json}"));
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
    assert!(md.contains("AF_XDP mode: AF_XDP"), "the AF_XDP mode is stated:\n{md}");
    assert!(md.contains("0 raw AF_XDP frames, no TCP") && md.contains("round trips"), "the floor row:\n{md}");

    // No namespace of that process is left.
    let list = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&format!("bxt-{pid}-")), "the demo left a namespace behind:\n{list}");
    let _ = std::fs::remove_dir_all(&out);
}
