//! The gather and scatter paths must not allocate: a counting global allocator (counting
//! this thread only) watches a run of round trips after construction.

use ivp::{Gr, LaneView, MemTable, SuperGather, VBool, VecReg, Width};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only
// bumps a const-initialised thread-local counter, which itself never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `alloc`'s contract for `layout`; we pass it on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System.alloc` (through `alloc` above) for `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn gather_and_scatter_round_trips_do_not_allocate() {
    let port = MemTable::from_bytes((0..4096).map(|i| i as u8).collect());
    let mut hist = MemTable::zeroed(2048);
    let offsets = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32 * 37));
    let vb = VBool::from_lanes(LaneView::N2x32, 0x7fff);
    let mut sg = SuperGather::new();
    let mut sum = 0u64;
    let before = allocations();
    for i in 0..1000u64 {
        let v = sg.gather_t(Gr::GR0, Width::N2x32, i, &offsets, vb, &port);
        sum += u64::from(v.n_2x32()[1]);
        sg.gathera(Gr::GR1, Width::Nx8u, i, &offsets);
        sum += u64::from(sg.mgatherd(Gr::GR1, &v, &port).nx16()[0]);
        sg.scatterinc_t(&mut hist, Width::Nx16, 0, &offsets, vb);
        sg.scatterw(&mut hist);
    }
    assert_eq!(allocations(), before, "the hot path allocated");
    // N_2X32 lane 1 reads the 4 bytes at i + 37 * 4; NX8U lane 0 (offset 0) the byte at i.
    let lane1 = |i: u64| u32::from_le_bytes(std::array::from_fn(|j| (148 + i + j as u64) as u8));
    let expect: u64 = (0..1000u64).map(|i| u64::from(lane1(i)) + i % 256).sum();
    assert_eq!(sum, expect);
    // NX16 lanes 0..30 are enabled: even lanes 2k hit element 37k, odd lanes element 0.
    let element =
        |e: usize| u16::from_le_bytes([hist.as_bytes()[2 * e], hist.as_bytes()[2 * e + 1]]);
    assert_eq!(element(0), 16 * 1000);
    assert_eq!(element(37), 1000);
    assert_eq!(element(1), 0);
}
