//! AFL target `hash`: see [`agora_fuzz::hash`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::hash(data));
}
