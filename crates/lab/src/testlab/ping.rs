//! ICMP echo from code, from the calling thread's namespace: what `ping -c1 -W` does, without
//! needing iputils-ping.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::sys;

/// Send one ICMP echo request to `addr` from the calling thread's namespace and wait up to
/// `timeout` for the reply (what `ping -c1 -W` does, without needing iputils-ping); return
/// the round-trip time. Needs root (a raw ICMP socket).
pub fn ping(addr: Ipv4Addr, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::KernelDefault, connect: false, report_errors: false };
    echo(IpAddr::V4(addr), &PING_PAYLOAD, options, timeout)
}

/// Send one ICMPv6 echo request to `addr` from the calling thread's namespace and wait up to
/// `timeout` for the reply; return the round-trip time. Like [`ping`], this needs root: it
/// uses a raw ICMPv6 socket, because a datagram one (`socket(AF_INET6, SOCK_DGRAM,
/// IPPROTO_ICMPV6)`) needs `net.ipv4.ping_group_range` to hold the caller's group, root
/// included, and every new namespace starts with the empty range `1 0`. The socket is
/// connected to `addr`, so only messages from `addr` reach it.
///
/// A link-local `addr` needs a scope, which this does not take: ping a global address.
pub fn ping6(addr: Ipv6Addr, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::KernelDefault, connect: true, report_errors: false };
    echo(IpAddr::V6(addr), &PING_PAYLOAD, options, timeout)
}

/// Send one echo request with `payload` bytes of payload (a byte pattern) to `addr`, letting
/// the kernel fragment it, and wait up to `timeout` for a reply that carries the same
/// payload; return the round-trip time.
///
/// The socket sets `IP_MTU_DISCOVER = IP_PMTUDISC_DONT` or `IPV6_MTU_DISCOVER =
/// IPV6_PMTUDISC_DONT`: a request larger than the MTU leaves in fragments (over IPv4 with DF
/// clear, so routers may fragment it further) instead of failing with `EMSGSIZE`, and the
/// kernel reassembles the reply. Over IPv6 routers never fragment: a request whose fragments
/// are larger than the path MTU draws an ICMPv6 Packet Too Big, which comes back as an error
/// whose `raw_os_error()` is `EMSGSIZE`; the kernel has then learned the path MTU, and the
/// next request is fragmented to fit. ICMP errors about the request end the wait with their
/// error (`IP_RECVERR` / `IPV6_RECVERR`). At most 65507 payload bytes over IPv4, 65527 over
/// IPv6.
pub fn ping_sized(addr: IpAddr, payload: usize, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::Fragment, connect: true, report_errors: true };
    echo(addr, &echo_payload(addr, payload)?, options, timeout)
}

/// Send one echo request with `payload` bytes of payload to `addr` that must not be
/// fragmented, and wait up to `timeout` for its reply; return the round-trip time.
///
/// The socket sets `IP_PMTUDISC_DO` / `IPV6_PMTUDISC_DO` (over IPv4 the request carries DF)
/// and `IP_RECVERR` / `IPV6_RECVERR`. A request larger than the path MTU the kernel knows
/// fails at once, and one that a router cannot forward draws an ICMP "fragmentation needed"
/// or ICMPv6 "packet too big", which the kernel records as the route's path MTU (`ip route
/// get` shows it as `mtu`) and returns here: both are errors whose `raw_os_error()` is
/// `EMSGSIZE`. Other ICMP errors about the request end the wait with their error too.
pub fn ping_dont_fragment(addr: IpAddr, payload: usize, timeout: Duration) -> io::Result<Duration> {
    let options = EchoOptions { pmtu: Pmtu::DontFragment, connect: true, report_errors: true };
    echo(addr, &echo_payload(addr, payload)?, options, timeout)
}

/// The payload of [`ping`] and [`ping6`].
const PING_PAYLOAD: [u8; 32] = *b"bypass testlab ping 0123456789ab";

/// What an echo socket does about fragmentation (`IP_MTU_DISCOVER` / `IPV6_MTU_DISCOVER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pmtu {
    /// Leave the socket's default (`IP_PMTUDISC_WANT`).
    KernelDefault,
    /// `IP_PMTUDISC_DONT` / `IPV6_PMTUDISC_DONT`: fragment locally, DF clear.
    Fragment,
    /// `IP_PMTUDISC_DO` / `IPV6_PMTUDISC_DO`: never fragment, DF set.
    DontFragment,
}

/// How [`echo`] sets up its socket.
#[derive(Clone, Copy, Debug)]
struct EchoOptions {
    pmtu: Pmtu,
    /// Connect the socket to the destination: the kernel then passes it only messages from
    /// there, and ICMP errors only about datagrams sent there.
    connect: bool,
    /// Set `IP_RECVERR` / `IPV6_RECVERR` and return the first ICMP error as the result.
    report_errors: bool,
}

/// Return a payload of `len` bytes for an echo request to `addr`, checking that it fits in
/// one IP datagram.
fn echo_payload(addr: IpAddr, len: usize) -> io::Result<Vec<u8>> {
    // 65535 minus the IPv4 header and the ICMP header; IPv6's payload length excludes its header.
    let max = if addr.is_ipv4() { 65535 - 20 - 8 } else { 65535 - 8 };
    if len > max {
        let message = format!("an echo request to {addr} carries at most {max} bytes of payload, not {len}");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
    }
    let salt = SEQUENCE.load(Ordering::Relaxed);
    Ok((0..len as u32).map(|i| (i.wrapping_mul(31) ^ (i >> 8) ^ salt) as u8).collect())
}

/// Sequence numbers of the echo requests this process sends.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// Send one echo request to `addr` with `payload` and wait up to `timeout` for its reply.
fn echo(addr: IpAddr, payload: &[u8], options: EchoOptions, timeout: Duration) -> io::Result<Duration> {
    let socket = sys::IcmpSocket::open(addr.is_ipv6())?;
    let (level, discover, recverr, dont, always) = match addr {
        IpAddr::V4(_) => {
            (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_RECVERR, libc::IP_PMTUDISC_DONT, libc::IP_PMTUDISC_DO)
        }
        IpAddr::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_RECVERR,
            libc::IPV6_PMTUDISC_DONT,
            libc::IPV6_PMTUDISC_DO,
        ),
    };
    match options.pmtu {
        Pmtu::KernelDefault => {}
        Pmtu::Fragment => socket.set_int(level, discover, dont)?,
        Pmtu::DontFragment => socket.set_int(level, discover, always)?,
    }
    if options.report_errors {
        socket.set_int(level, recverr, 1)?;
    }
    if options.connect {
        socket.connect(addr)?;
    }
    // Raw ICMP sockets see every ICMP message to this host: match ours by id and sequence.
    let id = (std::process::id() & 0xffff) as u16;
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed) as u16;
    let echo = etherparse::IcmpEchoHeader { id, seq };
    let mut request = match addr {
        IpAddr::V4(_) => etherparse::Icmpv4Header::with_checksum(etherparse::Icmpv4Type::EchoRequest(echo), payload)
            .to_bytes()
            .to_vec(),
        // The kernel fills in the checksum of ICMPv6 sent on a raw socket (RFC 3542, 3.1).
        IpAddr::V6(_) => etherparse::Icmpv6Header::new(etherparse::Icmpv6Type::EchoRequest(echo)).to_bytes().to_vec(),
    };
    request.extend_from_slice(payload);
    let start = Instant::now();
    socket.send_to(&request, addr)?;
    let mut buf = vec![0u8; 65536 + 64];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no echo reply from {addr} in {timeout:?}")));
        }
        let Some(n) = socket.recv(&mut buf, left)? else { continue };
        if is_echo_reply(addr, &buf[..n], echo, payload) {
            return Ok(start.elapsed());
        }
    }
}

/// Return whether `message`, as a raw ICMP socket received it, is the reply from `from` to the
/// echo request `echo` carrying `payload`.
fn is_echo_reply(from: IpAddr, message: &[u8], echo: etherparse::IcmpEchoHeader, payload: &[u8]) -> bool {
    match from {
        IpAddr::V4(from) => {
            // A raw IPv4 socket receives the IP header too.
            let Ok(ip) = etherparse::Ipv4Slice::from_slice(message) else { return false };
            if ip.header().source_addr() != from {
                return false;
            }
            let Ok(icmp) = etherparse::Icmpv4Slice::from_slice(ip.payload().payload) else { return false };
            icmp.icmp_type() == etherparse::Icmpv4Type::EchoReply(echo) && icmp.payload() == payload
        }
        // A raw IPv6 socket receives the ICMPv6 message alone; connected, only from `from`.
        IpAddr::V6(_) => {
            let Ok(icmp) = etherparse::Icmpv6Slice::from_slice(message) else { return false };
            icmp.icmp_type() == etherparse::Icmpv6Type::EchoReply(echo) && icmp.payload() == payload
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_payloads_fit_one_datagram() {
        let (v4, v6) = (IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(echo_payload(v4, 65507).unwrap().len(), 65507);
        assert_eq!(echo_payload(v4, 65508).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(echo_payload(v6, 65527).unwrap().len(), 65527);
        assert_eq!(echo_payload(v6, 65528).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert!(echo_payload(v4, 0).unwrap().is_empty());
    }

    #[test]
    fn echo_replies_match_by_type_id_sequence_and_payload() {
        let from = IpAddr::V6("fd00:77::1".parse().unwrap());
        let echo = etherparse::IcmpEchoHeader { id: 0x1234, seq: 7 };
        let payload = b"abc";
        // Type, code, checksum (not checked here: the kernel did), id, sequence, payload.
        let reply = [129, 0, 0xa5, 0xa5, 0x12, 0x34, 0, 7, b'a', b'b', b'c'];
        assert!(is_echo_reply(from, &reply, echo, payload));
        let mut request = reply;
        request[0] = 128;
        assert!(!is_echo_reply(from, &request, echo, payload), "our own request is no reply");
        assert!(!is_echo_reply(from, &reply, etherparse::IcmpEchoHeader { seq: 8, ..echo }, payload));
        assert!(!is_echo_reply(from, &reply, echo, b"abd"));
        assert!(!is_echo_reply(from, &reply[..6], echo, payload), "truncated");

        // IPv4: the raw socket's datagram starts with the IP header.
        let packet = etherparse::PacketBuilder::ipv4([10, 77, 0, 1], [10, 77, 0, 2], 64)
            .icmpv4(etherparse::Icmpv4Type::EchoReply(echo));
        let mut datagram = Vec::new();
        packet.write(&mut datagram, payload).unwrap();
        assert!(is_echo_reply(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)), &datagram, echo, payload));
        assert!(!is_echo_reply(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3)), &datagram, echo, payload), "other source");
    }
}
