//! The `nodeward` binary: the command line in `cli/`, all the work in the library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
