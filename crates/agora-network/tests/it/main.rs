//! agora-network's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod committed_runs;
mod defaults;
mod real_model_weather_demo;
mod report;
mod scaled_network;
mod service_db;
