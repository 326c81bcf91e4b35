//! Fuzzes the ISA decoder: any bytes through `decode` and every generation's validity
//! check never panic, and a struct that decodes re-encodes to exactly its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = hostsim::fuzz::isa::check(data) {
        panic!("{e}");
    }
});
