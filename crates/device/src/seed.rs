//! Seeds: one run seed, split into independent streams for every generator of a run.
//!
//! Needs no RNG crate: the hash is a few lines, so the impairment wrapper and the TCP core's
//! simulator use it without the `sim` feature's `rand`.

/// Return the SplitMix64 output for `x` (a fast, well-mixed hash; Steele, Lea and Flood 2014).
///
/// Seeds of independent streams ([`mix`]), the impairment draws of [`crate::Impaired`] and
/// the byte patterns of `bypass_tcp::sim::Pair` all come from this one function.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Return an independent seed for stream `stream` of `seed`: how a `Pair`, a `MemoryLink`
/// and an [`Impaired`](crate::Impaired) device seed each of their generators from one run
/// seed.
pub fn mix(seed: u64, stream: u64) -> u64 {
    splitmix64(seed ^ splitmix64(stream))
}
