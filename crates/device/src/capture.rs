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
//!
//! A recording shows what the wire carries. A device that completes the TCP and UDP checksums
//! of what it sends ([`ChecksumCaps::tx_offload`], a NIC's `CHECKSUM_PARTIAL`) is handed
//! frames whose checksum field holds only the pseudo-header sum; the recorder completes the
//! checksum of its copy as the device will (the kernel's `skb_checksum_help`: the one's
//! complement of the sum from the transport header to the end of the packet), so the
//! recording passes Wireshark's checksum validation. The frame the device sends is untouched.

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

    /// Push buffered frames to their destination; the recorder calls this before the host
    /// goes idle (sleeps on the device).
    fn flush(&mut self) {}

    /// A batch went out (the recorder's device was flushed, once per turn of the host's
    /// loop). A sink read live pushes its frames now, so its reader sees them as they pass;
    /// a file may wait for [`flush`](Capture::flush).
    fn batch(&mut self) {}
}

/// Where the host leaves its note about the frame in hand, and the time, for a [`Recorder`]
/// to write beside the frame. Cloning shares the board.
#[derive(Clone, Debug, Default)]
pub struct NoteBoard(Arc<Mutex<Board>>);

/// What a [`NoteBoard`] holds.
#[derive(Debug, Default)]
struct Board {
    now: Instant,
    note: String,
    /// The recorder's copy of an outgoing frame whose checksum it completes (kept between
    /// frames, so that recording allocates once).
    scratch: Vec<u8>,
}

impl NoteBoard {
    /// Leave `note` about the frame in hand, at `now`.
    pub fn write(&self, now: Instant, note: &str) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        board.now = now;
        board.note.clear();
        board.note.push_str(note);
    }

    /// Record `frame`, which went `dir`, to `capture` with the note on the board (then clear
    /// it). With `complete`, record a copy whose TCP or UDP checksum is completed as a device
    /// with transmit checksum offload completes it (see [`complete_checksum`]).
    fn record(&self, capture: &mut dyn Capture, dir: Direction, frame: &[u8], complete: bool) {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Board { now, note, scratch } = &mut *board;
        if complete && checksum_field(frame).is_some() {
            scratch.clear();
            scratch.extend_from_slice(frame);
            complete_checksum(scratch);
            capture.frame(*now, dir, scratch, note);
        } else {
            capture.frame(*now, dir, frame, note);
        }
        note.clear();
    }
}

/// Where a device with transmit checksum offload completes the checksum of `frame`: the
/// transport header's offset, the checksum field's offset, the end of the IP payload, and
/// whether it is UDP. The frames it completes are the ones `bypass-io`'s AF_XDP device asks
/// the kernel to: TCP or UDP right after an IPv4 header of an unfragmented packet, or right
/// after the fixed IPv6 header.
fn checksum_field(frame: &[u8]) -> Option<(usize, usize, usize, bool)> {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let packet = SlicedPacket::from_ethernet(frame).ok()?;
    let (start, end) = match packet.net.as_ref()? {
        NetSlice::Ipv4(ip) => {
            let header = ip.header();
            if header.is_fragmenting_payload() {
                return None;
            }
            let start = 14 + header.slice().len();
            (start, 14 + usize::from(header.total_len()))
        }
        NetSlice::Ipv6(ip) => {
            if ip.extensions().first_header().is_some() {
                return None;
            }
            (54, 54 + usize::from(ip.header().payload_length()))
        }
        _ => return None,
    };
    let (offset, udp) = match packet.transport.as_ref()? {
        TransportSlice::Tcp(_) => (start + 16, false),
        TransportSlice::Udp(_) => (start + 6, true),
        _ => return None,
    };
    (end <= frame.len() && offset + 2 <= end).then_some((start, offset, end, udp))
}

/// Complete the TCP or UDP checksum of `frame`, whose checksum field holds the pseudo-header
/// sum (`CHECKSUM_PARTIAL`), as the device would: store the one's complement of the sum of
/// everything from the transport header to the end of the IP payload, the field included
/// (Linux `skb_checksum_help`; a UDP sum of 0 goes out as 0xffff, RFC 768). Leave other
/// frames alone.
pub fn complete_checksum(frame: &mut [u8]) {
    let Some((start, offset, end, udp)) = checksum_field(frame) else { return };
    let sum = etherparse::checksum::Sum16BitWords::new().add_slice(&frame[start..end]);
    // Native-endian words in, native-endian sum out: `to_be` makes it the wire's value.
    let checksum = if udp { sum.to_ones_complement_with_no_zero() } else { sum.ones_complement() }.to_be();
    frame[offset..offset + 2].copy_from_slice(&checksum.to_be_bytes());
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
            board.record(capture, Direction::In, frame, false);
        })
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let complete = self.inner.checksums().tx_offload;
        let (capture, board) = (&mut *self.capture, self.board);
        self.inner.send(&mut |buf| {
            let len = fill(buf);
            if len > 0 && len <= buf.len() {
                board.record(capture, Direction::Out, &buf[..len], complete);
            }
            len
        })
    }

    /// Flush the device, then tell the capture a batch went out.
    fn flush(&mut self) -> io::Result<()> {
        let flushed = self.inner.flush();
        self.capture.batch();
        flushed
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScriptedDevice;
    use etherparse::PacketBuilder;

    /// Keeps what it is given.
    #[derive(Default)]
    struct Kept(Vec<(Direction, Vec<u8>, String)>, usize);

    impl Capture for Kept {
        fn frame(&mut self, _now: Instant, dir: Direction, frame: &[u8], note: &str) {
            self.0.push((dir, frame.to_vec(), note.to_string()));
        }
        fn batch(&mut self) {
            self.1 += 1;
        }
    }

    /// A TCP (or UDP) frame with a correct checksum, and the same frame as a host leaving
    /// the sum to the device sends it: the field holds the pseudo-header sum.
    fn frames(v6: bool, udp: bool, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let ip = if v6 { eth.ipv6([0xfd; 16], [0xfe; 16], 64) } else { eth.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64) };
        let mut full = Vec::new();
        if udp {
            ip.udp(5353, 7).write(&mut full, payload).unwrap();
        } else {
            ip.tcp(40000, 7, 1234, 65535).ack(99).psh().write(&mut full, payload).unwrap();
        }
        let (start, offset, end, _) = checksum_field(&full).unwrap();
        let len = (end - start) as u32;
        let proto = if udp { 17u8 } else { 6 };
        let mut pseudo = etherparse::checksum::Sum16BitWords::new();
        pseudo = if v6 {
            pseudo.add_slice(&[0xfd; 16]).add_slice(&[0xfe; 16]).add_4bytes(len.to_be_bytes()).add_2bytes([0, proto])
        } else {
            pseudo.add_slice(&[10, 0, 0, 1, 10, 0, 0, 2]).add_2bytes([0, proto]).add_2bytes((len as u16).to_be_bytes())
        };
        let mut partial = full.clone();
        // CHECKSUM_PARTIAL: the folded pseudo-header sum, not complemented.
        partial[offset..offset + 2].copy_from_slice(&(!pseudo.ones_complement()).to_be().to_be_bytes());
        assert_ne!(partial, full);
        (full, partial)
    }

    #[test]
    fn partial_checksums_are_completed_as_the_device_would() {
        for (v6, udp, payload) in [
            (false, false, &b"hello"[..]),
            (false, false, &b""[..]),
            (true, false, &[0xa5; 1001][..]),
            (false, true, &b"odd"[..]),
            (true, true, &b"dns?"[..]),
        ] {
            let (full, mut partial) = frames(v6, udp, payload);
            complete_checksum(&mut partial);
            assert_eq!(partial, full, "v6 {v6} udp {udp} payload {}", payload.len());
        }
    }

    #[test]
    fn other_frames_are_left_alone() {
        let (full, _) = frames(false, false, b"x");
        let mut fragment = full.clone();
        fragment[20] |= 0x20; // more fragments
        let mut arp = full.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let truncated = full[..40].to_vec();
        for frame in [fragment, arp, truncated, vec![]] {
            let mut copy = frame.clone();
            complete_checksum(&mut copy);
            assert_eq!(copy, frame);
        }
    }

    #[test]
    fn the_recording_of_an_offloading_device_has_complete_checksums_and_the_wire_copy_is_untouched() {
        let (full, partial) = frames(false, false, b"echo me");
        for offload in [true, false] {
            let info = DeviceInfo::new("t0", [2, 0, 0, 0, 0, 1], 1500, "test");
            let caps = ChecksumCaps { rx_verified: false, tx_offload: offload };
            let mut device = ScriptedDevice::new(info).with_checksums(caps);
            let (mut kept, board) = (Kept::default(), NoteBoard::default());
            let mut recorder = Recorder::new(&mut device, &mut kept, &board);
            board.write(Instant::from_millis(1), "out [PSH,ACK]");
            recorder
                .send(&mut |buf| {
                    buf[..partial.len()].copy_from_slice(&partial);
                    partial.len()
                })
                .unwrap();
            recorder.flush().unwrap();
            assert_eq!(device.sent()[0].1, partial, "the device sends what the host wrote");
            let want_out = if offload { &full } else { &partial };
            assert_eq!(kept.0[0], (Direction::Out, want_out.clone(), "out [PSH,ACK]".to_string()));
            assert_eq!(kept.1, 1, "one batch");
        }
    }
}
