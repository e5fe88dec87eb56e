//! Parse and emit TCP segments (RFC 9293 section 3.1) and their checksum.
//!
//! A segment is the IP payload: TCP has no length field, so the caller passes
//! exactly the bytes after the IP header, and everything after the TCP header
//! is payload. The checksum covers an IPv4 (RFC 9293 3.1) or IPv6
//! (RFC 8200 8.1) pseudo-header, so checking and filling it needs the addresses.
//!
//! `etherparse` validates the data offset and reads the fixed header
//! ([`etherparse::TcpHeaderSlice`]) and holds the checksum's running sum
//! ([`etherparse::checksum::Sum16BitWords`]); the bulk of a segment is summed
//! here ([`add_words`]), several times faster than etherparse's carry-chained
//! loop, which was the largest single cost of sending. Options are parsed here
//! ([`crate::options`]) because etherparse's option iterator stops at the
//! first unknown kind, which RFC 9293 3.1 says a receiver must skip.
//!
//! ```
//! use core::net::{IpAddr, Ipv4Addr};
//! use bypass_tcp::{Flags, Segment, SeqNum, TcpOptions};
//!
//! let (src, dst) = (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
//! let syn = Segment {
//!     src_port: 40000,
//!     dst_port: 80,
//!     seq: SeqNum(1),
//!     flags: Flags::SYN,
//!     window: 64240,
//!     options: TcpOptions { mss: Some(1460), ..TcpOptions::NONE },
//!     ..Segment::EMPTY
//! };
//! let mut buf = [0; 60];
//! let len = syn.emit(src, dst, &mut buf).unwrap();
//! assert_eq!(len, 24);
//! assert_eq!(Segment::parse(&buf[..len], src, dst), Ok(syn));
//! ```

use core::net::IpAddr;

use etherparse::checksum::Sum16BitWords;
use etherparse::err::tcp::{HeaderError, HeaderSliceError};
use etherparse::{TcpHeader, TcpHeaderSlice, ip_number};

use crate::options::{options_len, parse_options, write_options};
use crate::segment::{Flags, Segment};
use crate::seq::SeqNum;

/// Length of the fixed part of the header, without options.
const FIXED_LEN: usize = TcpHeader::MIN_LEN;

/// Why bytes could not be parsed as a TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer than the 20 bytes of a header without options.
    #[error("segment of {len} bytes is shorter than a 20-byte TCP header")]
    Truncated {
        /// Length of the segment.
        len: usize,
    },
    /// The data offset points inside the fixed header (below 5 words).
    #[error("data offset {data_offset} is below the minimum of 5 words")]
    DataOffsetTooSmall {
        /// Data offset in 32-bit words.
        data_offset: u8,
    },
    /// The data offset points past the end of the segment.
    #[error("header of {header_len} bytes runs past the end of the {len}-byte segment")]
    DataOffsetPastEnd {
        /// Header length the data offset announces, in bytes.
        header_len: usize,
        /// Length of the segment.
        len: usize,
    },
    /// An option length byte is 0 or 1, or wrong for a known kind.
    #[error("option kind {kind} has invalid length {len}")]
    OptionLength {
        /// Option kind.
        kind: u8,
        /// Length byte as received.
        len: u8,
    },
    /// An option's length byte is missing or runs past the end of the header.
    #[error("option kind {kind} runs past the end of the header")]
    OptionPastHeader {
        /// Option kind.
        kind: u8,
    },
    /// The checksum does not match the segment and pseudo-header.
    #[error("bad checksum: segment carries {found:#06x}, computed {expected:#06x}")]
    BadChecksum {
        /// Checksum computed over the segment and pseudo-header.
        expected: u16,
        /// Checksum carried by the segment.
        found: u16,
    },
    /// The source and destination addresses are not of the same IP version.
    #[error("source and destination addresses are of different IP versions")]
    AddressFamilyMismatch,
    /// The segment is longer than the pseudo-header's length field can say
    /// (65,535 bytes for IPv4, 2^32 - 1 for IPv6).
    #[error("segment of {len} bytes is longer than the pseudo-header allows ({max})")]
    TooLong {
        /// Length of the segment.
        len: usize,
        /// Longest segment the pseudo-header can describe.
        max: usize,
    },
}

/// Why a segment could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The buffer is shorter than the bytes to write; nothing was written.
    #[error("buffer of {available} bytes is too small, {needed} needed")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The source and destination addresses are not of the same IP version.
    #[error("source and destination addresses are of different IP versions")]
    AddressFamilyMismatch,
    /// The segment is longer than the pseudo-header's length field can say
    /// (65,535 bytes for IPv4, 2^32 - 1 for IPv6).
    #[error("segment of {len} bytes is longer than the pseudo-header allows ({max})")]
    TooLong {
        /// Length of the segment.
        len: usize,
        /// Longest segment the pseudo-header can describe.
        max: usize,
    },
}

/// Why a pseudo-header could not be built; converted into either error.
enum PseudoHeaderError {
    AddressFamilyMismatch,
    TooLong { len: usize, max: usize },
}

impl From<PseudoHeaderError> for ParseError {
    fn from(e: PseudoHeaderError) -> Self {
        match e {
            PseudoHeaderError::AddressFamilyMismatch => ParseError::AddressFamilyMismatch,
            PseudoHeaderError::TooLong { len, max } => ParseError::TooLong { len, max },
        }
    }
}

impl From<PseudoHeaderError> for EmitError {
    fn from(e: PseudoHeaderError) -> Self {
        match e {
            PseudoHeaderError::AddressFamilyMismatch => EmitError::AddressFamilyMismatch,
            PseudoHeaderError::TooLong { len, max } => EmitError::TooLong { len, max },
        }
    }
}

/// Return the sum of the pseudo-header for a `tcp_len`-byte segment from `src` to `dst`.
fn pseudo_header(src: IpAddr, dst: IpAddr, tcp_len: usize) -> Result<Sum16BitWords, PseudoHeaderError> {
    let too_long = |max: usize| PseudoHeaderError::TooLong { len: tcp_len, max };
    match (src, dst) {
        // RFC 9293 3.1: source, destination, zero, PTCL, TCP length (16 bits).
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let len = u16::try_from(tcp_len).map_err(|_| too_long(u16::MAX.into()))?;
            Ok(Sum16BitWords::new()
                .add_4bytes(src.octets())
                .add_4bytes(dst.octets())
                .add_2bytes([0, ip_number::TCP.0])
                .add_2bytes(len.to_be_bytes()))
        }
        // RFC 8200 8.1: source, destination, upper-layer length (32 bits), zero, next header.
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let len = u32::try_from(tcp_len).map_err(|_| too_long(u32::MAX.try_into().unwrap_or(usize::MAX)))?;
            Ok(Sum16BitWords::new()
                .add_16bytes(src.octets())
                .add_16bytes(dst.octets())
                .add_4bytes(len.to_be_bytes())
                .add_2bytes([0, ip_number::TCP.0]))
        }
        _ => Err(PseudoHeaderError::AddressFamilyMismatch),
    }
}

/// What a sender writes in the checksum field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksum {
    /// The checksum itself, computed over the pseudo-header, the header and the payload.
    #[default]
    Full,
    /// Only the pseudo-header's sum, folded to 16 bits and not complemented, for a device
    /// that completes the checksum as it sends (TX checksum offload): it sums the segment
    /// from the TCP header on, this field included, and stores the complement here. Linux
    /// prepares a `CHECKSUM_PARTIAL` packet the same way (`tcp_v4_send_check`).
    PseudoHeader,
}

/// Return the one's complement of `sum` as the checksum field's value.
#[inline]
fn checksum_value(sum: &Sum16BitWords) -> u16 {
    // `Sum16BitWords` adds native-endian words, so the native bytes of its
    // result are the bytes on the wire.
    u16::from_be_bytes(sum.ones_complement().to_ne_bytes())
}

/// Return the checksum of `segment` on top of `pseudo`, its checksum field counted as zero.
///
/// Return `None` when `segment` is too short to hold the checksum field.
fn compute_checksum(pseudo: Sum16BitWords, segment: &[u8]) -> Option<u16> {
    let (head, rest) = segment.split_first_chunk::<18>()?;
    let sum = add_words(pseudo.add_slice(&head[..16]), rest);
    Some(checksum_value(&sum))
}

/// Return the checksum field's value for `segment` on top of `pseudo`, as `mode` asks.
///
/// Return `None` when `segment` is too short to hold the checksum field.
fn checksum_field(mode: Checksum, pseudo: Sum16BitWords, segment: &[u8]) -> Option<u16> {
    match mode {
        Checksum::Full => compute_checksum(pseudo, segment),
        Checksum::PseudoHeader => {
            (segment.len() >= 18).then(|| u16::from_be_bytes((!pseudo.ones_complement()).to_ne_bytes()))
        }
    }
}

/// Add `data` to `sum` as 16-bit words, a last odd byte padded with zero: the same result
/// as `sum.add_slice(data)`, computed the way RFC 1071 section 2 allows.
///
/// Native-endian 32-bit words go into eight independent 64-bit lanes with no carry
/// handling ((B) deferred carries: a lane cannot overflow before 2^32 words, far beyond
/// any segment; (C) parallel summation: a 32-bit word is two 16-bit words), which the
/// compiler turns into wide vector adds; the lanes are folded to 16 bits once at the end.
/// Summing native-endian words gives the native-endian checksum ((A) byte order
/// independence), which is what `Sum16BitWords` holds.
fn add_words(sum: Sum16BitWords, data: &[u8]) -> Sum16BitWords {
    const LANES: usize = 8;
    let mut lanes = [0u64; LANES];
    let mut blocks = data.chunks_exact(4 * LANES);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(4)) {
            *lane += u64::from(u32::from_ne_bytes([word[0], word[1], word[2], word[3]]));
        }
    }
    let mut total: u64 = lanes.iter().map(|&l| (l >> 32) + (l & 0xffff_ffff)).sum();
    let mut words = blocks.remainder().chunks_exact(4);
    for word in &mut words {
        total += u64::from(u32::from_ne_bytes([word[0], word[1], word[2], word[3]]));
    }
    let mut tail = words.remainder().chunks_exact(2);
    for pair in &mut tail {
        total += u64::from(u16::from_ne_bytes([pair[0], pair[1]]));
    }
    if let [last] = tail.remainder() {
        total += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    // End-around carries (RFC 1071 2 (B)): fold to 16 bits.
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    sum.add_2bytes((total as u16).to_ne_bytes())
}

/// Compute the TCP checksum of `segment` (header and payload) and store it at bytes 16..18.
///
/// The checksum field's old value is ignored. The checksum covers the IPv4 or
/// IPv6 pseudo-header for `src` and `dst` (RFC 9293 3.1, RFC 8200 8.1).
/// Use it after changing a segment in place, or to fill a checksum left zero by
/// [`Segment::write_header`].
///
/// # Errors
///
/// [`EmitError::BufferTooSmall`] when `segment` is shorter than 20 bytes,
/// [`EmitError::AddressFamilyMismatch`] when `src` and `dst` differ in IP
/// version, [`EmitError::TooLong`] when the pseudo-header cannot hold the
/// length. `segment` is unchanged on error.
pub fn set_checksum(segment: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), EmitError> {
    set_checksum_as(Checksum::Full, segment, src, dst)
}

/// As [`set_checksum`], storing what `mode` asks: the checksum, or only the pseudo-header
/// sum for a device that completes it ([`Checksum::PseudoHeader`]).
///
/// # Errors
///
/// As [`set_checksum`].
pub fn set_checksum_as(mode: Checksum, segment: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), EmitError> {
    let too_short = EmitError::BufferTooSmall { needed: FIXED_LEN, available: segment.len() };
    if segment.len() < FIXED_LEN {
        return Err(too_short);
    }
    let pseudo = pseudo_header(src, dst, segment.len())?;
    let checksum = checksum_field(mode, pseudo, segment).ok_or(too_short)?;
    store_checksum(segment, checksum);
    Ok(())
}

/// Store `checksum` in the checksum field (bytes 16..18) of `segment`, if it has one.
#[inline]
fn store_checksum(segment: &mut [u8], checksum: u16) {
    if let Some(field) = segment.get_mut(16..18) {
        field.copy_from_slice(&checksum.to_be_bytes());
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
        // Summed with its checksum, a correct segment folds to all ones (RFC 1071).
        if pseudo.clone().add_slice(bytes).ones_complement() != 0 {
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
    /// sent (callers clamp it to 14, RFC 7323 2.3).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::DataOffsetTooSmall`],
    /// [`ParseError::DataOffsetPastEnd`], [`ParseError::OptionLength`],
    /// [`ParseError::OptionPastHeader`].
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
        let options = parse_options(header.options())?;
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
    /// The checksum field is left zero: fill it with [`set_checksum`] once the
    /// payload is in place, or use [`Segment::emit`]. Options are written in
    /// Linux's order; SACK blocks that do not fit are dropped from the end
    /// (RFC 2018 section 3). Bytes of `buf` past the header are untouched.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`] when `buf` is shorter than
    /// [`Segment::header_len`]; `buf` is unchanged then.
    pub fn write_header(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let header_len = self.header_len();
        let available = buf.len();
        let too_small = EmitError::BufferTooSmall { needed: header_len, available };
        let Some((fixed, options)) =
            buf.get_mut(..header_len).and_then(|header| header.split_first_chunk_mut::<FIXED_LEN>())
        else {
            return Err(too_small);
        };
        // The fixed header is written as one array: etherparse's writers go
        // through `io::Write` or an `ArrayVec` with its own copy of the
        // options, which this per-packet path does without. The tests check
        // these bytes against `etherparse::TcpHeader::to_bytes`.
        let [sp0, sp1] = self.src_port.to_be_bytes();
        let [dp0, dp1] = self.dst_port.to_be_bytes();
        let [s0, s1, s2, s3] = self.seq.0.to_be_bytes();
        let [a0, a1, a2, a3] = self.ack.0.to_be_bytes();
        // header_len is at most 60, so the data offset fits in 4 bits.
        let data_offset = (header_len / 4) as u8;
        let [ns, flags] = self.flags.bits().to_be_bytes();
        let [w0, w1] = self.window.to_be_bytes();
        let [u0, u1] = self.urgent.to_be_bytes();
        #[rustfmt::skip]
        let bytes = [
            sp0, sp1, dp0, dp1,
            s0, s1, s2, s3,
            a0, a1, a2, a3,
            (data_offset << 4) | (ns & 1), flags, w0, w1,
            0, 0, u0, u1,
        ];
        *fixed = bytes;
        write_options(&self.options, options);
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

    use super::*;
    use crate::options::tests::{arb_options, as_written};
    use crate::options::{SackBlock, SackBlocks, TcpOptions, Timestamps};

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
        let mut mss_len = SYN_V4;
        mss_len[21] = 3;
        let mut zero_len = SYN_V4;
        zero_len[38] = 0;
        let mut past_header = SYN_V4;
        past_header[36..40].copy_from_slice(&[0x01, 0x01, 0x1e, 0x05]);
        let mut no_len_byte = SYN_V4;
        no_len_byte[36..40].copy_from_slice(&[0x01, 0x01, 0x01, 0x08]);
        let mut corrupt = DATA_V4;
        corrupt[36] ^= 0x01;
        let cases: &[(&[u8], ParseError)] = &[
            (&SYN_V4[..19], Truncated { len: 19 }),
            (&[], Truncated { len: 0 }),
            (&with_checksum(too_small), DataOffsetTooSmall { data_offset: 4 }),
            (&with_checksum(past_end), DataOffsetPastEnd { header_len: 60, len: 40 }),
            (&with_checksum(mss_len), OptionLength { kind: 2, len: 3 }),
            (&with_checksum(zero_len), OptionLength { kind: 3, len: 0 }),
            (&with_checksum(past_header), OptionPastHeader { kind: 30 }),
            (&with_checksum(no_len_byte), OptionPastHeader { kind: 8 }),
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
        fn add_words_sums_like_etherparse(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            start in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let base = Sum16BitWords::new().add_slice(&start);
            let base2 = Sum16BitWords::new().add_slice(&start);
            prop_assert_eq!(add_words(base, &data).ones_complement(), base2.add_slice(&data).ones_complement());
        }

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
}
