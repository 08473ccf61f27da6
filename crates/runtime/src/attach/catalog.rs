//! The catalog's data model: generated entries ([`GenPoint`]) joined with the hand-written
//! enrichment and the runtime-API aliases into [`AttachPoint`]s, built once per process.

// FxHash: the catalog is built in every process under the shim (~2 500 inserts of static
// names); SipHash's keyed hashing, the random seed it reads and rehashing showed in start-up
// profiles, and the keys are the catalog's own, not an adversary's.
use rustc_hash::FxHashMap as HashMap;
use std::sync::OnceLock;

use super::abi::{self, CtxFieldInfo};
use super::aliases::{Alias, ALIASES};
use super::enrich::{Category, Enrichment, ENRICHMENTS};
use super::generated;

/// How a parameter reaches programs. Every argument occupies one 64-bit slot in the ctx; the
/// class says what the slot holds and whether an exit program sees a dereferenced value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamClass {
    /// Integer, enum, float or device address passed by value (zero- or sign-extended; floats
    /// as their IEEE bits).
    Scalar,
    /// Opaque driver handle (`CUstream`, `CUcontext`, …): the handle value.
    Handle,
    /// Pointer to one value the driver writes (`CUdeviceptr *dptr`, `size_t *free`): the
    /// slot holds the application address; exit programs see the value in an `out.*` field.
    OutPointer,
    /// Pointer to a `const` input structure (`const CUlaunchConfig *`): application address.
    InStruct,
    /// Any other pointer (buffers, arrays, strings, callbacks): application address, never
    /// dereferenced by programs (a probe-read helper copies from it).
    RawPointer,
    /// Structure passed by value (`CUmemLocation location`): the slot holds the address of
    /// the wrapper's copy of the argument.
    StructByValue,
}

impl ParamClass {
    /// Stable lower-case name (used in JSON and docs).
    pub fn as_str(self) -> &'static str {
        match self {
            ParamClass::Scalar => "scalar",
            ParamClass::Handle => "handle",
            ParamClass::OutPointer => "out_pointer",
            ParamClass::InStruct => "in_struct",
            ParamClass::RawPointer => "raw_pointer",
            ParamClass::StructByValue => "struct_by_value",
        }
    }
}

/// Whether an exported symbol is a per-thread-default-stream variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PerThread {
    /// Legacy default-stream semantics.
    No,
    /// `_ptsz`: per-thread default stream, asynchronous.
    Ptsz,
    /// `_ptds`: per-thread default stream, synchronous.
    Ptds,
}

impl PerThread {
    /// `""`, `"ptsz"` or `"ptds"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PerThread::No => "",
            PerThread::Ptsz => "ptsz",
            PerThread::Ptds => "ptds",
        }
    }
}

/// One parameter of a driver entry point, as `cudaTypedefs.h` declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// Parameter name.
    pub name: &'static str,
    /// C type as spelled in the header (normalized spacing).
    pub c_type: &'static str,
    /// Classification.
    pub class: ParamClass,
    /// Size in bytes of the value (scalars, handles), of the pointee (out-pointers) or of the
    /// structure (by-value structs); 8 for other pointers.
    pub value_size: u8,
    /// Whether the value (or pointee) is a signed integer (sign-extended into its slot).
    pub signed: bool,
}

/// One exported symbol of a driver entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Exported symbol, e.g. `cuMemAlloc_v2`, `cuLaunchKernel_ptsz`.
    pub symbol: &'static str,
    /// CUDA version (`1000 * major + 10 * minor`) in which this symbol appeared; what
    /// `cuGetProcAddress` requests are matched against.
    pub version: u32,
    /// Per-thread default-stream variant or not.
    pub per_thread: PerThread,
    /// This symbol's parameters (older variants may differ from the current one).
    pub params: &'static [Param],
}

/// A generated catalog entry (one base name of `cudaTypedefs.h`).
#[derive(Debug)]
pub(crate) struct GenPoint {
    pub id: u32,
    pub name: &'static str,
    pub variants: &'static [Variant],
}

/// A hookable driver entry point: everything the verifier, the loader, the CLI, the SDK
/// header and the shim need to know about it. Only the catalog constructs these (so that
/// `current` is always a valid index and `fields` match the ABI).
#[derive(Debug)]
#[non_exhaustive]
pub struct AttachPoint {
    /// Stable API id (`hdr.api_id` in the ctx, `GPUBPF_API_<name>` in C).
    pub id: u32,
    /// Driver base name, e.g. `cuMemAlloc`.
    pub name: &'static str,
    /// Every exported symbol, oldest first; per-thread variants after the default ones.
    pub variants: &'static [Variant],
    /// Index into `variants` of the current (newest default-stream) variant, whose
    /// parameters define the ctx argument slots.
    pub current: usize,
    /// Hand-written enrichment (writable fields, launch block, category), if any.
    pub enrichment: Option<&'static Enrichment>,
    /// Runtime-API names that map to this entry point (as primary or related target).
    aliases: Vec<&'static Alias>,
    /// Every ctx field with offsets and per-phase access, computed on first use: a process
    /// (the shim at start-up) needs the fields of the few points its programs attach to,
    /// not the hundreds of strings of every point.
    fields: OnceLock<Vec<CtxFieldInfo>>,
    /// Total ctx size in bytes (identical for entry and exit).
    pub ctx_size: u32,
}

impl AttachPoint {
    /// The current variant (defines the argument slots).
    pub fn current_variant(&self) -> &'static Variant {
        // `current` is computed by `build` as a valid index of the generated, non-empty
        // variant slice (checked by the unit tests), and the struct is `non_exhaustive`.
        &self.variants[self.current]
    }

    /// Parameters of the current variant, one ctx slot each.
    pub fn params(&self) -> &'static [Param] {
        self.current_variant().params
    }

    /// Category from the enrichment, [`Category::Other`] when not enriched.
    pub fn category(&self) -> Category {
        self.enrichment.map_or(Category::Other, |e| e.category)
    }

    /// Index of the parameter holding the call's stream, if the call has one (the shim uses
    /// it to set `GPUBPF_CTX_F_CAPTURING`). For `cuLaunchKernelEx` the stream is inside the
    /// `CUlaunchConfig` and is exposed as `launch.stream` instead.
    pub fn stream_param(&self) -> Option<usize> {
        self.params()
            .iter()
            .position(|p| p.class == ParamClass::Handle && p.c_type == "CUstream")
    }

    /// The exported symbol with this exact name.
    pub fn variant_by_symbol(&self, symbol: &str) -> Option<(usize, &'static Variant)> {
        self.variants
            .iter()
            .enumerate()
            .find(|(_, v)| v.symbol == symbol)
    }

    /// The symbol a `cuGetProcAddress(name, version, flags)` request resolves to: the newest
    /// default-stream variant whose version is `<= version`; with `per_thread` (flag
    /// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`), its `_ptsz`/`_ptds` sibling when one
    /// exists. `None` when every variant is newer than `version`.
    pub fn variant_for_request(&self, version: u32, per_thread: bool) -> Option<&'static Variant> {
        let base = self
            .variants
            .iter()
            .filter(|v| v.per_thread == PerThread::No && v.version <= version)
            .max_by_key(|v| v.version)?;
        if per_thread {
            for pt in ["_ptsz", "_ptds"] {
                let want = format!("{}{pt}", base.symbol);
                if let Some(v) = self.variants.iter().find(|v| v.symbol == want) {
                    return Some(v);
                }
            }
        }
        Some(base)
    }

    /// For variant `index`, the ctx argument slot of each of its parameters: `Some(slot)`
    /// when the current variant has a parameter of the same name, `None` otherwise (older
    /// ABIs; the shim sets `GPUBPF_CTX_F_LEGACY_ABI` and leaves unmatched slots zero).
    pub fn variant_slots(&self, index: usize) -> Option<Vec<Option<usize>>> {
        let v = self.variants.get(index)?;
        let cur = self.params();
        Some(
            v.params
                .iter()
                .map(|p| cur.iter().position(|c| c.name == p.name))
                .collect(),
        )
    }

    /// Whether variant `index` has exactly the current variant's parameters.
    pub fn variant_has_current_abi(&self, index: usize) -> bool {
        self.variants
            .get(index)
            .is_some_and(|v| v.params == self.params())
    }

    /// Runtime-API names that map to this entry point (as primary or related target).
    pub fn aliases(&self) -> &[&'static Alias] {
        &self.aliases
    }

    /// Every ctx field with offsets and per-phase access (`hdr.*`, `args.*`, `launch.*`,
    /// `out.*`, in ctx order).
    pub fn fields(&self) -> &[CtxFieldInfo] {
        self.fields
            .get_or_init(|| abi::layout(self.params(), self.enrichment))
    }

    /// The ctx field called `name` (e.g. `args.bytesize`, `out.free`, `hdr.result`).
    pub fn field(&self, name: &str) -> Option<&CtxFieldInfo> {
        self.fields().iter().find(|f| f.name == name)
    }

    /// Primary runtime-API aliases (those whose `--attach` resolves here).
    pub fn primary_aliases(&self) -> impl Iterator<Item = &'static Alias> + '_ {
        self.aliases
            .iter()
            .copied()
            .filter(|a| a.target == self.name)
    }
}

/// All attach points plus name indexes.
#[derive(Debug)]
pub(crate) struct Catalog {
    pub points: Vec<AttachPoint>,
    /// Base names and exported symbols -> index.
    pub by_name: HashMap<&'static str, usize>,
    /// Alias names -> alias.
    pub aliases: HashMap<&'static str, &'static Alias>,
    /// API id -> index.
    pub by_id: HashMap<u32, usize>,
}

pub(crate) fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(build)
}

fn build() -> Catalog {
    let enrichments: HashMap<&str, &'static Enrichment> =
        ENRICHMENTS.iter().map(|e| (e.name, e)).collect();
    // Alias lists by target name, in one pass over the aliases.
    let mut aliases_of: HashMap<&str, Vec<&'static Alias>> = HashMap::default();
    for a in ALIASES {
        for name in std::iter::once(a.target).chain(a.also.iter().copied()) {
            let list = aliases_of.entry(name).or_default();
            if !list.iter().any(|b| std::ptr::eq(*b, a)) {
                list.push(a);
            }
        }
    }
    let mut points = Vec::with_capacity(generated::POINTS.len());
    for g in generated::POINTS {
        let current = g
            .variants
            .iter()
            .enumerate()
            .filter(|(_, v)| v.per_thread == PerThread::No)
            .max_by_key(|(_, v)| v.version)
            .map_or(0, |(i, _)| i);
        let enrichment = enrichments.get(g.name).copied();
        let aliases = aliases_of.remove(g.name).unwrap_or_default();
        let params = g.variants.get(current).map_or(&[][..], |v| v.params);
        let ctx_size = abi::ctx_size(params, enrichment);
        points.push(AttachPoint {
            id: g.id,
            name: g.name,
            variants: g.variants,
            current,
            enrichment,
            aliases,
            fields: OnceLock::new(),
            ctx_size,
        });
    }
    let symbols: usize = points.iter().map(|p| p.variants.len()).sum();
    let mut by_name = HashMap::with_capacity_and_hasher(points.len() + symbols, Default::default());
    let mut by_id = HashMap::with_capacity_and_hasher(points.len(), Default::default());
    for (i, p) in points.iter().enumerate() {
        by_name.insert(p.name, i);
        by_id.insert(p.id, i);
    }
    // Base names win over another entry's exported symbol of the same spelling.
    for (i, p) in points.iter().enumerate() {
        for v in p.variants {
            by_name.entry(v.symbol).or_insert(i);
        }
    }
    let aliases = ALIASES.iter().map(|a| (a.name, a)).collect();
    Catalog {
        points,
        by_name,
        aliases,
        by_id,
    }
}

/// Every attach point, sorted by base name.
pub fn all() -> &'static [AttachPoint] {
    &catalog().points
}

/// The attach point with API id `id`.
pub fn by_id(id: u32) -> Option<&'static AttachPoint> {
    let c = catalog();
    c.by_id.get(&id).and_then(|&i| c.points.get(i))
}

/// Every runtime-API alias.
pub fn aliases() -> &'static [Alias] {
    ALIASES
}

/// CUDA version of the headers the catalog was generated from.
pub fn cuda_headers_version() -> &'static str {
    generated::CUDA_HEADERS_VERSION
}
