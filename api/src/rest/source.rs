//! `GET /v1/namespaces/{ns}/functions/{name}/source`: the files of the
//! current version, as JSON.
//!
//! Read from the version's build context in the blob store, without the
//! Dockerfile sless generated: the files of the user's zip. Text files
//! (UTF-8, no NUL bytes) are inlined until `INLINE_LIMIT` bytes are;
//! binary files are marked and never inlined; text files past the limit
//! are listed with `truncated: true` and no content.

use axum::Json;
use axum::extract::State;
use serde_json::json;
use sless_domain::source::{SourceFile, list_context};
use sless_domain::{FunctionKey, SourceVersion};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::path::{FunctionPath, PathParams};
use crate::rest::function::{function_not_found, load, path_key};

/// Bytes of file content one answer inlines at most.
pub const INLINE_LIMIT: u64 = 1024 * 1024;

fn file_view(f: &SourceFile) -> serde_json::Value {
    let mut v = json!({
        "path": f.path,
        "size": f.size,
        "binary": f.binary,
        "truncated": f.truncated,
    });
    if let Some(content) = &f.content {
        v["content"] = json!(content);
    }
    v
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/source", operation_id = "getFunctionSource", tag = "functions",
    summary = "The current version's source files",
    params(FunctionPath),
    responses((status = 200, description = "The source files, text inlined up to a limit", body = crate::rest::openapi::SourceView)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    // The log, not the read model: an upload shows here as soon as it is accepted.
    let f = load(&state, &key).await?;
    if !f.exists() {
        return Err(function_not_found(&key));
    }
    let Some(current) = f.current().cloned() else {
        return Err(ApiError::not_found(format!(
            "function {:?} has no source yet: upload a zip first",
            key.name.as_str()
        )));
    };
    Ok(Json(files_of(&state, &key, &current).await?))
}

/// The answer listing the files of `version` of the function `key`.
pub(crate) async fn files_of(
    state: &AppState,
    key: &FunctionKey,
    version: &SourceVersion,
) -> ApiResult<serde_json::Value> {
    let context = state.blobs.get(&version.context_key).await?;
    let listing = tokio::task::spawn_blocking(move || list_context(&context, INLINE_LIMIT))
        .await
        .map_err(|e| ApiError::internal(format!("reading the source: {e}")))?
        .map_err(|e| ApiError::internal(format!("the stored build context cannot be read: {e}")))?;
    Ok(json!({
        "namespace": key.namespace,
        "name": key.name,
        "version": version.version,
        "sha256": version.sha256,
        "files": listing.files.iter().map(file_view).collect::<Vec<_>>(),
        "truncated": listing.truncated,
        "inlined_bytes": listing.inlined_bytes,
        "inline_limit": INLINE_LIMIT,
    }))
}
