//! Every script under `tests/scripts` in virtual mode, and checks of the runner itself.

use std::path::{Path, PathBuf};

use bypass_script::{Verdict, check_file, run_virtual};

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scripts")
}

/// Run the whole suite; report every failure at the end (expected failures must still fail).
#[test]
fn every_script_in_virtual_mode() {
    let files = bypass_script::scripts_in(&scripts_dir()).expect("read the suite");
    assert!(files.len() >= 100, "the suite has {} scripts", files.len());
    let mut problems = Vec::new();
    let (mut passed, mut xfailed) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let first = text.lines().next().unwrap_or_default();
        if !(first.starts_with("// RFC") || first.starts_with("// Linux")) {
            problems.push(format!("{}: the first line must cite the RFC section it proves", file.display()));
        }
        match check_file(file) {
            Verdict::Pass(_) => passed += 1,
            Verdict::ExpectedFail(..) => xfailed += 1,
            Verdict::Fail(f) => problems.push(f.to_string()),
            Verdict::UnexpectedPass(_, why) => problems
                .push(format!("{}: passes, but is marked @expect-fail ({why}): remove the mark", file.display())),
        }
    }
    eprintln!("{} scripts: {passed} pass, {xfailed} fail as expected", files.len());
    assert!(problems.is_empty(), "{} problem(s):\n\n{}", problems.len(), problems.join("\n\n"));
}

const HANDSHAKE: &str = "\
// RFC 9293 3.5
// @config timestamps=off
0      listen 8080
+0     < S 0:0(0) win 65535 <mss 1460>
+0     > S. 0:0(0) ack 1 <mss 1460>
+0.010 < . 1:1(0) ack 1 win 65535
+0     accept
";

fn fails_with(extra: &str) -> String {
    let text = format!("{HANDSHAKE}{extra}");
    run_virtual("test.pkt", &text).expect_err("the script must fail").to_string()
}

#[test]
fn a_wrong_ack_is_reported_with_both_segments() {
    let msg = fails_with("+0 write 1000\n+0 > P. 1:1001(1000) ack 5\n");
    assert!(msg.starts_with("test.pkt:9: bad outbound TCP ack: expected 5 actual 1"), "{msg}");
    assert!(msg.contains("script packet: 0.010000 P. 1:1001(1000) ack 5"), "{msg}");
    assert!(msg.contains("actual packet: 0.010000 P. 1:1001(1000) ack 1 win "), "{msg}");
}

#[test]
fn an_unexpected_segment_fails_the_next_line() {
    let msg = fails_with("+0 write 1000\n+0.1 state ESTABLISHED\n");
    assert!(msg.starts_with("test.pkt:9: unexpected outbound segment at 0.010000"), "{msg}");
    assert!(msg.contains("actual packet: 0.010000 P. 1:1001(1000) ack 1"), "{msg}");
}

#[test]
fn a_late_segment_is_a_timing_error() {
    // The first retransmission comes at the RTO (200 ms), not 100 ms after the segment.
    let msg = fails_with("+0 write 1000\n+0 > P. 1:1001(1000) ack 1\n+0.1 > P. 1:1001(1000) ack 1\n");
    assert!(msg.contains("test.pkt:10: timing error: expected at 0.110000 actual 0.210000"), "{msg}");
}

#[test]
fn a_missing_segment_is_reported() {
    let msg = fails_with("+0 > . 1:1(0) ack 1\n");
    assert!(msg.contains("expected outbound segment, none sent"), "{msg}");
}

#[test]
fn aggregation_joins_consecutive_segments() {
    let text = format!("{HANDSHAKE}+0 write 2920\n+0 > P. 1:2921(2920) ack 1\n");
    run_virtual("test.pkt", &text).unwrap();
    let msg = fails_with("+0 write 2920\n+0 > P. 1:3001(3000) ack 1\n");
    assert!(msg.contains("payload length: expected 3000 actual 2920"), "{msg}");
}

#[test]
fn call_results_and_state_are_asserted() {
    let msg = fails_with("+0 read 10\n");
    assert!(msg.contains("bad call result: expected 10 actual EAGAIN"), "{msg}");
    let msg = fails_with("+0 state CLOSE-WAIT\n");
    assert!(msg.contains("bad state: expected CLOSE-WAIT actual ESTABLISHED"), "{msg}");
    let msg = fails_with("+0 event readable\n");
    assert!(msg.contains("expected event readable not delivered"), "{msg}");
    run_virtual("ok.pkt", &format!("{HANDSHAKE}+0 read 10 = EAGAIN\n+0 state ESTABLISHED\n")).unwrap();
}

#[test]
fn parse_errors_name_the_line() {
    let msg = run_virtual("bad.pkt", "0 listen\n+0 < S 0:0(0)\n").unwrap_err().to_string();
    assert!(msg.starts_with("bad.pkt:2: window must be specified"), "{msg}");
}

#[test]
fn expect_fail_is_honoured() {
    let dir = std::env::temp_dir().join(format!("bypass-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("wrong.pkt");
    std::fs::write(
        &wrong,
        format!("// @expect-fail: ack is wrong on purpose\n{HANDSHAKE}+0 write 10\n+0 > P. 1:11(10) ack 9\n"),
    )
    .unwrap();
    assert!(matches!(check_file(&wrong), Verdict::ExpectedFail(..)));
    let right = dir.join("right.pkt");
    std::fs::write(&right, format!("// @expect-fail: nothing\n{HANDSHAKE}+0 write 10\n+0 > P. 1:11(10) ack 1\n"))
        .unwrap();
    assert!(matches!(check_file(&right), Verdict::UnexpectedPass(..)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reference captures converted to scripts and run with our stack on one side. Only these
/// pass: in the others Linux acknowledges at once where we delay the ACK (40 ms), sets PSH
/// on other segments, or acknowledges later in the flight than we do.
#[test]
fn a_capture_converts_and_runs() {
    for (file, side) in [
        ("handshake-options.pcap", bypass_script::Side::Server),
        ("handshake-options.pcap", bypass_script::Side::Client),
        ("rst-closed-port.pcap", bypass_script::Side::Server),
        ("rst-closed-port.pcap", bypass_script::Side::Client),
    ] {
        let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pcap").join(file);
        let script = bypass_script::script_from_pcap_file(&pcap, 1, side).unwrap();
        if let Err(f) = run_virtual(file, &script) {
            panic!("{file} as {side:?}:\n{script}\n{f}");
        }
    }
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pcap/close-server-first.pcap");
    let script = bypass_script::script_from_pcap_file(&pcap, 1, bypass_script::Side::Server).unwrap();
    assert!(script.contains("listen 5"), "{script}");
    let result = run_virtual("close-server-first.pkt", &script);
    if let Err(f) = &result {
        panic!("{script}\n{f}");
    }
}

/// Our own `--pcap` recordings are pcapng: record our stack answering a captured client
/// (`bypass replay`), convert the recording, and run the handshake-and-close part of it.
#[test]
fn a_pcapng_recording_of_ours_converts_and_runs() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pcap/handshake-options.pcap");
    let file = bypass_device::read_capture(&pcap).unwrap();
    let out = std::env::temp_dir().join(format!("bypass-script-{}.pcapng", std::process::id()));
    let capture = bypass_device::PcapNgCapture::create(&out, "replay", "test", std::time::UNIX_EPOCH).unwrap();
    let report = bypass_lab::replay::replay(&file, bypass_lab::replay::Role::Server, Some(Box::new(capture))).unwrap();
    assert!(report.matched(), "{}", report.side_by_side());
    let script = bypass_script::script_from_pcap_file(&out, 1, bypass_script::Side::Server);
    std::fs::remove_file(&out).unwrap();
    let script = script.unwrap();
    assert!(script.contains("> S. 0:0(0) ack 1"), "{script}");
    if let Err(f) = run_virtual("ours.pcapng", &script) {
        panic!("{script}\n{f}");
    }
}
