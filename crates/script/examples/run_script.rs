//! Run script files and print each verdict, in virtual mode or on the wire (as root):
//!
//! ```sh
//! cargo run -p bypass-script --example run_script -- tests/scripts/handshake/*.pkt
//! cargo run -p bypass-script --release --example run_script -- --wire linux tests/scripts/rst/*.pkt
//! cargo run -p bypass-script --release --example run_script -- --wire xdp tests/scripts/sack/sack-blocks.pkt
//! ```
//!
//! `--wire linux|xdp|packet` runs against the Linux kernel or our stack on AF_XDP or
//! AF_PACKET (`BYPASS_WIRE_TOLERANCE_US` sets the tolerance, 25 ms by default).

use bypass_script::{Backend, Verdict, WireOptions, WireVerdict};

fn main() {
    env_logger::init();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut wire = None;
    if let Some(at) = args.iter().position(|a| a == "--wire") {
        let name = args.get(at + 1).cloned().unwrap_or_default();
        let Some(backend) = Backend::from_name(&name) else {
            eprintln!("--wire takes linux, xdp or packet, not `{name}`");
            std::process::exit(2);
        };
        wire = Some(backend);
        args.drain(at..at + 2);
    }
    let mut bad = 0;
    for path in args {
        let p = std::path::Path::new(&path);
        let Some(backend) = wire else {
            match bypass_script::check_file(p) {
                Verdict::Pass(r) => println!("ok   {path} ({} lines, {} out)", r.lines, r.outbound),
                Verdict::ExpectedFail(f, why) => println!("xfail {path} ({why})\n{f}"),
                Verdict::Fail(f) => {
                    bad += 1;
                    println!("FAIL {f}");
                }
                Verdict::UnexpectedPass(_, why) => {
                    bad += 1;
                    println!("XPASS {path}: passes although @expect-fail says: {why}");
                }
            }
            continue;
        };
        let started = std::time::Instant::now();
        let verdict = bypass_script::check_file_wire(p, backend, WireOptions::default());
        let took = started.elapsed().as_secs_f64();
        match verdict {
            WireVerdict::Pass(r) => println!("ok   {path} ({} lines, {} out, {took:.2} s)", r.lines, r.outbound),
            WireVerdict::ExpectedFail(f, why) => println!("xfail {path} ({why})\n{f}"),
            WireVerdict::Skipped(why) => println!("skip {path}: {why}"),
            WireVerdict::Fail(f) => {
                bad += 1;
                println!("FAIL {f}");
            }
            WireVerdict::UnexpectedPass(_, why) => {
                bad += 1;
                println!("XPASS {path}: passes although its mark says: {why}");
            }
        }
    }
    std::process::exit(i32::from(bad > 0));
}
