//! The chunks that carry bytes between a stack's thread and the application, recycled.

use crossbeam_channel::{Receiver, Sender, bounded};

/// Bytes per chunk: what one message between the threads carries at most.
pub(crate) const CHUNK: usize = 16 * 1024;
/// Chunks the pool keeps for reuse (4 MiB); more are freed when they come back.
const POOL_MAX: usize = 256;

/// A buffer of [`CHUNK`] bytes, `len` of them in use.
pub(crate) struct Chunk {
    pub(crate) data: Box<[u8]>,
    pub(crate) len: usize,
}

impl Chunk {
    /// Return the bytes in use.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// Recycled chunks, shared by every thread of a runtime (a lock-free channel), so the data
/// path allocates only while the pool warms up.
#[derive(Clone)]
pub(crate) struct Pool {
    give: Sender<Box<[u8]>>,
    take: Receiver<Box<[u8]>>,
}

impl Pool {
    pub(crate) fn new() -> Pool {
        let (give, take) = bounded(POOL_MAX);
        Pool { give, take }
    }

    /// Return an empty chunk.
    pub(crate) fn take(&self) -> Chunk {
        let data = self.take.try_recv().unwrap_or_else(|_| vec![0; CHUNK].into_boxed_slice());
        Chunk { data, len: 0 }
    }

    /// Take a chunk back (dropped when the pool is full).
    pub(crate) fn give(&self, chunk: Chunk) {
        let _ = self.give.try_send(chunk.data);
    }
}
