//! Facts about network interfaces that the kernel keeps: which IPv4 addresses it has
//! configured on an interface, and whether the interface exists.

use std::io;
use std::net::Ipv4Addr;

/// Return the IPv4 addresses the kernel has configured on `iface` (empty if none).
pub fn kernel_ipv4_addrs(iface: &str) -> io::Result<Vec<Ipv4Addr>> {
    sys::ipv4_addrs(iface)
}

/// Return whether an interface named `iface` exists in this network namespace.
pub fn exists(iface: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(iface).exists()
}

#[allow(unsafe_code)]
mod sys {
    use std::ffi::CStr;
    use std::io;
    use std::net::Ipv4Addr;

    pub fn ipv4_addrs(iface: &str) -> io::Result<Vec<Ipv4Addr>> {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs writes a pointer to a list it allocates into `head`; on success
        // we own the list until freeifaddrs.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        let mut cur = head;
        while !cur.is_null() {
            // SAFETY: `cur` is a non-null node of the list getifaddrs returned, alive until
            // freeifaddrs below.
            let ifa = unsafe { &*cur };
            cur = ifa.ifa_next;
            if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
                continue;
            }
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            if name.to_bytes() != iface.as_bytes() {
                continue;
            }
            // SAFETY: ifa_addr is non-null and points at a sockaddr of at least its family's size.
            let family = unsafe { (*ifa.ifa_addr).sa_family };
            if family as i32 == libc::AF_INET {
                // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        // SAFETY: `head` came from a successful getifaddrs and is freed once.
        unsafe { libc::freeifaddrs(head) };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_address() {
        assert!(exists("lo"));
        assert!(!exists("no-such-if0"));
        let addrs = kernel_ipv4_addrs("lo").unwrap();
        assert!(addrs.is_empty() || addrs.contains(&Ipv4Addr::LOCALHOST));
        assert!(kernel_ipv4_addrs("no-such-if0").unwrap().is_empty());
    }
}
