//! `bypass capture`: attach a live capture to a running stack and copy its pcapng stream to a
//! file or to standard output, for `tshark -r -` or `wireshark -k -i -` to read as it comes.
//!
//! The stack's control endpoint (`bypass-control`) turns the request `{"cmd":"capture"}` into
//! a pcapng byte stream of every frame it receives and sends, with its notes as packet
//! comments; the stack never waits for us, and what we cannot take in time it counts as
//! dropped and reports in the stream's interface statistics blocks. The capture ends when we
//! are interrupted (Ctrl-C, SIGTERM), when our reader goes away (`EPIPE`: a closed pipe ends
//! it quietly) or when the stack exits; the stack detaches it when our socket closes. The
//! Wireshark extcap (`src/extcap.rs`) shares the choosing and the copying.

use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bypass_control::{Endpoint, endpoints};

/// What `bypass capture` takes.
#[derive(clap::Args)]
pub struct CaptureArgs {
    /// The stack's process id (see `bypass ss`); may be left out when one stack runs.
    pid: Option<u32>,
    /// Write the capture to FILE (pcapng), or to standard output with `-` (the default; not
    /// to a terminal: pipe it into `tshark -r -` or `wireshark -k -i -`).
    #[arg(short = 'w', value_name = "FILE", default_value = "-")]
    write: PathBuf,
    /// Only TCP and UDP frames from or to this port.
    #[arg(long)]
    port: Option<u16>,
    /// Only frames from or to this address (IPv4 or IPv6; ARP about it too).
    #[arg(long)]
    host: Option<IpAddr>,
    /// Which stack of a process that runs several (a runtime's shard); default: the only one.
    #[arg(long)]
    shard: Option<u32>,
}

/// Run `bypass capture`.
pub fn run(args: CaptureArgs) -> Result<(), String> {
    let endpoint = choose(args.pid, args.shard)?;
    let to_stdout = args.write.as_os_str() == "-";
    if to_stdout && io::stdout().is_terminal() {
        return Err("standard output is a terminal: write to a file with -w FILE, or pipe into `tshark -r -` or `wireshark -k -i -`".into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }
    let stream = open(&endpoint, args.port, args.host)?;
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(io::stdout().lock())
    } else {
        let file = File::create(&args.write).map_err(|e| {
            format!("cannot create {}: {e}: check the directory and its permissions", args.write.display())
        })?;
        Box::new(file)
    };
    eprintln!("capturing on stack {} shard {} (Ctrl-C stops)", endpoint.pid, endpoint.shard);
    let copied = copy(stream, &mut out, &stop)?;
    if copied.end != End::ReaderGone {
        eprintln!("{}", copied.summary());
    }
    Ok(())
}

/// Return the endpoint to capture from: `pid`'s (or the only running stack's), shard `shard`
/// (or its only one). Each refusal is one sentence saying what to give.
pub fn choose(pid: Option<u32>, shard: Option<u32>) -> Result<Endpoint, String> {
    let found = endpoints(pid).map_err(|e| e.to_string())?;
    let mut pids: Vec<u32> = found.iter().map(|e| e.pid).collect();
    pids.dedup();
    if pids.len() > 1 {
        let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        return Err(format!(
            "several bypass stacks run (pids {list}): give the pid, as in `bypass capture {}`",
            pids[0]
        ));
    }
    let pid = pids[0];
    let shards: Vec<u32> = found.iter().map(|e| e.shard).collect();
    let list = || shards.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    match shard {
        Some(s) => found.into_iter().find(|e| e.shard == s).ok_or_else(|| {
            format!("process {pid} has no stack {s} (its shards: {}): give one of them to --shard", list())
        }),
        None if found.len() == 1 => Ok(found.into_iter().next().expect("one endpoint")),
        None => {
            Err(format!("process {pid} runs {} stacks (shards {}): choose one with --shard N", found.len(), list()))
        }
    }
}

/// Ask `endpoint` for a capture of the frames `port` and `host` select and return the stream
/// of pcapng, its first bytes checked: a refusal comes as one JSON line instead.
pub fn open(endpoint: &Endpoint, port: Option<u16>, host: Option<IpAddr>) -> Result<Prefixed, String> {
    let mut request = serde_json::json!({"cmd": "capture"});
    if let Some(port) = port {
        request["port"] = port.into();
    }
    if let Some(host) = host {
        request["host"] = host.to_string().into();
    }
    let mut stream = endpoint.request(&request).map_err(|e| e.to_string())?;
    let what = |e: io::Error| format!("cannot read the capture from {}: {e}", endpoint.path.display());
    stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(what)?;
    // The section header block starts with 0x0a0d0d0a; an error reply with '{'.
    let mut first = vec![0u8; 4096];
    let mut n = 0;
    while n == 0 || (first[0] == b'{' && !first[..n].contains(&b'\n')) {
        match stream.read(&mut first[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(format!(
                    "stack {} shard {} did not answer the capture request within 5 s: is its loop stuck?",
                    endpoint.pid, endpoint.shard
                ));
            }
            Err(e) => return Err(what(e)),
        }
        if n == first.len() {
            break;
        }
    }
    first.truncate(n);
    if first.is_empty() {
        return Err(format!(
            "stack {} shard {} closed the capture without a word: is it exiting?",
            endpoint.pid, endpoint.shard
        ));
    }
    if first[0] == b'{' {
        let reply: serde_json::Value = serde_json::from_slice(first.split(|&b| b == b'\n').next().unwrap_or(&[]))
            .map_err(|e| format!("the stack answered something that is not pcapng nor JSON ({e}): check that `bypass` and the stack are the same version"))?;
        let error = reply.get("error").and_then(|e| e.as_str()).unwrap_or("no reason given");
        return Err(format!("the stack refused the capture: {error}"));
    }
    if first.get(..4) != Some(&[0x0a, 0x0d, 0x0d, 0x0a][..]) {
        return Err("the stack's answer does not start with a pcapng section header: check that `bypass` and the stack are the same version".into());
    }
    // Short reads from here on, so that an interrupt is seen within 200 ms.
    stream.set_read_timeout(Some(Duration::from_millis(200))).map_err(what)?;
    Ok(Prefixed { first, stream })
}

/// A capture stream whose first bytes were read already.
pub struct Prefixed {
    first: Vec<u8>,
    stream: UnixStream,
}

/// Why a copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// We were told to stop (Ctrl-C, SIGTERM).
    Stopped,
    /// Whoever reads our output went away (`EPIPE`, a closed FIFO).
    ReaderGone,
    /// The stack closed the stream (it exited).
    StackGone,
}

/// What a copy moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    /// Bytes written.
    pub bytes: u64,
    /// Frames (enhanced packet blocks) written.
    pub frames: u64,
    /// Frames the stack dropped because we were too slow (its last `isb_ifdrop`).
    pub dropped: u64,
    /// Why it ended.
    pub end: End,
}

impl Copied {
    /// Return a line for the end of a capture, as tcpdump prints one.
    pub fn summary(&self) -> String {
        let why = match self.end {
            End::Stopped => "",
            End::ReaderGone => " (the reader went away)",
            End::StackGone => " (the stack closed the capture: it exited)",
        };
        format!("{} frames captured, {} dropped by the stack for a slow reader{why}", self.frames, self.dropped)
    }
}

/// Copy the capture to `out` until `stop` is set, `out` takes no more, or the stack closes it;
/// flush after every read, so that the reader sees frames as they come.
pub fn copy(capture: Prefixed, out: &mut dyn Write, stop: &AtomicBool) -> Result<Copied, String> {
    let Prefixed { first, mut stream } = capture;
    let mut blocks = BlockCounter::default();
    let mut copied = Copied { bytes: 0, frames: 0, dropped: 0, end: End::Stopped };
    // Write `data` on; false when the reader went away.
    let mut put = |data: &[u8], copied: &mut Copied| -> Result<bool, String> {
        blocks.feed(data);
        match out.write_all(data).and_then(|()| out.flush()) {
            Ok(()) => {
                copied.bytes += data.len() as u64;
                copied.frames = blocks.packets;
                copied.dropped = blocks.dropped;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(format!("cannot write the capture: {e}")),
        }
    };
    if !put(&first, &mut copied)? {
        copied.end = End::ReaderGone;
        return Ok(copied);
    }
    let mut buf = vec![0u8; 256 << 10];
    copied.end = loop {
        if stop.load(Ordering::SeqCst) {
            break End::Stopped;
        }
        match stream.read(&mut buf) {
            Ok(0) => break End::StackGone,
            Ok(n) => {
                if !put(&buf[..n], &mut copied)? {
                    break End::ReaderGone;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break End::StackGone,
            Err(e) => return Err(format!("cannot read the capture from the stack: {e}")),
        }
    };
    Ok(copied)
}

/// Follows the pcapng block structure of a stream going by, counting enhanced packet blocks
/// and reading `isb_ifdrop` from interface statistics blocks (pcapng sections 4.1, 4.3, 4.6).
#[derive(Debug, Default)]
struct BlockCounter {
    /// The current block's first bytes: type, length and (for a section header) the
    /// byte-order magic.
    head: Vec<u8>,
    /// Bytes of the current block still to come after its head.
    remaining: usize,
    /// The body of an interface statistics block being read.
    statistics: Option<Vec<u8>>,
    big_endian: bool,
    packets: u64,
    dropped: u64,
}

const SECTION_HEADER: u32 = 0x0a0d_0d0a;
const ENHANCED_PACKET: u32 = 6;
const INTERFACE_STATISTICS: u32 = 5;
const ISB_IFDROP: u16 = 5;

impl BlockCounter {
    fn u32(&self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        if self.big_endian { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) }
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.remaining == 0 {
                // Reading a head: 8 bytes, 12 for a section header (the byte-order magic).
                let want = if self.head.len() >= 4 && self.head[..4] == SECTION_HEADER.to_be_bytes() { 12 } else { 8 };
                let take = (want - self.head.len()).min(data.len());
                self.head.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.head.len() < want {
                    continue;
                }
                if want == 12 {
                    self.big_endian = self.head[8..12] == [0x1a, 0x2b, 0x3c, 0x4d];
                }
                let kind = self.u32(&self.head[0..4]);
                let len = self.u32(&self.head[4..8]) as usize;
                self.remaining = len.saturating_sub(self.head.len());
                match kind {
                    ENHANCED_PACKET => self.packets += 1,
                    INTERFACE_STATISTICS => self.statistics = Some(Vec::new()),
                    _ => {}
                }
                self.head.clear();
                if self.remaining == 0 {
                    self.end_block();
                }
                continue;
            }
            let take = self.remaining.min(data.len());
            if let Some(body) = self.statistics.as_mut() {
                body.extend_from_slice(&data[..take]);
            }
            data = &data[take..];
            self.remaining -= take;
            if self.remaining == 0 {
                self.end_block();
            }
        }
    }

    /// The current block is complete: read the drop count of a statistics block.
    fn end_block(&mut self) {
        let Some(body) = self.statistics.take() else { return };
        // Interface id (4), timestamp (8), options, trailing length (4).
        let u16_at = |b: &[u8]| {
            if self.big_endian { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) }
        };
        let mut at = 12;
        while at + 4 <= body.len().saturating_sub(4) {
            let (code, len) = (u16_at(&body[at..]), usize::from(u16_at(&body[at + 2..])));
            if code == 0 {
                break;
            }
            let value = &body[at + 4..];
            if code == ISB_IFDROP && len == 8 && value.len() >= 8 {
                let b: [u8; 8] = value[..8].try_into().expect("8 bytes");
                self.dropped = if self.big_endian { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) };
            }
            at += 4 + len.div_ceil(4) * 4;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_device::capture::{Capture, Direction};
    use bypass_device::{CaptureFilter, Instant, LiveCapture};

    #[test]
    fn the_block_counter_counts_frames_and_reads_drops_in_any_chunking() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut cap = LiveCapture::new(ours, CaptureFilter::default(), "bx0", "t", std::time::UNIX_EPOCH).unwrap();
        for i in 0..5u8 {
            cap.frame(Instant::from_millis(i.into()), Direction::In, &[i; 61], "note of odd length");
        }
        drop(cap); // Writes the final statistics: 5 received, 0 dropped.
        let mut bytes = Vec::new();
        theirs.read_to_end(&mut bytes).unwrap();
        // A statistics block with drops, as the stack writes it (little-endian here).
        let mut isb = Vec::new();
        for w in [5u32, 40, 0, 0, 0] {
            isb.extend_from_slice(&w.to_le_bytes());
        }
        isb.extend_from_slice(&[5, 0, 8, 0]);
        isb.extend_from_slice(&1234u64.to_le_bytes());
        isb.extend_from_slice(&[0, 0, 0, 0]);
        isb.extend_from_slice(&40u32.to_le_bytes());
        bytes.extend_from_slice(&isb);
        for chunk in [1, 3, 7, 4096] {
            let mut counter = BlockCounter::default();
            bytes.chunks(chunk).for_each(|c| counter.feed(c));
            assert_eq!((counter.packets, counter.dropped), (5, 1234), "chunks of {chunk}");
        }
    }
}
