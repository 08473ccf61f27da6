//! Raw 8-byte instruction slots and their strict decoding into [`Instruction`].
//!
//! A program is a sequence of 8-byte slots ([`Insn`]). Every instruction occupies one slot
//! except `lddw`, which occupies two (the second slot carries the upper 32 bits of the
//! immediate). Decoding is strict: every field that RFC 9669 declares unused must be zero,
//! so an encoding that another implementation might silently accept is an error here.

use crate::opcode::*;

pub use crate::encode::encode_program;

/// Number of registers (r0..=r10).
pub const NUM_REGS: u8 = 11;
/// The read-only frame pointer.
pub const FRAME_POINTER: u8 = 10;

/// One raw 8-byte instruction slot, exactly as stored in an object file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode byte.
    pub opc: u8,
    /// Destination register (low nibble of byte 1).
    pub dst: u8,
    /// Source register (high nibble of byte 1).
    pub src: u8,
    /// Signed 16-bit offset.
    pub off: i16,
    /// Signed 32-bit immediate.
    pub imm: i32,
}

impl Insn {
    /// Size of one slot in bytes.
    pub const SIZE: usize = 8;

    /// Builds a slot from its fields.
    pub const fn new(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            opc,
            dst,
            src,
            off,
            imm,
        }
    }

    /// Decodes one slot from its little-endian byte form.
    pub fn from_bytes(b: [u8; 8]) -> Self {
        Self {
            opc: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes the slot into its little-endian byte form.
    pub fn to_bytes(&self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.opc,
            (self.dst & 0x0f) | (self.src << 4),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }

    /// The instruction class (`opc & 0x07`).
    pub const fn class(&self) -> u8 {
        self.opc & CLASS_MASK
    }

    /// Whether this slot starts a two-slot `lddw`.
    pub const fn is_lddw(&self) -> bool {
        self.opc == LDDW
    }
}

/// Splits a byte buffer into instruction slots. The length must be a multiple of 8.
pub fn slots_from_bytes(bytes: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    if bytes.len() % Insn::SIZE != 0 {
        return Err(DecodeError::TrailingBytes { len: bytes.len() });
    }
    Ok(bytes
        .chunks_exact(Insn::SIZE)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            Insn::from_bytes(b)
        })
        .collect())
}

/// Concatenates the byte forms of `insns`.
pub fn slots_to_bytes(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

/// An error decoding an instruction stream. `pc` is the slot index of the instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("program length {len} is not a multiple of 8 bytes")]
    TrailingBytes { len: usize },
    #[error("instruction {pc}: unknown opcode {opc:#04x}")]
    UnknownOpcode { pc: usize, opc: u8 },
    #[error("instruction {pc}: invalid register r{reg} in `{field}` (registers are r0..r10)")]
    InvalidRegister {
        pc: usize,
        field: &'static str,
        reg: u8,
    },
    #[error(
        "instruction {pc}: opcode {opc:#04x}: unused field `{field}` must be zero (found {value})"
    )]
    NonZeroField {
        pc: usize,
        opc: u8,
        field: &'static str,
        value: i64,
    },
    #[error("instruction {pc}: opcode {opc:#04x}: invalid `{field}` value {value}")]
    InvalidField {
        pc: usize,
        opc: u8,
        field: &'static str,
        value: i64,
    },
    #[error("instruction {pc}: `lddw` is missing its second slot")]
    TruncatedLddw { pc: usize },
    #[error("instruction {pc}: second slot of `lddw` must have opcode, registers and offset zero")]
    BadLddwSecondSlot { pc: usize },
    #[error("instruction {pc}: legacy packet access (`BPF_ABS`/`BPF_IND`) is not supported")]
    LegacyPacketAccess { pc: usize },
}

/// Operation width of arithmetic and conditional jumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// 32-bit operation on the low halves; ALU results are zero-extended.
    W32,
    /// 64-bit operation.
    W64,
}

/// Second operand of arithmetic, jumps and `st`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    Reg(u8),
    Imm(i32),
}

/// Arithmetic operations (all but `neg`, `movsx` and byte swaps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    Add,
    Sub,
    Mul,
    Div,
    SDiv,
    Or,
    And,
    Lsh,
    Rsh,
    Mod,
    SMod,
    Xor,
    Mov,
    Arsh,
}

/// Byte-order conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteSwap {
    /// `le16/32/64`: convert host (little-endian) to little-endian, i.e. truncate.
    ToLe,
    /// `be16/32/64`: convert to big-endian.
    ToBe,
    /// `bswap16/32/64` (ISA v4): unconditional swap.
    Swap,
}

/// Memory access sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    B,
    H,
    W,
    DW,
}

impl Size {
    /// Size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    fn from_bits(bits: u8) -> Self {
        match bits & SIZE_MASK {
            BPF_B => Size::B,
            BPF_H => Size::H,
            BPF_W => Size::W,
            _ => Size::DW,
        }
    }

    pub(crate) const fn bits(self) -> u8 {
        match self {
            Size::B => BPF_B,
            Size::H => BPF_H,
            Size::W => BPF_W,
            Size::DW => BPF_DW,
        }
    }
}

/// Conditions of conditional jumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JmpCond {
    Eq,
    Gt,
    Ge,
    Set,
    Ne,
    Sgt,
    Sge,
    Lt,
    Le,
    Slt,
    Sle,
}

/// Atomic read-modify-write operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Add,
    Or,
    And,
    Xor,
    /// Exchange; always fetches.
    Xchg,
    /// Compare `r0` with memory and exchange on equality; always fetches into `r0`.
    CmpXchg,
}

/// What the 64-bit immediate of `lddw` means (its `src` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LddwKind {
    /// A plain 64-bit constant.
    Imm,
    /// `imm` is a map fd (an index into the program's map table).
    MapFd,
    /// `imm` is a map fd and `next_imm` an offset into the map's value.
    MapValue,
    /// `imm` is a BTF id.
    BtfId,
    /// `imm` is the relative instruction offset of a subprogram.
    Func,
    /// `imm` is a map index.
    MapIdx,
    /// `imm` is a map index and `next_imm` an offset into the map's value.
    MapIdxValue,
}

impl LddwKind {
    /// The kind an `lddw` source field encodes, `None` for an undefined one.
    pub fn from_src(src: u8) -> Option<Self> {
        Some(match src {
            BPF_PSEUDO_NONE => LddwKind::Imm,
            BPF_PSEUDO_MAP_FD => LddwKind::MapFd,
            BPF_PSEUDO_MAP_VALUE => LddwKind::MapValue,
            BPF_PSEUDO_BTF_ID => LddwKind::BtfId,
            BPF_PSEUDO_FUNC => LddwKind::Func,
            BPF_PSEUDO_MAP_IDX => LddwKind::MapIdx,
            BPF_PSEUDO_MAP_IDX_VALUE => LddwKind::MapIdxValue,
            _ => return None,
        })
    }

    /// The `src` field encoding this kind.
    pub const fn src(self) -> u8 {
        match self {
            LddwKind::Imm => BPF_PSEUDO_NONE,
            LddwKind::MapFd => BPF_PSEUDO_MAP_FD,
            LddwKind::MapValue => BPF_PSEUDO_MAP_VALUE,
            LddwKind::BtfId => BPF_PSEUDO_BTF_ID,
            LddwKind::Func => BPF_PSEUDO_FUNC,
            LddwKind::MapIdx => BPF_PSEUDO_MAP_IDX,
            LddwKind::MapIdxValue => BPF_PSEUDO_MAP_IDX_VALUE,
        }
    }
}

/// Target of a `call` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallTarget {
    /// A helper by its static id.
    Helper(i32),
    /// A program-local function; the value is relative to the next instruction.
    Local(i32),
    /// A kernel function by BTF id (never executable in gpubpf; kept for diagnostics).
    Kfunc(i32),
}

/// A decoded instruction. Register numbers are validated (`0..=10`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `dst = dst op src` (or `dst = src` for `Mov`).
    Alu {
        width: Width,
        op: AluOp,
        dst: u8,
        src: Operand,
    },
    /// `dst = -dst`.
    Neg { width: Width, dst: u8 },
    /// `dst = (sign-extended bits of src)`; `bits` is 8, 16 or (64-bit only) 32.
    MovSx {
        width: Width,
        dst: u8,
        src: u8,
        bits: u8,
    },
    /// Byte-order conversion of the low `bits` (16, 32, 64) of `dst`.
    Endian { kind: ByteSwap, bits: u8, dst: u8 },
    /// `lddw dst, imm64` in one of its pseudo forms; occupies two slots.
    LoadImm64 {
        dst: u8,
        kind: LddwKind,
        imm: i32,
        next_imm: i32,
    },
    /// `dst = *(size *)(src + off)`, optionally sign-extending (ISA v4 `ldxs*`).
    Load {
        size: Size,
        sign_extend: bool,
        dst: u8,
        src: u8,
        off: i16,
    },
    /// `*(size *)(dst + off) = src`.
    Store {
        size: Size,
        dst: u8,
        off: i16,
        src: Operand,
    },
    /// Atomic read-modify-write on `*(size *)(dst + off)` with `src`.
    Atomic {
        size: Size,
        op: AtomicOp,
        fetch: bool,
        dst: u8,
        src: u8,
        off: i16,
    },
    /// Unconditional jump; `long` marks the 32-bit-offset `gotol`/`ja32` form.
    Ja { off: i32, long: bool },
    /// Conditional jump to `pc + 1 + off`.
    Jump {
        width: Width,
        cond: JmpCond,
        dst: u8,
        src: Operand,
        off: i16,
    },
    /// Helper or local call.
    Call(CallTarget),
    /// Register-indirect call (`callx`), the target in `reg`.
    Callx { reg: u8 },
    /// Return `r0` from the current function.
    Exit,
}

fn check_reg(pc: usize, field: &'static str, reg: u8) -> Result<u8, DecodeError> {
    if reg < NUM_REGS {
        Ok(reg)
    } else {
        Err(DecodeError::InvalidRegister { pc, field, reg })
    }
}

fn zero(pc: usize, opc: u8, field: &'static str, value: i64) -> Result<(), DecodeError> {
    if value == 0 {
        Ok(())
    } else {
        Err(DecodeError::NonZeroField {
            pc,
            opc,
            field,
            value,
        })
    }
}

fn invalid(pc: usize, opc: u8, field: &'static str, value: i64) -> DecodeError {
    DecodeError::InvalidField {
        pc,
        opc,
        field,
        value,
    }
}

impl Instruction {
    /// Number of 8-byte slots this instruction occupies (2 for `lddw`, else 1).
    pub const fn slots(&self) -> usize {
        match self {
            Instruction::LoadImm64 { .. } => 2,
            _ => 1,
        }
    }

    /// Decodes the instruction starting at slot `pc` of `insns`, strictly.
    pub fn decode(insns: &[Insn], pc: usize) -> Result<Instruction, DecodeError> {
        let Some(i) = insns.get(pc).copied() else {
            return Err(DecodeError::TruncatedLddw { pc });
        };
        let opc = i.opc;
        let unknown = || DecodeError::UnknownOpcode { pc, opc };
        match i.class() {
            BPF_ALU | BPF_ALU64 => decode_alu(i, pc),
            BPF_JMP | BPF_JMP32 => decode_jmp(i, pc),
            BPF_LD => {
                if opc != LDDW {
                    return match opc & MODE_MASK {
                        BPF_ABS | BPF_IND => Err(DecodeError::LegacyPacketAccess { pc }),
                        _ => Err(unknown()),
                    };
                }
                let dst = check_reg(pc, "dst", i.dst)?;
                zero(pc, opc, "offset", i.off.into())?;
                let kind = LddwKind::from_src(i.src)
                    .ok_or_else(|| invalid(pc, opc, "src", i.src.into()))?;
                let Some(next) = insns.get(pc + 1).copied() else {
                    return Err(DecodeError::TruncatedLddw { pc });
                };
                if next.opc != 0 || next.dst != 0 || next.src != 0 || next.off != 0 {
                    return Err(DecodeError::BadLddwSecondSlot { pc });
                }
                // Only plain constants and map-value forms use the second immediate.
                if !matches!(
                    kind,
                    LddwKind::Imm | LddwKind::MapValue | LddwKind::MapIdxValue
                ) {
                    zero(pc, opc, "imm of the second slot", next.imm.into())?;
                }
                Ok(Instruction::LoadImm64 {
                    dst,
                    kind,
                    imm: i.imm,
                    next_imm: next.imm,
                })
            }
            BPF_LDX => {
                let sign_extend = match opc & MODE_MASK {
                    BPF_MEM => false,
                    BPF_MEMSX => true,
                    _ => return Err(unknown()),
                };
                let size = Size::from_bits(opc);
                if sign_extend && size == Size::DW {
                    return Err(unknown());
                }
                let dst = check_reg(pc, "dst", i.dst)?;
                let src = check_reg(pc, "src", i.src)?;
                zero(pc, opc, "imm", i.imm.into())?;
                Ok(Instruction::Load {
                    size,
                    sign_extend,
                    dst,
                    src,
                    off: i.off,
                })
            }
            BPF_ST => {
                if opc & MODE_MASK != BPF_MEM {
                    return Err(unknown());
                }
                let dst = check_reg(pc, "dst", i.dst)?;
                zero(pc, opc, "src", i.src.into())?;
                Ok(Instruction::Store {
                    size: Size::from_bits(opc),
                    dst,
                    off: i.off,
                    src: Operand::Imm(i.imm),
                })
            }
            _ => {
                // BPF_STX
                let dst = check_reg(pc, "dst", i.dst)?;
                let src = check_reg(pc, "src", i.src)?;
                let size = Size::from_bits(opc);
                match opc & MODE_MASK {
                    BPF_MEM => {
                        zero(pc, opc, "imm", i.imm.into())?;
                        Ok(Instruction::Store {
                            size,
                            dst,
                            off: i.off,
                            src: Operand::Reg(src),
                        })
                    }
                    BPF_ATOMIC => {
                        if !matches!(size, Size::W | Size::DW) {
                            return Err(unknown());
                        }
                        let (op, fetch) = match i.imm {
                            x if x == BPF_ATOMIC_ADD => (AtomicOp::Add, false),
                            x if x == BPF_ATOMIC_ADD | BPF_FETCH => (AtomicOp::Add, true),
                            x if x == BPF_ATOMIC_OR => (AtomicOp::Or, false),
                            x if x == BPF_ATOMIC_OR | BPF_FETCH => (AtomicOp::Or, true),
                            x if x == BPF_ATOMIC_AND => (AtomicOp::And, false),
                            x if x == BPF_ATOMIC_AND | BPF_FETCH => (AtomicOp::And, true),
                            x if x == BPF_ATOMIC_XOR => (AtomicOp::Xor, false),
                            x if x == BPF_ATOMIC_XOR | BPF_FETCH => (AtomicOp::Xor, true),
                            x if x == BPF_XCHG => (AtomicOp::Xchg, true),
                            x if x == BPF_CMPXCHG => (AtomicOp::CmpXchg, true),
                            x => return Err(invalid(pc, opc, "imm", x.into())),
                        };
                        Ok(Instruction::Atomic {
                            size,
                            op,
                            fetch,
                            dst,
                            src,
                            off: i.off,
                        })
                    }
                    _ => Err(unknown()),
                }
            }
        }
    }
}

fn operand(i: Insn, pc: usize) -> Result<Operand, DecodeError> {
    if i.opc & SRC_MASK == BPF_X {
        zero(pc, i.opc, "imm", i.imm.into())?;
        Ok(Operand::Reg(check_reg(pc, "src", i.src)?))
    } else {
        zero(pc, i.opc, "src", i.src.into())?;
        Ok(Operand::Imm(i.imm))
    }
}

fn decode_alu(i: Insn, pc: usize) -> Result<Instruction, DecodeError> {
    let opc = i.opc;
    let width = if i.class() == BPF_ALU64 {
        Width::W64
    } else {
        Width::W32
    };
    let dst = check_reg(pc, "dst", i.dst)?;
    let code = opc & OP_MASK;
    let plain = |op: AluOp| -> Result<Instruction, DecodeError> {
        zero(pc, opc, "offset", i.off.into())?;
        Ok(Instruction::Alu {
            width,
            op,
            dst,
            src: operand(i, pc)?,
        })
    };
    match code {
        BPF_ADD => plain(AluOp::Add),
        BPF_SUB => plain(AluOp::Sub),
        BPF_MUL => plain(AluOp::Mul),
        BPF_OR => plain(AluOp::Or),
        BPF_AND => plain(AluOp::And),
        BPF_LSH => plain(AluOp::Lsh),
        BPF_RSH => plain(AluOp::Rsh),
        BPF_XOR => plain(AluOp::Xor),
        BPF_ARSH => plain(AluOp::Arsh),
        BPF_DIV | BPF_MOD => {
            let signed = match i.off {
                0 => false,
                1 => true,
                v => return Err(invalid(pc, opc, "offset", v.into())),
            };
            let op = match (code, signed) {
                (BPF_DIV, false) => AluOp::Div,
                (BPF_DIV, true) => AluOp::SDiv,
                (_, false) => AluOp::Mod,
                (_, true) => AluOp::SMod,
            };
            Ok(Instruction::Alu {
                width,
                op,
                dst,
                src: operand(i, pc)?,
            })
        }
        BPF_MOV => {
            if i.off == 0 {
                return plain(AluOp::Mov);
            }
            if opc & SRC_MASK != BPF_X {
                return Err(DecodeError::NonZeroField {
                    pc,
                    opc,
                    field: "offset",
                    value: i.off.into(),
                });
            }
            let bits = match (width, i.off) {
                (_, 8) => 8,
                (_, 16) => 16,
                (Width::W64, 32) => 32,
                (_, v) => return Err(invalid(pc, opc, "offset", v.into())),
            };
            zero(pc, opc, "imm", i.imm.into())?;
            Ok(Instruction::MovSx {
                width,
                dst,
                src: check_reg(pc, "src", i.src)?,
                bits,
            })
        }
        BPF_NEG => {
            if opc & SRC_MASK != BPF_K {
                return Err(DecodeError::UnknownOpcode { pc, opc });
            }
            zero(pc, opc, "src", i.src.into())?;
            zero(pc, opc, "offset", i.off.into())?;
            zero(pc, opc, "imm", i.imm.into())?;
            Ok(Instruction::Neg { width, dst })
        }
        BPF_END => {
            let kind = match (width, opc & SRC_MASK) {
                (Width::W32, BPF_TO_LE) => ByteSwap::ToLe,
                (Width::W32, _) => ByteSwap::ToBe,
                (Width::W64, BPF_TO_LE) => ByteSwap::Swap,
                (Width::W64, _) => return Err(DecodeError::UnknownOpcode { pc, opc }),
            };
            zero(pc, opc, "src", i.src.into())?;
            zero(pc, opc, "offset", i.off.into())?;
            let bits = match i.imm {
                16 => 16,
                32 => 32,
                64 => 64,
                v => return Err(invalid(pc, opc, "imm", v.into())),
            };
            Ok(Instruction::Endian { kind, bits, dst })
        }
        _ => Err(DecodeError::UnknownOpcode { pc, opc }),
    }
}

fn decode_jmp(i: Insn, pc: usize) -> Result<Instruction, DecodeError> {
    let opc = i.opc;
    let is32 = i.class() == BPF_JMP32;
    let width = if is32 { Width::W32 } else { Width::W64 };
    let code = opc & OP_MASK;
    let cond = match code {
        BPF_JA => {
            if opc & SRC_MASK != BPF_K {
                return Err(DecodeError::UnknownOpcode { pc, opc });
            }
            zero(pc, opc, "dst", i.dst.into())?;
            zero(pc, opc, "src", i.src.into())?;
            return if is32 {
                zero(pc, opc, "offset", i.off.into())?;
                Ok(Instruction::Ja {
                    off: i.imm,
                    long: true,
                })
            } else {
                zero(pc, opc, "imm", i.imm.into())?;
                Ok(Instruction::Ja {
                    off: i.off.into(),
                    long: false,
                })
            };
        }
        BPF_CALL => {
            if is32 {
                return Err(DecodeError::UnknownOpcode { pc, opc });
            }
            zero(pc, opc, "offset", i.off.into())?;
            if opc & SRC_MASK == BPF_X {
                zero(pc, opc, "src", i.src.into())?;
                zero(pc, opc, "imm", i.imm.into())?;
                return Ok(Instruction::Callx {
                    reg: check_reg(pc, "dst", i.dst)?,
                });
            }
            zero(pc, opc, "dst", i.dst.into())?;
            let target = match i.src {
                BPF_PSEUDO_HELPER => CallTarget::Helper(i.imm),
                BPF_PSEUDO_CALL => CallTarget::Local(i.imm),
                BPF_PSEUDO_KFUNC_CALL => CallTarget::Kfunc(i.imm),
                s => return Err(invalid(pc, opc, "src", s.into())),
            };
            return Ok(Instruction::Call(target));
        }
        BPF_EXIT => {
            if is32 || opc & SRC_MASK != BPF_K {
                return Err(DecodeError::UnknownOpcode { pc, opc });
            }
            zero(pc, opc, "dst", i.dst.into())?;
            zero(pc, opc, "src", i.src.into())?;
            zero(pc, opc, "offset", i.off.into())?;
            zero(pc, opc, "imm", i.imm.into())?;
            return Ok(Instruction::Exit);
        }
        BPF_JEQ => JmpCond::Eq,
        BPF_JGT => JmpCond::Gt,
        BPF_JGE => JmpCond::Ge,
        BPF_JSET => JmpCond::Set,
        BPF_JNE => JmpCond::Ne,
        BPF_JSGT => JmpCond::Sgt,
        BPF_JSGE => JmpCond::Sge,
        BPF_JLT => JmpCond::Lt,
        BPF_JLE => JmpCond::Le,
        BPF_JSLT => JmpCond::Slt,
        BPF_JSLE => JmpCond::Sle,
        _ => return Err(DecodeError::UnknownOpcode { pc, opc }),
    };
    Ok(Instruction::Jump {
        width,
        cond,
        dst: check_reg(pc, "dst", i.dst)?,
        src: operand(i, pc)?,
        off: i.off,
    })
}

/// Decodes a whole slot stream: returns `(pc, instruction)` for every instruction, where
/// `pc` is the slot index (the second slot of `lddw` has no entry of its own).
pub fn decode_program(insns: &[Insn]) -> Result<Vec<(usize, Instruction)>, DecodeError> {
    let mut out = Vec::with_capacity(insns.len());
    let mut pc = 0;
    while pc < insns.len() {
        let ins = Instruction::decode(insns, pc)?;
        out.push((pc, ins));
        pc += ins.slots();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_round_trip() {
        let i = Insn::new(0xb7, 3, 0, -5, -77);
        assert_eq!(Insn::from_bytes(i.to_bytes()), i);
    }

    #[test]
    fn decode_rejects_nonzero_offset_on_add() {
        let p = [Insn::new(0x07, 0, 0, 1, 1), Insn::new(EXIT, 0, 0, 0, 0)];
        assert!(matches!(
            decode_program(&p),
            Err(DecodeError::NonZeroField {
                pc: 0,
                field: "offset",
                ..
            })
        ));
    }

    #[test]
    fn lddw_needs_second_slot() {
        let p = [Insn::new(LDDW, 0, 0, 0, 1)];
        assert_eq!(
            decode_program(&p),
            Err(DecodeError::TruncatedLddw { pc: 0 })
        );
    }

    #[test]
    fn every_opcode_decodes_or_errors_without_panicking() {
        for opc in 0..=255u8 {
            for regs in [0u8, 0x11, 0xab, 0xff] {
                let p = [
                    Insn::from_bytes([opc, regs, 1, 0, 16, 0, 0, 0]),
                    Insn::new(0, 0, 0, 0, 0),
                ];
                if let Ok(ins) = Instruction::decode(&p, 0) {
                    assert_eq!(ins.encode()[0], p[0], "re-encode of {opc:#x}");
                }
            }
        }
    }
}
