//! End to end on the mock CUDA stack: `GPUBPF_CTX_F_CAPTURING`. A policy that reads
//! `hdr.flags` sees the bit exactly on calls whose stream is being captured into a graph
//! (the shim asks the driver's `cuStreamIsCapturing` for that stream), on every route.
//!
//! Needs `cc` and clang (scripts/test.sh installs them); prints `skipped: …` without them.

mod common;

use common::cli::{ok_json, run_with_registry as cli};
use common::shim::{session, Session};

#[test]
fn a_policy_sees_which_calls_are_made_on_a_capturing_stream() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let obj = common::cli::build_policy(tmp.path(), "tests/shim/no_alloc_in_capture.bpf.c")
        .expect("clang present: policy built");
    ok_json(&cli(
        &home,
        &["-j", "load", obj.to_str().expect("utf-8 path")],
    ));
    for route in ["link", "dlsym", "proc"] {
        let out = mock.run_app(&home, route, &["capture", "4096"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        // 801: CUDA_ERROR_NOT_SUPPORTED, the policy's verdict, on the captured stream only.
        assert_eq!(
            lines[..2],
            ["async plain 0", "async captured 801"],
            "route {route}: {text}"
        );
    }
}
