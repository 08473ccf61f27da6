#!/usr/bin/env python3
"""Generate gpubpf's attach-point catalog from NVIDIA's CUDA driver headers.

Source of truth: the PyPI wheel `nvidia-cuda-runtime` (pinned below), which ships
`nvidia/cu13/include/cuda.h` and `nvidia/cu13/include/cudaTypedefs.h`.

- `cudaTypedefs.h` has one `PFN_<base>_v<version>[_ptsz|_ptds]` typedef per exported driver
  entry point and version: that gives every variant, the CUDA version it appeared in, and its
  parameter names and C types.
- `cuda.h` gives the type definitions (handles, enums, structs, scalars) used to classify
  parameters, and the set of declared function symbols, against which every derived exported
  symbol name is checked.

Output: `crates/runtime/src/attach/generated.rs` (checked in). NVIDIA's headers are never
committed; CI does not need the wheel. Re-run this script when moving to a new CUDA version and
review the diff. API ids are stable: ids already present in the existing generated file are
kept, new functions get new ids after the largest one.

Usage:
    python3 tools/gen-catalog/gen_catalog.py            # download the pinned wheel, write
    python3 tools/gen-catalog/gen_catalog.py --include-dir DIR   # use unpacked headers
    python3 tools/gen-catalog/gen_catalog.py --check    # exit 1 when the output would change
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

WHEEL_NAME = "nvidia-cuda-runtime"
WHEEL_VERSION = "13.5.37"
WHEEL_FILE = (
    "nvidia_cuda_runtime-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
)
WHEEL_SHA256 = "df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d"
INCLUDE_IN_WHEEL = "nvidia/cu13/include"

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "crates/runtime/src/attach/generated.rs"

# Non-const pointers to scalars/handles are out-pointers (one value written by the driver)
# unless listed here: these are arrays (input or output) or in/out buffers, which programs only
# see as raw application addresses.
ARRAY_PARAMS = {
    "attrIdxs", "attributes", "attrs", "capabilities", "data", "dataSizes", "dependencies",
    "dependencies_out", "dependencyData", "dependentNodes", "dptrs", "dsts", "edgeData",
    "edgeData_out", "extSemArray", "extra", "from", "functions", "jitOptions",
    "jitOptionsValues", "kernelParams", "kernels", "libraryOptionValues", "libraryOptions",
    "nodes", "nvSciSyncAttrList", "opList", "optionValues", "options", "paramsArray",
    "prefetchLocIdxs", "resources", "rootNodes", "sizes", "srcs", "to",
}
# `T **` parameters that are single out-values (the driver stores one pointer).
POINTER_OUTS = {
    ("cuMemAllocHost", "pp"), ("cuMemHostAlloc", "pp"), ("cuMemHostGetDevicePointer", "pdptr"),
    ("cuGetProcAddress", "pfn"), ("cuIpcOpenMemHandle", "pdptr"),
    ("cuMemPoolImportPointer", "ptr_out"), ("cuLinkComplete", "cubinOut"),
    ("cuExternalMemoryGetMappedBuffer", "devPtr"), ("cuLibraryGetManaged", "dptr"),
    ("cuLibraryGetUnifiedFunction", "fptr"),
}

# Sizes of the structures passed by value (the shim's wrappers need them for the C ABI).
# Checked by hand against the headers; an unknown one stops the generator.
STRUCT_BY_VALUE_SIZES = {
    "CUmemLocation_v1": 8,  # enum type; union { int id; struct { u8, u8 } }
    "CUipcMemHandle_v1": 64,  # char reserved[CU_IPC_HANDLE_SIZE]
    "CUipcEventHandle_v1": 64,  # char reserved[CU_IPC_HANDLE_SIZE]
    "CUeglFrame_v1": 64,  # union of 3 pointers, 6 unsigned, 3 enums, padded to 8
}

BUILTIN_SCALARS = {
    # name: (size, signed, kind)
    "char": (1, True, "int"), "signed char": (1, True, "int"), "unsigned char": (1, False, "int"),
    "short": (2, True, "int"), "unsigned short": (2, False, "int"),
    "int": (4, True, "int"), "unsigned": (4, False, "int"), "unsigned int": (4, False, "int"),
    "long": (8, True, "int"), "unsigned long": (8, False, "int"),
    "long long": (8, True, "int"), "unsigned long long": (8, False, "int"),
    "size_t": (8, False, "int"), "uint32_t": (4, False, "int"), "uint64_t": (8, False, "int"),
    "int32_t": (4, True, "int"), "int64_t": (8, True, "int"),
    "unsigned __int32": (4, False, "int"), "unsigned __int64": (8, False, "int"),
    # Floats travel as their IEEE bits, zero-extended: not "signed" in the slot sense.
    "float": (4, False, "float"), "double": (8, False, "float"),
}
# Types of the graphics headers that the wheel's headers include but do not ship (GL, EGL,
# VDPAU), and of cudaProfiler.h.
EXTERNAL_TYPES = {
    "GLuint": ("scalar", 4, False), "GLenum": ("scalar", 4, False),
    "EGLint": ("scalar", 4, True), "EGLImageKHR": ("handle", 8, False),
    "EGLStreamKHR": ("handle", 8, False), "EGLSyncKHR": ("handle", 8, False),
    "VdpDevice": ("scalar", 4, False), "VdpVideoSurface": ("scalar", 4, False),
    "VdpOutputSurface": ("scalar", 4, False), "VdpGetProcAddress": ("fnptr", 8, False),
    "CUoutput_mode": ("enum", 4, False),
}


# Headers of the wheel that are parsed. Each `*Typedefs.h` holds PFN typedefs; the others
# hold type definitions and declarations. cudaProfiler.h is not shipped in the wheel: its three
# functions are taken from cudaProfilerTypedefs.h alone (see EXTRA_DECLARED).
TYPEDEF_HEADERS = ["cudaTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
                   "cudaVDPAUTypedefs.h", "cudaProfilerTypedefs.h"]
DECL_HEADERS = ["cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]
EXTRA_DECLARED = {"cuProfilerInitialize", "cuProfilerStart", "cuProfilerStop"}


@dataclass
class TypeInfo:
    kind: str  # scalar | enum | handle | struct | fnptr | void
    size: int = 0
    signed: bool = False


@dataclass
class Param:
    name: str
    ctype: str
    cls: str  # scalar | handle | out_pointer | in_struct | raw_pointer | struct_by_value
    value_size: int  # size of the value (scalar/handle) or of the pointee (out_pointer)
    signed: bool


@dataclass
class Variant:
    symbol: str
    version: int
    per_thread: str  # "" | "ptsz" | "ptds"
    params: list[Param]


@dataclass
class Func:
    name: str
    variants: list[Variant] = field(default_factory=list)


def fail(msg: str) -> None:
    print(f"gen-catalog: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------------------------
# Fetching the headers


def fetch_headers(cache: Path) -> Path:
    """Downloads (once) and unpacks the pinned wheel; returns the include directory."""
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / WHEEL_FILE
    if not wheel.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--platform", "manylinux2014_x86_64", "--python-version", "3",
             "-d", str(cache), f"{WHEEL_NAME}=={WHEEL_VERSION}"],
            check=True,
        )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        fail(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    out = cache / f"unpacked-{WHEEL_VERSION}"
    inc = out / INCLUDE_IN_WHEEL
    if not (inc / "cudaTypedefs.h").exists():
        with zipfile.ZipFile(wheel) as z:
            for member in sorted(set(TYPEDEF_HEADERS + DECL_HEADERS)):
                z.extract(f"{INCLUDE_IN_WHEEL}/{member}", out)
    return inc


# ----------------------------------------------------------------------------------------------
# Parsing cuda.h


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def strip_preprocessor(text: str) -> str:
    """Blanks preprocessor lines. Both branches of a conditional are kept, except that the
    `#else` branch of a data-model test (`#if defined(_WIN64) || defined(__LP64__)`, which
    picks 32-bit types such as `typedef unsigned int CUdeviceptr_v2;` otherwise) is dropped:
    the catalog describes 64-bit hosts."""
    lines, cont = [], False
    stack: list[list[bool]] = []  # per open conditional: [tests the data model, in #else]
    for line in text.split("\n"):
        is_pp = cont or line.lstrip().startswith("#")
        directive = line.strip().lstrip("#").strip() if is_pp and not cont else ""
        cont = is_pp and line.rstrip().endswith("\\")
        if directive.startswith("if"):
            stack.append(["__LP64__" in directive or "_WIN64" in directive, False])
        elif directive.startswith(("else", "elif")) and stack:
            stack[-1][1] = True
        elif directive.startswith("endif") and stack:
            stack.pop()
        dropped = any(model and in_else for model, in_else in stack)
        lines.append("" if is_pp or dropped else line)
    return "\n".join(lines)


def statements(text: str):
    """Top-level statements ending in `;`, with brace nesting respected."""
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:  # the closing brace of a removed `extern "C" {`
                depth, start = 0, i + 1
        elif ch == ";" and depth == 0:
            yield text[start:i].strip()
            start = i + 1


def parse_types(cuda_h: str) -> dict[str, object]:
    """Maps each typedef name to a TypeInfo or to the name of the type it aliases."""
    types: dict[str, object] = {}
    body = strip_preprocessor(strip_comments(cuda_h))
    for st in statements(body):
        st = " ".join(st.split())
        # `extern "C" {` blocks leave a prefix; find the typedef inside the statement.
        idx = st.find("typedef ")
        if idx < 0:
            continue
        st = st[idx + len("typedef "):]
        if "{" in st:
            kind = st.split()[0]
            tail = st[st.rfind("}") + 1:]
            for decl in tail.split(","):
                decl = decl.strip()
                if not decl:
                    continue
                name = decl.lstrip("*").strip()
                if decl.startswith("*"):
                    types[name] = TypeInfo("handle", 8)
                elif kind == "enum":
                    types[name] = TypeInfo("enum", 4, False)
                else:
                    types[name] = TypeInfo("struct")
            continue
        m = re.match(r"_CONCAT_OUTER\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*(\w+)$", st)
        if m:  # `typedef _CONCAT_OUTER(CUdevResource_v, RESOURCE_ABI_VERSION) CUdevResource`
            types[m.group(3)] = TypeInfo("struct")
            continue
        if "(" in st:
            m = re.search(r"\(\s*(?:CUDA_CB|CUDAAPI)?\s*\*\s*(\w+)\s*\)", st)
            if m:
                types[m.group(1)] = TypeInfo("fnptr", 8)
            continue
        m = re.match(r"(.*?)\s*(\**)\s*(\w+)$", st)
        if not m:
            continue
        base, stars, name = m.group(1).strip(), m.group(2), m.group(3)
        if base.startswith(("struct ", "union ")):
            types[name] = TypeInfo("handle", 8) if stars else TypeInfo("struct")
        elif base.startswith("enum "):
            types[name] = TypeInfo("enum", 4, False)
        elif stars:
            types[name] = TypeInfo("handle", 8)
        else:
            types[name] = base
    return types


def resolve_type(name: str, types: dict[str, object]) -> TypeInfo:
    seen = set()
    while True:
        if name in BUILTIN_SCALARS:
            size, signed, _ = BUILTIN_SCALARS[name]
            return TypeInfo("scalar", size, signed)
        if name == "void":
            return TypeInfo("void")
        if name in EXTERNAL_TYPES:
            kind, size, signed = EXTERNAL_TYPES[name]
            return TypeInfo(kind, size, signed)
        t = types.get(name)
        if t is None:
            fail(f"unknown C type `{name}`")
        if isinstance(t, TypeInfo):
            return t
        if name in seen:
            fail(f"typedef cycle at `{name}`")
        seen.add(name)
        name = t


def declared_symbols(cuda_h: str) -> set[str]:
    """Every function symbol cuda.h declares, after its API-versioning macros."""
    defines: dict[str, str] = {}
    for m in re.finditer(r"^\s*#define\s+(cu\w+)\s+(.+?)\s*$", cuda_h, flags=re.M):
        defines[m.group(1)] = m.group(2)
    text = strip_comments(cuda_h)
    internal = text.rfind("#if defined(__CUDA_API_VERSION_INTERNAL)")
    if internal < 0:
        internal = len(text)
    out: set[str] = set()
    for pos, m in ((m.start(), m) for m in re.finditer(r"CUDAAPI\s+(cu\w+)\s*\(", text)):
        name = m.group(1)
        if pos > internal:  # the legacy block #undef's the macros
            out.add(name)
            continue
        target = defines.get(name, name)
        pm = re.match(r"__CUDA_API_PT(DS|SZ)\((\w+)\)", target)
        if pm:
            out.add(pm.group(2))
            out.add(f"{pm.group(2)}_pt{pm.group(1).lower()}")
        else:
            out.add(target)
    return out


# ----------------------------------------------------------------------------------------------
# Parsing cudaTypedefs.h


def strip_win32(text: str) -> str:
    """Drops `#ifdef _WIN32 … #endif` blocks (Windows-only entry points)."""
    return re.sub(r"^\s*#ifdef _WIN32\b.*?^\s*#endif[^\n]*$", "", text, flags=re.S | re.M)


def split_params(text: str) -> list[str]:
    text = re.sub(r"\bCUDAAPI\b", " ", text).strip()
    if text in ("", "void"):
        return []
    return [p.strip() for p in text.split(",")]


def classify(func: str, index: int, raw: str, types) -> Param:
    m = re.match(r"^(.*?)(\w+)$", raw)
    if not m or not m.group(1).strip() or m.group(1).strip() in ("const",):
        fail(f"{func}: cannot parse parameter `{raw}`")
    ctype = " ".join(m.group(1).replace("*", " * ").split()).replace(" *", "*").replace("*", " *")
    ctype = re.sub(r"\* \*", "**", ctype).strip()
    name = m.group(2)
    if name in ("unsigned", "int", "size_t") or m.group(1).strip() == "":
        name = f"arg{index}"
    stars = ctype.count("*")
    base_words = [w for w in ctype.replace("*", " ").split() if w != "const"]
    base = " ".join(base_words)
    const_base = ctype.startswith("const ")
    t = resolve_type(base, types)
    if stars == 0:
        if t.kind in ("scalar", "enum"):
            return Param(name, ctype, "scalar", t.size, t.signed)
        if t.kind == "handle":
            return Param(name, ctype, "handle", 8, False)
        if t.kind == "fnptr":
            return Param(name, ctype, "raw_pointer", 8, False)
        if t.kind == "struct":
            size = STRUCT_BY_VALUE_SIZES.get(base)
            if size is None:
                fail(f"{func}: `{raw}` passes a struct by value; add its size to "
                     "STRUCT_BY_VALUE_SIZES")
            return Param(name, ctype, "struct_by_value", size, False)
        fail(f"{func}: parameter `{raw}` has unsupported type")
    if (func, name) in POINTER_OUTS and stars == 2:
        return Param(name, ctype, "out_pointer", 8, False)
    is_text = base in ("char", "signed char", "unsigned char")
    if stars == 1 and not const_base and name not in ARRAY_PARAMS and not is_text:
        if t.kind in ("scalar", "enum"):
            return Param(name, ctype, "out_pointer", t.size, t.signed)
        if t.kind in ("handle", "fnptr"):
            return Param(name, ctype, "out_pointer", 8, False)
    if stars == 1 and const_base and t.kind == "struct":
        return Param(name, ctype, "in_struct", 8, False)
    return Param(name, ctype, "raw_pointer", 8, False)


def parse_typedefs(text: str, types) -> dict[str, list[tuple[int, str, list[Param]]]]:
    """Base name -> [(version, per_thread, params)] from the PFN typedefs."""
    out: dict[str, list[tuple[int, str, list[Param]]]] = {}
    pat = re.compile(
        r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(\w+?)_v(\d+)(?:_(ptsz|ptds))?\s*\)"
        r"\s*\((.*?)\)\s*;",
        flags=re.S,
    )
    for m in pat.finditer(strip_win32(strip_comments(text))):
        base, version, pt, plist = m.group(1), int(m.group(2)), m.group(3) or "", m.group(4)
        params = [classify(base, i, p, types) for i, p in enumerate(split_params(plist))]
        out.setdefault(base, []).append((version, pt, params))
    return out


def build_functions(typedefs, declared: set[str]) -> list[Func]:
    """Assigns exported symbols: the n-th default version of a base name (ascending) is
    `<base>` for n = 1 and `<base>_v<n>` after; a per-thread variant of version V maps to the
    newest default variant with version <= V plus `_ptsz`/`_ptds`. Every symbol must be
    declared in cuda.h."""
    funcs = []
    errors = []
    for base in sorted(typedefs):
        entries = sorted(typedefs[base], key=lambda e: (e[0], e[1]))
        defaults = [e for e in entries if not e[1]]
        f = Func(base)
        by_version = []
        for n, (version, _, params) in enumerate(defaults):
            sym = base if n == 0 else f"{base}_v{n + 1}"
            by_version.append((version, sym))
            f.variants.append(Variant(sym, version, "", params))
        for version, pt, params in (e for e in entries if e[1]):
            older = [s for v, s in by_version if v <= version]
            if not older:
                errors.append(f"{base}: per-thread variant v{version} has no default variant")
                continue
            f.variants.append(Variant(f"{older[-1]}_{pt}", version, pt, params))
        for v in f.variants:
            if v.symbol not in declared:
                errors.append(f"{base}: derived symbol `{v.symbol}` is not declared in cuda.h")
        funcs.append(f)
    if errors:
        fail("symbol derivation failed:\n  " + "\n  ".join(errors))
    return funcs


# ----------------------------------------------------------------------------------------------
# Writing Rust


def previous_ids_from_text(text: str) -> dict[str, int]:
    """API ids of an earlier generated file, to keep them stable."""
    return {
        m.group(2): int(m.group(1))
        for m in re.finditer(r'id: (\d+),\s*name: "(\w+)"', text)
    }


def previous_ids(path: Path) -> dict[str, int]:
    return previous_ids_from_text(path.read_text()) if path.exists() else {}


def rust_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


CLASS_RUST = {
    "scalar": "ParamClass::Scalar", "handle": "ParamClass::Handle",
    "out_pointer": "ParamClass::OutPointer", "in_struct": "ParamClass::InStruct",
    "raw_pointer": "ParamClass::RawPointer", "struct_by_value": "ParamClass::StructByValue",
}
PT_RUST = {"": "PerThread::No", "ptsz": "PerThread::Ptsz", "ptds": "PerThread::Ptds"}


def render(funcs: list[Func], ids: dict[str, int]) -> str:
    next_id = max(ids.values(), default=0) + 1
    assigned = {}
    for f in funcs:
        if f.name in ids:
            assigned[f.name] = ids[f.name]
        else:
            assigned[f.name] = next_id
            next_id += 1
    sigs: dict[tuple, str] = {}
    sig_lines = []

    def sig_const(params: list[Param]) -> str:
        key = tuple((p.name, p.ctype, p.cls, p.value_size, p.signed) for p in params)
        if key not in sigs:
            cname = f"SIG_{len(sigs)}"
            sigs[key] = cname
            body = "".join(
                f"\n    Param {{ name: {rust_str(p.name)}, c_type: {rust_str(p.ctype)}, "
                f"class: {CLASS_RUST[p.cls]}, value_size: {p.value_size}, "
                f"signed: {str(p.signed).lower()} }},"
                for p in params
            )
            sig_lines.append(f"const {cname}: &[Param] = &[{body}\n];")
        return sigs[key]

    point_lines = []
    for f in funcs:
        variants = "".join(
            f"\n            Variant {{ symbol: {rust_str(v.symbol)}, version: {v.version}, "
            f"per_thread: {PT_RUST[v.per_thread]}, params: {sig_const(v.params)} }},"
            for v in f.variants
        )
        point_lines.append(
            f"    GenPoint {{\n        id: {assigned[f.name]},\n        name: {rust_str(f.name)},"
            f"\n        variants: &[{variants}\n        ],\n    }},"
        )
    nvariants = sum(len(f.variants) for f in funcs)
    return (
        "// @generated by tools/gen-catalog/gen_catalog.py from the PyPI wheel\n"
        f"// {WHEEL_NAME} {WHEEL_VERSION} (cuda.h, cudaTypedefs.h). Do not edit by hand:\n"
        "// re-run the generator and review the diff.\n\n"
        "//! Generated driver entry points: every `PFN_*` typedef of `cudaTypedefs.h`.\n\n"
        "use super::catalog::{GenPoint, Param, ParamClass, PerThread, Variant};\n\n"
        f"/// CUDA version of the headers this table was generated from.\n"
        f"pub const CUDA_HEADERS_VERSION: &str = {rust_str(WHEEL_VERSION)};\n\n"
        f"/// Number of exported symbols (variants) in the catalog.\n"
        f"pub const VARIANT_COUNT: usize = {nvariants};\n\n"
        + "\n".join(sig_lines)
        + "\n\n/// Every driver entry point, sorted by base name.\n"
        "pub(crate) static POINTS: &[GenPoint] = &[\n"
        + "\n".join(point_lines)
        + "\n];\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--include-dir", type=Path, help="directory with cuda.h and cudaTypedefs.h")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "gpubpf-gen-catalog")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    ap.add_argument("--check", action="store_true", help="fail if the output would change")
    args = ap.parse_args()
    inc = args.include_dir or fetch_headers(args.cache)
    decl_text = "\n".join((inc / h).read_text() for h in DECL_HEADERS)
    types = parse_types(decl_text)
    typedefs: dict[str, list] = {}
    for h in TYPEDEF_HEADERS:
        for base, entries in parse_typedefs((inc / h).read_text(), types).items():
            typedefs.setdefault(base, []).extend(entries)
    declared = declared_symbols((inc / "cuda.h").read_text()) | EXTRA_DECLARED
    for h in DECL_HEADERS[1:]:
        declared |= declared_symbols((inc / h).read_text())
    funcs = build_functions(typedefs, declared)
    text = render(funcs, previous_ids(args.output))
    nvar = sum(len(f.variants) for f in funcs)
    if args.check:
        old = args.output.read_text() if args.output.exists() else ""
        if old != text:
            fail(f"{args.output} is stale; re-run without --check")
        print(f"gen-catalog: up to date ({len(funcs)} functions, {nvar} variants)")
        return
    with tempfile.NamedTemporaryFile("w", dir=args.output.parent, delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, args.output)
    print(f"gen-catalog: wrote {args.output} ({len(funcs)} functions, {nvar} variants)")


if __name__ == "__main__":
    main()
