//! Runtime-API aliases: the `cuda*` names users know, mapped to the driver entry points
//! that implement them. Enforcement hooks the driver (a statically linked cudart cannot be
//! interposed), so `--attach cudaMalloc` attaches to `cuMemAlloc`, and works for every
//! binary.
//!
//! `target` is what `resolve` returns; `also` lists driver functions the runtime call may go
//! through as well (depending on arguments, e.g. copy direction, or on the cudart version).
//! `gpubpf attach-points` shows both so that users can hook the whole family.
//!
//! Measured: `tests/gpu/catalog-probes` traces, with CUPTI, which driver functions each
//! runtime call reaches (CUDA 13.0 cudart, static and shared alike, driver 580, H200); its
//! result `cuda13.0-h200.tsv` is checked against this table by `tests/catalog_aliases.rs`.
//! Aliases of calls the probe does not make (symbols, batch copies) follow the same families.

/// One runtime-API name.
#[derive(Debug, PartialEq, Eq)]
pub struct Alias {
    /// Runtime-API name, e.g. `cudaMalloc`.
    pub name: &'static str,
    /// Driver base name `resolve` maps it to.
    pub target: &'static str,
    /// Other driver functions the runtime call may reach.
    pub also: &'static [&'static str],
}

const fn a(name: &'static str, target: &'static str) -> Alias {
    Alias {
        name,
        target,
        also: &[],
    }
}

const fn aa(name: &'static str, target: &'static str, also: &'static [&'static str]) -> Alias {
    Alias { name, target, also }
}

/// The alias table, sorted by family.
pub static ALIASES: &[Alias] = &[
    // Allocation and free.
    a("cudaMalloc", "cuMemAlloc"),
    a("cudaFree", "cuMemFree"),
    a("cudaMallocAsync", "cuMemAllocAsync"),
    a("cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync"),
    a("cudaFreeAsync", "cuMemFreeAsync"),
    a("cudaMallocManaged", "cuMemAllocManaged"),
    a("cudaMallocPitch", "cuMemAllocPitch"),
    a("cudaMalloc3D", "cuMemAllocPitch"),
    a("cudaMallocHost", "cuMemHostAlloc"),
    a("cudaHostAlloc", "cuMemHostAlloc"),
    a("cudaFreeHost", "cuMemFreeHost"),
    a("cudaHostRegister", "cuMemHostRegister"),
    a("cudaHostUnregister", "cuMemHostUnregister"),
    a("cudaMallocArray", "cuArray3DCreate"),
    a("cudaMalloc3DArray", "cuArray3DCreate"),
    a("cudaMallocMipmappedArray", "cuMipmappedArrayCreate"),
    a("cudaFreeArray", "cuArrayDestroy"),
    a("cudaFreeMipmappedArray", "cuMipmappedArrayDestroy"),
    a("cudaMemPoolCreate", "cuMemPoolCreate"),
    a("cudaMemPoolDestroy", "cuMemPoolDestroy"),
    a("cudaMemPoolTrimTo", "cuMemPoolTrimTo"),
    a("cudaIpcOpenMemHandle", "cuIpcOpenMemHandle"),
    a("cudaIpcGetMemHandle", "cuIpcGetMemHandle"),
    // Reporting.
    a("cudaMemGetInfo", "cuMemGetInfo"),
    a("cudaPointerGetAttributes", "cuPointerGetAttributes"),
    // Copies.
    aa(
        "cudaMemcpy",
        "cuMemcpy",
        &["cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD"],
    ),
    aa(
        "cudaMemcpyAsync",
        "cuMemcpyAsync",
        &[
            "cuMemcpyHtoDAsync",
            "cuMemcpyDtoHAsync",
            "cuMemcpyDtoDAsync",
        ],
    ),
    aa("cudaMemcpy2D", "cuMemcpy2DUnaligned", &["cuMemcpy2D"]),
    a("cudaMemcpy2DAsync", "cuMemcpy2DAsync"),
    a("cudaMemcpy3D", "cuMemcpy3D"),
    a("cudaMemcpy3DAsync", "cuMemcpy3DAsync"),
    a("cudaMemcpyPeer", "cuMemcpyPeer"),
    a("cudaMemcpyPeerAsync", "cuMemcpyPeerAsync"),
    a("cudaMemcpy3DPeer", "cuMemcpy3DPeer"),
    a("cudaMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync"),
    aa("cudaMemcpyToSymbol", "cuMemcpy", &["cuMemcpyHtoD"]),
    aa("cudaMemcpyFromSymbol", "cuMemcpy", &["cuMemcpyDtoH"]),
    a("cudaMemcpyBatchAsync", "cuMemcpyBatchAsync"),
    a("cudaMemcpy3DBatchAsync", "cuMemcpy3DBatchAsync"),
    a("cudaMemPrefetchAsync", "cuMemPrefetchAsync"),
    a("cudaMemAdvise", "cuMemAdvise"),
    // Sets.
    aa("cudaMemset", "cuMemsetD8", &["cuMemsetD32"]),
    aa("cudaMemsetAsync", "cuMemsetD8Async", &["cuMemsetD32Async"]),
    aa("cudaMemset2D", "cuMemsetD2D8", &["cuMemsetD2D32"]),
    aa(
        "cudaMemset2DAsync",
        "cuMemsetD2D8Async",
        &["cuMemsetD2D32Async"],
    ),
    aa("cudaMemset3D", "cuMemsetD2D8", &["cuMemsetD8"]),
    aa(
        "cudaMemset3DAsync",
        "cuMemsetD2D8Async",
        &["cuMemsetD8Async"],
    ),
    // Launches and graphs.
    a("cudaLaunchKernel", "cuLaunchKernel"),
    a("cudaLaunchKernelExC", "cuLaunchKernelEx"),
    a("cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel"),
    a("cudaLaunchHostFunc", "cuLaunchHostFunc"),
    a("cudaGraphLaunch", "cuGraphLaunch"),
    a("cudaGraphUpload", "cuGraphUpload"),
    a("cudaGraphInstantiate", "cuGraphInstantiateWithFlags"),
    a(
        "cudaGraphInstantiateWithFlags",
        "cuGraphInstantiateWithFlags",
    ),
    a(
        "cudaGraphInstantiateWithParams",
        "cuGraphInstantiateWithParams",
    ),
    a("cudaGraphAddMemAllocNode", "cuGraphAddMemAllocNode"),
    a("cudaGraphDestroy", "cuGraphDestroy"),
    a("cudaGraphExecDestroy", "cuGraphExecDestroy"),
    a("cudaGraphAddMemFreeNode", "cuGraphAddMemFreeNode"),
    // Streams and events.
    a("cudaStreamCreate", "cuStreamCreate"),
    a("cudaStreamCreateWithFlags", "cuStreamCreate"),
    a("cudaStreamCreateWithPriority", "cuStreamCreateWithPriority"),
    a("cudaStreamDestroy", "cuStreamDestroy"),
    a("cudaStreamSynchronize", "cuStreamSynchronize"),
    a("cudaStreamQuery", "cuStreamQuery"),
    a("cudaStreamWaitEvent", "cuStreamWaitEvent"),
    a("cudaStreamBeginCapture", "cuStreamBeginCapture"),
    a("cudaStreamEndCapture", "cuStreamEndCapture"),
    a("cudaStreamIsCapturing", "cuStreamIsCapturing"),
    a("cudaEventCreate", "cuEventCreate"),
    a("cudaEventCreateWithFlags", "cuEventCreate"),
    a("cudaEventRecord", "cuEventRecord"),
    a("cudaEventRecordWithFlags", "cuEventRecordWithFlags"),
    a("cudaEventSynchronize", "cuEventSynchronize"),
    a("cudaEventDestroy", "cuEventDestroy"),
    a("cudaEventElapsedTime", "cuEventElapsedTime"),
    // Devices and contexts.
    a("cudaDeviceSynchronize", "cuCtxSynchronize"),
    aa(
        "cudaSetDevice",
        "cuCtxSetCurrent",
        &["cuDevicePrimaryCtxRetain"],
    ),
    a("cudaGetDevice", "cuCtxGetDevice"),
    a("cudaGetDeviceCount", "cuDeviceGetCount"),
    a("cudaDeviceGetAttribute", "cuDeviceGetAttribute"),
    a("cudaDeviceReset", "cuDevicePrimaryCtxReset"),
    a("cudaSetDeviceFlags", "cuDevicePrimaryCtxSetFlags"),
    a("cudaDeviceSetLimit", "cuCtxSetLimit"),
    a("cudaDeviceGetLimit", "cuCtxGetLimit"),
    a("cudaDriverGetVersion", "cuDriverGetVersion"),
    aa(
        "cudaFuncGetAttributes",
        "cuKernelGetAttribute",
        &["cuFuncGetAttribute"],
    ),
    // Libraries (CUDA 12+ lazy loading).
    a("cudaLibraryLoadData", "cuLibraryLoadData"),
    a("cudaLibraryLoadFromFile", "cuLibraryLoadFromFile"),
    a("cudaLibraryUnload", "cuLibraryUnload"),
    a("cudaLibraryGetKernel", "cuLibraryGetKernel"),
];
