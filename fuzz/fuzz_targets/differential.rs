//! The differential target: the input drives `hostsim fuzz`'s own generators
//! (`hostsim::fuzz::case_from_bytes`: the first byte picks ivp, dge, dma, oob or isa),
//! and the case must pass the same checks (routes agree byte for byte, closed forms
//! hold). Built with `-s none --no-trace-compares` (fuzz/README.md says why).
#![no_main]

use std::cell::RefCell;

use hostsim::fuzz::{case_from_bytes, Checker};
use libfuzzer_sys::fuzz_target;

thread_local! {
    /// The runtimes and engines, built once per process.
    static CHECKER: RefCell<Checker> = RefCell::new(Checker::new());
}

fuzz_target!(|data: &[u8]| {
    let input = case_from_bytes(data);
    CHECKER.with(|c| {
        if let Err((route, what)) = c.borrow_mut().check(&input) {
            panic!("{route:?}: {what}");
        }
    });
});
