//! The product's behaviour is its defaults, in one place: a node run with the shipped example
//! configuration answers and programs as the network demo's servers do, and both are the node's
//! defaults.

use agora_network::ServerSetup;
use agora_node::{ProgrammerConfig, ResponderConfig};
use serde::de::DeserializeOwned;

/// The table `[node.<name>]` of `node.example.toml`, read as the node reads it (a key left out
/// keeps its default).
fn example_table<T: DeserializeOwned>(name: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node.example.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let example: toml::Table = toml::from_str(&text).unwrap();
    let table = example["node"][name].clone();
    table.try_into().unwrap()
}

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap()
}

#[test]
fn the_example_configuration_answers_and_programs_as_the_demos_servers() {
    let servers = ServerSetup::default();
    let responder: ResponderConfig = example_table("responder");
    let programmer: ProgrammerConfig = example_table("programmer");
    assert_eq!(json(&responder), json(&servers.responder));
    assert_eq!(json(&programmer), json(&servers.programmer));
    assert_eq!(json(&servers.responder), json(&ResponderConfig::default()));
    assert_eq!(
        json(&servers.programmer),
        json(&ProgrammerConfig::default())
    );
}
