//! `pagevault generate`: man pages, shell completions and the Markdown command
//! reference, all made from the clap definitions so none can drift from `--help`.

use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

/// Help is wrapped at this width in the reference pages, whatever the terminal.
const WIDTH: usize = 100;

#[derive(Clone, Copy, ValueEnum)]
pub enum What {
    /// pagevault.1 and pagevault-COMMAND.1 (roff).
    Man,
    /// pagevault.bash, _pagevault (zsh), pagevault.fish.
    Completions,
    /// pagevault.md and pagevault-COMMAND.md: each command's --help.
    Reference,
}

#[derive(Args)]
pub struct GenerateArgs {
    #[arg(value_enum)]
    pub what: What,
    /// Directory to write into (made if missing; files of the same names replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Writes `what` for `cmd` (the whole command line, version included) into `args.out`.
pub fn run(args: GenerateArgs, cmd: clap::Command) -> anyhow::Result<()> {
    let mut cmd = no_env_values(cmd.term_width(WIDTH).max_term_width(WIDTH));
    cmd.build();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot make {}", args.out.display()))?;
    let written = match args.what {
        What::Man => man(&cmd, &args.out)?,
        What::Completions => completions(&mut cmd, &args.out)?,
        What::Reference => reference(&mut cmd, &args.out)?,
    };
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

/// The pages never show the generating environment's PAGEVAULT_* values.
fn no_env_values(cmd: clap::Command) -> clap::Command {
    super::cli::map_commands(cmd, &|c| c.mut_args(|a| a.hide_env_values(true)))
}

/// A visible command: its file stem (`pagevault-archive-push`), its title
/// (`pagevault archive-push`) and its definition.
struct Page {
    stem: String,
    title: String,
    cmd: clap::Command,
}

/// Every visible command, depth first, the top one first.
fn commands(cmd: &clap::Command) -> Vec<Page> {
    fn walk(stem: &str, title: &str, cmd: &clap::Command, out: &mut Vec<Page>) {
        out.push(Page {
            stem: stem.to_string(),
            title: title.to_string(),
            cmd: cmd.clone(),
        });
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let name = sub.get_name();
            walk(
                &format!("{stem}-{name}"),
                &format!("{title} {name}"),
                sub,
                out,
            );
        }
    }
    let mut out = Vec::new();
    walk(cmd.get_name(), cmd.get_name(), cmd, &mut out);
    out
}

/// Writes `name` in `dir` new and renames it into place: a link planted at the name is
/// replaced, never written through. Public documents: 0644.
fn write(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    let fail = || format!("cannot write {}", p.display());
    let mut t = tempfile::NamedTempFile::new_in(dir).with_context(fail)?;
    t.write_all(bytes).with_context(fail)?;
    (t.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644)))
    .with_context(fail)?;
    t.persist(&p).map_err(|e| e.error).with_context(fail)?;
    Ok(p)
}

fn man(cmd: &clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for Page { stem, cmd: c, .. } in commands(cmd) {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c)
            .title(stem.to_uppercase())
            .source(format!(
                "pagevault {}",
                cmd.get_version().unwrap_or_default()
            ))
            .manual("pagevault manual")
            .render(&mut buf)?;
        out.push(write(dir, &format!("{stem}.1"), &buf)?);
    }
    Ok(out)
}

fn completions(cmd: &mut clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    let name = cmd.get_name().to_string();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|sh| Ok(clap_complete::generate_to(sh, cmd, &name, dir)?))
        .collect()
}

fn reference(cmd: &mut clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut index = String::from(
        "# Command reference\n\nEach page is the command's `--help`, made by \
         `pagevault generate reference --out docs/reference` (a test checks they agree).\n\n\
         | command | what it does |\n|---|---|\n",
    );
    for Page {
        stem,
        title,
        cmd: mut c,
    } in commands(cmd)
    {
        let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
        index += &format!("| [{title}]({stem}.md) | {} |\n", about.replace('|', "\\|"));
        let help = c.render_long_help().to_string();
        let help: String = help
            .lines()
            .map(|l| l.trim_end().to_string() + "\n")
            .collect();
        let page = format!("# {title}\n\n```text\n{help}```\n");
        out.push(write(dir, &format!("{stem}.md"), page.as_bytes())?);
    }
    out.push(write(dir, "README.md", index.as_bytes())?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_link_at_a_page_s_name_is_replaced_not_written_through() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        let dir = t.path().join("out");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("pagevault.md")).unwrap();
        let p = super::write(&dir, "pagevault.md", b"page").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"page");
    }
}
