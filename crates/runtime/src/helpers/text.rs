//! Text formatted in place, for what runs inside the application on a policed call
//! (`bpf_trace_printk`, `gpubpf_get_caller`, the shim's audit records): a fixed-capacity
//! buffer that `write!` fills without allocating.

use std::fmt;

/// At most `N` bytes of UTF-8 text. Text that does not fit is cut at the last character
/// boundary that fits, and everything written after that is ignored ([`Text::is_full`]).
#[derive(Clone)]
pub struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
    full: bool,
}

impl<const N: usize> Default for Text<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> Text<N> {
    /// Empty text.
    pub const fn new() -> Self {
        Text {
            buf: [0; N],
            len: 0,
            full: false,
        }
    }

    /// The text so far.
    pub fn as_str(&self) -> &str {
        // Only whole `str`s cut at character boundaries are ever copied in, so the
        // bytes are UTF-8; the fallback is never taken.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some text did not fit (and was cut).
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Appends `s`, or as much of it as fits, cut at a character boundary.
    pub fn push_str(&mut self, s: &str) {
        if self.full {
            return;
        }
        let room = N - self.len;
        let mut n = s.len();
        if n > room {
            n = room;
            while n > 0 && !s.is_char_boundary(n) {
                n -= 1;
            }
            self.full = true;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
    }

    /// Appends `c`.
    pub fn push(&mut self, c: char) {
        self.push_str(c.encode_utf8(&mut [0; 4]));
    }

    /// Appends `c` `n` times.
    pub fn push_repeat(&mut self, c: char, n: usize) {
        for _ in 0..n {
            self.push(c);
        }
    }

    /// Appends `bytes` as `String::from_utf8_lossy` would show them (each invalid
    /// sequence becomes U+FFFD).
    pub fn push_lossy(&mut self, bytes: &[u8]) {
        for chunk in bytes.utf8_chunks() {
            self.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                self.push(char::REPLACEMENT_CHARACTER);
            }
        }
    }
}

impl<const N: usize> fmt::Write for Text<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Text;
    use std::fmt::Write;

    #[test]
    fn cuts_at_a_character_boundary_and_then_ignores_writes() {
        let mut t = Text::<5>::new();
        t.push_str("ab");
        t.push_str("é€"); // 2 + 3 bytes: only "é" fits
        assert_eq!(t.as_str(), "abé");
        assert!(t.is_full());
        t.push('x');
        assert_eq!(t.as_str(), "abé");
    }

    #[test]
    fn formats_and_shows_invalid_bytes_as_replacement_characters() {
        let mut t = Text::<64>::new();
        write!(t, "{}-{:x}|", -5i64, 255u64).unwrap();
        t.push_lossy(b"ok\xffend");
        t.push_repeat('0', 2);
        assert_eq!(t.as_str(), "-5-ff|ok\u{fffd}end00");
        assert_eq!(
            t.as_str(),
            format!("-5-ff|{}00", String::from_utf8_lossy(b"ok\xffend"))
        );
        assert!(!t.is_full());
    }
}
