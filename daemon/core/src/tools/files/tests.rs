#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::diff::unified;
use super::edit::apply;
use super::read::numbered;
use super::write::keep_endings;
use super::*;
use crate::call::{Tool, ToolDetail, ToolOutput};

#[test]
fn edits_need_a_unique_match_and_keep_crlf() {
    let p = Path::new("/f");
    assert_eq!(
        apply("a b a", "b", "c", false, p).unwrap(),
        ("a c a".into(), 1)
    );
    let several = apply("a b a", "a", "c", false, p).unwrap_err();
    assert!(
        several.contains("occurs 2 times") && several.contains("replace_all"),
        "{several}"
    );
    assert_eq!(
        apply("a b a", "a", "c", true, p).unwrap(),
        ("c b c".into(), 2)
    );
    assert!(
        apply("abc", "x", "y", false, p)
            .unwrap_err()
            .contains("not found")
    );
    // A CRLF file matches the model's LF strings and stays CRLF, its final newline included.
    assert_eq!(
        apply("one\r\ntwo\r\n", "one\ntwo", "1\n2\n3", false, p)
            .unwrap()
            .0,
        "1\r\n2\r\n3\r\n"
    );
    // Mixed endings are matched as they are.
    assert_eq!(
        apply("a\r\nb\nc", "b\nc", "x", false, p).unwrap().0,
        "a\r\nx"
    );
}

#[test]
fn writes_keep_crlf_and_the_final_newline() {
    assert_eq!(keep_endings("a\r\nb\r\n", "x\ny"), "x\r\ny\r\n");
    assert_eq!(keep_endings("a\n", "x"), "x\n");
    assert_eq!(keep_endings("a", "x"), "x");
    assert_eq!(keep_endings("a\n", ""), "");
}

#[test]
fn diffs_are_unified_with_context_and_name_new_files() {
    let p = Path::new("/w/f.txt");
    let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
    let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
    assert_eq!(
        unified(p, Some(old), new),
        "--- /w/f.txt\n+++ /w/f.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
    );
    assert_eq!(
        unified(p, None, "a\nb"),
        "--- /dev/null\n+++ /w/f.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n"
    );
    assert_eq!(unified(p, Some("same\n"), "same\n"), "");
}

#[test]
fn lines_are_numbered_like_cat_n() {
    assert_eq!(numbered("a\r\nb\n", 7), "     7\ta\n     8\tb\n");
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    files: Arc<FileAccess>,
    exec: ToolExecution,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    std::fs::create_dir(&dir).unwrap();
    let executor = Arc::new(
        crate::exec::Executor::with_base_env(
            crate::exec::ExecConfig {
                spill_dir: tmp.path().join("spill"),
                default_timeout: Duration::from_secs(30),
                ..crate::exec::ExecConfig::default()
            },
            std::env::vars_os(),
        )
        .unwrap(),
    );
    let exec = ToolExecution {
        call_id: "c1".into(),
        tool_name: "edit".into(),
        agent: None,
        turn: Some(1),
        step: Some(1),
        cwd: dir.clone(),
        cancel: tokio_util::sync::CancellationToken::new(),
        output: None,
    };
    Fixture {
        _tmp: tmp,
        dir,
        files: FileAccess::new(executor),
        exec,
    }
}

impl Fixture {
    async fn read(&self, args: serde_json::Value) -> ToolOutput {
        ReadTool::new(self.files.clone())
            .call(&self.exec, &args)
            .await
    }
    async fn edit(&self, args: serde_json::Value) -> ToolOutput {
        Changing(EditTool::new(self.files.clone()))
            .call(&self.exec, &args)
            .await
    }
    async fn write(&self, args: serde_json::Value) -> ToolOutput {
        Changing(WriteTool::new(self.files.clone()))
            .call(&self.exec, &args)
            .await
    }
}

/// Through the real launcher: a read numbers lines, an edit needs a read and a file unchanged
/// since, and keeps mode and CRLF endings; the change carries the diff and both hashes.
#[tokio::test]
async fn read_edit_write_through_the_launcher() {
    let f = fixture();
    let path = f.dir.join("a.txt");
    std::fs::write(&path, "alpha\r\nbeta\r\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();

    let edit = json!({"file_path": "a.txt", "old_string": "beta", "new_string": "gamma"});
    let out = f.edit(edit.clone()).await;
    assert!(out.is_error && !out.ran, "{out:?}");
    assert!(
        out.content.contains("read it with the read tool first"),
        "{out:?}"
    );

    let out = f.read(json!({"file_path": path})).await;
    assert_eq!(out.content, "     1\talpha\n     2\tbeta\n", "{out:?}");

    let out = f.edit(edit.clone()).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"alpha\r\ngamma\r\n");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
    let Some(ToolDetail::File {
        change: Some(change),
        ..
    }) = out.detail
    else {
        panic!("{out:?}")
    };
    assert!(
        change.diff.contains("-beta\r\n+gamma\r\n"),
        "{}",
        change.diff
    );
    assert_ne!(change.old_hash, Some(change.new_hash.clone()));

    // The agent's own edit counts as seen; someone else's change does not.
    std::fs::write(&path, "changed\n").unwrap();
    let out = f
        .edit(json!({"file_path": "a.txt", "old_string": "gamma", "new_string": "delta"}))
        .await;
    assert!(out.is_error, "{out:?}");
    assert!(
        out.content.contains("changed since you last read it"),
        "{out:?}"
    );
    let out = f.write(json!({"file_path": "a.txt", "content": "x"})).await;
    assert!(
        out.content.contains("changed since you last read it"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"changed\n");

    // A new file needs no read; its parent must exist.
    let out = f
        .write(json!({"file_path": "new.txt", "content": "n\n"}))
        .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(std::fs::read(f.dir.join("new.txt")).unwrap(), b"n\n");
    let out = f
        .write(json!({"file_path": "no/dir/x", "content": "n"}))
        .await;
    assert!(
        out.is_error && out.content.contains("does not exist"),
        "{out:?}"
    );
}

/// What an agent read is forgotten when it closes: its files must be read again.
#[tokio::test]
async fn a_closed_agents_reads_are_forgotten() {
    let f = fixture();
    std::fs::write(f.dir.join("f"), "a\n").unwrap();
    let agent = dsh_session::SessionId::new_v7();
    let header = dsh_session::SessionHeader::new(agent.clone(), f.dir.clone(), 0);
    let mut f = f;
    f.exec.agent = Some(crate::call::AgentContext {
        header: Arc::new(header),
        root: agent.clone(),
        sandbox: SandboxPolicy::UNCONFINED,
        env: None,
    });
    assert!(!f.read(json!({"file_path": "f"})).await.is_error);
    let tools = crate::tools::ToolSet::new().with(Arc::new(ReadTool::new(f.files.clone())));
    tools.release(&agent);
    let out = f
        .edit(json!({"file_path": "f", "old_string": "a", "new_string": "b"}))
        .await;
    assert!(out.content.contains("have not read"), "{out:?}");
}

#[tokio::test]
async fn bad_input_names_the_field_and_special_files_are_refused() {
    let f = fixture();
    let out = f.read(json!({"file_path": 3})).await;
    assert!(out.content.contains("`file_path`"), "{out:?}");
    let out = f.read(json!({"file_path": "x", "offset": 0})).await;
    assert!(out.content.contains("`offset`"), "{out:?}");
    let out = f
        .edit(json!({"file_path": "x", "old_string": "a", "new_string": "a"}))
        .await;
    assert!(out.content.contains("`old_string`"), "{out:?}");
    let out = f.write(json!({"file_path": "x"})).await;
    assert!(out.content.contains("`content`"), "{out:?}");
    let out = f.read(json!({"file_path": "/dev/zero"})).await;
    assert!(
        out.is_error && out.content.contains("character device"),
        "{out:?}"
    );
    std::fs::write(f.dir.join("bin"), b"a\0b").unwrap();
    let out = f.read(json!({"file_path": "bin"})).await;
    assert!(out.is_error && out.content.contains("binary"), "{out:?}");
    std::fs::write(f.dir.join("latin1"), b"caf\xe9\n").unwrap();
    let out = f.read(json!({"file_path": "latin1"})).await;
    assert!(
        out.is_error && out.content.contains("not valid UTF-8"),
        "{out:?}"
    );
}
