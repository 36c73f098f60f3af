//! The operator's dashboard under `/dashboard`: server-rendered HTML (minijinja templates in
//! `templates/dashboard/`, compiled into the binary), a little JavaScript and one vendored
//! charting library (uPlot 1.6.32, MIT, in `assets/dashboard/vendor/`). No build step.
//!
//! | route | what |
//! |---|---|
//! | `GET /dashboard` | overview: requests and LLM cost over time by path, routine share, savings (ESTIMATE) |
//! | `GET /dashboard/protocols` | every PD: name, hash, sources, decision, requests by path, routines |
//! | `GET /dashboard/routines` | every routine, with enable / disable buttons |
//! | `GET /dashboard/routines/{id}` | one routine: source, test button, the programmer's attempts |
//! | `GET /dashboard/ledger` | LLM calls, filtered by `category` and `protocol` |
//! | `GET /dashboard/sender` | tasks, rungs per target, negotiated protocols, sender routines |
//! | `GET /dashboard/sender/routines/{id}` | one sender routine: source, and its review while it is pending |
//! | `GET /dashboard/conversations` | open and recent conversations with their turns |
//! | `GET`, `POST /dashboard/login`; `POST /dashboard/logout` | the login form and the session cookie |
//! | `GET /dashboard/assets/{file}` | the stylesheet and scripts (no data) |
//!
//! Access ([`session`]): without a configured admin token every page answers 403; without a
//! valid bearer header or session cookie, 401 with the login form and no data. The buttons call
//! the admin API (`/admin/routines/{id}/enable|disable|test`) with the cookie and the
//! `X-Agora-Dashboard` header.
//!
//! Live updates: `dashboard.js` fetches the page again every few seconds with the header
//! `X-Agora-Partial: 1`, gets only the page's content block, and swaps the parts marked
//! `data-live` (so a test form and its result stay as they are).

pub(crate) mod pages;
pub mod report;
pub(crate) mod session;

use std::sync::OnceLock;

use agora_store::clock::{Clock, SystemClock};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use minijinja::Environment;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::{AppState, Shared};
use session::Credential;

/// The header that asks for a page's content block only.
const PARTIAL_HEADER: &str = "x-agora-partial";
/// How often the pages refresh themselves.
const POLL_MS: u64 = 3000;

/// The dashboard's routes (mounted at `/dashboard`; crate-private, so no axum type leaves the
/// crate).
pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/", get(overview))
        .route("/protocols", get(protocols))
        .route("/routines", get(routines))
        .route("/routines/{id}", get(routine))
        .route("/ledger", get(ledger))
        .route("/sender", get(sender))
        .route("/sender/routines/{id}", get(sender_routine))
        .route("/conversations", get(conversations))
        .route("/login", get(login_form).post(login))
        .route("/logout", axum::routing::post(logout))
        .route("/assets/{file}", get(asset))
        .layer(axum::middleware::map_response(guard_headers))
}

/// Every dashboard response: scripts and styles from this origin only, never framed (so its
/// buttons cannot be clicked through another page), no sniffing, and never cached unless it
/// says otherwise (only the assets do).
async fn guard_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
             img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn templates() -> &'static Environment<'static> {
    static TEMPLATES: OnceLock<Environment<'static>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let mut env = Environment::new();
        for (name, source) in [
            (
                "head.html",
                include_str!("../../templates/dashboard/head.html"),
            ),
            (
                "base.html",
                include_str!("../../templates/dashboard/base.html"),
            ),
            (
                "macros.html",
                include_str!("../../templates/dashboard/macros.html"),
            ),
            (
                "login.html",
                include_str!("../../templates/dashboard/login.html"),
            ),
            (
                "overview.html",
                include_str!("../../templates/dashboard/overview.html"),
            ),
            (
                "protocols.html",
                include_str!("../../templates/dashboard/protocols.html"),
            ),
            (
                "routines.html",
                include_str!("../../templates/dashboard/routines.html"),
            ),
            (
                "routine.html",
                include_str!("../../templates/dashboard/routine.html"),
            ),
            (
                "ledger.html",
                include_str!("../../templates/dashboard/ledger.html"),
            ),
            (
                "sender.html",
                include_str!("../../templates/dashboard/sender.html"),
            ),
            (
                "sender_routine.html",
                include_str!("../../templates/dashboard/sender_routine.html"),
            ),
            (
                "conversations.html",
                include_str!("../../templates/dashboard/conversations.html"),
            ),
            (
                "report.html",
                include_str!("../../templates/dashboard/report.html"),
            ),
        ] {
            // The templates are part of the binary and a unit test renders each of them, so a
            // broken one fails the tests; here it is logged and its page answers 500.
            if let Err(error) = env.add_template(name, source) {
                tracing::error!(%error, name, "a dashboard template does not parse");
            }
        }
        env.add_filter("when", when);
        env.add_filter("usd", usd);
        env.add_filter("short", |hash: String| {
            hash.chars().take(12).collect::<String>()
        });
        env
    })
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC; empty for none.
fn when(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// Dollars with four decimals (the local model's calls cost fractions of a cent).
fn usd(value: Option<f64>) -> String {
    format!("${:.4}", value.unwrap_or(0.0))
}

/// Renders `template` with `context`; with `partial`, only its `content` block.
pub(crate) fn render(template: &str, context: &Value, partial: bool) -> Result<String, String> {
    let template = templates()
        .get_template(template)
        .map_err(|e| e.to_string())?;
    let context = minijinja::Value::from(minijinja::value::Serde(context));
    if partial {
        template
            .render_captured(context)
            .and_then(|mut captured| captured.with_state_mut(|state| state.render_block("content")))
            .map_err(|e| e.to_string())
    } else {
        template.render(context).map_err(|e| e.to_string())
    }
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// Whether the node is reached over TLS, so the cookie gets `Secure`.
fn over_tls(state: &AppState) -> bool {
    state.node.config().public_url.starts_with("https://")
}

/// A page, or the refusal the module docs describe.
/// `data` is awaited only once the credentials passed (a future does nothing until then).
async fn page(
    state: &AppState,
    headers: &HeaderMap,
    name: &str,
    active: &str,
    data: impl std::future::Future<Output = Result<Option<Value>, agora_store::StoreError>>,
) -> Response {
    let Some(token) = state.admin_token.as_deref() else {
        return disabled();
    };
    if session::credential(headers, token, now_ms()) == Credential::None {
        return html_page(StatusCode::UNAUTHORIZED, "login.html", &json!({}), false);
    }
    let data = match data.await {
        Ok(Some(data)) => data,
        Ok(None) => {
            let missing = json!({"missing": true});
            return html_page(StatusCode::NOT_FOUND, "login.html", &missing, false);
        }
        Err(error) => {
            tracing::error!(%error, page = name, "could not read the dashboard's data");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the dashboard could not read the store",
            )
                .into_response();
        }
    };
    let config = state.node.config();
    let context = json!({
        "node": {"name": config.name, "url": config.public_url},
        "active": active,
        "pollMs": POLL_MS,
        "now": now_ms(),
        "page": data,
    });
    let partial = headers.contains_key(PARTIAL_HEADER);
    html_page(StatusCode::OK, name, &context, partial)
}

/// The template `name` rendered with `context` (only its content block when `partial`).
fn html_page(status: StatusCode, name: &str, context: &Value, partial: bool) -> Response {
    match render(name, context, partial) {
        Ok(body) => (status, Html(body)).into_response(),
        Err(error) => {
            tracing::error!(%error, page = name, "could not render a dashboard page");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the dashboard could not render this page",
            )
                .into_response()
        }
    }
}

/// The answer of every dashboard URL on a node without an admin token.
fn disabled() -> Response {
    html_page(
        StatusCode::FORBIDDEN,
        "login.html",
        &json!({"disabled": true}),
        false,
    )
}

#[derive(Deserialize)]
struct OverviewQuery {
    window: Option<String>,
}

async fn overview(
    State(state): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<OverviewQuery>,
) -> Response {
    let data = pages::overview(&state.node, query.window.as_deref(), now_ms());
    page(&state, &headers, "overview.html", "overview", async {
        data.await.map(Some)
    })
    .await
}

async fn protocols(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let data = async { pages::protocols(&state.node).await.map(Some) };
    page(&state, &headers, "protocols.html", "protocols", data).await
}

async fn routines(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let data = async { pages::routines(&state.node).await.map(Some) };
    page(&state, &headers, "routines.html", "routines", data).await
}

async fn routine(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let data = numbered(&id, |id| pages::routine(&state.node, id));
    page(&state, &headers, "routine.html", "routines", data).await
}

/// The page data `read` gives for the record numbered `id`; `None` (the 404 page) when `id` is
/// not a number.
async fn numbered<F>(
    id: &str,
    read: impl FnOnce(i64) -> F,
) -> Result<Option<Value>, agora_store::StoreError>
where
    F: std::future::Future<Output = Result<Option<Value>, agora_store::StoreError>>,
{
    match id.parse::<i64>() {
        Ok(id) => read(id).await,
        Err(_) => Ok(None),
    }
}

#[derive(Deserialize)]
struct LedgerQuery {
    category: Option<String>,
    protocol: Option<String>,
}

async fn ledger(
    State(state): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<LedgerQuery>,
) -> Response {
    let category = query.category.filter(|c| !c.is_empty());
    let protocol = query.protocol.filter(|p| !p.is_empty());
    let data = async {
        pages::ledger(&state.node, category.as_deref(), protocol.as_deref())
            .await
            .map(Some)
    };
    page(&state, &headers, "ledger.html", "ledger", data).await
}

async fn sender(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let data = async { pages::sender(&state.node).await.map(Some) };
    page(&state, &headers, "sender.html", "sender", data).await
}

async fn sender_routine(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let data = numbered(&id, |id| {
        crate::admin::sender_routines::review_of(&state.node, id)
    });
    page(&state, &headers, "sender_routine.html", "sender", data).await
}

async fn conversations(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let data = async { pages::conversations(&state.node, now_ms()).await.map(Some) };
    page(
        &state,
        &headers,
        "conversations.html",
        "conversations",
        data,
    )
    .await
}

async fn login_form(State(state): State<Shared>) -> Response {
    if state.admin_token.is_none() {
        return disabled();
    }
    html_page(StatusCode::OK, "login.html", &json!({}), false)
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(state): State<Shared>, Form(form): Form<LoginForm>) -> Response {
    let Some(token) = state.admin_token.as_deref() else {
        return disabled();
    };
    if !crate::auth::same_secret(&form.token, token) {
        let wrong = json!({"wrong": true});
        return html_page(StatusCode::UNAUTHORIZED, "login.html", &wrong, false);
    }
    let cookie = session::set_cookie(&session::new_session(token, now_ms()), over_tls(&state));
    let mut response = Redirect::to("/dashboard").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn logout(State(state): State<Shared>) -> Response {
    let mut response = Redirect::to("/dashboard/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&session::clear_cookie(over_tls(&state))) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The stylesheet and scripts, compiled in.
async fn asset(Path(file): Path<String>) -> Response {
    let (content_type, body): (&str, &'static str) = match file.as_str() {
        "dashboard.css" => (
            "text/css; charset=utf-8",
            include_str!("../../assets/dashboard/dashboard.css"),
        ),
        "dashboard.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../../assets/dashboard/dashboard.js"),
        ),
        "charts.js" => ("text/javascript; charset=utf-8", CHARTS_JS),
        "uPlot.iife.min.js" => ("text/javascript; charset=utf-8", UPLOT_JS),
        "uPlot.min.css" => ("text/css; charset=utf-8", UPLOT_CSS),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The charts, shared by the dashboard's overview and the network demo's offline report.
pub(crate) const CHARTS_JS: &str = include_str!("../../assets/dashboard/charts.js");
/// uPlot, vendored (see `assets/dashboard/vendor/README.md`).
pub(crate) const UPLOT_JS: &str = include_str!("../../assets/dashboard/vendor/uPlot.iife.min.js");
/// uPlot's stylesheet.
pub(crate) const UPLOT_CSS: &str = include_str!("../../assets/dashboard/vendor/uPlot.min.css");

#[cfg(test)]
mod tests {
    use super::*;

    fn context(page: Value) -> Value {
        json!({"node": {"name": "n", "url": "http://127.0.0.1:1"}, "active": "x", "pollMs": 3000, "now": 0, "page": page})
    }

    /// Every template renders, whole and as its content block, on data shaped as `pages` makes
    /// it (empty lists, and one row of everything), and escapes what it shows.
    #[test]
    fn every_template_renders_and_escapes() {
        let evil = "<script>alert(1)</script>";
        let routine = json!({"id": 1, "name": evil, "protocolHash": "ab", "protocol": "p", "origin": "llm",
            "status": "active", "active": true, "runs": 2, "failures": 1, "lastError": evil,
            "lastFailureAt": 1, "updatedAt": 1, "createdAt": 1, "language": "javascript",
            "tools": ["t"], "timeoutMs": 1000, "memoryMb": 64});
        let pages = [
            (
                "overview.html",
                json!({"totals": {"requests": 1, "llm": 1, "routine": 0, "fallback": 0, "rejected": 0,
                "failed": 0, "llmCalls": 1, "llmCostUsd": 0.1, "requestLlmCostUsd": 0.1, "routineSharePct": null,
                "tokensSavedEstimate": 0, "usdSavedEstimate": 0.0},
                "ledger": [{"node": "n", "category": evil, "model": "m", "calls": 1, "tokens": 2, "costUsd": 0.1}],
                "window": "1h", "windows": ["15m", "1h"], "bucketSeconds": 60,
                "series": {"t": [1], "llm": [1], "note": evil}}),
            ),
            (
                "protocols.html",
                json!({"protocols": [{"name": evil, "hash": "ab", "sources": [evil],
                "decision": {"allowed": true, "origin": "checker", "reason": evil}, "requests": 1, "llm": 1,
                "routine": 0, "fallback": 0, "rejected": 0, "failed": 0, "llmCostUsd": 0.0,
                "routines": [{"id": 1, "name": evil, "status": "active", "origin": "human"}]}]}),
            ),
            ("routines.html", json!({"routines": [routine.clone()]})),
            (
                "routine.html",
                json!({"routine": routine, "source": evil, "exampleBody": evil,
                "attempts": [{"job": "j", "attempt": 1, "reason": "threshold", "outcome": "passed", "passed": true,
                "report": evil, "source": evil, "tokens": 1, "costUsd": 0.0, "wroteThis": true, "createdAt": 1}],
                "shadow": {"share": 0.02, "checks": 3, "disagreements": 1, "costUsd": 0.01, "unchecked": null,
                "latest": [{"queryId": evil, "body": evil, "routineReply": evil, "llmReply": evil,
                "difference": evil, "at": 1}]}}),
            ),
            (
                "ledger.html",
                json!({"calls": [{"id": 1, "at": 1, "node": "n", "category": evil, "model": "m",
                "protocolHash": "ab", "protocol": evil, "promptTokens": 1, "cachedPromptTokens": 0, "completionTokens": 1, "latencyMs": 1,
                "costUsd": 0.0, "queryId": evil}], "shownCostUsd": 0.0, "limit": 200, "categories": [evil],
                "protocols": [{"hash": "ab", "name": evil}], "category": null, "protocol": null}),
            ),
            (
                "sender.html",
                json!({"tasks": [{"name": evil, "description": evil}],
                "memories": [{"target": evil, "task": "t", "uses": 1, "protocolHash": null, "protocol": null,
                "sources": [], "rejected": [], "negotiationRequested": false, "nextNegotiationAt": 5, "updatedAt": 1}],
                "rungs": [{"target": evil, "task": "t", "rung": "natural", "runs": 1, "successes": 1, "llmCalls": 1, "tokens": 1}],
                "routines": [{"id": 1, "target": evil, "task": "t", "protocolHash": "ab", "protocol": null, "status": "pending",
                "runs": 1, "failures": 0, "lastError": null}], "attempts": 1, "attemptsPassed": 1}),
            ),
            (
                "sender_routine.html",
                json!({"routine": {"id": 2, "target": evil, "task": evil, "protocolHash": "ab", "status": "pending",
                "runs": 0, "failures": 0, "lastError": evil, "createdAt": 1, "updatedAt": 1, "source": evil},
                "examination": {"job": "j", "attempt": 1, "report": evil},
                "examples": [{"data": {"x": evil}, "body": evil, "reply": evil, "output": {"y": evil}}],
                "replaces": {"id": 1, "source": evil},
                "reviews": [{"senderRoutineId": 1, "decision": "rejected", "reason": evil, "reviewer": evil, "decidedAt": 1}],
                "shadowChecked": false, "shadowUnchecked": evil}),
            ),
            (
                "conversations.html",
                json!({"open": 1, "conversations": [{"id": evil, "kind": "protocol",
                "protocolHash": "ab", "protocol": "p", "createdAt": 1, "lastActive": 1, "expiresAt": 2, "open": true,
                "turns": [{"role": "user", "text": evil}]}]}),
            ),
        ];
        for (name, page) in pages {
            for partial in [false, true] {
                let html = render(name, &context(page.clone()), partial)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(
                    !html.contains(evil),
                    "{name} (partial: {partial}) shows raw HTML"
                );
                assert_eq!(html.contains("<html"), !partial, "{name}");
            }
        }
        for flags in [
            json!({}),
            json!({"disabled": true}),
            json!({"wrong": true}),
            json!({"missing": true}),
        ] {
            render("login.html", &flags, false).unwrap();
        }
    }

    #[test]
    fn times_and_dollars_read_well() {
        assert_eq!(when(Some(0)), "1970-01-01 00:00:00");
        assert_eq!(when(None), "");
        assert_eq!(usd(Some(0.01234)), "$0.0123");
    }
}
