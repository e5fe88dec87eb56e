//! Waking a device's wait from another thread: an `eventfd(2)` polled beside the socket.
//!
//! A thread that runs a stack sleeps in `poll(2)` on its socket when idle; an application
//! thread that hands it work (data to send, a connection to open) writes the eventfd, and
//! the sleeper's `poll` returns. The device drains the counter when its wait ends.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use bypass_device::Waker;

/// An eventfd shared by the device (which polls and drains it) and its [`Waker`]s.
#[derive(Debug)]
pub(crate) struct WakeFd(Arc<File>);

impl WakeFd {
    /// Create a non-blocking eventfd.
    pub(crate) fn new() -> io::Result<WakeFd> {
        #[allow(unsafe_code)]
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor that
        // nothing else owns, so OwnedFd may take it.
        let fd = unsafe {
            let fd = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        Ok(WakeFd(Arc::new(File::from(fd))))
    }

    /// Return the descriptor to poll for readability.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Return a waker that makes the eventfd readable.
    pub(crate) fn waker(&self) -> Waker {
        let file = Arc::clone(&self.0);
        Waker::new(move || {
            // Only a counter at its maximum refuses (EAGAIN), and then it is readable anyway.
            let _ = (&*file).write(&1u64.to_ne_bytes());
        })
    }

    /// Reset the counter after a wait (nothing to read is fine).
    pub(crate) fn drain(&self) {
        drain(&self.0);
    }
}

/// Reset an eventfd's counter (nothing to read is fine).
fn drain(file: &File) {
    let mut buf = [0u8; 8];
    let _ = (&*file).read(&mut buf);
}

/// A device's eventfd, made when the first [`Waker`] is asked for: polled beside the socket
/// and drained after each wait.
#[derive(Debug, Default)]
pub(crate) struct WakeSlot(Option<WakeFd>);

impl WakeSlot {
    /// Return the descriptor to poll beside the socket, once there is one.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.as_ref().map(WakeFd::fd)
    }

    /// Reset the counter after a wait.
    pub(crate) fn drain(&self) {
        if let Some(wake) = &self.0 {
            wake.drain();
        }
    }

    /// Return a waker for the device called `name`, making the eventfd on the first call;
    /// `None` (and a warning) if the kernel refuses one.
    pub(crate) fn waker(&mut self, name: &str) -> Option<Waker> {
        if self.0.is_none() {
            self.0 = WakeFd::new().map_err(|e| log::warn!("no eventfd for waking {name}: {e}")).ok();
        }
        self.0.as_ref().map(WakeFd::waker)
    }

    /// Return a [`Sleeper`](bypass_device::Sleeper) for the device called `name` whose
    /// socket is `socket` (and `lane`, a second socket of the device, if any): it polls a
    /// copy of the sockets' descriptors beside the eventfd (made here if need be, so the
    /// device's wakers end its sleeps) and drains the eventfd after each; `None` (and a
    /// warning) if the kernel refuses a descriptor.
    pub(crate) fn sleeper(
        &mut self,
        name: &str,
        socket: BorrowedFd<'_>,
        lane: Option<BorrowedFd<'_>>,
    ) -> Option<bypass_device::Sleeper> {
        self.waker(name)?;
        let wake = Arc::clone(&self.0.as_ref()?.0);
        let clone =
            |fd: BorrowedFd<'_>| fd.try_clone_to_owned().map_err(|e| log::warn!("no descriptor to watch {name}: {e}"));
        let socket = clone(socket).ok()?;
        let lane = match lane {
            Some(fd) => Some(clone(fd).ok()?),
            None => None,
        };
        Some(bypass_device::Sleeper::new(move |timeout| {
            let ms = match timeout {
                None => -1,
                // Round up so a short timeout sleeps instead of spinning.
                Some(t) => t.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
            };
            // An error (EINTR, say) is a spurious return, which sleepers allow.
            let _ = poll_any([Some(socket.as_fd()), lane.as_ref().map(AsFd::as_fd), Some(wake.as_fd())], ms);
            drain(&wake);
        }))
    }
}

/// Block until one of `fds` (the `Some`s: sockets, a wake-up descriptor) is readable or
/// `timeout_ms` passes (-1: no limit); return whether one is.
pub(crate) fn poll_any<const N: usize>(fds: [Option<BorrowedFd<'_>>; N], timeout_ms: libc::c_int) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // poll(2) skips entries with a negative descriptor.
    let mut pfds =
        fds.map(|fd| libc::pollfd { fd: fd.map_or(-1, |f| f.as_raw_fd()), events: libc::POLLIN, revents: 0 });
    #[allow(unsafe_code)]
    // SAFETY: `pfds` holds `N` valid pollfds, alive for the call.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), N as libc::nfds_t, timeout_ms) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret > 0) }
}
