//! A file of module queries (`perfcast predict --modules-file`): a JSON array of module specs,
//! each optionally with its own `batch`, `phase` and `threads`.

use std::path::Path;

use crate::context::{Context, ModuleQuery};
use crate::error::{Error, Result};
use crate::spec::ModuleSpec;

/// Reads the queries in `path`, each with its context (its own fields, `defaults`' where it
/// has none), every spec and context checked here so an error names the file and the entry.
pub fn read_queries(path: &Path, defaults: &Context) -> Result<Vec<(ModuleSpec, Context)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Input(format!("reading `{}`: {e}", path.display())))?;
    let items: Vec<ModuleQuery> = serde_json::from_str(&text).map_err(|e| {
        Error::Input(format!(
            "`{}` is not a JSON array of module specs: {e}",
            path.display()
        ))
    })?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let entry = |e: Error| Error::Input(format!("`{}`: module {i}: {e}", path.display()));
            q.spec.validate().map_err(entry)?;
            let context = q.context(defaults);
            context.validate().map_err(entry)?;
            Ok((q.spec, context))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Phase;

    #[test]
    fn entries_take_their_own_context_and_errors_name_the_entry() {
        let dir = std::env::temp_dir().join(format!("perfcast-queries-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("q.json");
        let defaults = Context {
            batch: 4,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        std::fs::write(
            &path,
            r#"[{"kind":"relu","shape":[1,1,8]},
               {"kind":"linear","in_features":8,"out_features":4,"batch":2,"phase":"training"}]"#,
        )
        .expect("write");
        let q = read_queries(&path, &defaults).expect("queries");
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].1.batch, q[0].1.phase), (4, Phase::Inference));
        assert_eq!((q[1].1.batch, q[1].1.phase), (2, Phase::Training));
        std::fs::write(&path, r#"[{"kind":"relu","shape":[1,1,8],"batch":0}]"#).expect("write");
        let err = read_queries(&path, &defaults)
            .expect_err("batch 0")
            .to_string();
        assert!(
            err.starts_with(&format!("`{}`: module 0: ", path.display())),
            "{err}"
        );
        std::fs::write(&path, "{").expect("write");
        let err = read_queries(&path, &defaults)
            .expect_err("not json")
            .to_string();
        assert!(err.contains("is not a JSON array of module specs"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
