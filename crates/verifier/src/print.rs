//! Kernel-style instruction printing (`r2 = *(u32 *)(r1 +8)`), as in the verifier log and
//! bpftool's xlated dump.

use gpubpf_isa::disasm::format_instruction;
use gpubpf_isa::{
    AtomicOp, CallTarget, Insn, Instruction, JmpCond, LddwKind, Operand, Size, Width,
};

use crate::helpers::helper_by_id;
use crate::MapInfo;

fn size_name(s: Size) -> &'static str {
    match s {
        Size::B => "u8",
        Size::H => "u16",
        Size::W => "u32",
        Size::DW => "u64",
    }
}

fn reg(width: Width, r: u8) -> String {
    match width {
        Width::W64 => format!("r{r}"),
        Width::W32 => format!("w{r}"),
    }
}

fn operand(width: Width, o: Operand) -> String {
    match o {
        Operand::Reg(r) => reg(width, r),
        Operand::Imm(i) => format!("{i}"),
    }
}

fn off(o: i16) -> String {
    if o < 0 {
        format!("{o}")
    } else {
        format!("+{o}")
    }
}

fn cond_sym(c: JmpCond) -> &'static str {
    match c {
        JmpCond::Eq => "==",
        JmpCond::Gt => ">",
        JmpCond::Ge => ">=",
        JmpCond::Set => "&",
        JmpCond::Ne => "!=",
        JmpCond::Sgt => "s>",
        JmpCond::Sge => "s>=",
        JmpCond::Lt => "<",
        JmpCond::Le => "<=",
        JmpCond::Slt => "s<",
        JmpCond::Sle => "s<=",
    }
}

/// Text of one decoded instruction at slot `pc`.
pub fn insn_text(ins: &Instruction, pc: usize, maps: &[MapInfo]) -> String {
    let map_name = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| maps.get(i))
            .map(|m| m.name.clone())
            .unwrap_or_else(|| format!("#{i}"))
    };
    let target = |o: i64| (pc as i64).saturating_add(1).saturating_add(o);
    match *ins {
        Instruction::LoadImm64 {
            dst,
            kind,
            imm,
            next_imm,
        } => match kind {
            LddwKind::Imm => {
                let v = (u64::from(next_imm as u32) << 32) | u64::from(imm as u32);
                format!("r{dst} = {v:#x} ll")
            }
            LddwKind::MapIdx | LddwKind::MapFd => format!("r{dst} = map[{}] ll", map_name(imm)),
            LddwKind::MapIdxValue | LddwKind::MapValue => {
                format!("r{dst} = map_value[{}]+{next_imm} ll", map_name(imm))
            }
            LddwKind::Func => format!("r{dst} = func[pc {}] ll", target(imm.into())),
            LddwKind::BtfId => format!("r{dst} = btf_id[{imm}] ll"),
        },
        Instruction::Atomic {
            size,
            op,
            fetch,
            dst,
            src,
            off: o,
        } => {
            let w = if size == Size::W {
                Width::W32
            } else {
                Width::W64
            };
            let mem = format!("*({} *)(r{dst} {})", size_name(size), off(o));
            let s = reg(w, src);
            match op {
                AtomicOp::Xchg => format!("{s} = atomic_xchg({mem}, {s})"),
                AtomicOp::CmpXchg => {
                    format!("{} = atomic_cmpxchg({mem}, {}, {s})", reg(w, 0), reg(w, 0))
                }
                _ => {
                    let name = match op {
                        AtomicOp::Add => "add",
                        AtomicOp::Or => "or",
                        AtomicOp::And => "and",
                        _ => "xor",
                    };
                    if fetch {
                        format!("{s} = atomic_fetch_{name}({mem}, {s})")
                    } else {
                        format!("lock {mem} {}= {s}", alu_sym_short(op))
                    }
                }
            }
        }
        Instruction::Ja { off: o, long } => {
            let kw = if long { "gotol" } else { "goto" };
            format!("{kw} pc{:+} (-> {})", o, target(o.into()))
        }
        Instruction::Jump {
            width,
            cond,
            dst,
            src,
            off: o,
        } => format!(
            "if {} {} {} goto pc{:+} (-> {})",
            reg(width, dst),
            cond_sym(cond),
            operand(width, src),
            o,
            target(o.into())
        ),
        Instruction::Call(CallTarget::Helper(id)) => match helper_by_id(id) {
            Some(h) => format!("call {}#{id}", h.name),
            None => format!("call unknown#{id}"),
        },
        Instruction::Call(CallTarget::Local(o)) => {
            format!("call pc{:+} (-> {})", o, target(o.into()))
        }
        Instruction::Call(CallTarget::Kfunc(id)) => format!("call kfunc#{id}"),
        // Everything the kernel log prints like bpftool's xlated dump: the ISA's printer.
        Instruction::Alu { .. }
        | Instruction::Neg { .. }
        | Instruction::MovSx { .. }
        | Instruction::Endian { .. }
        | Instruction::Load { .. }
        | Instruction::Store { .. }
        | Instruction::Callx { .. }
        | Instruction::Exit => format_instruction(ins),
    }
}

fn alu_sym_short(op: AtomicOp) -> &'static str {
    match op {
        AtomicOp::Add => "+",
        AtomicOp::Or => "|",
        AtomicOp::And => "&",
        _ => "^",
    }
}

/// One listing line: `   12: (bf) r2 = r10`, or the raw slot when it does not decode.
pub fn listing_line(insns: &[Insn], pc: usize, maps: &[MapInfo]) -> String {
    let opc = insns.get(pc).map(|i| i.opc).unwrap_or(0);
    match Instruction::decode(insns, pc) {
        Ok(ins) => format!("{pc:5}: ({opc:02x}) {}", insn_text(&ins, pc, maps)),
        Err(_) => match insns.get(pc) {
            Some(i) => format!(
                "{pc:5}: ({opc:02x}) <invalid: dst={} src={} off={} imm={}>",
                i.dst, i.src, i.off, i.imm
            ),
            None => format!("{pc:5}: <end of program>"),
        },
    }
}
