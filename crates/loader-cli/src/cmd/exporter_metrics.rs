//! The metric families `gpubpf exporter` serves, built afresh at each scrape from the
//! registry (`ps::snapshot`, the stats files of the live processes) and the chosen maps,
//! encoded by `prometheus-client` in the OpenMetrics text format (`# HELP`/`# TYPE`).
//!
//! Per-process counters carry `pid` and `comm` labels; they are counters because a
//! process' stats file only grows, and a new process is a new series (Prometheus'
//! `rate()` and `sum by (attach_point)` aggregate across processes).

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use gpubpf_runtime::registry::Registry;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry as Metrics;

use super::map_series::{samples, MapChoice, Sample};
use super::ps::{snapshot, Process};

type Labels = Vec<(String, String)>;
type CounterFamily = Family<Labels, Counter>;
type FloatCounterFamily = Family<Labels, Counter<f64, AtomicU64>>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;

/// A label value as the text format needs it: `\`, `"` and newlines escaped
/// (prometheus-client writes label values as given).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), escape(v)))
        .collect()
}

/// The short command name of `pid` (`/proc/PID/comm`).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The per-process families.
#[derive(Debug, Default)]
struct ProcessFamilies {
    info: GaugeFamily,
    calls: CounterFamily,
    denied: CounterFamily,
    runs: CounterFamily,
    run_time: FloatCounterFamily,
    faults: CounterFamily,
    failed: GaugeFamily,
    up_to_date: GaugeFamily,
}

impl ProcessFamilies {
    fn add(&self, p: &Process) {
        let pid = p.pid.to_string();
        let comm = comm(p.pid);
        self.info
            .get_or_create(&labels(&[
                ("pid", &pid),
                ("comm", &comm),
                ("user", &p.user),
            ]))
            .set(1.0);
        self.up_to_date
            .get_or_create(&labels(&[("pid", &pid), ("comm", &comm)]))
            .set(if p.up_to_date { 1.0 } else { 0.0 });
        for pt in &p.attach_points {
            let l = labels(&[
                ("pid", &pid),
                ("comm", &comm),
                ("attach_point", &pt.attach_point),
            ]);
            self.calls.get_or_create(&l).inc_by(pt.calls);
            self.denied.get_or_create(&l).inc_by(pt.denied);
        }
        for q in &p.programs {
            let l = labels(&[
                ("pid", &pid),
                ("comm", &comm),
                ("object", &q.object),
                ("program", &q.name),
                ("attach_point", &q.attach_point),
                ("phase", q.phase),
            ]);
            self.runs.get_or_create(&l).inc_by(q.run_cnt);
            self.run_time
                .get_or_create(&l)
                .inc_by(q.run_time_ns as f64 / 1e9);
            self.faults.get_or_create(&l).inc_by(q.faults);
        }
        for f in &p.failed_objects {
            self.failed
                .get_or_create(&labels(&[
                    ("pid", &pid),
                    ("comm", &comm),
                    ("object", &f.object),
                ]))
                .set(1.0);
        }
    }

    fn register(self, m: &mut Metrics) {
        m.register(
            "gpubpf_process_info",
            "A live process running the shim (value 1), with its user",
            self.info,
        );
        m.register(
            "gpubpf_process_up_to_date",
            "1 when the process has applied the registry's current generation",
            self.up_to_date,
        );
        m.register(
            "gpubpf_calls",
            "Calls of an attach point with programs, per process",
            self.calls,
        );
        m.register(
            "gpubpf_denied",
            "Calls of an attach point refused by a policy, per process",
            self.denied,
        );
        m.register(
            "gpubpf_prog_run_cnt",
            "Program runs while statistics were collected (`gpubpf ps --stats`, `exporter \
             --stats`, `top`)",
            self.runs,
        );
        m.register(
            "gpubpf_prog_run_time_seconds",
            "Time spent running the program while statistics were collected",
            self.run_time,
        );
        m.register(
            "gpubpf_prog_faults",
            "Program runs that faulted (the call went on as if the program allowed it)",
            self.faults,
        );
        m.register(
            "gpubpf_failed_object",
            "An object the process could not run (1), failing open or closed",
            self.failed,
        );
    }
}

/// One exposition of the node: processes, their counts, and the chosen maps.
pub fn render(reg: Option<&Registry>, maps: &[MapChoice]) -> String {
    let mut m = Metrics::default();
    let procs = reg.map_or_else(Vec::new, |r| snapshot(r, r.generation()));
    let live: Gauge<f64, AtomicU64> = Gauge::default();
    live.set(procs.len() as f64);
    m.register("gpubpf_processes", "Live processes running the shim", live);
    let families = ProcessFamilies::default();
    for p in &procs {
        families.add(p);
    }
    families.register(&mut m);
    let readable = GaugeFamily::default();
    register_maps(reg, maps, &mut m, &readable);
    m.register(
        "gpubpf_map_up",
        "1 when a map chosen with `--map` was read at this scrape, 0 when absent or unreadable",
        readable,
    );
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &m) {
        tracing::warn!("cannot encode the metrics: {e}");
        out.clear();
        let _ = writeln!(out, "# EOF");
    }
    out
}

fn register_maps(
    reg: Option<&Registry>,
    maps: &[MapChoice],
    m: &mut Metrics,
    readable: &GaugeFamily,
) {
    // Families by metric name, in the order met; a name met twice (two maps with one
    // metric) keeps the first map's series.
    let mut families: Vec<(String, String, GaugeFamily)> = Vec::new();
    for choice in maps {
        let got = match reg {
            None => Err("no registry yet".to_string()),
            Some(reg) => read_map(reg, choice),
        };
        let up = readable.get_or_create(&labels(&[("map", &choice.map)]));
        let list: Vec<Sample> = match got {
            Ok(l) => {
                up.set(1.0);
                l
            }
            Err(e) => {
                tracing::debug!("map `{}`: {e}", choice.map);
                up.set(0.0);
                continue;
            }
        };
        drop(up);
        let mut owned_here: Vec<String> = Vec::new();
        for s in list {
            let pos = match families.iter().position(|(n, _, _)| *n == s.name) {
                Some(i) if owned_here.contains(&s.name) => i,
                Some(_) => continue,
                None => {
                    families.push((
                        s.name.clone(),
                        format!(
                            "Map `{}`: {}",
                            choice.map,
                            field_of(&s.name, &choice.metric)
                        ),
                        GaugeFamily::default(),
                    ));
                    owned_here.push(s.name.clone());
                    families.len() - 1
                }
            };
            let l: Labels = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), escape(v)))
                .collect();
            families[pos].2.get_or_create(&l).set(s.value);
        }
    }
    for (name, help, family) in families {
        m.register(name, help, family);
    }
}

fn read_map(reg: &Registry, choice: &MapChoice) -> Result<Vec<Sample>, String> {
    let real = reg
        .resolve_map_name(&choice.map)
        .map_err(|e| e.to_string())?;
    let map = reg.open_map(&real).map_err(|e| e.to_string())?;
    samples(&map, &choice.metric).map_err(|e| e.to_string())
}

fn field_of(name: &str, metric: &str) -> String {
    match name
        .strip_prefix("gpubpf_")
        .and_then(|n| n.strip_prefix(metric))
        .and_then(|f| f.strip_prefix('_'))
    {
        Some(field) => format!("value field `{field}` per key"),
        None => "value per key".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn without_a_registry_the_exposition_says_no_process_with_help_and_type() {
        let text = render(None, &[]);
        assert!(
            text.contains("# HELP gpubpf_processes Live processes"),
            "{text}"
        );
        assert!(text.contains("# TYPE gpubpf_processes gauge"), "{text}");
        assert!(text.contains("gpubpf_processes 0"), "{text}");
        assert!(text.contains("# TYPE gpubpf_calls counter"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
