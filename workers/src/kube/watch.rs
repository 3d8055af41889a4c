//! Watching what sless made in every tenant namespace that may hold it:
//! the worker's ServiceAccount may read tenant namespaces one by one (no
//! cluster-wide list), so a watch runs per namespace, for each namespace a
//! query of the log's read models names.

use std::collections::HashSet;
use std::fmt::Debug;
use std::time::Duration;

use futures_util::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// How often the set of namespaces to watch is looked at again.
const NAMESPACES_EVERY: Duration = Duration::from_secs(30);

/// Hands every object of kind `K` labelled `selector` (as listed when its
/// watch starts, then each change) to `seen`, in each namespace
/// `namespaces` names, until `shutdown`. The namespaces are listed again
/// every 30 s, and at once when `wake` changes (the driver deployed into a
/// namespace, say).
pub(super) async fn each_namespace<K, N, NF, S, SF>(
    client: kube::Client,
    selector: String,
    mut namespaces: N,
    seen: S,
    mut shutdown: watch::Receiver<bool>,
    mut wake: Option<watch::Receiver<()>>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + 'static,
    N: FnMut() -> NF,
    NF: Future<Output = sless_store::Result<Vec<String>>>,
    S: Fn(K) -> SF + Clone + Send + Sync + 'static,
    SF: Future<Output = ()> + Send,
{
    let mut watched: HashSet<String> = HashSet::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        match namespaces().await {
            Ok(all) => {
                for ns in all {
                    if watched.insert(ns.clone()) {
                        let api = Api::<K>::namespaced(client.clone(), &ns);
                        let config = watcher::Config::default().labels(&selector);
                        let seen = seen.clone();
                        tasks.spawn(async move {
                            let stream = watcher(api, config).default_backoff().applied_objects();
                            let mut stream = std::pin::pin!(stream);
                            while let Some(next) = stream.next().await {
                                match next {
                                    Ok(object) => seen(object).await,
                                    Err(e) => tracing::debug!(%ns, "a watch was interrupted: {e}"),
                                }
                            }
                        });
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing the namespaces to watch"),
        }
        let woken = async {
            let changed = match wake.as_mut() {
                Some(w) => w.changed().await.is_ok(),
                None => false,
            };
            if !changed {
                // Nobody left to wake it.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = tokio::time::sleep(NAMESPACES_EVERY) => {}
            () = woken => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    tasks.abort_all();
}
