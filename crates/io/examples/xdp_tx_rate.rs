//! Measure the AF_XDP transmit rate into a lab veth pair (root; creates and deletes its own
//! namespaces): `cargo run -p bypass-io --release --example xdp_tx_rate`.
//!
//! Sends 60-byte UDP frames from the bypass side, in batches of `BATCH` (default 64) per
//! flush. By default they go to the peer kernel's MAC, which processes and drops them (closed
//! port); with `OTHER_MAC=1` they go to an unknown MAC, which the peer discards at once, so the
//! figure shows the sending side's own cost.

use std::time::Instant;

use bypass_device::Device;
use bypass_io::xdp::{XdpConfig, XdpDevice, XdpMode};
use bypass_lab::testlab::Lab;

const FRAMES: u64 = 2_000_000;

fn main() {
    let batch: u64 = std::env::var("BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let lab = Lab::create("txrate").unwrap_or_else(|e| panic!("{e}"));
    let dst_mac = if std::env::var("OTHER_MAC").is_ok() { [0x02, 0, 0, 0, 0, 0x99] } else { lab.peer_mac };
    let mut frame = [0u8; 60];
    frame[..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&lab.bypass_mac);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    // IPv4 10.77.0.2 -> 10.77.0.1 (checksum left 0: the receiver drops these anyway), UDP 4000 -> 9.
    frame[14..34].copy_from_slice(&[0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 2, 10, 77, 0, 1]);
    frame[34..42].copy_from_slice(&[0x0f, 0xa0, 0x00, 0x09, 0, 26, 0, 0]);

    for mode in [XdpMode::Driver, XdpMode::Generic] {
        let config = XdpConfig { mode, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) };
        let mut dev = lab.in_bypass(|| XdpDevice::open(config)).unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        let mut sent = 0;
        while sent < FRAMES {
            let mut queued = 0;
            let mut fill = |buf: &mut [u8]| {
                buf[..frame.len()].copy_from_slice(&frame);
                frame.len()
            };
            while queued < batch && dev.send(&mut fill).expect("send") {
                queued += 1;
            }
            dev.flush().expect("flush");
            sent += queued;
        }
        let rate = FRAMES as f64 / start.elapsed().as_secs_f64() / 1e6;
        println!("{}: {rate:.2} Mpps (batch {batch})", dev.info().mode);
    }
}
