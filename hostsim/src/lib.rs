//! hostsim library (being built)
