//! Calls: helper argument checks against [`crate::helpers::HELPERS`], reference tracking for
//! ring-buffer records, bpf-to-bpf calls and returns, `bpf_loop` callbacks, and the checks at
//! program exit.

use crate::engine::{rej, Env, Point, Step, R};
use crate::error::ErrorKind;
use crate::exec::{read, MAX_VAR_OFF};
use crate::helpers::{helper_by_id, ArgKind, HelperSig, MapClass, RetKind};
use crate::scalar::Scalar;
use crate::state::{Frame, FrameKind, RefEntry, Reg, RegType, State, MAX_FRAMES};
use crate::{ctx::ReturnRule, MapKind};

/// Id of `bpf_loop`.
pub const BPF_LOOP: i32 = 181;
/// Largest iteration count `bpf_loop` performs.
pub const BPF_LOOP_MAX: u64 = 1 << 23;

fn arg_err(h: &HelperSig, arg: u8, detail: String) -> crate::engine::Reject {
    rej(
        ErrorKind::HelperArg {
            helper: h.name,
            arg,
            detail,
        },
        &[arg],
    )
}

fn describe(r: &Reg, env: &Env<'_>) -> String {
    r.render(env.maps)
}

/// A call of helper `id` at `pc`.
pub fn helper(env: &mut Env<'_>, st: &mut State, pc: usize, id: i32) -> R<Step> {
    let Some(h) = helper_by_id(id) else {
        return Err(rej(ErrorKind::UnknownHelper { id }, &[]));
    };
    let mut map: Option<u32> = None;
    let mut alloc_size: u32 = 0;
    let mut release: Option<u32> = None;
    let mut pending_mem: Option<(u8, bool)> = None;
    for (i, kind) in h.args.iter().enumerate() {
        let regno = (i + 1) as u8;
        let r = *st.reg(regno);
        if r.ty == RegType::NotInit && *kind != ArgKind::OptScalar {
            return Err(rej(ErrorKind::UninitReg { reg: regno }, &[regno]));
        }
        let need_scalar = |what: &str| -> R<()> {
            if r.ty != RegType::Scalar {
                return Err(arg_err(
                    h,
                    regno,
                    format!("expected {what}, got {}", describe(&r, env)),
                ));
            }
            Ok(())
        };
        match kind {
            ArgKind::Scalar | ArgKind::UserPtr => need_scalar("a scalar")?,
            ArgKind::OptScalar => {
                if r.ty.is_pointer() {
                    return Err(arg_err(
                        h,
                        regno,
                        format!(
                            "expected a scalar, got {} (would leak an address)",
                            describe(&r, env)
                        ),
                    ));
                }
            }
            ArgKind::ConstFlags => {
                need_scalar("constant flags")?;
                if !r.val.is_const() {
                    return Err(arg_err(
                        h,
                        regno,
                        format!("flags must be a constant, got {}", r.val),
                    ));
                }
            }
            ArgKind::ConstMapPtr => {
                let RegType::MapPtr { map: m } = r.ty else {
                    return Err(arg_err(
                        h,
                        regno,
                        format!("expected a map handle, got {}", describe(&r, env)),
                    ));
                };
                let info = &env.maps[m as usize];
                let ok = match h.map_class {
                    MapClass::Ringbuf => info.kind == MapKind::Ringbuf,
                    MapClass::KeyValue | MapClass::KeyValueWritable => {
                        info.kind != MapKind::Ringbuf
                    }
                    MapClass::None => true,
                };
                // Every ring-buffer helper writes the ring (a record or its positions).
                let writes = matches!(h.map_class, MapClass::KeyValueWritable | MapClass::Ringbuf);
                if ok && writes && info.read_only {
                    return Err(rej(
                        ErrorKind::HelperWritesReadOnlyMap {
                            helper: h.name,
                            arg: regno,
                            map: info.name.clone(),
                        },
                        &[regno],
                    ));
                }
                if !ok {
                    return Err(arg_err(
                        h,
                        regno,
                        format!(
                            "map `{}` of type {:?} cannot be used here",
                            info.name, info.kind
                        ),
                    ));
                }
                map = Some(m);
            }
            ArgKind::MapKey | ArgKind::MapValue => {
                let Some(m) = map else {
                    return Err(arg_err(h, regno, "no map argument before it".into()));
                };
                let info = &env.maps[m as usize];
                let size = if *kind == ArgKind::MapKey {
                    info.key_size
                } else {
                    info.value_size
                };
                check_mem_ptr(env, h, regno, &r)?;
                crate::mem::helper_mem(env, st, regno, size.into(), size.into(), false)?;
            }
            ArgKind::ReadableMem | ArgKind::WritableMem => {
                check_mem_ptr(env, h, regno, &r)?;
                pending_mem = Some((regno, *kind == ArgKind::WritableMem));
            }
            ArgKind::ConstSize | ArgKind::ConstSizeOrZero => {
                need_scalar("a size")?;
                let Some((mreg, write)) = pending_mem.take() else {
                    return Err(arg_err(h, regno, "size without a memory argument".into()));
                };
                let v = r.val;
                if v.smin < 0 || v.umax > MAX_VAR_OFF as u64 {
                    return Err(arg_err(
                        h,
                        regno,
                        format!(
                            "size {v} is unbounded or negative: check it against a constant \
                             before the call"
                        ),
                    ));
                }
                if *kind == ArgKind::ConstSize && v.umin == 0 {
                    return Err(arg_err(
                        h,
                        regno,
                        format!("invalid zero-sized access: size is {v}"),
                    ));
                }
                crate::mem::helper_mem(env, st, mreg, v.umin, v.umax, write)?;
            }
            ArgKind::ConstAllocSize => {
                need_scalar("a constant size")?;
                match r.val.const_value() {
                    Some(c) if c > 0 && c <= MAX_VAR_OFF as u64 => alloc_size = c as u32,
                    _ => {
                        return Err(arg_err(
                            h,
                            regno,
                            format!("size must be a positive constant, got {}", r.val),
                        ))
                    }
                }
            }
            ArgKind::RingbufMem => {
                let RegType::RingbufMem { .. } = r.ty else {
                    let hint = if r.ty.is_or_null() {
                        " (null-check it first)"
                    } else {
                        ""
                    };
                    return Err(arg_err(
                        h,
                        regno,
                        format!(
                            "expected a record from bpf_ringbuf_reserve, got {}{hint}",
                            describe(&r, env)
                        ),
                    ));
                };
                if r.off != 0 || !r.val.equals(0) {
                    return Err(arg_err(
                        h,
                        regno,
                        "must point to the start of the reserved record".into(),
                    ));
                }
                if r.ref_id == 0 || !st.refs.iter().any(|x| x.id == r.ref_id) {
                    return Err(arg_err(h, regno, "record was already released".into()));
                }
                release = Some(r.ref_id);
            }
            ArgKind::Callback => {
                if !matches!(r.ty, RegType::Func { .. }) {
                    return Err(arg_err(
                        h,
                        regno,
                        format!("expected a function address, got {}", describe(&r, env)),
                    ));
                }
            }
            ArgKind::StackOrNull => {
                let ok = matches!(r.ty, RegType::Stack { .. }) || r.is_const(0);
                if !ok {
                    return Err(arg_err(
                        h,
                        regno,
                        format!(
                            "expected a stack pointer or NULL, got {}",
                            describe(&r, env)
                        ),
                    ));
                }
            }
        }
    }
    if let Some((mreg, _)) = pending_mem {
        return Err(arg_err(h, mreg, "memory argument without a size".into()));
    }
    if id == BPF_LOOP {
        let inv = env.new_id();
        st.cur_mut().loop_inv = inv;
        return Ok(Step::LoopIter(pc));
    }
    if let Some(rid) = release {
        st.refs.retain(|x| x.id != rid);
        st.invalidate(|r| r.ref_id == rid);
    }
    for r in 1..=5u8 {
        *st.reg_mut(r) = Reg::NOT_INIT;
    }
    let r0 = match h.ret {
        RetKind::Scalar | RetKind::Void => {
            if h.c_ret.contains("__u32") {
                Reg::scalar(Scalar::unknown_bytes(4))
            } else {
                Reg::unknown()
            }
        }
        RetKind::MapValueOrNull => {
            let mut r = Reg::ptr(
                RegType::MapValueOrNull {
                    map: map.unwrap_or(0),
                },
                0,
            );
            r.id = env.new_id();
            r
        }
        RetKind::RingbufMemOrNull => {
            let mut r = Reg::ptr(RegType::RingbufMemOrNull { size: alloc_size }, 0);
            r.id = env.new_id();
            r.ref_id = env.new_id();
            st.refs.push(RefEntry { id: r.ref_id, pc });
            r
        }
    };
    *st.reg_mut(0) = r0;
    Ok(Step::Next(pc + 1))
}

fn check_mem_ptr(env: &Env<'_>, h: &HelperSig, regno: u8, r: &Reg) -> R<()> {
    match r.ty {
        RegType::Stack { .. } | RegType::MapValue { .. } | RegType::RingbufMem { .. } => Ok(()),
        t => {
            let extra = if t.is_or_null() {
                " (null-check it first)"
            } else {
                ""
            };
            Err(arg_err(
                h,
                regno,
                format!(
                    "expected a pointer to stack, map value or ring-buffer memory, got {}{extra}",
                    describe(r, env)
                ),
            ))
        }
    }
}

/// The iteration point of the `bpf_loop` call at `pc`: the loop ends here, or the callback
/// runs (again).
pub fn loop_iter(env: &mut Env<'_>, st: &mut State, pc: usize) -> R<Step> {
    let nr = *st.reg(1);
    let ctx = *st.reg(3);
    let RegType::Func { pc: cb } = st.reg(2).ty else {
        return Err(rej(
            ErrorKind::Unsupported {
                what: "bpf_loop without a callback".into(),
            },
            &[2],
        ));
    };
    let max = nr.val.umax.min(BPF_LOOP_MAX);
    let mut done = st.clone();
    for r in 1..=5u8 {
        *done.reg_mut(r) = Reg::NOT_INIT;
    }
    *done.reg_mut(0) = Reg::scalar(Scalar::urange(0, max).unwrap_or(Scalar::UNKNOWN));
    if max == 0 {
        return Ok(Step::Goto((done, pc + 1, Point::Insn)));
    }
    if st.frames.len() >= MAX_FRAMES {
        return Err(rej(
            ErrorKind::CallStackTooDeep {
                frames: st.frames.len() + 1,
            },
            &[],
        ));
    }
    let mut call = st.clone();
    let frameno = call.frames.len() as u8;
    let mut f = Frame::new(
        frameno,
        pc,
        cb as usize,
        FrameKind::Callback {
            refs_at_entry: call.refs.len() as u32,
        },
    );
    f.regs[1] = Reg::scalar(Scalar::urange(0, max - 1).unwrap_or(Scalar::UNKNOWN));
    f.regs[2] = ctx;
    call.frames.push(f);
    let _ = env;
    Ok(Step::Fork(
        (done, pc + 1, Point::Insn),
        (call, cb as usize, Point::Insn),
    ))
}

/// A bpf-to-bpf call at `pc` of the subprogram at `target`.
pub fn local(_env: &mut Env<'_>, st: &mut State, pc: usize, target: usize) -> R<Step> {
    if st.frames.len() >= MAX_FRAMES {
        return Err(rej(
            ErrorKind::CallStackTooDeep {
                frames: st.frames.len() + 1,
            },
            &[],
        ));
    }
    let frameno = st.frames.len() as u8;
    let mut f = Frame::new(frameno, pc, target, FrameKind::Local);
    for r in 1..=5usize {
        f.regs[r] = st.cur().regs[r];
    }
    st.frames.push(f);
    Ok(Step::Next(target))
}

/// `exit` at `pc`: return to the caller, or end the program.
pub fn exit(env: &mut Env<'_>, st: &mut State, pc: usize) -> R<Step> {
    let r0 = read(st, 0)?;
    let _ = pc;
    if st.frames.len() == 1 {
        if r0.ty.is_pointer() {
            return Err(rej(ErrorKind::ReturnPointer, &[0]));
        }
        if let Some(r) = st.refs.first() {
            return Err(rej(
                ErrorKind::UnreleasedRef {
                    ref_id: r.id,
                    alloc_pc: r.pc,
                },
                &[],
            ));
        }
        if let ReturnRule::Range { min, max } = env.ctx.ret {
            if r0.val.umin < min || r0.val.umax > max {
                return Err(rej(
                    ErrorKind::ReturnValue {
                        value: r0.val.to_string(),
                        program: env.ctx.description.clone(),
                        min,
                        max,
                    },
                    &[0],
                ));
            }
        }
        return Ok(Step::Done);
    }
    let callee_no = st.curframe();
    let callee = st.frames.pop().expect("more than one frame");
    if let RegType::Stack { frame } = r0.ty {
        if usize::from(frame) >= callee_no {
            return Err(rej(ErrorKind::ReturnStackPointer, &[0]));
        }
    }
    // Nothing may keep pointing into the callee's stack.
    st.invalidate(|r| matches!(r.ty, RegType::Stack { frame } if usize::from(frame) >= callee_no));
    match callee.kind {
        FrameKind::Callback { refs_at_entry } => {
            if r0.ty != RegType::Scalar || r0.val.umax > 1 {
                st.frames.push(callee);
                return Err(rej(
                    ErrorKind::CallbackReturn {
                        value: r0.render(env.maps),
                    },
                    &[0],
                ));
            }
            if st.refs.len() != refs_at_entry as usize {
                let r = st.refs.last().copied().unwrap_or(RefEntry { id: 0, pc });
                st.frames.push(callee);
                return Err(rej(
                    ErrorKind::UnreleasedRef {
                        ref_id: r.id,
                        alloc_pc: r.pc,
                    },
                    &[],
                ));
            }
            Ok(Step::LoopIter(callee.callsite))
        }
        _ => {
            let caller = st.cur_mut();
            caller.regs[0] = r0;
            for r in 1..=5usize {
                caller.regs[r] = Reg::NOT_INIT;
            }
            Ok(Step::Next(callee.callsite + 1))
        }
    }
}
