//! The helper registration table shared by the interpreter and the JIT.
//!
//! Helpers use one calling convention in both engines: `r1..r5` in, `r0` out, as a plain
//! `extern "C"` function of five `u64`s. Map handles and ring-buffer pointers arrive as the
//! addresses the loader relocated into `lddw`, so helpers need no per-call environment.
//! Which helpers a program may call, and with what, is the verifier's business
//! (`gpubpf_verifier::helpers` is the single source of ids and signatures); this table only
//! says which implementation runs for an id.

use std::collections::BTreeMap;

/// A helper implementation: receives `r1..r5`, returns `r0`.
pub type HelperFn = extern "C" fn(u64, u64, u64, u64, u64) -> u64;

/// Bytes of stack per BPF frame.
pub const STACK_SIZE_PER_FRAME: usize = 512;
/// Maximum depth of bpf-to-bpf calls (frames, including the entry function).
pub const MAX_CALL_FRAMES: usize = 8;
/// Bytes of stack a caller must supply for one execution (all frames).
pub const STACK_SIZE: usize = STACK_SIZE_PER_FRAME * MAX_CALL_FRAMES;
/// Default bound on the *iterations* of one run, enforced by both engines: every backward
/// jump taken (target slot at or before the jump's own) plus every `bpf_loop` callback
/// invocation, counted over all frames of the run. The verifier accepts nested `bpf_loop`s
/// (2^23 iterations each), so without it one hooked call might never return. 2^23 lets one
/// maximal `bpf_loop` with a loop-free callback complete. See docs/design-decisions.md.
pub const RUN_ITERATION_BUDGET: u64 = 1 << 23;

/// Helper implementations by id.
#[derive(Clone, Default)]
pub struct HelperTable {
    entries: BTreeMap<i32, Entry>,
}

#[derive(Clone, Copy)]
struct Entry {
    name: &'static str,
    f: HelperFn,
    /// How many of `r1..r5` the helper reads (5 when not declared).
    args: u8,
}

impl std::fmt::Debug for HelperTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(id, e)| (id, e.name)))
            .finish()
    }
}

impl HelperTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the implementation of helper `id`, which may read all of
    /// `r1..r5`.
    pub fn register(&mut self, id: i32, name: &'static str, f: HelperFn) {
        self.entries.insert(id, Entry { name, f, args: 5 });
    }

    /// Registers (or replaces) helper `id`, declaring that it reads only `r1..r{args}`
    /// (at most 5): the JIT then passes zero for the other arguments instead of keeping
    /// the program's `r{args+1}..r5` alive up to the call. `standard_helpers` declares every
    /// helper's count from its verifier signature.
    pub fn register_with_args(&mut self, id: i32, name: &'static str, f: HelperFn, args: u8) {
        let args = args.min(5);
        self.entries.insert(id, Entry { name, f, args });
    }

    /// The implementation of helper `id`.
    pub fn get(&self, id: i32) -> Option<HelperFn> {
        self.entries.get(&id).map(|e| e.f)
    }

    /// The registered name of helper `id`.
    pub fn name(&self, id: i32) -> Option<&'static str> {
        self.entries.get(&id).map(|e| e.name)
    }

    /// How many of `r1..r5` helper `id` reads (5 unless declared).
    pub fn arg_count(&self, id: i32) -> Option<u8> {
        self.entries.get(&id).map(|e| e.args)
    }

    /// Registered ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.entries.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn add(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
        a.wrapping_add(b)
    }

    #[test]
    fn register_and_call() {
        let mut t = HelperTable::new();
        t.register(7, "add", add);
        assert_eq!(t.get(7).map(|f| f(2, 3, 0, 0, 0)), Some(5));
        assert!(t.get(8).is_none());
        assert_eq!(t.name(7), Some("add"));
    }
}
