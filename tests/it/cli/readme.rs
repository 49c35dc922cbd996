//! README's tutorial runs as written: its setup block (the first `sh` block of the tutorial)
//! and then every `console` block of README.md, in order, each `$ ` line run by bash in one
//! shell environment (`T` set to a fresh directory, the built `ckptfs` first on PATH), its
//! output (stdout and stderr) compared with the lines README shows under it. So the manual
//! cannot drift from the binary. `README_OVERWRITE=1` writes what the differing steps printed
//! into README.md (`=all`: every step, so ids agree across blocks); read the diff before
//! committing it.
//!
//! What may differ between runs is made alike on both sides before comparing: the tutorial's
//! directory (`/tmp/tut-demo` in README), ids (12 or 64 hex digits), times, pids, sizes and
//! durations, and runs of spaces (columns fit their content). A line `...` in README stands
//! for any number of lines; `[..]` within a line for any text.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

use crate::support::*;

/// The tutorial's directory as README writes it.
const README_T: &str = "/tmp/tut-demo";

/// One `$ ` command of a console block and the output README shows for it.
struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The tutorial's setup script and every console block's steps, in README's order.
fn tutorial(readme: &str) -> (String, Vec<Step>) {
    let lines: Vec<&str> = readme.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("## Ten-minute tutorial"))
        .expect("README has the tutorial");
    let mut setup = String::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut i = start;
    while i < lines.len() {
        let fence = lines[i];
        if fence == "```sh" && setup.is_empty() {
            i += 1;
            while lines[i] != "```" {
                setup.push_str(lines[i]);
                setup.push('\n');
                i += 1;
            }
        } else if fence == "```console" {
            i += 1;
            while lines[i] != "```" {
                if let Some(cmd) = lines[i].strip_prefix("$ ") {
                    let mut command = cmd.to_string();
                    let at = i + 1;
                    while command.ends_with('\\') {
                        i += 1;
                        command.push('\n');
                        command.push_str(lines[i]);
                    }
                    steps.push(Step {
                        line: at,
                        command,
                        expected: Vec::new(),
                    });
                } else if let Some(s) = steps.last_mut() {
                    s.expected.push(lines[i].to_string());
                }
                i += 1;
            }
        }
        i += 1;
    }
    (setup, steps)
}

/// The text with what may differ between runs made alike (see the module doc).
fn normalize(text: &str) -> String {
    let rules: [(&str, &str); 8] = [
        (
            r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d( [+-]\d\d:\d\d)?",
            "<time>",
        ),
        (r"\d{4}-\d\d-\d\dT\d{6}-\d+", "<time>-<pid>"),
        (r"\b[0-9a-f]{64}\b", "<id>"),
        (r"\b[0-9a-f]{12}\b", "<id>"),
        (r"pid \d+", "pid <n>"),
        (r"\d+(\.\d+)? (B|KiB|MiB|GiB)\b", "<size>"),
        (r"\d+(\.\d+)? ms\b", "<ms>"),
        (r"[ \t]+", " "),
    ];
    let mut out = text.to_string();
    for (pattern, with) in rules {
        out = Regex::new(pattern)
            .expect("a valid pattern")
            .replace_all(&out, with)
            .into_owned();
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `actual` lines match `expected` lines (`...`: any lines; `[..]`: any text).
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((e, rest)) => {
            let Some((a, after)) = actual.split_first() else {
                return false;
            };
            let pattern = format!("^{}$", regex::escape(e).replace(r"\[\.\.\]", ".*"));
            Regex::new(&pattern).is_ok_and(|r| r.is_match(a)) && matches(rest, after)
        }
    }
}

/// Unmounts whatever the tutorial mounted under its directory, also when a step fails.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for mp in [self.0.join("room"), self.0.join("home")] {
            let _ = Command::new(bin()).arg("umount").arg(&mp).output();
        }
        unmount_all_under(&self.0);
    }
}

fn run_in(t: &Path, path: &str, script: &str) -> (bool, String) {
    let o = Command::new("bash")
        .arg("-c")
        // As on a terminal: `ls` lists in columns.
        .arg(format!(
            "shopt -s expand_aliases\nalias ls='ls -C'\n{script}\n"
        ))
        .env("T", t)
        .env("PATH", path)
        .env("TZ", "UTC")
        .env_remove("CKPTFS_STORE")
        .current_dir(t)
        .output()
        .expect("running bash");
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

#[test]
fn the_readme_tutorial_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let (setup, steps) = tutorial(&readme);
    assert!(
        !setup.is_empty() && steps.len() > 40,
        "{} steps",
        steps.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("tut-demo");
    let _cleanup = Cleanup(t.clone());
    let bin_dir = Path::new(bin()).parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    // README's setup sets T itself; here T is this test's directory.
    let setup = setup.replace(&format!("T={README_T}\n"), "");
    fs::create_dir_all(&t).unwrap();
    let (ok, out) = run_in(&t, &path, &setup);
    assert!(ok, "README's setup failed:\n{out}");
    let here = t.display().to_string();
    let mut wrong = Vec::new();
    let mut readme_lines: Vec<String> = readme.lines().map(String::from).collect();
    // Steps from the last, so rewriting one (README_OVERWRITE=1) moves no line still to come.
    let mut outputs = Vec::new();
    for step in &steps {
        let (_, out) = run_in(&t, &path, &step.command);
        outputs.push(out.replace(&here, README_T));
    }
    for (step, out) in steps.iter().zip(&outputs).rev() {
        let actual = normalize(out);
        let expected: Vec<String> = step.expected.iter().map(|l| normalize(l)).collect();
        let actual_lines: Vec<&str> = actual.lines().collect();
        let all = std::env::var_os("README_OVERWRITE").is_some_and(|v| v == "all");
        if matches(&expected, &actual_lines) && !all {
            continue;
        }
        wrong.push(format!(
            "README.md line {}: `{}` printed\n{}\nREADME shows\n{}\n",
            step.line,
            step.command,
            out,
            step.expected.join("\n")
        ));
        let first = step.line + step.command.lines().count() - 1;
        readme_lines.splice(
            first..first + step.expected.len(),
            out.lines().map(String::from),
        );
    }
    if std::env::var_os("README_OVERWRITE").is_some() {
        fs::write(root.join("README.md"), readme_lines.join("\n") + "\n").unwrap();
    }
    wrong.reverse();
    assert!(
        wrong.is_empty(),
        "{} of {} steps of README's tutorial differ (README_OVERWRITE=1 writes what they \
         printed into README.md):\n{}",
        wrong.len(),
        steps.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_readme_comparison_sees_a_difference() {
    let e = |s: &[&str]| s.iter().map(|l| normalize(l)).collect::<Vec<_>>();
    let a = normalize("checkpoint 5be18e709c36 on main: 203 files, 1.1 MiB (3 read)");
    assert!(matches(
        &e(&["checkpoint 785d5bf3f8d9 on main: 203 files, 9.9 KiB (3 read)"]),
        &[&a]
    ));
    assert!(!matches(
        &e(&["checkpoint 785d5bf3f8d9 on main: 204 files, 9.9 KiB (3 read)"]),
        &[&a]
    ));
    assert!(matches(
        &e(&["first", "...", "last"]),
        &["first", "x", "y", "last"]
    ));
    assert!(!matches(&e(&["first", "last"]), &["first", "x", "last"]));
    assert!(matches(
        &e(&["mounted at [..] (pid 1)"]),
        &["mounted at /x/y (pid <n>)"]
    ));
}
