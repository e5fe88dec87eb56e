//! A `bypass echo --pcap` recording over AF_XDP with TX checksum offload on (the default)
//! shows what the wire carries: tshark with checksum validation on finds no bad checksum,
//! although the stack left every TCP checksum it sent to the kernel (issue 30: before the
//! recorder completed them, 95 of 216 frames of such a run were flagged). Needs root
//! (namespaces) and tshark.

mod common;

use std::time::Duration;

use common::{Backend, EchoServer, create_lab, data, echo_with_reader, init_log, peer_connect_many, server_addr};

#[test]
fn offloaded_checksums_are_complete_in_the_recording() {
    init_log();
    if !bypass_lab::testlab::lab_available("offloaded_checksums_are_complete_in_the_recording")
        || !common::tshark_available()
    {
        return;
    }
    let lab = create_lab("bpcsum", 1);
    let path = std::env::temp_dir().join(format!("bypass-csum-{}.pcapng", std::process::id()));
    let _cleanup = RemoveOnDrop(path.clone());
    let pcap = path.to_str().unwrap().to_string();
    let server = EchoServer::start(&lab, Backend::Xdp, &["--pcap", &pcap]);
    let streams = peer_connect_many(&lab, server_addr(&lab), 5);
    for (i, s) in streams.iter().enumerate() {
        echo_with_reader(s, &data(i as u64, 3000), Duration::from_secs(10)).expect("echo");
    }
    drop(streams);
    std::thread::sleep(Duration::from_millis(300));
    let finished = server.stop();
    finished.assert_clean_exit();
    // The stack did leave its checksums to the kernel: otherwise this proves nothing.
    let offloaded = finished.counters.get("device.tx_checksum_offloaded");
    assert!(offloaded >= 15, "only {offloaded} frames went out with offloaded checksums: {}", finished.stdout);

    let all = common::tshark(&path, &["-T", "fields", "-e", "frame.number"]).lines().count();
    let ours =
        common::tshark(&path, &["-Y", &format!("ip.src == {}", lab.bypass_ip), "-T", "fields", "-e", "frame.number"])
            .lines()
            .count();
    let bad = common::tshark(
        &path,
        &[
            "-Y",
            "tcp.checksum.status == \"Bad\" || ip.checksum.status == \"Bad\"",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
    );
    let good = common::tshark(&path, &["-Y", "tcp.checksum.status == \"Good\"", "-T", "fields", "-e", "frame.number"]);
    assert!(ours as u64 >= offloaded, "{ours} frames of ours recorded, {offloaded} offloaded");
    assert_eq!(bad.lines().count(), 0, "frames with bad checksums: {bad}");
    assert!(good.lines().count() >= ours, "{} good of {all}", good.lines().count());
    eprintln!("{all} frames recorded, {ours} sent by the stack ({offloaded} with offloaded checksums), none bad");
}

/// Removes a file when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
