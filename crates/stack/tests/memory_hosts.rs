//! Two hosts over the in-memory link, on virtual time: ARP, ICMP, TCP echo, resets, SYN
//! cookies, and bad frames.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

mod common;

use bypass_device::Device;
use bypass_device::LinkConfig;
use bypass_stack::{Drop, ListenerId, SocketId, StackConfig};
use bypass_tcp::{Event, State};
use common::{Collector, Net};

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// Hosts A and B (10.9.0.1 and .2, /24) over `link`, each config changed by `tweak`.
fn net(link: LinkConfig, tweak: impl Fn(&mut StackConfig)) -> Net {
    let mut ca = StackConfig::new(A, 24, [1; 16]);
    let mut cb = StackConfig::new(B, 24, [2; 16]);
    tweak(&mut ca);
    tweak(&mut cb);
    Net::new(link, ca, cb)
}

#[test]
fn tcp_echo_across_two_hosts_resolving_arp() {
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    let mut server = None;
    net.run_until(|n| {
        server = server.or_else(|| n.b.accept(listener));
        server.is_some() && n.a.state(client) == State::Established
    });
    let server = server.unwrap();
    assert!(net.a.counters().arp_requests >= 1);
    assert_eq!(net.b.counters().arp_replies, 1);

    let message: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut sent = 0;
    let mut echoed = Vec::new();
    let mut buf = vec![0u8; 65536];
    net.run_until(|n| {
        if sent < message.len()
            && let Ok(k) = n.a.write(client, &message[sent..])
        {
            sent += k;
        }
        while let Ok(k @ 1..) = n.b.read(server, &mut buf) {
            let mut off = 0;
            while off < k {
                off += n.b.write(server, &buf[off..k]).unwrap_or(0);
                if off < k {
                    n.b.poll().unwrap();
                    n.a.poll().unwrap();
                }
            }
        }
        while let Ok(k @ 1..) = n.a.read(client, &mut buf) {
            echoed.extend_from_slice(&buf[..k]);
        }
        echoed.len() == message.len()
    });
    assert_eq!(echoed, message);

    net.a.close(client);
    net.run_until(|n| n.b.read(server, &mut [0; 8]).ok() == Some(0));
    net.b.close(server);
    net.run_until(|n| n.a.interface().connection_count() + n.b.interface().connection_count() == 1);
    // The client side waits in TIME-WAIT; the server side is gone.
    assert_eq!(net.b.interface().connection_count(), 0);
    assert_eq!(net.a.state(client), State::TimeWait, "a released connection finishes in the background");
}

#[test]
fn connections_one_after_another_reuse_buffers_and_see_only_their_own_bytes() {
    // Small buffers, so a transfer wraps the rings and the next connection gets storage
    // written all over; kept at that size (autotuning would grow them, and grown buffers
    // are freed, not pooled).
    let mut net = net(LinkConfig::default(), |c| {
        c.tcp.send_buffer = 4096;
        c.tcp.recv_buffer = 4096;
        c.tcp.send_buffer_max = 4096;
        c.tcp.recv_buffer_max = 4096;
    });
    let listener = net.b.listen(7).unwrap();
    let mut first_allocated = None;
    for round in 0..4u32 {
        let len = 10_000 - 3_000 * round as usize;
        let message: Vec<u8> = (0..len as u32).map(|i| (i * 13 + round * 101) as u8).collect();
        let (client, server, got) = send_to_listener(&mut net, listener, &message);
        assert_eq!(got, message, "round {round}");
        net.a.close(client);
        net.run_until(|n| n.b.read(server, &mut [0; 8]).ok() == Some(0));
        net.b.close(server);
        net.run_until(|n| n.b.interface().connection_count() == 0);
        // The server allocated storage in the first round only; every later connection ran
        // on storage from the pool (a busy connection keeps its own between bursts).
        let counters = net.b.counters();
        let allocated = *first_allocated.get_or_insert(counters.buffers_allocated);
        assert!(allocated <= 2, "one receive buffer, and at most one more while it was busy: {counters}");
        assert_eq!(counters.buffers_allocated, allocated, "round {round}: {counters}");
        assert!(counters.buffers_recycled >= round as u64, "round {round}: {counters}");
    }
}

#[test]
fn reading_an_idle_connection_leaves_it_untouched() {
    // A read that finds nothing changes nothing: it neither lends the connection buffer
    // storage from the pool nor sends it through the next transmit, so a loop that polls
    // an idle connection pays for the call alone. Data that arrives later is still read.
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let mut buf = [0u8; 64];
    // One exchange, so that both ends have held storage and given it back once idle.
    net.a.write(client, b"ping").unwrap();
    net.run_until(|n| n.b.read(server, &mut buf).is_ok_and(|k| k == 4));
    net.b.write(server, b"pong").unwrap();
    net.run_until(|n| n.a.read(client, &mut buf).is_ok_and(|k| k == 4));
    let deadline = net.now + Duration::from_secs(1);
    net.run_until(|n| n.now >= deadline);
    assert_eq!(net.a.interface().connection(client).unwrap().storage_attached(), (false, false), "idle");
    let before = net.a.counters().clone();
    for _ in 0..100 {
        let err = net.a.read(client, &mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
        net.a.poll().unwrap();
    }
    let after = net.a.counters();
    assert_eq!(after.buffers_recycled, before.buffers_recycled, "no storage lent to a read of nothing: {after}");
    assert_eq!(after.buffers_allocated, before.buffers_allocated, "{after}");
    assert_eq!(after.tx_frames, before.tx_frames, "{after}");
    assert_eq!(net.a.interface().connection(client).unwrap().storage_attached(), (false, false));
    // Reading is unchanged once there is something to read.
    net.b.write(server, b"late").unwrap();
    net.run_until(|n| n.a.read(client, &mut buf).is_ok_and(|k| k == 4));
    assert_eq!(&buf[..4], b"late");
}

#[test]
fn a_read_that_opens_a_closed_window_sends_the_update_at_the_next_poll() {
    // A read that finds data marks its connection for the next transmit, where it runs
    // through its output: reading a full receive buffer opens the window by more than a
    // segment, and the update goes out at once (RFC 9293 3.8.6.2.2), not when the peer's
    // persist timer fires. Both ways of reading, `read` and `recv_with`.
    for in_place in [false, true] {
        let mut net = net(LinkConfig::default(), |c| {
            c.tcp.recv_buffer = 4096;
            c.tcp.recv_buffer_max = 4096;
        });
        let listener = net.b.listen(7).unwrap();
        let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
        let message = vec![7u8; 3 * 4096];
        let mut sent = net.a.write(client, &message).unwrap();
        net.run_until(|n| {
            if let Ok(k) = n.a.write(client, &message[sent..]) {
                sent += k;
            }
            n.b.recv_queued(server) == 4096
                && n.b.interface().connection(server).is_some_and(|c| c.receive_window() == 0)
        });
        let before = net.b.counters().tx_frames;
        let read = if in_place {
            net.b.recv_with(server, |data| (data.len(), data.len())).unwrap()
        } else {
            net.b.read(server, &mut [0; 4096]).unwrap()
        };
        assert_eq!(read, 4096, "in place: {in_place}");
        net.b.poll().unwrap();
        assert_eq!(net.b.counters().tx_frames, before + 1, "the window update, in place: {in_place}");
    }
}

#[test]
fn poll_rx_passes_on_the_events_of_what_it_received() {
    // An application that splits its poll (`poll_rx`, its own work, `poll_tx`) sees a
    // segment's events after `poll_rx`, before anything is transmitted: with one
    // connection touched (`deliver_events`' one-connection path) and with two (its walk).
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let (c1, s1) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let (c2, s2) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    // Each write goes out at once, its predecessor's ACK delayed or not (Nagle's off).
    net.b.set_nodelay(s1, true);
    net.b.set_nodelay(s2, true);
    let arrive = |net: &mut Net| {
        let at = net.a.device().next_arrival().expect("a segment on its way");
        net.now = at;
        net.a.device().clock().advance_to(at);
        net.a.set_time(at);
        net.b.set_time(at);
    };
    for servers in [&[s1][..], &[s1, s2][..]] {
        while net.a.poll_event().is_some() {}
        for &s in servers {
            net.b.write(s, b"ping").unwrap();
        }
        net.b.poll().unwrap();
        // Received in one `poll_rx` or two (no `poll_tx` between them), two segments leave
        // two connections marked for transmit, whose events the walk passes on.
        let mut received = 0;
        while received < servers.len() {
            arrive(&mut net);
            received += net.a.poll_rx().unwrap();
        }
        let mut readable: Vec<SocketId> = std::iter::from_fn(|| net.a.poll_event())
            .filter(|(_, e)| *e == Event::Readable)
            .map(|(id, _)| id)
            .collect();
        readable.sort_by_key(|id| *id == c2);
        assert_eq!(readable, [c1, c2][..servers.len()], "{} connection(s)", servers.len());
        net.a.poll_tx().unwrap();
        let mut buf = [0u8; 8];
        for c in [c1, c2].into_iter().take(servers.len()) {
            assert_eq!(net.a.read(c, &mut buf).unwrap(), 4);
        }
    }
}

#[test]
fn events_an_application_never_takes_do_not_pile_up() {
    // An application that reads and writes without ever taking its events (the echo loops
    // of the examples do) must not grow the event queue by one entry a segment: each kind
    // waits once per connection it holds, and those of connections it closed go.
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let mut buf = [0u8; 64];
    for i in 0..2_000u32 {
        net.a.write(client, &i.to_le_bytes()).unwrap();
        net.run_until(|n| n.b.read(server, &mut buf).is_ok_and(|k| k == 4));
        net.b.write(server, &buf[..4]).unwrap();
        net.run_until(|n| n.a.read(client, &mut buf).is_ok_and(|k| k == 4));
        assert_eq!(buf[..4], i.to_le_bytes());
    }
    assert!(net.a.pending_events() <= 8, "client: {} events waiting", net.a.pending_events());
    assert!(net.b.pending_events() <= 8, "server: {} events waiting", net.b.pending_events());
    // Taken, they are this connection's, in the order they first happened, once each.
    let mut seen = Vec::new();
    while let Some((id, event)) = net.a.poll_event() {
        assert_eq!(id, client);
        assert!(!seen.contains(&event), "{event:?} twice: {seen:?}");
        seen.push(event);
    }
    assert_eq!(seen.first(), Some(&Event::Established), "{seen:?}");
    assert!(seen.contains(&Event::Readable), "{seen:?}");
    // Taken once, the next one is queued again.
    net.b.write(server, b"more").unwrap();
    net.run_until(|n| n.a.pending_events() > 0);
    assert_eq!(net.a.poll_event(), Some((client, Event::Readable)));

    // Connections opened, used and closed by an application that never takes its events:
    // the queue stays within a compaction's bound, not one entry a connection.
    for _ in 0..3_000 {
        let (c, s) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
        net.a.write(c, b"x").unwrap();
        net.run_until(|n| n.b.read(s, &mut buf).is_ok_and(|k| k == 1));
        net.a.close(c);
        net.b.close(s);
    }
    for host in [&net.a, &net.b] {
        assert!(host.pending_events() <= 2 * 1024 + 16, "{} events waiting", host.pending_events());
    }
}

#[test]
fn connect_to_closed_port_is_refused_with_rst() {
    let mut net = net(LinkConfig::default(), |_| {});
    let client = net.a.connect(SocketAddrV4::new(B, 9999)).unwrap();
    let mut events = Vec::new();
    net.run_until(|n| {
        while let Some((_, e)) = n.a.poll_event() {
            events.push(e);
        }
        events.contains(&Event::Reset)
    });
    assert_eq!(net.b.counters().drops(Drop::NoListener), 1);
    assert_eq!(net.b.counters().tcp_resets_out, 1);
    assert!(net.a.read(client, &mut [0; 4]).is_err());
}

#[test]
fn syn_cookies_take_over_when_the_syn_queue_is_full() {
    let mut net = net(LinkConfig::default(), |c| c.syn_queue = 0);
    let listener = net.b.listen(80).unwrap();
    let clients: Vec<_> = (0..5).map(|_| net.a.connect(SocketAddrV4::new(B, 80)).unwrap()).collect();
    let mut accepted = Vec::new();
    net.run_until(|n| {
        while let Some(id) = n.b.accept(listener) {
            accepted.push(id);
        }
        accepted.len() == 5 && clients.iter().all(|&c| n.a.state(c) == State::Established)
    });
    assert_eq!(net.b.counters().syn_cookies_sent, 5);
    assert_eq!(net.b.counters().syn_cookies_accepted, 5);
    // Data flows over a cookie connection.
    net.a.write(clients[0], b"ping").unwrap();
    let mut buf = [0u8; 8];
    let mut got = 0;
    net.run_until(|n| {
        if let Ok(k) = n.b.read(accepted[0], &mut buf) {
            got = k;
        }
        got == 4
    });
    assert_eq!(&buf[..4], b"ping");
    // The cookie carried the SYN's window scale and SACK-permitted in its timestamp: the
    // connection made during the "flood" has them all, as a stateful one would.
    let conn = net.b.interface().connection(accepted[0]).unwrap();
    let space = conn.sequence_space();
    assert!(space.snd_wscale > 0 && space.rcv_wscale > 0, "window scaling kept: {space:?}");
    assert!(conn.sack_enabled() && conn.timestamps_enabled());
    assert_eq!(conn.stats().mss, 1448, "1460 less the timestamps");
}

#[test]
fn lossy_link_still_delivers_everything() {
    let link = LinkConfig::default().with_loss(0.05).with_duplicate(0.01).with_reorder(0.05, Duration::from_millis(3));
    let mut net = net(link, |_| {});
    let listener = net.b.listen(7).unwrap();
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    let mut server = None;
    net.run_until(|n| {
        server = server.or_else(|| n.b.accept(listener));
        server.is_some()
    });
    let server = server.unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 32768];
    net.run_until(|n| {
        if sent < data.len()
            && let Ok(k) = n.a.write(client, &data[sent..])
        {
            sent += k;
        }
        while let Ok(k @ 1..) = n.b.read(server, &mut buf) {
            got.extend_from_slice(&buf[..k]);
        }
        got.len() == data.len()
    });
    assert_eq!(got, data);
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let mac_b = net.b.device().info().mac;
    let mac_a = net.a.device().info().mac;
    let mut frames: Vec<Vec<u8>> = vec![vec![0xff; 13], vec![1, 2, 3]];
    // IPv4 with a bad header checksum, a fragment ending beyond the largest datagram (the
    // "ping of death"), another host, an unknown protocol.
    let ip = |proto: u8, dst: Ipv4Addr, frag: u16, good_sum: bool| {
        let mut f = Vec::new();
        f.extend_from_slice(&mac_b);
        f.extend_from_slice(&mac_a);
        f.extend_from_slice(&[0x08, 0x00]);
        let mut h = etherparse_header(proto, dst, frag);
        if !good_sum {
            h[10] ^= 0xff;
        }
        f.extend_from_slice(&h);
        f.extend_from_slice(&[0u8; 20]);
        f
    };
    frames.push(ip(6, B, 0, false));
    frames.push(ip(6, B, 0x1fff, true));
    frames.push(ip(6, Ipv4Addr::new(10, 9, 0, 99), 0, true));
    frames.push(ip(47, B, 0, true));
    frames.push(ip(6, B, 0, true)); // TCP with a zero checksum: bad
    let mut ipv6 = frames[2].clone();
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    frames.push(ipv6);
    for f in &frames {
        net.a
            .device_mut()
            .send(&mut |buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            })
            .unwrap();
    }
    net.a.device_mut().flush().unwrap();
    for _ in 0..5 {
        net.step();
    }
    let c = net.b.counters();
    assert_eq!(c.drops(Drop::Truncated), 2);
    assert_eq!(c.drops(Drop::BadIpv4Checksum), 1);
    assert_eq!(c.drops(Drop::FragmentDropped), 1);
    assert_eq!(c.drops(Drop::WrongIpAddress), 1);
    assert_eq!(c.drops(Drop::UnknownProtocol), 1);
    assert_eq!(c.drops(Drop::BadTcp), 1);
    assert_eq!(c.drops(Drop::UnknownEthertype), 1);
    // And the host still serves.
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    net.run_until(|n| n.b.accept(listener).is_some() && n.a.state(client) == State::Established);
}

/// A 20-byte IPv4 header with a correct checksum for a 20-byte payload.
fn etherparse_header(proto: u8, dst: Ipv4Addr, frag: u16) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&40u16.to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&A.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let mut sum: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

#[test]
fn icmp_echo_reply_checksum_is_valid() {
    let mut net = net(LinkConfig::default(), |_| {});
    let (mac_a, mac_b) = (net.a.device().info().mac, net.b.device().info().mac);
    // An echo request from A's MAC to B, built by hand with a correct checksum.
    let mut icmp = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
    let sum = internet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::new();
    f.extend_from_slice(&mac_b);
    f.extend_from_slice(&mac_a);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut h = etherparse_header(1, B, 0);
    h[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
    h[10..12].fill(0);
    let sum = internet_checksum(&h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&icmp);
    net.a
        .device_mut()
        .send(&mut |buf| {
            buf[..f.len()].copy_from_slice(&f);
            f.len()
        })
        .unwrap();
    net.a.device_mut().flush().unwrap();
    let sent = Collector::install(&mut net.b);
    for _ in 0..5 {
        net.step();
    }
    let reply = sent.lock().unwrap().iter().find(|f| f.len() > 34 && f[23] == 1).cloned();
    let reply = reply.expect("an echo reply");
    assert_eq!(reply[34], 0, "echo reply type");
    assert_eq!(internet_checksum(&reply[34..]), 0, "the reply's checksum must verify");
    assert_eq!(&reply[42..], b"ping");
}

#[test]
fn rst_in_syn_received_frees_the_table_entry() {
    // Found by the stack_frame fuzz target: a connection back in LISTEN after an RST kept
    // its table entry, and the next segment for that 4-tuple panicked.
    let mut net = net(LinkConfig::default(), |_| {});
    let _listener = net.b.listen(7).unwrap();
    let (mac_a, mac_b) = (net.a.device().info().mac, net.b.device().info().mac);
    let tcp = |flags: u8, seq: u32| {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&7u16.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t[14..16].copy_from_slice(&1000u16.to_be_bytes());
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&A.octets());
        pseudo.extend_from_slice(&B.octets());
        pseudo.extend_from_slice(&[0, 6, 0, 20]);
        pseudo.extend_from_slice(&t);
        let sum = internet_checksum(&pseudo);
        t[16..18].copy_from_slice(&sum.to_be_bytes());
        let mut f = Vec::new();
        f.extend_from_slice(&mac_b);
        f.extend_from_slice(&mac_a);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&etherparse_header(6, B, 0));
        f.extend_from_slice(&t);
        f
    };
    for f in [tcp(0x02, 0x1000), tcp(0x04, 0x1001), tcp(0x10, 0x1001), tcp(0x02, 0x2000)] {
        net.a
            .device_mut()
            .send(&mut |buf| {
                buf[..f.len()].copy_from_slice(&f);
                f.len()
            })
            .unwrap();
        net.a.device_mut().flush().unwrap();
        for _ in 0..3 {
            net.step();
        }
    }
    // No panic, and the host still accepts connections on that port.
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    net.run_until(|n| n.a.state(client) == State::Established);
}

// -------------------------------------------------------------------------------------
// Martian sources (RFC 1122 3.2.1.3): dropped before any protocol sees them.
// -------------------------------------------------------------------------------------

/// Return a frame from A's MAC to B's carrying a TCP SYN to port 7, and one carrying an
/// ICMP echo request, both from `src` (checksums valid for that source).
fn syn_and_ping_from(net: &Net, src: Ipv4Addr) -> [Vec<u8>; 2] {
    let (mac_a, mac_b) = (net.a.device().info().mac, net.b.device().info().mac);
    let syn = bypass_tcp::Segment {
        src_port: 40_000,
        dst_port: 7,
        seq: bypass_tcp::SeqNum(1),
        flags: bypass_tcp::Flags::SYN,
        window: 1000,
        ..bypass_tcp::Segment::EMPTY
    };
    let mut tcp = [0u8; 20];
    syn.emit(src.into(), B.into(), &mut tcp).unwrap();
    let mut icmp = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1];
    let sum = internet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    [(6u8, tcp.to_vec()), (1u8, icmp)].map(|(proto, body)| {
        let mut f = Vec::new();
        f.extend_from_slice(&mac_b);
        f.extend_from_slice(&mac_a);
        f.extend_from_slice(&[0x08, 0x00]);
        let ip = etherparse::Ipv4Header::new(body.len() as u16, 64, proto.into(), src.octets(), B.octets()).unwrap();
        let ip = etherparse::Ipv4Header { header_checksum: ip.calc_header_checksum(), ..ip };
        f.extend_from_slice(&ip.to_bytes());
        f.extend_from_slice(&body);
        f
    })
}

fn send_raw(net: &mut Net, frames: &[Vec<u8>]) {
    for f in frames {
        net.a
            .device_mut()
            .send(&mut |buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            })
            .unwrap();
    }
    net.a.device_mut().flush().unwrap();
    for _ in 0..5 {
        net.step();
    }
}

#[test]
fn martian_sources_are_counted_and_dropped() {
    let mut net = net(LinkConfig::default(), |_| {});
    net.b.listen(7).unwrap();
    let martians = [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(10, 9, 0, 255), // B's subnet, 10.9.0.0/24: its directed broadcast
        Ipv4Addr::UNSPECIFIED,        // only while learning an address (DHCP), which we don't do
        Ipv4Addr::new(0, 1, 2, 3),
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::new(239, 255, 255, 250),
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::new(127, 200, 0, 9),
        B, // our own address
    ];
    let frames: Vec<Vec<u8>> = martians.iter().flat_map(|&src| syn_and_ping_from(&net, src)).collect();
    send_raw(&mut net, &frames);
    let c = net.b.counters().clone();
    assert_eq!(c.drops(Drop::MartianSource), 2 * martians.len() as u64, "{c}");
    assert_eq!(c.icmp_echo_replies, 0, "no echo reply to a broadcast, multicast or own address");
    assert_eq!((c.tcp_segments_in, c.tcp_resets_out, c.syn_cookies_sent), (0, 0, 0), "{c}");
    assert_eq!(net.b.interface().connection_count(), 0);
    assert!(c.to_string().contains("drop.martian_source"), "{c}");
    // An ordinary source on the same link is served.
    let [syn, ping] = syn_and_ping_from(&net, Ipv4Addr::new(10, 9, 0, 77));
    send_raw(&mut net, &[syn, ping]);
    let c = net.b.counters();
    assert_eq!((c.icmp_echo_replies, c.drops(Drop::MartianSource)), (1, 2 * martians.len() as u64));
    assert_eq!(c.tcp_segments_in, 1, "the SYN reached the listener");
}

#[test]
fn the_directed_broadcast_follows_the_prefix() {
    // 10.9.0.3 is the broadcast address of B's /30, but on a /31 (RFC 3021: no broadcast)
    // it is the other end of the link.
    for (prefix, martian) in [(30, true), (31, false), (24, false)] {
        let mut net = net(LinkConfig::default(), |c| c.ipv4.as_mut().expect("IPv4 host").prefix_len = prefix);
        let [_, ping] = syn_and_ping_from(&net, Ipv4Addr::new(10, 9, 0, 3));
        send_raw(&mut net, &[ping]);
        let c = net.b.counters();
        assert_eq!(c.drops(Drop::MartianSource), u64::from(martian), "/{prefix}: {c}");
        assert_eq!(c.icmp_echo_replies, u64::from(!martian), "/{prefix}: {c}");
    }
}

/// RFC 1071 checksum of `data`, as a big-endian value ready to store.
fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Behind a device that completes the TCP checksums of what it sends
/// (`ChecksumCaps::tx_offload`, a NIC's `CHECKSUM_PARTIAL`), every segment the host sends
/// carries only the pseudo-header sum, folded and not complemented: the SYN-ACK of a
/// listener's connection and the RST for a closed port (a segment of no connection) alike.
/// Completed as such a device completes it, each checksum is right. Behind a device that
/// completes nothing, they carry whole checksums.
#[test]
fn behind_a_device_that_completes_checksums_segments_carry_the_pseudo_header_sum() {
    use bypass_device::ChecksumCaps;
    let net = net(LinkConfig::default(), |_| {});
    let [syn, _] = syn_and_ping_from(&net, A);
    let mut closed = syn.clone();
    closed[34 + 2..34 + 4].copy_from_slice(&9u16.to_be_bytes());
    bypass_tcp::wire::set_checksum(&mut closed[34..], A.into(), B.into()).unwrap();
    let mac_b = net.b.device().info().mac;
    for offload in [false, true] {
        let mut host = common::Host::new(StackConfig::new(B, 24, [5; 16]), mac_b);
        host.iface.set_device_checksums(ChecksumCaps { rx_verified: false, tx_offload: offload });
        host.iface.listen(7).unwrap();
        host.receive(&syn);
        host.receive(&closed);
        let sent: Vec<Vec<u8>> = host.sent().into_iter().filter(|f| f.len() >= 54 && f[23] == 6).collect();
        let mut flags: Vec<u8> = sent.iter().map(|f| f[34 + 13]).collect();
        flags.sort();
        assert_eq!(flags, [0x12, 0x14], "a SYN-ACK, and an RST-ACK for port 9 (offload {offload})");
        for f in sent {
            let mut seg = f[34..].to_vec();
            if offload {
                let mut pseudo = Vec::new();
                pseudo.extend_from_slice(&B.octets());
                pseudo.extend_from_slice(&A.octets());
                pseudo.extend_from_slice(&[0, 6]);
                pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
                let field = u16::from_be_bytes([seg[16], seg[17]]);
                assert_eq!(field, !internet_checksum(&pseudo), "the pseudo-header sum alone");
                let completed = internet_checksum(&seg);
                seg[16..18].copy_from_slice(&completed.to_be_bytes());
            }
            assert!(bypass_tcp::Segment::parse(&seg, B.into(), A.into()).is_ok(), "offload {offload}: {seg:02x?}");
        }
    }
}

/// A device that states it verified every checksum (`ChecksumCaps::rx_verified`, a NIC's
/// `CHECKSUM_UNNECESSARY`) spares the host verifying them: the same SYN with a wrong TCP
/// checksum is dropped as `bad_tcp` behind a device that verifies nothing, and answered
/// behind one that says it verified it (such a device would never deliver it).
#[test]
fn checksums_the_device_verified_are_not_verified_again() {
    use bypass_device::ChecksumCaps;
    let net = net(LinkConfig::default(), |_| {});
    let [mut syn, _] = syn_and_ping_from(&net, A);
    syn[14 + 20 + 16] ^= 0x5a;
    let mac_b = net.b.device().info().mac;
    for verified in [false, true] {
        let mut host = common::Host::new(StackConfig::new(B, 24, [5; 16]), mac_b);
        host.iface.set_device_checksums(ChecksumCaps { rx_verified: verified, tx_offload: false });
        host.iface.listen(7).unwrap();
        host.receive(&syn);
        let sent = host.sent();
        let bad = host.iface.counters().drops(Drop::BadTcp);
        if verified {
            assert_eq!(bad, 0);
            assert!(sent.iter().any(|f| f.len() > 34 && f[23] == 6), "no SYN-ACK: {sent:02x?}");
        } else {
            assert_eq!(bad, 1);
            assert!(sent.iter().all(|f| f.len() < 34 || f[23] != 6), "a bad SYN was answered");
        }
    }
}

/// In one transmit, the connections the application holds go before those it released: a
/// client that closes one connection and opens the next puts the SYN on the wire before the
/// FIN, so a device that hands each frame on before it takes the next (copy-mode AF_XDP on
/// a veth) does not make the new handshake wait behind the old teardown.
#[test]
fn a_new_handshake_goes_out_before_the_teardown_of_a_released_connection() {
    let mut net = net(LinkConfig::default(), |_| {});
    let listener = net.b.listen(7).unwrap();
    let (old, _) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let sent = Collector::install(&mut net.a);
    net.a.close(old);
    let new = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    net.a.poll().unwrap();
    let flags: Vec<u8> =
        sent.lock().unwrap().iter().filter(|f| f.len() >= 54 && f[23] == 6).map(|f| f[34 + 13]).collect();
    assert_eq!(flags, [0x02, 0x11], "the SYN, then the FIN-ACK");
    // Both go on as ever: the new connection opens, the old one's FIN is acknowledged.
    let mut server = None;
    net.run_until(|n| {
        server = server.or_else(|| n.b.accept(listener));
        server.is_some() && n.a.state(new) == State::Established && n.a.state(old) == State::FinWait2
    });
}

#[test]
fn a_connection_keeps_its_buffers_while_busy_and_gives_them_back_once_idle() {
    let link = LinkConfig { delay: Duration::from_micros(20), ..LinkConfig::default() };
    let mut net = net(link, |_| {});
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let exchange = |net: &mut Net| {
        net.a.write(client, &[7; 64]).unwrap();
        let mut buf = [0u8; 64];
        net.run_until(|n| n.b.read(server, &mut buf).ok() == Some(64));
        net.b.write(server, &buf).unwrap();
        net.run_until(|n| n.a.read(client, &mut buf).ok() == Some(64));
    };
    // Back-to-back exchanges: the server's buffers stay attached between them.
    let start = net.now;
    for _ in 0..10 {
        exchange(&mut net);
    }
    assert!(net.now < start + Duration::from_millis(2), "the exchanges took {:?}", net.now - start);
    let counters = net.b.counters();
    assert_eq!((counters.buffers_allocated, counters.buffers_recycled), (2, 0), "{counters}");
    assert_eq!(net.b.interface().pooled_buffers(), 0);
    // Idle for 100 ms (past the client's delayed ACK of the last echo, 40 ms, which
    // empties the server's send buffer): both go back to the pool, and the next exchange
    // takes them again.
    let idle_until = net.now + Duration::from_millis(100);
    net.run_until(|n| n.now >= idle_until);
    assert_eq!(net.b.interface().pooled_buffers(), 2);
    exchange(&mut net);
    let counters = net.b.counters();
    assert_eq!((counters.buffers_allocated, counters.buffers_recycled), (2, 2), "{counters}");
}

#[test]
fn a_connection_reset_with_unread_data_leaves_none_of_it_to_the_next() {
    // A removed connection's empty buffers go to the pool, zeroed; one still holding bytes
    // (here: received, never read, then reset by the close) is freed with it. Either way the
    // next connection must read only its own bytes, and as many as were sent.
    let mut net = net(LinkConfig::default(), |c| {
        c.tcp.send_buffer = 4096;
        c.tcp.recv_buffer = 4096;
        c.tcp.send_buffer_max = 4096;
        c.tcp.recv_buffer_max = 4096;
    });
    let listener = net.b.listen(7).unwrap();
    let unread = vec![0x5au8; 3000];
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    let mut server = None;
    let mut sent = 0;
    net.run_until(|n| {
        server = server.or_else(|| n.b.accept(listener));
        if sent < unread.len()
            && let Ok(k) = n.a.write(client, &unread[sent..])
        {
            sent += k;
        }
        server.and_then(|s| n.b.interface().connection(s)).is_some_and(|c| c.recv_available() == unread.len())
    });
    net.b.close(server.unwrap());
    net.run_until(|n| n.b.interface().connection_count() == 0 && n.a.state(client) == State::Closed);
    let reset = net.a.read(client, &mut [0; 8]).unwrap_err();
    assert_eq!(reset.kind(), std::io::ErrorKind::ConnectionReset, "closed with unread data: {reset}");

    let message: Vec<u8> = (0..2000u32).map(|i| (i * 7 + 1) as u8).collect();
    let (_, _, got) = send_to_listener(&mut net, listener, &message);
    assert_eq!(got, message);
}

/// Connect from host a to `listener` on host b, write `message` and read on the accepted
/// connection until as many bytes (or more) arrived; return the client, the server's
/// connection and what it read.
fn send_to_listener(net: &mut Net, listener: ListenerId, message: &[u8]) -> (SocketId, SocketId, Vec<u8>) {
    let client = net.a.connect(SocketAddrV4::new(B, 7)).unwrap();
    let mut server = None;
    let (mut sent, mut got) = (0, Vec::new());
    net.run_until(|n| {
        server = server.or_else(|| n.b.accept(listener));
        if sent < message.len()
            && let Ok(k) = n.a.write(client, &message[sent..])
        {
            sent += k;
        }
        let mut buf = [0u8; 1500];
        while let Some(Ok(k @ 1..)) = server.map(|s| n.b.read(s, &mut buf)) {
            got.extend_from_slice(&buf[..k]);
        }
        got.len() >= message.len()
    });
    (client, server.expect("accepted"), got)
}
