//! The `Segment` value: one TCP segment with its meaning made explicit, and its parsing and
//! emitting.
//!
//! A segment is the IP payload: TCP has no length field, so the caller passes exactly the
//! bytes after the IP header, and everything after the TCP header is payload.
//! `etherparse` validates the data offset and reads the fixed header
//! ([`etherparse::TcpHeaderSlice`]); options are parsed in `options.rs`.

use core::fmt;
use core::net::IpAddr;
use core::ops::{BitOr, BitOrAssign};

use etherparse::TcpHeaderSlice;
use etherparse::err::tcp::{HeaderError, HeaderSliceError};

use super::checksum::{
    Checksum, FIXED_LEN, add_words, checksum_field, compute_checksum, pseudo_header, store_checksum,
};
use super::options::{TcpOptions, Timestamps, kind, options_len, parse_options, write_option_area};
use super::{EmitError, ParseError};
use crate::seq::SeqNum;

/// The nine TCP control bits (RFC 9293 section 3.1, RFC 3168, RFC 3540).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x002);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x004);
    /// Push function.
    pub const PSH: Flags = Flags(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x010);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x020);
    /// ECN-Echo (RFC 3168).
    pub const ECE: Flags = Flags(0x040);
    /// Congestion Window Reduced (RFC 3168).
    pub const CWR: Flags = Flags(0x080);
    /// ECN-nonce concealment protection (RFC 3540, historic).
    pub const NS: Flags = Flags(0x100);
    /// No flags.
    pub const NONE: Flags = Flags(0);

    const NAMES: [(Flags, &'static str); 9] = [
        (Flags::NS, "NS"),
        (Flags::CWR, "CWR"),
        (Flags::ECE, "ECE"),
        (Flags::URG, "URG"),
        (Flags::ACK, "ACK"),
        (Flags::PSH, "PSH"),
        (Flags::RST, "RST"),
        (Flags::SYN, "SYN"),
        (Flags::FIN, "FIN"),
    ];

    /// Return the flags from their 9-bit wire value (higher bits are ignored).
    pub const fn from_bits(bits: u16) -> Flags {
        Flags(bits & 0x1ff)
    }

    /// Return the 9-bit wire value.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Return whether every flag in `other` is set.
    #[inline]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Return whether any flag in `other` is set.
    #[inline]
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Return `self` with the flags in `other` cleared.
    #[inline]
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }

    /// Return whether SYN is set.
    #[inline]
    pub const fn syn(self) -> bool {
        self.contains(Flags::SYN)
    }

    /// Return whether ACK is set.
    #[inline]
    pub const fn ack(self) -> bool {
        self.contains(Flags::ACK)
    }

    /// Return whether FIN is set.
    #[inline]
    pub const fn fin(self) -> bool {
        self.contains(Flags::FIN)
    }

    /// Return whether RST is set.
    #[inline]
    pub const fn rst(self) -> bool {
        self.contains(Flags::RST)
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Display for Flags {
    /// Write the set flags as `SYN|ACK`, or `-` when none is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        // Print in the order people read a handshake in: SYN, ACK, FIN, RST, PSH, then the rest.
        for name in ["SYN", "FIN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "NS"] {
            let flag = Flags::NAMES.iter().find(|(_, n)| *n == name).map(|(f, _)| *f);
            if let Some(flag) = flag
                && self.contains(flag)
            {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One TCP segment: header fields, typed options and a borrowed payload.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number of the first octet (or of the SYN).
    pub seq: SeqNum,
    /// Next sequence number the sender expects, meaningful when ACK is set.
    pub ack: SeqNum,
    /// Control bits.
    pub flags: Flags,
    /// Window field as carried on the wire (unscaled).
    pub window: u16,
    /// Urgent pointer, meaningful when URG is set.
    pub urgent: u16,
    /// Typed options.
    pub options: TcpOptions,
    /// Data carried by the segment.
    pub payload: &'a [u8],
}

impl Segment<'static> {
    /// A segment with every field zero and no payload: a template for `..`.
    pub const EMPTY: Segment<'static> = Segment {
        src_port: 0,
        dst_port: 0,
        seq: SeqNum(0),
        ack: SeqNum(0),
        flags: Flags::NONE,
        window: 0,
        urgent: 0,
        options: TcpOptions::NONE,
        payload: &[],
    };
}

impl Segment<'_> {
    /// Return SEG.LEN: the octets of data plus one each for SYN and FIN (RFC 9293 3.4).
    #[inline]
    pub fn seg_len(&self) -> u32 {
        self.payload.len() as u32 + self.flags.syn() as u32 + self.flags.fin() as u32
    }
}

impl fmt::Debug for Segment<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}->{} [{}] seq={} ack={} win={} len={}",
            self.src_port,
            self.dst_port,
            self.flags,
            self.seq,
            self.ack,
            self.window,
            self.payload.len()
        )?;
        if !self.options.is_empty() {
            write!(f, " {:?}", self.options)?;
        }
        Ok(())
    }
}

impl<'a> Segment<'a> {
    /// Verify the checksum against the pseudo-header for `src` and `dst`, then parse `bytes`.
    ///
    /// `bytes` is the whole IP payload; see [`Segment::parse_unchecked`] for the
    /// parsing. The checksum is checked before the header's structure, so a
    /// corrupted segment reports [`ParseError::BadChecksum`].
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::AddressFamilyMismatch`],
    /// [`ParseError::TooLong`], [`ParseError::BadChecksum`], then any error of
    /// [`Segment::parse_unchecked`].
    pub fn parse(bytes: &'a [u8], src: IpAddr, dst: IpAddr) -> Result<Segment<'a>, ParseError> {
        let Some((fixed, _)) = bytes.split_first_chunk::<FIXED_LEN>() else {
            return Err(ParseError::Truncated { len: bytes.len() });
        };
        let pseudo = pseudo_header(src, dst, bytes.len())?;
        // Summed with its checksum, a correct segment folds to all ones (RFC 1071); summed
        // in 64-bit words as a segment sent is (`add_words`), not by etherparse's 16-bit
        // loop, which cost about 900 instructions of a 1460-byte segment received.
        if add_words(pseudo.clone(), bytes).ones_complement() != 0 {
            let expected = compute_checksum(pseudo, bytes).unwrap_or_default();
            let found = u16::from_be_bytes([fixed[16], fixed[17]]);
            return Err(ParseError::BadChecksum { expected, found });
        }
        Self::parse_unchecked(bytes)
    }

    /// Parse `bytes` as a segment without checking its checksum.
    ///
    /// Use it when the checksum was verified elsewhere (offloaded to the NIC).
    /// Everything after the header is payload. All nine flag bits are kept,
    /// unknown options are skipped (RFC 9293 3.1), the window scale is kept as
    /// sent (callers clamp it to 14, RFC 7323 2.3). A malformed option does not fail the
    /// segment: a known one of the wrong length is ignored, and a length of 0 or 1 or one
    /// past the header ends the options, as Linux's `tcp_parse_options` does (RFC 9293 3.1,
    /// MUST-7, asks only that it be handled); the skip is logged at debug level.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::DataOffsetTooSmall`],
    /// [`ParseError::DataOffsetPastEnd`].
    #[inline]
    pub fn parse_unchecked(bytes: &'a [u8]) -> Result<Segment<'a>, ParseError> {
        let Some((fixed, _)) = bytes.split_first_chunk::<FIXED_LEN>() else {
            return Err(ParseError::Truncated { len: bytes.len() });
        };
        let header = TcpHeaderSlice::from_slice(bytes).map_err(|e| match e {
            HeaderSliceError::Content(HeaderError::DataOffsetTooSmall { data_offset }) => {
                ParseError::DataOffsetTooSmall { data_offset }
            }
            HeaderSliceError::Len(e) => ParseError::DataOffsetPastEnd { header_len: e.required_len, len: bytes.len() },
        })?;
        // A header without options (every segment of a connection without timestamps,
        // while nothing is held out of order) has nothing to parse: what `parse_options`
        // returns for no bytes, without the call and the copy of what it returns.
        let area = header.options();
        let (options, skipped) = if area.is_empty() { (TcpOptions::NONE, None) } else { parse_options(area) };
        if let Some(skipped) = skipped {
            log::debug!(
                "segment {} -> {} seq {}: {skipped}, segment kept",
                header.source_port(),
                header.destination_port(),
                header.sequence_number()
            );
        }
        let header_len = header.slice().len();
        let payload = bytes.get(header_len..).unwrap_or_default();
        // etherparse reads the flags one bool at a time; all nine are the low
        // bits of bytes 12..14 (the data offset and reserved bits sit above them).
        let flags = Flags::from_bits(u16::from_be_bytes([fixed[12], fixed[13]]));
        Ok(Segment {
            src_port: header.source_port(),
            dst_port: header.destination_port(),
            seq: SeqNum(header.sequence_number()),
            ack: SeqNum(header.acknowledgment_number()),
            flags,
            window: header.window_size(),
            urgent: header.urgent_pointer(),
            options,
            payload,
        })
    }
}

/// The 20 bytes of the fixed TCP header (RFC 9293 3.1), checksum zero, for a header of
/// `header_len` bytes in all (at most 60, so its data offset fits in 4 bits).
///
/// Written as one array: etherparse's writers go through `io::Write` or an `ArrayVec` with
/// its own copy of the options, which the per-packet path does without. The tests check
/// these bytes against `etherparse::TcpHeader::to_bytes`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fixed_header(
    src_port: u16,
    dst_port: u16,
    seq: SeqNum,
    ack: SeqNum,
    header_len: usize,
    flags: Flags,
    window: u16,
    urgent: u16,
) -> [u8; FIXED_LEN] {
    let [sp0, sp1] = src_port.to_be_bytes();
    let [dp0, dp1] = dst_port.to_be_bytes();
    let [s0, s1, s2, s3] = seq.0.to_be_bytes();
    let [a0, a1, a2, a3] = ack.0.to_be_bytes();
    let data_offset = (header_len / 4) as u8;
    let [ns, flags] = flags.bits().to_be_bytes();
    let [w0, w1] = window.to_be_bytes();
    let [u0, u1] = urgent.to_be_bytes();
    #[rustfmt::skip]
    let bytes = [
        sp0, sp1, dp0, dp1,
        s0, s1, s2, s3,
        a0, a1, a2, a3,
        (data_offset << 4) | (ns & 1), flags, w0, w1,
        0, 0, u0, u1,
    ];
    bytes
}

/// The header of a segment whose only option is the timestamps option, or none: every
/// segment of a connection but its SYN and those that carry SACK blocks. What
/// [`Segment::write_header`] writes for a `Segment` with these fields, no urgent pointer,
/// and options `TcpOptions { timestamps, ..TcpOptions::NONE }`, written without building
/// that 96-byte value and sizing its option area from each option's presence.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlainHeader {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: Flags,
    pub window: u16,
    pub timestamps: Option<Timestamps>,
}

impl PlainHeader {
    /// Return the header length: 20 bytes, and 12 more with timestamps (two NOPs before
    /// the 10-byte option, as Linux aligns it, RFC 7323 Appendix A).
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        if self.timestamps.is_some() { FIXED_LEN + 12 } else { FIXED_LEN }
    }

    /// Write the header into `buf` and return its length, the checksum field left zero, as
    /// [`Segment::write_header`] does.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`] when `buf` is shorter than the header; `buf` is
    /// unchanged then.
    #[inline(always)]
    pub(crate) fn write(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let header_len = self.len();
        let Some((fixed, options)) =
            buf.get_mut(..header_len).and_then(|header| header.split_first_chunk_mut::<FIXED_LEN>())
        else {
            return Err(EmitError::BufferTooSmall { needed: header_len, available: buf.len() });
        };
        *fixed = fixed_header(self.src_port, self.dst_port, self.seq, self.ack, header_len, self.flags, self.window, 0);
        if let (Some(ts), Some(area)) = (self.timestamps, options.first_chunk_mut::<12>()) {
            let [v0, v1, v2, v3] = ts.tsval.to_be_bytes();
            let [e0, e1, e2, e3] = ts.tsecr.to_be_bytes();
            // NOP, NOP, kind 8, length 10 (RFC 7323 3.2), TSval, TSecr.
            *area = [kind::NOP, kind::NOP, kind::TIMESTAMPS, 10, v0, v1, v2, v3, e0, e1, e2, e3];
        }
        Ok(header_len)
    }
}

impl Segment<'_> {
    /// Return the header length in bytes: 20 plus the options padded to 4 bytes.
    ///
    /// SACK blocks that do not fit in 40 option bytes are not counted (they are
    /// not written, see [`Segment::write_header`]).
    #[inline]
    pub fn header_len(&self) -> usize {
        FIXED_LEN + options_len(&self.options)
    }

    /// Write the header (not the payload) into `buf` and return its length.
    ///
    /// The checksum field is left zero: fill it with [`set_checksum`](super::set_checksum) once the
    /// payload is in place, or use [`Segment::emit`]. Options are written in
    /// Linux's order; SACK blocks that do not fit are dropped from the end
    /// (RFC 2018 section 3). Bytes of `buf` past the header are untouched.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`] when `buf` is shorter than
    /// [`Segment::header_len`]; `buf` is unchanged then.
    #[inline]
    pub fn write_header(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let header_len = self.header_len();
        let available = buf.len();
        let too_small = EmitError::BufferTooSmall { needed: header_len, available };
        let Some((fixed, options)) =
            buf.get_mut(..header_len).and_then(|header| header.split_first_chunk_mut::<FIXED_LEN>())
        else {
            return Err(too_small);
        };
        *fixed = fixed_header(
            self.src_port,
            self.dst_port,
            self.seq,
            self.ack,
            header_len,
            self.flags,
            self.window,
            self.urgent,
        );
        // No option at all (every segment of a connection without timestamps while nothing
        // is held out of order): no call to find that out.
        if !options.is_empty() {
            write_option_area(&self.options, options);
        }
        Ok(header_len)
    }

    /// Write the header and payload into `buf`, fill the checksum, and return the length.
    ///
    /// The checksum covers the pseudo-header for `src` and `dst`. Bytes of
    /// `buf` past the segment are untouched.
    ///
    /// # Errors
    ///
    /// [`EmitError::AddressFamilyMismatch`], [`EmitError::TooLong`],
    /// [`EmitError::BufferTooSmall`]; `buf` is unchanged on error.
    pub fn emit(&self, src: IpAddr, dst: IpAddr, buf: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_as(Checksum::Full, src, dst, buf)
    }

    /// As [`emit`](Self::emit), with the checksum field as `mode` asks (see [`Checksum`]).
    ///
    /// # Errors
    ///
    /// As [`emit`](Self::emit).
    pub fn emit_as(&self, mode: Checksum, src: IpAddr, dst: IpAddr, buf: &mut [u8]) -> Result<usize, EmitError> {
        let header_len = self.header_len();
        let len = header_len + self.payload.len();
        let pseudo = pseudo_header(src, dst, len)?;
        let available = buf.len();
        let Some(out) = buf.get_mut(..len) else {
            return Err(EmitError::BufferTooSmall { needed: len, available });
        };
        self.write_header(out)?;
        if let Some(payload) = out.get_mut(header_len..) {
            payload.copy_from_slice(self.payload);
        }
        let checksum = checksum_field(mode, pseudo, out).unwrap_or_default();
        store_checksum(out, checksum);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use etherparse::TcpHeader;
    use etherparse::checksum::Sum16BitWords;

    use super::*;
    use crate::wire::checksum::checksum_value;
    use crate::wire::options::tests::{arb_options, as_written};
    use crate::wire::{PseudoSum, SackBlock, SackBlocks, Timestamps, fill_checksum, set_checksum, set_checksum_as};

    // Fixtures: SYN_V4, SYN_V6 and DATA_V4 are segments Linux 6.18 sent over
    // `lo`, with the addresses rewritten to documentation prefixes (and MSS and
    // window to Ethernet-sized values in the SYNs); SACK_V4 is built by hand in
    // the layout Linux's `tcp_options_write` uses. `lo` offloads the checksum,
    // so each was computed by an independent implementation (Python, RFC 1071)
    // for the addresses below.

    const V4_CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const V4_SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    const V6_CLIENT: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    const V6_SERVER: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));

    /// SYN 49122 -> 38239, mss 1460, sackOK, TS 2580087084/0, ws 10; V4_CLIENT -> V4_SERVER.
    #[rustfmt::skip]
    const SYN_V4: [u8; 40] = [
        0xbf, 0xe2, 0x95, 0x5f, // ports 49122 -> 38239
        0x95, 0x34, 0x08, 0x63, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, 0xfa, 0xf0, // data offset 10, SYN, window 64240
        0xd3, 0x00, 0x00, 0x00, // checksum, urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, 0x08, 0x0a, // SACK-permitted, timestamps
        0x99, 0xc9, 0x01, 0x2c, // TSval
        0x00, 0x00, 0x00, 0x00, // TSecr
        0x01, 0x03, 0x03, 0x0a, // NOP, window scale 10
    ];

    /// SYN 32840 -> 54213, mss 1440, sackOK, TS 1856515362/0, ws 10; V6_CLIENT -> V6_SERVER.
    #[rustfmt::skip]
    const SYN_V6: [u8; 40] = [
        0x80, 0x48, 0xd3, 0xc5,
        0x4b, 0x3b, 0x05, 0x5e,
        0x00, 0x00, 0x00, 0x00,
        0xa0, 0x02, 0xfd, 0x20,
        0xaf, 0x09, 0x00, 0x00,
        0x02, 0x04, 0x05, 0xa0,
        0x04, 0x02, 0x08, 0x0a,
        0x6e, 0xa8, 0x2d, 0x22,
        0x00, 0x00, 0x00, 0x00,
        0x01, 0x03, 0x03, 0x0a,
    ];

    /// PSH|ACK with "hello", TS 2580086060/1897783491; V4_CLIENT -> V4_SERVER.
    #[rustfmt::skip]
    const DATA_V4: [u8; 37] = [
        0xbf, 0xe2, 0x95, 0x5f,
        0x95, 0x34, 0x08, 0x64,
        0x38, 0x4d, 0xce, 0x9b,
        0x80, 0x18, 0x00, 0x40, // data offset 8, PSH|ACK, window 64
        0x5f, 0xc7, 0x00, 0x00,
        0x01, 0x01, 0x08, 0x0a, // NOP, NOP, timestamps
        0x99, 0xc9, 0x01, 0x2c,
        0x71, 0x1d, 0xe0, 0xc3,
        b'h', b'e', b'l', b'l', b'o',
    ];

    /// Duplicate ACK with timestamps and two SACK blocks in Linux's layout; V4_SERVER -> V4_CLIENT.
    #[rustfmt::skip]
    const SACK_V4: [u8; 52] = [
        0x95, 0x5f, 0xbf, 0xe2,
        0x38, 0x4d, 0xce, 0x9b,
        0x95, 0x34, 0x08, 0x69,
        0xd0, 0x10, 0x02, 0x00, // data offset 13, ACK, window 512
        0xa4, 0xf9, 0x00, 0x00,
        0x01, 0x01, 0x08, 0x0a,
        0x71, 0x1d, 0xe0, 0xf5,
        0x99, 0xc9, 0x01, 0x2c,
        0x01, 0x01, 0x05, 0x12, // NOP, NOP, SACK with 2 blocks
        0x95, 0x34, 0x0c, 0x69,
        0x95, 0x34, 0x10, 0x6d,
        0x95, 0x34, 0x18, 0x71,
        0x95, 0x34, 0x1c, 0x75,
    ];

    fn syn_v4() -> Segment<'static> {
        Segment {
            src_port: 49122,
            dst_port: 38239,
            seq: SeqNum(0x9534_0863),
            flags: Flags::SYN,
            window: 64240,
            options: TcpOptions {
                mss: Some(1460),
                window_scale: Some(10),
                sack_permitted: true,
                sack_blocks: SackBlocks::new(),
                timestamps: Some(Timestamps { tsval: 0x99c9_012c, tsecr: 0 }),
            },
            ..Segment::EMPTY
        }
    }

    fn sack_v4() -> Segment<'static> {
        let mut blocks = SackBlocks::new();
        blocks.push(SackBlock { left: SeqNum(0x9534_0c69), right: SeqNum(0x9534_106d) });
        blocks.push(SackBlock { left: SeqNum(0x9534_1871), right: SeqNum(0x9534_1c75) });
        Segment {
            src_port: 38239,
            dst_port: 49122,
            seq: SeqNum(0x384d_ce9b),
            ack: SeqNum(0x9534_0869),
            flags: Flags::ACK,
            window: 512,
            options: TcpOptions {
                sack_blocks: blocks,
                timestamps: Some(Timestamps { tsval: 0x711d_e0f5, tsecr: 0x99c9_012c }),
                ..TcpOptions::NONE
            },
            ..Segment::EMPTY
        }
    }

    /// Emit `seg` into a 0xa5-filled buffer, check nothing past it was written, return the bytes.
    fn emit(seg: &Segment<'_>, src: IpAddr, dst: IpAddr) -> Vec<u8> {
        let mut buf = vec![0xa5; 128 + seg.payload.len()];
        let len = seg.emit(src, dst, &mut buf).unwrap();
        assert_eq!(len, seg.header_len() + seg.payload.len());
        assert!(buf[len..].iter().all(|&b| b == 0xa5), "wrote past {len}");
        buf.truncate(len);
        buf
    }

    /// Return `bytes` with its checksum recomputed for V4_CLIENT -> V4_SERVER.
    fn with_checksum<const N: usize>(mut bytes: [u8; N]) -> [u8; N] {
        set_checksum(&mut bytes, V4_CLIENT, V4_SERVER).unwrap();
        bytes
    }

    // ---- fixtures: parse, emit, round trip ----

    #[test]
    fn parse_linux_syn_v4() {
        assert_eq!(Segment::parse(&SYN_V4, V4_CLIENT, V4_SERVER), Ok(syn_v4()));
        assert_eq!(Segment::parse_unchecked(&SYN_V4), Ok(syn_v4()));
    }

    #[test]
    fn parse_linux_syn_v6() {
        let seg = Segment::parse(&SYN_V6, V6_CLIENT, V6_SERVER).unwrap();
        assert_eq!((seg.src_port, seg.dst_port, seg.seq), (32840, 54213, SeqNum(0x4b3b_055e)));
        assert_eq!((seg.flags, seg.window, seg.payload), (Flags::SYN, 0xfd20, &[][..]));
        assert_eq!(format!("{:?}", seg.options), "mss=1440 ws=10 sackOK ts=1856515362/0");
        // The IPv4 pseudo-header gives another checksum.
        let v4 = Segment::parse(&SYN_V6, V4_CLIENT, V4_SERVER);
        assert!(matches!(v4, Err(ParseError::BadChecksum { found: 0xaf09, .. })), "{v4:?}");
    }

    #[test]
    fn parse_linux_data_v4() {
        let seg = Segment::parse(&DATA_V4, V4_CLIENT, V4_SERVER).unwrap();
        assert_eq!(seg.flags, Flags::PSH | Flags::ACK);
        assert_eq!((seg.seq, seg.ack, seg.window), (SeqNum(0x9534_0864), SeqNum(0x384d_ce9b), 64));
        assert_eq!(seg.options.timestamps, Some(Timestamps { tsval: 0x99c9_012c, tsecr: 0x711d_e0c3 }));
        assert_eq!(seg.payload, b"hello");
        assert_eq!(seg.header_len(), 32);
    }

    #[test]
    fn parse_sack_v4() {
        assert_eq!(Segment::parse(&SACK_V4, V4_SERVER, V4_CLIENT), Ok(sack_v4()));
    }

    #[test]
    fn emit_reproduces_the_fixtures() {
        assert_eq!(emit(&syn_v4(), V4_CLIENT, V4_SERVER), SYN_V4);
        assert_eq!(emit(&sack_v4(), V4_SERVER, V4_CLIENT), SACK_V4);
        for (bytes, src, dst) in [
            (&SYN_V4[..], V4_CLIENT, V4_SERVER),
            (&SYN_V6[..], V6_CLIENT, V6_SERVER),
            (&DATA_V4[..], V4_CLIENT, V4_SERVER),
            (&SACK_V4[..], V4_SERVER, V4_CLIENT),
        ] {
            let seg = Segment::parse(bytes, src, dst).unwrap();
            assert_eq!(emit(&seg, src, dst), bytes, "{seg:?}");
        }
    }

    #[test]
    fn write_header_leaves_checksum_zero_and_payload_alone() {
        let seg = Segment::parse(&DATA_V4, V4_CLIENT, V4_SERVER).unwrap();
        let mut buf = [0xa5; 40];
        assert_eq!(seg.write_header(&mut buf), Ok(32));
        assert_eq!(&buf[..16], &DATA_V4[..16]);
        assert_eq!(&buf[16..18], &[0, 0]);
        assert_eq!(&buf[18..32], &DATA_V4[18..32]);
        assert_eq!(&buf[32..], &[0xa5; 8]);
        // Fill the payload and the checksum: the fixture again.
        buf[32..37].copy_from_slice(b"hello");
        set_checksum(&mut buf[..37], V4_CLIENT, V4_SERVER).unwrap();
        assert_eq!(&buf[..37], &DATA_V4);
    }

    #[test]
    fn set_checksum_ignores_the_old_value() {
        let mut bytes = SYN_V6;
        bytes[16..18].copy_from_slice(&[0xde, 0xad]);
        set_checksum(&mut bytes, V6_CLIENT, V6_SERVER).unwrap();
        assert_eq!(bytes, SYN_V6);
    }

    #[test]
    fn all_nine_flags_round_trip() {
        let seg = Segment { flags: Flags::from_bits(0x1ff), urgent: 0xbeef, ..syn_v4() };
        let bytes = emit(&seg, V4_CLIENT, V4_SERVER);
        assert_eq!(&bytes[12..14], &[0xa1, 0xff]);
        assert_eq!(Segment::parse(&bytes, V4_CLIENT, V4_SERVER), Ok(seg));
        let ns = Segment { flags: Flags::NS, ..Segment::EMPTY };
        assert_eq!(&emit(&ns, V4_CLIENT, V4_SERVER)[12..14], &[0x51, 0x00]);
    }

    #[test]
    fn bare_header_is_twenty_bytes() {
        let rst = Segment { flags: Flags::RST | Flags::ACK, ..Segment::EMPTY };
        assert_eq!(rst.header_len(), 20);
        let bytes = emit(&rst, V6_CLIENT, V6_SERVER);
        assert_eq!(bytes.len(), 20);
        assert_eq!(bytes[12], 0x50);
        assert_eq!(Segment::parse(&bytes, V6_CLIENT, V6_SERVER), Ok(rst));
    }

    // ---- parse errors: every variant ----

    #[test]
    fn parse_errors() {
        use ParseError::*;
        let mut too_small = DATA_V4;
        too_small[12] = 0x40;
        let mut past_end = SYN_V4;
        past_end[12] = 0xf0;
        let mut corrupt = DATA_V4;
        corrupt[36] ^= 0x01;
        let cases: &[(&[u8], ParseError)] = &[
            (&SYN_V4[..19], Truncated { len: 19 }),
            (&[], Truncated { len: 0 }),
            (&with_checksum(too_small), DataOffsetTooSmall { data_offset: 4 }),
            (&with_checksum(past_end), DataOffsetPastEnd { header_len: 60, len: 40 }),
            (&corrupt, BadChecksum { expected: 0x60c7, found: 0x5fc7 }),
        ];
        for (bytes, error) in cases {
            assert_eq!(Segment::parse(bytes, V4_CLIENT, V4_SERVER), Err(*error), "{bytes:02x?}");
            if !matches!(error, BadChecksum { .. }) {
                assert_eq!(Segment::parse_unchecked(bytes), Err(*error), "{bytes:02x?}");
            }
        }
        assert_eq!(Segment::parse(&SYN_V4, V4_CLIENT, V6_SERVER), Err(AddressFamilyMismatch));
        assert_eq!(Segment::parse(&SYN_V6, V6_CLIENT, V4_SERVER), Err(AddressFamilyMismatch));
        let jumbo = vec![0; 70_000];
        assert_eq!(Segment::parse(&jumbo, V4_CLIENT, V4_SERVER), Err(TooLong { len: 70_000, max: 65_535 }));
        // IPv6 allows it (RFC 2675 jumbograms); this one is all zeros, so its checksum is bad.
        assert!(matches!(Segment::parse(&jumbo, V6_CLIENT, V6_SERVER), Err(BadChecksum { found: 0, .. })));
    }

    // ---- malformed options: skipped, the segment kept (Linux's tcp_parse_options) ----

    #[test]
    fn a_malformed_option_keeps_the_segment() {
        let syn = syn_v4();
        let mut mss_len = SYN_V4;
        mss_len[20..24].copy_from_slice(&[0x02, 0x03, 0x05, 0x01]); // MSS of length 3, NOP
        let mut zero_len = SYN_V4;
        zero_len[38] = 0; // window scale of length 0
        let mut past_header = SYN_V4;
        past_header[36..40].copy_from_slice(&[0x01, 0x01, 0x1e, 0x05]);
        let mut no_len_byte = SYN_V4;
        no_len_byte[36..40].copy_from_slice(&[0x01, 0x01, 0x01, 0x08]);
        let no_ws = TcpOptions { window_scale: None, ..syn.options };
        let cases = [
            (with_checksum(mss_len), TcpOptions { mss: None, ..syn.options }),
            (with_checksum(zero_len), no_ws),
            (with_checksum(past_header), no_ws),
            (with_checksum(no_len_byte), no_ws),
        ];
        for (bytes, options) in cases {
            let expected = Segment { options, ..syn };
            assert_eq!(Segment::parse(&bytes, V4_CLIENT, V4_SERVER), Ok(expected), "{bytes:02x?}");
            assert_eq!(Segment::parse_unchecked(&bytes), Ok(expected), "{bytes:02x?}");
        }
        // Data with a timestamps option of length 8: the option is ignored, the data kept.
        let mut ts_len = DATA_V4;
        ts_len[23] = 8;
        let ts_len = with_checksum(ts_len);
        let seg = Segment::parse(&ts_len, V4_CLIENT, V4_SERVER).unwrap();
        assert_eq!(seg.options, TcpOptions::NONE);
        assert_eq!(seg.payload, b"hello");
        assert_eq!(seg.seq, Segment::parse(&DATA_V4, V4_CLIENT, V4_SERVER).unwrap().seq);
    }

    #[test]
    fn checksum_zero_and_all_ones_are_the_same() {
        // A checksum of 0x0000 may be sent as 0xffff: both are zero in one's complement.
        let seg = (0..=u16::MAX)
            .map(|window| emit(&Segment { window, ..Segment::EMPTY }, V4_CLIENT, V4_SERVER))
            .find(|bytes| bytes[16..18] == [0, 0])
            .unwrap();
        let mut ones = seg.clone();
        ones[16..18].copy_from_slice(&[0xff, 0xff]);
        assert!(Segment::parse(&seg, V4_CLIENT, V4_SERVER).is_ok());
        assert!(Segment::parse(&ones, V4_CLIENT, V4_SERVER).is_ok());
    }

    // ---- emit errors ----

    #[test]
    fn emit_errors_leave_the_buffer_alone() {
        use EmitError::*;
        let seg = Segment { payload: b"hello", ..syn_v4() };
        let mut buf = [0xa5; 44];
        assert_eq!(seg.emit(V4_CLIENT, V4_SERVER, &mut buf), Err(BufferTooSmall { needed: 45, available: 44 }));
        assert_eq!(seg.emit(V4_CLIENT, V6_SERVER, &mut buf), Err(AddressFamilyMismatch));
        assert_eq!(seg.write_header(&mut buf[..39]), Err(BufferTooSmall { needed: 40, available: 39 }));
        assert_eq!(buf, [0xa5; 44]);
        assert_eq!(
            set_checksum(&mut buf[..19], V4_CLIENT, V4_SERVER),
            Err(BufferTooSmall { needed: 20, available: 19 })
        );
        assert_eq!(set_checksum(&mut buf, V6_CLIENT, V4_SERVER), Err(AddressFamilyMismatch));
        assert_eq!(buf, [0xa5; 44]);
        let big = vec![0; 65_536];
        let jumbo = Segment { payload: &big, ..Segment::EMPTY };
        let mut out = vec![0xa5; 70_000];
        assert_eq!(jumbo.emit(V4_CLIENT, V4_SERVER, &mut out), Err(TooLong { len: 65_556, max: 65_535 }));
        assert!(out.iter().all(|&b| b == 0xa5));
        assert_eq!(jumbo.emit(V6_CLIENT, V6_SERVER, &mut out), Ok(65_556));
    }

    /// `fill_checksum` fails where `set_checksum_as` fails, with the same error, and leaves
    /// the segment as it was: addresses of two families, a segment too long for IPv4's
    /// pseudo-header, one shorter than a header.
    #[test]
    fn fill_checksum_fails_as_set_checksum_does() {
        assert_eq!(PseudoSum::new(V4_CLIENT, V6_SERVER), Err(EmitError::AddressFamilyMismatch));
        let mut big = vec![0; 65_556];
        let v4 = PseudoSum::new(V4_CLIENT, V4_SERVER).unwrap();
        let v6 = PseudoSum::new(V6_CLIENT, V6_SERVER).unwrap();
        let expected = set_checksum_as(Checksum::Full, &mut big.clone(), V4_CLIENT, V4_SERVER);
        assert_eq!(expected, Err(EmitError::TooLong { len: 65_556, max: 65_535 }));
        assert_eq!(fill_checksum(Checksum::Full, v4, &mut big), expected);
        assert!(big.iter().all(|&b| b == 0));
        assert_eq!(fill_checksum(Checksum::PseudoHeader, v4, &mut big), expected);
        assert_eq!(fill_checksum(Checksum::Full, v6, &mut big), Ok(()));
        let mut short = [0; 19];
        let expected = set_checksum_as(Checksum::Full, &mut short.clone(), V4_CLIENT, V4_SERVER);
        assert_eq!(fill_checksum(Checksum::Full, v4, &mut short), expected);
        assert_eq!(short, [0; 19]);
    }

    #[test]
    fn errors_read_as_sentences() {
        let e = ParseError::BadChecksum { expected: 0x1234, found: 0xabcd };
        assert_eq!(e.to_string(), "bad checksum: segment carries 0xabcd, computed 0x1234");
        let e = EmitError::BufferTooSmall { needed: 60, available: 20 };
        assert_eq!(e.to_string(), "buffer of 20 bytes is too small, 60 needed");
    }

    // ---- properties ----

    fn arb_addrs() -> impl Strategy<Value = (IpAddr, IpAddr)> {
        prop_oneof![
            any::<(u32, u32)>().prop_map(|(s, d)| (IpAddr::V4(s.into()), IpAddr::V4(d.into()))),
            any::<(u128, u128)>().prop_map(|(s, d)| (IpAddr::V6(s.into()), IpAddr::V6(d.into()))),
        ]
    }

    /// A segment's fields and payload; the payload is owned so the segment can borrow it.
    type Fields = (u16, u16, u32, u32, u16, u16, u16, TcpOptions, Vec<u8>);

    fn arb_fields() -> impl Strategy<Value = Fields> {
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            0u16..0x200,
            any::<u16>(),
            any::<u16>(),
            arb_options(),
            proptest::collection::vec(any::<u8>(), 0..200),
        )
    }

    fn segment(f: &Fields) -> Segment<'_> {
        let (src_port, dst_port, seq, ack, flags, window, urgent, options, ref payload) = *f;
        Segment {
            src_port,
            dst_port,
            seq: SeqNum(seq),
            ack: SeqNum(ack),
            flags: Flags::from_bits(flags),
            window,
            urgent,
            options,
            payload,
        }
    }

    /// Return the header etherparse would build for `seg`, with `options` as raw bytes.
    fn etherparse_header(seg: &Segment<'_>, options: &[u8]) -> TcpHeader {
        let f = seg.flags;
        let mut h = TcpHeader::new(seg.src_port, seg.dst_port, seg.seq.0, seg.window);
        h.acknowledgment_number = seg.ack.0;
        h.ns = f.contains(Flags::NS);
        h.cwr = f.contains(Flags::CWR);
        h.ece = f.contains(Flags::ECE);
        h.urg = f.contains(Flags::URG);
        h.ack = f.contains(Flags::ACK);
        h.psh = f.contains(Flags::PSH);
        h.rst = f.contains(Flags::RST);
        h.syn = f.contains(Flags::SYN);
        h.fin = f.contains(Flags::FIN);
        h.urgent_pointer = seg.urgent;
        h.set_options_raw(options).unwrap();
        h
    }

    proptest! {
        #[test]
        fn segment_round_trips(f in arb_fields(), (src, dst) in arb_addrs()) {
            let seg = segment(&f);
            let bytes = emit(&seg, src, dst);
            let expected = Segment { options: as_written(&seg.options), ..seg };
            prop_assert_eq!(Segment::parse(&bytes, src, dst), Ok(expected));
            prop_assert_eq!(Segment::parse_unchecked(&bytes), Ok(expected));
        }

        #[test]
        fn emit_agrees_with_etherparse(f in arb_fields(), (src, dst) in arb_addrs()) {
            let seg = segment(&f);
            let bytes = emit(&seg, src, dst);
            let hl = seg.header_len();
            let mut theirs = etherparse_header(&seg, &bytes[20..hl]);
            theirs.checksum = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => theirs.calc_checksum_ipv4_raw(s.octets(), d.octets(), seg.payload),
                (IpAddr::V6(s), IpAddr::V6(d)) => theirs.calc_checksum_ipv6_raw(s.octets(), d.octets(), seg.payload),
                _ => unreachable!(),
            }.unwrap();
            prop_assert_eq!(&theirs.to_bytes()[..], &bytes[..hl]);
        }

        /// What a device with TX checksum offload does to a segment written with only the
        /// pseudo-header sum (sum from the TCP header on, the field included; store the
        /// complement: Linux's `skb_checksum_help`) gives the segment with its checksum,
        /// through both `emit_as` and `set_checksum_as`.
        #[test]
        fn a_completed_pseudo_header_sum_is_the_checksum(f in arb_fields(), (src, dst) in arb_addrs()) {
            let seg = segment(&f);
            let full = emit(&seg, src, dst);
            let mut partial = vec![0; full.len()];
            prop_assert_eq!(seg.emit_as(Checksum::PseudoHeader, src, dst, &mut partial), Ok(full.len()));
            let mut again = full.clone();
            set_checksum_as(Checksum::PseudoHeader, &mut again, src, dst).unwrap();
            prop_assert_eq!(&again, &partial);
            let completed = checksum_value(&Sum16BitWords::new().add_slice(&partial));
            partial[16..18].copy_from_slice(&completed.to_be_bytes());
            prop_assert_eq!(partial, full);
        }

        /// The sender's path (`write_header`, the payload put behind it, then `fill_checksum`
        /// on the connection's pseudo-header sum) writes the bytes `emit_as` writes, in both
        /// checksum modes, for both families, with and without options, for payloads summed
        /// by either loop of `add_words` (below and above `WORDS_FROM`).
        #[test]
        fn the_senders_checksum_is_emits(
            f in arb_fields(),
            (src, dst) in arb_addrs(),
            long in proptest::collection::vec(any::<u8>(), 0..1600),
            use_long in any::<bool>(),
            pseudo_only in any::<bool>(),
        ) {
            let mut seg = segment(&f);
            if use_long {
                seg.payload = &long;
            }
            let mode = if pseudo_only { Checksum::PseudoHeader } else { Checksum::Full };
            let len = seg.header_len() + seg.payload.len();
            let mut general = vec![0xa5; len + 8];
            prop_assert_eq!(seg.emit_as(mode, src, dst, &mut general), Ok(len));
            let mut ours = vec![0xa5; len + 8];
            let hl = seg.write_header(&mut ours).unwrap();
            ours[hl..len].copy_from_slice(seg.payload);
            let pseudo = PseudoSum::new(src, dst).unwrap();
            prop_assert_eq!(fill_checksum(mode, pseudo, &mut ours[..len]), Ok(()));
            prop_assert_eq!(ours, general);
        }

        /// A header whose only option is the timestamps (or none), written as a
        /// `PlainHeader`, is the bytes `write_header` writes for the same `Segment`, in a
        /// buffer prefilled so that unwritten bytes show, and the same error into a buffer
        /// too short, which is left as it was.
        #[test]
        fn a_plain_header_is_write_headers(
            (src_port, dst_port, seq, ack) in any::<(u16, u16, u32, u32)>(),
            (flags, window) in (0u16..0x200, any::<u16>()),
            ts in proptest::option::of(any::<(u32, u32)>()),
            short in 0usize..32,
        ) {
            let timestamps = ts.map(|(tsval, tsecr)| Timestamps { tsval, tsecr });
            let (seq, ack, flags) = (SeqNum(seq), SeqNum(ack), Flags::from_bits(flags));
            let seg = Segment {
                src_port, dst_port, seq, ack, flags, window, urgent: 0,
                options: TcpOptions { timestamps, ..TcpOptions::NONE }, payload: &[],
            };
            let plain = PlainHeader { src_port, dst_port, seq, ack, flags, window, timestamps };
            prop_assert_eq!(plain.len(), seg.header_len());
            let (mut general, mut ours) = ([0xa5u8; 64], [0xa5u8; 64]);
            prop_assert_eq!(plain.write(&mut ours), seg.write_header(&mut general));
            prop_assert_eq!(ours, general);
            let short = short.min(plain.len() - 1);
            let (mut general, mut ours) = ([0xa5u8; 64], [0xa5u8; 64]);
            prop_assert_eq!(plain.write(&mut ours[..short]), seg.write_header(&mut general[..short]));
            prop_assert_eq!(ours, [0xa5u8; 64]);
        }

        #[test]
        fn any_single_bit_flip_fails_parse(
            f in arb_fields(),
            (src, dst) in arb_addrs(),
            bit in any::<prop::sample::Index>(),
        ) {
            let mut bytes = emit(&segment(&f), src, dst);
            let bit = bit.index(bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Segment::parse(&bytes, src, dst).is_err());
        }

        #[test]
        fn parse_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
            (src, dst) in arb_addrs(),
            (other, _) in arb_addrs(),
        ) {
            let _ = Segment::parse(&bytes, src, dst);
            let _ = Segment::parse(&bytes, src, other);
            let _ = Segment::parse_unchecked(&bytes);
        }

        /// With a valid checksum, arbitrary bytes get past the checksum into the parser.
        #[test]
        fn parse_with_valid_checksum_matches_unchecked(
            mut bytes in proptest::collection::vec(any::<u8>(), 20..100),
            (src, dst) in arb_addrs(),
        ) {
            set_checksum(&mut bytes, src, dst).unwrap();
            prop_assert_eq!(Segment::parse(&bytes, src, dst), Segment::parse_unchecked(&bytes));
        }
    }

    // ---- the value ----

    #[test]
    fn flags_print_like_a_ladder() {
        assert_eq!((Flags::SYN | Flags::ACK).to_string(), "SYN|ACK");
        assert_eq!((Flags::ACK | Flags::FIN | Flags::PSH).to_string(), "FIN|PSH|ACK");
        assert_eq!(Flags::NONE.to_string(), "-");
        assert_eq!(Flags::from_bits(0xfff).bits(), 0x1ff);
        assert!(Flags::from_bits(0x1ff).contains(Flags::NS | Flags::CWR | Flags::ECE | Flags::URG));
    }

    #[test]
    fn seg_len_counts_syn_and_fin() {
        let s = Segment { flags: Flags::SYN | Flags::FIN, payload: b"abc", ..Segment::EMPTY };
        assert_eq!(s.seg_len(), 5);
    }
}
