//! Link arguments of `libgpubpf.so`.

fn main() {
    // The functions every policed call runs (`hot::enter`, `Policed::exit`, the helpers
    // programs call per call) are in `.text.hot.gpubpf` sections; this keeps the linker
    // from merging them back into `.text` in input order, so that they share a few pages
    // (one iTLB entry and page walk each per call in an application whose own work evicts
    // the TLB between calls) instead of sitting on a page each across the 6 MB of code.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,keep-text-section-prefix");
}
