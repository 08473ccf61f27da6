//! Hash and LRU hash maps with preallocated entries.
//!
//! - Buckets (`nbuckets`, a power of two ≥ `max_entries`, 16 bytes each) hold a lock that
//!   survives its owner ([`super::lock::MapLock`]), the index of the first entry of their
//!   chain and the number of entries linked and used in it, changed under the lock by plain
//!   stores: no insert or delete makes an atomic read-modify-write on a shared counter.
//!   Chains end in a *nulls* marker that names the bucket (`NULLS | bucket`), as in
//!   Linux's `hlist_nulls`: a lock-free reader that was carried into another chain by a
//!   concurrent delete + reuse notices it and restarts.
//! - Entries: `next` (chain), `free_next` (free list), `hash`, `state`, `lru` stamp, key,
//!   value. All `max_entries` live on a lock-free free list (a Treiber stack whose head
//!   carries an ABA tag) until inserted.
//! - Lookups take no lock. Writers lock the bucket; every change of a chain is a single
//!   store (link: `e.next = head; head = e`; unlink: `prev.next = e.next`), and an entry is
//!   visible only while linked *and* marked used, so an owner killed at any point leaves a
//!   consistent chain and at worst one lost entry: either linked but unused, or popped from
//!   the free list but never linked (or unlinked but never pushed back). The bucket lock
//!   reports the dead owner to the next locker, which runs
//!   [`HashMap::repair`] and reclaims the entry and recounts the elements.
//! - As in Linux's preallocated hash maps, an entry may be reused right after deletion: a
//!   program that still holds a value pointer then sees the new entry's value.
//! - LRU: every hit stamps the entry from a shared clock; when the free list is empty an
//!   insert evicts the entry with the oldest stamp among a window of up to
//!   [`LRU_WINDOW`] entries scanned from a rotating hand (exact LRU for maps of at most
//!   that many entries, sampled beyond). The clock advances by a plain load and store, not
//!   an atomic read-modify-write: hits racing in other threads may take the same stamp
//!   (and the clock may then advance by one for several of them), which only makes them
//!   equally old, an approximation of the kind Linux's LRU makes too (its per-CPU lists
//!   and reference bits); one thread's hits stay strictly ordered.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub(super) use super::key_hash::hash_key;
use super::layout::{
    BUCKET_COUNT, BUCKET_HEAD, BUCKET_SIZE, CHAIN_NULLS, ENTRY_FREE, ENTRY_FREE_NEXT, ENTRY_HASH,
    ENTRY_HDR, ENTRY_LRU, ENTRY_NEXT, ENTRY_STATE, ENTRY_USED, STATE_OFFSET,
};
use super::lease::Lease;
use super::lock::{MapLock, MapLockGuard};
use super::{round8, MapError, BPF_EXIST, BPF_NOEXIST};

/// Chain terminator flag; the low bits name the bucket.
const NULLS: u32 = CHAIN_NULLS;
const STATE_FREE: u32 = ENTRY_FREE;
const STATE_USED: u32 = ENTRY_USED;
/// Entries scanned per LRU eviction.
pub(super) const LRU_WINDOW: u32 = 128;

/// Offsets of the shared state (relative to the file start; `STATE_OFFSET` itself held the
/// element count of format version 1 files).
const FREE_HEAD: usize = STATE_OFFSET + 64;
const LRU_CLOCK: usize = STATE_OFFSET + 128;
const LRU_HAND: usize = STATE_OFFSET + 192;

/// Runs `f` on `key` in one copy per common key size (4, 8 and 16 bytes, and the general
/// one): inlined, each copy sees a constant length, so that hashing, comparing and copying
/// the key fold to that size's code instead of testing the size at each step.
#[inline(always)]
fn by_key_size<R>(key: &[u8], f: impl Fn(&[u8]) -> R) -> R {
    match key.len() {
        4 => f(&key[..4]),
        8 => f(&key[..8]),
        16 => f(&key[..16]),
        _ => f(key),
    }
}

#[derive(Debug)]
pub(super) struct HashMap {
    pub(super) base: *mut u8,
    pub(super) buckets: *mut u8,
    pub(super) entries: *mut u8,
    pub(super) nbuckets: u32,
    pub(super) stride: usize,
    pub(super) key_size: usize,
    pub(super) value_size: usize,
    pub(super) max_entries: u32,
    pub(super) seed: u64,
    /// This process's lease for the bucket locks.
    pub(super) lease: Lease,
    pub(super) lru: bool,
    /// Mapped read-write; a read-only mapping never stamps LRU entries.
    pub(super) writable: bool,
    pub(super) name: String,
}

impl HashMap {
    #[inline(always)]
    fn at<T>(&self, off: usize) -> &T {
        // SAFETY: `off` is one of the fixed state offsets inside the header page, aligned
        // for T; the mapping outlives `self`.
        unsafe { &*self.base.add(off).cast::<T>() }
    }

    #[inline(always)]
    fn bucket_head(&self, b: u32) -> &AtomicU32 {
        // SAFETY: b < nbuckets (callers mask with nbuckets - 1), the head is 4-aligned.
        unsafe {
            &*self
                .buckets
                .add(b as usize * BUCKET_SIZE + BUCKET_HEAD)
                .cast::<AtomicU32>()
        }
    }

    /// Bucket `b`'s entry count (format version 2), written only under its lock.
    #[inline(always)]
    fn bucket_count(&self, b: u32) -> &AtomicU32 {
        // SAFETY: b < nbuckets (callers mask with nbuckets - 1), the count is 4-aligned.
        unsafe {
            &*self
                .buckets
                .add(b as usize * BUCKET_SIZE + BUCKET_COUNT)
                .cast::<AtomicU32>()
        }
    }

    /// Counts an entry linked into bucket `b` (its lock held).
    #[inline(always)]
    fn counted(&self, b: u32) {
        let c = self.bucket_count(b);
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Uncounts an entry unlinked from bucket `b` (its lock held), never below zero.
    #[inline(always)]
    fn uncounted(&self, b: u32) {
        let c = self.bucket_count(b);
        c.store(
            c.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
    }

    #[inline(always)]
    fn bucket_lock(&self, b: u32) -> &MapLock {
        // SAFETY: b < nbuckets; a bucket starts with its lock (free as zeroes).
        unsafe { &*self.buckets.add(b as usize * BUCKET_SIZE).cast::<MapLock>() }
    }

    /// Entry `i` (< max_entries).
    #[inline(always)]
    fn entry(&self, i: u32) -> *mut u8 {
        // SAFETY: callers check i < max_entries.
        unsafe { self.entries.add(i as usize * self.stride) }
    }

    #[inline(always)]
    fn e_next(&self, i: u32) -> &AtomicU32 {
        // SAFETY: offset 0 of an entry, 8-aligned.
        unsafe { &*self.entry(i).add(ENTRY_NEXT).cast::<AtomicU32>() }
    }
    #[inline(always)]
    fn e_free_next(&self, i: u32) -> &AtomicU32 {
        // SAFETY: offset 4 of an entry.
        unsafe { &*self.entry(i).add(ENTRY_FREE_NEXT).cast::<AtomicU32>() }
    }
    #[inline(always)]
    fn e_hash(&self, i: u32) -> &AtomicU32 {
        // SAFETY: offset 8 of an entry.
        unsafe { &*self.entry(i).add(ENTRY_HASH).cast::<AtomicU32>() }
    }
    #[inline(always)]
    fn e_state(&self, i: u32) -> &AtomicU32 {
        // SAFETY: offset 12 of an entry.
        unsafe { &*self.entry(i).add(ENTRY_STATE).cast::<AtomicU32>() }
    }
    #[inline(always)]
    fn e_lru(&self, i: u32) -> &AtomicU64 {
        // SAFETY: offset 16 of an entry, 8-aligned.
        unsafe { &*self.entry(i).add(ENTRY_LRU).cast::<AtomicU64>() }
    }
    #[inline(always)]
    pub(super) fn e_key(&self, i: u32) -> *mut u8 {
        // SAFETY: the key follows the entry header.
        unsafe { self.entry(i).add(ENTRY_HDR) }
    }
    #[inline(always)]
    pub(super) fn e_value(&self, i: u32) -> *mut u8 {
        // SAFETY: the value lies `value_offset` bytes into the entry.
        unsafe { self.entry(i).add(self.value_offset()) }
    }

    /// Offset of the value in an entry: it follows the 8-aligned key.
    #[inline(always)]
    pub(super) fn value_offset(&self) -> usize {
        ENTRY_HDR + round8(self.key_size)
    }

    /// Whether entry `i` holds `key`. Keys of 4, 8 and 16 bytes are compared with atomic loads,
    /// others with `memcmp` (shared memory another process may be writing).
    #[inline(always)]
    fn key_eq(&self, i: u32, key: &[u8]) -> bool {
        let k = self.e_key(i);
        // `key` is `key_size` bytes long; its length (a constant where the caller is one of
        // `lookup`'s sized copies) picks the comparison.
        match key.len() {
            4 => {
                // SAFETY: the key slot is 8-aligned and 4 bytes long.
                let stored = unsafe { &*k.cast::<AtomicU32>() }.load(Ordering::Relaxed);
                let mut w = [0u8; 4];
                w.copy_from_slice(key);
                stored == u32::from_ne_bytes(w)
            }
            8 => {
                // SAFETY: the key slot is 8-aligned and 8 bytes long.
                let stored = unsafe { &*k.cast::<AtomicU64>() }.load(Ordering::Relaxed);
                let mut w = [0u8; 8];
                w.copy_from_slice(key);
                stored == u64::from_ne_bytes(w)
            }
            16 => {
                // SAFETY: the key slot is 8-aligned and 16 bytes long.
                let stored = unsafe { &*k.cast::<[AtomicU64; 2]>() }
                    .each_ref()
                    .map(|w| w.load(Ordering::Relaxed));
                let mut w = [0u8; 16];
                w.copy_from_slice(key);
                let (a, b) = w.split_at(8);
                let word = |s: &[u8]| {
                    let mut x = [0u8; 8];
                    x.copy_from_slice(s);
                    u64::from_ne_bytes(x)
                };
                stored == [word(a), word(b)]
            }
            n => {
                // SAFETY: both ranges are `n` readable bytes; memcmp tolerates concurrent
                // writers of the shared side (it only reads).
                unsafe { libc::memcmp(k.cast(), key.as_ptr().cast(), n) == 0 }
            }
        }
    }

    /// Lock-free lookup: the entry holding `key`.
    #[inline(always)]
    fn find(&self, key: &[u8], h: u32) -> Option<u32> {
        let b = h & (self.nbuckets - 1);
        'retry: for _ in 0..4 {
            let mut cur = self.bucket_head(b).load(Ordering::Acquire);
            let mut steps = 0u32;
            loop {
                if cur & NULLS != 0 {
                    if cur & !NULLS != b {
                        continue 'retry;
                    }
                    return None;
                }
                if cur >= self.max_entries || steps > self.max_entries {
                    // Corrupted link or a reader that raced too long: give up.
                    return None;
                }
                if self.e_hash(cur).load(Ordering::Relaxed) == h
                    && self.key_eq(cur, key)
                    && self.e_state(cur).load(Ordering::Acquire) == STATE_USED
                {
                    return Some(cur);
                }
                cur = self.e_next(cur).load(Ordering::Acquire);
                steps += 1;
            }
        }
        None
    }

    /// Address of the value stored under `key` (`key_size` bytes), or null.
    #[inline(always)]
    pub(super) fn lookup(&self, key: &[u8]) -> *mut u8 {
        by_key_size(
            key,
            #[inline(always)]
            |k| self.lookup_sized(k),
        )
    }

    #[inline(always)]
    fn lookup_sized(&self, key: &[u8]) -> *mut u8 {
        let h = hash_key(self.seed, key);
        match self.find(key, h) {
            Some(i) => {
                if self.lru && self.writable {
                    self.touch(i);
                }
                self.e_value(i)
            }
            None => std::ptr::null_mut(),
        }
    }

    /// Stamps entry `i` from the LRU clock and advances it (a load and a store: racing
    /// hits may share a stamp, see the module's notes).
    #[inline(always)]
    fn touch(&self, i: u32) {
        let clock = self.at::<AtomicU64>(LRU_CLOCK);
        let now = clock.load(Ordering::Relaxed);
        clock.store(now.wrapping_add(1), Ordering::Relaxed);
        self.e_lru(i).store(now, Ordering::Relaxed);
    }

    #[inline(always)]
    fn lock_raw(&self, b: u32) -> MapLockGuard<'_> {
        self.bucket_lock(b).lock(&self.lease)
    }

    /// Takes bucket `b`'s lock. When its previous owner died holding it, the map is
    /// repaired first ([`HashMap::repair`]): the dead writer may have leaked an entry.
    #[inline(always)]
    fn lock(&self, b: u32) -> Result<MapLockGuard<'_>, MapError> {
        let g = self.lock_raw(b);
        if !g.recovered() {
            return Ok(g);
        }
        drop(g);
        self.repair()?;
        Ok(self.lock_raw(b))
    }

    /// Reclaims what a writer killed mid-update left behind, with every bucket lock held
    /// (taken in bucket order; other writers hold at most one lock at a time, so this
    /// cannot deadlock). Free-list pops and pushes happen only under a bucket lock, so
    /// while all are held the chains and the free list are still:
    /// - linked entries that are not marked used (killed between link and publish, or
    ///   between unpublish and unlink) are unlinked;
    /// - the free list is rebuilt from every entry that is not linked and used, which
    ///   returns an entry popped but never linked, or unlinked but never pushed;
    /// - the element count is recomputed.
    ///
    /// A repairer killed in turn leaves every lock held by a dead owner, so the next locker repairs
    /// again (each step is idempotent). Returns how many entries were reclaimed.
    pub(super) fn repair(&self) -> Result<u32, MapError> {
        let mut guards = Vec::with_capacity(self.nbuckets as usize);
        for b in 0..self.nbuckets {
            guards.push(self.lock_raw(b));
        }
        let n = self.max_entries as usize;
        let mut linked_used = vec![false; n];
        for b in 0..self.nbuckets {
            let head = self.bucket_head(b);
            let mut prev: Option<u32> = None;
            let mut cur = head.load(Ordering::Acquire);
            let mut steps = 0;
            let mut in_bucket = 0u32;
            loop {
                if cur & NULLS != 0 && cur & !NULLS == b {
                    break;
                }
                if cur & NULLS != 0 || cur >= self.max_entries || steps > self.max_entries {
                    // A corrupted link (never written by this code): cut the chain here.
                    let end = NULLS | b;
                    match prev {
                        None => head.store(end, Ordering::Release),
                        Some(p) => self.e_next(p).store(end, Ordering::Release),
                    }
                    break;
                }
                let next = self.e_next(cur).load(Ordering::Acquire);
                let state = self.e_state(cur).load(Ordering::Acquire);
                if state == STATE_USED && !linked_used[cur as usize] {
                    linked_used[cur as usize] = true;
                    in_bucket += 1;
                    prev = Some(cur);
                } else {
                    match prev {
                        None => head.store(next, Ordering::Release),
                        Some(p) => self.e_next(p).store(next, Ordering::Release),
                    }
                }
                cur = next;
                steps += 1;
            }
            self.bucket_count(b).store(in_bucket, Ordering::Relaxed);
        }
        let free_before = self.free_len();
        let head = self.at::<AtomicU64>(FREE_HEAD);
        let tag = (head.load(Ordering::Acquire) >> 32).wrapping_add(1);
        head.store(tag << 32, Ordering::Release);
        let mut used = 0u32;
        for i in (0..self.max_entries).rev() {
            if linked_used[i as usize] {
                used += 1;
            } else {
                self.e_state(i).store(STATE_FREE, Ordering::Release);
                self.push_free(i);
            }
        }
        let reclaimed = (self.max_entries - used).saturating_sub(free_before);
        if reclaimed > 0 {
            tracing::warn!(
                map = %self.name,
                reclaimed,
                "reclaimed hash-map entries leaked by a writer that died mid-update"
            );
        }
        drop(guards);
        Ok(reclaimed)
    }

    /// Length of the free list (bounded walk; call with every bucket lock held).
    fn free_len(&self) -> u32 {
        let mut cur = self.at::<AtomicU64>(FREE_HEAD).load(Ordering::Acquire) as u32;
        let mut len = 0;
        while cur != 0 && cur <= self.max_entries && len <= self.max_entries {
            len += 1;
            cur = self.e_free_next(cur - 1).load(Ordering::Relaxed);
        }
        len
    }

    fn pop_free(&self) -> Option<u32> {
        let head = self.at::<AtomicU64>(FREE_HEAD);
        let mut cur = head.load(Ordering::Acquire);
        loop {
            let idx1 = cur as u32;
            if idx1 == 0 || idx1 > self.max_entries {
                return None;
            }
            let next = self.e_free_next(idx1 - 1).load(Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            match head.compare_exchange_weak(
                cur,
                (tag << 32) | u64::from(next),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(idx1 - 1),
                Err(v) => cur = v,
            }
        }
    }

    fn push_free(&self, i: u32) {
        let head = self.at::<AtomicU64>(FREE_HEAD);
        let mut cur = head.load(Ordering::Acquire);
        loop {
            self.e_free_next(i).store(cur as u32, Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            match head.compare_exchange_weak(
                cur,
                (tag << 32) | u64::from(i + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(v) => cur = v,
            }
        }
    }

    /// Sets up a freshly created (zeroed) map: locks, empty chains, full free list.
    ///
    /// # Safety
    /// No other process may see the file yet.
    pub(super) unsafe fn init(&self) -> Result<(), MapError> {
        // Bucket locks are free as zeroes.
        for b in 0..self.nbuckets {
            self.bucket_head(b).store(NULLS | b, Ordering::Relaxed);
        }
        for i in (0..self.max_entries).rev() {
            self.push_free(i);
        }
        Ok(())
    }

    /// Linux's `htab_map_update_elem`. With `mask`, an existing value changes only in the
    /// bits of `mask` (under the bucket lock); a new entry gets `value` as it is.
    pub(super) fn update(
        &self,
        key: &[u8],
        value: &[u8],
        mask: Option<&[u8]>,
        flags: u64,
    ) -> Result<(), MapError> {
        by_key_size(
            key,
            #[inline(always)]
            |k| self.update_sized(k, value, mask, flags),
        )
    }

    #[inline(always)]
    fn update_sized(
        &self,
        key: &[u8],
        value: &[u8],
        mask: Option<&[u8]>,
        flags: u64,
    ) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::UnknownFlags { flags });
        }
        let h = hash_key(self.seed, key);
        let b = h & (self.nbuckets - 1);
        let mut repaired = false;
        for _attempt in 0..8 {
            let fresh = {
                let _g = self.lock(b)?;
                if let Some(i) = self.find_locked(b, key, h) {
                    if flags == BPF_NOEXIST {
                        return Err(MapError::KeyExists);
                    }
                    match mask {
                        // SAFETY: the value slot has `value_size` bytes; the bucket lock
                        // serialises writers of this entry.
                        Some(m) => unsafe { super::apply_masked(self.e_value(i), value, m) },
                        None => self.write_value(i, value),
                    }
                    if self.lru {
                        self.touch(i);
                    }
                    return Ok(());
                }
                if flags == BPF_EXIST {
                    return Err(MapError::KeyNotFound);
                }
                if let Some(i) = self.pop_free() {
                    self.insert_locked(b, i, key, value, h);
                    return Ok(());
                }
                // Full: LRU maps evict (outside this bucket's lock); hash maps fail, unless
                // fewer entries are counted than exist, which means some were stranded by a
                // dead writer (or are being deleted): repair once and retry.
                if !self.lru && (repaired || self.count() >= self.max_entries) {
                    return Err(MapError::Full);
                }
                false
            };
            if !fresh {
                if self.lru {
                    self.evict_one()?;
                } else {
                    repaired = true;
                    self.repair()?;
                }
            }
        }
        Err(MapError::Full)
    }

    /// Chain walk under the bucket lock (no nulls restarts needed).
    #[inline(always)]
    fn find_locked(&self, b: u32, key: &[u8], h: u32) -> Option<u32> {
        let mut cur = self.bucket_head(b).load(Ordering::Acquire);
        let mut steps = 0;
        while cur & NULLS == 0 && cur < self.max_entries && steps <= self.max_entries {
            if self.e_hash(cur).load(Ordering::Relaxed) == h
                && self.key_eq(cur, key)
                && self.e_state(cur).load(Ordering::Relaxed) == STATE_USED
            {
                return Some(cur);
            }
            cur = self.e_next(cur).load(Ordering::Acquire);
            steps += 1;
        }
        None
    }

    fn write_value(&self, i: u32, value: &[u8]) {
        // SAFETY: the value slot has `value_size` bytes and `value` is private memory of
        // exactly that length (checked by the caller).
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), self.e_value(i), self.value_size) };
    }

    #[inline(always)]
    fn insert_locked(&self, b: u32, i: u32, key: &[u8], value: &[u8], h: u32) {
        // SAFETY: entry `i` was just popped from the free list: only we write it.
        unsafe {
            std::ptr::copy_nonoverlapping(key.as_ptr(), self.e_key(i), key.len());
        }
        self.write_value(i, value);
        self.e_hash(i).store(h, Ordering::Relaxed);
        if self.lru {
            self.touch(i);
        }
        // Link first, then mark used: a writer killed in between leaves a linked entry
        // that nobody sees (state FREE) and that `repair` reclaims.
        let head = self.bucket_head(b);
        self.e_next(i)
            .store(head.load(Ordering::Relaxed), Ordering::Release);
        head.store(i, Ordering::Release);
        self.e_state(i).store(STATE_USED, Ordering::Release);
        self.counted(b);
    }

    /// Unlinks entry `target` from bucket `b` (lock held); false when it is not there.
    fn unlink_locked(&self, b: u32, target: u32) -> bool {
        let head = self.bucket_head(b);
        let mut prev: Option<u32> = None;
        let mut cur = head.load(Ordering::Acquire);
        let mut steps = 0;
        while cur & NULLS == 0 && cur < self.max_entries && steps <= self.max_entries {
            let next = self.e_next(cur).load(Ordering::Acquire);
            if cur == target {
                // Mark free first, then uncount and unlink: a writer killed in between
                // leaves a linked entry that nobody sees and that `repair` reclaims. The
                // count drops before the entry returns to the free list, so an entry
                // stranded between unlink and push shows as a free list emptier than the
                // count says (which makes a failing insert repair the map).
                self.e_state(cur).store(STATE_FREE, Ordering::Release);
                self.uncounted(b);
                match prev {
                    None => head.store(next, Ordering::Release),
                    Some(p) => self.e_next(p).store(next, Ordering::Release),
                }
                self.push_free(cur);
                return true;
            }
            prev = Some(cur);
            cur = next;
            steps += 1;
        }
        false
    }

    /// Linux's `htab_map_delete_elem`.
    pub(super) fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        by_key_size(
            key,
            #[inline(always)]
            |k| self.delete_sized(k),
        )
    }

    #[inline(always)]
    fn delete_sized(&self, key: &[u8]) -> Result<(), MapError> {
        let h = hash_key(self.seed, key);
        let b = h & (self.nbuckets - 1);
        let _g = self.lock(b)?;
        match self.find_locked(b, key, h) {
            Some(i) if self.unlink_locked(b, i) => Ok(()),
            _ => Err(MapError::KeyNotFound),
        }
    }

    /// Evicts the least recently used entry of a window (LRU maps).
    fn evict_one(&self) -> Result<(), MapError> {
        let window = LRU_WINDOW.min(self.max_entries);
        for _ in 0..4 {
            let start = self
                .at::<AtomicU32>(LRU_HAND)
                .fetch_add(window, Ordering::Relaxed)
                % self.max_entries;
            let mut victim: Option<(u32, u64)> = None;
            for k in 0..window {
                let i = (start + k) % self.max_entries;
                if self.e_state(i).load(Ordering::Acquire) != STATE_USED {
                    continue;
                }
                let stamp = self.e_lru(i).load(Ordering::Relaxed);
                if victim.is_none_or(|(_, s)| stamp < s) {
                    victim = Some((i, stamp));
                }
            }
            let Some((i, stamp)) = victim else {
                // Nothing used in the window: entries are on their way back to the free
                // list, or were leaked by a dead writer; the caller retries.
                continue;
            };
            let b = self.e_hash(i).load(Ordering::Relaxed) & (self.nbuckets - 1);
            let _g = self.lock(b)?;
            if self.e_state(i).load(Ordering::Acquire) == STATE_USED
                && self.e_lru(i).load(Ordering::Relaxed) == stamp
                && self.unlink_locked(b, i)
            {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Number of entries (approximate while writers run). Format version 2 adds up the
    /// buckets' counts: one pass over the bucket array, for listings and a full map's
    /// insert, never on a program's path.
    pub(super) fn count(&self) -> u32 {
        (0..self.nbuckets)
            .map(|b| self.bucket_count(b).load(Ordering::Relaxed))
            .fold(0u32, u32::saturating_add)
            .min(self.max_entries)
    }

    /// Indices of used entries, in storage order.
    pub(super) fn used(&self) -> Vec<u32> {
        (0..self.max_entries)
            .filter(|&i| self.e_state(i).load(Ordering::Acquire) == STATE_USED)
            .collect()
    }

    /// Removes every entry, bucket by bucket.
    pub(super) fn clear(&self) -> Result<(), MapError> {
        for b in 0..self.nbuckets {
            let _g = self.lock(b)?;
            loop {
                let head = self.bucket_head(b).load(Ordering::Acquire);
                if head & NULLS != 0 || head >= self.max_entries || !self.unlink_locked(b, head) {
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
