//! Functions: their spec, uploads, source and versions, build logs,
//! invocation records, and calls through `/fn`.

use reqwest::Method;
use reqwest::header::{ACCEPT, HeaderName, HeaderValue};
use sless_api_types::{
    CreateFunction, Deleted, FunctionList, FunctionView, InvocationPage, Rollback, SourceView,
    UpdateFunction, Uploaded, VersionDiff, VersionList,
};

use crate::error::{Error, Result};
use crate::http::{Body, Call};
use crate::pages::{PageQuery, every_page};
use crate::sse::SseReader;
use crate::{Client, Tagged};

/// A call of a function through `/fn`.
#[derive(Debug, Clone)]
pub struct Invoke {
    pub method: String,
    /// The path the function sees (`/` by default), with its query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Default for Invoke {
    fn default() -> Invoke {
        Invoke {
            method: "GET".into(),
            path: "/".into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

/// A function's answer.
#[derive(Debug, Clone)]
pub struct Invoked {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: bytes::Bytes,
}

/// One event of a followed build log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildLogEvent {
    /// A line the build printed (without its line end).
    Line(String),
    /// The build ended: `outcome` is `succeeded` or `failed` (or what the
    /// server said when it stopped waiting), with its error.
    End {
        outcome: String,
        error: Option<String>,
    },
}

/// A build log as it is written.
pub struct BuildLogStream {
    reader: SseReader,
    done: bool,
}

impl BuildLogStream {
    /// The next line, or the end; `None` once the end was read.
    pub async fn next(&mut self) -> Option<Result<BuildLogEvent>> {
        while !self.done {
            let event = match self.reader.next().await? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            match event.event.as_str() {
                "line" => return Some(Ok(BuildLogEvent::Line(event.data))),
                "end" => {
                    self.done = true;
                    let v: serde_json::Value =
                        serde_json::from_str(&event.data).unwrap_or_default();
                    let text = |k: &str| v.get(k).and_then(|s| s.as_str()).map(str::to_owned);
                    return Some(Ok(BuildLogEvent::End {
                        outcome: text("outcome").unwrap_or_else(|| "unknown".into()),
                        error: text("error"),
                    }));
                }
                _ => continue,
            }
        }
        None
    }
}

fn function_path(client: &Client, name: &str, rest: &str) -> String {
    client.in_namespace(&format!("/functions/{name}{rest}"))
}

impl Client {
    /// `POST /functions`: a new function, `Pending` until its first upload.
    pub async fn create_function(&self, req: &CreateFunction) -> Result<Tagged<FunctionView>> {
        let path = self.in_namespace("/functions");
        self.tagged(Call::new(Method::POST, &path).body(Body::json(req)?))
            .await
    }

    /// `GET /functions`: every function, by name (every page, followed).
    pub async fn list_functions(&self) -> Result<FunctionList> {
        every_page(|q| async move { self.list_functions_page(&q).await }).await
    }

    /// `GET /functions`: one page, by name.
    pub async fn list_functions_page(&self, query: &PageQuery) -> Result<FunctionList> {
        let path = self.in_namespace("/functions");
        self.json(query.on(Call::get(&path))).await
    }

    /// `GET /functions/{name}`, with its stream version.
    pub async fn get_function(&self, name: &str) -> Result<Tagged<FunctionView>> {
        self.tagged(Call::get(&function_path(self, name, ""))).await
    }

    /// `PUT /functions/{name}`: changes the fields given.
    pub async fn update_function(
        &self,
        name: &str,
        change: &UpdateFunction,
    ) -> Result<Tagged<FunctionView>> {
        let path = function_path(self, name, "");
        self.tagged(Call::new(Method::PUT, &path).body(Body::json(change)?))
            .await
    }

    /// `DELETE /functions/{name}`.
    pub async fn delete_function(&self, name: &str) -> Result<Deleted> {
        self.json(Call::new(Method::DELETE, &function_path(self, name, "")))
            .await
    }

    /// `POST /functions/{name}/upload`: a zip of the function's source
    /// (see [`crate::package::zip_dir`]).
    pub async fn upload(
        &self,
        name: &str,
        zip: impl Into<bytes::Bytes>,
    ) -> Result<Tagged<Uploaded>> {
        let path = function_path(self, name, "/upload");
        let body = Body::Bytes {
            bytes: zip.into(),
            content_type: "application/zip",
        };
        self.tagged(Call::new(Method::POST, &path).body(body)).await
    }

    /// `GET /functions/{name}/source`: the current version's files.
    pub async fn get_source(&self, name: &str) -> Result<SourceView> {
        self.json(Call::get(&function_path(self, name, "/source")))
            .await
    }

    /// `GET /functions/{name}/versions`: every kept version, newest first
    /// (every page, followed).
    pub async fn list_versions(&self, name: &str) -> Result<VersionList> {
        every_page(|q| async move { self.list_versions_page(name, &q).await }).await
    }

    /// `GET /functions/{name}/versions`: one page, newest first.
    pub async fn list_versions_page(&self, name: &str, query: &PageQuery) -> Result<VersionList> {
        let path = function_path(self, name, "/versions");
        self.json(query.on(Call::get(&path))).await
    }

    /// `GET /functions/{name}/versions/{v}/source`.
    pub async fn get_version_source(&self, name: &str, version: u32) -> Result<SourceView> {
        let path = function_path(self, name, &format!("/versions/{version}/source"));
        self.json(Call::get(&path)).await
    }

    /// `GET /functions/{name}/versions/{v}/archive`: the zip as uploaded.
    pub async fn get_version_archive(&self, name: &str, version: u32) -> Result<bytes::Bytes> {
        let path = function_path(self, name, &format!("/versions/{version}/archive"));
        self.bytes(Call::get(&path)).await
    }

    /// `GET /functions/{name}/versions/{from}/diff/{to}`.
    pub async fn diff_versions(&self, name: &str, from: u32, to: u32) -> Result<VersionDiff> {
        let path = function_path(self, name, &format!("/versions/{from}/diff/{to}"));
        self.json(Call::get(&path)).await
    }

    /// `POST /functions/{name}/rollback`: makes `version` live again.
    pub async fn rollback(&self, name: &str, version: u32) -> Result<Tagged<FunctionView>> {
        let path = function_path(self, name, "/rollback");
        let body = Body::json(&Rollback { version })?;
        self.tagged(Call::new(Method::POST, &path).body(body)).await
    }

    /// `GET /functions/{name}/versions/{v}/build-log`: the log so far.
    pub async fn get_build_log(&self, name: &str, version: u32) -> Result<String> {
        let path = function_path(self, name, &format!("/versions/{version}/build-log"));
        let bytes = self.bytes(Call::get(&path)).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The build log of a version as it is written: every line so far,
    /// then the new ones, until the build ends.
    pub async fn follow_build_log(&self, name: &str, version: u32) -> Result<BuildLogStream> {
        let path = function_path(self, name, &format!("/versions/{version}/build-log"));
        let mut call = Call::get(&path).query("follow", "true");
        call.headers
            .insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        call.streaming = true;
        let response = self.send(call).await?;
        Ok(BuildLogStream {
            reader: SseReader::new(response),
            done: false,
        })
    }

    /// `GET /functions/{name}/invocations`: one page, newest first.
    pub async fn list_invocations(&self, name: &str, query: &PageQuery) -> Result<InvocationPage> {
        let path = function_path(self, name, "/invocations");
        self.json(query.on(Call::get(&path))).await
    }

    /// Calls the function through `/fn`, at its `url`. Its answer is
    /// the function's, whatever the status; an error is a call that got
    /// no answer.
    pub async fn invoke(&self, name: &str, req: &Invoke) -> Result<Invoked> {
        let f = self.get_function(name).await?;
        if !f.url.starts_with("http") {
            return Err(Error::Invalid(format!(
                "the API does not know where functions are served (its url for {name} is {:?})",
                f.url
            )));
        }
        self.invoke_url(&f.url, req).await
    }

    /// Calls a function at its `/fn` URL.
    pub async fn invoke_url(&self, url: &str, req: &Invoke) -> Result<Invoked> {
        let method = Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| Error::Invalid(format!("{:?} is not an HTTP method", req.method)))?;
        let path = req.path.trim_start_matches('/');
        let target = format!("{}/{path}", url.trim_end_matches('/'));
        let mut call = Call::new(method, &target);
        call.any_status = true;
        for (k, v) in &req.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| Error::Invalid(format!("{k:?} is not a header name")))?;
            let value = HeaderValue::from_str(v)
                .map_err(|_| Error::Invalid(format!("the value of header {k} is not valid")))?;
            call.headers.append(name, value);
        }
        if !req.body.is_empty() {
            let content_type = if req
                .headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                None
            } else {
                Some("application/octet-stream")
            };
            call.body = match content_type {
                Some(content_type) => Body::Bytes {
                    bytes: req.body.clone().into(),
                    content_type,
                },
                None => Body::Raw(req.body.clone().into()),
            };
        }
        let response = self.send(call).await?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let endpoint = crate::http::origin_of(url);
        let body = response.bytes().await.map_err(|e| Error::Connect {
            endpoint,
            message: crate::http::root_cause(&e),
        })?;
        Ok(Invoked {
            status,
            headers,
            body,
        })
    }
}
