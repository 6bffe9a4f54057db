use std::process::ExitCode;

fn main() -> ExitCode {
    helmbench::cli::main()
}
