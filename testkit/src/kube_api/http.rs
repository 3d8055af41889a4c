//! The HTTP side: one fallback handler that reads the path, the verb and the
//! content type, and answers as the Kubernetes API server would.

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::limits;
use super::patch::{self, Scope};
use super::resources::{ApiError, ResourceType, Target};
use super::select::Selector;
use super::store::now;
use super::{FakeKube, Request, Verb, watch};

type Params = HashMap<String, String>;

pub fn router(kube: FakeKube) -> Router {
    // The API server's own limit answers, with a Status (see `handle`).
    Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::disable())
        .with_state(kube)
}

async fn handle(
    State(kube): State<FakeKube>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned());
    let params: Params = match Query::try_from_uri(&uri) {
        Ok(Query(p)) => p,
        Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
    };
    let req = Request {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        content_type: content_type.clone(),
        field_manager: params.get("fieldManager").cloned(),
    };
    if let Some(code) = kube.admit(req) {
        return ApiError::from_code(code).into_response();
    }
    if body.len() > limits::MAX_REQUEST_BODY_BYTES {
        return limits::body_too_large().into_response();
    }
    let call = Call {
        kube,
        params,
        content_type,
        body,
    };
    call.route(&method, uri.path())
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (code, axum::Json(v.clone())).into_response()
}

/// One request, being answered.
struct Call {
    kube: FakeKube,
    params: Params,
    content_type: Option<String>,
    body: Bytes,
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .get(name)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    fn body_json(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
    }

    fn selector(&self) -> Result<Selector, ApiError> {
        Selector::parse(self.param("labelSelector"), self.param("fieldSelector"))
    }

    async fn route(self, method: &Method, path: &str) -> Result<Response, ApiError> {
        let t = Target::parse(path)?;
        match (t.sub.as_deref(), t.rt.plural) {
            (None | Some("status"), _) | (Some("scale"), "deployments" | "replicasets") => {}
            (Some("log"), "pods") if *method == Method::GET => return self.log(&t),
            _ => return Err(ApiError::not_found_path(path)),
        }
        let watch = matches!(self.param("watch"), Some("true" | "1"));
        let name = t.name.clone();
        match (method.clone(), name) {
            (Method::GET, None) if watch => watch::serve(&self.kube, &t, &self.params),
            (Method::GET, None) => self.list(&t),
            (Method::GET, Some(name)) => self.get(&t, &name),
            (Method::POST, None) => self.create(&t),
            (Method::PUT, Some(name)) => self.write(&t, &name, false),
            (Method::PATCH, Some(name)) => self.write(&t, &name, true),
            (Method::DELETE, Some(name)) if t.sub.is_none() => self.delete(&t, &name),
            (Method::DELETE, None) => self.delete_collection(&t),
            (m, _) => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!(
                    "the server does not allow this method on the requested resource ({m} {path})"
                ),
            )),
        }
    }

    fn get(&self, t: &Target, name: &str) -> Result<Response, ApiError> {
        let store = self.kube.store();
        let obj = store
            .get(t.rt, t.namespace.as_deref(), name)
            .ok_or_else(|| ApiError::not_found(t.rt, name))?;
        let v = if t.sub.as_deref() == Some("scale") {
            scale_of(obj)
        } else {
            obj.clone()
        };
        Ok(json_response(StatusCode::OK, &v))
    }

    fn list(&self, t: &Target) -> Result<Response, ApiError> {
        let sel = self.selector()?;
        let (items, rv) = {
            let store = self.kube.store();
            (
                store.list(t.rt, t.namespace.as_deref(), &sel),
                store.resource_version(),
            )
        };
        let (items, more) = self.page(items)?;
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(token) = more {
            meta["continue"] = json!(token);
        }
        Ok(json_response(StatusCode::OK, &list_of(t.rt, items, meta)))
    }

    /// `limit` and `continue`: the token is the namespace and name of the
    /// last object of the page before.
    fn page(&self, items: Vec<Value>) -> Result<(Vec<Value>, Option<String>), ApiError> {
        let position = |v: &Value| {
            format!(
                "{}/{}",
                v["metadata"]["namespace"].as_str().unwrap_or_default(),
                v["metadata"]["name"].as_str().unwrap_or_default()
            )
        };
        let mut items: Vec<Value> = match self.param("continue") {
            Some(after) => items
                .into_iter()
                .filter(|v| position(v).as_str() > after)
                .collect(),
            None => items,
        };
        let limit = match self.param("limit") {
            Some(l) => l
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
            None => 0,
        };
        if limit > 0 && items.len() > limit {
            items.truncate(limit);
            let token = position(items.last().expect("limit > 0"));
            return Ok((items, Some(token)));
        }
        Ok((items, None))
    }

    fn create(&self, t: &Target) -> Result<Response, ApiError> {
        let obj = self.body_json()?;
        check_type(t.rt, &obj)?;
        if let (Some(ns), Some(body_ns)) = (
            t.namespace.as_deref(),
            obj["metadata"]["namespace"].as_str(),
        ) && ns != body_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut obj = obj;
        patch::record_update(&mut obj, self.param("fieldManager"), None, &now());
        let created = self
            .kube
            .store()
            .create(t.rt, t.namespace.as_deref(), obj, true)?;
        self.kube.fire(Verb::Create, t.rt.plural, &created);
        Ok(json_response(StatusCode::CREATED, &created))
    }

    /// PUT (`patch == false`) and PATCH of an object, its status or its scale.
    fn write(&self, t: &Target, name: &str, is_patch: bool) -> Result<Response, ApiError> {
        let body = self.body_json()?;
        let manager = self.param("fieldManager");
        let sub = t.sub.as_deref();
        let ns = t.namespace.as_deref();
        let apply =
            is_patch && self.content_type.as_deref() == Some("application/apply-patch+yaml");
        let mut store = self.kube.store();
        let Some(cur) = store.get(t.rt, ns, name).cloned() else {
            if !apply || sub.is_some() {
                return Err(ApiError::not_found(t.rt, name));
            }
            // Server-side apply of an object that does not exist creates it.
            let manager = manager.ok_or_else(|| field_manager_required(t.rt, name))?;
            check_type(t.rt, &body)?;
            check_name(name, &body)?;
            let empty = json!({"apiVersion": t.rt.api_version(), "metadata": {}});
            let mut obj = patch::apply(&empty, &body, manager, true, Scope::Main, &now())
                .map_err(|m| ApiError::conflict(t.rt, name, &m))?;
            obj["metadata"]["name"] = json!(name);
            let created = store.create(t.rt, ns, obj, true)?;
            drop(store);
            self.kube.fire(Verb::Create, t.rt.plural, &created);
            return Ok(json_response(StatusCode::CREATED, &created));
        };
        let cur_rv = cur["metadata"]["resourceVersion"].clone();
        let stale = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .is_some_and(|rv| cur_rv != rv)
        };
        // What the request says the addressed part (object, status or scale) becomes.
        let before = if sub == Some("scale") {
            scale_of(&cur)
        } else {
            cur.clone()
        };
        if sub != Some("scale") {
            check_type(t.rt, &body)?;
        }
        let after = if !is_patch {
            check_name(name, &body)?;
            body.clone()
        } else {
            match self.content_type.as_deref() {
                Some("application/apply-patch+yaml") => {
                    let manager = manager.ok_or_else(|| field_manager_required(t.rt, name))?;
                    check_name(name, &body)?;
                    let force = self.param("force") == Some("true");
                    let scope = if sub == Some("status") {
                        Scope::Status
                    } else {
                        Scope::Main
                    };
                    if sub == Some("scale") {
                        let mut s = before.clone();
                        patch::merge_patch(&mut s, &body);
                        s
                    } else {
                        patch::apply(&before, &body, manager, force, scope, &now())
                            .map_err(|m| ApiError::conflict(t.rt, name, &m))?
                    }
                }
                Some("application/merge-patch+json" | "application/strategic-merge-patch+json") => {
                    let mut v = before.clone();
                    patch::merge_patch(&mut v, &body);
                    v
                }
                Some("application/json-patch+json") => {
                    let mut v = before.clone();
                    patch::json_patch(&mut v, &body)
                        .map_err(|m| ApiError::invalid(t.rt, name, m))?;
                    v
                }
                other => {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!(
                            "the body of the request was in an unknown format: {}",
                            other.unwrap_or("none")
                        ),
                    ));
                }
            }
        };
        if stale(&body) || stale(&after) {
            return Err(ApiError::stale(t.rt, name));
        }
        let mut candidate = match sub {
            Some("scale") => {
                let mut c = cur.clone();
                c["spec"]["replicas"] = after["spec"]["replicas"].clone();
                c
            }
            Some(_) => {
                let mut c = cur.clone();
                c["status"] = after["status"].clone();
                if apply {
                    c["metadata"]["managedFields"] = after["metadata"]["managedFields"].clone();
                }
                c
            }
            None => {
                let mut c = after;
                match cur.get("status") {
                    Some(s) => c["status"] = s.clone(),
                    None => {
                        c.as_object_mut()
                            .expect("checked to be an object")
                            .remove("status");
                    }
                }
                c
            }
        };
        if !apply {
            if candidate["metadata"].get("managedFields").is_none() {
                candidate["metadata"]["managedFields"] = cur["metadata"]["managedFields"].clone();
            }
            patch::record_update(&mut candidate, manager, sub, &now());
        }
        if candidate["metadata"]["managedFields"]
            .as_array()
            .is_some_and(Vec::is_empty)
            || candidate["metadata"]["managedFields"].is_null()
        {
            candidate["metadata"]
                .as_object_mut()
                .map(|m| m.remove("managedFields"));
        }
        let written = store.commit(t.rt, ns, name, candidate)?;
        drop(store);
        let verb = if is_patch { Verb::Patch } else { Verb::Update };
        if sub != Some("status") {
            self.kube.fire(verb, t.rt.plural, &written);
        }
        let answer = if sub == Some("scale") {
            scale_of(&written)
        } else {
            written
        };
        Ok(json_response(StatusCode::OK, &answer))
    }

    /// DeleteOptions come in the body or the query.
    fn delete_options(&self) -> Result<Value, ApiError> {
        let mut opts = if self.body.is_empty() {
            json!({})
        } else {
            self.body_json()?
        };
        if let Some(p) = self.param("propagationPolicy") {
            opts["propagationPolicy"] = json!(p);
        }
        Ok(opts)
    }

    fn delete(&self, t: &Target, name: &str) -> Result<Response, ApiError> {
        let opts = self.delete_options()?;
        let cascade = opts["propagationPolicy"] != "Orphan" && opts["orphanDependents"] != true;
        let deleted = {
            let mut store = self.kube.store();
            let cur = store
                .get(t.rt, t.namespace.as_deref(), name)
                .ok_or_else(|| ApiError::not_found(t.rt, name))?;
            for field in ["uid", "resourceVersion"] {
                let want = &opts["preconditions"][field];
                if want.is_string() && *want != cur["metadata"][field] {
                    return Err(ApiError::conflict(
                        t.rt,
                        name,
                        &format!(
                            "Precondition failed: {field} in precondition: {want}, {field} in object meta: {}",
                            cur["metadata"][field]
                        ),
                    ));
                }
            }
            store.delete(t.rt, t.namespace.as_deref(), name, cascade)?
        };
        self.kube.fire(Verb::Delete, t.rt.plural, &deleted);
        let status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": t.rt.group,
                "kind": t.rt.plural,
                "uid": deleted["metadata"]["uid"],
            },
        });
        Ok(json_response(StatusCode::OK, &status))
    }

    fn delete_collection(&self, t: &Target) -> Result<Response, ApiError> {
        let opts = self.delete_options()?;
        let cascade = opts["propagationPolicy"] != "Orphan" && opts["orphanDependents"] != true;
        let sel = self.selector()?;
        let (deleted, rv) = {
            let mut store = self.kube.store();
            let doomed = store.list(t.rt, t.namespace.as_deref(), &sel);
            let mut deleted = Vec::new();
            for obj in doomed {
                let ns = obj["metadata"]["namespace"].as_str();
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                // Gone already when an earlier deletion cascaded to it.
                if let Ok(d) = store.delete(t.rt, ns, name, cascade) {
                    deleted.push(d);
                }
            }
            (deleted, store.resource_version())
        };
        for d in &deleted {
            self.kube.fire(Verb::Delete, t.rt.plural, d);
        }
        let meta = json!({"resourceVersion": rv.to_string()});
        Ok(json_response(StatusCode::OK, &list_of(t.rt, deleted, meta)))
    }

    /// `GET .../pods/{name}/log`: the text set with `set_pod_log`,
    /// `tailLines` and `limitBytes` applied.
    fn log(&self, t: &Target) -> Result<Response, ApiError> {
        let name = t.name.as_deref().unwrap_or_default();
        let ns = t.namespace.as_deref().unwrap_or_default();
        if self.kube.store().get(t.rt, Some(ns), name).is_none() {
            return Err(ApiError::not_found(t.rt, name));
        }
        let mut text = self.kube.pod_log(ns, name);
        if let Some(n) = self.param("tailLines") {
            let n: usize = n
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid tailLines {n:?}")))?;
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            text = lines[lines.len().saturating_sub(n)..].concat();
        }
        if let Some(n) = self.param("limitBytes") {
            let mut n: usize = n
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limitBytes {n:?}")))?;
            while n < text.len() && !text.is_char_boundary(n) {
                n -= 1;
            }
            text.truncate(n);
        }
        Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
    }
}

fn field_manager_required(rt: &ResourceType, name: &str) -> ApiError {
    ApiError::invalid(
        rt,
        name,
        "fieldManager: Required value: is required for apply patch",
    )
}

/// The body's kind and apiVersion, when given, must be the path's.
fn check_type(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    let kind_ok = body["kind"].as_str().is_none_or(|k| k == rt.kind);
    let version_ok = body["apiVersion"]
        .as_str()
        .is_none_or(|v| v == rt.api_version());
    if kind_ok && version_ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({}) or kind {}",
            body["apiVersion"],
            rt.api_version(),
            rt.kind
        )))
    }
}

/// A body naming an object must name the one in the path.
fn check_name(name: &str, body: &Value) -> Result<(), ApiError> {
    match body["metadata"]["name"].as_str() {
        Some(n) if n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => Ok(()),
    }
}

fn list_of(rt: &ResourceType, items: Vec<Value>, metadata: Value) -> Value {
    json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": metadata,
        "items": items,
    })
}

/// The `autoscaling/v1` Scale of a Deployment or ReplicaSet.
pub fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let selector = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}
