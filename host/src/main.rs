//! The `inrun` command: parses the command line, sets up logging, and runs the command.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    inrun::telemetry::init(&cli.log_filter(), cli.json_logs());
    match cli::execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", inrun::errors::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
