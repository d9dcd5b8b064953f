//! A load generator for the server, on loopback: keep-alive HTTP/1.1 connections driven from
//! one thread, a bounded number of requests within a bounded time, valid and malformed
//! requests mixed.
//!
//! The client is a few hundred lines over tokio's `TcpStream` rather than a general HTTP
//! client: requests are rendered once, up front, and a response is read by its
//! `Content-Length`, so on a 2-core machine the generator leaves as much CPU as it can to the
//! server it measures. Every request's outcome is checked: a valid request must be answered
//! 200 and a malformed one 4xx; anything else (another status, a timeout, a closed connection)
//! is an error.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, Result};

/// How long one request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Error messages kept in the report.
const ERROR_SAMPLES: usize = 5;

/// Which endpoint the valid requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// `POST /v1/predict` with one module each.
    Module,
    /// `POST /v1/predict/network` with a zoo network each.
    Network,
}

/// A load test.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server address (loopback).
    pub addr: SocketAddr,
    /// Most requests to send.
    pub requests: u64,
    /// Longest time to send them in.
    pub duration: Duration,
    /// Connections.
    pub concurrency: usize,
    /// Requests each connection writes back to back before reading their answers (HTTP/1.1
    /// pipelining; 1: one request in flight). Above 1 only valid requests are sent.
    pub pipeline: usize,
    /// Share of malformed requests, in [0, 1].
    pub invalid_share: f64,
    /// Endpoint of the valid requests.
    pub kind: LoadKind,
    /// The server's body limit, bytes: one malformed request in 50 is one byte over it (413).
    pub body_limit: usize,
    /// Seed of the request mix.
    pub seed: u64,
}

/// Latencies of one class of requests.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Requests answered (any status).
    pub count: u64,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Slowest, microseconds.
    pub max_us: f64,
}

impl Latency {
    fn of(mut ns: Vec<u64>) -> Latency {
        if ns.is_empty() {
            return Latency::default();
        }
        ns.sort_unstable();
        let q = |p: f64| ns[((ns.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
        Latency {
            count: ns.len() as u64,
            p50_us: q(0.5),
            p99_us: q(0.99),
            max_us: q(1.0),
        }
    }
}

/// What a load test measured.
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    /// Server address.
    pub addr: String,
    /// Endpoint of the valid requests.
    pub kind: LoadKind,
    /// Connections.
    pub concurrency: usize,
    /// Requests written back to back per connection.
    pub pipeline: usize,
    /// Requests completed (answered or failed).
    pub requests: u64,
    /// Wall time, seconds.
    pub duration_s: f64,
    /// Requests per second over the run.
    pub throughput_rps: f64,
    /// Valid requests.
    pub valid: Latency,
    /// Valid requests answered 200.
    pub valid_ok: u64,
    /// Malformed requests.
    pub invalid: Latency,
    /// Malformed requests answered 4xx.
    pub invalid_4xx: u64,
    /// Responses per status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Valid requests not answered 200, malformed ones not answered 4xx, timeouts, and
    /// connection failures.
    pub errors: u64,
    /// The first few errors, in words.
    pub error_samples: Vec<String>,
    /// Whether `GET /healthz` answered 200 after the run.
    pub healthy_after: bool,
    /// The server's worker threads, as its `GET /healthz` reports them (`None`: not reported).
    pub server_threads: Option<usize>,
    /// This machine's cores, which a server on loopback shares with the load generator.
    pub cores: usize,
}

impl LoadReport {
    /// Whether the run passed: no errors and the server healthy afterwards.
    pub fn passed(&self) -> bool {
        self.errors == 0 && self.healthy_after
    }

    /// Whether the server's worker threads take every core of this machine, one of which the
    /// load generator's own thread needs: the run then measures both sharing the cores.
    pub fn shares_cores(&self) -> bool {
        self.server_threads
            .is_some_and(|t| self.cores > 1 && t >= self.cores)
    }
}

/// A rendered request and what it must be answered with.
struct Template {
    bytes: Vec<u8>,
    valid: bool,
}

fn render(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nhost: perfcast\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The deterministic generator of the request mix.
use perfcast_core::rng::SplitMix64 as Rng;

fn valid_modules(rng: &mut Rng) -> Vec<Template> {
    let specs = [
        r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":3,"padding":1}"#,
        r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3,"bias":false}"#,
        r#"{"kind":"conv2d","in_channels":256,"out_channels":256,"input_hw":14,"kernel":3,"padding":1,"groups":256}"#,
        r#"{"kind":"conv2d","in_channels":128,"out_channels":256,"input_hw":28,"kernel":1}"#,
        r#"{"kind":"linear","tokens":128,"in_features":768,"out_features":3072}"#,
        r#"{"kind":"linear","in_features":4096,"out_features":1000}"#,
        r#"{"kind":"matmul","heads":12,"m":128,"k":64,"n":128}"#,
        r#"{"kind":"maxpool2d","channels":64,"input_hw":112,"kernel":3,"stride":2,"padding":1}"#,
        r#"{"kind":"avgpool2d","channels":512,"input_hw":7,"kernel":7}"#,
        r#"{"kind":"batchnorm2d","channels":128,"input_hw":28}"#,
        r#"{"kind":"layernorm","tokens":128,"features":768}"#,
        r#"{"kind":"relu","shape":[64,112,112]}"#,
        r#"{"kind":"gelu","shape":[1,128,3072]}"#,
        r#"{"kind":"add","shape":[256,56,56]}"#,
        r#"{"kind":"softmax","shape":[12,128,128]}"#,
        r#"{"kind":"tanh","shape":[1,64,512]}"#,
    ];
    (0..256)
        .map(|i| {
            let spec = specs[i % specs.len()];
            let batch = 1usize << rng.below(6);
            let phase = if rng.below(2) == 0 {
                "inference"
            } else {
                "training"
            };
            let body = format!(r#"{{"module":{spec},"batch":{batch},"phase":"{phase}"}}"#);
            Template {
                bytes: render("POST", "/v1/predict", body.as_bytes()),
                valid: true,
            }
        })
        .collect()
}

fn valid_networks(rng: &mut Rng) -> Vec<Template> {
    let names = perfcast_core::zoo::names();
    (0..64)
        .map(|i| {
            let batch = 1usize << rng.below(6);
            let phase = if rng.below(2) == 0 {
                "inference"
            } else {
                "training"
            };
            let body = format!(
                r#"{{"network":"{}","batch":{batch},"phase":"{phase}"}}"#,
                names[i % names.len()]
            );
            Template {
                bytes: render("POST", "/v1/predict/network", body.as_bytes()),
                valid: true,
            }
        })
        .collect()
}

/// Malformed requests, each of which must be answered 4xx.
fn invalid_requests(kind: LoadKind, body_limit: usize) -> Vec<Template> {
    let predict = |body: &str| render("POST", "/v1/predict", body.as_bytes());
    let network = |body: &str| render("POST", "/v1/predict/network", body.as_bytes());
    let mut out = vec![
        predict(r#"{"module": {"kind": "conv2d", "in_chan"#),
        predict("[1, 2, 3]"),
        predict(r#"{"module": {"kind": "conv9d", "in_channels": 3}}"#),
        predict(r#"{"module": {"kind": "linear", "in_features": 16}}"#),
        predict(r#"{"module": {"kind": "linear", "in_features": "many", "out_features": 4}}"#),
        predict(
            r#"{"module": {"kind": "conv2d", "in_channels": 3, "out_channels": 8, "input_hw": 4, "kernel": 9}}"#,
        ),
        predict(r#"{"module": {"kind": "relu", "shape": [1, 2, 3]}, "batch": 0}"#),
        predict(r#"{"module": {"kind": "relu", "shape": [1, 2, 3]}, "bogus": true}"#),
        predict(r#"{"modules": []}"#),
        predict(r#"{"module": {"kind": "relu", "shape": [1, 1, 18446744073709551615]}}"#),
        predict("\u{0}\u{1}\u{2} not json"),
        predict(""),
        network(r#"{"network": "vgg17"}"#),
        network(r#"{"network": "vgg16", "resolution": 0}"#),
        network(
            r#"{"network": {"name": "bad", "input": [3, 8, 8], "layers": [{"name": "c", "spec": {"kind": "conv2d", "in_channels": 4, "out_channels": 4, "input_hw": 8, "kernel": 3}}]}}"#,
        ),
        render("GET", "/v1/predict", b""),
        render("POST", "/v1/nope", b"{}"),
        render("DELETE", "/healthz", b""),
    ];
    if kind == LoadKind::Network {
        out.rotate_left(12);
    }
    let mut templates: Vec<Template> = out
        .into_iter()
        .map(|bytes| Template {
            bytes,
            valid: false,
        })
        .collect();
    // One in 50 malformed requests is one byte over the body limit (413): the only big
    // request, so the others fill the list to 50.
    let n = templates.len();
    let mut big = vec![b' '; body_limit + 1];
    big[0] = b'{';
    templates.push(Template {
        bytes: render("POST", "/v1/predict", &big),
        valid: false,
    });
    for i in 0..50usize.saturating_sub(n + 1) {
        let bytes = templates[i % n].bytes.clone();
        templates.push(Template {
            bytes,
            valid: false,
        });
    }
    templates
}

/// A parsed response head.
struct Response {
    status: u16,
    close: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one response (head and `Content-Length` body) from `stream` into `buf`, starting
/// with the bytes `buf` already holds from the read before (pipelined answers arrive
/// together); the bytes past the response are left in `rest`.
async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    rest: &mut Vec<u8>,
) -> std::io::Result<Response> {
    buf.clear();
    buf.append(rest);
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head =
        std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("response head is not UTF-8"))?;
    let status: u16 = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let mut length = None;
    let mut close = false;
    for line in head.split("\r\n").skip(1) {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.trim().eq_ignore_ascii_case("close");
            }
        }
    }
    let length = length.ok_or_else(|| bad("response without content-length"))?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed inside a response body",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    rest.extend_from_slice(&buf[head_end + length..]);
    buf.truncate(head_end + length);
    Ok(Response { status, close })
}

/// Sends one request and reads its response. The write and the read run together, so a
/// server that answers before reading all of a big body (413) is heard.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> std::io::Result<Response> {
    if request.len() <= 64 * 1024 {
        stream.write_all(request).await?;
        let mut rest = Vec::new();
        return read_response(stream, buf, &mut rest).await;
    }
    let (mut read, mut write) = stream.split();
    let writing = async {
        // The server may close its end once it has answered: not an error of the exchange.
        let _ = write.write_all(request).await;
    };
    let reading = async {
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        buf.clear();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(i) = find(buf, b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..i]).map_err(|_| bad("head not UTF-8"))?;
                let status = head
                    .get(9..12)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("no status code"))?;
                // After a big request the connection is always replaced.
                return Ok(Response {
                    status,
                    close: true,
                });
            }
            let n = read.read(&mut chunk).await?;
            if n == 0 {
                return Err(bad("connection closed before a response"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let ((), response) = tokio::join!(writing, reading);
    response
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// A request in one line: its request line and the start of its body.
fn describe(request: &[u8]) -> String {
    let text = String::from_utf8_lossy(&request[..request.len().min(400)]).into_owned();
    let line = text.lines().next().unwrap_or_default();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let body: String = body.chars().take(160).collect();
    format!("{line} {body}")
}

/// What one connection saw.
#[derive(Default)]
struct Tally {
    valid_ns: Vec<u64>,
    invalid_ns: Vec<u64>,
    valid_ok: u64,
    invalid_4xx: u64,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
    /// Requests that got no response (connection failures, timeouts).
    unanswered: u64,
    samples: Vec<String>,
}

impl Tally {
    /// Counts a valid request's answer (`body`: the whole response) after `ns`.
    fn valid(&mut self, status: u16, ns: u64, body: &[u8]) {
        self.valid_ns.push(ns);
        if status == 200 {
            self.valid_ok += 1;
        } else {
            let body = String::from_utf8_lossy(body);
            self.error(format!("valid request answered {status}: {body}"));
        }
    }

    fn error(&mut self, message: String) {
        self.errors += 1;
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(message);
        }
    }
}

struct Shared {
    next: AtomicU64,
    limit: u64,
    deadline: Instant,
    valid: Vec<Template>,
    invalid: Vec<Template>,
    invalid_share: f64,
    addr: SocketAddr,
}

/// A connection sending `depth` valid requests at a time, each in one write, and reading their
/// answers in order; a request's latency runs from the write to its own answer.
async fn pipelined_worker(shared: Arc<Shared>, seed: u64, depth: usize) -> Tally {
    let mut tally = Tally::default();
    let mut rng = Rng(seed);
    let (mut buf, mut rest, mut out) = (Vec::new(), Vec::new(), Vec::new());
    let mut stream: Option<TcpStream> = None;
    loop {
        let mut batch = 0;
        out.clear();
        while batch < depth
            && Instant::now() < shared.deadline
            && shared.next.fetch_add(1, Ordering::Relaxed) < shared.limit
        {
            out.extend_from_slice(&shared.valid[rng.below(shared.valid.len())].bytes);
            batch += 1;
        }
        if batch == 0 {
            return tally;
        }
        let start = Instant::now();
        if stream.is_none() {
            rest.clear();
            match connect(shared.addr).await {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    tally.unanswered += batch as u64;
                    tally.error(format!("connect: {e}"));
                    continue;
                }
            }
        }
        let Some(s) = stream.as_mut() else { continue };
        let answered = tokio::time::timeout(REQUEST_TIMEOUT, async {
            s.write_all(&out).await?;
            let mut answered = 0;
            while answered < batch {
                let r = read_response(s, &mut buf, &mut rest).await?;
                *tally.statuses.entry(r.status).or_default() += 1;
                tally.valid(r.status, start.elapsed().as_nanos() as u64, &buf);
                answered += 1;
                if r.close {
                    break;
                }
            }
            std::io::Result::Ok(answered)
        })
        .await;
        match answered {
            Ok(Ok(n)) if n == batch => {}
            Ok(Ok(n)) => {
                tally.unanswered += (batch - n) as u64;
                tally.error(format!(
                    "connection closed after {n} of {batch} pipelined requests"
                ));
                stream = None;
            }
            Ok(Err(e)) => {
                tally.unanswered += batch as u64;
                tally.error(format!("pipelined requests failed: {e}"));
                stream = None;
            }
            Err(_) => {
                tally.unanswered += batch as u64;
                tally.error(format!("no answers within {REQUEST_TIMEOUT:?}"));
                stream = None;
            }
        }
    }
}

async fn worker(shared: Arc<Shared>, seed: u64) -> Tally {
    let mut tally = Tally::default();
    let mut rng = Rng(seed);
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut stream: Option<TcpStream> = None;
    while shared.next.fetch_add(1, Ordering::Relaxed) < shared.limit
        && Instant::now() < shared.deadline
    {
        let invalid = rng.unit() < shared.invalid_share;
        let t = if invalid {
            &shared.invalid[rng.below(shared.invalid.len())]
        } else {
            &shared.valid[rng.below(shared.valid.len())]
        };
        let start = Instant::now();
        if stream.is_none() {
            match connect(shared.addr).await {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    tally.unanswered += 1;
                    tally.error(format!("connect: {e}"));
                    continue;
                }
            }
        }
        let Some(s) = stream.as_mut() else { continue };
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, exchange(s, &t.bytes, &mut buf)).await;
        let ns = start.elapsed().as_nanos() as u64;
        match outcome {
            Ok(Ok(r)) => {
                *tally.statuses.entry(r.status).or_default() += 1;
                if t.valid {
                    tally.valid(r.status, ns, &buf);
                } else {
                    tally.invalid_ns.push(ns);
                    if (400..500).contains(&r.status) {
                        tally.invalid_4xx += 1;
                    } else {
                        tally.error(format!(
                            "malformed request answered {}: {}",
                            r.status,
                            describe(&t.bytes)
                        ));
                    }
                }
                if r.close {
                    stream = None;
                }
            }
            Ok(Err(e)) => {
                tally.unanswered += 1;
                tally.error(format!("request failed: {e}"));
                stream = None;
            }
            Err(_) => {
                tally.unanswered += 1;
                tally.error(format!("no response within {REQUEST_TIMEOUT:?}"));
                stream = None;
            }
        }
    }
    tally
}

/// `GET /healthz` on a fresh connection: its JSON body when answered 200.
async fn health(addr: SocketAddr) -> Option<serde_json::Value> {
    let ask = async {
        let mut s = connect(addr).await.ok()?;
        let mut buf = Vec::new();
        let r = exchange(&mut s, &render("GET", "/healthz", b""), &mut buf)
            .await
            .ok()?;
        if r.status != 200 {
            return None;
        }
        let body = &buf[find(&buf, b"\r\n\r\n")? + 4..];
        // A body that is not JSON still says the server is up.
        Some(serde_json::from_slice(body).unwrap_or(serde_json::Value::Null))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}

/// The worker threads a server reports on `GET /healthz` (`None`: no answer, or none said).
async fn server_threads(addr: SocketAddr) -> Option<usize> {
    usize::try_from(health(addr).await?.get("threads")?.as_u64()?).ok()
}

/// Runs a load test on a single-threaded runtime (the server gets the other cores).
pub fn run(config: &LoadConfig) -> Result<LoadReport> {
    if config.concurrency == 0 {
        return Err(Error::Config(
            "`concurrency` must be at least 1, got 0".into(),
        ));
    }
    if config.pipeline == 0 {
        return Err(Error::Config("`pipeline` must be at least 1, got 0".into()));
    }
    if config.pipeline > 1 && config.invalid_share > 0.0 {
        return Err(Error::Config(format!(
            "`pipeline` {} sends valid requests only: set `invalid-share` to 0",
            config.pipeline
        )));
    }
    if !(0.0..=1.0).contains(&config.invalid_share) {
        return Err(Error::Config(format!(
            "`invalid-share` must be in [0, 1], got {}",
            config.invalid_share
        )));
    }
    let mut rng = Rng(config.seed);
    let valid = match config.kind {
        LoadKind::Module => valid_modules(&mut rng),
        LoadKind::Network => valid_networks(&mut rng),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Io)?;
    // Asked before the clock starts.
    let server_threads = runtime.block_on(server_threads(config.addr));
    let start = Instant::now();
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        limit: config.requests,
        deadline: start + config.duration,
        valid,
        invalid: invalid_requests(config.kind, config.body_limit),
        invalid_share: config.invalid_share,
        addr: config.addr,
    });
    let (tallies, elapsed, healthy_after) = runtime.block_on(async {
        let tasks: Vec<_> = (0..config.concurrency)
            .map(|i| {
                let seed = config.seed ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
                let shared = Arc::clone(&shared);
                if config.pipeline > 1 {
                    tokio::spawn(pipelined_worker(shared, seed, config.pipeline))
                } else {
                    tokio::spawn(worker(shared, seed))
                }
            })
            .collect();
        let mut tallies = Vec::new();
        for t in tasks {
            if let Ok(tally) = t.await {
                tallies.push(tally);
            }
        }
        let elapsed = start.elapsed();
        (tallies, elapsed, health(config.addr).await.is_some())
    });
    let mut all = Tally::default();
    for t in tallies {
        all.valid_ns.extend(t.valid_ns);
        all.invalid_ns.extend(t.invalid_ns);
        all.valid_ok += t.valid_ok;
        all.invalid_4xx += t.invalid_4xx;
        all.errors += t.errors;
        all.unanswered += t.unanswered;
        for (k, v) in t.statuses {
            *all.statuses.entry(k).or_default() += v;
        }
        for s in t.samples {
            if all.samples.len() < ERROR_SAMPLES {
                all.samples.push(s);
            }
        }
    }
    let requests = (all.valid_ns.len() + all.invalid_ns.len()) as u64 + all.unanswered;
    let duration_s = elapsed.as_secs_f64();
    Ok(LoadReport {
        addr: config.addr.to_string(),
        kind: config.kind,
        concurrency: config.concurrency,
        pipeline: config.pipeline,
        requests,
        duration_s,
        throughput_rps: requests as f64 / duration_s.max(1e-9),
        valid: Latency::of(all.valid_ns),
        valid_ok: all.valid_ok,
        invalid: Latency::of(all.invalid_ns),
        invalid_4xx: all.invalid_4xx,
        statuses: all.statuses,
        errors: all.errors,
        error_samples: all.samples,
        healthy_after,
        server_threads,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn latency_quantiles_are_order_statistics() {
        let l = Latency::of((1..=100).map(|v| v * 1000).collect());
        assert_eq!(l.count, 100);
        assert_eq!(l.p50_us, 51.0);
        assert_eq!(l.p99_us, 99.0);
        assert_eq!(l.max_us, 100.0);
        assert_eq!(Latency::of(Vec::new()).count, 0);
    }

    #[test]
    fn every_template_is_a_complete_request() {
        let mut rng = Rng(1);
        for t in valid_modules(&mut rng)
            .into_iter()
            .chain(valid_networks(&mut rng))
            .chain(invalid_requests(LoadKind::Module, 1000))
        {
            let head_end = find(&t.bytes, b"\r\n\r\n").unwrap() + 4;
            let head = std::str::from_utf8(&t.bytes[..head_end]).unwrap();
            let len: usize = head
                .split("\r\n")
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(t.bytes.len(), head_end + len, "{head}");
        }
        let invalid = invalid_requests(LoadKind::Module, 1000);
        assert_eq!(invalid.len(), 50);
        assert_eq!(invalid.iter().filter(|t| t.bytes.len() > 1000).count(), 1);
    }
}
