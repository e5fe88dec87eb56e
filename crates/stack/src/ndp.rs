//! IPv6 Neighbour Discovery for hosts (RFC 4861), sans-IO: the message codec, the neighbour
//! cache and its reachability state machine, the default router and on-link prefix lists
//! learned from Router Advertisements, and Duplicate Address Detection (RFC 4862 5.4).
//!
//! It is the IPv6 counterpart of [`crate::arp`], and a host drives the two alike. Nothing
//! here reads a clock or touches a device: time comes in as `now`, messages come in parsed,
//! and frames go out through the writers into the caller's buffer.
//!
//! - **Receiving** an ICMPv6 message of type 133 to 137: [`parse`] it with the IPv6 source,
//!   destination and hop limit. `parse` checks the ICMPv6 checksum itself (the caller need
//!   not; [`checksum`] is there for other ICMPv6 messages) and the validity rules of RFC
//!   4861 6.1 and 7.1, and names the failed rule in an [`NdpError`]. Then hand the message to
//!   the [`NdpCache`]: [`NdpCache::handle_solicitation`] (only for a target address that is
//!   ours, RFC 4861 7.2.3; answer it with [`write_advertisement`]),
//!   [`NdpCache::handle_advertisement`], [`NdpCache::handle_router_advertisement`] and
//!   [`NdpCache::handle_redirect`]. Each returns an [`Update`]: the frames that were waiting
//!   for the address, their destination MAC filled in, to send now.
//! - **Sending** to an on-link next hop ([`NdpCache::on_link`], else
//!   [`NdpCache::default_router`]): [`NdpCache::lookup`]; on `None`, [`NdpCache::hold`] the
//!   frame, which starts address resolution. Multicast destinations need no resolution:
//!   [`multicast_mac`].
//! - **Timers**: call [`NdpCache::due`] once [`NdpCache::next_timeout`] has passed. It asks
//!   for the solicitations to send (write them with [`write_solicitation`]) and returns the
//!   resolutions that failed with the frames they held, for ICMPv6 address unreachable
//!   errors (RFC 4861 7.2.2).
//! - **Upper-layer progress** (TCP seeing new data acknowledged): [`NdpCache::confirm`]
//!   (RFC 4861 7.3.1).
//!
//! # Neighbour states (RFC 4861 7.3.2, appendix C)
//!
//! - INCOMPLETE: resolving. A multicast solicitation to the solicited-node address goes out
//!   every RetransTimer; after MAX_MULTICAST_SOLICIT of them without an answer the entry is
//!   removed and its held frames handed back.
//! - REACHABLE: confirmed within ReachableTime (BaseReachableTime times a random factor in
//!   [0.5, 1.5], drawn per confirmation from a generator seeded by [`NdpConfig::seed`]).
//!   Past it the entry is STALE; the change is made lazily, when the entry is next used.
//! - STALE: an address we have not confirmed; usable, and nothing is sent until it is used.
//! - DELAY: used while STALE; waits DELAY_FIRST_PROBE_TIME for an upper-layer confirmation.
//! - PROBE: unicast solicitations to the cached MAC every RetransTimer; after
//!   MAX_UNICAST_SOLICIT without an answer the entry is removed.
//!
//! Where appendix C and the text of 7.2.5 disagree, the text wins: a solicited advertisement
//! without a target link-layer address option makes a resolved entry REACHABLE (appendix C
//! lists it as "unchanged"), which is what a unicast probe answered without the option needs
//! (RFC 4861 7.2.4 allows omitting it), and what Linux does.
//!
//! # Not done
//!
//! - MLD (RFC 3810): the host must receive frames sent to `33:33:ff:xx:xx:xx` for each of its
//!   addresses (and `33:33:00:00:00:01`); nothing here joins the groups.
//! - The Destination Cache (RFC 4861 5.1) and next-hop determination are the host's:
//!   [`NdpCache::on_link`] and [`NdpCache::default_router`] answer its questions, and
//!   [`NdpCache::handle_redirect`] only updates the neighbour cache (the host checks that the
//!   redirect came from the current first-hop router, RFC 4861 8.1, and re-points its route).
//! - Stateless address autoconfiguration (RFC 4862): prefixes are parsed with their A flag
//!   and lifetimes but no address is formed. Router preference (RFC 4191), RDNSS (RFC 8106)
//!   and other options are skipped as unrecognised. No router behaviour (no RA is sent;
//!   Router Solicitations are parsed, and hosts discard them, RFC 4861 6.1.1).
//! - Round-robin default router selection (RFC 4861 6.3.6) is approximated: a router whose
//!   resolution or probing failed moves to the back of the list.
//! - DAD is done with [`Dad`] (RFC 4862 5.4), without the looped-back-solicitation check
//!   (RFC 4862 5.4.3) and without RFC 7527's nonces: a userspace host does not see its own
//!   multicast frames.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

use bypass_tcp::Instant;
use etherparse::checksum::Sum16BitWords;
use etherparse::icmpv6::{
    self, Icmpv6PayloadSlice, MtuOptionSlice, NdpOptionHeader, NdpOptionType, NeighborAdvertisementHeader,
    PrefixInformationOptionSlice, SourceLinkLayerAddressOptionSlice, TargetLinkLayerAddressOptionSlice,
};
use etherparse::{
    EtherType, Ethernet2Header, Icmpv6Header, Icmpv6Slice, Icmpv6Type, IpNumber, Ipv6FlowLabel, Ipv6Header,
};

// -------------------------------------------------------------------------------------
// Constants (RFC 4861 10).
// -------------------------------------------------------------------------------------

/// Multicast solicitations sent before address resolution gives up (RFC 4861 10).
pub const MAX_MULTICAST_SOLICIT: u32 = 3;
/// Unicast probes sent before a neighbour is declared unreachable (RFC 4861 10).
pub const MAX_UNICAST_SOLICIT: u32 = 3;
/// Default time between solicitations (RFC 4861 10, RetransTimer).
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);
/// Default BaseReachableTime (RFC 4861 10, REACHABLE_TIME).
pub const REACHABLE_TIME: Duration = Duration::from_secs(30);
/// Time a used STALE entry waits in DELAY before probing (RFC 4861 10).
pub const DELAY_FIRST_PROBE_TIME: Duration = Duration::from_secs(5);
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

const ETH_LEN: usize = Ethernet2Header::LEN;
const ICMP_OFFSET: usize = ETH_LEN + Ipv6Header::LEN;
/// ICMPv6 header (type, code, checksum, 4 bytes of flags or reserved).
const ICMP_HEADER_LEN: usize = Icmpv6Header::MIN_LEN;
/// One link-layer address option for Ethernet: type, length 1, six bytes of MAC (RFC 2464 6).
const LLA_OPTION_LEN: usize = 8;

/// The longest frame a writer here produces (a solicitation or advertisement with its
/// link-layer address option): Ethernet, IPv6, 24 bytes of message and 8 of option.
pub const NDP_FRAME_LEN: usize = ICMP_OFFSET + ICMP_HEADER_LEN + 16 + LLA_OPTION_LEN;

/// Least time between solicitations, whatever the configuration or a Router Advertisement
/// says (Linux's floor for an advertised RetransTimer, 10 ms).
const MIN_RETRANS_TIMER: Duration = Duration::from_millis(10);
/// Least BaseReachableTime taken from a Router Advertisement (Linux's floor, 100 ms).
const MIN_REACHABLE_TIME: Duration = Duration::from_millis(100);
/// Most BaseReachableTime taken from a Router Advertisement (RFC 4861 6.2.1: routers
/// MUST NOT advertise more than an hour).
const MAX_REACHABLE_TIME: Duration = Duration::from_secs(3600);

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

/// Where a solicitation goes: what [`NdpCache::due`] asks for and [`write_solicitation`]
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
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: EtherType::IPV6 };
    buf[..ETH_LEN].copy_from_slice(&eth.to_bytes());
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: icmp_len as u16,
        next_header: IpNumber::IPV6_ICMP,
        hop_limit: HOP_LIMIT,
        source: src.octets(),
        destination: dst.octets(),
    };
    buf[ETH_LEN..ICMP_OFFSET].copy_from_slice(&ip.to_bytes());
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

// -------------------------------------------------------------------------------------
// The neighbour cache.
// -------------------------------------------------------------------------------------

/// Neighbour Discovery settings: the protocol constants of RFC 4861 10 and the bounds of the
/// cache. RetransTimer and BaseReachableTime start here and follow Router Advertisements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdpConfig {
    /// Multicast solicitations before resolution fails ([`MAX_MULTICAST_SOLICIT`]).
    pub max_multicast_solicit: u32,
    /// Unicast probes before a neighbour is unreachable ([`MAX_UNICAST_SOLICIT`]).
    pub max_unicast_solicit: u32,
    /// Time between solicitations ([`RETRANS_TIMER`]); at least 10 ms is used.
    pub retrans_timer: Duration,
    /// BaseReachableTime ([`REACHABLE_TIME`]); each confirmation lasts it times a random
    /// factor in [0.5, 1.5] (RFC 4861 6.3.2).
    pub reachable_time: Duration,
    /// Time a used STALE entry waits before probing ([`DELAY_FIRST_PROBE_TIME`]).
    pub delay_first_probe_time: Duration,
    /// Frames held per address being resolved; a new one pushes out the oldest
    /// (RFC 4861 7.2.2). At least 1.
    pub queue_limit: usize,
    /// Most neighbours in the cache, in any state. At least 1. When full, an address we
    /// send to takes the place of the oldest resolved entry (STALE first, then REACHABLE,
    /// DELAY, PROBE, each oldest first by when it entered its state); an address a message
    /// told us of takes only a STALE one's (or one whose ReachableTime is over), so a flood
    /// of solicitations cannot push out neighbours in use. INCOMPLETE entries are never
    /// evicted; they end within a few RetransTimers.
    pub max_entries: usize,
    /// Most of them INCOMPLETE at once; no more resolutions start until some end. At least 1.
    pub max_incomplete: usize,
    /// Most default routers remembered (RFC 4861 6.3.4 allows a host to keep only some).
    pub max_routers: usize,
    /// Most on-link prefixes remembered.
    pub max_prefixes: usize,
    /// Seed of the generator drawing the ReachableTime factors: give each host its own,
    /// from a secret (RFC 4861 6.3.2: the randomness keeps hosts from synchronising).
    pub seed: u64,
}

impl Default for NdpConfig {
    fn default() -> Self {
        NdpConfig {
            max_multicast_solicit: MAX_MULTICAST_SOLICIT,
            max_unicast_solicit: MAX_UNICAST_SOLICIT,
            retrans_timer: RETRANS_TIMER,
            reachable_time: REACHABLE_TIME,
            delay_first_probe_time: DELAY_FIRST_PROBE_TIME,
            queue_limit: 16,
            max_entries: 1024,
            max_incomplete: 256,
            max_routers: 8,
            max_prefixes: 16,
            seed: 0x6e64_7020_7365_6564,
        }
    }
}

/// A neighbour cache entry's reachability state (RFC 4861 7.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeighborState {
    /// Address resolution in progress; no MAC yet.
    Incomplete,
    /// Known reachable within ReachableTime.
    Reachable,
    /// Not known reachable; nothing is done until a packet is sent.
    Stale,
    /// Not known reachable, a packet was sent; waiting for upper-layer confirmation.
    Delay,
    /// Probing with unicast solicitations.
    Probe,
}

/// What the cache knows of one neighbour ([`NdpCache::neighbor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbor {
    /// The reachability state; a REACHABLE entry whose time has passed shows as STALE.
    pub state: NeighborState,
    /// The link-layer address, unless INCOMPLETE.
    pub mac: Option<[u8; 6]>,
    /// IsRouter (RFC 4861 7.2.5): the neighbour said it is a router.
    pub is_router: bool,
}

/// What handling a message did besides updating the cache.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// Frames that were waiting for the address, destination MAC filled in, oldest first:
    /// send them now (RFC 4861 7.2.5, appendix C "send queued packets").
    pub frames: VecDeque<Vec<u8>>,
    /// The neighbour said it is no longer a router, so it left the default router list
    /// (RFC 4861 7.2.5): stop using it as a next hop (RFC 4861 7.3.3).
    pub router_lost: bool,
}

/// A neighbour that did not answer ([`NdpCache::due`]); its entry is gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Failed {
    /// The neighbour.
    pub ip: Ipv6Addr,
    /// The frames held while resolving it (none after failed probing): answer each with an
    /// ICMPv6 Destination Unreachable, code 3 (address unreachable), or tell the local sender
    /// (RFC 4861 7.2.2, RFC 4443 3.1).
    pub frames: VecDeque<Vec<u8>>,
}

/// A state with its own data (RFC 4861 7.3.2); timers are deadlines.
#[derive(Debug)]
enum State {
    Incomplete { sent: u32, next: Instant, frames: VecDeque<Vec<u8>> },
    Reachable { mac: [u8; 6], until: Instant },
    Stale { mac: [u8; 6] },
    Delay { mac: [u8; 6], until: Instant },
    Probe { mac: [u8; 6], sent: u32, next: Instant },
}

impl State {
    fn kind(&self) -> NeighborState {
        match self {
            State::Incomplete { .. } => NeighborState::Incomplete,
            State::Reachable { .. } => NeighborState::Reachable,
            State::Stale { .. } => NeighborState::Stale,
            State::Delay { .. } => NeighborState::Delay,
            State::Probe { .. } => NeighborState::Probe,
        }
    }

    fn mac(&self) -> Option<[u8; 6]> {
        match *self {
            State::Incomplete { .. } => None,
            State::Reachable { mac, .. }
            | State::Stale { mac }
            | State::Delay { mac, .. }
            | State::Probe { mac, .. } => Some(mac),
        }
    }

    /// When `NdpCache::due` has work for this state.
    fn timer(&self) -> Option<Instant> {
        match *self {
            State::Incomplete { next, .. } | State::Probe { next, .. } => Some(next),
            State::Delay { until, .. } => Some(until),
            State::Reachable { .. } | State::Stale { .. } => None,
        }
    }

    /// Eviction order: STALE first; INCOMPLETE entries are never evicted.
    fn rank(&self) -> Option<u8> {
        match self {
            State::Incomplete { .. } => None,
            State::Stale { .. } => Some(0),
            State::Reachable { .. } => Some(1),
            State::Delay { .. } => Some(2),
            State::Probe { .. } => Some(3),
        }
    }

    /// RFC 4861 7.3.3: REACHABLE becomes STALE once ReachableTime has passed.
    fn expire(&mut self, now: Instant) {
        if let State::Reachable { mac, until } = *self
            && until <= now
        {
            *self = State::Stale { mac };
        }
    }
}

#[derive(Debug)]
struct Entry {
    state: State,
    is_router: bool,
    /// When the entry entered its state, in stamps; with `rank`, its key in `NdpCache::order`.
    stamp: u64,
}

#[derive(Clone, Copy, Debug)]
struct Router {
    addr: Ipv6Addr,
    expires: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Prefix {
    /// Masked to `len` bits.
    prefix: Ipv6Addr,
    len: u8,
    /// `None` for an infinite lifetime.
    expires: Option<Instant>,
}

/// Whom making room may evict.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Evict {
    /// For an address we are sending to: any resolved entry, STALE ones first.
    Resolved,
    /// For an address a message told us of: only a STALE entry, so that a flood of
    /// solicitations from new addresses cannot push out the neighbours in use.
    Stale,
}

/// Return `addr` with all but its first `len` bits cleared.
fn mask(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(addr);
    Ipv6Addr::from(bits & u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0))
}

/// The ReachableTime generator (RFC 4861 6.3.2): xorshift64*, cheap and deterministic.
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Return `base` times a random factor in [MIN_RANDOM_FACTOR, MAX_RANDOM_FACTOR] = [0.5, 1.5]
/// (RFC 4861 6.3.2, 10), in millionths.
fn random_reachable_time(rng: &mut u64, base: Duration) -> Duration {
    let factor = 500_000 + u128::from(next_random(rng) % 1_000_001);
    Duration::from_micros((base.as_micros() * factor / 1_000_000).min(u128::from(u64::MAX)) as u64)
}

/// Fill in the destination MAC of held frames.
fn release(mut frames: VecDeque<Vec<u8>>, mac: [u8; 6]) -> VecDeque<Vec<u8>> {
    for frame in &mut frames {
        if let Some(dst) = frame.get_mut(..6) {
            dst.copy_from_slice(&mac);
        }
    }
    frames
}

/// The neighbour cache (RFC 4861 5.1, 7.3) with the default router list and the prefix list
/// (RFC 4861 5.1, 6.3.4) of one interface, bounded by [`NdpConfig`]. See the module docs
/// for the call order.
#[derive(Debug)]
pub struct NdpCache {
    config: NdpConfig,
    entries: HashMap<Ipv6Addr, Entry>,
    /// Resolved entries by (rank, stamp): the first is the one to evict.
    order: BTreeSet<(u8, u64, Ipv6Addr)>,
    /// Entries with a deadline, soonest first.
    timers: BTreeSet<(Instant, Ipv6Addr)>,
    incomplete: usize,
    next_stamp: u64,
    rng: u64,
    retrans_timer: Duration,
    base_reachable_time: Duration,
    routers: Vec<Router>,
    prefixes: Vec<Prefix>,
    link_mtu: Option<u32>,
    cur_hop_limit: Option<u8>,
}

impl NdpCache {
    /// Return an empty cache.
    pub fn new(config: NdpConfig) -> Self {
        NdpCache {
            config,
            entries: HashMap::new(),
            order: BTreeSet::new(),
            timers: BTreeSet::new(),
            incomplete: 0,
            next_stamp: 0,
            // xorshift has one fixed point, zero.
            rng: if config.seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { config.seed },
            retrans_timer: config.retrans_timer.max(MIN_RETRANS_TIMER),
            base_reachable_time: config.reachable_time,
            routers: Vec::new(),
            prefixes: Vec::new(),
            link_mtu: None,
            cur_hop_limit: None,
        }
    }

    // ---------------------------------------------------------------------------------
    // Bookkeeping: every change of state goes through `take` and `put`, which keep the
    // eviction order, the timers and the INCOMPLETE count in step with the entries.
    // ---------------------------------------------------------------------------------

    fn take(&mut self, ip: Ipv6Addr) -> Option<Entry> {
        let entry = self.entries.remove(&ip)?;
        if let Some(t) = entry.state.timer() {
            self.timers.remove(&(t, ip));
        }
        match entry.state.rank() {
            Some(rank) => {
                self.order.remove(&(rank, entry.stamp, ip));
            }
            None => self.incomplete -= 1,
        }
        Some(entry)
    }

    /// Put back an entry taken in state `before` (a new one: `None`); a change of state
    /// moves it to the back of the eviction order.
    fn put(&mut self, ip: Ipv6Addr, mut entry: Entry, before: Option<NeighborState>) {
        if before != Some(entry.state.kind()) {
            entry.stamp = self.next_stamp;
            self.next_stamp += 1;
        }
        if let Some(t) = entry.state.timer() {
            self.timers.insert((t, ip));
        }
        match entry.state.rank() {
            Some(rank) => {
                self.order.insert((rank, entry.stamp, ip));
            }
            None => self.incomplete += 1,
        }
        self.entries.insert(ip, entry);
    }

    /// Make room for one more entry, `ip`, if the cache is full. Return false if no entry
    /// may go: INCOMPLETE ones never do (they end within a few RetransTimers).
    fn make_room(&mut self, ip: Ipv6Addr, evict: Evict, now: Instant) -> bool {
        let limit = self.config.max_entries.max(1);
        while self.entries.len() >= limit {
            let Some(&(rank, _, victim)) = self.order.first() else {
                log::debug!("NDP: cache full of resolutions ({limit}); not caching {ip}");
                return false;
            };
            let stale = rank == 0
                || self
                    .entries
                    .get(&victim)
                    .is_some_and(|e| matches!(e.state, State::Reachable { until, .. } if until <= now));
            if evict == Evict::Stale && !stale {
                log::debug!("NDP: cache full ({limit}) and nothing STALE; not caching {ip}");
                return false;
            }
            self.take(victim);
            log::debug!("NDP: cache full ({limit}); evicted {victim} for {ip}");
        }
        true
    }

    // ---------------------------------------------------------------------------------
    // Sending (RFC 4861 7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    /// Return the MAC to send to `ip`, unless it is unknown or INCOMPLETE (then
    /// [`hold`](Self::hold) the frame). A REACHABLE entry past its ReachableTime is STALE,
    /// and sending to a STALE entry moves it to DELAY, to be probed after
    /// DELAY_FIRST_PROBE_TIME unless [`confirm`](Self::confirm)ed first (RFC 4861 7.3.3).
    pub fn lookup(&mut self, ip: Ipv6Addr, now: Instant) -> Option<[u8; 6]> {
        let mac = match self.entries.get(&ip)?.state {
            State::Incomplete { .. } => return None,
            State::Reachable { mac, until } if until > now => return Some(mac),
            State::Delay { mac, .. } | State::Probe { mac, .. } => return Some(mac),
            State::Reachable { mac, .. } | State::Stale { mac } => mac,
        };
        let mut entry = self.take(ip)?;
        let before = entry.state.kind();
        entry.state = State::Delay { mac, until: now + self.config.delay_first_probe_time };
        log::trace!("NDP: {ip} used while stale; DELAY");
        self.put(ip, entry, Some(before));
        Some(mac)
    }

    /// Hold `frame` (a whole Ethernet frame; its destination MAC is filled in on release)
    /// until `ip` resolves, starting resolution if it has not started (RFC 4861 7.2.2).
    /// Return `Ok(Some(oldest))` when the queue was full and its oldest frame made way
    /// (RFC 4861 7.2.2), and `Err(frame)` when nothing was held: `ip` is already resolved
    /// (use [`lookup`](Self::lookup)), or no resolution may start now
    /// ([`NdpConfig::max_incomplete`], or a cache full of resolutions).
    pub fn hold(&mut self, ip: Ipv6Addr, frame: Vec<u8>, now: Instant) -> Result<Option<Vec<u8>>, Vec<u8>> {
        if let Some(entry) = self.entries.get_mut(&ip) {
            let State::Incomplete { frames, .. } = &mut entry.state else {
                return Err(frame);
            };
            let oldest = if frames.len() >= self.config.queue_limit.max(1) { frames.pop_front() } else { None };
            frames.push_back(frame);
            return Ok(oldest);
        }
        if !self.may_start(ip, now) {
            return Err(frame);
        }
        self.start(ip, VecDeque::from([frame]), now);
        Ok(None)
    }

    /// Start resolving `ip` without holding a frame, if it is not in the cache. Return
    /// whether it is in the cache now, resolved or resolving.
    pub fn resolve(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        if self.entries.contains_key(&ip) {
            return true;
        }
        if !self.may_start(ip, now) {
            return false;
        }
        self.start(ip, VecDeque::new(), now);
        true
    }

    /// Return whether a resolution of `ip` (not in the cache) may start, making room for it.
    fn may_start(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        if ip.is_multicast() || ip.is_unspecified() {
            return false;
        }
        if self.incomplete >= self.config.max_incomplete.max(1) {
            log::debug!("NDP: {} resolutions in progress; not resolving {ip}", self.incomplete);
            return false;
        }
        self.make_room(ip, Evict::Resolved, now)
    }

    /// Create an INCOMPLETE entry for `ip` whose first solicitation is due at once (RFC 4861
    /// 7.2.2), after [`may_start`](Self::may_start).
    fn start(&mut self, ip: Ipv6Addr, frames: VecDeque<Vec<u8>>, now: Instant) {
        log::trace!("NDP: resolving {ip}");
        let state = State::Incomplete { sent: 0, next: now, frames };
        self.put(ip, Entry { state, is_router: false, stamp: 0 }, None);
    }

    /// Take an upper-layer confirmation that `ip` is reachable (RFC 4861 7.3.1: TCP saw new
    /// data acknowledged, or a reply arrived, from this neighbour): any state but INCOMPLETE
    /// becomes REACHABLE for a fresh ReachableTime. Return whether the entry exists and has
    /// a MAC. Cheap while REACHABLE: call it per acknowledgement.
    pub fn confirm(&mut self, ip: Ipv6Addr, now: Instant) -> bool {
        let Some(entry) = self.entries.get_mut(&ip) else {
            return false;
        };
        let mac = match &mut entry.state {
            State::Incomplete { .. } => return false,
            State::Reachable { until, .. } => {
                *until = now + random_reachable_time(&mut self.rng, self.base_reachable_time);
                return true;
            }
            state => state.mac(),
        };
        let (Some(mac), Some(mut entry)) = (mac, self.take(ip)) else {
            return false;
        };
        let before = entry.state.kind();
        entry.state = State::Reachable { mac, until: now + self.reachable_time() };
        self.put(ip, entry, Some(before));
        true
    }

    fn reachable_time(&mut self) -> Duration {
        random_reachable_time(&mut self.rng, self.base_reachable_time)
    }

    // ---------------------------------------------------------------------------------
    // Timers (RFC 4861 7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    /// Do the work due by `now`: call `solicit` for each solicitation to send (INCOMPLETE:
    /// multicast, every RetransTimer up to MAX_MULTICAST_SOLICIT; DELAY past
    /// DELAY_FIRST_PROBE_TIME becomes PROBE; PROBE: unicast to the cached MAC, every
    /// RetransTimer up to MAX_UNICAST_SOLICIT). Return the neighbours that did not answer in
    /// time, RetransTimer after their last solicitation; their entries are removed, and a
    /// router among them moves to the back of the default router list (RFC 4861 6.3.6).
    /// Expired routers and prefixes are dropped too.
    pub fn due(&mut self, now: Instant, mut solicit: impl FnMut(Ipv6Addr, Solicit)) -> Vec<Failed> {
        let mut failed = Vec::new();
        let retrans = self.retrans_timer;
        while let Some(&(t, ip)) = self.timers.first()
            && t <= now
        {
            self.timers.pop_first();
            let Some(mut entry) = self.take(ip) else {
                continue;
            };
            let before = entry.state.kind();
            entry.state = match entry.state {
                State::Incomplete { sent, frames, .. } if sent >= self.config.max_multicast_solicit => {
                    log::debug!("NDP: {ip} did not answer {sent} solicitations; dropping {} frames", frames.len());
                    failed.push(Failed { ip, frames });
                    self.router_failed(ip);
                    continue;
                }
                State::Incomplete { sent, frames, .. } => {
                    solicit(ip, Solicit::Multicast);
                    State::Incomplete { sent: sent + 1, next: now + retrans, frames }
                }
                State::Delay { .. } if self.config.max_unicast_solicit == 0 => {
                    log::debug!("NDP: {ip} not confirmed and probing is off; unreachable");
                    failed.push(Failed { ip, frames: VecDeque::new() });
                    self.router_failed(ip);
                    continue;
                }
                State::Delay { mac, .. } => {
                    log::trace!("NDP: {ip} not confirmed; PROBE");
                    solicit(ip, Solicit::Unicast(mac));
                    State::Probe { mac, sent: 1, next: now + retrans }
                }
                State::Probe { sent, .. } if sent >= self.config.max_unicast_solicit => {
                    log::debug!("NDP: {ip} did not answer {sent} probes; unreachable");
                    failed.push(Failed { ip, frames: VecDeque::new() });
                    self.router_failed(ip);
                    continue;
                }
                State::Probe { mac, sent, .. } => {
                    solicit(ip, Solicit::Unicast(mac));
                    State::Probe { mac, sent: sent + 1, next: now + retrans }
                }
                state @ (State::Reachable { .. } | State::Stale { .. }) => state,
            };
            self.put(ip, entry, Some(before));
        }
        self.routers.retain(|r| r.expires > now);
        self.prefixes.retain(|p| p.expires.is_none_or(|e| e > now));
        failed
    }

    /// Return when [`due`](Self::due) next has a solicitation to send or a neighbour to give up on.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Move router `ip` to the back of the default router list, so that the next is tried.
    fn router_failed(&mut self, ip: Ipv6Addr) {
        if let Some(i) = self.routers.iter().position(|r| r.addr == ip) {
            let router = self.routers.remove(i);
            self.routers.push(router);
        }
    }

    // ---------------------------------------------------------------------------------
    // Receiving (RFC 4861 6.3.4, 7.2.3, 7.2.5, 8.3, appendix C).
    // ---------------------------------------------------------------------------------

    /// Take `ip`'s link-layer address from a sibling cache (a host sharing our addresses on
    /// another queue saw it), as from a solicitation's source option: see `learn`.
    pub fn learn_from_sibling(&mut self, ip: Ipv6Addr, mac: [u8; 6], now: Instant) -> Update {
        self.learn(ip, mac, false, now)
    }

    /// Take a link-layer address from a message other than an advertisement (NS, RA,
    /// Redirect): appendix C's second table. A new entry is STALE; an INCOMPLETE one becomes
    /// STALE and releases its frames; a resolved one with a different MAC takes it and
    /// becomes STALE; the same MAC changes nothing. `router` sets IsRouter (an RA, a
    /// redirect to a router); otherwise an existing entry keeps its flag and a new one is
    /// not a router (RFC 4861 7.2.3).
    fn learn(&mut self, ip: Ipv6Addr, mac: [u8; 6], router: bool, now: Instant) -> Update {
        let mut update = Update::default();
        if ip.is_multicast() || ip.is_unspecified() {
            return update;
        }
        let Some(mut entry) = self.take(ip) else {
            if self.make_room(ip, Evict::Stale, now) {
                log::trace!("NDP: learned {ip}; STALE");
                self.put(ip, Entry { state: State::Stale { mac }, is_router: router, stamp: 0 }, None);
            }
            return update;
        };
        let before = entry.state.kind();
        entry.is_router |= router;
        entry.state.expire(now);
        entry.state = match entry.state {
            State::Incomplete { frames, .. } => {
                update.frames = release(frames, mac);
                State::Stale { mac }
            }
            same if same.mac() == Some(mac) => same,
            _ => {
                log::debug!("NDP: {ip} moved to a new MAC; STALE");
                State::Stale { mac }
            }
        };
        self.put(ip, entry, Some(before));
        update
    }

    /// Take a Neighbour Solicitation from `src` whose target is one of our addresses
    /// (RFC 4861 7.2.3): with a source link-layer address option and a specified source,
    /// create or update the entry for `src` (appendix C, second table). Answering it is the
    /// caller's ([`write_advertisement`]).
    pub fn handle_solicitation(&mut self, src: Ipv6Addr, ns: &NeighborSolicitation, now: Instant) -> Update {
        match ns.source_mac {
            Some(mac) if !src.is_unspecified() => self.learn(src, mac, false, now),
            _ => Update::default(),
        }
    }

    /// Take a Neighbour Advertisement (RFC 4861 7.2.5, appendix C): nothing without an entry
    /// for its target; an INCOMPLETE entry takes its MAC and becomes REACHABLE if solicited,
    /// else STALE, releasing the held frames; a resolved entry follows the Override and
    /// Solicited flags. IsRouter follows the R flag, except where an unsolicited-looking
    /// change of MAC is refused.
    pub fn handle_advertisement(&mut self, na: &NeighborAdvertisement, now: Instant) -> Update {
        let ip = na.target;
        let mut update = Update::default();
        let Some(mut entry) = self.take(ip) else {
            log::trace!("NDP: advertisement for {ip}, not in the cache; ignored");
            return update;
        };
        let before = entry.state.kind();
        entry.state.expire(now);
        let until = now + self.reachable_time();
        let NaFlags { router, solicited, r#override } = na.flags;
        let mut update_router = true;
        entry.state = match (entry.state, na.target_mac) {
            // 7.2.5: INCOMPLETE and no target link-layer address: ignore.
            (incomplete @ State::Incomplete { .. }, None) => {
                log::debug!("NDP: advertisement for {ip} without its MAC while resolving; ignored");
                update_router = false;
                incomplete
            }
            // 7.2.5: record the address, REACHABLE if solicited, else STALE; Override ignored.
            (State::Incomplete { frames, .. }, Some(mac)) => {
                update.frames = release(frames, mac);
                if solicited { State::Reachable { mac, until } } else { State::Stale { mac } }
            }
            (resolved, target_mac) => {
                let cached = resolved.mac().unwrap_or_default();
                let differs = target_mac.is_some_and(|mac| mac != cached);
                match resolved {
                    // 7.2.5 I: Override clear and a different address: REACHABLE becomes
                    // STALE (the address kept), any other state is unchanged; nothing else.
                    State::Reachable { .. } if differs && !r#override => {
                        update_router = false;
                        State::Stale { mac: cached }
                    }
                    unchanged if differs && !r#override => {
                        update_router = false;
                        unchanged
                    }
                    // 7.2.5 II: take the address; solicited: REACHABLE; a new address: STALE;
                    // else unchanged.
                    _ if solicited => State::Reachable { mac: target_mac.unwrap_or(cached), until },
                    _ if differs => State::Stale { mac: target_mac.unwrap_or(cached) },
                    unchanged => unchanged,
                }
            }
        };
        if update_router {
            if entry.is_router && !router {
                log::debug!("NDP: {ip} is no longer a router");
                self.routers.retain(|r| r.addr != ip);
                update.router_lost = true;
            }
            entry.is_router = router;
        }
        self.put(ip, entry, Some(before));
        update
    }

    /// Take a Router Advertisement from `src` (RFC 4861 6.3.4): update the default router
    /// list (a lifetime of 0 removes the router), CurHopLimit, BaseReachableTime,
    /// RetransTimer, the link MTU, the on-link prefixes (L flag set; a valid lifetime of 0
    /// removes the prefix; the link-local prefix is ignored), and the router's entry, marked
    /// a router (a source link-layer address option creates or updates it as STALE).
    /// Advertised timers are taken within Linux's floors (RetransTimer at least 10 ms,
    /// BaseReachableTime at least 100 ms) and BaseReachableTime within the hour routers may
    /// advertise (RFC 4861 6.2.1).
    pub fn handle_router_advertisement(&mut self, src: Ipv6Addr, ra: &RouterAdvertisement, now: Instant) -> Update {
        let lifetime = Duration::from_secs(u64::from(ra.router_lifetime_secs));
        match self.routers.iter().position(|r| r.addr == src) {
            Some(i) if lifetime.is_zero() => {
                self.routers.remove(i);
            }
            Some(i) => self.routers[i].expires = now + lifetime,
            None if lifetime.is_zero() => {}
            None if self.routers.len() < self.config.max_routers => {
                self.routers.push(Router { addr: src, expires: now + lifetime });
            }
            None => log::debug!("NDP: {} routers known; not adding {src}", self.routers.len()),
        }
        if ra.cur_hop_limit != 0 {
            self.cur_hop_limit = Some(ra.cur_hop_limit);
        }
        if ra.reachable_time_ms != 0 {
            let base = Duration::from_millis(u64::from(ra.reachable_time_ms));
            // Each confirmation draws its own factor, so a new base needs no recomputation.
            self.base_reachable_time = base.clamp(MIN_REACHABLE_TIME, MAX_REACHABLE_TIME);
        }
        if ra.retrans_timer_ms != 0 {
            self.retrans_timer = Duration::from_millis(u64::from(ra.retrans_timer_ms)).max(MIN_RETRANS_TIMER);
        }
        match ra.mtu {
            Some(mtu) if mtu >= MIN_LINK_MTU => self.link_mtu = Some(mtu),
            Some(mtu) => log::debug!("NDP: advertised MTU {mtu} from {src} is below {MIN_LINK_MTU}; ignored"),
            None => {}
        }
        for prefix in &ra.prefixes {
            self.learn_prefix(prefix, now);
        }
        match ra.source_mac {
            Some(mac) => self.learn(src, mac, true, now),
            None => {
                if let Some(entry) = self.entries.get_mut(&src) {
                    entry.is_router = true;
                }
                Update::default()
            }
        }
    }

    /// RFC 4861 6.3.4's rules for one prefix information option.
    fn learn_prefix(&mut self, info: &PrefixInfo, now: Instant) {
        if !info.on_link || info.prefix_len > 128 {
            return;
        }
        let prefix = mask(info.prefix, info.prefix_len);
        if prefix.is_unicast_link_local() && info.prefix_len >= 10 {
            return;
        }
        let expires = match info.valid_lifetime_secs {
            INFINITE_LIFETIME => None,
            secs => Some(now + Duration::from_secs(u64::from(secs))),
        };
        match self.prefixes.iter().position(|p| p.prefix == prefix && p.len == info.prefix_len) {
            Some(i) if info.valid_lifetime_secs == 0 => {
                self.prefixes.remove(i);
            }
            Some(i) => self.prefixes[i].expires = expires,
            None if info.valid_lifetime_secs == 0 => {}
            None if self.prefixes.len() < self.config.max_prefixes => {
                self.prefixes.push(Prefix { prefix, len: info.prefix_len, expires });
            }
            None => log::debug!("NDP: {} prefixes known; not adding {prefix}/{}", self.prefixes.len(), info.prefix_len),
        }
    }

    /// Take a Redirect the caller accepted (it came from the current first-hop router of
    /// its destination, RFC 4861 8.1) into the neighbour cache (RFC 4861 8.3): a target
    /// link-layer address option creates or updates the target's entry as for a
    /// solicitation, and a target other than the destination is a router. Re-pointing the
    /// destination's route at the target is the caller's.
    pub fn handle_redirect(&mut self, redirect: &Redirect, now: Instant) -> Update {
        let router = redirect.target != redirect.destination;
        match redirect.target_mac {
            Some(mac) => self.learn(redirect.target, mac, router, now),
            None => {
                if router && let Some(entry) = self.entries.get_mut(&redirect.target) {
                    entry.is_router = true;
                }
                Update::default()
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Questions.
    // ---------------------------------------------------------------------------------

    /// Return what the cache knows of `ip`.
    pub fn neighbor(&self, ip: Ipv6Addr, now: Instant) -> Option<Neighbor> {
        let entry = self.entries.get(&ip)?;
        let state = match entry.state {
            State::Reachable { until, .. } if until <= now => NeighborState::Stale,
            ref state => state.kind(),
        };
        Some(Neighbor { state, mac: entry.state.mac(), is_router: entry.is_router })
    }

    /// Return the number of neighbours in the cache.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Return whether the cache holds no neighbour.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Return the default router to send off-link traffic to (RFC 4861 6.3.6): the first
    /// live router known reachable or probably reachable (an entry in any state but
    /// INCOMPLETE), else the first live router.
    pub fn default_router(&self, now: Instant) -> Option<Ipv6Addr> {
        let mut live = self.routers.iter().filter(|r| r.expires > now).map(|r| r.addr);
        let first = live.clone().next();
        live.find(|ip| self.entries.get(ip).is_some_and(|e| !matches!(e.state, State::Incomplete { .. }))).or(first)
    }

    /// Return whether `addr` is on-link (RFC 4861 5.2): link-local, or in a live prefix
    /// advertised with the L flag.
    pub fn on_link(&self, addr: Ipv6Addr, now: Instant) -> bool {
        addr.is_unicast_link_local()
            || self.prefixes.iter().any(|p| p.expires.is_none_or(|e| e > now) && mask(addr, p.len) == p.prefix)
    }

    /// Return the link MTU from the last Router Advertisement with a usable MTU option
    /// (RFC 4861 6.3.4); the host may adopt it if lower than the device's.
    pub fn link_mtu(&self) -> Option<u32> {
        self.link_mtu
    }

    /// Return the hop limit the last Router Advertisement asked for (RFC 4861 6.3.4), if any.
    pub fn cur_hop_limit(&self) -> Option<u8> {
        self.cur_hop_limit
    }

    /// Return the RetransTimer in use (configured, or from a Router Advertisement).
    pub fn retrans_timer(&self) -> Duration {
        self.retrans_timer
    }

    /// Return the BaseReachableTime in use (configured, or from a Router Advertisement).
    pub fn base_reachable_time(&self) -> Duration {
        self.base_reachable_time
    }
}

// -------------------------------------------------------------------------------------
// Duplicate Address Detection (RFC 4862 5.4).
// -------------------------------------------------------------------------------------

/// Where [`Dad`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DadState {
    /// Still checking: the address must not be used as a source nor answer solicitations
    /// (RFC 4862 5.4).
    Tentative,
    /// No other node claimed it: assign it.
    Unique,
    /// Another node uses it (or is checking it): do not assign it (RFC 4862 5.4.5).
    Duplicate,
}

/// Duplicate Address Detection of one tentative address (RFC 4862 5.4): DupAddrDetectTransmits
/// solicitations from the unspecified address, RetransTimer apart; unique if nobody answers
/// within RetransTimer of the last. Call [`due`](Self::due) at [`next_timeout`](Self::next_timeout)
/// and feed every parsed message to [`handle`](Self::handle) while tentative.
#[derive(Clone, Debug)]
pub struct Dad {
    addr: Ipv6Addr,
    transmits: u32,
    sent: u32,
    retrans: Duration,
    next: Instant,
    state: DadState,
}

impl Dad {
    /// Start checking `addr`: `transmits` solicitations (DupAddrDetectTransmits, 1 by
    /// default; 0 turns DAD off and the address is unique at once), `retrans` apart, the
    /// first at `start`. RFC 4862 5.4.2 asks for a random delay of up to 1 s
    /// (MAX_RTR_SOLICITATION_DELAY) before the first after an interface starts: the caller
    /// picks `start`.
    pub fn new(addr: Ipv6Addr, transmits: u32, retrans: Duration, start: Instant) -> Self {
        let state = if transmits == 0 { DadState::Unique } else { DadState::Tentative };
        Dad { addr, transmits, sent: 0, retrans: retrans.max(MIN_RETRANS_TIMER), next: start, state }
    }

    /// Return the address being checked.
    pub fn address(&self) -> Ipv6Addr {
        self.addr
    }

    /// Return where the check stands.
    pub fn state(&self) -> DadState {
        self.state
    }

    /// Call `send` with the tentative address if a solicitation is due (write it with
    /// `write_solicitation(buf, mac, Ipv6Addr::UNSPECIFIED, target, Solicit::Multicast)`);
    /// declare the address unique once RetransTimer has passed after the last. Return the state.
    pub fn due(&mut self, now: Instant, send: impl FnOnce(Ipv6Addr)) -> DadState {
        if self.state == DadState::Tentative && now >= self.next {
            if self.sent < self.transmits {
                self.sent += 1;
                self.next = now + self.retrans;
                send(self.addr);
            } else {
                log::debug!("NDP: {} is unique after {} solicitations", self.addr, self.sent);
                self.state = DadState::Unique;
            }
        }
        self.state
    }

    /// Return when [`due`](Self::due) next has work, while tentative.
    pub fn next_timeout(&self) -> Option<Instant> {
        (self.state == DadState::Tentative).then_some(self.next)
    }

    /// Take a message received from `src` while tentative: an advertisement of the address
    /// (RFC 4862 5.4.4), or a solicitation for it from the unspecified address, another
    /// node's DAD (RFC 4862 5.4.3), proves it a duplicate. A solicitation for it from a
    /// unicast source is someone resolving it: not a duplicate, and not to be answered.
    /// Return the state.
    pub fn handle(&mut self, src: Ipv6Addr, message: &NdpMessage) -> DadState {
        if self.state != DadState::Tentative {
            return self.state;
        }
        let duplicate = match message {
            NdpMessage::NeighborAdvertisement(na) => na.target == self.addr,
            NdpMessage::NeighborSolicitation(ns) => ns.target == self.addr && src.is_unspecified(),
            _ => false,
        };
        if duplicate {
            log::debug!("NDP: {} is a duplicate (message from {src})", self.addr);
            self.state = DadState::Duplicate;
        }
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::Ipv6HeaderSlice;

    const A_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const B_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    const C_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x0c];
    /// A's link-local address, from `A_MAC`.
    const A: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0x00ff, 0xfe12, 0x3456);
    /// B's link-local address, from `B_MAC`.
    const B: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0x00ff, 0xfeab, 0xcdef);
    const GLOBAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
    const UNSPECIFIED: Ipv6Addr = Ipv6Addr::UNSPECIFIED;

    /// Link-local neighbour `n`.
    fn ll(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x100, n)
    }

    // Fixtures built byte by byte, checksums computed by hand (a separate one's complement
    // sum over pseudo-header and message, RFC 8200 8.1), not by the code under test.

    /// A (fe80::5054:ff:fe12:3456, 52:54:00:12:34:56) resolves B (fe80::5054:ff:feab:cdef):
    /// to ff02::1:ffab:cdef at 33:33:ff:ab:cd:ef, with A's MAC in the SLLA option.
    /// Checksum 0x859a.
    const NS_FRAME: [u8; 86] = [
        0x33, 0x33, 0xff, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x01, 0xff, 0xab, 0xcd, 0xef, 0x87, 0x00, 0x85, 0x9a, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0x01, 0x01, //
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// B answers: solicited and override (0x60), B's MAC in the TLLA option. Checksum 0x3997.
    const NA_FRAME: [u8; 86] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0x88, 0x00, 0x39, 0x97, 0x60, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef, 0x02, 0x01, //
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,
    ];

    /// A checks its own address (DAD): from ::, no option. Checksum 0xc402.
    const DAD_FRAME: [u8; 78] = [
        0x33, 0x33, 0xff, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x18, 0x3a, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x01, 0xff, 0x12, 0x34, 0x56, 0x87, 0x00, 0xc4, 0x02, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];

    /// A asks for routers: to ff02::2 at 33:33:00:00:00:02, SLLA. Checksum 0x71b5.
    const RS_FRAME: [u8; 70] = [
        0x33, 0x33, 0x00, 0x00, 0x00, 0x02, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x00, //
        0x00, 0x00, 0x00, 0x10, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54, //
        0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x85, 0x00, 0x71, 0xb5, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, //
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// Router B advertises to ff02::1: hop limit 64, O flag, lifetime 1800 s, reachable
    /// and retrans unspecified; SLLA, MTU 1500, prefix 2001:db8:1::/64 (L, A, valid 86400,
    /// preferred 14400), and an RDNSS option (type 25, RFC 8106) we do not know. Checksum 0xa53c.
    const RA_FRAME: [u8; 142] = [
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
    fn split(frame: &[u8]) -> (Ipv6Addr, Ipv6Addr, u8, &[u8]) {
        let ip = Ipv6HeaderSlice::from_slice(&frame[ETH_LEN..]).unwrap();
        (ip.source_addr(), ip.destination_addr(), ip.hop_limit(), &frame[ICMP_OFFSET..])
    }

    fn parse_frame(frame: &[u8]) -> Result<NdpMessage, NdpError> {
        let (src, dst, hop_limit, icmp) = split(frame);
        parse(src, dst, hop_limit, icmp)
    }

    /// Fill in the checksum of `msg` from `src` to `dst`.
    fn seal(msg: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) {
        let sum = checksum(src, dst, msg);
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
    }

    /// Return a sealed ICMPv6 message: type, code, checksum, `word`, then `parts`.
    fn message(kind: u8, code: u8, word: [u8; 4], parts: &[&[u8]], src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut msg = vec![kind, code, 0, 0];
        msg.extend(word);
        for part in parts {
            msg.extend_from_slice(part);
        }
        seal(&mut msg, src, dst);
        msg
    }

    fn slla(mac: [u8; 6]) -> [u8; 8] {
        lla_option(NdpOptionType::SOURCE_LINK_LAYER_ADDRESS, mac)
    }

    fn tlla(mac: [u8; 6]) -> [u8; 8] {
        lla_option(NdpOptionType::TARGET_LINK_LAYER_ADDRESS, mac)
    }

    fn prefix_option(prefix: Ipv6Addr, len: u8, flags: u8, valid: u32) -> Vec<u8> {
        let mut option = vec![3, 4, len, flags];
        option.extend(valid.to_be_bytes());
        option.extend(valid.to_be_bytes());
        option.extend([0; 4]);
        option.extend(prefix.octets());
        option
    }

    fn ns_message(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let octets = target.octets();
        let mut parts: Vec<&[u8]> = vec![&octets];
        parts.extend_from_slice(options);
        message(135, 0, [0; 4], &parts, src, dst)
    }

    fn na_message(src: Ipv6Addr, dst: Ipv6Addr, flags: u8, target: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let octets = target.octets();
        let mut parts: Vec<&[u8]> = vec![&octets];
        parts.extend_from_slice(options);
        message(136, 0, [flags, 0, 0, 0], &parts, src, dst)
    }

    fn ra_message(src: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = vec![&[0; 8]];
        parts.extend_from_slice(options);
        message(134, 0, [64, 0, 0x07, 0x08], &parts, src, ALL_NODES)
    }

    fn redirect_message(src: Ipv6Addr, target: Ipv6Addr, destination: Ipv6Addr, options: &[&[u8]]) -> Vec<u8> {
        let (t, d) = (target.octets(), destination.octets());
        let mut parts: Vec<&[u8]> = vec![&t, &d];
        parts.extend_from_slice(options);
        message(137, 0, [0; 4], &parts, src, A)
    }

    const SOLICITED_OVERRIDE: NaFlags = NaFlags { router: false, solicited: true, r#override: true };

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

    /// The xorshift64* of the cache, for random inputs.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            (next_random(&mut self.0) % n as u64) as usize
        }

        fn byte(&mut self) -> u8 {
            next_random(&mut self.0) as u8
        }

        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.byte()).collect()
        }
    }

    /// Hand a parsed message to the cache and a DAD check the way a host would.
    fn feed(cache: &mut NdpCache, dad: &mut Dad, src: Ipv6Addr, msg: &NdpMessage, now: Instant) -> Update {
        dad.handle(src, msg);
        match msg {
            NdpMessage::NeighborSolicitation(ns) => cache.handle_solicitation(src, ns, now),
            NdpMessage::NeighborAdvertisement(na) => cache.handle_advertisement(na, now),
            NdpMessage::RouterAdvertisement(ra) => cache.handle_router_advertisement(src, ra, now),
            NdpMessage::Redirect(redirect) => cache.handle_redirect(redirect, now),
            NdpMessage::RouterSolicitation(_) => Update::default(),
        }
    }

    #[test]
    fn random_bytes_never_panic_and_keep_the_cache_consistent() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let pool: Vec<Ipv6Addr> = (0..12).map(ll).chain([B, GLOBAL]).collect();
        let ends = [UNSPECIFIED, A, B, ll(3), solicited_node(B), solicited_node(ll(3)), ALL_NODES, GLOBAL];
        let config = NdpConfig {
            max_entries: 8,
            max_incomplete: 3,
            queue_limit: 2,
            max_routers: 2,
            max_prefixes: 2,
            seed: 7,
            ..NdpConfig::default()
        };
        let mut cache = NdpCache::new(config);
        let mut dad = Dad::new(ll(3), 3, RETRANS_TIMER, Instant::ZERO);
        let mut now = Instant::ZERO;
        let mut valid = 0;
        for i in 0..40_000 {
            let mut msg = Vec::new();
            if rng.below(8) == 0 {
                // Raw noise.
                let len = rng.below(100);
                msg = rng.bytes(len);
            } else {
                // Something shaped like Neighbour Discovery, with random fields and options.
                let kind = 133 + rng.below(5) as u8;
                msg.extend([kind, if rng.below(16) == 0 { rng.byte() } else { 0 }, 0, 0]);
                msg.extend(rng.bytes(4));
                let addresses = match kind {
                    135 | 136 => 1,
                    137 => 2,
                    _ => 0,
                };
                for _ in 0..addresses {
                    let addr =
                        if rng.below(4) == 0 { rng.bytes(16) } else { pool[rng.below(pool.len())].octets().to_vec() };
                    msg.extend(addr);
                }
                if kind == 134 {
                    msg.extend(rng.bytes(8));
                }
                if rng.below(16) == 0 {
                    msg.truncate(rng.below(msg.len() + 1));
                }
                for _ in 0..rng.below(4) {
                    let kind = [1, 2, 3, 4, 5, 25, rng.byte()][rng.below(7)];
                    let units = if rng.below(10) == 0 {
                        rng.below(6) as u8
                    } else if kind == 3 {
                        4
                    } else {
                        1
                    };
                    msg.extend([kind, units]);
                    let len =
                        (usize::from(units) * 8).saturating_sub(2 + if rng.below(12) == 0 { rng.below(4) } else { 0 });
                    if kind == 3 && units == 4 && len == 30 {
                        // A plausible prefix: length, flags, lifetimes, prefix.
                        msg.extend([
                            rng.below(129) as u8,
                            rng.byte(),
                            0,
                            0,
                            0,
                            rng.byte(),
                            0,
                            0,
                            0,
                            rng.byte(),
                            0,
                            0,
                            0,
                            0,
                        ]);
                        msg.extend(pool[rng.below(pool.len())].octets());
                    } else {
                        msg.extend(rng.bytes(len));
                    }
                }
            }
            let (src, dst) = (ends[rng.below(ends.len())], ends[rng.below(ends.len())]);
            if msg.len() >= 4 && rng.below(10) != 0 {
                seal(&mut msg, src, dst);
            }
            let hop_limit = if rng.below(10) == 0 { rng.byte() } else { 255 };
            now += Duration::from_millis(rng.below(400) as u64);
            if let Ok(parsed) = parse(src, dst, hop_limit, &msg) {
                valid += 1;
                let update = feed(&mut cache, &mut dad, src, &parsed, now);
                assert!(update.frames.len() <= 2);
            }
            let ip = pool[rng.below(pool.len())];
            match rng.below(5) {
                0 => {
                    cache.lookup(ip, now);
                }
                1 => {
                    let _ = cache.hold(ip, vec![0; 60], now);
                }
                2 => {
                    cache.confirm(ip, now);
                }
                3 => {
                    cache.default_router(now);
                    cache.on_link(ip, now);
                }
                _ => {
                    cache.due(now, |_, _| {});
                    dad.due(now, |_| {});
                }
            }
            if i % 500 == 0 {
                check(&cache);
            }
        }
        check(&cache);
        assert!(valid > 5_000, "only {valid} messages passed: the loop does not reach the deep paths");
    }

    // ---------------------------------------------------------------------------------
    // The neighbour cache: helpers.
    // ---------------------------------------------------------------------------------

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn secs(n: u64) -> Instant {
        Instant::from_millis(n * 1000)
    }

    fn cache() -> NdpCache {
        NdpCache::new(NdpConfig::default())
    }

    fn with(config: NdpConfig) -> NdpCache {
        NdpCache::new(config)
    }

    fn na(
        target: Ipv6Addr,
        solicited: bool,
        r#override: bool,
        router: bool,
        mac: Option<[u8; 6]>,
    ) -> NeighborAdvertisement {
        NeighborAdvertisement { target, flags: NaFlags { router, solicited, r#override }, target_mac: mac }
    }

    fn ns(mac: [u8; 6]) -> NeighborSolicitation {
        NeighborSolicitation { target: A, source_mac: Some(mac) }
    }

    fn ra(lifetime: u16, mac: Option<[u8; 6]>) -> RouterAdvertisement {
        RouterAdvertisement {
            cur_hop_limit: 0,
            managed: false,
            other: false,
            router_lifetime_secs: lifetime,
            reachable_time_ms: 0,
            retrans_timer_ms: 0,
            source_mac: mac,
            mtu: None,
            prefixes: vec![],
        }
    }

    /// A frame for `hold`, its destination MAC to be filled in, numbered by its last byte.
    fn frame(n: u8) -> Vec<u8> {
        let mut frame = vec![0; 60];
        frame[59] = n;
        frame
    }

    /// Run the timers at `now`; return the solicitations asked for and the failures.
    fn run(cache: &mut NdpCache, now: Instant) -> (Vec<(Ipv6Addr, Solicit)>, Vec<Failed>) {
        let mut asked = Vec::new();
        let failed = cache.due(now, |ip, kind| asked.push((ip, kind)));
        (asked, failed)
    }

    fn state_of(cache: &NdpCache, ip: Ipv6Addr, now: Instant) -> Option<(NeighborState, Option<[u8; 6]>)> {
        cache.neighbor(ip, now).map(|n| (n.state, n.mac))
    }

    /// Check that the indexes agree with the entries and the bounds hold.
    fn check(cache: &NdpCache) {
        let config = cache.config;
        assert!(cache.entries.len() <= config.max_entries.max(1));
        let incomplete: Vec<_> = cache.entries.values().filter(|e| e.state.rank().is_none()).collect();
        assert_eq!(incomplete.len(), cache.incomplete);
        assert!(cache.incomplete <= config.max_incomplete.max(1));
        for entry in incomplete {
            if let State::Incomplete { frames, .. } = &entry.state {
                assert!(frames.len() <= config.queue_limit.max(1));
            }
        }
        assert_eq!(cache.order.len() + cache.incomplete, cache.entries.len());
        for &(rank, stamp, ip) in &cache.order {
            let entry = &cache.entries[&ip];
            assert_eq!((entry.state.rank(), entry.stamp), (Some(rank), stamp), "{ip}");
        }
        let timers: BTreeSet<_> =
            cache.entries.iter().filter_map(|(&ip, e)| e.state.timer().map(|t| (t, ip))).collect();
        assert_eq!(timers, cache.timers);
        assert!(cache.routers.len() <= config.max_routers);
        assert!(cache.prefixes.len() <= config.max_prefixes);
    }

    /// Return a cache with B in `state` at B_MAC (not a router), and the time it is so.
    fn in_state(state: NeighborState) -> (NdpCache, Instant) {
        use NeighborState::*;
        let mut cache = cache();
        let now = match state {
            Incomplete => {
                cache.hold(B, frame(1), secs(0)).unwrap();
                secs(0)
            }
            Reachable => {
                cache.resolve(B, secs(0));
                cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), secs(0));
                secs(0)
            }
            Stale => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                secs(0)
            }
            Delay => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                cache.lookup(B, secs(0));
                secs(0)
            }
            Probe => {
                cache.handle_solicitation(B, &ns(B_MAC), secs(0));
                cache.lookup(B, secs(0));
                let (asked, _) = run(&mut cache, secs(5));
                assert_eq!(asked, [(B, Solicit::Unicast(B_MAC))]);
                secs(5)
            }
        };
        let expected_mac = if state == Incomplete { None } else { Some(B_MAC) };
        assert_eq!(state_of(&cache, B, now), Some((state, expected_mac)));
        assert!(!cache.neighbor(B, now).unwrap().is_router);
        check(&cache);
        (cache, now)
    }

    const RESOLVED: &[NeighborState] =
        &[NeighborState::Reachable, NeighborState::Stale, NeighborState::Delay, NeighborState::Probe];

    // ---------------------------------------------------------------------------------
    // Appendix C: Neighbour Advertisements (RFC 4861 7.2.5).
    // ---------------------------------------------------------------------------------

    #[derive(Clone, Copy, Debug)]
    enum Lla {
        Absent,
        Same,
        Other,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Then {
        Unchanged,
        /// The new state, with the cached MAC (false) or the advertised one (true).
        To(NeighborState, bool),
    }

    /// From states, S, O, TLLA, then, and whether IsRouter is updated from the R flag.
    type NaRow = (&'static [NeighborState], bool, bool, Lla, Then, bool);

    #[test]
    fn advertisements_move_resolved_entries_as_in_appendix_c() {
        use Lla::*;
        use NeighborState::*;
        use Then::*;
        const STALE_DELAY_PROBE: &[NeighborState] = &[Stale, Delay, Probe];
        #[rustfmt::skip]
        let table: &[NaRow] = &[
            (RESOLVED,          true,  false, Same,   To(Reachable, false), true),
            // 7.2.5 II (appendix C says "unchanged"; the text wins, see the module docs).
            (RESOLVED,          true,  false, Absent, To(Reachable, false), true),
            // 7.2.5 I: O clear and a different address.
            (&[Reachable],      true,  false, Other,  To(Stale, false),     false),
            (STALE_DELAY_PROBE, true,  false, Other,  Unchanged,            false),
            (RESOLVED,          true,  true,  Other,  To(Reachable, true),  true),
            (RESOLVED,          true,  true,  Same,   To(Reachable, false), true),
            (RESOLVED,          true,  true,  Absent, To(Reachable, false), true),
            (RESOLVED,          false, false, Same,   Unchanged,            true),
            (RESOLVED,          false, false, Absent, Unchanged,            true),
            (&[Reachable],      false, false, Other,  To(Stale, false),     false),
            (STALE_DELAY_PROBE, false, false, Other,  Unchanged,            false),
            (RESOLVED,          false, true,  Same,   Unchanged,            true),
            (RESOLVED,          false, true,  Absent, Unchanged,            true),
            (RESOLVED,          false, true,  Other,  To(Stale, true),      true),
        ];
        for &(froms, solicited, over, lla, then, router_updated) in table {
            for &from in froms {
                let (mut cache, now) = in_state(from);
                let timeout = cache.next_timeout();
                let mac = match lla {
                    Absent => None,
                    Same => Some(B_MAC),
                    Other => Some(C_MAC),
                };
                let update = cache.handle_advertisement(&na(B, solicited, over, true, mac), now);
                let row = format!("{from:?} S={solicited} O={over} {lla:?}");
                assert_eq!(update, Update::default(), "{row}");
                let n = cache.neighbor(B, now).unwrap();
                match then {
                    Unchanged => {
                        assert_eq!((n.state, n.mac), (from, Some(B_MAC)), "{row}");
                        assert_eq!(cache.next_timeout(), timeout, "{row}: timers untouched");
                    }
                    To(state, advertised) => {
                        let expected = if advertised { C_MAC } else { B_MAC };
                        assert_eq!((n.state, n.mac), (state, Some(expected)), "{row}");
                        if state != from {
                            assert_eq!(cache.next_timeout(), None, "{row}: no timer in {state:?}");
                        }
                    }
                }
                assert_eq!(n.is_router, router_updated, "{row}: IsRouter");
                check(&cache);
            }
        }
    }

    #[test]
    fn advertisements_complete_resolution_and_release_held_frames() {
        use NeighborState::*;
        // (S, O, TLLA, state after, frames released).
        #[rustfmt::skip]
        let table = [
            (true,  false, true,  Reachable,  1),
            (true,  true,  true,  Reachable,  1),
            (false, false, true,  Stale,      1),
            (false, true,  true,  Stale,      1),
            (true,  true,  false, Incomplete, 0),
            (false, false, false, Incomplete, 0),
        ];
        for (solicited, over, with_mac, state, released) in table {
            let (mut cache, now) = in_state(Incomplete);
            let mac = with_mac.then_some(B_MAC);
            let update = cache.handle_advertisement(&na(B, solicited, over, true, mac), now);
            let row = format!("S={solicited} O={over} TLLA={with_mac}");
            assert_eq!(update.frames.len(), released, "{row}");
            assert!(update.frames.iter().all(|f| f[..6] == B_MAC && f[59] == 1), "{row}");
            let n = cache.neighbor(B, now).unwrap();
            assert_eq!((n.state, n.mac, n.is_router), (state, mac, with_mac), "{row}");
            if state != Incomplete {
                assert_eq!(cache.next_timeout(), None, "{row}: resolution over");
            }
            check(&cache);
        }
    }

    #[test]
    fn an_advertisement_for_an_unknown_address_creates_nothing() {
        let mut cache = cache();
        assert_eq!(cache.handle_advertisement(&na(B, false, true, false, Some(B_MAC)), secs(0)), Update::default());
        assert!(cache.is_empty());
    }

    // ---------------------------------------------------------------------------------
    // Appendix C: other messages with a link-layer address (NS, RA, Redirect).
    // ---------------------------------------------------------------------------------

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Teller {
        Solicitation,
        RouterAdvertisement,
        Redirect,
    }

    fn tell(cache: &mut NdpCache, teller: Teller, mac: [u8; 6], now: Instant) -> Update {
        match teller {
            Teller::Solicitation => cache.handle_solicitation(B, &ns(mac), now),
            Teller::RouterAdvertisement => cache.handle_router_advertisement(B, &ra(1800, Some(mac)), now),
            Teller::Redirect => {
                let redirect = Redirect { target: B, destination: GLOBAL, target_mac: Some(mac) };
                cache.handle_redirect(&redirect, now)
            }
        }
    }

    #[test]
    fn other_messages_create_and_update_entries_as_in_appendix_c() {
        use NeighborState::*;
        for teller in [Teller::Solicitation, Teller::RouterAdvertisement, Teller::Redirect] {
            // An RA is from a router, and a redirect to other than its destination names one.
            let router = teller != Teller::Solicitation;
            // No entry: create it STALE.
            let mut cache = cache();
            assert_eq!(tell(&mut cache, teller, B_MAC, secs(0)), Update::default());
            let n = cache.neighbor(B, secs(0)).unwrap();
            assert_eq!((n.state, n.mac, n.is_router), (Stale, Some(B_MAC), router), "{teller:?} new");
            // INCOMPLETE: record the address, STALE, send the queued frames.
            let (mut cache, now) = in_state(Incomplete);
            let update = tell(&mut cache, teller, B_MAC, now);
            assert_eq!(update.frames.len(), 1);
            assert_eq!(&update.frames[0][..6], &B_MAC);
            assert_eq!(state_of(&cache, B, now), Some((Stale, Some(B_MAC))), "{teller:?} from INCOMPLETE");
            assert_eq!(cache.next_timeout(), None);
            for &from in RESOLVED {
                // The same address: unchanged.
                let (mut cache, now) = in_state(from);
                let timeout = cache.next_timeout();
                tell(&mut cache, teller, B_MAC, now);
                assert_eq!(state_of(&cache, B, now), Some((from, Some(B_MAC))), "{teller:?} {from:?} same");
                assert_eq!(cache.next_timeout(), timeout);
                assert_eq!(cache.neighbor(B, now).unwrap().is_router, router, "{teller:?} {from:?} IsRouter");
                // A different address: take it, STALE.
                let (mut cache, now) = in_state(from);
                tell(&mut cache, teller, C_MAC, now);
                assert_eq!(state_of(&cache, B, now), Some((Stale, Some(C_MAC))), "{teller:?} {from:?} other");
                check(&cache);
            }
        }
    }

    #[test]
    fn a_solicitation_without_source_address_or_option_changes_nothing() {
        let mut cache = cache();
        cache.handle_solicitation(UNSPECIFIED, &ns(B_MAC), secs(0));
        cache.handle_solicitation(B, &NeighborSolicitation { target: A, source_mac: None }, secs(0));
        assert!(cache.is_empty());
    }

    #[test]
    fn a_solicitation_keeps_is_router_and_a_redirect_to_the_destination_sets_nothing() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(1800, Some(B_MAC)), secs(0));
        cache.handle_solicitation(B, &ns(C_MAC), secs(1));
        assert!(cache.neighbor(B, secs(1)).unwrap().is_router, "7.2.3: IsRouter not modified");
        let on_link = Redirect { target: GLOBAL, destination: GLOBAL, target_mac: Some(C_MAC) };
        cache.handle_redirect(&on_link, secs(1));
        assert!(!cache.neighbor(GLOBAL, secs(1)).unwrap().is_router);
    }

    // ---------------------------------------------------------------------------------
    // Sending and timers: INCOMPLETE, REACHABLE, STALE, DELAY, PROBE (7.2.2, 7.3.3).
    // ---------------------------------------------------------------------------------

    #[test]
    fn resolution_fails_after_three_multicast_solicitations() {
        let mut cache = cache();
        assert_eq!(cache.lookup(B, secs(0)), None);
        assert_eq!(cache.hold(B, frame(7), secs(0)), Ok(None));
        assert_eq!(cache.lookup(B, secs(0)), None, "INCOMPLETE has no MAC");
        assert_eq!(cache.next_timeout(), Some(secs(0)), "the first solicitation is due at once");
        let mut asked = Vec::new();
        for t in [0, 500, 1000, 1999, 2000] {
            let (a, failed) = run(&mut cache, ms(t));
            assert!(failed.is_empty());
            asked.extend(a.into_iter().map(|a| (t, a)));
        }
        assert_eq!(
            asked,
            [(0, (B, Solicit::Multicast)), (1000, (B, Solicit::Multicast)), (2000, (B, Solicit::Multicast))]
        );
        assert_eq!(cache.next_timeout(), Some(secs(3)));
        let (asked, failed) = run(&mut cache, secs(3));
        assert!(asked.is_empty());
        assert_eq!(failed, [Failed { ip: B, frames: VecDeque::from([frame(7)]) }]);
        assert_eq!(cache.neighbor(B, secs(3)), None);
        assert_eq!(cache.next_timeout(), None);
        check(&cache);
    }

    #[test]
    fn solicitations_follow_the_configured_constants() {
        let config =
            NdpConfig { retrans_timer: Duration::from_millis(300), max_multicast_solicit: 5, ..NdpConfig::default() };
        let mut cache = with(config);
        cache.resolve(B, ms(0));
        let mut times = Vec::new();
        for t in (0..3000).step_by(10) {
            let (asked, failed) = run(&mut cache, ms(t));
            times.extend(asked.iter().map(|_| t));
            if !failed.is_empty() {
                times.push(t + 1);
            }
        }
        assert_eq!(times, [0, 300, 600, 900, 1200, 1501], "five solicitations, then failure");
    }

    #[test]
    fn a_stale_entry_used_is_probed_after_the_delay_then_removed() {
        let mut cache = cache();
        cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        assert_eq!(run(&mut cache, secs(100)), (vec![], vec![]), "STALE waits for traffic");
        assert_eq!(cache.lookup(B, secs(10)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(10)), Some((NeighborState::Delay, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), Some(secs(15)));
        assert_eq!(cache.lookup(B, secs(11)), Some(B_MAC), "still usable in DELAY");
        assert_eq!(run(&mut cache, ms(14_999)), (vec![], vec![]));
        let mut asked = Vec::new();
        for t in [15, 16, 17] {
            let (a, failed) = run(&mut cache, secs(t));
            assert!(failed.is_empty());
            asked.extend(a);
            assert_eq!(state_of(&cache, B, secs(t)), Some((NeighborState::Probe, Some(B_MAC))));
            assert_eq!(cache.lookup(B, secs(t)), Some(B_MAC), "still usable in PROBE");
        }
        assert_eq!(asked, [(B, Solicit::Unicast(B_MAC)); 3]);
        let (asked, failed) = run(&mut cache, secs(18));
        assert!(asked.is_empty());
        assert_eq!(failed, [Failed { ip: B, frames: VecDeque::new() }]);
        assert_eq!(cache.neighbor(B, secs(18)), None);
        check(&cache);
    }

    #[test]
    fn a_probe_answered_without_the_option_is_reachable() {
        let (mut cache, now) = in_state(NeighborState::Probe);
        cache.handle_advertisement(&na(B, true, false, false, None), now);
        assert_eq!(state_of(&cache, B, now), Some((NeighborState::Reachable, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), None);
    }

    #[test]
    fn reachable_expires_lazily_and_use_then_starts_the_delay() {
        let (mut cache, _) = in_state(NeighborState::Reachable);
        assert_eq!(cache.lookup(B, secs(1)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(1)), Some((NeighborState::Reachable, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), None, "no timer for REACHABLE");
        // ReachableTime is at most 1.5 * 30 s.
        assert_eq!(state_of(&cache, B, secs(46)), Some((NeighborState::Stale, Some(B_MAC))));
        assert_eq!(cache.lookup(B, secs(46)), Some(B_MAC));
        assert_eq!(state_of(&cache, B, secs(46)), Some((NeighborState::Delay, Some(B_MAC))));
        assert_eq!(cache.next_timeout(), Some(secs(51)));
        check(&cache);
    }

    #[test]
    fn confirmation_makes_any_resolved_entry_reachable() {
        for &from in RESOLVED {
            let (mut cache, now) = in_state(from);
            assert!(cache.confirm(B, now), "{from:?}");
            assert_eq!(state_of(&cache, B, now), Some((NeighborState::Reachable, Some(B_MAC))), "{from:?}");
            assert_eq!(cache.next_timeout(), None, "{from:?}: no probe");
            check(&cache);
        }
        let (mut cache, now) = in_state(NeighborState::Incomplete);
        assert!(!cache.confirm(B, now), "nothing to confirm without a MAC");
        assert!(!cache.confirm(GLOBAL, now));
        assert_eq!(state_of(&cache, B, now), Some((NeighborState::Incomplete, None)));
    }

    #[test]
    fn confirmation_while_reachable_extends_it() {
        let (mut cache, _) = in_state(NeighborState::Reachable);
        for t in (10..200).step_by(10) {
            assert!(cache.confirm(B, secs(t)));
            assert_eq!(state_of(&cache, B, secs(t + 14)).unwrap().0, NeighborState::Reachable);
        }
        check(&cache);
    }

    #[test]
    fn reachable_time_is_randomised_between_half_and_one_and_a_half() {
        let mut rng = 42;
        let draws: Vec<Duration> = (0..2000).map(|_| random_reachable_time(&mut rng, REACHABLE_TIME)).collect();
        let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*min >= Duration::from_secs(15) && *max <= Duration::from_secs(45), "{min:?}..{max:?}");
        assert!(*min < Duration::from_secs(16) && *max > Duration::from_secs(44), "spread: {min:?}..{max:?}");
        // The seed decides: the same seed gives the same times, another seed others.
        let until = |seed| {
            let mut cache = NdpCache::new(NdpConfig { seed, ..NdpConfig::default() });
            cache.handle_solicitation(B, &ns(B_MAC), secs(0));
            cache.confirm(B, secs(0));
            match cache.entries[&B].state {
                State::Reachable { until, .. } => until,
                _ => unreachable!(),
            }
        };
        assert_eq!(until(5), until(5));
        assert_ne!(until(5), until(6));
    }

    // ---------------------------------------------------------------------------------
    // Held frames (7.2.2).
    // ---------------------------------------------------------------------------------

    #[test]
    fn held_frames_are_bounded_the_oldest_dropped_and_released_in_order() {
        let mut cache = with(NdpConfig { queue_limit: 2, ..NdpConfig::default() });
        assert_eq!(cache.hold(B, frame(1), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(2), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(3), secs(0)), Ok(Some(frame(1))), "the oldest makes way");
        let update = cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), ms(10));
        let mut expected = [frame(2), frame(3)];
        for f in &mut expected {
            f[..6].copy_from_slice(&B_MAC);
        }
        assert_eq!(update.frames, expected);
        assert_eq!(cache.hold(B, frame(4), ms(20)), Err(frame(4)), "resolved: use lookup");
    }

    #[test]
    fn at_least_one_frame_is_held() {
        let mut cache = with(NdpConfig { queue_limit: 0, ..NdpConfig::default() });
        cache.resolve(B, secs(0));
        assert_eq!(cache.hold(B, frame(1), secs(0)), Ok(None));
        assert_eq!(cache.hold(B, frame(2), secs(0)), Ok(Some(frame(1))));
        let update = cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        assert_eq!(update.frames.len(), 1);
        assert_eq!(update.frames[0][59], 2);
    }

    #[test]
    fn multicast_and_unspecified_addresses_are_never_cached() {
        let mut cache = cache();
        assert_eq!(cache.hold(ALL_NODES, frame(1), secs(0)), Err(frame(1)));
        assert!(!cache.resolve(UNSPECIFIED, secs(0)));
        cache
            .handle_redirect(&Redirect { target: ALL_NODES, destination: ALL_NODES, target_mac: Some(B_MAC) }, secs(0));
        assert!(cache.is_empty());
    }

    // ---------------------------------------------------------------------------------
    // The bound: STALE goes first, INCOMPLETE never.
    // ---------------------------------------------------------------------------------

    #[test]
    fn a_full_cache_evicts_the_oldest_stale_entry_first() {
        let mut cache = with(NdpConfig { max_entries: 4, ..NdpConfig::default() });
        for n in 1..=4 {
            cache.handle_solicitation(ll(n), &ns(B_MAC), secs(u64::from(n)));
        }
        // ll(1) is used (DELAY): ll(2) is now the oldest STALE entry.
        cache.lookup(ll(1), secs(5));
        cache.handle_solicitation(ll(5), &ns(B_MAC), secs(6));
        assert_eq!(cache.neighbor(ll(2), secs(6)), None);
        cache.handle_solicitation(ll(6), &ns(B_MAC), secs(7));
        assert_eq!(cache.neighbor(ll(3), secs(7)), None);
        for n in [1, 4, 5, 6] {
            assert!(cache.neighbor(ll(n), secs(7)).is_some(), "{n} stays");
        }
        assert_eq!(cache.len(), 4);
        check(&cache);
    }

    /// Return a cache of `max` entries full of REACHABLE neighbours ll(1), ll(2), ...
    fn full_of_reachable(max: usize) -> NdpCache {
        let mut cache = with(NdpConfig { max_entries: max, ..NdpConfig::default() });
        for n in 1..=max as u16 {
            cache.resolve(ll(n), ms(u64::from(n)));
            cache.handle_advertisement(&na(ll(n), true, true, false, Some(B_MAC)), ms(u64::from(n)));
        }
        cache
    }

    #[test]
    fn messages_do_not_evict_neighbours_in_use() {
        let mut cache = full_of_reachable(2);
        cache.handle_solicitation(ll(9), &ns(B_MAC), secs(1));
        assert_eq!(
            cache.neighbor(ll(9), secs(1)),
            None,
            "a flood of solicitations cannot push out the neighbours in use"
        );
        assert_eq!(cache.len(), 2);
        // Once ReachableTime has passed they are STALE, and may go.
        cache.handle_solicitation(ll(9), &ns(B_MAC), secs(50));
        assert!(cache.neighbor(ll(9), secs(50)).is_some());
        check(&cache);
    }

    #[test]
    fn sending_evicts_the_oldest_resolved_entry_when_none_is_stale() {
        let mut cache = full_of_reachable(2);
        assert_eq!(cache.hold(ll(9), frame(1), secs(1)), Ok(None));
        assert_eq!(cache.neighbor(ll(1), secs(1)), None, "the oldest went");
        assert!(cache.neighbor(ll(2), secs(1)).is_some());
        check(&cache);
    }

    #[test]
    fn resolutions_are_bounded_and_never_evicted() {
        let mut cache = with(NdpConfig { max_entries: 3, max_incomplete: 2, ..NdpConfig::default() });
        assert_eq!(cache.hold(ll(1), frame(1), secs(0)), Ok(None));
        assert!(cache.resolve(ll(2), secs(0)));
        assert_eq!(cache.hold(ll(3), frame(3), secs(0)), Err(frame(3)), "max_incomplete");
        assert!(!cache.resolve(ll(3), secs(0)));
        cache.handle_solicitation(ll(4), &ns(B_MAC), secs(0));
        cache.handle_solicitation(ll(5), &ns(B_MAC), secs(1));
        assert_eq!(cache.neighbor(ll(4), secs(1)), None, "the STALE entry made room");
        assert_eq!(state_of(&cache, ll(1), secs(1)), Some((NeighborState::Incomplete, None)));
        assert_eq!(state_of(&cache, ll(2), secs(1)), Some((NeighborState::Incomplete, None)));
        // Full of resolutions: nothing new fits, and nothing held is lost.
        let mut cache = with(NdpConfig { max_entries: 2, max_incomplete: 2, ..NdpConfig::default() });
        cache.hold(ll(1), frame(1), secs(0)).unwrap();
        cache.hold(ll(2), frame(2), secs(0)).unwrap();
        cache.handle_solicitation(ll(4), &ns(B_MAC), secs(0));
        assert_eq!(cache.neighbor(ll(4), secs(0)), None);
        // The answer to a resolution needs no room.
        assert_eq!(cache.handle_advertisement(&na(ll(1), true, true, false, Some(B_MAC)), secs(0)).frames.len(), 1);
        check(&cache);
    }

    #[test]
    fn a_flood_of_new_addresses_stays_within_the_bound() {
        let mut cache = cache();
        for i in 0..50_000u32 {
            let ip = Ipv6Addr::from(0xfe80_0000_0000_0000_0000_0000_0000_0000u128 + u128::from(i));
            let now = Instant::from_micros(u64::from(i) * 100);
            cache.handle_solicitation(ip, &ns(B_MAC), now);
            if i % 7 == 0 {
                cache.lookup(ip, now);
            }
            if i % 11 == 0 {
                let _ = cache.hold(Ipv6Addr::from(u128::from(i) | 0x2001 << 112), frame(0), now);
                run(&mut cache, now);
            }
        }
        assert_eq!(cache.len(), 1024);
        check(&cache);
    }

    // ---------------------------------------------------------------------------------
    // Routers, prefixes and RA parameters (6.3.4, 6.3.6).
    // ---------------------------------------------------------------------------------

    #[test]
    fn a_router_lasts_its_lifetime() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(30, None), secs(0));
        assert_eq!(cache.default_router(ms(29_999)), Some(B));
        assert_eq!(cache.default_router(secs(30)), None);
        // A new advertisement restarts the lifetime; lifetime 0 removes the router.
        cache.handle_router_advertisement(B, &ra(30, None), secs(20));
        assert_eq!(cache.default_router(secs(49)), Some(B));
        cache.handle_router_advertisement(B, &ra(0, None), secs(21));
        assert_eq!(cache.default_router(secs(21)), None);
        // Lifetime 0 from an unknown router adds nothing; expired ones are dropped.
        cache.handle_router_advertisement(ll(1), &ra(0, None), secs(22));
        cache.handle_router_advertisement(ll(2), &ra(5, None), secs(22));
        run(&mut cache, secs(30));
        assert!(cache.routers.is_empty());
    }

    #[test]
    fn the_default_router_is_one_probably_reachable() {
        let mut cache = cache();
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        cache.handle_router_advertisement(ll(2), &ra(1800, None), secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(ll(1)), "none known: the first");
        cache.handle_router_advertisement(ll(2), &ra(1800, Some(C_MAC)), secs(1));
        assert_eq!(cache.default_router(secs(1)), Some(ll(2)), "the one with a STALE entry");
        assert!(cache.neighbor(ll(2), secs(1)).unwrap().is_router);
    }

    #[test]
    fn a_router_that_does_not_answer_goes_to_the_back() {
        let mut cache = cache();
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        cache.handle_router_advertisement(ll(2), &ra(1800, None), secs(0));
        cache.resolve(ll(1), secs(0));
        for t in 0..=3 {
            run(&mut cache, secs(t));
        }
        assert_eq!(cache.default_router(secs(3)), Some(ll(2)));
    }

    #[test]
    fn a_router_turning_host_leaves_the_router_list() {
        let mut cache = cache();
        cache.handle_router_advertisement(B, &ra(1800, Some(B_MAC)), secs(0));
        cache.handle_router_advertisement(ll(1), &ra(1800, None), secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(B));
        let update = cache.handle_advertisement(&na(B, true, true, true, Some(B_MAC)), secs(1));
        assert!(!update.router_lost, "still a router");
        let update = cache.handle_advertisement(&na(B, true, true, false, Some(B_MAC)), secs(2));
        assert!(update.router_lost);
        assert!(!cache.neighbor(B, secs(2)).unwrap().is_router);
        assert_eq!(cache.default_router(secs(2)), Some(ll(1)));
    }

    #[test]
    fn an_advertisement_without_option_marks_an_existing_entry_as_router() {
        let mut cache = cache();
        cache.handle_solicitation(B, &ns(B_MAC), secs(0));
        cache.handle_router_advertisement(B, &ra(0, None), secs(1));
        let n = cache.neighbor(B, secs(1)).unwrap();
        assert!(n.is_router);
        assert_eq!((n.state, n.mac), (NeighborState::Stale, Some(B_MAC)));
        assert_eq!(cache.default_router(secs(1)), None, "lifetime 0: not a default router");
    }

    #[test]
    fn routers_and_prefixes_are_bounded() {
        let mut cache = with(NdpConfig { max_routers: 2, max_prefixes: 2, ..NdpConfig::default() });
        for n in 1..=3 {
            let mut advert = ra(1800, None);
            let prefix = Ipv6Addr::new(0x2001, 0xdb8, n, 0, 0, 0, 0, 0);
            advert.prefixes.push(PrefixInfo {
                prefix,
                prefix_len: 64,
                on_link: true,
                autonomous: false,
                valid_lifetime_secs: 60,
                preferred_lifetime_secs: 60,
            });
            cache.handle_router_advertisement(ll(n), &advert, secs(0));
        }
        assert_eq!((cache.routers.len(), cache.prefixes.len()), (2, 2));
        assert!(!cache.on_link(Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1), secs(0)));
    }

    fn prefix_ra(prefix: &str, len: u8, on_link: bool, valid: u32) -> RouterAdvertisement {
        let mut advert = ra(0, None);
        advert.prefixes.push(PrefixInfo {
            prefix: prefix.parse().unwrap(),
            prefix_len: len,
            on_link,
            autonomous: true,
            valid_lifetime_secs: valid,
            preferred_lifetime_secs: valid,
        });
        advert
    }

    #[test]
    fn on_link_prefixes_follow_their_valid_lifetimes() {
        let mut cache = cache();
        let inside: Ipv6Addr = "2001:db8:1::99".parse().unwrap();
        assert!(cache.on_link(B, secs(0)), "link-local is always on-link (5.2)");
        assert!(!cache.on_link(inside, secs(0)));
        // Bits past the length do not count.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::ffff", 64, true, 60), secs(0));
        assert!(cache.on_link(inside, ms(59_999)));
        assert!(!cache.on_link("2001:db8:2::1".parse().unwrap(), secs(0)));
        assert!(!cache.on_link(inside, secs(60)));
        // Refreshed, then removed by a valid lifetime of 0.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 60), secs(30));
        assert!(cache.on_link(inside, secs(89)));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 0), secs(31));
        assert!(!cache.on_link(inside, secs(31)));
        // L clear, a new prefix with lifetime 0, and the link-local prefix: ignored.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, false, 60), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 64, true, 0), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("fe80::", 64, true, 60), secs(32));
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 129, true, 60), secs(32));
        assert!(cache.prefixes.is_empty());
        // An infinite lifetime lasts.
        cache.handle_router_advertisement(B, &prefix_ra("2001:db8:1::", 48, true, INFINITE_LIFETIME), secs(33));
        run(&mut cache, Instant::from_micros(u64::MAX));
        assert!(cache.on_link(inside, Instant::from_micros(u64::MAX)));
    }

    #[test]
    fn router_advertisements_set_mtu_hop_limit_and_timers() {
        let mut cache = cache();
        let mut advert = ra(1800, None);
        advert.mtu = Some(1400);
        advert.cur_hop_limit = 64;
        advert.reachable_time_ms = 10_000;
        advert.retrans_timer_ms = 500;
        cache.handle_router_advertisement(B, &advert, secs(0));
        assert_eq!((cache.link_mtu(), cache.cur_hop_limit()), (Some(1400), Some(64)));
        assert_eq!(
            (cache.base_reachable_time(), cache.retrans_timer()),
            (Duration::from_secs(10), Duration::from_millis(500))
        );
        // Too small an MTU, unspecified fields: nothing changes.
        cache.handle_router_advertisement(B, &RouterAdvertisement { mtu: Some(1000), ..ra(1800, None) }, secs(1));
        assert_eq!((cache.link_mtu(), cache.cur_hop_limit()), (Some(1400), Some(64)));
        assert_eq!(cache.retrans_timer(), Duration::from_millis(500));
        // The advertised RetransTimer spaces solicitations, with a floor.
        cache.resolve(ll(1), secs(2));
        assert_eq!(run(&mut cache, secs(2)).0.len(), 1);
        assert_eq!(cache.next_timeout(), Some(ms(2500)));
        cache.handle_router_advertisement(
            B,
            &RouterAdvertisement { retrans_timer_ms: 1, reachable_time_ms: 1, ..ra(1800, None) },
            secs(3),
        );
        assert_eq!((cache.retrans_timer(), cache.base_reachable_time()), (MIN_RETRANS_TIMER, MIN_REACHABLE_TIME));
    }

    #[test]
    fn the_fixture_advertisement_configures_the_cache() {
        let Ok(NdpMessage::RouterAdvertisement(advert)) = parse_frame(&RA_FRAME) else { panic!() };
        let mut cache = cache();
        cache.handle_router_advertisement(B, &advert, secs(0));
        assert_eq!(cache.default_router(secs(0)), Some(B));
        assert!(cache.on_link("2001:db8:1::1".parse().unwrap(), secs(0)));
        assert_eq!(cache.link_mtu(), Some(1500));
        assert_eq!(state_of(&cache, B, secs(0)), Some((NeighborState::Stale, Some(B_MAC))));
    }

    // ---------------------------------------------------------------------------------
    // Duplicate Address Detection (RFC 4862 5.4).
    // ---------------------------------------------------------------------------------

    #[test]
    fn dad_sends_its_solicitations_then_declares_the_address_unique() {
        let mut dad = Dad::new(A, 2, RETRANS_TIMER, ms(300));
        let mut sent = Vec::new();
        for t in [0, 299, 300, 800, 1299, 1300, 2299] {
            assert_eq!(dad.due(ms(t), |a| sent.push((t, a))), DadState::Tentative, "{t}");
        }
        assert_eq!(sent, [(300, A), (1300, A)]);
        assert_eq!(dad.next_timeout(), Some(ms(2300)));
        assert_eq!(dad.due(ms(2300), |_| panic!("no more")), DadState::Unique);
        assert_eq!(dad.next_timeout(), None);
        assert_eq!(Dad::new(A, 0, RETRANS_TIMER, ms(0)).state(), DadState::Unique, "DAD off");
    }

    #[test]
    fn dad_finds_duplicates_in_advertisements_and_other_checks() {
        let advert = NdpMessage::NeighborAdvertisement(na(A, false, true, false, Some(C_MAC)));
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(B, &advert), DadState::Duplicate);
        assert_eq!(dad.due(secs(5), |_| panic!("stopped")), DadState::Duplicate);
        // Another node checking the same address: its DAD solicitation, parsed from our own writer.
        let mut buf = [0u8; NDP_FRAME_LEN];
        let n = write_solicitation(&mut buf, C_MAC, UNSPECIFIED, A, Solicit::Multicast);
        let theirs = parse_frame(&buf[..n]).unwrap();
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(UNSPECIFIED, &theirs), DadState::Duplicate);
        // Someone resolving the address, and messages about others: not duplicates.
        let resolving = NdpMessage::NeighborSolicitation(NeighborSolicitation { target: A, source_mac: Some(C_MAC) });
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(B, &resolving), DadState::Tentative);
        let other = NdpMessage::NeighborAdvertisement(na(B, false, true, false, Some(B_MAC)));
        assert_eq!(dad.handle(B, &other), DadState::Tentative);
        assert_eq!(dad.address(), A);
    }
}
