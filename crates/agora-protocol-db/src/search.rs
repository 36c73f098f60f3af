//! Ranking catalogue entries against a query, by the words of their name and description.
//!
//! Deliberately simple: a query is split into lowercase words (letters and digits); each query
//! word scores where it best matches a word of the entry, a whole word more than a prefix
//! ("forecast" finds "forecasts") and the name more than the description. Words that match
//! only inside another word ("cast" in "forecast") score nothing. The store narrows candidates
//! by substring first, so ranking reads only entries that can match.

/// Most query words used; the rest are ignored.
pub(crate) const MAX_QUERY_WORDS: usize = 8;
/// Longest query word kept, in characters.
const MAX_WORD_CHARS: usize = 64;

/// The query's distinct lowercase words, in order, at most [`MAX_QUERY_WORDS`].
pub(crate) fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in words_of(query) {
        let word: String = word.chars().take(MAX_WORD_CHARS).collect();
        if !words.contains(&word) {
            words.push(word);
        }
        if words.len() == MAX_QUERY_WORDS {
            break;
        }
    }
    words
}

/// How well an entry matches the query words; 0 means not at all.
pub(crate) fn score(query: &[String], name: Option<&str>, description: Option<&str>) -> u32 {
    let name_words: Vec<String> = name.map(words_of).unwrap_or_default();
    let description_words: Vec<String> = description.map(words_of).unwrap_or_default();
    query
        .iter()
        .map(|word| {
            let in_name = best(word, &name_words, 4, 2);
            let in_description = best(word, &description_words, 2, 1);
            in_name.max(in_description)
        })
        .sum()
}

/// `whole` if `word` is one of `words`, `prefix` if it begins one, else 0.
fn best(word: &str, words: &[String], whole: u32, prefix: u32) -> u32 {
    if words.iter().any(|w| w == word) {
        whole
    } else if words.iter().any(|w| w.starts_with(word)) {
        prefix
    } else {
        0
    }
}

/// The lowercase words of `text`: runs of letters and digits.
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Vec<String> {
        query_words(text)
    }

    #[test]
    fn queries_become_distinct_lowercase_words() {
        assert_eq!(q("  Weather, FORECAST weather!"), ["weather", "forecast"]);
        assert_eq!(q("Café-Émile 42"), ["café", "émile", "42"]);
        assert!(q(" ,;- ").is_empty());
        assert_eq!(q("a b c d e f g h i j").len(), MAX_QUERY_WORDS);
    }

    #[test]
    fn whole_words_beat_prefixes_and_names_beat_descriptions() {
        let name = Some("Weather forecast");
        let description = Some("Daily forecasts for a city");
        assert_eq!(score(&q("weather"), name, description), 4);
        assert_eq!(score(&q("forecast"), name, description), 4);
        assert_eq!(score(&q("weath"), name, description), 2);
        assert_eq!(score(&q("city"), name, description), 2);
        assert_eq!(score(&q("dai"), name, description), 1);
        assert_eq!(score(&q("weather city"), name, description), 6);
    }

    #[test]
    fn inner_substrings_and_missing_metadata_score_nothing() {
        assert_eq!(score(&q("cast"), Some("Weather forecast"), None), 0);
        assert_eq!(score(&q("weather"), None, None), 0);
        assert_eq!(score(&q("WEATHER"), Some("weather"), None), 4);
    }
}
