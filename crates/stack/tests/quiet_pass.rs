//! `Stack::poll`'s pass over a connection with nothing to send, made as its events are
//! passed on (`Interface::deliver_events_settling`, then `transmit` at once), held to the
//! general path (`Interface::deliver_events`, the pass left to `Interface::transmit`): two
//! servers fed the same frames and driven by the same random calls, one each way, must send
//! the same bytes, give the same events and reads, and show the same state, next timer
//! included, after every poll.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use bypass_stack::{ListenerId, SocketId, StackConfig};
use bypass_tcp::Instant;
use common::{Host, Rng};

const C: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
const S: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);
const PORT: u16 = 7;

/// One host of the test, the changes of its configuration from the defaults made by `tweak`.
fn host(ip: Ipv4Addr, mac: [u8; 6], tweak: &impl Fn(&mut StackConfig)) -> Host {
    let mut config = StackConfig::new(ip, 24, [mac[5]; 16]);
    config.tcp.min_rto = Duration::from_millis(200);
    tweak(&mut config);
    Host::without_ring(config, mac)
}

/// What the application and the accounting can see of `host`.
fn observed(host: &Host, ids: &[Option<SocketId>]) -> String {
    let i = &host.iface;
    format!(
        "{:?} timeout {:?} offered {} flight {} buffers {} conns {} pooled {} {}",
        i.counters(),
        i.poll_timeout(),
        i.offered_windows(),
        i.bytes_in_flight(),
        i.buffer_memory(),
        i.connection_count(),
        i.pooled_buffers(),
        host.connections_seen(ids)
    )
}

/// Check that the two servers give the same events and show the same state.
fn compare(servers: &mut [Host; 2], accepted: &[Option<SocketId>], at: &str) {
    let [e0, e1] = [servers[0].events(), servers[1].events()];
    assert_eq!(e0, e1, "{at}: events");
    let [o0, o1] = [observed(&servers[0], accepted), observed(&servers[1], accepted)];
    assert_eq!(o0, o1, "{at}: state");
}

/// Run one random exchange of `steps` steps from `seed`; `tweak` sets both servers' (and
/// the client's) config.
fn run(seed: u64, steps: usize, tweak: impl Fn(&mut StackConfig)) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut client = host(C, [2, 0, 0, 0, 0, 1], &tweak);
    // Server 0 passes on events with `deliver_events_settling`, server 1 with `deliver_events`.
    let mut servers = [host(S, [2, 0, 0, 0, 0, 2], &tweak), host(S, [2, 0, 0, 0, 0, 2], &tweak)];
    let listeners: Vec<ListenerId> = servers.iter_mut().map(|s| s.iface.listen(PORT).unwrap()).collect();
    let mut now = Instant::ZERO;
    let k = 1 + rng.below(2) as usize;
    let mut clients: Vec<Option<SocketId>> = vec![None; k];
    let mut accepted: Vec<Option<SocketId>> = Vec::new();
    let mut buf = vec![0u8; 8192];
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    for step in 0..steps {
        let at = format!("seed {seed} step {step}");
        // The client: open, write, read, close now and then.
        for c in clients.iter_mut() {
            match *c {
                None if rng.below(3) == 0 => *c = Some(client.iface.connect(now, SocketAddrV4::new(S, PORT)).unwrap()),
                Some(id) => match rng.below(10) {
                    0..=3 => {
                        let n = 1 + rng.below(3000) as usize;
                        if let Some(conn) = client.iface.connection_for_send(id) {
                            let _ = conn.send(&data[..n]);
                        }
                    }
                    4..=6 => {
                        if let Some(conn) = client.iface.connection_mut(id) {
                            let _ = conn.recv(&mut buf);
                        }
                    }
                    7 if step > steps * 3 / 4 && rng.below(4) == 0 => client.iface.close(now, id),
                    _ => {}
                },
                None => {}
            }
        }
        client.iface.handle_timeouts(now);
        client.iface.deliver_events();
        let frames = client.transmit_at(now);
        client.events();

        // Both servers take the same frames and poll as `Stack::poll` does (server 0) or
        // as its two halves do (server 1); then the same calls, and a poll; each compared.
        let mut polled = [Vec::new(), Vec::new()];
        for (i, (s, polled)) in servers.iter_mut().zip(&mut polled).enumerate() {
            for f in &frames {
                s.iface.receive(now, f);
            }
            s.iface.handle_timeouts(now);
            if i == 0 {
                s.iface.deliver_events_settling(now);
            } else {
                s.iface.deliver_events();
            }
            *polled = s.transmit_at(now);
        }
        assert_eq!(polled[0], polled[1], "{at}: frames sent by the poll that received");
        compare(&mut servers, &accepted, &format!("{at}, the poll that received"));
        let [a0, a1] = [servers[0].iface.accept(listeners[0]), servers[1].iface.accept(listeners[1])];
        assert_eq!(a0, a1, "{at}: accept");
        accepted.extend(a0.map(Some));
        // The application, most steps: read, echo part of it, close now and then.
        if rng.below(4) != 0 {
            for &id in accepted.iter().flatten() {
                let (want, echo, close) = (1 + rng.below(8192) as usize, rng.below(3), rng.below(40) == 0);
                let mut got = [Vec::new(), Vec::new()];
                for (s, got) in servers.iter_mut().zip(&mut got) {
                    let Some(conn) = s.iface.connection_mut(id) else { continue };
                    let r = conn.recv(&mut buf[..want]);
                    *got = format!("{r:?}").into_bytes();
                    if let Ok(n) = r {
                        got.extend_from_slice(&buf[..n]);
                        if echo != 0 && n > 0 {
                            let conn = s.iface.connection_for_send(id).unwrap();
                            let _ = conn.send(&buf[..n / echo as usize]);
                        }
                    }
                    if close && step > steps / 2 {
                        s.iface.close(now, id);
                    }
                }
                assert_eq!(got[0], got[1], "{at}: read");
            }
        }
        // The poll after the application's calls: nothing received, so the same on both.
        for s in servers.iter_mut() {
            s.iface.handle_timeouts(now);
            s.iface.deliver_events();
        }
        let [f1, g1] = [servers[0].transmit_at(now), servers[1].transmit_at(now)];
        assert_eq!(f1, g1, "{at}: frames sent after the application");
        compare(&mut servers, &accepted, &format!("{at}, after the application"));
        let f0: Vec<Vec<u8>> = polled[0].iter().chain(&f1).cloned().collect();

        for f in &f0 {
            client.iface.receive(now, f);
        }
        client.iface.handle_timeouts(now);
        client.iface.deliver_events();
        client.events();
        // Time: mostly none or a little (delayed ACKs pending), now and then past the timers.
        now += match rng.below(8) {
            0..=3 => Duration::ZERO,
            4 | 5 => Duration::from_millis(1 + rng.below(10)),
            6 => Duration::from_millis(40 + rng.below(200)),
            _ => Duration::from_millis(200 + rng.below(2000)),
        };
    }
}

#[test]
fn the_pass_after_a_receive_is_the_pass_transmit_makes() {
    for seed in 0..60 {
        run(seed, 300, |_| {});
    }
}

#[test]
fn the_pass_after_a_receive_is_the_pass_transmit_makes_under_budgets() {
    for seed in 0..60 {
        run(seed, 300, |c| {
            c.window_budget = Some(6000 + (seed as usize % 5) * 3000);
            c.flight_budget = Some(5000 + (seed as usize % 3) * 4000);
            c.buffer_memory = 40_000;
        });
    }
}
