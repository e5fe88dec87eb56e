//! Convert a capture's conversation to a script and run it in virtual mode:
//! `cargo run -p bypass-script --example from_pcap -- FILE.pcap [N] [server|client]`.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::Path::new(&args[1]);
    let n = args.get(2).map_or(1, |a| a.parse().expect("conversation number"));
    let side = match args.get(3).map(String::as_str) {
        Some("client") => bypass_script::Side::Client,
        _ => bypass_script::Side::Server,
    };
    let script = bypass_script::script_from_pcap_file(path, n, side).unwrap_or_else(|e| panic!("{e}"));
    print!("{script}");
    match bypass_script::run_virtual(&path.display().to_string(), &script) {
        Ok(r) => println!("// virtual mode: passes ({} lines)", r.lines),
        Err(f) => println!("// virtual mode: fails\n{f}"),
    }
}
