//! AFL target `db_post`: see [`agora_fuzz::db_post`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::db_post(data));
}
