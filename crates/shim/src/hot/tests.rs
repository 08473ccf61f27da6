//! Unit tests of the hot path's out-value and launch-block helpers.

use super::*;
use crate::generated::POINT_IDS;

/// Held by the tests that publish chains: `publish` replaces every point's chain, so two
/// of them running at once would see each other's.
static PUBLISHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Serialises a publishing test (see [`PUBLISHING`]) and marks the shim ready (no
/// initialisation in a unit test).
fn publishing() -> std::sync::MutexGuard<'static, ()> {
    let guard = PUBLISHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    set_ready(true);
    guard
}

/// An empty chain that reads `hdr.device` or not and counts in statistics slot `slot`.
fn chain_with(reads_device: bool, slot: u32) -> Chain {
    Chain {
        reads_device,
        stats_slot: Some(slot),
        ..Chain::default()
    }
}

#[test]
fn out_values_are_read_and_written_with_their_size_and_sign() {
    let mut word: u64 = u64::MAX;
    let p = (&mut word as *mut u64).cast::<c_void>();
    // SAFETY: `p` points to 8 writable bytes for every call below.
    unsafe {
        write_out(p, 4, 0xffff_fffe);
        assert_eq!(read_out(p, 4, true), (-2i64) as u64);
        assert_eq!(read_out(p, 4, false), 0xffff_fffe);
        assert_eq!(word, 0xffff_ffff_ffff_fffe, "only 4 bytes written");
        write_out(p, 8, 7);
        assert_eq!(read_out(p, 8, false), 7);
        write_out(p, 1, 0x1ff);
        assert_eq!(read_out(p, 1, false), 0xff);
        write_out(p, 2, 0x12345);
        assert_eq!(read_out(p, 2, false), 0x2345);
        assert_eq!(read_out(null_mut(), 8, false), 0);
        write_out(null_mut(), 8, 1);
    }
}

#[test]
fn launch_block_from_a_launch_config() {
    #[repr(C)]
    struct Config {
        dims: [u32; 7],
        stream: u64,
        attrs: u64,
        num_attrs: u32,
    }
    let mut cfg = Config {
        dims: [1, 2, 3, 4, 5, 6, 7],
        stream: 0xabcd,
        attrs: 0,
        num_attrs: 0,
    };
    let mut launch = [0u64; 8];
    // SAFETY: `cfg` is a readable CUlaunchConfig-shaped value.
    unsafe { launch_from_config((&mut cfg as *mut Config).cast(), &mut launch) };
    assert_eq!(launch, [1, 2, 3, 4, 5, 6, 7, 0xabcd]);
    assert_eq!((cfg.attrs, cfg.num_attrs), (0, 0));
    let mut untouched = [9u64; 8];
    // SAFETY: NULL is allowed.
    unsafe { launch_from_config(null_mut(), &mut untouched) };
    assert_eq!(untouched, [9; 8]);
}

/// A thread's last (point, chain) pair is taken only while the cache entry it mirrors holds
/// that chain: set by a call that holds the chain, kept by the next one (which then takes
/// no new reference), cleared when the entry changes — also when nothing is published any
/// more, so that a later chain allocated at the freed one's address is never taken
/// unheld.
#[test]
fn the_last_chain_pair_follows_the_cache_entry() {
    let _serial = publishing();
    let id = POINT_IDS[0];
    let thread = thread_state().expect("thread state");
    publish(std::collections::BTreeMap::from([(id, Chain::default())]));
    let first = hold(0).expect("a chain is published");
    let ptr = first.chain_ptr();
    drop(first);
    assert_eq!((thread.last_point.get(), thread.last_chain.get()), (0, ptr));
    let strong = SLOTS[0].chain.load_full().map(|a| Arc::strong_count(&a));
    let again = hold(0).expect("still published");
    assert_eq!(again.chain_ptr(), ptr);
    drop(again);
    assert_eq!(
        SLOTS[0].chain.load_full().map(|a| Arc::strong_count(&a)),
        strong,
        "the second call took no reference of its own"
    );
    publish_nothing();
    assert!(hold(0).is_none(), "nothing published");
    assert_eq!(thread.last_point.get(), NO_POINT, "the pair was cleared");
    // SAFETY: the cache is this thread's and no call holds an entry now.
    assert!(unsafe { &*thread.cache.get() }[0].is_none());
    publish(std::collections::BTreeMap::from([(id, Chain::default())]));
    let third = hold(0).expect("published again");
    assert_eq!(thread.last_chain.get(), third.chain_ptr());
    drop(third);
    publish_nothing();
}

/// An outermost call reads its chain's summary from the thread's state, set with the last
/// (point, chain) pair: a newly published chain's summary replaces the old one at the next
/// call, and a call nested in another takes the summary of its own chain.
#[test]
fn the_summary_follows_the_last_chain_pair() {
    let _serial = publishing();
    let id = POINT_IDS[1];
    publish(std::collections::BTreeMap::from([(
        id,
        chain_with(true, 3),
    )]));
    let first = hold(1).expect("a chain is published");
    let s = *first.outer_summary();
    assert!(s.reads_device() && s.entry_is_idle() && s.exit_is_empty());
    assert_eq!(s.stats_slot, Some(3));
    // A call nested in the first one's driver call, after a new chain was published.
    publish(std::collections::BTreeMap::from([(
        id,
        chain_with(false, 4),
    )]));
    let nested = hold(1).expect("nested");
    assert_ne!(nested.chain_ptr(), first.chain_ptr());
    assert!(nested.is_nested());
    let n = nested.chain().summary();
    assert_eq!((n.reads_device(), n.stats_slot), (false, Some(4)));
    drop(nested);
    assert_eq!(
        first.outer_summary().stats_slot,
        Some(3),
        "the outer call keeps its chain's"
    );
    drop(first);
    let next = hold(1).expect("still published");
    let s = *next.outer_summary();
    assert_eq!((s.reads_device(), s.stats_slot), (false, Some(4)));
    drop(next);
    publish_nothing();
}

/// A thread alternating between two attach points takes each call's summary from the
/// chain it holds (copied from the line taken at publication), never the other point's.
#[test]
fn alternating_points_each_read_their_own_summary() {
    let _serial = publishing();
    publish(std::collections::BTreeMap::from([
        (POINT_IDS[2], chain_with(true, 7)),
        (POINT_IDS[3], chain_with(false, 8)),
    ]));
    for _ in 0..3 {
        for (point, want) in [(2, (true, Some(7))), (3, (false, Some(8)))] {
            let p = hold(point).expect("a chain is published");
            let s = *p.outer_summary();
            assert_eq!((s.reads_device(), s.stats_slot), want, "point {point}");
            let published = p.published().summary();
            assert_eq!(
                (published.reads_device(), published.stats_slot),
                want,
                "the publication's summary"
            );
            drop(p);
        }
    }
    publish_nothing();
}

/// A call whose chain has no exit program ends in `enter`: `None` (the wrapper calls the
/// driver and returns), the thread's depth back where it was, and a nested call's own
/// reference to its chain released, so the driver call that follows is not nested in it.
#[test]
fn a_call_without_exit_programs_ends_in_enter() {
    let _serial = publishing();
    let thread = thread_state().expect("thread state");
    publish(std::collections::BTreeMap::from([
        (POINT_IDS[4], chain_with(false, 9)),
        (POINT_IDS[5], chain_with(false, 10)),
    ]));
    let mut c = [0u64; 8];
    assert!(enter(4, &mut c, None).is_none(), "nothing to do at exit");
    assert_eq!(thread.calls.get(), 0, "the call has ended");
    assert_eq!(
        thread.last_point.get(),
        4,
        "its chain was held through the cache"
    );
    let strong = || SLOTS[5].chain.load_full().map(|a| Arc::strong_count(&a));
    let before = strong();
    let outer = hold(4).expect("published");
    assert_eq!(thread.calls.get(), 1);
    assert!(
        enter(5, &mut c, None).is_none(),
        "nested, nothing to do at exit"
    );
    assert_eq!(thread.calls.get(), 1, "only the outer call is in flight");
    assert_eq!(strong(), before, "the nested call's reference was released");
    drop(outer);
    assert_eq!(thread.calls.get(), 0);
    publish_nothing();
}
