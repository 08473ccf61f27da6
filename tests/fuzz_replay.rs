//! The stable twin of the cargo-fuzz targets (`fuzz/`, nightly + libFuzzer): each target's
//! property (`fuzz/props/mod.rs`, the very function its libFuzzer target calls) runs on
//! every input of its corpus `fuzz/corpus/TARGET/`, then on a seeded batch of mutations of
//! those inputs (bit flips, byte writes, interesting values, insertions, deletions,
//! truncations, splices), bounded in count and time so that CI stays fast.
//!
//! `GPUBPF_FUZZ_ITERS` (default 2000) mutations per target, at most `GPUBPF_FUZZ_SECS`
//! (default 5) seconds each; `GPUBPF_FUZZ_SEED` changes the seed. An input that panics is
//! written to `target/tmp/fuzz-crash-TARGET-N` and named in the failure: add it to the
//! corpus (so that it is replayed for ever) and fix the bug.

#[path = "../fuzz/props/mod.rs"]
mod props;
#[path = "common/rng.rs"]
mod rng;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rng::Rng;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

fn mutate(rng: &mut Rng, mut b: Vec<u8>, other: &[u8]) -> Vec<u8> {
    const INTERESTING: &[u64] = &[
        0,
        1,
        0x7f,
        0x80,
        0xff,
        0x7fff,
        0xffff,
        0x7fff_ffff,
        0xffff_ffff,
        u64::MAX,
        1 << 31,
        1 << 63,
    ];
    for _ in 0..=rng.below(8) {
        let len = b.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.index(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.index(len);
                b[i] = rng.next() as u8;
            }
            2 if len > 0 => {
                let v = rng.pick(INTERESTING).to_le_bytes();
                let w = rng.pick(&[1usize, 2, 4, 8]);
                let i = rng.index(len);
                for (k, byte) in v.iter().take(w).enumerate() {
                    if let Some(d) = b.get_mut(i + k) {
                        *d = *byte;
                    }
                }
            }
            3 => {
                let i = rng.index(len + 1);
                let n = 1 + rng.index(16);
                let fill: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, fill);
            }
            4 if len > 0 => {
                let i = rng.index(len);
                let n = (1 + rng.index(16)).min(len - i);
                b.drain(i..i + n);
            }
            5 if len > 0 => b.truncate(rng.index(len)),
            6 if !other.is_empty() && len > 0 => {
                let from = rng.index(other.len());
                let n = (1 + rng.index(64)).min(other.len() - from);
                let at = rng.index(len);
                let end = (at + n).min(len);
                b.splice(at..end, other[from..from + n].iter().copied());
            }
            _ if len > 0 => {
                // Duplicate a chunk (repeated records, instructions).
                let i = rng.index(len);
                let n = (1 + rng.index(32)).min(len - i);
                let chunk = b[i..i + n].to_vec();
                b.splice(i..i, chunk);
            }
            _ => b.push(rng.next() as u8),
        }
    }
    b
}

fn run(target: &str) {
    let (_, prop) = props::TARGETS
        .iter()
        .find(|(n, _)| *n == target)
        .expect("known target");
    let inputs = corpus(target);
    for (path, bytes) in &inputs {
        if catch_unwind(AssertUnwindSafe(|| prop(bytes))).is_err() {
            panic!("{target}: corpus input {} panics", path.display());
        }
    }
    let iters = env_u64("GPUBPF_FUZZ_ITERS", 2000);
    let budget = Duration::from_secs(env_u64("GPUBPF_FUZZ_SECS", 5));
    let seed = env_u64("GPUBPF_FUZZ_SEED", 0x6770_6266);
    let mut r = Rng(seed
        ^ target
            .bytes()
            .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b)));
    let started = Instant::now();
    let mut done = 0;
    while done < iters && started.elapsed() < budget {
        let (_, base) = &inputs[r.index(inputs.len())];
        let (_, other) = &inputs[r.index(inputs.len())];
        let input = mutate(&mut r, base.clone(), other);
        if catch_unwind(AssertUnwindSafe(|| prop(&input))).is_err() {
            let out =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-crash-{target}-{done}"));
            std::fs::write(&out, &input).unwrap();
            panic!(
                "{target}: mutation {done} (seed {seed:#x}) panics; input saved to {}",
                out.display()
            );
        }
        done += 1;
    }
    eprintln!(
        "{target}: {} corpus inputs, {done} mutations in {:?}",
        inputs.len(),
        started.elapsed()
    );
    assert!(done > 0, "{target}: no mutation ran");
}

#[test]
fn object_parse() {
    run("object_parse");
}

#[test]
fn btf() {
    run("btf");
}

#[test]
fn asm() {
    run("asm");
}

#[test]
fn decode() {
    run("decode");
}

#[test]
fn verifier_insns() {
    run("verifier_insns");
}

#[test]
fn verifier_object() {
    run("verifier_object");
}

#[test]
fn registry_files() {
    run("registry_files");
}
