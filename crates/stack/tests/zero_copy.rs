//! Reading and writing in place through the host ([`Stack::recv_with`],
//! [`Stack::send_with`]): two hosts over the in-memory link, on virtual time.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};

mod common;

use bypass_device::{LinkConfig, MemoryDevice};
use bypass_stack::{SocketId, Stack, StackConfig};
use bypass_tcp::State;
use common::Net;

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const MIB: u64 = 1024 * 1024;

/// Hosts A and B (10.9.0.1 and .2, /24) over a clean link.
fn net() -> Net {
    Net::new(LinkConfig::default(), StackConfig::new(A, 24, [1; 16]), StackConfig::new(B, 24, [2; 16]))
}

/// Byte `offset` of the stream `key` sends.
fn pattern(key: u64, offset: u64) -> u8 {
    let x = (offset ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// One host's application: it sends `len` bytes of its pattern and reads the peer's, in
/// place only.
struct App {
    id: SocketId,
    key: u64,
    len: u64,
    sent: u64,
    shut: bool,
    peer_key: u64,
    received: u64,
    eof: bool,
}

impl App {
    fn new(id: SocketId, key: u64, peer_key: u64, len: u64) -> App {
        App { id, key, len, sent: 0, shut: false, peer_key, received: 0, eof: false }
    }

    /// Write and read what the connection allows now; check that every call counts its
    /// bytes as handled in place and copies none.
    fn turn(&mut self, stack: &mut Stack<MemoryDevice>) {
        while self.sent < self.len {
            let before = stack.counters().clone();
            let (key, at, left) = (self.key, self.sent, self.len - self.sent);
            let result = stack.send_with(self.id, |buf| {
                let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    *b = pattern(key, at + i as u64);
                }
                (n, n)
            });
            match result {
                Ok(n) => {
                    self.sent += n as u64;
                    let after = stack.counters();
                    assert_eq!(after.bytes_copied, before.bytes_copied, "writing in place copies nothing");
                    assert_eq!(after.bytes_in_place, before.bytes_in_place + n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("send_with after {} bytes: {e}", self.sent),
            }
        }
        if self.sent == self.len && !self.shut {
            stack.shutdown(self.id);
            self.shut = true;
        }
        while !self.eof {
            let before = stack.counters().clone();
            // What FIONREAD would say: every byte the reads below can take.
            let queued = stack.recv_queued(self.id);
            let (key, at) = (self.peer_key, self.received);
            let result = stack.recv_with(self.id, |data| {
                if let Some(i) = (0..data.len()).find(|&i| data[i] != pattern(key, at + i as u64)) {
                    panic!("byte {} is {:#04x}, not {:#04x}", at + i as u64, data[i], pattern(key, at + i as u64));
                }
                (data.len(), data.len())
            });
            match result {
                Ok(0) => {
                    assert_eq!(queued, 0, "end of stream with bytes queued");
                    self.eof = true;
                }
                Ok(n) => {
                    assert!(n <= queued, "read {n} of {queued} queued");
                    assert_eq!(stack.recv_queued(self.id), queued - n);
                    self.received += n as u64;
                    let after = stack.counters();
                    assert_eq!(after.bytes_copied, before.bytes_copied, "reading in place copies nothing");
                    assert_eq!(after.bytes_in_place, before.bytes_in_place + n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv_with after {} bytes: {e}", self.received),
            }
        }
    }
}

#[test]
fn eight_mebibytes_each_way_through_the_closures_copy_nothing_in_the_application() {
    let mut net = net();
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let mut a = App::new(client, 1, 2, 8 * MIB);
    let mut b = App::new(server, 2, 1, 8 * MIB);
    net.run_until(|n| {
        a.turn(&mut n.a);
        b.turn(&mut n.b);
        a.eof && b.eof
    });
    for (app, stack) in [(&a, &net.a), (&b, &net.b)] {
        assert_eq!((app.sent, app.received), (8 * MIB, 8 * MIB));
        let counters = stack.counters();
        assert_eq!(counters.bytes_in_place, 16 * MIB, "every byte sent and received, once");
        // What is left in `bytes_copied` is the host's own copying between the buffers and
        // the frames: once for each byte each way, the link being clean (`read` and `write`
        // would have doubled it).
        assert_eq!(counters.bytes_copied, 16 * MIB, "{counters}");
    }
    net.a.close(client);
    net.b.close(server);
    net.run_until(|n| n.b.interface().connection_count() == 0);
}

/// Return the kind of error of `f`, which must fail, and whether it called its closure.
fn failure<T>(f: impl FnOnce(&mut bool) -> std::io::Result<T>) -> (ErrorKind, bool) {
    let mut called = false;
    match f(&mut called) {
        Ok(_) => panic!("succeeded"),
        Err(e) => (e.kind(), called),
    }
}

#[test]
fn errors_are_those_of_read_and_write_and_the_closures_are_not_called() {
    let mut net = net();
    let listener = net.b.listen(7).unwrap();
    let (client, server) = net.connect(SocketAddrV4::new(B, 7).into(), listener);
    let called = |c: &mut bool| {
        *c = true;
        (0, ())
    };
    // Nothing to read yet.
    assert_eq!(net.b.read(server, &mut [0; 8]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(failure(|c| net.b.recv_with(server, |_| called(c))), (ErrorKind::WouldBlock, false));
    // No writing after a shutdown.
    net.a.shutdown(client);
    assert_eq!(net.a.write(client, b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
    assert_eq!(failure(|c| net.a.send_with(client, |_| called(c))), (ErrorKind::BrokenPipe, false));
    // The end of the stream is an empty slice.
    net.run_until(|n| n.b.state(server) == State::CloseWait);
    assert_eq!(net.b.recv_with(server, |data| (0, data.len())).unwrap(), 0);
    // A reset.
    net.b.abort(server);
    net.run_until(|n| n.a.state(client) == State::Closed);
    assert_eq!(net.a.read(client, &mut [0; 8]).unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(failure(|c| net.a.recv_with(client, |_| called(c))), (ErrorKind::ConnectionReset, false));
    assert_eq!(net.a.write(client, b"x").unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(failure(|c| net.a.send_with(client, |_| called(c))), (ErrorKind::ConnectionReset, false));
    // A handle given up, once the host has let go of its connection.
    net.a.close(client);
    net.run_until(|n| n.a.interface().connection_count() == 0);
    assert_eq!(net.a.read(client, &mut [0; 8]).unwrap_err().kind(), ErrorKind::NotConnected);
    assert_eq!(failure(|c| net.a.recv_with(client, |_| called(c))), (ErrorKind::NotConnected, false));
    assert_eq!(failure(|c| net.a.send_with(client, |_| called(c))), (ErrorKind::NotConnected, false));
    assert_eq!(net.a.counters().bytes_in_place + net.b.counters().bytes_in_place, 0);
}
