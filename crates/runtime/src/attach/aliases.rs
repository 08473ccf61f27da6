//! Runtime-API aliases: the `cuda*` names users know, mapped to the driver entry points
//! that implement them. Enforcement hooks the driver (a statically linked cudart cannot be
//! interposed), so `--attach cudaMalloc` attaches to `cuMemAlloc`, and works for every
//! binary.
//!
//! `target` is what `resolve` returns; `also` lists driver functions the runtime call may go
//! through as well (depending on arguments, e.g. copy direction, or on the cudart version).
//! `gpubpf attach-points` shows both so that users can hook the whole family.

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
    aa("cudaMallocHost", "cuMemHostAlloc", &["cuMemAllocHost"]),
    a("cudaHostAlloc", "cuMemHostAlloc"),
    a("cudaFreeHost", "cuMemFreeHost"),
    a("cudaHostRegister", "cuMemHostRegister"),
    a("cudaHostUnregister", "cuMemHostUnregister"),
    aa("cudaMallocArray", "cuArray3DCreate", &["cuArrayCreate"]),
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
    a("cudaGraphAddMemFreeNode", "cuGraphAddMemFreeNode"),
    // Streams and events.
    aa(
        "cudaStreamCreate",
        "cuStreamCreate",
        &["cuStreamCreateWithPriority"],
    ),
    aa(
        "cudaStreamCreateWithFlags",
        "cuStreamCreate",
        &["cuStreamCreateWithPriority"],
    ),
    a("cudaStreamCreateWithPriority", "cuStreamCreateWithPriority"),
    a("cudaStreamDestroy", "cuStreamDestroy"),
    a("cudaStreamSynchronize", "cuStreamSynchronize"),
    a("cudaStreamQuery", "cuStreamQuery"),
    a("cudaStreamWaitEvent", "cuStreamWaitEvent"),
    a("cudaStreamBeginCapture", "cuStreamBeginCapture"),
    a("cudaStreamEndCapture", "cuStreamEndCapture"),
    a("cudaStreamIsCapturing", "cuStreamIsCapturing"),
    aa("cudaEventCreate", "cuEventCreate", &[]),
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
        "cuDevicePrimaryCtxRetain",
        &["cuCtxSetCurrent"],
    ),
    a("cudaGetDevice", "cuCtxGetDevice"),
    a("cudaGetDeviceCount", "cuDeviceGetCount"),
    a("cudaDeviceGetAttribute", "cuDeviceGetAttribute"),
    a("cudaDeviceReset", "cuDevicePrimaryCtxReset"),
    a("cudaSetDeviceFlags", "cuDevicePrimaryCtxSetFlags"),
    a("cudaDeviceSetLimit", "cuCtxSetLimit"),
    a("cudaDeviceGetLimit", "cuCtxGetLimit"),
    a("cudaDriverGetVersion", "cuDriverGetVersion"),
    a("cudaFuncGetAttributes", "cuFuncGetAttribute"),
    // Libraries (CUDA 12+ lazy loading).
    a("cudaLibraryLoadData", "cuLibraryLoadData"),
    a("cudaLibraryLoadFromFile", "cuLibraryLoadFromFile"),
    a("cudaLibraryUnload", "cuLibraryUnload"),
    a("cudaLibraryGetKernel", "cuLibraryGetKernel"),
];
