//! Root package: integration tests live in `tests/`, benchmarks in `benches/`.
