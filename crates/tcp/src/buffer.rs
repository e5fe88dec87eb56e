//! A fixed-capacity byte ring for the send and receive buffers.
//!
//! The storage is allocated in [`RingBuffer::new`] and never shrinks; it grows only
//! when autotuning asks ([`RingBuffer::grow`], a few times in a connection's life), so
//! the data path does no allocation (house style). A finished ring
//! gives its storage back, zeroed, with [`RingBuffer::into_storage`], for the
//! next ring to take with [`RingBuffer::with_storage`]: a host that opens and
//! closes connections at a high rate then allocates nothing per connection.
//!
//! The ring holds *committed* bytes, readable from the front, followed by an
//! *uncommitted* area up to the capacity:
//!
//! ```text
//!  front                    front + len                 front + capacity
//!    | committed (readable)      | uncommitted (write_at)       |
//! ```
//!
//! - The send side appends with [`push`](RingBuffer::push), or writes in place into
//!   [`free_slices_mut`](RingBuffer::free_slices_mut) and commits what it wrote with
//!   [`commit`](RingBuffer::commit); it reads segments to
//!   (re)transmit with [`peek`](RingBuffer::peek) at their offset from
//!   SND.UNA, and drops acknowledged bytes with
//!   [`discard`](RingBuffer::discard) (RFC 9293 section 3.8.6 keeps data until
//!   acknowledged).
//! - The receive side places a segment at its offset from the front with
//!   [`write_at`](RingBuffer::write_at), even out of order, and makes bytes
//!   readable with [`commit`](RingBuffer::commit) once they are contiguous
//!   (RFC 9293 section 3.10.7.4, "seventh, process the segment text"); the
//!   application drains them with [`pop`](RingBuffer::pop), or reads them in place
//!   through [`as_slices`](RingBuffer::as_slices) and then [`discard`](RingBuffer::discard)s them.
//!
//! Consuming bytes from the front moves the front but never moves or clears
//! bytes already written beyond the committed data, so out-of-order data stays
//! at the right place while the application reads.

/// A ring of bytes with a committed prefix and a writable tail.
///
/// Offsets in every method count from the front of the ring (the first
/// committed byte), not from the start of the storage.
pub struct RingBuffer {
    /// The storage: `capacity` bytes, or none while the ring is empty and detached
    /// ([`detach`](Self::detach)); the first write attaches storage again.
    storage: Box<[u8]>,
    /// The capacity, whether or not storage is attached.
    capacity: usize,
    /// Index in `storage` of the first committed byte.
    head: usize,
    /// Number of committed bytes.
    len: usize,
    /// Every byte of `storage` ever written lies below this index, so
    /// [`into_storage`](Self::into_storage) zeroes only that prefix.
    written: usize,
}

impl RingBuffer {
    /// Return an empty ring holding at most `capacity` bytes, allocated now and never again.
    pub fn new(capacity: usize) -> Self {
        RingBuffer::with_storage(Storage::new(capacity))
    }

    /// Return an empty ring over `storage` (see [`Storage`]): no allocation.
    pub fn with_storage(storage: Storage) -> Self {
        RingBuffer { capacity: storage.capacity, storage: storage.bytes, head: 0, len: 0, written: 0 }
    }

    /// Give the storage back while the ring is empty, zeroed as in
    /// [`into_storage`](Self::into_storage), keeping the ring's capacity: an idle connection
    /// then holds no buffer memory. The caller makes sure nothing is placed beyond the
    /// committed bytes (out-of-order data would be lost). `None` if the ring holds bytes or
    /// has no storage.
    pub fn detach(&mut self) -> Option<Storage> {
        if self.len != 0 || self.storage.is_empty() {
            return None;
        }
        let mut bytes = std::mem::take(&mut self.storage);
        bytes[..self.written].fill(0);
        self.head = 0;
        self.written = 0;
        Some(Storage { bytes, capacity: self.capacity })
    }

    /// Return how many bytes from the start of the storage have been written since it was
    /// attached: what [`detach`](Self::detach) has to zero.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Return whether the ring has no storage (see [`detach`](Self::detach)).
    pub fn is_detached(&self) -> bool {
        self.storage.is_empty() && self.capacity > 0
    }

    /// Give a detached ring `storage` of its capacity; hand it back otherwise. A detached ring
    /// that is written to without this allocates its storage itself.
    pub fn attach(&mut self, storage: Storage) -> Result<(), Storage> {
        if !self.is_detached() || !storage.is_allocated() || storage.capacity() != self.capacity {
            return Err(storage);
        }
        self.storage = storage.bytes;
        Ok(())
    }

    /// Attach newly allocated storage if the ring has none.
    #[inline]
    fn ensure_storage(&mut self) {
        if self.storage.len() != self.capacity {
            self.storage = vec![0u8; self.capacity].into_boxed_slice();
        }
    }

    /// Give the storage back for another ring, zeroed as if new: only the bytes ever
    /// written are cleared, so a ring that carried little is cheap to recycle.
    pub fn into_storage(self) -> Storage {
        let mut bytes = self.storage;
        bytes[..self.written].fill(0);
        Storage { bytes, capacity: self.capacity }
    }

    /// Return the number of bytes the ring can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Return the number of committed bytes readable from the front.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Return whether no committed bytes are readable.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Return the room left after the committed bytes: `capacity() - len()`.
    #[inline]
    pub fn free(&self) -> usize {
        self.capacity() - self.len
    }

    /// Append as much of `data` as fits in [`free`](Self::free) and commit it; return the count.
    #[inline]
    pub fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        self.copy_in(self.len, &data[..n]);
        self.len += n;
        n
    }

    /// Copy committed bytes from the front into `buf` and consume them; return the count.
    /// (The connection reads with `peek` and `discard`; the tests use this.)
    #[cfg(test)]
    pub fn pop(&mut self, buf: &mut [u8]) -> usize {
        let n = self.peek(0, buf);
        self.discard(n);
        n
    }

    /// Consume `n` committed bytes from the front, or all of them if `n > len()`.
    ///
    /// Bytes already placed beyond the committed data with
    /// [`write_at`](Self::write_at) keep their position relative to the
    /// data: after `discard(n)` a byte written at offset `o` is at `o - n`.
    #[inline]
    pub fn discard(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            return;
        }
        self.head = self.wrap(self.head + n);
        self.len -= n;
    }

    /// Copy committed bytes starting `offset` bytes after the front into `buf`
    /// without consuming them; return the count (0 if `offset >= len()`).
    ///
    /// Inlined (forced) into the segment writers: left to the compiler, the output side's
    /// prediction called it.
    #[inline(always)]
    pub fn peek(&self, offset: usize, buf: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = buf.len().min(self.len - offset);
        self.copy_out(offset, &mut buf[..n]);
        n
    }

    /// Write `data` into the uncommitted area starting `offset` bytes after
    /// the front, without changing [`len`](Self::len); return how many bytes
    /// of `data` now lie inside the ring.
    ///
    /// Bytes that would land at or past the capacity are not written, so the
    /// return value is `min(data.len(), capacity() - offset)` (0 when
    /// `offset >= capacity()`). The caller is expected to pass
    /// `offset >= len()`; bytes of `data` that would fall on committed data are
    /// skipped rather than overwrite what the application has yet to read, but
    /// still count in the return value.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let cap = self.capacity();
        if offset >= cap {
            return 0;
        }
        let n = data.len().min(cap - offset);
        // Keep committed bytes intact: start writing at `len` at the earliest.
        let skip = self.len.saturating_sub(offset).min(n);
        self.copy_in(offset + skip, &data[skip..n]);
        n
    }

    /// Make `n` more bytes readable: those placed right after the committed data, with
    /// [`write_at`](Self::write_at) or through [`free_slices_mut`](Self::free_slices_mut).
    /// Clamp at the capacity.
    pub fn commit(&mut self, n: usize) {
        self.len = self.len.saturating_add(n).min(self.capacity());
    }

    /// Grow the ring to `capacity` bytes (no change if it is not larger), keeping every byte
    /// at its offset from the front, committed or placed beyond with
    /// [`write_at`](Self::write_at).
    ///
    /// This allocates: it is for receive-window and send-buffer autotuning, which grows a
    /// connection's rings a few times in its life (doubling), not for the data path.
    pub fn grow(&mut self, capacity: usize) {
        let old = self.capacity();
        if capacity <= old {
            return;
        }
        self.capacity = capacity;
        if self.storage.is_empty() {
            // Detached: the storage is allocated at the size when it is next needed.
            return;
        }
        let mut storage = vec![0u8; capacity].into_boxed_slice();
        // The whole old ring in order from the front: committed bytes and anything placed
        // after them land at the same offsets.
        let first = old - self.head;
        storage[..first].copy_from_slice(&self.storage[self.head..]);
        storage[first..old].copy_from_slice(&self.storage[..self.head]);
        self.storage = storage;
        self.head = 0;
        self.written = old;
    }

    /// Move the front back to the start of the storage if the ring is empty. The caller
    /// makes sure nothing is placed beyond the committed bytes (out-of-order data would be
    /// left behind). A reader that keeps up then works in the first kilobytes of a buffer
    /// autotuning grew to megabytes, warm in the cache, instead of sweeping all of it.
    #[inline]
    pub fn rewind_if_empty(&mut self) {
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// Drop every byte, committed or not, and reset the front to the start of the storage.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Return the committed bytes as at most two slices, front first, without copying.
    ///
    /// The second slice is empty unless the committed data wraps around the
    /// end of the storage.
    pub fn as_slices(&self) -> (&[u8], &[u8]) {
        let first_len = self.len.min(self.capacity() - self.head);
        let first = &self.storage[self.head..self.head + first_len];
        let second = &self.storage[..self.len - first_len];
        (first, second)
    }

    /// Return the free area after the committed bytes as at most two mutable slices, front
    /// first, to write in place; then [`commit`](Self::commit) what was written at the start
    /// of the first slice (and on into the second).
    ///
    /// The slices' lengths add up to [`free`](Self::free); the second is empty unless the
    /// free area wraps around the end of the storage, and both are empty when the ring is
    /// full. They hold whatever lies there: old bytes, and anything placed with
    /// [`write_at`](Self::write_at) and not yet committed, which writing here overwrites (so
    /// this is for the send side, which places nothing out of order).
    ///
    /// The ring cannot tell which of these bytes the caller writes, so it counts all of
    /// them as written: [`into_storage`](Self::into_storage) clears them for the next ring.
    pub fn free_slices_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        let free = self.free();
        if free == 0 {
            return (&mut [], &mut []);
        }
        self.ensure_storage();
        let start = self.wrap(self.head + self.len);
        let first = free.min(self.capacity() - start);
        let second = free - first;
        // Every byte lent out may come back written.
        self.written = self.written.max(start + first).max(second);
        let (low, high) = self.storage.split_at_mut(start);
        (&mut high[..first], &mut low[..second])
    }

    /// Reduce a storage index in `0..2 * capacity` to `0..capacity`.
    #[inline]
    fn wrap(&self, index: usize) -> usize {
        let cap = self.capacity();
        if index >= cap { index - cap } else { index }
    }

    /// Copy `data` into the ring at logical `offset`; the caller ensures
    /// `offset + data.len() <= capacity()`.
    ///
    /// Inlined (forced) down to the common case, storage attached and no wrap: one bounds
    /// test that the slice's own then needs not repeat, and `memcpy`. Anything else in
    /// [`copy_in_any`](Self::copy_in_any), out of line.
    #[inline(always)]
    fn copy_in(&mut self, offset: usize, data: &[u8]) {
        let start = self.head + offset;
        let end = start + data.len();
        // Storage is either attached (`capacity` bytes) or none: within it, attached, and
        // `start` below the capacity needs no wrap.
        if !data.is_empty() && end <= self.storage.len() {
            self.storage[start..end].copy_from_slice(data);
            self.written = self.written.max(end);
            return;
        }
        self.copy_in_any(offset, data);
    }

    /// [`copy_in`](Self::copy_in) for any case: no data, storage to attach, or a wrap.
    #[inline(never)]
    fn copy_in_any(&mut self, offset: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.ensure_storage();
        let start = self.wrap(self.head + offset);
        let first = data.len().min(self.capacity() - start);
        self.storage[start..start + first].copy_from_slice(&data[..first]);
        // The wrapped part only when there is one: an empty copy still calls `memcpy`.
        if first < data.len() {
            self.storage[..data.len() - first].copy_from_slice(&data[first..]);
        }
        // A wrapped tail lands below `start`, so the first part bounds everything written.
        self.written = self.written.max(start + first);
    }

    /// Copy bytes at logical `offset` into `buf`; the caller ensures
    /// `offset + buf.len() <= capacity()`.
    ///
    /// Inlined (forced) down to the case of no wrap, as [`copy_in`](Self::copy_in); the
    /// rest in [`copy_out_any`](Self::copy_out_any), out of line.
    #[inline(always)]
    fn copy_out(&self, offset: usize, buf: &mut [u8]) {
        let start = self.head + offset;
        let end = start + buf.len();
        if end <= self.storage.len() {
            buf.copy_from_slice(&self.storage[start..end]);
            return;
        }
        self.copy_out_any(offset, buf);
    }

    /// [`copy_out`](Self::copy_out) for any case.
    #[inline(never)]
    fn copy_out_any(&self, offset: usize, buf: &mut [u8]) {
        if buf.is_empty() {
            return;
        }
        let start = self.wrap(self.head + offset);
        let first = buf.len().min(self.capacity() - start);
        let rest = buf.len() - first;
        buf[..first].copy_from_slice(&self.storage[start..start + first]);
        if rest > 0 {
            buf[first..].copy_from_slice(&self.storage[..rest]);
        }
    }
}

/// The zeroed bytes behind a connection's send or receive ring (`RingBuffer`), to move
/// from a finished ring to a new one without allocating (`RingBuffer::into_storage`,
/// `RingBuffer::with_storage`; for a whole connection, [`Buffers`](crate::Buffers)).
///
/// Storage may also be *unallocated*: a capacity without bytes ([`Storage::unallocated`]).
/// A ring made from it behaves as one of that capacity (the window it offers is the same)
/// and allocates the bytes when first written, unless it is attached
/// ([`Connection::attach_storage`](crate::Connection::attach_storage)) storage first.
pub struct Storage {
    /// Zeroed: `capacity` bytes, or none.
    bytes: Box<[u8]>,
    capacity: usize,
}

impl Storage {
    /// Allocate `capacity` zeroed bytes.
    pub fn new(capacity: usize) -> Self {
        Storage { bytes: vec![0; capacity].into_boxed_slice(), capacity }
    }

    /// Return storage of `capacity` bytes not yet allocated.
    pub fn unallocated(capacity: usize) -> Self {
        Storage { bytes: Box::default(), capacity }
    }

    /// Return the number of bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Return whether the bytes are allocated.
    pub fn is_allocated(&self) -> bool {
        self.bytes.len() == self.capacity
    }
}

impl core::fmt::Debug for Storage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Storage").field("capacity", &self.capacity()).finish()
    }
}

impl core::fmt::Debug for RingBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingBuffer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn peek_all(ring: &RingBuffer) -> Vec<u8> {
        let mut out = vec![0xa5; ring.len()];
        assert_eq!(ring.peek(0, &mut out), ring.len());
        let (a, b) = ring.as_slices();
        assert_eq!([a, b].concat(), out, "as_slices agrees with peek");
        out
    }

    #[test]
    fn new_is_empty() {
        let ring = RingBuffer::new(8);
        assert_eq!(ring.capacity(), 8);
        assert_eq!(ring.len(), 0);
        assert!(ring.is_empty());
        assert_eq!(ring.free(), 8);
        assert_eq!(ring.as_slices(), (&[][..], &[][..]));
    }

    #[test]
    fn push_pop_fifo() {
        let mut ring = RingBuffer::new(8);
        assert_eq!(ring.push(b"abc"), 3);
        assert_eq!(ring.push(b"de"), 2);
        assert_eq!(ring.len(), 5);
        assert_eq!(ring.free(), 3);
        let mut buf = [0xa5; 4];
        assert_eq!(ring.pop(&mut buf), 4);
        assert_eq!(&buf, b"abcd");
        assert_eq!(ring.len(), 1);
        let mut buf = [0xa5; 4];
        assert_eq!(ring.pop(&mut buf), 1);
        assert_eq!(buf, [b'e', 0xa5, 0xa5, 0xa5]);
        assert!(ring.is_empty());
        assert_eq!(ring.pop(&mut buf), 0);
    }

    #[test]
    fn push_stops_at_capacity() {
        let mut ring = RingBuffer::new(4);
        assert_eq!(ring.push(b"abcdef"), 4);
        assert_eq!(ring.free(), 0);
        assert_eq!(ring.push(b"x"), 0);
        assert_eq!(peek_all(&ring), b"abcd");
    }

    #[test]
    fn wraps_around_the_end() {
        let mut ring = RingBuffer::new(5);
        ring.push(b"abcd");
        ring.discard(3);
        assert_eq!(ring.push(b"efgh"), 4);
        assert_eq!(ring.len(), 5);
        assert_eq!(peek_all(&ring), b"defgh");
        let (a, b) = ring.as_slices();
        assert_eq!((a, b), (&b"de"[..], &b"fgh"[..]));
        let mut buf = [0; 3];
        assert_eq!(ring.peek(2, &mut buf), 3);
        assert_eq!(&buf, b"fgh");
    }

    #[test]
    fn peek_does_not_consume_and_respects_offset() {
        let mut ring = RingBuffer::new(8);
        ring.push(b"hello");
        let mut buf = [0xa5; 8];
        assert_eq!(ring.peek(1, &mut buf), 4);
        assert_eq!(&buf[..5], b"ello\xa5");
        assert_eq!(ring.peek(4, &mut buf[..1]), 1);
        assert_eq!(buf[0], b'o');
        assert_eq!(ring.peek(5, &mut buf), 0, "offset == len");
        assert_eq!(ring.peek(100, &mut buf), 0, "offset past len");
        assert_eq!(ring.peek(0, &mut []), 0, "empty buffer");
        assert_eq!(ring.len(), 5);
    }

    #[test]
    fn discard_clamps() {
        let mut ring = RingBuffer::new(4);
        ring.push(b"ab");
        ring.discard(0);
        assert_eq!(ring.len(), 2);
        ring.discard(10);
        assert!(ring.is_empty());
        assert_eq!(ring.free(), 4);
    }

    #[test]
    fn write_at_then_commit_in_order() {
        let mut ring = RingBuffer::new(8);
        ring.push(b"ab");
        assert_eq!(ring.write_at(2, b"cd"), 2);
        assert_eq!(ring.len(), 2, "write_at does not commit");
        ring.commit(2);
        assert_eq!(peek_all(&ring), b"abcd");
    }

    #[test]
    fn write_at_out_of_order_then_fill_the_hole() {
        let mut ring = RingBuffer::new(8);
        assert_eq!(ring.write_at(3, b"def"), 3);
        assert!(ring.is_empty());
        assert_eq!(ring.write_at(0, b"abc"), 3);
        ring.commit(6);
        assert_eq!(peek_all(&ring), b"abcdef");
    }

    #[test]
    fn write_at_clips_at_capacity() {
        let mut ring = RingBuffer::new(4);
        assert_eq!(ring.write_at(2, b"xyz"), 2);
        assert_eq!(ring.write_at(4, b"xyz"), 0);
        assert_eq!(ring.write_at(usize::MAX, b"xyz"), 0);
        assert_eq!(ring.write_at(1, b""), 0);
        ring.commit(4);
        let mut buf = [0; 4];
        ring.peek(0, &mut buf);
        assert_eq!(&buf[2..], b"xy");
    }

    #[test]
    fn write_at_never_overwrites_committed_bytes() {
        let mut ring = RingBuffer::new(8);
        ring.push(b"abc");
        // Overlaps the committed "bc" and adds "de" after them.
        assert_eq!(ring.write_at(1, b"XYde"), 4);
        assert_eq!(ring.len(), 3);
        ring.commit(2);
        assert_eq!(peek_all(&ring), b"abcde");
        // Entirely inside committed data: nothing is written.
        assert_eq!(ring.write_at(0, b"ZZ"), 2);
        assert_eq!(peek_all(&ring), b"abcde");
    }

    #[test]
    fn out_of_order_data_survives_reads_that_empty_the_ring() {
        let mut ring = RingBuffer::new(6);
        ring.push(b"abcd");
        // Out-of-order bytes two past the committed data, wrapping the storage end.
        assert_eq!(ring.write_at(5, b"f"), 1);
        let mut buf = [0; 4];
        assert_eq!(ring.pop(&mut buf), 4);
        assert!(ring.is_empty());
        // The hole (offset 0) arrives; the byte written earlier is now at offset 1.
        assert_eq!(ring.write_at(0, b"e"), 1);
        ring.commit(2);
        assert_eq!(peek_all(&ring), b"ef");
    }

    #[test]
    fn commit_clamps_to_capacity() {
        let mut ring = RingBuffer::new(4);
        ring.commit(3);
        ring.commit(3);
        assert_eq!(ring.len(), 4);
        ring.commit(usize::MAX);
        assert_eq!(ring.len(), 4);
        assert_eq!(ring.free(), 0);
    }

    #[test]
    fn clear_resets() {
        let mut ring = RingBuffer::new(4);
        ring.push(b"abc");
        ring.discard(2);
        ring.clear();
        assert!(ring.is_empty());
        assert_eq!(ring.free(), 4);
        assert_eq!(ring.push(b"wxyz"), 4);
        assert_eq!(ring.as_slices(), (&b"wxyz"[..], &[][..]), "front back at storage start");
    }

    #[test]
    fn zero_capacity_is_inert() {
        let mut ring = RingBuffer::new(0);
        let mut buf = [0; 4];
        assert_eq!(ring.push(b"abc"), 0);
        assert_eq!(ring.write_at(0, b"abc"), 0);
        ring.commit(5);
        ring.discard(5);
        assert_eq!(ring.len(), 0);
        assert_eq!(ring.pop(&mut buf), 0);
        assert_eq!(ring.peek(0, &mut buf), 0);
        assert_eq!(ring.free(), 0);
        assert_eq!(ring.as_slices(), (&[][..], &[][..]));
    }

    #[test]
    fn an_empty_ring_rewinds_to_the_front() {
        let mut r = RingBuffer::new(64);
        assert_eq!(r.push(b"0123456789"), 10);
        let mut out = [0u8; 10];
        assert_eq!(r.pop(&mut out[..4]), 4);
        r.rewind_if_empty();
        assert_eq!(r.head, 4, "not empty: the front stays");
        assert_eq!(r.pop(&mut out), 6);
        r.rewind_if_empty();
        assert_eq!(r.head, 0);
        assert_eq!(r.push(b"abc"), 3);
        assert_eq!(r.pop(&mut out), 3);
        assert_eq!(&out[..3], b"abc");
    }

    #[test]
    fn storage_is_never_reallocated() {
        let mut ring = RingBuffer::new(16);
        let ptr = ring.storage.as_ptr();
        for i in 0..100u8 {
            ring.push(&[i; 7]);
            ring.write_at(ring.len() + 1, &[i; 5]);
            ring.commit(3);
            ring.discard(9);
        }
        ring.clear();
        assert_eq!(ring.storage.as_ptr(), ptr);
        assert_eq!(ring.capacity(), 16);
    }

    #[test]
    fn recycled_storage_is_zeroed_and_reused() {
        let mut ring = RingBuffer::new(8);
        let ptr = ring.storage.as_ptr();
        ring.push(b"abcdef");
        ring.discard(5);
        ring.push(b"ghi"); // wraps: "gh" at the end, "i" at the start
        ring.write_at(6, b"x"); // beyond the committed data, never committed
        let storage = ring.into_storage();
        assert_eq!(storage.capacity(), 8);
        let ring = RingBuffer::with_storage(storage);
        assert_eq!(ring.storage.as_ptr(), ptr, "same allocation");
        assert!(ring.storage.iter().all(|&b| b == 0), "every byte written is cleared");
        assert!(ring.is_empty());
        assert_eq!(ring.written, 0);
    }

    #[test]
    fn recycling_clears_only_what_was_written() {
        let mut ring = RingBuffer::new(16);
        ring.push(b"abc");
        assert_eq!(ring.written, 3);
        ring.write_at(10, b"z");
        assert_eq!(ring.written, 11);
        ring.pop(&mut [0; 3]);
        assert_eq!(ring.written, 11, "reading does not shrink the written extent");
    }

    #[test]
    fn free_slices_cover_the_free_area_front_first() {
        let mut ring = RingBuffer::new(8);
        let (a, b) = ring.free_slices_mut();
        assert_eq!((a.len(), b.len()), (8, 0), "an empty ring lends all of its storage at once");
        ring.push(b"abcde");
        ring.discard(3); // "de" at storage 3..5
        let (a, b) = ring.free_slices_mut();
        assert_eq!((a.len(), b.len()), (3, 3), "storage 5..8, then 0..3");
        a.copy_from_slice(b"fgh");
        b.copy_from_slice(b"ijk");
        ring.commit(6);
        assert_eq!(peek_all(&ring), b"defghijk");
        let (a, b) = ring.free_slices_mut();
        assert!(a.is_empty() && b.is_empty(), "a full ring lends nothing");
    }

    #[test]
    fn the_free_area_between_a_wrapped_tail_and_the_front_is_one_slice() {
        let mut ring = RingBuffer::new(8);
        ring.push(b"abcdef");
        ring.discard(5);
        ring.push(b"ghij"); // "fghij": storage 5..8, then 0..2
        let (a, b) = ring.free_slices_mut();
        assert_eq!((a.len(), b.len()), (3, 0), "storage 2..5");
        a.copy_from_slice(b"klm");
        ring.commit(2);
        assert_eq!(peek_all(&ring), b"fghijkl");
        let (a, b) = ring.free_slices_mut();
        assert_eq!((&*a, &*b), (&b"m"[..], &[][..]), "what was written and not committed stays out");
    }

    #[test]
    fn bytes_written_in_place_beyond_the_commit_are_not_readable() {
        let mut ring = RingBuffer::new(8);
        ring.push(b"ab");
        let (a, b) = ring.free_slices_mut();
        // A writer that scribbles over all it was lent and reports two bytes.
        a.fill(0xa5);
        b.fill(0xa5);
        a[..2].copy_from_slice(b"cd");
        ring.commit(2);
        assert_eq!(peek_all(&ring), b"abcd");
        assert_eq!(ring.pop(&mut [0xa5; 8]), 4);
        assert!(ring.is_empty());
        // The next writer finds the scribbles: unwritten bytes show.
        let (a, b) = ring.free_slices_mut();
        assert_eq!((&*a, &*b), (&[0xa5; 4][..], &b"abcd"[..]));
    }

    #[test]
    fn bytes_lent_for_writing_in_place_are_cleared_on_recycling() {
        // Lent past everything written before: the written extent grows to cover the loan.
        let mut ring = RingBuffer::new(16);
        ring.push(b"abc");
        let (a, _) = ring.free_slices_mut();
        a.fill(0xa5);
        assert_eq!(ring.written, 16);
        ring.commit(1);
        assert!(ring.into_storage().bytes.iter().all(|&b| b == 0), "every byte lent is cleared");
        // Lent in two pieces around the end of the storage.
        let mut ring = RingBuffer::new(16);
        ring.push(&[1; 12]);
        ring.discard(12);
        let (a, b) = ring.free_slices_mut();
        assert_eq!((a.len(), b.len()), (4, 12));
        a.fill(0xa5);
        b.fill(0xa5);
        assert!(ring.into_storage().bytes.iter().all(|&b| b == 0), "both pieces are cleared");
        // A full ring lends nothing and counts nothing.
        let mut ring = RingBuffer::new(16);
        ring.push(&[1; 16]);
        ring.discard(4);
        ring.push(&[2; 4]);
        let written = ring.written;
        let _ = ring.free_slices_mut();
        assert_eq!(ring.written, written);
    }

    /// One operation in the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Pop(usize),
        Discard(usize),
        Peek(usize, usize),
        WriteAt(usize, Vec<u8>),
        Commit(usize),
        /// Write the bytes front first into the free slices, 0xa5 over the rest of them,
        /// and commit at most that many of them.
        InPlace(Vec<u8>, usize),
        Clear,
    }

    #[test]
    fn an_empty_ring_detaches_its_storage_zeroed_and_takes_it_back() {
        let mut r = RingBuffer::new(16);
        r.push(b"secret");
        assert!(r.detach().is_none(), "a ring holding bytes keeps its storage");
        let mut out = [0u8; 6];
        r.pop(&mut out);
        let storage = r.detach().expect("empty");
        assert!(storage.is_allocated() && storage.bytes.iter().all(|&b| b == 0), "zeroed for the next ring");
        assert!(r.is_detached());
        assert_eq!((r.capacity(), r.len(), r.free()), (16, 0, 16), "the capacity (the window) stays");
        assert_eq!(r.as_slices(), (&[][..], &[][..]));
        assert!(r.attach(Storage::new(8)).is_err(), "storage of another size is refused");
        r.attach(storage).expect("its own size");
        r.push(b"abc");
        assert_eq!(peek_all(&r), b"abc");
    }

    #[test]
    fn a_detached_ring_allocates_when_written_and_grows_without_storage() {
        let mut r = RingBuffer::new(8);
        r.detach().expect("empty");
        r.grow(32);
        assert!(r.is_detached());
        assert_eq!(r.write_at(4, b"xy"), 2);
        assert!(!r.is_detached());
        r.commit(0);
        assert_eq!(r.push(b"abcd"), 4);
        r.commit(2);
        assert_eq!(peek_all(&r), b"abcdxy");
        assert_eq!(r.capacity(), 32);
        r.clear();
        r.detach().expect("empty");
        let (a, b) = r.free_slices_mut();
        assert_eq!(a.len() + b.len(), 32, "lending the free area attaches storage");
    }

    #[test]
    fn growing_keeps_committed_and_placed_bytes_at_their_offsets() {
        let mut r = RingBuffer::new(8);
        r.push(b"abcdef");
        let mut out = [0u8; 4];
        r.pop(&mut out);
        r.push(b"ghij"); // wraps: "efghij" from the front
        assert_eq!(r.write_at(6, b"kl"), 2, "out of order, after the committed bytes");
        r.grow(32);
        assert_eq!(r.capacity(), 32);
        let mut all = [0u8; 6];
        assert_eq!(r.peek(0, &mut all), 6);
        assert_eq!(&all, b"efghij");
        r.commit(2);
        let mut all = [0u8; 8];
        assert_eq!(r.pop(&mut all), 8);
        assert_eq!(&all, b"efghijkl");
        assert_eq!(r.push(&[7u8; 32]), 32, "the whole new capacity is free");
        r.grow(16);
        assert_eq!(r.capacity(), 32, "never shrinks");
    }

    fn op() -> impl Strategy<Value = Op> {
        let bytes = proptest::collection::vec(any::<u8>(), 0..24);
        prop_oneof![
            bytes.clone().prop_map(Op::Push),
            (0usize..24).prop_map(Op::Pop),
            (0usize..24).prop_map(Op::Discard),
            (0usize..24, 0usize..24).prop_map(|(o, n)| Op::Peek(o, n)),
            (0usize..24, bytes.clone()).prop_map(|(o, d)| Op::WriteAt(o, d)),
            (bytes, 0usize..24).prop_map(|(d, k)| Op::InPlace(d, k)),
            (0usize..12).prop_map(Op::Commit),
            Just(Op::Clear),
        ]
    }

    /// A ring of `cap` bytes whose storage holds `fill`'s pattern, with its front at `head`,
    /// `len` committed bytes and `written` as given, detached if `detached`.
    fn ring_at(cap: usize, head: usize, len: usize, written: usize, detached: bool) -> RingBuffer {
        let mut ring = RingBuffer::new(cap);
        if detached {
            ring.detach().expect("empty");
        } else {
            for (i, b) in ring.storage.iter_mut().enumerate() {
                *b = i as u8 ^ 0x5a;
            }
        }
        ring.head = head;
        ring.len = len;
        ring.written = written;
        ring
    }

    proptest! {
        /// The inlined copies (attached storage, no wrap) do what the general ones do, in
        /// every state a ring can be in: storage and `written` alike after `copy_in`, the
        /// bytes alike after `copy_out`.
        #[test]
        fn the_inlined_copies_are_the_general_ones(
            cap in 1usize..40,
            head in 0usize..40,
            len in 0usize..40,
            written in 0usize..40,
            detached in proptest::bool::ANY,
            offset in 0usize..40,
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
        ) {
            let (head, len, written) = (head % cap, len % (cap + 1), written % (cap + 1));
            // The callers' contract: `offset + data.len() <= capacity()`.
            let offset = offset % (cap + 1);
            let data = &data[..data.len().min(cap - offset)];
            let detached = detached && len == 0;
            let mut fast = ring_at(cap, head, len, written, detached);
            let mut general = ring_at(cap, head, len, written, detached);
            fast.copy_in(offset, data);
            general.copy_in_any(offset, data);
            prop_assert_eq!(&fast.storage, &general.storage);
            prop_assert_eq!(fast.written, general.written);
            if !detached {
                let mut out_fast = vec![0xa5; data.len()];
                let mut out_general = vec![0xa5; data.len()];
                fast.copy_out(offset, &mut out_fast);
                general.copy_out_any(offset, &mut out_general);
                prop_assert_eq!(&out_fast, &out_general);
                prop_assert_eq!(&out_fast[..], data, "what was copied in comes back");
            }
        }
    }

    proptest! {
        /// Compare against a model: a window of `capacity` logical positions
        /// counted from the front, `None` where the content is unspecified.
        #[test]
        fn matches_model(cap in 0usize..20, ops in proptest::collection::vec(op(), 0..60)) {
            let mut ring = RingBuffer::new(cap);
            let mut window: Vec<Option<u8>> = vec![None; cap];
            let mut len = 0usize;
            for op in ops {
                match op {
                    Op::Push(d) => {
                        let n = d.len().min(cap - len);
                        prop_assert_eq!(ring.push(&d), n);
                        for (i, &b) in d[..n].iter().enumerate() {
                            window[len + i] = Some(b);
                        }
                        len += n;
                    }
                    Op::Pop(n) => {
                        let mut buf = vec![0u8; n];
                        let got = ring.pop(&mut buf);
                        let want = n.min(len);
                        prop_assert_eq!(got, want);
                        for i in 0..want {
                            if let Some(b) = window[i] {
                                prop_assert_eq!(buf[i], b);
                            }
                        }
                        window.rotate_left(want);
                        len -= want;
                    }
                    Op::Discard(n) => {
                        let n = n.min(len);
                        ring.discard(n);
                        window.rotate_left(n);
                        len -= n;
                    }
                    Op::Peek(o, n) => {
                        let mut buf = vec![0u8; n];
                        let got = ring.peek(o, &mut buf);
                        let want = if o >= len { 0 } else { n.min(len - o) };
                        prop_assert_eq!(got, want);
                        for i in 0..want {
                            if let Some(b) = window[o + i] {
                                prop_assert_eq!(buf[i], b);
                            }
                        }
                    }
                    Op::WriteAt(o, d) => {
                        let want = if o >= cap { 0 } else { d.len().min(cap - o) };
                        prop_assert_eq!(ring.write_at(o, &d), want);
                        for (i, &b) in d[..want].iter().enumerate() {
                            if o + i >= len {
                                window[o + i] = Some(b);
                            }
                        }
                    }
                    Op::Commit(n) => {
                        ring.commit(n);
                        len = (len + n).min(cap);
                    }
                    Op::InPlace(d, k) => {
                        let free = cap - len;
                        let n = d.len().min(free);
                        let (a, b) = ring.free_slices_mut();
                        prop_assert_eq!(a.len() + b.len(), free);
                        prop_assert!(free == 0 || !a.is_empty(), "the first slice is empty only when full");
                        let lent = a.iter_mut().chain(b.iter_mut());
                        for (i, (byte, slot)) in lent.zip(&mut window[len..]).enumerate() {
                            *byte = if i < n { d[i] } else { 0xa5 };
                            *slot = Some(*byte);
                        }
                        let k = k.min(n);
                        ring.commit(k);
                        len += k;
                    }
                    Op::Clear => {
                        ring.clear();
                        window.iter_mut().for_each(|b| *b = None);
                        len = 0;
                    }
                }
                prop_assert_eq!(ring.len(), len);
                prop_assert_eq!(ring.free(), cap - len);
                prop_assert_eq!(ring.is_empty(), len == 0);
                let (a, b) = ring.as_slices();
                prop_assert_eq!(a.len() + b.len(), len);
            }
            let storage = ring.into_storage();
            prop_assert!(storage.bytes.iter().all(|&b| b == 0), "recycled storage is all zero");
        }
    }
}
