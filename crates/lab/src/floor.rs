//! The floor: raw AF_XDP frames bounced between the two namespaces of a lab, no TCP.
//!
//! One side sends a small UDP/IPv4 frame, the other side's AF_XDP socket turns it around
//! (MACs, addresses and ports swapped), and the round trip is timed; both sides busy-poll.
//! No userspace TCP stack can answer faster over the same veth pair, so this is the
//! reference every other latency figure is read against.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::xdp::{XdpConfig, XdpDevice, XdpError};
use etherparse::PacketBuilder;

use crate::testlab::Lab;

/// UDP port the floor's frames use (both ends).
const PORT: u16 = 9;

/// What a floor run measured.
#[derive(Clone, Debug)]
pub struct FloorResult {
    /// Round-trip times of the rounds that came back, in order.
    pub rtts: Vec<Duration>,
    /// Rounds whose frame did not come back within the timeout.
    pub lost: usize,
    /// The AF_XDP mode obtained on the bypass side (copy or zero-copy, driver or generic).
    pub mode: String,
}

/// Bounce `rounds` frames of `payload` bytes between the lab's peer side (sender) and bypass
/// side (reflector), both over AF_XDP with busy polling, for at most `limit` in total.
///
/// While it runs, the peer kernel does not see IPv4 for its own address (the peer side's
/// XDP program takes it); both programs are gone when this returns.
pub fn xdp_pingpong(lab: &Lab, rounds: usize, payload: usize, limit: Duration) -> Result<FloorResult, XdpError> {
    let mut bypass_cfg = XdpConfig::new(&lab.bypass_if, lab.bypass_ip);
    bypass_cfg.busy_poll = true;
    let mut peer_cfg = XdpConfig::new(&lab.peer_if, lab.peer_ip);
    peer_cfg.busy_poll = true;
    let reflector = lab.in_bypass(|| XdpDevice::open(bypass_cfg))?;
    let sender = lab.in_peer(|| XdpDevice::open(peer_cfg))?;
    let mode = reflector.info().mode.clone();
    let stop = Arc::new(AtomicBool::new(false));

    let reflect = {
        let stop = stop.clone();
        std::thread::spawn(move || reflect(reflector, &stop))
    };
    let frame = {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(lab.peer_mac, lab.bypass_mac)
            .ipv4(lab.peer_ip.octets(), lab.bypass_ip.octets(), 64)
            .udp(PORT, PORT)
            .write(&mut out, &vec![0x5a; payload.max(8)])
            .expect("writing to a Vec cannot fail");
        out
    };
    let result = ping(sender, frame, rounds, limit);
    stop.store(true, Ordering::Relaxed);
    let _ = reflect.join();
    let (rtts, lost) = result;
    Ok(FloorResult { rtts, lost, mode })
}

/// Turn every frame around until `stop`: each batch is copied into one scratch buffer kept
/// across batches (no allocation per frame, which would slow the floor and flatter every
/// ratio read against it), its addresses and ports swapped there, and sent back.
fn reflect(mut device: XdpDevice, stop: &AtomicBool) {
    let mut scratch: Vec<u8> = Vec::with_capacity(64 * 2048);
    let mut spans: Vec<std::ops::Range<usize>> = Vec::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        scratch.clear();
        spans.clear();
        let _ = device.recv(64, &mut |frame| {
            if frame.len() >= 42 {
                let start = scratch.len();
                scratch.extend_from_slice(frame);
                swap(&mut scratch[start..]);
                spans.push(start..scratch.len());
            }
        });
        if spans.is_empty() {
            continue;
        }
        for span in spans.drain(..) {
            let f = &scratch[span];
            let _ = device.send(&mut |buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            });
        }
        let _ = device.flush();
    }
}

/// Swap the Ethernet addresses, IPv4 addresses and UDP ports of `f` in place (checksums
/// stay valid: the sums are over the same words).
fn swap(f: &mut [u8]) {
    for (a, b) in [(0, 6), (26, 30)] {
        let len = if a == 0 { 6 } else { 4 };
        for i in 0..len {
            f.swap(a + i, b + i);
        }
    }
    f.swap(34, 36);
    f.swap(35, 37);
}

/// Send `frame` `rounds` times, each time waiting for it to come back (sequence number in
/// the first payload bytes); return the round trips and how many were lost.
fn ping(mut device: XdpDevice, mut frame: Vec<u8>, rounds: usize, limit: Duration) -> (Vec<Duration>, usize) {
    let mut rtts = Vec::with_capacity(rounds);
    let mut lost = 0;
    let start = Instant::now();
    for round in 0..rounds as u64 {
        if start.elapsed() >= limit {
            break;
        }
        frame[42..50].copy_from_slice(&round.to_be_bytes());
        let sent_at = Instant::now();
        let _ = device.send(&mut |buf| {
            buf[..frame.len()].copy_from_slice(&frame);
            frame.len()
        });
        let _ = device.flush();
        let mut back = false;
        while !back && sent_at.elapsed() < Duration::from_millis(100) {
            let _ = device.recv(64, &mut |f| {
                if f.len() >= 50 && f[42..50] == round.to_be_bytes() {
                    back = true;
                }
            });
        }
        if back {
            rtts.push(sent_at.elapsed());
        } else {
            lost += 1;
        }
    }
    (rtts, lost)
}
