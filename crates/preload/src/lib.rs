//! `libbypass_preload.so`: the library `bypass run` preloads (`LD_PRELOAD`) into an
//! unmodified program, so that the program's TCP sockets, IPv4 and IPv6, are served by the
//! bypass stack in the program's own threads, as OpenOnload's `onload` serves them.
//!
//! - **Which sockets.** `socket(AF_INET|AF_INET6, SOCK_STREAM)` makes a kernel socket (its
//!   descriptor is the program's, and holds its flags and options) that is not yet anyone's.
//!   `bind` to one of our addresses or a wildcard, `listen`, or `connect` to an address the
//!   stack reaches (our subnets, or past our gateway) makes it ours; `bind` to any other
//!   address (loopback, the kernel's) or `connect` elsewhere gives it to the kernel for good.
//!   Everything else (files, pipes, Unix and UDP sockets) goes to the C library untouched:
//!   one bit test per call decides (`table.rs`).
//! - **Where the stack runs.** In the calls themselves ([`bypass_runtime`]'s in-thread
//!   mode): a call polls the device and TCP under the stack's lock; a call that must wait
//!   spins for `BYPASS_SPIN_USEC` (for good with `BYPASS_BUSY_POLL=1`), then sleeps in the
//!   kernel (`ppoll`, `epoll_pwait`) on an eventfd the stack rings, beside the program's own
//!   descriptors, so a signal interrupts it as it would the kernel's wait. The runtime's
//!   helper thread keeps the protocol moving while the program is away.
//! - **Readiness.** `poll`, `ppoll`, `select`, `pselect` and `epoll_*` mix our sockets and
//!   kernel descriptors in one wait (`epoll.rs`).
//! - **fork.** A forked child shares the parent's memory and device but not its threads:
//!   its calls on inherited sockets of ours fail with `EOPNOTSUPP` and one log line, and its
//!   new sockets are the kernel's. A child that execs starts clean (and starts its own stack,
//!   should the parent's have let go of the device).
//!
//! Configured by `bypass run` through the environment ([`env`](mod@env)); without `BYPASS_IFACE`
//! every call passes through.
//!
//! | file | what |
//! |---|---|
//! | `exports.rs` | the C functions exported in place of the C library's |
//! | `real.rs` | the C library's own functions, found with `dlsym(RTLD_NEXT)`, and `atexit` |
//! | `table.rs` | which descriptors are ours, and what each is |
//! | `sock.rs` | one TCP socket of the program, from `socket` to `close` |
//! | `errno.rs` | Linux's error numbers, as our calls return them |
//! | `listen.rs` | listening ports shared between sockets |
//! | `epoll.rs` | `poll`, `select` and `epoll` over our sockets and the kernel's descriptors |
//! | `wait.rs` | waiting for our sockets beside the kernel's descriptors |
//! | `signals.rs` | signals that arrive while a call spins |
//! | `env.rs` | [`env`](mod@env): the `BYPASS_*` variables and the runtime they start |
#![deny(unsafe_code)]

pub mod env;
mod epoll;
mod errno;
mod exports;
mod listen;
mod real;
mod signals;
mod sock;
mod table;
mod wait;
