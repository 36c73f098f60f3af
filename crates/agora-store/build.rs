//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds the SQL files at compile
//! time, and stable Rust gives proc macros no way to tell cargo which files they read.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
