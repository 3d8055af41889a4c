//! `deploy/` applied to a real Kubernetes API server (testkit's control
//! plane): the example overlay applies server-side and a second apply
//! changes nothing; the admission policies type-check and hold sless's
//! ServiceAccount to its namespaces; RBAC grants that ServiceAccount what
//! `RULES` says and nothing else; and sless's own pods are admitted under
//! Pod Security `restricted`.
//!
//! The overlay applied is a copy of `deploy/` (the base and
//! `overlays/example`) made at test time, its secret files made from their
//! `.example`s, as docs/kubernetes.md "Installing" tells an operator to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_testkit::eventually;
use sless_testkit::kube::{ControlPlane, Outcome, TestNode};
use sless_workers::kube::KubeSettings;
use sless_workers::kube::rbac::{self, RULES, Scope, TENANT_CLUSTER_ROLE};
use sless_workers::kube::render::{build_secret, namespace::tenant_labels, tenant_objects};

const DEADLINE: Duration = Duration::from_secs(60);
const SYSTEM: &str = "sless";
const BUILDS: &str = "sless-builds";
/// The admission policies of `deploy/`, one per kind they check.
const POLICIES: [&str; 3] = [
    "sless-tenant-namespaces",
    "sless-tenant-role-bindings",
    "sless-build-secrets",
];
/// sless's ServiceAccount, as the API server names it.
const SLESS: &str = "system:serviceaccount:sless:sless";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What `kubectl {args} -o json` prints, as the administrator (`--raw`
/// prints JSON as it is).
fn get_json(args: &str) -> Value {
    let mut args: Vec<&str> = args.split_whitespace().collect();
    if !args.contains(&"--raw") {
        args.extend(["-o", "json"]);
    }
    serde_json::from_str(&ControlPlane::shared().kubectl_ok(&args, None)).unwrap()
}

/// The installation every test of this file looks at: applied once.
struct Installed {
    /// Holds the copy of `deploy/`.
    _dir: tempfile::TempDir,
    overlay: PathBuf,
    /// What the first apply printed on stderr.
    stderr: String,
}

/// Copies the files of `from` (not its subdirectories) into `to`.
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let plane = ControlPlane::shared();
        let dir = tempfile::tempdir().unwrap();
        let deploy = dir.path().join("deploy");
        copy_files(&root().join("deploy/base"), &deploy.join("base"));
        let overlay = deploy.join("overlays/example");
        copy_files(&root().join("deploy/overlays/example"), &overlay);
        for entry in std::fs::read_dir(&overlay).unwrap() {
            let path = entry.unwrap().path();
            if let Some(real) = path.to_str().unwrap().strip_suffix(".example") {
                std::fs::copy(&path, real).unwrap();
            }
        }
        let out = plane.kubectl_run(
            &["apply", "--server-side", "-k", overlay.to_str().unwrap()],
            None,
        );
        assert!(
            out.status.success(),
            "kubectl apply --server-side -k deploy/overlays/example:\n{}\n{}",
            text(&out.stderr),
            text(&out.stdout)
        );
        Installed {
            _dir: dir,
            overlay,
            stderr: text(&out.stderr),
        }
    })
}

/// `kubectl get -k` of the overlay: every object it applies, as the server
/// has it.
fn overlay_objects(overlay: &Path) -> Vec<Value> {
    let list = get_json(&format!(
        "get --show-managed-fields -k {}",
        overlay.display()
    ));
    list["items"].as_array().unwrap().clone()
}

/// `Kind namespace/name`, `Kind name`.
fn key(o: &Value) -> String {
    let m = &o["metadata"];
    let name = m["name"].as_str().unwrap();
    match m["namespace"].as_str() {
        Some(ns) => format!("{} {ns}/{name}", o["kind"].as_str().unwrap()),
        None => format!("{} {name}", o["kind"].as_str().unwrap()),
    }
}

/// What a no-op apply leaves as it was. Controllers write the status (and
/// annotations) of some kinds at any time: of those, the generation and
/// what the apply owns.
fn fingerprint(o: &Value) -> Value {
    let applied: Vec<&Value> = o["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["operation"] == "Apply" && f["manager"] == "kubectl")
        .collect();
    let m = &o["metadata"];
    match o["kind"].as_str().unwrap() {
        "Deployment" | "PodDisruptionBudget" | "ValidatingAdmissionPolicy" => {
            json!({"generation": m["generation"], "applied": applied})
        }
        _ => json!({"resourceVersion": m["resourceVersion"], "applied": applied}),
    }
}

#[tokio::test]
async fn the_example_overlay_applies_server_side_and_a_second_apply_changes_nothing() {
    let plane = ControlPlane::shared();
    let installed = installed();
    assert!(
        !installed.stderr.contains("Warning"),
        "the apply warned:\n{}",
        installed.stderr
    );
    let objects = overlay_objects(&installed.overlay);
    let keys: Vec<String> = objects.iter().map(key).collect();
    #[rustfmt::skip]
    let want = [
        "Namespace sless", "Namespace sless-builds", "ServiceAccount sless/sless",
        "ClusterRole sless", "ClusterRole sless-tenant", "ClusterRoleBinding sless",
        "Role sless-builds/sless-build", "RoleBinding sless-builds/sless-build",
        "Role sless/sless", "RoleBinding sless/sless",
        "Deployment sless/sless-api", "Deployment sless/sless-worker",
        "Deployment sless/sless-projector", "Service sless/sless-api",
        "PodDisruptionBudget sless/sless-api", "PodDisruptionBudget sless/sless-worker",
        "Ingress sless/sless",
        "Secret sless-builds/sless-registry-push", "Secret sless/sless-registry-pull",
        // Generated, with a hash suffix.
        "ConfigMap sless/sless-config-*", "Secret sless/sless-database-*",
        "Secret sless/sless-s3-*", "Secret sless/sless-jwt-*",
        "ValidatingAdmissionPolicy sless-tenant-namespaces",
        "ValidatingAdmissionPolicyBinding sless-tenant-namespaces",
        "ValidatingAdmissionPolicy sless-tenant-role-bindings",
        "ValidatingAdmissionPolicyBinding sless-tenant-role-bindings",
        "ValidatingAdmissionPolicy sless-build-secrets",
        "ValidatingAdmissionPolicyBinding sless-build-secrets",
    ];
    for w in &want {
        let found = match w.strip_suffix('*') {
            Some(prefix) => keys.iter().any(|k| k.starts_with(prefix)),
            None => keys.iter().any(|k| k == w),
        };
        assert!(found, "{w} not in {keys:#?}");
    }
    assert_eq!(keys.len(), want.len(), "{keys:#?}");

    // The overlay's settings are merged into the base's, and the pods name
    // the generated ConfigMap and Secrets by the names they got (with the
    // hash).
    let config = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(config["data"]["SLESS_DRIVER"], "kubernetes");
    assert_eq!(
        config["data"]["SLESS_KUBE_REGISTRY"],
        "registry.example.com/sless"
    );
    for d in objects.iter().filter(|o| o["kind"] == "Deployment") {
        let template = d["spec"]["template"].to_string();
        for generated in ["sless-config", "sless-database", "sless-s3", "sless-jwt"] {
            let bare = format!("\"{generated}\"");
            assert!(!template.contains(&bare), "{} names {bare}", key(d));
        }
    }
    let ingress = objects.iter().find(|o| o["kind"] == "Ingress").unwrap();
    assert_eq!(ingress["spec"]["rules"][0]["host"], "sless.example.com");
    assert_eq!(ingress["spec"]["rules"][1]["host"], "fn.sless.example.com");

    // Applied again, once a controller has written the status of the
    // policies (as on any cluster): the server finds nothing to change, and
    // changes nothing.
    for policy in POLICIES {
        type_checked(policy).await;
    }
    let overlay = installed.overlay.to_str().unwrap();
    let diff = plane.kubectl_run(&["diff", "--server-side", "-k", overlay], None);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff --server-side -k:\n{}\n{}",
        text(&diff.stdout),
        text(&diff.stderr)
    );
    let before: BTreeMap<String, Value> = overlay_objects(&installed.overlay)
        .iter()
        .map(|o| (key(o), fingerprint(o)))
        .collect();
    plane.kubectl_ok(&["apply", "--server-side", "-k", overlay], None);
    let after: BTreeMap<String, Value> = overlay_objects(&installed.overlay)
        .iter()
        .map(|o| (key(o), fingerprint(o)))
        .collect();
    for (k, was) in &before {
        assert_eq!(Some(was), after.get(k), "{k} changed on a second apply");
    }
    assert_eq!(before.len(), after.len());
}

/// `kubectl args` as sless's ServiceAccount (impersonated, with the groups
/// the API server gives a ServiceAccount's token).
fn as_sless(args: &[&str], stdin: Option<&str>) -> Output {
    #[rustfmt::skip]
    let mut all = vec![
        "--as", SLESS,
        "--as-group", "system:serviceaccounts", "--as-group", "system:serviceaccounts:sless",
    ];
    all.extend_from_slice(args);
    ControlPlane::shared().kubectl_run(&all, stdin)
}

/// The namespace the driver applies for tenant `ns`, as JSON.
fn tenant_namespace(ns: &str) -> String {
    let objects = tenant_objects(
        &KubeSettings::new("registry.example.com/sless"),
        &Namespace::parse(ns).unwrap(),
    );
    serde_json::to_string(&objects.namespace).unwrap()
}

/// A RoleBinding of sless's ServiceAccount to `role` (`Kind/name`) in `ns`;
/// to `ClusterRole/sless-tenant` it is the one the driver applies.
fn role_binding(ns: &str, role: &str) -> String {
    let (kind, name) = role.split_once('/').unwrap();
    let binding = if name == TENANT_CLUSTER_ROLE {
        name.to_owned()
    } else {
        format!("{}-{name}", kind.to_lowercase())
    };
    let labels = tenant_labels(&Namespace::parse(ns).unwrap());
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": binding, "namespace": ns, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": rbac::SERVICE_ACCOUNT, "namespace": SYSTEM}],
    })
    .to_string()
}

/// Does what the driver's `ensure` does first, as sless: the tenant
/// namespace `ns`, then its RoleBinding.
fn ensure_tenant(ns: &str) {
    let binding = role_binding(ns, &format!("ClusterRole/{TENANT_CLUSTER_ROLE}"));
    for object in [tenant_namespace(ns), binding] {
        let out = as_sless(&APPLY.split_whitespace().collect::<Vec<_>>(), Some(&object));
        let said = text(&out.stderr);
        assert!(out.status.success(), "sless applying {object}: {said}");
    }
}

/// What a request sless makes must come to.
#[derive(Debug)]
enum Want {
    Allowed,
    /// Allowed, once the API server's authorizer has caught up with a
    /// RoleBinding just written (it learns of them from a watch).
    Eventually,
    /// Refused, with this in the error.
    Denied(&'static str),
}

const NOT_SLESS_NAMESPACE: &str = "sless may only create or change namespaces named sless-*";
const NOT_SLESS_BINDING_NAMESPACE: &str = "sless may only bind roles in namespaces named sless-*";
const NOT_TENANT_ROLE: &str = "sless may only bind the ClusterRole sless-tenant";
const NOT_BUILD_SECRET: &str = "sless may only delete the build context Secrets in sless-builds";
/// RBAC's own refusal, before admission: sless may `bind` only
/// `sless-tenant`, and holds fewer permissions than cluster-admin grants.
const ESCALATION: &str = "is attempting to grant RBAC permissions not currently held";

const BUILD_NAMESPACE_UNTOUCHED: &str = "sless may not change its build namespace sless-builds";
const NOT_IN_BUILD_NAMESPACE: &str = "sless may not bind roles in its build namespace sless-builds";
const RESTRICTED: &str =
    "sless may only create or change namespaces that enforce Pod Security restricted, latest";
const ONLY_ITSELF: &str = "sless may only bind roles to its own ServiceAccount sless/sless";

/// Who makes a request of the admission table.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    /// The administrator, setting the scene (must succeed).
    Admin,
    Sless,
}

struct Request {
    what: &'static str,
    who: Who,
    args: Vec<String>,
    stdin: Option<String>,
    want: Want,
}

fn request(who: Who, args: &str, stdin: Option<String>, want: Want, what: &'static str) -> Request {
    Request {
        what,
        who,
        args: args.split_whitespace().map(str::to_owned).collect(),
        stdin,
        want,
    }
}

const APPLY: &str = "apply --server-side --field-manager=sless -f -";

/// The status of `policy` once the controller that type-checks admission
/// policies (`validatingadmissionpolicy-status-controller`) has written it
/// for its present generation.
async fn type_checked(policy: &str) -> Value {
    let what = format!("{policy}'s type checking");
    eventually(&what, DEADLINE, || async {
        let object = get_json(&format!("get validatingadmissionpolicy {policy}"));
        let status = &object["status"];
        (status["typeChecking"].is_object()
            && status["observedGeneration"] == object["metadata"]["generation"])
            .then(|| status.clone())
    })
    .await
}

#[tokio::test]
async fn the_admission_policies_type_check_and_hold_sless_to_its_namespaces() {
    use Want::{Allowed, Denied, Eventually};
    use Who::{Admin, Sless};
    let plane = ControlPlane::shared();
    installed();
    // Each policy type-checks against the kind it matches.
    for policy in POLICIES {
        let status = type_checked(policy).await;
        assert!(
            status["typeChecking"]["expressionWarnings"]
                .as_array()
                .is_none_or(|w| w.is_empty()),
            "{policy} does not type-check: {status:#}"
        );
        for c in status["conditions"].as_array().into_iter().flatten() {
            assert_ne!(c["status"], "False", "{policy}: {c}");
        }
    }

    // The tenant namespace, its RoleBinding and the build Secret are what
    // the driver renders.
    let tenant = "sless-0123456789abcdef";
    let key = FunctionKey::new(
        Namespace::parse(tenant).unwrap(),
        FunctionName::parse("hello").unwrap(),
    );
    let settings = KubeSettings::new("registry.example.com/sless");
    let context = build_secret(&settings, &key, 1, &"a".repeat(64), "s3://sless/ctx.tar.gz");
    let context_name = context.metadata.name.clone().unwrap();
    let tenant_role = format!("ClusterRole/{TENANT_CLUSTER_ROLE}");
    let mut to_everyone: Value = serde_json::from_str(&role_binding(tenant, &tenant_role)).unwrap();
    to_everyone["metadata"]["name"] = json!("everyone");
    to_everyone["subjects"] = json!([{"kind": "Group", "name": "system:authenticated",
                                      "apiGroup": "rbac.authorization.k8s.io"}]);
    let privileged = format!(
        "label namespace {tenant} --overwrite pod-security.kubernetes.io/enforce=privileged"
    );
    let old_version = format!(
        "label namespace {tenant} --overwrite pod-security.kubernetes.io/enforce-version=v1.0"
    );
    let foreign = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "not-a-build", "namespace": BUILDS,
                     "labels": {"sless.dev/component": "function"}}});
    #[rustfmt::skip]
    let table = vec![
        // Namespaces.
        request(Sless, APPLY, Some(tenant_namespace(tenant)), Allowed,
            "a tenant namespace, as the driver applies it"),
        request(Sless, APPLY, Some(tenant_namespace(tenant)), Allowed, "the same again (an update)"),
        request(Sless, "create namespace elsewhere", None, Denied(NOT_SLESS_NAMESPACE),
            "a namespace not named sless-*"),
        request(Sless, "label namespace kube-system --overwrite sless.dev/namespace=x", None,
            Denied(NOT_SLESS_NAMESPACE), "a label on kube-system"),
        request(Sless, APPLY, Some(tenant_namespace("default")), Denied(NOT_SLESS_NAMESPACE),
            "the tenant namespace object, named default"),
        request(Sless, "label namespace sless --overwrite sless.dev/namespace=x", None,
            Denied(NOT_SLESS_NAMESPACE), "a label on its own namespace sless"),
        request(Sless,
            "label namespace sless-builds --overwrite pod-security.kubernetes.io/enforce=privileged",
            None, Denied(BUILD_NAMESPACE_UNTOUCHED), "a label on the build namespace"),
        request(Sless, &privileged, None, Denied(RESTRICTED), "a tenant namespace made privileged"),
        request(Sless, &old_version, None, Denied(RESTRICTED),
            "a tenant namespace held to an old Pod Security"),
        // RoleBindings.
        request(Sless, APPLY, Some(role_binding(tenant, &tenant_role)), Allowed,
            "the tenant RoleBinding, as the driver applies it"),
        request(Sless, &format!("auth can-i get pods -n {tenant}"), None, Eventually,
            "what it grants"),
        request(Sless, APPLY, Some(role_binding("default", &tenant_role)),
            Denied(NOT_SLESS_BINDING_NAMESPACE), "the tenant RoleBinding in default"),
        request(Sless, APPLY, Some(role_binding("kube-system", &tenant_role)),
            Denied(NOT_SLESS_BINDING_NAMESPACE), "the tenant RoleBinding in kube-system"),
        request(Sless, APPLY, Some(role_binding(BUILDS, &tenant_role)),
            Denied(NOT_IN_BUILD_NAMESPACE), "the tenant RoleBinding in the build namespace"),
        request(Sless, APPLY, Some(to_everyone.to_string()), Denied(ONLY_ITSELF),
            "the tenant role bound to everyone"),
        request(Admin, &format!("create role subset -n {tenant} --verb=get --resource=pods"), None,
            Allowed, "a Role that grants only what sless holds"),
        request(Admin, "create clusterrole sless-subset --verb=get --resource=pods", None,
            Allowed, "a ClusterRole that grants only what sless holds"),
        request(Sless, APPLY, Some(role_binding(tenant, "Role/subset")), Denied(NOT_TENANT_ROLE),
            "a binding of that Role"),
        request(Sless, APPLY, Some(role_binding(tenant, "ClusterRole/sless-subset")),
            Denied(NOT_TENANT_ROLE), "a binding of that ClusterRole"),
        request(Sless, APPLY, Some(role_binding(tenant, "ClusterRole/cluster-admin")),
            Denied(ESCALATION), "a binding of cluster-admin"),
        // Secrets of the build namespace.
        request(Sless, "delete secret sless-registry-push -n sless-builds", None,
            Denied(NOT_BUILD_SECRET), "delete the registry push Secret"),
        request(Admin, "create -f -", Some(foreign.to_string()), Allowed,
            "a Secret labelled as something else"),
        request(Sless, "delete secret not-a-build -n sless-builds", None, Denied(NOT_BUILD_SECRET),
            "delete it"),
        request(Sless, "create -f -", Some(serde_json::to_string(&context).unwrap()), Allowed,
            "a build's context Secret, as the driver creates it"),
        request(Sless, &format!("delete secret {context_name} -n sless-builds"), None, Allowed,
            "delete it"),
    ];
    let mut failures = Vec::new();
    for r in &table {
        let args: Vec<&str> = r.args.iter().map(String::as_str).collect();
        let run = || match r.who {
            Admin => plane.kubectl_run(&args, r.stdin.as_deref()),
            Sless => as_sless(&args, r.stdin.as_deref()),
        };
        let out = match r.want {
            Eventually => {
                eventually(r.what, DEADLINE, || async {
                    let out = run();
                    out.status.success().then_some(out)
                })
                .await
            }
            _ => run(),
        };
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        let ok = match r.want {
            Allowed | Eventually => out.status.success(),
            Denied(message) => !out.status.success() && said.contains(message),
        };
        if !ok {
            failures.push(format!(
                "{:?} {}: want {:?}, got: {}",
                r.who,
                r.what,
                r.want,
                said.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The SubjectAccessReview `kubectl auth can-i {line} --as=…sless` makes:
/// `line` is `VERB RESOURCE[.GROUP][/NAME] (-n NAMESPACE | -A)
/// [--subresource=S]`.
fn review(line: &str) -> Value {
    let mut words = line.split_whitespace();
    let verb = words.next().unwrap();
    let what = words.next().unwrap();
    let (what, name) = what.split_once('/').unwrap_or((what, ""));
    let (resource, group) = what.split_once('.').unwrap_or((what, ""));
    let (mut namespace, mut subresource) = ("", "");
    while let Some(w) = words.next() {
        match (w, w.strip_prefix("--subresource=")) {
            ("-A", _) => namespace = "",
            ("-n", _) => namespace = words.next().unwrap(),
            (_, Some(s)) => subresource = s,
            _ => panic!("{line}: {w}?"),
        }
    }
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": SLESS,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:sless",
                       "system:authenticated"],
            "resourceAttributes": {
                "verb": verb, "group": group, "resource": resource,
                "subresource": subresource, "name": name, "namespace": namespace,
            },
        },
    })
}

/// Asks every question (`kubectl auth can-i` arguments, and the answer
/// wanted) in one `kubectl create` of SubjectAccessReviews; the questions
/// answered otherwise than wanted.
fn wrong_answers(questions: &[(String, bool)]) -> Vec<String> {
    let reviews: Vec<Value> = questions.iter().map(|(q, _)| review(q)).collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": reviews});
    let args = ["create", "-f", "-", "-o", "json"];
    let out = ControlPlane::shared().kubectl_ok(&args, Some(&list.to_string()));
    // One JSON document per review, one after the other.
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(answers.len(), questions.len());
    questions
        .iter()
        .zip(&answers)
        .filter(|((_, want), a)| a["status"]["allowed"] != *want)
        .map(|((q, want), a)| {
            let want = if *want { "yes" } else { "no" };
            format!(
                "kubectl auth can-i {q} --as={SLESS}: want {want}; {}",
                a["status"]
            )
        })
        .collect()
}

/// For every resource `RULES` names, in its scope, every verb: granted
/// exactly when the rules say so, on the names they name and one they do
/// not; and, for the namespaced scopes, nothing of it cluster-wide.
fn questions_from_rules(tenant: &str) -> Vec<(String, bool)> {
    #[rustfmt::skip]
    const VERBS: [&str; 8] = [
        "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
    ];
    let mut questions = Vec::new();
    let mut seen = Vec::new();
    for r in RULES {
        if seen.contains(&(r.scope, r.api_group, r.resource)) {
            continue;
        }
        seen.push((r.scope, r.api_group, r.resource));
        let same = RULES
            .iter()
            .filter(|o| o.scope == r.scope && o.resource == r.resource);
        let mut names: Vec<Option<&str>> = vec![None];
        names.extend(same.flat_map(|o| o.names.iter().map(|n| Some(*n))));
        if names.len() > 1 {
            names.push(Some("not-one-of-its-names"));
        }
        let mut verbs = VERBS.to_vec();
        if r.api_group == "rbac.authorization.k8s.io" {
            verbs.extend(["bind", "escalate"]);
        }
        let (resource, sub) = match r.resource.split_once('/') {
            Some((r, s)) => (r, format!(" --subresource={s}")),
            None => (r.resource, String::new()),
        };
        let group = if r.api_group.is_empty() {
            String::new()
        } else {
            format!(".{}", r.api_group)
        };
        let namespace = match r.scope {
            Scope::Cluster => "-A".to_owned(),
            Scope::Tenant => format!("-n {tenant}"),
            Scope::Build => format!("-n {BUILDS}"),
            Scope::System => format!("-n {SYSTEM}"),
        };
        for verb in verbs {
            for name in &names {
                let named = name.map(|n| format!("/{n}")).unwrap_or_default();
                let q =
                    |namespace: &str| format!("{verb} {resource}{group}{named} {namespace}{sub}");
                let allowed = |scope| rbac::allows(scope, r.api_group, r.resource, verb, *name);
                questions.push((q(&namespace), allowed(r.scope)));
                if r.scope != Scope::Cluster {
                    questions.push((q("-A"), allowed(Scope::Cluster)));
                }
            }
        }
    }
    questions
}

/// What sless must never be able to do, whatever `RULES` become: lines of
/// `kubectl auth can-i` arguments, in the tenant namespace `{T}` and the
/// `sless-*` namespace without the RoleBinding `{U}`.
const MUST_NOTS: &str = include_str!("fixtures/kube_deploy/must_not.txt");

/// Every resource the API server serves, as `name.group` (`name` in the
/// core group), subresources included.
fn served_resources() -> Vec<String> {
    let names = |list: &Value| -> Vec<String> {
        let resources = list["resources"].as_array().unwrap();
        resources
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut served = names(&get_json("get --raw /api/v1"));
    for g in get_json("get --raw /apis")["groups"].as_array().unwrap() {
        let version = g["preferredVersion"]["groupVersion"].as_str().unwrap();
        let group = g["name"].as_str().unwrap();
        let list = get_json(&format!("get --raw /apis/{version}"));
        served.extend(names(&list).into_iter().map(|r| format!("{r}.{group}")));
    }
    served
}

#[tokio::test]
async fn rbac_grants_sless_its_rules_and_nothing_else() {
    installed();
    let tenant = "sless-fedcba9876543210";
    let unbound = "sless-00000000000000aa";
    ensure_tenant(tenant);
    ControlPlane::shared().kubectl_ok(&["create", "namespace", unbound], None);
    // The authorizer learns of the RoleBinding from a watch.
    eventually(
        "the tenant RoleBinding to be honoured",
        DEADLINE,
        || async {
            let out = as_sless(&["auth", "can-i", "get", "pods", "-n", tenant], None);
            out.status.success().then_some(())
        },
    )
    .await;
    let mut questions = questions_from_rules(tenant);
    for line in MUST_NOTS
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let line = line.replace("{T}", tenant).replace("{U}", unbound);
        questions.push((line, false));
    }
    // A question about a resource the server does not serve would be
    // answered "no" whatever the rules.
    let served = served_resources();
    for (q, _) in &questions {
        let a = &review(q)["spec"]["resourceAttributes"];
        let part = |key: &str, before: &str| match a[key].as_str().unwrap() {
            "" => String::new(),
            part => format!("{before}{part}"),
        };
        let named = format!(
            "{}{}{}",
            a["resource"].as_str().unwrap(),
            part("subresource", "/"),
            part("group", ".")
        );
        assert!(
            a["verb"] == "impersonate" || served.contains(&named),
            "{named} is not served: {q}"
        );
    }
    let wrong = wrong_answers(&questions);
    assert!(
        wrong.is_empty(),
        "{} of {} answers are wrong:\n{}",
        wrong.len(),
        questions.len(),
        wrong.join("\n")
    );
    // `kubectl auth can-i` itself agrees, one yes and one no.
    let (yes, no) = (
        "get secrets/sless-pull -n",
        "get secrets/sless-registry-push -n",
    );
    for (args, want) in [
        (format!("{yes} {tenant}"), "yes"),
        (format!("{no} {BUILDS}"), "no"),
    ] {
        let args = format!("auth can-i {args}");
        let out = as_sless(&args.split_whitespace().collect::<Vec<_>>(), None);
        let said = text(&out.stdout);
        assert_eq!(said.trim(), want, "{args}: {}", text(&out.stderr));
    }
}

/// The value of `name` in the overlay's example file `file`.
fn example_value(file: &str, name: &str) -> String {
    let path = root().join("deploy/overlays/example").join(file);
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in {}", path.display()))
        .to_owned()
}

#[tokio::test]
async fn sless_pods_are_admitted_under_pod_security_restricted() {
    let plane = ControlPlane::shared();
    installed();
    let ns = get_json("get namespace sless");
    let labels = &ns["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce-version"],
        "latest"
    );

    // Each Deployment's pod, as its ReplicaSet would create it: admitted,
    // without a warning; loosened, refused (Pod Security is enforced there).
    let deployments = get_json("get deployments -n sless");
    let deployments = deployments["items"].as_array().unwrap();
    assert_eq!(deployments.len(), 3);
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let template = &d["spec"]["template"];
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-admitted"), "namespace": SYSTEM,
                         "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        });
        let dry_run = ["create", "--dry-run=server", "-f", "-"];
        let out = plane.kubectl_run(&dry_run, Some(&pod.to_string()));
        assert!(
            out.status.success() && !text(&out.stderr).contains("Warning"),
            "{name}'s pod: {}",
            text(&out.stderr)
        );
        let mut loose = pod.clone();
        loose["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        let out = plane.kubectl_run(&dry_run, Some(&loose.to_string()));
        assert!(
            !out.status.success()
                && text(&out.stderr).contains("violates PodSecurity \"restricted:latest\""),
            "{name}'s pod, loosened: {}",
            text(&out.stderr)
        );
    }

    // The ReplicaSets create the pods, which find their Secrets by the
    // names kustomize gave them.
    let database_url = example_value("database.env.example", "DATABASE_URL");
    TestNode::shared().play("app.kubernetes.io/part-of=sless", move |pod| {
        if pod.env("DATABASE_URL") == Some(database_url.as_str()) {
            Outcome::serves()
        } else {
            Outcome::waits("CreateContainerConfigError", "")
        }
    });
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let replicas = d["spec"]["replicas"].as_u64().unwrap();
        eventually(&format!("{name} to be available"), DEADLINE, || async {
            let d = get_json(&format!("get deployment {name} -n sless"));
            (d["status"]["availableReplicas"].as_u64() == Some(replicas)
                && d["status"]["updatedReplicas"].as_u64() == Some(replicas))
            .then_some(())
        })
        .await;
    }
    let events = get_json("get events -n sless");
    let events = events["items"].as_array().unwrap().iter();
    let failed: Vec<&Value> = events.filter(|e| e["reason"] == "FailedCreate").collect();
    assert!(failed.is_empty(), "{failed:#?}");
    // Only the worker's pods hold a token of the ServiceAccount.
    let pods = get_json("get pods -n sless -l app.kubernetes.io/part-of=sless");
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 5, "{pods:#?}");
    for p in pods {
        let component = &p["metadata"]["labels"]["app.kubernetes.io/component"];
        let volumes = p["spec"]["volumes"].to_string();
        let token = volumes.contains("\"kube-api-access-");
        assert_eq!(token, component == "worker", "{component}: {p:#}");
    }
}
