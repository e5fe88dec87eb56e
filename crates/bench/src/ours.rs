//! Our stack as the client: every workload of the kernel client (`kernel::client`), over any
//! device. Rows 4b and 5b put it on AF_PACKET or AF_XDP in the peer namespace, facing our
//! server (our stack at both ends); row M joins it to our server by the in-memory link.
//!
//! The workloads are `client::run`'s; this is our stack behind its [`Endpoint`]. Its system
//! calls are the device's (`Device::syscalls`: AF_XDP wake-ups, `sendmmsg` batches) plus the
//! read/write family of its thread (none).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::AtomicBool;

use bypass_device::Device;
use bypass_stack::{SocketId, Stack, StackConfig};
use bypass_tcp::State;

use super::client::{self, Endpoint};
use super::kernel::{ClientPlan, ClientResult, Shared};
use super::measure::Usage;

/// Run `plan.workload` from our stack at `ip`/`prefix` over `device` against `plan.server`:
/// warm-up unrecorded, then `plan.duration` recorded. `interrupted` ends the run early.
pub fn client<D: Device>(
    device: D,
    ip: Ipv4Addr,
    prefix: u8,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<ClientResult, String> {
    let SocketAddr::V4(server) = plan.server else { return Err("our client: IPv4 only".into()) };
    let mut config = StackConfig::new(ip, prefix, super::stack::secret());
    // The connection-rate workload leaves every closed connection in TIME-WAIT (2 MSL):
    // give it every port above 1023, as the demo does for the kernel client.
    config.ephemeral_ports = (1024, 65535);
    let mut client = Client { stack: Stack::new(device, config), server };
    let result = client::run(&mut client, plan, shared, interrupted);
    log::debug!("our client: {}", super::stack::traffic(&mut client.stack));
    result
}

struct Client<D: Device> {
    stack: Stack<D>,
    server: SocketAddrV4,
}

fn io(e: std::io::Error) -> String {
    format!("our client: {e}")
}

impl<D: Device> Endpoint for Client<D> {
    type Conn = SocketId;

    fn name(&self) -> &'static str {
        "our client"
    }

    fn server(&self) -> SocketAddrV4 {
        self.server
    }

    fn poll(&mut self) -> Result<(), String> {
        self.stack.poll_tx().map_err(io)?;
        self.stack.poll_rx().map(|_| ()).map_err(io)
    }

    fn usage(&self) -> (Usage, u64) {
        let mut usage = Usage::now();
        usage.syscalls += self.stack.device().syscalls();
        (usage, self.stack.counters().bytes_copied)
    }

    fn open(&mut self) -> Result<SocketId, String> {
        let server = self.server;
        let id = self.stack.connect(server).map_err(|e| format!("our client: connect to {server}: {e}"))?;
        self.stack.set_nodelay(id, true);
        Ok(id)
    }

    fn opening(&self, id: SocketId) -> bool {
        matches!(self.stack.state(id), State::SynSent | State::SynReceived)
    }

    fn not_established(&self, id: SocketId) -> Option<String> {
        let state = self.stack.state(id);
        (state != State::Established).then(|| format!("{state:?}"))
    }

    fn closed(&self, id: SocketId) -> bool {
        matches!(self.stack.state(id), State::TimeWait | State::Closed)
    }

    fn write_some(&mut self, id: SocketId, data: &[u8], sent: &mut usize) -> Result<(), String> {
        match self.stack.write(id, &data[*sent..]) {
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        Ok(())
    }

    fn read(&mut self, id: SocketId, buf: &mut [u8], what: &str) -> Result<usize, String> {
        match self.stack.read(id, buf) {
            Ok(0) => Err(format!("our client: the server closed the {what}")),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(io(e)),
        }
    }

    fn peer_finished(&mut self, id: SocketId) -> Result<bool, String> {
        let mut buf = [0u8; 64];
        match self.stack.read(id, &mut buf) {
            Ok(0) => Ok(true),
            Ok(_) => Err("our client: the bulk server sent data".into()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(io(e)),
        }
    }

    fn shutdown(&mut self, id: SocketId) {
        self.stack.shutdown(id);
    }

    fn close(&mut self, id: SocketId) {
        self.stack.close(id);
    }

    fn abort(&mut self, id: SocketId) {
        self.stack.abort(id);
    }
}
