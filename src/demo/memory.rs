//! The fallback row without root: our stack at both ends, joined by the in-memory link
//! (`bypass_io::MemoryLink`, real time) inside this process. No kernel is on the path, so the
//! row shows what the stack itself costs; it runs the one-connection request/response
//! workloads only.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_io::MemoryDevice;
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::State;

use super::kernel::{ClientPlan, ClientResult, Shared, histogram, wait_ready};
use super::measure::{DONE, MEASURING, Usage};

/// The client's address on the in-memory link (the server is `MEMORY_SERVER_IP`).
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);

/// Run one-connection request/response from our stack over `device`, spinning.
pub fn client(
    device: MemoryDevice,
    server: SocketAddrV4,
    size: usize,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    wait_ready(shared)?;
    let mut stack = Stack::new(device, StackConfig::new(CLIENT_IP, 24, super::stack::secret()));
    let io = |e: std::io::Error| format!("our client: {e}");
    let id = stack.connect(server).map_err(|e| format!("our client: connect to {server}: {e}"))?;
    stack.set_nodelay(id, true);
    let deadline = Instant::now() + Duration::from_secs(3);
    while matches!(stack.state(id), State::SynSent | State::SynReceived) {
        if Instant::now() > deadline {
            return Err(format!("our client: no answer from {server} within 3 s"));
        }
        stack.poll().map_err(io)?;
    }
    if stack.state(id) != State::Established {
        return Err(format!("our client: connection to {server} failed ({:?})", stack.state(id)));
    }
    let msg: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
    let mut buf = vec![0u8; size];
    let mut exchange = |stack: &mut Stack<MemoryDevice>| -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut sent, mut got) = (0, 0);
        while got < size {
            if sent < size {
                match stack.write(id, &msg[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io(e)),
                }
            }
            stack.poll().map_err(io)?;
            match stack.read(id, &mut buf[got..]) {
                Ok(0) => return Err("our client: the server closed the connection".into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(io(e)),
            }
            if Instant::now() > deadline {
                return Err("our client: no echo within 2 s".into());
            }
        }
        if buf != msg {
            return Err("our client: the echo differs from what was sent".into());
        }
        Ok(())
    };
    let warm_end = Instant::now() + plan.warmup;
    while Instant::now() < warm_end && !interrupted.load(Ordering::Relaxed) {
        exchange(&mut stack)?;
    }
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), Usage::now());
    let end = start + plan.duration;
    let (mut now, mut requests) = (start, 0u64);
    let mut latency = histogram();
    while now < end && !interrupted.load(Ordering::Relaxed) {
        exchange(&mut stack)?;
        let t = Instant::now();
        latency.saturating_record((t - now).as_nanos() as u64);
        now = t;
        requests += 1;
    }
    let elapsed = now - start;
    let usage = Usage::now().since(&start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    let _ = exchange(&mut stack);
    stack.close(id);
    for _ in 0..100 {
        stack.poll().map_err(io)?;
    }
    Ok(ClientResult { latency, units: requests, elapsed, usage })
}
