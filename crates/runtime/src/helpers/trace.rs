//! `bpf_trace_printk` and the trace sink.
//!
//! Lines go to the configured [`TraceSink`]: standard error (the default), a ring-buffer
//! map (the registry's trace ring, read by `gpubpf`), both, or nowhere. Each line reads
//! `comm-tid [pid] seconds: message`, like the kernel's `trace_pipe`.
//!
//! The shim calls [`send_to_registry`] when it starts in a process: from then on the lines
//! go to the registry's trace ring (`gpubpf trace` reads it), and to standard error as well
//! only when [`STDERR_ENV`] asks for it.

use std::io::Write;
use std::sync::{Arc, RwLock};

use crate::maps::Map;
use crate::registry::{Registry, RegistryError};

use super::neg_errno;

/// Where trace lines go.
#[derive(Clone, Debug, Default)]
pub enum TraceSink {
    /// Standard error.
    #[default]
    Stderr,
    /// A ring-buffer map (one record per line).
    Ring(Arc<Map>),
    /// Both.
    Both(Arc<Map>),
    /// Discard.
    Off,
}

static SINK: RwLock<Option<TraceSink>> = RwLock::new(None);

/// Sets the process-wide trace sink.
pub fn set_sink(sink: TraceSink) {
    if let Ok(mut s) = SINK.write() {
        *s = Some(sink);
    }
}

/// Environment variable: set to anything but `0` (`GPUBPF_TRACE_STDERR=1`), a policed
/// process writes its `bpf_printk` lines to its standard error as well as to the trace ring.
pub const STDERR_ENV: &str = "GPUBPF_TRACE_STDERR";

/// Sends this process's trace lines to `reg`'s trace ring ([`Registry::trace_ring`], created
/// when missing), and to standard error too when [`STDERR_ENV`] is set. On an error the sink
/// is left as it was (standard error unless set otherwise).
pub fn send_to_registry(reg: &Registry) -> Result<(), RegistryError> {
    let ring = reg.trace_ring()?;
    let also_stderr = std::env::var_os(STDERR_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    set_sink(if also_stderr {
        TraceSink::Both(ring)
    } else {
        TraceSink::Ring(ring)
    });
    Ok(())
}

/// Largest string a `%s` argument prints.
const MAX_STR: usize = 128;
/// Largest formatted message.
const MAX_LINE: usize = 512;

/// Formats a `bpf_trace_printk` format with up to three arguments. `%s` arguments are read
/// with `read_str` (application memory, fault-safe). Returns `None` for an unsupported
/// conversion or more than three arguments, as Linux rejects those with `-EINVAL`.
pub fn format(
    fmt: &[u8],
    args: [u64; 3],
    read_str: impl Fn(u64) -> Option<Vec<u8>>,
) -> Option<String> {
    let mut out = String::new();
    let mut ai = 0usize;
    let mut i = 0usize;
    let next_arg = |ai: &mut usize| -> Option<u64> {
        let v = *args.get(*ai)?;
        *ai += 1;
        Some(v)
    };
    while i < fmt.len() {
        let c = fmt[i];
        if c == 0 {
            break;
        }
        if c != b'%' {
            out.push(c as char);
            i += 1;
            continue;
        }
        i += 1;
        // Flags and width.
        let mut zero = false;
        let mut left = false;
        while let Some(&f) = fmt.get(i) {
            match f {
                b'0' => zero = true,
                b'-' => left = true,
                b'+' | b' ' | b'#' => {}
                _ => break,
            }
            i += 1;
        }
        let mut width = 0usize;
        while let Some(&d) = fmt.get(i).filter(|d| d.is_ascii_digit()) {
            width = width
                .saturating_mul(10)
                .saturating_add(usize::from(d - b'0'))
                .min(64);
            i += 1;
        }
        // Length modifiers.
        let mut longs = 0;
        while let Some(&l) = fmt.get(i) {
            match l {
                b'l' => longs += 1,
                b'h' => longs -= 1,
                _ => break,
            }
            i += 1;
        }
        let conv = *fmt.get(i)?;
        i += 1;
        let bits = if longs >= 1 { 64 } else { 32 };
        let trunc = |v: u64| if bits == 32 { v & 0xffff_ffff } else { v };
        let body = match conv {
            b'%' => "%".to_owned(),
            b'd' | b'i' => {
                let v = trunc(next_arg(&mut ai)?);
                let s = if bits == 32 {
                    i64::from(v as u32 as i32)
                } else {
                    v as i64
                };
                s.to_string()
            }
            b'u' => trunc(next_arg(&mut ai)?).to_string(),
            b'x' => format!("{:x}", trunc(next_arg(&mut ai)?)),
            b'X' => format!("{:X}", trunc(next_arg(&mut ai)?)),
            b'p' => format!("{:#x}", next_arg(&mut ai)?),
            b'c' => char::from(next_arg(&mut ai)? as u8).to_string(),
            b's' => {
                let p = next_arg(&mut ai)?;
                match read_str(p) {
                    Some(b) => String::from_utf8_lossy(&b).into_owned(),
                    None => "(fault)".to_owned(),
                }
            }
            _ => return None,
        };
        let pad = width.saturating_sub(body.chars().count());
        if left {
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            let fill = if zero && conv != b's' { '0' } else { ' ' };
            out.extend(std::iter::repeat_n(fill, pad));
            out.push_str(&body);
        }
        if out.len() > MAX_LINE {
            out.truncate(MAX_LINE);
            break;
        }
    }
    Some(out)
}

fn emit(line: &str) {
    let sink = SINK.read().ok().and_then(|s| s.clone()).unwrap_or_default();
    let to_stderr = |l: &str| {
        let _ = std::io::stderr().lock().write_all(l.as_bytes());
    };
    match sink {
        TraceSink::Stderr => to_stderr(line),
        TraceSink::Ring(m) => {
            let _ = m.ringbuf_output(line.as_bytes());
        }
        TraceSink::Both(m) => {
            let _ = m.ringbuf_output(line.as_bytes());
            to_stderr(line);
        }
        TraceSink::Off => {}
    }
}

/// `long bpf_trace_printk(const char *fmt, u32 fmt_size, ...)`: the number of bytes of the
/// message, or `-EINVAL` for a format it cannot print.
pub extern "C" fn trace_printk(fmt: u64, fmt_size: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    if fmt == 0 || fmt_size == 0 {
        return neg_errno(libc::EINVAL);
    }
    // SAFETY: the verifier proved `fmt` readable for `fmt_size` bytes.
    let f = unsafe { std::slice::from_raw_parts(fmt as *const u8, fmt_size as usize) };
    let read_str = |p: u64| {
        let mut b = vec![0u8; MAX_STR];
        let n = super::read_user_str(&mut b, p).ok()?;
        b.truncate(n.saturating_sub(1));
        Some(b)
    };
    let Some(msg) = format(f, [a1, a2, a3], read_str) else {
        return neg_errno(libc::EINVAL);
    };
    let mut comm = [0u8; 16];
    super::misc::get_current_comm(comm.as_mut_ptr() as u64, 16, 0, 0, 0);
    let comm_len = comm.iter().position(|b| *b == 0).unwrap_or(16);
    let pt = super::misc::get_current_pid_tgid(0, 0, 0, 0, 0);
    let ns = super::misc::ktime_get_ns(0, 0, 0, 0, 0);
    let mut line = format!(
        "{}-{} [{}] {}.{:06}: {}",
        String::from_utf8_lossy(&comm[..comm_len]),
        pt as u32,
        pt >> 32,
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1000,
        msg
    );
    if !line.ends_with('\n') {
        line.push('\n');
    }
    emit(&line);
    msg.len() as u64
}
