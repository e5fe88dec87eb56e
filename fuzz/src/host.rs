//! `stack_frame`: Ethernet frames into a dual-stack host that echoes on port 7, on virtual time.
//!
//! The host is `Interface::new(StackConfig::new(10.0.0.2, 24, KEY).with_address(fd00::2, 64),
//! MAC, 1500)` listening on port 7; it also has the link-local address made from its MAC
//! ([`host_link_local`], `fe80::ff:fe00:2`). It answers ARP, Neighbour Solicitations and
//! echo requests of both families (reassembling fragmented ones and fragmenting the reply),
//! learns from Router Advertisements, takes ICMP errors about its TCP segments, accepts
//! connections over IPv4 and IPv6, echoes what it reads and closes when the peer has
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
//! The device checks every frame the host sends and discards it ([`Host::keep_frames`]
//! keeps them instead, for the seed generator); what it accepts is listed on
//! `FrameCheck` (a private type below). Anything else panics, and so the fuzzer reports it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bypass_device::{Device, DeviceInfo};
use bypass_stack::fragments::{Fragment, FragmentKey, Reassembler, ReassemblyConfig};
use bypass_stack::wire::arp::{self, ARP_FRAME_LEN};
use bypass_stack::wire::ndp::{self, NdpMessage};
use bypass_stack::{Interface, ListenerId, SocketId, StackConfig};
use bypass_tcp::{Instant, RecvError, Segment};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4HeaderSlice, Ipv6HeaderSlice};

/// The host's IPv4 address (a /24).
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The host's IPv6 address (a /64) beside its link-local one ([`host_link_local`]).
pub const HOST_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
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
/// Bytes of an IPv4 header without options, as the host writes them.
const IPV4_LEN: usize = 20;
/// Bytes of the fixed IPv6 header.
const IPV6_LEN: usize = 40;
/// Bytes of an IPv6 Fragment header (RFC 8200 4.5).
const FRAGMENT_HEADER_LEN: usize = 8;

/// Return the host's link-local address, made from [`HOST_MAC`] (RFC 4291 appendix A).
pub fn host_link_local() -> Ipv6Addr {
    ndp::link_local_from_mac(HOST_MAC)
}

/// Return whether `addr` is one of the host's IPv6 addresses.
pub fn is_host_ip6(addr: Ipv6Addr) -> bool {
    addr == HOST_IP6 || addr == host_link_local()
}

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

/// Run one `stack_frame` input; panic when the host panics or sends a malformed frame,
/// except for the open bugs the check steps over (`STEP_OVER_*`). The fuzz target.
///
/// Crashes found so far (kept under `artifacts/stack_frame/`, replayed by `cargo test`):
/// a stale connection-table entry after an RST in SYN-RECEIVED (a panic), and a byte-swapped
/// ICMP echo reply checksum, both fixed in the stack; DF set on IPv4 fragments, open.
pub fn run(data: &[u8]) {
    run_on(Host::new(), data);
}

/// Run one `stack_frame` input as [`run`] does, but step over no open bug.
pub fn run_strict(data: &[u8]) {
    run_on(Host::strict(), data);
}

fn run_on(mut host: Host, data: &[u8]) {
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
    check: FrameCheck,
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
            self.check.frame(&self.buf[..n]);
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
    /// Return a host at [`HOST_IP`] and [`HOST_IP6`] listening on [`ECHO_PORT`] at time zero,
    /// whose device steps over the open bugs (`STEP_OVER_*`).
    pub fn new() -> Host {
        Host::with_check(FrameCheck::new(false))
    }

    /// Return a host as [`Host::new`] does, whose device steps over no open bug.
    pub fn strict() -> Host {
        Host::with_check(FrameCheck::new(true))
    }

    fn with_check(check: FrameCheck) -> Host {
        let config = StackConfig::new(HOST_IP, 24, KEY).with_address(HOST_IP6, 64);
        let mut iface = Interface::new(config, HOST_MAC, MTU);
        let listener = iface.listen(ECHO_PORT).expect("a fresh host has the port free");
        let info = DeviceInfo::new("fuzz", HOST_MAC, MTU, "fuzz sink");
        Host {
            iface,
            device: Sink { info, budget: usize::MAX, buf: Vec::new(), check, keep: false, kept: Vec::new() },
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

/// The device's check of every frame the host sends: it panics on anything but these.
///
/// - Ethernet from [`HOST_MAC`]; IPv6 to a multicast group at the group's MAC (RFC 2464 7).
/// - ARP of the right length from our MAC and [`HOST_IP`].
/// - IPv4 from [`HOST_IP`] with a good header checksum and a total length that matches the
///   frame, carrying TCP that `Segment::parse` accepts (checksum included) or an ICMP echo
///   reply (type 0, code 0) with a good checksum.
/// - IPv4 fragments (MF set or a non-zero offset): DF clear, ICMP only, every fragment but
///   the last a multiple of 8 bytes long (header checksum and length as above).
/// - IPv6 from [`HOST_IP6`] or [`host_link_local`] with a payload length that matches the
///   frame, carrying TCP (as above, over the IPv6 pseudo-header), an ICMPv6 echo reply
///   (129, code 0) with a good checksum, or a Neighbour Solicitation (135) or Advertisement
///   (136) with a good checksum and hop limit 255 that `ndp::parse` accepts: a solicitation
///   for an address not ours, to its solicited-node group or to it, with our MAC in its
///   source link-layer address option; an advertisement of an address of ours with our MAC
///   in its target link-layer address option and the router flag clear.
/// - IPv6 fragments: a Fragment header (next header 44) right after the fixed header, its
///   reserved fields zero, carrying ICMPv6, every fragment but the last a multiple of 8
///   bytes long.
///
/// Fragments are put back together with the stack's [`Reassembler`]: a fragment that does
/// not fit its datagram (an overlap, a duplicate, a bad length, past 65,535 bytes, too
/// many) panics, and each reassembled datagram is checked whole: an echo reply with a good
/// checksum, too long to have gone in one frame. No reassembly time runs out here, so a
/// train the device's budget spreads over minutes is still checked whole; trains the input
/// ends in the middle of are dropped with the host.
struct FrameCheck {
    fragments: Reassembler,
    /// Step over no open bug (see [`run_strict`]); read by the `STEP_OVER_*` checks of open
    /// bugs, and none is open now.
    #[allow(dead_code)]
    strict: bool,
}

impl FrameCheck {
    fn new(strict: bool) -> FrameCheck {
        FrameCheck { fragments: Reassembler::new(ReassemblyConfig::default()), strict }
    }

    /// Panic unless `frame` is a well-formed frame from the host (see [`FrameCheck`]).
    fn frame(&mut self, frame: &[u8]) {
        let (eth, payload) = Ethernet2Header::from_slice(frame).expect("sent frame has an Ethernet header");
        assert_eq!(eth.source, HOST_MAC, "sent frame's source MAC");
        match eth.ether_type {
            EtherType::ARP => {
                assert_eq!(frame.len(), ARP_FRAME_LEN, "ARP frame length");
                let msg = arp::parse(payload).expect("sent ARP frame parses");
                assert_eq!((msg.sender_mac, msg.sender_ip), (HOST_MAC, HOST_IP), "ARP sender");
            }
            EtherType::IPV4 => self.ipv4(payload),
            EtherType::IPV6 => self.ipv6(eth.destination, payload),
            other => panic!("sent ethertype {other:?}"),
        }
    }

    fn ipv4(&mut self, packet: &[u8]) {
        let ip = Ipv4HeaderSlice::from_slice(packet).expect("sent IPv4 header parses");
        let header = ip.slice();
        let sum = etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement();
        assert_eq!(sum, 0, "sent IPv4 header checksum");
        assert_eq!(usize::from(ip.total_len()), packet.len(), "sent IPv4 total length");
        let (src, dst) = (ip.source_addr(), ip.destination_addr());
        assert_eq!(src, HOST_IP, "sent IPv4 source");
        let body = &packet[header.len()..];
        let offset = usize::from(ip.fragments_offset().value()) * 8;
        if ip.more_fragments() || offset != 0 {
            assert!(!ip.dont_fragment(), "sent IPv4 fragment at offset {offset} with DF set");
            assert_eq!(ip.protocol(), IpNumber::ICMP, "sent IPv4 fragment: only echo replies are cut");
            let key = FragmentKey::ipv4(src, dst, ip.identification(), IpNumber::ICMP.0);
            if let Some(whole) = self.reassemble(key, Fragment::new(offset, ip.more_fragments(), body)) {
                assert!(whole.len() > MTU - IPV4_LEN, "sent a {}-byte echo reply in fragments", whole.len());
                check_echo_reply_v4(whole);
            }
            return;
        }
        match ip.protocol() {
            IpNumber::TCP => check_tcp(body, src.into(), dst.into()),
            IpNumber::ICMP => check_echo_reply_v4(body),
            other => panic!("sent IPv4 protocol {other:?}"),
        }
    }

    fn ipv6(&mut self, dst_mac: [u8; 6], packet: &[u8]) {
        let ip = Ipv6HeaderSlice::from_slice(packet).expect("sent IPv6 header parses");
        assert_eq!(IPV6_LEN + usize::from(ip.payload_length()), packet.len(), "sent IPv6 payload length");
        let (src, dst) = (ip.source_addr(), ip.destination_addr());
        assert!(is_host_ip6(src), "sent IPv6 source {src} is not ours");
        if dst.is_multicast() {
            assert_eq!(dst_mac, ndp::multicast_mac(dst), "sent IPv6 to {dst}: destination MAC");
        }
        let body = &packet[IPV6_LEN..];
        match ip.next_header() {
            IpNumber::TCP => check_tcp(body, src.into(), dst.into()),
            IpNumber::IPV6_ICMP => check_icmpv6(src, dst, ip.hop_limit(), body),
            IpNumber::IPV6_FRAGMENTATION_HEADER => {
                assert!(body.len() > FRAGMENT_HEADER_LEN, "sent IPv6 fragment of {} bytes", body.len());
                let (header, data) = body.split_at(FRAGMENT_HEADER_LEN);
                let next = IpNumber(header[0]);
                assert_eq!(next, IpNumber::IPV6_ICMP, "sent IPv6 fragment: only echo replies are cut");
                assert_eq!((header[1], header[3] & 0b110), (0, 0), "sent Fragment header's reserved fields");
                let offset = usize::from(u16::from_be_bytes([header[2], header[3]]) & !7);
                let more = header[3] & 1 == 1;
                let id = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                if let Some(whole) = self.reassemble(FragmentKey::ipv6(src, dst, id), Fragment::new(offset, more, data))
                {
                    assert!(whole.len() > MTU - IPV6_LEN, "sent a {}-byte echo reply in fragments", whole.len());
                    assert_eq!(whole.first(), Some(&129), "sent ICMPv6 type in fragments: only echo replies are cut");
                    check_icmpv6(src, dst, ip.hop_limit(), whole);
                }
            }
            other => panic!("sent IPv6 next header {other:?}"),
        }
    }

    /// Add a fragment the host sent; return the datagram it completes. Panic if it does not
    /// fit what came before.
    fn reassemble<'a>(&'a mut self, key: FragmentKey, frag: Fragment<'a>) -> Option<&'a [u8]> {
        let (offset, len, more) = (frag.offset, frag.data.len(), frag.more);
        assert!(!more || len % 8 == 0, "sent fragment of {key} at offset {offset}: {len} bytes and more to follow");
        match self.fragments.insert(Instant::ZERO, key, frag) {
            Ok(whole) => whole.map(|datagram| datagram.payload),
            Err(why) => panic!("sent fragment of {key} at offset {offset} ({len} bytes, more {more}): {why}"),
        }
    }
}

/// Panic unless `segment`, sent from `src` to `dst`, parses with its checksum.
fn check_tcp(segment: &[u8], src: IpAddr, dst: IpAddr) {
    let seg = Segment::parse(segment, src, dst);
    assert!(seg.is_ok(), "sent TCP segment does not parse: {seg:?}\n{segment:02x?}");
}

/// Panic unless `body` is an ICMP echo reply whose checksum is good (RFC 792, RFC 1071).
fn check_echo_reply_v4(body: &[u8]) {
    assert!(body.len() >= 8, "sent ICMP message of {} bytes", body.len());
    assert_eq!((body[0], body[1]), (0, 0), "sent ICMP type and code are not echo reply");
    let sum = etherparse::checksum::Sum16BitWords::new().add_slice(body).ones_complement();
    assert_eq!(sum, 0, "sent ICMP checksum {:02x?} is wrong", &body[2..4]);
}

/// Panic unless `body`, sent from `src` to `dst` with `hop_limit`, is an ICMPv6 echo reply,
/// Neighbour Solicitation or Neighbour Advertisement (see [`FrameCheck`]).
fn check_icmpv6(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, body: &[u8]) {
    assert!(body.len() >= 8, "sent ICMPv6 message of {} bytes", body.len());
    let sum = ndp::checksum(src, dst, body);
    assert_eq!(body[2..4], sum.to_be_bytes(), "sent ICMPv6 (type {}) checksum is wrong", body[0]);
    match body[0] {
        129 => assert_eq!(body[1], 0, "sent ICMPv6 echo reply's code"),
        135 | 136 => {
            assert_eq!(hop_limit, ndp::HOP_LIMIT, "sent Neighbour Discovery message's hop limit");
            match ndp::parse(src, dst, hop_limit, body) {
                Ok(NdpMessage::NeighborSolicitation(ns)) if body[0] == 135 => {
                    assert!(!is_host_ip6(ns.target), "sent solicitation for our own {}", ns.target);
                    assert!(dst == ns.target || dst == ndp::solicited_node(ns.target), "sent solicitation to {dst}");
                    assert_eq!(ns.source_mac, Some(HOST_MAC), "sent solicitation's source link-layer address");
                }
                Ok(NdpMessage::NeighborAdvertisement(na)) if body[0] == 136 => {
                    assert!(is_host_ip6(na.target), "sent advertisement of {}, not ours", na.target);
                    assert_eq!(na.target_mac, Some(HOST_MAC), "sent advertisement's target link-layer address");
                    assert!(!na.flags.router, "sent advertisement with the router flag: we are no router");
                }
                other => panic!("sent Neighbour Discovery message (type {}) is not valid: {other:?}", body[0]),
            }
        }
        other => panic!("sent ICMPv6 type {other}"),
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

    /// Return whether the check panics on `frames`, sent in order.
    fn refused(frames: &[Vec<u8>]) -> bool {
        std::panic::catch_unwind(|| {
            let mut check = FrameCheck::new(true);
            frames.iter().for_each(|f| check.frame(f));
        })
        .is_err()
    }

    const PEER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

    /// Return an ICMPv6 fragment from the host: `data` at `offset`, `more` to follow.
    fn fragment6(offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
        use etherparse::{IpFragOffset, Ipv6FlowLabel, Ipv6FragmentHeader, Ipv6Header};
        let frag = Ipv6FragmentHeader::new(IpNumber::IPV6_ICMP, IpFragOffset::try_new(offset / 8).unwrap(), more, 7);
        let ip = Ipv6Header {
            traffic_class: 0,
            flow_label: Ipv6FlowLabel::ZERO,
            payload_length: (FRAGMENT_HEADER_LEN + data.len()) as u16,
            next_header: IpNumber::IPV6_FRAGMENTATION_HEADER,
            hop_limit: 64,
            source: HOST_IP6.octets(),
            destination: PEER.octets(),
        };
        let eth = Ethernet2Header { source: HOST_MAC, destination: [2, 0, 0, 0, 0, 1], ether_type: EtherType::IPV6 };
        [&eth.to_bytes()[..], &ip.to_bytes(), &frag.to_bytes(), data].concat()
    }

    #[test]
    fn the_check_takes_an_advertisement_and_refuses_its_corruptions() {
        let mut na = vec![0; ndp::NDP_FRAME_LEN];
        let flags = ndp::NaFlags { router: false, solicited: true, r#override: true };
        let n = ndp::write_advertisement(&mut na, HOST_MAC, HOST_IP6, [2, 0, 0, 0, 0, 1], PEER, HOST_IP6, flags);
        na.truncate(n);
        assert!(!refused(&[na.clone()]));
        let corrupt = |at: usize, value: u8| {
            let mut f = na.clone();
            f[at] = value;
            f
        };
        const IP: usize = 14;
        assert!(refused(&[corrupt(6, 0x04)]), "source MAC");
        assert!(refused(&[corrupt(IP + 7, 64)]), "hop limit");
        assert!(refused(&[corrupt(IP + 8 + 15, 9)]), "source address not ours");
        assert!(refused(&[corrupt(IP + 40 + 3, na[IP + 43] ^ 1)]), "checksum");
        assert!(refused(&[na[..na.len() - 1].to_vec()]), "payload length");
        let router = ndp::NaFlags { router: true, ..flags };
        let n = ndp::write_advertisement(&mut na, HOST_MAC, HOST_IP6, [2, 0, 0, 0, 0, 1], PEER, HOST_IP6, router);
        assert!(refused(&[na[..n].to_vec()]), "router flag");
    }

    #[test]
    fn the_check_refuses_fragments_that_do_not_fit() {
        let data = [0u8; 64];
        assert!(!refused(&[fragment6(0, true, &data[..16]), fragment6(16, true, &data[..8])]), "held");
        assert!(refused(&[fragment6(0, true, &data[..16]), fragment6(8, false, &data[..16])]), "overlap");
        assert!(refused(&[fragment6(0, true, &data[..12])]), "not a multiple of 8");
        assert!(refused(&[fragment6(65528, false, &data[..16])]), "past 65,535 bytes");
        // A whole reassembled datagram must be a checksummed echo reply longer than a frame.
        assert!(refused(&[fragment6(0, true, &data[..16]), fragment6(16, false, &data[..8])]), "not an echo reply");
    }

    #[test]
    fn empty_and_garbage_inputs_run() {
        run(&[]);
        run(&[0; 3]);
        run(&[0xff; 300]);
    }
}
