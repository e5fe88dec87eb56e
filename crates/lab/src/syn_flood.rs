//! A SYN flood from a lab's peer namespace: bare SYNs (RFC 9293 3.5, the first step of the
//! handshake, and nothing after it) sent through an AF_PACKET socket on the peer's interface,
//! from random source ports and sequence numbers of a spoofed address, as fast as one thread
//! can send them or at a set pace, until stopped.
//!
//! The spoofed address is one of the lab's subnet that nobody holds, so nobody answers the
//! SYN-ACKs (nor ARP for it): half-open connections stay until the server's SYN queue is full,
//! and the server answers the rest with SYN cookies (RFC 4987 3.6), as under a flood from
//! spoofed sources. From the peer's own address, the peer's kernel would reset every SYN-ACK
//! and free the queue.
//!
//! ```no_run
//! use std::time::Duration;
//! use bypass_lab::syn_flood::{FloodConfig, SynFlood};
//! use bypass_lab::testlab::Lab;
//!
//! let lab = Lab::create("flood").unwrap();
//! let config = FloodConfig::new(&lab, lab.bypass_ip, 7);
//! let flood = SynFlood::start(&lab, config).unwrap();
//! std::thread::sleep(Duration::from_secs(1));
//! let report = flood.stop().unwrap();
//! println!("{} SYNs in {:?}", report.sent, report.elapsed);
//! ```

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::PacketDevice;
use etherparse::PacketBuilder;

use crate::testlab::{Lab, LabError, pin_to_cpu, spawn_in_namespace};

/// The host part of the default spoofed source address, in the lab's subnet.
pub const SPOOFED_HOST: u8 = 250;

/// SYNs queued per flush (one `sendmmsg(2)` of the AF_PACKET device each).
const BATCH: u64 = 64;

/// What to flood, and how.
#[derive(Clone, Debug)]
pub struct FloodConfig {
    /// Where the SYNs go.
    pub dst: Ipv4Addr,
    /// The port they go to.
    pub port: u16,
    /// The spoofed source address.
    pub src: Ipv4Addr,
    /// The frames' Ethernet source (the peer's interface) and destination (the server's).
    pub src_mac: [u8; 6],
    /// The server's MAC address.
    pub dst_mac: [u8; 6],
    /// SYNs per second, or `None` for as many as the thread can send.
    pub rate: Option<u64>,
    /// Keep the sending thread on this CPU, so the flood stands in for other machines and
    /// takes one core, not a share of every core.
    pub cpu: Option<usize>,
    /// Seed of the source ports and sequence numbers.
    pub seed: u64,
    /// Stop on its own after this long, whatever happens to the caller.
    pub limit: Duration,
}

impl FloodConfig {
    /// Return an unpaced flood of `dst:port` from the lab's peer, from host [`SPOOFED_HOST`]
    /// of the peer's subnet, to the bypass side's MAC address, for at most 60 s.
    pub fn new(lab: &Lab, dst: Ipv4Addr, port: u16) -> FloodConfig {
        let [a, b, c, _] = lab.peer_ip.octets();
        FloodConfig {
            dst,
            port,
            src: Ipv4Addr::new(a, b, c, SPOOFED_HOST),
            src_mac: lab.peer_mac,
            dst_mac: lab.bypass_mac,
            rate: None,
            cpu: None,
            seed: 0x5eed_f100d,
            limit: Duration::from_secs(60),
        }
    }
}

/// What a flood sent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FloodReport {
    /// SYNs handed to the peer's interface.
    pub sent: u64,
    /// How long the flood lasted.
    pub elapsed: Duration,
}

impl FloodReport {
    /// Return SYNs per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A flood under way on a thread in the peer's namespace; [`SynFlood::stop`] ends it.
pub struct SynFlood {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Result<FloodReport, String>, LabError>>>,
}

impl SynFlood {
    /// Start flooding from `lab`'s peer namespace, out of its interface.
    pub fn start(lab: &Lab, config: FloodConfig) -> Result<SynFlood, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let iface = lab.peer_if.clone();
        let thread = spawn_in_namespace(&lab.peer_ns, {
            let stop = stop.clone();
            move || flood(&iface, &config, &stop)
        })
        .map_err(|e| format!("cannot start the SYN flood: {e}"))?;
        Ok(SynFlood { stop, thread: Some(thread) })
    }

    /// Stop the flood and return what it sent, or why it failed.
    pub fn stop(mut self) -> Result<FloodReport, String> {
        self.finish()
    }

    fn finish(&mut self) -> Result<FloodReport, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(thread) => match thread.join() {
                Ok(Ok(report)) => report,
                Ok(Err(e)) => Err(format!("the SYN flood could not start: {e}")),
                Err(_) => Err("the SYN flood's thread panicked".into()),
            },
            None => Err("the SYN flood was already stopped".into()),
        }
    }
}

impl Drop for SynFlood {
    /// Stop the flood on every path, so no thread outlives its lab.
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.finish();
        }
    }
}

/// A small xorshift generator: source ports and sequence numbers that differ from SYN to SYN
/// (the flood's only need; not for anything secret).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Send SYNs out of `iface` until `stop` (or the config's limit); return how many and for
/// how long.
fn flood(iface: &str, config: &FloodConfig, stop: &AtomicBool) -> Result<FloodReport, String> {
    if let Some(cpu) = config.cpu {
        pin_to_cpu(cpu).map_err(|e| format!("cannot keep the flood on CPU {cpu}: {e}"))?;
    }
    let mut dev = PacketDevice::open(iface).map_err(|e| format!("cannot open the flood's AF_PACKET socket: {e}"))?;
    let mut rng = Rng(config.seed | 1);
    let started = Instant::now();
    let mut sent = 0u64;
    let mut frame = Vec::with_capacity(64);
    let io = |e: std::io::Error| format!("the flood's AF_PACKET socket failed: {e}");
    while !stop.load(Ordering::Relaxed) && started.elapsed() < config.limit {
        let room = match config.rate {
            Some(rate) => {
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                if due <= sent {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                (due - sent).min(BATCH)
            }
            None => BATCH,
        };
        for _ in 0..room {
            let r = rng.next();
            frame.clear();
            PacketBuilder::ethernet2(config.src_mac, config.dst_mac)
                .ipv4(config.src.octets(), config.dst.octets(), 64)
                .tcp(1024 + (r % 64_000) as u16, config.port, (r >> 16) as u32, 64_240)
                .syn()
                .write(&mut frame, &[])
                .map_err(|e| format!("cannot build a SYN: {e}"))?;
            if !dev
                .send(&mut |buf| {
                    buf[..frame.len()].copy_from_slice(&frame);
                    frame.len()
                })
                .map_err(io)?
            {
                break; // the staging area is full: flush, then go on
            }
            sent += 1;
        }
        dev.flush().map_err(io)?;
        // Drain what the socket received (everything on the interface), so its ring never
        // matters.
        dev.recv(usize::MAX, &mut |_| {}).map_err(io)?;
    }
    dev.flush().map_err(io)?;
    Ok(FloodReport { sent, elapsed: started.elapsed() })
}
