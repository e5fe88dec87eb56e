//! The timestamps option in use (RFC 7323): our clock, TS.Recent, PAWS, and the echo
//! that times a retransmission.
//!
//! Invariant: while `ok`, every segment we send but a RST carries TSval = our clock and
//! TSecr = `recent` (RFC 7323 3.2), and `recent` only moves forward in timestamp order
//! (4.3, 5.3 R3).

use std::time::Duration;

use crate::seq::SeqNum;
use crate::time::Instant;
use crate::wire::Timestamps;

/// How long TS.Recent stays a reference without being renewed (RFC 7323 5.5: 24 days).
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// The bytes the option takes in every segment, padded (RFC 7323 Appendix A).
const OPTION_LEN: usize = 12;

/// Return whether timestamp `a` is older than `b` in modular order (RFC 7323 5.2).
pub(crate) fn older(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The timestamp state of a connection.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Timestamping {
    /// Both SYNs carried the option: every segment carries it from now on.
    ok: bool,
    /// TS.Recent: the peer's timestamp to echo (RFC 7323 4.3).
    recent: u32,
    /// When TS.Recent was last set (it goes stale after 24 days idle, RFC 7323 5.5).
    recent_at: Instant,
    /// Last.ACK.sent: the acknowledgment number of our last ACK (RFC 7323 4.3).
    last_ack_sent: SeqNum,
    /// Added to the clock in our TSval (RFC 7323 5.4).
    offset: u32,
    /// The TSecr of the segment being processed, when it echoes one of ours (RTTM).
    seg_tsecr: Option<u32>,
}

impl Timestamping {
    /// Return whether timestamps are in use (both SYNs carried the option).
    pub(crate) fn enabled(&self) -> bool {
        self.ok
    }

    /// Return TS.Recent, the peer's timestamp we echo.
    pub(crate) fn recent(&self) -> u32 {
        self.recent
    }

    /// Set the offset added to our clock in TSval (RFC 7323 5.4), once per connection.
    pub(crate) fn set_offset(&mut self, offset: u32) {
        self.offset = offset;
    }

    /// Note that our last ACK acknowledged `ack` (Last.ACK.sent, RFC 7323 4.3).
    pub(crate) fn ack_sent(&mut self, ack: SeqNum) {
        self.last_ack_sent = ack;
    }

    /// Take the TSecr of the segment being processed (`None` when it carries no
    /// timestamps or no ACK; RFC 7323 3.2), for [`echo_rtt`](Self::echo_rtt).
    pub(crate) fn set_seg_tsecr(&mut self, tsecr: Option<u32>) {
        self.seg_tsecr = tsecr;
    }

    /// Return the TSecr of the segment being processed, while timestamps are in use (for
    /// Eifel's test, RFC 3522).
    pub(crate) fn seg_tsecr(&self) -> Option<u32> {
        self.seg_tsecr.filter(|_| self.ok)
    }

    /// Return the TSval a segment sent at `now` carries, while timestamps are in use.
    pub(crate) fn tsval(&self, now: Instant) -> Option<u32> {
        self.ok.then(|| self.clock(now))
    }
    /// Return our timestamp clock (TSval) at `now`: milliseconds plus the connection's offset
    /// (RFC 7323 5.4: a tick of 1 ms to 1 s; Linux ticks in milliseconds too).
    pub(crate) fn clock(&self, now: Instant) -> u32 {
        ((now.as_micros() / 1000) as u32).wrapping_add(self.offset)
    }

    /// Return the bytes of options every data segment carries for timestamps.
    pub(crate) fn option_len(&self) -> usize {
        if self.ok { OPTION_LEN } else { 0 }
    }

    /// Return the option a segment other than SYN carries now, if timestamps are in use.
    pub(crate) fn option(&self, now: Instant) -> Option<Timestamps> {
        self.ok.then(|| Timestamps { tsval: self.clock(now), tsecr: self.recent })
    }

    /// Take the peer's SYN option (`enabled`: we offer timestamps): timestamps are in use
    /// when both sides send them, and TS.Recent starts at its TSval (RFC 7323 3.2, 4.3).
    pub(crate) fn negotiate(&mut self, syn: Option<Timestamps>, enabled: bool, now: Instant) {
        match syn {
            Some(ts) if enabled => {
                self.ok = true;
                self.recent = ts.tsval;
                self.recent_at = now;
            }
            _ => self.ok = false,
        }
    }

    /// Return whether PAWS rejects a segment with `tsval` as an old duplicate (RFC 7323 5.3
    /// R1-R2): older than TS.Recent, unless TS.Recent has gone stale (5.5).
    pub(crate) fn paws_rejects(&self, now: Instant, tsval: u32) -> bool {
        let fresh = now.saturating_duration_since(self.recent_at) < PAWS_IDLE;
        fresh && older(tsval, self.recent)
    }

    /// Return whether a segment with the timestamps option `ts` passes PAWS for certain
    /// (RFC 7323 5.3 R1-R2): timestamps are off, or it carries a TSval not older than
    /// TS.Recent. `false` also for a segment PAWS would still take (TS.Recent gone stale)
    /// or drop for its missing option (3.2): header prediction leaves both to the general
    /// path.
    #[inline]
    pub(crate) fn passes_paws(&self, ts: Option<Timestamps>) -> bool {
        match ts {
            Some(ts) => !self.ok || !older(ts.tsval, self.recent),
            None => !self.ok,
        }
    }

    /// Return whether `tsval` is newer than TS.Recent (RFC 6191's test for a new
    /// incarnation in TIME-WAIT).
    pub(crate) fn is_newer(&self, tsval: u32) -> bool {
        (tsval.wrapping_sub(self.recent) as i32) > 0
    }

    /// RFC 7323 4.3 (2), and R3 of 5.3: an acceptable segment at `seq` that starts at or
    /// before the last acknowledgment we sent updates TS.Recent, so we echo the timestamp
    /// of the oldest segment our next ACK acknowledges.
    pub(crate) fn update_recent(&mut self, now: Instant, seq: SeqNum, tsval: u32) {
        if self.ok && !seq.after(self.last_ack_sent) && !older(tsval, self.recent) {
            self.recent = tsval;
            self.recent_at = now;
        }
    }

    /// Return the round trip the echo of the segment being processed measures (RTTM, RFC
    /// 7323 4.1), if it echoes one of ours. An echo from the future is not ours (or the
    /// clock wrapped); an age of 0 ms says only "under a millisecond" and gives none.
    pub(crate) fn echo_rtt(&self, now: Instant) -> Option<Duration> {
        let ecr = self.seg_tsecr.filter(|_| self.ok)?;
        match self.clock(now).wrapping_sub(ecr) {
            ms @ 1..0x8000_0000 => Some(Duration::from_millis(u64::from(ms))),
            _ => None,
        }
    }
}
