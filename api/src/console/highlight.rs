//! Source with line numbers, Python, JavaScript and Go coloured: comments,
//! strings, numbers and keywords, each a `<span>` of its class. A simple
//! scanner, not a parser: enough to read code by, and every character of
//! the source is escaped.

use maud::{Markup, html};

use super::text::Text;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Python,
    JavaScript,
    Go,
    Plain,
}

fn lang_of(path: &str) -> Lang {
    match path.rsplit('.').next().unwrap_or_default() {
        "py" => Lang::Python,
        "js" | "cjs" | "mjs" | "ts" | "jsx" => Lang::JavaScript,
        "go" => Lang::Go,
        _ => Lang::Plain,
    }
}

const PYTHON: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];
const JAVASCRIPT: &[&str] = &[
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "else",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "let",
    "new",
    "null",
    "of",
    "return",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "undefined",
    "var",
    "void",
    "while",
    "yield",
];
const GO: &[&str] = &[
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "false",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "nil",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "true",
    "type",
    "var",
];

/// One run of source text and its class (`None`: plain).
type Token<'a> = (Option<&'static str>, &'a str);

fn tokens<'a>(lang: Lang, src: &'a str) -> Vec<Token<'a>> {
    if lang == Lang::Plain {
        return vec![(None, src)];
    }
    let keywords = match lang {
        Lang::Python => PYTHON,
        Lang::JavaScript => JAVASCRIPT,
        _ => GO,
    };
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut plain_from = 0;
    let mut i = 0;
    let push = |out: &mut Vec<Token<'a>>, from: usize, to: usize, class| {
        if from < to {
            out.push((class, &src[from..to]));
        }
    };
    while i < bytes.len() {
        let rest = &src[i..];
        let (class, len) = if (lang == Lang::Python && rest.starts_with('#'))
            || (lang != Lang::Python && rest.starts_with("//"))
        {
            (Some("comment"), rest.find('\n').unwrap_or(rest.len()))
        } else if lang != Lang::Python && rest.starts_with("/*") {
            (
                Some("comment"),
                rest.find("*/").map_or(rest.len(), |e| e + 2),
            )
        } else if lang == Lang::Python && (rest.starts_with("\"\"\"") || rest.starts_with("'''")) {
            let quote = &rest[..3];
            (
                Some("string"),
                rest[3..].find(quote).map_or(rest.len(), |e| e + 6),
            )
        } else if rest.starts_with(['"', '\'', '`']) {
            let quote = rest.as_bytes()[0];
            let mut end = 1;
            let rb = rest.as_bytes();
            while end < rb.len() && rb[end] != quote && (rb[end] != b'\n' || quote == b'`') {
                end += if rb[end] == b'\\' { 2 } else { 1 };
            }
            (Some("string"), (end + 1).min(rb.len()))
        } else if rest.as_bytes()[0].is_ascii_digit() && (i == 0 || !is_word(bytes[i - 1])) {
            let end = rest
                .bytes()
                .position(|b| !(b.is_ascii_alphanumeric() || b == b'.' || b == b'_'))
                .unwrap_or(rest.len());
            (Some("number"), end)
        } else if is_word(rest.as_bytes()[0]) && (i == 0 || !is_word(bytes[i - 1])) {
            let end = rest.bytes().position(|b| !is_word(b)).unwrap_or(rest.len());
            let class = keywords.contains(&&rest[..end]).then_some("keyword");
            (class, end)
        } else {
            (None, rest.chars().next().map_or(1, char::len_utf8))
        };
        // Token ends fall on character boundaries: every delimiter is ASCII.
        let len = (1..=len.max(1))
            .rev()
            .find(|l| src.is_char_boundary(i + l))
            .unwrap_or(len);
        if class.is_some() {
            push(&mut out, plain_from, i, None);
            push(&mut out, i, i + len, class);
            plain_from = i + len;
        }
        i += len;
    }
    push(&mut out, plain_from, src.len(), None);
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The file `path`'s `text`, a numbered line each, coloured for its
/// language.
pub fn source(path: &str, text: &str) -> Markup {
    // Split the tokens at line ends, so each line is one list item.
    let mut lines: Vec<Vec<Token<'_>>> = vec![Vec::new()];
    for (class, run) in tokens(lang_of(path), text) {
        let mut parts = run.split('\n');
        if let Some(first) = parts.next() {
            lines.last_mut().unwrap().push((class, first));
        }
        for part in parts {
            lines.push(vec![(class, part)]);
        }
    }
    if text.ends_with('\n') {
        lines.pop();
    }
    html! {
        ol.source {
            @for line in &lines {
                li { code {
                    @for (class, run) in line {
                        @if let Some(class) = class { span class=(class) { (Text(run)) } } @else { (Text(run)) }
                    }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_is_coloured_and_every_line_is_numbered() {
        let html = source(
            "handler.py",
            "# a comment\ndef handle(event):\n    return {\"n\": 42}\n",
        )
        .into_string();
        assert_eq!(html.matches("<li>").count(), 3, "{html}");
        assert!(
            html.contains(r#"<span class="comment"># a comment</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="keyword">def</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="string">&quot;n&quot;</span>"#),
            "{html}"
        );
        assert!(html.contains(r#"<span class="number">42</span>"#), "{html}");
    }

    #[test]
    fn javascript_and_go_comments_and_strings_span_lines() {
        let html = source("handler.js", "/* two\nlines */ const s = `a\nb`;").into_string();
        assert_eq!(html.matches("<li>").count(), 3, "{html}");
        assert_eq!(html.matches(r#"class="comment""#).count(), 2, "{html}");
        let go = source("main.go", "package main // here\nfunc f() {}").into_string();
        assert!(go.contains(r#"<span class="keyword">func</span>"#), "{go}");
    }

    #[test]
    fn hostile_or_unusual_text_is_escaped_and_never_panics() {
        for text in [
            "<script>alert(1)</script>",
            "\"unterminated",
            "'\\",
            "é\u{202e}漢字 # ü",
            "/*",
            "\"\"\"",
            "0x1F 1e9 x1",
        ] {
            for path in ["a.py", "a.js", "a.go", "a.txt"] {
                let html = source(path, text).into_string();
                assert!(!html.contains("<script>"), "{path}: {html}");
                assert!(!html.contains('\u{202e}'), "{path}: {html}");
            }
        }
    }
}
