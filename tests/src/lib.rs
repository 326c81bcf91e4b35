//! # conformance — cross-crate integration and conformance helpers
//!
//! What the integration tests in `tests/tests/` share: [`Rng`], `hostsim fuzz`'s
//! deterministic generator (splitmix64), so a case is a pure function of its seed and a
//! failing seed reproduces exactly.
//!
//! The cross-route equivalence tests draw their stream cases from the fuzzer's one
//! generator (`hostsim::fuzz::oob::case`) and compare them with its one comparison
//! (`hostsim::fuzz::routes::Routes`), whose figures (`Routes::compare`'s `Stats`) they
//! print and assert on. The numpy-style expectations of the NKI-level tests are written
//! in the test files themselves, independently of everything here.

/// The fuzzer's splitmix64 generator: a case is a pure function of its seed.
pub use hostsim::fuzz::Rng;
