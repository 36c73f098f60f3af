//! The fetcher against a real HTTP server on 127.0.0.1.
//!
//! Every address outside loopback that appears here (10.0.0.1, the mapped
//! loopback form) is one the fetcher must refuse before connecting; the
//! machine running the tests needs no network.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use agora_fetch::{AddressClass, FetchError, FetchPolicy, Fetched, Fetcher};
use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// A protocol document with non-ASCII text, as UTF-8.
const PD: &str = "---\nname: grüße\n---\n# Protocole « démo » — 日本語\n";

/// An axum server on an ephemeral loopback port, stopped when dropped.
struct TestServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Fetches `path` from this server with `fetcher`.
    async fn fetch(&self, fetcher: &Fetcher, path: &str) -> Result<Fetched, FetchError> {
        fetcher.fetch_text(&self.url(path)).await
    }

    async fn start() -> TestServer {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("binding an ephemeral loopback port works");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let task = tokio::spawn(async move {
            axum::serve(listener, routes(addr))
                .await
                .expect("test server runs");
        });
        TestServer { addr, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn routes(addr: SocketAddr) -> Router {
    let port = addr.port();
    Router::new()
        .route(
            "/pd",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], PD) }),
        )
        .route(
            "/pd-no-charset",
            get(|| async { ([(header::CONTENT_TYPE, "text/markdown")], PD) }),
        )
        .route(
            "/pd-bom",
            get(|| async {
                let body = [b"\xEF\xBB\xBF".as_slice(), PD.as_bytes()].concat();
                ([(header::CONTENT_TYPE, "text/plain; charset=UTF-8")], body)
            }),
        )
        .route(
            "/pd-latin1",
            get(|| async {
                // "café naïve" in ISO-8859-1.
                let body = b"caf\xE9 na\xEFve".to_vec();
                (
                    [(header::CONTENT_TYPE, "text/plain; charset=iso-8859-1")],
                    body,
                )
            }),
        )
        .route(
            "/bad-utf8",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], b"caf\xE9".to_vec()) }),
        )
        .route(
            "/unknown-charset",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; charset=klingon")],
                    "qapla'",
                )
            }),
        )
        .route("/hop/{n}", get(hop))
        .route(
            "/to-private",
            get(|| async { redirect("http://10.0.0.1/pd") }),
        )
        .route(
            "/to-mapped",
            get(move || async move { redirect(&format!("http://[::ffff:127.0.0.1]:{port}/pd")) }),
        )
        .route("/to-ftp", get(|| async { redirect("ftp://127.0.0.1/pd") }))
        .route("/no-location", get(|| async { StatusCode::FOUND }))
        .route("/big", get(|| async { vec![b'a'; 64 * 1024] }))
        .route("/big-stream", get(big_stream))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                PD
            }),
        )
}

fn redirect(location: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location.to_owned())]).into_response()
}

/// `/hop/n` redirects to `/hop/n-1` with a relative `Location`; `/hop/0` is
/// the document.
async fn hop(Path(n): Path<u32>) -> Response {
    match n.checked_sub(1) {
        None => PD.into_response(),
        Some(next) => redirect(&next.to_string()),
    }
}

/// A body with no Content-Length, sent in 8 KiB chunks: 8 MiB in all, far
/// beyond any limit the tests set.
async fn big_stream() -> Response {
    let chunks = futures::stream::iter(
        (0..1024).map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b'a'; 8192]))),
    );
    Body::from_stream(chunks).into_response()
}

fn loopback_fetcher() -> Fetcher {
    Fetcher::new(FetchPolicy::default().allowing_loopback()).expect("client builds")
}

/// Asserts that a fetch was refused for its URL's `scheme`.
fn assert_scheme_refused(result: Result<Fetched, FetchError>, scheme: &str) {
    let error = result.expect_err("the scheme is refused");
    assert!(
        matches!(&error, FetchError::SchemeNotAllowed(s) if s == scheme),
        "{error:?}"
    );
}

fn assert_refused(
    result: Result<agora_fetch::Fetched, FetchError>,
    address: &str,
    class: AddressClass,
) {
    match result {
        Err(FetchError::AddressRefused {
            address: refused,
            class: refused_class,
            ..
        }) => {
            assert_eq!(refused, address.parse::<IpAddr>().expect("valid address"));
            assert_eq!(refused_class, class);
        }
        other => panic!("expected refusal of {address} ({class}), got {other:?}"),
    }
}

#[tokio::test]
async fn default_policy_refuses_loopback_literal() {
    let server = TestServer::start().await;
    let fetcher = Fetcher::new(FetchPolicy::default()).expect("client builds");
    let error = server
        .fetch(&fetcher, "/pd")
        .await
        .expect_err("loopback is refused");
    assert_eq!(
        error.to_string(),
        "refusing to fetch from 127.0.0.1 (loopback); the operator can allow it"
    );
    assert_refused(Err(error), "127.0.0.1", AddressClass::Loopback);
}

#[tokio::test]
async fn default_policy_refuses_names_that_resolve_to_loopback() {
    let server = TestServer::start().await;
    let fetcher = Fetcher::new(FetchPolicy::default()).expect("client builds");
    let url = format!("http://localhost:{}/pd", server.addr.port());
    match fetcher.fetch_text(&url).await {
        Err(FetchError::AddressRefused { host, class, .. }) => {
            assert_eq!(host, "localhost");
            assert_eq!(class, AddressClass::Loopback);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn allowlisted_loopback_fetches_exact_utf8_text() {
    let server = TestServer::start().await;
    let fetched = server
        .fetch(&loopback_fetcher(), "/pd")
        .await
        .expect("fetch works");
    assert_eq!(fetched.text, PD);
    assert_eq!(fetched.final_url, server.url("/pd"));
    assert_eq!(fetched.remote_addr, Some(server.addr));
    assert_eq!(
        fetched.content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
}

#[tokio::test]
async fn allowlisted_names_resolve_through_the_guard() {
    let server = TestServer::start().await;
    let url = format!("http://localhost:{}/pd", server.addr.port());
    let fetched = loopback_fetcher()
        .fetch_text(&url)
        .await
        .expect("localhost is allowed");
    assert_eq!(fetched.text, PD);
    assert_eq!(fetched.remote_addr, Some(server.addr));
}

#[tokio::test]
async fn charsets_are_honoured_and_utf8_is_the_default() {
    let server = TestServer::start().await;
    let fetcher = loopback_fetcher();
    let text = |path: &'static str| {
        let fetcher = fetcher.clone();
        let url = server.url(path);
        async move { fetcher.fetch_text(&url).await }
    };
    assert_eq!(
        text("/pd-no-charset").await.expect("UTF-8 assumed").text,
        PD
    );
    assert_eq!(
        text("/pd-latin1").await.expect("latin-1 decodes").text,
        "café naïve"
    );
    let with_bom = text("/pd-bom").await.expect("BOM is valid UTF-8").text;
    assert_eq!(
        with_bom,
        format!("\u{feff}{PD}"),
        "UTF-8 bytes are kept exactly"
    );
    assert!(matches!(
        text("/bad-utf8").await,
        Err(FetchError::Decode(_))
    ));
    assert!(matches!(
        text("/unknown-charset").await,
        Err(FetchError::Decode(_))
    ));
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let server = TestServer::start().await;
    let fetcher = loopback_fetcher();
    let fetched = server
        .fetch(&fetcher, "/hop/2")
        .await
        .expect("2 hops are fine");
    assert_eq!(fetched.text, PD);
    assert_eq!(fetched.final_url, server.url("/hop/0"));
    let fetched = server
        .fetch(&fetcher, "/hop/3")
        .await
        .expect("3 hops are the limit");
    assert_eq!(fetched.text, PD);
    let error = server
        .fetch(&fetcher, "/hop/4")
        .await
        .expect_err("4 hops are too many");
    assert!(
        matches!(error, FetchError::TooManyRedirects(3)),
        "{error:?}"
    );
}

#[tokio::test]
async fn redirect_hops_are_checked_before_sending() {
    let server = TestServer::start().await;
    let policy = FetchPolicy {
        allowed_networks: vec!["127.0.0.1/32".parse().expect("valid network")],
        ..FetchPolicy::default()
    };
    let fetcher = Fetcher::new(policy).expect("client builds");
    let started = Instant::now();
    // 10.0.0.1 is refused as a literal, before any connection is attempted
    // (this machine could not reach it, so an attempt would end differently).
    assert_refused(
        fetcher.fetch_text(&server.url("/to-private")).await,
        "10.0.0.1",
        AddressClass::Private,
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // The mapped form of an allowlisted address is not allowlisted.
    assert_refused(
        fetcher.fetch_text(&server.url("/to-mapped")).await,
        "::ffff:127.0.0.1",
        AddressClass::Ipv4Mapped,
    );
    assert_scheme_refused(server.fetch(&fetcher, "/to-ftp").await, "ftp");
    let error = server
        .fetch(&fetcher, "/no-location")
        .await
        .expect_err("no Location");
    assert!(matches!(error, FetchError::Status(302)), "{error:?}");
}

#[tokio::test]
async fn oversized_bodies_are_cut_off() {
    let server = TestServer::start().await;
    let policy = FetchPolicy {
        max_bytes: 16 * 1024,
        ..FetchPolicy::default().allowing_loopback()
    };
    let fetcher = Fetcher::new(policy).expect("client builds");
    for path in ["/big", "/big-stream"] {
        let error = fetcher
            .fetch_text(&server.url(path))
            .await
            .expect_err("body is too large");
        assert!(
            matches!(error, FetchError::TooLarge { limit: 16384 }),
            "{path}: {error:?}"
        );
    }
}

#[tokio::test]
async fn slow_servers_time_out() {
    let server = TestServer::start().await;
    let policy = FetchPolicy {
        timeout: Duration::from_millis(300),
        ..FetchPolicy::default().allowing_loopback()
    };
    let fetcher = Fetcher::new(policy).expect("client builds");
    let started = Instant::now();
    let error = server
        .fetch(&fetcher, "/slow")
        .await
        .expect_err("server is too slow");
    assert!(matches!(error, FetchError::Timeout), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn statuses_and_schemes_are_reported() {
    let server = TestServer::start().await;
    let fetcher = loopback_fetcher();
    let error = server.fetch(&fetcher, "/missing").await.expect_err("404");
    assert!(matches!(error, FetchError::Status(404)), "{error:?}");
    for (url, scheme) in [
        ("ftp://127.0.0.1/pd", "ftp"),
        ("file:///etc/passwd", "file"),
    ] {
        assert_scheme_refused(fetcher.fetch_text(url).await, scheme);
    }
    let error = fetcher
        .fetch_text("not a url")
        .await
        .expect_err("unparsable");
    assert!(matches!(error, FetchError::BadUrl(_)), "{error:?}");

    let https_only = FetchPolicy {
        allow_http: false,
        ..FetchPolicy::default().allowing_loopback()
    };
    let fetcher = Fetcher::new(https_only).expect("client builds");
    assert_scheme_refused(server.fetch(&fetcher, "/pd").await, "http");
}

#[tokio::test]
async fn credentials_in_urls_are_used_but_not_repeated() {
    let server = TestServer::start().await;
    let url = format!("http://reader:s3cret@{}/pd", server.addr);
    let fetched = loopback_fetcher()
        .fetch_text(&url)
        .await
        .expect("fetch works");
    assert_eq!(fetched.final_url, server.url("/pd"));

    let closed = {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        listener.local_addr().expect("address")
    };
    let url = format!("http://reader:s3cret@{closed}/pd");
    let error = loopback_fetcher()
        .fetch_text(&url)
        .await
        .expect_err("nothing listens");
    assert!(matches!(error, FetchError::Http(_)), "{error:?}");
    assert!(!error.to_string().contains("s3cret"), "{error}");
}
