//! Shell completions and man pages generated from the clap definition: the bash script loads
//! in bash, every shell gets a script, and every page renders with man(1) without warnings.

use std::process::Command;

use crate::support::*;

#[test]
fn bash_completion_script_loads() {
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <('{}' completions bash) && complete -p ckptfs",
            bin()
        ))
        .output()
        .expect("running bash");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("ckptfs"),
        "bash did not load the completion script: {o:?}"
    );
}

/// What bash offers after `ckptfs` + the given words (the last one being completed).
fn bash_complete(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source <('{}' completions bash) && COMP_WORDS=(ckptfs {}) && COMP_CWORD={} && \
         _ckptfs ckptfs '{}' && echo \"${{COMPREPLY[@]}}\"",
        bin(),
        quoted.join(" "),
        words.len(),
        words.last().copied().unwrap_or("")
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(script)
        .output()
        .expect("running bash");
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn bash_completes_subcommands_and_values() {
    assert_eq!(bash_complete(&["br"]), "branch browse");
    assert_eq!(
        bash_complete(&["inter"]),
        "",
        "a hidden command was offered"
    );
    let shells = bash_complete(&["completions", ""]);
    for sh in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.split(' ').any(|w| w == sh), "{shells}");
    }
}

#[test]
fn every_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = ok(["completions", shell]);
        for sub in ["capture", "restore", "browse", "completions"] {
            assert!(script.contains(sub), "{shell} script lacks {sub}");
        }
        assert!(
            !script.contains("internal-detach"),
            "{shell}: hidden command listed"
        );
    }
    fails(2, ["completions", "tcsh"]);
}

/// `MANWIDTH=80 man --warnings -l FILE`: exit 0, nothing on stderr; returns the page with
/// whitespace collapsed (man wraps lines).
fn render(page: &std::path::Path) -> String {
    let o = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .expect("running man (install man-db: scripts/setup-deps.sh)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.trim().is_empty(),
        "man -l {} failed or warned: {:?}\n{err}",
        page.display(),
        o.status
    );
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn man_pages_render_without_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    ok(["man", s(dir.path())]);
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .expect("reading man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for want in [
        "ckptfs.1",
        "ckptfs-log.1",
        "ckptfs-branch-list.1",
        "ckptfs-man.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "no {want} in {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("internal")), "{pages:?}");
    // Each page holds its command's about text (the first line of its --help).
    for (page, about) in [
        ("ckptfs.1", "checkpoint directory trees"),
        ("ckptfs-log.1", "List checkpoints, newest first"),
        ("ckptfs-completions.1", "Print a shell completion script"),
        ("ckptfs-branch-list.1", "ckptfs-branch-list"),
    ] {
        let text = render(&dir.path().join(page));
        assert!(text.contains(about), "{page} lacks {about:?}: {text}");
    }
    for p in &pages {
        render(&dir.path().join(p));
    }
}

#[test]
fn man_without_dir_prints_the_top_page() {
    let page = ok(["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH ckptfs 1"),
        "{page}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ckptfs.1");
    std::fs::write(&file, &page).expect("writing page");
    assert!(render(&file).contains("ckptfs - ckptfs: checkpoint directory trees"));
    let missing = dir.path().join("nope");
    let err = fails(2, ["man", s(&missing)]);
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn help_explains_the_new_commands() {
    assert!(ok(["completions", "--help"]).contains("source <(ckptfs completions bash)"));
    assert!(ok(["man", "--help"]).contains("ckptfs-SUB.1"));
}
