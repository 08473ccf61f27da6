//! The `gpubpf` command-line tool.

fn main() {
    println!("gpubpf {}", env!("CARGO_PKG_VERSION"));
}
