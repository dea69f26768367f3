//! The variables a template sees: the CR's top-level fields plus `args`, `external`, `target`.

use minijinja::Value as Jinja;
use serde_json::Value;

use super::convert::to_jinja;

/// What templates are rendered against.
///
/// The CR's top-level fields (`apiVersion`, `kind`, `metadata`, `spec`, `status`, ...) are
/// top-level variables, so `{{ .spec.image }}` reads the CR's spec. Beside them:
/// `args` (the rendered `reconcile.args`, empty until set), `external` (results of
/// `reconcile.external` calls, empty until set) and `target` (the serve target, or none).
/// These three names win over CR fields of the same name.
///
/// The JSON is converted once, when the context is built; rendering many templates against
/// one context shares it.
#[derive(Debug, Clone)]
pub struct Context {
    entries: Vec<(String, Jinja)>,
    /// The entries of `external`, kept apart so that one more result is added without
    /// converting the others again.
    external: Vec<(String, Jinja)>,
    root: Jinja,
}

impl Context {
    /// A context for the CR `cr`. A `cr` that is not a JSON object contributes no variables.
    #[must_use]
    pub fn new(cr: &Value) -> Context {
        let mut entries: Vec<(String, Jinja)> = cr
            .as_object()
            .map(|map| map.iter().map(|(k, v)| (k.clone(), to_jinja(v))).collect())
            .unwrap_or_default();
        let empty = || Jinja::from_pairs(std::iter::empty::<(&str, Jinja)>());
        for (name, value) in [
            ("args", empty()),
            ("external", empty()),
            ("target", Jinja::from(())),
        ] {
            set_entry(&mut entries, name, value);
        }
        let root = build_root(&entries);
        Context {
            entries,
            external: Vec::new(),
            root,
        }
    }

    /// Sets `args`: the rendered `reconcile.args`.
    #[must_use]
    pub fn with_args(self, args: Value) -> Context {
        self.with_variable("args", &args)
    }

    /// Sets `external`: the results of `reconcile.external` calls, by call name.
    #[must_use]
    pub fn with_external(mut self, external: Value) -> Context {
        self.external = external
            .as_object()
            .map(|map| map.iter().map(|(k, v)| (k.clone(), to_jinja(v))).collect())
            .unwrap_or_default();
        self.with_variable("external", &external)
    }

    /// Adds one result to `external`, by call name: only `value` is converted, the
    /// results already there are shared, not copied — calls made one after another each
    /// see those before them at the cost of their own result alone.
    #[must_use]
    pub fn with_external_result(mut self, name: &str, value: &Value) -> Context {
        set_entry(&mut self.external, name, to_jinja(value));
        let external = build_root(&self.external);
        set_entry(&mut self.entries, "external", external);
        self.root = build_root(&self.entries);
        self
    }

    /// Sets `target`: the serve target the CR came through, if any.
    #[must_use]
    pub fn with_target(self, target: Option<&str>) -> Context {
        let value = target.map_or(Value::Null, |t| Value::String(t.to_owned()));
        self.with_variable("target", &value)
    }

    /// Sets (or replaces) any top-level variable.
    #[must_use]
    pub fn with_variable(mut self, name: &str, value: &Value) -> Context {
        set_entry(&mut self.entries, name, to_jinja(value));
        self.root = build_root(&self.entries);
        self
    }

    /// The minijinja value templates are rendered with.
    pub fn value(&self) -> Jinja {
        self.root.clone()
    }
}

fn set_entry(entries: &mut Vec<(String, Jinja)>, name: &str, value: Jinja) {
    match entries.iter_mut().find(|(k, _)| k == name) {
        Some(entry) => entry.1 = value,
        None => entries.push((name.to_owned(), value)),
    }
}

fn build_root(entries: &[(String, Jinja)]) -> Jinja {
    Jinja::from_pairs(entries.iter().map(|(k, v)| (k.as_str(), v.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cr_fields_and_extra_variables_are_top_level() {
        let ctx = Context::new(&json!({"kind": "WebApp", "spec": {"a": 1}, "args": "cr's own"}))
            .with_args(json!({"image": "nginx"}))
            .with_target(Some("blue"));
        let root = ctx.value();
        let get = |name: &str| root.get_attr(name).ok().map(|v| v.to_string());
        assert_eq!(get("kind").as_deref(), Some("WebApp"));
        assert_eq!(get("target").as_deref(), Some("blue"));
        let args = root.get_attr("args").ok();
        assert_eq!(
            args.and_then(|a| a.get_attr("image").ok())
                .map(|v| v.to_string())
                .as_deref(),
            Some("nginx")
        );
    }

    #[test]
    fn external_results_added_one_by_one_read_as_one_map() {
        let ctx = Context::new(&json!({}))
            .with_external_result("a", &json!({"n": 1}))
            .with_external_result("b", &json!([2]))
            .with_external_result("a", &json!({"n": 3}));
        let external = ctx.value().get_attr("external").expect("external");
        assert_eq!(external.len(), Some(2));
        let a = external.get_attr("a").and_then(|a| a.get_attr("n"));
        assert_eq!(a.map(|n| n.to_string()).ok().as_deref(), Some("3"));
        // Setting the whole map starts again from it.
        let ctx = ctx
            .with_external(json!({"c": true}))
            .with_external_result("d", &json!(null));
        let external = ctx.value().get_attr("external").expect("external");
        assert_eq!(external.len(), Some(2));
        assert!(external.get_attr("a").is_ok_and(|a| a.is_undefined()));
    }

    #[test]
    fn args_and_external_default_to_empty_maps() {
        let root = Context::new(&json!({})).value();
        for name in ["args", "external"] {
            assert_eq!(root.get_attr(name).ok().and_then(|v| v.len()), Some(0));
        }
        assert!(root.get_attr("target").is_ok_and(|v| v.is_none()));
    }
}
