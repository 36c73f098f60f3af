//! AFL target `front_matter`: see [`agora_fuzz::front_matter`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::front_matter(data));
}
