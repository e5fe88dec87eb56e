//! A TCP client on the bypass stack: connect, send a message, read the echo, close.
//!
//! ```sh
//! sudo bypass lab up
//! sudo ip netns exec bypass-b python3 -m http.server 8000 &   # or any TCP server in the peer
//! sudo ip netns exec bypass-a cargo run --release --example client -- bx0 10.77.0.2 10.77.0.1:7 hello
//! ```
//!
//! Arguments: INTERFACE OUR-ADDRESS SERVER:PORT MESSAGE [--pcap FILE]. Needs root. Uses the blocking
//! `std::io::Read`/`Write` adapter, which drives the stack while it waits.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_device::PcapNgCapture;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_stack::{Stack, StackConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let pcap = args.iter().position(|a| a == "--pcap").map(|at| {
        let file = args.get(at + 1).cloned().unwrap_or_default();
        args.drain(at..(at + 2).min(args.len()));
        file
    });
    let [_, iface, ip, server, message] = args.as_slice() else {
        return Err("usage: client INTERFACE OUR-ADDRESS SERVER:PORT MESSAGE [--pcap FILE]".into());
    };
    let ip: Ipv4Addr = ip.parse()?;
    let server: SocketAddrV4 = server.parse()?;
    let device = XdpDevice::open(XdpConfig::new(iface, ip))?;
    let mut stack = Stack::new(device, StackConfig::new(ip, 24, [0x5a; 16]));
    if let Some(path) = pcap {
        let capture = PcapNgCapture::create(path.as_ref(), iface, "client example", stack.epoch())?;
        stack.set_capture(Box::new(capture));
    }

    let id = stack.connect(server)?; // ARP-resolves the server, then SYN
    let mut stream = stack.stream(id);
    stream.set_timeout(Some(Duration::from_secs(5)));
    stream.wait_established()?;
    stream.write_all(message.as_bytes())?;
    let mut reply = vec![0u8; message.len()];
    stream.read_exact(&mut reply)?;
    println!("{}", String::from_utf8_lossy(&reply));
    stack.close(id);
    // Let the FIN go out and the close complete.
    for _ in 0..50 {
        stack.poll_wait(Some(Duration::from_millis(10)))?;
    }
    println!("{}", stack.counters());
    Ok(())
}
