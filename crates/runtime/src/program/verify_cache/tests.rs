use std::os::unix::fs::PermissionsExt;

use gpubpf_isa::Insn;
use gpubpf_verifier::ctx::{ProgramContext, ReturnRule};
use gpubpf_verifier::{MapInfo, MapKind, VerifierConfig, VerifyInput, VerifyStats};

use super::*;
use crate::attach::{self, Phase};

/// `r0 = *(u32 *)(r1 + off); r0 = 0; exit`: reads one ctx field.
fn reads_ctx(off: i16) -> Vec<Insn> {
    vec![
        Insn::new(0x61, 0, 1, off, 0),
        Insn::new(0xb7, 0, 0, 0, 0),
        Insn::new(0x95, 0, 0, 0, 0),
    ]
}

fn alloc_ctx() -> ProgramContext {
    attach::resolve("cuMemAlloc_v2")
        .expect("catalogued")
        .program_context(Phase::Entry)
}

fn maps() -> Vec<MapInfo> {
    vec![MapInfo::new("usage", MapKind::Hash, 4, 8, 64)]
}

fn input<'a>(insns: &'a [Insn], maps: &'a [MapInfo], ctx: &'a ProgramContext) -> VerifyInput<'a> {
    VerifyInput {
        insns,
        maps,
        ctx,
        line_info: None,
    }
}

fn verified(insns: &[Insn], maps: &[MapInfo], ctx: &ProgramContext) -> VerifyStats {
    gpubpf_verifier::verify(&input(insns, maps, ctx)).expect("accepted")
}

/// What an entry keeps of a verification (time and log are not recorded).
fn recorded(mut s: VerifyStats) -> VerifyStats {
    s.duration = Duration::ZERO;
    s.log.clear();
    s
}

#[test]
fn the_key_changes_with_every_part_of_the_input_except_line_info() {
    let cfg = VerifierConfig::default();
    let (insns, maps, ctx) = (reads_ctx(0), maps(), alloc_ctx());
    let base = key(&cfg, &input(&insns, &maps, &ctx));
    assert_eq!(
        base,
        key(&cfg, &input(&insns, &maps, &ctx)),
        "deterministic"
    );

    let mut other = insns.clone();
    other[1].imm = 1;
    assert_ne!(base, key(&cfg, &input(&other, &maps, &ctx)), "an immediate");
    assert_ne!(
        base,
        key(&cfg, &input(&insns[..2], &maps, &ctx)),
        "one slot fewer"
    );

    let mut ro = maps.clone();
    ro[0].read_only = true;
    assert_ne!(
        base,
        key(&cfg, &input(&insns, &ro, &ctx)),
        "a read-only map"
    );
    let mut wider = maps.clone();
    wider[0].value_size = 16;
    assert_ne!(
        base,
        key(&cfg, &input(&insns, &wider, &ctx)),
        "a value size"
    );
    assert_ne!(base, key(&cfg, &input(&insns, &[], &ctx)), "no maps");

    let mut writable = ctx.clone();
    let f = writable
        .ctx
        .fields
        .iter_mut()
        .find(|f| !f.writable)
        .expect("a read-only field");
    f.writable = true;
    assert_ne!(
        base,
        key(&cfg, &input(&insns, &maps, &writable)),
        "a ctx permission"
    );
    let mut ret = ctx.clone();
    ret.ret = ReturnRule::Range { min: 0, max: 1 };
    assert_ne!(
        base,
        key(&cfg, &input(&insns, &maps, &ret)),
        "the return rule"
    );
    let exit_ctx = attach::resolve("cuMemAlloc_v2")
        .expect("catalogued")
        .program_context(Phase::Exit);
    assert_ne!(
        base,
        key(&cfg, &input(&insns, &maps, &exit_ctx)),
        "the phase"
    );

    let budget = VerifierConfig {
        budget: 10,
        ..VerifierConfig::default()
    };
    assert_ne!(
        base,
        key(&budget, &input(&insns, &maps, &ctx)),
        "the configuration"
    );

    let lines = [gpubpf_verifier::LineInfo {
        pc: 0,
        file: "quota.bpf.c".into(),
        line: 1,
        column: 1,
        source: "return 0;".into(),
    }];
    let with_lines = VerifyInput {
        line_info: Some(&lines),
        ..input(&insns, &maps, &ctx)
    };
    assert_eq!(
        base,
        key(&cfg, &with_lines),
        "line info only words messages"
    );
}

#[test]
fn entries_read_back_exactly_what_the_verifier_returned() {
    let ctx = alloc_ctx();
    let mut s = verified(&reads_ctx(8), &maps(), &ctx);
    assert_eq!(s.ctx_fields_read, vec![8]);
    assert_eq!(parse(&render(&s)), Some(recorded(s.clone())));
    s.unreached = vec![3, 7, 11];
    s.stack_depth = vec![];
    assert_eq!(parse(&render(&s)), Some(recorded(s)));
}

#[test]
fn anything_but_a_whole_entry_is_a_miss() {
    let s = verified(&reads_ctx(8), &maps(), &alloc_ctx());
    let good = render(&s);
    assert!(parse(&good).is_some());
    let bad = [
        good.replace(MAGIC, "gpubpf-verified 2"),
        good.trim_end().to_string(),
        format!("{good}extra=1\n"),
        good.replace("ctx_fields_read=8", "ctx_fields_read=8,x"),
        good.replace("unreached=", "unreachable="),
        good.replace("states_pruned=", "states_pruned=-"),
        good.lines()
            .filter(|l| !l.starts_with("peak_states"))
            .map(|l| format!("{l}\n"))
            .collect(),
        String::new(),
    ];
    for b in bad {
        assert_eq!(parse(&b), None, "{b:?}");
    }
}

#[test]
fn a_put_is_found_by_the_next_cache_and_a_corrupt_entry_is_a_miss() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("verified");
    let cfg = VerifierConfig::default();
    let (insns, maps, ctx) = (reads_ctx(8), maps(), alloc_ctx());
    let k = key(&cfg, &input(&insns, &maps, &ctx));

    let first = VerifyCache::at(&dir).expect("missing directory: a cache to fill");
    assert_eq!(first.get(&k), None);
    let s = verified(&insns, &maps, &ctx);
    first.put(&k, &s);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "created private");
    assert_eq!((first.hits(), first.misses()), (0, 1));

    let next = VerifyCache::at(&dir).expect("private directory");
    assert_eq!(next.get(&k), Some(recorded(s.clone())));
    let other = key(&cfg, &input(&insns[1..], &maps, &ctx));
    assert_eq!(next.get(&other), None, "another input");
    assert_eq!((next.hits(), next.misses()), (1, 1));

    std::fs::write(dir.join(k.hex()), "gpubpf-verified 1\ninsns_processed=").unwrap();
    assert_eq!(next.get(&k), None, "a truncated entry");
    next.put(&k, &s);
    assert_eq!(next.get(&k), Some(recorded(s)), "rewritten whole");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );
}

#[test]
fn a_directory_others_may_write_or_a_link_is_never_read() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("verified");
    let cache = VerifyCache::at(&dir).unwrap();
    let cfg = VerifierConfig::default();
    let (insns, maps, ctx) = (reads_ctx(8), maps(), alloc_ctx());
    let k = key(&cfg, &input(&insns, &maps, &ctx));
    cache.put(&k, &verified(&insns, &maps, &ctx));

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(VerifyCache::at(&dir).is_none(), "world-writable");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o720)).unwrap();
    assert!(VerifyCache::at(&dir).is_none(), "group-writable");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(VerifyCache::at(&dir).is_some());

    let link = d.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert!(VerifyCache::at(&link).is_none(), "a symbolic link");
}

#[test]
fn a_rejected_program_is_never_recorded() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("verified");
    let reg = crate::registry::Registry::open(&d.path().join("home")).unwrap();
    let cache = VerifyCache::of(&reg, true).expect("a user registry has a cache");
    assert_eq!(cache.dir(), d.path().join("home").join(CACHE_DIR));
    assert!(VerifyCache::of(&reg, false).is_none(), "turned off");

    // Reads past the ctx: rejected, with or without a cache, and nothing recorded.
    let (maps, ctx) = (maps(), alloc_ctx());
    let bad = reads_ctx(4096);
    let c = VerifyCache::at(&dir).unwrap();
    assert!(verify(Some(&c), &input(&bad, &maps, &ctx), Vec::new).is_err());
    assert!(verify(Some(&c), &input(&bad, &maps, &ctx), Vec::new).is_err());
    assert_eq!((c.hits(), c.misses()), (0, 2));
    assert!(!dir.exists(), "nothing recorded");

    // Accepted: verified once, then answered from the cache with the same result.
    let good = reads_ctx(8);
    let fresh = verify(Some(&c), &input(&good, &maps, &ctx), Vec::new).unwrap();
    let again = verify(Some(&c), &input(&good, &maps, &ctx), Vec::new).unwrap();
    assert_eq!((c.hits(), c.misses()), (1, 3));
    assert_eq!(again, recorded(fresh));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn prune_keeps_the_newest_entries_and_clears_stale_temporaries() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("verified");
    let cache = VerifyCache::at(&dir).unwrap();
    let cfg = VerifierConfig::default();
    let (maps, ctx) = (maps(), alloc_ctx());
    let s = verified(&reads_ctx(8), &maps, &ctx);
    let mut keys = Vec::new();
    for imm in 0..6 {
        let mut insns = reads_ctx(8);
        insns[1].imm = imm;
        let k = key(&cfg, &input(&insns, &maps, &ctx));
        cache.put(&k, &s);
        // Modification times one second apart, oldest first.
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + imm as u64);
        std::fs::File::options()
            .write(true)
            .open(dir.join(k.hex()))
            .unwrap()
            .set_modified(t)
            .unwrap();
        keys.push(k);
    }
    let stale = dir.join(".abandoned.1.1");
    std::fs::write(&stale, "").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(std::time::SystemTime::UNIX_EPOCH)
        .unwrap();
    let fresh = dir.join(".writing.2.2");
    std::fs::write(&fresh, "").unwrap();

    assert_eq!(
        cache.prune(4),
        3,
        "two oldest entries and the stale temporary"
    );
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(dir.join(k.hex()).exists(), i >= 2, "entry {i}");
    }
    assert!(!stale.exists());
    assert!(fresh.exists(), "a write in progress stays");
}

#[test]
fn a_system_cache_is_written_by_its_owner_alone_and_read_by_everyone() {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("verified");
    let cfg = VerifierConfig::default();
    let (insns, maps, ctx) = (reads_ctx(8), maps(), alloc_ctx());
    let k = key(&cfg, &input(&insns, &maps, &ctx));
    let s = verified(&insns, &maps, &ctx);

    // Another user's process reads, never writes.
    let reader = VerifyCache::system_at(&dir, me, false).expect("missing: nothing to check");
    reader.put(&k, &s);
    assert!(!dir.exists(), "a reader created the cache");

    // The owner creates it readable by all.
    let owner = VerifyCache::system_at(&dir, me, true).unwrap();
    owner.put(&k, &s);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o755);
    assert_eq!(mode(&dir.join(k.hex())), 0o644);
    let reader = VerifyCache::system_at(&dir, me, false).unwrap();
    assert_eq!(reader.get(&k), Some(recorded(s)));

    // Not the owner's, or writable by others: not read.
    assert!(VerifyCache::system_at(&dir, me.wrapping_add(1), false).is_none());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert!(
        VerifyCache::system_at(&dir, me, false).is_none(),
        "group-writable"
    );
}
