//! Counters: every frame received, sent or dropped is counted, drops by reason.

use core::fmt;

/// Why the host dropped a frame or segment before it reached a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Drop {
    /// Shorter than an Ethernet header, or its payload shorter than its own header says.
    Truncated,
    /// Not addressed to our MAC or to broadcast.
    WrongMac,
    /// An ethertype we do not speak (IPv6, VLAN tags, ...).
    UnknownEthertype,
    /// ARP that is malformed or not Ethernet/IPv4.
    BadArp,
    /// ARP not about our address.
    ArpNotForUs,
    /// IPv4 header malformed (version, IHL, total length).
    BadIpv4Header,
    /// IPv4 header checksum wrong.
    BadIpv4Checksum,
    /// IPv4 addressed to another host.
    WrongIpAddress,
    /// IPv4 from a source no host may send from: broadcast (limited or our subnet's),
    /// this network (0/8), loopback (127/8), multicast (224/4), or our own address
    /// (RFC 1122 3.2.1.3).
    MartianSource,
    /// An IP protocol we do not speak.
    UnknownProtocol,
    /// ICMP malformed or with a bad checksum.
    BadIcmp,
    /// ICMP other than echo request.
    IcmpIgnored,
    /// TCP segment malformed or with a bad checksum.
    BadTcp,
    /// TCP segment to a port nobody listens on (answered with RST).
    NoListener,
    /// SYN refused: the accept backlog is full.
    BacklogFull,
    /// ACK that did not match a SYN cookie (answered with RST).
    BadSynCookie,
    /// ACK to a listener that sent no SYN cookie within `StackConfig::syn_cookie_valid`,
    /// so none was checked (answered with RST, RFC 9293 3.10.7.2).
    StrayAck,
    /// To a listener, neither SYN nor ACK (a FIN or data alone): dropped without a reply
    /// (RFC 9293 3.10.7.2, fourth).
    ListenNoSyn,
    /// The connection table is full.
    TableFull,
    /// A frame waiting for ARP resolution was dropped (queue full or resolution failed).
    ArpQueueDrop,
    /// IPv6 header malformed (version, payload length), or an extension header we cannot
    /// process (RFC 8200 4: an unknown one, or a routing header with segments left).
    BadIpv6Header,
    /// IPv6 to an address that is not ours, or to a multicast group we did not join.
    Ipv6NotForUs,
    /// ICMPv6 malformed or with a bad checksum (RFC 4443 2.3).
    BadIcmpv6,
    /// Neighbour Discovery message that fails the checks of RFC 4861 7.1 and 6.1 (hop
    /// limit 255, code, length, options), or one we do not act on.
    BadNdp,
    /// A frame waiting for Neighbour Discovery was dropped (queue full or resolution
    /// failed, RFC 4861 7.2.2).
    NeighbourQueueDrop,
    /// A fragment (IPv4 or IPv6) dropped: overlapping (RFC 5722), oversized, badly sized,
    /// over the reassembly memory bound, or its datagram's time ran out.
    FragmentDropped,
    /// An ICMP error about a TCP connection whose quoted sequence number is outside the
    /// window (RFC 5927 4.1), for a connection we do not have, or one TCP did not act on.
    IcmpOutOfWindow,
    /// The device had no transmit buffer free.
    TxRingFull,
}

impl Drop {
    /// Every reason, in display order.
    pub const ALL: [Drop; 28] = [
        Drop::Truncated,
        Drop::WrongMac,
        Drop::UnknownEthertype,
        Drop::BadArp,
        Drop::ArpNotForUs,
        Drop::BadIpv4Header,
        Drop::BadIpv4Checksum,
        Drop::WrongIpAddress,
        Drop::MartianSource,
        Drop::UnknownProtocol,
        Drop::BadIcmp,
        Drop::IcmpIgnored,
        Drop::BadTcp,
        Drop::NoListener,
        Drop::BacklogFull,
        Drop::BadSynCookie,
        Drop::StrayAck,
        Drop::ListenNoSyn,
        Drop::TableFull,
        Drop::ArpQueueDrop,
        Drop::BadIpv6Header,
        Drop::Ipv6NotForUs,
        Drop::BadIcmpv6,
        Drop::BadNdp,
        Drop::NeighbourQueueDrop,
        Drop::FragmentDropped,
        Drop::IcmpOutOfWindow,
        Drop::TxRingFull,
    ];

    /// Return a short snake_case name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Drop::Truncated => "truncated",
            Drop::WrongMac => "wrong_mac",
            Drop::UnknownEthertype => "unknown_ethertype",
            Drop::BadArp => "bad_arp",
            Drop::ArpNotForUs => "arp_not_for_us",
            Drop::BadIpv4Header => "bad_ipv4_header",
            Drop::BadIpv4Checksum => "bad_ipv4_checksum",
            Drop::WrongIpAddress => "wrong_ip_address",
            Drop::MartianSource => "martian_source",
            Drop::UnknownProtocol => "unknown_protocol",
            Drop::BadIcmp => "bad_icmp",
            Drop::IcmpIgnored => "icmp_ignored",
            Drop::BadTcp => "bad_tcp",
            Drop::NoListener => "no_listener",
            Drop::BacklogFull => "backlog_full",
            Drop::BadSynCookie => "bad_syn_cookie",
            Drop::StrayAck => "stray_ack",
            Drop::ListenNoSyn => "listen_no_syn",
            Drop::TableFull => "table_full",
            Drop::ArpQueueDrop => "arp_queue_drop",
            Drop::BadIpv6Header => "bad_ipv6_header",
            Drop::Ipv6NotForUs => "ipv6_not_for_us",
            Drop::BadIcmpv6 => "bad_icmpv6",
            Drop::BadNdp => "bad_ndp",
            Drop::NeighbourQueueDrop => "neighbour_queue_drop",
            Drop::FragmentDropped => "fragment_dropped",
            Drop::IcmpOutOfWindow => "icmp_out_of_window",
            Drop::TxRingFull => "tx_ring_full",
        }
    }
}

/// Host-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received from the device.
    pub rx_frames: u64,
    /// Bytes received from the device.
    pub rx_bytes: u64,
    /// Frames handed to the device.
    pub tx_frames: u64,
    /// Bytes handed to the device.
    pub tx_bytes: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// ARP requests held back because the address was asked for less than
    /// `ArpConfig::retry` before (each sent later, when the interval has passed).
    pub arp_requests_suppressed: u64,
    /// ICMP echo requests answered.
    pub icmp_echo_replies: u64,
    /// TCP segments delivered to connections or listeners.
    pub tcp_segments_in: u64,
    /// TCP segments sent.
    pub tcp_segments_out: u64,
    /// Resets sent for segments that matched no connection.
    pub tcp_resets_out: u64,
    /// SYN-ACKs sent as SYN cookies (the SYN queue was full).
    pub syn_cookies_sent: u64,
    /// Connections established from a valid SYN cookie.
    pub syn_cookies_accepted: u64,
    /// Connections accepted by listeners.
    pub connections_accepted: u64,
    /// Connections opened actively.
    pub connections_opened: u64,
    /// Connection buffers (send or receive) that took zeroed storage from the pool, given
    /// back by finished or idle connections, instead of allocating (see
    /// `StackConfig::buffer_pool`).
    pub buffers_recycled: u64,
    /// Connection buffers (send or receive) that allocated their storage.
    pub buffers_allocated: u64,
    /// Connections that timed out: retransmissions, unanswered window probes or keep-alives,
    /// or the user timeout ran out.
    pub connections_timed_out: u64,
    /// Connections the peer reset.
    pub connections_reset: u64,
    /// Resets sent because received data was lost: a connection closed with data unread, or
    /// data arriving after the close (RFC 9293 3.6.1); counted as connections are removed.
    pub resets_for_lost_data: u64,
    /// Connections reset on close because the orphans were at their bound
    /// (`StackConfig::max_orphans`, `max_orphan_memory`).
    pub orphans_reset: u64,
    /// SYNs that found a closed connection in TIME-WAIT and opened a new one (RFC 6191).
    pub time_wait_reopened: u64,
    /// ICMP and ICMPv6 errors about one of our connections that TCP acted on (RFC 1122
    /// 4.2.3.9, RFC 5927).
    pub icmp_errors: u64,
    /// Path MTU decreases learnt from "fragmentation needed" or "packet too big" (RFC 1191,
    /// RFC 8201).
    pub path_mtu_lowered: u64,
    /// Datagrams reassembled from fragments (RFC 791, RFC 8200 4.5).
    pub fragments_reassembled: u64,
    /// Neighbour Solicitations sent (RFC 4861 7.2.2).
    pub ndp_solicitations: u64,
    /// Neighbour Advertisements sent in answer to solicitations for our addresses (RFC 4861 7.2.4).
    pub ndp_advertisements: u64,
    /// Bytes copied by the CPU on the data path (payload into and out of connection
    /// buffers), for the demo's copies-per-byte figure.
    pub bytes_copied: u64,
    /// Bytes the application read or wrote in place in connection buffers, with
    /// [`Stack::recv_with`](crate::Stack::recv_with) and
    /// [`Stack::send_with`](crate::Stack::send_with): not copied by the host, and not in
    /// `bytes_copied`.
    pub bytes_in_place: u64,
    /// Frames received for a sibling host's connection (another shard's active open, whose
    /// replies the device steered to this queue) and handed over to it.
    pub frames_handed_over: u64,
    drops: [u64; Drop::ALL.len()],
}

impl Counters {
    /// Count one drop.
    #[inline]
    pub fn drop(&mut self, reason: Drop) {
        self.drops[reason as usize] += 1;
    }

    /// Return how many frames were dropped for `reason`.
    pub fn drops(&self, reason: Drop) -> u64 {
        self.drops[reason as usize]
    }

    /// Return all drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

impl Counters {
    /// Return every counter as `(name, value)`, zeros too, in display order: the plain
    /// counters, then one `drop.<reason>` per [`Drop`] reason.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let plain = [
            ("rx_frames", self.rx_frames),
            ("rx_bytes", self.rx_bytes),
            ("tx_frames", self.tx_frames),
            ("tx_bytes", self.tx_bytes),
            ("arp_replies", self.arp_replies),
            ("arp_requests", self.arp_requests),
            ("arp_requests_suppressed", self.arp_requests_suppressed),
            ("icmp_echo_replies", self.icmp_echo_replies),
            ("tcp_segments_in", self.tcp_segments_in),
            ("tcp_segments_out", self.tcp_segments_out),
            ("tcp_resets_out", self.tcp_resets_out),
            ("syn_cookies_sent", self.syn_cookies_sent),
            ("syn_cookies_accepted", self.syn_cookies_accepted),
            ("connections_accepted", self.connections_accepted),
            ("connections_opened", self.connections_opened),
            ("buffers_recycled", self.buffers_recycled),
            ("buffers_allocated", self.buffers_allocated),
            ("connections_timed_out", self.connections_timed_out),
            ("connections_reset", self.connections_reset),
            ("resets_for_lost_data", self.resets_for_lost_data),
            ("orphans_reset", self.orphans_reset),
            ("time_wait_reopened", self.time_wait_reopened),
            ("icmp_errors", self.icmp_errors),
            ("path_mtu_lowered", self.path_mtu_lowered),
            ("fragments_reassembled", self.fragments_reassembled),
            ("ndp_solicitations", self.ndp_solicitations),
            ("ndp_advertisements", self.ndp_advertisements),
            ("bytes_copied", self.bytes_copied),
            ("bytes_in_place", self.bytes_in_place),
            ("frames_handed_over", self.frames_handed_over),
        ];
        let plain = plain.into_iter().map(|(name, value)| (name.to_string(), value));
        plain.chain(Drop::ALL.into_iter().map(|reason| (format!("drop.{}", reason.name()), self.drops(reason))))
    }
}

impl fmt::Display for Counters {
    /// Write one `name value` line per non-zero counter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in self.iter() {
            if value != 0 {
                writeln!(f, "{name:<24} {value}")?;
            }
        }
        Ok(())
    }
}
