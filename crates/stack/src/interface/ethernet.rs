//! Ethernet (IEEE 802.3, RFC 894): the demux by ethertype, drops with their reasons, and
//! the frames that belong to no connection.

use std::fmt::Write as _;

use bypass_tcp::Instant;
use etherparse::{EtherType, Ethernet2Header};

use super::*;
use crate::counters::Drop;

impl Interface {
    pub(super) fn receive_frame(&mut self, now: Instant, frame: &[u8]) {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += frame.len() as u64;
        let Ok((eth, payload)) = Ethernet2Header::from_slice(frame) else {
            return self.drop(Drop::Truncated, "frame shorter than an Ethernet header");
        };
        if eth.destination != self.mac && eth.destination != BROADCAST {
            return self.drop(Drop::WrongMac, "not our MAC");
        }
        match eth.ether_type {
            EtherType::ARP => self.receive_arp(now, payload),
            EtherType::IPV4 => self.receive_ipv4(now, eth.source, payload),
            _ => self.drop(Drop::UnknownEthertype, "ethertype"),
        }
    }

    pub(super) fn drop(&mut self, reason: Drop, what: &str) {
        self.counters.drop(reason);
        log::debug!("drop {}: {what}", reason.name());
        if self.capture.is_some() {
            let _ = write!(self.note, "dropped: {} ({what})", reason.name());
        }
    }

    /// Queue a frame that belongs to no connection, noting `what` when capturing.
    pub(super) fn queue_control(&mut self, frame: Vec<u8>, what: impl FnOnce() -> String) {
        let note = if self.capture.is_some() { what() } else { String::new() };
        self.control.push_back((frame, note));
    }

    pub(super) fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(128));
        b.clear();
        b
    }
}

pub(super) fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}
