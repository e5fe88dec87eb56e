//! TCP options (RFC 9293 3.1, RFC 7323, RFC 2018), as typed values.
//!
//! Parsing and emitting: see the functions below the types. They work on the
//! option area only (the header bytes after the fixed 20); `segment.rs`
//! calls them for whole segments.

use core::fmt;

use crate::seq::SeqNum;

/// One SACK block: the octets `left..right` were received (RFC 2018 section 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SackBlock {
    /// First sequence number of the block.
    pub left: SeqNum,
    /// Sequence number just past the block.
    pub right: SeqNum,
}

/// Up to four SACK blocks, in the order they appear on the wire.
///
/// Equality and hashing look at the blocks in use only ([`SackBlocks::as_slice`]),
/// not at slots left over by [`SackBlocks::truncate`].
#[derive(Clone, Copy, Default)]
pub struct SackBlocks {
    blocks: [SackBlock; 4],
    len: u8,
}

impl SackBlocks {
    /// The most blocks one option can carry (40 option bytes, RFC 2018 section 3).
    pub const MAX: usize = 4;

    /// Return no blocks.
    pub const fn new() -> Self {
        SackBlocks { blocks: [SackBlock { left: SeqNum(0), right: SeqNum(0) }; 4], len: 0 }
    }

    /// Append a block; return `false` (and keep the list) when it is full.
    pub fn push(&mut self, block: SackBlock) -> bool {
        if (self.len as usize) < Self::MAX {
            self.blocks[self.len as usize] = block;
            self.len += 1;
            true
        } else {
            false
        }
    }

    /// Return the blocks.
    pub fn as_slice(&self) -> &[SackBlock] {
        &self.blocks[..self.len as usize]
    }

    /// Return the number of blocks.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Return whether there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keep only the first `n` blocks.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n as u8);
    }
}

impl PartialEq for SackBlocks {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SackBlocks {}

impl core::hash::Hash for SackBlocks {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice().iter().map(|b| b.left.0..b.right.0)).finish()
    }
}

/// The timestamps option (RFC 7323 section 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Timestamps {
    /// TSval: the sender's timestamp clock.
    pub tsval: u32,
    /// TSecr: the TSval echoed back, valid when ACK is set.
    pub tsecr: u32,
}

/// The options of one segment, typed. Unknown options are skipped when parsing.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2), only in SYN segments.
    pub mss: Option<u16>,
    /// Window scale shift count (kind 3), only in SYN segments.
    pub window_scale: Option<u8>,
    /// SACK-permitted (kind 4), only in SYN segments.
    pub sack_permitted: bool,
    /// SACK blocks (kind 5).
    pub sack_blocks: SackBlocks,
    /// Timestamps (kind 8).
    pub timestamps: Option<Timestamps>,
}

impl TcpOptions {
    /// No options.
    pub const NONE: TcpOptions = TcpOptions {
        mss: None,
        window_scale: None,
        sack_permitted: false,
        sack_blocks: SackBlocks::new(),
        timestamps: None,
    };

    /// Return whether no option is present.
    pub fn is_empty(&self) -> bool {
        self.mss.is_none()
            && self.window_scale.is_none()
            && !self.sack_permitted
            && self.sack_blocks.is_empty()
            && self.timestamps.is_none()
    }
}

impl fmt::Debug for TcpOptions {
    /// Write the options the way a ladder diagram shows them: `mss=1460 ws=7 sackOK ts=1/0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(mss) = self.mss {
            write!(f, "{sep}mss={mss}")?;
            sep = " ";
        }
        if let Some(ws) = self.window_scale {
            write!(f, "{sep}ws={ws}")?;
            sep = " ";
        }
        if self.sack_permitted {
            write!(f, "{sep}sackOK")?;
            sep = " ";
        }
        if !self.sack_blocks.is_empty() {
            write!(f, "{sep}sack={:?}", self.sack_blocks)?;
            sep = " ";
        }
        if let Some(ts) = self.timestamps {
            write!(f, "{sep}ts={}/{}", ts.tsval, ts.tsecr)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Parsing and emission
// ---------------------------------------------------------------------------

/// Option kinds (IANA "TCP Option Kind Numbers").
pub(super) mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// The most option bytes a header can carry (data offset 15 minus the fixed 20 bytes).
pub(crate) const MAX_OPTIONS_LEN: usize = 40;

/// A malformed option that [`parse_options`] skipped: the reason, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skipped {
    /// A known kind with a length wrong for it (MSS 4, window scale 3, SACK-permitted 2,
    /// SACK 2 + 8n with n in 1..=4, timestamps 10): that option is ignored, parsing goes on.
    Length { kind: u8, len: u8 },
    /// A length byte of 0 or 1: parsing ends there (Linux's "silly options").
    Silly { kind: u8, len: u8 },
    /// The length byte is missing or runs past the header: parsing ends there.
    PastHeader { kind: u8 },
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Skipped::Length { kind, len } => write!(f, "option kind {kind} has length {len}, wrong for it: ignored"),
            Skipped::Silly { kind, len } => {
                write!(f, "option kind {kind} has invalid length {len}: the rest of the options ignored")
            }
            Skipped::PastHeader { kind } => {
                write!(f, "option kind {kind} runs past the end of the header: the rest of the options ignored")
            }
        }
    }
}

/// Parse the option area of a TCP header (RFC 9293 section 3.2), and return the options
/// with the first malformed one skipped, if any.
///
/// EOL ends parsing, NOP is skipped, unknown kinds are skipped by their length (RFC 9293
/// 3.1, MUST-6). A known option that repeats overrides the earlier one. The window scale
/// is returned as sent; callers clamp it to 14 (RFC 7323 section 2.3).
///
/// Malformed options never fail the segment. RFC 9293 3.1 asks that an implementation
/// "MUST be prepared to handle an illegal option length (e.g., zero)" (MUST-7), and only
/// suggests resetting the connection; Linux's `tcp_parse_options` (net/ipv4/tcp_input.c)
/// keeps the segment, and so do we:
///
/// - a known kind whose length is wrong for it is ignored, and parsing goes on after it
///   (Linux checks `opsize == TCPOLEN_*` per kind and otherwise steps over `opsize`);
/// - a length byte of 0 or 1 (which would not move past the option), a missing length
///   byte, or a length running past the header ends parsing: what was parsed so far is
///   kept (Linux returns on `opsize < 2` and on `opsize > length`).
///
/// The returned [`Skipped`] is the first such option, for the caller to log.
pub(crate) fn parse_options(bytes: &[u8]) -> (TcpOptions, Option<Skipped>) {
    let mut opts = TcpOptions::NONE;
    let mut skipped = None;
    let mut rest = bytes;
    while let Some((&kind, after_kind)) = rest.split_first() {
        match kind {
            kind::EOL => break,
            kind::NOP => {
                rest = after_kind;
                continue;
            }
            _ => {}
        }
        let Some((&len, after_len)) = after_kind.split_first() else {
            skipped.get_or_insert(Skipped::PastHeader { kind });
            break;
        };
        if len < 2 {
            skipped.get_or_insert(Skipped::Silly { kind, len });
            break;
        }
        let Some((body, next)) = after_len.split_at_checked(usize::from(len) - 2) else {
            skipped.get_or_insert(Skipped::PastHeader { kind });
            break;
        };
        rest = next;
        let mut bad_len = || {
            skipped.get_or_insert(Skipped::Length { kind, len });
        };
        match kind {
            kind::MSS => match *body {
                [a, b] => opts.mss = Some(u16::from_be_bytes([a, b])),
                _ => bad_len(),
            },
            kind::WINDOW_SCALE => match *body {
                [shift] => opts.window_scale = Some(shift),
                _ => bad_len(),
            },
            kind::SACK_PERMITTED => match body {
                [] => opts.sack_permitted = true,
                _ => bad_len(),
            },
            kind::SACK => {
                let (blocks, tail) = body.as_chunks::<8>();
                if blocks.is_empty() || blocks.len() > SackBlocks::MAX || !tail.is_empty() {
                    bad_len();
                    continue;
                }
                let mut sack = SackBlocks::new();
                for b in blocks {
                    sack.push(SackBlock {
                        left: SeqNum(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                        right: SeqNum(u32::from_be_bytes([b[4], b[5], b[6], b[7]])),
                    });
                }
                opts.sack_blocks = sack;
            }
            kind::TIMESTAMPS => match body.as_chunks::<4>() {
                (&[tsval, tsecr], &[]) => {
                    opts.timestamps =
                        Some(Timestamps { tsval: u32::from_be_bytes(tsval), tsecr: u32::from_be_bytes(tsecr) })
                }
                _ => bad_len(),
            },
            _ => {}
        }
    }
    (opts, skipped)
}

/// Return how many of `opts`'s SACK blocks fit in the option area next to the other options.
///
/// Blocks are dropped from the end: at most 4 fit alone, 3 next to timestamps
/// (RFC 2018 section 3), 2 in a SYN that also carries MSS, SACK-permitted and timestamps.
pub(crate) fn sack_blocks_that_fit(opts: &TcpOptions) -> usize {
    blocks_beside(opts, fixed_options_len(opts))
}

/// Return how many of the SACK blocks of `opts` fit beside `fixed` bytes of other options.
#[inline]
fn blocks_beside(opts: &TcpOptions, fixed: usize) -> usize {
    let room = MAX_OPTIONS_LEN - fixed;
    // The SACK option costs NOP, NOP, kind, length and then 8 bytes a block.
    let fit = room.saturating_sub(4) / 8;
    opts.sack_blocks.len().min(fit)
}

/// Return the length of every option but SACK blocks, in the layout [`write_option_area`] uses.
fn fixed_options_len(opts: &TcpOptions) -> usize {
    let mss = if opts.mss.is_some() { 4 } else { 0 };
    // Timestamps take 12 bytes: 2 of NOP padding, or SACK-permitted in their place.
    let ts_and_sack_ok = match (opts.timestamps.is_some(), opts.sack_permitted) {
        (true, _) => 12,
        (false, true) => 4,
        (false, false) => 0,
    };
    let ws = if opts.window_scale.is_some() { 4 } else { 0 };
    mss + ts_and_sack_ok + ws
}

/// Return the length of the option area [`write_option_area`] writes for `opts`.
///
/// The length is a multiple of 4 and at most 40: SACK blocks that do not fit
/// are left out (see [`write_option_area`]).
pub(crate) fn options_len(opts: &TcpOptions) -> usize {
    let fixed = fixed_options_len(opts);
    let blocks = blocks_beside(opts, fixed);
    let sack = if blocks > 0 { 4 + 8 * blocks } else { 0 };
    fixed + sack
}

/// Write `opts` into `buf` and return the number of bytes written ([`options_len`]), as
/// [`write_option_area`] does into an area of that length.
#[cfg(test)]
pub(crate) fn write_options(opts: &TcpOptions, buf: &mut [u8]) -> usize {
    let len = options_len(opts);
    write_option_area(opts, &mut buf[..len]);
    len
}

/// Write `opts` into `area`, the option area of a header: [`options_len`]`(opts)` bytes,
/// which the caller computed to size the header (the header's writer computes it once).
///
/// Use Linux's layout (`tcp_options_write`), every option aligned on 4 bytes with NOPs:
/// MSS; SACK-permitted and timestamps (`04 02 08 0a ...`, or `01 01 08 0a ...`
/// without SACK-permitted, or `01 01 04 02` without timestamps); NOP and
/// window scale; NOP, NOP and the SACK blocks. SACK blocks that do not fit in
/// 40 bytes are dropped from the end ([`sack_blocks_that_fit`]).
pub(crate) fn write_option_area(opts: &TcpOptions, area: &mut [u8]) {
    debug_assert_eq!(area.len(), options_len(opts));
    if area.is_empty() {
        // No option at all, as on every segment of a connection without timestamps while
        // nothing is held out of order: none of the branches below would write.
        return;
    }
    let mut words = area.as_chunks_mut::<4>().0.iter_mut();
    let mut put = |word: [u8; 4]| {
        if let Some(slot) = words.next() {
            *slot = word;
        }
    };
    if let Some(mss) = opts.mss {
        let [hi, lo] = mss.to_be_bytes();
        put([kind::MSS, 4, hi, lo]);
    }
    if let Some(ts) = opts.timestamps {
        if opts.sack_permitted {
            put([kind::SACK_PERMITTED, 2, kind::TIMESTAMPS, 10]);
        } else {
            put([kind::NOP, kind::NOP, kind::TIMESTAMPS, 10]);
        }
        put(ts.tsval.to_be_bytes());
        put(ts.tsecr.to_be_bytes());
    } else if opts.sack_permitted {
        put([kind::NOP, kind::NOP, kind::SACK_PERMITTED, 2]);
    }
    if let Some(shift) = opts.window_scale {
        put([kind::NOP, kind::WINDOW_SCALE, 3, shift]);
    }
    let blocks = &opts.sack_blocks.as_slice()[..sack_blocks_that_fit(opts)];
    if !blocks.is_empty() {
        // At most 4 blocks fit, so the length (2 + 8n <= 34) fits in a byte.
        put([kind::NOP, kind::NOP, kind::SACK, 2 + 8 * blocks.len() as u8]);
        for block in blocks {
            put(block.left.0.to_be_bytes());
            put(block.right.0.to_be_bytes());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `Segment::parse_unchecked` takes an empty option area as no options without calling
    /// `parse_options`: this is what the call would return.
    #[test]
    fn no_option_bytes_parse_as_no_options() {
        let (opts, skipped) = parse_options(&[]);
        assert_eq!(opts, TcpOptions::NONE);
        assert!(skipped.is_none());
    }

    /// The options of a Linux SYN: MSS 1460, SACK-permitted, timestamps, NOP, window scale 7.
    const LINUX_SYN: [u8; 20] = [
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, 0x08, 0x0a, // SACK-permitted, timestamps kind and length
        0x00, 0x9d, 0x8f, 0x4a, // TSval
        0x00, 0x00, 0x00, 0x00, // TSecr
        0x01, 0x03, 0x03, 0x07, // NOP, window scale 7
    ];

    fn sack(blocks: &[(u32, u32)]) -> SackBlocks {
        let mut sack = SackBlocks::new();
        for &(left, right) in blocks {
            assert!(sack.push(SackBlock { left: SeqNum(left), right: SeqNum(right) }));
        }
        sack
    }

    fn linux_syn_options() -> TcpOptions {
        TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            sack_blocks: SackBlocks::new(),
            timestamps: Some(Timestamps { tsval: 0x009d_8f4a, tsecr: 0 }),
        }
    }

    /// Write `opts` into a 0xa5-filled buffer; return it and the length written.
    fn write(opts: &TcpOptions) -> ([u8; 48], usize) {
        let mut buf = [0xa5; 48];
        let len = write_options(opts, &mut buf);
        assert_eq!(len, options_len(opts));
        assert!(buf[len..].iter().all(|&b| b == 0xa5), "wrote past {len}: {buf:02x?}");
        (buf, len)
    }

    #[test]
    fn sack_blocks_compare_the_blocks_in_use() {
        let mut three = sack(&[(1, 2), (3, 4), (5, 6)]);
        three.truncate(2);
        assert_eq!(three, sack(&[(1, 2), (3, 4)]));
        assert_ne!(three, sack(&[(1, 2)]));
    }

    #[test]
    fn parse_linux_syn() {
        assert_eq!(parse_options(&LINUX_SYN), (linux_syn_options(), None));
    }

    #[test]
    fn write_linux_syn() {
        let (buf, len) = write(&linux_syn_options());
        assert_eq!(&buf[..len], &LINUX_SYN);
    }

    #[test]
    fn write_sack_permitted_without_timestamps() {
        let opts = TcpOptions { timestamps: None, ..linux_syn_options() };
        let (buf, len) = write(&opts);
        let expected = [0x02, 0x04, 0x05, 0xb4, 0x01, 0x01, 0x04, 0x02, 0x01, 0x03, 0x03, 0x07];
        assert_eq!(&buf[..len], &expected);
    }

    #[test]
    fn write_timestamps_and_sack_blocks_like_linux() {
        let opts = TcpOptions {
            timestamps: Some(Timestamps { tsval: 0x0102_0304, tsecr: 0x0506_0708 }),
            sack_blocks: sack(&[(0x1000, 0x2000)]),
            ..TcpOptions::NONE
        };
        let (buf, len) = write(&opts);
        #[rustfmt::skip]
        let expected = [
            0x01, 0x01, 0x08, 0x0a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
            0x01, 0x01, 0x05, 0x0a, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x20, 0x00,
        ];
        assert_eq!(&buf[..len], &expected);
        assert_eq!(parse_options(&buf[..len]), (opts, None));
    }

    #[test]
    fn write_nothing_for_no_options() {
        let (_, len) = write(&TcpOptions::NONE);
        assert_eq!(len, 0);
    }

    #[test]
    fn sack_blocks_are_dropped_from_the_end_to_fit() {
        let four = sack(&[(1, 2), (3, 4), (5, 6), (7, 8)]);
        let ts = Some(Timestamps { tsval: 1, tsecr: 2 });
        let cases = [
            (TcpOptions { sack_blocks: four, ..TcpOptions::NONE }, 4, 36),
            // RFC 2018 section 3: at most three blocks next to timestamps.
            (TcpOptions { sack_blocks: four, timestamps: ts, ..TcpOptions::NONE }, 3, 40),
            (TcpOptions { sack_blocks: four, ..linux_syn_options() }, 2, 40),
            (TcpOptions { sack_blocks: four, mss: Some(1), ..TcpOptions::NONE }, 4, 40),
            (TcpOptions { sack_blocks: four, window_scale: Some(1), mss: Some(1), ..TcpOptions::NONE }, 3, 36),
        ];
        for (opts, blocks, len) in cases {
            assert_eq!(sack_blocks_that_fit(&opts), blocks, "{opts:?}");
            let (buf, written) = write(&opts);
            assert_eq!(written, len, "{opts:?}");
            let (parsed, skipped) = parse_options(&buf[..written]);
            assert_eq!(skipped, None);
            assert_eq!(parsed.sack_blocks.as_slice(), &four.as_slice()[..blocks]);
        }
    }

    #[test]
    fn parse_skips_unknown_kinds_and_stops_at_eol() {
        let bytes = [
            0x1e, 0x04, 0xff, 0xff, // kind 30 (MPTCP), skipped by its length
            0xfe, 0x02, // kind 254 (experimental), empty
            0x01, // NOP
            0x02, 0x04, 0x02, 0x18, // MSS 536
            0x00, // EOL: the rest is padding, even if it looks like garbage
            0x02, 0x00, 0x03,
        ];
        assert_eq!(parse_options(&bytes), (TcpOptions { mss: Some(536), ..TcpOptions::NONE }, None));
    }

    #[test]
    fn parse_keeps_window_scale_as_sent() {
        assert_eq!(parse_options(&[0x03, 0x03, 0xff, 0x00]).0.window_scale, Some(255));
    }

    const MSS_536: [u8; 4] = [0x02, 0x04, 0x02, 0x18];

    /// A known option with a length wrong for it is ignored, and parsing goes on after it
    /// (Linux's `tcp_parse_options`): each case is followed by a valid MSS, which is kept.
    #[test]
    fn a_known_option_of_the_wrong_length_is_skipped() {
        let cases: &[&[u8]] = &[
            &[0x02, 0x03, 0x05],                         // MSS of length 3
            &[0x02, 0x05, 0x05, 0xb4, 0x00],             // MSS of length 5
            &[0x03, 0x04, 0x07, 0x00],                   // window scale of length 4
            &[0x03, 0x02],                               // window scale of length 2
            &[0x04, 0x03, 0x00],                         // SACK-permitted of length 3
            &[0x05, 0x02],                               // SACK with no block
            &[0x05, 0x06, 0, 0, 0, 1],                   // SACK with half a block
            &[0x05, 0x0b, 0, 0, 0, 1, 0, 0, 0, 2, 9],    // SACK with a block and a byte
            &[0x08, 0x08, 0, 0, 0, 1, 0, 0],             // timestamps of length 8
            &[0x08, 0x0c, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0], // timestamps of length 12
        ];
        for &bad in cases {
            let bytes = [bad, &MSS_536].concat();
            let (opts, skipped) = parse_options(&bytes);
            assert_eq!(opts, TcpOptions { mss: Some(536), ..TcpOptions::NONE }, "{bytes:02x?}");
            assert_eq!(skipped, Some(Skipped::Length { kind: bad[0], len: bad[1] }), "{bytes:02x?}");
        }
        // A bad MSS after a good one leaves the good one; the timestamps before are kept too.
        let bytes =
            [&[0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 7, 0, 0, 0, 9][..], &MSS_536, &[0x02, 0x03, 0xff, 0x00]].concat();
        let (opts, skipped) = parse_options(&bytes);
        assert_eq!(opts.mss, Some(536));
        assert_eq!(opts.timestamps, Some(Timestamps { tsval: 7, tsecr: 9 }));
        assert_eq!(skipped, Some(Skipped::Length { kind: 2, len: 3 }));
        // Five SACK blocks need 42 bytes: more than a header holds, and more than we keep.
        let mut five = [0u8; 42];
        five[..2].copy_from_slice(&[0x05, 42]);
        assert_eq!(parse_options(&five), (TcpOptions::NONE, Some(Skipped::Length { kind: 5, len: 42 })));
    }

    /// A length of 0 or 1, a missing length byte, or a length past the header ends parsing;
    /// what came before is kept (Linux returns from `tcp_parse_options` there).
    #[test]
    fn a_length_that_cannot_be_followed_ends_parsing() {
        let cases: &[(&[u8], Skipped)] = &[
            (&[0x02, 0x00, 0x02, 0x04, 0x02, 0x18], Skipped::Silly { kind: 2, len: 0 }),
            (&[0x1e, 0x01, 0x02, 0x04, 0x02, 0x18], Skipped::Silly { kind: 30, len: 1 }),
            (&[0x08, 0x00], Skipped::Silly { kind: 8, len: 0 }),
            (&[0x01, 0x01, 0x01, 0x02], Skipped::PastHeader { kind: 2 }),
            (&[0x02, 0x04, 0x05], Skipped::PastHeader { kind: 2 }),
            (&[0x1e, 0x08, 0x00, 0x00], Skipped::PastHeader { kind: 30 }),
            (&[0x08, 0x0a, 0, 0, 0, 1, 0, 0], Skipped::PastHeader { kind: 8 }),
        ];
        for &(bad, reason) in cases {
            assert_eq!(parse_options(bad), (TcpOptions::NONE, Some(reason)), "{bad:02x?}");
            // Options before the bad one are kept.
            let bytes = [&MSS_536, bad].concat();
            assert_eq!(parse_options(&bytes), (TcpOptions { mss: Some(536), ..TcpOptions::NONE }, Some(reason)));
        }
    }

    #[test]
    fn the_first_skipped_option_is_reported() {
        let bytes = [0x03, 0x02, 0x02, 0x03, 0x00, 0x02, 0x00];
        assert_eq!(parse_options(&bytes), (TcpOptions::NONE, Some(Skipped::Length { kind: 3, len: 2 })));
        assert_eq!(
            Skipped::Length { kind: 3, len: 2 }.to_string(),
            "option kind 3 has length 2, wrong for it: ignored"
        );
    }

    pub(crate) fn arb_options() -> impl Strategy<Value = TcpOptions> {
        (
            any::<Option<u16>>(),
            any::<Option<u8>>(),
            any::<bool>(),
            proptest::collection::vec(any::<(u32, u32)>(), 0..=SackBlocks::MAX),
            any::<Option<(u32, u32)>>(),
        )
            .prop_map(|(mss, window_scale, sack_permitted, blocks, ts)| TcpOptions {
                mss,
                window_scale,
                sack_permitted,
                sack_blocks: sack(&blocks),
                timestamps: ts.map(|(tsval, tsecr)| Timestamps { tsval, tsecr }),
            })
    }

    /// Return `opts` as it reads back once written: SACK blocks that do not fit dropped.
    pub(crate) fn as_written(opts: &TcpOptions) -> TcpOptions {
        let mut expected = *opts;
        expected.sack_blocks.truncate(sack_blocks_that_fit(opts));
        expected
    }

    proptest! {
        #[test]
        fn options_round_trip(opts in arb_options()) {
            let (buf, len) = write(&opts);
            prop_assert!(len % 4 == 0 && len <= MAX_OPTIONS_LEN);
            prop_assert_eq!(parse_options(&buf[..len]), (as_written(&opts), None));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_options(&bytes);
        }
    }
}
