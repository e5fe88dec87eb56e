//! Capture: every frame received or sent recorded with a one-line note saying what the frame
//! meant (state change, relative sequence numbers, window, drop reason, congestion state), so
//! a recording explains itself in Wireshark.
//!
//! The recording is a middleware device, as smoltcp's `PcapWriter`: a [`Recorder`] wraps the
//! device and hands each frame that passes through it to a [`Capture`]. The note comes from
//! the host, which alone knows the connection a frame belongs to: it writes the note of the
//! frame in hand on a [`NoteBoard`] the recorder shares, while receiving the frame (inside the
//! device's `recv` callback) or filling it (inside `send`'s), and the recorder reads it as the
//! frame passes. Without a recorder nothing is formatted.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::device::{ChecksumCaps, Device, DeviceInfo, Waker};
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

/// Where the host leaves its note about the frame in hand, and the time, for a [`Recorder`]
/// to write beside the frame. Cloning shares the board.
#[derive(Clone, Debug, Default)]
pub struct NoteBoard(Arc<Mutex<(Instant, String)>>);

impl NoteBoard {
    /// Leave `note` about the frame in hand, at `now`.
    pub fn write(&self, now: Instant, note: &str) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        board.0 = now;
        board.1.clear();
        board.1.push_str(note);
    }

    /// Record `frame`, which went `dir`, to `capture` with the note on the board (then clear it).
    fn record(&self, capture: &mut dyn Capture, dir: Direction, frame: &[u8]) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (now, note) = &mut *board;
        capture.frame(*now, dir, frame, note);
        note.clear();
    }
}

/// A device that records every frame passing through `inner`, both ways, to a [`Capture`],
/// with the note the host left on the [`NoteBoard`] while it received or filled the frame.
/// It borrows the device, so a host can wrap its own device only while it records.
pub struct Recorder<'a, D: Device + ?Sized> {
    inner: &'a mut D,
    capture: &'a mut dyn Capture,
    board: &'a NoteBoard,
}

impl<'a, D: Device + ?Sized> Recorder<'a, D> {
    /// Return `inner` recorded to `capture`, the notes taken from `board`.
    pub fn new(inner: &'a mut D, capture: &'a mut dyn Capture, board: &'a NoteBoard) -> Self {
        Recorder { inner, capture, board }
    }
}

impl<D: Device + ?Sized> Device for Recorder<'_, D> {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let (capture, board) = (&mut *self.capture, self.board);
        self.inner.recv(budget, &mut |frame| {
            on_frame(frame);
            board.record(capture, Direction::In, frame);
        })
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let (capture, board) = (&mut *self.capture, self.board);
        self.inner.send(&mut |buf| {
            let len = fill(buf);
            if len > 0 && len <= buf.len() {
                board.record(capture, Direction::Out, &buf[..len]);
            }
            len
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Push the capture's buffered frames out first: the host is about to idle.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.capture.flush();
        self.inner.wait(timeout)
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }

    fn device_counters(&mut self) -> Vec<(&'static str, u64)> {
        self.inner.device_counters()
    }

    fn syscalls(&self) -> u64 {
        self.inner.syscalls()
    }

    fn rx_frames(&self) -> Option<usize> {
        self.inner.rx_frames()
    }

    fn checksums(&self) -> ChecksumCaps {
        self.inner.checksums()
    }

    fn waker(&mut self) -> Option<Waker> {
        self.inner.waker()
    }

    fn sleeper(&mut self) -> Option<crate::device::Sleeper> {
        self.inner.sleeper()
    }
}
