//! Fragments on the host: each one handed to the reassembler (RFC 791 3.2, RFC 815,
//! RFC 8200 4.5, RFC 5722), and a datagram it completes handed on as if it had come whole.

use std::fmt::Write as _;

use bypass_tcp::Instant;

use super::*;
use crate::counters::Drop;
use crate::fragments::{Datagram, Fragment, FragmentDrop, FragmentKey};

impl Interface {
    /// Add `frag` of datagram `key`; when it completes the datagram, call `deliver` with it.
    pub(super) fn reassemble(
        &mut self,
        now: Instant,
        key: FragmentKey,
        frag: Fragment<'_>,
        deliver: impl FnOnce(&mut Interface, Datagram<'_>),
    ) {
        // The reassembler lends the datagram out of its own memory, so it steps out of the
        // host while the datagram is processed.
        let Some(mut fragments) = self.fragments.take() else { return };
        match fragments.insert(now, key, frag) {
            Ok(Some(datagram)) => {
                self.counters.fragments_reassembled += 1;
                if self.notes.is_some() {
                    let _ = write!(
                        self.note,
                        "fragment of {key}: datagram of {} bytes reassembled | ",
                        datagram.payload.len()
                    );
                }
                deliver(self, datagram);
            }
            Ok(None) => {
                if self.notes.is_some() {
                    let _ = write!(self.note, "fragment of {key} at offset {}: held for reassembly", frag.offset);
                }
            }
            Err(reason) => {
                self.counters.drop(Drop::FragmentDropped);
                log::debug!("drop {}: {key} offset {}: {reason}", Drop::FragmentDropped.name(), frag.offset);
                if self.notes.is_some() {
                    let _ = write!(self.note, "dropped: {} ({reason})", reason.name());
                    if reason.discards_datagram() {
                        self.note.push_str(", datagram discarded");
                    }
                }
                if reason == FragmentDrop::Discarded || reason == FragmentDrop::Duplicate {
                    log::trace!("{key}: {reason}");
                }
            }
        }
        // A datagram begun here expires at a time `timers_due` must see.
        if let Some(t) = fragments.poll_timeout() {
            self.lower_timer_floor(t);
        }
        self.fragments = Some(fragments);
    }

    /// Give up the datagrams whose reassembly time ran out (RFC 791 3.2, RFC 8200 4.5). No
    /// ICMP "fragment reassembly time exceeded" is sent: RFC 792 and RFC 4443 3.3 allow it,
    /// but a host serving TCP gains nothing by telling a sender whose packet is long gone.
    pub(super) fn expire_fragments(&mut self, now: Instant) {
        let Some(fragments) = self.fragments.as_mut() else { return };
        if fragments.poll_timeout().is_some_and(|t| t <= now) {
            let expired = fragments.handle_timeout(now, |e| log::debug!("reassembly of {} timed out", e.key));
            for _ in 0..expired {
                self.counters.drop(Drop::FragmentDropped);
            }
        }
    }
}
