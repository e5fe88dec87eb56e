//! AF_XDP backend against a real kernel peer, in throwaway network namespaces.
//!
//! Needs root and `ip`; without them each test says why it skips, except
//! under `CI=true`, where it fails. Run serially: `cargo test -p bypass-io --release --
//! --test-threads=1` (each test has its own namespaces, but the machine has two cores).

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_device::Device;
use bypass_io::xdp::{XdpConfig, XdpDevice, XdpError, XdpMode};
use bypass_lab::testlab::{Lab, LabConfig, lab_available, ping};

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn config(lab: &Lab, mode: XdpMode) -> XdpConfig {
    XdpConfig { mode, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip) }
}

/// Open the device inside the lab's bypass namespace.
fn open(lab: &Lab, config: XdpConfig) -> Result<XdpDevice, XdpError> {
    lab.in_bypass(|| XdpDevice::open(config))
}

/// Return whether `ip -d link show` lists an XDP program on the bypass interface.
fn xdp_attached(lab: &Lab) -> bool {
    let out = lab.ip_bypass(&["-d", "link", "show", "dev", &lab.bypass_if]).expect("ip link show");
    out.contains("prog/xdp")
}

/// Kill and reap a child process when the test ends, however it ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Frames, built by hand
// ---------------------------------------------------------------------------------------------

/// Internet checksum (RFC 1071) of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Return the ARP request's sender (MAC, IPv4) if `frame` asks who has `ip`.
fn arp_request_for(frame: &[u8], ip: Ipv4Addr) -> Option<([u8; 6], [u8; 4])> {
    let is_request = frame.len() >= 42 && frame[12..14] == [0x08, 0x06] && frame[20..22] == [0, 1];
    (is_request && frame[38..42] == ip.octets())
        .then(|| (frame[22..28].try_into().unwrap(), frame[28..32].try_into().unwrap()))
}

/// Build the ARP reply "`ip` is at `mac`" to a requester.
fn arp_reply(mac: [u8; 6], ip: Ipv4Addr, to_mac: [u8; 6], to_ip: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&to_mac);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06]); // EtherType ARP
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 2]); // Ethernet/IPv4, reply
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&to_mac);
    f.extend_from_slice(&to_ip);
    f
}

/// Return whether `frame` is an ICMP echo request to `ip`.
fn is_echo_request_to(frame: &[u8], ip: Ipv4Addr) -> bool {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[23] != 1 || frame[30..34] != ip.octets() {
        return false;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    frame.get(14 + ihl) == Some(&8)
}

/// Turn an ICMP echo request into its reply, from `mac`.
fn echo_reply(request: &[u8], mac: [u8; 6]) -> Vec<u8> {
    let mut f = request.to_vec();
    f.copy_within(6..12, 0);
    f[6..12].copy_from_slice(&mac);
    let (src, dst): ([u8; 4], [u8; 4]) = (f[26..30].try_into().unwrap(), f[30..34].try_into().unwrap());
    f[26..30].copy_from_slice(&dst); // swapping the addresses leaves the IP checksum valid
    f[30..34].copy_from_slice(&src);
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let icmp = &mut f[14 + ihl..14 + total];
    icmp[0] = 0; // echo reply
    icmp[2..4].fill(0);
    let sum = checksum(icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    f
}

/// Build an Ethernet/IPv4 frame carrying `body` as protocol `proto`, with the IPv4 checksum.
fn ipv4_frame(macs: ([u8; 6], [u8; 6]), src: Ipv4Addr, dst: Ipv4Addr, proto: u8, body: &[u8]) -> Vec<u8> {
    let (src_mac, dst_mac) = macs;
    let mut f = Vec::with_capacity(34 + body.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = u16::try_from(20 + body.len()).expect("an IPv4 packet holds at most 65535 bytes");
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]); // id, DF, TTL 64, checksum 0 for now
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    let sum = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// Return the UDP checksum of `udp` (header with its checksum field, and payload) between
/// `src` and `dst` (RFC 768): 0 when the field holds the right sum.
fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, udp: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(12 + udp.len());
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(udp);
    checksum(&pseudo)
}

/// Build an Ethernet/IPv4/UDP frame with both checksums.
fn udp_frame(src: ([u8; 6], Ipv4Addr, u16), dst: ([u8; 6], Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let mut udp = Vec::with_capacity(8 + payload.len());
    udp.extend_from_slice(&src.2.to_be_bytes());
    udp.extend_from_slice(&dst.2.to_be_bytes());
    udp.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let sum = match udp_checksum(src.1, dst.1, &udp) {
        0 => 0xffff, // a computed 0 is sent as all ones (RFC 768)
        sum => sum,
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    ipv4_frame((src.0, dst.0), src.1, dst.1, 17, &udp)
}

/// Return (source address, source port, payload) if `frame` is an IPv4 UDP datagram to
/// `dst` whose lengths and checksums are right.
fn udp_datagram_to(frame: &[u8], dst: (Ipv4Addr, u16)) -> Option<(Ipv4Addr, u16, &[u8])> {
    if frame.len() < 42 || frame[12..14] != [0x08, 0x00] || frame[23] != 17 || frame[14] != 0x45 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(&frame[26..30]).unwrap());
    if frame[30..34] != dst.0.octets() || frame[36..38] != dst.1.to_be_bytes() || 14 + total != frame.len() {
        return None;
    }
    assert_eq!(checksum(&frame[14..34]), 0, "IPv4 header checksum of a {}-byte frame", frame.len());
    let udp = &frame[34..];
    assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len(), "UDP length");
    if udp[6..8] != [0, 0] {
        assert_eq!(udp_checksum(src, dst.0, udp), 0, "UDP checksum of a {}-byte datagram", udp.len());
    }
    Some((src, u16::from_be_bytes([udp[0], udp[1]]), &udp[8..]))
}

/// Build an ICMP echo request (identifier `id`, sequence `seq`) carrying `payload`.
fn echo_request(macs: ([u8; 6], [u8; 6]), src: Ipv4Addr, dst: Ipv4Addr, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(payload);
    let sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    ipv4_frame(macs, src, dst, 1, &icmp)
}

/// Return the payload if `frame` is an ICMP echo reply with identifier `id` and sequence
/// `seq` whose checksums are right.
fn echo_reply_payload(frame: &[u8], id: u16, seq: u16) -> Option<&[u8]> {
    if frame.len() < 42 || frame[12..14] != [0x08, 0x00] || frame[23] != 1 || frame[14] != 0x45 {
        return None;
    }
    let icmp = &frame[34..];
    if icmp[0] != 0 || icmp[4..6] != id.to_be_bytes() || icmp[6..8] != seq.to_be_bytes() {
        return None;
    }
    assert_eq!(14 + usize::from(u16::from_be_bytes([frame[16], frame[17]])), frame.len(), "IPv4 total length");
    assert_eq!(checksum(&frame[14..34]), 0, "IPv4 header checksum");
    assert_eq!(checksum(icmp), 0, "ICMP checksum of a {}-byte echo reply", icmp.len());
    Some(&icmp[8..])
}

/// Return the solicitation's source (MAC, IPv6) if `frame` is a Neighbour Solicitation for
/// `target` (RFC 4861 4.3) from an address that is not unspecified.
fn neighbour_solicitation_for(frame: &[u8], target: Ipv6Addr) -> Option<([u8; 6], Ipv6Addr)> {
    let is_ns = frame.len() >= 78 && frame[12..14] == [0x86, 0xdd] && frame[20] == 58 && frame[54] == 135;
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(frame.get(22..38)?).unwrap());
    (is_ns && frame[62..78] == target.octets() && !src.is_unspecified())
        .then(|| (frame[6..12].try_into().unwrap(), src))
}

/// Build the solicited Neighbour Advertisement "`ip` is at `mac`" (RFC 4861 4.4) to a
/// solicitor.
fn neighbour_advertisement(mac: [u8; 6], ip: Ipv6Addr, to_mac: [u8; 6], to_ip: Ipv6Addr) -> Vec<u8> {
    let mut icmp = vec![136, 0, 0, 0, 0x60, 0, 0, 0]; // solicited and override flags
    icmp.extend_from_slice(&ip.octets());
    icmp.extend_from_slice(&[2, 1]); // target link-layer address option, 8 bytes
    icmp.extend_from_slice(&mac);
    let mut pseudo = Vec::new(); // RFC 8200 8.1
    pseudo.extend_from_slice(&ip.octets());
    pseudo.extend_from_slice(&to_ip.octets());
    pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&icmp);
    let sum = checksum(&pseudo);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::with_capacity(54 + icmp.len());
    f.extend_from_slice(&to_mac);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]); // ICMPv6; NDP needs hop limit 255
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&to_ip.octets());
    f.extend_from_slice(&icmp);
    f
}

/// Return the UDP payload if `frame` is an IPv6 UDP datagram (no extension headers) to `dst`.
fn udp6_payload_to(frame: &[u8], dst: (Ipv6Addr, u16)) -> Option<&[u8]> {
    let is_udp = frame.len() >= 62 && frame[12..14] == [0x86, 0xdd] && frame[20] == 17;
    (is_udp && frame[38..54] == dst.0.octets() && frame[56..58] == dst.1.to_be_bytes()).then(|| &frame[62..])
}

/// Return the IPv6 destination of `frame`, if it is IPv6.
fn ipv6_destination(frame: &[u8]) -> Option<Ipv6Addr> {
    (frame.len() >= 54 && frame[12..14] == [0x86, 0xdd])
        .then(|| Ipv6Addr::from(<[u8; 16]>::try_from(&frame[38..54]).unwrap()))
}

/// Queue one frame and flush.
fn send(dev: &mut XdpDevice, frame: &[u8]) {
    let queued = dev
        .send(&mut |buf| {
            buf[..frame.len()].copy_from_slice(frame);
            frame.len()
        })
        .expect("send");
    assert!(queued, "no transmit buffer free");
    dev.flush().expect("flush");
}

/// Receive whatever is waiting on `dev` (waiting up to 10 ms for something).
fn drain(dev: &mut XdpDevice) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    dev.wait(Some(Duration::from_millis(10))).expect("wait");
    while dev.recv(64, &mut |f| frames.push(f.to_vec())).expect("recv") > 0 {}
    frames
}

/// Let the peer kernel ping our address three times, 200 ms apart, while answering ARP and
/// echo requests by hand on `devs`. Return how many echo requests arrived; assert that every
/// ping got its reply.
fn ping_exchange(lab: &Lab, devs: &mut [XdpDevice]) -> usize {
    let mut echo_requests = 0;
    let replies = std::thread::scope(|s| {
        let pinger = s.spawn(|| {
            lab.in_peer(|| {
                (0..3)
                    .map(|i| {
                        if i > 0 {
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        ping(lab.bypass_ip, Duration::from_secs(2))
                    })
                    .collect::<Vec<_>>()
            })
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        while !pinger.is_finished() {
            assert!(Instant::now() < deadline, "ping did not finish");
            for dev in devs.iter_mut() {
                for frame in drain(dev) {
                    if let Some((mac, ip)) = arp_request_for(&frame, lab.bypass_ip) {
                        send(dev, &arp_reply(lab.bypass_mac, lab.bypass_ip, mac, ip));
                    } else if is_echo_request_to(&frame, lab.bypass_ip) {
                        echo_requests += 1;
                        send(dev, &echo_reply(&frame, lab.bypass_mac));
                    }
                }
            }
        }
        pinger.join().unwrap()
    });
    for (i, reply) in replies.iter().enumerate() {
        assert!(reply.is_ok(), "ping {i} got no reply: {reply:?}");
    }
    echo_requests
}

// ---------------------------------------------------------------------------------------------
// 1. Opening in each mode
// ---------------------------------------------------------------------------------------------

#[test]
fn opens_in_driver_generic_and_auto_mode() {
    if !lab_available("opens_in_driver_generic_and_auto_mode") {
        return;
    }
    init_log();
    let lab = Lab::create("modes").unwrap();
    for (mode, expect) in [
        (XdpMode::Driver, "driver (native) XDP"),
        (XdpMode::Generic, "generic (skb) XDP"),
        (XdpMode::Auto, "driver (native) XDP"),
    ] {
        // The previous mode's device is gone, and its program with it.
        assert!(!xdp_attached(&lab), "{mode:?}: the previous mode's program outlived its device");
        let dev = open(&lab, config(&lab, mode)).unwrap_or_else(|e| panic!("open in {mode:?} mode: {e}"));
        println!("{mode:?}: {} (fill ring needs wakeup: {})", dev.info().mode, dev.socket().fill_needs_wakeup());
        assert!(dev.info().mode.contains(expect), "{mode:?}: {}", dev.info().mode);
        assert!(dev.info().mode.contains("copy mode"), "veth offers copy mode only: {}", dev.info().mode);
        assert_eq!(dev.info().mac, lab.bypass_mac);
        assert_eq!(dev.info().mtu, 1500);
        assert!(!dev.info().mode.contains("multi-buffer"), "1514-byte frames fit one UMEM frame: {}", dev.info().mode);
        assert!(dev.program().multi_buffer(), "the program is multi-buffer aware at every MTU");
        assert_eq!(dev.rx_frames(), Some(4096));
        assert_eq!(dev.info().name, lab.bypass_if);
        assert!(dev.raw_fd().is_some());
        assert!(xdp_attached(&lab));
    }
}

#[test]
fn a_second_attach_says_who_to_ask() {
    if !lab_available("a_second_attach_says_who_to_ask") {
        return;
    }
    init_log();
    let lab = Lab::create("busy").unwrap();
    let _dev = open(&lab, config(&lab, XdpMode::Auto)).unwrap();
    let err = open(&lab, config(&lab, XdpMode::Auto)).err().expect("a second attach must fail");
    println!("{err}");
    assert!(matches!(err, XdpError::AlreadyAttached { .. }), "{err:?}");
    assert!(err.to_string().contains("ip link set dev bx0 xdp off"), "{err}");
}

#[test]
fn missing_interface_is_named() {
    if !lab_available("missing_interface_is_named") {
        return;
    }
    let lab = Lab::create("noif").unwrap();
    let err = open(&lab, XdpConfig::new("nosuch0", lab.bypass_ip)).err().expect("must fail");
    assert!(matches!(err, XdpError::NoSuchInterface { .. }), "{err:?}");
    assert!(err.to_string().contains("nosuch0"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 2. RX: the peer's ARP and ping reach the socket (and our replies reach the peer)
// ---------------------------------------------------------------------------------------------

#[test]
fn peer_ping_reaches_the_socket_driver_mode() {
    if !lab_available("peer_ping_reaches_the_socket_driver_mode") {
        return;
    }
    init_log();
    let lab = Lab::create("pingdrv").unwrap();
    let dev = open(&lab, config(&lab, XdpMode::Driver)).unwrap();
    let requests = ping_exchange(&lab, &mut [dev]);
    assert_eq!(requests, 3);
}

#[test]
fn peer_ping_reaches_the_socket_generic_mode() {
    if !lab_available("peer_ping_reaches_the_socket_generic_mode") {
        return;
    }
    init_log();
    let lab = Lab::create("pinggen").unwrap();
    let dev = open(&lab, config(&lab, XdpMode::Generic)).unwrap();
    let requests = ping_exchange(&lab, &mut [dev]);
    assert_eq!(requests, 3);
}

#[test]
fn peer_ping_reaches_the_socket_busy_polling() {
    if !lab_available("peer_ping_reaches_the_socket_busy_polling") {
        return;
    }
    init_log();
    let lab = Lab::create("pingbusy").unwrap();
    let dev = open(&lab, XdpConfig { busy_poll: true, ..config(&lab, XdpMode::Driver) }).unwrap();
    println!("{}", dev.info().mode);
    assert!(dev.info().mode.ends_with("busy polling"), "{}", dev.info().mode);
    assert_eq!(ping_exchange(&lab, &mut [dev]), 3);
}

// ---------------------------------------------------------------------------------------------
// 3. TX: frames we send reach a kernel UDP socket on the peer
// ---------------------------------------------------------------------------------------------

#[test]
fn udp_frames_sent_reach_a_peer_socket() {
    if !lab_available("udp_frames_sent_reach_a_peer_socket") {
        return;
    }
    init_log();
    let lab = Lab::create("tx").unwrap();
    let socket = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 5000)).expect("bind UDP in the peer namespace"));
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut dev = open(&lab, config(&lab, XdpMode::Auto)).unwrap();

    // More frames than one copy-mode sendto sends (32), all flushed at once.
    const COUNT: u32 = 200;
    for seq in 0..COUNT {
        let payload = format!("bypass {seq}");
        let frame =
            udp_frame((lab.bypass_mac, lab.bypass_ip, 4000), (lab.peer_mac, lab.peer_ip, 5000), payload.as_bytes());
        let queued = dev
            .send(&mut |buf| {
                buf[..frame.len()].copy_from_slice(&frame);
                frame.len()
            })
            .unwrap();
        if !queued {
            dev.flush().unwrap();
            panic!("no transmit buffer free after {seq} frames");
        }
    }
    dev.flush().unwrap();

    let mut buf = [0u8; 2048];
    for seq in 0..COUNT {
        let (n, from) = socket.recv_from(&mut buf).unwrap_or_else(|e| panic!("datagram {seq} did not arrive: {e}"));
        assert_eq!(from, (lab.bypass_ip, 4000).into());
        assert_eq!(&buf[..n], format!("bypass {seq}").as_bytes());
    }
    // Sent frames come back as free buffers: keep sending well past the frame count.
    let frame = udp_frame((lab.bypass_mac, lab.bypass_ip, 4000), (lab.peer_mac, lab.peer_ip, 5001), b"x");
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..5000 {
        let mut fill = |buf: &mut [u8]| {
            buf[..frame.len()].copy_from_slice(&frame);
            frame.len()
        };
        while !dev.send(&mut fill).unwrap() {
            dev.flush().unwrap();
            assert!(Instant::now() < deadline, "sent frames never came back as free buffers");
        }
    }
    dev.flush().unwrap();
    let stats = dev.statistics().unwrap();
    assert_eq!(stats.tx_invalid_descs, 0, "{stats:?}");
}

// ---------------------------------------------------------------------------------------------
// 4. Traffic for other addresses still reaches the kernel
// ---------------------------------------------------------------------------------------------

fn kernel_address_still_answers(mode: XdpMode, tag: &str) {
    init_log();
    let lab = Lab::create(tag).unwrap();
    // A kernel address beside the stack's, on the same interface.
    let kernel_ip = Ipv4Addr::new(10, 77, 0, 3);
    lab.ip_bypass(&["addr", "add", &format!("{kernel_ip}/24"), "dev", &lab.bypass_if]).unwrap();
    let mut dev = open(&lab, config(&lab, mode)).unwrap();
    assert!(xdp_attached(&lab));
    for _ in 0..2 {
        let reply = lab.in_peer(|| ping(kernel_ip, Duration::from_secs(2)));
        assert!(reply.is_ok(), "the kernel address must stay reachable: {reply:?}");
    }
    for frame in drain(&mut dev) {
        assert!(arp_request_for(&frame, kernel_ip).is_none(), "ARP for the kernel's address was redirected");
        assert!(!is_echo_request_to(&frame, kernel_ip), "ping to the kernel's address was redirected");
    }
}

#[test]
fn kernel_address_still_answers_driver_mode() {
    if lab_available("kernel_address_still_answers_driver_mode") {
        kernel_address_still_answers(XdpMode::Driver, "passdrv");
    }
}

#[test]
fn kernel_address_still_answers_generic_mode() {
    if lab_available("kernel_address_still_answers_generic_mode") {
        kernel_address_still_answers(XdpMode::Generic, "passgen");
    }
}

/// Enable IPv6 on `iface` in the calling thread's namespace.
fn enable_ipv6(iface: &str) {
    let path = format!("/proc/sys/net/ipv6/conf/{iface}/disable_ipv6");
    std::fs::write(&path, "0").unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// Dual stack, end to end: the peer kernel sends IPv6 UDP to our address and to a kernel
/// address on the bypass interface. It resolves ours with a Neighbour Solicitation that must
/// reach the socket (we answer it by hand), and its datagram must follow; the solicitation and
/// datagram for the kernel's address must pass to the kernel, whose socket receives it.
fn ipv6_reaches_the_socket_and_the_rest_passes(mode: XdpMode, tag: &str) {
    init_log();
    let lab = Lab::create(tag).unwrap();
    let ours: Ipv6Addr = "fd00:77::2".parse().unwrap();
    let kernel6: Ipv6Addr = "fd00:77::3".parse().unwrap();
    let peer6: Ipv6Addr = "fd00:77::1".parse().unwrap();
    // The lab disables IPv6 in both namespaces; turn it on for the two veth ends only. All of
    // this goes with the namespaces when `lab` drops, however the test ends.
    lab.in_peer(|| enable_ipv6(&lab.peer_if));
    lab.ip_peer(&["-6", "addr", "add", &format!("{peer6}/64"), "dev", &lab.peer_if, "nodad"]).unwrap();
    lab.in_bypass(|| enable_ipv6(&lab.bypass_if));
    lab.ip_bypass(&["-6", "addr", "add", &format!("{kernel6}/64"), "dev", &lab.bypass_if, "nodad"]).unwrap();
    let config = XdpConfig { mode, ..XdpConfig::new(&lab.bypass_if, lab.bypass_ip).with_addr(ours) };
    let mut dev = open(&lab, config).unwrap();
    assert_eq!(dev.program().addrs(), [IpAddr::V4(lab.bypass_ip), IpAddr::V6(ours)]);
    let kernel_socket = lab.in_bypass(|| UdpSocket::bind((kernel6, 5000)).expect("bind UDP to the kernel's address"));
    kernel_socket.set_nonblocking(true).unwrap();
    let peer_socket = lab.in_peer(|| UdpSocket::bind((peer6, 0)).expect("bind UDP in the peer namespace"));

    let (mut solicited, mut ours_arrived, mut kernel_arrived) = (false, false, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut next_send = Instant::now();
    while !(ours_arrived && kernel_arrived) {
        assert!(
            Instant::now() < deadline,
            "solicited: {solicited}, datagram to ours: {ours_arrived}, datagram to the kernel's: {kernel_arrived}"
        );
        if Instant::now() >= next_send {
            // Again every 200 ms: the kernel keeps only a few datagrams while it resolves.
            peer_socket.send_to(b"to the stack", (ours, 5000)).expect("send to our address");
            peer_socket.send_to(b"to the kernel", (kernel6, 5000)).expect("send to the kernel's address");
            next_send = Instant::now() + Duration::from_millis(200);
        }
        for frame in drain(&mut dev) {
            if let Some((mac, ip)) = neighbour_solicitation_for(&frame, ours) {
                solicited = true;
                send(&mut dev, &neighbour_advertisement(lab.bypass_mac, ours, mac, ip));
            } else if let Some(payload) = udp6_payload_to(&frame, (ours, 5000)) {
                assert_eq!(payload, b"to the stack");
                ours_arrived = true;
            }
            assert!(neighbour_solicitation_for(&frame, kernel6).is_none(), "NS for the kernel's address redirected");
            assert_ne!(ipv6_destination(&frame), Some(kernel6), "IPv6 to the kernel's address redirected");
        }
        let mut buf = [0u8; 64];
        match kernel_socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                assert_eq!((&buf[..n], from.ip()), (&b"to the kernel"[..], IpAddr::V6(peer6)));
                kernel_arrived = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("kernel socket: {e}"),
        }
    }
    assert!(solicited, "the datagram to our address came without a solicitation reaching us");
    // And IPv4 still works beside it.
    assert_eq!(ping_exchange(&lab, &mut [dev]), 3);
}

#[test]
fn ipv6_reaches_the_socket_and_the_rest_passes_driver_mode() {
    if lab_available("ipv6_reaches_the_socket_and_the_rest_passes_driver_mode") {
        ipv6_reaches_the_socket_and_the_rest_passes(XdpMode::Driver, "v6drv");
    }
}

#[test]
fn ipv6_reaches_the_socket_and_the_rest_passes_generic_mode() {
    if lab_available("ipv6_reaches_the_socket_and_the_rest_passes_generic_mode") {
        ipv6_reaches_the_socket_and_the_rest_passes(XdpMode::Generic, "v6gen");
    }
}

#[test]
fn too_many_addresses_are_refused_before_attaching() {
    if !lab_available("too_many_addresses_are_refused_before_attaching") {
        return;
    }
    let lab = Lab::create("toomany").unwrap();
    let mut nine = config(&lab, XdpMode::Auto);
    nine.addrs.extend((1..=8).map(|i| IpAddr::V4(Ipv4Addr::new(10, 77, 0, 100 + i))));
    let err = open(&lab, nine).err().expect("nine IPv4 addresses must be refused");
    println!("{err}");
    assert!(matches!(err, XdpError::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("at most 8 per family"), "{err}");
    assert!(!xdp_attached(&lab));
    let err = open(&lab, XdpConfig { addrs: vec![], ..config(&lab, XdpMode::Auto) }).err().expect("no address");
    assert!(matches!(err, XdpError::InvalidConfig(_)), "{err:?}");
}

#[test]
fn large_mtus_attach_in_both_modes() {
    if !lab_available("large_mtus_attach_in_both_modes") {
        return;
    }
    init_log();
    // The multi-buffer program lifts veth's driver-mode limit on the peer's MTU from 3506
    // bytes to 73138 (veth_xdp_set), beyond veth's largest MTU, 65535.
    let lab = Lab::with_config(LabConfig { mtu: 65535, ..LabConfig::new("mtu") }).unwrap();
    for (mode, expect) in [(XdpMode::Driver, "driver (native) XDP"), (XdpMode::Generic, "generic (skb) XDP")] {
        assert!(!xdp_attached(&lab), "{mode:?}: the previous mode's program outlived its device");
        let dev = open(&lab, config(&lab, mode)).unwrap_or_else(|e| panic!("open in {mode:?} mode at MTU 65535: {e}"));
        println!("{mode:?}: {}", dev.info().mode);
        assert!(dev.info().mode.contains(expect) && dev.info().mode.contains("multi-buffer"), "{}", dev.info().mode);
        assert!(dev.program().multi_buffer());
        assert!(dev.socket().multi_buffer());
        assert_eq!((dev.info().mtu, dev.info().max_frame()), (65535, 65549));
        // A 65549-byte packet takes 18 frames of 3840 received bytes: 4096 frames hold 227.
        assert_eq!(dev.rx_frames(), Some(4096 / 18));
    }
    assert!(!xdp_attached(&lab), "the program outlived its last device");

    // 2048-byte frames would need 33 frames per packet, beyond the kernel's 18.
    let err = open(&lab, XdpConfig { frame_size: 2048, ..config(&lab, XdpMode::Auto) })
        .err()
        .expect("2048-byte frames cannot carry MTU 65535");
    println!("{err}");
    assert!(matches!(err, XdpError::MtuTooLargeForFrame { mtu: 65535, max_mtu: 36850, .. }), "{err:?}");
    assert!(err.to_string().contains("ip link set dev bx0 mtu 36850"), "{err}");
    assert!(!xdp_attached(&lab), "a refused MTU must not leave the program attached");
    // So would a TX ring too small for one packet.
    let err = open(&lab, XdpConfig { tx_size: 16, ..config(&lab, XdpMode::Auto) }).err().expect("16 TX slots");
    assert!(matches!(err, XdpError::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("tx_size is 16, fewer than the 17 frames"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 5. The program goes away with the device, and with a SIGKILLed process
// ---------------------------------------------------------------------------------------------

#[test]
fn program_detaches_when_the_device_is_dropped() {
    if !lab_available("program_detaches_when_the_device_is_dropped") {
        return;
    }
    init_log();
    let lab = Lab::create("drop").unwrap();
    for mode in [XdpMode::Driver, XdpMode::Generic] {
        let dev = open(&lab, config(&lab, mode)).unwrap();
        assert!(xdp_attached(&lab));
        drop(dev);
        assert!(!xdp_attached(&lab), "{mode:?}: program still attached after drop");
    }
    let _again = open(&lab, config(&lab, XdpMode::Auto)).expect("attach again at once");
}

/// A child process forked without exec, as another thread's `Command::spawn` is between its
/// fork and its exec: it holds copies of every descriptor, the device's link among them.
/// Killed and reaped when dropped.
struct ForkedChild(libc::pid_t);

impl ForkedChild {
    fn fork() -> ForkedChild {
        // SAFETY: the child calls only async-signal-safe functions (`pause`, `_exit`), as a
        // child of a multithreaded process must, and touches no memory of the parent's.
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            0 => unsafe {
                libc::pause();
                libc::_exit(0)
            },
            pid => ForkedChild(pid),
        }
    }
}

impl Drop for ForkedChild {
    fn drop(&mut self) {
        // SAFETY: `self.0` is our own unreaped child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

#[test]
fn program_detaches_at_drop_while_a_forked_child_holds_its_link() {
    if !lab_available("program_detaches_at_drop_while_a_forked_child_holds_its_link") {
        return;
    }
    init_log();
    let lab = Lab::create("forkd").unwrap();
    let dev = open(&lab, config(&lab, XdpMode::Auto)).unwrap();
    let child = ForkedChild::fork();
    drop(dev);
    // At once, not within a moment: closing our copy of the link alone would leave the
    // program attached until the child exits.
    assert!(!xdp_attached(&lab), "the program outlived its device while a forked child held the link");
    // The socket is another matter: the child's copy keeps it bound to its queue, which no
    // call can undo, so a new device finds the queue busy (after a second of retries) until
    // the child execs or exits, and says so.
    let err = open(&lab, config(&lab, XdpMode::Auto)).err().expect("the child's copy of the socket holds queue 0");
    println!("{err}");
    assert!(matches!(err, XdpError::QueueBusy { queue: 0, .. }), "{err:?}");
    assert!(!xdp_attached(&lab), "a failed open left its program attached");
    drop(child);
    let _again = open(&lab, config(&lab, XdpMode::Auto)).expect("attach again once the child is gone");
}

/// Environment variable telling [`sigkill_child`] to attach and wait to be killed.
const CHILD_ENV: &str = "BYPASS_XDP_TEST_CHILD";

/// Not a test: the child process of `program_detaches_when_its_process_is_killed`, run in the
/// lab namespace by re-executing this test binary. It attaches, reports, and waits.
#[test]
#[ignore = "helper process for program_detaches_when_its_process_is_killed"]
fn sigkill_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (iface, ip) = spec.split_once(' ').expect("CHILD_ENV: IFACE IP");
    let dev =
        XdpDevice::open(XdpConfig::new(iface, ip.parse::<IpAddr>().unwrap())).unwrap_or_else(|e| panic!("child: {e}"));
    println!("ATTACHED {}", dev.info().mode);
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("the parent kills this process");
}

#[test]
fn program_detaches_when_its_process_is_killed() {
    if !lab_available("program_detaches_when_its_process_is_killed") {
        return;
    }
    init_log();
    let lab = Lab::create("kill").unwrap();
    let exe = std::env::current_exe().unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.bypass_ns])
        .arg(exe)
        .args(["sigkill_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{} {}", lab.bypass_if, lab.bypass_ip))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test sigkill_child ... " before the child's own output.
            if let Some(at) = line.find("ATTACHED") {
                let _ = tx.send(line[at..].to_string());
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("the child did not attach");
    println!("child: {line}");
    assert!(xdp_attached(&lab));

    child.0.kill().unwrap(); // SIGKILL: no destructor runs
    child.0.wait().unwrap();
    assert!(!xdp_attached(&lab), "program still attached after SIGKILL");
    let _again = open(&lab, config(&lab, XdpMode::Auto)).expect("attach again at once after SIGKILL");
}

// ---------------------------------------------------------------------------------------------
// 6. Two queues, one program
// ---------------------------------------------------------------------------------------------

#[test]
fn two_queues_share_one_program() {
    if !lab_available("two_queues_share_one_program") {
        return;
    }
    init_log();
    let lab = Lab::with_config(LabConfig { queues: 2, ..LabConfig::new("queues") }).unwrap();
    let mut devs = lab
        .in_bypass(|| XdpDevice::open_queues(config(&lab, XdpMode::Auto), &[0, 1]))
        .unwrap_or_else(|e| panic!("open queues 0 and 1: {e}"));
    assert_eq!(devs.len(), 2);
    for (i, dev) in devs.iter().enumerate() {
        println!("{}", dev.info().mode);
        assert_eq!(dev.queue(), i as u32);
        assert!(dev.info().mode.ends_with(&format!("queue {i}")), "{}", dev.info().mode);
    }
    assert!(Arc::ptr_eq(devs[0].program(), devs[1].program()));
    assert_eq!(devs[0].program().slots(), 2);
    // Traffic reaches whichever queue the peer's flow lands on.
    assert_eq!(ping_exchange(&lab, &mut devs), 3);

    let err = lab.in_bypass(|| XdpDevice::open_queues(config(&lab, XdpMode::Auto), &[0, 0])).err().unwrap();
    assert!(matches!(err, XdpError::InvalidConfig(_)), "{err:?}");
}

#[test]
fn a_missing_queue_is_reported() {
    if !lab_available("a_missing_queue_is_reported") {
        return;
    }
    init_log();
    let lab = Lab::create("noqueue").unwrap();
    let err = open(&lab, XdpConfig { queue: 5, ..config(&lab, XdpMode::Auto) }).err().expect("queue 5 must fail");
    println!("{err}");
    assert!(matches!(err, XdpError::NoSuchQueue { queue: 5, .. }), "{err:?}");
    assert!(!xdp_attached(&lab), "a failed open must not leave the program attached");
}

// ---------------------------------------------------------------------------------------------
// 7. The floor: raw frames bounced between two AF_XDP sockets
// ---------------------------------------------------------------------------------------------

#[test]
fn raw_frames_bounce_between_two_xdp_sockets() {
    if !lab_available("raw_frames_bounce_between_two_xdp_sockets") {
        return;
    }
    init_log();
    let lab = Lab::create("floor").unwrap();
    let result = bypass_lab::floor::xdp_pingpong(&lab, 2000, 64, Duration::from_secs(10)).unwrap();
    assert!(result.rtts.len() >= 1990, "{} came back, {} lost", result.rtts.len(), result.lost);
    let mut sorted = result.rtts.clone();
    sorted.sort();
    println!("floor ({}): p50 {:?}, p99 {:?}", result.mode, sorted[sorted.len() / 2], sorted[sorted.len() * 99 / 100]);
    assert!(!xdp_attached(&lab), "both programs are gone afterwards");
    // And the peer kernel has its address back.
    lab.in_peer(|| ping(lab.peer_ip, Duration::from_secs(1))).expect("the peer answers ping");
}

/// A wait with no timeout ends when another thread wakes the device (`Device::waker`: the
/// eventfd polled beside the socket), at once when woken before it starts, and the wake is
/// used up by the wait that saw it.
#[test]
fn a_waker_ends_a_wait_from_another_thread() {
    if !lab_available("a_waker_ends_a_wait_from_another_thread") {
        return;
    }
    init_log();
    let lab = Lab::create("waker").unwrap();
    let mut dev = open(&lab, config(&lab, XdpMode::Auto)).expect("open");
    let waker = dev.waker().expect("AF_XDP devices can be woken");
    let remote = waker.clone();
    let wake_later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        remote.wake();
    });
    let start = std::time::Instant::now();
    dev.wait(None).unwrap();
    let waited = start.elapsed();
    wake_later.join().unwrap();
    assert!(waited >= Duration::from_millis(90) && waited < Duration::from_secs(5), "waited {waited:?}");

    waker.wake();
    let start = std::time::Instant::now();
    dev.wait(Some(Duration::from_secs(5))).unwrap();
    assert!(start.elapsed() < Duration::from_millis(500), "an earlier wake ends the next wait at once");
    let start = std::time::Instant::now();
    dev.wait(Some(Duration::from_millis(200))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(150), "the wake was used up: this wait runs to its timeout");
}

// ---------------------------------------------------------------------------------------------
// 8. Jumbo MTUs: packets larger than a UMEM frame (multi-buffer)
// ---------------------------------------------------------------------------------------------

/// Give the peer a permanent neighbour entry for our address, so that it sends to us without
/// asking ARP first.
fn peer_knows_us(lab: &Lab) {
    let mac = lab.bypass_mac.map(|b| format!("{b:02x}")).join(":");
    let ip = lab.bypass_ip.to_string();
    lab.ip_peer(&["neigh", "replace", &ip, "lladdr", &mac, "dev", &lab.peer_if, "nud", "permanent"]).unwrap();
}

/// Return `len` bytes that differ from their neighbours and from other seeds' bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Receive on `dev` until `want` picks a frame, for up to five seconds; return its pick.
fn receive_until<T>(dev: &mut XdpDevice, mut want: impl FnMut(&[u8]) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for frame in drain(dev) {
            if let Some(picked) = want(&frame) {
                return picked;
            }
        }
        assert!(Instant::now() < deadline, "the frame did not arrive; device counters {:?}", dev.device_counters());
    }
}

/// Return the device counter `name`.
fn counter(dev: &mut XdpDevice, name: &str) -> u64 {
    let counters = dev.device_counters();
    counters.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no counter {name}: {counters:?}")).1
}

/// The kernel peer's UDP datagrams, up to the largest the MTU carries, reach the device as
/// one frame with the right bytes, at MTU 9000 and at veth's largest, 65535 (18 frames).
fn jumbo_datagrams_arrive_whole(mode: XdpMode, tag: &str) {
    init_log();
    for mtu in [9000usize, 65535] {
        let lab = Lab::with_config(LabConfig { mtu: mtu as u32, ..LabConfig::new(tag) }).unwrap();
        peer_knows_us(&lab);
        let mut dev =
            open(&lab, config(&lab, mode)).unwrap_or_else(|e| panic!("open in {mode:?} mode at MTU {mtu}: {e}"));
        println!("MTU {mtu}: {}", dev.info().mode);
        assert!(dev.info().mode.contains("multi-buffer"), "{}", dev.info().mode);
        assert_eq!((dev.info().mtu, dev.info().max_frame()), (mtu, mtu + 14));
        let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0)).expect("bind UDP in the peer namespace"));
        // The largest datagram, one in a single frame, one in two.
        for (seed, len) in [(1, mtu - 28), (2, 1000), (3, 5000)] {
            let payload = pattern(len, seed);
            peer.send_to(&payload, (lab.bypass_ip, 5000)).expect("send from the peer");
            let (frame_len, from, got) = receive_until(&mut dev, |f| {
                udp_datagram_to(f, (lab.bypass_ip, 5000)).map(|(ip, _, p)| (f.len(), ip, p.to_vec()))
            });
            assert_eq!(from, lab.peer_ip);
            assert_eq!(frame_len, 42 + len);
            assert!(got == payload, "MTU {mtu}: the {len}-byte datagram arrived changed");
        }
        assert_eq!(counter(&mut dev, "rx_multi_buffer"), 2, "the 1000-byte datagram fits one frame");
        assert_eq!(counter(&mut dev, "rx_dropped_oversized"), 0);
        let stats = dev.statistics().unwrap();
        assert_eq!((stats.rx_dropped, stats.rx_invalid_descs), (0, 0), "{stats:?}");
    }
}

#[test]
fn jumbo_datagrams_arrive_whole_driver_mode() {
    if lab_available("jumbo_datagrams_arrive_whole_driver_mode") {
        jumbo_datagrams_arrive_whole(XdpMode::Driver, "jrxdrv");
    }
}

#[test]
fn jumbo_datagrams_arrive_whole_generic_mode() {
    if lab_available("jumbo_datagrams_arrive_whole_generic_mode") {
        jumbo_datagrams_arrive_whole(XdpMode::Generic, "jrxgen");
    }
}

/// Large frames we send (several send frames each) reach the kernel peer intact: UDP
/// datagrams its socket reads whole, and an echo request it answers with as large a reply,
/// which comes back to us whole.
fn jumbo_frames_we_send_reach_the_peer(mode: XdpMode, tag: &str) {
    init_log();
    for (mtu, sizes) in [(9000usize, [8000, 8972]), (65535, [60000, 65507])] {
        let lab = Lab::with_config(LabConfig { mtu: mtu as u32, ..LabConfig::new(tag) }).unwrap();
        peer_knows_us(&lab);
        let socket = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 5000)).expect("bind UDP in the peer namespace"));
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut dev =
            open(&lab, config(&lab, mode)).unwrap_or_else(|e| panic!("open in {mode:?} mode at MTU {mtu}: {e}"));
        let mut buf = vec![0u8; 65536];
        for (seed, len) in [(4, sizes[0]), (5, sizes[1])] {
            let payload = pattern(len, seed);
            send(
                &mut dev,
                &udp_frame((lab.bypass_mac, lab.bypass_ip, 4000), (lab.peer_mac, lab.peer_ip, 5000), &payload),
            );
            let (n, from) = socket.recv_from(&mut buf).unwrap_or_else(|e| panic!("MTU {mtu}: {len} bytes: {e}"));
            assert_eq!(from, (lab.bypass_ip, 4000).into());
            assert!(buf[..n] == payload[..], "MTU {mtu}: the {len}-byte datagram arrived as {n} other bytes");
        }
        let payload = pattern(mtu - 28, 6);
        let request = echo_request((lab.bypass_mac, lab.peer_mac), lab.bypass_ip, lab.peer_ip, 0x4242, 1, &payload);
        assert_eq!(request.len(), mtu + 14);
        send(&mut dev, &request);
        let reply = receive_until(&mut dev, |f| echo_reply_payload(f, 0x4242, 1).map(<[u8]>::to_vec));
        assert!(reply == payload, "MTU {mtu}: the echo reply came back changed");
        assert_eq!(counter(&mut dev, "tx_multi_buffer"), 3);
        assert_eq!(counter(&mut dev, "rx_multi_buffer"), 1);
        let stats = dev.statistics().unwrap();
        assert_eq!(stats.tx_invalid_descs, 0, "{stats:?}");
    }
}

#[test]
fn jumbo_frames_we_send_reach_the_peer_driver_mode() {
    if lab_available("jumbo_frames_we_send_reach_the_peer_driver_mode") {
        jumbo_frames_we_send_reach_the_peer(XdpMode::Driver, "jtxdrv");
    }
}

#[test]
fn jumbo_frames_we_send_reach_the_peer_generic_mode() {
    if lab_available("jumbo_frames_we_send_reach_the_peer_generic_mode") {
        jumbo_frames_we_send_reach_the_peer(XdpMode::Generic, "jtxgen");
    }
}

/// With fewer free send frames than the largest packet takes, `send` says so without calling
/// `fill`, and works again once the frames in flight come back.
#[test]
fn send_waits_for_the_frames_of_a_whole_packet() {
    if !lab_available("send_waits_for_the_frames_of_a_whole_packet") {
        return;
    }
    init_log();
    let lab = Lab::with_config(LabConfig { mtu: 65535, ..LabConfig::new("jwait") }).unwrap();
    let socket = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 5000)).expect("bind UDP in the peer namespace"));
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // 20 send frames: a packet may take 17 of 4096 bytes; and one span.
    let small = XdpConfig {
        frame_count: 84,
        fill_size: 64,
        rx_size: 64,
        tx_size: 64,
        completion_size: 64,
        tx_spans: 1,
        ..config(&lab, XdpMode::Auto)
    };
    let mut dev = open(&lab, small).unwrap();
    let payload = pattern(60000, 7); // 60042 bytes: 15 frames
    let frame = udp_frame((lab.bypass_mac, lab.bypass_ip, 4000), (lab.peer_mac, lab.peer_ip, 5000), &payload);
    let mut fill = |buf: &mut [u8]| {
        buf[..frame.len()].copy_from_slice(&frame);
        frame.len()
    };
    // The first packet is written in place in the span, the second into 15 send frames.
    assert!(dev.send(&mut fill).unwrap());
    assert!(dev.send(&mut fill).unwrap());
    let counter = |dev: &mut XdpDevice, name| dev.device_counters().into_iter().find(|c| c.0 == name).unwrap().1;
    assert_eq!(counter(&mut dev, "tx_in_place"), 1);
    assert_eq!(counter(&mut dev, "tx_multi_buffer"), 2);
    let mut called = false;
    let queued = dev.send(&mut |_| {
        called = true;
        0
    });
    assert!(!queued.unwrap() && !called, "5 free send frames cannot take a packet of up to 17");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        dev.flush().unwrap();
        if dev.send(&mut fill).unwrap() {
            break;
        }
        assert!(Instant::now() < deadline, "sent frames never came back");
    }
    dev.flush().unwrap();
    let mut buf = vec![0u8; 65536];
    for i in 0..3 {
        let (n, _) = socket.recv_from(&mut buf).unwrap_or_else(|e| panic!("datagram {i}: {e}"));
        assert!(buf[..n] == payload[..], "datagram {i} arrived changed");
    }
}

/// Received frames go back to the fill ring in the `recv` that consumed them: ten rounds of
/// 15 jumbo datagrams (45 frames each) pass through 64 receive frames without a drop, and a
/// budget of 1 takes one whole packet per call.
#[test]
fn received_frames_return_to_the_fill_ring() {
    if !lab_available("received_frames_return_to_the_fill_ring") {
        return;
    }
    init_log();
    let lab = Lab::with_config(LabConfig { mtu: 9000, ..LabConfig::new("jfill") }).unwrap();
    peer_knows_us(&lab);
    let small = XdpConfig {
        frame_count: 128,
        fill_size: 64,
        rx_size: 64,
        tx_size: 32,
        completion_size: 32,
        ..config(&lab, XdpMode::Auto)
    };
    let mut dev = open(&lab, small).unwrap();
    assert_eq!(dev.rx_frames(), Some(64 / 3), "a 9014-byte packet takes 3 frames");
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0)).expect("bind UDP in the peer namespace"));
    let payload = pattern(8972, 8);
    for round in 0..10 {
        for _ in 0..15 {
            peer.send_to(&payload, (lab.bypass_ip, 5000)).expect("send from the peer");
        }
        let (mut received, deadline) = (0, Instant::now() + Duration::from_secs(5));
        while received < 15 {
            assert!(Instant::now() < deadline, "round {round}: {received} of 15 arrived; {:?}", dev.device_counters());
            dev.wait(Some(Duration::from_millis(10))).unwrap();
            let mut lens = Vec::new();
            let n = dev.recv(1, &mut |f| lens.push(f.len())).unwrap();
            assert!(n <= 1 && lens.len() == n, "budget 1 took {n} packets");
            assert!(lens.iter().all(|&l| l == 9014), "round {round}: a packet arrived cut: {lens:?}");
            received += n;
        }
    }
    let stats = dev.statistics().unwrap();
    assert_eq!(
        (stats.rx_dropped, stats.rx_fill_ring_empty_descs, stats.rx_ring_full),
        (0, 0, 0),
        "frames must be back in the fill ring before the next round: {stats:?}"
    );
    assert_eq!(counter(&mut dev, "rx_multi_buffer"), 150);
}

// ---------------------------------------------------------------------------------------------
// 9. TX checksum offload (AF_XDP TX metadata)
// ---------------------------------------------------------------------------------------------

/// Return `frame` (Ethernet, IPv4, then TCP or UDP) with its TCP or UDP checksum field holding
/// only the pseudo-header sum, as a stack writes it for a device with TX checksum offload.
fn pseudo_header_sum_only(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let proto = f[23];
    let l4_len = usize::from(u16::from_be_bytes([f[16], f[17]])) - ihl;
    let mut pseudo = f[26..34].to_vec();
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(l4_len as u16).to_be_bytes());
    let sum = !checksum(&pseudo); // the folded sum itself, not its complement
    let at = 14 + ihl + if proto == 6 { 16 } else { 6 };
    f[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    f
}

/// Build a TCP SYN (no options) with its checksum.
fn tcp_syn(src: ([u8; 6], Ipv4Addr, u16), dst: ([u8; 6], Ipv4Addr, u16), seq: u32) -> Vec<u8> {
    let mut tcp = Vec::with_capacity(20);
    tcp.extend_from_slice(&src.2.to_be_bytes());
    tcp.extend_from_slice(&dst.2.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]); // no ack, SYN, window 65535
    let mut pseudo = src.1.octets().to_vec();
    pseudo.extend_from_slice(&dst.1.octets());
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    pseudo.extend_from_slice(&tcp);
    let sum = checksum(&pseudo);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    ipv4_frame((src.0, dst.0), src.1, dst.1, 6, &tcp)
}

/// Return whether `frame` is a SYN-ACK from `from` to `to` acknowledging `seq`.
fn is_syn_ack(frame: &[u8], from: (Ipv4Addr, u16), to: (Ipv4Addr, u16), seq: u32) -> bool {
    frame.len() >= 54
        && frame[12..14] == [0x08, 0x00]
        && frame[23] == 6
        && frame[14] == 0x45
        && frame[26..30] == from.0.octets()
        && frame[30..34] == to.0.octets()
        && frame[34..36] == from.1.to_be_bytes()
        && frame[36..38] == to.1.to_be_bytes()
        && frame[42..46] == seq.wrapping_add(1).to_be_bytes()
        && frame[47] & 0x12 == 0x12
}

/// With `tx_checksum_offload`, frames whose TCP or UDP checksum field holds only the
/// pseudo-header sum reach the kernel peer and are accepted (one frame, and several); without
/// it the peer drops them.
fn tx_checksum_offload(mode: XdpMode, tag: &str) {
    init_log();
    for mtu in [1500usize, 9000] {
        let lab = Lab::with_config(LabConfig { mtu: mtu as u32, ..LabConfig::new(tag) }).unwrap();
        peer_knows_us(&lab);
        let socket = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 5000)).expect("bind UDP in the peer namespace"));
        let listener =
            lab.in_peer(|| std::net::TcpListener::bind((lab.peer_ip, 6000)).expect("listen in the peer namespace"));
        let us = (lab.bypass_mac, lab.bypass_ip, 4000);
        let mut buf = vec![0u8; 65536];

        let mut plain = open(&lab, config(&lab, mode)).unwrap();
        assert!(!plain.info().checksums.tx_offload);
        send(&mut plain, &pseudo_header_sum_only(&udp_frame(us, (lab.peer_mac, lab.peer_ip, 5000), b"unsummed")));
        socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let dropped = socket.recv_from(&mut buf);
        assert!(dropped.is_err(), "MTU {mtu}: the peer took a datagram with a bad checksum: {dropped:?}");
        drop(plain);
        assert!(!xdp_attached(&lab), "MTU {mtu}: the first device's program outlived it");

        let offload = XdpConfig { tx_checksum_offload: true, ..config(&lab, mode) };
        let mut dev = open(&lab, offload).unwrap_or_else(|e| panic!("open with TX checksum offload: {e}"));
        println!("MTU {mtu}: {}", dev.info().mode);
        assert!(dev.info().checksums.tx_offload && dev.info().mode.contains("TX checksum offload"));
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for (seed, len) in [(9, 100), (10, mtu - 28)] {
            let payload = pattern(len, seed);
            send(&mut dev, &pseudo_header_sum_only(&udp_frame(us, (lab.peer_mac, lab.peer_ip, 5000), &payload)));
            let (n, _) = socket.recv_from(&mut buf).unwrap_or_else(|e| panic!("MTU {mtu}: {len} bytes: {e}"));
            assert!(buf[..n] == payload[..], "MTU {mtu}: the {len}-byte datagram arrived changed");
        }
        let syn = tcp_syn(us, (lab.peer_mac, lab.peer_ip, 6000), 7777);
        send(&mut dev, &pseudo_header_sum_only(&syn));
        receive_until(&mut dev, |f| is_syn_ack(f, (lab.peer_ip, 6000), (lab.bypass_ip, 4000), 7777).then_some(()));
        assert_eq!(counter(&mut dev, "tx_checksum_offloaded"), 3);
        assert_eq!(dev.statistics().unwrap().tx_invalid_descs, 0);
        drop(listener);
    }
}

#[test]
fn tx_checksum_offload_driver_mode() {
    if lab_available("tx_checksum_offload_driver_mode") {
        tx_checksum_offload(XdpMode::Driver, "csumdrv");
    }
}

#[test]
fn tx_checksum_offload_generic_mode() {
    if lab_available("tx_checksum_offload_generic_mode") {
        tx_checksum_offload(XdpMode::Generic, "csumgen");
    }
}

// ---------------------------------------------------------------------------------------------
// 9. The SYN lane: bare SYNs on a socket of their own, sharing the UMEM
// ---------------------------------------------------------------------------------------------

/// Return whether `frame` is an IPv4 TCP segment to `dst` with SYN set and ACK clear.
fn is_bare_syn_to(frame: &[u8], dst: (Ipv4Addr, u16)) -> bool {
    frame.len() >= 54
        && frame[12..14] == [0x08, 0x00]
        && frame[23] == 6
        && frame[30..34] == dst.0.octets()
        && frame[36..38] == dst.1.to_be_bytes()
        && frame[47] & 0x12 == 0x02
}

/// With a SYN lane, a kernel client's SYNs reach the device through the lane (counted in
/// `syn_lane`) and every other frame through the queue's own ring; a device asleep in
/// `wait` wakes for a SYN in the lane; and a lane of the wrong size is refused.
#[test]
fn bare_syns_arrive_through_the_syn_lane() {
    if !lab_available("bare_syns_arrive_through_the_syn_lane") {
        return;
    }
    init_log();
    let lab = Lab::create("synlane").unwrap();
    for bad in [4, 100, 4096] {
        let config = XdpConfig { syn_lane: Some(bad), ..config(&lab, XdpMode::Driver) };
        let err = open(&lab, config).map(|_| ()).unwrap_err();
        assert!(matches!(err, XdpError::InvalidConfig(_)), "a lane of {bad}: {err}");
    }
    peer_knows_us(&lab);
    let mut dev = open(&lab, XdpConfig { syn_lane: Some(64), ..config(&lab, XdpMode::Driver) }).unwrap();
    assert!(dev.info().mode.contains("SYN lane"), "{}", dev.info().mode);
    let peer = lab.in_peer(|| UdpSocket::bind((lab.peer_ip, 0)).expect("bind UDP in the peer namespace"));

    // A datagram: the queue's own ring.
    peer.send_to(b"not a SYN", (lab.bypass_ip, 5000)).unwrap();
    let got = receive_until(&mut dev, |f| udp_datagram_to(f, (lab.bypass_ip, 5000)).map(|(_, _, p)| p.to_vec()));
    assert_eq!(got, b"not a SYN");
    assert_eq!(counter(&mut dev, "syn_lane"), 0);

    // A kernel client's SYN while the device sleeps: nobody answers, so its kernel sends it
    // again after a second; the first one ends the wait.
    let target = std::net::SocketAddr::new(IpAddr::V4(lab.bypass_ip), 7777);
    let (woke, connected) = std::thread::scope(|scope| {
        let client =
            scope.spawn(|| lab.in_peer(|| std::net::TcpStream::connect_timeout(&target, Duration::from_millis(1500))));
        let asleep = Instant::now();
        dev.wait(Some(Duration::from_secs(5))).unwrap();
        let woke = asleep.elapsed();
        receive_until(&mut dev, |f| is_bare_syn_to(f, (lab.bypass_ip, 7777)).then_some(()));
        (woke, client.join().unwrap())
    });
    assert!(woke < Duration::from_secs(2), "the SYN in the lane did not end the wait ({woke:?})");
    assert!(counter(&mut dev, "syn_lane") >= 1, "{:?}", dev.device_counters());
    assert_eq!(counter(&mut dev, "syn_lane_full"), 0);
    assert!(connected.is_err(), "nobody answered the SYN");
    let stats = dev.statistics().unwrap();
    assert_eq!((stats.rx_dropped, stats.rx_fill_ring_empty_descs), (0, 0), "{stats:?}");
}
