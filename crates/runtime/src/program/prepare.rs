//! The prepare step: map references in `lddw` become addresses.

use std::sync::Arc;

use gpubpf_isa::opcode::{
    BPF_PSEUDO_FUNC, BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE, BPF_PSEUDO_NONE, LDDW,
};
use gpubpf_isa::Insn;

use crate::maps::{Map, MapType};

/// Errors of the prepare step (the verifier normally rules all of them out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("instruction {pc}: `lddw` is missing its second slot")]
    TruncatedLddw { pc: usize },
    #[error("instruction {pc}: map index {index} is out of range ({count} maps)")]
    BadMapIndex { pc: usize, index: i64, count: usize },
    #[error("instruction {pc}: offset {offset} is outside the {size}-byte value of map `{map}`")]
    BadValueOffset {
        pc: usize,
        map: String,
        offset: u32,
        size: u32,
    },
    #[error("instruction {pc}: map `{map}` is a {map_type} map; only arrays have a value address")]
    NotAnArray {
        pc: usize,
        map: String,
        map_type: MapType,
    },
    #[error("instruction {pc}: unsupported `lddw` pseudo source {src}")]
    UnsupportedPseudo { pc: usize, src: u8 },
}

/// A program whose map references are addresses; holds the maps it references.
#[derive(Debug, Clone)]
pub struct PreparedProgram {
    /// The rewritten slots (only `LddwKind::Imm` and `LddwKind::Func` remain).
    pub insns: Vec<Insn>,
    maps: Vec<Arc<Map>>,
}

impl PreparedProgram {
    /// The maps the program references (by object index); they stay mapped while this
    /// value (or a clone) lives.
    pub fn maps(&self) -> &[Arc<Map>] {
        &self.maps
    }

    /// The program's maps whose lookups the JIT may inline (arrays, hash maps with 4- or
    /// 8-byte keys): valid for code that runs only while this value (which keeps the maps
    /// mapped) lives.
    pub fn inline_maps(&self) -> Vec<crate::jit::InlineMap> {
        self.maps.iter().filter_map(|m| m.inline_map()).collect()
    }
}

/// Rewrites `lddw` map references of `insns` against `maps` (indexed like the object's map
/// list).
pub fn prepare(insns: &[Insn], maps: &[Arc<Map>]) -> Result<PreparedProgram, PrepareError> {
    let mut out = insns.to_vec();
    let mut pc = 0;
    while pc < out.len() {
        if out[pc].opc != LDDW {
            pc += 1;
            continue;
        }
        if pc + 1 >= out.len() {
            return Err(PrepareError::TruncatedLddw { pc });
        }
        let src = out[pc].src;
        let addr = match src {
            BPF_PSEUDO_NONE | BPF_PSEUDO_FUNC => None,
            BPF_PSEUDO_MAP_IDX | BPF_PSEUDO_MAP_IDX_VALUE => {
                let index = i64::from(out[pc].imm);
                let map = usize::try_from(index)
                    .ok()
                    .and_then(|i| maps.get(i))
                    .ok_or(PrepareError::BadMapIndex {
                        pc,
                        index,
                        count: maps.len(),
                    })?;
                if src == BPF_PSEUDO_MAP_IDX {
                    Some(map.handle())
                } else {
                    let offset = out[pc + 1].imm as u32;
                    let spec = map.spec();
                    if spec.map_type != MapType::Array {
                        return Err(PrepareError::NotAnArray {
                            pc,
                            map: map.name().into(),
                            map_type: spec.map_type,
                        });
                    }
                    if offset >= spec.value_size {
                        return Err(PrepareError::BadValueOffset {
                            pc,
                            map: map.name().into(),
                            offset,
                            size: spec.value_size,
                        });
                    }
                    let base = map.array_value_ptr(0).ok_or(PrepareError::NotAnArray {
                        pc,
                        map: map.name().into(),
                        map_type: spec.map_type,
                    })?;
                    Some(base as u64 + u64::from(offset))
                }
            }
            other => return Err(PrepareError::UnsupportedPseudo { pc, src: other }),
        };
        if let Some(a) = addr {
            out[pc].src = BPF_PSEUDO_NONE;
            out[pc].imm = a as u32 as i32;
            out[pc + 1].imm = (a >> 32) as u32 as i32;
        }
        pc += 2;
    }
    Ok(PreparedProgram {
        insns: out,
        maps: maps.to_vec(),
    })
}
