//! Our stack as a TCP client against a Linux kernel echo server, over AF_XDP and AF_PACKET.
//!
//! The kernel server is a std `TcpListener` in the peer namespace; the client is a [`Stack`]
//! on a device opened in the bypass namespace, driven in-process with the non-blocking API.
//! Needs root (skips with a message otherwise; fails under `CI=true`). Run serially:
//! `cargo test --release --test client_kernel -- --test-threads=1`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpListener};
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::PacketDevice;
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_lab::testlab::{Lab, lab_available};
use bypass_stack::{Stack, StackConfig};
use bypass_tcp::State;
use common::{Backend, Capture, data, first_difference, peer_nstat};

const LEN: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(20);

/// A kernel echo server for one connection, in the peer namespace: echoes until EOF, then
/// closes. Returns its address and a handle yielding how many bytes it echoed.
fn kernel_echo_server(lab: &Lab) -> (SocketAddrV4, std::thread::JoinHandle<Result<usize, String>>) {
    let peer_ip = lab.peer_ip;
    let listener = lab.in_peer(|| TcpListener::bind((peer_ip, 0))).expect("bind in the peer namespace");
    let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else { unreachable!() };
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let deadline = Instant::now() + DEADLINE;
        let mut conn = loop {
            match listener.accept() {
                Ok((conn, _)) => break conn,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(DEADLINE)).unwrap();
        conn.set_write_timeout(Some(DEADLINE)).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut echoed = 0;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return Ok(echoed),
                Ok(n) => {
                    conn.write_all(&buf[..n]).map_err(|e| format!("kernel server write: {e}"))?;
                    echoed += n;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("kernel server read after {echoed} bytes: {e}")),
            }
        }
    });
    (addr, handle)
}

/// What the in-process client saw.
struct ClientRun {
    counters: bypass_stack::Counters,
    final_state: State,
    elapsed: Duration,
}

/// Connect to `server`, send `message` while reading the echo back, half-close, read to
/// EOF, close; keep polling a moment so the final ACK goes out.
fn run_client<D: Device>(device: D, lab_ip: std::net::Ipv4Addr, server: SocketAddrV4, message: &[u8]) -> ClientRun {
    let mut secret = [0u8; 16];
    common::Rng::new(0xc11e).fill(&mut secret);
    let mut stack = Stack::new(device, StackConfig::new(lab_ip, 24, secret));
    let start = Instant::now();
    let deadline = start + DEADLINE;
    let id = common::connect_established(&mut stack, server, deadline);

    let mut got = vec![0u8; message.len()];
    let (mut sent, mut received, mut shut) = (0, 0, false);
    let mut eof = false;
    while !eof {
        assert!(
            Instant::now() < deadline,
            "stalled: sent {sent}, received {received} of {}, state {:?}; {}",
            message.len(),
            stack.state(id),
            stack.counters()
        );
        while sent < message.len() {
            match stack.write(id, &message[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("write after {sent} bytes: {e}"),
            }
        }
        if sent == message.len() && !shut {
            stack.shutdown(id);
            shut = true;
        }
        loop {
            let mut scratch = [0u8; 1];
            let buf = if received < got.len() { &mut got[received..] } else { &mut scratch[..] };
            match stack.read(id, buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    assert!(received < message.len(), "{n} bytes more than were sent");
                    received += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("read after {received} bytes: {e}"),
            }
        }
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    let elapsed = start.elapsed();
    assert_eq!(received, message.len(), "EOF early");
    assert!(got == message, "echo differs: {}", first_difference(message, &got));
    stack.close(id);
    // Let our last ACK (of the server's FIN) go out.
    let settle = Instant::now() + Duration::from_millis(200);
    while Instant::now() < settle {
        stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
    }
    ClientRun { counters: stack.counters().clone(), final_state: stack.state(id), elapsed }
}

fn client_against_kernel(backend: Backend) {
    let test = format!("client_{}", backend.arg());
    if !lab_available(&test) {
        return;
    }
    common::init_log();
    let lab = common::create_lab(&test, 1);
    let _capture = Capture::start(&lab, &test);
    let before = peer_nstat(&lab);
    let (server, kernel) = kernel_echo_server(&lab);
    let message = data(0xc0ffee, LEN);
    let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
    let run = lab.in_bypass(|| match backend {
        Backend::Xdp => {
            run_client(XdpDevice::open(XdpConfig::new(&iface, ip)).expect("open AF_XDP"), ip, server, &message)
        }
        Backend::Packet => run_client(PacketDevice::open(&iface).expect("open AF_PACKET"), ip, server, &message),
    });
    eprintln!("{backend:?}: 1 MiB echoed by the kernel in {:?}; client counters: {:?}", run.elapsed, run.counters);
    let echoed = kernel.join().expect("kernel server thread").expect("kernel server");
    assert_eq!(echoed, LEN, "the kernel server echoed {echoed} bytes");

    // We resolved the kernel with ARP, and the kernel resolved us.
    assert!(run.counters.arp_requests >= 1, "no ARP request sent: {:?}", run.counters);
    assert_eq!(run.counters.connections_opened, 1, "{:?}", run.counters);
    assert_eq!(run.counters.tcp_resets_out, 0, "{:?}", run.counters);
    assert!(matches!(run.final_state, State::TimeWait | State::Closed), "ended in {:?}", run.final_state);
    let neigh = lab.ip_peer(&["neigh", "show", &lab.bypass_ip.to_string()]).expect("ip neigh show");
    assert!(neigh.contains("lladdr 02:00:00:77:00:02"), "the kernel has no neighbour entry with our MAC: {neigh:?}");
    assert!(
        ["REACHABLE", "STALE", "DELAY"].iter().any(|s| neigh.contains(s)),
        "the kernel's neighbour entry for us is not usable: {neigh:?}"
    );
    let lost = common::bypass_link_rx_packets(&lab).saturating_sub(run.counters.rx_frames);
    let peer = common::peer_changes(&lab, &before);
    if let Err(e) = common::verdict(backend, &peer, lost, common::peer_link_tx_dropped(&lab)) {
        panic!("{e}; links: {}", common::link_drops(&lab));
    }
}

#[test]
fn client_against_kernel_server_xdp() {
    client_against_kernel(Backend::Xdp);
}

#[test]
fn client_against_kernel_server_packet() {
    client_against_kernel(Backend::Packet);
}

/// A connection to a kernel port nobody listens on is refused (the kernel answers RST).
#[test]
fn connect_to_closed_kernel_port_is_refused() {
    if !lab_available("connect_refused") {
        return;
    }
    let lab = common::create_lab("refused", 1);
    // A port that was just free: bind, read it, close.
    let peer_ip = lab.peer_ip;
    let port = lab.in_peer(|| TcpListener::bind((peer_ip, 0)).unwrap().local_addr().unwrap().port());
    let (iface, ip) = (lab.bypass_if.clone(), lab.bypass_ip);
    let state = lab.in_bypass(|| {
        let device = XdpDevice::open(XdpConfig::new(&iface, ip)).expect("open AF_XDP");
        let mut stack = Stack::new(device, StackConfig::new(ip, 24, [3; 16]));
        let id = stack.connect(SocketAddrV4::new(peer_ip, port)).expect("connect");
        let deadline = Instant::now() + Duration::from_secs(5);
        while stack.state(id) == State::SynSent && Instant::now() < deadline {
            stack.poll_wait(Some(Duration::from_millis(10))).expect("poll");
        }
        let mut stream = stack.stream(id);
        stream.set_timeout(Some(Duration::from_secs(1)));
        stream.wait_established().map(|_| ()).map_err(|e| e.kind())
    });
    assert_eq!(state, Err(ErrorKind::ConnectionRefused));
}
