//! `gpubpf demo`: the whole pipeline on a mock CUDA driver, in one process.
//!
//! Builds the embedded quota policy with clang, loads it into a private temporary registry
//! (exactly as `gpubpf build` and `gpubpf load` do), then plays a small "training job" of
//! `cuMemAlloc`/`cuMemFree` calls against a mock driver. Every call goes through the same
//! dispatch code the shim uses: the programs are re-verified, JIT-compiled and run on a ctx
//! laid out by the attach catalog. Half-way, the policy is replaced with a higher limit
//! while its counters live on in the shared maps. Finally the maps are dumped and explained.
//! The policy's `bpf_printk` lines go to the registry's trace ring, as in a process under
//! the shim, and are shown (labelled) under the call that printed them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use gpubpf_runtime::attach::{self, AttachPoint};
use gpubpf_runtime::dispatch::{CtxBuf, PolicySet, Stack};
use gpubpf_runtime::helpers::{standard_helpers, trace};
use gpubpf_runtime::maps::Map;
use gpubpf_runtime::registry::{ensure_private_dir, Registry, HOME_ENV};

use crate::cmd::{build, load, maps};
use crate::output::Output;

/// The quota policy, embedded so the demo runs from any directory.
const QUOTA_SOURCE: &str = include_str!("../../../../policies/quota.bpf.c");
/// The map definitions it includes (`#include "quota.h"`).
const QUOTA_HEADER: &str = include_str!("../../../../policies/quota.h");

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const CUDA_SUCCESS: u32 = 0;
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

/// Arguments of `gpubpf demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Per-process limit given to the quota policy at first load.
    #[arg(long, default_value = "1GiB")]
    pub limit: String,
    /// The limit the policy is replaced with half-way.
    #[arg(long, default_value = "2GiB")]
    pub raised_limit: String,
    /// Registry directory to use (default: a fresh private temporary one, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// The clang to run (default: as `gpubpf build`).
    #[arg(long, value_name = "PATH")]
    pub clang: Option<PathBuf>,
}

/// A mock CUDA device: hands out fake device pointers and tracks usage.
#[derive(Debug)]
struct MockDriver {
    total: u64,
    used: u64,
    next: u64,
    live: BTreeMap<u64, u64>,
}

impl MockDriver {
    fn new(total: u64) -> Self {
        Self {
            total,
            used: 0,
            next: 0x7f00_0000_0000,
            live: BTreeMap::new(),
        }
    }

    fn mem_alloc(&mut self, size: u64) -> Result<u64, u32> {
        if size == 0 || self.used.saturating_add(size) > self.total {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let p = self.next;
        self.next = self.next.saturating_add(size.next_multiple_of(MIB));
        self.used += size;
        self.live.insert(p, size);
        Ok(p)
    }

    fn mem_free(&mut self, p: u64) -> u32 {
        match self.live.remove(&p) {
            Some(size) => {
                self.used -= size;
                CUDA_SUCCESS
            }
            None => 1, // CUDA_ERROR_INVALID_VALUE
        }
    }
}

fn cu_name(r: u32) -> &'static str {
    match r {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        _ => "CUresult",
    }
}

struct Session<'a> {
    drv: MockDriver,
    alloc: &'static AttachPoint,
    free: &'static AttachPoint,
    set: PolicySet,
    reg: &'a Registry,
    stack: Box<Stack>,
    /// The registry's trace ring, where the policy's bpf_printk lines go.
    ring: Arc<Map>,
}

/// Bytes as the demo shows them: `256 MiB`, `1 GiB`, `1.5 GiB`.
fn human(bytes: u64) -> String {
    if bytes >= GIB && bytes % (GIB / 4) == 0 {
        let g = bytes as f64 / GIB as f64;
        format!("{g} GiB")
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

impl Session<'_> {
    fn reload(&mut self) -> anyhow::Result<()> {
        self.set = PolicySet::load(self.reg, &standard_helpers())
            .context("cannot build the policy set from the registry")?;
        println!(
            "   policy set at registry generation {}: {} program(s) re-verified and JIT-compiled",
            self.set.generation,
            self.set.programs().count()
        );
        // The programs on the two calls this demo makes (the policy covers every
        // allocation family; the others wait for their calls).
        let shown = [self.alloc, self.free]
            .into_iter()
            .filter_map(|point| self.set.chain(point))
            .flat_map(|c| c.entry.iter().chain(c.exit.iter()));
        for p in shown {
            println!(
                "     {:<18} {:<5} {:>3} insns, verifier processed {:>4}, {:>5} bytes of x86-64",
                p.name,
                p.phase.as_str(),
                p.insn_count(),
                p.stats.insns_processed,
                p.code_size()
            );
        }
        Ok(())
    }

    /// Prints (and consumes) the policy's bpf_printk lines since the last call, labelled.
    fn print_trace(&self) -> anyhow::Result<()> {
        let mut lines = Vec::new();
        self.ring
            .ringbuf_consume(|r| lines.push(String::from_utf8_lossy(r).trim_end().to_string()))
            .context("cannot read the trace ring")?;
        for l in lines {
            // `comm-tid [pid] seconds: message`: the message is what the policy printed.
            let message = crate::cmd::trace::TraceLine::parse(&l).map_or(l, |t| t.message);
            println!("     bpf_printk from the policy: \"{message}\"");
        }
        Ok(())
    }

    fn cu_mem_alloc(&mut self, what: &str, size: u64) -> anyhow::Result<Option<u64>> {
        let mut ctx = CtxBuf::new(self.alloc, attach::Phase::Entry);
        let mut app_slot = 0u64; // the application's `CUdeviceptr dptr`
        ctx.set("args.dptr", &mut app_slot as *mut u64 as u64)?;
        ctx.set("args.bytesize", size)?;
        let drv = &mut self.drv;
        let outcome = match self.set.chain(self.alloc) {
            Some(chain) => chain.call(&mut ctx, &mut self.stack, |ctx| {
                // The entry programs may have rewritten the size.
                let size = ctx.get("args.bytesize").unwrap_or(size);
                match drv.mem_alloc(size) {
                    Ok(p) => {
                        app_slot = p;
                        let _ = ctx.set("out.dptr", p);
                        CUDA_SUCCESS
                    }
                    Err(e) => e,
                }
            }),
            None => anyhow::bail!("no program is attached to cuMemAlloc"),
        };
        let verdict = match &outcome.denied_by {
            Some((obj, prog)) => format!("   vetoed by {obj}/{prog}"),
            None => String::new(),
        };
        println!(
            "   cuMemAlloc({:>5} MiB) {:<16} -> {:<26}{}",
            size / MIB,
            what,
            format!("{} ({})", cu_name(outcome.result), outcome.result),
            if outcome.result == CUDA_SUCCESS {
                format!(
                    "dptr={app_slot:#x}  device used {} MiB",
                    self.drv.used / MIB
                )
            } else {
                verdict
            }
        );
        self.print_trace()?;
        Ok((outcome.result == CUDA_SUCCESS).then_some(app_slot))
    }

    fn cu_mem_free(&mut self, what: &str, dptr: u64) -> anyhow::Result<()> {
        let mut ctx = CtxBuf::new(self.free, attach::Phase::Entry);
        ctx.set("args.dptr", dptr)?;
        let drv = &mut self.drv;
        let result = match self.set.chain(self.free) {
            Some(chain) => {
                chain
                    .call(&mut ctx, &mut self.stack, |_| drv.mem_free(dptr))
                    .result
            }
            None => drv.mem_free(dptr),
        };
        println!(
            "   cuMemFree({dptr:#x}) {:<8} -> {} ({result})  device used {} MiB",
            what,
            cu_name(result),
            self.drv.used / MIB
        );
        self.print_trace()
    }
}

/// `gpubpf load`, summarised: the links of the two APIs the demo calls, counts for the rest.
fn loaded(args: &load::Args) -> anyhow::Result<()> {
    let (record, generation, _) = load::load(args)?;
    println!("loaded {} (generation {generation})", record.name);
    let links: Vec<_> = record
        .programs
        .iter()
        .flat_map(|p| p.links.iter().map(move |l| (p, l)))
        .collect();
    let demo_apis = ["cuMemAlloc", "cuMemFree"];
    for (p, l) in links
        .iter()
        .filter(|(_, l)| demo_apis.contains(&l.attach_point.as_str()))
    {
        println!("  {} -> {} ({})", p.name, l.attach_point, l.phase);
    }
    let others = links
        .iter()
        .filter(|(_, l)| !demo_apis.contains(&l.attach_point.as_str()))
        .count();
    println!("  … and {others} more on the other allocation families, frees and cuMemGetInfo");
    let maps: Vec<&str> = record
        .maps
        .iter()
        .map(|b| b.registry_name.as_str())
        .collect();
    println!("  maps: {}", maps.join(", "));
    Ok(())
}

fn step(n: u32, text: &str) {
    println!("\n[{n}] {text}");
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let (home, temporary) = match &args.home {
        Some(h) => (h.clone(), false),
        // On tmpfs when there is one, as gpubpf's default registry (maps are shared file
        // mappings).
        None => (
            gpubpf_runtime::registry::shared_memory_dir()
                .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf)
                .join(format!("gpubpf-demo-{}", std::process::id())),
            true,
        ),
    };
    ensure_private_dir(&home).with_context(|| format!("cannot create `{}`", home.display()))?;
    let result = run_in(&args, &home, out);
    if temporary {
        let _ = std::fs::remove_dir_all(&home);
    } else {
        println!(
            "\nregistry kept at {0}: try `GPUBPF_HOME={0} gpubpf maps dump proc_usage`",
            home.display()
        );
    }
    result
}

fn run_in(args: &Args, home: &Path, out: &Output) -> anyhow::Result<()> {
    // The registry commands below read $GPUBPF_HOME; nothing else runs yet in this process.
    std::env::set_var(HOME_ENV, home);
    println!(
        "gpubpf demo: a memory quota on a mock CUDA driver (registry {})",
        home.display()
    );

    step(
        1,
        "gpubpf build quota.bpf.c  (clang -target bpf with the embedded SDK headers)",
    );
    let src = home.join("quota.bpf.c");
    std::fs::write(&src, QUOTA_SOURCE).context("cannot write the demo policy")?;
    std::fs::write(home.join("quota.h"), QUOTA_HEADER).context("cannot write the demo policy")?;
    let obj = home.join("quota.o");
    build::run(
        build::Args {
            source: src,
            output: Some(obj.clone()),
            clang: args.clang.clone(),
            include: Vec::new(),
            define: Vec::new(),
            cache_dir: Some(home.join("sdk")),
        },
        out,
    )?;

    step(
        2,
        &format!(
            "gpubpf load quota.o --set limit_bytes={}  (parse, verify, create maps, record)",
            args.limit
        ),
    );
    let load_args = |limit: &str| load::Args {
        name: Some("quota".into()),
        ..load::Args::policy(
            obj.clone(),
            Vec::new(),
            vec![format!("limit_bytes={limit}")],
        )
    };
    loaded(&load_args(&args.limit))?;

    step(
        3,
        "the application starts: the runtime picks the policies up from the registry",
    );
    let reg = Registry::open(home).context("cannot open the demo registry")?;
    // As the shim does in a policed process: bpf_printk lines go to the trace ring.
    trace::send_to_registry(&reg).context("cannot open the trace ring")?;
    let mut s = Session {
        ring: reg.trace_ring().context("cannot open the trace ring")?,
        drv: MockDriver::new(80 * 1024 * MIB),
        alloc: attach::resolve("cuMemAlloc")?,
        free: attach::resolve("cuMemFree")?,
        set: PolicySet::default(),
        reg: &reg,
        stack: Stack::new_boxed(),
    };
    s.reload()?;

    step(
        4,
        &format!(
            "a training job allocates on an 80 GiB mock GPU (limit {})",
            args.limit
        ),
    );
    println!(
        "   (one line per cuMemAlloc/cuMemFree call and what the application got back; the\n    \
         policy's bpf_printk output follows the call that printed it, read from the registry's\n    \
         trace ring as `gpubpf trace` reads it; its sizes are bytes: 268435456 = 256 MiB)"
    );
    let weights = s.cu_mem_alloc("weights", 256 * MIB)?;
    let acts = s.cu_mem_alloc("activations", 384 * MIB)?;
    let _opt = s.cu_mem_alloc("optimizer", 256 * MIB)?;
    let kv = s.cu_mem_alloc("kv cache", 256 * MIB)?;
    if kv.is_some() {
        println!("   (the limit was not reached: pass a smaller --limit to see a veto)");
    }
    if let Some(a) = acts {
        s.cu_mem_free("activations", a)?;
    }
    let _ = s.cu_mem_alloc("kv cache", 256 * MIB)?;

    step(5, &format!("the operator raises the limit while the job runs: gpubpf load quota.o --set limit_bytes={}", args.raised_limit));
    loaded(&load_args(&args.raised_limit))?;
    s.reload()?;
    println!("   (counters live in shared maps, so the replaced policy keeps them)");
    let _ = s.cu_mem_alloc("bigger batch", 512 * MIB)?;
    let _ = s.cu_mem_alloc("even bigger", 1024 * MIB)?;
    if let Some(w) = weights {
        s.cu_mem_free("weights", w)?;
    }

    step(
        6,
        "gpubpf maps dump proc_usage  (read from shared memory, typed with BTF)",
    );
    maps::run(
        maps::Command::Dump {
            name: "proc_usage".into(),
        },
        out,
    )?;
    explain_usage(&reg)
}

/// What the dump of `proc_usage` says, in words: its key is a process id, `bytes` the
/// device memory that process holds.
fn explain_usage(reg: &Registry) -> anyhow::Result<()> {
    let name = reg.resolve_map_name("proc_usage")?;
    let map = reg.open_map(&name)?;
    let pid = std::process::id();
    println!(
        "   proc_usage is keyed by process id: the pid of the process that made the calls\n   \
         (this demo plays the application itself, pid {pid}); the value is its usage:"
    );
    for e in map.entries().context("cannot read proc_usage")? {
        let (Ok(k), Some(v)) = (
            <[u8; 4]>::try_from(e.key.as_slice()),
            e.value.get(..32).filter(|v| v.len() == 32),
        ) else {
            continue;
        };
        let field = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&v[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(w)
        };
        let (bytes, allocs, frees, denied) = (field(0), field(1), field(2), field(3));
        println!(
            "   pid {}: holds {bytes} bytes = {} of device memory now, after {allocs} successful\n   \
             allocations and {frees} frees; {denied} allocations were denied by the limit",
            u32::from_ne_bytes(k),
            human(bytes)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_mib_and_gib() {
        assert_eq!(human(256 * MIB), "256 MiB");
        assert_eq!(human(GIB), "1 GiB");
        assert_eq!(human(3 * GIB / 2), "1.5 GiB");
        assert_eq!(human(GIB + MIB), "1025 MiB");
        assert_eq!(human(0), "0 MiB");
    }
}
