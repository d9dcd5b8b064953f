//! Round trip: a bundle saved by perfcast-select's writer and loaded by
//! perfcast-predict's `Bundle::load` predicts bit-identically to the models it was written from.
//!
//! Random small training sets of one to three kinds, each fitted by a cheap family (ridge,
//! trees, k-NN, roofline, `ridge-trees`), are written as one bundle; the loaded models must
//! give the same `f64` bits as the in-memory ones on random queries, row by row and in
//! batches, and the manifest must read back equal.

use std::collections::BTreeMap;

use perfcast_core::{Context, Conv2d, Linear, Matmul, ModuleKind, ModuleSpec, Phase};
use perfcast_models::eval::ModelParams;
use perfcast_models::features::row;
use perfcast_models::{FeatureSchema, Matrix, Regressor, TrainSet};
use perfcast_select::Bundle;
use perfcast_select::bundle::write_bundle;
use perfcast_select::testing::{self, device};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, check, fuzz};

/// Families cheap enough to fit many times in a test.
const FAMILIES: [&str; 5] = ["ridge", "trees", "knn", "roofline", "ridge-trees"];

/// Kinds the cases draw from.
const KINDS: [ModuleKind; 3] = [ModuleKind::Linear, ModuleKind::Matmul, ModuleKind::Conv2d];

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// One measured (or queried) module: sizes, batch, phase, and a noise factor on its latency.
#[derive(Clone, Debug)]
struct Draw {
    a: usize,
    b: usize,
    c: usize,
    batch: usize,
    training: bool,
    noise: f64,
}

fn draw() -> impl Strategy<Value = Draw> {
    (
        1usize..=512,
        1usize..=512,
        1usize..=16,
        1usize..=32,
        any::<bool>(),
        0.8f64..1.25,
    )
        .prop_map(|(a, b, c, batch, training, noise)| Draw {
            a,
            b,
            c,
            batch,
            training,
            noise,
        })
}

impl Draw {
    fn spec(&self, kind: ModuleKind) -> ModuleSpec {
        match kind {
            ModuleKind::Linear => ModuleSpec::Linear(Linear {
                tokens: self.c,
                in_features: self.a,
                out_features: self.b,
                bias: self.training,
            }),
            ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
                heads: self.c,
                m: self.a,
                k: self.b,
                n: 1 + (self.a * 7 + self.b) % 256,
                trans_a: false,
                trans_b: self.a.is_multiple_of(2),
            }),
            _ => ModuleSpec::Conv2d(Conv2d {
                in_channels: 1 + self.a % 64,
                out_channels: 1 + self.b % 64,
                input_hw: [4 + self.c, 4 + self.c],
                kernel: [3, 3],
                stride: [1 + self.a % 2, 1 + self.a % 2],
                padding: [1, 1],
                dilation: [1, 1],
                groups: 1,
                bias: true,
            }),
        }
    }

    fn context(&self) -> Context {
        Context {
            batch: self.batch,
            phase: if self.training {
                Phase::Training
            } else {
                Phase::Inference
            },
            threads: 1,
            utilisation: 0.0,
        }
    }

    /// A plausible latency: a floor plus FLOPs at 10 GFLOP/s, three times that to train.
    fn ms(&self, spec: &ModuleSpec) -> f64 {
        let f = perfcast_core::features::derive(spec, self.batch);
        let phase = if self.training { 3.0 } else { 1.0 };
        (0.002 + phase * f.flops / 1e7) * self.noise
    }
}

/// One kind of a case: the family fitted, the training rows and the queries.
#[derive(Clone, Debug)]
struct KindCase {
    kind: usize,
    family: usize,
    rows: Vec<Draw>,
    queries: Vec<Draw>,
}

fn kind_case() -> impl Strategy<Value = KindCase> {
    (
        0..KINDS.len(),
        0..FAMILIES.len(),
        prop::collection::vec(draw(), 12..48),
        prop::collection::vec(draw(), 1..8),
    )
        .prop_map(|(kind, family, rows, queries)| KindCase {
            kind,
            family,
            rows,
            queries,
        })
}

fn train_set(kind: ModuleKind, rows: &[Draw]) -> TrainSet {
    let schema = FeatureSchema::for_kind(kind);
    let mut x = Matrix::with_cols(schema.len());
    let mut y = Vec::new();
    for d in rows {
        let spec = d.spec(kind);
        x.push_row(&row(&spec, &d.context(), &device()));
        y.push(d.ms(&spec));
    }
    TrainSet {
        schema,
        x,
        y,
        groups: (0..rows.len() as u64).collect(),
    }
}

/// The bits of every prediction `model` gives for `queries`: one row at a time, then the whole
/// matrix at once.
fn bits(model: &dyn Regressor, queries: &Matrix) -> Result<Vec<u64>, TestCaseError> {
    let mut out = Vec::new();
    for r in queries.iter_rows() {
        out.push(model.predict_row(r).map_err(fail)?.to_bits());
    }
    out.extend(
        model
            .predict(queries)
            .map_err(fail)?
            .into_iter()
            .map(f64::to_bits),
    );
    Ok(out)
}

fn case(cases: &[KindCase]) -> Result<bool, TestCaseError> {
    let mut kinds = BTreeMap::new();
    let mut files = Vec::new();
    let mut expected = Vec::new();
    for c in cases {
        let kind = KINDS[c.kind];
        if kinds.contains_key(kind.name()) {
            continue;
        }
        let family = FAMILIES[c.family];
        let data = train_set(kind, &c.rows);
        let params = ModelParams::by_name(family).map_err(fail)?;
        let model = params.fit(&data).map_err(|e| {
            fail(format!(
                "{family} does not fit {} `{kind}` rows: {e}",
                data.len()
            ))
        })?;
        let mut queries = Matrix::with_cols(data.schema.len());
        for q in &c.queries {
            queries.push_row(&row(&q.spec(kind), &q.context(), &device()));
        }
        expected.push((
            kind,
            family,
            queries.clone(),
            bits(model.as_ref(), &queries)?,
        ));
        let file = format!("{}/{family}.json", kind.name());
        kinds.insert(
            kind.name().to_string(),
            testing::kind_entry(family, &file, model.as_ref(), &data).map_err(fail)?,
        );
        files.push((file, model.to_saved()));
    }
    let manifest = testing::manifest("roundtrip", kinds);
    let tmp = tempfile::tempdir().map_err(fail)?;
    let dir = tmp.path().join("bundle");
    write_bundle(&dir, &manifest, &files).map_err(fail)?;
    let loaded = Bundle::load(&dir).map_err(|e| fail(format!("a written bundle loads: {e}")))?;
    let read = Bundle::read_manifest(&dir).map_err(fail)?;
    check(read == manifest, || {
        format!("the manifest reads back as {read:#?}")
    })?;
    for (kind, family, queries, want) in expected {
        let model = loaded
            .model(kind)
            .ok_or_else(|| fail(format!("the loaded bundle has no `{kind}` model")))?;
        let got = bits(model, &queries)?;
        check(got == want, || {
            format!(
                "{family} on `{kind}` predicts {:?} loaded, {:?} in memory",
                got.iter().map(|b| f64::from_bits(*b)).collect::<Vec<_>>(),
                want.iter().map(|b| f64::from_bits(*b)).collect::<Vec<_>>()
            )
        })?;
    }
    Ok(true)
}

/// Bundle save -> load -> bit-identical predictions, on random training sets and families.
#[test]
fn bundle_round_trip_predicts_identically() {
    fuzz(
        "bundle_round_trip",
        Cost::Fits,
        prop::collection::vec(kind_case(), 1..=3),
        |cases| case(&cases),
    );
}
