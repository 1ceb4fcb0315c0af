//! `lorekeeper bench local`: the embedded model's speed on this machine.

use crate::llm::local::bench::{self, BenchOptions};
use clap::Args;
use std::path::PathBuf;

/// Options of `lorekeeper bench local`.
#[derive(Debug, Args)]
pub struct LocalBenchArgs {
    /// GGUF model file (default: the installed Gemma 3 270M).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<u32>,
    /// Runs per measurement (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Token budget per run (free text generates exactly this many).
    #[arg(long, default_value_t = 128)]
    pub max_tokens: u32,
    /// Print every reply to stderr.
    #[arg(long)]
    pub show: bool,
}

/// The verb: prints one line per thread count (JSON with `--json`, else a table row).
pub fn run(args: LocalBenchArgs, json: bool) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    let options = BenchOptions { model: args.model, threads: args.threads, runs: args.runs, max_tokens: args.max_tokens, show: args.show };
    let mut out = std::io::stdout().lock();
    if !json {
        writeln!(out, "| threads | CPU backend | prompt tok/s | gen tok/s | first token ms | JSON gen tok/s | grammar rejections / wide / full scans | JSON valid | peak RSS MiB |")?;
        writeln!(out, "|---|---|---|---|---|---|---|---|---|")?;
    }
    let mut write_error = None;
    bench::run(&options, |r| {
        let line = if json {
            serde_json::to_string(r).unwrap_or_default()
        } else {
            format!(
                "| {} | {} | {:.0} ({} tok) | {:.1} ({} tok) | {:.0} | {:.1} ({} tok) | {} / {} / {} | {} | {:.0} |",
                r.threads,
                r.cpu_backend.as_deref().unwrap_or("?"),
                r.prompt_tokens_per_sec,
                r.prompt_tokens,
                r.generation_tokens_per_sec,
                r.generated_tokens,
                r.first_token_ms,
                r.json_tokens_per_sec,
                r.json_generated_tokens,
                r.json_grammar_rejections,
                r.json_grammar_wide_scans,
                r.json_grammar_full_scans,
                if r.json_valid { "yes" } else { "no" },
                r.peak_rss_mib
            )
        };
        if let Err(e) = writeln!(out, "{line}").and_then(|_| out.flush()) {
            write_error.get_or_insert(e);
        }
    })?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    Ok(std::process::ExitCode::SUCCESS)
}
