//! The HTTP server: routes, handlers, body limits, graceful shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use perfcast_core::{Context, zoo};
use perfcast_select::{Predictor, PreparedNetwork};
use serde::Serialize;

use crate::api::{self, ApiError, ModuleQueries, NetworkQuery, PredictResponse};
use crate::error::{Error, Result};

/// Default request-body limit: 1 MiB, about 10,000 module specs.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

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
    /// tokio worker threads; default the available cores.
    pub threads: usize,
    /// Largest request body, bytes; default [`DEFAULT_BODY_LIMIT`].
    pub body_limit: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8787)),
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            body_limit: DEFAULT_BODY_LIMIT,
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

/// The body, or the JSON error for one over the limit (413) or cut off.
fn body(body: std::result::Result<Bytes, BytesRejection>) -> std::result::Result<Bytes, ApiError> {
    body.map_err(|r| ApiError {
        status: r.status().as_u16(),
        error: r.body_text(),
        field: Some("body".into()),
    })
}

/// Runs a prediction, turning a panic (an arithmetic overflow on an extreme query that got
/// past validation) into a 422 instead of a dropped connection.
fn guarded<T>(
    field: &str,
    f: impl FnOnce() -> perfcast_select::Result<T>,
) -> std::result::Result<T, ApiError> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiError::field(field, e.to_string())),
        Err(_) => Err(ApiError::field(
            field,
            "the query is too large to predict (arithmetic overflow)",
        )),
    }
}

fn predict_modules(
    predictor: &Predictor,
    queries: &ModuleQueries,
) -> std::result::Result<PredictResponse, ApiError> {
    let predictions = guarded("modules", || predictor.predict_modules(&queries.0))?;
    let total_ms = predictions.iter().map(|p| p.ms).sum();
    Ok(PredictResponse {
        predictions,
        total_ms,
    })
}

async fn predict(
    State(state): State<Arc<AppState>>,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let queries = api::parse_predict(&body(raw)?)?;
    // A module query takes about a microsecond (less than handing it to another thread
    // would), so it runs inline on the tokio worker; only large batches are moved to the
    // blocking pool, where a 10,000-module request (~10 ms) cannot stall other connections.
    let response = if queries.0.len() <= INLINE_MODULES {
        predict_modules(&state.predictor, &queries)?
    } else {
        let predictor = Arc::clone(&state.predictor);
        tokio::task::spawn_blocking(move || predict_modules(&predictor, &queries))
            .await
            .map_err(|e| ApiError::status(500, format!("prediction task failed: {e}")))??
    };
    Ok(ok_json(&response))
}

fn predict_network_query(
    state: &AppState,
    query: NetworkQuery,
) -> std::result::Result<perfcast_select::NetworkPrediction, ApiError> {
    let (prepared, context): (Arc<PreparedNetwork>, Context) = match query {
        NetworkQuery::Zoo {
            name,
            resolution,
            context,
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
                    let p = Arc::new(guarded("network", || state.predictor.prepare(&net))?);
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
        NetworkQuery::Inline { network, context } => (
            Arc::new(guarded("network", || state.predictor.prepare(&network))?),
            context,
        ),
    };
    guarded("network", || {
        state.predictor.predict_prepared(&prepared, &context)
    })
}

async fn predict_network(
    State(state): State<Arc<AppState>>,
    raw: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Response, ApiError> {
    let query = api::parse_network(&body(raw)?)?;
    // A prepared zoo network is tens of microseconds: inline. A network given inline is
    // checked and prepared per request; a large one goes to the blocking pool.
    let big = matches!(&query, NetworkQuery::Inline { network, .. } if network.layers.len() > INLINE_MODULES);
    let prediction = if big {
        let state = Arc::clone(&state);
        tokio::task::spawn_blocking(move || predict_network_query(&state, query))
            .await
            .map_err(|e| ApiError::status(500, format!("prediction task failed: {e}")))??
    } else {
        predict_network_query(&state, query)?
    };
    Ok(ok_json(&prediction))
}

async fn bundle(State(state): State<Arc<AppState>>) -> Response {
    json_bytes(StatusCode::OK, state.bundle_json.to_vec())
}

async fn healthz() -> Response {
    json_bytes(StatusCode::OK, br#"{"status":"ok"}"#.to_vec())
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::status(
        404,
        format!(
            "no such endpoint `{}`; endpoints: POST /v1/predict, POST /v1/predict/network, GET /v1/bundle, GET /healthz",
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

/// The router over shared state, with a body limit of `body_limit` bytes.
pub fn router(state: Arc<AppState>, body_limit: usize) -> Router {
    Router::new()
        .route("/v1/predict", post(predict))
        .route("/v1/predict/network", post(predict_network))
        .route("/v1/bundle", get(bundle))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Serves on a bound listener until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    body_limit: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    // Small request/response pairs: Nagle's delay would add tens of milliseconds.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(state, body_limit))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::Io)
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

/// Builds a runtime with `config.threads` workers, binds `config.addr`, calls `on_bound`
/// with the bound address (port 0 resolved), and serves until SIGINT or SIGTERM.
pub fn run(
    predictor: Arc<Predictor>,
    config: &ServeConfig,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    if config.threads == 0 {
        return Err(Error::Config("`threads` must be at least 1, got 0".into()));
    }
    let state = Arc::new(AppState::new(predictor)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .enable_all()
        .build()
        .map_err(Error::Io)?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|e| Error::Bind {
                addr: config.addr,
                source: e,
            })?;
        on_bound(listener.local_addr().map_err(Error::Io)?);
        serve(listener, state, config.body_limit, shutdown_signal()).await
    })
}
