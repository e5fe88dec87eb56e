//! The TCP checksum (RFC 9293 3.1, RFC 1071) over the IPv4 (RFC 9293 3.1) or IPv6 (RFC 8200
//! 8.1) pseudo-header: computing, checking and filling it.
//!
//! `etherparse` holds the running sum ([`etherparse::checksum::Sum16BitWords`]); the bulk of
//! a segment is summed here ([`add_words`]) in 64-bit words with chained carries, at a
//! quarter of an instruction a byte against etherparse's two-thirds: the checksum was the
//! largest single cost of a bulk segment sent or received.

use core::net::{IpAddr, SocketAddr};

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

/// The shortest data [`add_words`] sums in 64-bit words; shorter data (an ACK, a short
/// request) goes through etherparse's loop, which costs no more there: with this bound at
/// 40, a 64-byte request/response cost 9 instructions a side more in the instruction
/// benchmark (its 84-byte segments summed by the words' setup, tail and folding).
const WORDS_FROM: usize = 128;

/// Read the `i`th 8-byte word of a 64-byte block, in native byte order.
#[inline(always)]
fn word64(block: &[u8; 64], i: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&block[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(word)
}

/// Add `data` to `sum` as 16-bit words, a last odd byte padded with zero: the same result
/// as `sum.add_slice(data)`, computed the way RFC 1071 section 2 allows, as Linux's
/// `csum_partial` does on x86-64.
///
/// Native-endian 64-bit words are added with their carries chained (`carrying_add`, which
/// the compiler emits as one `adc` a word, the load folded into it: (C) parallel
/// summation, a 64-bit word is four 16-bit words); the carry out of each 64-byte block
/// is counted apart and added back at the end ((B) deferred carries, end around), and the
/// sum is folded to 16 bits once. Summing native-endian words gives the native-endian
/// checksum ((A) byte order independence), which is what `Sum16BitWords` holds. About
/// 0.25 instructions a byte (360 for 1460 bytes), where eight lanes of 32-bit words took
/// 0.5 (760) and etherparse's loop 0.65 (960).
///
/// Below [`WORDS_FROM`] bytes etherparse's loop is used.
pub(super) fn add_words(sum: Sum16BitWords, data: &[u8]) -> Sum16BitWords {
    if data.len() < WORDS_FROM {
        // etherparse's `add_slice`, word for word, with the 8-byte words split off the
        // front: its loop over `step_by(8)` indices cost about eight instructions a word.
        let mut sum = sum;
        let mut rest = data;
        while let Some((word, tail)) = rest.split_first_chunk::<8>() {
            sum = sum.add_8bytes(*word);
            rest = tail;
        }
        if let Some((quad, tail)) = rest.split_first_chunk::<4>() {
            sum = sum.add_4bytes(*quad);
            rest = tail;
        }
        if let Some((pair, tail)) = rest.split_first_chunk::<2>() {
            sum = sum.add_2bytes(*pair);
            rest = tail;
        }
        if let [last] = rest {
            sum = sum.add_2bytes([*last, 0]);
        }
        return sum;
    }
    let mut acc: u64 = 0;
    let mut carries: u64 = 0;
    let (blocks, rest) = data.as_chunks::<64>();
    for block in blocks {
        let (mut partial, mut carry) = acc.overflowing_add(word64(block, 0));
        for i in 1..8 {
            (partial, carry) = partial.carrying_add(word64(block, i), carry);
        }
        acc = partial;
        carries += u64::from(carry);
    }
    let (words, tail) = rest.as_chunks::<8>();
    for word in words {
        let (partial, carry) = acc.overflowing_add(u64::from_ne_bytes(*word));
        acc = partial;
        carries += u64::from(carry);
    }
    let mut total = add_tail(acc, carries, tail);
    // Fold to 16 bits.
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    sum.add_2bytes((total as u16).to_ne_bytes())
}

/// Return a sum of 64-bit words `acc` (native byte order, summed with their carries
/// chained), the `carries` out of bit 63 counted apart, and the 0 to 7 bytes of `tail` past
/// the last word (as 16-bit words, a last odd byte padded with zero), congruent modulo
/// 0xffff to the one's complement sum of all of them and below 2^36: the end of
/// [`add_words`], and of the host's check of a received segment's checksum
/// (`bypass-stack`'s `wire::sum`), which sums its words the same way.
///
/// The carries come back in at bit 0 (RFC 1071 2 (B): 2^64 is 1 modulo 0xffff), the 64-bit
/// sum is folded to 33 bits, and the tail is added as a 32-bit, a 16-bit and a padded last
/// word.
#[inline]
pub fn add_tail(acc: u64, carries: u64, tail: &[u8]) -> u64 {
    // End-around carries (RFC 1071 2 (B)): a carry out of bit 63 comes back in at bit 0.
    let (acc, carry) = acc.overflowing_add(carries);
    let acc = acc + u64::from(carry);
    let mut total = (acc >> 32) + (acc & 0xffff_ffff);
    let (quads, tail) = tail.as_chunks::<4>();
    if let Some(quad) = quads.first() {
        total += u64::from(u32::from_ne_bytes(*quad));
    }
    let (pairs, tail) = tail.as_chunks::<2>();
    if let Some(pair) = pairs.first() {
        total += u64::from(u16::from_ne_bytes(*pair));
    }
    if let [last] = tail {
        total += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    total
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

/// The sum of a pseudo-header but for its length: both addresses and the protocol (RFC 9293
/// 3.1, RFC 8200 8.1), as 16-bit words in native byte order (as [`Sum16BitWords`] keeps
/// them), for [`fill_checksum`]. Every segment of a connection has the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PseudoSum {
    /// The words summed, not folded: two IPv6 addresses are sixteen 16-bit words, far from
    /// overflowing.
    sum: u64,
    /// IPv6: the length is a 32-bit field (RFC 8200 8.1); IPv4: a 16-bit one (RFC 9293 3.1).
    v6: bool,
}

impl PseudoSum {
    /// Return the sum for segments from `src` to `dst`.
    ///
    /// # Errors
    ///
    /// [`EmitError::AddressFamilyMismatch`] when `src` and `dst` differ in IP version.
    #[inline]
    pub(crate) fn new(src: IpAddr, dst: IpAddr) -> Result<Self, EmitError> {
        let word = |b: [u8; 4]| u64::from(u32::from_ne_bytes(b));
        let proto = u64::from(u16::from_ne_bytes([0, ip_number::TCP.0]));
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                Ok(PseudoSum { sum: word(src.octets()) + word(dst.octets()) + proto, v6: false })
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let sum = [src.octets(), dst.octets()]
                    .iter()
                    .flat_map(|a| a.as_chunks::<4>().0.iter())
                    .map(|w| word(*w))
                    .sum::<u64>();
                Ok(PseudoSum { sum: sum + proto, v6: true })
            }
            _ => Err(EmitError::AddressFamilyMismatch),
        }
    }

    /// Return the sum for segments from `src` to `dst`, as [`new`](Self::new) for their
    /// addresses, read where they are (no `IpAddr` built from each).
    ///
    /// Inlined (forced) down to two IPv4 addresses, a few loads and adds on every segment
    /// sent; any other pair goes to [`new`](Self::new), out of line.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    #[inline(always)]
    pub(crate) fn of(src: &SocketAddr, dst: &SocketAddr) -> Result<Self, EmitError> {
        let word = |b: [u8; 4]| u64::from(u32::from_ne_bytes(b));
        let proto = u64::from(u16::from_ne_bytes([0, ip_number::TCP.0]));
        match (src, dst) {
            (SocketAddr::V4(src), SocketAddr::V4(dst)) => {
                Ok(PseudoSum { sum: word(src.ip().octets()) + word(dst.ip().octets()) + proto, v6: false })
            }
            _ => Self::of_any(src, dst),
        }
    }

    /// [`of`](Self::of) for a pair that is not two IPv4 addresses.
    #[inline(never)]
    fn of_any(src: &SocketAddr, dst: &SocketAddr) -> Result<Self, EmitError> {
        Self::new(src.ip(), dst.ip())
    }

    /// Return the pseudo-header's sum for a `len`-byte segment, as [`pseudo_header`] gives.
    #[inline]
    fn with_len(self, len: usize) -> Result<Sum16BitWords, EmitError> {
        let len_word = if self.v6 {
            let len = u32::try_from(len).map_err(|_| EmitError::TooLong { len, max: u32::MAX as usize })?;
            u64::from(u32::from_ne_bytes(len.to_be_bytes()))
        } else {
            let len = u16::try_from(len).map_err(|_| EmitError::TooLong { len, max: u16::MAX.into() })?;
            u64::from(u16::from_ne_bytes(len.to_be_bytes()))
        };
        Ok(Sum16BitWords::new().add_8bytes((self.sum + len_word).to_ne_bytes()))
    }
}

/// Fill the checksum field of `segment` (header and payload) as `mode` asks, on top of the
/// pseudo-header `pseudo`: what [`set_checksum_as`] stores, for a segment whose checksum
/// field is zero (as [`Segment::write_header`](super::Segment::write_header) leaves it), so
/// that the whole segment is summed in one pass from its first byte, with the pseudo-header
/// summed once per connection rather than per segment.
///
/// # Errors
///
/// As [`set_checksum_as`]; `segment` is unchanged on error.
#[inline(always)]
pub(crate) fn fill_checksum(mode: Checksum, pseudo: PseudoSum, segment: &mut [u8]) -> Result<(), EmitError> {
    if segment.len() < FIXED_LEN {
        return Err(EmitError::BufferTooSmall { needed: FIXED_LEN, available: segment.len() });
    }
    debug_assert_eq!(segment[16..18], [0, 0], "the checksum field is summed as it is");
    let sum = pseudo.with_len(segment.len())?;
    let checksum = match mode {
        // A zero field adds nothing: the sum over the whole segment is the sum without it.
        Checksum::Full => checksum_value(&add_words(sum, segment)),
        Checksum::PseudoHeader => u16::from_be_bytes((!sum.ones_complement()).to_ne_bytes()),
    };
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
            skip in 0..8usize,
        ) {
            // From an offset too, so that the words are read unaligned.
            let data = data.get(skip..).unwrap_or_default();
            let base = Sum16BitWords::new().add_slice(&start);
            let base2 = Sum16BitWords::new().add_slice(&start);
            prop_assert_eq!(add_words(base, data).ones_complement(), base2.add_slice(data).ones_complement());
        }

        /// Below `WORDS_FROM`, where `add_words` takes the words off the front itself:
        /// every length and tail (odd bytes, a pair, a quad), any start, bytes near all
        /// ones so that the carries come round.
        #[test]
        fn short_data_sums_like_etherparse(
            data in proptest::collection::vec(prop_oneof![any::<u8>(), 0xf0u8..=0xff], 0..WORDS_FROM),
            start in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let base = Sum16BitWords::new().add_slice(&start);
            let base2 = Sum16BitWords::new().add_slice(&start);
            prop_assert_eq!(add_words(base, &data).ones_complement(), base2.add_slice(&data).ones_complement());
        }

        /// `PseudoSum::of` reads the addresses where they are and gives what `new` gives
        /// for them, an error for two families included.
        #[test]
        fn the_pseudo_sum_of_socket_addresses_is_news(
            (a4, b4, a6, b6) in any::<(u32, u32, u128, u128)>(),
            (p, q) in any::<(u16, u16)>(),
            pick in 0..4usize,
        ) {
            let v4 = |a: u32, port| SocketAddr::new(IpAddr::V4(a.into()), port);
            let v6 = |a: u128, port| SocketAddr::new(IpAddr::V6(a.into()), port);
            let (src, dst) = [(v4(a4, p), v4(b4, q)), (v6(a6, p), v6(b6, q)), (v4(a4, p), v6(b6, q)), (v6(a6, p), v4(b4, q))][pick];
            prop_assert_eq!(PseudoSum::of(&src, &dst), PseudoSum::new(src.ip(), dst.ip()));
        }

        /// Words of all ones carry out of every addition: the end-around carries must all
        /// come back.
        #[test]
        fn add_words_keeps_every_carry(len in 0..3000usize, low in 0xf0u8..=0xff) {
            let data: Vec<u8> = (0..len).map(|i| if i % 7 == 0 { low } else { 0xff }).collect();
            let expected = Sum16BitWords::new().add_slice(&data).ones_complement();
            prop_assert_eq!(add_words(Sum16BitWords::new(), &data).ones_complement(), expected);
        }
    }
}
