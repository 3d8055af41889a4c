//! Builds: a kaniko Job in the build namespace per (function, version,
//! context). The context is fetched through a presigned URL kept in a
//! Secret of the build's own (no credential in the Job spec); the image is
//! pushed as `{registry}/{ns}-{name}:v{version}-{sha8}`, and the artifact
//! is the digest kaniko reports for that push,
//! `{registry}/{ns}-{name}@sha256:…`: what runs can never be moved by a
//! later push of the tag. A build that succeeds without a digest failed.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams, PostParams};

use super::Inner;
use super::api::{self, JobEnd, infra, is_status, job_end, log_tail};
use super::render::build::{BUILD_CONTAINER, build_job, build_secret};
use super::render::{LABEL_BUILD, LABEL_FUNCTION, LABEL_NAMESPACE, names};
use crate::driver::{Artifact, BuildRequest, DriverError};

/// Lines of a failed build's log kept in `BuildFailed`.
const LOG_TAIL_LINES: i64 = 60;

/// Most bytes of a build pod's log read for the build log.
const LOG_READ_LIMIT: i64 = 8 * 1024 * 1024;

/// How much longer than the build's own deadline the driver waits for the
/// Job to say how it ended.
const GRACE: Duration = Duration::from_secs(60);

pub(super) async fn build(inner: &Inner, req: BuildRequest) -> Result<Artifact, DriverError> {
    let settings = &inner.settings;
    // What the log's earlier build of this version pushed still is that
    // image: a digest names it for good (a rollback runs it as it was).
    if let Some(built) = req
        .built
        .as_ref()
        .filter(|a| names::is_pinned_image(settings, &req.key, &a.reference))
    {
        return Ok(built.clone());
    }
    let ns = &settings.build_namespace;
    let name = names::build_job_name(&req.key, req.version, &req.context_sha256);
    let jobs = Api::<Job>::namespaced(inner.client.clone(), ns);
    let secrets = Api::<Secret>::namespaced(inner.client.clone(), ns);

    let existing = jobs
        .get_opt(&name)
        .await
        .map_err(infra("reading a build"))?;
    let job = match existing {
        // A build that failed earlier is tried again: the reconciler asks
        // again only for a new request (a retried job, a rollback).
        Some(job) if job_end(&job).is_some_and(|end| !end.succeeded) => {
            api::delete(&jobs, &name)
                .await
                .map_err(infra("deleting a failed build"))?;
            api::watch_until(&jobs, &name, GRACE, |j| j.is_none())
                .await
                .map_err(|e| DriverError::Infra(format!("waiting for {ns}/{name} to go: {e}")))?;
            start(inner, &req, &jobs, &secrets, &name).await?
        }
        Some(job) => job,
        None => start(inner, &req, &jobs, &secrets, &name).await?,
    };
    let within = Duration::from_secs(settings.build_timeout_secs.into()) + GRACE;
    let ended = match job_end(&job) {
        Some(end) => end,
        None => {
            let seen = api::watch_until(&jobs, &name, within, |j| {
                j.is_none_or(|j| job_end(j).is_some())
            })
            .await
            .map_err(|e| DriverError::Infra(format!("waiting for build {ns}/{name}: {e}")))?;
            match seen.as_ref().and_then(job_end) {
                Some(end) => end,
                None => {
                    return Err(DriverError::Infra(format!(
                        "build {ns}/{name} was deleted before it ended"
                    )));
                }
            }
        }
    };
    // The context's address is not needed any more.
    api::delete(&secrets, &name)
        .await
        .map_err(infra("deleting a build's context secret"))?;
    record_log(inner, &req).await;
    if ended.succeeded {
        return pushed(inner, &req, &name).await;
    }
    Err(failed(inner, &req, &name, ended).await)
}

/// The pods of `req`'s build, newest first.
async fn build_pods(inner: &Inner, req: &BuildRequest) -> Vec<Pod> {
    let pods = Api::<Pod>::namespaced(inner.client.clone(), &inner.settings.build_namespace);
    let selector = format!(
        "{LABEL_NAMESPACE}={},{LABEL_FUNCTION}={},{LABEL_BUILD}={}",
        names::label_value(req.key.namespace.as_str()),
        names::label_value(req.key.name.as_str()),
        names::label_value(&names::build_tag(req.version, &req.context_sha256)),
    );
    let mut items = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(_) => Vec::new(),
    };
    items.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone().map(|t| t.0)));
    items
}

/// The artifact of a build that succeeded: the image pinned by the digest
/// kaniko wrote to the termination message of the pod that pushed it.
async fn pushed(inner: &Inner, req: &BuildRequest, name: &str) -> Result<Artifact, DriverError> {
    let pods = build_pods(inner, req).await;
    let kaniko = pods.iter().find_map(|p| {
        let status = p.status.as_ref()?.container_statuses.as_ref()?;
        let terminated = status
            .iter()
            .find(|c| c.name == BUILD_CONTAINER)?
            .state
            .as_ref()?
            .terminated
            .clone()?;
        (terminated.exit_code == 0).then(|| (p, terminated.message.unwrap_or_default()))
    });
    let (digest, pod) = match kaniko {
        Some((pod, message)) => (message, Some(pod)),
        None => (String::new(), None),
    };
    match names::pinned_image(&inner.settings, &req.key, &digest) {
        Ok(reference) => Ok(Artifact { reference }),
        Err(why) => {
            let api = Api::<Pod>::namespaced(inner.client.clone(), &inner.settings.build_namespace);
            let log_tail = match pod {
                Some(pod) => log_tail_of(&api, &pod.name_any()).await,
                None => String::new(),
            };
            Err(DriverError::Build {
                message: format!(
                    "build {name} succeeded but kaniko reported {why} in its termination message, \
                     so the image cannot be run by digest"
                ),
                log_tail,
            })
        }
    }
}

/// Creates the kaniko Job, then the Secret with its context's address,
/// owned by the Job so the cluster removes both together (the pod waits
/// for the Secret if it starts first).
async fn start(
    inner: &Inner,
    req: &BuildRequest,
    jobs: &Api<Job>,
    secrets: &Api<Secret>,
    name: &str,
) -> Result<Job, DriverError> {
    let settings = &inner.settings;
    let ttl = Duration::from_secs(settings.build_timeout_secs.into()) + GRACE;
    let url = inner
        .blobs
        .presigned_get(&req.context_key, ttl)
        .await
        .map_err(|e| DriverError::Infra(format!("presigning the build context: {e}")))?;
    let job = create_or_get(jobs, &build_job(settings, req)).await?;
    // A Secret left by a build that never got this far holds an old URL.
    api::delete(secrets, name)
        .await
        .map_err(infra("replacing a build's context secret"))?;
    let mut secret = build_secret(settings, &req.key, req.version, &req.context_sha256, &url);
    secret.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }]);
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        // Another worker's, building the same context at once: its URL
        // serves as well. (sless may create and delete build Secrets, never
        // read one: the push Secret is beside them.)
        Err(e) if is_status(&e, 409) => {}
        Err(e) => return Err(infra("creating a build's context secret")(e)),
    }
    Ok(job)
}

/// Creates `obj`, or returns the one another worker created first.
async fn create_or_get<K>(api: &Api<K>, obj: &K) -> Result<K, DriverError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(created) => Ok(created),
        Err(e) if is_status(&e, 409) => api
            .get(&obj.name_any())
            .await
            .map_err(infra("reading what another worker created")),
        Err(e) if is_status(&e, 404) => Err(DriverError::Infra(format!(
            "cannot create {}: does the build namespace exist? (it comes with deploy/, docs/kubernetes.md): {e}",
            obj.name_any()
        ))),
        Err(e) => Err(infra("creating a build")(e)),
    }
}

/// `BuildFailed`'s content: why the Job failed and the tail of kaniko's log.
async fn failed(inner: &Inner, req: &BuildRequest, name: &str, ended: JobEnd) -> DriverError {
    let pods = Api::<Pod>::namespaced(inner.client.clone(), &inner.settings.build_namespace);
    let mut log_tail = String::new();
    // The newest attempt says most.
    if let Some(pod) = build_pods(inner, req).await.first() {
        log_tail = log_tail_of(&pods, &pod.name_any()).await;
    }
    let why = match ended.reason.as_str() {
        "DeadlineExceeded" => format!(
            "the build took longer than {} s",
            inner.settings.build_timeout_secs
        ),
        _ if ended.message.is_empty() => format!("build {name} failed ({})", ended.reason),
        _ => format!("build {name} failed: {}", ended.message),
    };
    DriverError::Build {
        message: why,
        log_tail,
    }
}

/// Pushes the log of the build's newest pod (kaniko's output) into the
/// request's build log, read once the build ended (as much as
/// [`LOG_READ_LIMIT`]; the build log keeps its own limit's first and last
/// halves of that).
async fn record_log(inner: &Inner, req: &BuildRequest) {
    let Some(pod) = build_pods(inner, req).await.into_iter().next() else {
        req.log
            .note("sless: the build's pod is gone, so its log cannot be read");
        return;
    };
    let pods = Api::<Pod>::namespaced(inner.client.clone(), &inner.settings.build_namespace);
    let params = LogParams {
        container: Some(BUILD_CONTAINER.to_owned()),
        limit_bytes: Some(LOG_READ_LIMIT),
        ..LogParams::default()
    };
    match pods.logs(&pod.name_any(), &params).await {
        Ok(text) => req.log.push(text.as_bytes()),
        Err(e) => req.log.note(&format!(
            "sless: reading the log of pod {}: {e}",
            pod.name_any()
        )),
    }
}

async fn log_tail_of(pods: &Api<Pod>, pod: &str) -> String {
    log_tail(pods, pod, BUILD_CONTAINER, LOG_TAIL_LINES, false).await
}
