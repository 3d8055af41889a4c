//! The kaniko Job that builds a function's image, and the Secret it reads
//! the build context's address from.
//!
//! Builds run in `settings.build_namespace`, not in a tenant namespace:
//! kaniko unpacks images and runs the Dockerfile's steps as root inside its
//! container, which Pod Security `restricted` forbids. The build namespace
//! holds the registry push Secret and nothing a tenant's code can reach;
//! the pod still gets no service account token, no Service variables and
//! the RuntimeDefault seccomp profile, and runs the generated Dockerfile
//! only (the user's archive may not carry one). A build is not retried
//! more than once: a failed kaniko build rarely succeeds the second time.
//!
//! The context is read over HTTPS from a presigned URL that lives only in
//! the Secret; the Job names the Secret, so neither the URL nor any
//! credential is in its spec. The registry credentials are the push Secret,
//! mounted as kaniko's `config.json`. Where the object store or the
//! registry present a certificate of a private CA, the operator's CA
//! Secret (`build_ca_secret`) is mounted beside kaniko's own CAs, which
//! then trusts both.
//!
//! kaniko keeps the layers of RUN steps in the registry
//! (`build_cache_repo`, per tenant namespace) and takes one instead of
//! running its step when the step, the base image and every file copied
//! before it are the same: with the Dockerfile that installs dependencies
//! from the manifests alone (`sless_domain::archive::dockerfile`), a new
//! version that changes code and not its dependencies skips the install.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, KeyToPath, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sless_domain::FunctionKey;

use super::pod::runtime_default_seccomp;
use super::{
    ANNOTATION_IMAGE, COMPONENT_BUILD, LABEL_BUILD, mebibytes, meta, names, quantities,
    versioned_labels,
};
use crate::driver::BuildRequest;
use crate::kube::KubeSettings;

/// The key of the build Secret holding the context's presigned URL.
pub const CONTEXT_URL_KEY: &str = "context-url";
/// The env variable kaniko's `--context` is expanded from.
pub const CONTEXT_URL_ENV: &str = "SLESS_CONTEXT_URL";
/// The kaniko container.
pub const BUILD_CONTAINER: &str = "kaniko";
/// Where kaniko reads registry credentials.
const DOCKER_CONFIG_DIR: &str = "/kaniko/.docker";
/// The key of the operator's CA Secret holding the certificates (PEM).
pub const BUILD_CA_KEY: &str = "ca.crt";
/// Where that key is mounted in the kaniko container, as a file of its own.
pub const BUILD_CA_DIR: &str = "/sless/ca";
/// The public CAs kaniko's image trusts (its `SSL_CERT_DIR`).
pub const KANIKO_CERT_DIR: &str = "/kaniko/ssl/certs";
/// The variable through which kaniko's TLS (Go's) finds its CAs: a list of
/// directories, each file in them read as PEM.
pub const CERT_DIR_ENV: &str = "SSL_CERT_DIR";
/// Retries of a failed build: none. What fails a build is nearly always
/// the upload (a compile error, a dependency that cannot be installed),
/// which a second run only fails again, doubling the wait for its log;
/// kaniko retries its own pushes (`--push-retry`).
pub const BUILD_BACKOFF_LIMIT: i32 = 0;
/// Where kaniko writes the digest it pushed (`--digest-file`): the
/// container's termination message, which the kubelet puts in the pod's
/// `status.containerStatuses[].state.terminated.message`.
pub const DIGEST_FILE: &str = "/dev/termination-log";

/// The labels of a build's objects: the function's, its version and
/// `sless.dev/build=v{version}-{sha8}`.
fn build_labels(key: &FunctionKey, version: u32, sha256: &str) -> BTreeMap<String, String> {
    let mut labels = versioned_labels(key, COMPONENT_BUILD, version);
    labels.insert(
        LABEL_BUILD.to_owned(),
        names::label_value(&names::build_tag(version, sha256)),
    );
    labels
}

/// The Secret a build reads its context's address from: in the build
/// namespace, named like the build Job, holding `context_url` (a presigned
/// HTTPS URL of the tar.gz) under [`CONTEXT_URL_KEY`].
pub fn build_secret(
    settings: &KubeSettings,
    key: &FunctionKey,
    version: u32,
    sha256: &str,
    context_url: &str,
) -> Secret {
    Secret {
        metadata: meta(
            names::build_job_name(key, version, sha256),
            &settings.build_namespace,
            build_labels(key, version, sha256),
            BTreeMap::new(),
        ),
        type_: Some("Opaque".to_owned()),
        string_data: Some(BTreeMap::from([(
            CONTEXT_URL_KEY.to_owned(),
            context_url.to_owned(),
        )])),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// The kaniko Job that builds `req` and pushes it as [`names::image`].
/// kaniko writes the pushed image's digest to [`DIGEST_FILE`], the
/// termination message, where the driver reads it: the image runs by that
/// digest ([`names::pinned_image`]), which no later push can move.
pub fn build_job(settings: &KubeSettings, req: &BuildRequest) -> Job {
    let name = names::build_job_name(&req.key, req.version, &req.context_sha256);
    let image = names::image(settings, &req.key, req.version, &req.context_sha256);
    let labels = build_labels(&req.key, req.version, &req.context_sha256);
    let mut env = vec![EnvVar {
        name: CONTEXT_URL_ENV.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: name.clone(),
                key: CONTEXT_URL_KEY.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
    }];
    let mut mounts = vec![VolumeMount {
        name: "docker-config".to_owned(),
        mount_path: DOCKER_CONFIG_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![secret_volume(
        "docker-config",
        &settings.registry_push_secret,
        (".dockerconfigjson", "config.json"),
        0o400,
    )];
    if let Some(ca) = &settings.build_ca_secret {
        // Besides kaniko's public CAs, not instead of them: the base
        // images may come from a public registry.
        env.push(EnvVar {
            name: CERT_DIR_ENV.to_owned(),
            value: Some(format!("{KANIKO_CERT_DIR}:{BUILD_CA_DIR}")),
            value_from: None,
        });
        mounts.push(VolumeMount {
            name: "build-ca".to_owned(),
            mount_path: BUILD_CA_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        // A certificate is no secret: readable by whoever the build runs as.
        volumes.push(secret_volume(
            "build-ca",
            ca,
            (BUILD_CA_KEY, BUILD_CA_KEY),
            0o444,
        ));
    }
    let container = Container {
        name: BUILD_CONTAINER.to_owned(),
        image: Some(settings.kaniko_image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        args: Some(kaniko_args(settings, req, &image)),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(quantities([
                ("cpu", Quantity(settings.build_cpu_request.clone())),
                ("memory", mebibytes(settings.build_memory_mb)),
                ("ephemeral-storage", mebibytes(settings.build_ephemeral_mb)),
            ])),
            limits: Some(quantities([
                ("cpu", Quantity(settings.build_cpu_limit.clone())),
                ("memory", mebibytes(settings.build_memory_mb)),
                ("ephemeral-storage", mebibytes(settings.build_ephemeral_mb)),
            ])),
            claims: None,
        }),
        security_context: Some(SecurityContext {
            privileged: Some(false),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        termination_message_path: Some(DIGEST_FILE.to_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".to_owned()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            seccomp_profile: Some(runtime_default_seccomp()),
            ..PodSecurityContext::default()
        }),
        volumes: Some(volumes),
        ..PodSpec::default()
    };
    Job {
        metadata: meta(
            name,
            &settings.build_namespace,
            labels.clone(),
            BTreeMap::from([(ANNOTATION_IMAGE.to_owned(), image)]),
        ),
        spec: Some(JobSpec {
            backoff_limit: Some(BUILD_BACKOFF_LIMIT),
            active_deadline_seconds: Some(i64::from(settings.build_timeout_secs)),
            ttl_seconds_after_finished: Some(ttl(settings)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// kaniko's arguments: the context, the Dockerfile, where to push, the
/// runtime's base image, and the layer cache when there is one.
fn kaniko_args(settings: &KubeSettings, req: &BuildRequest, image: &str) -> Vec<String> {
    let mut args = vec![
        format!("--context=$({CONTEXT_URL_ENV})"),
        "--dockerfile=Dockerfile".to_owned(),
        format!("--destination={image}"),
        format!(
            "--build-arg=SLESS_RUNTIME_IMAGE={}",
            names::runtime_image(settings, req.runtime)
        ),
    ];
    match cache_repo(settings, &req.key) {
        // Each RUN step's layer is pushed under a key that hashes the base
        // image, the steps before it and the files they copied, and taken
        // from there by a later build with the same key: the generated
        // Dockerfile installs dependencies from the manifests alone, so an
        // upload that changes code and not them reuses the install. A
        // snapshot per step is what makes the steps' layers, and their
        // keys, line up (with one snapshot kaniko never finds its cache).
        Some(repo) => args.extend(["--cache=true".to_owned(), format!("--cache-repo={repo}")]),
        // Without a cache: one layer over the base image, the fastest.
        None => args.extend(["--cache=false".to_owned(), "--single-snapshot".to_owned()]),
    }
    args.extend([
        "--push-retry=2".to_owned(),
        format!("--digest-file={DIGEST_FILE}"),
    ]);
    args
}

/// Where a build of `key` keeps its cached layers: the tenant's own
/// repository under the cache repository, `{build_cache_repo}/{ns}`. A
/// layer is only ever taken for the same inputs, so sharing one cache
/// across tenants would leak no code; scoping it still keeps a tenant from
/// learning, by how fast a build is, what another tenant's manifests hold.
pub fn cache_repo(settings: &KubeSettings, key: &FunctionKey) -> Option<String> {
    settings
        .build_cache_repo
        .as_ref()
        .map(|repo| format!("{repo}/{}", key.namespace))
}

/// A volume of one key of the Secret `secret`, as the file `path`, which
/// the pod waits for.
fn secret_volume(name: &str, secret: &str, (key, path): (&str, &str), mode: i32) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(vec![KeyToPath {
                key: key.to_owned(),
                path: path.to_owned(),
                mode: None,
            }]),
            default_mode: Some(mode),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// `ttlSecondsAfterFinished` of our Jobs.
pub(super) fn ttl(settings: &KubeSettings) -> i32 {
    i32::try_from(settings.finished_ttl_secs).unwrap_or(i32::MAX)
}
