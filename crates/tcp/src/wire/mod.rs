//! TCP's wire format: the [`Segment`] value and its [`Flags`], its typed options, and
//! parsing, emitting and checksumming them (RFC 9293 section 3.1).
//!
//! A segment is the IP payload: TCP has no length field, so the caller passes
//! exactly the bytes after the IP header, and everything after the TCP header
//! is payload. The checksum covers an IPv4 (RFC 9293 3.1) or IPv6
//! (RFC 8200 8.1) pseudo-header, so checking and filling it needs the addresses.
//!
//! `etherparse` validates the data offset and reads the fixed header
//! ([`etherparse::TcpHeaderSlice`]) and holds the checksum's running sum
//! ([`etherparse::checksum::Sum16BitWords`]); the bulk of a segment is summed
//! here (`checksum.rs`) in 64-bit words with chained carries, in well under
//! half the instructions of etherparse's 16-bit loop: the checksum was the
//! largest single cost of a bulk segment sent or received. Options are parsed here
//! (`options.rs`) because etherparse's option iterator stops at the
//! first unknown kind, which RFC 9293 3.1 says a receiver must skip.
//!
//! # No panics on wire bytes
//!
//! Nothing in this module panics on bytes from the wire, whatever they hold: every
//! malformed segment comes back as a typed [`ParseError`], for the caller to count and log
//! as the reason of the drop (a malformed option is not one: it is skipped and the segment
//! kept, as Linux does, see [`Segment::parse_unchecked`]); and an emit into a buffer too small, or with addresses the
//! pseudo-header cannot take, comes back as an [`EmitError`] with the buffer left as it
//! was. The property tests of `segment.rs` parse arbitrary bytes and flip every bit of
//! valid segments to hold this.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | this contract and the two errors, [`ParseError`] and [`EmitError`] |
//! | `segment.rs` | [`Segment`] and [`Flags`]; [`Segment::parse`], [`Segment::emit`] |
//! | `options.rs` | [`TcpOptions`], [`SackBlock`], [`SackBlocks`], [`Timestamps`]: the option area |
//! | `checksum.rs` | the pseudo-header and the checksum: [`set_checksum`], [`Checksum`] |
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

mod checksum;
mod options;
mod segment;

pub use checksum::{Checksum, add_tail, set_checksum, set_checksum_as};
pub(crate) use checksum::{PseudoSum, fill_checksum};
pub use options::{SackBlock, SackBlocks, TcpOptions, Timestamps};
pub(crate) use segment::PlainHeader;
pub use segment::{Flags, Segment};

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
