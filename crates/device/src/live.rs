//! Live capture: the annotated frames of a running stack streamed as pcapng to a reader on a
//! Unix socket (`bypass capture`, Wireshark through `bypass extcap`), as they pass.
//!
//! A [`LiveCapture`] is a [`Capture`]: the stack's recorder hands it every frame with the
//! host's note, and it appends the frames its [`CaptureFilter`] takes, as pcapng enhanced
//! packet blocks with the note as the packet comment, to a bounded buffer; at the end of
//! every batch ([`Capture::batch`]) it writes what the socket takes without blocking. A
//! reader slower than the traffic never slows the stack: when the buffer is full, frames are
//! dropped and counted, and the count goes to the reader in interface statistics blocks
//! (`isb_ifdrop`, pcapng section 4.6) every second and when the capture ends, which Wireshark
//! shows as dropped packets. The statistics block written every second is also how a capture
//! with no traffic learns that its reader went away (the write fails with `EPIPE`).
//!
//! Several readers at once each get their own `LiveCapture`, with its own filter and buffer:
//! the stack's tee (`bypass-stack`) feeds them all, beside a `--pcap` recording.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::time::{Duration, SystemTime};

use crate::capture::{Capture, Direction};
use crate::pcap::BlockWriter;
use crate::time::Instant;

/// How many bytes of blocks a live capture holds for a slow reader before it drops frames.
pub const BUFFER_LIMIT: usize = 4 << 20;

/// Room kept beyond [`BUFFER_LIMIT`] for statistics blocks, so that a reader that stalled
/// still learns how many frames it missed.
const STATISTICS_ROOM: usize = 4096;

/// An upper bound on the bytes of an enhanced packet block beyond its frame and comment:
/// block header and trailer (12), the fixed fields (20), the flags option (8), the comment
/// option's header (4), the end of options (4), padding (6).
const BLOCK_OVERHEAD: usize = 64;

/// Which frames a live capture takes: all when both are `None`; with both, frames that match
/// both (as tcpdump's `port N and host A`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureFilter {
    /// TCP or UDP frames from or to this port.
    pub port: Option<u16>,
    /// IPv4 or IPv6 frames from or to this address, and ARP frames about it (IPv4).
    pub host: Option<IpAddr>,
}

impl CaptureFilter {
    /// Return whether `frame`, an Ethernet frame, passes the filter. Frames too short or too
    /// damaged to show a port or an address do not pass a filter that asks for one.
    pub fn matches(&self, frame: &[u8]) -> bool {
        use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
        if self.port.is_none() && self.host.is_none() {
            return true;
        }
        let Ok(packet) = LaxSlicedPacket::from_ethernet(frame) else { return false };
        if let Some(port) = self.port {
            let ports = match &packet.transport {
                Some(TransportSlice::Tcp(tcp)) => (tcp.source_port(), tcp.destination_port()),
                Some(TransportSlice::Udp(udp)) => (udp.source_port(), udp.destination_port()),
                _ => return false,
            };
            if ports.0 != port && ports.1 != port {
                return false;
            }
        }
        let Some(host) = self.host.map(|h| h.to_canonical()) else { return true };
        match &packet.net {
            Some(LaxNetSlice::Ipv4(ip)) => {
                let h = ip.header();
                [h.source_addr(), h.destination_addr()].iter().any(|&a| IpAddr::V4(a) == host)
            }
            Some(LaxNetSlice::Ipv6(ip)) => {
                let h = ip.header();
                [h.source_addr(), h.destination_addr()].iter().any(|&a| IpAddr::V6(a).to_canonical() == host)
            }
            Some(LaxNetSlice::Arp(arp)) => {
                let IpAddr::V4(host) = host else { return false };
                let host = host.octets();
                arp.sender_protocol_addr() == host || arp.target_protocol_addr() == host
            }
            None => false,
        }
    }
}

/// A live capture into a Unix socket. See the module docs.
pub struct LiveCapture {
    out: UnixStream,
    /// Blocks not yet taken by the socket, front first.
    blocks: BlockWriter<VecDeque<u8>>,
    filter: CaptureFilter,
    /// Frames the filter took.
    received: u64,
    /// Of those, frames dropped because the buffer was full.
    dropped: u64,
    closed: bool,
    /// When the last statistics block was written, and how often to write one.
    stats_at: std::time::Instant,
    stats_every: Duration,
    /// After the socket took no more (`EAGAIN`), when to try again: a stalled reader costs
    /// the stack one failed write per [`RETRY_AFTER`], not one per batch.
    retry_at: Option<std::time::Instant>,
}

/// How long a live capture waits before writing again to a socket that took no more.
const RETRY_AFTER: Duration = Duration::from_millis(1);

impl LiveCapture {
    /// Start a capture of frames of interface `iface` (described as `description`) that
    /// `filter` takes, written to `out`, with the stack's `Instant::ZERO` at wall-clock time
    /// `epoch`. `out` is made non-blocking: the capture never blocks the stack. The pcapng
    /// section header and interface description go out at once.
    pub fn new(
        out: UnixStream,
        filter: CaptureFilter,
        iface: &str,
        description: &str,
        epoch: SystemTime,
    ) -> io::Result<LiveCapture> {
        out.set_nonblocking(true)?;
        let blocks = BlockWriter::new(VecDeque::with_capacity(64 << 10), iface, description, epoch)?;
        let mut capture = LiveCapture {
            out,
            blocks,
            filter,
            received: 0,
            dropped: 0,
            closed: false,
            stats_at: std::time::Instant::now(),
            stats_every: Duration::from_secs(1),
            retry_at: None,
        };
        capture.drain();
        Ok(capture)
    }

    /// Return whether the reader went away (a write failed with `EPIPE` or `ECONNRESET`):
    /// the capture records nothing more, and its owner should drop it.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Return how many frames the filter took but the reader could not: they came while the
    /// buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Return how many frames the filter took (delivered or dropped).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Return how many bytes wait for the reader.
    pub fn buffered(&self) -> usize {
        self.blocks.get_ref().len()
    }

    /// Return the filter.
    pub fn filter(&self) -> &CaptureFilter {
        &self.filter
    }

    /// Append a statistics block (when there is room for it).
    fn statistics(&mut self) {
        self.stats_at = std::time::Instant::now();
        if self.buffered() + BLOCK_OVERHEAD <= BUFFER_LIMIT + STATISTICS_ROOM {
            // A VecDeque takes every write.
            let _ = self.blocks.statistics(SystemTime::now(), self.received, self.dropped);
        }
    }

    /// Write what the socket takes now, without blocking.
    fn drain(&mut self) {
        while !self.closed {
            let buffer = self.blocks.get_mut();
            let (front, _) = buffer.as_slices();
            if front.is_empty() {
                return;
            }
            match (&self.out).write(front) {
                Ok(0) => self.close("the reader takes no more"),
                Ok(n) => {
                    buffer.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.retry_at = Some(std::time::Instant::now() + RETRY_AFTER);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.close(&e.to_string()),
            }
        }
    }

    /// The reader went away: free the buffer and record nothing more.
    fn close(&mut self, why: &str) {
        log::debug!("live capture ends: {why} ({} frames, {} dropped)", self.received, self.dropped);
        self.closed = true;
        *self.blocks.get_mut() = VecDeque::new();
    }

    /// Write the periodic statistics when due, then what the socket takes (unless it took
    /// nothing less than [`RETRY_AFTER`] ago).
    fn push(&mut self) {
        if self.closed {
            return;
        }
        let now = std::time::Instant::now();
        if now.duration_since(self.stats_at) >= self.stats_every {
            self.statistics();
        }
        if self.buffered() > 0 && self.retry_at.is_none_or(|at| now >= at) {
            self.retry_at = None;
            self.drain();
        }
    }
}

impl Capture for LiveCapture {
    fn frame(&mut self, now: Instant, dir: Direction, frame: &[u8], note: &str) {
        if self.closed || !self.filter.matches(frame) {
            return;
        }
        self.received += 1;
        if self.buffered() + frame.len() + note.len() + BLOCK_OVERHEAD > BUFFER_LIMIT {
            self.dropped += 1;
            return;
        }
        if let Err(e) = self.blocks.packet(now, dir, frame, note) {
            // A VecDeque takes every write; this would be a bug in the block writer.
            log::debug!("live capture: cannot encode a frame: {e}");
            self.dropped += 1;
        }
    }

    fn batch(&mut self) {
        self.push();
    }

    fn flush(&mut self) {
        self.push();
    }
}

impl Drop for LiveCapture {
    /// Tell the reader the final counts, as far as the socket takes them now.
    fn drop(&mut self) {
        if !self.closed {
            self.statistics();
            self.drain();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use std::io::Read;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::UNIX_EPOCH;

    const A4: [u8; 4] = [10, 0, 0, 1];
    const B4: [u8; 4] = [10, 0, 0, 2];
    const A6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const B6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    fn eth() -> etherparse::PacketBuilderStep<etherparse::Ethernet2Header> {
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
    }

    fn tcp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        eth().ipv4(src, dst, 64).tcp(sport, dport, 1, 1000).write(&mut f, payload).unwrap();
        f
    }

    fn tcp6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = Vec::new();
        eth().ipv6(src, dst, 64).tcp(sport, dport, 1, 1000).write(&mut f, b"x").unwrap();
        f
    }

    fn udp4(sport: u16, dport: u16) -> Vec<u8> {
        let mut f = Vec::new();
        eth().ipv4(A4, B4, 64).udp(sport, dport).write(&mut f, b"q").unwrap();
        f
    }

    fn arp(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&sender);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target);
        f
    }

    #[test]
    fn filters_take_ports_and_hosts_of_both_families() {
        let all = CaptureFilter::default();
        let port = |p| CaptureFilter { port: Some(p), host: None };
        let host = |h: IpAddr| CaptureFilter { port: None, host: Some(h) };
        let a4 = IpAddr::V4(Ipv4Addr::from(A4));
        let b6 = IpAddr::V6(Ipv6Addr::from(B6));
        let f4 = tcp4(A4, B4, 40000, 7, b"hi");
        let f6 = tcp6(A6, B6, 7, 40001);
        let cases: &[(&str, CaptureFilter, &[u8], bool)] = &[
            ("no filter takes anything", all, &[1, 2, 3], true),
            ("port, destination", port(7), &f4, true),
            ("port, source, v6", port(7), &f6, true),
            ("port, other", port(8), &f4, false),
            ("port, udp", port(53), &udp4(53, 9999), true),
            ("port, arp", port(7), &arp(A4, B4), false),
            ("port, garbage", port(7), &[0xff; 20], false),
            ("host v4, source", host(a4), &f4, true),
            ("host v4, destination", host(IpAddr::V4(Ipv4Addr::from(B4))), &f4, true),
            ("host v4, other", host(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3))), &f4, false),
            ("host v4 on v6", host(a4), &f6, false),
            ("host v6, destination", host(b6), &f6, true),
            ("host v6, other", host(IpAddr::V6(Ipv6Addr::LOCALHOST)), &f6, false),
            ("host v6 on v4", host(b6), &f4, false),
            ("host v4-mapped v6 is the v4 host", host(IpAddr::V6(Ipv4Addr::from(A4).to_ipv6_mapped())), &f4, true),
            ("host, arp about it", host(a4), &arp(B4, A4), true),
            ("host, arp about others", host(a4), &arp(B4, [10, 0, 0, 9]), false),
            ("port and host", CaptureFilter { port: Some(7), host: Some(a4) }, &f4, true),
            ("port and other host", CaptureFilter { port: Some(7), host: Some(b6) }, &f4, false),
        ];
        for (name, filter, frame, want) in cases {
            assert_eq!(filter.matches(frame), *want, "{name}");
        }
    }

    /// What a reader found in the stream: packets (length, comment) and statistics
    /// (ifrecv, ifdrop).
    #[derive(Debug, Default)]
    struct Stream {
        packets: Vec<(usize, Option<String>)>,
        statistics: Vec<(u64, u64)>,
    }

    fn parse(bytes: &[u8]) -> Stream {
        let mut reader = PcapNgReader::new(bytes).unwrap();
        let mut stream = Stream::default();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::EnhancedPacket(epb) => {
                    let comment = epb.options.iter().find_map(|o| match o {
                        EnhancedPacketOption::Comment(c) => Some(c.to_string()),
                        _ => None,
                    });
                    stream.packets.push((epb.data.len(), comment));
                }
                Block::InterfaceStatistics(isb) => {
                    let (mut recv, mut drop) = (0, 0);
                    for o in &isb.options {
                        match o {
                            InterfaceStatisticsOption::IsbIfRecv(n) => recv = *n,
                            InterfaceStatisticsOption::IsbIfDrop(n) => drop = *n,
                            _ => {}
                        }
                    }
                    stream.statistics.push((recv, drop));
                }
                _ => {}
            }
        }
        stream
    }

    fn capture(filter: CaptureFilter) -> (LiveCapture, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (LiveCapture::new(ours, filter, "bx0", "test", UNIX_EPOCH).unwrap(), theirs)
    }

    /// Read what is there now, without waiting.
    fn read_available(reader: &mut UnixStream, into: &mut Vec<u8>) {
        reader.set_nonblocking(true).unwrap();
        let mut buf = vec![0; 1 << 16];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => into.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    #[test]
    fn a_reader_that_stops_reading_costs_drops_never_a_wait() {
        let (mut cap, mut reader) = capture(CaptureFilter::default());
        let frame = tcp4(A4, B4, 40000, 7, &[0xa5; 1400]);
        const FRAMES: u64 = 10_000;
        let mut slowest = Duration::ZERO;
        let started = std::time::Instant::now();
        for i in 0..FRAMES {
            let t = std::time::Instant::now();
            cap.frame(Instant::from_micros(i), Direction::In, &frame, "in [ACK] len=1400 | ESTABLISHED");
            cap.batch();
            slowest = slowest.max(t.elapsed());
        }
        // ~14.6 MB offered against a 4 MiB buffer and a socket nobody reads.
        assert!(cap.dropped() > FRAMES / 2, "dropped {}", cap.dropped());
        assert!(cap.buffered() <= BUFFER_LIMIT);
        assert!(!cap.closed());
        assert!(slowest < Duration::from_millis(100), "a call took {slowest:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());

        // The reader comes back: everything buffered reaches it, then the final counts.
        let mut bytes = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while cap.buffered() > 0 {
            assert!(std::time::Instant::now() < until, "the buffer does not drain");
            read_available(&mut reader, &mut bytes);
            cap.batch();
        }
        read_available(&mut reader, &mut bytes);
        let dropped = cap.dropped();
        drop(cap);
        reader.set_nonblocking(false).unwrap();
        reader.read_to_end(&mut bytes).unwrap();
        let stream = parse(&bytes);
        assert_eq!(stream.packets.len() as u64, FRAMES - dropped);
        assert!(
            stream
                .packets
                .iter()
                .all(|(len, c)| *len == frame.len() && c.as_deref() == Some("in [ACK] len=1400 | ESTABLISHED"))
        );
        assert_eq!(stream.statistics.last(), Some(&(FRAMES, dropped)), "{:?}", stream.statistics);
    }

    #[test]
    fn a_reader_that_goes_away_closes_the_capture() {
        // With traffic: the next write fails.
        let (mut cap, reader) = capture(CaptureFilter::default());
        drop(reader);
        cap.frame(Instant::ZERO, Direction::Out, &udp4(1, 2), "out");
        cap.batch();
        assert!(cap.closed());
        assert_eq!(cap.buffered(), 0, "the buffer is freed");

        // Without traffic: the periodic statistics block finds out.
        let (mut cap, reader) = capture(CaptureFilter::default());
        cap.stats_every = Duration::ZERO;
        cap.batch();
        assert!(!cap.closed());
        drop(reader);
        cap.batch();
        assert!(cap.closed());

        // Another reader of the same frames is not affected.
        let (mut gone, reader) = capture(CaptureFilter::default());
        let (mut kept, mut kept_reader) = capture(CaptureFilter::default());
        drop(reader);
        for c in [&mut gone, &mut kept] {
            c.frame(Instant::ZERO, Direction::In, &udp4(1, 2), "in");
            c.batch();
        }
        assert!(gone.closed() && !kept.closed());
        let mut bytes = Vec::new();
        read_available(&mut kept_reader, &mut bytes);
        assert_eq!(parse(&bytes).packets, vec![(udp4(1, 2).len(), Some("in".to_string()))]);
    }

    #[test]
    fn each_reader_gets_what_its_filter_takes_in_real_time() {
        let (mut web, mut web_reader) = capture(CaptureFilter { port: Some(80), host: None });
        let (mut all, mut all_reader) = capture(CaptureFilter::default());
        for c in [&mut web, &mut all] {
            c.frame(Instant::from_millis(1), Direction::In, &tcp4(A4, B4, 5000, 80, b"GET"), "web");
            c.frame(Instant::from_millis(2), Direction::In, &tcp4(A4, B4, 5000, 22, b"ssh"), "ssh");
            c.batch();
        }
        // No flush on idle needed: the batch put them on the socket.
        let (mut web_bytes, mut all_bytes) = (Vec::new(), Vec::new());
        read_available(&mut web_reader, &mut web_bytes);
        read_available(&mut all_reader, &mut all_bytes);
        let comments = |b: &[u8]| parse(b).packets.into_iter().map(|p| p.1.unwrap()).collect::<Vec<_>>();
        assert_eq!(comments(&web_bytes), ["web"]);
        assert_eq!(comments(&all_bytes), ["web", "ssh"]);
    }
}
