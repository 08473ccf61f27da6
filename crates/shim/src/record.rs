//! `GPUBPF_RECORD=PATH` (`gpubpf record`): every hooked call of the process as one JSON line
//! (`docs/record-replay.md`).
//!
//! - While recording, every attach point is published with a chain (an empty one where no
//!   policy is attached), so that every wrapper takes the policed path; [`crate::hot`]'s
//!   `Policed::exit` hands the final ctx words, the result the exit programs were given
//!   and the one the caller got, and the entry/exit timestamps to [`call`]. Without
//!   `GPUBPF_RECORD` nothing changes: an unpoliced point's hint stays null.
//! - Lines go to one locked buffer, written to the file when it holds [`FLUSH_AT`] bytes
//!   and at exit (`atexit`). Memory is bounded: a buffer that cannot be written (disk full)
//!   never grows past [`MAX_BUFFER`]; further lines are dropped and counted in a last
//!   `{"dropped":N}` line. A forked child writes every line at once: it usually leaves by
//!   `_exit`, which runs no `atexit` handler.
//! - The first process that initialises writes `PATH` (created exclusively: `gpubpf record`
//!   removes an old one first); any other (a forked child, a second process of the same
//!   command) writes `PATH.PID`.
//! - Nothing here panics across `extern "C"`: the caller runs it under `catch_unwind`, and
//!   I/O errors are logged once and drop lines.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

/// Environment variable naming the record file.
pub const RECORD_ENV: &str = "GPUBPF_RECORD";
/// Buffered bytes that trigger a write.
pub const FLUSH_AT: usize = 64 * 1024;
/// Most bytes kept when writes fail.
pub const MAX_BUFFER: usize = 4 * 1024 * 1024;

static ATEXIT: AtomicBool = AtomicBool::new(false);
/// The current sink, leaked (calls in flight may still use it); null when not recording.
static SINK: AtomicPtr<Sink> = AtomicPtr::new(std::ptr::null_mut());

struct Sink {
    inner: Mutex<Buffer>,
}

struct Buffer {
    file: File,
    /// Buffered bytes that trigger a write: [`FLUSH_AT`], or 0 (every line) in a forked
    /// child, which usually leaves by `_exit` without running `atexit` handlers.
    flush_at: usize,
    buf: Vec<u8>,
    dropped: u64,
    failed: bool,
}

impl Buffer {
    fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.file.write_all(&self.buf) {
            Ok(()) => self.buf.clear(),
            Err(e) => {
                if !self.failed {
                    tracing::warn!(error = %e, "cannot write the call record; lines are dropped");
                    self.failed = true;
                }
                if self.buf.len() > MAX_BUFFER {
                    self.buf.clear();
                }
            }
        }
    }
}

/// Whether this process records its calls. Not inlined into other crates: that would
/// export `hot`'s process line from the rlib, and every policed call would then reach it
/// through the GOT (the wrappers call `hot::recording` directly).
#[inline(never)]
pub fn enabled() -> bool {
    crate::hot::recording()
}

/// Starts recording when `GPUBPF_RECORD` is set (at initialisation, and in a forked child,
/// `child`, which always writes `PATH.PID`).
pub fn start(child: bool) {
    let Some(path) = std::env::var_os(RECORD_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let path = PathBuf::from(path);
    let pid = std::process::id();
    let mut per_pid = path.clone().into_os_string();
    per_pid.push(format!(".{pid}"));
    let per_pid = PathBuf::from(per_pid);
    let create = |p: &PathBuf| File::options().write(true).create_new(true).open(p);
    let opened = if child {
        File::create(&per_pid).map(|f| (f, per_pid))
    } else {
        match create(&path) {
            Ok(f) => Ok((f, path.clone())),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                File::create(&per_pid).map(|f| (f, per_pid))
            }
            Err(e) => Err(e),
        }
    };
    let (file, at) = match opened {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot create the call record; calls are not recorded");
            return;
        }
    };
    tracing::info!(path = %at.display(), "recording every hooked call");
    let sink = Box::into_raw(Box::new(Sink {
        inner: Mutex::new(Buffer {
            file,
            flush_at: if child { 0 } else { FLUSH_AT },
            buf: Vec::with_capacity(if child { 1024 } else { FLUSH_AT + 1024 }),
            dropped: 0,
            failed: false,
        }),
    }));
    // The old sink (a parent's, in a forked child) is leaked: it is never flushed here.
    let _ = SINK.swap(sink, Ordering::AcqRel);
    crate::hot::set_recording();
    if !ATEXIT.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a plain function without captured state.
        unsafe { libc::atexit(flush_at_exit) };
    }
}

/// In a forked child (async-signal-safe): forget the parent's sink, whose buffered lines
/// are the parent's to write.
pub fn forget_after_fork() {
    SINK.store(std::ptr::null_mut(), Ordering::Release);
}

extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(flush);
}

/// Writes what is buffered.
pub fn flush() {
    let p = SINK.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: a non-null sink was leaked by `start` and is never freed.
    let sink = unsafe { &*p };
    if let Ok(mut b) = sink.inner.lock() {
        if b.dropped > 0 {
            let line = format!("{{\"dropped\":{}}}\n", b.dropped);
            b.buf.extend_from_slice(line.as_bytes());
            b.dropped = 0;
        }
        b.flush();
    }
}

/// One finished call.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The ctx words after the exit programs.
    pub ctx: &'a [u64],
    /// Monotonic time at entry and exit.
    pub t_entry: u64,
    pub t_exit: u64,
    /// The result the exit programs were given (the driver's, or the entry verdict).
    pub result: u32,
    /// The result the caller got.
    pub returned: u32,
    /// Whether an entry program refused the call.
    pub refused: bool,
    /// Whether the out-values are valid (the real call succeeded).
    pub out_valid: bool,
}

/// Appends `call` as a JSON line.
pub fn call(c: &Call<'_>) {
    let p = SINK.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    let line = format_call(c);
    // SAFETY: a non-null sink was leaked by `start` and is never freed.
    let sink = unsafe { &*p };
    let Ok(mut b) = sink.inner.lock() else {
        return;
    };
    if b.buf.len() + line.len() > MAX_BUFFER {
        b.dropped += 1;
        return;
    }
    b.buf.extend_from_slice(line.as_bytes());
    if b.buf.len() >= b.flush_at {
        b.flush();
    }
}

/// The JSON line of `c` (ends with a newline).
pub fn format_call(c: &Call<'_>) -> String {
    let w = |i: usize| c.ctx.get(i).copied().unwrap_or(0);
    let api_id = w(0) as u32;
    let variant = (w(3) >> 32) as u32;
    let point = gpubpf_runtime::attach::by_id(api_id);
    let api = point.map_or("", |p| p.name);
    let symbol = point
        .and_then(|p| p.variants.get(variant as usize))
        .map_or("", |v| v.symbol);
    let mut s = String::with_capacity(256);
    let _ = write!(
        s,
        "{{\"api\":\"{api}\",\"api_id\":{api_id},\"symbol\":\"{symbol}\",\"variant\":{variant},\
         \"pid\":{},\"tid\":{},\"t_entry\":{},\"t_exit\":{},\"result\":{},\"returned\":{},\
         \"refused\":{},\"out_valid\":{},\"ctx\":[",
        w(2) as u32,
        (w(2) >> 32) as u32,
        c.t_entry,
        c.t_exit,
        c.result,
        c.returned,
        c.refused,
        c.out_valid
    );
    for (i, v) in c.ctx.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{v}");
    }
    s.push_str("]}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_one_json_line_with_its_api_and_symbol() {
        let point = gpubpf_runtime::attach::all()
            .iter()
            .find(|p| p.name == "cuMemAlloc")
            .expect("cuMemAlloc in the catalog");
        let ctx = [
            u64::from(point.id),
            0,
            (7u64 << 32) | 42,
            (1u64 << 32) | 2,
            0x10,
            1 << 20,
            0,
        ];
        let line = format_call(&Call {
            ctx: &ctx,
            t_entry: 5,
            t_exit: 9,
            result: 2,
            returned: 2,
            refused: true,
            out_valid: false,
        });
        assert!(line.ends_with("]}\n"));
        assert!(line.contains("\"api\":\"cuMemAlloc\""), "{line}");
        assert!(line.contains("\"symbol\":\"cuMemAlloc_v2\""), "{line}");
        assert!(line.contains("\"pid\":42,\"tid\":7"), "{line}");
        assert!(line.contains("\"refused\":true"), "{line}");
        assert!(
            line.contains(&format!("\"ctx\":[{},0,", point.id)),
            "{line}"
        );
    }
}
