//! Path parameters: read with a rejection that is a problem document
//! (`PathParams`), and documented once for every route that takes them
//! (`NamespacePath`, `FunctionPath`, `TriggerPath`, `JobPath`).

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ObjectBuilder, Required, Type};

use crate::plumbing::error::ApiError;

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

/// The path parameters of a route, as its `#[utoipa::path]` documents
/// them (`params(FunctionPath, …)`): `{ns}`, described once here for
/// every route under `/v1/namespaces/{ns}`, and the `{name}` of what the
/// route names.
macro_rules! path_params {
    ($($(#[$doc:meta])* $ty:ident [$($name:literal: $description:literal),*];)*) => {$(
        $(#[$doc])*
        pub struct $ty;

        impl IntoParams for $ty {
            fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
                vec![namespace(), $(path_param($name, $description)),*]
            }
        }
    )*};
}

path_params! {
    /// `{ns}`: a route of the namespace itself, or of all its functions,
    /// triggers or jobs.
    NamespacePath [];
    /// `{ns}` and `{name}`: a function's routes.
    FunctionPath ["name": "The function"];
    /// `{ns}` and `{name}`: a trigger's routes.
    TriggerPath ["name": "The trigger"];
    /// `{ns}` and `{name}`: a job's routes.
    JobPath ["name": "The job"];
}

/// `{ns}`: the caller's own namespace (another's is not found).
fn namespace() -> Parameter {
    path_param(
        "ns",
        "The namespace: the caller's own (`sless-` and 16 hex digits)",
    )
}

/// A path parameter `name`, a string.
fn path_param(name: &str, description: &str) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .description(Some(description))
        .required(Required::True)
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}
