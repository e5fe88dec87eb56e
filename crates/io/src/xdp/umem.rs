//! The UMEM ([`Umem`]).

use std::io;

use super::sys::{CompletionQueue, FillQueue, RxQueue, RxTaken, TxChecksum, TxQueue, UmemArea};
pub use super::sys::{Frame, Span, SpanLayout};

/// The UMEM: the packet buffer area an AF_XDP socket shares with the kernel, cut into frames,
/// and the free lists of the frames user space holds.
///
/// Frames are move-only [`Frame`] tokens: while you hold one, the kernel does not touch its
/// bytes, so [`Umem::data`] and [`Umem::buffer_mut`] need no `unsafe`. The receive frames
/// circulate fill ring -> RX ring -> caller -> fill ring; the send frames circulate free list ->
/// TX ring -> completion ring -> free list. Keeping the two pools apart means a burst of
/// sending can never starve reception, nor the reverse.
pub struct Umem {
    area: UmemArea,
    /// Send frames not in flight, used as a stack: the frame freed last, still warm in the
    /// cache, is reused first.
    tx_free: Vec<Frame>,
    /// Receive frames not in the fill ring (normally none: the fill ring holds them all).
    rx_free: Vec<Frame>,
    /// Spans not in flight (none unless the UMEM keeps spans), a stack like `tx_free`.
    tx_spans: Vec<Span>,
}

impl Umem {
    /// Allocate `frame_count` frames of `frame_size` bytes (a power of two): the first
    /// `rx_frames` for receiving, the rest for sending, each with `tx_metadata_len` bytes of
    /// TX metadata in front of its packet (0 or [`TX_METADATA_LEN`](super::sys::TX_METADATA_LEN)),
    /// and `spans` for sending packets larger than a frame ([`UmemArea::new`]).
    pub(crate) fn new(
        frame_count: u32,
        frame_size: u32,
        rx_frames: u32,
        tx_metadata_len: u32,
        spans: SpanLayout,
    ) -> io::Result<Umem> {
        let (area, mut frames) = UmemArea::new(frame_count, frame_size, tx_metadata_len, spans)?;
        let mut tx_spans = area.span_tokens();
        tx_spans.reverse();
        let tx_free = frames.split_off(rx_frames.min(frame_count) as usize);
        // Stacks pop from the end: reverse so frames go out in address order at first.
        let (mut rx_free, mut tx_free) = (frames, tx_free);
        rx_free.reverse();
        tx_free.reverse();
        Ok(Umem { area, tx_free, rx_free, tx_spans })
    }

    /// Return the size of one frame.
    pub fn frame_size(&self) -> u32 {
        self.area.frame_size()
    }

    /// Return how many packet bytes one send frame holds (the frame less its TX metadata).
    pub fn tx_capacity(&self) -> u32 {
        self.area.tx_capacity()
    }

    /// Return the area, for registering it with a socket.
    pub(crate) fn area(&self) -> &UmemArea {
        &self.area
    }

    /// Return the packet data of a frame you hold.
    pub fn data(&self, frame: &Frame) -> &[u8] {
        self.area.data(frame)
    }

    /// Return the room for a packet in a send frame you hold, to write the packet into.
    pub fn buffer_mut(&mut self, frame: &mut Frame) -> &mut [u8] {
        self.area.buffer_mut(frame)
    }

    /// Take a free send frame.
    pub fn alloc_tx(&mut self) -> Option<Frame> {
        self.tx_free.pop()
    }

    /// Return a send frame you did not send.
    pub fn free_tx(&mut self, frame: Frame) {
        self.tx_free.push(frame);
    }

    /// Return how many send frames are free.
    pub fn tx_free_count(&self) -> usize {
        self.tx_free.len()
    }

    /// Move frames and spans the kernel finished sending to the free lists. Return how many
    /// descriptors completed.
    pub(crate) fn reclaim(&mut self, completion: &mut CompletionQueue) -> usize {
        completion.pop_into(&self.area, usize::MAX, &mut self.tx_free, &mut self.tx_spans)
    }

    /// Return how many packet bytes a span holds (0 without spans).
    pub fn span_capacity(&self) -> usize {
        if self.area.unaligned() { self.area.span_capacity() } else { 0 }
    }

    /// Take a free span.
    pub fn alloc_span(&mut self) -> Option<Span> {
        self.tx_spans.pop()
    }

    /// Return a span you did not send.
    pub fn free_span(&mut self, span: Span) {
        self.tx_spans.push(span);
    }

    /// Return how many spans are free.
    pub fn span_free_count(&self) -> usize {
        self.tx_spans.len()
    }

    /// Return the room for a packet in a span you hold, to write the packet into.
    pub fn span_buffer_mut(&mut self, span: &mut Span) -> &mut [u8] {
        self.area.span_buffer_mut(span)
    }

    /// Queue the first `len` bytes of a span on the TX ring as one packet, with a checksum
    /// request if asked; give the span back if the ring lacks the slots, `len` exceeds the
    /// span, or a checksum is asked of a UMEM without TX metadata.
    pub(crate) fn transmit_span(
        &mut self,
        tx: &mut TxQueue,
        mut span: Span,
        len: usize,
        checksum: Option<TxChecksum>,
    ) -> Result<(), Span> {
        if checksum.is_some() && !self.area.set_span_tx_metadata(&mut span, checksum) {
            return Err(span);
        }
        tx.push_span(&self.area, span, len, checksum.is_some())
    }

    /// Give free receive frames to the kernel through the fill ring. Return how many.
    pub(crate) fn refill(&mut self, fill: &mut FillQueue) -> usize {
        let mut given = 0;
        while let Some(frame) = self.rx_free.pop() {
            if let Err(frame) = fill.push(frame) {
                self.rx_free.push(frame);
                break;
            }
            given += 1;
        }
        if given > 0 {
            fill.submit();
        }
        given
    }

    /// Give received frames back to the kernel through the fill ring; frames that do not fit
    /// wait in the free list for the next [`refill`](Self::refill).
    pub(crate) fn recycle(&mut self, fill: &mut FillQueue, frames: impl IntoIterator<Item = Frame>) {
        for frame in frames {
            if let Err(frame) = fill.push(frame) {
                self.rx_free.push(frame);
            }
        }
        fill.submit();
    }

    /// Take the received frames of up to `max_packets` packets from the RX ring into `out` (up
    /// to its spare capacity; see [`RxQueue::pop_into`] for packets of several frames).
    pub(crate) fn receive(&self, rx: &mut RxQueue, max_packets: usize, out: &mut Vec<Frame>) -> RxTaken {
        rx.pop_into(&self.area, max_packets, out)
    }

    /// Queue the first `len` bytes of a send frame on the TX ring, `continues` if the packet
    /// goes on in the next frame queued, with a checksum request on its first frame if asked;
    /// give the frame back if the ring is full, `len` exceeds the frame, or a checksum is
    /// asked of a UMEM without TX metadata.
    pub(crate) fn transmit(
        &mut self,
        tx: &mut TxQueue,
        mut frame: Frame,
        len: usize,
        continues: bool,
        checksum: Option<TxChecksum>,
    ) -> Result<(), Frame> {
        if checksum.is_some() && !self.area.set_tx_metadata(&mut frame, checksum) {
            return Err(frame);
        }
        tx.push(&self.area, frame, len, continues, checksum.is_some())
    }
}
