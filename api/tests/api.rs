//! Integration tests of the HTTP surface: the router driven in process with
//! `oneshot`, over a real PostgreSQL and a real S3 server.

mod api {
    pub mod requests;
    pub mod support;

    mod archives;
    mod auth;
    mod bad_input;
    mod bad_input_routes;
    mod build_logs;
    mod concurrency;
    mod conditional;
    mod console;
    mod console_pages;
    mod delete;
    mod edge;
    mod events;
    mod events_plan;
    mod events_tail;
    mod function_logs;
    mod functions;
    mod health;
    mod idempotency;
    mod invocations;
    mod jobs;
    mod metrics;
    mod namespaces;
    mod openapi;
    mod origins;
    mod paging;
    mod proxy;
    mod quotas;
    mod routes;
    mod serving;
    mod source;
    mod spread;
    mod sse;
    mod tenancy;
    mod triggers;
    mod update;
    mod upload;
}
