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
    /// The record as written to the ring.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A record read from the ring; `None` when it is not one.
    pub fn decode(bytes: &[u8]) -> Option<AuditRecord> {
        serde_json::from_slice(bytes).ok()
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
        assert_eq!(AuditRecord::decode(&r.encode()), Some(r));
        assert_eq!(AuditRecord::decode(b"not json"), None);
    }
}
