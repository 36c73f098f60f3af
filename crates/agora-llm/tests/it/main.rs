//! agora-llm's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod local_server;
mod openai_backend;
mod real_model;
mod support;
