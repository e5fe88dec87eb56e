//! Recording: a [`Device`] wrapper that writes every frame received and sent to a pcapng file
//! (open it in Wireshark, or replay it in tests).
//!
//! The file has one interface description block naming the interface, with nanosecond
//! timestamps; each frame is an enhanced packet block whose flags give its direction
//! (inbound or outbound, pcapng `epb_flags`). A recorder that is not recording passes
//! frames through untouched.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bypass_stack::{Device, DeviceInfo};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};

/// `epb_flags` direction bits (pcapng section 4.3.1).
const INBOUND: u32 = 0b01;
const OUTBOUND: u32 = 0b10;

/// A device that records what passes through it.
pub struct Recorder<D: Device> {
    inner: D,
    writer: Option<PcapNgWriter<BufWriter<File>>>,
    frames: u64,
}

impl<D: Device> Recorder<D> {
    /// Wrap `inner` without recording.
    pub fn passthrough(inner: D) -> Self {
        Recorder { inner, writer: None, frames: 0 }
    }

    /// Wrap `inner`, recording to a new pcapng file at `path`.
    pub fn create(inner: D, path: &Path) -> io::Result<Self> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("create capture file {}: {e}", path.display())))?;
        let mut writer = PcapNgWriter::new(BufWriter::new(file)).map_err(io::Error::other)?;
        let info = inner.info();
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(info.name.clone())),
                InterfaceDescriptionOption::IfDescription(Cow::Owned(format!("bypass: {}", info.mode))),
                // pcap-file writes nanosecond timestamps.
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        writer.write_pcapng_block(idb).map_err(io::Error::other)?;
        Ok(Recorder { inner, writer: Some(writer), frames: 0 })
    }

    /// Return the wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Return the wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Return how many frames were recorded.
    pub fn recorded(&self) -> u64 {
        self.frames
    }

    /// Flush the file; recording goes on.
    pub fn sync(&mut self) -> io::Result<()> {
        use std::io::Write;
        match self.writer.as_mut() {
            Some(w) => w.get_mut().flush(),
            None => Ok(()),
        }
    }
}

/// Append one frame; on a write error, log it and stop recording (the traffic goes on).
fn record(writer: &mut Option<PcapNgWriter<BufWriter<File>>>, frames: &mut u64, frame: &[u8], flags: u32) {
    let Some(w) = writer.as_mut() else { return };
    let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let block = EnhancedPacketBlock {
        interface_id: 0,
        timestamp,
        original_len: frame.len() as u32,
        data: Cow::Borrowed(frame),
        options: vec![EnhancedPacketOption::Flags(flags)],
    };
    match w.write_pcapng_block(block) {
        Ok(_) => *frames += 1,
        Err(e) => {
            log::error!("capture stopped: cannot write to the capture file: {e}");
            *writer = None;
        }
    }
}

impl<D: Device> Device for Recorder<D> {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if self.writer.is_none() {
            return self.inner.recv(budget, on_frame);
        }
        let (writer, frames) = (&mut self.writer, &mut self.frames);
        self.inner.recv(budget, &mut |frame| {
            record(writer, frames, frame, INBOUND);
            on_frame(frame);
        })
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        if self.writer.is_none() {
            return self.inner.send(fill);
        }
        let (writer, frames) = (&mut self.writer, &mut self.frames);
        self.inner.send(&mut |buf| {
            let n = fill(buf);
            if n > 0 {
                record(writer, frames, &buf[..n], OUTBOUND);
            }
            n
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        // Idle: a good moment to push the capture to disk.
        let _ = self.sync();
        self.inner.wait(timeout)
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }
}

impl<D: Device> Drop for Recorder<D> {
    fn drop(&mut self) {
        let _ = self.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLink;
    use bypass_tcp::sim::LinkConfig;
    use pcap_file::pcapng::{Block, PcapNgReader};

    #[test]
    fn frames_both_ways_are_recorded_with_direction() {
        let (a, mut b) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
        let path = std::env::temp_dir().join(format!("bypass-rec-{}.pcapng", std::process::id()));
        let mut rec = Recorder::create(a, &path).unwrap();
        rec.send(&mut |buf| {
            buf[..60].fill(0x11);
            60
        })
        .unwrap();
        rec.flush().unwrap();
        b.send(&mut |buf| {
            buf[..70].fill(0x22);
            70
        })
        .unwrap();
        b.flush().unwrap();
        b.clock().advance(Duration::from_millis(5));
        let mut got = 0;
        rec.recv(8, &mut |f| got += f.len()).unwrap();
        assert_eq!(got, 70);
        assert_eq!(rec.recorded(), 2);
        drop(rec);

        let mut reader = PcapNgReader::new(File::open(&path).unwrap()).unwrap();
        let mut seen = Vec::new();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(idb) => assert_eq!(idb.linktype, DataLink::ETHERNET),
                Block::EnhancedPacket(epb) => {
                    let flags = epb.options.iter().find_map(|o| match o {
                        EnhancedPacketOption::Flags(f) => Some(*f),
                        _ => None,
                    });
                    seen.push((epb.data.len(), flags));
                }
                _ => {}
            }
        }
        assert_eq!(seen, vec![(60, Some(OUTBOUND)), (70, Some(INBOUND))]);
        let _ = std::fs::remove_file(&path);
    }
}
