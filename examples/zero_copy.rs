//! A TCP echo server that reads and writes the connection buffers in place, with
//! `Stack::recv_with` and `Stack::send_with` instead of `read` and `write`.
//!
//! ```sh
//! sudo bypass lab up
//! sudo ip netns exec bypass-a cargo run --release --example zero_copy -- bx0 10.77.0.2 7
//! sudo ip netns exec bypass-b python3 -c \
//!     'import socket; s=socket.create_connection(("10.77.0.2",7)); s.sendall(b"hi\n"); print(s.recv(9))'
//! ```
//!
//! Arguments: INTERFACE ADDRESS PORT [packet] [--pcap FILE]. Needs root. `packet` uses
//! AF_PACKET instead of AF_XDP; `--pcap` records every frame, annotated, for Wireshark.
//!
//! What is copied: the stack lends one buffer at a time (each closure holds the stack), so
//! the bytes cannot go from the receive buffer to the send buffer in one copy; they cross
//! through one small array, read from the receive buffer without consuming them and written
//! into the send buffer from there, and only what the send buffer took is then consumed.
//! What is not: no buffer of the application's holds a client's bytes between turns, as
//! `echo_server`'s queue does. Bytes the send buffer cannot take yet wait in the receive
//! buffer, and its window holds the client back.

use std::io::{self, ErrorKind};
use std::net::Ipv4Addr;

use bypass_device::{Device, PcapNgCapture};
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_stack::{SocketId, Stack, StackConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let pcap = take_pcap_flag(&mut args);
    let (iface, ip, port) = match &args[1..] {
        [iface, ip, port, ..] => (iface.as_str(), ip.parse::<Ipv4Addr>()?, port.parse::<u16>()?),
        _ => return Err("usage: zero_copy INTERFACE ADDRESS PORT [packet]".into()),
    };
    let device: Box<dyn Device> = if args.get(4).is_some_and(|b| b == "packet") {
        Box::new(PacketDevice::open(iface)?)
    } else {
        Box::new(XdpDevice::open(XdpConfig::new(iface, ip))?)
    };
    println!("echo in place on {ip}:{port} via {}", device.info().mode);

    let mut stack = Stack::new(device, StackConfig::new(ip, 24, rand_secret()));
    if let Some(path) = pcap {
        let capture = PcapNgCapture::create(path.as_ref(), iface, "zero_copy example", stack.epoch())?;
        stack.set_capture(Box::new(capture));
    }
    let listener = stack.listen(port)?;
    let mut conns = Vec::new();
    let mut carry = [0u8; 16 * 1024];
    loop {
        stack.poll_wait(None)?; // sleep in poll(2) until a frame or a timer
        while let Some(id) = stack.accept(listener) {
            conns.push(id);
        }
        conns.retain(|&id| match echo(&mut stack, id, &mut carry) {
            Ok(true) => true,
            _ => {
                stack.close(id); // the client closed, or the connection failed
                false
            }
        });
    }
}

/// Echo what `id` has received as far as its send buffer takes it; return whether the
/// connection stays open (`false` at the end of the stream).
fn echo<D: Device>(stack: &mut Stack<D>, id: SocketId, carry: &mut [u8]) -> io::Result<bool> {
    loop {
        // Look at the front of the receive buffer, consuming nothing yet.
        let seen = stack.recv_with(id, |data| {
            let n = data.len().min(carry.len());
            carry[..n].copy_from_slice(&data[..n]);
            (0, n)
        });
        let n = match seen {
            Ok(0) => return Ok(false), // the empty slice: the end of the stream
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        };
        let queued = stack.send_with(id, |room| {
            let k = n.min(room.len());
            room[..k].copy_from_slice(&carry[..k]);
            (k, k)
        });
        match queued {
            Ok(k) => stack.recv_with(id, |_| (k, ()))?, // consume what is on its way back
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
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
