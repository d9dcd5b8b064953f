//! Mutations of valid inputs: structural ones (a JSON or TOML node replaced, deleted or added;
//! a CSV cell, row or column changed) that keep most of the input readable, and byte-level ones
//! (flips, truncation, splices) that break its syntax.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value as Json;

/// Raw tokens spliced into text: numbers no `f64` or `u64` holds, syntax, odd characters.
pub const RAW_TOKENS: &[&str] = &[
    "1e400",
    "-1e400",
    "18446744073709551616",
    "-9223372036854775809",
    "NaN",
    "inf",
    "-",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\n",
    "\r\n",
    "\0",
    "é",
    "😀",
    "\u{feff}",
    "[[x]]",
    "0x10",
    "1_000",
    "..",
];

/// One byte-level change.
#[derive(Clone, Debug)]
pub enum ByteOp {
    /// XOR the byte at (position mod length).
    Flip(usize, u8),
    /// Keep the first (position mod length) bytes.
    Truncate(usize),
    /// Insert a raw token at (position mod length).
    Insert(usize, usize),
    /// Delete up to `n` bytes at (position mod length).
    Delete(usize, usize),
    /// Duplicate up to `n` bytes at (position mod length).
    Repeat(usize, usize),
}

pub fn byte_op() -> impl Strategy<Value = ByteOp> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(p, x)| ByteOp::Flip(p, x)),
        any::<usize>().prop_map(ByteOp::Truncate),
        (any::<usize>(), 0..RAW_TOKENS.len()).prop_map(|(p, t)| ByteOp::Insert(p, t)),
        (any::<usize>(), 1..64usize).prop_map(|(p, n)| ByteOp::Delete(p, n)),
        (any::<usize>(), 1..64usize).prop_map(|(p, n)| ByteOp::Repeat(p, n)),
    ]
}

/// Up to `max` byte-level changes.
pub fn byte_ops(max: usize) -> impl Strategy<Value = Vec<ByteOp>> {
    vec(byte_op(), 0..=max)
}

pub fn apply_bytes(bytes: &mut Vec<u8>, ops: &[ByteOp]) {
    for op in ops {
        let len = bytes.len();
        let at = |p: usize| if len == 0 { 0 } else { p % len };
        match *op {
            ByteOp::Flip(p, x) => {
                if len > 0 {
                    bytes[at(p)] ^= x;
                }
            }
            ByteOp::Truncate(p) => bytes.truncate(at(p)),
            ByteOp::Insert(p, t) => {
                let i = at(p);
                bytes.splice(i..i, RAW_TOKENS[t].bytes());
            }
            ByteOp::Delete(p, n) => {
                let i = at(p);
                let end = (i + n).min(len);
                bytes.drain(i..end);
            }
            ByteOp::Repeat(p, n) => {
                let i = at(p);
                let end = (i + n).min(len);
                let copy = bytes[i..end].to_vec();
                bytes.splice(end..end, copy);
            }
        }
    }
}

/// `text` after byte-level changes, as text again (invalid UTF-8 replaced).
pub fn apply_text(text: &str, ops: &[ByteOp]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    apply_bytes(&mut bytes, ops);
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Extreme and odd JSON values for a replaced node.
pub fn json_pool() -> Vec<Json> {
    use serde_json::json;
    vec![
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(-1),
        json!(1u64 << 24),
        json!((1u64 << 24) + 1),
        json!(1u64 << 32),
        json!((1u64 << 53) + 1),
        json!(1u64 << 63),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1.5),
        json!(1e-300),
        json!(5e-324),
        json!(1e308),
        json!(-1e308),
        json!(-0.0),
        json!(""),
        json!(" "),
        json!("NaN"),
        json!("input"),
        json!("conv2d"),
        json!("linear"),
        json!("matmul"),
        json!("add"),
        json!("relu"),
        json!("../outside.json"),
        json!("/etc/hostname"),
        json!("linear/../../x.json"),
        json!("é∂😀"),
        json!("x".repeat(10_000)),
        json!(null),
        json!(true),
        json!(false),
        json!([]),
        json!({}),
        json!([1, 2]),
        json!([u64::MAX, 0]),
        json!([1, 1, 1]),
        json!([0, 0, 0]),
        json!([16777216, 16777216, 16777216]),
        json!({"kind": "relu", "shape": [1, 1, 1]}),
        deep_json(200),
    ]
}

/// Nested arrays `depth` deep (serde_json stops at 128).
fn deep_json(depth: usize) -> Json {
    let mut v = Json::Array(Vec::new());
    for _ in 0..depth {
        v = Json::Array(vec![v]);
    }
    v
}

/// Keys inserted into JSON objects.
pub const JSON_KEYS: &[&str] = &[
    "kind",
    "name",
    "spec",
    "input",
    "layers",
    "input_from",
    "second_from",
    "reshape",
    "shape",
    "kernel",
    "stride",
    "padding",
    "dilation",
    "groups",
    "bias",
    "tokens",
    "heads",
    "trans_a",
    "file",
    "format",
    "schema_hash",
    "peak_gflops",
    "mem_bandwidth_gbs",
    "software",
    "unknown",
];

/// One structural change to a JSON document; nodes are picked by (index mod node count).
#[derive(Clone, Debug)]
pub enum JsonOp {
    /// Replace the node with a pool value.
    Replace(usize, usize),
    /// Replace a number with a nearby or scaled one.
    Nudge(usize, i64),
    /// Remove the node from its parent.
    Remove(usize),
    /// Duplicate an array element / insert a pool value under a key of an object.
    Grow(usize, usize, usize),
    /// Swap the node with another node's value.
    Swap(usize, usize),
}

pub fn json_op() -> impl Strategy<Value = JsonOp> {
    let pool = json_pool().len();
    prop_oneof![
        4 => (any::<usize>(), 0..pool).prop_map(|(n, v)| JsonOp::Replace(n, v)),
        3 => (any::<usize>(), -3i64..=3).prop_map(|(n, d)| JsonOp::Nudge(n, d)),
        2 => any::<usize>().prop_map(JsonOp::Remove),
        2 => (any::<usize>(), 0..JSON_KEYS.len(), 0..pool).prop_map(|(n, k, v)| JsonOp::Grow(n, k, v)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| JsonOp::Swap(a, b)),
    ]
}

pub fn json_ops(max: usize) -> impl Strategy<Value = Vec<JsonOp>> {
    vec(json_op(), 0..=max)
}

/// A step from a node to a child.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every node's path, and whether the node is a number.
fn paths(v: &Json, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>, numbers: &mut Vec<bool>) {
    out.push(here.clone());
    numbers.push(v.is_number());
    match v {
        Json::Object(m) => {
            for (k, child) in m {
                here.push(Step::Key(k.clone()));
                paths(child, here, out, numbers);
                here.pop();
            }
        }
        Json::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                here.push(Step::Index(i));
                paths(child, here, out, numbers);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(mut v: &'a mut Json, path: &[Step]) -> Option<&'a mut Json> {
    for step in path {
        v = match (step, v) {
            (Step::Key(k), Json::Object(m)) => m.get_mut(k)?,
            (Step::Index(i), Json::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

fn nudge_json(n: &serde_json::Number, d: i64) -> Json {
    if let Some(u) = n.as_u64() {
        let v = match d {
            -3 => 0,
            -2 => u / 2,
            3 => u.saturating_mul(1 << 20),
            2 => u.saturating_mul(2),
            _ => u.saturating_add_signed(d),
        };
        Json::from(v)
    } else if let Some(i) = n.as_i64() {
        Json::from(i.saturating_add(d))
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        let v = match d {
            -3 => -f,
            -2 => f * 1e-300,
            2 => f * 1e300,
            3 => f * 1e-3,
            _ => f + d as f64,
        };
        serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number)
    }
}

/// Applies structural changes to a JSON document in place.
pub fn apply_json(doc: &mut Json, ops: &[JsonOp]) {
    let pool = json_pool();
    for op in ops {
        let mut all = Vec::new();
        let mut kinds = Vec::new();
        paths(doc, &mut Vec::new(), &mut all, &mut kinds);
        let pick = |i: usize| all[i % all.len()].clone();
        match *op {
            JsonOp::Replace(n, v) => {
                if let Some(node) = node_mut(doc, &pick(n)) {
                    *node = pool[v].clone();
                }
            }
            JsonOp::Nudge(n, d) => {
                let numbers: Vec<&Vec<Step>> = all
                    .iter()
                    .zip(&kinds)
                    .filter(|(_, is_number)| **is_number)
                    .map(|(p, _)| p)
                    .collect();
                if numbers.is_empty() {
                    continue;
                }
                let path = numbers[n % numbers.len()].clone();
                if let Some(node) = node_mut(doc, &path)
                    && let Json::Number(num) = node
                {
                    *node = nudge_json(num, d);
                }
            }
            JsonOp::Remove(n) => {
                let path = pick(n);
                let Some((last, parent)) = path.split_last() else {
                    continue;
                };
                match (node_mut(doc, parent), last) {
                    (Some(Json::Object(m)), Step::Key(k)) => {
                        m.remove(k);
                    }
                    (Some(Json::Array(a)), Step::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
            JsonOp::Grow(n, k, v) => match node_mut(doc, &pick(n)) {
                Some(Json::Object(m)) => {
                    m.insert(JSON_KEYS[k].to_string(), pool[v].clone());
                }
                Some(Json::Array(a)) if !a.is_empty() => {
                    let i = k % a.len();
                    let copy = a[i].clone();
                    a.insert(i, copy);
                }
                _ => {}
            },
            JsonOp::Swap(a, b) => {
                let (pa, pb) = (pick(a), pick(b));
                let vb = node_mut(doc, &pb).map(|v| v.clone());
                if let (Some(vb), Some(na)) = (vb, node_mut(doc, &pa)) {
                    // Swapping a node with its own descendant is just a replacement here.
                    *na = vb;
                }
            }
        }
    }
}

/// A JSON text after structural and then byte-level changes.
pub fn mutate_json_text(text: &str, json: &[JsonOp], bytes: &[ByteOp]) -> String {
    let mutated = match serde_json::from_str::<Json>(text) {
        Ok(mut doc) if !json.is_empty() => {
            apply_json(&mut doc, json);
            serde_json::to_string_pretty(&doc).unwrap_or_else(|_| text.to_string())
        }
        _ => text.to_string(),
    };
    apply_text(&mutated, bytes)
}

/// Extreme and odd TOML values.
pub fn toml_pool() -> Vec<toml::Value> {
    use toml::Value as T;
    let table = |pairs: &[(&str, T)]| {
        T::Table(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        )
    };
    vec![
        T::Integer(0),
        T::Integer(1),
        T::Integer(2),
        T::Integer(-1),
        T::Integer(1 << 24),
        T::Integer((1 << 24) + 1),
        T::Integer(1 << 32),
        T::Integer(100_000),
        T::Integer(100_001),
        T::Integer(i64::MAX),
        T::Integer(i64::MIN),
        T::Float(0.5),
        T::Float(0.999),
        T::Float(1.0),
        T::Float(-0.0),
        T::Float(1e-300),
        T::Float(5e-324),
        T::Float(1e308),
        T::Float(f64::NAN),
        T::Float(f64::INFINITY),
        T::Float(f64::NEG_INFINITY),
        T::String(String::new()),
        T::String("same".into()),
        T::String("valid".into()),
        T::String("depthwise".into()),
        T::String("log".into()),
        T::String("random".into()),
        T::String("conv2d".into()),
        T::String("training".into()),
        T::String("inference".into()),
        T::String("ms".into()),
        T::String("us".into()),
        T::String("é😀".into()),
        T::Boolean(true),
        T::Boolean(false),
        T::Array(vec![]),
        T::Array(vec![T::Integer(1), T::String("x".into()), T::Boolean(true)]),
        T::Array(vec![T::String("conv2d".into()), T::String("linear".into())]),
        T::Array(vec![T::Integer(0), T::Integer(1 << 24)]),
        T::Array(vec![T::Float(f64::NAN)]),
        table(&[]),
        table(&[("min", T::Integer(1)), ("max", T::Integer(1 << 24))]),
        table(&[
            ("min", T::Integer(0)),
            ("max", T::Integer(10)),
            ("scale", T::String("log".into())),
        ]),
        table(&[
            ("min", T::Float(5e-324)),
            ("max", T::Float(1e308)),
            ("scale", T::String("log".into())),
        ]),
        table(&[("min", T::Integer(10)), ("max", T::Integer(1))]),
        table(&[("min", T::Float(f64::NAN)), ("max", T::Float(f64::NAN))]),
        table(&[
            ("min", T::Integer(1)),
            ("max", T::Integer(2)),
            ("step", T::Integer(1)),
        ]),
    ]
}

/// Keys inserted into TOML tables.
pub const TOML_KEYS: &[&str] = &[
    "seed",
    "samples",
    "method",
    "modules",
    "phases",
    "batch",
    "threads",
    "utilisation",
    "utilization",
    "max_gflop",
    "max_mib",
    "timing",
    "warmup_s",
    "rounds",
    "conv2d",
    "linear",
    "matmul",
    "maxpool2d",
    "relu",
    "layernorm",
    "in_channels",
    "kernel",
    "stride",
    "padding",
    "dilation",
    "groups",
    "bias",
    "input_hw",
    "c",
    "h",
    "w",
    "kind",
    "device",
    "backend",
    "unit",
    "phase",
    "columns",
    "defaults",
    "median_ms",
    "min_ms",
    "trans_a",
    "bogus",
];

/// One structural change to a TOML document.
#[derive(Clone, Debug)]
pub enum TomlOp {
    /// Replace the node with a pool value.
    Replace(usize, usize),
    /// Remove the node from its parent.
    Remove(usize),
    /// Insert a pool value under a key (tables) or duplicate an element (arrays).
    Grow(usize, usize, usize),
}

pub fn toml_op() -> impl Strategy<Value = TomlOp> {
    let pool = toml_pool().len();
    prop_oneof![
        3 => (any::<usize>(), 0..pool).prop_map(|(n, v)| TomlOp::Replace(n, v)),
        1 => any::<usize>().prop_map(TomlOp::Remove),
        2 => (any::<usize>(), 0..TOML_KEYS.len(), 0..pool).prop_map(|(n, k, v)| TomlOp::Grow(n, k, v)),
    ]
}

pub fn toml_ops(max: usize) -> impl Strategy<Value = Vec<TomlOp>> {
    vec(toml_op(), 0..=max)
}

fn toml_paths(v: &toml::Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match v {
        toml::Value::Table(t) => {
            for (k, child) in t {
                here.push(Step::Key(k.clone()));
                toml_paths(child, here, out);
                here.pop();
            }
        }
        toml::Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                here.push(Step::Index(i));
                toml_paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn toml_node_mut<'a>(mut v: &'a mut toml::Value, path: &[Step]) -> Option<&'a mut toml::Value> {
    for step in path {
        v = match (step, v) {
            (Step::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (Step::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

/// Applies structural changes to a TOML document (the root table stays a table).
pub fn apply_toml(doc: &mut toml::Value, ops: &[TomlOp]) {
    let pool = toml_pool();
    for op in ops {
        let mut all = Vec::new();
        toml_paths(doc, &mut Vec::new(), &mut all);
        let pick = |i: usize| all[i % all.len()].clone();
        match *op {
            TomlOp::Replace(n, v) => {
                let path = pick(n);
                if path.is_empty() {
                    continue;
                }
                if let Some(node) = toml_node_mut(doc, &path) {
                    *node = pool[v].clone();
                }
            }
            TomlOp::Remove(n) => {
                let path = pick(n);
                let Some((last, parent)) = path.split_last() else {
                    continue;
                };
                match (toml_node_mut(doc, parent), last) {
                    (Some(toml::Value::Table(t)), Step::Key(k)) => {
                        t.remove(k);
                    }
                    (Some(toml::Value::Array(a)), Step::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
            TomlOp::Grow(n, k, v) => match toml_node_mut(doc, &pick(n)) {
                Some(toml::Value::Table(t)) => {
                    t.insert(TOML_KEYS[k].to_string(), pool[v].clone());
                }
                Some(toml::Value::Array(a)) if !a.is_empty() => {
                    let i = k % a.len();
                    let copy = a[i].clone();
                    a.insert(i, copy);
                }
                _ => {}
            },
        }
    }
}

/// A TOML text after structural and then byte-level changes.
pub fn mutate_toml_text(text: &str, ops: &[TomlOp], bytes: &[ByteOp]) -> String {
    let mutated = match text.parse::<toml::Table>() {
        Ok(table) if !ops.is_empty() => {
            let mut doc = toml::Value::Table(table);
            apply_toml(&mut doc, ops);
            match doc {
                toml::Value::Table(t) => toml::to_string(&t).unwrap_or_else(|_| text.to_string()),
                _ => text.to_string(),
            }
        }
        _ => text.to_string(),
    };
    apply_text(&mutated, bytes)
}

/// Cells written into CSVs.
pub fn cell_pool() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "0",
        "-0",
        "-1",
        "1",
        "2",
        "3.0",
        "3.5",
        "1e3",
        "1e400",
        "-1e400",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "9000000000000000",
        "16777216",
        "16777217",
        "4294967296",
        "1e-300",
        "5e-324",
        "1.7976931348623157e308",
        "True",
        "False",
        "same",
        "SAME",
        "VALID",
        "T",
        "N",
        "x",
        "N/A",
        "N/A*",
        "\"quoted, comma\"",
        "\"",
        "é",
        "😀",
        "training",
        "inference",
        "train",
        "Float",
        "32",
        "16",
        "NV_T4",
        "GTX1080Ti",
        "Tesla V100-PCIE-32GB",
        "Tesla T4",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    v.push("9".repeat(5000));
    v
}

/// One change to a CSV file (rows include the header as row 0).
#[derive(Clone, Debug)]
pub enum CsvOp {
    /// Set a data cell (row mod rows, column mod its cells) to a pool value.
    Cell(usize, usize, usize),
    /// Set a data cell to a number: an integer or a float.
    Number(usize, usize, i64),
    /// Rename a header column to a pool value or to another column's name.
    Header(usize, usize),
    /// Remove a data row.
    RemoveRow(usize),
    /// Duplicate a row.
    RepeatRow(usize),
    /// Remove a column from every row.
    RemoveColumn(usize),
    /// Drop the last cell of a row.
    ShortRow(usize),
}

pub fn csv_op() -> impl Strategy<Value = CsvOp> {
    let pool = cell_pool().len();
    prop_oneof![
        5 => (any::<usize>(), any::<usize>(), 0..pool).prop_map(|(r, c, v)| CsvOp::Cell(r, c, v)),
        3 => (any::<usize>(), any::<usize>(), prop_oneof![
            -2i64..1 << 12,
            any::<i64>(),
            Just(1i64 << 24),
            Just((1i64 << 24) + 1),
        ])
            .prop_map(|(r, c, v)| CsvOp::Number(r, c, v)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(c, v)| CsvOp::Header(c, v)),
        1 => any::<usize>().prop_map(CsvOp::RemoveRow),
        1 => any::<usize>().prop_map(CsvOp::RepeatRow),
        1 => any::<usize>().prop_map(CsvOp::RemoveColumn),
        1 => any::<usize>().prop_map(CsvOp::ShortRow),
    ]
}

pub fn csv_ops(max: usize) -> impl Strategy<Value = Vec<CsvOp>> {
    vec(csv_op(), 0..=max)
}

/// Splits one CSV line into cells, keeping quoted cells (and their quotes) whole.
fn split_cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for ch in line.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                cur.push(ch);
            }
            ',' if !quoted => cells.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    cells.push(cur);
    cells
}

/// A CSV text after cell-level changes.
pub fn apply_csv(text: &str, ops: &[CsvOp]) -> String {
    let trailing_newline = text.ends_with('\n');
    let mut rows: Vec<Vec<String>> = text.lines().map(split_cells).collect();
    let pool = cell_pool();
    for op in ops {
        if rows.is_empty() {
            break;
        }
        let data = rows.len() - 1;
        match *op {
            CsvOp::Cell(r, c, v) => {
                if data == 0 {
                    continue;
                }
                let row = &mut rows[1 + r % data];
                let n = row.len();
                row[c % n] = pool[v].clone();
            }
            CsvOp::Number(r, c, v) => {
                if data == 0 {
                    continue;
                }
                let row = &mut rows[1 + r % data];
                let n = row.len();
                row[c % n] = if v % 5 == 0 {
                    format!("{}.0", v)
                } else {
                    v.to_string()
                };
            }
            CsvOp::Header(c, v) => {
                let n = rows[0].len();
                let name = if v % 2 == 0 {
                    rows[0][v / 2 % n].clone()
                } else {
                    pool[v / 2 % pool.len()].clone()
                };
                rows[0][c % n] = name;
            }
            CsvOp::RemoveRow(r) => {
                if data > 0 {
                    rows.remove(1 + r % data);
                }
            }
            CsvOp::RepeatRow(r) => {
                let i = r % rows.len();
                let copy = rows[i].clone();
                rows.insert(i, copy);
            }
            CsvOp::RemoveColumn(c) => {
                let n = rows[0].len();
                let c = c % n;
                for row in &mut rows {
                    if c < row.len() {
                        row.remove(c);
                    }
                }
            }
            CsvOp::ShortRow(r) => {
                let i = r % rows.len();
                rows[i].pop();
            }
        }
    }
    let mut out = rows
        .iter()
        .map(|r| r.join(","))
        .collect::<Vec<_>>()
        .join("\n");
    if trailing_newline {
        out.push('\n');
    }
    out
}
