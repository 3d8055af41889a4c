//! The messages and services generated from `proto/` (build.rs).

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod plugin {
    tonic::include_proto!("plugin");
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
