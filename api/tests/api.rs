//! Integration tests of the HTTP surface: the router driven in process with
//! `oneshot`, over a real PostgreSQL and a real S3 server.

mod api {
    pub mod support;

    mod archives;
    mod auth;
    mod bad_input;
    mod concurrency;
    mod functions;
    mod health;
    mod idempotency;
    mod proxy;
    mod tenancy;
    mod upload;
}
