//! A memory meter for the interpreter: the global allocator counts the bytes live on the
//! current thread, so the engine's progress hook can stop a script that holds more than
//! its budget *with the script's line number*. The wasm memory cap of the binding stays
//! the outer wall; this meter only makes the common case a readable error.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // `const` and without a destructor, so touching it never allocates (the allocator
    // must not re-enter itself) and it stays usable while a thread is torn down.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    let _ = LIVE.try_with(|c| c.set(c.get().wrapping_add(delta)));
}

/// Bytes allocated and not yet freed on this thread since it started. Only differences
/// are meaningful (memory freed on another thread than it was allocated on skews it).
pub fn live_bytes() -> isize {
    LIVE.try_with(Cell::get).unwrap_or(0)
}

/// The system allocator, counting per thread.
pub struct MeteredAlloc;

// SAFETY: every method forwards to `System` unchanged; the counter is a plain
// thread-local integer that neither allocates nor unwinds.
unsafe impl GlobalAlloc for MeteredAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every path above).
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: MeteredAlloc = MeteredAlloc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_this_thread_holds() {
        let before = live_bytes();
        let v = vec![0u8; 1 << 20];
        assert!(live_bytes() - before >= 1 << 20);
        drop(v);
        assert!(live_bytes() - before < 1 << 16);
    }
}
