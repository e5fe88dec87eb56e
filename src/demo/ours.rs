//! Our stack as the client: every workload of the kernel client (`kernel::client`), over any
//! device. Rows 4b and 5b put it on AF_PACKET or AF_XDP in the peer namespace, facing our
//! server (our stack at both ends); row M joins it to our server by the in-memory link.
//!
//! It spins like the busy-polling kernel client: `poll`, then the application's reads and
//! writes, again and again. Its system calls are the device's (`Device::syscalls`: AF_XDP
//! wake-ups, `sendmmsg` batches) plus the read/write family of its thread (none).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bypass_stack::{Device, SocketId, Stack, StackConfig};
use bypass_tcp::State;

use super::Workload;
use super::kernel::{ClientPlan, ClientResult, Shared, histogram, wait_ready};
use super::measure::{DONE, MEASURING, Usage};

/// Most connections one connection-rate measurement opens (as the kernel client).
const MAX_CONNECTIONS: u64 = 20_000;
/// How long the client waits for anything before it gives up.
const LIMIT: Duration = Duration::from_secs(2);

/// Run `plan.workload` from our stack at `ip`/`prefix` over `device` against `plan.server`:
/// warm-up unrecorded, then `plan.duration` recorded. `interrupted` ends the run early.
pub fn client<D: Device>(
    device: D,
    ip: Ipv4Addr,
    prefix: u8,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let SocketAddr::V4(server) = plan.server else { return Err("our client: IPv4 only".into()) };
    let mut config = StackConfig::new(ip, prefix, super::stack::secret());
    // The connection-rate workload leaves every closed connection in TIME-WAIT (2 MSL):
    // give it every port above 1023, as the demo does for the kernel client.
    config.ephemeral_ports = (1024, 65535);
    let mut client = Client { stack: Stack::new(device, config), server };
    wait_ready(shared)?;
    match plan.workload {
        Workload::Rr { size, conns } => client.request_response(plan, size, conns, shared, interrupted),
        Workload::BulkUp => client.bulk_up(plan, shared, interrupted),
        Workload::BulkDown => client.bulk_down(plan, shared, interrupted),
        Workload::Connect => client.connect_rate(plan, shared, interrupted),
    }
}

struct Client<D: Device> {
    stack: Stack<D>,
    server: SocketAddrV4,
}

fn io(e: std::io::Error) -> String {
    format!("our client: {e}")
}

impl<D: Device> Client<D> {
    /// Send what the application wrote since the last call, then receive and process: the
    /// writes leave at once instead of after the next receive's system call.
    fn poll(&mut self) -> Result<(), String> {
        self.stack.poll_tx().map_err(io)?;
        self.stack.poll_rx().map(|_| ()).map_err(io)
    }

    /// The thread's usage plus the device's system calls, and the bytes the stack copied.
    fn usage(&self) -> (Usage, u64) {
        let mut usage = Usage::now();
        usage.syscalls += self.stack.device().syscalls();
        (usage, self.stack.counters().bytes_copied)
    }

    /// Return what was used since `start` (a [`usage`](Self::usage) sample).
    fn since(&self, start: (Usage, u64)) -> (Usage, Option<u64>) {
        let (usage, copied) = self.usage();
        (usage.since(&start.0), Some(copied - start.1))
    }

    /// Open `n` connections at once and wait until all are established.
    fn connect(&mut self, n: usize) -> Result<Vec<SocketId>, String> {
        let server = self.server;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.stack.connect(server).map_err(|e| format!("our client: connect to {server}: {e}"))?;
            self.stack.set_nodelay(id, true);
            ids.push(id);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while ids.iter().any(|&id| matches!(self.stack.state(id), State::SynSent | State::SynReceived)) {
            if Instant::now() > deadline {
                return Err(format!("our client: no answer from {server} within 3 s"));
            }
            self.poll()?;
        }
        if let Some(&id) = ids.iter().find(|&&id| self.stack.state(id) != State::Established) {
            return Err(format!("our client: connection to {server} failed ({:?})", self.stack.state(id)));
        }
        Ok(ids)
    }

    /// Write as much of `data[*sent..]` as fits; `WouldBlock` is not an error.
    fn write_some(&mut self, id: SocketId, data: &[u8], sent: &mut usize) -> Result<(), String> {
        match self.stack.write(id, &data[*sent..]) {
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        Ok(())
    }

    /// Read into `buf[*got..]` once; return whether `buf` is full.
    fn read_some(&mut self, id: SocketId, buf: &mut [u8], got: &mut usize) -> Result<bool, String> {
        match self.stack.read(id, &mut buf[*got..]) {
            Ok(0) => return Err("our client: the server closed the connection".into()),
            Ok(n) => *got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        Ok(*got == buf.len())
    }

    /// Close `ids` and poll until their FINs are acknowledged (or a moment passes).
    fn close_all(&mut self, ids: &[SocketId]) -> Result<(), String> {
        for &id in ids {
            self.stack.close(id);
        }
        let deadline = Instant::now() + Duration::from_millis(100);
        while Instant::now() < deadline
            && ids.iter().any(|&id| !matches!(self.stack.state(id), State::TimeWait | State::Closed))
        {
            self.poll()?;
        }
        Ok(())
    }

    /// Every connection keeps one `size`-byte request in flight, echoed back.
    fn request_response(
        &mut self,
        plan: &ClientPlan,
        size: usize,
        conns: usize,
        shared: &Shared,
        interrupted: &AtomicBool,
    ) -> Result<ClientResult, String> {
        let ids = self.connect(conns)?;
        let msg: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
        let mut bufs = vec![vec![0u8; size]; conns];
        let (mut sent, mut got) = (vec![0usize; conns], vec![0usize; conns]);
        let mut sent_at = vec![Instant::now(); conns];
        let mut latency = histogram();
        let (mut requests, mut measuring) = (0u64, false);
        let start_all = Instant::now();
        let (mut start, mut start_usage) = (start_all, (Usage::default(), 0));
        let warm_end = start_all + plan.warmup;
        let end = warm_end + plan.duration;
        let (mut now, mut last_progress) = (start_all, start_all);
        for i in 0..conns {
            self.write_some(ids[i], &msg, &mut sent[i])?;
        }
        while now < end && !interrupted.load(Ordering::Relaxed) {
            if !measuring && now >= warm_end {
                measuring = true;
                shared.phase.store(MEASURING, Ordering::SeqCst);
                (start, start_usage) = (Instant::now(), self.usage());
            }
            self.poll()?;
            for i in 0..conns {
                if sent[i] < size {
                    self.write_some(ids[i], &msg, &mut sent[i])?;
                }
                if self.read_some(ids[i], &mut bufs[i], &mut got[i])? {
                    now = Instant::now();
                    if bufs[i] != msg {
                        return Err("our client: the echo differs from what was sent".into());
                    }
                    if measuring {
                        latency.saturating_record((now - sent_at[i]).as_nanos() as u64);
                        requests += 1;
                    }
                    (got[i], sent[i]) = (0, 0);
                    self.write_some(ids[i], &msg, &mut sent[i])?;
                    sent_at[i] = Instant::now();
                    last_progress = now;
                }
            }
            now = Instant::now();
            if now - last_progress > LIMIT {
                return Err(format!("our client: no echo for {} s ({})", LIMIT.as_secs(), self.server));
            }
        }
        let elapsed = now - start;
        let (usage, copied) = self.since(start_usage);
        shared.phase.store(DONE, Ordering::SeqCst);
        // Collect the requests still in flight, unrecorded.
        let deadline = Instant::now() + LIMIT;
        for i in 0..conns {
            while sent[i] < size || !self.read_some(ids[i], &mut bufs[i], &mut got[i])? {
                if sent[i] < size {
                    self.write_some(ids[i], &msg, &mut sent[i])?;
                }
                if Instant::now() > deadline {
                    return Err("our client: the last echoes did not come back".into());
                }
                self.poll()?;
            }
        }
        self.close_all(&ids)?;
        Ok(ClientResult { latency, units: requests, elapsed, usage, copied })
    }

    /// Stream client -> server for `duration`; the rate counts every byte up to the
    /// server's FIN after ours, so nothing still buffered counts as delivered.
    fn bulk_up(
        &mut self,
        plan: &ClientPlan,
        shared: &Shared,
        interrupted: &AtomicBool,
    ) -> Result<ClientResult, String> {
        let id = self.connect(1)?[0];
        let chunk = vec![0x5au8; 64 * 1024];
        shared.phase.store(MEASURING, Ordering::SeqCst);
        let (start, start_usage) = (Instant::now(), self.usage());
        let end = start + plan.duration;
        let mut bytes = 0u64;
        while Instant::now() < end && !interrupted.load(Ordering::Relaxed) {
            self.poll()?;
            loop {
                match self.stack.write(id, &chunk) {
                    Ok(n) => bytes += n as u64,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(io(e)),
                }
            }
        }
        self.stack.shutdown(id);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 64];
        loop {
            self.poll()?;
            match self.stack.read(id, &mut buf) {
                Ok(0) => break,
                Ok(_) => return Err("our client: the bulk server sent data".into()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(io(e)),
            }
            if Instant::now() > deadline {
                return Err("our client: the server did not close within 10 s of our FIN".into());
            }
        }
        let elapsed = start.elapsed();
        let (usage, copied) = self.since(start_usage);
        shared.phase.store(DONE, Ordering::SeqCst);
        self.close_all(&[id])?;
        Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied })
    }

    /// Read what the server streams for `duration`; the rate counts bytes read.
    fn bulk_down(
        &mut self,
        plan: &ClientPlan,
        shared: &Shared,
        interrupted: &AtomicBool,
    ) -> Result<ClientResult, String> {
        let id = self.connect(1)?[0];
        let mut buf = vec![0u8; 256 * 1024];
        shared.phase.store(MEASURING, Ordering::SeqCst);
        let (start, start_usage) = (Instant::now(), self.usage());
        let end = start + plan.duration;
        let (mut bytes, mut last, mut now) = (0u64, start, start);
        while now < end && !interrupted.load(Ordering::Relaxed) {
            self.poll()?;
            loop {
                match self.stack.read(id, &mut buf) {
                    Ok(0) => return Err("our client: the server closed the stream".into()),
                    Ok(n) => {
                        bytes += n as u64;
                        last = now;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(io(e)),
                }
            }
            now = Instant::now();
            if now - last > LIMIT {
                return Err("our client: the stream stalled for 2 s".into());
            }
        }
        let elapsed = now - start;
        let (usage, copied) = self.since(start_usage);
        shared.phase.store(DONE, Ordering::SeqCst);
        // As the kernel client's close(2) with unread data: a reset (RFC 2525 2.17), which
        // stops the source.
        self.stack.abort(id);
        for _ in 0..100 {
            self.poll()?;
        }
        Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied })
    }

    /// Connect, exchange 64 bytes, close; one connection at a time.
    fn once(&mut self) -> Result<(), String> {
        let id = self.connect(1)?[0];
        let msg = [0x42u8; 64];
        let mut buf = [0u8; 64];
        let (mut sent, mut got) = (0, 0);
        let deadline = Instant::now() + LIMIT;
        self.write_some(id, &msg, &mut sent)?;
        loop {
            self.poll()?;
            if sent < msg.len() {
                self.write_some(id, &msg, &mut sent)?;
            }
            if self.read_some(id, &mut buf, &mut got)? {
                break;
            }
            if Instant::now() > deadline {
                return Err("our client: no echo within 2 s".into());
            }
        }
        if buf != msg {
            return Err("our client: the echo differs from what was sent".into());
        }
        // As the kernel client's close(2): the FIN goes out, the rest finishes in the background.
        self.stack.close(id);
        Ok(())
    }

    fn connect_rate(
        &mut self,
        plan: &ClientPlan,
        shared: &Shared,
        interrupted: &AtomicBool,
    ) -> Result<ClientResult, String> {
        let mut latency = histogram();
        let warm_end = Instant::now() + plan.warmup;
        while Instant::now() < warm_end && !interrupted.load(Ordering::Relaxed) {
            self.once()?;
        }
        shared.phase.store(MEASURING, Ordering::SeqCst);
        let (start, start_usage) = (Instant::now(), self.usage());
        let end = start + plan.duration;
        let (mut now, mut conns) = (start, 0u64);
        while now < end && conns < MAX_CONNECTIONS && !interrupted.load(Ordering::Relaxed) {
            self.once()?;
            let t = Instant::now();
            latency.saturating_record((t - now).as_nanos() as u64);
            now = t;
            conns += 1;
        }
        let elapsed = now - start;
        let (usage, copied) = self.since(start_usage);
        shared.phase.store(DONE, Ordering::SeqCst);
        let _ = self.once();
        for _ in 0..100 {
            self.poll()?;
        }
        Ok(ClientResult { latency, units: conns, elapsed, usage, copied })
    }
}
