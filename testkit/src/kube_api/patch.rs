//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902: add, remove,
//! replace, test), and the field ownership server-side apply keeps in
//! `metadata.managedFields`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A path of object keys from the root of an object to a field.
pub type FieldPath = Vec<String>;

/// RFC 7386: objects merge recursively, `null` removes, anything else
/// replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Merges `applied` into `target`: objects recursively, everything else
/// (lists included) replaces. Unlike a merge patch, `null` is a value.
pub fn deep_merge(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) => deep_merge(existing, v),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// The leaf fields of an applied object: scalars, lists and empty objects.
/// Lists count as one field (they are replaced whole).
pub fn leaf_paths(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                out.insert(prefix.clone());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out.remove(&FieldPath::new());
    out
}

/// The `fieldsV1` form of a set of fields: `{"f:spec": {"f:replicas": {}}}`.
pub fn fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Value::Object(Map::new());
    for path in paths {
        let mut node = &mut root;
        for k in path {
            node = node
                .as_object_mut()
                .expect("fieldsV1 nodes are objects")
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    root
}

/// The set of fields a `fieldsV1` value names.
pub fn parse_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let Some(m) = v.as_object() else { return };
        let children: Vec<_> = m
            .iter()
            .filter_map(|(k, c)| Some((k.strip_prefix("f:")?, c)))
            .collect();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, c) in children {
            prefix.push(k.to_owned());
            walk(c, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

pub fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k.as_str()))
}

/// Removes a field, and the objects left empty above it.
pub fn remove_path(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(m) = v.as_object_mut() else { return };
    if rest.is_empty() {
        m.remove(first);
        return;
    }
    if let Some(child) = m.get_mut(first) {
        remove_path(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            m.remove(first);
        }
    }
}

/// RFC 6902 with the operations `add`, `remove`, `replace` and `test`.
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch is a list of operations")?;
    for op in ops {
        let kind = op["op"].as_str().ok_or("operation without \"op\"")?;
        let pointer = op["path"].as_str().ok_or("operation without \"path\"")?;
        let (parent, last) = match pointer.rfind('/') {
            Some(i) => (&pointer[..i], unescape(&pointer[i + 1..])),
            None => return Err(format!("invalid path {pointer:?}")),
        };
        match kind {
            "test" => {
                if target.pointer(pointer) != Some(&op["value"]) {
                    return Err(format!("test failed at {pointer}"));
                }
            }
            "add" | "replace" | "remove" => {
                let container = target
                    .pointer_mut(parent)
                    .ok_or_else(|| format!("missing parent of {pointer}"))?;
                match container {
                    Value::Object(m) => {
                        if kind != "add" && !m.contains_key(&last) {
                            return Err(format!("no field at {pointer}"));
                        }
                        if kind == "remove" {
                            m.remove(&last);
                        } else {
                            m.insert(last, op["value"].clone());
                        }
                    }
                    Value::Array(a) => {
                        let i = if last == "-" {
                            a.len()
                        } else {
                            last.parse::<usize>()
                                .map_err(|_| format!("invalid index in {pointer}"))?
                        };
                        match kind {
                            "add" if i <= a.len() => a.insert(i, op["value"].clone()),
                            "replace" if i < a.len() => a[i] = op["value"].clone(),
                            "remove" if i < a.len() => {
                                a.remove(i);
                            }
                            _ => return Err(format!("index out of range in {pointer}")),
                        }
                    }
                    _ => return Err(format!("parent of {pointer} is not a container")),
                }
            }
            other => return Err(format!("unsupported operation {other:?}")),
        }
    }
    Ok(())
}

fn unescape(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

/// The system fields of `metadata` an applied object cannot set.
const SYSTEM_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
];

/// Which part of an object an apply writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything but `status`.
    Main,
    /// Only `status` (the `/status` subresource).
    Status,
}

/// Server-side apply of `applied` by `manager` onto `cur`, with field
/// ownership kept in `metadata.managedFields`:
/// - a field the applied object sets is set (objects merge key by key;
///   lists are atomic and replaced whole);
/// - a field this manager applied before and applies no more is removed,
///   unless another applier owns it too;
/// - a field another applier owns with a different value is a conflict
///   (`Err` with the message) unless `force`, which takes it over.
///
/// Writes other than apply are recorded as `Update` entries without
/// fields, so they neither own fields nor conflict.
pub fn apply(
    cur: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
    time: &str,
) -> Result<Value, String> {
    let mut applied = applied.clone();
    let obj = applied
        .as_object_mut()
        .ok_or("the applied configuration is not an object")?;
    obj.remove("apiVersion");
    obj.remove("kind");
    match scope {
        Scope::Main => {
            obj.remove("status");
        }
        Scope::Status => obj.retain(|k, _| k == "status"),
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| {
            !SYSTEM_METADATA.contains(&k.as_str()) && k != "name" && k != "namespace"
        });
        if meta.is_empty() {
            obj.remove("metadata");
        }
    }
    let new_paths = leaf_paths(&applied);
    let subresource = match scope {
        Scope::Main => Value::Null,
        Scope::Status => Value::from("status"),
    };
    let mut entries: Vec<Value> = cur["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let is_apply = |e: &Value| {
        e["operation"] == "Apply"
            && e.get("subresource").cloned().unwrap_or(Value::Null) == subresource
    };
    let mut own_old = BTreeSet::new();
    let mut own_time = None;
    let mut others_owned = BTreeSet::new();
    let mut conflicts = Vec::new();
    for e in entries.iter_mut().filter(|e| is_apply(e)) {
        let owned = parse_fields_v1(&e["fieldsV1"]);
        if e["manager"] == manager {
            own_old = owned;
            own_time = Some(e["time"].clone());
            continue;
        }
        let clashing: BTreeSet<FieldPath> = owned
            .iter()
            .filter(|p| new_paths.contains(*p) && get_path(cur, p) != get_path(&applied, p))
            .cloned()
            .collect();
        for p in &clashing {
            conflicts.push(format!("conflict with {}: .{}", e["manager"], p.join(".")));
        }
        if force && !clashing.is_empty() {
            let kept: BTreeSet<FieldPath> = owned.difference(&clashing).cloned().collect();
            e["fieldsV1"] = fields_v1(&kept);
            others_owned.extend(kept);
        } else {
            others_owned.extend(owned);
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            conflicts.join("; ")
        ));
    }
    let mut result = cur.clone();
    for p in own_old.difference(&new_paths) {
        if !others_owned.contains(p) {
            remove_path(&mut result, p);
        }
    }
    deep_merge(&mut result, &applied);
    let time = match own_time {
        Some(t) if own_old == new_paths => t,
        _ => Value::from(time),
    };
    let mut entry = serde_json::json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": cur["apiVersion"],
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(&new_paths),
    });
    if scope == Scope::Status {
        entry["subresource"] = Value::from("status");
    }
    match entries
        .iter()
        .position(|e| is_apply(e) && e["manager"] == manager)
    {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    entries.retain(|e| !(is_apply(e) && e["fieldsV1"].as_object().is_some_and(Map::is_empty)));
    result["metadata"]["managedFields"] = Value::Array(entries);
    Ok(result)
}

/// Records a write other than apply by `manager` in `metadata.managedFields`.
pub fn record_update(
    obj: &mut Value,
    manager: Option<&str>,
    subresource: Option<&str>,
    time: &str,
) {
    let Some(manager) = manager else { return };
    let mut entries: Vec<Value> = obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sub = subresource.map(Value::from).unwrap_or(Value::Null);
    let same = |e: &Value| {
        e["manager"] == manager
            && e["operation"] == "Update"
            && e.get("subresource").cloned().unwrap_or(Value::Null) == sub
    };
    if entries.iter().any(same) {
        return;
    }
    let mut entry = serde_json::json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": obj["apiVersion"],
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    });
    if let Some(s) = subresource {
        entry["subresource"] = Value::from(s);
    }
    entries.push(entry);
    obj["metadata"]["managedFields"] = Value::Array(entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn fields_v1_round_trips() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}, "empty": {}}});
        let paths = leaf_paths(&obj);
        assert!(paths.contains(&vec!["spec".to_owned(), "replicas".to_owned()]));
        assert!(paths.contains(&vec!["spec".to_owned(), "empty".to_owned()]));
        assert_eq!(parse_fields_v1(&fields_v1(&paths)), paths);
    }

    #[test]
    fn removing_a_field_prunes_empty_parents() {
        let mut t = json!({"spec": {"a": {"b": 1}, "c": 2}});
        remove_path(&mut t, &["spec".into(), "a".into(), "b".into()]);
        assert_eq!(t, json!({"spec": {"c": 2}}));
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec})
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying() {
        let cur =
            json!({"apiVersion": "apps/v1", "metadata": {"name": "d"}, "status": {"replicas": 1}});
        let a = apply(
            &cur,
            &deployment(json!({"replicas": 2, "paused": true})),
            "m",
            false,
            Scope::Main,
            "t",
        )
        .unwrap();
        let b = apply(
            &a,
            &deployment(json!({"replicas": 3})),
            "m",
            false,
            Scope::Main,
            "t",
        )
        .unwrap();
        assert_eq!(b["spec"], json!({"replicas": 3}));
        assert_eq!(b["status"], json!({"replicas": 1}));
        assert_eq!(b["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn apply_conflicts_with_another_applier_unless_forced() {
        let cur = json!({"apiVersion": "apps/v1", "metadata": {"name": "d"}});
        let a = apply(
            &cur,
            &deployment(json!({"replicas": 2})),
            "one",
            false,
            Scope::Main,
            "t",
        )
        .unwrap();
        let err = apply(
            &a,
            &deployment(json!({"replicas": 5})),
            "two",
            false,
            Scope::Main,
            "t",
        )
        .unwrap_err();
        assert!(err.contains(".spec.replicas"), "{err}");
        // The same value is shared ownership, not a conflict.
        apply(
            &a,
            &deployment(json!({"replicas": 2})),
            "two",
            false,
            Scope::Main,
            "t",
        )
        .unwrap();
        let forced = apply(
            &a,
            &deployment(json!({"replicas": 5})),
            "two",
            true,
            Scope::Main,
            "t",
        )
        .unwrap();
        assert_eq!(forced["spec"]["replicas"], 5);
        let managers: Vec<_> = forced["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].clone())
            .collect();
        assert_eq!(managers, vec![json!("two")]);
    }

    #[test]
    fn json_patch_adds_replaces_removes() {
        let mut t = json!({"spec": {"replicas": 1, "list": ["a"]}});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/spec/replicas", "value": 1},
                {"op": "replace", "path": "/spec/replicas", "value": 3},
                {"op": "add", "path": "/spec/list/-", "value": "b"},
                {"op": "remove", "path": "/spec/list/0"}
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"spec": {"replicas": 3, "list": ["b"]}}));
        assert!(
            json_patch(
                &mut t,
                &json!([{"op": "test", "path": "/spec/replicas", "value": 1}])
            )
            .is_err()
        );
    }
}
