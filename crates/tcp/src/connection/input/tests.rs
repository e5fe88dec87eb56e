//! Header prediction held to the general path: the same segments, user calls and times
//! through two runs, one with prediction and one with every segment sent the general way
//! (`GENERAL_ONLY`), must emit the same segments and events and leave the same state after
//! every step.

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use super::super::Connection;
use crate::config::{Config, Keepalive};
use crate::controller::Algorithm;
use crate::ecn::{Ecn, IpEcn};
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::tuple::FourTuple;
use crate::wire::{Flags, SackBlock, Segment, Timestamps};

thread_local! {
    /// Send every segment the general way (header prediction off), for the comparison.
    static GENERAL_ONLY: Cell<bool> = const { Cell::new(false) };
    /// Write every segment the general way (the output side's prediction,
    /// `send_predicted`, off), for the comparison.
    static GENERAL_SEND: Cell<bool> = const { Cell::new(false) };
    /// Segments `send_predicted` wrote on this thread.
    static PREDICTED_SENDS: Cell<usize> = const { Cell::new(0) };
}

/// Return whether header prediction is off on this thread.
pub(super) fn general_only() -> bool {
    GENERAL_ONLY.with(Cell::get)
}

/// Return whether the output side's prediction is off on this thread.
pub(in crate::connection) fn general_send_only() -> bool {
    GENERAL_SEND.with(Cell::get)
}

/// Count a segment `send_predicted` wrote.
pub(in crate::connection) fn count_predicted_send() {
    PREDICTED_SENDS.with(|n| n.set(n.get() + 1));
}

/// What a run does next.
#[derive(Clone, Debug)]
enum Op {
    /// The application of `side` writes `len` bytes.
    Send { side: usize, len: usize },
    /// The application of `side` reads up to `len` bytes.
    Recv { side: usize, len: usize },
    /// `side` writes what it has to send onto the wire towards the other.
    Poll { side: usize },
    /// The segment at `index` (modulo those in flight) towards `side` arrives, as sent or
    /// changed by `tweak`, CE-marked or not; kept in flight as well when `dup`.
    Deliver { side: usize, index: usize, tweak: Tweak, ce: bool, dup: bool },
    /// The first segment towards `side` arrives, changed by each of `tweaks` in turn.
    DeliverWith { side: usize, tweaks: Vec<Tweak>, ce: bool },
    /// The segment at `index` towards `side` is lost.
    Lose { side: usize, index: usize },
    /// Time passes, and both handle their timeouts.
    Wait { ms: u64 },
    /// The application of `side` closes.
    Close { side: usize },
}

/// A change to a segment on its way, each at the edge of one of prediction's conditions.
#[derive(Clone, Copy, Debug)]
enum Tweak {
    None,
    /// Add control bits.
    Flags(u16),
    /// Move SEG.SEQ.
    Seq(i32),
    /// Move SEG.ACK.
    Ack(i32),
    /// Change the window field.
    Window(u16),
    /// Move the TSval (older or newer than TS.Recent), or drop the option.
    Tsval(i32),
    NoTimestamps,
    /// Add a SACK block at this offset from SEG.ACK.
    Sack(u32, u32),
    /// Cut the payload to its first `n` bytes.
    Cut(usize),
}

fn tweak() -> impl Strategy<Value = Tweak> {
    prop_oneof![
        12 => Just(Tweak::None),
        1 => prop::sample::select(vec![0x001u16, 0x002, 0x004, 0x008, 0x020, 0x040, 0x080, 0x100, 0x048, 0x0c0])
            .prop_map(Tweak::Flags),
        1 => (-3000i32..3000).prop_map(Tweak::Seq),
        1 => prop_oneof![(-3000i32..3000), (-1i32..=1)].prop_map(Tweak::Ack),
        1 => prop_oneof![Just(0u16), Just(1), any::<u16>()].prop_map(Tweak::Window),
        1 => prop_oneof![(-2i32..=2), any::<i32>()].prop_map(Tweak::Tsval),
        1 => Just(Tweak::NoTimestamps),
        1 => ((0u32..4000), (1u32..3000)).prop_map(|(a, b)| Tweak::Sack(a, b)),
        1 => (0usize..100).prop_map(Tweak::Cut),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let side = 0usize..2;
    prop_oneof![
        3 => (side.clone(), prop_oneof![1usize..200, 1usize..5000]).prop_map(|(side, len)| Op::Send { side, len }),
        3 => (side.clone(), prop_oneof![1usize..200, 1usize..70_000]).prop_map(|(side, len)| Op::Recv { side, len }),
        5 => side.clone().prop_map(|side| Op::Poll { side }),
        8 => (side.clone(), prop_oneof![4 => Just(0usize), 1 => 0usize..8], tweak(), prop::bool::weighted(0.05),
            prop::bool::weighted(0.05))
            .prop_map(|(side, index, tweak, ce, dup)| Op::Deliver { side, index, tweak, ce, dup }),
        1 => (side.clone(), 0usize..8).prop_map(|(side, index)| Op::Lose { side, index }),
        2 => prop_oneof![0u64..5, 0u64..400, Just(1500), Just(10_000)].prop_map(|ms| Op::Wait { ms }),
        1 => prop::bool::weighted(0.02).prop_flat_map(move |c| {
            side.clone().prop_map(move |side| if c { Op::Close { side } } else { Op::Poll { side } })
        }),
    ]
}

/// A configuration: each setting that prediction's conditions read, drawn.
#[derive(Clone, Debug)]
struct Settings {
    timestamps: bool,
    sack: bool,
    window_scaling: bool,
    ecn: bool,
    delayed_ack: bool,
    keepalive: bool,
    nagle: bool,
    newreno: bool,
    pacing: bool,
    buffer: usize,
}

fn settings() -> impl Strategy<Value = Settings> {
    (any::<[bool; 9]>(), prop::sample::select(vec![1024usize, 4096, 16 * 1024, 64 * 1024])).prop_map(|(b, buffer)| {
        Settings {
            timestamps: b[0],
            sack: b[1],
            window_scaling: b[2],
            ecn: b[3],
            delayed_ack: b[4],
            keepalive: b[5],
            nagle: b[6],
            newreno: b[7],
            pacing: b[8],
            buffer,
        }
    })
}

impl Settings {
    fn config(&self) -> Config {
        Config {
            isn_secret: [3; 16],
            timestamps: self.timestamps,
            sack: self.sack,
            window_scaling: self.window_scaling,
            ecn: if self.ecn { Ecn::Request } else { Ecn::Off },
            delayed_ack: self.delayed_ack.then_some(Duration::from_millis(40)),
            keepalive: self.keepalive.then_some(Keepalive {
                idle: Duration::from_secs(2),
                interval: Duration::from_secs(1),
                probes: 3,
            }),
            nagle: self.nagle,
            congestion: if self.newreno { Algorithm::NewReno } else { Algorithm::Cubic },
            pacing: self.pacing,
            send_buffer: self.buffer,
            recv_buffer: self.buffer,
            send_buffer_max: self.buffer * 4,
            recv_buffer_max: self.buffer * 4,
            ..Config::default()
        }
    }
}

/// Two connections and the segments in flight between them.
struct Run {
    conns: [Connection; 2],
    addrs: [SocketAddr; 2],
    /// Segments on their way to side `i`.
    wire: [Vec<Vec<u8>>; 2],
    now: Instant,
    /// Bytes each side's application has written so far (what it writes next follows).
    written: [usize; 2],
    log: String,
    /// Segments taken by header prediction.
    predicted: usize,
}

impl Run {
    fn new(settings: &Settings) -> Run {
        let config = settings.config();
        let addrs: [SocketAddr; 2] = ["10.0.0.1:40000".parse().unwrap(), "10.0.0.2:80".parse().unwrap()];
        let now = Instant::from_millis(1000);
        let client = Connection::connect(&config, FourTuple { local: addrs[0], remote: addrs[1] }, now);
        let server = Connection::listen(&config, addrs[1]);
        Run {
            conns: [client, server],
            addrs,
            wire: [Vec::new(), Vec::new()],
            now,
            written: [0; 2],
            log: String::new(),
            predicted: 0,
        }
    }

    fn apply(&mut self, op: &Op) {
        let _ = writeln!(self.log, "{op:?}");
        match *op {
            Op::Send { side, len } => {
                let data: Vec<u8> = (self.written[side]..self.written[side] + len).map(|i| (i % 251) as u8).collect();
                let r = self.conns[side].send(&data);
                if let Ok(n) = r {
                    self.written[side] += n;
                }
                let _ = writeln!(self.log, "  send {r:?}");
            }
            Op::Recv { side, len } => {
                let mut buf = vec![0u8; len];
                let r = self.conns[side].recv(&mut buf);
                let n = *r.as_ref().unwrap_or(&0);
                let _ = writeln!(self.log, "  recv {r:?} {:?}", &buf[..n]);
            }
            Op::Poll { side } => self.poll(side),
            Op::Deliver { side, index, tweak, ce, dup } => {
                if self.wire[side].is_empty() {
                    return;
                }
                let index = index % self.wire[side].len();
                let bytes = if dup { self.wire[side][index].clone() } else { self.wire[side].remove(index) };
                self.deliver(side, &bytes, &[tweak], ce);
            }
            Op::DeliverWith { side, ref tweaks, ce } => {
                if !self.wire[side].is_empty() {
                    let bytes = self.wire[side].remove(0);
                    self.deliver(side, &bytes, tweaks, ce);
                }
            }
            Op::Lose { side, index } => {
                if !self.wire[side].is_empty() {
                    let index = index % self.wire[side].len();
                    self.wire[side].remove(index);
                }
            }
            Op::Wait { ms } => {
                self.now += Duration::from_millis(ms);
                for side in 0..2 {
                    if self.conns[side].poll_timeout().is_some_and(|at| at <= self.now) {
                        self.conns[side].handle_timeout(self.now);
                        self.observe(side);
                    }
                }
            }
            Op::Close { side } => {
                self.conns[side].close(self.now);
                self.observe(side);
            }
        }
    }

    /// Write what `side` sends now onto the wire.
    fn poll(&mut self, side: usize) {
        let mut buf = [0xa5u8; 2048];
        while let Some(t) = self.conns[side].poll_transmit(self.now, &mut buf) {
            let _ = writeln!(self.log, "  out {t:?} {:?}", &buf[..t.len]);
            self.wire[1 - side].push(buf[..t.len].to_vec());
        }
        self.observe(side);
    }

    /// `bytes` arrive at `side`, changed by `tweak`.
    fn deliver(&mut self, side: usize, bytes: &[u8], tweaks: &[Tweak], ce: bool) {
        let (src, dst) = (self.addrs[1 - side], self.addrs[side]);
        let mut seg = Segment::parse(bytes, src.ip(), dst.ip()).expect("we emit valid segments");
        for &tweak in tweaks {
            seg = tweaked(seg, tweak);
        }
        let conn = &mut self.conns[side];
        if conn.state() == State::Established && {
            conn.ce_in = ce;
            let p = conn.predicted(&seg);
            conn.ce_in = false;
            p
        } {
            self.predicted += 1;
        }
        let ecn = if ce { IpEcn::Ce } else { IpEcn::NotEct };
        let outcome = conn.handle_segment_ecn(self.now, src.ip(), &seg, ecn);
        let _ = writeln!(self.log, "  in {seg:?}: {outcome:?}");
        self.observe(side);
    }

    /// Log what can be seen of `side`: its events, and every part of its state.
    fn observe(&mut self, side: usize) {
        let c = &mut self.conns[side];
        let events = c.take_events();
        let _ = writeln!(
            self.log,
            "  [{side}] {events:?} {:?} {:?} {:?} {:?}\n  snd {:?}\n  rcv {:?}\n  rel {:?}\n  timers {:?} \
             due {:?} ecn {:?} path {:?} ts {:?} delivery {:?} stats {:?} reset {:?} challenge {:?} \
             invalid {:?} trace {:?} {} {} {} {} {}",
            c.state,
            c.failure,
            c.poll_timeout(),
            c.sequence_space(),
            c.snd,
            c.rcv,
            c.rel,
            c.timers,
            c.due,
            c.ecn,
            c.path,
            c.ts,
            c.delivery,
            c.stats,
            c.pending_reset,
            c.challenge,
            c.last_invalid_ack,
            c.trace,
            c.released,
            c.wscale_ok,
            c.sack_enabled,
            c.growth_allowed,
            c.flight_cap,
        );
    }
}

/// `seg` changed by `tweak`.
fn tweaked(mut seg: Segment<'_>, tweak: Tweak) -> Segment<'_> {
    match tweak {
        Tweak::None => {}
        Tweak::Flags(bits) => seg.flags = Flags::from_bits(seg.flags.bits() | bits),
        Tweak::Seq(d) => seg.seq = SeqNum(seg.seq.0.wrapping_add_signed(d)),
        Tweak::Ack(d) => seg.ack = SeqNum(seg.ack.0.wrapping_add_signed(d)),
        Tweak::Window(w) => seg.window = w,
        Tweak::Tsval(d) => {
            if let Some(ts) = seg.options.timestamps {
                seg.options.timestamps = Some(Timestamps { tsval: ts.tsval.wrapping_add_signed(d), ..ts });
            }
        }
        Tweak::NoTimestamps => seg.options.timestamps = None,
        Tweak::Sack(at, len) => {
            let left = seg.ack + at;
            seg.options.sack_blocks.push(SackBlock { left, right: left + len });
        }
        Tweak::Cut(n) => seg.payload = &seg.payload[..n.min(seg.payload.len())],
    }
    seg
}

/// Run `ops` after the handshake, with prediction or without; return the log and the
/// segments prediction took.
fn run(settings: &Settings, ops: &[Op], general: bool) -> (String, usize) {
    let (log, predicted, _) = run_with(settings, ops, general, false);
    (log, predicted)
}

/// Run `ops` after the handshake, with the input side's prediction or without
/// (`general_in`), and the output side's or without (`general_out`); return the log, the
/// segments prediction took and those `send_predicted` wrote.
fn run_with(settings: &Settings, ops: &[Op], general_in: bool, general_out: bool) -> (String, usize, usize) {
    GENERAL_ONLY.with(|g| g.set(general_in));
    GENERAL_SEND.with(|g| g.set(general_out));
    PREDICTED_SENDS.with(|n| n.set(0));
    let mut r = Run::new(settings);
    let handshake = [
        Op::Poll { side: 0 },
        Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false },
        Op::Poll { side: 1 },
        Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false },
        Op::Poll { side: 0 },
        Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false },
    ];
    for op in handshake.iter().chain(ops) {
        r.apply(op);
    }
    GENERAL_ONLY.with(|g| g.set(false));
    GENERAL_SEND.with(|g| g.set(false));
    (r.log, r.predicted, PREDICTED_SENDS.with(Cell::get))
}

/// Compare two logs line by line, naming the first that differs.
fn assert_same(fast: &str, general: &str) {
    for (i, (a, b)) in fast.lines().zip(general.lines()).enumerate() {
        assert_eq!(a, b, "line {i} differs (with prediction, then without)");
    }
    assert_eq!(fast.lines().count(), general.lines().count());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn takes_what_the_general_path_takes(settings in settings(), ops in prop::collection::vec(op(), 1..300)) {
        let (fast, predicted) = run(&settings, &ops, false);
        let (general, none) = run(&settings, &ops, true);
        prop_assert_eq!(none, 0);
        assert_same(&fast, &general);
        let _ = predicted;
    }

    /// The output side's prediction (`send_predicted`) held to the general path
    /// (`send_new`, `send_segment`): the same segments, byte for byte, events and state,
    /// input prediction on in both runs.
    #[test]
    fn sends_what_the_general_path_sends(settings in settings(), ops in prop::collection::vec(op(), 1..300)) {
        let (fast, _, sent) = run_with(&settings, &ops, false, false);
        let (general, _, none) = run_with(&settings, &ops, false, true);
        prop_assert_eq!(none, 0);
        assert_same(&fast, &general);
        let _ = sent;
    }
}

/// The request/response exchange and a one-way transfer, with and without timestamps,
/// SACK and delayed ACKs: prediction takes nearly every segment, and the two runs agree.
#[test]
fn an_exchange_and_a_transfer_are_predicted() {
    for b in 0..16u8 {
        let settings = Settings {
            timestamps: b & 1 != 0,
            sack: b & 2 != 0,
            window_scaling: true,
            ecn: b & 4 != 0,
            delayed_ack: b & 8 != 0,
            keepalive: false,
            nagle: true,
            newreno: false,
            pacing: true,
            buffer: 64 * 1024,
        };
        let mut ops = Vec::new();
        for _ in 0..50 {
            // A request and its response.
            ops.push(Op::Send { side: 0, len: 64 });
            ops.push(Op::Poll { side: 0 });
            ops.push(Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false });
            ops.push(Op::Recv { side: 1, len: 64 });
            ops.push(Op::Send { side: 1, len: 64 });
            ops.push(Op::Poll { side: 1 });
            ops.push(Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false });
            ops.push(Op::Recv { side: 0, len: 64 });
            ops.push(Op::Wait { ms: 1 });
        }
        for _ in 0..50 {
            // Bulk from the client: data one way, pure ACKs back.
            ops.push(Op::Send { side: 0, len: 2896 });
            ops.push(Op::Poll { side: 0 });
            ops.push(Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false });
            ops.push(Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false });
            ops.push(Op::Recv { side: 1, len: 70_000 });
            ops.push(Op::Poll { side: 1 });
            ops.push(Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false });
            ops.push(Op::Wait { ms: 1 });
        }
        let (fast, predicted) = run(&settings, &ops, false);
        let (general, _) = run(&settings, &ops, true);
        assert_same(&fast, &general);
        assert!(predicted >= 190, "{settings:?}: only {predicted} segments predicted");
    }
}

/// Each of prediction's conditions at its edge, on the segment of a request/response
/// exchange (64 bytes, acknowledging the 64 the other side sent): the change that just
/// breaks a condition sends it the general way, the one that just keeps it (or a change
/// prediction allows) leaves it predicted, and either way the two runs agree.
#[test]
fn each_condition_at_its_edge() {
    use Tweak::*;
    let (predicted, general) = (true, false);
    let fin = crate::wire::Flags::FIN.bits();
    let cases: Vec<(&str, bool, Vec<Tweak>, bool, bool)> = vec![
        // (what, timestamps on, tweaks, CE, predicted)
        ("as sent", true, vec![], false, predicted),
        ("PSH", true, vec![Flags(crate::wire::Flags::PSH.bits())], false, predicted),
        ("FIN", true, vec![Flags(fin)], false, general),
        ("SYN", true, vec![Flags(crate::wire::Flags::SYN.bits())], false, general),
        ("RST", true, vec![Flags(crate::wire::Flags::RST.bits())], false, general),
        ("URG", true, vec![Flags(crate::wire::Flags::URG.bits())], false, general),
        ("ECE", true, vec![Flags(crate::wire::Flags::ECE.bits())], false, general),
        ("CWR", true, vec![Flags(crate::wire::Flags::CWR.bits())], false, general),
        ("NS", true, vec![Flags(crate::wire::Flags::NS.bits())], false, general),
        ("SEG.SEQ one past RCV.NXT", true, vec![Seq(1)], false, general),
        ("SEG.SEQ one before RCV.NXT", true, vec![Seq(-1)], false, general),
        ("SEG.ACK at SND.UNA, with text", true, vec![Ack(-64)], false, predicted),
        ("SEG.ACK one before SND.UNA", true, vec![Ack(-65)], false, general),
        ("SEG.ACK one past SND.MAX", true, vec![Ack(1)], false, general),
        ("SEG.ACK one short of SND.MAX", true, vec![Ack(-1)], false, predicted),
        ("a pure ACK of new data", true, vec![Cut(0)], false, predicted),
        ("a pure ACK at SND.UNA", true, vec![Cut(0), Ack(-64)], false, general),
        ("a window of zero", true, vec![Window(0)], false, predicted),
        ("a window update", true, vec![Window(1)], false, predicted),
        ("TSval equal to TS.Recent's successor", true, vec![Tsval(1)], false, predicted),
        ("TSval one tick older than sent", true, vec![Tsval(-1)], false, predicted),
        ("TSval far older than TS.Recent", true, vec![Tsval(-1_000_000)], false, general),
        ("no timestamps, when in use", true, vec![NoTimestamps], false, general),
        ("no timestamps, when not in use", false, vec![], false, predicted),
        ("a SACK block", true, vec![Sack(100, 10)], false, general),
        ("a CE mark", true, vec![], true, general),
    ];
    for (what, timestamps, tweaks, ce, expected) in cases {
        let settings = Settings {
            timestamps,
            sack: true,
            window_scaling: true,
            ecn: true,
            delayed_ack: false,
            keepalive: true,
            nagle: true,
            newreno: true,
            pacing: true,
            buffer: 64 * 1024,
        };
        // The server sends 64 bytes, the client takes them and answers with 64 that
        // acknowledge them, which reach the server changed by `tweaks`.
        let mut ops = vec![
            Op::Send { side: 1, len: 64 },
            Op::Poll { side: 1 },
            Op::Wait { ms: 2 },
            Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false },
            Op::Recv { side: 0, len: 64 },
            Op::Send { side: 0, len: 64 },
            Op::Poll { side: 0 },
        ];
        let (_, before) = run(&settings, &ops, false);
        ops.push(Op::DeliverWith { side: 1, tweaks, ce });
        ops.extend([Op::Poll { side: 1 }, Op::Recv { side: 1, len: 100 }, Op::Poll { side: 0 }]);
        let (fast, after) = run(&settings, &ops, false);
        let (slow, _) = run(&settings, &ops, true);
        assert_eq!(after - before == 1, expected, "{what}: predicted {}", after - before);
        assert_same(&fast, &slow);
    }
}

/// The exchange and a one-way transfer, without pacing: the output side's prediction
/// writes nearly every data segment, and the two runs agree.
#[test]
fn an_exchange_and_a_transfer_are_sent_predicted() {
    for b in 0..16u8 {
        let settings = Settings {
            timestamps: b & 1 != 0,
            sack: b & 2 != 0,
            window_scaling: true,
            ecn: b & 4 != 0,
            delayed_ack: true,
            keepalive: false,
            nagle: b & 8 != 0,
            newreno: true,
            pacing: false,
            buffer: 64 * 1024,
        };
        let mut ops = Vec::new();
        for _ in 0..50 {
            ops.extend([
                Op::Send { side: 0, len: 64 },
                Op::Poll { side: 0 },
                Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false },
                Op::Recv { side: 1, len: 64 },
                Op::Send { side: 1, len: 64 },
                Op::Poll { side: 1 },
                Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false },
                Op::Recv { side: 0, len: 64 },
                Op::Wait { ms: 1 },
            ]);
        }
        for _ in 0..50 {
            ops.extend([
                Op::Send { side: 0, len: 2896 },
                Op::Poll { side: 0 },
                Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false },
                Op::Deliver { side: 1, index: 0, tweak: Tweak::None, ce: false, dup: false },
                Op::Recv { side: 1, len: 70_000 },
                Op::Poll { side: 1 },
                Op::Deliver { side: 0, index: 0, tweak: Tweak::None, ce: false, dup: false },
                Op::Wait { ms: 1 },
            ]);
        }
        let (fast, _, sent) = run_with(&settings, &ops, false, false);
        let (general, _, none) = run_with(&settings, &ops, false, true);
        assert_same(&fast, &general);
        assert_eq!(none, 0);
        assert!(sent >= 190, "{settings:?}: only {sent} segments sent predicted");
    }
}

/// Each of the output side's conditions at its edge: after the same history, the last
/// poll of side 1 writes its data predicted or the general way, as expected, and either
/// way the two runs agree.
#[test]
fn each_send_condition_at_its_edge() {
    let deliver = |side| Op::Deliver { side, index: 0, tweak: Tweak::None, ce: false, dup: false };
    let send = |len| Op::Send { side: 1, len };
    let poll = Op::Poll { side: 1 };
    let base = Settings {
        timestamps: true,
        sack: true,
        window_scaling: true,
        ecn: true,
        delayed_ack: true,
        keepalive: false,
        nagle: true,
        newreno: true,
        pacing: false,
        buffer: 64 * 1024,
    };
    // (what, settings, history, predicted)
    let cases: Vec<(&str, Settings, Vec<Op>, bool)> = vec![
        ("data, nothing in flight", base.clone(), vec![], true),
        ("without timestamps", Settings { timestamps: false, ..base.clone() }, vec![], true),
        ("paced", Settings { pacing: true, ..base.clone() }, vec![], false),
        // Nagle holds a small segment while one is unacknowledged; without Nagle it goes.
        ("behind unacknowledged data, Nagle", base.clone(), vec![send(64), poll.clone()], false),
        (
            "behind unacknowledged data, no Nagle",
            Settings { nagle: false, ..base.clone() },
            vec![send(64), poll.clone()],
            true,
        ),
        // A full segment goes whatever Nagle says.
        ("a full segment behind unacknowledged data", base.clone(), vec![send(64), poll.clone(), send(4000)], true),
        // The FIN queued behind the data.
        ("FIN queued", base.clone(), vec![Op::Close { side: 1 }], false),
        // Out-of-order data held: the ACK carries SACK blocks.
        (
            "SACK blocks to send",
            base.clone(),
            vec![
                Op::Send { side: 0, len: 3000 },
                Op::Poll { side: 0 },
                Op::Deliver { side: 1, index: 1, tweak: Tweak::None, ce: false, dup: false },
            ],
            false,
        ),
        (
            "out-of-order data, no SACK",
            Settings { sack: false, ..base.clone() },
            vec![
                Op::Send { side: 0, len: 3000 },
                Op::Poll { side: 0 },
                Op::Deliver { side: 1, index: 1, tweak: Tweak::None, ce: false, dup: false },
            ],
            true,
        ),
        // A segment lost and found lost by the timeout: the retransmission goes first.
        (
            "a segment marked lost",
            base.clone(),
            vec![send(64), poll.clone(), Op::Lose { side: 0, index: 0 }, Op::Wait { ms: 1500 }],
            false,
        ),
        // Idle past the RTO after an exchange: the restart window (RFC 5681 4.1).
        (
            "idle past the RTO",
            Settings { delayed_ack: false, ..base.clone() },
            vec![send(64), poll.clone(), deliver(0), Op::Poll { side: 0 }, deliver(1), Op::Wait { ms: 1500 }],
            false,
        ),
        (
            "idle, not past the RTO",
            Settings { delayed_ack: false, ..base.clone() },
            vec![send(64), poll.clone(), deliver(0), Op::Poll { side: 0 }, deliver(1), Op::Wait { ms: 1 }],
            true,
        ),
    ];
    for (what, settings, history, expected) in cases {
        let mut ops = history;
        let (_, _, before) = run_with(&settings, &ops, false, false);
        ops.extend([send(64), poll.clone()]);
        let (fast, _, after) = run_with(&settings, &ops, false, false);
        let (general, _, none) = run_with(&settings, &ops, false, true);
        assert_eq!(none, 0);
        assert_eq!(after > before, expected, "{what}: {} sent predicted in the last poll", after - before);
        assert_same(&fast, &general);
    }
}
