//! Draw conversations as ladder diagrams in the terminal, at most 100 columns wide (a label
//! with several SACK blocks, or a long comment, may run longer).
//!
//! ```text
//!       time  client                                                                      server
//!             CLOSED       |                                                            | LISTEN
//!    0.000ms  SYN-SENT     |-[SYN] seq=0 win=65495 mss=65495 ws=10 sackOK ts ---------->| SYN-RECEIVED
//!    0.016ms  ESTABLISHED  |< [SYN|ACK] seq=0 ack=1 win=65483 mss=65495 ws=10 sackOK ts-|
//!    0.033ms               |-[ACK] seq=1 ack=1 win=65536 ------------------------------>| ESTABLISHED
//! ```

use std::io::{self, Write};

use bypass_tcp::State;

use super::Report;
use super::conversation::{CLIENT, Conversation, Opening, Row, SERVER};

/// Width of the time column.
const TIME_W: usize = 10;
/// Width of a state column: `SYN-RECEIVED`.
const STATE_W: usize = 12;
/// Width between the two timelines.
const MID: usize = 60;
/// Width to wrap summary lines at.
const WIDTH: usize = 100;

/// How to draw.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
    /// Show packet comments under their segments.
    pub comments: bool,
}

const BOLD: &str = "1";
const DIM: &str = "2";
const RED: &str = "1;31";
const CLIENT_ARROW: &str = "36";
const SERVER_ARROW: &str = "33";

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.color && !text.is_empty() { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
    }
}

/// Return `ns` nanoseconds as milliseconds with three decimals: `12.345ms`.
pub fn format_ms(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let us = (ns.abs() + 500) / 1000;
    format!("{sign}{}.{:03}ms", us / 1000, us % 1000)
}

/// Return `n` and the noun, plural unless `n` is 1.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Join `parts` with `"; "` into lines of at most [`WIDTH`] columns, the first starting with
/// `first` and the others indented by `indent` spaces.
pub fn wrap(first: &str, parts: &[String], indent: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut fresh = true;
    for part in parts {
        let sep = if fresh { "" } else { "; " };
        if !fresh && line.len() + sep.len() + part.len() > WIDTH {
            lines.push(format!("{line};"));
            line = " ".repeat(indent);
        } else {
            line.push_str(sep);
        }
        line.push_str(part);
        fresh = false;
    }
    lines.push(line);
    lines
}

/// Return the summary of `c`, as parts to join.
pub fn summary_parts(c: &Conversation) -> Vec<String> {
    let s = &c.summary;
    let mut parts = vec![
        format!("{} in {}", count(s.packets[0] + s.packets[1], "packet", "packets"), format_ms(s.duration_ns)),
        format!(
            "client->server {}, {}",
            count(s.packets[CLIENT], "packet", "packets"),
            count(s.bytes[CLIENT], "byte", "bytes")
        ),
        format!(
            "server->client {}, {}",
            count(s.packets[SERVER], "packet", "packets"),
            count(s.bytes[SERVER], "byte", "bytes")
        ),
        format!("SYN {}, FIN {}, RST {}", s.syn, s.fin, s.rst),
    ];
    for (n, one, many) in [
        (s.retransmissions, "retransmission", "retransmissions"),
        (s.out_of_order, "out-of-order segment", "out-of-order segments"),
        (s.zero_windows, "zero window", "zero windows"),
        (s.window_probes, "window probe", "window probes"),
        (s.keepalives, "keep-alive", "keep-alives"),
    ] {
        if n > 0 {
            parts.push(count(n, one, many));
        }
    }
    parts.push(format!("ends {} / {}", c.last[CLIENT].name(), c.last[SERVER].name()));
    parts
}

/// Return notes on how to read `c`: how the capture begins, unscaled windows.
pub fn notes(c: &Conversation) -> Vec<&'static str> {
    let mut notes = Vec::new();
    match c.opening {
        Opening::Syn => {}
        Opening::SynAck => notes.push("the capture starts with the SYN|ACK: the SYN was not captured"),
        Opening::MidStream => notes.push("the capture starts after the handshake: both sides begin ESTABLISHED"),
    }
    if c.scale_unknown && c.rows.iter().any(|r| !r.flags.syn() && !r.flags.rst()) {
        notes.push("windows are shown unscaled: without both SYNs the window scale is unknown");
    }
    notes
}

/// Write every conversation of `report`, then the footer.
pub fn write_report(out: &mut dyn Write, report: &Report, style: &Style) -> io::Result<()> {
    for (i, c) in report.conversations.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        write_conversation(out, i + 1, c, style)?;
    }
    if !report.conversations.is_empty() {
        writeln!(out)?;
    }
    for line in wrap("", &report.footer_parts(), 2) {
        writeln!(out, "{}", style.paint(DIM, &line))?;
    }
    Ok(())
}

/// Write conversation number `number`.
pub fn write_conversation(out: &mut dyn Write, number: usize, c: &Conversation, style: &Style) -> io::Result<()> {
    let title = format!("TCP conversation {number}: {} <-> {}", c.client, c.server);
    writeln!(out, "{}  (client left, server right)", style.paint(BOLD, &title))?;
    for note in notes(c) {
        writeln!(out, "  {}", style.paint(DIM, &format!("({note})")))?;
    }
    writeln!(out, "{:>TIME_W$}  {:<STATE_W$} {:MID$}   server", "time", "client", "")?;
    writeln!(
        out,
        "{:TIME_W$}  {}|{:MID$}| {}",
        "",
        state_cell(style, Some(c.initial[CLIENT])),
        "",
        state_name(style, c.initial[SERVER])
    )?;
    for row in &c.rows {
        write_row(out, row, style)?;
    }
    if let Some(problem) = c.handshake.problem() {
        writeln!(out, "  {}", style.paint(RED, &format!("!! {problem}")))?;
    }
    for line in wrap("  summary: ", &summary_parts(c), 11) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn state_name(style: &Style, state: State) -> String {
    style.paint(BOLD, state.name())
}

/// Return a state padded to the column, then a space.
fn state_cell(style: &Style, state: Option<State>) -> String {
    let name = state.map_or("", State::name);
    format!("{}{} ", style.paint(BOLD, name), " ".repeat(STATE_W.saturating_sub(name.len())))
}

fn write_row(out: &mut dyn Write, row: &Row, style: &Style) -> io::Result<()> {
    let label = row.label();
    let fill = MID.saturating_sub(label.len() + 3);
    let (arrow, label_at) = if row.from_client {
        (format!("-{label} {}>", "-".repeat(fill)), 1)
    } else {
        (format!("<{} {label}-", "-".repeat(fill)), fill + 2)
    };
    let problem = row.events.iter().any(|e| e.is_problem());
    let colour = match (problem, row.from_client) {
        (true, _) => RED,
        (false, true) => CLIENT_ARROW,
        (false, false) => SERVER_ARROW,
    };
    let server = row.states[SERVER].map_or(String::new(), |s| state_name(style, s));
    let line = format!(
        "{:>TIME_W$}  {}|{}| {server}",
        format_ms(row.time_ns),
        state_cell(style, row.states[CLIENT]),
        style.paint(colour, &arrow)
    );
    writeln!(out, "{}", line.trim_end())?;
    if !row.events.is_empty() {
        let text = format!("^ {}", row.events.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", "));
        let code = if problem { RED } else { DIM };
        write_under(out, style, label_at.min(MID.saturating_sub(text.len())), &text, code, row.frame)?;
    }
    if style.comments
        && let Some(comment) = &row.comment
    {
        let text = format!("# {}", comment.replace(['\n', '\r'], " "));
        write_under(out, style, 2, &text, DIM, 0)?;
    }
    Ok(())
}

/// Write `text` between the timelines, starting `at` columns in; `frame`, where not 0, trails it.
fn write_under(out: &mut dyn Write, style: &Style, at: usize, text: &str, code: &str, frame: usize) -> io::Result<()> {
    let blank = " ".repeat(STATE_W + 1);
    let mut line = format!("{:TIME_W$}  {blank}|{}{}", "", " ".repeat(at), style.paint(code, text));
    let used = at + text.chars().count();
    if used <= MID {
        line.push_str(&" ".repeat(MID - used));
        line.push('|');
        if frame > 0 {
            line.push_str(&style.paint(DIM, &format!(" frame {frame}")));
        }
    }
    writeln!(out, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_have_three_decimals() {
        assert_eq!(format_ms(0), "0.000ms");
        assert_eq!(format_ms(27_400), "0.027ms");
        assert_eq!(format_ms(1_234_567_890), "1234.568ms");
        assert_eq!(format_ms(-1_500_000), "-1.500ms");
    }

    #[test]
    fn summaries_wrap_between_parts() {
        let parts: Vec<String> = (0..12).map(|i| format!("part number {i}")).collect();
        let lines = wrap("  summary: ", &parts, 11);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.len() <= WIDTH));
        assert!(lines[1].starts_with("           part"));
    }
}
