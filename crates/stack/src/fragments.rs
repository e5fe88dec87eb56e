//! IPv4 and IPv6 fragment reassembly (placeholder; being written).
