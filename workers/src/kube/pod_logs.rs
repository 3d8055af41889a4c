//! What functions' pods print, kept (`crate::logs`): the output of each
//! function pod's container, read through the API server's log
//! subresource and handed to the [`Shipper`] as a local instance's pipes
//! are (`crate::local`), each line with the pod as its instance.
//!
//! - **One follower.** Every worker process runs a [`PodLogFollower`], but
//!   only the one that holds a PostgreSQL session advisory lock, on a
//!   connection of its own, follows; the others try again now and then
//!   and take over when its session ends (its worker died or lost the
//!   database). A follower that loses its session stops following within
//!   `STANDBY` (2 s); one that takes the lock waits `HANDOVER` (5 s)
//!   first, so two never follow at once.
//! - **One follow per running container**, started when the pod watch of
//!   each tenant namespace (`super::watch`) shows it running, and taken up
//!   again while it runs when the stream ends (the API server restarted,
//!   say).
//! - **Resumed by time.** Each line comes with the time the node read it
//!   (`timestamps=true`), which becomes its `at`, to the microsecond the
//!   store keeps. A follow that starts (again, or on another worker) asks
//!   the store for the pod's last kept line and starts there
//!   (`sinceTime`, which has whole seconds): the lines at or before it
//!   were kept already and are skipped, so a line is kept once and none
//!   after it is missed.
//! - **One stream.** The log subresource merges stdout and stderr (its
//!   `stream` parameter is behind the alpha gate `PodLogsQuerySplitStreams`,
//!   off by default): every line is kept as `stdout`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use futures_util::io::{AsyncBufRead, AsyncBufReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};
use sless_store::PgPool;
use sless_store::function_logs::{self, LINE_LIMIT, Stream};
use tokio::sync::{mpsc, watch};

use super::render::pod::CONTAINER;
use super::render::{COMPONENT_FUNCTION, LABEL_COMPONENT, LABEL_FUNCTION, LABEL_VERSION};
use crate::logs::{Shipper, Source};

/// The advisory lock the following worker holds (any constant of ours).
const FOLLOWER_LOCK: i64 = 0x736c_6573_735f_706c; // "sless_pl"

/// How often a worker that does not follow tries to, and how often the
/// one that does checks that it still holds the lock.
const STANDBY: Duration = Duration::from_secs(2);

/// How long a worker that took the lock waits before it follows: longer
/// than the last follower takes to notice it lost its session and stop.
const HANDOVER: Duration = Duration::from_secs(5);

/// How long a follow waits before it starts again after its stream ended
/// or failed while the container runs.
const AGAIN: Duration = Duration::from_secs(1);

/// How much earlier than the pod's creation its lines may have been read
/// (the node's clock against the API server's): where the store looks
/// for its last line.
const SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// The container of a function's pod whose output is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub namespace: String,
    pub function: String,
    pub version: Option<u32>,
    pub pod: String,
    pub created: DateTime<Utc>,
}

impl Target {
    /// The function container of `pod`, when `pod` is a function's pod.
    pub fn of(pod: &Pod) -> Option<Target> {
        let labels = pod.labels();
        if labels.get(LABEL_COMPONENT).map(String::as_str) != Some(COMPONENT_FUNCTION) {
            return None;
        }
        let created = pod.metadata.creation_timestamp.as_ref()?.0.as_millisecond();
        Some(Target {
            namespace: pod.namespace()?,
            function: labels.get(LABEL_FUNCTION)?.clone(),
            version: labels.get(LABEL_VERSION).and_then(|v| v.parse().ok()),
            pod: pod.name_any(),
            created: DateTime::<Utc>::from_timestamp_millis(created)?,
        })
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }

    fn source(&self) -> Source {
        Source {
            namespace: self.namespace.clone(),
            function: self.function.clone(),
            version: self.version,
            instance: self.pod.clone(),
            invocation: None,
        }
    }
}

/// Whether the function container of `pod` runs: its output can be
/// followed.
pub fn running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// A line of the log subresource with `timestamps=true`: when the node
/// read it, to the microsecond the store keeps, and its text. A line
/// without a readable time is given now.
pub fn split_time(line: &str) -> (DateTime<Utc>, &str) {
    let parsed = line.split_once(' ').and_then(|(time, text)| {
        let at = DateTime::parse_from_rfc3339(time).ok()?;
        Some((at.with_timezone(&Utc), text))
    });
    let (at, text) = parsed.unwrap_or((Utc::now(), line));
    (at.trunc_subsecs(6), text)
}

/// Reads one line (its newline consumed) into `buf`, keeping at most
/// `cap` bytes of it; `None` at the end of the stream, else whether the
/// line was longer than `cap`.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut cut = false;
    let mut read_any = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(read_any.then_some(cut));
        }
        read_any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        let text = &chunk[..take];
        let kept = text.len().min(room);
        buf.extend_from_slice(&text[..kept]);
        cut |= kept < text.len() && !(done && kept + 1 == text.len());
        reader.consume_unpin(take);
        if done {
            return Ok(Some(cut));
        }
    }
}

/// Takes the follower's lock on a connection of its own, when no other
/// worker holds it: the connection holds it until it is closed.
pub async fn lead(pool: &PgPool) -> sless_store::Result<Option<sqlx::PgConnection>> {
    let mut conn = pool.acquire().await?;
    let taken: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
        .bind(FOLLOWER_LOCK)
        .fetch_one(&mut *conn)
        .await?;
    // Detached, the connection is closed when dropped, and the lock with it.
    Ok(taken.then(|| conn.detach()))
}

/// Follows the output of every function pod into the function logs, on
/// the one worker that holds the lock (see the module docs).
#[derive(Clone)]
pub struct PodLogFollower {
    pool: PgPool,
    client: kube::Client,
    shipper: Shipper,
    /// Changes when the driver deployed into a namespace.
    wake: Option<watch::Receiver<()>>,
}

impl PodLogFollower {
    pub fn new(pool: PgPool, client: kube::Client, shipper: Shipper) -> PodLogFollower {
        PodLogFollower {
            pool,
            client,
            shipper,
            wake: None,
        }
    }

    /// Lists the namespaces to watch again whenever `wake` changes.
    pub fn woken_by(mut self, wake: watch::Receiver<()>) -> PodLogFollower {
        self.wake = Some(wake);
        self
    }

    /// Follows whenever this worker holds the lock, until `shutdown`.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            match lead(&self.pool).await {
                Ok(Some(mut conn)) => {
                    // A follower whose session just ended may not know
                    // yet: it stops within its next check, and what it
                    // read is written before this one asks where to resume.
                    tokio::select! {
                        _ = shutdown.wait_for(|s| *s) => return,
                        () = tokio::time::sleep(HANDOVER) => {}
                    }
                    tracing::info!("this worker follows the function pods' output");
                    let (stop, stopped) = watch::channel(false);
                    let following = tokio::spawn(self.clone().follow_all(stopped));
                    let ended = loop {
                        tokio::select! {
                            _ = shutdown.wait_for(|s| *s) => break true,
                            () = tokio::time::sleep(STANDBY) => {}
                        }
                        if let Err(e) = sqlx::query("select 1").execute(&mut conn).await {
                            tracing::warn!(error = %e, "the pod log follower's session ended; another worker may follow");
                            break false;
                        }
                    };
                    let _ = stop.send(true);
                    let _ = following.await;
                    if ended {
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "trying to follow the function pods' output"),
            }
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return,
                () = tokio::time::sleep(STANDBY) => {}
            }
        }
    }

    /// Watches the function pods of every namespace with a function and
    /// follows each running one, until `stop`.
    async fn follow_all(self, mut stop: watch::Receiver<bool>) {
        let (tx, mut pods) = mpsc::channel::<Pod>(256);
        let seen = move |pod: Pod| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(pod).await;
            }
        };
        let pool = self.pool.clone();
        let namespaces = move || {
            let pool = pool.clone();
            async move { sless_store::readmodel::namespaces_with_functions(&pool).await }
        };
        let selector = format!("{LABEL_COMPONENT}={COMPONENT_FUNCTION}");
        let watching = tokio::spawn(super::watch::each_namespace(
            self.client.clone(),
            selector,
            namespaces,
            seen,
            stop.clone(),
            self.wake.clone(),
        ));
        let mut follows = tokio::task::JoinSet::new();
        let mut keys = HashMap::new();
        let mut active = HashSet::new();
        loop {
            tokio::select! {
                pod = pods.recv() => {
                    let Some(pod) = pod else { break };
                    let Some(target) = Target::of(&pod) else { continue };
                    if running(&pod) && active.insert(target.key()) {
                        let id = follows.spawn(self.clone().follow(target.clone())).id();
                        keys.insert(id, target.key());
                    }
                }
                Some(done) = follows.join_next_with_id() => {
                    let id = match done {
                        Ok((id, ())) => id,
                        Err(e) => e.id(),
                    };
                    if let Some(key) = keys.remove(&id) {
                        active.remove(&key);
                    }
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        follows.shutdown().await;
        let _ = watching.await;
    }

    /// Follows one pod's container while it runs, from after its last kept
    /// line.
    async fn follow(self, target: Target) {
        let api = Api::<Pod>::namespaced(self.client.clone(), &target.namespace);
        let source = target.source();
        loop {
            match self.follow_once(&api, &target, &source).await {
                Ok(()) => {}
                Err(e) => tracing::debug!(pod = %target.key(), "following a pod's output: {e}"),
            }
            // The stream ended: the container stopped, or the connection.
            match api.get_opt(&target.pod).await {
                Ok(Some(pod)) if running(&pod) => {}
                Ok(_) => return,
                Err(e) => tracing::debug!(pod = %target.key(), "looking at a followed pod: {e}"),
            }
            tokio::time::sleep(AGAIN).await;
        }
    }

    /// One follow of the container's output, from after the last line the
    /// store has of it, to the stream's end.
    async fn follow_once(
        &self,
        api: &Api<Pod>,
        target: &Target,
        source: &Source,
    ) -> Result<(), String> {
        let after = function_logs::last_at(
            &self.pool,
            &target.namespace,
            &target.function,
            &target.pod,
            Stream::Stdout,
            target.created - SKEW,
        )
        .await
        .map_err(|e| e.to_string())?;
        let params = LogParams {
            container: Some(CONTAINER.to_owned()),
            follow: true,
            timestamps: true,
            since_time: after.and_then(whole_second),
            ..LogParams::default()
        };
        let reader = api
            .log_stream(&target.pod, &params)
            .await
            .map_err(|e| e.to_string())?;
        let mut reader = std::pin::pin!(reader);
        let mut buf = Vec::new();
        // Room for the time in front of a line of the most kept bytes.
        let cap = LINE_LIMIT + 64;
        while let Some(cut) = read_line(&mut reader, &mut buf, cap)
            .await
            .map_err(|e| e.to_string())?
        {
            let raw = String::from_utf8_lossy(&buf);
            let (at, text) = split_time(&raw);
            if after.is_some_and(|last| at <= last) {
                continue;
            }
            let mut line = source.line(Stream::Stdout, text, cut);
            line.at = at;
            self.shipper.push(line);
        }
        Ok(())
    }
}

/// `at` in whole seconds, rounded down: `sinceTime` has no fraction, and
/// a rounded-up one would skip what came after `at` within its second.
fn whole_second(at: DateTime<Utc>) -> Option<k8s_openapi::jiff::Timestamp> {
    k8s_openapi::jiff::Timestamp::from_second(at.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use futures_util::io::Cursor;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_line_is_its_time_to_the_microsecond_and_its_text() {
        let (at, text) = split_time("2026-12-07T15:35:52.123456789Z \u{1e}id\u{1f}hello world\n");
        assert_eq!(at.to_rfc3339(), "2026-12-07T15:35:52.123456+00:00");
        assert_eq!(text, "\u{1e}id\u{1f}hello world\n");
        let (_, text) = split_time("no time here");
        assert_eq!(text, "no time here");
    }

    #[test]
    fn since_time_rounds_down_to_its_second() {
        let at = DateTime::parse_from_rfc3339("2026-12-07T15:35:52.9Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            whole_second(at).unwrap().to_string(),
            "2026-12-07T15:35:52Z"
        );
    }

    #[tokio::test]
    async fn lines_are_read_whole_or_cut_at_the_cap() {
        let text = b"short\nexactly8\nmuch longer than eight\nlast".to_vec();
        let mut reader = Cursor::new(text);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(cut) = read_line(&mut reader, &mut buf, 9).await.unwrap() {
            got.push((String::from_utf8(buf.clone()).unwrap(), cut));
        }
        let want = [
            ("short\n", false),
            ("exactly8\n", false),
            ("much long", true),
            ("last", false),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|(t, c)| (t.to_string(), *c)).collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn one_worker_at_a_time_follows_and_another_takes_over_when_its_session_ends() {
        let db = sless_testkit::TestDb::new().await;
        let first = lead(&db.pool).await.unwrap().expect("the first leads");
        assert!(lead(&db.pool).await.unwrap().is_none(), "a second one too");
        assert!(lead(&db.pool).await.unwrap().is_none(), "a third one too");
        drop(first);
        let next =
            sless_testkit::eventually("another to take over", Duration::from_secs(10), || async {
                lead(&db.pool).await.unwrap()
            })
            .await;
        assert!(lead(&db.pool).await.unwrap().is_none(), "{next:?}");
    }

    #[test]
    fn a_function_pod_is_a_target_and_runs_when_its_container_does() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "demo-5c9f-abcde",
                "namespace": "sless-0123456789abcdef",
                "creationTimestamp": "2026-12-07T15:00:00Z",
                "labels": {
                    LABEL_COMPONENT: COMPONENT_FUNCTION,
                    LABEL_FUNCTION: "demo",
                    LABEL_VERSION: "3",
                },
            },
            "status": {"containerStatuses": [{
                "name": CONTAINER, "image": "x", "imageID": "", "ready": true,
                "restartCount": 0, "state": {"running": {}},
            }]},
        }))
        .unwrap();
        let t = Target::of(&pod).unwrap();
        assert_eq!(
            (t.function.as_str(), t.version, t.pod.as_str()),
            ("demo", Some(3), "demo-5c9f-abcde")
        );
        assert!(running(&pod));
        let mut build = pod.clone();
        build
            .labels_mut()
            .insert(LABEL_COMPONENT.into(), "build".into());
        assert_eq!(Target::of(&build), None);
        let mut waiting = pod;
        waiting
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(serde_json::from_value(json!({"waiting": {}})).unwrap());
        assert!(!running(&waiting));
    }
}
