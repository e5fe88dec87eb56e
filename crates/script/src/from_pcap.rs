//! A capture's TCP conversation turned into a script, our stack playing one side.
//!
//! The side we play is `>`, the other `<`; times are relative to the previous line as
//! recorded; sequence numbers relative to each side's ISN. Application lines are inferred:
//! `listen`/`accept` (server) or `connect` (client), a `write` before each segment of new
//! data from our side, a `read` of what arrived in order after each segment of the other
//! side, `close` before our side's first FIN and `abort` before a reset of ours (a server
//! that only answered with a reset gets no `listen`: the port was closed).
//!
//! Our stack is not the recorded one, so the script is configured to make the comparison
//! fair where it can: timestamps off and the MSS lowered by the 12 bytes the recorded side
//! spent on them (so data segments are cut where the recording cut them), our SYN's options
//! and our windows unchecked (`<...>`, no `win`: our window scale and buffers differ).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;

use bypass_tcp::{Flags, Segment};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use crate::matcher::flags_text;

/// Which side of the conversation our stack plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The side that received the first SYN.
    Server,
    /// The side that sent it.
    Client,
}

/// Why a capture could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("read the capture {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a pcap or pcapng file, a damaged one, or one of a link type we do not read.
    #[error("{0}")]
    Capture(#[from] bypass_device::ReadCaptureError),
    /// There is no such conversation.
    #[error("the capture has {found} TCP conversation(s) opened with a SYN; conversation {wanted} does not exist")]
    NoConversation {
        /// The number asked for (from 1).
        wanted: usize,
        /// How many there are.
        found: usize,
    },
}

/// One TCP segment of the capture.
#[derive(Clone, Debug)]
struct Packet {
    at: Duration,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    flags: Flags,
    seq: u32,
    ack: u32,
    window: u16,
    len: u32,
    options: bypass_tcp::TcpOptions,
}

fn packets(name: &str, bytes: &[u8]) -> Result<Vec<Packet>, Error> {
    // pcap or pcapng, Ethernet, Linux cooked or raw IP: every frame comes back as Ethernet.
    let file = bypass_device::parse_capture(name, bytes)?;
    let mut out = Vec::new();
    for packet in &file.frames {
        let Ok(sliced) = SlicedPacket::from_ethernet(&packet.data) else { continue };
        let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (&sliced.net, &sliced.transport) else {
            continue;
        };
        let Ok(seg) = Segment::parse_unchecked(tcp.slice()) else { continue };
        let (s, d) = (ip.header().source_addr(), ip.header().destination_addr());
        out.push(Packet {
            at: packet.timestamp,
            src: SocketAddrV4::new(s, seg.src_port),
            dst: SocketAddrV4::new(d, seg.dst_port),
            flags: seg.flags,
            seq: seg.seq.0,
            ack: seg.ack.0,
            window: seg.window,
            len: seg.payload.len() as u32,
            options: seg.options,
        });
    }
    Ok(out)
}

/// Read the pcap file at `path` and convert conversation `conversation` (see
/// [`script_from_pcap`]).
pub fn script_from_pcap_file(path: &Path, conversation: usize, side: Side) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    script_from_pcap(&bytes, &name, conversation, side)
}

fn seconds(d: Duration) -> String {
    format!("+{}.{:06}", d.as_secs(), d.subsec_micros())
}

/// Convert TCP conversation `conversation` (numbered from 1 in the order of their first
/// SYN, as `bypass inspect` numbers them) of the classic pcap `bytes` (Ethernet or raw IPv4)
/// into a script in which our stack plays `side`. `name` goes into the header comment.
pub fn script_from_pcap(bytes: &[u8], name: &str, conversation: usize, side: Side) -> Result<String, Error> {
    let all = packets(name, bytes)?;
    // Conversations by first SYN: (client, server).
    let mut conversations: Vec<(SocketAddrV4, SocketAddrV4)> = Vec::new();
    for p in &all {
        if p.flags.syn() && !p.flags.ack() && !conversations.contains(&(p.src, p.dst)) {
            conversations.push((p.src, p.dst));
        }
    }
    let found = conversations.len();
    let &(client, server) =
        conversations.get(conversation.wrapping_sub(1)).ok_or(Error::NoConversation { wanted: conversation, found })?;
    let (us, them) = match side {
        Side::Server => (server, client),
        Side::Client => (client, server),
    };
    let convo: Vec<&Packet> = all
        .iter()
        .filter(|p| (p.src, p.dst) == (client, server) || (p.src, p.dst) == (server, client))
        .skip_while(|p| !p.flags.syn() || p.flags.ack())
        .collect();
    let isn_of = |from: SocketAddrV4| convo.iter().find(|p| p.src == from && p.flags.syn()).map(|p| p.seq);
    let our_isn = isn_of(us).unwrap_or(0);
    let their_isn = isn_of(them).unwrap_or(0);
    let timestamps = convo.iter().any(|p| p.flags.syn() && p.options.timestamps.is_some());
    let our_mss = convo.iter().find(|p| p.src == us && p.flags.syn()).and_then(|p| p.options.mss);

    let mut s = String::new();
    let role = if side == Side::Server { "server" } else { "client" };
    let _ = writeln!(s, "// Converted from {name}, TCP conversation {conversation} ({client} -> {server}),");
    let _ = writeln!(s, "// our stack as the {role}: its segments are `>`, the recorded peer's `<`.");
    let mut config = vec![format!("local_port={}", us.port()), format!("remote_port={}", them.port())];
    if timestamps {
        config.push("timestamps=off".into());
        if let Some(mss) = our_mss {
            config.push(format!("mss={}", mss.saturating_sub(12)));
        }
    }
    let _ = writeln!(s, "// @config {}", config.join(" "));

    let start = convo.first().map_or(Duration::ZERO, |p| p.at);
    let mut last = start;
    let mut first_line = true;
    let mut line = |s: &mut String, at: Duration, text: &str| {
        let time = if first_line { "0".to_string() } else { seconds(at.saturating_sub(last)) };
        first_line = false;
        last = last.max(at);
        let _ = writeln!(s, "{time:<10} {text}");
    };
    // A server that never answered with a SYN-ACK had no listener (a reset to a closed port).
    let we_synchronize = convo.iter().any(|p| p.src == us && p.flags.syn());
    match side {
        Side::Server if we_synchronize => line(&mut s, start, &format!("listen {}", us.port())),
        Side::Server => {}
        Side::Client => line(&mut s, start, &format!("connect {}", them.port())),
    }
    let mut our_highest = our_isn.wrapping_add(1);
    let mut accepted = side == Side::Client;
    let mut closed = false;
    // What the other side sent, for reads: ranges by start (relative), and what was read.
    let mut received: BTreeMap<u32, u32> = BTreeMap::new();
    let mut read_to: u32 = 1;
    for p in &convo {
        let ours = p.src == us;
        let (seq_base, ack_base) = if ours { (our_isn, their_isn) } else { (their_isn, our_isn) };
        let seq = p.seq.wrapping_sub(seq_base);
        let ack = p.ack.wrapping_sub(ack_base);
        if ours {
            let end = p.seq.wrapping_add(p.len);
            if p.len > 0 && (end.wrapping_sub(our_highest) as i32) > 0 {
                let new = end.wrapping_sub(our_highest).min(p.len);
                line(&mut s, p.at, &format!("write {new}"));
                our_highest = end;
            }
            if p.flags.fin() && !closed {
                line(&mut s, p.at, "close");
                closed = true;
            }
            if p.flags.rst() && !closed && we_synchronize {
                line(&mut s, p.at, "abort");
                closed = true;
            }
        }
        let mut text = format!(
            "{} {} {seq}:{}({})",
            if ours { '>' } else { '<' },
            flags_text(p.flags),
            seq.wrapping_add(p.len),
            p.len
        );
        if p.flags.ack() {
            let _ = write!(text, " ack {ack}");
        }
        if !ours {
            let _ = write!(text, " win {}", p.window);
        }
        if ours && p.flags.syn() {
            text.push_str(" <...>");
        } else if ours {
            // Options of ours that stay once timestamps are off: SACK blocks.
            let blocks: Vec<String> = p
                .options
                .sack_blocks
                .as_slice()
                .iter()
                .map(|b| format!("{}:{}", b.left.0.wrapping_sub(their_isn), b.right.0.wrapping_sub(their_isn)))
                .collect();
            if !blocks.is_empty() {
                let _ = write!(text, " <sack {}>", blocks.join(" "));
            }
        } else {
            let mut opts: Vec<String> = Vec::new();
            let o = &p.options;
            if let Some(m) = o.mss {
                opts.push(format!("mss {m}"));
            }
            if o.sack_permitted {
                opts.push("sackOK".into());
            }
            if let Some(ts) = o.timestamps.filter(|_| p.flags.syn()) {
                opts.push(format!("TS val {} ecr {}", ts.tsval, ts.tsecr));
            }
            if let Some(w) = o.window_scale {
                opts.push("nop".into());
                opts.push(format!("wscale {w}"));
            }
            let blocks: Vec<String> = o
                .sack_blocks
                .as_slice()
                .iter()
                .map(|b| format!("{}:{}", b.left.0.wrapping_sub(our_isn), b.right.0.wrapping_sub(our_isn)))
                .collect();
            if !blocks.is_empty() {
                opts.push(format!("sack {}", blocks.join(" ")));
            }
            if !opts.is_empty() {
                let _ = write!(text, " <{}>", opts.join(","));
            }
        }
        line(&mut s, p.at, &text);
        if !ours {
            if !accepted && p.flags.ack() && !p.flags.syn() {
                line(&mut s, p.at, "accept");
                accepted = true;
            }
            if p.len > 0 {
                let e = received.entry(seq).or_insert(0);
                *e = (*e).max(seq.wrapping_add(p.len));
                let mut to = read_to;
                for (&start, &end) in &received {
                    if start <= to && end > to {
                        to = end;
                    }
                }
                if to > read_to && !closed {
                    line(&mut s, p.at, &format!("read {}", to - read_to));
                    read_to = to;
                }
            }
        }
    }
    Ok(s)
}
