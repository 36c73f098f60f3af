//! Taking a rejecting check out of a candidate routine.
//!
//! Small models like to guard a routine with checks such as
//! `if (!r1 || !r1.precipitation_mm) { return { error: "Invalid response" }; }`, which reject a
//! perfectly valid request as soon as a value is `0` or empty. Told so, a 1.5B model tends to
//! write the same check again, word for word. So when a candidate answers a valid example with an
//! error reply, the programmer finds the `if` statements whose `return` may have produced that
//! error (its text is in the statement) and tries taking each out; an edit is examined like any
//! other candidate, and kept only where it does better. Everything else in the code stays as the model
//! wrote it.
//!
//! The scan knows just enough JavaScript to do this safely: string, template and regular
//! comment text is skipped when matching brackets, and a check followed by `else` is left alone
//! (taking it out would change what the `else` does).

/// One edit per `if` statement that returns `error_text`, in source order: the code without
/// that statement, and the statement's condition (for the report). Empty when there is none.
pub(crate) fn without_rejecting_checks(source: &str, error_text: &str) -> Vec<(String, String)> {
    let mut edits = Vec::new();
    if error_text.trim().is_empty() {
        return edits;
    }
    let code = Code::new(source);
    let mut from = 0;
    while let Some(start) = code.next_keyword("if", from) {
        from = start + 2;
        let Some(statement) = code.if_statement(start) else {
            continue;
        };
        let body = &source[statement.body.clone()];
        if !body.contains("return") || !body.contains(error_text) {
            continue;
        }
        if code.next_word_is(statement.body.end, "else") {
            continue;
        }
        let condition = source[statement.condition.clone()].trim().to_string();
        edits.push((code.cut(start, statement.body.end), condition));
    }
    edits
}

/// An `if` statement's parts, as byte ranges of the source.
struct IfStatement {
    /// Inside the parentheses.
    condition: std::ops::Range<usize>,
    /// The consequent: a `{ ... }` block or one statement up to its `;`.
    body: std::ops::Range<usize>,
}

/// The source with, for each byte, whether it is code (not inside a string, template or
/// comment).
struct Code<'a> {
    source: &'a str,
    is_code: Vec<bool>,
}

impl<'a> Code<'a> {
    fn new(source: &'a str) -> Self {
        let bytes = source.as_bytes();
        let mut is_code = vec![true; bytes.len()];
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            let end = match bytes[i] {
                quote @ (b'"' | b'\'' | b'`') => Some(string_end(bytes, i, quote)),
                b'/' if rest.starts_with(b"//") => Some(
                    bytes[i..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(bytes.len(), |p| i + p),
                ),
                b'/' if rest.starts_with(b"/*") => Some(
                    source[i + 2..]
                        .find("*/")
                        .map_or(bytes.len(), |p| i + 2 + p + 2),
                ),
                _ => None,
            };
            match end {
                Some(end) => {
                    is_code[i..end].iter_mut().for_each(|b| *b = false);
                    i = end.max(i + 1);
                }
                None => i += 1,
            }
        }
        Self { source, is_code }
    }

    /// The next place at or after `from` where `word` stands as a keyword in code.
    fn next_keyword(&self, word: &str, from: usize) -> Option<usize> {
        let bytes = self.source.as_bytes();
        let mut at = from;
        while let Some(found) = self.source.get(at..)?.find(word) {
            let start = at + found;
            let end = start + word.len();
            let before_ok = start == 0 || !is_word_byte(bytes[start - 1]);
            let after_ok = end >= bytes.len() || !is_word_byte(bytes[end]);
            if before_ok && after_ok && self.is_code[start] {
                return Some(start);
            }
            at = start + 1;
        }
        None
    }

    fn next_word_is(&self, from: usize, word: &str) -> bool {
        let rest = self.source.get(from..).unwrap_or_default().trim_start();
        rest.starts_with(word)
            && !rest
                .as_bytes()
                .get(word.len())
                .is_some_and(|&b| is_word_byte(b))
    }

    fn if_statement(&self, start: usize) -> Option<IfStatement> {
        let open = self.skip_space(start + 2);
        if self.source.as_bytes().get(open) != Some(&b'(') {
            return None;
        }
        let close = self.matching(open, b'(', b')')?;
        let body_start = self.skip_space(close + 1);
        let body_end = match self.source.as_bytes().get(body_start)? {
            b'{' => self.matching(body_start, b'{', b'}')? + 1,
            _ => self.statement_end(body_start)?,
        };
        Some(IfStatement {
            condition: open + 1..close,
            body: body_start..body_end,
        })
    }

    fn skip_space(&self, mut at: usize) -> usize {
        let bytes = self.source.as_bytes();
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    }

    /// The index of the bracket closing the one at `open`.
    fn matching(&self, open: usize, opening: u8, closing: u8) -> Option<usize> {
        let bytes = self.source.as_bytes();
        let mut depth = 0usize;
        for (at, &byte) in bytes.iter().enumerate().skip(open) {
            if !self.is_code[at] {
                continue;
            }
            if byte == opening {
                depth += 1;
            } else if byte == closing {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
        }
        None
    }

    /// Just past the `;` ending the statement at `start` (brackets inside it matched).
    fn statement_end(&self, start: usize) -> Option<usize> {
        let bytes = self.source.as_bytes();
        let mut depth = 0i64;
        for (at, &byte) in bytes.iter().enumerate().skip(start) {
            if !self.is_code[at] {
                continue;
            }
            match byte {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth < 0 {
                        return None;
                    }
                }
                b';' if depth == 0 => return Some(at + 1),
                _ => {}
            }
        }
        None
    }

    /// The source without `start..end`, and without the line that leaves blank.
    fn cut(&self, start: usize, end: usize) -> String {
        let line_start = self.source[..start].rfind('\n').map_or(0, |p| p + 1);
        let line_end = self.source[end..]
            .find('\n')
            .map_or(self.source.len(), |p| end + p + 1);
        let before_blank = self.source[line_start..start].trim().is_empty();
        let after_blank = self.source[end..line_end].trim().is_empty();
        if before_blank && after_blank {
            format!("{}{}", &self.source[..line_start], &self.source[line_end..])
        } else {
            format!("{}{}", &self.source[..start], &self.source[end..])
        }
    }
}

/// The index just past the string or template starting at `start`.
fn string_end(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            byte if byte == quote => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$'
}

/// The text to look for in the code: the longest string in an error reply (its message).
pub(crate) fn error_text(reply: &serde_json::Value) -> Option<String> {
    fn strings<'v>(value: &'v serde_json::Value, found: &mut Vec<&'v str>) {
        match value {
            serde_json::Value::String(text) => found.push(text),
            serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, found)),
            serde_json::Value::Object(members) => members.values().for_each(|v| strings(v, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    strings(reply.get("error")?, &mut found);
    found
        .into_iter()
        .filter(|text| text.chars().count() >= 3)
        .max_by_key(|text| text.len())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARDED: &str = r#"function handle(body) {
  const request = JSON.parse(body);
  if (!request || !request.location || !request.date) {
    return { error: "Missing location or date" };
  }
  const r1 = callTool("weather_forecast", { location: request.location, date: request.date });
  if (!r1 || !r1.temperature_c || !r1.precipitation_mm || !r1.condition) {
    return { error: "Invalid weather forecast response" };
  }
  return { temperature: r1.temperature_c, precipitation: r1.precipitation_mm };
}"#;

    /// Asserts that `source` has one edit for `error_text`: `condition` taken out, which
    /// leaves `code`.
    fn assert_one_edit(source: &str, error_text: &str, condition: &str, code: &str) {
        let edits = without_rejecting_checks(source, error_text);
        assert_eq!(edits.len(), 1, "{edits:?}");
        let (edited, taken_out) = &edits[0];
        assert_eq!(taken_out, condition);
        assert_eq!(edited, code);
    }

    #[test]
    fn the_check_returning_the_error_is_taken_out_and_the_rest_kept() {
        assert_one_edit(
            GUARDED,
            "Invalid weather forecast response",
            "!r1 || !r1.temperature_c || !r1.precipitation_mm || !r1.condition",
            r#"function handle(body) {
  const request = JSON.parse(body);
  if (!request || !request.location || !request.date) {
    return { error: "Missing location or date" };
  }
  const r1 = callTool("weather_forecast", { location: request.location, date: request.date });
  return { temperature: r1.temperature_c, precipitation: r1.precipitation_mm };
}"#,
        );
    }

    #[test]
    fn a_check_without_braces_is_taken_out_up_to_its_semicolon() {
        let source = "function handle(b) {\n  const r = callTool(\"t\", {});\n  if (!r.n) return { error: \"no (n); here\" };\n  return { n: r.n };\n}";
        assert_one_edit(
            source,
            "no (n); here",
            "!r.n",
            "function handle(b) {\n  const r = callTool(\"t\", {});\n  return { n: r.n };\n}",
        );
    }

    #[test]
    fn brackets_and_keywords_inside_strings_and_comments_are_not_code() {
        let source = "function handle(b) {\n  // if (x) { return { error: \"E\" }; }\n  const s = \"if (\";\n  if (b === \")}\") { return { error: \"E\" }; }\n  return s;\n}";
        assert_one_edit(
            source,
            "E",
            "b === \")}\"",
            "function handle(b) {\n  // if (x) { return { error: \"E\" }; }\n  const s = \"if (\";\n  return s;\n}",
        );
    }

    #[test]
    fn a_check_with_an_else_or_another_message_is_left_alone() {
        let with_else =
            "function handle(b) {\n  if (!b) { return { error: \"E\" }; } else { return b; }\n}";
        assert!(without_rejecting_checks(with_else, "E").is_empty());
        assert!(without_rejecting_checks(GUARDED, "Something else entirely").is_empty());
        assert!(without_rejecting_checks(GUARDED, " ").is_empty());
        assert!(without_rejecting_checks("if (", "x").is_empty());
        assert!(without_rejecting_checks("if (a) { return \"x\"", "x").is_empty());
        // A word that merely contains `if` is no keyword.
        assert!(
            without_rejecting_checks("const gif = (1); notif (a) return \"x\";", "x").is_empty()
        );
    }

    #[test]
    fn every_check_returning_the_same_text_is_an_edit_of_its_own() {
        let source = "function handle(b) {\n  if (!b) return { error: \"Bad\" };\n  const r = callTool(\"t\", {});\n  if (!r.n) return { error: \"Bad\" };\n  return r;\n}";
        let edits = without_rejecting_checks(source, "Bad");
        let conditions: Vec<&str> = edits.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(conditions, ["!b", "!r.n"]);
        assert!(!edits[1].0.contains("!r.n") && edits[1].0.contains("!b"));
    }

    #[test]
    fn the_error_text_is_the_longest_string_in_the_error_member() {
        let reply = serde_json::json!({"error": {"code": "bad", "message": "Invalid forecast"}});
        assert_eq!(error_text(&reply).as_deref(), Some("Invalid forecast"));
        let plain = serde_json::json!({"error": "No data"});
        assert_eq!(error_text(&plain).as_deref(), Some("No data"));
        assert!(error_text(&serde_json::json!({"error": true})).is_none());
        assert!(error_text(&serde_json::json!({"ok": "fine here"})).is_none());
    }
}
