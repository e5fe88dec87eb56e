//! Recording and reading captures: a pcapng writer for the host's annotated capture (a
//! [`Capture`] sink), to open in Wireshark or replay in tests, and a reader of pcap and pcapng
//! files (Ethernet, Linux cooked and raw IP) into Ethernet frames.
//!
//! The file has one interface description block naming the interface, with nanosecond
//! timestamps; each frame is an enhanced packet block whose flags give its direction
//! (inbound or outbound, pcapng `epb_flags`) and whose comment (`opt_comment`, shown by
//! Wireshark as a packet comment) says what the frame meant to the stack.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::capture::{Capture, Direction};
use crate::time::Instant;
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::blocks::interface_statistics::{InterfaceStatisticsBlock, InterfaceStatisticsOption};

/// `epb_flags` direction bits (pcapng section 4.3.1).
pub const INBOUND: u32 = 0b01;
/// `epb_flags` direction bits (pcapng section 4.3.1).
pub const OUTBOUND: u32 = 0b10;

/// The pcapng blocks of one capture written to `W`: a section header and one Ethernet
/// interface with nanosecond timestamps, then enhanced packet blocks and interface
/// statistics blocks. What a file recording ([`PcapNgCapture`]) and a live capture
/// (`LiveCapture`, which writes into a bounded buffer it drains into a socket) share.
pub(crate) struct BlockWriter<W: Write> {
    writer: PcapNgWriter<W>,
    /// Wall-clock time of the stack's `Instant::ZERO`, since the Unix epoch.
    epoch: Duration,
}

impl<W: Write> BlockWriter<W> {
    /// Write the section header and the description of interface `iface` (described as
    /// `description`) to `out`, with the stack's `Instant::ZERO` at wall-clock time `epoch`.
    pub(crate) fn new(out: W, iface: &str, description: &str, epoch: SystemTime) -> io::Result<Self> {
        let mut writer = PcapNgWriter::new(out).map_err(io::Error::other)?;
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(iface.to_string())),
                InterfaceDescriptionOption::IfDescription(Cow::Owned(description.to_string())),
                // pcap-file writes nanosecond timestamps.
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        writer.write_pcapng_block(idb).map_err(io::Error::other)?;
        let epoch = epoch.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Ok(BlockWriter { writer, epoch })
    }

    /// Write `frame`, which went `dir` at `now`, with `note` as its comment (none when empty).
    pub(crate) fn packet(&mut self, now: Instant, dir: Direction, frame: &[u8], note: &str) -> io::Result<()> {
        let flags = match dir {
            Direction::In => INBOUND,
            Direction::Out => OUTBOUND,
        };
        let mut options = vec![EnhancedPacketOption::Flags(flags)];
        if !note.is_empty() {
            options.push(EnhancedPacketOption::Comment(Cow::Borrowed(note)));
        }
        let block = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: self.epoch + Duration::from_micros(now.as_micros()),
            original_len: frame.len() as u32,
            data: Cow::Borrowed(frame),
            options,
        };
        self.writer.write_pcapng_block(block).map(drop).map_err(io::Error::other)
    }

    /// Write an interface statistics block (pcapng section 4.6) at wall-clock time `at`: the
    /// frames the capture was offered since it began (`isb_ifrecv`) and those it dropped
    /// for want of room (`isb_ifdrop`).
    pub(crate) fn statistics(&mut self, at: SystemTime, received: u64, dropped: u64) -> io::Result<()> {
        let at = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let block = InterfaceStatisticsBlock {
            interface_id: 0,
            timestamp: at.as_nanos().min(u128::from(u64::MAX)) as u64,
            options: vec![
                InterfaceStatisticsOption::IsbIfRecv(received),
                InterfaceStatisticsOption::IsbIfDrop(dropped),
            ],
        };
        self.writer.write_pcapng_block(block).map(drop).map_err(io::Error::other)
    }

    /// Return the sink.
    pub(crate) fn get_ref(&self) -> &W {
        self.writer.get_ref()
    }

    /// Return the sink, mutably.
    pub(crate) fn get_mut(&mut self) -> &mut W {
        self.writer.get_mut()
    }
}

/// A pcapng file being written.
pub struct PcapNgCapture {
    blocks: Option<BlockWriter<BufWriter<File>>>,
    frames: u64,
    /// Stack time of the last flush: the file is pushed to disk at least every 100 ms of
    /// traffic, so a killed process loses little.
    flushed_at: Instant,
}

impl PcapNgCapture {
    /// Create `path` for frames of interface `iface` (described as `description`), with the
    /// stack's `Instant::ZERO` at wall-clock time `epoch`.
    pub fn create(path: &Path, iface: &str, description: &str, epoch: SystemTime) -> io::Result<Self> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("create capture file {}: {e}", path.display())))?;
        let blocks = BlockWriter::new(BufWriter::new(file), iface, description, epoch)?;
        Ok(PcapNgCapture { blocks: Some(blocks), frames: 0, flushed_at: Instant::ZERO })
    }

    /// Return how many frames were written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Push what is buffered to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        match self.blocks.as_mut() {
            Some(b) => b.get_mut().flush(),
            None => Ok(()),
        }
    }
}

impl Capture for PcapNgCapture {
    fn flush(&mut self) {
        let _ = PcapNgCapture::flush(self);
    }

    fn frame(&mut self, now: Instant, dir: Direction, frame: &[u8], note: &str) {
        let Some(b) = self.blocks.as_mut() else { return };
        match b.packet(now, dir, frame, note) {
            Ok(()) => {
                self.frames += 1;
                if now.saturating_duration_since(self.flushed_at) >= Duration::from_millis(100) {
                    self.flushed_at = now;
                    let _ = b.get_mut().flush();
                }
            }
            Err(e) => {
                // The traffic matters more than the recording: stop recording, keep serving.
                log::error!("capture stopped: cannot write to the capture file: {e}");
                self.blocks = None;
            }
        }
    }
}

impl Drop for PcapNgCapture {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::{Block, PcapNgReader};

    #[test]
    fn frames_are_written_with_direction_time_and_comment() {
        let path = std::env::temp_dir().join(format!("bypass-cap-{}.pcapng", std::process::id()));
        let epoch = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut cap = PcapNgCapture::create(&path, "bx0", "test", epoch).unwrap();
        cap.frame(Instant::from_millis(5), Direction::Out, &[0x11; 60], "out [SYN] seq=0 | SYN-SENT");
        cap.frame(Instant::from_millis(7), Direction::In, &[0x22; 70], "");
        assert_eq!(cap.frames(), 2);
        drop(cap);

        let mut reader = PcapNgReader::new(File::open(&path).unwrap()).unwrap();
        let mut seen = Vec::new();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(idb) => assert_eq!(idb.linktype, DataLink::ETHERNET),
                Block::EnhancedPacket(epb) => {
                    let mut flags = None;
                    let mut comment = None;
                    for o in &epb.options {
                        match o {
                            EnhancedPacketOption::Flags(f) => flags = Some(*f),
                            EnhancedPacketOption::Comment(c) => comment = Some(c.to_string()),
                            _ => {}
                        }
                    }
                    seen.push((epb.data.len(), epb.timestamp, flags, comment));
                }
                _ => {}
            }
        }
        assert_eq!(
            seen,
            vec![
                (
                    60,
                    Duration::from_micros(1_000_000_005_000),
                    Some(OUTBOUND),
                    Some("out [SYN] seq=0 | SYN-SENT".into())
                ),
                (70, Duration::from_micros(1_000_000_007_000), Some(INBOUND), None),
            ]
        );
        let _ = std::fs::remove_file(&path);
    }
}

// -------------------------------------------------------------------------------------------
// Reading captures
// -------------------------------------------------------------------------------------------

/// One frame read from a capture, as an Ethernet II frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Time since the Unix epoch (or the capture's own epoch).
    pub timestamp: Duration,
    /// The frame: as captured for Ethernet; with a synthesized Ethernet header (zero MACs,
    /// or the SLL source address) for Linux cooked and raw IP captures.
    pub data: Vec<u8>,
    /// Direction, where the capture says (pcapng `epb_flags`, SLL packet type).
    pub direction: Option<Direction>,
    /// The packet comment, where there is one.
    pub comment: Option<String>,
}

/// A frame of a capture that could not be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedFrame {
    /// Position in the capture (0-based, counting every packet).
    pub index: usize,
    /// Why it was skipped.
    pub reason: String,
}

/// What [`read_capture`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureFile {
    /// Usable frames, in file order.
    pub frames: Vec<CapturedFrame>,
    /// Frames skipped, with reasons.
    pub skipped: Vec<SkippedFrame>,
}

/// Why a capture could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadCaptureError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// Neither pcap nor pcapng, or damaged headers.
    #[error("{path} is not a pcap or pcapng capture ({detail}); check the file")]
    Format {
        /// The file.
        path: String,
        /// What the parser said.
        detail: String,
    },
    /// A link type we cannot turn into Ethernet frames.
    #[error(
        "{path} has link type {link:?}; supported are Ethernet, Linux cooked (SLL, SLL2) and raw IP: \
         re-capture on an Ethernet interface or with `tcpdump -i any`"
    )]
    UnsupportedLinkType {
        /// The file.
        path: String,
        /// The link type.
        link: DataLink,
    },
}

/// Read a pcap or pcapng file into Ethernet frames. Frames that cannot be used (truncated,
/// of an unsupported link type in a multi-interface pcapng) are listed in `skipped`; a file
/// whose only link type is unsupported is an error.
pub fn read_capture(path: &Path) -> Result<CaptureFile, ReadCaptureError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ReadCaptureError::Io { path: name.clone(), source })?;
    parse_capture(&name, &bytes)
}

/// [`read_capture`] of a capture already in memory; `name` stands for it in errors.
pub fn parse_capture(name: &str, bytes: &[u8]) -> Result<CaptureFile, ReadCaptureError> {
    let name = name.to_string();
    let format = |detail: String| ReadCaptureError::Format { path: name.clone(), detail };
    let mut out = CaptureFile::default();
    let magic = bytes.get(..4).ok_or_else(|| format("shorter than a capture header".into()))?;
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut reader = pcap_file::pcapng::PcapNgReader::new(bytes).map_err(|e| format(e.to_string()))?;
        let mut index = 0;
        let mut interfaces: Vec<(DataLink, Option<u8>)> = Vec::new();
        let mut supported_any = false;
        let mut unsupported = None;
        while let Some(block) = reader.next_block() {
            let block = match block {
                Ok(b) => b,
                Err(e) => {
                    out.skipped.push(SkippedFrame { index, reason: format!("damaged block: {e}") });
                    break;
                }
            };
            let epb = match block {
                pcap_file::pcapng::Block::InterfaceDescription(idb) => {
                    let resolution = idb.options.iter().find_map(|o| match o {
                        InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                        _ => None,
                    });
                    interfaces.push((idb.linktype, resolution));
                    continue;
                }
                pcap_file::pcapng::Block::SectionHeader(_) => {
                    interfaces.clear();
                    continue;
                }
                pcap_file::pcapng::Block::EnhancedPacket(epb) => epb,
                _ => continue,
            };
            let Some(&(link, resolution)) = interfaces.get(epb.interface_id as usize) else {
                out.skipped.push(SkippedFrame { index, reason: "packet of an undeclared interface".into() });
                index += 1;
                continue;
            };
            let mut direction = None;
            let mut comment = None;
            for option in &epb.options {
                match option {
                    EnhancedPacketOption::Flags(f) => {
                        direction = match f & 0b11 {
                            INBOUND => Some(Direction::In),
                            OUTBOUND => Some(Direction::Out),
                            _ => None,
                        }
                    }
                    EnhancedPacketOption::Comment(c) => comment = Some(c.to_string()),
                    _ => {}
                }
            }
            // pcap-file reads the raw timestamp as nanoseconds; rescale by if_tsresol
            // (default 10^-6, pcapng section 4.2).
            let timestamp = rescale(epb.timestamp, resolution.unwrap_or(6));
            match to_ethernet(link, &epb.data) {
                Ok((data, dir)) => {
                    supported_any = true;
                    out.frames.push(CapturedFrame { timestamp, data, direction: direction.or(dir), comment })
                }
                Err(Unusable::Link) => {
                    unsupported = Some(link);
                    out.skipped.push(SkippedFrame { index, reason: format!("unsupported link type {link:?}") })
                }
                Err(Unusable::Truncated(what)) => out.skipped.push(SkippedFrame { index, reason: what.into() }),
            }
            index += 1;
        }
        if let (false, Some(link)) = (supported_any, unsupported) {
            return Err(ReadCaptureError::UnsupportedLinkType { path: name, link });
        }
    } else {
        let mut reader = pcap_file::pcap::PcapReader::new(bytes).map_err(|e| format(e.to_string()))?;
        let link = reader.header().datalink;
        if to_ethernet(link, &[]).err() == Some(Unusable::Link) {
            return Err(ReadCaptureError::UnsupportedLinkType { path: name, link });
        }
        let mut index = 0;
        while let Some(packet) = reader.next_packet() {
            match packet {
                Ok(p) => match to_ethernet(link, &p.data) {
                    Ok((data, direction)) => {
                        out.frames.push(CapturedFrame { timestamp: p.timestamp, data, direction, comment: None })
                    }
                    Err(Unusable::Truncated(what)) => out.skipped.push(SkippedFrame { index, reason: what.into() }),
                    Err(Unusable::Link) => unreachable!("link type checked above"),
                },
                Err(e) => {
                    out.skipped.push(SkippedFrame { index, reason: format!("damaged record: {e}") });
                    break;
                }
            }
            index += 1;
        }
    }
    Ok(out)
}

fn rescale(raw: Duration, resolution: u8) -> Duration {
    let ticks = raw.as_nanos();
    let nanos = if resolution & 0x80 != 0 {
        // Negative power of two.
        let shift = (resolution & 0x7f).min(64) as u32;
        ticks.saturating_mul(1_000_000_000) >> shift
    } else if resolution <= 9 {
        ticks.saturating_mul(10u128.pow(9 - resolution as u32))
    } else {
        ticks / 10u128.pow((resolution as u32 - 9).min(30))
    };
    Duration::from_nanos(nanos.min(u64::MAX as u128) as u64)
}

#[derive(Debug, PartialEq, Eq)]
enum Unusable {
    Link,
    Truncated(&'static str),
}

/// Turn one captured packet of link type `link` into an Ethernet frame.
fn to_ethernet(link: DataLink, data: &[u8]) -> Result<(Vec<u8>, Option<Direction>), Unusable> {
    let ether = |ethertype: [u8; 2], src: [u8; 6], payload: &[u8]| {
        let mut frame = Vec::with_capacity(14 + payload.len());
        frame.extend_from_slice(&[0; 6]);
        frame.extend_from_slice(&src);
        frame.extend_from_slice(&ethertype);
        frame.extend_from_slice(payload);
        frame
    };
    // SLL packet types: 0 to us, 1 broadcast, 2 multicast, 3 to another host, 4 outgoing.
    let sll_direction = |t: u16| if t == 4 { Some(Direction::Out) } else { Some(Direction::In) };
    match link {
        DataLink::ETHERNET => Ok((data.to_vec(), None)),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => {
            let ethertype = match data.first().map(|b| b >> 4) {
                Some(4) => [0x08, 0x00],
                Some(6) => [0x86, 0xdd],
                None if data.is_empty() => [0x08, 0x00],
                _ => return Err(Unusable::Truncated("raw IP packet of unknown version")),
            };
            Ok((ether(ethertype, [0; 6], data), None))
        }
        DataLink::LINUX_SLL => {
            if data.is_empty() {
                return Ok((Vec::new(), None));
            }
            let h = data.get(..16).ok_or(Unusable::Truncated("shorter than a Linux cooked (SLL) header"))?;
            let mut src = [0u8; 6];
            src.copy_from_slice(&h[6..12]);
            let kind = u16::from_be_bytes([h[0], h[1]]);
            Ok((ether([h[14], h[15]], src, &data[16..]), sll_direction(kind)))
        }
        DataLink::LINUX_SLL2 => {
            if data.is_empty() {
                return Ok((Vec::new(), None));
            }
            let h = data.get(..20).ok_or(Unusable::Truncated("shorter than a Linux cooked v2 (SLL2) header"))?;
            let mut src = [0u8; 6];
            src.copy_from_slice(&h[12..18]);
            Ok((ether([h[0], h[1]], src, &data[20..]), sll_direction(h[10] as u16)))
        }
        _ => Err(Unusable::Link),
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("bypass-read-{}-{name}", std::process::id()))
    }

    #[test]
    fn our_own_recording_reads_back_with_comments() {
        let path = temp("own.pcapng");
        let mut cap = PcapNgCapture::create(&path, "bx0", "t", UNIX_EPOCH).unwrap();
        cap.frame(Instant::from_millis(1), Direction::In, &[1; 60], "hello");
        drop(cap);
        let file = read_capture(&path).unwrap();
        assert_eq!(file.frames.len(), 1);
        assert_eq!(file.frames[0].timestamp, Duration::from_millis(1));
        assert_eq!(file.frames[0].direction, Some(Direction::In));
        assert_eq!(file.frames[0].comment.as_deref(), Some("hello"));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn pcap_link_types_become_ethernet_frames() {
        use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
        let ip = [0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let mut sll = vec![0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 9, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        for (link, packet, src, dir) in [
            (DataLink::RAW, ip.to_vec(), [0; 6], None),
            (DataLink::LINUX_SLL, sll, [2, 0, 0, 0, 0, 9], Some(Direction::Out)),
        ] {
            let path = temp("link.pcap");
            let header = PcapHeader { datalink: link, ..PcapHeader::default() };
            let mut w = PcapWriter::with_header(File::create(&path).unwrap(), header).unwrap();
            w.write_packet(&PcapPacket::new(Duration::from_secs(1), packet.len() as u32, &packet)).unwrap();
            w.write_packet(&PcapPacket::new(Duration::from_secs(2), 3, &packet[..3])).unwrap();
            drop(w);
            let file = read_capture(&path).unwrap();
            assert_eq!(file.frames[0].data[6..12], src);
            assert_eq!(file.frames[0].data[12..14], [0x08, 0x00]);
            assert_eq!(file.frames[0].data[14..], ip);
            assert_eq!(file.frames[0].direction, dir);
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn unsupported_and_garbage_files_are_clear_errors() {
        use pcap_file::pcap::{PcapHeader, PcapWriter};
        let path = temp("ppp.pcap");
        let header = PcapHeader { datalink: DataLink::PPP, ..PcapHeader::default() };
        drop(PcapWriter::with_header(File::create(&path).unwrap(), header).unwrap());
        let err = read_capture(&path).unwrap_err().to_string();
        assert!(err.contains("link type") && err.contains("supported are"), "{err}");
        std::fs::write(&path, b"not a capture at all").unwrap();
        assert!(matches!(read_capture(&path), Err(ReadCaptureError::Format { .. })));
        std::fs::write(&path, b"ab").unwrap();
        assert!(matches!(read_capture(&path), Err(ReadCaptureError::Format { .. })));
        let _ = std::fs::remove_file(&path);
        assert!(matches!(read_capture(&path), Err(ReadCaptureError::Io { .. })));
    }

    #[test]
    fn microsecond_pcapng_timestamps_are_rescaled() {
        assert_eq!(rescale(Duration::from_nanos(1_500_000), 6), Duration::from_millis(1500));
        assert_eq!(rescale(Duration::from_nanos(7), 9), Duration::from_nanos(7));
        assert_eq!(rescale(Duration::from_nanos(1024), 0x80 | 10), Duration::from_secs(1));
    }
}
