//! Capture notes: what each frame meant, in words, for the recording's comments.

use std::fmt::Write as _;

use bypass_device::capture::Direction;
use bypass_tcp::{Connection, Segment, State};

/// Append a description of `seg` to `note`: direction, flags, sequence and acknowledgment
/// numbers relative to the connection's initial ones, length, window in bytes, options, and
/// the state change it caused (or the state it was sent in).
pub(super) fn note_segment(note: &mut String, seg: &Segment<'_>, conn: &Connection, dir: Direction, before: State) {
    let sp = conn.sequence_space();
    // The window of a SYN is never scaled (RFC 7323 2.2).
    let shift = |s: u8| if seg.flags.syn() { 0 } else { s };
    let (seq, ack, window) = match dir {
        Direction::In => (seg.seq - sp.irs, seg.ack - sp.iss, (seg.window as u32) << shift(sp.snd_wscale)),
        Direction::Out => (seg.seq - sp.iss, seg.ack - sp.irs, (seg.window as u32) << shift(sp.rcv_wscale)),
    };
    let arrow = match dir {
        Direction::In => "in ",
        Direction::Out => "out",
    };
    let _ = write!(note, "{arrow} [{}] seq={seq}", seg.flags);
    if seg.flags.ack() {
        let _ = write!(note, " ack={ack}");
    }
    let _ = write!(note, " len={} win={window}", seg.payload.len());
    if !seg.options.is_empty() {
        let _ = write!(note, " {:?}", seg.options);
    }
    let after = conn.state();
    if before == after {
        let _ = write!(note, " | {after}");
    } else {
        let _ = write!(note, " | {before} -> {after}");
    }
}

/// Append our sender's state to `note`: congestion window, RTO, and what kind of send it was.
pub(super) fn note_send(note: &mut String, conn: &Connection, kind: bypass_tcp::TransmitKind) {
    use bypass_tcp::TransmitKind as K;
    let stats = conn.stats();
    let _ = write!(note, " | cwnd={} rto={}ms", stats.cwnd, stats.rto.as_millis());
    let what = match kind {
        K::Retransmission => " retransmission",
        K::WindowProbe => " zero-window probe",
        K::KeepAlive => " keep-alive probe",
        K::Reset => " reset",
        K::Syn | K::Data | K::Ack => "",
    };
    note.push_str(what);
}
