//! Computes `GPUBPF_VERIFIER_SOURCE_HASH`: a SHA-256 of the verifier's and the ISA crate's
//! sources (every file under both `src` directories, by relative path and contents, in
//! sorted order). The runtime's verification cache keys its entries with it
//! (`gpubpf_runtime::program::verify_cache`), so that a verifier whose code changed in any
//! way never reuses what another build decided.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut h = Sha256::new();
    for (label, dir) in [
        ("verifier", manifest.join("src")),
        ("isa", manifest.join("../isa/src")),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut list = Vec::new();
        files(&dir, &mut list);
        for f in list {
            let rel = f.strip_prefix(&dir).expect("under dir");
            let bytes =
                std::fs::read(&f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
            h.update(label.as_bytes());
            h.update([0]);
            h.update(rel.to_string_lossy().as_bytes());
            h.update([0]);
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=GPUBPF_VERIFIER_SOURCE_HASH={hex}");
}
