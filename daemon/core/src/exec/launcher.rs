//! Which program every command is started through.
//!
//! Every command starts as the launcher (crate `dsh_launch`), which then `exec`s it. Two programs
//! can be that launcher:
//!
//! - the `dsh-launch` binary installed beside dshd ([`Launcher::beside_this_executable`]): small,
//!   so each command starts about a millisecond sooner than through dshd's own binary, which is
//!   large to load (docs/BENCHMARKS.md). dshd opens the file once and checks it (a regular file
//!   only its owner, root or this user, may change; it answers [`dsh_launch::VERSION_LINE`]);
//! - dshd's own binary (`/proc/self/exe` run as `dsh-launch`, [`Launcher::this_executable`]):
//!   when none is installed, or the one there is not one dshd may run. Always the running dshd's
//!   own version; nothing else to install.
//!
//! Either way dshd then runs a **sealed copy** it made at start ([`Launcher::sealed`]): the file's
//! bytes in a `memfd` that nothing can write, grow, shrink or make non-executable any more
//! (`F_SEAL_WRITE`, `F_SEAL_GROW`, `F_SEAL_SHRINK`, `F_SEAL_EXEC`, then `F_SEAL_SEAL`), run
//! through its descriptor (`/proc/self/fd/N`). Landlock does not govern file modes, so a
//! read-only command could `chmod 000` the user-owned file on disk (or rewrite it through another
//! link, or an upgrade could replace it); none of that reaches the copy, so it can neither stop
//! every later command nor put another program between dshd and its commands. The copy lives in
//! memory for dshd's life: the installed launcher's size, or dshd's own binary's when none is
//! installed (the log says how much).
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

/// How long an installed launcher may take to answer `--version` at dshd's start.
const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How dshd starts the launcher: its program and `argv[0]`.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// What is spawned: `/proc/self/exe`, or `/proc/self/fd/N` of the installed file.
    program: PathBuf,
    /// [`dsh_launch::ARG0`], on which dshd's `main` acts as the launcher.
    arg0: OsString,
    /// The installed launcher; `None` for dshd's own binary.
    installed: Option<Installed>,
    /// The sealed copy `program` names once [`Launcher::sealed`] made it (close-on-exec, so no
    /// command inherits it), and its size.
    sealed: Option<(Arc<OwnedFd>, u64)>,
}

/// Why a sealed copy of the launcher could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a sealed copy of {path}: {what}")]
pub struct SealError {
    /// The file being copied.
    pub path: PathBuf,
    /// Which step failed, and how.
    pub what: String,
}

/// An installed launcher, held open.
#[derive(Debug, Clone)]
struct Installed {
    /// Its real path, for people and for the sandbox's protected paths.
    path: PathBuf,
    /// The file: `program` names it through this descriptor (close-on-exec, so no command
    /// inherits it) until it is sealed. Shared by the executor's clones of the launcher.
    file: Arc<OwnedFd>,
}

/// Why an installed launcher is not used.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// Nothing of that name: the usual case when only `dshd` was installed.
    #[error("no dsh-launch at {0}")]
    Missing(PathBuf),
    /// dshd's own path cannot be read, or the file cannot be opened or inspected.
    #[error("cannot open {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// Someone other than its owner could change it, or its owner is another user.
    #[error("{path} {why}; dshd runs only a launcher no one but root or this user can change")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong, e.g. "is writable by its group".
        why: &'static str,
    },
    /// It is not the launcher dshd was built with.
    #[error(
        "{path} answered {answer:?} to --version, not {:?}",
        dsh_launch::VERSION_LINE
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Its first line of output, or how it failed.
        answer: String,
    },
}

impl Launcher {
    /// This process's own binary as the launcher: always the running dshd's own version.
    pub fn this_executable() -> Self {
        Self {
            program: PathBuf::from("/proc/self/exe"),
            arg0: dsh_launch::ARG0.into(),
            installed: None,
            sealed: None,
        }
    }

    /// The `dsh-launch` installed in the directory of this process's executable (symbolic links
    /// resolved), if dshd may run it ([`Launcher::installed`]).
    pub fn beside_this_executable() -> Result<Self, LauncherError> {
        let exe = Path::new("/proc/self/exe");
        let exe = std::fs::read_link(exe).map_err(|source| LauncherError::Open {
            path: exe.to_owned(),
            source,
        })?;
        Self::installed(&exe.with_file_name(dsh_launch::ARG0))
    }

    /// The launcher binary at `path`, opened once and checked: a regular file, owned by root or
    /// this user and writable by nobody else, that answers `--version` with
    /// [`dsh_launch::VERSION_LINE`]. The file opened is the one every later command runs.
    pub fn installed(path: &Path) -> Result<Self, LauncherError> {
        let open_error = |source: io::Error| LauncherError::Open {
            path: path.to_owned(),
            source,
        };
        // Non-blocking: opening a FIFO left under that name must not hold dshd's start (it is
        // then refused as not a regular file); a regular file ignores the flag.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let file = match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(file) => file,
            Err(rustix::io::Errno::NOENT) => return Err(LauncherError::Missing(path.to_owned())),
            Err(e) => return Err(open_error(e.into())),
        };
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(open_error)?;
        let unsafe_file = |why| LauncherError::Unsafe {
            path: real.clone(),
            why,
        };
        let stat = rustix::fs::fstat(&file).map_err(|e| open_error(e.into()))?;
        let mode = rustix::fs::FileType::from_raw_mode(stat.st_mode);
        if mode != rustix::fs::FileType::RegularFile {
            return Err(unsafe_file("is not a regular file"));
        }
        if stat.st_uid != 0 && stat.st_uid != rustix::process::geteuid().as_raw() {
            return Err(unsafe_file("belongs to another user"));
        }
        if stat.st_mode & 0o020 != 0 {
            return Err(unsafe_file("is writable by its group"));
        }
        if stat.st_mode & 0o002 != 0 {
            return Err(unsafe_file("is writable by everyone"));
        }
        let launcher = Self {
            program: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
            arg0: dsh_launch::ARG0.into(),
            installed: Some(Installed {
                path: real,
                file: Arc::new(file),
            }),
            sealed: None,
        };
        launcher.check_version()?;
        Ok(launcher)
    }

    /// The same launcher run from a sealed copy of its file, made now (see the module's doc).
    /// The copy is checked like the file was: it must answer `--version` (a system that refuses
    /// to run a `memfd`, `vm.memfd_noexec = 2`, fails here).
    pub fn sealed(&self) -> Result<Self, SealError> {
        let source = self.path().to_owned();
        let fail = |what: &str, e: &dyn std::fmt::Display| SealError {
            path: source.clone(),
            what: format!("{what}: {e}"),
        };
        let mut file = match &self.installed {
            Some(installed) => {
                // Read from the start through a descriptor of our own: the held one's offset is
                // shared with its clones.
                let path = format!("/proc/self/fd/{}", installed.file.as_raw_fd());
                std::fs::File::open(path).map_err(|e| fail("reopen", &e))?
            }
            None => std::fs::File::open(&self.program).map_err(|e| fail("open", &e))?,
        };
        let copy = memfd().map_err(|e| fail("memfd_create", &e))?;
        let mut out = std::fs::File::from(copy);
        let size = std::io::copy(&mut file, &mut out).map_err(|e| fail("copy", &e))?;
        let copy = OwnedFd::from(out);
        rustix::fs::fchmod(&copy, Mode::from_raw_mode(0o500)).map_err(|e| fail("chmod", &e))?;
        use rustix::fs::SealFlags;
        let content = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK;
        rustix::fs::fcntl_add_seals(&copy, content).map_err(|e| fail("seal", &e))?;
        // The mode's execute bits, sealed from Linux 6.3 on; before that only dshd (and root)
        // can reach the copy's descriptor to change them.
        match rustix::fs::fcntl_add_seals(&copy, SealFlags::EXEC) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(fail("seal", &e)),
        }
        rustix::fs::fcntl_add_seals(&copy, SealFlags::SEAL).map_err(|e| fail("seal", &e))?;
        let sealed = Self {
            program: PathBuf::from(format!("/proc/self/fd/{}", copy.as_raw_fd())),
            arg0: self.arg0.clone(),
            installed: self.installed.clone(),
            sealed: Some((Arc::new(copy), size)),
        };
        match sealed.ask_version() {
            Ok(answer) if answer == dsh_launch::VERSION_LINE => Ok(sealed),
            Ok(answer) => Err(fail("the copy answered", &format!("{answer:?}"))),
            Err(e) => Err(fail("the copy does not run", &e)),
        }
    }

    /// The size of the sealed copy in memory; `None` before [`Launcher::sealed`].
    pub fn sealed_size(&self) -> Option<u64> {
        self.sealed.as_ref().map(|(_, size)| *size)
    }

    /// Runs the opened file with `--version`, with nothing of dshd's environment, for at most
    /// [`VERSION_TIMEOUT`]: a program that hangs must not hold dshd's start.
    fn check_version(&self) -> Result<(), LauncherError> {
        let path = self.path().to_owned();
        let answer = match self.ask_version() {
            Ok(answer) => answer,
            Err(e) => format!("nothing ({e})"),
        };
        if answer == dsh_launch::VERSION_LINE {
            Ok(())
        } else {
            Err(LauncherError::Mismatch { path, answer })
        }
    }

    /// The first line `--version` prints, or why there is none.
    fn ask_version(&self) -> io::Result<String> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        use rustix::process::{Pid, PidfdFlags, pidfd_open};
        let mut child = std::process::Command::new(&self.program)
            .arg0(&self.arg0)
            .arg("--version")
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let exited = Pid::from_child(&child);
        let pidfd = pidfd_open(exited, PidfdFlags::empty())?;
        // A signal delivered meanwhile interrupts the wait (poll is never restarted): wait again
        // for what is left of the timeout, rather than call the launcher mute.
        let deadline = std::time::Instant::now() + VERSION_TIMEOUT;
        let ready = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let timeout = Timespec::try_from(left).map_err(io::Error::other)?;
            let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other?,
            }
        };
        if ready == 0 {
            child.kill()?;
            child.wait()?;
            return Err(io::Error::other(format!(
                "it did not exit within {} s",
                VERSION_TIMEOUT.as_secs()
            )));
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!("it ended with {}", out.status)));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned())
    }

    /// The program to spawn.
    pub(crate) fn program(&self) -> &Path {
        &self.program
    }

    /// The program's `argv[0]`.
    pub(crate) fn arg0(&self) -> &OsString {
        &self.arg0
    }

    /// The file people know it by: the installed launcher's real path, else the program.
    pub fn path(&self) -> &Path {
        self.installed
            .as_ref()
            .map_or(&self.program, |installed| &installed.path)
    }

    /// The installed launcher's real path; `None` when dshd runs its own binary as the launcher.
    pub fn installed_path(&self) -> Option<&Path> {
        self.installed
            .as_ref()
            .map(|installed| installed.path.as_path())
    }
}

/// An empty, sealable, executable `memfd`. `MFD_EXEC` says so explicitly where the kernel knows
/// it (6.3 on; a `vm.memfd_noexec` of 1 would otherwise make it non-executable); older kernels
/// refuse the flag, and their memfds are executable anyway.
fn memfd() -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, memfd_create};
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    match memfd_create(dsh_launch::ARG0, flags | MemfdFlags::EXEC) {
        Err(rustix::io::Errno::INVAL) => memfd_create(dsh_launch::ARG0, flags),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn built() -> PathBuf {
        crate::test_support::launcher_binary().to_owned()
    }

    fn copy_to(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join("dsh-launch");
        std::fs::copy(built(), &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_built_launcher_is_accepted_and_named_by_its_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = copy_to(dir.path(), 0o755);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let launcher = Launcher::installed(&link).unwrap();
        let real = path.canonicalize().unwrap();
        assert_eq!(launcher.installed_path(), Some(real.as_path()));
        assert_eq!(launcher.path(), real);
        assert!(launcher.program().starts_with("/proc/self/fd/"));
    }

    #[test]
    fn a_launcher_others_may_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (mode, why) in [
            (0o775, "is writable by its group"),
            (0o757, "is writable by everyone"),
        ] {
            let path = copy_to(dir.path(), mode);
            let error = Launcher::installed(&path).unwrap_err().to_string();
            assert!(error.contains(why), "{mode:o}: {error}");
        }
    }

    #[test]
    fn a_program_that_answers_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dsh-launch");
        // A script, as a careless install might leave: run through its descriptor it cannot
        // even read itself, and either way it does not answer the version line.
        std::fs::write(&path, "#!/bin/sh\necho dsh-launch 0.0.1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        match Launcher::installed(&path) {
            Err(LauncherError::Mismatch { answer, .. }) => {
                assert_ne!(answer, dsh_launch::VERSION_LINE)
            }
            other => panic!("{other:?}"),
        }
        // One that never answers is given up on, not waited for. (A program, not a script: run
        // through its descriptor, a script cannot even be read by its interpreter.)
        let source = dir.path().join("hang.c");
        std::fs::write(
            &source,
            "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n",
        )
        .unwrap();
        let cc = std::process::Command::new("cc")
            .arg("-o")
            .arg(&path)
            .arg(&source)
            .status()
            .unwrap_or_else(|e| panic!("cc ({e}): install it, e.g. apt-get install gcc"));
        assert!(cc.success());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let Err(LauncherError::Mismatch { answer, .. }) = Launcher::installed(&path) else {
            panic!("a launcher that hangs was accepted")
        };
        assert!(answer.contains("did not exit within 2 s"), "{answer}");
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let Err(LauncherError::Unsafe { why, .. }) = Launcher::installed(&fifo) else {
            panic!("a FIFO was accepted")
        };
        assert_eq!(why, "is not a regular file");
        let missing = dir.path().join("none");
        assert!(matches!(
            Launcher::installed(&missing),
            Err(LauncherError::Missing(p)) if p == missing
        ));
    }

    #[test]
    fn the_file_opened_at_start_is_the_one_that_runs_after_it_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = copy_to(dir.path(), 0o755);
        let launcher = Launcher::installed(&path).unwrap();
        // An upgrade renames another file over it.
        let other = dir.path().join("new");
        std::fs::write(&other, "#!/bin/sh\nexit 3\n").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&other, &path).unwrap();
        launcher.check_version().unwrap();
    }

    /// The sealed copy runs whatever happens to the file afterwards: made non-executable,
    /// rewritten in place, removed. And nobody can write to the copy itself.
    #[test]
    fn a_sealed_copy_runs_whatever_happens_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = copy_to(dir.path(), 0o755);
        let sealed = Launcher::installed(&path).unwrap().sealed().unwrap();
        assert_eq!(sealed.path(), path.canonicalize().unwrap());
        assert!(sealed.sealed_size().unwrap() > 0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        sealed.check_version().unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&path, "#!/bin/sh\nexit 3\n").unwrap();
        sealed.check_version().unwrap();
        std::fs::remove_file(&path).unwrap();
        sealed.check_version().unwrap();
        // Not even through its own descriptor, where the mode (0500) lets root open it.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .open(sealed.program())
            .and_then(|mut copy| std::io::Write::write_all(&mut copy, b"x"));
        assert!(written.is_err(), "the sealed copy was written");
        let grown = std::fs::OpenOptions::new()
            .append(true)
            .open(sealed.program())
            .and_then(|copy| copy.set_len(sealed.sealed_size().unwrap() + 1));
        assert!(grown.is_err(), "the sealed copy grew");
    }
}
