//! `bypass inspect`: ladders from captures built here (pcapng and pcap), run through the binary.
//!
//! One pcapng file holds a textbook conversation with every event the ladder marks, an IPv6
//! conversation closed by the server, a VLAN-tagged one ended by a RST, an unanswered SYN, a
//! refused SYN, and frames that are not TCP or not even Ethernet.

use std::borrow::Cow;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder, TcpHeader, TcpOptionElement, VlanId,
};
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};

// ---------------------------------------------------------------------------------------------
// Building captures
// ---------------------------------------------------------------------------------------------

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("bypass-inspect-{}-{name}", std::process::id()))
}

/// One captured frame: time, bytes, comment.
type Frame = (Duration, Vec<u8>, Option<String>);

#[derive(Clone, Copy)]
enum Net {
    Plain,
    Vlan(u16),
}

/// A TCP conversation to draw frames of: addresses, ISNs, and a clock.
struct Conv {
    client: SocketAddr,
    server: SocketAddr,
    net: Net,
    isn: [u32; 2],
    time: Duration,
}

/// Flags of a segment to build.
const SYN: u8 = 1;
const ACK: u8 = 2;
const FIN: u8 = 4;
const RST: u8 = 8;
const PSH: u8 = 16;

impl Conv {
    fn new(client: &str, server: &str, net: Net, isn: [u32; 2], start_ms: u64) -> Conv {
        Conv {
            client: client.parse().unwrap(),
            server: server.parse().unwrap(),
            net,
            isn,
            time: Duration::from_millis(start_ms),
        }
    }

    /// Build a segment `after_us` microseconds after the previous one, with sequence numbers
    /// relative to the ISNs (`ack` relative to the receiver's).
    #[allow(clippy::too_many_arguments)]
    fn seg(
        &mut self,
        after_us: u64,
        from_client: bool,
        flags: u8,
        seq: u32,
        ack: u32,
        window: u16,
        options: &[TcpOptionElement],
        payload: &[u8],
    ) -> Frame {
        self.time += Duration::from_micros(after_us);
        let (src, dst, s, r) = if from_client {
            (self.client, self.server, self.isn[0], self.isn[1])
        } else {
            (self.server, self.client, self.isn[1], self.isn[0])
        };
        let mut h = TcpHeader::new(src.port(), dst.port(), s.wrapping_add(seq), window);
        h.syn = flags & SYN != 0;
        h.fin = flags & FIN != 0;
        h.rst = flags & RST != 0;
        h.psh = flags & PSH != 0;
        if flags & ACK != 0 {
            h.ack = true;
            h.acknowledgment_number = r.wrapping_add(ack);
        }
        h.set_options(options).unwrap();
        (self.time, frame(src.ip(), dst.ip(), self.net, h, payload), None)
    }
}

fn frame(src: IpAddr, dst: IpAddr, net: Net, tcp: TcpHeader, payload: &[u8]) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let mut out = Vec::new();
    match (src, dst, net) {
        (IpAddr::V4(s), IpAddr::V4(d), Net::Plain) => {
            eth.ipv4(s.octets(), d.octets(), 64).tcp_header(tcp).write(&mut out, payload).unwrap()
        }
        (IpAddr::V4(s), IpAddr::V4(d), Net::Vlan(id)) => eth
            .single_vlan(VlanId::try_new(id).unwrap())
            .ipv4(s.octets(), d.octets(), 64)
            .tcp_header(tcp)
            .write(&mut out, payload)
            .unwrap(),
        (IpAddr::V6(s), IpAddr::V6(d), Net::Plain) => {
            eth.ipv6(s.octets(), d.octets(), 64).tcp_header(tcp).write(&mut out, payload).unwrap()
        }
        _ => unreachable!("test conversations are IPv4, VLAN IPv4 or IPv6"),
    }
    out
}

fn syn_options(ws: u8) -> Vec<TcpOptionElement> {
    use TcpOptionElement::*;
    vec![MaximumSegmentSize(1460), SelectiveAcknowledgementPermitted, Timestamp(1, 0), Noop, WindowScale(ws)]
}

fn write_pcapng(path: &Path, frames: &[Frame]) {
    let mut w = PcapNgWriter::new(File::create(path).unwrap()).unwrap();
    let idb = InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).unwrap();
    for (time, data, comment) in frames {
        let mut options = Vec::new();
        if let Some(c) = comment {
            options.push(EnhancedPacketOption::Comment(Cow::Borrowed(c.as_str())));
        }
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: *time,
            original_len: data.len() as u32,
            data: Cow::Borrowed(data),
            options,
        };
        w.write_pcapng_block(epb).unwrap();
    }
}

fn write_pcap(path: &Path, link: DataLink, frames: &[Frame]) {
    let header = PcapHeader { datalink: link, ..PcapHeader::default() };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), header).unwrap();
    for (time, data, _) in frames {
        w.write_packet(&PcapPacket::new(*time, data.len() as u32, data)).unwrap();
    }
}

/// The textbook conversation: handshake, data, a retransmission, an out-of-order segment and
/// the one that fills its gap, a zero window and a probe, and a close from the client.
fn textbook() -> Vec<Frame> {
    // The client's ISN sits just below 2^32 to check relative numbers wrap.
    let mut c = Conv::new("10.77.0.1:52828", "10.77.0.2:7", Net::Plain, [0xffff_ff80, 5000], 1000);
    let data = [b'x'; 100];
    let mut frames = vec![
        c.seg(0, true, SYN, 0, 0, 64240, &syn_options(7), &[]),
        c.seg(27, false, SYN | ACK, 0, 1, 65160, &syn_options(3), &[]),
        c.seg(13, true, ACK, 1, 1, 502, &[], &[]),
        c.seg(100, true, PSH | ACK, 1, 1, 502, &[], &data),
        c.seg(40, false, ACK, 1, 101, 8000, &[], &[]),
        c.seg(100, true, PSH | ACK, 101, 1, 502, &[], &data),
        c.seg(200_000, true, PSH | ACK, 101, 1, 502, &[], &data),
        c.seg(50, true, PSH | ACK, 301, 1, 502, &[], &data),
        c.seg(50, true, PSH | ACK, 201, 1, 502, &[], &data),
        c.seg(40, false, ACK, 1, 401, 0, &[], &[]),
        c.seg(5000, true, ACK, 401, 1, 502, &[], &data[..1]),
        c.seg(40, false, ACK, 1, 402, 100, &[], &[]),
        c.seg(100, true, FIN | ACK, 402, 1, 502, &[], &[]),
        c.seg(40, false, ACK, 1, 403, 8000, &[], &[]),
        c.seg(100, false, FIN | ACK, 1, 403, 8000, &[], &[]),
        c.seg(40, true, ACK, 403, 2, 502, &[], &[]),
    ];
    frames[0].2 = Some("out [SYN] seq=0 | SYN-SENT".into());
    frames[1].2 = Some("in <SYN|ACK> & \"quoted\"".into());
    frames
}

/// IPv6: handshake, one exchange, and the server closes first.
fn ipv6_server_closes() -> Vec<Frame> {
    let mut c = Conv::new("[2001:db8::1]:40000", "[2001:db8::2]:80", Net::Plain, [7, 900], 2000);
    vec![
        c.seg(0, true, SYN, 0, 0, 64800, &syn_options(7), &[]),
        c.seg(30, false, SYN | ACK, 0, 1, 64800, &syn_options(7), &[]),
        c.seg(30, true, ACK, 1, 1, 507, &[], &[]),
        c.seg(30, true, PSH | ACK, 1, 1, 507, &[], b"GET / HTTP/1.0\r\n\r\n"),
        c.seg(30, false, PSH | ACK, 1, 19, 507, &[], b"HTTP/1.0 200 OK\r\n\r\n"),
        c.seg(30, false, FIN | ACK, 20, 19, 507, &[], &[]),
        c.seg(30, true, ACK, 19, 21, 507, &[], &[]),
        c.seg(30, true, FIN | ACK, 19, 21, 507, &[], &[]),
        c.seg(30, false, ACK, 21, 20, 507, &[], &[]),
    ]
}

/// VLAN 10: a handshake, data, then the client aborts with a RST.
fn vlan_reset() -> Vec<Frame> {
    let mut c = Conv::new("192.168.5.1:33000", "192.168.5.2:22", Net::Vlan(10), [100, 200], 3000);
    vec![
        c.seg(0, true, SYN, 0, 0, 29200, &[TcpOptionElement::MaximumSegmentSize(1460)], &[]),
        c.seg(30, false, SYN | ACK, 0, 1, 29200, &[TcpOptionElement::MaximumSegmentSize(1460)], &[]),
        c.seg(30, true, ACK, 1, 1, 29200, &[], &[]),
        c.seg(30, true, PSH | ACK, 1, 1, 29200, &[], b"SSH-2.0-x\r\n"),
        c.seg(30, true, RST | ACK, 12, 1, 0, &[], &[]),
    ]
}

/// A SYN sent twice, never answered.
fn unanswered() -> Vec<Frame> {
    let mut c = Conv::new("10.0.0.1:41000", "10.0.0.9:443", Net::Plain, [555, 0], 4000);
    vec![
        c.seg(0, true, SYN, 0, 0, 64240, &syn_options(7), &[]),
        c.seg(1_000_000, true, SYN, 0, 0, 64240, &syn_options(7), &[]),
    ]
}

/// A SYN refused with RST|ACK.
fn refused() -> Vec<Frame> {
    let mut c = Conv::new("10.0.0.1:41001", "10.0.0.9:81", Net::Plain, [777, 0], 5000);
    vec![c.seg(0, true, SYN, 0, 0, 64240, &[], &[]), c.seg(20, false, RST | ACK, 0, 1, 0, &[], &[])]
}

/// Frames that are not TCP, or not whole.
fn garbage() -> Vec<Frame> {
    let t = Duration::from_millis(6000);
    let mut arp = Vec::new();
    let request = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &[2, 0, 0, 0, 0, 1],
        &[10, 0, 0, 1],
        &[0; 6],
        &[10, 0, 0, 2],
    )
    .unwrap();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [0xff; 6]).arp(request).write(&mut arp).unwrap();
    let mut udp = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(5353, 5353)
        .write(&mut udp, b"hello")
        .unwrap();
    // IPv4 says TCP, but only 8 bytes of the header follow.
    let mut cut = Vec::new();
    let tcp = TcpHeader::new(1, 2, 3, 4);
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp_header(tcp)
        .write(&mut cut, &[])
        .unwrap();
    cut.truncate(14 + 20 + 8);
    cut[16..18].copy_from_slice(&28u16.to_be_bytes());
    let noise: Vec<u8> = (0..61u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    vec![(t, arp, None), (t, udp, None), (t, cut, None), (t, vec![1, 2, 3, 4, 5], None), (t, noise, None)]
}

fn all_frames() -> Vec<Frame> {
    let mut frames = textbook();
    for extra in [ipv6_server_closes(), vlan_reset(), unanswered(), refused(), garbage()] {
        frames.extend(extra);
    }
    frames
}

// ---------------------------------------------------------------------------------------------
// Running and reading the ladder
// ---------------------------------------------------------------------------------------------

fn inspect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bypass")).arg("inspect").args(args).env_remove("NO_COLOR").output().unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let out = inspect(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bypass inspect {args:?} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// Return conversation `n`'s part of the output (1-based).
fn conversation(out: &str, n: usize) -> &str {
    let start = out.find(&format!("TCP conversation {n}:")).unwrap_or_else(|| panic!("no conversation {n} in\n{out}"));
    let rest = &out[start..];
    let end = rest.find("\n\n").unwrap_or(rest.len());
    &rest[..end]
}

/// Return the client's and the server's states, in the order the ladder shows them.
fn states(block: &str) -> (Vec<&str>, Vec<&str>) {
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for line in block.lines() {
        if line.as_bytes().get(25) != Some(&b'|') {
            continue;
        }
        let c = line[12..25].trim();
        if !c.is_empty() {
            client.push(c);
        }
        // The server's timeline is at column 86.
        if line.get(86..87) == Some("|") {
            let s = line[87..].trim();
            if !s.is_empty() && !s.starts_with("frame") {
                server.push(s);
            }
        }
    }
    (client, server)
}

fn pcapng_with_everything(name: &str) -> PathBuf {
    let path = temp(name);
    write_pcapng(&path, &all_frames());
    path
}

// ---------------------------------------------------------------------------------------------
// The ladder
// ---------------------------------------------------------------------------------------------

#[test]
fn textbook_conversation_shows_states_flags_and_events() {
    let path = pcapng_with_everything("textbook.pcapng");
    let out = stdout_of(&[path.to_str().unwrap()]);
    assert!(!out.contains('\x1b'), "no colour when stdout is not a terminal:\n{out}");
    let c = conversation(&out, 1);
    assert!(c.contains("10.77.0.1:52828 <-> 10.77.0.2:7"), "{c}");
    let (client, server) = states(c);
    assert_eq!(client, ["CLOSED", "SYN-SENT", "ESTABLISHED", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT"], "{c}");
    assert_eq!(server, ["LISTEN", "SYN-RECEIVED", "ESTABLISHED", "CLOSE-WAIT", "LAST-ACK", "CLOSED"], "{c}");
    // Relative numbers (across the client's 2^32 wrap), options on SYNs only, scaled windows.
    for expected in [
        "   0.000ms",
        "-[SYN] seq=0 win=64240 mss=1460 ws=7 sackOK ts -",
        "[SYN|ACK] seq=0 ack=1 win=65160 mss=1460 ws=3 sackOK ts-|",
        "-[ACK] seq=1 ack=1 win=64256 -",
        "-[PSH|ACK] seq=1 ack=1 len=100 win=64256 -",
        "[ACK] seq=1 ack=101 win=64000-|",
        "[FIN|ACK] seq=1 ack=403 win=64000-|",
        "^ retransmission",
        "^ out-of-order (100 bytes missing before it)",
        "^ out-of-order (late, fills a gap)",
        "^ zero window",
        "^ window probe",
        "^ window opens",
        "200.280ms",
    ] {
        assert!(c.contains(expected), "missing `{expected}` in\n{c}");
    }
    assert!(!c.contains("incomplete handshake"), "{c}");
    assert!(c.contains("16 packets in 205.740ms"), "{c}");
    assert!(c.contains("client->server 10 packets, 501 bytes"), "{c}");
    assert!(c.contains("server->client 6 packets, 0 bytes"), "{c}");
    assert!(c.contains("SYN 2, FIN 2, RST 0"), "{c}");
    assert!(c.contains("1 retransmission") && c.contains("2 out-of-order segments") && c.contains("1 zero window"));
    assert!(c.contains("ends TIME-WAIT / CLOSED"), "{c}");
    // Comments only on request.
    assert!(!out.contains("# out [SYN]"));
    for line in c.lines().filter(|l| l.contains("seq=")) {
        assert!(line.len() <= 100, "wider than 100 columns: {line}");
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn ipv6_vlan_reset_and_broken_handshakes() {
    let path = pcapng_with_everything("others.pcapng");
    let out = stdout_of(&[path.to_str().unwrap(), "--no-color"]);

    let v6 = conversation(&out, 2);
    assert!(v6.contains("[2001:db8::1]:40000 <-> [2001:db8::2]:80"), "{v6}");
    let (client, server) = states(v6);
    assert_eq!(client, ["CLOSED", "SYN-SENT", "ESTABLISHED", "CLOSE-WAIT", "LAST-ACK", "CLOSED"], "{v6}");
    assert_eq!(server, ["LISTEN", "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT"], "{v6}");
    assert!(v6.contains("[PSH|ACK] seq=1 ack=19 len=19 win=64896-|"), "{v6}");

    let vlan = conversation(&out, 3);
    assert!(vlan.contains("192.168.5.1:33000 <-> 192.168.5.2:22"), "{vlan}");
    let (client, server) = states(vlan);
    assert_eq!(client, ["CLOSED", "SYN-SENT", "ESTABLISHED", "CLOSED"], "{vlan}");
    assert_eq!(server, ["LISTEN", "SYN-RECEIVED", "ESTABLISHED", "CLOSED"], "{vlan}");
    assert!(vlan.contains("-[RST|ACK] seq=12 ack=1 win=0 -") && vlan.contains("^ reset"), "{vlan}");
    assert!(vlan.contains("RST 1"), "{vlan}");

    let lost = conversation(&out, 4);
    assert!(lost.contains("^ retransmission"), "{lost}");
    assert!(lost.contains("!! incomplete handshake: the SYN was never answered"), "{lost}");
    // Nothing shows the server got the SYN: it stays LISTEN.
    assert_eq!(states(lost), (vec!["CLOSED", "SYN-SENT"], vec!["LISTEN"]));

    let refused = conversation(&out, 5);
    assert!(refused.contains("!! incomplete handshake: refused"), "{refused}");
    assert!(refused.contains("<-") && refused.contains("[RST|ACK] seq=1 ack=1 win=0"), "{refused}");
    // Nothing listened: the server side was CLOSED throughout (RFC 9293 3.10.7.1).
    assert_eq!(states(refused), (vec!["CLOSED", "SYN-SENT", "CLOSED"], vec!["CLOSED"]));

    assert!(!out.contains("TCP conversation 6:"), "garbage made a conversation:\n{out}");
    let footer = out.lines().rev().take(3).collect::<Vec<_>>().join("\n");
    assert!(footer.contains("39 frames, 34 TCP segments in 5 conversations"), "{footer}");
    assert!(footer.contains("skipped 5 frames"), "{footer}");
    for reason in ["ARP", "UDP (17)", "TCP header cut off", "shorter than an Ethernet header"] {
        assert!(footer.contains(reason), "no `{reason}` in the footer: {footer}");
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn comments_are_shown_on_request() {
    let path = pcapng_with_everything("comments.pcapng");
    let out = stdout_of(&[path.to_str().unwrap(), "--comments"]);
    let c = conversation(&out, 1);
    let syn = c.lines().position(|l| l.contains("[SYN] seq=0")).unwrap();
    assert!(c.lines().nth(syn + 1).unwrap().contains("# out [SYN] seq=0 | SYN-SENT"), "{c}");
    assert!(c.contains("# in <SYN|ACK> & \"quoted\""), "{c}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pcap_files_and_simultaneous_close() {
    // Both FINs cross: each side goes FIN-WAIT-1 -> CLOSING -> TIME-WAIT.
    let mut c = Conv::new("10.1.1.1:5000", "10.1.1.2:6000", Net::Plain, [1, 2], 0);
    let frames = vec![
        c.seg(0, true, SYN, 0, 0, 1000, &[], &[]),
        c.seg(10, false, SYN | ACK, 0, 1, 1000, &[], &[]),
        c.seg(10, true, ACK, 1, 1, 1000, &[], &[]),
        c.seg(10, true, FIN | ACK, 1, 1, 1000, &[], &[]),
        c.seg(1, false, FIN | ACK, 1, 1, 1000, &[], &[]),
        c.seg(10, true, ACK, 2, 2, 1000, &[], &[]),
        c.seg(1, false, ACK, 2, 2, 1000, &[], &[]),
    ];
    let path = temp("close.pcap");
    write_pcap(&path, DataLink::ETHERNET, &frames);
    let out = stdout_of(&[path.to_str().unwrap()]);
    let (client, server) = states(conversation(&out, 1));
    assert_eq!(client, ["CLOSED", "SYN-SENT", "ESTABLISHED", "FIN-WAIT-1", "CLOSING", "TIME-WAIT"], "{out}");
    // The server's FIN does not acknowledge the client's: they crossed, so it never was in CLOSE-WAIT.
    assert_eq!(server, ["LISTEN", "SYN-RECEIVED", "ESTABLISHED", "CLOSING", "TIME-WAIT"], "{out}");
    // Without the handshake (and in a raw-IP capture): both sides start ESTABLISHED, windows unscaled.
    let raw: Vec<Frame> = frames[3..].iter().map(|(t, f, c)| (*t, f[14..].to_vec(), c.clone())).collect();
    write_pcap(&path, DataLink::RAW, &raw);
    let out = stdout_of(&[path.to_str().unwrap()]);
    assert!(out.contains("starts after the handshake") && out.contains("windows are shown unscaled"), "{out}");
    assert_eq!(states(&out).0, ["ESTABLISHED", "FIN-WAIT-1", "CLOSING", "TIME-WAIT"], "{out}");
    assert!(out.contains("-[FIN|ACK] seq=1 ack=1 win=1000 -"), "{out}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn port_reuse_starts_a_new_conversation() {
    let mut a = Conv::new("10.2.0.1:1234", "10.2.0.2:80", Net::Plain, [10, 20], 0);
    let mut frames = vec![a.seg(0, true, SYN, 0, 0, 1000, &[], &[]), a.seg(5, false, RST | ACK, 0, 1, 0, &[], &[])];
    let mut b = Conv::new("10.2.0.1:1234", "10.2.0.2:80", Net::Plain, [5000, 20], 1);
    frames.push(b.seg(0, true, SYN, 0, 0, 1000, &[], &[]));
    let path = temp("reuse.pcapng");
    write_pcapng(&path, &frames);
    let out = stdout_of(&[path.to_str().unwrap()]);
    assert!(out.contains("TCP conversation 2: 10.2.0.1:1234 <-> 10.2.0.2:80"), "{out}");
    assert!(!conversation(&out, 2).contains("retransmission"), "{out}");
    let _ = std::fs::remove_file(&path);
}

// ---------------------------------------------------------------------------------------------
// The SVG picture
// ---------------------------------------------------------------------------------------------

/// Check that `svg` is well-formed enough: tags balance, attributes are quoted, text is escaped.
fn assert_well_formed(svg: &str) {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = svg;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        assert!(!text.contains('>'), "unescaped > in text: {text}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..text[i..].find(';').map_or(text.len(), |e| i + e + 1)];
            assert!(["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity), "bad entity {entity}");
        }
        let gt = rest[lt..].find('>').expect("unclosed tag") + lt;
        let tag = &rest[lt + 1..gt];
        assert!(!tag.contains('<'), "< inside a tag: {tag}");
        assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') && !tag.starts_with('?') && !tag.starts_with('!') {
            open.push(tag.split_whitespace().next().unwrap());
        }
        rest = &rest[gt + 1..];
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
    assert!(rest.trim().is_empty());
}

#[test]
fn svg_picture_is_well_formed_and_labelled() {
    let path = pcapng_with_everything("svg.pcapng");
    let svg_path = temp("ladder.svg");
    let out = stdout_of(&[path.to_str().unwrap(), "--svg", svg_path.to_str().unwrap(), "--comments"]);
    assert!(out.contains("picture: "), "{out}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_well_formed(&svg);
    for label in [
        "10.77.0.1:52828",
        "[2001:db8::2]:80",
        "SYN-SENT",
        "SYN-RECEIVED",
        "TIME-WAIT",
        "LAST-ACK",
        "[SYN|ACK] seq=0 ack=1 win=65160 mss=1460 ws=3 sackOK ts",
        "retransmission",
        "zero window",
        "incomplete handshake",
        "# in &lt;SYN|ACK&gt; &amp; &quot;quoted&quot;",
        "skipped 5 frames",
    ] {
        assert!(svg.contains(label), "no `{label}` in the SVG");
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&svg_path);
}

// ---------------------------------------------------------------------------------------------
// Errors and hostile input
// ---------------------------------------------------------------------------------------------

#[test]
fn unreadable_captures_are_one_line_errors() {
    let path = temp("bad.pcap");
    std::fs::write(&path, b"this is not a capture, just some text\n").unwrap();
    let ppp = temp("ppp.pcap");
    write_pcap(&ppp, DataLink::PPP, &[]);
    let missing = temp("missing.pcap");
    for (file, expected) in [(&path, "not a pcap or pcapng"), (&ppp, "link type"), (&missing, "cannot read")] {
        let out = inspect(&[file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("bypass: ") && stderr.contains(expected), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&ppp);
}

#[test]
fn cut_and_corrupted_frames_never_panic() {
    // Every prefix of a few frames, and every frame with bytes flipped in its headers.
    let source = all_frames();
    let mut frames = Vec::new();
    for (t, f, _) in source.iter().take(3).chain(source.iter().skip(16).take(1)).chain(source.iter().skip(25).take(1)) {
        for len in 0..=f.len() {
            frames.push((*t, f[..len].to_vec(), None));
        }
    }
    for (i, (t, f, _)) in source.iter().enumerate() {
        for at in (12..f.len().min(80)).step_by(3) {
            let mut g = f.clone();
            g[at] ^= 0x5a ^ (i as u8);
            frames.push((*t, g, None));
        }
    }
    let path = temp("hostile.pcapng");
    write_pcapng(&path, &frames);
    let svg = temp("hostile.svg");
    let out = stdout_of(&[path.to_str().unwrap(), "--svg", svg.to_str().unwrap()]);
    assert!(out.contains("skipped"), "{out}");
    assert_well_formed(&std::fs::read_to_string(&svg).unwrap());
    // A pcap whose last record is cut off.
    write_pcap(&path, DataLink::ETHERNET, &source[..3]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 7);
    std::fs::write(&path, bytes).unwrap();
    let out = stdout_of(&[path.to_str().unwrap()]);
    assert!(out.contains("TCP conversation 1:"), "{out}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&svg);
}

#[test]
fn an_empty_capture_says_so() {
    let path = temp("empty.pcapng");
    write_pcapng(&path, &[]);
    let out = stdout_of(&[path.to_str().unwrap()]);
    assert!(out.contains("0 frames, 0 TCP segments in 0 conversations"), "{out}");
    let _ = std::fs::remove_file(&path);
}
