//! Record a conversation of our own stack, then replay it in each role: our stack must give
//! the same replies (record -> replay -> same replies). Captures of Linux peers under pcap/
//! are replayed by the workspace tests (tests/replay_captures.rs).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use bypass_device::{Instant, LinkConfig, MemoryDevice, MemoryLink, PcapNgCapture, read_capture};
use bypass_lab::replay::{Role, replay};
use bypass_stack::{Stack, StackConfig};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 5, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 5, 0, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 5, 0, 0, 0, 0, 0, 1);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 5, 0, 0, 0, 0, 0, 2);

/// Record an echo conversation (client sends three messages, server echoes, client closes
/// first) seen from the server's device.
fn record(path: &Path, server_closes_first: bool) {
    record_between(path, server_closes_first, CLIENT.into(), SERVER.into());
}

/// [`record`] between the addresses `client` and `server` (of one family).
fn record_between(path: &Path, server_closes_first: bool, client_ip: IpAddr, server_ip: IpAddr) {
    let (dc, ds) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 3);
    let prefix = if server_ip.is_ipv4() { 24 } else { 64 };
    let mut c = Stack::new(dc, StackConfig::new(client_ip, prefix, [1; 16]));
    let mut s = Stack::new(ds, StackConfig::new(server_ip, prefix, [2; 16]));
    let mut now = Instant::ZERO;
    c.set_time(now);
    s.set_time(now);
    s.set_capture(Box::new(PcapNgCapture::create(path, "mem0", "test", UNIX_EPOCH).unwrap()));
    let listener = s.listen(7).unwrap();
    let client = c.connect(SocketAddr::new(server_ip, 7)).unwrap();
    let mut server = None;
    let step = |c: &mut Stack<MemoryDevice>, s: &mut Stack<MemoryDevice>, now: &mut Instant| {
        c.poll().unwrap();
        s.poll().unwrap();
        *now += Duration::from_millis(1);
        c.device().clock().advance_to(*now);
        c.set_time(*now);
        s.set_time(*now);
    };
    let messages: [&[u8]; 3] = [b"hello", &[7u8; 3000], b"bye"];
    let mut sent = 0;
    let mut buf = [0u8; 8192];
    for tick in 0..400 {
        step(&mut c, &mut s, &mut now);
        server = server.or_else(|| s.accept(listener));
        if tick % 20 == 10 && sent < messages.len() {
            c.write(client, messages[sent]).unwrap();
            sent += 1;
        }
        if let Some(id) = server {
            while let Ok(n @ 1..) = s.read(id, &mut buf) {
                s.write(id, &buf[..n]).unwrap();
            }
        }
        while let Ok(1..) = c.read(client, &mut buf) {}
        if tick == 100 {
            if server_closes_first {
                s.shutdown(server.unwrap());
            } else {
                c.shutdown(client);
            }
        }
        if tick == 150 {
            if server_closes_first {
                c.shutdown(client);
            } else {
                s.shutdown(server.unwrap());
            }
        }
    }
}

#[test]
fn our_recording_replays_to_the_same_replies_in_both_roles() {
    for server_first in [false, true] {
        let path = std::env::temp_dir().join(format!("bypass-replay-{}-{server_first}.pcapng", std::process::id()));
        record(&path, server_first);
        let file = read_capture(&path).unwrap();
        assert!(file.frames.len() > 10, "{} frames recorded", file.frames.len());
        for role in [Role::Server, Role::Client] {
            let report = replay(&file, role, None).unwrap();
            assert!(
                report.matched(),
                "{role:?}, server closes first: {server_first}:\n{:?}\n{}",
                report.mismatches,
                report.side_by_side()
            );
            assert!(report.actual.iter().any(|r| r.flags.fin()));
        }
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn an_ipv6_recording_replays_to_the_same_replies_in_both_roles() {
    let path = std::env::temp_dir().join(format!("bypass-replay-v6-{}.pcapng", std::process::id()));
    record_between(&path, false, CLIENT6.into(), SERVER6.into());
    let file = read_capture(&path).unwrap();
    for role in [Role::Server, Role::Client] {
        let report = replay(&file, role, None).unwrap();
        assert!(report.endpoints.0.is_ipv6(), "{:?}", report.endpoints);
        assert!(report.matched(), "{role:?}:\n{:?}\n{}", report.mismatches, report.side_by_side());
        assert!(report.actual.iter().any(|r| r.flags.fin()));
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_different_conversation_shows_a_readable_diff() {
    let path = std::env::temp_dir().join(format!("bypass-replay-diff-{}.pcapng", std::process::id()));
    record(&path, false);
    let mut file = read_capture(&path).unwrap();
    // Lose one of the client's data segments from the recording: our server can only
    // acknowledge up to the hole, where the recorded server acknowledged everything.
    let lost = file
        .frames
        .iter()
        .position(|f| f.data.len() > 1000 && f.data[26..30] == CLIENT.octets())
        .expect("a full-sized client segment");
    file.frames.remove(lost);
    let report = replay(&file, Role::Server, None).unwrap();
    assert!(!report.matched());
    assert!(report.mismatches.iter().any(|m| m.contains("acknowledgment")), "{:?}", report.mismatches);
    let diff = report.side_by_side();
    assert!(diff.contains("recorded") && diff.contains("ours") && diff.contains('*'), "{diff}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn captures_without_a_conversation_are_a_clear_error() {
    let file = bypass_device::CaptureFile::default();
    let err = replay(&file, Role::Server, None).unwrap_err().to_string();
    assert!(err.contains("no TCP conversation"), "{err}");
}

#[test]
fn any_capture_plays_into_the_stack_without_panicking() {
    use bypass_device::CapturedFrame;
    // Garbage, truncated, IPv6, VLAN-tagged and broadcast frames, plus a real recording.
    let path = std::env::temp_dir().join(format!("bypass-replay-any-{}.pcapng", std::process::id()));
    record(&path, false);
    let mut file = read_capture(&path).unwrap();
    let mut seed = 0x1234_5678u64;
    let mut junk = Vec::new();
    for len in [0usize, 1, 13, 14, 20, 34, 54, 60, 200, 1514] {
        let mut f = vec![0u8; len];
        for b in &mut f {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            *b = (seed >> 33) as u8;
        }
        junk.push(f);
    }
    let mut ipv6 = vec![0xffu8; 6];
    ipv6.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x86, 0xdd, 0x60]);
    ipv6.resize(80, 0);
    let mut vlan = vec![0xffu8; 6];
    vlan.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x81, 0x00, 0, 5, 0x08, 0x00]);
    vlan.resize(80, 0);
    junk.push(ipv6);
    junk.push(vlan);
    for (i, data) in junk.into_iter().enumerate() {
        file.frames.insert(i * 2, CapturedFrame { timestamp: Duration::ZERO, data, direction: None, comment: None });
    }
    let counters = bypass_lab::replay::play_into_stack(&file, SERVER.into(), &[7]).unwrap();
    assert!(counters.total_drops() >= 3, "{counters}");
    assert!(counters.rx_frames as usize >= file.frames.len() - 1);
    let _ = std::fs::remove_file(&path);
}
