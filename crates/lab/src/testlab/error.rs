//! Why a lab could not be set up.

use std::io;

use bypass_io::netdev;

/// Why a lab could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces need root.
    #[error("network labs need root (CAP_SYS_ADMIN and CAP_NET_ADMIN): run the tests as root")]
    NotRoot,
    /// A lab of that name exists already.
    #[error("a lab named `{0}` exists already: use it, or remove it first with `bypass lab down --name {0}`")]
    Exists(String),
    /// A command-line tool is missing (labs run only `ip`, from iproute2).
    #[error("`{0}` is not installed: install it (Debian: `apt-get install -y iproute2`)")]
    MissingTool(String),
    /// The peer's offloads could not be set.
    #[error("set the offloads of the lab's veth: {0}")]
    Offloads(#[from] netdev::NetdevError),
    /// A setup command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// The configuration asks for something a lab cannot be.
    #[error("invalid lab configuration: {0}")]
    InvalidConfig(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being attempted.
        what: String,
        /// The error.
        source: io::Error,
    },
}
