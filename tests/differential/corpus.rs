//! Hand-written differential cases: the corners where engines tend to disagree.
//! Each entry: name, assembly (bpf_conformance syntax), memory size.

pub const CORPUS: &[(&str, &str, usize)] = &[
    (
        // Stack slots reached through `r10 + k` in another register and through r10 itself,
        // in overlapping widths: the JIT gives both one address expression, so Cranelift
        // forwards a stored value to a later load of the same slot; an overlapping store of
        // another width in between must stop that.
        "stack_slots_through_registers",
        "
        mov %r1, 0x11223344
        lddw %r6, 0x5566778899aabbcc
        mov %r2, %r10
        add %r2, -8
        stxdw [%r2], %r6
        stxw [%r10-8], %r1
        ldxdw %r0, [%r2]
        mov %r3, %r10
        add %r3, -16
        stxw [%r3+4], %r1
        stxw [%r3], %r6
        ldxw %r4, [%r10-12]
        add %r0, %r4
        ldxdw %r4, [%r3]
        xor %r0, %r4
        stxb [%r2+1], %r1
        ldxw %r4, [%r10-8]
        add %r0, %r4
        mov %r5, %r10
        add %r5, -24
        stxw [%r5], %r6
        stxh [%r10-22], %r1
        ldxw %r4, [%r5]
        add %r0, %r4
        exit
    ",
        0,
    ),
    (
        // A slot written through `r10 + k`, then by a subprogram through the pointer it
        // was passed, then read back: the call between the caller's store and its load
        // must stop the JIT from forwarding the caller's value.
        "stack_slot_written_by_a_callee",
        "
        mov %r6, 5
        mov %r1, %r10
        add %r1, -8
        stxdw [%r1], %r6
        stxw [%r10-16], %r6
        call local f
        ldxdw %r0, [%r10-8]
        mov %r2, %r10
        add %r2, -16
        ldxw %r3, [%r2]
        lsh %r3, 8
        add %r0, %r3
        exit
    f:
        mov %r2, 77
        stxdw [%r1], %r2
        mov %r3, %r1
        add %r3, -8
        stxw [%r3], %r2
        mov %r0, 0
        exit
    ",
        0,
    ),
    (
        "frames_of_nested_calls",
        "
        mov %r6, 11
        stxdw [%r10-8], %r6
        mov %r1, 1
        call local f1
        ldxdw %r1, [%r10-8]
        add %r0, %r1
        exit
    f1:
        stxdw [%r10-8], %r1
        mov %r6, 22
        add %r1, 1
        call local f2
        ldxdw %r2, [%r10-8]
        add %r0, %r2
        add %r0, %r6
        exit
    f2:
        stxdw [%r10-16], %r1
        stxdw [%r10-512], %r1
        mov %r0, %r10
        sub %r0, %r10
        add %r0, 100
        exit
    ",
        0,
    ),
    (
        "call_depth_limit",
        "
        mov %r1, 0
        call local rec
        exit
    rec:
        add %r1, 1
        stxdw [%r10-8], %r1
        mov %r0, %r1
        jge %r1, 7, done
        call local rec
    done:
        exit
    ",
        0,
    ),
    (
        "call_depth_exceeded",
        "
        mov %r1, 0
        call local rec
        exit
    rec:
        add %r1, 1
        jge %r1, 8, done
        call local rec
    done:
        mov %r0, %r1
        exit
    ",
        0,
    ),
    (
        "atomics_all_forms",
        "
        stdw [%r1], 100
        stdw [%r1+8], -1
        mov %r2, 5
        lock add [%r1], %r2
        lock fetch add [%r1], %r2
        lock or32 [%r1+8], %r2
        mov %r3, 0x0f0f
        lock fetch and32 [%r1+12], %r3
        lock fetch xor [%r1+16], %r3
        mov %r4, 77
        lock xchg [%r1+24], %r4
        mov %r0, 0
        mov %r5, 9
        lock cmpxchg [%r1+24], %r5
        mov %r0, 9
        lock cmpxchg32 [%r1+24], %r5
        add %r0, %r2
        add %r0, %r3
        add %r0, %r4
        exit
    ",
        32,
    ),
    (
        "atomics_on_stack",
        "
        stdw [%r10-8], 1
        mov %r2, 41
        lock fetch add [%r10-8], %r2
        ldxdw %r0, [%r10-8]
        add %r0, %r2
        exit
    ",
        0,
    ),
    (
        "division_corners",
        "
        lddw %r2, 0x8000000000000000
        mov %r3, -1
        mov %r4, %r2
        sdiv %r4, %r3
        mov %r5, %r2
        smod %r5, %r3
        mov %r6, 7
        div %r6, 0
        mov %r7, 7
        mod %r7, 0
        lddw %r8, 0xffffffff80000000
        sdiv32 %r8, -1
        lddw %r9, 0x123456789
        mod32 %r9, 0
        stxdw [%r1], %r4
        stxdw [%r1+8], %r5
        stxdw [%r1+16], %r6
        stxdw [%r1+24], %r7
        stxdw [%r1+32], %r8
        stxdw [%r1+40], %r9
        mov %r0, %r9
        exit
    ",
        48,
    ),
    (
        "isa_v4",
        "
        ldxsb %r2, [%r1]
        ldxsh %r3, [%r1+2]
        ldxsw %r4, [%r1+4]
        movsx864 %r5, %r2
        movsx1632 %r6, %r3
        movsx3264 %r7, %r4
        bswap16 %r5
        bswap32 %r6
        bswap64 %r7
        stxdw [%r1+8], %r5
        stxdw [%r1+16], %r6
        stxdw [%r1+24], %r7
        mov %r0, %r2
        add %r0, %r3
        add %r0, %r4
        ja32 +1
        mov %r0, 0
        exit
    ",
        32,
    ),
    (
        "bpf_loop_with_stack_context",
        "
        stdw [%r10-8], 0
        mov %r1, 20
        lddw %r2, func cb
        mov %r3, %r10
        add %r3, -8
        mov %r4, 0
        call 181
        ldxdw %r1, [%r10-8]
        lsh %r0, 32
        or %r0, %r1
        exit
    cb:
        stxdw [%r10-8], %r1
        ldxdw %r3, [%r2]
        add %r3, %r1
        stxdw [%r2], %r3
        mov %r0, 0
        jne %r1, 12, +1
        mov %r0, 1
        exit
    ",
        0,
    ),
    (
        "bpf_loop_zero_and_huge_counts",
        "
        mov %r1, 0
        lddw %r2, func cb
        mov %r3, 0
        mov %r4, 0
        call 181
        mov %r6, %r0
        lddw %r1, 0xffffffffffffffff
        lddw %r2, func cb
        call 181
        add %r0, %r6
        exit
    cb:
        mov %r0, 0
        jlt %r1, 3, +1
        mov %r0, 1
        exit
    ",
        0,
    ),
    (
        "callx_helper_id",
        "
        mov %r1, 40
        mov %r2, 2
        mov %r6, 5
        callx %r6
        exit
    ",
        0,
    ),
    (
        "shifts_and_alu32",
        "
        lddw %r2, 0xfedcba9876543210
        mov %r3, %r2
        lsh32 %r3, 36
        mov %r4, %r2
        arsh32 %r4, 4
        mov %r5, %r2
        rsh %r5, 68
        mov %r6, %r2
        arsh %r6, -1
        neg32 %r2
        mov32 %r7, -1
        add32 %r7, 2
        stxdw [%r1], %r3
        stxdw [%r1+8], %r4
        stxdw [%r1+16], %r5
        stxdw [%r1+24], %r6
        mov %r0, %r2
        add %r0, %r7
        exit
    ",
        32,
    ),
    (
        "jump32_on_high_bits",
        "
        lddw %r2, 0x100000000
        mov %r0, 0
        jeq32 %r2, 0, +1
        exit
        jslt32 %r2, 1, +1
        exit
        lddw %r3, 0xffffffff
        jsgt %r3, 0, +2
        mov %r0, 9
        exit
        mov %r0, 7
        jset %r2, %r3, +1
        add %r0, 1
        exit
    ",
        0,
    ),
    (
        "pointer_values_in_memory",
        "
        stxdw [%r1], %r10
        mov %r2, %r1
        add %r2, 8
        stxdw [%r1+8], %r2
        mov %r0, %r10
        sub %r0, %r1
        exit
    ",
        16,
    ),
    (
        "out_of_bounds_is_an_interpreter_error",
        "
        ldxdw %r0, [%r1+4096]
        exit
    ",
        8,
    ),
];
