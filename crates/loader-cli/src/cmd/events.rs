//! `gpubpf events MAP [--type T] [-f]`: the records a policy writes to one of its ring
//! buffers (`bpf_ringbuf_output`), decoded with the record's BTF type — e.g. `trace.o`'s
//! `events`, one record per traced call.
//!
//! A ring buffer has no value type of its own (Linux gives it none either): the record type
//! is the struct named `--type` (default `event`) in the BTF of a loaded object that uses
//! the map. Each record prints as one JSON object (JSON lines; with `-j` and without `-f`,
//! one JSON array); an `api_id` field gets its API's name beside it (`api`). Records are
//! consumed: each is printed once, by whichever reader takes it. A record shorter or
//! longer than the type is printed as hex (`raw`).

use anyhow::Context as _;
use gpubpf_runtime::attach;
use gpubpf_runtime::maps::types::{format_value, hex};
use gpubpf_runtime::maps::TypeDesc;
use gpubpf_runtime::object::btf::BtfType;
use gpubpf_runtime::object::Object;
use gpubpf_runtime::program::type_desc;
use gpubpf_runtime::registry::{Registry, RegistryError};
use serde_json::{json, Value};

use super::ring_reader::Ring;
use crate::output::Output;

/// Arguments of `gpubpf events`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Ring-buffer map to read (its registry name, as `gpubpf maps list` shows it).
    pub map: String,
    /// BTF struct of one record, in an object that uses the map.
    #[arg(long = "type", value_name = "STRUCT", default_value = "event")]
    pub record_type: String,
    /// Keep printing new records until interrupted (Ctrl-C).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
}

/// `gpubpf events`.
pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    let reg = super::existing_registry()?.ok_or_else(super::no_registry)?;
    // Reading a ring consumes its records: the owner's, in a system registry.
    reg.check_owner()?;
    let map = match reg.open_map(&args.map) {
        Ok(m) => m,
        Err(RegistryError::NoSuchMap { .. }) => anyhow::bail!(
            "no map named `{}` (`gpubpf maps list` shows the maps)",
            args.map
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot open map `{}`", args.map)),
    };
    anyhow::ensure!(
        map.ringbuf_stats().is_some(),
        "map `{}` is a {} map, not a ring buffer (`gpubpf maps dump {}` shows its entries)",
        args.map,
        map.spec().map_type,
        args.map
    );
    let ty = record_type(&reg, &args.map, &args.record_type)?;
    let ring: Ring<'_, Value> = Ring {
        name: &args.map,
        record: "event",
        text: Value::to_string,
        json: Value::clone,
    };
    ring.read(&map, &|r| decode(&ty, r), args.follow, out)
}

/// The struct `name` of the BTF of a loaded object that uses map `map`.
fn record_type(reg: &Registry, map: &str, name: &str) -> anyhow::Result<TypeDesc> {
    let snap = reg.snapshot().context("cannot read the registry")?;
    let users: Vec<&str> = snap
        .objects
        .iter()
        .filter(|o| o.maps.iter().any(|m| m.registry_name == map))
        .map(|o| o.name.as_str())
        .collect();
    anyhow::ensure!(
        !users.is_empty(),
        "no loaded object uses map `{map}`, so the type of its records is unknown"
    );
    let mut structs = Vec::new();
    for user in &users {
        let bytes = reg
            .object_bytes(user)
            .with_context(|| format!("cannot read object `{user}`"))?;
        let obj = Object::parse(&bytes).with_context(|| format!("cannot parse object `{user}`"))?;
        let Some(btf) = obj.btf.as_ref() else {
            continue;
        };
        for (id, t) in btf.types() {
            if let BtfType::Struct { name: n, .. } = t {
                if n == name {
                    return type_desc(btf, id, 0).with_context(|| {
                        format!("struct `{name}` of object `{user}` cannot be described")
                    });
                }
                if !n.is_empty() {
                    structs.push(n.clone());
                }
            }
        }
    }
    structs.sort();
    structs.dedup();
    anyhow::bail!(
        "no struct `{name}` in the BTF of {} (structs there: {}); name the record type with \
         --type (clang leaves out of BTF a struct only used inside functions: declare \
         `const struct {name} *{name}_type __attribute__((unused));` in the policy)",
        users.join(", "),
        if structs.is_empty() {
            "none".to_string()
        } else {
            structs.join(", ")
        }
    )
}

/// One record as JSON: the typed fields (and `api` beside an `api_id`), or `raw` hex.
fn decode(ty: &TypeDesc, record: &[u8]) -> Value {
    if ty.size() as usize != record.len() {
        return json!({ "raw": hex(record), "size": record.len() });
    }
    let mut v = format_value(Some(ty), record);
    if let Some(obj) = v.as_object_mut() {
        let api = obj
            .get("api_id")
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .and_then(attach::by_id)
            .map(|a| a.name.to_string());
        if let Some(api) = api {
            obj.insert("api".into(), Value::String(api));
        }
    }
    v
}
