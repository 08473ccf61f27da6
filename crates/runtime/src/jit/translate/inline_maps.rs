//! Inlined `bpf_map_lookup_elem`, as Linux's `map_gen_lookup`: where the map argument of a
//! lookup is the constant handle of a map the caller listed ([`InlineMap`]), the helper
//! call becomes the lookup itself.
//!
//! - Arrays: a bounds check of the `u32` key and an address computation
//!   (`array_map_gen_lookup`).
//! - Hash maps (not LRU) with 4- or 8-byte keys: the first probe of `maps::hash`'s
//!   lock-free lookup (`HashMap::find`) in the generated code: the key's hash with the
//!   map's seed (`maps::key_hash::hash_key` for one word), the bucket's first link (an
//!   acquire load): the bucket's own end is a miss, an entry with the same hash and key
//!   whose state (an acquire load) is used is the hit; anything else calls the helper,
//!   which walks the whole chain (a cold block at the end of the function).
//!
//! The verifier proved r1 a map handle and r2 readable for the map's key size; the maps
//! stay mapped while the compiled program may run (the caller's guarantee).

use super::*;
use crate::jit::{InlineArray, InlineHash};
use crate::maps::key_hash::{FINAL_MUL, WORD_MUL};
use crate::maps::layout::{
    BUCKET_HEAD, BUCKET_SIZE, CHAIN_NULLS, ENTRY_HASH, ENTRY_HDR, ENTRY_STATE, ENTRY_USED,
};

impl FnTranslator<'_, '_> {
    /// `bpf_map_lookup_elem` (helper function `f`) of a map the caller listed, whose
    /// handle is a constant here (the `lddw` of a prepared program, in the same block):
    /// the lookup inlined; returns r0. `None` for any other call.
    pub(super) fn inline_lookup(
        &mut self,
        id: i32,
        f: crate::helper_table::HelperFn,
    ) -> Result<Option<Value>, JitError> {
        let lookup: crate::helper_table::HelperFn = crate::helpers::map_ops::map_lookup_elem;
        if self.maps.is_empty() || f as usize != lookup as usize {
            return Ok(None);
        }
        let r1 = self.get(1);
        let Some(handle) = self.constant(r1) else {
            return Ok(None);
        };
        match self.maps.iter().find(|m| m.handle() == handle).copied() {
            Some(InlineMap::Array(a)) => Ok(Some(self.inline_array_lookup(a))),
            Some(InlineMap::Hash(h)) => self.inline_hash_lookup(h, id, f),
            None => Ok(None),
        }
    }

    fn inline_array_lookup(&mut self, a: InlineArray) -> Value {
        let key_reg = self.get(2);
        let (key_ptr, off) = self.stack_address(key_reg, 0);
        let key = self.b.ins().load(types::I32, mem_flags(), key_ptr, off);
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

    /// The first probe of a hash map's lookup in the generated code: the key's hash, the
    /// bucket's first link, and, when that is the bucket's own end, a miss; when it is an
    /// entry holding the key (same hash, same key, state used), that entry's value.
    /// Anything else (a key further down the chain, another bucket's end reached through a
    /// concurrent delete, a link out of range) calls the helper, which walks the chain from
    /// the start (`HashMap::find`); the call is a cold block, out of the line of the common
    /// path. One probe keeps the code small: every lookup of a program gets its own copy,
    /// and on a cold call its code lines cost more than the instructions saved.
    fn inline_hash_lookup(
        &mut self,
        m: InlineHash,
        id: i32,
        f: crate::helper_table::HelperFn,
    ) -> Result<Option<Value>, JitError> {
        let key_ty = match m.key_size {
            4 => types::I32,
            8 => I64,
            _ => return Ok(None),
        };
        if !m.nbuckets.is_power_of_two() || m.max_entries >= CHAIN_NULLS {
            return Ok(None);
        }
        let key_reg = self.get(2);
        let (key_ptr, off) = self.stack_address(key_reg, 0);
        let key = self.b.ins().load(key_ty, mem_flags(), key_ptr, off);
        let word = if key_ty == I64 {
            key
        } else {
            self.b.ins().uextend(I64, key)
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
        let own_end = ins.ins().bor_imm_s(bucket, i64::from(CHAIN_NULLS));

        let probe = self.b.create_block();
        let entry_block = self.b.create_block();
        let same_hash = self.b.create_block();
        let same_key = self.b.create_block();
        let hit = self.b.create_block();
        let slow = self.b.create_block();
        self.b.set_cold_block(slow);
        let done = self.b.create_block();
        let result = self.b.append_block_param(done, I64);
        let zero = self.zero;

        let first = self.shared_u32(head, 0);
        let empty = self.b.ins().icmp(IntCC::Equal, first, own_end);
        self.b
            .ins()
            .brif(empty, done, &[BlockArg::Value(zero)], probe, &[]);

        // Another bucket's end (a chain end has the flag, above any entry index) or a link
        // out of range: the helper's walk decides.
        self.b.switch_to_block(probe);
        self.b.seal_block(probe);
        let out = self.b.ins().icmp_imm_s(
            IntCC::UnsignedGreaterThanOrEqual,
            first,
            i64::from(m.max_entries),
        );
        self.b.ins().brif(out, slow, &[], entry_block, &[]);

        self.b.switch_to_block(entry_block);
        self.b.seal_block(entry_block);
        let off = self.b.ins().imul_imm_s(first, i64::from(m.stride));
        let entry = self.b.ins().iadd_imm_s(off, m.entries as i64);
        let stored_hash = self.shared_u32(entry, ENTRY_HASH);
        let eq = self.b.ins().icmp(IntCC::Equal, stored_hash, hash);
        self.b.ins().brif(eq, same_hash, &[], slow, &[]);

        self.b.switch_to_block(same_hash);
        self.b.seal_block(same_hash);
        let stored_key = self
            .b
            .ins()
            .load(key_ty, mem_flags(), entry, ENTRY_HDR as i32);
        let eq = self.b.ins().icmp(IntCC::Equal, stored_key, key);
        self.b.ins().brif(eq, same_key, &[], slow, &[]);

        self.b.switch_to_block(same_key);
        self.b.seal_block(same_key);
        let state = self.shared_u32(entry, ENTRY_STATE);
        let used = self
            .b
            .ins()
            .icmp_imm_s(IntCC::Equal, state, i64::from(ENTRY_USED));
        self.b.ins().brif(used, hit, &[], slow, &[]);

        self.b.switch_to_block(hit);
        self.b.seal_block(hit);
        let value = self.b.ins().iadd_imm_s(entry, i64::from(m.value_offset));
        self.b.ins().jump(done, &[BlockArg::Value(value)]);

        self.b.switch_to_block(slow);
        self.b.seal_block(slow);
        let r0 = self.call_helper(id, f)?;
        self.b.ins().jump(done, &[BlockArg::Value(r0)]);

        self.b.switch_to_block(done);
        self.b.seal_block(done);
        Ok(Some(result))
    }
}
