//! Path parameters whose rejection is a problem document.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `Path<T>`, except that a segment that cannot be decoded (percent-encoded
/// bytes that are not UTF-8) answers 404 `not-found` as a problem document
/// instead of axum's plain-text 400: such a segment names nothing that
/// exists.
#[derive(Debug, Clone)]
pub struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(params) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(PathParams(params))
    }
}
