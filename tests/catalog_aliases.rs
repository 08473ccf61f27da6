//! The runtime-API aliases against what cudart 13.0 was measured to call
//! (`tests/gpu/catalog-probes/cuda13.0-h200.tsv`, CUPTI trace: runtime function → driver
//! symbols it called): every alias of a measured runtime function targets a driver function it
//! really calls (or covers all of them), every substantive driver call of it is covered by the
//! alias, and every measured runtime function has an alias.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpubpf_runtime::attach;

/// Driver calls cudart makes for bookkeeping inside many runtime calls.
const INCIDENTAL: &[&str] = &[
    "cuCtxGetCurrent",
    "cuCtxGetApiVersion",
    "cuCtxGetDevice",
    "cuKernelGetFunction",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
];

fn measured() -> BTreeMap<String, BTreeSet<&'static str>> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/catalog-probes/cuda13.0-h200.tsv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut map: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let (runtime, driver) = line.split_once('\t').unwrap();
        let point = attach::resolve(driver).unwrap_or_else(|e| panic!("{driver}: {e}"));
        map.entry(runtime.to_string())
            .or_default()
            .insert(point.name);
    }
    assert!(
        map.len() >= 60,
        "only {} runtime functions measured",
        map.len()
    );
    map
}

#[test]
fn aliases_match_the_measured_driver_calls() {
    for (runtime, drivers) in measured() {
        let Some(alias) = attach::all_aliases().iter().find(|a| a.name == runtime) else {
            panic!("measured runtime function {runtime} has no alias (calls {drivers:?})");
        };
        let covered: BTreeSet<&str> = std::iter::once(alias.target)
            .chain(alias.also.iter().copied())
            .collect();
        // The target is a function cudart calls, or (for families such as cudaMemcpyAsync,
        // whose target serves the arguments the probe did not use) the alias covers every
        // function it was seen to call.
        assert!(
            drivers.contains(alias.target)
                || (!alias.also.is_empty() && drivers.iter().all(|d| covered.contains(d))),
            "{runtime}: alias targets {} but cudart calls {drivers:?}",
            alias.target
        );
        for d in drivers {
            if d != alias.target && INCIDENTAL.contains(&d) {
                continue;
            }
            assert!(
                covered.contains(d),
                "{runtime}: cudart calls {d}, not covered by alias {covered:?}"
            );
        }
    }
}
