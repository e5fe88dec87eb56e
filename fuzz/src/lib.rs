//! The code behind the fuzz targets, kept out of `fuzz_targets/` so that the seed generator
//! (`src/bin/make_seeds.rs`) and the tests below drive exactly what the fuzzer drives.
//!
//! - [`segment`]: `tcp_segment`, TCP parsing and the parse -> emit -> parse round trip.
//! - [`host`]: `stack_frame`, Ethernet frames into a `bypass_stack::Interface` on virtual
//!   time, with a device that checks every frame the host sends and then discards it.
//!
//! Run them with `cargo fuzz` (see `README.md`); `cargo test` here replays the committed
//! seeds and the kept crash inputs through the same functions without the fuzzer.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod host;
pub mod segment;

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    /// Return every file under `fuzz/<dir>/<target>/`, or none if the folder is missing.
    fn inputs(dir: &str, target: &str) -> Vec<(String, Vec<u8>)> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(target);
        let Ok(entries) = fs::read_dir(&path) else { return Vec::new() };
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).unwrap()))
            .filter(|(name, _)| !name.starts_with('.'))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn tcp_segment_seeds_pass() {
        let seeds = inputs("seeds", "tcp_segment");
        assert!(!seeds.is_empty(), "run `cargo run --bin make_seeds` first");
        for (name, data) in seeds {
            eprintln!("{name}");
            crate::segment::check(&data);
        }
    }

    /// The crash inputs kept under `artifacts/` run clean: those of fixed bugs strictly,
    /// those of open ones (`open-*`) with the fuzz target's check, which steps over them.
    #[test]
    fn kept_artifacts_pass() {
        for (name, data) in inputs("artifacts", "tcp_segment") {
            eprintln!("tcp_segment/{name}");
            crate::segment::check(&data);
        }
        for (name, data) in inputs("artifacts", "stack_frame") {
            eprintln!("stack_frame/{name}");
            if name.starts_with("open-") {
                crate::host::run(&data);
            } else {
                crate::host::run_strict(&data);
            }
        }
    }

    /// The kept inputs of open stack bugs still fail without stepping over them; once one
    /// passes, its bug is fixed (see `host::run_strict`).
    #[test]
    fn open_artifacts_still_fail_strictly() {
        for (name, data) in inputs("artifacts", "stack_frame") {
            if !name.starts_with("open-") {
                continue;
            }
            eprintln!("stack_frame/{name} (expected to panic)");
            let strict = std::panic::catch_unwind(|| crate::host::run_strict(&data));
            assert!(
                strict.is_err(),
                "{name} passes strictly, so its bug is fixed: rename it minimized-*, \
                 drop its STEP_OVER_* constant in src/host.rs and its README entry"
            );
        }
    }

    #[test]
    fn stack_frame_seeds_pass() {
        let seeds = inputs("seeds", "stack_frame");
        assert!(!seeds.is_empty(), "run `cargo run --bin make_seeds` first");
        for (name, data) in seeds {
            eprintln!("{name}");
            crate::host::run(&data);
        }
    }
}
