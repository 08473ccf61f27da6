//! A per-thread pointer to the thread's [`super::ThreadState`], read with one TLS
//! descriptor call instead of `__tls_get_addr`.
//!
//! Rust's thread-locals in a shared object use the general-dynamic TLS model: every access
//! calls `__tls_get_addr`, which reads the thread's DTV, the loader's generation counter and
//! the module's `tls_index` — five or six cache lines a policed call would otherwise miss
//! in a real CUDA application (docs/shim.md, "Cache lines of a policed call"). The initial-
//! exec model would avoid them but marks the library `STATIC_TLS`, and `dlopen` then fails
//! for want of static TLS space. A TLS *descriptor* (`-mtls-dialect=gnu2`, the sequence
//! below) gets both: the loader resolves it to a two-instruction function returning a
//! fixed offset when the module's TLS is in the static block (always so under
//! `LD_PRELOAD`), and to its dynamic resolver when the library was `dlopen`ed; a linker
//! relaxes it to a constant in an executable (the tests). Stable Rust cannot choose a TLS
//! dialect, so the one word lives in `.tbss` by `global_asm!` and is reached by `asm!`.
//! Other targets use the thread-local itself.

use super::ThreadState;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::ThreadState;

    // One zeroed 8-byte word of thread-local storage, visible to this module only.
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        ".globl gpubpf_hot_thread_state",
        ".hidden gpubpf_hot_thread_state",
        ".type gpubpf_hot_thread_state,@object",
        ".size gpubpf_hot_thread_state,8",
        "gpubpf_hot_thread_state:",
        ".zero 8",
        ".popsection",
    );

    /// This thread's pointer (null until [`set`]).
    #[inline(always)]
    pub(super) fn get() -> *const ThreadState {
        let p: *const ThreadState;
        // SAFETY: the canonical x86-64 TLS descriptor sequence for the word defined above:
        // the descriptor function returns the word's offset from the thread pointer in
        // %rax and preserves every other register (that is its ABI); the word is this
        // thread's own and 8-byte aligned. It may call into the loader (`call`), hence no
        // `nostack`.
        unsafe {
            core::arch::asm!(
                "leaq gpubpf_hot_thread_state@tlsdesc(%rip), %rax",
                "call *gpubpf_hot_thread_state@tlscall(%rax)",
                "movq %fs:(%rax), %rax",
                out("rax") p,
                options(att_syntax, readonly),
            );
        }
        p
    }

    /// Sets this thread's pointer.
    #[inline]
    pub(super) fn set(p: *const ThreadState) {
        // SAFETY: as in `get`; the store goes to this thread's own word.
        unsafe {
            core::arch::asm!(
                "leaq gpubpf_hot_thread_state@tlsdesc(%rip), %rax",
                "call *gpubpf_hot_thread_state@tlscall(%rax)",
                "movq {p}, %fs:(%rax)",
                p = in(reg) p,
                out("rax") _,
                options(att_syntax),
            );
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::ThreadState;
    use std::cell::Cell;

    thread_local! {
        static PTR: Cell<*const ThreadState> = const { Cell::new(std::ptr::null()) };
    }

    pub(super) fn get() -> *const ThreadState {
        PTR.try_with(Cell::get).unwrap_or(std::ptr::null())
    }

    pub(super) fn set(p: *const ThreadState) {
        let _ = PTR.try_with(|c| c.set(p));
    }
}

/// This thread's state as [`set`] left it; null before the first call of the thread and
/// after its state was dropped.
#[inline(always)]
pub(super) fn get() -> *const ThreadState {
    imp::get()
}

/// Records (or, with null, forgets) this thread's state.
pub(super) fn set(p: *const ThreadState) {
    imp::set(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread has its own word: a value set on one thread is not seen on another,
    /// and a new thread starts with null.
    #[test]
    fn per_thread_word() {
        let marker = std::ptr::NonNull::<ThreadState>::dangling().as_ptr();
        let before = get();
        set(marker);
        assert_eq!(get(), marker.cast_const());
        let other = std::thread::spawn(|| {
            let seen = get() as usize;
            set(std::ptr::NonNull::<ThreadState>::dangling()
                .as_ptr()
                .wrapping_add(1));
            seen
        })
        .join()
        .expect("thread");
        assert_eq!(other, 0, "a new thread starts with null");
        assert_eq!(get(), marker.cast_const(), "untouched by the other thread");
        set(before);
    }
}
