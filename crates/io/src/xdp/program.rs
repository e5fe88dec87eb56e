//! The XDP program that steers the stack's own traffic to its AF_XDP sockets, a tiny eBPF
//! assembler to write it with, and its loading and attachment.
//!
//! # What the program does
//!
//! The stack owns a few addresses, IPv4 and IPv6 (at most [`MAX_ADDRS_PER_FAMILY`] of each),
//! baked into the program as immediates. For every frame the interface receives, before the
//! kernel's network stack sees it, these go to the AF_XDP socket bound on the receiving queue
//! (`bpf_redirect_map(&xskmap, ctx->rx_queue_index, XDP_PASS)`):
//!
//! - ARP (EtherType 0x0806) whose target protocol address is one of our IPv4 addresses;
//! - IPv4 (0x0800) whose destination address is one of our IPv4 addresses;
//! - IPv6 (0x86DD) whose destination address is one of our IPv6 addresses, whatever follows
//!   the fixed header (fragments and extension headers included);
//! - a Neighbour Solicitation for one of our IPv6 addresses: IPv6 to the solicited-node group
//!   of one of them (`ff02::1:ffXX:XXXX` with their low 24 bits, [RFC 4291 2.7.1]), next
//!   header ICMPv6 (58), ICMPv6 type 135, target address one of ours ([RFC 4861 4.3]);
//! - a Router Advertisement (ICMPv6 type 134) or an unsolicited Neighbour Advertisement (136)
//!   to the all-nodes group `ff02::1`, next header ICMPv6.
//!
//! The program reads headers only in a packet's first buffer (`data` to `data_end`), so it is
//! loaded multi-buffer aware (`BPF_F_XDP_HAS_FRAGS`): packets larger than a page reach it in
//! several buffers, and interfaces with jumbo MTUs accept it in driver mode ([`XdpProgram::multi_buffer`]).
//!
//! Every other frame is passed to the kernel (`XDP_PASS`), so the host keeps working while the
//! stack runs. If no socket is bound on the queue, the redirect falls back to `XDP_PASS` too.
//! A family in which we own no address passes whole: an IPv4-only stack leaves all IPv6 to the
//! kernel, Router Advertisements included, and an IPv6-only stack all ARP and IPv4.
//!
//! ## Choices in the IPv6 rules
//!
//! - **Solicited-node groups are shared.** All addresses with the same low 24 bits have the
//!   same group, so a solicitation for one of the kernel's own addresses on the interface can
//!   be sent to one of our groups. The program also compares the solicitation's target with
//!   our addresses, so such a solicitation still passes to the kernel. Other messages to our
//!   groups pass as well (an MLD report for the group carries a Hop-by-Hop header, so it fails
//!   the next-header test).
//! - **Multicast both sides would want goes to the stack.** XDP cannot clone a frame: each one
//!   goes either to the socket or to the kernel. Router Advertisements tell the stack its
//!   routers and prefixes, and unsolicited Neighbour Advertisements update its neighbour cache,
//!   while the kernel on a bypass interface normally has IPv6 disabled (it would otherwise
//!   answer for the stack's addresses too). So once the stack owns an IPv6 address, they go to
//!   the stack, and a kernel that runs IPv6 on the same interface no longer hears them.
//! - **Only ICMPv6 right after the fixed header.** NDP messages carry no extension header, so
//!   multicast with one passes; so does multicast to every other group (all-routers, MLD,
//!   mDNS, ...). Unicast needs no such test: the destination address is enough.
//!
//! [RFC 4291 2.7.1]: https://www.rfc-editor.org/rfc/rfc4291#section-2.7.1
//! [RFC 4861 4.3]: https://www.rfc-editor.org/rfc/rfc4861#section-4.3
//!
//! # Listing
//!
//! Registers: `r1`-`r5` carry helper arguments and are clobbered by calls, `r6`-`r9` survive
//! calls, `r0` is the return value, `r10` the frame pointer. `wN` is the low 32 bits of `rN`.
//! Multi-byte fields are loaded in network byte order; the immediates they are compared with
//! are converted to the same in-memory order when the program is built.
//!
//! The program for one IPv4 address `A` and one IPv6 address `B` (32-bit words `B0`..`B3`,
//! solicited-node group `ff02::1:ffSS:SSSS`). Each line marked `[per address]` (or the group
//! of four lines) repeats once per address of the family, each `[per group]` line once per
//! distinct solicited-node group; the blocks of a family we own no address in are left out.
//!
//! ```text
//!         ; on entry r1 = ctx (struct xdp_md *)
//!  0:     r6 = *(u32 *)(r1 + 16)     ; ctx->rx_queue_index, kept for the redirect
//!  1:     r2 = *(u32 *)(r1 + 0)      ; ctx->data: first byte of the frame
//!  2:     r3 = *(u32 *)(r1 + 4)      ; ctx->data_end: one past the last byte
//!  3:     r4 = r2
//!  4:     r4 += 14                   ; end of the Ethernet header
//!  5:     if r4 > r3 goto pass       ; shorter than an Ethernet header
//!  6:     r5 = *(u16 *)(r2 + 12)     ; EtherType
//!  7:     if w5 == 0x0800 goto ipv4  ; [if we own IPv4]
//!  8:     if w5 == 0x86dd goto ipv6  ; [if we own IPv6]
//!  9:     if w5 != 0x0806 goto pass  ; [if we own IPv4, else "goto pass"]
//!         ; arp:
//! 10:     r4 = r2
//! 11:     r4 += 42                   ; end of an Ethernet + IPv4-over-Ethernet ARP packet
//! 12:     if r4 > r3 goto pass
//! 13:     r5 = *(u32 *)(r2 + 38)     ; ARP target protocol address
//! 14:     if w5 == A goto redirect   ; [per address]
//! 15:     goto pass
//!         ; ipv4:
//! 16:     r4 = r2
//! 17:     r4 += 34                   ; end of a minimal IPv4 header
//! 18:     if r4 > r3 goto pass
//! 19:     r5 = *(u32 *)(r2 + 30)     ; IPv4 destination address
//! 20:     if w5 == A goto redirect   ; [per address]
//! 21:     goto pass
//!         ; ipv6:
//! 22:     r4 = r2
//! 23:     r4 += 54                   ; end of the fixed IPv6 header
//! 24:     if r4 > r3 goto pass
//! 25:     r5 = *(u32 *)(r2 + 38)     ; IPv6 destination address, first word
//! 26:     r7 = *(u32 *)(r2 + 42)
//! 27:     r8 = *(u32 *)(r2 + 46)
//! 28:     r9 = *(u32 *)(r2 + 50)     ; last word
//! 29:     if w5 != B0 goto not_b     ; [per address: 29-32]
//! 30:     if w7 != B1 goto not_b
//! 31:     if w8 != B2 goto not_b
//! 32:     if w9 == B3 goto redirect
//!         ; not_b: (multicast)
//! 33:     r4 = *(u8 *)(r2 + 20)      ; next header
//! 34:     if w4 != 58 goto pass      ; not ICMPv6 right after the fixed header
//! 35:     if w5 != 0xff020000 goto pass
//! 36:     if w7 != 0 goto pass
//! 37:     if w8 == 1 goto solicited  ; ff02::1:ffXX:XXXX
//! 38:     if w8 != 0 goto pass
//! 39:     if w9 != 1 goto pass       ; not ff02::1
//!         ; all_nodes:
//! 40:     r4 = r2
//! 41:     r4 += 55                   ; end of the ICMPv6 type
//! 42:     if r4 > r3 goto pass
//! 43:     r4 = *(u8 *)(r2 + 54)      ; ICMPv6 type
//! 44:     if w4 == 134 goto redirect ; Router Advertisement
//! 45:     if w4 == 136 goto redirect ; Neighbour Advertisement
//! 46:     goto pass
//!         ; solicited:
//! 47:     if w9 == 0xffSSSSSS goto ns ; [per group]
//! 48:     goto pass
//!         ; ns:
//! 49:     r4 = r2
//! 50:     r4 += 78                   ; end of a Neighbour Solicitation's target address
//! 51:     if r4 > r3 goto pass
//! 52:     r4 = *(u8 *)(r2 + 54)      ; ICMPv6 type
//! 53:     if w4 != 135 goto pass     ; not a Neighbour Solicitation
//! 54:     r5 = *(u32 *)(r2 + 62)     ; target address, first word
//! 55:     r7 = *(u32 *)(r2 + 66)
//! 56:     r8 = *(u32 *)(r2 + 70)
//! 57:     r9 = *(u32 *)(r2 + 74)     ; last word
//! 58:     if w5 != B0 goto not_b2    ; [per address: 58-61]
//! 59:     if w7 != B1 goto not_b2
//! 60:     if w8 != B2 goto not_b2
//! 61:     if w9 == B3 goto redirect
//!         ; not_b2:
//! 62:     goto pass
//!         ; redirect:
//! 63-64:  r1 = map_fd(xskmap)        ; 16-byte instruction: the loader turns the fd into a map pointer
//! 65:     r2 = r6                    ; key: the receiving queue
//! 66:     r3 = XDP_PASS              ; flags: the action when no socket is bound on that queue
//! 67:     call bpf_redirect_map      ; helper 51; r0 = XDP_REDIRECT or XDP_PASS
//! 68:     exit
//!         ; pass:
//! 69:     r0 = XDP_PASS
//! 70:     exit
//! ```
//!
//! Every packet load is preceded by a comparison of its end against `data_end`: the verifier
//! refuses the program otherwise.
//!
//! # The SYN shield
//!
//! With a [`SynShield`], the lines that redirect a frame to one of our unicast addresses
//! (20 and 32 above) jump to a test instead, and bare TCP SYNs (SYN set, ACK clear) go
//! through a token bucket per receive queue first; every other frame goes on to `redirect`
//! as before. The bucket is the first `u64` of the queue's value in the shield's array map:
//! the theoretical arrival time `tat` of the next SYN (the generic cell rate algorithm,
//! ITU-T I.371), which [`SynShield::admit`] mirrors. `COST` is `10^9 / rate` nanoseconds,
//! `LIMIT` is `(burst - 1) * COST`.
//!
//! ```text
//!         ; ipv4_ours: [if we own IPv4]
//!         r4 = *(u8 *)(r2 + 23)      ; protocol
//!         if w4 != 6 goto redirect   ; not TCP
//!         r4 = *(u16 *)(r2 + 20)     ; flags and fragment offset
//!         r4 &= 0x1fff               ; (in wire order)
//!         if w4 != 0 goto redirect   ; a later fragment: no TCP header
//!         r4 = *(u8 *)(r2 + 14)      ; version and header length
//!         r4 &= 0x0f
//!         r4 <<= 2                   ; header length in bytes, 0-60
//!         r5 = r2
//!         r5 += r4                   ; r5 + 14: the TCP header
//!         r4 = r5
//!         r4 += 28
//!         if r4 > r3 goto redirect   ; too short for the flags: the stack decides
//!         r4 = *(u8 *)(r5 + 27)      ; TCP flags
//!         r4 &= 0x12
//!         if w4 == 0x02 goto syn     ; SYN without ACK
//!         goto redirect
//!         ; ipv6_ours: [if we own IPv6]
//!         r4 = *(u8 *)(r2 + 20)      ; next header
//!         if w4 != 6 goto redirect   ; not TCP right after the fixed header
//!         r4 = r2
//!         r4 += 68
//!         if r4 > r3 goto redirect
//!         r4 = *(u8 *)(r2 + 67)      ; TCP flags
//!         r4 &= 0x12
//!         if w4 != 0x02 goto redirect
//!         ; syn:
//!         call bpf_ktime_get_ns      ; helper 5
//!         r7 = r0                    ; now
//!         *(u32 *)(r10 - 4) = w6     ; key: the receiving queue
//!         r1 = map_fd(shield)
//!         r2 = r10
//!         r2 += -4
//!         call bpf_map_lookup_elem   ; helper 1
//!         if r0 == 0 goto redirect   ; a queue beyond the map: not shielded
//!         r8 = *(u64 *)(r0 + 0)      ; tat
//!         if r8 > r7 goto ahead
//!         r8 = r7                    ; tat = max(tat, now)
//!         ; ahead:
//!         r9 = r8
//!         r9 -= r7                   ; how far the schedule runs ahead of the clock
//!         r1 = LIMIT                 ; 16-byte immediate load
//!         if r9 > r1 goto shed
//!         r8 += COST
//!         *(u64 *)(r0 + 0) = r8
//!         goto redirect
//!         ; shed:
//!         r1 = 1
//!         lock *(u64 *)(r0 + 8) += r1 ; the count of SYNs shed
//!         r0 = XDP_DROP              ; [with cookies: answer it, `cookie` module; its count
//!         exit                       ;  of answers is the value's third u64]
//! ```
//!
//! The schedule's read and write are not atomic: two CPUs running the program for one queue
//! at once may both take the last token, so the shield errs towards letting a SYN through.
//! A SYN behind IPv6 extension headers, or an IPv4 one too short to show its flags, is not
//! tested: it reaches the stack, which drops or answers it as any other segment.
//!
//! # The SYN lane
//!
//! With a lane (`lane`: the number of queue slots, `LANES` below), every bare SYN that the
//! shield lets through (every bare SYN, without a shield) goes to a second socket on the
//! same queue, whose key in the XSKMAP is the queue's plus `LANES`, instead of the queue's
//! own socket. The two sockets share one UMEM and fill ring, but each has its RX ring, so a
//! flood fills the lane's ring (the kernel drops the excess there, counted in that socket's
//! `rx_ring_full`, and the frame goes back to the UMEM's free list) and never the ring the
//! established connections' frames arrive in; the stack takes SYNs from the lane within a
//! budget, after its own ring. In place of `goto redirect` after the bucket (or in place
//! of the bucket):
//!
//! ```text
//!         ; lane:
//!         r1 = map_fd(xskmap)
//!         r2 = r6
//!         r2 += LANES                ; the lane's key
//!         r3 = FALLBACK
//!         call bpf_redirect_map
//!         exit
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::XdpMode;
use super::cookie;
use super::error::XdpError;
use super::sys;
pub use super::sys::BpfInsn;
use bypass_device::SynCookieAnswer;

/// XDP action: drop the frame.
pub const XDP_DROP: u32 = 1;
/// XDP action: hand the frame to the kernel's network stack.
pub const XDP_PASS: u32 = 2;
/// XDP action: the frame was redirected (to an AF_XDP socket, here).
pub const XDP_REDIRECT: u32 = 4;

/// Helper function numbers (`enum bpf_func_id`).
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
pub(crate) const BPF_FUNC_KTIME_GET_NS: i32 = 5;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// Offsets of the fields of `struct xdp_md`, the program's context.
pub(crate) const XDP_MD_DATA: i16 = 0;
pub(crate) const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// eBPF opcode parts (`linux/bpf_common.h`, `linux/bpf.h`). An opcode is the OR of a class,
/// and for loads a size and mode, for ALU and jumps an operation and a source.
mod op {
    // Instruction classes (low three bits).
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;
    // Load sizes.
    pub const W: u8 = 0x00;
    pub const H: u8 = 0x08;
    pub const B: u8 = 0x10;
    pub const DW: u8 = 0x18;
    // Load modes.
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const ATOMIC: u8 = 0xc0;
    // ALU operations.
    pub const ADD: u8 = 0x00;
    pub const SUB: u8 = 0x10;
    pub const DIV: u8 = 0x30;
    pub const OR: u8 = 0x40;
    pub const AND: u8 = 0x50;
    pub const LSH: u8 = 0x60;
    pub const RSH: u8 = 0x70;
    pub const XOR: u8 = 0xa0;
    pub const MOV: u8 = 0xb0;
    /// Byte swap (`BPF_END`, in the 32-bit ALU class), here to big-endian (`BPF_TO_BE`).
    pub const END: u8 = 0xd0;
    pub const TO_BE: u8 = 0x08;
    // Jump operations.
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGT: u8 = 0x20;
    pub const JNE: u8 = 0x50;
    pub const JLT: u8 = 0xa0;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    // Operand source: the immediate (K) or the source register (X).
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
}

/// `BPF_PSEUDO_MAP_FD`: in a 64-bit immediate load, the immediate is a map file descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// An eBPF register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// Return value.
    R0 = 0,
    /// First argument; the context on entry.
    R1,
    /// Second argument.
    R2,
    /// Third argument.
    R3,
    /// Fourth argument.
    R4,
    /// Fifth argument.
    R5,
    /// Callee-saved.
    R6,
    /// Callee-saved.
    R7,
    /// Callee-saved.
    R8,
    /// Callee-saved.
    R9,
    /// Read-only frame pointer.
    R10,
}

/// Size of a memory load.
#[derive(Clone, Copy, Debug)]
pub enum Size {
    /// 8 bits.
    U8,
    /// 16 bits.
    U16,
    /// 32 bits.
    U32,
    /// 64 bits.
    U64,
}

/// A jump condition.
#[derive(Clone, Copy, Debug)]
pub enum Cond {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>` (unsigned)
    Gt,
    /// `<` (unsigned)
    Lt,
}

impl Cond {
    fn op(self) -> u8 {
        match self {
            Cond::Eq => op::JEQ,
            Cond::Ne => op::JNE,
            Cond::Gt => op::JGT,
            Cond::Lt => op::JLT,
        }
    }
}

/// A jump target, bound to an instruction position with [`Asm::bind`].
#[derive(Clone, Copy, Debug)]
pub struct Label(usize);

/// A minimal eBPF assembler: one method per instruction form, forward jumps through labels.
#[derive(Default)]
pub struct Asm {
    insns: Vec<BpfInsn>,
    labels: Vec<Option<usize>>,
    /// Jumps to patch: (instruction index, target label).
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    /// Return an empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Return a new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Bind `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    fn emit(&mut self, code: u8, dst: Reg, src: Reg, off: i16, imm: i32) {
        self.insns.push(BpfInsn { code, regs: (src as u8) << 4 | dst as u8, off, imm });
    }

    fn emit_jump(&mut self, code: u8, dst: Reg, src: Reg, imm: i32, target: Label) {
        self.fixups.push((self.insns.len(), target));
        self.emit(code, dst, src, 0, imm);
    }

    /// `dst = *(size *)(src + off)`
    pub fn load(&mut self, size: Size, dst: Reg, src: Reg, off: i16) {
        let size = match size {
            Size::U8 => op::B,
            Size::U16 => op::H,
            Size::U32 => op::W,
            Size::U64 => op::DW,
        };
        self.emit(op::LDX | op::MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`
    pub fn store(&mut self, size: Size, dst: Reg, off: i16, src: Reg) {
        let size = match size {
            Size::U8 => op::B,
            Size::U16 => op::H,
            Size::U32 => op::W,
            Size::U64 => op::DW,
        };
        self.emit(op::STX | op::MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = imm` (for `U64`, the immediate sign-extended)
    pub fn store_imm(&mut self, size: Size, dst: Reg, off: i16, imm: i32) {
        let size = match size {
            Size::U8 => op::B,
            Size::U16 => op::H,
            Size::U32 => op::W,
            Size::U64 => op::DW,
        };
        self.emit(op::ST | op::MEM | size, dst, Reg::R0, off, imm);
    }

    /// `lock *(u64 *)(dst + off) += src` (an atomic add, `BPF_ATOMIC | BPF_ADD`)
    pub fn atomic_add64(&mut self, dst: Reg, off: i16, src: Reg) {
        self.emit(op::STX | op::ATOMIC | op::DW, dst, src, off, i32::from(op::ADD));
    }

    /// `dst = imm` (a two-slot 64-bit immediate load)
    pub fn load_imm64(&mut self, dst: Reg, imm: u64) {
        self.emit(op::LD | op::IMM | op::DW, dst, Reg::R0, 0, imm as u32 as i32);
        self.emit(0, Reg::R0, Reg::R0, 0, (imm >> 32) as u32 as i32);
    }

    /// `dst = imm` (64-bit register, immediate sign-extended)
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::MOV | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst = src`
    pub fn mov(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::MOV | op::X, dst, src, 0, 0);
    }

    /// `dst += imm`
    pub fn add_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::ADD | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst += src`
    pub fn add(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::ADD | op::X, dst, src, 0, 0);
    }

    /// `dst -= src`
    pub fn sub(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::SUB | op::X, dst, src, 0, 0);
    }

    /// `dst &= imm`
    pub fn and_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::AND | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst <<= imm`
    pub fn lsh_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::LSH | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst >>= imm` (logical)
    pub fn rsh_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::RSH | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst |= src`
    pub fn or(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::OR | op::X, dst, src, 0, 0);
    }

    /// `dst ^= src`
    pub fn xor(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::XOR | op::X, dst, src, 0, 0);
    }

    /// `dst ^= imm` (immediate sign-extended)
    pub fn xor_imm(&mut self, dst: Reg, imm: i32) {
        self.emit(op::ALU64 | op::XOR | op::K, dst, Reg::R0, 0, imm);
    }

    /// `dst /= src` (unsigned; a zero divisor gives zero)
    pub fn div(&mut self, dst: Reg, src: Reg) {
        self.emit(op::ALU64 | op::DIV | op::X, dst, src, 0, 0);
    }

    /// `dst = be<bits>(dst)`: the low `bits` (16, 32 or 64) of `dst` from network to host byte
    /// order on a little-endian host (or back: a swap either way), the rest cleared.
    pub fn be(&mut self, dst: Reg, bits: i32) {
        self.emit(op::ALU | op::END | op::TO_BE, dst, Reg::R0, 0, bits);
    }

    /// `if dst <cond> src goto target` (64-bit comparison)
    pub fn jump_reg(&mut self, cond: Cond, dst: Reg, src: Reg, target: Label) {
        self.emit_jump(op::JMP | cond.op() | op::X, dst, src, 0, target);
    }

    /// `if dst <cond> imm goto target` (64-bit comparison, immediate sign-extended)
    pub fn jump_imm(&mut self, cond: Cond, dst: Reg, imm: i32, target: Label) {
        self.emit_jump(op::JMP | cond.op() | op::K, dst, Reg::R0, imm, target);
    }

    /// `if wDST <cond> imm goto target` (32-bit comparison of the low halves)
    pub fn jump32_imm(&mut self, cond: Cond, dst: Reg, imm: u32, target: Label) {
        self.emit_jump(op::JMP32 | cond.op() | op::K, dst, Reg::R0, imm as i32, target);
    }

    /// `goto target`
    pub fn goto(&mut self, target: Label) {
        self.emit_jump(op::JMP | op::JA, Reg::R0, Reg::R0, 0, target);
    }

    /// `dst = map` for the map with file descriptor `fd` (a two-slot 64-bit immediate load).
    pub fn load_map_fd(&mut self, dst: Reg, fd: BorrowedFd<'_>) {
        self.insns.push(BpfInsn {
            code: op::LD | op::IMM | op::DW,
            regs: BPF_PSEUDO_MAP_FD << 4 | dst as u8,
            off: 0,
            imm: fd.as_raw_fd(),
        });
        self.insns.push(BpfInsn { code: 0, regs: 0, off: 0, imm: 0 }); // high 32 bits of the immediate
    }

    /// `call helper` (arguments in r1-r5, result in r0)
    pub fn call(&mut self, helper: i32) {
        self.emit(op::JMP | op::CALL, Reg::R0, Reg::R0, 0, helper);
    }

    /// `exit` (return r0)
    pub fn exit(&mut self) {
        self.emit(op::JMP | op::EXIT, Reg::R0, Reg::R0, 0, 0);
    }

    /// Resolve the jumps and return the instructions.
    ///
    /// # Panics
    ///
    /// If a label used by a jump was never bound: a bug in the program text.
    pub fn finish(mut self) -> Vec<BpfInsn> {
        for &(at, label) in &self.fixups {
            let target = self.labels[label.0].expect("jump to an unbound label");
            // Jump offsets count instructions from the one after the jump.
            self.insns[at].off = (target as isize - at as isize - 1) as i16;
        }
        self.insns
    }
}

/// The most addresses of each family the program matches: each costs a few instructions on
/// the path of every frame of its family.
pub const MAX_ADDRS_PER_FAMILY: usize = 8;

/// Split `addrs` by family, without duplicates, in the order given; refuse an empty list, an
/// address no host can own (unspecified, multicast, IPv4 broadcast), and more than
/// [`MAX_ADDRS_PER_FAMILY`] distinct addresses of one family.
pub(crate) fn check_addrs(addrs: &[IpAddr]) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>), XdpError> {
    let bad = |msg: String| Err(XdpError::InvalidConfig(msg));
    if addrs.is_empty() {
        return bad("the stack needs at least one address (IPv4 or IPv6) for the XDP program to steer".into());
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for &addr in addrs {
        let unusable = match addr {
            _ if addr.is_unspecified() => Some("the unspecified address"),
            _ if addr.is_multicast() => Some("a multicast address"),
            IpAddr::V4(a) if a.is_broadcast() => Some("the broadcast address"),
            _ => None,
        };
        if let Some(what) = unusable {
            return bad(format!("{addr} cannot be one of the stack's addresses: it is {what}"));
        }
        match addr {
            IpAddr::V4(a) if !v4.contains(&a) => v4.push(a),
            IpAddr::V6(a) if !v6.contains(&a) => v6.push(a),
            _ => {}
        }
    }
    for (family, n) in [("IPv4", v4.len()), ("IPv6", v6.len())] {
        if n > MAX_ADDRS_PER_FAMILY {
            return bad(format!(
                "{n} {family} addresses given, but the XDP program matches at most {MAX_ADDRS_PER_FAMILY} per family"
            ));
        }
    }
    Ok((v4, v6))
}

/// Return `x` as a load of its network-order bytes reads it: packet fields sit in memory in
/// network byte order and a load reads them in host order, so immediates are laid out alike.
const fn wire16(x: u16) -> u32 {
    u16::from_ne_bytes(x.to_be_bytes()) as u32
}

/// Return `x` as a 32-bit load of its network-order bytes reads it (see [`wire16`]).
const fn wire32(x: u32) -> u32 {
    u32::from_ne_bytes(x.to_be_bytes())
}

/// Return the four 32-bit words of `addr` as loads read them.
fn wire_words(addr: &Ipv6Addr) -> [u32; 4] {
    let o = addr.octets();
    std::array::from_fn(|i| u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]]))
}

/// Return the last word of the solicited-node group of `addr`, `ff02::1:ffXX:XXXX` with the
/// low 24 bits of `addr` (RFC 4291 2.7.1), as a load reads it.
fn solicited_node_word(addr: &Ipv6Addr) -> u32 {
    wire32(0xff00_0000 | (u32::from_be_bytes(addr.octets()[12..].try_into().expect("4 bytes")) & 0x00ff_ffff))
}

/// Frame offsets from the start of the Ethernet header.
mod at {
    pub const ETHERTYPE: i16 = 12;
    pub const ETH_END: i16 = 14;
    pub const ARP_TARGET: i16 = 14 + 24;
    pub const ARP_END: i16 = 14 + 28;
    pub const IPV4_DST: i16 = 14 + 16;
    pub const IPV4_END: i16 = 14 + 20;
    pub const IPV6_NEXT_HEADER: i16 = 14 + 6;
    pub const IPV6_DST: i16 = 14 + 24;
    pub const IPV6_END: i16 = 14 + 40;
    pub const ICMPV6_TYPE: i16 = IPV6_END;
    pub const NS_TARGET: i16 = IPV6_END + 8;
    pub const NS_END: i16 = NS_TARGET + 16;
    pub const IPV4_VERSION_IHL: i16 = 14;
    pub const IPV4_FRAGMENT: i16 = 14 + 6;
    pub const IPV4_PROTOCOL: i16 = 14 + 9;
    /// The TCP flags byte, from the start of the TCP header.
    pub const TCP_FLAGS: i16 = 13;
    pub const IPV6_TCP_FLAGS: i16 = IPV6_END + TCP_FLAGS;
}

const ETHERTYPE_IPV4: u32 = wire16(0x0800);
const ETHERTYPE_ARP: u32 = wire16(0x0806);
const ETHERTYPE_IPV6: u32 = wire16(0x86dd);
const IPPROTO_ICMPV6: u32 = 58;
const ICMPV6_ROUTER_ADVERT: u32 = 134;
const ICMPV6_NEIGHBOUR_SOLICIT: u32 = 135;
const ICMPV6_NEIGHBOUR_ADVERT: u32 = 136;
const IPPROTO_TCP: u32 = 6;
/// The IPv4 fragment offset (the low 13 bits of the flags-and-offset field).
const IPV4_FRAGMENT_OFFSET: u32 = wire16(0x1fff);
/// The most queue slots a program with a SYN lane serves: the lanes' keys follow the
/// queues' in one XSKMAP of twice as many entries.
pub const MAX_QUEUE_SLOTS: u32 = 1 << 16;

/// TCP's SYN and ACK flags in the flags byte (RFC 9293 3.1): a bare SYN has SYN without ACK.
const TCP_SYN: u32 = 0x02;
const TCP_SYN_ACK: i32 = 0x12;

/// The SYN shield: a token bucket per receive queue, through which the XDP program lets the
/// bare SYNs (SYN set, ACK clear) to our addresses pass. A SYN finding the bucket empty is
/// dropped before it costs a UMEM frame and a copy, and counted (see [`XdpProgram::syn_shed`]).
/// Every other frame is left alone, so established connections keep their place in the
/// rings under a flood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynShield {
    /// SYNs per second each queue lets through in the long run (1 to 1,000,000,000).
    pub rate: u32,
    /// SYNs a queue lets through at once after a quiet spell (at least 1).
    pub burst: u32,
}

impl SynShield {
    /// Return the shield for `rate` SYNs per second per queue, with a burst of a tenth of a
    /// second's worth (at least 1).
    pub fn new(rate: u32) -> SynShield {
        SynShield { rate, burst: (rate / 10).max(1) }
    }

    /// Return nanoseconds of credit one SYN costs: the bucket refills one token every this often.
    pub fn cost_ns(self) -> u64 {
        1_000_000_000 / u64::from(self.rate.max(1))
    }

    /// Return the most nanoseconds a queue's schedule may run ahead of the clock and still let a
    /// SYN through: `burst - 1` tokens' worth.
    pub fn limit_ns(self) -> u64 {
        u64::from(self.burst.max(1) - 1) * self.cost_ns()
    }

    pub(crate) fn check(self) -> Result<(), XdpError> {
        if self.rate == 0 || self.rate > 1_000_000_000 {
            return Err(XdpError::InvalidConfig(format!(
                "the SYN shield's rate must be 1 to 1000000000 SYNs per second, not {}; leave the shield off to let every SYN through",
                self.rate
            )));
        }
        if self.burst == 0 {
            return Err(XdpError::InvalidConfig("the SYN shield's burst must be at least 1 SYN".into()));
        }
        Ok(())
    }

    /// Mirror the program's bucket: at `now_ns`, with the queue's schedule at `*tat_ns`,
    /// return whether a SYN passes, and advance the schedule if it does.
    ///
    /// The bucket is kept as the theoretical arrival time of the next SYN (the generic cell
    /// rate algorithm, ITU-T I.371): one number per queue, no division on the data path.
    pub fn admit(self, tat_ns: &mut u64, now_ns: u64) -> bool {
        let tat = (*tat_ns).max(now_ns);
        if tat - now_ns > self.limit_ns() {
            return false;
        }
        *tat_ns = tat + self.cost_ns();
        true
    }
}

/// `if r2 + end > r3 goto pass`: the bounds check before loads below `end` (3 instructions).
fn check_end(a: &mut Asm, end: i16, pass: Label) {
    a.mov(Reg::R4, Reg::R2);
    a.add_imm(Reg::R4, i32::from(end));
    a.jump_reg(Cond::Gt, Reg::R4, Reg::R3, pass);
}

/// Load the IPv6 address at `r2 + off` into `w5`, `w7`, `w8`, `w9` (4 instructions).
fn load_ipv6(a: &mut Asm, off: i16) {
    for (i, reg) in [Reg::R5, Reg::R7, Reg::R8, Reg::R9].into_iter().enumerate() {
        a.load(Size::U32, reg, Reg::R2, off + 4 * i as i16);
    }
}

/// `goto target` if the address in `w5`, `w7`, `w8`, `w9` is one of `addrs`; else fall
/// through (4 instructions per address).
fn jump_if_ipv6(a: &mut Asm, addrs: &[Ipv6Addr], target: Label) {
    for addr in addrs {
        let [w0, w1, w2, w3] = wire_words(addr);
        let next = a.label();
        a.jump32_imm(Cond::Ne, Reg::R5, w0, next);
        a.jump32_imm(Cond::Ne, Reg::R7, w1, next);
        a.jump32_imm(Cond::Ne, Reg::R8, w2, next);
        a.jump32_imm(Cond::Eq, Reg::R9, w3, target);
        a.bind(next);
    }
}

/// Return the steering program for our addresses `addrs` with the XSKMAP `xskmap` (see the
/// module docs), or [`XdpError::InvalidConfig`] if `addrs` is unusable (see
/// [`MAX_ADDRS_PER_FAMILY`]).
///
/// `fallback` is the action `bpf_redirect_map` returns when no socket is bound on the queue:
/// [`XDP_PASS`] in production; tests use [`XDP_DROP`] to tell "redirect" from "pass".
///
/// With `shield`, the SYN shield's settings and its map (one 24-byte value per queue: the
/// bucket's schedule, the count of SYNs shed, the count of those answered with a cookie), bare TCP SYNs to our
/// addresses go through the bucket first (see the module docs). With `lane` (the number of
/// queue slots, at most [`MAX_QUEUE_SLOTS`]), bare TCP SYNs that pass go to the key of their
/// queue plus `lane`: the SYN lane (see the module docs). With `cookies` (and a shield),
/// the SYNs the bucket has no token for are answered with a SYN cookie from the program
/// ([`cookie`](super::cookie)), not dropped.
pub fn steering_program(
    addrs: &[IpAddr],
    xskmap: BorrowedFd<'_>,
    shield: Option<(SynShield, BorrowedFd<'_>)>,
    lane: Option<u32>,
    fallback: u32,
    cookies: Option<&SynCookieAnswer>,
) -> Result<Vec<BpfInsn>, XdpError> {
    use Reg::*;
    let (v4, v6) = check_addrs(addrs)?;
    if let Some((settings, _)) = shield {
        settings.check()?;
    }
    if cookies.is_some() && shield.is_none() {
        return Err(XdpError::InvalidConfig(
            "SYN cookies in the XDP program answer the SYNs beyond the SYN shield's rate: set a shield too".into(),
        ));
    }
    if let Some(slots) = lane
        && !(1..=MAX_QUEUE_SLOTS).contains(&slots)
    {
        return Err(XdpError::InvalidConfig(format!(
            "the SYN lane needs 1 to {MAX_QUEUE_SLOTS} queue slots, not {slots}"
        )));
    }
    let mut groups = Vec::new();
    for group in v6.iter().map(solicited_node_word) {
        if !groups.contains(&group) {
            groups.push(group);
        }
    }

    let mut a = Asm::new();
    if cookies.is_some() {
        a.store(Size::U64, R10, cookie::CTX_SLOT, R1); // for the answer, after calls
    }
    let (ipv4, ipv6, solicited, ns, redirect, pass) =
        (a.label(), a.label(), a.label(), a.label(), a.label(), a.label());
    // Where a frame to one of our unicast addresses goes: through the SYN test, with a shield
    // or a lane.
    let screened = shield.is_some() || lane.is_some();
    let (ipv4_ours, ipv6_ours) = if screened { (a.label(), a.label()) } else { (redirect, redirect) };

    a.load(Size::U32, R6, R1, XDP_MD_RX_QUEUE_INDEX);
    a.load(Size::U32, R2, R1, XDP_MD_DATA);
    a.load(Size::U32, R3, R1, XDP_MD_DATA_END);
    check_end(&mut a, at::ETH_END, pass);
    a.load(Size::U16, R5, R2, at::ETHERTYPE);
    if !v4.is_empty() {
        a.jump32_imm(Cond::Eq, R5, ETHERTYPE_IPV4, ipv4);
    }
    if !v6.is_empty() {
        a.jump32_imm(Cond::Eq, R5, ETHERTYPE_IPV6, ipv6);
    }
    if v4.is_empty() {
        a.goto(pass);
    } else {
        a.jump32_imm(Cond::Ne, R5, ETHERTYPE_ARP, pass);

        // arp:
        check_end(&mut a, at::ARP_END, pass);
        a.load(Size::U32, R5, R2, at::ARP_TARGET);
        for ip in &v4 {
            a.jump32_imm(Cond::Eq, R5, u32::from_ne_bytes(ip.octets()), redirect);
        }
        a.goto(pass);

        a.bind(ipv4);
        check_end(&mut a, at::IPV4_END, pass);
        a.load(Size::U32, R5, R2, at::IPV4_DST);
        for ip in &v4 {
            a.jump32_imm(Cond::Eq, R5, u32::from_ne_bytes(ip.octets()), ipv4_ours);
        }
        a.goto(pass);
    }

    if !v6.is_empty() {
        a.bind(ipv6);
        check_end(&mut a, at::IPV6_END, pass);
        load_ipv6(&mut a, at::IPV6_DST);
        jump_if_ipv6(&mut a, &v6, ipv6_ours);
        // Multicast: only ICMPv6 straight after the fixed header, to ff02::1 or ff02::1:ffXX:XXXX.
        a.load(Size::U8, R4, R2, at::IPV6_NEXT_HEADER);
        a.jump32_imm(Cond::Ne, R4, IPPROTO_ICMPV6, pass);
        a.jump32_imm(Cond::Ne, R5, wire32(0xff02_0000), pass);
        a.jump32_imm(Cond::Ne, R7, 0, pass);
        a.jump32_imm(Cond::Eq, R8, wire32(1), solicited);
        a.jump32_imm(Cond::Ne, R8, 0, pass);
        a.jump32_imm(Cond::Ne, R9, wire32(1), pass);

        // all_nodes:
        check_end(&mut a, at::ICMPV6_TYPE + 1, pass);
        a.load(Size::U8, R4, R2, at::ICMPV6_TYPE);
        a.jump32_imm(Cond::Eq, R4, ICMPV6_ROUTER_ADVERT, redirect);
        a.jump32_imm(Cond::Eq, R4, ICMPV6_NEIGHBOUR_ADVERT, redirect);
        a.goto(pass);

        a.bind(solicited);
        for &group in &groups {
            a.jump32_imm(Cond::Eq, R9, group, ns);
        }
        a.goto(pass);

        a.bind(ns);
        check_end(&mut a, at::NS_END, pass);
        a.load(Size::U8, R4, R2, at::ICMPV6_TYPE);
        a.jump32_imm(Cond::Ne, R4, ICMPV6_NEIGHBOUR_SOLICIT, pass);
        load_ipv6(&mut a, at::NS_TARGET);
        jump_if_ipv6(&mut a, &v6, redirect);
        a.goto(pass);
    }

    if screened {
        let syn = a.label();
        // Where a SYN that passed goes: its queue's lane, or the queue's socket.
        let admitted = if lane.is_some() { a.label() } else { redirect };
        if !v4.is_empty() {
            // ipv4_ours: a TCP segment, the first fragment, flags SYN without ACK?
            a.bind(ipv4_ours);
            a.load(Size::U8, R4, R2, at::IPV4_PROTOCOL);
            a.jump32_imm(Cond::Ne, R4, IPPROTO_TCP, redirect);
            a.load(Size::U16, R4, R2, at::IPV4_FRAGMENT);
            a.and_imm(R4, IPV4_FRAGMENT_OFFSET as i32);
            a.jump32_imm(Cond::Ne, R4, 0, redirect);
            a.load(Size::U8, R4, R2, at::IPV4_VERSION_IHL);
            a.and_imm(R4, 0x0f);
            a.lsh_imm(R4, 2); // header length in bytes, at most 60
            a.mov(R5, R2);
            a.add(R5, R4); // r5 + 14: the TCP header
            a.mov(R4, R5);
            a.add_imm(R4, i32::from(at::ETH_END + at::TCP_FLAGS + 1));
            a.jump_reg(Cond::Gt, R4, R3, redirect); // too short for TCP flags: the stack decides
            a.load(Size::U8, R4, R5, at::ETH_END + at::TCP_FLAGS);
            a.and_imm(R4, TCP_SYN_ACK);
            a.jump32_imm(Cond::Eq, R4, TCP_SYN, syn);
            a.goto(redirect);
        }
        if !v6.is_empty() {
            // ipv6_ours: TCP right after the fixed header, flags SYN without ACK?
            a.bind(ipv6_ours);
            a.load(Size::U8, R4, R2, at::IPV6_NEXT_HEADER);
            a.jump32_imm(Cond::Ne, R4, IPPROTO_TCP, redirect);
            check_end(&mut a, at::IPV6_TCP_FLAGS + 1, redirect);
            a.load(Size::U8, R4, R2, at::IPV6_TCP_FLAGS);
            a.and_imm(R4, TCP_SYN_ACK);
            a.jump32_imm(Cond::Ne, R4, TCP_SYN, redirect);
        }

        a.bind(syn);
        if let Some((settings, map)) = shield {
            shield_syn(&mut a, settings, map, admitted, cookies.map(|c| (c, !v4.is_empty(), !v6.is_empty())));
        }
        if let Some(slots) = lane {
            // lane: (reached from the bucket, or straight from the SYN test)
            a.bind(admitted);
            a.load_map_fd(R1, xskmap);
            a.mov(R2, R6);
            a.add_imm(R2, slots as i32);
            a.mov_imm(R3, fallback as i32);
            a.call(BPF_FUNC_REDIRECT_MAP);
            a.exit();
        }
    }

    a.bind(redirect);
    a.load_map_fd(R1, xskmap);
    a.mov(R2, R6);
    a.mov_imm(R3, fallback as i32);
    a.call(BPF_FUNC_REDIRECT_MAP);
    a.exit();

    a.bind(pass);
    a.mov_imm(R0, XDP_PASS as i32);
    a.exit();
    Ok(a.finish())
}

/// Emit the SYN shield's test at the `syn` label (see the module docs): take a token from the
/// queue's bucket in `map` and go on to `admitted`, or shed the SYN: drop it, or with
/// `answer` (the cookies' settings, and whether we own IPv4 and IPv6 addresses) answer it
/// with a SYN cookie ([`cookie`](super::cookie)).
fn shield_syn(
    a: &mut Asm,
    settings: SynShield,
    map: BorrowedFd<'_>,
    admitted: Label,
    answer: Option<(&SynCookieAnswer, bool, bool)>,
) {
    use Reg::*;
    let shed = a.label();
    a.call(BPF_FUNC_KTIME_GET_NS);
    a.mov(R7, R0); // now
    a.store(Size::U32, R10, -4, R6); // key: the receiving queue
    a.load_map_fd(R1, map);
    a.mov(R2, R10);
    a.add_imm(R2, -4);
    a.call(BPF_FUNC_MAP_LOOKUP_ELEM);
    a.jump_imm(Cond::Eq, R0, 0, admitted); // a queue beyond the map: not shielded
    a.load(Size::U64, R8, R0, 0); // the theoretical arrival time of the next SYN
    let ahead = a.label();
    a.jump_reg(Cond::Gt, R8, R7, ahead);
    a.mov(R8, R7);
    a.bind(ahead);
    a.mov(R9, R8);
    a.sub(R9, R7); // how far the schedule runs ahead of the clock
    a.load_imm64(R1, settings.limit_ns());
    a.jump_reg(Cond::Gt, R9, R1, shed);
    a.add_imm(R8, settings.cost_ns() as i32);
    a.store(Size::U64, R0, 0, R8);
    a.goto(admitted);

    a.bind(shed);
    a.mov_imm(R1, 1);
    a.atomic_add64(R0, 8, R1);
    if let Some((cookies, v4, v6)) = answer {
        let drop = a.label();
        a.store(Size::U64, R10, cookie::VALUE_SLOT, R0); // to count the answer
        cookie::emit_answer(a, cookies, v4, v6, drop);
        a.bind(drop);
    }
    a.mov_imm(R0, XDP_DROP as i32);
    a.exit();
}

/// Where the program runs, as obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native XDP: run by the driver on its receive buffers.
    Driver,
    /// Generic XDP: run by the core on socket buffers, for any driver (slower).
    Generic,
}

impl AttachMode {
    fn flags(self) -> u32 {
        match self {
            AttachMode::Driver => sys::XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => sys::XDP_FLAGS_SKB_MODE,
        }
    }

    /// Describe the mode for people: `"driver (native) XDP"` or `"generic (skb) XDP"`.
    pub fn describe(self) -> &'static str {
        match self {
            AttachMode::Driver => "driver (native) XDP",
            AttachMode::Generic => "generic (skb) XDP",
        }
    }
}

/// The steering program attached to one interface, with its XSKMAP; shared by the sockets of
/// all the interface's queues. Dropping it detaches the program at once, even while a child
/// process another thread forked still holds a copy of the link (the kernel also detaches it
/// when the process dies, even by SIGKILL, because it is attached through a BPF link).
#[derive(Debug)]
pub struct XdpProgram {
    // Fields drop in order after `drop` has detached the link: the link, then the program,
    // then the map. The program is only held, never read.
    link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    /// The SYN shield's map, one value per queue (see [`steering_program`]), if shielded.
    shield_map: Option<OwnedFd>,
    shield: Option<SynShield>,
    iface: String,
    ifindex: u32,
    mode: AttachMode,
    addrs: Vec<IpAddr>,
    slots: u32,
    /// Bare SYNs go to the SYN lane's socket of their queue, at key `queue + slots`.
    lane: bool,
    frags: bool,
    /// The SYNs beyond the shield's rate are answered with cookies.
    cookies: bool,
}

/// A program that passes every frame to the kernel (`XDP_PASS`), attached in driver mode,
/// detached on drop: the peer end of a veth needs one to take the frames an XDP program on
/// the other end sends back with `XDP_TX` (the SYN cookies' answers, [`cookie`](super::cookie)).
///
/// A veth's `XDP_TX` puts frames on its peer's receive ring, which only the peer's NAPI
/// drains. The peer runs NAPI if it has an XDP program or GRO on, but the sending veth kicks
/// the peer's NAPI only if the peer has an XDP program (`veth_xdp_flush`, drivers/net/veth.c):
/// without one, the frames wait until the peer's next frame from the normal path, and are
/// dropped when the ring (256 entries) is full. A real NIC sends them out without help.
pub struct PassProgram {
    link: OwnedFd,
    _prog: OwnedFd,
    iface: String,
}

impl PassProgram {
    /// Load the program and attach it to `iface` in driver mode.
    pub fn attach(iface: &str) -> Result<PassProgram, XdpError> {
        let mut a = Asm::new();
        a.mov_imm(Reg::R0, XDP_PASS as i32);
        a.exit();
        Self::attach_insns(iface, &a.finish())
    }

    /// Attach to `iface` a program that drops IPv4 unicast to any address but `ours` and
    /// passes everything else, as the network beyond a host would discard what is sent to
    /// addresses nobody holds: in a lab whose peer namespace both floods a server from a
    /// spoofed address and runs its clients, the answers to the flood then die at the veth,
    /// not in the clients' receive path.
    pub fn attach_dropping_others(iface: &str, ours: Ipv4Addr) -> Result<PassProgram, XdpError> {
        Self::attach_insns(iface, &drop_others_program(ours))
    }

    fn attach_insns(iface: &str, insns: &[BpfInsn]) -> Result<PassProgram, XdpError> {
        let ifindex =
            crate::ifreq::index(iface).map_err(|e| XdpError::from_io(format!("find the interface {iface}"), e))?;
        let prog =
            sys::xdp_prog_load(insns, "bypass_pass", true).map_err(|(source, log)| match source.raw_os_error() {
                Some(libc::EPERM) => XdpError::NotPermitted { what: "loading an XDP program".into(), source },
                _ => XdpError::ProgramRejected { log, source },
            })?;
        let link = super::retry_busy(|| sys::xdp_link_create(prog.as_fd(), ifindex, AttachMode::Driver.flags()))
            .map_err(|e| link_error(iface, AttachMode::Driver, e))?;
        Ok(PassProgram { link, _prog: prog, iface: iface.to_string() })
    }
}

/// The program of [`PassProgram::attach_dropping_others`].
fn drop_others_program(ours: Ipv4Addr) -> Vec<BpfInsn> {
    use Reg::*;
    let mut a = Asm::new();
    let pass = a.label();
    a.load(Size::U32, R2, R1, XDP_MD_DATA);
    a.load(Size::U32, R3, R1, XDP_MD_DATA_END);
    check_end(&mut a, at::IPV4_END, pass);
    a.load(Size::U16, R5, R2, at::ETHERTYPE);
    a.jump32_imm(Cond::Ne, R5, ETHERTYPE_IPV4, pass);
    a.load(Size::U32, R5, R2, at::IPV4_DST);
    a.jump32_imm(Cond::Eq, R5, u32::from_ne_bytes(ours.octets()), pass);
    a.and_imm(R5, 0xf0); // the first octet's high bits: multicast and broadcast (224/3) pass
    a.jump32_imm(Cond::Gt, R5, 0xd0, pass);
    a.mov_imm(R0, XDP_DROP as i32);
    a.exit();
    a.bind(pass);
    a.mov_imm(R0, XDP_PASS as i32);
    a.exit();
    a.finish()
}

impl Drop for PassProgram {
    fn drop(&mut self) {
        if let Err(e) = sys::xdp_link_detach(self.link.as_fd()) {
            log::debug!("detach the pass program from {}: {e}; it goes when its link closes", self.iface);
        }
    }
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        // Detach explicitly: closing our descriptor detaches only if no forked child holds a
        // copy of it. If the kernel refuses (before 5.9), closing it below still detaches
        // once the last copy closes.
        if let Err(e) = sys::xdp_link_detach(self.link.as_fd()) {
            log::debug!("detach the XDP program from {}: {e}; it goes when its link closes", self.iface);
        }
    }
}

impl XdpProgram {
    /// Load the steering program for our addresses `addrs` and attach it to `iface` (index
    /// `ifindex`) in `mode`, with room for sockets on queues `0..slots` (and, with `lane`,
    /// for each queue's SYN lane after them); with `shield`, the SYN shield, and the SYN
    /// cookies it answers the SYNs beyond its rate with, if any.
    pub(crate) fn attach(
        iface: &str,
        ifindex: u32,
        addrs: &[IpAddr],
        mode: XdpMode,
        slots: u32,
        shield: Option<(SynShield, Option<&SynCookieAnswer>)>,
        lane: bool,
    ) -> Result<XdpProgram, XdpError> {
        let (shield, cookies) = shield.map_or((None, None), |(s, c)| (Some(s), c));
        check_addrs(addrs)?; // before anything is created
        if let Some(settings) = shield {
            settings.check()?;
        }
        if lane && slots > MAX_QUEUE_SLOTS {
            return Err(XdpError::InvalidConfig(format!(
                "the SYN lane serves at most {MAX_QUEUE_SLOTS} queues, not {slots}"
            )));
        }
        let map = sys::xskmap_create(if lane { 2 * slots } else { slots }, "bypass_xsks")
            .map_err(|e| XdpError::from_io(format!("create an XSKMAP for {iface}"), e))?;
        let shield_map = match shield {
            Some(_) => Some(
                sys::shield_map_create(slots, "bypass_shield")
                    .map_err(|e| XdpError::from_io(format!("create the SYN shield's map for {iface}"), e))?,
            ),
            None => None,
        };
        let (prog, frags) = load(
            addrs,
            map.as_fd(),
            shield.zip(shield_map.as_ref().map(AsFd::as_fd)),
            lane.then_some(slots),
            XDP_PASS,
            cookies,
        )?;
        let attach = |m: AttachMode| {
            super::retry_busy(|| sys::xdp_link_create(prog.as_fd(), ifindex, m.flags()))
                .map(|link| (link, m))
                .map_err(|e| link_error(iface, m, e))
        };
        let (link, mode) = match mode {
            XdpMode::Driver => attach(AttachMode::Driver)?,
            XdpMode::Generic => attach(AttachMode::Generic)?,
            XdpMode::Auto => match attach(AttachMode::Driver) {
                Ok(attached) => attached,
                // No driver support, or an MTU driver mode refuses: generic mode works everywhere.
                Err(
                    err @ (XdpError::Unsupported { .. } | XdpError::MtuTooLargeForDriver { .. } | XdpError::Io { .. }),
                ) => {
                    log::debug!("{err}; falling back to generic XDP");
                    attach(AttachMode::Generic)?
                }
                Err(err) => return Err(err),
            },
        };
        let list = addrs.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ");
        log::debug!("attached XDP program for {list} to {iface} (index {ifindex}) in {}", mode.describe());
        let addrs = addrs.to_vec();
        Ok(XdpProgram {
            link,
            _prog: prog,
            map,
            shield_map,
            shield,
            iface: iface.to_string(),
            ifindex,
            mode,
            addrs,
            slots,
            lane,
            frags,
            cookies: cookies.is_some(),
        })
    }

    /// Return where the program runs.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// Return whether the program was loaded multi-buffer aware (`BPF_F_XDP_HAS_FRAGS`), as
    /// it is on every kernel that knows the flag (5.18 and later).
    pub fn multi_buffer(&self) -> bool {
        self.frags
    }

    /// Return the interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Return the interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Return our addresses, whose traffic the program redirects, as configured.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// Return the SYN shield's settings, if the program has one.
    pub fn shield(&self) -> Option<SynShield> {
        self.shield
    }

    /// Return the SYNs the shield has dropped on `queue` (see [`SynShield`]), or `None`
    /// without a shield or if the map cannot be read.
    pub fn syn_shed(&self, queue: u32) -> Option<u64> {
        let map = self.shield_map.as_ref()?;
        match sys::shield_map_get(map.as_fd(), queue) {
            Ok(value) => Some(shed_count(&value)),
            Err(e) => {
                log::debug!("read the SYN shield's map of {} queue {queue}: {e}", self.iface);
                None
            }
        }
    }

    /// Return the SYNs the program has answered with a SYN cookie on `queue` (see
    /// [`cookie`](super::cookie)), or `None` without its cookies or if the map cannot be read.
    pub fn syn_cookies_sent(&self, queue: u32) -> Option<u64> {
        if !self.cookies {
            return None;
        }
        let map = self.shield_map.as_ref()?;
        match sys::shield_map_get(map.as_fd(), queue) {
            Ok(value) => Some(answered_count(&value)),
            Err(e) => {
                log::debug!("read the SYN shield's map of {} queue {queue}: {e}", self.iface);
                None
            }
        }
    }

    /// Return whether the program answers the SYNs beyond the shield's rate with cookies.
    pub fn syn_cookies(&self) -> bool {
        self.cookies
    }

    /// Return the number of queue slots in the XSKMAP.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Return whether the program sends bare SYNs to a SYN lane.
    pub fn syn_lane(&self) -> bool {
        self.lane
    }

    /// Direct the bare SYNs of `queue` to the SYN lane's socket `sock` (register it before the
    /// queue's own socket: until then the program's redirect falls back to the kernel).
    pub(crate) fn register_lane(&self, queue: u32, sock: BorrowedFd<'_>) -> Result<(), XdpError> {
        if !self.lane || queue >= self.slots {
            return Err(XdpError::InvalidConfig(format!(
                "queue {queue} has no SYN lane slot in the program of {}",
                self.iface
            )));
        }
        sys::xskmap_set(self.map.as_fd(), queue + self.slots, sock).map_err(|e| {
            XdpError::from_io(format!("insert the SYN lane of {} queue {queue} into the XSKMAP", self.iface), e)
        })
    }

    /// Direct the traffic of `queue` to the AF_XDP socket `sock`.
    pub(crate) fn register(&self, queue: u32, sock: BorrowedFd<'_>) -> Result<(), XdpError> {
        if queue >= self.slots {
            return Err(XdpError::InvalidConfig(format!("queue {queue} is beyond the program's {} slots", self.slots)));
        }
        sys::xskmap_set(self.map.as_fd(), queue, sock).map_err(|e| {
            XdpError::from_io(format!("insert the socket of {} queue {queue} into the XSKMAP", self.iface), e)
        })
    }
}

/// Return the count of SYNs shed in a value of the shield's map: its second `u64`, written
/// by the program in host byte order.
fn shed_count(value: &[u8; sys::SHIELD_VALUE_SIZE]) -> u64 {
    u64::from_ne_bytes(value[8..16].try_into().expect("8 bytes"))
}

/// Return the count of SYNs answered with a cookie in a value of the shield's map: its third
/// `u64`.
fn answered_count(value: &[u8; sys::SHIELD_VALUE_SIZE]) -> u64 {
    u64::from_ne_bytes(value[16..24].try_into().expect("8 bytes"))
}

/// Load the steering program for our addresses `addrs` using `xskmap` (and the SYN shield
/// `shield` with its map, and the SYN lane after `lane` queue slots), with `fallback` as the redirect's fallback action. Return it and
/// whether it is multi-buffer aware.
///
/// The program is loaded with `BPF_F_XDP_HAS_FRAGS`: it reads headers only between `data` and
/// `data_end`, the first buffer of a packet, which is all a multi-buffer packet guarantees.
/// Without the flag, veth's driver mode refuses a peer MTU above about 3500 bytes (ERANGE,
/// `veth_xdp_set`), and other drivers one above a page. A kernel older than the flag (5.18)
/// refuses the load; the program is then loaded without it.
pub(crate) fn load(
    addrs: &[IpAddr],
    xskmap: BorrowedFd<'_>,
    shield: Option<(SynShield, BorrowedFd<'_>)>,
    lane: Option<u32>,
    fallback: u32,
    cookies: Option<&SynCookieAnswer>,
) -> Result<(OwnedFd, bool), XdpError> {
    let insns = steering_program(addrs, xskmap, shield, lane, fallback, cookies)?;
    let error = |(source, log): (std::io::Error, String)| match source.raw_os_error() {
        Some(libc::EPERM) => XdpError::NotPermitted { what: "loading the XDP program".into(), source },
        _ => XdpError::ProgramRejected { log, source },
    };
    match sys::xdp_prog_load(&insns, "bypass_steer", true) {
        Ok(fd) => Ok((fd, true)),
        Err((source, _)) if source.raw_os_error() == Some(libc::EPERM) => Err(error((source, String::new()))),
        Err((source, _)) => {
            log::debug!("loading the XDP program with BPF_F_XDP_HAS_FRAGS failed ({source}); loading it without");
            sys::xdp_prog_load(&insns, "bypass_steer", false).map(|fd| (fd, false)).map_err(error)
        }
    }
}

/// Turn a `BPF_LINK_CREATE` failure into the error that says what to do.
fn link_error(iface: &str, mode: AttachMode, source: std::io::Error) -> XdpError {
    let iface = iface.to_string();
    match source.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => XdpError::NotPermitted {
            what: format!("attaching the XDP program to {iface} in {}", mode.describe()),
            source,
        },
        Some(libc::EBUSY | libc::EEXIST) => XdpError::AlreadyAttached { iface, source },
        Some(libc::ERANGE) => XdpError::MtuTooLargeForDriver { iface, source },
        Some(libc::ENODEV) => XdpError::NoSuchInterface { iface, source },
        Some(libc::EOPNOTSUPP | libc::EINVAL) => {
            XdpError::Unsupported { iface, what: format!("attaching an XDP program in {}", mode.describe()), source }
        }
        _ => XdpError::Io { what: format!("attach the XDP program to {iface} in {}", mode.describe()), source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(insns: &[BpfInsn]) -> Vec<[u8; 8]> {
        insns
            .iter()
            .map(|i| {
                let mut b = [0u8; 8];
                b[0] = i.code;
                b[1] = i.regs;
                b[2..4].copy_from_slice(&i.off.to_le_bytes());
                b[4..8].copy_from_slice(&i.imm.to_le_bytes());
                b
            })
            .collect()
    }

    #[test]
    fn encodes_like_the_kernel_headers() {
        // Byte fixtures as `llvm-objdump -d` prints them for the same instructions.
        let mut a = Asm::new();
        let l = a.label();
        a.load(Size::U32, Reg::R6, Reg::R1, 16); // 61 16 10 00 00 00 00 00
        a.load(Size::U16, Reg::R5, Reg::R2, 12); // 69 25 0c 00 00 00 00 00
        a.mov(Reg::R4, Reg::R2); // bf 24 00 00 00 00 00 00
        a.add_imm(Reg::R4, 14); // 07 04 00 00 0e 00 00 00
        a.jump_reg(Cond::Gt, Reg::R4, Reg::R3, l); // 2d 34 01 00 00 00 00 00
        a.jump32_imm(Cond::Ne, Reg::R5, 0x0608, l); // 56 05 00 00 08 06 00 00
        a.bind(l);
        a.mov_imm(Reg::R0, 2); // b7 00 00 00 02 00 00 00
        a.call(51); // 85 00 00 00 33 00 00 00
        a.exit(); // 95 00 00 00 00 00 00 00
        assert_eq!(
            bytes(&a.finish()),
            vec![
                [0x61, 0x16, 0x10, 0, 0, 0, 0, 0],
                [0x69, 0x25, 0x0c, 0, 0, 0, 0, 0],
                [0xbf, 0x24, 0, 0, 0, 0, 0, 0],
                [0x07, 0x04, 0, 0, 0x0e, 0, 0, 0],
                [0x2d, 0x34, 0x01, 0, 0, 0, 0, 0],
                [0x56, 0x05, 0, 0, 0x08, 0x06, 0, 0],
                [0xb7, 0x00, 0, 0, 0x02, 0, 0, 0],
                [0x85, 0x00, 0, 0, 0x33, 0, 0, 0],
                [0x95, 0x00, 0, 0, 0, 0, 0, 0],
            ]
        );
    }

    #[test]
    fn encodes_byte_loads() {
        let mut a = Asm::new();
        a.load(Size::U8, Reg::R4, Reg::R2, 20); // 71 24 14 00 00 00 00 00
        assert_eq!(bytes(&a.finish()), vec![[0x71, 0x24, 0x14, 0, 0, 0, 0, 0]]);
    }

    const US4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const US4_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 5);
    const US6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2);
    const US6_B: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x77, 2);
    /// A kernel address whose low 24 bits, and so solicited-node group, are those of [`US6`].
    const COLLIDES: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0xab00, 2);
    const OTHER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 3);
    const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

    #[test]
    fn jumps_land_where_the_listing_says() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let insns = steering_program(&[US4.into(), US6.into()], file.as_fd(), None, None, XDP_PASS, None).unwrap();
        assert_eq!(insns.len(), 71, "the module docs list 71 instruction slots");
        let target = |at: usize| (at as isize + 1 + insns[at].off as isize) as usize;
        let (redirect, pass) = (63, 69);
        assert_eq!(target(5), pass); // short frame
        assert_eq!(target(7), 16); // IPv4 -> ipv4
        assert_eq!(target(8), 22); // IPv6 -> ipv6
        assert_eq!(target(9), pass); // not ARP
        assert_eq!((target(14), target(15)), (redirect, pass)); // ARP: ours, not ours
        assert_eq!((target(20), target(21)), (redirect, pass)); // IPv4: ours, not ours
        assert_eq!(target(24), pass); // short IPv6 header
        assert_eq!([29, 30, 31].map(target), [33; 3]); // not our unicast address: try multicast
        assert_eq!(target(32), redirect); // our unicast address
        assert_eq!([34, 35, 36, 38, 39].map(target), [pass; 5]); // not ICMPv6 to ff02::1 or ff02::1:ff..
        assert_eq!(target(37), 47); // solicited-node
        assert_eq!([target(42), target(44), target(45), target(46)], [pass, redirect, redirect, pass]);
        assert_eq!((target(47), target(48)), (49, pass)); // our group, not ours
        assert_eq!((target(51), target(53)), (pass, pass)); // short, not a solicitation
        assert_eq!([58, 59, 60].map(target), [62; 3]);
        assert_eq!((target(61), target(62)), (redirect, pass));
        assert_eq!(insns[14].imm, i32::from_ne_bytes([10, 77, 0, 2]));
        assert_eq!(insns[32].imm, i32::from_ne_bytes([0, 0, 0, 2]));
        assert_eq!(insns[47].imm, i32::from_ne_bytes([0xff, 0, 0, 2]));
        assert_eq!(insns[67].imm, BPF_FUNC_REDIRECT_MAP);
    }

    #[test]
    fn one_family_leaves_out_the_other() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let v4 = steering_program(&[US4.into()], file.as_fd(), None, None, XDP_PASS, None).unwrap();
        assert_eq!(v4.len(), 71 - 1 - 41, "no IPv6 dispatch (8) and no IPv6 blocks (22-62)");
        let v6 = steering_program(&[US6.into()], file.as_fd(), None, None, XDP_PASS, None).unwrap();
        assert_eq!(v6.len(), 71 - 1 - 12, "no IPv4 dispatch (7) and no ARP or IPv4 blocks (10-21)");
    }

    #[test]
    fn addresses_are_checked() {
        let err = |addrs: &[IpAddr]| match check_addrs(addrs) {
            Err(XdpError::InvalidConfig(msg)) => msg,
            other => panic!("{addrs:?}: {other:?}"),
        };
        assert!(err(&[]).contains("at least one address"));
        assert!(err(&[Ipv4Addr::UNSPECIFIED.into()]).contains("unspecified"));
        assert!(err(&[Ipv6Addr::UNSPECIFIED.into()]).contains("unspecified"));
        assert!(err(&[ALL_NODES.into()]).contains("multicast"));
        assert!(err(&[Ipv4Addr::new(224, 0, 0, 1).into()]).contains("multicast"));
        assert!(err(&[Ipv4Addr::BROADCAST.into()]).contains("broadcast"));
        let nine_v4: Vec<IpAddr> = (1..=9).map(|i| Ipv4Addr::new(10, 77, 0, i).into()).collect();
        assert!(err(&nine_v4).contains("9 IPv4 addresses given"), "{}", err(&nine_v4));
        let nine_v6: Vec<IpAddr> = (1..=9).map(|i| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i).into()).collect();
        assert!(err(&nine_v6).contains("9 IPv6 addresses given"), "{}", err(&nine_v6));
        // Duplicates count once.
        let repeated: Vec<IpAddr> = [US4, US4_B].iter().cycle().take(20).map(|&a| a.into()).collect();
        assert_eq!(check_addrs(&repeated).unwrap(), (vec![US4, US4_B], vec![]));
        let both = [US6.into(), US4.into(), US6_B.into(), US6.into()];
        assert_eq!(check_addrs(&both).unwrap(), (vec![US4], vec![US6, US6_B]));
    }

    #[test]
    fn solicited_node_groups_take_the_low_24_bits() {
        let group = |a: Ipv6Addr| solicited_node_word(&a).to_ne_bytes();
        assert_eq!(group(US6), [0xff, 0, 0, 2]);
        assert_eq!(group(US6_B), [0xff, 0x77, 0, 2]);
        assert_eq!(group(COLLIDES), group(US6));
        assert_eq!(group(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0xfedc, 0xba98)), [0xff, 0xdc, 0xba, 0x98]);
    }

    /// Build an Ethernet frame: destination, source, EtherType, payload.
    fn ether(ethertype: [u8; 2], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(payload);
        f
    }

    fn arp(target: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 77, 0, 1, 0, 0, 0, 0, 0, 0];
        p.extend_from_slice(&target);
        ether([0x08, 0x06], &p)
    }

    fn ipv4(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 1];
        p.extend_from_slice(&dst);
        p.extend_from_slice(&[0x13, 0x88, 0x13, 0x88, 0, 8, 0, 0]);
        ether([0x08, 0x00], &p)
    }

    /// Build an Ethernet/IPv6 frame from fd00:77::1 to `dst` with next header `next`. Nothing
    /// the program does not read is made valid (checksums, hop limit).
    fn ipv6(dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next, 255]);
        p.extend_from_slice(&Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1).octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(payload);
        ether([0x86, 0xdd], &p)
    }

    fn udp6(dst: Ipv6Addr) -> Vec<u8> {
        ipv6(dst, 17, &[0x13, 0x88, 0x13, 0x88, 0, 12, 0, 0, b'p', b'i', b'n', b'g'])
    }

    /// An ICMPv6 message of `kind` with `body` after the 4-byte header.
    fn icmpv6(dst: Ipv6Addr, kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind, 0, 0, 0];
        m.extend_from_slice(body);
        ipv6(dst, 58, &m)
    }

    /// Return the solicited-node group of `addr` (RFC 4291 2.7.1).
    fn group_of(addr: Ipv6Addr) -> Ipv6Addr {
        let o = addr.octets();
        Ipv6Addr::from([0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(o[13]), u16::from_be_bytes([o[14], o[15]])])
    }

    /// A Neighbour Solicitation for `target`, sent to `dst`, with a source link-layer option.
    fn ns_to(dst: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
        let mut body = vec![0; 4]; // reserved
        body.extend_from_slice(&target.octets());
        body.extend_from_slice(&[1, 1, 0x02, 0, 0, 0, 0, 1]);
        icmpv6(dst, 135, &body)
    }

    /// A Neighbour Solicitation for `target`, to its solicited-node group.
    fn ns(target: Ipv6Addr) -> Vec<u8> {
        ns_to(group_of(target), target)
    }

    /// A Router Advertisement (16 bytes after the header, no options).
    fn ra() -> Vec<u8> {
        icmpv6(ALL_NODES, 134, &[64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0])
    }

    /// Run `prog` on `frame` in the kernel and return its action.
    fn verdict(prog: &OwnedFd, frame: &[u8]) -> u32 {
        sys::xdp_test_run(prog.as_fd(), frame).expect("BPF_PROG_TEST_RUN")
    }

    /// Run each (name, frame, action) case through `prog` in the kernel.
    fn run_cases(prog: &OwnedFd, cases: &[(&str, Vec<u8>, u32)]) {
        for (name, frame, want) in cases {
            assert_eq!(verdict(prog, frame), *want, "{name} ({} bytes)", frame.len());
        }
    }

    /// Load the program for `addrs` with an empty XSKMAP and `XDP_DROP` as the redirect's
    /// fallback, so that "redirect" shows as `XDP_DROP`.
    fn load_for_test(map: &OwnedFd, addrs: &[IpAddr]) -> OwnedFd {
        let (prog, frags) =
            load(addrs, map.as_fd(), None, None, XDP_DROP, None).unwrap_or_else(|e| panic!("{addrs:?}: {e}"));
        assert!(frags, "{addrs:?}: this kernel (6.x) loads the program multi-buffer aware");
        prog
    }

    const REDIRECT: u32 = XDP_DROP;

    /// Run the program in the kernel (`BPF_PROG_TEST_RUN`) on hand-made frames.
    #[test]
    fn kernel_verifies_and_runs_the_program() {
        if !bypass_lab::testlab::lab_available("kernel_verifies_and_runs_the_program") {
            return;
        }
        let map = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let prog = load_for_test(&map, &[US4.into()]);
        let us = US4.octets();
        let high = [10, 77, 0, 200]; // our address with the top bit of the last octet set
        run_cases(
            &prog,
            &[
                ("ARP for us", arp(us), REDIRECT),
                ("ARP for another host", arp([10, 77, 0, 3]), XDP_PASS),
                ("ARP truncated before the target address", arp(us)[..41].to_vec(), XDP_PASS),
                ("IPv4 to us", ipv4(us), REDIRECT),
                ("IPv4 to another host", ipv4([10, 77, 0, 3]), XDP_PASS),
                ("IPv4 to an address differing in the top bit", ipv4(high), XDP_PASS),
                ("IPv4 truncated before the destination", ipv4(us)[..33].to_vec(), XDP_PASS),
                ("bare Ethernet header", ether([0x08, 0x00], &[]), XDP_PASS),
                ("IPv6", ether([0x86, 0xdd], &[0x60; 60]), XDP_PASS),
                ("VLAN-tagged IPv4 to us", ether([0x81, 0x00], &ipv4(us)[12..]), XDP_PASS),
                // Without an IPv6 address of ours, all of IPv6 stays with the kernel.
                ("IPv4-only: Router Advertisement", ra(), XDP_PASS),
                ("IPv4-only: IPv6 with an IPv4 address's bytes last", udp6(Ipv6Addr::from(0x0a4d_0002)), XDP_PASS),
            ],
        );
        let high_prog = load_for_test(&map, &[Ipv4Addr::from(high).into()]);
        assert_eq!(sys::xdp_test_run(high_prog.as_fd(), &ipv4(high)).unwrap(), REDIRECT, "top-bit address");
        assert_eq!(sys::xdp_test_run(high_prog.as_fd(), &ipv4(us)).unwrap(), XDP_PASS, "top-bit address");
    }

    #[test]
    fn kernel_runs_the_dual_stack_program() {
        if !bypass_lab::testlab::lab_available("kernel_runs_the_dual_stack_program") {
            return;
        }
        let map = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let prog = load_for_test(&map, &[US4.into(), US6.into(), US4_B.into(), US6_B.into()]);
        let mut ns_hop_by_hop = ns(US6);
        ns_hop_by_hop[20] = 0;
        let mut hop_by_hop_to_us = udp6(US6);
        hop_by_hop_to_us[20] = 0;
        let mut fragment_to_us = udp6(US6);
        fragment_to_us[20] = 44;
        let mut truncated_ns = ns(US6);
        truncated_ns.truncate(77); // one byte short of the target's end
        let ns_full = ns(US6);
        #[rustfmt::skip]
        run_cases(&prog, &[
            // IPv4, both addresses.
            ("ARP for our first IPv4 address", arp(US4.octets()), REDIRECT),
            ("ARP for our second IPv4 address", arp(US4_B.octets()), REDIRECT),
            ("ARP for another host", arp([10, 77, 0, 3]), XDP_PASS),
            ("IPv4 to our first address", ipv4(US4.octets()), REDIRECT),
            ("IPv4 to our second address", ipv4(US4_B.octets()), REDIRECT),
            ("IPv4 to another host", ipv4([10, 77, 0, 3]), XDP_PASS),
            ("IPv4 truncated before the destination", ipv4(US4_B.octets())[..33].to_vec(), XDP_PASS),
            // IPv6 unicast.
            ("IPv6 UDP to our first address", udp6(US6), REDIRECT),
            ("IPv6 UDP to our second address", udp6(US6_B), REDIRECT),
            ("IPv6 UDP to another address", udp6(OTHER6), XDP_PASS),
            ("IPv6 UDP to the colliding kernel address", udp6(COLLIDES), XDP_PASS),
            ("IPv6 with a Hop-by-Hop header to us", hop_by_hop_to_us, REDIRECT),
            ("IPv6 fragment to us", fragment_to_us, REDIRECT),
            ("ICMPv6 echo request to us", icmpv6(US6, 128, &[0, 1, 0, 1]), REDIRECT),
            ("Neighbour Solicitation to our unicast address (NUD)", ns_to(US6, US6), REDIRECT),
            // Neighbour Solicitations to solicited-node groups.
            ("NS for our first address", ns(US6), REDIRECT),
            ("NS for our second address", ns(US6_B), REDIRECT),
            ("NS for another address", ns(OTHER6), XDP_PASS),
            ("NS for the kernel's address, to our group (collision)", ns(COLLIDES), XDP_PASS),
            ("NS for us, sent to another group", ns_to(group_of(OTHER6), US6), XDP_PASS),
            ("NS for us behind a Hop-by-Hop header", ns_hop_by_hop, XDP_PASS),
            ("NS for us truncated before the target's end", truncated_ns, XDP_PASS),
            ("NS for us with nothing after the target", ns_full[..78].to_vec(), REDIRECT),
            ("echo request to our group", icmpv6(group_of(US6), 128, &[0; 20]), XDP_PASS),
            ("UDP to our group", udp6(group_of(US6)), XDP_PASS),
            // All-nodes.
            ("Router Advertisement to ff02::1", ra(), REDIRECT),
            ("unsolicited Neighbour Advertisement to ff02::1", icmpv6(ALL_NODES, 136, &[0x20, 0, 0, 0]), REDIRECT),
            ("MLD query (130) to ff02::1, as ICMPv6 straight after the header", icmpv6(ALL_NODES, 130, &[0; 20]), XDP_PASS),
            ("echo request to ff02::1", icmpv6(ALL_NODES, 128, &[0, 1, 0, 1]), XDP_PASS),
            ("UDP to ff02::1", udp6(ALL_NODES), XDP_PASS),
            ("Router Advertisement to ff02::2", icmpv6(ALL_ROUTERS, 134, &[0; 12]), XDP_PASS),
            ("Router Advertisement truncated before its type", ra()[..54].to_vec(), XDP_PASS),
            ("Router Advertisement with just its type", ra()[..55].to_vec(), REDIRECT),
            // Truncated and odd IPv6.
            ("IPv6 to us truncated before the destination's end", udp6(US6)[..53].to_vec(), XDP_PASS),
            ("IPv6 truncated to its first byte", udp6(US6)[..15].to_vec(), XDP_PASS),
            ("bare Ethernet header, EtherType IPv6", ether([0x86, 0xdd], &[]), XDP_PASS),
            ("VLAN-tagged IPv6 to us", ether([0x81, 0x00], &udp6(US6)[12..]), XDP_PASS),
        ]);
        // Our address with one bit flipped in each 32-bit word in turn, and in its top bit.
        let flips = [24, 56, 88, 120, 127].map(|bit| Ipv6Addr::from(u128::from(US6) ^ (1 << bit)));
        for addr in flips {
            assert_eq!(verdict(&prog, &udp6(addr)), XDP_PASS, "IPv6 to {addr}, one bit off ours");
            assert_eq!(verdict(&prog, &ns(addr)), XDP_PASS, "NS for {addr}, one bit off ours");
        }
        // Every truncation of a solicitation for us: pass until its target is whole.
        for len in 14..ns_full.len() {
            let want = if len >= 78 { REDIRECT } else { XDP_PASS };
            assert_eq!(verdict(&prog, &ns_full[..len]), want, "NS for us cut to {len} bytes");
        }
    }

    #[test]
    fn kernel_runs_the_ipv6_only_program_and_the_largest() {
        if !bypass_lab::testlab::lab_available("kernel_runs_the_ipv6_only_program_and_the_largest") {
            return;
        }
        let map = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let prog = load_for_test(&map, &[US6.into()]);
        run_cases(
            &prog,
            &[
                ("IPv6-only: IPv6 to us", udp6(US6), REDIRECT),
                ("IPv6-only: NS for us", ns(US6), REDIRECT),
                ("IPv6-only: Router Advertisement", ra(), REDIRECT),
                ("IPv6-only: ARP for 10.77.0.2", arp(US4.octets()), XDP_PASS),
                ("IPv6-only: IPv4 to 10.77.0.2", ipv4(US4.octets()), XDP_PASS),
                ("IPv6-only: IPv6 to another address", udp6(OTHER6), XDP_PASS),
            ],
        );
        // The most addresses allowed, every one with its own solicited-node group.
        let v4: Vec<IpAddr> = (1..=8).map(|i| Ipv4Addr::new(10, 77, 0, 10 + i).into()).collect();
        let v6: Vec<Ipv6Addr> = (1..=8).map(|i| Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, i, 0x100 + i)).collect();
        let all: Vec<IpAddr> = v4.iter().copied().chain(v6.iter().map(|&a| a.into())).collect();
        let largest = load_for_test(&map, &all);
        let last6 = v6[7];
        run_cases(
            &largest,
            &[
                ("largest: ARP for the last IPv4 address", arp([10, 77, 0, 18]), REDIRECT),
                ("largest: IPv4 to the last address", ipv4([10, 77, 0, 18]), REDIRECT),
                ("largest: IPv4 to another host", ipv4([10, 77, 0, 19]), XDP_PASS),
                ("largest: IPv6 to the last address", udp6(last6), REDIRECT),
                ("largest: NS for the last address", ns(last6), REDIRECT),
                ("largest: NS for the first address", ns(v6[0]), REDIRECT),
                ("largest: NS for another address", ns(OTHER6), XDP_PASS),
            ],
        );
    }

    /// A TCP segment with `flags` from port 40000 to 7, IPv4 to `dst`, with `options` bytes
    /// of IPv4 options (a multiple of 4). Checksums are left zero: the program reads none.
    fn tcp4(dst: [u8; 4], flags: u8, options: usize) -> Vec<u8> {
        let ihl = 5 + options as u8 / 4;
        let mut p = vec![0x40 | ihl, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 77, 0, 1];
        p.extend_from_slice(&dst);
        p.extend(std::iter::repeat_n(1u8, options)); // NOP options
        p.extend_from_slice(&[0x9c, 0x40, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        ether([0x08, 0x00], &p)
    }

    /// The same segment over IPv6 to `dst`.
    fn tcp6(dst: Ipv6Addr, flags: u8) -> Vec<u8> {
        ipv6(dst, 6, &[0x9c, 0x40, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0])
    }

    const SYN: u8 = 0x02;
    const SYN_ACK: u8 = 0x12;
    const ACK: u8 = 0x10;

    /// Load the program for `addrs` shielded by `shield` with a fresh map of one queue, and
    /// `XDP_TX` as the redirect's fallback: "redirect" shows as `XDP_TX`, a shed SYN as `XDP_DROP`.
    fn load_shielded(addrs: &[IpAddr], shield: SynShield) -> (OwnedFd, OwnedFd, OwnedFd) {
        let xsks = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let map = sys::shield_map_create(1, "bypass_test").expect("create the shield map");
        let (prog, _) = load(addrs, xsks.as_fd(), Some((shield, map.as_fd())), None, XDP_TX, None)
            .unwrap_or_else(|e| panic!("{addrs:?}: {e}"));
        (prog, map, xsks)
    }

    const XDP_TX: u32 = 3;

    fn shed(map: &OwnedFd) -> u64 {
        shed_count(&sys::shield_map_get(map.as_fd(), 0).expect("read the shield map"))
    }

    /// The shield lets `burst` SYNs through at once, then sheds and counts the rest, and
    /// never touches anything but a bare TCP SYN to our addresses.
    #[test]
    fn kernel_sheds_syns_beyond_the_burst() {
        if !bypass_lab::testlab::lab_available("kernel_sheds_syns_beyond_the_burst") {
            return;
        }
        // One SYN a minute in the long run: nothing refills during the test.
        let shield = SynShield { rate: 1, burst: 3 };
        let (prog, map, _xsks) = load_shielded(&[US4.into(), US6.into()], shield);
        let us = US4.octets();
        for i in 0..3 {
            assert_eq!(verdict(&prog, &tcp4(us, SYN, 0)), XDP_TX, "SYN {i} within the burst");
        }
        assert_eq!(shed(&map), 0);
        #[rustfmt::skip]
        run_cases(&prog, &[
            ("IPv4 SYN beyond the burst", tcp4(us, SYN, 0), XDP_DROP),
            ("IPv4 SYN with IP options beyond the burst", tcp4(us, SYN, 8), XDP_DROP),
            ("IPv6 SYN beyond the burst", tcp6(US6, SYN), XDP_DROP),
            ("IPv4 SYN-ACK", tcp4(us, SYN_ACK, 0), XDP_TX),
            ("IPv4 ACK", tcp4(us, ACK, 0), XDP_TX),
            ("IPv4 ACK with IP options", tcp4(us, ACK, 40), XDP_TX),
            ("IPv6 SYN-ACK", tcp6(US6, SYN_ACK), XDP_TX),
            ("IPv6 ACK", tcp6(US6, ACK), XDP_TX),
            ("IPv4 UDP to us", ipv4(us), XDP_TX),
            ("IPv6 UDP to us", udp6(US6), XDP_TX),
            ("ARP for us", arp(us), XDP_TX),
            ("NS for us", ns(US6), XDP_TX),
            ("IPv4 SYN to another host", tcp4([10, 77, 0, 3], SYN, 0), XDP_PASS),
            ("IPv6 SYN to another host", tcp6(OTHER6, SYN), XDP_PASS),
            ("IPv4 SYN cut before its flags", tcp4(us, SYN, 0)[..47].to_vec(), XDP_TX),
            ("IPv6 SYN cut before its flags", tcp6(US6, SYN)[..67].to_vec(), XDP_TX),
        ]);
        assert_eq!(shed(&map), 3, "the three SYNs beyond the burst are counted");
        // A later fragment of a datagram whose bytes look like a SYN is no SYN.
        let mut fragment = tcp4(us, SYN, 0);
        fragment[20] = 0x00;
        fragment[21] = 0x10; // fragment offset 16 (128 bytes)
        assert_eq!(verdict(&prog, &fragment), XDP_TX, "a non-first fragment");
        assert_eq!(shed(&map), 3);
        // The IPv6-only program, shielded, loads and sheds too.
        let (prog6, map6, _xsks6) = load_shielded(&[US6.into()], SynShield { rate: 1, burst: 1 });
        assert_eq!(verdict(&prog6, &tcp6(US6, SYN)), XDP_TX, "IPv6-only: the first SYN");
        assert_eq!(verdict(&prog6, &tcp6(US6, SYN)), XDP_DROP, "IPv6-only: the second SYN");
        assert_eq!(verdict(&prog6, &tcp4(us, SYN, 0)), XDP_PASS, "IPv6-only: an IPv4 SYN");
        assert_eq!(shed(&map6), 1);
    }

    /// Without a shield, a flood of SYNs all goes to the socket.
    #[test]
    fn kernel_passes_every_syn_without_a_shield() {
        if !bypass_lab::testlab::lab_available("kernel_passes_every_syn_without_a_shield") {
            return;
        }
        let map = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let (prog, _) = load(&[US4.into(), US6.into()], map.as_fd(), None, None, XDP_TX, None).unwrap();
        for i in 0..1000 {
            assert_eq!(verdict(&prog, &tcp4(US4.octets(), SYN, 0)), XDP_TX, "IPv4 SYN {i}");
            assert_eq!(verdict(&prog, &tcp6(US6, SYN)), XDP_TX, "IPv6 SYN {i}");
        }
    }

    /// The bucket refills at the configured rate: after a burst is spent, one SYN passes per
    /// `cost_ns`, as the Rust mirror of the bucket says.
    #[test]
    fn kernel_drops_ipv4_unicast_to_other_hosts_only() {
        if !bypass_lab::testlab::lab_available("kernel_drops_ipv4_unicast_to_other_hosts_only") {
            return;
        }
        let prog = sys::xdp_prog_load(&drop_others_program(US4), "bypass_test", true).expect("load");
        run_cases(
            &prog,
            &[
                ("to us", tcp4(US4.octets(), SYN_ACK, 0), XDP_PASS),
                ("to another host", tcp4(US4_B.octets(), SYN_ACK, 0), XDP_DROP),
                ("broadcast", tcp4([255, 255, 255, 255], 0, 0), XDP_PASS),
                ("multicast", tcp4([224, 0, 0, 1], 0, 0), XDP_PASS),
                ("ARP", arp(US4_B.octets()), XDP_PASS),
                ("IPv6", tcp6(US6, SYN_ACK), XDP_PASS),
            ],
        );
    }

    #[test]
    fn kernel_refills_the_bucket_at_the_rate() {
        if !bypass_lab::testlab::lab_available("kernel_refills_the_bucket_at_the_rate") {
            return;
        }
        let shield = SynShield { rate: 4, burst: 1 }; // one SYN every 250 ms
        let (prog, map, _xsks) = load_shielded(&[US4.into()], shield);
        let syn = tcp4(US4.octets(), SYN, 0);
        assert_eq!(verdict(&prog, &syn), XDP_TX, "the first SYN");
        assert_eq!(verdict(&prog, &syn), XDP_DROP, "a second SYN at once");
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(verdict(&prog, &syn), XDP_TX, "a SYN one refill later");
        assert_eq!(shed(&map), 1);
    }

    #[test]
    fn bucket_mirror_admits_the_burst_then_the_rate() {
        let shield = SynShield { rate: 1000, burst: 4 }; // 1 ms a token
        assert_eq!((shield.cost_ns(), shield.limit_ns()), (1_000_000, 3_000_000));
        let mut tat = 0;
        let now = 5_000_000_000;
        let admitted: Vec<bool> = (0..6).map(|_| shield.admit(&mut tat, now)).collect();
        assert_eq!(admitted, [true, true, true, true, false, false]);
        assert!(!shield.admit(&mut tat, now + 999_999), "less than one refill later");
        assert!(shield.admit(&mut tat, now + 1_000_000), "one refill later");
        assert!(!shield.admit(&mut tat, now + 1_000_000));
        // After a quiet spell the bucket holds the burst again, no more.
        let later = now + 1_000_000_000;
        assert_eq!((0..5).filter(|_| shield.admit(&mut tat, later)).count(), 4);
        assert_eq!(SynShield::new(10_000), SynShield { rate: 10_000, burst: 1000 });
        assert_eq!(SynShield::new(5).burst, 1);
    }

    /// The shield changes only where frames to our unicast addresses go: the listing's lines
    /// up to the redirect are the same, but for the jumps of lines 20 and 32.
    #[test]
    fn the_shield_leaves_the_rest_of_the_listing_alone() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let addrs = [US4.into(), US6.into()];
        let plain = steering_program(&addrs, file.as_fd(), None, None, XDP_PASS, None).unwrap();
        let shield = SynShield { rate: 1000, burst: 10 };
        let shielded =
            steering_program(&addrs, file.as_fd(), Some((shield, file.as_fd())), None, XDP_PASS, None).unwrap();
        let calls = |insns: &[BpfInsn]| {
            insns.iter().filter(|i| i.code == op::JMP | op::CALL).map(|i| i.imm).collect::<Vec<_>>()
        };
        assert_eq!(calls(&plain), [BPF_FUNC_REDIRECT_MAP]);
        assert_eq!(calls(&shielded), [BPF_FUNC_KTIME_GET_NS, BPF_FUNC_MAP_LOOKUP_ELEM, BPF_FUNC_REDIRECT_MAP]);
        let target = |insns: &[BpfInsn], at: usize| (at as isize + 1 + insns[at].off as isize) as usize;
        for at in 0..63 {
            if at == 20 || at == 32 {
                // Our unicast addresses: to the SYN tests, placed before the redirect.
                let first = shielded[target(&shielded, at)];
                let want = if at == 20 { at::IPV4_PROTOCOL } else { at::IPV6_NEXT_HEADER };
                assert_eq!((first.code, first.off), (op::LDX | op::MEM | op::B, want), "line {at}");
                continue;
            }
            let (p, s) = (plain[at], shielded[at]);
            assert_eq!((p.code, p.regs, p.imm), (s.code, s.regs, s.imm), "line {at}");
            let (pass, redirect) = (plain.len() - 2, plain.len() - 8);
            let is_jump = p.code & 0x07 == op::JMP || p.code & 0x07 == op::JMP32;
            if is_jump && p.code != op::JMP | op::EXIT {
                let (tp, ts) = (target(&plain, at), target(&shielded, at));
                let same = if tp == pass {
                    ts == shielded.len() - 2
                } else if tp == redirect {
                    ts == shielded.len() - 8
                } else {
                    ts == tp
                };
                assert!(same, "line {at}: jumps to {ts}, not as the plain program's {tp}");
            }
        }
        // The shield's block ends by returning XDP_DROP.
        let exits: Vec<usize> = (0..shielded.len()).filter(|&i| shielded[i].code == op::JMP | op::EXIT).collect();
        assert_eq!(exits.len(), 3);
        let drop = shielded[exits[0] - 1];
        assert_eq!((drop.code, drop.imm), (op::ALU64 | op::MOV | op::K, XDP_DROP as i32));
    }

    #[test]
    fn shield_settings_are_checked() {
        let map = std::fs::File::open("/dev/null").unwrap();
        for bad in [
            SynShield { rate: 0, burst: 1 },
            SynShield { rate: 1, burst: 0 },
            SynShield { rate: 1_000_000_001, burst: 1 },
        ] {
            let err = steering_program(&[US4.into()], map.as_fd(), Some((bad, map.as_fd())), None, XDP_PASS, None)
                .unwrap_err();
            assert!(matches!(err, XdpError::InvalidConfig(_)), "{bad:?}: {err}");
        }
        let ok = SynShield { rate: 1_000_000_000, burst: u32::MAX };
        let insns =
            steering_program(&[US4.into()], map.as_fd(), Some((ok, map.as_fd())), None, XDP_PASS, None).unwrap();
        let plain = steering_program(&[US4.into()], map.as_fd(), None, None, XDP_PASS, None).unwrap();
        assert!(insns.len() > plain.len());
    }
}
