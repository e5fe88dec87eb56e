//! What a run says: a [`Report`] when every line held, a [`Failure`] at the first that did
//! not, printed as packetdrill prints its errors.

use core::fmt;

use crate::target::Micros;

/// Format script time as packetdrill does: seconds with six decimals.
pub fn seconds(t: Micros) -> String {
    format!("{}.{:06}", t / 1_000_000, t % 1_000_000)
}

/// A script that ran to its end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The script's name (its path, or what the caller called it).
    pub path: String,
    /// Statements run.
    pub lines: usize,
    /// Segments injected.
    pub inbound: usize,
    /// Segments of ours matched.
    pub outbound: usize,
    /// Script time at the end.
    pub end: Micros,
}

/// Why a script failed, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Failure {
    /// The script's name.
    pub path: String,
    /// The line (1-based; 0: the script as a whole).
    pub line: usize,
    /// The statement as written.
    pub text: String,
    /// What went wrong (`bad outbound TCP ack: expected 1001 actual 1`).
    pub message: String,
    /// The segment the script expected, in script space, with its time.
    pub expected: Option<Box<str>>,
    /// The segment we sent, in script space, with its time.
    pub actual: Option<Box<str>>,
}

impl Failure {
    /// Return a failure at `line` of `path` with `message` and no segments.
    pub fn at(path: &str, line: usize, text: &str, message: impl Into<String>) -> Failure {
        Failure {
            path: path.to_string(),
            line,
            text: text.to_string(),
            message: message.into(),
            expected: None,
            actual: None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)?;
        if !self.text.is_empty() {
            write!(f, "\n  script line:   {}", self.text)?;
        }
        if let Some(e) = &self.expected {
            write!(f, "\n  script packet: {e}")?;
        }
        if let Some(a) = &self.actual {
            write!(f, "\n  actual packet: {a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_packetdrill() {
        let f = Failure {
            expected: Some("0.200000 . 1:1(0) ack 1001".into()),
            actual: Some("0.200000 . 1:1(0) ack 1 win 502".into()),
            ..Failure::at("x.pkt", 7, "+0 > . 1:1(0) ack 1001", "bad outbound TCP ack: expected 1001 actual 1")
        };
        assert_eq!(
            f.to_string(),
            "x.pkt:7: bad outbound TCP ack: expected 1001 actual 1\n  script line:   +0 > . 1:1(0) ack 1001\n  \
             script packet: 0.200000 . 1:1(0) ack 1001\n  actual packet: 0.200000 . 1:1(0) ack 1 win 502"
        );
        assert_eq!(seconds(1_234_567), "1.234567");
    }
}
