//! JSON outputs against their documented schemas (docs/schema/NAME.json, docs/json.md).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// docs/schema.
pub fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema")
}

/// Validates `v` against docs/schema/`name`.json; panics naming every violation.
pub fn validate(name: &str, v: &Value, what: &str) {
    let p = schema_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", p.display()));
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: output does not match docs/schema/{name}.json:\n{}\noutput: {}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}
