//! `stack_frame`: Ethernet frames into a host that echoes on port 7, on virtual time.
//!
//! The host is `Interface::new(StackConfig::new(10.0.0.2, 24, KEY), MAC, 1500)` listening
//! on port 7. It accepts connections, echoes what it reads and closes when the peer has
//! closed, so inputs that complete a handshake reach data transfer, retransmission and
//! every closing state.
//!
//! Input layout: a sequence of records, each a 4-byte header and a frame.
//!
//! ```text
//! step:u8  budget:u8  len:u16 (big-endian)  frame[len]
//! ```
//!
//! - `step` advances the clock before the frame arrives: the low 6 bits count units of
//!   1 ms, 100 ms, 1 s or 1 min, chosen by the top 2 bits (see [`step`]), so a few records
//!   reach the RTO, TIME-WAIT and keep-alive timers.
//! - `budget`: frames the device takes in this round before it reports "no transmit buffer
//!   free"; 0x80 and above mean no limit (see [`budget`]).
//! - A `len` past the end of the input takes the rest; fewer than 4 bytes left end it.
//!
//! Each record runs: advance the clock, `handle_timeouts`, `receive` the frame, `transmit`,
//! serve the sockets (accept, echo, close), `transmit` again. After the last record the host runs its
//! timers out ([`FINAL_ROUNDS`] rounds at most, each jumping to `poll_timeout()`).
//!
//! The device checks every frame the host sends (well-formed Ethernet, ARP or IPv4 with a
//! good header checksum, TCP that `Segment::parse` accepts with its checksum, ICMP echo
//! replies with a good checksum) and discards it; [`Host::keep_frames`] keeps them
//! instead, for the seed generator.

use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

use bypass_stack::arp::{self, ARP_FRAME_LEN};
use bypass_stack::{Device, DeviceInfo, Interface, ListenerId, SocketId, StackConfig};
use bypass_tcp::{Instant, RecvError, Segment};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4HeaderSlice};

/// The host's address.
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The host's MAC address.
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// The host's IP MTU.
pub const MTU: usize = 1500;
/// The port the host listens (and echoes) on.
pub const ECHO_PORT: u16 = 7;
/// The ISN and SYN cookie key: fixed, so every run of an input is the same run.
pub const KEY: [u8; 16] = *b"bypass-fuzz-key!";
/// Bytes of a record header.
pub const RECORD_HEADER: usize = 4;
/// The `budget` byte meaning "no limit".
pub const UNLIMITED: u8 = 0xff;
/// Timer rounds run after the last record.
pub const FINAL_ROUNDS: usize = 16;
/// Accepted connections served at once; more are aborted on accept.
const MAX_SERVED: usize = 8;

/// Return the clock step encoded by a record's `step` byte.
pub fn step(byte: u8) -> Duration {
    let count = u64::from(byte & 0x3f);
    match byte >> 6 {
        0 => Duration::from_millis(count),
        1 => Duration::from_millis(100 * count),
        2 => Duration::from_secs(count),
        _ => Duration::from_secs(60 * count),
    }
}

/// Return the device budget encoded by a record's `budget` byte.
pub fn budget(byte: u8) -> usize {
    if byte >= 0x80 { usize::MAX } else { usize::from(byte) }
}

/// Return the bytes of one record: a header and `frame`.
pub fn record(step: u8, budget: u8, frame: &[u8]) -> Vec<u8> {
    let len = u16::try_from(frame.len()).expect("a frame fits a 16-bit length");
    let mut out = Vec::with_capacity(RECORD_HEADER + frame.len());
    out.extend_from_slice(&[step, budget]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(frame);
    out
}

/// Split `data` into records: `(step, budget, frame)`.
pub fn records(mut data: &[u8]) -> impl Iterator<Item = (u8, u8, &[u8])> {
    core::iter::from_fn(move || {
        let (&[step, budget, hi, lo], rest) = data.split_first_chunk::<RECORD_HEADER>()?;
        let len = usize::from(u16::from_be_bytes([hi, lo])).min(rest.len());
        let (frame, rest) = rest.split_at(len);
        data = rest;
        Some((step, budget, frame))
    })
}

/// Run one `stack_frame` input; panic when the host panics or sends a malformed frame.
///
/// Crashes found so far (kept under `artifacts/stack_frame/`, replayed by `cargo test`):
/// a stale connection-table entry after an RST in SYN-RECEIVED (a panic), and a byte-swapped
/// ICMP echo reply checksum. Both are fixed in the stack.
pub fn run(data: &[u8]) {
    let mut host = Host::new();
    for (step, budget, frame) in records(data) {
        host.step(step, budget, frame);
    }
    host.finish();
}

/// The device: checks and discards (or keeps) what the host sends, and refuses frames once
/// the round's budget is spent.
struct Sink {
    info: DeviceInfo,
    budget: usize,
    buf: Vec<u8>,
    keep: bool,
    kept: Vec<Vec<u8>>,
}

impl Device for Sink {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recv(&mut self, _budget: usize, _on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.budget == 0 {
            return Ok(false);
        }
        self.budget -= 1;
        self.buf.clear();
        self.buf.resize(self.info.max_frame(), 0xa5);
        let n = fill(&mut self.buf);
        assert!(n <= self.info.max_frame(), "the host wrote {n} bytes into a {}-byte frame", self.info.max_frame());
        if n > 0 {
            check_frame(&self.buf[..n]);
            if self.keep {
                self.kept.push(self.buf[..n].to_vec());
            }
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn wait(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// The host under test: an [`Interface`] listening on [`ECHO_PORT`], its device, and the
/// connections it serves.
pub struct Host {
    iface: Interface,
    device: Sink,
    listener: ListenerId,
    served: Vec<SocketId>,
    now: Instant,
    buf: Vec<u8>,
}

impl Default for Host {
    fn default() -> Self {
        Host::new()
    }
}

impl Host {
    /// Return a host listening on [`ECHO_PORT`] at time zero.
    pub fn new() -> Host {
        let mut iface = Interface::new(StackConfig::new(HOST_IP, 24, KEY), HOST_MAC, MTU);
        let listener = iface.listen(ECHO_PORT).expect("a fresh host has the port free");
        let info = DeviceInfo { name: "fuzz".into(), mac: HOST_MAC, mtu: MTU, mode: "fuzz sink".into() };
        Host {
            iface,
            device: Sink { info, budget: usize::MAX, buf: Vec::new(), keep: false, kept: Vec::new() },
            listener,
            served: Vec::new(),
            now: Instant::ZERO,
            buf: vec![0; 4096],
        }
    }

    /// Keep the frames the host sends (see [`Host::take_frames`]) instead of discarding them.
    pub fn keep_frames(&mut self) {
        self.device.keep = true;
    }

    /// Return the frames kept since the last call.
    pub fn take_frames(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.device.kept)
    }

    /// Return the host.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Return the connections being served.
    pub fn served(&self) -> &[SocketId] {
        &self.served
    }

    /// One record: advance the clock by `step`, fire timers, receive `frame` (if not empty),
    /// transmit within `budget`, serve the sockets, transmit again.
    pub fn step(&mut self, step_byte: u8, budget_byte: u8, frame: &[u8]) {
        self.now += step(step_byte);
        self.device.budget = budget(budget_byte);
        self.iface.handle_timeouts(self.now);
        if !frame.is_empty() {
            self.iface.receive(self.now, frame);
        }
        self.iface.deliver_events();
        let _ = self.iface.transmit(self.now, &mut self.device);
        self.serve();
        let _ = self.iface.transmit(self.now, &mut self.device);
    }

    /// Accept, echo what arrived, and close connections whose peer has closed.
    fn serve(&mut self) {
        while let Some(id) = self.iface.accept(self.listener) {
            if self.served.len() >= MAX_SERVED {
                self.iface.abort(self.now, id);
            } else {
                self.served.push(id);
            }
        }
        while self.iface.poll_event().is_some() {}
        let (iface, buf, now) = (&mut self.iface, &mut self.buf, self.now);
        self.served.retain(|&id| {
            let Some(conn) = iface.connection_mut(id) else { return false };
            loop {
                match conn.recv(buf) {
                    Ok(0) => {
                        iface.close(now, id);
                        return false;
                    }
                    Ok(n) => {
                        // Echo what fits; the rest is dropped (the fuzzer is no client).
                        let _ = conn.send(&buf[..n]);
                    }
                    Err(RecvError::WouldBlock) => return true,
                    Err(_) => {
                        iface.close(now, id);
                        return false;
                    }
                }
            }
        });
    }

    /// Run the timers out: up to [`FINAL_ROUNDS`] rounds, each jumping to the next deadline.
    pub fn finish(&mut self) {
        for _ in 0..FINAL_ROUNDS {
            let Some(next) = self.iface.poll_timeout() else { break };
            self.now = self.now.max(next);
            self.device.budget = usize::MAX;
            self.iface.handle_timeouts(self.now);
            self.iface.deliver_events();
            let _ = self.iface.transmit(self.now, &mut self.device);
            self.serve();
            let _ = self.iface.transmit(self.now, &mut self.device);
        }
    }
}

/// Return whether the ICMP message `body` (checksum included) sums to zero (RFC 792, 1071).
fn icmp_checksum_ok(body: &[u8]) -> bool {
    etherparse::checksum::Sum16BitWords::new().add_slice(body).ones_complement() == 0
}

/// Panic unless `frame` is a well-formed frame from the host: ARP, or IPv4 carrying TCP
/// (checksum good) or an ICMP echo reply (checksum good).
fn check_frame(frame: &[u8]) {
    let (eth, payload) = Ethernet2Header::from_slice(frame).expect("sent frame has an Ethernet header");
    assert_eq!(eth.source, HOST_MAC, "sent frame's source MAC");
    match eth.ether_type {
        EtherType::ARP => {
            assert_eq!(frame.len(), ARP_FRAME_LEN, "ARP frame length");
            let msg = arp::parse(payload).expect("sent ARP frame parses");
            assert_eq!((msg.sender_mac, msg.sender_ip), (HOST_MAC, HOST_IP), "ARP sender");
        }
        EtherType::IPV4 => {
            let ip = Ipv4HeaderSlice::from_slice(payload).expect("sent IPv4 header parses");
            let header = ip.slice();
            let sum = etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement();
            assert_eq!(sum, 0, "sent IPv4 header checksum");
            assert_eq!(usize::from(ip.total_len()), payload.len(), "sent IPv4 total length");
            assert_eq!(ip.source_addr(), HOST_IP, "sent IPv4 source");
            let body = &payload[header.len()..];
            match ip.protocol() {
                IpNumber::TCP => {
                    let seg = Segment::parse(body, ip.source_addr().into(), ip.destination_addr().into());
                    assert!(seg.is_ok(), "sent TCP segment does not parse: {seg:?}\n{body:02x?}");
                }
                IpNumber::ICMP => {
                    assert!(body.len() >= 8, "sent ICMP message of {} bytes", body.len());
                    assert_eq!(body[0], 0, "sent ICMP type is not echo reply");
                    assert!(icmp_checksum_ok(body), "sent ICMP checksum {:02x?} is wrong", &body[2..4]);
                }
                other => panic!("sent IPv4 protocol {other:?}"),
            }
        }
        other => panic!("sent ethertype {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_on_the_length_prefix() {
        let mut data = record(1, UNLIMITED, b"abc");
        data.extend(record(0x41, 3, b""));
        data.extend([2, 0, 0x00, 0x09, b'x']); // length past the end: takes the rest
        data.extend([9, 9]); // too short for a header: ignored
        let got: Vec<_> = records(&data).collect();
        assert_eq!(got, [(1, UNLIMITED, &b"abc"[..]), (0x41, 3, &b""[..]), (2, 0, &[b'x', 9, 9][..])]);
    }

    #[test]
    fn steps_and_budgets() {
        assert_eq!(step(0x05), Duration::from_millis(5));
        assert_eq!(step(0x45), Duration::from_millis(500));
        assert_eq!(step(0x85), Duration::from_secs(5));
        assert_eq!(step(0xff), Duration::from_secs(63 * 60));
        assert_eq!((budget(0), budget(0x7f), budget(0x80)), (0, 127, usize::MAX));
    }

    #[test]
    fn empty_and_garbage_inputs_run() {
        run(&[]);
        run(&[0; 3]);
        run(&[0xff; 300]);
    }
}
