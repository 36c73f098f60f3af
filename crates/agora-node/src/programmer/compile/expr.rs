//! The expressions a compiled routine computes its values with, and how each is written in
//! JavaScript.

use crate::programmer::dataflow::{is_identifier, object_key};
use serde_json::Value;

/// What a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Root {
    /// The request, parsed from JSON (`request`).
    Request,
    /// The request as text (`body`).
    Body,
    /// The result of the trace's call at this index (`r1` for index 0).
    Step(usize),
}

/// One step into a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A value inside the request or a result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Path {
    pub(crate) root: Root,
    pub(crate) segs: Vec<Seg>,
}

impl Path {
    pub(crate) fn root(root: Root) -> Self {
        Self {
            root,
            segs: Vec::new(),
        }
    }

    pub(crate) fn child(&self, seg: Seg) -> Self {
        let mut segs = self.segs.clone();
        segs.push(seg);
        Self {
            root: self.root,
            segs,
        }
    }

    /// Whether `self` is `other` or inside it.
    pub(crate) fn within(&self, other: &Path) -> bool {
        self.root == other.root && self.segs.starts_with(&other.segs)
    }

    /// The value at this path, in `value` (the path's root).
    pub(crate) fn get<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        let mut here = value;
        for seg in &self.segs {
            here = match seg {
                Seg::Key(key) => here.get(key)?,
                Seg::Index(index) => here.get(index)?,
            };
        }
        Some(here)
    }

    /// JavaScript that reads it, or gives `undefined` where a step is missing (`r1?.[0]?.x`).
    pub(crate) fn js_optional(&self) -> String {
        let mut text = Path::root(self.root).js();
        for seg in &self.segs {
            match seg {
                Seg::Key(key) if is_identifier(key) => text.push_str(&format!("?.{key}")),
                Seg::Key(key) => text.push_str(&format!("?.[{}]", Value::String(key.clone()))),
                Seg::Index(index) => text.push_str(&format!("?.[{index}]")),
            }
        }
        text
    }

    /// JavaScript that reads it.
    pub(crate) fn js(&self) -> String {
        let mut text = match self.root {
            Root::Request => "request".to_string(),
            Root::Body => "body".to_string(),
            Root::Step(index) => format!("r{}", index + 1),
        };
        for seg in &self.segs {
            match seg {
                Seg::Key(key) if is_identifier(key) => {
                    text.push('.');
                    text.push_str(key);
                }
                Seg::Key(key) => text.push_str(&format!("[{}]", Value::String(key.clone()))),
                Seg::Index(index) => text.push_str(&format!("[{index}]")),
            }
        }
        text
    }
}

/// A piece of a template string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    Read(Path),
    AddDays(Path, i64),
}

/// How a value is computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A value of the request or of a result.
    Read(Path),
    /// The same value every time.
    Literal(Value),
    /// A string with values inside.
    Template(Vec<Piece>),
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
    /// One member of every row of a result array (the whole row for `None`).
    Rows(Path, Option<String>),
    /// An empty array that the rows of this (empty) result would also give.
    AnyRows(Path),
    /// A date this many days after another.
    AddDays(Path, i64),
    /// A number times a factor.
    Scale(Path, f64),
    /// A number plus an amount.
    Shift(Path, f64),
    /// A piece of a string split at a separator.
    Part {
        source: Path,
        separator: String,
        index: usize,
        trim: bool,
    },
}

impl Expr {
    /// The expression both explanations allow, if they are compatible: equal, or an empty
    /// array's rows against rows of the same source.
    pub(crate) fn meet(&self, other: &Expr) -> Option<Expr> {
        match (self, other) {
            (Expr::AnyRows(a), Expr::Rows(b, _)) if a == b => Some(other.clone()),
            (Expr::Rows(a, _), Expr::AnyRows(b)) if a == b => Some(self.clone()),
            (Expr::Literal(a), Expr::Literal(b)) => {
                crate::programmer::exam::json_equivalent(a, b).then(|| self.clone())
            }
            _ => (self == other).then(|| self.clone()),
        }
    }

    /// The paths it reads.
    pub(crate) fn reads(&self, out: &mut Vec<Path>) {
        match self {
            Expr::Read(path)
            | Expr::Rows(path, _)
            | Expr::AnyRows(path)
            | Expr::AddDays(path, _)
            | Expr::Scale(path, _)
            | Expr::Shift(path, _)
            | Expr::Part { source: path, .. } => out.push(path.clone()),
            Expr::Template(pieces) => {
                for piece in pieces {
                    if let Piece::Read(path) | Piece::AddDays(path, _) = piece {
                        out.push(path.clone());
                    }
                }
            }
            Expr::Object(members) => members.iter().for_each(|(_, e)| e.reads(out)),
            Expr::Array(items) => items.iter().for_each(|e| e.reads(out)),
            Expr::Literal(_) => {}
        }
    }

    /// Whether it reads nothing: the same value for every request.
    pub(crate) fn is_constant(&self) -> bool {
        let mut reads = Vec::new();
        self.reads(&mut reads);
        reads.is_empty()
    }

    /// The helper functions it needs (see `emit`).
    pub(crate) fn helpers(&self, out: &mut Vec<&'static str>) {
        match self {
            Expr::AddDays(..) => out.push("addDays"),
            Expr::Part { .. } => out.push("part"),
            Expr::Scale(..) | Expr::Shift(..) => out.push("round"),
            Expr::Template(pieces) if pieces.iter().any(|p| matches!(p, Piece::AddDays(..))) => {
                out.push("addDays")
            }
            Expr::Object(members) => members.iter().for_each(|(_, e)| e.helpers(out)),
            Expr::Array(items) => items.iter().for_each(|e| e.helpers(out)),
            _ => {}
        }
    }

    /// JavaScript that computes it.
    pub(crate) fn js(&self) -> String {
        match self {
            Expr::Read(path) => path.js(),
            Expr::Literal(value) => value.to_string(),
            Expr::Template(pieces) => {
                let mut text = String::from("`");
                for piece in pieces {
                    match piece {
                        Piece::Text(part) => text.push_str(
                            &part
                                .replace('\\', "\\\\")
                                .replace('`', "\\`")
                                .replace("${", "\\${"),
                        ),
                        Piece::Read(path) => text.push_str(&format!("${{{}}}", path.js())),
                        Piece::AddDays(path, days) => {
                            text.push_str(&format!("${{addDays({}, {days})}}", path.js()))
                        }
                    }
                }
                text.push('`');
                text
            }
            Expr::Object(members) if members.is_empty() => "{}".to_string(),
            Expr::Object(members) => {
                let members: Vec<String> = members
                    .iter()
                    .map(|(key, value)| format!("{}: {}", object_key(key), value.js()))
                    .collect();
                format!("{{ {} }}", members.join(", "))
            }
            Expr::Array(items) => {
                let items: Vec<String> = items.iter().map(Expr::js).collect();
                format!("[{}]", items.join(", "))
            }
            Expr::Rows(path, None) | Expr::AnyRows(path) => format!("{}.slice()", path.js()),
            Expr::Rows(path, Some(key)) => {
                let member = Path::root(Root::Body).child(Seg::Key(key.clone())).js();
                format!(
                    "{}.map((row) => row{})",
                    path.js(),
                    member.trim_start_matches("body")
                )
            }
            Expr::AddDays(path, days) => format!("addDays({}, {days})", path.js()),
            Expr::Scale(path, factor) => format!("round({} * {})", path.js(), number(*factor)),
            Expr::Shift(path, amount) => format!("round({} + {})", path.js(), number(*amount)),
            Expr::Part {
                source,
                separator,
                index,
                trim,
            } => {
                let part = format!(
                    "part({}, {}, {index})",
                    source.js(),
                    Value::String(separator.clone())
                );
                if *trim {
                    format!("{part}.trim()")
                } else {
                    part
                }
            }
        }
    }
}

fn number(x: f64) -> String {
    serde_json::Number::from_f64(x)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "0".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expressions_are_written_as_javascript() {
        let row = Path::root(Root::Step(0)).child(Seg::Index(0));
        let id = row.child(Seg::Key("SkiId".into()));
        let date = Path::root(Root::Request).child(Seg::Key("start date".into()));
        assert_eq!(id.js(), "r1[0].SkiId");
        assert_eq!(date.js(), "request[\"start date\"]");
        let template = Expr::Template(vec![
            Piece::Text("VALUES ('".into()),
            Piece::Read(id.clone()),
            Piece::Text("', `x`, '".into()),
            Piece::AddDays(date.clone(), 1),
            Piece::Text("')".into()),
        ]);
        assert_eq!(
            template.js(),
            "`VALUES ('${r1[0].SkiId}', \\`x\\`, '${addDays(request[\"start date\"], 1)}')`"
        );
        let reply = Expr::Object(vec![
            ("status".into(), Expr::Literal(json!("success"))),
            (
                "titles".into(),
                Expr::Rows(Path::root(Root::Step(1)), Some("Title".into())),
            ),
            ("price".into(), Expr::Scale(id, 1.2)),
        ]);
        assert_eq!(
            reply.js(),
            "{ status: \"success\", titles: r2.map((row) => row.Title), price: round(r1[0].SkiId * 1.2) }"
        );
    }

    #[test]
    fn rows_of_an_empty_result_meet_any_rows_of_it() {
        let source = Path::root(Root::Step(0));
        let rows = Expr::Rows(source.clone(), Some("Title".into()));
        let any = Expr::AnyRows(source);
        assert_eq!(any.meet(&rows), Some(rows.clone()));
        assert_eq!(rows.meet(&any), Some(rows.clone()));
        assert_eq!(
            Expr::Literal(json!(30)).meet(&Expr::Literal(json!(30.0))),
            Some(Expr::Literal(json!(30)))
        );
        assert_eq!(
            Expr::Literal(json!(30)).meet(&Expr::Literal(json!(31))),
            None
        );
    }
}
