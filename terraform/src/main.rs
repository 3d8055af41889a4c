//! The provider binary Terraform starts: see the crate `sless_terraform`.
//! The one place the provider reads its environment.

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn main() {
    let env = sless_terraform::Environment {
        magic_cookie: var("TF_PLUGIN_MAGIC_COOKIE"),
        protocol_versions: var("PLUGIN_PROTOCOL_VERSIONS"),
        client_cert: var("PLUGIN_CLIENT_CERT"),
        endpoint: var("SLESS_ENDPOINT"),
        token: var("SLESS_TOKEN"),
    };
    std::process::exit(sless_terraform::main(env));
}
