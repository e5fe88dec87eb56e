//! Replies for segments that match no connection (RFC 9293 3.10.7.1).

use crate::seq::SeqNum;
use crate::wire::{Flags, Segment};

/// Return the reset to send for `seg`, which arrived for no connection (CLOSED), or
/// `None` if it must be dropped silently (it is itself a reset).
///
/// RFC 9293 3.10.7.1: if the ACK bit is off, `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`;
/// if it is on, `<SEQ=SEG.ACK><CTL=RST>`. Ports are swapped so the result goes back.
pub fn reset_for(seg: &Segment<'_>) -> Option<Segment<'static>> {
    if seg.flags.rst() {
        return None;
    }
    let reply = Segment { src_port: seg.dst_port, dst_port: seg.src_port, ..Segment::EMPTY };
    Some(if seg.flags.ack() {
        Segment { seq: seg.ack, flags: Flags::RST, ..reply }
    } else {
        Segment { seq: SeqNum(0), ack: seg.seq + seg.seg_len(), flags: Flags::RST | Flags::ACK, ..reply }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYN: Segment<'static> =
        Segment { src_port: 40000, dst_port: 80, seq: SeqNum(1000), flags: Flags::SYN, ..Segment::EMPTY };

    #[test]
    fn syn_to_closed_port_gets_rst_ack_covering_the_syn() {
        let rst = reset_for(&SYN).unwrap();
        assert_eq!((rst.src_port, rst.dst_port), (80, 40000));
        assert_eq!(rst.flags, Flags::RST | Flags::ACK);
        assert_eq!(rst.seq, SeqNum(0));
        assert_eq!(rst.ack, SeqNum(1001));
    }

    #[test]
    fn data_without_ack_is_covered_whole() {
        let seg = Segment { flags: Flags::FIN, payload: b"hello", ..SYN };
        assert_eq!(reset_for(&seg).unwrap().ack, SeqNum(1006));
    }

    #[test]
    fn ack_gets_rst_at_its_ack_number() {
        let seg = Segment { flags: Flags::ACK, ack: SeqNum(77), ..SYN };
        let rst = reset_for(&seg).unwrap();
        assert_eq!(rst.flags, Flags::RST);
        assert_eq!(rst.seq, SeqNum(77));
    }

    #[test]
    fn rst_is_never_answered() {
        assert_eq!(reset_for(&Segment { flags: Flags::RST | Flags::ACK, ..SYN }), None);
    }
}
