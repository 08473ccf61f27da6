//! The eBPF instruction set as gpubpf uses it: RFC 9669 plus ISA v4.
//!
//! - [`opcode`]: the raw opcode constants.
//! - [`insn`]: 8-byte slots ([`Insn`]), strict decoding into [`Instruction`] and encoding back.
//! - [`asm`]: assembler for the bpf_conformance text syntax ([`asm::assemble`]).
//! - [`disasm`]: bpftool-style and assembler-compatible disassembly.
//! - `ALL` constants on [`AluOp`], [`JmpCond`], [`Size`], [`AtomicOp`]: every variant.

pub mod asm;
pub mod disasm;
mod encode;
pub mod insn;
pub mod opcode;
mod variants;

pub use asm::{assemble, AsmError, AsmErrorKind};
pub use disasm::{disassemble, disassemble_asm, format_instruction, Syntax};
pub use insn::{
    decode_program, encode_program, slots_from_bytes, slots_to_bytes, AluOp, AtomicOp, ByteSwap,
    CallTarget, DecodeError, Insn, Instruction, JmpCond, LddwKind, Operand, Size, Width,
    FRAME_POINTER, NUM_REGS,
};
