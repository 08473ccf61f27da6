//! deploy/: the Kubernetes manifests and the Helm chart's rendered templates validate against
//! the Kubernetes schemas (PyPI's `kubernetes-validate`, installed by this test into a venv
//! under the target directory; `skipped: …` when it cannot be installed); the chart with its
//! defaults renders the plain manifests (`tests/deploy/render_chart.py`: helm is packaged by
//! neither Debian nor PyPI, the chart keeps to the template subset that script renders);
//! the reconcile loop of the DaemonSet's policy container loads, replaces and survives a bad
//! update; every metric the Grafana dashboard queries is served by `gpubpf exporter` run with the
//! DaemonSet's arguments on a registry holding the quota policy, with a live process of the
//! mock CUDA stack under the shim (needs `cc` and clang, `skipped: …` without); the Dockerfile copies paths
//! that exist and builds the artifacts it ships; the init container's script installs the
//! binaries and creates the node's system registry.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cli::{build_policy, gpubpf, ok_json, run_with_registry};
use common::process::{wait_for_files, Reaped};
use common::shim::{session, Session};

const KUBE_VALIDATE: &str = "kubernetes-validate==1.37.0";
/// Kubernetes versions validated against: an older supported one and the validator's newest.
const KUBE_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
/// Plain manifests the chart renders (chart template, plain file).
const CHART_FILES: [(&str, &str); 4] = [
    ("configmap.yaml", "policies-configmap.yaml"),
    ("daemonset.yaml", "daemonset.yaml"),
    ("service.yaml", "service.yaml"),
    ("servicemonitor.yaml", "servicemonitor.yaml"),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn plain_manifests() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/kubernetes"))
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    assert!(v.len() >= 6, "manifests missing: {v:?}");
    v
}

/// The venv's python with `kubernetes-validate` (and PyYAML, its dependency), installed on
/// first use; `Err(reason)` when it cannot be.
fn python() -> Result<PathBuf, String> {
    static VENV: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut v = VENV.lock().unwrap_or_else(|e| e.into_inner());
    v.get_or_insert_with(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../k8s-venv");
        let py = venv.join("bin/python");
        let ready = || {
            Command::new(&py)
                .args(["-c", "import kubernetes_validate, yaml"])
                .status()
                .is_ok_and(|s| s.success())
        };
        if ready() {
            return Ok(py);
        }
        let run = |cmd: &mut Command| match cmd.output() {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("{cmd:?}: {e}")),
        };
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        run(Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            KUBE_VALIDATE,
        ]))?;
        if ready() {
            Ok(py)
        } else {
            Err(format!("{KUBE_VALIDATE} installed but cannot be imported"))
        }
    })
    .clone()
}

macro_rules! python_or_skip {
    () => {
        match python() {
            Ok(py) => py,
            Err(why) => {
                eprintln!("skipped: cannot install {KUBE_VALIDATE} into a venv: {why}");
                return;
            }
        }
    };
}

/// Validates `files` against the Kubernetes schemas of every version in `KUBE_VERSIONS`
/// (strict: unknown fields are errors). Kinds without a schema (the Prometheus Operator's
/// ServiceMonitor) are only warned about by the validator; `servicemonitor_matches` checks
/// those.
fn validate(py: &Path, files: &[PathBuf]) {
    for version in KUBE_VERSIONS {
        let out = Command::new(py)
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .args(files)
            .output()
            .expect("run kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("ERROR"),
            "kubernetes-validate {version}:\n{text}"
        );
        let passed = text.matches(" passed for resource ").count();
        let no_schema = text
            .matches("Couldn't find schema for kind ServiceMonitor")
            .count();
        assert_eq!(
            passed + no_schema,
            files.len(),
            "one verdict a file (version {version}):\n{text}"
        );
    }
}

/// Runs python `code` in the venv with `args`; its stdout, or a panic with its stderr.
fn py_run(py: &Path, code: &str, args: &[&Path]) -> String {
    let out = Command::new(py)
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The Service and the ServiceMonitor in `dir` fit together: the monitor selects the
/// Service's labels in its namespace and scrapes a port the Service names.
fn servicemonitor_matches(py: &Path, service: &Path, monitor: &Path) {
    py_run(
        py,
        "import sys, yaml\n\
         svc = yaml.safe_load(open(sys.argv[1])); sm = yaml.safe_load(open(sys.argv[2]))\n\
         assert sm['apiVersion'] == 'monitoring.coreos.com/v1' and sm['kind'] == 'ServiceMonitor'\n\
         sel = sm['spec']['selector']['matchLabels']\n\
         assert sel and all(svc['metadata']['labels'].get(k) == v for k, v in sel.items()), sel\n\
         assert svc['metadata']['namespace'] in sm['spec']['namespaceSelector']['matchNames']\n\
         ports = {p['name'] for p in svc['spec']['ports']}\n\
         assert sm['spec']['endpoints'] and all(e['port'] in ports for e in sm['spec']['endpoints'])\n",
        &[service, monitor],
    );
}

#[test]
fn plain_manifests_validate_against_the_kubernetes_schemas() {
    let py = python_or_skip!();
    validate(&py, &plain_manifests());
    let k = repo().join("deploy/kubernetes");
    servicemonitor_matches(&py, &k.join("service.yaml"), &k.join("servicemonitor.yaml"));
}

fn render(py: &Path, out: &Path, sets: &[&str]) {
    let status = Command::new(py)
        .arg(repo().join("tests/deploy/render_chart.py"))
        .arg(repo().join("deploy/helm/gpubpf"))
        .args(["gpubpf", "gpubpf-system"])
        .arg(out)
        .args(sets)
        .status()
        .expect("run render_chart.py");
    assert!(status.success(), "the chart does not render with {sets:?}");
}

fn rendered(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("rendered dir")
        .map(|e| e.expect("entry").path())
        .collect();
    v.sort();
    v
}

#[test]
fn the_chart_renders_the_plain_manifests_and_validates_with_other_values() {
    let py = python_or_skip!();
    let tmp = tempfile::tempdir().expect("tempdir");
    let defaults = tmp.path().join("defaults");
    render(&py, &defaults, &[]);
    let files = rendered(&defaults);
    assert_eq!(files.len(), CHART_FILES.len(), "{files:?}");
    validate(&py, &files);
    for (template, plain) in CHART_FILES {
        let same = py_run(
            &py,
            "import sys, yaml\n\
             a, b = (list(yaml.safe_load_all(open(p))) for p in sys.argv[1:3])\n\
             print(a == b)\n",
            &[
                &defaults.join(template),
                &repo().join("deploy/kubernetes").join(plain),
            ],
        );
        assert_eq!(
            same.trim(),
            "True",
            "templates/{template} with the default values differs from deploy/kubernetes/{plain}"
        );
    }

    // Other values: no ServiceMonitor, node-wide preload, another host path, an object, no
    // maps.
    let custom = tmp.path().join("custom");
    render(
        &py,
        &custom,
        &[
            "serviceMonitor.enabled=false",
            "shim.nodePreload=true",
            "registry.hostPath=/var/lib/gpubpf",
            "exporter.stats=false",
            "exporter.maps=[]",
            "exporter.port=9500",
            "policies.objects={quota.o: f0VMRgIBAQ==}",
        ],
    );
    let files = rendered(&custom);
    assert!(
        !files.iter().any(|f| f.ends_with("servicemonitor.yaml")),
        "{files:?}"
    );
    validate(&py, &files);
    let ds = std::fs::read_to_string(custom.join("daemonset.yaml")).expect("daemonset");
    for want in [
        "value: \"true\"",
        "path: /var/lib/gpubpf",
        "--listen=0.0.0.0:9500",
        "containerPort: 9500",
    ] {
        assert!(ds.contains(want), "{want} missing:\n{ds}");
    }
    assert!(!ds.contains("--stats") && !ds.contains("--map="), "{ds}");
    let cm = std::fs::read_to_string(custom.join("configmap.yaml")).expect("configmap");
    assert!(cm.contains("quota.o: f0VMRgIBAQ=="), "{cm}");
}

/// The exporter container's `--stats`/`--map=` arguments in the DaemonSet.
fn daemonset_exporter_args() -> Vec<String> {
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml"))
        .expect("daemonset.yaml");
    let args: Vec<String> = ds
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter(|a| *a == "--stats" || a.starts_with("--map="))
        .map(str::to_string)
        .collect();
    assert!(args.iter().any(|a| a.starts_with("--map=")), "{args:?}");
    args
}

/// Sample names a Prometheus scrape of `text` yields: gauges by their family name, counters
/// with `_total` (OpenMetrics), whether or not the family has series yet.
fn served_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let (Some(name), Some(kind)) = (w.next(), w.next()) else {
                continue;
            };
            names.insert(match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            });
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Every `gpubpf_…` metric in the dashboard's queries (`expr`, and the templating's `query`
/// and `definition`).
fn dashboard_names(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if let (true, Some(s)) = (
                    ["expr", "query", "definition"].contains(&k.as_str()),
                    v.as_str(),
                ) {
                    let mut rest = s;
                    while let Some(i) = rest.find("gpubpf_") {
                        let tail = &rest[i..];
                        let end = tail
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .unwrap_or(tail.len());
                        out.insert(tail[..end].to_string());
                        rest = &tail[end..];
                    }
                } else {
                    dashboard_names(v, out);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| dashboard_names(v, out)),
        _ => {}
    }
}

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the exporter");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.contains(" 200 "), "{head}");
    body.to_string()
}

#[test]
fn every_metric_of_the_dashboard_is_served_by_the_exporter() {
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/gpubpf.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut wanted = BTreeSet::new();
    dashboard_names(&dash, &mut wanted);
    assert!(wanted.len() >= 10, "{wanted:?}");

    // A live process under the shim that allocated 100 bytes, so that the quota's maps have
    // entries (a map family without entries has no series) and the process families too.
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    let quota = build_policy(tmp.path(), "policies/quota.bpf.c").expect("clang builds quota");
    ok_json(&run_with_registry(
        &home,
        &["-j", "load", quota.to_str().expect("utf-8")],
    ));
    let (ready, go) = (tmp.path().join("ready"), tmp.path().join("go"));
    let app = Reaped(
        mock.live(&home, &ready, &go, "100")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the app"),
    );
    wait_for_files(&[&ready], "the app never got ready");
    let mut child = Command::new(gpubpf())
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .args(daemonset_exporter_args())
        .env("GPUBPF_HOME", &home)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the exporter");
    let stderr = child.stderr.take().expect("stderr");
    let child = Reaped(child);
    let mut line = String::new();
    BufReader::new(stderr)
        .read_line(&mut line)
        .expect("the exporter's first line");
    let addr = line
        .trim()
        .strip_prefix("gpubpf exporter: serving http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let served = served_names(&scrape(addr));
    drop(child);
    std::fs::write(&go, "").expect("let the app finish");
    drop(app);
    let missing: Vec<&String> = wanted.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the exporter does not serve: {missing:?}\nserved: {served:?}"
    );
}

/// Files cargo builds into `target/release/` for the packages of the workspace: each bin's
/// name and each cdylib's `lib<name>.so`, by package.
fn release_outputs() -> Vec<(String, String)> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let mut v = Vec::new();
    for pkg in meta["packages"].as_array().expect("packages") {
        let pname = pkg["name"].as_str().expect("name").to_string();
        for t in pkg["targets"].as_array().expect("targets") {
            let name = t["name"].as_str().expect("target name").replace('-', "_");
            let kinds: Vec<&str> = t["kind"]
                .as_array()
                .expect("kind")
                .iter()
                .filter_map(|k| k.as_str())
                .collect();
            if kinds.contains(&"bin") {
                v.push((pname.clone(), t["name"].as_str().expect("name").to_string()));
            }
            if kinds.contains(&"cdylib") {
                v.push((pname.clone(), format!("lib{name}.so")));
            }
        }
    }
    v
}

#[test]
fn the_dockerfile_copies_paths_that_exist_and_ships_what_it_builds() {
    let dockerfile = repo().join("deploy/image/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).expect("deploy/image/Dockerfile");
    let ignored: Vec<String> = std::fs::read_to_string(repo().join(".dockerignore"))
        .expect(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let outputs = release_outputs();
    // `RUN cargo build … -p PKG [--bin B]`: the packages built, which must exist.
    let built: Vec<&str> = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-p")
        .map(|w| w[1])
        .collect();
    assert!(!built.is_empty(), "no `cargo build -p` in the Dockerfile");
    for p in &built {
        assert!(
            outputs.iter().any(|(pkg, _)| pkg == p),
            "-p {p}: no such package"
        );
    }
    let mut copied_sources = Vec::new();
    let mut destinations = Vec::new();
    // Whole instructions (backslash continuations joined).
    for inst in text.replace("\\\n", " ").lines().map(str::trim) {
        let Some(rest) = inst.strip_prefix("COPY ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let (from_build, words) = match words.first() {
            Some(w) if w.starts_with("--from=") => (true, &words[1..]),
            _ => (false, &words[..]),
        };
        let (dest, srcs) = words.split_last().expect("COPY SRC… DEST");
        destinations.push(dest.to_string());
        for src in srcs {
            if from_build {
                let rel = src
                    .strip_prefix("/src/")
                    .expect("build stage paths under /src");
                if let Some(file) = rel.strip_prefix("target/release/") {
                    assert!(
                        outputs
                            .iter()
                            .any(|(pkg, out)| out == file && built.contains(&pkg.as_str())),
                        "{src}: not an output of the packages built ({built:?})"
                    );
                } else {
                    assert!(
                        copied_sources
                            .iter()
                            .any(|c: &String| rel.starts_with(c.as_str())),
                        "{src}: not copied into the build stage"
                    );
                    assert!(repo().join(rel).exists(), "{src}: {rel} does not exist");
                }
            } else {
                assert!(repo().join(src).exists(), "COPY {src}: no such path");
                assert!(
                    !ignored.iter().any(|i| src.trim_end_matches('/') == i),
                    "COPY {src}: excluded by .dockerignore"
                );
                copied_sources.push(src.trim_end_matches('/').to_string());
            }
        }
    }
    // The workspace's manifests and every member are in the build context.
    for needed in ["Cargo.toml", "Cargo.lock", "crates", "policies"] {
        assert!(
            copied_sources.iter().any(|c| c == needed),
            "{needed} is not copied into the build stage"
        );
    }
    // What the DaemonSet runs is where the image puts it; its scripts parse.
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml"))
        .expect("daemonset.yaml");
    for cmd in [
        "/usr/local/bin/gpubpf-install",
        "/usr/local/bin/gpubpf-reconcile",
    ] {
        assert!(ds.contains(cmd), "the DaemonSet does not run {cmd}");
        assert!(
            destinations.iter().any(|d| d == cmd),
            "the image does not install {cmd}"
        );
    }
    for script in ["gpubpf-install.sh", "gpubpf-reconcile.sh"] {
        let path = repo().join("deploy/image").join(script);
        let st = Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .expect("sh");
        assert!(st.success(), "{script} does not parse");
    }
}

/// `limit_bytes` of the loaded quota, when it is loaded.
fn quota_limit(home: &Path) -> Option<u64> {
    let out = run_with_registry(home, &["-j", "maps", "dump", "quota.rodata"]);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v[0]["formatted"]["value"]["limit_bytes"].as_u64()
}

fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `path` atomically (as the kubelet swaps a ConfigMap volume's files).
fn put(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[test]
fn the_reconcile_loop_loads_then_replaces_and_keeps_the_policy_when_an_update_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(quota) = build_policy(tmp.path(), "policies/quota.bpf.c") else {
        return;
    };
    let (policies, home, log) = (
        tmp.path().join("policies"),
        tmp.path().join("reg"),
        tmp.path().join("log"),
    );
    std::fs::create_dir(&policies).expect("mkdir");
    std::fs::copy(&quota, policies.join("quota.o")).expect("copy");
    let conf = policies.join("policies.conf");
    put(
        &conf,
        b"# NAME OBJECT ARGS\nquota quota.o --set limit_bytes=150\n",
    );
    let bin_dir = gpubpf().parent().expect("bin dir").to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let logf = std::fs::File::create(&log).expect("log");
    let _loop = Reaped(
        Command::new("sh")
            .arg(repo().join("deploy/image/gpubpf-reconcile.sh"))
            .env("PATH", path)
            .env("GPUBPF_HOME", &home)
            .env("POLICY_DIR", &policies)
            .env("INTERVAL", "1")
            .env("WAIT", "5s")
            .stdout(logf.try_clone().expect("dup"))
            .stderr(logf)
            .spawn()
            .expect("spawn the reconcile loop"),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the first load", 60, || quota_limit(&home) == Some(150));

    // A policy update: the ConfigMap's new arguments, applied with --replace.
    put(&conf, b"quota quota.o --set limit_bytes=1GiB\n");
    // The loop logs a load once `gpubpf load` has returned, which is after the map changed.
    wait_for("the replacement", 60, || {
        quota_limit(&home) == Some(1 << 30) && log_text().matches(" applied ").count() == 2
    });
    let text = log_text();
    let applied: Vec<&str> = text.lines().filter(|l| l.contains(" applied ")).collect();
    assert_eq!(applied.len(), 2, "{text}");
    assert!(applied[0].contains("--name quota"), "{text}");
    assert!(
        applied[1].contains("--replace quota --set limit_bytes=1GiB --wait=5s"),
        "{text}"
    );

    // A broken object: refused once (not retried every interval), the loaded policy stays.
    put(&policies.join("quota.o"), b"not an ELF object");
    wait_for("the refusal", 60, || log_text().contains(" failed; "));
    std::thread::sleep(Duration::from_secs(3));
    let text = log_text();
    assert_eq!(text.matches(" failed; ").count(), 1, "{text}");
    assert_eq!(quota_limit(&home), Some(1 << 30), "{text}");
}

/// The DaemonSet's init container (`deploy/image/gpubpf-install.sh`, with the image's paths
/// pointed at this build): installs the CLI, the shim and the headers under the node's
/// `/opt/gpubpf`, and creates the node's system registry; run again (a restarted pod), it
/// keeps what is loaded.
#[test]
fn the_install_script_installs_and_creates_the_system_registry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (root, state) = (tmp.path().join("opt"), tmp.path().join("run-gpubpf"));
    let lib = common::shim::shim_library();
    let install = || {
        let out = Command::new("sh")
            .arg(repo().join("deploy/image/gpubpf-install.sh"))
            .env("HOST_ROOT", &root)
            .env("HOST_STATE", &state)
            .env("IMAGE_BIN", gpubpf())
            .env("IMAGE_LIB", &lib)
            .env("IMAGE_INCLUDE", repo().join("policies/include"))
            .env("NODE_PRELOAD", "false")
            .output()
            .expect("run gpubpf-install.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = install();
    assert!(said.contains("system registry at"), "{said}");
    for f in ["bin/gpubpf", "lib/libgpubpf.so", "include/gpubpf/gpubpf.h"] {
        assert!(root.join(f).is_file(), "{f} not installed");
    }
    let show = |home: &Path| -> serde_json::Value {
        ok_json(&run_with_registry(home, &["-j", "registry", "show"]))
    };
    let v = show(&state);
    assert_eq!(v["mode"], "system", "{v}");
    // A policy loaded, then the pod restarted: the registry is completed, not replaced.
    let Some(quota) = build_policy(tmp.path(), "policies/quota.bpf.c") else {
        return;
    };
    ok_json(&run_with_registry(
        &state,
        &[
            "-j",
            "load",
            quota.to_str().expect("utf-8"),
            "--set",
            "limit_bytes=1GiB",
        ],
    ));
    install();
    let v = show(&state);
    assert_eq!(
        (v["mode"].as_str(), v["generation"].as_u64()),
        (Some("system"), Some(1)),
        "{v}"
    );
    assert_eq!(quota_limit(&state), Some(1 << 30));
}
