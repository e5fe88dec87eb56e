//! A TCP echo server on tokio over the bypass stack: the same code as over `tokio::net`,
//! with the listener and streams of `bypass_runtime::tokio`. The stack runs on tokio's own
//! workers (a driver task polls it between the tasks it wakes).
//!
//! ```sh
//! sudo bypass lab up
//! sudo ip netns exec bypass-a cargo run --release --example tokio_echo -- bx0 10.77.0.2 7
//! sudo ip netns exec bypass-b nc 10.77.0.2 7
//! ```
//!
//! Arguments: INTERFACE ADDRESS PORT [packet]. Needs root. `packet` uses AF_PACKET instead
//! of AF_XDP.

use std::net::Ipv4Addr;

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_runtime::tokio::TcpListener;
use bypass_runtime::{Runtime, RuntimeOptions};
use bypass_stack::StackConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (iface, ip, port) = match &args[1..] {
        [iface, ip, port, ..] => (iface.as_str(), ip.parse::<Ipv4Addr>()?, port.parse::<u16>()?),
        _ => return Err("usage: tokio_echo INTERFACE ADDRESS PORT [packet]".into()),
    };
    let device: Box<dyn Device + Send> = if args.get(4).is_some_and(|b| b == "packet") {
        Box::new(PacketDevice::open(iface)?)
    } else {
        Box::new(XdpDevice::open(XdpConfig::new(iface, ip))?)
    };
    println!("echo on {ip}:{port} via {}", device.info().mode);
    let runtime = Runtime::start(vec![device], StackConfig::new(ip, 24, rand_secret()), RuntimeOptions::default())?;
    let listener = TcpListener::bind(&runtime, port)?;
    loop {
        let (mut stream, peer) = listener.accept().await?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) => break, // the client closed; dropping the stream closes ours
                    Ok(n) if stream.write_all(&buf[..n]).await.is_ok() => {}
                    Ok(_) | Err(_) => break,
                }
            }
            eprintln!("{peer} done");
        });
    }
}

fn rand_secret() -> [u8; 16] {
    use std::io::Read;
    let mut key = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key)).ok();
    key
}
