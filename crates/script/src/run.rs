//! The runner: a parsed script against a [`Target`], line by line (the rules are in the
//! crate docs).

use std::collections::HashMap;
use std::net::SocketAddrV4;

use bypass_tcp::Segment;

use crate::matcher::{self, Actual, Flow};
use crate::parse::{AppCall, AppOp, Direction, Expect, Line, LineKind, PacketSpec, Script, Time, event_name};
use crate::report::{Failure, Report, seconds};
use crate::settings::Settings;
use crate::target::{Call, Micros, Returned, Sent, Target};

/// Run `script` (named `path` in messages) against `target`.
pub fn run(path: &str, script: &Script, settings: &Settings, target: &mut dyn Target) -> Result<Report, Failure> {
    let mut r = Runner {
        path,
        settings,
        target,
        flows: HashMap::new(),
        our_port: settings.local_port,
        tester_port: settings.tester_port,
        last: 0,
        report: Report { path: path.to_string(), ..Report::default() },
    };
    for line in &script.lines {
        r.line(line)?;
        r.report.lines += 1;
    }
    if let Some(last) = script.lines.last() {
        r.target.settle();
        r.no_unexpected(last, "after the last line")?;
    }
    r.report.end = r.target.now();
    Ok(r.report)
}

struct Runner<'a> {
    path: &'a str,
    settings: &'a Settings,
    target: &'a mut dyn Target,
    /// Keyed by (our port, the tester's port).
    flows: HashMap<(u16, u16), Flow>,
    our_port: u16,
    tester_port: u16,
    /// When the previous line happened: the base of relative times.
    last: Micros,
    report: Report,
}

impl Runner<'_> {
    fn fail(&self, line: &Line, message: impl Into<String>) -> Failure {
        Failure::at(self.path, line.number, &line.text, message)
    }

    /// Return the window `[start, end]` in which `line` should happen.
    fn window(&self, line: &Line) -> (Micros, Micros) {
        match line.time {
            Time::Absolute(t) => (t, t),
            Time::Relative(d) => (self.last + d, self.last + d),
            Time::AbsoluteRange(a, b) => (a, b),
            Time::RelativeRange(a, b) => (self.last + a, self.last + b),
            Time::Any => (self.last, Micros::MAX),
        }
    }

    fn line(&mut self, line: &Line) -> Result<(), Failure> {
        let (start, end) = self.window(line);
        match &line.kind {
            LineKind::Packet(p) if p.direction == Direction::Outbound => self.outbound(line, p, start, end),
            kind => {
                // Inbound packets and calls happen at the start of their window.
                let at = start.max(self.target.now());
                self.target.advance(at);
                self.no_unexpected(line, "before this line")?;
                match kind {
                    LineKind::Packet(p) => self.inbound(p),
                    LineKind::App(call) => self.app(line, call)?,
                }
                self.last = at;
                Ok(())
            }
        }
    }

    /// Fail if our stack sent anything the script has not accounted for.
    fn no_unexpected(&mut self, line: &Line, when: &str) -> Result<(), Failure> {
        let Some(sent) = self.target.take_sent() else { return Ok(()) };
        let (seg, flow) = self.parse_sent(line, &sent)?;
        let actual = Actual { seq: seg.seq.0, len: seg.payload.len() as u32, seg };
        let mut f = self.fail(line, format!("unexpected outbound segment at {} ({when})", seconds(sent.at)));
        f.actual = Some(format!("{} {}", seconds(sent.at), matcher::describe(&actual, &flow)).into());
        Err(f)
    }

    fn parse_sent<'s>(&self, line: &Line, sent: &'s Sent) -> Result<(Segment<'s>, Flow), Failure> {
        let seg = Segment::parse_unchecked(&sent.tcp)
            .map_err(|e| self.fail(line, format!("our stack sent a segment that does not parse: {e}")))?;
        let flow = self.flows.get(&(seg.src_port, seg.dst_port)).cloned().unwrap_or_default();
        Ok((seg, flow))
    }

    fn inbound(&mut self, p: &PacketSpec) {
        let ports = p.ports.unwrap_or((self.tester_port, self.our_port));
        let flow = self.flows.entry((ports.1, ports.0)).or_default();
        let (us, tester) = self.target.addresses();
        let bytes = matcher::build_inbound(p, flow, ports, tester, us);
        self.target.inject(&bytes);
        self.report.inbound += 1;
    }

    /// Wait for our next segment (running timers) at most until `limit`.
    fn next_sent(&mut self, limit: Micros) -> Option<Sent> {
        loop {
            if let Some(s) = self.target.take_sent() {
                return Some(s);
            }
            match self.target.next_deadline() {
                Some(due) if due <= limit => self.target.advance(due.max(self.target.now())),
                _ => return None,
            }
        }
    }

    fn outbound(&mut self, line: &Line, p: &PacketSpec, start: Micros, end: Micros) -> Result<(), Failure> {
        let tol = self.settings.tolerance_usecs;
        let expected_text = || {
            let when = match line.time {
                Time::Any => "*".to_string(),
                _ if start == end => seconds(start),
                _ => format!("{}~{}", seconds(start), seconds(end)),
            };
            let text = line.text.split_once('>').map_or("", |(_, t)| t.trim());
            format!("{when} {text}")
        };
        let look_ahead = self.target.look_ahead();
        let limit = if end == Micros::MAX { start.saturating_add(look_ahead) } else { end.saturating_add(look_ahead) };
        let Some(first) = self.next_sent(limit) else {
            let mut f = self.fail(
                line,
                format!(
                    "expected outbound segment, none sent by {}{}",
                    seconds(self.target.now()),
                    if self.target.next_deadline().is_none() { " (no timer pending)" } else { "" }
                ),
            );
            f.expected = Some(expected_text().into());
            return Err(f);
        };
        // The first of possibly several segments that together make the expected one.
        let first_bytes = first.tcp.clone();
        let mut fragments = vec![first];
        let first_seg = Segment::parse_unchecked(&first_bytes)
            .map_err(|e| self.fail(line, format!("our stack sent a segment that does not parse: {e}")))?;
        let key = (first_seg.src_port, first_seg.dst_port);
        if first_seg.flags.syn() {
            // Our ISN: the script's numbers for our side count from its SYN's seq.
            let flow = self.flows.entry(key).or_default();
            *flow = Flow { isn: Some((p.seq, first_seg.seq.0)), ..Flow::default() };
        }
        let mut len = first_seg.payload.len() as u32;
        let mut next_seq = first_seg.seq.0.wrapping_add(len);
        let flow_now = self.flows.get(&key).cloned().unwrap_or_default();
        // packetdrill aggregates segments that continue the previous one with the same
        // control bits (FIN and PSH aside) until the script's payload is reached.
        let loose = bypass_tcp::Flags::PSH | bypass_tcp::Flags::FIN;
        let fragment_expected = |s: &Segment<'_>, next_seq: u32| {
            s.seq.0 == next_seq && s.flags.without(loose) == first_seg.flags.without(loose)
        };
        while len < p.len && !first_seg.flags.syn() && len > 0 {
            let Some(more) = self.next_sent(end.saturating_add(tol)) else { break };
            let seg = Segment::parse_unchecked(&more.tcp)
                .map_err(|e| self.fail(line, format!("our stack sent a segment that does not parse: {e}")))?;
            if !fragment_expected(&seg, next_seq) || (seg.src_port, seg.dst_port) != key {
                // Not a continuation: the comparison below reports the length; keep this one.
                let at = more.at;
                let actual = Actual { seq: seg.seq.0, len: seg.payload.len() as u32, seg };
                let mut f = self.fail(
                    line,
                    format!(
                        "bad outbound TCP payload length: expected {} actual {len} (next segment does not continue it)",
                        p.len
                    ),
                );
                f.expected = Some(expected_text().into());
                f.actual = Some(format!("{} {}", seconds(at), matcher::describe(&actual, &flow_now)).into());
                return Err(f);
            }
            len += seg.payload.len() as u32;
            next_seq = next_seq.wrapping_add(seg.payload.len() as u32);
            fragments.push(more);
        }
        let last = fragments.last().expect("at least one");
        let seg = Segment::parse_unchecked(&last.tcp)
            .map_err(|e| self.fail(line, format!("our stack sent a segment that does not parse: {e}")))?;
        let actual = Actual { seq: first_seg.seq.0, len, seg };
        let at = fragments[0].at;
        let flow = self.flows.entry(key).or_default();
        let describe_before = matcher::describe(&actual, flow);
        let result = matcher::compare(p, &actual, flow, (tol / 1000) as u32);
        let actual_text = format!("{} {}", seconds(at), describe_before);
        if let Err(message) = result {
            let mut f = self.fail(line, message);
            f.expected = Some(expected_text().into());
            f.actual = Some(actual_text.into());
            return Err(f);
        }
        if line.time != Time::Any {
            for frag in &fragments {
                if frag.at + tol < start || frag.at > end.saturating_add(tol) {
                    let mut f = self.fail(
                        line,
                        if start == end {
                            format!("timing error: expected at {} actual {}", seconds(start), seconds(frag.at))
                        } else {
                            format!(
                                "timing error: expected in {}~{} actual {}",
                                seconds(start),
                                seconds(end),
                                seconds(frag.at)
                            )
                        },
                    );
                    f.expected = Some(expected_text().into());
                    f.actual = Some(actual_text.into());
                    return Err(f);
                }
            }
        }
        self.last = fragments.last().map_or(at, |f| f.at);
        self.report.outbound += 1;
        Ok(())
    }

    fn app(&mut self, line: &Line, call: &AppCall) -> Result<(), Failure> {
        let target_call = match call.op {
            AppOp::Listen(port) => {
                let port = port.unwrap_or(self.settings.local_port);
                self.our_port = port;
                Call::Listen(port)
            }
            AppOp::Accept => Call::Accept,
            AppOp::Connect { addr, port } => {
                let (_, tester) = self.target.addresses();
                let remote = addr.unwrap_or(SocketAddrV4::new(tester, port));
                self.tester_port = remote.port();
                self.our_port = self.settings.local_port;
                Call::Connect { remote, local_port: self.settings.local_port }
            }
            AppOp::Write(n) => Call::Write(n),
            AppOp::Read(n) => Call::Read(n),
            AppOp::Shutdown => Call::Shutdown,
            AppOp::Close => Call::Close,
            AppOp::Abort => Call::Abort,
            AppOp::SetSockOpt(o) => Call::SetSockOpt(o),
            AppOp::State(_) => Call::State,
            AppOp::Event(_) | AppOp::NoEvent(_) => Call::Events,
        };
        let returned = self.target.call(&target_call);
        let natural = match call.op {
            AppOp::Write(n) | AppOp::Read(n) => n as i64,
            _ => 0,
        };
        match (&call.op, returned) {
            (AppOp::State(want), Returned::State(got)) => {
                if *want != got {
                    return Err(self.fail(line, format!("bad state: expected {want} actual {got}")));
                }
            }
            (AppOp::Event(want), Returned::Events(got)) => {
                if !got.contains(want) {
                    let got: Vec<&str> = got.iter().map(|&e| event_name(e)).collect();
                    return Err(self.fail(
                        line,
                        format!("expected event {} not delivered (delivered: {})", event_name(*want), list(&got)),
                    ));
                }
            }
            (AppOp::NoEvent(unwanted), Returned::Events(got)) => {
                if got.contains(unwanted) {
                    return Err(self.fail(line, format!("event {} was delivered", event_name(*unwanted))));
                }
            }
            (_, got) => {
                let want = call.expect.clone().unwrap_or(Expect::Value(natural));
                let ok = match (&want, &got) {
                    (Expect::Value(w), Returned::Value(g)) => w == g,
                    (Expect::Errno(w), Returned::Errno(g)) => w == g,
                    _ => false,
                };
                if !ok {
                    let show = |r: &Returned| match r {
                        Returned::Value(v) => v.to_string(),
                        Returned::Errno(e) => e.to_string(),
                        other => format!("{other:?}"),
                    };
                    let want = match want {
                        Expect::Value(v) => v.to_string(),
                        Expect::Errno(e) => e,
                    };
                    return Err(self.fail(line, format!("bad call result: expected {want} actual {}", show(&got))));
                }
            }
        }
        Ok(())
    }
}

fn list(items: &[&str]) -> String {
    if items.is_empty() { "none".into() } else { items.join(", ") }
}
