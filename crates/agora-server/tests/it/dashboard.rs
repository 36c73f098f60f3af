//! The dashboard over a real loopback socket, without a browser: who may see it, the login
//! cookie, what each page shows of a node that served traffic, and the buttons' access to the
//! admin API. The browser tests are in `dashboard_browser`.

use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, ScriptedLlm, TestServer, temp_dir};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::{Value, json};

use crate::support::Spawn;

const TOKEN: &str = "dashboard-token";
const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

/// Every page of the dashboard that shows data.
pub const PAGES: &[&str] = &[
    "/dashboard",
    "/dashboard/protocols",
    "/dashboard/routines",
    "/dashboard/routines/1",
    "/dashboard/ledger",
    "/dashboard/ledger?category=checking",
    "/dashboard/sender",
    "/dashboard/conversations",
];

fn answering() -> std::sync::Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("suitability") => Ok(r#"{"reason": "fine", "suitable": "yes"}"#.into()),
        _ => Ok(json!({"tool": "final_answer", "answer": "the LLM answered"}).to_string()),
    })
}

/// A node with the token, a scripted routine `shout` for the weather PD, and traffic: two
/// requests the routine answered and one natural-language request the LLM answered.
async fn node_with_traffic(dir: &std::path::Path, token: Option<&str>) -> TestServer {
    let mut builder = NodeBuilder::new(answering(), dir).routine_engine(std::sync::Arc::new(
        agora_testkit::ScriptedRoutineEngine::new().routine("shout", |body, _tools| async move {
            Ok(body.to_uppercase())
        }),
    ));
    if let Some(token) = token {
        builder = builder.admin_token(token);
    }
    let server = builder.spawn().await;
    let spec = agora_testkit::human_routine("shout", WEATHER_PD, "shout", &[]);
    server.node.add_routine(spec).await.unwrap();
    let hash = agora_protocol::ProtocolHash::of(WEATHER_PD.as_bytes());
    for body in ["london", "paris"] {
        let (status, reply) = server
            .post(
                "/",
                &json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": body}),
            )
            .await;
        assert_eq!((status, &reply["body"]), (200, &json!(body.to_uppercase())));
    }
    let (status, _) = server
        .post(
            "/",
            &json!({"protocolHash": null, "protocolSources": [], "body": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    server
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(url: &str, headers: HeaderMap) -> (StatusCode, HeaderMap, String) {
    let response = client().get(url).headers(headers).send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.insert(*name, value.parse().unwrap());
    }
    headers
}

/// Posts the login form with `token`.
async fn post_login(server: &TestServer, token: &str) -> reqwest::Response {
    client()
        .post(format!("{}/dashboard/login", server.url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

/// Logs in through the form; returns the `Cookie` header value.
async fn log_in(server: &TestServer) -> String {
    let response = post_login(server, TOKEN).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/dashboard");
    let set_cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
    set_cookie.split(';').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_every_page_is_a_login_page_with_no_data() {
    let dir = temp_dir();
    let server = node_with_traffic(dir.path(), Some(TOKEN)).await;
    let forged = format!("agora_dashboard=v1.{}.00", i64::MAX);
    let refusals = [
        with(&[]),
        with(&[("authorization", "Bearer wrong")]),
        with(&[("cookie", &forged)]),
        with(&[("x-agora-partial", "1")]),
    ];
    for page in PAGES {
        for headers in &refusals {
            let (status, _, body) = get(&format!("{}{page}", server.url), headers.clone()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{page} {headers:?}");
            assert!(body.starts_with("<!doctype html>"), "{page}: {body}");
            assert!(body.contains("id=\"login-form\""), "{page}: {body}");
            for data in ["WeatherForecastQuery", "shout", "conversation", "checking"] {
                assert!(
                    !body.contains(data),
                    "{page} shows {data} without the token"
                );
            }
        }
    }
    // The assets hold no data and load without a token (the login page uses the stylesheet).
    let (status, headers, _) = get(
        &format!("{}/dashboard/assets/dashboard.css", server.url),
        with(&[]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    let (status, _, _) = get(
        &format!("{}/dashboard/assets/../Cargo.toml", server.url),
        with(&[]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A node without an admin token has no dashboard at all.
    let other = temp_dir();
    let closed = node_with_traffic(other.path(), None).await;
    for page in PAGES.iter().chain(&["/dashboard/login"]) {
        let (status, _, body) = get(&format!("{}{page}", closed.url), with(&[])).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
        assert!(body.contains("id=\"login-disabled\""), "{page}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_in_sets_a_strict_cookie_that_opens_every_page() {
    let dir = temp_dir();
    let server = node_with_traffic(dir.path(), Some(TOKEN)).await;

    let wrong = post_login(&server, "not-it").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(header::SET_COOKIE).is_none());
    assert!(wrong.text().await.unwrap().contains("id=\"login-wrong\""));

    let response = post_login(&server, TOKEN).await;
    let set_cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");
    assert!(
        !set_cookie.contains(TOKEN),
        "the cookie does not hold the token"
    );
    let cookie = log_in(&server).await;

    for page in PAGES {
        for headers in [
            with(&[("cookie", &cookie)]),
            with(&[("authorization", &format!("Bearer {TOKEN}"))]),
        ] {
            let (status, response_headers, body) =
                get(&format!("{}{page}", server.url), headers).await;
            assert_eq!(status, StatusCode::OK, "{page}: {body}");
            assert!(body.contains("<html"), "{page}");
            let csp = response_headers[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap();
            assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
            assert_eq!(
                response_headers[header::CACHE_CONTROL],
                "no-store",
                "{page}"
            );
        }
    }
    let page = |path: &'static str| {
        let url = format!("{}{path}", server.url);
        let cookie = cookie.clone();
        async move { get(&url, with(&[("cookie", &cookie)])).await.2 }
    };
    let overview = page("/dashboard").await;
    assert!(overview.contains("id=\"total-requests\">3<"), "{overview}");
    assert!(
        overview.contains("id=\"routine-share\">66.7 %<"),
        "{overview}"
    );
    let protocols = page("/dashboard/protocols").await;
    assert!(protocols.contains("WeatherForecastQuery") && protocols.contains(">shout</a>"));
    let routines = page("/dashboard/routines").await;
    assert!(routines.contains("data-status=\"active\"") && routines.contains("/disable\""));
    let ledger = page("/dashboard/ledger?category=conversation").await;
    assert!(ledger.contains("<td>conversation</td>"), "{ledger}");
    assert!(!ledger.contains("<td>checking</td>"), "filtered: {ledger}");
    // An unknown routine is a 404, and a hash that does not parse filters nothing out.
    let (status, _, _) = get(
        &format!("{}/dashboard/routines/999", server.url),
        with(&[("cookie", &cookie)]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(
        &format!("{}/dashboard/ledger?protocol=nonsense", server.url),
        with(&[("cookie", &cookie)]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // The live refresh asks for the content block only.
    let (_, _, partial) = get(
        &format!("{}/dashboard/routines", server.url),
        with(&[("cookie", &cookie), ("x-agora-partial", "1")]),
    )
    .await;
    assert!(
        !partial.contains("<html") && partial.contains("data-live"),
        "{partial}"
    );

    // Logging out clears the cookie.
    let out = client()
        .post(format!("{}/dashboard/logout", server.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let cleared = out.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cleared.starts_with("agora_dashboard=;") && cleared.contains("Max-Age=0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buttons_reach_the_admin_api_only_with_the_cookie_and_the_dashboard_header() {
    let dir = temp_dir();
    let server = node_with_traffic(dir.path(), Some(TOKEN)).await;
    let cookie = log_in(&server).await;
    let disable = format!("{}/admin/routines/1/disable", server.url);

    let refused = client()
        .post(&disable)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "a cookie alone");
    let refused = client()
        .post(&disable)
        .header("x-agora-dashboard", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "a header alone");
    let store = server.node.store();
    assert_eq!(store.routines().await.unwrap()[0].status.as_str(), "active");

    let done = client()
        .post(&disable)
        .header("cookie", &cookie)
        .header("x-agora-dashboard", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    let test = client()
        .post(format!("{}/admin/routines/1/test", server.url))
        .header("cookie", &cookie)
        .header("x-agora-dashboard", "1")
        .json(&json!({"body": "oslo"}))
        .send()
        .await
        .unwrap();
    let tested: Value = test.json().await.unwrap();
    assert_eq!(tested["body"], "OSLO", "{tested}");

    // The next request goes to the LLM, and the page says the routine is disabled.
    let hash = agora_protocol::ProtocolHash::of(WEATHER_PD.as_bytes());
    let (_, reply) = server
        .post(
            "/",
            &json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": "rome"}),
        )
        .await;
    assert_eq!(reply["body"], "the LLM answered", "{reply}");
    assert_eq!(
        store.requests().recent_requests(1).await.unwrap()[0].path,
        RequestPath::Llm
    );
    let (_, _, routines) = get(
        &format!("{}/dashboard/routines", server.url),
        with(&[("cookie", &cookie)]),
    )
    .await;
    assert!(routines.contains("data-status=\"disabled\""), "{routines}");
}
