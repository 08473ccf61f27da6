//! Unit tests of the helpers, called through the table as the engines do.

use super::*;
use crate::maps::{Map, MapMeta, MapSpec, MapType};

fn call(t: &HelperTable, id: i32, a: [u64; 5]) -> u64 {
    let f = t.get(id).unwrap();
    f(a[0], a[1], a[2], a[3], a[4])
}

#[test]
fn every_signature_has_an_implementation() {
    assert_eq!(missing_implementations(), Vec::<i32>::new());
    let t = standard_helpers();
    assert_eq!(t.ids().count(), IMPLEMENTATIONS.len());
    assert_eq!(t.name(1), Some("bpf_map_lookup_elem"));
    assert!(t.get(BPF_LOOP_ID).is_none());
}

#[test]
fn map_helpers_return_shared_pointers_and_errnos() {
    let d = tempfile::tempdir().unwrap();
    let spec = MapSpec {
        map_type: MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 2,
        flags: 0,
    };
    let m = Map::create(&d.path().join("h"), &spec, &MapMeta::default()).unwrap();
    let t = standard_helpers();
    let h = m.handle();
    let k = 5u32;
    let v = 9u64;
    let kp = &k as *const u32 as u64;
    let vp = &v as *const u64 as u64;
    assert_eq!(call(&t, 1, [h, kp, 0, 0, 0]), 0);
    assert_eq!(call(&t, 2, [h, kp, vp, 0, 0]), 0);
    assert_eq!(
        call(&t, 2, [h, kp, vp, 1, 0]) as i64,
        -i64::from(libc::EEXIST)
    );
    let p = call(&t, 1, [h, kp, 0, 0, 0]) as *const std::sync::atomic::AtomicU64;
    assert!(!p.is_null());
    // SAFETY: p points at the 8-byte value in the shared mapping.
    unsafe { (*p).fetch_add(1, std::sync::atomic::Ordering::SeqCst) };
    assert_eq!(
        m.lookup(&5u32.to_ne_bytes()).unwrap(),
        Some(10u64.to_ne_bytes().to_vec())
    );
    assert_eq!(call(&t, 3, [h, kp, 0, 0, 0]), 0);
    assert_eq!(
        call(&t, 3, [h, kp, 0, 0, 0]) as i64,
        -i64::from(libc::ENOENT)
    );
}

#[test]
fn ringbuf_helpers() {
    let d = tempfile::tempdir().unwrap();
    let spec = MapSpec {
        map_type: MapType::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: crate::maps::mapping::page_size() as u32,
        flags: 0,
    };
    let m = Map::create(&d.path().join("r"), &spec, &MapMeta::default()).unwrap();
    let t = standard_helpers();
    let h = m.handle();
    let data = *b"hello";
    assert_eq!(call(&t, 130, [h, data.as_ptr() as u64, 5, 0, 0]), 0);
    assert_eq!(
        call(&t, 130, [h, data.as_ptr() as u64, 5, 8, 0]) as i64,
        -22
    );
    let p = call(&t, 131, [h, 16, 0, 0, 0]);
    assert_ne!(p, 0);
    assert_eq!(call(&t, 131, [h, 16, 1, 0, 0]), 0);
    // SAFETY: 16 reserved bytes.
    unsafe { std::ptr::write_bytes(p as *mut u8, 7, 16) };
    call(&t, 132, [p, 0, 0, 0, 0]);
    let q = call(&t, 131, [h, 8, 0, 0, 0]);
    call(&t, 133, [q, 0, 0, 0, 0]);
    let mut got = Vec::new();
    m.ringbuf_consume(|r| got.push(r.to_vec())).unwrap();
    assert_eq!(got, vec![b"hello".to_vec(), vec![7; 16]]);
}

#[test]
fn identity_time_random() {
    let t = standard_helpers();
    let pt = call(&t, 14, [0; 5]);
    assert_eq!((pt >> 32) as u32, std::process::id());
    // SAFETY: gettid cannot fail.
    assert_eq!(pt as u32, unsafe { libc::gettid() } as u32);
    // SAFETY: getuid cannot fail.
    assert_eq!(call(&t, 15, [0; 5]) as u32, unsafe { libc::getuid() });
    let a = call(&t, 5, [0; 5]);
    let b = call(&t, 5, [0; 5]);
    assert!(b >= a && a > 0);
    let r: Vec<u64> = (0..8).map(|_| call(&t, 7, [0; 5])).collect();
    assert!(r.iter().all(|x| *x <= u64::from(u32::MAX)));
    assert!(r.windows(2).any(|w| w[0] != w[1]));
    let mut comm = [0xffu8; 4];
    assert_eq!(call(&t, 16, [comm.as_mut_ptr() as u64, 4, 0, 0, 0]), 0);
    assert_eq!(comm[3], 0);
}

#[test]
fn probe_reads_are_fault_safe() {
    let t = standard_helpers();
    let src = *b"abc\0def";
    let mut dst = [0xffu8; 7];
    assert_eq!(
        call(
            &t,
            112,
            [dst.as_mut_ptr() as u64, 7, src.as_ptr() as u64, 0, 0]
        ),
        0
    );
    assert_eq!(dst, src);
    let mut dst = [0xffu8; 7];
    assert_eq!(
        call(&t, 112, [dst.as_mut_ptr() as u64, 7, 8, 0, 0]) as i64,
        -14
    );
    assert_eq!(dst, [0; 7]);
    let mut s = [0xffu8; 8];
    assert_eq!(
        call(
            &t,
            114,
            [s.as_mut_ptr() as u64, 8, src.as_ptr() as u64, 0, 0]
        ),
        4
    );
    assert_eq!(&s[..4], b"abc\0");
    let mut s = [0xffu8; 3];
    assert_eq!(
        call(
            &t,
            114,
            [s.as_mut_ptr() as u64, 3, src.as_ptr() as u64, 0, 0]
        ),
        3
    );
    assert_eq!(&s, b"ab\0");
    assert_eq!(
        call(&t, 114, [s.as_mut_ptr() as u64, 3, 16, 0, 0]) as i64,
        -14
    );
}

#[test]
fn trace_format() {
    let rs = |_p: u64| Some(b"str".to_vec());
    assert_eq!(
        trace::format(b"a=%d c=%x %s %%\0junk", [u64::MAX, 255, 1], rs).as_deref(),
        Some("a=-1 c=ff str %")
    );
    assert_eq!(
        trace::format(b"%lld %llx %5d|", [u64::MAX, 1 << 40, 42], rs).as_deref(),
        Some("-1 10000000000    42|")
    );
    assert_eq!(
        trace::format(b"%-3u|%03x", [7, 10, 0], rs).as_deref(),
        Some("7  |00a")
    );
    assert_eq!(trace::format(b"%d %d %d %d", [1, 2, 3], rs), None);
    assert_eq!(trace::format(b"%q", [1, 2, 3], rs), None);
}

#[test]
fn trace_format_cuts_a_long_message_at_a_character_boundary() {
    // 511 bytes, then a two-byte character that would end at byte 513: the message stops
    // at 511 bytes (cutting inside the character used to panic).
    let mut fmt = vec![b'x'; 511];
    fmt.extend_from_slice(b"%s\0");
    let rs = |_p: u64| Some("éé".as_bytes().to_vec());
    let out = trace::format(&fmt, [1, 0, 0], rs).unwrap();
    assert_eq!(out.len(), 511);
    assert!(out.bytes().all(|b| b == b'x'));
    // Invalid bytes of a `%s` show as U+FFFD, as `String::from_utf8_lossy` shows them.
    let rs = |_p: u64| Some(b"a\xffb".to_vec());
    assert_eq!(
        trace::format(b"[%5s]", [1, 0, 0], rs).as_deref(),
        Some("[  a\u{fffd}b]")
    );
}

#[test]
fn trace_printk_to_ring() {
    let d = tempfile::tempdir().unwrap();
    let spec = MapSpec {
        map_type: MapType::RingBuf,
        key_size: 0,
        value_size: 0,
        max_entries: crate::maps::mapping::page_size() as u32,
        flags: 0,
    };
    let m =
        std::sync::Arc::new(Map::create(&d.path().join("t"), &spec, &MapMeta::default()).unwrap());
    trace::set_sink(trace::TraceSink::Ring(m.clone()));
    let fmt = b"n=%d\0";
    let t = standard_helpers();
    assert_eq!(call(&t, 6, [fmt.as_ptr() as u64, 5, 42, 0, 0]), 4);
    trace::set_sink(trace::TraceSink::Stderr);
    let mut lines = Vec::new();
    m.ringbuf_consume(|r| lines.push(String::from_utf8_lossy(r).into_owned()))
        .unwrap();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].ends_with(": n=42\n"), "{}", lines[0]);
}

#[test]
fn comm_is_the_thread_name_and_a_rename_is_seen_within_a_tick() {
    let name = |t: &HelperTable| {
        let mut buf = [0xffu8; 20];
        assert_eq!(call(t, 16, [buf.as_mut_ptr() as u64, 20, 0, 0, 0]), 0);
        assert!(
            buf[16..].iter().all(|b| *b == 0),
            "the rest of the buffer is zeroed"
        );
        let n = buf.iter().position(|b| *b == 0).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    std::thread::spawn(move || {
        let t = standard_helpers();
        let set = |n: &[u8]| {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
            assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, n.as_ptr()) }, 0);
        };
        set(b"gpubpf-comm-a\0");
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(name(&t), "gpubpf-comm-a");
        // Cached within a tick: many calls, one answer.
        for _ in 0..1000 {
            assert_eq!(name(&t), "gpubpf-comm-a");
        }
        set(b"gpubpf-comm-b\0");
        // A tick is at most 10 ms (HZ >= 100).
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(name(&t), "gpubpf-comm-b");
        // A buffer smaller than the name: truncated and NUL-terminated.
        let mut small = [0xffu8; 5];
        assert_eq!(call(&t, 16, [small.as_mut_ptr() as u64, 5, 0, 0, 0]), 0);
        assert_eq!(&small, b"gpub\0");
    })
    .join()
    .unwrap();
}

#[test]
fn uid_gid_are_the_real_ids_and_cached() {
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let want = (u64::from(gid) << 32) | u64::from(uid);
    assert_eq!(super::misc::get_current_uid_gid(0, 0, 0, 0, 0), want);
    assert_eq!(super::misc::get_current_uid_gid(0, 0, 0, 0, 0), want);
}

#[test]
fn delay_sleeps_at_most_the_bound() {
    use gpubpf_verifier::helpers::{GPUBPF_HELPER_BASE, GPUBPF_MAX_DELAY_NS};
    let t = standard_helpers();
    let t0 = std::time::Instant::now();
    assert_eq!(
        call(&t, GPUBPF_HELPER_BASE + 1, [2_000_000, 0, 0, 0, 0]),
        2_000_000
    );
    assert!(t0.elapsed() >= std::time::Duration::from_millis(2));
    assert_eq!(call(&t, GPUBPF_HELPER_BASE + 1, [0, 0, 0, 0, 0]), 0);
    // A request past the bound sleeps the bound (not asserted in time: 100 ms).
    assert_eq!(super::misc::bounded_delay(u64::MAX), GPUBPF_MAX_DELAY_NS);
}

/// The process id a ring record names its producer by is cached for the process and
/// refreshed in a child after `fork` (the child's records must not carry the parent's id:
/// the consumer would take a live producer for dead once the parent exits).
#[test]
fn the_cached_pid_follows_fork() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() }.unsigned_abs();
    assert_eq!(current_pid(), me);
    assert_eq!(current_pid(), me, "cached");
    // SAFETY: the child only reads atomics and makes system calls before `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: getpid cannot fail.
        let ok = current_pid() == unsafe { libc::getpid() }.unsigned_abs() && current_pid() != me;
        // SAFETY: leave without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child saw its own pid"
    );
    assert_eq!(current_pid(), me, "the parent keeps its own");
}
