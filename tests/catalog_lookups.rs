//! The catalog against what real CUDA programs ask for, measured on the accelerator machine
//! (`../shared/cuda/*.tsv`, see INTERCEPTION.md): every `cuGetProcAddress` request of cudart
//! 13, the symbols the driver resolved them to, and the names PyTorch's libraries `dlsym`.
//!
//! The data lives outside the repository: `GPUBPF_CUDA_DATA_DIR` (default
//! `<workspace>/../shared/cuda`); each test prints `skipped: … not found` when it is absent.

use std::path::PathBuf;

use gpubpf_runtime::attach;

fn data_file(name: &str) -> Option<String> {
    let dir = std::env::var_os("GPUBPF_CUDA_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/cuda"));
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(_) => {
            eprintln!("skipped: {} not found", path.display());
            None
        }
    }
}

/// Data rows (header skipped) split on tabs.
fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('\t').collect())
}

fn flags(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn every_cudart_proc_lookup_is_in_the_catalog() {
    let Some(text) = data_file("cuda13-runtime-proc-lookups.tsv") else {
        return;
    };
    let mut checked = 0;
    for row in rows(&text) {
        let [symbol, version, fl] = row[..] else {
            panic!("bad row {row:?}");
        };
        if symbol == "\"\"" {
            continue; // the empty first request, answered NULL by the driver
        }
        let point = attach::resolve(symbol).unwrap_or_else(|e| panic!("{symbol}: {e}"));
        assert_eq!(point.name, symbol, "requests use base names");
        let version: u32 = version.parse().unwrap();
        let variant = point.variant_for_request(version, flags(fl) & 2 != 0);
        assert!(
            variant.is_some(),
            "{symbol}@{version}: no variant that old (have {:?})",
            point
                .variants
                .iter()
                .map(|v| (v.symbol, v.version))
                .collect::<Vec<_>>()
        );
        checked += 1;
    }
    assert!(checked >= 400, "only {checked} requests");
}

#[test]
fn proc_lookups_resolve_to_the_symbols_the_driver_returned() {
    let Some(text) = data_file("cuda13-proc-lookup-resolution-examples.tsv") else {
        return;
    };
    let mut checked = 0;
    for row in rows(&text) {
        let [request, version, fl, export] = row[..] else {
            panic!("bad row {row:?}");
        };
        if request == "\"\"" {
            assert_eq!(export, "NULL");
            continue;
        }
        let point = attach::resolve(request).unwrap_or_else(|e| panic!("{request}: {e}"));
        let version: u32 = version.parse().unwrap();
        let got = point
            .variant_for_request(version, flags(fl) & 2 != 0)
            .map(|v| v.symbol);
        assert_eq!(got, Some(export), "{request}@{version} flags {fl}");
        // And the exported symbol itself resolves back to the same attach point.
        assert_eq!(attach::resolve(export).unwrap().id, point.id);
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} examples");
}

#[test]
fn every_cuda_symbol_pytorch_dlsyms_resolves() {
    let Some(text) = data_file("pytorch-dlsym-symbols.tsv") else {
        return;
    };
    let mut checked = 0;
    for row in rows(&text) {
        let symbol = row[0];
        if !symbol.starts_with("cu") {
            continue; // NVML is not a driver entry point
        }
        attach::resolve(symbol).unwrap_or_else(|e| panic!("{symbol}: {e}"));
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} symbols");
}

/// Measured on the real driver (580.159.04, CUDA 13.0; `tests/gpu/catalog-probes/`): for
/// every catalog variant it knows, `cuGetProcAddress(base, version, flags)` returned exactly
/// the symbol `variant_for_request` derives. In-repo data, always runs.
#[test]
fn every_variant_resolves_like_the_real_driver() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/gpu/catalog-probes/procaddr-driver580.tsv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut checked = 0;
    for row in rows(&text) {
        let [request, version, fl, export] = row[..] else {
            panic!("bad row {row:?}");
        };
        let point = attach::resolve(request).unwrap_or_else(|e| panic!("{request}: {e}"));
        let version: u32 = version.parse().unwrap();
        let per_thread = fl.parse::<u64>().unwrap() & 2 != 0;
        let got = point
            .variant_for_request(version, per_thread)
            .map(|v| v.symbol);
        assert_eq!(got, Some(export), "{request}@{version} flags {fl}");
        checked += 1;
    }
    assert!(checked >= 650, "only {checked} rows");
}
