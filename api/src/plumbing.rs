//! What the REST API, the invoke proxy and the console share: tokens
//! (`auth`), the one path of a command (`command`), per-namespace quotas
//! (`quota`), problem documents (`error`, which imports nothing above it),
//! JSON bodies and answers (`json`), path parameters (`path`), paged lists
//! (`paging`), request ids (`request_id`) and the invocation recorder
//! (`recorder`), each request's deadline (`deadlines`), shedding requests
//! while the database is unavailable (`breaker`), reading what one has
//! just written (`catch_up`), counting requests and `/metrics`
//! (`metrics`), serving over TCP (`serve`), the LISTEN a process's live
//! tails share (`watch`), and the faults a test may ask for (`faults`).

pub mod auth;
pub(crate) mod breaker;
pub(crate) mod catch_up;
pub mod command;
pub(crate) mod deadlines;
pub mod error;
pub mod faults;
pub mod json;
pub mod metrics;
pub mod paging;
pub mod path;
pub mod quota;
pub mod recorder;
pub mod request_id;
pub mod serve;
pub mod watch;
