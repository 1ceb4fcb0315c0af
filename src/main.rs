//! The `lorekeeper` binary: the workbench with no verb, headless verbs otherwise.

fn main() -> std::process::ExitCode {
    lorekeeper::cli::main()
}
