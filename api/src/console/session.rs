//! Signing in and out of the console, and the session every page reads.
//!
//! A browser signs in by pasting a token (checked as the API checks a
//! bearer token) or by following a one-time link (`sless dev` prints one:
//! its code, never a token, is in the URL). It gets a session id: 256
//! random bits in an `HttpOnly`, `SameSite=Strict` cookie scoped to
//! `/console` (`Secure` unless the console is reached on loopback), of
//! which the database keeps only the sha256, with whom the session acts as,
//! its form token and its end (the token's own expiry, at most
//! [`SESSION_HOURS`]). Signing out deletes it. Every form that changes
//! state carries the session's form token and is refused without it; the
//! sign-in form carries one of its own, from a cookie set with the form.

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use maud::html;
use rand::RngCore;
use serde::Deserialize;
use sless_store::console::{self as store, Principal};

use super::page::{self, Page};
use crate::AppState;
use crate::auth::Caller;

/// The session cookie.
pub const COOKIE: &str = "sless_session";
/// The sign-in form's own cookie (its form token).
const SIGN_IN_COOKIE: &str = "sless_sign_in";
/// The longest a session lasts.
pub const SESSION_HOURS: i64 = 12;

/// A signed-in browser: whom it acts as, and its form token.
#[derive(Debug, Clone)]
pub struct Session {
    pub caller: Caller,
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

/// A page for browsers that are not signed in: the sign-in page.
pub struct SignInFirst;

impl IntoResponse for SignInFirst {
    fn into_response(self) -> Response {
        Redirect::to("/console/sign-in").into_response()
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Session, Response> {
        let Some(id) = cookie(&parts.headers, COOKIE) else {
            return Err(SignInFirst.into_response());
        };
        let found = store::session(&state.pool, &id)
            .await
            .map_err(|e| page::failure(crate::error::ApiError::from(e)))?;
        let Some(s) = found else {
            return Err(SignInFirst.into_response());
        };
        let namespace = sless_domain::Namespace::parse(&s.principal.namespace)
            .map_err(|_| SignInFirst.into_response())?;
        Ok(Session {
            caller: Caller {
                sub: s.principal.sub,
                namespace,
                admin: s.principal.admin,
            },
            csrf: s.csrf,
            expires_at: s.expires_at,
        })
    }
}

impl Session {
    /// Refuses a form whose token is not this session's (403).
    pub fn check(&self, csrf: &str) -> Result<(), Response> {
        if constant_time_eq(csrf.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(page::refused(
                StatusCode::FORBIDDEN,
                "This form is out of date",
                "The form did not carry this session's token. Reload the page and try again.",
            ))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 256 random bits, base64url.
fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// True when the request came to a loopback name (no TLS there).
fn on_loopback(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.starts_with("127.")
}

fn set_cookie(headers: &HeaderMap, name: &str, value: &str, max_age: i64) -> HeaderValue {
    let secure = if on_loopback(headers) { "" } else { "; Secure" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/console; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("a cookie of base64url and fixed text")
}

#[derive(Deserialize)]
pub struct SignInQuery {
    code: Option<String>,
}

/// `GET /console/sign-in`: the form, or (with `?code=`) signing in with a
/// one-time code.
pub async fn sign_in_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SignInQuery>,
) -> Response {
    if let Some(code) = q.code {
        return match store::take_code(&state.pool, &code).await {
            Ok(Some((principal, until))) => start(&state, &headers, principal, until).await,
            Ok(None) => page::refused(
                StatusCode::UNAUTHORIZED,
                "This sign-in link does not work",
                "It was used already, or it has expired. Sign in with a token instead.",
            ),
            Err(e) => page::failure(e.into()),
        };
    }
    let form_token = random_secret();
    let mut res = sign_in_form(&form_token, None).into_response();
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(&headers, SIGN_IN_COOKIE, &form_token, 3600),
    );
    res
}

fn sign_in_form(form_token: &str, error: Option<&str>) -> Page {
    Page::bare(
        "Sign in",
        html! {
            h1 { "Sign in to sless" }
            @if let Some(error) = error {
                p.error role="alert" { (error) }
            }
            form method="post" action="/console/sign-in" {
                input type="hidden" name="csrf" value=(form_token);
                label for="token" { "Token" }
                textarea id="token" name="token" rows="4" cols="70" required
                    autocomplete="off" spellcheck="false" {}
                p.hint { "A bearer token of this instance: " code { "sless dev" } " prints one, and " code { "sless token" } " makes one." }
                button type="submit" { "Sign in" }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct SignInForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/sign-in`: a token pasted in the form.
pub async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Response {
    let expected = cookie(&headers, SIGN_IN_COOKIE).unwrap_or_default();
    if expected.is_empty() || !constant_time_eq(expected.as_bytes(), form.csrf.as_bytes()) {
        return page::refused(
            StatusCode::FORBIDDEN,
            "This form is out of date",
            "Open the sign-in page again and paste the token there.",
        );
    }
    let token = form.token.trim();
    let caller = match state.auth.verify(token) {
        Ok(c) => c,
        Err(e) => {
            let mut res = sign_in_form(&expected, Some(&e.detail)).into_response();
            *res.status_mut() = StatusCode::UNAUTHORIZED;
            return res;
        }
    };
    if let Some(only) = &state.only_namespace
        && caller.namespace != *only
    {
        let mut res = sign_in_form(
            &expected,
            Some("This instance runs functions without a sandbox and accepts its own user's tokens only."),
        )
        .into_response();
        *res.status_mut() = StatusCode::FORBIDDEN;
        return res;
    }
    let until = token_expiry(token).unwrap_or_else(|| Utc::now() + Duration::hours(SESSION_HOURS));
    let principal = Principal {
        sub: caller.sub,
        namespace: caller.namespace.to_string(),
        admin: caller.admin,
    };
    start(&state, &headers, principal, until).await
}

/// The `exp` of a token that was verified already.
fn token_expiry(token: &str) -> Option<DateTime<Utc>> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    DateTime::from_timestamp(claims.get("exp")?.as_i64()?, 0)
}

/// Starts a session as `principal`, ending at `until` (or sooner), and
/// sends the browser to its namespace.
async fn start(
    state: &AppState,
    headers: &HeaderMap,
    principal: Principal,
    until: DateTime<Utc>,
) -> Response {
    let expires_at = until.min(Utc::now() + Duration::hours(SESSION_HOURS));
    let id = random_secret();
    let session = store::Session {
        principal: principal.clone(),
        csrf: random_secret(),
        expires_at,
    };
    if let Err(e) = store::create_session(&state.pool, &id, &session).await {
        return page::failure(e.into());
    }
    let max_age = (expires_at - Utc::now()).num_seconds().max(0);
    let mut res = Redirect::to(&format!("/console/ns/{}", principal.namespace)).into_response();
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(headers, COOKIE, &id, max_age),
    );
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(headers, SIGN_IN_COOKIE, "", 0),
    );
    res
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /console/sign-out`.
pub async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    session: Session,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if let Err(refused) = session.check(&form.csrf) {
        return refused;
    }
    let id = cookie(&headers, COOKIE).unwrap_or_default();
    if let Err(e) = store::end_session(&state.pool, &id).await {
        return page::failure(e.into());
    }
    let mut res = Redirect::to("/console/sign-in").into_response();
    res.headers_mut()
        .append(header::SET_COOKIE, set_cookie(&headers, COOKIE, "", 0));
    res
}

/// A one-time sign-in code for `caller`, valid for `valid_for`, for a link
/// (`/console/sign-in?code=...`).
pub async fn issue_code(
    pool: &sless_store::PgPool,
    caller: &Caller,
    valid_for: std::time::Duration,
) -> sless_store::Result<String> {
    let code = random_secret();
    let principal = Principal {
        sub: caller.sub.clone(),
        namespace: caller.namespace.to_string(),
        admin: caller.admin,
    };
    let until = Utc::now() + Duration::from_std(valid_for).unwrap_or(Duration::hours(1));
    store::create_code(pool, &code, &principal, until).await?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_told_from_a_public_name() {
        let with_host = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, HeaderValue::from_str(h).unwrap());
            m
        };
        for h in ["127.0.0.1:8080", "localhost", "[::1]:80", "127.1.2.3"] {
            assert!(on_loopback(&with_host(h)), "{h}");
        }
        for h in [
            "sless.example.com",
            "localhost.example.com:8080",
            "10.0.0.1",
        ] {
            assert!(!on_loopback(&with_host(h)), "{h}");
        }
        assert!(!on_loopback(&HeaderMap::new()));
    }

    #[test]
    fn cookies_are_read_by_name() {
        let mut m = HeaderMap::new();
        m.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; sless_session=xyz; b=2"),
        );
        assert_eq!(cookie(&m, COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&m, "c"), None);
    }
}
