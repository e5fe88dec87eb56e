//! The host's settings: [`StackConfig`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bypass_tcp::Config as TcpConfig;

use bypass_device::SynCookieAnswer;

use crate::addr::Cidr;
use crate::arp::ArpConfig;
use crate::fragments::ReassemblyConfig;
use crate::ndp::NdpConfig;

/// Host settings.
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// Our IPv4 address and subnet (`None`: the host speaks IPv6 only); destinations outside
    /// the subnet go through `gateway`.
    pub ipv4: Option<Cidr<Ipv4Addr>>,
    /// Our IPv6 addresses and their subnets (none: the host speaks IPv4 only). The host
    /// also has the link-local address made from its MAC (RFC 4291 2.1) whenever it has one
    /// of these; other destinations go through `gateway6` or a router that advertised itself.
    pub ipv6: Vec<Cidr<Ipv6Addr>>,
    /// IPv4 next hop for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// IPv6 next hop for destinations off our links (a router's link-local or global address);
    /// without it, the default router learnt from Router Advertisements (RFC 4861 6.3.4).
    pub gateway6: Option<Ipv6Addr>,
    /// Learn default routers and on-link prefixes from Router Advertisements (Linux:
    /// `accept_ra`, on for hosts).
    pub accept_router_advertisements: bool,
    /// Settings for every TCP connection (its `isn_secret` also keys, through keys derived
    /// from it, the SYN cookies and the ephemeral port choice). The host lowers `tcp.mss` to
    /// what the MTU allows; [`StackConfig::new`] leaves it at that (`u16::MAX`), so a jumbo
    /// MTU gets jumbo segments.
    pub tcp: TcpConfig,
    /// ARP settings.
    pub arp: ArpConfig,
    /// Neighbour Discovery settings (RFC 4861 10).
    pub ndp: NdpConfig,
    /// Fragment reassembly bounds (RFC 791 3.2, RFC 8200 4.5).
    pub fragments: ReassemblyConfig,
    /// Half-open connections (SYN-RECEIVED) per listener before SYN cookies take over.
    pub syn_queue: usize,
    /// How long after a listener last answered a SYN with a cookie it still checks the ACKs
    /// it gets as cookies (Linux: TCP_SYNCOOKIE_VALID, 2 minutes, the default). Outside this
    /// window an ACK to a listener is answered with RST unchecked, so blind forgery needs a
    /// recent SYN flood. Each listener keeps its own window: a flood against one port opens
    /// none on the others. The window runs from the latest cookie, and a cookie itself
    /// lives 64 to 128 s, so the default refuses only a handshake's ACK more than 120 s late.
    pub syn_cookie_valid: Duration,
    /// Check every ACK to a listener as a possible cookie, as if a cookie had just been sent:
    /// set it when the device answers SYNs with our cookies itself (the XDP program's cookies,
    /// [`StackConfig::syn_cookie_answer`]), which the host never sees being sent. Off by
    /// default (Linux's `tcp_syncookies` = 1 checks only after an overflow, as we do).
    pub syn_cookies_from_device: bool,
    /// Established connections per listener waiting for `accept`.
    pub accept_backlog: usize,
    /// Most connections in the table.
    pub max_connections: usize,
    /// Ports for active opens, inclusive. Chosen per destination by RFC 6056 algorithm 4
    /// (double-hash): neither sequential across destinations nor predictable without the key.
    pub ephemeral_ports: (u16, u16),
    /// `(index, count)`: take only ephemeral ports `p` with `p % count == index`. Stacks that
    /// share addresses, one per device queue (shards), each get their own residue, so two
    /// never open the same 4-tuple; a device that steers replies by destination port can
    /// then bring them back to the shard that opened the connection. `(0, 1)`: every port.
    pub ephemeral_port_share: (u16, u16),
    /// Keep the neighbours (ARP, NDP) learned from received frames for
    /// [`Interface::take_learned_neighbours`](crate::Interface::take_learned_neighbours), so stacks that share addresses, one per device
    /// queue, can tell each other: an answer to one's ARP request may arrive on another's
    /// queue.
    pub share_neighbours: bool,
    /// Sets of buffers (a send and a receive buffer's storage, `tcp.send_buffer +
    /// tcp.recv_buffer` bytes: 512 KiB by default, zeroed) kept for connections that need
    /// storage: new ones, and idle ones whose empty buffers gave theirs back
    /// (`Connection::detach_idle_storage`) when data moves again. The pool holds at least
    /// 128 sets whatever this says; only the bytes once written are resident.
    pub buffer_pool: usize,
    /// Most connections the application has closed that are still finishing in the
    /// background (orphans: FIN-WAIT, CLOSING, LAST-ACK, TIME-WAIT). Past it, a closed
    /// connection is reset at once instead (Linux: `net.ipv4.tcp_max_orphans`, "too many
    /// orphaned sockets"), so peers that vanish cannot make the host hold unbounded state.
    pub max_orphans: usize,
    /// Most bytes of unacknowledged data the orphans may hold between them, counted when
    /// each is closed; a close that would go past it resets the connection instead (Linux
    /// resets orphans under memory pressure likewise, `tcp_out_of_resources`).
    pub max_orphan_memory: usize,
    /// The most bytes the receive windows of all connections may offer between them, so
    /// that what the peers may send at once fits what the device can hold until the stack
    /// reads it. Each connection that can receive may grow its window to an equal share
    /// (never below two full-sized segments); a window already offered is never taken
    /// back (RFC 9293 3.8.6.2.2), only its growth stops. `None` (the default) takes half the
    /// device's receive ring in full-sized segments ([`Device::rx_frames`](bypass_device::Device::rx_frames)
    /// times the MSS, halved for the frames that are not full segments and for bursts that
    /// arrive while the stack is descheduled); a device without a fixed ring sets no limit.
    pub window_budget: Option<usize>,
    /// The most bytes all connections may have in flight between them, so that the
    /// acknowledgments their data draws fit what the device can hold beside the data the
    /// windows let in: a peer may acknowledge every segment (Linux does while in quick-ACK
    /// mode and during loss recovery). Each connection may have an equal share in flight,
    /// more while others leave theirs unused (never below two full-sized segments); only
    /// new data waits for the budget. `None` (the default) takes a quarter of the device's
    /// receive ring in full-sized segments, the window budget taking half; a device without
    /// a fixed ring sets no limit.
    pub flight_budget: Option<usize>,
    /// The most bytes the buffers of all connections may hold allocated before autotuning
    /// stops growing any (as Linux's `tcp_mem` pressure threshold); buffers already grown
    /// keep their size, and new connections still get `tcp.send_buffer + tcp.recv_buffer`.
    pub buffer_memory: usize,
}

impl StackConfig {
    /// Return the TCP settings of each family on a link of IP MTU `mtu`: `tcp` with the MSS
    /// lowered to what fits the MTU with IPv4 and TCP headers, and with IPv6 ones.
    pub(crate) fn tcp_by_family(&self, mtu: usize) -> (TcpConfig, TcpConfig) {
        let mut tcp = self.tcp.clone();
        // Our segments must fit the MTU with IP and TCP headers.
        tcp.mss = tcp.mss.min((mtu - crate::wire::IPV4_LEN - 20) as u16);
        let mut tcp6 = tcp.clone();
        tcp6.mss = tcp.mss.min((mtu - crate::wire::IPV6_LEN - 20) as u16);
        (tcp, tcp6)
    }

    /// Return what a device on a link of IP MTU `mtu` needs to answer SYNs with this host's
    /// SYN cookies, bit for bit as the host would (the key derived from `tcp.isn_secret`; the
    /// MSS and initial window of each family). A host that lets a device answer for it must
    /// set [`syn_cookies_from_device`](StackConfig::syn_cookies_from_device), and count
    /// cookie periods on the device's clock ([`Stack::align_syn_cookie_clock`](crate::Stack::align_syn_cookie_clock)).
    pub fn syn_cookie_answer(&self, mtu: usize) -> SynCookieAnswer {
        let (tcp, tcp6) = self.tcp_by_family(mtu);
        let window = |c: &TcpConfig| c.initial_recv_window() as u16;
        SynCookieAnswer {
            key: crate::syncookie::key(&self.tcp.isn_secret),
            mss4: tcp.mss,
            window4: window(&tcp),
            mss6: tcp6.mss,
            window6: window(&tcp6),
        }
    }

    /// Return defaults for address `ip`/`prefix_len` (IPv4 or IPv6; add more with
    /// [`with_address`](StackConfig::with_address)), with `secret` keying ISNs and SYN
    /// cookies (fill it from a random source).
    pub fn new(ip: impl Into<IpAddr>, prefix_len: u8, secret: [u8; 16]) -> Self {
        let config = StackConfig {
            ipv4: None,
            ipv6: Vec::new(),
            gateway: None,
            gateway6: None,
            accept_router_advertisements: true,
            // The MSS the interface's MTU allows (RFC 9293 3.7.1: MTU minus the IP and TCP
            // headers), 1460 at 1500 and 8960 at a 9000-byte jumbo MTU: `Interface::new`
            // lowers the MSS to fit the MTU, and this asks for no lower.
            tcp: TcpConfig { isn_secret: secret, mss: u16::MAX, ..TcpConfig::default() },
            arp: ArpConfig::default(),
            ndp: NdpConfig::default(),
            fragments: ReassemblyConfig::default(),
            syn_queue: 256,
            syn_cookie_valid: Duration::from_secs(120),
            syn_cookies_from_device: false,
            accept_backlog: 1024,
            max_connections: 1 << 20,
            ephemeral_ports: (49152, 65535),
            ephemeral_port_share: (0, 1),
            share_neighbours: false,
            buffer_pool: 16,
            max_orphans: 16_384,
            max_orphan_memory: 64 << 20,
            window_budget: None,
            flight_budget: None,
            buffer_memory: 512 << 20,
        };
        config.with_address(ip, prefix_len)
    }

    /// Add address `ip`/`prefix_len`: IPv6 addresses add up, an IPv4 one replaces the IPv4
    /// address (a host has one here).
    pub fn with_address(mut self, ip: impl Into<IpAddr>, prefix_len: u8) -> Self {
        match ip.into() {
            IpAddr::V4(addr) => self.ipv4 = Some(Cidr { addr, prefix_len: prefix_len.min(32) }),
            IpAddr::V6(addr) => self.ipv6.push(Cidr { addr, prefix_len: prefix_len.min(128) }),
        }
        self
    }
}
