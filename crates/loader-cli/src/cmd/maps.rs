//! `gpubpf maps …`: inspect and edit the shared maps of the registry, live.
//!
//! Keys and values are typed with the map's BTF key/value types when the object declared
//! them (structs as JSON objects, integers as numbers); otherwise they are hex bytes. In
//! JSON (`dump`, `lookup`) each entry is bpftool's: raw `key`/`value` arrays of `"0x01"`
//! bytes plus, with types, `formatted: {key, value}` decoded. On
//! input, `--key`/`--value` take raw bytes as bpftool reads them (`hex 0a 00 00 00`,
//! `hex:0a000000`, `0a 00 00 00`, `0x0a 0x00 0x00 0x00`), or with BTF a
//! JSON value or `field=value` pairs, or an integer for 1/2/4/8-byte untyped values.
//!
//! `update` with field names changes only those fields (a read-modify-write under the
//! map's lock, `Map::update_masked`); hex bytes or a whole value replace the value.
//! `.rodata` maps are refused unless `--force` (bpftool refuses writes to frozen maps).

use std::sync::Arc;

use anyhow::{bail, Context as _};
use gpubpf_runtime::maps::types::{format_value, parse_patch, parse_value};
use gpubpf_runtime::maps::{Map, MapMeta, MapSpec, MapType, BPF_ANY, BPF_EXIST, BPF_NOEXIST};
use gpubpf_runtime::object::BPF_F_RDONLY_PROG;
use gpubpf_runtime::registry::{Access, Mode, Registry, TRACE_RING};
use serde_json::{json, Value};

use crate::output::{print_line, Output};

/// Subcommands of `gpubpf maps`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List every map of the registry.
    List,
    /// Show a map's definition, types, size and users; without a name, every map (as
    /// `maps list`, like bpftool's `map show`).
    Show {
        /// Map name.
        name: Option<String>,
    },
    /// Print every entry (typed with BTF when known); ring buffers: their counters.
    Dump {
        /// Map name.
        name: String,
    },
    /// Print the value stored under a key.
    Lookup {
        /// Map name.
        name: String,
        /// The key (raw bytes as bpftool takes them: `hex 01 00 00 00`, `0x01 0x00 0x00
        /// 0x00`; an integer; or with BTF JSON / `field=value` pairs).
        #[arg(long, num_args = 1.., required = true)]
        key: Vec<String>,
    },
    /// Insert or update an entry.
    Update {
        /// Map name.
        name: String,
        /// The key (as for `lookup`).
        #[arg(long, num_args = 1.., required = true)]
        key: Vec<String>,
        /// The value (raw bytes, an integer, or with BTF JSON / `field=value` pairs).
        #[arg(long, num_args = 1.., required = true)]
        value: Vec<String>,
        /// `any` (create or update), `noexist` (create only), `exist` (update only).
        #[arg(long, default_value = "any", value_parser = ["any", "noexist", "exist"])]
        flags: String,
        /// Write a `.rodata` map anyway (programs see it as read-only constants): the
        /// change is not recorded, and the next `gpubpf load` of the object rewrites it.
        #[arg(long)]
        force: bool,
    },
    /// Delete an entry.
    Delete {
        /// Map name.
        name: String,
        /// The key (as for `lookup`).
        #[arg(long, num_args = 1.., required = true)]
        key: Vec<String>,
    },
    /// Ring buffers: print and consume pending records (text when printable, else hex).
    /// The registry's `trace` ring holds `bpf_trace_printk` lines.
    Consume {
        /// Map name.
        name: String,
        /// Keep polling for new records until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Remove every entry (arrays: zero every value; ring buffers: drop pending records).
    Clear {
        /// Map name.
        name: String,
    },
    /// Remove a map from the registry (processes that use it keep their mapping).
    Rm {
        /// Map name.
        name: String,
        /// Remove even when loaded programs bind the map.
        #[arg(long)]
        force: bool,
    },
    /// Pin a map: it stays when no loaded object uses it (maps declared
    /// `__uint(pinning, LIBBPF_PIN_BY_NAME)` are pinned when loaded).
    Pin {
        /// Map name.
        name: String,
    },
    /// Unpin a map; it is removed when no loaded object uses it.
    Unpin {
        /// Map name.
        name: String,
    },
    /// Show or declare what applications (processes of other users than the owner) may do
    /// with a map of a system registry: `rw`, `ro` (programs that write it are rejected in
    /// those processes) or `none` (objects binding it do not run there).
    Access {
        /// Map name.
        name: String,
        /// The new access; without it, the current one is shown.
        #[arg(value_parser = ["rw", "ro", "none"])]
        access: Option<String>,
    },
    /// Create an empty map (maps are normally created by `gpubpf load`).
    Create {
        /// Map name.
        name: String,
        /// `array`, `hash`, `lru_hash` or `ringbuf`.
        #[arg(long = "type", value_parser = ["array", "hash", "lru_hash", "ringbuf"])]
        map_type: String,
        /// Key size in bytes (arrays: 4; ring buffers: 0).
        #[arg(long, default_value_t = 4)]
        key_size: u32,
        /// Value size in bytes (ring buffers: 0).
        #[arg(long, default_value_t = 8)]
        value_size: u32,
        /// Entries (ring buffers: size in bytes; `256KiB` reads as `--set` values do).
        #[arg(long, value_parser = parse_u32)]
        max_entries: u32,
    },
}

/// A `u32` read as every gpubpf integer is (`4KiB` = 4096, `4KB` = 4000, `0x1000`).
fn parse_u32(s: &str) -> Result<u32, String> {
    let v = gpubpf_runtime::object::parse_integer(s)?;
    u32::try_from(v).map_err(|_| format!("{v} does not fit 32 bits"))
}

fn open_registry() -> anyhow::Result<Registry> {
    Registry::open_default().context("cannot open the registry")
}

/// The registry name `name` means: itself, or the one object's private `OBJECT.name`.
fn resolve(reg: &Registry, name: &str) -> anyhow::Result<String> {
    reg.resolve_map_name(name)
        .with_context(|| format!("cannot open map `{name}`"))
}

fn open_map(reg: &Registry, name: &str) -> anyhow::Result<Arc<Map>> {
    let real = resolve(reg, name)?;
    reg.open_map(&real)
        .with_context(|| format!("cannot open map `{real}`"))
}

/// Text form of a formatted key/value: hex without quotes, JSON otherwise.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn parse_key(map: &Map, key: &str) -> anyhow::Result<Vec<u8>> {
    parse_value(
        map.meta().key_type.as_ref(),
        key,
        map.spec().key_size as usize,
    )
    .with_context(|| format!("bad --key `{key}`"))
}

/// The JSON description used by `list` and `show`.
fn describe(reg: &Registry, map: &Map) -> Value {
    let s = map.spec();
    let meta: &MapMeta = map.meta();
    let mut v = json!({
        "name": map.name(),
        "type": s.map_type.name(),
        "key_size": s.key_size,
        "value_size": s.value_size,
        "max_entries": s.max_entries,
        "flags": s.flags,
        "entries": map.len(),
        "bytes": map.file_size(),
        "pinned": reg.is_pinned(map.name()),
    });
    if let Some(t) = &meta.key_type {
        v["key_type"] = json!(t.c_name());
    }
    if let Some(t) = &meta.value_type {
        v["value_type"] = json!(t.c_name());
    }
    if let Some(g) = &meta.global_section {
        v["global_section"] = json!(g);
    }
    if let Some(st) = map.ringbuf_stats() {
        v["ringbuf"] = json!(st);
    }
    v
}

pub fn run(cmd: Command, out: &Output) -> anyhow::Result<()> {
    // Only `create` makes a registry; reading never does.
    let reg = match &cmd {
        Command::Create { .. } => open_registry()?,
        _ => match super::existing_registry()? {
            Some(reg) => reg,
            None if matches!(cmd, Command::List | Command::Show { name: None }) => {
                return list(None, out)
            }
            None => return Err(super::no_registry()),
        },
    };
    match cmd {
        Command::List => list(Some(&reg), out),
        Command::Show { name: None } => list(Some(&reg), out),
        Command::Show { name: Some(name) } => show(&reg, &name, out),
        Command::Dump { name } => dump(&reg, &name, out),
        Command::Lookup { name, key } => {
            let key = key.join(" ");
            let map = open_map(&reg, &name)?;
            let k = parse_key(&map, &key)?;
            let v = map
                .lookup(&k)
                .with_context(|| format!("lookup in `{name}`"))?;
            let Some(v) = v else {
                bail!(
                    "map `{name}`: key {} not found",
                    text(&format_value(map.meta().key_type.as_ref(), &k))
                );
            };
            if out.json() {
                out.print_json(&entry_json(&map, &k, &v))
            } else {
                let key_v = format_value(map.meta().key_type.as_ref(), &k);
                let val_v = format_value(map.meta().value_type.as_ref(), &v);
                println!("key: {}  value: {}", text(&key_v), text(&val_v));
                Ok(())
            }
        }
        Command::Update {
            name,
            key,
            value,
            flags,
            force,
        } => {
            reg.check_owner()?;
            let (key, value) = (key.join(" "), value.join(" "));
            let map = open_map(&reg, &name)?;
            let read_only = map.spec().flags & BPF_F_RDONLY_PROG != 0;
            if read_only && !force {
                bail!(
                    "map `{name}` is read-only (`.rodata`: programs see its values as \
                     constants, frozen at load like bpftool's); change them with \
                     `gpubpf load OBJECT --name {object} --set VAR=VALUE` (loading the name \
                     again replaces the program), or write the map anyway with --force",
                    object = name.strip_suffix(".rodata").unwrap_or(&name)
                );
            }
            let k = parse_key(&map, &key)?;
            let patch = parse_patch(
                map.meta().value_type.as_ref(),
                &value,
                map.spec().value_size as usize,
            )
            .with_context(|| format!("bad --value `{value}`"))?;
            let f = match flags.as_str() {
                "noexist" => BPF_NOEXIST,
                "exist" => BPF_EXIST,
                _ => BPF_ANY,
            };
            if patch.is_whole() {
                map.update(&k, &patch.bytes, f)
            } else {
                map.update_masked(&k, &patch.bytes, &patch.mask, f)
            }
            .with_context(|| format!("update of `{name}`"))?;
            let what = if patch.is_whole() {
                ""
            } else {
                " (the named fields)"
            };
            let key_text = text(&format_value(map.meta().key_type.as_ref(), &k));
            if read_only {
                eprintln!(
                    "warning: wrote read-only map `{name}` (--force): programs read the new \
                     value from their next run; it is not recorded, and the next `gpubpf load` \
                     of the object rewrites `{name}` from the object and its --set values"
                );
            }
            done(
                out,
                "updated",
                &format!("{} key {key_text} updated{what}", map.name()),
            )
        }
        Command::Delete { name, key } => {
            reg.check_owner()?;
            let key = key.join(" ");
            let map = open_map(&reg, &name)?;
            let k = parse_key(&map, &key)?;
            map.delete(&k)
                .with_context(|| format!("delete from `{name}`"))?;
            let key_text = text(&format_value(map.meta().key_type.as_ref(), &k));
            done(
                out,
                "deleted",
                &format!("{} key {key_text} deleted", map.name()),
            )
        }
        Command::Consume { name, follow } => {
            // Reading a ring consumes its records: the owner's, in a system registry.
            reg.check_owner()?;
            consume(&reg, &name, follow, out)
        }
        Command::Clear { name } => {
            reg.check_owner()?;
            let map = open_map(&reg, &name)?;
            map.clear().with_context(|| format!("clear of `{name}`"))?;
            done(out, "cleared", &format!("{} cleared", map.name()))
        }
        Command::Rm { name, force } => {
            let name = resolve(&reg, &name)?;
            reg.writer()
                .context("cannot lock the registry")?
                .remove_map(&name, force)
                .with_context(|| format!("cannot remove map `{name}`"))?;
            done(out, "removed", &format!("{name} removed"))
        }
        Command::Pin { name } => {
            let name = resolve(&reg, &name)?;
            let new = reg
                .writer()
                .context("cannot lock the registry")?
                .pin_map(&name)
                .with_context(|| format!("cannot pin map `{name}`"))?;
            let line = format!(
                "{name} {}",
                if new { "pinned" } else { "was already pinned" }
            );
            done(out, "pinned", &line)
        }
        Command::Unpin { name } => {
            let name = resolve(&reg, &name)?;
            let removed = reg
                .writer()
                .context("cannot lock the registry")?
                .unpin_map(&name)
                .with_context(|| format!("cannot unpin map `{name}`"))?;
            if out.json() {
                return out.print_json(&json!({ "status": "unpinned", "removed": removed }));
            }
            if removed {
                println!("{name} unpinned and removed (no loaded program uses it)");
            } else {
                println!("{name} unpinned (loaded programs still use it)");
            }
            Ok(())
        }
        Command::Access { name, access } => {
            let name = resolve(&reg, &name)?;
            if let Some(a) = access {
                let a: Access = a.parse().map_err(anyhow::Error::msg)?;
                reg.writer()
                    .context("cannot lock the registry")?
                    .set_map_access(&name, a)
                    .with_context(|| format!("cannot change the access of map `{name}`"))?;
            }
            let now = reg
                .map_access(&name)
                .with_context(|| format!("cannot read the access of map `{name}`"))?;
            let system = matches!(reg.mode(), Mode::System { .. });
            if out.json() {
                return out.print_json(&json!({
                    "map": name,
                    "access": now.name(),
                    "system_registry": system,
                }));
            }
            if system {
                println!("{name}: applications {}", now.name());
            } else {
                println!(
                    "{name}: rw (a user registry is private: its owner's processes use every map)"
                );
            }
            Ok(())
        }
        Command::Create {
            name,
            map_type,
            key_size,
            value_size,
            max_entries,
        } => {
            let map_type = match map_type.as_str() {
                "array" => MapType::Array,
                "hash" => MapType::Hash,
                "lru_hash" => MapType::LruHash,
                _ => MapType::RingBuf,
            };
            let (key_size, value_size) = if map_type == MapType::RingBuf {
                (0, 0)
            } else {
                (key_size, value_size)
            };
            let spec = MapSpec {
                map_type,
                key_size,
                value_size,
                max_entries,
                flags: 0,
            };
            let map = reg
                .writer()
                .context("cannot lock the registry")?
                .create_map(&name, &spec, &MapMeta::default())
                .with_context(|| format!("cannot create map `{name}`"))?;
            if out.json() {
                out.print_json(&describe(&reg, &map))
            } else {
                println!("created {name}: {spec}");
                Ok(())
            }
        }
    }
}

/// The confirmation of a change: `{"status": what}` in JSON, `line` in text (every mutating
/// command says what it did, docs/design-decisions.md).
fn done(out: &Output, what: &str, line: &str) -> anyhow::Result<()> {
    if out.json() {
        out.print_json(&json!({ "status": what }))
    } else {
        print_line(line)
    }
}

/// `maps list`: every map of the registry (none without one). A map that cannot be read is
/// listed with its error, and the command then fails after listing the rest.
fn list(reg: Option<&Registry>, out: &Output) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut broken = 0usize;
    if let Some(reg) = reg {
        for name in reg.map_names().context("cannot list maps")? {
            match reg.open_map(&name) {
                Ok(m) => rows.push(describe(reg, &m)),
                Err(e) => {
                    broken += 1;
                    rows.push(
                        json!({ "name": name, "error": format!("{:#}", anyhow::Error::from(e)) }),
                    )
                }
            }
        }
    }
    let failed = || anyhow::anyhow!("{broken} map(s) could not be read (listed with their error)");
    if out.json() {
        out.print_json(&rows)?;
        return if broken == 0 { Ok(()) } else { Err(failed()) };
    }
    println!(
        "{:<24} {:<9} {:>5} {:>6} {:>9} {:>9}",
        "NAME", "TYPE", "KEY", "VALUE", "MAX", "ENTRIES"
    );
    for r in &rows {
        if let Some(e) = r.get("error") {
            println!("{:<24} error: {}", text(&r["name"]), text(e));
            continue;
        }
        println!(
            "{:<24} {:<9} {:>5} {:>6} {:>9} {:>9}",
            text(&r["name"]),
            text(&r["type"]),
            r["key_size"].as_u64().unwrap_or(0),
            r["value_size"].as_u64().unwrap_or(0),
            r["max_entries"].as_u64().unwrap_or(0),
            r["entries"].as_u64().unwrap_or(0)
        );
    }
    if broken == 0 {
        Ok(())
    } else {
        Err(failed())
    }
}

fn show(reg: &Registry, name: &str, out: &Output) -> anyhow::Result<()> {
    let map = open_map(reg, name)?;
    let name = map.name();
    let mut v = describe(reg, &map);
    let users: Vec<String> = reg
        .snapshot()
        .context("cannot read loaded programs")?
        .objects
        .iter()
        .filter(|o| o.maps.iter().any(|b| b.registry_name == name))
        .map(|o| o.name.clone())
        .collect();
    v["used_by"] = json!(users);
    v["path"] = json!(map.path().display().to_string());
    if out.json() {
        return out.print_json(&v);
    }
    let s = map.spec();
    println!("{}: {}", map.name(), s);
    if let Some(t) = &map.meta().key_type {
        println!("  key type:   {}", t.c_name());
    }
    if let Some(t) = &map.meta().value_type {
        println!("  value type: {}", t.c_name());
    }
    if let Some(g) = &map.meta().global_section {
        println!("  global data: {g}");
    }
    println!("  entries:    {}", map.len());
    println!(
        "  file:       {} ({} bytes)",
        map.path().display(),
        map.file_size()
    );
    if let Some(st) = map.ringbuf_stats() {
        print_ring(&st);
    }
    if !users.is_empty() {
        println!("  used by:    {}", users.join(", "));
    }
    if reg.is_pinned(name) {
        println!("  pinned:     yes (kept when no loaded program uses it)");
    }
    Ok(())
}

fn print_ring(st: &gpubpf_runtime::maps::RingBufStats) {
    println!("  size:         {}", st.size);
    println!("  producer_pos: {}", st.producer_pos);
    println!("  consumer_pos: {}", st.consumer_pos);
    println!("  pending:      {} bytes", st.pending);
    println!("  reserved:     {} records", st.reserved);
    println!("  dropped:      {} records", st.dropped);
}

pub(crate) fn dump(reg: &Registry, name: &str, out: &Output) -> anyhow::Result<()> {
    let map = open_map(reg, name)?;
    if let Some(st) = map.ringbuf_stats() {
        if out.json() {
            return out.print_json(&json!({ "name": name, "type": "ringbuf", "counters": st }));
        }
        println!("{name}: ringbuf");
        print_ring(&st);
        return Ok(());
    }
    let kt = map.meta().key_type.as_ref();
    let vt = map.meta().value_type.as_ref();
    let entries = map.entries().with_context(|| format!("dump of `{name}`"))?;
    if out.json() {
        let rows: Vec<Value> = entries
            .iter()
            .map(|e| entry_json(&map, &e.key, &e.value))
            .collect();
        return out.print_json(&rows);
    }
    for e in &entries {
        println!(
            "key: {}  value: {}",
            text(&format_value(kt, &e.key)),
            text(&format_value(vt, &e.value))
        );
    }
    println!(
        "Found {} element{}",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

/// Bytes as bpftool prints them in JSON: `["0x01", "0x00", …]`.
fn hex_bytes(bytes: &[u8]) -> Value {
    bytes.iter().map(|b| format!("{b:#04x}")).collect()
}

/// One entry in bpftool's JSON form: raw `key` and `value` byte arrays, and with type
/// information (BTF) a `formatted` object holding both decoded (struct fields in
/// declaration order, bools as booleans; bytes without a type as a hex string).
pub(crate) fn entry_json(map: &Map, key: &[u8], value: &[u8]) -> Value {
    let (kt, vt) = (map.meta().key_type.as_ref(), map.meta().value_type.as_ref());
    let mut v = json!({ "key": hex_bytes(key), "value": hex_bytes(value) });
    if kt.is_some() || vt.is_some() {
        v["formatted"] = json!({ "key": format_value(kt, key), "value": format_value(vt, value) });
    }
    v
}

/// A record as text when it is printable UTF-8, else hex.
fn record_text(r: &[u8]) -> String {
    match std::str::from_utf8(r) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t') => {
            s.trim_end_matches('\n').to_string()
        }
        _ => gpubpf_runtime::maps::types::hex(r),
    }
}

fn consume(reg: &Registry, name: &str, follow: bool, out: &Output) -> anyhow::Result<()> {
    // The trace ring exists once a policed process has started; before, it is empty.
    let missing_trace = name == TRACE_RING && !reg.maps_dir().join(TRACE_RING).exists();
    let map = if missing_trace {
        reg.trace_ring().context("cannot open the trace ring")?
    } else {
        open_map(reg, name)?
    };
    if map.ringbuf_stats().is_none() {
        bail!(
            "map `{name}` is a {} map, not a ring buffer",
            map.spec().map_type
        );
    }
    let mut records = Vec::new();
    let mut poll = super::ring_reader::Poll::new();
    loop {
        let mut batch = Vec::new();
        map.ringbuf_consume(|r| batch.push(record_text(r)))
            .with_context(|| format!("consume from `{name}`"))?;
        let n = batch.len();
        if out.json() {
            records.extend(batch);
        } else {
            for r in &batch {
                println!("{r}");
            }
        }
        if !follow {
            break;
        }
        std::thread::sleep(poll.next(n));
    }
    if out.json() {
        out.print_json(&records)?;
    }
    Ok(())
}
