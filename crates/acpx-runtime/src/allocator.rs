//! A process-wide setting of the C allocator for a program that records long turns.

/// Serves every allocation of 128 KiB or more with a mapping of its own, returned to the
/// system when freed.
///
/// glibc raises that threshold after each large free (up to 32 MiB), after which a long
/// turn's megabyte buffers (the document of each snapshot save, SQLite's copies of it) come
/// from the heap arenas of several threads and stay resident once freed: the peak RSS of a
/// 1M-chunk turn was 15–20 % higher without this (docs/BENCHMARKS.md § A turn's reply held
/// once). Call it first thing in `main`, before any thread starts. Elsewhere than glibc it
/// does nothing.
pub fn bound_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets a parameter of the allocator and touches no memory of ours; the
    // parameter is read under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
