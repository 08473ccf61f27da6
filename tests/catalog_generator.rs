//! The catalog generator (`tools/gen-catalog/gen_catalog.py`): its unit tests on synthetic
//! headers always run (when `python3` exists); the check that the checked-in
//! `crates/runtime/src/attach/generated.rs` matches NVIDIA's headers runs when those headers
//! are available locally: `GPUBPF_CUDA_INCLUDE_DIR`, or the generator's cache from an
//! earlier run (`~/.cache/gpubpf-gen-catalog/unpacked-<version>/nvidia/cu13/include`). It
//! never downloads.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tool_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/gen-catalog")
}

fn python() -> Option<&'static str> {
    if Command::new("python3").arg("--version").output().is_ok() {
        Some("python3")
    } else {
        eprintln!("skipped: python3 not found");
        None
    }
}

#[test]
fn generator_unit_tests_pass() {
    let Some(py) = python() else { return };
    let out = Command::new(py)
        .args(["-B", "-m", "unittest", "-q", "test_gen_catalog"])
        .current_dir(tool_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "generator unit tests failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn local_headers() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GPUBPF_CUDA_INCLUDE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let text = std::fs::read_to_string(tool_dir().join("gen_catalog.py")).ok()?;
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("WHEEL_VERSION = \""))?
        .trim_end_matches('"');
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = cache
        .join("gpubpf-gen-catalog")
        .join(format!("unpacked-{version}"))
        .join("nvidia/cu13/include");
    dir.join("cudaTypedefs.h").exists().then_some(dir)
}

#[test]
fn checked_in_catalog_matches_the_cuda_headers() {
    let Some(py) = python() else { return };
    let Some(include) = local_headers() else {
        eprintln!(
            "skipped: CUDA headers not available locally (set GPUBPF_CUDA_INCLUDE_DIR or run \
             tools/gen-catalog/gen_catalog.py once)"
        );
        return;
    };
    let out = Command::new(py)
        .arg("-B")
        .arg(tool_dir().join("gen_catalog.py"))
        .arg("--check")
        .arg("--include-dir")
        .arg(&include)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
