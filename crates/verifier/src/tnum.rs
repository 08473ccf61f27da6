//! Tristate numbers ("tnums"): per-bit knowledge of a 64-bit value, as in the Linux verifier.
//!
//! A tnum is `(value, mask)`: bits set in `mask` are unknown; bits clear in `mask` are known
//! and equal to the corresponding bit of `value`. Invariant: `value & mask == 0`.

#![deny(clippy::arithmetic_side_effects)]

/// Per-bit knowledge of a 64-bit value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnum {
    /// Known bit values (zero where unknown).
    pub value: u64,
    /// Unknown bits.
    pub mask: u64,
}

#[allow(clippy::should_implement_trait)]
impl Tnum {
    /// Nothing known.
    pub const UNKNOWN: Tnum = Tnum {
        value: 0,
        mask: u64::MAX,
    };

    /// A known constant.
    pub const fn konst(v: u64) -> Tnum {
        Tnum { value: v, mask: 0 }
    }

    /// The smallest tnum containing every value of `min..=max`.
    pub fn range(min: u64, max: u64) -> Tnum {
        let chi = min ^ max;
        let bits = 64u32.saturating_sub(chi.leading_zeros());
        if bits > 63 {
            return Tnum::UNKNOWN;
        }
        let delta = (1u64 << bits).wrapping_sub(1);
        Tnum {
            value: min & !delta,
            mask: delta,
        }
    }

    /// Whether every bit is known.
    pub const fn is_const(self) -> bool {
        self.mask == 0
    }

    /// Whether the value is known to be `v`.
    pub const fn equals_const(self, v: u64) -> bool {
        self.mask == 0 && self.value == v
    }

    /// Whether every value `b` can take is a value `self` can take.
    pub const fn contains(self, b: Tnum) -> bool {
        if b.mask & !self.mask != 0 {
            return false;
        }
        self.value & !b.mask == b.value & !self.mask
    }

    pub fn lshift(self, shift: u32) -> Tnum {
        Tnum {
            value: self.value.wrapping_shl(shift),
            mask: self.mask.wrapping_shl(shift),
        }
    }

    pub fn rshift(self, shift: u32) -> Tnum {
        Tnum {
            value: self.value.wrapping_shr(shift),
            mask: self.mask.wrapping_shr(shift),
        }
    }

    /// Arithmetic right shift of the low `width` (32 or 64) bits.
    pub fn arshift(self, shift: u32, width: u32) -> Tnum {
        if width == 32 {
            let v = ((self.value as u32 as i32).wrapping_shr(shift)) as u32 as u64;
            let m = ((self.mask as u32 as i32).wrapping_shr(shift)) as u32 as u64;
            Tnum { value: v, mask: m }
        } else {
            Tnum {
                value: (self.value as i64).wrapping_shr(shift) as u64,
                mask: (self.mask as i64).wrapping_shr(shift) as u64,
            }
        }
    }

    pub fn add(self, b: Tnum) -> Tnum {
        let sm = self.mask.wrapping_add(b.mask);
        let sv = self.value.wrapping_add(b.value);
        let sigma = sm.wrapping_add(sv);
        let chi = sigma ^ sv;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: sv & !mu,
            mask: mu,
        }
    }

    pub fn sub(self, b: Tnum) -> Tnum {
        let dv = self.value.wrapping_sub(b.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(b.mask);
        let chi = alpha ^ beta;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: dv & !mu,
            mask: mu,
        }
    }

    pub fn and(self, b: Tnum) -> Tnum {
        let alpha = self.value | self.mask;
        let beta = b.value | b.mask;
        let v = self.value & b.value;
        Tnum {
            value: v,
            mask: alpha & beta & !v,
        }
    }

    pub fn or(self, b: Tnum) -> Tnum {
        let v = self.value | b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v,
            mask: mu & !v,
        }
    }

    pub fn xor(self, b: Tnum) -> Tnum {
        let v = self.value ^ b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v & !mu,
            mask: mu,
        }
    }

    /// Multiplication (the kernel's shift-and-add algorithm).
    pub fn mul(self, b: Tnum) -> Tnum {
        let mut a = self;
        let mut b = b;
        let acc_v = a.value.wrapping_mul(b.value);
        let mut acc_m = Tnum::konst(0);
        while a.value != 0 || a.mask != 0 {
            if a.value & 1 != 0 {
                acc_m = acc_m.add(Tnum {
                    value: 0,
                    mask: b.mask,
                });
            } else if a.mask & 1 != 0 {
                acc_m = acc_m.add(Tnum {
                    value: 0,
                    mask: b.value | b.mask,
                });
            }
            a = a.rshift(1);
            b = b.lshift(1);
        }
        Tnum {
            value: acc_v,
            mask: 0,
        }
        .add(acc_m)
    }

    /// Bits known in both; `None` when they contradict (no value satisfies both).
    pub fn intersect(self, b: Tnum) -> Option<Tnum> {
        if (self.value ^ b.value) & !self.mask & !b.mask != 0 {
            return None;
        }
        let v = self.value | b.value;
        let mu = self.mask & b.mask;
        Some(Tnum {
            value: v & !mu,
            mask: mu,
        })
    }

    /// The low 32 bits, zero-extended.
    pub const fn subreg(self) -> Tnum {
        Tnum {
            value: self.value & 0xffff_ffff,
            mask: self.mask & 0xffff_ffff,
        }
    }

    /// The high 32 bits with the low 32 bits cleared.
    pub const fn clear_subreg(self) -> Tnum {
        Tnum {
            value: self.value & !0xffff_ffff,
            mask: self.mask & !0xffff_ffff,
        }
    }

    /// Replaces the low 32 bits with those of `sub`.
    pub const fn with_subreg(self, sub: Tnum) -> Tnum {
        let hi = self.clear_subreg();
        let lo = sub.subreg();
        Tnum {
            value: hi.value | lo.value,
            mask: hi.mask | lo.mask,
        }
    }

    /// Truncates to the low `bytes` bytes (zero-extended).
    pub const fn cast(self, bytes: u32) -> Tnum {
        if bytes >= 8 {
            return self;
        }
        let m = 1u64.wrapping_shl(bytes.wrapping_mul(8)).wrapping_sub(1);
        Tnum {
            value: self.value & m,
            mask: self.mask & m,
        }
    }
}

impl std::fmt::Display for Tnum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({:#x}; {:#x})", self.value, self.mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(t: Tnum) -> Vec<u64> {
        // Only for small masks.
        let bits: Vec<u32> = (0..64).filter(|b| t.mask >> b & 1 == 1).collect();
        (0..(1u64 << bits.len()))
            .map(|n| {
                let mut v = t.value;
                for (i, b) in bits.iter().enumerate() {
                    if n >> i & 1 == 1 {
                        v |= 1 << b;
                    }
                }
                v
            })
            .collect()
    }

    #[test]
    fn ops_contain_concrete_results() {
        let ts = [
            Tnum::konst(5),
            Tnum { value: 4, mask: 3 },
            Tnum {
                value: 0x10,
                mask: 0x9,
            },
            Tnum::range(3, 9),
            Tnum {
                value: 0,
                mask: 0x7,
            },
        ];
        for a in ts {
            for b in ts {
                for x in members(a) {
                    for y in members(b) {
                        assert!(a.add(b).contains(Tnum::konst(x.wrapping_add(y))));
                        assert!(a.sub(b).contains(Tnum::konst(x.wrapping_sub(y))));
                        assert!(a.mul(b).contains(Tnum::konst(x.wrapping_mul(y))));
                        assert!(a.and(b).contains(Tnum::konst(x & y)));
                        assert!(a.or(b).contains(Tnum::konst(x | y)));
                        assert!(a.xor(b).contains(Tnum::konst(x ^ y)));
                    }
                }
            }
        }
    }

    #[test]
    fn range_and_intersect() {
        let r = Tnum::range(8, 15);
        assert_eq!(r, Tnum { value: 8, mask: 7 });
        assert_eq!(Tnum::range(0, u64::MAX), Tnum::UNKNOWN);
        assert!(Tnum::konst(1).intersect(Tnum::konst(2)).is_none());
        assert_eq!(
            Tnum { value: 0, mask: 3 }.intersect(Tnum { value: 2, mask: 1 }),
            Some(Tnum { value: 2, mask: 1 })
        );
    }
}
