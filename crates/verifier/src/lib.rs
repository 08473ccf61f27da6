//! Static verifier for gpubpf policy programs.
