//! The `Segment` value: one TCP segment with its meaning made explicit.
//!
//! Parsing and emitting live in [`crate::wire`]; this file holds the types.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use crate::options::TcpOptions;
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

#[cfg(test)]
mod tests {
    use super::*;

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
