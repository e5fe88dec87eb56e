//! The virtual-time target ([`VirtualTarget`]).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use bypass_device::{DeviceInfo, ScriptedDevice};
use bypass_stack::{ConnectError, Interface, ListenError, ListenerId, SocketId};
use bypass_tcp::{Event, Instant, RecvError, SendError, State};
use etherparse::{ArpOperation, EtherType, Ethernet2Header, IpNumber, Ipv4Header, NetSlice, SlicedPacket};

use crate::parse::SockOpt;
use crate::settings::Settings;
use crate::target::{Call, Micros, Returned, Sent, Target};

const OUR_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const TESTER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
/// Script time 0 on the stack's clock (not its epoch, so that nothing sees a zero instant).
const EPOCH: u64 = 1_000_000;
/// Most timer rounds at one instant before the target gives up on a timer that keeps
/// asking to run now.
const SPIN_LIMIT: u32 = 10_000;

/// The virtual-time target: a `bypass_stack::Interface` driven frame by frame, its timers
/// run at their exact deadlines, no clock and no device.
///
/// The tester sits on the same subnet with its own MAC. ARP stays out of the scripts: the
/// target introduces the tester with one ARP request before the first line (our stack learns
/// its MAC from it), drops our ARP replies, and answers any ARP request of ours at once.
pub struct VirtualTarget {
    iface: Interface,
    /// Only collects what the stack sends: the target feeds frames to `iface` itself.
    device: ScriptedDevice,
    now: Micros,
    us: Ipv4Addr,
    tester: Ipv4Addr,
    sent: VecDeque<Sent>,
    app: StackApp,
}

impl VirtualTarget {
    /// Return a target whose stack has `settings`, at script time 0.
    pub fn new(settings: &Settings) -> VirtualTarget {
        let mtu = 1500;
        let iface = Interface::new(settings.stack.clone(), OUR_MAC, mtu);
        let info = DeviceInfo::new("script", OUR_MAC, mtu, "virtual time");
        let mut t = VirtualTarget {
            iface,
            device: ScriptedDevice::new(info),
            now: 0,
            us: settings.local_ip(),
            tester: settings.tester_ip,
            sent: VecDeque::new(),
            app: StackApp::default(),
        };
        // Introduce the tester (RFC 826: the target of a request learns the sender).
        t.arp(ArpOperation::REQUEST, [0; 6]);
        t
    }

    fn instant(&self) -> Instant {
        Instant::from_micros(EPOCH + self.now)
    }

    /// Send an ARP message from the tester to our stack.
    fn arp(&mut self, op: ArpOperation, target_mac: [u8; 6]) {
        let mut frame = [0u8; bypass_stack::wire::arp::ARP_FRAME_LEN];
        bypass_stack::wire::arp::write_frame(&mut frame, op, TESTER_MAC, self.tester, target_mac, self.us);
        let now = self.instant();
        self.iface.receive(now, &frame);
        self.pump();
    }

    /// Let the stack send what it has, keep its TCP segments, answer its ARP requests, and
    /// collect the events of its connections.
    fn pump(&mut self) {
        let mut arp_requests = 0;
        loop {
            let now = self.instant();
            self.iface.deliver_events();
            // The device never refuses a frame.
            let _ = self.iface.transmit(now, &mut self.device);
            self.app.collect_events(&mut self.iface);
            let mut answer = false;
            for (_, frame) in self.device.take_sent() {
                let Ok(packet) = SlicedPacket::from_ethernet(&frame) else { continue };
                match packet.net {
                    Some(NetSlice::Arp(arp)) => {
                        if let Ok(arp) = arp.to_packet().try_eth_ipv4()
                            && arp.operation == ArpOperation::REQUEST
                            && arp.target_ipv4 == self.tester.octets()
                        {
                            answer = true;
                        }
                    }
                    Some(NetSlice::Ipv4(ip)) if ip.header().protocol() == IpNumber::TCP => {
                        log::trace!("out at {}: {} bytes", self.now, ip.payload().payload.len());
                        self.sent.push_back(Sent { at: self.now, tcp: ip.payload().payload.to_vec() });
                    }
                    _ => {}
                }
            }
            if !answer || arp_requests > 3 {
                return;
            }
            arp_requests += 1;
            let mut frame = [0u8; bypass_stack::wire::arp::ARP_FRAME_LEN];
            bypass_stack::wire::arp::write_frame(
                &mut frame,
                ArpOperation::REPLY,
                TESTER_MAC,
                self.tester,
                OUR_MAC,
                self.us,
            );
            self.iface.receive(now, &frame);
        }
    }
}

/// Our application over a `bypass_stack::Interface`: the script's calls mapped to the host's
/// API (the table in the crate docs), shared by the virtual target and the wire targets that
/// run our stack, so that both modes mean the same by every line.
#[derive(Debug, Default)]
pub(crate) struct StackApp {
    listener: Option<ListenerId>,
    current: Option<SocketId>,
    /// The current connection was given up (`close`, `abort`): calls on it fail with EBADF.
    released: bool,
    events: HashMap<SocketId, Vec<Event>>,
}

impl StackApp {
    /// Take the host's pending events and keep them per connection for `event` lines.
    pub(crate) fn collect_events(&mut self, iface: &mut Interface) {
        while let Some((id, event)) = iface.poll_event() {
            self.events.entry(id).or_default().push(event);
        }
    }

    fn conn<'i>(&self, iface: &'i mut Interface) -> Result<&'i mut bypass_tcp::Connection, &'static str> {
        let id = self.current.ok_or("EBADF")?;
        if self.released {
            return Err("EBADF");
        }
        iface.connection_mut(id).ok_or("EBADF")
    }

    /// Run one call at `now` (the caller lets the host transmit afterwards).
    pub(crate) fn call(&mut self, iface: &mut Interface, now: Instant, call: &Call) -> Returned {
        let result = match *call {
            Call::Listen(port) => match iface.listen(port) {
                Ok(l) => {
                    self.listener = Some(l);
                    Ok(0)
                }
                Err(ListenError::AddrInUse(_)) => Err("EADDRINUSE"),
                Err(ListenError::InvalidPort) => Err("EINVAL"),
            },
            Call::Accept => match self.listener.map(|l| iface.accept(l)) {
                Some(Some(id)) => {
                    self.current = Some(id);
                    self.released = false;
                    Ok(0)
                }
                Some(None) => Err("EAGAIN"),
                None => Err("EINVAL"),
            },
            Call::Connect { remote, local_port } => match iface.connect_from(now, Some(local_port), remote) {
                Ok(id) => {
                    self.current = Some(id);
                    self.released = false;
                    Ok(0)
                }
                Err(ConnectError::PortInUse(_)) => Err("EADDRINUSE"),
                Err(ConnectError::NoFreePort(_)) => Err("EADDRNOTAVAIL"),
                Err(ConnectError::TableFull(_)) => Err("ENOBUFS"),
                Err(ConnectError::InvalidAddress(_)) => Err("EINVAL"),
                Err(ConnectError::NoSourceAddress(_)) => Err("EAFNOSUPPORT"),
            },
            Call::Write(n) => {
                self.conn(iface).and_then(|c| c.send(&vec![0u8; n]).map(|k| k as i64).map_err(send_errno))
            }
            Call::Read(n) => {
                self.conn(iface).and_then(|c| c.recv(&mut vec![0u8; n]).map(|k| k as i64).map_err(recv_errno))
            }
            Call::Shutdown => self.conn(iface).map(|c| {
                c.close(now);
                0
            }),
            Call::Close | Call::Abort => match (self.current, self.released) {
                (Some(id), false) => {
                    if *call == Call::Close {
                        iface.close(now, id);
                    } else {
                        iface.abort(now, id);
                    }
                    self.released = true;
                    Ok(0)
                }
                _ => Err("EBADF"),
            },
            Call::SetSockOpt(SockOpt::NoDelay(on)) => self.conn(iface).map(|c| {
                c.set_nodelay(on);
                0
            }),
            Call::State => {
                let state = match (self.current, self.listener) {
                    (Some(id), _) => iface.connection(id).map_or(State::Closed, |c| c.state()),
                    (None, Some(_)) => State::Listen,
                    (None, None) => State::Closed,
                };
                return Returned::State(state);
            }
            Call::Events => {
                let events = self.current.and_then(|id| self.events.remove(&id)).unwrap_or_default();
                return Returned::Events(events);
            }
        };
        match result {
            Ok(v) => Returned::Value(v),
            Err(e) => Returned::Errno(e),
        }
    }
}

fn send_errno(e: SendError) -> &'static str {
    match e {
        SendError::WouldBlock => "EAGAIN",
        SendError::InvalidState(_) => "EPIPE",
        SendError::Reset => "ECONNRESET",
        SendError::TimedOut => "ETIMEDOUT",
    }
}

fn recv_errno(e: RecvError) -> &'static str {
    match e {
        RecvError::WouldBlock => "EAGAIN",
        RecvError::InvalidState(_) => "ENOTCONN",
        RecvError::Reset => "ECONNRESET",
        RecvError::TimedOut => "ETIMEDOUT",
    }
}

impl Target for VirtualTarget {
    fn addresses(&self) -> (Ipv4Addr, Ipv4Addr) {
        (self.us, self.tester)
    }

    fn now(&self) -> Micros {
        self.now
    }

    fn advance(&mut self, until: Micros) {
        let mut spins = 0;
        while let Some(due) = self.next_deadline() {
            if due > until {
                break;
            }
            if due <= self.now {
                spins += 1;
                if spins > SPIN_LIMIT {
                    log::debug!("a timer keeps asking to run at {}; moving on", self.now);
                    break;
                }
            } else {
                spins = 0;
            }
            self.now = self.now.max(due);
            let now = self.instant();
            self.iface.handle_timeouts(now);
            self.pump();
        }
        self.now = self.now.max(until);
    }

    fn next_deadline(&self) -> Option<Micros> {
        self.iface.poll_timeout().map(|t| t.as_micros().saturating_sub(EPOCH))
    }

    fn inject(&mut self, tcp: &[u8]) {
        let mut frame = Vec::with_capacity(34 + tcp.len());
        let eth = Ethernet2Header { source: TESTER_MAC, destination: OUR_MAC, ether_type: EtherType::IPV4 };
        frame.extend_from_slice(&eth.to_bytes());
        let Ok(mut ip) = Ipv4Header::new(tcp.len() as u16, 64, IpNumber::TCP, self.tester.octets(), self.us.octets())
        else {
            return;
        };
        ip.dont_fragment = true;
        ip.header_checksum = ip.calc_header_checksum();
        frame.extend_from_slice(&ip.to_bytes());
        frame.extend_from_slice(tcp);
        let now = self.instant();
        self.iface.receive(now, &frame);
        self.pump();
    }

    fn call(&mut self, call: &Call) -> Returned {
        let now = self.instant();
        let returned = self.app.call(&mut self.iface, now, call);
        self.pump();
        returned
    }

    fn take_sent(&mut self) -> Option<Sent> {
        self.sent.pop_front()
    }

    fn peek_sent(&self) -> Option<&Sent> {
        self.sent.front()
    }
}

impl VirtualTarget {
    /// Return the connection the application calls act on (for tests of the runner).
    pub fn current_state(&self) -> Option<State> {
        self.app.current.and_then(|id| self.iface.connection(id)).map(|c| c.state())
    }

    /// Return the host, to inspect its counters.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Return the tester's address with `port`.
    pub fn tester_addr(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.tester, port)
    }
}
