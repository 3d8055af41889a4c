//! The sless API a configured provider talks to ([`Api`]), and how the
//! provider block's settings, over the environment's, make one
//! (`configure`): the client, checked with one call so that a wrong
//! endpoint or token is reported at plan.

use std::time::Duration;

use sless_client::{Client, Config, EventFilter};
use tokio::sync::watch;

use crate::diag::Diag;
use crate::secret;
use crate::value::Value;

/// The API this provider was configured for.
pub struct Api {
    pub client: Client,
    pub namespace: String,
    pub endpoint: String,
    /// Becomes true when Terraform asks the provider to stop (Ctrl-C).
    pub stop: watch::Receiver<bool>,
}

impl Api {
    /// Resolves once Terraform asked the provider to stop: waits end then
    /// (what they waited for goes on on the server).
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|stopped| *stopped).await;
    }
}

/// The provider block's settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) endpoint: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) namespace: Option<String>,
}

/// The provider block's settings, over `defaults` (the environment's).
fn settings(config: &Value, defaults: &Settings) -> Settings {
    let get = |name: &str| config.get(name).as_str().map(str::to_owned);
    Settings {
        endpoint: get("endpoint").or_else(|| defaults.endpoint.clone()),
        token: get("token").or_else(|| defaults.token.clone()),
        namespace: get("namespace"),
    }
}

/// Makes the client, and asks the API once, so that a wrong endpoint or
/// token is reported at plan, naming which.
pub(crate) async fn configure(
    config: &Value,
    defaults: &Settings,
    stop: watch::Receiver<bool>,
) -> Result<Api, Diag> {
    for name in ["endpoint", "token", "namespace"] {
        if matches!(config.get(name), Value::Unknown) {
            return Err(Diag::attr(
                name,
                "Unknown provider setting",
                format!(
                    "{name} must be known when Terraform plans, not computed by another resource"
                ),
            ));
        }
    }
    let s = settings(config, defaults);
    let endpoint = s.endpoint.ok_or_else(|| {
        Diag::attr(
            "endpoint",
            "No endpoint",
            "Set the provider's endpoint (or SLESS_ENDPOINT): the URL `sless dev` prints.",
        )
    })?;
    let token = s.token.ok_or_else(|| {
        Diag::attr(
            "token",
            "No token",
            "Set the provider's token (or SLESS_TOKEN): `sless dev` prints one.",
        )
    })?;
    let mut cfg = Config::new(endpoint.clone(), Some(token.clone()));
    cfg.namespace = s.namespace;
    cfg.timeout = Duration::from_secs(60);
    let client = Client::with_config(cfg).map_err(|e| {
        let attr = if e.to_string().contains("endpoint") {
            "endpoint"
        } else if e.to_string().contains("namespace") {
            "namespace"
        } else {
            "token"
        };
        Diag::attr(
            attr,
            "Invalid provider setting",
            secret::redact(&e.to_string(), &token),
        )
    })?;
    // One page of one event: any token that may read the namespace may.
    let probe = EventFilter {
        limit: Some(1),
        ..EventFilter::default()
    };
    match client.list_events(&probe).await {
        Ok(_) => {}
        Err(e) => return Err(probe_failure(&e, &endpoint, client.namespace(), &token)),
    }
    let namespace = client.namespace().to_owned();
    Ok(Api {
        client,
        namespace,
        endpoint,
        stop,
    })
}

/// What a failed first call says of the settings.
fn probe_failure(e: &sless_client::Error, endpoint: &str, namespace: &str, token: &str) -> Diag {
    use sless_client::Error;
    let said = secret::redact(&e.to_string(), token);
    match e {
        Error::Connect { .. } | Error::Timeout { .. } | Error::Decode { .. } => Diag::attr(
            "endpoint",
            "Cannot reach the sless API",
            format!(
                "{said}\nIs the endpoint {endpoint} right, and is sless running there (`sless dev`)?"
            ),
        ),
        Error::Api(p) if p.status == 401 || p.status == 403 => Diag::attr(
            "token",
            "The sless API refused the token",
            format!(
                "{endpoint} refused the token: {}",
                secret::redact(&p.detail, token)
            ),
        ),
        Error::Api(p) if p.status == 404 => Diag::attr(
            "namespace",
            "No such namespace for this token",
            format!("the token may not act in namespace {namespace} at {endpoint}"),
        ),
        _ => Diag::error("The sless API failed", said),
    }
}
