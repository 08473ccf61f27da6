//! What a program may do with its context (`r1` at entry): supplied by the caller.
//!
//! The verifier knows nothing about CUDA. The runtime's attach-point catalog describes, per
//! attach point and phase, the ctx layout (which byte ranges are readable and writable, and
//! what each field is called, for diagnostics) and which return values are allowed; it hands
//! that description to the verifier as a [`ProgramContext`].

/// One field of the context structure.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CtxField {
    /// Field name as the SDK header spells it (used in diagnostics).
    pub name: String,
    /// Byte offset from the start of the context.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Programs may load from this field.
    pub readable: bool,
    /// Programs may store to this field.
    pub writable: bool,
}

/// Layout of the context structure a program receives in `r1`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtxLayout {
    /// Total size of the context in bytes; accesses past it are rejected.
    pub size: u32,
    /// Fields, sorted by offset, non-overlapping. Bytes not covered by a field are neither
    /// readable nor writable.
    pub fields: Vec<CtxField>,
}

impl CtxLayout {
    /// The field containing byte `offset`, if any.
    pub fn field_at(&self, offset: u32) -> Option<&CtxField> {
        self.fields
            .iter()
            .find(|f| offset >= f.offset && offset - f.offset < f.size)
    }
}

/// Allowed values of `r0` at program exit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReturnRule {
    /// Any scalar.
    Any,
    /// A scalar whose range lies within `min..=max` (unsigned, 64-bit).
    Range { min: u64, max: u64 },
}

/// Everything the verifier needs to know about where a program will run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProgramContext {
    /// Human-readable description, e.g. `cuda/cuMemAlloc (entry)`, used in diagnostics.
    pub description: String,
    /// The context layout.
    pub ctx: CtxLayout,
    /// Allowed return values.
    pub ret: ReturnRule,
}
