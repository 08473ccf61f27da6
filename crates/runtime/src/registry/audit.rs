//! The audit ring: one record per decision a policy made in any policed process — an entry
//! verdict that refused a call, an exit program's override of the result — and per decision
//! a shadow program (`load --shadow`) would have made. The shim writes them only on that
//! path (a call no program refuses costs nothing); `gpubpf audit` reads them.
//!
//! A record is one JSON object (UTF-8, no newline) per ring record, so that a reader of
//! another version still gets the fields it knows.

/// Name of the audit ring map.
pub const AUDIT_RING: &str = "audit";
/// Size of the audit ring's data area in bytes (a power of two).
pub const AUDIT_RING_SIZE: u32 = 256 * 1024;

/// One decision.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditRecord {
    /// `CLOCK_MONOTONIC` nanoseconds when it was made.
    pub time_ns: u64,
    /// Wall-clock time, nanoseconds since the epoch.
    #[serde(default)]
    pub realtime_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Attach point id (`hdr.api_id`).
    pub api_id: u32,
    /// Attach point name (`cuMemAlloc`).
    pub api: String,
    /// `entry` (a verdict) or `exit` (a result override).
    pub phase: String,
    /// Registry name of the program's object.
    pub object: String,
    /// Program name.
    pub program: String,
    /// The verdict (entry: the `CUresult` returned instead of calling) or the new result
    /// (exit).
    pub verdict: u32,
    /// The result the call had before an exit override (absent for entry verdicts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u32>,
    /// Made by a shadow program: reported, not applied.
    pub shadow: bool,
}

impl AuditRecord {
    /// The record as one ring record (JSON).
    pub fn encode(&self) -> Vec<u8> {
        self.as_ref().encode()
    }

    /// The same record borrowing its names.
    pub fn as_ref(&self) -> AuditRecordRef<'_> {
        AuditRecordRef {
            time_ns: self.time_ns,
            realtime_ns: self.realtime_ns,
            pid: self.pid,
            tid: self.tid,
            api_id: self.api_id,
            api: &self.api,
            phase: &self.phase,
            object: &self.object,
            program: &self.program,
            verdict: self.verdict,
            previous: self.previous,
            shadow: self.shadow,
        }
    }

    /// A record read from the ring; `None` when it is not one.
    pub fn decode(bytes: &[u8]) -> Option<AuditRecord> {
        serde_json::from_slice(bytes).ok()
    }
}

/// An [`AuditRecord`] borrowing its names: what the shim writes on a decision, encoded into
/// a buffer of its own without allocating ([`AuditRecordRef::encode_into`]); both encode
/// through this type, so they write the same JSON.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct AuditRecordRef<'a> {
    pub time_ns: u64,
    pub realtime_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub api_id: u32,
    pub api: &'a str,
    pub phase: &'a str,
    pub object: &'a str,
    pub program: &'a str,
    pub verdict: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<u32>,
    pub shadow: bool,
}

impl AuditRecordRef<'_> {
    /// The record as one ring record (JSON).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Encodes the record into `buf`: its length, or `None` when it does not fit.
    pub fn encode_into(&self, buf: &mut [u8]) -> Option<usize> {
        let mut cursor = std::io::Cursor::new(buf);
        serde_json::to_writer(&mut cursor, self).ok()?;
        usize::try_from(cursor.position()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let r = AuditRecord {
            time_ns: 5,
            realtime_ns: 6,
            pid: 1,
            tid: 2,
            api_id: 3,
            api: "cuMemAlloc".into(),
            phase: "entry".into(),
            object: "quota".into(),
            program: "quota_alloc".into(),
            verdict: 2,
            previous: None,
            shadow: true,
        };
        assert_eq!(AuditRecord::decode(&r.encode()), Some(r.clone()));
        let mut buf = [0u8; 512];
        let n = r.as_ref().encode_into(&mut buf).unwrap();
        assert_eq!(&buf[..n], &r.encode()[..], "one encoding");
        assert_eq!(r.as_ref().encode_into(&mut buf[..20]), None, "too small");
        assert_eq!(AuditRecord::decode(b"not json"), None);
    }
}
