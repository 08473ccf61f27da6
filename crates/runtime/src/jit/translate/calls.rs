//! Calls in translated code: local calls with the frame-depth check, `callx` over verified
//! targets, helper calls through the helper table, and the inlined `bpf_loop`.

use super::*;
use cranelift_codegen::ir::{InstructionData, Opcode, ValueDef};

impl FnTranslator<'_, '_> {
    /// Checks the call depth, calls `callee` in the next frame and propagates its status.
    pub(super) fn local_call(
        &mut self,
        pc: usize,
        callee: Callee,
        args: [Value; 5],
    ) -> Result<Value, JitError> {
        self.depth_check(pc);
        let nfp = self
            .b
            .ins()
            .iadd_imm_s(self.fp, -(STACK_SIZE_PER_FRAME as i64));
        self.call_checked(callee, args, nfp)
    }

    /// Ends the program with a depth error when the next frame would not exist: this
    /// frame's `fp` must lie above the last frame's (frame `MAX_CALL_FRAMES - 1`).
    fn depth_check(&mut self, pc: usize) {
        let floor = self
            .b
            .ins()
            .load(I64, MemFlagsData::trusted(), self.run, RUN_FP_FLOOR);
        let ok = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, self.fp, floor);
        let err = self.error_block(STATUS_CALL_DEPTH, pc);
        let cont = self.b.create_block();
        self.b.ins().brif(ok, cont, &[], err, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    fn call_checked(
        &mut self,
        callee: Callee,
        args: [Value; 5],
        nfp: Value,
    ) -> Result<Value, JitError> {
        self.store_budget();
        let mut all = args.to_vec();
        all.push(nfp);
        all.push(self.run);
        let call = match callee {
            Callee::Direct(f) => self.b.ins().call(f, &all),
            Callee::Indirect(addr) => self.b.ins().call_indirect(self.internal_sig, addr, &all),
        };
        let results = self.b.inst_results(call).to_vec();
        let [r0, st] = results[..] else {
            return Err(JitError::Internal {
                what: "call results",
            });
        };
        let prop = self.propagate_block();
        let cont = self.b.create_block();
        self.b
            .ins()
            .brif(st, prop, &[BlockArg::Value(st)], cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
        self.load_budget();
        Ok(r0)
    }

    /// Branches to an error block unless `target` is the address of an address-taken
    /// function of the program.
    fn check_function_value(
        &mut self,
        target: Value,
        kind: i64,
        pc: usize,
    ) -> Result<(), JitError> {
        let taken = self.address_taken_functions();
        let mut ok = self.b.ins().iconst(types::I8, 0);
        for idx in taken {
            let f = self.func_ref(idx)?;
            let addr = self.b.ins().func_addr(I64, f);
            let eq = self.b.ins().icmp(IntCC::Equal, target, addr);
            ok = self.b.ins().bor(ok, eq);
        }
        let err = self.error_block(kind, pc);
        let cont = self.b.create_block();
        self.b.ins().brif(ok, cont, &[], err, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
        Ok(())
    }

    /// Indices of the program's address-taken functions: the only valid `callx` and
    /// callback targets besides helpers.
    fn address_taken_functions(&self) -> Vec<usize> {
        self.analysis
            .funcs
            .iter()
            .enumerate()
            .filter(|(_, f)| f.address_taken)
            .map(|(i, _)| i)
            .collect()
    }

    /// `callx reg`: the register holds a helper id (bpf_conformance and the interpreter
    /// agree on this), `181` for `bpf_loop`, or the address of one of the program's
    /// address-taken functions. Dispatch is a compare chain over exactly these targets, each
    /// a direct call; any other value ends the program with an error status.
    pub(super) fn callx(&mut self, pc: usize, reg: u8) -> Result<(), JitError> {
        let target = self.get(reg);
        let done = self.b.create_block();
        let r0 = self.b.append_block_param(done, I64);
        let ids: Vec<i32> = self.helpers.ids().filter(|id| *id != BPF_LOOP_ID).collect();
        for id in ids.iter().copied().chain([BPF_LOOP_ID]) {
            let hit = self.b.create_block();
            let next = self.b.create_block();
            let eq = self.b.ins().icmp_imm_s(IntCC::Equal, target, i64::from(id));
            self.b.ins().brif(eq, hit, &[], next, &[]);
            self.b.seal_block(hit);
            self.b.seal_block(next);
            self.b.switch_to_block(hit);
            let v = if id == BPF_LOOP_ID {
                self.bpf_loop(pc)?
            } else {
                self.helper_call(pc, id)?
            };
            self.b.ins().jump(done, &[BlockArg::Value(v)]);
            self.b.switch_to_block(next);
        }
        let taken = self.address_taken_functions();
        for idx in taken {
            let f = self.func_ref(idx)?;
            let addr = self.b.ins().func_addr(I64, f);
            let hit = self.b.create_block();
            let next = self.b.create_block();
            let eq = self.b.ins().icmp(IntCC::Equal, target, addr);
            self.b.ins().brif(eq, hit, &[], next, &[]);
            self.b.seal_block(hit);
            self.b.seal_block(next);
            self.b.switch_to_block(hit);
            let args: [Value; 5] = std::array::from_fn(|i| self.get(i as u8 + 1));
            let v = self.local_call(pc, Callee::Direct(f), args)?;
            self.b.ins().jump(done, &[BlockArg::Value(v)]);
            self.b.switch_to_block(next);
        }
        let err = self.error_block(STATUS_BAD_CALLX, pc);
        self.b.ins().jump(err, &[]);
        self.b.seal_block(done);
        self.b.switch_to_block(done);
        self.returned(r0);
        Ok(())
    }

    /// A call of helper `id` through the address in the helper table; returns r0.
    pub(super) fn helper_call(&mut self, pc: usize, id: i32) -> Result<Value, JitError> {
        let f = self
            .helpers
            .get(id)
            .ok_or(JitError::UnknownHelper { pc, id })?;
        if let Some(r0) = self.inline_lookup(id, f)? {
            return Ok(r0);
        }
        self.call_helper(id, f)
    }

    /// The call of helper `id` (function `f`) itself, with r1..r5 as arguments.
    pub(super) fn call_helper(
        &mut self,
        id: i32,
        f: crate::helper_table::HelperFn,
    ) -> Result<Value, JitError> {
        let addr = self.b.ins().iconst(I64, f as usize as i64);
        // Arguments the helper does not read are passed as 0: reading r{n+1}..r5 would keep
        // whatever the program last had there alive (often spilled) up to every call.
        let used = self.helpers.arg_count(id).unwrap_or(5);
        let args: Vec<Value> = (1..=5u8)
            .map(|r| {
                if r <= used {
                    self.get(r)
                } else {
                    self.b.ins().iconst(I64, 0)
                }
            })
            .collect();
        let call = self.b.ins().call_indirect(self.helper_sig, addr, &args);
        self.b
            .inst_results(call)
            .first()
            .copied()
            .ok_or(JitError::Internal {
                what: "helper result",
            })
    }

    /// The value of `v` when an `iconst` defines it.
    pub(super) fn constant(&self, v: Value) -> Option<u64> {
        let dfg = &self.b.func.dfg;
        let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(v)) else {
            return None;
        };
        match dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => Some(imm.bits() as u64),
            _ => None,
        }
    }

    /// `bpf_loop(nr_loops, callback, callback_ctx, flags)`, inline; returns r0 (the number
    /// of callback invocations; `flags` is ignored, as in the interpreter).
    pub(super) fn bpf_loop(&mut self, pc: usize) -> Result<Value, JitError> {
        let nr = self.get(1);
        let cb = self.get(2);
        let cb_ctx = self.get(3);
        self.check_function_value(cb, STATUS_BAD_CALLBACK, pc)?;
        self.depth_check(pc);
        let max = self.b.ins().iconst(I64, BPF_LOOP_MAX);
        let n = self.b.ins().umin(nr, max);
        let nfp = self
            .b
            .ins()
            .iadd_imm_s(self.fp, -(STACK_SIZE_PER_FRAME as i64));
        let zero = self.b.ins().iconst(I64, 0);

        let header = self.b.create_block();
        let i = self.b.append_block_param(header, I64);
        let body = self.b.create_block();
        let done = self.b.create_block();
        let count = self.b.append_block_param(done, I64);
        self.b.ins().jump(header, &[BlockArg::Value(zero)]);

        self.b.switch_to_block(header);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, i, n);
        self.b
            .ins()
            .brif(more, body, &[], done, &[BlockArg::Value(i)]);

        self.b.switch_to_block(body);
        self.b.seal_block(body);
        self.charge_iteration(pc);
        let z = self.b.ins().iconst(I64, 0);
        let ret = self.call_checked(Callee::Indirect(cb), [i, cb_ctx, z, z, z], nfp)?;
        let next = self.b.ins().iadd_imm_s(i, 1);
        self.b.ins().brif(
            ret,
            done,
            &[BlockArg::Value(next)],
            header,
            &[BlockArg::Value(next)],
        );

        self.b.seal_block(header);
        self.b.seal_block(done);
        self.b.switch_to_block(done);
        Ok(count)
    }
}
