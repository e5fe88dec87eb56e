//! An in-memory link between two stacks in one process.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::device::{Device, DeviceInfo, Waker};
use crate::link::{Link, LinkConfig, LinkStats, Packet};
use crate::seed::mix;
use crate::time::Instant;

/// Where a [`MemoryDevice`] gets the time.
#[derive(Clone, Debug)]
pub enum Clock {
    /// Virtual time: microseconds since [`Instant::ZERO`], advanced by whoever drives the test.
    /// [`Device::wait`] returns at once.
    Virtual(Arc<AtomicU64>),
    /// Real time since the given origin. [`Device::wait`] sleeps until a frame is due.
    Real(std::time::Instant),
}

impl Clock {
    /// Return a virtual clock at [`Instant::ZERO`].
    pub fn new_virtual() -> Clock {
        Clock::Virtual(Arc::new(AtomicU64::new(0)))
    }

    /// Return a real clock starting now.
    pub fn real() -> Clock {
        Clock::Real(std::time::Instant::now())
    }

    /// Return the current time.
    pub fn now(&self) -> Instant {
        match self {
            Clock::Virtual(micros) => Instant::from_micros(micros.load(Ordering::Acquire)),
            Clock::Real(origin) => Instant::from_micros(origin.elapsed().as_micros().min(u128::from(u64::MAX)) as u64),
        }
    }

    /// Move a virtual clock forward by `by`.
    ///
    /// # Panics
    ///
    /// On a real clock.
    pub fn advance(&self, by: Duration) {
        let Clock::Virtual(micros) = self else { panic!("Clock::advance on a real clock") };
        micros.fetch_add(by.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::AcqRel);
    }

    /// Move a virtual clock to `to`, if that is later than now (time never runs backwards).
    ///
    /// # Panics
    ///
    /// On a real clock.
    pub fn advance_to(&self, to: Instant) {
        let Clock::Virtual(micros) = self else { panic!("Clock::advance_to on a real clock") };
        micros.fetch_max(to.as_micros(), Ordering::AcqRel);
    }
}

/// One direction of the cable: the link and a wake-up for a receiver waiting in real time.
#[derive(Debug)]
struct Direction {
    link: Mutex<Link>,
    arrived: Condvar,
    /// Set by a [`Waker`] of the receiving device: its wait returns.
    woken: std::sync::atomic::AtomicBool,
}

impl Direction {
    fn lock(&self) -> MutexGuard<'_, Link> {
        // A panic elsewhere cannot leave a Link half-updated in a way that matters to a test.
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Builds a pair of [`MemoryDevice`]s; [`MemoryLink::pair`] is the short form.
///
/// [`MemoryLink::pair`] returns two [`MemoryDevice`]s joined by a simulated cable: one
/// [`Link`] each way, so Ethernet frames meet exactly the delay, bandwidth, loss, reordering,
/// duplication and corruption of the TCP core's `Pair` harness (`bypass_tcp::sim`), drawn
/// from the same seeded RNG. The links live behind `Arc<Mutex<..>>`, so the two devices can be
/// driven from one thread or from two.
///
/// Time comes from a [`Clock`]: [`Clock::Virtual`] is a counter the test advances (a run is
/// then a pure function of the configs, the seed and the calls), [`Clock::Real`] follows the
/// wall clock for demos. The two devices of a pair share one clock.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use bypass_device::{Device, LinkConfig, MemoryLink};
///
/// let link = LinkConfig::default().with_delay(Duration::from_millis(5));
/// let (mut a, mut b) = MemoryLink::pair(link, link, 7);
/// a.send(&mut |buf| {
///     buf[..60].fill(0xab);
///     60
/// })
/// .unwrap();
/// a.flush().unwrap();
/// assert_eq!(b.recv(8, &mut |_| {}).unwrap(), 0, "not there yet");
/// a.clock().advance(Duration::from_millis(5));
/// assert_eq!(b.recv(8, &mut |frame| assert_eq!(frame, [0xab; 60])).unwrap(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryLink {
    config_ab: LinkConfig,
    config_ba: LinkConfig,
    seed: u64,
    clock: Clock,
    mtu: usize,
    tx_queue: usize,
}

/// Device A's MAC address (locally administered).
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
/// Device B's MAC address (locally administered).
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

impl MemoryLink {
    /// Return a builder for a pair whose A-to-B direction behaves as `config_ab` and B-to-A as
    /// `config_ba`, with impairments drawn from `seed`; by default on a new virtual clock,
    /// with MTU 1500 and 256 frames of transmit queue.
    pub fn new(config_ab: LinkConfig, config_ba: LinkConfig, seed: u64) -> MemoryLink {
        MemoryLink { config_ab, config_ba, seed, clock: Clock::new_virtual(), mtu: 1500, tx_queue: 256 }
    }

    /// Return the two devices of [`MemoryLink::new`] with its defaults; reach the virtual
    /// clock through [`MemoryDevice::clock`].
    pub fn pair(config_ab: LinkConfig, config_ba: LinkConfig, seed: u64) -> (MemoryDevice, MemoryDevice) {
        MemoryLink::new(config_ab, config_ba, seed).build()
    }

    /// Use `clock`.
    pub fn clock(self, clock: Clock) -> MemoryLink {
        MemoryLink { clock, ..self }
    }

    /// Use IP MTU `mtu` on both devices.
    pub fn mtu(self, mtu: usize) -> MemoryLink {
        MemoryLink { mtu, ..self }
    }

    /// Let each device queue `frames` frames between flushes (at least one).
    pub fn tx_queue(self, frames: usize) -> MemoryLink {
        MemoryLink { tx_queue: frames.max(1), ..self }
    }

    /// Return devices A and B.
    ///
    /// # Panics
    ///
    /// As [`Link::new`], when a config holds an invalid probability or a zero bandwidth.
    pub fn build(self) -> (MemoryDevice, MemoryDevice) {
        // The same seed derivation as `bypass_tcp::sim::Pair` (streams 1 and 2), so a pair
        // and a `Pair` built with one seed draw the same impairments in each direction.
        let dirs = [(self.config_ab, 1), (self.config_ba, 2)].map(|(config, stream)| Direction {
            link: Mutex::new(Link::new(config, mix(self.seed, stream))),
            arrived: Condvar::new(),
            woken: Default::default(),
        });
        let shared = Arc::new(dirs);
        let device = |name: &str, mac, tx| {
            let time = if matches!(self.clock, Clock::Virtual(_)) { "virtual" } else { "real" };
            let info = DeviceInfo::new(name, mac, self.mtu, format!("in-memory link, {time} time"));
            let max_frame = info.max_frame();
            MemoryDevice {
                shared: Arc::clone(&shared),
                tx,
                clock: self.clock.clone(),
                tx_buf: vec![0; self.tx_queue * max_frame].into_boxed_slice(),
                tx_len: vec![0; self.tx_queue].into_boxed_slice(),
                tx_queued: 0,
                rx_batch: Vec::new(),
                info,
            }
        };
        let a = device("mem-a", MAC_A, 0);
        let b = device("mem-b", MAC_B, 1);
        (a, b)
    }
}

/// One end of a [`MemoryLink`].
///
/// [`Device::send`] queues frames in the device (returning `Ok(false)` when its queue is
/// full), [`Device::flush`] puts them on the link at the clock's time, and [`Device::recv`]
/// takes those due by then. No allocation per frame once buffers have warmed up.
#[derive(Debug)]
pub struct MemoryDevice {
    shared: Arc<[Direction; 2]>,
    /// Index of the direction this device sends into; it receives from the other.
    tx: usize,
    clock: Clock,
    info: DeviceInfo,
    tx_buf: Box<[u8]>,
    tx_len: Box<[usize]>,
    tx_queued: usize,
    /// Packets taken from the link, kept so the lock is not held while `recv`'s closure runs.
    rx_batch: Vec<Packet>,
}

impl MemoryDevice {
    /// Return the clock the pair runs on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn tx_dir(&self) -> &Direction {
        &self.shared[self.tx]
    }

    fn rx_dir(&self) -> &Direction {
        &self.shared[1 - self.tx]
    }

    /// Return the counters of the link this device sends into.
    pub fn tx_stats(&self) -> LinkStats {
        self.tx_dir().lock().stats()
    }

    /// Return the counters of the link this device receives from.
    pub fn rx_stats(&self) -> LinkStats {
        self.rx_dir().lock().stats()
    }

    /// Return when the next frame for this device is due, if one is in flight (a
    /// virtual-time driver jumps the clock there).
    pub fn next_arrival(&self) -> Option<Instant> {
        self.rx_dir().lock().next_delivery()
    }

    /// Change how the link this device sends into behaves from now on; frames in flight keep
    /// their delivery times.
    ///
    /// # Panics
    ///
    /// As [`Link::set_config`].
    pub fn set_tx_config(&self, config: LinkConfig) {
        self.tx_dir().lock().set_config(config);
    }

    fn slot(&self, i: usize) -> std::ops::Range<usize> {
        let size = self.info.max_frame();
        i * size..(i + 1) * size
    }
}

impl Device for MemoryDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let now = self.clock.now();
        let mut batch = std::mem::take(&mut self.rx_batch);
        batch.clear();
        {
            let mut link = self.rx_dir().lock();
            while batch.len() < budget {
                let Some(packet) = link.recv(now) else { break };
                batch.push(packet);
            }
        }
        for packet in &batch {
            log::trace!("{now} {}: received {} bytes", self.info.name, packet.len());
            on_frame(packet);
        }
        let n = batch.len();
        if n > 0 {
            let mut link = self.rx_dir().lock();
            for packet in batch.drain(..) {
                link.recycle(packet);
            }
        }
        self.rx_batch = batch;
        Ok(n)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.tx_queued == self.tx_len.len() {
            return Ok(false);
        }
        let slot = self.slot(self.tx_queued);
        let buf = &mut self.tx_buf[slot];
        let len = fill(buf);
        if len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a frame must be at most {} bytes, not {len}", buf.len()),
            ));
        }
        if len > 0 {
            self.tx_len[self.tx_queued] = len;
            self.tx_queued += 1;
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.tx_queued == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        {
            let mut link = self.tx_dir().lock();
            for i in 0..self.tx_queued {
                let frame = &self.tx_buf[self.slot(i)][..self.tx_len[i]];
                log::trace!("{now} {}: sent {} bytes", self.info.name, frame.len());
                link.send(now, frame);
            }
        }
        self.tx_queued = 0;
        self.tx_dir().arrived.notify_all();
        Ok(())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        wait_for_delivery(self.rx_dir(), &self.clock, timeout);
        Ok(())
    }

    /// Wake this device's waits: set the flag, then notify under the link's lock, so a
    /// waiter between its check of the flag and its sleep cannot miss it.
    fn waker(&mut self) -> Option<Waker> {
        let shared = Arc::clone(&self.shared);
        let rx = 1 - self.tx;
        Some(Waker::new(move || {
            let dir = &shared[rx];
            dir.woken.store(true, Ordering::Release);
            let _link = dir.lock();
            dir.arrived.notify_all();
        }))
    }

    fn sleeper(&mut self) -> Option<crate::device::Sleeper> {
        let shared = Arc::clone(&self.shared);
        let rx = 1 - self.tx;
        let clock = self.clock.clone();
        Some(crate::device::Sleeper::new(move |timeout| wait_for_delivery(&shared[rx], &clock, timeout)))
    }
}

/// Block until a frame of `dir` is due, a waker rings, or `timeout` passes (at once on
/// virtual time, where nothing arrives by waiting).
fn wait_for_delivery(dir: &Direction, clock: &Clock, timeout: Option<Duration>) {
    if matches!(clock, Clock::Virtual(_)) {
        return;
    }
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let mut link = dir.lock();
    loop {
        if dir.woken.swap(false, Ordering::AcqRel) {
            return;
        }
        let now = clock.now();
        let due = link.next_delivery();
        if due.is_some_and(|due| due <= now) {
            return;
        }
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        if left.is_some_and(|left| left.is_zero()) {
            return;
        }
        // Sleep until the first frame is due or the deadline, whichever is sooner; a
        // flush by the peer wakes us to look again.
        let sleep = match (due.map(|due| due - now), left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        link = match sleep {
            Some(d) => dir.arrived.wait_timeout(link, d).unwrap_or_else(PoisonError::into_inner).0,
            None => dir.arrived.wait(link).unwrap_or_else(PoisonError::into_inner),
        };
    }
}
