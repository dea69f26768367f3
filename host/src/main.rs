//! The `inrun` command: parses the command line, sets up logging, and runs the command.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // A plugin compile the host runs in a child process of its own program (not a command
    // for people: it reads a module on stdin and writes compiled code on stdout).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(inrun::wasm::compiler::COMPILE_COMMAND) {
        let code = inrun::wasm::compiler::child_main(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    inrun::sources::install_tls_provider();
    let cli = cli::Cli::parse();
    let traces = match cli.traces() {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Held to the end: dropping it flushes the traces not exported yet.
    let traces = match inrun::telemetry::init(&cli.log_filter(), cli.json_logs(), traces.as_ref()) {
        Ok(guard) => guard,
        Err(e) => {
            // Logging is not up: say it where the user looks.
            eprintln!("error: {}", inrun::errors::chain(&e));
            return ExitCode::FAILURE;
        }
    };
    match cli::execute(cli, traces.trace_ids()) {
        Ok(()) => ExitCode::SUCCESS,
        // `inrun plan` printed its report: the code says what it found.
        Err(e) if e.downcast_ref::<cli::plan::PlanOutcome>().is_some() => {
            let code = e
                .downcast_ref::<cli::plan::PlanOutcome>()
                .map_or(1, |o| o.1);
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {}", inrun::errors::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
