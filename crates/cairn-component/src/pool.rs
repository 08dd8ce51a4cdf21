//! The pooling instance allocator's settings: how many instances, memories
//! and tables the pool reserves, how large each may grow, and how a slot
//! is made clean for its next instance.

/// How many dirty bytes of a pooled linear memory are reset in place when
/// its instance goes (a sixteenth of that for a table); past it, the rest
/// is unmapped.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// A pool for `instances` live instances whose memories may grow to
/// `max_memory` bytes.
///
/// A slot given back is reset by writing its dirty pages back to the
/// module's image (found with Linux's `PAGEMAP_SCAN` where the kernel has
/// it), up to [`KEEP_RESIDENT_BYTES`], instead of unmapping them: no TLB
/// shootdown across cores for every instance dropped, and no page faults
/// when the slot is used again. The price is resident memory: each idle
/// slot (at most 64) keeps the pages its last instance dirtied.
pub(crate) fn config(instances: u32, max_memory: u64) -> wasmtime::PoolingAllocationConfig {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    let n = instances;
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(8))
        .total_memories(n.saturating_mul(2))
        .total_tables(n.saturating_mul(4))
        .total_stacks(n)
        .max_core_instances_per_component(32)
        .max_memories_per_component(4)
        .max_tables_per_component(8)
        .max_memory_size(max_memory as usize)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(4 << 20)
        .table_elements(100_000)
        .max_unused_warm_slots(64)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES / 16);
    pool
}
