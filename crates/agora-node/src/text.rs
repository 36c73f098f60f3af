//! Small text helpers the node's modules share: clipping text for prompts, logs and error
//! messages, and comparing member names.

/// `text`, cut after `max` characters (marked with `…`).
pub(crate) fn clip_to(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// The first `max` characters of `text`, unmarked: for the quotes in error messages.
pub(crate) fn first_chars(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Whether two member names name the same quantity: a word of four letters or more in common,
/// words split at `_`, `-` and camelCase.
pub(crate) fn same_quantity(a: &str, b: &str) -> bool {
    fn words(name: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut current = String::new();
        let mut previous_lower = false;
        for c in name.chars() {
            if (!c.is_alphanumeric() || (c.is_uppercase() && previous_lower)) && !current.is_empty()
            {
                words.push(std::mem::take(&mut current).to_lowercase());
            }
            previous_lower = c.is_lowercase();
            if c.is_alphanumeric() {
                current.push(c);
            }
        }
        if !current.is_empty() {
            words.push(current.to_lowercase());
        }
        words.retain(|word| word.len() >= 4);
        words
    }
    let theirs = words(b);
    words(a).iter().any(|word| theirs.contains(word))
}
