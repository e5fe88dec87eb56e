//! The poll loop keeps flushing frames a device could not push out in one go, even when
//! nothing new is sent (AF_XDP in copy mode sends a batch per `sendto` and answers EAGAIN
//! when more remain; AF_PACKET answers EWOULDBLOCK when its socket buffer is full).

use std::collections::VecDeque;
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

use bypass_stack::arp::{self, ARP_FRAME_LEN};
use bypass_stack::{Device, DeviceInfo, Stack, StackConfig};
use bypass_tcp::Instant;
use etherparse::ArpOperation;

const US: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// A device whose `flush` moves at most one queued frame to the wire per call.
struct Trickle {
    info: DeviceInfo,
    inbox: VecDeque<Vec<u8>>,
    queued: VecDeque<Vec<u8>>,
    wire: Vec<Vec<u8>>,
}

impl Device for Trickle {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recv(&mut self, budget: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < budget
            && let Some(frame) = self.inbox.pop_front()
        {
            on_frame(&frame);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> io::Result<bool> {
        let mut buf = vec![0xa5; self.info.max_frame()];
        let len = fill(&mut buf);
        if len > 0 {
            buf.truncate(len);
            self.queued.push_back(buf);
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Like a kernel that takes one batch per kick and asks to be kicked again.
        if let Some(frame) = self.queued.pop_front() {
            self.wire.push(frame);
        }
        Ok(())
    }

    fn wait(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn frames_left_queued_by_a_partial_flush_go_out_on_later_polls() {
    let info = DeviceInfo { name: "trickle".into(), mac: [2, 0, 0, 0, 0, 2], mtu: 1500, mode: "test".into() };
    let mut device = Trickle { info, inbox: VecDeque::new(), queued: VecDeque::new(), wire: Vec::new() };
    // Three ARP requests for our address from three hosts: three replies to send at once.
    for host in 1..=3u8 {
        let mut frame = vec![0; ARP_FRAME_LEN];
        let mac = [2, 0, 0, 0, 0, host];
        arp::write_frame(&mut frame, ArpOperation::REQUEST, mac, Ipv4Addr::new(10, 9, 0, 10 + host), [0; 6], US);
        device.inbox.push_back(frame);
    }
    let mut stack = Stack::new(device, StackConfig::new(US, 24, [1; 16]));
    stack.set_time(Instant::ZERO);
    assert!(stack.poll().unwrap());
    assert_eq!(stack.device().wire.len(), 1, "the device pushed one frame of three");
    // Nothing new to send: the polls still flush what the device holds.
    for _ in 0..2 {
        stack.poll().unwrap();
    }
    assert_eq!(stack.device().wire.len(), 3, "every reply reached the wire");
    assert!(stack.device().queued.is_empty());
}
