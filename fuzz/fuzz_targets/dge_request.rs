//! Fuzzes the DGE request builder: a request with every field drawn from the input
//! (`hostsim::fuzz::dge::any_request`) is generated or refused, never a panic, and no
//! descriptor it yields reads or writes outside the fabric.
#![no_main]

use hostsim::fuzz::{dge, Rng};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (fabric, request) = dge::any_request(Rng::from_bytes(data));
    if let Err(e) = dge::check_any(&fabric, &request) {
        panic!("{e}");
    }
});
