//! SYN cookies answered by the XDP program itself: the SYN shield's answer to the SYNs its
//! bucket has no token for, so that legitimate clients still connect during a flood.
//!
//! A SYN the shield would shed is turned, in place, into the SYN-ACK that carries a SYN
//! cookie (RFC 4987 section 3.6) and sent back out of the interface it came in on
//! (`XDP_TX`). It never takes a frame of the receive ring, a copy into the UMEM or a turn
//! of the stack, and the program keeps no state for it. A client's ACK comes back as any
//! other segment, to the stack, which rebuilds the connection from the cookie as it does
//! from its own ([`SynCookieAnswer`] must hold the stack's key, MSS and window, and the stack
//! must check cookies without waiting for an overflow of its own).
//!
//! The cookie is bit for bit the one the stack's codec makes (`bypass_stack`'s
//! `syncookie` module): a period of 64 seconds of `CLOCK_MONOTONIC` (what
//! `bpf_ktime_get_ns` reads) modulo 32 in the top five bits, the index of the client's MSS
//! rounded down in [`COOKIE_MSS`] in the next three, and the low 24 bits of SipHash-2-4,
//! keyed with the stack's cookie key, over our address and port, the client's address and
//! port (each address as its octets, each port little-endian), the client's ISN, the period
//! and the index (little-endian `u32`s).
//!
//! # What the SYN-ACK says
//!
//! The SYN-ACK carries only the MSS option: no window scale, SACK-permitted or timestamps,
//! which a cookie without a timestamp to ride in cannot remember (RFC 4987 3.6: the price of
//! keeping no state). So a connection made this way runs without them, and with the window
//! of 16 bits the SYN-ACK advertised (the stack's initial window). The stack's own cookies
//! carry them in the timestamp; the program's are for the SYNs beyond the shield's rate only.
//! The client's MSS is read from the first option only, where every common stack puts it
//! (RFC 9293 3.2 sets no order; Linux, the BSDs and Windows all send it first); a SYN with
//! another option first is answered as if it had none (536, RFC 9293 3.7.1). A SYN over
//! IPv4 with IP options, or with FIN or RST set, is dropped, not answered.
//!
//! # Listing
//!
//! ```text
//! answer:                              ; a SYN the bucket had no token for
//!         call bpf_ktime_get_ns
//!         r0 /= 64000000000            ; the period ...
//!         r0 &= 31                     ; ... modulo 32
//!         r8 = r0                      ; t
//!         r9 = *(u64 *)(r10 - 16)      ; ctx, saved on entry
//!         r2 = ctx->data, r3 = ctx->data_end
//!         ; [per family] bounds, then the flags byte: SYN only of SYN, ACK, RST, FIN
//!         ; r7 = the client's MSS (first option, else 536), r6 = its index in COOKIE_MSS
//!         ; the message's 8-byte words to r10 - 24, r10 - 32, ...
//!         ; SipHash-2-4 over them: v0..v3 in r1..r4, r5 a scratch, r0 the word, then the hash
//!         r6 = t << 27 | index << 24 | hash & 0xffffff      ; the cookie, our ISN
//!         r7 = be32(seq) + 1                                 ; the ACK
//!         r2 = frame length of the answer - (data_end - data)
//!         call bpf_xdp_adjust_tail(ctx, r2)                  ; 58 bytes (IPv4), 78 (IPv6)
//!         ; Ethernet addresses swapped; the IP header rewritten, addresses swapped; the TCP
//!         ; header: ports swapped, seq = cookie, ack, doff 6, SYN|ACK, window, MSS option;
//!         ; the checksums summed over 16-bit words as loaded (RFC 1071 2(B): the sum of
//!         ; byte-swapped words is the byte-swapped sum, stored back the same way)
//!         r0 = XDP_TX
//!         exit
//! ```

use bypass_device::SynCookieAnswer;

use super::program::{Asm, Cond, Label, Reg, Size};

/// MSS values a cookie can encode, ascending: the stack's table, which the cookie's index
/// points into.
pub const COOKIE_MSS: [u16; 8] = [536, 1200, 1220, 1360, 1400, 1440, 1460, 8960];

/// Nanoseconds of a cookie period: 64 seconds, the stack's.
pub const COOKIE_PERIOD_NS: u64 = 64_000_000_000;

/// Where the entry saves the context for the answer: an 8-byte slot of the stack.
pub(crate) const CTX_SLOT: i16 = -16;
/// Where the shield saves its map value's address, to count the answer sent.
pub(crate) const VALUE_SLOT: i16 = -80;
/// The first of the message's 8-byte words on the stack (the next ones below it).
const MESSAGE_SLOT: i16 = -24;

/// The offsets one family's answer needs, from the start of the frame.
struct Family {
    /// Bytes of the IP header (IPv4 without options).
    ip_len: i16,
    /// The source and destination addresses, and their length.
    src: i16,
    dst: i16,
    addr_len: i16,
    /// The MSS we announce, and the window.
    mss: u16,
    window: u16,
}

impl Family {
    fn tcp(&self) -> i16 {
        14 + self.ip_len
    }

    /// Length of the answer: Ethernet, IP, a TCP header with the MSS option.
    fn answer_len(&self) -> i16 {
        self.tcp() + 24
    }
}

const ETHERTYPE_IPV4: u32 = (0x0800u16).to_be() as u32;
const TCP_OPTION_MSS: i32 = u16::from_ne_bytes([2, 4]) as i32;
/// The flags the answer checks: a SYN without ACK, RST or FIN.
const SYN_ACK_RST_FIN: i32 = 0x17;

/// Emit the answer at the current position (see the module docs): for IPv4 if `v4`, IPv6 if
/// `v6`. A SYN it cannot answer goes to `drop`.
pub(crate) fn emit_answer(a: &mut Asm, cookies: &SynCookieAnswer, v4: bool, v6: bool, drop: Label) {
    use Reg::*;
    a.call(super::program::BPF_FUNC_KTIME_GET_NS);
    a.load_imm64(R1, COOKIE_PERIOD_NS);
    a.div(R0, R1);
    a.and_imm(R0, 31);
    a.mov(R8, R0);
    a.load(Size::U64, R9, R10, CTX_SLOT);
    a.load(Size::U32, R2, R9, super::program::XDP_MD_DATA);
    a.load(Size::U32, R3, R9, super::program::XDP_MD_DATA_END);
    let ipv4 = Family { ip_len: 20, src: 26, dst: 30, addr_len: 4, mss: cookies.mss4, window: cookies.window4 };
    let ipv6 = Family { ip_len: 40, src: 22, dst: 38, addr_len: 16, mss: cookies.mss6, window: cookies.window6 };
    match (v4, v6) {
        (true, true) => {
            let answer6 = a.label();
            check_end(a, 14, drop);
            a.load(Size::U16, R5, R2, 12);
            a.jump32_imm(Cond::Ne, R5, ETHERTYPE_IPV4, answer6);
            emit_family(a, &cookies.key, &ipv4, drop);
            a.bind(answer6);
            emit_family(a, &cookies.key, &ipv6, drop);
        }
        (true, false) => emit_family(a, &cookies.key, &ipv4, drop),
        (false, true) => emit_family(a, &cookies.key, &ipv6, drop),
        (false, false) => a.goto(drop),
    }
}

/// `if r2 + end > r3 goto fail`
fn check_end(a: &mut Asm, end: i16, fail: Label) {
    a.mov(Reg::R4, Reg::R2);
    a.add_imm(Reg::R4, i32::from(end));
    a.jump_reg(Cond::Gt, Reg::R4, Reg::R3, fail);
}

/// Emit one family's answer, from `r2` = data, `r3` = data_end, `r8` = the period, `r9` =
/// the context.
fn emit_family(a: &mut Asm, key: &[u8; 16], f: &Family, drop: Label) {
    use Reg::*;
    let tcp = f.tcp();
    check_end(a, tcp + 20, drop);
    if f.ip_len == 20 {
        a.load(Size::U8, R4, R2, 14);
        a.jump32_imm(Cond::Ne, R4, 0x45, drop); // IPv4 with options
    }
    a.load(Size::U8, R4, R2, tcp + 13);
    a.and_imm(R4, SYN_ACK_RST_FIN);
    a.jump32_imm(Cond::Ne, R4, 0x02, drop);

    // r7 = the client's MSS: the first option's, if it is one, else 536.
    let have_mss = a.label();
    a.mov_imm(R7, 536);
    a.load(Size::U8, R4, R2, tcp + 12);
    a.rsh_imm(R4, 4); // data offset, in 32-bit words
    a.jump_imm(Cond::Lt, R4, 6, have_mss);
    check_end(a, tcp + 24, have_mss);
    a.load(Size::U16, R4, R2, tcp + 20);
    a.jump32_imm(Cond::Ne, R4, TCP_OPTION_MSS as u32, have_mss);
    a.load(Size::U16, R7, R2, tcp + 22);
    a.be(R7, 16);
    a.bind(have_mss);

    // r6 = the index of the largest MSS of the table at most the client's (0 below them all).
    let indexed = a.label();
    a.mov_imm(R6, 0);
    for (i, &mss) in COOKIE_MSS.iter().enumerate().skip(1) {
        a.jump_imm(Cond::Lt, R7, i32::from(mss), indexed);
        a.mov_imm(R6, i as i32);
    }
    a.bind(indexed);

    // The message, as the stack's hasher sees it: our address, our port (little-endian), the
    // client's address, its port, its ISN, the period, the index. Words are loaded as they lie
    // (the octets in order are the little-endian word), ports and the ISN swapped to values.
    let words = if f.addr_len == 4 {
        // dst(4) lport(2) src[0..2] | src[2..4] rport(2) isn(4) | t(4) index(4)
        a.load(Size::U32, R4, R2, f.dst);
        load_port_shifted(a, R5, tcp + 2, 32);
        a.or(R4, R5);
        a.load(Size::U16, R5, R2, f.src);
        a.lsh_imm(R5, 48);
        a.or(R4, R5);
        a.store(Size::U64, R10, MESSAGE_SLOT, R4);
        store_tail_word(a, f.src + 2, tcp, MESSAGE_SLOT - 8);
        3
    } else {
        // dst[0..8] | dst[8..16] | lport(2) src[0..6] | src[6..14] | src[14..16] rport(2) isn(4) | t index
        a.load(Size::U64, R4, R2, f.dst);
        a.store(Size::U64, R10, MESSAGE_SLOT, R4);
        a.load(Size::U64, R4, R2, f.dst + 8);
        a.store(Size::U64, R10, MESSAGE_SLOT - 8, R4);
        load_port_shifted(a, R4, tcp + 2, 0);
        a.load(Size::U64, R5, R2, f.src);
        a.lsh_imm(R5, 16);
        a.or(R4, R5);
        a.store(Size::U64, R10, MESSAGE_SLOT - 16, R4);
        a.load(Size::U64, R4, R2, f.src + 6);
        a.store(Size::U64, R10, MESSAGE_SLOT - 24, R4);
        store_tail_word(a, f.src + 14, tcp, MESSAGE_SLOT - 32);
        6
    };
    a.mov(R4, R6);
    a.lsh_imm(R4, 32);
    a.or(R4, R8);
    a.store(Size::U64, R10, MESSAGE_SLOT - 8 * (words - 1), R4);
    emit_siphash(a, key, words, 8 * words as u64);

    // r6 = the cookie.
    a.and_imm(R0, 0x00ff_ffff);
    a.lsh_imm(R8, 27);
    a.or(R0, R8);
    a.lsh_imm(R6, 24);
    a.or(R6, R0);

    // r7 = the ACK: the client's ISN + 1 (the verifier forgot the bounds with the registers).
    a.load(Size::U32, R2, R9, super::program::XDP_MD_DATA);
    a.load(Size::U32, R3, R9, super::program::XDP_MD_DATA_END);
    check_end(a, tcp + 20, drop);
    a.load(Size::U32, R7, R2, tcp + 4);
    a.be(R7, 32);
    a.add_imm(R7, 1);

    // The frame to the answer's length.
    a.sub(R3, R2);
    a.mov_imm(R2, i32::from(f.answer_len()));
    a.sub(R2, R3);
    a.mov(R1, R9);
    a.call(BPF_FUNC_XDP_ADJUST_TAIL);
    a.jump_imm(Cond::Ne, R0, 0, drop);
    a.load(Size::U32, R2, R9, super::program::XDP_MD_DATA);
    a.load(Size::U32, R3, R9, super::program::XDP_MD_DATA_END);
    check_end(a, f.answer_len(), drop);

    // Ethernet: back to where it came from.
    swap(a, Size::U32, 0, 6);
    swap(a, Size::U16, 4, 10);
    // IP.
    if f.addr_len == 4 {
        a.store_imm(Size::U16, R2, 14, i32::from(u16::from_ne_bytes([0x45, 0])));
        a.store_imm(Size::U16, R2, 16, i32::from(44u16.to_be()));
        a.store_imm(Size::U16, R2, 18, 0); // identification
        a.store_imm(Size::U16, R2, 20, i32::from(0x4000u16.to_be())); // DF
        a.store_imm(Size::U16, R2, 22, i32::from(u16::from_ne_bytes([64, 6]))); // TTL, TCP
        a.store_imm(Size::U16, R2, 24, 0);
        swap(a, Size::U32, f.src, f.dst);
    } else {
        a.store_imm(Size::U32, R2, 14, 0x6000_0000u32.to_be() as i32); // version 6, no class or flow
        a.store_imm(Size::U16, R2, 18, i32::from(24u16.to_be()));
        a.store_imm(Size::U16, R2, 20, i32::from(u16::from_ne_bytes([6, 64]))); // TCP, hop limit
        swap(a, Size::U64, f.src, f.dst);
        swap(a, Size::U64, f.src + 8, f.dst + 8);
    }
    // TCP.
    swap(a, Size::U16, tcp, tcp + 2);
    a.be(R6, 32);
    a.store(Size::U32, R2, tcp + 4, R6);
    a.be(R7, 32);
    a.store(Size::U32, R2, tcp + 8, R7);
    a.store_imm(Size::U16, R2, tcp + 12, i32::from(u16::from_ne_bytes([6 << 4, 0x12]))); // doff 6, SYN|ACK
    a.store_imm(Size::U16, R2, tcp + 14, i32::from(f.window.to_be()));
    a.store_imm(Size::U32, R2, tcp + 16, 0); // checksum, urgent pointer
    let [hi, lo] = f.mss.to_be_bytes();
    a.store_imm(Size::U32, R2, tcp + 20, i32::from_ne_bytes([2, 4, hi, lo]));
    // Checksums.
    if f.addr_len == 4 {
        checksum(a, 0, 14, 34, 24);
    }
    let pseudo = u32::from(6u16.to_be()) + u32::from(24u16.to_be());
    checksum(a, pseudo as i32, f.src, f.answer_len(), tcp + 16);

    // Counted beside the shed SYNs (the map value's third u64).
    a.load(Size::U64, R1, R10, VALUE_SLOT);
    a.mov_imm(R2, 1);
    a.atomic_add64(R1, 16, R2);
    a.mov_imm(R0, XDP_TX as i32);
    a.exit();
}

/// Store at `r10 + slot` the message word of the client's last two address octets (at
/// `r2 + octets`), its port and its ISN (from the TCP header at `r2 + tcp`), little-endian.
fn store_tail_word(a: &mut Asm, octets: i16, tcp: i16, slot: i16) {
    use Reg::*;
    a.load(Size::U16, R4, R2, octets);
    load_port_shifted(a, R5, tcp, 16);
    a.or(R4, R5);
    a.load(Size::U32, R5, R2, tcp + 4);
    a.be(R5, 32);
    a.lsh_imm(R5, 32);
    a.or(R4, R5);
    a.store(Size::U64, R10, slot, R4);
}

/// `dst = be16(*(u16 *)(r2 + off)) << shift`
fn load_port_shifted(a: &mut Asm, dst: Reg, off: i16, shift: i32) {
    a.load(Size::U16, dst, Reg::R2, off);
    a.be(dst, 16);
    if shift > 0 {
        a.lsh_imm(dst, shift);
    }
}

/// Swap the `size` fields at `r2 + x` and `r2 + y` (through `r4`, `r5`).
fn swap(a: &mut Asm, size: Size, x: i16, y: i16) {
    a.load(size, Reg::R4, Reg::R2, x);
    a.load(size, Reg::R5, Reg::R2, y);
    a.store(size, Reg::R2, x, Reg::R5);
    a.store(size, Reg::R2, y, Reg::R4);
}

/// Store at `r2 + at` the Internet checksum (RFC 1071) of the 16-bit words from `r2 + from`
/// to `r2 + to`, plus `seed` (words as loaded on this host; the field itself holds zero).
fn checksum(a: &mut Asm, seed: i32, from: i16, to: i16, at: i16) {
    use Reg::*;
    a.mov_imm(R4, seed);
    for off in (from..to).step_by(2) {
        a.load(Size::U16, R5, R2, off);
        a.add(R4, R5);
    }
    for _ in 0..3 {
        a.mov(R5, R4);
        a.rsh_imm(R5, 16);
        a.and_imm(R4, 0xffff);
        a.add(R4, R5);
    }
    a.xor_imm(R4, 0xffff);
    a.store(Size::U16, R2, at, R4);
}

/// Emit SipHash-2-4 keyed with `key` over the `words` 8-byte words at `r10 + MESSAGE_SLOT`
/// downwards, a message of `len` bytes (a multiple of 8); leave the hash in `r0`. Uses `r0` to
/// `r5`.
fn emit_siphash(a: &mut Asm, key: &[u8; 16], words: i16, len: u64) {
    use Reg::*;
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    let (v0, v1, v2, v3) = (R1, R2, R3, R4);
    a.load_imm64(v0, k0 ^ 0x736f_6d65_7073_6575);
    a.load_imm64(v1, k1 ^ 0x646f_7261_6e64_6f6d);
    a.load_imm64(v2, k0 ^ 0x6c79_6765_6e65_7261);
    a.load_imm64(v3, k1 ^ 0x7465_6462_7974_6573);
    let block = |a: &mut Asm, rounds: usize| {
        a.xor(v3, R0);
        for _ in 0..rounds {
            sip_round(a);
        }
        a.xor(v0, R0);
    };
    for i in 0..words {
        a.load(Size::U64, R0, R10, MESSAGE_SLOT - 8 * i);
        block(a, 2);
    }
    a.load_imm64(R0, len << 56);
    block(a, 2);
    a.xor_imm(v2, 0xff);
    for _ in 0..4 {
        sip_round(a);
    }
    a.mov(R0, v0);
    a.xor(R0, v1);
    a.xor(R0, v2);
    a.xor(R0, v3);
}

/// One SipRound on `v0..v3` in `r1..r4` (`r5` a scratch).
fn sip_round(a: &mut Asm) {
    use Reg::*;
    let (v0, v1, v2, v3) = (R1, R2, R3, R4);
    let rotl = |a: &mut Asm, x: Reg, n: i32| {
        a.mov(R5, x);
        a.lsh_imm(x, n);
        a.rsh_imm(R5, 64 - n);
        a.or(x, R5);
    };
    a.add(v0, v1);
    rotl(a, v1, 13);
    a.xor(v1, v0);
    rotl(a, v0, 32);
    a.add(v2, v3);
    rotl(a, v3, 16);
    a.xor(v3, v2);
    a.add(v0, v3);
    rotl(a, v3, 21);
    a.xor(v3, v0);
    a.add(v2, v1);
    rotl(a, v1, 17);
    a.xor(v1, v2);
    rotl(a, v2, 32);
}

/// `bpf_xdp_adjust_tail`.
const BPF_FUNC_XDP_ADJUST_TAIL: i32 = 65;
/// XDP action: send the frame back out of the interface it arrived on.
pub const XDP_TX: u32 = 3;

#[cfg(test)]
mod tests {
    use core::hash::Hasher;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::os::fd::{AsFd, OwnedFd};

    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use siphasher::sip::SipHasher24;

    use super::*;
    use crate::xdp::program::{SynShield, XDP_DROP, XDP_PASS, load, steering_program};
    use crate::xdp::sys;

    const US4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const PEER4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 9);
    const US6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2);
    const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0x1234, 0x5678, 0x9abc, 0xdef0);
    const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 9];
    const COOKIES: SynCookieAnswer =
        SynCookieAnswer { key: *b"0123456789abcdef", mss4: 1460, window4: 14600, mss6: 1440, window6: 14400 };

    /// The stack's cookie (`bypass_stack`'s `syncookie`), written out again.
    fn reference(local: (IpAddr, u16), remote: (IpAddr, u16), isn: u32, t: u32, index: u32) -> u32 {
        let mut h = SipHasher24::new_with_key(&COOKIES.key);
        for (ip, port) in [local, remote] {
            match ip {
                IpAddr::V4(a) => h.write(&a.octets()),
                IpAddr::V6(a) => h.write(&a.octets()),
            }
            h.write_u16(port);
        }
        h.write_u32(isn);
        h.write_u32(t);
        h.write_u32(index);
        (t << 27) | (index << 24) | (h.finish() as u32 & 0x00ff_ffff)
    }

    fn period_now() -> u32 {
        ((sys::monotonic_now().as_nanos() as u64 / COOKIE_PERIOD_NS) % 32) as u32
    }

    /// A TCP header from port 40000 to port 7, sequence number `seq`, `flags`, `options`.
    fn tcp(seq: u32, flags: u8, options: &[u8]) -> Vec<u8> {
        let doff = (20 + options.len()) / 4;
        let mut t = vec![0x9c, 0x40, 0, 7];
        t.extend_from_slice(&seq.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0, (doff as u8) << 4, flags, 0xff, 0xff, 0xab, 0xcd, 0, 0]);
        t.extend_from_slice(options);
        t
    }

    fn frame(ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = OUR_MAC.to_vec();
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    fn syn4(seq: u32, flags: u8, options: &[u8]) -> Vec<u8> {
        let t = tcp(seq, flags, options);
        let len = (20 + t.len()) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 61, 6, 0, 0];
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&PEER4.octets());
        p.extend_from_slice(&US4.octets());
        p.extend_from_slice(&t);
        frame(0x0800, &p)
    }

    fn syn6(seq: u32, options: &[u8]) -> Vec<u8> {
        let t = tcp(seq, 0x02, options);
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(t.len() as u16).to_be_bytes());
        p.extend_from_slice(&[6, 61]);
        p.extend_from_slice(&PEER6.octets());
        p.extend_from_slice(&US6.octets());
        p.extend_from_slice(&t);
        frame(0x86dd, &p)
    }

    /// Linux's SYN options: MSS, SACK permitted, timestamps, NOP, window scale 7.
    fn linux_options(mss: u16) -> Vec<u8> {
        let [hi, lo] = mss.to_be_bytes();
        vec![2, 4, hi, lo, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7]
    }

    /// Load the program for our two addresses with a shield of one SYN a minute (the first
    /// passes) and cookies; "redirect" shows as `XDP_PASS` (no socket bound).
    fn load_answering() -> (OwnedFd, OwnedFd, OwnedFd) {
        let xsks = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let map = sys::shield_map_create(1, "bypass_test").expect("create the shield map");
        let shield = SynShield { rate: 1, burst: 1 };
        let addrs = [US4.into(), US6.into()];
        let (prog, _) = load(&addrs, xsks.as_fd(), Some((shield, map.as_fd())), None, XDP_PASS, Some(&COOKIES))
            .unwrap_or_else(|e| panic!("{e}"));
        (prog, map, xsks)
    }

    /// Check `out`, the answer to the SYN `syn` with client sequence number `seq` and client
    /// MSS index `index`: a SYN-ACK back to the client, the cookie as its sequence number, valid
    /// checksums, the MSS option alone. Return the cookie.
    fn check_answer(syn: &[u8], out: &[u8], seq: u32, index: u32) -> u32 {
        let (t0, packet) = (period_now(), SlicedPacket::from_ethernet(out).expect("the answer parses"));
        let eth = packet.link.as_ref().and_then(|l| l.to_header()).expect("Ethernet");
        let eth = match eth {
            etherparse::LinkHeader::Ethernet2(e) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!((eth.source, eth.destination), (OUR_MAC, PEER_MAC), "back to where it came from");
        let Some(TransportSlice::Tcp(tcp)) = packet.transport else { panic!("not TCP") };
        assert_eq!((tcp.source_port(), tcp.destination_port()), (7, 40000));
        assert!(tcp.syn() && tcp.ack() && !tcp.rst() && !tcp.fin() && !tcp.ece());
        assert_eq!(tcp.acknowledgment_number(), seq.wrapping_add(1));
        let (local, remote, (mss, window)) = match packet.net.as_ref().expect("IP") {
            NetSlice::Ipv4(ip) => {
                let h = ip.header().to_header();
                assert_eq!((h.source, h.destination), (US4.octets(), PEER4.octets()));
                assert_eq!((h.time_to_live, h.total_len, h.header_checksum), (64, 44, h.calc_header_checksum()));
                assert!(h.dont_fragment);
                let sum = tcp.to_header().calc_checksum_ipv4_raw(h.source, h.destination, &[]).unwrap();
                assert_eq!(tcp.checksum(), sum, "TCP checksum");
                (IpAddr::V4(US4), IpAddr::V4(PEER4), (COOKIES.mss4, COOKIES.window4))
            }
            NetSlice::Ipv6(ip) => {
                let h = ip.header().to_header();
                assert_eq!((h.source, h.destination), (US6.octets(), PEER6.octets()));
                assert_eq!((h.hop_limit, h.payload_length, h.next_header.0), (64, 24, 6));
                let sum = tcp.to_header().calc_checksum_ipv6_raw(h.source, h.destination, &[]).unwrap();
                assert_eq!(tcp.checksum(), sum, "TCP checksum");
                (IpAddr::V6(US6), IpAddr::V6(PEER6), (COOKIES.mss6, COOKIES.window6))
            }
            other => panic!("{other:?}"),
        };
        let [hi, lo] = mss.to_be_bytes();
        assert_eq!(tcp.options(), [2, 4, hi, lo], "the MSS option alone");
        assert_eq!(tcp.window_size(), window);
        assert_eq!(out.len(), if local.is_ipv4() { 58 } else { 78 }, "cut or grown from {} bytes", syn.len());
        let cookie = tcp.sequence_number();
        let t = cookie >> 27;
        assert!(t == t0 || (t + 1) % 32 == t0, "period {t}, now {t0}");
        assert_eq!(cookie, reference((local, 7), (remote, 40000), seq, t, index), "the stack's cookie");
        cookie
    }

    #[test]
    fn kernel_answers_syns_beyond_the_bucket_with_the_stacks_cookie() {
        if !bypass_lab::testlab::lab_available("kernel_answers_syns_beyond_the_bucket_with_the_stacks_cookie") {
            return;
        }
        let (prog, map, _xsks) = load_answering();
        let run = |f: &[u8]| sys::xdp_test_run_frame(prog.as_fd(), f).expect("BPF_PROG_TEST_RUN");
        assert_eq!(run(&syn4(1, 0x02, &linux_options(1460))).0, XDP_PASS, "the bucket's one token");
        // (MSS option, expected index): rounded down in the table, 536 without one.
        let cases: [(Vec<u8>, u32); 7] = [
            (linux_options(1460), 6),
            (linux_options(1450), 5),
            (linux_options(9000), 7),
            (linux_options(100), 0),
            (vec![], 0),
            (vec![1, 1, 1, 1, 2, 4, 5, 180], 0), // the MSS not first: as if absent
            (vec![2, 4, 4, 0xb0], 1),            // 1200, an entry itself
        ];
        for (i, (options, index)) in cases.iter().enumerate() {
            let seq = 0xfedc_ba98u32.wrapping_add(i as u32 * 0x1111_1111);
            let syn = syn4(seq, 0x02, options);
            let (action, out) = run(&syn);
            assert_eq!(action, XDP_TX, "case {i}");
            check_answer(&syn, &out, seq, *index);
            let syn = syn6(seq, options);
            let (action, out) = run(&syn);
            assert_eq!(action, XDP_TX, "case {i} over IPv6");
            check_answer(&syn, &out, seq, *index);
        }
        // ISN 0xffffffff: the ACK wraps to 0.
        let syn = syn4(u32::MAX, 0x02, &linux_options(1460));
        let (_, out) = run(&syn);
        check_answer(&syn, &out, u32::MAX, 6);
        // Not answered: SYN with RST or FIN, IPv4 with options.
        assert_eq!(run(&syn4(5, 0x06, &[])).0, XDP_DROP, "SYN+RST");
        assert_eq!(run(&syn4(5, 0x03, &[])).0, XDP_DROP, "SYN+FIN");
        let mut with_ip_options = syn4(5, 0x02, &[]);
        with_ip_options[14] = 0x46;
        with_ip_options.splice(34..34, [1, 1, 1, 0]);
        assert_eq!(run(&with_ip_options).0, XDP_DROP, "IPv4 options");
        let value = sys::shield_map_get(map.as_fd(), 0).unwrap();
        let count = |at: usize| u64::from_ne_bytes(value[at..at + 8].try_into().unwrap());
        assert_eq!((count(8), count(16)), (18, 15), "shed, and answered of those");
    }

    #[test]
    fn cookies_need_a_shield() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let err = steering_program(&[US4.into()], file.as_fd(), None, None, XDP_PASS, Some(&COOKIES)).unwrap_err();
        assert!(matches!(err, crate::xdp::XdpError::InvalidConfig(_)), "{err}");
        let key = format!("{COOKIES:?}");
        assert!(!key.contains("48"), "the key stays out of Debug: {key}");
    }
}
