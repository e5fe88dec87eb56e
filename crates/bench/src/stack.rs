//! Our stack as the server: the rx -> serve -> tx loop of `bypass echo`, spinning; it
//! echoes (request/response, connection rate) or discards (bulk).

use std::io::ErrorKind;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_stack::{ListenerId, SocketId, Stack, StackConfig};
use bypass_tcp::Event;

use super::Workload;
use super::kernel::{ServerResult, Shared};
use super::measure::{Own, Window};
use crate::echo::EchoServer;

/// Describe how `stack`'s frames went, for `RUST_LOG=debug`: received, sent, in how many
/// kicks of the device, and its system calls.
pub fn traffic<D: Device>(stack: &mut Stack<D>) -> String {
    let (rx, tx) = (stack.counters().rx_frames, stack.counters().tx_frames);
    let kicks = stack.device_mut().device_counters().into_iter().find(|(n, _)| *n == "tx_kicks").map_or(0, |c| c.1);
    format!("{rx} frames received, {tx} sent in {kicks} kicks, {} device calls", stack.device().syscalls())
}

/// A bulk server: discards everything it reads (`source: false`) or writes without end
/// (`source: true`); closes when the client does.
struct Bulk {
    listener: ListenerId,
    conns: Vec<SocketId>,
    buf: Vec<u8>,
    source: bool,
    /// Read and write in place (`recv_with`, `send_with`) instead of through `buf`.
    in_place: bool,
}

impl Bulk {
    fn service<D: Device>(&mut self, stack: &mut Stack<D>) {
        while let Some(id) = stack.accept(self.listener) {
            self.conns.push(id);
        }
        let mut gone = Vec::new();
        while let Some((id, event)) = stack.poll_event() {
            if matches!(event, Event::Reset | Event::TimedOut | Event::Unreachable | Event::Closed) {
                gone.push(id);
            }
        }
        let (buf, in_place) = (&mut self.buf, self.in_place);
        if self.source {
            self.conns.retain(|&id| {
                if gone.contains(&id) {
                    stack.close(id);
                    return false;
                }
                loop {
                    let written = if in_place {
                        // The bytes are made where they will be sent from: 0x5a, as `buf` holds.
                        stack.send_with(id, |space| {
                            space.fill(0x5a);
                            (space.len(), space.len())
                        })
                    } else {
                        stack.write(id, &buf[..64 * 1024])
                    };
                    match written {
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                        Err(_) => {
                            stack.close(id);
                            return false;
                        }
                    }
                }
            });
            return;
        }
        self.conns.retain(|&id| {
            loop {
                let read = if in_place {
                    // Discarded where they lie: consumed without a copy.
                    stack.recv_with(id, |bytes| (bytes.len(), bytes.len()))
                } else {
                    stack.read(id, buf)
                };
                match read {
                    Ok(0) => {
                        stack.close(id);
                        return false;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(_) => {
                        stack.close(id);
                        return false;
                    }
                }
            }
        });
    }
}

enum Service {
    Echo(EchoServer),
    Bulk(Bulk),
}

/// Serve `workload` on `ip:port` over `device`, spinning, until `shared.stop`.
pub fn server<D: Device>(
    device: D,
    ip: impl Into<IpAddr>,
    prefix: u8,
    port: u16,
    workload: Workload,
    shared: &Shared,
) -> Result<ServerResult, String> {
    server_with(device, ip, prefix, port, workload, false, shared)
}

/// As [`server`]; with `in_place`, the bulk streams are read and written in place in the TCP
/// buffers (`recv_with`, `send_with`: row 5z).
pub fn server_with<D: Device>(
    device: D,
    ip: impl Into<IpAddr>,
    prefix: u8,
    port: u16,
    workload: Workload,
    in_place: bool,
    shared: &Shared,
) -> Result<ServerResult, String> {
    let mode = device.info().mode.clone();
    let mut stack = Stack::new(device, StackConfig::new(ip, prefix, secret()));
    let listen_err = |e: bypass_stack::ListenError| format!("our stack: listen on {port}: {e}");
    let mut service = if workload.is_bulk() {
        let listener = stack.listen(port).map_err(listen_err)?;
        let source = workload == Workload::BulkDown;
        Service::Bulk(Bulk { listener, conns: Vec::new(), buf: vec![0x5a; 256 * 1024], source, in_place })
    } else {
        Service::Echo(EchoServer::new(&mut stack, port, None).map_err(listen_err)?)
    };
    let io = |e: std::io::Error| format!("our stack: packet I/O failed: {e}");
    // A running stack like any other: `bypass ss`, `bypass stat` and `bypass capture` reach
    // it (and the demo's figures include the endpoint's cost, a flag check per turn).
    let mut endpoint = bypass_control::Server::for_stack(&mut stack, 0)
        .map_err(|e| log::warn!("{e}; the demo's server runs without a control endpoint"))
        .ok();
    shared.ready.store(true, Ordering::SeqCst);
    let mut window = Window::default();
    let mut turns = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        turns += 1;
        window.observe(&shared.phase, || own(&stack));
        stack.poll_rx().map_err(io)?;
        match &mut service {
            Service::Echo(echo) => echo.service(&mut stack),
            Service::Bulk(bulk) => bulk.service(&mut stack),
        }
        if let Some(endpoint) = &mut endpoint {
            endpoint.poll(&mut stack);
        }
        stack.poll_tx().map_err(io)?;
    }
    window.observe(&shared.phase, || own(&stack));
    window.finish(own(&stack));
    log::debug!("our stack: {turns} turns of the loop, {}", traffic(&mut stack));
    // Let the client's FIN be answered, then drop whatever is left.
    if let Service::Echo(echo) = &mut service {
        echo.shutdown(&mut stack);
    }
    let deadline = Instant::now() + Duration::from_millis(100);
    while Instant::now() < deadline && stack.interface().connection_count() > 0 {
        stack.poll_wait(Some(Duration::from_millis(5))).map_err(io)?;
        while stack.poll_event().is_some() {}
    }
    stack.abort_all();
    stack.poll().map_err(io)?;
    let (usage, copied) = window.delta().ok_or("our stack: the client's measurement window was not seen")?;
    Ok(ServerResult { usage, copied: Some(copied), mode, file: None })
}

/// Return the stack's bytes-copied counter and its device's system calls.
pub(crate) fn own<D: Device>(stack: &Stack<D>) -> Own {
    Own { copied: stack.counters().bytes_copied, syscalls: stack.device().syscalls() }
}

/// Return 16 bytes from the kernel's random source (ISN and SYN-cookie key).
pub fn secret() -> [u8; 16] {
    use std::io::Read;
    let mut buf = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut buf);
    }
    buf
}
