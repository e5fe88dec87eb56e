//! IP fragment reassembly, sans-IO: IPv4 (RFC 791 section 3.2, RFC 815) and IPv6
//! (RFC 8200 section 4.5, RFC 5722).
//!
//! The host parses the IPv4 header, or the IPv6 header chain up to the Fragment header,
//! and hands each fragment to [`Reassembler::insert`] under its [`FragmentKey`]. The
//! reassembler copies the fragment's bytes and, when the last hole is filled, returns the
//! whole payload as a [`Datagram`] borrowed from its own buffer. No clock is read: time
//! comes in as `now`.
//!
//! # Call order
//!
//! 1. [`Reassembler::insert`] for every received fragment (IPv4 with MF set or a non-zero
//!    offset; IPv6 with a Fragment header). `Ok(Some(datagram))` is complete: process it
//!    before the next call, which recycles its buffer. `Ok(None)`: held, more to come.
//!    `Err(reason)`: this fragment was dropped; count it by [`FragmentDrop::name`].
//! 2. [`Reassembler::poll_timeout`] says when the next datagram runs out of time.
//! 3. [`Reassembler::handle_timeout`] then drops the datagrams whose time ran out and
//!    reports each one that had its first fragment, for ICMP Time Exceeded code 1.
//!
//! ```
//! use bypass_stack::fragments::{Fragment, FragmentKey, Reassembler, ReassemblyConfig};
//! use bypass_tcp::Instant;
//! use std::net::Ipv4Addr;
//!
//! let mut r = Reassembler::new(ReassemblyConfig::default());
//! let key = FragmentKey::ipv4(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1), 0x1234, 17);
//! let now = Instant::from_millis(1);
//! assert_eq!(r.insert(now, key, Fragment::new(8, false, b"orld")), Ok(None));
//! let datagram = r.insert(now, key, Fragment::new(0, true, b"hello, w")).unwrap().unwrap();
//! assert_eq!(datagram.payload, b"hello, world");
//! assert_eq!(r.poll_timeout(), None);
//! ```
//!
//! # Rules
//!
//! Every rule drops with a typed [`FragmentDrop`]; those that also discard the datagram
//! say so in [`FragmentDrop::discards_datagram`]. A discarded datagram stays in the table
//! as a tombstone until its time runs out, and every later fragment of it is dropped with
//! [`FragmentDrop::Discarded`] (RFC 5722 section 4: "the entire datagram (and any
//! constituent fragments, including those not yet received) MUST be silently discarded").
//!
//! - A fragment with more to follow must be a multiple of 8 bytes long (RFC 791 section
//!   3.1, fragment offset in units of 8 octets; RFC 8200 section 4.5: otherwise discard it
//!   and send ICMPv6 Parameter Problem code 0 pointing at the Payload Length). Linux's IPv4
//!   trims such a fragment to a multiple of 8 instead; we drop it, as IPv6 requires.
//! - Overlap with a fragment already held, partly or wholly, discards the datagram
//!   (RFC 5722 section 4 for IPv6; Linux applies it to IPv4 too since 4.19, where
//!   `inet_frag_queue_insert` returns `IPFRAG_OVERLAP` and the queue is killed). An exact
//!   duplicate (same offset, length and bytes) is dropped alone and the datagram goes on
//!   (RFC 5722 errata 3089; Linux `IPFRAG_DUP`). Same offset and length but different
//!   bytes is an overlap: two versions of one range are what RFC 5722 forbids.
//! - A fragment ending beyond [`ReassemblyConfig::max_datagram_len`] (the ping of death)
//!   discards the datagram (RFC 8200 section 4.5: discard and send Parameter Problem
//!   pointing at the Fragment Offset; RFC 791's Total Length is 16 bits).
//! - A second last fragment (MF clear) ending elsewhere, a fragment reaching the known
//!   end with more to follow, or a last fragment ending at or before data already held,
//!   discards the datagram (Linux `ip_frag_queue`: "the segment is corrupted").
//! - A fragment with no data is dropped. One with offset 0 and no more to follow is an
//!   atomic fragment (RFC 6946 section 4): returned at once without touching the table.
//! - The ECN field (RFC 3168 section 5.3): a datagram whose fragments mix Not-ECT with
//!   ECT or CE is discarded, and one with any fragment marked CE is delivered as CE, else
//!   with its first fragment's field (Linux's `ip_frag_ecn_table`: a mark must not be lost
//!   in reassembly, and a fragment that lost its ECT on the way is a broken path).
//!
//! # Bounds
//!
//! | [`ReassemblyConfig`] field | Default | Linux equivalent |
//! |---|---|---|
//! | `ipv4_timeout` | 30 s | `net.ipv4.ipfrag_time` (30) |
//! | `ipv6_timeout` | 60 s (RFC 8200 section 4.5) | `net.ipv6.ip6frag_time` (60) |
//! | `max_bytes` | 4 MiB | `net.ipv4.ipfrag_high_thresh`, `net.ipv6.ip6frag_high_thresh` (4 MiB each) |
//! | `max_datagrams` | 1024 | none (memory only) |
//! | `max_datagram_len` | 65535 | 65535 (`ip_frag_reasm`, `IPV6_MAXPLEN`) |
//! | `max_fragments` | 64 | none; FreeBSD `net.inet6.ip6.maxfragsperpacket` (64) |
//!
//! The timer of a datagram starts at its first-arriving fragment (RFC 791 section 3.2,
//! RFC 8200 section 4.5) and is not extended by later ones.
//!
//! Instead of RFC 815's list of holes, each datagram keeps its received pieces sorted (at
//! most `max_fragments`, so every check is a binary search and a short shift) and is
//! complete when it holds as many bytes as the last fragment's end: the pieces are
//! disjoint, so no hole remains. Bytes are stored in arrival order and put in order once,
//! at completion, unless they arrived in order; so a fragment far into a datagram costs
//! only its own length. Memory counted is those bytes plus the first fragment's kept
//! header.
//!
//! When a new fragment would exceed `max_bytes` or `max_datagrams`, the datagram that
//! started longest ago is evicted (as Linux did before 4.17, `inet_frag_evictor`; Linux
//! now refuses every fragment above the threshold until timers free memory, so a steady
//! trickle of junk fragments stops all reassembly). Evictions are counted in
//! [`ReassemblyStats::evicted`]. Buffers are kept for reuse, so steady state allocates
//! nothing; the spares are bounded by `max_bytes` (plus one buffer for putting
//! datagrams in order) and are not counted in [`Reassembler::held_bytes`].

use core::fmt;
use std::collections::HashMap;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bypass_tcp::{Instant, IpEcn};

/// The fixed IPv4 header, which RFC 791's Total Length counts alongside the payload.
const IPV4_HEADER_LEN: usize = 20;

/// No slot: the end of a list.
const NIL: usize = usize::MAX;

/// Reassembly settings; see the [module docs](self) for the bounds and their Linux names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// How long an IPv4 datagram may take, from its first-arriving fragment (Linux
    /// `net.ipv4.ipfrag_time`, 30 s; RFC 791 section 3.2 suggests 15 s to start with and
    /// RFC 1122 section 3.3.2 recommends 60 to 120 s).
    pub ipv4_timeout: Duration,
    /// How long an IPv6 datagram may take, from its first-arriving fragment (RFC 8200
    /// section 4.5: abandoned after 60 s; Linux `net.ipv6.ip6frag_time`).
    pub ipv6_timeout: Duration,
    /// Most bytes held over all datagrams being reassembled, fragment data plus kept
    /// headers (Linux `ipfrag_high_thresh`, 4 MiB; Linux keeps one per family, this is
    /// shared).
    pub max_bytes: usize,
    /// Most datagrams being reassembled or discarded (tombstones) at once (at least 1).
    pub max_datagrams: usize,
    /// Most bytes of a reassembled datagram: for IPv4 the payload plus the 20-byte fixed
    /// header (Total Length, RFC 791 section 3.1), so payloads up to 65515 with the
    /// default; for IPv6 the fragmentable part alone (RFC 8200 section 4.5 checks
    /// offset plus length against 65535). A fragment ending beyond it is oversized.
    pub max_datagram_len: usize,
    /// Most fragments in one datagram; more discards it, so floods of tiny fragments
    /// cannot make one datagram expensive (64 covers a 64 KiB datagram over a 1280-byte
    /// IPv6 link).
    pub max_fragments: usize,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig {
            ipv4_timeout: Duration::from_secs(30),
            ipv6_timeout: Duration::from_secs(60),
            max_bytes: 4 * 1024 * 1024,
            max_datagrams: 1024,
            max_datagram_len: 65535,
            max_fragments: 64,
        }
    }
}

/// What identifies the fragments of one datagram.
///
/// IPv4: source, destination, protocol and identification (RFC 791 section 3.2). IPv6:
/// source, destination and identification (RFC 8200 section 4.5), with `protocol` 0: the
/// Next Header of fragments may differ and only the first fragment's counts. IPv4 and
/// IPv6 keys never match, since their addresses differ in kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Identification: 16 bits in IPv4, 32 in IPv6.
    pub id: u32,
    /// IPv4 protocol; 0 for IPv6.
    pub protocol: u8,
}

impl FragmentKey {
    /// Return the key of an IPv4 fragment.
    pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, id: u16, protocol: u8) -> Self {
        FragmentKey { src: src.into(), dst: dst.into(), id: id.into(), protocol }
    }

    /// Return the key of an IPv6 fragment.
    pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, id: u32) -> Self {
        FragmentKey { src: src.into(), dst: dst.into(), id, protocol: 0 }
    }

    /// Return whether this is an IPv6 key (by its source address).
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// Return the list (and timeout) this key belongs to: 0 for IPv4, 1 for IPv6.
    fn family(&self) -> usize {
        usize::from(self.is_ipv6())
    }
}

impl fmt::Display for FragmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {} id {:#x}", self.src, self.dst, self.id)?;
        if !self.is_ipv6() {
            write!(f, " proto {}", self.protocol)?;
        }
        Ok(())
    }
}

/// One fragment as the host parsed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// Where `data` starts in the datagram's payload, in bytes: the header's Fragment
    /// Offset field times 8.
    pub offset: usize,
    /// The More Fragments flag: false on the last fragment.
    pub more: bool,
    /// The fragment's data: after the IPv4 header, or after the IPv6 Fragment header.
    pub data: &'a [u8],
    /// Bytes to keep from the first fragment (offset 0), ignored on the others: typically
    /// its IPv4 header, or its IPv6 header chain (whose Next Header counts, RFC 8200
    /// section 4.5). Returned in [`Datagram::header`] and [`FirstFragment::header`] for
    /// the ICMP quote; may be empty.
    pub header: &'a [u8],
    /// The ECN field of the fragment's IP header (RFC 3168 section 5.3).
    pub ecn: IpEcn,
}

impl<'a> Fragment<'a> {
    /// Return a fragment with no header kept, Not-ECT.
    pub const fn new(offset: usize, more: bool, data: &'a [u8]) -> Self {
        Fragment { offset, more, data, header: &[], ecn: IpEcn::NotEct }
    }

    /// Return this fragment with `header` kept if it is the first.
    pub const fn with_header(self, header: &'a [u8]) -> Self {
        Fragment { header, ..self }
    }

    /// Return this fragment with the ECN field `ecn`.
    pub const fn with_ecn(self, ecn: IpEcn) -> Self {
        Fragment { ecn, ..self }
    }
}

/// A reassembled datagram, borrowed until the next call on the [`Reassembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Whose fragments these were.
    pub key: FragmentKey,
    /// The first fragment's [`Fragment::header`].
    pub header: &'a [u8],
    /// The whole payload, from offset 0 to the end the last fragment gave.
    pub payload: &'a [u8],
    /// The datagram's ECN field: CE if any fragment was marked, else the first fragment's
    /// (RFC 3168 section 5.3).
    pub ecn: IpEcn,
}

/// Why [`Reassembler::insert`] dropped a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FragmentDrop {
    /// The fragment carries no data.
    #[error("fragment carries no data")]
    Empty,
    /// More fragments follow, but the length is not a multiple of 8 (RFC 791 section 3.1;
    /// RFC 8200 section 4.5: send ICMPv6 Parameter Problem code 0 pointing at the Payload
    /// Length).
    #[error("non-final fragment length is not a multiple of 8")]
    BadLength,
    /// The fragment ends beyond [`ReassemblyConfig::max_datagram_len`]; its datagram is
    /// discarded (RFC 8200 section 4.5: send ICMPv6 Parameter Problem code 0 pointing at
    /// the Fragment Offset).
    #[error("fragment ends beyond the largest datagram")]
    Oversized,
    /// The fragment overlaps one already held; its datagram is discarded (RFC 5722
    /// section 4).
    #[error("fragment overlaps one already received")]
    Overlap,
    /// The fragment disagrees with the datagram's end: a second, different last fragment,
    /// data at or beyond the known end with more to follow, or a last fragment ending
    /// within data already held. Its datagram is discarded.
    #[error("fragment disagrees with the datagram's end")]
    InconsistentEnd,
    /// The datagram would have more than [`ReassemblyConfig::max_fragments`]; it is
    /// discarded.
    #[error("datagram has too many fragments")]
    TooManyFragments,
    /// The datagram would not fit in [`ReassemblyConfig::max_bytes`] even alone; it is
    /// discarded.
    #[error("datagram does not fit in the reassembly memory")]
    MemoryLimit,
    /// An exact copy of a fragment already held: dropped, the datagram goes on (RFC 5722
    /// errata 3089). Not an error to answer.
    #[error("fragment duplicates one already received")]
    Duplicate,
    /// The fragment belongs to a datagram already discarded, which stays discarded until
    /// its time runs out (RFC 5722 section 4).
    #[error("fragment belongs to a discarded datagram")]
    Discarded,
    /// The fragment's ECN field is Not-ECT where another's is ECT or CE, or the other way
    /// round; its datagram is discarded (RFC 3168 section 5.3, Linux's
    /// `ip_frag_ecn_table`).
    #[error("fragments mix Not-ECT with ECT or CE")]
    EcnMismatch,
}

impl FragmentDrop {
    /// Every reason, in display order.
    pub const ALL: [FragmentDrop; 10] = [
        FragmentDrop::Empty,
        FragmentDrop::BadLength,
        FragmentDrop::Oversized,
        FragmentDrop::Overlap,
        FragmentDrop::InconsistentEnd,
        FragmentDrop::TooManyFragments,
        FragmentDrop::MemoryLimit,
        FragmentDrop::Duplicate,
        FragmentDrop::Discarded,
        FragmentDrop::EcnMismatch,
    ];

    /// Return a short snake_case name for counters and logs.
    pub const fn name(self) -> &'static str {
        match self {
            FragmentDrop::Empty => "frag_empty",
            FragmentDrop::BadLength => "frag_bad_length",
            FragmentDrop::Oversized => "frag_oversized",
            FragmentDrop::Overlap => "frag_overlap",
            FragmentDrop::InconsistentEnd => "frag_inconsistent_end",
            FragmentDrop::TooManyFragments => "frag_too_many",
            FragmentDrop::EcnMismatch => "frag_ecn_mismatch",
            FragmentDrop::MemoryLimit => "frag_memory_limit",
            FragmentDrop::Duplicate => "frag_duplicate",
            FragmentDrop::Discarded => "frag_discarded",
        }
    }

    /// Return whether dropping this fragment also discarded the datagram it belongs to
    /// (if one was being reassembled).
    pub const fn discards_datagram(self) -> bool {
        matches!(
            self,
            FragmentDrop::Oversized
                | FragmentDrop::Overlap
                | FragmentDrop::InconsistentEnd
                | FragmentDrop::TooManyFragments
                | FragmentDrop::MemoryLimit
                | FragmentDrop::EcnMismatch
        )
    }
}

/// A datagram whose time ran out, as [`Reassembler::handle_timeout`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired<'a> {
    /// Whose fragments these were.
    pub key: FragmentKey,
    /// The first fragment, if it had arrived. Only then may the host send ICMP Time
    /// Exceeded code 1, "fragment reassembly time exceeded" (RFC 792; RFC 8200 section
    /// 4.5 and RFC 4443 section 3.3 for IPv6), quoting it.
    pub first: Option<FirstFragment<'a>>,
}

/// What is kept of a first fragment, for the ICMP quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstFragment<'a> {
    /// Its [`Fragment::header`].
    pub header: &'a [u8],
    /// Its data, whole: the host quotes the first 8 bytes for IPv4 (RFC 792) or as much as
    /// fits in 1280 bytes for IPv6 (RFC 4443 section 2.4 (c)).
    pub data: &'a [u8],
}

/// Counts of what happened to datagrams besides the per-fragment [`FragmentDrop`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReassemblyStats {
    /// Datagrams reassembled (atomic fragments not included).
    pub reassembled: u64,
    /// Datagrams being reassembled whose time ran out (tombstones not included).
    pub timed_out: u64,
    /// Datagrams or tombstones evicted to make room for a new fragment.
    pub evicted: u64,
}

/// One received fragment's place: `len` bytes at `offset` in the datagram, stored at
/// `pos` in [`Assembly::buf`].
#[derive(Clone, Copy, Debug)]
struct Piece {
    offset: usize,
    len: usize,
    pos: usize,
}

impl Piece {
    /// Return the offset just past this piece (no overflow: checked on insert).
    fn end(&self) -> usize {
        self.offset + self.len
    }
}

/// A datagram being reassembled. Its vectors are reused from datagram to datagram.
#[derive(Debug)]
struct Assembly {
    /// Fragment data in arrival order; in datagram order once complete.
    buf: Vec<u8>,
    /// Received fragments, sorted by offset and disjoint.
    pieces: Vec<Piece>,
    /// The first fragment's header, once it arrived.
    header: Vec<u8>,
    /// The end the last fragment gave, once it arrived.
    end: Option<usize>,
    /// The highest end of any piece.
    max_end: usize,
    /// Whether every piece sits in `buf` at its own offset.
    in_order: bool,
    /// The ECN fields seen, one bit per codepoint (`1 << IpEcn::bits`).
    ecn_seen: u8,
    /// The first fragment's ECN field, once it arrived.
    first_ecn: IpEcn,
}

impl Assembly {
    fn new() -> Self {
        Assembly {
            buf: Vec::new(),
            pieces: Vec::new(),
            header: Vec::new(),
            end: None,
            max_end: 0,
            in_order: true,
            ecn_seen: 0,
            first_ecn: IpEcn::NotEct,
        }
    }

    /// Forget the datagram, keep the allocations.
    fn clear(&mut self) {
        self.buf.clear();
        self.pieces.clear();
        self.header.clear();
        self.end = None;
        self.max_end = 0;
        self.in_order = true;
        self.ecn_seen = 0;
        self.first_ecn = IpEcn::NotEct;
    }

    /// Return the datagram's ECN field: CE if any fragment was marked, else the first
    /// fragment's (RFC 3168 section 5.3).
    fn ecn(&self) -> IpEcn {
        if self.ecn_seen & ecn_bit(IpEcn::Ce) != 0 { IpEcn::Ce } else { self.first_ecn }
    }

    /// Return the bytes counted against [`ReassemblyConfig::max_bytes`].
    fn held(&self) -> usize {
        self.buf.len() + self.header.len()
    }

    /// Return the bytes allocated, for bounding the spare pool.
    fn capacity(&self) -> usize {
        self.buf.capacity() + self.header.capacity()
    }

    /// Return the first fragment's data, if it arrived.
    fn first_data(&self) -> Option<&[u8]> {
        let p = self.pieces.first().filter(|p| p.offset == 0)?;
        self.buf.get(p.pos..p.pos + p.len)
    }

    /// Check a fragment against what is held (RFC 5722 section 4, RFC 791 section 3.2)
    /// and return where its piece goes in `pieces`.
    fn place(&self, offset: usize, end: usize, more: bool, data: &[u8]) -> Result<usize, FragmentDrop> {
        match (more, self.end) {
            (false, Some(known)) if end != known => return Err(FragmentDrop::InconsistentEnd),
            // Every piece held claimed more to follow: none may reach this end.
            (false, None) if !self.pieces.is_empty() && self.max_end >= end => {
                return Err(FragmentDrop::InconsistentEnd);
            }
            (true, Some(known)) if end >= known => return Err(FragmentDrop::InconsistentEnd),
            _ => {}
        }
        let idx = self.pieces.partition_point(|p| p.offset < offset);
        if let Some(p) = self.pieces.get(idx)
            && p.offset == offset
            && p.len == data.len()
        {
            return match self.buf.get(p.pos..p.pos + p.len) {
                Some(held) if held == data => Err(FragmentDrop::Duplicate),
                _ => Err(FragmentDrop::Overlap),
            };
        }
        let before = idx.checked_sub(1).and_then(|i| self.pieces.get(i));
        if before.is_some_and(|p| p.end() > offset) || self.pieces.get(idx).is_some_and(|p| p.offset < end) {
            return Err(FragmentDrop::Overlap);
        }
        Ok(idx)
    }
}

#[derive(Debug)]
enum State {
    /// The slot is on the free list.
    Free,
    Assembling(Assembly),
    /// Discarded for this reason; later fragments are dropped until the deadline.
    Discarded(FragmentDrop),
}

#[derive(Debug)]
struct Slot {
    key: FragmentKey,
    /// When the first fragment arrived: eviction order.
    created: Instant,
    /// When the datagram is abandoned.
    deadline: Instant,
    state: State,
    /// Neighbours in the family's list, oldest first.
    prev: usize,
    next: usize,
}

/// A doubly linked list of slots, oldest first.
#[derive(Clone, Copy, Debug)]
struct List {
    head: usize,
    tail: usize,
}

/// Reassembles IPv4 and IPv6 datagrams from their fragments; see the [module docs](self)
/// for the call order, the rules and the bounds.
///
/// Datagrams live in a slab indexed by a hash map of keys (std's randomly keyed SipHash,
/// so keys chosen by a sender cannot collide on purpose), linked oldest first in one list
/// per family: both timeouts are fixed, so the heads are the next to expire.
#[derive(Debug)]
pub struct Reassembler {
    config: ReassemblyConfig,
    slots: Vec<Slot>,
    free: Vec<usize>,
    index: HashMap<FragmentKey, usize>,
    /// IPv4, IPv6.
    lists: [List; 2],
    /// Bytes held by all assemblies.
    held: usize,
    /// Assemblies to reuse, and their capacity (at most `max_bytes`).
    spare: Vec<Assembly>,
    spare_bytes: usize,
    /// The buffer out-of-order datagrams are put in order into; swapped, never freed.
    scratch: Vec<u8>,
    /// The datagram last returned by `insert`, recycled on the next call.
    delivered: Option<Assembly>,
    stats: ReassemblyStats,
}

impl Reassembler {
    /// Return an empty reassembler. Nothing is allocated until fragments arrive.
    pub fn new(config: ReassemblyConfig) -> Self {
        let config = ReassemblyConfig { max_datagrams: config.max_datagrams.max(1), ..config };
        Reassembler {
            config,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            lists: [List { head: NIL, tail: NIL }; 2],
            held: 0,
            spare: Vec::new(),
            spare_bytes: 0,
            scratch: Vec::new(),
            delivered: None,
            stats: ReassemblyStats::default(),
        }
    }

    /// Return the settings.
    pub fn config(&self) -> &ReassemblyConfig {
        &self.config
    }

    /// Return the bytes held for datagrams being reassembled (fragment data and kept
    /// headers; not spare buffers).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Return how many datagrams are being reassembled or held discarded.
    pub fn datagrams(&self) -> usize {
        self.index.len()
    }

    /// Return the counts of reassembled, timed out and evicted datagrams.
    pub fn stats(&self) -> &ReassemblyStats {
        &self.stats
    }

    /// Add one fragment of the datagram `key` (RFC 791 section 3.2, RFC 8200 section 4.5).
    ///
    /// Return `Ok(Some(datagram))` when it completes the datagram (borrowed until the next
    /// call), `Ok(None)` while holes remain, or why the fragment was dropped. An atomic
    /// fragment (offset 0, no more to follow) is returned at once, borrowed from `frag`,
    /// whatever else is held under its key (RFC 6946 section 4).
    pub fn insert<'a>(
        &'a mut self,
        now: Instant,
        key: FragmentKey,
        frag: Fragment<'a>,
    ) -> Result<Option<Datagram<'a>>, FragmentDrop> {
        self.recycle_delivered();
        let Fragment { offset, more, data, header, ecn } = frag;
        if offset == 0 && !more {
            log::trace!("atomic fragment {key}: {} bytes", data.len());
            return Ok(Some(Datagram { key, header, payload: data, ecn }));
        }
        if data.is_empty() {
            return reject(&key, offset, FragmentDrop::Empty);
        }
        if more && data.len() % 8 != 0 {
            return reject(&key, offset, FragmentDrop::BadLength);
        }
        let found = self.index.get(&key).copied();
        let end = match offset.checked_add(data.len()) {
            Some(end) if end <= self.max_end(&key) => end,
            _ => {
                if let Some(i) = found {
                    self.discard(i, FragmentDrop::Oversized);
                }
                return reject(&key, offset, FragmentDrop::Oversized);
            }
        };
        let need = data.len() + if offset == 0 { header.len() } else { 0 };
        let (i, idx) = match found {
            Some(i) => {
                let asm = match &self.slots[i].state {
                    State::Assembling(asm) => asm,
                    State::Discarded(why) => {
                        log::debug!("fragment dropped (frag_discarded, after {}): {key} offset {offset}", why.name());
                        return Err(FragmentDrop::Discarded);
                    }
                    State::Free => return reject(&key, offset, FragmentDrop::Discarded),
                };
                let checked = asm.place(offset, end, more, data).and_then(|idx| {
                    if ecn_mixed(asm.ecn_seen | ecn_bit(ecn)) {
                        Err(FragmentDrop::EcnMismatch)
                    } else if asm.pieces.len() >= self.config.max_fragments {
                        Err(FragmentDrop::TooManyFragments)
                    } else if asm.held() + need > self.config.max_bytes {
                        Err(FragmentDrop::MemoryLimit)
                    } else {
                        Ok(idx)
                    }
                });
                match checked {
                    Ok(idx) => {
                        self.make_room(i, need, false);
                        (i, idx)
                    }
                    Err(FragmentDrop::Duplicate) => return reject(&key, offset, FragmentDrop::Duplicate),
                    Err(reason) => {
                        self.discard(i, reason);
                        return reject(&key, offset, reason);
                    }
                }
            }
            None => {
                if need > self.config.max_bytes {
                    return reject(&key, offset, FragmentDrop::MemoryLimit);
                }
                self.make_room(NIL, need, true);
                (self.open(now, key), 0)
            }
        };
        let State::Assembling(asm) = &mut self.slots[i].state else {
            return reject(&key, offset, FragmentDrop::Discarded);
        };
        let pos = asm.buf.len();
        asm.buf.extend_from_slice(data);
        asm.in_order &= pos == offset;
        asm.pieces.insert(idx, Piece { offset, len: data.len(), pos });
        if offset == 0 {
            asm.header.clear();
            asm.header.extend_from_slice(header);
            asm.first_ecn = ecn;
        }
        asm.ecn_seen |= ecn_bit(ecn);
        asm.max_end = asm.max_end.max(end);
        if !more {
            asm.end = Some(end);
        }
        self.held += need;
        log::trace!("fragment {key}: {offset}..{end}{}", if more { " (more)" } else { "" });
        // Pieces are disjoint and within the end, so as many bytes as the end fill it.
        if asm.end != Some(asm.buf.len()) {
            return Ok(None);
        }
        if let State::Assembling(mut asm) = self.remove(i) {
            if !asm.in_order {
                let mut out = mem::take(&mut self.scratch);
                out.clear();
                for p in &asm.pieces {
                    out.extend_from_slice(asm.buf.get(p.pos..p.pos + p.len).unwrap_or_default());
                }
                self.scratch = mem::replace(&mut asm.buf, out);
            }
            self.stats.reassembled += 1;
            log::trace!("reassembled {key}: {} bytes", asm.buf.len());
            self.delivered = Some(asm);
        }
        Ok(self.delivered.as_ref().map(|asm| Datagram { key, header: &asm.header, payload: &asm.buf, ecn: asm.ecn() }))
    }

    /// Return when [`handle_timeout`](Self::handle_timeout) should next be called: the
    /// deadline of the datagram closest to running out, if any. Inlined: a host asks on
    /// every poll, and with nothing held it is two comparisons.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.lists.iter().filter(|l| l.head != NIL).map(|l| self.slots[l.head].deadline).min()
    }

    /// Drop every datagram whose time ran out by `now` (RFC 791 section 3.2, RFC 8200
    /// section 4.5), calling `on_expired` for each one that was being reassembled, with
    /// its first fragment if it had arrived (for ICMP Time Exceeded code 1). Discarded
    /// datagrams go silently (RFC 5722 section 4). Return how many were reported.
    ///
    /// `now` should not go backwards between calls to `insert`, or expiry may come late.
    pub fn handle_timeout(&mut self, now: Instant, mut on_expired: impl FnMut(Expired<'_>)) -> usize {
        self.recycle_delivered();
        let mut reported = 0;
        for family in 0..self.lists.len() {
            loop {
                let i = self.lists[family].head;
                if i == NIL || self.slots[i].deadline > now {
                    break;
                }
                let key = self.slots[i].key;
                if let State::Assembling(asm) = self.remove(i) {
                    let first = asm.first_data().map(|data| FirstFragment { header: &asm.header, data });
                    log::debug!("fragment reassembly time exceeded {key}: first fragment {}", first.is_some());
                    on_expired(Expired { key, first });
                    reported += 1;
                    self.stats.timed_out += 1;
                    self.recycle(asm);
                }
            }
        }
        reported
    }

    /// Return the highest end a fragment of `key` may reach.
    fn max_end(&self, key: &FragmentKey) -> usize {
        let overhead = if key.is_ipv6() { 0 } else { IPV4_HEADER_LEN };
        self.config.max_datagram_len.saturating_sub(overhead)
    }

    /// Evict the oldest datagrams other than `keep` until `need` more bytes fit, and, for
    /// a new datagram, a slot.
    fn make_room(&mut self, keep: usize, need: usize, new: bool) {
        while self.held + need > self.config.max_bytes || (new && self.index.len() >= self.config.max_datagrams) {
            let Some(i) = self.oldest_except(keep) else { break };
            log::debug!("fragment reassembly evicted {}", self.slots[i].key);
            self.stats.evicted += 1;
            if let State::Assembling(asm) = self.remove(i) {
                self.recycle(asm);
            }
        }
    }

    /// Return the datagram that started longest ago, other than `keep`.
    fn oldest_except(&self, keep: usize) -> Option<usize> {
        let mut oldest: Option<usize> = None;
        for list in &self.lists {
            let mut i = list.head;
            if i != NIL && i == keep {
                i = self.slots[i].next;
            }
            if i != NIL && oldest.is_none_or(|o| self.slots[i].created < self.slots[o].created) {
                oldest = Some(i);
            }
        }
        oldest
    }

    /// Start a datagram under `key` (there is room) and return its slot.
    fn open(&mut self, now: Instant, key: FragmentKey) -> usize {
        let timeout = if key.is_ipv6() { self.config.ipv6_timeout } else { self.config.ipv4_timeout };
        let asm = self.spare.pop().map_or_else(Assembly::new, |asm| {
            self.spare_bytes = self.spare_bytes.saturating_sub(asm.capacity());
            asm
        });
        let slot =
            Slot { key, created: now, deadline: now + timeout, state: State::Assembling(asm), prev: NIL, next: NIL };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        let list = &mut self.lists[key.family()];
        self.slots[i].prev = list.tail;
        match list.tail {
            NIL => list.head = i,
            tail => self.slots[tail].next = i,
        }
        list.tail = i;
        self.index.insert(key, i);
        i
    }

    /// Unlink slot `i`, free it and return what it held.
    fn remove(&mut self, i: usize) -> State {
        let Slot { key, prev, next, .. } = self.slots[i];
        let list = &mut self.lists[key.family()];
        match prev {
            NIL => list.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => list.tail = prev,
            n => self.slots[n].prev = prev,
        }
        self.index.remove(&key);
        self.free.push(i);
        let state = mem::replace(&mut self.slots[i].state, State::Free);
        if let State::Assembling(asm) = &state {
            self.held -= asm.held();
        }
        state
    }

    /// Discard the datagram in slot `i`, keeping a tombstone until its deadline.
    fn discard(&mut self, i: usize, reason: FragmentDrop) {
        let state = mem::replace(&mut self.slots[i].state, State::Discarded(reason));
        match state {
            State::Assembling(asm) => {
                log::debug!("fragment reassembly discarded {} ({})", self.slots[i].key, reason.name());
                self.held -= asm.held();
                self.recycle(asm);
            }
            other => self.slots[i].state = other,
        }
    }

    /// Keep `asm`'s allocations for a later datagram, within the spare bound.
    fn recycle(&mut self, mut asm: Assembly) {
        let capacity = asm.capacity();
        if self.spare.len() < self.config.max_datagrams && self.spare_bytes + capacity <= self.config.max_bytes {
            asm.clear();
            self.spare_bytes += capacity;
            self.spare.push(asm);
        }
    }

    fn recycle_delivered(&mut self) {
        if let Some(asm) = self.delivered.take() {
            self.recycle(asm);
        }
    }
}

/// Log and return a dropped fragment's reason.
fn reject<T>(key: &FragmentKey, offset: usize, reason: FragmentDrop) -> Result<T, FragmentDrop> {
    log::debug!("fragment dropped ({}): {key} offset {offset}", reason.name());
    Err(reason)
}

/// Return `ecn`'s bit in an [`Assembly::ecn_seen`] set.
fn ecn_bit(ecn: IpEcn) -> u8 {
    1 << ecn.bits()
}

/// Return whether a set of ECN fields mixes Not-ECT with ECT or CE (RFC 3168 section 5.3;
/// Linux's `ip_frag_ecn_table` holds 0xff, "drop", for exactly these).
fn ecn_mixed(seen: u8) -> bool {
    let not_ect = ecn_bit(IpEcn::NotEct);
    seen & not_ect != 0 && seen & !not_ect != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
    const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);

    fn v4(id: u16) -> FragmentKey {
        FragmentKey::ipv4(A4, B4, id, 17)
    }

    fn v6(id: u32) -> FragmentKey {
        FragmentKey::ipv6(A6, B6, id)
    }

    fn t(millis: u64) -> Instant {
        Instant::from_millis(millis)
    }

    /// A payload whose every byte says where it is.
    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// Cut `data` into fragments of `size` bytes (a multiple of 8).
    fn cut(data: &[u8], size: usize) -> Vec<Fragment<'_>> {
        let n = data.len().div_ceil(size);
        (0..n)
            .map(|k| {
                let offset = k * size;
                Fragment::new(offset, k + 1 < n, &data[offset..(offset + size).min(data.len())])
            })
            .collect()
    }

    /// Insert `frags` in order; return the datagram the last one completed.
    fn feed(r: &mut Reassembler, now: Instant, key: FragmentKey, frags: &[Fragment<'_>]) -> Option<Vec<u8>> {
        let (last, rest) = frags.split_last()?;
        for f in rest {
            assert_eq!(r.insert(now, key, *f), Ok(None), "fragment at {}", f.offset);
        }
        r.insert(now, key, *last).unwrap().map(|d| d.payload.to_vec())
    }

    /// An expiry as owned values: the key, and the first fragment's header and data.
    type Report = (FragmentKey, Option<(Vec<u8>, Vec<u8>)>);

    fn expire_all(r: &mut Reassembler, now: Instant) -> Vec<Report> {
        let mut out = Vec::new();
        r.handle_timeout(now, |e| out.push((e.key, e.first.map(|f| (f.header.to_vec(), f.data.to_vec())))));
        out
    }

    impl Reassembler {
        /// Check every internal invariant; panic naming the broken one.
        fn check_invariants(&self) {
            let mut held = 0;
            let mut live = 0;
            for (family, list) in self.lists.iter().enumerate() {
                let (mut i, mut prev) = (list.head, NIL);
                while i != NIL {
                    let s = &self.slots[i];
                    assert_eq!(s.prev, prev, "back link");
                    assert_eq!(s.key.family(), family, "family list");
                    assert_eq!(self.index.get(&s.key), Some(&i), "index");
                    if prev != NIL {
                        assert!(self.slots[prev].deadline <= s.deadline, "deadline order");
                    }
                    match &s.state {
                        State::Free => panic!("free slot linked"),
                        State::Discarded(reason) => assert!(reason.discards_datagram()),
                        State::Assembling(a) => {
                            held += a.held();
                            let sum: usize = a.pieces.iter().map(|p| p.len).sum();
                            assert_eq!(sum, a.buf.len(), "bytes");
                            assert!(a.pieces.len() <= self.config.max_fragments);
                            assert!(a.pieces.windows(2).all(|w| w[0].end() <= w[1].offset), "sorted, disjoint");
                            assert!(a.pieces.iter().all(|p| p.len > 0 && p.end() <= a.max_end));
                            if let Some(end) = a.end {
                                assert_eq!(a.max_end, end);
                                assert!(a.buf.len() < end, "complete but held");
                            }
                        }
                    }
                    live += 1;
                    (prev, i) = (i, s.next);
                }
                assert_eq!(list.tail, prev, "tail");
            }
            assert_eq!(live, self.index.len());
            assert_eq!(live + self.free.len(), self.slots.len());
            assert_eq!(held, self.held, "held bytes");
            assert!(self.held <= self.config.max_bytes);
            assert!(live <= self.config.max_datagrams);
            assert!(self.spare_bytes <= self.config.max_bytes);
        }
    }

    // ---------------------------------------------------------------------------------
    // Orders.
    // ---------------------------------------------------------------------------------

    #[test]
    fn in_order() {
        let data = payload(100);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(feed(&mut r, t(0), v4(1), &cut(&data, 24)), Some(data));
        assert_eq!((r.held_bytes(), r.datagrams(), r.poll_timeout()), (0, 0, None));
        assert_eq!(r.stats().reassembled, 1);
    }

    #[test]
    fn out_of_order() {
        let data = payload(100);
        let mut frags = cut(&data, 16);
        frags.swap(1, 4);
        frags.swap(0, 5);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(feed(&mut r, t(0), v4(1), &frags), Some(data));
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn reverse_order() {
        let data = payload(1000);
        let mut frags = cut(&data, 64);
        frags.reverse();
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(feed(&mut r, t(0), v6(1), &frags), Some(data));
    }

    /// What `ping -s 4000` sends over a 1500-byte MTU: 8 bytes of ICMP header and 4000 of
    /// data, in fragments of 1480, 1480 and 1048 bytes.
    #[test]
    fn ping_4000_over_1500_mtu_is_byte_exact() {
        let data = payload(4008);
        let frags = cut(&data, 1480);
        assert_eq!(
            frags.iter().map(|f| (f.offset, f.data.len(), f.more)).collect::<Vec<_>>(),
            [(0, 1480, true), (1480, 1480, true), (2960, 1048, false)]
        );
        let header = [0x45, 0, 0x05, 0xdc];
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let key = FragmentKey::ipv4(A4, B4, 0xbeef, 1);
        assert_eq!(r.insert(t(0), key, frags[2]), Ok(None));
        assert_eq!(r.insert(t(1), key, frags[0].with_header(&header)), Ok(None));
        assert_eq!(r.held_bytes(), 1048 + 1480 + header.len());
        let d = r.insert(t(2), key, frags[1].with_header(b"ignored")).unwrap().unwrap();
        assert_eq!(d, Datagram { key, header: &header, payload: &data, ecn: IpEcn::NotEct });
    }

    #[test]
    fn atomic_fragment_is_returned_alone() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v6(1), Fragment::new(0, true, &[1; 8])), Ok(None));
        let d = r.insert(t(0), v6(1), Fragment::new(0, false, b"atomic").with_header(b"h")).unwrap().unwrap();
        assert_eq!((d.payload, d.header), (&b"atomic"[..], &b"h"[..]));
        assert_eq!(r.datagrams(), 1, "the datagram in progress is untouched (RFC 6946)");
        assert_eq!(
            r.insert(t(0), v6(1), Fragment::new(8, false, b"end")).unwrap().unwrap().payload,
            b"\x01\x01\x01\x01\x01\x01\x01\x01end"
        );
    }

    #[test]
    fn buffers_are_recycled() {
        let data = payload(3000);
        let frags = cut(&data, 1000);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        r.insert(t(0), v4(1), frags[0]).unwrap();
        r.insert(t(0), v4(1), frags[1]).unwrap();
        let first = r.insert(t(0), v4(1), frags[2]).unwrap().unwrap().payload.as_ptr();
        r.insert(t(0), v4(2), frags[0]).unwrap();
        r.insert(t(0), v4(2), frags[1]).unwrap();
        let second = r.insert(t(0), v4(2), frags[2]).unwrap().unwrap().payload.as_ptr();
        assert_eq!(first, second, "the second datagram reuses the first one's buffer");
    }

    // ---------------------------------------------------------------------------------
    // Duplicates and overlaps (RFC 5722).
    // ---------------------------------------------------------------------------------

    #[test]
    fn exact_duplicate_is_ignored() {
        let data = payload(48);
        let frags = cut(&data, 16);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), frags[1]), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), frags[1]), Err(FragmentDrop::Duplicate));
        assert_eq!(r.insert(t(0), v4(1), frags[2]), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), frags[2]), Err(FragmentDrop::Duplicate), "a duplicate last fragment");
        assert_eq!(r.held_bytes(), 32);
        assert_eq!(r.insert(t(0), v4(1), frags[0]).unwrap().unwrap().payload, data);
    }

    #[test]
    fn same_range_other_bytes_is_overlap() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[1; 16])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[2; 16])), Err(FragmentDrop::Overlap));
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn partial_overlap_discards_datagram_until_timeout() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let key = v6(7);
        assert_eq!(r.insert(t(0), key, Fragment::new(0, true, &[0; 16])), Ok(None));
        assert_eq!(r.insert(t(10), key, Fragment::new(8, true, &[0; 16])), Err(FragmentDrop::Overlap));
        assert_eq!((r.held_bytes(), r.datagrams()), (0, 1), "a tombstone holds no bytes");
        // Every later fragment, even one that would complete it, is dropped.
        assert_eq!(r.insert(t(20), key, Fragment::new(16, false, &[0; 4])), Err(FragmentDrop::Discarded));
        assert_eq!(r.insert(t(20), key, Fragment::new(0, true, &[0; 16])), Err(FragmentDrop::Discarded));
        assert_eq!(r.poll_timeout(), Some(t(60_000)), "the timer of the first fragment still runs");
        assert_eq!(expire_all(&mut r, t(60_000)), [], "silently (RFC 5722)");
        assert_eq!(r.datagrams(), 0);
        // The key is free again.
        assert_eq!(feed(&mut r, t(60_001), key, &cut(&[9; 20], 16)), Some(vec![9; 20]));
    }

    #[test]
    fn overlap_with_the_fragment_before() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, true, &[0; 16])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(24, true, &[0; 16])), Err(FragmentDrop::Overlap));
    }

    #[test]
    fn fragment_inside_another_is_overlap() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[0; 64])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, true, &[0; 8])), Err(FragmentDrop::Overlap));
        // And one that covers another.
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(16, true, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(0, true, &[0; 64])), Err(FragmentDrop::Overlap));
        // And one starting at the same offset, shorter.
        assert_eq!(r.insert(t(0), v4(3), Fragment::new(0, true, &[0; 64])), Ok(None));
        assert_eq!(r.insert(t(0), v4(3), Fragment::new(0, true, &[0; 32])), Err(FragmentDrop::Overlap));
        assert_eq!(r.held_bytes(), 0);
    }

    // ---------------------------------------------------------------------------------
    // Malformed fragments and inconsistent ends.
    // ---------------------------------------------------------------------------------

    #[test]
    fn non_final_length_must_be_multiple_of_8() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[0; 16])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, true, &[0; 12])), Err(FragmentDrop::BadLength));
        assert_eq!(r.held_bytes(), 16, "the datagram goes on");
        assert!(!FragmentDrop::BadLength.discards_datagram());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, false, &[0; 12])).unwrap().unwrap().payload, [0; 28]);
    }

    #[test]
    fn empty_fragment_is_dropped() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[])), Err(FragmentDrop::Empty));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(8, false, &[])), Err(FragmentDrop::Empty));
        assert_eq!(r.datagrams(), 0);
    }

    #[test]
    fn oversized_ping_of_death() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        // IPv4: the largest payload is 65535 - 20; offset 65528 is the largest on the wire.
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(65528, false, &[0; 16])), Err(FragmentDrop::Oversized));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(8, false, &[0; 8])), Err(FragmentDrop::Discarded));
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(65512, false, &[0; 3])), Ok(None), "ends at 65515");
        assert_eq!(r.insert(t(0), v4(3), Fragment::new(65512, false, &[0; 4])), Err(FragmentDrop::Oversized));
        assert_eq!(r.insert(t(0), v4(3), Fragment::new(usize::MAX - 3, false, &[0; 8])), Err(FragmentDrop::Oversized));
        // IPv6: the fragmentable part may reach 65535.
        assert_eq!(r.insert(t(0), v6(1), Fragment::new(65528, false, &[0; 7])), Ok(None));
        assert_eq!(r.insert(t(0), v6(2), Fragment::new(65528, false, &[0; 8])), Err(FragmentDrop::Oversized));
        assert_eq!(r.held_bytes(), 3 + 7, "the far fragments cost only their bytes");
    }

    #[test]
    fn second_different_last_fragment() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, false, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(32, false, &[0; 8])), Err(FragmentDrop::InconsistentEnd));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[0; 16])), Err(FragmentDrop::Discarded));
    }

    #[test]
    fn data_beyond_known_end() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(16, false, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(24, true, &[0; 8])), Err(FragmentDrop::InconsistentEnd));
        // Reaching the end exactly while saying more follows is as wrong.
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(16, false, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(8, true, &[0; 16])), Err(FragmentDrop::InconsistentEnd));
    }

    #[test]
    fn last_fragment_within_held_data() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(32, true, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(8, false, &[0; 16])), Err(FragmentDrop::InconsistentEnd));
        // The same range as a piece that said more follows.
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(8, true, &[0; 8])), Ok(None));
        assert_eq!(r.insert(t(0), v4(2), Fragment::new(8, false, &[0; 8])), Err(FragmentDrop::InconsistentEnd));
    }

    // ---------------------------------------------------------------------------------
    // Timeouts (RFC 791 section 3.2, RFC 8200 section 4.5).
    // ---------------------------------------------------------------------------------

    #[test]
    fn timeout_reports_first_fragment_for_icmp() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.insert(t(1000), v4(1), Fragment::new(0, true, &[5; 16]).with_header(b"ipv4hdr")), Ok(None));
        assert_eq!(r.insert(t(2000), v6(1), Fragment::new(16, true, &[6; 16])), Ok(None));
        assert_eq!(r.insert(t(9000), v4(2), Fragment::new(8, false, &[7; 3])), Ok(None));
        assert_eq!(r.insert(t(20_000), v4(1), Fragment::new(32, false, &[5; 3])), Ok(None), "no extension");
        assert_eq!(r.poll_timeout(), Some(t(31_000)), "IPv4: 30 s from the first fragment");
        assert_eq!(expire_all(&mut r, t(30_999)), []);
        assert_eq!(expire_all(&mut r, t(31_000)), [(v4(1), Some((b"ipv4hdr".to_vec(), vec![5; 16])))]);
        assert_eq!(r.poll_timeout(), Some(t(39_000)));
        assert_eq!(expire_all(&mut r, t(50_000)), [(v4(2), None)], "no first fragment: no ICMP");
        assert_eq!(r.poll_timeout(), Some(t(62_000)), "IPv6: 60 s");
        assert_eq!(expire_all(&mut r, t(62_000)), [(v6(1), None)]);
        assert_eq!((r.held_bytes(), r.datagrams(), r.poll_timeout()), (0, 0, None));
        assert_eq!(r.stats().timed_out, 3);
    }

    // ---------------------------------------------------------------------------------
    // Bounds.
    // ---------------------------------------------------------------------------------

    #[test]
    fn memory_bound_evicts_oldest() {
        let config = ReassemblyConfig { max_bytes: 100, ..ReassemblyConfig::default() };
        let mut r = Reassembler::new(config);
        assert_eq!(r.insert(t(0), v4(1), Fragment::new(0, true, &[1; 40])), Ok(None));
        assert_eq!(r.insert(t(1), v6(2), Fragment::new(0, true, &[2; 40])), Ok(None));
        assert_eq!(r.insert(t(2), v4(1), Fragment::new(40, true, &[1; 16])), Ok(None), "96 bytes held");
        assert_eq!(r.insert(t(3), v4(3), Fragment::new(0, true, &[3; 8])), Ok(None), "evicts v4(1)");
        assert_eq!((r.held_bytes(), r.datagrams(), r.stats().evicted), (48, 2, 1));
        // A datagram growing evicts others, never itself.
        assert_eq!(r.insert(t(4), v4(3), Fragment::new(8, true, &[3; 56])), Ok(None), "evicts v6(2)");
        assert_eq!((r.held_bytes(), r.datagrams(), r.stats().evicted), (64, 1, 2));
        assert_eq!(r.insert(t(5), v4(3), Fragment::new(64, false, &[3; 40])), Err(FragmentDrop::MemoryLimit));
        assert_eq!((r.held_bytes(), r.datagrams()), (0, 1));
        assert_eq!(r.insert(t(6), v4(4), Fragment::new(0, true, &[3; 104])), Err(FragmentDrop::MemoryLimit));
        assert_eq!(r.datagrams(), 1, "too big alone: nothing evicted for it");
        // The kept header counts.
        assert_eq!(
            r.insert(t(7), v4(5), Fragment::new(0, true, &[3; 96]).with_header(&[0; 8])),
            Err(FragmentDrop::MemoryLimit)
        );
    }

    #[test]
    fn datagram_bound_evicts_oldest() {
        let config = ReassemblyConfig { max_datagrams: 2, ..ReassemblyConfig::default() };
        let mut r = Reassembler::new(config);
        assert_eq!(r.insert(t(0), v6(1), Fragment::new(8, false, &[1])), Ok(None));
        assert_eq!(r.insert(t(1), v4(2), Fragment::new(8, false, &[2])), Ok(None));
        assert_eq!(r.insert(t(2), v4(3), Fragment::new(8, false, &[3])), Ok(None));
        assert_eq!((r.datagrams(), r.stats().evicted), (2, 1));
        assert_eq!(r.insert(t(3), v6(1), Fragment::new(0, true, &[1; 8])), Ok(None), "v6(1) was evicted, starts anew");
        assert_eq!(
            r.insert(t(3), v4(3), Fragment::new(0, true, &[3; 8])).unwrap().unwrap().payload,
            [3, 3, 3, 3, 3, 3, 3, 3, 3]
        );
        assert_eq!(expire_all(&mut r, t(100_000)), [(v6(1), Some((vec![], vec![1; 8])))]);
    }

    #[test]
    fn fragments_per_datagram_are_bounded() {
        let config = ReassemblyConfig { max_fragments: 4, ..ReassemblyConfig::default() };
        let mut r = Reassembler::new(config);
        let data = payload(40);
        let frags = cut(&data, 8);
        for f in &frags[..4] {
            assert_eq!(r.insert(t(0), v4(1), *f), Ok(None));
        }
        assert_eq!(r.insert(t(0), v4(1), frags[3]), Err(FragmentDrop::Duplicate), "a duplicate is not a fifth");
        assert_eq!(r.insert(t(0), v4(1), frags[4]), Err(FragmentDrop::TooManyFragments));
        assert_eq!(r.held_bytes(), 0);
        assert_eq!(feed(&mut r, t(0), v4(2), &cut(&data, 16)), Some(data));
    }

    #[test]
    fn ipv4_and_ipv6_keys_are_apart() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let mapped = FragmentKey::ipv6(A4.to_ipv6_mapped(), B4.to_ipv6_mapped(), 1);
        let keys = [v4(1), FragmentKey { protocol: 6, ..v4(1) }, v6(1), mapped];
        for (k, key) in keys.iter().enumerate() {
            assert_eq!(r.insert(t(0), *key, Fragment::new(0, true, &[k as u8; 8])), Ok(None));
        }
        assert_eq!(r.datagrams(), 4);
        for (k, key) in keys.iter().enumerate().rev() {
            let last = [k as u8; 2];
            let d = r.insert(t(0), *key, Fragment::new(8, false, &last)).unwrap().unwrap();
            assert_eq!((d.key, d.payload), (*key, &[k as u8; 10][..]));
        }
        assert_eq!(v4(1).to_string(), "10.0.0.2 -> 10.0.0.1 id 0x1 proto 17");
        assert_eq!(v6(1).to_string(), "fd00::2 -> fd00::1 id 0x1");
    }

    #[test]
    fn drop_names_are_unique() {
        let mut names: Vec<_> = FragmentDrop::ALL.iter().map(|d| d.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FragmentDrop::ALL.len());
    }

    // ---------------------------------------------------------------------------------
    // Pseudo-random trains (no proptest in this crate: a seeded xorshift instead).
    // ---------------------------------------------------------------------------------

    /// Marsaglia's xorshift64.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }

        fn usize(&mut self, n: usize) -> usize {
            self.below(n as u64) as usize
        }

        fn one_in(&mut self, n: u64) -> bool {
            self.below(n) == 0
        }
    }

    /// Fragments on a few colliding keys, mostly from a per-key plan (a datagram's length,
    /// fragment size and bytes, replaced now and then as if the id were reused), otherwise
    /// arbitrary or corrupted: no panic, the invariants and bounds hold after every call,
    /// completed datagrams have the length their last fragment gave, every drop reason and
    /// outcome is reached, and expiry frees everything.
    #[test]
    fn random_fragments_never_panic_and_memory_returns_to_zero() {
        let bytes: Vec<u8> = (0..32768u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let configs = [
            ReassemblyConfig { max_bytes: 12 * 1024, max_datagrams: 12, max_fragments: 16, ..Default::default() },
            ReassemblyConfig::default(),
            ReassemblyConfig {
                max_bytes: 0,
                max_datagrams: 0,
                max_fragments: 0,
                max_datagram_len: 0,
                ..Default::default()
            },
        ];
        for (seed, config) in configs.into_iter().enumerate() {
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ seed as u64);
            let keys: Vec<FragmentKey> =
                (0..6u16).flat_map(|id| [v6(id.into()), FragmentKey::ipv4(A4, B4, id, 6), v4(id)]).collect();
            // (length, fragment size, where the bytes start)
            let plan = |rng: &mut XorShift| (1 + rng.usize(20_000), 8 * (1 + rng.usize(400)), rng.usize(8192));
            let mut plans: Vec<_> = keys.iter().map(|_| plan(&mut rng)).collect();
            let mut r = Reassembler::new(config);
            let mut now = Instant::ZERO;
            let (mut complete, mut expired) = (0, 0);
            let mut seen = [false; FragmentDrop::ALL.len()];
            for _ in 0..40_000 {
                now += Duration::from_millis(rng.below(100));
                // A few hot keys, so that datagrams live long enough to meet every rule.
                let k = if rng.one_in(4) { rng.usize(keys.len()) } else { rng.usize(4) };
                if rng.one_in(300) {
                    plans[k] = plan(&mut rng);
                }
                let (len, size, at) = plans[k];
                let piece = rng.usize(len.div_ceil(size));
                let mut offset = piece * size;
                let mut data = &bytes[at + offset..at + len.min(offset + size)];
                let mut more = offset + size < len;
                match rng.below(40) {
                    0 => {
                        offset = match rng.below(4) {
                            0 => rng.usize(usize::MAX),
                            1 => 65528 - 8 * rng.usize(4),
                            2 => rng.usize(3000),
                            _ => 8 * rng.usize(300),
                        };
                        let n = if rng.one_in(3) { rng.usize(2000) } else { 8 * rng.usize(200) };
                        let start = rng.usize(bytes.len() - n);
                        data = &bytes[start..start + n];
                    }
                    1 => more = !more,
                    2 => offset += 8,
                    3 => data = &bytes[at + 1 + piece * size..][..data.len()],
                    4 => data = &data[..data.len() / 2],
                    _ => {}
                }
                let header = &bytes[..rng.usize(61)];
                // ECT(0) as a sender that asks for ECN, now and then a CE mark or a
                // fragment whose ECT a broken path cleared.
                let ecn = match rng.below(100) {
                    0 => IpEcn::NotEct,
                    1..=5 => IpEcn::Ce,
                    _ => IpEcn::Ect0,
                };
                let frag = Fragment::new(offset, more, data).with_header(header).with_ecn(ecn);
                match r.insert(now, keys[k], frag) {
                    Ok(Some(d)) if offset == 0 && !more => assert_eq!(d.payload, data, "atomic"),
                    Ok(Some(d)) => {
                        assert!(d.payload.len() >= offset + data.len(), "the datagram holds this fragment");
                        assert_eq!(d.key, keys[k]);
                        complete += 1;
                    }
                    Ok(None) => {}
                    Err(reason) => {
                        if let Some(i) = FragmentDrop::ALL.iter().position(|&d| d == reason) {
                            seen[i] = true;
                        }
                    }
                }
                if rng.one_in(50) {
                    expired += r.handle_timeout(now, |e| assert!(e.first.is_none_or(|f| !f.data.is_empty())));
                    assert!(r.poll_timeout().is_none_or(|next| next > now));
                }
                r.check_invariants();
            }
            if seed == 0 {
                assert_eq!(seen, [true; FragmentDrop::ALL.len()], "every reason reached");
            }
            match seed {
                0 => assert!(complete > 100 && r.stats().evicted > 100, "{:?}", r.stats()),
                1 => assert!(complete > 100 && expired > 100, "{:?}", r.stats()),
                _ => assert_eq!(complete, 0),
            }
            assert_eq!(r.stats().reassembled, complete);
            assert_eq!(r.stats().timed_out, expired as u64);
            r.handle_timeout(now + Duration::from_secs(61), |_| {});
            r.check_invariants();
            assert_eq!((r.held_bytes(), r.datagrams(), r.poll_timeout()), (0, 0, None));
        }
    }

    /// Well-formed trains, shuffled, with duplicates, several interleaved: every one
    /// reassembles byte-exact, exactly when its last hole fills.
    #[test]
    fn random_clean_trains_reassemble_byte_exact() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let mut now = Instant::ZERO;
        let mut fragmented = 0;
        for batch in 0..500u32 {
            let trains: Vec<(FragmentKey, Vec<u8>)> = (0..4u32)
                .map(|k| {
                    let id = batch * 4 + k;
                    let key = if rng.one_in(2) { v6(id) } else { v4(id as u16) };
                    let data: Vec<u8> = (0..1 + rng.usize(9000)).map(|_| rng.next() as u8).collect();
                    (key, data)
                })
                .collect();
            let mut queue: Vec<(usize, Fragment<'_>)> = Vec::new();
            for (k, (_, data)) in trains.iter().enumerate() {
                let least = data.len().div_ceil(64).next_multiple_of(8);
                let size = (8 * (1 + rng.usize(185))).max(least);
                fragmented += u64::from(data.len() > size);
                for f in cut(data, size) {
                    queue.push((k, f));
                    if rng.one_in(5) {
                        queue.push((k, f));
                    }
                }
            }
            for i in (1..queue.len()).rev() {
                queue.swap(i, rng.usize(i + 1));
            }
            let mut done = [false; 4];
            for (k, f) in queue {
                if done[k] {
                    continue;
                }
                now += Duration::from_micros(rng.below(100));
                let (key, data) = &trains[k];
                match r.insert(now, *key, f) {
                    Ok(Some(d)) => {
                        assert_eq!(d.payload, &data[..], "train {k} of batch {batch}");
                        done[k] = true;
                    }
                    Ok(None) | Err(FragmentDrop::Duplicate) => {}
                    Err(e) => panic!("train {k} of batch {batch}: {e}"),
                }
            }
            assert_eq!(done, [true; 4]);
            assert_eq!((r.held_bytes(), r.datagrams()), (0, 0));
        }
        assert!(fragmented > 1500);
        assert_eq!(r.stats().reassembled, fragmented, "the others were atomic");
    }

    // ---- ECN (RFC 3168 section 5.3) ----

    /// Reassemble three fragments with ECN fields `fields` (first to last, sent in
    /// reverse order so the first fragment's field is not simply the last one seen);
    /// return the datagram's field or why the last insert failed.
    fn ecn_of(fields: [IpEcn; 3]) -> Result<IpEcn, FragmentDrop> {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let data = payload(24);
        let frags: Vec<Fragment<'_>> = cut(&data, 8).into_iter().zip(fields).map(|(f, e)| f.with_ecn(e)).collect();
        for f in frags[1..].iter().rev() {
            match r.insert(t(0), v4(1), *f) {
                Ok(None) => {}
                Err(reason) => return Err(reason),
                Ok(Some(_)) => panic!("complete too early"),
            }
        }
        let datagram = r.insert(t(0), v4(1), frags[0])?.expect("complete");
        assert_eq!(datagram.payload, &data[..]);
        Ok(datagram.ecn)
    }

    #[test]
    fn a_ce_mark_on_any_fragment_marks_the_datagram() {
        use IpEcn::*;
        assert_eq!(ecn_of([Ect0, Ect0, Ect0]), Ok(Ect0));
        assert_eq!(ecn_of([NotEct, NotEct, NotEct]), Ok(NotEct));
        for ce_at in 0..3 {
            let mut fields = [Ect0; 3];
            fields[ce_at] = Ce;
            assert_eq!(ecn_of(fields), Ok(Ce), "CE on fragment {ce_at}");
        }
        // ECT(0) with ECT(1): the first fragment's field (Linux's table leaves it).
        assert_eq!(ecn_of([Ect1, Ect0, Ect0]), Ok(Ect1));
        assert_eq!(ecn_of([Ect0, Ect1, Ce]), Ok(Ce));
    }

    #[test]
    fn not_ect_mixed_with_ect_or_ce_discards_the_datagram() {
        use IpEcn::*;
        for fields in [[NotEct, Ect0, Ect0], [Ect0, NotEct, Ect0], [Ect0, Ect0, NotEct], [Ce, NotEct, NotEct]] {
            assert_eq!(ecn_of(fields), Err(FragmentDrop::EcnMismatch), "{fields:?}");
        }
        // The datagram stays discarded: a copy of its first fragment is refused too.
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let data = payload(16);
        let frags = cut(&data, 8);
        assert_eq!(r.insert(t(0), v6(9), frags[1].with_ecn(Ect0)), Ok(None));
        assert_eq!(r.insert(t(0), v6(9), frags[0]), Err(FragmentDrop::EcnMismatch));
        assert_eq!(r.insert(t(0), v6(9), frags[0].with_ecn(Ect0)), Err(FragmentDrop::Discarded));
        r.check_invariants();
    }
}
