//! IPv6 Neighbour Discovery (placeholder; being written).
