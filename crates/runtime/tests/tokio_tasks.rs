//! The async API under tokio: 1,000 tasks, each with its own connection between two
//! runtimes over the in-memory link, byte-exact; accept, connect, half-close and errors
//! through `.await`. Every test runs in both modes: `NAME::in_thread` and `NAME::shard`.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bypass_device::{Clock, LinkConfig, MemoryLink};
use bypass_runtime::tokio::{TcpListener, TcpStream};
use bypass_runtime::{Mode, Runtime, RuntimeOptions};
use bypass_stack::StackConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);

fn pair(mode: Mode) -> (Runtime, Runtime) {
    let _ = env_logger::builder().is_test(true).try_init();
    let (a, b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 2).clock(Clock::real()).build();
    let tweak = |mut c: StackConfig| {
        c.max_connections = 4096;
        c.tcp.send_buffer = 64 * 1024;
        c.tcp.recv_buffer = 64 * 1024;
        c
    };
    let options = RuntimeOptions { mode, ..RuntimeOptions::default() };
    let server = Runtime::start(vec![a], tweak(StackConfig::new(SERVER, 24, [3; 16])), options.clone());
    let client = Runtime::start(vec![b], tweak(StackConfig::new(CLIENT, 24, [4; 16])), options);
    (server.expect("server runtime"), client.expect("client runtime"))
}

fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(7) ^ n.wrapping_mul(13) ^ (i >> 9)) as u8).collect()
}

async fn a_thousand_tasks_echo_byte_exact(mode: Mode) {
    let (server, client) = pair(mode);
    let client = std::sync::Arc::new(client);
    let listener = TcpListener::bind(&server, 7).unwrap();
    let acceptor = tokio::spawn(async move {
        let mut served = 0usize;
        while served < 1000 {
            let (mut stream, _) = listener.accept().await.expect("accept");
            served += 1;
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(&mut stream);
                tokio::io::copy(&mut r, &mut w).await.expect("echo");
                w.shutdown().await.expect("FIN");
            });
        }
        served
    });
    let tasks: Vec<_> = (0..1000)
        .map(|n| {
            let client = std::sync::Arc::clone(&client);
            tokio::spawn(async move {
                let mut s = TcpStream::connect(&client, SocketAddr::from((SERVER, 7))).await.expect("connect");
                let want = pattern(n, 10_000 + n * 13);
                let (mut r, mut w) = tokio::io::split(&mut s);
                let send = async {
                    w.write_all(&want).await.expect("write");
                    w.shutdown().await.expect("shutdown");
                };
                let mut got = Vec::new();
                let recv = r.read_to_end(&mut got);
                let (_, read) = tokio::join!(send, recv);
                read.expect("read");
                assert!(got == want, "task {n}: echoed bytes differ ({} of {})", got.len(), want.len());
            })
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t).await.expect("in time").expect("task");
    }
    assert_eq!(acceptor.await.unwrap(), 1000);
    let counters = std::sync::Arc::into_inner(client).unwrap().stop().unwrap();
    assert_eq!(counters[0].connections_opened, 1000);
    drop(server);
}

async fn connect_to_a_closed_port_is_refused_through_await(mode: Mode) {
    let (server, client) = pair(mode);
    let err = TcpStream::connect(&client, SocketAddr::from((SERVER, 99))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    drop(server);
}

async fn a_current_thread_runtime_is_woken_by_the_stack(mode: Mode) {
    // One tokio thread: every wake-up comes from the stack (the shard's thread, or in-thread
    // the driver and the helper), none from the test polling.
    let (server, client) = pair(mode);
    let listener = TcpListener::bind(&server, 8).unwrap();
    let accept = tokio::spawn(async move { listener.accept().await.unwrap().0 });
    let mut c = TcpStream::connect(&client, SocketAddr::from((SERVER, 8))).await.unwrap();
    let mut s = accept.await.unwrap();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 5];
        s.read_exact(&mut buf).await.unwrap();
        buf
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.write_all(b"later").await.unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), reader).await.unwrap().unwrap(), b"later");
}

mod a_thousand_tasks_echo_byte_exact {
    use bypass_runtime::Mode;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_thread() {
        super::a_thousand_tasks_echo_byte_exact(Mode::InThread).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shard() {
        super::a_thousand_tasks_echo_byte_exact(Mode::Shard).await
    }
}

mod connect_to_a_closed_port_is_refused_through_await {
    use bypass_runtime::Mode;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_thread() {
        super::connect_to_a_closed_port_is_refused_through_await(Mode::InThread).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shard() {
        super::connect_to_a_closed_port_is_refused_through_await(Mode::Shard).await
    }
}

mod a_current_thread_runtime_is_woken_by_the_stack {
    use bypass_runtime::Mode;

    #[tokio::test(flavor = "current_thread")]
    async fn in_thread() {
        super::a_current_thread_runtime_is_woken_by_the_stack(Mode::InThread).await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn shard() {
        super::a_current_thread_runtime_is_woken_by_the_stack(Mode::Shard).await
    }
}
