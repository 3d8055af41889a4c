//! A small YAML emitter for the manifests: block style, keys in a fixed
//! order (`apiVersion`, `kind`, `metadata`, `name`, `namespace`, then the
//! rest alphabetically, whatever order the map keeps), and strings quoted
//! whenever a YAML 1.1 or 1.2 reader could take them for something else.
//!
//! Quoting errs on the side of quoting: a string that would read back the
//! same unquoted may still be quoted (`"50m"`), never the other way round.

use serde_json::Value;

/// Keys written before the others, in this order.
const FIRST_KEYS: [&str; 5] = ["apiVersion", "kind", "metadata", "name", "namespace"];

/// One YAML document (no `---`), ending with a newline.
pub fn document(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => mapping(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => sequence(&mut out, items, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

/// Several documents, separated by `---`.
pub fn documents(values: &[Value]) -> String {
    values
        .iter()
        .map(document)
        .collect::<Vec<_>>()
        .join("---\n")
}

fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    let rank = |k: &str| {
        FIRST_KEYS
            .iter()
            .position(|f| *f == k)
            .unwrap_or(FIRST_KEYS.len())
    };
    rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
}

fn mapping(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| key_order(a, b));
    for key in keys {
        let value = &map[key];
        pad(out, indent);
        out.push_str(&string(key));
        out.push(':');
        match value {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                mapping(out, m, indent + 2);
            }
            // A sequence under a key sits at the key's indentation, as
            // kubectl writes it.
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                sequence(out, items, indent);
            }
            scalar => {
                out.push(' ');
                out.push_str(&inline(scalar));
                out.push('\n');
            }
        }
    }
}

fn sequence(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        // The item as a block two columns in, its first indentation
        // replaced by the dash.
        let mut block = String::new();
        match item {
            Value::Object(m) if !m.is_empty() => mapping(&mut block, m, indent + 2),
            Value::Array(a) if !a.is_empty() => sequence(&mut block, a, indent + 2),
            scalar => {
                pad(&mut block, indent + 2);
                block.push_str(&inline(scalar));
                block.push('\n');
            }
        }
        pad(out, indent);
        out.push_str("- ");
        out.push_str(&block[indent + 2..]);
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A scalar, or an empty collection, on one line.
fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A string, plain when that reads back as the same string, else
/// double-quoted.
pub fn string(s: &str) -> String {
    if needs_quotes(s) {
        quoted(s)
    } else {
        s.to_owned()
    }
}

/// Words YAML 1.1 (what Kubernetes' reader follows) or 1.2 resolve to
/// null, a boolean, or a special float, compared lowercased.
const RESERVED: [&str; 18] = [
    "", "~", "null", "true", "false", "yes", "no", "y", "n", "on", "off", ".inf", "-.inf", "+.inf",
    ".nan", "<<", "=", "-",
];

fn needs_quotes(s: &str) -> bool {
    if RESERVED.contains(&s.to_ascii_lowercase().as_str()) {
        return true;
    }
    let first = s.chars().next().expect("not empty");
    let last = s.chars().last().expect("not empty");
    // Anything that may start a number, a date or a time: digits, and a
    // sign or a dot before one.
    let numeric_start = first.is_ascii_digit()
        || (matches!(first, '-' | '+' | '.')
            && s[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.'));
    numeric_start
        // Indicators that mean something at the start of a plain scalar;
        // `-`, `?` and `:` only before a space (or alone).
        || ",[]{}#&*!|>'\"%@`".contains(first)
        || (matches!(first, '-' | '?' | ':') && (s.len() == 1 || s[1..].starts_with(' ')))
        // Document markers.
        || s.starts_with("---")
        || s.starts_with("...")
        || first == ' '
        || last == ' '
        || last == ':'
        || s.contains(": ")
        || s.contains(" #")
        || s.chars().any(|c| c.is_control() || matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}'))
}

/// A double-quoted scalar; its escapes are YAML's (a superset of JSON's).
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::{Command, Stdio};

    use serde_json::json;

    use super::*;

    #[test]
    fn keys_come_in_kubernetes_order_then_alphabetically() {
        let doc = document(&json!({
            "spec": {"z": 1, "a": 2},
            "metadata": {"namespace": "sless", "labels": {}, "name": "api"},
            "kind": "Service",
            "apiVersion": "v1",
        }));
        assert_eq!(
            doc,
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: sless\n  \
             labels: {}\nspec:\n  a: 2\n  z: 1\n"
        );
    }

    #[test]
    fn sequences_of_mappings_and_of_sequences_are_blocks() {
        let doc = document(&json!({
            "containers": [{"name": "api", "args": ["api", "--listen"], "ports": []}],
            "nested": [["a", "b"], []],
        }));
        assert_eq!(
            doc,
            "containers:\n- name: api\n  args:\n  - api\n  - --listen\n  ports: []\n\
             nested:\n- - a\n  - b\n- []\n"
        );
    }

    #[test]
    fn strings_a_reader_would_misread_are_quoted() {
        for s in [
            "",
            "true",
            "False",
            "no",
            "Yes",
            "off",
            "null",
            "~",
            "1",
            "0.5",
            "-1",
            ".5",
            "1e3",
            "0x1F",
            "12:30",
            "2026-01-01",
            "*alias",
            "&anchor",
            "!tag",
            "|",
            ">",
            "%x",
            "@x",
            "`x",
            "a: b",
            "a #b",
            "x:",
            " lead",
            "trail ",
            "- x",
            "[x]",
            "{x}",
            "'x'",
            "\"x\"",
            "line\nbreak",
            "tab\there",
            "=",
            "<<",
            "---",
            "...",
            "? x",
        ] {
            assert!(
                string(s).starts_with('"'),
                "{s:?} should be quoted: {}",
                string(s)
            );
        }
        for s in [
            "sless",
            "app.kubernetes.io/name",
            "/healthz",
            "--listen",
            "sless-api",
            "-x",
            "a:b",
            "a#b",
            "RuntimeDefault",
            "system:serviceaccount:sless:sless",
        ] {
            assert_eq!(string(s), s, "{s:?} reads back unquoted");
        }
    }

    /// What a real YAML 1.1 reader (PyYAML, the YAML of Python 3.11 on
    /// every machine of this project) makes of the emitter's output: the
    /// same JSON, to the last byte of every string.
    #[test]
    fn a_yaml_reader_reads_back_the_same_values() {
        let tricky: Vec<Value> = [
            "",
            "true",
            "no",
            "ON",
            "null",
            "~",
            "1",
            "0755",
            "1_000",
            "0.5",
            "-.5",
            "+1",
            "1e3",
            "0x1F",
            "0o17",
            "12:30:45",
            "2026-01-01",
            "2026-01-01T00:00:00Z",
            "*a",
            "&a",
            "!a",
            "|",
            ">-",
            "%",
            "@",
            "`",
            "a: b",
            "a #b",
            "x:",
            " x",
            "x ",
            "- x",
            "? x",
            "[x]",
            "{x: y}",
            "'",
            "\"",
            "back\\slash",
            "line\nbreak",
            "tab\t",
            "bell\u{7}",
            "nel\u{85}",
            "ls\u{2028}",
            "ü ñ 漢",
            "=",
            "<<",
            "-",
            ".inf",
            ".NaN",
            "$(VAR) $$",
            "a,b",
            "#x",
            "--listen",
            "-x",
            "---",
            "--- x",
            "...",
            "?x",
            ":x",
        ]
        .iter()
        .map(|s| json!(s))
        .collect();
        let value = json!({
            "list": tricky.clone(),
            "map": tricky.iter().enumerate().map(|(i, v)| (format!("k{i}"), v.clone()))
                .collect::<serde_json::Map<_, _>>(),
            "keys": tricky.iter().map(|v| (v.as_str().unwrap().to_owned(), json!(1)))
                .collect::<serde_json::Map<_, _>>(),
            "numbers": [0, -3, 1.5, u64::MAX],
            "other": [null, true, false, {}, []],
        });
        let read = read_with_pyyaml(&documents(&[value.clone(), json!({"second": "doc"})]));
        assert_eq!(read, json!([value, {"second": "doc"}]));
    }

    fn read_with_pyyaml(yaml: &str) -> Value {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import json, sys, yaml; \
                 json.dump(list(yaml.safe_load_all(sys.stdin.read())), sys.stdout)",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (with PyYAML) reads the YAML back");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "PyYAML could not read:\n{yaml}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}
