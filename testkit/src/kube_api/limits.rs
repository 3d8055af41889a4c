//! What the API server checks of an object's content besides names and
//! labels, where a driver can run into it: the size limits of Secrets,
//! ConfigMaps and annotations, Secret `stringData`, immutable Secrets and
//! ConfigMaps, and the size of a request body. Each rule cites the
//! Kubernetes code it follows (`k8s.io/kubernetes/pkg/apis/core/validation`,
//! `apimachinery/pkg/api/validation`, `apiserver/pkg/server/config.go`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::resources::{ApiError, ResourceType};

/// `core.MaxSecretSize`: the most bytes of data a Secret (or a ConfigMap,
/// data and binaryData together) holds, counted decoded.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;
/// `TotalAnnotationSizeLimitB`: keys and values of all annotations.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// The API server's `MaxRequestBodyBytes` default: 3 MiB, answered with
/// 413 `RequestEntityTooLarge`.
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;
/// `validation.IsConfigMapKey`: the longest key of a Secret or ConfigMap.
const MAX_KEY_BYTES: usize = 253;

/// The answer to a body over [`MAX_REQUEST_BODY_BYTES`].
pub fn body_too_large() -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"),
    )
}

/// What the API server does to an object as it decodes it: a Secret's
/// write-only `stringData` is merged into `data` (base64, `stringData`
/// winning), and `data` must be base64 (decoding it is where a bad value
/// fails, with 400).
pub fn normalize(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if rt.plural != "secrets" {
        return Ok(());
    }
    for (key, value) in obj["data"].as_object().into_iter().flatten() {
        let text = value.as_str().unwrap_or_default();
        STANDARD.decode(text).map_err(|e| {
            ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data in data[{key:?}]: {e}"
            ))
        })?;
    }
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return Ok(());
    };
    if !obj["data"].is_object() {
        obj["data"] = Value::Object(Map::new());
    }
    for (key, value) in strings {
        let text = value.as_str().unwrap_or_default();
        obj["data"][key.as_str()] = json!(STANDARD.encode(text));
    }
    Ok(())
}

/// `ValidateSecret`, `ValidateConfigMap` and `ValidateAnnotations`: keys,
/// the 1 MiB of data, the 256 KiB of annotations.
pub fn validate_content(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let annotations: usize = obj["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if annotations > MAX_ANNOTATION_BYTES {
        return Err(ApiError::invalid(
            rt,
            name,
            format!(
                "metadata.annotations: Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"
            ),
        ));
    }
    let fields: &[&str] = match rt.plural {
        "secrets" => &["data"],
        "configmaps" => &["data", "binaryData"],
        _ => return Ok(()),
    };
    let mut total = 0;
    for field in fields {
        for (key, value) in obj[*field].as_object().into_iter().flatten() {
            if !is_config_key(key) {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    format!(
                        "{field}[{key}]: Invalid value: {key:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                    ),
                ));
            }
            let text = value.as_str().unwrap_or_default();
            // Secret data and ConfigMap binaryData count decoded; ConfigMap
            // data is text.
            total += if rt.plural == "secrets" || *field == "binaryData" {
                STANDARD.decode(text).map_or(text.len(), |b| b.len())
            } else {
                text.len()
            };
        }
    }
    if total > MAX_DATA_BYTES {
        let path = if rt.plural == "secrets" { "data" } else { "[]" };
        return Err(ApiError::invalid(
            rt,
            name,
            format!("{path}: Too long: must have at most {MAX_DATA_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// `ValidateSecretUpdate` and `ValidateConfigMapUpdate`: once `immutable`
/// is true, neither the data nor `immutable` change; a Secret's `type`
/// never does.
pub fn validate_update(rt: &ResourceType, old: &Value, new: &Value) -> Result<(), ApiError> {
    if rt.plural != "secrets" && rt.plural != "configmaps" {
        return Ok(());
    }
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    let forbidden = |field: &str| {
        ApiError::invalid(
            rt,
            name,
            format!("{field}: Forbidden: field is immutable when `immutable` is set"),
        )
    };
    if rt.plural == "secrets" && old["type"] != new["type"] && !new["type"].is_null() {
        return Err(ApiError::invalid(
            rt,
            name,
            format!("type: Invalid value: {}: field is immutable", new["type"]),
        ));
    }
    if old["immutable"] != true {
        return Ok(());
    }
    if new["immutable"] != old["immutable"] {
        return Err(forbidden("immutable"));
    }
    for field in ["data", "binaryData"] {
        if old[field] != new[field] {
            return Err(forbidden(field));
        }
    }
    Ok(())
}

/// `validation.IsConfigMapKey`.
fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && key != "."
        && key != ".."
        && !key.starts_with("..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
