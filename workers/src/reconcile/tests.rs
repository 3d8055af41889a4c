//! How much of a worker thread's stack a step of the reconciler takes.

use sless_domain::{Function, FunctionKey};
use sless_store::queue::WorkItem;

use super::{Action, Reconciler};
use crate::kube::KubeDriver;
use crate::local::LocalDriver;

type Step<'a, D, T> = (
    &'a Reconciler<D>,
    &'a WorkItem,
    &'a FunctionKey,
    &'a Function,
    T,
);

/// The size of the future a step of the reconciler returns.
fn size<D: 'static, T, Fut>(_: impl Fn(Step<'static, D, T>) -> Fut) -> usize {
    std::mem::size_of::<Fut>()
}

/// What a worker thread's stack holds while a reconcile waits on a
/// driver: each layer that held a driver's future by value would take
/// its size again (the Kubernetes driver's deploy, which watches its
/// rollout, overflowed the stack of the worker's threads that way), so
/// the driver's futures are boxed where they are made and a step of the
/// reconciler stays small.
#[test]
fn a_reconcile_step_holds_no_driver_future_by_value() {
    let sizes = [
        (
            "kube: act",
            size(|(r, i, k, f, a): Step<'static, KubeDriver, Action>| r.act(i, k, f, a)),
        ),
        (
            "kube: build and deploy",
            size(|(r, i, k, f, v): Step<'static, KubeDriver, u32>| r.build_and_deploy(i, k, f, v)),
        ),
        (
            "local: act",
            size(|(r, i, k, f, a): Step<'static, LocalDriver, Action>| r.act(i, k, f, a)),
        ),
        (
            "local: build and deploy",
            size(|(r, i, k, f, v): Step<'static, LocalDriver, u32>| r.build_and_deploy(i, k, f, v)),
        ),
    ];
    // About 11 KiB each today; the kube driver's deploy future held by
    // value makes its steps about 93 KiB.
    const MOST: usize = 32 * 1024;
    for (what, bytes) in sizes {
        assert!(
            bytes <= MOST,
            "{what}: its future is {bytes} bytes, more than {MOST}: box the driver's futures where they are made"
        );
    }
}
