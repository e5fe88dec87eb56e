//! A TCP echo server on the runtime: one application thread per connection, plain
//! `std::io::Read` and `Write`; the stack of each queue runs in those threads' calls (the
//! runtime's in-thread mode, with a helper thread per stack for while none is inside).
//!
//! ```sh
//! sudo bypass lab up --queues 2
//! sudo ip netns exec bypass-a cargo run --release --example threaded_echo -- bx0 10.77.0.2 7 --shards 2
//! sudo ip netns exec bypass-b nc 10.77.0.2 7
//! ```
//!
//! Arguments: INTERFACE ADDRESS PORT [packet] [--shards N]. Needs root. `packet` uses
//! AF_PACKET (one stack) instead of AF_XDP; `--shards N` opens queues 0..N, a stack on each.

use std::io::{Read, Write};
use std::net::Ipv4Addr;

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_runtime::{Runtime, RuntimeOptions};
use bypass_stack::StackConfig;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let shards = take_flag(&mut args, "--shards").map_or(Ok(1), |n| n.parse::<u32>())?;
    let (iface, ip, port) = match &args[1..] {
        [iface, ip, port, ..] => (iface.as_str(), ip.parse::<Ipv4Addr>()?, port.parse::<u16>()?),
        _ => return Err("usage: threaded_echo INTERFACE ADDRESS PORT [packet] [--shards N]".into()),
    };
    let devices: Vec<Box<dyn Device + Send>> = if args.get(4).is_some_and(|b| b == "packet") {
        vec![Box::new(PacketDevice::open(iface)?)]
    } else {
        let queues: Vec<u32> = (0..shards).collect();
        XdpDevice::open_queues(XdpConfig::new(iface, ip), &queues)?.into_iter().map(|d| Box::new(d) as _).collect()
    };
    println!("echo on {ip}:{port} via {} ({} stacks)", devices[0].info().mode, devices.len());
    let runtime = Runtime::start(devices, StackConfig::new(ip, 24, rand_secret()), RuntimeOptions::default())?;
    let listener = runtime.listen(port)?;
    for stream in listener.incoming() {
        let mut stream = stream?;
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            // Until the client closes (Ok(0)) or the connection fails; dropping closes ours.
            while let Ok(n @ 1..) = stream.read(&mut buf) {
                if stream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
    }
    Ok(())
}

/// Remove `NAME VALUE` from the arguments and return VALUE.
fn take_flag(args: &mut Vec<String>, name: &str) -> Option<String> {
    let at = args.iter().position(|a| a == name)?;
    let value = args.get(at + 1).cloned();
    args.drain(at..(at + 2).min(args.len()));
    value
}

fn rand_secret() -> [u8; 16] {
    let mut key = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key)).ok();
    key
}
