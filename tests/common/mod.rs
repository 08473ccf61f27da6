//! Shared support for the root package's integration tests (`mod common;`).
//!
//! Each test binary uses only part of it.
#![allow(dead_code)]

pub mod cli;
pub mod conformance_data;
pub mod conformance_run;
pub mod process;
pub mod shim;
