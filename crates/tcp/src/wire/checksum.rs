//! The TCP checksum (RFC 9293 3.1, RFC 1071) over the IPv4 (RFC 9293 3.1) or IPv6 (RFC 8200
//! 8.1) pseudo-header: computing, checking and filling it.
//!
//! `etherparse` holds the running sum ([`etherparse::checksum::Sum16BitWords`]); the bulk of
//! a segment is summed here ([`add_words`]), several times faster than etherparse's
//! carry-chained loop, which was the largest single cost of sending.

use core::net::IpAddr;

use etherparse::checksum::Sum16BitWords;
use etherparse::{TcpHeader, ip_number};

use super::{EmitError, ParseError};

/// Length of the fixed part of the header, without options.
pub(super) const FIXED_LEN: usize = TcpHeader::MIN_LEN;

/// Why a pseudo-header could not be built; converted into either error.
pub(super) enum PseudoHeaderError {
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
pub(super) fn pseudo_header(src: IpAddr, dst: IpAddr, tcp_len: usize) -> Result<Sum16BitWords, PseudoHeaderError> {
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
pub(super) fn checksum_value(sum: &Sum16BitWords) -> u16 {
    // `Sum16BitWords` adds native-endian words, so the native bytes of its
    // result are the bytes on the wire.
    u16::from_be_bytes(sum.ones_complement().to_ne_bytes())
}

/// Return the checksum of `segment` on top of `pseudo`, its checksum field counted as zero.
///
/// Return `None` when `segment` is too short to hold the checksum field.
pub(super) fn compute_checksum(pseudo: Sum16BitWords, segment: &[u8]) -> Option<u16> {
    let (head, rest) = segment.split_first_chunk::<18>()?;
    let sum = add_words(pseudo.add_slice(&head[..16]), rest);
    Some(checksum_value(&sum))
}

/// Return the checksum field's value for `segment` on top of `pseudo`, as `mode` asks.
///
/// Return `None` when `segment` is too short to hold the checksum field.
pub(super) fn checksum_field(mode: Checksum, pseudo: Sum16BitWords, segment: &[u8]) -> Option<u16> {
    match mode {
        Checksum::Full => compute_checksum(pseudo, segment),
        Checksum::PseudoHeader => {
            (segment.len() >= 18).then(|| u16::from_be_bytes((!pseudo.ones_complement()).to_ne_bytes()))
        }
    }
}

/// The shortest data [`add_words`] sums in lanes.
const LANES_FROM: usize = 256;

/// Add `data` to `sum` as 16-bit words, a last odd byte padded with zero: the same result
/// as `sum.add_slice(data)`, computed the way RFC 1071 section 2 allows.
///
/// Native-endian 32-bit words go into eight independent 64-bit lanes with no carry
/// handling ((B) deferred carries: a lane cannot overflow before 2^32 words, far beyond
/// any segment; (C) parallel summation: a 32-bit word is two 16-bit words), which the
/// compiler turns into wide vector adds; the lanes are folded to 16 bits once at the end.
/// Summing native-endian words gives the native-endian checksum ((A) byte order
/// independence), which is what `Sum16BitWords` holds.
///
/// Below [`LANES_FROM`] bytes (an ACK, a short request) etherparse's loop is cheaper: the
/// lanes' setup and folding cost about 100 instructions whatever the length, its loop
/// about 0.2 instructions a byte more.
pub(super) fn add_words(sum: Sum16BitWords, data: &[u8]) -> Sum16BitWords {
    if data.len() < LANES_FROM {
        return sum.add_slice(data);
    }
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
/// [`Segment::write_header`](super::Segment::write_header).
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
pub(super) fn store_checksum(segment: &mut [u8], checksum: u16) {
    if let Some(field) = segment.get_mut(16..18) {
        field.copy_from_slice(&checksum.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

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
    }
}
