//! Parse arbitrary bytes as a TCP segment; round-trip what parses. See `src/segment.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bypass_fuzz::segment::check(data));
