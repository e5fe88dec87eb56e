//! The script language, text to typed lines (packetdrill's syntax, our application calls).
//!
//! One statement per line: `TIME < PACKET`, `TIME > PACKET` or `TIME CALL [= RESULT]`.
//! `//` starts a comment; comments of the form `// @name value` are directives
//! ([`Directives`]). The grammar is in the crate docs.

use std::net::SocketAddrV4;

use bypass_tcp::{Event, Flags, State};

/// A parse error: the line and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// When a line happens, in microseconds of script time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    /// `0.100`: since the start of the script.
    Absolute(u64),
    /// `+0.100`: after the previous line happened.
    Relative(u64),
    /// `0.100~0.300`: at any time in the range, since the start.
    AbsoluteRange(u64, u64),
    /// `+0.100~+0.300`: at any time in the range, after the previous line.
    RelativeRange(u64, u64),
    /// `*`: at any time.
    Any,
}

/// Which way a packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `<`: from the tester into our stack.
    Inbound,
    /// `>`: from our stack to the tester.
    Outbound,
}

/// One TCP option as written, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionSpec {
    /// `nop`
    Nop,
    /// `eol`
    Eol,
    /// `mss N`
    Mss(u16),
    /// `wscale N`
    WindowScale(u8),
    /// `sackOK`
    SackPermitted,
    /// `sack a:b c:d`: blocks in the sequence space of the side they acknowledge.
    Sack(Vec<(u32, u32)>),
    /// `TS val N ecr M`
    Timestamps {
        /// TSval.
        val: u32,
        /// TSecr.
        ecr: u32,
    },
    /// `raw K L B...`: bytes as written, for options the other forms cannot spell (a bad
    /// length, an unknown kind); only in packets the script sends.
    Raw(Vec<u8>),
}

/// A packet line: `S. 0:0(0) ack 1 win 65535 <mss 1460,...>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketSpec {
    /// `<` or `>`.
    pub direction: Direction,
    /// Ports as written (`40001>8080`), source first; `None`: the connection's own.
    pub ports: Option<(u16, u16)>,
    /// Control bits.
    pub flags: Flags,
    /// First sequence number (script space).
    pub seq: u32,
    /// Payload length.
    pub len: u32,
    /// `ack N`.
    pub ack: Option<u32>,
    /// `win N`: the window field as on the wire (unscaled); `None` outbound: not checked.
    pub window: Option<u16>,
    /// `urg N`.
    pub urgent: Option<u16>,
    /// The options; `None` is `<...>`: not checked.
    pub options: Option<Vec<OptionSpec>>,
}

/// Socket options of `setsockopt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockOpt {
    /// `nodelay [0|1]`: Nagle off (1, the default) or on (0).
    NoDelay(bool),
}

/// Return the name scripts write for `event` (`event NAME` asserts the connection's own
/// [`Event`]s).
pub fn event_name(event: Event) -> &'static str {
    match event {
        Event::Established => "established",
        Event::Readable => "readable",
        Event::Writable => "writable",
        Event::PeerClosed => "peer_closed",
        Event::Closed => "closed",
        Event::Reset => "reset",
        Event::TimedOut => "timed_out",
        Event::Unreachable => "unreachable",
    }
}

fn parse_event(word: &str) -> Option<Event> {
    Event::ALL.into_iter().find(|&e| event_name(e) == word)
}

/// An application call (see the crate docs for what each does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppOp {
    /// `listen [PORT]`
    Listen(Option<u16>),
    /// `accept`
    Accept,
    /// `connect [IP:]PORT`: the tester's address (its IP defaults to the configured one).
    Connect {
        /// The tester's address, or just its port.
        addr: Option<SocketAddrV4>,
        /// The port when only a port was given.
        port: u16,
    },
    /// `write N`
    Write(usize),
    /// `read N`
    Read(usize),
    /// `shutdown`: RFC 9293 CLOSE, our FIN; the receiving side stays open.
    Shutdown,
    /// `close`: close(2), giving up the handle.
    Close,
    /// `abort`: RST.
    Abort,
    /// `setsockopt OPT`
    SetSockOpt(SockOpt),
    /// `state NAME`: assert the TCB state.
    State(State),
    /// `event NAME`: assert the event was delivered since the last `event` line.
    Event(Event),
    /// `no_event NAME`: assert it was not.
    NoEvent(Event),
}

/// What a call is expected to return: `= 300`, `= EAGAIN`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A number (bytes, or 0 for success).
    Value(i64),
    /// An error name.
    Errno(String),
}

/// An application line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppCall {
    /// The call.
    pub op: AppOp,
    /// `= RESULT`; `None`: the call's natural success (all bytes, or 0).
    pub expect: Option<Expect>,
}

/// What a line does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// A packet in or out.
    Packet(PacketSpec),
    /// An application call.
    App(AppCall),
}

/// One statement of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number in the file.
    pub number: usize,
    /// The statement as written (comments stripped, trimmed).
    pub text: String,
    /// When.
    pub time: Time,
    /// What.
    pub kind: LineKind,
}

/// The directives of a script: comments `// @name value`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// `// @config key=value key=value`, in order (see the crate docs for the keys).
    pub config: Vec<(String, String)>,
    /// `// @expect-fail: reason`: our TCP is known to fail this script.
    pub expect_fail: Option<String>,
    /// `// @linux differs: reason`: Linux is known to behave otherwise (for the wire mode).
    pub linux_differs: Option<String>,
    /// `// @wire skip: reason`: the wire mode does not run this script (long timers).
    pub wire_skip: Option<String>,
    /// The first comment line: the RFC section the script proves.
    pub citation: Option<String>,
}

/// A parsed script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// The statements in order.
    pub lines: Vec<Line>,
    /// The directives.
    pub directives: Directives,
}

/// Parse a whole script.
pub fn parse_script(text: &str) -> Result<Script, ParseError> {
    let mut lines = Vec::new();
    let mut directives = Directives::default();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let err = |message: String| ParseError { line: number, message };
        let (code, comment) = match raw.find("//") {
            Some(at) => (&raw[..at], Some(raw[at + 2..].trim())),
            None => (raw, None),
        };
        if let Some(comment) = comment {
            if let Some(rest) = comment.strip_prefix('@') {
                parse_directive(rest, &mut directives).map_err(err)?;
            } else if directives.citation.is_none() && !comment.is_empty() && lines.is_empty() {
                directives.citation = Some(comment.to_string());
            }
        }
        let code = code.trim();
        if code.is_empty() {
            continue;
        }
        lines.push(parse_line(number, code).map_err(err)?);
    }
    Ok(Script { lines, directives })
}

fn parse_directive(rest: &str, d: &mut Directives) -> Result<(), String> {
    let (name, value) = rest.split_once([' ', ':']).unwrap_or((rest, ""));
    let value = value.trim_start_matches(':').trim();
    match name {
        "config" => {
            for pair in value.split([' ', ',']).filter(|s| !s.is_empty()) {
                let (k, v) = pair.split_once('=').ok_or_else(|| format!("@config wants key=value, got `{pair}`"))?;
                d.config.push((k.to_string(), v.to_string()));
            }
        }
        "expect-fail" => d.expect_fail = Some(value.to_string()),
        "linux" => d.linux_differs = Some(value.trim_start_matches("differs").trim_start_matches(':').trim().into()),
        "wire" => d.wire_skip = Some(value.trim_start_matches("skip").trim_start_matches(':').trim().into()),
        other => return Err(format!("unknown directive @{other} (known: @config, @expect-fail, @linux, @wire)")),
    }
    Ok(())
}

/// Parse one statement (no comment).
pub fn parse_line(number: usize, code: &str) -> Result<Line, String> {
    let (time_word, rest) = code.split_once(char::is_whitespace).ok_or("a time and a statement are needed")?;
    let time = parse_time(time_word)?;
    let rest = rest.trim();
    let kind = if let Some(p) = rest.strip_prefix('<') {
        LineKind::Packet(parse_packet(Direction::Inbound, p.trim())?)
    } else if let Some(p) = rest.strip_prefix('>') {
        LineKind::Packet(parse_packet(Direction::Outbound, p.trim())?)
    } else {
        LineKind::App(parse_app(rest)?)
    };
    Ok(Line { number, text: code.to_string(), time, kind })
}

/// Parse seconds (`0.1`, `.1`, `1`) into microseconds.
fn seconds(word: &str) -> Result<u64, String> {
    let bad = || format!("bad time `{word}` (seconds, like 0.100)");
    let (int, frac) = word.split_once('.').unwrap_or((word, ""));
    if (int.is_empty() && frac.is_empty()) || frac.len() > 6 {
        return Err(bad());
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
    let frac_us: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<6}").parse().map_err(|_| bad())? };
    Ok(int * 1_000_000 + frac_us)
}

fn parse_time(word: &str) -> Result<Time, String> {
    if word == "*" {
        return Ok(Time::Any);
    }
    if let Some((a, b)) = word.split_once('~') {
        return match (a.strip_prefix('+'), b.strip_prefix('+')) {
            (Some(a), Some(b)) => Ok(Time::RelativeRange(seconds(a)?, seconds(b)?)),
            (None, None) => Ok(Time::AbsoluteRange(seconds(a)?, seconds(b)?)),
            _ => Err(format!("time range `{word}`: both ends relative (+a~+b) or both absolute")),
        };
    }
    match word.strip_prefix('+') {
        Some(rel) => Ok(Time::Relative(seconds(rel)?)),
        None => Ok(Time::Absolute(seconds(word)?)),
    }
}

fn number<T: std::str::FromStr>(word: Option<&str>, what: &str) -> Result<T, String> {
    let word = word.ok_or_else(|| format!("{what}: a number is missing"))?;
    word.parse().map_err(|_| format!("{what}: `{word}` is not a valid number"))
}

fn parse_flags(word: &str) -> Result<Flags, String> {
    let mut flags = Flags::NONE;
    if word == "-" {
        return Ok(flags);
    }
    for c in word.chars() {
        flags |= match c {
            'S' => Flags::SYN,
            'F' => Flags::FIN,
            'R' => Flags::RST,
            'P' => Flags::PSH,
            '.' => Flags::ACK,
            'U' => Flags::URG,
            'E' => Flags::ECE,
            'W' => Flags::CWR,
            other => return Err(format!("unknown TCP flag `{other}` (flags: S . F R P U E W, or -)")),
        };
    }
    Ok(flags)
}

fn parse_packet(direction: Direction, text: &str) -> Result<PacketSpec, String> {
    let (head, options) = match text.find('<') {
        Some(at) => {
            let body = text[at + 1..].trim();
            let body = body.strip_suffix('>').ok_or("TCP options must end with `>`")?.trim();
            (&text[..at], Some(body))
        }
        None => (text, None),
    };
    let mut words = head.split_whitespace().peekable();
    let mut ports = None;
    if let Some(w) = words.peek()
        && let Some((a, b)) = w.split_once('>')
        && let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>())
    {
        ports = Some((a, b));
        words.next();
    }
    let flags = parse_flags(words.next().ok_or("TCP flags are missing")?)?;
    let range = words.next().ok_or("sequence numbers `start:end(len)` are missing")?;
    let bad_range = || format!("bad sequence range `{range}` (start:end(len))");
    let (start, tail) = range.split_once(':').ok_or_else(bad_range)?;
    let (end, len) = tail.split_once('(').ok_or_else(bad_range)?;
    let len = len.strip_suffix(')').ok_or_else(bad_range)?;
    let seq: u32 = start.parse().map_err(|_| bad_range())?;
    let end: u32 = end.parse().map_err(|_| bad_range())?;
    let len: u32 = len.parse().map_err(|_| bad_range())?;
    if end.wrapping_sub(seq) != len {
        return Err(format!("sequence range `{range}`: end - start is not the length"));
    }
    let (mut ack, mut window, mut urgent) = (None, None, None);
    while let Some(word) = words.next() {
        match word {
            "ack" => ack = Some(number(words.next(), "ack")?),
            "win" => window = Some(number(words.next(), "win")?),
            "urg" => urgent = Some(number(words.next(), "urg")?),
            other => return Err(format!("unexpected `{other}` (want ack N, win N, urg N, then <options>)")),
        }
    }
    if flags.ack() && ack.is_none() {
        return Err("an ACK (`.`) segment needs `ack N`".into());
    }
    let options = match options {
        Some("...") => None,
        Some(body) => Some(parse_options(body)?),
        None => Some(Vec::new()),
    };
    if direction == Direction::Inbound {
        if window.is_none() {
            return Err("window must be specified for inbound packets (`win N`)".into());
        }
        if options.is_none() {
            return Err("<...> for TCP options can only be used with outbound packets".into());
        }
    }
    Ok(PacketSpec { direction, ports, flags, seq, len, ack, window, urgent, options })
}

fn parse_options(body: &str) -> Result<Vec<OptionSpec>, String> {
    let mut out = Vec::new();
    for item in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut w = item.split_whitespace();
        let opt = match w.next().unwrap_or_default() {
            "nop" => OptionSpec::Nop,
            "eol" => OptionSpec::Eol,
            "mss" => OptionSpec::Mss(number(w.next(), "mss")?),
            "wscale" => OptionSpec::WindowScale(number(w.next(), "wscale")?),
            "sackOK" => OptionSpec::SackPermitted,
            "sack" => {
                let mut blocks = Vec::new();
                for b in w.by_ref() {
                    let (l, r) = b.split_once(':').ok_or_else(|| format!("bad SACK block `{b}` (left:right)"))?;
                    blocks.push((number(Some(l), "sack")?, number(Some(r), "sack")?));
                }
                if blocks.is_empty() || blocks.len() > 4 {
                    return Err("sack takes 1 to 4 blocks".into());
                }
                OptionSpec::Sack(blocks)
            }
            "TS" => {
                if w.next() != Some("val") {
                    return Err("TS wants `TS val N ecr M`".into());
                }
                let val = number(w.next(), "TS val")?;
                if w.next() != Some("ecr") {
                    return Err("TS wants `TS val N ecr M`".into());
                }
                OptionSpec::Timestamps { val, ecr: number(w.next(), "TS ecr")? }
            }
            "raw" => {
                let bytes: Vec<u8> = w.by_ref().map(|b| number(Some(b), "raw")).collect::<Result<_, _>>()?;
                if bytes.is_empty() {
                    return Err("`raw` needs the option's bytes (kind, length, ...)".into());
                }
                OptionSpec::Raw(bytes)
            }
            other => {
                return Err(format!("unknown TCP option `{other}` (nop, eol, mss, wscale, sackOK, sack, TS, raw)"));
            }
        };
        if let Some(extra) = w.next() {
            return Err(format!("unexpected `{extra}` in option `{item}`"));
        }
        out.push(opt);
    }
    Ok(out)
}

fn parse_state(word: &str) -> Option<State> {
    [
        State::Closed,
        State::Listen,
        State::SynSent,
        State::SynReceived,
        State::Established,
        State::FinWait1,
        State::FinWait2,
        State::CloseWait,
        State::Closing,
        State::LastAck,
        State::TimeWait,
    ]
    .into_iter()
    .find(|s| s.name() == word || s.name().replace('-', "_") == word)
}

fn parse_app(text: &str) -> Result<AppCall, String> {
    let (call, expect) = match text.split_once('=') {
        Some((call, result)) => {
            let result = result.trim();
            let expect = match result.parse::<i64>() {
                Ok(n) => Expect::Value(n),
                Err(_) if !result.is_empty() && result.chars().all(|c| c.is_ascii_uppercase()) => {
                    Expect::Errno(result.to_string())
                }
                Err(_) => return Err(format!("bad result `{result}` (a number or an error name like EAGAIN)")),
            };
            (call.trim(), Some(expect))
        }
        None => (text, None),
    };
    let mut w = call.split_whitespace();
    let name = w.next().unwrap_or_default();
    let op = match name {
        "listen" => AppOp::Listen(w.next().map(|p| number(Some(p), "listen")).transpose()?),
        "accept" => AppOp::Accept,
        "connect" => {
            let target = w.next().ok_or("connect wants [IP:]PORT")?;
            match target.parse::<SocketAddrV4>() {
                Ok(addr) => AppOp::Connect { addr: Some(addr), port: addr.port() },
                Err(_) => AppOp::Connect { addr: None, port: number(Some(target), "connect")? },
            }
        }
        "write" => AppOp::Write(number(w.next(), "write")?),
        "read" => AppOp::Read(number(w.next(), "read")?),
        "shutdown" => AppOp::Shutdown,
        "close" => AppOp::Close,
        "abort" => AppOp::Abort,
        "setsockopt" => match w.next() {
            Some("nodelay") => AppOp::SetSockOpt(SockOpt::NoDelay(w.next().map(|v| v != "0").unwrap_or(true))),
            other => return Err(format!("unknown socket option {other:?} (known: nodelay [0|1])")),
        },
        "state" => {
            let word = w.next().ok_or("state wants a state name, like ESTABLISHED")?;
            AppOp::State(parse_state(word).ok_or_else(|| format!("unknown state `{word}`"))?)
        }
        "event" | "no_event" => {
            let word = w.next().ok_or("event wants a name, like readable")?;
            let e = parse_event(word).ok_or_else(|| {
                format!("unknown event `{word}` (established readable writable peer_closed closed reset timed_out)")
            })?;
            if name == "event" { AppOp::Event(e) } else { AppOp::NoEvent(e) }
        }
        other => {
            return Err(format!(
                "unknown statement `{other}` (want < or > and a packet, or a call: listen accept connect write \
                 read shutdown close abort setsockopt state event no_event)"
            ));
        }
    };
    if let Some(extra) = w.next() {
        return Err(format!("unexpected `{extra}` after {name}"));
    }
    Ok(AppCall { op, expect })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(code: &str) -> PacketSpec {
        match parse_line(1, code).unwrap().kind {
            LineKind::Packet(p) => p,
            other => panic!("not a packet: {other:?}"),
        }
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("0").unwrap(), Time::Absolute(0));
        assert_eq!(parse_time("1.5").unwrap(), Time::Absolute(1_500_000));
        assert_eq!(parse_time("+.1").unwrap(), Time::Relative(100_000));
        assert_eq!(parse_time("+0.000250").unwrap(), Time::Relative(250));
        assert_eq!(parse_time("0.1~0.3").unwrap(), Time::AbsoluteRange(100_000, 300_000));
        assert_eq!(parse_time("+0.1~+0.3").unwrap(), Time::RelativeRange(100_000, 300_000));
        assert_eq!(parse_time("*").unwrap(), Time::Any);
        assert!(parse_time("+0.1~0.3").is_err());
        assert!(parse_time("x").is_err());
        assert!(parse_time("0.1234567").is_err());
    }

    #[test]
    fn syn_with_options() {
        let p = packet("0.000 < S 0:0(0) win 65535 <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7>");
        assert_eq!(p.direction, Direction::Inbound);
        assert_eq!(p.flags, Flags::SYN);
        assert_eq!((p.seq, p.len, p.ack, p.window), (0, 0, None, Some(65535)));
        assert_eq!(
            p.options.unwrap(),
            vec![
                OptionSpec::Mss(1460),
                OptionSpec::SackPermitted,
                OptionSpec::Timestamps { val: 100, ecr: 0 },
                OptionSpec::Nop,
                OptionSpec::WindowScale(7)
            ]
        );
    }

    #[test]
    fn outbound_fields() {
        let p = packet("+0 > S. 0:0(0) ack 1 <...>");
        assert_eq!(p.flags, Flags::SYN | Flags::ACK);
        assert_eq!((p.ack, p.window, p.options), (Some(1), None, None));
        let p = packet("+.1 > P. 1:2001(2000) ack 1 win 502 urg 3 <sack 5:9 10:20>");
        assert_eq!((p.seq, p.len, p.window, p.urgent), (1, 2000, Some(502), Some(3)));
        assert_eq!(p.options.unwrap(), vec![OptionSpec::Sack(vec![(5, 9), (10, 20)])]);
        let p = packet("+0 > R 5:5(0)");
        assert_eq!((p.flags, p.options), (Flags::RST, Some(vec![])));
        let p = packet("+0 < 40001>8080 F. 1:1(0) ack 1 win 100");
        assert_eq!(p.ports, Some((40001, 8080)));
        assert_eq!(packet("+0 > - 1:1(0)").flags, Flags::NONE);
        assert_eq!(packet("+0 > SEW 0:0(0) <...>").flags, Flags::SYN | Flags::ECE | Flags::CWR);
    }

    #[test]
    fn packet_errors() {
        for (code, what) in [
            ("0 < S 0:0(0) <mss 1>", "window must be specified"),
            ("0 < S 0:0(0) win 1 <...>", "<...>"),
            ("0 > . 1:1(0)", "needs `ack N`"),
            ("0 > S 0:5(0) <...>", "not the length"),
            ("0 > X 0:0(0)", "unknown TCP flag"),
            ("0 > S 0:0(0) <bogus 3>", "unknown TCP option"),
            ("0 > S 0:0(0) frob 3", "unexpected `frob`"),
            ("0 > . 1:1(0) ack 1 <sack>", "1 to 4 blocks"),
        ] {
            let e = parse_line(1, code).unwrap_err();
            assert!(e.contains(what), "{code}: {e}");
        }
    }

    #[test]
    fn app_calls() {
        let app = |code: &str| match parse_line(1, code).unwrap().kind {
            LineKind::App(a) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(app("0 listen 8080").op, AppOp::Listen(Some(8080)));
        assert_eq!(app("+0 read 500 = 300").expect, Some(Expect::Value(300)));
        assert_eq!(app("+0 read 500 = EAGAIN").expect, Some(Expect::Errno("EAGAIN".into())));
        assert_eq!(app("+0 state FIN-WAIT-1").op, AppOp::State(State::FinWait1));
        assert_eq!(app("+0 state TIME_WAIT").op, AppOp::State(State::TimeWait));
        assert_eq!(app("+0 event peer_closed").op, AppOp::Event(Event::PeerClosed));
        assert_eq!(app("+0 setsockopt nodelay").op, AppOp::SetSockOpt(SockOpt::NoDelay(true)));
        assert_eq!(
            app("0 connect 192.0.2.1:8080").op,
            AppOp::Connect { addr: Some("192.0.2.1:8080".parse().unwrap()), port: 8080 }
        );
        assert_eq!(app("0 connect 80").op, AppOp::Connect { addr: None, port: 80 });
        assert!(parse_line(1, "0 frobnicate").unwrap_err().contains("unknown statement"));
        assert!(parse_line(1, "0 state SLEEPY").unwrap_err().contains("unknown state"));
    }

    #[test]
    fn directives_and_comments() {
        let s = parse_script(
            "// RFC 9293 3.10.7.4: first check\n// @config min_rto=300ms, timestamps=off\n\
             // @expect-fail: we do it wrong\n// @linux differs: Linux sends two\n0 listen 80 // trailing\n",
        )
        .unwrap();
        assert_eq!(s.directives.citation.as_deref(), Some("RFC 9293 3.10.7.4: first check"));
        assert_eq!(s.directives.config, vec![("min_rto".into(), "300ms".into()), ("timestamps".into(), "off".into())]);
        assert_eq!(s.directives.expect_fail.as_deref(), Some("we do it wrong"));
        assert_eq!(s.directives.linux_differs.as_deref(), Some("Linux sends two"));
        assert_eq!(s.lines.len(), 1);
        assert_eq!(s.lines[0].number, 5);
        assert_eq!(s.lines[0].text, "0 listen 80");
        let e = parse_script("0 listen\n+0 < S 0:0(0)\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse_script("// @bogus x\n").is_err());
    }
}
