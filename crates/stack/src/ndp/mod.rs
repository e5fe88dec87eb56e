//! IPv6 Neighbour Discovery for hosts (RFC 4861), sans-IO: the neighbour cache and its
//! reachability state machine, the default router and on-link prefix lists learned from
//! Router Advertisements (`cache.rs`), and Duplicate Address Detection (RFC 4862 5.4,
//! `dad.rs`). The messages are parsed and written by [`crate::wire::ndp`].
//!
//! It is the IPv6 counterpart of [`crate::arp`], and a host drives the two alike. Nothing
//! here reads a clock or touches a device: time comes in as `now`, messages come in parsed,
//! and frames go out through the writers of [`crate::wire::ndp`] into the caller's buffer.
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
//!
//! [`parse`]: crate::wire::ndp::parse
//! [`checksum`]: crate::wire::ndp::checksum
//! [`NdpError`]: crate::wire::ndp::NdpError
//! [`write_advertisement`]: crate::wire::ndp::write_advertisement
//! [`multicast_mac`]: crate::wire::ndp::multicast_mac
//! [`write_solicitation`]: crate::wire::ndp::write_solicitation

use std::time::Duration;

mod cache;
mod dad;

pub use cache::{Failed, NdpCache, NdpConfig, Neighbor, NeighborState, Update};
pub use dad::{Dad, DadState};

// -------------------------------------------------------------------------------------
// Protocol constants (RFC 4861 10).
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
/// Least time between solicitations, whatever the configuration or a Router Advertisement
/// says (Linux's floor for an advertised RetransTimer, 10 ms).
const MIN_RETRANS_TIMER: Duration = Duration::from_millis(10);
/// Least BaseReachableTime taken from a Router Advertisement (Linux's floor, 100 ms).
const MIN_REACHABLE_TIME: Duration = Duration::from_millis(100);
/// Most BaseReachableTime taken from a Router Advertisement (RFC 4861 6.2.1: routers
/// MUST NOT advertise more than an hour).
const MAX_REACHABLE_TIME: Duration = Duration::from_secs(3600);
