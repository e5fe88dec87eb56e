//! Run script files in virtual mode and print each verdict:
//! `cargo run -p bypass-script --example run_script -- tests/scripts/handshake/*.pkt`.

fn main() {
    let mut bad = 0;
    for path in std::env::args().skip(1) {
        match bypass_script::check_file(std::path::Path::new(&path)) {
            bypass_script::Verdict::Pass(r) => println!("ok   {path} ({} lines, {} out)", r.lines, r.outbound),
            bypass_script::Verdict::ExpectedFail(f, why) => println!("xfail {path} ({why})\n{f}"),
            bypass_script::Verdict::Fail(f) => {
                bad += 1;
                println!("FAIL {f}");
            }
            bypass_script::Verdict::UnexpectedPass(_, why) => {
                bad += 1;
                println!("XPASS {path}: passes although @expect-fail says: {why}");
            }
        }
    }
    std::process::exit(i32::from(bad > 0));
}
