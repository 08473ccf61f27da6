//! bpf_conformance plugin.

fn main() {
    std::process::exit(1);
}
