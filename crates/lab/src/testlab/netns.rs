//! Whether this machine can make namespaces, running code and commands inside one, and the
//! settings labs give one (sysctls, IPv6 on or off, forwarding).

use std::fs::{self, File};
use std::io::{self, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use super::error::LabError;
use super::sys;

/// Return whether root and the lab tools are available (see [`check_preconditions`]). If not: under `CI=true`, panic with
/// the reason (a privileged test must not silently pass in CI); otherwise print why `test` is
/// skipped and return `false`.
pub fn lab_available(test: &str) -> bool {
    match check_preconditions() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: {e} (CI=true: tests that need root and network namespaces must run)")
        }
        Err(e) => {
            // Straight to stderr: libtest captures eprintln! output of passing tests.
            let _ = writeln!(io::stderr(), "skipping {test}: {e}");
            false
        }
    }
}

/// Check that the process is root and that `ip` (iproute2), the one program labs run, is
/// installed.
pub fn check_preconditions() -> Result<(), LabError> {
    if sys::euid() != 0 {
        return Err(LabError::NotRoot);
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Err(LabError::MissingTool("ip".into()));
    }
    Ok(())
}

/// Run `f` on a new thread that first enters the network namespace `ns`.
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path).map_err(|source| LabError::Io { what: format!("open {path}"), source })?;
    std::thread::scope(|scope| {
        let thread = scope.spawn(move || {
            sys::enter_netns(&file).map_err(|source| LabError::Io { what: format!("enter namespace {ns}"), source })?;
            Ok(f())
        });
        thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Start `f` on a new thread inside the network namespace `ns` (a name under
/// `/var/run/netns`) and return its handle, for work that goes on beside the caller's (a load
/// or a flood) until the caller stops it. The thread's result is `Err` when it could not enter
/// the namespace.
pub fn spawn_in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<T, LabError>>, LabError> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path).map_err(|source| LabError::Io { what: format!("open {path}"), source })?;
    let ns = ns.to_owned();
    std::thread::Builder::new()
        .name(format!("in-{ns}"))
        .spawn(move || {
            sys::enter_netns(&file).map_err(|source| LabError::Io { what: format!("enter namespace {ns}"), source })?;
            Ok(f())
        })
        .map_err(|source| LabError::Io { what: "start a thread".into(), source })
}

/// Disable IPv6 in the calling thread's namespace (for interfaces present and future).
pub(super) fn disable_ipv6() -> Result<(), LabError> {
    for path in ["/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"] {
        match fs::write(path, "1") {
            Ok(()) => {}
            // A kernel without IPv6 has nothing to disable.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(LabError::Io { what: format!("write {path}"), source }),
        }
    }
    Ok(())
}

/// Turn IPv6 on in the calling thread's namespace, quietly: for `all`, `default` and each of
/// `ifaces`, no duplicate address detection (addresses are usable at once; `all` counts too,
/// the kernel skips DAD only when both are 0), no router solicitations and no router
/// advertisements accepted.
pub(super) fn quiet_ipv6(ifaces: &[&str]) -> Result<(), LabError> {
    for conf in ["all", "default"].iter().chain(ifaces) {
        for (key, value) in
            [("accept_dad", "0"), ("router_solicitations", "0"), ("accept_ra", "0"), ("disable_ipv6", "0")]
        {
            sysctl(&format!("net/ipv6/conf/{conf}/{key}"), value)?;
        }
    }
    Ok(())
}

/// Wait until every interface of `ifaces` in namespace `ns` has its link-local address and no
/// address is still tentative. Even without duplicate address detection the kernel finishes
/// an address's setup on a work queue after the link comes up, and until then it neither uses
/// the address nor sends neighbour solicitations from the interface.
pub(super) fn wait_for_ipv6(ns: &str, ifaces: &[&str]) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    for iface in ifaces {
        loop {
            let addrs = ip_in(ns, &["-6", "addr", "show", "dev", iface])?;
            if addrs.contains("scope link") && !addrs.contains("tentative") {
                break;
            }
            if Instant::now() > deadline {
                return Err(LabError::Io {
                    what: format!("wait for the IPv6 addresses of {iface} in {ns} to be ready: {addrs}"),
                    source: io::ErrorKind::TimedOut.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

/// Make the calling thread's namespace a router: forward IPv4 and IPv6, and send every ICMP
/// error (no rate limit), so that each datagram too large for the next link draws its own
/// "fragmentation needed" or "packet too big".
pub(super) fn router() -> Result<(), LabError> {
    for (key, value) in [
        ("net/ipv4/ip_forward", "1"),
        ("net/ipv6/conf/all/forwarding", "1"),
        ("net/ipv4/icmp_ratelimit", "0"),
        ("net/ipv6/icmp/ratelimit", "0"),
    ] {
        sysctl(key, value)?;
    }
    Ok(())
}

/// Write `value` to the sysctl `key` (a path under `/proc/sys`) of the calling thread's
/// namespace.
fn sysctl(key: &str, value: &str) -> Result<(), LabError> {
    let path = format!("/proc/sys/{key}");
    fs::write(&path, value).map_err(|source| LabError::Io { what: format!("write {value} to {path}"), source })
}

/// Run `ip ARGS` in the namespace `ns`; return its standard output.
pub(super) fn ip_in(ns: &str, args: &[&str]) -> Result<String, LabError> {
    run(Command::new("ip").args(["-n", ns]).args(args))
}

pub(super) fn netns_exec(ns: &str, program: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program]);
    cmd
}

/// Run a command; return its standard output, or its standard error as the error.
pub(super) fn run(cmd: &mut Command) -> Result<String, LabError> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => LabError::MissingTool(cmd.get_program().to_string_lossy().into_owned()),
        _ => LabError::Io { what: format!("run {line}"), source },
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command { command: line, stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}
