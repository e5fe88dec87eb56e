//! The benchmark harness behind `bypass demo`: kernel sockets against our stack on
//! kernel-bypass I/O, measured side by side in a two-namespace lab the demo builds and
//! removes itself.
//!
//! What the crate offers (the `bypass` binary keeps the command line):
//!
//! | item | what it is |
//! |---|---|
//! | [`run`], [`Options`] | run the demo: measure, print the table, write `results.md`, `results.json` and the SVG charts (three, and `file-copies.svg` with the file rows) |
//! | [`EchoServer`] | the echo service (RFC 862) on a stack: what `bypass echo` serves and the demo measures |
//! | [`svg`] | the SVG primitives the demo's charts and `bypass inspect`'s ladders draw with |
//!
//! Where everything runs (one process, one thread per end):
//!
//! ```text
//!  bypass namespace (bx0)                          peer namespace (px0, 10.77.0.1)
//!  server thread                                   client thread
//!    1 kernel echo, blocking     on 10.77.0.3        kernel TCP socket, blocking (row 1) or
//!    2 kernel echo, busy polling on 10.77.0.3        non-blocking, busy polling (rows 2, 2d,
//!   2d kernel echo, busy polling on 10.77.1.3 (bk0)  3, 3s, 3z, 4, 5, 6; row 2d over pk0)
//!   2u kernel echo on io_uring   on 10.77.0.3        kernel TCP on io_uring, busy polling
//!  2ud kernel echo on io_uring   on 10.77.1.3 (bk0)  (rows 2u, 2ud; row 2ud over pk0)
//!    3 kernel sendfile(2) source on 10.77.0.3
//!   3s kernel splice(2) source   on 10.77.0.3
//!   3z kernel MSG_ZEROCOPY source on 10.77.0.3
//!    4 our stack over AF_PACKET  on 10.77.0.2
//!    5 our stack over AF_XDP     on 10.77.0.2
//!  5v6 our stack over AF_XDP     on fd00:77::2       (over IPv6, from fd00:77::1)
//!    6 smoltcp over our AF_XDP   on 10.77.0.2
//!   4b our stack over AF_PACKET  on 10.77.0.2        our stack over AF_PACKET on px0, 10.77.0.4
//!   5b our stack over AF_XDP     on 10.77.0.2        our stack over AF_XDP on px0, 10.77.0.4
//!   6b smoltcp over our AF_XDP   on 10.77.0.2        smoltcp over our AF_XDP on px0, 10.77.0.4
//!  f1-f5 kernel, a file sent by     on 10.77.1.3 (bk0)  kernel TCP, non-blocking read(2), checksum
//!        read+write, mmap+write,                      of every pass (file rows: `--workload file`)
//!        sendfile, splice, MSG_ZEROCOPY
//!  f6-f7 our stack over AF_XDP, a   on 10.77.0.2        as rows f1-f5, over px0
//!        file by send_with or write
//! ```
//!
//! Every row but 2d crosses bx0/px0, whose offloads (tx checksum, TSO, GSO) are off at both
//! ends, so every row puts MTU-sized frames with software checksums on the wire. Row 2d is the
//! kernel as it ships: the lab's second veth pair, bk0/pk0, keeps the kernel's default
//! offloads, so TCP hands the veth 64 KiB super-packets that cross it whole.
//!
//! Without root (no lab), rows 1, 2, 3, 3s and 3z run over loopback and row M (our stack at
//! both ends over the in-memory link, in this process; `--only stack-memory` runs it
//! anywhere) stands in for the bypass rows.
//!
//! Rows 4, 5 and 6 are the mixed case: a kernel client against a userspace server; rows 4b
//! and 5b put our stack at both ends, row 6b smoltcp. The kernel server uses a second address of bx0, so the
//! stack's 10.77.0.2 stays unknown to the kernel; our client's 10.77.0.4 is unknown to the
//! peer's kernel too (AF_XDP takes every frame of px0 away from it while the row runs).
//! Transports run one after the other (at most two spinning threads on a 2-core machine).
//! Each repetition measures the floor (right before and right after each 64-byte,
//! one-connection request/response row, whose p50 it reads against the mean of the two: the
//! `p50 vs floor` column; as a slot of its own when no such row runs), the bulk floors (raw
//! AF_XDP frames streamed one way, per bulk direction and MTU, each right before the rows of
//! its workload: the bulk tables' `vs floor` column), every row and the HTTP row once, in an order rotated
//! from one repetition to the next (see `rotation`), so a slow phase of the machine lands on
//! all rows alike; every figure is the median of the repetitions, and every ratio the median
//! of per-repetition ratios, shown with its range and marked unsettled past a 20% spread.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod charts;
mod client;
mod echo;
mod file;
mod flood;
mod http_load;
mod kernel;
mod measure;
mod memory;
mod ours;
mod programs;
mod report;
mod smoltcp;
mod stack;
pub mod svg;
mod uring;
mod zerocopy;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bypass_device::{Clock, LinkConfig, MemoryLink};
use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_io::{PacketDevice, netdev};
use bypass_lab::testlab::{Lab, LabConfig};

pub use echo::EchoServer;
use kernel::{ClientPlan, Shared};
use report::{Figures, Row};

/// The kernel echo server's address on bx0 (the stack owns the lab's 10.77.0.2).
const KERNEL_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The workloads, in table order.
const WORKLOADS: [Workload; 7] = [
    Workload::Rr { size: 64, conns: 1 },
    Workload::Rr { size: 1024, conns: 1 },
    Workload::Rr { size: 64, conns: 100 },
    Workload::BulkUp,
    Workload::BulkDown,
    Workload::Connect,
    Workload::File,
];

/// What the client asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Request/response: `conns` connections, each with one `size`-byte message in flight,
    /// echoed back.
    Rr { size: usize, conns: usize },
    /// One long stream, client -> server.
    BulkUp,
    /// One long stream, server -> client.
    BulkDown,
    /// Connect, exchange 64 bytes, close; one connection at a time.
    Connect,
    /// Serve a file from the page cache, server -> client, whole and again (the file rows).
    File,
}

impl Workload {
    /// The table's title.
    pub fn title(self) -> String {
        match self {
            Workload::Rr { size, conns: 1 } => format!("request/response, {size} B messages, 1 connection"),
            Workload::Rr { size, conns } => {
                format!(
                    "request/response, {size} B messages, {conns} concurrent connections (one message in flight on each)"
                )
            }
            Workload::BulkUp => "bulk: one stream, client -> server (the server receives and discards)".into(),
            Workload::BulkDown => "bulk: one stream, server -> client (the server sends, the client reads)".into(),
            Workload::Connect => "connection rate: connect, 64 B echoed, close; one at a time".into(),
            Workload::File => {
                "serving a file: one file in the page cache, sent whole again and again to a client that reads it and checks every byte (CPU copies per byte counted where each happens)".into()
            }
        }
    }

    /// A short name for JSON and the progress line.
    pub fn key(self) -> String {
        match self {
            Workload::Rr { size, conns } => format!("rr-{size}B-{conns}c"),
            Workload::BulkUp => "bulk-up".into(),
            Workload::BulkDown => "bulk-down".into(),
            Workload::Connect => "connect".into(),
            Workload::File => "file".into(),
        }
    }

    /// Return whether the floor (row 0: 64-byte raw AF_XDP frames bounced one at a time)
    /// bounds this workload's rows, and so is measured right before and right after each of
    /// them: the 64-byte request/response on one connection.
    pub fn floored(self) -> bool {
        self == Workload::Rr { size: 64, conns: 1 }
    }

    /// Return whether this is a bulk stream (measured in Gbit/s, no latency).
    pub fn is_bulk(self) -> bool {
        matches!(self, Workload::BulkUp | Workload::BulkDown)
    }

    /// Return whether this is a stream measured in Gbit/s: bulk, or serving a file.
    pub fn is_stream(self) -> bool {
        self.is_bulk() || self == Workload::File
    }
}

/// Our server's address on the in-memory link.
const MEMORY_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// Our client's address on the in-memory link.
const MEMORY_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// Our client's address on px0 in the lab (rows 4b and 5b); the peer's kernel keeps 10.77.0.1.
const OURS_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 4);
/// MTU of the lab's veth pair.
const MTU: u32 = 1500;
/// MTU of bx0 and px0 for the jumbo rows (2j, 5j, 6j): near veth's largest (65,535), a
/// frame of 17 UMEM frames, within the 18 a copy-mode AF_XDP packet may have.
const JUMBO_MTU: u32 = 65000;
/// The peer's ephemeral ports (`net.ipv4.ip_local_port_range`, per namespace): every port
/// above 1023, for the connection-rate client whose closed connections wait in TIME-WAIT.
pub(crate) const PEER_PORTS: (u32, u32) = (1024, 65535);

/// A transport under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    KernelBlocking,
    KernelBusy,
    /// Kernel TCP busy polling, as row 2, over a veth pair with the kernel's default offloads.
    KernelDefaults,
    /// Kernel TCP on io_uring at both ends (multishot accept and receive, provided buffers,
    /// registered files, SEND_ZC), busy polling, on bx0/px0 as row 2.
    KernelUring,
    /// As [`Transport::KernelUring`] over the default-offloads pair, as row 2d.
    KernelUringDefaults,
    /// Kernel TCP, the server sending with `sendfile(2)` (bulk server -> client only).
    KernelZerocopy,
    /// Kernel TCP, the server sending with `splice(2)` file -> pipe -> socket (bulk server ->
    /// client only).
    KernelSplice,
    /// Kernel TCP, the server sending with `send(2)` and `MSG_ZEROCOPY` (bulk server ->
    /// client only).
    KernelMsgZerocopy,
    /// Our server over AF_PACKET, a kernel client.
    StackPacket,
    /// Our stack at both ends, each over AF_PACKET.
    StackPacketBoth,
    /// Our server over AF_XDP, a kernel client.
    StackXdp,
    /// Our server over AF_XDP (as row 5), a kernel client on io_uring (row 2u's).
    StackXdpUring,
    /// Our server over AF_XDP, a kernel client, over IPv6.
    StackXdpV6,
    /// Our server over AF_XDP reading and writing in place (`recv_with`, `send_with`), a
    /// kernel client (bulk only).
    StackXdpInPlace,
    /// Our stack at both ends, each over AF_XDP.
    StackXdpBoth,
    /// smoltcp as the server over our AF_XDP device, a kernel client.
    SmoltcpXdp,
    /// smoltcp at both ends, each over our AF_XDP device.
    SmoltcpXdpBoth,
    /// Row 2 at the jumbo MTU ([`JUMBO_MTU`] on bx0 and px0), bulk only.
    KernelBusyJumbo,
    /// Row 5 at the jumbo MTU: multi-buffer AF_XDP frames, one segment per frame, bulk only.
    StackXdpJumbo,
    /// Row 6 at the jumbo MTU, bulk only.
    SmoltcpXdpJumbo,
    /// Our stack at both ends over the in-memory link (the fallback without root).
    StackMemory,
    /// The file rows: kernel TCP on bk0/pk0 (the default offloads, as row 2d), the server
    /// sending a file by `pread` + `write`.
    FileReadWrite,
    /// As [`Transport::FileReadWrite`], by `mmap` + `write`.
    FileMmapWrite,
    /// As [`Transport::FileReadWrite`], by `sendfile`.
    FileSendfile,
    /// As [`Transport::FileReadWrite`], by `splice` through a pipe.
    FileSplice,
    /// As [`Transport::FileReadWrite`], by `MSG_ZEROCOPY` from an mmap of the file.
    FileMsgZerocopy,
    /// Our server over AF_XDP on bx0 (as row 5), `pread` straight into the space
    /// `Stack::send_with` lends; a kernel client.
    FileStackSendWith,
    /// As [`Transport::FileStackSendWith`], by `pread` into a user buffer and `Stack::write`.
    FileStackWrite,
    /// As [`Transport::FileStackSendWith`], the lent space filled from an mmap of the file.
    FileStackSendWithMmap,
}

impl Transport {
    pub const ALL: [Transport; 29] = [
        Transport::KernelBlocking,
        Transport::KernelBusy,
        Transport::KernelDefaults,
        Transport::KernelUring,
        Transport::KernelUringDefaults,
        Transport::KernelZerocopy,
        Transport::KernelSplice,
        Transport::KernelMsgZerocopy,
        Transport::StackPacket,
        Transport::StackPacketBoth,
        Transport::StackXdp,
        Transport::StackXdpUring,
        Transport::StackXdpV6,
        Transport::StackXdpInPlace,
        Transport::StackXdpBoth,
        Transport::SmoltcpXdp,
        Transport::SmoltcpXdpBoth,
        Transport::KernelBusyJumbo,
        Transport::StackXdpJumbo,
        Transport::SmoltcpXdpJumbo,
        Transport::StackMemory,
        Transport::FileReadWrite,
        Transport::FileMmapWrite,
        Transport::FileSendfile,
        Transport::FileSplice,
        Transport::FileMsgZerocopy,
        Transport::FileStackSendWith,
        Transport::FileStackWrite,
        Transport::FileStackSendWithMmap,
    ];

    /// The name `--only` takes.
    pub fn name(self) -> &'static str {
        match self {
            Transport::KernelBlocking => "kernel-blocking",
            Transport::KernelBusy => "kernel-busy",
            Transport::KernelDefaults => "kernel-busy-defaults",
            Transport::KernelUring => "kernel-uring",
            Transport::KernelUringDefaults => "kernel-uring-defaults",
            Transport::KernelZerocopy => "kernel-sendfile",
            Transport::KernelSplice => "kernel-splice",
            Transport::KernelMsgZerocopy => "kernel-msg-zerocopy",
            Transport::StackPacket => "stack-afpacket",
            Transport::StackPacketBoth => "stack-afpacket-both",
            Transport::StackXdp => "stack-afxdp",
            Transport::StackXdpUring => "stack-afxdp-uring",
            Transport::StackXdpV6 => "stack-afxdp-ipv6",
            Transport::StackXdpInPlace => "stack-afxdp-in-place",
            Transport::StackXdpBoth => "stack-afxdp-both",
            Transport::SmoltcpXdp => "smoltcp-afxdp",
            Transport::SmoltcpXdpBoth => "smoltcp-afxdp-both",
            Transport::KernelBusyJumbo => "kernel-busy-jumbo",
            Transport::StackXdpJumbo => "stack-afxdp-jumbo",
            Transport::SmoltcpXdpJumbo => "smoltcp-afxdp-jumbo",
            Transport::StackMemory => "stack-memory",
            Transport::FileReadWrite => "file-read-write",
            Transport::FileMmapWrite => "file-mmap-write",
            Transport::FileSendfile => "file-sendfile",
            Transport::FileSplice => "file-splice",
            Transport::FileMsgZerocopy => "file-msg-zerocopy",
            Transport::FileStackSendWith => "file-stack-send-with",
            Transport::FileStackWrite => "file-stack-write",
            Transport::FileStackSendWithMmap => "file-stack-send-with-mmap",
        }
    }

    /// The row label (numbered as in the results table).
    pub fn label(self) -> &'static str {
        match self {
            Transport::KernelBlocking => "1 kernel TCP, blocking",
            Transport::KernelBusy => "2 kernel TCP, busy-poll",
            Transport::KernelDefaults => "2d kernel TCP, default offloads, busy-poll",
            Transport::KernelUring => "2u kernel TCP, io_uring, busy-poll",
            Transport::KernelUringDefaults => "2ud kernel TCP, io_uring, default offloads, busy-poll",
            Transport::KernelZerocopy => "3 kernel TCP, sendfile",
            Transport::KernelSplice => "3s kernel TCP, splice",
            Transport::KernelMsgZerocopy => "3z kernel TCP, MSG_ZEROCOPY",
            Transport::StackPacket => "4 ours/AF_PACKET <- kernel",
            Transport::StackPacketBoth => "4b ours/AF_PACKET <-> ours",
            Transport::StackXdp => "5 ours/AF_XDP <- kernel",
            Transport::StackXdpUring => "5u ours/AF_XDP <- kernel io_uring",
            Transport::StackXdpV6 => "5v6 ours/AF_XDP <- kernel, IPv6",
            Transport::StackXdpInPlace => "5z ours/AF_XDP in place <- kernel",
            Transport::StackXdpBoth => "5b ours/AF_XDP <-> ours",
            Transport::SmoltcpXdp => "6 smoltcp/AF_XDP <- kernel",
            Transport::SmoltcpXdpBoth => "6b smoltcp/AF_XDP <-> smoltcp",
            Transport::KernelBusyJumbo => "2j kernel TCP, busy-poll, jumbo MTU",
            Transport::StackXdpJumbo => "5j ours/AF_XDP <- kernel, jumbo MTU",
            Transport::SmoltcpXdpJumbo => "6j smoltcp/AF_XDP <- kernel, jumbo MTU",
            Transport::StackMemory => "M ours <-> ours, memory link",
            Transport::FileReadWrite => "f1 kernel, read + write",
            Transport::FileMmapWrite => "f2 kernel, mmap + write",
            Transport::FileSendfile => "f3 kernel, sendfile",
            Transport::FileSplice => "f4 kernel, splice",
            Transport::FileMsgZerocopy => "f5 kernel, MSG_ZEROCOPY from mmap",
            Transport::FileStackSendWith => "f6 ours/AF_XDP, send_with + pread",
            Transport::FileStackWrite => "f7 ours/AF_XDP, pread + write",
            Transport::FileStackSendWithMmap => "f8 ours/AF_XDP, send_with + mmap",
        }
    }

    /// What runs where.
    pub fn placement(self) -> &'static str {
        match self {
            Transport::KernelBlocking => {
                "server: kernel echo, blocking read/write, 10.77.0.3 on bx0; client: kernel socket, blocking read/write, peer namespace"
            }
            Transport::KernelBusy => {
                "server: kernel echo, non-blocking read/write spinning, 10.77.0.3 on bx0; client: kernel socket, non-blocking, spinning, peer namespace"
            }
            Transport::KernelDefaults => {
                "server: kernel echo, non-blocking read/write spinning, 10.77.1.3 on bk0; client: kernel socket, non-blocking, spinning, peer namespace, over pk0: the lab's second veth pair, which keeps the kernel's default offloads (tx checksum, scatter-gather, TSO and GSO on at both ends), so TCP hands the veth super-packets of up to 64 KiB that cross it whole with their checksums left to an offload that never runs; everything else as row 2"
            }
            Transport::KernelUring => {
                "server and client: kernel TCP on io_uring (SINGLE_ISSUER, DEFER_TASKRUN; multishot accept into the registered file table, multishot receive into a provided-buffer ring of 256 x 32 KiB, echo by IORING_OP_SEND from the received buffer, bulk sending by SEND_ZC of 64 KiB from a registered buffer; the connection-rate client links socket -> connect -> send -> receive on a registered slot), each busy polling with io_uring_enter(GETEVENTS, waiting for none), no SQPOLL; server 10.77.0.3 on bx0, client in the peer namespace, as row 2"
            }
            Transport::KernelUringDefaults => {
                "as row 2u over bk0/pk0, the veth pair with the kernel's default offloads (as row 2d)"
            }
            Transport::KernelZerocopy => {
                "server: kernel TCP, sendfile(2) from a 64 MiB memfd (sent again and again, the offset wraps), non-blocking, spinning, 10.77.0.3 on bx0; client: kernel socket, non-blocking read(2), spinning (busy polling, as row 2), peer namespace; bulk server -> client only (splice(2): row 3s; MSG_ZEROCOPY: row 3z)"
            }
            Transport::KernelSplice => {
                "server: kernel TCP, splice(2) from a 64 MiB memfd into a pipe, then splice(2) pipe -> socket (64 KiB at a time, the offset wraps), non-blocking, spinning, 10.77.0.3 on bx0; client: kernel socket, non-blocking read(2), spinning (busy polling, as row 2), peer namespace; bulk server -> client only"
            }
            Transport::KernelMsgZerocopy => {
                "server: kernel TCP, send(2) with MSG_ZEROCOPY on an SO_ZEROCOPY socket (64 KiB per call from a ring of user buffers, each reused only after the kernel's completion notification on the error queue), non-blocking, spinning, 10.77.0.3 on bx0; client: kernel socket, non-blocking read(2), spinning, peer namespace; bulk server -> client only"
            }
            Transport::StackPacket => {
                "server: our stack over AF_PACKET on bx0 (10.77.0.2), spinning; client: kernel socket, non-blocking, spinning, peer namespace (mixed case)"
            }
            Transport::StackXdp => {
                "server: our stack over AF_XDP on bx0 (10.77.0.2), socket busy polling; client: kernel socket, non-blocking, spinning, peer namespace (mixed case)"
            }
            Transport::StackXdpUring => {
                "as row 5, the client driving its sockets through io_uring as row 2u's does (multishot receive into a provided-buffer ring, registered files, SEND_ZC for the bulk stream, busy polling with io_uring_enter): the client of the best kernel rows, so the server is the only difference from rows 2u and 2ud"
            }
            Transport::StackXdpV6 => {
                "as row 5 over IPv6: server: our stack over AF_XDP on bx0 (fd00:77::2, the MSS 20 bytes smaller for the longer header), socket busy polling; client: kernel socket from fd00:77::1, non-blocking, spinning, peer namespace"
            }
            Transport::StackPacketBoth => {
                "server: our stack over AF_PACKET on bx0 (10.77.0.2), spinning; client: our stack over AF_PACKET on px0 (10.77.0.4), spinning, peer namespace"
            }
            Transport::StackXdpInPlace => {
                "as row 5, but the server reads and writes in place: Stack::recv_with consumes received bytes where they lie in the TCP receive buffer, Stack::send_with writes the bytes to send straight into the send buffer (bulk only)"
            }
            Transport::StackXdpBoth => {
                "server: our stack over AF_XDP on bx0 (10.77.0.2), socket busy polling; client: our stack over AF_XDP on px0 (10.77.0.4), socket busy polling, peer namespace"
            }
            Transport::SmoltcpXdp => {
                "server: smoltcp 0.14 over our AF_XDP device on bx0 (10.77.0.2), socket busy polling, spinning; client: kernel socket, non-blocking, spinning, peer namespace (mixed case, as row 5)"
            }
            Transport::SmoltcpXdpBoth => {
                "server: smoltcp 0.14 over our AF_XDP device on bx0 (10.77.0.2); client: smoltcp 0.14 over our AF_XDP device on px0 (10.77.0.4), peer namespace; both socket busy polling, spinning; the connection-rate client keeps its closed connections in TIME-WAIT (smoltcp: 10 s) in its socket set, which smoltcp scans linearly, so that figure slows as the run goes on"
            }
            Transport::KernelBusyJumbo => {
                "as row 2 with bx0 and px0 at the jumbo MTU (65,000) for the row: one 64,948-byte segment per frame, offloads still off; bulk only"
            }
            Transport::StackXdpJumbo => {
                "as row 5 with bx0 and px0 at the jumbo MTU for the row: the XDP program is frags-aware and the socket multi-buffer (XDP_USE_SG), so each 65,014-byte frame crosses as a chain of 17 UMEM frames, which the device hands the stack as one frame (one segment processed once, not 45 times at 1448 bytes); our MSS follows the MTU; bulk only"
            }
            Transport::SmoltcpXdpJumbo => {
                "as row 6 with bx0 and px0 at the jumbo MTU, on the same multi-buffer device as row 5j; bulk only"
            }
            Transport::StackMemory => {
                "server and client: our stack, each spinning on a thread of its own, joined by the in-memory link (bypass_device::MemoryLink, real time) inside the demo process; no kernel on the path"
            }
            Transport::FileReadWrite => {
                "server: kernel TCP on bk0 (10.77.1.3, the kernel's default offloads, as row 2d), pread(2) 64 KiB of the file into a user buffer, write(2) it, non-blocking, spinning; client: kernel socket in the peer namespace over pk0, non-blocking read(2) into 256 KiB, checksumming every pass of the file"
            }
            Transport::FileMmapWrite => {
                "as row f1, the server mapping the file (mmap(2) per pass of the file, munmap(2) after it) and writing 64 KiB at a time from the mapping"
            }
            Transport::FileSendfile => "as row f1, the server sending the file with sendfile(2), 64 KiB per call",
            Transport::FileSplice => {
                "as row f1, the server moving the file with splice(2) file -> pipe, then splice(2) pipe -> socket, 64 KiB at a time"
            }
            Transport::FileMsgZerocopy => {
                "as row f1, the server sending from one mmap(2) of the file with send(2) and MSG_ZEROCOPY on an SO_ZEROCOPY socket, 64 KiB per call, reading the completions off the error queue every 8 sends"
            }
            Transport::FileStackSendWith => {
                "server: our stack over AF_XDP on bx0 (10.77.0.2, as row 5), filling the send buffer straight from the file: pread(2) into the space Stack::send_with lends; client: kernel socket in the peer namespace over px0, as row f1"
            }
            Transport::FileStackWrite => {
                "as row f6, the server reading the file into a 64 KiB user buffer with pread(2), then Stack::write"
            }
            Transport::FileStackSendWithMmap => {
                "as row f6, the server filling the space Stack::send_with lends by copying from one mmap(2) of the file (for the connection)"
            }
        }
    }

    /// Where the CPU copies each byte, per direction, end to end.
    pub fn copies(self) -> &'static str {
        match self {
            Transport::KernelBlocking | Transport::KernelBusy | Transport::KernelBusyJumbo | Transport::KernelUring => {
                "2 per byte per direction, both by the kernel: write(2) copies user -> skb, read(2) copies skb -> user (veth passes the skb on without copying)"
            }
            Transport::KernelDefaults | Transport::KernelUringDefaults => {
                "2 per byte per direction, both by the kernel, as row 2, but with checksums left partial (tx checksum offload) and one skb per 64 KiB super-packet instead of one per 1448-byte segment"
            }
            Transport::KernelZerocopy => {
                "2 per byte, both by the kernel: sendfile(2) attaches the memfd's pages to the skb without a copy (no user buffer), but bx0 has no tx checksum offload, so software GSO (skb_segment) linearizes the shared page frags to checksum them: one copy page -> segment (perf: skb_copy_bits under skb_segment); read(2) copies skb -> user"
            }
            Transport::KernelSplice => {
                "2 per byte, both by the kernel, as row 3: splice(2) file -> pipe takes page references and pipe -> socket attaches them to the skb without a copy, then software GSO copies them into each segment to checksum them (no tx checksum offload; perf: skb_copy_bits under validate_xmit_skb); read(2) copies skb -> user"
            }
            Transport::StackPacket => {
                "ours (measured, server): frame -> receive buffer -> application and application -> send buffer -> frame; kernel: 2 per direction (the client's write/read, and AF_PACKET's copy skb -> ring on receive / user -> skb on send)"
            }
            Transport::StackXdp | Transport::StackXdpUring | Transport::StackXdpV6 | Transport::StackXdpJumbo => {
                "ours (measured, server): frame -> receive buffer -> application and application -> send buffer -> frame; kernel: 2 per direction (the client's write/read, and AF_XDP copy mode's copy skb -> UMEM on receive / UMEM -> skb on send)"
            }
            Transport::KernelMsgZerocopy => {
                "2 per byte, both by the kernel, as row 3: MSG_ZEROCOPY pins the user pages into the skb without a copy, then software GSO copies them into each segment (no tx checksum offload), and delivery to a local socket (veth into another namespace) would force the deferred copy anyway (skb_orphan_frags_rx; completions say SO_EE_CODE_ZEROCOPY_COPIED); read(2) copies skb -> user"
            }
            Transport::StackXdpInPlace => {
                "ours (measured, server): frame -> receive buffer and send buffer -> frame only: the application reads and writes the TCP buffers in place (bytes_in_place, not copies); kernel: 2 per direction as row 5"
            }
            Transport::StackPacketBoth => {
                "ours (measured, both ends): each end copies frame -> receive buffer -> application and application -> send buffer -> frame; kernel: 2 per direction (AF_PACKET user -> skb on send, skb -> ring on receive)"
            }
            Transport::StackXdpBoth => {
                "ours (measured, both ends): each end copies frame -> receive buffer -> application and application -> send buffer -> frame; kernel: 2 per direction (AF_XDP copy mode UMEM -> skb on send, skb -> UMEM on receive)"
            }
            Transport::SmoltcpXdpBoth => "smoltcp (counted, both ends): as row 6 at each end",
            Transport::SmoltcpXdp | Transport::SmoltcpXdpJumbo => {
                "smoltcp (counted, server): our device adapter copies each received frame out of the UMEM (smoltcp's tokens outlive our lending closure), smoltcp copies frame -> socket buffer -> application and application -> socket buffer -> frame; kernel: 2 per direction as row 5"
            }
            Transport::StackMemory => {
                "ours (measured, both ends): each end copies as in rows 4b and 5b, and the in-memory link copies each frame into its queue (not counted); no kernel copies"
            }
            Transport::FileReadWrite => {
                "page cache -> user (pread), user -> socket buffer (write), socket buffer -> user at the client (read): 3 CPU copies, each counted by the bytes its call returned; the veth hands the skb on without a copy (not observable here)"
            }
            Transport::FileMmapWrite => {
                "user (the mapped page cache) -> socket buffer (write), socket buffer -> user at the client: 2 CPU copies; the mapping costs page faults instead of a copy (counted)"
            }
            Transport::FileSendfile | Transport::FileSplice => {
                "socket buffer -> user at the client only: the socket buffer holds references to the page-cache pages, and with the default offloads (scatter-gather, checksum offload) nothing copies them on the way out (not observable here)"
            }
            Transport::FileMsgZerocopy => {
                "the pages are pinned, not copied, at send(2); the veth delivers them to a local socket, which copies them after all (skb_orphan_frags_rx), as the completions flagged SO_EE_CODE_ZEROCOPY_COPIED count; then socket buffer -> user at the client"
            }
            Transport::FileStackSendWith => {
                "page cache -> our send buffer (pread into the lent space), send buffer -> UMEM frame (the stack's counter), then the kernel: AF_XDP copy mode UMEM -> skb (not observable here), socket buffer -> user at the client"
            }
            Transport::FileStackWrite => {
                "page cache -> user (pread), user -> our send buffer (Stack::write), send buffer -> UMEM frame, then the kernel as row f6"
            }
            Transport::FileStackSendWithMmap => {
                "mapped page cache -> our send buffer (the server's copy from its mapping into the lent space; the mapping costs page faults instead of a read), then as row f6"
            }
        }
    }

    fn busy(self) -> bool {
        self != Transport::KernelBlocking
    }

    fn needs_lab(self) -> bool {
        matches!(
            self,
            Transport::FileStackSendWith
                | Transport::FileStackWrite
                | Transport::FileStackSendWithMmap
                | Transport::StackPacket
                | Transport::StackPacketBoth
                | Transport::StackXdp
                | Transport::StackXdpUring
                | Transport::StackXdpV6
                | Transport::StackXdpInPlace
                | Transport::StackXdpBoth
                | Transport::SmoltcpXdp
                | Transport::SmoltcpXdpBoth
                | Transport::StackXdpJumbo
                | Transport::SmoltcpXdpJumbo
        )
    }

    /// Return whether the row runs with bx0 and px0 at [`JUMBO_MTU`].
    fn jumbo(self) -> bool {
        matches!(self, Transport::KernelBusyJumbo | Transport::StackXdpJumbo | Transport::SmoltcpXdpJumbo)
    }

    /// Return how a file row's server sends the file; `None` for the other rows.
    fn file_path(self) -> Option<file::Path> {
        Some(match self {
            Transport::FileReadWrite => file::Path::ReadWrite,
            Transport::FileMmapWrite => file::Path::MmapWrite,
            Transport::FileSendfile => file::Path::Sendfile,
            Transport::FileSplice => file::Path::Splice,
            Transport::FileMsgZerocopy => file::Path::MsgZerocopy,
            Transport::FileStackSendWith => file::Path::StackSendWith,
            Transport::FileStackWrite => file::Path::StackWrite,
            Transport::FileStackSendWithMmap => file::Path::StackSendWithMmap,
            _ => return None,
        })
    }

    /// Return what the kernel does to a file row's bytes that user space cannot count.
    pub fn hidden_copies(self) -> &'static str {
        match self {
            Transport::FileStackSendWith | Transport::FileStackWrite | Transport::FileStackSendWithMmap => {
                "UMEM -> skb (AF_XDP copy mode)"
            }
            _ => "none expected (veth hands the skb on)",
        }
    }

    /// Kernel copies per byte per direction, end to end (the file rows count theirs, copy
    /// by copy, in their own figures).
    pub fn kernel_copies(self) -> u32 {
        if self == Transport::StackMemory { 0 } else { 2 }
    }

    /// Return whether this transport measures `workload`.
    fn runs(self, workload: Workload) -> bool {
        if self.file_path().is_some() || workload == Workload::File {
            return self.file_path().is_some() && workload == Workload::File;
        }
        match self {
            Transport::KernelZerocopy | Transport::KernelSplice | Transport::KernelMsgZerocopy => {
                workload == Workload::BulkDown
            }
            Transport::StackXdpInPlace => workload.is_bulk(),
            t if t.jumbo() => workload.is_bulk(),
            _ => true,
        }
    }

    /// Why this transport does not measure some workloads (see [`Transport::runs`]).
    fn not_run_reason(self) -> &'static str {
        match self {
            Transport::StackXdpInPlace => {
                "not measured: row 5z runs the bulk streams only (an echo cannot read and write in place at once: both closures borrow the stack)"
            }
            t if t.jumbo() => "not measured: the jumbo rows run the bulk streams only (the MTU matters to bulk)",
            _ => {
                "not measured: the sendfile, splice and MSG_ZEROCOPY rows run bulk server -> client only (they send, they do not receive)"
            }
        }
    }
}

/// Where the ends run: the lab, or (without root) loopback in this namespace.
enum Net {
    Lab(Lab),
    Loopback,
}

impl Net {
    fn in_server<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match self {
            Net::Lab(lab) => lab.in_bypass(f),
            Net::Loopback => f(),
        }
    }

    fn in_client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match self {
            Net::Lab(lab) => lab.in_peer(f),
            Net::Loopback => f(),
        }
    }

    /// Return the address the kernel server of `transport` listens on.
    fn kernel_server_ip(&self, transport: Transport) -> Ipv4Addr {
        match self {
            Net::Lab(lab)
                if matches!(transport, Transport::KernelDefaults | Transport::KernelUringDefaults)
                    || (transport.file_path().is_some() && !transport.needs_lab()) =>
            {
                lab.kernel_pair().bypass_ip
            }
            Net::Lab(_) => KERNEL_SERVER_IP,
            Net::Loopback => Ipv4Addr::LOCALHOST,
        }
    }
}

/// The measured conditions, for the line under the table.
#[derive(Default)]
pub(crate) struct Conditions {
    pub date: String,
    pub kernel: String,
    pub cores: usize,
    pub mtu: Option<u32>,
    pub offloads: String,
    pub xdp_mode: Option<String>,
    pub packet_mode: Option<String>,
    /// What row 3z's completions said (sends, and how many the kernel copied after all).
    pub msg_zerocopy: Option<String>,
    pub runs: usize,
    pub duration: Duration,
    pub note: Option<String>,
    /// Row 0: raw AF_XDP frames bounced between the namespaces, no TCP (medians).
    pub floor: Option<Floor>,
    /// Row 0 in each repetition that measured it, by repetition (counted from 0).
    pub floor_runs: Vec<(usize, Floor)>,
    /// The bulk floors (raw AF_XDP frames streamed one way), each measurement of each
    /// repetition, in the order measured.
    pub bulk_floors: Vec<BulkFloor>,
    /// The application row: the HTTP server on kernel sockets and on our stack.
    pub app: Option<app::AppSection>,
    /// Unmodified programs on kernel sockets and under `bypass run`.
    pub programs: Option<programs::ProgramsSection>,
    /// Resident memory per idle established connection of ours.
    pub memory: Option<memory::MemorySection>,
    /// An established connection and new clients under a SYN flood.
    pub flood: Option<flood::FloodSection>,
    /// The file the file rows serve: what, where, and its residency.
    pub file: Option<String>,
}

/// Row 0, the floor: what any bypass stack could reach on this veth pair.
#[derive(Clone, Debug, Default)]
pub(crate) struct Floor {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub rounds: usize,
    pub lost: usize,
    pub mode: String,
}

impl Floor {
    /// Return the median of each percentile over `floors`, the round trips and losses of all
    /// of them; `None` if there are none.
    fn median(floors: &[Floor]) -> Option<Floor> {
        let first = floors.first()?;
        let median = |f: fn(&Floor) -> f64| {
            let mut v: Vec<f64> = floors.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Some(Floor {
            p50_us: median(|f| f.p50_us),
            p99_us: median(|f| f.p99_us),
            p999_us: median(|f| f.p999_us),
            rounds: floors.iter().map(|f| f.rounds).sum(),
            lost: floors.iter().map(|f| f.lost).sum(),
            mode: first.mode.clone(),
        })
    }
}

/// A bulk floor of one repetition: MTU-sized raw AF_XDP frames streamed one way, the
/// direction of a bulk workload's stream (see [`bypass_lab::bulk_floor`]).
#[derive(Clone, Debug)]
pub(crate) struct BulkFloor {
    /// The repetition (counted from 0).
    pub rep: usize,
    /// The bulk workload whose direction the frames go: [`Workload::BulkUp`] peer -> bypass
    /// side (px0 -> bx0, client -> server), [`Workload::BulkDown`] the other way.
    pub workload: Workload,
    /// At [`JUMBO_MTU`] (multi-buffer), else at [`MTU`].
    pub jumbo: bool,
    /// Payload received, Gbit/s.
    pub gbit: f64,
    /// Frames sent and frames of those that never arrived, over the whole run.
    pub sent: u64,
    pub lost: u64,
    /// The receiving socket's mode.
    pub mode: String,
}

impl BulkFloor {
    /// Return the MTU it ran at.
    pub fn mtu(&self) -> u32 {
        if self.jumbo { JUMBO_MTU } else { MTU }
    }

    /// Return which way the frames went, by interface.
    pub fn path(&self) -> &'static str {
        if self.workload == Workload::BulkDown { "bx0 -> px0" } else { "px0 -> bx0" }
    }
}

/// Measure the bulk floor of `workload` (bulk) in `lab` at the jumbo MTU or at [`MTU`]:
/// `warmup`, then `duration` timed.
fn measure_bulk_floor(
    lab: &Lab,
    rep: usize,
    workload: Workload,
    jumbo: bool,
    warmup: Duration,
    duration: Duration,
) -> Result<BulkFloor, String> {
    use bypass_lab::bulk_floor::{Direction, xdp_stream};
    // Bulk up is client -> server: the peer's px0 sends, our server's bx0 receives.
    let direction = if workload == Workload::BulkDown { Direction::BypassToPeer } else { Direction::PeerToBypass };
    let mtu = if jumbo { JUMBO_MTU } else { MTU };
    let r = xdp_stream(lab, direction, mtu, warmup, duration).map_err(|e| e.to_string())?;
    if r.frames == 0 {
        return Err("no frame arrived".into());
    }
    Ok(BulkFloor { rep, workload, jumbo, gbit: r.gbit_per_s(), sent: r.sent, lost: r.lost(), mode: r.mode })
}

/// Return the bulk floors a run of `transports` under `workloads` reads its bulk rows
/// against: (bulk workload, jumbo MTU) for each bulk workload, at [`MTU`] if a row of it runs
/// on bx0/px0 at that MTU (every lab row but the jumbo ones; row 2d's pair has the same MTU),
/// at [`JUMBO_MTU`] if a jumbo row runs it.
fn bulk_floor_keys(transports: &[Transport], workloads: &[Workload]) -> Vec<(Workload, bool)> {
    let mut keys = Vec::new();
    for &w in workloads.iter().filter(|w| w.is_bulk()) {
        let runs =
            |jumbo: bool| transports.iter().any(|t| *t != Transport::StackMemory && t.jumbo() == jumbo && t.runs(w));
        for jumbo in [false, true] {
            if runs(jumbo) {
                keys.push((w, jumbo));
            }
        }
    }
    keys
}

/// Row 0's measurements over a run, in the order measured.
#[derive(Default)]
struct Floors {
    /// Round trips of each measurement, and the time it may take.
    rounds: usize,
    limit: Duration,
    /// Each measurement, with its repetition (counted from 0).
    measured: Vec<(usize, Floor)>,
    /// Whether a measurement failed: none is tried again.
    failed: bool,
}

impl Floors {
    /// Measure the floor once in repetition `rep`, keep it, and return its p50 (µs); `None`
    /// if it has failed, this time (said once) or before.
    fn measure(&mut self, lab: &Lab, rep: usize) -> Option<f64> {
        if self.failed {
            return None;
        }
        match measure_floor(lab, self.rounds, self.limit) {
            Ok(floor) => {
                let p50 = floor.p50_us;
                self.measured.push((rep, floor));
                Some(p50)
            }
            Err(e) => {
                eprintln!("bypass demo: the raw AF_XDP floor could not be measured: {e}");
                self.failed = true;
                None
            }
        }
    }
}

/// Measure the floor in `lab` (both programs are gone when it returns).
fn measure_floor(lab: &Lab, rounds: usize, limit: Duration) -> Result<Floor, String> {
    let r = bypass_lab::floor::xdp_pingpong(lab, rounds, 64, limit).map_err(|e| e.to_string())?;
    if r.rtts.is_empty() {
        return Err("no frame came back".into());
    }
    let mut sorted: Vec<f64> = r.rtts.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    Ok(Floor {
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
        rounds: sorted.len(),
        lost: r.lost,
        mode: r.mode,
    })
}

/// Return whether to draw the progress line (it rewrites itself, so only on a terminal).
fn progress_line() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// What to run and where to write it: `bypass demo`'s options.
#[derive(Clone, Debug)]
pub struct Options {
    /// A short run: one repetition of 0.5 s per figure.
    pub quick: bool,
    /// Run only these transports (by their `--only` names), or the `http`, `memory` and
    /// `programs` sections; empty for all.
    pub only: Vec<String>,
    /// Run only these workloads (`rr-64B-1c`, ..., `connect`, or `http` and `memory`);
    /// empty for all.
    pub workload: Vec<String>,
    /// Seconds per measurement (default 2, 0.5 with `quick`).
    pub duration: Option<f64>,
    /// Repetitions of every measurement; figures are their medians (default 3, 1 with `quick`).
    pub runs: Option<u32>,
    /// Print JSON instead of the table.
    pub json: bool,
    /// Directory for results.md, results.json and the SVG charts.
    pub out: PathBuf,
}

/// Run the demo with `args`: measure, print the table (or JSON), write the results and
/// the charts to `args.out`. Needs root for the lab; without it, the kernel rows run over
/// loopback.
pub fn run(args: Options) -> Result<(), String> {
    let lab_ready = bypass_lab::testlab::check_preconditions();
    let mut transports = Vec::new();
    // The application row runs in the full demo, or when `--only` or `--workload` names it.
    let app_wanted = (args.only.is_empty() || args.only.iter().any(|n| n.trim() == app::NAME))
        && (args.workload.is_empty() || args.workload.iter().any(|n| n.trim() == app::NAME));
    // So does the memory figure, with `memory`.
    let memory_wanted = (args.only.is_empty() || args.only.iter().any(|n| n.trim() == memory::NAME))
        && (args.workload.is_empty() || args.workload.iter().any(|n| n.trim() == memory::NAME));
    // And the programs rows (nginx, redis, iperf3 under `bypass run`), with `programs`.
    let programs_wanted = (args.only.is_empty() || args.only.iter().any(|n| n.trim() == programs::NAME))
        && (args.workload.is_empty() || args.workload.iter().any(|n| n.trim() == programs::NAME));
    // And the SYN-flood figure, with `flood`.
    let flood_wanted = (args.only.is_empty() || args.only.iter().any(|n| n.trim() == flood::NAME))
        && (args.workload.is_empty() || args.workload.iter().any(|n| n.trim() == flood::NAME));
    let special = [app::NAME, memory::NAME, programs::NAME, flood::NAME];
    let only: Vec<&String> = args.only.iter().filter(|n| !special.contains(&n.trim())).collect();
    let app_only = !args.only.is_empty() && only.is_empty();
    if app_only {
        // Only the application row.
    } else if args.only.is_empty() {
        // The in-memory row is the fallback when the lab is out of reach.
        transports.extend(Transport::ALL.iter().filter(|t| lab_ready.is_err() || **t != Transport::StackMemory));
    } else {
        for name in only {
            let t = Transport::ALL.iter().find(|t| t.name() == name.trim()).ok_or_else(|| {
                let names: Vec<_> = Transport::ALL.iter().map(|t| t.name()).collect();
                format!("unknown transport `{name}` (known: {})", names.join(", "))
            })?;
            if !transports.contains(t) {
                transports.push(*t);
            }
        }
    }
    transports.sort_by_key(|t| Transport::ALL.iter().position(|a| a == t));
    let mut workloads: Vec<Workload> = WORKLOADS.to_vec();
    if !args.workload.is_empty() {
        for name in &args.workload {
            if !special.contains(&name.trim()) && !WORKLOADS.iter().any(|w| w.key() == name.trim()) {
                let keys: Vec<_> =
                    WORKLOADS.iter().map(|w| w.key()).chain(special.iter().map(|s| s.to_string())).collect();
                return Err(format!("unknown workload `{name}` (known: {})", keys.join(", ")));
            }
        }
        workloads.retain(|w| args.workload.iter().any(|n| n.trim() == w.key()));
    }
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 }).max(1) as usize;
    let duration = Duration::from_secs_f64(args.duration.unwrap_or(if args.quick { 0.5 } else { 2.0 }).max(0.05));
    let warmup = Duration::from_millis(if args.quick { 100 } else { 300 });

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = interrupted.clone();
        ctrlc::set_handler(move || interrupted.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }

    let mut conditions = Conditions {
        date: jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        runs,
        duration,
        ..Conditions::default()
    };
    let mut unavailable: Vec<(Transport, String)> = Vec::new();
    let net = match lab_ready {
        Ok(()) => {
            let lab = Lab::with_config(LabConfig { mtu: MTU, ipv6: true, ..LabConfig::new("demo") })
                .map_err(|e| format!("cannot build the lab: {e}"))?;
            let cidr = format!("{KERNEL_SERVER_IP}/{}", lab.prefix_len);
            lab.ip_bypass(&["addr", "add", &cidr, "dev", &lab.bypass_if])
                .map_err(|e| format!("cannot give bx0 the kernel server's address: {e}"))?;
            // Same frames for every row on bx0/px0: without this the kernel server on bx0
            // would send 64 KiB TSO/GSO super-frames over the veth, which our stack cannot.
            lab.in_bypass(|| netdev::segmentation_offloads_off(&lab.bypass_if))
                .map_err(|e| format!("cannot turn bx0's offloads off: {e}"))?;
            // Row 2d: the kernel as it ships, on a pair of its own with the default offloads.
            lab.add_kernel_pair(MTU).map_err(|e| format!("cannot add the default-offloads veth pair: {e}"))?;
            // The connection-rate client leaves its closed connections in TIME-WAIT: give it
            // every port above 1023 (the sysctl is per namespace).
            let range = format!("{} {}", PEER_PORTS.0, PEER_PORTS.1);
            lab.in_peer(|| std::fs::write("/proc/sys/net/ipv4/ip_local_port_range", &range))
                .map_err(|e| format!("cannot widen the peer's ephemeral port range: {e}"))?;
            conditions.mtu = Some(MTU);
            conditions.offloads = "tx checksum, TSO and GSO off on both ends of bx0/px0 (every row but 2d puts MTU-sized frames with software checksums on the wire); row 2d on bk0/pk0 with the kernel's default offloads (tx checksum, TSO, GSO on: 64 KiB super-packets cross the veth whole)".into();
            Net::Lab(lab)
        }
        Err(e) => {
            let e = match e {
                bypass_lab::testlab::LabError::NotRoot => "not root".to_string(),
                e => e.to_string(),
            };
            let why = format!(
                "no namespace lab ({e}), so no AF_PACKET or AF_XDP: running the kernel transports over loopback only"
            );
            eprintln!("bypass demo: {why}");
            conditions.offloads = "loopback defaults".into();
            conditions.note = Some(why);
            for t in transports.iter().filter(|t| t.needs_lab()) {
                unavailable.push((*t, "needs root and the namespace lab".into()));
            }
            for t in [Transport::KernelDefaults, Transport::KernelUringDefaults] {
                if transports.contains(&t) {
                    let why = "needs the namespace lab (over loopback, rows 2 and 2u already have the kernel's default offloads)";
                    unavailable.push((t, why.into()));
                }
            }
            Net::Loopback
        }
    };

    // The file the file rows serve, made once: gone with the process on every path out.
    let file_rows = workloads.contains(&Workload::File) && transports.iter().any(|t| t.file_path().is_some());
    let source = if file_rows {
        let len: u64 = if args.quick { 32 << 20 } else { 256 << 20 };
        match file::Source::create(&args.out, len) {
            Ok(s) => {
                conditions.file = Some(s.description.clone());
                Some(s)
            }
            Err(e) => {
                eprintln!("bypass demo: {e}");
                for t in transports.iter().filter(|t| t.file_path().is_some()) {
                    unavailable.push((*t, e.clone()));
                }
                None
            }
        }
    } else {
        None
    };
    // Every (workload, transport): a row of the tables, measured once per repetition.
    let mut results: Vec<RowResults> = Vec::new();
    for &workload in &workloads {
        for &t in &transports {
            // The file rows serve files only, and only they do: no row for the other pairs.
            if t.file_path().is_some() != (workload == Workload::File) {
                continue;
            }
            let mut why = unavailable.iter().find(|(u, _)| *u == t).map(|(_, why)| why.clone());
            if !t.runs(workload) {
                why = Some(t.not_run_reason().into());
            }
            results.push((t, workload, Vec::new(), why));
        }
    }
    let total = runs * results.len();
    // The progress line rewrites itself, so only on a terminal.
    let progress = progress_line();
    let mut done = 0;
    let mut port = 20000u16;
    // The floor is measured in every repetition too, beside the rows it is read against.
    let floor_wanted = workloads.iter().any(|w| *w != Workload::File)
        && transports.iter().any(|t| {
            matches!(
                t,
                Transport::StackXdp
                    | Transport::StackXdpUring
                    | Transport::StackXdpV6
                    | Transport::StackXdpBoth
                    | Transport::SmoltcpXdp
                    | Transport::SmoltcpXdpBoth
            )
        });
    let lab_up = matches!(net, Net::Lab(_));
    let mut app_bench = (app_wanted && lab_up).then(|| app::AppBench::new(duration));
    // What one repetition measures, in table order: the floor, every row, the application
    // row (its three servers, in an order of their own that rotates too).
    let mut slots: Vec<Slot> = Vec::new();
    // The rows the floor bounds get it right before and right after each of them (row 0's
    // figures are then those floors); without such a row it is a slot of its own.
    let bracketed = |t: Transport, w: Workload| floor_wanted && lab_up && w.floored() && t != Transport::StackMemory;
    if floor_wanted && lab_up && !results.iter().any(|(t, w, _, why)| why.is_none() && bracketed(*t, *w)) {
        slots.push(Slot::Floor);
    }
    // The bulk floors, measured in every repetition too, as the bulk rows they bound: each
    // right before the rows of its workload, so that the rotation keeps it beside them.
    let bulk_keys = if lab_up { bulk_floor_keys(&transports, &workloads) } else { Vec::new() };
    let mut bulk_failed = vec![false; bulk_keys.len()];
    slots.extend(slots_beside(&bulk_keys, &results.iter().map(|(_, w, _, _)| *w).collect::<Vec<_>>()));
    if app_bench.is_some() {
        slots.push(Slot::App);
    }
    let mut floors =
        Floors { rounds: if args.quick { 5_000 } else { 20_000 }, limit: duration * 4, ..Floors::default() };
    // The floor measured right after the last row it bracketed: the next slot's floor
    // before, if that slot is a bracketed row too.
    let mut floor_after: Option<f64> = None;
    'outer: for rep in 0..runs {
        for slot in rotation(&slots, rep, runs) {
            if interrupted.load(Ordering::Relaxed) {
                break 'outer;
            }
            let floor_just_measured = floor_after.take();
            match (slot, &net) {
                (Slot::Floor, Net::Lab(lab)) => {
                    if progress {
                        eprint!("\r\x1b[K[floor] raw AF_XDP frames, run {}/{runs}", rep + 1);
                    }
                    floors.measure(lab, rep);
                }
                (Slot::BulkFloor(k), Net::Lab(lab)) if !bulk_failed[k] => {
                    let (workload, jumbo) = bulk_keys[k];
                    if progress {
                        eprint!(
                            "\r\x1b[K[floor] raw AF_XDP frames, {}{}, run {}/{runs}",
                            workload.key(),
                            if jumbo { ", jumbo MTU" } else { "" },
                            rep + 1
                        );
                    }
                    match measure_bulk_floor(lab, rep, workload, jumbo, warmup, duration) {
                        Ok(floor) => conditions.bulk_floors.push(floor),
                        Err(e) => {
                            eprintln!(
                                "bypass demo: the bulk floor ({}, MTU {}) could not be measured: {e}",
                                workload.key(),
                                if jumbo { JUMBO_MTU } else { MTU }
                            );
                            bulk_failed[k] = true;
                        }
                    }
                }
                (Slot::App, Net::Lab(lab)) => {
                    if let Some(bench) = app_bench.as_mut() {
                        if progress {
                            eprint!("\r\x1b[K[app] HTTP server, kernel sockets and ours, run {}/{runs}", rep + 1);
                        }
                        bench.measure_once(lab, KERNEL_SERVER_IP, rep, &mut port);
                    }
                }
                (Slot::Row(i), _) => {
                    let (t, workload, measured, failure) = &mut results[i];
                    done += 1;
                    if failure.is_some() {
                        continue;
                    }
                    if progress {
                        eprint!(
                            "\r\x1b[K[{done:>3}/{total}] {:<16} {:<12} run {}/{runs}",
                            t.name(),
                            workload.key(),
                            rep + 1
                        );
                    }
                    port += 1;
                    let (t, workload) = (*t, *workload);
                    let source = source.as_ref();
                    // The floor right before the row: the one just measured after the row
                    // before it, or a new one.
                    let lab = match &net {
                        Net::Lab(lab) if bracketed(t, workload) => Some(lab),
                        _ => None,
                    };
                    let before = lab.and_then(|lab| {
                        floor_just_measured.or_else(|| {
                            if progress {
                                eprint!(
                                    "\r\x1b[K[floor] raw AF_XDP frames, before {}, run {}/{runs}",
                                    t.name(),
                                    rep + 1
                                );
                            }
                            floors.measure(lab, rep)
                        })
                    });
                    match measure(&net, t, workload, port, warmup, duration, &interrupted, &mut conditions, source) {
                        Ok(mut run) => {
                            if let (Some(lab), Some(before)) = (lab, before) {
                                if progress {
                                    eprint!(
                                        "\r\x1b[K[floor] raw AF_XDP frames, after {}, run {}/{runs}",
                                        t.name(),
                                        rep + 1
                                    );
                                }
                                if let Some(after) = floors.measure(lab, rep) {
                                    run.0.floor_bracket_us = Some((before, after));
                                    floor_after = Some(after);
                                }
                            }
                            measured.push((rep, run));
                        }
                        Err(e) => *failure = Some(e),
                    }
                }
                _ => {}
            }
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    if app_wanted && !interrupted.load(Ordering::Relaxed) {
        conditions.app = Some(match (app_bench, &net) {
            (Some(bench), _) => bench.finish(),
            (None, _) => {
                app::AppSection { tool: "not measured: needs root and the namespace lab".into(), rows: Vec::new() }
            }
        });
    }
    if programs_wanted && !interrupted.load(Ordering::Relaxed) {
        conditions.programs = Some(match &net {
            Net::Lab(lab) => {
                if progress {
                    eprint!("\r\x1b[K[programs] nginx, redis and iperf3, kernel and bypass run, {runs} runs");
                }
                let section = programs::measure(lab, KERNEL_SERVER_IP, runs, duration, &mut port);
                if progress {
                    eprint!("\r\x1b[K");
                }
                section
            }
            Net::Loopback => programs::ProgramsSection::default(),
        });
    }
    if memory_wanted && !interrupted.load(Ordering::Relaxed) {
        conditions.memory = Some(match &net {
            Net::Lab(lab) => {
                if progress {
                    eprint!("\r\x1b[K[memory] 10,000 idle connections to our stack");
                }
                port = port.wrapping_add(1).max(20000);
                let section = memory::measure(lab, port, KERNEL_SERVER_IP);
                if progress {
                    eprint!("\r\x1b[K");
                }
                section
            }
            Net::Loopback => memory::MemorySection {
                failure: Some("needs root and the namespace lab".into()),
                ..memory::MemorySection::default()
            },
        });
    }
    if flood_wanted && !interrupted.load(Ordering::Relaxed) {
        conditions.flood = Some(match &net {
            Net::Lab(lab) => {
                if progress {
                    eprint!("\r\x1b[K[flood] an established connection and new clients under a SYN flood, {runs} runs");
                }
                let section = flood::measure(lab, KERNEL_SERVER_IP, runs, duration, &mut port);
                if progress {
                    eprint!("\r\x1b[K");
                }
                section
            }
            Net::Loopback => flood::FloodSection {
                failure: Some("needs root and the namespace lab".into()),
                ..flood::FloodSection::default()
            },
        });
    }
    conditions.floor = Floor::median(&floors.measured.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>());
    conditions.floor_runs = floors.measured;
    let net_was_lab = matches!(net, Net::Lab(_));
    drop(net); // remove the lab before printing, on every path from here
    if interrupted.load(Ordering::Relaxed) {
        return Err(if net_was_lab { "interrupted; the lab was removed".into() } else { "interrupted".into() });
    }

    let rows: Vec<Row> = results
        .into_iter()
        .map(|(transport, workload, measured, failure)| {
            let runs: Vec<report::Run> = measured.iter().map(|(_, (run, _))| *run).collect();
            // The distribution of the repetition whose p50 is the median one.
            let mut order: Vec<usize> = (0..measured.len()).collect();
            order.sort_by(|&a, &b| runs[a].p50_us.total_cmp(&runs[b].p50_us));
            let cdf = order.get(order.len() / 2).map(|&i| measured[i].1.1.clone()).unwrap_or_default();
            let per_run = measured.iter().map(|(rep, (run, _))| (*rep, *run)).collect();
            Row {
                transport,
                workload,
                figures: if runs.is_empty() { None } else { Some(Figures::median(&runs)) },
                failure: if runs.is_empty() { failure.or(Some("no measurement".into())) } else { failure },
                runs: runs.len(),
                per_run,
                cdf,
            }
        })
        .collect();
    let mut text = report::table(&rows, &conditions);
    let mut markdown = report::markdown(&rows, &conditions, charts::MARKDOWN_LINKS);
    if let Some(app) = &conditions.app {
        text.push_str(&app::markdown(app));
        markdown.push_str(&app::markdown(app));
    }
    if let Some(p) = &conditions.programs {
        text.push_str(&programs::markdown(p));
        markdown.push_str(&programs::markdown(p));
    }
    if let Some(memory) = &conditions.memory {
        text.push_str(&memory::markdown(memory));
        markdown.push_str(&memory::markdown(memory));
    }
    if let Some(flood) = &conditions.flood {
        text.push_str(&flood::markdown(flood));
        markdown.push_str(&flood::markdown(flood));
    }
    let json = report::json(&rows, &conditions);
    if args.json {
        println!("{json}");
    } else {
        print!("{text}");
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    for (name, body) in [("results.md", markdown), ("results.json", json)] {
        let path = args.out.join(name);
        std::fs::write(&path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let mut written = vec![args.out.join("results.md"), args.out.join("results.json")];
    for (name, body) in charts::render(&rows, &conditions) {
        let path = args.out.join(name);
        std::fs::write(&path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    if !args.json {
        let written: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        println!("written: {}", written.join(", "));
    }
    Ok(())
}

/// A row's measurements as the repetitions go: its transport and workload, what each
/// repetition measured (by repetition, counted from 0), and why it stopped or never ran.
type RowResults = (Transport, Workload, Vec<(usize, report::Measured)>, Option<String>);

/// One thing a repetition measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Row 0, the raw AF_XDP floor.
    Floor,
    /// The bulk floor `bulk_keys[i]`: raw AF_XDP frames one way, for a bulk workload at an MTU.
    BulkFloor(usize),
    /// The row `results[i]`: a transport under a workload.
    Row(usize),
    /// The application row's three servers.
    App,
}

/// Return the slots of the rows, whose workloads are `rows` (grouped by workload), with each
/// bulk floor `keys[k]` right before the first row of its workload (a floor whose workload
/// has no row goes first).
fn slots_beside(keys: &[(Workload, bool)], rows: &[Workload]) -> Vec<Slot> {
    let mut slots: Vec<Slot> = (0..keys.len()).filter(|&k| !rows.contains(&keys[k].0)).map(Slot::BulkFloor).collect();
    for (i, &w) in rows.iter().enumerate() {
        if i == 0 || rows[i - 1] != w {
            slots.extend((0..keys.len()).filter(|&k| keys[k].0 == w).map(Slot::BulkFloor));
        }
        slots.push(Slot::Row(i));
    }
    slots
}

/// Return the order repetition `rep` of `runs` measures `slots` in: all of them, rotated to
/// start at slot `rep * n / runs` (n slots). A rotation, not a shuffle: the starts spread
/// evenly over the list, so across the repetitions every slot runs early, midway and late
/// alike and a slow phase of the machine lands on all rows alike; and neighbours stay
/// neighbours (the list wraps), so a row and the kernel rows of its workload that its ratios
/// divide by are measured minutes apart in no repetition, as a shuffle could leave them. A
/// rotation is reproducible too: the progress line names the same order each time.
fn rotation(slots: &[Slot], rep: usize, runs: usize) -> impl Iterator<Item = Slot> + '_ {
    let n = slots.len();
    let start = if n == 0 { 0 } else { rep * n / runs.max(1) % n };
    (0..n).map(move |i| slots[(start + i) % n])
}

/// Measure one transport once: start the server, run the client, stop the server.
#[allow(clippy::too_many_arguments)]
fn measure(
    net: &Net,
    transport: Transport,
    workload: Workload,
    port: u16,
    warmup: Duration,
    duration: Duration,
    interrupted: &AtomicBool,
    conditions: &mut Conditions,
    source: Option<&file::Source>,
) -> Result<report::Measured, String> {
    if transport == Transport::StackMemory {
        return measure_memory(workload, port, warmup, duration, interrupted);
    }
    // The jumbo rows: bx0 and px0 at the jumbo MTU for the row, back on every path out.
    let _jumbo = match net {
        Net::Lab(lab) if transport.jumbo() => Some(JumboMtu::set(lab, transport == Transport::StackXdpJumbo)?),
        _ => None,
    };
    let shared = Shared::default();
    let stack_ip = match net {
        Net::Lab(lab) if transport == Transport::StackXdpV6 => IpAddr::V6(lab.bypass_ip6),
        Net::Lab(lab) => IpAddr::V4(lab.bypass_ip),
        Net::Loopback => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let server_ip = if transport.needs_lab() { stack_ip } else { IpAddr::V4(net.kernel_server_ip(transport)) };
    let addr = SocketAddr::from((server_ip, port));
    let plan = ClientPlan { server: addr, workload, busy: transport.busy(), warmup, duration };
    let (client, server) = std::thread::scope(|scope| {
        let shared = &shared;
        let server = scope.spawn(move || {
            let result = net.in_server(|| serve(net, transport, workload, server_ip, port, shared, source));
            if result.is_err() {
                shared.stop.store(true, Ordering::SeqCst);
            }
            result
        });
        // Stop the server however the client ends, panics included.
        let stop = SetOnDrop(&shared.stop);
        let client = net.in_client(|| match (transport, net) {
            (Transport::StackPacketBoth | Transport::StackXdpBoth | Transport::SmoltcpXdpBoth, Net::Lab(lab)) => {
                userspace_client(lab, transport, &plan, shared, interrupted)
            }
            (Transport::KernelUring | Transport::KernelUringDefaults | Transport::StackXdpUring, _) => {
                uring::client(&plan, shared, interrupted)
            }
            (t, _) if t.file_path().is_some() => match source {
                Some(source) => file::client(&plan, source, shared, interrupted),
                None => Err("the file rows need the file to serve".into()),
            },
            _ => kernel::client(&plan, shared, interrupted),
        });
        drop(stop);
        // A kernel server blocked in accept(2) wakes up for one more connection and stops.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !server.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            if !transport.needs_lab() && !server.is_finished() {
                let _ = net.in_client(|| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)));
            }
        }
        let server = server.join().unwrap_or_else(|_| Err("the server thread panicked".into()));
        (client, server)
    });
    let (client, server) = both(client, server)?;
    match transport {
        Transport::StackXdp
        | Transport::StackXdpUring
        | Transport::StackXdpV6
        | Transport::StackXdpInPlace
        | Transport::StackXdpBoth
        | Transport::FileStackSendWith
        | Transport::FileStackWrite
        | Transport::FileStackSendWithMmap => conditions.xdp_mode = Some(server.mode.clone()),
        Transport::StackPacket | Transport::StackPacketBoth => conditions.packet_mode = Some(server.mode.clone()),
        Transport::KernelMsgZerocopy => conditions.msg_zerocopy = Some(server.mode.clone()),
        _ => {}
    }
    let mut run = report::Run::new(workload, &client, &server);
    // Every byte the client's read(2) returned, it copied out of its socket buffer.
    run.file = server.file.map(|counts| file::PerByte::new(&counts, client.units, client.units));
    Ok((run, report::cdf(&client.latency)))
}

/// Run the userspace client of rows 4b, 5b (ours) and 6b (smoltcp) on px0, in the calling
/// thread's namespace (the peer's).
fn userspace_client(
    lab: &Lab,
    transport: Transport,
    plan: &ClientPlan,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> Result<kernel::ClientResult, String> {
    let (ip, prefix) = (OURS_CLIENT_IP, lab.prefix_len);
    if transport == Transport::StackPacketBoth {
        let device = PacketDevice::open(&lab.peer_if).map_err(|e| format!("our client: AF_PACKET unavailable: {e}"))?;
        return ours::client(device, ip, prefix, plan, shared, interrupted);
    }
    let config = XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.peer_if, ip) };
    let device = XdpDevice::open(config).map_err(|e| format!("client: AF_XDP unavailable: {e}"))?;
    if transport == Transport::SmoltcpXdpBoth {
        smoltcp::client(device, ip, prefix, plan, shared, interrupted)
    } else {
        ours::client(device, ip, prefix, plan, shared, interrupted)
    }
}

/// Return both results, or the error that says why: the server's when it failed first.
fn both(
    client: Result<kernel::ClientResult, String>,
    server: Result<kernel::ServerResult, String>,
) -> Result<(kernel::ClientResult, kernel::ServerResult), String> {
    match (client, server) {
        (Ok(c), Ok(s)) => Ok((c, s)),
        (Err(c), Err(s)) => Err(if c.contains("server failed to start") { s } else { c }),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
    }
}

/// Measure our stack against itself over the in-memory link, both ends in this process.
fn measure_memory(
    workload: Workload,
    port: u16,
    warmup: Duration,
    duration: Duration,
    interrupted: &AtomicBool,
) -> Result<report::Measured, String> {
    // A perfect link without delay: frames are due as soon as they are sent.
    let link = LinkConfig::default().with_delay(Duration::ZERO);
    let (client_device, server_device) = MemoryLink::new(link, link, 1).clock(Clock::real()).build();
    let server_addr = SocketAddrV4::new(MEMORY_SERVER_IP, port);
    let plan = ClientPlan { server: SocketAddr::V4(server_addr), workload, busy: true, warmup, duration };
    let shared = Shared::default();
    let (client, server) = std::thread::scope(|scope| {
        let shared = &shared;
        let server = scope.spawn(move || {
            let result = stack::server(server_device, MEMORY_SERVER_IP, 24, port, workload, shared);
            if result.is_err() {
                shared.stop.store(true, Ordering::SeqCst);
            }
            result
        });
        let stop = SetOnDrop(&shared.stop);
        let client = ours::client(client_device, MEMORY_CLIENT_IP, 24, &plan, shared, interrupted);
        drop(stop);
        (client, server.join().unwrap_or_else(|_| Err("the server thread panicked".into())))
    });
    let (client, server) = both(client, server)?;
    Ok((report::Run::new(workload, &client, &server), report::cdf(&client.latency)))
}

/// bx0 and px0 at [`JUMBO_MTU`] while it lives, at [`MTU`] again after.
struct JumboMtu<'a> {
    lab: &'a Lab,
    /// bx0's transmit checksum offload was turned on for the row (row 5j), and goes off again.
    tx_checksum: bool,
}

impl<'a> JumboMtu<'a> {
    /// Set the jumbo MTU on bx0 and px0, and with `tx_checksum` turn bx0's transmit checksum
    /// offload on (the veth's default, which the lab turned off): our stack's device asks the
    /// kernel for its TCP checksums (AF_XDP TX metadata), and a veth that offloads them passes
    /// them to the peer unverified, as for row 2d; with the offload off the kernel would sum
    /// them in software instead (`skb_checksum_help`) and the peer verify them.
    fn set(lab: &'a Lab, tx_checksum: bool) -> Result<JumboMtu<'a>, String> {
        let mut guard = JumboMtu { lab, tx_checksum: false };
        guard.mtu(JUMBO_MTU).map_err(|e| format!("cannot set the jumbo MTU {JUMBO_MTU}: {e}"))?;
        if tx_checksum {
            guard.set_tx_checksum(true).map_err(|e| format!("cannot turn bx0's tx checksum offload on: {e}"))?;
            guard.tx_checksum = true;
        }
        Ok(guard)
    }

    fn mtu(&self, mtu: u32) -> Result<(), String> {
        let mtu = mtu.to_string();
        self.lab.ip_bypass(&["link", "set", "dev", &self.lab.bypass_if, "mtu", &mtu]).map_err(|e| e.to_string())?;
        self.lab.ip_peer(&["link", "set", "dev", &self.lab.peer_if, "mtu", &mtu]).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn set_tx_checksum(&self, on: bool) -> Result<(), String> {
        let iface = &self.lab.bypass_if;
        self.lab
            .in_bypass(|| netdev::set_offloads(iface, &[(netdev::Offload::TxChecksum, on)]))
            .map_err(|e| e.to_string())
    }
}

impl Drop for JumboMtu<'_> {
    fn drop(&mut self) {
        if self.tx_checksum
            && let Err(e) = self.set_tx_checksum(false)
        {
            eprintln!("bypass demo: cannot turn bx0's tx checksum offload back off: {e}");
        }
        if let Err(e) = self.mtu(MTU) {
            eprintln!("bypass demo: cannot set the MTU back to {MTU}: {e}");
        }
    }
}

/// Set the flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Start the server of `transport` in the calling thread's namespace and serve one client.
fn serve(
    net: &Net,
    transport: Transport,
    workload: Workload,
    ip: IpAddr,
    port: u16,
    shared: &Shared,
    source: Option<&file::Source>,
) -> Result<kernel::ServerResult, String> {
    if let Some(path) = transport.file_path() {
        let source = source.ok_or("the file rows need the file to serve")?;
        if let Net::Lab(lab) = net
            && transport.needs_lab()
        {
            let config = XdpConfig { busy_poll: true, ..XdpConfig::new(&lab.bypass_if, ip) };
            let device = XdpDevice::open(config).map_err(|e| format!("AF_XDP unavailable: {e}"))?;
            return file::stack_server(device, ip, lab.prefix_len, port, path, source, shared);
        }
        let listener = TcpListener::bind((ip, port)).map_err(|e| format!("file server: bind {ip}:{port}: {e}"))?;
        return file::server(listener, path, source, shared);
    }
    match transport {
        Transport::KernelBlocking | Transport::KernelBusy | Transport::KernelDefaults | Transport::KernelBusyJumbo => {
            let listener =
                TcpListener::bind((ip, port)).map_err(|e| format!("kernel echo server: bind {ip}:{port}: {e}"))?;
            kernel::server(listener, transport.busy(), workload, shared)
        }
        Transport::KernelUring | Transport::KernelUringDefaults => {
            let listener =
                TcpListener::bind((ip, port)).map_err(|e| format!("io_uring echo server: bind {ip}:{port}: {e}"))?;
            uring::server(listener, workload, shared)
        }
        Transport::KernelZerocopy => {
            let listener =
                TcpListener::bind((ip, port)).map_err(|e| format!("sendfile server: bind {ip}:{port}: {e}"))?;
            zerocopy::server(listener, zerocopy::Mode::Sendfile, shared)
        }
        Transport::KernelSplice => {
            let listener =
                TcpListener::bind((ip, port)).map_err(|e| format!("splice server: bind {ip}:{port}: {e}"))?;
            zerocopy::server(listener, zerocopy::Mode::Splice, shared)
        }
        Transport::KernelMsgZerocopy => {
            let listener =
                TcpListener::bind((ip, port)).map_err(|e| format!("MSG_ZEROCOPY server: bind {ip}:{port}: {e}"))?;
            zerocopy::server(listener, zerocopy::Mode::MsgZerocopy, shared)
        }
        Transport::StackPacket | Transport::StackPacketBoth => {
            let Net::Lab(lab) = net else { return Err("needs the namespace lab".into()) };
            let device = PacketDevice::open(&lab.bypass_if).map_err(|e| format!("AF_PACKET unavailable: {e}"))?;
            stack::server(device, ip, lab.prefix_len, port, workload, shared)
        }
        Transport::StackXdp
        | Transport::StackXdpUring
        | Transport::StackXdpV6
        | Transport::StackXdpInPlace
        | Transport::StackXdpBoth
        | Transport::SmoltcpXdp
        | Transport::SmoltcpXdpBoth
        | Transport::StackXdpJumbo
        | Transport::SmoltcpXdpJumbo => {
            let Net::Lab(lab) = net else { return Err("needs the namespace lab".into()) };
            // Row 5j has the kernel complete our TCP checksums (see JumboMtu::set); smoltcp
            // writes whole checksums, which a device that completes them would spoil.
            let tx_checksum_offload = transport == Transport::StackXdpJumbo;
            let config = XdpConfig { busy_poll: true, tx_checksum_offload, ..XdpConfig::new(&lab.bypass_if, ip) };
            let device = XdpDevice::open(config).map_err(|e| format!("AF_XDP unavailable: {e}"))?;
            match (transport, ip) {
                (Transport::SmoltcpXdp | Transport::SmoltcpXdpBoth | Transport::SmoltcpXdpJumbo, IpAddr::V4(ip)) => {
                    smoltcp::server(device, ip, lab.prefix_len, port, workload, shared)
                }
                (_, IpAddr::V6(_)) => stack::server(device, ip, lab.prefix6_len, port, workload, shared),
                (Transport::StackXdpInPlace, _) => {
                    stack::server_with(device, ip, lab.prefix_len, port, workload, true, shared)
                }
                _ => stack::server(device, ip, lab.prefix_len, port, workload, shared),
            }
        }
        Transport::StackMemory => Err("the in-memory row is measured by measure_memory".into()),
        Transport::FileReadWrite
        | Transport::FileMmapWrite
        | Transport::FileSendfile
        | Transport::FileSplice
        | Transport::FileMsgZerocopy
        | Transport::FileStackSendWith
        | Transport::FileStackWrite
        | Transport::FileStackSendWithMmap => Err("the file rows are served above".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitions_rotate_through_every_slot() {
        let slots: Vec<Slot> = std::iter::once(Slot::Floor).chain((0..5).map(Slot::Row)).chain([Slot::App]).collect();
        let runs = 3;
        let orders: Vec<Vec<Slot>> = (0..runs).map(|rep| rotation(&slots, rep, runs).collect()).collect();
        // Each repetition measures every slot once.
        for order in &orders {
            let mut seen = order.clone();
            seen.sort_by_key(|s| format!("{s:?}"));
            let mut all = slots.clone();
            all.sort_by_key(|s| format!("{s:?}"));
            assert_eq!(seen, all);
        }
        // The starts spread evenly: 7 slots over 3 repetitions start at 0, 2 and 4.
        assert_eq!([orders[0][0], orders[1][0], orders[2][0]], [Slot::Floor, Slot::Row(1), Slot::Row(3)]);
        // Neighbours stay neighbours (the list wraps).
        assert_eq!(&orders[2][..4], &[Slot::Row(3), Slot::Row(4), Slot::App, Slot::Floor]);
        // One repetition runs in table order; no slots, no order.
        assert_eq!(rotation(&slots, 0, 1).collect::<Vec<_>>(), slots);
        assert_eq!(rotation(&[], 2, 3).count(), 0);
    }

    #[test]
    fn each_bulk_floor_goes_right_before_the_rows_of_its_workload() {
        use Workload::{BulkDown, BulkUp, Connect};
        let rr = Workload::Rr { size: 64, conns: 1 };
        let keys = [(BulkUp, false), (BulkUp, true), (BulkDown, false)];
        let rows = [rr, rr, BulkUp, BulkUp, BulkDown, Connect];
        use Slot::{BulkFloor as F, Row as R};
        assert_eq!(slots_beside(&keys, &rows), vec![R(0), R(1), F(0), F(1), R(2), R(3), F(2), R(4), R(5)]);
        // A floor with no row of its workload still runs, first; no rows, only floors.
        assert_eq!(slots_beside(&keys, &[rr, BulkUp]), vec![F(2), R(0), F(0), F(1), R(1)]);
        assert_eq!(slots_beside(&keys, &[]), vec![F(0), F(1), F(2)]);
        assert_eq!(slots_beside(&[], &rows).len(), rows.len());
    }

    #[test]
    fn bulk_floors_follow_the_bulk_rows_selected() {
        let all = [Workload::BulkUp, Workload::BulkDown, Workload::Connect];
        // A 1500 row and a jumbo row: both MTUs, both directions; no floor for connect.
        let keys = bulk_floor_keys(&[Transport::StackXdp, Transport::StackXdpJumbo], &all);
        assert_eq!(
            keys,
            [
                (Workload::BulkUp, false),
                (Workload::BulkUp, true),
                (Workload::BulkDown, false),
                (Workload::BulkDown, true)
            ]
        );
        // Kernel rows are read against it too; the in-memory row has no veth.
        assert_eq!(bulk_floor_keys(&[Transport::KernelBusy], &[Workload::BulkDown]), [(Workload::BulkDown, false)]);
        assert!(bulk_floor_keys(&[Transport::StackMemory], &all).is_empty());
        assert!(bulk_floor_keys(&[Transport::StackXdp], &[Workload::Connect]).is_empty());
        // The sendfile row sends only: no bulk-up floor for it.
        assert_eq!(bulk_floor_keys(&[Transport::KernelZerocopy], &all), [(Workload::BulkDown, false)]);
    }
}
