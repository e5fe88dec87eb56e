//! A device you drive by hand: you put frames in its inbox, it keeps what the host sends.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::time::Duration;

use crate::device::{ChecksumCaps, Device, DeviceInfo};
use crate::time::Instant;

/// What a [`ScriptedDevice`] answers a frame it sends with: the frame to put in its inbox.
type Responder = Box<dyn FnMut(&[u8]) -> Option<Vec<u8>> + Send>;

/// A device driven by hand.
///
/// [`ScriptedDevice`] is the one stand-in for a real device in tests, in the replay of captures
/// and in the script runner's virtual-time target. It has no wire and no clock of its own:
///
/// - **receive**: [`push_rx`](ScriptedDevice::push_rx) queues a frame for the next
///   [`Device::recv`], [`push_rx_at`](ScriptedDevice::push_rx_at) one that becomes deliverable
///   at a given time; frames leave the inbox in the order they were pushed, at most `budget`
///   per call;
/// - **transmit**: every frame the host sends is kept with the device's time when it left
///   ([`sent`](ScriptedDevice::sent), [`take_sent`](ScriptedDevice::take_sent)); the buffer
///   `send` lends is pre-filled with `0xa5`, so bytes the host forgot to write show;
/// - **time**: whatever [`set_time`](ScriptedDevice::set_time) last said;
/// - **limits**, to play a device under pressure: a transmit capacity (after that many frames
///   since the last flush, `send` reports no buffer free until the host flushes, as a full TX
///   ring does) and a flush limit (each flush puts at most that many queued frames on the wire,
///   as a kernel does that takes one batch per kick); and the receive ring size
///   [`Device::rx_frames`] reports;
/// - **a responder**: an optional hook run on each frame as it leaves, whose answer goes to
///   the inbox (how replay answers our ARP requests and Neighbour Solicitations for the peer).
///
/// # Example
///
/// ```
/// use bypass_device::{Device, DeviceInfo, Instant, ScriptedDevice};
///
/// let info = DeviceInfo::new("test", [2, 0, 0, 0, 0, 1], 1500, "by hand");
/// // Echo every frame back.
/// let mut dev = ScriptedDevice::new(info).with_responder(|frame| Some(frame.to_vec()));
/// dev.set_time(Instant::from_millis(3));
/// dev.send(&mut |buf| {
///     buf[..4].copy_from_slice(b"ping");
///     4
/// })
/// .unwrap();
/// dev.flush().unwrap();
/// assert_eq!(dev.sent(), [(Instant::from_millis(3), b"ping".to_vec())]);
/// assert_eq!(dev.recv(8, &mut |frame| assert_eq!(frame, b"ping")).unwrap(), 1);
/// ```
///
/// By default it takes every frame (no transmit capacity), puts each on the wire at once (no
/// flush limit), reports no receive ring and answers nothing.
pub struct ScriptedDevice {
    info: DeviceInfo,
    now: Instant,
    /// Frames to deliver, each with the time from which it may be.
    inbox: VecDeque<(Instant, Vec<u8>)>,
    /// Frames queued by `send` that no flush has put on the wire yet (only with a flush limit).
    queued: VecDeque<Vec<u8>>,
    /// Frames on the wire, with the time they left.
    sent: Vec<(Instant, Vec<u8>)>,
    /// Frames sent since the last flush (or still queued), against `tx_capacity`.
    in_use: usize,
    tx_capacity: usize,
    flush_limit: Option<usize>,
    rx_frames: Option<usize>,
    responder: Option<Responder>,
    buf: Vec<u8>,
}

impl ScriptedDevice {
    /// Return a device described by `info`, at [`Instant::ZERO`], with nothing to deliver.
    pub fn new(info: DeviceInfo) -> ScriptedDevice {
        ScriptedDevice {
            info,
            now: Instant::ZERO,
            inbox: VecDeque::new(),
            queued: VecDeque::new(),
            sent: Vec::new(),
            in_use: 0,
            tx_capacity: usize::MAX,
            flush_limit: None,
            rx_frames: None,
            responder: None,
            buf: Vec::new(),
        }
    }

    /// Let `send` take at most `frames` frames between two flushes (at least one); frames a
    /// flush limit leaves queued count against it too.
    pub fn with_tx_capacity(self, frames: usize) -> ScriptedDevice {
        ScriptedDevice { tx_capacity: frames.max(1), ..self }
    }

    /// Keep sent frames queued until a flush, and let each flush put at most `frames` of them
    /// (at least one) on the wire, the rest waiting for the next.
    pub fn with_flush_limit(self, frames: usize) -> ScriptedDevice {
        ScriptedDevice { flush_limit: Some(frames.max(1)), ..self }
    }

    /// Report a receive ring of `frames` frames from [`Device::rx_frames`] (`None`: no fixed
    /// ring). The device itself never drops for it.
    pub fn with_rx_frames(self, frames: Option<usize>) -> ScriptedDevice {
        ScriptedDevice { rx_frames: frames, ..self }
    }

    /// Report `caps` from [`Device::checksums`] (the bytes are moved untouched whatever it says).
    pub fn with_checksums(self, caps: ChecksumCaps) -> ScriptedDevice {
        let mut device = self;
        device.info.checksums = caps;
        device
    }

    /// Run `respond` on every frame as it goes on the wire and put its answer, if any, in the
    /// inbox as [`push_rx`](ScriptedDevice::push_rx) does.
    pub fn with_responder(self, respond: impl FnMut(&[u8]) -> Option<Vec<u8>> + Send + 'static) -> ScriptedDevice {
        ScriptedDevice { responder: Some(Box::new(respond)), ..self }
    }

    /// Return the device's time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Set the device's time: what sent frames are stamped with, and what decides which frames
    /// of [`push_rx_at`](ScriptedDevice::push_rx_at) are due.
    pub fn set_time(&mut self, now: Instant) {
        self.now = now;
    }

    /// Queue `frame` for delivery by the next [`Device::recv`].
    pub fn push_rx(&mut self, frame: impl Into<Vec<u8>>) {
        self.inbox.push_back((Instant::ZERO, frame.into()));
    }

    /// Queue `frame` for delivery once the device's time reaches `due`. The inbox keeps the
    /// order of pushing: a frame not yet due holds back the ones pushed after it.
    pub fn push_rx_at(&mut self, due: Instant, frame: impl Into<Vec<u8>>) {
        self.inbox.push_back((due, frame.into()));
    }

    /// Return when the next frame of the inbox is deliverable, if one is left (a time at or
    /// before now for frames deliverable already).
    pub fn next_rx(&self) -> Option<Instant> {
        self.inbox.front().map(|&(due, _)| due)
    }

    /// Return how many frames the inbox holds.
    pub fn rx_pending(&self) -> usize {
        self.inbox.len()
    }

    /// Return the frames on the wire so far, oldest first, each with the time it left.
    pub fn sent(&self) -> &[(Instant, Vec<u8>)] {
        &self.sent
    }

    /// Take the frames on the wire so far, oldest first, each with the time it left.
    pub fn take_sent(&mut self) -> Vec<(Instant, Vec<u8>)> {
        std::mem::take(&mut self.sent)
    }

    /// Return how many sent frames wait for a flush to go on the wire (with a flush limit).
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Put `frame` on the wire now, and its answer in the inbox.
    fn release(&mut self, frame: Vec<u8>) {
        if let Some(answer) = self.responder.as_mut().and_then(|respond| respond(&frame)) {
            self.inbox.push_back((Instant::ZERO, answer));
        }
        self.sent.push((self.now, frame));
    }
}

impl fmt::Debug for ScriptedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedDevice")
            .field("info", &self.info)
            .field("now", &self.now)
            .field("inbox", &self.inbox.len())
            .field("queued", &self.queued.len())
            .field("sent", &self.sent.len())
            .field("tx_capacity", &self.tx_capacity)
            .field("flush_limit", &self.flush_limit)
            .field("rx_frames", &self.rx_frames)
            .field("responder", &self.responder.is_some())
            .finish()
    }
}

impl Device for ScriptedDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < budget && self.inbox.front().is_some_and(|&(due, _)| due <= self.now) {
            let (_, frame) = self.inbox.pop_front().expect("checked");
            on_frame(&frame);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.in_use >= self.tx_capacity {
            return Ok(false);
        }
        self.buf.clear();
        self.buf.resize(self.info.max_frame(), 0xa5);
        let len = fill(&mut self.buf);
        if len > self.buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a frame must be at most {} bytes, not {len}", self.buf.len()),
            ));
        }
        if len > 0 {
            self.in_use += 1;
            let frame = self.buf[..len].to_vec();
            match self.flush_limit {
                Some(_) => self.queued.push_back(frame),
                None => self.release(frame),
            }
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(limit) = self.flush_limit {
            for _ in 0..limit {
                let Some(frame) = self.queued.pop_front() else { break };
                self.release(frame);
            }
        }
        self.in_use = self.queued.len();
        Ok(())
    }

    fn wait(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }

    fn rx_frames(&self) -> Option<usize> {
        self.rx_frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> ScriptedDevice {
        ScriptedDevice::new(DeviceInfo::new("test", [2, 0, 0, 0, 0, 1], 1500, "by hand"))
    }

    fn send(dev: &mut ScriptedDevice, byte: u8) -> bool {
        dev.send(&mut |buf| {
            buf[0] = byte;
            1
        })
        .unwrap()
    }

    fn bytes(dev: &mut ScriptedDevice) -> Vec<u8> {
        dev.take_sent().into_iter().map(|(_, f)| f[0]).collect()
    }

    #[test]
    fn the_inbox_delivers_in_order_within_the_budget_and_when_due() {
        let mut dev = device();
        dev.push_rx(vec![1]);
        dev.push_rx(vec![2]);
        dev.push_rx_at(Instant::from_millis(5), vec![3]);
        dev.push_rx(vec![4]);
        let mut got = Vec::new();
        assert_eq!(dev.recv(1, &mut |f| got.push(f[0])).unwrap(), 1);
        assert_eq!(dev.recv(8, &mut |f| got.push(f[0])).unwrap(), 1, "3 is not due and holds 4 back");
        assert_eq!(dev.next_rx(), Some(Instant::from_millis(5)));
        dev.set_time(Instant::from_millis(5));
        assert_eq!(dev.recv(8, &mut |f| got.push(f[0])).unwrap(), 2);
        assert_eq!(got, [1, 2, 3, 4]);
        assert_eq!((dev.rx_pending(), dev.next_rx()), (0, None));
    }

    #[test]
    fn sent_frames_carry_their_time_and_unwritten_bytes_show() {
        let mut dev = device();
        dev.set_time(Instant::from_micros(7));
        assert!(
            dev.send(&mut |buf| {
                assert_eq!(buf.len(), 1514);
                assert!(buf.iter().all(|&b| b == 0xa5));
                buf[0] = 1;
                3
            })
            .unwrap()
        );
        assert!(dev.send(&mut |_| 0).unwrap(), "a cancelled frame is no frame");
        assert_eq!(dev.sent(), [(Instant::from_micros(7), vec![1, 0xa5, 0xa5])]);
        assert!(dev.send(&mut |_| 1515).is_err());
    }

    #[test]
    fn a_full_transmit_queue_refuses_until_flushed() {
        let mut dev = device().with_tx_capacity(2);
        assert!(send(&mut dev, 1) && send(&mut dev, 2));
        assert!(!send(&mut dev, 3), "two frames since the last flush");
        dev.flush().unwrap();
        assert!(send(&mut dev, 3));
        assert_eq!(bytes(&mut dev), [1, 2, 3]);
    }

    #[test]
    fn a_flush_limit_trickles_frames_out() {
        let mut dev = device().with_flush_limit(2).with_tx_capacity(3);
        for b in 1..=3 {
            assert!(send(&mut dev, b));
        }
        assert!(dev.sent().is_empty(), "nothing leaves before a flush");
        dev.flush().unwrap();
        assert_eq!((bytes(&mut dev), dev.queued()), (vec![1, 2], 1));
        assert!(send(&mut dev, 4) && send(&mut dev, 5));
        assert!(!send(&mut dev, 6), "queued frames hold their buffers");
        dev.flush().unwrap();
        dev.flush().unwrap();
        assert_eq!((bytes(&mut dev), dev.queued()), (vec![3, 4, 5], 0));
    }

    #[test]
    fn the_responder_answers_frames_as_they_leave() {
        let mut dev = device().with_flush_limit(1).with_responder(|f| (f[0] % 2 == 1).then(|| vec![f[0] + 100]));
        assert!(send(&mut dev, 1) && send(&mut dev, 2));
        assert_eq!(dev.rx_pending(), 0, "queued frames have not left");
        dev.flush().unwrap();
        dev.flush().unwrap();
        let mut got = Vec::new();
        dev.recv(8, &mut |f| got.push(f[0])).unwrap();
        assert_eq!(got, [101]);
    }

    #[test]
    fn it_reports_what_it_is_told() {
        let dev = device();
        assert_eq!((dev.rx_frames(), dev.checksums()), (None, ChecksumCaps::SOFTWARE));
        let caps = ChecksumCaps { rx_verified: true, tx_offload: false };
        let dev = device().with_rx_frames(Some(64)).with_checksums(caps);
        assert_eq!((dev.rx_frames(), dev.checksums()), (Some(64), caps));
    }
}
