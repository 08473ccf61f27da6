#!/usr/bin/env python3
"""Writes the crafted corrupt objects of this directory from min.o.

min.o is `clang -O2 -g -target bpf -mcpu=v3 -I policies/include -c min.bpf.c -o min.o`
(clang 14). Each output breaks one thing the loader must report as an error (tests/elf_corpus.rs
holds the expected messages). Run from this directory: `python3 craft.py`.
"""
import struct

SRC = open("min.o", "rb").read()


def shdrs(d):
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    shnum = struct.unpack_from("<H", d, 0x3C)[0]
    shstrndx = struct.unpack_from("<H", d, 0x3E)[0]
    out = []
    for i in range(shnum):
        o = shoff + 64 * i
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from("<IIQQQQIIQQ", d, o)
        out.append(dict(hdr=o, name_off=name, type=typ, off=off, size=size, link=link, info=info))
    strtab = out[shstrndx]
    for s in out:
        start = strtab["off"] + s["name_off"]
        s["name"] = d[start:d.index(b"\0", start)].decode()
    return out


def sec(d, name):
    return next(s for s in shdrs(d) if s["name"] == name)


def symbols(d):
    st = next(s for s in shdrs(d) if s["type"] == 2)
    strtab = shdrs(d)[st["link"]]
    out = []
    for i in range(st["size"] // 24):
        o = st["off"] + 24 * i
        name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", d, o)
        s = strtab["off"] + name
        out.append(dict(ent=o, name=d[s:d.index(b"\0", s)].decode(), shndx=shndx, value=value, size=size))
    return out


def sym(d, name):
    return next(s for s in symbols(d) if s["name"] == name)


def put(d, off, fmt, *v):
    struct.pack_into(fmt, d, off, *v)


def write(name, d):
    open(name, "wb").write(bytes(d))


def rename(d, old, new):
    i = d.index(old.encode() + b"\0")
    d[i:i + len(new)] = new.encode()


prog_rel = "." + "rel" + "cuda/cuMemAlloc"

d = bytearray(SRC)
shoff = struct.unpack_from("<Q", d, 0x28)[0]
write("truncated_section_table.o", d[: shoff + 64 * 3])

d = bytearray(SRC)
put(d, sec(d, prog_rel)["off"], "<Q", 0x10000)
write("reloc_offset_out_of_bounds.o", d)

d = bytearray(SRC)
r = sec(d, prog_rel)["off"]
info = struct.unpack_from("<Q", d, r + 8)[0]
put(d, r + 8, "<Q", (0xFFFF << 32) | (info & 0xFFFFFFFF))
write("reloc_bad_symbol.o", d)

d = bytearray(SRC)
r = sec(d, prog_rel)["off"]
info = struct.unpack_from("<Q", d, r + 8)[0]
put(d, r + 8, "<Q", (info & ~0xFFFFFFFF) | 2)
write("reloc_unsupported_type.o", d)

d = bytearray(SRC)
put(d, sec(d, prog_rel)["hdr"] + 44, "<I", 200)
write("reloc_bad_target_section.o", d)

d = bytearray(SRC)
put(d, sym(d, "counts")["ent"] + 6, "<H", 100)
write("symbol_bad_section.o", d)

d = bytearray(SRC)
rename(d, ".rel.BTF", ".rel.BTX")
write("maps_without_btf.o", d)

d = bytearray(SRC)
rename(d, prog_rel, ".relkprb/cuMemAlloc")
write("unknown_program_section.o", d)

d = bytearray(SRC)
put(d, sym(d, "twice")["ent"] + 6, "<H", sec(d, "cuda/cuMemAlloc")["hdr"] and
    [i for i, s in enumerate(shdrs(d)) if s["name"] == "cuda/cuMemAlloc"][0])
write("overlapping_functions.o", d)

d = bytearray(SRC)
t = sec(d, ".text")
d[t["off"] + t["size"] - 8] = 0x18
write("lddw_missing_second_slot.o", d)

d = bytearray(SRC)
put(d, sec(d, ".BTF")["off"], "<H", 0)
write("btf_bad_magic.o", d)

d = bytearray(SRC)
e = sec(d, ".BTF.ext")["off"]
hdr_len, _, _, line_off, _ = struct.unpack_from("<IIIII", d, e + 4)
first_record = e + hdr_len + line_off + 4 + 8
put(d, first_record + 4, "<I", 0xFFFFFF)
write("btf_ext_bad_string.o", d)

d = bytearray(SRC)
put(d, sec(d, ".rodata")["hdr"] + 24, "<Q", 0xFFFFFF)
write("section_data_out_of_bounds.o", d)

d = bytearray(SRC)
c = sec(d, "cuda/cuMemAlloc")
call_off = next(o for o in range(c["off"], c["off"] + c["size"], 8) if d[o] == 0x85 and d[o + 1] >> 4 == 1)
put(d, call_off + 4, "<i", 100)
write("call_outside_function.o", d)

# An `lddw` with a pseudo source (BPF_PSEUDO_MAP_IDX = 5, map 0) that no relocation made:
# the map `lddw`'s relocation is dropped from the end of the relocation table and its
# source field set by hand. The loader must refuse it rather than copy it through.
d = bytearray(SRC)
c = sec(d, "cuda/cuMemAlloc")
rel = sec(d, prog_rel)
entries = [struct.unpack_from("<QQ", d, rel["off"] + 16 * i) for i in range(rel["size"] // 16)]
lddw_entries = [e for e in entries if d[c["off"] + e[0]] == 0x18]
victim = lddw_entries[0]
rest = [e for e in entries if e != victim]
for i, e in enumerate(rest + [victim]):
    put(d, rel["off"] + 16 * i, "<QQ", *e)
put(d, rel["hdr"] + 32, "<Q", rel["size"] - 16)
o = c["off"] + victim[0]
d[o + 1] = (d[o + 1] & 0x0F) | (5 << 4)
put(d, o + 4, "<i", 0)
write("lddw_unrelocated_pseudo.o", d)
