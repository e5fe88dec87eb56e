//! `bypass inspect`: every TCP conversation of a capture as a ladder diagram, the way textbooks
//! draw the three-way handshake and the close, in the terminal and optionally as SVG.
//!
//! - [`decode`]: one frame to the TCP facts, or a reason to skip it.
//! - [`conversation`]: group segments into conversations, infer both sides' states, mark events.
//! - [`ladder`]: the terminal drawing. [`svg`]: the picture.

mod conversation;
mod decode;
mod ladder;
mod svg;

use std::collections::{BTreeMap, HashSet};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use bypass_device::{CaptureFile, read_capture};

use conversation::{Conversation, Tracker};
use ladder::{Style, count};

/// What `bypass inspect` was asked for.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Also draw the ladders to this SVG file.
    pub svg: Option<PathBuf>,
    /// Show the packet comments (pcapng `opt_comment`) under their segments.
    pub comments: bool,
    /// Never colour the output (it is coloured only on a terminal anyway).
    pub no_color: bool,
}

/// A capture, analysed.
pub struct Report {
    /// The file, as given.
    pub name: String,
    /// Frames in the file, skipped ones included.
    pub frames: usize,
    /// TCP segments among them.
    pub tcp: usize,
    /// TCP segments the capture cut short (snap length): their lengths come from the IP header.
    pub cut_short: usize,
    /// The conversations, in order of first appearance.
    pub conversations: Vec<Conversation>,
    /// Frames not drawn, counted by reason.
    pub skipped: BTreeMap<String, usize>,
}

impl Report {
    /// Return the footer: what the capture held and what was skipped, as parts to join.
    pub fn footer_parts(&self) -> Vec<String> {
        let mut parts = vec![format!(
            "{}: {}, {} in {}",
            self.name,
            count(self.frames as u64, "frame", "frames"),
            count(self.tcp as u64, "TCP segment", "TCP segments"),
            count(self.conversations.len() as u64, "conversation", "conversations")
        )];
        let skipped: usize = self.skipped.values().sum();
        if self.cut_short > 0 {
            parts.push(format!(
                "{} cut short by the capture (lengths shown are from the IP headers)",
                count(self.cut_short as u64, "segment", "segments")
            ));
        }
        if skipped > 0 {
            let mut reasons: Vec<_> = self.skipped.iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let mut reasons = reasons.iter().map(|(reason, n)| format!("{n} {reason}"));
            let first = reasons.next().unwrap_or_default();
            parts.push(format!("skipped {}: {first}", count(skipped as u64, "frame", "frames")));
            parts.extend(reasons);
        }
        parts
    }
}

/// Analyse `capture`, read from `name`.
pub fn analyse(name: &str, capture: &CaptureFile) -> Report {
    let mut skipped = BTreeMap::new();
    for s in &capture.skipped {
        log::debug!("frame {}: skipped by the reader: {}", s.index + 1, s.reason);
        *skipped.entry(s.reason.clone()).or_insert(0) += 1;
    }
    // Frame numbers count every packet of the file, the ones the reader skipped too.
    let unreadable: HashSet<usize> = capture.skipped.iter().map(|s| s.index).collect();
    let mut index = 0;
    let mut tracker = Tracker::default();
    let (mut tcp, mut cut_short) = (0, 0);
    for frame in &capture.frames {
        while unreadable.contains(&index) {
            index += 1;
        }
        index += 1;
        match decode::decode(index, frame) {
            Ok(packet) => {
                log::trace!("frame {index}: {} -> {} [{}]", packet.src, packet.dst, packet.flags);
                tracker.push(&packet);
                tcp += 1;
                cut_short += packet.cut_short as usize;
            }
            Err(reason) => {
                log::debug!("frame {index}: skipped: {reason}");
                *skipped.entry(reason.to_string()).or_insert(0) += 1;
            }
        }
    }
    Report {
        name: name.to_string(),
        frames: capture.frames.len() + capture.skipped.len(),
        tcp,
        cut_short,
        conversations: tracker.finish(),
        skipped,
    }
}

/// Run `bypass inspect FILE`: print the ladders, and draw them to `options.svg`.
pub fn run(path: &Path, options: &Options) -> Result<(), String> {
    let capture = read_capture(path).map_err(|e| e.to_string())?;
    let report = analyse(&path.display().to_string(), &capture);
    let color = !options.no_color && std::env::var_os("NO_COLOR").is_none() && io::stdout().is_terminal();
    let style = Style { color, comments: options.comments };
    let mut out = BufWriter::new(io::stdout().lock());
    let written = ladder::write_report(&mut out, &report, &style).and_then(|()| out.flush());
    match written {
        // `bypass inspect big.pcap | head` is fine.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(format!("cannot write the ladder to standard output: {e}")),
        Ok(()) => {}
    }
    if let Some(svg_path) = &options.svg {
        std::fs::write(svg_path, svg::render(&report, options.comments))
            .map_err(|e| format!("cannot write the SVG picture to {}: {e}", svg_path.display()))?;
        let _ = writeln!(out, "picture: {}", svg_path.display());
        let _ = out.flush();
    }
    Ok(())
}
