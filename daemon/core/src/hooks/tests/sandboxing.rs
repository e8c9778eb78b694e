//! Where hooks run (`sandboxing.rs`) and the words it looks at (`words.rs`): the rule on real
//! directories, links and `PATH`s, and the confined run end to end through the executor.

use std::os::unix::fs::symlink;

use serde_json::json;

use super::*;
use crate::hooks::sandboxing::{Hook, HookSandbox, Placement, Reach};
use crate::hooks::words::{Word, split};
use crate::sandbox::{Network, SandboxMode, SandboxPolicy, SandboxSettings};

fn vars(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/ada".into()),
        "CLAUDE_PROJECT_DIR" => Some("/w".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn texts(command: &str) -> Vec<String> {
    split(command, &vars)
        .unwrap()
        .into_iter()
        .map(|w| w.text)
        .collect()
}

fn word(text: &str, opaque: bool, glob: bool) -> Word {
    Word {
        text: text.into(),
        opaque,
        glob,
    }
}

#[test]
fn words_are_what_bash_would_pass_after_the_expansions_dsh_knows() {
    assert_eq!(
        texts(r#""${CLAUDE_PROJECT_DIR}"/.claude/hooks/x.sh --flag"#),
        ["/w/.claude/hooks/x.sh", "--flag"]
    );
    assert_eq!(
        texts(r#"a'b c'd "e $HOME \"q\" \$x" \  ~/bin ~ x~"#),
        [
            "ab cd",
            "e /home/ada \"q\" $x",
            " ",
            "/home/ada/bin",
            "/home/ada",
            "x~"
        ]
    );
    assert_eq!(
        texts("one;two|three&&four>five<six (seven) # a comment\neight"),
        [
            "one", "two", "three", "four", "five", "six", "seven", "eight"
        ]
    );
    assert_eq!(
        texts("${NOPE:-$HOME/log} ${EMPTY:-d} ${HOME:+set} ${EMPTY+set} $'a\\tb'"),
        ["/home/ada/log", "d", "set", "set", "a\tb"]
    );
    // Substitutions: the word is opaque, the commands inside are words too.
    assert_eq!(
        split(
            r#""$(git rev-parse --show-toplevel 2>/dev/null || pwd)/.codex/hooks/a.sh""#,
            &vars
        )
        .unwrap(),
        [
            word("git", false, false),
            word("rev-parse", false, false),
            word("--show-toplevel", false, false),
            word("2", false, false),
            word("/dev/null", false, false),
            word("pwd", false, false),
            word("/.codex/hooks/a.sh", true, false),
        ]
    );
    assert_eq!(
        split("`cat /w/x` $1 ${#X} $((1+2)) ~user/x *.sh '*'", &vars).unwrap(),
        [
            word("cat", false, false),
            word("/w/x", false, false),
            word("", true, false),
            word("", true, false),
            word("", true, false),
            word("1+2", false, false),
            word("", true, false),
            word("/x", true, false),
            word("*.sh", false, true),
            word("*", false, false),
        ]
    );
    assert_eq!(
        texts("case $HOME in /home/*) echo home;; *) echo other;; esac"),
        [
            "case",
            "/home/ada",
            "in",
            "/home/*",
            "echo",
            "home",
            "*",
            "echo",
            "other",
            "esac"
        ]
    );
    assert_eq!(texts("$UNKNOWN"), [""]);
    assert!(split("$UNKNOWN", &vars).unwrap()[0].opaque);
}

#[test]
fn a_command_bash_would_not_parse_the_same_way_does_not_split() {
    for bad in [
        "echo 'open",
        "echo \"open",
        "echo $(open",
        "echo `open",
        "echo ${open",
        "echo $((1+2)",
        "echo $'open",
    ] {
        assert!(split(bad, &vars).is_err(), "{bad:?}");
    }
    let deep = format!("{}x{}", "$(".repeat(40), ")".repeat(40));
    assert!(split(&deep, &vars).is_err());
}

/// A workspace with a hook script, a directory outside it, and the settings of a daemon.
struct Place {
    tmp: tempfile::TempDir,
    work: PathBuf,
    outside: PathBuf,
    settings: SandboxSettings,
}

impl Place {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("work")).unwrap();
        let work = tmp.path().join("work").canonicalize().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("bin")).unwrap();
        std::fs::create_dir_all(work.join("bin")).unwrap();
        for dir in [&work, &outside] {
            std::fs::write(dir.join("bin/tool"), "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.join("bin/tool"), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let settings = SandboxSettings {
            writable_roots: vec![tmp.path().join("cache")],
            tmp_roots: vec![tmp.path().join("sandbox-tmp")],
            ..SandboxSettings::default()
        };
        Self {
            tmp,
            work,
            outside,
            settings,
        }
    }

    fn reach(&self, mode: SandboxMode, hooks: HookSandbox) -> Reach {
        let policy = SandboxPolicy {
            mode,
            network: Network::Off,
        };
        Reach::of(policy, &self.work, &self.settings, hooks).unwrap()
    }

    /// Where `command` of a hook file at `file` runs for a workspace-write agent, with `PATH`.
    fn place_with(
        &self,
        reach: &Reach,
        file: &Path,
        http: bool,
        command: &str,
        path: &str,
    ) -> Placement {
        let work = self.work.display().to_string();
        let path = path.to_owned();
        let vars = move |name: &str| match name {
            "CLAUDE_PROJECT_DIR" | "PWD" => Some(work.clone()),
            "HOME" => Some("/home/nobody-here".to_owned()),
            "PATH" => Some(path.clone()),
            _ => None,
        };
        reach.place(&Hook {
            file,
            http,
            command,
            cwd: &self.work,
            vars: &vars,
        })
    }

    fn place(&self, command: &str) -> Placement {
        let reach = self.reach(SandboxMode::WorkspaceWrite, HookSandbox::Auto);
        let file = self.tmp.path().join("settings.json");
        self.place_with(&reach, &file, false, command, &self.system_path())
    }

    /// A `PATH` of the system's directories and ours outside the workspace.
    fn system_path(&self) -> String {
        format!("/usr/bin:/bin:{}", self.outside.join("bin").display())
    }
}

fn confined(placement: &Placement, naming: &str) {
    match placement {
        Placement::Sandbox(why) => assert!(why.contains(naming), "{why:?} lacks {naming:?}"),
        other => panic!("not confined ({naming}): {other:?}"),
    }
}

#[test]
fn a_hook_naming_what_the_agent_can_write_runs_in_its_sandbox() {
    let p = Place::new();
    let w = p.work.display();
    let o = p.outside.display();
    for (command, naming) in [
        (
            r#""${CLAUDE_PROJECT_DIR}"/.claude/hooks/x.sh"#.to_owned(),
            ".claude/hooks/x.sh",
        ),
        ("$PWD/x.sh".to_owned(), "x.sh"),
        ("./check.sh".to_owned(), "check.sh"),
        ("python3 hooks/x.py".to_owned(), "hooks/x.py"),
        (format!("bash {w}/bin/tool"), "bin/tool"),
        (format!("jq -c . >> {w}/log"), "/log"),
        (format!("tool --config={w}/c.toml"), "c.toml"),
        (format!("tool -I{w}/inc"), "inc"),
        (format!("env PATH={o}/bin:{w}/bin tool"), "bin"),
        (format!("bash -c 'cat {w}/x'"), "/x"),
        (format!("bash -c \"sh -c '{w}/deep'\""), "deep"),
        (
            "\"$(git rev-parse --show-toplevel)\"/x.sh".to_owned(),
            "x.sh",
        ),
        ("$SOMEWHERE/x.sh".to_owned(), "x.sh"),
        (format!("{o}/*/x"), "/x"),
        ("cat *.log".to_owned(), "*.log"),
        (format!("cat file://{w}/x"), "/x"),
        (format!("{}/cache/x", p.tmp.path().display()), "cache"),
        (
            format!("{}/sandbox-tmp/agent/x", p.tmp.path().display()),
            "sandbox-tmp",
        ),
        ("echo 'unclosed".to_owned(), "cannot be split"),
        // As far as dsh can tell, a word with a `/` is a path, a jq filter's too.
        ("jq -r '.tool_input.command // empty'".to_owned(), "//"),
    ] {
        confined(&p.place(&command), naming);
    }
    // An existing entry of the cwd, named bare.
    std::fs::write(p.work.join("Makefile"), "").unwrap();
    confined(&p.place("make -f Makefile"), "Makefile");
}

#[test]
fn a_hook_naming_nothing_the_agent_can_write_runs_as_the_user() {
    let p = Place::new();
    let o = p.outside.display();
    for command in [
        format!("{o}/bin/tool --flag"),
        format!("jq -c . >> '{o}/log' 2>/dev/null"),
        "tool; echo \"$(date) done\" >> ~/log".to_owned(),
        "curl -s https://hooks.example.com/a/b -d @-".to_owned(),
        "cat missing-name".to_owned(),
        "jq . ..".to_owned(),
        "cd .. && ls".to_owned(),
    ] {
        assert_eq!(p.place(&command), Placement::User, "{command}");
    }
}

#[test]
fn links_count_where_they_are_as_well_as_where_they_lead() {
    let p = Place::new();
    let o = p.outside.display();
    // Outside, leading in.
    symlink(&p.work, p.outside.join("into-work")).unwrap();
    confined(&p.place(&format!("{o}/into-work/x.sh")), "x.sh");
    // In the workspace, leading out: the agent can repoint it.
    symlink(p.outside.join("bin"), p.work.join("out")).unwrap();
    confined(&p.place(&format!("{}/out/tool", p.work.display())), "out");
    // A bare name in the cwd that links out is still the agent's.
    confined(&p.place("cat out"), "out");
    // A loop is not followed forever, and counts.
    symlink(p.outside.join("b"), p.outside.join("a")).unwrap();
    symlink(p.outside.join("a"), p.outside.join("b")).unwrap();
    confined(&p.place(&format!("cat {o}/a/x")), "links");
}

#[test]
fn path_lookups_count_when_the_agent_could_put_the_program_first() {
    let p = Place::new();
    let reach = p.reach(SandboxMode::WorkspaceWrite, HookSandbox::Auto);
    let file = p.tmp.path().join("settings.json");
    let (w, o) = (p.work.join("bin"), p.outside.join("bin"));
    let place = |path: String, command: &str| p.place_with(&reach, &file, false, command, &path);
    // Found outside before any writable entry: as the user.
    assert_eq!(
        place(format!("{}:{}", o.display(), w.display()), "tool"),
        Placement::User
    );
    // A writable entry first, whether the program is there yet or not.
    confined(
        &place(format!("{}:{}", w.display(), o.display()), "tool"),
        "PATH",
    );
    confined(
        &place(format!("{}:{}", w.display(), o.display()), "other"),
        "PATH",
    );
    // An empty or relative entry is the workspace.
    confined(&place(format!(":{}", o.display()), "tool"), "PATH");
    confined(&place(format!("bin:{}", o.display()), "tool"), "PATH");
    // The program found is a link into the workspace.
    symlink(p.work.join("bin/tool"), p.outside.join("bin/linked")).unwrap();
    confined(&place(o.display().to_string(), "linked"), "linked");
}

#[test]
fn hook_files_modes_and_http_hooks() {
    let p = Place::new();
    let outside_file = p.tmp.path().join("settings.json");
    let project_file = p.work.join(".claude/settings.json");
    let path = p.system_path();
    let ww = p.reach(SandboxMode::WorkspaceWrite, HookSandbox::Auto);

    // A hook file the agent can write confines whatever its command is.
    confined(
        &p.place_with(&ww, &project_file, false, "echo hi", &path),
        ".claude/settings.json",
    );
    // Its HTTP hooks are not run; those of other files are.
    assert!(matches!(
        p.place_with(&ww, &project_file, true, "http://127.0.0.1:1/x", &path),
        Placement::Refused(why) if why.contains("HTTP hook") && why.contains(".claude/settings.json")
    ));
    assert_eq!(
        p.place_with(&ww, &outside_file, true, "http://127.0.0.1:1/x", &path),
        Placement::User
    );

    // `always`: every command hook, never an HTTP hook of a file the agent cannot write.
    let always = p.reach(SandboxMode::WorkspaceWrite, HookSandbox::Always);
    confined(
        &p.place_with(&always, &outside_file, false, "echo hi", &path),
        "hooks.sandbox",
    );
    assert_eq!(
        p.place_with(&always, &outside_file, true, "http://127.0.0.1:1/x", &path),
        Placement::User
    );

    // Read-only: the workspace is not the agent's to write.
    let ro = p.reach(SandboxMode::ReadOnly, HookSandbox::Auto);
    let script = format!("{}/x.sh", p.work.display());
    assert_eq!(
        p.place_with(&ro, &project_file, false, &script, &path),
        Placement::User
    );

    // Mode off with network off: the agent writes what the user can, every file included.
    let off = p.reach(SandboxMode::Off, HookSandbox::Auto);
    confined(
        &p.place_with(&off, &outside_file, false, "echo hi", &path),
        "mode off",
    );
    assert!(matches!(
        p.place_with(&off, &outside_file, true, "http://127.0.0.1:1/x", &path),
        Placement::Refused(_)
    ));

    // An unconfined agent has no reach: its hooks run as the user.
    assert!(
        Reach::of(
            SandboxPolicy::UNCONFINED,
            &p.work,
            &p.settings,
            HookSandbox::Always
        )
        .is_none()
    );
}

/// Through the engine and the launcher: the hook of a confined agent that runs a workspace
/// script cannot write outside, and its record says why it was confined; the other hook of the
/// event writes outside.
#[tokio::test]
async fn a_confined_agents_hook_runs_through_the_launcher_in_its_sandbox() {
    let fx = Fx::new();
    let outside = fx.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(
        fx.cwd.join("hook.sh"),
        format!(
            "cat > /dev/null\necho x >> '{}/from-script' || exit 3\n",
            outside.display()
        ),
    )
    .unwrap();
    let hooks = fx.cc(&json!({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "bash \"$CLAUDE_PROJECT_DIR/hook.sh\""},
        {"type": "command", "command": format!("cat > /dev/null; echo x >> '{}/from-user'", outside.display())},
    ]}]}}));
    let ctx = HookContext {
        sandbox: SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            network: Network::Off,
        },
        ..fx.ctx()
    };
    let run = hooks
        .run(
            &ctx,
            HookEvent::Stop {
                stop_hook_active: false,
                last_assistant_message: None,
            },
        )
        .await;
    assert!(!outside.join("from-script").exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("from-user")).unwrap(),
        "x\n"
    );
    let results: Vec<&EventData> = run
        .records
        .iter()
        .filter(|r| matches!(r, EventData::HookResult { .. }))
        .collect();
    let EventData::HookResult {
        exit_code, sandbox, ..
    } = results[0]
    else {
        unreachable!()
    };
    assert_eq!(*exit_code, Some(3), "{results:?}");
    let sandbox = sandbox.as_ref().unwrap();
    assert_eq!(
        (sandbox.mode.as_str(), sandbox.network.as_str()),
        ("workspace-write", "off")
    );
    assert!(sandbox.reason.contains("hook.sh"), "{}", sandbox.reason);
    let EventData::HookResult { sandbox, .. } = results[1] else {
        unreachable!()
    };
    assert_eq!(sandbox, &None);
}

/// A hook that must run in its agent's sandbox, where the kernel cannot enforce it (an ABI above
/// this build's, as `sandbox.landlock_abi` would ask), does not run at all: never as the user.
#[tokio::test]
async fn a_hook_whose_sandbox_cannot_be_enforced_does_not_run() {
    let fx = Fx::new();
    let config = ExecConfig {
        spill_dir: fx.path("spill-2"),
        sandbox: SandboxSettings {
            tmp_roots: vec![fx.path("sandbox-tmp")],
            landlock_abi: Some(crate::sandbox::KNOWN_ABI + 1),
            ..SandboxSettings::default()
        },
        ..ExecConfig::default()
    };
    let executor =
        Arc::new(Executor::with_base_env(config, super::ambient(fx.tmp.path())).unwrap());
    std::fs::write(
        fx.cwd.join("hook.sh"),
        "touch \"$CLAUDE_PROJECT_DIR/ran\"\n",
    )
    .unwrap();
    let file = fx.file(
        "cc/settings.json",
        &json!({"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": "bash \"$CLAUDE_PROJECT_DIR/hook.sh\""},
        ]}]}}),
    );
    let hooks = Hooks::new(
        HookSettings {
            claude_code: vec![file],
            ..HookSettings::default()
        },
        executor,
        fx.persistence.clone(),
    );
    let ctx = HookContext {
        sandbox: SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            network: Network::On,
        },
        ..fx.ctx()
    };
    let run = hooks
        .run(
            &ctx,
            HookEvent::Stop {
                stop_hook_active: false,
                last_assistant_message: None,
            },
        )
        .await;
    assert!(!fx.cwd.join("ran").exists(), "the hook ran");
    let Some(EventData::HookResult {
        decision,
        stderr_summary,
        sandbox,
        ..
    }) = run.records.get(1)
    else {
        panic!("{run:?}")
    };
    assert_eq!(decision, "error");
    let said = stderr_summary.as_deref().unwrap_or_default();
    assert!(said.contains("cannot be enforced"), "{said}");
    assert!(
        sandbox
            .as_ref()
            .is_some_and(|s| s.reason.contains("hook.sh")),
        "{sandbox:?}"
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Text made mostly of what the splitter reacts to.
    fn shellish() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec![
                    "'",
                    "\"",
                    "\\",
                    "$",
                    "(",
                    ")",
                    "{",
                    "}",
                    "`",
                    "~",
                    "*",
                    "[",
                    "#",
                    ";",
                    "|",
                    "&",
                    "<",
                    ">",
                    " ",
                    "\n",
                    "$(",
                    "${",
                    "$((",
                    "))",
                    ":-",
                    "=",
                    "/",
                    "HOME",
                    "CLAUDE_PROJECT_DIR",
                    "a",
                    "é",
                ])
                .prop_map(str::to_owned),
                "(?s).{0,3}",
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        /// Any command splits or is refused, never a panic, and a split is a bounded list.
        #[test]
        fn any_command_splits_or_is_refused(command in prop_oneof![shellish(), "(?s).{0,200}"]) {
            if let Ok(words) = split(&command, &vars) {
                prop_assert!(words.len() <= command.chars().count() + 1);
            }
        }

        /// Placing any command never panics (on the test's real directories).
        #[test]
        fn any_command_is_placed(command in shellish()) {
            let p = Place::new();
            let _ = p.place(&command);
        }
    }
}
