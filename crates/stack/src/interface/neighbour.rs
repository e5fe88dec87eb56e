//! Address resolution on the host: ARP (RFC 826) answers requests for our address and
//! learns from them; the next hop's MAC for what we send.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use bypass_tcp::Instant;
use etherparse::ArpOperation;

use super::ethernet::Reply;
use super::*;
use crate::counters::Drop;
use crate::wire::arp;
use crate::wire::ndp::{self, NaFlags, NdpMessage};

impl Interface {
    pub(super) fn receive_arp(&mut self, now: Instant, payload: &[u8]) {
        let Some(msg) = arp::parse(payload) else {
            return self.drop(Drop::BadArp, "malformed ARP");
        };
        let Some(ours) = self.addrs.ipv4() else {
            return self.drop(Drop::ArpNotForUs, "ARP on a host without IPv4");
        };
        if msg.sender_ip.is_unspecified() || msg.sender_mac == BROADCAST {
            // Probes (RFC 5227) and nonsense teach us nothing.
            if msg.target_ip != ours {
                return self.drop(Drop::ArpNotForUs, "probe");
            }
        } else if msg.target_ip == ours {
            // RFC 826: we are the target, so add the sender (merge or insert).
            let released = self.arp.learn(msg.sender_ip, msg.sender_mac, now);
            let ip = msg.sender_ip;
            self.note_learned(IpAddr::V4(ip), msg.sender_mac);
            for frame in released {
                self.queue_control(frame, || format!("held for ARP resolution of {ip}; now sent"));
            }
            if self.notes.is_some() {
                let op = if msg.operation == ArpOperation::REQUEST { "request" } else { "reply" };
                let _ = write!(self.note, "ARP {op} from {} ({}): learned", msg.sender_ip, mac_string(msg.sender_mac));
            }
        } else {
            // Not for us: only refresh an entry we already have.
            self.arp.refresh(msg.sender_ip, msg.sender_mac, now);
            return self.drop(Drop::ArpNotForUs, "ARP for another address");
        }
        if msg.operation == ArpOperation::REQUEST && msg.target_ip == ours && !msg.sender_ip.is_unspecified() {
            let them = msg.sender_ip;
            let reply = Reply::Arp { op: ArpOperation::REPLY, src_ip: ours, dst_mac: msg.sender_mac, dst_ip: them };
            self.queue_reply(reply, || format!("ARP reply to {them}: {ours} is at our MAC"));
            self.counters.arp_replies += 1;
        }
    }

    /// Return the next hop's MAC for a packet to `dst`, starting its resolution if it is
    /// unknown (ARP, RFC 826; Neighbour Discovery, RFC 4861 7.2.2); `fallback` (the MAC the
    /// peer's own frames came from) stands in meanwhile.
    pub(super) fn next_hop_mac(&mut self, now: Instant, dst: IpAddr, fallback: Option<[u8; 6]>) -> Option<[u8; 6]> {
        match dst {
            IpAddr::V4(dst) => {
                let hop = self.next_hop(dst);
                if let Some(mac) = self.arp.lookup(hop, now) {
                    return Some(mac);
                }
                if fallback.is_none() {
                    self.arp.resolve(hop, now);
                    // Its request goes out at the next poll's `due_requests`.
                    self.lower_timer_floor(now);
                }
                fallback
            }
            IpAddr::V6(dst) => {
                let hop = self.next_hop6(now, dst);
                if let Some(mac) = self.ndp.lookup(hop, now) {
                    return Some(mac);
                }
                if fallback.is_none() {
                    self.ndp.resolve(hop, now);
                }
                fallback
            }
        }
    }

    /// [`next_hop_mac`](Self::next_hop_mac), with the neighbour cache's version and the
    /// entry's expiry when the MAC is the ARP cache's answer for an IPv4 next hop (the
    /// next hop of an IPv4 destination is fixed: our subnet and gateway do not change):
    /// while the version is the same and the entry has not expired, `next_hop_mac` gives
    /// the same answer for `dst` ([`ArpCache::version`](crate::arp::ArpCache::version)).
    pub(super) fn next_hop_mac_until(
        &mut self,
        now: Instant,
        dst: IpAddr,
        fallback: Option<[u8; 6]>,
    ) -> (Option<[u8; 6]>, Option<(u64, Instant)>) {
        if let IpAddr::V4(v4) = dst
            && let Some((mac, expires)) = self.arp.lookup_expiring(self.next_hop(v4), now)
        {
            return (Some(mac), Some((self.arp.version(), expires)));
        }
        (self.next_hop_mac(now, dst, fallback), None)
    }

    /// Hold `frame`, to `dst`, until its next hop is resolved.
    pub(super) fn hold_for_resolution(&mut self, now: Instant, dst: IpAddr, frame: Vec<u8>) {
        let held = match dst {
            IpAddr::V4(dst) => {
                let hop = self.next_hop(dst);
                let held = self.arp.hold(hop, frame, now).map_err(|f| (f, Drop::ArpQueueDrop));
                self.lower_timer_floor(now);
                held
            }
            IpAddr::V6(dst) => {
                let hop = self.next_hop6(now, dst);
                match self.ndp.hold(hop, frame, now) {
                    Ok(Some(oldest)) => Err((oldest, Drop::NeighbourQueueDrop)),
                    Ok(None) => Ok(()),
                    Err(frame) => Err((frame, Drop::NeighbourQueueDrop)),
                }
            }
        };
        if let Err((frame, reason)) = held {
            self.counters.drop(reason);
            self.spare.push(frame);
        }
    }

    /// Neighbour Discovery (RFC 4861): answer solicitations for our addresses, learn from
    /// advertisements and solicitations, and take default routers and on-link prefixes
    /// from Router Advertisements.
    pub(super) fn receive_ndp(
        &mut self,
        now: Instant,
        src_mac: [u8; 6],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        body: &[u8],
    ) {
        let msg = match ndp::parse(src, dst, hop_limit, body) {
            Ok(msg) => msg,
            Err(e) => {
                self.counters.drop(Drop::BadNdp);
                log::debug!("drop {}: {src} -> {dst}: {e}", Drop::BadNdp.name());
                if self.notes.is_some() {
                    let _ = write!(self.note, "dropped: {} ({e})", Drop::BadNdp.name());
                }
                return;
            }
        };
        match msg {
            NdpMessage::NeighborSolicitation(ns) => {
                // RFC 4861 7.1.1's last rule (7.2.3): the target is one of our addresses.
                if !self.addrs.is_ours_v6(ns.target) {
                    return self.drop(Drop::Ipv6NotForUs, "solicitation for another address");
                }
                let update = self.ndp.handle_solicitation(src, &ns, now);
                self.send_released(update.frames, src);
                if let Some(mac) = ns.source_mac.filter(|_| !src.is_unspecified()) {
                    self.note_learned(IpAddr::V6(src), mac);
                }
                // RFC 4861 7.2.4: to the solicitation's source (solicited, at the MAC its
                // option gave, or its frame's), or to all nodes if that was unspecified (DAD).
                let (dst_mac, dst_ip, solicited) = if src.is_unspecified() {
                    (ndp::multicast_mac(ndp::ALL_NODES), ndp::ALL_NODES, false)
                } else {
                    (ns.source_mac.unwrap_or(src_mac), src, true)
                };
                let flags = NaFlags { router: false, solicited, r#override: true };
                let target = ns.target;
                let reply = Reply::Advertisement { dst_mac, dst_ip, target, flags };
                self.queue_reply(reply, || format!("Neighbour Advertisement to {dst_ip}: {target} is at our MAC"));
                self.counters.ndp_advertisements += 1;
                if self.notes.is_some() {
                    let _ = write!(self.note, "Neighbour Solicitation from {src} for {target}: answered");
                }
            }
            NdpMessage::NeighborAdvertisement(na) => {
                if self.addrs.is_ours_v6(na.target) {
                    // Another node claims our address (RFC 4862 5.4.4): say so, once per message.
                    log::warn!(
                        "{src} ({}) advertises {}, which is ours: a duplicate address",
                        mac_string(src_mac),
                        na.target
                    );
                    return self.drop(Drop::BadNdp, "advertisement of our own address");
                }
                let update = self.ndp.handle_advertisement(&na, now);
                if let Some(mac) = na.target_mac {
                    self.note_learned(IpAddr::V6(na.target), mac);
                }
                if self.notes.is_some() {
                    let _ = write!(self.note, "Neighbour Advertisement from {src}: {} learned", na.target);
                }
                self.send_released(update.frames, na.target);
            }
            NdpMessage::RouterAdvertisement(ra) if self.config.accept_router_advertisements => {
                let update = self.ndp.handle_router_advertisement(src, &ra, now);
                if self.notes.is_some() {
                    let _ =
                        write!(self.note, "Router Advertisement from {src}: lifetime {} s", ra.router_lifetime_secs);
                }
                self.send_released(update.frames, src);
            }
            NdpMessage::RouterAdvertisement(_) => self.drop(Drop::IcmpIgnored, "router advertisement (not accepted)"),
            // Hosts discard Router Solicitations (RFC 4861 6.2.6 is for routers).
            NdpMessage::RouterSolicitation(_) => self.drop(Drop::IcmpIgnored, "router solicitation (we are no router)"),
            // Redirects would re-point a destination's first hop (RFC 4861 8.3); with one
            // configured gateway or default router we keep to it.
            NdpMessage::Redirect(_) => self.drop(Drop::IcmpIgnored, "redirect (not followed)"),
        }
    }

    /// Keep a neighbour learned from a frame for the host's siblings (`share_neighbours`).
    fn note_learned(&mut self, ip: IpAddr, mac: [u8; 6]) {
        if self.config.share_neighbours && self.learned.len() < 1024 {
            self.learned.push((ip, mac));
        }
    }

    /// Return the neighbours learned from received frames since the last call (empty
    /// unless [`StackConfig::share_neighbours`]), for a sibling's
    /// [`learn_neighbour`](Interface::learn_neighbour).
    pub fn take_learned_neighbours(&mut self) -> Vec<(IpAddr, [u8; 6])> {
        std::mem::take(&mut self.learned)
    }

    /// Learn that `ip` is at `mac` from a sibling host that saw it answer (one sharing our
    /// addresses on another queue): as from an ARP message for us (RFC 826 merge), or as
    /// from a Neighbour Solicitation's source option (STALE, RFC 4861 7.2.3: reachability is
    /// still to be confirmed), releasing frames held for it.
    pub fn learn_neighbour(&mut self, now: Instant, ip: IpAddr, mac: [u8; 6]) {
        match ip {
            IpAddr::V4(ip) => {
                for frame in self.arp.learn(ip, mac, now) {
                    self.queue_control(frame, || {
                        format!("held for ARP resolution of {ip}; now sent (a sibling learned it)")
                    });
                }
            }
            IpAddr::V6(ip) => {
                let update = self.ndp.learn_from_sibling(ip, mac, now);
                self.send_released(update.frames, ip);
            }
        }
    }

    /// Queue the frames Neighbour Discovery held for `ip` and has now resolved.
    fn send_released(&mut self, frames: VecDeque<Vec<u8>>, ip: Ipv6Addr) {
        for frame in frames {
            self.queue_control(frame, || format!("held for Neighbour Discovery of {ip}; now sent"));
        }
    }

    /// Send the Neighbour Solicitations that are due, and drop the frames of resolutions
    /// that failed (RFC 4861 7.2.2, 7.3.3).
    pub(super) fn solicit_neighbours(&mut self, now: Instant) {
        if self.ndp.next_timeout().is_none_or(|t| t > now) {
            return;
        }
        let mut asks = Vec::new();
        let failed = self.ndp.due(now, |ip, kind| asks.push((ip, kind)));
        for f in failed {
            log::debug!("NDP: {} did not answer; {} frames dropped", f.ip, f.frames.len());
            for frame in f.frames {
                self.counters.drop(Drop::NeighbourQueueDrop);
                self.spare.push(frame);
            }
        }
        for (target, kind) in asks {
            // RFC 4861 7.2.2: from an address of ours (the one a packet to it comes from).
            let Some(IpAddr::V6(src)) = self.addrs.source_for(IpAddr::V6(target)) else { continue };
            let solicitation = Reply::Solicitation { src, target, dst: kind };
            self.queue_reply(solicitation, || format!("Neighbour Solicitation: who has {target}?"));
            self.counters.ndp_solicitations += 1;
        }
    }
}
