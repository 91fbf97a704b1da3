//! `completions` and `man`: shell completion scripts and man pages,
//! generated from the clap definitions so they never drift from the CLI.
use crate::cli::{Cli, CompletionsArgs, ManArgs, Shell};
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;

/// The program's name in scripts and pages.
const NAME: &str = "bootimage-gen";

pub fn completions(a: CompletionsArgs) -> Result<()> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    match a.shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, NAME, &mut out)
        }
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, NAME, &mut out),
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, NAME, &mut out)
        }
    }
    out.flush().context("writing the completion script")
}

pub fn man(a: ManArgs) -> Result<()> {
    let mut cmd = Cli::command();
    cmd.build();
    let Some(dir) = a.dir else {
        let mut out = std::io::stdout().lock();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        return out.flush().context("writing the man page");
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut pages = vec![(NAME.to_string(), cmd.clone())];
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        // clap names are &'static str; this process ends after the pages.
        let name: &'static str = format!("{NAME}-{}", sub.get_name()).leak();
        pages.push((name.to_string(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page).render(&mut buf)?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
