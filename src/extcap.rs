//! `bypass extcap`: Wireshark's external capture protocol (extcap(4)), so that Wireshark and
//! tshark list every running stack as a capture interface, `bypass-<pid>-<shard>`, and
//! capture from it live, with the stack's notes as packet comments.
//!
//! Wireshark runs each program in its extcap folders with:
//! - `--extcap-interfaces`: we list the running stacks' endpoints;
//! - `--extcap-dlts --extcap-interface X`: Ethernet;
//! - `--extcap-config --extcap-interface X`: a port and a host filter to fill in;
//! - `--capture --extcap-interface X --fifo PATH [--extcap-capture-filter F] [--port N]
//!   [--host A]`: we ask the stack for a capture and copy it into the FIFO until Wireshark
//!   stops us (SIGTERM) or closes the FIFO;
//! - `--extcap-capture-filter F --extcap-interface X` alone: we say whether we can apply F
//!   (simple `port N` and `host A` filters joined by `and`: the stack filters, not libpcap).
//!
//! `bypass extcap --install [DIR]` puts a two-line shell wrapper, `bypass-extcap`, that runs
//! this binary's `extcap` subcommand into the personal extcap folder (a wrapper, not a
//! symlink: Wireshark calls it by its own name, and the wrapper works wherever the binary is
//! and whatever its name). Wireshark 4.0 and 4.2+ look in different folders
//! (`$XDG_CONFIG_HOME/wireshark/extcap`, default `~/.config/wireshark/extcap`; and
//! `~/.local/lib/wireshark/extcap`): without a DIR it goes into both.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::capture;

/// The name the wrapper is installed under.
const WRAPPER: &str = "bypass-extcap";

/// What Wireshark asked for, from its arguments.
#[derive(Debug, Default, PartialEq, Eq)]
struct Request {
    interfaces: bool,
    dlts: bool,
    config: bool,
    capture: bool,
    interface: Option<String>,
    fifo: Option<PathBuf>,
    capture_filter: Option<String>,
    port: Option<u16>,
    host: Option<IpAddr>,
    install: Option<Option<PathBuf>>,
}

/// Parse Wireshark's arguments (`--name value` or `--name=value`); ignore those we do not
/// know (Wireshark adds `--extcap-version`, and `--debug` in newer versions).
fn parse(args: &[String]) -> Result<Request, String> {
    let mut req = Request::default();
    let mut i = 0;
    while i < args.len() {
        let (name, inline) = match args[i].split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (args[i].clone(), None),
        };
        i += 1;
        let mut value = |what: &str| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args.get(i).cloned().ok_or_else(|| format!("{what} needs a value"))?;
            i += 1;
            Ok(v)
        };
        match name.as_str() {
            "--extcap-interfaces" => req.interfaces = true,
            "--extcap-dlts" => req.dlts = true,
            "--extcap-config" => req.config = true,
            "--capture" => req.capture = true,
            "--extcap-interface" => req.interface = Some(value(&name)?),
            "--fifo" => req.fifo = Some(PathBuf::from(value(&name)?)),
            "--extcap-capture-filter" => req.capture_filter = Some(value(&name)?),
            "--port" => {
                let v = value(&name)?;
                let port: u16 =
                    v.trim().parse().map_err(|_| format!("--port takes a port number (0 for all), not `{v}`"))?;
                req.port = (port != 0).then_some(port);
            }
            "--host" => {
                let v = value(&name)?;
                if !v.trim().is_empty() {
                    let host =
                        v.trim().parse().map_err(|_| format!("--host takes an IPv4 or IPv6 address, not `{v}`"))?;
                    req.host = Some(host);
                }
            }
            "--install" => {
                let dir = match (inline.clone(), args.get(i)) {
                    (Some(v), _) => Some(PathBuf::from(v)),
                    (None, Some(next)) if !next.starts_with("--") => {
                        i += 1;
                        Some(PathBuf::from(next))
                    }
                    _ => None,
                };
                req.install = Some(dir);
            }
            other => log::debug!("extcap: ignoring argument {other}"),
        }
    }
    Ok(req)
}

/// Return the interface name of a stack's endpoint.
fn interface_name(pid: u32, shard: u32) -> String {
    format!("bypass-{pid}-{shard}")
}

/// Parse an interface name back into pid and shard.
fn parse_interface(name: &str) -> Result<(u32, u32), String> {
    let parsed = name.strip_prefix("bypass-").and_then(|rest| {
        let (pid, shard) = rest.split_once('-')?;
        Some((pid.parse().ok()?, shard.parse().ok()?))
    });
    parsed.ok_or_else(|| format!("`{name}` is not a bypass interface (they are named bypass-<pid>-<shard>)"))
}

/// Parse a capture filter we can apply ourselves: `port N`, `host A`, or both joined by
/// `and` (an optional leading `tcp` or `udp` before `port` is refused: we cannot tell them
/// apart in the stack's filter). The empty filter takes everything.
fn parse_filter(filter: &str) -> Result<(Option<u16>, Option<IpAddr>), String> {
    let refuse = || {
        format!(
            "bypass filters in the stack and takes only `port N`, `host ADDR` or both joined by `and`, not `{filter}`; \
             use a display filter for the rest"
        )
    };
    let (mut port, mut host) = (None, None);
    let words: Vec<&str> = filter.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        if i > 0 {
            if words[i] != "and" && words[i] != "&&" {
                return Err(refuse());
            }
            i += 1;
        }
        match (words.get(i).copied(), words.get(i + 1)) {
            (Some("port"), Some(v)) if port.is_none() => port = Some(v.parse().map_err(|_| refuse())?),
            (Some("host"), Some(v)) if host.is_none() => host = Some(v.parse().map_err(|_| refuse())?),
            _ => return Err(refuse()),
        }
        i += 2;
    }
    Ok((port, host))
}

/// Run `bypass extcap` with Wireshark's arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    let req = parse(args)?;
    if let Some(dir) = &req.install {
        return install(dir.as_deref());
    }
    let out = &mut std::io::stdout().lock();
    let print = |out: &mut dyn Write, text: String| {
        out.write_all(text.as_bytes()).map_err(|e| format!("cannot write to standard output: {e}"))
    };
    if req.interfaces {
        let mut text = format!(
            "extcap {{version={}}}{{display=bypass: live capture of running stacks}}\n",
            env!("CARGO_PKG_VERSION")
        );
        // No running stack is no interface, not an error: Wireshark asks at every start.
        for e in bypass_control::endpoints(None).unwrap_or_default() {
            text.push_str(&format!(
                "interface {{value={}}}{{display=bypass stack of process {}, shard {}}}\n",
                interface_name(e.pid, e.shard),
                e.pid,
                e.shard
            ));
        }
        return print(out, text);
    }
    let interface =
        req.interface.as_deref().ok_or("give the interface with --extcap-interface bypass-<pid>-<shard>")?;
    let (pid, shard) = parse_interface(interface)?;
    if req.dlts {
        return print(out, "dlt {number=1}{name=EN10MB}{display=Ethernet}\n".into());
    }
    if req.config {
        return print(
            out,
            "arg {number=0}{call=--port}{display=Port}{type=unsigned}{range=0,65535}{default=0}\
             {tooltip=Only TCP and UDP frames from or to this port (0: all)}\n\
             arg {number=1}{call=--host}{display=Host}{type=string}\
             {tooltip=Only frames from or to this IPv4 or IPv6 address (empty: all)}\n"
                .into(),
        );
    }
    let filter = parse_filter(req.capture_filter.as_deref().unwrap_or(""));
    if !req.capture {
        // Wireshark checks a capture filter: silence means we can apply it.
        return match filter {
            Ok(_) => Ok(()),
            Err(e) => print(out, format!("{e}\n")),
        };
    }
    let (fport, fhost) = filter?;
    let port = merge("port", req.port, fport)?;
    let host = merge("host", req.host, fhost)?;
    let fifo = req.fifo.as_deref().ok_or("give the FIFO to write to with --fifo PATH")?;
    capture_to_fifo(pid, shard, port, host, fifo)
}

/// Return the one value of a filter given in the configuration and in the capture filter.
fn merge<T: PartialEq + std::fmt::Display + Copy>(what: &str, a: Option<T>, b: Option<T>) -> Result<Option<T>, String> {
    match (a, b) {
        (Some(a), Some(b)) if a != b => {
            Err(format!("the {what} of the configuration ({a}) and of the capture filter ({b}) differ: give one"))
        }
        (a, b) => Ok(a.or(b)),
    }
}

/// Copy a capture of stack `pid`'s shard `shard` into Wireshark's FIFO until Wireshark stops
/// us (SIGTERM, SIGINT) or closes the FIFO.
fn capture_to_fifo(pid: u32, shard: u32, port: Option<u16>, host: Option<IpAddr>, fifo: &Path) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the signal handler: {e}"))?;
    }
    let endpoint = capture::choose(Some(pid), Some(shard))?;
    let stream = capture::open(&endpoint, port, host)?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .open(fifo)
        .map_err(|e| format!("cannot open Wireshark's FIFO {}: {e}", fifo.display()))?;
    let copied = capture::copy(stream, &mut out, &stop)?;
    // Wireshark shows whatever an extcap writes on standard error as an error: the summary
    // goes to the log only.
    log::debug!("{}", copied.summary());
    Ok(())
}

/// Install the wrapper into `dir`, or into both personal extcap folders.
fn install(dir: Option<&Path>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot tell where this bypass binary is: {e}"))?;
    let dirs = match dir {
        Some(d) => vec![d.to_path_buf()],
        None => personal_folders()?,
    };
    let quoted = format!("'{}'", exe.display().to_string().replace('\'', r"'\''"));
    let script = format!(
        "#!/bin/sh\n# Wireshark extcap for running bypass stacks; installed by `bypass extcap --install`.\nexec {quoted} extcap \"$@\"\n"
    );
    for dir in dirs {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}: check its parent's permissions", dir.display()))?;
        let path = dir.join(WRAPPER);
        std::fs::write(&path, &script).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot make {} executable: {e}", path.display()))?;
        println!("installed {}", path.display());
    }
    println!("restart Wireshark (or run `tshark -D`): each running stack shows as an interface bypass-<pid>-<shard>");
    Ok(())
}

/// Return the personal extcap folders of Wireshark 4.0 and of 4.2 and later.
fn personal_folders() -> Result<Vec<PathBuf>, String> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or("HOME is not set: give the extcap folder, as in `bypass extcap --install DIR`")?;
    let config =
        std::env::var_os("XDG_CONFIG_HOME").filter(|c| !c.is_empty()).map_or(home.join(".config"), PathBuf::from);
    Ok(vec![config.join("wireshark/extcap"), home.join(".local/lib/wireshark/extcap")])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn wireshark_arguments_parse_in_both_forms() {
        let req = parse(&args(
            "--capture --extcap-interface bypass-12-0 --fifo=/tmp/f --port 7 --host= --extcap-version=4.0",
        ))
        .unwrap();
        assert!(req.capture && !req.interfaces);
        assert_eq!(req.interface.as_deref(), Some("bypass-12-0"));
        assert_eq!(req.fifo, Some(PathBuf::from("/tmp/f")));
        assert_eq!((req.port, req.host), (Some(7), None));
        assert_eq!(parse(&args("--port 0")).unwrap().port, None, "0 means all ports");
        assert!(parse(&args("--port x")).unwrap_err().contains("port number"));
        assert!(parse(&args("--fifo")).unwrap_err().contains("needs a value"));
        assert_eq!(parse(&args("--install")).unwrap().install, Some(None));
        assert_eq!(parse(&args("--install /x")).unwrap().install, Some(Some(PathBuf::from("/x"))));
    }

    #[test]
    fn interface_names_round_trip() {
        assert_eq!(parse_interface(&interface_name(4321, 2)), Ok((4321, 2)));
        for bad in ["eth0", "bypass-", "bypass-1", "bypass-x-0", "bypass-1-0-2"] {
            assert!(parse_interface(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn capture_filters_we_can_apply_and_those_we_cannot() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        assert_eq!(parse_filter(""), Ok((None, None)));
        assert_eq!(parse_filter("port 7"), Ok((Some(7), None)));
        assert_eq!(parse_filter("host fd00::2"), Ok((None, Some(v6))));
        assert_eq!(parse_filter("port 80 and host 10.0.0.1"), Ok((Some(80), Some(v4))));
        assert_eq!(parse_filter("host 10.0.0.1 && port 80"), Ok((Some(80), Some(v4))));
        for bad in
            ["tcp port 80", "port", "port 80 or host 10.0.0.1", "port 99999", "host nowhere", "port 1 and port 2"]
        {
            let err = parse_filter(bad).unwrap_err();
            assert!(err.contains("port N") && err.contains(bad), "{bad}: {err}");
        }
        assert_eq!(merge("port", Some(1), None), Ok(Some(1)));
        assert_eq!(merge("port", Some(1), Some(1)), Ok(Some(1)));
        assert!(merge("port", Some(1), Some(2)).unwrap_err().contains("differ"));
    }

    #[test]
    fn install_writes_an_executable_wrapper() {
        let dir = std::env::temp_dir().join(format!("bypass-extcap-{}", std::process::id()));
        install(Some(&dir)).unwrap();
        let path = dir.join(WRAPPER);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("#!/bin/sh\n") && text.contains("extcap \"$@\""), "{text}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
