//! The abstract machine state: register types, stack slots, call frames, references.

#![deny(clippy::arithmetic_side_effects)]

use std::sync::Arc;

use crate::scalar::Scalar;
use crate::MapInfo;

/// Bytes of stack per frame.
pub const STACK_BYTES: i64 = 512;
/// Slots (8 bytes each) per frame.
pub const STACK_SLOTS: usize = 64;
/// Maximum number of call frames.
pub const MAX_FRAMES: usize = 8;

/// What a register holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegType {
    /// Never written on this path (or clobbered by a call).
    NotInit,
    /// A number.
    Scalar,
    /// The program context (`r1` at entry).
    Ctx,
    /// The stack of frame `frame`.
    Stack { frame: u8 },
    /// A map value of map `map` (index into the map list).
    MapValue { map: u32 },
    /// A map value of map `map`, or NULL.
    MapValueOrNull { map: u32 },
    /// A map handle.
    MapPtr { map: u32 },
    /// A ring-buffer record of `size` bytes.
    RingbufMem { size: u32 },
    /// A ring-buffer record of `size` bytes, or NULL.
    RingbufMemOrNull { size: u32 },
    /// The address of the subprogram starting at slot `pc`.
    Func { pc: u32 },
}

impl RegType {
    /// Whether the register holds a pointer (anything but a scalar or nothing).
    pub fn is_pointer(self) -> bool {
        !matches!(self, RegType::NotInit | RegType::Scalar)
    }

    /// Whether the value may be NULL.
    pub fn is_or_null(self) -> bool {
        matches!(
            self,
            RegType::MapValueOrNull { .. } | RegType::RingbufMemOrNull { .. }
        )
    }

    /// Kernel-style short name.
    pub fn name(self) -> &'static str {
        match self {
            RegType::NotInit => "uninit",
            RegType::Scalar => "scalar",
            RegType::Ctx => "ctx",
            RegType::Stack { .. } => "fp",
            RegType::MapValue { .. } => "map_value",
            RegType::MapValueOrNull { .. } => "map_value_or_null",
            RegType::MapPtr { .. } => "map_ptr",
            RegType::RingbufMem { .. } => "ringbuf_mem",
            RegType::RingbufMemOrNull { .. } => "ringbuf_mem_or_null",
            RegType::Func { .. } => "func",
        }
    }
}

/// One register's abstract value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    pub ty: RegType,
    /// Fixed offset (pointers only).
    pub off: i64,
    /// The value (scalars) or the variable offset (pointers).
    pub val: Scalar,
    /// Identity shared by copies: or-null pointers (for null checks) and scalars (for
    /// range propagation between copies). 0 = none.
    pub id: u32,
    /// Reference (ring-buffer reservation) this pointer belongs to; 0 = none.
    pub ref_id: u32,
}

impl Reg {
    pub const NOT_INIT: Reg = Reg {
        ty: RegType::NotInit,
        off: 0,
        val: Scalar::UNKNOWN,
        id: 0,
        ref_id: 0,
    };

    pub const fn scalar(val: Scalar) -> Reg {
        Reg {
            ty: RegType::Scalar,
            off: 0,
            val,
            id: 0,
            ref_id: 0,
        }
    }

    pub const fn unknown() -> Reg {
        Reg::scalar(Scalar::UNKNOWN)
    }

    pub const fn ptr(ty: RegType, off: i64) -> Reg {
        Reg {
            ty,
            off,
            val: Scalar::konst(0),
            id: 0,
            ref_id: 0,
        }
    }

    pub fn is_scalar(&self) -> bool {
        self.ty == RegType::Scalar
    }

    /// Whether this is a scalar known to be `v`.
    pub fn is_const(&self, v: u64) -> bool {
        self.is_scalar() && self.val.equals(v)
    }

    /// Renders the value kernel-style (`scalar(umax=255)`, `fp-8`, `map_value(map=m,off=0)`).
    pub fn render(&self, maps: &[MapInfo]) -> String {
        let map_name = |m: u32| {
            maps.get(m as usize)
                .map(|i| i.name.clone())
                .unwrap_or_else(|| format!("#{m}"))
        };
        let var = if self.val.equals(0) {
            String::new()
        } else {
            format!(",var_off={}", self.val)
        };
        let id = if self.id != 0 {
            format!(",id={}", self.id)
        } else {
            String::new()
        };
        let rf = if self.ref_id != 0 {
            format!(",ref_obj_id={}", self.ref_id)
        } else {
            String::new()
        };
        match self.ty {
            RegType::NotInit => "uninit".into(),
            RegType::Scalar => {
                let s = self.val.to_string();
                if self.id != 0 {
                    format!("{s}(id={})", self.id)
                } else {
                    s
                }
            }
            RegType::Ctx => format!("ctx(off={}{var})", self.off),
            RegType::Stack { frame } => {
                let f = if frame == 0 {
                    String::new()
                } else {
                    format!("[frame{frame}]")
                };
                if self.val.equals(0) {
                    format!("fp{}{f}", self.off)
                } else {
                    format!("fp(off={}{var}){f}", self.off)
                }
            }
            RegType::MapValue { map } | RegType::MapValueOrNull { map } => {
                let (ks, vs) = maps
                    .get(map as usize)
                    .map(|m| (m.key_size, m.value_size))
                    .unwrap_or((0, 0));
                format!(
                    "{}(map={},ks={ks},vs={vs},off={}{var}{id})",
                    self.ty.name(),
                    map_name(map),
                    self.off
                )
            }
            RegType::MapPtr { map } => format!("map_ptr({})", map_name(map)),
            RegType::RingbufMem { size } | RegType::RingbufMemOrNull { size } => format!(
                "{}(sz={size},off={}{var}{id}{rf})",
                self.ty.name(),
                self.off
            ),
            RegType::Func { pc } => format!("func(pc={pc})"),
        }
    }
}

/// What one stack byte holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteKind {
    /// Never written.
    Invalid,
    /// Some scalar data.
    Misc,
    /// Known zero.
    Zero,
    /// Part of a spilled register (see [`Slot::spill`]).
    Spill,
}

/// An 8-byte stack slot. Byte 0 is the lowest address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    pub bytes: [ByteKind; 8],
    /// A spilled register: its full state, stored in the low `spill_size` bytes (8 for any
    /// register, 4 for the low half of a scalar).
    pub spill: Option<Reg>,
    pub spill_size: u8,
}

impl Slot {
    pub const EMPTY: Slot = Slot {
        bytes: [ByteKind::Invalid; 8],
        spill: None,
        spill_size: 0,
    };

    /// Whether a pointer is spilled here.
    pub fn holds_pointer(&self) -> bool {
        self.spill.is_some_and(|r| r.ty.is_pointer())
    }
}

/// Why a frame exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// The entry function.
    Main,
    /// A bpf-to-bpf call.
    Local,
    /// A `bpf_loop` callback; refs must balance at its exit.
    Callback { refs_at_entry: u32 },
}

/// One call frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub regs: [Reg; 11],
    /// Slot `i` covers bytes `[-8(i+1), -8i)` relative to this frame's r10. Shared between
    /// the copies of a state (every branch and checkpoint copies one) until one of them
    /// writes it ([`Frame::slot_mut`], copy on write).
    pub stack: Arc<Vec<Slot>>,
    /// The call instruction in the caller (unused for the entry frame).
    pub callsite: usize,
    /// First slot of the subprogram this frame runs.
    pub subprog: usize,
    pub kind: FrameKind,
    /// Identity of the `bpf_loop` invocation this frame is inside (see the engine).
    pub loop_inv: u32,
}

impl Frame {
    pub fn new(frameno: u8, callsite: usize, subprog: usize, kind: FrameKind) -> Frame {
        let mut regs = [Reg::NOT_INIT; 11];
        regs[10] = Reg::ptr(RegType::Stack { frame: frameno }, 0);
        Frame {
            regs,
            stack: Arc::new(Vec::new()),
            callsite,
            subprog,
            kind,
            loop_inv: 0,
        }
    }

    /// The slot at index `spi`, if allocated.
    pub fn slot(&self, spi: usize) -> &Slot {
        self.stack.get(spi).unwrap_or(&Slot::EMPTY)
    }

    /// The slot at index `spi`, allocating up to it.
    pub fn slot_mut(&mut self, spi: usize) -> &mut Slot {
        let stack = Arc::make_mut(&mut self.stack);
        if stack.len() <= spi {
            stack.resize(spi.saturating_add(1), Slot::EMPTY);
        }
        &mut stack[spi]
    }

    /// Kind of the byte at frame offset `off` (negative).
    pub fn byte(&self, off: i64) -> ByteKind {
        let (spi, b) = slot_of(off);
        self.slot(spi).bytes[b]
    }
}

/// Slot index and byte index within it of frame offset `off` (`-512..=-1`).
pub fn slot_of(off: i64) -> (usize, usize) {
    let pos = off
        .saturating_add(STACK_BYTES)
        .clamp(0, STACK_BYTES.saturating_sub(1)); // 0..512
    let from_top = STACK_BYTES.saturating_sub(1).saturating_sub(pos); // 0 for off = -1
    let spi = (from_top / 8) as usize;
    let byte = (pos % 8) as usize;
    (spi, byte)
}

/// An acquired reference (ring-buffer reservation) that must be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RefEntry {
    pub id: u32,
    /// Instruction that acquired it.
    pub pc: usize,
}

/// The whole abstract state at one program point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub frames: Vec<Frame>,
    pub refs: Vec<RefEntry>,
}

impl State {
    /// The current (innermost) frame.
    pub fn cur(&self) -> &Frame {
        self.frames.last().expect("a state always has a frame")
    }

    pub fn cur_mut(&mut self) -> &mut Frame {
        self.frames.last_mut().expect("a state always has a frame")
    }

    pub fn curframe(&self) -> usize {
        self.frames.len().saturating_sub(1)
    }

    pub fn reg(&self, r: u8) -> &Reg {
        &self.cur().regs[usize::from(r) % 11]
    }

    pub fn reg_mut(&mut self, r: u8) -> &mut Reg {
        &mut self.cur_mut().regs[usize::from(r) % 11]
    }

    /// Applies `f` to every register and spilled register in every frame.
    pub fn for_each_reg(&mut self, mut f: impl FnMut(&mut Reg)) {
        let mut changed: Vec<(usize, Reg)> = Vec::new();
        for fr in &mut self.frames {
            for r in &mut fr.regs {
                f(r);
            }
            // `f` runs once per spilled register, on a copy; the stack (shared with other
            // states) is written only where it changed one.
            changed.clear();
            for (i, s) in fr.stack.iter().enumerate() {
                if let Some(r) = s.spill {
                    let mut new = r;
                    f(&mut new);
                    if new != r {
                        changed.push((i, new));
                    }
                }
            }
            if !changed.is_empty() {
                let stack = Arc::make_mut(&mut fr.stack);
                for &(i, new) in &changed {
                    if let Some(spill) = stack.get_mut(i).and_then(|s| s.spill.as_mut()) {
                        *spill = new;
                    }
                }
            }
        }
    }

    /// Drops every spilled register for which `dead` holds (its bytes become unreadable),
    /// and turns every such register into "not initialised".
    pub fn invalidate(&mut self, dead: impl Fn(&Reg) -> bool) {
        for fr in &mut self.frames {
            for r in &mut fr.regs {
                if dead(r) {
                    *r = Reg::NOT_INIT;
                }
            }
            if !fr.stack.iter().any(|s| s.spill.as_ref().is_some_and(&dead)) {
                continue;
            }
            for s in Arc::make_mut(&mut fr.stack).iter_mut() {
                if s.spill.as_ref().is_some_and(&dead) {
                    s.spill = None;
                    s.spill_size = 0;
                    for b in &mut s.bytes {
                        if *b == ByteKind::Spill {
                            *b = ByteKind::Invalid;
                        }
                    }
                }
            }
        }
    }
}
