//! Recordings open cleanly in Wireshark's engine: tshark, with checksum validation on, finds
//! the handshake complete, every checksum valid, no `tcp.analysis` warnings in a clean run,
//! and a comment on every packet. These are the commands docs/captures.md tells users to run.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use bypass_device::{MemoryLink, PcapNgCapture};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::Instant;
use bypass_tcp::sim::LinkConfig;

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 6, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 6, 0, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 6, 0, 0, 0, 0, 0, 1);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 6, 0, 0, 0, 0, 0, 2);

/// An echo conversation between two of our stacks at `client` and `server`, recorded on the
/// server.
fn record(path: &Path, client_ip: IpAddr, server_ip: IpAddr) {
    let (dc, ds) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 9);
    let prefix = if server_ip.is_ipv4() { 24 } else { 64 };
    let mut c = Stack::new(dc, StackConfig::new(client_ip, prefix, [3; 16]));
    let mut s = Stack::new(ds, StackConfig::new(server_ip, prefix, [4; 16]));
    let mut now = Instant::from_millis(1);
    c.set_time(now);
    s.set_time(now);
    s.set_capture(Box::new(PcapNgCapture::create(path, "mem0", "bypass test", UNIX_EPOCH).unwrap()));
    let listener = s.listen(7).unwrap();
    let client = c.connect(SocketAddr::new(server_ip, 7)).unwrap();
    let mut server = None;
    let mut buf = [0u8; 4096];
    for tick in 0..3000 {
        c.poll().unwrap();
        s.poll().unwrap();
        server = server.or_else(|| s.accept(listener));
        if tick == 5 {
            c.write(client, b"GET / HTTP/1.0\r\n\r\n").unwrap();
        }
        if tick == 20 {
            c.write(client, &[b'x'; 2000]).unwrap();
        }
        if let Some(id) = server {
            while let Ok(n @ 1..) = s.read(id, &mut buf) {
                s.write(id, &buf[..n]).unwrap();
            }
            if tick == 60 {
                s.shutdown(id);
            }
        }
        while let Ok(1..) = c.read(client, &mut buf) {}
        if tick == 80 {
            c.shutdown(client);
        }
        now += Duration::from_millis(1);
        c.device().clock().advance_to(now);
        c.set_time(now);
        s.set_time(now);
    }
}

#[test]
fn tshark_finds_a_clean_annotated_conversation() {
    check_conversation(CLIENT.into(), SERVER.into());
}

/// The same over IPv6: the Neighbour Discovery that precedes it included, with its ICMPv6
/// checksums.
#[test]
fn tshark_finds_a_clean_annotated_ipv6_conversation() {
    check_conversation(CLIENT6.into(), SERVER6.into());
}

fn check_conversation(client: IpAddr, server: IpAddr) -> Option<()> {
    if !common::tshark_available() {
        return None;
    }
    let family = if server.is_ipv4() { "v4" } else { "v6" };
    let path = std::env::temp_dir().join(format!("bypass-tshark-{family}-{}.pcapng", std::process::id()));
    record(&path, client, server);
    if server.is_ipv6() {
        let ndp = common::tshark(&path, &["-Y", "icmpv6.type == 135 || icmpv6.type == 136"]);
        assert!(ndp.lines().count() >= 2, "no Neighbour Discovery recorded:\n{ndp}");
        let bad = common::tshark(&path, &["-Y", r#"icmpv6.checksum.status == "Bad""#]);
        assert!(bad.is_empty(), "bad ICMPv6 checksums:\n{bad}");
        let tcp6 = common::tshark(&path, &["-Y", "ipv6 && tcp"]);
        assert!(tcp6.lines().count() >= 10, "{tcp6}");
    }
    let all = common::tshark(&path, &[]);
    let packets = all.lines().count();
    assert!(packets >= 10, "{all}");
    // Every checksum valid.
    let bad = common::tshark(&path, &["-Y", r#"tcp.checksum.status == "Bad" || ip.checksum.status == "Bad""#]);
    assert!(bad.is_empty(), "bad checksums:\n{bad}");
    // The handshake complete: SYN, SYN-ACK, ACK, data and FIN seen (two-pass analysis).
    let completeness =
        common::tshark(&path, &["-2", "-T", "fields", "-e", "tcp.completeness", "-Y", "tcp.flags.syn == 1"]);
    assert!(completeness.lines().all(|l| l.trim() == "31" || l.trim() == "63"), "completeness: {completeness}");
    assert!(!completeness.is_empty());
    // No analysis warnings (retransmissions, out-of-order, zero window, ...) in a clean run.
    let warnings = common::tshark(&path, &["-2", "-Y", "tcp.analysis.flags && !tcp.analysis.window_update"]);
    assert!(warnings.is_empty(), "tcp.analysis warnings:\n{warnings}");
    // Every packet carries its comment.
    let comments = common::tshark(&path, &["-T", "fields", "-e", "frame.comment"]);
    assert_eq!(comments.lines().filter(|l| !l.trim().is_empty()).count(), packets, "{comments}");
    assert!(comments.contains("LISTEN -> SYN-RECEIVED") && comments.contains("cwnd="), "{comments}");
    let _ = std::fs::remove_file(&path);
    Some(())
}
