//! The fixture files: reading them, and blessing new entries into them.
//!
//! A file is `{"about": …, "entries": [{"name": …, …}, …]}`. Blessing
//! (`SLESS_BLESS=1`) appends the entries today's code writes under names
//! the file does not have yet, and never touches an entry it has: an entry
//! is what some release wrote, and a change of it is what the tests are
//! there to refuse.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{Map, Value};

/// Set to `1` to add the entries of new examples to the fixture files.
pub const BLESS_ENV: &str = "SLESS_BLESS";

/// The file `name` under `tests/fixtures/compat/`.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compat")
        .join(name)
}

fn blessing() -> bool {
    std::env::var(BLESS_ENV).is_ok_and(|v| v == "1")
}

/// The entries of fixture file `name`.
pub fn load(name: &str) -> Vec<Value> {
    let path = path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}; a missing file is made with {BLESS_ENV}=1",
            path.display()
        )
    });
    let file: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    file["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no \"entries\" list", path.display()))
        .clone()
}

/// The name of an entry.
pub fn name(entry: &Value) -> &str {
    entry["name"].as_str().expect("every entry has a name")
}

/// The entries of file `name`; first, when blessing, with the entries of
/// `today` whose names it lacks appended (and the file rewritten with them).
pub fn load_or_bless(name: &str, about: &str, today: &[Value]) -> Vec<Value> {
    if !blessing() {
        return load(name);
    }
    let path = path(name);
    let mut entries = if path.exists() {
        load(name)
    } else {
        Vec::new()
    };
    let known: BTreeSet<String> = entries.iter().map(|e| self::name(e).to_owned()).collect();
    let added: Vec<&Value> = today
        .iter()
        .filter(|e| !known.contains(self::name(e)))
        .collect();
    if added.is_empty() {
        return entries;
    }
    eprintln!(
        "{BLESS_ENV}: adding to {}: {}",
        path.display(),
        added
            .iter()
            .map(|e| self::name(e))
            .collect::<Vec<_>>()
            .join(", ")
    );
    entries.extend(added.into_iter().cloned());
    let mut file = Map::new();
    file.insert("about".into(), Value::String(about.to_owned()));
    file.insert("entries".into(), Value::Array(entries.clone()));
    let text = serde_json::to_string_pretty(&canonical(&Value::Object(file))).expect("JSON");
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("the fixtures' folder");
    // Written aside and renamed, so a test reading it meanwhile reads a whole file.
    let aside = path.with_extension("json.new");
    std::fs::write(&aside, text + "\n").expect("writing the fixture");
    std::fs::rename(&aside, &path).expect("renaming the fixture into place");
    entries
}

/// `v` with every object's keys in sorted order (however serde_json keeps
/// them), so a blessed file reads the same whichever features built it.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Where `written` and `fixture` differ, one line per key path: a key only
/// today writes, a key only the fixture has, or a value that changed.
pub fn differences(fixture: &Value, written: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff("", fixture, written, &mut out);
    out
}

fn diff(at: &str, fixture: &Value, written: &Value, out: &mut Vec<String>) {
    match (fixture, written) {
        (Value::Object(f), Value::Object(w)) => {
            for (k, fv) in f {
                let here = format!("{at}/{k}");
                match w.get(k) {
                    Some(wv) => diff(&here, fv, wv, out),
                    None => out.push(format!(
                        "{here}: in the fixture, no longer written (removed or renamed: the release before needs it)"
                    )),
                }
            }
            for k in w.keys().filter(|k| !f.contains_key(*k)) {
                out.push(format!(
                    "{at}/{k}: written, not in the fixture (a field added since must be left out when it has its default: #[serde(default, skip_serializing_if = …)])"
                ));
            }
        }
        _ if fixture != written => out.push(format!(
            "{}: the fixture has {fixture}, today writes {written}",
            if at.is_empty() { "/" } else { at }
        )),
        _ => {}
    }
}

/// The names serde accepts where it refused `error`'s unknown one: the
/// variants of an enum, read from its "unknown variant" message, so that a
/// variant added to the code is seen here without a list to keep.
pub fn accepted_names(error: &serde_json::Error) -> BTreeSet<String> {
    let message = error.to_string();
    let expected = message
        .split_once(", expected ")
        .unwrap_or_else(|| panic!("not an unknown-variant error: {message}"))
        .1;
    let names: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!names.is_empty(), "no variant named in: {message}");
    names
}

/// Every string in `v`, at any depth: the values of the enums a fixture
/// carries (a runtime, a crash cause, …) are among them.
pub fn strings(v: &Value, into: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            into.insert(s.clone());
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, into)),
        Value::Object(m) => m.values().for_each(|x| strings(x, into)),
        _ => {}
    }
}
