//! `tcp_segment`: parse arbitrary bytes as a TCP segment, and round-trip what parses.
//!
//! Input layout: one mode byte, then the addresses, then the segment.
//!
//! | mode bit | meaning |
//! |---|---|
//! | 0 | 0: IPv4 addresses (2 x 4 bytes follow); 1: IPv6 (2 x 16 bytes follow) |
//! | 1 | also parse with the destination of the other IP version (must fail: family mismatch) |
//!
//! Properties checked, on top of "never panics":
//!
//! 1. `parse` is the checksum check followed by `parse_unchecked`: when `parse` succeeds,
//!    `parse_unchecked` gives the same segment.
//! 2. Round trip: a segment from `parse_unchecked` emits (into a buffer pre-filled with
//!    `0xa5`) exactly `header_len() + payload.len()` bytes, touches nothing past them, and
//!    those bytes `parse` back (checksum included) to the same segment. The one documented
//!    loss: SACK blocks that do not fit next to the other options in 40 bytes are dropped
//!    from the end (`Segment::write_header`, RFC 2018 section 3), so the blocks read back
//!    must be a prefix of the blocks parsed, shortened only when one more would not fit.
//! 3. Emitting is then a fixed point: the re-parsed segment emits the same bytes.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bypass_tcp::{SackBlock, SackBlocks, Segment, TcpOptions};

/// Bytes of the largest TCP header (data offset 15).
const MAX_HEADER: usize = 60;

/// Split `data` into source and destination addresses and the segment bytes.
///
/// Return `None` when `data` is too short for the mode byte and the addresses.
fn split(data: &[u8]) -> Option<(u8, IpAddr, IpAddr, &[u8])> {
    let (&mode, rest) = data.split_first()?;
    if mode & 1 == 0 {
        let (addrs, segment) = rest.split_first_chunk::<8>()?;
        let src = Ipv4Addr::from(<[u8; 4]>::try_from(&addrs[..4]).ok()?);
        let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&addrs[4..]).ok()?);
        Some((mode, src.into(), dst.into(), segment))
    } else {
        let (addrs, segment) = rest.split_first_chunk::<32>()?;
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&addrs[..16]).ok()?);
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&addrs[16..]).ok()?);
        Some((mode, src.into(), dst.into(), segment))
    }
}

/// Return an address of the other IP version than `addr`.
fn other_family(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V6(a.to_ipv6_mapped()),
        IpAddr::V6(a) => IpAddr::V4(a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED)),
    }
}

/// Run one `tcp_segment` input; panic when a property above does not hold.
pub fn check(data: &[u8]) {
    let Some((mode, src, dst, bytes)) = split(data) else { return };

    let unchecked = Segment::parse_unchecked(bytes);
    let checked = Segment::parse(bytes, src, dst);
    if let Ok(seg) = checked {
        assert_eq!(unchecked, Ok(seg), "parse accepted what parse_unchecked did not");
    }
    if mode & 2 != 0 {
        let mismatch = Segment::parse(bytes, src, other_family(dst));
        assert!(mismatch.is_err(), "parse accepted mixed address families: {mismatch:?}");
    }

    let Ok(first) = unchecked else { return };
    let bytes = emit(&first, src, dst);
    let again = Segment::parse(&bytes, src, dst)
        .unwrap_or_else(|e| panic!("emitted bytes do not parse: {e}\n{first:?}\n{bytes:02x?}"));
    assert_eq!(again.options.sack_blocks.as_slice(), written_blocks(&first.options), "SACK blocks read back");
    let expected = Segment { options: TcpOptions { sack_blocks: again.options.sack_blocks, ..first.options }, ..first };
    assert_eq!(again, expected, "round trip changed the segment");
    assert_eq!(emit(&again, src, dst), bytes, "emit is not a fixed point");
}

/// Emit `seg` for `src` -> `dst` into a `0xa5`-filled buffer, check its length and that
/// nothing past it was written, and return the segment's bytes.
fn emit(seg: &Segment<'_>, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let header_len = seg.header_len();
    assert!(header_len <= MAX_HEADER && header_len.is_multiple_of(4), "header_len {header_len} of {seg:?}");
    let len = header_len + seg.payload.len();
    let mut buf = vec![0xa5; len + 64];
    let written = seg.emit(src, dst, &mut buf).unwrap_or_else(|e| panic!("emit {seg:?}: {e}"));
    assert_eq!(written, len, "emit length of {seg:?}");
    assert!(buf[len..].iter().all(|&b| b == 0xa5), "emit wrote past {len} bytes");
    buf.truncate(len);
    buf
}

/// Return the SACK blocks of `opts` that `Segment::emit` writes: all of them, or as many as
/// fit in 40 option bytes next to the other options in Linux's layout.
fn written_blocks(opts: &TcpOptions) -> &[SackBlock] {
    let blocks = opts.sack_blocks.as_slice();
    let without = Segment { options: TcpOptions { sack_blocks: SackBlocks::new(), ..*opts }, ..Segment::EMPTY };
    let room = MAX_HEADER - without.header_len();
    // NOP, NOP, kind, length, then 8 bytes a block (RFC 2018 section 3).
    let fit = room.saturating_sub(4) / 8;
    &blocks[..blocks.len().min(fit)]
}
