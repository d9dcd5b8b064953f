//! A counting global allocator: live and peak heap bytes of the process, so `perfcast measure`
//! can report a training step's peak memory on this machine.
//!
//! The binaries install it (`#[global_allocator] static A: CountingAlloc = CountingAlloc;` in
//! `main.rs`); it forwards to the system allocator and, once a peak window has been opened
//! ([`reset_peak`]), adds two relaxed atomic updates per call. Until then it counts nothing:
//! a server whose threads allocate on every request would otherwise contend for the counters'
//! cache line on every call. [`installed`] says whether it is in place, so a library user
//! without it reports no peak rather than zero.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// Bytes allocated less bytes freed since the window opened (negative when more was freed
/// than allocated: memory from before the window).
static NET: AtomicIsize = AtomicIsize::new(0);
/// The most `NET` has been since the window opened.
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// Whether a window is open: counting starts with the first [`reset_peak`].
static COUNTING: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting live and peak bytes.
pub struct CountingAlloc;

fn grew(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        let by = isize::try_from(by).unwrap_or(isize::MAX);
        let now = NET.fetch_add(by, Ordering::Relaxed).saturating_add(by);
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

fn shrank(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        NET.fetch_sub(isize::try_from(by).unwrap_or(isize::MAX), Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged;
// the counters never influence what is allocated.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

/// Marks the allocator as installed; `main` calls it first.
pub fn mark_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Whether the counting allocator is the process's allocator.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Opens a new peak window: from now on, bytes allocated and freed are counted from zero.
pub fn reset_peak() {
    NET.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
}

/// The most bytes live at once since [`reset_peak`], beyond those live when it was called.
pub fn peak() -> usize {
    usize::try_from(PEAK.load(Ordering::Relaxed)).unwrap_or(0)
}

/// This allocator's counters as the peak-memory probe of network measurements (`None` when the
/// allocator is not installed).
pub struct Counted;

impl perfcast_profile::network_runs::PeakMemory for Counted {
    fn reset(&self) -> usize {
        // The window counts from zero, so its baseline is zero.
        reset_peak();
        0
    }

    fn peak_since(&self, live_before: usize) -> Option<u64> {
        installed().then(|| peak().saturating_sub(live_before) as u64)
    }
}
