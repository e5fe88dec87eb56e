//! The workloads of a userspace client, written once over [`Endpoint`]: our stack
//! (`ours::client`, rows 4b, 5b and M) and smoltcp (`smoltcp::client`, row 6b) run the same
//! request/response, bulk and connection-rate loops, with the same phases, timing and checks
//! as the kernel client (`kernel::client`).
//!
//! The loops spin: [`Endpoint::poll`] (send what the application wrote, then receive), then
//! the application's reads and writes, again and again.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Workload;
use super::kernel::{ClientPlan, ClientResult, Shared, connect_loop, histogram, wait_ready};
use super::measure::{DONE, MEASURING, Usage};

/// How long the client waits for anything before it gives up.
const LIMIT: Duration = Duration::from_secs(2);
/// Bytes per write of the bulk upload, and the bulk download's read buffer.
const CHUNK: usize = 64 * 1024;
const READ_BUFFER: usize = 256 * 1024;

/// A userspace TCP stack acting as the client. Errors are sentences that start with
/// [`name`](Endpoint::name).
pub trait Endpoint {
    /// One connection.
    type Conn: Copy;

    /// Who speaks in error messages: "our client", "smoltcp client".
    fn name(&self) -> &'static str;

    /// The server's address.
    fn server(&self) -> SocketAddrV4;

    /// Send what the application wrote since the last call, then receive and process: the
    /// writes leave at once instead of after the next receive's system call.
    fn poll(&mut self) -> Result<(), String>;

    /// The thread's usage with the device's system calls added, and the bytes the stack
    /// copied so far.
    fn usage(&self) -> (Usage, u64);

    /// Start one connection to the server (Nagle off).
    fn open(&mut self) -> Result<Self::Conn, String>;

    /// Return whether `conn` is still in the handshake.
    fn opening(&self, conn: Self::Conn) -> bool;

    /// Return `None` when `conn` is established, or its state for the error message.
    fn not_established(&self, conn: Self::Conn) -> Option<String>;

    /// Return whether `conn` has finished closing as far as the client waits for: its FIN
    /// acknowledged (TIME-WAIT) or gone.
    fn closed(&self, conn: Self::Conn) -> bool;

    /// Write as much of `data[*sent..]` as fits; a full send buffer is not an error.
    fn write_some(&mut self, conn: Self::Conn, data: &[u8], sent: &mut usize) -> Result<(), String>;

    /// Read into `buf` once; return how many bytes (0: nothing yet). The server's FIN is an
    /// error (`what` names the stream in it).
    fn read(&mut self, conn: Self::Conn, buf: &mut [u8], what: &str) -> Result<usize, String>;

    /// Return whether the server's FIN has arrived on a stream it should not send on; data
    /// is an error.
    fn peer_finished(&mut self, conn: Self::Conn) -> Result<bool, String>;

    /// Send FIN after what is queued; reading goes on.
    fn shutdown(&mut self, conn: Self::Conn);

    /// Close gracefully and give `conn` up: the stack finishes the close in the background
    /// (as `close(2)`).
    fn close(&mut self, conn: Self::Conn);

    /// Reset `conn` and give it up (as `close(2)` with unread data).
    fn abort(&mut self, conn: Self::Conn);
}

/// Run `plan.workload` on `client` against its server: warm-up unrecorded, then
/// `plan.duration` recorded. `interrupted` ends the run early.
pub fn run<E: Endpoint>(
    client: &mut E,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    wait_ready(shared)?;
    match plan.workload {
        Workload::Rr { size, conns } => request_response(client, plan, size, conns, shared, interrupted),
        Workload::BulkUp => bulk_up(client, plan, shared, interrupted),
        Workload::BulkDown | Workload::File => bulk_down(client, plan, shared, interrupted),
        Workload::Connect => connect_rate(client, plan, shared, interrupted),
    }
}

/// Return what `client` used since `start` (a [`Endpoint::usage`] sample).
fn since<E: Endpoint>(client: &E, start: (Usage, u64)) -> (Usage, Option<u64>) {
    let (usage, copied) = client.usage();
    (usage.since(&start.0), Some(copied - start.1))
}

/// Open `n` connections at once and wait until all are established.
fn connect<E: Endpoint>(client: &mut E, n: usize) -> Result<Vec<E::Conn>, String> {
    let conns = (0..n).map(|_| client.open()).collect::<Result<Vec<_>, _>>()?;
    let deadline = Instant::now() + Duration::from_secs(3);
    while conns.iter().any(|&c| client.opening(c)) {
        if Instant::now() > deadline {
            return Err(format!("{}: no answer from {} within 3 s", client.name(), client.server()));
        }
        client.poll()?;
    }
    if let Some(state) = conns.iter().find_map(|&c| client.not_established(c)) {
        return Err(format!("{}: connection to {} failed ({state})", client.name(), client.server()));
    }
    Ok(conns)
}

/// Read into `buf[*got..]` once; return whether `buf` is full.
fn read_some<E: Endpoint>(client: &mut E, conn: E::Conn, buf: &mut [u8], got: &mut usize) -> Result<bool, String> {
    *got += client.read(conn, &mut buf[*got..], "connection")?;
    Ok(*got == buf.len())
}

/// Close `conns` and poll until their FINs are acknowledged (or a moment passes).
fn close_all<E: Endpoint>(client: &mut E, conns: &[E::Conn]) -> Result<(), String> {
    for &c in conns {
        client.close(c);
    }
    let deadline = Instant::now() + Duration::from_millis(100);
    while Instant::now() < deadline && conns.iter().any(|&c| !client.closed(c)) {
        client.poll()?;
    }
    Ok(())
}

/// Every connection keeps one `size`-byte request in flight, echoed back.
fn request_response<E: Endpoint>(
    client: &mut E,
    plan: &ClientPlan,
    size: usize,
    conns: usize,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let ids = connect(client, conns)?;
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
        client.write_some(ids[i], &msg, &mut sent[i])?;
    }
    while now < end && !interrupted.load(Ordering::Relaxed) {
        if !measuring && now >= warm_end {
            measuring = true;
            shared.phase.store(MEASURING, Ordering::SeqCst);
            (start, start_usage) = (Instant::now(), client.usage());
        }
        client.poll()?;
        for i in 0..conns {
            if sent[i] < size {
                client.write_some(ids[i], &msg, &mut sent[i])?;
            }
            if read_some(client, ids[i], &mut bufs[i], &mut got[i])? {
                now = Instant::now();
                if bufs[i] != msg {
                    return Err(format!("{}: the echo differs from what was sent", client.name()));
                }
                if measuring {
                    latency.saturating_record((now - sent_at[i]).as_nanos() as u64);
                    requests += 1;
                }
                (got[i], sent[i]) = (0, 0);
                // From before the write, as the kernel client: sending is part of the trip.
                sent_at[i] = Instant::now();
                client.write_some(ids[i], &msg, &mut sent[i])?;
                last_progress = now;
            }
        }
        now = Instant::now();
        if now - last_progress > LIMIT {
            return Err(format!("{}: no echo for {} s ({})", client.name(), LIMIT.as_secs(), client.server()));
        }
    }
    let elapsed = now - start;
    let (usage, copied) = since(client, start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    // Collect the requests still in flight, unrecorded.
    let deadline = Instant::now() + LIMIT;
    for i in 0..conns {
        while sent[i] < size || !read_some(client, ids[i], &mut bufs[i], &mut got[i])? {
            if sent[i] < size {
                client.write_some(ids[i], &msg, &mut sent[i])?;
            }
            if Instant::now() > deadline {
                return Err(format!("{}: the last echoes did not come back", client.name()));
            }
            client.poll()?;
        }
    }
    close_all(client, &ids)?;
    Ok(ClientResult { latency, units: requests, elapsed, usage, copied })
}

/// Stream client -> server for `duration`; the rate counts every byte up to the server's FIN
/// after ours, so nothing still buffered counts as delivered.
fn bulk_up<E: Endpoint>(
    client: &mut E,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let id = connect(client, 1)?[0];
    let chunk = vec![0x5au8; CHUNK];
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), client.usage());
    let end = start + plan.duration;
    let mut bytes = 0u64;
    while Instant::now() < end && !interrupted.load(Ordering::Relaxed) {
        client.poll()?;
        loop {
            let mut n = 0;
            client.write_some(id, &chunk, &mut n)?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    // FIN after what is queued; the server closes once it has read up to it.
    client.shutdown(id);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        client.poll()?;
        if client.peer_finished(id)? {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{}: the server did not close within 10 s of our FIN", client.name()));
        }
    }
    let elapsed = start.elapsed();
    let (usage, copied) = since(client, start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    close_all(client, &[id])?;
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied })
}

/// Read what the server streams for `duration`; the rate counts bytes read.
fn bulk_down<E: Endpoint>(
    client: &mut E,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let id = connect(client, 1)?[0];
    let mut buf = vec![0u8; READ_BUFFER];
    shared.phase.store(MEASURING, Ordering::SeqCst);
    let (start, start_usage) = (Instant::now(), client.usage());
    let end = start + plan.duration;
    let (mut bytes, mut last, mut now) = (0u64, start, start);
    while now < end && !interrupted.load(Ordering::Relaxed) {
        client.poll()?;
        loop {
            let n = client.read(id, &mut buf, "stream")?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            last = now;
        }
        now = Instant::now();
        if now - last > LIMIT {
            return Err(format!("{}: the stream stalled for 2 s", client.name()));
        }
    }
    let elapsed = now - start;
    let (usage, copied) = since(client, start_usage);
    shared.phase.store(DONE, Ordering::SeqCst);
    // As the kernel client's close(2) with unread data: a reset (RFC 2525 2.17), which stops
    // the source.
    client.abort(id);
    for _ in 0..100 {
        client.poll()?;
    }
    Ok(ClientResult { latency: histogram(), units: bytes, elapsed, usage, copied })
}

/// Connect, exchange 64 bytes, close; one connection at a time.
fn once<E: Endpoint>(client: &mut E) -> Result<(), String> {
    let id = connect(client, 1)?[0];
    let msg = [0x42u8; 64];
    let mut buf = [0u8; 64];
    let (mut sent, mut got) = (0, 0);
    let deadline = Instant::now() + LIMIT;
    client.write_some(id, &msg, &mut sent)?;
    loop {
        client.poll()?;
        if sent < msg.len() {
            client.write_some(id, &msg, &mut sent)?;
        }
        if read_some(client, id, &mut buf, &mut got)? {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{}: no echo within 2 s", client.name()));
        }
    }
    if buf != msg {
        return Err(format!("{}: the echo differs from what was sent", client.name()));
    }
    // As the kernel client's close(2): the FIN goes out, the rest finishes in the background.
    client.close(id);
    Ok(())
}

fn connect_rate<E: Endpoint>(
    client: &mut E,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let (window, start_usage) = connect_loop(plan, shared, interrupted, client, |c| c.usage(), once)?;
    let (usage, copied) = since(client, start_usage);
    let _ = once(client);
    for _ in 0..100 {
        client.poll()?;
    }
    Ok(ClientResult { latency: window.latency, units: window.conns, elapsed: window.elapsed, usage, copied })
}
