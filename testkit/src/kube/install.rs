//! sless installed on the test control plane as `deploy/` installs it
//! cluster-wide: the files of `deploy/base` that make its namespaces, its
//! ServiceAccount, RBAC and admission policies, applied server-side, and the
//! registry Secrets an operator adds (docs/kubernetes.md, "Installing"); once
//! per test process. The workloads of `deploy/base` (sless's own pods) are
//! not applied here: `tests/kube_deploy.rs` applies the whole overlay.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::ControlPlane;

/// sless's ServiceAccount, as the API server names it.
pub const SLESS_USER: &str = "system:serviceaccount:sless:sless";

/// The files of `deploy/base` applied, in order.
const BASE_FILES: [&str; 4] = [
    "namespaces.yaml",
    "serviceaccount.yaml",
    "rbac.yaml",
    "admission.yaml",
];

/// What an operator adds: the registry push Secret kaniko pushes with, and
/// the pull Secret the driver copies into tenant namespaces when told to.
const OPERATOR_SECRETS: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: sless-registry-push, namespace: sless-builds}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths": {"registry.test": {"auth": "cHVzaDpwdXNo"}}}'}
---
apiVersion: v1
kind: Secret
metadata: {name: sless-registry-pull, namespace: sless}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths": {"registry.test": {"auth": "cHVsbDpwdWxs"}}}'}
"#;

/// How long the API server may take to enforce what was applied.
const DEADLINE: Duration = Duration::from_secs(60);

/// sless, installed.
pub struct Installed {
    /// A token of the ServiceAccount `sless` (TokenRequest, a day long).
    pub token: String,
}

static INSTALLED: OnceCell<Installed> = OnceCell::const_new();

/// Installs sless on [`ControlPlane::shared`] the first time, and waits
/// until the API server judges sless's requests by what was installed: a
/// namespace not named `sless-*` is refused to it by the admission policy
/// (so RBAC let the request through to admission).
pub async fn installed() -> &'static Installed {
    INSTALLED.get_or_init(install).await
}

async fn install() -> Installed {
    let plane = ControlPlane::shared();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base");
    let apply = ["apply", "--server-side", "--field-manager=sless-install"];
    for file in BASE_FILES {
        let path = base.join(file);
        let path = path.to_str().expect("a UTF-8 path");
        plane.kubectl_ok(&[&apply[..], &["-f", path]].concat(), None);
    }
    plane.kubectl_ok(&[&apply[..], &["-f", "-"]].concat(), Some(OPERATOR_SECRETS));
    let token = plane
        .kubectl_ok(
            &["-n", "sless", "create", "token", "sless", "--duration=24h"],
            None,
        )
        .trim()
        .to_owned();
    let outside = "apiVersion: v1\nkind: Namespace\nmetadata: {name: not-sless}\n";
    crate::eventually(
        "deploy/'s RBAC and admission policies to judge sless",
        DEADLINE,
        || async {
            let out = plane.kubectl_run(
                &[
                    "create",
                    "--dry-run=server",
                    "-f",
                    "-",
                    &format!("--as={SLESS_USER}"),
                ],
                Some(outside),
            );
            String::from_utf8_lossy(&out.stderr)
                .contains("sless may only create or change namespaces named sless-*")
                .then_some(())
        },
    )
    .await;
    Installed { token }
}

impl Installed {
    /// A kubeconfig of the ServiceAccount `sless` in `dir` (its token and
    /// the cluster's CA), as a worker outside the cluster is given; checked
    /// with `kubectl auth whoami`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        use base64::Engine;
        let plane = ControlPlane::shared();
        let path = dir.join("sless.kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
                 certificate-authority-data: {}\nusers:\n- name: sless\n  user:\n    token: {}\n\
                 contexts:\n- name: sless\n  context:\n    cluster: test\n    user: sless\n    \
                 namespace: sless\ncurrent-context: sless\n",
                plane.url(),
                base64::engine::general_purpose::STANDARD.encode(plane.ca_pem()),
                self.token,
            ),
        )
        .expect("writing sless's kubeconfig");
        let me = plane.kubectl_ok(
            &[
                "--kubeconfig",
                path.to_str().expect("a UTF-8 path"),
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        );
        assert_eq!(me, SLESS_USER, "the kubeconfig of sless");
        path
    }

    /// A client of the ServiceAccount `sless`, straight to the API server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(ControlPlane::shared().token_config(&self.token))
            .expect("a client of sless's ServiceAccount")
    }
}
