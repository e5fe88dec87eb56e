//! Feed length-prefixed Ethernet frames into a listening host on virtual time. See `src/host.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bypass_fuzz::host::run(data));
