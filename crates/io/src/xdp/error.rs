//! Why opening an AF_XDP device failed, and what to do about it.

use std::io;

/// An error from [`XdpDevice::open`](super::XdpDevice::open) or
/// [`XdpDevice::open_queues`](super::XdpDevice::open_queues): each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The kernel refused for lack of privileges.
    #[error("{what} was not permitted: run as root (AF_XDP and XDP programs need CAP_NET_ADMIN and CAP_BPF)")]
    NotPermitted {
        /// What was being attempted.
        what: String,
        /// The system call's error.
        source: io::Error,
    },
    /// The interface does not exist in the calling thread's network namespace.
    #[error("there is no interface {iface} in this network namespace: check the name with `ip link`")]
    NoSuchInterface {
        /// The interface name.
        iface: String,
        /// The system call's error.
        source: io::Error,
    },
    /// The queue index is beyond the interface's queues.
    #[error(
        "cannot bind to queue {queue} of {iface}: use a queue below its queue count (`numrxqueues` in `ip -d link show {iface}`)"
    )]
    NoSuchQueue {
        /// The interface name.
        iface: String,
        /// The queue index.
        queue: u32,
        /// The system call's error.
        source: io::Error,
    },
    /// Another AF_XDP socket already uses the queue.
    #[error("queue {queue} of {iface} is already used by another AF_XDP socket: stop the program that holds it")]
    QueueBusy {
        /// The interface name.
        iface: String,
        /// The queue index.
        queue: u32,
        /// The system call's error.
        source: io::Error,
    },
    /// The interface or the kernel lacks XDP or AF_XDP support in the requested form.
    #[error(
        "{what} is not supported by {iface} or by this kernel: try XdpMode::Generic, or a kernel with XDP and AF_XDP"
    )]
    Unsupported {
        /// The interface name.
        iface: String,
        /// What was being attempted.
        what: String,
        /// The system call's error.
        source: io::Error,
    },
    /// Another XDP program is attached to the interface.
    #[error(
        "another XDP program is already attached to {iface}: remove it with `ip link set dev {iface} xdp off` \
         (or stop the process holding it, if it was attached through a BPF link)"
    )]
    AlreadyAttached {
        /// The interface name.
        iface: String,
        /// The system call's error.
        source: io::Error,
    },
    /// Driver-mode XDP refused the interface's MTU (ERANGE): the driver takes no frame that
    /// large, or the kernel loaded the program without multi-buffer support (before 5.18).
    #[error(
        "the MTU of {iface} (or of its veth peer) is too large for driver-mode XDP: lower it \
         (`ip link set dev {iface} mtu 1500`) or use XdpMode::Generic"
    )]
    MtuTooLargeForDriver {
        /// The interface name.
        iface: String,
        /// The system call's error.
        source: io::Error,
    },
    /// A full-size frame of the interface needs more UMEM frames than the kernel sends as one
    /// packet ([`MAX_FRAMES_PER_PACKET`](super::MAX_FRAMES_PER_PACKET)).
    #[error(
        "{iface} has MTU {mtu}, but one packet may span at most 18 UMEM frames and frames of {frame_size} bytes then \
         hold an MTU of at most {max_mtu}: raise frame_size to 4096, or lower the MTU \
         (`ip link set dev {iface} mtu {max_mtu}`)"
    )]
    MtuTooLargeForFrame {
        /// The interface name.
        iface: String,
        /// The interface's MTU.
        mtu: u32,
        /// The configured frame size.
        frame_size: u32,
        /// The largest MTU that frames of this size carry.
        max_mtu: u32,
    },
    /// Zero-copy was required but the driver or the XDP mode does not offer it.
    #[error(
        "zero-copy AF_XDP was required but {iface} queue {queue} does not support it: use ZeroCopy::Auto or ZeroCopy::Off"
    )]
    ZeroCopyUnsupported {
        /// The interface name.
        iface: String,
        /// The queue index.
        queue: u32,
        /// The system call's error.
        source: io::Error,
    },
    /// The kernel's verifier rejected the XDP program (a bug in this crate: please report it with the log).
    #[error("the kernel rejected the XDP program (a bug in bypass-io: report it with this verifier log):\n{log}")]
    ProgramRejected {
        /// The verifier log.
        log: String,
        /// The system call's error.
        source: io::Error,
    },
    /// The UMEM could not be pinned in memory.
    #[error(
        "cannot lock {bytes} bytes of UMEM memory: run as root, or raise the memlock limit (`ulimit -l unlimited`)"
    )]
    MemoryLock {
        /// Size of the UMEM.
        bytes: usize,
        /// The system call's error.
        source: io::Error,
    },
    /// The configuration is inconsistent.
    #[error("invalid AF_XDP configuration: {0}")]
    InvalidConfig(String),
    /// Any other system call failure.
    #[error("{what} failed: check the interface and the kernel log (`dmesg`)")]
    Io {
        /// What was being attempted.
        what: String,
        /// The system call's error.
        source: io::Error,
    },
}

impl XdpError {
    /// Classify a system call error that has no more specific meaning at its call site.
    pub(crate) fn from_io(what: impl Into<String>, source: io::Error) -> XdpError {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => XdpError::NotPermitted { what, source },
            _ => XdpError::Io { what, source },
        }
    }
}
