//! The reduced form and the report: run this binary as `cargo bench` would (Valgrind,
//! through `gungraun-runner`), with a tenth of each `N` unless `BYPASS_INSTRUCTIONS_FULL` is
//! set, and print the instructions per unit of each stack and their ratio.
//!
//! Without Valgrind or `gungraun-runner` it says what to install and passes, except under
//! `CI=true`, where it fails: CI must measure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{CONNECTIONS, MANY, PASSES, QUICK, RR, SEGMENTS};

/// Set (to anything) for the full figures instead of the reduced form.
const FULL: &str = "BYPASS_INSTRUCTIONS_FULL";

/// One figure: a benchmark's instruction count.
struct Figure {
    function: String,
    id: String,
    instructions: f64,
}

/// Return why `program --version` cannot run, if it cannot.
fn missing(program: &str) -> Option<String> {
    match Command::new(program).arg("--version").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("`{program} --version` failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Some(format!("`{program}` cannot be run: {e}")),
    }
}

/// Run the benchmarks under Valgrind and print the figures (see the module documentation).
pub fn reduced() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let wanting: Vec<String> = ["valgrind", "gungraun-runner"].into_iter().filter_map(missing).collect();
    if !wanting.is_empty() {
        let why = format!(
            "instruction counts need Valgrind (Debian package `valgrind`) and gungraun's runner of the \
             same version as the gungraun crate (`cargo install gungraun-runner --version 0.20.0 --locked`): {}",
            wanting.join("; ")
        );
        assert!(!ci, "{why}");
        eprintln!("instructions: skipped: {why}");
        return;
    }
    let full = std::env::var_os(FULL).is_some();
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join(if full { "instructions-full" } else { "instructions" });
    let _ = std::fs::remove_dir_all(&home);
    let exe = std::env::current_exe().expect("the path of this benchmark");
    let mut run = Command::new(exe);
    run.arg("--bench").arg("--save-summary=json").arg(format!("--home={}", home.display()));
    if !full {
        run.env(QUICK, "1");
    }
    let started = std::time::Instant::now();
    let out = run.output().expect("run the benchmarks under gungraun-runner");
    if !out.status.success() {
        panic!(
            "the instruction benchmarks failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut figures = Vec::new();
    collect(&home, &mut figures);
    let scale = if full { 1.0 } else { 10.0 };
    println!(
        "instructions per unit, {} form ({:.1} s under Valgrind); ours / smoltcp:",
        if full { "full" } else { "reduced" },
        started.elapsed().as_secs_f64()
    );
    let rows = [
        ("request/response, both ends", "rr", "both", RR),
        ("request/response, client", "rr", "client", RR),
        ("request/response, server", "rr", "server", RR),
        ("100 connections r/r, both ends", "rr_many", "both", PASSES * MANY as u64),
        ("100 connections r/r, server", "rr_many", "server", PASSES * MANY as u64),
        ("bulk segment received", "bulk", "receive", SEGMENTS),
        ("bulk segment sent", "bulk", "send", SEGMENTS),
        ("connection, both ends", "connection", "both", CONNECTIONS),
        ("connection, client", "connection", "client", CONNECTIONS),
        ("connection, server", "connection", "server", CONNECTIONS),
    ];
    for (name, function, id, n) in rows {
        let per_unit = |stack: &str| {
            let function = format!("{function}_{stack}");
            let figure = figures.iter().find(|f| f.function == function && f.id == id);
            let figure = figure.unwrap_or_else(|| panic!("no figure for {function} {id} in {}", home.display()));
            figure.instructions / (n as f64 / scale)
        };
        let (ours, smoltcp) = (per_unit("ours"), per_unit("smoltcp"));
        assert!(ours > 0.0 && smoltcp > 0.0, "{name}: no instructions counted");
        println!("  {name:<30} {ours:>9.0} {smoltcp:>9.0}  {:.2}x", ours / smoltcp);
    }
}

/// Add the figure of every `summary.json` under `dir` to `figures`.
fn collect(dir: &Path, figures: &mut Vec<Figure>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path: PathBuf = entry.path();
        if path.is_dir() {
            collect(&path, figures);
        } else if path.file_name().is_some_and(|n| n == "summary.json") {
            let text = std::fs::read_to_string(&path).expect("read a summary");
            let json: serde_json::Value = serde_json::from_str(&text).expect("a summary is JSON");
            let instructions = json["profiles"][0]["data"]["parts"][0]["metrics"]["Ir"]["values"]["new"]
                .as_f64()
                .unwrap_or_else(|| panic!("no instruction count in {}", path.display()));
            figures.push(Figure {
                function: json["function_name"].as_str().unwrap_or_default().to_owned(),
                id: json["id"].as_str().unwrap_or_default().to_owned(),
                instructions,
            });
        }
    }
}
