//! Ephemeral ports for active opens (RFC 6056), and the key derivation the host's other
//! secrets use.

use core::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use siphasher::sip::SipHasher24;

/// Return a 128-bit key for one use of `secret`, named by `label`: SipHash-2-4 keyed with
/// the secret over the label (and a block number), so keys for different uses are
/// independent and none reveals the secret.
pub(crate) fn derive_key(secret: &[u8; 16], label: &[u8]) -> [u8; 16] {
    let mut key = [0u8; 16];
    for (block, half) in key.chunks_exact_mut(8).enumerate() {
        let mut h = SipHasher24::new_with_key(secret);
        h.write(label);
        h.write_u8(block as u8);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

/// Slots of the RFC 6056 algorithm 4 counter table (2 KiB).
const PORT_TABLE_LEN: usize = 1024;

/// Ephemeral port selection by RFC 6056 section 3.3.4, algorithm 4 ("double-hash port
/// selection"), as Linux's `__inet_hash_connect` does. The search towards a destination
/// starts at `offset + table[index]`: `offset` and `index` are keyed hashes of (local
/// address, remote address, remote port), and `table[index]` advances with each port
/// tried for the destinations sharing that slot. So ports to different destinations are
/// unrelated, the port towards one destination cannot be predicted without the key, and
/// connections elsewhere do not move it (an observer cannot count them), unlike one global
/// counter; successive connections to one destination still walk the range in order, which
/// keeps a freed port from being reused soon (RFC 6056 section 3.3.4's aim).
pub(crate) struct EphemeralPorts {
    key: [u8; 16],
    /// The first ephemeral port.
    low: u16,
    /// How many ports the range has (1 to 65536).
    count: u32,
    /// The per-slot counters, kept modulo `count` (RFC 6056: `table[index]++`; the residue
    /// is all that selects a port, and keeping it bounded means no wrap skips a port).
    table: Box<[u16]>,
}

impl EphemeralPorts {
    /// Return a selector over `range` (inclusive, either order), its counters started at
    /// values derived from `key` (RFC 6056: random at boot, so they reveal no count).
    pub(crate) fn new(key: [u8; 16], range: (u16, u16)) -> Self {
        let (low, high) = (range.0.min(range.1), range.0.max(range.1));
        let count = u32::from(high - low) + 1;
        let mut table = vec![0u16; PORT_TABLE_LEN].into_boxed_slice();
        for (block, slots) in table.chunks_mut(4).enumerate() {
            let mut h = SipHasher24::new_with_key(&key);
            h.write(b"table");
            h.write_u32(block as u32);
            let bits = h.finish();
            for (i, slot) in slots.iter_mut().enumerate() {
                *slot = ((bits >> (16 * i)) as u16 as u32 % count) as u16;
            }
        }
        EphemeralPorts { key, low, count, table }
    }

    /// Return the first port from `local` towards `remote` that `suitable` accepts, trying
    /// each port of the range at most once; `None` if it accepts none.
    pub(crate) fn select(
        &mut self,
        local: IpAddr,
        remote: SocketAddr,
        mut suitable: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        // F and G of RFC 6056 3.3.4 as the two halves of one 64-bit keyed hash (as Linux
        // takes both from `secure_ipv4_port_ephemeral`): a PRF's output halves are
        // independent, as two hashes under two keys would be.
        let mut h = SipHasher24::new_with_key(&self.key);
        match (local, remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                h.write(&l.octets());
                h.write(&r.octets());
            }
            (l, r) => {
                h.write(&octets16(l));
                h.write(&octets16(r));
            }
        }
        h.write_u16(remote.port());
        let bits = h.finish();
        let offset = (bits as u32) % self.count;
        let index = ((bits >> 32) as usize) % PORT_TABLE_LEN;
        for _ in 0..self.count {
            let next = u32::from(self.table[index]);
            self.table[index] = ((next + 1) % self.count) as u16;
            let port = self.low + ((offset + next) % self.count) as u16;
            if suitable(port) {
                return Some(port);
            }
        }
        None
    }
}

/// Return an address as 16 octets (IPv4 mapped, RFC 4291 2.5.5.2), for hashing.
fn octets16(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}
