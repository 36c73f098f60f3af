#![allow(clippy::unwrap_used)] // tests fail loudly by design

//! The judge's rules on known-right and known-wrong answers, and the generator's statistics.

mod generator;
mod judge;
