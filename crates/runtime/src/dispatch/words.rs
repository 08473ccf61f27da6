//! Running a chain on a ctx held in 64-bit words, without allocating: the shim's path
//! ([`Chain::entry_words`], [`Chain::exit_words`]), what each reports to a [`RunRecorder`],
//! and the lean loop its common case takes.

use crate::attach::abi::{self, FLAG_OUT_VALID};
use crate::attach::Phase;

use super::attached::{AttachedProgram, Stack, WordsError};
use super::chain::Chain;
use super::summary::ChainSummary;

/// What the entry programs decided, from [`Chain::entry_words`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntryVerdict {
    /// 0: the call proceeds; otherwise the `CUresult` returned instead of calling.
    pub verdict: u32,
    /// Index in [`Chain::entry`] of the program whose verdict it is.
    pub denied_by: Option<usize>,
    /// Programs that failed at run time (counted as verdict 0).
    pub faults: u32,
}

/// What a process returns from a call it refuses because it cannot enforce the policy
/// (`GPUBPF_FAIL=closed`): `CUDA_ERROR_NOT_PERMITTED`.
pub const FAIL_CLOSED_RESULT: u32 = 800;

/// Watches each program run of a chain: the shim's per-program statistics.
pub trait RunRecorder {
    /// Whether every run must be reported ([`RunRecorder::start`] and
    /// [`RunRecorder::finish`] for each program). When false, a chain may skip reporting the
    /// runs of native programs that succeeded without a decision (those that failed are
    /// always reported, with `start: None`): what lets the shim's common path run a chain
    /// without per-run bookkeeping.
    #[inline(always)]
    fn counts_runs(&self) -> bool {
        true
    }
    /// Called before a program runs; returns a start time when run time is collected.
    fn start(&mut self) -> Option<u64>;
    /// Called after the program in statistics slot `slot` ran: `start` is what
    /// [`RunRecorder::start`] returned, `fault` whether the run failed.
    fn finish(&mut self, slot: Option<u32>, start: Option<u64>, fault: bool);
    /// Called for each decision a program made: a non-zero entry verdict, or an exit
    /// program's change of `hdr.result` (`verdict` is then the new result and `previous`
    /// the one it replaced). `ctx` is the call's ctx (header: api id, pid, tid); `shadow`
    /// says the decision was not applied. Only called on that (refusal) path.
    #[inline(always)]
    fn decision(&mut self, ctx: &[u64], prog: &AttachedProgram, d: Decision) {
        let _ = (ctx, prog, d);
    }
}

/// One decision of one program, for [`RunRecorder::decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The entry verdict, or the exit program's new result.
    pub verdict: u32,
    /// For an exit override: the result it replaced.
    pub previous: Option<u32>,
    /// Made by a shadow program: not applied.
    pub shadow: bool,
}

/// A [`RunRecorder`] that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRecorder;

impl RunRecorder for NoRecorder {
    #[inline(always)]
    fn counts_runs(&self) -> bool {
        false
    }
    #[inline(always)]
    fn start(&mut self) -> Option<u64> {
        None
    }
    #[inline(always)]
    fn finish(&mut self, _: Option<u32>, _: Option<u64>, _: bool) {}
}

/// Word index of `hdr.phase` (high half) / `hdr.api_id` (low half).
const W_PHASE: usize = abi::W_API_ID_PHASE;
/// Word index of `hdr.flags` (high half) / `hdr.device` (low half).
const W_FLAGS: usize = abi::W_DEVICE_FLAGS;
/// Word index of `hdr.result` (low half) / `hdr.variant` (high half).
const W_RESULT: usize = abi::W_RESULT_VARIANT;

/// Words of a ctx a shadow program's copy holds on the stack; longer ctxs are copied to
/// the heap.
const SHADOW_COPY_WORDS: usize = 64;

/// A shadow entry program (`load --shadow`): runs on a copy of the ctx; its verdict is
/// reported, never returned, and a fault never refuses the call.
#[cold]
#[inline(never)]
fn entry_shadow(
    p: &AttachedProgram,
    ctx: &[u64],
    stack: &mut Stack,
    rec: &mut impl RunRecorder,
    t: Option<u64>,
    out: &mut EntryVerdict,
) {
    let (r, _) = run_on_copy(p, ctx, stack);
    rec.finish(p.stats_slot, t, r.is_err());
    match r {
        Ok(0) => {}
        Ok(v) => rec.decision(
            ctx,
            p,
            Decision {
                verdict: u32::try_from(v).unwrap_or(u32::MAX),
                previous: None,
                shadow: true,
            },
        ),
        Err(_) => out.faults = out.faults.saturating_add(1),
    }
}

/// Runs `p` on a copy of `ctx` (a shadow program: its writes are discarded); returns its
/// return value and the copy's `hdr.result`.
fn run_on_copy(
    p: &AttachedProgram,
    ctx: &[u64],
    stack: &mut Stack,
) -> (Result<u64, WordsError>, u32) {
    let mut buf = [0u64; SHADOW_COPY_WORDS];
    let mut heap;
    let copy: &mut [u64] = if let Some(b) = buf.get_mut(..ctx.len()) {
        b
    } else {
        heap = vec![0u64; ctx.len()];
        &mut heap
    };
    copy.copy_from_slice(ctx);
    let r = p.run_words(copy, stack);
    let result = result_in(copy, 0);
    (r, result)
}

/// `hdr.result` of a word ctx, `or` when the ctx is too short to hold it. (Inlined into
/// the shim, which instantiates the generic chain runners: a private function of this
/// crate would otherwise be a call into another part of the library on every call.)
#[inline(always)]
fn result_in(ctx: &[u64], or: u32) -> u32 {
    ctx.get(W_RESULT).map_or(or, |w| *w as u32)
}

fn set_high(w: &mut u64, v: u32) {
    *w = (*w & 0xffff_ffff) | (u64::from(v) << 32);
}

fn set_low(w: &mut u64, v: u32) {
    *w = (*w & !0xffff_ffff) | u64::from(v);
}

/// Sets the header of an exit run: `hdr.phase` exit, `hdr.result` `result`,
/// `GPUBPF_CTX_F_OUT_VALID` as `out_valid` says.
#[inline(always)]
fn set_exit_header(ctx: &mut [u64], result: u32, out_valid: bool) {
    if let Some(w) = ctx.get_mut(W_PHASE) {
        set_high(w, Phase::Exit.ctx_value());
    }
    if let Some(w) = ctx.get_mut(W_FLAGS) {
        let flags = (*w >> 32) as u32;
        let flags = if out_valid {
            flags | FLAG_OUT_VALID
        } else {
            flags & !FLAG_OUT_VALID
        };
        set_high(w, flags);
    }
    if let Some(w) = ctx.get_mut(W_RESULT) {
        set_low(w, result);
    }
}

/// Header words of a word ctx (little-endian hosts: the field at byte offset `8k + 4` is
/// the high half of word `k`).
const _: () = assert!(cfg!(target_endian = "little"));

impl Chain {
    /// Entry programs on a ctx held in words, without allocating: sets `hdr.phase` to entry
    /// and runs the programs in priority order until one returns a non-zero verdict. A
    /// program that fails counts as verdict 0 (fail open) and is counted in `faults`;
    /// with [`Chain::fail_closed`] it refuses the call with [`FAIL_CLOSED_RESULT`] instead.
    /// A [`Chain::broken`] chain refuses every call with that result without running.
    ///
    /// While `rec` does not count every run ([`RunRecorder::counts_runs`]), native programs
    /// that let the call through run in a loop that keeps nothing else (shadow programs,
    /// the interpreter, refusals and faults continue out of line, from the program at hand,
    /// with the same effects): a few contiguous cache lines of code (docs/shim.md, "Cache
    /// lines of a policed call"). Not inlined: the shim inlines
    /// [`Chain::entry_words_summarized`] whole, and this is its general case.
    #[inline(never)]
    pub fn entry_words(
        &self,
        ctx: &mut [u64],
        stack: &mut Stack,
        rec: &mut impl RunRecorder,
    ) -> EntryVerdict {
        if self.broken {
            return EntryVerdict {
                verdict: FAIL_CLOSED_RESULT,
                denied_by: None,
                faults: 0,
            };
        }
        if let Some(w) = ctx.get_mut(W_PHASE) {
            set_high(w, Phase::Entry.ctx_value());
        }
        let mut i = 0;
        if !rec.counts_runs() {
            while let Some(p) = self.entry.get(i) {
                if p.shadow {
                    break;
                }
                let Some((value, status)) = p.native_words(ctx, stack) else {
                    break;
                };
                if status != 0 || value != 0 {
                    return self.entry_settle(i, value, status, ctx, stack, rec);
                }
                i += 1;
            }
        }
        let mut out = EntryVerdict::default();
        if i < self.entry.len() {
            self.entry_from(i, ctx, stack, rec, &mut out);
        }
        out
    }

    /// [`Chain::entry_words`], told by `summary` what the chain holds: a chain of one lean
    /// entry program runs it from the summary, without reading the chain's or the
    /// program's own lines (module `summary`); any other chain, a recorder that counts
    /// runs, or a refusal or fault of that program go the way `entry_words` goes.
    ///
    /// # Safety
    /// `summary` is [`Chain::summary`] of `self`.
    #[inline(always)]
    pub unsafe fn entry_words_summarized(
        &self,
        summary: &ChainSummary,
        ctx: &mut [u64],
        stack: &mut Stack,
        rec: &mut impl RunRecorder,
    ) -> EntryVerdict {
        if let Some(p) = summary.entry.filter(|_| !rec.counts_runs()) {
            if let Some(w) = ctx.get_mut(W_PHASE) {
                set_high(w, Phase::Entry.ctx_value());
            }
            // SAFETY: the summary's program is `self.entry[0]` (the caller's contract),
            // alive as long as `self`.
            if let Some((value, status)) = unsafe { p.run_words(ctx, stack) } {
                if status != 0 || value != 0 {
                    return self.entry_settle(0, value, status, ctx, stack, rec);
                }
                return EntryVerdict::default();
            }
        }
        self.entry_words(ctx, stack, rec)
    }

    /// [`Chain::exit_words`] with a [`ChainSummary`], as [`Chain::entry_words_summarized`]
    /// is for the entry programs.
    ///
    /// # Safety
    /// `summary` is [`Chain::summary`] of `self`.
    #[inline(always)]
    pub unsafe fn exit_words_summarized(
        &self,
        summary: &ChainSummary,
        ctx: &mut [u64],
        stack: &mut Stack,
        result: u32,
        out_valid: bool,
        rec: &mut impl RunRecorder,
    ) -> (u32, u32) {
        if let Some(p) = summary.exit.filter(|_| !rec.counts_runs()) {
            set_exit_header(ctx, result, out_valid);
            // SAFETY: the summary's program is `self.exit[0]` (the caller's contract),
            // alive as long as `self`.
            if let Some((_, status)) = unsafe { p.run_words(ctx, stack) } {
                let after = result_in(ctx, result);
                if status != 0 || after != result {
                    return self.exit_settle(0, status, result, after, ctx, stack, result, rec);
                }
                return (result, 0);
            }
        }
        self.exit_words(ctx, stack, result, out_valid, rec)
    }

    /// The entry programs from index `start` on, each reported to `rec`.
    #[inline(never)]
    fn entry_from(
        &self,
        start: usize,
        ctx: &mut [u64],
        stack: &mut Stack,
        rec: &mut impl RunRecorder,
        out: &mut EntryVerdict,
    ) {
        for (i, p) in self.entry.iter().enumerate().skip(start) {
            let t = rec.start();
            if p.shadow {
                entry_shadow(p, ctx, stack, rec, t, out);
                continue;
            }
            let r = p.run_words(ctx, stack);
            rec.finish(p.stats_slot, t, r.is_err());
            if !matches!(r, Ok(0)) && self.entry_stops(i, p, r, ctx, rec, out) {
                break;
            }
        }
    }

    /// Native entry program `i` returned `value` non-zero or failed (`status`): reports the
    /// run, records the refusal or the fault and runs the programs after it unless the
    /// chain stops there.
    #[cold]
    #[inline(never)]
    fn entry_settle(
        &self,
        i: usize,
        value: u64,
        status: u64,
        ctx: &mut [u64],
        stack: &mut Stack,
        rec: &mut impl RunRecorder,
    ) -> EntryVerdict {
        let mut out = EntryVerdict::default();
        let Some(p) = self.entry.get(i) else {
            return out;
        };
        let r = p.native_result(value, status);
        rec.finish(p.stats_slot, None, r.is_err());
        if !self.entry_stops(i, p, r, ctx, rec, &mut out) {
            self.entry_from(i + 1, ctx, stack, rec, &mut out);
        }
        out
    }

    /// An entry program returned non-zero or failed: records the refusal or the fault;
    /// whether the chain stops here.
    #[cold]
    #[inline(never)]
    fn entry_stops(
        &self,
        i: usize,
        p: &AttachedProgram,
        r: Result<u64, WordsError>,
        ctx: &[u64],
        rec: &mut impl RunRecorder,
        out: &mut EntryVerdict,
    ) -> bool {
        match r {
            Ok(0) => false,
            Ok(v) => {
                // The verifier bounds entry verdicts to small CUresult values.
                out.verdict = u32::try_from(v).unwrap_or(u32::MAX);
                out.denied_by = Some(i);
                rec.decision(
                    ctx,
                    p,
                    Decision {
                        verdict: out.verdict,
                        previous: None,
                        shadow: false,
                    },
                );
                true
            }
            Err(_) => {
                out.faults = out.faults.saturating_add(1);
                if self.fail_closed {
                    out.verdict = FAIL_CLOSED_RESULT;
                    out.denied_by = Some(i);
                    return true;
                }
                false
            }
        }
    }

    /// Exit programs on a ctx held in words, without allocating: sets `hdr.phase` to exit,
    /// `hdr.result` to `result` and `GPUBPF_CTX_F_OUT_VALID` to `out_valid`, runs every exit
    /// program, and returns the final result (which a program may have overridden) and the
    /// number of programs that failed. A failing exit program never changes the result,
    /// even when failing closed: the call has happened, and refusing it now would leak
    /// what it created. Not inlined, as [`Chain::entry_words`].
    #[inline(never)]
    pub fn exit_words(
        &self,
        ctx: &mut [u64],
        stack: &mut Stack,
        result: u32,
        out_valid: bool,
        rec: &mut impl RunRecorder,
    ) -> (u32, u32) {
        set_exit_header(ctx, result, out_valid);
        let mut i = 0;
        if !rec.counts_runs() {
            // As in `entry_words`: native programs that leave the result as it is, in a
            // loop that keeps nothing else; anything else continues out of line.
            while let Some(p) = self.exit.get(i) {
                if p.shadow {
                    break;
                }
                let before = result_in(ctx, result);
                let Some((_, status)) = p.native_words(ctx, stack) else {
                    break;
                };
                let after = result_in(ctx, before);
                if status != 0 || after != before {
                    return self.exit_settle(i, status, before, after, ctx, stack, result, rec);
                }
                i += 1;
            }
        }
        let faults = if i < self.exit.len() {
            self.exit_from(i, ctx, stack, result, rec)
        } else {
            0
        };
        (result_in(ctx, result), faults)
    }

    /// The exit programs from index `start` on, each reported to `rec`; the number that
    /// failed.
    #[inline(never)]
    fn exit_from(
        &self,
        start: usize,
        ctx: &mut [u64],
        stack: &mut Stack,
        result: u32,
        rec: &mut impl RunRecorder,
    ) -> u32 {
        let mut faults = 0u32;
        for p in self.exit.iter().skip(start) {
            let before = result_in(ctx, result);
            let t = rec.start();
            let (r, after) = if p.shadow {
                // Shadow: runs on a copy, so neither its result override nor its writes to
                // writable arguments and out-values are applied.
                run_on_copy(p, ctx, stack)
            } else {
                let r = p.run_words(ctx, stack);
                (r, result_in(ctx, before))
            };
            rec.finish(p.stats_slot, t, r.is_err());
            faults = faults.saturating_add(exit_outcome(p, r.is_err(), before, after, ctx, rec));
        }
        faults
    }

    /// Native exit program `i` failed (`status`) or changed the result from `before` to
    /// `after`: reports it and runs the programs after it.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exit_settle(
        &self,
        i: usize,
        status: u64,
        before: u32,
        after: u32,
        ctx: &mut [u64],
        stack: &mut Stack,
        result: u32,
        rec: &mut impl RunRecorder,
    ) -> (u32, u32) {
        let mut faults = 0;
        if let Some(p) = self.exit.get(i) {
            rec.finish(p.stats_slot, None, status != 0);
            faults = exit_outcome(p, status != 0, before, after, ctx, rec);
        }
        let faults = faults.saturating_add(self.exit_from(i + 1, ctx, stack, result, rec));
        (result_in(ctx, result), faults)
    }
}

/// What one exit program's run means: 1 when it failed, else 0, reporting a change of the
/// result (`before` to `after`) as a decision.
fn exit_outcome(
    p: &AttachedProgram,
    failed: bool,
    before: u32,
    after: u32,
    ctx: &[u64],
    rec: &mut impl RunRecorder,
) -> u32 {
    if failed {
        return 1;
    }
    if after != before {
        rec.decision(
            ctx,
            p,
            Decision {
                verdict: after,
                previous: Some(before),
                shadow: p.shadow,
            },
        );
    }
    0
}
