//! The console's pages past the namespace's: versions, their diff, a zip
//! and a rollback; a trigger's runs; a job run from a form; a function's
//! calls with their chart; how a function scales, with the chart of its
//! instances; the audit log and its live stream; "try it".

use axum::http::{StatusCode, header};
use sless_store::invocations::{self, Invocation};

use super::console::Browser;
use super::proxy::{Upstream, deployed};
use super::support::*;

const ALICE: &str = "alice";
const BOB: &str = "bob";

async fn two_versions(env: &Env) {
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    for body in ["return 1\n", "return 2\n"] {
        let zip = zip_of(&[(
            "handler.py",
            format!("def handle(e):\n    {body}").as_bytes(),
        )]);
        assert_eq!(
            env.upload(ALICE, "hello", &zip).await.status,
            StatusCode::ACCEPTED
        );
    }
    env.catch_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_show_who_uploaded_them_their_diff_their_zip_and_roll_back_with_a_confirmation() {
    let env = Env::new().await;
    two_versions(&env).await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let base = format!("/console/ns/{}/functions/hello", ns(ALICE));

    let page = browser.get(&format!("{base}/versions")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert!(
        page.text.contains("v2") && page.text.contains(ALICE),
        "{}",
        page.text
    );
    let unified = browser.get(&format!("{base}/versions?from=1&to=2")).await;
    assert!(
        unified.text.contains(r#"<span class="del">-    return 1"#)
            && unified.text.contains(r#"<span class="add">+    return 2"#),
        "{}",
        unified.text
    );
    let split = browser
        .get(&format!("{base}/versions?from=1&to=2&view=split"))
        .await;
    assert!(
        split.text.contains(r#"<td class="del"><code>    return 1</code></td><td class="add"><code>    return 2</code></td>"#),
        "{}",
        split.text
    );
    let zip = browser.get(&format!("{base}/versions/1/archive")).await;
    assert_eq!(zip.status, StatusCode::OK);
    assert!(
        zip.headers[header::CONTENT_DISPOSITION]
            .to_str()
            .unwrap()
            .contains("hello-v1.zip")
    );
    assert!(zip.text.starts_with("PK"), "a zip");

    let confirm = browser.get(&format!("{base}/rollback?version=1")).await;
    assert!(
        confirm.text.contains("Roll hello back to v1?"),
        "{}",
        confirm.text
    );
    let before = env.counts().await;
    let refused = browser
        .post(&format!("{base}/rollback"), &[("version", "1")])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(env.counts().await.events, before.events, "nothing written");
    let done = browser
        .post(
            &format!("{base}/rollback"),
            &[("version", "1"), ("csrf", &confirm.csrf())],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.text);
    let last = env.stream(ALICE, "hello").await.pop().unwrap();
    assert_eq!(last.event_type, "FunctionRolledBack");
    assert_eq!(last.metadata["actor"], ALICE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_triggers_next_runs_show_in_its_zone_and_a_job_runs_from_a_form() {
    let env = Env::new().await;
    two_versions(&env).await;
    let created = env
        .send(post_json(
            &format!("/v1/namespaces/{}/triggers", ns(ALICE)),
            Some(&token(ALICE)),
            r#"{"name": "nightly", "function": "hello", "type": "cron", "schedule": "30 3 * * *", "timezone": "Asia/Kolkata"}"#,
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    env.catch_up().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let trigger = browser
        .get(&format!("/console/ns/{}/triggers/nightly", ns(ALICE)))
        .await;
    assert_eq!(trigger.status, StatusCode::OK, "{}", trigger.text);
    assert_eq!(
        trigger.text.matches(" 03:30 IST</li>").count(),
        5,
        "{}",
        trigger.text
    );

    let function = browser
        .get(&format!("/console/ns/{}/functions/hello", ns(ALICE)))
        .await;
    let run = browser
        .post(
            &format!("/console/ns/{}/jobs", ns(ALICE)),
            &[
                ("function", "hello"),
                ("input", r#"{"x": 1}"#),
                ("csrf", &function.csrf()),
            ],
        )
        .await;
    assert_eq!(run.status, StatusCode::SEE_OTHER, "{}", run.text);
    let job = browser.get(run.location()).await;
    assert_eq!(job.status, StatusCode::OK, "{}", job.text);
    assert!(job.text.contains("Pending"), "{}", job.text);
    assert_eq!(job.headers["refresh"], "1", "it loads again until it ends");
    let bad = browser
        .post(
            &format!("/console/ns/{}/jobs", ns(ALICE)),
            &[
                ("function", "hello"),
                ("input", "{not json"),
                ("csrf", &function.csrf()),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_show_with_their_method_path_and_a_latency_chart_and_filter() {
    let env = Env::new().await;
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let now = chrono::Utc::now();
    let records: Vec<Invocation> = (0..20)
        .map(|i| {
            let at = now - chrono::Duration::seconds(i * 30);
            Invocation {
                id: invocations::id_for(at),
                namespace: ns(ALICE),
                function: "hello".into(),
                version: Some(1),
                started_at: at,
                duration: std::time::Duration::from_millis(5 + i as u64),
                status: if i % 5 == 0 { 502 } else { 200 },
                bytes_in: 0,
                bytes_out: 1,
                cold: i == 19,
                error: None,
                error_kind: None,
                request_id: format!("r{i}"),
                origin: "http".into(),
                run: None,
                method: Some("POST".into()),
                path: Some(format!("/orders/{i}")),
                activation: None,
                instance_start: None,
            }
        })
        .collect();
    invocations::insert(&env.db.pool, &records).await.unwrap();
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let base = format!("/console/ns/{}/functions/hello/invocations", ns(ALICE));
    let all = browser.get(&base).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert!(
        all.text.contains("<svg") && all.text.contains("<polyline"),
        "{}",
        all.text
    );
    assert!(
        all.text.contains("/orders/7") && all.text.contains("POST"),
        "{}",
        all.text
    );
    assert_eq!(all.text.matches("<td>502</td>").count(), 4);
    let failed = browser.get(&format!("{base}?status=5xx")).await;
    assert_eq!(failed.text.matches("<td>502</td>").count(), 4);
    assert_eq!(
        failed.text.matches("<td>200</td>").count(),
        0,
        "{}",
        failed.text
    );
    let page = browser.get(&format!("/console/ns/{}", ns(ALICE))).await;
    assert!(
        page.text
            .contains(r#"<td class="num">20</td><td class="num">4</td>"#),
        "calls and errors of the last hour: {}",
        page.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_filters_pages_and_streams_for_its_namespace_only() {
    let env = Env::new().await;
    two_versions(&env).await;
    assert_eq!(env.create(ALICE, "other").await.status, StatusCode::CREATED);
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let events = format!("/console/ns/{}/events", ns(ALICE));
    let all = browser.get(&events).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(
        all.text.matches("<td>FunctionUploaded</td>").count(),
        2,
        "{}",
        all.text
    );
    let one = browser.get(&format!("{events}?function=other")).await;
    assert_eq!(one.text.matches("<td>FunctionUploaded</td>").count(), 0);
    assert_eq!(one.text.matches("<td>FunctionCreated</td>").count(), 1);
    let paged = browser.get(&format!("{events}?limit=2")).await;
    assert!(paged.text.contains("rel=\"next\""), "{}", paged.text);
    assert!(
        paged.text.contains(r#"data-stream="/console/ns/"#),
        "the live mode's stream: {}",
        paged.text
    );

    let stream = browser.open_stream(&format!("{events}/stream")).await;
    assert_eq!(stream, "text/event-stream");
    let other = browser
        .get(&format!("/console/ns/{}/events", ns(BOB)))
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_it_calls_the_function_through_the_proxy_and_shows_its_answer() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, ALICE, "echo", 30, &up.url).await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let base = format!("/console/ns/{}/functions/echo", ns(ALICE));
    let page = browser.get(&base).await;
    let refused = browser
        .post(
            &format!("{base}/try"),
            &[("method", "POST"), ("path", "/x")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let answer = browser
        .post(
            &format!("{base}/try"),
            &[
                ("method", "POST"),
                ("path", "/x?y=1"),
                ("body", "<b>hi</b>"),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert!(
        answer.text.contains("Status <strong>200</strong>"),
        "{}",
        answer.text
    );
    // The upstream says what it got (the body's length, not the body),
    // and its JSON comes out escaped.
    assert!(
        answer.text.contains("&quot;path&quot;:&quot;/x&quot;")
            && answer.text.contains("&quot;body_len&quot;:9"),
        "the answer's body, escaped: {}",
        answer.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_origin_serves_no_console_page() {
    let env = Env::new().await;
    let state = sless_api::AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        sless_api::Auth::hs256(SECRET, None, None),
    );
    let functions = sless_api::fn_router(state);
    for path in [
        "/console",
        "/console/sign-in",
        "/funcs/sless-0123456789abcdef",
    ] {
        let got = send(&functions, get(path, None)).await;
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_page_shows_fifty_functions_a_page() {
    let env = Env::new().await;
    for i in 0..51 {
        let created = env.create(ALICE, &format!("f{i:02}")).await;
        assert_eq!(created.status, StatusCode::CREATED);
    }
    env.catch_up().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let home = format!("/console/ns/{}", ns(ALICE));
    let first = browser.get(&home).await;
    assert_eq!(
        first.text.matches("/functions/f").count(),
        50,
        "{}",
        first.text
    );
    assert!(first.text.contains("Page 1 of 2") && first.text.contains(">f49</a>"));
    let second = browser.get(&format!("{home}?page=2")).await;
    assert_eq!(second.text.matches("/functions/f").count(), 1);
    assert!(second.text.contains(">f50</a>") && second.text.contains("Page 2 of 2"));
    let past = browser.get(&format!("{home}?page=9")).await;
    assert!(
        past.text.contains("Page 2 of 2"),
        "the last page: {}",
        past.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_opens_any_namespace_and_no_one_else_can() {
    let env = Env::new().await;
    two_versions(&env).await;
    let admin = sign(
        &serde_json::json!({ "sub": "ops@example.com", "exp": now() + 3600, "sless_admin": true }),
        SECRET,
    );
    let mut browser = Browser::new(&env);
    let form = browser.get("/console/sign-in").await;
    let csrf = form.csrf();
    browser
        .post("/console/sign-in", &[("token", &admin), ("csrf", &csrf)])
        .await;
    let switched = browser
        .get(&format!("/console/switch?ns={}", ns(ALICE)))
        .await;
    assert_eq!(switched.location(), format!("/console/ns/{}", ns(ALICE)));
    let page = browser.get(switched.location()).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains(">hello</a>") && page.text.contains("id=\"switch-ns\""));

    let mut user = Browser::new(&env);
    user.sign_in(BOB).await;
    let own = user.get(&format!("/console/ns/{}", ns(BOB))).await;
    assert!(
        !own.text.contains("switch-ns"),
        "no namespace field for a user"
    );
    let other = user.get(&format!("/console/ns/{}", ns(ALICE))).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_output_is_escaped() {
    let env = Env::new().await;
    two_versions(&env).await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    for (i, hostile) in super::console::HOSTILE.iter().enumerate() {
        let name = format!("run{i}");
        let created = env
            .send(post_json(
                &format!("/v1/namespaces/{}/jobs", ns(ALICE)),
                Some(&token(ALICE)),
                &serde_json::json!({ "name": name, "function": "hello" }).to_string(),
            ))
            .await;
        assert_eq!(created.status, StatusCode::ACCEPTED, "{:?}", created.body);
        super::jobs::worker_appends(&env, ALICE, &name, &[super::jobs::succeeded(hostile)]).await;
        env.catch_up().await;
        let page = browser
            .get(&format!("/console/ns/{}/jobs/{name}", ns(ALICE)))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        if hostile.contains('<') {
            assert!(
                !page.text.contains(hostile),
                "{hostile:?} unescaped: {}",
                page.text
            );
            assert!(page.text.contains("&lt;"), "{}", page.text);
        }
        assert!(!page.text.contains("<img"));
        assert!(page.headers.get("refresh").is_none(), "it ended");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_scaled_to_zero_shows_so_on_its_pages() {
    let env = Env::new().await;
    for name in ["napping", "awake"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    env.catch_up().await;
    // As the projector leaves them: one serving, one scaled to zero.
    sqlx::query(
        "update functions set phase = 'Ready', deployed_version = 1,
             endpoint = case when name = 'awake' then 'http://127.0.0.1:9' end,
             idle = (name = 'napping')",
    )
    .execute(&env.db.pool)
    .await
    .unwrap();
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let home = format!("/console/ns/{}", ns(ALICE));
    let list = browser.get(&home).await;
    assert_eq!(
        list.text.matches("scaled to zero").count(),
        1,
        "{}",
        list.text
    );
    let napping = browser.get(&format!("{home}/functions/napping")).await;
    assert!(napping.text.contains("scaled to zero"), "{}", napping.text);
    let awake = browser.get(&format!("{home}/functions/awake")).await;
    assert!(!awake.text.contains("scaled to zero"), "{}", awake.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_page_shows_how_it_scales_and_its_instances_over_the_last_hour() {
    use sless_store::eventlog::{self, Metadata, NewEvent};
    let env = Env::new().await;
    let created = env
        .send(post_json(
            &functions_uri(&ns(ALICE)),
            Some(&token(ALICE)),
            r#"{"name": "busy", "runtime": "python3.11", "entrypoint": "handler.handle",
                "min_instances": 1, "max_instances": 5, "concurrency": 4}"#,
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    // As a worker and the autoscaler record them: one instance, then three.
    let reason = "9.5 calls in flight over the last 60 s; 70% of concurrency 4 per instance is 2.8";
    let recorded = [
        (
            "FunctionDeployed",
            serde_json::json!({ "version": 1, "endpoint": "http://127.0.0.1:9" }),
        ),
        (
            "FunctionScaled",
            serde_json::json!({ "from": 1, "to": 3, "observed": 9.5, "window": "stable", "reason": reason }),
        ),
    ]
    .map(|(t, data)| NewEvent {
        event_type: t.into(),
        namespace: ns(ALICE),
        data,
        metadata: Metadata {
            actor: "system:worker".into(),
            ..Default::default()
        },
    });
    let mut tx = env.db.pool.begin().await.unwrap();
    eventlog::append(&mut tx, &stream_of(ALICE, "busy"), 1, &recorded)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    env.catch_up().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let home = format!("/console/ns/{}", ns(ALICE));

    let page = browser.get(&format!("{home}/functions/busy")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    for shown in [
        r#"<dt>Instances</dt><dd>3 serving <span class="hint">(min 1, max 5)</span></dd>"#,
        "<dt>Concurrency</dt><dd>4 calls at once per instance</dd>",
        "<dt>In flight</dt>",
        r#"aria-label="Instances serving, the last hour""#,
        r#"class="instances""#,
        "the last hour: 3 now, 2 changes",
        "type=FunctionScaled&amp;type=FunctionScaledToZero",
    ] {
        assert!(page.text.contains(shown), "{shown:?}: {}", page.text);
    }
    let events = browser.get(&format!("{home}/events?function=busy")).await;
    assert!(
        events.text.contains(&format!(
            r#"<span class="reason">1 → 3 instances (stable window): {reason}</span>"#
        )),
        "{}",
        events.text
    );
    let list = browser.get(&home).await;
    assert!(
        list.text
            .contains(r#"<td class="num">3 <span class="hint">(1–5)</span></td>"#),
        "{}",
        list.text
    );
}
