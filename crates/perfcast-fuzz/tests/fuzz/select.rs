//! perfcast-select: bundle manifests and model files, mutated; a bundle that loads predicts.

use std::path::{Path, PathBuf};

use perfcast_core::{Context, MAX_BATCH, ModuleSpec, Phase};
use perfcast_select::testing::{ctx, linear};
use perfcast_select::{Bundle, Predictor};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, Outcome, fuzz};
use crate::mutate::{ByteOp, JsonOp, apply_bytes, byte_ops, json_ops, mutate_json_text};

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Writes a one-kind ridge bundle (as perfcast-select's own tests do) to `dir`.
fn write_ridge_bundle(dir: &Path) {
    perfcast_select::testing::write_ridge_bundle(dir, "fuzz", 40).expect("bundle writes");
}

/// Every file of a bundle directory: relative path and bytes.
fn files_of(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("bundle dir reads")
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("inside").to_path_buf();
                out.push((rel, std::fs::read(&path).expect("bundle file reads")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// The bundles mutated: the tiny ridge bundle, and the shipped GPU checkpoint (tree
/// ensembles across devices) when the checkout has it.
fn templates() -> Vec<Vec<(PathBuf, Vec<u8>)>> {
    let tmp = tempfile::tempdir().expect("temp dir");
    let ridge = tmp.path().join("ridge");
    write_ridge_bundle(&ridge);
    let mut out = vec![files_of(&ridge)];
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/gpu");
    if shipped.join("manifest.json").is_file() {
        out.push(files_of(&shipped));
    }
    out
}

/// Queries a loaded bundle answers: the kind it covers, kinds it does not (the fallback), and
/// the batch extremes.
fn queries() -> Vec<(ModuleSpec, Context)> {
    let mut q = Vec::new();
    for spec in perfcast_core::testing::one_of_each_kind() {
        q.push((spec, ctx(4, Phase::Inference)));
    }
    for (batch, phase) in [(1, Phase::Training), (MAX_BATCH, Phase::Inference)] {
        q.push((linear(1 << 12, 1 << 12), ctx(batch, phase)));
        q.push((linear(1, 1), ctx(batch, phase)));
    }
    q
}

/// What to do with a bundle that loads.
#[derive(Clone, Copy)]
enum Predict {
    No,
    NoPanic,
    Finite,
}

/// Writes the template's files with one mutated, then loads (and, with `predict`, predicts).
fn case(
    template: &[(PathBuf, Vec<u8>)],
    which: usize,
    json: &[JsonOp],
    bytes: &[ByteOp],
    predict: Predict,
) -> Outcome {
    let tmp = tempfile::tempdir().map_err(fail)?;
    let dir = tmp.path().join("bundle");
    // Only JSON files are worth mutating (the marker is not read by `load`).
    let json_files: Vec<usize> = (0..template.len())
        .filter(|&i| template[i].0.extension().is_some_and(|e| e == "json"))
        .collect();
    let target = json_files[which % json_files.len()];
    for (i, (rel, content)) in template.iter().enumerate() {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        if i == target {
            let text = String::from_utf8_lossy(content);
            let mut mutated = mutate_json_text(&text, json, &[]).into_bytes();
            apply_bytes(&mut mutated, bytes);
            std::fs::write(&path, mutated).map_err(fail)?;
        } else {
            std::fs::write(&path, content).map_err(fail)?;
        }
    }
    let Ok(bundle) = Bundle::load(&dir) else {
        return Ok(false);
    };
    match predict {
        Predict::No => {}
        Predict::NoPanic => {
            let predictor = Predictor::new(bundle);
            for (spec, context) in queries() {
                let _ = predictor.predict_module(&spec, &context);
            }
        }
        Predict::Finite => {
            // Panics are `bundle_predict`'s finding: here only the numbers of predictions that
            // return are checked. A module that does work never takes no time.
            let predictor = Predictor::new(bundle);
            for (spec, context) in queries() {
                let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    predictor.predict_module(&spec, &context)
                }));
                if let Ok(Ok(p)) = answer
                    && !(p.ms.is_finite() && (p.ms > 0.0 || spec.kind().is_zero_cost()))
                {
                    return Err(fail(format!(
                        "`{}` at batch {} predicted {} ms",
                        spec.describe(),
                        context.batch,
                        p.ms
                    )));
                }
            }
        }
    }
    Ok(true)
}

fn strategy(templates: usize) -> impl Strategy<Value = (usize, usize, Vec<JsonOp>, Vec<ByteOp>)> {
    (0..templates, any::<usize>(), json_ops(4), byte_ops(1))
}

/// `Bundle::load` on the ridge bundle with its manifest or model file mutated (byte flips,
/// truncation, huge numbers, `file` fields with `..` or absolute paths): an error or a bundle,
/// no panic.
#[test]
fn bundle_load() {
    let templates = templates();
    fuzz(
        "bundle_load",
        Cost::Files,
        strategy(1),
        |(t, which, json, bytes)| case(&templates[t], which, &json, &bytes, Predict::No),
    );
}

/// As [`bundle_load`], on the shipped GPU checkpoint (tree ensembles across devices).
#[test]
fn bundle_load_trees() {
    let templates = templates();
    let shipped = templates.len() - 1;
    fuzz(
        "bundle_load_trees",
        Cost::Files,
        strategy(1),
        |(_, which, json, bytes)| case(&templates[shipped], which, &json, &bytes, Predict::No),
    );
}

/// As [`bundle_load`], and a bundle that loads predicts every kind without panicking.
#[test]
fn bundle_predict() {
    let templates = templates();
    fuzz(
        "bundle_predict",
        Cost::Files,
        strategy(templates.len()),
        |(t, which, json, bytes)| case(&templates[t], which, &json, &bytes, Predict::NoPanic),
    );
}

/// As [`bundle_predict`], checking that the predictions that return are finite, and positive
/// for every kind that is not zero-cost.
#[test]
fn bundle_predict_finite() {
    let templates = templates();
    fuzz(
        "bundle_predict_finite",
        Cost::Files,
        strategy(templates.len()),
        |(t, which, json, bytes)| case(&templates[t], which, &json, &bytes, Predict::Finite),
    );
}
