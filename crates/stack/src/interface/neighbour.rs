//! Address resolution on the host: ARP (RFC 826) answers requests for our address and
//! learns from them; the next hop's MAC for what we send.

use std::fmt::Write as _;

use bypass_tcp::Instant;
use etherparse::ArpOperation;

use super::*;
use crate::arp::{self};
use crate::counters::Drop;

impl Interface {
    pub(super) fn receive_arp(&mut self, now: Instant, payload: &[u8]) {
        let Some(msg) = arp::parse(payload) else {
            return self.drop(Drop::BadArp, "malformed ARP");
        };
        if msg.sender_ip.is_unspecified() || msg.sender_mac == BROADCAST {
            // Probes (RFC 5227) and nonsense teach us nothing.
            if msg.target_ip != self.config.ip {
                return self.drop(Drop::ArpNotForUs, "probe");
            }
        } else if msg.target_ip == self.config.ip {
            // RFC 826: we are the target, so add the sender (merge or insert).
            let released = self.arp.learn(msg.sender_ip, msg.sender_mac, now);
            let ip = msg.sender_ip;
            for frame in released {
                self.queue_control(frame, || format!("held for ARP resolution of {ip}; now sent"));
            }
            if self.capture.is_some() {
                let op = if msg.operation == ArpOperation::REQUEST { "request" } else { "reply" };
                let _ = write!(self.note, "ARP {op} from {} ({}): learned", msg.sender_ip, mac_string(msg.sender_mac));
            }
        } else {
            // Not for us: only refresh an entry we already have.
            self.arp.refresh(msg.sender_ip, msg.sender_mac, now);
            return self.drop(Drop::ArpNotForUs, "ARP for another address");
        }
        if msg.operation == ArpOperation::REQUEST && msg.target_ip == self.config.ip && !msg.sender_ip.is_unspecified()
        {
            let mut buf = self.buffer();
            buf.resize(arp::ARP_FRAME_LEN, 0);
            arp::write_frame(&mut buf, ArpOperation::REPLY, self.mac, self.config.ip, msg.sender_mac, msg.sender_ip);
            let (us, them) = (self.config.ip, msg.sender_ip);
            self.queue_control(buf, || format!("ARP reply to {them}: {us} is at our MAC"));
            self.counters.arp_replies += 1;
        }
    }
}
