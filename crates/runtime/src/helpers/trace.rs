//! `bpf_trace_printk` and the trace sink.
//!
//! Lines go to the configured [`TraceSink`]: standard error (the default), a ring-buffer
//! map (the registry's trace ring, read by `gpubpf`), both, or nowhere. Each line reads
//! `comm-tid [pid] seconds: message`, like the kernel's `trace_pipe`.
//!
//! The shim calls [`send_to_registry`] when it starts in a process: from then on the lines
//! go to the registry's trace ring (`gpubpf trace` reads it), and to standard error as well
//! only when [`STDERR_ENV`] asks for it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, RwLock};

use crate::maps::Map;
use crate::registry::{Registry, RegistryError};

use super::neg_errno;
use super::text::Text;

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
pub const MAX_STR: usize = 128;
/// Largest formatted message.
const MAX_LINE: usize = 512;

/// The formatted message of [`format_into`].
pub type Message = Text<MAX_LINE>;

/// Formats a `bpf_trace_printk` format with up to three arguments into a `String` (the
/// CLI's `test-run`, tests): [`format_into`] with `read_str` returning the bytes of a `%s`
/// argument.
pub fn format(
    fmt: &[u8],
    args: [u64; 3],
    read_str: impl Fn(u64) -> Option<Vec<u8>>,
) -> Option<String> {
    let mut out = Message::new();
    format_into(
        fmt,
        args,
        |p, buf| {
            let b = read_str(p)?;
            let n = b.len().min(buf.len());
            buf[..n].copy_from_slice(&b[..n]);
            Some(n)
        },
        &mut out,
    )?;
    Some(out.as_str().to_owned())
}

/// Formats a `bpf_trace_printk` format with up to three arguments into `out`, without
/// allocating (the helper runs inside the application, maybe on every call). `%s`
/// arguments are read with `read_str` (application memory, fault-safe), which fills the
/// buffer it is given and returns how many bytes of it the string has. Returns `None` for
/// an unsupported conversion or more than three arguments, as Linux rejects those with
/// `-EINVAL`. A message longer than `out` is cut at a character boundary.
pub fn format_into<const N: usize>(
    fmt: &[u8],
    args: [u64; 3],
    read_str: impl Fn(u64, &mut [u8; MAX_STR]) -> Option<usize>,
    out: &mut Text<N>,
) -> Option<()> {
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
        // One conversion's text: a `%s` of MAX_STR bytes, each maybe shown as U+FFFD.
        let mut body = Text::<{ 3 * MAX_STR }>::new();
        // Writing into a `Text` cannot fail.
        let _ = match conv {
            b'%' => write!(body, "%"),
            b'd' | b'i' => {
                let v = trunc(next_arg(&mut ai)?);
                let s = if bits == 32 {
                    i64::from(v as u32 as i32)
                } else {
                    v as i64
                };
                write!(body, "{s}")
            }
            b'u' => write!(body, "{}", trunc(next_arg(&mut ai)?)),
            b'x' => write!(body, "{:x}", trunc(next_arg(&mut ai)?)),
            b'X' => write!(body, "{:X}", trunc(next_arg(&mut ai)?)),
            b'p' => write!(body, "{:#x}", next_arg(&mut ai)?),
            b'c' => write!(body, "{}", char::from(next_arg(&mut ai)? as u8)),
            b's' => {
                let p = next_arg(&mut ai)?;
                let mut buf = [0u8; MAX_STR];
                match read_str(p, &mut buf) {
                    Some(n) => body.push_lossy(&buf[..n.min(MAX_STR)]),
                    None => body.push_str("(fault)"),
                }
                Ok(())
            }
            _ => return None,
        };
        let pad = width.saturating_sub(body.as_str().chars().count());
        if left {
            out.push_str(body.as_str());
            out.push_repeat(' ', pad);
        } else {
            let fill = if zero && conv != b's' { '0' } else { ' ' };
            out.push_repeat(fill, pad);
            out.push_str(body.as_str());
        }
        if out.is_full() {
            break;
        }
    }
    Some(())
}

/// Writes `line` to the sink, holding the sink's read lock (no reference is counted).
fn emit(line: &[u8]) {
    let to_stderr = |l: &[u8]| {
        let _ = std::io::stderr().lock().write_all(l);
    };
    let guard = SINK.read();
    match guard.as_ref().ok().and_then(|s| s.as_ref()) {
        None | Some(TraceSink::Stderr) => to_stderr(line),
        Some(TraceSink::Ring(m)) => {
            let _ = m.ringbuf_output_raw(line);
        }
        Some(TraceSink::Both(m)) => {
            let _ = m.ringbuf_output_raw(line);
            to_stderr(line);
        }
        Some(TraceSink::Off) => {}
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
    let read_str = |p: u64, buf: &mut [u8; MAX_STR]| {
        let n = super::read_user_str(buf, p).ok()?;
        Some(n.saturating_sub(1))
    };
    let mut msg = Message::new();
    if format_into(f, [a1, a2, a3], read_str, &mut msg).is_none() {
        return neg_errno(libc::EINVAL);
    }
    let comm = super::misc::current_comm();
    let comm_len = comm.iter().position(|b| *b == 0).unwrap_or(16);
    let pt = super::misc::get_current_pid_tgid(0, 0, 0, 0, 0);
    let ns = super::misc::ktime_get_ns(0, 0, 0, 0, 0);
    // The prefix (at most 16 name bytes, each maybe U+FFFD, and four numbers) and the
    // newline always fit beside a whole message.
    let mut line = Text::<{ MAX_LINE + 128 }>::new();
    line.push_lossy(&comm[..comm_len]);
    let _ = write!(
        line,
        "-{} [{}] {}.{:06}: {}",
        pt as u32,
        pt >> 32,
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1000,
        msg.as_str()
    );
    if !line.as_str().ends_with('\n') {
        line.push('\n');
    }
    emit(line.as_str().as_bytes());
    msg.len() as u64
}
