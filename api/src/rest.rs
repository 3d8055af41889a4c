//! The REST API under `/v1` on the API's origin: its routes, one module a
//! noun (`functions`, `upload`, `versions`, `source`, `build_log`,
//! `triggers`, `jobs`, `namespaces`, `invocations`, what functions print
//! (`logs`), `events`, `admin`),
//! one function as the routes name, load and show it (`function`, which
//! imports none of the routes), pages of the functions list kept while the
//! read models stand still (`page_cache`), the health endpoints (`health`),
//! what answers when no route does (`fallback`), and the OpenAPI document
//! (`openapi`).

pub mod admin;
pub mod build_log;
pub mod events;
pub(crate) mod fallback;
pub mod function;
pub mod functions;
pub mod health;
pub mod invocations;
pub mod jobs;
pub mod logs;
pub mod namespaces;
pub mod openapi;
pub mod page_cache;
pub mod source;
pub mod triggers;
pub mod upload;
pub mod versions;
