//! The exploration engine: depth-first over all paths, with stored states for pruning,
//! exact-repeat detection of infinite loops, and the processed-instruction budget.
//!
//! Every path is a `Path`: a state, a program point, and the last checkpoint it passed.
//! Checkpoints form a tree (each points to the checkpoint its path passed before); a
//! checkpoint is *in progress* while some path below it is still being explored. In a
//! depth-first search every in-progress checkpoint is an ancestor of the current path, so:
//! - reaching a state exactly equal to an in-progress checkpoint at the same point means the
//!   program can loop forever: rejected;
//! - reaching a state covered by a *finished* checkpoint means everything that can happen
//!   from here was already verified: the path is pruned.
//!
//! `bpf_loop` is modelled with a pseudo point after the call ([`Point::LoopIter`]): from it,
//! either the loop ends, or the callback runs once more and comes back. There, a state
//! covered by an in-progress checkpoint of the same `bpf_loop` invocation is a fixpoint and
//! pruned (the helper itself bounds the iterations). From round [`WIDEN_AFTER`] of an
//! invocation on, scalars that still change between rounds are widened ([`crate::widen`]) so
//! that such a fixpoint is reached.
//!
//! Cost stays linear in the instructions processed: in-progress checkpoints are found by
//! exact-state hash; at most [`MAX_STATES_PER_POINT`] finished states are kept per point
//! (states that keep missing are evicted, as in the kernel, and a full point evicts the one
//! with the worst hit/miss record); a `bpf_loop` round is compared only with the last
//! [`MAX_ROUNDS_COMPARED`] rounds of its own invocation.

use rustc_hash::FxHashMap as HashMap;
use std::time::Instant;

use gpubpf_isa::{CallTarget, Insn, Instruction};

use crate::cfg::{self, Program};
use crate::equiv::{state_hash, states_equal};
use crate::error::{build_listing, line_for, ErrorKind, RegNote, VerifierError};
use crate::state::{Frame, FrameKind, Reg, RegType, State, MAX_FRAMES};
use crate::widen::{widen, WIDEN_AFTER};
use crate::{LineInfo, LogLevel, MapInfo, VerifierConfig, VerifyInput, VerifyStats};

/// Most paths queued for exploration at once (the kernel's `BPF_COMPLEXITY_LIMIT_JMP_SEQ`).
pub const MAX_PENDING: usize = 8192;

/// Most finished states kept per program point for pruning. When a point is full, the state
/// with the worst hit/miss record is evicted, so a visit compares against a bounded list.
pub const MAX_STATES_PER_POINT: usize = 64;

/// Earlier rounds of a `bpf_loop` invocation an iteration state is compared with.
pub const MAX_ROUNDS_COMPARED: usize = 8;

/// A program point: an instruction, or the iteration point of a `bpf_loop` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    Insn,
    LoopIter,
}

/// Why an instruction was rejected (the engine adds pc, register states and hint).
#[derive(Debug)]
pub struct Reject {
    pub kind: ErrorKind,
    pub regs: Vec<u8>,
}

/// Shorthand for building a [`Reject`].
pub fn rej(kind: ErrorKind, regs: &[u8]) -> Reject {
    Reject {
        kind,
        regs: regs.to_vec(),
    }
}

pub type R<T> = Result<T, Reject>;

/// What executing one instruction led to.
#[derive(Debug)]
pub enum Step {
    /// Continue at this slot.
    Next(usize),
    /// Continue at the `bpf_loop` iteration point of this call.
    LoopIter(usize),
    /// Two successors: the current path continues with the first, the second is queued.
    Fork((State, usize, Point), (State, usize, Point)),
    /// Only this successor (the current state moves there).
    Goto((State, usize, Point)),
    /// The path ended successfully (program exit).
    Done,
    /// The path is infeasible (contradictory branch).
    Dead,
}

/// Shared context of one verification.
#[derive(Debug)]
pub struct Env<'a> {
    pub prog: &'a Program,
    pub insns: &'a [Insn],
    pub maps: &'a [MapInfo],
    pub ctx: &'a crate::ctx::ProgramContext,
    next_id: u32,
    /// Deepest stack byte used, per subprogram.
    pub stack_depth: Vec<u32>,
    /// Offsets of the ctx fields some path reads.
    pub ctx_read: std::cell::RefCell<std::collections::BTreeSet<u32>>,
}

impl Env<'_> {
    /// A fresh id for pointers, scalars, references and loop invocations.
    pub fn new_id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.next_id
    }

    /// Records that frame `frame` of `st` touched the stack down to `off`.
    pub fn note_stack(&mut self, st: &State, frame: usize, off: i64) {
        if let Some(f) = st.frames.get(frame) {
            let sp = self.prog.subprog_of.get(f.subprog).copied().unwrap_or(0);
            let depth = u32::try_from(off.unsigned_abs()).unwrap_or(u32::MAX);
            if let Some(d) = self.stack_depth.get_mut(sp) {
                *d = (*d).max(depth);
            }
        }
    }
}

struct Checkpoint {
    state: Option<State>,
    parent: Option<usize>,
    branches: u32,
    hits: u32,
    misses: u32,
    hash: u64,
    key: (usize, Point),
    /// The `bpf_loop` invocation (iteration points only; 0 otherwise).
    inv: u32,
}

struct Path {
    st: State,
    pc: usize,
    point: Point,
    parent: Option<usize>,
    insns_since: u32,
    jmps_since: u32,
}

struct Log {
    level: LogLevel,
    buf: String,
    limit: usize,
    truncated: bool,
}

impl Log {
    fn line(&mut self, min: LogLevel, f: impl FnOnce() -> String) {
        if self.level < min || self.truncated {
            return;
        }
        let s = f();
        if self.buf.len() + s.len() + 1 > self.limit {
            self.buf.push_str("... log truncated\n");
            self.truncated = true;
            return;
        }
        self.buf.push_str(&s);
        self.buf.push('\n');
    }
}

struct Engine<'a> {
    env: Env<'a>,
    cfg: &'a VerifierConfig,
    cps: Vec<Checkpoint>,
    /// Finished checkpoints per point (usable for pruning).
    done: HashMap<(usize, Point), Vec<usize>>,
    /// In-progress checkpoints by point and exact-state hash (for loop detection).
    inprog: HashMap<(usize, Point, u64), Vec<usize>>,
    /// How many in-progress checkpoints each point has: a visit hashes its state only when
    /// there is one to compare with or it stores a checkpoint itself.
    inprog_at: HashMap<(usize, Point), u32>,
    /// In-progress checkpoints at `bpf_loop` iteration points, by call and invocation, in
    /// round order (they are ancestors of the current path).
    inprog_iter: HashMap<(usize, u32), Vec<usize>>,
    live_states: u64,
    stats: VerifyStats,
    log: Log,
    /// BTF line info, for the `; source` comments of the verbose log.
    line_info: Option<&'a [LineInfo]>,
    /// The C line whose comment the log printed last on this path.
    logged_line: Option<&'a LineInfo>,
    /// Instructions executed on at least one explored path.
    reached: Vec<bool>,
}

/// Removes checkpoint `i` from a list of in-progress ones (usually its last entry).
fn remove_idx(v: &mut Vec<usize>, i: usize) {
    if v.last() == Some(&i) {
        v.pop();
    } else if let Some(j) = v.iter().rposition(|&x| x == i) {
        v.remove(j);
    }
}

/// Live-register masks per frame, without allocating: at most [`MAX_FRAMES`] (a mask that
/// does not fit is left out, and a missing mask counts every register live).
struct LiveMasks {
    masks: [u16; MAX_FRAMES],
    len: usize,
}

impl LiveMasks {
    fn new() -> Self {
        LiveMasks {
            masks: [0; MAX_FRAMES],
            len: 0,
        }
    }

    fn push(&mut self, m: u16) {
        if let Some(slot) = self.masks.get_mut(self.len) {
            *slot = m;
            self.len += 1;
        }
    }
}

impl std::ops::Deref for LiveMasks {
    type Target = [u16];
    fn deref(&self) -> &[u16] {
        self.masks.get(..self.len).unwrap_or(&[])
    }
}

/// Live registers per frame for a state at `pc`/`point` (bit i = ri).
fn live_masks(prog: &Program, st: &State, pc: usize, point: Point) -> LiveMasks {
    let n = st.frames.len();
    let mut v = LiveMasks::new();
    for (i, f) in st.frames.iter().enumerate() {
        let is_top = i + 1 == n;
        let m = if is_top {
            match point {
                Point::Insn => prog.live_in.get(pc).copied().unwrap_or(0x3ff),
                Point::LoopIter => {
                    let after = prog.live_in.get(pc + 1).copied().unwrap_or(0x3ff);
                    (after & 0x3c0) | 0x3e
                }
            }
        } else {
            let child = &st.frames[i + 1];
            let after = prog
                .live_in
                .get(child.callsite + 1)
                .copied()
                .unwrap_or(0x3ff);
            match child.kind {
                FrameKind::Callback { .. } => (after & 0x3c0) | 0x3e,
                _ => after & 0x3c0,
            }
        };
        let _ = f;
        v.push(m);
    }
    v
}

impl Engine<'_> {
    fn finish_path(&mut self, mut p: Option<usize>) {
        while let Some(i) = p {
            let cp = &mut self.cps[i];
            cp.branches = cp.branches.saturating_sub(1);
            if cp.branches > 0 {
                break;
            }
            let (key, hash, inv) = (cp.key, cp.hash, cp.inv);
            p = cp.parent;
            if let Some(v) = self.inprog.get_mut(&(key.0, key.1, hash)) {
                remove_idx(v, i);
                if v.is_empty() {
                    self.inprog.remove(&(key.0, key.1, hash));
                }
                if let Some(n) = self.inprog_at.get_mut(&key) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.inprog_at.remove(&key);
                    }
                }
            }
            if key.1 == Point::LoopIter {
                if let Some(v) = self.inprog_iter.get_mut(&(key.0, inv)) {
                    remove_idx(v, i);
                    if v.is_empty() {
                        self.inprog_iter.remove(&(key.0, inv));
                    }
                }
            }
            let list = self.done.entry(key).or_default();
            if list.len() >= MAX_STATES_PER_POINT {
                // Evict the state that pruned least for its misses (the oldest on ties).
                let cps = &self.cps;
                let worst = list
                    .iter()
                    .enumerate()
                    .max_by_key(|(j, &x)| {
                        let c = &cps[x];
                        (
                            i64::from(c.misses) - 3 * i64::from(c.hits),
                            std::cmp::Reverse(*j),
                        )
                    })
                    .map(|(j, _)| j);
                if let Some(j) = worst {
                    let x = list.remove(j);
                    if self.cps[x].state.take().is_some() {
                        self.live_states -= 1;
                    }
                }
            }
            list.push(i);
        }
    }

    /// Checkpoint indices of the earlier `bpf_loop` rounds at `pc` of invocation `inv`,
    /// oldest first.
    fn loop_rounds(&self, pc: usize, inv: u32) -> &[usize] {
        self.inprog_iter
            .get(&(pc, inv))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// At a `bpf_loop` iteration point reached for round [`WIDEN_AFTER`] or later of the same
    /// invocation, widens the scalars that changed since the previous round
    /// ([`crate::widen`]).
    fn widen_loop_state(&mut self, path: &mut Path) {
        let inv = path.st.cur().loop_inv;
        let rounds = self.loop_rounds(path.pc, inv);
        if rounds.len() < WIDEN_AFTER {
            return;
        }
        let Some(prev) = rounds.last().and_then(|&i| self.cps[i].state.as_ref()) else {
            return;
        };
        let n = widen(prev, &mut path.st);
        if n > 0 {
            let (pc, round) = (path.pc, rounds.len());
            self.log.line(LogLevel::Basic, || {
                format!("{pc}: bpf_loop round {round}: widened {n} values")
            });
        }
    }

    /// Checks the current state against stored ones at this point. `Ok(true)`: pruned.
    fn visit(&mut self, path: &mut Path) -> R<bool> {
        let key = (path.pc, path.point);
        if path.point == Point::LoopIter {
            self.widen_loop_state(path);
        }
        let live = live_masks(self.env.prog, &path.st, path.pc, path.point);
        // Computed when first needed (most visits neither find an in-progress state at this
        // point nor store one).
        let mut hash: Option<u64> = None;
        let mut pruned = false;
        if path.point == Point::LoopIter {
            let inv = path.st.cur().loop_inv;
            let rounds = self.loop_rounds(path.pc, inv);
            // The latest rounds only: a fixpoint (possibly after widening) is reached against
            // one of them; older ones would make every round cost more than the last.
            for &i in rounds.iter().rev().take(MAX_ROUNDS_COMPARED) {
                let Some(old) = &self.cps[i].state else {
                    continue;
                };
                if states_equal(old, &path.st, &live, false) {
                    pruned = true;
                    break;
                }
            }
        }
        if !pruned && self.inprog_at.contains_key(&key) {
            let h = *hash.get_or_insert_with(|| state_hash(&path.st, &live));
            for &i in self
                .inprog
                .get(&(key.0, key.1, h))
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let Some(old) = &self.cps[i].state else {
                    continue;
                };
                if states_equal(old, &path.st, &live, true) {
                    return Err(rej(ErrorKind::InfiniteLoop { pc: path.pc }, &[]));
                }
            }
        }
        if !pruned {
            if let Some(list) = self.done.get(&key) {
                for &i in list {
                    let Some(old) = &self.cps[i].state else {
                        continue;
                    };
                    if states_equal(old, &path.st, &live, false) {
                        pruned = true;
                        self.cps[i].hits += 1;
                        break;
                    }
                    self.cps[i].misses += 1;
                }
            }
        }
        if pruned {
            self.stats.states_pruned += 1;
            return Ok(true);
        }
        // Evict finished states that keep missing.
        if let Some(list) = self.done.get_mut(&key) {
            let cps = &mut self.cps;
            let live_states = &mut self.live_states;
            list.retain(|&i| {
                let cp = &mut cps[i];
                if cp.misses > cp.hits * 3 + 3 && cp.state.is_some() {
                    cp.state = None;
                    *live_states -= 1;
                    return false;
                }
                true
            });
        }
        let force =
            path.point == Point::LoopIter || self.env.prog.subprogs.binary_search(&path.pc).is_ok();
        if force || (path.jmps_since >= 2 && path.insns_since >= 8) || path.insns_since >= 64 {
            let hash = hash.unwrap_or_else(|| state_hash(&path.st, &live));
            let idx = self.cps.len();
            self.cps.push(Checkpoint {
                state: Some(path.st.clone()),
                parent: path.parent,
                branches: 1,
                hits: 0,
                misses: 0,
                hash,
                key,
                inv: path.st.cur().loop_inv,
            });
            self.inprog
                .entry((key.0, key.1, hash))
                .or_default()
                .push(idx);
            *self.inprog_at.entry(key).or_default() += 1;
            if key.1 == Point::LoopIter {
                self.inprog_iter
                    .entry((key.0, path.st.cur().loop_inv))
                    .or_default()
                    .push(idx);
            }
            path.parent = Some(idx);
            path.insns_since = 0;
            path.jmps_since = 0;
            self.stats.states_stored += 1;
            self.live_states += 1;
            self.stats.peak_states = self.stats.peak_states.max(self.live_states);
        }
        Ok(false)
    }

    fn run(&mut self, init: State) -> Result<(), Box<(usize, Reject, State)>> {
        let mut stack = vec![Path {
            st: init,
            pc: 0,
            point: Point::Insn,
            parent: None,
            insns_since: 0,
            jmps_since: 0,
        }];
        while let Some(mut path) = stack.pop() {
            // A new path starts with its source line, as the kernel's log does.
            self.logged_line = None;
            loop {
                let pc = path.pc;
                let at_prune = path.point == Point::LoopIter
                    || self.env.prog.prune.get(pc).copied().unwrap_or(false);
                if at_prune {
                    match self.visit(&mut path) {
                        Ok(true) => {
                            self.log
                                .line(LogLevel::Basic, || format!("{pc}: safe (pruned)"));
                            self.finish_path(path.parent);
                            break;
                        }
                        Ok(false) => {}
                        Err(r) => return Err(Box::new((pc, r, path.st))),
                    }
                }
                self.stats.insns_processed += 1;
                if self.stats.insns_processed > self.cfg.budget {
                    let r = rej(
                        ErrorKind::TooComplex {
                            processed: self.stats.insns_processed - 1,
                            budget: self.cfg.budget,
                        },
                        &[],
                    );
                    return Err(Box::new((pc, r, path.st)));
                }
                path.insns_since += 1;
                if path.point == Point::Insn {
                    if let Some(r) = self.reached.get_mut(pc) {
                        *r = true;
                    }
                }
                let step = match path.point {
                    Point::LoopIter => crate::call::loop_iter(&mut self.env, &mut path.st, pc),
                    Point::Insn => self.exec(&mut path.st, pc),
                };
                let step = match step {
                    Ok(s) => s,
                    Err(r) => return Err(Box::new((pc, r, path.st))),
                };
                match step {
                    Step::Next(n) => {
                        if n != pc + 1 && !(n == pc + 2 && self.is_lddw(pc)) {
                            path.jmps_since += 1;
                        }
                        path.pc = n;
                        path.point = Point::Insn;
                    }
                    Step::LoopIter(c) => {
                        path.pc = c;
                        path.point = Point::LoopIter;
                        path.jmps_since += 1;
                    }
                    Step::Goto(b) => {
                        let (st, n, point) = b;
                        path.st = st;
                        path.pc = n;
                        path.point = point;
                        path.jmps_since += 1;
                    }
                    Step::Fork(a, b) => {
                        let (sb, nb, pb) = b;
                        if self.log.level >= LogLevel::Basic {
                            let text = format!("from {pc} to {nb}: {}", self.render_frame(&sb));
                            self.log.line(LogLevel::Basic, || text);
                        }
                        if stack.len() >= MAX_PENDING {
                            let r = rej(ErrorKind::TooManyBranches { limit: MAX_PENDING }, &[]);
                            return Err(Box::new((pc, r, path.st)));
                        }
                        if let Some(p) = path.parent {
                            self.cps[p].branches += 1;
                        }
                        stack.push(Path {
                            st: sb,
                            pc: nb,
                            point: pb,
                            parent: path.parent,
                            insns_since: path.insns_since,
                            jmps_since: path.jmps_since + 1,
                        });
                        let (sa, na, pa) = a;
                        path.st = sa;
                        path.pc = na;
                        path.point = pa;
                        path.jmps_since += 1;
                    }
                    Step::Done | Step::Dead => {
                        self.finish_path(path.parent);
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn is_lddw(&self, pc: usize) -> bool {
        self.env.insns.get(pc).is_some_and(|i| i.is_lddw())
    }

    fn render_frame(&self, st: &State) -> String {
        let f = st.cur();
        let mut parts = Vec::new();
        for (i, r) in f.regs.iter().enumerate() {
            if r.ty != RegType::NotInit {
                parts.push(format!("R{i}={}", r.render(self.env.maps)));
            }
        }
        for (i, s) in f.stack.iter().enumerate() {
            if let Some(r) = &s.spill {
                parts.push(format!("fp-{}={}", (i + 1) * 8, r.render(self.env.maps)));
            } else if s
                .bytes
                .iter()
                .any(|b| *b != crate::state::ByteKind::Invalid)
            {
                let m: String = s
                    .bytes
                    .iter()
                    .rev()
                    .map(|b| match b {
                        crate::state::ByteKind::Invalid => '?',
                        crate::state::ByteKind::Misc => 'm',
                        crate::state::ByteKind::Zero => '0',
                        crate::state::ByteKind::Spill => 'r',
                    })
                    .collect();
                parts.push(format!("fp-{}={m}", (i + 1) * 8));
            }
        }
        if st.frames.len() > 1 {
            format!("frame{}: {}", st.frames.len() - 1, parts.join(" "))
        } else {
            parts.join(" ")
        }
    }

    fn exec(&mut self, st: &mut State, pc: usize) -> R<Step> {
        let Some(ins) = self.env.prog.insns.get(pc).copied().flatten() else {
            return Err(rej(ErrorKind::FallsOffEnd, &[]));
        };
        if self.log.level >= LogLevel::Verbose {
            // `; C source @ file:line` above the first instruction of each C line, as the
            // kernel's log has it (file by base name).
            if let Some(l) = line_for(self.line_info, pc) {
                let same = |p: &LineInfo| (p.line, &p.file) == (l.line, &l.file);
                if !self.logged_line.is_some_and(same) {
                    self.logged_line = Some(l);
                    let file = l.file.rsplit('/').next().unwrap_or_default();
                    self.log.line(LogLevel::Verbose, || {
                        format!("; {} @ {file}:{}", l.source.trim(), l.line)
                    });
                }
            }
            let text = crate::print::listing_line(self.env.insns, pc, self.env.maps);
            let state = self.render_frame(st);
            self.log
                .line(LogLevel::Verbose, || format!("{}: {state}", pc));
            self.log.line(LogLevel::Verbose, || text);
        }
        let step = crate::exec::step(&mut self.env, st, pc, &ins)?;
        if let Instruction::Call(CallTarget::Local(_)) = ins {
            if st.frames.len() > 1 {
                self.log.line(LogLevel::Basic, || {
                    format!("caller at {pc} -> frame{}", st.frames.len() - 1)
                });
            }
        }
        Ok(step)
    }
}

/// Hint for writes into `.rodata`.
const READ_ONLY_HINT: &str = "`const volatile` globals are set when loading (`gpubpf load --set \
     NAME=VALUE`) and read-only to programs; keep state the program changes in a non-const \
     global (.bss/.data) or a map";

/// Where the helpers gpubpf implements are listed (for programs calling one it does not).
pub const HELPER_LIST_HINT: &str = "`gpubpf helpers` lists the helpers gpubpf implements \
     (declared in the SDK's gpubpf_helpers.h, which `gpubpf build` includes)";

fn hint_for(kind: &ErrorKind, regs: &[(u8, Reg)], program: &str) -> Option<String> {
    let ty_of = |r: u8| regs.iter().find(|(x, _)| *x == r).map(|(_, s)| s.ty);
    Some(match kind {
        ErrorKind::InvalidMemAccess { reg, ty } | ErrorKind::PointerArith { reg, detail: ty } => {
            match ty_of(*reg) {
                Some(RegType::MapValueOrNull { .. }) => {
                    "add a NULL check after bpf_map_lookup_elem: `if (!p) return 0;`".into()
                }
                Some(RegType::RingbufMemOrNull { .. }) => {
                    "check the pointer returned by bpf_ringbuf_reserve for NULL before using it"
                        .into()
                }
                Some(RegType::Scalar) if ty.contains("scalar") => {
                    "only pointers to the stack, map values, ring-buffer records and the ctx can \
                     be dereferenced; read application memory with bpf_probe_read_user"
                        .into()
                }
                Some(RegType::MapPtr { .. }) => {
                    "a map handle is only an argument for map helpers; look up a value first".into()
                }
                _ if ty.contains("unbounded") || ty.contains("out of range") => {
                    "bound it first: check the index against the size, e.g. `if (i >= N) \
                     return 0;` with an unsigned index"
                        .into()
                }
                _ => return None,
            }
        }
        ErrorKind::UninitReg { .. } => {
            "the register is not set on this path: calls clobber r1-r5 (keep values in r6-r9 \
             or on the stack), and bpf_ringbuf_submit/discard invalidate every copy of the \
             record pointer"
                .into()
        }
        ErrorKind::TooComplex { .. } | ErrorKind::TooManyBranches { .. } => {
            "the loop bound must be a constant or checked against one (or use bpf_loop); \
             simplify the program"
                .into()
        }
        ErrorKind::InfiniteLoop { .. } => {
            "the loop never makes progress: its variable must change and be compared with a bound"
                .into()
        }
        ErrorKind::UnboundedAccess { .. } | ErrorKind::NegativeOffset { .. } => {
            "check the index against the size before using it, e.g. `if (i >= N) return 0;` \
             with an unsigned index"
                .into()
        }
        ErrorKind::OutOfBounds { .. } => {
            "the access lies outside the object: check the offset, the size and any index".into()
        }
        ErrorKind::UninitStackRead { .. } => {
            "initialise the variable (e.g. `= {}` or __builtin_memset) before reading it or \
             passing it to a helper"
                .into()
        }
        ErrorKind::UnreleasedRef { .. } => {
            "call bpf_ringbuf_submit or bpf_ringbuf_discard on every path after \
             bpf_ringbuf_reserve"
                .into()
        }
        ErrorKind::PointerLeak { .. } | ErrorKind::ReturnPointer => {
            "pointers may not leave the sandbox: store or return numbers, not addresses".into()
        }
        ErrorKind::ReturnValue { .. } => format!(
            "{program} must return 0 (proceed) or an allowed value; clamp or check r0 before \
             returning"
        ),
        ErrorKind::CtxPermission { .. } => {
            format!("see `gpubpf attach-points` for which ctx fields {program} may read and write")
        }
        ErrorKind::CtxAccess { .. } | ErrorKind::CtxVarOffset { .. } => {
            "access ctx fields by name through the SDK's typed struct, with constant offsets".into()
        }
        ErrorKind::Recursion { .. } => "bpf-to-bpf calls may not recurse".into(),
        ErrorKind::StackTooLarge { .. } => {
            "reduce local variables: the stack of a whole call chain is limited to 512 bytes".into()
        }
        ErrorKind::Unreachable => "remove dead code (compile with -O2)".into(),
        ErrorKind::Misaligned { .. } => {
            "stack accesses must be naturally aligned (avoid packed structs on the stack)".into()
        }
        ErrorKind::ReadOnlyMap { .. } | ErrorKind::HelperWritesReadOnlyMap { .. } => {
            READ_ONLY_HINT.into()
        }
        ErrorKind::HelperArg { .. } => {
            "check the helper's argument types in gpubpf_helpers.h".into()
        }
        ErrorKind::UnknownHelper { id } => {
            let what = match crate::linux_helpers::linux_helper_name(*id) {
                Some(name) => format!("`{name}` (Linux helper {id}) is not a gpubpf helper"),
                None => format!("no gpubpf or Linux helper has id {id}"),
            };
            format!("{what}: {HELPER_LIST_HINT}")
        }
        ErrorKind::PointerCompare { .. } => {
            "compare pointers only against NULL; compare the values they point to instead".into()
        }
        ErrorKind::CorruptSpilledPointer { .. } | ErrorKind::PartialPointerFill { .. } => {
            "do not reuse a stack slot holding a pointer with a narrower access".into()
        }
        _ => return None,
    })
}

/// Verifies `input`.
pub fn run(
    config: &VerifierConfig,
    input: &VerifyInput<'_>,
) -> Result<VerifyStats, Box<VerifierError>> {
    let t0 = Instant::now();
    let fail = |pc: usize,
                kind: ErrorKind,
                regs: Vec<RegNote>,
                hint,
                log: String,
                mut stats: VerifyStats| {
        stats.duration = t0.elapsed();
        Box::new(VerifierError {
            pc,
            listing: build_listing(input.insns, pc, input.maps, input.line_info, 6),
            source_line: line_for(input.line_info, pc).map(|l| l.source.trim().to_string()),
            kind,
            regs,
            hint,
            log,
            stats,
        })
    };
    let prog = match cfg::analyze(input.insns, input.maps, config.max_insns) {
        Ok(p) => p,
        Err((pc, kind)) => {
            let hint = hint_for(&kind, &[], &input.ctx.description);
            return Err(fail(
                pc,
                kind,
                Vec::new(),
                hint,
                String::new(),
                VerifyStats::default(),
            ));
        }
    };
    let nsub = prog.subprogs.len();
    let mut eng = Engine {
        env: Env {
            prog: &prog,
            insns: input.insns,
            maps: input.maps,
            ctx: input.ctx,
            next_id: 0,
            stack_depth: vec![0; nsub],
            ctx_read: Default::default(),
        },
        cfg: config,
        cps: Vec::new(),
        done: HashMap::default(),
        inprog: HashMap::default(),
        inprog_at: HashMap::default(),
        inprog_iter: HashMap::default(),
        live_states: 0,
        reached: vec![false; input.insns.len()],
        line_info: input.line_info,
        logged_line: None,
        stats: VerifyStats::default(),
        log: Log {
            level: config.log_level,
            buf: String::new(),
            limit: config.log_limit,
            truncated: false,
        },
    };
    let mut frame = Frame::new(0, usize::MAX, 0, FrameKind::Main);
    frame.regs[1] = Reg::ptr(RegType::Ctx, 0);
    let init = State {
        frames: vec![frame],
        refs: Vec::new(),
    };
    let result = eng.run(init);
    if let Err(b) = result {
        let (pc, r, st) = *b;
        let regs: Vec<(u8, Reg)> = r.regs.iter().map(|&x| (x, *st.reg(x))).collect();
        let notes = regs
            .iter()
            .map(|(x, s)| RegNote {
                reg: *x,
                state: s.render(input.maps),
            })
            .collect();
        let hint = hint_for(&r.kind, &regs, &input.ctx.description);
        let msg = r.kind.to_string();
        eng.log.line(LogLevel::Basic, || format!("{pc}: {msg}"));
        let mut stats = std::mem::take(&mut eng.stats);
        stats.stack_depth = eng.env.stack_depth.clone();
        let log = std::mem::take(&mut eng.log.buf);
        return Err(fail(pc, r.kind, notes, hint, log, stats));
    }
    // Combined stack of every call chain (rounded to 32 bytes per frame, as the kernel does).
    let depth = |sp: usize| -> u32 {
        let d = eng.env.stack_depth.get(sp).copied().unwrap_or(0).max(1);
        d.div_ceil(32) * 32
    };
    if let Some((pc, frames, size)) = max_chain(&prog, input.insns, &depth) {
        let kind = ErrorKind::StackTooLarge { frames, size };
        let hint = hint_for(&kind, &[], &input.ctx.description);
        let mut stats = std::mem::take(&mut eng.stats);
        stats.stack_depth = eng.env.stack_depth.clone();
        return Err(fail(
            pc,
            kind,
            Vec::new(),
            hint,
            std::mem::take(&mut eng.log.buf),
            stats,
        ));
    }
    let mut stats = std::mem::take(&mut eng.stats);
    stats.stack_depth = eng.env.stack_depth.clone();
    stats.ctx_fields_read = eng.env.ctx_read.take().into_iter().collect();
    stats.unreached = (0..input.insns.len())
        .filter(|&pc| prog.insns[pc].is_some() && !eng.reached[pc])
        .collect();
    stats.duration = t0.elapsed();
    let (processed, stored, peak) = (
        stats.insns_processed,
        stats.states_stored,
        stats.peak_states,
    );
    eng.log.line(LogLevel::Basic, || {
        format!(
            "processed {processed} insns (limit {}) max_states_per_insn {} total_states {stored} peak_states {peak}",
            config.budget,
            eng.done.values().map(Vec::len).max().unwrap_or(0)
        )
    });
    stats.log = std::mem::take(&mut eng.log.buf);
    Ok(stats)
}

/// The first call chain whose combined stack exceeds 512 bytes: (call site, frames, bytes).
fn max_chain(
    prog: &Program,
    insns: &[Insn],
    depth: &dyn Fn(usize) -> u32,
) -> Option<(usize, usize, u32)> {
    // Callees of each subprogram (local calls and callbacks).
    let n = prog.subprogs.len();
    let mut callees: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (pc, ins) in prog.insns.iter().enumerate() {
        let t = match ins {
            Some(Instruction::Call(CallTarget::Local(off))) => pc as i64 + 1 + i64::from(*off),
            Some(Instruction::LoadImm64 {
                kind: gpubpf_isa::LddwKind::Func,
                imm,
                ..
            }) => pc as i64 + 1 + i64::from(*imm),
            _ => continue,
        };
        if let Ok(c) = prog.subprogs.binary_search(&(t as usize)) {
            callees[prog.subprog_of[pc]].push((c, pc));
        }
    }
    let _ = insns;
    // The call graph is acyclic (checked in cfg). Deepest chain from each subprogram,
    // memoised so that shared callees are visited once: (bytes, frames, first call site).
    fn deepest(
        sp: usize,
        callees: &[Vec<(usize, usize)>],
        depth: &dyn Fn(usize) -> u32,
        memo: &mut Vec<Option<(u32, usize, usize)>>,
    ) -> (u32, usize, usize) {
        if let Some(m) = memo[sp] {
            return m;
        }
        let mut best = (0u32, 0usize, usize::MAX);
        for &(c, pc) in &callees[sp] {
            let (b, f, _) = deepest(c, callees, depth, memo);
            if b > best.0 {
                best = (b, f, pc);
            }
        }
        let r = (depth(sp).saturating_add(best.0), best.1 + 1, best.2);
        memo[sp] = Some(r);
        r
    }
    let mut memo = vec![None; n];
    let (bytes, frames, site) = deepest(0, &callees, depth, &mut memo);
    (bytes > 512).then_some((if site == usize::MAX { 0 } else { site }, frames, bytes))
}
