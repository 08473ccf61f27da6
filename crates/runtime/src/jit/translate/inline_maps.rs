//! Inlined `bpf_map_lookup_elem`, as Linux's `map_gen_lookup`: where the map argument of a
//! lookup is the constant handle of a map the caller listed ([`InlineMap`]), the helper
//! call becomes the lookup itself.
//!
//! - Arrays: a bounds check of the `u32` key and an address computation
//!   (`array_map_gen_lookup`).
//! - Hash maps (not LRU) with 4- or 8-byte keys: the lock-free lookup of `maps::hash`
//!   (`HashMap::find`) in the generated code: the key's hash with the map's seed
//!   (`maps::key_hash::hash_key` for one word), the bucket's chain walked entry by entry
//!   (hash, key and state compared, the state and links read with acquire loads), at most
//!   `max_entries` steps and links below `max_entries` (anything else is a miss, as there),
//!   and a walk that ends in another bucket's *nulls* marker (a concurrent delete moved an
//!   entry under it) restarted, at most four times. The value's address, or 0.
//!
//! The verifier proved r1 a map handle and r2 readable for the map's key size; the maps
//! stay mapped while the compiled program may run (the caller's guarantee).

use super::*;
use crate::jit::{InlineArray, InlineHash};
use crate::maps::key_hash::{FINAL_MUL, WORD_MUL};
use crate::maps::layout::{
    BUCKET_HEAD, BUCKET_SIZE, CHAIN_NULLS, ENTRY_HASH, ENTRY_HDR, ENTRY_NEXT, ENTRY_STATE,
    ENTRY_USED,
};

/// Walks of a chain restarted after landing in another bucket's chain (`HashMap::find`).
const NULLS_RETRIES: i64 = 4;

impl FnTranslator<'_, '_> {
    /// `bpf_map_lookup_elem` (helper function `f`) of a map the caller listed, whose
    /// handle is a constant here (the `lddw` of a prepared program, in the same block):
    /// the lookup inlined; returns r0. `None` for any other call.
    pub(super) fn inline_lookup(&mut self, f: crate::helper_table::HelperFn) -> Option<Value> {
        let lookup: crate::helper_table::HelperFn = crate::helpers::map_ops::map_lookup_elem;
        if self.maps.is_empty() || f as usize != lookup as usize {
            return None;
        }
        let r1 = self.get(1);
        let handle = self.constant(r1)?;
        match *self.maps.iter().find(|m| m.handle() == handle)? {
            InlineMap::Array(a) => Some(self.inline_array_lookup(a)),
            InlineMap::Hash(h) => self.inline_hash_lookup(h),
        }
    }

    fn inline_array_lookup(&mut self, a: InlineArray) -> Value {
        let key_ptr = self.get(2);
        let key = self.b.ins().load(types::I32, mem_flags(), key_ptr, 0);
        let index = self.b.ins().uextend(I64, key);
        let in_range =
            self.b
                .ins()
                .icmp_imm_s(IntCC::UnsignedLessThan, index, i64::from(a.max_entries));
        let offset = self.b.ins().imul_imm_s(index, i64::from(a.stride));
        let addr = self.b.ins().iadd_imm_s(offset, a.data as i64);
        self.b.ins().select(in_range, addr, self.zero)
    }

    /// An acquire load of the `u32` at `addr + offset` (shared memory other processes
    /// write), zero-extended.
    fn shared_u32(&mut self, addr: Value, offset: usize) -> Value {
        let p = self.b.ins().iadd_imm_s(addr, offset as i64);
        let v = self
            .b
            .ins()
            .atomic_load(types::I32, MemFlagsData::trusted(), p);
        self.b.ins().uextend(I64, v)
    }

    fn inline_hash_lookup(&mut self, m: InlineHash) -> Option<Value> {
        let (key_ty, key_bits) = match m.key_size {
            4 => (types::I32, 32),
            8 => (I64, 64),
            _ => return None,
        };
        if !m.nbuckets.is_power_of_two() {
            return None;
        }
        let key_ptr = self.get(2);
        let key = self.b.ins().load(key_ty, mem_flags(), key_ptr, 0);
        let word = if key_bits == 32 {
            self.b.ins().uextend(I64, key)
        } else {
            key
        };
        // The hash of one word (`key_hash::hash_key`).
        let ins = &mut self.b;
        let x = ins.ins().bxor_imm_s(word, m.seed as i64);
        let x = ins.ins().imul_imm_s(x, WORD_MUL as i64);
        let s = ins.ins().ushr_imm_s(x, 32);
        let x = ins.ins().bxor(x, s);
        let x = ins.ins().imul_imm_s(x, FINAL_MUL as i64);
        let s = ins.ins().ushr_imm_s(x, 32);
        let x = ins.ins().bxor(x, s);
        let hash = ins.ins().band_imm_s(x, i64::from(u32::MAX));
        let bucket = ins.ins().band_imm_s(hash, i64::from(m.nbuckets - 1));
        let bucket_off = ins.ins().imul_imm_s(bucket, BUCKET_SIZE as i64);
        let head = ins
            .ins()
            .iadd_imm_s(bucket_off, (m.buckets + BUCKET_HEAD as u64) as i64);
        let nulls_here = ins.ins().bor_imm_s(bucket, i64::from(CHAIN_NULLS));

        let restart = self.b.create_block();
        let tries = self.b.append_block_param(restart, I64);
        let start = self.b.create_block();
        let walk = self.b.create_block();
        let cur = self.b.append_block_param(walk, I64);
        let steps = self.b.append_block_param(walk, I64);
        let walk_tries = self.b.append_block_param(walk, I64);
        let at_nulls = self.b.create_block();
        let in_chain = self.b.create_block();
        let entry_block = self.b.create_block();
        let same_hash = self.b.create_block();
        let same_key = self.b.create_block();
        let next = self.b.create_block();
        let hit = self.b.create_block();
        let done = self.b.create_block();
        let result = self.b.append_block_param(done, I64);

        let zero = self.zero;
        self.b.ins().jump(restart, &[BlockArg::Value(zero)]);

        // restart(tries): a fresh walk from the bucket's head, four at most.
        self.b.switch_to_block(restart);
        let more = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, tries, NULLS_RETRIES);
        self.b
            .ins()
            .brif(more, start, &[], done, &[BlockArg::Value(zero)]);
        self.b.switch_to_block(start);
        self.b.seal_block(start);
        let first = self.shared_u32(head, 0);
        self.b.ins().jump(
            walk,
            &[
                BlockArg::Value(first),
                BlockArg::Value(zero),
                BlockArg::Value(tries),
            ],
        );

        // walk(cur, steps, tries)
        self.b.switch_to_block(walk);
        let nulls = self.b.ins().band_imm_s(cur, i64::from(CHAIN_NULLS));
        self.b.ins().brif(nulls, at_nulls, &[], in_chain, &[]);

        // The end of a chain: this bucket's (a miss) or another's (walk again).
        self.b.switch_to_block(at_nulls);
        self.b.seal_block(at_nulls);
        let here = self.b.ins().icmp(IntCC::Equal, cur, nulls_here);
        let again = self.b.ins().iadd_imm_s(walk_tries, 1);
        self.b.ins().brif(
            here,
            done,
            &[BlockArg::Value(zero)],
            restart,
            &[BlockArg::Value(again)],
        );
        self.b.seal_block(restart);

        // A link out of range or a walk longer than the map: a miss (`HashMap::find`).
        self.b.switch_to_block(in_chain);
        self.b.seal_block(in_chain);
        let max = i64::from(m.max_entries);
        let bad_link = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, cur, max);
        let too_long = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThan, steps, max);
        let stop = self.b.ins().bor(bad_link, too_long);
        self.b
            .ins()
            .brif(stop, done, &[BlockArg::Value(zero)], entry_block, &[]);

        // Entry `cur`: hash, then key, then state.
        self.b.switch_to_block(entry_block);
        self.b.seal_block(entry_block);
        let off = self.b.ins().imul_imm_s(cur, i64::from(m.stride));
        let entry = self.b.ins().iadd_imm_s(off, m.entries as i64);
        let stored_hash = self.shared_u32(entry, ENTRY_HASH);
        let eq = self.b.ins().icmp(IntCC::Equal, stored_hash, hash);
        self.b.ins().brif(eq, same_hash, &[], next, &[]);

        self.b.switch_to_block(same_hash);
        self.b.seal_block(same_hash);
        let stored_key = self
            .b
            .ins()
            .load(key_ty, mem_flags(), entry, ENTRY_HDR as i32);
        let eq = self.b.ins().icmp(IntCC::Equal, stored_key, key);
        self.b.ins().brif(eq, same_key, &[], next, &[]);

        self.b.switch_to_block(same_key);
        self.b.seal_block(same_key);
        let state = self.shared_u32(entry, ENTRY_STATE);
        let used = self
            .b
            .ins()
            .icmp_imm_s(IntCC::Equal, state, i64::from(ENTRY_USED));
        self.b.ins().brif(used, hit, &[], next, &[]);

        // The next link of the chain.
        self.b.switch_to_block(next);
        self.b.seal_block(next);
        let link = self.shared_u32(entry, ENTRY_NEXT);
        let steps1 = self.b.ins().iadd_imm_s(steps, 1);
        self.b.ins().jump(
            walk,
            &[
                BlockArg::Value(link),
                BlockArg::Value(steps1),
                BlockArg::Value(walk_tries),
            ],
        );
        self.b.seal_block(walk);

        // The value follows the 8-aligned key.
        self.b.switch_to_block(hit);
        self.b.seal_block(hit);
        let value_off = ENTRY_HDR + (m.key_size as usize).next_multiple_of(8);
        let value = self.b.ins().iadd_imm_s(entry, value_off as i64);
        self.b.ins().jump(done, &[BlockArg::Value(value)]);

        self.b.switch_to_block(done);
        self.b.seal_block(done);
        Some(result)
    }
}
