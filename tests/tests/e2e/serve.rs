//! `perfcast serve` and `perfcast loadtest` end to end: a server on an ephemeral loopback
//! port, valid and invalid requests, a short load test, a client sending its head a byte at a
//! time, and a clean stop on SIGTERM with half-sent requests open.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::train::{small_dataset, train_bundle};
use crate::{perfcast, run, stderr};

/// One request on a fresh connection: status and body.
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) and close before reading all of a big body.
    let _ = s.write_all(body);
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Reads until the server closes the connection (0 or an error); false if it is still open
/// after `bound`.
fn closed_within(s: &mut TcpStream, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Stops the server if a check fails first.
pub(crate) struct Server(Child);

/// A server on `bundle` at an ephemeral loopback port, with its address; stderr drained.
pub(crate) fn start(bundle: &std::path::Path) -> (Server, SocketAddr) {
    start_with(bundle, &[])
}

/// [`start`] with more arguments of `perfcast serve`.
pub(crate) fn start_with(bundle: &std::path::Path, extra: &[&str]) -> (Server, SocketAddr) {
    let mut child = perfcast()
        .args([
            "serve",
            "--bundle",
            bundle.to_str().unwrap(),
            "--addr",
            "127.0.0.1:0",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let server = Server(child);
    let addr: SocketAddr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once("listening on http://")
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
        })
        .expect("the server prints its address")
        .parse()
        .unwrap();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    (server, addr)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_answers_valid_and_invalid_requests_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "24");
    let bundle = train_bundle(tmp.path(), &data, "ridge,trees");

    let mut child = perfcast()
        .args([
            "serve",
            "--bundle",
            bundle.to_str().unwrap(),
            "--addr",
            "127.0.0.1:0",
            "--threads",
            "2",
            "--max-body-kb",
            "64",
            // Short timeouts, checked below; the body timeout long, so that only the
            // shutdown bound can end a request whose body never comes.
            "--header-timeout-s",
            "0.5",
            "--idle-timeout-s",
            "5",
            "--body-timeout-s",
            "60",
            "--shutdown-timeout-s",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let server = Server(child);
    let addr: SocketAddr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once("listening on http://")
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
        })
        .expect("the server prints its address")
        .parse()
        .unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    // Keep draining stderr so the server never blocks on a full pipe.
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let (status, body) = http(addr, "GET", "/healthz", b"");
    let health = json(&body);
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    assert_eq!(
        health["threads"], 2,
        "the worker threads it was started with"
    );

    let (status, body) = http(addr, "GET", "/v1/bundle", b"");
    assert_eq!(status, 200);
    let info = json(&body);
    let kinds: Vec<&str> = info["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["linear", "relu"]);

    // One module, then several with their own contexts; a kind without a model falls back.
    let (status, body) = http(
        addr,
        "POST",
        "/v1/predict",
        br#"{"module": {"kind": "linear", "in_features": 64, "out_features": 8}, "batch": 4}"#,
    );
    assert_eq!(status, 200, "{body}");
    let p = json(&body);
    assert_eq!(p["predictions"].as_array().unwrap().len(), 1);
    let one = p["predictions"][0]["ms"].as_f64().unwrap();
    assert!(one > 0.0 && p["predictions"][0]["fallback"] == false);
    let (status, body) = http(
        addr,
        "POST",
        "/v1/predict",
        br#"{"modules": [
            {"kind": "linear", "in_features": 64, "out_features": 8, "batch": 4},
            {"kind": "relu", "shape": [8, 16, 16], "phase": "training"},
            {"kind": "gelu", "shape": [1, 4, 64]}], "phase": "inference"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let p = json(&body);
    let preds = p["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), 3);
    // The same query answers the same, alone or in a batch.
    assert_eq!(preds[0]["ms"].as_f64().unwrap(), one);
    assert_eq!(preds[2]["fallback"], true);
    let sum: f64 = preds.iter().map(|q| q["ms"].as_f64().unwrap()).sum();
    assert!((p["total_ms"].as_f64().unwrap() - sum).abs() <= 1e-12 * sum);

    // A zoo network.
    let (status, body) = http(
        addr,
        "POST",
        "/v1/predict/network",
        br#"{"network": "lenet5", "batch": 2, "phase": "training"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let p = json(&body);
    assert_eq!(p["network"], "lenet5");
    assert!(p["layers"].as_array().unwrap().len() > 5);
    assert!(p["total_ms"].as_f64().unwrap() > 0.0);

    // Invalid requests: a 4xx with a JSON error naming the field.
    for (path, body, want_status, want_field) in [
        ("/v1/predict", &br#"{"module": {"kind": "linear""#[..], 400, "body"),
        (
            "/v1/predict",
            br#"{"module": {"kind": "linear", "in_features": "x", "out_features": 2}}"#,
            422,
            "module.in_features",
        ),
        (
            "/v1/predict",
            br#"{"modules": [{"kind": "relu", "shape": [1, 1, 1]}, {"kind": "conv2d", "in_channels": 3, "out_channels": 4, "input_hw": 4, "kernel": 9}]}"#,
            422,
            "modules[1]",
        ),
        (
            "/v1/predict",
            br#"{"module": {"kind": "relu", "shape": [1, 1, 1]}, "batch": 0}"#,
            422,
            "batch",
        ),
        ("/v1/predict/network", br#"{"network": "vgg17"}"#, 422, "network"),
        (
            "/v1/predict/network",
            br#"{"network": "vgg16", "resolution": 0}"#,
            422,
            "resolution",
        ),
    ] {
        let (status, text) = http(addr, "POST", path, body);
        assert_eq!(status, want_status, "{text}");
        let e = json(&text);
        assert_eq!(e["field"], want_field, "{text}");
        assert!(!e["error"].as_str().unwrap().is_empty());
    }
    let (status, text) = http(addr, "POST", "/v1/nowhere", b"{}");
    assert_eq!(status, 404);
    assert!(
        json(&text)["error"]
            .as_str()
            .unwrap()
            .contains("/v1/nowhere")
    );
    let (status, text) = http(addr, "GET", "/v1/predict", b"");
    assert_eq!(status, 405);
    assert!(json(&text)["error"].as_str().unwrap().contains("GET"));
    let big = vec![b' '; 64 * 1024 + 1];
    let (status, text) = http(addr, "POST", "/v1/predict", &big);
    assert_eq!(status, 413, "{text}");
    assert_eq!(json(&text)["field"], "body");

    // Sizes past what perfcast accepts are refused before any arithmetic on them; sizes
    // within the limits but enormous are predicted or refused, never a panic (the log is
    // checked at the end).
    for body in [
        &br#"{"module": {"kind": "matmul", "m": 16777216, "k": 16777216, "n": 16777216}}"#[..],
        br#"{"module": {"kind": "matmul", "heads": 16777216, "m": 16777216, "k": 16777216, "n": 16777216}, "batch": 1048576}"#,
        br#"{"module": {"kind": "linear", "in_features": 16777216, "out_features": 16777216}, "batch": 1048576}"#,
    ] {
        let (status, text) = http(addr, "POST", "/v1/predict", body);
        assert_eq!(status, 422, "{text}");
        assert_eq!(json(&text)["field"], "module", "{text}");
    }
    let (status, text) = http(
        addr,
        "POST",
        "/v1/predict",
        br#"{"module": {"kind": "matmul", "m": 1048576, "k": 1048576, "n": 1048576}, "batch": 1048576}"#,
    );
    assert!(status == 200 || status == 422, "{status} {text}");
    json(&text);

    // A request line hyper cannot parse is answered 400 with a JSON body too.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"NOT A REQUEST\r\n\r\n").unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").expect("an answer");
    assert!(head.starts_with("HTTP/1.1 400 "), "{raw}");
    assert!(head.contains("content-type: application/json"), "{raw}");
    assert!(!json(body)["error"].as_str().unwrap().is_empty());

    // A head sent a byte at a time is cut off at the header timeout (0.5 s).
    let mut slow = TcpStream::connect(addr).unwrap();
    let mut writer = slow.try_clone().unwrap();
    let t0 = Instant::now();
    let dripping = std::thread::spawn(move || {
        let head = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-slow: ";
        for b in head.iter().chain(std::iter::repeat_n(&b'a', 200)) {
            if writer.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)),
        "a slow head held the connection"
    );
    let slow_closed = t0.elapsed();
    assert!(slow_closed >= Duration::from_millis(500), "{slow_closed:?}");
    eprintln!("serve e2e: a head sent a byte per 50 ms was closed after {slow_closed:?}");
    dripping.join().unwrap();

    // A short load test: valid and malformed requests mixed, every one answered as meant.
    let o = run(&[
        "loadtest",
        "--addr",
        &addr.to_string(),
        "--requests",
        "400",
        "--duration-s",
        "60",
        "--concurrency",
        "4",
        "--invalid-share",
        "0.5",
        "--max-body-kb",
        "64",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(r["requests"], 400);
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["healthy_after"], true);
    // The server's threads, read from its health answer, beside this machine's cores.
    assert_eq!(r["server_threads"], 2, "{r}");
    assert!(r["cores"].as_u64().unwrap() >= 1, "{r}");
    let valid = r["valid"]["count"].as_u64().unwrap();
    let invalid = r["invalid"]["count"].as_u64().unwrap();
    assert_eq!(valid + invalid, 400);
    assert_eq!(r["valid_ok"].as_u64().unwrap(), valid);
    assert_eq!(r["invalid_4xx"].as_u64().unwrap(), invalid);
    assert!(valid > 100 && invalid > 100, "{r}");

    // Pipelined: 8 requests written back to back per connection, each answered 200 in order.
    let o = run(&[
        "loadtest",
        "--addr",
        &addr.to_string(),
        "--requests",
        "203",
        "--duration-s",
        "60",
        "--concurrency",
        "3",
        "--pipeline",
        "8",
        "--invalid-share",
        "0",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(
        (r["requests"].as_u64(), r["errors"].as_u64()),
        (Some(203), Some(0)),
        "{r}"
    );
    assert_eq!(r["valid_ok"], 203, "{r}");
    assert_eq!(r["pipeline"], 8);
    // Pipelining sends valid requests only.
    let o = run(&["loadtest", "--addr", &addr.to_string(), "--pipeline", "4"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`pipeline` 4 sends valid requests only"),
        "{}",
        stderr(&o)
    );

    // The server is still healthy, then stops cleanly on SIGTERM with exit 0, within its
    // shutdown bound (1 s) though a request whose body never comes is open, and a head
    // half sent (the header timeout restarts for it just before the signal).
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
    let mut half_body = TcpStream::connect(addr).unwrap();
    half_body
        .write_all(b"POST /v1/predict HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n{\"mod")
        .unwrap();
    let mut half_head = TcpStream::connect(addr).unwrap();
    half_head
        .write_all(b"POST /v1/predict HTTP/1.1\r\nhost: t\r\ncont")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut server = server;
    let pid = server.0.id().to_string();
    let t0 = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM (shutdown bound 1 s)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped = t0.elapsed();
    eprintln!("serve e2e: exited {stopped:?} after SIGTERM with a half-sent request open");
    assert!(status.success(), "exit status {status:?}");
    assert!(closed_within(&mut half_body, Duration::from_secs(5)));
    assert!(closed_within(&mut half_head, Duration::from_secs(5)));
    let log = drain.join().unwrap().join("\n");
    assert!(log.contains("shut down"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// `POST /v1/predict/onnx`: the file as the body, the rest in the query string;
/// the same total as `perfcast predict --onnx`, bit for bit, with the import report; a
/// transformer config gives the CLI's total in the training phase too (dropout built); bad
/// files and parameters are 422s naming what is wrong.
#[test]
fn serve_predicts_onnx_files_and_transformer_configs_as_the_cli_does() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bundle = root.join("checkpoints/gpu");
    let onnx = root.join("tests/fixtures/onnx");
    let (_server, addr) = start(&bundle);
    let cli_total = |args: &[&str]| -> f64 {
        let mut all = vec![
            "predict",
            "--bundle",
            bundle.to_str().unwrap(),
            "--format",
            "json",
        ];
        all.extend_from_slice(args);
        let o = run(&all);
        assert!(o.status.success(), "{all:?}: {}", stderr(&o));
        json(&String::from_utf8_lossy(&o.stdout))["total_ms"]
            .as_f64()
            .unwrap()
    };
    for (file, query, args) in [
        (
            "cnn-residual.onnx",
            "batch=2&phase=training",
            vec!["--batch", "2", "--phase", "training"],
        ),
        (
            "decoder-2l.onnx",
            "batch=4&seq=32",
            vec!["--batch", "4", "--seq", "32"],
        ),
    ] {
        let bytes = std::fs::read(onnx.join(file)).unwrap();
        let path = format!("/v1/predict/onnx?{query}&name=model");
        let (status, body) = http(addr, "POST", &path, &bytes);
        assert_eq!(status, 200, "{file}: {body}");
        let served = json(&body);
        let file_path = onnx.join(file);
        let mut args = args.clone();
        args.extend_from_slice(&["--onnx", file_path.to_str().unwrap()]);
        assert_eq!(
            served["total_ms"].as_f64().unwrap().to_bits(),
            cli_total(&args).to_bits(),
            "{file}"
        );
        assert!(served["import"]["layers"].as_u64().unwrap() > 0, "{body}");
        assert_eq!(served["network"], "model", "{body}");
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("examples/transformers/gpt2.json")).unwrap(),
    )
    .unwrap();
    let request =
        serde_json::json!({"transformer": config, "seq": 64, "batch": 2, "phase": "training"});
    let (status, body) = http(
        addr,
        "POST",
        "/v1/predict/network",
        request.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let gpt2 = root.join("examples/transformers/gpt2.json");
    let cli = cli_total(&[
        "--transformer",
        gpt2.to_str().unwrap(),
        "--seq",
        "64",
        "--batch",
        "2",
        "--phase",
        "training",
    ]);
    assert_eq!(
        json(&body)["total_ms"].as_f64().unwrap().to_bits(),
        cli.to_bits(),
        "{body}"
    );

    let unknown = std::fs::read(onnx.join("unknown-op.onnx")).unwrap();
    for (path, bytes, field, says) in [
        (
            "/v1/predict/onnx?batch=1",
            &b"not a protobuf"[..],
            "body",
            "malformed ONNX",
        ),
        ("/v1/predict/onnx?strict=true", &unknown[..], "body", "node"),
        ("/v1/predict/onnx?batch=0", &unknown[..], "batch", "batch"),
        (
            "/v1/predict/onnx?bacth=2",
            &unknown[..],
            "bacth",
            "unknown parameter",
        ),
        (
            "/v1/predict/onnx?strict=maybe",
            &unknown[..],
            "strict",
            "strict=maybe",
        ),
        ("/v1/predict/onnx", &b""[..], "body", "empty"),
    ] {
        let (status, body) = http(addr, "POST", path, bytes);
        assert_eq!(status, 422, "{path}: {body}");
        let e = json(&body);
        assert_eq!(e["field"], field, "{path}: {body}");
        assert!(
            e["error"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }
}

/// An expensive request held a worker for minutes with no limit on its time.
#[test]
fn work_past_the_request_timeout_is_answered_503_naming_the_limit() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bundle = root.join("checkpoints/gpu");
    // A microsecond: any work moved off the tokio workers overruns it, by orders of magnitude.
    let (_server, addr) = start_with(&bundle, &["--request-timeout-s", "0.000001"]);
    let onnx = std::fs::read(root.join("tests/fixtures/onnx/cnn-residual.onnx")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("examples/transformers/gpt2.json")).unwrap(),
    )
    .unwrap();
    // Enough blocks for over a thousand layers, so the network is prepared off the workers.
    config["n_layer"] = serde_json::json!(200);
    let transformer = serde_json::json!({"transformer": config, "seq": 64}).to_string();
    for (path, body) in [
        ("/v1/predict/onnx?batch=2", &onnx[..]),
        ("/v1/predict/network", transformer.as_bytes()),
    ] {
        let (status, answer) = http(addr, "POST", path, body);
        assert_eq!(status, 503, "{path}: {answer}");
        let e = json(&answer);
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .contains("`--request-timeout-s`"),
            "{path}: {answer}"
        );
    }
    // Work small enough for the workers is not budgeted, and the server goes on serving.
    let (status, answer) = http(
        addr,
        "POST",
        "/v1/predict/network",
        br#"{"network": "vgg16"}"#,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);

    // The same requests within the default limit are answered.
    let (_server, addr) = start(&bundle);
    let (status, answer) = http(addr, "POST", "/v1/predict/network", transformer.as_bytes());
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = http(addr, "POST", "/v1/predict/onnx?batch=2", &onnx);
    assert_eq!(status, 200, "{answer}");
}
