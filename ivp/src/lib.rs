//! # ivp
//!
//! (being built)
