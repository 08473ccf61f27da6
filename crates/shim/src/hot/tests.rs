//! Unit tests of the hot path's out-value and launch-block helpers.

use super::*;

#[test]
fn out_values_are_read_and_written_with_their_size_and_sign() {
    let mut word: u64 = u64::MAX;
    let p = (&mut word as *mut u64).cast::<c_void>();
    // SAFETY: `p` points to 8 writable bytes for every call below.
    unsafe {
        write_out(p, 4, 0xffff_fffe);
        assert_eq!(read_out(p, 4, true), (-2i64) as u64);
        assert_eq!(read_out(p, 4, false), 0xffff_fffe);
        assert_eq!(word, 0xffff_ffff_ffff_fffe, "only 4 bytes written");
        write_out(p, 8, 7);
        assert_eq!(read_out(p, 8, false), 7);
        write_out(p, 1, 0x1ff);
        assert_eq!(read_out(p, 1, false), 0xff);
        write_out(p, 2, 0x12345);
        assert_eq!(read_out(p, 2, false), 0x2345);
        assert_eq!(read_out(null_mut(), 8, false), 0);
        write_out(null_mut(), 8, 1);
    }
}

#[test]
fn launch_block_from_a_launch_config() {
    #[repr(C)]
    struct Config {
        dims: [u32; 7],
        stream: u64,
        attrs: u64,
        num_attrs: u32,
    }
    let mut cfg = Config {
        dims: [1, 2, 3, 4, 5, 6, 7],
        stream: 0xabcd,
        attrs: 0,
        num_attrs: 0,
    };
    let mut launch = [0u64; 8];
    // SAFETY: `cfg` is a readable CUlaunchConfig-shaped value.
    unsafe { launch_from_config((&mut cfg as *mut Config).cast(), &mut launch) };
    assert_eq!(launch, [1, 2, 3, 4, 5, 6, 7, 0xabcd]);
    assert_eq!((cfg.attrs, cfg.num_attrs), (0, 0));
    let mut untouched = [9u64; 8];
    // SAFETY: NULL is allowed.
    unsafe { launch_from_config(null_mut(), &mut untouched) };
    assert_eq!(untouched, [9; 8]);
}
