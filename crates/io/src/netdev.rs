//! Facts about network interfaces that the kernel keeps, and the offloads it applies to them.
//!
//! - which IPv4 addresses the kernel has configured on an interface, and whether it exists;
//! - the offloads `ethtool -k` shows and `ethtool -K` sets (tx checksumming, scatter-gather,
//!   TSO, GSO, GRO), read and set here through the `SIOCETHTOOL` ioctl, so that nothing needs
//!   the `ethtool` program (a fresh machine does not have it);
//! - the driver's name and its statistics (`ethtool -i`, `ethtool -S`).
//!
//! Everything acts on the network namespace of the calling thread (the ioctl goes through a
//! socket made there): to reach an interface in another namespace, call these from
//! `bypass_lab::testlab::in_namespace`.
//!
//! ```no_run
//! use bypass_io::netdev::{self, Offload};
//!
//! // What `ethtool -K px0 tx off tso off gso off` does:
//! netdev::set_offloads("px0", &[(Offload::TxChecksum, false), (Offload::Tso, false), (Offload::Gso, false)])?;
//! assert!(!netdev::offload("px0", Offload::Tso)?);
//! # Ok::<(), bypass_io::netdev::NetdevError>(())
//! ```

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Return the IPv4 addresses the kernel has configured on `iface` (empty if none).
pub fn kernel_ipv4_addrs(iface: &str) -> io::Result<Vec<Ipv4Addr>> {
    sys::ipv4_addrs(iface)
}

/// Return the IPv6 addresses the kernel has configured on `iface` (empty if none, or if
/// IPv6 is off), from `/proc/net/if_inet6` (address, index, prefix, scope, flags, name).
pub fn kernel_ipv6_addrs(iface: &str) -> io::Result<Vec<Ipv6Addr>> {
    let table = match std::fs::read_to_string("/proc/net/if_inet6") {
        Ok(t) => t,
        // No IPv6 in this kernel or namespace: no addresses.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (hex, name) = (fields.first()?, fields.get(5)?);
            (*name == iface).then(|| u128::from_str_radix(hex, 16).ok().map(Ipv6Addr::from))?
        })
        .collect())
}

/// Return the MTU of the interface `iface` (`SIOCGIFMTU`).
pub fn mtu(iface: &str) -> io::Result<u32> {
    crate::ifreq::mtu(iface)
}

/// Return whether an interface named `iface` exists in this network namespace.
pub fn exists(iface: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(iface).exists()
}

/// An offload the kernel applies to an interface, as `ethtool -k` names it.
///
/// Each is a group of the kernel's feature bits, found by name in the `ETH_SS_FEATURES`
/// string set exactly as ethtool(8) finds them (its `off_flag_def` patterns: `tx` is every
/// `tx-checksum-*`, `tso` every `tx-tcp*-segmentation`, ...), and read and set with
/// `ETHTOOL_GFEATURES`/`ETHTOOL_SFEATURES`. A group is on when any of its features is active,
/// as `ethtool -k` prints it. Setting one changes what the interface asks for; the kernel
/// then drops what depends on it (no TSO without checksumming or scatter-gather), as it does
/// for `ethtool -K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Offload {
    /// `tx-checksumming` (`ethtool -K IF tx`): the stack leaves the TCP/UDP checksum for the
    /// device. On a veth, frames then cross with partial checksums (LAB.md).
    TxChecksum,
    /// `scatter-gather` (`sg`).
    ScatterGather,
    /// `tcp-segmentation-offload` (`tso`): TCP hands the device segments larger than the MTU.
    Tso,
    /// `generic-segmentation-offload` (`gso`): the same, cut in software just before the
    /// driver (on a veth: not at all, the super-packet crosses whole).
    Gso,
    /// `generic-receive-offload` (`gro`): merge received segments before TCP sees them.
    Gro,
}

impl Offload {
    /// Every offload, in `ethtool -k`'s order.
    pub const ALL: [Offload; 5] =
        [Offload::TxChecksum, Offload::ScatterGather, Offload::Tso, Offload::Gso, Offload::Gro];

    /// Return the name `ethtool -k` prints.
    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx-checksumming",
            Offload::ScatterGather => "scatter-gather",
            Offload::Tso => "tcp-segmentation-offload",
            Offload::Gso => "generic-segmentation-offload",
            Offload::Gro => "generic-receive-offload",
        }
    }

    /// Return the feature-name pattern of the group (ethtool's `off_flag_def`), as the part
    /// before and after its one `*`.
    fn pattern(self) -> (&'static str, &'static str) {
        match self {
            Offload::TxChecksum => ("tx-checksum-", ""),
            Offload::ScatterGather => ("tx-scatter-gather", ""),
            Offload::Tso => ("tx-tcp", "-segmentation"),
            Offload::Gso => ("tx-generic-segmentation", "-"),
            Offload::Gro => ("rx-gro", "-"),
        }
    }

    /// Return whether the kernel feature `name` belongs to this group.
    fn covers(self, name: &str) -> bool {
        match self.pattern() {
            // Exact names: the "-" suffix marks a pattern without a star.
            (exact, "-") => name == exact,
            (prefix, suffix) => {
                name.len() >= prefix.len() + suffix.len() && name.starts_with(prefix) && name.ends_with(suffix)
            }
        }
    }
}

/// Why reading or setting an interface's offloads or statistics failed.
#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    /// The ioctl failed (no such interface, not permitted, not supported by the driver).
    #[error("{what} on {iface}: {source}{}", hint(source))]
    Ioctl {
        /// The interface.
        iface: String,
        /// What was being attempted ("set tcp-segmentation-offload off").
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The kernel took the request but the offload did not end up as asked (a feature the
    /// driver fixes, or one that depends on another that is off).
    #[error("{offload} on {iface} stayed {} after setting it {}", on_off(!*wanted), on_off(*wanted))]
    NotApplied {
        /// The interface.
        iface: String,
        /// The offload's `ethtool -k` name.
        offload: &'static str,
        /// What was asked for.
        wanted: bool,
    },
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENODEV) => " (no such interface in this network namespace: see `ip link`)",
        Some(libc::EPERM) => " (changing offloads needs CAP_NET_ADMIN: run as root)",
        Some(libc::EOPNOTSUPP) => " (the driver does not support it)",
        _ => "",
    }
}

/// Return whether `offload` is on for `iface`.
pub fn offload(iface: &str, offload: Offload) -> Result<bool, NetdevError> {
    Ok(features(iface)?.is_on(offload))
}

/// Return every offload of [`Offload::ALL`] with whether it is on for `iface`.
pub fn offloads(iface: &str) -> Result<Vec<(Offload, bool)>, NetdevError> {
    let features = features(iface)?;
    Ok(Offload::ALL.iter().map(|&o| (o, features.is_on(o))).collect())
}

/// Set each `(offload, on)` on `iface` (as `ethtool -K IF tx off tso off` does: every
/// changeable feature of each group is asked for on or off, in one request), then check that
/// each reads back as asked.
///
/// Features the driver fixes are left alone. Turning a group on that depends on another one
/// that stays off (TSO without checksumming) fails with [`NetdevError::NotApplied`].
pub fn set_offloads(iface: &str, settings: &[(Offload, bool)]) -> Result<(), NetdevError> {
    let current = features(iface)?;
    let mut valid = vec![0u32; current.blocks.len()];
    let mut requested = vec![0u32; current.blocks.len()];
    for &(offload, on) in settings {
        for (i, name) in current.names.iter().enumerate() {
            let (block, bit) = (i / 32, 1u32 << (i % 32));
            let changeable =
                current.blocks[block].available & bit != 0 && current.blocks[block].never_changed & bit == 0;
            if changeable && offload.covers(name) {
                valid[block] |= bit;
                requested[block] = if on { requested[block] | bit } else { requested[block] & !bit };
            }
        }
    }
    let what = || {
        let list: Vec<String> = settings.iter().map(|&(o, on)| format!("{} {}", o.name(), on_off(on))).collect();
        format!("set {}", list.join(", "))
    };
    sys::set_features(iface, &valid, &requested).map_err(|source| NetdevError::Ioctl {
        iface: iface.into(),
        what: what(),
        source,
    })?;
    let now = features(iface)?;
    for &(offload, on) in settings {
        if now.is_on(offload) != on {
            return Err(NetdevError::NotApplied { iface: iface.into(), offload: offload.name(), wanted: on });
        }
    }
    Ok(())
}

/// The kernel's feature bits of one interface, with their names.
struct Features {
    /// `ETH_SS_FEATURES`: the name of each bit, in bit order.
    names: Vec<String>,
    /// `ETHTOOL_GFEATURES`: 32 bits a block.
    blocks: Vec<sys::FeatureBlock>,
}

impl Features {
    /// Return whether any feature of `offload`'s group is active.
    fn is_on(&self, offload: Offload) -> bool {
        self.names
            .iter()
            .enumerate()
            .any(|(i, name)| offload.covers(name) && self.blocks[i / 32].active & (1 << (i % 32)) != 0)
    }
}

/// Read the feature bits of `iface` and their names.
fn features(iface: &str) -> Result<Features, NetdevError> {
    let err = |source| NetdevError::Ioctl { iface: iface.into(), what: "read the offloads".into(), source };
    let names = sys::feature_names(iface).map_err(err)?;
    let blocks = sys::get_features(iface, names.len().div_ceil(32)).map_err(err)?;
    Ok(Features { names, blocks })
}

/// Turn off checksum offload on transmit, TSO and GSO on `iface` (`ethtool -K IF tx off tso
/// off gso off`): the kernel then sends only MTU-sized frames with complete checksums, which
/// is what a packet socket or AF_XDP on the other end of a veth must receive (LAB.md).
pub fn segmentation_offloads_off(iface: &str) -> Result<(), NetdevError> {
    set_offloads(iface, &[(Offload::TxChecksum, false), (Offload::Tso, false), (Offload::Gso, false)])
}

/// Return the name of the driver behind `iface` (`ethtool -i`: "veth", "virtio_net", ...).
pub fn driver(iface: &str) -> Result<String, NetdevError> {
    sys::driver_info(iface).map(|(driver, _)| driver).map_err(|source| NetdevError::Ioctl {
        iface: iface.into(),
        what: "read the driver information".into(),
        source,
    })
}

/// Return the driver's statistics for `iface`, by name (`ethtool -S`), in the driver's order.
pub fn stats(iface: &str) -> Result<Vec<(String, u64)>, NetdevError> {
    sys::stats(iface).map_err(|source| NetdevError::Ioctl {
        iface: iface.into(),
        what: "read the driver statistics".into(),
        source,
    })
}

#[allow(unsafe_code)]
mod sys {
    use std::ffi::CStr;
    use std::io;
    use std::net::Ipv4Addr;

    use crate::ifreq::ethtool;

    /// The commands used here (`linux/ethtool.h`).
    const ETHTOOL_GDRVINFO: u32 = 0x03;
    const ETHTOOL_GSTRINGS: u32 = 0x1b;
    const ETHTOOL_GSTATS: u32 = 0x1d;
    const ETHTOOL_GSSET_INFO: u32 = 0x37;
    const ETHTOOL_GFEATURES: u32 = 0x3a;
    const ETHTOOL_SFEATURES: u32 = 0x3b;
    /// `ETH_SS_STATS`, `ETH_SS_FEATURES`: the string sets naming statistics and feature bits.
    const ETH_SS_STATS: u32 = 1;
    const ETH_SS_FEATURES: u32 = 4;
    /// `ETH_GSTRING_LEN`.
    const GSTRING_LEN: usize = 32;
    /// More strings than any driver has; a larger count is taken as garbage.
    const MAX_STRINGS: usize = 1 << 16;

    /// `struct ethtool_get_features_block`.
    #[derive(Clone, Copy, Debug, Default)]
    #[repr(C)]
    pub struct FeatureBlock {
        /// Features the driver lets ethtool change.
        pub available: u32,
        /// Features asked for.
        pub requested: u32,
        /// Features in use.
        pub active: u32,
        /// Features that can never change.
        pub never_changed: u32,
    }

    /// `struct ethtool_drvinfo`.
    #[repr(C)]
    struct EthtoolDrvinfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }

    /// Return the names of the feature bits (`ETHTOOL_GSSET_INFO`, then `ETHTOOL_GSTRINGS` of
    /// `ETH_SS_FEATURES`).
    pub fn feature_names(iface: &str) -> io::Result<Vec<String>> {
        // struct ethtool_sset_info { u32 cmd, reserved; u64 sset_mask; u32 data[]; }, with
        // room for the one count asked for.
        let mut info = [0u32; 5];
        info[0] = ETHTOOL_GSSET_INFO;
        let mask = (1u64 << ETH_SS_FEATURES).to_ne_bytes();
        info[2] = u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]);
        info[3] = u32::from_ne_bytes([mask[4], mask[5], mask[6], mask[7]]);
        // SAFETY: ETHTOOL_GSSET_INFO takes a struct ethtool_sset_info followed by one u32 per
        // set in the mask: one set, and `info` has that u32 after the 16-byte header.
        unsafe { ethtool(iface, info.as_mut_ptr().cast())? };
        strings(iface, ETH_SS_FEATURES, info[4] as usize)
    }

    /// Return the feature blocks (`ETHTOOL_GFEATURES`) of an interface with `blocks` of them.
    pub fn get_features(iface: &str, blocks: usize) -> io::Result<Vec<FeatureBlock>> {
        // struct ethtool_gfeatures { u32 cmd, size; struct ethtool_get_features_block[size]; }
        // as u32 words: 2 + 4 per block.
        let mut buf = vec![0u32; 2 + 4 * blocks];
        buf[0] = ETHTOOL_GFEATURES;
        buf[1] = blocks as u32;
        // SAFETY: ETHTOOL_GFEATURES writes the two-word header and then min(size, the
        // kernel's own count) blocks (net/ethtool/ioctl.c), and the buffer has room for `size`.
        unsafe { ethtool(iface, buf.as_mut_ptr().cast())? };
        Ok(buf[2..]
            .chunks_exact(4)
            .map(|b| FeatureBlock { available: b[0], requested: b[1], active: b[2], never_changed: b[3] })
            .collect())
    }

    /// Ask for the features in `requested` wherever `valid` has a bit (`ETHTOOL_SFEATURES`).
    pub fn set_features(iface: &str, valid: &[u32], requested: &[u32]) -> io::Result<()> {
        // struct ethtool_sfeatures { u32 cmd, size; struct ethtool_set_features_block {
        // u32 valid, requested; }[size]; } as u32 words.
        let mut buf = vec![0u32; 2 + 2 * valid.len()];
        buf[0] = ETHTOOL_SFEATURES;
        buf[1] = valid.len() as u32;
        for (i, (&v, &r)) in valid.iter().zip(requested).enumerate() {
            buf[2 + 2 * i] = v;
            buf[3 + 2 * i] = r;
        }
        // SAFETY: ETHTOOL_SFEATURES reads the header and `size` blocks, which the buffer
        // holds (the kernel refuses a size smaller than its own count with EINVAL).
        unsafe { ethtool(iface, buf.as_mut_ptr().cast())? };
        Ok(())
    }

    /// Return the driver's name and its number of statistics (`ETHTOOL_GDRVINFO`).
    pub fn driver_info(iface: &str) -> io::Result<(String, usize)> {
        // SAFETY: the struct is plain data; zeroes are valid.
        let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
        info.cmd = ETHTOOL_GDRVINFO;
        // SAFETY: ETHTOOL_GDRVINFO takes a struct ethtool_drvinfo, which `info` is.
        unsafe { ethtool(iface, (&raw mut info).cast())? };
        let end = info.driver.iter().position(|&b| b == 0).unwrap_or(info.driver.len());
        Ok((String::from_utf8_lossy(&info.driver[..end]).into_owned(), info.n_stats as usize))
    }

    /// Return the `n` strings of string set `set` (`ETHTOOL_GSTRINGS`).
    fn strings(iface: &str, set: u32, n: usize) -> io::Result<Vec<String>> {
        if n > MAX_STRINGS {
            return Err(io::Error::other(format!("the driver reports {n} strings")));
        }
        // The kernel writes as many strings as the set has when it answers, not as many as
        // asked for (net/ethtool/ioctl.c), and that count can grow between two calls (a
        // channel count changed meanwhile): leave room for twice as many and more.
        let room = 2 * n + 64;
        // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[len * 32]; } in u32 words.
        let mut buf = vec![0u32; 3 + room * GSTRING_LEN / 4];
        buf[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, set, n as u32]);
        // SAFETY: ETHTOOL_GSTRINGS takes a struct ethtool_gstrings followed by 32 bytes per
        // string: the buffer has room for `room` of them, more than the set has.
        unsafe { ethtool(iface, buf.as_mut_ptr().cast())? };
        let got = buf[2] as usize;
        if got > room {
            return Err(io::Error::other("the driver's strings changed while they were read"));
        }
        let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok((0..got)
            .map(|i| {
                let raw = &bytes[i * GSTRING_LEN..(i + 1) * GSTRING_LEN];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(GSTRING_LEN);
                String::from_utf8_lossy(&raw[..end]).into_owned()
            })
            .collect())
    }

    /// Return the driver's statistics with their names (`ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`).
    pub fn stats(iface: &str) -> io::Result<Vec<(String, u64)>> {
        let (_, n) = driver_info(iface)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let names = strings(iface, ETH_SS_STATS, n)?;
        // As for the strings, leave room for more statistics than were counted.
        let room = 2 * names.len().max(n) + 64;
        // struct ethtool_stats { u32 cmd, n_stats; u64 data[n_stats]; } in u64 words.
        let mut values = vec![0u64; 1 + room];
        values[0] = u64::from_ne_bytes(pack(ETHTOOL_GSTATS, n as u32));
        // SAFETY: ETHTOOL_GSTATS takes a struct ethtool_stats (cmd and n_stats, laid out as
        // in C in the first word) followed by one u64 per statistic: room for `room`.
        unsafe { ethtool(iface, values.as_mut_ptr().cast())? };
        let word = values[0].to_ne_bytes();
        let valued = u32::from_ne_bytes([word[4], word[5], word[6], word[7]]) as usize;
        if valued != names.len() {
            return Err(io::Error::other("the driver's statistics changed while they were read"));
        }
        Ok(names.into_iter().zip(&values[1..]).map(|(name, &v)| (name, v)).collect())
    }

    /// Lay out two `u32`s as a C struct would, in one eight-byte word.
    fn pack(a: u32, b: u32) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&a.to_ne_bytes());
        out[4..].copy_from_slice(&b.to_ne_bytes());
        out
    }

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
