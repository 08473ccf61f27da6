//! `scripts/test-summary.sh`, the closing lines of `scripts/test.sh`: the conformance counts
//! and one total over every `test result:` line of cargo's output (issue #14).

use std::path::Path;
use std::process::Command;

fn summary(log: &str, conf: Option<&str>) -> String {
    let d = tempfile::tempdir().unwrap();
    let l = d.path().join("log");
    std::fs::write(&l, log).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test-summary.sh"))
        .arg(&l);
    if let Some(c) = conf {
        let p = d.path().join("conf");
        std::fs::write(&p, c).unwrap();
        cmd.arg(p);
    }
    let out = cmd.output().expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const LOG: &str = "\
     Running tests/a.rs (target/debug/deps/a-1)
running 3 tests
test x ... ok
test result: ok. 7 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.1s
     Running tests/b.rs (target/debug/deps/b-2)
test result: FAILED. 4 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s
   Doc-tests gpubpf_isa
test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0s
a line that mentions test result: 100 passed; in the middle
";

#[test]
fn totals_and_conformance_counts_come_last() {
    let conf = "\
---- conformance_jit stdout ----
conformance (jit): 313/313 passed
---- negative_cases_are_rejected stdout ----
  lddw.data: Rejected: ...
negative cases rejected: 61/61
---- conformance_interpreter stdout ----
conformance (interpreter): 313/313 passed
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2s
";
    assert_eq!(
        summary(LOG, Some(conf)),
        "conformance (interpreter): 313/313 passed\n\
         conformance (jit): 313/313 passed\n\
         negative cases rejected: 61/61\n\
         total: 12 passed, 3 failed, 3 skipped\n"
    );
}

#[test]
fn a_missing_suite_says_so() {
    let out = summary(
        "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
         skipped: bpf_conformance not found (set GPUBPF_CONFORMANCE_DIR)\n",
        None,
    );
    assert_eq!(
        out,
        "conformance: skipped (bpf_conformance not found; set GPUBPF_CONFORMANCE_DIR)\n\
         total: 1 passed, 0 failed, 0 skipped\n"
    );
}

/// `scripts/test.sh` with a stand-in `cargo` on `PATH`: it ends with the summary and exits
/// non-zero when a test failed.
#[test]
fn the_test_script_ends_with_the_summary_and_fails_when_a_test_fails() {
    let have = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
    };
    if ["clang", "clang-19", "llvm-objdump"]
        .iter()
        .any(|c| !have(c).is_ok_and(|o| o.status.success()))
    {
        // test.sh would install them first.
        eprintln!("skipped: clang, clang-19 or llvm-objdump not found");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cargo = d.path().join("cargo");
    std::fs::write(
        &cargo,
        r#"#!/bin/sh
[ "$1" = test ] || exit 0
case "$*" in
*--show-output*)
    echo "conformance (jit): 313/313 passed"
    echo "negative cases rejected: 61/61"
    echo "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
    ;;
*)
    echo "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out"
    if [ "$FAKE_FAIL" = 1 ]; then
        echo "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
        exit 101
    fi
    ;;
esac
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        d.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |fail: bool| {
        Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test.sh"))
            .env("PATH", &path)
            .env("FAKE_FAIL", if fail { "1" } else { "0" })
            .output()
            .expect("run scripts/test.sh")
    };
    let tail = |o: &std::process::Output| {
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<String> = s.lines().map(str::to_owned).collect();
        lines[lines.len().saturating_sub(3)..].to_vec()
    };
    let ok = run(false);
    assert_eq!(ok.status.code(), Some(0), "{:?}", tail(&ok));
    assert_eq!(
        tail(&ok),
        [
            "conformance (jit): 313/313 passed",
            "negative cases rejected: 61/61",
            "total: 5 passed, 0 failed, 1 skipped"
        ]
    );
    let failed = run(true);
    assert_eq!(failed.status.code(), Some(101), "{:?}", tail(&failed));
    assert_eq!(tail(&failed)[2], "total: 7 passed, 1 failed, 1 skipped");
}
