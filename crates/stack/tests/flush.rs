//! The poll loop keeps flushing frames a device could not push out in one go, even when
//! nothing new is sent (AF_XDP in copy mode sends a batch per `sendto` and answers EAGAIN
//! when more remain; AF_PACKET answers EWOULDBLOCK when its socket buffer is full).

use std::net::Ipv4Addr;

use bypass_device::{DeviceInfo, Instant, ScriptedDevice};
use bypass_stack::wire::arp::{self, ARP_FRAME_LEN};
use bypass_stack::{Stack, StackConfig};
use etherparse::ArpOperation;

const US: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

#[test]
fn frames_left_queued_by_a_partial_flush_go_out_on_later_polls() {
    // A device whose `flush` moves at most one queued frame to the wire per call, like a
    // kernel that takes one batch per kick and asks to be kicked again.
    let info = DeviceInfo::new("trickle", [2, 0, 0, 0, 0, 2], 1500, "test");
    let mut device = ScriptedDevice::new(info).with_flush_limit(1);
    // Three ARP requests for our address from three hosts: three replies to send at once.
    for host in 1..=3u8 {
        let mut frame = vec![0; ARP_FRAME_LEN];
        let mac = [2, 0, 0, 0, 0, host];
        arp::write_frame(&mut frame, ArpOperation::REQUEST, mac, Ipv4Addr::new(10, 9, 0, 10 + host), [0; 6], US);
        device.push_rx(frame);
    }
    let mut stack = Stack::new(device, StackConfig::new(US, 24, [1; 16]));
    stack.set_time(Instant::ZERO);
    assert!(stack.poll().unwrap());
    assert_eq!(stack.device().sent().len(), 1, "the device pushed one frame of three");
    // Nothing new to send: the polls still flush what the device holds.
    for _ in 0..2 {
        stack.poll().unwrap();
    }
    assert_eq!(stack.device().sent().len(), 3, "every reply reached the wire");
    assert_eq!(stack.device().queued(), 0);
}
