//! The in-memory link both stacks run on: two [`Port`]s whose frames the benchmark carries
//! across by hand, one queue each way, no sockets, no threads, no clock.
//!
//! A port is a device to both stacks: `bypass_device::Device` for ours, smoltcp's
//! `phy::Device` for smoltcp, with the same work behind each. Neither copies a frame: a
//! frame is a buffer from a pool the two ports share, written in place by the sending stack,
//! moved (a pointer) to the other port's receive queue by [`carry`], lent in place to the
//! receiving stack and returned to the pool. So the link costs both stacks the same few
//! instructions a frame, and no allocation once the pool has warmed up.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use bypass_device::{Device, DeviceInfo};
use smoltcp::phy::{self, DeviceCapabilities, Medium};

/// The IP MTU of both ports.
pub const MTU: usize = 1500;
/// The largest frame: the MTU and the Ethernet header.
pub const MAX_FRAME: usize = MTU + 14;

/// One frame: a buffer of [`MAX_FRAME`] bytes and the length written.
pub struct Frame {
    buf: Box<[u8]>,
    len: usize,
}

/// Buffers shared by the two ports of a link.
type Pool = Rc<RefCell<Vec<Box<[u8]>>>>;

/// Take a buffer from `pool`, or allocate one when it is empty (only while warming up).
fn take(pool: &RefCell<Vec<Box<[u8]>>>) -> Box<[u8]> {
    pool.borrow_mut().pop().unwrap_or_else(|| vec![0; MAX_FRAME].into_boxed_slice())
}

/// One end of the link.
pub struct Port {
    info: DeviceInfo,
    /// Frames waiting for this port's stack.
    rx: VecDeque<Frame>,
    /// Frames this port's stack sent, waiting for [`carry`].
    tx: VecDeque<Frame>,
    pool: Pool,
    /// Frames the stack may still send; when none are left, the port reports itself full
    /// (`Ok(false)` to ours, no transmit token to smoltcp) until it is given more.
    pub budget: usize,
}

/// Return the two ports of a link (MAC addresses `mac_a` and `mac_b`), their pool
/// pre-filled with `frames` buffers.
pub fn link(mac_a: [u8; 6], mac_b: [u8; 6], frames: usize) -> (Port, Port) {
    let pool: Pool = Rc::new(RefCell::new((0..frames).map(|_| vec![0; MAX_FRAME].into_boxed_slice()).collect()));
    let port = |name: &str, mac| Port {
        info: DeviceInfo::new(name, mac, MTU, "in-memory link (benches/instructions)"),
        rx: VecDeque::with_capacity(frames),
        tx: VecDeque::with_capacity(frames),
        pool: Rc::clone(&pool),
        budget: usize::MAX,
    };
    (port("a", mac_a), port("b", mac_b))
}

/// Move every frame `from` sent to the receive queue of `to`; return how many.
pub fn carry(from: &mut Port, to: &mut Port) -> usize {
    let frames = from.tx.len();
    to.rx.extend(from.tx.drain(..));
    frames
}

/// [`carry`], and return how many of the frames were TCP segments with data.
pub fn carry_data(from: &mut Port, to: &mut Port) -> (usize, usize) {
    let data = from.tx.iter().filter(|f| tcp_payload(&f.buf[..f.len]) > 0).count();
    (carry(from, to), data)
}

/// Return the TCP payload length of `frame` (0 for anything else).
fn tcp_payload(frame: &[u8]) -> usize {
    match etherparse::SlicedPacket::from_ethernet(frame) {
        Ok(etherparse::SlicedPacket { transport: Some(etherparse::TransportSlice::Tcp(tcp)), .. }) => {
            tcp.payload().len()
        }
        _ => 0,
    }
}

impl Port {
    /// Return whether frames wait for this port's stack.
    pub fn has_rx(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Return a transmit token: the right to queue one frame.
    fn token(&mut self) -> TxToken<'_> {
        TxToken { tx: &mut self.tx, pool: &self.pool, budget: &mut self.budget }
    }
}

impl Device for Port {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < budget {
            let Some(frame) = self.rx.pop_front() else { break };
            on_frame(&frame.buf[..frame.len]);
            self.pool.borrow_mut().push(frame.buf);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.budget == 0 {
            return Ok(false);
        }
        self.token().push(fill);
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn wait(&mut self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

impl phy::Device for Port {
    type RxToken<'a>
        = RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        let Port { tx, pool, budget, .. } = self;
        Some((RxToken { frame, pool }, TxToken { tx, pool, budget }))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<TxToken<'_>> {
        (self.budget > 0).then(|| self.token())
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // smoltcp counts the Ethernet header in an Ethernet device's MTU.
        caps.max_transmission_unit = MAX_FRAME;
        // Checksums computed and verified in software (the default), as ours does here.
        caps
    }
}

/// A received frame lent to smoltcp; its buffer goes back to the pool once read.
pub struct RxToken<'a> {
    frame: Frame,
    pool: &'a Pool,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame.buf[..self.frame.len]);
        self.pool.borrow_mut().push(self.frame.buf);
        r
    }
}

/// The right to queue one frame.
pub struct TxToken<'a> {
    tx: &'a mut VecDeque<Frame>,
    pool: &'a Pool,
    budget: &'a mut usize,
}

impl TxToken<'_> {
    /// Queue a frame written by `fill` (which returns its length; 0 cancels).
    fn push(self, fill: impl FnOnce(&mut [u8]) -> usize) {
        let mut buf = take(self.pool);
        let len = fill(&mut buf);
        if len == 0 {
            self.pool.borrow_mut().push(buf);
            return;
        }
        *self.budget = self.budget.saturating_sub(1);
        self.tx.push_back(Frame { buf, len });
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut out = None;
        self.push(|buf| {
            out = Some(f(&mut buf[..len]));
            len
        });
        out.expect("a frame of a positive length is always queued")
    }
}
