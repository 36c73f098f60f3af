//! AFL target `negotiation`: see [`agora_fuzz::negotiation`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::negotiation(data));
}
