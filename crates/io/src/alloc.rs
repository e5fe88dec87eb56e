//! One allocator setting for a process that holds many connections.

/// Make glibc's malloc map every block of 128 KiB or more on its own and unmap it on free
/// (a fixed `M_MMAP_THRESHOLD`); return whether it took the setting. Call it first thing in
/// `main`, before other threads start.
///
/// By default the threshold rises to the size of the largest mapped block freed so far, after
/// which connection buffers (256 KiB by default) come from the heap: `calloc` then clears all
/// of each one, making every page resident, and a free keeps the pages. With the threshold
/// fixed, a buffer costs only the pages its connection writes, and a buffer given back
/// (`bypass_tcp::Connection::detach_idle_storage`) is memory given back: the `bypass` program
/// and the scale test's figure of memory per idle connection rely on it.
pub fn return_large_blocks_when_freed() -> bool {
    // SAFETY: mallopt only sets an allocator parameter.
    #[allow(unsafe_code)]
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
    ok == 1
}
