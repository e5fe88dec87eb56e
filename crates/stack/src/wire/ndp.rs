//! Neighbour Discovery messages (RFC 4861 4) for Ethernet: [`parse`] an ICMPv6 message of
//! type 133 to 137 into an [`NdpMessage`], checking the ICMPv6 checksum and the validity
//! rules of RFC 4861 6.1, 7.1 and 8.1 (a failed rule is an [`NdpError`]); write
//! solicitations and advertisements as whole frames ([`write_solicitation`],
//! [`write_advertisement`], [`write_router_solicitation`]). Also the ICMPv6 [`checksum`]
//! and the addresses Neighbour Discovery uses ([`solicited_node`], [`multicast_mac`],
//! [`link_local_from_mac`]). The cache that acts on the messages is [`crate::ndp`].

use std::net::Ipv6Addr;

use etherparse::checksum::Sum16BitWords;
use etherparse::icmpv6::{
    self, Icmpv6PayloadSlice, MtuOptionSlice, NdpOptionHeader, NdpOptionType, NeighborAdvertisementHeader,
    PrefixInformationOptionSlice, SourceLinkLayerAddressOptionSlice, TargetLinkLayerAddressOptionSlice,
};
use etherparse::{EtherType, Icmpv6Header, Icmpv6Slice, Icmpv6Type, IpNumber};

use super::{ETH_LEN, HEADERS6, write_ethernet, write_ipv6};

// -------------------------------------------------------------------------------------
// Constants.
// -------------------------------------------------------------------------------------

/// The hop limit every Neighbour Discovery message is sent with and must arrive with: a
/// router forwarding one would have decremented it (RFC 4861 6.1, 7.1).
pub const HOP_LIMIT: u8 = 255;
/// A prefix lifetime meaning forever (RFC 4861 4.6.2).
pub const INFINITE_LIFETIME: u32 = u32::MAX;
/// The smallest link MTU IPv6 allows (RFC 8200 5); smaller RA MTU options are ignored.
pub const MIN_LINK_MTU: u32 = 1280;
/// The all-nodes link-local multicast address, `ff02::1` (RFC 4291 2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The all-routers link-local multicast address, `ff02::2` (RFC 4291 2.7.1).
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

const ICMP_OFFSET: usize = HEADERS6;
/// ICMPv6 header (type, code, checksum, 4 bytes of flags or reserved).
const ICMP_HEADER_LEN: usize = Icmpv6Header::MIN_LEN;
/// One link-layer address option for Ethernet: type, length 1, six bytes of MAC (RFC 2464 6).
const LLA_OPTION_LEN: usize = 8;

/// The longest frame a writer here produces (a solicitation or advertisement with its
/// link-layer address option): Ethernet, IPv6, 24 bytes of message and 8 of option.
pub const NDP_FRAME_LEN: usize = ICMP_OFFSET + ICMP_HEADER_LEN + 16 + LLA_OPTION_LEN;

// -------------------------------------------------------------------------------------
// Addresses.
// -------------------------------------------------------------------------------------

/// Return the solicited-node multicast address of `addr`, `ff02::1:ffXX:XXXX` with its low
/// 24 bits (RFC 4291 2.7.1), where resolutions of `addr` are sent.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15]])
}

/// Return whether `addr` is a solicited-node multicast address (`ff02::1:ff00:0/104`,
/// RFC 4291 2.7.1).
pub fn is_solicited_node(addr: Ipv6Addr) -> bool {
    addr.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff]
}

/// Return the Ethernet address that IPv6 multicast `addr` is sent to: `33:33` and the low
/// 32 bits of the address (RFC 2464 7).
pub fn multicast_mac(addr: Ipv6Addr) -> [u8; 6] {
    let o = addr.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Return the link-local address formed from `mac`: `fe80::/64` and the modified EUI-64
/// interface identifier, the MAC with `ff:fe` in its middle and the universal/local bit
/// inverted (RFC 4291 2.5.1 and appendix A, RFC 2464 4 and 5).
pub fn link_local_from_mac(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}
// -------------------------------------------------------------------------------------
// Messages.
// -------------------------------------------------------------------------------------

/// The R, S and O flags of a Neighbour Advertisement (RFC 4861 4.4): `router`, `solicited`
/// and `r#override`.
pub type NaFlags = NeighborAdvertisementHeader;

/// Why [`parse`] rejected a message: the validity check of RFC 4861 6.1 or 7.1 (or 8.1 for
/// redirects) it failed. Receivers silently discard such messages; count and log them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NdpError {
    /// Shorter than its type's fixed part (ICMP length check of 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1).
    #[error("ICMPv6 message of {len} bytes is shorter than the {min} its type needs")]
    Truncated {
        /// Length of the message.
        len: usize,
        /// Least length of its type.
        min: usize,
    },
    /// Not a Router/Neighbour Solicitation/Advertisement or Redirect (types 133 to 137).
    #[error("ICMPv6 type {0} is not a Neighbour Discovery message")]
    NotNdp(u8),
    /// The IP hop limit is not 255, so the message may come from off-link.
    #[error("hop limit {0} is not 255: the message may have been forwarded from off-link")]
    HopLimit(u8),
    /// The ICMPv6 checksum (RFC 4443 2.3, pseudo-header of RFC 8200 8.1) is wrong.
    #[error("wrong ICMPv6 checksum")]
    Checksum,
    /// The ICMP code is not 0.
    #[error("ICMP code {0} is not 0")]
    Code(u8),
    /// The target address of a solicitation or advertisement is multicast.
    #[error("target address {0} is multicast")]
    MulticastTarget(Ipv6Addr),
    /// An option has length zero (RFC 4861 4.6: receivers must discard the message).
    #[error("option of type {kind} has length zero")]
    OptionZeroLength {
        /// Option type.
        kind: u8,
    },
    /// An option runs past the end of the message.
    #[error("option of type {kind} runs past the end of the message")]
    OptionTruncated {
        /// Option type.
        kind: u8,
    },
    /// A link-layer address option in use is not one Ethernet address (length 1, RFC 2464 6).
    #[error("link-layer address option of {units} units of 8 bytes is not an Ethernet address")]
    LinkLayerAddressLength {
        /// The option's length field.
        units: u8,
    },
    /// A solicitation from the unspecified address (DAD) to other than a solicited-node address.
    #[error("solicitation from the unspecified address to {0}, not a solicited-node multicast address")]
    UnspecifiedSourceNotSolicitedNode(Ipv6Addr),
    /// A solicitation from the unspecified address with a source link-layer address option.
    #[error("solicitation from the unspecified address carries a source link-layer address option")]
    UnspecifiedSourceWithLinkLayerAddress,
    /// An advertisement to a multicast address with the Solicited flag set.
    #[error("advertisement to multicast {0} has the Solicited flag set")]
    SolicitedToMulticast(Ipv6Addr),
    /// A Router Advertisement or Redirect from other than a link-local address.
    #[error("router message from {0}, not a link-local address")]
    SourceNotLinkLocal(Ipv6Addr),
    /// A Redirect for a multicast destination.
    #[error("redirect for multicast destination {0}")]
    MulticastDestination(Ipv6Addr),
    /// A Redirect whose target is neither link-local (a router) nor its destination.
    #[error("redirect target {0} is neither link-local nor the destination")]
    RedirectTarget(Ipv6Addr),
}

/// A valid Neighbour Discovery message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NdpMessage {
    /// Router Solicitation (RFC 4861 4.1).
    RouterSolicitation(RouterSolicitation),
    /// Router Advertisement (RFC 4861 4.2).
    RouterAdvertisement(RouterAdvertisement),
    /// Neighbour Solicitation (RFC 4861 4.3).
    NeighborSolicitation(NeighborSolicitation),
    /// Neighbour Advertisement (RFC 4861 4.4).
    NeighborAdvertisement(NeighborAdvertisement),
    /// Redirect (RFC 4861 4.5).
    Redirect(Redirect),
}

/// A Router Solicitation (RFC 4861 4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterSolicitation {
    /// The sender's MAC, from the source link-layer address option.
    pub source_mac: Option<[u8; 6]>,
}

/// A Router Advertisement (RFC 4861 4.2) with the options a host uses; fields keep the wire
/// units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterAdvertisement {
    /// Hop limit for outgoing packets, 0 for unspecified.
    pub cur_hop_limit: u8,
    /// M flag: addresses come from DHCPv6.
    pub managed: bool,
    /// O flag: other configuration comes from DHCPv6.
    pub other: bool,
    /// Seconds the sender may be used as a default router; 0 for not a default router.
    pub router_lifetime_secs: u16,
    /// BaseReachableTime in milliseconds, 0 for unspecified.
    pub reachable_time_ms: u32,
    /// RetransTimer in milliseconds, 0 for unspecified.
    pub retrans_timer_ms: u32,
    /// The router's MAC, from the source link-layer address option.
    pub source_mac: Option<[u8; 6]>,
    /// The link MTU, from the MTU option (RFC 4861 4.6.4).
    pub mtu: Option<u32>,
    /// The prefix information options (RFC 4861 4.6.2), in order.
    pub prefixes: Vec<PrefixInfo>,
}

/// A prefix information option (RFC 4861 4.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixInfo {
    /// The prefix, as sent (bits past `prefix_len` are not cleared here).
    pub prefix: Ipv6Addr,
    /// Number of leading bits that count.
    pub prefix_len: u8,
    /// L flag: the prefix is on-link.
    pub on_link: bool,
    /// A flag: the prefix may be used for address autoconfiguration (RFC 4862).
    pub autonomous: bool,
    /// Seconds the prefix stays valid for on-link determination; [`INFINITE_LIFETIME`] is forever.
    pub valid_lifetime_secs: u32,
    /// Seconds addresses formed from it stay preferred; [`INFINITE_LIFETIME`] is forever.
    pub preferred_lifetime_secs: u32,
}

/// A Neighbour Solicitation (RFC 4861 4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborSolicitation {
    /// The address being resolved or probed.
    pub target: Ipv6Addr,
    /// The sender's MAC, from the source link-layer address option.
    pub source_mac: Option<[u8; 6]>,
}

/// A Neighbour Advertisement (RFC 4861 4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborAdvertisement {
    /// The address advertised.
    pub target: Ipv6Addr,
    /// Router, Solicited and Override flags.
    pub flags: NaFlags,
    /// The target's MAC, from the target link-layer address option.
    pub target_mac: Option<[u8; 6]>,
}

/// A Redirect (RFC 4861 4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// The better first hop: a router, or the destination itself.
    pub target: Ipv6Addr,
    /// The destination being redirected.
    pub destination: Ipv6Addr,
    /// The target's MAC, from the target link-layer address option.
    pub target_mac: Option<[u8; 6]>,
}

/// The options of one message, with their framing checked (RFC 4861 4.6): the first of
/// each kind, by the link-layer address options' address bytes.
#[derive(Default)]
struct Options<'a> {
    source: Option<&'a [u8]>,
    target: Option<&'a [u8]>,
    mtu: Option<u32>,
    prefixes: Vec<PrefixInfo>,
}

impl<'a> Options<'a> {
    /// Walk the options: every one must have a non-zero length and end within the message
    /// (RFC 4861 6.1.2, 7.1.1, 7.1.2). Unrecognised options, and recognised ones of a
    /// length we cannot read, are skipped (RFC 4861 4.6); later duplicates are ignored.
    fn parse(mut bytes: &'a [u8], with_prefixes: bool) -> Result<Self, NdpError> {
        let mut options = Options::default();
        while let Some(&kind) = bytes.first() {
            let (header, _) = NdpOptionHeader::from_slice(bytes).map_err(|_| NdpError::OptionTruncated { kind })?;
            if header.length_units == 0 {
                return Err(NdpError::OptionZeroLength { kind });
            }
            let (option, rest) = bytes.split_at_checked(header.byte_len()).ok_or(NdpError::OptionTruncated { kind })?;
            bytes = rest;
            match header.option_type {
                NdpOptionType::SOURCE_LINK_LAYER_ADDRESS if options.source.is_none() => {
                    options.source =
                        SourceLinkLayerAddressOptionSlice::from_slice(option).ok().map(|o| o.link_layer_address());
                }
                NdpOptionType::TARGET_LINK_LAYER_ADDRESS if options.target.is_none() => {
                    options.target =
                        TargetLinkLayerAddressOptionSlice::from_slice(option).ok().map(|o| o.link_layer_address());
                }
                NdpOptionType::MTU if options.mtu.is_none() => match MtuOptionSlice::from_slice(option) {
                    Ok(mtu) => options.mtu = Some(mtu.mtu()),
                    Err(e) => log::debug!("NDP: MTU option skipped: {e}"),
                },
                NdpOptionType::PREFIX_INFORMATION if with_prefixes => {
                    match PrefixInformationOptionSlice::from_slice(option) {
                        Ok(p) => options.prefixes.push(PrefixInfo {
                            prefix: Ipv6Addr::from(p.prefix()),
                            prefix_len: p.prefix_length(),
                            on_link: p.on_link(),
                            autonomous: p.autonomous_address_configuration(),
                            valid_lifetime_secs: p.valid_lifetime(),
                            preferred_lifetime_secs: p.preferred_lifetime(),
                        }),
                        Err(e) => log::debug!("NDP: prefix information option skipped: {e}"),
                    }
                }
                _ => {}
            }
        }
        Ok(options)
    }
}

/// Return the Ethernet address in a link-layer address option's address bytes.
fn ethernet_address(address: &[u8]) -> Result<[u8; 6], NdpError> {
    <[u8; 6]>::try_from(address)
        .map_err(|_| NdpError::LinkLayerAddressLength { units: ((address.len() + 2) / 8) as u8 })
}

/// Return the ICMPv6 checksum of `icmp` (a whole ICMPv6 message) sent from `src` to `dst`:
/// the ones' complement of the ones' complement sum over the IPv6 pseudo-header (RFC 8200
/// 8.1: addresses, upper-layer length, next header 58) and the message with its checksum
/// field taken as zero (RFC 4443 2.3). Store it big-endian at bytes 2 and 3. Messages
/// shorter than 4 bytes are summed as they are.
pub fn checksum(src: Ipv6Addr, dst: Ipv6Addr, icmp: &[u8]) -> u16 {
    let sum = Sum16BitWords::new()
        .add_16bytes(src.octets())
        .add_16bytes(dst.octets())
        .add_4bytes((icmp.len() as u32).to_be_bytes())
        .add_2bytes([0, IpNumber::IPV6_ICMP.0]);
    let sum = match (icmp.get(..2), icmp.get(4..)) {
        (Some(head), Some(tail)) => sum.add_slice(head).add_slice(tail),
        _ => sum.add_slice(icmp),
    };
    sum.ones_complement().to_be()
}

/// Parse and validate the ICMPv6 message `icmp` (the IPv6 payload, from its type byte on)
/// received from `ip_src` to `ip_dst` with `hop_limit`: a Router Solicitation,
/// Router Advertisement, Neighbour Solicitation, Neighbour Advertisement or Redirect.
///
/// Checks, in order: a known type; hop limit 255; the checksum; code 0; the type's least
/// length; then the rules for the type (RFC 4861 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1): targets
/// not multicast, every option of non-zero length and within the message, a solicitation
/// from the unspecified address sent to a solicited-node address and without a source
/// link-layer address option, an advertisement to multicast not solicited, router messages
/// from a link-local address. A link-layer address option the message uses must hold one
/// Ethernet address. Options the type does not use are ignored (RFC 4861 4.6). Never panics.
///
/// Left to the caller: that a solicitation's target is ours (RFC 4861 7.2.3), and that a
/// redirect comes from the first-hop router of its destination (RFC 4861 8.1).
pub fn parse(ip_src: Ipv6Addr, ip_dst: Ipv6Addr, hop_limit: u8, icmp: &[u8]) -> Result<NdpMessage, NdpError> {
    let len = icmp.len();
    let slice = Icmpv6Slice::from_slice(icmp).map_err(|_| NdpError::Truncated { len, min: ICMP_HEADER_LEN })?;
    let min = ICMP_HEADER_LEN
        + match slice.type_u8() {
            icmpv6::TYPE_ROUTER_SOLICITATION => 0,
            icmpv6::TYPE_ROUTER_ADVERTISEMENT => 8,
            icmpv6::TYPE_NEIGHBOR_SOLICITATION | icmpv6::TYPE_NEIGHBOR_ADVERTISEMENT => 16,
            icmpv6::TYPE_REDIRECT_MESSAGE => 32,
            other => return Err(NdpError::NotNdp(other)),
        };
    if hop_limit != HOP_LIMIT {
        return Err(NdpError::HopLimit(hop_limit));
    }
    if !slice.is_checksum_valid(ip_src.octets(), ip_dst.octets()) {
        return Err(NdpError::Checksum);
    }
    if slice.code_u8() != 0 {
        return Err(NdpError::Code(slice.code_u8()));
    }
    if len < min {
        return Err(NdpError::Truncated { len, min });
    }
    let icmp_type = slice.icmp_type();
    let payload = icmp_type.payload_slice(slice.payload()).map_err(|_| NdpError::Truncated { len, min })?;
    match (icmp_type, payload) {
        (_, Icmpv6PayloadSlice::RouterSolicitation(rs)) => {
            let options = Options::parse(rs.options(), false)?;
            if ip_src.is_unspecified() && options.source.is_some() {
                return Err(NdpError::UnspecifiedSourceWithLinkLayerAddress);
            }
            let source_mac = options.source.map(ethernet_address).transpose()?;
            Ok(NdpMessage::RouterSolicitation(RouterSolicitation { source_mac }))
        }
        (Icmpv6Type::RouterAdvertisement(header), Icmpv6PayloadSlice::RouterAdvertisement(ra)) => {
            if !ip_src.is_unicast_link_local() {
                return Err(NdpError::SourceNotLinkLocal(ip_src));
            }
            let options = Options::parse(ra.options(), true)?;
            Ok(NdpMessage::RouterAdvertisement(RouterAdvertisement {
                cur_hop_limit: header.cur_hop_limit,
                managed: header.managed_address_config,
                other: header.other_config,
                router_lifetime_secs: header.router_lifetime,
                reachable_time_ms: ra.reachable_time(),
                retrans_timer_ms: ra.retrans_timer(),
                source_mac: options.source.map(ethernet_address).transpose()?,
                mtu: options.mtu,
                prefixes: options.prefixes,
            }))
        }
        (_, Icmpv6PayloadSlice::NeighborSolicitation(ns)) => {
            let target = ns.target_address();
            if target.is_multicast() {
                return Err(NdpError::MulticastTarget(target));
            }
            let options = Options::parse(ns.options(), false)?;
            if ip_src.is_unspecified() {
                if !is_solicited_node(ip_dst) {
                    return Err(NdpError::UnspecifiedSourceNotSolicitedNode(ip_dst));
                }
                if options.source.is_some() {
                    return Err(NdpError::UnspecifiedSourceWithLinkLayerAddress);
                }
            }
            let source_mac = options.source.map(ethernet_address).transpose()?;
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target, source_mac }))
        }
        (Icmpv6Type::NeighborAdvertisement(flags), Icmpv6PayloadSlice::NeighborAdvertisement(na)) => {
            let target = na.target_address();
            if target.is_multicast() {
                return Err(NdpError::MulticastTarget(target));
            }
            let options = Options::parse(na.options(), false)?;
            if ip_dst.is_multicast() && flags.solicited {
                return Err(NdpError::SolicitedToMulticast(ip_dst));
            }
            let target_mac = options.target.map(ethernet_address).transpose()?;
            Ok(NdpMessage::NeighborAdvertisement(NeighborAdvertisement { target, flags, target_mac }))
        }
        (_, Icmpv6PayloadSlice::Redirect(redirect)) => {
            if !ip_src.is_unicast_link_local() {
                return Err(NdpError::SourceNotLinkLocal(ip_src));
            }
            let (target, destination) = (redirect.target_address(), redirect.destination_address());
            if destination.is_multicast() {
                return Err(NdpError::MulticastDestination(destination));
            }
            if !target.is_unicast_link_local() && target != destination {
                return Err(NdpError::RedirectTarget(target));
            }
            let options = Options::parse(redirect.options(), false)?;
            let target_mac = options.target.map(ethernet_address).transpose()?;
            Ok(NdpMessage::Redirect(Redirect { target, destination, target_mac }))
        }
        _ => Err(NdpError::NotNdp(slice.type_u8())),
    }
}

// -------------------------------------------------------------------------------------
// Writers.
// -------------------------------------------------------------------------------------

/// Where a solicitation goes: what [`NdpCache::due`](crate::ndp::NdpCache::due) asks for and [`write_solicitation`]
/// writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solicit {
    /// Address resolution: to the target's solicited-node multicast address (RFC 4861 7.2.2).
    Multicast,
    /// A reachability probe: to the target's address at its cached MAC (RFC 4861 7.3.3).
    Unicast([u8; 6]),
}

/// Return a link-layer address option of `kind` carrying `mac` (RFC 4861 4.6.1, RFC 2464 6).
fn lla_option(kind: NdpOptionType, mac: [u8; 6]) -> [u8; LLA_OPTION_LEN] {
    let [t, l] = NdpOptionHeader { option_type: kind, length_units: 1 }.to_bytes();
    [t, l, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]
}

/// Write an Ethernet/IPv6/ICMPv6 frame with hop limit 255 and the checksum filled in.
fn write_frame(
    buf: &mut [u8],
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    src: Ipv6Addr,
    dst: Ipv6Addr,
    icmp_type: Icmpv6Type,
    body: &[u8],
) -> usize {
    let icmp_len = ICMP_HEADER_LEN + body.len();
    let len = ICMP_OFFSET + icmp_len;
    assert!(buf.len() >= len, "an NDP frame needs {len} bytes; the buffer has {}", buf.len());
    write_ethernet(buf, src_mac, dst_mac, EtherType::IPV6);
    write_ipv6(&mut buf[ETH_LEN..], src, dst, IpNumber::IPV6_ICMP, icmp_len, HOP_LIMIT, bypass_tcp::IpEcn::NotEct);
    let icmp = &mut buf[ICMP_OFFSET..len];
    icmp[..ICMP_HEADER_LEN].copy_from_slice(&Icmpv6Header { icmp_type, checksum: 0 }.to_bytes());
    icmp[ICMP_HEADER_LEN..].copy_from_slice(body);
    let sum = checksum(src, dst, icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    len
}

/// Write a Neighbour Solicitation for `target` from `our_ip` at `our_mac` into `buf` (at
/// least [`NDP_FRAME_LEN`] bytes; panics if shorter); return its length (RFC 4861 4.3,
/// 7.2.2). `dst` is [`Solicit::Multicast`] for resolution and DAD, to the solicited-node
/// address of `target`, or [`Solicit::Unicast`] for a probe, to `target` itself.
///
/// With `our_ip` unspecified (`::`) this is the solicitation of Duplicate Address Detection
/// (RFC 4862 5.4.2): it carries no source link-layer address option (RFC 4861 4.3);
/// otherwise it does.
pub fn write_solicitation(buf: &mut [u8], our_mac: [u8; 6], our_ip: Ipv6Addr, target: Ipv6Addr, dst: Solicit) -> usize {
    let (dst_mac, dst_ip) = match dst {
        Solicit::Multicast => (multicast_mac(solicited_node(target)), solicited_node(target)),
        Solicit::Unicast(mac) => (mac, target),
    };
    let mut body = [0u8; 16 + LLA_OPTION_LEN];
    body[..16].copy_from_slice(&target.octets());
    let n = if our_ip.is_unspecified() {
        16
    } else {
        body[16..].copy_from_slice(&lla_option(NdpOptionType::SOURCE_LINK_LAYER_ADDRESS, our_mac));
        body.len()
    };
    write_frame(buf, (our_mac, dst_mac), our_ip, dst_ip, Icmpv6Type::NeighborSolicitation, &body[..n])
}

/// Write a Neighbour Advertisement of `target` at `our_mac` from `our_ip` to `dst_ip` at
/// `dst_mac`, with `flags` and the target link-layer address option, into `buf` (at least
/// [`NDP_FRAME_LEN`] bytes; panics if shorter); return its length (RFC 4861 4.4, 7.2.4).
///
/// The answer to a solicitation goes to its source address at its source link-layer
/// address (or the frame's source MAC) with `solicited` set; one to a solicitation from
/// the unspecified address (DAD) goes to [`ALL_NODES`] at `multicast_mac(ALL_NODES)` with
/// `solicited` clear. Set `r#override` unless `target` is anycast or proxied (RFC 4861 7.2.4).
pub fn write_advertisement(
    buf: &mut [u8],
    our_mac: [u8; 6],
    our_ip: Ipv6Addr,
    dst_mac: [u8; 6],
    dst_ip: Ipv6Addr,
    target: Ipv6Addr,
    flags: NaFlags,
) -> usize {
    let mut body = [0u8; 16 + LLA_OPTION_LEN];
    body[..16].copy_from_slice(&target.octets());
    body[16..].copy_from_slice(&lla_option(NdpOptionType::TARGET_LINK_LAYER_ADDRESS, our_mac));
    write_frame(buf, (our_mac, dst_mac), our_ip, dst_ip, Icmpv6Type::NeighborAdvertisement(flags), &body)
}

/// Write a Router Solicitation from `our_ip` at `our_mac` to [`ALL_ROUTERS`] into `buf` (at
/// least [`NDP_FRAME_LEN`] bytes; panics if shorter); return its length (RFC 4861 4.1,
/// 6.3.7). It carries the source link-layer address option unless `our_ip` is unspecified.
pub fn write_router_solicitation(buf: &mut [u8], our_mac: [u8; 6], our_ip: Ipv6Addr) -> usize {
    let option = lla_option(NdpOptionType::SOURCE_LINK_LAYER_ADDRESS, our_mac);
    let body: &[u8] = if our_ip.is_unspecified() { &[] } else { &option };
    let dst_mac = multicast_mac(ALL_ROUTERS);
    write_frame(buf, (our_mac, dst_mac), our_ip, ALL_ROUTERS, Icmpv6Type::RouterSolicitation, body)
}

#[cfg(test)]
pub(crate) mod tests {
    //! The codec's tests, and the fixtures and message builders the cache's tests share.

    use super::*;
    use etherparse::Ipv6HeaderSlice;

    pub(crate) const A_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    pub(crate) const B_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    pub(crate) const C_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x0c];
    /// A's link-local address, from `A_MAC`.
    pub(crate) const A: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0x00ff, 0xfe12, 0x3456);
    /// B's link-local address, from `B_MAC`.
    pub(crate) const B: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0x00ff, 0xfeab, 0xcdef);
    pub(crate) const GLOBAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
    pub(crate) const UNSPECIFIED: Ipv6Addr = Ipv6Addr::UNSPECIFIED;

    /// Link-local neighbour `n`.
    pub(crate) fn ll(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x100, n)
    }

    // Fixtures built byte by byte, checksums computed by hand (a separate one's complement
    // sum over pseudo-header and message, RFC 8200 8.1), not by the code under test.

    /// A (fe80::5054:ff:fe12:3456, 52:54:00:12:34:56) resolves B (fe80::5054:ff:feab:cdef):
    /// to ff02::1:ffab:cdef at 33:33:ff:ab:cd:ef, with A's MAC in the SLLA option.
    /// Checksum 0x859a.
    pub(crate) const NS_FRAME: [u8; 86] = [
        0x33, 0x33, 0xff, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x01, 0xff, 0xab, 0xcd, 0xef, 0x87, 0x00, 0x85, 0x9a, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0x01, 0x01, //
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// B answers: solicited and override (0x60), B's MAC in the TLLA option. Checksum 0x3997.
    pub(crate) const NA_FRAME: [u8; 86] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0x88, 0x00, 0x39, 0x97, 0x60, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0x02, 0x01, //
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,
    ];

    /// A checks its own address (DAD): from ::, no option. Checksum 0xc402.
    pub(crate) const DAD_FRAME: [u8; 78] = [
        0x33, 0x33, 0xff, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x18, 0x3a, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x01, 0xff, 0x12, 0x34, 0x56, 0x87, 0x00, 0xc4, 0x02, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];

    /// A asks for routers: to ff02::2 at 33:33:00:00:00:02, SLLA. Checksum 0x71b5.
    pub(crate) const RS_FRAME: [u8; 70] = [
        0x33, 0x33, 0x00, 0x00, 0x00, 0x02, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x10, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x85, 0x00, 0x71, 0xb5, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, //
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// Router B advertises to ff02::1: hop limit 64, O flag, lifetime 1800 s, reachable
    /// and retrans unspecified; SLLA, MTU 1500, prefix 2001:db8:1::/64 (L, A, valid 86400,
    /// preferred 14400), and an RDNSS option (type 25, RFC 8106) we do not know. Checksum 0xa53c.
    pub(crate) const RA_FRAME: [u8; 142] = [
        0x33, 0x33, 0x00, 0x00, 0x00, 0x01, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x58, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0x00, 0xa5, 0x3c, 0x40, 0x40, 0x07, 0x08, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x05, 0x01, //
        0x00, 0x00, 0x00, 0x00, 0x05, 0xdc, 0x03, 0x04, 0x40, 0xc0, 0x00, 0x01, 0x51, 0x80, 0x00, 0x00, //
        0x38, 0x40, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x19, 0x03, 0x00, 0x00, 0x00, 0x00, 0x02, 0x58, 0x20, 0x01, //
        0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53,
    ];

    /// Return the IPv6 source, destination, hop limit and ICMPv6 message of a frame.
    pub(crate) fn split(frame: &[u8]) -> (Ipv6Addr, Ipv6Addr, u8, &[u8]) {
        let ip = Ipv6HeaderSlice::from_slice(&frame[ETH_LEN..]).unwrap();
        (ip.source_addr(), ip.destination_addr(), ip.hop_limit(), &frame[ICMP_OFFSET..])
    }

    pub(crate) fn parse_frame(frame: &[u8]) -> Result<NdpMessage, NdpError> {
        let (src, dst, hop_limit, icmp) = split(frame);
        parse(src, dst, hop_limit, icmp)
    }

    /// Fill in the checksum of `msg` from `src` to `dst`.
    pub(crate) fn seal(msg: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) {
        let sum = checksum(src, dst, msg);
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
    }

    /// Return a sealed ICMPv6 message: type, code, checksum, `word`, then `parts`.
    pub(crate) fn message(kind: u8, code: u8, word: [u8; 4], parts: &[&[u8]], src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut msg = vec![kind, code, 0, 0];
        msg.extend(word);
        for part in parts {
            msg.extend_from_slice(part);
        }
        seal(&mut msg, src, dst);
        msg
    }

    pub(crate) fn slla(mac: [u8; 6]) -> [u8; 8] {
        lla_option(NdpOptionType::SOURCE_LINK_LAYER_ADDRESS, mac)
    }

    pub(crate) fn tlla(mac: [u8; 6]) -> [u8; 8] {
        lla_option(NdpOptionType::TARGET_LINK_LAYER_ADDRESS, mac)
    }

    pub(crate) fn prefix_option(prefix: Ipv6Addr, len: u8, flags: u8, valid: u32) -> Vec<u8> {
        let mut option = vec![3, 4, len, flags];
        option.extend(valid.to_be_bytes());
        option.extend(valid.to_be_bytes());
        option.extend([0; 4]);
        option.extend(prefix.octets());
        option
    }

    pub(crate) fn ns_message(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let octets = target.octets();
        let mut parts: Vec<&[u8]> = vec![&octets];
        parts.extend_from_slice(options);
        message(135, 0, [0; 4], &parts, src, dst)
    }

    pub(crate) fn na_message(src: Ipv6Addr, dst: Ipv6Addr, flags: u8, target: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let octets = target.octets();
        let mut parts: Vec<&[u8]> = vec![&octets];
        parts.extend_from_slice(options);
        message(136, 0, [flags, 0, 0, 0], &parts, src, dst)
    }

    pub(crate) fn ra_message(src: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = vec![&[0; 8]];
        parts.extend_from_slice(options);
        message(134, 0, [64, 0, 0x07, 0x08], &parts, src, ALL_NODES)
    }

    pub(crate) fn redirect_message(
        src: Ipv6Addr,
        target: Ipv6Addr,
        destination: Ipv6Addr,
        options: &[&[u8]],
    ) -> Vec<u8> {
        let (t, d) = (target.octets(), destination.octets());
        let mut parts: Vec<&[u8]> = vec![&t, &d];
        parts.extend_from_slice(options);
        message(137, 0, [0; 4], &parts, src, A)
    }

    pub(crate) const SOLICITED_OVERRIDE: NaFlags = NaFlags { router: false, solicited: true, r#override: true };

    // ---------------------------------------------------------------------------------
    // Wire format: fixtures, writers, round trips.
    // ---------------------------------------------------------------------------------

    #[test]
    fn solicitation_fixture_parses_and_is_what_we_write() {
        let (src, dst, _, icmp) = split(&NS_FRAME);
        assert_eq!(checksum(src, dst, icmp), 0x859a);
        assert_eq!(
            parse_frame(&NS_FRAME),
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target: B, source_mac: Some(A_MAC) }))
        );
        let mut buf = [0xa5u8; 100];
        let n = write_solicitation(&mut buf, A_MAC, A, B, Solicit::Multicast);
        assert_eq!((n, &buf[..n]), (NDP_FRAME_LEN, &NS_FRAME[..]));
        assert!(buf[n..].iter().all(|&b| b == 0xa5), "nothing written past the frame");
    }

    #[test]
    fn advertisement_fixture_parses_and_is_what_we_write() {
        let (src, dst, _, icmp) = split(&NA_FRAME);
        assert_eq!(checksum(src, dst, icmp), 0x3997);
        let expected = NeighborAdvertisement { target: B, flags: SOLICITED_OVERRIDE, target_mac: Some(B_MAC) };
        assert_eq!(parse_frame(&NA_FRAME), Ok(NdpMessage::NeighborAdvertisement(expected)));
        let mut buf = [0xa5u8; 100];
        let n = write_advertisement(&mut buf, B_MAC, B, A_MAC, A, B, SOLICITED_OVERRIDE);
        assert_eq!(&buf[..n], &NA_FRAME[..]);
        assert!(buf[n..].iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn dad_solicitation_fixture_has_no_option() {
        let (src, dst, _, icmp) = split(&DAD_FRAME);
        assert_eq!(checksum(src, dst, icmp), 0xc402);
        assert_eq!(
            parse_frame(&DAD_FRAME),
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target: A, source_mac: None }))
        );
        let mut buf = [0xa5u8; 100];
        let n = write_solicitation(&mut buf, A_MAC, UNSPECIFIED, A, Solicit::Multicast);
        assert_eq!(&buf[..n], &DAD_FRAME[..]);
        assert_eq!(buf[n], 0xa5);
    }

    #[test]
    fn router_solicitation_fixture_is_what_we_write() {
        let (src, dst, _, icmp) = split(&RS_FRAME);
        assert_eq!(checksum(src, dst, icmp), 0x71b5);
        let mut buf = [0xa5u8; 100];
        let n = write_router_solicitation(&mut buf, A_MAC, A);
        assert_eq!(&buf[..n], &RS_FRAME[..]);
        assert_eq!(
            parse_frame(&RS_FRAME),
            Ok(NdpMessage::RouterSolicitation(RouterSolicitation { source_mac: Some(A_MAC) }))
        );
        // From the unspecified address: no option (RFC 4861 4.1).
        let n = write_router_solicitation(&mut buf, A_MAC, UNSPECIFIED);
        assert_eq!(n, ICMP_OFFSET + 8);
        assert_eq!(parse_frame(&buf[..n]), Ok(NdpMessage::RouterSolicitation(RouterSolicitation { source_mac: None })));
    }

    #[test]
    fn router_advertisement_fixture_parses_and_skips_the_unknown_option() {
        let (src, dst, _, icmp) = split(&RA_FRAME);
        assert_eq!(checksum(src, dst, icmp), 0xa53c);
        let expected = RouterAdvertisement {
            cur_hop_limit: 64,
            managed: false,
            other: true,
            router_lifetime_secs: 1800,
            reachable_time_ms: 0,
            retrans_timer_ms: 0,
            source_mac: Some(B_MAC),
            mtu: Some(1500),
            prefixes: vec![PrefixInfo {
                prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
                prefix_len: 64,
                on_link: true,
                autonomous: true,
                valid_lifetime_secs: 86400,
                preferred_lifetime_secs: 14400,
            }],
        };
        assert_eq!(parse_frame(&RA_FRAME), Ok(NdpMessage::RouterAdvertisement(expected)));
    }

    #[test]
    fn unicast_probe_goes_to_the_target_at_its_mac() {
        let mut buf = [0xa5u8; NDP_FRAME_LEN];
        let n = write_solicitation(&mut buf, A_MAC, A, B, Solicit::Unicast(B_MAC));
        assert_eq!(&buf[..6], &B_MAC);
        let (src, dst, hop_limit, _) = split(&buf[..n]);
        assert_eq!((src, dst, hop_limit), (A, B, 255));
        assert_eq!(
            parse_frame(&buf[..n]),
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target: B, source_mac: Some(A_MAC) }))
        );
    }

    #[test]
    fn advertisements_round_trip_every_flag_combination() {
        let mut buf = [0xa5u8; NDP_FRAME_LEN];
        for bits in 0..8u8 {
            let flags = NaFlags { router: bits & 4 != 0, solicited: bits & 2 != 0, r#override: bits & 1 != 0 };
            let n = write_advertisement(&mut buf, B_MAC, B, A_MAC, GLOBAL, B, flags);
            let (src, dst, _, icmp) = split(&buf[..n]);
            assert_eq!(u16::from_be_bytes([icmp[2], icmp[3]]), checksum(src, dst, icmp));
            let na = NeighborAdvertisement { target: B, flags, target_mac: Some(B_MAC) };
            assert_eq!(parse_frame(&buf[..n]), Ok(NdpMessage::NeighborAdvertisement(na)), "{flags:?}");
        }
    }

    #[test]
    fn address_helpers_follow_the_rfc_examples() {
        // RFC 4291 2.7.1.
        let addr: Ipv6Addr = "4037::1:800:200e:8c6c".parse().unwrap();
        assert_eq!(solicited_node(addr), "ff02::1:ff0e:8c6c".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(solicited_node(addr)));
        assert!(!is_solicited_node(ALL_NODES) && !is_solicited_node(addr));
        // RFC 2464 7 and 4.
        assert_eq!(multicast_mac(solicited_node(addr)), [0x33, 0x33, 0xff, 0x0e, 0x8c, 0x6c]);
        assert_eq!(multicast_mac(ALL_NODES), [0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(
            link_local_from_mac([0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde]),
            "fe80::3656:78ff:fe9a:bcde".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(link_local_from_mac(A_MAC), A);
    }

    #[test]
    fn checksum_accepts_any_length() {
        for len in 0..12 {
            let msg = vec![0x5a; len];
            let _ = checksum(A, B, &msg);
        }
        // A message sealed with its checksum verifies (the sum over it is all ones).
        let msg = ns_message(A, B, B, &[]);
        assert!(Icmpv6Slice::from_slice(&msg).unwrap().is_checksum_valid(A.octets(), B.octets()));
    }

    // ---------------------------------------------------------------------------------
    // Validity checks (RFC 4861 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1).
    // ---------------------------------------------------------------------------------

    /// A message that must fail: name, IPv6 source, destination, hop limit, ICMPv6 bytes, error.
    type Case = (&'static str, Ipv6Addr, Ipv6Addr, u8, Vec<u8>, NdpError);

    #[test]
    fn invalid_messages_are_rejected_with_the_rule_they_break() {
        let sol_b = solicited_node(B);
        let good_ns = ns_message(A, sol_b, B, &[&slla(A_MAC)]);
        let mut bad_sum = good_ns.clone();
        bad_sum[2] ^= 1;
        let two_units = [1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        let three_units = [2u8, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let prefix = prefix_option(GLOBAL, 64, 0xc0, 60);
        let b = B.octets();
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("empty", A, sol_b, 255, vec![], NdpError::Truncated { len: 0, min: 8 }),
            ("three bytes", A, sol_b, 255, vec![135, 0, 0], NdpError::Truncated { len: 3, min: 8 }),
            ("echo request", A, B, 255, message(128, 0, [0; 4], &[], A, B), NdpError::NotNdp(128)),
            // Neighbour Solicitation, 7.1.1.
            ("NS hop limit 254", A, sol_b, 254, good_ns.clone(), NdpError::HopLimit(254)),
            ("NS hop limit 1", A, sol_b, 1, good_ns.clone(), NdpError::HopLimit(1)),
            ("NS bad checksum", A, sol_b, 255, bad_sum, NdpError::Checksum),
            ("NS checksum for another source", GLOBAL, sol_b, 255, good_ns, NdpError::Checksum),
            ("NS code 1", A, sol_b, 255, message(135, 1, [0; 4], &[&b], A, sol_b), NdpError::Code(1)),
            ("NS of 23 bytes", A, sol_b, 255, message(135, 0, [0; 4], &[&b[..15]], A, sol_b),
                NdpError::Truncated { len: 23, min: 24 }),
            ("NS multicast target", A, sol_b, 255, ns_message(A, sol_b, ALL_NODES, &[]),
                NdpError::MulticastTarget(ALL_NODES)),
            ("NS zero-length option", A, sol_b, 255, ns_message(A, sol_b, B, &[&[1, 0, 0, 0, 0, 0, 0, 0]]),
                NdpError::OptionZeroLength { kind: 1 }),
            ("NS unknown zero-length option", A, sol_b, 255, ns_message(A, sol_b, B, &[&[200, 0, 0, 0, 0, 0, 0, 0]]),
                NdpError::OptionZeroLength { kind: 200 }),
            ("NS zero-length option after a good one", A, sol_b, 255,
                ns_message(A, sol_b, B, &[&slla(A_MAC), &[5, 0, 0, 0, 0, 0, 0, 0]]),
                NdpError::OptionZeroLength { kind: 5 }),
            ("NS option past the end", A, sol_b, 255, ns_message(A, sol_b, B, &[&[1, 2, 1, 2, 3, 4, 5, 6]]),
                NdpError::OptionTruncated { kind: 1 }),
            ("NS option header cut", A, sol_b, 255, ns_message(A, sol_b, B, &[&[1]]),
                NdpError::OptionTruncated { kind: 1 }),
            ("NS SLLA of two units", A, sol_b, 255, ns_message(A, sol_b, B, &[&two_units]),
                NdpError::LinkLayerAddressLength { units: 2 }),
            ("DAD NS to a unicast address", UNSPECIFIED, B, 255, ns_message(UNSPECIFIED, B, B, &[]),
                NdpError::UnspecifiedSourceNotSolicitedNode(B)),
            ("DAD NS to all-nodes", UNSPECIFIED, ALL_NODES, 255, ns_message(UNSPECIFIED, ALL_NODES, B, &[]),
                NdpError::UnspecifiedSourceNotSolicitedNode(ALL_NODES)),
            ("DAD NS with SLLA", UNSPECIFIED, sol_b, 255, ns_message(UNSPECIFIED, sol_b, B, &[&slla(A_MAC)]),
                NdpError::UnspecifiedSourceWithLinkLayerAddress),
            // Neighbour Advertisement, 7.1.2.
            ("NA of 20 bytes", B, A, 255, message(136, 0, [0x60, 0, 0, 0], &[&b[..12]], B, A),
                NdpError::Truncated { len: 20, min: 24 }),
            ("NA hop limit 64", B, A, 64, na_message(B, A, 0x60, B, &[&tlla(B_MAC)]), NdpError::HopLimit(64)),
            ("NA code 3", B, A, 255, message(136, 3, [0x60, 0, 0, 0], &[&b], B, A), NdpError::Code(3)),
            ("NA multicast target", B, A, 255, na_message(B, A, 0x60, sol_b, &[]), NdpError::MulticastTarget(sol_b)),
            ("NA solicited to all-nodes", B, ALL_NODES, 255, na_message(B, ALL_NODES, 0x40, B, &[&tlla(B_MAC)]),
                NdpError::SolicitedToMulticast(ALL_NODES)),
            ("NA zero-length option", B, A, 255, na_message(B, A, 0x60, B, &[&[2, 0, 0, 0, 0, 0, 0, 0]]),
                NdpError::OptionZeroLength { kind: 2 }),
            ("NA TLLA of three units", B, A, 255, na_message(B, A, 0x60, B, &[&three_units]),
                NdpError::LinkLayerAddressLength { units: 3 }),
            // Router Advertisement, 6.1.2.
            ("RA from a global address", GLOBAL, ALL_NODES, 255, ra_message(GLOBAL, &[]),
                NdpError::SourceNotLinkLocal(GLOBAL)),
            ("RA from the unspecified address", UNSPECIFIED, ALL_NODES, 255, ra_message(UNSPECIFIED, &[]),
                NdpError::SourceNotLinkLocal(UNSPECIFIED)),
            ("RA of 15 bytes", B, ALL_NODES, 255, message(134, 0, [64, 0, 0, 0], &[&[0; 7]], B, ALL_NODES),
                NdpError::Truncated { len: 15, min: 16 }),
            ("RA hop limit 254", B, ALL_NODES, 254, ra_message(B, &[]), NdpError::HopLimit(254)),
            ("RA code 1", B, ALL_NODES, 255, message(134, 1, [64, 0, 0, 0], &[&[0; 8]], B, ALL_NODES),
                NdpError::Code(1)),
            ("RA zero-length option after a prefix", B, ALL_NODES, 255,
                ra_message(B, &[&prefix, &[25, 0, 0, 0, 0, 0, 0, 0]]), NdpError::OptionZeroLength { kind: 25 }),
            ("RA prefix past the end", B, ALL_NODES, 255, ra_message(B, &[&prefix[..24]]),
                NdpError::OptionTruncated { kind: 3 }),
            // Router Solicitation, 6.1.1.
            ("RS from :: with SLLA", UNSPECIFIED, ALL_ROUTERS, 255,
                message(133, 0, [0; 4], &[&slla(A_MAC)], UNSPECIFIED, ALL_ROUTERS),
                NdpError::UnspecifiedSourceWithLinkLayerAddress),
            ("RS hop limit 255 only", A, ALL_ROUTERS, 0, message(133, 0, [0; 4], &[], A, ALL_ROUTERS),
                NdpError::HopLimit(0)),
            // Redirect, 8.1.
            ("Redirect from a global address", GLOBAL, A, 255, redirect_message(GLOBAL, B, GLOBAL, &[]),
                NdpError::SourceNotLinkLocal(GLOBAL)),
            ("Redirect of 39 bytes", B, A, 255, message(137, 0, [0; 4], &[&b, &b[..15]], B, A),
                NdpError::Truncated { len: 39, min: 40 }),
            ("Redirect for multicast", B, A, 255, redirect_message(B, ll(9), ALL_NODES, &[]),
                NdpError::MulticastDestination(ALL_NODES)),
            ("Redirect to a global non-destination", B, A, 255,
                redirect_message(B, GLOBAL, "2001:db8::7".parse().unwrap(), &[]), NdpError::RedirectTarget(GLOBAL)),
        ];
        for (name, src, dst, hop_limit, msg, error) in cases {
            assert_eq!(parse(src, dst, hop_limit, &msg), Err(error), "{name}");
        }
    }

    #[test]
    fn valid_edge_cases_are_accepted() {
        let sol_b = solicited_node(B);
        // DAD: from ::, to the solicited-node address, no option.
        let dad = ns_message(UNSPECIFIED, sol_b, B, &[]);
        assert_eq!(
            parse(UNSPECIFIED, sol_b, 255, &dad),
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target: B, source_mac: None }))
        );
        // An unsolicited advertisement to all-nodes.
        let na = na_message(B, ALL_NODES, 0x20, B, &[&tlla(B_MAC)]);
        let flags = NaFlags { router: false, solicited: false, r#override: true };
        assert_eq!(
            parse(B, ALL_NODES, 255, &na),
            Ok(NdpMessage::NeighborAdvertisement(NeighborAdvertisement { target: B, flags, target_mac: Some(B_MAC) }))
        );
        // Unknown options skipped; an option the type does not use is ignored whatever its
        // size (a TLLA of two units in a solicitation); the first SLLA counts.
        let two_units = [2u8, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        let ns = ns_message(A, sol_b, B, &[&[200, 1, 9, 9, 9, 9, 9, 9], &two_units, &slla(A_MAC), &slla(C_MAC)]);
        assert_eq!(
            parse(A, sol_b, 255, &ns),
            Ok(NdpMessage::NeighborSolicitation(NeighborSolicitation { target: B, source_mac: Some(A_MAC) }))
        );
        // A known option of a size we cannot read is skipped; the first MTU counts.
        let mtu = |v: u32| {
            let mut o = vec![5, 1, 0, 0];
            o.extend(v.to_be_bytes());
            o
        };
        let long_mtu = [5u8, 2, 0, 0, 0, 0, 5, 0xdc, 0, 0, 0, 0, 0, 0, 0, 0];
        let short_prefix = [3u8, 1, 64, 0xc0, 0, 0, 0, 60];
        let ra = ra_message(B, &[&long_mtu, &short_prefix, &mtu(1400), &mtu(9000)]);
        let Ok(NdpMessage::RouterAdvertisement(ra)) = parse(B, ALL_NODES, 255, &ra) else { panic!("RA rejected") };
        assert_eq!((ra.mtu, ra.prefixes.len(), ra.reachable_time_ms), (Some(1400), 0, 0));
        assert_eq!((ra.cur_hop_limit, ra.router_lifetime_secs), (64, 0x0708));
        // Redirects: to a link-local router, and to the destination itself.
        let destination: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let redirect = redirect_message(B, ll(9), destination, &[&tlla(C_MAC)]);
        assert_eq!(
            parse(B, A, 255, &redirect),
            Ok(NdpMessage::Redirect(Redirect { target: ll(9), destination, target_mac: Some(C_MAC) }))
        );
        let redirect = redirect_message(B, destination, destination, &[]);
        assert!(parse(B, A, 255, &redirect).is_ok());
        // A router solicitation from :: without an option.
        let rs = message(133, 0, [0; 4], &[], UNSPECIFIED, ALL_ROUTERS);
        assert!(parse(UNSPECIFIED, ALL_ROUTERS, 255, &rs).is_ok());
    }
}
