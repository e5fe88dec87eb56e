//! The bulk floor: MTU-sized raw AF_XDP frames streamed one way between the two namespaces
//! of a lab, no TCP.
//!
//! One side's AF_XDP socket (copy mode, through our [`XdpDevice`]) queues MTU-sized UDP/IPv4
//! frames as fast as its TX ring takes them, kicking the kernel once per batch; the other
//! side's AF_XDP socket receives them in batches, busy-polling, and counts them. The sender
//! writes only the 42 header bytes of each frame: the payload is whatever the UMEM frame
//! held, so no stack that puts its bytes in the frame can send faster. Only frames that
//! arrive count, so this is the most payload bytes per second a copy-mode AF_XDP stack can
//! move over the veth pair in that direction: the reference the bulk figures are read
//! against, as [`floor`](crate::floor) is for latency.
//!
//! At an MTU whose frames exceed a UMEM frame (a jumbo MTU), both devices go multi-buffer
//! (`XDP_USE_SG`, see [`XdpDevice`]): the sender writes each packet into a span of adjacent
//! frames, the receiver gathers each chain into one buffer, as a stack on the device would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::xdp::{XdpConfig, XdpDevice, XdpError};
use etherparse::PacketBuilder;

use crate::testlab::{Lab, LabError};

/// UDP port the floor's frames use (both ends).
const PORT: u16 = 9;
/// Ethernet, IPv4 and UDP headers: what the sender writes of each frame.
const HEADERS: usize = 14 + 20 + 8;
/// Frames queued between two kicks of the kernel (copy mode sends 32 per kick, and the
/// device's flush kicks until the ring drains).
const TX_BATCH: usize = 64;
/// How long the receiver keeps counting after the sender stopped: frames still in flight.
const DRAIN: Duration = Duration::from_millis(20);

/// Which way the frames go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the peer's interface to the bypass side's (the demo's client -> server, bulk up).
    PeerToBypass,
    /// From the bypass side's interface to the peer's (server -> client, bulk down).
    BypassToPeer,
}

/// Why the bulk floor could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum BulkFloorError {
    /// An AF_XDP device could not be opened.
    #[error("the bulk floor's AF_XDP device: {0}")]
    Xdp(#[from] XdpError),
    /// The MTU could not be set or read.
    #[error("the bulk floor's MTU: {0}")]
    Mtu(#[from] LabError),
    /// The sender failed.
    #[error("the bulk floor's sender: {0}")]
    Send(std::io::Error),
    /// A thread of the floor panicked.
    #[error("a thread of the bulk floor panicked")]
    Panicked,
}

/// What a bulk floor run measured.
#[derive(Clone, Debug)]
pub struct BulkFloorResult {
    /// The MTU both interfaces had.
    pub mtu: u32,
    /// UDP payload bytes per frame (MTU - 28).
    pub payload: usize,
    /// Frames received within the timed window.
    pub frames: u64,
    /// Length of the timed window.
    pub elapsed: Duration,
    /// Frames the sender queued over the whole run (warm-up and drain included).
    pub sent: u64,
    /// Frames of the floor the receiver got over the whole run.
    pub received: u64,
    /// The receiver socket's kernel drop counters over the run: RX ring full, other drops.
    pub rx_ring_full: u64,
    /// See [`rx_ring_full`](Self::rx_ring_full).
    pub rx_dropped: u64,
    /// The AF_XDP mode obtained on the receiving side.
    pub mode: String,
}

impl BulkFloorResult {
    /// Return the received payload in Gbit/s over the timed window.
    pub fn gbit_per_s(&self) -> f64 {
        (self.frames * self.payload as u64) as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }

    /// Return the frames sent that never arrived (the veth or the receiver dropped them).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

/// Stream MTU-sized frames in `direction` for `warmup` then `duration` (timed), with both
/// interfaces of the lab at `mtu` for the run (set back to what they were on every path out).
///
/// While it runs, the two kernels do not see IPv4 for their own addresses (the floor's XDP
/// programs take it); both programs are gone when this returns.
pub fn xdp_stream(
    lab: &Lab,
    direction: Direction,
    mtu: u32,
    warmup: Duration,
    duration: Duration,
) -> Result<BulkFloorResult, BulkFloorError> {
    let _mtu = MtuGuard::set(lab, mtu)?;
    let bypass = |ip| XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.bypass_if, ip) };
    let peer = |ip| XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.peer_if, ip) };
    // The receiver first, so that it is listening before the first frame leaves.
    let (receiver, sender, from, to) = match direction {
        Direction::PeerToBypass => {
            let rx = lab.in_bypass(|| XdpDevice::open(bypass(lab.bypass_ip)))?;
            let tx = lab.in_peer(|| XdpDevice::open(peer(lab.peer_ip)))?;
            (rx, tx, (lab.peer_mac, lab.peer_ip), (lab.bypass_mac, lab.bypass_ip))
        }
        Direction::BypassToPeer => {
            let rx = lab.in_peer(|| XdpDevice::open(peer(lab.peer_ip)))?;
            let tx = lab.in_bypass(|| XdpDevice::open(bypass(lab.bypass_ip)))?;
            (rx, tx, (lab.bypass_mac, lab.bypass_ip), (lab.peer_mac, lab.peer_ip))
        }
    };
    let mode = receiver.info().mode.clone();
    let frame_len = receiver.info().max_frame().min(sender.info().max_frame());
    let payload = frame_len - HEADERS;
    let header = {
        let mut out = Vec::with_capacity(frame_len);
        PacketBuilder::ethernet2(from.0, to.0)
            .ipv4(from.1.octets(), to.1.octets(), 64)
            .udp(PORT, PORT)
            .write(&mut out, &vec![0; payload])
            .expect("writing to a Vec cannot fail");
        // UDP checksum 0: none (RFC 768); the payload is left as the UMEM frame holds it.
        out[40..42].copy_from_slice(&[0, 0]);
        out.truncate(HEADERS);
        out
    };

    let stop_tx = Arc::new(AtomicBool::new(false));
    let stop_rx = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    // Stop both threads however this function ends.
    let _stop = StopOnDrop([stop_tx.clone(), stop_rx.clone()]);
    let rx = {
        let (stop, received) = (stop_rx.clone(), received.clone());
        std::thread::spawn(move || receive(receiver, frame_len, &stop, &received))
    };
    let tx = {
        let (stop, sent) = (stop_tx.clone(), sent.clone());
        std::thread::spawn(move || send(sender, &header, frame_len, &stop, &sent))
    };
    std::thread::sleep(warmup);
    let (t0, frames0) = (Instant::now(), received.load(Ordering::Relaxed));
    std::thread::sleep(duration);
    let (elapsed, frames) = (t0.elapsed(), received.load(Ordering::Relaxed) - frames0);
    stop_tx.store(true, Ordering::Relaxed);
    let sent_result = tx.join();
    std::thread::sleep(DRAIN);
    stop_rx.store(true, Ordering::Relaxed);
    let stats = rx.join().map_err(|_| BulkFloorError::Panicked)?;
    sent_result.map_err(|_| BulkFloorError::Panicked)?.map_err(BulkFloorError::Send)?;
    let (rx_ring_full, rx_dropped) = stats.map(|s| (s.rx_ring_full, s.rx_dropped)).unwrap_or_default();
    Ok(BulkFloorResult {
        mtu,
        payload,
        frames,
        elapsed,
        sent: sent.load(Ordering::Relaxed),
        received: received.load(Ordering::Relaxed),
        rx_ring_full,
        rx_dropped,
        mode,
    })
}

/// Count the floor's frames until `stop`; return the socket's drop counters.
fn receive(
    mut device: XdpDevice,
    frame_len: usize,
    stop: &AtomicBool,
    received: &AtomicU64,
) -> std::io::Result<bypass_io::xdp::XdpStatistics> {
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0;
        let _ = device.recv(64, &mut |frame| {
            if frame.len() == frame_len && frame[36..38] == PORT.to_be_bytes() {
                n += 1;
            }
        });
        if n > 0 {
            received.fetch_add(n, Ordering::Relaxed);
        }
    }
    device.statistics()
}

/// Queue frames of `frame_len` bytes, writing `header` into each, until `stop`, kicking the
/// kernel once per batch.
fn send(
    mut device: XdpDevice,
    header: &[u8],
    frame_len: usize,
    stop: &AtomicBool,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0;
        for _ in 0..TX_BATCH {
            let queued = device.send(&mut |buf| {
                buf[..header.len()].copy_from_slice(header);
                frame_len
            })?;
            if !queued {
                break;
            }
            n += 1;
        }
        device.flush()?;
        sent.fetch_add(n, Ordering::Relaxed);
    }
    Ok(())
}

/// Set the flags when dropped.
struct StopOnDrop([Arc<AtomicBool>; 2]);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for flag in &self.0 {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// Both interfaces of a lab at one MTU while it lives, at their previous MTU after.
struct MtuGuard<'a> {
    lab: &'a Lab,
    /// The MTUs to set back (bypass side, peer side), if changed.
    previous: Option<(u32, u32)>,
}

impl<'a> MtuGuard<'a> {
    fn set(lab: &'a Lab, mtu: u32) -> Result<MtuGuard<'a>, LabError> {
        let before = (
            link_mtu(&lab.ip_bypass(&["-o", "link", "show", "dev", &lab.bypass_if])?),
            link_mtu(&lab.ip_peer(&["-o", "link", "show", "dev", &lab.peer_if])?),
        );
        let (Some(b), Some(p)) = before else {
            return Err(LabError::InvalidConfig("`ip link show` printed no MTU".into()));
        };
        if (b, p) == (mtu, mtu) {
            return Ok(MtuGuard { lab, previous: None });
        }
        // Set back on the way out even if only the first interface took the new MTU.
        let guard = MtuGuard { lab, previous: Some((b, p)) };
        guard.apply(mtu, mtu)?;
        Ok(guard)
    }

    fn apply(&self, bypass: u32, peer: u32) -> Result<(), LabError> {
        let (b, p) = (bypass.to_string(), peer.to_string());
        self.lab.ip_bypass(&["link", "set", "dev", &self.lab.bypass_if, "mtu", &b])?;
        self.lab.ip_peer(&["link", "set", "dev", &self.lab.peer_if, "mtu", &p])?;
        Ok(())
    }
}

impl Drop for MtuGuard<'_> {
    fn drop(&mut self) {
        if let Some((b, p)) = self.previous
            && let Err(e) = self.apply(b, p)
        {
            eprintln!("bulk floor: cannot set the MTU back to {b}/{p}: {e}");
        }
    }
}

/// Return the MTU in a line of `ip -o link show` (`... mtu 1500 qdisc ...`).
fn link_mtu(line: &str) -> Option<u32> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == "mtu")?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mtu_is_read_from_ip_link() {
        let line = "7: bx0@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 65000 qdisc noqueue state UP mode DEFAULT";
        assert_eq!(link_mtu(line), Some(65000));
        assert_eq!(link_mtu("7: bx0: <UP> qdisc noqueue"), None);
        assert_eq!(link_mtu("7: bx0: mtu"), None);
        assert_eq!(link_mtu("7: bx0: mtu many"), None);
    }

    #[test]
    fn the_rate_counts_received_payload_over_the_window() {
        let r = BulkFloorResult {
            mtu: 1500,
            payload: 1472,
            frames: 1_000_000,
            elapsed: Duration::from_secs(2),
            sent: 1_200_000,
            received: 1_100_000,
            rx_ring_full: 0,
            rx_dropped: 0,
            mode: String::new(),
        };
        // 1e6 frames of 1472 bytes in 2 s: 5.888 Gbit/s.
        assert!((r.gbit_per_s() - 5.888).abs() < 1e-9);
        assert_eq!(r.lost(), 100_000);
    }
}
