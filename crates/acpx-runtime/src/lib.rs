//! # acpx-runtime
pub mod mapping;
