//! The allocation settings of a program that records long turns: the C allocator's large
//! allocation threshold, and huge pages for the few buffers of many megabytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`LargeBufferAllocator`] advises huge pages: set by [`bound_large_allocations`],
/// so a program that never calls it (the scripted test agent in the same binary) allocates
/// exactly as the system allocator does.
static ADVISE_HUGE_PAGES: AtomicBool = AtomicBool::new(false);

/// A transparent huge page on x86-64 and aarch64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// Serves every allocation of 128 KiB or more with a mapping of its own, returned to the
/// system when freed, and turns on [`LargeBufferAllocator`]'s huge pages.
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
    // Only where `System.dealloc` is `free` whatever the layout (see the allocator's safety
    // note) and the advice exists.
    #[cfg(target_os = "linux")]
    ADVISE_HUGE_PAGES.store(true, Ordering::Relaxed);
}

/// The system allocator, with each allocation of 2 MiB or more (zeroed ones aside) placed on
/// a 2 MiB boundary, rounded up to whole 2 MiB blocks, and backed by transparent huge pages
/// (Linux's `madvise(MADV_HUGEPAGE)`), once [`bound_large_allocations`] was called.
///
/// Why: a large session's load reads its 10 MB snapshot into one buffer and parses its long
/// texts into others, each a mapping of its own (see [`bound_large_allocations`]) touched
/// for the first time. In 4 KiB pages that is about 5,000 page faults, and a fault costs
/// about 4 µs of system time in a virtual machine: 20 ms, most of what a prompt on a large
/// file store session cost over one on a new session (docs/BENCHMARKS.md § Huge pages for
/// large buffers). With the advice a 2 MiB block is one fault. The alignment matters as much
/// as the advice: only whole aligned blocks can be huge pages, and a buffer at an arbitrary
/// address loses about a block's worth of small pages at its two ends.
///
/// The cost: such a buffer's last block is resident whole while it is used (under 2 MiB
/// more), and growing one copies it into a new allocation instead of letting the C allocator
/// move its pages (a buffer that grows by doubling copies less than its final size in all).
/// Smaller allocations, other systems than Linux, and kernels where transparent huge pages
/// are off (`never`) get the system allocator's behaviour unchanged.
///
/// Install it in the binary: `#[global_allocator] static A: LargeBufferAllocator =
/// LargeBufferAllocator;`.
pub struct LargeBufferAllocator;

/// The layout a large allocation is made with, or `None` to leave `layout` as it is.
#[inline]
fn huge_page_layout(layout: Layout) -> Option<Layout> {
    if layout.size() < HUGE_PAGE
        || layout.align() > HUGE_PAGE
        || !ADVISE_HUGE_PAGES.load(Ordering::Relaxed)
    {
        return None;
    }
    let size = layout.size().checked_next_multiple_of(HUGE_PAGE)?;
    Layout::from_size_align(size, HUGE_PAGE).ok()
}

// SAFETY: every allocation comes from `System`, with the caller's layout or a larger size and
// alignment (which satisfies the caller's), and is freed by `System`, whose `dealloc` on Unix
// is `free` whatever the layout. The advice only changes how the kernel backs pages of an
// allocation just made, never their contents.
unsafe impl GlobalAlloc for LargeBufferAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match huge_page_layout(layout) {
            // SAFETY: a layout of non-zero size (at least 2 MiB).
            Some(large) => unsafe { advise_huge_pages(System.alloc(large), large.size()) },
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
        // SAFETY: forwarded as received; a large allocation's own layout differs, which
        // `System` ignores when it frees (see the impl's safety note).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, with `layout.align()`, is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if huge_page_layout(layout).is_none() && huge_page_layout(new_layout).is_none() {
            // SAFETY: forwarded as received.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Large before or after: a new allocation (aligned and advised if large), the bytes
        // copied, the old one freed.
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

/// Advises huge pages for `[p, p + size)`, an allocation on a 2 MiB boundary of whole 2 MiB
/// blocks; returns `p`.
#[inline]
fn advise_huge_pages(p: *mut u8, size: usize) -> *mut u8 {
    #[cfg(target_os = "linux")]
    if !p.is_null() {
        // SAFETY: the range is an allocation this process owns and nothing else refers to
        // yet; MADV_HUGEPAGE changes how the kernel backs it (a hint, ignored where
        // transparent huge pages are off), never its contents, so its result is ignored.
        unsafe {
            libc::madvise(p.cast(), size, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = size;
    p
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
            if cfg!(target_os = "linux") {
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
            let s = a.realloc(r, Layout::from_size_align(bigger, 8).unwrap(), 1000);
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
