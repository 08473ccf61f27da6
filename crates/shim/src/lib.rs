//! `libgpubpf.so`: the `LD_PRELOAD` shim that runs gpubpf policies at CUDA driver entry points.
