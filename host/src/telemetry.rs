//! Logging setup: a filter, text or JSON lines, and wasmtime/cranelift kept quiet.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax; wasmtime and
/// cranelift are held at `warn` unless the filter names them.
pub fn init(filter: &str, json: bool) {
    let mut spec = filter.to_string();
    for noisy in ["cranelift", "wasmtime"] {
        if !spec.contains(noisy) {
            spec.push_str(&format!(",{noisy}=warn"));
        }
    }
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        // Logging is not up yet: say it where the user looks.
        eprintln!("warning: log filter {filter:?} is not valid ({e}); logging warnings only");
        EnvFilter::new("warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
