//! The wire mode (root, network namespaces): every script against the Linux kernel as the
//! reference, and a representative set against our stack on AF_XDP and on AF_PACKET. The
//! three run one after another (one test function), so scripts never share the CPU with
//! each other: real-time timing is noisy enough on this 2-vCPU VM as it is.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bypass_script::{Backend, WireOptions, WireVerdict, check_file_wire};

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scripts")
}

/// The scripts run against our stack on each backend: handshake, data, close, RST,
/// retransmission timing, zero window, SACK, timestamps, and the rest of the topics.
const REPRESENTATIVE: &[&str] = &[
    "handshake/passive-open.pkt",
    "handshake/active-open.pkt",
    "handshake/closed-port-syn-gets-rst-ack.pkt",
    "handshake/syn-retransmit-backoff.pkt",
    "handshake/syn-ack-retransmit.pkt",
    "handshake/simultaneous-open.pkt",
    "close/passive-close.pkt",
    "close/active-close.pkt",
    "close/fin-retransmitted.pkt",
    "half_close/peer-half-close-we-keep-writing.pkt",
    "rst/established-rst-exact-resets.pkt",
    "rst/abort-sends-rst.pkt",
    "rst/fin-wait-1-rst-resets.pkt",
    "retransmit/rto-floor-and-backoff.pkt",
    "retransmit/first-segment-only.pkt",
    "retransmit/gives-up-after-max-retransmissions.pkt",
    "fast_retransmit/three-dupacks.pkt",
    "zero_window/we-ack-probes-with-zero-window.pkt",
    "zero_window/window-opens-data-flows.pkt",
    "sack/blocks-for-out-of-order-data.pkt",
    "sack/sack-recovery-retransmits-hole.pkt",
    "timestamps/syn-ack-echoes-tsval.pkt",
    "timestamps/paws-drops-old-segment.pkt",
    "delayed_ack/single-segment-delayed.pkt",
    "sws/nagle-holds-small-segment.pkt",
    "window/scaled-window-field.pkt",
    "rfc5961/rst-in-window-challenge-ack.pkt",
    "syncookies/cookie-handshake.pkt",
    "acceptability/beyond-window-gets-ack.pkt",
    "rack_tlp/single-segment-pto.pkt",
];

/// Run `files` against `backend`; return the problems and print a summary line.
fn run_set(backend: Backend, files: &[PathBuf]) -> Vec<String> {
    let options = WireOptions::default();
    let started = Instant::now();
    let mut problems = Vec::new();
    let (mut passed, mut marked, mut skipped) = (0, 0, Vec::new());
    for file in files {
        let name = file.strip_prefix(scripts_dir()).unwrap_or(file).display().to_string();
        match check_file_wire(file, backend, options) {
            WireVerdict::Pass(_) => passed += 1,
            WireVerdict::ExpectedFail(..) => marked += 1,
            WireVerdict::Skipped(why) => skipped.push(format!("{name}: {why}")),
            WireVerdict::Fail(f) => problems.push(format!("[{}] {f}", backend.name())),
            WireVerdict::UnexpectedPass(_, why) => problems.push(format!(
                "[{}] {name}: passes, but its mark says it fails ({why}): remove the mark",
                backend.name()
            )),
        }
    }
    let mark = if backend == Backend::Linux { "@linux differs" } else { "@expect-fail" };
    eprintln!(
        "wire {}: {} scripts in {:.1} s: {passed} pass, {marked} fail as {mark} says, {} skipped, {} problem(s)",
        backend.name(),
        files.len(),
        started.elapsed().as_secs_f64(),
        skipped.len(),
        problems.len()
    );
    for s in &skipped {
        eprintln!("  skipped {s}");
    }
    problems
}

fn all_scripts() -> Vec<PathBuf> {
    let files = bypass_script::scripts_in(&scripts_dir()).expect("read the suite");
    assert!(files.len() >= 100, "the suite has {} scripts", files.len());
    files
}

fn representative() -> Vec<PathBuf> {
    REPRESENTATIVE
        .iter()
        .map(|name| {
            let p = scripts_dir().join(name);
            assert!(p.exists(), "{name} is in REPRESENTATIVE but not in tests/scripts");
            p
        })
        .collect()
}

/// The wire runs, one after another: the full suite against Linux, then the representative
/// set against our stack on AF_XDP and on AF_PACKET. `BYPASS_WIRE=linux,xdp,packet` picks.
#[test]
fn wire() {
    if !bypass_lab::testlab::lab_available("wire") {
        return;
    }
    let _ = env_logger::builder().is_test(true).try_init();
    let pick = std::env::var("BYPASS_WIRE").unwrap_or_else(|_| "linux,xdp,packet".into());
    let mut problems = Vec::new();
    for name in pick.split(',').filter(|s| !s.is_empty()) {
        let backend = Backend::from_name(name).unwrap_or_else(|| panic!("BYPASS_WIRE: unknown backend `{name}`"));
        let files = if backend == Backend::Linux { linux_reference_set() } else { representative() };
        problems.extend(run_set(backend, &files));
    }
    assert!(problems.is_empty(), "{} problem(s):\n\n{}", problems.len(), problems.join("\n\n"));
}

/// `linux_reference`: every script, against the kernel.
fn linux_reference_set() -> Vec<PathBuf> {
    all_scripts()
}
