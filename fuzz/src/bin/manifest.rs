//! AFL target `manifest`: see [`agora_fuzz::manifest`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::manifest(data));
}
