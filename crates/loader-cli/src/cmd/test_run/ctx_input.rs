//! `--ctx FIELD=VALUE`: the synthetic ctx of a `test-run`, field by field, with the names
//! of the attach catalog (`gpubpf attach-points API` lists them).
//!
//! - FIELD: `hdr.pid`, `args.bytesize`, `out.dptr`, `launch.grid_x` …, or the bare last
//!   part (`bytesize`) when exactly one field of the phase has it.
//! - VALUE: an integer as `--set` takes it (`4096`, `0x1000`, `1GiB`, `-1`), or application
//!   memory for a pointer argument the program reads with `bpf_probe_read_user`: `hex:BYTES`
//!   (`hex:00040000 00000000`) or `buf:TYPE=V,…` little-endian items (`buf:u64=1024,
//!   u64=768,u32=0x20,u32=1`, types `u8 u16 u32 u64 i8 i16 i32 i64`); the field gets the
//!   address of a buffer holding those bytes.
//!
//! Exit programs start from `hdr.result` 0 (`GPUBPF_CTX_F_OUT_VALID` set); `--ctx
//! hdr.result=2` makes it a failed call (flag cleared), as the shim does.

use anyhow::{bail, Context as _};
use gpubpf_runtime::attach::{AttachPoint, Phase, Section};
use gpubpf_runtime::dispatch::CtxBuf;
use gpubpf_runtime::object::parse_int;

/// Memory a `--ctx` value points into; kept alive (and unmoved) while programs run.
#[derive(Debug, Default)]
pub struct Buffers(Vec<Vec<u8>>);

impl Buffers {
    fn add(&mut self, bytes: Vec<u8>) -> u64 {
        let addr = bytes.as_ptr() as u64;
        self.0.push(bytes);
        addr
    }
}

/// The field of `point` that `name` means in `phase`.
pub fn resolve_field(point: &AttachPoint, phase: Phase, name: &str) -> anyhow::Result<String> {
    let names = || {
        point
            .fields()
            .iter()
            .filter(|f| phase == Phase::Exit || f.section != Section::Out)
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(f) = point.field(name) {
        if f.section == Section::Out && phase == Phase::Entry {
            bail!(
                "`{name}` is an out-value of `{}`: it exists on exit only, and this is an \
                 entry program",
                point.name
            );
        }
        return Ok(f.name.clone());
    }
    if !name.contains('.') {
        let suffix = format!(".{name}");
        let hits: Vec<&str> = point
            .fields()
            .iter()
            .filter(|f| phase == Phase::Exit || f.section != Section::Out)
            .filter(|f| f.name.ends_with(&suffix))
            .map(|f| f.name.as_str())
            .collect();
        match hits.as_slice() {
            [one] => return Ok((*one).to_string()),
            [] => {}
            many => bail!("`{name}` is ambiguous: say {}", many.join(" or ")),
        }
    }
    bail!(
        "`{}` has no ctx field `{name}` (fields: {})",
        point.name,
        names()
    )
}

fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    let digits: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '_')
        .collect();
    if digits.is_empty() || digits.len() % 2 != 0 {
        bail!("`hex:` needs an even number of hex digits");
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16)
                .map_err(|_| anyhow::anyhow!("`{}` is not a hex byte", &digits[i..i + 2]))
        })
        .collect()
}

fn parse_items(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ty, v) = item
            .split_once('=')
            .with_context(|| format!("`{item}`: write TYPE=VALUE, e.g. `u64=1024`"))?;
        let (size, signed) = match ty.trim() {
            "u8" => (1, false),
            "u16" => (2, false),
            "u32" => (4, false),
            "u64" => (8, false),
            "i8" | "s8" => (1, true),
            "i16" | "s16" => (2, true),
            "i32" | "s32" => (4, true),
            "i64" | "s64" => (8, true),
            other => bail!("`{other}`: item types are u8 u16 u32 u64 i8 i16 i32 i64"),
        };
        let n = parse_int(v, size, signed).map_err(|e| anyhow::anyhow!("`{item}`: {e}"))?;
        out.extend_from_slice(&n.to_le_bytes()[..size as usize]);
    }
    if out.is_empty() {
        bail!("`buf:` needs at least one TYPE=VALUE item");
    }
    Ok(out)
}

/// The ctx of `point` in `phase` with every `FIELD=VALUE` of `assignments` applied in order.
pub fn build(
    point: &'static AttachPoint,
    phase: Phase,
    assignments: &[String],
    buffers: &mut Buffers,
) -> anyhow::Result<CtxBuf> {
    let mut ctx = CtxBuf::new(point, phase);
    if phase == Phase::Exit {
        ctx.set_result(0);
    }
    for a in assignments {
        let (name, value) = a.split_once('=').with_context(|| {
            format!("--ctx `{a}`: write FIELD=VALUE, e.g. `args.bytesize=1GiB`")
        })?;
        let (name, value) = (name.trim(), value.trim());
        let field = resolve_field(point, phase, name).with_context(|| format!("--ctx `{a}`"))?;
        let info = point
            .field(&field)
            .with_context(|| format!("--ctx `{a}`: no field `{field}`"))?;
        let v = if let Some(hex) = value.strip_prefix("hex:") {
            pointer_field(info.size, &field, a)?;
            buffers.add(parse_hex(hex).with_context(|| format!("--ctx `{a}`"))?)
        } else if let Some(items) = value.strip_prefix("buf:") {
            pointer_field(info.size, &field, a)?;
            buffers.add(parse_items(items).with_context(|| format!("--ctx `{a}`"))?)
        } else {
            let signed = info.c_type.starts_with("__s");
            let n = parse_int(value, info.size.min(8), signed)
                .map_err(|e| anyhow::anyhow!("--ctx `{a}`: {e}"))?;
            n as u64
        };
        if field == "hdr.result" && phase == Phase::Exit {
            ctx.set_result(v as u32);
        } else {
            ctx.set(&field, v).with_context(|| format!("--ctx `{a}`"))?;
        }
    }
    Ok(ctx)
}

fn pointer_field(size: u32, field: &str, a: &str) -> anyhow::Result<()> {
    if size != 8 {
        bail!("--ctx `{a}`: `{field}` is a {size}-byte header field, not a pointer slot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubpf_runtime::attach;

    #[test]
    fn fields_resolve_by_full_or_unique_short_name() {
        let p = attach::resolve("cuMemAlloc").unwrap();
        assert_eq!(
            resolve_field(p, Phase::Entry, "bytesize").unwrap(),
            "args.bytesize"
        );
        assert_eq!(
            resolve_field(p, Phase::Entry, "dptr").unwrap(),
            "args.dptr",
            "out.dptr does not exist on entry"
        );
        let e = resolve_field(p, Phase::Exit, "dptr")
            .unwrap_err()
            .to_string();
        assert!(e.contains("args.dptr or out.dptr"), "{e}");
        let e = resolve_field(p, Phase::Entry, "out.dptr")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exit only"), "{e}");
        let e = resolve_field(p, Phase::Entry, "size")
            .unwrap_err()
            .to_string();
        assert!(e.contains("args.bytesize"), "{e}");
    }

    #[test]
    fn values_and_buffers() {
        let p = attach::resolve("cuArrayCreate").unwrap();
        let mut bufs = Buffers::default();
        let ctx = build(
            p,
            Phase::Exit,
            &[
                "hdr.device=-1".into(),
                "args.pAllocateArray=buf:u64=1024,u32=0x20".into(),
                "out.pHandle=0x10".into(),
                "hdr.result=2".into(),
            ],
            &mut bufs,
        )
        .unwrap();
        assert_eq!(ctx.get("hdr.device").unwrap(), 0xffff_ffff);
        assert_eq!(ctx.get("out.pHandle").unwrap(), 0x10);
        assert_eq!(ctx.result(), 2);
        let addr = ctx.get("args.pAllocateArray").unwrap();
        assert_eq!(addr, bufs.0[0].as_ptr() as u64);
        assert_eq!(bufs.0[0], [0, 4, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0]);
        assert!(build(p, Phase::Entry, &["hdr.pid=hex:00".into()], &mut bufs).is_err());
        assert!(build(p, Phase::Entry, &["hdr.pid=1GiB".into()], &mut bufs).is_ok());
        assert!(build(p, Phase::Entry, &["hdr.pid=8GiB".into()], &mut bufs).is_err());
        assert_eq!(parse_hex("0a 0B").unwrap(), [10, 11]);
        assert!(parse_hex("abc").is_err());
    }
}
