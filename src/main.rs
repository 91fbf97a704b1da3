//! bootimage-gen: thin main — logging, parse, run, print the error chain.
use bootimage_gen::{cli::Cli, commands};
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("BOOTIMAGE_GEN_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                // The AWS chain warns about every source it tries (IMDS off
                // EC2, ...); its failure reaches us as an error anyway.
                "{level},ostree_ext=warn,containers_image_proxy=warn,aws_config=error"
            ))
        });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    bootimage_gen::util::ui::set_quiet(cli.quiet);
    if let Err(e) = commands::run(cli) {
        if let Some(i) = e.downcast_ref::<commands::Interrupted>() {
            eprintln!("bootimage-gen: {i}");
            std::process::exit(i.0);
        }
        if let Some(v) = e.downcast_ref::<commands::verify::Verdict>() {
            eprintln!("bootimage-gen verify: {v}");
            std::process::exit(v.code);
        }
        // One line: the chain of causes, outermost first.
        let msg = format!("{e:#}").replace('\n', " ");
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}
