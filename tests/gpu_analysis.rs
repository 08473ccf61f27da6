//! The GPU scripts' analysis (`tests/gpu/workloads/common.py`'s paired figures and block
//! orders, `step_noise.py`'s dump reader): their unit tests on synthetic data
//! (`tests/gpu/workloads/test_analysis.py`) run here, when `python3` exists, so that a
//! change to how the GPU machine's figures are computed is caught without a GPU.

use std::path::Path;
use std::process::Command;

#[test]
fn the_gpu_scripts_analysis_passes_its_unit_tests() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 not found");
        return;
    }
    let out = Command::new("python3")
        .args(["-B", "-m", "unittest", "-q", "test_analysis"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/workloads"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/gpu/workloads/test_analysis.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
