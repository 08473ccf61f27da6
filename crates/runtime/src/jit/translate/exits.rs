//! How translated code stops: error and status-propagation blocks, and the per-run
//! iteration budget (module docs of [`super`], "Run-time bound").

use super::*;

impl FnTranslator<'_, '_> {
    /// A block that returns `(0, status)` with `status = kind | pc << 8`. Its body is
    /// emitted after the function (the frontend requires finishing one block at a time).
    pub(super) fn error_block(&mut self, kind: i64, pc: usize) -> Block {
        let blk = self.b.create_block();
        self.b.set_cold_block(blk);
        self.pending_errors
            .push((blk, kind | (pc as i64).wrapping_shl(8)));
        blk
    }

    /// Uses one iteration of the run's budget for the instruction at `pc` (a backward jump
    /// taken or a callback invocation), or ends the run when none is left. Continues in a
    /// new block.
    pub(super) fn charge_iteration(&mut self, pc: usize) {
        let flags = MemFlagsData::trusted();
        let left = match self.budget {
            Some(var) => self.b.use_var(var),
            None => self.b.ins().load(I64, flags, self.run, RUN_BUDGET),
        };
        let exhausted = self.b.ins().icmp_imm_s(IntCC::Equal, left, 0);
        let err = self.error_block(STATUS_ITERATION_BUDGET, pc);
        let cont = self.b.create_block();
        self.b.ins().brif(exhausted, err, &[], cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
        let rest = self.b.ins().iadd_imm_s(left, -1);
        match self.budget {
            Some(var) => self.b.def_var(var, rest),
            None => {
                self.b.ins().store(flags, rest, self.run, RUN_BUDGET);
            }
        }
    }

    /// Writes a cached budget back to the run state (before calls and returns).
    pub(super) fn store_budget(&mut self) {
        if let Some(var) = self.budget {
            let left = self.b.use_var(var);
            self.b
                .ins()
                .store(MemFlagsData::trusted(), left, self.run, RUN_BUDGET);
        }
    }

    /// Reloads a cached budget from the run state (after calls, which may have used some).
    pub(super) fn load_budget(&mut self) {
        if let Some(var) = self.budget {
            let left = self
                .b
                .ins()
                .load(I64, MemFlagsData::trusted(), self.run, RUN_BUDGET);
            self.b.def_var(var, left);
        }
    }

    /// The block that returns a callee's non-zero status unchanged.
    pub(super) fn propagate_block(&mut self) -> Block {
        if let Some(b) = self.propagate {
            return b;
        }
        let blk = self.b.create_block();
        self.b.set_cold_block(blk);
        self.b.append_block_param(blk, I64);
        self.propagate = Some(blk);
        blk
    }

    /// Fills the deferred error and propagation blocks.
    pub(super) fn emit_exit_blocks(&mut self) {
        for (blk, status) in std::mem::take(&mut self.pending_errors) {
            self.b.switch_to_block(blk);
            let zero = self.b.ins().iconst(I64, 0);
            let st = self.b.ins().iconst(I64, status);
            self.b.ins().return_(&[zero, st]);
        }
        if let Some(blk) = self.propagate {
            self.b.switch_to_block(blk);
            let st = self.b.block_params(blk).first().copied();
            let zero = self.b.ins().iconst(I64, 0);
            let st = st.unwrap_or(zero);
            self.b.ins().return_(&[zero, st]);
        }
    }
}
