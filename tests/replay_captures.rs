//! The reference captures of Linux kernel peers under `pcap/` (see pcap/README.md for how each
//! was made) replayed against our stack: in each role our replies must match the recorded
//! Linux side's, and every capture must inspect and play into a stack without a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use bypass_device::read_capture;
use bypass_lab::replay::{Role, play_into_stack, replay};

fn captures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pcap");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("pcap/ holds the reference captures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "expected the nine reference captures, found {files:?}");
    files
}

#[test]
fn every_capture_replays_to_matching_replies_in_both_roles() {
    let mut failures = Vec::new();
    for path in captures() {
        let file = read_capture(&path).unwrap();
        assert!(file.skipped.is_empty(), "{}: {:?}", path.display(), file.skipped);
        for role in [Role::Server, Role::Client] {
            let report = replay(&file, role, None).unwrap();
            if !report.matched() {
                failures.push(format!(
                    "{} as {role:?}: {:?}\n{}",
                    path.display(),
                    report.mismatches,
                    report.side_by_side()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn scenario_specifics_show_in_our_replies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pcap");
    let ours = |name: &str, role: Role| {
        let file = read_capture(&dir.join(name)).unwrap();
        replay(&file, role, None).unwrap().actual
    };
    // A SYN to a closed port: our "server" answers RST|ACK acknowledging the SYN.
    let rst = ours("rst-closed-port.pcap", Role::Server);
    assert!(rst.iter().any(|r| r.flags.rst() && r.flags.ack() && r.ack == Some(1)), "{rst:?}");
    // Handshake options: window scale, MSS and SACK-permitted offered back.
    let syn_ack = ours("handshake-options.pcap", Role::Server);
    let first = &syn_ack[0];
    assert!(first.flags.syn() && first.flags.ack(), "{first:?}");
    assert!(first.options.contains("ws=") && first.options.contains("mss=") && first.options.contains("sackOK"));
    // Simultaneous close: both FINs cross, so ours does not acknowledge the peer's FIN.
    let simultaneous = ours("simultaneous-close.pcap", Role::Server);
    let fin = simultaneous.iter().find(|r| r.flags.fin()).unwrap();
    let peer_fin_acked = simultaneous.iter().any(|r| r.ack.is_some_and(|a| a > fin.ack.unwrap()));
    assert!(peer_fin_acked, "the peer's FIN is acknowledged after ours: {simultaneous:?}");
}

#[test]
fn every_capture_inspects_and_plays_into_a_stack() {
    for path in captures() {
        let out =
            Command::new(env!("CARGO_BIN_EXE_bypass")).arg("inspect").arg(&path).arg("--no-color").output().unwrap();
        assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("TCP conversation 1"), "{text}");
        let file = read_capture(&path).unwrap();
        let counters = play_into_stack(&file, "10.88.0.2".parse().unwrap(), &[7, 9]).unwrap();
        assert_eq!(counters.rx_frames as usize, file.frames.len(), "{}", path.display());
    }
}

#[test]
fn inspect_flags_what_each_capture_is_about() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pcap");
    for (name, marker) in [
        ("retransmission-after-loss.pcap", "retransmission"),
        ("zero-window.pcap", "zero window"),
        ("rst-closed-port.pcap", "incomplete handshake"),
        ("abort-mid-stream.pcap", "reset"),
        ("simultaneous-close.pcap", "CLOSING"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
            .arg("inspect")
            .arg(dir.join(name))
            .arg("--no-color")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{name}: no `{marker}` in\n{text}");
    }
}
