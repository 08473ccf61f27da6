use super::*;
use crate::helper_table::STACK_SIZE_PER_FRAME;
use gpubpf_isa::assemble;

fn vm(src: &str) -> Interpreter {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    Interpreter::new(
        Program::from_insns(&insns).expect("decodes"),
        HelperTable::new(),
    )
}

fn run_with(vm: &Interpreter, args: &[u64], memory: &Memory<'_>) -> Result<u64, ExecError> {
    let mut stack = vec![0u8; STACK_SIZE];
    vm.execute(args, &mut stack, memory)
}

fn run(src: &str) -> Result<u64, ExecError> {
    run_with(&vm(src), &[], &Memory::new())
}

fn ok(src: &str) -> u64 {
    run(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

#[test]
fn arithmetic_table() {
    let cases: &[(&str, u64)] = &[
        ("mov %r0, -1\nexit", u64::MAX),
        ("mov32 %r0, -1\nexit", 0xffff_ffff),
        ("mov %r0, 7\ndiv %r0, 0\nexit", 0),
        ("mov %r0, 7\nmod32 %r0, 0\nexit", 7),
        (
            "lddw %r0, 0x8000000000000000\nsdiv %r0, -1\nexit",
            0x8000_0000_0000_0000,
        ),
        ("lddw %r0, 0x8000000000000000\nsmod %r0, -1\nexit", 0),
        ("mov %r0, 1\nlsh %r0, 65\nexit", 2),
        ("mov %r0, -8\narsh32 %r0, 1\nexit", 0xffff_fffc),
        ("mov %r0, 5\nneg %r0\nexit", -5i64 as u64),
        ("mov %r0, 5\nneg32 %r0\nexit", 0xffff_fffb),
        (
            "mov %r1, 0x80\nmovsx864 %r0, %r1\nexit",
            0xffff_ffff_ffff_ff80,
        ),
        ("lddw %r0, 0x1122334455667788\nbe32 %r0\nexit", 0x8877_6655),
        ("lddw %r0, 0x1122334455667788\nle16 %r0\nexit", 0x7788),
        ("mov %r0, -1\nadd32 %r0, 1\nexit", 0),
        (
            "mov %r0, 1\nmov %r1, -1\njsgt %r0, %r1, +1\nmov %r0, 9\nexit",
            1,
        ),
        (
            "mov %r0, 1\nlddw %r1, 0x100000001\njeq32 %r0, %r1, +1\nmov %r0, 9\nexit",
            1,
        ),
    ];
    for (src, want) in cases {
        assert_eq!(ok(src), *want, "{src}");
    }
}

#[test]
fn memory_through_ctx_region() {
    let vm = vm("ldxh %r0, [%r1+1]\nstb [%r1], 0x7f\nldxsb %r2, [%r1+3]\nadd %r0, %r2\nexit");
    let mut data = [0x11u8, 0x22, 0x33, 0xff];
    let mut memory = Memory::new();
    let addr = memory.add_mut("ctx", &mut data);
    let r0 = run_with(&vm, &[addr, 4], &memory).expect("runs");
    assert_eq!(r0, 0x3322u64.wrapping_sub(1));
    drop(memory);
    assert_eq!(data[0], 0x7f);
}

#[test]
fn out_of_bounds_access_is_an_error_naming_pc_address_and_size() {
    let vm = vm("mov %r0, 0\nldxw %r0, [%r1+2]\nexit");
    let mut data = [0u8; 4];
    let mut memory = Memory::new();
    let addr = memory.add_mut("ctx", &mut data);
    let e = run_with(&vm, &[addr], &memory).expect_err("out of bounds");
    assert_eq!(
        e,
        ExecError::OutOfBounds {
            pc: 1,
            addr: addr + 2,
            size: 4,
            access: AccessKind::Read
        }
    );
    // Null pointer and above the stack.
    assert!(matches!(
        run("mov %r1, 0\nldxb %r0, [%r1]\nexit"),
        Err(ExecError::OutOfBounds { pc: 1, addr: 0, .. })
    ));
    assert!(matches!(
        run("stxb [%r10], %r1\nexit"),
        Err(ExecError::OutOfBounds { pc: 0, .. })
    ));
    assert_eq!(ok("stxb [%r10-1], %r1\nmov %r0, 0\nexit"), 0);
    assert!(matches!(
        run(&format!("stxb [%r10-{}], %r1\nexit", STACK_SIZE + 1)),
        Err(ExecError::OutOfBounds { .. })
    ));
}

#[test]
fn read_only_region_rejects_writes() {
    let vm = vm("stb [%r1], 1\nexit");
    let data = [0u8; 4];
    let mut memory = Memory::new();
    let addr = memory.add_ref("map value", &data);
    let e = run_with(&vm, &[addr], &memory).expect_err("read only");
    assert!(matches!(
        e,
        ExecError::PermissionDenied {
            pc: 0,
            region: "map value",
            access: AccessKind::Write,
            ..
        }
    ));
    assert!(e.to_string().contains("map value"));
}

#[test]
fn atomics() {
    let cases: &[(&str, u64)] = &[
        ("mov %r1, 5\nstxdw [%r10-8], %r1\nlock add [%r10-8], %r1\nldxdw %r0, [%r10-8]\nexit", 10),
        ("mov %r1, 5\nstxdw [%r10-8], %r1\nlock fetch add [%r10-8], %r1\nmov %r0, %r1\nexit", 5),
        ("mov %r1, 6\nstxw [%r10-4], %r1\nmov %r1, 3\nlock fetch and32 [%r10-4], %r1\nldxw %r0, [%r10-4]\nlsh %r0, 8\nor %r0, %r1\nexit", 0x206),
        ("mov %r1, 1\nstxdw [%r10-8], %r1\nmov %r1, 2\nlock xchg [%r10-8], %r1\nldxdw %r0, [%r10-8]\nlsh %r0, 4\nor %r0, %r1\nexit", 0x21),
        ("mov %r1, 1\nstxdw [%r10-8], %r1\nmov %r0, 1\nmov %r1, 9\nlock cmpxchg [%r10-8], %r1\nldxdw %r2, [%r10-8]\nlsh %r2, 4\nor %r0, %r2\nexit", 0x91),
        ("mov %r1, 1\nstxw [%r10-4], %r1\nmov %r0, 2\nmov %r1, 9\nlock cmpxchg32 [%r10-4], %r1\nldxw %r2, [%r10-4]\nlsh %r2, 4\nor %r0, %r2\nexit", 0x11),
        ("lddw %r1, 0xffffffffffffffff\nstxw [%r10-4], %r1\nlock fetch xor32 [%r10-4], %r1\nmov %r0, %r1\nexit", 0xffff_ffff),
    ];
    for (src, want) in cases {
        assert_eq!(ok(src), *want, "{src}");
    }
    assert!(matches!(
        run("lock add [%r10-12], %r1\nexit"),
        Err(ExecError::MisalignedAtomic { pc: 0, size: 8, .. })
    ));
}

#[test]
fn control_flow_errors() {
    assert!(matches!(
        run("ja +5\nexit"),
        Err(ExecError::BadJumpTarget { pc: 0, target: 6 })
    ));
    assert!(matches!(
        run("ja +1\nlddw %r0, 1\nexit"),
        Err(ExecError::BadJumpTarget { pc: 0, target: 2 })
    ));
    assert!(matches!(
        run("mov %r0, 0"),
        Err(ExecError::FellOffEnd { pc: 1 })
    ));
    assert!(matches!(
        run("mov %r10, 0\nexit"),
        Err(ExecError::FramePointerWrite { pc: 0 })
    ));
    assert!(matches!(
        run("call 1\nexit"),
        Err(ExecError::UnknownHelper { pc: 0, id: 1 })
    ));
    assert!(matches!(
        run("lddw %r1, map_idx 0\nexit"),
        Err(ExecError::UnresolvedLddw { pc: 0, .. })
    ));
    let limited = vm("mov %r0, 0\nadd %r0, 1\nja -2").with_instruction_limit(100);
    assert_eq!(
        run_with(&limited, &[], &Memory::new()),
        Err(ExecError::InstructionLimit { limit: 100 })
    );
}

#[test]
fn local_calls_use_the_frame_layout_and_preserve_callee_saved() {
    // f returns its r10 minus the caller's r10 (passed in r1).
    let src = "mov %r6, 6\nmov %r1, %r10\ncall local f\njne %r6, 6, +1\nexit\nmov %r0, 99\nexit\n\
               f:\nmov %r6, 0\nmov %r0, %r10\nsub %r0, %r1\nexit";
    assert_eq!(ok(src), (-(STACK_SIZE_PER_FRAME as i64)) as u64);
    // Unbounded recursion stops at MAX_CALL_FRAMES.
    assert!(matches!(
        run("call local -1\nexit"),
        Err(ExecError::CallDepthExceeded { .. })
    ));
    // Exactly 8 frames fit: the entry plus 7 nested calls.
    let mut nested = String::new();
    for i in 0..7 {
        nested.push_str(&format!("call local f{i}\nexit\nf{i}:\n"));
    }
    nested.push_str("mov %r0, 42\nexit\n");
    assert_eq!(ok(&nested), 42);
}

extern "C" fn add_helper(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a.wrapping_add(b)
}

#[test]
fn helpers_and_callx() {
    let mut helpers = HelperTable::new();
    helpers.register(7, "add", add_helper);
    let insns = assemble(
        "mov %r1, 2\nmov %r2, 3\ncall 7\nmov %r1, %r0\nmov %r2, 3\nmov %r3, 7\ncall %r3\nexit",
    )
    .expect("assembles");
    let vm = Interpreter::new(Program::from_insns(&insns).expect("decodes"), helpers);
    assert_eq!(run_with(&vm, &[], &Memory::new()), Ok(8));
}

#[test]
fn bpf_loop_calls_back_in_the_next_frame() {
    // Sum of indices 0..10 accumulated through ctx (a stack slot of frame 0).
    let src = "mov %r1, 0\nstxdw [%r10-8], %r1\nmov %r1, 10\nlddw %r2, func cb\nmov %r3, %r10\n\
               add %r3, -8\nmov %r4, 0\ncall 181\nldxdw %r1, [%r10-8]\nlsh %r0, 16\nor %r0, %r1\nexit\n\
               cb:\nldxdw %r3, [%r2]\nadd %r3, %r1\nstxdw [%r2], %r3\nmov %r0, 0\nexit";
    assert_eq!(ok(src), (10 << 16) | 45);
    // Stops early when the callback returns non-zero: 3 invocations (indices 0, 1, 2).
    let early = "mov %r1, 100\nlddw %r2, func cb\nmov %r3, 0\nmov %r4, 0\ncall 181\nexit\n\
                 cb:\nmov %r0, 0\njne %r1, 2, +1\nmov %r0, 1\nexit";
    assert_eq!(ok(early), 3);
    assert!(matches!(
        run("mov %r1, 1\nmov %r2, 1000\ncall 181\nexit"),
        Err(ExecError::BadCallback { .. })
    ));
}

#[test]
fn unchecked_mode_runs_verified_programs() {
    let vm = vm("mov %r1, 7\nstxdw [%r10-8], %r1\nldxdw %r0, [%r10-8]\nexit");
    let mut stack = vec![0u8; STACK_SIZE];
    // SAFETY: the program only touches its own stack.
    let r0 = unsafe { vm.execute_unchecked(&[], &mut stack) };
    assert_eq!(r0, Ok(7));
}

#[test]
fn argument_and_stack_validation() {
    let vm = vm("exit");
    let mut small = vec![0u8; 16];
    assert!(matches!(
        vm.execute(&[], &mut small, &Memory::new()),
        Err(ExecError::StackTooSmall { .. })
    ));
    assert!(matches!(
        run_with(&vm, &[0; 6], &Memory::new()),
        Err(ExecError::TooManyArguments { count: 6 })
    ));
    assert_eq!(Program::from_insns(&[]), Err(ExecError::EmptyProgram));
}
