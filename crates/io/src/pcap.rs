//! Recording: a pcapng writer for the host's annotated capture (see
//! [`bypass_stack::Capture`]), to open in Wireshark or replay in tests.
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

use bypass_stack::{Capture, Direction};
use bypass_tcp::Instant;
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};

/// `epb_flags` direction bits (pcapng section 4.3.1).
pub const INBOUND: u32 = 0b01;
/// `epb_flags` direction bits (pcapng section 4.3.1).
pub const OUTBOUND: u32 = 0b10;

/// A pcapng file being written.
pub struct PcapNgCapture {
    writer: Option<PcapNgWriter<BufWriter<File>>>,
    epoch: Duration,
    frames: u64,
}

impl PcapNgCapture {
    /// Create `path` for frames of interface `iface` (described as `description`), with the
    /// stack's `Instant::ZERO` at wall-clock time `epoch`.
    pub fn create(path: &Path, iface: &str, description: &str, epoch: SystemTime) -> io::Result<Self> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("create capture file {}: {e}", path.display())))?;
        let mut writer = PcapNgWriter::new(BufWriter::new(file)).map_err(io::Error::other)?;
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
        Ok(PcapNgCapture { writer: Some(writer), epoch, frames: 0 })
    }

    /// Return how many frames were written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Push what is buffered to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.get_mut().flush(),
            None => Ok(()),
        }
    }
}

impl Capture for PcapNgCapture {
    fn frame(&mut self, now: Instant, dir: Direction, frame: &[u8], note: &str) {
        let Some(w) = self.writer.as_mut() else { return };
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
        match w.write_pcapng_block(block) {
            Ok(_) => self.frames += 1,
            Err(e) => {
                // The traffic matters more than the recording: stop recording, keep serving.
                log::error!("capture stopped: cannot write to the capture file: {e}");
                self.writer = None;
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
