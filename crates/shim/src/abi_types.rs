//! The C types the generated wrappers need beyond integers, `float` and pointers: the
//! structures that driver functions take **by value**. Each mirrors its declaration in
//! `cuda.h` / `cudaEGL.h` (field order, types, alignment), because the C calling convention
//! of a by-value structure depends on its size and fields: on x86-64 an 8-byte structure of
//! two `int`s travels in one integer register, larger ones are copied to the stack; on
//! AArch64 structures over 16 bytes are passed by reference to a copy.
//!
//! The generator (`codegen.rs`) maps the catalog's `struct_by_value` C types to these names
//! and refuses a type it does not know, and a test checks every size against the catalog.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`: a C enum, passed and returned as an `int`-sized value.
pub type CUresult = c_uint;

/// `CUmemLocation_v1` (`cuda.h`): `{ CUmemLocationType type; int id; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemLocation_v1 {
    /// `CUmemLocationType` (a C enum).
    pub kind: c_uint,
    /// Device ordinal, NUMA node or host id, depending on `kind`.
    pub id: c_int,
}

/// `CUipcMemHandle_v1` (`cuda.h`): `{ char reserved[CU_IPC_HANDLE_SIZE]; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUipcMemHandle_v1 {
    /// Opaque bytes.
    pub reserved: [c_char; 64],
}

/// `CUipcEventHandle_v1` (`cuda.h`): `{ char reserved[CU_IPC_HANDLE_SIZE]; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUipcEventHandle_v1 {
    /// Opaque bytes.
    pub reserved: [c_char; 64],
}

/// `CUeglFrame_v1` (`cudaEGL.h`): a union of three `CUarray`/pointers, six `unsigned int`
/// dimensions and counts, and three enums (60 bytes of fields, 64 with padding).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUeglFrame_v1 {
    /// `union { CUarray pArray[3]; void *pPitch[3]; } frame`.
    pub frame: [*mut c_void; 3],
    /// Width of the first plane.
    pub width: c_uint,
    /// Height of the first plane.
    pub height: c_uint,
    /// Depth of the first plane.
    pub depth: c_uint,
    /// Pitch of the first plane.
    pub pitch: c_uint,
    /// Number of planes.
    pub plane_count: c_uint,
    /// Number of channels of the plane.
    pub num_channels: c_uint,
    /// `CUeglFrameType`.
    pub frame_type: c_uint,
    /// `CUeglColorFormat`.
    pub egl_color_format: c_uint,
    /// `CUarray_format`.
    pub cu_format: c_uint,
}

/// The Rust type of each by-value C structure the catalog has: (C type, Rust type, size).
pub const BY_VALUE: [(&str, &str, usize); 4] = [
    (
        "CUmemLocation_v1",
        "CUmemLocation_v1",
        core::mem::size_of::<CUmemLocation_v1>(),
    ),
    (
        "CUipcMemHandle_v1",
        "CUipcMemHandle_v1",
        core::mem::size_of::<CUipcMemHandle_v1>(),
    ),
    (
        "CUipcEventHandle_v1",
        "CUipcEventHandle_v1",
        core::mem::size_of::<CUipcEventHandle_v1>(),
    ),
    (
        "CUeglFrame_v1",
        "CUeglFrame_v1",
        core::mem::size_of::<CUeglFrame_v1>(),
    ),
];
