//! An in-memory Kubernetes API server for tests: a real HTTP server on
//! loopback that speaks the part of the Kubernetes REST API a kube-rs client
//! uses, so a driver's tests point `kube::Config::new(url)` at it and play
//! the cluster's controllers themselves.
//!
//! ```text
//! let kube = FakeKube::start().await;
//! let client = kube::Client::try_from(kube::Config::new(kube.url().parse()?))?;
//! kube.complete_jobs("sless.dev/job", Outcome::succeeded("hello\n"));
//! // ... drive the driver, then look at what it did:
//! assert!(kube.requests().iter().filter(|r| r.is_write()).all(|r| r.field_manager.as_deref() == Some("sless")));
//! ```
//!
//! What it serves (objects are JSON, any resource type in
//! [`resources::RESOURCES`]; anything else is 404):
//! - GET, LIST (label and field selectors, `limit`/`continue`, across all
//!   namespaces), WATCH (`watch=true`: replay after a resourceVersion from a
//!   bounded history, 410 `Expired` as an ERROR event when it is too old,
//!   bookmarks, `sendInitialEvents`, `timeoutSeconds`);
//! - POST, PUT (stale resourceVersion → 409 Conflict), PATCH as server-side
//!   apply, merge patch, strategic merge patch and JSON patch;
//! - the `status` subresource of every type, `scale` of Deployments and
//!   ReplicaSets, `log` of Pods;
//! - DELETE of one object or a collection, cascading to owned objects.
//!
//! Errors are `Status` objects, which kube-rs reads as `kube::Error::Api`.
//!
//! Its limits, on purpose:
//! - Deletion is immediate: no finalizers, no `deletionTimestamp`, no grace
//!   period. Background and Foreground propagation both delete the owned
//!   objects (by `metadata.ownerReferences[].uid`, transitively) at once;
//!   Orphan leaves them. Deleting a namespace deletes everything in it.
//! - Server-side apply treats every list as atomic (replaced whole, no
//!   merge keys). Only `Apply` entries own fields; `Update` entries
//!   (writes with `fieldManager` by other means) are recorded but own no
//!   fields, so they never conflict and never keep a field alive.
//! - Strategic merge patch is a JSON merge patch (lists are replaced).
//! - Apply bodies must be JSON (kube-rs sends JSON), not YAML.
//! - Writes to the main resource leave `status` as it was, and `/status`
//!   writes change only `status`, for every type.
//! - Validation covers names (DNS-1123; 63 characters for namespaces and
//!   services, 52 for CronJobs), labels, and the limits a driver can meet
//!   ([`limits`]: a Secret's or ConfigMap's data at most 1 MiB, annotations
//!   at most 256 KiB, a request body at most 3 MiB; a Secret's
//!   `stringData` merged into `data`; immutable Secrets and ConfigMaps),
//!   not the schemas of the types. Namespaced objects can only be created
//!   in an existing namespace.
//! - No admission, no RBAC, no defaulting beyond a Service's cluster IP and
//!   a Namespace's phase; no `dryRun`; `resourceVersionMatch` is ignored
//!   (a LIST is always the latest state). A pod log is one text per pod
//!   whatever the container, and `follow` ends after the current text.
//! - No controllers: nothing happens unless a test makes it happen, with
//!   the control API ([`FakeKube::put_object`], [`FakeKube::patch_status`],
//!   ...) or reactors ([`FakeKube::on`], and the ready-made
//!   [`FakeKube::complete_jobs`], which plays the Job controller and the
//!   kubelet's start of its pod, and [`FakeKube::roll_out_deployments`],
//!   the Deployment controller with its ReplicaSets and revisions).
//!   Reactors fire on writes made through HTTP, not on the control API's.

#[cfg(test)]
mod cluster_tests;
mod controllers;
pub mod deployments;
mod http;
mod kubelet;
pub mod limits;
mod patch;
pub mod resources;
pub mod select;
mod store;
#[cfg(test)]
mod tests;
mod watch;
#[cfg(test)]
mod watch_tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

pub use controllers::Outcome;
pub use kubelet::ContainerView;
use resources::Target;
use select::Selector;
use store::Store;

/// How many changes watches can resume from.
const HISTORY: usize = 1000;

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The raw query string, still percent-encoded ("" when there is none).
    pub query: String,
    pub content_type: Option<String>,
    /// The `fieldManager` query parameter.
    pub field_manager: Option<String>,
}

impl Request {
    /// POST, PUT, PATCH or DELETE.
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }

    /// A GET with `watch=true` (or `watch=1`).
    pub fn is_watch(&self) -> bool {
        self.method == "GET"
            && self
                .query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1")
    }
}

/// What a reactor reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// POST, or server-side apply of an object that did not exist.
    Create,
    /// PUT (of the object or its `scale`).
    Update,
    /// Any PATCH of an existing object (apply included) or of its `scale`.
    Patch,
    Delete,
    /// Create, Update or Patch.
    Write,
}

impl Verb {
    fn covers(self, happened: Verb) -> bool {
        self == happened || (self == Verb::Write && happened != Verb::Delete)
    }
}

type ReactorFn = Arc<dyn Fn(FakeKube, Value) + Send + Sync>;

struct Reactor {
    verb: Verb,
    plural: String,
    f: ReactorFn,
}

struct Fault {
    prefix: Option<String>,
    remaining: usize,
    code: u16,
}

#[derive(Default)]
struct Side {
    requests: Vec<Request>,
    faults: Vec<Fault>,
    reactors: Vec<Reactor>,
    logs: HashMap<(String, String), String>,
}

struct Inner {
    store: Mutex<Store>,
    side: Mutex<Side>,
    addr: SocketAddr,
}

/// The handle of a running server; cheap to clone. The server runs on the
/// runtime that started it, until that runtime ends.
#[derive(Clone)]
pub struct FakeKube {
    inner: Arc<Inner>,
}

fn target(path: &str) -> Target {
    Target::parse(path).unwrap_or_else(|e| panic!("{path}: {}", e.message))
}

impl FakeKube {
    /// Starts a server on a free loopback port, with the namespaces
    /// `default` and `kube-system`.
    pub async fn start() -> FakeKube {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        let kube = FakeKube {
            inner: Arc::new(Inner {
                store: Mutex::new(Store::new(HISTORY)),
                side: Mutex::new(Side::default()),
                addr: listener.local_addr().expect("a bound address"),
            }),
        };
        let app = http::router(kube.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        kube
    }

    /// `http://127.0.0.1:PORT`, for `kube::Config::new`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.inner.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn side(&self) -> MutexGuard<'_, Side> {
        self.inner.side.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object at an API path, e.g.
    /// `/apis/apps/v1/namespaces/ns/deployments/web`.
    pub fn get(&self, path: &str) -> Option<Value> {
        let t = target(path);
        self.store()
            .get(t.rt, t.namespace.as_deref(), t.name.as_deref()?)
            .cloned()
    }

    /// The objects at a collection path (`/api/v1/namespaces/ns/pods`, or
    /// `/apis/batch/v1/jobs` for all namespaces) matching a label selector.
    pub fn list(&self, path: &str, label_selector: &str) -> Vec<Value> {
        let t = target(path);
        let sel = Selector::parse(Some(label_selector), None).expect("a valid label selector");
        self.store().list(t.rt, t.namespace.as_deref(), &sel)
    }

    /// Creates or replaces an object as a controller would, status
    /// included, sending watch events. The path names the object, or its
    /// collection when the name is in the object.
    pub fn put_object(&self, path: &str, obj: Value) -> Value {
        let t = target(path);
        let name = t
            .name
            .clone()
            .or_else(|| obj["metadata"]["name"].as_str().map(str::to_owned))
            .expect("a name in the path or the object");
        let mut store = self.store();
        let ns = t.namespace.as_deref();
        let result = match store.get(t.rt, ns, &name).cloned() {
            Some(cur) => {
                let mut obj = obj;
                if obj["metadata"].get("managedFields").is_none()
                    && cur["metadata"].get("managedFields").is_some()
                {
                    obj["metadata"]["managedFields"] = cur["metadata"]["managedFields"].clone();
                }
                store.commit(t.rt, ns, &name, obj)
            }
            None => {
                let mut obj = obj;
                obj["metadata"]["name"] = json!(name);
                store.create(t.rt, ns, obj, false)
            }
        };
        result.unwrap_or_else(|e| panic!("put_object {path}: {}", e.message))
    }

    /// Merges `status` into the object's status (a JSON merge patch of
    /// `status`). `None` when the object does not exist.
    pub fn patch_status(&self, path: &str, status: Value) -> Option<Value> {
        self.write_status(path, |s| patch::merge_patch(s, &status))
    }

    /// Replaces the object's status. `None` when the object does not exist.
    pub fn set_status(&self, path: &str, status: Value) -> Option<Value> {
        self.write_status(path, |s| *s = status)
    }

    fn write_status(&self, path: &str, f: impl FnOnce(&mut Value)) -> Option<Value> {
        let t = target(path);
        let name = t.name.as_deref().expect("an object path");
        let mut store = self.store();
        let mut obj = store.get(t.rt, t.namespace.as_deref(), name)?.clone();
        f(&mut obj["status"]);
        Some(
            store
                .commit(t.rt, t.namespace.as_deref(), name, obj)
                .expect("a status write"),
        )
    }

    /// Deletes an object (cascading as a DELETE does). `None` when it did
    /// not exist.
    pub fn delete(&self, path: &str) -> Option<Value> {
        let t = target(path);
        self.store()
            .delete(t.rt, t.namespace.as_deref(), t.name.as_deref()?, true)
            .ok()
    }

    /// The text `GET .../pods/{pod}/log` answers with.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, text: &str) {
        self.side()
            .logs
            .insert((namespace.to_owned(), pod.to_owned()), text.to_owned());
    }

    fn pod_log(&self, namespace: &str, pod: &str) -> String {
        self.side()
            .logs
            .get(&(namespace.to_owned(), pod.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.side().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.side().requests.clear();
    }

    /// The next `n` requests fail with `code` (a `Status` with the reason
    /// Kubernetes gives that code).
    pub fn fail_next(&self, n: usize, code: u16) {
        self.side().faults.push(Fault {
            prefix: None,
            remaining: n,
            code,
        });
    }

    /// The next `n` requests whose path starts with `path_prefix` fail with
    /// `code`.
    pub fn fail_next_on(&self, path_prefix: &str, n: usize, code: u16) {
        self.side().faults.push(Fault {
            prefix: Some(path_prefix.to_owned()),
            remaining: n,
            code,
        });
    }

    /// Calls `f` with the written object (the deleted one for
    /// [`Verb::Delete`]) after every HTTP write of that verb to a resource
    /// of that plural ("jobs", "deployments", ...), before the response is
    /// sent. `f` may act at once through the control API or spawn a task.
    pub fn on(
        &self,
        verb: Verb,
        plural: &str,
        f: impl Fn(FakeKube, Value) + Send + Sync + 'static,
    ) {
        self.side().reactors.push(Reactor {
            verb,
            plural: plural.to_owned(),
            f: Arc::new(f),
        });
    }

    fn fire(&self, verb: Verb, plural: &str, obj: &Value) {
        let matching: Vec<ReactorFn> = self
            .side()
            .reactors
            .iter()
            .filter(|r| r.verb.covers(verb) && r.plural == plural)
            .map(|r| r.f.clone())
            .collect();
        for f in matching {
            f(self.clone(), obj.clone());
        }
    }

    /// Forgets the change history, as etcd compaction does: a watch from
    /// any earlier resourceVersion gets 410 Expired.
    pub fn compact(&self) {
        self.store().compact();
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store().resource_version()
    }

    /// Records a request and takes an injected failure that matches it.
    fn admit(&self, req: Request) -> Option<u16> {
        let mut side = self.side();
        let fault = side.faults.iter_mut().find(|f| {
            f.remaining > 0 && f.prefix.as_deref().is_none_or(|p| req.path.starts_with(p))
        });
        let code = fault.map(|f| {
            f.remaining -= 1;
            f.code
        });
        side.faults.retain(|f| f.remaining > 0);
        side.requests.push(req);
        code
    }
}
