//! The Kubernetes driver: functions are built by kaniko Jobs, run as
//! Deployments behind Services, fired by CronJobs and run once as Jobs, all
//! in the tenant's own namespace, hardened for untrusted code.
//!
//! `render` turns requests into Kubernetes objects (pure, unit-tested);
//! the driver applies them and watches what the cluster makes of them.

pub mod render;
pub mod settings;

pub use settings::KubeSettings;
