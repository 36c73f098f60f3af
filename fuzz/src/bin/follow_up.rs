//! AFL target `follow_up`: see [`agora_fuzz::follow_up`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::follow_up(data));
}
