//! The threaded runtime (bypass-runtime) against the Linux kernel in the lab, over AF_XDP
//! on a veth with two queues and a shard per queue: kernel clients connecting to our
//! listener (accepted on whichever shard the veth steers them to), and our shards opening
//! connections to a kernel server. On a veth the queue a frame arrives on is the peer's
//! transmit queue, which the peer's kernel picks per socket: replies to one shard's SYNs come
//! to either shard, and the other hands them over (and shares what ARP taught it).
//!
//! Needs root: without it each test says why it skips, except under `CI=true`, where it
//! fails.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::time::Duration;

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::lab_available;
use bypass_runtime::{Runtime, RuntimeOptions};
use bypass_stack::StackConfig;

const CONNECTIONS: usize = 100;

fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(29) ^ n.wrapping_mul(101) ^ (i >> 10)) as u8).collect()
}

/// Start a runtime with one shard per queue of the lab's bypass interface.
fn runtime(lab: &bypass_lab::testlab::Lab, shards: u32) -> Runtime {
    let queues: Vec<u32> = (0..shards).collect();
    let devices = lab
        .in_bypass(|| XdpDevice::open_queues(XdpConfig::new(&lab.bypass_if, lab.bypass_ip), &queues))
        .expect("AF_XDP on every queue");
    let mut config = StackConfig::new(lab.bypass_ip, lab.prefix_len, [9; 16]);
    config.ephemeral_ports = (20_000, 60_000);
    Runtime::start(devices, config, RuntimeOptions::default()).expect("runtime")
}

/// Echo `stream` until end of stream, then close.
fn echo(mut stream: impl Read + Write) {
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        if stream.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

#[test]
fn kernel_clients_are_accepted_on_both_shards_and_echoed_byte_exact() {
    let test = "rt-accept";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 2);
    let runtime = runtime(&lab, 2);
    let listener = runtime.listen(7).expect("listen");
    let acceptor = std::thread::spawn(move || {
        let mut shards = [0usize; 2];
        for _ in 0..CONNECTIONS {
            let (stream, _) = listener.accept().expect("accept");
            shards[stream.shard()] += 1;
            std::thread::spawn(move || echo(stream));
        }
        shards
    });
    let server = SocketAddr::from((lab.bypass_ip, 7));
    let clients: Vec<std::net::TcpStream> = lab.in_peer(|| {
        (0..CONNECTIONS)
            .map(|_| std::net::TcpStream::connect_timeout(&server, Duration::from_secs(10)).expect("connect"))
            .collect()
    });
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(n, mut s)| {
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let want = pattern(n, 40_000 + n * 11);
                let mut w = s.try_clone().unwrap();
                let writer = {
                    let want = want.clone();
                    std::thread::spawn(move || {
                        w.write_all(&want).unwrap();
                        w.shutdown(Shutdown::Write).unwrap();
                    })
                };
                let mut got = Vec::new();
                s.read_to_end(&mut got).expect("echo");
                writer.join().unwrap();
                assert!(got == want, "connection {n}: {} of {} bytes, or different", got.len(), want.len());
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client");
    }
    let shards = acceptor.join().expect("acceptor");
    eprintln!("connections accepted per shard: {shards:?}");
    assert_eq!(shards.iter().sum::<usize>(), CONNECTIONS);
    let counters = runtime.stop().expect("clean stop");
    assert_eq!(counters.len(), 2);
}

#[test]
fn shards_open_connections_to_a_kernel_server() {
    let test = "rt-connect";
    if !lab_available(test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(test, 2);
    let kernel = lab.in_peer(|| TcpListener::bind((lab.peer_ip, 9007)).expect("kernel listener"));
    std::thread::spawn(move || {
        for s in kernel.incoming() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || echo(s));
        }
    });
    let runtime = std::sync::Arc::new(runtime(&lab, 2));
    let server = SocketAddr::from((lab.peer_ip, 9007));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|n| {
            let runtime = std::sync::Arc::clone(&runtime);
            std::thread::spawn(move || {
                let mut s = runtime.connect_timeout(server, Duration::from_secs(10)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let want = pattern(n, 30_000 + n * 17);
                s.write_all(&want).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).expect("echo");
                assert!(got == want, "connection {n} on shard {}: {} of {} bytes", s.shard(), got.len(), want.len());
                s.shard()
            })
        })
        .collect();
    let mut shards = [0usize; 2];
    for t in threads {
        shards[t.join().expect("client")] += 1;
    }
    eprintln!("connections opened per shard: {shards:?}");
    assert_eq!(shards, [CONNECTIONS / 2; 2], "active opens take turns across shards");
    let runtime = std::sync::Arc::into_inner(runtime).expect("threads are done");
    let counters = runtime.stop().expect("clean stop");
    let resets: u64 = counters.iter().map(|c| c.tcp_resets_out).sum();
    let handed: Vec<u64> = counters.iter().map(|c| c.frames_handed_over).collect();
    eprintln!("resets sent: {resets}; frames handed to the other shard: {handed:?}");
    assert_eq!(resets, 0, "no reply to an active open may be answered with RST");
}
