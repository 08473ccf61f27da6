//! Publication of chains: what the watcher thread (and initialisation) makes the wrappers
//! run. A point's chain lives in an `ArcSwapOption`; its hint pointer, which every wrapper
//! loads first, is updated after it.

use std::collections::BTreeMap;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use gpubpf_runtime::dispatch::{Chain, ChainSummary};

use super::{SLOTS, UNINIT};
use crate::generated::POINT_IDS;

/// A published chain with its [`ChainSummary`], taken once when it is published: a thread
/// whose last chain changes (calls alternating between attach points) copies this line
/// instead of summarising the chain and its programs again. The fields are private and the
/// chain never changes once it is in its `Arc`, so the summary stays the chain's, and the
/// programs it names live as long as it does.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Published {
    /// First: a published chain's address is its chain's.
    chain: Chain,
    summary: ChainSummary,
    /// A call has nudged the watcher to compile this chain (`crate::native::nudge_once`).
    nudged: AtomicBool,
}

impl Published {
    pub(crate) fn new(chain: Chain) -> Self {
        Published {
            summary: chain.summary(),
            chain,
            nudged: AtomicBool::new(false),
        }
    }

    /// Whether a call has already nudged the watcher for this chain; marks it nudged.
    pub(crate) fn nudged(&self) -> bool {
        self.nudged.load(Ordering::Relaxed) || self.nudged.swap(true, Ordering::Relaxed)
    }

    /// The chain's summary ([`Chain::summary`], taken at publication).
    #[inline(always)]
    pub(crate) fn summary(&self) -> &ChainSummary {
        &self.summary
    }

    /// The chain.
    #[inline(always)]
    pub(crate) fn chain(&self) -> &Chain {
        &self.chain
    }
}

impl std::ops::Deref for Published {
    type Target = Chain;

    fn deref(&self) -> &Chain {
        &self.chain
    }
}

/// Publishes `chains` (by attach-point id): each point gets its chain or none. Calls in
/// flight keep the chain they loaded; it is freed when the last of them has left.
pub fn publish(mut chains: BTreeMap<u32, Chain>) {
    // Recording: every point gets a chain (an empty one where nothing is attached), so that
    // every wrapper takes the policed path and records its call.
    let recording = crate::record::enabled();
    for (slot, id) in SLOTS.iter().zip(POINT_IDS.iter()) {
        let chain = chains.remove(id).or_else(|| recording.then(Chain::default));
        match chain {
            Some(chain) => {
                let chain = Arc::new(Published::new(chain));
                let ptr = Arc::as_ptr(&chain).cast_mut();
                slot.chain.store(Some(chain));
                slot.hint.store(ptr, Ordering::Release);
            }
            None => {
                slot.hint.store(null_mut(), Ordering::Release);
                slot.chain.store(None);
            }
        }
    }
    for id in chains.keys() {
        tracing::warn!(
            api_id = id,
            "programs for an attach point this shim does not know; ignored"
        );
    }
}

/// The chains published now, with their attach-point ids.
pub fn published() -> Vec<(u32, Arc<Published>)> {
    SLOTS
        .iter()
        .zip(POINT_IDS.iter())
        .filter_map(|(slot, id)| Some((*id, slot.chain.load_full()?)))
        .collect()
}

/// Publishes `new` for attach point `id` in place of `old`, unless another chain was
/// published there in between; returns whether it did. Calls in flight finish on `old`.
pub fn replace(id: u32, old: &Arc<Published>, new: Chain) -> bool {
    let Some(slot) = POINT_IDS
        .iter()
        .position(|p| *p == id)
        .and_then(|i| SLOTS.get(i))
    else {
        return false;
    };
    let new = Arc::new(Published::new(new));
    let ptr = Arc::as_ptr(&new).cast_mut();
    let prev = slot.chain.compare_and_swap(Arc::as_ptr(old), Some(new));
    let swapped = prev.as_ref().is_some_and(|p| Arc::ptr_eq(p, old));
    if swapped {
        slot.hint.store(ptr, Ordering::Release);
    }
    swapped
}

/// Sends every wrapper's next call to the slow path (which re-initialises a forked child);
/// async-signal-safe (atomic stores only).
pub fn force_slow_path() {
    for slot in &SLOTS {
        slot.hint.store(UNINIT, Ordering::Release);
    }
}

/// Makes every point unpoliced (initialisation found nothing to run or failed).
pub fn publish_nothing() {
    publish(BTreeMap::new());
}

/// Makes every point refuse every call (`GPUBPF_FAIL=closed` and the registry cannot be
/// read, so no policy can be enforced).
pub fn publish_all_broken() {
    publish(
        POINT_IDS
            .iter()
            .map(|&id| {
                (
                    id,
                    Chain {
                        broken: true,
                        ..Chain::default()
                    },
                )
            })
            .collect(),
    );
}
