//! Programs' map, ring-buffer, `bpf_trace_printk` and `gpubpf_get_caller` helpers never
//! allocate, whatever they answer: a policy runs inside the application on every call it
//! polices (the shim's rule: no syscall, lock, allocation or `getenv` per call), and a
//! refusal it may meet on every call (a full map or ring, unknown flags, deleting from an
//! array) must cost what a success costs, not a formatted message; a policy may log each
//! refusal it makes with `bpf_printk`. A counting global allocator of this test binary
//! counts what this thread allocates across each helper call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gpubpf_runtime::helper_table::HelperFn;
use gpubpf_runtime::helpers::IMPLEMENTATIONS;
use gpubpf_runtime::maps::{Map, MapMeta, MapSpec, MapType};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the counter is a
// thread-local `Cell` without a destructor, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn helper(id: i32) -> HelperFn {
    IMPLEMENTATIONS
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no helper {id}"))
}

const LOOKUP: i32 = 1;
const UPDATE: i32 = 2;
const DELETE: i32 = 3;
const RINGBUF_OUTPUT: i32 = 130;
const RINGBUF_RESERVE: i32 = 131;
const RINGBUF_SUBMIT: i32 = 132;

/// Calls helper `id` with `args` and returns its result and what this thread allocated.
fn call(id: i32, args: [u64; 5]) -> (u64, u64) {
    let f = helper(id);
    let before = ALLOCATIONS.with(Cell::get);
    let r = f(args[0], args[1], args[2], args[3], args[4]);
    (r, ALLOCATIONS.with(Cell::get) - before)
}

fn map(dir: &tempfile::TempDir, name: &str, map_type: MapType, k: u32, v: u32, n: u32) -> Map {
    let spec = MapSpec {
        map_type,
        key_size: k,
        value_size: v,
        max_entries: n,
        flags: 0,
    };
    let meta = MapMeta {
        name: name.into(),
        ..MapMeta::default()
    };
    Map::create(&dir.path().join(name), &spec, &meta).expect("create map")
}

fn errno(r: u64) -> i32 {
    -(r as i64) as i32
}

#[test]
fn hash_and_array_helpers_allocate_nothing_on_success_or_refusal() {
    let d = tempfile::tempdir().unwrap();
    let hash = map(&d, "h", MapType::Hash, 4, 8, 2);
    let array = map(&d, "a", MapType::Array, 4, 8, 4);
    let (h, a) = (hash.handle(), array.handle());
    let keys = [1u32, 2, 3];
    let value = 7u64;
    let k = |i: usize| &keys[i] as *const u32 as u64;
    let v = &value as *const u64 as u64;

    let cases: [(&str, i32, [u64; 5], i32); 12] = [
        ("hash insert", UPDATE, [h, k(0), v, 0, 0], 0),
        ("hash insert 2", UPDATE, [h, k(1), v, 0, 0], 0),
        ("hash full", UPDATE, [h, k(2), v, 0, 0], libc::E2BIG),
        ("hash exists", UPDATE, [h, k(0), v, 1, 0], libc::EEXIST),
        ("hash missing", UPDATE, [h, k(2), v, 2, 0], libc::ENOENT),
        (
            "hash unknown flags",
            UPDATE,
            [h, k(0), v, 5, 0],
            libc::EINVAL,
        ),
        ("hash delete", DELETE, [h, k(1), 0, 0, 0], 0),
        (
            "hash delete missing",
            DELETE,
            [h, k(1), 0, 0, 0],
            libc::ENOENT,
        ),
        ("array update", UPDATE, [a, k(1), v, 0, 0], 0),
        (
            "array unknown flags",
            UPDATE,
            [a, k(1), v, 9, 0],
            libc::EINVAL,
        ),
        ("array delete", DELETE, [a, k(1), 0, 0, 0], libc::EINVAL),
        ("array exists", UPDATE, [a, k(1), v, 1, 0], libc::EEXIST),
    ];
    for (what, id, args, want) in cases {
        let (r, allocated) = call(id, args);
        assert_eq!(errno(r), want, "{what}: result");
        assert_eq!(allocated, 0, "{what}: allocated {allocated} times");
    }
    let (r, allocated) = call(LOOKUP, [h, k(0), 0, 0, 0]);
    assert_ne!(r, 0, "lookup finds key 1");
    assert_eq!(allocated, 0, "lookup allocated");
}

#[test]
fn ring_helpers_allocate_nothing_when_the_ring_is_full_or_the_record_too_large() {
    let d = tempfile::tempdir().unwrap();
    let ring = map(&d, "r", MapType::RingBuf, 0, 0, 4096);
    let rb = ring.handle();
    let data = [0u8; 64];
    let p = data.as_ptr() as u64;
    let mut submitted = 0;
    // Fill the ring: until then every reservation succeeds (and is submitted).
    loop {
        let (r, allocated) = call(RINGBUF_RESERVE, [rb, 64, 0, 0, 0]);
        if r == 0 {
            // The first drop says once that the ring is full (a log line may allocate).
            break;
        }
        assert_eq!(allocated, 0, "reserve #{submitted} allocated");
        let (_, allocated) = call(RINGBUF_SUBMIT, [r, 0, 0, 0, 0]);
        assert_eq!(allocated, 0, "submit allocated");
        submitted += 1;
    }
    assert!(submitted > 0, "nothing fit an empty ring");
    for round in 0..3 {
        let (r, allocated) = call(RINGBUF_RESERVE, [rb, 64, 0, 0, 0]);
        assert_eq!(r, 0, "round {round}: reserved in a full ring");
        assert_eq!(allocated, 0, "round {round}: a drop allocated");
        let (r, allocated) = call(RINGBUF_OUTPUT, [rb, p, 64, 0, 0]);
        assert_eq!(
            errno(r),
            libc::EAGAIN,
            "round {round}: output into a full ring"
        );
        assert_eq!(allocated, 0, "round {round}: output's drop allocated");
    }
    let (r, allocated) = call(RINGBUF_RESERVE, [rb, 1 << 20, 0, 0, 0]);
    assert_eq!(r, 0, "a record larger than the ring");
    assert_eq!(allocated, 0, "a record too large allocated");
    let big = vec![0u8; 8192];
    let (r, allocated) = call(RINGBUF_OUTPUT, [rb, big.as_ptr() as u64, 8192, 0, 0]);
    assert_eq!(
        errno(r),
        libc::EINVAL,
        "output of a record larger than the ring"
    );
    assert_eq!(allocated, 0, "output of a record too large allocated");
    let stats = ring.ringbuf_stats().expect("ring stats");
    assert_eq!(stats.dropped, 1 + 3 * 2, "every drop counted");
}

#[test]
fn trace_printk_allocates_nothing() {
    const PRINTK: i32 = 6;
    let d = tempfile::tempdir().unwrap();
    // A ring of one page: it fills after a few lines, so drops are exercised too.
    let ring = std::sync::Arc::new(map(&d, "trace", MapType::RingBuf, 0, 0, 4096));
    gpubpf_runtime::helpers::trace::set_sink(gpubpf_runtime::helpers::trace::TraceSink::Ring(
        ring.clone(),
    ));
    let fmt = b"quota: pid %u denied %llu bytes (%s) 100%%\0";
    let name = b"process limit \xff\0";
    let args = |n: u64| {
        [
            fmt.as_ptr() as u64,
            fmt.len() as u64,
            42,
            n,
            name.as_ptr() as u64,
        ]
    };
    // The first line may initialise lazily cached state (the process's name, the clock).
    call(PRINTK, args(0));
    for n in 1..100u64 {
        let (r, allocated) = call(PRINTK, args(n << 20));
        assert!((r as i64) > 0, "line {n}: {}", r as i64);
        assert_eq!(allocated, 0, "line {n} allocated {allocated} times");
    }
    // A format the helper refuses allocates nothing either.
    let bad = b"%q\0";
    let (r, allocated) = call(PRINTK, [bad.as_ptr() as u64, 3, 0, 0, 0]);
    assert_eq!(errno(r), libc::EINVAL);
    assert_eq!(allocated, 0, "a refused format allocated");
    gpubpf_runtime::helpers::trace::set_sink(gpubpf_runtime::helpers::trace::TraceSink::Off);
    let mut lines = Vec::new();
    ring.ringbuf_consume(|r| lines.push(String::from_utf8_lossy(r).into_owned()))
        .unwrap();
    assert!(!lines.is_empty());
    assert!(
        lines[1].ends_with(": quota: pid 42 denied 1048576 bytes (process limit \u{fffd}) 100%\n"),
        "{}",
        lines[1]
    );
}

#[test]
fn get_caller_allocates_nothing() {
    let id = gpubpf_verifier::helpers::GPUBPF_HELPER_BASE + 2;
    // A return address inside this test binary: the helper names the module and offset.
    let here = get_caller_allocates_nothing as *const () as u64 + 1;
    gpubpf_runtime::helpers::caller::set_caller(here);
    let mut buf = [0u8; 64];
    call(id, [buf.as_mut_ptr() as u64, 64, 0, 0, 0]);
    let (r, allocated) = call(id, [buf.as_mut_ptr() as u64, 64, 0, 0, 0]);
    assert!((r as i64) > 0, "{}", r as i64);
    assert_eq!(
        allocated, 0,
        "gpubpf_get_caller allocated {allocated} times"
    );
    let n = buf.iter().position(|b| *b == 0).unwrap();
    let site = std::str::from_utf8(&buf[..n]).unwrap();
    assert!(
        site.starts_with("helpers_no_alloc") && site.contains("+0x"),
        "{site}"
    );
    gpubpf_runtime::helpers::caller::set_caller(0);
}

/// The shim writes an audit record on every decision (a policy refusing each call of an
/// application that retries): encoding one allocates nothing.
#[test]
fn audit_records_encode_without_allocating() {
    use gpubpf_runtime::registry::audit::{AuditRecord, AuditRecordRef};
    let rec = AuditRecordRef {
        time_ns: 1,
        realtime_ns: 2,
        pid: 3,
        tid: 4,
        api_id: 5,
        api: "cuMemAlloc",
        phase: "entry",
        object: "quota \"limited\"",
        program: "quota_alloc",
        verdict: 2,
        previous: Some(0),
        shadow: false,
    };
    let mut buf = [0u8; 1024];
    let before = ALLOCATIONS.with(Cell::get);
    let n = rec.encode_into(&mut buf).expect("fits");
    assert_eq!(
        ALLOCATIONS.with(Cell::get) - before,
        0,
        "encoding allocated"
    );
    let back = AuditRecord::decode(&buf[..n]).expect("decodes");
    assert_eq!(back.object, "quota \"limited\"");
    assert_eq!(back.previous, Some(0));
}
