//! A call's templates rendered against the CR's context: as JSON, or as text for a URL,
//! a header, a query or a command argument; a failure names the template.

use serde_json::Value;

use super::error::CallError;
use inrun_template::{CompiledValue, Context};

/// The template `t` rendered; a failure names `what`.
pub(super) fn render(t: &CompiledValue, ctx: &Context, what: &str) -> Result<Value, CallError> {
    t.render(ctx).map_err(|source| CallError::Template {
        what: what.to_string(),
        source,
    })
}

/// The template `t` rendered as text: a string as it is, `null` as nothing, anything else
/// as JSON.
pub(super) fn render_text(
    t: &CompiledValue,
    ctx: &Context,
    what: &str,
) -> Result<String, CallError> {
    Ok(match render(t, ctx, what)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}
