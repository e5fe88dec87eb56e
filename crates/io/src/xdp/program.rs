//! The XDP program that steers the stack's own traffic to its AF_XDP sockets, a tiny eBPF
//! assembler to write it with, and its loading and attachment.
//!
//! # What the program does
//!
//! For every frame the interface receives, before the kernel's network stack sees it:
//!
//! - an ARP frame (EtherType 0x0806) whose target protocol address is our IPv4 address, or
//! - an IPv4 frame (EtherType 0x0800) whose destination address is our IPv4 address
//!
//! goes to the AF_XDP socket bound on the receiving queue (`bpf_redirect_map(&xskmap,
//! ctx->rx_queue_index, XDP_PASS)`); every other frame is passed to the kernel (`XDP_PASS`),
//! so the host keeps working while the stack runs. If no socket is bound on the queue, the
//! redirect falls back to `XDP_PASS` too.
//!
//! # Listing
//!
//! Registers: `r1`-`r5` carry helper arguments and are clobbered by calls, `r6`-`r9` survive
//! calls, `r0` is the return value, `r10` the frame pointer. `wN` is the low 32 bits of `rN`.
//! Multi-byte fields are loaded in network byte order; the immediates they are compared with
//! are converted to the same in-memory order when the program is built.
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
//!  7:     if w5 == 0x0800 goto ipv4
//!  8:     if w5 != 0x0806 goto pass  ; neither IPv4 nor ARP
//!         ; arp:
//!  9:     r4 = r2
//! 10:     r4 += 42                   ; end of an Ethernet + IPv4-over-Ethernet ARP packet
//! 11:     if r4 > r3 goto pass
//! 12:     r5 = *(u32 *)(r2 + 38)     ; ARP target protocol address
//! 13:     if w5 != OUR_IP goto pass
//! 14:     goto redirect
//!         ; ipv4:
//! 15:     r4 = r2
//! 16:     r4 += 34                   ; end of a minimal IPv4 header
//! 17:     if r4 > r3 goto pass
//! 18:     r5 = *(u32 *)(r2 + 30)     ; IPv4 destination address
//! 19:     if w5 != OUR_IP goto pass
//!         ; redirect:
//! 20-21:  r1 = map_fd(xskmap)        ; 16-byte instruction: the loader turns the fd into a map pointer
//! 22:     r2 = r6                    ; key: the receiving queue
//! 23:     r3 = XDP_PASS              ; flags: the action when no socket is bound on that queue
//! 24:     call bpf_redirect_map      ; helper 51; r0 = XDP_REDIRECT or XDP_PASS
//! 25:     exit
//!         ; pass:
//! 26:     r0 = XDP_PASS
//! 27:     exit
//! ```
//!
//! Every packet load is preceded by a comparison of its end against `data_end`: the verifier
//! refuses the program otherwise.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::XdpMode;
use super::error::XdpError;
use super::sys;
pub use super::sys::BpfInsn;

/// XDP action: drop the frame.
pub const XDP_DROP: u32 = 1;
/// XDP action: hand the frame to the kernel's network stack.
pub const XDP_PASS: u32 = 2;
/// XDP action: the frame was redirected (to an AF_XDP socket, here).
pub const XDP_REDIRECT: u32 = 4;

/// Helper function number of `bpf_redirect_map` (`enum bpf_func_id`).
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// Offsets of the fields of `struct xdp_md`, the program's context.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// eBPF opcode parts (`linux/bpf_common.h`, `linux/bpf.h`). An opcode is the OR of a class,
/// and for loads a size and mode, for ALU and jumps an operation and a source.
mod op {
    // Instruction classes (low three bits).
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;
    // Load sizes.
    pub const W: u8 = 0x00;
    pub const H: u8 = 0x08;
    pub const DW: u8 = 0x18;
    // Load modes.
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    // ALU operations.
    pub const ADD: u8 = 0x00;
    pub const MOV: u8 = 0xb0;
    // Jump operations.
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGT: u8 = 0x20;
    pub const JNE: u8 = 0x50;
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
    /// 16 bits.
    U16,
    /// 32 bits.
    U32,
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
}

impl Cond {
    fn op(self) -> u8 {
        match self {
            Cond::Eq => op::JEQ,
            Cond::Ne => op::JNE,
            Cond::Gt => op::JGT,
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
            Size::U16 => op::H,
            Size::U32 => op::W,
        };
        self.emit(op::LDX | op::MEM | size, dst, src, off, 0);
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

    /// `if dst <cond> src goto target` (64-bit comparison)
    pub fn jump_reg(&mut self, cond: Cond, dst: Reg, src: Reg, target: Label) {
        self.emit_jump(op::JMP | cond.op() | op::X, dst, src, 0, target);
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

/// Return the steering program for `ip` with the XSKMAP `xskmap` (see the module docs).
///
/// `fallback` is the action `bpf_redirect_map` returns when no socket is bound on the queue:
/// [`XDP_PASS`] in production; tests use [`XDP_DROP`] to tell "redirect" from "pass".
pub fn steering_program(ip: Ipv4Addr, xskmap: BorrowedFd<'_>, fallback: u32) -> Vec<BpfInsn> {
    use Reg::*;
    // Packet fields sit in memory in network byte order; a load reads them in host order, so
    // compare with constants laid out the same way.
    let our_ip = u32::from_ne_bytes(ip.octets());
    let ethertype_ipv4 = u16::from_ne_bytes([0x08, 0x00]) as u32;
    let ethertype_arp = u16::from_ne_bytes([0x08, 0x06]) as u32;

    let mut a = Asm::new();
    let (arp, ipv4, redirect, pass) = (a.label(), a.label(), a.label(), a.label());

    a.load(Size::U32, R6, R1, XDP_MD_RX_QUEUE_INDEX);
    a.load(Size::U32, R2, R1, XDP_MD_DATA);
    a.load(Size::U32, R3, R1, XDP_MD_DATA_END);
    a.mov(R4, R2);
    a.add_imm(R4, 14);
    a.jump_reg(Cond::Gt, R4, R3, pass);
    a.load(Size::U16, R5, R2, 12);
    a.jump32_imm(Cond::Eq, R5, ethertype_ipv4, ipv4);
    a.jump32_imm(Cond::Ne, R5, ethertype_arp, pass);

    a.bind(arp);
    a.mov(R4, R2);
    a.add_imm(R4, 14 + 28);
    a.jump_reg(Cond::Gt, R4, R3, pass);
    a.load(Size::U32, R5, R2, 14 + 24);
    a.jump32_imm(Cond::Ne, R5, our_ip, pass);
    a.goto(redirect);

    a.bind(ipv4);
    a.mov(R4, R2);
    a.add_imm(R4, 14 + 20);
    a.jump_reg(Cond::Gt, R4, R3, pass);
    a.load(Size::U32, R5, R2, 14 + 16);
    a.jump32_imm(Cond::Ne, R5, our_ip, pass);

    a.bind(redirect);
    a.load_map_fd(R1, xskmap);
    a.mov(R2, R6);
    a.mov_imm(R3, fallback as i32);
    a.call(BPF_FUNC_REDIRECT_MAP);
    a.exit();

    a.bind(pass);
    a.mov_imm(R0, XDP_PASS as i32);
    a.exit();
    a.finish()
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
/// all the interface's queues. Dropping it detaches the program (the kernel also detaches it
/// when the process dies, even by SIGKILL, because it is attached through a BPF link).
#[derive(Debug)]
pub struct XdpProgram {
    // Fields drop in order: the link first (detach), then the program, then the map. The link
    // and program are only held, never read.
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    iface: String,
    ifindex: u32,
    mode: AttachMode,
    ip: Ipv4Addr,
    slots: u32,
}

impl XdpProgram {
    /// Load the steering program for `ip` and attach it to `iface` (index `ifindex`) in `mode`,
    /// with room for sockets on queues `0..slots`.
    pub(crate) fn attach(
        iface: &str,
        ifindex: u32,
        ip: Ipv4Addr,
        mode: XdpMode,
        slots: u32,
    ) -> Result<XdpProgram, XdpError> {
        let map = sys::xskmap_create(slots, "bypass_xsks")
            .map_err(|e| XdpError::from_io(format!("create an XSKMAP for {iface}"), e))?;
        let prog = load(ip, map.as_fd(), XDP_PASS)?;
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
        log::debug!("attached XDP program for {ip} to {iface} (index {ifindex}) in {}", mode.describe());
        Ok(XdpProgram { _link: link, _prog: prog, map, iface: iface.to_string(), ifindex, mode, ip, slots })
    }

    /// Return where the program runs.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// Return the interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Return the interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Return the IPv4 address whose traffic the program redirects.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Return the number of queue slots in the XSKMAP.
    pub fn slots(&self) -> u32 {
        self.slots
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

/// Load the steering program for `ip` using `xskmap`, with `fallback` as the redirect's
/// fallback action.
pub(crate) fn load(ip: Ipv4Addr, xskmap: BorrowedFd<'_>, fallback: u32) -> Result<OwnedFd, XdpError> {
    let insns = steering_program(ip, xskmap, fallback);
    sys::xdp_prog_load(&insns, "bypass_steer").map_err(|(source, log)| match source.raw_os_error() {
        Some(libc::EPERM) => XdpError::NotPermitted { what: "loading the XDP program".into(), source },
        _ => XdpError::ProgramRejected { log, source },
    })
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
    fn jumps_land_where_the_listing_says() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let insns = steering_program(Ipv4Addr::new(10, 77, 0, 2), file.as_fd(), XDP_PASS);
        assert_eq!(insns.len(), 28, "the module docs list 28 instruction slots");
        let target = |at: usize| (at as isize + 1 + insns[at].off as isize) as usize;
        assert_eq!(target(5), 26); // short frame -> pass
        assert_eq!(target(7), 15); // IPv4 -> ipv4
        assert_eq!(target(8), 26); // not ARP -> pass
        assert_eq!(target(14), 20); // our ARP -> redirect
        assert_eq!(target(19), 26); // not our IPv4 -> pass
        assert_eq!(insns[13].imm, i32::from_ne_bytes([10, 77, 0, 2]));
        assert_eq!(insns[24].imm, BPF_FUNC_REDIRECT_MAP);
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

    /// Run the program in the kernel (`BPF_PROG_TEST_RUN`) on hand-made frames. Built with
    /// `XDP_DROP` as the redirect fallback and an empty XSKMAP, "redirect" shows as `XDP_DROP`.
    #[test]
    fn kernel_verifies_and_runs_the_program() {
        if !crate::testlab::lab_available("kernel_verifies_and_runs_the_program") {
            return;
        }
        let map = sys::xskmap_create(1, "bypass_test").expect("create XSKMAP");
        let prog = load(Ipv4Addr::new(10, 77, 0, 2), map.as_fd(), XDP_DROP).unwrap_or_else(|e| panic!("{e}"));
        let redirect = XDP_DROP;
        let us = [10, 77, 0, 2];
        let high = [10, 77, 0, 200]; // our address with the top bit of the last octet set
        let cases: Vec<(&str, Vec<u8>, u32)> = vec![
            ("ARP for us", arp(us), redirect),
            ("ARP for another host", arp([10, 77, 0, 3]), XDP_PASS),
            ("ARP truncated before the target address", arp(us)[..41].to_vec(), XDP_PASS),
            ("IPv4 to us", ipv4(us), redirect),
            ("IPv4 to another host", ipv4([10, 77, 0, 3]), XDP_PASS),
            ("IPv4 to an address differing in the top bit", ipv4(high), XDP_PASS),
            ("IPv4 truncated before the destination", ipv4(us)[..33].to_vec(), XDP_PASS),
            ("bare Ethernet header", ether([0x08, 0x00], &[]), XDP_PASS),
            ("IPv6", ether([0x86, 0xdd], &[0x60; 60]), XDP_PASS),
            ("VLAN-tagged IPv4 to us", ether([0x81, 0x00], &ipv4(us)[12..]), XDP_PASS),
        ];
        for (name, frame, want) in cases {
            let got = sys::xdp_test_run(prog.as_fd(), &frame).expect("BPF_PROG_TEST_RUN");
            assert_eq!(got, want, "{name}");
        }
        let high_prog = load(Ipv4Addr::from(high), map.as_fd(), XDP_DROP).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sys::xdp_test_run(high_prog.as_fd(), &ipv4(high)).unwrap(), redirect, "top-bit address");
        assert_eq!(sys::xdp_test_run(high_prog.as_fd(), &ipv4(us)).unwrap(), XDP_PASS, "top-bit address");
    }
}
