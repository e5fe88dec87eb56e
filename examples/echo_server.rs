//! A TCP echo server on the bypass stack, in a few dozen lines.
//!
//! ```sh
//! sudo bypass lab up
//! sudo ip netns exec bypass-a cargo run --release --example echo_server -- bx0 10.77.0.2 7
//! echo hello | sudo ip netns exec bypass-b python3 -c \
//!     'import socket,sys; s=socket.create_connection(("10.77.0.2",7)); s.sendall(b"hi\n"); print(s.recv(9))'
//! ```
//!
//! Arguments: INTERFACE ADDRESS PORT [packet] [--pcap FILE]. Needs root. `packet` uses AF_PACKET
//! instead of AF_XDP; `--pcap` records every frame, annotated, for Wireshark.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::Ipv4Addr;

use bypass_device::{Device, PcapNgCapture};
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_stack::{Stack, StackConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let pcap = take_pcap_flag(&mut args);
    let (iface, ip, port) = match &args[1..] {
        [iface, ip, port, ..] => (iface.as_str(), ip.parse::<Ipv4Addr>()?, port.parse::<u16>()?),
        _ => return Err("usage: echo_server INTERFACE ADDRESS PORT [packet]".into()),
    };
    let device: Box<dyn Device> = if args.get(4).is_some_and(|b| b == "packet") {
        Box::new(PacketDevice::open(iface)?)
    } else {
        Box::new(XdpDevice::open(XdpConfig::new(iface, ip))?)
    };
    println!("echo on {ip}:{port} via {}", device.info().mode);

    let mut stack = Stack::new(device, StackConfig::new(ip, 24, rand_secret()));
    if let Some(path) = pcap {
        let capture = PcapNgCapture::create(path.as_ref(), iface, "echo_server example", stack.epoch())?;
        stack.set_capture(Box::new(capture));
    }
    let listener = stack.listen(port)?;
    let mut pending: HashMap<_, Vec<u8>> = HashMap::new(); // bytes read, not yet written back
    let mut buf = vec![0u8; 65536];
    loop {
        stack.poll_wait(None)?; // sleep in poll(2) until a frame or a timer
        while let Some(id) = stack.accept(listener) {
            pending.insert(id, Vec::new());
        }
        pending.retain(|&id, queue| {
            loop {
                if !queue.is_empty() {
                    match stack.write(id, queue) {
                        Ok(n) => drop(queue.drain(..n)),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                        Err(_) => break,
                    }
                    continue;
                }
                match stack.read(id, &mut buf) {
                    Ok(0) => break, // client closed: close ours
                    Ok(n) => queue.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(_) => break,
                }
            }
            stack.close(id);
            false
        });
    }
}

/// Remove `--pcap FILE` from the arguments and return FILE.
fn take_pcap_flag(args: &mut Vec<String>) -> Option<String> {
    let at = args.iter().position(|a| a == "--pcap")?;
    let file = args.get(at + 1).cloned();
    args.drain(at..(at + 2).min(args.len()));
    file
}

fn rand_secret() -> [u8; 16] {
    let mut key = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key)).ok();
    key
}
