//! AFL target `envelope`: see [`agora_fuzz::envelope`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::envelope(data));
}
