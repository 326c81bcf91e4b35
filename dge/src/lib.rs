//! # dge
//!
//! (being built)
