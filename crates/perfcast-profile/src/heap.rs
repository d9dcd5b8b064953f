//! Keeping freed memory in the process while measuring.
//!
//! With glibc's defaults, a large tensor freed between two layers goes back to the operating
//! system (its own `mmap`, or a trimmed heap top), and the next layer's output faults its pages
//! in again. How often that happens depends on the order and sizes of earlier allocations, not on
//! the layer, so one network measures slower as the first of a process than after others
//! (docs/accuracy.md#figures-behind-code-choices). Runtimes keep an
//! arena for exactly this reason (ONNX Runtime, PyTorch's caching allocators), so measuring runs
//! do too: allocations come from the heap and the heap is never trimmed. Resident memory then
//! stays at the run's peak. One exception is glibc's: a worker thread's allocation above its
//! per-thread heap size (64 MiB) is still mapped on its own, where faulting pages in costs little
//! next to the layer that fills them.

/// Makes the C allocator keep freed memory for reuse (glibc on Linux; elsewhere nothing to do).
/// Idempotent; called before anything is measured.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `mallopt` only changes allocator parameters; it is safe to call at any
            // time, from any thread, and returns 0 when a value is refused (then the defaults
            // stay, which only costs speed).
            #[allow(unsafe_code)]
            unsafe {
                libc::mallopt(libc::M_MMAP_MAX, 0);
                libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
            }
        });
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #[test]
    #[allow(unsafe_code)]
    fn large_allocations_come_from_the_heap_once_kept() {
        super::keep_freed_memory();
        // SAFETY: `mallinfo2` only reads the allocator's statistics.
        let mmapped = || unsafe { libc::mallinfo2() }.hblkhd;
        let before = mmapped();
        let big = vec![1u8; 16 << 20];
        let during = mmapped();
        assert!(big.iter().all(|&b| b == 1));
        // glibc's default would serve 16 MiB with its own mapping.
        assert!(
            during < before + (16 << 20),
            "{before} -> {during} bytes mapped"
        );
    }
}
