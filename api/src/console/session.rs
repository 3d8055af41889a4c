//! Signing in and out of the console, and the session every page reads.
//!
//! A browser signs in by pasting a token (checked as the API checks a
//! bearer token) or by following a one-time link (`sless dev` prints one:
//! its code, never a token, is in the URL). Two cookies, which together keep
//! a page of another origin from making this browser's session:
//!
//! - `__Http-sless_browser`: a random id of the browser, set by the first
//!   sign-in page it opens (`Secure`, `HttpOnly`, `SameSite=Strict`,
//!   `Path=/console`). The `__Http-` prefix makes the browser refuse it
//!   from a page's script (`document.cookie`): only an answer's
//!   `Set-Cookie` can set it, and the functions' answers cannot (the
//!   proxy holds their cookies to `/fn/{ns}/{name}`). The sign-in form's
//!   token is recorded for this id (`console_sign_in_forms`), once; a
//!   session is recorded with it and taken only beside it.
//! - `__Host-sless_session`: the session id, 256 random bits (`Secure`,
//!   `HttpOnly`, `SameSite=Strict`, `Path=/`, no `Domain`): no other host
//!   can set it, no path can shadow it. The proxy never hands it to a
//!   function. A script of the same host on another port can write it
//!   (cookies do not tell ports apart: a `sless dev` instance serves the
//!   functions on `127.0.0.1:8081`), which is why it is taken only beside
//!   the browser id it was started with.
//!
//! The database keeps only sha256es, with whom the session acts as, its
//! form token and its end (the token's own expiry, at most
//! [`SESSION_HOURS`]). Signing out deletes it. A request that carries
//! either cookie twice (one set for another path, say) is refused: which
//! one the browser meant cannot be told. Every form that changes state
//! carries the session's form token, and every `POST` must come from the
//! console's own origin ([`same_origin`]): a page on the functions' origin
//! (the same host as the console on a `sless dev` instance: cookies do
//! not tell ports apart) can post a form, but not as the console.

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use maud::{Markup, html};
use rand::RngCore;
use serde::Deserialize;
use sless_store::console::{self as store, Principal};

use super::page::{self, Page, document};
use super::text::Text;
use crate::AppState;
use crate::plumbing::auth::Caller;

/// The session cookie.
pub const COOKIE: &str = "__Host-sless_session";
/// The browser's id: what the sign-in form and the session are bound to.
pub const BROWSER_COOKIE: &str = "__Http-sless_browser";
/// The longest a session lasts.
pub const SESSION_HOURS: i64 = 12;
/// How long a sign-in form can be sent.
const FORM_SECONDS: i64 = 3600;
/// How long a browser keeps its id.
const BROWSER_DAYS: i64 = 180;

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

/// A request that carries one of the console's cookies more than once.
#[derive(Debug, PartialEq, Eq)]
pub struct TwoCookies(&'static str);

impl IntoResponse for TwoCookies {
    fn into_response(self) -> Response {
        page::refused(
            StatusCode::BAD_REQUEST,
            "Two sign-in cookies",
            &format!(
                "This browser sent the cookie {} twice, so the console cannot tell which one is \
                 its own. Clear this site's cookies in the browser, then sign in again.",
                self.0
            ),
        )
    }
}

/// The value of the cookie `name`; refused when the request carries it
/// more than once (in any case of its name).
pub fn cookie(headers: &HeaderMap, name: &'static str) -> Result<Option<String>, TwoCookies> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_owned());
    let first = found.next();
    match found.next() {
        Some(_) => Err(TwoCookies(name)),
        None => Ok(first.filter(|v| !v.is_empty())),
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Session, Response> {
        let id = cookie(&parts.headers, COOKIE).map_err(IntoResponse::into_response)?;
        let browser =
            cookie(&parts.headers, BROWSER_COOKIE).map_err(IntoResponse::into_response)?;
        let Some(id) = id else {
            return Err(SignInFirst.into_response());
        };
        let found = store::session(&state.pool, &id, browser.as_deref())
            .await
            .map_err(|e| page::failure(crate::plumbing::error::ApiError::from(e)))?;
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

/// Whether a `Host` names this machine's loopback exactly: `localhost`
/// (in any case), `127.0.0.1` or `[::1]`, each with an optional port.
/// `127.evil.example`, `localhost.example.com` and `127.1` do not.
pub fn on_loopback(host: &str) -> bool {
    ["localhost", "127.0.0.1", "[::1]"].iter().any(|name| {
        let Some(head) = host.get(..name.len()) else {
            return false;
        };
        let port = &host[name.len()..];
        head.eq_ignore_ascii_case(name)
            && (port.is_empty()
                || port.strip_prefix(':').is_some_and(|p| {
                    (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit())
                }))
    })
}

/// Whether a request that changes something comes from the console's own
/// origin. A browser says where a request comes from: `Sec-Fetch-Site`
/// (then it must be `same-origin`), or else `Origin` (then it must be
/// `https://` and the request's `Host`, or `http://` and the `Host` when
/// that is loopback, [`on_loopback`]). A request with neither comes from
/// no browser's page, and is let through to the form token's check.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        return site == "same-origin";
    }
    let Some(origin) = text(header::ORIGIN) else {
        return true;
    };
    let host = text(header::HOST).unwrap_or_default();
    if host.is_empty() {
        return false;
    }
    let origin = origin.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    origin == format!("https://{host}")
        || (on_loopback(&host) && origin == format!("http://{host}"))
}

/// Refuses (403) a console request that changes something and does not
/// come from the console's own origin ([`same_origin`]).
pub async fn forms_from_this_origin(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let safe = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if safe || same_origin(req.headers()) {
        return next.run(req).await;
    }
    page::refused(
        StatusCode::FORBIDDEN,
        "Not sent from the console",
        "This form was sent from another site or origin than the console's. Open the console and use its own form.",
    )
}

/// A `Set-Cookie` of one of the console's two cookies: each with the
/// attributes its prefix demands.
fn set_cookie(name: &'static str, value: &str, max_age: i64) -> HeaderValue {
    let path = if name == BROWSER_COOKIE {
        "/console"
    } else {
        "/"
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; Secure; HttpOnly; SameSite=Strict"
    ))
    .expect("a cookie of base64url and fixed text")
}

/// The browser's id, and whether it is new (to be set with the answer).
fn browser_of(headers: &HeaderMap) -> Result<(String, bool), TwoCookies> {
    Ok(match cookie(headers, BROWSER_COOKIE)? {
        Some(id) => (id, false),
        None => (random_secret(), true),
    })
}

fn with_browser(mut res: Response, browser: &str, new: bool) -> Response {
    if new {
        res.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(BROWSER_COOKIE, browser, BROWSER_DAYS * 86_400),
        );
    }
    res
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
    let (browser, new) = match browser_of(&headers) {
        Ok(b) => b,
        Err(two) => return two.into_response(),
    };
    if let Some(code) = q.code {
        // A link opened by another site's page (the functions' origin
        // among them) would sign this browser in as whoever made it.
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if !matches!(site, None | Some("none" | "same-origin")) {
            return page::refused(
                StatusCode::FORBIDDEN,
                "Open this link yourself",
                "A sign-in link works when it is pasted into the address bar, not when another page opens it.",
            );
        }
        return match store::take_code(&state.pool, &code).await {
            Ok(Some((principal, until))) => {
                let res = start(&state, &browser, principal, until).await;
                with_browser(res, &browser, new)
            }
            Ok(None) => page::refused(
                StatusCode::UNAUTHORIZED,
                "This sign-in link does not work",
                "It was used already, or it has expired. Sign in with a token instead.",
            ),
            Err(e) => page::failure(e.into()),
        };
    }
    let res = match form_for(&state, &browser, None).await {
        Ok(page) => page.into_response(),
        Err(e) => page::failure(e.into()),
    };
    with_browser(res, &browser, new)
}

/// A sign-in form whose token is recorded for `browser`.
async fn form_for(
    state: &AppState,
    browser: &str,
    error: Option<&str>,
) -> sless_store::Result<Page> {
    let token = random_secret();
    let until = Utc::now() + Duration::seconds(FORM_SECONDS);
    store::create_sign_in_form(&state.pool, browser, &token, until).await?;
    Ok(sign_in_form(&token, error))
}

fn sign_in_form(form_token: &str, error: Option<&str>) -> Page {
    Page::bare(
        "Sign in",
        html! {
            h1 { "Sign in to sless" }
            @if let Some(error) = error {
                p.error role="alert" { (super::text::Text(error)) }
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
    let browser = match cookie(&headers, BROWSER_COOKIE) {
        Ok(b) => b,
        Err(two) => return two.into_response(),
    };
    let taken = match &browser {
        Some(b) if !form.csrf.is_empty() => {
            store::take_sign_in_form(&state.pool, b, &form.csrf).await
        }
        _ => Ok(false),
    };
    let browser = match (taken, browser) {
        (Ok(true), Some(b)) => b,
        (Err(e), _) => return page::failure(e.into()),
        _ => {
            return page::refused(
                StatusCode::FORBIDDEN,
                "This form is out of date",
                "Open the sign-in page again and paste the token there.",
            );
        }
    };
    // Refused: the form again, with a token of its own.
    let again = |status: StatusCode, error: String| {
        let state = state.clone();
        let browser = browser.clone();
        async move {
            match form_for(&state, &browser, Some(&error)).await {
                Ok(mut page) => {
                    page.status = status;
                    page.into_response()
                }
                Err(e) => page::failure(e.into()),
            }
        }
    };
    let token = form.token.trim();
    let caller = match state.auth.verify(token) {
        Ok(c) => c,
        Err(e) => return again(StatusCode::UNAUTHORIZED, e.detail.clone()).await,
    };
    if let Some(only) = &state.only_namespace
        && caller.namespace != *only
    {
        return again(
            StatusCode::FORBIDDEN,
            "This instance runs functions without a sandbox and accepts its own user's tokens only."
                .to_owned(),
        )
        .await;
    }
    let until = token_expiry(token).unwrap_or_else(|| Utc::now() + Duration::hours(SESSION_HOURS));
    let principal = Principal {
        sub: caller.sub,
        namespace: caller.namespace.to_string(),
        admin: caller.admin,
    };
    start(&state, &browser, principal, until).await
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

/// Starts a session as `principal` in `browser`, ending at `until` (or
/// sooner), and sends the browser to its namespace.
async fn start(
    state: &AppState,
    browser: &str,
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
    if let Err(e) = store::create_bound_session(&state.pool, &id, browser, &session).await {
        return page::failure(e.into());
    }
    let max_age = (expires_at - Utc::now()).num_seconds().max(0);
    let mut res = Redirect::to(&format!("/console/ns/{}", principal.namespace)).into_response();
    res.headers_mut()
        .append(header::SET_COOKIE, set_cookie(COOKIE, &id, max_age));
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
    let id = match cookie(&headers, COOKIE) {
        Ok(id) => id.unwrap_or_default(),
        Err(two) => return two.into_response(),
    };
    if let Err(e) = store::end_session(&state.pool, &id).await {
        return page::failure(e.into());
    }
    let mut res = Redirect::to("/console/sign-in").into_response();
    res.headers_mut()
        .append(header::SET_COOKIE, set_cookie(COOKIE, "", 0));
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

/// The pages of a signed-in session.
impl Page {
    /// A page of namespace `ns`, with the navigation and the sign-out form.
    pub fn of(session: &Session, ns: &str, title: &str, body: Markup) -> Page {
        let nav = html! {
            header {
                nav {
                    a.brand href={ "/console/ns/" (ns) } { "sless" }
                    a href={ "/console/ns/" (ns) } { "Functions" }
                    a href={ "/console/ns/" (ns) "/events" } { "Audit log" }
                    span.who { (Text(&session.caller.sub)) " · " code { (Text(ns)) } }
                    @if session.caller.admin {
                        form.switch method="get" action="/console/switch" {
                            label for="switch-ns" { "Namespace" }
                            input id="switch-ns" name="ns" value=(ns) size="24";
                            button type="submit" { "Open" }
                        }
                    }
                    form.sign-out method="post" action="/console/sign-out" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
            }
        };
        Page {
            status: StatusCode::OK,
            markup: document(title, html! { (nav) main { (body) } }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_str(v).unwrap());
        }
        m
    }

    #[test]
    fn cookies_are_read_by_name_and_refused_when_sent_twice() {
        let one = with(&[("cookie", "a=1; __Host-sless_session=xyz; b=2")]);
        assert_eq!(cookie(&one, COOKIE), Ok(Some("xyz".to_owned())));
        assert_eq!(cookie(&one, BROWSER_COOKIE), Ok(None));
        for twice in [
            &[("cookie", "__Host-sless_session=a; __Host-sless_session=b")][..],
            &[
                ("cookie", "__Host-sless_session=a"),
                ("cookie", "__Host-sless_session=a"),
            ],
            &[("cookie", "__host-sless_session=a; __Host-sless_session=b")],
        ] {
            assert_eq!(
                cookie(&with(twice), COOKIE),
                Err(TwoCookies(COOKIE)),
                "{twice:?}"
            );
        }
    }

    #[test]
    fn only_the_consoles_own_origin_may_post() {
        for (headers, ok) in [
            (&[("sec-fetch-site", "same-origin")][..], true),
            (
                &[
                    ("sec-fetch-site", "same-site"),
                    ("origin", "http://127.0.0.1:8080"),
                    ("host", "127.0.0.1:8080"),
                ],
                false,
            ),
            (&[("sec-fetch-site", "cross-site")], false),
            (
                &[
                    ("origin", "http://127.0.0.1:8080"),
                    ("host", "127.0.0.1:8080"),
                ],
                true,
            ),
            (
                &[
                    ("origin", "http://127.0.0.1:8081"),
                    ("host", "127.0.0.1:8080"),
                ],
                false,
            ),
            (
                &[
                    ("origin", "https://sless.example.com"),
                    ("host", "sless.example.com"),
                ],
                true,
            ),
            (
                &[
                    ("origin", "http://sless.example.com"),
                    ("host", "sless.example.com"),
                ],
                false,
            ),
            (
                &[
                    ("origin", "http://127.evil.example"),
                    ("host", "127.evil.example"),
                ],
                false,
            ),
            (&[("origin", "null"), ("host", "127.0.0.1:8080")], false),
            (&[("origin", "http://127.0.0.1:8080")], false),
            (&[], true),
        ] {
            assert_eq!(same_origin(&with(headers)), ok, "{headers:?}");
        }
    }
}
