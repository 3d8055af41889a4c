//! Label and field selectors, as they arrive in `labelSelector` and
//! `fieldSelector`.

use serde_json::Value;

use super::resources::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold (comma = AND).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let bad = |t: &str| ApiError::bad_request(format!("unable to parse requirement: \"{t}\""));
        let mut reqs = Vec::new();
        for t in terms(s) {
            let req = if let Some(key) = t.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("!=") {
                Requirement::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Requirement::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                Requirement::NotIn(k.trim().to_owned(), set_values(rest).ok_or_else(|| bad(t))?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                Requirement::In(k.trim().to_owned(), set_values(rest).ok_or_else(|| bad(t))?)
            } else if t.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
                return Err(bad(t));
            } else {
                Requirement::Exists(t.to_owned())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`,
/// comma-separated, where `path` is any dotted path into the object
/// (`metadata.name`, `metadata.namespace`, `status.phase`, ...).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut out = Vec::new();
        for t in terms(s) {
            let (path, equal, value) = if let Some((k, v)) = t.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: \"{t}\""
                )));
            };
            let path = path.trim().split('.').map(str::to_owned).collect();
            out.push((path, equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let field = path.iter().try_fold(obj, |v, k| v.get(k.as_str()));
            let actual = match field {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

/// Both selectors of a LIST, WATCH or DELETE collection request.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Selector, ApiError> {
        Ok(Selector {
            labels: LabelSelector::parse(labels.unwrap_or_default())?,
            fields: FieldSelector::parse(fields.unwrap_or_default())?,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_forms_are_anded() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&p);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app=web,tier=back"));
        assert!(m("app!=db"));
        assert!(!m("app!=web"));
        assert!(m("app in (db, web)"));
        assert!(!m("app in (db)"));
        assert!(m("app notin (db),!missing"));
        assert!(!m("!app"));
        assert!(!m("missing"));
        assert!(m("missing!=x"));
    }

    #[test]
    fn malformed_label_selector_is_rejected() {
        assert_eq!(LabelSelector::parse("app in db").unwrap_err().code, 400);
        assert_eq!(LabelSelector::parse("a b").unwrap_err().code, 400);
    }

    #[test]
    fn field_selector_reads_dotted_paths() {
        let p = pod(json!({}));
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&p);
        assert!(m("metadata.name=p,metadata.namespace==ns"));
        assert!(!m("metadata.name=q"));
        assert!(m("status.phase!=Pending"));
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
