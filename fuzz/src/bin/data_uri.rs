//! AFL target `data_uri`: see [`agora_fuzz::data_uri`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::data_uri(data));
}
