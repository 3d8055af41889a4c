//! What the provider refuses, and how: bad input at plan time naming the
//! attribute (and writing nothing), a wrong endpoint or token, a build
//! that fails (nothing half-made is recorded), a change made elsewhere
//! since the plan (`If-Match`), and names taken by others.

use super::{Version, Workspace, api, last_position};
use crate::dev::{start_dev, stop_dev};

const PROVIDER: &str = r#"terraform {
  required_providers {
    sless = { source = "sless.dev/sless/sless" }
  }
}
provider "sless" {}
"#;

const HANDLER: &str = "def handle(event):\n    if (event.get(\"json\") or {}).get(\"fail\"):\n        raise RuntimeError(\"asked to fail\")\n    return {\"ok\": True}\n";

/// A function resource `f` with one line changed or added.
fn function(extra: &str) -> String {
    format!(
        r#"resource "sless_function" "f" {{
  name = "f"
  runtime = "python3.11"
  entrypoint = "handler.handle"
  source_dir = "${{path.module}}/code"
{extra}
}}
"#
    )
}

fn trigger(extra: &str) -> String {
    format!(
        r#"resource "sless_trigger" "t" {{
  name = "t"
  function = "f"
{extra}
}}
"#
    )
}

async fn refusals(version: Version) {
    let scratch = sless_testkit::scratch_dir(&format!("tf-refuse-{version:?}").to_lowercase());
    let data = scratch.join("data");
    let (proc, c) = start_dev(&data, "log").await;
    let api = api(&c);
    let mut ws = Workspace::new(version, &scratch, &c);
    ws.write("code/handler.py", HANDLER);

    // Bad input: a plan-time error on the attribute, and nothing written.
    let before = last_position(&api).await;
    let cases: &[(&str, String, &str)] = &[
        ("unknown runtime", function("").replace("python3.11", "cobol"), "runtime = \"cobol\""),
        ("bad name", function("").replace("name = \"f\"", "name = \"Bad_Name\""), "name = \"Bad_Name\""),
        ("memory out of range", function("  memory_mb = 10"), "memory_mb = 10"),
        ("min above max", function("  min_instances = 5\n  max_instances = 2"), "min_instances = 5"),
        ("min above the default max", function("  min_instances = 11"), "min_instances = 11"),
        ("no call per instance", function("  concurrency = 0"), "concurrency = 0"),
        ("entrypoint without a function", function("").replace("handler.handle", "handler"), "entrypoint = \"handler\""),
        ("a reserved variable", function("  env_vars = { PORT = \"1\" }"), "env_vars = { PORT"),
        ("both sources", function("  code_path = \"x.zip\""), "code_path = \"x.zip\""),
        ("a bad duration", function("  timeouts {\n    create = \"soon\"\n  }"), "create = \"soon\""),
        ("bad cron", trigger("  type = \"cron\"\n  schedule = \"61 * * * *\""), "schedule = \"61 * * * *\""),
        ("bad zone", trigger("  type = \"cron\"\n  schedule = \"* * * * *\"\n  timezone = \"Mars/Olympus\""), "timezone = \"Mars/Olympus\""),
        ("unknown trigger type", trigger("  type = \"smtp\""), "type = \"smtp\""),
        (
            "job input not JSON",
            "resource \"sless_job\" \"j\" {\n  name = \"j\"\n  function = \"f\"\n  input = \"{not json\"\n}\n".into(),
            "input = \"{not json\"",
        ),
    ];
    for (what, resource, line) in cases {
        ws.write("main.tf", &format!("{PROVIDER}{resource}"));
        let plan = ws.plan().await;
        assert_eq!(plan.code, 1, "{what}: the plan fails:\n{}", plan.text());
        assert!(
            plan.stderr.contains("Error: ") && plan.stderr.contains(line),
            "{what}: the error shows the attribute's line {line:?}:\n{}",
            plan.stderr
        );
    }
    ws.write("main.tf", &format!("{PROVIDER}{}", function("")));
    ws.write("code/handler.py", HANDLER);
    std::fs::remove_dir_all(ws.dir.join("code")).unwrap();
    let plan = ws.plan().await;
    assert_eq!(plan.code, 1);
    assert!(plan.stderr.contains("source_dir"), "{}", plan.stderr);
    ws.write("code/handler.py", HANDLER);
    assert_eq!(last_position(&api).await, before, "bad input wrote nothing");

    // The provider's settings: which one is wrong is said.
    ws.set_env("SLESS_ENDPOINT", "http://127.0.0.1:9");
    let plan = ws.plan().await;
    assert_eq!(plan.code, 1);
    assert!(
        plan.stderr.contains("Cannot reach the sless API") && plan.stderr.contains("127.0.0.1:9"),
        "{}",
        plan.stderr
    );
    ws.set_env("SLESS_ENDPOINT", &c.url);
    let forged = sless_api::issue_hs256(
        b"some-other-secret-0123456789abcdef",
        "dev",
        std::time::Duration::from_secs(60),
    );
    ws.set_env("SLESS_TOKEN", &forged);
    let plan = ws.plan().await;
    assert_eq!(plan.code, 1);
    assert!(plan.stderr.contains("refused the token"), "{}", plan.stderr);
    assert!(!plan.text().contains(&forged), "the token is never shown");
    ws.set_env("SLESS_TOKEN", &c.token);

    // A build that fails: pip's error in the diagnostic, nothing recorded
    // and nothing left on the server.
    ws.write("code/requirements.txt", "this is not a requirement ===\n");
    let apply = ws
        .run(&["apply", "-auto-approve", "-input=false", "-no-color"])
        .await;
    assert_eq!(apply.code, 1, "{}", apply.text());
    assert!(
        apply.stderr.contains("The build of f failed")
            && apply.stderr.to_lowercase().contains("requirement"),
        "pip's error: {}",
        apply.stderr
    );
    let state = ws.run(&["state", "list"]).await;
    assert_eq!(
        state.stdout.trim(),
        "",
        "nothing recorded: {}",
        state.stdout
    );
    assert!(api.get_function("f").await.unwrap_err().is_not_found());
    std::fs::remove_file(ws.dir.join("code/requirements.txt")).unwrap();

    // Applied, then changed elsewhere after the plan: the apply reports it
    // and overwrites nothing.
    ws.apply().await;
    ws.write(
        "main.tf",
        &format!("{PROVIDER}{}", function("  memory_mb = 256")),
    );
    let plan = ws
        .run(&["plan", "-input=false", "-no-color", "-out=tfplan"])
        .await;
    assert_eq!(plan.code, 0);
    let outside = sless_client::UpdateFunction {
        memory_mb: Some(512),
        ..Default::default()
    };
    api.update_function("f", &outside).await.unwrap();
    let apply = ws
        .run(&["apply", "-input=false", "-no-color", "tfplan"])
        .await;
    assert_eq!(apply.code, 1, "{}", apply.text());
    assert!(
        apply.stderr.contains("changed outside Terraform"),
        "{}",
        apply.stderr
    );
    assert_eq!(api.get_function("f").await.unwrap().memory_mb, Some(512));
    ws.apply().await;
    assert_eq!(api.get_function("f").await.unwrap().memory_mb, Some(256));

    // An update whose build fails: the version before serves on, and the
    // next plan shows the change still to apply.
    ws.write("code/requirements.txt", "this is not a requirement ===\n");
    let apply = ws
        .run(&["apply", "-auto-approve", "-input=false", "-no-color"])
        .await;
    assert_eq!(apply.code, 1, "{}", apply.text());
    assert!(
        apply.stderr.contains("The build of f failed"),
        "{}",
        apply.stderr
    );
    let plan = ws.plan().await;
    assert_eq!(
        plan.code,
        2,
        "the failed function is to be made Ready:\n{}",
        plan.text()
    );
    assert!(
        plan.stdout.contains("\"Failed\" -> \"Ready\""),
        "{}",
        plan.stdout
    );
    // Applied as it is, it stays failed, and says why.
    let apply = ws
        .run(&["apply", "-auto-approve", "-input=false", "-no-color"])
        .await;
    assert_eq!(apply.code, 1, "{}", apply.text());
    assert!(
        apply.stderr.to_lowercase().contains("requirement"),
        "{}",
        apply.stderr
    );
    std::fs::remove_file(ws.dir.join("code/requirements.txt")).unwrap();
    ws.apply().await;
    assert_eq!(ws.plan().await.code, 0);

    // A job that fails fails the apply, and is run again by the next one.
    ws.write(
        "job.tf",
        "resource \"sless_job\" \"boom\" {\n  name = \"boom\"\n  function = \"f\"\n  input = jsonencode({ fail = true })\n}\n",
    );
    let apply = ws
        .run(&["apply", "-auto-approve", "-input=false", "-no-color"])
        .await;
    assert_eq!(apply.code, 1, "{}", apply.text());
    assert!(
        apply.stderr.contains("The job boom failed") && apply.stderr.contains("asked to fail"),
        "{}",
        apply.stderr
    );
    let plan = ws.plan().await;
    assert_eq!(plan.code, 2);
    assert!(
        plan.stdout.contains("tainted"),
        "run again: {}",
        plan.stdout
    );
    std::fs::remove_file(ws.dir.join("job.tf")).unwrap();
    ws.apply().await;

    // Names taken: a function of another spec, a job with another input.
    let taken = sless_client::CreateFunction {
        name: "taken".into(),
        runtime: "nodejs20".into(),
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        min_instances: None,
        max_instances: None,
        concurrency: None,
    };
    api.create_function(&taken).await.unwrap();
    let job = sless_client::CreateJob {
        name: "ran".into(),
        function: "f".into(),
        input: serde_json::json!({"a": 1}),
        timeout_sec: None,
    };
    api.create_job(&job).await.unwrap();
    // Its run's own events are written by then.
    api.wait_for_job("ran", std::time::Duration::from_secs(120))
        .await
        .unwrap();
    let before = last_position(&api).await;
    for (what, resource, said) in [
        (
            "function",
            function("").replace("name = \"f\"", "name = \"taken\"").replace("\"f\" {", "\"taken\" {"),
            "exists already",
        ),
        (
            "job",
            "resource \"sless_job\" \"ran\" {\n  name = \"ran\"\n  function = \"f\"\n  input = jsonencode({ a = 2 })\n}\n".to_owned(),
            "another input",
        ),
    ] {
        ws.write("taken.tf", &resource);
        let apply = ws.run(&["apply", "-auto-approve", "-input=false", "-no-color"]).await;
        assert_eq!(apply.code, 1, "{what}: {}", apply.text());
        assert!(apply.stderr.contains(said), "{what}: {}", apply.stderr);
    }
    assert_eq!(
        api.get_function("taken").await.unwrap().runtime.as_deref(),
        Some("nodejs20")
    );
    assert_eq!(last_position(&api).await, before, "nothing written");

    // The same job again (an apply that lost its answer): taken on.
    ws.write(
        "taken.tf",
        "resource \"sless_job\" \"ran\" {\n  name = \"ran\"\n  function = \"f\"\n  input = jsonencode({ a = 1 })\n}\n",
    );
    ws.apply().await;
    let state = ws
        .run(&["state", "show", "-no-color", "sless_job.ran"])
        .await;
    assert!(state.stdout.contains("Succeeded"), "{}", state.stdout);

    // A function made by an apply that lost its answer (the same spec and
    // code): taken on, with no second version.
    let mut spec = taken.clone();
    spec.name = "again".into();
    spec.runtime = "python3.11".into();
    api.create_function(&spec).await.unwrap();
    let zip = sless_client::package::zip_dir(&ws.dir.join("code"), &Default::default()).unwrap();
    api.upload("again", zip.bytes).await.unwrap();
    ws.write(
        "taken.tf",
        &function("")
            .replace("name = \"f\"", "name = \"again\"")
            .replace("\"f\" {", "\"again\" {"),
    );
    ws.apply().await;
    let versions = api.list_versions("again").await.unwrap();
    assert_eq!(versions.items.len(), 1, "no second version: {versions:?}");
    stop_dev(proc, &data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_1_0_is_refused_bad_input_wrong_settings_and_taken_names() {
    refusals(Version::Old).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_terraform_is_refused_bad_input_wrong_settings_and_taken_names() {
    refusals(Version::Current).await;
}

/// A Node.js package whose install takes 15 s: a build still running when
/// Terraform is interrupted.
const SLOW_PACKAGE: &str = r#"{
  "name": "slow",
  "version": "1.0.0",
  "private": true,
  "scripts": { "postinstall": "node -e \"setTimeout(() => {}, 15000)\"" }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_apply_stops_waiting_and_the_next_one_takes_the_function_on() {
    let scratch = sless_testkit::scratch_dir("tf-stop");
    let data = scratch.join("data");
    let (proc, c) = start_dev(&data, "log").await;
    let api = api(&c);
    let ws = Workspace::new(Version::Current, &scratch, &c);
    ws.write(
        "code/handler.js",
        "exports.handle = async () => ({ ok: true });\n",
    );
    ws.write("code/package.json", SLOW_PACKAGE);
    let resource = function("  build_timeout_sec = 600")
        .replace("python3.11", "nodejs20")
        .replace("name = \"f\"", "name = \"slow\"");
    ws.write("main.tf", &format!("{PROVIDER}{resource}"));

    let apply = ws.spawn(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    sless_testkit::eventually(
        "the build to run",
        std::time::Duration::from_secs(120),
        || async {
            let f = api.get_function("slow").await.ok()?;
            (f.phase == "Building").then_some(())
        },
    )
    .await;
    let started = std::time::Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(apply.id().unwrap() as i32, libc::SIGINT) };
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), apply.wait_with_output())
        .await
        .expect("terraform exits soon after the interrupt")
        .unwrap();
    // Terraform wraps a diagnostic's lines.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .split_whitespace()
    .collect::<Vec<_>>()
    .join(" ");
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("Terraform stopped the apply while slow version 1 was building"),
        "{text}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // Left building on the server, and taken on by the next apply.
    assert_eq!(api.get_function("slow").await.unwrap().phase, "Building");
    let state = ws.run(&["state", "list"]).await;
    assert_eq!(state.stdout.trim(), "", "{}", state.stdout);
    ws.apply().await;
    let f = api.get_function("slow").await.unwrap();
    assert_eq!((f.phase.as_str(), f.version), ("Ready", Some(1)));
    stop_dev(proc, &data).await;
}
