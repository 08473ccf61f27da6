//! Opcode constants of the eBPF instruction set (RFC 9669 plus ISA v4).
//!
//! The 8-bit opcode is split into a 3-bit class (`opc & 0x07`) and, depending on the class,
//! either an operation code + source bit (arithmetic and jumps) or a mode + size
//! (loads and stores).

// Instruction classes.
pub const BPF_LD: u8 = 0x00;
pub const BPF_LDX: u8 = 0x01;
pub const BPF_ST: u8 = 0x02;
pub const BPF_STX: u8 = 0x03;
pub const BPF_ALU: u8 = 0x04;
pub const BPF_JMP: u8 = 0x05;
pub const BPF_JMP32: u8 = 0x06;
pub const BPF_ALU64: u8 = 0x07;

/// Mask selecting the class bits.
pub const CLASS_MASK: u8 = 0x07;
/// Mask selecting the operation code of arithmetic and jump instructions.
pub const OP_MASK: u8 = 0xf0;
/// Mask selecting the source bit of arithmetic and jump instructions.
pub const SRC_MASK: u8 = 0x08;
/// Mask selecting the size of load and store instructions.
pub const SIZE_MASK: u8 = 0x18;
/// Mask selecting the mode of load and store instructions.
pub const MODE_MASK: u8 = 0xe0;

// Source operand.
pub const BPF_K: u8 = 0x00;
pub const BPF_X: u8 = 0x08;

// Arithmetic operation codes.
pub const BPF_ADD: u8 = 0x00;
pub const BPF_SUB: u8 = 0x10;
pub const BPF_MUL: u8 = 0x20;
pub const BPF_DIV: u8 = 0x30;
pub const BPF_OR: u8 = 0x40;
pub const BPF_AND: u8 = 0x50;
pub const BPF_LSH: u8 = 0x60;
pub const BPF_RSH: u8 = 0x70;
pub const BPF_NEG: u8 = 0x80;
pub const BPF_MOD: u8 = 0x90;
pub const BPF_XOR: u8 = 0xa0;
pub const BPF_MOV: u8 = 0xb0;
pub const BPF_ARSH: u8 = 0xc0;
pub const BPF_END: u8 = 0xd0;

// Byte-swap direction (source bit of `BPF_END` in the ALU class).
pub const BPF_TO_LE: u8 = 0x00;
pub const BPF_TO_BE: u8 = 0x08;

// Jump operation codes.
pub const BPF_JA: u8 = 0x00;
pub const BPF_JEQ: u8 = 0x10;
pub const BPF_JGT: u8 = 0x20;
pub const BPF_JGE: u8 = 0x30;
pub const BPF_JSET: u8 = 0x40;
pub const BPF_JNE: u8 = 0x50;
pub const BPF_JSGT: u8 = 0x60;
pub const BPF_JSGE: u8 = 0x70;
pub const BPF_CALL: u8 = 0x80;
pub const BPF_EXIT: u8 = 0x90;
pub const BPF_JLT: u8 = 0xa0;
pub const BPF_JLE: u8 = 0xb0;
pub const BPF_JSLT: u8 = 0xc0;
pub const BPF_JSLE: u8 = 0xd0;

// Load/store sizes.
pub const BPF_W: u8 = 0x00;
pub const BPF_H: u8 = 0x08;
pub const BPF_B: u8 = 0x10;
pub const BPF_DW: u8 = 0x18;

// Load/store modes.
pub const BPF_IMM: u8 = 0x00;
pub const BPF_ABS: u8 = 0x20;
pub const BPF_IND: u8 = 0x40;
pub const BPF_MEM: u8 = 0x60;
pub const BPF_MEMSX: u8 = 0x80;
pub const BPF_ATOMIC: u8 = 0xc0;

// Atomic operations (in `imm` of `BPF_STX | BPF_ATOMIC`).
pub const BPF_FETCH: i32 = 0x01;
pub const BPF_ATOMIC_ADD: i32 = 0x00;
pub const BPF_ATOMIC_OR: i32 = 0x40;
pub const BPF_ATOMIC_AND: i32 = 0x50;
pub const BPF_ATOMIC_XOR: i32 = 0xa0;
pub const BPF_XCHG: i32 = 0xe0 | BPF_FETCH;
pub const BPF_CMPXCHG: i32 = 0xf0 | BPF_FETCH;

// `src` field values of `lddw` (`BPF_LD | BPF_IMM | BPF_DW`).
/// Plain 64-bit immediate.
pub const BPF_PSEUDO_NONE: u8 = 0;
/// `imm` is a map file descriptor (here: the index of a map in the program's map table).
pub const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `imm` is a map fd/index and `next_imm` an offset into its value.
pub const BPF_PSEUDO_MAP_VALUE: u8 = 2;
/// `imm` is a BTF id of a kernel variable.
pub const BPF_PSEUDO_BTF_ID: u8 = 3;
/// `imm` is the instruction offset of a function (address of a subprogram).
pub const BPF_PSEUDO_FUNC: u8 = 4;
/// `imm` is a map index into the program's `fd_array`.
pub const BPF_PSEUDO_MAP_IDX: u8 = 5;
/// `imm` is a map index and `next_imm` an offset into its value.
pub const BPF_PSEUDO_MAP_IDX_VALUE: u8 = 6;

// `src` field values of `call`.
/// Call of a helper by its static id.
pub const BPF_PSEUDO_HELPER: u8 = 0;
/// Call of a program-local function; `imm` is the relative instruction offset.
pub const BPF_PSEUDO_CALL: u8 = 1;
/// Call of a kernel function by BTF id (not supported by gpubpf, decoded for diagnostics).
pub const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// The opcode of the 16-byte wide `lddw` instruction.
pub const LDDW: u8 = BPF_LD | BPF_IMM | BPF_DW;
/// The opcode of `exit`.
pub const EXIT: u8 = BPF_JMP | BPF_EXIT;
/// The opcode of a helper or local call.
pub const CALL: u8 = BPF_JMP | BPF_CALL;
/// The opcode of `callx` (register-indirect call; the register is in `dst`).
pub const CALLX: u8 = BPF_JMP | BPF_CALL | BPF_X;
