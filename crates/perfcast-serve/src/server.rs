//! The HTTP server: routes, handlers, body limits and timeouts.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use perfcast_core::{Context, zoo};
use perfcast_predict::{Predictor, PreparedNetwork};
use serde::Serialize;

use crate::api::{self, ApiError, ModuleQueries, NetworkQuery, PredictResponse};
use crate::conn::{self, Timeouts};
use crate::error::{Error, Result};
use perfcast_core::fusion::Fusion;

/// Default request-body limit: 1 MiB, about 10,000 module specs.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;
/// Default body limit of `POST /v1/predict/onnx`: 512 MiB, an ONNX file with its weights
/// (BERT-large's fp32 export is about 1.3 GB: export it with external data, whose weights
/// stay beside the graph and are not needed).
pub const DEFAULT_ONNX_LIMIT: usize = 512 << 20;
/// Default time for a request head to arrive whole, from the connection's start or the
/// request's first byte.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time for a request body to arrive whole, from its head.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a keep-alive connection may wait for its next request.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time, after SIGINT or SIGTERM, to finish the requests in flight before the
/// connections still open are dropped.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time a request's work (an import, a network's preparation and prediction) may take
/// once its body is read, waiting for a free worker included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Module queries up to this count run inline on the tokio worker; more go to the blocking
/// pool so one huge request cannot stall the connections sharing its worker.
const INLINE_MODULES: usize = 1024;
/// Prepared zoo networks kept (name and resolution); more are prepared per request.
const NETWORK_CACHE: usize = 256;

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address to bind; default `127.0.0.1:8787` (loopback). Port 0 picks a free port.
    pub addr: SocketAddr,
    /// Worker threads, each running the connections dealt to it; default the available cores.
    pub threads: usize,
    /// Largest request body, bytes; default [`DEFAULT_BODY_LIMIT`].
    pub body_limit: usize,
    /// Largest ONNX file `POST /v1/predict/onnx` takes, bytes; default [`DEFAULT_ONNX_LIMIT`].
    /// Also the request bodies the server holds at once over every request (with
    /// `body_limit` if larger): a body that would pass it is answered 503 before it is read.
    pub onnx_limit: usize,
    /// A request head must be whole this long after the connection opened or the request's
    /// first byte arrived, or the connection is closed; default [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// A request body must be whole this long after its head, or the request is answered
    /// 408 and the connection closed; default [`DEFAULT_BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// A keep-alive connection with no byte of a next request this long after its last
    /// response is closed; default [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// After the shutdown signal, connections waiting for a request close at once, requests
    /// in flight get this long to finish, then every connection is dropped; default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`].
    pub shutdown_timeout: Duration,
    /// A request whose work off the tokio workers (an ONNX import, a network of over a
    /// thousand layers, a batch of over a thousand modules) is not done this long after its
    /// body arrived is answered 503; default [`DEFAULT_REQUEST_TIMEOUT`]. At most `threads`
    /// such works run at once, each until it ends or reaches its next check of the deadline
    /// (between the import, the preparation and the prediction).
    pub request_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8787)),
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            body_limit: DEFAULT_BODY_LIMIT,
            onnx_limit: DEFAULT_ONNX_LIMIT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl ServeConfig {
    /// Checks every setting, naming the one out of range.
    pub fn validate(&self) -> Result<()> {
        if self.threads == 0 {
            return Err(Error::Config("`threads` must be at least 1, got 0".into()));
        }
        for (name, limit) in [
            ("body_limit", self.body_limit),
            ("onnx_limit", self.onnx_limit),
        ] {
            if limit == 0 {
                return Err(Error::Config(format!(
                    "`{name}` must be at least 1 byte, got 0"
                )));
            }
        }
        for (name, d) in [
            ("header_timeout", self.header_timeout),
            ("body_timeout", self.body_timeout),
            ("idle_timeout", self.idle_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::Config(format!("`{name}` must be positive, got 0 s")));
            }
        }
        Ok(())
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            header: self.header_timeout,
            idle: self.idle_timeout,
            shutdown: self.shutdown_timeout,
        }
    }
}

/// Prepared zoo networks by name and resolution (`None`: the default).
type NetworkCache = RwLock<HashMap<(String, Option<usize>), Arc<PreparedNetwork>>>;

/// What every handler shares: the predictor, the `/v1/bundle` answer, prepared zoo networks.
pub struct AppState {
    predictor: Arc<Predictor>,
    bundle_json: Bytes,
    networks: NetworkCache,
}

impl AppState {
    /// State over a predictor; prepares every zoo network at its default resolution.
    pub fn new(predictor: Arc<Predictor>) -> Result<AppState> {
        let bundle_json = Bytes::from(serde_json::to_vec(&BundleInfo::of(&predictor))?);
        let mut networks = HashMap::new();
        for name in zoo::names() {
            let net = zoo::build(name, None)?;
            networks.insert(
                ((*name).to_string(), None),
                Arc::new(predictor.prepare(&net)?),
            );
        }
        Ok(AppState {
            predictor,
            bundle_json,
            networks: RwLock::new(networks),
        })
    }
}

/// `GET /v1/bundle`: what is loaded and how its models scored.
#[derive(Serialize)]
struct BundleInfo<'a> {
    dir: String,
    name: &'a str,
    format: u32,
    perfcast_version: &'a str,
    device: &'a perfcast_core::DeviceSpec,
    data: &'a str,
    kinds: Vec<KindInfo<'a>>,
}

#[derive(Serialize)]
struct KindInfo<'a> {
    kind: &'a str,
    model: &'a str,
    rows: usize,
    cv_mape: Option<f64>,
    test_mape: Option<f64>,
    predict_us: Option<f64>,
    size_bytes: Option<usize>,
    why: &'a str,
}

impl<'a> BundleInfo<'a> {
    fn of(predictor: &'a Predictor) -> BundleInfo<'a> {
        let bundle = predictor.bundle();
        let m = &bundle.manifest;
        let kinds = m
            .kinds
            .iter()
            .map(|(kind, e)| {
                let chosen = e.candidates.iter().find(|c| c.model == e.chosen);
                KindInfo {
                    kind,
                    model: &e.chosen,
                    rows: e.rows,
                    cv_mape: chosen.map(|c| c.cv_mape),
                    test_mape: chosen.map(|c| c.test_mape),
                    predict_us: chosen.map(|c| c.predict_us),
                    size_bytes: chosen.map(|c| c.size_bytes),
                    why: &e.selection.why,
                }
            })
            .collect();
        BundleInfo {
            dir: bundle.dir.display().to_string(),
            name: &m.name,
            format: m.format,
            perfcast_version: &m.perfcast_version,
            device: &m.device,
            data: &m.data,
            kinds,
        }
    }
}

fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        json_bytes(status, serde_json::to_vec(&self).unwrap_or_default())
    }
}

fn ok_json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => json_bytes(StatusCode::OK, body),
        Err(e) => ApiError::status(500, format!("cannot encode the response: {e}")).into_response(),
    }
}

/// How request bodies are read: the service's limit, the time a body may take to arrive from
/// its head ([`ServeConfig::body_timeout`]), and the bytes held at once.
#[derive(Clone, Debug)]
struct BodyRules {
    limit: usize,
    timeout: Duration,
    buffered: Buffered,
}

/// The router's state: what the handlers share, and the limits they apply. Kept here rather
/// than in per-request extensions, which would cost every request a map of boxed values.
struct Served {
    app: Arc<AppState>,
    body: BodyRules,
    /// The ONNX route's body limit.
    onnx_limit: usize,
    work: Work,
}

/// The request-body bytes the server holds at once over every request, in KiB: a body takes
/// its declared length from it before it is read (its route's limit when it declares none),
/// and gives it back when its request is done.
#[derive(Clone, Debug)]
struct Buffered {
    kib: Arc<tokio::sync::Semaphore>,
    limit: usize,
}

impl Buffered {
    fn new(limit: usize) -> Buffered {
        Buffered {
            kib: Arc::new(tokio::sync::Semaphore::new(kib(limit) as usize)),
            limit,
        }
    }
}

/// Bytes in KiB, rounded up, saturating.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// A body's share of [`Buffered`], held while its request runs.
type Held = tokio::sync::OwnedSemaphorePermit;

/// Reads the whole body under the body limit and the body timeout: 408 when it is late.
/// hyper then closes the connection, the body being unread. A body whose declared
/// `Content-Length` is over the limit is refused (413) before a byte of it is read, and a
/// client that sent `Expect: 100-continue` is never told to go on; one that would take the
/// bodies held past the server's budget is answered 503 the same way.
async fn read_body(
    req: Request,
    rules: &BodyRules,
    limit: usize,
) -> std::result::Result<(Bytes, Held), ApiError> {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared
        && n > limit as u64
    {
        return Err(ApiError {
            status: 413,
            error: format!("the body is {n} bytes, over the limit of {limit} bytes"),
            field: Some("body".into()),
        });
    }
    let wanted = declared.map_or(limit, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let Ok(held) = Arc::clone(&rules.buffered.kib).try_acquire_many_owned(kib(wanted).max(1))
    else {
        return Err(ApiError {
            status: 503,
            error: format!(
                "the server holds bodies of other requests and buffers at most {} bytes \
                 at once; retry later",
                rules.buffered.limit
            ),
            field: Some("body".into()),
        });
    };
    let mut collect = std::pin::pin!(Limited::new(req.into_body(), limit).collect());
    // A small body usually arrives with its head: then no timer is set for it.
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let collected = match first {
        Poll::Ready(r) => r,
        Poll::Pending => match tokio::time::timeout(rules.timeout, collect).await {
            Ok(r) => r,
            Err(_) => {
                return Err(ApiError {
                    status: 408,
                    error: format!(
                        "the request body did not arrive within {} s of its head",
                        rules.timeout.as_secs_f64()
                    ),
                    field: Some("body".into()),
                });
            }
        },
    };
    match collected {
        Ok(body) => Ok((body.to_bytes(), held)),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError {
            status: 413,
            error: format!("the body is over the limit of {limit} bytes"),
            field: Some("body".into()),
        }),
        Err(e) => Err(ApiError {
            status: 400,
            error: format!("the request body could not be read: {e}"),
            field: Some("body".into()),
        }),
    }
}

/// The work budget of a request: its deadline, and the slots of the pool that runs the work
/// too large for a tokio worker ([`ServeConfig::request_timeout`]).
#[derive(Clone, Debug)]
struct Work {
    timeout: Duration,
    slots: Arc<tokio::sync::Semaphore>,
}

/// When a request's work must be done.
#[derive(Clone, Copy, Debug)]
struct Deadline {
    at: std::time::Instant,
    timeout: Duration,
}

impl Deadline {
    /// 503 naming the limit once the deadline has passed.
    fn check(&self) -> std::result::Result<(), ApiError> {
        if std::time::Instant::now() < self.at {
            Ok(())
        } else {
            Err(overdue(self.timeout))
        }
    }
}

fn overdue(timeout: Duration) -> ApiError {
    ApiError::status(
        503,
        format!(
            "the request's work was not done within the server's limit of {} s per request \
             (`--request-timeout-s`)",
            timeout.as_secs_f64()
        ),
    )
}

impl Work {
    /// Runs `f` on the blocking pool under a deadline from now: 503 when no slot frees up or
    /// `f` is not done in time. `f` holds its slot until it returns, so work whose client was
    /// already answered still counts against the pool, and should check the deadline it is
    /// given between its stages.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(Deadline) -> std::result::Result<T, ApiError> + Send + 'static,
    ) -> std::result::Result<T, ApiError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let slot = match tokio::time::timeout_at(deadline, Arc::clone(&self.slots).acquire_owned())
            .await
        {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) | Err(_) => return Err(overdue(self.timeout)),
        };
        let limit = Deadline {
            at: deadline.into_std(),
            timeout: self.timeout,
        };
        let task = tokio::task::spawn_blocking(move || {
            let r = f(limit);
            drop(slot);
            r
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(ApiError::status(
                500,
                format!("prediction task failed: {e}"),
            )),
            Err(_) => Err(overdue(self.timeout)),
        }
    }
}

/// Runs `f` inline, answering 500 if it panics: a panic is a bug, never the input's fault,
/// and the client still gets an answer.
fn guarded<T>(
    f: impl FnOnce() -> std::result::Result<T, ApiError>,
) -> std::result::Result<T, ApiError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(ApiError::status(
            500,
            "the prediction failed (a bug: please report it)",
        ))
    })
}

/// A prediction error as a 422 naming `field`. Queries are validated before they are
/// predicted (`api`, then the predictor's own checks), so no size can overflow on the way:
/// nothing is caught by unwinding.
fn predicted<T>(field: &str, r: perfcast_predict::Result<T>) -> std::result::Result<T, ApiError> {
    r.map_err(|e| ApiError::field(field, e.to_string()))
}

fn predict_modules(
    predictor: &Predictor,
    queries: &ModuleQueries,
) -> std::result::Result<PredictResponse, ApiError> {
    let predictions = predicted("modules", predictor.predict_modules(&queries.0))?;
    let total_ms = predictions.iter().map(|p| p.ms).sum();
    Ok(PredictResponse {
        predictions,
        total_ms,
    })
}

async fn predict(
    State(served): State<Arc<Served>>,
    req: Request,
) -> std::result::Result<Response, ApiError> {
    let (body, held) = read_body(req, &served.body, served.body.limit).await?;
    let state = &served.app;
    let queries = guarded(|| api::parse_predict(&body))?;
    drop((body, held));
    // A module query takes about a microsecond (less than handing it to another thread
    // would), so it runs inline on the tokio worker; only large batches are moved to the
    // blocking pool, where a 10,000-module request (~10 ms) cannot stall other connections.
    let response = if queries.0.len() <= INLINE_MODULES {
        guarded(|| predict_modules(&state.predictor, &queries))?
    } else {
        let predictor = Arc::clone(&state.predictor);
        served
            .work
            .run(move |_| predict_modules(&predictor, &queries))
            .await?
    };
    Ok(ok_json(&response))
}

fn predict_network_query(
    state: &AppState,
    query: NetworkQuery,
    deadline: Option<Deadline>,
) -> std::result::Result<perfcast_predict::NetworkPrediction, ApiError> {
    let in_time = || deadline.as_ref().map_or(Ok(()), Deadline::check);
    // A fused prediction needs the graph itself, not its distinct modules.
    match query {
        NetworkQuery::Zoo {
            name,
            resolution,
            context,
            fusion,
        } if fusion != Fusion::None => {
            let net = zoo::build(&name, resolution)
                .map_err(|e| ApiError::field("resolution", e.to_string()))?;
            return predicted(
                "network",
                state
                    .predictor
                    .predict_network_fused(&net, &context, fusion),
            );
        }
        NetworkQuery::Inline {
            network,
            context,
            fusion,
        } if fusion != Fusion::None => {
            return predicted(
                "network",
                state
                    .predictor
                    .predict_network_fused(&network, &context, fusion),
            );
        }
        _ => {}
    }
    let (prepared, context): (Arc<PreparedNetwork>, Context) = match query {
        NetworkQuery::Zoo {
            name,
            resolution,
            context,
            ..
        } => {
            // The default resolution is the cache key `None`.
            let resolution = resolution.filter(|r| Some(*r) != zoo::default_resolution(&name));
            let key = (name, resolution);
            let cached = state
                .networks
                .read()
                .ok()
                .and_then(|m| m.get(&key).cloned());
            let prepared = match cached {
                Some(p) => p,
                None => {
                    let net = zoo::build(&key.0, key.1)
                        .map_err(|e| ApiError::field("resolution", e.to_string()))?;
                    let p = Arc::new(predicted("network", state.predictor.prepare(&net))?);
                    if let Ok(mut m) = state.networks.write()
                        && m.len() < NETWORK_CACHE
                    {
                        m.insert(key, Arc::clone(&p));
                    }
                    p
                }
            };
            (prepared, context)
        }
        NetworkQuery::Inline {
            network, context, ..
        } => (
            predicted("network", state.predictor.prepared(&network))?,
            context,
        ),
    };
    in_time()?;
    predicted(
        "network",
        state.predictor.predict_prepared(&prepared, &context),
    )
}

async fn predict_network(
    State(served): State<Arc<Served>>,
    req: Request,
) -> std::result::Result<Response, ApiError> {
    let (body, held) = read_body(req, &served.body, served.body.limit).await?;
    let (state, work) = (&served.app, &served.work);
    // A transformer config is built while it is parsed, which takes a while for thousands of
    // blocks: off the workers, parsing and all. Any body naming one goes there, a zoo name included.
    if body.windows(13).any(|w| w == b"\"transformer\"") {
        let state = Arc::clone(state);
        let prediction = work
            .run(move |deadline| {
                let query = api::parse_network(&body)?;
                drop((body, held));
                deadline.check()?;
                predict_network_query(&state, query, Some(deadline))
            })
            .await?;
        return Ok(ok_json(&prediction));
    }
    let query = guarded(|| api::parse_network(&body))?;
    drop((body, held));
    // A prepared zoo network is tens of microseconds: inline. A network given inline is
    // checked and prepared per request; a large one goes to the blocking pool.
    let big = matches!(&query, NetworkQuery::Inline { network, .. } if network.layers.len() > INLINE_MODULES);
    let prediction = if big {
        let state = Arc::clone(state);
        work.run(move |deadline| predict_network_query(&state, query, Some(deadline)))
            .await?
    } else {
        guarded(|| predict_network_query(state, query, None))?
    };
    Ok(ok_json(&prediction))
}

async fn predict_onnx(
    State(served): State<Arc<Served>>,
    req: Request,
) -> std::result::Result<Response, ApiError> {
    /// The prediction with what the import found.
    #[derive(Serialize)]
    struct OnnxResponse {
        #[serde(flatten)]
        prediction: perfcast_predict::NetworkPrediction,
        import: perfcast_graph::onnx::ImportReport,
    }
    let query = req.uri().query().map(str::to_string);
    let (body, held) = read_body(req, &served.body, served.onnx_limit).await?;
    let state = Arc::clone(&served.app);
    // Decoding a graph of hundreds of megabytes takes a while: off the tokio workers.
    let response = served
        .work
        .run(move |deadline| {
            let q = api::parse_onnx(query.as_deref(), &body)?;
            drop((body, held));
            deadline.check()?;
            let prepared = predicted("body", state.predictor.prepare(&q.network))?;
            deadline.check()?;
            let prediction = predicted(
                "body",
                state.predictor.predict_prepared(&prepared, &q.context),
            )?;
            Ok(OnnxResponse {
                prediction,
                import: q.report,
            })
        })
        .await?;
    Ok(ok_json(&response))
}

async fn bundle(State(served): State<Arc<Served>>) -> Response {
    json_bytes(StatusCode::OK, served.app.bundle_json.to_vec())
}

/// `GET /healthz`: up, and with how many worker threads (a load generator on the same
/// machine can tell whether it shares their cores).
async fn healthz(threads: usize) -> Response {
    json_bytes(
        StatusCode::OK,
        format!(r#"{{"status":"ok","threads":{threads}}}"#).into_bytes(),
    )
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::status(
        404,
        format!(
            "no such endpoint `{}`; endpoints: POST /v1/predict, POST /v1/predict/network, POST /v1/predict/onnx, GET /v1/bundle, GET /healthz",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::status(
        405,
        format!("method {method} is not allowed on `{}`", uri.path()),
    )
}

/// The router over shared state, with the body limit and body timeout of `config`.
pub fn router(state: Arc<AppState>, config: &ServeConfig) -> Router {
    let threads = config.threads;
    let served = Served {
        app: state,
        body: BodyRules {
            limit: config.body_limit,
            timeout: config.body_timeout,
            buffered: Buffered::new(config.onnx_limit.max(config.body_limit)),
        },
        onnx_limit: config.onnx_limit,
        work: Work {
            timeout: config.request_timeout,
            slots: Arc::new(tokio::sync::Semaphore::new(config.threads)),
        },
    };
    Router::new()
        .route("/v1/predict", post(predict))
        .route("/v1/predict/network", post(predict_network))
        .route("/v1/predict/onnx", post(predict_onnx))
        .route("/v1/bundle", get(bundle))
        .route("/healthz", get(move || healthz(threads)))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(Arc::new(served))
}

/// Serves on a bound listener, under the limits and timeouts of `config` (its `addr` and
/// `threads` are not used), until `shutdown` resolves; then closes the connections waiting
/// for a request, gives those in one `config.shutdown_timeout` to finish, and drops the rest.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    config: &ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    config.validate()?;
    conn::serve_router(listener, router(state, config), config.timeouts(), shutdown).await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// Starts `config.threads` worker threads (a single-threaded runtime each, connections dealt
/// to them in turn), binds `config.addr`, calls `on_bound` with the bound address (port 0
/// resolved), and serves until SIGINT or SIGTERM.
pub fn run(
    predictor: Arc<Predictor>,
    config: &ServeConfig,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    config.validate()?;
    let state = Arc::new(AppState::new(predictor)?);
    // The main thread accepts and watches for signals; the connections run on the workers.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Io)?;
    let workers = conn::Workers::start(config.threads).map_err(Error::Io)?;
    let signalled = std::sync::OnceLock::new();
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|e| Error::Bind {
                addr: config.addr,
                source: e,
            })?;
        on_bound(listener.local_addr().map_err(Error::Io)?);
        let shutdown = async {
            shutdown_signal().await;
            let _ = signalled.set(std::time::Instant::now());
        };
        conn::serve_router_on(
            listener,
            router(state, config),
            config.timeouts(),
            Some(&workers),
            shutdown,
        )
        .await;
        Ok(())
    });
    // One bound from the signal to the exit: a work still running on the blocking pool (an
    // import cannot be stopped midway) gets only what the connections left of it.
    let left = signalled.get().map_or(config.shutdown_timeout, |t| {
        config.shutdown_timeout.saturating_sub(t.elapsed())
    });
    workers.stop(left);
    runtime.shutdown_timeout(Duration::ZERO);
    served
}

#[cfg(test)]
mod tests {
    //! The connection timeouts and the shutdown bound, on loopback with short timeouts. Times
    //! are checked against generous bounds only: closed no earlier than its timeout, and
    //! within seconds.
    #![allow(clippy::unwrap_used)]

    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    use super::*;

    /// Far above any of the short timeouts here, far below a hung test.
    const BOUND: Duration = Duration::from_secs(5);

    struct TestServer {
        addr: SocketAddr,
        stop: oneshot::Sender<()>,
        done: tokio::task::JoinHandle<()>,
    }

    /// A server with `/healthz`, `/echo` (reads its body under the body timeout) and `/slow`
    /// (answers after 300 ms).
    async fn start(header: u64, body: u64, idle: u64, shutdown: u64) -> TestServer {
        let ms = Duration::from_millis;
        let rules = Arc::new(BodyRules {
            limit: 1000,
            timeout: ms(body),
            buffered: Buffered::new(2000),
        });
        let router = Router::new()
            .route("/healthz", get(|| healthz(1)))
            .route(
                "/echo",
                post(move |req: Request| async move {
                    read_body(req, &rules, rules.limit)
                        .await
                        .map(|(b, _)| json_bytes(StatusCode::OK, b.to_vec()))
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    json_bytes(StatusCode::OK, b"{}".to_vec())
                }),
            )
            .fallback(not_found);
        let timeouts = Timeouts {
            header: ms(header),
            idle: ms(idle),
            shutdown: ms(shutdown),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        // Connections run on worker threads, as `run` runs them.
        let done = tokio::spawn(async move {
            let workers = conn::Workers::start(2).unwrap();
            conn::serve_router_on(listener, router, timeouts, Some(&workers), async {
                let _ = stopped.await;
            })
            .await;
        });
        TestServer { addr, stop, done }
    }

    /// Reads until the peer closes (0 or an error): true if it did within [`BOUND`].
    async fn closed(s: &mut (impl AsyncReadExt + Unpin)) -> bool {
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
                Err(_) => return false,
            }
        }
    }

    /// One whole response on a keep-alive connection: status and body.
    async fn response(s: &mut TcpStream) -> (u16, String) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    return (text[9..12].parse().unwrap(), body.to_string());
                }
            }
            let n = tokio::time::timeout(BOUND, s.read(&mut chunk))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed mid-response: {text}");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    #[tokio::test]
    async fn a_head_sent_a_byte_at_a_time_is_cut_off_at_the_header_timeout() {
        let server = start(300, 10_000, 10_000, 1000).await;
        let (mut rx, mut tx) = TcpStream::connect(server.addr).await.unwrap().into_split();
        let t0 = Instant::now();
        // Never ends: a header field a byte per 50 ms, until the server closes.
        let writer = tokio::spawn(async move {
            let head = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-slow: ";
            for b in head.iter().chain(std::iter::repeat(&b'a')) {
                if tx.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        assert!(closed(&mut rx).await, "still open after {BOUND:?}");
        let elapsed = t0.elapsed();
        eprintln!("slow head closed after {elapsed:?} (header timeout 300 ms)");
        assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
        writer.abort();
        // A new connection is served as usual.
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
        let server = start(300, 10_000, 10_000, 1000).await;
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        assert!(closed(&mut s).await);
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_lives_past_the_header_timeout_and_closes_at_the_idle_timeout()
     {
        let server = start(300, 10_000, 1500, 1000).await;
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let get = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n";
        s.write_all(get).await.unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        // Idle for longer than the header timeout, well within the idle timeout.
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.write_all(get).await.unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        let t0 = Instant::now();
        assert!(
            closed(&mut s).await,
            "idle connection still open after {BOUND:?}"
        );
        let elapsed = t0.elapsed();
        eprintln!("idle connection closed after {elapsed:?} (idle timeout 1500 ms)");
        assert!(elapsed >= Duration::from_millis(1400), "{elapsed:?}");
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn a_body_declared_over_the_limit_is_refused_before_it_is_read() {
        let server = start(10_000, 10_000, 10_000, 1000).await;
        // 600 MB declared, nothing sent, `Expect: 100-continue`: answered 413 at once, never
        // 100 Continue (the limit here is 1000 bytes).
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(
            b"POST /echo HTTP/1.1\r\nhost: t\r\nexpect: 100-continue\r\ncontent-length: 600000000\r\n\r\n",
        )
        .await
        .unwrap();
        let (status, body) = response(&mut s).await;
        assert_eq!(status, 413, "{body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["field"], "body");
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .contains("600000000 bytes, over the limit of 1000"),
            "{body}"
        );
        // At the limit, read as usual.
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        assert_eq!(response(&mut s).await, (200, "{}".to_string()));
        drop(server.stop);
        server.done.await.unwrap();
    }

    /// Uploads at once were each read to the limit, the server holding several limits' worth.
    #[tokio::test]
    async fn bodies_past_the_servers_buffer_budget_are_refused_503_before_they_are_read() {
        let server = start(10_000, 10_000, 10_000, 1000).await;
        // Two bodies of 1000 bytes declared take the 2 KiB budget; each is told to go on.
        let head = b"POST /echo HTTP/1.1\r\nhost: t\r\nexpect: 100-continue\r\ncontent-length: 1000\r\n\r\n";
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(server.addr).await.unwrap();
            s.write_all(head).await.unwrap();
            let mut buf = [0u8; 25];
            tokio::time::timeout(BOUND, s.read_exact(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(buf.starts_with(b"HTTP/1.1 100 Continue"), "{buf:?}");
            held.push(s);
        }
        // A chunked body, which takes its route's limit, finds none left.
        let chunked = b"POST /echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(chunked).await.unwrap();
        let (status, body) = response(&mut s).await;
        assert_eq!(status, 503, "{body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["field"], "body");
        assert!(
            e["error"].as_str().unwrap().contains("at most 2000 bytes"),
            "{body}"
        );
        // Once a held body is read and answered, its share is back.
        held[0].write_all(&[b'x'; 1000]).await.unwrap();
        let (status, _) = response(&mut held[0]).await;
        assert_eq!(status, 200);
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(chunked).await.unwrap();
        assert_eq!(response(&mut s).await, (200, "{}".to_string()));
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn a_late_body_is_answered_408_in_json_and_the_connection_closed() {
        let server = start(10_000, 300, 10_000, 1000).await;
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\n{}")
            .await
            .unwrap();
        let (status, body) = response(&mut s).await;
        assert_eq!(status, 408, "{body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["field"], "body");
        assert!(e["error"].as_str().unwrap().contains("0.3 s"), "{body}");
        assert!(closed(&mut s).await);
        // A body on time is read.
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        assert_eq!(response(&mut s).await, (200, "{}".to_string()));
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn malformed_heads_are_answered_4xx_with_a_json_body() {
        let server = start(10_000, 10_000, 10_000, 1000).await;
        for head in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET /healthz HTTP/1.1\r\nhost: t\r\nbad header\r\n\r\n",
            b"GET /heal thz HTTP/1.1\r\n\r\n",
        ] {
            let mut s = TcpStream::connect(server.addr).await.unwrap();
            s.write_all(head).await.unwrap();
            let mut raw = Vec::new();
            tokio::time::timeout(BOUND, s.read_to_end(&mut raw))
                .await
                .unwrap()
                .unwrap();
            let text = String::from_utf8_lossy(&raw);
            let (h, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(h.starts_with("HTTP/1.1 400 "), "{text}");
            assert!(h.contains("content-type: application/json"), "{text}");
            let e: serde_json::Value = serde_json::from_str(body).unwrap();
            assert!(e["error"].as_str().unwrap().contains("malformed"), "{text}");
        }
        // The app's own 4xx are JSON as they were, and keep the connection.
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /nowhere HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        let (status, body) = response(&mut s).await;
        assert_eq!(status, 404);
        assert!(body.contains("/nowhere"), "{body}");
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        drop(server.stop);
        server.done.await.unwrap();
    }

    #[tokio::test]
    async fn shutdown_closes_half_sent_requests_finishes_those_in_flight_and_is_bounded() {
        // Header and body timeouts far off: only the shutdown may close these.
        let server = start(60_000, 60_000, 60_000, 500).await;
        let mut half_head = TcpStream::connect(server.addr).await.unwrap();
        half_head
            .write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-le")
            .await
            .unwrap();
        let mut half_body = TcpStream::connect(server.addr).await.unwrap();
        half_body
            .write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n{\"a\"")
            .await
            .unwrap();
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut idle).await.0, 200);
        let mut in_flight = TcpStream::connect(server.addr).await.unwrap();
        in_flight
            .write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;

        let t0 = Instant::now();
        server.stop.send(()).unwrap();
        // The request in flight is answered, and its connection closed after it.
        assert_eq!(response(&mut in_flight).await.0, 200);
        assert!(closed(&mut in_flight).await);
        // Waiting for a request: closed at once.
        assert!(closed(&mut half_head).await);
        assert!(closed(&mut idle).await);
        // A body that never comes holds its request until the shutdown bound.
        assert!(closed(&mut half_body).await);
        tokio::time::timeout(BOUND, server.done)
            .await
            .unwrap()
            .unwrap();
        let elapsed = t0.elapsed();
        eprintln!("shut down in {elapsed:?} with a half-sent body open (bound 500 ms)");
        assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
        // Nothing listens any more.
        assert!(TcpStream::connect(server.addr).await.is_err());
    }
}
