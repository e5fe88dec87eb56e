//! What the network has said about a connection's path: its MTU (RFC 1191, RFC 8201) and
//! the last soft error (RFC 1122 4.2.3.9), and the send MSS that follows from the MTU and
//! the peer's MSS option.
//!
//! Invariants: `mtu` is at least the family's minimum (68 octets for IPv4, RFC 1191 section
//! 3; 1280 for IPv6, RFC 8201 section 4); the send MSS derived from it never exceeds the MSS
//! both SYNs allow (`clamp`, RFC 1191 section 6.4: "not send any segment larger than this
//! MSS, regardless of the PMTU").
//!
//! How the connection reacts to the errors themselves is `connection/icmp.rs`.

use std::net::IpAddr;

use crate::icmp::{IcmpError, IcmpIgnored};

/// The send MSS assumed for an IPv4 peer whose SYN carries no MSS option: the 576-octet
/// datagram every host takes less 40 octets of headers (RFC 9293 3.7.1, RFC 1122 4.2.2.6).
/// Also the first estimate of the peer's segment size on receive (Linux's
/// `TCP_MSS_DEFAULT`, in `recv_space.rs`).
pub(crate) const DEFAULT_MSS_V4: u16 = 536;
/// The send MSS assumed for an IPv6 peer whose SYN carries no MSS option: the 1280-octet
/// minimum link MTU less 60 octets of headers (RFC 8200 section 5, RFC 9293 3.7.1).
pub(crate) const DEFAULT_MSS_V6: u16 = 1220;

/// Return the send MSS to assume towards a peer with no MSS option, for a connection whose
/// own address is `local` ([`DEFAULT_MSS_V4`], [`DEFAULT_MSS_V6`]).
pub(crate) fn default_mss(local: IpAddr) -> u16 {
    match local {
        IpAddr::V4(_) => DEFAULT_MSS_V4,
        IpAddr::V6(_) => DEFAULT_MSS_V6,
    }
}

/// The TCP header without options.
pub(crate) const TCP_HEADER: u32 = 20;
/// The smallest send MSS (as `negotiate_options` has always bounded it).
const MIN_MSS: u16 = 64;
/// The smallest MTU an IPv4 host may assume (RFC 791, RFC 1191 section 3).
pub(crate) const IPV4_MIN_MTU: u32 = 68;
/// The smallest MTU an ICMPv4 message can lower the path to: Linux's default `min_pmtu`
/// (`net.ipv4.route.min_pmtu`, 552), against forged messages that would cut every segment
/// to a few bytes (RFC 1191 section 8, RFC 5927 section 7).
pub(crate) const IPV4_PMTU_FLOOR: u32 = 552;
/// The IPv6 minimum link MTU (RFC 8200 section 5).
pub(crate) const IPV6_MIN_MTU: u32 = 1280;

/// RFC 1191 section 7, Table 7-1: the MTU plateaus, highest first, that the search of
/// section 5 steps down for a message without a next-hop MTU.
const PLATEAUS: [u32; 11] = [65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68];

/// The path state of one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    /// IPv6 (a 40-byte header) rather than IPv4 (20).
    ipv6: bool,
    /// The path MTU in use, in octets of IP datagram: at first the MTU our own MSS option
    /// implies (the first hop's, RFC 1191 section 2, as the host derives `Config::mss` from
    /// its device), then what a Packet Too Big or the host said.
    mtu: u32,
    /// The MSS both SYNs allow, the fixed options not yet taken off: min(peer's MSS option,
    /// ours) (RFC 9293 3.7.1, RFC 6691); `None` until the peer's SYN arrives.
    clamp: Option<u16>,
    /// The latest ICMP error: a soft one until an acknowledgment clears it, or the one that
    /// aborted the connection.
    error: Option<IcmpError>,
}

impl Path {
    /// Return the state of a new connection whose own MSS option is `our_mss`.
    pub(crate) fn new(ipv6: bool, our_mss: u16) -> Path {
        let mut path = Path { ipv6, mtu: 0, clamp: None, error: None };
        path.mtu = (u32::from(our_mss) + path.ip_header() + TCP_HEADER).max(path.min_mtu());
        path
    }

    /// Return the path MTU in use.
    pub(crate) fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Take `mtu` (from [`mtu_from_report`](Self::mtu_from_report)) if it is below the MTU
    /// in use, never raising it (RFC 1191 section 3); return whether it was lowered.
    pub(crate) fn lower_mtu(&mut self, mtu: u32) -> bool {
        let lowered = mtu < self.mtu;
        if lowered {
            self.mtu = mtu;
        }
        lowered
    }

    /// Set the MTU the host learnt for the destination, up or down, but not below the
    /// [`floor`](Self::floor).
    pub(crate) fn set_mtu(&mut self, mtu: u32) {
        self.mtu = mtu.max(self.floor());
    }

    /// Return the latest ICMP error: a soft one no acknowledgment has cleared, or the one
    /// that aborted the connection.
    pub(crate) fn error(&self) -> Option<IcmpError> {
        self.error
    }

    /// Keep `error` as the latest ICMP error.
    pub(crate) fn set_error(&mut self, error: IcmpError) {
        self.error = Some(error);
    }

    /// Forget the soft error: an acceptable ACK shows the path works.
    pub(crate) fn clear_error(&mut self) {
        self.error = None;
    }

    /// Return the bytes of the IP header in front of every segment (no IPv4 options, no IPv6
    /// extension headers: we send neither).
    pub(crate) fn ip_header(&self) -> u32 {
        if self.ipv6 { 40 } else { 20 }
    }

    /// Return the smallest MTU of the family (RFC 1191 section 3, RFC 8201 section 4).
    pub(crate) fn min_mtu(&self) -> u32 {
        if self.ipv6 { IPV6_MIN_MTU } else { IPV4_MIN_MTU }
    }

    /// Return the lowest path MTU the network can talk us down to: 552 for IPv4 (see
    /// [`IPV4_PMTU_FLOOR`]), 1280 for IPv6.
    pub(crate) fn floor(&self) -> u32 {
        if self.ipv6 { IPV6_MIN_MTU } else { IPV4_PMTU_FLOOR }
    }

    /// Take the peer's MSS option `peer_mss` and ours: return the send MSS, the data of a
    /// full segment once `option_len` bytes of fixed options (the timestamps) come off.
    pub(crate) fn negotiate(&mut self, peer_mss: u16, our_mss: u16, option_len: usize) -> u16 {
        self.clamp = Some(peer_mss.min(our_mss).max(MIN_MSS));
        self.send_mss(option_len).unwrap_or(MIN_MSS)
    }

    /// Return the send MSS for segments with `option_len` bytes of fixed options: the
    /// smaller of what the SYNs allow and what the path MTU leaves after the IP and TCP
    /// headers (Linux's `tcp_mtu_to_mss`); `None` before the peer's SYN.
    pub(crate) fn send_mss(&self, option_len: usize) -> Option<u16> {
        let clamp = self.clamp?;
        let from_mtu = self.mtu.saturating_sub(self.ip_header() + TCP_HEADER).min(u32::from(u16::MAX)) as u16;
        let options = u16::try_from(option_len).unwrap_or(u16::MAX);
        Some(clamp.min(from_mtu).saturating_sub(options).max(MIN_MSS))
    }

    /// Return the path MTU a Packet Too Big reporting `reported` octets teaches, before it
    /// is compared with the one in use; `dropped` is the size of the datagram that bounced,
    /// where known.
    ///
    /// - IPv6: a report below 1280 is discarded (RFC 8201 section 4: "it must discard it";
    ///   Linux's `tcp_v6_err` likewise).
    /// - IPv4, a report below 68 (0 from a router older than RFC 1191, which cannot say; no
    ///   router may say less, RFC 1191 section 4): the greatest plateau of RFC 1191's Table
    ///   7-1 below the size of the datagram that bounced (section 5's recommended search),
    ///   else below the MTU in use. The datagram's own size, not the estimate, keeps a burst
    ///   of bounced segments from stepping down a plateau each.
    /// - IPv4, then: no lower than 552 (Linux's `min_pmtu`, see [`IPV4_PMTU_FLOOR`]).
    pub(crate) fn mtu_from_report(&self, reported: u32, dropped: Option<u32>) -> Result<u32, IcmpIgnored> {
        if self.ipv6 {
            if reported < IPV6_MIN_MTU {
                return Err(IcmpIgnored::BelowMinimumMtu);
            }
            return Ok(reported);
        }
        let mtu = if reported < IPV4_MIN_MTU { plateau_below(dropped.unwrap_or(self.mtu)) } else { reported };
        Ok(mtu.max(IPV4_PMTU_FLOOR))
    }

    /// Return the size of the IP datagram that carried `data` bytes with `option_len` bytes
    /// of options.
    pub(crate) fn datagram_len(&self, data: u32, option_len: usize) -> u32 {
        data + self.ip_header() + TCP_HEADER + option_len as u32
    }
}

/// Return the greatest plateau of RFC 1191 Table 7-1 below `size` (68 at the least).
fn plateau_below(size: u32) -> u32 {
    PLATEAUS.into_iter().find(|&p| p < size).unwrap_or(IPV4_MIN_MTU)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_path_mtu_is_the_one_our_mss_implies() {
        assert_eq!(Path::new(false, 1460).mtu, 1500);
        assert_eq!(Path::new(true, 1440).mtu, 1500);
        assert_eq!(Path::new(true, 536).mtu, 1280, "never below the IPv6 minimum");
    }

    #[test]
    fn the_send_mss_is_the_smaller_of_the_peers_and_the_paths() {
        let mut path = Path::new(false, 1460);
        assert_eq!(path.send_mss(0), None, "not before the peer's SYN");
        assert_eq!(path.negotiate(1460, 1460, 12), 1448);
        path.mtu = 1300;
        assert_eq!(path.send_mss(12), Some(1248));
        assert_eq!(path.send_mss(0), Some(1260));
        path.mtu = 9000;
        assert_eq!(path.send_mss(0), Some(1460), "the peer's MSS caps what the path allows");
        assert_eq!(path.negotiate(536, 1460, 0), 536);
    }

    #[test]
    fn reports_are_clamped_to_the_family_minimum() {
        let v4 = Path::new(false, 1460);
        assert_eq!(v4.mtu_from_report(1400, None), Ok(1400));
        assert_eq!(v4.mtu_from_report(300, None), Ok(552), "Linux's min_pmtu");
        // RFC 1191 section 5: no next-hop MTU; the plateau below the bounced datagram.
        assert_eq!(v4.mtu_from_report(0, Some(1500)), Ok(1492));
        assert_eq!(v4.mtu_from_report(0, Some(1492)), Ok(1006));
        assert_eq!(v4.mtu_from_report(0, Some(1006)), Ok(552), "508 is below the floor");
        assert_eq!(v4.mtu_from_report(0, None), Ok(1492), "below the MTU in use");
        let v6 = Path::new(true, 1440);
        assert_eq!(v6.mtu_from_report(1280, None), Ok(1280));
        assert_eq!(v6.mtu_from_report(1279, None), Err(IcmpIgnored::BelowMinimumMtu));
        assert_eq!(v6.mtu_from_report(0, None), Err(IcmpIgnored::BelowMinimumMtu));
    }
}
