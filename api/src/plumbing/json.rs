//! JSON request bodies and answers.

use crate::plumbing::error::{ApiError, ApiResult};

/// Parses a JSON body: 400 when it is not JSON, 422 when it is the wrong shape.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        match e.classify() {
            serde_json::error::Category::Data => {
                let msg = e.to_string();
                // Unknown and missing fields name themselves; other errors sit at a path.
                let named = msg.split('`').nth(1).filter(|_| {
                    msg.starts_with("unknown field") || msg.starts_with("missing field")
                });
                let field = match named {
                    Some(name) if path == "." => name.to_owned(),
                    Some(name) if path == name || path.ends_with(&format!(".{name}")) => path,
                    Some(name) => format!("{path}.{name}"),
                    // A top-level array or scalar has no field to name.
                    None if path.starts_with(|c: char| c.is_ascii_alphabetic()) => path,
                    None => "body".to_owned(),
                };
                ApiError::invalid(
                    &field,
                    format!("the request body does not match the schema: {msg}"),
                )
            }
            _ => ApiError::malformed(format!("the request body is not valid JSON: {e}")),
        }
    })
}
