//! ARP for Ethernet and IPv4 (RFC 826): the request or reply as an [`ArpMessage`], parsed
//! from the payload of an ARP frame and written as a whole frame.

use std::net::Ipv4Addr;

use etherparse::{ArpEthIpv4Packet, ArpOperation, ArpPacketSlice, EtherType};

use super::{BROADCAST, ETH_LEN, write_ethernet};

/// Length of an ARP frame: Ethernet header plus the Ethernet/IPv4 ARP packet.
pub const ARP_FRAME_LEN: usize = ETH_LEN + ArpEthIpv4Packet::LEN;

/// What a request or reply told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpMessage {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// Parse an Ethernet/IPv4 ARP packet (the payload of an ARP frame).
pub fn parse(payload: &[u8]) -> Option<ArpMessage> {
    let packet = ArpPacketSlice::from_slice(payload).ok()?.to_packet().try_eth_ipv4().ok()?;
    Some(ArpMessage {
        operation: packet.operation,
        sender_mac: packet.sender_mac,
        sender_ip: packet.sender_ipv4_addr(),
        target_ip: packet.target_ipv4_addr(),
    })
}

/// Write an ARP frame into `buf` (at least [`ARP_FRAME_LEN`] bytes); return its length.
pub fn write_frame(
    buf: &mut [u8],
    operation: ArpOperation,
    our_mac: [u8; 6],
    our_ip: Ipv4Addr,
    target_mac: [u8; 6],
    target_ip: Ipv4Addr,
) -> usize {
    let eth_dst = if operation == ArpOperation::REQUEST { BROADCAST } else { target_mac };
    write_ethernet(buf, our_mac, eth_dst, EtherType::ARP);
    let arp = ArpEthIpv4Packet {
        operation,
        sender_mac: our_mac,
        sender_ipv4: our_ip.octets(),
        target_mac: if operation == ArpOperation::REQUEST { [0; 6] } else { target_mac },
        target_ipv4: target_ip.octets(),
    };
    buf[ETH_LEN..ARP_FRAME_LEN].copy_from_slice(&arp.to_bytes());
    ARP_FRAME_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, last)
    }

    #[test]
    fn request_round_trips_through_bytes() {
        let mut buf = [0xa5u8; 64];
        let n = write_frame(&mut buf, ArpOperation::REQUEST, MAC, ip(1), [0; 6], ip(2));
        assert_eq!(n, 42);
        assert_eq!(&buf[..6], &[0xff; 6]);
        assert_eq!(&buf[12..14], &[0x08, 0x06]);
        let msg = parse(&buf[14..n]).unwrap();
        assert_eq!(
            msg,
            ArpMessage { operation: ArpOperation::REQUEST, sender_mac: MAC, sender_ip: ip(1), target_ip: ip(2) }
        );
        assert_eq!(buf[n], 0xa5);
        assert_eq!(parse(&buf[14..30]), None, "truncated");
    }
}
