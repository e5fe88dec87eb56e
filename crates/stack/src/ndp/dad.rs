//! Duplicate Address Detection (RFC 4862 5.4): check that no other node on the link has an
//! address before using it.

use std::net::Ipv6Addr;
use std::time::Duration;

use bypass_tcp::Instant;

use super::MIN_RETRANS_TIMER;
use crate::wire::ndp::NdpMessage;

// -------------------------------------------------------------------------------------
// Duplicate Address Detection (RFC 4862 5.4).
// -------------------------------------------------------------------------------------

/// Where [`Dad`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DadState {
    /// Still checking: the address must not be used as a source nor answer solicitations
    /// (RFC 4862 5.4).
    Tentative,
    /// No other node claimed it: assign it.
    Unique,
    /// Another node uses it (or is checking it): do not assign it (RFC 4862 5.4.5).
    Duplicate,
}

/// Duplicate Address Detection of one tentative address (RFC 4862 5.4): DupAddrDetectTransmits
/// solicitations from the unspecified address, RetransTimer apart; unique if nobody answers
/// within RetransTimer of the last. Call [`due`](Self::due) at [`next_timeout`](Self::next_timeout)
/// and feed every parsed message to [`handle`](Self::handle) while tentative.
#[derive(Clone, Debug)]
pub struct Dad {
    addr: Ipv6Addr,
    transmits: u32,
    sent: u32,
    retrans: Duration,
    next: Instant,
    state: DadState,
}

impl Dad {
    /// Start checking `addr`: `transmits` solicitations (DupAddrDetectTransmits, 1 by
    /// default; 0 turns DAD off and the address is unique at once), `retrans` apart, the
    /// first at `start`. RFC 4862 5.4.2 asks for a random delay of up to 1 s
    /// (MAX_RTR_SOLICITATION_DELAY) before the first after an interface starts: the caller
    /// picks `start`.
    pub fn new(addr: Ipv6Addr, transmits: u32, retrans: Duration, start: Instant) -> Self {
        let state = if transmits == 0 { DadState::Unique } else { DadState::Tentative };
        Dad { addr, transmits, sent: 0, retrans: retrans.max(MIN_RETRANS_TIMER), next: start, state }
    }

    /// Return the address being checked.
    pub fn address(&self) -> Ipv6Addr {
        self.addr
    }

    /// Return where the check stands.
    pub fn state(&self) -> DadState {
        self.state
    }

    /// Call `send` with the tentative address if a solicitation is due (write it with
    /// `write_solicitation(buf, mac, Ipv6Addr::UNSPECIFIED, target, Solicit::Multicast)`);
    /// declare the address unique once RetransTimer has passed after the last. Return the state.
    pub fn due(&mut self, now: Instant, send: impl FnOnce(Ipv6Addr)) -> DadState {
        if self.state == DadState::Tentative && now >= self.next {
            if self.sent < self.transmits {
                self.sent += 1;
                self.next = now + self.retrans;
                send(self.addr);
            } else {
                log::debug!("NDP: {} is unique after {} solicitations", self.addr, self.sent);
                self.state = DadState::Unique;
            }
        }
        self.state
    }

    /// Return when [`due`](Self::due) next has work, while tentative.
    pub fn next_timeout(&self) -> Option<Instant> {
        (self.state == DadState::Tentative).then_some(self.next)
    }

    /// Take a message received from `src` while tentative: an advertisement of the address
    /// (RFC 4862 5.4.4), or a solicitation for it from the unspecified address, another
    /// node's DAD (RFC 4862 5.4.3), proves it a duplicate. A solicitation for it from a
    /// unicast source is someone resolving it: not a duplicate, and not to be answered.
    /// Return the state.
    pub fn handle(&mut self, src: Ipv6Addr, message: &NdpMessage) -> DadState {
        if self.state != DadState::Tentative {
            return self.state;
        }
        let duplicate = match message {
            NdpMessage::NeighborAdvertisement(na) => na.target == self.addr,
            NdpMessage::NeighborSolicitation(ns) => ns.target == self.addr && src.is_unspecified(),
            _ => false,
        };
        if duplicate {
            log::debug!("NDP: {} is a duplicate (message from {src})", self.addr);
            self.state = DadState::Duplicate;
        }
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndp::RETRANS_TIMER;
    use crate::ndp::cache::tests::{ms, na, secs};
    use crate::wire::ndp::tests::*;
    use crate::wire::ndp::*;

    // ---------------------------------------------------------------------------------
    // Duplicate Address Detection (RFC 4862 5.4).
    // ---------------------------------------------------------------------------------

    #[test]
    fn dad_sends_its_solicitations_then_declares_the_address_unique() {
        let mut dad = Dad::new(A, 2, RETRANS_TIMER, ms(300));
        let mut sent = Vec::new();
        for t in [0, 299, 300, 800, 1299, 1300, 2299] {
            assert_eq!(dad.due(ms(t), |a| sent.push((t, a))), DadState::Tentative, "{t}");
        }
        assert_eq!(sent, [(300, A), (1300, A)]);
        assert_eq!(dad.next_timeout(), Some(ms(2300)));
        assert_eq!(dad.due(ms(2300), |_| panic!("no more")), DadState::Unique);
        assert_eq!(dad.next_timeout(), None);
        assert_eq!(Dad::new(A, 0, RETRANS_TIMER, ms(0)).state(), DadState::Unique, "DAD off");
    }

    #[test]
    fn dad_finds_duplicates_in_advertisements_and_other_checks() {
        let advert = NdpMessage::NeighborAdvertisement(na(A, false, true, false, Some(C_MAC)));
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(B, &advert), DadState::Duplicate);
        assert_eq!(dad.due(secs(5), |_| panic!("stopped")), DadState::Duplicate);
        // Another node checking the same address: its DAD solicitation, parsed from our own writer.
        let mut buf = [0u8; NDP_FRAME_LEN];
        let n = write_solicitation(&mut buf, C_MAC, UNSPECIFIED, A, Solicit::Multicast);
        let theirs = parse_frame(&buf[..n]).unwrap();
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(UNSPECIFIED, &theirs), DadState::Duplicate);
        // Someone resolving the address, and messages about others: not duplicates.
        let resolving = NdpMessage::NeighborSolicitation(NeighborSolicitation { target: A, source_mac: Some(C_MAC) });
        let mut dad = Dad::new(A, 1, RETRANS_TIMER, ms(0));
        assert_eq!(dad.handle(B, &resolving), DadState::Tentative);
        let other = NdpMessage::NeighborAdvertisement(na(B, false, true, false, Some(B_MAC)));
        assert_eq!(dad.handle(B, &other), DadState::Tentative);
        assert_eq!(dad.address(), A);
    }
}
