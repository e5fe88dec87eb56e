//! Capture hooks: the host reports every frame it received or sent, with a one-line note
//! saying what the frame meant (state change, relative sequence numbers, window, drop reason,
//! congestion state), so a recording explains itself in Wireshark.
//!
//! Nothing is formatted unless a [`Capture`] is installed.

use crate::time::Instant;

/// Which way a frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received from the device.
    In,
    /// Handed to the device.
    Out,
}

/// A sink for captured frames, such as a pcapng writer.
pub trait Capture: Send {
    /// Record `frame`, which went `dir` at `now`, with the host's `note` about it (may be empty).
    fn frame(&mut self, now: Instant, dir: Direction, frame: &[u8], note: &str);

    /// Push buffered frames to their destination; the stack calls this when it goes idle.
    fn flush(&mut self) {}
}
