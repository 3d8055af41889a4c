//! Expand, then contract: which statements of a migration break the release
//! before, still running beside the new one on the migrated schema.
//!
//! Refused: dropping a table, a column, a function, view, type, trigger,
//! sequence, schema or domain, or a unique index or constraint (an old
//! binary's `ON CONFLICT` names it by its columns); any `RENAME`; changing
//! a column's type; `SET NOT NULL` on a column this file gives no default;
//! adding a `NOT NULL` column without a `DEFAULT`; dropping a default. What
//! a `DO` block runs is checked like the file's own statements; the body of
//! a function a migration creates runs later, when called, and is not.
//!
//! A migration that must take something away says why the release before
//! no longer needs it, on a line of its own: `-- contract: <reason>`. It
//! ships a release after the one that stopped using it.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

/// What a statement does to the release before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    DropTable,
    DropColumn,
    /// A function, view, type, trigger, … (its kind).
    DropObject(&'static str),
    DropUnique,
    Rename,
    ColumnType,
    SetNotNull,
    AddNotNull,
    DropDefault,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::DropTable => f.write_str("drops a table the release before reads and writes"),
            Rule::DropColumn => f.write_str("drops a column the release before may read or write"),
            Rule::DropObject(kind) => {
                write!(f, "drops a {kind} the release before may call or rely on")
            }
            Rule::DropUnique => f.write_str(
                "drops a unique index or constraint the release before's ON CONFLICT may infer",
            ),
            Rule::Rename => f.write_str("renames what the release before knows by its old name"),
            Rule::ColumnType => f.write_str("changes a column's type under the release before"),
            Rule::SetNotNull => f.write_str(
                "makes a column NOT NULL without giving it a default here: the release before may leave it out",
            ),
            Rule::AddNotNull => f.write_str(
                "adds a NOT NULL column without a DEFAULT: the release before's inserts leave it out",
            ),
            Rule::DropDefault => {
                f.write_str("drops a default the release before's inserts rely on")
            }
        }
    }
}

/// One refused statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    /// The statement, its words as the checker read them.
    pub statement: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A keyword or identifier, lowercased, quotes removed.
    Word(String),
    /// A dollar-quoted string: a function's or a `DO` block's body.
    Body(String),
    /// A string literal (its text is never SQL that runs here).
    Text,
    Punct(char),
}

fn tokens(sql: &str) -> Vec<Token> {
    let s: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && next == Some('-') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '\'' {
            let escapes = matches!(out.last(), Some(Token::Word(w)) if w == "e");
            i += 1;
            while i < s.len() {
                // A backslash escape (in an E'' string), or a doubled quote.
                let escaped =
                    (escapes && s[i] == '\\') || (s[i] == '\'' && s.get(i + 1) == Some(&'\''));
                if escaped {
                    i += 2;
                } else if s[i] == '\'' {
                    break;
                } else {
                    i += 1;
                }
            }
            i += 1;
            out.push(Token::Text);
        } else if c == '"' {
            let start = i + 1;
            i = start;
            while i < s.len() && !(s[i] == '"' && s.get(i + 1) != Some(&'"')) {
                i += if s[i] == '"' { 2 } else { 1 };
            }
            let word: String = s[start..i.min(s.len())].iter().collect();
            out.push(Token::Word(word.replace("\"\"", "\"").to_lowercase()));
            i += 1;
        } else if c == '$' && next.is_some_and(|n| n == '$' || (ident(n) && !n.is_ascii_digit())) {
            let mut end = i + 1;
            while end < s.len() && ident(s[end]) {
                end += 1;
            }
            if s.get(end) != Some(&'$') {
                out.push(Token::Punct(c));
                i += 1;
                continue;
            }
            let tag: String = s[i..=end].iter().collect();
            let body_start = end + 1;
            let rest: String = s[body_start..].iter().collect();
            let (body, len) = match rest.find(&tag) {
                Some(at) => (rest[..at].to_owned(), at + tag.len()),
                None => (rest.clone(), rest.len()),
            };
            out.push(Token::Body(body));
            i = body_start + rest[..len].chars().count();
        } else if ident(c) {
            let start = i;
            while i < s.len() && ident(s[i]) {
                i += 1;
            }
            out.push(Token::Word(
                s[start..i].iter().collect::<String>().to_lowercase(),
            ));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

fn statements(sql: &str) -> Vec<Vec<Token>> {
    tokens(sql)
        .split(|t| *t == Token::Punct(';'))
        .filter(|s| !s.is_empty())
        .map(<[Token]>::to_vec)
        .collect()
}

fn words(tokens: &[Token]) -> Vec<&str> {
    tokens
        .iter()
        .filter_map(|t| match t {
            Token::Word(w) => Some(w.as_str()),
            _ => None,
        })
        .collect()
}

fn text(tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(|t| match t {
            Token::Word(w) => w.clone(),
            Token::Body(_) => "$$…$$".into(),
            Token::Text => "'…'".into(),
            Token::Punct(c) => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The actions of an `ALTER TABLE`, split at the commas between them.
fn actions(tokens: &[Token]) -> Vec<&[Token]> {
    let mut depth = 0i32;
    let mut out = Vec::new();
    let mut start = 0;
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::Punct('(') => depth += 1,
            Token::Punct(')') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                out.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&tokens[start..]);
    out
}

/// Drops the leading words of `w` that are in `optional`.
fn skip<'a>(mut w: &'a [&'a str], optional: &[&str]) -> &'a [&'a str] {
    while let Some((first, rest)) = w.split_first() {
        if !optional.contains(first) {
            break;
        }
        w = rest;
    }
    w
}

/// The names of the unique indexes and constraints `sql` creates.
pub fn unique_names(sql: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for statement in statements(sql) {
        let w = words(&statement);
        for (i, word) in w.iter().enumerate() {
            let after = &w[i + 1..];
            if *word == "unique" && after.first() == Some(&"index") {
                let named = skip(&after[1..], &["concurrently", "if", "not", "exists"]);
                if let Some(name) = named.first().filter(|n| **n != "on") {
                    out.insert(name.to_string());
                }
            }
            if *word == "constraint"
                && let [name, kind, ..] = after
                && matches!(*kind, "unique" | "primary")
            {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// The statements of migration `sql` that break the release before;
/// `unique`: the unique indexes and constraints every migration creates.
pub fn check(sql: &str, unique: &BTreeSet<String>) -> Vec<Violation> {
    checked(sql, unique, false)
}

/// `check`, for a file (`block` false) or the body of a `DO` block, whose
/// statements may start inside its `begin`, `loop`, `then` or `else`.
fn checked(sql: &str, unique: &BTreeSet<String>, block: bool) -> Vec<Violation> {
    let mut statements = statements(sql);
    if block {
        let opens = |t: &Token| matches!(t, Token::Word(w) if matches!(w.as_str(), "begin" | "loop" | "then" | "else"));
        for s in &mut statements {
            let opened = s.iter().take_while(|t| opens(t)).count();
            s.drain(..opened);
        }
    }
    let mut defaulted = BTreeSet::new();
    for s in &statements {
        for action in actions(s) {
            let w = words(action);
            if let Some(at) = w.windows(2).position(|p| p == ["set", "default"]) {
                defaulted.extend(w[..at].last().map(|c| c.to_string()));
            }
        }
    }
    let mut out = Vec::new();
    for s in &statements {
        let mut rules = Vec::new();
        let w = words(s);
        match w.as_slice() {
            ["do", ..] => {
                for t in s {
                    if let Token::Body(body) = t {
                        out.extend(checked(body, unique, true));
                    }
                }
            }
            ["drop", what, rest @ ..] => match *what {
                "table" => rules.push(Rule::DropTable),
                "index" => {
                    let names = skip(rest, &["concurrently", "if", "exists"]);
                    if names.iter().any(|n| unique.contains(*n)) {
                        rules.push(Rule::DropUnique);
                    }
                }
                "function" | "procedure" | "view" | "materialized" | "type" | "schema"
                | "trigger" | "sequence" | "domain" => rules.push(Rule::DropObject(what_of(what))),
                _ => {}
            },
            ["alter", ..] if w.contains(&"rename") => rules.push(Rule::Rename),
            ["alter", "table", ..] => {
                for action in actions(after_table_name(s)) {
                    rules.extend(alter_table_action(&words(action), &defaulted, unique));
                }
            }
            _ => {}
        }
        out.extend(rules.into_iter().map(|rule| Violation {
            rule,
            statement: text(s),
        }));
    }
    out
}

/// An `ALTER TABLE` statement from its first action on: past `alter table
/// [if exists] [only] [schema .] name [*]`.
fn after_table_name(s: &[Token]) -> &[Token] {
    let word = |t: &Token, of: &[&str]| matches!(t, Token::Word(w) if of.contains(&w.as_str()));
    let mut i = 2;
    while s.get(i).is_some_and(|t| word(t, &["if", "exists", "only"])) {
        i += 1;
    }
    i += 1;
    if s.get(i) == Some(&Token::Punct('.')) {
        i += 2;
    }
    if s.get(i) == Some(&Token::Punct('*')) {
        i += 1;
    }
    s.get(i..).unwrap_or_default()
}

fn what_of(word: &str) -> &'static str {
    match word {
        "function" => "function",
        "procedure" => "procedure",
        "view" => "view",
        "materialized" => "materialized view",
        "type" => "type",
        "schema" => "schema",
        "trigger" => "trigger",
        "sequence" => "sequence",
        _ => "domain",
    }
}

/// The rule one action of an `ALTER TABLE` breaks, if any.
fn alter_table_action(
    a: &[&str],
    defaulted: &BTreeSet<String>,
    unique: &BTreeSet<String>,
) -> Option<Rule> {
    let has = |pair: [&str; 2]| a.windows(2).any(|p| p == pair);
    match a {
        ["drop", "constraint", rest @ ..] => {
            let name = skip(rest, &["if", "exists"]).first()?;
            (unique.contains(*name) || name.ends_with("_pkey") || name.ends_with("_key"))
                .then_some(Rule::DropUnique)
        }
        ["drop", ..] => Some(Rule::DropColumn),
        ["alter", rest @ ..] => {
            let rest = skip(rest, &["column"]);
            let (column, change) = rest.split_first()?;
            match change {
                ["type", ..] | ["set", "data", "type", ..] => Some(Rule::ColumnType),
                ["set", "not", "null", ..] if !defaulted.contains(*column) => {
                    Some(Rule::SetNotNull)
                }
                ["drop", "default", ..] => Some(Rule::DropDefault),
                _ => None,
            }
        }
        ["add", kind, ..]
            if !matches!(
                *kind,
                "constraint" | "primary" | "unique" | "check" | "foreign" | "exclude"
            ) =>
        {
            (has(["not", "null"]) && !a.contains(&"default") && !a.contains(&"generated"))
                .then_some(Rule::AddNotNull)
        }
        _ => None,
    }
}

/// The reason a migration gives for contracting the schema: the text of its
/// `-- contract: <reason>` line, when it has one with a reason.
pub fn contract_reason(sql: &str) -> Option<&str> {
    sql.lines().find_map(|line| {
        let comment = line.trim().strip_prefix("--")?.trim();
        let (word, reason) = comment.split_once(':')?;
        (word.trim().eq_ignore_ascii_case("contract") && !reason.trim().is_empty())
            .then(|| reason.trim())
    })
}

/// The migrations in `dir` named after version `cutoff` (their file names
/// start with their version) that break the release before and say no
/// reason for it, each with what it breaks.
pub fn uncontracted(dir: &Path, cutoff: &str) -> Vec<(String, Vec<Violation>)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .map(|p| {
            let name = p
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            let sql = std::fs::read_to_string(&p).expect("a migration");
            (name, sql)
        })
        .collect();
    files.sort();
    let unique: BTreeSet<String> = files
        .iter()
        .flat_map(|(_, sql)| unique_names(sql))
        .collect();
    files
        .iter()
        .filter(|(name, _)| version(name) > version(cutoff))
        .filter(|(_, sql)| contract_reason(sql).is_none())
        .map(|(name, sql)| (name.clone(), check(sql, &unique)))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// A migration's version: the digits its file name starts with.
pub fn version(name: &str) -> u64 {
    let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{name:?} does not start with its version"))
}
