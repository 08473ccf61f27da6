//! JIT benchmarks: policy-shaped workloads on our JIT, our interpreter, rbpf's interpreter
//! and JIT, and the same logic as native Rust; plus compile time per 1000 instructions.
//!
//! `cargo bench --bench jit -- --warm-up-time 1 --measurement-time 2`
//! Results and ratios: docs/jit.md.
//!
//! Every benchmark measures the *thread CPU time* of its iterations
//! (`CLOCK_THREAD_CPUTIME_ID`, through `iter_custom`), not wall time: the development and CI
//! machines are shared and heavily loaded, and CPU time is what a policy costs the hooked
//! thread. Criterion's "time" is therefore CPU time per iteration.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, measurement::WallTime, Bencher, BenchmarkId, Criterion,
    Throughput,
};
use gpubpf_isa::{asm::assemble, slots_to_bytes, Insn};
use gpubpf_runtime::helper_table::{HelperTable, STACK_SIZE};
use gpubpf_runtime::interp::{Interpreter, Program};
use gpubpf_runtime::jit::{CompiledProgram, JitCompiler};

// ----- workloads --------------------------------------------------------------------------

const TABLE_SLOTS: usize = 256;
const QUERIES: usize = 64;

/// Open-addressing hash table lookups: 64 queries into a 256-slot table of (key, value).
const HASH_LOOKUP: &str = "
    mov %r0, 0
    mov %r6, 0
next_query:
    mov %r2, %r6
    lsh %r2, 3
    add %r2, %r1
    ldxdw %r3, [%r2+4096]
    mov %r4, %r3
    mul %r4, 0x7feb352d
    rsh %r4, 32
    and %r4, 255
probe:
    mov %r5, %r4
    lsh %r5, 4
    add %r5, %r1
    ldxdw %r7, [%r5]
    jeq %r7, %r3, found
    jeq %r7, 0, miss
    add %r4, 1
    and %r4, 255
    ja probe
found:
    ldxdw %r7, [%r5+8]
    add %r0, %r7
miss:
    add %r6, 1
    jlt %r6, 64, next_query
    exit
";

fn slot_of(key: u64) -> usize {
    ((key.wrapping_mul(0x7feb_352d) >> 32) & 255) as usize
}

fn native_hash_lookup(table: &[(u64, u64)], queries: &[u64]) -> u64 {
    let mut sum = 0u64;
    for &k in queries {
        let mut s = slot_of(k);
        loop {
            let (key, value) = table[s];
            if key == k {
                sum = sum.wrapping_add(value);
                break;
            }
            if key == 0 {
                break;
            }
            s = (s + 1) & (TABLE_SLOTS - 1);
        }
    }
    sum
}

/// The hash table and queries, as typed data and as the program's memory image.
fn hash_data() -> (Vec<(u64, u64)>, Vec<u64>, Vec<u8>) {
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x | 1
    };
    let mut table = vec![(0u64, 0u64); TABLE_SLOTS];
    let mut keys = Vec::new();
    for _ in 0..192 {
        let k = rnd();
        let mut s = slot_of(k);
        while table[s].0 != 0 {
            s = (s + 1) & (TABLE_SLOTS - 1);
        }
        table[s] = (k, rnd() >> 8);
        keys.push(k);
    }
    let queries: Vec<u64> = (0..QUERIES)
        .map(|i| if i % 2 == 0 { keys[i * 2] } else { rnd() })
        .collect();
    let mut mem = Vec::with_capacity(TABLE_SLOTS * 16 + QUERIES * 8);
    for (k, v) in &table {
        mem.extend_from_slice(&k.to_le_bytes());
        mem.extend_from_slice(&v.to_le_bytes());
    }
    for q in &queries {
        mem.extend_from_slice(&q.to_le_bytes());
    }
    (table, queries, mem)
}

const SIEVE_N: usize = 8192;

/// Sieve of Eratosthenes over an 8192-byte buffer; returns the number of primes. Three
/// loops, also benchmarked one by one (`prime_sieve_parts`) to show where time goes.
const SIEVE_INIT: &str = "
    mov %r2, 0
init:
    mov %r3, %r1
    add %r3, %r2
    stb [%r3], 1
    add %r2, 1
    jlt %r2, 8192, init
";
const SIEVE_MARK: &str = "
    mov %r2, 2
outer:
    mov %r3, %r2
    mul %r3, %r2
    jge %r3, 8192, count
    mov %r4, %r1
    add %r4, %r2
    ldxb %r5, [%r4]
    jeq %r5, 0, next_i
inner:
    mov %r4, %r1
    add %r4, %r3
    stb [%r4], 0
    add %r3, %r2
    jlt %r3, 8192, inner
next_i:
    add %r2, 1
    ja outer
count:
";
const SIEVE_COUNT: &str = "
    mov %r0, 0
    mov %r2, 2
cnt:
    mov %r4, %r1
    add %r4, %r2
    ldxb %r5, [%r4]
    add %r0, %r5
    add %r2, 1
    jlt %r2, 8192, cnt
";

fn sieve_src(parts: &[&str]) -> String {
    format!("{}    exit\n", parts.concat())
}

fn native_sieve_init(buf: &mut [u8]) {
    for b in buf.iter_mut() {
        *b = 1;
    }
}

fn native_sieve_mark(buf: &mut [u8]) {
    let n = buf.len();
    let mut i = 2;
    while i * i < n {
        if buf[i] != 0 {
            let mut j = i * i;
            while j < n {
                buf[j] = 0;
                j += i;
            }
        }
        i += 1;
    }
}

fn native_sieve_count(buf: &[u8]) -> u64 {
    buf[2..].iter().map(|b| u64::from(*b)).sum()
}

fn native_sieve(buf: &mut [u8]) -> u64 {
    native_sieve_init(buf);
    native_sieve_mark(buf);
    native_sieve_count(buf)
}

const BYTES_N: usize = 4096;

/// FNV-1a over a 4096-byte buffer, one byte per iteration.
const BYTE_LOOP: &str = "
    lddw %r0, 0xcbf29ce484222325
    lddw %r4, 0x100000001b3
    mov %r2, %r1
    mov %r3, %r1
    add %r3, 4096
loop:
    ldxb %r5, [%r2]
    xor %r0, %r5
    mul %r0, %r4
    add %r2, 1
    jlt %r2, %r3, loop
    exit
";

fn native_byte_loop(buf: &[u8]) -> u64 {
    buf.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

const MIX_ID: i32 = 100;

/// 64 helper calls, each feeding the next.
const HELPER_LOOP: &str = "
    mov %r6, 0
    mov %r7, 0
loop:
    mov %r1, %r6
    mov %r2, %r7
    call 100
    mov %r7, %r0
    add %r6, 1
    jlt %r6, 64, loop
    mov %r0, %r7
    exit
";

#[inline(never)]
extern "C" fn mix(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    (b ^ a).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
}

fn mix_rbpf(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    mix(a, b, c, d, e)
}

fn native_helper_loop() -> u64 {
    let f: extern "C" fn(u64, u64, u64, u64, u64) -> u64 = black_box(mix);
    let mut acc = 0;
    for i in 0..64 {
        acc = f(i, acc, 0, 0, 0);
    }
    acc
}

// ----- measurement ------------------------------------------------------------------------

/// CPU time consumed by the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant supported by Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Like `Bencher::iter`, measuring thread CPU time.
fn cpu_iter<O>(b: &mut Bencher<'_, WallTime>, mut f: impl FnMut() -> O) {
    b.iter_custom(|iters| {
        let start = thread_cpu_time();
        for _ in 0..iters {
            black_box(f());
        }
        thread_cpu_time().saturating_sub(start)
    })
}

// ----- engines ----------------------------------------------------------------------------

fn helpers() -> HelperTable {
    let mut t = HelperTable::new();
    t.register_with_args(MIX_ID, "mix", mix, 2);
    t
}

fn asm(src: &str) -> Vec<Insn> {
    assemble(src).unwrap_or_else(|e| panic!("bench program does not assemble: {e}"))
}

struct Engines {
    jit: CompiledProgram,
    interp: Interpreter,
    bytes: Vec<u8>,
}

impl Engines {
    fn new(src: &str) -> Self {
        let slots = asm(src);
        let jit = JitCompiler::new()
            .and_then(|mut c| c.compile(&slots, &helpers()))
            .unwrap_or_else(|e| panic!("jit: {e}"));
        let interp = Interpreter::new(Program::from_insns(&slots).expect("decodes"), helpers());
        Self {
            jit,
            interp,
            bytes: slots_to_bytes(&slots),
        }
    }

    fn run_jit(&self, mem: &mut [u8], stack: &mut [u8; STACK_SIZE]) -> u64 {
        // SAFETY: the bench programs only touch `mem` (r1) and their stack.
        unsafe {
            self.jit
                .execute_with_args([mem.as_mut_ptr() as u64, mem.len() as u64], stack)
        }
        .expect("jit run")
    }

    fn run_interp(&self, mem: &mut [u8], stack: &mut [u8; STACK_SIZE]) -> u64 {
        // SAFETY: as above.
        unsafe {
            self.interp
                .execute_unchecked(&[mem.as_mut_ptr() as u64, mem.len() as u64], stack)
        }
        .expect("interpreter run")
    }
}

fn rbpf_vm(bytes: &[u8]) -> rbpf::EbpfVmRaw<'_> {
    let mut vm = rbpf::EbpfVmRaw::new(Some(bytes)).expect("rbpf accepts the program");
    vm.register_helper(MIX_ID as u32, mix_rbpf).expect("helper");
    vm
}

/// Benchmarks one workload on every engine; all engines must agree with `expected`.
fn bench_workload(
    c: &mut Criterion,
    name: &str,
    src: &str,
    mem: &[u8],
    native: impl Fn(&mut [u8]) -> u64,
) {
    let e = Engines::new(src);
    let mut stack = Box::new([0u8; STACK_SIZE]);
    let mut m = mem.to_vec();
    let expected = native(&mut m);
    assert_eq!(
        e.run_jit(&mut mem.to_vec(), &mut stack),
        expected,
        "{name}: jit"
    );
    assert_eq!(
        e.run_interp(&mut mem.to_vec(), &mut stack),
        expected,
        "{name}: interpreter"
    );
    let mut vm = rbpf_vm(&e.bytes);
    assert_eq!(
        vm.execute_program(&mut mem.to_vec()).expect("rbpf"),
        expected,
        "{name}: rbpf"
    );
    let rbpf_jit = vm.jit_compile().is_ok();

    let mut g = c.benchmark_group(name);
    g.bench_function("native", |b| cpu_iter(b, || native(black_box(&mut m))));
    g.bench_function("jit", |b| {
        cpu_iter(b, || e.run_jit(black_box(&mut m), &mut stack))
    });
    g.bench_function("interpreter", |b| {
        cpu_iter(b, || e.run_interp(black_box(&mut m), &mut stack))
    });
    g.bench_function("rbpf_interpreter", |b| {
        cpu_iter(b, || vm.execute_program(black_box(&mut m)).expect("rbpf"))
    });
    if rbpf_jit {
        g.bench_function("rbpf_jit", |b| {
            cpu_iter(b, || {
                // SAFETY: rbpf's JIT runs the same bench program, which stays inside `m`.
                unsafe { vm.execute_program_jit(black_box(&mut m)) }.expect("rbpf jit")
            })
        });
    }
    g.finish();
}

fn workloads(c: &mut Criterion) {
    let (table, queries, hash_mem) = hash_data();
    bench_workload(c, "hash_lookup", HASH_LOOKUP, &hash_mem, |_| {
        native_hash_lookup(black_box(&table), black_box(&queries))
    });
    let sieve = sieve_src(&[SIEVE_INIT, SIEVE_MARK, SIEVE_COUNT]);
    bench_workload(c, "prime_sieve", &sieve, &vec![0u8; SIEVE_N], native_sieve);
    sieve_parts(c);
    let bytes: Vec<u8> = (0..BYTES_N).map(|i| (i * 31 % 251) as u8).collect();
    bench_workload(c, "byte_loop", BYTE_LOOP, &bytes, |m| native_byte_loop(m));
    bench_workload(c, "helper_calls", HELPER_LOOP, &[0u8; 8], |_| {
        native_helper_loop()
    });
}

/// The sieve's three loops one by one, JIT and native only: initialisation (a fill the
/// native compiler turns into `memset`), crossing out (strided stores, scalar everywhere) and
/// counting (a byte sum the native compiler vectorises). Each part runs on a buffer holding
/// what the full sieve would have there (all ones; the finished sieve for counting).
fn sieve_parts(c: &mut Criterion) {
    let mut sieved = vec![0u8; SIEVE_N];
    let primes = native_sieve(&mut sieved);
    let mut g = c.benchmark_group("prime_sieve_parts");
    let mut stack = Box::new([0u8; STACK_SIZE]);
    type Native = fn(&mut [u8]) -> u64;
    let parts: [(&str, &str, Native); 3] = [
        ("init", SIEVE_INIT, |b| {
            native_sieve_init(b);
            0
        }),
        ("mark", SIEVE_MARK, |b| {
            native_sieve_mark(b);
            0
        }),
        ("count", SIEVE_COUNT, |b| native_sieve_count(b)),
    ];
    for (name, part, native) in parts {
        let e = Engines::new(&sieve_src(&[part]));
        let start = if name == "count" {
            sieved.clone()
        } else {
            vec![1u8; SIEVE_N]
        };
        let mut m = start.clone();
        let want = native(&mut m);
        let mut j = start.clone();
        let got = e.run_jit(&mut j, &mut stack);
        assert_eq!(j, m, "sieve {name}: memory");
        if name == "count" {
            assert_eq!((want, got), (primes, primes), "sieve count");
        }
        g.bench_function(format!("{name}/native"), |b| {
            cpu_iter(b, || native(black_box(&mut m)))
        });
        g.bench_function(format!("{name}/jit"), |b| {
            cpu_iter(b, || e.run_jit(black_box(&mut j), &mut stack))
        });
    }
    g.finish();
}

/// A deterministic ~1000-instruction program: ALU, stack traffic and forward branches.
fn thousand_insns() -> Vec<Insn> {
    let mut src = String::from("mov %r0, 1\nmov %r2, 2\nstxdw [%r10-8], %r0\n");
    for k in 0..100 {
        src.push_str(&format!(
            "add %r0, {k}\nmul %r2, %r0\nldxdw %r3, [%r10-8]\nxor %r0, %r3\njgt %r0, %r2, +2\n\
             stxdw [%r10-16], %r0\nrsh %r2, 3\nor %r0, %r2\nsub %r3, 1\nmov %r4, %r3\n"
        ));
    }
    src.push_str("exit\n");
    asm(&src)
}

fn compile_time(c: &mut Criterion) {
    let slots = thousand_insns();
    let mut compiler = JitCompiler::new().expect("host isa");
    let helpers = helpers();
    let mut g = c.benchmark_group("compile");
    g.throughput(Throughput::Elements(slots.len() as u64));
    g.bench_with_input(BenchmarkId::new("jit", slots.len()), &slots, |b, s| {
        cpu_iter(b, || {
            compiler.compile(black_box(s), &helpers).expect("compiles")
        })
    });
    let sieve = sieve_src(&[SIEVE_INIT, SIEVE_MARK, SIEVE_COUNT]);
    for (name, src) in [
        ("hash_lookup", HASH_LOOKUP),
        ("prime_sieve", sieve.as_str()),
    ] {
        let s = asm(src);
        g.bench_with_input(BenchmarkId::new("jit", name), &s, |b, s| {
            cpu_iter(b, || {
                compiler.compile(black_box(s), &helpers).expect("compiles")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, workloads, compile_time);
criterion_main!(benches);
