//! Two shortcuts of the host's poll held to the general path they stand for.
//!
//! - `Interface::handle_timeouts` fires the timers only when one may be due, by one
//!   comparison with a floor the host keeps under every deadline (the connections' wheel,
//!   the idle sweep, the ARP requests, the reassembly's expiry), lowered wherever one is
//!   armed; the general path is firing on every poll (`Interface::handle_timeouts_unasked`),
//!   which changes nothing when nothing is due.
//! - Without a window or flight budget, a pass over a connection sets no cap (each is
//!   `u32::MAX` from the connection's making) and keeps no sum of the windows and data in
//!   flight (`offered_windows` and `bytes_in_flight` sum what each connection noted when
//!   asked); the general path is a budget so large that every cap `budget_cap` gives is
//!   `u32::MAX`, with the sums kept on every pass.
//!
//! Two worlds of a client and a server, world 0 on both shortcuts and world 1 on both
//! general paths, fed the same random calls and the same impairments (lost frames,
//! datagrams cut into fragments and a fragment lost now and then, time jumps past ARP
//! entries' lives), must send the same frames, give the same events and show the same
//! state, the sums included, after every poll (the next timer no later: see `compare`). A
//! place that arms a timer without lowering the floor leaves world 0's timer unfired where
//! world 1 fires it; a pass that does not note what it should shows in the sums.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_stack::{ListenerId, SocketId, StackConfig};
use bypass_tcp::Instant;
use common::{Host, Rng};

const C: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 1);
const S: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 2);
const PORT: u16 = 7;

/// One host of a world: with the general paths (`general`), budgets that never bind.
fn host(ip: Ipv4Addr, mac: [u8; 6], general: bool) -> Host {
    let mut config = StackConfig::new(ip, 24, [mac[5]; 16]);
    if general {
        // Budgets that never bind: every cap is `u32::MAX`, and the sums are kept.
        config.window_budget = Some(usize::MAX - 1);
        config.flight_budget = Some(usize::MAX - 1);
    }
    config.tcp.min_rto = Duration::from_millis(200);
    // Short lives, so that a run sees ARP entries expire and datagrams time out.
    config.arp.ttl = Duration::from_secs(3);
    // ARP's retries apart from the connections' timers (a SYN's first is 1 s away).
    config.arp.retry = Duration::from_millis(150);
    config.fragments.ipv4_timeout = Duration::from_secs(2);
    Host::without_ring(config, mac)
}

/// One poll of `host` at `now`: take `frames`, fire the timers (asking first, or not), pass
/// the events on, transmit; return the frames sent.
fn poll(host: &mut Host, now: Instant, frames: &[Vec<u8>], unasked: bool) -> Vec<Vec<u8>> {
    for f in frames {
        host.iface.receive(now, f);
    }
    if unasked {
        host.iface.handle_timeouts_unasked(now);
    } else {
        host.iface.handle_timeouts(now);
    }
    host.iface.deliver_events();
    host.transmit_at(now)
}

/// What the application and the accounting can see of `host`, its events included, and its
/// next timer apart (see `compare`).
fn observed(host: &mut Host, ids: &[Option<SocketId>]) -> (String, Option<Instant>) {
    let events = host.events();
    let i = &host.iface;
    let seen = format!(
        "{events:?} {:?} conns {} pooled {} offered {} flight {} buffers {} {}",
        i.counters(),
        i.connection_count(),
        i.pooled_buffers(),
        i.offered_windows(),
        i.bytes_in_flight(),
        i.buffer_memory(),
        host.connections_seen(ids)
    );
    (seen, i.poll_timeout())
}

/// Check that two hosts, the first of world 0 and the second of world 1, show the same:
/// the same events, counters and connections, and a next timer no later in world 0. A
/// wheel that fires nothing at a poll still moves its higher slots down, which makes its
/// next deadline exact (`TimerWheel::next_deadline` may be earlier than its first entry,
/// never later): world 1 does that on every poll, world 0 only when a timer may be due.
fn compare(seen: &[(String, Option<Instant>)], at: &str) {
    assert_eq!(seen[0].0, seen[1].0, "{at}");
    match (seen[0].1, seen[1].1) {
        (None, None) => {}
        (Some(t0), Some(t1)) => assert!(t0 <= t1, "{at}: next timer {t0:?} after {t1:?}"),
        other => panic!("{at}: next timers {other:?}"),
    }
}

/// A client and a server.
struct World {
    client: Host,
    server: Host,
    listener: ListenerId,
}

/// Cut the IPv4 datagram in `frame` (an Ethernet frame, a 20-byte IPv4 header) into two
/// fragments at payload offset `at` (a multiple of 8 within the payload), each with its
/// header's length, offset, MF flag and checksum set.
fn fragment(frame: &[u8], at: usize) -> [Vec<u8>; 2] {
    let (eth, ip, payload) = (&frame[..14], &frame[14..34], &frame[34..]);
    let piece = |range: std::ops::Range<usize>, more: bool| {
        let mut out = eth.to_vec();
        let mut header = ip.to_vec();
        header[2..4].copy_from_slice(&((20 + range.len()) as u16).to_be_bytes());
        let flags_offset = (range.start / 8) as u16 | if more { 0x2000 } else { 0 };
        header[6..8].copy_from_slice(&flags_offset.to_be_bytes());
        header[10..12].copy_from_slice(&[0, 0]);
        let mut sum: u32 = header.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        header[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&payload[range]);
        out
    };
    [piece(0..at, true), piece(at..payload.len(), false)]
}

/// Carry `frames` across the link: some lost, some IPv4 datagrams cut into two fragments,
/// of which one is now and then lost (its datagram then times out in reassembly).
fn carry(rng: &mut Rng, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in frames {
        match rng.below(12) {
            0 => {}
            1 | 2 if f.len() > 34 + 16 && f[12..14] == [0x08, 0x00] => {
                let payload = f.len() - 34;
                let at = 8 * (1 + rng.below(((payload - 1) / 8) as u64) as usize);
                let [a, b] = fragment(&f, at);
                match rng.below(4) {
                    0 => out.push(a),
                    1 => out.push(b),
                    2 => out.extend([b, a]),
                    _ => out.extend([a, b]),
                }
            }
            _ => out.push(f),
        }
    }
    out
}

/// Run one random exchange of `steps` steps from `seed`. With `switch`, world 0 takes a
/// budget that never binds a third of the way in (`set_device_rx_frames`: the sums then
/// start from what each connection noted) and has it lifted at two thirds (the sums and
/// caps kept on while connections remain).
fn run(seed: u64, steps: usize, switch: bool) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // World 0 asks `timers_due` (the floor) before firing and has no budget; world 1 fires
    // on every poll and has budgets that never bind.
    let mut worlds: [World; 2] = std::array::from_fn(|w| {
        let client = host(C, [2, 0, 0, 0, 0, 1], w == 1);
        let mut server = host(S, [2, 0, 0, 0, 0, 2], w == 1);
        let listener = server.iface.listen(PORT).unwrap();
        World { client, server, listener }
    });
    let mut now = Instant::ZERO;
    let k = 1 + rng.below(2) as usize;
    let mut clients: Vec<Option<SocketId>> = vec![None; k];
    let mut accepted: Vec<Option<SocketId>> = Vec::new();
    let mut to_client: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 8192];
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    for step in 0..steps {
        let at = format!("seed {seed} step {step}");
        if switch && (step == steps / 3 || step == 2 * steps / 3) {
            let frames = (step == steps / 3).then_some(1 << 40);
            worlds[0].client.iface.set_device_rx_frames(frames);
            worlds[0].server.iface.set_device_rx_frames(frames);
        }
        // The client: open, write, read, close now and then (the same calls in both worlds).
        for c in clients.iter_mut() {
            match *c {
                None if rng.below(3) == 0 => {
                    let ids: Vec<_> = worlds
                        .iter_mut()
                        .map(|w| w.client.iface.connect(now, SocketAddrV4::new(S, PORT)).unwrap())
                        .collect();
                    assert_eq!(ids[0], ids[1], "{at}: connect");
                    *c = Some(ids[0]);
                }
                Some(id) => match rng.below(10) {
                    0..=3 => {
                        let n = 1 + rng.below(3000) as usize;
                        for w in worlds.iter_mut() {
                            if let Some(conn) = w.client.iface.connection_for_send(id) {
                                let _ = conn.send(&data[..n]);
                            }
                        }
                    }
                    4..=6 => {
                        for w in worlds.iter_mut() {
                            if let Some(conn) = w.client.iface.connection_mut(id) {
                                let _ = conn.recv(&mut buf);
                            }
                        }
                    }
                    7 if step > steps * 3 / 4 && rng.below(4) == 0 => {
                        for w in worlds.iter_mut() {
                            w.client.iface.close(now, id);
                        }
                    }
                    _ => {}
                },
                None => {}
            }
        }
        let sent: Vec<_> =
            worlds.iter_mut().enumerate().map(|(i, w)| poll(&mut w.client, now, &to_client, i == 1)).collect();
        assert_eq!(sent[0], sent[1], "{at}: frames sent by the client");
        let seen: Vec<_> = worlds.iter_mut().map(|w| observed(&mut w.client, &clients)).collect();
        compare(&seen, &format!("{at}: the client"));
        let to_server = carry(&mut rng, sent[0].clone());

        let sent: Vec<_> =
            worlds.iter_mut().enumerate().map(|(i, w)| poll(&mut w.server, now, &to_server, i == 1)).collect();
        assert_eq!(sent[0], sent[1], "{at}: frames sent by the server");
        let ids: Vec<_> = worlds.iter_mut().map(|w| w.server.iface.accept(w.listener)).collect();
        assert_eq!(ids[0], ids[1], "{at}: accept");
        accepted.extend(ids[0].map(Some));
        // The application, most steps: read, echo part of it, close now and then; then a poll.
        let mut replies = sent[0].clone();
        if rng.below(4) != 0 {
            for &id in accepted.iter().flatten() {
                let (want, echo, close) = (1 + rng.below(8192) as usize, rng.below(3), rng.below(40) == 0);
                for w in worlds.iter_mut() {
                    let Some(conn) = w.server.iface.connection_mut(id) else { continue };
                    if let Ok(n) = conn.recv(&mut buf[..want])
                        && echo != 0
                        && n > 0
                    {
                        let conn = w.server.iface.connection_for_send(id).unwrap();
                        let _ = conn.send(&buf[..n / echo as usize]);
                    }
                    if close && step > steps / 2 {
                        w.server.iface.close(now, id);
                    }
                }
            }
            let sent: Vec<_> =
                worlds.iter_mut().enumerate().map(|(i, w)| poll(&mut w.server, now, &[], i == 1)).collect();
            assert_eq!(sent[0], sent[1], "{at}: frames sent after the application");
            replies.extend(sent[0].iter().cloned());
        }
        let seen: Vec<_> = worlds.iter_mut().map(|w| observed(&mut w.server, &accepted)).collect();
        compare(&seen, &format!("{at}: the server"));
        to_client = carry(&mut rng, replies);
        // Time: mostly none or a little (delayed ACKs pending), now and then past the
        // timers, the reassembly's time or an ARP entry's life.
        now += match rng.below(16) {
            0..=6 => Duration::ZERO,
            7..=10 => Duration::from_millis(1 + rng.below(10)),
            11 | 12 => Duration::from_millis(40 + rng.below(200)),
            13 | 14 => Duration::from_millis(200 + rng.below(2000)),
            _ => Duration::from_millis(2000 + rng.below(3000)),
        };
    }
}

#[test]
fn the_shortcuts_do_what_the_general_paths_do() {
    for seed in 0..60 {
        run(seed, 300, false);
    }
}

#[test]
fn budgets_set_and_lifted_while_connections_run_keep_the_sums() {
    for seed in 100..130 {
        run(seed, 300, true);
    }
}
