//! Memory accesses: loads, stores, atomics and helper memory arguments, checked against the
//! region a pointer points into (stack frame, map value, ring-buffer record, ctx fields).

use gpubpf_isa::{AtomicOp, Operand, Size};

use crate::engine::{rej, Env, Reject, R};
use crate::error::ErrorKind;
use crate::exec::{read, MAX_VAR_OFF};
use crate::scalar::Scalar;
use crate::state::{slot_of, ByteKind, Frame, Reg, RegType, State, STACK_BYTES};

/// Byte range `[lo, hi)` relative to the region start that an access may touch.
fn span(base: &Reg, off: i16, size: u64) -> (i64, i64) {
    let start = base.off.saturating_add(i64::from(off));
    let lo = start.saturating_add(base.val.smin);
    let hi = start
        .saturating_add(base.val.smax)
        .saturating_add(i64::try_from(size).unwrap_or(i64::MAX));
    (lo, hi)
}

fn bounds(
    regno: u8,
    base: &Reg,
    off: i16,
    size: u64,
    limit: i64,
    region: Region<'_>,
) -> R<(i64, i64)> {
    let (lo, hi) = span(base, off, size);
    let var = !base.val.is_const();
    if var && base.val.smax > MAX_VAR_OFF {
        return Err(rej(
            ErrorKind::UnboundedAccess {
                reg: regno,
                region: region.to_string(),
                range: base.val.to_string(),
            },
            &[regno],
        ));
    }
    if lo < 0 && var {
        return Err(rej(
            ErrorKind::NegativeOffset {
                reg: regno,
                region: region.to_string(),
                min: lo,
            },
            &[regno],
        ));
    }
    if lo < 0 || hi > limit {
        return Err(rej(
            ErrorKind::OutOfBounds {
                reg: regno,
                region: region.to_string(),
                off: if lo < 0 {
                    lo
                } else {
                    hi.saturating_sub(size as i64)
                },
                size: size as u32,
                lo: 0,
                hi: limit,
            },
            &[regno],
        ));
    }
    Ok((lo, hi))
}

fn misaligned(region: Region<'_>, base: &Reg, off: i16, size: u32) -> Reject {
    let o = base.off.saturating_add(i64::from(off));
    let off_s = if base.val.is_const() {
        format!("{}", o.saturating_add(base.val.var.value as i64))
    } else {
        format!("{o}+{}", base.val)
    };
    rej(
        ErrorKind::Misaligned {
            region: region.to_string(),
            off: off_s,
            size,
        },
        &[],
    )
}

/// A write through a pointer into a value of map `map`: refused for read-only maps
/// (`.rodata`, `BPF_F_RDONLY_PROG`).
fn map_writable(env: &Env<'_>, map: u32, regno: u8) -> R<()> {
    match env.maps.get(map as usize).filter(|m| m.read_only) {
        Some(m) => Err(rej(
            ErrorKind::ReadOnlyMap {
                map: m.name.clone(),
            },
            &[regno],
        )),
        None => Ok(()),
    }
}

/// [`bounds`] of an access of `size` bytes at `base + off` within a value of map `map`.
fn map_value_bounds(
    env: &Env<'_>,
    map: u32,
    regno: u8,
    base: &Reg,
    off: i16,
    size: u64,
    region: Region<'_>,
) -> R<(i64, i64)> {
    let limit = env.maps.get(map as usize).map_or(0, |m| m.value_size);
    bounds(regno, base, off, size, limit.into(), region)
}

fn aligned(base: &Reg, off: i16, size: u32) -> bool {
    let m = u64::from(size).saturating_sub(1);
    let o = base
        .off
        .saturating_add(i64::from(off))
        .wrapping_add(base.val.var.value as i64) as u64;
    base.val.var.mask & m == 0 && o & m == 0
}

/// The name of a memory region in a message, formatted only when a message is made (the
/// checks that take one pass on almost every access).
#[derive(Clone, Copy)]
enum Region<'a> {
    Named(&'static str),
    MapValue(&'a str),
}

impl std::fmt::Display for Region<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Region::Named(n) => f.write_str(n),
            Region::MapValue(m) => write!(f, "map value of `{m}`"),
        }
    }
}

/// A ring-buffer record, in messages.
const RINGBUF_RECORD: Region<'static> = Region::Named("ring-buffer record");

fn region_name<'a>(env: &Env<'a>, ty: RegType) -> Region<'a> {
    match ty {
        RegType::MapValue { map } => {
            Region::MapValue(env.maps.get(map as usize).map_or("?", |m| m.name.as_str()))
        }
        RegType::RingbufMem { .. } => RINGBUF_RECORD,
        RegType::Stack { .. } => Region::Named("stack"),
        RegType::Ctx => Region::Named("ctx"),
        t => Region::Named(t.name()),
    }
}

fn invalid_access(regno: u8, base: &Reg) -> Reject {
    rej(
        ErrorKind::InvalidMemAccess {
            reg: regno,
            ty: base.ty.name().into(),
        },
        &[regno],
    )
}

/// `dst = *(size *)(src + off)`.
pub fn load(
    env: &mut Env<'_>,
    st: &mut State,
    size: Size,
    sext: bool,
    dst: u8,
    src: u8,
    off: i16,
) -> R<()> {
    let base = read(st, src)?;
    let n = size.bytes();
    let mut v = match base.ty {
        RegType::Ctx => {
            ctx_access(env, src, &base, off, n, false, None)?;
            Reg::scalar(Scalar::unknown_bytes(n))
        }
        RegType::MapValue { map } => {
            let limit = env.maps.get(map as usize).map_or(0, |m| m.value_size);
            bounds(
                src,
                &base,
                off,
                n.into(),
                limit.into(),
                region_name(env, base.ty),
            )?;
            Reg::scalar(Scalar::unknown_bytes(n))
        }
        RegType::RingbufMem { size } => {
            bounds(src, &base, off, n.into(), size.into(), RINGBUF_RECORD)?;
            Reg::scalar(Scalar::unknown_bytes(n))
        }
        RegType::Stack { frame } => stack_access(env, st, src, &base, frame, off, n, None)?,
        _ => return Err(invalid_access(src, &base)),
    };
    if sext && v.is_scalar() {
        v = Reg::scalar(v.val.truncate(n).sext(n * 8));
    }
    *st.reg_mut(dst) = v;
    Ok(())
}

/// `*(size *)(dst + off) = src`.
pub fn store(
    env: &mut Env<'_>,
    st: &mut State,
    size: Size,
    dst: u8,
    off: i16,
    src: Operand,
) -> R<()> {
    let base = read(st, dst)?;
    let n = size.bytes();
    let (mut val, sreg) = match src {
        Operand::Reg(r) => (read(st, r)?, r),
        Operand::Imm(i) => (Reg::scalar(Scalar::konst(i64::from(i) as u64)), dst),
    };
    // A spilled scalar and its register stay linked, so a later bounds check on either
    // refines both (clang spills before comparing).
    if matches!(src, Operand::Reg(_))
        && matches!(base.ty, RegType::Stack { .. })
        && n == 8
        && val.is_scalar()
        && val.id == 0
        && !val.val.is_const()
    {
        val.id = env.new_id();
        st.reg_mut(sreg).id = val.id;
    }
    let leak = |into: Region<'_>| {
        if val.ty.is_pointer() {
            Err(rej(
                ErrorKind::PointerLeak {
                    reg: sreg,
                    into: into.to_string(),
                },
                &[sreg],
            ))
        } else {
            Ok(())
        }
    };
    match base.ty {
        RegType::Ctx => ctx_access(env, dst, &base, off, n, true, Some((&val, sreg)))?,
        RegType::MapValue { map } => {
            let name = region_name(env, base.ty);
            map_writable(env, map, dst)?;
            map_value_bounds(env, map, dst, &base, off, n.into(), name)?;
            leak(name)?;
        }
        RegType::RingbufMem { size } => {
            bounds(dst, &base, off, n.into(), size.into(), RINGBUF_RECORD)?;
            leak(Region::Named("a ring-buffer record"))?;
        }
        RegType::Stack { frame } => {
            stack_access(env, st, dst, &base, frame, off, n, Some(&val))?;
        }
        _ => return Err(invalid_access(dst, &base)),
    }
    Ok(())
}

fn ctx_access(
    env: &Env<'_>,
    regno: u8,
    base: &Reg,
    off: i16,
    size: u32,
    write: bool,
    val: Option<(&Reg, u8)>,
) -> R<()> {
    if !base.val.equals(0) {
        return Err(rej(
            ErrorKind::CtxVarOffset {
                reg: regno,
                range: base.val.to_string(),
            },
            &[regno],
        ));
    }
    let o = base.off.saturating_add(i64::from(off));
    let layout = &env.ctx.ctx;
    let err = |detail: String| {
        rej(
            ErrorKind::CtxAccess {
                off: o,
                size,
                detail,
            },
            &[regno],
        )
    };
    if o < 0 || o.saturating_add(i64::from(size)) > i64::from(layout.size) {
        return Err(err(format!(
            "outside the ctx of {} ({} bytes)",
            env.ctx.description, layout.size
        )));
    }
    if o % i64::from(size) != 0 {
        return Err(misaligned(Region::Named("ctx"), base, off, size));
    }
    let Some(field) = layout.field_at(o as u32) else {
        return Err(err("no ctx field at this offset".into()));
    };
    if !write {
        env.ctx_read.borrow_mut().insert(field.offset);
    }
    if o.saturating_add(i64::from(size)) > i64::from(field.offset) + i64::from(field.size) {
        return Err(err(format!(
            "the access does not fit in field `{}` (offset {}, {} bytes)",
            field.name, field.offset, field.size
        )));
    }
    if write {
        if !field.writable {
            return Err(rej(
                ErrorKind::CtxPermission {
                    field: field.name.clone(),
                    what: "write",
                    program: env.ctx.description.clone(),
                },
                &[regno],
            ));
        }
        if let Some((v, sreg)) = val {
            if v.ty.is_pointer() {
                return Err(rej(
                    ErrorKind::PointerLeak {
                        reg: sreg,
                        into: format!("ctx field `{}`", field.name),
                    },
                    &[sreg],
                ));
            }
        }
    } else if !field.readable {
        return Err(rej(
            ErrorKind::CtxPermission {
                field: field.name.clone(),
                what: "read",
                program: env.ctx.description.clone(),
            },
            &[regno],
        ));
    }
    Ok(())
}

/// Checks a stack access and performs it; returns the loaded value for reads.
#[allow(clippy::too_many_arguments)]
fn stack_access(
    env: &mut Env<'_>,
    st: &mut State,
    regno: u8,
    base: &Reg,
    frame: u8,
    off: i16,
    size: u32,
    write: Option<&Reg>,
) -> R<Reg> {
    let k = usize::from(frame);
    if k >= st.frames.len() {
        return Err(invalid_access(regno, base));
    }
    let (lo, hi) = span(base, off, size.into());
    if lo < -STACK_BYTES || hi > 0 {
        return Err(rej(
            ErrorKind::OutOfBounds {
                reg: regno,
                region: "stack".into(),
                off: if lo < -STACK_BYTES {
                    lo
                } else {
                    hi - i64::from(size)
                },
                size,
                lo: -STACK_BYTES,
                hi: 0,
            },
            &[regno],
        ));
    }
    if !aligned(base, off, size) {
        return Err(misaligned(Region::Named("stack"), base, off, size));
    }
    env.note_stack(st, k, lo);
    let fr = &mut st.frames[k];
    if base.val.is_const() {
        let o = lo;
        match write {
            Some(v) => stack_write_fixed(fr, o, size, v).map(|_| Reg::NOT_INIT),
            None => stack_read_fixed(fr, o, size),
        }
    } else {
        match write {
            Some(v) => {
                if v.ty.is_pointer() {
                    return Err(rej(
                        ErrorKind::PointerLeak {
                            reg: regno,
                            into: "the stack at a variable offset".into(),
                        },
                        &[regno],
                    ));
                }
                let zero = v.val.truncate(size).equals(0);
                clobber_range(fr, lo, hi, false, zero)?;
                Ok(Reg::NOT_INIT)
            }
            None => {
                let all_zero = check_readable(fr, lo, hi, lo, size)?;
                Ok(Reg::scalar(if all_zero {
                    Scalar::konst(0)
                } else {
                    Scalar::unknown_bytes(size)
                }))
            }
        }
    }
}

/// Checks that `[lo, hi)` is initialised and holds no pointer; returns whether it is all zero.
fn check_readable(fr: &Frame, lo: i64, hi: i64, off: i64, size: u32) -> R<bool> {
    let mut all_zero = true;
    for b in lo..hi {
        let (spi, _) = slot_of(b);
        match fr.byte(b) {
            ByteKind::Invalid => {
                return Err(rej(ErrorKind::UninitStackRead { off, size, byte: b }, &[]))
            }
            ByteKind::Spill => {
                let s = fr.slot(spi);
                if s.holds_pointer() {
                    return Err(rej(ErrorKind::PartialPointerFill { off: b }, &[]));
                }
                if !s.spill.is_some_and(|r| r.val.equals(0)) {
                    all_zero = false;
                }
            }
            ByteKind::Misc => all_zero = false,
            ByteKind::Zero => {}
        }
    }
    Ok(all_zero)
}

/// Bytes `[lo, hi)` may have been overwritten with scalar data.
/// `definite`: they certainly were (they become initialised).
fn clobber_range(fr: &mut Frame, lo: i64, hi: i64, definite: bool, zero: bool) -> R<()> {
    for b in lo..hi {
        let (spi, bi) = slot_of(b);
        let slot = fr.slot_mut(spi);
        if slot.bytes[bi] == ByteKind::Spill {
            let ptr = slot.holds_pointer();
            if ptr && !definite {
                return Err(rej(ErrorKind::CorruptSpilledPointer { off: b }, &[]));
            }
            // The spill is gone: its other bytes become plain data (or unreadable when they
            // held part of a pointer).
            let rest = if ptr {
                ByteKind::Invalid
            } else {
                ByteKind::Misc
            };
            for x in &mut slot.bytes {
                if *x == ByteKind::Spill {
                    *x = rest;
                }
            }
            slot.spill = None;
            slot.spill_size = 0;
        }
        let k = &mut slot.bytes[bi];
        *k = match (*k, definite, zero) {
            (_, true, true) => ByteKind::Zero,
            (_, true, false) => ByteKind::Misc,
            (ByteKind::Invalid, false, _) => ByteKind::Invalid,
            (ByteKind::Zero, false, true) => ByteKind::Zero,
            (_, false, _) => ByteKind::Misc,
        };
    }
    Ok(())
}

fn stack_write_fixed(fr: &mut Frame, o: i64, size: u32, val: &Reg) -> R<()> {
    if val.ty.is_pointer() && (size != 8 || o % 8 != 0) {
        return Err(rej(ErrorKind::PointerSpillSize, &[]));
    }
    let (spi, b) = slot_of(o);
    let slot = fr.slot_mut(spi);
    let end = b + size as usize;
    if let Some(sp) = slot.spill {
        let overlap = b < usize::from(slot.spill_size);
        let full = b == 0 && size == 8;
        if overlap && !full {
            if sp.ty.is_pointer() {
                return Err(rej(ErrorKind::CorruptSpilledPointer { off: o }, &[]));
            }
            for x in &mut slot.bytes {
                if *x == ByteKind::Spill {
                    *x = ByteKind::Misc;
                }
            }
            slot.spill = None;
            slot.spill_size = 0;
        }
    }
    if size == 8 {
        slot.spill = Some(*val);
        slot.spill_size = 8;
        slot.bytes = [ByteKind::Spill; 8];
    } else if size == 4 && b == 0 && val.is_scalar() {
        slot.spill = Some(Reg::scalar(val.val.zext32()));
        slot.spill_size = 4;
        for x in &mut slot.bytes[0..4] {
            *x = ByteKind::Spill;
        }
    } else {
        let k = if val.val.truncate(size).equals(0) {
            ByteKind::Zero
        } else {
            ByteKind::Misc
        };
        for x in &mut slot.bytes[b..end] {
            *x = k;
        }
    }
    Ok(())
}

fn stack_read_fixed(fr: &Frame, o: i64, size: u32) -> R<Reg> {
    let (spi, b) = slot_of(o);
    let slot = fr.slot(spi);
    if let Some(sp) = slot.spill {
        let ss = u32::from(slot.spill_size);
        if (b as u32) < ss {
            if sp.ty.is_pointer() {
                if b == 0 && size == 8 {
                    return Ok(sp);
                }
                return Err(rej(ErrorKind::PartialPointerFill { off: o }, &[]));
            }
            if b == 0 && size == ss {
                return Ok(sp);
            }
            if b == 0 && size < ss {
                return Ok(Reg::scalar(sp.val.truncate(size)));
            }
        }
    }
    let all_zero = check_readable(fr, o, o + i64::from(size), o, size)?;
    Ok(Reg::scalar(if all_zero {
        Scalar::konst(0)
    } else {
        Scalar::unknown_bytes(size)
    }))
}

/// Checks a helper's memory argument in `regno` of `size_min..=size_max` bytes, and for
/// writes updates the stack. `what` names the argument in errors.
pub fn helper_mem(
    env: &mut Env<'_>,
    st: &mut State,
    regno: u8,
    size_min: u64,
    size_max: u64,
    write: bool,
) -> R<()> {
    let base = read(st, regno)?;
    match base.ty {
        RegType::MapValue { map } => {
            if write {
                map_writable(env, map, regno)?;
            }
            if size_max > 0 {
                let name = region_name(env, base.ty);
                map_value_bounds(env, map, regno, &base, 0, size_max, name)?;
            }
            Ok(())
        }
        RegType::RingbufMem { size } => {
            if size_max > 0 {
                bounds(regno, &base, 0, size_max, size.into(), RINGBUF_RECORD)?;
            }
            Ok(())
        }
        RegType::Stack { frame } => {
            let k = usize::from(frame);
            if k >= st.frames.len() {
                return Err(invalid_access(regno, &base));
            }
            if size_max == 0 {
                return Ok(());
            }
            let (lo, hi) = span(&base, 0, size_max);
            if lo < -STACK_BYTES || hi > 0 {
                return Err(rej(
                    ErrorKind::OutOfBounds {
                        reg: regno,
                        region: "stack".into(),
                        off: lo,
                        size: size_max as u32,
                        lo: -STACK_BYTES,
                        hi: 0,
                    },
                    &[regno],
                ));
            }
            env.note_stack(st, k, lo);
            let fr = &mut st.frames[k];
            if write {
                let (dlo, dhi) = if base.val.is_const() {
                    (lo, lo.saturating_add(size_min as i64))
                } else {
                    (0, 0)
                };
                // Possibly written bytes: old spills there are gone.
                for b in lo..hi {
                    if b >= dlo && b < dhi {
                        continue;
                    }
                    let (spi, bi) = slot_of(b);
                    let slot = fr.slot_mut(spi);
                    if slot.bytes[bi] == ByteKind::Spill {
                        let rest = if slot.holds_pointer() {
                            ByteKind::Invalid
                        } else {
                            ByteKind::Misc
                        };
                        for x in &mut slot.bytes {
                            if *x == ByteKind::Spill {
                                *x = rest;
                            }
                        }
                        slot.spill = None;
                        slot.spill_size = 0;
                    }
                    if slot.bytes[bi] == ByteKind::Zero {
                        slot.bytes[bi] = ByteKind::Misc;
                    }
                }
                clobber_range(fr, dlo, dhi, true, false)
            } else {
                check_readable(fr, lo, hi, lo, size_max as u32).map_err(|e| match e.kind {
                    ErrorKind::PartialPointerFill { .. } => rej(
                        ErrorKind::PointerLeak {
                            reg: regno,
                            into: "helper memory (the stack holds a spilled pointer)".into(),
                        },
                        &[regno],
                    ),
                    _ => e,
                })?;
                Ok(())
            }
        }
        _ => Err(rej(
            ErrorKind::InvalidMemAccess {
                reg: regno,
                ty: base.ty.name().into(),
            },
            &[regno],
        )),
    }
}

/// Atomic read-modify-write.
#[allow(clippy::too_many_arguments)]
pub fn atomic(
    env: &mut Env<'_>,
    st: &mut State,
    size: Size,
    op: AtomicOp,
    fetch: bool,
    dst: u8,
    src: u8,
    off: i16,
) -> R<()> {
    let base = read(st, dst)?;
    let s = read(st, src)?;
    let n = size.bytes();
    if s.ty.is_pointer() {
        return Err(rej(
            ErrorKind::PointerLeak {
                reg: src,
                into: "memory through an atomic operation".into(),
            },
            &[src],
        ));
    }
    if op == AtomicOp::CmpXchg {
        let r0 = read(st, 0)?;
        if r0.ty.is_pointer() {
            return Err(rej(
                ErrorKind::PointerLeak {
                    reg: 0,
                    into: "memory through cmpxchg".into(),
                },
                &[0],
            ));
        }
    }
    let region = region_name(env, base.ty);
    match base.ty {
        RegType::MapValue { map } => {
            map_writable(env, map, dst)?;
            map_value_bounds(env, map, dst, &base, off, n.into(), region)?;
            if !aligned(&base, off, n) {
                return Err(misaligned(region, &base, off, n));
            }
        }
        RegType::RingbufMem { size } => {
            bounds(dst, &base, off, n.into(), size.into(), region)?;
            if !aligned(&base, off, n) {
                return Err(misaligned(region, &base, off, n));
            }
        }
        RegType::Stack { frame } => {
            if !base.val.is_const() {
                return Err(rej(
                    ErrorKind::Atomic {
                        detail: "variable-offset stack address".into(),
                    },
                    &[dst],
                ));
            }
            let old = stack_access(env, st, dst, &base, frame, off, n, None)?;
            if old.ty.is_pointer() {
                return Err(rej(
                    ErrorKind::Atomic {
                        detail: "operand in memory is a spilled pointer".into(),
                    },
                    &[dst],
                ));
            }
            let (lo, hi) = span(&base, off, n.into());
            let fr = &mut st.frames[usize::from(frame)];
            clobber_range(fr, lo, hi, true, false)?;
        }
        RegType::Ctx => {
            return Err(rej(
                ErrorKind::Atomic {
                    detail: "atomic operations on ctx are not allowed".into(),
                },
                &[dst],
            ))
        }
        _ => return Err(invalid_access(dst, &base)),
    }
    let fetched = Reg::scalar(Scalar::unknown_bytes(n));
    if op == AtomicOp::CmpXchg {
        *st.reg_mut(0) = fetched;
    } else if fetch || op == AtomicOp::Xchg {
        *st.reg_mut(src) = fetched;
    }
    Ok(())
}
