//! Malformed options on a live connection: the option is skipped and the segment kept, as
//! Linux's `tcp_parse_options` does (RFC 9293 3.1, MUST-7, asks only that an illegal length
//! be handled). Two connections exchange real bytes, and the test rewrites the option area
//! of one data segment (checksum recomputed) before it is parsed and handed over.

use std::net::SocketAddr;

use bypass_tcp::{Config, Connection, DropReason, FourTuple, Instant, Outcome, Segment, State, wire::set_checksum};

fn client_addr() -> SocketAddr {
    "10.0.0.2:40000".parse().unwrap()
}
fn server_addr() -> SocketAddr {
    "10.0.0.1:80".parse().unwrap()
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// Emit everything `from` has to send, pass each segment's bytes through `tamper`, and
/// hand them to `to`. Return the outcomes.
fn deliver(
    now: Instant,
    from: &mut Connection,
    to: &mut Connection,
    mut tamper: impl FnMut(Vec<u8>) -> Vec<u8>,
) -> Vec<Outcome> {
    let mut buf = [0xa5u8; 2048];
    let mut outcomes = Vec::new();
    let (src, dst) = (from.local_addr().ip(), to.local_addr().ip());
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        let mut bytes = tamper(buf[..t.len].to_vec());
        set_checksum(&mut bytes, src, dst).unwrap();
        let seg = Segment::parse(&bytes, src, dst).expect("a malformed option keeps the segment");
        outcomes.push(to.handle_segment_from(now, src, &seg));
    }
    outcomes
}

/// Return `bytes` (a TCP segment) with `extra` option bytes put in front of its options,
/// padded with NOPs to a multiple of 4, and the data offset raised to match.
fn prepend_option(bytes: Vec<u8>, extra: &[u8]) -> Vec<u8> {
    let header_len = usize::from(bytes[12] >> 4) * 4;
    let mut extra = extra.to_vec();
    while !extra.len().is_multiple_of(4) {
        extra.push(0x01);
    }
    let new_len = header_len + extra.len();
    assert!(new_len <= 60, "options do not fit");
    let mut out = bytes[..20].to_vec();
    out[12] = (new_len as u8 / 4) << 4 | (bytes[12] & 0x0f);
    out.extend_from_slice(&extra);
    out.extend_from_slice(&bytes[20..]);
    out
}

/// Return `bytes` with its first timestamps option (`08 0a`) given length 8, the last two
/// bytes of its TSecr left as a NOP pair: a timestamps option the parser must step over.
fn shorten_timestamps(mut bytes: Vec<u8>) -> Vec<u8> {
    let header_len = usize::from(bytes[12] >> 4) * 4;
    let at = (20..header_len - 1).find(|&i| bytes[i] == 0x08 && bytes[i + 1] == 0x0a).expect("timestamps");
    bytes[at + 1] = 8;
    bytes[at + 8] = 0x01;
    bytes[at + 9] = 0x01;
    bytes
}

/// Open a connection between a client and a server with `config`; return both.
fn established(config: &Config) -> (Connection, Connection) {
    let tuple = FourTuple { local: client_addr(), remote: server_addr() };
    let mut client = Connection::connect(config, tuple, ms(0));
    let mut server = Connection::listen(config, server_addr());
    for _ in 0..3 {
        deliver(ms(1), &mut client, &mut server, |b| b);
        deliver(ms(1), &mut server, &mut client, |b| b);
    }
    assert_eq!((client.state(), server.state()), (State::Established, State::Established));
    (client, server)
}

fn config(timestamps: bool) -> Config {
    Config { isn_secret: [7; 16], timestamps, delayed_ack: None, ..Config::default() }
}

/// Send `data` from the client with its segment rewritten by `tamper`; return the outcomes
/// and what the server can read.
fn send_tampered(
    client: &mut Connection,
    server: &mut Connection,
    data: &[u8],
    tamper: impl FnMut(Vec<u8>) -> Vec<u8>,
) -> (Vec<Outcome>, Vec<u8>) {
    client.send(data).unwrap();
    let outcomes = deliver(ms(10), client, server, tamper);
    let mut buf = [0u8; 64];
    let n = server.recv(&mut buf).unwrap_or(0);
    (outcomes, buf[..n].to_vec())
}

#[test]
fn data_with_an_mss_option_of_length_3_is_delivered() {
    let (mut client, mut server) = established(&config(true));
    assert!(server.timestamps_enabled());
    let (outcomes, read) =
        send_tampered(&mut client, &mut server, b"hello", |b| prepend_option(b, &[0x02, 0x03, 0x05]));
    println!("MSS of length 3 in a data segment: {outcomes:?}, read {:?}", String::from_utf8_lossy(&read));
    assert_eq!(read, b"hello");
    // The server's ACK covers it.
    deliver(ms(11), &mut server, &mut client, |b| b);
    assert_eq!(client.send_queued(), 0, "the data was acknowledged");
}

#[test]
fn data_with_a_timestamps_option_of_length_8_is_delivered_without_timestamps() {
    let (mut client, mut server) = established(&config(false));
    assert!(!server.timestamps_enabled());
    let bad_ts = [0x08, 0x08, 0, 0, 0, 1, 0, 0];
    let (outcomes, read) = send_tampered(&mut client, &mut server, b"hello", |b| prepend_option(b, &bad_ts));
    println!("timestamps of length 8 in a data segment: {outcomes:?}, read {:?}", String::from_utf8_lossy(&read));
    assert_eq!(read, b"hello");
}

/// With timestamps in use, a data segment whose only timestamps option has a bad length
/// carries no timestamp once that option is skipped: RFC 7323 3.2 says such a segment
/// SHOULD be dropped, and we keep that drop (Linux accepts it and skips PAWS).
#[test]
fn a_skipped_timestamps_option_leaves_the_segment_without_a_timestamp() {
    let (mut client, mut server) = established(&config(true));
    let (outcomes, read) = send_tampered(&mut client, &mut server, b"hello", shorten_timestamps);
    println!("timestamps of length 8 where timestamps are in use: {outcomes:?}");
    assert_eq!(outcomes, [Outcome::Dropped(DropReason::NoTimestamp)]);
    assert!(read.is_empty());
}
