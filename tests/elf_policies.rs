//! The policies in `policies/` compile with every installed clang (via `policies/build.sh`)
//! and load: programs, maps, globals, `--set` and line info are what the sources say.

mod elf_support;

use elf_support::{built_policies, clangs, load_checked, repo_root};
use gpubpf_runtime::object::{
    DataKind, GlobalError, MapKind, MapOrigin, Object, Phase, BPF_F_RDONLY_PROG,
};

fn policy(clang: &str, name: &str) -> Object {
    let path = built_policies(clang).join(format!("{name}.o"));
    load_checked(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn u64_global(obj: &Object, name: &str) -> u64 {
    let g = obj.global(name).unwrap();
    u64::from_le_bytes(obj.global_value(g).unwrap().try_into().unwrap())
}

#[test]
fn every_policy_source_builds_and_loads() {
    let sources: Vec<String> = std::fs::read_dir(repo_root().join("policies"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_suffix(".bpf.c").map(str::to_string)
        })
        .collect();
    assert!(sources.len() >= 2, "{sources:?}");
    for clang in clangs() {
        for s in &sources {
            let obj = policy(clang, s);
            assert!(!obj.programs.is_empty(), "{s}");
            assert!(obj.license.is_some(), "{s}: license");
            assert!(obj.btf.is_some(), "{s}: btf");
        }
    }
}

#[test]
fn build_script_uses_the_sdk_flags() {
    let script = std::fs::read_to_string(repo_root().join("policies/build.sh")).unwrap();
    let flags = gpubpf_runtime::sdk::CLANG_FLAGS.join(" ");
    assert!(script.contains(&flags), "build.sh must use `{flags}`");
}

#[test]
fn quota_policy() {
    for clang in clangs() {
        let mut obj = policy(clang, "quota");
        let progs: Vec<_> = obj
            .programs
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.section.as_str(),
                    p.attach.as_str(),
                    p.phase,
                )
            })
            .collect();
        // Every allocation family of INTERCEPTION.md §5: a reservation on entry settled on
        // exit, each free credited on exit, the limits published for meminfo.
        let want: Vec<(&str, String, &str, Phase)> = [
            ("quota_alloc", "cuMemAlloc", Phase::Entry),
            ("quota_alloc_done", "cuMemAlloc", Phase::Exit),
            ("quota_pitch", "cuMemAllocPitch", Phase::Entry),
            ("quota_pitch_done", "cuMemAllocPitch", Phase::Exit),
            ("quota_managed", "cuMemAllocManaged", Phase::Entry),
            ("quota_managed_done", "cuMemAllocManaged", Phase::Exit),
            ("quota_async", "cuMemAllocAsync", Phase::Entry),
            ("quota_async_done", "cuMemAllocAsync", Phase::Exit),
            ("quota_pool", "cuMemAllocFromPoolAsync", Phase::Entry),
            ("quota_pool_done", "cuMemAllocFromPoolAsync", Phase::Exit),
            ("quota_free_done", "cuMemFree", Phase::Exit),
            ("quota_free_async_done", "cuMemFreeAsync", Phase::Exit),
            ("quota_create", "cuMemCreate", Phase::Entry),
            ("quota_create_done", "cuMemCreate", Phase::Exit),
            ("quota_release_done", "cuMemRelease", Phase::Exit),
            ("quota_array", "cuArrayCreate", Phase::Entry),
            ("quota_array_done", "cuArrayCreate", Phase::Exit),
            ("quota_array3d", "cuArray3DCreate", Phase::Entry),
            ("quota_array3d_done", "cuArray3DCreate", Phase::Exit),
            ("quota_array_destroy_done", "cuArrayDestroy", Phase::Exit),
            ("quota_mipmap", "cuMipmappedArrayCreate", Phase::Entry),
            ("quota_mipmap_done", "cuMipmappedArrayCreate", Phase::Exit),
            (
                "quota_mipmap_destroy_done",
                "cuMipmappedArrayDestroy",
                Phase::Exit,
            ),
            ("quota_publish_getinfo", "cuMemGetInfo", Phase::Entry),
            ("quota_publish_totalmem", "cuDeviceTotalMem", Phase::Entry),
        ]
        .into_iter()
        .map(|(n, api, ph)| {
            let prefix = if ph == Phase::Entry {
                "cuda"
            } else {
                "cudaret"
            };
            (n, format!("{prefix}/{api}"), api, ph)
        })
        .collect();
        let want: Vec<_> = want
            .iter()
            .map(|(n, s, a, p)| (*n, s.as_str(), *a, *p))
            .collect();
        assert_eq!(progs, want, "{clang}");
        let entry = obj.program("quota_alloc").unwrap();
        let subs: Vec<_> = entry.subprograms.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(subs, ["reserve"], "{clang}");
        let exit = obj.program("quota_alloc_done").unwrap();
        let subs: Vec<_> = exit.subprograms.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(subs, ["settle"], "{clang}");
        // Line info covers every instruction and points at the source.
        for p in &obj.programs {
            assert_eq!(p.line_coverage(), p.insns.len(), "{clang} {}", p.name);
            assert!(p.line_info.iter().all(|l| l.file.ends_with("quota.bpf.c")));
        }
        assert!(entry
            .line_info
            .iter()
            .any(|l| l.source.contains("if (take(p, size, limit_bytes)) {")));
        assert!(entry.subprograms[0].pc <= entry.line_info.last().unwrap().pc);

        let proc_usage = &obj.maps[obj.map_index("proc_usage").unwrap()];
        assert_eq!(
            (
                proc_usage.kind,
                proc_usage.key_size,
                proc_usage.value_size,
                proc_usage.max_entries
            ),
            (MapKind::Hash, 4, 32, 4096)
        );
        assert_eq!(proc_usage.value_type.as_ref().unwrap().name, "struct usage");
        assert_eq!(proc_usage.key_type.as_ref().unwrap().name, "__u32");
        let allocs = &obj.maps[obj.map_index("quota_allocs").unwrap()];
        assert_eq!(
            (allocs.kind, allocs.key_size, allocs.value_size),
            (MapKind::LruHash, 16, 24)
        );
        let rodata = &obj.maps[obj.map_index(".rodata").unwrap()];
        assert_eq!(rodata.origin, MapOrigin::Global(DataKind::Rodata));
        assert_eq!(rodata.flags & BPF_F_RDONLY_PROG, BPF_F_RDONLY_PROG);
        assert_eq!((rodata.key_size, rodata.max_entries), (4, 1));

        let g = obj.global("limit_bytes").unwrap();
        assert_eq!(g.type_name.as_deref(), Some("const volatile __u64"));
        assert!(g.settable);
        assert_eq!(u64_global(&obj, "limit_bytes"), 4 << 30);
        assert_eq!(g.default_display(obj.btf.as_ref()), "4294967296");
        obj.set_global("limit_bytes", "8GiB").unwrap();
        assert_eq!(u64_global(&obj, "limit_bytes"), 8 << 30);
        obj.apply_sets(&["user_limit_bytes=1.5GB", "log_denials=off"])
            .unwrap();
        assert_eq!(u64_global(&obj, "user_limit_bytes"), 1_500_000_000);
        let ld = obj.global("log_denials").unwrap();
        assert_eq!(obj.global_value(ld).unwrap(), [0]);
        // The default stays what the object says.
        assert_eq!(
            obj.global("limit_bytes").unwrap().default,
            (4u64 << 30).to_le_bytes()
        );

        assert!(matches!(
            obj.set_global("limit_bytes", "-1"),
            Err(GlobalError::BadValue { .. })
        ));
        assert!(matches!(
            obj.set_global("log_denials", "2"),
            Err(GlobalError::BadValue { .. })
        ));
        let e = obj.set_global("limit", "1").unwrap_err();
        assert!(
            e.to_string().contains("settable globals: limit_bytes"),
            "{e}"
        );
        // bpf_printk's format strings are globals too, but not settable.
        let fmt = obj
            .globals
            .iter()
            .find(|g| g.name.ends_with("____fmt"))
            .unwrap();
        assert!(!fmt.settable);
        assert!(fmt
            .default_display(obj.btf.as_ref())
            .contains("process limit"));
        assert!(obj.set_global(&fmt.name.clone(), "1").is_err());
    }
}

#[test]
fn trace_policy() {
    for clang in clangs() {
        let mut obj = policy(clang, "trace");
        assert_eq!(obj.programs.len(), 8, "{clang}");
        for api in [
            "cuMemAlloc",
            "cuMemFree",
            "cuLaunchKernel",
            "cuCtxSynchronize",
        ] {
            for phase in [Phase::Entry, Phase::Exit] {
                assert_eq!(
                    obj.programs
                        .iter()
                        .filter(|p| p.attach == api && p.phase == phase)
                        .count(),
                    1,
                    "{clang} {api} {phase:?}"
                );
            }
        }
        for p in obj.programs.iter().filter(|p| p.phase == Phase::Exit) {
            let subs: Vec<_> = p.subprograms.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(subs, ["on_exit"], "{clang} {}", p.name);
        }
        let events = &obj.maps[obj.map_index("events").unwrap()];
        assert_eq!(
            (events.kind, events.max_entries),
            (MapKind::RingBuf, 256 * 1024)
        );
        // Start times per thread slot: an array (no lock per call), typed for `maps dump`.
        let start = &obj.maps[obj.map_index("start").unwrap()];
        assert_eq!((start.kind, start.max_entries), (MapKind::Array, 65536));
        assert_eq!(start.value_type.as_ref().unwrap().name, "struct start_slot");
        let bss = &obj.maps[obj.map_index(".bss").unwrap()];
        assert_eq!(bss.origin, MapOrigin::Global(DataKind::Bss));
        // `event_type` alone (it puts `struct event` into the BTF for `gpubpf events`); a
        // full ring counts its drops itself, so the policy keeps no counter of its own.
        assert_eq!(bss.initial.as_deref(), Some(&[0u8; 8][..]));
        assert!(obj.global("event_type").is_some());
        assert!(obj.global("dropped_events").is_none());
        obj.set_global("min_latency_ns", "0x2710").unwrap();
        assert_eq!(u64_global(&obj, "min_latency_ns"), 10_000);
        obj.set_global("emit_events", "false").unwrap();
    }
}

/// meminfo reads what quota keeps: every map it declares is one of quota's, pinned by name
/// with the same definition (both include `policies/quota.h`), so loading both binds one set.
#[test]
fn meminfo_shares_quotas_pinned_maps() {
    for clang in clangs() {
        let quota = policy(clang, "quota");
        let meminfo = policy(clang, "meminfo");
        let progs: Vec<_> = meminfo
            .programs
            .iter()
            .map(|p| (p.name.as_str(), p.section.as_str(), p.phase))
            .collect();
        assert_eq!(
            progs,
            [
                ("meminfo_getinfo", "cudaret/cuMemGetInfo", Phase::Exit),
                ("meminfo_totalmem", "cudaret/cuDeviceTotalMem", Phase::Exit),
            ],
            "{clang}"
        );
        let shared: Vec<_> = meminfo.maps.iter().filter(|m| !m.is_global()).collect();
        assert_eq!(shared.len(), 5, "{clang}");
        for m in shared {
            let q = &quota.maps[quota.map_index(&m.name).unwrap()];
            assert!(m.pinned && q.pinned, "{clang} {}", m.name);
            assert_eq!(
                (m.kind, m.key_size, m.value_size, m.max_entries, m.flags),
                (q.kind, q.key_size, q.value_size, q.max_entries, q.flags),
                "{clang} {}",
                m.name
            );
        }
    }
}
