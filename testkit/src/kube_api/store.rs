//! The objects, one global resourceVersion counter, and the bounded history
//! of changes that watches replay from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::limits;
use super::resources::{ApiError, RESOURCES, ResourceType, validate};
use super::select::Selector;

/// Where an object is kept: group, plural, namespace ("" when cluster-scoped), name.
pub type Key = (&'static str, &'static str, String, String);

pub fn key(rt: &'static ResourceType, ns: Option<&str>, name: &str) -> Key {
    let ns = if rt.namespaced {
        ns.unwrap_or_default()
    } else {
        ""
    };
    (rt.group, rt.plural, ns.to_owned(), name.to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub rt: &'static ResourceType,
    pub namespace: String,
    pub object: Value,
    /// The object before a MODIFIED change, so a filtered watch can tell an
    /// object that stopped matching (DELETED) from one that started (ADDED).
    pub previous: Option<Value>,
}

/// The start of a watch: events to send first, then the live ones.
pub struct WatchStart {
    pub replay: Vec<Arc<Event>>,
    pub live: broadcast::Receiver<Arc<Event>>,
    pub rv: u64,
}

pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Every event after this resourceVersion is still in `history`.
    compacted: u64,
    events: broadcast::Sender<Arc<Event>>,
    next_ip: u32,
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Five characters of `[0-9a-f]`, like the suffixes Kubernetes generates.
pub fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..5].to_owned()
}

/// Everything but `metadata` and `status`: what a generation counts.
fn content(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    v
}

impl Store {
    pub fn new(history_limit: usize) -> Store {
        let (events, _) = broadcast::channel(4096);
        let mut s = Store {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit,
            compacted: 0,
            events,
            next_ip: 10,
        };
        for ns in ["default", "kube-system"] {
            let obj = json!({"metadata": {"name": ns}});
            s.create(ResourceType::namespaces(), None, obj, false)
                .expect("a fresh store");
        }
        s
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Every change from now on, as watches get them.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    pub fn get(&self, rt: &'static ResourceType, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.get(&key(rt, ns, name))
    }

    /// Objects of a type, in one namespace or all of them, by (namespace, name).
    pub fn list(&self, rt: &'static ResourceType, ns: Option<&str>, sel: &Selector) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((g, p, n, _), _)| {
                *g == rt.group && *p == rt.plural && ns.is_none_or(|ns| !rt.namespaced || n == ns)
            })
            .map(|(_, v)| v)
            .filter(|v| sel.matches(v))
            .cloned()
            .collect()
    }

    /// Creates an object, assigning what the server owns: uid,
    /// resourceVersion, creationTimestamp, generation, and the name when only
    /// `generateName` is given. `check_namespace` refuses objects in a
    /// namespace that does not exist, as the API server does.
    pub fn create(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        check_namespace: bool,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let meta = &mut obj["metadata"];
        if meta["name"].as_str().is_none_or(str::is_empty) {
            match meta["generateName"].as_str() {
                Some(prefix) => meta["name"] = json!(format!("{prefix}{}", suffix())),
                None => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            }
        }
        let name = meta["name"].as_str().unwrap_or_default().to_owned();
        if rt.namespaced {
            let ns =
                ns.ok_or_else(|| ApiError::bad_request("a namespaced object needs a namespace"))?;
            if check_namespace && self.get(ResourceType::namespaces(), None, ns).is_none() {
                return Err(ApiError::not_found(ResourceType::namespaces(), ns));
            }
            meta["namespace"] = json!(ns);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        limits::normalize(rt, &mut obj)?;
        validate(rt, &obj)?;
        limits::validate_content(rt, &obj)?;
        let k = key(rt, ns, &name);
        if self.objects.contains_key(&k) {
            return Err(ApiError::already_exists(rt, &name));
        }
        self.rv += 1;
        obj["kind"] = json!(rt.kind);
        obj["apiVersion"] = json!(rt.api_version());
        let meta = obj["metadata"].as_object_mut().expect("set above");
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("resourceVersion".into(), json!(self.rv.to_string()));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        self.defaults(rt, &mut obj);
        self.objects.insert(k, obj.clone());
        self.emit(EventType::Added, rt, &obj, None);
        Ok(obj)
    }

    /// What the API server fills in on creation for a few types.
    fn defaults(&mut self, rt: &ResourceType, obj: &mut Value) {
        match rt.plural {
            "namespaces" => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            "services" => {
                let headless = obj["spec"]["clusterIP"] == "None";
                if !headless && obj["spec"]["type"] != "ExternalName" {
                    self.next_ip += 1;
                    let ip = format!("10.96.{}.{}", self.next_ip / 250, self.next_ip % 250);
                    if !obj["spec"].is_object() {
                        obj["spec"] = json!({});
                    }
                    obj["spec"]["clusterIP"] = json!(ip);
                    obj["spec"]["clusterIPs"] = json!([ip]);
                }
            }
            _ => {}
        }
    }

    /// Replaces an existing object with `candidate`, keeping what the
    /// server owns (name, namespace, uid, creationTimestamp). Nothing is
    /// written, and no event sent, when nothing changed; the generation goes
    /// up when anything outside `metadata` and `status` changed.
    pub fn commit(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        mut candidate: Value,
    ) -> Result<Value, ApiError> {
        let k = key(rt, ns, name);
        let cur = self
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if !candidate.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        if !candidate["metadata"].is_object() {
            candidate["metadata"] = json!({});
        }
        candidate["kind"] = json!(rt.kind);
        candidate["apiVersion"] = json!(rt.api_version());
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            match cur["metadata"].get(field) {
                Some(v) => candidate["metadata"][field] = v.clone(),
                None => {
                    candidate["metadata"]
                        .as_object_mut()
                        .expect("an object")
                        .remove(field);
                }
            }
        }
        limits::normalize(rt, &mut candidate)?;
        validate(rt, &candidate)?;
        limits::validate_content(rt, &candidate)?;
        limits::validate_update(rt, &cur, &candidate)?;
        if without_rv(&candidate) == without_rv(&cur) {
            return Ok(cur);
        }
        if content(&candidate) != content(&cur) {
            let generation = cur["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            candidate["metadata"]["generation"] = json!(generation);
        }
        self.rv += 1;
        candidate["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k, candidate.clone());
        self.emit(EventType::Modified, rt, &candidate, Some(cur));
        Ok(candidate)
    }

    /// Deletes an object, then (with `cascade`) every object whose
    /// ownerReferences name it (and theirs); for a namespace, everything in
    /// it. Returns the object as deleted.
    pub fn delete(
        &mut self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        cascade: bool,
    ) -> Result<Value, ApiError> {
        let k = key(rt, ns, name);
        let mut obj = self
            .objects
            .remove(&k)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(EventType::Deleted, rt, &obj, None);
        let uid = obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let doomed: Vec<Key> = self
            .objects
            .iter()
            .filter(|((_, plural, n, _), v)| {
                let in_ns = rt.plural == "namespaces"
                    && !n.is_empty()
                    && n == name
                    && *plural != "namespaces";
                let owned = cascade
                    && v["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == *uid));
                in_ns || owned
            })
            .map(|(k, _)| k.clone())
            .collect();
        for (group, plural, n, name) in doomed {
            let child_rt = RESOURCES
                .iter()
                .find(|r| r.group == group && r.plural == plural)
                .expect("stored types are known");
            // Already gone when an earlier cascade in this loop took it.
            let _ = self.delete(child_rt, Some(&n), &name, true);
        }
        Ok(obj)
    }

    fn emit(
        &mut self,
        kind: EventType,
        rt: &'static ResourceType,
        obj: &Value,
        previous: Option<Value>,
    ) {
        let ev = Arc::new(Event {
            rv: self.rv,
            kind,
            rt,
            namespace: obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            object: obj.clone(),
            previous,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            let dropped = self.history.pop_front().expect("not empty");
            self.compacted = dropped.rv;
        }
        // No receiver is fine: nobody is watching.
        let _ = self.events.send(ev);
    }

    /// Forgets the history, as etcd compaction does: a watch from any
    /// resourceVersion before now gets 410 Expired.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Starts a watch. With a resourceVersion, replays the changes after
    /// it from the history; without one (or "0"), starts with an ADDED
    /// event for every current object, as the API server does.
    pub fn watch(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let live = self.events.subscribe();
        let replay = match from.filter(|rv| *rv > 0) {
            Some(rv) if rv < self.compacted => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    self.compacted + 1
                )));
            }
            Some(rv) => self.history.iter().filter(|e| e.rv > rv).cloned().collect(),
            None => self
                .list(rt, ns, &Selector::default())
                .into_iter()
                .map(|object| {
                    Arc::new(Event {
                        rv: self.rv,
                        kind: EventType::Added,
                        rt,
                        namespace: object["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        object,
                        previous: None,
                    })
                })
                .collect(),
        };
        Ok(WatchStart {
            replay,
            live,
            rv: self.rv,
        })
    }
}
