//! The TCP checksum of a segment received over IPv4, checked by the host where it has the
//! IPv4 header in hand: the pseudo-header's addresses are two words of that header, so
//! nothing is rebuilt from `IpAddr` values. A filter only: a segment it passes is right
//! (the TCP layer then parses it without summing it again, `Segment::parse_unchecked`);
//! one it does not pass goes to `Segment::parse`, which checks it again and says what is
//! wrong, so the drop, its counter and its log are the ones they were.

/// Return whether the TCP `segment` carried in an IPv4 datagram with header `header` has
/// the right checksum: the one's complement sum of the pseudo-header (RFC 9293 3.1:
/// source, destination, zero, protocol, TCP length) and of the segment, checksum field
/// included, is all ones (RFC 1071). `false` when it is not, or when the segment is
/// longer than the pseudo-header's length field holds (never, behind an IPv4 header).
///
/// Summed as the IPv4 header's check is (`ipv4::checksum_ok`): a one's complement sum of
/// 16-bit words is their plain sum `s` modulo 0xffff, folded (2^16 is 1 there, so wider
/// words in the machine's byte order give the same residue, RFC 1071 2 (A), (B)); folded,
/// it is all ones exactly when `s` is a nonzero multiple of 0xffff, and `s` is never zero
/// here (the protocol word is 6).
#[inline]
pub(crate) fn tcp_ok_v4(header: &[u8], segment: &[u8]) -> bool {
    let (Some(src), Some(dst)) = (header.get(12..16), header.get(16..20)) else { return false };
    let Ok(len) = u16::try_from(segment.len()) else { return false };
    let word = |b: &[u8]| u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let pseudo = word(src)
        + word(dst)
        + u64::from(u16::from_ne_bytes([0, etherparse::IpNumber::TCP.0]))
        + u64::from(u16::from_ne_bytes(len.to_be_bytes()));
    (pseudo + sum(segment)).is_multiple_of(0xffff)
}

/// Return a sum of `data` congruent modulo 0xffff to the sum of its 16-bit words in the
/// machine's byte order (a last odd byte padded with zero), below 2^36.
///
/// Native-endian 64-bit words added with their carries chained (`carrying_add`: one `adc`
/// a word), the carry out of each run counted apart and added back at the end (RFC 1071
/// 2 (B), (C)), as `bypass-tcp` sums a segment it sends or parses. The words past the
/// last 64-byte block (0 to 7) go in at most three straight runs of four, two and one, not
/// a loop: a short segment (a request, an ACK) is mostly those.
#[inline]
fn sum(data: &[u8]) -> u64 {
    /// Add `words` to `acc` with their carries chained; return the carry out.
    #[inline(always)]
    fn run<const N: usize>(acc: &mut u64, words: &[[u8; 8]; N]) -> u64 {
        let mut carry = false;
        for word in words {
            (*acc, carry) = acc.carrying_add(u64::from_ne_bytes(*word), carry);
        }
        u64::from(carry)
    }
    let mut acc: u64 = 0;
    let mut carries: u64 = 0;
    let (words, tail) = data.as_chunks::<8>();
    let (blocks, mut words) = words.as_chunks::<8>();
    for block in blocks {
        carries += run(&mut acc, block);
    }
    if let Some((four, rest)) = words.split_first_chunk::<4>() {
        carries += run(&mut acc, four);
        words = rest;
    }
    if let Some((two, rest)) = words.split_first_chunk::<2>() {
        carries += run(&mut acc, two);
        words = rest;
    }
    if let Some((one, _)) = words.split_first_chunk::<1>() {
        carries += run(&mut acc, one);
    }
    // The carries brought back in and the bytes past the last word added as the TCP core
    // does at the end of its own sum.
    bypass_tcp::wire::add_tail(acc, carries, tail)
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use bypass_tcp::{ParseError, Segment};

    use super::*;

    /// `tcp_ok_v4` passes exactly the segments whose checksum `Segment::parse` finds right:
    /// random segments of every length from 0 to 1,600 bytes (both loops and every tail),
    /// the same with their checksum set right (either form of zero where the sum allows),
    /// then with one bit flipped or two 16-bit words swapped (which a one's complement sum
    /// cannot see: both verdicts must agree on it too), between random addresses.
    #[test]
    fn passes_what_segment_parse_finds_right() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut right = 0;
        let mut cases = 0;
        for len in (0..=1600).chain([65_535]) {
            for round in 0..4 {
                let mut header = [0u8; 20];
                header.iter_mut().for_each(|b| *b = next() as u8);
                let mut seg: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let src = Ipv4Addr::from(<[u8; 4]>::try_from(&header[12..16]).unwrap());
                let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&header[16..20]).unwrap());
                if len >= 20 && round > 0 {
                    // The checksum set right, as the peer would.
                    seg[16..18].copy_from_slice(&[0, 0]);
                    bypass_tcp::wire::set_checksum(&mut seg, src.into(), dst.into()).unwrap();
                    if round == 2 {
                        let bit = next() as usize % (len * 8);
                        seg[bit / 8] ^= 1 << (bit % 8);
                    } else if round == 3 && len >= 24 {
                        seg.swap(20, 22);
                        seg.swap(21, 23);
                    }
                }
                let parsed = Segment::parse(&seg, IpAddr::V4(src), IpAddr::V4(dst));
                let bad_checksum = matches!(parsed, Err(ParseError::BadChecksum { .. }));
                let ours = tcp_ok_v4(&header, &seg);
                if len >= 20 {
                    assert_eq!(ours, !bad_checksum, "len {len} round {round}: {parsed:?}");
                } else {
                    // Shorter than a header: parse says so before any sum; ours may pass it,
                    // and `parse_unchecked` says the same.
                    assert!(!ours || Segment::parse_unchecked(&seg).is_err());
                }
                right += usize::from(ours);
                cases += 1;
            }
        }
        assert!(right > cases / 3, "the cases include segments with a right checksum ({right} of {cases})");
    }
}
