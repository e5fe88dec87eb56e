//! Reading and writing in place ([`Connection::recv_with`], [`Connection::send_with`]) on
//! the simulated network ([`bypass_tcp::sim`]): the applications here are closures over the
//! connections' own buffers, driven between the pair's steps, and every byte is checked.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bypass_tcp::sim::{LinkConfig, Pair, Side};
use bypass_tcp::{Config, Connection, Instant, RecvError, SendError, State};

const MS: Duration = Duration::from_millis(1);
const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// RFC defaults, with a 200 ms minimum RTO (fast links, short tests).
fn config() -> Config {
    Config { min_rto: Duration::from_millis(200), isn_secret: [9; 16], ..Config::default() }
}

/// Buffers of `bytes` that autotuning does not grow, so the rings wrap often.
fn small_buffers(bytes: usize) -> Config {
    Config { send_buffer: bytes, send_buffer_max: bytes, recv_buffer: bytes, recv_buffer_max: bytes, ..config() }
}

/// A clean link with 5 ms of one-way delay.
fn clean() -> LinkConfig {
    LinkConfig::default().with_delay(5 * MS)
}

/// Byte `offset` of the stream `key` sends.
fn pattern(key: u64, offset: u64) -> u8 {
    let x = (offset ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// A pair with both connections established.
fn established(client: &Config, server: &Config, link: LinkConfig, seed: u64) -> Pair {
    init_log();
    let mut pair = Pair::new(client, server, link, link, seed);
    let deadline = pair.now() + Duration::from_secs(10);
    assert!(pair.run_until(Pair::both_established, deadline), "{:?}", pair.error());
    pair
}

/// What the applications did in one turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Everything they wanted happened.
    Done,
    /// They read, wrote or closed something.
    Busy,
    /// Nothing: they wait for the network.
    Idle,
}

/// Run `app` on the pair's connections and the pair itself in turn until `app` is done; fail
/// at `deadline`, on a run error, or when neither `app` nor the pair has anything to do.
fn drive(pair: &mut Pair, deadline: Instant, mut app: impl FnMut(&mut Pair) -> Turn) {
    // The pair's last step left nothing scheduled (what it did may still give `app` work).
    let mut pair_idle = false;
    loop {
        let turn = app(pair);
        if turn == Turn::Done {
            return;
        }
        assert!(!(pair_idle && turn == Turn::Idle), "stalled at {}: {:?}", pair.now(), pair.check(deadline));
        assert!(pair.error().is_none(), "{:?}", pair.error());
        assert!(pair.now() < deadline, "deadline passed at {}", pair.now());
        pair_idle = !pair.step();
    }
}

/// One direction of a stream moved through the closures alone.
#[derive(Debug, Default)]
struct Stream {
    key: u64,
    len: u64,
    sent: u64,
    received: u64,
    eof: bool,
    /// Calls whose slice was shorter than what the connection had: the ring wrapped.
    send_wraps: u32,
    recv_wraps: u32,
}

impl Stream {
    fn new(key: u64, len: usize) -> Stream {
        Stream { key, len: len as u64, ..Stream::default() }
    }

    /// Write in place, at most `chunk` bytes per call, while the connection has room (as an
    /// event loop that waits to be writable, so `send_with` never finds the buffer full) and
    /// until all is queued; close once it is. Each call scribbles 0xa5 over all the room it
    /// is lent and then writes the pattern over the bytes it reports, so a byte sent that
    /// was not reported would show.
    fn write(&mut self, conn: &mut Connection, now: Instant, chunk: usize) -> bool {
        let before = self.sent;
        while self.sent < self.len && conn.send_capacity() > 0 {
            let capacity = conn.send_capacity();
            let (key, sent, left) = (self.key, self.sent, self.len - self.sent);
            let result = conn.send_with(|buf| {
                let n = buf.len().min(chunk).min(usize::try_from(left).unwrap_or(usize::MAX));
                buf.fill(0xa5);
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    *b = pattern(key, sent + i as u64);
                }
                (n, (n, buf.len()))
            });
            match result {
                Ok((n, lent)) => {
                    self.sent += n as u64;
                    self.send_wraps += u32::from(lent < capacity);
                }
                Err(e) => panic!("send_with after {} bytes, with {capacity} free: {e}", self.sent),
            }
        }
        if self.sent == self.len && matches!(conn.state(), State::Established | State::CloseWait) {
            conn.close(now);
            return true;
        }
        self.sent > before
    }

    /// Read in place, consuming at most `chunk` bytes per call, for at most `calls` calls or
    /// until nothing is readable; check every byte, and that the end of the stream comes as
    /// an empty slice after all.
    fn read(&mut self, conn: &mut Connection, chunk: usize, calls: usize) -> bool {
        let (before, eof) = (self.received, self.eof);
        for _ in 0..calls {
            if self.eof {
                break;
            }
            let available = conn.recv_available();
            let (key, received) = (self.key, self.received);
            let result = conn.recv_with(|data| {
                let n = data.len().min(chunk);
                if let Some(i) = (0..n).find(|&i| data[i] != pattern(key, received + i as u64)) {
                    let (offset, got) = (received + i as u64, data[i]);
                    panic!("byte {offset} is {got:#04x}, not {:#04x}", pattern(key, offset));
                }
                (n, (n, data.len()))
            });
            match result {
                Ok((_, 0)) => {
                    assert_eq!((self.received, available), (self.len, 0), "the end of the stream after every byte");
                    self.eof = true;
                }
                Ok((n, shown)) => {
                    self.received += n as u64;
                    self.recv_wraps += u32::from(shown < available);
                    assert!(self.received <= self.len, "more than was sent");
                }
                Err(RecvError::WouldBlock) => break,
                Err(e) => panic!("recv_with after {} bytes: {e}", self.received),
            }
        }
        self.received > before || self.eof != eof
    }
}

/// How the applications of [`exchange`] move data: at most `write` bytes per `send_with`
/// call, `read` bytes per `recv_with` call and `reads` calls of it per turn.
#[derive(Clone, Copy, Debug)]
struct Pace {
    write: usize,
    read: usize,
    reads: usize,
}

/// As much as the buffers allow.
const FAST: Pace = Pace { write: usize::MAX, read: usize::MAX, reads: usize::MAX };

/// Stream `up` bytes from the client and `down` from the server through the closures at
/// `pace`, closing each way once queued, and run until both connections are CLOSED.
fn exchange(pair: &mut Pair, up: &mut Stream, down: &mut Stream, pace: Pace, secs: u64) {
    let deadline = pair.now() + Duration::from_secs(secs);
    drive(pair, deadline, |p| {
        let now = p.now();
        let wrote =
            up.write(p.conn_mut(Side::Client), now, pace.write) | down.write(p.conn_mut(Side::Server), now, pace.write);
        let read = up.read(p.conn_mut(Side::Server), pace.read, pace.reads)
            | down.read(p.conn_mut(Side::Client), pace.read, pace.reads);
        match (up.eof && down.eof && p.both_closed(), wrote || read) {
            (true, _) => Turn::Done,
            (false, true) => Turn::Busy,
            (false, false) => Turn::Idle,
        }
    });
}

// --- Bulk transfer ----------------------------------------------------------------------------

#[test]
fn megabytes_each_way_arrive_byte_exact_through_the_closures_alone() {
    let link =
        LinkConfig::default().with_delay(5 * MS).with_bandwidth(200_000_000).with_loss(0.01).with_reorder(0.02, 2 * MS);
    let mut pair = established(&config(), &config(), link, 3);
    let mut up = Stream::new(1, 4 * MIB);
    let mut down = Stream::new(2, 3 * MIB + 17);
    exchange(&mut pair, &mut up, &mut down, FAST, 600);
    assert_eq!((up.received, down.received), (up.len, down.len));
    let client = pair.client().stats();
    assert!(client.retransmits > 0, "losses were repaired from the send buffer: {client:?}");
}

#[test]
fn a_buffer_kept_full_in_place_grows_with_autotuning() {
    // 1 Gbit/s with 40 ms of round trip: 5 MB in flight, twenty times the default buffer.
    // Only a sender the buffer holds back grows it: one writing in place is seen to be.
    let link = LinkConfig::default().with_delay(20 * MS).with_bandwidth(1_000_000_000);
    let mut pair = established(&config(), &config(), link, 4);
    let mut up = Stream::new(3, 64 * MIB);
    let mut down = Stream::new(4, 0);
    exchange(&mut pair, &mut up, &mut down, FAST, 600);
    // The client received nothing, so its receive buffer kept its size.
    let grown = pair.client().buffer_capacity() - config().recv_buffer;
    println!("64 MiB in {}; the send buffer grew to {grown} bytes", pair.now());
    assert!(grown >= 4 * config().send_buffer, "the send buffer grew to {grown} bytes");
}

#[test]
fn partial_reads_and_writes_wrap_both_rings() {
    // 4 KiB rings, written 1000 bytes a call and read 700 bytes a turn, so the reader falls
    // behind and never empties its ring: the data wraps around the end of both buffers, and
    // the slices stop at the end of the storage.
    let config = small_buffers(4 * KIB);
    let mut pair = established(&config, &config, clean(), 5);
    let mut up = Stream::new(7, 300 * KIB);
    let mut down = Stream::new(8, 200 * KIB);
    exchange(&mut pair, &mut up, &mut down, Pace { write: 1000, read: 700, reads: 1 }, 600);
    assert_eq!((up.received, down.received), (up.len, down.len));
    println!("{up:?}\n{down:?}");
    for stream in [&up, &down] {
        assert!(stream.send_wraps > 0 && stream.recv_wraps > 0, "{stream:?}");
    }
    assert_eq!(pair.client().buffer_capacity(), 8 * KIB, "the buffers did not grow");
}

// --- The end of the stream and errors ---------------------------------------------------------

#[test]
fn the_end_of_the_stream_is_an_empty_slice_every_time() {
    let mut pair = established(&config(), &config(), clean(), 7);
    let now = pair.now();
    let client = pair.conn_mut(Side::Client);
    let hello = |buf: &mut [u8]| {
        buf[..5].copy_from_slice(b"hello");
        (5, ())
    };
    assert_eq!(client.send_with(hello), Ok(()));
    client.close(now);
    let mut called = false;
    let result = client.send_with(|_| {
        called = true;
        (1, ())
    });
    assert_eq!(result, Err(SendError::InvalidState(State::FinWait1)));
    assert!(!called, "no room is lent after the close");
    let server_closed = |p: &Pair| p.server().state() == State::CloseWait;
    assert!(pair.run_until(server_closed, pair.now() + Duration::from_secs(5)));
    let server = pair.conn_mut(Side::Server);
    assert_eq!(server.recv_with(|data| (data.len(), data.to_vec())), Ok(b"hello".to_vec()));
    for _ in 0..3 {
        assert_eq!(server.recv_with(|data| (7, data.len())), Ok(0), "the end of the stream, again");
    }
    assert_eq!(server.recv(&mut [0xa5; 8]), Ok(0), "as recv says");
    // The server's side is still open for sending.
    assert_eq!(server.send_with(hello), Ok(()));
}

/// Return a closure for `recv_with` or `send_with` that counts its calls in `calls`.
fn counting<T: ?Sized>(calls: &mut u32) -> impl FnOnce(&T) -> (usize, ()) + '_ {
    move |_| {
        *calls += 1;
        (0, ())
    }
}

#[test]
fn errors_after_a_reset_do_not_call_the_closures() {
    let mut pair = established(&config(), &config(), clean(), 9);
    pair.conn_mut(Side::Client).send(b"unread").unwrap();
    assert!(pair.run_until(|p| p.server().recv_available() == 6, pair.now() + Duration::from_secs(5)));
    pair.abort(Side::Client);
    assert!(pair.run_until(|p| p.server().state() == State::Closed, pair.now() + Duration::from_secs(5)));
    let mut calls = 0;
    let server = pair.conn_mut(Side::Server);
    // What arrived before the reset is still read, as `recv` reads it.
    assert_eq!(server.recv_with(|data| (data.len(), data.to_vec())), Ok(b"unread".to_vec()));
    assert_eq!(server.recv_with(counting(&mut calls)), Err(RecvError::Reset));
    assert_eq!(server.send_with(|buf| counting(&mut calls)(buf)), Err(SendError::Reset));
    assert_eq!(server.recv(&mut [0xa5; 8]), Err(RecvError::Reset), "as recv says");
    assert_eq!(server.send(b"x"), Err(SendError::Reset), "as send says");
    // The side that aborted is closed.
    let client = pair.conn_mut(Side::Client);
    assert_eq!(client.recv_with(counting(&mut calls)), Err(RecvError::InvalidState(State::Closed)));
    assert_eq!(client.send_with(|buf| counting(&mut calls)(buf)), Err(SendError::InvalidState(State::Closed)));
    assert_eq!(calls, 0);
}

#[test]
fn would_block_does_not_call_the_closures() {
    let config = small_buffers(4 * KIB);
    let mut pair = established(&config, &config, clean(), 11);
    let mut calls = 0;
    let server = pair.conn_mut(Side::Server);
    assert_eq!(server.recv_with(counting(&mut calls)), Err(RecvError::WouldBlock), "nothing to read");
    // Fill the client's send buffer without letting the pair run: nothing is acknowledged.
    let client = pair.conn_mut(Side::Client);
    let mut lent = 0;
    while let Ok(n) = client.send_with(|buf| (buf.len(), buf.len())) {
        lent += n;
    }
    assert_eq!((lent, client.send_capacity()), (4 * KIB, 0));
    assert_eq!(client.send_with(|buf| counting(&mut calls)(buf)), Err(SendError::WouldBlock), "no room to lend");
    assert_eq!(client.send(b"x"), Err(SendError::WouldBlock), "as send says");
    assert_eq!(calls, 0);
}

#[test]
fn consumed_and_written_counts_are_clamped_to_the_slices() {
    let config = small_buffers(4 * KIB);
    let mut pair = established(&config, &config, clean(), 13);
    let client = pair.conn_mut(Side::Client);
    let lent = client.send_with(|buf| {
        buf[..3].copy_from_slice(b"abc");
        (usize::MAX, buf.len())
    });
    assert_eq!(lent, Ok(4 * KIB));
    assert_eq!((client.send_queued(), client.send_capacity()), (4 * KIB, 0), "all that was lent");
    pair.run_until(|p| p.server().recv_available() == 4 * KIB, pair.now() + Duration::from_secs(5));
    let server = pair.conn_mut(Side::Server);
    assert_eq!(server.recv_with(|data| (usize::MAX, data[..3].to_vec())), Ok(b"abc".to_vec()));
    assert_eq!(server.recv_available(), 0, "all that was shown");
}

// --- Flow control (RFC 9293 3.8.6.2.2) --------------------------------------------------------

/// How a test reads: with `recv` into a buffer, or in place.
#[derive(Clone, Copy, Debug)]
enum Reader {
    Copy,
    InPlace,
}

impl Reader {
    fn read(self, conn: &mut Connection, n: usize) {
        let got = match self {
            Reader::Copy => conn.recv(&mut vec![0xa5; n]),
            Reader::InPlace => conn.recv_with(|data| (n, data.len().min(n))),
        };
        assert_eq!(got, Ok(n));
    }
}

/// Fill a 4 KiB receive window, then read `small` and then `big` bytes: return the windows of
/// what the receiver sent at the instant of each read.
fn window_updates(reader: Reader, small: usize, big: usize) -> (Vec<u16>, Vec<u16>) {
    let client = config();
    let server = Config { window_scaling: false, ..small_buffers(4 * KIB) };
    let mut pair = established(&client, &server, clean(), 17);
    let sent = Rc::new(RefCell::new(Vec::new()));
    let log = sent.clone();
    pair.set_filter(move |side, seg| {
        if side == Side::Server {
            log.borrow_mut().push(seg.window);
        }
        false
    });
    pair.conn_mut(Side::Client).send_with(|buf| (buf.len().min(8 * KIB), ())).unwrap();
    let full = |p: &Pair| p.server().recv_available() == 4 * KIB;
    assert!(pair.run_until(full, pair.now() + Duration::from_secs(5)));
    // Let the ACKs settle: the window is shut.
    pair.run_for(100 * MS);
    assert_eq!(sent.borrow().last(), Some(&0), "{:?}", sent.borrow());
    let mut at_read = |n| {
        sent.borrow_mut().clear();
        reader.read(pair.conn_mut(Side::Server), n);
        // One step does everything due at this instant before the clock moves.
        pair.step();
        std::mem::take(&mut *sent.borrow_mut())
    };
    (at_read(small), at_read(big))
}

#[test]
fn a_big_read_in_place_sends_a_window_update_as_recv_does() {
    for reader in [Reader::Copy, Reader::InPlace] {
        let (small, big) = window_updates(reader, 100, 2000);
        assert_eq!(small, [], "{reader:?}: 100 bytes are not worth an update (SWS avoidance)");
        assert_eq!(big, [2100], "{reader:?}: 2100 bytes are");
    }
}
