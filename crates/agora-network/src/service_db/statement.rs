//! The gate in front of a service database: decides whether one statement written by an LLM may
//! run, before SQLite sees it.
//!
//! A small tokenizer (words, quoted identifiers, literals, punctuation; string literals, quoted
//! identifiers and comments are skipped as units, so a `;` or a keyword inside them means nothing)
//! feeds three checks: one statement only; it starts with SELECT, INSERT, UPDATE, DELETE or WITH;
//! and every table it names after FROM, JOIN, INTO, UPDATE or IN is one of the database's tables
//! or a common table expression the statement defines. Words that reach past those tables
//! (PRAGMA, ATTACH, the `sqlite_` schema tables, the `pragma_` table-valued functions,
//! `load_extension`) are refused wherever they appear outside a literal.
//!
//! This is not a SQL parser: it refuses what it cannot place rather than guessing, and SQLite
//! itself reports whatever else is wrong with a statement.

/// One token of a statement. Literals and punctuation keep no text: the checks only need names.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// An unquoted identifier or keyword, as written.
    Word(String),
    /// A quoted identifier (`"x"`, `[x]` or `` `x` ``): its inner text.
    Quoted(String),
    /// A string literal or a number.
    Literal,
    Semicolon,
    Open,
    Close,
    Comma,
    Dot,
    /// A plain `?` parameter placeholder.
    Placeholder,
    /// A numbered or named placeholder (`?1`, `:name`, `@name`, `$name`).
    NamedPlaceholder,
    /// Any other operator or punctuation.
    Other,
}

impl Token {
    /// The token as a name (an identifier, quoted or not), if it is one.
    fn name(&self) -> Option<&str> {
        match self {
            Token::Word(word) | Token::Quoted(word) => Some(word),
            _ => None,
        }
    }

    fn is_keyword(&self, keyword: &str) -> bool {
        matches!(self, Token::Word(word) if word.eq_ignore_ascii_case(keyword))
    }
}

/// The statements an LLM may run.
const ALLOWED_FIRST: [&str; 5] = ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"];

/// Keywords that never belong in a statement that only reads and writes rows.
const FORBIDDEN_KEYWORDS: [&str; 9] = [
    "PRAGMA", "ATTACH", "DETACH", "CREATE", "DROP", "ALTER", "VACUUM", "REINDEX", "ANALYZE",
];

/// Words that end a FROM clause's list of tables.
const FROM_LIST_END: [&str; 10] = [
    "WHERE",
    "GROUP",
    "ORDER",
    "LIMIT",
    "HAVING",
    "WINDOW",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "RETURNING",
];

/// How many plain `?` placeholders the statement's `tokens` have (literals and comments are
/// not tokens). `Err` when it uses numbered or named placeholders, which bound values are not
/// matched to.
fn placeholders_in(tokens: &[Token]) -> Result<usize, String> {
    if tokens.contains(&Token::NamedPlaceholder) {
        return Err(
            "only plain `?` placeholders take params, not numbered or named ones (`?1`, `:name`)"
                .into(),
        );
    }
    Ok(tokens.iter().filter(|t| **t == Token::Placeholder).count())
}

/// Checks one statement against the database's `tables`; `Err` holds why it is refused, in words
/// an LLM can act on. The statement's placeholders are checked first against `values` (the count
/// of values to bind): plain `?` ones only, exactly as many as the values, so that no `?` is
/// left to match NULL.
pub(super) fn check(sql: &str, tables: &[String], values: usize) -> Result<(), String> {
    let mut tokens = tokenize(sql)?;
    let wanted = placeholders_in(&tokens)?;
    if wanted != values {
        return Err(format!(
            "the statement has {wanted} `?` placeholder(s) but {values} value(s) were given \
             in params: give one value per `?`, in order, or write the values into the \
             statement"
        ));
    }
    while tokens.last() == Some(&Token::Semicolon) {
        tokens.pop();
    }
    if tokens.contains(&Token::Semicolon) {
        return Err("only one statement at a time: found a second statement after `;`".into());
    }
    let first = match tokens.first() {
        None => return Err("the statement is empty".into()),
        Some(first) => first,
    };
    if !ALLOWED_FIRST
        .iter()
        .any(|keyword| first.is_keyword(keyword))
    {
        return Err(format!(
            "only SELECT, INSERT, UPDATE, DELETE or WITH statements are allowed, not `{}`",
            first.name().unwrap_or("(punctuation)")
        ));
    }
    for token in &tokens {
        let Some(name) = token.name() else { continue };
        let lower = name.to_ascii_lowercase();
        if matches!(token, Token::Word(_))
            && FORBIDDEN_KEYWORDS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(name))
        {
            return Err(format!("`{name}` is not allowed here"));
        }
        if lower.starts_with("sqlite_") || lower.starts_with("pragma_") {
            return Err(format!(
                "`{name}`: SQLite's own schema objects are not available; the tables are: {}",
                tables.join(", ")
            ));
        }
        if lower == "load_extension" {
            return Err("`load_extension` is not allowed".into());
        }
    }
    let known = Known {
        tables,
        ctes: cte_names(&tokens),
    };
    for (at, token) in tokens.iter().enumerate() {
        let previous = at.checked_sub(1).and_then(|p| tokens.get(p));
        if token.is_keyword("FROM") && !previous.is_some_and(|p| p.is_keyword("DISTINCT")) {
            check_from_list(&tokens, at + 1, &known)?;
        } else if token.is_keyword("INTO") || token.is_keyword("IN") {
            // `x IN (...)` is a list or a subquery; `x IN name` names a table.
            if let Some(next) = tokens.get(at + 1).filter(|next| next.name().is_some()) {
                known.check_reference(next, tokens.get(at + 2))?;
            }
        } else if token.is_keyword("UPDATE") {
            let mut next = at + 1;
            // `UPDATE OR IGNORE t`; an upsert's `DO UPDATE SET` names no table.
            if tokens.get(next).is_some_and(|t| t.is_keyword("OR")) {
                next += 2;
            }
            match tokens.get(next) {
                Some(t) if t.is_keyword("SET") => {}
                Some(t) => known.check_reference(t, tokens.get(next + 1))?,
                None => {}
            }
        }
    }
    Ok(())
}

/// The names a statement may use as tables.
struct Known<'a> {
    tables: &'a [String],
    ctes: Vec<String>,
}

impl Known<'_> {
    /// Checks the token at a place where a table belongs; `next` is the token after it.
    fn check_reference(&self, token: &Token, next: Option<&Token>) -> Result<(), String> {
        let Some(name) = token.name() else {
            // Punctuation where a table belongs: SQLite reports the syntax error.
            return Ok(());
        };
        if next == Some(&Token::Dot) {
            return Err(format!(
                "`{name}.`: schema-qualified names are not allowed; the tables are: {}",
                self.tables.join(", ")
            ));
        }
        let known = self.tables.iter().chain(&self.ctes);
        if known.into_iter().any(|t| t.eq_ignore_ascii_case(name)) {
            Ok(())
        } else {
            Err(format!(
                "`{name}` is not a table of this database; the tables are: {}",
                self.tables.join(", ")
            ))
        }
    }
}

/// Checks the tables of the FROM clause whose list starts at `start`: the first item, every item
/// after a comma or a JOIN, and the items of a parenthesised join. Subqueries are skipped here:
/// their own FROM is checked when the outer loop reaches it.
fn check_from_list(tokens: &[Token], start: usize, known: &Known) -> Result<(), String> {
    // One entry per open parenthesis (and the clause itself): whether that level is a list of
    // tables (true) or an expression or subquery (false).
    let mut levels = vec![true];
    let mut expecting_table = true;
    for (at, token) in tokens.iter().enumerate().skip(start) {
        let in_list = levels.last().copied().unwrap_or(false);
        match token {
            Token::Open => {
                let next = tokens.get(at + 1);
                let subquery = next.is_some_and(|n| {
                    n.is_keyword("SELECT") || n.is_keyword("WITH") || n.is_keyword("VALUES")
                });
                let join = expecting_table && !subquery;
                levels.push(join);
                expecting_table = join;
            }
            Token::Close => {
                levels.pop();
                expecting_table = false;
                if levels.is_empty() {
                    return Ok(());
                }
            }
            Token::Comma if in_list => expecting_table = true,
            Token::Word(word) if in_list && !expecting_table => {
                if word.eq_ignore_ascii_case("JOIN") {
                    expecting_table = true;
                } else if levels.len() == 1
                    && FROM_LIST_END.iter().any(|k| k.eq_ignore_ascii_case(word))
                {
                    return Ok(());
                }
            }
            Token::Word(_) | Token::Quoted(_) if expecting_table => {
                known.check_reference(token, tokens.get(at + 1))?;
                expecting_table = false;
            }
            _ => expecting_table = false,
        }
    }
    Ok(())
}

/// The names of the common table expressions a statement defines: `name AS (`, or
/// `name (columns) AS (`, with `[NOT] MATERIALIZED` allowed before the parenthesis.
fn cte_names(tokens: &[Token]) -> Vec<String> {
    let mut names = Vec::new();
    for (at, token) in tokens.iter().enumerate() {
        let Some(name) = token.name() else { continue };
        let mut after = at + 1;
        if tokens.get(after) == Some(&Token::Open) {
            match matching_close(tokens, after) {
                Some(close) => after = close + 1,
                None => continue,
            }
        }
        if !tokens.get(after).is_some_and(|t| t.is_keyword("AS")) {
            continue;
        }
        let body = tokens.get(after + 1);
        if body == Some(&Token::Open)
            || body.is_some_and(|t| t.is_keyword("MATERIALIZED") || t.is_keyword("NOT"))
        {
            names.push(name.to_string());
        }
    }
    names
}

/// The index of the `)` that closes the `(` at `open`.
fn matching_close(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (at, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `sql` writes: `Some(true)` for an INSERT, UPDATE or DELETE (a WITH whose body holds
/// one), `Some(false)` for a statement that only reads, `None` when it cannot be read.
pub(super) fn writes(sql: &str) -> Option<bool> {
    let tokens = tokenize(sql).ok()?;
    let first = tokens.first()?;
    let writing = |t: &Token| {
        ["INSERT", "UPDATE", "DELETE", "REPLACE"]
            .iter()
            .any(|k| t.is_keyword(k))
    };
    if first.is_keyword("SELECT") {
        Some(false)
    } else if first.is_keyword("WITH") {
        Some(tokens.iter().any(writing))
    } else if writing(first) {
        Some(true)
    } else {
        None
    }
}

/// Splits a statement into tokens; comments vanish. An unterminated literal, quoted identifier
/// or block comment is refused.
fn tokenize(sql: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    // The index just past the first `close` at or after `from`.
    let find = |from: usize, close: char| chars[from..].iter().position(|&c| c == close);
    while let Some(&c) = chars.get(at) {
        let next = chars.get(at + 1).copied();
        if c.is_whitespace() {
            at += 1;
        } else if c == '-' && next == Some('-') {
            at = find(at, '\n').map_or(chars.len(), |n| at + n + 1);
        } else if c == '/' && next == Some('*') {
            let end = chars[at + 2..].windows(2).position(|w| w == ['*', '/']);
            at = at + 2 + end.ok_or("unterminated /* comment")? + 2;
        } else if c == '\'' {
            // A string literal; `''` inside it is an escaped quote.
            let mut end = at + 1;
            loop {
                end += find(end, '\'').ok_or("unterminated string literal")?;
                if chars.get(end + 1) == Some(&'\'') {
                    end += 2;
                } else {
                    break;
                }
            }
            tokens.push(Token::Literal);
            at = end + 1;
        } else if matches!(c, '"' | '`' | '[') {
            let close = if c == '[' { ']' } else { c };
            let mut text = String::new();
            let mut end = at + 1;
            loop {
                let n = find(end, close).ok_or("unterminated quoted identifier")?;
                text.extend(&chars[end..end + n]);
                end += n;
                // A doubled closing quote stands for itself (not inside brackets).
                if close != ']' && chars.get(end + 1) == Some(&close) {
                    text.push(close);
                    end += 2;
                } else {
                    break;
                }
            }
            tokens.push(Token::Quoted(text));
            at = end + 1;
        } else if c.is_ascii_digit() || (c == '.' && next.is_some_and(|n| n.is_ascii_digit())) {
            while chars
                .get(at)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
            {
                at += 1;
            }
            tokens.push(Token::Literal);
        } else if c.is_alphabetic() || c == '_' || !c.is_ascii() {
            let start = at;
            while chars
                .get(at)
                .is_some_and(|&c| c.is_alphanumeric() || c == '_' || c == '$' || !c.is_ascii())
            {
                at += 1;
            }
            tokens.push(Token::Word(chars[start..at].iter().collect()));
        } else if c == '?' && !next.is_some_and(|n| n.is_ascii_digit()) {
            tokens.push(Token::Placeholder);
            at += 1;
        } else if matches!(c, '?' | ':' | '@' | '$')
            && next.is_some_and(|n| n.is_alphanumeric() || n == '_')
        {
            at += 1;
            while chars
                .get(at)
                .is_some_and(|&c| c.is_alphanumeric() || c == '_')
            {
                at += 1;
            }
            tokens.push(Token::NamedPlaceholder);
        } else {
            tokens.push(match c {
                ';' => Token::Semicolon,
                '(' => Token::Open,
                ')' => Token::Close,
                ',' => Token::Comma,
                '.' => Token::Dot,
                _ => Token::Other,
            });
            at += 1;
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<String> {
        vec!["Rooms".into(), "Bookings".into()]
    }

    fn allowed(sql: &str) -> bool {
        check(sql, &tables(), 0).is_ok()
    }

    fn placeholders(sql: &str) -> Result<usize, String> {
        placeholders_in(&tokenize(sql)?)
    }

    #[test]
    fn placeholders_are_counted_outside_literals_and_named_ones_refused() {
        assert_eq!(
            placeholders("SELECT * FROM Rooms WHERE A = ? AND B = ?"),
            Ok(2)
        );
        assert_eq!(
            placeholders("SELECT '?' FROM Rooms -- ?\n WHERE A = ?"),
            Ok(1)
        );
        assert_eq!(placeholders("SELECT * FROM Rooms"), Ok(0));
        assert!(placeholders("SELECT * FROM Rooms WHERE A = ?1").is_err());
        assert!(placeholders("SELECT * FROM Rooms WHERE A = :a").is_err());
        assert!(placeholders("SELECT * FROM Rooms WHERE A = @a").is_err());
    }

    #[test]
    fn a_statement_writes_when_it_inserts_updates_or_deletes() {
        assert_eq!(
            writes("SELECT SkiId FROM Skis WHERE SkiType = 'insert'"),
            Some(false)
        );
        assert_eq!(
            writes("  insert INTO SkiRentals VALUES ('A', ?, ?)"),
            Some(true)
        );
        assert_eq!(
            writes("/* book */ UPDATE Screenings SET TicketsLeft = 1"),
            Some(true)
        );
        assert_eq!(writes("DELETE FROM Bookings"), Some(true));
        assert_eq!(writes("WITH x AS (SELECT 1) SELECT * FROM x"), Some(false));
        assert_eq!(
            writes("WITH x AS (SELECT 1) INSERT INTO Rooms SELECT * FROM x"),
            Some(true)
        );
        assert_eq!(writes("PRAGMA table_info(Rooms)"), None);
        assert_eq!(writes("SELECT 'unterminated"), None);
    }

    #[test]
    fn tokenizer_skips_literals_identifiers_and_comments() {
        let tokens =
            tokenize("SELECT 'a;b''c', \"x\"\"y\", [z] -- ; DROP\n/* ; */ 1.5e3;").unwrap();
        assert_eq!(
            tokens,
            vec![
                Token::Word("SELECT".into()),
                Token::Literal,
                Token::Comma,
                Token::Quoted("x\"y".into()),
                Token::Comma,
                Token::Quoted("z".into()),
                Token::Literal,
                Token::Semicolon,
            ]
        );
        assert!(tokenize("SELECT 'open").is_err());
        assert!(tokenize("SELECT /* open").is_err());
        assert!(tokenize("SELECT \"open").is_err());
    }

    #[test]
    fn accepts_ordinary_statements() {
        for sql in [
            "SELECT * FROM Rooms",
            "  -- leading comment\n select r.x from rooms r where r.y = 'a;b';  ",
            "SELECT * FROM Rooms AS r JOIN Bookings b ON r.RoomNumber = b.RoomNumber",
            "SELECT * FROM Rooms, Bookings WHERE Rooms.a = Bookings.a ORDER BY a, b LIMIT 5, 10",
            "SELECT * FROM (Rooms JOIN Bookings USING (RoomNumber))",
            "SELECT * FROM (SELECT a, b FROM Rooms) t, \"Bookings\"",
            "SELECT * FROM Rooms WHERE a IN (SELECT a FROM Bookings) AND b IN (1, 2)",
            "SELECT a IS NOT DISTINCT FROM b FROM Rooms",
            "WITH free(n) AS (SELECT 1), busy AS (SELECT * FROM Bookings) SELECT * FROM free, busy",
            "INSERT OR IGNORE INTO Bookings (a, b) VALUES (1, 'x') RETURNING *",
            "INSERT INTO Rooms (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2",
            "UPDATE OR REPLACE [Rooms] SET a = 1 FROM Bookings WHERE Rooms.a = Bookings.a",
            "DELETE FROM Bookings WHERE StartDate < '2024-01-01'",
        ] {
            assert_eq!(check(sql, &tables(), 0), Ok(()), "{sql}");
        }
    }

    #[test]
    fn refuses_what_reaches_past_the_tables() {
        for sql in [
            "",
            "SELECT 1; SELECT 2",
            "PRAGMA table_info(Rooms)",
            "SELECT * FROM sqlite_master",
            "SELECT * FROM \"sqlite_schema\"",
            "SELECT * FROM pragma_table_info('Rooms')",
            "SELECT load_extension('x')",
            "ATTACH DATABASE 'x.db' AS x",
            "DROP TABLE Rooms",
            "SELECT * FROM Guests",
            "SELECT * FROM Rooms JOIN Guests ON 1",
            "SELECT * FROM Rooms, Guests",
            "SELECT * FROM (Rooms, Guests)",
            "SELECT * FROM main.Rooms",
            "SELECT * FROM Rooms WHERE a IN Guests",
            "INSERT INTO Guests VALUES (1)",
            "UPDATE Guests SET a = 1",
            "DELETE FROM Guests",
            "REPLACE INTO Rooms VALUES (1)",
        ] {
            assert!(!allowed(sql), "{sql}");
        }
    }
}
