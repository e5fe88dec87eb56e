//! Turn one captured Ethernet frame into the TCP facts a ladder needs, or a reason to skip it.
//!
//! etherparse's lax slicer walks Ethernet, VLAN tags, IPv4 and IPv6 (with extension headers);
//! `bypass_tcp` gives the TCP header its meaning. Nothing here panics on the bytes.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bypass_device::CapturedFrame;
use bypass_tcp::{Flags, ParseError, Segment, SeqNum, TcpOptions};
use etherparse::{EtherType, IpNumber, LaxNetSlice, LaxSlicedPacket, LinkSlice};

/// One TCP segment seen in the capture.
#[derive(Clone, Debug)]
pub struct TcpPacket {
    /// Frame number in the capture, 1-based like Wireshark's.
    pub frame: usize,
    /// Capture timestamp.
    pub time: Duration,
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: SeqNum,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: SeqNum,
    /// Control bits.
    pub flags: Flags,
    /// Window field as sent (unscaled).
    pub window: u16,
    /// Typed options.
    pub options: TcpOptions,
    /// Payload octets on the wire (from the IP length, even where the capture cut the frame short).
    pub len: u32,
    /// The capture holds fewer payload octets than were sent (snap length).
    pub cut_short: bool,
    /// The pcapng packet comment.
    pub comment: Option<String>,
}

impl TcpPacket {
    /// Return SEG.LEN: payload plus one each for SYN and FIN (RFC 9293 3.4).
    pub fn seg_len(&self) -> u32 {
        self.len + self.flags.syn() as u32 + self.flags.fin() as u32
    }
}

/// Why a frame is not part of any TCP conversation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// Shorter than an Ethernet header.
    TooShort,
    /// ARP.
    Arp,
    /// Neither IPv4, IPv6 nor ARP.
    NotIp(u16),
    /// An IP header etherparse could not read.
    BadIp(String),
    /// IP, but another protocol (UDP, ICMP, ...).
    NotTcp(String),
    /// An IP fragment: not reassembled here.
    Fragment,
    /// The TCP header is cut off (a truncated frame or snap length).
    TcpCutOff,
    /// The TCP header is malformed.
    BadTcp(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::TooShort => f.write_str("shorter than an Ethernet header"),
            Skip::Arp => f.write_str("ARP"),
            Skip::NotIp(t) => write!(f, "not IP (ethertype 0x{t:04x})"),
            Skip::BadIp(e) => write!(f, "malformed IP header ({e})"),
            Skip::NotTcp(p) => f.write_str(p),
            Skip::Fragment => f.write_str("IP fragment (not reassembled)"),
            Skip::TcpCutOff => f.write_str("TCP header cut off"),
            Skip::BadTcp(e) => write!(f, "malformed TCP header ({e})"),
        }
    }
}

/// Decode frame number `frame` (1-based).
pub fn decode(frame: usize, captured: &CapturedFrame) -> Result<TcpPacket, Skip> {
    let sliced = LaxSlicedPacket::from_ethernet(&captured.data).map_err(|_| Skip::TooShort)?;
    let Some(net) = &sliced.net else {
        if let Some((err, _)) = &sliced.stop_err {
            return Err(Skip::BadIp(err.to_string()));
        }
        let ether_type = sliced
            .link_exts
            .last()
            .and_then(|ext| ext.payload())
            .map(|p| p.ether_type)
            .or(match &sliced.link {
                Some(LinkSlice::Ethernet2(e)) => Some(e.ether_type()),
                _ => None,
            })
            .unwrap_or(EtherType(0));
        return Err(Skip::NotIp(ether_type.0));
    };
    // Addresses, and the TCP length the IP header declares (the capture may hold less).
    let (src, dst, payload, declared) = match net {
        LaxNetSlice::Arp(_) => return Err(Skip::Arp),
        LaxNetSlice::Ipv4(ip) => {
            let h = ip.header();
            let exts = ip.extensions().auth.map_or(0, |a| a.slice().len());
            let declared = (h.total_len() as usize).saturating_sub(h.slice().len() + exts);
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), ip.payload(), declared)
        }
        LaxNetSlice::Ipv6(ip) => {
            let h = ip.header();
            let declared = (h.payload_length() as usize).saturating_sub(ip.extensions().slice().len());
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), ip.payload(), declared)
        }
    };
    if payload.ip_number != IpNumber::TCP {
        let name = payload.ip_number.keyword_str().unwrap_or("IP protocol");
        return Err(Skip::NotTcp(format!("{name} ({})", payload.ip_number.0)));
    }
    if payload.fragmented {
        return Err(Skip::Fragment);
    }
    let segment = Segment::parse_unchecked(payload.payload).map_err(|e| match e {
        ParseError::Truncated { .. } => Skip::TcpCutOff,
        ParseError::DataOffsetPastEnd { .. } if payload.incomplete => Skip::TcpCutOff,
        e => Skip::BadTcp(e.to_string()),
    })?;
    let captured_len = segment.payload.len();
    let header_len = payload.payload.len() - captured_len;
    // The IP length counts what was sent; the capture may have cut the frame short.
    let (len, cut_short) = if payload.incomplete && declared > payload.payload.len() {
        (declared - header_len, true)
    } else {
        (captured_len, false)
    };
    Ok(TcpPacket {
        frame,
        time: captured.timestamp,
        src: SocketAddr::new(src, segment.src_port),
        dst: SocketAddr::new(dst, segment.dst_port),
        seq: segment.seq,
        ack: segment.ack,
        flags: segment.flags,
        window: segment.window,
        options: segment.options,
        len: u32::try_from(len).unwrap_or(u32::MAX),
        cut_short,
        comment: captured.comment.clone(),
    })
}
