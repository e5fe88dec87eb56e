//! The names the host gives its connections and listeners.

/// Names a connection owned by the host; stale ids (of removed connections) are detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketId {
    pub(super) index: u32,
    pub(super) generation: u32,
}

/// Names a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u16);
