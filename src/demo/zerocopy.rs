//! Rows 3 and 3s: the kernel server sends the server -> client stream from a memfd (64 MiB,
//! filled once per process, sent again and again; the offset wraps), with `sendfile(2)`
//! (row 3) or `splice(2)` file -> pipe -> socket (row 3s).
//!
//! The client is the ordinary kernel client (non-blocking `read(2)`, busy polling).
//! `MSG_ZEROCOPY` is out of scope.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use super::kernel::{ServerResult, Shared};
use super::measure::Window;

/// Size of the file the server sends from.
const FILE_SIZE: u64 = 64 << 20;
/// Most bytes one `sendfile(2)` call is asked for (as the other servers' 64 KiB writes).
const CHUNK: usize = 64 * 1024;

/// The file, made on first use.
static SOURCE: OnceLock<File> = OnceLock::new();

/// Return the memfd holding `FILE_SIZE` bytes of data.
fn source() -> Result<&'static File, String> {
    if let Some(f) = SOURCE.get() {
        return Ok(f);
    }
    let mut f = sys::memfd("bypass-demo-sendfile").map_err(|e| format!("sendfile server: memfd_create: {e}"))?;
    let block: Vec<u8> = (0..1 << 20).map(|i: usize| (i * 7 + 1) as u8).collect();
    for _ in 0..FILE_SIZE / block.len() as u64 {
        f.write_all(&block).map_err(|e| format!("sendfile server: fill the memfd: {e}"))?;
    }
    let _ = SOURCE.set(f);
    SOURCE.get().ok_or_else(|| "sendfile server: the memfd vanished".into())
}

/// How the server moves the file's bytes to the socket.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `sendfile(2)` file -> socket.
    Sendfile,
    /// `splice(2)` file -> pipe, then `splice(2)` pipe -> socket.
    Splice,
}

/// Accept one client on `listener` and stream the file to it (`mode`), spinning on a
/// non-blocking socket, until the client closes (or `shared.stop`).
pub fn server(listener: TcpListener, mode: Mode, shared: &Shared) -> Result<ServerResult, String> {
    let io = |what: &str, e: std::io::Error| format!("sendfile server: {what}: {e}");
    let file = source()?;
    listener.set_nonblocking(true).map_err(|e| io("configure the listener", e))?;
    shared.ready.store(true, Ordering::SeqCst);
    let mut window = Window::default();
    let sock = loop {
        window.observe(&shared.phase, || 0);
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io("accept", e)),
        }
        if shared.stop.load(Ordering::Relaxed) {
            return Err("sendfile server: no client came".into());
        }
        std::hint::spin_loop();
    };
    sock.set_nodelay(true).map_err(|e| io("configure", e))?;
    sock.set_nonblocking(true).map_err(|e| io("configure", e))?;
    let sock = OwnedFd::from(sock);
    let pipe = match mode {
        Mode::Splice => Some(sys::pipe().map_err(|e| io("pipe2", e))?),
        Mode::Sendfile => None,
    };
    // Bytes spliced into the pipe and not yet into the socket.
    let mut in_pipe = 0usize;
    let mut offset: u64 = 0;
    loop {
        window.observe(&shared.phase, || 0);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let len = CHUNK.min((FILE_SIZE - offset) as usize);
        let sent = match &pipe {
            None => sys::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut offset, len),
            Some((r, w)) => {
                if in_pipe == 0 {
                    // The pipe is empty, so this does not wait; it takes references to the
                    // memfd's pages.
                    in_pipe = sys::splice(file.as_raw_fd(), Some(&mut offset), w.as_raw_fd(), len)
                        .map_err(|e| io("splice file -> pipe", e))?;
                }
                sys::splice(r.as_raw_fd(), None, sock.as_raw_fd(), in_pipe).inspect(|n| in_pipe -= n)
            }
        };
        match sent {
            Ok(_) => {
                if offset >= FILE_SIZE {
                    offset = 0;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            // The client closed (with our data unread: a reset or a broken pipe).
            Err(_) => break,
        }
    }
    window.finish(0);
    let (usage, _) = window.delta().ok_or("sendfile server: the client's measurement window was not seen")?;
    let mode = match mode {
        Mode::Sendfile => "kernel TCP, sendfile(2), busy polling",
        Mode::Splice => "kernel TCP, splice(2) file -> pipe -> socket, busy polling",
    };
    Ok(ServerResult { usage, copied: None, mode: mode.into() })
}

/// memfd_create(2), sendfile(2), pipe2(2) and splice(2), which std does not wrap.
#[allow(unsafe_code)]
mod sys {
    use std::fs::File;
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};

    /// Return a new pipe (read end, write end), close-on-exec.
    pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a writable array of two ints, as pipe2 requires.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are new descriptors that nothing else owns.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// Move up to `len` bytes from `from` (at `*offset`, advanced, if given) to `to` without
    /// waiting (SPLICE_F_NONBLOCK); return them.
    pub fn splice(from: RawFd, offset: Option<&mut u64>, to: RawFd, len: usize) -> std::io::Result<usize> {
        let mut off = offset.as_ref().map_or(0, |o| **o as libc::loff_t);
        let off_ptr = if offset.is_some() { &mut off as *mut libc::loff_t } else { std::ptr::null_mut() };
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: both descriptors are open for the duration of the call (the caller holds
        // them); `off_ptr` is null or points to `off`, a live, writable loff_t.
        let n = unsafe { libc::splice(from, off_ptr, to, std::ptr::null_mut(), len, flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(o) = offset {
            *o = off as u64;
        }
        Ok(n as usize)
    }

    /// Return a new anonymous memory file (close-on-exec).
    pub fn memfd(name: &str) -> std::io::Result<File> {
        let name = std::ffi::CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Send up to `len` bytes of `file` from `*offset` to `sock`; advance `*offset` by the
    /// bytes sent and return them.
    pub fn sendfile(sock: RawFd, file: RawFd, offset: &mut u64, len: usize) -> std::io::Result<usize> {
        let mut off = *offset as libc::off_t;
        // SAFETY: both descriptors are open for the duration of the call (the caller holds
        // them); `off` is a valid, writable off_t that sendfile updates.
        let n = unsafe { libc::sendfile(sock, file, &mut off, len) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        *offset = off as u64;
        Ok(n as usize)
    }
}
