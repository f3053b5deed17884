fn main() -> std::process::ExitCode {
    evolve::cli::main()
}
