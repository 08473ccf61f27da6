"""Unit tests of gen_catalog.py on small synthetic headers (no wheel needed).

Run: python3 -m unittest discover -s tools/gen-catalog   (tests/catalog_generator.rs runs it)
"""

import unittest

import gen_catalog as g

CUDA_H = """
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;
typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
typedef struct CUlaunchConfig_st { unsigned int gridDimX; } CUlaunchConfig;
typedef struct CUmemLocation_st { int type; union { int id; }; } CUmemLocation_v1;
typedef void (CUDA_CB *CUhostFn)(void *userData);
#define cuMemAlloc cuMemAlloc_v2
#define cuLaunchKernel __CUDA_API_PTSZ(cuLaunchKernel)
#define cuCopy __CUDA_API_PTDS(cuCopy_v2)
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI cuLaunchKernel(CUfunction f, CUstream hStream, void **kernelParams);
CUresult CUDAAPI cuCopy(CUdeviceptr dst, size_t n);
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, CUmemLocation_v1 location);
#if defined(__CUDA_API_VERSION_INTERNAL)
    #undef cuMemAlloc
    #undef cuCopy
    CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
    CUresult CUDAAPI cuCopy(unsigned int dst, unsigned int n);
#endif
"""

TYPEDEFS_H = """
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_v4000)(CUfunction f, CUstream hStream, void **kernelParams);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_v7000_ptsz)(CUfunction f, CUstream hStream, void **kernelParams);
typedef CUresult (CUDAAPI *PFN_cuCopy_v3020)(CUdeviceptr_v2 dst, size_t n);
typedef CUresult (CUDAAPI *PFN_cuCopy_v7000_ptds)(CUdeviceptr_v2 dst, size_t n);
typedef CUresult (CUDAAPI *PFN_cuLaunchHostFunc_v10000)(CUstream hStream, CUhostFn fn, void *userData);
typedef CUresult (CUDAAPI *PFN_cuMemAdvise_v8000)(CUdeviceptr_v2 devPtr, CUmemLocation_v1 location);
#ifdef _WIN32
typedef CUresult (CUDAAPI *PFN_cuWGLGetDevice_v2020)(CUdevice_v1 *pDevice, HGPUNV hGpu);
#endif
#if defined(__CUDA_API_VERSION_INTERNAL)
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v2000)(unsigned int *dptr, unsigned int bytesize);
typedef CUresult (CUDAAPI *PFN_cuCopy_v2000)(unsigned int dst, unsigned int n);
#endif
"""


def build():
    types = g.parse_types(CUDA_H)
    funcs = g.build_functions(g.parse_typedefs(TYPEDEFS_H, types), g.declared_symbols(CUDA_H))
    return {f.name: f for f in funcs}


class Generator(unittest.TestCase):
    def test_types(self):
        t = g.parse_types(CUDA_H)
        self.assertEqual(g.resolve_type("CUdevice", t).kind, "scalar")
        self.assertEqual(g.resolve_type("CUdeviceptr", t).size, 8)
        self.assertEqual(g.resolve_type("CUstream", t).kind, "handle")
        self.assertEqual(g.resolve_type("CUresult", t).kind, "enum")
        self.assertEqual(g.resolve_type("CUlaunchConfig", t).kind, "struct")
        self.assertEqual(g.resolve_type("CUhostFn", t).kind, "fnptr")

    def test_64_bit_data_model(self):
        # cuda.h picks 32-bit device pointers unless `_WIN64 || __LP64__`: the catalog
        # describes 64-bit hosts, so the `#else` branch must not win.
        h = """
#if defined(_WIN64) || defined(__LP64__)
typedef unsigned long long CUdeviceptr_v2;
#else
typedef unsigned int CUdeviceptr_v2;
#endif
typedef CUdeviceptr_v2 CUdeviceptr;
#ifdef OTHER
typedef int kept_a;
#else
typedef long long kept_b;
#endif
"""
        t = g.parse_types(h)
        self.assertEqual(g.resolve_type("CUdeviceptr", t).size, 8)
        self.assertIn("kept_a", t)
        self.assertIn("kept_b", t)

    def test_declared_symbols_follow_the_macros(self):
        d = g.declared_symbols(CUDA_H)
        for s in ["cuMemAlloc", "cuMemAlloc_v2", "cuLaunchKernel", "cuLaunchKernel_ptsz",
                  "cuCopy", "cuCopy_v2", "cuCopy_v2_ptds"]:
            self.assertIn(s, d)

    def test_symbols_versions_and_per_thread_variants(self):
        f = build()
        self.assertNotIn("cuWGLGetDevice", f)  # Windows-only
        self.assertEqual([(v.symbol, v.version) for v in f["cuMemAlloc"].variants],
                         [("cuMemAlloc", 2000), ("cuMemAlloc_v2", 3020)])
        self.assertEqual([(v.symbol, v.per_thread) for v in f["cuLaunchKernel"].variants],
                         [("cuLaunchKernel", ""), ("cuLaunchKernel_ptsz", "ptsz")])
        self.assertEqual([v.symbol for v in f["cuCopy"].variants],
                         ["cuCopy", "cuCopy_v2", "cuCopy_v2_ptds"])

    def test_classification(self):
        f = build()
        alloc = f["cuMemAlloc"].variants[-1].params
        self.assertEqual([(p.name, p.cls, p.value_size) for p in alloc],
                         [("dptr", "out_pointer", 8), ("bytesize", "scalar", 8)])
        launch = f["cuLaunchKernel"].variants[0].params
        self.assertEqual([p.cls for p in launch], ["handle", "handle", "raw_pointer"])
        host = f["cuLaunchHostFunc"].variants[0].params
        self.assertEqual([p.cls for p in host], ["handle", "raw_pointer", "raw_pointer"])
        advise = f["cuMemAdvise"].variants[0].params
        self.assertEqual((advise[1].cls, advise[1].value_size), ("struct_by_value", 8))

    def test_undeclared_symbols_stop_the_generator(self):
        typedefs = TYPEDEFS_H + (
            "typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v13000)(CUdeviceptr_v2 *dptr, "
            "size_t bytesize);\n")
        types = g.parse_types(CUDA_H)
        with self.assertRaises(SystemExit):
            g.build_functions(g.parse_typedefs(typedefs, types), g.declared_symbols(CUDA_H))

    def test_render_keeps_ids(self):
        funcs = list(build().values())
        text = g.render(sorted(funcs, key=lambda f: f.name), {"cuMemAlloc": 42})
        self.assertIn('id: 42,\n        name: "cuMemAlloc"', text)
        ids = g.previous_ids_from_text(text)
        self.assertEqual(ids["cuMemAlloc"], 42)
        self.assertEqual(sorted(ids.values()), [42, 43, 44, 45, 46])


if __name__ == "__main__":
    unittest.main()
