//! The threaded API between two runtimes over the in-memory link, on the real clock: many
//! application threads and 1,000 connections byte-exact, and each std::io behaviour
//! (timeouts, non-blocking, end of stream, refusal, reset, half-close). Every test runs in
//! both modes: `NAME::in_thread` and `NAME::shard`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use bypass_device::{Clock, LinkConfig, MemoryLink};
use bypass_runtime::{Mode, Runtime, RuntimeOptions, TcpStream};
use bypass_stack::StackConfig;

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// A server runtime and a client runtime joined by a lossless in-memory link.
fn pair(mode: Mode, tweak: impl Fn(&mut StackConfig)) -> (Runtime, Runtime) {
    let _ = env_logger::builder().is_test(true).try_init();
    let (a, b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 1).clock(Clock::real()).build();
    let mut server = StackConfig::new(SERVER, 24, [1; 16]);
    let mut client = StackConfig::new(CLIENT, 24, [2; 16]);
    tweak(&mut server);
    tweak(&mut client);
    let options = RuntimeOptions { mode, ..RuntimeOptions::default() };
    let server = Runtime::start(vec![a], server, options.clone()).expect("server runtime");
    let client = Runtime::start(vec![b], client, options).expect("client runtime");
    (server, client)
}

/// The bytes connection `n` sends: distinct per connection and per offset.
fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31) ^ n.wrapping_mul(131) ^ (i >> 8)) as u8).collect()
}

/// Run each named test in both modes, as `NAME::in_thread` and `NAME::shard`.
macro_rules! in_both_modes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn in_thread() {
                super::$name(bypass_runtime::Mode::InThread)
            }
            #[test]
            fn shard() {
                super::$name(bypass_runtime::Mode::Shard)
            }
        }
    )*};
}

in_both_modes!(
    a_thousand_connections_from_twenty_threads_echo_byte_exact,
    a_read_times_out_with_would_block_and_nonblocking_calls_do_not_wait,
    a_nonblocking_writer_sees_would_block_when_the_peer_does_not_read,
    a_closed_port_refuses_and_a_taken_port_is_in_use,
    half_close_end_of_stream_and_reset_on_unread_data,
    bytes_in_place_through_recv_with_and_send_with
);

fn server_addr(port: u16) -> SocketAddr {
    SocketAddr::from((SERVER, port))
}

fn a_thousand_connections_from_twenty_threads_echo_byte_exact(mode: Mode) {
    let (server, client) = pair(mode, |c| {
        c.max_connections = 4096;
        // Small buffers: 1,000 connections each way, in one process.
        c.tcp.send_buffer = 64 * 1024;
        c.tcp.recv_buffer = 64 * 1024;
    });
    common::echo_forever(&server, 7);
    let client = std::sync::Arc::new(client);
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let client = std::sync::Arc::clone(&client);
            std::thread::spawn(move || {
                // Open all 50 first, so the 1,000 are established at once.
                let mut streams: Vec<(usize, TcpStream)> = (0..50)
                    .map(|i| {
                        let n = t * 50 + i;
                        (n, client.connect_timeout(server_addr(7), Duration::from_secs(20)).expect("connect"))
                    })
                    .collect();
                for (n, s) in &mut streams {
                    s.write_all(&pattern(*n, 20_000 + *n * 7)).expect("write");
                }
                for (n, s) in &mut streams {
                    let want = pattern(*n, 20_000 + *n * 7);
                    let mut got = vec![0u8; want.len()];
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    s.read_exact(&mut got).expect("echo");
                    assert!(got == want, "connection {n}: echoed bytes differ");
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut rest = [0u8; 1];
                    assert_eq!(s.read(&mut rest).expect("end of stream"), 0, "connection {n}: end of stream");
                }
                streams.len()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().expect("client thread")).sum();
    assert_eq!(total, 1000);
    let client = std::sync::Arc::into_inner(client).expect("threads are done");
    let counters = client.stop().expect("client stops cleanly");
    assert_eq!(counters[0].connections_opened, 1000);
    let counters = server.stop().expect("server stops cleanly");
    assert_eq!(counters[0].connections_accepted, 1000);
}

fn a_read_times_out_with_would_block_and_nonblocking_calls_do_not_wait(mode: Mode) {
    let (server, client) = pair(mode, |_| {});
    let listener = server.listen(9).unwrap();
    let mut c = client.connect(server_addr(9)).unwrap();
    let (mut s, peer) = listener.accept().unwrap();
    assert_eq!(peer, c.local_addr().unwrap());
    assert_eq!(s.local_addr().unwrap(), server_addr(9));

    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let start = Instant::now();
    let err = s.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(start.elapsed() >= Duration::from_millis(100), "waited {:?}", start.elapsed());
    assert!(s.set_read_timeout(Some(Duration::ZERO)).is_err(), "a zero timeout is refused, as std does");

    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    assert_eq!(s.read(&mut [0u8; 16]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(start.elapsed() < Duration::from_millis(50));

    c.write_all(b"hello").unwrap();
    let mut buf = [0u8; 16];
    let n = loop {
        match s.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(&buf[..n], b"hello");

    let mut l = listener;
    l.set_nonblocking(true).unwrap();
    assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

fn a_nonblocking_writer_sees_would_block_when_the_peer_does_not_read(mode: Mode) {
    // Fixed buffers, as SO_SNDBUF/SO_RCVBUF fix Linux's: without the maxima, autotuning may
    // grow them (a shard that drains the receive buffer at first looks like a fast reader).
    let (server, client) = pair(mode, |c| {
        c.tcp.send_buffer = 16 * 1024;
        c.tcp.recv_buffer = 16 * 1024;
        c.tcp.send_buffer_max = 16 * 1024;
        c.tcp.recv_buffer_max = 16 * 1024;
    });
    let listener = server.listen(9).unwrap();
    let mut c = client.connect(server_addr(9)).unwrap();
    let (s, _) = listener.accept().unwrap();
    c.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 16 * 1024];
    let mut queued = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    // Fill until WouldBlock, let the stacks move what they can, and again, until a round
    // takes nothing: every queue and window on the way is full.
    loop {
        let mut round = 0;
        loop {
            match c.write(&chunk) {
                Ok(n) => round += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
            assert!(Instant::now() < deadline, "a writer to a peer that never reads must hit WouldBlock");
        }
        queued += round;
        if round == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Bounded: the peer's receive window and the queues, not everything offered.
    assert!(queued < 2 * 1024 * 1024, "{queued} bytes queued");
    c.set_write_timeout(Some(Duration::from_millis(100))).unwrap();
    c.set_nonblocking(false).unwrap();
    let start = Instant::now();
    assert_eq!(c.write(&chunk).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(start.elapsed() >= Duration::from_millis(100));
    drop(s);
}

fn a_closed_port_refuses_and_a_taken_port_is_in_use(mode: Mode) {
    let (server, client) = pair(mode, |_| {});
    let err = client.connect(server_addr(81)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    let _l = server.listen(80).unwrap();
    assert_eq!(server.listen(80).unwrap_err().kind(), ErrorKind::AddrInUse);
    let err = client.connect(SocketAddr::from((SERVER, 0))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

fn half_close_end_of_stream_and_reset_on_unread_data(mode: Mode) {
    let (server, client) = pair(mode, |_| {});
    let listener = server.listen(5).unwrap();

    // Half-close: the client's FIN reaches the server as end of stream, and the server's
    // reply still reaches the client.
    let mut c = client.connect(server_addr(5)).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    c.write_all(b"request").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"request");
    s.write_all(b"reply").unwrap();
    drop(s);
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"reply");
    assert_eq!(c.write(b"more").map(|_| ()).unwrap_or(()), ());

    // A handle dropped with data unread resets the connection, as close(2) does.
    let mut c = client.connect(server_addr(5)).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    c.write_all(b"unread").unwrap();
    let mut one = [0u8; 1];
    s.read_exact(&mut one).unwrap();
    drop(s);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let err = c.read(&mut [0u8; 8]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    let err = c.write(b"x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

fn bytes_in_place_through_recv_with_and_send_with(mode: Mode) {
    let (server, client) = pair(mode, |_| {});
    let listener = server.listen(6).unwrap();
    let mut c = client.connect(server_addr(6)).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    let want = pattern(3, 300_000);
    let writer = std::thread::spawn(move || {
        let mut off = 0;
        while off < want.len() {
            off += c
                .send_with(|buf| {
                    let n = buf.len().min(want.len() - off);
                    buf[..n].copy_from_slice(&want[off..off + n]);
                    (n, n)
                })
                .unwrap();
        }
        c.shutdown(Shutdown::Write).unwrap();
        c
    });
    let mut got = Vec::new();
    loop {
        let n = s
            .recv_with(|data| {
                got.extend_from_slice(data);
                (data.len(), data.len())
            })
            .unwrap();
        if n == 0 {
            break;
        }
    }
    assert!(got == pattern(3, 300_000));
    drop(writer.join().unwrap());
}

#[test]
fn streams_and_listeners_are_send() {
    fn send<T: Send>() {}
    send::<bypass_runtime::TcpStream>();
    send::<bypass_runtime::TcpListener>();
    send::<Runtime>();
}
