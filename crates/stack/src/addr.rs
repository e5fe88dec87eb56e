//! The host's addresses: which destinations are ours, which are on a link we are on, and
//! which of our addresses a connection to a destination starts from.
//!
//! A host has at most one IPv4 address and any number of IPv6 ones, and always the IPv6
//! link-local address made from its MAC (RFC 4291 2.1: every interface has one; RFC 4861
//! needs it, since routers speak Neighbour Discovery from and to link-local addresses).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::ndp::{link_local_from_mac, solicited_node};

/// An address and the prefix length of its subnet (`10.0.0.1/24`, `fd00::1/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr<A> {
    /// The address.
    pub addr: A,
    /// How many leading bits name the subnet.
    pub prefix_len: u8,
}

impl Cidr<Ipv4Addr> {
    /// Return whether `other` is in this subnet.
    pub fn contains(&self, other: Ipv4Addr) -> bool {
        let prefix = self.prefix_len.min(32);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        (u32::from(other) & mask) == (u32::from(self.addr) & mask)
    }
}

impl Cidr<Ipv6Addr> {
    /// Return whether `other` is in this subnet.
    pub fn contains(&self, other: Ipv6Addr) -> bool {
        let prefix = self.prefix_len.min(128);
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        (u128::from(other) & mask) == (u128::from(self.addr) & mask)
    }
}

/// Return whether `addr` is an IPv6 link-local unicast address (fe80::/10, RFC 4291 2.5.6).
pub fn is_link_local(addr: Ipv6Addr) -> bool {
    addr.segments()[0] & 0xffc0 == 0xfe80
}

/// Return how many leading bits `a` and `b` share (RFC 6724 2.2, CommonPrefixLen).
fn common_prefix(a: Ipv6Addr, b: Ipv6Addr) -> u32 {
    (u128::from(a) ^ u128::from(b)).leading_zeros()
}

/// The addresses of one host (see the module docs).
#[derive(Clone, Debug)]
pub struct Addresses {
    /// Our IPv4 address, if we speak IPv4.
    pub ipv4: Option<Cidr<Ipv4Addr>>,
    /// Our IPv6 addresses beside the link-local one.
    pub ipv6: Vec<Cidr<Ipv6Addr>>,
    /// The link-local address made from our MAC (RFC 4291 appendix A).
    pub link_local: Ipv6Addr,
}

impl Addresses {
    /// Return the addresses of a host with `ipv4`, `ipv6` and the MAC `mac`.
    pub fn new(ipv4: Option<Cidr<Ipv4Addr>>, ipv6: Vec<Cidr<Ipv6Addr>>, mac: [u8; 6]) -> Self {
        Addresses { ipv4, ipv6, link_local: link_local_from_mac(mac) }
    }

    /// Return whether we speak IPv6 (an IPv6 address was configured).
    pub fn has_ipv6(&self) -> bool {
        !self.ipv6.is_empty()
    }

    /// Return our IPv4 address, if any.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.ipv4.map(|c| c.addr)
    }

    /// Return whether `addr` is our IPv4 address.
    pub fn is_ours_v4(&self, addr: Ipv4Addr) -> bool {
        self.ipv4.is_some_and(|c| c.addr == addr)
    }

    /// Return whether `addr` is one of our IPv6 unicast addresses (the link-local one only
    /// while we speak IPv6 at all).
    pub fn is_ours_v6(&self, addr: Ipv6Addr) -> bool {
        self.has_ipv6() && (addr == self.link_local || self.ipv6.iter().any(|c| c.addr == addr))
    }

    /// Return whether `addr` is one of our addresses.
    pub fn is_ours(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.is_ours_v4(a),
            IpAddr::V6(a) => self.is_ours_v6(a),
        }
    }

    /// Return every IPv6 unicast address of ours, link-local first.
    pub fn ipv6_unicast(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        let link_local = self.has_ipv6().then_some(self.link_local);
        link_local.into_iter().chain(self.ipv6.iter().map(|c| c.addr))
    }

    /// Return whether we listen to the IPv6 multicast group `group`: all-nodes (ff02::1,
    /// RFC 4291 2.7.1) and the solicited-node group of each of our addresses (RFC 4861 7.2.1).
    pub fn joined(&self, group: Ipv6Addr) -> bool {
        self.has_ipv6()
            && (group == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)
                || self.ipv6_unicast().any(|a| solicited_node(a) == group))
    }

    /// Return whether `dst` is on one of our IPv6 links: link-local, or in one of our
    /// subnets (RFC 4861 5.2: on-link prefixes; `on_link` adds those learnt from routers).
    pub fn on_link_v6(&self, dst: Ipv6Addr) -> bool {
        is_link_local(dst) || self.ipv6.iter().any(|c| c.contains(dst))
    }

    /// Return the address of ours a packet to `dst` comes from: our IPv4 address for IPv4,
    /// and for IPv6 the link-local one towards link-local destinations, else the one that
    /// shares the longest prefix with `dst` (RFC 6724 5, rules 2 and 8, the ones that can
    /// differ between addresses of one interface with no deprecated or temporary ones).
    /// None for IPv6 loopback and IPv4-mapped destinations, which never go on a link (RFC
    /// 4291 2.5.3, 2.5.5.2: a peer drops them, as [`martian_v6`](Self::martian_v6) does).
    pub fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            // Loopback, this-network, broadcast: never on the wire (RFC 1122 3.2.1.3).
            IpAddr::V4(d) if d.is_loopback() || d.octets()[0] == 0 || d.is_broadcast() => None,
            IpAddr::V4(_) => self.ipv4().map(IpAddr::V4),
            IpAddr::V6(d) if d.is_loopback() || d.to_ipv4_mapped().is_some() => None,
            IpAddr::V6(d) if is_link_local(d) => self.has_ipv6().then_some(IpAddr::V6(self.link_local)),
            IpAddr::V6(d) => self.ipv6.iter().map(|c| c.addr).max_by_key(|&a| common_prefix(a, d)).map(IpAddr::V6),
        }
    }

    /// Return why no packet may come from IPv6 source `src`, if none may: multicast (RFC 4291
    /// 2.7), loopback (RFC 4291 2.5.3), IPv4-mapped (RFC 4291 2.5.5.2: not on the wire), or
    /// one of our own addresses (a loop or a spoof). The unspecified address is allowed only
    /// in duplicate address detection, which the caller checks.
    pub fn martian_v6(&self, src: Ipv6Addr) -> Option<&'static str> {
        if src.is_multicast() {
            Some("multicast, ff00::/8 (RFC 4291 2.7)")
        } else if src.is_loopback() {
            Some("loopback, ::1 (RFC 4291 2.5.3)")
        } else if src.to_ipv4_mapped().is_some() {
            Some("IPv4-mapped, ::ffff:0:0/96 (RFC 4291 2.5.5.2)")
        } else if self.is_ours_v6(src) {
            Some("our own address")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Addresses {
        let v4 = Cidr { addr: Ipv4Addr::new(10, 0, 0, 1), prefix_len: 24 };
        let v6 = vec![
            Cidr { addr: "fd00::1".parse().unwrap(), prefix_len: 64 },
            Cidr { addr: "2001:db8:1::5".parse().unwrap(), prefix_len: 64 },
        ];
        Addresses::new(Some(v4), v6, [0x02, 0, 0, 0x77, 0, 2])
    }

    #[test]
    fn subnets_contain_their_hosts_only() {
        let c = Cidr { addr: Ipv4Addr::new(10, 0, 0, 1), prefix_len: 24 };
        assert!(c.contains(Ipv4Addr::new(10, 0, 0, 200)));
        assert!(!c.contains(Ipv4Addr::new(10, 0, 1, 1)));
        assert!(Cidr { addr: Ipv4Addr::new(1, 2, 3, 4), prefix_len: 0 }.contains(Ipv4Addr::new(9, 9, 9, 9)));
        let c6 = Cidr { addr: "fd00::1".parse::<Ipv6Addr>().unwrap(), prefix_len: 64 };
        assert!(c6.contains("fd00::abcd".parse().unwrap()));
        assert!(!c6.contains("fd00:0:0:1::1".parse().unwrap()));
    }

    #[test]
    fn the_link_local_address_comes_from_the_mac() {
        let h = host();
        assert_eq!(h.link_local, "fe80::ff:fe77:2".parse::<Ipv6Addr>().unwrap());
        assert!(h.is_ours_v6(h.link_local));
        assert!(Addresses::new(None, vec![], [2, 0, 0, 0, 0, 1]).source_for("fe80::1".parse().unwrap()).is_none());
    }

    #[test]
    fn the_source_shares_the_longest_prefix() {
        let h = host();
        let src = |d: &str| h.source_for(d.parse().unwrap()).unwrap().to_string();
        assert_eq!(src("fd00::9"), "fd00::1");
        assert_eq!(src("2001:db8:1::1"), "2001:db8:1::5");
        assert_eq!(src("fe80::1"), "fe80::ff:fe77:2");
        assert_eq!(src("10.9.9.9"), "10.0.0.1");
        assert_eq!(h.source_for("::1".parse().unwrap()), None);
        assert_eq!(h.source_for("::ffff:10.0.0.9".parse().unwrap()), None);
    }

    #[test]
    fn we_join_all_nodes_and_our_solicited_node_groups() {
        let h = host();
        assert!(h.joined("ff02::1".parse().unwrap()));
        assert!(h.joined("ff02::1:ff00:1".parse().unwrap()));
        assert!(h.joined("ff02::1:ff77:2".parse().unwrap()));
        assert!(!h.joined("ff02::1:ff00:9".parse().unwrap()));
        assert!(!h.joined("ff02::2".parse().unwrap()));
    }

    #[test]
    fn martian_sources_are_named() {
        let h = host();
        for bad in ["ff02::1", "::1", "::ffff:10.0.0.9", "fd00::1"] {
            assert!(h.martian_v6(bad.parse().unwrap()).is_some(), "{bad}");
        }
        assert!(h.martian_v6("fd00::2".parse().unwrap()).is_none());
    }
}
