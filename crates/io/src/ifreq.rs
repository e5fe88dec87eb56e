//! Interface queries: an interface's index, hardware address and MTU, and the interface ioctl
//! (`netdevice(7)`) they and `SIOCETHTOOL` go through. The one copy of these calls: the AF_XDP
//! device, the AF_PACKET device and [`crate::netdev`] all ask here.
//!
//! Everything acts in the calling thread's network namespace (the ioctls go through a socket
//! made there).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Return the index of the interface `name`.
pub fn index(name: &str) -> io::Result<u32> {
    check_name(name)?;
    let cname = CString::new(name).map_err(|_| no_such_device())?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 { Err(io::Error::last_os_error()) } else { Ok(index) }
}

/// Return the ARP hardware type (`ARPHRD_ETHER` for Ethernet) and the MAC address of the
/// interface `name` (`SIOCGIFHWADDR`).
pub fn hardware_address(name: &str) -> io::Result<(u16, [u8; 6])> {
    let req = ioctl(name, libc::SIOCGIFHWADDR, |_| {})?;
    // SAFETY: SIOCGIFHWADDR fills the `ifru_hwaddr` member of the union.
    let addr = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, &src) in mac.iter_mut().zip(&addr.sa_data) {
        *dst = src as u8;
    }
    Ok((addr.sa_family, mac))
}

/// Return the MTU of the interface `name` (`SIOCGIFMTU`).
pub fn mtu(name: &str) -> io::Result<u32> {
    let req = ioctl(name, libc::SIOCGIFMTU, |_| {})?;
    // SAFETY: SIOCGIFMTU fills the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// Issue `SIOCETHTOOL` on the interface `name` with `data` (an ethtool command structure, its
/// first `u32` the command).
///
/// # Safety
/// `data` must point to a structure of the size and layout the command in its first word
/// expects (`linux/ethtool.h`), valid for reads and writes for the duration of the call.
pub(crate) unsafe fn ethtool(name: &str, data: *mut libc::c_void) -> io::Result<()> {
    ioctl(name, libc::SIOCETHTOOL, |req| req.ifr_ifru.ifru_data = data.cast()).map(drop)
}

/// Fill an `ifreq` naming `name`, let `prepare` set its union, and issue the interface ioctl
/// `request` with it on a throwaway datagram socket; return the request as the kernel left it.
///
/// Only requests that read or write the `ifreq` itself, or memory a pointer `prepare` stored
/// in it points to (`SIOCETHTOOL`, whose caller answers for that memory), may go through here.
fn ioctl(name: &str, request: libc::c_ulong, prepare: impl FnOnce(&mut libc::ifreq)) -> io::Result<libc::ifreq> {
    check_name(name)?;
    // SAFETY: socket(2) has no memory preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor we just opened and nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain data (integers, arrays and a union of them and a pointer); all
    // zeroes is a valid (empty) value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    prepare(&mut req);
    // SAFETY: `req` is a valid `ifreq` whose name is NUL-terminated (checked to be shorter
    // than the field, which the zeroing ended with NULs); the kernel reads and writes only the
    // `ifreq`, and for SIOCETHTOOL the memory its data pointer names, for which `ethtool`'s
    // caller answers.
    let ret = unsafe { libc::ioctl(socket.as_raw_fd(), request as _, &raw mut req) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(req) }
}

/// Refuse a name no interface can have (empty, `IFNAMSIZ` bytes or longer, or with a NUL) as
/// the kernel does: no such device.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(no_such_device());
    }
    Ok(())
}

fn no_such_device() -> io::Error {
    io::Error::from_raw_os_error(libc::ENODEV)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_bad_names_are_no_device() {
        assert!(index("lo").unwrap() > 0);
        let (hatype, mac) = hardware_address("lo").unwrap();
        assert_eq!((hatype, mac), (libc::ARPHRD_LOOPBACK, [0; 6]));
        assert!(mtu("lo").unwrap() >= 1280);
        for name in ["", "a-name-far-too-long", "l\0o"] {
            assert_eq!(index(name).unwrap_err().raw_os_error(), Some(libc::ENODEV), "{name:?}");
            assert_eq!(mtu(name).unwrap_err().raw_os_error(), Some(libc::ENODEV), "{name:?}");
        }
        assert!(index("bypass-none0").is_err());
    }
}
