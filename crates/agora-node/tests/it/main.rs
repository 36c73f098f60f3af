//! agora-node's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod programmer;
mod protocol_fit;
mod real_model_fit;
mod receiver;
mod review;
mod routines;
mod shadow;
