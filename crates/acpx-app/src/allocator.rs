//! The allocation settings of a program that records long turns: the C allocator's large
//! allocation threshold, and huge pages for the few buffers of many megabytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`LargeBufferAllocator`] places large allocations on huge pages: set by
/// [`bound_large_allocations`] where they exist, so a program that never calls it (the
/// scripted test agent in the same binary) allocates exactly as the system allocator does.
static HUGE_PAGES: AtomicBool = AtomicBool::new(false);

/// A transparent huge page with 4 KiB base pages (x86-64, most aarch64 kernels).
const HUGE_PAGE: usize = 2 << 20;

/// The environment variable that turns the huge pages off: `ACPX_HUGE_PAGES=0`.
pub const HUGE_PAGES_ENV: &str = "ACPX_HUGE_PAGES";

/// Serves every allocation of 128 KiB or more with a mapping of its own, returned to the
/// system when freed, and turns on [`LargeBufferAllocator`]'s huge pages where the kernel
/// has them.
///
/// glibc raises that threshold after each large free (up to 32 MiB), after which a long
/// turn's megabyte buffers (the document of each snapshot save, SQLite's copies of it) come
/// from the heap arenas of several threads and stay resident once freed: the peak RSS of a
/// 1M-chunk turn was 15–20 % higher without this (docs/BENCHMARKS.md § A turn's reply held
/// once). Call it first thing in `main`, before any thread starts. Elsewhere than glibc the
/// threshold is left alone.
pub fn bound_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets a parameter of the allocator and touches no memory of ours; the
    // parameter is read under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
    #[cfg(target_os = "linux")]
    HUGE_PAGES.store(huge_pages_available(), Ordering::Relaxed);
}

/// Whether transparent huge pages of 2 MiB can back an advised range here: not turned off
/// with [`HUGE_PAGES_ENV`], the kernel's setting `always` or `madvise` (not `never`), and its
/// huge page 2 MiB (a kernel with 16 or 64 KiB base pages has larger ones, which a 2 MiB
/// block could never fill). Otherwise the alignment and rounding would cost address space
/// and copies for nothing.
#[cfg(target_os = "linux")]
fn huge_pages_available() -> bool {
    if std::env::var_os(HUGE_PAGES_ENV).is_some_and(|v| v == "0") {
        return false;
    }
    let read = |name: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{name}"))
            .unwrap_or_default()
    };
    let enabled = read("enabled");
    (enabled.contains("[always]") || enabled.contains("[madvise]"))
        && read("hpage_pmd_size").trim() == HUGE_PAGE.to_string()
}

/// The system allocator, with each allocation of 2 MiB or more (zeroed ones aside) placed on
/// a 2 MiB boundary, rounded up to whole 2 MiB blocks, and backed by transparent huge pages
/// (Linux's `madvise(MADV_HUGEPAGE)`), once [`bound_large_allocations`] found them available.
///
/// Why: a large session's load reads its 10 MB snapshot into one buffer and parses its long
/// texts into others, each a mapping of its own (see [`bound_large_allocations`]) touched
/// for the first time. In 4 KiB pages that was 7,000–8,500 page faults against 1,000 for a
/// new session, and a fault costs about 4 µs of system time in a virtual machine: most of
/// what a prompt on a large file store session cost over one on a new session
/// (docs/BENCHMARKS.md § Huge pages for large buffers). A 2 MiB block is one fault. The
/// alignment matters as much as the advice: only whole aligned blocks can be huge pages, and
/// a buffer at an arbitrary address keeps about a block's worth of small pages at its ends.
///
/// The cost: such a buffer's last block is resident whole while it is used (under 2 MiB
/// more), and a large buffer that grows is copied into a new block instead of the C
/// allocator moving its pages (a buffer that grows by doubling copies less than its final
/// size in all; a shrink that stays large keeps its block).
/// Where the kernel has no 2 MiB transparent huge pages, with `ACPX_HUGE_PAGES=0`, on other
/// systems than Linux, and for smaller allocations, this is the system allocator unchanged.
/// Large blocks come from `posix_memalign` and go back with `free`, both libc's, whatever
/// `System` does with the same calls.
///
/// Install it in the binary: `#[global_allocator] static A: LargeBufferAllocator =
/// LargeBufferAllocator;`.
pub struct LargeBufferAllocator;

/// The size a large allocation is made with (a multiple of [`HUGE_PAGE`]), or `None` for an
/// allocation left to the system.
#[inline]
fn huge_page_size(layout: Layout) -> Option<usize> {
    if layout.size() < HUGE_PAGE
        || layout.align() > HUGE_PAGE
        || !HUGE_PAGES.load(Ordering::Relaxed)
    {
        return None;
    }
    layout.size().checked_next_multiple_of(HUGE_PAGE)
}

/// Whether a block of `layout` is freed with libc's `free` rather than by `System`: while the
/// huge pages are on, any block of 2 MiB or more with at most 2 MiB alignment, since
/// [`LargeBufferAllocator::alloc`] may have made it with `posix_memalign`. Those `System` made
/// (before the huge pages were on, or zeroed) come from `malloc`, `calloc`, `posix_memalign`
/// or `realloc` on Linux, which `free` accepts too.
#[inline]
fn freed_by_libc(layout: Layout) -> bool {
    layout.size() >= HUGE_PAGE && layout.align() <= HUGE_PAGE && HUGE_PAGES.load(Ordering::Relaxed)
}

// SAFETY: a block is made either by `System` with the caller's layout, or (large, on Linux,
// huge pages on) by libc's `posix_memalign` with a larger size and an alignment that
// satisfies the caller's. While the huge pages are on (they never go off again), every block
// of 2 MiB or more and at most 2 MiB alignment is freed with libc's `free`, which accepts what
// `posix_memalign`, `malloc`, `calloc` and `realloc` returned (`System` makes such blocks with
// those on Linux); every other block goes back to `System` with the layout it was made with.
// A shrink kept in place leaves a block longer than its layout says, which `free` ignores.
// The advice only changes how the kernel backs pages of a block just made, never its contents.
unsafe impl GlobalAlloc for LargeBufferAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match huge_page_size(layout) {
            Some(size) => alloc_huge(size),
            // SAFETY: forwarded as received.
            None => unsafe { System.alloc(layout) },
        }
    }

    // Left to the system whatever the size: zeroed memory over 2 MiB boundaries would be an
    // allocation and a write of every byte, where `calloc` maps zero pages it never touches
    // (a buffer zeroed for a read often stays mostly unread).
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if freed_by_libc(layout) {
            // SAFETY: `ptr` came from libc's allocator (see `freed_by_libc`) and is freed once.
            unsafe {
                libc::free(ptr.cast());
            }
            return;
        }
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, with `layout.align()`, is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old_huge, new_huge) = (huge_page_size(layout), huge_page_size(new_layout));
        if old_huge.is_none() && new_huge.is_none() {
            // SAFETY: forwarded as received: a block `System` made, staying small (or the
            // huge pages are off and every block is the system's).
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A shrink that stays large keeps the block: it is at least `new_size` long, and
        // `free` takes it back whatever the size. (A growth cannot stay in place: a block
        // `System` made has no rounded size to grow into.)
        if old_huge.is_some() && new_huge.is_some() && new_size <= layout.size() {
            return ptr;
        }
        // Otherwise a new block (large and aligned, or the system's), the bytes copied, the
        // old one freed.
        // SAFETY: `new_layout` has a non-zero size (the caller's contract); `ptr` holds
        // `layout.size()` bytes and the new block `new_size`, and they do not overlap.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

/// A block of `size` bytes (a multiple of 2 MiB) on a 2 MiB boundary, advised to be backed
/// by huge pages; null when there is no memory.
#[inline]
fn alloc_huge(size: usize) -> *mut u8 {
    #[cfg(target_os = "linux")]
    {
        let mut p: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the alignment is a power of two and a multiple
        // of the pointer size, as posix_memalign requires.
        if unsafe { libc::posix_memalign(&mut p, HUGE_PAGE, size) } != 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: the range is the block just made, which nothing else refers to yet;
        // MADV_HUGEPAGE changes how the kernel backs it (a hint), never its contents, so its
        // result is ignored.
        unsafe {
            libc::madvise(p, size, libc::MADV_HUGEPAGE);
        }
        p.cast()
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Never reached: the huge pages are only turned on on Linux.
        let _ = size;
        std::ptr::null_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The allocator's contract, through `GlobalAlloc` itself: contents kept across growth
    /// into and shrinking out of the large size, zeroed memory zero, large blocks on 2 MiB
    /// boundaries, small ones and over-aligned ones as the system gives them.
    #[test]
    fn large_buffers_keep_their_contents_on_aligned_blocks() {
        bound_large_allocations();
        let a = LargeBufferAllocator;
        let small = Layout::from_size_align(64 * 1024, 8).unwrap();
        let fill = |p: *mut u8, n: usize| {
            for i in 0..n {
                // SAFETY: `p` holds at least `n` bytes (every caller below).
                unsafe { *p.add(i) = (i % 251) as u8 };
            }
        };
        let holds = |p: *mut u8, n: usize| {
            // SAFETY: as in `fill`.
            (0..n).all(|i| unsafe { *p.add(i) } == (i % 251) as u8)
        };
        // SAFETY: layouts of non-zero size; every pointer is checked, used inside its size
        // and freed or reallocated with the layout it has.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            fill(p, small.size());
            let big = 9 * HUGE_PAGE + 12_345;
            let q = a.realloc(p, small, big);
            assert!(!q.is_null());
            assert!(holds(q, small.size()));
            let huge = HUGE_PAGES.load(Ordering::Relaxed);
            if huge {
                assert_eq!(
                    q as usize % HUGE_PAGE,
                    0,
                    "a large block on a 2 MiB boundary"
                );
            }
            fill(q, big);
            let bigger = 13 * HUGE_PAGE;
            let r = a.realloc(q, Layout::from_size_align(big, 8).unwrap(), bigger);
            assert!(!r.is_null());
            assert!(holds(r, big));
            // A shrink that stays large keeps its block.
            let shrunk = 12 * HUGE_PAGE + 1;
            let same = a.realloc(r, Layout::from_size_align(bigger, 8).unwrap(), shrunk);
            if huge {
                assert_eq!(same, r);
            }
            assert!(holds(same, big));
            let s = a.realloc(same, Layout::from_size_align(shrunk, 8).unwrap(), 1000);
            assert!(!s.is_null());
            assert!(holds(s, 1000));
            a.dealloc(s, Layout::from_size_align(1000, 8).unwrap());

            // Zeroed memory is the system's, and grows like any large block.
            let z = Layout::from_size_align(5 * HUGE_PAGE + 1, 64).unwrap();
            let r = a.alloc_zeroed(z);
            assert!(!r.is_null());
            assert!((0..z.size()).step_by(4093).all(|i| *r.add(i) == 0));
            let r = a.realloc(r, z, 6 * HUGE_PAGE);
            assert!(!r.is_null());
            assert!((0..z.size()).step_by(4093).all(|i| *r.add(i) == 0));
            a.dealloc(r, Layout::from_size_align(6 * HUGE_PAGE, 64).unwrap());

            let over = Layout::from_size_align(3 * HUGE_PAGE, 4 * HUGE_PAGE).unwrap();
            let o = a.alloc(over);
            assert!(!o.is_null());
            assert_eq!(o as usize % over.align(), 0);
            a.dealloc(o, over);
        }
    }
}
