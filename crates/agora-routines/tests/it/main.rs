//! agora-routines's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod artifacts;
mod common;
mod compiled_routines;
mod js_routines;
mod programs;
mod sandbox;
