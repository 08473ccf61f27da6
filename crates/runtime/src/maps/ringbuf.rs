//! Ring buffers: variable-size records, many producers in many processes, one consumer.
//!
//! The layout follows Linux's `BPF_MAP_TYPE_RINGBUF`: a data area of `size` bytes (a power
//! of two, mapped twice in a row so that a record crossing the end is contiguous), a
//! producer and a consumer position that only grow, and an 8-byte header before every
//! record: the length with a BUSY bit (reserved, not yet submitted) and a DISCARD bit, and
//! the producer's pid. Producers reserve under a robust lock: they write the BUSY header
//! first and then advance the producer position, so a producer killed in the middle leaves
//! either nothing or a BUSY record; the consumer skips BUSY records whose producer is dead.
//! A full buffer never blocks: the record is dropped and the drop counter incremented.

use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::STATE_OFFSET;
use super::lease::Lease;
use super::lock::{MapLock, MapLockGuard};
use super::{round8, MapError};

const BUSY: u64 = 1 << 31;
const DISCARD: u64 = 1 << 30;
const LEN_MASK: u64 = (1 << 30) - 1;
/// Size of a record header.
pub const RECORD_HDR: usize = 8;

const PRODUCER_LOCK: usize = STATE_OFFSET;
const PRODUCER_POS: usize = STATE_OFFSET + 128;
const CONSUMER_POS: usize = STATE_OFFSET + 256;
const DROPPED: usize = STATE_OFFSET + 384;
const RESERVED: usize = STATE_OFFSET + 448;
const CONSUMER_LOCK: usize = STATE_OFFSET + 512;

/// Counters of a ring buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RingBufStats {
    /// Data size in bytes.
    pub size: u64,
    /// Bytes ever reserved (producer position).
    pub producer_pos: u64,
    /// Bytes ever consumed (consumer position).
    pub consumer_pos: u64,
    /// Bytes waiting for the consumer.
    pub pending: u64,
    /// Records dropped because the buffer was full.
    pub dropped: u64,
    /// Records ever reserved (submitted, discarded or in flight).
    pub reserved: u64,
}

/// Why [`RingBuf::reserve_raw`] reserved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The record is larger than a record of this ring may be.
    TooLarge,
    /// The ring is full (the drop is counted).
    Full,
}

impl Refusal {
    /// The (positive) errno a program sees: [`MapError::errno`] of the error
    /// [`RingBuf::reserve`] makes of it, built without its text (an empty name does not
    /// allocate).
    pub(super) fn errno(self) -> i32 {
        match self {
            Refusal::TooLarge => MapError::RecordTooLarge { len: 0, size: 0 },
            Refusal::Full => MapError::RingFull,
        }
        .errno()
    }
}

#[derive(Debug)]
pub(super) struct RingBuf {
    pub(super) base: *mut u8,
    pub(super) data: *mut u8,
    pub(super) size: u64,
    pub(super) name: String,
    /// This process's lease for the producer and consumer locks.
    pub(super) lease: Lease,
    /// Whether this process already said that the buffer is full (once per mapping).
    pub(super) warned_full: std::sync::atomic::AtomicBool,
}

impl RingBuf {
    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: fixed, 8-aligned offsets inside the header page.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// Takes the lock at `off` (`PRODUCER_LOCK` or `CONSUMER_LOCK`).
    #[inline(always)]
    fn lock_at(&self, off: usize) -> MapLockGuard<'_> {
        // SAFETY: lock slots at fixed, 4-aligned offsets of the header page (free as zeroes).
        let lock = unsafe { &*self.base.add(off).cast::<MapLock>() };
        lock.lock(&self.lease)
    }

    /// Header word of the record at position `pos`.
    fn header(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: `pos & (size-1)` is inside the data area and 8-aligned (records are
        // multiples of 8); the mirror mapping covers any record crossing the end.
        unsafe {
            &*self
                .data
                .add((pos & (self.size - 1)) as usize)
                .cast::<AtomicU64>()
        }
    }

    /// Reserves `len` bytes: [`MapError::RingFull`] when the buffer is full (counted as a
    /// drop), [`MapError::RecordTooLarge`] when `len` is larger than a record may be.
    pub(super) fn reserve(&self, len: u64) -> Result<*mut u8, MapError> {
        self.reserve_raw(len).map_err(|refusal| match refusal {
            Refusal::TooLarge => MapError::RecordTooLarge {
                len,
                size: self.size,
            },
            Refusal::Full => MapError::RingFull,
        })
    }

    /// [`RingBuf::reserve`] for programs' helpers: a refusal is a plain value, so that a
    /// policy that keeps meeting a full ring (one without a consumer) neither builds nor
    /// drops an error on each call.
    #[inline]
    pub(super) fn reserve_raw(&self, len: u64) -> Result<*mut u8, Refusal> {
        if len > LEN_MASK || len + RECORD_HDR as u64 > self.size {
            return Err(Refusal::TooLarge);
        }
        let total = round8(len as usize + RECORD_HDR) as u64;
        // A ring without a consumer stays full: its drops are decided without the lock, at
        // the cost of two loads (the producer position is read before the consumer's, and
        // both only grow, so a ring full on this reading was full when the second was read).
        // Whether a record fits is decided again under the lock.
        if self.full_for(total) {
            self.drop_record();
            return Err(Refusal::Full);
        }
        let _g = self.lock_at(PRODUCER_LOCK);
        if self.full_for(total) {
            self.drop_record();
            return Err(Refusal::Full);
        }
        let p = self.word(PRODUCER_POS).load(Ordering::Relaxed);
        let pid = u64::from(crate::helpers::current_pid());
        self.header(p)
            .store(len | BUSY | (pid << 32), Ordering::Release);
        self.word(PRODUCER_POS)
            .store(p.wrapping_add(total), Ordering::Release);
        // Only producers change the count, each under the producer lock held here: a load
        // and a store, not a locked read-modify-write.
        let reserved = self.word(RESERVED);
        reserved.store(
            reserved.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        // SAFETY: the record body follows its header inside the (mirrored) data area.
        Ok(unsafe { (self.header(p) as *const AtomicU64 as *mut u8).add(RECORD_HDR) })
    }

    /// Whether a record of `total` bytes (header included) does not fit now.
    #[inline]
    fn full_for(&self, total: u64) -> bool {
        let p = self.word(PRODUCER_POS).load(Ordering::Acquire);
        let c = self.word(CONSUMER_POS).load(Ordering::Acquire);
        p.wrapping_sub(c).saturating_add(total) > self.size
    }

    /// Counts a record dropped because the ring is full (and says so once: the flag is
    /// read before it is swapped, so that later drops cost no second read-modify-write).
    #[cold]
    fn drop_record(&self) {
        self.word(DROPPED).fetch_add(1, Ordering::Relaxed);
        if !self.warned_full.load(Ordering::Relaxed)
            && !self.warned_full.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                map = %self.name,
                "ring buffer is full: records are dropped and counted (`gpubpf maps show \
                 {0}`) until a consumer catches up (`gpubpf maps consume {0}`); said once",
                self.name
            );
        }
    }

    /// Publishes (or discards) a record returned by [`RingBuf::reserve`].
    ///
    /// # Safety
    /// `sample` must come from `reserve` on a ring buffer that is still mapped and must not
    /// have been submitted or discarded yet.
    pub(super) unsafe fn commit(sample: *mut u8, discard: bool) {
        // SAFETY: per contract the header lies 8 bytes before the sample, 8-aligned.
        let hdr = unsafe { &*sample.sub(RECORD_HDR).cast::<AtomicU64>() };
        // Between a reservation and its commit only the reserving producer writes this
        // header: the consumer only reads headers (it stops at a BUSY record, or skips it
        // once its producer is dead, which then commits nothing), and no other producer
        // reaches this position before the consumer has passed it. So the release store
        // publishes the record without a locked read-modify-write.
        let mut new = hdr.load(Ordering::Relaxed) & !BUSY;
        if discard {
            new |= DISCARD;
        }
        hdr.store(new, Ordering::Release);
    }

    /// Copies `data` into a new record.
    pub(super) fn output(&self, data: &[u8]) -> Result<(), MapError> {
        let p = self.reserve(data.len() as u64)?;
        // SAFETY: `p` was just reserved for `data.len()` bytes.
        unsafe { Self::fill(p, data) };
        Ok(())
    }

    /// [`RingBuf::output`] for programs' helpers (see [`RingBuf::reserve_raw`]).
    pub(super) fn output_raw(&self, data: &[u8]) -> Result<(), Refusal> {
        let p = self.reserve_raw(data.len() as u64)?;
        // SAFETY: `p` was just reserved for `data.len()` bytes.
        unsafe { Self::fill(p, data) };
        Ok(())
    }

    /// Copies `data` into the record `p` and submits it.
    ///
    /// # Safety
    /// `p` comes from a reservation of `data.len()` bytes not committed yet.
    unsafe fn fill(p: *mut u8, data: &[u8]) {
        // SAFETY: per contract `p` has `data.len()` reserved bytes that nobody else writes.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
            Self::commit(p, false);
        }
    }

    /// Consumes every submitted record in order, calling `f` on each; stops at the first
    /// record still being written by a live producer. Returns the number consumed.
    pub(super) fn consume(&self, mut f: impl FnMut(&[u8])) -> Result<usize, MapError> {
        let _g = self.lock_at(CONSUMER_LOCK);
        let mut c = self.word(CONSUMER_POS).load(Ordering::Relaxed);
        let p = self.word(PRODUCER_POS).load(Ordering::Acquire);
        if p < c || p - c > self.size {
            return Err(MapError::Corrupt {
                path: self.name.clone().into(),
                reason: format!(
                    "ring positions: producer {p}, consumer {c}, size {}",
                    self.size
                ),
            });
        }
        let mut n = 0;
        while c < p {
            let h = self.header(c).load(Ordering::Acquire);
            let len = h & LEN_MASK;
            let total = round8(len as usize + RECORD_HDR) as u64;
            if total > p - c {
                return Err(MapError::Corrupt {
                    path: self.name.clone().into(),
                    reason: format!("ring record at {c} claims {len} bytes"),
                });
            }
            if h & BUSY != 0 {
                let pid = (h >> 32) as i32;
                if pid_alive(pid) {
                    break;
                }
                tracing::warn!(pid, "skipping a ring-buffer record of a dead producer");
            } else if h & DISCARD == 0 {
                // SAFETY: the record body (`len` bytes) lies in the mirrored data area and
                // its producer has finished writing it (BUSY clear, acquire load).
                let body = unsafe {
                    std::slice::from_raw_parts(
                        (self.header(c) as *const AtomicU64 as *const u8).add(RECORD_HDR),
                        len as usize,
                    )
                };
                f(body);
                n += 1;
            }
            c += total;
            self.word(CONSUMER_POS).store(c, Ordering::Release);
        }
        Ok(n)
    }

    pub(super) fn stats(&self) -> RingBufStats {
        let producer_pos = self.word(PRODUCER_POS).load(Ordering::Acquire);
        let consumer_pos = self.word(CONSUMER_POS).load(Ordering::Acquire);
        RingBufStats {
            size: self.size,
            producer_pos,
            consumer_pos,
            pending: producer_pos.saturating_sub(consumer_pos),
            dropped: self.word(DROPPED).load(Ordering::Relaxed),
            reserved: self.word(RESERVED).load(Ordering::Relaxed),
        }
    }

    /// Drops every pending record (consumer side).
    pub(super) fn clear(&self) -> Result<(), MapError> {
        self.consume(|_| {}).map(|_| ())
    }
}

/// Whether a process with this pid exists.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
