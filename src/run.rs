//! `bypass run -- PROGRAM`: run an unmodified program with `libbypass_preload.so` preloaded
//! (crates/preload), which serves its TCP sockets on our stack in the program's own
//! threads. This side checks what can be checked before the program starts (root, the
//! interface, the addresses, that XDP attaches, that the program can be served at all), then
//! replaces itself with the program.

use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use bypass_io::xdp::{XdpConfig, XdpDevice};
use bypass_io::{PacketConfig, PacketDevice};

use bypass_stack::StackConfig;

use crate::{Backend, StackArgs, SynArgs, check_setup, xdp_error};

/// The preloaded library's file name, beside the `bypass` executable.
const LIBRARY: &str = "libbypass_preload.so";

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// Packet I/O backend.
    #[arg(long, value_enum, default_value_t = Backend::Xdp)]
    backend: Backend,
    /// Queues to serve, a stack per queue (AF_XDP only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    queues: u32,
    /// A waiting call polls the stack without end instead of sleeping: lowest latency, a
    /// core busy per waiting thread.
    #[arg(long, conflicts_with = "spin_usec")]
    busy_poll: bool,
    /// A waiting call polls the stack this many microseconds before it sleeps (OpenOnload's
    /// EF_POLL_USEC).
    #[arg(long, value_name = "N")]
    spin_usec: Option<u64>,
    /// Compute every TCP checksum in the stack, instead of leaving them to the kernel and
    /// the NIC (AF_XDP TX metadata, used by default where the kernel has it), as `bypass echo`.
    #[arg(long)]
    software_checksums: bool,
    /// Record every frame received and sent to this pcapng file (FILE.q1, ... for more queues).
    #[arg(long)]
    pcap: Option<PathBuf>,
    #[command(flatten)]
    syn: SynArgs,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

pub fn run(args: RunArgs) -> Result<(), String> {
    check_setup("bypass run", &args.stack)?;
    if args.queues > 1 && args.backend == Backend::Packet {
        return Err("--queues needs the xdp backend (AF_PACKET serves one queue)".into());
    }
    args.syn.check(args.backend)?;
    let library = library()?;
    let program = find_program(&args.program[0])?;
    check_program(&program, &args.program[0])?;
    // Open the device once here, so that a failure to attach reads as `bypass echo`'s does,
    // before the program starts; the program opens its own at its first TCP socket.
    let (first, _) = args.stack.ip[0];
    match args.backend {
        Backend::Xdp => {
            let mut xdp = XdpConfig::new(&args.stack.iface, first);
            xdp.addrs = args.stack.ip.iter().map(|&(a, _)| a).collect();
            xdp.tx_checksum_offload = !args.software_checksums;
            // The program's own stacks take these settings from the environment (below).
            let mut config = StackConfig::new(first, args.stack.ip[0].1, [0; 16]);
            args.syn.apply(&args.stack.iface, &mut xdp, &mut config)?;
            let queues: Vec<u32> = (0..args.queues).collect();
            drop(XdpDevice::open_queues(xdp, &queues).map_err(|e| xdp_error(e, &args.stack.iface))?);
        }
        Backend::Packet => {
            drop(PacketDevice::open_with(&args.stack.iface, &PacketConfig::default()).map_err(|e| e.to_string())?);
        }
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(other) if !other.is_empty() => format!("{}:{other}", library.display()),
        _ => library.display().to_string(),
    };
    let join = |v: Vec<String>| v.join(",");
    let mut command = std::process::Command::new(&program);
    command
        .arg0(&args.program[0])
        .args(&args.program[1..])
        .env("LD_PRELOAD", preload)
        .env("BYPASS_IFACE", &args.stack.iface)
        .env("BYPASS_IP", join(args.stack.ip.iter().map(|(a, p)| format!("{a}/{p}")).collect()))
        .env("BYPASS_BACKEND", if args.backend == Backend::Packet { "packet" } else { "xdp" })
        .env("BYPASS_QUEUES", args.queues.to_string());
    if !args.stack.gateway.is_empty() {
        command.env("BYPASS_GATEWAY", join(args.stack.gateway.iter().map(IpAddr::to_string).collect()));
    }
    if args.busy_poll {
        command.env("BYPASS_BUSY_POLL", "1");
    }
    if let Some(us) = args.spin_usec {
        command.env("BYPASS_SPIN_USEC", us.to_string());
    }
    if let Some(pcap) = &args.pcap {
        command.env("BYPASS_PCAP", pcap);
    }
    if args.software_checksums {
        command.env("BYPASS_SOFTWARE_CHECKSUMS", "1");
    }
    if args.syn.syn_rate > 0 {
        command.env("BYPASS_SYN_RATE", args.syn.syn_rate.to_string());
    }
    if let Some(burst) = args.syn.syn_burst {
        command.env("BYPASS_SYN_BURST", burst.to_string());
    }
    if let Some(lane) = args.syn.syn_lane {
        command.env("BYPASS_SYN_LANE", lane.to_string());
    }
    if args.syn.xdp_syn_cookies {
        command.env("BYPASS_XDP_SYN_COOKIES", "1");
    }
    let err = command.exec();
    Err(format!("cannot run {}: {err}", program.display()))
}

/// Return the preloaded library: `BYPASS_PRELOAD`, else beside this executable (where
/// `cargo build --workspace` puts it), else in its `deps/` (where `cargo test` leaves it).
fn library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("BYPASS_PRELOAD") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the bypass executable: {e}"))?;
    let dir = exe.parent().ok_or("the bypass executable has no directory")?;
    let beside = dir.join(LIBRARY);
    // The newer of the two: `cargo build` refreshes the one beside, `cargo test` the other.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let candidates = [beside.clone(), dir.join("deps").join(LIBRARY)];
    candidates.into_iter().filter(|p| p.exists()).max_by_key(modified).ok_or_else(|| {
        format!(
            "{} is not built: run `cargo build --release --workspace` (or point BYPASS_PRELOAD at it)",
            beside.display()
        )
    })
}

/// Return the program's path, searched in PATH as a shell does.
fn find_program(name: &str) -> Result<PathBuf, String> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("there is no program `{name}` in PATH"))
}

/// Refuse, in one sentence, a program the preloaded library cannot serve: one without a
/// dynamic loader (statically linked), or one that makes system calls without the C
/// library (Go). A script is run by its interpreter, which is checked when it starts.
fn check_program(path: &Path, name: &str) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.starts_with(b"#!") {
        return Ok(());
    }
    let elf = Elf::parse(&bytes).ok_or_else(|| format!("{name} is not an ELF program this machine runs"))?;
    if !elf.interpreted {
        return Err(format!(
            "{name} is statically linked: a preloaded library cannot reach its socket calls, so bypass run cannot serve it (link it dynamically against glibc)"
        ));
    }
    if elf.sections.iter().any(|s| s == ".go.buildinfo") {
        return Err(format!(
            "{name} is a Go program, which makes system calls itself instead of through the C library: bypass run cannot serve it"
        ));
    }
    Ok(())
}

/// What `check_program` needs of a 64-bit little-endian ELF file.
struct Elf {
    /// It names a program interpreter (the dynamic loader).
    interpreted: bool,
    sections: Vec<String>,
}

impl Elf {
    fn parse(b: &[u8]) -> Option<Elf> {
        let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
        let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()));
        let u64_at = |o: usize| b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
        // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
        if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
            return None;
        }
        let (phoff, shoff) = (u64_at(0x20)? as usize, u64_at(0x28)? as usize);
        let (phentsize, phnum) = (u16_at(0x36)? as usize, u16_at(0x38)? as usize);
        let (shentsize, shnum, shstrndx) = (u16_at(0x3a)? as usize, u16_at(0x3c)? as usize, u16_at(0x3e)? as usize);
        const PT_INTERP: u32 = 3;
        let interpreted = (0..phnum).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP));
        let mut sections = Vec::new();
        if shoff != 0 && shstrndx < shnum {
            let strtab = u64_at(shoff + shstrndx * shentsize + 0x18)? as usize;
            for i in 0..shnum {
                let name = u32_at(shoff + i * shentsize)? as usize;
                let start = strtab.checked_add(name)?;
                let tail = b.get(start..)?;
                let end = tail.iter().position(|&c| c == 0)?;
                sections.push(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
        }
        Some(Elf { interpreted, sections })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_passes_and_garbage_is_refused() {
        let sh = find_program("sh").expect("sh");
        assert!(check_program(&sh, "sh").is_ok());
        let elf = Elf::parse(&std::fs::read(&sh).unwrap()).unwrap();
        assert!(elf.interpreted);
        assert!(elf.sections.iter().any(|s| s == ".text"), "{:?}", elf.sections);
        assert!(Elf::parse(b"not an elf").is_none());
    }
}
