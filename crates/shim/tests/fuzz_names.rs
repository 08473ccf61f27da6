//! Stable twin of the cargo-fuzz target `shim_names` (`fuzz/fuzz_targets/shim_names.rs`):
//! the property of `fuzz/props/shim.rs` on every input of `fuzz/corpus/shim_names/`, on
//! every catalogued symbol (and its truncations and extensions), and on a seeded batch of
//! random names and addresses.

#[path = "../../../fuzz/props/shim.rs"]
mod props;

use gpubpf::generated::BY_SYMBOL;

fn input(version: u32, flags: u8, addr: u64, name: &[u8]) -> Vec<u8> {
    let mut v = version.to_le_bytes().to_vec();
    v.push(flags);
    v.extend_from_slice(&addr.to_le_bytes());
    v.extend_from_slice(name);
    v
}

#[test]
fn corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/shim_names");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        props::shim_names(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}

#[test]
fn every_catalogued_symbol_and_its_neighbours() {
    let mut addr_of_fn = props::shim_names as *const () as u64;
    for (sym, _) in BY_SYMBOL.iter() {
        for name in [
            sym.to_vec(),
            sym[..sym.len() - 1].to_vec(),
            [*sym, b"_v2"].concat(),
            [*sym, b"\xff"].concat(),
        ] {
            addr_of_fn = addr_of_fn.rotate_left(7);
            props::shim_names(&input(12000, 2, addr_of_fn, &name));
            props::shim_names(&input(0, 0, 0, &name));
        }
    }
}

#[test]
fn random_names_and_addresses() {
    let mut s: u64 = 0x6770_6266;
    let mut next = || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..5000 {
        let len = (next() % 40) as usize;
        let mut name: Vec<u8> = if next() % 2 == 0 {
            b"cu".to_vec()
        } else {
            Vec::new()
        };
        name.extend((0..len).map(|_| (next() % 255 + 1) as u8));
        props::shim_names(&input(next() as u32, next() as u8, next(), &name));
    }
}
