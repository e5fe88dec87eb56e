//! The namespace lab (`bypass_io::testlab`) and the interface facts it relies on
//! (`bypass_io::netdev`): offloads set through the ethtool ioctl, ICMP echo from code, and a
//! lab built on a machine where `ip` is the only program there is.
//!
//! Needs root: without it the tests say why they skip, except under `CI=true`, where they fail.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bypass_io::netdev::{self, NetdevError, Offload};
use bypass_io::testlab::{Lab, LabConfig, lab_available, ping};

/// Set in the child process of [`a_lab_needs_only_ip`].
const CHILD_ENV: &str = "BYPASS_IO_TEST_ONLY_IP";

/// Return where `program` is found on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// Return the offloads of `iface` in the peer's namespace, as `ethtool -k` would show them.
fn peer_offloads(lab: &Lab, iface: &str) -> Vec<(Offload, bool)> {
    lab.in_peer(|| netdev::offloads(iface)).unwrap_or_else(|e| panic!("read the offloads of {iface}: {e}"))
}

fn on(offloads: &[(Offload, bool)], which: Offload) -> bool {
    offloads.iter().find(|(o, _)| *o == which).map(|(_, on)| *on).unwrap()
}

#[test]
fn offloads_are_read_and_set_through_the_ioctl() {
    if !lab_available("offloads_are_read_and_set_through_the_ioctl") {
        return;
    }
    let lab = Lab::with_config(LabConfig { offloads_off: false, ..LabConfig::new("offloads") }).unwrap();
    let iface = lab.peer_if.clone();
    // A veth's defaults: checksumming, scatter-gather, TSO and GSO on.
    let defaults = peer_offloads(&lab, &iface);
    for o in [Offload::TxChecksum, Offload::ScatterGather, Offload::Tso, Offload::Gso] {
        assert!(on(&defaults, o), "{} is on by default on a veth: {defaults:?}", o.name());
    }
    lab.in_peer(|| netdev::segmentation_offloads_off(&iface)).unwrap();
    let off = peer_offloads(&lab, &iface);
    for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
        assert!(!on(&off, o), "{} is off: {off:?}", o.name());
    }
    assert!(on(&off, Offload::ScatterGather), "scatter-gather was not touched: {off:?}");
    // And back, checksumming first (the kernel drops TSO while it is off).
    let all_on = [(Offload::TxChecksum, true), (Offload::Tso, true), (Offload::Gso, true)];
    lab.in_peer(|| netdev::set_offloads(&iface, &all_on)).unwrap();
    assert_eq!(peer_offloads(&lab, &iface), defaults, "the defaults are back");

    // The driver and its statistics (`ethtool -i`, `ethtool -S`).
    assert_eq!(lab.in_peer(|| netdev::driver(&iface)).unwrap(), "veth");
    let stats = lab.in_peer(|| netdev::stats(&iface)).unwrap();
    assert!(stats.iter().any(|(name, _)| name == "peer_ifindex"), "veth's statistics: {stats:?}");
    assert!(stats.iter().any(|(name, _)| name.starts_with("rx_queue_0_")), "per-queue statistics: {stats:?}");
}

#[test]
fn offload_errors_name_the_interface_and_what_to_do() {
    if !lab_available("offload_errors_name_the_interface_and_what_to_do") {
        return;
    }
    let err = netdev::offload("bxt-nosuch0", Offload::Tso).unwrap_err();
    assert!(matches!(err, NetdevError::Ioctl { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("bxt-nosuch0") && message.contains("no such interface"), "{message}");
    assert!(std::error::Error::source(&err).is_some());
    // A name too long for the kernel is refused before the ioctl.
    assert!(netdev::offload("an-interface-name-longer-than-ifnamsiz", Offload::Gso).is_err());
}

#[test]
fn ping_from_code_reaches_the_peer() {
    if !lab_available("ping_from_code_reaches_the_peer") {
        return;
    }
    let lab = Lab::create("ping").unwrap();
    let rtt = lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(2))).expect("the peer answers its own address");
    assert!(rtt < Duration::from_secs(2));
    // Nobody has 10.77.0.9: no reply, an error that says so, after the timeout.
    let err = lab.in_peer(|| ping("10.77.0.9".parse().unwrap(), Duration::from_millis(300))).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
}

#[test]
fn a_kernel_pair_keeps_the_kernel_defaults() {
    if !lab_available("a_kernel_pair_keeps_the_kernel_defaults") {
        return;
    }
    let lab = Lab::create("kpair").unwrap();
    let pair = lab.add_kernel_pair(1500).unwrap();
    // The first pair's peer end has its offloads off, the second pair's the defaults.
    let first = peer_offloads(&lab, &lab.peer_if);
    let second = peer_offloads(&lab, &pair.peer_if);
    assert!(!on(&first, Offload::Tso) && on(&second, Offload::Tso), "px0 {first:?}, pk0 {second:?}");
    assert!(on(&lab.in_bypass(|| netdev::offloads(&pair.bypass_if)).unwrap(), Offload::Gso));

    // Kernel TCP across it, peer -> bypass side, with a transfer large enough for super-packets.
    let listener = lab.in_bypass(|| TcpListener::bind((pair.bypass_ip, 5001))).unwrap();
    let stream = lab.in_peer(|| TcpStream::connect((pair.bypass_ip, 5001))).unwrap();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4093) as u8).collect();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut stream = stream;
            stream.write_all(&data).unwrap();
        });
        let (mut conn, from) = listener.accept().unwrap();
        assert_eq!(from.ip(), std::net::IpAddr::V4(pair.peer_ip));
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert!(got == data, "{} of {} bytes, first difference somewhere", got.len(), data.len());
    });
}

/// The lab on a machine without `ethtool` or `ping`: a child process of this test binary runs
/// [`a_lab_needs_only_ip`] again with `PATH` holding only `ip`.
#[test]
fn a_lab_needs_only_ip() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: nothing but `ip` can be found.
        for program in ["ethtool", "ping", "tshark", "tcpdump"] {
            let err = Command::new(program).arg("--version").output().unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "`{program}` is out of reach");
        }
        assert!(lab_available("a_lab_needs_only_ip (child)"));
        let lab = Lab::create("onlyip").expect("a lab with only `ip` on PATH");
        let offloads = peer_offloads(&lab, &lab.peer_if);
        for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
            assert!(!on(&offloads, o), "{} is off on the peer: {offloads:?}", o.name());
        }
        lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(2))).expect("ping from code");
        let pair = lab.add_kernel_pair(1500).expect("the default-offloads pair");
        lab.in_peer(|| ping(pair.bypass_ip, Duration::from_secs(2))).expect("ping across the kernel pair");
        return;
    }
    if !lab_available("a_lab_needs_only_ip") {
        return;
    }
    let ip = which("ip").expect("`ip` is on PATH");
    let dir = std::env::temp_dir().join(format!("bypass-only-ip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&ip, dir.join("ip")).unwrap();
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args(["--exact", "a_lab_needs_only_ip", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env("PATH", &dir)
        .output()
        .expect("run the child");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child (PATH={}) failed:\n{stdout}\n{}",
        Path::new(&dir).display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
