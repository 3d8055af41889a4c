//! The provider's gRPC service: the provider block and its configuration,
//! and each call of the protocol handed to the resource or data source it
//! names. The values of each call are decoded here, and the answers
//! encoded, against the schema of the type the call is about.

use std::sync::{Arc, RwLock};

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::api::{Api, Settings, configure};
use crate::data;
use crate::diag::{self, Diag};
use crate::proto::tfplugin6 as pb;
use crate::proto::tfplugin6::provider_server::Provider;
use crate::resources::{self, Kind};
use crate::schema::{Attr, Block, Mode};
use crate::value::{self, Type, Value};

/// The provider, before and after `ConfigureProvider`.
pub struct ProviderService {
    api: RwLock<Option<Arc<Api>>>,
    stop: watch::Sender<bool>,
    /// `SLESS_ENDPOINT` and `SLESS_TOKEN`: the provider block's defaults.
    defaults: Settings,
}

impl ProviderService {
    pub fn new(endpoint: Option<String>, token: Option<String>) -> ProviderService {
        ProviderService {
            api: RwLock::default(),
            stop: watch::channel(false).0,
            defaults: Settings {
                endpoint,
                token,
                namespace: None,
            },
        }
    }
}

fn provider_block() -> Block {
    Block {
        description: "sless: functions, triggers and jobs of one namespace.",
        attrs: vec![
            Attr::new(
                "endpoint",
                Type::String,
                Mode::Optional,
                "The API's URL (`http://127.0.0.1:8080`); default `SLESS_ENDPOINT`.",
            ),
            Attr::new(
                "token",
                Type::String,
                Mode::Optional,
                "A bearer token of the API; default `SLESS_TOKEN`.",
            )
            .sensitive(),
            Attr::new(
                "namespace",
                Type::String,
                Mode::Optional,
                "The namespace to act in; default the token's own.",
            ),
        ],
        blocks: vec![],
    }
}

type Answer<T> = Result<Response<T>, Status>;

fn dynamic(value: &Value, ty: &Type) -> Option<pb::DynamicValue> {
    Some(pb::DynamicValue {
        msgpack: value::encode(value, ty),
        json: Vec::new(),
    })
}

/// Reads a value Terraform sent (MessagePack, or JSON from old state).
fn read(v: Option<&pb::DynamicValue>) -> Result<Value, Diag> {
    let Some(v) = v else { return Ok(Value::Null) };
    if !v.msgpack.is_empty() {
        return value::decode(&v.msgpack).map_err(|e| {
            Diag::error(
                "Terraform sent a value the provider cannot read",
                e.to_string(),
            )
        });
    }
    if !v.json.is_empty() {
        let json: serde_json::Value = serde_json::from_slice(&v.json).map_err(|e| {
            Diag::error(
                "Terraform sent a value the provider cannot read",
                e.to_string(),
            )
        })?;
        return Ok(Value::from_json(&json));
    }
    Ok(Value::Null)
}

fn unknown_type(name: &str) -> Diag {
    Diag::error(
        "Unknown type",
        format!("terraform-provider-sless has no {name:?}"),
    )
}

impl ProviderService {
    fn api(&self) -> Result<Arc<Api>, Diag> {
        self.api.read().unwrap().clone().ok_or_else(|| {
            Diag::error(
                "The provider is not configured",
                "Terraform asked for a change before it configured the provider.",
            )
        })
    }
}

#[tonic::async_trait]
impl Provider for ProviderService {
    async fn get_metadata(
        &self,
        _: Request<pb::get_metadata::Request>,
    ) -> Answer<pb::get_metadata::Response> {
        Ok(Response::new(pb::get_metadata::Response {
            server_capabilities: None,
            diagnostics: vec![],
            data_sources: data::NAMES
                .iter()
                .map(|n| pb::get_metadata::DataSourceMetadata {
                    type_name: (*n).to_owned(),
                })
                .collect(),
            resources: Kind::ALL
                .iter()
                .map(|k| pb::get_metadata::ResourceMetadata {
                    type_name: k.name().to_owned(),
                })
                .collect(),
        }))
    }

    async fn get_provider_schema(
        &self,
        _: Request<pb::get_provider_schema::Request>,
    ) -> Answer<pb::get_provider_schema::Response> {
        Ok(Response::new(pb::get_provider_schema::Response {
            provider: Some(provider_block().schema()),
            resource_schemas: Kind::ALL
                .iter()
                .map(|k| (k.name().to_owned(), k.block().schema()))
                .collect(),
            data_source_schemas: data::NAMES
                .iter()
                .filter_map(|n| Some(((*n).to_owned(), data::block(n)?.schema())))
                .collect(),
            diagnostics: vec![],
            provider_meta: None,
            server_capabilities: None,
        }))
    }

    async fn validate_provider_config(
        &self,
        req: Request<pb::validate_provider_config::Request>,
    ) -> Answer<pb::validate_provider_config::Response> {
        let diags = match read(req.get_ref().config.as_ref()) {
            Ok(config) => validate_provider(&config),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_provider_config::Response {
            diagnostics: diag::all(&diags),
        }))
    }

    async fn validate_resource_config(
        &self,
        req: Request<pb::validate_resource_config::Request>,
    ) -> Answer<pb::validate_resource_config::Response> {
        let req = req.into_inner();
        let diags = match (Kind::of(&req.type_name), read(req.config.as_ref())) {
            (None, _) => vec![unknown_type(&req.type_name)],
            (_, Err(d)) => vec![d],
            (Some(kind), Ok(config)) => kind.validate(&config),
        };
        Ok(Response::new(pb::validate_resource_config::Response {
            diagnostics: diag::all(&diags),
        }))
    }

    async fn validate_data_resource_config(
        &self,
        req: Request<pb::validate_data_resource_config::Request>,
    ) -> Answer<pb::validate_data_resource_config::Response> {
        let req = req.into_inner();
        let diags = match read(req.config.as_ref()) {
            Ok(config) => data::validate(&req.type_name, &config),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_data_resource_config::Response {
            diagnostics: diag::all(&diags),
        }))
    }

    async fn upgrade_resource_state(
        &self,
        req: Request<pb::upgrade_resource_state::Request>,
    ) -> Answer<pb::upgrade_resource_state::Response> {
        let req = req.into_inner();
        let Some(kind) = Kind::of(&req.type_name) else {
            return Ok(Response::new(pb::upgrade_resource_state::Response {
                upgraded_state: None,
                diagnostics: diag::all(&[unknown_type(&req.type_name)]),
            }));
        };
        // One schema version so far: the stored JSON is read as it is, and
        // written again with the schema's type (attributes it no longer
        // has are dropped, new ones are null).
        let json = req.raw_state.map(|r| r.json).unwrap_or_default();
        let state = match serde_json::from_slice::<serde_json::Value>(&json) {
            Ok(j) => Value::from_json(&j),
            Err(e) => {
                return Ok(Response::new(pb::upgrade_resource_state::Response {
                    upgraded_state: None,
                    diagnostics: diag::all(&[Diag::error(
                        "The stored state cannot be read",
                        e.to_string(),
                    )]),
                }));
            }
        };
        Ok(Response::new(pb::upgrade_resource_state::Response {
            upgraded_state: dynamic(&state, &kind.block().ty()),
            diagnostics: vec![],
        }))
    }

    async fn configure_provider(
        &self,
        req: Request<pb::configure_provider::Request>,
    ) -> Answer<pb::configure_provider::Response> {
        let diags = match read(req.get_ref().config.as_ref()) {
            Err(d) => vec![d],
            Ok(config) => match configure(&config, &self.defaults, self.stop.subscribe()).await {
                Ok(api) => {
                    *self.api.write().unwrap() = Some(Arc::new(api));
                    vec![]
                }
                Err(d) => vec![d],
            },
        };
        Ok(Response::new(pb::configure_provider::Response {
            diagnostics: diag::all(&diags),
        }))
    }

    async fn read_resource(
        &self,
        req: Request<pb::read_resource::Request>,
    ) -> Answer<pb::read_resource::Response> {
        let req = req.into_inner();
        let answer = async {
            let kind = Kind::of(&req.type_name).ok_or_else(|| unknown_type(&req.type_name))?;
            let state = read(req.current_state.as_ref())?;
            let api = self.api()?;
            let read = kind.read(&api, &state, &req.private).await?;
            Ok::<_, Diag>((kind, read))
        }
        .await;
        Ok(Response::new(match answer {
            Ok((kind, (state, private))) => pb::read_resource::Response {
                new_state: dynamic(&state, &kind.block().ty()),
                diagnostics: vec![],
                private,
            },
            Err(d) => pb::read_resource::Response {
                new_state: req.current_state,
                diagnostics: diag::all(&[d]),
                private: req.private,
            },
        }))
    }

    async fn plan_resource_change(
        &self,
        req: Request<pb::plan_resource_change::Request>,
    ) -> Answer<pb::plan_resource_change::Response> {
        let req = req.into_inner();
        let answer = async {
            let kind = Kind::of(&req.type_name).ok_or_else(|| unknown_type(&req.type_name))?;
            let change = resources::Change {
                prior: read(req.prior_state.as_ref())?,
                proposed: read(req.proposed_new_state.as_ref())?,
                config: read(req.config.as_ref())?,
                private: req.prior_private.clone(),
            };
            let api = self.api()?;
            let planned = kind.plan(&api, change).await?;
            Ok::<_, Diag>((kind, planned))
        }
        .await;
        Ok(Response::new(match answer {
            Ok((kind, planned)) => pb::plan_resource_change::Response {
                planned_state: dynamic(&planned.state, &kind.block().ty()),
                requires_replace: planned
                    .replace
                    .iter()
                    .map(|name| diag::path(&[name]))
                    .collect(),
                planned_private: planned.private,
                diagnostics: vec![],
            },
            Err(d) => pb::plan_resource_change::Response {
                planned_state: None,
                requires_replace: vec![],
                planned_private: vec![],
                diagnostics: diag::all(&[d]),
            },
        }))
    }

    async fn apply_resource_change(
        &self,
        req: Request<pb::apply_resource_change::Request>,
    ) -> Answer<pb::apply_resource_change::Response> {
        let req = req.into_inner();
        let answer = async {
            let kind = Kind::of(&req.type_name).ok_or_else(|| unknown_type(&req.type_name))?;
            let change = resources::Change {
                prior: read(req.prior_state.as_ref())?,
                proposed: read(req.planned_state.as_ref())?,
                config: read(req.config.as_ref())?,
                private: req.planned_private.clone(),
            };
            let api = self.api()?;
            Ok::<_, Diag>((kind, kind.apply(&api, change).await))
        }
        .await;
        Ok(Response::new(match answer {
            Ok((kind, applied)) => pb::apply_resource_change::Response {
                new_state: dynamic(&applied.state, &kind.block().ty()),
                private: applied.private,
                diagnostics: diag::all(&applied.diags),
            },
            Err(d) => pb::apply_resource_change::Response {
                new_state: req.prior_state,
                private: req.planned_private,
                diagnostics: diag::all(&[d]),
            },
        }))
    }

    async fn import_resource_state(
        &self,
        req: Request<pb::import_resource_state::Request>,
    ) -> Answer<pb::import_resource_state::Response> {
        let req = req.into_inner();
        let answer = async {
            let kind = Kind::of(&req.type_name).ok_or_else(|| unknown_type(&req.type_name))?;
            let api = self.api()?;
            let (state, private) = kind.import(&api, &req.id).await?;
            Ok::<_, Diag>((kind, state, private))
        }
        .await;
        Ok(Response::new(match answer {
            Ok((kind, state, private)) => pb::import_resource_state::Response {
                imported_resources: vec![pb::import_resource_state::ImportedResource {
                    type_name: kind.name().to_owned(),
                    state: dynamic(&state, &kind.block().ty()),
                    private,
                }],
                diagnostics: vec![],
            },
            Err(d) => pb::import_resource_state::Response {
                imported_resources: vec![],
                diagnostics: diag::all(&[d]),
            },
        }))
    }

    async fn read_data_source(
        &self,
        req: Request<pb::read_data_source::Request>,
    ) -> Answer<pb::read_data_source::Response> {
        let req = req.into_inner();
        let answer = async {
            let block = data::block(&req.type_name).ok_or_else(|| unknown_type(&req.type_name))?;
            let config = read(req.config.as_ref())?;
            let api = self.api()?;
            let state = data::read(&api, &req.type_name, &config).await?;
            Ok::<_, Diag>((block, state))
        }
        .await;
        Ok(Response::new(match answer {
            Ok((block, state)) => pb::read_data_source::Response {
                state: dynamic(&state, &block.ty()),
                diagnostics: vec![],
            },
            Err(d) => pb::read_data_source::Response {
                state: None,
                diagnostics: diag::all(&[d]),
            },
        }))
    }

    async fn stop_provider(
        &self,
        _: Request<pb::stop_provider::Request>,
    ) -> Answer<pb::stop_provider::Response> {
        self.stop.send_replace(true);
        Ok(Response::new(pb::stop_provider::Response {
            error: String::new(),
        }))
    }
}

fn validate_provider(config: &Value) -> Vec<Diag> {
    let mut diags = Vec::new();
    if let Some(e) = config.get("endpoint").as_str()
        && !(e.starts_with("http://") || e.starts_with("https://"))
    {
        diags.push(Diag::attr(
            "endpoint",
            "Invalid endpoint",
            format!("{e:?} is not an http:// or https:// URL"),
        ));
    }
    if let Some(ns) = config.get("namespace").as_str()
        && sless_domain::Namespace::parse(ns).is_err()
    {
        diags.push(Diag::attr(
            "namespace",
            "Invalid namespace",
            format!("{ns:?} is not a namespace: \"sless-\" and 16 hex digits"),
        ));
    }
    diags
}
