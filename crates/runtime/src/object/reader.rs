//! Bounds-checked little-endian reads over untrusted bytes.

/// A read past the end of a buffer: `offset` is where the read started, `len` its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfBounds {
    pub offset: usize,
    pub len: usize,
}

/// `len` bytes at `offset`, or where the read failed.
pub(crate) fn bytes(data: &[u8], offset: usize, len: usize) -> Result<&[u8], OutOfBounds> {
    offset
        .checked_add(len)
        .and_then(|end| data.get(offset..end))
        .ok_or(OutOfBounds { offset, len })
}

pub(crate) fn u16_at(data: &[u8], offset: usize) -> Result<u16, OutOfBounds> {
    let b = bytes(data, offset, 2)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

pub(crate) fn u32_at(data: &[u8], offset: usize) -> Result<u32, OutOfBounds> {
    let b = bytes(data, offset, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A NUL-terminated string starting at `offset` (lossy UTF-8), or `None` when `offset` is
/// outside `data` or the string is not terminated.
pub(crate) fn cstr_at(data: &[u8], offset: usize) -> Option<String> {
    let tail = data.get(offset..)?;
    let end = tail.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&tail[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounds_checked() {
        let d = [1u8, 0, 0, 0, b'a', 0];
        assert_eq!(u32_at(&d, 0), Ok(1));
        assert_eq!(u32_at(&d, 3), Err(OutOfBounds { offset: 3, len: 4 }));
        assert_eq!(
            u16_at(&d, usize::MAX),
            Err(OutOfBounds {
                offset: usize::MAX,
                len: 2
            })
        );
        assert_eq!(cstr_at(&d, 4).as_deref(), Some("a"));
        assert_eq!(cstr_at(&d, 5).as_deref(), Some(""));
        assert_eq!(cstr_at(&d, 6), None);
        assert_eq!(cstr_at(b"x", 0), None);
    }
}
