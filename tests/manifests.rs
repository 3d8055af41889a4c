//! The manifests in `deploy/` against the binary they run: the base is what
//! `sless manifests` generates, its YAML reads back as the objects meant,
//! every variable it sets is one the binary reads, every command it runs is
//! a subcommand, every probe a route of the API, and the RBAC is least
//! privilege.
//!
//! Reading YAML back uses PyYAML (Python 3.11 and PyYAML are on every
//! machine of this project); a YAML 1.1 reader, like Kubernetes' own.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn sless(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("running sless")
}

/// `sless manifests --json`: objects per file, config, rules, settings.
fn dump() -> Value {
    let out = sless(&["manifests", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn objects(d: &Value) -> Vec<&Value> {
    d["objects"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|o| o.as_array().unwrap())
        .collect()
}

fn of_kind<'a>(d: &'a Value, kind: &str) -> Vec<&'a Value> {
    objects(d)
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect()
}

/// Every Deployment's pod spec, by Deployment name.
fn pod_specs(d: &Value) -> Vec<(String, &Value)> {
    of_kind(d, "Deployment")
        .into_iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                &o["spec"]["template"]["spec"],
            )
        })
        .collect()
}

fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect()
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// The YAML documents of `text`, as PyYAML reads them.
fn read_yaml(text: &str) -> Vec<Value> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; json.dump(list(yaml.safe_load_all(sys.stdin.read())), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with PyYAML reads YAML back");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "PyYAML could not read:\n{text}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn overlay() -> Value {
    let path = root().join("deploy/overlays/example/kustomization.yaml");
    read_yaml(&std::fs::read_to_string(path).unwrap()).remove(0)
}

#[test]
fn base_is_what_the_binary_generates() {
    let dir = root().join("deploy/base");
    if std::env::var_os("SLESS_UPDATE_MANIFESTS").is_some() {
        let out = sless(&["manifests", "--write", dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = sless(&["manifests", "--check", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "deploy/base differs from what `sless manifests` generates:\n{}\n\
         regenerate it with: SLESS_UPDATE_MANIFESTS=1 cargo test -p sless --test manifests",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Where `a` and `b` first differ, as a path, or None when equal.
fn difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let null = Value::Null;
                difference(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &format!("{path}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (a, b))| difference(a, b, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} != {b}")),
    }
}

/// `object` read as the typed Kubernetes object of its kind and written
/// back: a field Kubernetes does not know, or of the wrong type, is lost or
/// refused on the way.
fn typed_round_trip(object: &Value) -> Result<Value, String> {
    use k8s_openapi::api::{admissionregistration, apps, core, networking, policy, rbac};
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Result<Value, String> {
        let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(typed).unwrap())
    }
    match object["kind"].as_str().unwrap() {
        "Namespace" => via::<core::v1::Namespace>(object),
        "ServiceAccount" => via::<core::v1::ServiceAccount>(object),
        "Service" => via::<core::v1::Service>(object),
        "Deployment" => via::<apps::v1::Deployment>(object),
        "PodDisruptionBudget" => via::<policy::v1::PodDisruptionBudget>(object),
        "Ingress" => via::<networking::v1::Ingress>(object),
        "ClusterRole" => via::<rbac::v1::ClusterRole>(object),
        "ClusterRoleBinding" => via::<rbac::v1::ClusterRoleBinding>(object),
        "Role" => via::<rbac::v1::Role>(object),
        "RoleBinding" => via::<rbac::v1::RoleBinding>(object),
        "ValidatingAdmissionPolicy" => {
            via::<admissionregistration::v1::ValidatingAdmissionPolicy>(object)
        }
        "ValidatingAdmissionPolicyBinding" => {
            via::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(object)
        }
        other => Err(format!("no typed check for kind {other}")),
    }
}

#[test]
fn every_object_is_a_kubernetes_object_with_only_known_fields() {
    let d = dump();
    for o in objects(&d) {
        let what = format!("{} {}", o["kind"], o["metadata"]["name"]);
        let typed = typed_round_trip(o).unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(diff) = difference(o, &typed, "") {
            panic!("{what}: Kubernetes reads it otherwise (generated != typed): {diff}");
        }
    }
}

#[test]
fn base_yaml_reads_back_as_the_objects_generated() {
    let d = dump();
    let dir = root().join("deploy/base");
    for (file, objects) in d["objects"].as_object().unwrap() {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        if let Some(diff) = difference(objects, &Value::Array(read_yaml(&text)), "") {
            panic!("{file} reads back otherwise (generated != read): {diff}");
        }
    }
    let kustomization =
        read_yaml(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap());
    let mut listed = str_list(&kustomization[0]["resources"]);
    listed.sort();
    let mut files: Vec<&str> = d["objects"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    files.sort();
    assert_eq!(listed, files, "kustomization.yaml lists every file");
    // config.env: KEY=value lines, as kustomize reads them.
    let env = std::fs::read_to_string(dir.join("config.env")).unwrap();
    let config: BTreeMap<&str, &str> = env
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once('=').unwrap())
        .collect();
    assert_eq!(json!(config), d["config"]);
}

/// Every environment variable the manifests (and the example overlay) set.
fn variables_set(d: &Value) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = d["config"].as_object().unwrap().keys().cloned().collect();
    for (_, spec) in pod_specs(d) {
        for c in containers(spec) {
            for e in c["env"].as_array().into_iter().flatten() {
                names.insert(e["name"].as_str().unwrap().to_owned());
            }
        }
    }
    let overlay = overlay();
    for generator in ["configMapGenerator", "secretGenerator"] {
        for g in overlay[generator].as_array().into_iter().flatten() {
            for literal in str_list(&g["literals"]) {
                names.insert(literal.split_once('=').unwrap().0.to_owned());
            }
            for file in str_list(&g["envs"]) {
                let example = root()
                    .join("deploy/overlays/example")
                    .join(format!("{file}.example"));
                let text = std::fs::read_to_string(&example)
                    .unwrap_or_else(|e| panic!("{}: {e}", example.display()));
                for line in text
                    .lines()
                    .filter(|l| !l.starts_with('#') && l.contains('='))
                {
                    names.insert(line.split_once('=').unwrap().0.to_owned());
                }
            }
        }
    }
    names
}

/// Every `"NAME"` string literal in the Rust sources under `dirs`, but the
/// manifests' own.
fn quoted_in_sources(dirs: &[&str]) -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("manifests") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("manifests.rs")
            {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut all = String::new();
    for dir in dirs {
        walk(&root().join(dir), &mut all);
    }
    all
}

#[test]
fn every_variable_the_manifests_set_is_a_setting_the_binary_reads() {
    let d = dump();
    let settings: BTreeSet<&str> = d["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let unknown: Vec<String> = variables_set(&d)
        .into_iter()
        .filter(|n| !settings.contains(n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "set by the manifests, not in the table of settings: {unknown:?}"
    );
    // The table itself names only what the binary reads: each name is a
    // string literal of its sources (src/config/ reads `get("NAME")`).
    let sources = quoted_in_sources(&["src", "workers/src", "api/src", "store/src"]);
    let unread: Vec<&&str> = settings
        .iter()
        .filter(|n| !sources.contains(&format!("\"{n}\"")))
        .collect();
    assert!(
        unread.is_empty(),
        "settings the binary does not read: {unread:?}"
    );
    // And the other way: every Kubernetes setting src/config/ reads is in
    // the table (so in the ConfigMap or the documentation).
    let mut config = String::new();
    for entry in std::fs::read_dir(root().join("src/config")).unwrap() {
        config.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let read: BTreeSet<&str> = config
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("SLESS_KUBE_") && !s.contains(' '))
        .collect();
    let untabled: Vec<&&str> = read.iter().filter(|n| !settings.contains(**n)).collect();
    assert!(
        untabled.is_empty(),
        "read by src/config/, missing from the table of settings: {untabled:?}"
    );
}

#[test]
fn the_documentation_explains_every_setting() {
    let d = dump();
    let doc = std::fs::read_to_string(root().join("docs/kubernetes.md")).unwrap();
    let missing: Vec<&str> = d["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .filter(|n| !doc.contains(&format!("| `{n}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/kubernetes.md has no table row for {missing:?}"
    );
}

#[test]
fn containers_run_subcommands_that_exist() {
    let d = dump();
    let mut run = BTreeSet::new();
    for (name, spec) in pod_specs(&d) {
        for c in containers(spec) {
            assert_eq!(str_list(&c["command"]), ["sless"], "{name}/{}", c["name"]);
            let sub = str_list(&c["args"])[0];
            run.insert(sub.to_owned());
            let help = sless(&[sub, "--help"]);
            assert!(
                help.status.success(),
                "{name}: `sless {sub}` is not a subcommand"
            );
        }
    }
    let want: BTreeSet<String> = ["api", "worker", "projector", "migrate"]
        .map(String::from)
        .into();
    assert_eq!(run, want, "each role runs, and migrations run first");
    // The check above can tell: a name that is no subcommand fails.
    assert!(!sless(&["apiserver", "--help"]).status.success());
    // The API listens on the port its probes, Service and Ingress use.
    let api = &of_kind(&d, "Deployment")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "sless-api")
        .unwrap()["spec"]["template"]["spec"]["containers"][0];
    let listen = str_list(&api["args"]);
    let port_of = |flag: &str| {
        listen[listen.iter().position(|a| *a == flag).unwrap() + 1]
            .rsplit_once(':')
            .unwrap()
            .1
            .to_owned()
    };
    assert_eq!(
        api["ports"][0]["containerPort"].to_string(),
        port_of("--listen")
    );
    assert_eq!(api["ports"][0]["name"], "http");
    // And the functions on a port of their own.
    assert_eq!(
        api["ports"][1]["containerPort"].to_string(),
        port_of("--fn-listen")
    );
    assert_eq!(api["ports"][1]["name"], "functions");
    assert_ne!(port_of("--listen"), port_of("--fn-listen"));
}

#[test]
fn probes_are_routes_the_api_serves() {
    let d = dump();
    let api_sources = quoted_in_sources(&["api/src"]);
    let mut probed = 0;
    for (name, spec) in pod_specs(&d) {
        for c in containers(spec) {
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                if c[probe].is_null() {
                    continue;
                }
                let path = c[probe]["httpGet"]["path"].as_str().expect("an HTTP probe");
                assert!(
                    api_sources.contains(&format!("path = \"{path}\"")),
                    "{name}: {probe} on {path}, which the API does not route"
                );
                assert_eq!(
                    c[probe]["httpGet"]["port"], c["ports"][0]["name"],
                    "{name}: {probe}"
                );
                probed += 1;
            }
        }
    }
    assert_eq!(probed, 2, "the API has a readiness and a liveness probe");
    let api = pod_specs(&d)
        .into_iter()
        .find(|(n, _)| n == "sless-api")
        .unwrap()
        .1;
    assert_eq!(
        api["containers"][0]["readinessProbe"]["httpGet"]["path"],
        "/readyz"
    );
    assert_eq!(
        api["containers"][0]["livenessProbe"]["httpGet"]["path"],
        "/healthz"
    );
}

#[test]
fn pods_are_hardened() {
    let d = dump();
    for (name, spec) in pod_specs(&d) {
        let pod = &spec["securityContext"];
        assert_eq!(pod["runAsNonRoot"], true, "{name}");
        assert!(pod["runAsUser"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(pod["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        assert_eq!(spec["enableServiceLinks"], false, "{name}");
        assert_eq!(
            spec["automountServiceAccountToken"],
            name == "sless-worker",
            "{name}: only the worker talks to the Kubernetes API"
        );
        for c in containers(spec) {
            let what = format!("{name}/{}", c["name"]);
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
            assert_eq!(sc["runAsNonRoot"], true, "{what}");
            assert_eq!(str_list(&sc["capabilities"]["drop"]), ["ALL"], "{what}");
            assert!(sc["capabilities"]["add"].is_null(), "{what}");
            for r in ["memory", "ephemeral-storage"] {
                assert!(
                    c["resources"]["limits"][r].is_string(),
                    "{what}: no {r} limit"
                );
            }
            assert!(
                c["resources"]["requests"]["cpu"].is_string(),
                "{what}: no cpu request"
            );
            let from: Vec<&Value> = c["envFrom"].as_array().unwrap().iter().collect();
            assert_eq!(
                from,
                [&json!({"configMapRef": {"name": "sless-config"}})],
                "{what}"
            );
            for e in c["env"].as_array().unwrap() {
                // Secrets by reference only.
                assert!(
                    e["value"].is_null() || !e["name"].as_str().unwrap().contains("SECRET"),
                    "{what}: {e}"
                );
            }
        }
    }
    // No Secret with values is part of the base.
    assert!(of_kind(&d, "Secret").is_empty());
}

#[test]
fn the_api_pods_are_the_ones_tenant_network_policies_admit() {
    let d = dump();
    let api = of_kind(&d, "Deployment")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "sless-api")
        .unwrap();
    let labels = &api["spec"]["template"]["metadata"]["labels"];
    // sless_workers::kube::KubeSettings::proxy_pod_labels.
    assert_eq!(labels["app.kubernetes.io/name"], "sless");
    assert_eq!(labels["app.kubernetes.io/component"], "api");
    assert_eq!(
        api["metadata"]["namespace"],
        d["config"]["SLESS_KUBE_SYSTEM_NAMESPACE"]
    );
    // Every selector picks its own pods.
    for o in objects(&d) {
        let selector = match o["kind"].as_str().unwrap() {
            "Service" => &o["spec"]["selector"],
            "Deployment" | "PodDisruptionBudget" => &o["spec"]["selector"]["matchLabels"],
            _ => continue,
        };
        let component = selector["app.kubernetes.io/component"].as_str().unwrap();
        let pods = of_kind(&d, "Deployment")
            .into_iter()
            .filter(|dep| {
                let l = &dep["spec"]["template"]["metadata"]["labels"];
                selector
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &l[k] == v)
            })
            .count();
        assert_eq!(
            pods, 1,
            "{} {} selects {component}",
            o["kind"], o["metadata"]["name"]
        );
    }
    // The Ingress has two hosts: the API's (whose /fn redirects) and the
    // functions', each to its own port of the API's Service.
    let ingress = &of_kind(&d, "Ingress")[0];
    let service = of_kind(&d, "Service")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "sless-api")
        .unwrap();
    let service_ports: Vec<&str> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let rules = ingress["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    for (rule, port, want) in [
        (
            &rules[0],
            "http",
            &["/v1", "/fn", "/openapi.json", "/healthz"][..],
        ),
        (&rules[1], "functions", &["/fn", "/healthz"][..]),
    ] {
        let paths: Vec<&str> = rule["http"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                assert_eq!(p["backend"]["service"]["name"], "sless-api");
                assert_eq!(p["backend"]["service"]["port"]["name"], port, "{p}");
                p["path"].as_str().unwrap()
            })
            .collect();
        assert_eq!(paths, want, "the {port} host");
        assert!(service_ports.contains(&port), "{port} in {service_ports:?}");
    }
}

#[test]
fn rbac_is_least_privilege() {
    let d = dump();
    let tenant = d["tenant_cluster_role"].as_str().unwrap();
    for o in objects(&d) {
        for rule in o["rules"].as_array().into_iter().flatten() {
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                assert!(
                    !str_list(&rule[field]).contains(&"*"),
                    "{}: {rule}",
                    o["metadata"]["name"]
                );
            }
            // No Secret is readable cluster-wide, and the only ClusterRole
            // naming Secrets is the one bound per tenant namespace.
            if str_list(&rule["resources"]).contains(&"secrets") && o["kind"] == "ClusterRole" {
                assert_eq!(o["metadata"]["name"], tenant, "{rule}");
                let read = ["get", "list", "watch"]
                    .iter()
                    .any(|v| str_list(&rule["verbs"]).contains(v));
                assert!(
                    !read || !rule["resourceNames"].is_null(),
                    "tenant Secrets readable by name only: {rule}"
                );
            }
        }
        for field in ["roleRef", "subjects"] {
            assert!(!o[field].to_string().contains("cluster-admin"), "{o}");
        }
    }
    // The tenant ClusterRole is never bound cluster-wide.
    for b in of_kind(&d, "ClusterRoleBinding") {
        assert_ne!(b["roleRef"]["name"], tenant, "{b}");
    }
    // Cluster-wide: namespaces, rolebindings, and `bind` on the tenant role only.
    let cluster: BTreeSet<(String, String)> = d["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["scope"] == "cluster")
        .map(|r| {
            (
                r["api_group"].as_str().unwrap().into(),
                r["resource"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("", "namespaces"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterroles"),
    ]
    .map(|(g, r)| (g.to_owned(), r.to_owned()))
    .into();
    assert_eq!(cluster, want);
    let bind = d["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "clusterroles")
        .unwrap();
    assert_eq!(bind["verbs"], json!(["bind"]));
    assert_eq!(bind["names"], json!([tenant]));
    for r in d["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["scope"] == "cluster")
    {
        assert!(
            !str_list(&r["verbs"]).contains(&"delete"),
            "sless never deletes a namespace: {r}"
        );
    }
    // The admission policies hold those cluster-wide writes to sless-*, one
    // kind each (an expression is type-checked against every kind its policy
    // matches), and are bound to deny. tests/kube_deploy.rs holds them
    // against a real API server.
    let policies = of_kind(&d, "ValidatingAdmissionPolicy");
    let mut matched = Vec::new();
    for policy in &policies {
        let spec = &policy["spec"];
        assert_eq!(spec["failurePolicy"], "Fail");
        assert!(
            spec["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .contains("system:serviceaccount:sless:sless")
        );
        let rules = spec["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap();
        assert_eq!(rules.len(), 1, "{}: one kind", policy["metadata"]["name"]);
        let resources = str_list(&rules[0]["resources"]);
        assert_eq!(
            resources.len(),
            1,
            "{}: one kind",
            policy["metadata"]["name"]
        );
        let checks = spec["validations"].to_string();
        match resources[0] {
            "namespaces" => assert!(checks.contains("request.name.startsWith('sless-')")),
            "rolebindings" => assert!(checks.contains("request.namespace.startsWith('sless-')")),
            _ => {}
        }
        matched.extend(resources);
        let binding = of_kind(&d, "ValidatingAdmissionPolicyBinding")
            .into_iter()
            .find(|b| b["spec"]["policyName"] == policy["metadata"]["name"])
            .unwrap();
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    }
    for resource in ["namespaces", "rolebindings", "secrets"] {
        assert!(matched.contains(&resource), "{resource} in {matched:?}");
    }
    // The rules as data are the rules of the objects.
    let in_objects: usize = objects(&d)
        .iter()
        .filter_map(|o| o["rules"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(in_objects, d["rules"].as_array().unwrap().len());
}

/// Glob of `.gitignore`: `*` within one path segment, nothing else.
fn glob(pattern: &str, path: &str) -> bool {
    let (p, s) = (
        pattern.split('/').collect::<Vec<_>>(),
        path.split('/').collect::<Vec<_>>(),
    );
    fn segment(p: &str, s: &str) -> bool {
        match p.split_once('*') {
            None => p == s,
            Some((pre, rest)) => {
                s.starts_with(pre)
                    && (0..=s.len() - pre.len()).any(|i| segment(rest, &s[pre.len() + i..]))
            }
        }
    }
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| segment(p, s))
}

#[test]
fn the_overlays_secret_files_are_ignored_and_have_examples() {
    let ignore = std::fs::read_to_string(root().join("deploy/.gitignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let overlay = overlay();
    let mut files = Vec::new();
    for g in overlay["secretGenerator"].as_array().unwrap() {
        files.extend(str_list(&g["envs"]));
        files.extend(
            str_list(&g["files"])
                .into_iter()
                .map(|f| f.rsplit('=').next().unwrap()),
        );
    }
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let path = format!("overlays/example/{file}");
        assert!(
            patterns.iter().any(|p| glob(p, &path)),
            "deploy/{path} is not in deploy/.gitignore"
        );
        let example = root().join("deploy").join(format!("{path}.example"));
        assert!(example.exists(), "{} is missing", example.display());
        assert!(
            !patterns.iter().any(|p| glob(p, &format!("{path}.example"))),
            "{path}.example is ignored"
        );
    }
    // The overlay sets the registry, which has no default.
    let literals: Vec<&str> = overlay["configMapGenerator"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| str_list(&g["literals"]))
        .collect();
    assert!(
        literals
            .iter()
            .any(|l| l.starts_with("SLESS_KUBE_REGISTRY=")),
        "{literals:?}"
    );
}
