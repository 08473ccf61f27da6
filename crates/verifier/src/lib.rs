//! Static verifier for gpubpf policy programs.
//!
//! - [`helpers`]: the helper table (ids, names, signatures), the single source of truth.
//! - [`ctx`]: the caller-supplied description of a program's context and return rules.

pub mod ctx;
pub mod helpers;
