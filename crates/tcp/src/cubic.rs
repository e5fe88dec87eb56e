//! CUBIC congestion control (RFC 9438), with HyStart++ (RFC 9406, `hystart.rs`) in the
//! first slow start.
//!
//! [`Cubic`] implements [`Controller`]; `controller.rs` says when each call comes. Where
//! each rule of the RFCs lives:
//!
//! | rule | where |
//! |---|---|
//! | slow start, RFC 5681 3.1 crediting every byte an ACK covers up to ssthresh (Linux's `tcp_slow_start`; no RFC 3465 L) | [`Cubic::slow_start`] |
//! | HyStart++ in the initial slow start, exit to CSS and to congestion avoidance (RFC 9406 4.2) | [`Cubic::slow_start`], `hystart.rs` |
//! | W_cubic(t), K, t_epoch, cwnd_epoch (RFC 9438 4.2) | [`Cubic::begin_epoch`], [`Epoch::w_cubic`] |
//! | Reno-friendly region, W_est (4.3); concave and convex regions, target in [cwnd, 1.5 cwnd] (4.4, 4.5) | [`Cubic::congestion_avoidance`] |
//! | multiplicative decrease (4.6), fast convergence (4.7) | [`Cubic::reduce`] |
//! | timeout (4.8) | [`Controller::on_rto`] |
//! | spurious congestion events (4.9) | [`Cubic::snapshot`], [`Controller::on_spurious`] |
//! | W_max undefined after HyStart++ (4.10) and after a timeout (4.8): K = 0, W_max = cwnd_epoch | [`Cubic::begin_epoch`] |
//! | no growth while application-limited, and t excludes that time (4.2, 5.8; RFC 7661) | [`Cubic::congestion_avoidance`] |
//! | restart after idle: cwnd = min(cwnd, IW) and a new epoch (RFC 5681 4.1) | [`Controller::on_idle_restart`] |
//!
//! Windows are bytes (RFC 9438 section 4.1 allows it, "factoring in the SMSS wherever
//! necessary"); times come from [`AckInfo::now`]. ssthresh, W_max and cwnd_prior are
//! integer bytes (beta_cubic = 7/10 and the fast-convergence factor (1 + beta_cubic) / 2 =
//! 17/20 are exact fractions). The curve itself is `f64`: K needs a cube root, which
//! `f64::cbrt` gives to within an ulp, where Linux (`tcp_cubic.c`) keeps a fixed-point
//! table and Newton step only because the kernel may not use the FPU; a userspace stack
//! may, and at a few floating-point operations per ACK it costs nothing measurable. The
//! fractions of a byte the curve grows by are carried in the epoch, not lost.
//!
//! Two readings of the RFC to know about:
//! - RFC 9438 sections 4.4 and 4.5 grow cwnd by (target - cwnd) / cwnd "for each received
//!   new ACK"; here the step is scaled by the segments the ACK delivered (as W_est's is in
//!   section 4.3, and as Linux does), so that delayed or stretch ACKs follow the same curve
//!   in time. One ACK never takes cwnd past target.
//! - ssthresh = cwnd * beta_cubic, not FlightSize * beta_cubic: section 4.6 allows cwnd when
//!   cwnd cannot grow while the flight is smaller than it, and [`AckInfo::app_limited`]
//!   ACKs do not grow it (the `in_flight` arguments are therefore unused).

use std::time::Duration;

use crate::controller::{AckInfo, Controller, initial_window};
use crate::hystart::{HyStart, SlowStartAck};
use crate::time::Instant;

/// C: the aggressiveness of the curve, in segments per second cubed (RFC 9438 section 4.1.1,
/// "C SHOULD be set to 0.4", section 5.1).
const C: f64 = 0.4;
/// beta_cubic = 7/10, the multiplicative decrease factor (RFC 9438 section 4.1.1, 4.6).
const BETA_NUM: u64 = 7;
/// Denominator of beta_cubic.
const BETA_DEN: u64 = 10;
/// beta_cubic as a float, for alpha_cubic.
const BETA_CUBIC: f64 = BETA_NUM as f64 / BETA_DEN as f64;
/// alpha_cubic = 3 * (1 - beta_cubic) / (1 + beta_cubic) = 9/17: the Reno-friendly additive
/// increase in segments per RTT (RFC 9438 section 4.3, Figure 4).
const ALPHA_CUBIC: f64 = 3.0 * (1.0 - BETA_CUBIC) / (1.0 + BETA_CUBIC);
/// The most a target may exceed cwnd by, as a factor (RFC 9438 section 4.2: target <=
/// 1.5 * cwnd, below slow start's doubling).
const MAX_TARGET_FACTOR: f64 = 1.5;

/// One congestion avoidance stage: the curve cwnd follows (RFC 9438 section 4.2) and the
/// Reno estimate beside it (section 4.3).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Epoch {
    /// t_epoch: when the stage began, moved later by the time spent application-limited.
    start: Instant,
    /// K: seconds from `start` until the curve reaches `w_max`.
    k: f64,
    /// W_max of this curve, bytes: its plateau.
    w_max: f64,
    /// W_est: Reno's window had it been in charge since `start`, bytes.
    w_est: f64,
    /// Growth already earned but less than a byte, added with the next step.
    carry: f64,
}

impl Epoch {
    /// Return W_cubic(t) = C * (t - K)^3 + W_max in bytes for segments of `smss` bytes
    /// (RFC 9438 section 4.2, Figure 1), `t` in seconds since t_epoch.
    fn w_cubic(&self, t: f64, smss: f64) -> f64 {
        C * smss * (t - self.k).powi(3) + self.w_max
    }
}

/// What RFC 9438 section 4.9 saves before a reduction, to restore if it was spurious.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Saved {
    /// prior_cwnd.
    cwnd: u32,
    /// prior_ssthresh.
    ssthresh: u32,
    /// prior_W_max.
    w_max: Option<u32>,
    /// cwnd_prior as it was (for alpha_cubic's switch).
    cwnd_prior: u32,
    /// prior_K, prior_t_epoch and prior_W_est, with the rest of the stage.
    epoch: Option<Epoch>,
}

/// CUBIC with HyStart++ for one connection.
///
/// Call it as [`Controller`] says (`controller.rs`): [`Cubic::new`] with the default SMSS,
/// `set_mss` once the peer's MSS is known, `on_ack` for every ACK that delivers data outside
/// a recovery, `on_loss` / `set_cwnd` / `on_recovery_end` around a recovery, `on_rto`,
/// `on_syn_timeout`, `on_idle_restart` and `on_spurious` as they happen. Beyond the trait,
/// CUBIC reads from each [`AckInfo`]: `now` (the curve is a function of time, so pass the
/// ACK's arrival time, monotonic), `rtt` (smoothed here for W_cubic(t + RTT), and HyStart++'s
/// samples), `in_flight` (HyStart++'s rounds) and `app_limited` (no growth, and the curve's
/// clock stops).
///
/// `repr(C)`, its first three fields `NewReno`'s in the same order (see
/// `CongestionControl`).
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Cubic {
    /// Sender maximum segment size.
    smss: u32,
    /// Congestion window, bytes (never below one segment).
    cwnd: u32,
    /// Slow start threshold, bytes (`u32::MAX`, "arbitrarily high", until the first
    /// reduction or HyStart++'s exit).
    ssthresh: u32,
    /// W_max, bytes: cwnd before the last reduction, lowered by fast convergence (RFC 9438
    /// sections 4.6, 4.7). `None` while undefined: before any congestion event, and from a
    /// timeout to the congestion avoidance that follows it (section 4.8).
    w_max: Option<u32>,
    /// cwnd_prior, bytes: cwnd when ssthresh was last set (RFC 9438 section 4.1.2), where
    /// alpha_cubic becomes 1.
    cwnd_prior: u32,
    /// The congestion avoidance stage under way; `None` in slow start, in a recovery, and
    /// from an idle restart to the next ACK.
    epoch: Option<Epoch>,
    /// Smoothed RTT of the samples seen (RFC 6298's 1/8 gain): the RTT of W_cubic(t + RTT).
    srtt: Option<Duration>,
    /// When the last ACK arrived (to measure application-limited time).
    last_ack: Option<Instant>,
    /// HyStart++, consulted while ssthresh has its initial value.
    hystart: HyStart,
    /// Bytes of CSS growth below CSS_GROWTH_DIVISOR, carried to the next ACK.
    css_carry: u32,
    /// Whether any data has been delivered (freezes the IW for `set_mss`).
    delivered_any: bool,
    /// Whether the SYN or SYN-ACK was retransmitted (RFC 5681 section 3.1: IW = 1 SMSS).
    syn_lost: bool,
    /// Whether a recovery began (`on_loss`) and has not ended.
    in_recovery: bool,
    /// Whether the timer fired and nothing was delivered since (RFC 5681 section 3.1:
    /// ssthresh is reduced on the first timeout of a series only).
    timer_retransmitting: bool,
    /// The state before the last reduction (RFC 9438 section 4.9).
    saved: Option<Saved>,
}

impl Cubic {
    /// Return a controller for a sender with maximum segment size `smss`: cwnd = IW (RFC
    /// 6928), ssthresh "arbitrarily high" (`u32::MAX`, RFC 5681 section 3.1), W_max
    /// undefined, HyStart++ waiting for its first round.
    ///
    /// An `smss` of 0 is treated as 1.
    pub(crate) fn new(smss: u32) -> Self {
        let smss = smss.max(1);
        Cubic {
            smss,
            cwnd: initial_window(smss, false),
            ssthresh: u32::MAX,
            w_max: None,
            cwnd_prior: 0,
            epoch: None,
            srtt: None,
            last_ack: None,
            hystart: HyStart::new(),
            css_carry: 0,
            delivered_any: false,
            syn_lost: false,
            in_recovery: false,
            timer_retransmitting: false,
            saved: None,
        }
    }

    /// Grow cwnd in slow start (RFC 5681 section 3.1) by every byte the ACK newly covers, up
    /// to ssthresh, as Linux's `tcp_slow_start` does, under HyStart++ while ssthresh has its
    /// initial value (RFC 9406 sections 4.2, 4.3); return the bytes left over past ssthresh,
    /// for congestion avoidance.
    ///
    /// RFC 3465 caps the growth at L = 2 SMSS per ACK (SMSS after a timeout, section 2.3),
    /// RFC 9406 at L = 8 SMSS for a sender that does not pace: either throttles slow start
    /// wherever ACKs are coalesced (GRO, LRO, ACK thinning: one ACK for tens of segments).
    /// Linux has no cap (and none after a timeout: `tcp_cong_avoid` runs in the Loss state
    /// too), and neither has this; ssthresh bounds what one ACK can release.
    fn slow_start(&mut self, ack: &AckInfo) -> u32 {
        let hystart = (self.ssthresh == u32::MAX).then(|| {
            self.hystart.on_ack(SlowStartAck {
                now: ack.now,
                delivered: ack.delivered,
                in_flight: ack.in_flight,
                rtt: ack.rtt,
                min_rtt: ack.min_rtt,
                cwnd_segments: self.cwnd / self.smss,
            })
        });
        let mut rest = 0;
        if !ack.app_limited {
            let bytes = ack.delivered;
            let growth = match hystart {
                // CSS: cwnd += N / CSS_GROWTH_DIVISOR (its divisor stays, RFC 9406 4.2).
                Some(h) if h.growth_divisor > 1 => {
                    let bytes = bytes.saturating_add(self.css_carry);
                    self.css_carry = bytes % h.growth_divisor;
                    bytes / h.growth_divisor
                }
                _ => bytes,
            };
            let grown = self.cwnd.saturating_add(growth).min(self.ssthresh);
            if growth == bytes {
                rest = bytes - (grown - self.cwnd);
            }
            self.cwnd = grown;
        }
        if hystart.is_some_and(|h| h.enter_avoidance) {
            // RFC 9406 section 4.2: "enter congestion avoidance by setting the ssthresh to
            // the current cwnd". RFC 9438 section 4.10: cwnd_prior = cwnd, W_max undefined,
            // so the stage begins with K = 0 and W_max = cwnd.
            self.ssthresh = self.cwnd;
            self.cwnd_prior = self.cwnd;
            self.w_max = None;
            self.css_carry = 0;
            self.begin_epoch(ack.now);
        }
        rest
    }

    /// Grow cwnd in congestion avoidance for one ACK (RFC 9438 sections 4.2 to 4.5);
    /// `previous_ack` is when the ACK before it arrived.
    fn congestion_avoidance(&mut self, ack: &AckInfo, previous_ack: Option<Instant>) {
        if ack.app_limited {
            // RFC 9438 section 5.8: "CUBIC does not increase its congestion window if a flow
            // is application limited", and section 4.2: t "MUST NOT include periods during
            // which cwnd has not been updated due to application-limited behavior". Move
            // t_epoch on by the time since the last ACK, as Linux's CA_EVENT_TX_START moves
            // epoch_start by the idle time.
            if let (Some(epoch), Some(previous)) = (self.epoch.as_mut(), previous_ack) {
                epoch.start = (epoch.start + (ack.now - previous)).min(ack.now);
            }
            return;
        }
        let mut epoch = match self.epoch {
            Some(epoch) => epoch,
            None => self.begin_epoch(ack.now),
        };
        let smss = f64::from(self.smss);
        let cwnd = f64::from(self.cwnd);
        let acked = f64::from(ack.delivered);
        let t = (ack.now - epoch.start).as_secs_f64();
        let rtt = self.srtt.or(ack.min_rtt).unwrap_or(Duration::ZERO).as_secs_f64();

        // Section 4.3, Figure 4: W_est += alpha_cubic * segments_acked / cwnd, with
        // alpha_cubic = 1 once W_est >= cwnd_prior (in bytes: times SMSS, over cwnd bytes).
        let alpha = if epoch.w_est >= f64::from(self.cwnd_prior) { 1.0 } else { ALPHA_CUBIC };
        epoch.w_est += alpha * smss * acked / cwnd;

        let exact = cwnd + epoch.carry;
        let next = if epoch.w_cubic(t, smss) < epoch.w_est {
            // Section 4.3, the Reno-friendly region: "cwnd SHOULD be set to W_est" (never
            // lowered: cwnd may be ahead of W_est from the curve's own growth).
            exact.max(epoch.w_est)
        } else {
            // Sections 4.4 (concave, cwnd < W_max) and 4.5 (convex, cwnd >= W_max): cwnd +=
            // (target - cwnd) / cwnd per segment delivered, with target = W_cubic(t + RTT)
            // held to [cwnd, 1.5 * cwnd] (section 4.2).
            let target = epoch.w_cubic(t + rtt, smss).clamp(cwnd, MAX_TARGET_FACTOR * cwnd);
            exact + ((target - cwnd) * acked / cwnd).min(target - cwnd)
        };
        let whole = next.floor().min(f64::from(u32::MAX));
        epoch.carry = if whole < f64::from(u32::MAX) { next - whole } else { 0.0 };
        // `as` saturates; `whole` is finite and within u32.
        self.cwnd = (whole as u32).max(self.cwnd);
        self.epoch = Some(epoch);
    }

    /// Begin a congestion avoidance stage at `now` with cwnd_epoch = cwnd, W_est = cwnd
    /// (RFC 9438 sections 4.2, 4.3) and K = cbrt((W_max - cwnd_epoch) / C) (Figure 2);
    /// return it.
    ///
    /// Where W_max is undefined (after HyStart++'s exit, section 4.10, or a timeout, section
    /// 4.8) or not above cwnd_epoch, K = 0 and W_max = cwnd_epoch: the curve starts flat at
    /// cwnd and probes upward (convex), as Linux's `bictcp_update` does with `origin_point`.
    fn begin_epoch(&mut self, now: Instant) -> Epoch {
        let cwnd = self.cwnd;
        let (w_max, k) = match self.w_max {
            Some(w_max) if w_max > cwnd => (w_max, (f64::from(w_max - cwnd) / (C * f64::from(self.smss))).cbrt()),
            _ => (cwnd, 0.0),
        };
        self.w_max = Some(w_max);
        let epoch = Epoch { start: now, k, w_max: f64::from(w_max), w_est: f64::from(cwnd), carry: 0.0 };
        self.epoch = Some(epoch);
        epoch
    }

    /// Take a congestion event: fast convergence (RFC 9438 section 4.7, "W_max = cwnd * (1 +
    /// beta_cubic) / 2 if cwnd < W_max", else W_max = cwnd), cwnd_prior = cwnd and ssthresh =
    /// max(cwnd * beta_cubic, 2 SMSS) (section 4.6). The stage ends.
    fn reduce(&mut self) {
        let cwnd = self.cwnd;
        self.w_max = Some(match self.w_max {
            Some(w_max) if cwnd < w_max => scale(cwnd, BETA_DEN + BETA_NUM, 2 * BETA_DEN),
            _ => cwnd,
        });
        self.cwnd_prior = cwnd;
        self.ssthresh = scale(cwnd, BETA_NUM, BETA_DEN).max(self.smss.saturating_mul(2));
        self.epoch = None;
    }

    /// Return the state RFC 9438 section 4.9 saves before a reduction.
    fn snapshot(&self) -> Saved {
        Saved {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            w_max: self.w_max,
            cwnd_prior: self.cwnd_prior,
            epoch: self.epoch,
        }
    }
}

/// Return `w * num / den` without overflow (`num <= den`, so the result fits).
fn scale(w: u32, num: u64, den: u64) -> u32 {
    (u64::from(w) * num / den) as u32
}

impl Controller for Cubic {
    fn cwnd(&self) -> u32 {
        self.cwnd
    }

    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    fn set_mss(&mut self, smss: u32) {
        let smss = smss.max(1);
        if smss != self.smss {
            // K and the curve's C * SMSS are in the old unit: begin a new stage.
            self.epoch = None;
        }
        self.smss = smss;
        if !self.delivered_any {
            self.cwnd = initial_window(smss, self.syn_lost);
        } else {
            self.cwnd = self.cwnd.max(smss);
            if self.ssthresh != u32::MAX {
                self.ssthresh = self.ssthresh.max(smss.saturating_mul(2));
            }
        }
    }

    fn on_ack(&mut self, ack: &AckInfo) {
        if ack.delivered == 0 {
            return;
        }
        self.delivered_any = true;
        self.timer_retransmitting = false;
        if let Some(rtt) = ack.rtt {
            // RFC 6298 section 2.3: SRTT = 7/8 SRTT + 1/8 R' (the first sample as it is).
            self.srtt = Some(self.srtt.map_or(rtt, |srtt| srtt.saturating_mul(7).saturating_add(rtt) / 8));
        }
        let previous_ack = self.last_ack.replace(ack.now);
        if self.cwnd < self.ssthresh {
            // What takes cwnd past ssthresh counts in congestion avoidance (Linux's
            // `cubictcp_cong_avoid` passes `tcp_slow_start`'s leftover on).
            let rest = self.slow_start(ack);
            if rest > 0 && self.cwnd >= self.ssthresh {
                self.congestion_avoidance(&AckInfo { delivered: rest, ..*ack }, previous_ack);
            }
        } else {
            self.congestion_avoidance(ack, previous_ack);
        }
    }

    /// Save the state for [`on_spurious`](Controller::on_spurious), then reduce (RFC 9438
    /// sections 4.6, 4.7, 4.9); the recovery's PRR takes cwnd from there.
    fn on_loss(&mut self, _now: Instant, _in_flight: u32) -> u32 {
        self.saved = Some(self.snapshot());
        self.reduce();
        self.in_recovery = true;
        self.timer_retransmitting = false;
        self.ssthresh
    }

    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd.max(self.smss);
    }

    /// Set cwnd = ssthresh and begin the congestion avoidance stage at `now` (RFC 9438
    /// section 4.2's t_epoch). Do nothing outside a recovery (after `on_spurious` undid it,
    /// say).
    fn on_recovery_end(&mut self, now: Instant) {
        if !self.in_recovery {
            return;
        }
        self.in_recovery = false;
        self.cwnd = self.ssthresh.max(self.smss);
        self.begin_epoch(now);
    }

    /// Take a timeout (RFC 9438 section 4.8): cwnd = one segment as Reno's (RFC 5681 section
    /// 3.1), ssthresh reduced with beta_cubic as for a loss, on the first timeout of a series
    /// only; W_max becomes undefined, so that the first congestion avoidance after it starts
    /// with K = 0 and W_max = its cwnd_epoch. A timeout during a recovery saves nothing over
    /// the state the recovery saved, so that [`on_spurious`](Controller::on_spurious) goes
    /// back to before both.
    /// A timeout during a fast recovery keeps the recovery's reduction: one reduction per
    /// loss episode (RFC 5681 3.1's series of timeouts likewise). Reducing again from the
    /// window PRR left, a fraction of the flight, would set ssthresh near two segments and
    /// leave a long path crawling in congestion avoidance (Linux's `tcp_enter_loss` keeps
    /// ssthresh too, outside the Open and Disorder states).
    fn on_rto(&mut self, _now: Instant, _in_flight: u32) {
        if !self.timer_retransmitting && !self.in_recovery {
            self.saved = Some(self.snapshot());
            self.reduce();
        }
        self.w_max = None;
        self.cwnd = self.smss;
        self.epoch = None;
        self.in_recovery = false;
        self.timer_retransmitting = true;
    }

    fn on_syn_timeout(&mut self) {
        self.syn_lost = true;
        if !self.delivered_any {
            self.cwnd = self.smss;
        }
    }

    /// Cap cwnd at the restart window RW = min(IW, cwnd) (RFC 5681 section 4.1) and end the
    /// stage: the next ACK in congestion avoidance begins a new one at its own time, with
    /// W_cubic(0) = cwnd, so the idle time never counts in t (RFC 9438 sections 4.2, 5.8).
    /// HyStart++ begins a new round.
    fn on_idle_restart(&mut self, _now: Instant) {
        self.cwnd = self.cwnd.min(initial_window(self.smss, false));
        self.epoch = None;
        self.last_ack = None;
        self.hystart.restart_round();
    }

    /// Restore cwnd, ssthresh, W_max, K, t_epoch and W_est as saved before the last
    /// reduction if cwnd is still below the saved cwnd, and otherwise keep the current
    /// values (RFC 9438 section 4.9).
    fn on_spurious(&mut self, _now: Instant) {
        let Some(saved) = self.saved.take() else { return };
        // The reduction is over either way: the caller ends its recovery with the undo.
        self.in_recovery = false;
        self.timer_retransmitting = false;
        if self.cwnd >= saved.cwnd {
            return;
        }
        self.cwnd = saved.cwnd;
        self.ssthresh = saved.ssthresh;
        self.w_max = saved.w_max;
        self.cwnd_prior = saved.cwnd_prior;
        self.epoch = saved.epoch;
        self.hystart.restart_round();
    }

    /// Take the new SMSS as `set_mss` does after data was delivered, without recomputing the
    /// initial window: a stage under way (and one saved for an undo) ends, its K and C * SMSS
    /// being in the old unit; the next ACK in congestion avoidance begins a new one at the
    /// current cwnd.
    fn on_mss_change(&mut self, smss: u32) {
        let smss = smss.max(1);
        if smss != self.smss {
            self.epoch = None;
            if let Some(saved) = self.saved.as_mut() {
                saved.epoch = None;
            }
        }
        self.smss = smss;
        self.cwnd = self.cwnd.max(smss);
        if self.ssthresh != u32::MAX {
            self.ssthresh = self.ssthresh.max(smss.saturating_mul(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SMSS: u32 = 1000;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Return W_cubic(t) in segments, straight from RFC 9438 Figures 1 and 2 with K for a
    /// stage that begins at beta_cubic * W_max: C * (t - K)^3 + W_max, K = cbrt(W_max * (1 -
    /// beta) / C).
    fn rfc_w_cubic(w_max: f64, t: f64) -> f64 {
        let k = (w_max * (1.0 - 0.7) / 0.4).cbrt();
        0.4 * (t - k).powi(3) + w_max
    }

    /// An ACK-clocked sender with an endless backlog: it sends whole segments up to cwnd,
    /// each ACK delivers one segment, and a window's ACKs are spread evenly over the RTT.
    struct Flow {
        now: Instant,
        rtt: Duration,
        app_limited: bool,
        /// Report the connection's minimum RTT with each ACK (without it, HyStart's ACK
        /// train, which ACKs spread over the whole RTT would set off, is never consulted).
        min_rtt: bool,
    }

    impl Flow {
        fn new(rtt: Duration) -> Self {
            Flow { now: Instant::from_millis(1000), rtt, app_limited: false, min_rtt: true }
        }

        /// Return the bytes in flight: cwnd's worth of whole segments.
        fn in_flight(cc: &Cubic) -> u32 {
            (cc.cwnd() / SMSS).max(1) * SMSS
        }

        /// Deliver one segment with RTT sample `rtt`; return cwnd's growth.
        fn ack_with(&mut self, cc: &mut Cubic, rtt: Duration) -> i64 {
            let before = cc.cwnd();
            self.now += self.rtt / (cc.cwnd() / SMSS).max(1);
            cc.on_ack(&AckInfo {
                now: self.now,
                delivered: SMSS,
                in_flight: Self::in_flight(cc),
                rtt: Some(rtt),
                min_rtt: self.min_rtt.then(|| self.rtt.min(rtt)),
                app_limited: self.app_limited,
            });
            i64::from(cc.cwnd()) - i64::from(before)
        }

        /// Deliver one segment; return cwnd's growth.
        fn ack(&mut self, cc: &mut Cubic) -> i64 {
            self.ack_with(cc, self.rtt)
        }

        /// Deliver segments until `until`.
        fn run_until(&mut self, cc: &mut Cubic, until: Instant) {
            while self.now < until {
                self.ack(cc);
            }
        }

        /// Deliver one round, the segments in flight at its start, each with RTT sample
        /// `rtt`; return each ACK's growth.
        fn round(&mut self, cc: &mut Cubic, rtt: Duration) -> Vec<i64> {
            (0..Self::in_flight(cc) / SMSS).map(|_| self.ack_with(cc, rtt)).collect()
        }
    }

    /// Return a controller that has just recovered from a loss at `w_max` segments, in
    /// congestion avoidance from `now` with cwnd = 0.7 * w_max.
    fn after_loss_at(w_max: u32, now: Instant) -> Cubic {
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(w_max * SMSS); // Stands for a slow start that reached it.
        cc.on_loss(now, w_max * SMSS);
        cc.on_recovery_end(now);
        cc
    }

    fn segments(bytes: u32) -> f64 {
        f64::from(bytes) / f64::from(SMSS)
    }

    // ---- initial window ----

    #[test]
    fn initial_window_follows_rfc_6928_until_data_is_delivered() {
        let mut cc = Cubic::new(536);
        assert_eq!(cc.cwnd(), 5360);
        assert_eq!(cc.ssthresh(), u32::MAX);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 14_600);
        cc.set_mss(4000);
        assert_eq!(cc.cwnd(), 14_600, "min(10 MSS, max(2 MSS, 14600))");
        cc.set_mss(1460);
        let mut flow = Flow::new(ms(50));
        cc.on_ack(&AckInfo {
            now: flow.now,
            delivered: 1460,
            in_flight: 14_600,
            rtt: Some(flow.rtt),
            min_rtt: Some(flow.rtt),
            app_limited: false,
        });
        flow.now += ms(1);
        assert_eq!(cc.cwnd(), 14_600 + 1460);
        cc.set_mss(536);
        assert_eq!(cc.cwnd(), 14_600 + 1460, "frozen once data is delivered");
    }

    #[test]
    fn a_lost_syn_gives_a_one_segment_initial_window() {
        let mut cc = Cubic::new(536);
        cc.on_syn_timeout();
        assert_eq!(cc.cwnd(), 536);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 1460);
        assert_eq!(cc.ssthresh(), u32::MAX, "a lost SYN is no congestion event for ssthresh");
    }

    // ---- slow start ----

    #[test]
    fn slow_start_credits_every_byte() {
        let mut cc = Cubic::new(SMSS);
        let ack = |delivered| AckInfo {
            now: Instant::from_millis(100),
            delivered,
            in_flight: 10 * SMSS,
            rtt: None,
            min_rtt: None,
            app_limited: false,
        };
        cc.on_ack(&ack(300));
        assert_eq!(cc.cwnd(), 10 * SMSS + 300);
        cc.on_ack(&ack(5 * SMSS));
        assert_eq!(cc.cwnd(), 15 * SMSS + 300, "a stretch ACK credits all it covers (Linux's tcp_slow_start)");
        cc.on_rto(Instant::from_millis(200), 15 * SMSS);
        cc.on_ack(&ack(5 * SMSS));
        assert_eq!(cc.cwnd(), 6 * SMSS, "after a timeout too (Linux grows in the Loss state alike)");
    }

    #[test]
    fn slow_start_stops_at_ssthresh() {
        let mut cc = after_loss_at(20, Instant::from_millis(10));
        cc.on_rto(Instant::from_millis(20), 14 * SMSS); // ssthresh 0.7 * 14 = 9.8 segments
        assert_eq!(cc.ssthresh(), 9800);
        let mut flow = Flow::new(ms(50));
        while cc.cwnd() < cc.ssthresh() {
            flow.ack(&mut cc);
        }
        // The ACK that reaches ssthresh brings 9800 - 9000 = 800 bytes of slow start; its
        // other 200 grow cwnd as congestion avoidance (RFC 9438 4.3's W_est and the curve,
        // K = 0 after the timeout): a few bytes, never a slow-start step.
        assert!(
            (9800..9800 + SMSS / 10).contains(&cc.cwnd()),
            "cwnd {}: capped at ssthresh, the rest is congestion avoidance",
            cc.cwnd()
        );
    }

    // ---- the cubic curve, RFC 9438 4.2, 4.4, 4.5 ----

    #[test]
    fn cwnd_follows_w_cubic_after_a_loss() {
        // W_max = 100 segments; RTT 200 ms keeps W_est (about 2.6 segments a second) below
        // the curve throughout, so the curve governs.
        let rtt = ms(200);
        let mut flow = Flow::new(rtt);
        let epoch = flow.now;
        let mut cc = after_loss_at(100, epoch);
        assert_eq!(cc.cwnd(), 70 * SMSS);
        let k = (100.0f64 * 0.3 / 0.4).cbrt();
        let mut at = |t: f64| {
            flow.run_until(&mut cc, epoch + Duration::from_secs_f64(t));
            let t = (flow.now - epoch).as_secs_f64();
            let (got, want) = (segments(cc.cwnd()), rfc_w_cubic(100.0, t));
            assert!((got - want).abs() < 1.0, "t = {t:.3} s: cwnd {got:.2} segments, W_cubic {want:.2}");
            got
        };
        let mut w: Vec<f64> = [0.5, 1.0, 2.0, 3.0, 4.0].into_iter().map(&mut at).collect();
        // At t = K the curve is at W_max.
        let plateau = at(k);
        assert!((plateau - 100.0).abs() < 1.0, "cwnd {plateau:.2} segments at t = K");
        w.push(plateau);
        assert!(w.windows(2).all(|p| p[1] > p[0]), "growing: {w:?}");
        // After it, convex: each second adds more than the one before.
        let w: Vec<f64> = [k, k + 1.0, k + 2.0, k + 3.0, k + 4.0].into_iter().map(&mut at).collect();
        assert!(w[1] > 100.0);
        for i in 1..4 {
            assert!(w[i + 1] - w[i] > w[i] - w[i - 1], "convex after K: {w:?}");
        }
    }

    #[test]
    fn concave_growth_slows_towards_w_max() {
        let mut flow = Flow::new(ms(200));
        let epoch = flow.now;
        let mut cc = after_loss_at(100, epoch);
        let mut w = vec![segments(cc.cwnd())];
        for t in 1..=4 {
            flow.run_until(&mut cc, epoch + Duration::from_secs(t));
            w.push(segments(cc.cwnd()));
        }
        for i in 1..4 {
            assert!(w[i + 1] - w[i] < w[i] - w[i - 1], "concave before K: {w:?}");
        }
        assert!(w[4] < 100.0);
    }

    #[test]
    fn one_ack_grows_cwnd_by_at_most_half_a_window() {
        // Long after K the curve is far above cwnd: target is 1.5 * cwnd (RFC 9438 4.2), so
        // each delivered segment adds half a segment, and a stretch ACK of a whole window
        // takes cwnd to 1.5 * cwnd and no further.
        let mut cc = after_loss_at(10, Instant::from_millis(1000));
        let cwnd = cc.cwnd();
        cc.on_ack(&AckInfo {
            now: Instant::from_millis(1000 + 60_000),
            delivered: SMSS,
            in_flight: cwnd,
            rtt: Some(ms(10)),
            min_rtt: Some(ms(10)),
            app_limited: false,
        });
        assert_eq!(cc.cwnd(), cwnd + SMSS / 2);
        let cwnd = cc.cwnd();
        cc.on_ack(&AckInfo {
            now: Instant::from_millis(1000 + 60_001),
            delivered: 10 * cwnd,
            in_flight: cwnd,
            rtt: Some(ms(10)),
            min_rtt: Some(ms(10)),
            app_limited: false,
        });
        assert_eq!(cc.cwnd(), cwnd + cwnd / 2);
    }

    // ---- multiplicative decrease and fast convergence, RFC 9438 4.6, 4.7 ----

    #[test]
    fn loss_sets_ssthresh_to_0_7_cwnd_and_w_max_to_cwnd() {
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(100 * SMSS);
        assert_eq!(cc.on_loss(Instant::from_millis(5), 100 * SMSS), 70 * SMSS);
        assert_eq!(cc.ssthresh(), 70 * SMSS);
        assert_eq!(cc.w_max, Some(100 * SMSS));
        assert_eq!(cc.cwnd_prior, 100 * SMSS);
        assert_eq!(cc.cwnd(), 100 * SMSS, "cwnd is PRR's until the recovery ends");
        cc.set_cwnd(80 * SMSS);
        cc.on_recovery_end(Instant::from_millis(50));
        assert_eq!(cc.cwnd(), 70 * SMSS);
        let epoch = cc.epoch.expect("the recovery's end begins the stage");
        assert_eq!(epoch.start, Instant::from_millis(50));
        assert!((epoch.k - 75f64.cbrt()).abs() < 1e-9, "K = cbrt((100 - 70) / 0.4)");
        assert_eq!(epoch.w_est, f64::from(70 * SMSS));

        // Not below two segments.
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(2 * SMSS);
        assert_eq!(cc.on_loss(Instant::ZERO, 2 * SMSS), 2 * SMSS);
        cc.on_recovery_end(Instant::ZERO);
        assert_eq!(cc.cwnd(), 2 * SMSS);
    }

    #[test]
    fn fast_convergence_lowers_w_max_when_it_was_not_regained() {
        let mut flow = Flow::new(ms(100));
        let mut cc = after_loss_at(100, flow.now);
        // Regain 90 of the 100 segments, then lose again.
        while cc.cwnd() < 90 * SMSS {
            flow.ack(&mut cc);
        }
        let cwnd = cc.cwnd();
        let ssthresh = cc.on_loss(flow.now, cwnd);
        assert_eq!(ssthresh, (u64::from(cwnd) * 7 / 10) as u32);
        assert_eq!(cc.w_max, Some((u64::from(cwnd) * 17 / 20) as u32), "W_max = cwnd * (1 + 0.7) / 2");
        cc.on_recovery_end(flow.now);
        let epoch = cc.epoch.unwrap();
        let want_k = ((0.85 - 0.7) * segments(cwnd) / 0.4).cbrt();
        assert!((epoch.k - want_k).abs() < 1e-3, "K {} want {want_k}", epoch.k);
        assert_eq!(epoch.w_max, f64::from((u64::from(cwnd) * 17 / 20) as u32));

        // Past W_max, a loss remembers cwnd itself.
        while cc.cwnd() <= cc.w_max.unwrap() + 5 * SMSS {
            flow.ack(&mut cc);
        }
        let cwnd = cc.cwnd();
        cc.on_loss(flow.now, cwnd);
        assert_eq!(cc.w_max, Some(cwnd));
    }

    // ---- the Reno-friendly region, RFC 9438 4.3 ----

    #[test]
    fn reno_friendly_region_grows_like_reno_on_short_paths() {
        // RTT 1 ms, W_max 20 segments: the curve is nearly flat for the 0.1 s this runs,
        // so W_est governs. RFC 9438 4.3: W_est += alpha_cubic * segments_acked / cwnd,
        // alpha_cubic = 3 * (1 - 0.7) / (1 + 0.7), and 1 once W_est >= cwnd_prior (20).
        let alpha = 3.0 * (1.0 - 0.7) / (1.0 + 0.7);
        let mut flow = Flow::new(ms(1));
        let epoch = flow.now;
        let mut cc = after_loss_at(20, epoch);
        let mut w_est = 14.0f64;
        let mut per_round = Vec::new();
        for _ in 0..100 {
            let start = segments(cc.cwnd());
            // A round adds about the sum of alpha_cubic over its ACKs, over cwnd.
            let mut alphas = 0.0;
            for _ in 0..Flow::in_flight(&cc) / SMSS {
                let a = if w_est >= 20.0 { 1.0 } else { alpha };
                alphas += a;
                w_est += a / segments(cc.cwnd());
                flow.ack(&mut cc);
                assert!((segments(cc.cwnd()) - w_est).abs() < 0.01, "cwnd = W_est");
            }
            per_round.push((segments(cc.cwnd()) - start, alphas / start));
        }
        let t = (flow.now - epoch).as_secs_f64();
        assert!(rfc_w_cubic(20.0, t) < 15.0, "the curve alone would still be below 15 segments");
        // Until W_est reaches cwnd_prior, alpha_cubic segments per RTT; after, one.
        for (round, &(growth, want)) in per_round.iter().enumerate() {
            assert!((growth - want).abs() < 0.03 * want, "round {round}: {growth:.3} segments, want {want:.3}");
        }
        assert!(per_round[..10].iter().all(|&(g, _)| g > 0.45 && g < alpha), "alpha_cubic per RTT at first");
        assert!(per_round[20..].iter().all(|&(g, _)| g > 0.95 && g <= 1.0), "then one segment per RTT");
        assert!(segments(cc.cwnd()) > 100.0);
    }

    // ---- timeouts, RFC 9438 4.8 ----

    #[test]
    fn rto_sets_one_segment_and_reduces_ssthresh_once_per_series() {
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(100 * SMSS);
        cc.on_rto(Instant::from_millis(1000), 100 * SMSS);
        assert_eq!(cc.cwnd(), SMSS);
        assert_eq!(cc.ssthresh(), 70 * SMSS, "ssthresh with beta_cubic, not one half");
        // The timer backs off and fires again with nothing delivered: same ssthresh.
        cc.on_rto(Instant::from_millis(3000), 100 * SMSS);
        assert_eq!(cc.cwnd(), SMSS);
        assert_eq!(cc.ssthresh(), 70 * SMSS);
        // A delivery ends the series; the next timeout reduces from the cwnd of then.
        let mut flow = Flow::new(ms(100));
        flow.now = Instant::from_millis(3100);
        flow.ack(&mut cc);
        assert_eq!(cc.cwnd(), 2 * SMSS);
        cc.on_rto(Instant::from_millis(4000), 2 * SMSS);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (SMSS, 2 * SMSS), "max(1.4, 2) segments");
    }

    #[test]
    fn a_timeout_during_a_recovery_keeps_its_reduction() {
        // The recovery reduced ssthresh to 70 segments and PRR brought cwnd down to 3; the
        // retransmission timer then fires before the recovery ends. Reducing again from 3
        // segments would leave ssthresh at 2: one reduction per loss episode instead.
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(100 * SMSS);
        assert_eq!(cc.on_loss(Instant::from_millis(1000), 100 * SMSS), 70 * SMSS);
        cc.set_cwnd(3 * SMSS);
        cc.on_rto(Instant::from_millis(1300), 20 * SMSS);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (SMSS, 70 * SMSS));
    }

    #[test]
    fn congestion_avoidance_after_rto_starts_with_k_zero() {
        let mut cc = after_loss_at(100, Instant::from_millis(1000));
        cc.on_rto(Instant::from_millis(2000), 70 * SMSS);
        assert_eq!(cc.ssthresh(), 49 * SMSS);
        assert_eq!(cc.w_max, None);
        let mut flow = Flow::new(ms(100));
        flow.now = Instant::from_millis(2000);
        while cc.cwnd() < cc.ssthresh() {
            flow.ack(&mut cc);
            assert!(cc.epoch.is_none(), "slow start");
        }
        flow.ack(&mut cc);
        // RFC 9438 4.8: K = 0 and W_max = the cwnd at the beginning of the stage.
        let epoch = cc.epoch.unwrap();
        assert_eq!((epoch.k, epoch.w_max), (0.0, f64::from(49 * SMSS)));
        assert_eq!(cc.w_max, Some(49 * SMSS));
        assert_eq!(epoch.w_est, f64::from(49 * SMSS) + ALPHA_CUBIC * f64::from(SMSS) * 1000.0 / 49_000.0);
    }

    // ---- spurious congestion events, RFC 9438 4.9 ----

    #[test]
    fn spurious_loss_restores_cwnd_ssthresh_w_max_and_the_epoch() {
        let mut flow = Flow::new(ms(100));
        let mut cc = after_loss_at(100, flow.now);
        flow.run_until(&mut cc, flow.now + Duration::from_secs(2));
        let before = cc.clone();
        cc.on_loss(flow.now, cc.cwnd());
        cc.set_cwnd(50 * SMSS);
        assert_ne!(cc.ssthresh(), before.ssthresh());
        cc.on_spurious(flow.now + ms(30));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (before.cwnd(), before.ssthresh()));
        assert_eq!((cc.w_max, cc.cwnd_prior, cc.epoch), (before.w_max, before.cwnd_prior, before.epoch));
        // The recovery is undone: its end changes nothing, and growth goes on along the
        // restored curve.
        cc.on_recovery_end(flow.now + ms(40));
        assert_eq!(cc.cwnd(), before.cwnd());
        assert!(flow.ack(&mut cc) > 0);
        // Only once.
        let cwnd = cc.cwnd();
        cc.on_spurious(flow.now);
        assert_eq!(cc.cwnd(), cwnd);
    }

    #[test]
    fn spurious_rto_restores_the_state_before_the_series() {
        let mut cc = Cubic::new(SMSS);
        cc.set_cwnd(100 * SMSS);
        cc.on_rto(Instant::from_millis(1000), 100 * SMSS);
        cc.on_rto(Instant::from_millis(3000), 100 * SMSS);
        cc.on_spurious(Instant::from_millis(3050));
        assert_eq!((cc.cwnd(), cc.ssthresh(), cc.w_max), (100 * SMSS, u32::MAX, None));

        // A timeout during a recovery: undoing goes back to before the recovery.
        let mut cc = after_loss_at(100, Instant::from_millis(1000));
        let before = cc.clone();
        cc.on_loss(Instant::from_millis(2000), cc.cwnd());
        cc.on_rto(Instant::from_millis(2500), cc.cwnd());
        cc.on_spurious(Instant::from_millis(2600));
        assert_eq!((cc.cwnd(), cc.ssthresh(), cc.w_max), (before.cwnd(), before.ssthresh(), before.w_max));
    }

    #[test]
    fn spurious_detection_after_cwnd_regrew_keeps_the_current_state() {
        let mut cc = after_loss_at(10, Instant::from_millis(1000));
        cc.on_loss(Instant::from_millis(2000), cc.cwnd()); // saved cwnd 7 segments
        cc.on_recovery_end(Instant::from_millis(2100));
        cc.set_cwnd(8 * SMSS); // Grown past the saved cwnd by the time the D-SACK comes.
        let now = cc.clone();
        cc.on_spurious(Instant::from_millis(9000));
        assert_eq!((cc.cwnd(), cc.ssthresh(), cc.w_max), (now.cwnd(), now.ssthresh(), now.w_max));

        // Undone during the recovery, with PRR's cwnd above the saved one: nothing is
        // restored, but the recovery is over, so a timeout after it saves its own state.
        cc.on_loss(Instant::from_millis(10_000), cc.cwnd());
        cc.set_cwnd(20 * SMSS);
        cc.on_spurious(Instant::from_millis(10_100));
        assert_eq!(cc.cwnd(), 20 * SMSS);
        cc.on_rto(Instant::from_millis(11_000), cc.cwnd());
        cc.on_spurious(Instant::from_millis(11_100));
        assert_eq!(cc.cwnd(), 20 * SMSS, "the timeout was undone to the state just before it");
    }

    // ---- idle and application-limited periods ----

    #[test]
    fn idle_restart_caps_cwnd_at_the_initial_window() {
        let mut flow = Flow { min_rtt: false, ..Flow::new(ms(50)) };
        let mut cc = Cubic::new(SMSS);
        for _ in 0..3 {
            flow.round(&mut cc, ms(50));
        }
        assert_eq!(cc.cwnd(), 80 * SMSS);
        cc.on_idle_restart(flow.now + Duration::from_secs(5));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (10 * SMSS, u32::MAX));
        let mut cc = after_loss_at(100, flow.now);
        cc.on_idle_restart(flow.now + Duration::from_secs(5));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (10 * SMSS, 70 * SMSS), "slow start back to ssthresh");
    }

    #[test]
    fn no_jump_in_cwnd_on_the_first_ack_after_idle() {
        // In congestion avoidance below the IW, so that the restart does not cut cwnd: a
        // timeout at 10 segments leaves ssthresh at 7.
        let mut flow = Flow::new(ms(100));
        let mut cc = Cubic::new(SMSS);
        cc.on_rto(flow.now, 10 * SMSS);
        while cc.cwnd() < 8500 {
            flow.ack(&mut cc);
        }
        assert!(cc.cwnd() > 7 * SMSS && cc.cwnd() < 10 * SMSS, "cwnd {}", cc.cwnd());
        let steady = flow.ack(&mut cc);

        // 30 s of silence. Without the restart the curve's clock would have run on and the
        // first ACK would take cwnd half a segment towards 1.5 * cwnd.
        let mut unrestarted = cc.clone();
        let restart = flow.now + Duration::from_secs(30);
        cc.on_idle_restart(restart);
        let cwnd = cc.cwnd();
        assert!(cwnd < 10 * SMSS, "nothing to cap");
        flow.now = restart;
        let mut control = Flow { now: restart, ..Flow::new(ms(100)) };
        let jump = control.ack(&mut unrestarted);
        assert_eq!(jump, i64::from(SMSS / 2), "the jump the restart avoids");
        let growth = flow.ack(&mut cc);
        assert!(growth < i64::from(SMSS / 10), "first ACK after idle grew cwnd by {growth} bytes");
        assert!(growth <= steady.max(1) * 2, "{growth} vs {steady} before the idle period");
        assert_eq!(cc.epoch.unwrap().k, 0.0, "cwnd is above the old W_max: a new convex stage");
    }

    #[test]
    fn app_limited_acks_do_not_grow_cwnd() {
        // Slow start.
        let mut flow = Flow::new(ms(50));
        let mut cc = Cubic::new(SMSS);
        flow.app_limited = true;
        for _ in 0..50 {
            assert_eq!(flow.ack(&mut cc), 0);
        }
        assert_eq!(cc.cwnd(), 10 * SMSS);
        // Congestion avoidance, both regions.
        for rtt in [ms(1), ms(200)] {
            let mut flow = Flow::new(rtt);
            let mut cc = after_loss_at(50, flow.now);
            flow.app_limited = true;
            for _ in 0..200 {
                assert_eq!(flow.ack(&mut cc), 0);
            }
            assert_eq!(cc.cwnd(), 35 * SMSS);
        }
    }

    #[test]
    fn app_limited_time_does_not_count_in_t() {
        let mut flow = Flow::new(ms(200));
        let epoch = flow.now;
        let mut cc = after_loss_at(100, epoch);
        flow.run_until(&mut cc, epoch + Duration::from_secs(1));
        let steady = flow.ack(&mut cc);
        let cwnd = cc.cwnd();
        // Ten seconds of ACKs for an application that sends little.
        flow.app_limited = true;
        flow.run_until(&mut cc, flow.now + Duration::from_secs(10));
        assert_eq!(cc.cwnd(), cwnd);
        flow.app_limited = false;
        let growth = flow.ack(&mut cc);
        assert!(growth <= steady + 2, "{growth} bytes after, {steady} before");
        // Where the curve would be 11 s in, cwnd would grow by half a segment per ACK.
        assert!(growth < i64::from(SMSS / 10));
        let t = (flow.now - cc.epoch.unwrap().start).as_secs_f64();
        assert!((t - 1.0).abs() < 0.02, "t = {t}");
    }

    // ---- HyStart++, RFC 9406 ----

    #[test]
    fn hystart_exits_to_css_on_rising_rtt_then_to_congestion_avoidance() {
        // The delay signal alone (the ACK train would end slow start first, see below).
        let mut flow = Flow { min_rtt: false, ..Flow::new(ms(100)) };
        let mut cc = Cubic::new(SMSS);
        flow.round(&mut cc, ms(100));
        assert_eq!(cc.cwnd(), 20 * SMSS);
        // RTT up 20 ms, more than RttThresh = 12.5 ms: after eight samples, CSS, where each
        // segment delivered adds a quarter.
        let growth = flow.round(&mut cc, ms(120));
        assert_eq!(growth, [[1000; 8].as_slice(), &[250; 12]].concat());
        assert_eq!(cc.cwnd(), 31 * SMSS);
        assert!(cc.hystart.in_css());
        // CSS rounds 2 to 4.
        for (round, cwnd) in [(2, 38_750), (3, 48_250), (4, 60_250)] {
            let growth = flow.round(&mut cc, ms(120));
            assert!(growth.iter().all(|&g| g == 250), "CSS round {round}");
            assert_eq!((cc.cwnd(), cc.ssthresh()), (cwnd, u32::MAX), "CSS round {round}");
        }
        // The fifth and last: ssthresh = cwnd with its last ACK.
        let growth = flow.round(&mut cc, ms(120));
        assert!(growth.iter().all(|&g| g == 250));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (75_250, 75_250));
        // RFC 9438 4.10: cwnd_prior = cwnd, and a stage with K = 0 and W_max = cwnd.
        assert_eq!((cc.cwnd_prior, cc.w_max), (75_250, Some(75_250)));
        assert_eq!(cc.epoch.unwrap().k, 0.0);
        // Congestion avoidance from here: far less than CSS's quarter segment per ACK.
        let growth = flow.round(&mut cc, ms(120));
        assert!(growth.iter().all(|&g| (0..50).contains(&g)), "{growth:?}");
    }

    #[test]
    fn hystart_returns_to_slow_start_when_the_rtt_falls_back() {
        let mut flow = Flow { min_rtt: false, ..Flow::new(ms(100)) };
        let mut cc = Cubic::new(SMSS);
        flow.round(&mut cc, ms(100));
        flow.round(&mut cc, ms(120));
        assert!(cc.hystart.in_css());
        // Below the 120 ms baseline: eight more CSS ACKs, then slow start again.
        let growth = flow.round(&mut cc, ms(110));
        assert_eq!(growth, [[250; 8].as_slice(), &[1000; 23]].concat());
        assert!(!cc.hystart.in_css());
        flow.round(&mut cc, ms(110));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (112 * SMSS, u32::MAX), "doubling again");
    }

    #[test]
    fn an_ack_train_over_half_the_rtt_enters_congestion_avoidance_at_once() {
        // Linux's HyStart ACK train: 20 ms, ACKs spread over the round (a full pipe). Round 1
        // (10 segments, 2 ms apart) is below hystart_low_window; in round 2 (20 segments,
        // 1 ms apart at first, closer as cwnd grows) the train passes 10 ms, and slow start
        // ends there, ssthresh = cwnd, no CSS.
        let mut flow = Flow::new(ms(20));
        let mut cc = Cubic::new(SMSS);
        flow.round(&mut cc, ms(20));
        assert_eq!((cc.cwnd(), cc.ssthresh()), (20 * SMSS, u32::MAX));
        let start = flow.now;
        let mut acks = 0;
        while cc.ssthresh() == u32::MAX {
            assert_eq!(flow.ack(&mut cc), 1000, "slow start: ACK {acks}");
            acks += 1;
            assert!(acks < 20, "the train never ended slow start");
        }
        assert!(flow.now - start > ms(9), "exit {:?} into the round", flow.now - start);
        assert_eq!(cc.ssthresh(), cc.cwnd());
        assert!(!cc.hystart.in_css());
        let growth = flow.round(&mut cc, ms(20));
        assert!(growth.iter().all(|&g| (0..100).contains(&g)), "congestion avoidance: {growth:?}");
    }

    #[test]
    fn flat_rtts_slow_start_until_loss() {
        // The delay signal alone: samples vary, the minimum creeps up.
        let mut flow = Flow { min_rtt: false, ..Flow::new(ms(100)) };
        let mut cc = Cubic::new(SMSS);
        for round in 0..8 {
            // Samples vary within a round, and the minimum creeps up by less than RttThresh.
            let base = 100 + 10 * round;
            for i in 0..Flow::in_flight(&cc) / SMSS {
                flow.ack_with(&mut cc, ms(base + u64::from(i % 3) * 20));
            }
            assert!(!cc.hystart.in_css(), "round {round}");
        }
        assert_eq!((cc.cwnd(), cc.ssthresh()), (2560 * SMSS, u32::MAX));
        assert_eq!(cc.on_loss(flow.now, cc.cwnd()), 1792 * SMSS);
        cc.on_recovery_end(flow.now);
        // HyStart++ is for the initial slow start only: rising RTTs now change nothing.
        cc.on_rto(flow.now + Duration::from_secs(1), cc.cwnd());
        let mut flow = Flow { now: flow.now + Duration::from_secs(1), ..Flow::new(ms(100)) };
        for rtt in [100, 200, 300] {
            let growth = flow.round(&mut cc, ms(rtt));
            assert!(growth.iter().all(|&g| g == 1000));
        }
    }

    // ---- properties ----

    #[derive(Debug, Clone)]
    enum Event {
        Ack { delivered: u32, gap_ms: u64, rtt_ms: Option<u64>, app_limited: bool },
        Loss,
        RecoveryEnd,
        Rto,
        Idle(u64),
        Spurious,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            12 => (1u32..200_000, 0u64..2000, proptest::option::of(1u64..2000), any::<bool>())
                .prop_map(|(delivered, gap_ms, rtt_ms, app_limited)| Event::Ack { delivered, gap_ms, rtt_ms, app_limited }),
            2 => Just(Event::Loss),
            2 => Just(Event::RecoveryEnd),
            1 => Just(Event::Rto),
            1 => (1u64..100_000).prop_map(Event::Idle),
            1 => Just(Event::Spurious),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold(smss in 1u32..9000, events in proptest::collection::vec(event(), 0..300)) {
            let mut cc = Cubic::new(smss);
            let iw = initial_window(smss, false);
            let mut now = Instant::from_millis(1);
            let mut recovering = false;
            for ev in events {
                let before = cc.cwnd();
                match ev {
                    Event::Ack { delivered, gap_ms, rtt_ms, app_limited } => {
                        now += ms(gap_ms);
                        if recovering {
                            // PRR sets cwnd to pipe + sndcnt; any value will do here.
                            cc.set_cwnd(delivered);
                        } else {
                            cc.on_ack(&AckInfo {
                                now,
                                delivered,
                                in_flight: cc.cwnd(),
                                rtt: rtt_ms.map(ms),
                                min_rtt: rtt_ms.map(ms),
                                app_limited,
                            });
                            prop_assert!(cc.cwnd() >= before, "an ACK never shrinks cwnd");
                            if app_limited {
                                prop_assert_eq!(cc.cwnd(), before);
                            }
                        }
                    }
                    Event::Loss => {
                        if !recovering {
                            let ssthresh = cc.on_loss(now, cc.cwnd());
                            prop_assert_eq!(ssthresh, cc.ssthresh());
                            prop_assert!(ssthresh >= 2 * smss && ssthresh < u32::MAX);
                            recovering = true;
                        }
                    }
                    Event::RecoveryEnd => {
                        if recovering {
                            cc.on_recovery_end(now);
                            prop_assert_eq!(cc.cwnd(), cc.ssthresh());
                            recovering = false;
                        }
                    }
                    Event::Rto => {
                        cc.on_rto(now, cc.cwnd());
                        prop_assert_eq!(cc.cwnd(), smss);
                        prop_assert!(cc.ssthresh() >= 2 * smss && cc.ssthresh() < u32::MAX);
                        recovering = false;
                    }
                    Event::Idle(idle_ms) => {
                        now += ms(idle_ms);
                        cc.on_idle_restart(now);
                        prop_assert_eq!(cc.cwnd(), before.min(iw));
                    }
                    Event::Spurious => {
                        cc.on_spurious(now);
                        prop_assert!(cc.cwnd() >= before);
                        recovering = false;
                    }
                }
                prop_assert!(cc.cwnd() >= smss, "cwnd {} below one segment", cc.cwnd());
                prop_assert!(cc.ssthresh() >= 2 * smss, "ssthresh {}", cc.ssthresh());
                if let Some(epoch) = cc.epoch {
                    prop_assert!(epoch.k.is_finite() && epoch.w_est.is_finite() && epoch.carry.is_finite());
                    prop_assert!((0.0..1.0).contains(&epoch.carry));
                }
            }
        }
    }
}
