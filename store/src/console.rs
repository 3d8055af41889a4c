//! The web console's sessions, sign-in forms and one-time sign-in codes
//! (`console_sessions`, `console_sign_in_forms`, `console_codes`). Only
//! hashes of the secrets are kept: a session id, a browser id, a form
//! token or a code read from the database cannot be used.
//!
//! A session started by the console is bound to the browser it was started
//! in (`create_bound_session`): it is taken only with that browser's id
//! beside its own (`session`). One made by [`create_session`] is bound to
//! none and taken with its id alone: for tools that hold the database (a
//! benchmark), never for a sign-in.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::{PgExecutor, Row};

use crate::Result;

/// Whom a session or a code acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub sub: String,
    pub namespace: String,
    pub admin: bool,
}

/// A live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: Principal,
    /// The token every form of the session carries.
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Records a session whose cookie holds `id`, bound to no browser.
pub async fn create_session<'e>(
    exec: impl PgExecutor<'e>,
    id: &str,
    session: &Session,
) -> Result<()> {
    insert_session(exec, id, None, session).await
}

/// Records a session whose cookie holds `id`, started in the browser whose
/// cookie holds `browser`.
pub async fn create_bound_session<'e>(
    exec: impl PgExecutor<'e>,
    id: &str,
    browser: &str,
    session: &Session,
) -> Result<()> {
    insert_session(exec, id, Some(hash(browser)), session).await
}

async fn insert_session<'e>(
    exec: impl PgExecutor<'e>,
    id: &str,
    browser_hash: Option<Vec<u8>>,
    session: &Session,
) -> Result<()> {
    sqlx::query(
        "insert into console_sessions (id_hash, browser_hash, sub, namespace, admin, csrf, expires_at)
         values ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(hash(id))
    .bind(browser_hash)
    .bind(&session.principal.sub)
    .bind(&session.principal.namespace)
    .bind(session.principal.admin)
    .bind(&session.csrf)
    .bind(session.expires_at)
    .execute(exec)
    .await?;
    Ok(())
}

/// The session of `id`, unless it has ended or was started in another
/// browser than the one whose cookie holds `browser` (`None`: the request
/// carried no browser id).
pub async fn session<'e>(
    exec: impl PgExecutor<'e>,
    id: &str,
    browser: Option<&str>,
) -> Result<Option<Session>> {
    let row = sqlx::query(
        "select sub, namespace, admin, csrf, expires_at from console_sessions
         where id_hash = $1 and expires_at > now()
           and (browser_hash is null or browser_hash = $2)",
    )
    .bind(hash(id))
    .bind(browser.map(hash))
    .fetch_optional(exec)
    .await?;
    Ok(row.map(|r| Session {
        principal: Principal {
            sub: r.get("sub"),
            namespace: r.get("namespace"),
            admin: r.get("admin"),
        },
        csrf: r.get("csrf"),
        expires_at: r.get("expires_at"),
    }))
}

/// Ends the session of `id` (and any that have ended on their own).
pub async fn end_session<'e>(exec: impl PgExecutor<'e>, id: &str) -> Result<()> {
    sqlx::query("delete from console_sessions where id_hash = $1 or expires_at < now()")
        .bind(hash(id))
        .execute(exec)
        .await?;
    Ok(())
}

/// Records the token of a sign-in form given to the browser whose cookie
/// holds `browser`, until `expires_at` (and forgets the forms that ended).
pub async fn create_sign_in_form(
    pool: &sqlx::PgPool,
    browser: &str,
    token: &str,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query("delete from console_sign_in_forms where expires_at < now()")
        .execute(pool)
        .await?;
    sqlx::query(
        "insert into console_sign_in_forms (browser_hash, token_hash, expires_at)
         values ($1, $2, $3)",
    )
    .bind(hash(browser))
    .bind(hash(token))
    .bind(expires_at)
    .execute(pool)
    .await?;
    Ok(())
}

/// Takes a sign-in form's token: true, once, when it was given to the
/// browser whose cookie holds `browser` and has not ended.
pub async fn take_sign_in_form<'e>(
    exec: impl PgExecutor<'e>,
    browser: &str,
    token: &str,
) -> Result<bool> {
    let row = sqlx::query(
        "delete from console_sign_in_forms where browser_hash = $1 and token_hash = $2
         returning expires_at > now() as live",
    )
    .bind(hash(browser))
    .bind(hash(token))
    .fetch_optional(exec)
    .await?;
    Ok(row.is_some_and(|r| r.get::<bool, _>("live")))
}

/// Records a one-time code that signs in as `principal` until `expires_at`.
pub async fn create_code<'e>(
    exec: impl PgExecutor<'e>,
    code: &str,
    principal: &Principal,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "insert into console_codes (code_hash, sub, namespace, admin, expires_at)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(hash(code))
    .bind(&principal.sub)
    .bind(&principal.namespace)
    .bind(principal.admin)
    .bind(expires_at)
    .execute(exec)
    .await?;
    Ok(())
}

/// Takes the code: whom it signs in as, once; `None` when it is unknown,
/// used or has ended.
pub async fn take_code<'e>(
    exec: impl PgExecutor<'e>,
    code: &str,
) -> Result<Option<(Principal, DateTime<Utc>)>> {
    let row = sqlx::query(
        "delete from console_codes where code_hash = $1
         returning sub, namespace, admin, expires_at",
    )
    .bind(hash(code))
    .fetch_optional(exec)
    .await?;
    Ok(row.and_then(|r| {
        let expires_at: DateTime<Utc> = r.get("expires_at");
        (expires_at > Utc::now()).then(|| {
            (
                Principal {
                    sub: r.get("sub"),
                    namespace: r.get("namespace"),
                    admin: r.get("admin"),
                },
                expires_at,
            )
        })
    }))
}
