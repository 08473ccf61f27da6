//! Soundness with several map objects: random programs that the verifier accepts run in the
//! interpreter's checked-memory mode without a memory fault, with every map element its own
//! region.
//!
//! Where `verifier_soundness.rs` uses one map value, this generator aims at the verifier's
//! object identity: which pointers are "the same object" (`branch::pointer_jump` decides
//! comparisons of such pointers statically) and which states cover others (`equiv`). Programs
//! are assembler text built from snippets:
//!
//! - pointer sources: lookups of a 4-entry array and an 8-entry hash map with constant keys
//!   (sometimes out of range), keys from ctx or from the callback index, null-checked;
//!   direct values (`lddw map_idx_value`) of a single-entry global array; copies, fills,
//!   copies plus an offset;
//! - spills and fills of pointers to the frame's own stack and, in subprograms and
//!   `bpf_loop` callbacks, to the caller's stack through the pointer argument;
//! - diamonds on ctx (or argument) values whose arms put different pointers in the same
//!   register or slot before a join, where pruning happens;
//! - pointer comparisons (`jeq`, `jne`, `jgt`, …) between two map-value pointers, followed by
//!   an access that is only safe if the verifier's view of the outcome is right (a store far
//!   past the value, or just past its end);
//! - bpf-to-bpf calls (some returning a map-value pointer) and `bpf_loop` with callbacks.
//!
//! About a third of the programs are *guided*: shorter, with one diamond over (mostly) the
//! array whose arms give the same two registers direct values in one arm and two lookups in
//! the other, followed by a comparison of the two. Only guided programs take direct values
//! of the multi-entry array (the runtime resolves those to element 0), so a verifier that
//! rejects that form rejects them; the acceptance check counts unguided programs apart.
//! This shape found issue #11 (a stored id-0 direct value covering two lookups at a prune
//! point, the comparison decided statically): before the fix the CI share failed at program
//! #3868 (code decided dead ran), and without the traps at #8232 (an out-of-bounds store).
//!
//! Every accepted program runs several times with different ctx bytes and map values (so
//! different lookup keys and branch outcomes) and different hash-map keys present. The
//! lookup helper returns the real address of the element (its own checked region, with
//! unregistered gaps between elements) or NULL. Programs run as the runtime prepares them,
//! after `sanitize_dead_code`: executing an instruction that no explored path reached hits
//! a trap (`ExecError::DeadCode`). Any execution error is a failure, reported with the seed,
//! the program index, the inputs, the fault without the traps, and the assembler text.
//!
//! CI runs a fixed-seed share (`DEFAULT_PROGRAMS`). Longer runs:
//! `GPUBPF_SOUNDNESS_PROGRAMS=200000 GPUBPF_SOUNDNESS_SEED=7 cargo test --release --test
//! verifier_soundness_maps -- --nocapture` (the seed is decimal or `0x` hex).

#[path = "common/rng.rs"]
mod rng;
#[path = "verifier_cases/support.rs"]
mod verifier_support;

use rng::Rng;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use gpubpf_isa::{Insn, LddwKind};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Memory, Program};
use gpubpf_verifier::ctx::ReturnRule;
use gpubpf_verifier::sanitize::sanitize_dead_code;
use gpubpf_verifier::{MapInfo, MapKind, Verifier, VerifierConfig, VerifyInput};

/// Programs of the CI share.
const DEFAULT_PROGRAMS: u64 = 20_000;
const DEFAULT_SEED: u64 = 0x5eed_0011;
/// Executions per accepted program (the first with all-zero ctx, all hash keys present).
const RUNS: u64 = 6;

const ARR: usize = 0;
const HASH: usize = 1;
const GLOB: usize = 2;
const ARR_VS: usize = 24;
const ARR_N: usize = 4;
const HASH_VS: usize = 16;
const HASH_N: usize = 8;
const GLOB_VS: usize = 32;
/// Unregistered bytes after every element: a store just past a value faults.
const GAP: usize = 64;
const HANDLE_BASE: u64 = 0x1000;

fn maps() -> Vec<MapInfo> {
    vec![
        MapInfo::new("arr", MapKind::Array, 4, ARR_VS as u32, ARR_N as u32),
        MapInfo::new("hash", MapKind::Hash, 4, HASH_VS as u32, HASH_N as u32),
        MapInfo::new("glob", MapKind::Array, 4, GLOB_VS as u32, 1),
    ]
}

// ---------------------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum FnKind {
    Main,
    /// bpf-to-bpf: `r1` a map-value pointer, `r2` the caller's pointer slots, `r3` a scalar.
    Sub {
        returns_ptr: bool,
    },
    /// `bpf_loop` callback: `r1` the index, `r2` the caller's pointer slots.
    Callback,
}

/// What the program exercised (counted over accepted programs).
#[derive(Default, Clone, Copy)]
struct Features {
    ptr_cmp: bool,
    diamond: bool,
    call: bool,
    bpf_loop: bool,
    guided: bool,
}

/// One function being generated.
struct Func {
    kind: FnKind,
    end: String,
    text: String,
    /// Registers that always hold a valid (non-NULL) pointer.
    pregs: &'static [u8],
    /// 8-byte slots that always hold a valid pointer: (base register, offset).
    slots: Vec<(u8, i16)>,
    /// Whether a jump to `end` was emitted.
    end_used: bool,
}

struct Gen<'r> {
    r: &'r mut Rng,
    labels: u32,
    /// Functions other than main: (label, kind, text), emitted after main.
    funcs: Vec<(String, FnKind, String)>,
    /// A guided program: biased toward diamonds over the array followed by comparisons,
    /// and taking direct values of the multi-entry array (see the module documentation).
    guided: bool,
    /// The registers of the last `pair` (compared more often than others).
    pair: Option<(u8, u8)>,
    /// The registers every `pair` of the current diamond's arms uses.
    diamond_pair: Option<(u8, u8)>,
    /// Whether the `pair` of the current arm of a guided diamond takes direct values.
    arm_direct: Option<bool>,
    f: Features,
}

const PTR_CONDS: [&str; 10] = [
    "jeq", "jeq", "jeq", "jne", "jne", "jgt", "jge", "jlt", "jle", "jsgt",
];
const SCALAR_CONDS: [&str; 8] = ["jeq", "jne", "jgt", "jlt", "jset", "jsgt", "jeq32", "jle"];
const SIZES: [(&str, usize); 4] = [("b", 1), ("h", 2), ("w", 4), ("dw", 8)];

impl Gen<'_> {
    fn label(&mut self) -> String {
        self.labels += 1;
        format!("L{}", self.labels)
    }

    /// A map to take a pointer from.
    fn pick_map(&mut self) -> usize {
        let (arr, hash) = if self.guided { (12, 15) } else { (9, 14) };
        match self.r.below(20) {
            n if n < arr => ARR,
            n if n < hash => HASH,
            _ => GLOB,
        }
    }

    /// Whether the program takes direct values of `map`.
    fn has_direct_value(&self, map: usize) -> bool {
        map == GLOB || map == ARR && self.guided
    }

    /// Puts a key for `map` into 4 bytes of the stack; returns their offset from `r10`.
    fn key(&mut self, f: &mut Func, map: usize) -> i16 {
        let at = self.r.pick(&[-32, -40, -48, -56]);
        let n = [ARR_N, HASH_N, 1][map] as u64;
        let mask = (n - 1).max(1);
        match (f.kind, self.r.below(10)) {
            (FnKind::Main, 0..=3) => {
                let off = self.r.pick(&[12, 16, 0, 8]);
                let _ = writeln!(f.text, "ldxw %r1, [%r6+{off}]");
                match self.r.below(3) {
                    0 => _ = writeln!(f.text, "and %r1, {mask}"),
                    1 => _ = writeln!(f.text, "mod %r1, {}", n + 1),
                    _ => _ = writeln!(f.text, "and %r1, 1"),
                }
                let _ = writeln!(f.text, "stxw [%r10{at}], %r1");
            }
            (FnKind::Callback | FnKind::Sub { .. }, 0..=4) => {
                let _ = writeln!(f.text, "mov %r1, %r9\nand %r1, {mask}");
                let _ = writeln!(f.text, "stxw [%r10{at}], %r1");
            }
            _ => {
                // Mostly in range; sometimes one past the end.
                let k = if self.r.chance(10) {
                    n
                } else {
                    self.r.below(n)
                };
                let _ = writeln!(f.text, "stw [%r10{at}], {k}");
            }
        }
        at
    }

    /// `dst` = a null-checked lookup of `map` (NULL leaves the function).
    fn lookup(&mut self, f: &mut Func, dst: u8, map: usize) {
        let at = self.key(f, map);
        let _ = writeln!(f.text, "mov %r2, %r10\nadd %r2, {at}");
        let _ = writeln!(f.text, "lddw %r1, map_idx {map}\ncall 1");
        let _ = writeln!(f.text, "jeq %r0, 0, {}\nmov %r{dst}, %r0", f.end);
        f.end_used = true;
    }

    fn direct_value(&mut self, f: &mut Func, dst: u8, map: usize) {
        let off = self.r.pick(&[0, 0, 0, 8]);
        let _ = writeln!(f.text, "lddw %r{dst}, map_idx_value {map}, {off}");
    }

    /// `dst` = a new pointer to a value of `map`: a lookup or a direct value.
    fn fresh(&mut self, f: &mut Func, dst: u8, map: usize, direct: bool) {
        if direct && self.has_direct_value(map) {
            self.direct_value(f, dst, map);
        } else {
            self.lookup(f, dst, map);
        }
    }

    /// Puts a valid map-value pointer into `dst`; `init` is how many of `f.pregs` (and all
    /// of `f.slots` when it is the whole list) hold pointers already.
    fn source(&mut self, f: &mut Func, dst: u8, init: usize) {
        let others: Vec<u8> = f.pregs[..init]
            .iter()
            .copied()
            .filter(|&p| p != dst)
            .collect();
        let slots_ready = init == f.pregs.len();
        match self.r.below(10) {
            6..=7 if !others.is_empty() => {
                let s = self.r.pick(&others);
                let _ = writeln!(f.text, "mov %r{dst}, %r{s}");
            }
            8 if slots_ready => {
                let (b, o) = self.r.pick(&f.slots);
                let _ = writeln!(f.text, "ldxdw %r{dst}, [%r{b}{o:+}]");
            }
            9 if !others.is_empty() => {
                let s = self.r.pick(&others);
                let _ = writeln!(f.text, "mov %r{dst}, %r{s}\nadd %r{dst}, 8");
            }
            _ => {
                let (m, direct) = (self.pick_map(), self.r.chance(45));
                self.fresh(f, dst, m, direct);
            }
        }
    }

    /// Two registers get pointers to values of `map` of the same kind: one object (a copy,
    /// or two direct values) or maybe two (two lookups); the second is sometimes spilled.
    fn pair(&mut self, f: &mut Func, map: usize) {
        let (x, y) = match self.diamond_pair {
            Some(pair) => pair,
            None => self.two_pregs(f),
        };
        let direct = self.arm_direct.unwrap_or_else(|| self.r.chance(45));
        self.fresh(f, x, map, direct);
        if self.r.chance(if self.guided { 20 } else { 35 }) {
            let _ = writeln!(f.text, "mov %r{y}, %r{x}");
        } else {
            self.fresh(f, y, map, direct);
        }
        if self.r.chance(25) {
            let (b, o) = self.r.pick(&f.slots);
            let _ = writeln!(f.text, "stxdw [%r{b}{o:+}], %r{y}");
        }
        self.pair = Some((x, y));
    }

    /// Two different pointer registers.
    fn two_pregs(&mut self, f: &Func) -> (u8, u8) {
        let x = self.r.pick(f.pregs);
        loop {
            let y = self.r.pick(f.pregs);
            if y != x {
                return (x, y);
            }
        }
    }

    /// A scalar from ctx (main), from `r9` (the argument of other functions) or from a map
    /// value in `r1`.
    fn scalar(&mut self, f: &mut Func) {
        if self.r.chance(20) {
            // A byte of a map value (their contents differ between runs).
            let p = self.r.pick(f.pregs);
            let _ = writeln!(f.text, "ldxb %r1, [%r{p}+{}]", self.r.below(8));
        } else if f.kind == FnKind::Main {
            let off = self.r.pick(&[0, 4, 8, 12, 16]);
            let _ = writeln!(f.text, "ldxw %r1, [%r6+{off}]");
        } else {
            let _ = writeln!(f.text, "mov %r1, %r9");
        }
    }

    /// A load or store through a pointer register, at a nearly safe offset.
    fn access(&mut self, f: &mut Func, p: u8) {
        let (sz, n) = self.r.pick(&SIZES);
        let max = if self.r.chance(70) { 16 } else { 36 };
        let off = self.r.below((max - n + 1) as u64);
        match self.r.below(4) {
            0 => _ = writeln!(f.text, "st{sz} [%r{p}+{off}], 7"),
            1 => _ = writeln!(f.text, "ldx{sz} %r1, [%r{p}+{off}]"),
            2 => {
                self.scalar(f);
                let mask = self.r.pick(&[7, 15, 31]);
                let _ = writeln!(f.text, "and %r1, {mask}\nmov %r2, %r{p}\nadd %r2, %r1");
                let _ = writeln!(f.text, "stb [%r2], 1");
            }
            _ => _ = writeln!(f.text, "mov %r1, 5\nstx{sz} [%r{p}+{off}], %r1"),
        }
    }

    /// `if A op B goto safe; <access only safe when the branch is taken>; safe:`.
    fn compare(&mut self, f: &mut Func) {
        self.f.ptr_cmp = true;
        let pairs = if self.guided { 10 } else { 6 };
        let (a, b) = match (self.pair, self.r.below(20)) {
            (Some(pair), n) if n < pairs => pair,
            (_, n) if n < 13 => {
                // One object at two constant offsets.
                let a = self.r.pick(f.pregs);
                let off = self.r.pick(&[0, 4, 8, 16]);
                let _ = writeln!(f.text, "mov %r3, %r{a}\nadd %r3, {off}");
                (a, 3)
            }
            (_, 13..=15) => {
                let (b, o) = self.r.pick(&f.slots);
                let _ = writeln!(f.text, "ldxdw %r3, [%r{b}{o:+}]");
                (self.r.pick(f.pregs), 3)
            }
            (_, 16..=17) => {
                let m = if self.guided && self.r.chance(50) {
                    ARR
                } else {
                    GLOB
                };
                self.direct_value(f, 3, m);
                (self.r.pick(f.pregs), 3)
            }
            _ => (self.r.pick(f.pregs), self.r.pick(f.pregs)),
        };
        let (a, b) = if self.r.chance(50) { (a, b) } else { (b, a) };
        let safe = self.label();
        let cond = self.r.pick(&PTR_CONDS);
        let _ = writeln!(f.text, "{cond} %r{a}, %r{b}, {safe}");
        match self.r.below(if self.guided { 4 } else { 6 }) {
            0 | 1 => {
                let far = self.r.pick(&[0x1000_0000, 0x10_0000, 4096]);
                let _ = writeln!(f.text, "mov %r4, %r{a}\nadd %r4, {far}\nstdw [%r4], 0");
            }
            2 => {
                let past = self.r.pick(&[ARR_VS, HASH_VS, GLOB_VS]);
                let _ = writeln!(f.text, "stdw [%r{a}+{past}], 0");
            }
            _ => self.access(f, a),
        }
        let _ = writeln!(f.text, "{safe}:");
    }

    fn spill(&mut self, f: &mut Func) {
        let p = self.r.pick(f.pregs);
        let (b, o) = self.r.pick(&f.slots);
        let _ = writeln!(f.text, "stxdw [%r{b}{o:+}], %r{p}");
    }

    fn fill(&mut self, f: &mut Func) {
        let p = self.r.pick(f.pregs);
        let (b, o) = self.r.pick(&f.slots);
        let _ = writeln!(f.text, "ldxdw %r{p}, [%r{b}{o:+}]");
    }

    fn assign(&mut self, f: &mut Func) {
        let p = self.r.pick(f.pregs);
        self.source(f, p, f.pregs.len());
    }

    /// One arm of a diamond: new pointers (to values of `map`, mostly) in registers or slots.
    fn arm(&mut self, f: &mut Func, map: usize) {
        for i in 0..1 + self.r.below(2) {
            match self.r.below(8) {
                _ if i == 0 && self.arm_direct.is_some() => self.pair(f, map),
                0..=3 => self.pair(f, map),
                4 => self.assign(f),
                5 => {
                    let p = self.r.pick(f.pregs);
                    let direct = self.r.chance(45);
                    self.fresh(f, p, map, direct);
                    self.spill(f);
                }
                6 => self.fill(f),
                _ => self.spill(f),
            }
        }
    }

    /// `if <scalar> goto B; A: ...; goto J; B: ...; J:` (or without `B`).
    fn diamond(&mut self, f: &mut Func) {
        self.f.diamond = true;
        let map = self.pick_map();
        self.scalar(f);
        self.diamond_pair = Some(self.two_pregs(f));
        let (other, join) = (self.label(), self.label());
        let cond = self.r.pick(&SCALAR_CONDS);
        let imm = self.r.below(4);
        let _ = writeln!(f.text, "{cond} %r1, {imm}, {other}");
        // A guided diamond: one arm takes direct values, the other lookups.
        let guided = self.guided && f.kind == FnKind::Main;
        if guided {
            self.arm_direct = Some(self.r.chance(50));
        }
        self.arm(f, map);
        let two_arms = guided || self.r.chance(75);
        if two_arms {
            let _ = writeln!(f.text, "ja {join}");
        }
        let _ = writeln!(f.text, "{other}:");
        if two_arms {
            self.arm_direct = self.arm_direct.map(|d| !d);
            self.arm(f, map);
            let _ = writeln!(f.text, "{join}:");
        }
        self.diamond_pair = None;
        self.arm_direct = None;
        if guided || self.r.chance(50) {
            self.compare(f);
        }
    }

    fn call(&mut self, f: &mut Func) {
        if self.r.chance(50) {
            self.f.call = true;
            let returns_ptr = self.r.chance(40);
            let kind = FnKind::Sub { returns_ptr };
            let name = self.callee(kind);
            let a = self.r.pick(f.pregs);
            let _ = writeln!(f.text, "mov %r1, %r{a}\nmov %r2, %r10\nadd %r2, -24");
            if self.r.chance(50) {
                let _ = writeln!(f.text, "ldxw %r3, [%r6+12]");
            } else {
                let _ = writeln!(f.text, "mov %r3, {}", self.r.below(4));
            }
            let _ = writeln!(f.text, "call local {name}");
            if returns_ptr {
                let p = self.r.pick(f.pregs);
                let _ = writeln!(f.text, "jeq %r0, 0, {}\nmov %r{p}, %r0", f.end);
                f.end_used = true;
            }
        } else {
            self.f.bpf_loop = true;
            let name = self.callee(FnKind::Callback);
            if self.r.chance(50) {
                let _ = writeln!(f.text, "mov %r1, {}", 1 + self.r.below(5));
            } else {
                let _ = writeln!(f.text, "ldxw %r1, [%r6+8]\nand %r1, 7");
            }
            let _ = writeln!(f.text, "lddw %r2, func {name}\nmov %r3, %r10\nadd %r3, -24");
            let _ = writeln!(f.text, "mov %r4, 0\ncall 181");
        }
    }

    /// The label of a function of `kind`: an existing one or a new one.
    fn callee(&mut self, kind: FnKind) -> String {
        if let Some((name, _, _)) = self.funcs.iter().find(|(_, k, _)| *k == kind) {
            if self.r.chance(40) {
                return name.clone();
            }
        }
        let name = format!("f{}", self.funcs.len());
        self.funcs.push((name.clone(), kind, String::new()));
        let body = self.function(kind, &name);
        let slot = self.funcs.iter_mut().find(|(n, _, _)| *n == name);
        slot.expect("just pushed").2 = body;
        name
    }

    fn snippet(&mut self, f: &mut Func) {
        let calls = f.kind == FnKind::Main && self.funcs.len() < 3;
        match self.r.below(if calls { 21 } else { 18 }) {
            0..=3 => self.assign(f),
            4 => self.spill(f),
            5 => self.fill(f),
            6..=7 => {
                let p = self.r.pick(f.pregs);
                self.access(f, p);
            }
            8..=13 => self.compare(f),
            14..=17 => self.diamond(f),
            _ => self.call(f),
        }
    }

    /// The text of one function (starting with its label unless it is main).
    fn function(&mut self, kind: FnKind, name: &str) -> String {
        let mut f = Func {
            kind,
            end: format!("{name}_end"),
            text: String::new(),
            pregs: if kind == FnKind::Main {
                &[7, 8, 9]
            } else {
                &[7, 8]
            },
            slots: if kind == FnKind::Main {
                vec![(10, -24), (10, -16), (10, -8)]
            } else {
                vec![(6, 0), (6, 8), (6, 16), (10, -8)]
            },
            end_used: false,
        };
        match kind {
            FnKind::Main => {
                f.text.push_str("mov %r6, %r1\n");
                for (i, p) in [7, 8, 9].into_iter().enumerate() {
                    self.source(&mut f, p, i);
                }
                for (b, o) in f.slots.clone() {
                    let p = self.r.pick(f.pregs);
                    let _ = writeln!(f.text, "stxdw [%r{b}{o:+}], %r{p}");
                }
            }
            FnKind::Sub { .. } => {
                let o = self.r.pick(&[0, 8, 16]);
                let _ = writeln!(f.text, "{name}:\nmov %r6, %r2\nmov %r9, %r3\nmov %r7, %r1");
                let _ = writeln!(f.text, "ldxdw %r8, [%r6+{o}]\nstxdw [%r10-8], %r7");
            }
            FnKind::Callback => {
                let (o1, o2) = (self.r.pick(&[0, 8, 16]), self.r.pick(&[0, 8, 16]));
                let _ = writeln!(f.text, "{name}:\nmov %r6, %r2\nmov %r9, %r1");
                let _ = writeln!(f.text, "ldxdw %r7, [%r6+{o1}]\nldxdw %r8, [%r6+{o2}]");
                let _ = writeln!(f.text, "stxdw [%r10-8], %r8");
            }
        }
        let n = match kind {
            FnKind::Main if self.guided => 1 + self.r.below(4),
            FnKind::Main => 2 + self.r.below(6),
            _ => 1 + self.r.below(4),
        };
        // Guided programs have one guided diamond among their snippets.
        let guided_at = if kind == FnKind::Main && self.guided {
            self.r.below(n)
        } else {
            n
        };
        for i in 0..n {
            if i == guided_at {
                self.diamond(&mut f);
            } else {
                self.snippet(&mut f);
            }
        }
        let returned = match kind {
            FnKind::Sub { returns_ptr: true } => {
                let p = self.r.pick(f.pregs);
                let _ = writeln!(f.text, "mov %r0, %r{p}\nexit");
                true
            }
            FnKind::Callback if self.r.chance(20) => {
                let _ = writeln!(f.text, "mov %r0, %r9\nand %r0, 1\nexit");
                true
            }
            _ => false,
        };
        if !returned || f.end_used {
            let _ = writeln!(f.text, "{}:\nmov %r0, 0\nexit", f.end);
        }
        f.text
    }
}

/// A random program as assembler text, and what it exercises.
fn program(r: &mut Rng) -> (String, Features) {
    let guided = r.chance(35);
    let mut g = Gen {
        r,
        labels: 0,
        funcs: Vec::new(),
        guided,
        pair: None,
        diamond_pair: None,
        arm_direct: None,
        f: Features {
            guided,
            ..Features::default()
        },
    };
    let mut text = g.function(FnKind::Main, "main");
    for (_, _, body) in &g.funcs {
        text.push_str(body);
    }
    (text, g.f)
}

// ---------------------------------------------------------------------------------------
// Execution
// ---------------------------------------------------------------------------------------

/// The maps of one execution, as the lookup helper sees them.
struct World {
    /// Element addresses per map.
    elems: [Vec<u64>; 3],
    /// Which hash-map keys are present.
    present: Vec<bool>,
    /// Readable ranges a key may lie in.
    readable: Vec<(u64, u64)>,
    /// A helper misuse the verifier should have prevented.
    bad: Option<String>,
}

thread_local! {
    static WORLD: RefCell<Option<World>> = const { RefCell::new(None) };
}

extern "C" fn lookup(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    WORLD.with(|w| {
        let mut w = w.borrow_mut();
        let w = w.as_mut().expect("world set");
        let idx = map.wrapping_sub(HANDLE_BASE) as usize;
        if idx > GLOB {
            w.bad = Some(format!("lookup with map handle {map:#x}"));
            return 0;
        }
        if !w
            .readable
            .iter()
            .any(|&(s, l)| key >= s && key + 4 <= s + l)
        {
            w.bad = Some(format!("lookup key at {key:#x} outside every region"));
            return 0;
        }
        // SAFETY: the 4 bytes at `key` lie in a live region registered for this execution.
        let k = unsafe { std::ptr::read_unaligned(key as *const u32) } as usize;
        let found = k < w.elems[idx].len() && (idx != HASH || w.present[k]);
        if found {
            w.elems[idx][k]
        } else {
            0
        }
    })
}

/// Rewrites map references to handles and element-0 addresses, as the runtime's prepare.
fn prepare(insns: &[Insn], elems: &[Vec<u64>; 3]) -> Vec<Insn> {
    let mut out = insns.to_vec();
    let mut pc = 0;
    while pc + 1 < out.len() {
        if !out[pc].is_lddw() {
            pc += 1;
            continue;
        }
        let idx = out[pc].imm as usize;
        let v = if out[pc].src == LddwKind::MapIdx.src() {
            Some(HANDLE_BASE + idx as u64)
        } else if out[pc].src == LddwKind::MapIdxValue.src() {
            Some(elems[idx][0] + out[pc + 1].imm as u64)
        } else {
            None
        };
        if let Some(v) = v {
            out[pc].src = 0;
            out[pc].imm = v as u32 as i32;
            out[pc + 1].imm = (v >> 32) as u32 as i32;
        }
        pc += 2;
    }
    out
}

/// Runs `insns` once with inputs drawn from `seed` (`round` 0: zero ctx, every key present).
fn run_once(insns: &[Insn], helpers: &HelperTable, seed: u64, round: u64) -> Result<(), String> {
    let r = &mut Rng(seed);
    let mut ctx = [0u8; 72];
    if round > 0 {
        ctx.iter_mut().for_each(|b| *b = r.next() as u8);
    }
    let present: Vec<bool> = (0..HASH_N).map(|_| round == 0 || r.chance(60)).collect();
    let mut arr = vec![0u8; ARR_N * (ARR_VS + GAP)];
    let mut hash = vec![0u8; HASH_N * (HASH_VS + GAP)];
    let mut glob = vec![0u8; GLOB_VS + GAP];
    if round > 0 {
        for b in arr.iter_mut().chain(hash.iter_mut()).chain(glob.iter_mut()) {
            *b = r.next() as u8;
        }
    }
    let mut stack = vec![0u8; STACK_SIZE];
    let mut readable = vec![(stack.as_ptr() as u64, STACK_SIZE as u64)];
    let mut mem = Memory::new();
    let ctx_addr = mem.add_mut("ctx", &mut ctx);
    let mut elems: [Vec<u64>; 3] = Default::default();
    for (m, buf, vs) in [
        (ARR, &mut arr, ARR_VS),
        (HASH, &mut hash, HASH_VS),
        (GLOB, &mut glob, GLOB_VS),
    ] {
        for chunk in buf.chunks_exact_mut(vs + GAP) {
            let a = mem.add_mut("map value", &mut chunk[..vs]);
            readable.push((a, vs as u64));
            elems[m].push(a);
        }
    }
    let prepared = prepare(insns, &elems);
    WORLD.with(|w| {
        *w.borrow_mut() = Some(World {
            elems,
            present: present.clone(),
            readable,
            bad: None,
        })
    });
    let vm = Interpreter::new(Program::from_insns(&prepared).unwrap(), helpers.clone())
        .with_instruction_limit(1_000_000);
    let res = vm.execute(&[ctx_addr], &mut stack, &mem);
    let bad = WORLD.with(|w| w.borrow_mut().take().and_then(|w| w.bad));
    let err = match (res, bad) {
        (Err(e), _) => e.to_string(),
        (Ok(_), Some(b)) => b,
        (Ok(_), None) => return Ok(()),
    };
    Err(format!(
        "{err}\n(run {round}: ctx {ctx:02x?}, hash keys present {present:?})"
    ))
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(s) => {
            let s = s.trim();
            let v = match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            v.unwrap_or_else(|e| panic!("{name}={s}: {e}"))
        }
    }
}

#[test]
fn accepted_random_map_programs_never_fault() {
    let programs = env_u64("GPUBPF_SOUNDNESS_PROGRAMS", DEFAULT_PROGRAMS);
    let seed = env_u64("GPUBPF_SOUNDNESS_SEED", DEFAULT_SEED);
    let maps = maps();
    let ctx = verifier_support::test_ctx(ReturnRule::Any);
    let verifier = Verifier::new(&VerifierConfig {
        budget: 100_000,
        ..VerifierConfig::default()
    });
    let mut helpers = HelperTable::new();
    helpers.register(1, "bpf_map_lookup_elem", lookup);
    let start = Instant::now();
    let (mut accepted, mut runs, mut plain, mut plain_accepted) = (0u64, 0u64, 0u64, 0u64);
    let mut rejected: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut seen: BTreeMap<&'static str, u64> = BTreeMap::new();
    for n in 0..programs {
        if n > 0 && n % 1_000_000 == 0 {
            eprintln!(
                "soundness (maps): {n} programs, {accepted} accepted, {:.1?}",
                start.elapsed()
            );
        }
        let mut r = Rng(seed ^ n.wrapping_mul(0xd1b5_4a32_d192_ed03));
        let (text, features) = program(&mut r);
        plain += u64::from(!features.guided);
        let insns = gpubpf_isa::assemble(&text)
            .unwrap_or_else(|e| panic!("generated program #{n} does not assemble: {e}\n{text}"));
        let res = verifier.verify(&VerifyInput {
            insns: &insns,
            maps: &maps,
            ctx: &ctx,
            line_info: None,
        });
        let stats = match res {
            Ok(stats) => stats,
            Err(e) => {
                *rejected.entry(e.kind.name()).or_default() += 1;
                continue;
            }
        };
        // As the runtime does: code no explored path reached becomes a trap, so running it
        // is a failure too (a wrong static decision or prune), even where it is harmless.
        let sanitized = sanitize_dead_code(&insns, &stats.unreached);
        accepted += 1;
        plain_accepted += u64::from(!features.guided);
        for (name, on) in [
            ("ptr_cmp", features.ptr_cmp),
            ("diamond", features.diamond),
            ("call", features.call),
            ("bpf_loop", features.bpf_loop),
            ("guided", features.guided),
            ("dead_code", !stats.unreached.is_empty()),
        ] {
            *seen.entry(name).or_default() += u64::from(on);
        }
        for round in 0..RUNS {
            runs += 1;
            let input = r.next();
            if let Err(e) = run_once(&sanitized, &helpers, input, round) {
                let raw = run_once(&insns, &helpers, input, round).err();
                panic!(
                    "program #{n} (GPUBPF_SOUNDNESS_SEED={seed:#x}) was accepted but faulted \
                     after {:.1?} ({accepted} accepted of {} programs): {e}\nunsanitized \
                     (dead code not trapped): {}\nunreached: {:?}\n{text}",
                    start.elapsed(),
                    n + 1,
                    raw.as_deref().unwrap_or("no fault"),
                    stats.unreached,
                );
            }
        }
    }
    let total_rejected: u64 = rejected.values().sum();
    eprintln!(
        "soundness (maps): seed {seed:#x}, {programs} programs in {:.1?}: {accepted} accepted \
         ({plain_accepted} of {plain} unguided; {runs} runs; with {seen:?}), {total_rejected} \
         rejected: {rejected:?}",
        start.elapsed()
    );
    // Guided programs take direct values of the multi-entry array, which a verifier may
    // reject outright; the others must mostly pass.
    assert!(
        accepted * 10 >= programs && plain_accepted * 6 >= plain,
        "too few accepted programs ({accepted} of {programs}, {plain_accepted} of {plain} \
         unguided) to be meaningful"
    );
    assert!(
        total_rejected * 10 >= programs,
        "too few rejected programs ({total_rejected} of {programs}): the generator is too tame"
    );
    for (name, count) in &seen {
        if *name != "guided" {
            assert!(
                count * 100 >= programs,
                "too few accepted programs with {name} ({count} of {programs})"
            );
        }
    }
}
