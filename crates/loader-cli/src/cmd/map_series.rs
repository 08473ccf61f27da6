//! Maps as Prometheus series, for `gpubpf exporter --map NAME[:METRIC]`.
//!
//! Each entry is decoded with the map's BTF types (`maps::types::format_value`, as `gpubpf
//! maps dump` prints it). Every numeric field of the value becomes a series named
//! `gpubpf_METRIC_FIELD` (nested structs join their field names with `_`, array elements
//! get an `index` label, booleans read 0/1; a value that is a plain number is
//! `gpubpf_METRIC` itself). The key becomes labels: a number or a string is `key="…"`, a
//! struct gives one label per field. Without BTF, keys and values of 1, 2, 4 or 8 bytes
//! read as little-endian unsigned integers; other untyped values are skipped.

use gpubpf_runtime::maps::types::format_value;
use gpubpf_runtime::maps::Map;
use serde_json::Value;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum SeriesError {
    /// `--map` named no map.
    #[error("`--map` needs a map name (`--map NAME[:METRIC]`)")]
    EmptyName,
    /// The metric part is not a Prometheus metric name.
    #[error(
        "`{metric}` is not a metric name: use letters, digits and `_`, not starting with a digit"
    )]
    BadMetric { metric: String },
}

/// One `--map NAME[:METRIC]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MapChoice {
    /// The map's registry name.
    pub map: String,
    /// The metric name without the `gpubpf_` prefix.
    pub metric: String,
}

impl std::str::FromStr for MapChoice {
    type Err = SeriesError;

    fn from_str(s: &str) -> Result<Self, SeriesError> {
        let (map, metric) = match s.split_once(':') {
            Some((m, metric)) => (m, metric.to_string()),
            None => (s, sanitize(s)),
        };
        if map.is_empty() {
            return Err(SeriesError::EmptyName);
        }
        if !is_metric_name(&metric) {
            return Err(SeriesError::BadMetric { metric });
        }
        Ok(Self {
            map: map.to_string(),
            metric,
        })
    }
}

fn is_metric_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `s` with every character a metric or label name cannot hold replaced by `_`.
pub fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// One sample: metric name (full, with the `gpubpf_` prefix), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Bytes of an untyped integer-sized key or value as a number.
fn untyped(bytes: &[u8]) -> Option<u64> {
    match bytes.len() {
        1 | 2 | 4 | 8 => {
            let mut b = [0u8; 8];
            b[..bytes.len()].copy_from_slice(bytes);
            Some(u64::from_le_bytes(b))
        }
        _ => None,
    }
}

fn decode(ty: Option<&gpubpf_runtime::maps::types::TypeDesc>, bytes: &[u8]) -> Value {
    match (ty, untyped(bytes)) {
        (None, Some(n)) => Value::from(n),
        _ => format_value(ty, bytes),
    }
}

/// The labels of a decoded key.
fn key_labels(key: &Value) -> Vec<(String, String)> {
    match key {
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| (sanitize(k), scalar_text(v)))
            .collect(),
        other => vec![("key".to_string(), scalar_text(other))],
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Appends the numeric leaves of `value` under `name`.
fn flatten(name: &str, labels: &[(String, String)], value: &Value, out: &mut Vec<Sample>) {
    let mut push = |v: f64| {
        out.push(Sample {
            name: name.to_string(),
            labels: labels.to_vec(),
            value: v,
        });
    };
    match value {
        Value::Number(n) => push(n.as_f64().unwrap_or(f64::NAN)),
        Value::Bool(b) => push(if *b { 1.0 } else { 0.0 }),
        Value::Object(fields) => {
            for (field, v) in fields {
                flatten(&format!("{name}_{}", sanitize(field)), labels, v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut l = labels.to_vec();
                l.push(("index".to_string(), i.to_string()));
                flatten(name, &l, v, out);
            }
        }
        // Enum names, hex of untyped bytes, strings: not numbers.
        Value::String(_) | Value::Null => {}
    }
}

/// The samples of every entry of `map` (ring buffers have none).
pub fn samples(map: &Map, metric: &str) -> Result<Vec<Sample>, gpubpf_runtime::maps::MapError> {
    if map.ringbuf_stats().is_some() {
        return Ok(Vec::new());
    }
    let (kt, vt) = (map.meta().key_type.as_ref(), map.meta().value_type.as_ref());
    let name = format!("gpubpf_{metric}");
    let mut out = Vec::new();
    for e in map.entries()? {
        let labels = key_labels(&decode(kt, &e.key));
        flatten(&name, &labels, &decode(vt, &e.value), &mut out);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn choices_parse_and_reject_bad_metric_names() {
        let c: MapChoice = "proc_usage".parse().expect("parse");
        assert_eq!(c.metric, "proc_usage");
        let c: MapChoice = "quota.bss:quota_globals".parse().expect("parse");
        assert_eq!(
            (c.map.as_str(), c.metric.as_str()),
            ("quota.bss", "quota_globals")
        );
        let c: MapChoice = "quota.bss".parse().expect("parse");
        assert_eq!(c.metric, "quota_bss");
        assert!(matches!(
            "m:1bad".parse::<MapChoice>(),
            Err(SeriesError::BadMetric { .. })
        ));
        assert!(matches!(
            "m:a-b".parse::<MapChoice>(),
            Err(SeriesError::BadMetric { .. })
        ));
        assert!(matches!(
            ":x".parse::<MapChoice>(),
            Err(SeriesError::EmptyName)
        ));
    }

    #[test]
    fn struct_values_become_one_series_per_numeric_field_and_keys_labels() {
        let mut out = Vec::new();
        let labels = key_labels(&json!(1234));
        flatten(
            "gpubpf_proc_usage",
            &labels,
            &json!({"bytes": 4096, "denied": 2, "kind": "NAME", "ok": true, "per": [1, 2]}),
            &mut out,
        );
        let key = ("key".to_string(), "1234".to_string());
        let idx = |i: &str| ("index".to_string(), i.to_string());
        let sample = |name: &str, labels: Vec<(String, String)>, value: f64| Sample {
            name: format!("gpubpf_proc_usage_{name}"),
            labels,
            value,
        };
        assert_eq!(
            out,
            vec![
                sample("bytes", vec![key.clone()], 4096.0),
                sample("denied", vec![key.clone()], 2.0),
                sample("ok", vec![key.clone()], 1.0),
                sample("per", vec![key.clone(), idx("0")], 1.0),
                sample("per", vec![key, idx("1")], 2.0),
            ]
        );
        assert_eq!(
            key_labels(&json!({"pid": 7, "dev.id": 1})),
            vec![
                ("pid".to_string(), "7".to_string()),
                ("dev_id".to_string(), "1".to_string())
            ]
        );
    }

    #[test]
    fn untyped_integer_sized_bytes_read_as_numbers() {
        assert_eq!(decode(None, &[1, 1, 0, 0]), json!(257));
        assert_eq!(decode(None, &[1, 2, 3]), json!("01 02 03"));
        assert_eq!(sanitize("9a.b"), "_9a_b");
    }
}
