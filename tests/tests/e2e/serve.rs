//! `perfcast serve` and `perfcast loadtest` end to end: a server on an ephemeral loopback
//! port, valid and invalid requests, a short load test, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::train::{small_dataset, train_bundle};
use crate::{perfcast, run, stderr};

/// One request on a fresh connection: status and body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
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

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Stops the server if a check fails first.
struct Server(Child);

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
    assert_eq!((status, json(&body)["status"].as_str()), (200, Some("ok")));

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
    let valid = r["valid"]["count"].as_u64().unwrap();
    let invalid = r["invalid"]["count"].as_u64().unwrap();
    assert_eq!(valid + invalid, 400);
    assert_eq!(r["valid_ok"].as_u64().unwrap(), valid);
    assert_eq!(r["invalid_4xx"].as_u64().unwrap(), invalid);
    assert!(valid > 100 && invalid > 100, "{r}");

    // The server is still healthy, then stops cleanly on SIGTERM with exit 0.
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
    let mut server = server;
    let pid = server.0.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = server.0.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    let log = drain.join().unwrap().join("\n");
    assert!(log.contains("shut down"), "{log}");
}
