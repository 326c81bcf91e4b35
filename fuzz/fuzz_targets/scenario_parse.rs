//! Fuzzes the scenario parser: any text as TOML and as JSON parses or fails with an
//! error (never a panic), and a parsed scenario written back as TOML parses to itself.
#![no_main]

use hostsim::scenario::{parse, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Toml, Format::Json] {
        let Ok(scenario) = parse("fuzz", text, format) else {
            continue;
        };
        let Ok(again) = scenario.to_toml() else {
            continue;
        };
        let back = parse("fuzz", &again, Format::Toml);
        assert_eq!(back.ok().as_ref(), Some(&scenario), "{again}");
    }
});
