//! A fold with the workspace mounted elsewhere: a bind mount, or a copy in another mount
//! namespace (which copies every mount of the machine: hence this binary), holds the upper
//! layer while a process is inside it, and the fold says who.

use crate::support::*;

use std::fs;
use std::path::Path;

fn populate(room: &Path) {
    write(&room.join("notes.md"), b"# notes\n");
    write(&room.join("sub/deep/a.txt"), b"a\n");
}

#[test]
fn a_workspace_mounted_elsewhere_is_not_folded_from_under_it() {
    let _one = crate::serial();
    let w = Workspace::new(populate);
    // A bind mount of the room (as a container given it would have): what is done through
    // it is out of the fold's reach, so the upper it shows stays.
    let bind = w.tmp.path().join("bind");
    fs::create_dir_all(&bind).unwrap();
    let o = std::process::Command::new("mount")
        .args(["--bind", w.room(), s(&bind)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}",
        describe_output("mount --bind", &o)
    );
    fs::write(w.path("notes.md"), "# notes\nbound\n").unwrap();
    let r = w.checkpoint_json("bound");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert!(
        r["fold"]["reason"].as_str().unwrap().contains(s(&bind)),
        "{r}"
    );
    assert_eq!(
        fs::read_to_string(bind.join("notes.md")).unwrap(),
        "# notes\nbound\n"
    );
    let o = std::process::Command::new("umount")
        .arg(&bind)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", describe_output("umount", &o));
    // A copy in another mount namespace (unshare -m copies every mount) holds it only while
    // a process there is inside it, and is then named.
    let in_ns = |cd: &str| {
        let script = format!("{cd}echo ready; exec sleep 600");
        let mut c = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(c.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "ready\n");
        KillOnDrop(c)
    };
    let idle = in_ns("");
    let r = ok_json(["checkpoint", w.room(), "-m", "idle copy", "--allow-empty"]);
    assert_eq!(r["fold"]["folded"], true, "{r}");
    drop(idle);
    let ns = in_ns(&format!("cd {}/sub && ", w.room()));
    let r = ok_json(["checkpoint", w.room(), "-m", "again", "--allow-empty"]);
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert!(
        r["fold"]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", ns.0.id())),
        "{r}"
    );
    drop(ns);
    let r = ok_json(["checkpoint", w.room(), "-m", "free", "--allow-empty"]);
    assert_eq!(r["fold"]["folded"], true, "{r}");
}
