//! Secure-execution processes (setuid, setgid, file capabilities: `getauxval(AT_SECURE)`
//! non-zero) are left untouched by the shim: it never opens the registry their environment
//! names, so it never registers them, never writes a stats file and never runs a policy.
//!
//! The loader ignores `LD_PRELOAD` paths for such programs, so the test program `dlopen`s
//! `libgpubpf.so` by absolute path (which the loader allows) and calls its `cuInit`. Making
//! a setuid program of another user needs root: the test prints `skipped: …` otherwise.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use gpubpf_runtime::registry::Registry;

const NOBODY: u32 = 65534;

const LAUNCHER: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    if (!init) { fprintf(stderr, "no cuInit\n"); return 3; }
    printf("secure=%lu cuInit=%d\n", getauxval(AT_SECURE), init(0));
    return 0;
}
"#;

fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), None).unwrap();
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

fn stats_files(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join("procs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn run(launcher: &Path, lib: &Path, cuda: &Path, home: &Path) -> String {
    let out = Command::new(launcher)
        .arg(lib)
        .env("GPUBPF_CUDA_LIBRARY", cuda)
        .env("GPUBPF_HOME", home)
        .env_remove("GPUBPF_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn setuid_programs_are_left_untouched() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a setuid program of another user needs root");
        return;
    }
    if !common::shim::have_cc() {
        eprintln!("skipped: cc not found");
        return;
    }
    let lib = common::shim::shim_library();
    let mock = common::shim::mock_stack();
    // Everything the setuid program (euid nobody) reads lives in a directory it may enter.
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cuda = t.join("libcuda.so.1");
    std::fs::copy(&mock.libcuda, &cuda).unwrap();
    let shim = t.join("libgpubpf.so");
    std::fs::copy(&lib, &shim).unwrap();
    std::fs::write(t.join("launch.c"), LAUNCHER).unwrap();
    let launcher = t.join("launch");
    let cc = Command::new("cc")
        .args([
            "-o",
            launcher.to_str().unwrap(),
            t.join("launch.c").to_str().unwrap(),
            "-ldl",
        ])
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );

    // Control: the same program without the setuid bit, on a registry of its own user, is
    // registered (the shim did initialise through this path).
    let home = t.join("reg");
    Registry::open(&home).unwrap();
    let out = run(&launcher, &shim, &cuda, &home);
    assert!(out.starts_with("secure=0 "), "{out}");
    assert_eq!(stats_files(&home).len(), 1, "control run not registered");

    // Setuid to nobody, on a registry that nobody owns (so that an ordinary process of
    // nobody would use it): the shim stays inert.
    let suid_home = t.join("reg-nobody");
    Registry::open(&suid_home).unwrap();
    chown_tree(&suid_home, NOBODY);
    let suid = t.join("launch-suid");
    std::fs::copy(&launcher, &suid).unwrap();
    std::os::unix::fs::chown(&suid, Some(NOBODY), None).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = run(&suid, &shim, &cuda, &suid_home);
    assert!(
        out.starts_with("secure=1 "),
        "not in secure-execution mode: {out}"
    );
    assert_eq!(
        stats_files(&suid_home),
        Vec::<String>::new(),
        "the shim registered a setuid process"
    );
}
