//! Draw the ladders as one SVG picture: conversations stacked top to bottom, each with two
//! timelines (client left, server right), slanted arrows labelled like the terminal ladder,
//! both sides' states where they change, flagged events in red.
//!
//! Rows are evenly spaced (time is written at the left, not drawn to scale), so that bursts
//! stay readable. Drawn with the SVG primitives of `bypass_bench::svg`, as the demo's charts
//! are: the text is escaped, so any comment or address makes well-formed XML.

use bypass_bench::svg::{circle, close_group, document, line, open_group, polygon, rect, text};
use bypass_tcp::State;

use super::Report;
use super::conversation::{CLIENT, Conversation, SERVER};
use super::ladder::{format_ms, notes, summary_parts, wrap};

const WIDTH: f64 = 1000.0;
/// The client's timeline.
const X_CLIENT: f64 = 250.0;
/// The server's timeline.
const X_SERVER: f64 = 790.0;
/// How far an arrow drops while it crosses.
const SLANT: f64 = 16.0;
/// Vertical space per segment, before event and comment lines.
const ROW: f64 = 34.0;
/// Vertical space per extra text line.
const LINE: f64 = 15.0;
const MARGIN: f64 = 16.0;

const FONT: &str = "DejaVu Sans Mono, Menlo, Consolas, monospace";
const CLIENT_COLOUR: &str = "#1f5fbf";
const SERVER_COLOUR: &str = "#a55000";
const PROBLEM_COLOUR: &str = "#d01010";
const MUTED: &str = "#707070";

fn state_colour(state: State) -> &'static str {
    match state {
        State::Established => "#1a7f37",
        State::Closed => MUTED,
        _ => "#5a3fa0",
    }
}

/// Return the whole picture.
pub fn render(report: &Report, comments: bool) -> String {
    let mut body = String::new();
    let mut y = MARGIN;
    let title = format!("bypass inspect {}", report.name);
    text(MARGIN, y + 14.0, "start").bold().size(16.0).write(&mut body, &title);
    y += 34.0;
    if report.conversations.is_empty() {
        text(MARGIN, y + 12.0, "start").write(&mut body, "no TCP conversations in this capture");
        y += 24.0;
    }
    for (i, c) in report.conversations.iter().enumerate() {
        y = draw_conversation(&mut body, y, i + 1, c, comments) + 24.0;
    }
    for line in wrap("", &report.footer_parts(), 2) {
        text(MARGIN, y + 12.0, "start").fill(MUTED).write(&mut body, &line);
        y += LINE;
    }
    document(WIDTH, y + MARGIN, FONT, &title, &body)
}

/// Draw conversation `number` from `y` down; return the `y` below it.
fn draw_conversation(svg: &mut String, mut y: f64, number: usize, c: &Conversation, comments: bool) -> f64 {
    open_group(svg);
    let title = format!("TCP conversation {number}: {} <-> {}", c.client, c.server);
    text(MARGIN, y + 14.0, "start").bold().size(14.0).write(svg, &title);
    y += 22.0;
    for note in notes(c) {
        text(MARGIN, y + 12.0, "start").fill(MUTED).write(svg, &format!("({note})"));
        y += LINE;
    }
    y += 6.0;
    // Endpoint boxes.
    for (x, role, addr) in [(X_CLIENT, "client", c.client), (X_SERVER, "server", c.server)] {
        let label = addr.to_string();
        let w = (label.len() as f64 * 7.3 + 20.0).max(120.0);
        rect(x - w / 2.0, y, w, 36.0, "#f2f4f8").rounded(5.0).stroke("#8090a8").write(svg);
        text(x, y + 15.0, "middle").bold().write(svg, role);
        text(x, y + 29.0, "middle").size(11.0).write(svg, &label);
    }
    y += 36.0;
    let top = y;
    y += 18.0;
    text(MARGIN, y - 4.0, "start").fill(MUTED).size(11.0).write(svg, "time");
    state_label(svg, CLIENT, y - 4.0, c.initial[CLIENT]);
    state_label(svg, SERVER, y - 4.0, c.initial[SERVER]);
    y += 12.0;

    let mut arrows = String::new();
    for row in &c.rows {
        let (x0, x1) = if row.from_client { (X_CLIENT, X_SERVER) } else { (X_SERVER, X_CLIENT) };
        let (y0, y1) = (y, y + SLANT);
        let problem = row.events.iter().any(|e| e.is_problem());
        let colour = match (problem, row.from_client) {
            (true, _) => PROBLEM_COLOUR,
            (false, true) => CLIENT_COLOUR,
            (false, false) => SERVER_COLOUR,
        };
        text(MARGIN, y0 + 4.0, "start").size(11.0).fill(MUTED).write(svg, &format_ms(row.time_ns));
        arrow(&mut arrows, x0, y0, x1, y1, colour);
        // The label sits on the arrow, turned to its slant, nearer the sender.
        let (mx, my) = (x0 + (x1 - x0) * 0.5, y0 + SLANT * 0.5);
        let angle = (SLANT / (x1 - x0)).atan().to_degrees();
        text(mx, my - 5.0, "middle").size(11.5).fill(colour).turned(angle, (mx, my)).write(&mut arrows, &row.label());
        // A state changes where the segment leaves its sender or reaches its receiver.
        for side in [CLIENT, SERVER] {
            if let Some(state) = row.states[side] {
                let sends = (side == CLIENT) == row.from_client;
                state_label(svg, side, if sends { y0 + 4.0 } else { y1 + 4.0 }, state);
            }
        }
        y += ROW;
        if !row.events.is_empty() {
            let events = row.events.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
            let events = format!("{events} (frame {})", row.frame);
            let fill = if problem { PROBLEM_COLOUR } else { MUTED };
            let t = text((X_CLIENT + X_SERVER) / 2.0, y - 6.0, "middle").size(11.0).fill(fill);
            if problem { t.bold() } else { t }.write(svg, &events);
            y += LINE;
        }
        if comments && let Some(comment) = &row.comment {
            text((X_CLIENT + X_SERVER) / 2.0, y - 6.0, "middle")
                .size(10.0)
                .fill(MUTED)
                .write(svg, &format!("# {comment}"));
            y += LINE;
        }
    }
    let bottom = y;
    for x in [X_CLIENT, X_SERVER] {
        line(svg, (x, top), (x, bottom), "#404040", 2.0);
    }
    svg.push_str(&arrows);
    y += 8.0;
    if let Some(problem) = c.handshake.problem() {
        text(MARGIN, y + 12.0, "start").bold().fill(PROBLEM_COLOUR).write(svg, &format!("!! {problem}"));
        y += LINE + 2.0;
    }
    for line in wrap("summary: ", &summary_parts(c), 9) {
        text(MARGIN, y + 12.0, "start").write(svg, &line);
        y += LINE;
    }
    close_group(svg);
    y
}

fn state_label(svg: &mut String, side: usize, y: f64, state: State) {
    let (x, anchor) = if side == CLIENT { (X_CLIENT - 10.0, "end") } else { (X_SERVER + 10.0, "start") };
    text(x, y, anchor).bold().fill(state_colour(state)).write(svg, state.name());
    let dot_x = if side == CLIENT { X_CLIENT } else { X_SERVER };
    circle(svg, (dot_x, y - 4.0), 3.0, state_colour(state));
}

/// Draw a line from `(x0, y0)` to `(x1, y1)` with a filled head at the end.
fn arrow(svg: &mut String, x0: f64, y0: f64, x1: f64, y1: f64, colour: &str) {
    let (dx, dy) = (x1 - x0, y1 - y0);
    let len = (dx * dx + dy * dy).sqrt().max(1.0);
    let (ux, uy) = (dx / len, dy / len);
    let (bx, by) = (x1 - ux * 10.0, y1 - uy * 10.0);
    let (nx, ny) = (-uy * 4.5, ux * 4.5);
    line(svg, (x0, y0), (bx, by), colour, 1.6);
    polygon(svg, [(x1, y1), (bx + nx, by + ny), (bx - nx, by - ny)], colour);
}
