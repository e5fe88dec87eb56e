//! Script packets against real segments: the number spaces, building inbound segments, and
//! comparing outbound ones field by field (packetdrill's rules, see the crate docs).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bypass_tcp::{Flags, Segment};
use etherparse::TcpHeader;

use crate::parse::{OptionSpec, PacketSpec};

/// What the runner has learned about one connection (keyed by our port and the tester's):
/// how our live numbers map to the script's.
#[derive(Clone, Debug, Default)]
pub struct Flow {
    /// Our ISN: (as the script wrote it, as we sent it), from our last SYN.
    pub isn: Option<(u32, u32)>,
    /// Our first TSval: (script, live), the base of the TSval mapping.
    pub ts_base: Option<(u32, u32)>,
    /// Every script TSval of ours matched so far, and the live value it stood for.
    pub ts_map: HashMap<u32, u32>,
}

impl Flow {
    /// Map one of our sequence numbers from live to script space.
    pub fn seq_to_script(&self, live: u32) -> u32 {
        match self.isn {
            Some((script, base)) => live.wrapping_sub(base).wrapping_add(script),
            None => live,
        }
    }

    /// Map one of our sequence numbers (as the tester acknowledges it) from script to live.
    pub fn seq_to_live(&self, script: u32) -> u32 {
        match self.isn {
            Some((base_script, base)) => script.wrapping_sub(base_script).wrapping_add(base),
            None => script,
        }
    }

    /// Map a TSecr the script wrote (one of our TSvals in script space) to the live value.
    fn ecr_to_live(&self, script: u32) -> u32 {
        if let Some(&live) = self.ts_map.get(&script) {
            return live;
        }
        match self.ts_base {
            Some((s, l)) => script.wrapping_sub(s).wrapping_add(l),
            None => script,
        }
    }

    /// Map one of our TSvals from live to script space.
    fn tsval_to_script(&self, live: u32) -> u32 {
        match self.ts_base {
            Some((s, l)) => live.wrapping_sub(l).wrapping_add(s),
            None => live,
        }
    }
}

/// Build the inbound segment of `spec` (TCP header and payload, checksummed), from
/// `src_port` at `tester` to `dst_port` at `us`.
pub fn build_inbound(spec: &PacketSpec, flow: &Flow, ports: (u16, u16), tester: Ipv4Addr, us: Ipv4Addr) -> Vec<u8> {
    let mut h = TcpHeader::new(ports.0, ports.1, spec.seq, spec.window.unwrap_or(0));
    let f = spec.flags;
    h.syn = f.syn();
    h.ack = f.ack();
    h.fin = f.fin();
    h.rst = f.rst();
    h.psh = f.contains(Flags::PSH);
    h.urg = f.contains(Flags::URG);
    h.ece = f.contains(Flags::ECE);
    h.cwr = f.contains(Flags::CWR);
    h.acknowledgment_number = spec.ack.map_or(0, |a| flow.seq_to_live(a));
    h.urgent_pointer = spec.urgent.unwrap_or(0);
    let mut raw = Vec::new();
    for opt in spec.options.as_deref().unwrap_or_default() {
        match *opt {
            OptionSpec::Nop => raw.push(1),
            OptionSpec::Eol => raw.push(0),
            OptionSpec::Mss(m) => raw.extend([2, 4, (m >> 8) as u8, m as u8]),
            OptionSpec::WindowScale(s) => raw.extend([3, 3, s]),
            OptionSpec::SackPermitted => raw.extend([4, 2]),
            OptionSpec::Sack(ref blocks) => {
                raw.extend([5, 2 + 8 * blocks.len() as u8]);
                for &(l, r) in blocks {
                    raw.extend(flow.seq_to_live(l).to_be_bytes());
                    raw.extend(flow.seq_to_live(r).to_be_bytes());
                }
            }
            OptionSpec::Timestamps { val, ecr } => {
                raw.extend([8, 10]);
                raw.extend(val.to_be_bytes());
                raw.extend(flow.ecr_to_live(ecr).to_be_bytes());
            }
            OptionSpec::Raw(ref bytes) => raw.extend(bytes),
        }
    }
    raw.truncate(40);
    while !raw.len().is_multiple_of(4) {
        raw.push(0);
    }
    // At most 40 bytes, a multiple of 4, so this cannot fail (a `raw` option may be
    // malformed on purpose: that is what it is for).
    let _ = h.set_options_raw(&raw);
    let payload = vec![0u8; spec.len as usize];
    h.checksum = h.calc_checksum_ipv4_raw(tester.octets(), us.octets(), &payload).unwrap_or(0);
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// Write flags as scripts do: `S.`, `P.`, `F.`, `R`, `-` for none.
pub fn flags_text(flags: Flags) -> String {
    let mut s = String::new();
    for (flag, c) in [
        (Flags::SYN, 'S'),
        (Flags::FIN, 'F'),
        (Flags::RST, 'R'),
        (Flags::PSH, 'P'),
        (Flags::URG, 'U'),
        (Flags::ECE, 'E'),
        (Flags::CWR, 'W'),
        (Flags::ACK, '.'),
    ] {
        if flags.contains(flag) {
            s.push(c);
        }
    }
    if s.is_empty() {
        s.push('-');
    }
    s
}

/// One outbound segment (or several aggregated) as the matcher sees it.
#[derive(Clone, Debug)]
pub struct Actual<'a> {
    /// The segment (the last one's header when aggregated).
    pub seg: Segment<'a>,
    /// The first sequence number (the first one's).
    pub seq: u32,
    /// Payload bytes in all.
    pub len: u32,
}

/// Write an outbound segment in script space, as a script line would show it.
pub fn describe(actual: &Actual<'_>, flow: &Flow) -> String {
    let seg = &actual.seg;
    let seq = flow.seq_to_script(actual.seq);
    let mut s = format!("{} {}:{}({})", flags_text(seg.flags), seq, seq.wrapping_add(actual.len), actual.len);
    if seg.flags.ack() {
        s += &format!(" ack {}", seg.ack.0);
    }
    s += &format!(" win {}", seg.window);
    if seg.flags.contains(Flags::URG) {
        s += &format!(" urg {}", seg.urgent);
    }
    let o = &seg.options;
    let mut opts: Vec<String> = Vec::new();
    if let Some(m) = o.mss {
        opts.push(format!("mss {m}"));
    }
    if o.sack_permitted {
        opts.push("sackOK".into());
    }
    if let Some(ts) = o.timestamps {
        opts.push(format!("TS val {} ecr {}", flow.tsval_to_script(ts.tsval), ts.tsecr));
    }
    if let Some(w) = o.window_scale {
        opts.push(format!("wscale {w}"));
    }
    if !o.sack_blocks.is_empty() {
        let blocks: Vec<String> =
            o.sack_blocks.as_slice().iter().map(|b| format!("{}:{}", b.left.0, b.right.0)).collect();
        opts.push(format!("sack {}", blocks.join(" ")));
    }
    if !opts.is_empty() {
        s += &format!(" <{}>", opts.join(","));
    }
    s
}

/// Compare an outbound segment with the script's packet; on the first field that differs,
/// return packetdrill's kind of message (`bad outbound TCP ack: expected 1001 actual 1`).
/// Learns the TSval base on the first timestamp it sees; `ts_tolerance` is in TSval ticks.
pub fn compare(spec: &PacketSpec, actual: &Actual<'_>, flow: &mut Flow, ts_tolerance: u32) -> Result<(), String> {
    let seg = &actual.seg;
    let bad = |field: &str, e: &dyn std::fmt::Display, a: &dyn std::fmt::Display| {
        Err(format!("bad outbound TCP {field}: expected {e} actual {a}"))
    };
    if spec.flags != seg.flags {
        return bad("flags", &flags_text(spec.flags), &flags_text(seg.flags));
    }
    if let Some((src, dst)) = spec.ports
        && (src, dst) != (seg.src_port, seg.dst_port)
    {
        return bad("ports", &format!("{src}>{dst}"), &format!("{}>{}", seg.src_port, seg.dst_port));
    }
    let seq = flow.seq_to_script(actual.seq);
    if seq != spec.seq {
        return bad("seq", &spec.seq, &seq);
    }
    if actual.len != spec.len {
        return bad("payload length", &spec.len, &actual.len);
    }
    if let Some(ack) = spec.ack.filter(|_| spec.flags.ack())
        && seg.ack.0 != ack
    {
        return bad("ack", &ack, &seg.ack.0);
    }
    if let Some(w) = spec.window
        && w != seg.window
    {
        return bad("window", &w, &seg.window);
    }
    if let Some(u) = spec.urgent
        && u != seg.urgent
    {
        return bad("urgent pointer", &u, &seg.urgent);
    }
    let Some(options) = &spec.options else { return Ok(()) };
    let o = &seg.options;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    let (mut mss, mut ws, mut sack_ok, mut sack, mut ts) = (None, None, false, Vec::new(), None);
    for item in options {
        match *item {
            OptionSpec::Mss(m) => mss = Some(m),
            OptionSpec::WindowScale(w) => ws = Some(w),
            OptionSpec::SackPermitted => sack_ok = true,
            OptionSpec::Sack(ref b) => sack = b.clone(),
            OptionSpec::Timestamps { val, ecr } => ts = Some((val, ecr)),
            OptionSpec::Nop | OptionSpec::Eol => {}
            OptionSpec::Raw(_) => return Err("`raw` options can only be sent, not expected".into()),
        }
    }
    if mss != o.mss {
        return bad("option mss", &opt(mss.map(|m| m.to_string())), &opt(o.mss.map(|m| m.to_string())));
    }
    if ws != o.window_scale {
        return bad("option wscale", &opt(ws.map(|m| m.to_string())), &opt(o.window_scale.map(|m| m.to_string())));
    }
    if sack_ok != o.sack_permitted {
        return bad("option sackOK", &sack_ok, &o.sack_permitted);
    }
    let live_sack: Vec<(u32, u32)> = o.sack_blocks.as_slice().iter().map(|b| (b.left.0, b.right.0)).collect();
    if sack != live_sack {
        let show = |b: &[(u32, u32)]| {
            if b.is_empty() {
                "none".to_string()
            } else {
                b.iter().map(|(l, r)| format!("{l}:{r}")).collect::<Vec<_>>().join(" ")
            }
        };
        return bad("option sack", &show(&sack), &show(&live_sack));
    }
    match (ts, o.timestamps) {
        (None, None) => {}
        (Some(_), None) => return bad("option TS", &"present", &"none"),
        (None, Some(_)) => return bad("option TS", &"none", &"present"),
        (Some((val, ecr)), Some(live)) => {
            match flow.ts_base {
                None => flow.ts_base = Some((val, live.tsval)),
                Some(_) => {
                    let in_script = flow.tsval_to_script(live.tsval);
                    if (in_script.wrapping_sub(val) as i32).unsigned_abs() > ts_tolerance {
                        return bad("timestamp value", &val, &in_script);
                    }
                }
            }
            flow.ts_map.insert(val, live.tsval);
            if ecr != live.tsecr {
                return bad("timestamp echo reply", &ecr, &live.tsecr);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{LineKind, parse_line};
    use bypass_tcp::{SeqNum, TcpOptions, Timestamps};

    fn spec(code: &str) -> PacketSpec {
        match parse_line(1, code).unwrap().kind {
            LineKind::Packet(p) => p,
            _ => unreachable!(),
        }
    }

    fn seg(flags: Flags, seq: u32, ack: u32, window: u16) -> Segment<'static> {
        Segment { src_port: 8080, dst_port: 40000, seq: SeqNum(seq), ack: SeqNum(ack), flags, window, ..Segment::EMPTY }
    }

    fn actual(seg: Segment<'_>, len: u32) -> Actual<'_> {
        Actual { seq: seg.seq.0, seg, len }
    }

    #[test]
    fn our_numbers_are_relative_to_our_isn() {
        let flow = Flow { isn: Some((0, 1_000_000)), ..Flow::default() };
        let mut f = flow.clone();
        let s = seg(Flags::ACK, 1_000_001, 1, 100);
        assert_eq!(compare(&spec("0 > . 1:1(0) ack 1"), &actual(s, 0), &mut f, 4), Ok(()));
        assert_eq!(
            compare(&spec("0 > . 1:1(0) ack 1001"), &actual(s, 0), &mut f, 4).unwrap_err(),
            "bad outbound TCP ack: expected 1001 actual 1"
        );
        assert_eq!(
            compare(&spec("0 > . 2:2(0) ack 1"), &actual(s, 0), &mut f, 4).unwrap_err(),
            "bad outbound TCP seq: expected 2 actual 1"
        );
        assert_eq!(flow.seq_to_live(1001), 1_001_001);
        // Near the wrap.
        let flow = Flow { isn: Some((0, u32::MAX - 1)), ..Flow::default() };
        assert_eq!(flow.seq_to_script(3), 5);
        assert_eq!(flow.seq_to_live(5), 3);
    }

    #[test]
    fn fields_in_order() {
        let mut f = Flow::default();
        let s = seg(Flags::ACK | Flags::PSH, 1, 1, 502);
        let a = actual(s, 1000);
        assert_eq!(compare(&spec("0 > P. 1:1001(1000) ack 1 win 502"), &a, &mut f, 4), Ok(()));
        assert_eq!(compare(&spec("0 > P. 1:1001(1000) ack 1"), &a, &mut f, 4), Ok(()), "win unchecked when omitted");
        assert_eq!(
            compare(&spec("0 > . 1:1001(1000) ack 1"), &a, &mut f, 4).unwrap_err(),
            "bad outbound TCP flags: expected . actual P."
        );
        assert_eq!(
            compare(&spec("0 > P. 1:501(500) ack 1"), &a, &mut f, 4).unwrap_err(),
            "bad outbound TCP payload length: expected 500 actual 1000"
        );
        assert_eq!(
            compare(&spec("0 > P. 1:1001(1000) ack 1 win 100"), &a, &mut f, 4).unwrap_err(),
            "bad outbound TCP window: expected 100 actual 502"
        );
        assert!(compare(&spec("0 > P. 1:1001(1000) ack 1 <mss 1>"), &a, &mut f, 4).unwrap_err().contains("mss"));
    }

    #[test]
    fn options_and_timestamps() {
        let mut f = Flow::default();
        let mut s = seg(Flags::SYN | Flags::ACK, 7, 1, 65535);
        s.options = TcpOptions {
            mss: Some(1460),
            window_scale: Some(9),
            sack_permitted: true,
            timestamps: Some(Timestamps { tsval: 5000, tsecr: 100 }),
            ..TcpOptions::NONE
        };
        f.isn = Some((0, 7));
        let line = "0 > S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 10 ecr 100,nop,wscale 9>";
        assert_eq!(compare(&spec(line), &actual(s, 0), &mut f, 4), Ok(()));
        assert_eq!(f.ts_base, Some((10, 5000)));
        // 200 ticks later in script space is 5200 live; 5203 is within the tolerance.
        s.flags = Flags::ACK;
        s.seq = SeqNum(8);
        s.options = TcpOptions { timestamps: Some(Timestamps { tsval: 5203, tsecr: 700 }), ..TcpOptions::NONE };
        assert_eq!(compare(&spec("0 > . 1:1(0) ack 1 <nop,nop,TS val 210 ecr 700>"), &actual(s, 0), &mut f, 4), Ok(()));
        assert_eq!(
            compare(&spec("0 > . 1:1(0) ack 1 <nop,nop,TS val 300 ecr 700>"), &actual(s, 0), &mut f, 4).unwrap_err(),
            "bad outbound TCP timestamp value: expected 300 actual 213"
        );
        assert_eq!(
            compare(&spec("0 > . 1:1(0) ack 1 <nop,nop,TS val 210 ecr 600>"), &actual(s, 0), &mut f, 4).unwrap_err(),
            "bad outbound TCP timestamp echo reply: expected 600 actual 700"
        );
        assert_eq!(
            compare(&spec("0 > . 1:1(0) ack 1"), &actual(s, 0), &mut f, 4).unwrap_err(),
            "bad outbound TCP option TS: expected none actual present"
        );
        assert_eq!(compare(&spec("0 > . 1:1(0) ack 1 <...>"), &actual(s, 0), &mut f, 4), Ok(()));
        // The inbound ecr maps back to what we sent.
        assert_eq!(f.ecr_to_live(210), 5203);
        assert_eq!(f.ecr_to_live(20), 5010);
    }

    #[test]
    fn inbound_segments_are_built_as_written() {
        let flow = Flow { isn: Some((0, 1000)), ..Flow::default() };
        let p = spec("0 < P. 1:11(10) ack 1 win 300 <nop,nop,sack 5:9>");
        let us = Ipv4Addr::new(192, 168, 0, 1);
        let tester = Ipv4Addr::new(192, 168, 0, 2);
        let bytes = build_inbound(&p, &flow, (40000, 8080), tester, us);
        let s = Segment::parse(&bytes, tester.into(), us.into()).expect("valid checksum");
        assert_eq!((s.seq.0, s.ack.0, s.window, s.payload.len()), (1, 1001, 300, 10));
        assert_eq!(s.flags, Flags::PSH | Flags::ACK);
        assert_eq!(s.options.sack_blocks.as_slice()[0].left.0, 1005);
        assert_eq!(
            describe(&Actual { seq: 1001, seg: s, len: 10 }, &flow),
            "P. 1:11(10) ack 1001 win 300 <sack 1005:1009>"
        );
    }
}
