//! The configs the `Pair` tests start from (`#[path = "common/config.rs"] mod config;`).

#![allow(dead_code)] // Each test binary uses a different part of this module.

use bypass_tcp::Config;

const MIB: usize = 1 << 20;

/// Return the default config with an ISN secret from `seed` (so each test's run repeats).
pub fn seeded(seed: u64) -> Config {
    let mut isn_secret = [0u8; 16];
    isn_secret[..8].copy_from_slice(&seed.to_le_bytes());
    Config { isn_secret, ..Config::default() }
}

/// Return [`seeded`] with buffers that never bind the window on the simulated paths (16 MiB,
/// growing to 32 MiB).
pub fn roomy(seed: u64) -> Config {
    Config {
        send_buffer: 16 * MIB,
        recv_buffer: 16 * MIB,
        send_buffer_max: 32 * MIB,
        recv_buffer_max: 32 * MIB,
        ..seeded(seed)
    }
}
