//! MEDN's time- and space-efficient auto-selection: per module kind, the candidate with the
//! best cross-validated accuracy among those within the prediction-time and size budgets,
//! optionally trading accuracy for cost.

pub use perfcast_predict::bundle::{Budget, Candidate, Selection};

use crate::error::{Error, Result};

/// A cross-validated MAPE above this (percent: predictions a hundred times off on average) is
/// a numerical blow-up of the fit, not an accuracy to compare or print.
pub const BLOWN_UP_MAPE: f64 = 1e4;

/// Whether a MAPE (percent) is no accuracy at all: not finite or above [`BLOWN_UP_MAPE`].
pub fn blown_up(mape: f64) -> bool {
    !(mape.is_finite() && mape <= BLOWN_UP_MAPE)
}

/// Chooses among `candidates` of module kind `kind` under `budget`.
pub fn select(kind: &str, candidates: &[Candidate], budget: &Budget) -> Result<Selection> {
    budget.validate()?;
    let mut excluded = Vec::new();
    let mut ok: Vec<&Candidate> = Vec::new();
    for c in candidates {
        if let Some(only) = &budget.only
            && &c.model != only
        {
            excluded.push((c.model.clone(), format!("single selection of `{only}`")));
            continue;
        }
        if c.cv_mape.is_nan() {
            excluded.push((c.model.clone(), "no cross-validated accuracy".into()));
            continue;
        }
        if blown_up(c.cv_mape) {
            excluded.push((
                c.model.clone(),
                format!(
                    "guarded: its cross-validated MAPE is above {BLOWN_UP_MAPE}% (a numerical \
                     blow-up of the fit, not an accuracy)"
                ),
            ));
            continue;
        }
        if let Some(max) = budget.max_predict_us
            && c.predict_us > max
        {
            excluded.push((
                c.model.clone(),
                format!("{:.3} us per prediction > {max} us", c.predict_us),
            ));
            continue;
        }
        if let Some(max) = budget.max_model_kb
            && c.size_bytes as f64 / 1024.0 > max
        {
            excluded.push((
                c.model.clone(),
                format!("{:.1} KiB > {max} KiB", c.size_bytes as f64 / 1024.0),
            ));
            continue;
        }
        ok.push(c);
    }
    if ok.is_empty() {
        let why = if excluded.is_empty() {
            "no candidates".to_string()
        } else {
            excluded
                .iter()
                .map(|(m, w)| format!("{m}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        return Err(Error::NothingFits {
            kind: kind.to_string(),
            why,
        });
    }
    let w = budget.cost_weight;
    let score = |c: &Candidate| cost_score(c, w);
    let winner = ok
        .iter()
        .min_by(|a, b| score(a).total_cmp(&score(b)))
        .copied()
        .ok_or_else(|| Error::Query("no candidate".into()))?;
    let most_accurate = ok
        .iter()
        .min_by(|a, b| a.cv_mape.total_cmp(&b.cv_mape))
        .copied()
        .unwrap_or(winner);
    let why = if winner.model == most_accurate.model {
        format!(
            "lowest cross-validated MAPE ({:.2}%) within the budgets",
            winner.cv_mape
        )
    } else {
        format!(
            "{:.2}% MAPE at {:.2} us and {:.1} KiB beats {}'s {:.2}% at {:.2} us and {:.1} KiB \
             under cost weight {w}",
            winner.cv_mape,
            winner.predict_us,
            winner.size_bytes as f64 / 1024.0,
            most_accurate.model,
            most_accurate.cv_mape,
            most_accurate.predict_us,
            most_accurate.size_bytes as f64 / 1024.0
        )
    };
    Ok(Selection {
        chosen: winner.model.clone(),
        pareto: pareto_front(candidates),
        why,
        excluded,
    })
}

/// `cv_mape * (1 + w log2(1 + us)) * (1 + w/2 log2(1 + KiB / 64))`: each doubling of
/// prediction time (beyond a microsecond) costs `w` of the MAPE, each doubling of size (beyond
/// 64 KiB) half that. Absolute scales, not ratios to the cheapest candidate: a roofline that
/// answers in 5 ns must not make every microsecond model look 500 times slower.
pub fn cost_score(c: &Candidate, w: f64) -> f64 {
    c.cv_mape
        * (1.0 + w * (1.0 + c.predict_us.max(0.0)).log2())
        * (1.0 + 0.5 * w * (1.0 + c.size_bytes as f64 / 1024.0 / 64.0).log2())
}

/// Families not dominated in (cv MAPE, prediction time, size), in input order.
pub fn pareto_front(candidates: &[Candidate]) -> Vec<String> {
    let dominates = |a: &Candidate, b: &Candidate| {
        a.cv_mape <= b.cv_mape
            && a.predict_us <= b.predict_us
            && a.size_bytes <= b.size_bytes
            && (a.cv_mape < b.cv_mape || a.predict_us < b.predict_us || a.size_bytes < b.size_bytes)
    };
    candidates
        .iter()
        .filter(|c| !blown_up(c.cv_mape))
        .filter(|c| {
            !candidates
                .iter()
                .any(|o| !blown_up(o.cv_mape) && dominates(o, c))
        })
        .map(|c| c.model.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(model: &str, mape: f64, us: f64, kb: usize) -> Candidate {
        Candidate {
            model: model.into(),
            cv_mape: mape,
            test_mape: mape,
            predict_us: us,
            size_bytes: kb * 1024,
        }
    }

    fn cands() -> Vec<Candidate> {
        vec![
            c("ridge", 13.0, 0.3, 2),
            c("trees", 7.0, 6.0, 250),
            c("medn", 6.0, 2.5, 60),
            c("knn", 20.0, 1.5, 100),
        ]
    }

    #[test]
    fn most_accurate_wins_without_budgets() {
        let s = select("conv2d", &cands(), &Budget::default()).unwrap();
        assert_eq!(s.chosen, "medn");
        assert!(
            s.why.contains("lowest cross-validated MAPE (6.00%)"),
            "{}",
            s.why
        );
        // ridge dominates knn and medn dominates trees on all three axes.
        assert_eq!(s.pareto, vec!["ridge", "medn"]);
    }

    #[test]
    fn a_blown_up_candidate_is_guarded_not_chosen_or_compared() {
        // A fit that blew up must not be printed as an accuracy or chosen.
        let mut cs = cands();
        cs.push(c("blown", 243_929.55, 0.1, 1));
        cs.push(c("inf", f64::INFINITY, 0.1, 1));
        let s = select("concat", &cs, &Budget::default()).unwrap();
        assert_eq!(s.chosen, "medn");
        for name in ["blown", "inf"] {
            let why = &s.excluded.iter().find(|(m, _)| m == name).unwrap().1;
            assert!(why.starts_with("guarded:"), "{name}: {why}");
            assert!(!why.contains("243"), "{why}");
        }
        // The cheapest candidates cannot dominate the front with an absurd error.
        assert_eq!(s.pareto, vec!["ridge", "medn"]);
        assert!(!blown_up(9_999.0) && blown_up(10_001.0) && blown_up(f64::NAN));
    }

    #[test]
    fn budgets_rule_out_candidates_and_say_why() {
        let budget = Budget {
            max_predict_us: Some(2.0),
            ..Budget::default()
        };
        let s = select("conv2d", &cands(), &budget).unwrap();
        assert_eq!(s.chosen, "ridge");
        assert!(
            s.excluded
                .iter()
                .any(|(m, w)| m == "medn" && w.contains("2.500 us"))
        );
        let budget = Budget {
            max_model_kb: Some(1.0),
            ..Budget::default()
        };
        let err = select("conv2d", &cands(), &budget).unwrap_err().to_string();
        assert!(
            err.contains("no `conv2d` model fits") && err.contains("KiB > 1 KiB"),
            "{err}"
        );
    }

    #[test]
    fn cost_weight_trades_accuracy_for_speed() {
        let budget = Budget {
            cost_weight: 1.0,
            ..Budget::default()
        };
        // medn: 6 * (1 + log2 3.5) * (1 + log2(1 + 60/64) / 2) ~ 24.9; ridge ~ 18.3.
        let s = select("conv2d", &cands(), &budget).unwrap();
        assert_eq!(s.chosen, "ridge");
        assert!(s.why.contains("beats medn's"), "{}", s.why);
    }

    #[test]
    fn single_selection_uses_one_family() {
        let budget = Budget {
            only: Some("trees".into()),
            ..Budget::default()
        };
        assert_eq!(select("relu", &cands(), &budget).unwrap().chosen, "trees");
        let bad = Budget {
            max_predict_us: Some(-1.0),
            ..Budget::default()
        };
        let err = select("relu", &cands(), &bad).unwrap_err().to_string();
        assert!(
            err.contains("--max-predict-us must be positive, got -1"),
            "{err}"
        );
    }
}
