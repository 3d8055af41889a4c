//! Calls spread over a function's instances: the least busy with room
//! takes each; when every instance is at its concurrency, calls wait in
//! arrival order in a bounded queue, and past it get 429 with
//! `Retry-After`, never a 5xx; an instance that refuses connections is
//! passed over. Instances are small servers on loopback that hold each
//! call until told to answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use sless_api::proxy::{HttpClient, ProxyLimits};
use sless_testkit::eventually;
use tokio::sync::Semaphore;

use super::proxy::{Upstream, app_with, deployed};
use super::support::*;

const SUB: &str = "spread@example.com";

/// An instance that holds each call until `release` has a permit for it,
/// counting the calls it holds and the most it held at once, and noting
/// each call's query in `arrived` as it comes.
struct Held {
    up: Upstream,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
}

type Arrivals = Arc<std::sync::Mutex<Vec<String>>>;

async fn held(name: &'static str, release: Arc<Semaphore>, arrived: Arrivals) -> Held {
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let (n, m, s) = (now.clone(), most.clone(), served.clone());
    let app = Router::new().fallback(move |uri: axum::http::Uri| {
        let (n, m, s, release) = (n.clone(), m.clone(), s.clone(), release.clone());
        let arrived = arrived.clone();
        async move {
            arrived
                .lock()
                .unwrap()
                .push(uri.query().unwrap_or_default().to_owned());
            let at = n.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(at, Ordering::SeqCst);
            release.acquire().await.unwrap().forget();
            n.fetch_sub(1, Ordering::SeqCst);
            s.fetch_add(1, Ordering::SeqCst);
            name.into_response()
        }
    });
    Held {
        up: Upstream::start(app).await,
        now,
        most,
        served,
    }
}

/// Makes `name` serve at `instances`, one call at a time each.
async fn serve_at(env: &Env, name: &str, instances: &[&str]) {
    sqlx::query(
        "update functions set instance_endpoints = $1, instances = $2,
             scaling = '{\"concurrency\": 1, \"max_instances\": 3}'
         where name = $3",
    )
    .bind(json!(instances))
    .bind(instances.len() as i32)
    .bind(name)
    .execute(&env.db.pool)
    .await
    .unwrap();
}

fn limits(queue: usize) -> impl FnOnce(&mut sless_api::AppState) {
    move |s| {
        s.http = HttpClient::new(ProxyLimits {
            activation_queue: queue,
            activation_timeout: Duration::from_secs(20),
            ..ProxyLimits::default()
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_to_the_least_busy_instance_and_wait_in_order_past_capacity_then_get_429() {
    let env = Env::new().await;
    let release = Arc::new(Semaphore::new(0));
    let arrived = Arrivals::default();
    let instances = [
        held("a", release.clone(), arrived.clone()).await,
        held("b", release.clone(), arrived.clone()).await,
        held("c", release.clone(), arrived.clone()).await,
    ];
    deployed(&env, SUB, "busy", 30, &instances[0].up.url).await;
    let urls: Vec<&str> = instances.iter().map(|i| i.up.url.as_str()).collect();
    serve_at(&env, "busy", &urls).await;
    let mut state = None;
    let app = app_with(&env, |s| {
        limits(2)(s);
        state = Some(s.clone());
    });
    let state = state.unwrap();
    let in_flight = || state.load.in_flight(&ns(SUB), "busy");
    let call = |i: usize| {
        let app = app.clone();
        async move {
            let req = axum::http::Request::get(format!("/fn/{}/busy?call={i}", ns(SUB)))
                .body(axum::body::Body::empty())
                .unwrap();
            (i, send(&app, req).await)
        }
    };
    // Three calls: one at each instance.
    let first: Vec<_> = (0..3).map(|i| tokio::spawn(call(i))).collect();
    eventually(
        "one call at each instance",
        Duration::from_secs(10),
        || async {
            instances
                .iter()
                .all(|i| i.now.load(Ordering::SeqCst) == 1)
                .then_some(())
        },
    )
    .await;
    // Two more wait, one after the other (each counted in flight before
    // the next comes); a sixth finds the queue full: 429.
    let mut waiting = Vec::new();
    for i in 3..5 {
        waiting.push(tokio::spawn(call(i)));
        eventually(
            &format!("call {i} to wait"),
            Duration::from_secs(10),
            || async { (in_flight() as usize == i + 1).then_some(()) },
        )
        .await;
    }
    let (_, refused) = call(5).await;
    refused.assert_problem(
        "past the queue",
        StatusCode::TOO_MANY_REQUESTS,
        "function-busy",
    );
    assert_eq!(refused.headers.get("retry-after").unwrap(), "1");
    // Each release lets one waiting call through, the oldest first.
    for (n, i) in (3..5).enumerate() {
        release.add_permits(1);
        let seen = eventually(
            &format!("call {i} to reach an instance"),
            Duration::from_secs(10),
            || async {
                let arrived = arrived.lock().unwrap().clone();
                (arrived.len() == 4 + n).then_some(arrived)
            },
        )
        .await;
        assert_eq!(seen.last().unwrap(), &format!("call={i}"), "{seen:?}");
    }
    release.add_permits(100);
    for t in first.into_iter().chain(waiting) {
        let (i, answer) = t.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "call {i}: {}", answer.body);
    }
    for i in &instances {
        assert_eq!(
            i.most.load(Ordering::SeqCst),
            1,
            "an instance held two calls at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_refuses_connections_is_passed_over() {
    let env = Env::new().await;
    let release = Arc::new(Semaphore::new(1000));
    let alive = held("alive", release.clone(), Arrivals::default()).await;
    let gone = held("gone", release, Arrivals::default()).await;
    let gone_url = gone.up.url.clone();
    deployed(&env, SUB, "half", 30, &alive.up.url).await;
    serve_at(&env, "half", &[&gone_url, &alive.up.url]).await;
    drop(gone); // its port closes
    let app = app_with(&env, limits(10));
    for i in 0..20 {
        let req = axum::http::Request::get(format!("/fn/{}/half", ns(SUB)))
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = send(&app, req).await;
        assert_eq!(answer.status, StatusCode::OK, "call {i}: {}", answer.body);
    }
    assert_eq!(alive.served.load(Ordering::SeqCst), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_in_flight_and_the_instances_serving_reach_the_metrics_and_the_function() {
    let env = Env::new().await;
    let release = Arc::new(Semaphore::new(0));
    let arrived = Arrivals::default();
    let a = held("a", release.clone(), arrived.clone()).await;
    let b = held("b", release.clone(), arrived).await;
    deployed(&env, SUB, "seen", 30, &a.up.url).await;
    serve_at(&env, "seen", &[&a.up.url, &b.up.url]).await;
    let app = app_with(&env, limits(10));
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let req = axum::http::Request::get(format!("/fn/{}/seen", ns(SUB)))
                    .body(axum::body::Body::empty())
                    .unwrap();
                send(&app, req).await
            })
        })
        .collect();
    let metrics = sless_telemetry::Metrics::default();
    let scope = sless_api::plumbing::metrics::Scope {
        projector: true,
        queue: false,
    };
    let series = |what: &str| {
        format!(
            "sless_{what}{{namespace=\"{}\",function=\"seen\"}} ",
            ns(SUB)
        )
    };
    let text = eventually(
        "two calls in flight in the metrics",
        Duration::from_secs(10),
        || async {
            sless_api::plumbing::metrics::refresh(&env.db.pool, &metrics, scope).await;
            let (text, _) = metrics.encode(false);
            text.contains(&format!("{}2.0\n", series("function_in_flight")))
                .then_some(text)
        },
    )
    .await;
    assert!(
        text.contains(&format!("{}2\n", series("function_instances"))),
        "{text}"
    );
    let f = env
        .send(get(
            &format!("{}/seen", functions_uri(&ns(SUB))),
            Some(&token(SUB)),
        ))
        .await;
    assert_eq!(f.body["in_flight"], 2.0, "{}", f.body);
    release.add_permits(2);
    for c in calls {
        assert_eq!(c.await.unwrap().status, StatusCode::OK);
    }
    // Back to zero once the last report says so.
    eventually(
        "no call in flight in the metrics",
        Duration::from_secs(10),
        || async {
            sless_api::plumbing::metrics::refresh(&env.db.pool, &metrics, scope).await;
            let (text, _) = metrics.encode(false);
            text.contains(&format!("{}0.0\n", series("function_in_flight")))
                .then_some(())
        },
    )
    .await;
}
