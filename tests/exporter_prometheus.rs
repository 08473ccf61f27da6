//! `gpubpf exporter` scraped by a real Prometheus server (Debian's `prometheus`, installed
//! by scripts/ensure-packages.sh when missing), on loopback: the live processes of the
//! mock CUDA stack under the shim, their calls and denials per attach point, the quota's
//! run counts, and the quota's `proc_usage` map as `gpubpf_proc_usage_bytes{key=PID}` are
//! queryable through Prometheus' HTTP API with the exact values, with their metadata.
//!
//! Needs `cc`, clang and `prometheus`; prints `skipped: …` without them.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::cli::{gpubpf, ok_json, run_with_registry as cli};
use common::process::{have_package, wait_for_files, Reaped};
use common::shim::{session, Session};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` over HTTP/1.0; the body when the status is 200.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

/// The instant vector of PromQL `q`: (labels, value) pairs.
fn query(prom: &str, q: &str) -> Vec<(Value, f64)> {
    let Some(body) = http_get(prom, &format!("/api/v1/query?query={}", percent_encode(q))) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|s| {
                    let val = s["value"][1]
                        .as_str()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(f64::NAN);
                    (s["metric"].clone(), val)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `q` until `ok` holds for its result (60 s at most).
fn until(prom: &str, q: &str, ok: impl Fn(&[(Value, f64)]) -> bool) -> Vec<(Value, f64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = query(prom, q);
        if ok(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "`{q}` never held; last: {r:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn start_exporter(home: &Path) -> (Reaped, String) {
    let mut child = Command::new(gpubpf())
        .args(["exporter", "--listen", "127.0.0.1:0", "--stats"])
        .args(["--map", "proc_usage", "--map", "user_usage:user_mem"])
        .env("GPUBPF_HOME", home)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the exporter");
    let mut line = String::new();
    BufReader::new(child.stderr.take().expect("stderr"))
        .read_line(&mut line)
        .expect("read the exporter's first line");
    let addr = line
        .trim()
        .strip_prefix("gpubpf exporter: serving http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (Reaped(child), addr)
}

fn start_prometheus(dir: &Path, target: &str) -> (Reaped, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpubpf\n    static_configs:\n      \
             - targets: ['{target}']\n"
        ),
    )
    .expect("write the scrape config");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn prometheus");
    (Reaped(child), addr)
}

fn with_pid(r: &[(Value, f64)], key: &str, pid: u32) -> Option<f64> {
    r.iter()
        .find(|(m, _)| m[key].as_str() == Some(pid.to_string().as_str()))
        .map(|(_, v)| *v)
}

#[test]
fn prometheus_scrapes_processes_counts_run_statistics_and_map_series() {
    let Some(Session { mock, tmp, home }) = session() else {
        return;
    };
    if !have_package("prometheus") {
        eprintln!("skipped: prometheus is not installed and could not be installed");
        return;
    }
    let quota = common::cli::build_policy(tmp.path(), "policies/quota.bpf.c").expect("built");
    let q = quota.to_str().expect("utf-8");
    ok_json(&cli(
        &home,
        &[
            "-j",
            "load",
            q,
            "--set",
            "limit_bytes=150",
            "--set",
            "log_denials=0",
        ],
    ));
    let (_exporter, exporter_addr) = start_exporter(&home);
    // The exporter answers, so it has switched run statistics on (before the apps start).
    let own = http_get(&exporter_addr, "/metrics").expect("the exporter answers");
    assert!(own.contains("# TYPE gpubpf_calls counter"), "{own}");
    let (_prom, prom) = start_prometheus(tmp.path(), &exporter_addr);

    // Two live processes: one allocation of 100 bytes allowed, one of 200 refused.
    let live = |name: &str, size: &str| {
        let (ready, go) = (
            tmp.path().join(format!("{name}.ready")),
            tmp.path().join("go"),
        );
        let child = mock
            .live(&home, &ready, &go, size)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the app");
        (Reaped(child), ready)
    };
    let (small, small_ready) = live("small", "100");
    let (big, big_ready) = live("big", "200");
    let (a, b) = (small.0.id(), big.0.id());
    wait_for_files(&[&small_ready, &big_ready], "the apps never got ready");

    until(&prom, "up{job=\"gpubpf\"}", |r| {
        r.first().is_some_and(|x| x.1 == 1.0)
    });
    until(&prom, "gpubpf_processes", |r| {
        r.first().is_some_and(|x| x.1 >= 2.0)
    });
    let calls = until(
        &prom,
        "gpubpf_calls_total{attach_point=\"cuMemAlloc\"}",
        |r| with_pid(r, "pid", a) == Some(1.0) && with_pid(r, "pid", b) == Some(1.0),
    );
    let comm = calls
        .iter()
        .find(|(m, _)| m["pid"].as_str() == Some(a.to_string().as_str()))
        .map(|(m, _)| m["comm"].clone());
    assert_eq!(comm, Some("app_link".into()), "{calls:?}");
    until(
        &prom,
        "gpubpf_denied_total{attach_point=\"cuMemAlloc\"}",
        |r| with_pid(r, "pid", a) == Some(0.0) && with_pid(r, "pid", b) == Some(1.0),
    );
    // The map: bytes held and denials per pid key; the per-user map under its own metric.
    until(&prom, "gpubpf_proc_usage_bytes", |r| {
        with_pid(r, "key", a) == Some(100.0) && with_pid(r, "key", b) == Some(0.0)
    });
    until(&prom, "gpubpf_proc_usage_denied", |r| {
        with_pid(r, "key", b) == Some(1.0)
    });
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    until(&prom, "gpubpf_user_mem_bytes", |r| {
        with_pid(r, "key", uid) == Some(100.0)
    });
    until(&prom, "gpubpf_map_up{map=\"proc_usage\"}", |r| {
        r.first().is_some_and(|x| x.1 == 1.0)
    });
    // Run statistics were on (`--stats`) when the quota's entry program ran.
    until(
        &prom,
        "sum by (pid) (gpubpf_prog_run_cnt_total{object=\"quota\",attach_point=\"cuMemAlloc\",phase=\"entry\"})",
        |r| with_pid(r, "pid", a) == Some(1.0) && with_pid(r, "pid", b) == Some(1.0),
    );
    until(&prom, "sum(gpubpf_prog_run_time_seconds_total)", |r| {
        r.first().is_some_and(|x| x.1 > 0.0)
    });
    // HELP and TYPE reached Prometheus.
    let meta = http_get(&prom, "/api/v1/metadata?metric=gpubpf_calls").unwrap_or_default();
    let meta: Value = serde_json::from_str(&meta).unwrap_or(Value::Null);
    assert_eq!(meta["data"]["gpubpf_calls"][0]["type"], "counter", "{meta}");
    assert!(
        meta["data"]["gpubpf_calls"][0]["help"]
            .as_str()
            .is_some_and(|h| h.contains("attach point")),
        "{meta}"
    );

    // The processes exit: the exporter no longer lists them.
    std::fs::write(tmp.path().join("go"), b"").expect("create go");
    drop((small, big));
    until(&prom, "gpubpf_processes", |r| {
        r.first().is_some_and(|x| x.1 == 0.0)
    });
}
