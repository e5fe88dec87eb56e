//! Many threads on one stack, over the in-memory link on the real clock: two threads on one
//! connection (a reader and a writer, through `try_clone`), 64 threads sharing 1,000
//! connections, and a tokio runtime of four workers serving 100 connections of many round
//! trips each. All byte-exact, and each bounded in time (a deadlock fails, it does not hang).
//! The in-thread mode is where threads meet inside the stack; each test also runs with shards
//! where the API allows (`try_clone` is in-thread only).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bypass_device::{Clock, LinkConfig, MemoryLink};
use bypass_runtime::{Mode, Runtime, RuntimeOptions, TcpStream};
use bypass_stack::StackConfig;

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 2, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 9, 2, 2);
/// Every test finishes within this, or fails.
const BOUND: Duration = Duration::from_secs(60);

fn pair(mode: Mode) -> (Runtime, Runtime) {
    let _ = env_logger::builder().is_test(true).try_init();
    let (a, b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 3).clock(Clock::real()).build();
    let tweak = |mut c: StackConfig| {
        c.max_connections = 4096;
        c.tcp.send_buffer = 64 * 1024;
        c.tcp.recv_buffer = 64 * 1024;
        c
    };
    let options = RuntimeOptions { mode, ..RuntimeOptions::default() };
    let server = Runtime::start(vec![a], tweak(StackConfig::new(SERVER, 24, [5; 16])), options.clone());
    let client = Runtime::start(vec![b], tweak(StackConfig::new(CLIENT, 24, [6; 16])), options);
    (server.expect("server runtime"), client.expect("client runtime"))
}

fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(13) ^ n.wrapping_mul(37) ^ (i >> 11)) as u8).collect()
}

/// Run `f` on a thread and fail if it takes longer than [`BOUND`].
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND).unwrap_or_else(|e| panic!("{what}: not done within {BOUND:?} ({e})"))
}

fn server_addr(port: u16) -> SocketAddr {
    SocketAddr::from((SERVER, port))
}

#[test]
fn a_reader_thread_and_a_writer_thread_share_one_connection_at_each_end() {
    let (server, client) = pair(Mode::InThread);
    const LEN: usize = 8 * 1024 * 1024;
    let listener = server.listen(7).expect("listen");
    // The server reads on one thread and writes what it read back on another.
    let relay = std::thread::spawn(move || {
        let (mut reader, _) = listener.accept().expect("accept");
        let mut writer = reader.try_clone().expect("try_clone in-thread");
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
        let back = std::thread::spawn(move || {
            for chunk in rx {
                writer.write_all(&chunk).expect("server write");
            }
            writer.shutdown(Shutdown::Write).expect("server FIN");
        });
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = reader.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            tx.send(buf[..n].to_vec()).expect("to the writer thread");
        }
        drop(tx);
        back.join().expect("server writer");
    });
    let got = bounded("two threads on one connection", move || {
        let mut reader = client.connect(server_addr(7)).expect("connect");
        let mut writer = reader.try_clone().expect("try_clone in-thread");
        let sent = std::thread::spawn(move || {
            let want = pattern(1, LEN);
            for piece in want.chunks(50_000) {
                writer.write_all(piece).expect("client write");
            }
            writer.shutdown(Shutdown::Write).expect("client FIN");
        });
        let mut got = Vec::with_capacity(LEN);
        reader.read_to_end(&mut got).expect("client read");
        sent.join().expect("client writer");
        got
    });
    relay.join().expect("relay");
    assert!(got == pattern(1, LEN), "{} of {LEN} bytes came back, or different", got.len());
}

#[test]
fn try_clone_is_refused_clearly_with_shards() {
    let (server, client) = pair(Mode::Shard);
    let _listener = server.listen(7).expect("listen");
    let stream = client.connect(server_addr(7)).expect("connect");
    let err = stream.try_clone().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("Mode::InThread"), "{err}");
}

/// 64 threads, each with its own share of 1,000 connections, writing and reading in turns.
fn sixty_four_threads_with_a_thousand_connections(mode: Mode) {
    let (server, client) = pair(mode);
    common::echo_forever(&server, 9);
    let client = Arc::new(client);
    let total = bounded("64 threads, 1,000 connections", move || {
        let threads: Vec<_> = (0..64)
            .map(|t| {
                let client = Arc::clone(&client);
                std::thread::spawn(move || {
                    let mine: Vec<usize> = (0..1000).filter(|n| n % 64 == t).collect();
                    let mut streams: Vec<(usize, TcpStream, Vec<u8>)> = mine
                        .iter()
                        .map(|&n| {
                            let s = client.connect_timeout(server_addr(9), Duration::from_secs(20)).expect("connect");
                            (n, s, pattern(n, 3_000 + n * 5))
                        })
                        .collect();
                    // Three rounds: a third of each pattern out, then its echo in, per connection.
                    for round in 0..3 {
                        for (_, s, want) in &mut streams {
                            let third = want.len().div_ceil(3);
                            let part = &want[(round * third).min(want.len())..((round + 1) * third).min(want.len())];
                            s.write_all(part).expect("write");
                        }
                        for (n, s, want) in &mut streams {
                            let third = want.len().div_ceil(3);
                            let part = &want[(round * third).min(want.len())..((round + 1) * third).min(want.len())];
                            let mut got = vec![0u8; part.len()];
                            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                            s.read_exact(&mut got).expect("echo");
                            assert!(got == part, "connection {n}, round {round}: echoed bytes differ");
                        }
                    }
                    streams.len()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("client thread")).sum::<usize>()
    });
    assert_eq!(total, 1000);
    let counters = server.stop().expect("server stops");
    assert_eq!(counters[0].connections_accepted, 1000);
}

#[test]
fn sixty_four_threads_with_a_thousand_connections_in_thread() {
    sixty_four_threads_with_a_thousand_connections(Mode::InThread);
}

#[test]
fn sixty_four_threads_with_a_thousand_connections_shard() {
    sixty_four_threads_with_a_thousand_connections(Mode::Shard);
}

/// A tokio runtime of four workers serves 100 connections, each making 200 round trips of
/// a request whose echo is checked before the next goes out.
fn four_workers_serve_a_hundred_connections(mode: Mode) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, client) = pair(mode);
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let listener = {
        let _guard = tokio.enter();
        bypass_runtime::tokio::TcpListener::bind(&server, 11).expect("listen")
    };
    tokio.spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let client = Arc::new(client);
    let trips = tokio.block_on(async move {
        let tasks: Vec<_> = (0..100)
            .map(|n| {
                let client = Arc::clone(&client);
                tokio::spawn(async move {
                    let mut s =
                        bypass_runtime::tokio::TcpStream::connect(&client, server_addr(11)).await.expect("connect");
                    s.set_nodelay(true).unwrap();
                    let mut got = vec![0u8; 600];
                    for trip in 0..200 {
                        let want = pattern(n * 1000 + trip, 100 + (n * 7 + trip) % 500);
                        s.write_all(&want).await.expect("request");
                        s.read_exact(&mut got[..want.len()]).await.expect("echo");
                        assert!(got[..want.len()] == want[..], "connection {n}, trip {trip}: echo differs");
                    }
                    200usize
                })
            })
            .collect();
        let mut trips = 0;
        for t in tasks {
            trips += tokio::time::timeout(BOUND, t).await.expect("within the bound").expect("task");
        }
        trips
    });
    assert_eq!(trips, 100 * 200);
    tokio.shutdown_timeout(Duration::from_secs(1));
    drop(server);
}

#[test]
fn four_tokio_workers_serve_a_hundred_connections_in_thread() {
    four_workers_serve_a_hundred_connections(Mode::InThread);
}

#[test]
fn four_tokio_workers_serve_a_hundred_connections_shard() {
    four_workers_serve_a_hundred_connections(Mode::Shard);
}

/// An in-thread application writes into a lossy link and then stays away: what was lost is
/// retransmitted by the helper, whose sleep on the device ends at the timer the write armed,
/// not at the one it knew before (idle, it knew none). Each byte reaches the server (on its
/// own thread) well before the application returns.
#[test]
fn what_an_application_wrote_before_it_left_is_retransmitted_while_it_is_away() {
    let _ = env_logger::builder().is_test(true).try_init();
    let lossy = LinkConfig::default().with_loss(0.5);
    let (a, b) = MemoryLink::new(LinkConfig::default(), lossy, 7).clock(Clock::real()).build();
    let server = Runtime::start(
        vec![a],
        StackConfig::new(SERVER, 24, [5; 16]),
        RuntimeOptions { mode: Mode::Shard, ..RuntimeOptions::default() },
    )
    .expect("server runtime");
    let client = Runtime::start(vec![b], StackConfig::new(CLIENT, 24, [6; 16]), RuntimeOptions::default())
        .expect("client runtime");
    let listener = server.listen(13).expect("listen");
    let mut c = client.connect_timeout(server_addr(13), Duration::from_secs(20)).expect("connect");
    c.set_nodelay(true).unwrap();
    let (mut s, _) = listener.accept().expect("accept");
    // Retransmissions (200 ms, then backing off) arrive within this unless three in a row
    // are lost; without the helper they would wait for the application's next call.
    s.set_read_timeout(Some(Duration::from_millis(1400))).unwrap();
    const AWAY: Duration = Duration::from_millis(1500);
    for i in 0..5u8 {
        let sent = std::time::Instant::now();
        c.write_all(&[i]).expect("write");
        // The application is away: it makes no call until the byte has arrived or the time is up.
        let mut got = [0u8; 1];
        if let Err(e) = s.read_exact(&mut got) {
            panic!("byte {i}: not at the server {:?} after the application wrote it and left ({e})", sent.elapsed());
        }
        assert_eq!(got[0], i);
        std::thread::sleep(AWAY.saturating_sub(sent.elapsed()));
    }
}
