//! Hand-written enrichment over the generated entries: for the functions users hook most,
//! which arguments entry programs may rewrite, which out-values exit programs may rewrite,
//! the uniform launch block, and a category for listings.
//!
//! Everything not listed here is still attachable: its arguments are readable, its
//! out-values readable on exit, nothing but `hdr.result` (exit) is writable. A unit test checks
//! that every name below exists in the generated catalog.

/// Coarse grouping of attach points (for listings and for policies that hook a family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Device, host, managed, array and virtual-memory allocation.
    Alloc,
    /// The matching frees/releases/unmaps.
    Free,
    /// Memory reporting (`cuMemGetInfo`, `cuDeviceTotalMem`).
    MemInfo,
    /// Copies.
    Memcpy,
    /// Memsets.
    Memset,
    /// Kernel and host-function launches.
    Launch,
    /// Graph launch, upload, instantiation and memory nodes.
    Graph,
    /// Stream creation, destruction, synchronization, capture.
    Stream,
    /// Context creation and primary contexts.
    Context,
    /// Module and library loading.
    Module,
    /// Device queries whose answers policies may fake.
    Device,
    /// Not enriched.
    Other,
}

impl Category {
    /// Stable lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Alloc => "alloc",
            Category::Free => "free",
            Category::MemInfo => "meminfo",
            Category::Memcpy => "memcpy",
            Category::Memset => "memset",
            Category::Launch => "launch",
            Category::Graph => "graph",
            Category::Stream => "stream",
            Category::Context => "context",
            Category::Module => "module",
            Category::Device => "device",
            Category::Other => "other",
        }
    }
}

/// Where the uniform `launch.*` block of a launch API comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchSource {
    /// From the arguments `f, gridDimX..Z, blockDimX..Z, sharedMemBytes, hStream`
    /// (`cuLaunchKernel`, `cuLaunchCooperativeKernel`).
    Args,
    /// From `*config` (`CUlaunchConfig`: `gridDimX..`, `blockDimX..`, `sharedMemBytes`,
    /// `hStream`) and the argument `f` (`cuLaunchKernelEx`).
    Config,
}

impl LaunchSource {
    /// `"args"` or `"config"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchSource::Args => "args",
            LaunchSource::Config => "config",
        }
    }
}

/// Enrichment of one attach point.
#[derive(Debug)]
pub struct Enrichment {
    /// Driver base name.
    pub name: &'static str,
    /// Category.
    pub category: Category,
    /// Parameters whose slot an entry program may overwrite (the shim passes the new value
    /// to the real call).
    pub writable_args: &'static [&'static str],
    /// Out-pointer parameters whose `out.*` value an exit program may overwrite (the shim
    /// writes the new value back through the application's pointer).
    pub writable_outs: &'static [&'static str],
    /// Launch APIs: source of the `launch.*` block.
    pub launch: Option<LaunchSource>,
}

const fn e(name: &'static str, category: Category) -> Enrichment {
    Enrichment {
        name,
        category,
        writable_args: &[],
        writable_outs: &[],
        launch: None,
    }
}

const fn w(
    name: &'static str,
    category: Category,
    writable_args: &'static [&'static str],
    writable_outs: &'static [&'static str],
) -> Enrichment {
    Enrichment {
        name,
        category,
        writable_args,
        writable_outs,
        launch: None,
    }
}

const fn launch(name: &'static str, source: LaunchSource) -> Enrichment {
    Enrichment {
        name,
        category: Category::Launch,
        writable_args: &[],
        writable_outs: &[],
        launch: Some(source),
    }
}

use Category::*;

/// The enrichment table.
pub static ENRICHMENTS: &[Enrichment] = &[
    // Allocation (INTERCEPTION.md §5). Sizes are writable on entry for rounding policies.
    w("cuMemAlloc", Alloc, &["bytesize"], &[]),
    w("cuMemAllocPitch", Alloc, &["WidthInBytes", "Height"], &[]),
    w("cuMemAllocManaged", Alloc, &["bytesize", "flags"], &[]),
    w("cuMemAllocHost", Alloc, &["bytesize"], &[]),
    w("cuMemHostAlloc", Alloc, &["bytesize", "Flags"], &[]),
    e("cuMemHostRegister", Alloc),
    w("cuMemAllocAsync", Alloc, &["bytesize"], &[]),
    w("cuMemAllocFromPoolAsync", Alloc, &["bytesize"], &[]),
    w("cuMemCreate", Alloc, &["size"], &[]),
    e("cuMemMap", Alloc),
    w("cuMemAddressReserve", Alloc, &["size", "alignment"], &[]),
    e("cuArrayCreate", Alloc),
    e("cuArray3DCreate", Alloc),
    e("cuMipmappedArrayCreate", Alloc),
    e("cuMemPoolCreate", Alloc),
    e("cuIpcOpenMemHandle", Alloc),
    // Frees.
    e("cuMemFree", Free),
    e("cuMemFreeHost", Free),
    e("cuMemHostUnregister", Free),
    e("cuMemFreeAsync", Free),
    e("cuMemRelease", Free),
    e("cuMemUnmap", Free),
    e("cuMemAddressFree", Free),
    e("cuArrayDestroy", Free),
    e("cuMipmappedArrayDestroy", Free),
    e("cuMemPoolDestroy", Free),
    w("cuMemPoolTrimTo", Free, &["minBytesToKeep"], &[]),
    // Reporting: out-values writable on exit (a quota can shrink what the app sees).
    w("cuMemGetInfo", MemInfo, &[], &["free", "total"]),
    w("cuDeviceTotalMem", MemInfo, &[], &["bytes"]),
    // Copies and sets.
    e("cuMemcpy", Memcpy),
    e("cuMemcpyAsync", Memcpy),
    e("cuMemcpyPeer", Memcpy),
    e("cuMemcpyPeerAsync", Memcpy),
    e("cuMemcpyHtoD", Memcpy),
    e("cuMemcpyHtoDAsync", Memcpy),
    e("cuMemcpyDtoH", Memcpy),
    e("cuMemcpyDtoHAsync", Memcpy),
    e("cuMemcpyDtoD", Memcpy),
    e("cuMemcpyDtoDAsync", Memcpy),
    e("cuMemcpyHtoA", Memcpy),
    e("cuMemcpyHtoAAsync", Memcpy),
    e("cuMemcpyAtoH", Memcpy),
    e("cuMemcpyAtoHAsync", Memcpy),
    e("cuMemcpyAtoD", Memcpy),
    e("cuMemcpyDtoA", Memcpy),
    e("cuMemcpyAtoA", Memcpy),
    e("cuMemcpy2D", Memcpy),
    e("cuMemcpy2DUnaligned", Memcpy),
    e("cuMemcpy2DAsync", Memcpy),
    e("cuMemcpy3D", Memcpy),
    e("cuMemcpy3DAsync", Memcpy),
    e("cuMemcpy3DPeer", Memcpy),
    e("cuMemcpy3DPeerAsync", Memcpy),
    e("cuMemcpyBatchAsync", Memcpy),
    e("cuMemcpy3DBatchAsync", Memcpy),
    e("cuMemsetD8", Memset),
    e("cuMemsetD16", Memset),
    e("cuMemsetD32", Memset),
    e("cuMemsetD2D8", Memset),
    e("cuMemsetD2D16", Memset),
    e("cuMemsetD2D32", Memset),
    e("cuMemsetD8Async", Memset),
    e("cuMemsetD16Async", Memset),
    e("cuMemsetD32Async", Memset),
    e("cuMemsetD2D8Async", Memset),
    e("cuMemsetD2D16Async", Memset),
    e("cuMemsetD2D32Async", Memset),
    // Launches: grid, block, shared memory, stream and function exposed uniformly.
    launch("cuLaunchKernel", LaunchSource::Args),
    launch("cuLaunchCooperativeKernel", LaunchSource::Args),
    launch("cuLaunchKernelEx", LaunchSource::Config),
    e("cuLaunchHostFunc", Launch),
    // Graphs.
    e("cuGraphLaunch", Graph),
    e("cuGraphUpload", Graph),
    e("cuGraphInstantiateWithFlags", Graph),
    e("cuGraphInstantiateWithParams", Graph),
    e("cuGraphAddMemAllocNode", Graph),
    e("cuGraphAddMemFreeNode", Graph),
    // Streams: creation flags and priority writable.
    w("cuStreamCreate", Stream, &["Flags"], &[]),
    w(
        "cuStreamCreateWithPriority",
        Stream,
        &["flags", "priority"],
        &[],
    ),
    e("cuStreamDestroy", Stream),
    e("cuStreamSynchronize", Stream),
    e("cuStreamQuery", Stream),
    e("cuStreamWaitEvent", Stream),
    e("cuStreamBeginCapture", Stream),
    e("cuStreamEndCapture", Stream),
    e("cuStreamIsCapturing", Stream),
    e("cuEventCreate", Stream),
    e("cuEventRecord", Stream),
    e("cuEventSynchronize", Stream),
    // Contexts.
    w("cuCtxCreate", Context, &["flags"], &[]),
    e("cuCtxDestroy", Context),
    e("cuCtxSynchronize", Context),
    e("cuCtxSetCurrent", Context),
    e("cuDevicePrimaryCtxRetain", Context),
    e("cuDevicePrimaryCtxRelease", Context),
    e("cuDevicePrimaryCtxReset", Context),
    w("cuDevicePrimaryCtxSetFlags", Context, &["flags"], &[]),
    w("cuCtxSetLimit", Context, &["value"], &[]),
    w("cuCtxGetLimit", Context, &[], &["pvalue"]),
    // Modules and libraries.
    e("cuModuleLoad", Module),
    e("cuModuleLoadData", Module),
    e("cuModuleLoadDataEx", Module),
    e("cuModuleLoadFatBinary", Module),
    e("cuModuleUnload", Module),
    e("cuModuleGetFunction", Module),
    e("cuLibraryLoadData", Module),
    e("cuLibraryLoadFromFile", Module),
    e("cuLibraryUnload", Module),
    e("cuLibraryGetKernel", Module),
    // Device queries a policy may fake on exit.
    w("cuDeviceGetCount", Device, &[], &["count"]),
    w("cuDeviceGetAttribute", Device, &[], &["pi"]),
    w("cuDriverGetVersion", Device, &[], &["driverVersion"]),
];
