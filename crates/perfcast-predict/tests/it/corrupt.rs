//! A model file that parses but whose parts do not fit together is refused when the bundle
//! loads, naming the file, instead of failing or panicking at prediction time.

use std::path::Path;

use perfcast_predict::Bundle;

use crate::fixtures;

/// Copies a fixture bundle, edits one model file's JSON, and returns the load error.
fn load_edited(bundle: &str, file: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("bundles").join(bundle);
    copy_dir(&src, tmp.path());
    let path = tmp.path().join(file);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    Bundle::load(tmp.path()).unwrap_err().to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_roofline_with_a_column_outside_its_schema_is_refused() {
    let e = load_edited("cpu-roofline", "linear/roofline.json", |j| {
        j["idx"][0] = serde_json::json!(9999);
    });
    assert!(
        e.contains("linear/roofline.json") && e.contains("corrupt model"),
        "{e}"
    );
    let e = load_edited("cpu-roofline", "relu/roofline.json", |j| {
        j["training"]["compute"] = serde_json::json!(-1.0);
    });
    assert!(
        e.contains("relu/roofline.json") && e.contains("non-negative"),
        "{e}"
    );
}

#[test]
fn a_medn_whose_parts_do_not_fit_is_refused() {
    let e = load_edited("cpu-medn", "linear/medn.json", |j| {
        j["members"] = serde_json::json!(0);
    });
    assert!(
        e.contains("linear/medn.json") && e.contains("corrupt model"),
        "{e}"
    );
}

#[test]
fn a_medn_with_short_or_empty_standardisers_is_refused() {
    // Each once panicked at prediction time (an index past the end).
    let edits: [(&str, serde_json::Value); 4] = [
        ("/targets/mean", serde_json::json!([])),
        ("/targets/std", serde_json::json!([])),
        ("/scaler/inv_std", serde_json::json!([1.0])),
        ("/targets/mean", serde_json::json!([0.0, 0.0, 0.0])),
    ];
    for (at, value) in edits {
        let e = load_edited("cpu-medn", "linear/medn.json", |j| {
            *j.pointer_mut(at).unwrap() = value.clone();
        });
        assert!(
            e.contains("linear/medn.json") && e.contains("corrupt model"),
            "{at}: {e}"
        );
    }
}
