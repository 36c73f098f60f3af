//! AFL target `db_page`: see [`agora_fuzz::db_page`].

fn main() {
    afl::fuzz!(|data: &[u8]| agora_fuzz::db_page(data));
}
