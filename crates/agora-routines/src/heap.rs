//! Giving the allocator's free memory back to the operating system after a compile.
//!
//! Compiling a JavaScript routine (a whole QuickJS engine) takes tens of megabytes of short-lived
//! allocations on whichever threads Cranelift ran on. glibc keeps freed memory in its per-thread
//! arenas and returns only what lies at the top of each, so every compile would leave the
//! process a little larger for good. `malloc_trim` releases the free pages of every arena. It is
//! called after builds and compiles only, not after a program's check, which is frequent, frees
//! little, and would pay for a walk of every arena each time.

/// Releases the allocator's free pages (glibc on Linux; elsewhere nothing).
pub(crate) fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` takes no pointers and only releases memory the allocator holds
    // free; glibc makes it safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
