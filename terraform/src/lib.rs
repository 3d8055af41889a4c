//! `terraform-provider-sless`: sless functions, triggers and jobs as
//! Terraform resources (`sless_function`, `sless_trigger`, `sless_job`),
//! and the data sources `sless_function` and `sless_functions`.
//!
//! It speaks Terraform's provider protocol 6 over gRPC (`plugin`: the
//! handshake and mutual TLS of go-plugin; `provider`: the calls, handed to
//! `resources` and `data`, which reach sless through the configured
//! [`api::Api`]), and reaches sless through `sless-client` only: it
//! imports no crate of the server (the crates `sless-api`, `sless-store`,
//! `sless-workers`), and checks what it can before
//! anything is sent with the domain's own rules (`sless-domain`), so a
//! plan reports bad input with the API's words and writes nothing.

pub mod api;
pub mod data;
pub mod diag;
pub mod plugin;
pub mod proto;
pub mod provider;
pub mod resources;
pub mod schema;
pub mod secret;
pub mod value;

/// What the provider takes from its environment. The binary (`main.rs`)
/// reads it, once; nothing else in the provider reads the environment.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `TF_PLUGIN_MAGIC_COOKIE`: set by Terraform when it runs the plugin.
    pub magic_cookie: Option<String>,
    /// `PLUGIN_PROTOCOL_VERSIONS`: the protocols Terraform speaks.
    pub protocol_versions: Option<String>,
    /// `PLUGIN_CLIENT_CERT`: Terraform's certificate, when it wants TLS.
    pub client_cert: Option<String>,
    /// `SLESS_ENDPOINT`: the provider block's `endpoint` when it sets none.
    pub endpoint: Option<String>,
    /// `SLESS_TOKEN`: the provider block's `token` when it sets none.
    pub token: Option<String>,
}

/// Runs the provider as Terraform's plugin; the process's exit code.
pub fn main(env: Environment) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("terraform-provider-sless: cannot start: {e}");
            return 1;
        }
    };
    let provider = provider::ProviderService::new(env.endpoint.clone(), env.token.clone());
    runtime.block_on(plugin::serve(env, provider))
}

#[cfg(test)]
mod tests {
    /// The provider is a client like any other: of our crates it uses
    /// `sless-client` and `sless-domain` only.
    #[test]
    fn the_provider_depends_on_no_crate_of_the_server() {
        let manifest = include_str!("../Cargo.toml");
        let ours: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.trim().split(['.', ' ', '=']).next())
            .filter(|name| name.starts_with("sless-"))
            .collect();
        assert_eq!(ours, ["sless-client", "sless-domain"], "{manifest}");
    }
}
