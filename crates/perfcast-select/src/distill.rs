//! Distilled students: one small network standing in for a chosen model that costs more to
//! evaluate (a blend evaluates two models, a forest hundreds of trees), so that how fast a
//! bundle answers does not depend on what selection picked.
//!
//! The teacher (the kind's chosen model, refitted) labels the kind's measured configurations
//! and jittered neighbours of each (sizes scaled, some at another batch), so the student learns
//! the teacher's answers between the rows too, not only at them; without the neighbours a
//! student misses its teacher far more on configurations it never saw (docs/accuracy.md).
//! The student is kept only when it stays close to its teacher on held-out
//! labelled configurations, loses little on the measured rows, and answers faster.

use std::collections::{BTreeMap, HashSet};

use perfcast_core::rng::SplitMix64;
use perfcast_core::{Context, DeviceSpec, Metrics, ModuleKind, ModuleSpec};
use perfcast_data::{Outcome, Record, Timing};
use perfcast_models::device_features::concat;
use perfcast_models::eval::{ModelParams, prediction_cost};
use perfcast_models::split::{Split, holdout};
use perfcast_models::{Regressor, TrainSet};
use perfcast_predict::bundle::{Distilled, FeatureRange, outside_range};

use crate::error::{Error, Result};

/// How students are drawn, fitted and judged.
#[derive(Clone, Debug)]
pub struct DistillPlan {
    /// Jittered neighbours drawn per measured row.
    pub neighbours: usize,
    /// Largest ln factor a size is scaled by (0.4: up to about 1.5x either way).
    pub spread: f64,
    /// Student settings (`medn.width=32`, then 48, then 64), applied after the training's own:
    /// the first kept is used, so a wider student is tried only where a narrower one was not.
    pub students: Vec<Vec<String>>,
    /// Largest MAPE of the student against its teacher on held-out labelled rows, percent.
    pub max_from_teacher: f64,
    /// Most MAPE points the student may lose against the teacher on the measured rows.
    pub max_loss: f64,
    /// Seed of the draws and the split.
    pub seed: u64,
    /// Further neighbours per measured row, drawn at `wide_spread`: a network's layers are
    /// often further from every measured configuration than `spread` reaches, and there the
    /// student should follow its teacher too.
    pub wide: usize,
    /// Largest ln factor of the wide draws (1.5: up to about 4.5x either way).
    pub wide_spread: f64,
}

impl Default for DistillPlan {
    fn default() -> DistillPlan {
        DistillPlan {
            neighbours: 4,
            spread: 0.4,
            students: [32, 48, 64]
                .map(|w| vec![format!("medn.width={w}")])
                .to_vec(),
            max_from_teacher: 6.0,
            max_loss: 1.5,
            seed: 0,
            wide: 2,
            wide_spread: 1.5,
        }
    }
}

/// The family name a kept student is saved under.
pub const STUDENT: &str = "student";

/// The kind's measured configurations, each jittered `plan.neighbours` times at `plan.spread`
/// and `plan.wide` times at `plan.wide_spread`, as records without times; configurations
/// already present and invalid shapes are left out.
pub fn neighbours(records: &[Record], plan: &DistillPlan) -> Vec<Record> {
    let mut rng = SplitMix64::new(plan.seed ^ 0x5eed_d157);
    let mut batches: Vec<usize> = records.iter().map(|r| r.context.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let mut seen: HashSet<String> = records.iter().map(Record::key).collect();
    let mut out = Vec::new();
    for r in records {
        let spreads = std::iter::repeat_n(plan.spread, plan.neighbours)
            .chain(std::iter::repeat_n(plan.wide_spread, plan.wide));
        for spread in spreads {
            let Some(spec) = jittered(&r.spec, spread, &mut rng) else {
                continue;
            };
            let batch = if rng.unit() < 0.5 && !batches.is_empty() {
                batches[rng.below(batches.len())]
            } else {
                r.context.batch
            };
            let n = Record {
                spec,
                context: Context {
                    batch,
                    ..r.context.clone()
                },
                outcome: Outcome::Ok(Timing::median_only(1.0)),
                ..r.clone()
            };
            if seen.insert(n.key()) {
                out.push(n);
            }
        }
    }
    out
}

/// Fields that say how a layer is shaped rather than how big it is: never scaled.
const SHAPE_FIELDS: [&str; 4] = ["kernel", "stride", "padding", "dilation"];

/// `spec` with its sizes scaled by random factors up to `exp(spread)` either way: one factor
/// per distinct value, so sizes that were equal stay equal (a square map, a depthwise conv's
/// channels and groups). Sizes of 1 stay 1; `groups` moves only with a size it equals.
fn jittered(spec: &ModuleSpec, spread: f64, rng: &mut SplitMix64) -> Option<ModuleSpec> {
    let mut value = serde_json::to_value(spec).ok()?;
    let fields = value.as_object_mut()?;
    let mut factors: BTreeMap<u64, f64> = BTreeMap::new();
    let mut scale = |v: &mut serde_json::Value, only_known: bool| {
        let Some(x) = v.as_u64().filter(|&x| x > 1) else {
            return;
        };
        let f = match factors.get(&x) {
            Some(&f) => f,
            None if only_known => return,
            None => *factors
                .entry(x)
                .or_insert_with(|| rng.uniform(-spread, spread).exp()),
        };
        *v = ((x as f64 * f).round().max(1.0) as u64).into();
    };
    for (name, v) in fields.iter_mut() {
        if SHAPE_FIELDS.contains(&name.as_str()) || name == "groups" {
            continue;
        }
        match v {
            serde_json::Value::Array(items) => items.iter_mut().for_each(|i| scale(i, false)),
            v => scale(v, false),
        }
    }
    if let Some(g) = fields.get_mut("groups") {
        scale(g, true);
    }
    ModuleSpec::from_json(&value.to_string()).ok()
}

/// What a kind's students learn from, prepared once for every student tried: the teacher's
/// labels on the measured rows and their neighbours, split into a part to learn from and a
/// held-out part, and the teacher's own figures on the measured rows.
pub struct Lesson<'a> {
    kind: ModuleKind,
    teacher: String,
    measured: &'a TrainSet,
    train: TrainSet,
    test: TrainSet,
    rows: usize,
    teacher_mape: f64,
    teacher_us: f64,
}

impl<'a> Lesson<'a> {
    /// The lesson of `teacher` (family `teacher_name`) for `kind`: the kind's measured
    /// `records` give the neighbours (those inside `ranges` kept), `measured` are their
    /// feature rows with the measured times.
    pub fn new(
        kind: ModuleKind,
        (teacher_name, teacher): (&str, &dyn Regressor),
        (records, measured): (&[Record], &'a TrainSet),
        ranges: &[FeatureRange],
        device: &DeviceSpec,
        plan: &DistillPlan,
    ) -> Result<Lesson<'a>> {
        let drawn = TrainSet::from_records(kind, &neighbours(records, plan), device)?;
        let inside: Vec<usize> = (0..drawn.len())
            .filter(|&i| {
                let x = drawn.x.row(i);
                !ranges
                    .iter()
                    .zip(x)
                    .any(|(r, &v)| outside_range(r.min, r.max, v))
            })
            .collect();
        let mut drawn = drawn.select(&inside);
        drawn.y = teacher.predict(&drawn.x)?;
        let labelled: Vec<usize> = (0..drawn.len())
            .filter(|&i| drawn.y[i].is_finite() && drawn.y[i] > 0.0)
            .collect();
        let drawn = drawn.select(&labelled);
        let mut taught = measured.clone();
        taught.y = teacher.predict(&measured.x)?;
        let teacher_mape = mape(kind, &taught.y, &measured.y)?;
        let all = concat(&[&taught, &drawn])?;
        let (train, test) = holdout(&all, 0.2, Split::Group, plan.seed)?;
        Ok(Lesson {
            kind,
            teacher: teacher_name.to_string(),
            measured,
            train: all.select(&train),
            test: all.select(&test),
            rows: all.len(),
            teacher_mape,
            teacher_us: prediction_cost(teacher, measured)?.one_row_us,
        })
    }

    /// Fits `student` (settings `settings`, for the record) to the lesson and judges it
    /// under `plan`: what was found and, when kept, the student.
    pub fn teach(
        &self,
        (student, settings): (&ModelParams, &str),
        plan: &DistillPlan,
    ) -> Result<(Distilled, Option<Box<dyn Regressor>>)> {
        let model = student.fit(&self.train)?;
        let from_teacher = mape(self.kind, &model.predict(&self.test.x)?, &self.test.y)?;
        let measured_mape = [
            self.teacher_mape,
            mape(
                self.kind,
                &model.predict(&self.measured.x)?,
                &self.measured.y,
            )?,
        ];
        let predict_us = [
            self.teacher_us,
            prediction_cost(model.as_ref(), self.measured)?.one_row_us,
        ];
        let loss = measured_mape[1] - measured_mape[0];
        let why = if from_teacher > plan.max_from_teacher {
            format!(
                "{from_teacher:.1}% from its teacher (at most {:.1}% kept)",
                plan.max_from_teacher
            )
        } else if loss > plan.max_loss {
            format!(
                "loses {loss:.1} points on the measured rows (at most {:.1} kept)",
                plan.max_loss
            )
        } else if predict_us[1] >= predict_us[0] {
            format!(
                "no faster ({:.2} us against {:.2})",
                predict_us[1], predict_us[0]
            )
        } else {
            format!(
                "{from_teacher:.1}% from its teacher, {:+.1} points on the measured rows, \
                 {:.2} -> {:.2} us",
                loss, predict_us[0], predict_us[1]
            )
        };
        let kept = from_teacher <= plan.max_from_teacher
            && loss <= plan.max_loss
            && predict_us[1] < predict_us[0];
        Ok((
            Distilled {
                teacher: self.teacher.clone(),
                student: settings.to_string(),
                rows: self.rows,
                from_teacher,
                measured_mape,
                predict_us,
                kept,
                why,
            },
            kept.then_some(model),
        ))
    }
}

/// MAPE of `pred` against `truth`, percent.
fn mape(kind: ModuleKind, pred: &[f64], truth: &[f64]) -> Result<f64> {
    Metrics::compute(pred, truth)
        .map(|m| m.mape)
        .ok_or_else(|| Error::Input(format!("no rows to judge the `{kind}` student on")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(json: &str, batch: usize) -> Record {
        Record {
            spec: ModuleSpec::from_json(json).expect("spec"),
            context: Context {
                batch,
                phase: perfcast_core::Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "flex".into(),
            outcome: Outcome::Ok(Timing::median_only(1.0)),
            perfcast_version: "test".into(),
            timestamp: 0,
        }
    }

    #[test]
    fn neighbours_scale_sizes_and_keep_what_shapes_a_layer() {
        let depthwise = record(
            r#"{"kind":"conv2d","in_channels":96,"out_channels":96,"groups":96,"input_hw":28,"kernel":3,"stride":2,"padding":1}"#,
            4,
        );
        let dense = record(
            r#"{"kind":"conv2d","in_channels":64,"out_channels":128,"input_hw":[56,56],"kernel":3,"padding":1}"#,
            1,
        );
        let plan = DistillPlan {
            neighbours: 20,
            wide: 0,
            ..DistillPlan::default()
        };
        let drawn = neighbours(&[depthwise.clone(), dense.clone()], &plan);
        assert!(drawn.len() > 30, "{} neighbours of 40 draws", drawn.len());
        let keys: HashSet<String> = drawn.iter().map(Record::key).collect();
        assert_eq!(keys.len(), drawn.len(), "no configuration twice");
        assert!(!keys.contains(&depthwise.key()) && !keys.contains(&dense.key()));
        let mut moved = false;
        for n in &drawn {
            let ModuleSpec::Conv2d(c) = &n.spec else {
                panic!("a conv2d's neighbour is a conv2d")
            };
            assert_eq!((c.kernel, c.dilation), ([3, 3], [1, 1]));
            assert_eq!(c.input_hw[0], c.input_hw[1], "a square map stays square");
            assert!([1, 4].contains(&n.context.batch));
            if c.groups > 1 {
                assert_eq!((c.in_channels, c.out_channels), (c.groups, c.groups));
                assert_eq!(c.stride, [2, 2]);
                assert!((60..=144).contains(&c.groups), "{}", c.groups);
            } else {
                assert_eq!(c.stride, [1, 1]);
                assert!((40..=96).contains(&c.in_channels), "{}", c.in_channels);
                moved |= c.in_channels != 64 && c.out_channels != 128;
            }
        }
        assert!(moved, "sizes move");
        // Wide draws reach further, within their own spread, and keep the shape.
        let wide = DistillPlan {
            neighbours: 0,
            wide: 20,
            ..DistillPlan::default()
        };
        let drawn = neighbours(std::slice::from_ref(&dense), &wide);
        assert!(
            drawn.len() > 15,
            "{} wide neighbours of 20 draws",
            drawn.len()
        );
        let reach = wide.wide_spread.exp();
        let mut far = false;
        for n in &drawn {
            let ModuleSpec::Conv2d(c) = &n.spec else {
                panic!("a conv2d's neighbour is a conv2d")
            };
            assert_eq!(c.input_hw[0], c.input_hw[1], "a square map stays square");
            let f = c.in_channels as f64 / 64.0;
            assert!((1.0 / reach - 0.02..=reach + 0.02).contains(&f), "{f}");
            far |= !(0.6..=1.6).contains(&f);
        }
        assert!(far, "wide draws leave the narrow spread");
    }
}
